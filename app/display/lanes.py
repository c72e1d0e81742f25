"""The Timeline's lanes (Plotly, no streamlit): runs as horizontal bands on a time (or step) axis.

One band per run from its first to its last checkpoint, the checkpoints as markers on it; below a
run, its forks' branches (a checkpoint whose parent is not the tip of its branch starts one, drawn
with an edge from that parent) and its namespaces (LangGraph subgraphs, OpenAI branches) as
sub-lanes linked to the checkpoint they started from; then the run's events on a band of their own.

Two encodings that never share a shape: a checkpoint's **status** is its marker's colour and shape
(ok ●, corrupt ✕, incomplete ○, quarantined ◆, superseded faded; unverified ok hollow), its lane's
**head** a dark square ring; an **event** is a glyph on the events band (error ★, timeout ⧗,
interrupt ✡, restart ▶, recovery actions ⇤ …). pandas and plotly are imported by the functions.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from lastgood.cli.output import human_bytes
from lastgood.display.figures import naive_utc, plain, utc
from lastgood.readers.base import Status

if TYPE_CHECKING:
    import pandas as pd
    import plotly.graph_objects as go

TIME, STEP = "time", "step"  # the x axis
# status -> (colour, marker symbol, opacity, legend label)
STATUS_STYLE = {
    Status.OK: ("#2e9e5b", "circle", 1.0, "ok"),
    Status.CORRUPT: ("#d62728", "x", 1.0, "corrupt ✕"),
    Status.INCOMPLETE: ("#ff7f0e", "circle-open", 1.0, "incomplete ○"),
    Status.QUARANTINED: ("#7b3fa0", "diamond", 1.0, "quarantined ◆"),
    Status.SUPERSEDED: ("#9aa0a6", "circle", 0.35, "superseded (faded)"),
}
UNVERIFIED = ("#2e9e5b", "circle-open", 0.9, "ok, data not read yet ○")
# event kind -> (colour, glyph): shapes no status uses, darker colours, on their own band
EVENT_STYLE = {
    "error": ("#8e0152", "star"), "crash": ("#4d0026", "star-square"), "failure": ("#8e0152", "star-diamond"),
    "timeout": ("#4f6d8a", "hourglass"), "interrupt": ("#542788", "hexagram"),
    "resume": ("#542788", "hexagram-open"), "restart": ("#1b7837", "triangle-right"),
    "rewind": ("#1b7837", "triangle-left"), "ended_early": ("#5f5f5f", "bowtie"),
    "tool_call": ("#8c8c8c", "y-down-open"), "tool_result": ("#8c8c8c", "y-up-open"),
    # recovery actions from the store's journal
    "restore": ("#0e7c86", "arrow-bar-left"), "rollback": ("#0e7c86", "arrow-left"),
    "quarantine": ("#7b3fa0", "hash-open"), "release": ("#7b3fa0", "hash-open"), "undo": ("#0e7c86", "arrow-bar-right"),
}
OTHER_EVENT = ("#333333", "triangle-up-open")
HEAD_COLOR, SELECTED_COLOR, EDGE_COLOR, LINK_COLOR = "#111111", "#1f4e99", "#6f6f6f", "#3d7cc9"
BAND_COLORS = {"run": "rgba(120,130,150,0.16)", "branch": "rgba(178,121,162,0.16)",
               "namespace": "rgba(61,124,201,0.14)"}
ROW_HEIGHT, MIN_HEIGHT, MAX_HEIGHT = 34, 320, 1500
MAX_BRANCH_ROWS = 6  # per lane; more branches share the last row
SUB_GAP, EVENTS_GAP = 0.8, 0.6  # rows below a run's lane: its branches and namespaces, its events band
LABEL_LIMIT = 80  # at most this many points: the node that produced each is written beside it
LABEL_GAP = 0.12  # ...unless the lane's previous label is nearer than this share of the x span (they would overlap)


@dataclass
class LanesData:
    """What the lanes show: the lanes (lastgood.index.lanes.lanes), their points (``lane_points``), the
    events (``lane_events``), the runs in display order (most recent first) and the total
    number of checkpoints the points stand for."""

    lanes: pd.DataFrame
    points: pd.DataFrame
    events: pd.DataFrame
    runs: list[str]
    total: int = 0

    @property
    def aggregated(self) -> bool:
        return bool(len(self.points)) and bool((self.points["count"] > 1).any()
                                               or self.points["checkpoint_id"].isna().any())


@dataclass
class Row:
    """One horizontal row of the figure."""

    y: float
    label: str
    kind: str  # run | branch | namespace | events
    run_id: str
    namespace: str = ""
    branch: int = 0


@dataclass
class Layout:
    rows: list[Row] = field(default_factory=list)
    by_key: dict[tuple[str, str, int], float] = field(default_factory=dict)  # (run, ns, branch) -> y
    events: dict[str, float] = field(default_factory=dict)  # run -> y of its events band

    @property
    def bottom(self) -> float:
        return self.rows[-1].y if self.rows else 0.0

    def add(self, label: str, kind: str, run_id: str, namespace: str = "", branch: int = 0) -> float:
        """A row below the last: a run's first row a full row down, its other rows closer (events closest)."""
        gap = 0.0 if not self.rows else (EVENTS_GAP if kind == "events" else SUB_GAP if kind != "run" else 1.0)
        y = round(self.bottom + gap, 3)
        self.rows.append(Row(y, label, kind, run_id, namespace, branch))
        if kind == "events":
            self.events[run_id] = y
        else:
            self.by_key[(run_id, namespace, branch)] = y
        return y


# ---- branches and layout -----------------------------------------------------------------


def assign_branches(points: pd.DataFrame) -> pd.DataFrame:
    """``points`` with ``branch`` (0: the lane's main line) and ``fork`` (it starts a branch): a
    checkpoint continues its parent's branch when the parent is that branch's newest checkpoint so
    far, else it starts a new one (LangGraph's update_state/fork from an old checkpoint, a rewind).
    A fork whose parent was aggregated into a bucket stays on the main line (its edge still drawn)."""
    branches, forks = [], []
    state: dict[tuple[str, str], tuple[dict[str, int], dict[int, str]]] = {}
    for run, ns, cid, parent, fork in zip(points["run_id"], points["namespace"], points["checkpoint_id"],
                                          points["parent_id"], points["fork"]):
        of, tip = state.setdefault((run, ns), ({}, {0: ""}))
        b, new = 0, bool(fork) and isinstance(cid, str)
        if isinstance(cid, str) and isinstance(parent, str) and parent in of:
            b = of[parent]
            new = tip.get(b) != parent
            if new:
                b = min(len(tip), MAX_BRANCH_ROWS)
        if isinstance(cid, str):
            of[cid], tip[b] = b, cid
        branches.append(b)
        forks.append(new)
    return points.assign(branch=branches, fork=forks)


def layout(data: LanesData, points: pd.DataFrame) -> Layout:
    """Rows top to bottom: per run (most recent first) its lane, its branches, its namespaces (in
    the order they started), then its events band when it has events."""
    out = Layout()
    lanes = data.lanes
    with_events = set(data.events["run_id"]) if len(data.events) else set()
    for run in data.runs:
        mine = lanes[lanes["run_id"] == run]
        if mine.empty:
            continue
        for ns in [n for n in mine["namespace"] if n == ""] + [n for n in mine["namespace"] if n != ""]:
            kind = "run" if ns == "" else "namespace"
            label = _short(run, 30) if ns == "" else f"  ↳ {_short(ns, 24)}"
            out.add(label, kind, run, ns)
            lane_branches = points[(points["run_id"] == run) & (points["namespace"] == ns)]["branch"]
            for b in sorted(set(lane_branches) - {0}):
                out.add(f"  ↳ fork {b}", "branch", run, ns, int(b))
        if run in with_events:
            out.add("  events", "events", run)
    return out


def _short(text: str, size: int) -> str:
    return text if len(text) <= size else text[: size - 1] + "…"


# ---- the figure ---------------------------------------------------------------------------


def lanes_figure(data: LanesData, axis: str = TIME, highlight: str | None = None,
                 focus: Any = None) -> go.Figure:
    """The lanes; ``highlight``: the selected checkpoint (ringed); ``focus``: an x value to center
    the view on (the problem "next/previous" went to)."""
    import plotly.graph_objects as go

    points = assign_branches(data.points) if len(data.points) else data.points.assign(branch=[])
    rows = layout(data, points)
    points = points.assign(y=[rows.by_key.get((r, n, b), rows.by_key.get((r, n, 0)))
                              for r, n, b in zip(points["run_id"], points["namespace"], points["branch"])])
    fig = go.Figure()
    fig.add_traces(_bands(data, points, rows, axis))
    fig.add_traces(_edges(data, points, rows, axis))
    fig.add_traces(_status_traces(points, axis, labels=len(points) <= LABEL_LIMIT))
    fig.add_traces(_head_trace(points, axis))
    fig.add_traces(_event_traces(data.events, points, rows, axis))
    fig.add_traces(_selected_trace(points, axis, highlight))
    _axes(fig, rows, axis, focus, data)
    return fig


def x_of(frame: pd.DataFrame, axis: str) -> Any:
    return naive_utc(frame["created_at"]) if axis == TIME else frame["step"]


def _bands(data: LanesData, points: pd.DataFrame, rows: Layout, axis: str) -> list[go.Scatter]:
    """One thick translucent line per row, from its first to its last point."""
    import plotly.graph_objects as go

    traces = []
    for kind, color in BAND_COLORS.items():
        xs: list[Any] = []
        ys: list[Any] = []
        for row in (r for r in rows.rows if r.kind == kind):
            mine = points[points["y"] == row.y]
            if mine.empty:
                continue
            x = x_of(mine, axis)
            xs += [x.min(), x.max(), None]
            ys += [row.y, row.y, None]
        if xs:
            traces.append(go.Scatter(x=xs, y=ys, mode="lines", line=dict(color=color, width=16),
                                     hoverinfo="skip", showlegend=False, name=f"{kind} band"))
    return traces


def _edges(data: LanesData, points: pd.DataFrame, rows: Layout, axis: str) -> list[go.Scatter]:
    """Fork edges (parent → the checkpoint that starts a branch) and namespace links (the
    checkpoint a subgraph started from → its first checkpoint)."""
    import plotly.graph_objects as go

    traces = []
    forks = points[points["fork"].astype(bool)] if len(points) else points
    xs, ys = _fork_segments(forks, points, rows, axis)
    if xs:
        traces.append(go.Scatter(x=xs, y=ys, mode="lines", name="fork: branch from an earlier checkpoint",
                                 line=dict(color=EDGE_COLOR, width=1.5), hoverinfo="skip",
                                 legendgroup="marks", legendgrouptitle_text="marks"))
    xs, ys = _namespace_segments(data.lanes, points, rows, axis)
    if xs:
        traces.append(go.Scatter(x=xs, y=ys, mode="lines", name="sub-lane started from (parent → child)",
                                 line=dict(color=LINK_COLOR, width=1.5, dash="dot"), hoverinfo="skip",
                                 legendgroup="marks", legendgrouptitle_text="marks"))
    return traces


def _fork_segments(forks: pd.DataFrame, points: pd.DataFrame, rows: Layout, axis: str) -> tuple[list, list]:
    import pandas as pd

    xs: list[Any] = []
    ys: list[Any] = []
    where = {c: (x, y) for c, x, y in zip(points["checkpoint_id"], x_of(points, axis), points["y"])
             if isinstance(c, str)}
    for row, x in zip(forks.to_dict("records"), x_of(forks, axis)):
        start = where.get(row["parent_id"])
        if start is None and not pd.isna(row.get("parent_at")):  # the parent was bucketed: its lane, its time
            start = (naive_utc(pd.Series([row["parent_at"]])).iloc[0] if axis == TIME else row["parent_step"],
                     rows.by_key.get((row["run_id"], row["namespace"], 0)))
        if start is not None:
            xs += [start[0], x, None]
            ys += [start[1], row["y"], None]
    return xs, ys


def _namespace_segments(lanes: pd.DataFrame, points: pd.DataFrame, rows: Layout, axis: str) -> tuple[list, list]:
    import pandas as pd

    xs: list[Any] = []
    ys: list[Any] = []
    subs = lanes[(lanes["namespace"] != "") & lanes["parent_at"].notna()] if len(lanes) else lanes
    for lane in subs.to_dict("records"):
        child = points[(points["run_id"] == lane["run_id"]) & (points["namespace"] == lane["namespace"])]
        parent_y = rows.by_key.get((lane["run_id"], "", 0))
        if child.empty or parent_y is None:
            continue
        first = child.iloc[:1]
        start = naive_utc(pd.Series([lane["parent_at"]])).iloc[0] if axis == TIME else lane["parent_step"]
        xs += [start, x_of(first, axis).iloc[0], None]
        ys += [parent_y, first["y"].iloc[0], None]
    return xs, ys


def _status_of(frame: pd.DataFrame) -> list[tuple[str, str, float, str]]:
    unverified = (frame["status"] == Status.OK) & ~frame["data_checked"].fillna(False).astype(bool)
    return [UNVERIFIED if u else STATUS_STYLE.get(s, STATUS_STYLE[Status.OK])
            for s, u in zip(frame["status"], unverified)]


def _status_traces(points: pd.DataFrame, axis: str, labels: bool) -> list[go.Scatter]:
    """One trace per status (the legend's status group), damaged drawn last (on top)."""
    import plotly.graph_objects as go

    if points.empty:
        return []
    styles = _status_of(points)
    points = points.assign(style=[s[3] for s in styles])
    if labels:
        points = points.assign(label=spaced_labels(points, axis))
    dense = len(points) / max(points["y"].nunique(), 1)  # points per row: smaller markers, no outline
    order = [s[3] for s in (*STATUS_STYLE.values(), UNVERIFIED)]
    order = [o for o in order if o not in ("corrupt ✕", "incomplete ○")] + ["incomplete ○", "corrupt ✕"]
    traces = []
    for name in order:
        group = points[points["style"] == name]
        if group.empty:
            continue
        color, symbol, opacity, _ = next(s for s in styles if s[3] == name)
        damaged = name in ("corrupt ✕", "incomplete ○")
        base = 10 if dense < 60 else 6
        sizes = [min(8 + 3 * math.sqrt(c), 26) if c > 1 else (13 if damaged else base) for c in group["count"]]
        outline = "#ffffff" if dense < 60 and symbol == "circle" else color
        text = list(group["label"]) if labels else None
        traces.append(go.Scatter(
            x=x_of(group, axis), y=group["y"], mode="markers+text" if labels else "markers", name=name,
            legendgroup="status", legendgrouptitle_text="status", opacity=opacity,
            marker=dict(color=color, symbol=symbol, size=sizes,
                        line=dict(width=2.5 if damaged else 1, color=outline)),
            text=text, textposition="top center", textfont=dict(size=9, color="#555"),
            customdata=[[c if isinstance(c, str) else None] for c in group["checkpoint_id"]],
            hovertext=[point_label(r) for r in group.to_dict("records")], hoverinfo="text"))
    return traces


def spaced_labels(points: pd.DataFrame, axis: str) -> list[str]:
    """The node beside each point, in time (or step) order along each lane, left out where it would
    overlap the lane's previous label (nearer than LABEL_GAP of the chart's x span) or repeat it."""
    xs = [float(x) for x in (x_of(points, axis).astype("int64") if axis == TIME else points["step"].fillna(0))]
    gap = (max(xs) - min(xs)) * LABEL_GAP if xs else 0.0
    labels = [""] * len(xs)
    last: dict[Any, tuple[float, str]] = {}  # lane -> (x, text) of its last label
    for i in sorted(range(len(xs)), key=xs.__getitem__):
        node = points["node"].iat[i]
        text = plain(_short(str(node), 18)) if isinstance(node, str) else ""
        lane = points["y"].iat[i]
        if text and _room(last.get(lane), xs[i], text, gap):
            labels[i] = text
            last[lane] = (xs[i], text)
    return labels


def _room(before: tuple[float, str] | None, x: float, text: str, gap: float) -> bool:
    """A label fits at ``x``: the lane has none yet, or its last is a gap away (two gaps if the same text)."""
    return before is None or x - before[0] >= (2 * gap if text == before[1] else gap)


def point_label(row: dict[str, Any]) -> str:
    """A point's hover text (store text escaped for Plotly: :func:`lastgood.display.figures.plain`)."""
    import pandas as pd

    where = plain(row["run_id"]) + (f" · {plain(row['namespace'])}" if row.get("namespace") else "")
    if row.get("count", 1) > 1 or not isinstance(row.get("checkpoint_id"), str):
        return (f"<b>{int(row['count']):,} checkpoints</b> (aggregated) in {where}<br>from step {row['step']} · "
                f"{human_bytes(row['size_bytes'])}<br>bucket at {utc(row['created_at'])} UTC")
    marks = [m for m, on in (("head", row.get("is_head")), ("fork", row.get("fork"))) if on]
    reason = row.get("status_reason")
    lines = [f"<b>{where}</b> step {row['step']}" + (f" · {' · '.join(marks)}" if marks else ""),
             f"node <b>{plain(row.get('node') or '-')}</b> · {plain(row.get('trigger') or '-')}",
             f"{row['status']} · {human_bytes(row['size_bytes'])} · {utc(row['created_at'])} UTC",
             plain(row["checkpoint_id"])]
    if isinstance(reason, str):
        lines.append(plain(reason[:120]))
    if row.get("status") == Status.OK and not bool(row.get("data_checked", True)):
        lines.append("<i>unverified: data not read by a check yet</i>")
    added = row.get("step_added")
    if added is not None and not pd.isna(added):
        lines.append(f"vs parent: +{int(added)} −{int(row['step_removed'])} ~{int(row['step_changed'])}")
    return "<br>".join(lines)


def _head_trace(points: pd.DataFrame, axis: str) -> list[go.Scatter]:
    import plotly.graph_objects as go

    heads = points[points["is_head"].fillna(False).astype(bool)] if len(points) else points
    if heads.empty:
        return []
    return [go.Scatter(x=x_of(heads, axis), y=heads["y"], mode="markers", name="head (what resumes)",
                       legendgroup="marks", legendgrouptitle_text="marks", hoverinfo="skip",
                       marker=dict(symbol="square-open", size=20, color=HEAD_COLOR, line=dict(width=2)))]


def _event_traces(events: pd.DataFrame, points: pd.DataFrame, rows: Layout, axis: str) -> list[go.Scatter]:
    """One trace per event kind, on each run's events band (in step mode: at its checkpoint's step)."""
    import plotly.graph_objects as go

    if events.empty:
        return []
    frame = events.assign(y=events["run_id"].map(rows.events)).dropna(subset=["y"])
    if axis == STEP:
        steps = points.dropna(subset=["checkpoint_id"]).drop_duplicates("checkpoint_id").set_index("checkpoint_id")
        frame = frame.assign(step=frame["checkpoint_id"].map(steps["step"])).dropna(subset=["step"])
    traces = []
    for kind, group in frame.groupby("kind", sort=True):
        color, symbol = EVENT_STYLE.get(str(kind), OTHER_EVENT)
        journal = (group["source"] == "journal").any() if "source" in group else False
        traces.append(go.Scatter(
            x=x_of(group, axis), y=group["y"], mode="markers", name=plain(kind) + (" (journal)" if journal else ""),
            legendgroup="events", legendgrouptitle_text="events",
            marker=dict(symbol=symbol, size=11, color=color, line=dict(width=1.5, color=color)),
            customdata=[[c if isinstance(c, str) else None] for c in group["checkpoint_id"]],
            hovertext=[f"<b>{plain(kind)}</b> in {plain(r['run_id'])}<br>{utc(r['created_at'])} UTC<br>"
                       f"{plain(str(r['message'] or '')[:160])}" for r in group.to_dict("records")],
            hoverinfo="text"))
    return traces


def _selected_trace(points: pd.DataFrame, axis: str, highlight: str | None) -> list[go.Scatter]:
    import plotly.graph_objects as go

    if not highlight or points.empty:
        return []
    ids = points["checkpoint_id"].fillna("")
    chosen = points[ids == highlight]
    if chosen.empty:
        chosen = points[ids.str.startswith(highlight)]
    if len(chosen) != 1:
        return []
    return [go.Scatter(x=x_of(chosen, axis), y=chosen["y"], mode="markers", name="selected",
                       legendgroup="marks", legendgrouptitle_text="marks", hoverinfo="skip",
                       marker=dict(symbol="circle-open", size=28, color=SELECTED_COLOR, line=dict(width=3)))]


def _axes(fig: go.Figure, rows: Layout, axis: str, focus: Any, data: LanesData) -> None:
    ticks = [r.y for r in rows.rows]
    text = [f"<b>{plain(r.label)}</b>" if r.kind == "run" else
            f"<span style='font-size:10px;color:#777'>{plain(r.label)}</span>" if r.kind == "events" else plain(r.label)
            for r in rows.rows]
    fig.update_yaxes(tickvals=ticks, ticktext=text, range=[rows.bottom + 0.6, -0.7], showgrid=False,
                     zeroline=False, fixedrange=True, title_text=None)
    fig.update_xaxes(title_text="created at (UTC)" if axis == TIME else "step", showgrid=True)
    if focus is not None:
        fig.update_xaxes(range=_window(data, axis, focus))
    height = int(min(max(MIN_HEIGHT, ROW_HEIGHT * (rows.bottom + 1.3) + 110), MAX_HEIGHT))
    fig.update_layout(height=height, margin=dict(l=10, r=10, t=30, b=10), clickmode="event+select",
                      dragmode="zoom", hovermode="closest", uirevision=f"{axis}:{focus}",
                      legend=dict(orientation="v", x=1.01, y=1, yanchor="top", groupclick="toggleitem"))


def _window(data: LanesData, axis: str, focus: Any) -> list[Any]:
    """An x range around ``focus``: a tenth of the shown span each side (at least a minute or a step)."""
    import pandas as pd

    x = x_of(data.points, axis)
    if axis == TIME:
        center = naive_utc(pd.Series([focus])).iloc[0]
        half = max((x.max() - x.min()) / 10, pd.Timedelta(minutes=1))
    else:
        center = float(focus)
        half = max(float(x.max() - x.min()) / 10, 1.0)
    return [center - half, center + half]



MAX_CHOICES = 3000


def lane_choices(points: pd.DataFrame) -> tuple[dict[str, str], dict[str, dict[str, Any]]]:
    """The checkpoints a picker lists, newest first (at most MAX_CHOICES): value -> label, and value ->
    its point (checkpoint_id, run_id, namespace, created_at, step). A value is the checkpoint id, or
    ``RUN/ID@NS`` (lastgood.index.queries.checkpoint_ref) when that id is in several lanes."""
    from lastgood.index.queries import checkpoint_ref

    named = points.dropna(subset=["checkpoint_id"]).sort_values("created_at", ascending=False).head(MAX_CHOICES)
    repeated = set(named["checkpoint_id"][named["checkpoint_id"].duplicated()])
    choices: dict[str, str] = {}
    found: dict[str, dict[str, Any]] = {}
    for row in named.to_dict("records"):
        cid = row["checkpoint_id"]
        value = checkpoint_ref(row["run_id"], row["namespace"], cid) if cid in repeated else cid
        where = row["run_id"] + (f" · {row['namespace']}" if row["namespace"] else "")
        choices[value] = (f"{where} · step {row['step']} · {row.get('node') or row['trigger']} · "
                          f"{utc(row['created_at'])} · {row['status']} · {cid[:13]}{'…' if len(cid) > 13 else ''}")
        found[value] = {k: row[k] for k in ("checkpoint_id", "run_id", "namespace", "created_at", "step")}
    return choices, found
