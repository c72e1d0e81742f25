"""Training checkpoints on the pages (no streamlit): a tensor diff's rows and its per-layer bar chart,
one checkpoint's tensors with their statistics.

Input is ``lastgood.investigate.tensordiff.tensor_diff``'s dict and ``show_checkpoint``'s ``tensors``;
plotly is imported by the function that draws (the Overview never imports it).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from lastgood.cli.output import human_bytes
from lastgood.display.figures import plain

if TYPE_CHECKING:
    import plotly.graph_objects as go

NAN_COLOR = "#d62728"
BAR_COLOR = "#4c78a8"
MAX_LAYERS_DRAWN = 60


def shape_text(shape: Any) -> str:
    return "×".join(str(n) for n in shape) if isinstance(shape, (list, tuple)) and shape else "scalar"


def tensor_diff_rows(result: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per tensor both checkpoints hold — those where NaN appeared first (their change is not a
    number), then the unreadable ones, then the most changed first (as ``tensor_diff`` sorts them) —
    then those only one holds or whose shape or dtype changed."""
    alarming = sorted(result.get("tensors", []), key=lambda t: (not t.get("nan_appeared"), t.get("error") is None))
    rows = [{"tensor": t["name"], "layer": t["layer"], "change": "NaN appeared" if t.get("nan_appeared") else
             ("unreadable" if t.get("error") else "changed" if (t.get("relative_change") or 0) > 0 else "same"),
             "relative change": t.get("relative_change"), "cosine": t.get("cosine"),
             "max |Δ|": t.get("max_abs_diff"), "NaN in A": t.get("nan_a"), "NaN in B": t.get("nan_b"),
             "dtype": t["dtype"], "shape": shape_text(t["shape"]), "error": t.get("error") or ""}
            for t in alarming]
    for kind, key in (("only in B", "added"), ("only in A", "removed")):
        rows += [{"tensor": t["name"], "layer": "", "change": kind, "dtype": t["dtype"],
                  "shape": shape_text(t["shape"]), "error": ""} for t in result.get(key, [])]
    rows += [{"tensor": t["name"], "layer": "", "change": "shape or dtype changed",
              "dtype": f"{t['a']['dtype']} → {t['b']['dtype']}",
              "shape": f"{shape_text(t['a']['shape'])} → {shape_text(t['b']['shape'])}", "error": ""}
             for t in result.get("changed_shape", [])]
    return rows


def tensor_diff_summary(result: dict[str, Any]) -> str:
    s = result["summary"]
    parts = [f"{s['compared']} tensors compared: {s['changed']} changed, {s['unchanged']} unchanged"]
    for key, words in (("added", "only in B"), ("removed", "only in A"), ("changed_shape", "reshaped"),
                       ("errors", "unreadable")):
        if s.get(key):
            parts.append(f"{s[key]} {words}")
    return "; ".join(parts)


def layer_figure(layers: list[dict[str, Any]]) -> go.Figure:
    """Per layer, the largest relative change ‖ΔW‖/‖W‖ of its tensors, the most changed on top; a
    layer where NaN appeared is red and says so."""
    import plotly.graph_objects as go

    shown = list(reversed(layers[:MAX_LAYERS_DRAWN]))  # plotly draws the first bar at the bottom
    names = [plain(layer["layer"]) for layer in shown]
    colors = [NAN_COLOR if layer["nan_appeared"] else BAR_COLOR for layer in shown]
    labels = [("NaN appeared · " if layer["nan_appeared"] else "") + f"{layer['max_relative_change']:.3g}"
              for layer in shown]
    fig = go.Figure(go.Bar(x=[layer["max_relative_change"] for layer in shown], y=names, orientation="h",
                           marker_color=colors, text=labels, textposition="auto",
                           hovertext=[f"{n}: {layer['tensors']} tensor(s)" for n, layer in zip(names, shown)],
                           hoverinfo="text+x"))
    fig.update_layout(height=max(220, 26 * len(shown) + 80), margin=dict(l=10, r=10, t=30, b=10),
                      xaxis_title="largest relative change of a tensor (‖ΔW‖ / ‖W_A‖)", yaxis_title=None,
                      title="Change per layer", showlegend=False)
    return fig


def checkpoint_tensor_rows(tensors: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One checkpoint's tensors: name, dtype, shape, size and — after a full read — their statistics
    (NaN and ±Inf counts, min, max, mean, std, norm); the ones holding NaN/Inf first."""
    rows = [{"tensor": t["name"], "dtype": t["dtype"], "shape": shape_text(t["shape"]), "size": human_bytes(t["nbytes"]),
             "NaN": t.get("nan"), "±Inf": _sum(t.get("posinf"), t.get("neginf")), "min": t.get("min"),
             "max": t.get("max"), "mean": t.get("mean"), "std": t.get("std"), "norm": t.get("norm")}
            for t in tensors]
    return sorted(rows, key=lambda r: (-(r["NaN"] or 0) - (r["±Inf"] or 0), r["tensor"]))


def _sum(*values: Any) -> int | None:
    known = [v for v in values if isinstance(v, int)]
    return sum(known) if known else None
