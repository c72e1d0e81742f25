"""The Overview's two summary figures as SVG markup drawn here, on the server (no streamlit here).

A chart element of Streamlit (Vega-Lite, Plotly) makes the browser load and run its chart
library before it draws anything of the page it sits on: ~0.5 s of Chromium's CPU for Vega-Lite,
before the dashboard's first screen. These two figures are static summaries (bars per status,
stacked storage per agent over time): drawn as SVG here they cost the browser almost nothing.
Hovering a bar or an area shows its exact value (SVG ``<title>``); the markup stays small (the
page's markdown parses it in the browser: integer coordinates, at most 48 moments per area).
Text from the store (agent names) is escaped; the markup is one line (a single HTML block for
the page's markdown). Colors not tied to a status follow the page's text color (light or dark
theme).
"""

from __future__ import annotations

import html
import math
from collections.abc import Callable, Sequence
from datetime import UTC, datetime

import pyarrow as pa

from lastgood.display.figures import STATUS_COLORS
from lastgood.cli.output import BYTE_UNIT, human_bytes, short_bytes

WIDTH, HEIGHT = 480, 270
LEFT, RIGHT, TOP, BOTTOM = 76, 12, 44, 40
AGENT_COLORS = ("#4c78a8", "#f58518", "#54a24b", "#e45756", "#72b7b2", "#b279a2", "#eeca3b",
                "#ff9da6", "#9d755d", "#bab0ac")  # Vega's tableau10, as the charts had before
FONT = 'font-family="sans-serif" font-size="12" fill="currentColor"'


def text(value: object) -> str:
    """Store text inside SVG markup: HTML-escaped, and inert for the page's markdown (no ``$``
    maths, no ``:shortcode:``)."""
    return html.escape(str(value)).replace("$", "&#36;").replace(":", "&#58;")


def nice_ticks(top: float, count: int = 4) -> list[float]:
    """Round axis values from 0 to at least ``top`` (steps of 1, 2 or 5 × 10^k)."""
    raw = top / count
    if not raw > 0:  # nothing (or too little for a float step) to show
        return [0.0, 1.0]
    power = 10 ** math.floor(math.log10(raw))
    step = next(m * power for m in (1, 2, 5, 10) if m * power >= raw)
    steps = math.ceil(top / step - 1e-9)
    steps += steps * step < top  # rounding: the last tick is never below the top
    return [i * step for i in range(steps + 1)]


def byte_ticks(top: float, count: int = 4) -> list[float]:
    """:func:`nice_ticks` in the unit (KB, MB, …, decimal as :func:`human_bytes`) of ``top``: labels
    such as 200 MB, not 195.3 MB."""
    unit = BYTE_UNIT ** max(0, min(4, math.floor(math.log(top, BYTE_UNIT)))) if top >= 1 else 1
    return [t * unit for t in nice_ticks(top / unit, count)]


def _frame(label: str, body: Sequence[str]) -> str:
    return (f'<svg class="lastgood-chart" role="img" aria-label="{text(label)}" viewBox="0 0 {WIDTH} {HEIGHT}" '
            f'width="100%" xmlns="http://www.w3.org/2000/svg" style="max-width:{WIDTH * 1.5}px">'
            f'<title>{text(label)}</title>{"".join(body)}</svg>')


def _y_axis(ticks: list[float], scale: float, label: str, fmt: Callable[[float], str]) -> list[str]:
    bottom = HEIGHT - BOTTOM
    out = []
    for tick in ticks:
        y = bottom - tick * scale
        out.append(f'<line x1="{LEFT}" x2="{WIDTH - RIGHT}" y1="{y:.1f}" y2="{y:.1f}" stroke="currentColor" '
                   f'stroke-opacity="0.15"/><text x="{LEFT - 6}" y="{y + 4:.1f}" text-anchor="end" {FONT}>'
                   f'{text(fmt(tick))}</text>')
    out.append(f'<text transform="translate(13 {(TOP + bottom) / 2:.0f}) rotate(-90)" text-anchor="middle" '
               f'{FONT}>{text(label)}</text>')
    return out


def status_bars(counts: pa.Table) -> str:
    """Checkpoints per status (``overview.status_counts``: columns status, checkpoints), one bar
    each, labelled with its count; hovering a bar shows it."""
    names = [str(n) for n in counts.column("status").to_pylist()]
    values = [int(v or 0) for v in counts.column("checkpoints").to_pylist()]
    ticks = nice_ticks(max(values, default=0))
    scale = (HEIGHT - TOP - BOTTOM) / ticks[-1]
    body = _y_axis(ticks, scale, "checkpoints", lambda v: f"{v:,.0f}")
    slot = (WIDTH - LEFT - RIGHT) / max(len(names), 1)
    bottom = HEIGHT - BOTTOM
    for i, (name, value) in enumerate(zip(names, values)):
        x, width, height = LEFT + i * slot + slot * 0.15, slot * 0.7, value * scale
        body.append(f'<rect class="mark" x="{x:.1f}" y="{bottom - height:.1f}" width="{width:.1f}" '
                    f'height="{height:.1f}" fill="{STATUS_COLORS.get(name, "#888888")}">'
                    f'<title>{text(name)}: {value:,} checkpoints</title></rect>'
                    f'<text x="{x + width / 2:.1f}" y="{bottom - height - 4:.1f}" text-anchor="middle" {FONT}>'
                    f'{value:,}</text><text x="{x + width / 2:.1f}" y="{bottom + 16}" text-anchor="middle" '
                    f'{FONT}>{text(name)}</text>')
    return _frame("Checkpoints by status", body)


def growth_areas(growth: pa.Table) -> str:
    """Cumulative stored bytes per agent over time (``overview.growth``: at_ms, agent,
    total_bytes; every agent at every moment), stacked; the legend gives each agent's total at
    the end, as does hovering its area."""
    moments = _thin(sorted({float(t) for t in growth.column("at_ms").to_pylist()}))
    agents = list(dict.fromkeys(str(a) for a in growth.column("agent").to_pylist()))
    totals = {(str(a), float(t)): int(v or 0) for a, t, v in zip(growth.column("agent").to_pylist(),
                                                                 growth.column("at_ms").to_pylist(),
                                                                 growth.column("total_bytes").to_pylist())}
    stacked = _stack(agents, moments, totals)
    ticks = byte_ticks(max(stacked[-1], default=0) if stacked else 0)
    scale = (HEIGHT - TOP - BOTTOM) / ticks[-1]
    xs = _x_positions(moments)
    body = _y_axis(ticks, scale, "stored (cumulative)", short_bytes)
    body += _areas(agents, xs, stacked, scale)
    body += _time_axis(moments)
    body += _legend(agents, [totals.get((a, moments[-1]), 0) if moments else 0 for a in agents])
    return _frame("Storage growth by agent", body)


MAX_MOMENTS = 48  # points per area: the browser parses every one (as HTML, in the page's markdown)


def _thin(moments: list[float], limit: int = MAX_MOMENTS) -> list[float]:
    """At most ``limit`` moments, evenly picked, the first and the last always kept (totals are
    cumulative: a dropped moment loses no bytes, only a bend of the curve)."""
    if len(moments) <= limit:
        return moments
    return [moments[round(i * (len(moments) - 1) / (limit - 1))] for i in range(limit)]


def _stack(agents: list[str], moments: list[float], totals: dict[tuple[str, float], int]) -> list[list[int]]:
    """Per agent (in order), the stacked top at every moment: the sum of its own and earlier agents'."""
    out: list[list[int]] = []
    below = [0] * len(moments)
    for agent in agents:
        below = [b + totals.get((agent, t), 0) for b, t in zip(below, moments)]
        out.append(below)
    return out


def _x_positions(moments: list[float]) -> list[float]:
    lo, hi = (moments[0], moments[-1]) if moments else (0.0, 1.0)
    span = (hi - lo) or 1.0
    return [LEFT + (t - lo) / span * (WIDTH - LEFT - RIGHT) for t in moments]


def _areas(agents: list[str], xs: list[float], stacked: list[list[int]], scale: float) -> list[str]:
    bottom = HEIGHT - BOTTOM
    out, below = [], [0] * len(xs)
    for i, (agent, tops) in enumerate(zip(agents, stacked)):
        upper = " ".join(f"{x:.0f},{bottom - v * scale:.0f}" for x, v in zip(xs, tops))
        lower = " ".join(f"{x:.0f},{bottom - v * scale:.0f}" for x, v in zip(reversed(xs), reversed(below)))
        color = AGENT_COLORS[i % len(AGENT_COLORS)]
        out.append(f'<polygon class="mark" points="{upper} {lower}" fill="{color}" fill-opacity="0.75">'
                   f'<title>{text(agent)}: {human_bytes(tops[-1] - below[-1]) if tops else "0 B"}</title></polygon>'
                   f'<polyline points="{upper}" fill="none" stroke="{color}" stroke-width="1.5"/>')
        below = tops
    return out


def _time_axis(moments: list[float]) -> list[str]:
    """Evenly spaced times under the chart (3 to 5 labels, by how long they are)."""
    if not moments:
        return []
    lo, span = moments[0], moments[-1] - moments[0]
    fmt = ("%Y-%m-%d" if span > 3 * 86_400_000 else "%m-%d %H:%M" if span > 86_400_000
           else "%H:%M" if span > 600_000 else "%H:%M:%S")
    count = 2 if fmt == "%m-%d %H:%M" else 4 if span else 0
    out = [f'<line x1="{LEFT}" x2="{WIDTH - RIGHT}" y1="{HEIGHT - BOTTOM}" y2="{HEIGHT - BOTTOM}" '
           f'stroke="currentColor" stroke-opacity="0.4"/>']
    for i in range(count + 1):
        at = lo + span * i / count if count else lo
        x = LEFT + (WIDTH - LEFT - RIGHT) * (i / count if count else 0)
        anchor = "start" if i == 0 else "end" if i == count else "middle"
        out.append(f'<text x="{x:.1f}" y="{HEIGHT - BOTTOM + 16}" text-anchor="{anchor}" {FONT}>'
                   f'{_utc(at, fmt)}</text>')
    out.append(f'<text x="{(LEFT + WIDTH - RIGHT) / 2:.0f}" y="{HEIGHT - 4}" text-anchor="middle" {FONT}>'
               f'time (UTC)</text>')
    return out


def _legend(agents: list[str], totals: list[int]) -> list[str]:
    """Each agent's color, name and stored bytes at the end, in rows above the plot (at most two)."""
    out, x, y = [], float(LEFT), 8.0
    for i, (agent, total) in enumerate(zip(agents[:len(AGENT_COLORS)], totals)):
        name = agent if len(agent) <= 20 else agent[:19] + "…"
        shown = f"{name} {human_bytes(total)}"
        width = 14 + 6.3 * len(shown) + 12  # swatch, text at ~6.3 px a character, gap
        if x + width > WIDTH - RIGHT and x > LEFT:  # next row
            if y > 8:
                break  # a third row would cover the plot: the rest are named on hover
            x, y = float(LEFT), y + 15
        out.append(f'<rect x="{x:.0f}" y="{y:.0f}" width="10" height="10" fill="{AGENT_COLORS[i]}"/>'
                   f'<text x="{x + 14:.0f}" y="{y + 9:.0f}" {FONT}>{text(shown)}</text>')
        x += width
    return out


def _utc(ms: float, fmt: str) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).strftime(fmt)
