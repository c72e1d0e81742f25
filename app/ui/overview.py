"""The Overview page's helpers: its data (numbers and Arrow tables straight from the index, no
pandas), its numbers, suggested actions, SVG figures and tables, and what it warms up for the
pages that follow."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import pyarrow as pa
import streamlit as st

from lastgood.cli.output import short_bytes
from lastgood.display import svg_charts
from lastgood.display.figures import DAMAGED, compact, utc
from lastgood.display.numbers import check_progress, health_line, plural
from lastgood.display.plotly_theme import warm_up as warm_up_plotly_pages
from lastgood.index import queries
from lastgood.index.overview import DAMAGED_RUNS_SHOWN
from lastgood.integrity import background
from lastgood.redact import redact_text
from lastgood.ui.escape import code, md_escape
from lastgood.ui.links import run_value
from lastgood.ui.navigation import page_path
from lastgood.ui.pagerun import guarded
from lastgood.ui.stores import StoreRef, query
from lastgood.ui.tables import show_table
from lastgood.ui.timeline import focus_run_in_timeline, warm_up_timeline

FAILURES_SHOWN = 20  # lastgood.index.overview.failures' default limit
INTEGRITY_PAGE = page_path("integrity")
RECOVERY_PAGE = page_path("recovery")
POLL_SECONDS = 1.0  # a running background check's note follows it this often


@dataclass
class Action:
    """A suggested next step on the Overview page."""

    message: str
    level: str = "warning"  # warning | info
    run_id: str | None = None  # "Inspect run" opens it in the Timeline (a handle when secret-shaped)
    integrity: bool = False  # "See on Integrity" opens the Integrity page
    restore: bool = False  # the run's head is damaged: "Restore last good…" opens its preview on Recovery


@dataclass
class OverviewData:
    """What the Overview shows: numbers, and Arrow tables straight from the index (no pandas).
    The runs table (one row per run: ~0.2 s of grouping on 100,000 checkpoints) is read when the
    tables ask for it, after the numbers and figures are on the screen."""

    overview: queries.Overview
    status: pa.Table
    agents: pa.Table
    read_runs: Callable[[], pa.Table]
    growth: pa.Table
    failures: pa.Table
    actions: list[Action] = field(default_factory=list)
    _runs: pa.Table | None = None

    @property
    def runs(self) -> pa.Table:
        if self._runs is None:
            self._runs = self.read_runs()
        return self._runs


def overview_numbers(ref: StoreRef) -> queries.Overview:
    """The Overview's numbers alone (one query): the page shows them before it asks for the rest."""
    with guarded():
        return query(ref, "overview")


def overview_data(ref: StoreRef, numbers: queries.Overview | None = None) -> OverviewData:
    """Everything the Overview shows; ``numbers``: :func:`overview_numbers`, when already drawn."""
    with guarded():
        data = OverviewData(numbers or query(ref, "overview"), query(ref, "overview_status"),
                            query(ref, "overview_agents"), partial(_guarded_query, ref, "overview_runs"),
                            query(ref, "overview_growth"), query(ref, "overview_failures"))
        damaged = query(ref, "damaged_runs", DAMAGED_RUNS_SHOWN)
        data.actions = suggested_actions(ref, data, damaged, query(ref, "verification"))
    return data


def _guarded_query(ref: StoreRef, name: str) -> Any:
    with guarded():
        return query(ref, name)


def suggested_actions(ref: StoreRef, data: OverviewData, damaged: tuple[list[dict[str, Any]], int],
                      depths: dict[str, int]) -> list[Action]:
    actions = _damage_actions(*damaged) + _store_finding_actions(data.overview)
    # at most FAILURES_SHOWN rows; no times (pyarrow imports pandas to turn a zoned time into Python)
    failures = data.failures.select(["run_id", "what", "detail"]).to_pylist()
    errors = [f for f in failures if f["what"] not in DAMAGED]
    if errors:
        latest = errors[0]
        count = f"{len(errors)}+" if len(failures) >= FAILURES_SHOWN else str(len(errors))
        actions.append(Action(f"{count} recent error event(s); latest in run {run_text(latest['run_id'])}: "
                              f"{md_escape(str(latest['detail'])[:120])}", "warning", run_value(latest["run_id"])))
    if data.overview.findings.get("warning"):
        actions.append(Action(f"{plural(data.overview.findings['warning'], 'warning finding')} — the Integrity "
                              "page counts them by check (schema drift, failed tasks, …) and `lastgood verify "
                              "STORE` lists them; a checkpoint's findings show in the Timeline", "info",
                              integrity=True))
    actions.extend(_verify_actions(ref, depths))
    return actions


def run_text(run_id: Any) -> str:
    """A run id in an action's text: as a code span, a secret-shaped part masked (never the secret;
    the action's button opens the run by its handle)."""
    return code(redact_text(str(run_id)))


def _damage_actions(worst: list[dict[str, Any]], total: int) -> list[Action]:
    """One action per run among the most damaged (``overview.damaged_runs``), then how many more."""
    out = []
    for row in worst:
        counts = ((row["corrupt"], "corrupt"), (row["incomplete"], "incomplete"))
        parts = [f"{int(n)} {word}" for n, word in counts if n]
        what = (f"{' and '.join(parts)} checkpoint{'s' if row['damaged'] > 1 else ''}" if parts
                else plural(int(row["errors"]), "error finding"))
        head = ", its head among them: restore its last good checkpoint" if row.get("head_damaged") else ""
        out.append(Action(f"{what} in run {run_text(row['run_id'])}{head}", "warning", run_value(row["run_id"]),
                          restore=bool(row.get("head_damaged"))))
    if total > len(worst):
        out.append(Action(f"{plural(total - len(worst), 'more run')} damaged: see the runs table (and the "
                          "Integrity page)", integrity=True))
    return out


def _store_finding_actions(o: queries.Overview) -> list[Action]:
    """Findings about the store itself (a malformed catalog line…): one line each, its check and message."""
    return [Action(f"Store-level {f['severity']} ({code(f['check'])}, not about one checkpoint): "
                   f"{md_escape(str(f['message'])[:200])}", "warning" if f["severity"] == "error" else "info",
                   integrity=True) for f in o.store_findings[:3]]


def _verify_actions(ref: StoreRef, depths: dict[str, int]) -> list[Action]:
    total = sum(depths.values())
    read = depths.get("data", 0)
    command = code(f"lastgood verify {ref.display} --read-data")
    out = _blob_pending_actions(ref, depths.get("catalog", 0))
    job = background.job(ref.index_path, ref.url)
    if read < total and job is not None and job.running and job.depth == "data":
        return out + [Action(f"A data check is reading the {total - read:,} checkpoint(s) not decoded yet, in "
                             "the background (progress in the sidebar; findings show on the Integrity page "
                             "as they are found, and this page updates when it ends)", "info")]
    if total and not read:
        return out + [Action(f"This store was never verified with --read-data: run {command}", "info")]
    if read < total:
        return out + [Action(f"{total - read} checkpoint(s) only had the fast structural check: run {command}",
                             "info")]
    return out


def _blob_pending_actions(ref: StoreRef, pending: int) -> list[Action]:
    """A store too big for the index to walk its blob files: say that their presence is not checked yet."""
    if not pending:
        return []
    command = code(f"lastgood verify {ref.display}")
    return [Action(f"Blob check pending for {pending:,} checkpoint(s): the index read the catalog only "
                   f"(blob files not looked at yet): run {command}", "info")]


def render_actions(ref: StoreRef, actions: list[Action]) -> None:
    """Suggested actions, one line each; runs get a button that opens them in the Timeline (and, when
    their head is damaged, a link to restore their last good checkpoint), findings a link to the
    Integrity page."""
    if not actions:
        st.success("Nothing needs attention: every checkpoint is healthy and was verified with --read-data.")
        return
    with st.container(border=True):
        for i, action in enumerate(actions):
            text, restore, button = st.columns([6, 1.6, 1.3], vertical_alignment="center")
            icon = ":orange[:material/warning:]" if action.level == "warning" else ":blue[:material/info:]"
            text.markdown(f"{icon} {action.message}")
            if action.restore and action.run_id:
                restore.page_link(RECOVERY_PAGE, label="Restore last good…", icon=":material/restore:",
                                  query_params={"store": ref.url, "run": action.run_id, "action": "restore-last-good"},
                                  help="Opens Recovery with its dry-run preview" + ("" if ref.allow_write else
                                                                                   " (applying needs --allow-write)"))
            if action.run_id and button.button("Inspect run", key=f"action-{i}", type="tertiary",
                                               icon=":material/timeline:"):
                focus_run_in_timeline(action.run_id)
            elif action.integrity:
                button.page_link(INTEGRITY_PAGE, label="Integrity", icon=":material/verified_user:")


def figure(svg: str) -> None:
    """A figure drawn as SVG by lastgood.display.svg_charts (escaped there; no chart library in the browser)."""
    st.markdown(svg, unsafe_allow_html=True)


def render_status(data: OverviewData) -> None:
    figure(svg_charts.status_bars(data.status))


def render_growth(data: OverviewData) -> None:
    if data.growth.num_rows == 0:
        st.caption("No timestamps recorded, so growth over time cannot be drawn.")
    else:
        figure(svg_charts.growth_areas(data.growth))


def render_tables(data: OverviewData) -> None:
    """Recent failures, agents and runs (Arrow tables: no pandas)."""
    st.subheader("Recent failures")
    show_table(data.failures, ["created_at", "run_id", "agent", "what", "detail", "checkpoint_id"],
               empty="No corrupt or incomplete checkpoints and no error events.", name="recent-failures")

    st.subheader("Agents")
    show_table(data.agents, ["agent", "runs", "checkpoints", "size_bytes", "corrupt", "incomplete",
                             "last_at"], empty="No agents recorded on these checkpoints.", name="agents")

    st.subheader(f"Runs ({data.overview.runs:,}), most recent first")
    show_table(data.runs, ["run_id", "agent", "checkpoints", "last_step", "first_at", "last_at",
                           "size_bytes", "ok", "corrupt", "incomplete", "quarantined", "superseded",
                           "head"], empty="No runs yet.", key="runs-table", name="runs")


def warm_up_next_pages(ref: StoreRef) -> None:
    """Timeline/Diff's imports in the background a little after this page, then the Timeline's
    first screen read into the query cache."""
    warm_up_plotly_pages()
    warm_up_timeline(ref)


def render_kpis(ref: StoreRef, o: queries.Overview) -> None:
    row = st.container(horizontal=True)  # one block for the six (columns would add six more)
    cells = [row] * 6
    values = [("Checkpoints", o.checkpoints), ("Runs", o.runs), ("Agents", o.agents),
              ("Storage", short_bytes(o.size_bytes)), ("Corrupt", o.by_status.get("corrupt", 0)),
              ("Incomplete", o.by_status.get("incomplete", 0))]
    for cell, (label, value) in zip(cells, values):
        shown = compact(value) if isinstance(value, int) else value
        exact = f"{o.size_bytes:,} bytes" if label == "Storage" else f"{value:,}"
        cell.metric(label, shown, border=True, help=exact if exact != shown else None)
    span = f"From {utc(o.first_at)} to {utc(o.last_at)} (UTC) · " if o.first_at is not None else ""
    st.caption(span + health_line(o), help="Counted as the Integrity page, `lastgood runs` (a run is damaged "
               "when a checkpoint of it is corrupt or incomplete or has an error finding) and `lastgood verify` "
               "(one finding per checkpoint and check) count them.")
    render_check_note(ref, o)


def render_check_note(ref: StoreRef, o: queries.Overview) -> None:
    """Under a page's numbers: what a running background check has checked so far (the numbers
    will change), else whether some blobs were never decoded."""
    job = background.job(ref.index_path, ref.url)
    if job is not None and job.running:
        _running_check(ref, o.checkpoints)
    elif o.data_unread:
        st.caption(data_pending_note(o))


@st.fragment(run_every=POLL_SECONDS)
def _running_check(ref: StoreRef, checkpoints: int) -> None:
    job = background.job(ref.index_path, ref.url)
    if job is None or not job.running:  # the page reruns once with the new numbers (ui.integrity)
        return
    st.caption(f":material/hourglass_top: {running_check_text(job, checkpoints)}: the numbers above are "
               "what the checks so far found.")


def running_check_text(job: background.VerifyJob, checkpoints: int) -> str:
    return check_progress(job.depth, job.done, job.total, checkpoints, job.only_unverified, job.running)


def data_pending_note(o: queries.Overview) -> str:
    """Said under the numbers while some blobs were never decoded: Corrupt may still rise (the page
    reruns when the dashboard's background data check ends)."""
    return (f":material/hourglass_top: Data check pending for {o.data_unread:,} of {o.checkpoints:,} "
            "checkpoint(s): their blobs were not decoded yet, so Corrupt counts what the structure "
            "check found so far.")
