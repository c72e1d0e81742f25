"""The Timeline page's state and helpers: its session keys, its link (the whole view in the URL,
lastgood.ui.links), the scope controls (agent, run, status, time range, axis), the lanes chart and
its click selection, "next / previous problem", opening it from elsewhere (an "Inspect" lands on
the problem, selected), and its first screen read ahead while the operator reads the Overview.

The selection: a click on the chart (or a search hit, a problem, a link) selects that checkpoint in
the picker below it (or, for one the picker does not list, types its id into the id box); typing an
id or picking another checkpoint replaces it; a checkpoint the scope no longer shows is unselected.
"""

from __future__ import annotations

import atexit
import threading
import time
import weakref
from dataclasses import dataclass
from datetime import date
from typing import TYPE_CHECKING, Any

import streamlit as st

from lastgood.display.figures import ALL_RUNS, run_labels, selected_checkpoint, timeline_placeholder
from lastgood.display.lanes import STEP, TIME, LanesData, lane_choices, lanes_figure
from lastgood.index.queries import is_handle
from lastgood.ui import lanes, links, report_button, search, tabs
from lastgood.ui.escape import code
from lastgood.ui.lanes import MAX_LANES, MAX_POINTS, STATUSES, Filters
from lastgood.ui.navigation import page_path
from lastgood.ui.stores import CACHE_TTL, StoreRef, query

if TYPE_CHECKING:
    import pandas as pd

TIMELINE_PAGE = page_path("timeline")
ALL_AGENTS = "All agents"
AXES = (TIME, STEP)

# session-state keys
AGENT = "tl_agent"  # the Agent picker
RUN = "tl_run"  # the Run picker (ALL_RUNS: lanes for the most recent runs)
STATUS = "tl_status"  # the Status filter (runs with a checkpoint in one of them)
SINCE, UNTIL = "tl_since", "tl_until"  # the time range (UTC dates)
AXIS = "tl_axis"  # the x axis: time | step
CHART = "tl_chart"  # the chart: its selection
CHART_DRAWN = "tl_chart_drawn"  # a figure was drawn this session (no placeholder any more)
CLICKED = "tl_clicked"  # the last click taken (a rerun keeps the chart's selection)
CHECKPOINT = "tl_ckpt"  # the Checkpoint picker
TYPED_REF = "tl_ref"  # the id / unique prefix box
PENDING = "tl_pending"  # a checkpoint to select once the lanes are read (link, hit, problem)
FOCUS = "tl_focus"  # the checkpoint the chart's view is centred on (the problem last gone to)
INSPECT = "tl_inspect"  # a run another page asked to inspect: its newest problem gets selected
METRICS_CHART = "tl_metrics_chart"
PREVIOUS, NEXT = "tl_previous_problem", "tl_next_problem"  # the buttons
REMEMBERED = (AGENT, RUN, STATUS, SINCE, UNTIL, AXIS, CHECKPOINT, TYPED_REF, search.SEARCH)


# ---- opening the Timeline from elsewhere, and its link ----------------------------------------


def inspect_run(run_id: str) -> None:
    """Open the Timeline on ``run_id`` with its newest problem selected (the Overview's actions)."""
    st.session_state[INSPECT] = links.run_value(run_id)
    st.switch_page(TIMELINE_PAGE, query_params={links.RUN: links.run_value(run_id)})


focus_run_in_timeline = inspect_run


def timeline_link(store_url: str, run_id: Any, checkpoint_id: Any, namespace: Any = "") -> str | None:
    """A Timeline URL (relative, for a table's LinkColumn) landing on this run and checkpoint, selected."""
    return links.inspect_url(store_url, run_id, checkpoint_id, namespace)


def take_link() -> None:
    """A link's view (once, on the run it arrives in): every control as the link says, defaults for
    what it leaves out, and its checkpoint selected once the lanes are read."""
    params = links.take("timeline")
    if not params:
        return
    st.session_state.update({
        AGENT: params.get(links.AGENT) or ALL_AGENTS, RUN: params.get(links.RUN) or ALL_RUNS,
        STATUS: [s for s in links.values(links.STATUS) if s in STATUSES],
        SINCE: _date(params.get(links.SINCE)), UNTIL: _date(params.get(links.UNTIL)),
        AXIS: params.get(links.AXIS) if params.get(links.AXIS) in AXES else TIME,
        search.SEARCH: params.get(links.SEARCH, ""), CHECKPOINT: None, TYPED_REF: "", FOCUS: None})
    tabs.take(tabs.CHECKPOINT, params.get(links.TAB))
    checkpoint, namespace = params.get(links.KEY) or params.get(links.CHECKPOINT), params.get(links.NAMESPACE, "")
    if checkpoint:
        st.session_state[PENDING] = {"checkpoint_id": checkpoint, "namespace": namespace,
                                     "run_id": params.get(links.RUN)}


def _date(text: str | None) -> date | None:
    try:
        return date.fromisoformat(text[:10]) if text else None
    except ValueError:
        return None


def write_link(ref: StoreRef, scope: Scope, selection: Selection, target: str | None, searched: str) -> None:
    """The view into the URL (on every run): a copied link reopens this same view."""
    since, until = scope.filters.since, scope.filters.until
    links.write("timeline", {
        links.STORE: ref.url, links.AGENT: scope.filters.agent, links.RUN: scope.run_id,
        links.STATUS: list(scope.filters.statuses), links.SINCE: since.isoformat() if since else None,
        links.UNTIL: until.isoformat() if until else None, links.AXIS: scope.axis if scope.axis != TIME else None,
        links.SEARCH: searched, **_selection_params(selection, target),
        links.TAB: tabs.selected(tabs.CHECKPOINT) if target else None})
    report_button.render(ref, run=scope.run_id)  # "Download report": this run's (or every run's) HTML report


def _selection_params(selection: Selection, target: str | None) -> dict[str, str]:
    if not target:
        return {}
    if is_handle(target):
        return {links.KEY: target}
    point = selection.points.get(target)
    if point is None:
        return {links.CHECKPOINT: target}
    return {links.CHECKPOINT: point["checkpoint_id"], links.NAMESPACE: point["namespace"]}


# ---- the scope: which runs get a lane --------------------------------------------------------


@dataclass(frozen=True)
class Scope:
    """What the chart shows: one run or lanes for the most recent runs the filters keep, on an axis."""

    run: str
    filters: Filters
    axis: str
    run_ids: tuple[str, ...]
    matching: int  # runs the filters keep

    @property
    def run_id(self) -> str | None:
        return self.run if self.run != ALL_RUNS else None


def pick_scope(runs: pd.DataFrame) -> Scope:
    """Agent, Run, Status, From, To and Axis in one row; a run another page asked for is selected."""
    agents = [ALL_AGENTS, *sorted(runs["agent"].dropna().unique())]
    if st.session_state.get(AGENT) not in agents:
        st.session_state[AGENT] = ALL_AGENTS
    if st.session_state.get(AXIS) not in AXES:
        st.session_state[AXIS] = TIME
    cells = st.columns([2, 4.2, 2.6, 1.6, 1.6, 1.9], vertical_alignment="bottom")
    agent = cells[0].selectbox("Agent", agents, key=AGENT, on_change=links.not_a_link)
    statuses = cells[2].multiselect("Status", STATUSES, key=STATUS, placeholder="any status",
                                    on_change=links.not_a_link, help="Runs with a checkpoint in one of these statuses")
    since = cells[3].date_input("From (UTC)", value=None, key=SINCE, on_change=links.not_a_link,
                                help="Runs active on or after this day")
    until = cells[4].date_input("To (UTC)", value=None, key=UNTIL, on_change=links.not_a_link,
                                help="Runs active on or before this day")
    filters = Filters(None if agent == ALL_AGENTS else agent, tuple(statuses), since, until)
    shown = lanes.filter_runs(runs, filters)
    labels = run_labels(shown)
    labels[ALL_RUNS] = f"All runs ({len(shown):,}) as lanes" + (f", the {MAX_LANES} most recent" if len(shown) > MAX_LANES
                                                                 else "")
    if st.session_state.get(RUN) not in labels:
        st.session_state[RUN] = ALL_RUNS
    run = cells[1].selectbox("Run", list(labels), format_func=labels.get, key=RUN,
                             on_change=links.not_a_link)
    axis = cells[5].segmented_control("Axis", AXES, key=AXIS, required=True, on_change=links.not_a_link,
                                      help="Time: when each checkpoint was saved; step: its step number")
    run_ids = tuple(shown["run_id"].head(MAX_LANES)) if run == ALL_RUNS else (run,)
    return Scope(run, filters, axis or TIME, run_ids, len(shown))


def lanes_data(ref: StoreRef, scope: Scope) -> LanesData:
    return lanes.lanes_data(ref, scope.run_ids, scope.filters)


def problems(ref: StoreRef, scope: Scope) -> pd.DataFrame:
    """The scope's problems, oldest first; a run to inspect (:func:`inspect_run`) gets its newest selected."""
    found = lanes.problems(ref, scope.run_ids, scope.filters)
    inspected = st.session_state.pop(INSPECT, None)
    if inspected is not None and inspected == scope.run_id:
        go_to(lanes.newest_problem(found))
    return found


def render_counts(scope: Scope, data: LanesData) -> None:
    where = (f"{len(scope.run_ids):,} most recent of {scope.matching:,} run(s)" if scope.run_id is None
             else "1 run")
    counts = f"{where} · {data.total:,} checkpoint(s) · {len(data.events):,} event(s)"
    if data.aggregated:
        st.info(f"{counts}: healthy checkpoints are bucketed in time per lane (hover a point for its count); damaged, "
                "forked and head checkpoints are shown one by one. Pick a single run to see every checkpoint.")
    else:
        st.caption(f"{counts}. Click a point to inspect it; drag to zoom, double-click to reset.")


# ---- the chart and its selection -----------------------------------------------------------------


@dataclass(frozen=True)
class Selection:
    """The checkpoints the picker lists (value -> label; a value is the checkpoint id, or RUN/ID@NS
    when the id repeats), their points, the selected checkpoint's id, and whether the last click
    fell on an aggregated point (which stands for many checkpoints)."""

    choices: dict[str, str]
    points: dict[str, dict[str, Any]]
    highlight: str | None
    bucket_clicked: bool

    def current(self) -> tuple[Any, str] | None:
        """(time, id) of the selected checkpoint, where "next / previous problem" starts from."""
        point = next((p for p in self.points.values() if p["checkpoint_id"] == self.highlight), None)
        return (point["created_at"], point["checkpoint_id"]) if point else None


def draw_placeholder(chart: Any) -> None:
    """The session's first Timeline: an empty frame in ``chart`` (Plotly's script loads meanwhile)."""
    if not st.session_state.get(CHART_DRAWN):
        chart.plotly_chart(timeline_placeholder())


def go_to(problem: dict[str, Any] | None) -> None:
    """Select ``problem``'s checkpoint (once the lanes are read) and centre the chart on it."""
    if problem:
        st.session_state[PENDING] = {k: problem.get(k) for k in ("checkpoint_id", "namespace", "run_id")}
        st.session_state[FOCUS] = {k: problem.get(k) for k in ("checkpoint_id", "created_at")}


def open_hit(hit: dict[str, Any]) -> None:
    """A search hit or a waiting run: its run as the scope, its checkpoint (if any) selected."""
    st.session_state.update({AGENT: ALL_AGENTS, STATUS: [], SINCE: None, UNTIL: None, RUN: hit["run_id"],
                             CHECKPOINT: None, TYPED_REF: "", FOCUS: None})
    if hit.get("hit") != "run" and isinstance(hit.get("checkpoint_id"), str):
        go_to(hit)


def take_click(data: LanesData) -> Selection:
    """A pending selection (link, hit, problem) and the chart's last click (read before the chart
    is drawn again) applied to the pickers."""
    choices, points = lane_choices(data.points)
    pending = st.session_state.pop(PENDING, None)
    if pending:
        _select(pending, choices, points)
    clicked, bucket_clicked = selected_checkpoint(st.session_state.get(CHART))
    if clicked and clicked != st.session_state.get(CLICKED):
        st.session_state[CLICKED] = clicked
        _select({"checkpoint_id": clicked}, choices, points)
    if st.session_state.get(CHECKPOINT) not in choices:
        st.session_state[CHECKPOINT] = None
    typed = (st.session_state.get(TYPED_REF) or "").strip()
    chosen = points.get(st.session_state[CHECKPOINT] or "")
    highlight = typed or (chosen["checkpoint_id"] if chosen else None)
    return Selection(choices, points, highlight, bool(bucket_clicked and not clicked))


def _select(wanted: dict[str, Any], choices: dict[str, str], points: dict[str, dict[str, Any]]) -> None:
    cid, ns, run = wanted.get("checkpoint_id"), wanted.get("namespace") or "", wanted.get("run_id")
    value = next((v for v, p in points.items() if p["checkpoint_id"] == cid and (p["namespace"] == ns or not ns)
                  and (p["run_id"] == run or not run or is_handle(run))), None)
    if value is not None:
        st.session_state.update({CHECKPOINT: value, TYPED_REF: ""})
    else:  # not a point the picker lists (bucketed, or out of scope): by its id
        st.session_state.update({CHECKPOINT: None, TYPED_REF: f"{cid}@{ns}" if ns else str(cid)})


def problem_nav(found: pd.DataFrame, selection: Selection) -> None:
    """Previous / Next problem (a damaged checkpoint, an error or interrupt event), in time order."""
    current = selection.current()
    before, after = lanes.step_problem(found, current, False), lanes.step_problem(found, current, True)
    row = st.container(horizontal=True, vertical_alignment="center")
    row.button("Previous problem", key=PREVIOUS, icon=":material/arrow_back:", disabled=before is None,
               on_click=go_to, args=(before,))
    row.button("Next problem", key=NEXT, icon=":material/arrow_forward:", disabled=after is None,
               on_click=go_to, args=(after,))
    row.caption(problem_summary(found, current))


def problem_summary(found: pd.DataFrame, current: tuple[Any, str] | None) -> str:
    if found.empty:
        return "No damaged checkpoints and no error or interrupt events in these lanes."
    damaged = int(found["what"].isin(["corrupt", "incomplete"]).sum())
    text = f"{len(found):,} problem(s) here: {damaged:,} damaged checkpoint(s), {len(found) - damaged:,} event(s)"
    if current is not None:
        at = [i for i, c in enumerate(found["checkpoint_id"]) if c == current[1]]
        if at:
            text += f" · the selected checkpoint is problem {at[0] + 1} of {len(found):,} ({found['what'].iloc[at[0]]})"
    return text


def draw_chart(chart: Any, data: LanesData, scope: Scope, selection: Selection) -> None:
    figure = lanes_figure(data, scope.axis, selection.highlight, _focus(data, scope.axis))
    chart.plotly_chart(figure, on_select=links.not_a_link, selection_mode="points", key=CHART)
    st.session_state[CHART_DRAWN] = True
    if selection.bucket_clicked:
        st.info("That point stands for many checkpoints: pick a single run to inspect them one by one.")


def _focus(data: LanesData, axis: str) -> Any:
    """The x the chart's view centres on: where the problem last gone to is (None: the whole span)."""
    focus = st.session_state.get(FOCUS)
    if not focus:
        return None
    if axis == TIME:
        return focus.get("created_at")
    steps = data.points[data.points["checkpoint_id"] == focus.get("checkpoint_id")]["step"]
    return steps.iloc[0] if len(steps) else None


def pick_checkpoint(selection: Selection) -> str | None:
    """The Checkpoint picker and the id box beside it: the checkpoint to show, or None."""
    pick, typed = st.columns([3, 2])
    choices = selection.choices
    chosen = pick.selectbox("Checkpoint", list(choices), format_func=choices.get, index=None,
                            placeholder="Click a point above, or pick one here", key=CHECKPOINT,
                            on_change=_forget_typed_ref)
    prefix = typed.text_input("…or a checkpoint id / unique prefix", key=TYPED_REF,
                              on_change=links.not_a_link).strip()
    return prefix or chosen


def _forget_typed_ref() -> None:
    links.not_a_link()
    st.session_state[TYPED_REF] = ""
    st.session_state[FOCUS] = None


# ---- a training run's metrics -------------------------------------------------------------------


def render_metrics(ref: StoreRef, scope: Scope, data: LanesData, selection: Selection) -> None:
    """A training run's logged metrics over steps, its checkpoints marked by status, the best starred
    (stores whose reader has the ``metrics`` capability): the selected checkpoint's run, else the scope's."""
    from lastgood.display.training import best_checkpoint, metrics_figure

    chosen = next((p for p in selection.points.values() if p["checkpoint_id"] == selection.highlight), None)
    run = chosen["run_id"] if chosen else (scope.run_id or (scope.run_ids[0] if scope.run_ids else None))
    if run is None or not lanes.has_metrics(ref):
        return
    metrics = lanes.run_metrics(ref, run)
    if metrics.empty:
        return
    points = data.points[data.points["run_id"] == run]
    best = best_checkpoint(points, metrics)
    st.subheader("Logged metrics")
    st.caption(f"Run {code(run)}: every checkpoint marked at its step, coloured by status"
               + (f"; best checkpoint {code(best)} starred" if best else ""))
    st.plotly_chart(metrics_figure(metrics, points, best, selection.highlight), key=METRICS_CHART)


# ---- the first screen, read ahead -------------------------------------------------------------------


TIMELINE_WARM_UP_DELAY = 3.0  # seconds after the Overview was drawn (the Plotly imports go first)
_warm_lock = threading.Lock()
_timeline_warmed: dict[tuple[str, int], float] = {}
_warm_ups: weakref.WeakSet[threading.Timer] = weakref.WeakSet()


@atexit.register
def _stop_warm_ups() -> None:
    """At exit, a warm-up not yet started is cancelled and one running is awaited: a daemon
    thread still inside DuckDB when the interpreter ends aborts the process."""
    for timer in list(_warm_ups):
        timer.cancel()
        timer.join(timeout=10)


def warm_up_timeline(ref: StoreRef, delay: float | None = None) -> threading.Timer | None:
    """Read what the Timeline's first screen shows for ``ref`` (its runs, the most recent runs' lanes,
    points, events and problems, the runs waiting on a human) into the query cache in a background thread ``delay`` seconds from
    now, while the operator reads the Overview: the Timeline's first visit then draws without those
    queries. At most once per store per CACHE_TTL (the cached results live that long); None when
    not started."""
    key, now = (ref.index_path, ref.store_id), time.monotonic()
    with _warm_lock:
        if now - _timeline_warmed.get(key, -CACHE_TTL) < CACHE_TTL:
            return None
        _timeline_warmed[key] = now
    timer = threading.Timer(TIMELINE_WARM_UP_DELAY if delay is None else delay, _read_timeline_ahead, [ref])
    timer.daemon, timer.name = True, "lastgood-timeline-warm-up"
    timer.start()
    _warm_ups.add(timer)
    return timer


def _read_timeline_ahead(ref: StoreRef) -> None:
    try:
        runs = query(ref, "runs")
        if runs.empty:
            return
        run_ids = tuple(runs["run_id"].head(MAX_LANES))  # the first screen: lanes for the most recent runs
        for name, *args in (("lanes", None, None), ("lane_points", None, None, MAX_POINTS),
                            ("lane_events", None, None), ("problems", None, None)):
            query(ref, name, run_ids, *args)
        query(ref, "waiting_runs", search.WAITING_LIMIT)
    except Exception:  # noqa: BLE001 - only a head start: the Timeline queries itself and says why
        return
