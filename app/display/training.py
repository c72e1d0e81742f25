"""A training run's logged metrics over steps (Plotly, no streamlit): one panel per kind of metric
(losses, learning rate, gradient norm, other eval metrics), every checkpoint marked at its step and
coloured by status as in the lanes, the best checkpoint starred."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from lastgood.display.figures import plain
from lastgood.display.lanes import STATUS_STYLE, UNVERIFIED
from lastgood.readers.base import Status

if TYPE_CHECKING:
    import pandas as pd
    import plotly.graph_objects as go

PANELS = (("loss", lambda n: "loss" in n), ("learning rate", lambda n: n in ("learning_rate", "lr")),
          ("grad norm", lambda n: "grad_norm" in n), ("eval", lambda n: n.startswith("eval_")))
SKIPPED = ("epoch", "step", "global_step", "total_flos", "train_runtime", "eval_runtime")
BEST_COLOR = "#d4a017"
LINE_COLORS = ("#4c78a8", "#f58518", "#54a24b", "#e45756", "#72b7b2", "#b279a2")


def panels(metrics: pd.DataFrame) -> list[tuple[str, list[str]]]:
    """The panels to draw: (title, metric names), in PANELS' order, empty ones left out."""
    names = sorted(n for n in set(metrics["name"]) if n not in SKIPPED and not n.endswith(("_runtime", "_per_second")))
    out, taken = [], set()
    for title, belongs in PANELS:
        mine = [n for n in names if n not in taken and belongs(n)]
        taken.update(mine)
        if mine:
            out.append((title, mine))
    rest = [n for n in names if n not in taken]
    return out + ([("other", rest)] if rest else [])


def best_checkpoint(points: pd.DataFrame, metrics: pd.DataFrame) -> str | None:
    """The run's best checkpoint: the newest one its trainer saved as best (trigger ``best``), else
    the one at the lowest ``eval_loss`` (or ``loss``) logged at a checkpoint's step."""
    named = points.dropna(subset=["checkpoint_id"])
    best = named[named["trigger"] == "best"]
    if not best.empty:
        return str(best["checkpoint_id"].iloc[-1])
    for name in ("eval_loss", "loss"):
        logged = metrics[metrics["name"] == name].drop_duplicates("step", keep="last").set_index("step")["value"]
        at = named.assign(value=named["step"].map(logged)).dropna(subset=["value"])
        if not at.empty:
            return str(at.sort_values(["value", "step"])["checkpoint_id"].iloc[0])
    return None


def metrics_figure(metrics: pd.DataFrame, points: pd.DataFrame, best: str | None = None,
                   highlight: str | None = None) -> go.Figure:
    """The metrics over steps, a panel per kind, checkpoints marked (coloured by status) and the best starred."""
    from plotly.subplots import make_subplots

    chosen = panels(metrics)
    fig = make_subplots(rows=len(chosen), cols=1, shared_xaxes=True, vertical_spacing=0.06,
                        subplot_titles=[t for t, _ in chosen])
    for row, (_title, names) in enumerate(chosen, start=1):
        for i, name in enumerate(names):
            series = metrics[metrics["name"] == name].sort_values("step")
            fig.add_scatter(x=series["step"], y=series["value"], mode="lines", name=plain(name), row=row, col=1,
                            line=dict(color=LINE_COLORS[i % len(LINE_COLORS)], width=1.6),
                            legendgroup="metrics", legendgrouptitle_text="metrics")
    _checkpoints(fig, metrics, points, chosen, best, highlight)
    fig.update_xaxes(title_text="step", row=len(chosen), col=1)
    fig.update_layout(height=max(260, 190 * len(chosen)), margin=dict(l=10, r=10, t=40, b=10),
                      hovermode="closest", clickmode="event+select",
                      legend=dict(orientation="v", x=1.01, y=1, yanchor="top"))
    return fig


def _checkpoints(fig: go.Figure, metrics: pd.DataFrame, points: pd.DataFrame, chosen: list[tuple[str, list[str]]],
                 best: str | None, highlight: str | None) -> None:
    """Each checkpoint on the first panel's first metric at its step, a dotted line down every
    panel in its status colour; the best one starred and labelled."""
    named = points.dropna(subset=["checkpoint_id", "step"])
    if named.empty or not chosen:
        return
    first = metrics[metrics["name"] == chosen[0][1][0]].sort_values("step")
    y = [_value_at(first, s) for s in named["step"]]
    styles = [UNVERIFIED if (st == Status.OK and not bool(dc)) else STATUS_STYLE.get(st, STATUS_STYLE[Status.OK])
              for st, dc in zip(named["status"], named["data_checked"].fillna(False))]
    for step, style in zip(named["step"], styles):
        fig.add_vline(x=step, line=dict(color=style[0], width=1, dash="dot"), opacity=0.6)
    for label in dict.fromkeys(s[3] for s in styles):
        mask = [s[3] == label for s in styles]
        color, symbol, opacity, _ = next(s for s in styles if s[3] == label)
        group = named[mask]
        fig.add_scatter(x=group["step"], y=[v for v, m in zip(y, mask) if m], mode="markers", name=label,
                        row=1, col=1, opacity=opacity, legendgroup="status", legendgrouptitle_text="checkpoints",
                        marker=dict(color=color, symbol=symbol, size=12, line=dict(width=2, color=color)),
                        customdata=[[c] for c in group["checkpoint_id"]],
                        hovertext=[f"<b>{plain(c)}</b><br>step {s} · {st}" for c, s, st in
                                   zip(group["checkpoint_id"], group["step"], group["status"])], hoverinfo="text")
    for cid, name, size, color in ((best, "best checkpoint", 22, BEST_COLOR), (highlight, "selected", 26, "#1f4e99")):
        row = named[named["checkpoint_id"] == cid]
        if cid and not row.empty:
            fig.add_scatter(x=row["step"], y=[_value_at(first, row["step"].iloc[0])], mode="markers+text", row=1,
                            col=1, name=name, text=[name.split()[0]], textposition="top center", hoverinfo="skip",
                            marker=dict(symbol="star-open" if name == "best checkpoint" else "circle-open",
                                        size=size, color=color, line=dict(width=2.5)),
                            legendgroup="marks", legendgrouptitle_text="marks")


def _value_at(series: pd.DataFrame, step: Any) -> float | None:
    """The metric logged at ``step``, else the last one logged before it (None before any)."""
    before = series[series["step"] <= step]
    return float(before["value"].iloc[-1]) if not before.empty else None
