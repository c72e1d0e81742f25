"""LangGraph checkpoint rows at the validation boundary, SQLite and Postgres alike.

A row whose key or type columns (thread_id, checkpoint_ns, checkpoint_id,
parent_checkpoint_id, type) are not short valid text becomes one finding
naming the row and the problem; every other row still loads.

Both readers judge each listed batch column-wise at C speed (``columns_ok``:
types, lengths, NULs; the SQLite reader applies the same rules while it builds
the batch's Arrow key columns, ``key_arrays``); only a batch that fails is judged row by row
(``key_problem``, each column through ``validate.text``). SQLite names a row
by rowid; a text column holding bytes that are not UTF-8 fails SQLite's fetch,
and then every row's key columns are fetched as bytes (``ALL_ROWS_SQL``) and
judged, and the listing skips the rows rejected.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from lastgood.readers.common.lazy import lazy_module

pa = lazy_module("pyarrow")  # imported on first use: reading one state never needs it

from lastgood import limits
from lastgood.checks import Check
from lastgood.readers.base import Finding
from lastgood.readers.common.columns import checked_strings
from lastgood.readers.common.sqlite import NotUtf8
from lastgood.readers.common.validate import LANGGRAPH_TEXT_COLUMNS, Invalid, text

SHOWN_CHARS = 60


_RAW_COLUMNS = ", ".join(f"typeof({name}), CAST({name} AS BLOB)" for name, _ in LANGGRAPH_TEXT_COLUMNS)
# every row's key columns as (SQLite type, raw bytes) pairs: judged when a fetch as text failed
ALL_ROWS_SQL = f"SELECT rowid, {_RAW_COLUMNS} FROM checkpoints WHERE rowid > ?"
_SQLITE_TYPES = {int: "integer", float: "real", bytes: "blob", memoryview: "blob"}


def columns_ok(columns: Sequence[Sequence[Any]]) -> bool:
    """True when every value of the key columns (LANGGRAPH_TEXT_COLUMNS order) is
    acceptable: a fast pass at C speed per column; rows are judged one by one
    (:func:`key_problem`) only when it fails."""
    for values, (_name, nullable) in zip(columns, LANGGRAPH_TEXT_COLUMNS):
        if not set(map(type, values)) <= ({str, type(None)} if nullable else {str}):
            return False
        present = [v for v in values if v] if nullable else values
        if (not all(present) or max(map(len, present), default=0) > limits.MAX_ID_CHARS
                or "\x00" in "".join(present)):
            return False
    return True


# how each key column is stored in the index (CHECKPOINT_SCHEMA name, null handling)
_ARRAY_COLUMNS = (("run_id", "none"), ("namespace", "empty"), ("checkpoint_id", "none"),
                  ("parent_id", "falsy"), ("codec", "none"))


def key_arrays(columns: Sequence[Sequence[Any]]) -> dict[str, pa.Array] | None:
    """The key columns (LANGGRAPH_TEXT_COLUMNS order) as the Arrow arrays the index
    stores, when every value passes :func:`columns_ok`'s rules (judged while the arrays
    are built, at C speed); None when some value does not (then judge row by row)."""
    arrays = {}
    for values, (_name, nullable), (column, null) in zip(columns, LANGGRAPH_TEXT_COLUMNS, _ARRAY_COLUMNS):
        array = checked_strings(values, nullable, limits.MAX_ID_CHARS, null)
        if array is None:
            return None
        arrays[column] = array
    return arrays


def key_problem(values: Sequence[Any]) -> str | None:
    """What is wrong with one row's key columns as the driver returned them (str,
    None, another SQLite type, or ``NotUtf8``); None when they are fine."""
    for value, (name, nullable) in zip(values, LANGGRAPH_TEXT_COLUMNS):
        try:
            if value is None and not nullable:
                raise Invalid(f"{name} is NULL")
            if isinstance(value, NotUtf8):
                raise Invalid(f"{name} is not valid UTF-8 ({_shown(value)})")
            if value is not None and not isinstance(value, str):
                kind = _SQLITE_TYPES.get(type(value), type(value).__name__)
                raise Invalid(f"{name} must be text, not {kind} ({_shown(value)})")
            text(value, name, required=not nullable)
        except Invalid as exc:
            return str(exc)
    return None


def row_finding(row: str, values: Sequence[Any], problem: str) -> Finding:
    """The finding for a rejected checkpoints row, naming it by ``row`` (e.g. ``rowid 7``)
    and by thread and checkpoint id as far as they are readable; shown with its thread
    when that is valid."""
    thread = values[0] if key_problem(values[:1]) is None else None
    where = ", ".join([row] * bool(row) + [f"{label} {_shown(values[i])}" for i, label in
                                           ((0, "thread"), (2, "checkpoint")) if values[i] is not None])
    return Finding(Check.ROW_INVALID, "error", f"checkpoints row ({where}) skipped: {problem}", thread)


def valid_rows(rows: Sequence[Sequence[Any]], findings: list[Finding], key: slice = slice(0, 5),
               row_name: Any = None) -> Sequence[Sequence[Any]]:
    """``rows`` without those whose key columns (``row[key]``, LANGGRAPH_TEXT_COLUMNS order)
    the boundary rejects, each of which adds a finding (named by ``row_name(row)``)."""
    if columns_ok(list(zip(*(row[key] for row in rows)))):
        return rows
    good = []
    for row in rows:
        if (problem := key_problem(row[key])) is None:
            good.append(row)
        else:
            findings.append(row_finding(row_name(row) if row_name else "", row[key], problem))
    return good


def sqlite_row_findings(rows: Iterable[Sequence[Any]]) -> dict[int, Finding]:
    """rowid -> finding for each ALL_ROWS_SQL row whose key columns are not valid."""
    bad: dict[int, Finding] = {}
    for rowid, *cells in rows:
        values = [_sqlite_value(sql_type, raw) for sql_type, raw in zip(cells[::2], cells[1::2])]
        if (problem := key_problem(values)) is not None:
            bad[rowid] = row_finding(f"rowid {rowid}", values, problem)
    return bad


def _sqlite_value(sql_type: str, raw: bytes | None) -> Any:
    """An ALL_ROWS_SQL (typeof, bytes) pair as the driver would return it, or NotUtf8."""
    if sql_type == "null" or raw is None:
        return None
    if sql_type == "text":
        try:
            return bytes(raw).decode("utf-8")
        except UnicodeDecodeError:
            return NotUtf8(raw)
    if sql_type in ("integer", "real"):
        try:
            return (int if sql_type == "integer" else float)(bytes(raw).decode("ascii"))
        except ValueError:
            pass
    return bytes(raw)


def _shown(raw: Any) -> str:
    """A short, printable rendering of a raw value (bytes shown with escapes)."""
    if isinstance(raw, (bytes, memoryview)):
        value = bytes(raw).decode("utf-8", "backslashreplace")
    else:
        value = str(raw)
    value = value.replace("\x00", "\\x00")
    return repr(value if len(value) <= SHOWN_CHARS else value[: SHOWN_CHARS - 1] + "…")
