"""The Overview page's helpers: its data (numbers and Arrow tables straight from the index, no
pandas), its suggested actions and its numbers."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import streamlit as st

from lastgood import ui
from lastgood.integrity import background
from lastgood.index import queries
from lastgood.index.overview import DAMAGED_RUNS_SHOWN
from lastgood.cli.output import short_bytes


@dataclass
class Action:
    """A suggested next step on the Overview page."""

    message: str
    level: str = "warning"  # warning | info
    run_id: str | None = None


@dataclass
class OverviewData:
    """What the Overview shows: numbers, and Arrow tables straight from the index (no pandas)."""

    overview: queries.Overview
    status: pa.Table
    agents: pa.Table
    runs: pa.Table
    growth: pa.Table
    failures: pa.Table
    actions: list[Action] = field(default_factory=list)


def overview_numbers(ref: ui.StoreRef) -> queries.Overview:
    """The Overview's numbers alone (one query): the page shows them before it asks for the rest."""
    with ui.guarded():
        return ui.query(ref, "overview")


def overview_data(ref: ui.StoreRef, numbers: queries.Overview | None = None) -> OverviewData:
    """Everything the Overview shows; ``numbers``: :func:`overview_numbers`, when already drawn."""
    with ui.guarded():
        data = OverviewData(numbers or ui.query(ref, "overview"), ui.query(ref, "overview_status"),
                            ui.query(ref, "overview_agents"), ui.query(ref, "overview_runs"),
                            ui.query(ref, "overview_growth"), ui.query(ref, "overview_failures"))
        damaged = ui.query(ref, "damaged_runs", DAMAGED_RUNS_SHOWN)
        data.actions = suggested_actions(ref, data, damaged, ui.query(ref, "verification"))
    return data


def suggested_actions(ref: ui.StoreRef, data: OverviewData, damaged: tuple[list[dict[str, Any]], int],
                      depths: dict[str, int]) -> list[Action]:
    actions = _damage_actions(*damaged)
    # at most ui.FAILURES_SHOWN rows; no times (pyarrow imports pandas to turn a zoned time into Python)
    failures = data.failures.select(["run_id", "what", "detail"]).to_pylist()
    errors = [f for f in failures if f["what"] not in ui.DAMAGED]
    if errors:
        latest = errors[0]
        count = f"{len(errors)}+" if len(failures) >= ui.FAILURES_SHOWN else str(len(errors))
        actions.append(Action(f"{count} recent error event(s); latest in run {ui.code(latest['run_id'])}: "
                              f"{ui.md_escape(str(latest['detail'])[:120])}", "warning", latest["run_id"]))
    if data.overview.findings.get("warning"):
        actions.append(Action(f"{data.overview.findings['warning']} warning finding(s) — the Integrity page "
                              "counts them by check (schema drift, failed tasks, …) and `lastgood verify "
                              "STORE` lists them; a checkpoint's findings show in the Timeline", "info"))
    actions.extend(_verify_actions(ref, depths))
    return actions


def _damage_actions(worst: list[dict[str, Any]], total: int) -> list[Action]:
    """One action per run among the most damaged (``overview.damaged_runs``), then how many more."""
    out = []
    for row in worst:
        counts = ((row["corrupt"], "corrupt"), (row["incomplete"], "incomplete"))
        parts = [f"{int(n)} {word}" for n, word in counts if n]
        out.append(Action(f"{' and '.join(parts)} checkpoint{'s' if row['damaged'] > 1 else ''} in run "
                          f"{ui.code(row['run_id'])}", "warning", row["run_id"]))
    if total > len(worst):
        out.append(Action(f"{total - len(worst)} more run(s) have damaged checkpoints: see the runs table"))
    return out


def _verify_actions(ref: ui.StoreRef, depths: dict[str, int]) -> list[Action]:
    total = sum(depths.values())
    read = depths.get("data", 0)
    command = ui.code(f"lastgood verify {ref.display} --read-data")
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


def _blob_pending_actions(ref: ui.StoreRef, pending: int) -> list[Action]:
    """A store too big for the index to walk its blob files: say that their presence is not checked yet."""
    if not pending:
        return []
    command = ui.code(f"lastgood verify {ref.display}")
    return [Action(f"Blob check pending for {pending:,} checkpoint(s): the index read the catalog only "
                   f"(blob files not looked at yet): run {command}", "info")]


def render_actions(actions: list[Action]) -> None:
    """Suggested actions, one line each; runs get a button that opens them in the Timeline."""
    if not actions:
        st.success("Nothing needs attention: every checkpoint is healthy and was verified with --read-data.")
        return
    with st.container(border=True):
        for i, action in enumerate(actions):
            text, button = st.columns([6, 1], vertical_alignment="center")
            icon = ":orange[:material/warning:]" if action.level == "warning" else ":blue[:material/info:]"
            text.markdown(f"{icon} {action.message}")
            if action.run_id and button.button("Inspect run", key=f"action-{i}", type="tertiary",
                                               icon=":material/timeline:"):
                ui.focus_run_in_timeline(action.run_id)


def figure(svg: str) -> None:
    """A figure drawn as SVG by lastgood.display.svg_charts (escaped there; no chart library in the browser)."""
    st.markdown(svg, unsafe_allow_html=True)


def render_kpis(o: queries.Overview) -> None:
    row = st.container(horizontal=True)  # one block for the six (columns would add six more)
    cells = [row] * 6
    values = [("Checkpoints", o.checkpoints), ("Runs", o.runs), ("Agents", o.agents),
              ("Storage", short_bytes(o.size_bytes)), ("Corrupt", o.by_status.get("corrupt", 0)),
              ("Incomplete", o.by_status.get("incomplete", 0))]
    for cell, (label, value) in zip(cells, values):
        shown = ui.compact(value) if isinstance(value, int) else value
        exact = f"{o.size_bytes:,} bytes" if label == "Storage" else f"{value:,}"
        cell.metric(label, shown, border=True, help=exact if exact != shown else None)
    if o.first_at is not None:
        st.caption(f"From {ui.utc(o.first_at)} to {ui.utc(o.last_at)} (UTC)")
    if o.data_unread:
        st.caption(data_pending_note(o))


def data_pending_note(o: queries.Overview) -> str:
    """Said under the numbers while some blobs were never decoded: Corrupt may still rise (the page
    reruns when the dashboard's background data check ends)."""
    return (f":material/hourglass_top: Data check pending for {o.data_unread:,} of {o.checkpoints:,} "
            "checkpoint(s): their blobs were not decoded yet, so Corrupt counts what the structure "
            "check found so far.")
