"""Figures and display formatting for the pages (no streamlit here).

The Overview's two summary figures are SVG drawn on the server (lastgood.display.svg_charts): no chart
library for the browser to load before the first page. The interactive Timeline is Plotly (zoom,
click to select). pandas and plotly are imported by the functions that use them, so the Overview
never imports either.
"""

from __future__ import annotations

import html
import math
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from lastgood.cli.output import escape_controls, human_bytes
from lastgood.readers.base import DAMAGED_STATUSES, Status

if TYPE_CHECKING:
    import pandas as pd
    import plotly.graph_objects as go

DAMAGED = tuple(DAMAGED_STATUSES)


def plain(value: Any) -> str:
    """Store text for plotly, whose hover texts, axis and legend labels are HTML (links
    included) and whose hover templates expand ``%{…}``: shown literally instead."""
    text = html.escape(escape_controls(str(value)), quote=False)
    return text.replace("{", "&#123;").replace("}", "&#125;")


ALL_RUNS = "All runs"


MAX_CHOICES = 3000


STATUS_COLORS = {Status.OK: "#2e9e5b", Status.CORRUPT: "#d62728", Status.INCOMPLETE: "#ff7f0e",
                 Status.QUARANTINED: "#9467bd", Status.SUPERSEDED: "#9aa0a6"}


STATUS_SYMBOLS = {Status.OK: "circle", Status.CORRUPT: "x", Status.INCOMPLETE: "x", Status.QUARANTINED: "diamond",
                  Status.SUPERSEDED: "circle-open"}


TRIGGER_COLORS = {"periodic": "#4c78a8", "event": "#f58518", "manual": "#54a24b",
                  "final": "#b279a2", "restore": "#17becf",
                  # LangGraph's metadata sources
                  "input": "#72b7b2", "loop": "#4c78a8", "update": "#e45756", "fork": "#b279a2"}


EVENT_SYMBOLS = {"error": "star", "timeout": "hourglass", "interrupt": "diamond-tall",
                 "restart": "triangle-right", "crash": "star", "failure": "star"}


EVENT_COLORS = {"error": "#8e0152", "crash": "#4d0026", "failure": "#8e0152", "timeout": "#b35806",
                "interrupt": "#542788", "restart": "#1b7837"}


@dataclass
class TimelineData:
    points: pd.DataFrame
    aggregated: bool
    events: pd.DataFrame
    total: int


def compact(n: int) -> str:
    """1,234 / 123,456 / 1.2M — short enough for a metric card."""
    return f"{n:,}" if n < 1_000_000 else f"{n / 1_000_000:.1f}M"


def utc(value: Any) -> str:
    """A time as ``YYYY-MM-DD HH:MM:SS`` in UTC (naive times are UTC); "-" when missing."""
    if value is None or value != value:  # None, NaN, NaT
        return "-"
    if not isinstance(value, datetime):  # numpy datetime64, epoch numbers
        import pandas as pd

        value = pd.Timestamp(value)
    stamp = value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)
    return stamp.strftime("%Y-%m-%d %H:%M:%S")


def naive_utc(series: pd.Series) -> pd.Series:
    import pandas as pd

    series = pd.to_datetime(series, utc=True)
    return series.dt.tz_convert("UTC").dt.tz_localize(None)


def _style(fig: go.Figure, x: str, y: str, height: int = 320) -> go.Figure:
    fig.update_layout(height=height, margin=dict(l=10, r=10, t=30, b=10),
                      legend=dict(orientation="h", yanchor="bottom", y=1.02, x=0))
    fig.update_xaxes(title_text=x)
    fig.update_yaxes(title_text=y)
    return fig


# ---- the Timeline's figure (Plotly) ----------------------------------------------------------


def run_labels(runs: pd.DataFrame) -> dict[str, str]:
    """ALL_RUNS plus run id -> "run · agent · N checkpoints · last at", most recent first."""
    labels = {ALL_RUNS: f"All runs ({len(runs):,})"}
    for r in runs.head(MAX_CHOICES).itertuples():
        damaged = int(r.corrupt + r.incomplete)
        labels[r.run_id] = (f"{r.run_id} · {r.agent or '-'} · {int(r.checkpoints):,} ckpt"
                            + (f" · {damaged} damaged" if damaged else "") + f" · last {utc(r.last_at)}")
    return labels


def _records(frame: pd.DataFrame) -> list[dict[str, Any]]:
    """The rows of ``frame`` as dicts (``iterrows`` builds a Series per row: ~10× slower)."""
    return frame.to_dict("records")


def _point_label(row: dict[str, Any], aggregated: bool) -> str:
    import pandas as pd

    if aggregated and pd.isna(row.get("checkpoint_id")):
        return (f"<b>{int(row['count']):,} checkpoints</b> (aggregated) from {int(row['runs'])} run(s)"
                f"<br>{plain(row['trigger'])} · {row['status']} · {human_bytes(row['size_bytes'])}"
                f"<br>from step {row['step']} · bucket at {utc(row['created_at'])} UTC")
    reason = f"<br>{plain(str(row['status_reason'])[:100])}" if isinstance(row.get("status_reason"), str) else ""
    if row.get("status") == Status.OK and not bool(row.get("data_checked", True)):
        reason += "<br><i>unverified: data not read by a check yet</i>"
    return (f"<b>{plain(row['run_id'])}</b> step {row['step']}<br>{plain(row['trigger'])} · {row['status']} · "
            f"{human_bytes(row['size_bytes'])}<br>{utc(row['created_at'])} UTC<br>"
            f"{plain(row['checkpoint_id'])}{reason}{_step_label(row)}")


def _step_label(row: dict[str, Any]) -> str:
    """What the checkpoint changed against its parent, when the data check recorded it."""
    import pandas as pd

    added = row.get("step_added")
    if added is None or pd.isna(added):
        return ""
    paths = row.get("step_paths")
    touched = ", ".join(plain(str(p)) for p in list(paths)[:4]) if paths is not None else ""
    return (f"<br>vs parent: +{int(added)} −{int(row['step_removed'])} ~{int(row['step_changed'])}"
            + (f" in {touched}" if touched else ""))


def _y_values(frame: pd.DataFrame, y: str) -> pd.Series:
    if y == "step":
        return frame["step"]
    return frame["run_id"].fillna("(aggregated)").map(plain)  # axis labels are plotly HTML


def _unverified(frame: pd.DataFrame) -> pd.Series:
    """Healthy-looking checkpoints whose data has not been read yet (drawn hollow: not known good)."""
    import pandas as pd

    if "data_checked" not in frame:
        return pd.Series(False, index=frame.index)
    return (frame["status"] == Status.OK) & ~frame["data_checked"].fillna(False).astype(bool)


def _point_trace(frame: pd.DataFrame, name: str, color: str, y: str, aggregated: bool,
                 group: str) -> go.Scatter:
    import plotly.graph_objects as go

    symbols = [STATUS_SYMBOLS.get(s, "circle") + ("-open" if u else "")
               for s, u in zip(frame["status"], _unverified(frame))]
    damaged = frame["status"].isin(DAMAGED)
    base = 9 if len(frame) < 500 else 6
    sizes = [14 if d else base for d in damaged]
    if aggregated:
        sizes = [min(8 + 3 * math.sqrt(c), 30) for c in frame["count"]]
    ids = frame[["checkpoint_id"]].astype(object)
    return go.Scatter(
        x=naive_utc(frame["created_at"]), y=_y_values(frame, y), mode="markers", name=name,
        legendgroup=group, legendgrouptitle_text=group, customdata=ids.where(ids.notna(), None).values,
        marker=dict(color=color, symbol=symbols, size=sizes, line=dict(width=1, color="#333")),
        hovertext=[_point_label(r, aggregated) for r in _records(frame)], hoverinfo="text")


def _event_traces(events: pd.DataFrame, points: pd.DataFrame, y: str) -> list[go.Scatter]:
    import plotly.graph_objects as go

    if events.empty:
        return []
    frame = events.copy()
    if y == "step":
        steps = points.dropna(subset=["checkpoint_id"]).set_index("checkpoint_id")["step"]
        frame["step"] = frame["checkpoint_id"].map(steps)
        frame = frame.dropna(subset=["step"])
    traces = []
    for kind, group in frame.groupby("kind"):
        traces.append(go.Scatter(
            x=naive_utc(group["created_at"]), y=_y_values(group, y), mode="markers",
            name=plain(kind), legendgroup="events", legendgrouptitle_text="events",
            marker=dict(symbol=EVENT_SYMBOLS.get(kind, "triangle-up"), size=12, opacity=0.8,
                        color=EVENT_COLORS.get(kind, "#333"), line=dict(width=1, color="#fff")),
            hovertext=[f"<b>{plain(kind)}</b> in {plain(r['run_id'])}<br>{utc(r['created_at'])} UTC<br>"
                       f"{plain(str(r['message'] or '')[:160])}" for r in _records(group)],
            hoverinfo="text", customdata=group[["checkpoint_id"]].values))
    return traces


def timeline_figure(data: TimelineData, color_by_status: bool, y: str,
                    highlight: str | None = None) -> go.Figure:
    """Checkpoints over time: colored by trigger (damaged as red X) or by status; ``highlight`` ringed."""
    import plotly.graph_objects as go

    points, agg = data.points, data.aggregated
    is_damaged = points["status"].isin(DAMAGED)
    healthy, damaged = points[~is_damaged], points[is_damaged]
    fig = go.Figure()
    if color_by_status:
        for status, group in healthy.groupby("status"):
            color = STATUS_COLORS.get(status, "#888")
            fig.add_trace(_point_trace(group, str(status), color, y, agg, "status"))
    else:
        for trigger, group in healthy.groupby(healthy["trigger"].fillna("(none)")):
            fig.add_trace(_point_trace(group, str(trigger), TRIGGER_COLORS.get(trigger, "#888"), y, agg,
                                       "trigger"))
    fig.add_traces(_event_traces(data.events, points, y))
    groups = list(damaged.groupby("status")) if color_by_status else [("damaged", damaged)]
    for name, group in groups:  # drawn last so damaged checkpoints stay on top
        if not group.empty:
            color = STATUS_COLORS.get(name, STATUS_COLORS[Status.CORRUPT])
            fig.add_trace(_point_trace(group, str(name), color, y, agg, "status"))
    chosen = points[points["checkpoint_id"].fillna("").str.startswith(highlight)] if highlight else points[:0]
    if len(chosen) == 1:
        fig.add_trace(go.Scatter(
            x=naive_utc(chosen["created_at"]), y=_y_values(chosen, y), mode="markers", name="selected",
            showlegend=False, hoverinfo="skip",
            marker=dict(symbol="circle-open", size=24, color="#111", line=dict(width=3))))
    fig.update_layout(clickmode="event+select", dragmode="zoom", hovermode="closest")
    rows = 12
    if y == "run":
        rows = len(set(_y_values(points, y)) | set(data.events["run_id"].dropna()))
        fig.update_yaxes(type="category", categoryorder="category descending", dtick=1)
    return _style(fig, "created at (UTC)", y, height=int(min(max(380, 22 * rows + 180), 900)))


def timeline_placeholder() -> go.Figure:
    """An empty frame of the Timeline's size, drawn where its figure will be while the page reads
    the checkpoints: the browser starts loading and compiling its Plotly script (4.7 MB, ~1.5 s of
    a small machine's CPU) then, not only once the figure is ready. It can be the page's first
    Plotly import, while the Overview's warm-up imports pandas: see ``import_plotly_figures``."""
    from lastgood.display.plotly_theme import import_plotly_figures

    go = import_plotly_figures()
    fig = go.Figure()
    fig.add_annotation(text="Reading the checkpoints…", showarrow=False, xref="paper", yref="paper",
                       x=0.5, y=0.5, font=dict(color="#888"))
    fig.update_xaxes(visible=False)
    fig.update_yaxes(visible=False)
    fig.update_layout(height=380, margin=dict(l=10, r=10, t=30, b=10))
    return fig


def selected_checkpoint(event: Any) -> tuple[str | None, bool]:
    """(checkpoint id, whether an aggregated point was clicked) from a plotly chart's state."""
    selection = event.get("selection") if isinstance(event, dict) else getattr(event, "selection", None)
    points = (selection or {}).get("points", [])
    for point in points:
        custom = point.get("customdata")
        value = custom[0] if isinstance(custom, list) and custom else custom
        if isinstance(value, str) and value:
            return value, False
    return None, bool(points)


def checkpoint_choices(points: pd.DataFrame) -> dict[str, str]:
    """checkpoint id -> label, newest first (at most MAX_CHOICES)."""
    named = points.dropna(subset=["checkpoint_id"]).sort_values("created_at", ascending=False)
    named = named.head(MAX_CHOICES)
    return {r["checkpoint_id"]: f"{r['run_id']} · step {r['step']} · {utc(r['created_at'])} · "
            f"{r['trigger']} · {r['status']} · {r['checkpoint_id'][:13]}…" for r in _records(named)}
