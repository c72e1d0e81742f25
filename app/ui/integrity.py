"""Streamlit helpers of the Integrity page (and the Timeline's deep links).

The page shows the one set of findings the index holds (lastgood.integrity.verify.store_findings),
the health and last good checkpoint of every run (lastgood.integrity.health.run_health), and runs
re-verification in the background (lastgood.integrity.background) with progress polled by a fragment.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import urlencode

import streamlit as st

from lastgood import ui
from lastgood.integrity import background
from lastgood.integrity.health import run_health
from lastgood.pages import page_path
from lastgood.index.queries import checkpoint_handle
from lastgood.redact import redact_text
from lastgood.integrity.verify import store_findings

if TYPE_CHECKING:  # imported where used: the sidebar's check runs after every page, the Overview's too
    import pandas as pd

RECOVERY_PAGE = page_path("recovery")
TIMELINE_URL = "timeline"
POLL_SECONDS = 1.0
SEVERITIES = ("error", "warning", "info")
DEPTH_LABELS = {"catalog": "listing", "structure": "structure", "lineage": "lineage", "content": "content",
                "data": "data"}
RESTORE_ACTION = "restore-last-good"
AUTO_CHECK_DELAY = 3.0  # seconds: the first screen renders before the automatic check takes CPU
AUTO_CHECK_ENV = "LASTGOOD_BACKGROUND_CHECK"  # set by `lastgood ui`: read never-read blobs in the background

# session-state keys
FILTER_KEY = "integrity_filter_{}"
RESTORE_RUN_KEY = "integrity_restore_run"
FINISHED_KEY = "integrity_finished_job"
LINK_APPLIED_KEY = "integrity_link_applied"


@dataclass
class IntegrityData:
    findings: pd.DataFrame
    runs: pd.DataFrame


def integrity_data(ref: ui.StoreRef) -> IntegrityData:
    return _integrity_data(ref.index_path, ref.store_id)


@st.cache_data(ttl=ui.CACHE_TTL, max_entries=16, show_spinner=False)
def _integrity_data(index_path: str, store_id: int) -> IntegrityData:
    import pandas as pd

    catalog = ui._catalog(index_path)
    runs = pd.DataFrame.from_records(run_health(catalog, store_id))
    findings = pd.DataFrame.from_records(store_findings(catalog, store_id))
    if findings.empty:
        findings = pd.DataFrame(columns=["run_id", "namespace", "checkpoint_id", "check", "severity",
                                         "message", "depth", "found_at"])
    agents = dict(zip(runs["run_id"], runs["agent"])) if not runs.empty else {}
    findings["agent"] = findings["run_id"].map(agents)
    findings["message"] = findings["message"].map(lambda m: redact_text(str(m)) if m is not None else m)
    return IntegrityData(findings, runs)


def clear_caches() -> None:
    _integrity_data.clear()
    ui.clear_query_caches()


# ---- summary ---------------------------------------------------------------------------

def render_summary(data: IntegrityData) -> None:
    f, runs = data.findings, data.runs
    cols = st.columns(5)
    cols[0].metric("Errors", ui.compact(int((f["severity"] == "error").sum())))
    cols[1].metric("Warnings", ui.compact(int((f["severity"] == "warning").sum())))
    # runs as the Overview counts them: a LangGraph thread with subgraph namespaces is one run
    total = runs["run_id"].nunique() if not runs.empty else 0
    damaged = runs.loc[runs["health"] == "damaged", "run_id"].nunique() if not runs.empty else 0
    cols[2].metric("Damaged runs", f"{damaged:,} of {total:,}",
                   help="A run is damaged when any of its namespaces is")
    unverified = int(runs["unverified"].sum()) if not runs.empty else 0
    cols[3].metric("Unverified checkpoints", ui.compact(unverified),
                   help="Not read by a data check yet: never counted as good")
    roots = runs[runs["namespace"] == ""] if not runs.empty else runs
    with_good = int(roots["last_good"].notna().sum()) if not runs.empty else 0
    cols[4].metric("Runs with a last good", f"{with_good:,} of {total:,}",
                   help="The run's own (root namespace) last good checkpoint: what a restore resumes from")


def counts_by_check(findings: pd.DataFrame) -> pd.DataFrame:
    import pandas as pd

    if findings.empty:
        return pd.DataFrame(columns=["check", "severity", "findings"])
    return (findings.groupby(["check", "severity"]).size().rename("findings").reset_index()
            .sort_values(["findings", "check"], ascending=[False, True]))


# ---- background checks ---------------------------------------------------------------

def render_check_controls(ref: ui.StoreRef) -> None:
    """Buttons for a structure check or a full read, and the running job's progress."""
    left, right, _ = st.columns([2, 2, 3])
    if left.button("Re-verify structure", icon=":material/rule:", help="Fast: blobs present, sizes, "
                   "codecs, parents (no blob is read)"):
        background.start(ref.index_path, ref.url, "structure")
    if right.button("Full read", icon=":material/fact_check:", help="Re-hash and decode every blob, "
                    "replay incremental chains, content checks (runs in the background)"):
        background.start(ref.index_path, ref.url, "data")
    _progress_panel(ref)


@st.fragment(run_every=POLL_SECONDS)
def _progress_panel(ref: ui.StoreRef) -> None:
    job = background.job(ref.index_path, ref.url)
    if job is None:
        return
    if job.running:
        st.progress(job.fraction, text=job.summary())
        if job.findings:
            st.caption("Found so far: " + "; ".join(
                f"{f.check} on {f.checkpoint_id or 'the store'}" for f in job.findings[-5:]))
        if st.button("Cancel", icon=":material/stop:", key="integrity_cancel",
                     help="Stops after the chunk in progress; what was checked stays recorded"):
            job.cancel()
        return
    (st.error if job.state == "failed" else st.success)(job.summary())
    _refresh_once(job)


def sidebar_check(ref: ui.StoreRef) -> None:
    """For every page's sidebar: with LASTGOOD_BACKGROUND_CHECK set (``lastgood ui`` sets it), start
    the data check of never-read checkpoints once; show the running check's progress."""
    if os.environ.get(AUTO_CHECK_ENV, "").strip() not in ("", "0"):
        ensure_data_check(ref)
    if background.job(ref.index_path, ref.url) is not None:
        _sidebar_progress(ref)


@st.fragment(run_every=POLL_SECONDS)
def _sidebar_progress(ref: ui.StoreRef) -> None:
    job = background.job(ref.index_path, ref.url)
    if job is None:
        return
    if job.running:
        st.progress(job.fraction, text=job.summary())
        st.page_link(page_path("integrity"), label="Findings so far", icon=":material/verified_user:")
        return
    st.caption(job.summary())
    _refresh_once(job)


def _refresh_once(job: background.VerifyJob) -> None:
    """After a job finishes, rerun the whole page once so tables and counts come from the index."""
    if st.session_state.get(FINISHED_KEY) != job.finished_at:
        st.session_state[FINISHED_KEY] = job.finished_at
        clear_caches()
        st.rerun()


def ensure_data_check(ref: ui.StoreRef) -> background.VerifyJob | None:
    """Start (once per store and process) a background data check of checkpoints not yet read."""
    if background.job(ref.index_path, ref.url) is not None:
        return None
    # one small count (the runs' ``unverified`` summed): reading every run's health takes ~0.8 s of
    # CPU for 1,600 runs, in every page's sidebar, while the browser draws the first screen
    depths = ui.query(ref, "verification")
    if sum(depths.values()) <= depths.get("data", 0):
        return None
    return background.start(ref.index_path, ref.url, "data", only_unverified=True, delay=AUTO_CHECK_DELAY)


# ---- runs and last good ------------------------------------------------------------

RUN_COLUMNS = ["run_id", "namespace", "agent", "health", "checkpoints", "ok", "corrupt", "incomplete",
               "quarantined", "superseded", "unverified", "errors", "warnings", "last_good", "head"]


def render_runs(ref: ui.StoreRef, runs: pd.DataFrame) -> None:
    if runs.empty:
        st.info("No runs in this store yet.")
        return
    st.dataframe(ui._redact_frame(runs[RUN_COLUMNS].head(ui.MAX_TABLE_ROWS)), hide_index=True, width="stretch",
                 column_config={"last_good": st.column_config.TextColumn(
                     "last good", help="Newest checkpoint whose data check passed, with no error finding, "
                     "not quarantined or superseded, incremental chain intact")})
    labels = {r.run_id: redact_text(f"{r.run_id} · {r.health} · last good {r.last_good or '(none yet)'}")
              for r in runs.itertuples() if not r.namespace}
    pick, go = st.columns([3, 2], vertical_alignment="bottom")
    run = pick.selectbox("Run", list(labels), format_func=labels.get, key=RESTORE_RUN_KEY)
    row = runs[(runs["run_id"] == run) & (runs["namespace"] == "")].iloc[0] if run else None
    reason = restore_disabled_reason(ref, row)
    go.page_link(RECOVERY_PAGE, label="Restore last good…", icon=":material/restore:",
                 query_params={"store": ref.url, "run": run, "action": RESTORE_ACTION} if run else None,
                 disabled=reason is not None, help=reason or "Opens Recovery with a dry-run preview")


def restore_disabled_reason(ref: ui.StoreRef, row: Any) -> str | None:
    if not ref.allow_write:
        return "Writes are off: start with `lastgood ui --allow-write` (or LASTGOOD_ALLOW_WRITE=1)"
    if row is None or not isinstance(row["last_good"], str):
        return "This run has no last good checkpoint yet (run a full read first)"
    if row["last_good"] == row["head"]:
        return "The run's head already is its last good checkpoint"
    return None


# ---- findings table ---------------------------------------------------------------

def render_findings(ref: ui.StoreRef, findings: pd.DataFrame) -> None:
    if findings.empty:
        st.success("No findings: every check that ran passed.")
        return
    shown = _filtered(findings)
    shown = shown.assign(open=[timeline_link(ref.url, r, c, n) for r, c, n in
                               zip(shown["run_id"], shown["checkpoint_id"], shown["namespace"])],
                         depth=shown["depth"].map(lambda d: DEPTH_LABELS.get(d, d)))
    st.caption(f"{len(shown):,} of {len(findings):,} finding(s)")
    st.dataframe(ui._redact_frame(shown[["open", "severity", "check", "run_id", "agent", "checkpoint_id",
                                         "message", "depth", "found_at"]].head(ui.MAX_TABLE_ROWS)),
                 hide_index=True, width="stretch", key="integrity_findings",
                 column_config={"open": st.column_config.LinkColumn("timeline", display_text="open"),
                                "message": st.column_config.TextColumn("message", width="large")})


def _filtered(findings: pd.DataFrame) -> pd.DataFrame:
    import pandas as pd

    filters = {"severity": "Severity", "check": "Check", "agent": "Agent", "run_id": "Run", "depth": "Depth"}
    cols = st.columns(len(filters))
    mask = pd.Series(True, index=findings.index)
    for col, (column, label) in zip(cols, filters.items()):
        options = sorted(str(v) for v in findings[column].dropna().unique())
        shown_as = (lambda d: DEPTH_LABELS.get(d, d)) if column == "depth" else redact_text  # as in the table
        chosen = col.multiselect(label, options, key=FILTER_KEY.format(column), placeholder="all",
                                 format_func=shown_as)
        if chosen:
            mask &= findings[column].astype(str).isin(chosen)
    return findings[mask]


def timeline_link(store_url: str, run_id: Any, checkpoint_id: Any, namespace: Any = "") -> str | None:
    """A Timeline URL that opens this checkpoint: store, run and checkpoint (and ``ns`` in a LangGraph
    namespace) in the query string — or, when any of them is secret-shaped, store and a non-secret
    ``key`` (queries.checkpoint_handle): a URL ends up in history, logs and Referer headers, so no
    secret goes into one, and a redacted id would not open anything."""
    if not isinstance(run_id, str) or not isinstance(checkpoint_id, str):
        return None
    namespace = namespace if isinstance(namespace, str) else ""
    if any(redact_text(v) != v for v in (run_id, checkpoint_id, namespace)):
        params = {"store": store_url, "key": checkpoint_handle(run_id, namespace, checkpoint_id)}
    else:
        params = {"store": store_url, "run": run_id, "checkpoint": checkpoint_id, **({"ns": namespace} if namespace
                                                                                      else {})}
    return f"{TIMELINE_URL}?{urlencode(params)}"


def apply_timeline_link() -> None:
    """On the Timeline: select the store, run and checkpoint named in the URL (once per link)."""
    params = {k: st.query_params.get(k) for k in ("store", "run", "checkpoint", "ns", "key")}
    if not any(params.values()):
        return
    link = tuple(params.values())
    if st.session_state.get(LINK_APPLIED_KEY) == link:
        return
    st.session_state[LINK_APPLIED_KEY] = link
    if params["store"]:
        st.session_state[ui.STORE_KEY] = params["store"]
    if params["run"]:
        st.session_state[ui.FOCUS_RUN_KEY] = params["run"]  # the Timeline takes it like a focus link
    if params["checkpoint"]:
        st.session_state["tl_ref"] = params["checkpoint"] + (f"@{params['ns']}" if params["ns"] else "")
    if params["key"]:  # a secret-shaped id: the id box holds the handle, never the secret
        st.session_state["tl_ref"] = params["key"]
