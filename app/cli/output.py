"""How the CLI prints: JSON for scripts, compact tables for people, messages on stderr."""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
from collections.abc import Sequence, Callable, Iterable
from dataclasses import asdict
from datetime import date, datetime
from operator import itemgetter
from typing import Any

from lastgood.index.queries import Overview
from lastgood.readers.common.gc_pause import gc_paused
from lastgood.records import columns_of, flat_records, map_column, map_records
from lastgood.redact import redact, redact_text

STATE_PREVIEW_CHARS = 4000


def to_jsonable(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.isoformat().replace("+00:00", "Z")
    if isinstance(value, date):
        return value.isoformat()
    if isinstance(value, bytes):
        return {"$bytes": len(value)}
    if hasattr(value, "item") and callable(value.item):
        return value.item()
    return str(value)


def dumps(value: Any, indent: int | None = 2) -> str:
    """JSON text; NaN and infinities (not valid JSON) become strings."""
    try:
        if indent == 2 and flat_records(value):
            return _records_json(value)
        return json.dumps(value, default=to_jsonable, indent=indent, ensure_ascii=False, allow_nan=False)
    except ValueError:
        return json.dumps(_nan_safe(value), default=to_jsonable, indent=indent, ensure_ascii=False)


# a record's members on lines of their own, as indent=2 puts them inside a list, by json's C encoder
# (json.dumps with an indent encodes in Python: ~18 s for a million `ls` rows against ~8 s)
_RECORD = json.JSONEncoder(separators=(",\n    ", ": "), default=to_jsonable, ensure_ascii=False,
                           allow_nan=False).encode


def _records_json(rows: list[dict[str, Any]]) -> str:
    """``json.dumps(rows, indent=2)`` (same text) for a list of flat dicts."""
    if not rows:
        return "[]"
    return "[\n" + ",\n".join("  {\n    " + _RECORD(r)[1:-1] + "\n  }" if r else "  {}" for r in rows) + "\n]"


def _nan_safe(value: Any) -> Any:
    if isinstance(value, float) and (value != value or value in (float("inf"), float("-inf"))):
        return str(value)
    if isinstance(value, dict):
        return {k: _nan_safe(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_nan_safe(v) for v in value]
    return value


def emit(value: Any, fmt: str, render: Callable[[Any], str], *, redacted: bool = False) -> None:
    """Print a command's result: redacted (every field, by ``lastgood.redact``; ``redacted=True``
    when the producer already redacted every part), and with control characters escaped so store
    text cannot drive the terminal."""
    with gc_paused():  # results hold no cycles: no collection rescans a million rows being copied
        value = value if redacted else redact(value)
        text = json_safe(dumps(value)) if fmt == "json" else render(escape_tree(value))
    sys.stdout.write(text.rstrip("\n") + "\n")


# C0 controls (ESC, CR, newline inside a value…), DEL, C1 controls (0x9b is a CSI on
# some terminals) and bidirectional overrides that reorder what the operator sees
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069\u2028\u2029]")
_JSON_UNESCAPED = re.compile("[\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069\u2028\u2029]")


def escape_controls(text: str) -> str:
    """``text`` on one line, every control character shown as an escape (``\\x1b``)."""
    return _CONTROL.sub(lambda m: m.group(0).encode("unicode_escape").decode("ascii"), text)


def _escape_column(_key: Any, values: list[Any]) -> list[Any]:
    """``escape_tree`` of one column of records (lastgood.records), skipped when it has no control."""
    return map_column(values, lambda text: bool(_CONTROL.search(text)), escape_tree, " ")


def escape_tree(value: Any) -> Any:
    """``value`` with every string (keys too) passed through ``escape_controls``."""
    if isinstance(value, str):
        return escape_controls(value)
    if isinstance(value, dict):
        return {escape_tree(k): escape_tree(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        if (table := columns_of(value)) is not None:  # rows of one shape: a column at a time
            return map_records(value, table, escape_tree, _escape_column)
        return [escape_tree(v) for v in value]
    return value


def json_safe(text: str) -> str:
    """JSON text with the controls json.dumps leaves raw (DEL, C1, bidi) as \\u escapes."""
    return _JSON_UNESCAPED.sub(lambda m: f"\\u{ord(m.group(0)):04x}", text)


def _line(message: str) -> str:
    return escape_controls(redact_text(str(message)))


def error(message: str) -> None:
    sys.stderr.write(f"lastgood: error: {_line(message)}\n")


def warn(message: str) -> None:
    sys.stderr.write(f"lastgood: warning: {_line(message)}\n")


def info(message: str) -> None:
    sys.stderr.write(_line(message) + "\n")


def progress_bar(label: str) -> Callable[[int, int | None], None] | None:
    """A tqdm bar on a terminal; nothing when stderr is not a TTY."""
    if not sys.stderr.isatty():
        return None
    from tqdm import tqdm

    bar = tqdm(desc=label, unit="ckpt", file=sys.stderr, leave=False)

    def update(done: int, total: int | None) -> None:
        if total is not None and bar.total != total:
            bar.total = total
        bar.n = done
        bar.refresh()

    return update


def overview_dict(o: Overview) -> dict[str, Any]:
    """The JSON ``overview``; checkpoints not decoded yet are reported once, as ``data_pending``."""
    out = asdict(o)
    del out["data_unread"]
    return out


BYTE_UNIT = 1000  # decimal units (1 MB = 10^6 bytes), as the dashboard's tables show sizes


def _scaled(n: Any) -> tuple[float, str]:
    """``n`` bytes as (value, unit), the value below BYTE_UNIT once rounded to one decimal."""
    size = float(n)
    for unit in ("B", "KB", "MB", "GB"):
        if round(size, 1) < BYTE_UNIT:
            return size, unit
        size /= BYTE_UNIT
    return size, "TB"


def human_bytes(n: Any) -> str:
    if n is None:
        return "-"
    size, unit = _scaled(n)
    return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"


def short_bytes(n: Any) -> str:
    """:func:`human_bytes` in at most three digits, without a trailing ".0" (axis ticks, a metric
    in a narrow cell): 734 MB, 1.5 GB, 4 MB."""
    if n is None:
        return "-"
    size, unit = _scaled(n)
    tenths = round(size, 1)
    return f"{size:.0f} {unit}" if unit == "B" or tenths >= 100 or tenths == int(tenths) else f"{tenths:.1f} {unit}"


def _time(value: Any) -> str:
    return value.strftime("%Y-%m-%d %H:%M:%S") if isinstance(value, datetime) else str(value or "-")


# --wide: cells are never shortened (set from the command line)
WIDE = False
ELLIPSIS = "…"
# a status column in colour on a terminal (NO_COLOR=1 or a pipe: plain text)
STATUS_COLOURS = {"corrupt": "31", "incomplete": "33", "quarantined": "35", "superseded": "2", "ok": "32",
                  "damaged": "31", "warnings": "33", "unchecked": "2"}


def terminal_width() -> int | None:
    """How wide tables may be: ``$COLUMNS`` when set, else the terminal's width when stdout is one;
    None (a pipe, a file, ``--wide``): cells are never shortened."""
    if WIDE:
        return None
    raw = os.environ.get("COLUMNS", "").strip()
    if raw.isdigit() and int(raw) > 0:
        return int(raw)
    if not sys.stdout.isatty():
        return None
    return shutil.get_terminal_size().columns


def use_colour() -> bool:
    return sys.stdout.isatty() and not os.environ.get("NO_COLOR") and os.environ.get("TERM") != "dumb"


def table(rows: list[list[Any]], header: list[str], *, shrink: Sequence[tuple[int, int]] = (),
          colour: int | None = None, prefixes: Sequence[int] = ()) -> str:
    """Left-aligned columns two spaces apart (cells shown as ``str`` shows them); see
    :func:`column_table` for fitting to the terminal."""
    return column_table([list(col) for col in zip(*rows)] if rows else [[] for _ in header], header,
                        shrink=shrink, colour=colour, prefixes=prefixes)


def column_table(columns: list[list[Any]], header: list[str], *, shrink: Sequence[tuple[int, int]] = (),
                 colour: int | None = None, prefixes: Sequence[int] = ()) -> str:
    """:func:`table` of cells given a column at a time (a million ``ls`` rows in seconds).

    ``shrink``: (column, narrowest) in the order columns give way when the table is wider than the
    terminal (:func:`terminal_width`); a shortened cell ends with "…", but in a ``prefixes`` column
    (ids) it is cut plainly: a unique prefix still names it, as git's short ids do. ``colour``: the
    column whose cells are statuses, coloured on a terminal."""
    widths = [max(len(h), max(map(len, map(str, col)), default=0)) for h, col in zip(header, columns)]
    fitted = _fit(widths, shrink, terminal_width(), prefixes)
    if fitted != widths:
        columns = [col if w == fitted[i] else [_cut(str(c), fitted[i], i in prefixes) for c in col]
                   for i, (col, w) in enumerate(zip(columns, widths))]
    head = "  ".join(f"{h:<{w}}" for h, w in zip(header, fitted)).rstrip()
    cells = list(fitted)
    if colour is not None and use_colour():  # padded before the escape codes, which have no width
        columns = list(columns)
        columns[colour] = [_coloured(str(c), fitted[colour]) for c in columns[colour]]
        cells[colour] = 0
    line = "  ".join(f"{{!s:<{w}}}" for w in cells).format  # one C-level call per row
    return "\n".join([head, *[line(*r).rstrip() for r in zip(*columns)]])


def _fit(widths: list[int], shrink: Sequence[tuple[int, int]], limit: int | None,
         prefixes: Sequence[int] = ()) -> list[int]:
    """Column widths within ``limit`` characters, the ``shrink`` columns giving way in turn (an id
    column goes straight to its short form: a prefix, never half an id)."""
    natural, widths = widths, list(widths)
    if limit is None:
        return widths
    for index, narrowest in shrink:
        excess = sum(widths) + 2 * (len(widths) - 1) - limit
        if excess <= 0:
            break
        smaller = narrowest if index in prefixes else max(narrowest, widths[index] - excess)
        widths[index] = min(widths[index], smaller)
    for index, _narrowest in shrink:  # what a later column freed goes back to the earlier ones
        spare = limit - (sum(widths) + 2 * (len(widths) - 1))
        if spare > 0 and index not in prefixes:
            widths[index] = min(natural[index], widths[index] + spare)
    return widths


def _cut(text: str, width: int, prefix: bool = False) -> str:
    if len(text) <= width:
        return text
    return text[:width] if prefix else text[: max(width - 1, 0)] + ELLIPSIS


def _coloured(text: str, width: int) -> str:
    code = STATUS_COLOURS.get(text.strip())
    padded = f"{text:<{width}}"
    return f"\x1b[{code}m{padded}\x1b[0m" if code else padded


LS_HEADER = ["RUN", "STEP", "CREATED", "TRIGGER", "KIND", "STATUS", "SIZE", "CHECKPOINT", "REASON"]


def render_ls(rows: list[dict[str, Any]]) -> str:
    return _ls_text(_ls_columns(rows), len(rows), *_pending_counts(rows))


def _ls_columns(rows: list[dict[str, Any]]) -> list[list[Any]]:
    """The table's cells of ``rows``, a column at a time (LS_HEADER)."""
    def col(key: str) -> list[Any]:
        return list(map(itemgetter(key), rows))

    runs = [run + (f" [{_short(ns)}]" if ns else "")
            for run, ns in zip(col("run_id"), [r.get("namespace") for r in rows])]
    return [runs, ["-" if s is None else str(s) for s in col("step")], list(map(_time, col("created_at"))),
            [t or "-" for t in col("trigger")], [k or "-" for k in col("kind")], col("status"),
            _each_distinct(human_bytes, col("size_bytes")), col("checkpoint_id"),
            [r.get("status_reason") or "" for r in rows]]


# when the table is wider than the terminal: the reason gives way first, then the run, the trigger, the kind
LS_SHRINK = ((8, 24), (7, 13), (8, 12), (4, 5), (3, 7), (0, 12))
LS_STATUS, LS_IDS = 5, (7,)


def _ls_text(columns: list[list[Any]], count: int, pending: int, unwalked: int) -> str:
    return (column_table(columns, LS_HEADER, shrink=LS_SHRINK, colour=LS_STATUS, prefixes=LS_IDS)
            + f"\n{count} checkpoint(s)"
            + _data_pending_note(pending, unwalked))


def emit_listing(chunks: Iterable[list[dict[str, Any]]], fmt: str) -> None:
    """``emit(rows, fmt, render_ls)`` of ``ls``'s rows given a chunk at a time, the same text: each
    chunk is redacted, escaped and turned into cells alone, so a million rows are never all dicts
    at once; JSON is written as it comes."""
    with gc_paused():
        if fmt == "json":
            _write_json_chunks(chunks)
            return
        columns: list[list[Any]] = [[] for _ in LS_HEADER]
        count = pending = unwalked = 0
        for chunk in chunks:
            rows = escape_tree(redact(chunk))
            for column, cells in zip(columns, _ls_columns(rows)):
                column.extend(cells)
            more, unread = _pending_counts(rows)
            count, pending, unwalked = count + len(rows), pending + more, unwalked + unread
        sys.stdout.write(_ls_text(columns, count, pending, unwalked).rstrip("\n") + "\n")


def _write_json_chunks(chunks: Iterable[list[dict[str, Any]]]) -> None:
    """``json_safe(dumps(rows))`` written a chunk at a time: each chunk's items as ``dumps`` puts
    them inside a list (``"[\\n" + items + "\\n]"``), the chunks joined as the items are."""
    opening = "[\n"
    for chunk in chunks:
        sys.stdout.write(opening + json_safe(dumps(redact(chunk)))[2:-2])
        opening = ",\n"
    sys.stdout.write("[]\n" if opening == "[\n" else "\n]\n")


def _each_distinct(fn: Callable[[Any], str], values: list[Any]) -> list[str]:
    """``[fn(v) for v in values]``, computed once per distinct value (sizes repeat)."""
    done = {v: fn(v) for v in set(values)}
    return [done[v] for v in values]


def _pending_counts(rows: list[dict[str, Any]]) -> tuple[int, int]:
    """Rows whose data check is pending, and rows whose blob files were not looked at."""
    return (sum(1 for r in rows if r.get("data_checked") is False),
            sum(1 for r in rows if r.get("blobs_pending")))


def _data_pending_note(pending: int, unwalked: int) -> str:
    """Say when statuses rest on structure checks only (blobs not decoded yet), and when
    not even the blob files were looked at (a store beyond LASTGOOD_AUTO_WALK_ENTRIES)."""
    if not pending:
        return ""
    return (f"; data check pending for {pending} (blobs not decoded yet: status from structure checks; "
            "run `lastgood verify --read-data STORE`)" + (_blobs_pending_note(unwalked) if unwalked else ""))


def _blobs_pending_note(count: int) -> str:
    return (f"; blob check pending for {count} (blob files not looked at yet, status from the catalog "
            "alone: a missing blob is found by `lastgood verify STORE`)")


def _short(text: str, width: int = 18) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


DATA_CHECK_PENDING_ONE = ("data check pending: its blob was not decoded by a data check yet (status from the "
                          "listing and structure checks; `lastgood verify --read-data STORE`)")


def render_show(result: dict[str, Any]) -> str:
    c = result["checkpoint"]
    reason = c.get("status_reason") or ""
    findings = result.get("findings", [])
    said = {reason} | {f["message"] for f in findings}  # one cause is said once, by its finding
    lines = [f"checkpoint {c['checkpoint_id']}",
             f"  run {c['run_id']}{' [' + c['namespace'] + ']' if c.get('namespace') else ''}"
             f"  step {c['step']}  {c['trigger'] or '-'}  {c['kind']}  {human_bytes(c['size_bytes'])}",
             f"  created {_time(c['created_at'])}  status {c['status']}"
             + (f" ({reason})" if reason and reason not in {f["message"] for f in findings} else ""),
             f"  parent {c.get('parent_id') or '-'}  head {result.get('head') or '-'}"]
    if c.get("data_checked") is False:
        lines.append(f"  {DATA_CHECK_PENDING_ONE}")
    for f in findings:
        lines.append(f"  finding [{f['severity']}] {f['check']}: {f['message']}")
    if result.get("state_error"):
        error = result["state_error"]
        lines.append("state: cannot be shown" + ("" if error in said else f": {error}")
                     + (" (the finding above)" if error in said else ""))
    else:
        text = dumps(result["state"])
        more = len(text) > STATE_PREVIEW_CHARS
        lines.append("state:\n" + text[:STATE_PREVIEW_CHARS] + ("\n… (use --format json for all)" if more else ""))
    if result.get("pending_writes"):
        lines.append(f"pending writes: {len(result['pending_writes'])}")
        lines.extend(f"  {w.get('channel')}: {str(w.get('value'))[:100]}" for w in result["pending_writes"])
    return "\n".join(lines)


def render_index(report: dict[str, Any]) -> str:
    o = report["overview"]
    status = ", ".join(f"{k} {v}" for k, v in o["by_status"].items()) or "empty"
    lines = [f"indexed {report['store']} ({report['reader']}): {o['checkpoints']} checkpoints in "
             f"{o['runs']} runs, {human_bytes(o['size_bytes'])}; {status}",
             f"read {report['checkpoints_read']} catalog rows, checked {report['checked']} "
             f"({report['check']}) in {report['seconds']} s"]
    pending = report.get("data_pending") or {}
    if pending.get("checkpoints"):
        lines.append(f"data check pending for {pending['checkpoints']} checkpoint(s) "
                     f"({human_bytes(pending['size_bytes'])} of blobs not decoded yet): "
                     "run `lastgood verify STORE --read-data`")
    if report.get("blobs_pending"):
        lines.append(f"blob check pending for {report['blobs_pending']} checkpoint(s) (blob files not looked "
                     "at yet: more checkpoints than LASTGOOD_AUTO_WALK_ENTRIES); run `lastgood verify STORE`")
    lines.extend(_finding_lines(report["findings"]))
    return "\n".join(lines)


def render_verify(result: dict[str, Any]) -> str:
    errors = sum(1 for f in result["findings"] if f["severity"] == "error")
    lines = [f"checked {result['checked']} checkpoints ({result['depth']}): "
             f"{len(result['findings'])} finding(s), {errors} error(s)"]
    lines.extend(_finding_lines(result["findings"]))
    return "\n".join(lines)


def _finding_lines(found: list[dict[str, Any]], limit: int = 50) -> list[str]:
    lines = [f"  [{f['severity']}] {f['check']} {f.get('run_id') or ''} {f.get('checkpoint_id') or ''}: "
             f"{f['message']}" for f in found[:limit]]
    if len(found) > limit:
        lines.append(f"  … {len(found) - limit} more (use --format json)")
    return lines
