"""Streamlit helpers of the Integrity page (and the sidebar's background data check).

The page shows the one set of findings the index holds (lastgood.integrity.verify.store_findings),
counted as every page and the CLI count them (lastgood.index.queries.overview), the health and last
good checkpoint of every run (lastgood.integrity.health.run_health), and runs re-verification in
the background (lastgood.integrity.background) with progress polled by a fragment. Its filters are
its link (lastgood.ui.links).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import streamlit as st

from lastgood.display.figures import compact
from lastgood.display.numbers import check_progress, health_line, short_id
from lastgood.integrity import background
from lastgood.integrity.health import run_health
from lastgood.integrity.verify import store_findings
from lastgood.redact import redact_text
from lastgood.ui import links, report_button
from lastgood.ui.escape import code, md_escape
from lastgood.ui.navigation import page_path
from lastgood.ui.stores import CACHE_TTL, StoreRef, catalog, clear_query_caches, query
from lastgood.ui.tables import MAX_TABLE_ROWS, export_buttons, redact_frame

if TYPE_CHECKING:  # imported where used: the sidebar's check runs after every page, the Overview's too
    import pandas as pd

    from lastgood.index.queries import Overview

RECOVERY_PAGE = page_path("recovery")
POLL_SECONDS = 1.0
SEVERITIES = ("error", "warning", "info")
DEPTH_LABELS = {"catalog": "listing", "structure": "structure", "lineage": "lineage", "content": "content",
                "data": "data"}
RESTORE_ACTION = "restore-last-good"
AUTO_CHECK_DELAY = 3.0  # seconds: the first screen renders before the automatic check takes CPU
AUTO_CHECK_ENV = "LASTGOOD_BACKGROUND_CHECK"  # set by `lastgood ui`: read never-read blobs in the background
FINDING_ROW_HEIGHT = 66  # px: above 64 a table cell wraps its text (three lines of a message)
FINDING_ROWS_SHOWN = 10  # the findings table's height, in rows (more scroll)
FILTERS = {"severity": ("Severity", links.SEVERITY), "check": ("Check", links.CHECK), "agent": ("Agent", links.AGENT),
           "run_id": ("Run", links.RUN), "depth": ("Depth", links.DEPTH)}  # column: (label, URL parameter)

# session-state keys
FILTER_KEY = "integrity_filter_{}"
RESTORE_RUN_KEY = "integrity_restore_run"
FINISHED_KEY = "integrity_finished_job"
CANCEL_KEY = "integrity_cancel"
FINDINGS_KEY = "integrity_findings"


@dataclass
class IntegrityData:
    findings: pd.DataFrame  # about one checkpoint each
    runs: pd.DataFrame
    store: list[dict[str, Any]] = field(default_factory=list)  # about the store itself (no checkpoint)


def integrity_data(ref: StoreRef) -> IntegrityData:
    return _integrity_data(ref.index_path, ref.store_id)


@st.cache_data(ttl=CACHE_TTL, max_entries=16, show_spinner=False)
def _integrity_data(index_path: str, store_id: int) -> IntegrityData:
    import pandas as pd

    index = catalog(index_path)
    runs = pd.DataFrame.from_records(run_health(index, store_id))
    found = store_findings(index, store_id)
    on_store = [f for f in found if f["checkpoint_id"] is None]
    findings = pd.DataFrame.from_records([f for f in found if f["checkpoint_id"] is not None],
                                         columns=["run_id", "namespace", "checkpoint_id", "check", "severity",
                                                  "message", "depth", "found_at"])
    agents = dict(zip(runs["run_id"], runs["agent"])) if not runs.empty else {}
    findings["agent"] = findings["run_id"].map(agents)
    findings["message"] = findings["message"].map(lambda m: redact_text(str(m)) if m is not None else m)
    return IntegrityData(findings, runs, on_store)


def clear_caches() -> None:
    _integrity_data.clear()
    clear_query_caches()


# ---- the link -------------------------------------------------------------------------------


def take_link() -> None:
    """The link's filters (``?severity=error&check=…``) become the page's, once: before the widgets."""
    if not links.take("integrity", [name for _, name in FILTERS.values()]):
        return
    for column, (_, name) in FILTERS.items():
        st.session_state[FILTER_KEY.format(column)] = links.values(name)


def write_link(ref: StoreRef) -> None:
    """The store and the filters in the URL: a copied link opens the same findings."""
    links.write("integrity", {links.STORE: ref.url, **{name: st.session_state.get(FILTER_KEY.format(column)) or []
                                                       for column, (_, name) in FILTERS.items()}})


# ---- summary ---------------------------------------------------------------------------


def numbers(ref: StoreRef) -> Overview:
    """The store's numbers: the Overview's, counted as ``lastgood verify`` and ``runs`` count them."""
    return query(ref, "overview")


def render_summary(ref: StoreRef, data: IntegrityData) -> None:
    """The store's health in six numbers, as the Overview and the CLI count them."""
    o, runs = numbers(ref), data.runs
    unverified = int(runs["unverified"].sum()) if not runs.empty else 0
    roots = runs[runs["namespace"] == ""] if not runs.empty else runs
    with_good = int(roots["last_good"].notna().sum()) if not runs.empty else 0
    cells = [
        ("Errors", compact(o.findings.get("error", 0)), "One per checkpoint and check, as `lastgood verify` lists "
         "them (findings about the store itself included)"),
        ("Warnings", compact(o.findings.get("warning", 0)), None),
        ("Damaged runs", f"{o.damaged_runs:,} of {o.runs:,}", "A run is damaged when a checkpoint of it (in any "
         "namespace) is corrupt or incomplete or has an error finding (`lastgood runs`)"),
        ("Damaged checkpoints", compact(o.damaged), "Corrupt or incomplete (`lastgood ls` statuses)"),
        ("Unverified", compact(unverified), "Checkpoints not read by a data check yet: never counted as good"),
        ("Runs with a last good", f"{with_good:,} of {o.runs:,}",
         "The run's own (root namespace) last good checkpoint: what a restore resumes from"),
    ]
    row = st.container(horizontal=True)
    for label, value, why in cells:
        row.metric(label, value, help=why, border=True)
    report_button.render(ref)  # "Download report": every run's health, the findings, the actions taken


def render_store_findings(data: IntegrityData) -> None:
    """Findings about the store itself (a malformed catalog line…): their check and message, in words."""
    if not data.store:
        return
    st.subheader("About the store itself")
    for f in data.store:
        say = st.error if f["severity"] == "error" else st.warning
        say(f"**{f['check']}** ({f['severity']}, found by the {DEPTH_LABELS.get(f['depth'], f['depth'])} check): "
            f"{md_escape(str(f['message']))}", icon=":material/inventory_2:")


def counts_by_check(findings: pd.DataFrame, on_store: list[dict[str, Any]] | None = None) -> pd.DataFrame:
    import pandas as pd

    every = pd.concat([findings[["check", "severity"]], pd.DataFrame(on_store or [], columns=["check", "severity"])])
    if every.empty:
        return pd.DataFrame(columns=["check", "severity", "findings"])
    return (every.groupby(["check", "severity"]).size().rename("findings").reset_index()
            .sort_values(["findings", "check"], ascending=[False, True]))


# ---- background checks ---------------------------------------------------------------

def render_check_controls(ref: StoreRef) -> None:
    """Buttons for a structure check or a full read, and the running job's progress."""
    row = st.container(horizontal=True)  # side by side, as wide as their labels
    if row.button("Re-verify structure", icon=":material/rule:", help="Fast: blobs present, sizes, "
                  "codecs, parents (no blob is read)"):
        background.start(ref.index_path, ref.url, "structure")
    if row.button("Full read", icon=":material/fact_check:", help="Re-hash and decode every blob, "
                  "replay incremental chains, content checks (runs in the background)"):
        background.start(ref.index_path, ref.url, "data")
    _progress_panel(ref)


def progress_text(ref: StoreRef, job: background.VerifyJob) -> str:
    """A check's progress in the store's terms (``data checked: 1,200 of 2,386 checkpoints; counts will
    change``); once it ended, the store's numbers as every page counts them."""
    o = numbers(ref)
    checked = check_progress(job.depth, job.done, job.total, o.checkpoints, job.only_unverified, job.running)
    if job.running:
        return checked
    if job.state == "failed":
        return f"{'full read' if job.depth == 'data' else 'structure check'} failed: {redact_text(str(job.error))}"
    ended = "cancelled" if job.state == "cancelled" else "done"
    return f"{'full read' if job.depth == 'data' else 'structure check'} {ended} — {checked}: {health_line(o)}"


def _progress_panel(ref: StoreRef) -> None:
    """The check's progress, polled only while it runs (an ended check is drawn once, nothing ticks)."""
    job = background.job(ref.index_path, ref.url)
    if job is None:
        return
    if job.running:
        _running_panel(ref)
        return
    (st.error if job.state == "failed" else st.success)(md_escape(progress_text(ref, job)))
    _refresh_once(job)


@st.fragment(run_every=POLL_SECONDS)
def _running_panel(ref: StoreRef) -> None:
    job = background.job(ref.index_path, ref.url)
    if job is None or not job.running:
        if job is not None:
            _refresh_once(job)  # the whole page once: numbers and tables from the index, no more polling
        return
    st.progress(job.fraction, text=progress_text(ref, job))
    if job.findings:
        st.caption("Found so far: " + "; ".join(
            f"{f.check} on {short_id(f.checkpoint_id) if f.checkpoint_id else 'the store'}"
            for f in job.findings[-5:]))
    if st.button("Cancel", icon=":material/stop:", key=CANCEL_KEY,
                 help="Stops after the chunk in progress; what was checked stays recorded"):
        job.cancel()


def sidebar_check(ref: StoreRef) -> None:
    """For every page's sidebar: with LASTGOOD_BACKGROUND_CHECK set (``lastgood ui`` sets it), start
    the data check of never-read checkpoints once; show the running check's progress (polled while it
    runs), then how it ended."""
    if os.environ.get(AUTO_CHECK_ENV, "").strip() not in ("", "0"):
        ensure_data_check(ref)
    job = background.job(ref.index_path, ref.url)
    if job is None:
        return
    if job.running:
        _sidebar_progress(ref)
        return
    st.caption(md_escape(progress_text(ref, job)))
    _refresh_once(job)


@st.fragment(run_every=POLL_SECONDS)
def _sidebar_progress(ref: StoreRef) -> None:
    job = background.job(ref.index_path, ref.url)
    if job is None or not job.running:
        if job is not None:
            _refresh_once(job)
        return
    st.progress(job.fraction, text=progress_text(ref, job))
    st.page_link(page_path("integrity"), label="Findings so far", icon=":material/verified_user:")


def _refresh_once(job: background.VerifyJob) -> None:
    """After a job finishes, rerun the whole page once so tables and counts come from the index."""
    if st.session_state.get(FINISHED_KEY) != job.finished_at:
        st.session_state[FINISHED_KEY] = job.finished_at
        clear_caches()
        st.rerun()


def ensure_data_check(ref: StoreRef) -> background.VerifyJob | None:
    """Start (once per store and process) a background data check of checkpoints not yet read."""
    if background.job(ref.index_path, ref.url) is not None:
        return None
    # one small count (the runs' ``unverified`` summed): reading every run's health takes ~0.8 s of
    # CPU for 1,600 runs, in every page's sidebar, while the browser draws the first screen
    depths = query(ref, "verification")
    if sum(depths.values()) <= depths.get("data", 0):
        return None
    return background.start(ref.index_path, ref.url, "data", only_unverified=True, delay=AUTO_CHECK_DELAY)


# ---- runs and last good ------------------------------------------------------------

# what a restore needs first (health, last good, head), then the counts; namespace only when a run has one
RUN_COLUMNS = ["run_id", "namespace", "agent", "health", "last_good", "head", "checkpoints", "ok", "corrupt",
               "incomplete", "quarantined", "superseded", "unverified", "errors", "warnings"]


def run_columns(runs: pd.DataFrame) -> list[str]:
    """RUN_COLUMNS, without ``namespace`` when every run is a root run (a native store's)."""
    return [c for c in RUN_COLUMNS if c != "namespace" or runs["namespace"].astype(bool).any()]


def render_runs(ref: StoreRef, runs: pd.DataFrame) -> None:
    if runs.empty:
        st.info("No runs in this store yet.")
        return
    st.dataframe(redact_frame(runs[run_columns(runs)].head(MAX_TABLE_ROWS)), hide_index=True, width="stretch",
                 column_config={"run_id": st.column_config.TextColumn("run", pinned=True),
                                "last_good": st.column_config.TextColumn(
                     "last good", help="Newest checkpoint whose data check passed, with no error finding, "
                     "not quarantined or superseded, incremental chain intact")})
    export_buttons(redact_frame(runs[RUN_COLUMNS]), "runs-health")
    labels = {links.run_value(r.run_id): redact_text(f"{r.run_id} · {r.health} · last good "
                                                      f"{short_id(r.last_good) if r.last_good else '(none yet)'}")
              for r in runs.itertuples() if not r.namespace}
    pick, go = st.columns([3, 2], vertical_alignment="bottom")
    run = pick.selectbox("Run", list(labels), format_func=labels.get, key=RESTORE_RUN_KEY)
    rows = runs[(runs["run_id"].map(links.run_value) == run) & (runs["namespace"] == "")] if run else runs.iloc[:0]
    row = rows.iloc[0] if len(rows) else None
    reason = restore_disabled_reason(ref, row)
    # the run by its handle when secret-shaped: a URL ends up in history, logs and Referer headers
    go.page_link(RECOVERY_PAGE, label="Restore last good…", icon=":material/restore:",
                 query_params={links.STORE: ref.url, links.RUN: run, links.ACTION: RESTORE_ACTION} if run else None,
                 disabled=reason is not None, help=reason or "Opens Recovery with a dry-run preview")


def restore_disabled_reason(ref: StoreRef, row: Any) -> str | None:
    if not ref.allow_write:
        return "Writes are off: start with `lastgood ui --allow-write` (or LASTGOOD_ALLOW_WRITE=1)"
    if row is None or not isinstance(row["last_good"], str):
        return "This run has no last good checkpoint yet (run a full read first)"
    if row["last_good"] == row["head"]:
        return "The run's head already is its last good checkpoint"
    return None


# ---- findings table ---------------------------------------------------------------

FINDING_COLUMNS = ["open", "severity", "check", "message", "run_id", "checkpoint", "agent", "depth", "found_at",
                   "checkpoint_id"]


def render_findings(ref: StoreRef, findings: pd.DataFrame) -> None:
    if findings.empty:
        st.success("No findings about a checkpoint: every check that ran passed.")
        return
    shown = _filtered(findings)
    shown = shown.assign(open=[links.inspect_url(ref.url, r, c, n) for r, c, n in
                               zip(shown["run_id"], shown["checkpoint_id"], shown["namespace"])],
                         checkpoint=shown["checkpoint_id"].map(short_id),
                         depth=shown["depth"].map(lambda d: DEPTH_LABELS.get(d, d)))
    st.caption(f"{len(shown):,} of {len(findings):,} finding(s) about a checkpoint")
    rows = min(len(shown), MAX_TABLE_ROWS)
    st.dataframe(redact_frame(shown[FINDING_COLUMNS].head(MAX_TABLE_ROWS)),
                 hide_index=True, width="stretch", key=FINDINGS_KEY, row_height=FINDING_ROW_HEIGHT,
                 height=min(rows, FINDING_ROWS_SHOWN) * FINDING_ROW_HEIGHT + 38,
                 column_config={"open": st.column_config.LinkColumn("timeline", display_text="open", width=70),
                                "severity": st.column_config.TextColumn("severity", width=80),
                                "check": st.column_config.TextColumn("check", width=130),
                                "message": st.column_config.TextColumn("message", width="large"),
                                "run_id": st.column_config.TextColumn("run"),
                                "checkpoint": st.column_config.TextColumn(
                                    "checkpoint", help="The id's first characters (a unique prefix names it); "
                                    "the whole id is the last column"),
                                "found_at": st.column_config.DatetimeColumn("found (UTC)", timezone="UTC",
                                                                            format="YYYY-MM-DD HH:mm:ss"),
                                "checkpoint_id": st.column_config.TextColumn("checkpoint id")})
    export_buttons(redact_frame(shown[[c for c in FINDING_COLUMNS if c != "open"]]), "findings")


def _filtered(findings: pd.DataFrame) -> pd.DataFrame:
    import pandas as pd

    cols = st.columns(len(FILTERS))
    mask = pd.Series(True, index=findings.index)
    for col, (column, (label, _)) in zip(cols, FILTERS.items()):
        options = sorted(str(v) for v in findings[column].dropna().unique())
        key = FILTER_KEY.format(column)
        if st.session_state.get(key):  # a link's value the findings do not have (any more) is dropped
            st.session_state[key] = [v for v in st.session_state[key] if v in options]
        shown_as = (lambda d: DEPTH_LABELS.get(d, d)) if column == "depth" else redact_text  # as in the table
        chosen = col.multiselect(label, options, key=key, placeholder="all", format_func=shown_as,
                                 on_change=links.not_a_link)
        if chosen:
            mask &= findings[column].astype(str).isin(chosen)
    return findings[mask]


def render_by_check(data: IntegrityData) -> None:
    by_check = counts_by_check(data.findings, data.store)
    st.dataframe(by_check, hide_index=True, width="content")
    export_buttons(by_check, "findings-by-check")
    st.caption(f"All findings, {code('lastgood verify STORE')}'s list: the table above and those about the store.")
