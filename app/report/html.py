"""The building blocks of a report: the page around it (inline CSS, no script, a Content Security
Policy that lets the file load nothing), escaping, tables, badges and how ids are shown.

Every value from a store goes through :func:`esc` (HTML-escaped, control characters shown as
escapes) after redaction (:func:`shown`, :func:`shown_id`, :func:`shown_checkpoint`): a hostile
store's ``<script>`` is text on the page, and even markup that slipped through could neither run
a script nor fetch anything (the page's policy: ``default-src 'none'``).

A table of more than :data:`PAGE_ROWS` rows comes in pages of that many, each a closed
``<details>`` with its range in the summary (:func:`paged`): every row is in the file (the
browser's find opens the page holding a match), but a closed page is only parsed, never laid out,
so 10,000 rows open in ~0.6 s instead of ~2 s.
"""

from __future__ import annotations

import html
from collections.abc import Callable, Iterable, Sequence
from datetime import UTC, datetime
from typing import Any

from lastgood.display.figures import STATUS_COLORS
from lastgood.index.queries import checkpoint_handle, run_handle
from lastgood.redact import redact_text

# nothing may be loaded: no script, font, image or frame from anywhere (inline styles and data: only)
CSP = "default-src 'none'; style-src 'unsafe-inline'; img-src data:; base-uri 'none'; form-action 'none'"
PAGE_ROWS = 1_000  # a longer table comes in closed pages of this many rows
HEALTH_COLORS = {"damaged": "#d62728", "unverified": "#9aa0a6", "warnings": "#ff7f0e", "good": "#2e9e5b"}
SEVERITY_COLORS = {"error": "#d62728", "warning": "#ff7f0e", "info": "#4c78a8"}
MARK_COLORS = {"added": "#2e9e5b", "removed": "#d62728", "edited": "#ff7f0e", "moved": "#4c78a8"}

CSS = """
:root { color-scheme: light dark; --fg: #1f2328; --muted: #59636e; --bg: #ffffff; --panel: #f6f8fa;
  --line: #d1d9e0; --code: #eff2f5; }
@media (prefers-color-scheme: dark) { :root { --fg: #e6edf3; --muted: #9198a1; --bg: #0d1117; --panel: #151b23;
  --line: #3d444d; --code: #1f2630; } }
* { box-sizing: border-box; }
body { margin: 0; background: var(--bg); color: var(--fg); font: 14px/1.45 system-ui, -apple-system, "Segoe UI",
  Roboto, "Helvetica Neue", Arial, sans-serif; }
main { max-width: 1200px; margin: 0 auto; padding: 24px 28px 64px; }
h1 { font-size: 24px; margin: 0 0 4px; } h2 { font-size: 19px; margin: 36px 0 10px; padding-bottom: 4px;
  border-bottom: 1px solid var(--line); } h3 { font-size: 15px; margin: 20px 0 8px; }
p.meta, .muted { color: var(--muted); } p.meta { margin: 0 0 12px; }
nav { display: flex; flex-wrap: wrap; gap: 6px 16px; padding: 8px 0; border-bottom: 1px solid var(--line); }
nav a { color: inherit; }
.id { white-space: nowrap; }
code, .id { font-family: ui-monospace, SFMono-Regular, Menlo, Consolas, monospace; font-size: 12.5px; }
code { background: var(--code); padding: 1px 4px; border-radius: 4px; word-break: break-all; }
.cards { display: flex; flex-wrap: wrap; gap: 10px; margin: 10px 0; }
.card { background: var(--panel); border: 1px solid var(--line); border-radius: 8px; padding: 8px 14px; min-width: 120px; }
.card b { display: block; font-size: 20px; } .card span { color: var(--muted); font-size: 12px; }
table { border-collapse: collapse; width: 100%; margin: 6px 0 12px; font-size: 13px; }
th, td { text-align: left; vertical-align: top; padding: 4px 8px; border-bottom: 1px solid var(--line); }
th { background: var(--panel); position: sticky; top: 0; font-weight: 600; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
td.text { white-space: pre-wrap; word-break: break-word; max-width: 560px; }
.scroll { max-height: 560px; overflow: auto; border: 1px solid var(--line); border-radius: 6px; }
.scroll table { margin: 0; }
table.fixed { table-layout: fixed; }
td.mark { color: #fff; font-size: 12px; font-weight: 600; text-align: center; }
section { content-visibility: auto; contain-intrinsic-size: auto 900px; }
.badge { display: inline-block; padding: 0 7px; border-radius: 10px; color: #fff; font-size: 12px; font-weight: 600;
  white-space: nowrap; }
.note { background: var(--panel); border-left: 3px solid var(--line); padding: 6px 10px; margin: 8px 0; }
.bad { border-left-color: #d62728; } .good { border-left-color: #2e9e5b; }
svg.timeline { width: 100%; height: auto; background: var(--panel); border: 1px solid var(--line); border-radius: 6px; }
details > summary { cursor: pointer; margin: 6px 0; }
footer { margin-top: 40px; color: var(--muted); font-size: 12px; }
"""


_MARK_CSS = "".join(f"td.m-{name}{{background:{color}}}" for name, color in MARK_COLORS.items())


def esc(value: Any) -> str:
    """``value`` as HTML text: escaped (quotes too), control characters shown as escapes."""
    from lastgood.cli.output import escape_controls

    return html.escape(escape_controls(str(value)), quote=True)


def shown(value: Any) -> str:
    """Store text, redacted and escaped; "-" for nothing."""
    if value is None or value == "":
        return "-"
    return esc(redact_text(value) if isinstance(value, str) else value)


def shown_id(value: Any) -> str:
    """A run id or namespace: its handle when it is shaped like a secret (as the pages show it)."""
    if value is None or value == "":
        return "-"
    text = str(value)
    return esc(text if redact_text(text) == text else run_handle(text))


def shown_checkpoint(run_id: Any, namespace: Any, checkpoint_id: Any) -> str:
    """A checkpoint id: its handle when shaped like a secret (``lastgood show STORE key:…`` opens it)."""
    if checkpoint_id is None or checkpoint_id == "":
        return "-"
    text = str(checkpoint_id)
    if redact_text(text) == text:
        return esc(text)
    return esc(checkpoint_handle(str(run_id or ""), str(namespace or ""), text))


def utc(value: Any) -> str:
    if not isinstance(value, datetime):
        return "-" if value is None else esc(value)
    stamp = value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)
    return stamp.strftime("%Y-%m-%d %H:%M:%S")


def badge(text: str, color: str | None) -> str:
    return f'<span class="badge" style="background:{color or "#888888"}">{esc(text)}</span>'


def status_badge(status: Any) -> str:
    return badge(str(status), STATUS_COLORS.get(str(status)))


def cards(items: Iterable[tuple[str, Any]]) -> str:
    return '<div class="cards">' + "".join(f'<div class="card"><b>{esc(value)}</b><span>{esc(label)}</span></div>'
                                           for label, value in items) + "</div>"


def table(header: Sequence[str], rows: Iterable[Sequence[str]], numeric: Sequence[int] = (),
          text: Sequence[int] = (), scroll: bool = True, label: str = "rows") -> str:
    """A table of cells already escaped (``header`` is plain text); beyond PAGE_ROWS rows, in closed
    pages (:func:`paged`) whose summaries name ``label`` and the page's range."""
    head = "".join(f"<th>{esc(h)}</th>" for h in header)
    body = [f"<tr>{cells}</tr>" for cells in (
        "".join(f'<td class="{"num" if i in numeric else "text" if i in text else ""}">{cell}</td>'
                for i, cell in enumerate(row)) for row in rows)]
    opening = f"<table><thead><tr>{head}</tr></thead><tbody>"
    if len(body) > PAGE_ROWS:
        return paged(opening, body, lambda first, last: f"{label} {first + 1:,}–{last:,} of {len(body):,}")
    markup = f"{opening}{''.join(body)}</tbody></table>"
    return f'<div class="scroll">{markup}</div>' if scroll else markup


def paged(opening: str, rows: Sequence[str], summary: Callable[[int, int], str]) -> str:
    """``rows`` (``<tr>`` markup) in closed pages of PAGE_ROWS, each its own table (``opening``: the
    table's markup up to and including ``<tbody>``); ``summary(first, last)`` (rows ``first`` to
    ``last - 1``) is a page's summary, escaped here."""
    return "".join(f'<details class="page"><summary>{esc(summary(first, min(first + PAGE_ROWS, len(rows))))}'
                   f'</summary><div class="scroll">{opening}{"".join(rows[first:first + PAGE_ROWS])}'
                   "</tbody></table></div></details>"
                   for first in range(0, len(rows), PAGE_ROWS))


def note(text: str, kind: str = "") -> str:
    return f'<div class="note {kind}">{text}</div>'


def page(title: str, meta: str, sections: list[tuple[str, str, str]], footer: str) -> str:
    """The whole document: ``sections`` are (anchor, heading, body markup)."""
    nav = "".join(f'<a href="#{anchor}">{esc(heading)}</a>' for anchor, heading, _ in sections)
    body = "".join(f'<section id="{anchor}"><h2>{esc(heading)}</h2>{markup}</section>'
                   for anchor, heading, markup in sections)
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f'<meta http-equiv="Content-Security-Policy" content="{CSP}">'
            '<meta name="referrer" content="no-referrer">'
            '<meta name="viewport" content="width=device-width, initial-scale=1">'
            f"<title>{esc(title)}</title><style>{CSS}{_MARK_CSS}</style></head>\n<body><main>"
            f"<header><h1>{esc(title)}</h1><p class=\"meta\">{meta}</p></header><nav>{nav}</nav>\n"
            f"{body}\n<footer>{footer}</footer></main></body></html>\n")
