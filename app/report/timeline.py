"""A run's timeline as inline SVG: its checkpoints on a time axis coloured by status (damaged ones
larger, drawn last), the head and the last good checkpoint marked, the run's events as triangles
above them; hovering a mark shows what it is (SVG ``<title>``). Store text is escaped; a run of
more than :data:`MAX_MARKS` checkpoints is thinned (every checkpoint that is not ok, the head and
the last good one are always drawn), and the caption says so.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from lastgood.display.figures import EVENT_COLORS, STATUS_COLORS
from lastgood.readers.base import Status
from lastgood.report.html import esc, shown, shown_checkpoint, utc

WIDTH, HEIGHT = 960, 210
LEFT, RIGHT = 40, 24
LANE_Y, EVENT_Y, AXIS_Y = 120, 62, 168
MAX_MARKS = 2000
FONT = 'font-family="system-ui, sans-serif" font-size="12" fill="currentColor"'


def timeline_svg(checkpoints: list[dict[str, Any]], events: list[dict[str, Any]], head: str | None,
                 last_good: str | None) -> tuple[str, int]:
    """(the SVG markup, how many checkpoints it draws). ``checkpoints``: the run's rows in time
    order (run_id, namespace, checkpoint_id, step, created_at, status, status_reason, trigger)."""
    drawn = _thinned(checkpoints, {head, last_good})
    times = [c["created_at"] for c in checkpoints if isinstance(c.get("created_at"), datetime)]
    times += [e["created_at"] for e in events if isinstance(e.get("created_at"), datetime)]
    scale = _Scale(min(times), max(times)) if times else None
    positions = {id(c): _x(scale, c, i, len(checkpoints)) for i, c in enumerate(checkpoints)}
    body = [_axis(scale), _lane_labels()]
    body += _markers(checkpoints, positions, head, last_good)
    ordered = sorted(drawn, key=lambda c: c.get("status") != Status.OK)  # damaged ones on top
    body += [_checkpoint(c, positions[id(c)]) for c in ordered]
    body += [_event(e, scale) for e in events if scale is not None and isinstance(e.get("created_at"), datetime)]
    body.append(_legend())
    svg = (f'<svg class="timeline" role="img" aria-label="Timeline of the run" viewBox="0 0 {WIDTH} {HEIGHT}" '
           f'xmlns="http://www.w3.org/2000/svg"><title>Timeline of the run</title>{"".join(body)}</svg>')
    return svg, len(drawn)


class _Scale:
    def __init__(self, lo: datetime, hi: datetime) -> None:
        self.lo, self.span = lo.timestamp(), max(hi.timestamp() - lo.timestamp(), 1e-6)

    def x(self, when: datetime) -> float:
        return LEFT + (when.timestamp() - self.lo) / self.span * (WIDTH - LEFT - RIGHT)


def _x(scale: _Scale | None, row: dict[str, Any], index: int, count: int) -> float:
    when = row.get("created_at")
    if scale is not None and isinstance(when, datetime):
        return scale.x(when)
    return LEFT + (index / max(count - 1, 1)) * (WIDTH - LEFT - RIGHT)  # no time: by order


def _thinned(checkpoints: list[dict[str, Any]], keep: set[str | None]) -> list[dict[str, Any]]:
    if len(checkpoints) <= MAX_MARKS:
        return checkpoints
    special = [c for c in checkpoints if c.get("status") != Status.OK or c["checkpoint_id"] in keep]
    plain = [c for c in checkpoints if c.get("status") == Status.OK and c["checkpoint_id"] not in keep]
    room = max(MAX_MARKS - len(special), 2)
    step = max(len(plain) / room, 1)
    return special + [plain[int(i * step)] for i in range(min(room, len(plain)))]


def _checkpoint(row: dict[str, Any], x: float) -> str:
    status = str(row.get("status") or "")
    color = STATUS_COLORS.get(status, "#888888")
    damaged = status != Status.OK
    reason = f" · {shown(row['status_reason'])}" if row.get("status_reason") else ""
    label = (f"step {esc(row.get('step'))} · {esc(status)} · {utc(row.get('created_at'))} UTC · "
             f"{shown(row.get('trigger'))} · {shown_checkpoint(row.get('run_id'), row.get('namespace'), row['checkpoint_id'])}"
             f"{reason}")
    radius = 6 if damaged else 3.5
    stroke = ' stroke="currentColor" stroke-width="1.2"' if damaged else ""
    return (f'<circle class="ckpt" data-status="{esc(status)}" cx="{x:.1f}" cy="{LANE_Y}" r="{radius}" '
            f'fill="{color}"{stroke}><title>{label}</title></circle>')


def _event(row: dict[str, Any], scale: _Scale) -> str:
    x = scale.x(row["created_at"])
    kind = str(row.get("kind") or "event")
    color = EVENT_COLORS.get(kind.lower(), "#b35806")
    label = f"{shown(kind)} · {utc(row['created_at'])} UTC · {shown(row.get('message'))}"
    return (f'<path class="event" d="M{x:.1f},{EVENT_Y - 7} l6,11 h-12 z" fill="{color}">'
            f'<title>{label}</title></path>'
            f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{EVENT_Y + 5}" y2="{LANE_Y - 8}" stroke="{color}" '
            'stroke-opacity="0.35" stroke-dasharray="2 3"/>')


def _markers(checkpoints: list[dict[str, Any]], positions: dict[int, float], head: str | None,
             last_good: str | None) -> list[str]:
    """A line and a label over the head and over the last good checkpoint (one label when they are one)."""
    where = {c["checkpoint_id"]: positions[id(c)] for c in checkpoints if c["checkpoint_id"] in (head, last_good)}
    labels = [("head · last good" if head == last_good else "head", head), ("last good", last_good)]
    out = []
    for row, (label, key) in enumerate(labels):
        if key is None or key not in where or (row == 1 and head == last_good):
            continue
        out.append(_marker_line(where[key], label, 92 + 10 * row))
    return out


def _marker_line(x: float, label: str, y: float) -> str:
    anchor = "end" if x > WIDTH - RIGHT - 60 else "start" if x < LEFT + 60 else "middle"
    return (f'<line class="marker" x1="{x:.1f}" x2="{x:.1f}" y1="{y + 4}" y2="{LANE_Y + 14}" stroke="currentColor" '
            f'stroke-opacity="0.6"/><text x="{x:.1f}" y="{y}" text-anchor="{anchor}" {FONT}>{label}</text>')


def _lane_labels() -> str:
    return (f'<text x="{LEFT}" y="{EVENT_Y - 16}" {FONT} fill-opacity="0.7">events</text>'
            f'<line x1="{LEFT}" x2="{WIDTH - RIGHT}" y1="{LANE_Y}" y2="{LANE_Y}" stroke="currentColor" '
            'stroke-opacity="0.25"/>')


def _axis(scale: _Scale | None) -> str:
    out = [f'<line x1="{LEFT}" x2="{WIDTH - RIGHT}" y1="{AXIS_Y}" y2="{AXIS_Y}" stroke="currentColor" '
           'stroke-opacity="0.4"/>']
    if scale is None:
        return "".join(out)
    span = scale.span
    fmt = "%Y-%m-%d" if span > 3 * 86400 else "%m-%d %H:%M" if span > 86400 else "%H:%M" if span > 600 else "%H:%M:%S"
    for i in range(5):
        at = scale.lo + span * i / 4
        x = LEFT + (WIDTH - LEFT - RIGHT) * i / 4
        anchor = "start" if i == 0 else "end" if i == 4 else "middle"
        text = datetime.fromtimestamp(at, UTC).strftime(fmt)
        out.append(f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{AXIS_Y}" y2="{AXIS_Y + 4}" stroke="currentColor"/>'
                   f'<text x="{x:.1f}" y="{AXIS_Y + 18}" text-anchor="{anchor}" {FONT}>{text}</text>')
    out.append(f'<text x="{(LEFT + WIDTH - RIGHT) / 2:.0f}" y="{HEIGHT - 4}" text-anchor="middle" {FONT} '
               'fill-opacity="0.7">time (UTC)</text>')
    return "".join(out)


def _legend() -> str:
    out, x = [], float(LEFT)
    for status in Status:
        out.append(f'<circle cx="{x + 5:.0f}" cy="18" r="5" fill="{STATUS_COLORS[status]}"/>'
                   f'<text x="{x + 14:.0f}" y="22" {FONT}>{status.value}</text>')
        x += 26 + 7.2 * len(status.value)
    out.append(f'<path d="M{x + 5:.0f},11 l6,11 h-12 z" fill="#b35806"/><text x="{x + 16:.0f}" y="22" {FONT}>event</text>')
    return "".join(out)
