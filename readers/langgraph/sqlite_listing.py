"""What a listing of a LangGraph ``SqliteSaver`` database works out besides its rows.

- rows the validation boundary rejects (``Skipped``: rowid -> finding; the
  listing queries skip them by rowid) and special writes whose text is not UTF-8;
- parents missing from a full listing (set lookups over the ids fetched);
- the structure facts the listing read anyway (``StructureMemo``: keys listed,
  odd codecs, ``__error__`` writes), so the structure check of a just-listed
  database needs no query, valid while a stat of the files says nothing changed.
"""

from __future__ import annotations

import json
import sqlite3
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from lastgood import limits
from lastgood.checks import Check
from lastgood.readers.base import Finding, Status
from lastgood.readers.common.columns import string_array
from lastgood.readers.langgraph.common import CheckpointColumns, metadata_joined
from lastgood.readers.langgraph.findings import codec_findings, pending_error_finding
from lastgood.readers.langgraph.rows import key_arrays, key_problem, row_finding
from lastgood.readers.langgraph.serde import is_known_type
from lastgood.readers.common.lazy import lazy_module
from lastgood.readers.common.sqlite import NotUtf8, reading_past_bad_text

pa = lazy_module("pyarrow")  # imported on first use: reading one state never needs it
np = lazy_module("numpy")

WRITES_TEXT_COLUMNS = ("thread_id", "checkpoint_ns", "checkpoint_id", "task_id", "idx", "channel", "type")

# --- parents ------------------------------------------------------------------------------


Key = tuple[str, str, str]
ParentColumns = tuple[Sequence[str], Sequence[str | None], Sequence[str], Sequence[str | None]]


def missing_parents(batches: Sequence[ParentColumns]) -> dict[Key, str]:
    """(thread, namespace, id) -> parent id, for parents absent from the listed rows.

    ``batches`` are ``(thread_ids, namespaces, checkpoint_ids, parent_ids)`` columns of
    a full listing. Set lookups over the ids already fetched (no query); when an id
    appears in several threads, whole keys are matched.
    """
    ids = set().union(*(batch[2] for batch in batches))  # set.union: no bytecode per id
    if len(ids) == sum(len(batch[2]) for batch in batches):  # ids unique: an id names one row
        unknown = set().union(*(batch[3] for batch in batches)) - ids - {None, ""}
        if not unknown:
            return {}
        return {(t, ns or "", cid): p for batch in batches
                for t, ns, cid, p in zip(*batch) if p in unknown}
    keys = {(t, ns or "", cid) for batch in batches for t, ns, cid, _p in zip(*batch)}
    return {(t, ns or "", cid): p for batch in batches for t, ns, cid, p in zip(*batch)
            if p and (t, ns or "", p) not in keys}


def mark_missing_parents(
    tables: Sequence[pa.Table], missing: Mapping[Key, str]
) -> tuple[list[pa.Table], list[Finding]]:
    """``tables`` with rows whose parent is missing set to corrupt, and their findings."""
    if not missing:
        return list(tables), []
    findings = [
        Finding(Check.PARENT_MISSING, "error", f"parent checkpoint {parent} is missing", t, ns, cid)
        for (t, ns, cid), parent in missing.items()
    ]
    return [_mark_table(t, missing) for t in tables], findings


def _mark_table(table: pa.Table, missing: Mapping[Key, str]) -> pa.Table:
    ids = {cid for _t, _ns, cid in missing}
    checkpoint_ids = table["checkpoint_id"].to_pylist()
    if not any(cid in ids for cid in checkpoint_ids):
        return table
    keys = zip(table["run_id"].to_pylist(), table["namespace"].to_pylist(), checkpoint_ids)
    status, reasons = table["status"].to_pylist(), table["status_reason"].to_pylist()
    for i, key in enumerate(keys):
        if key in missing:
            reason = f"parent checkpoint {missing[key]} is missing"
            status[i], reasons[i] = Status.CORRUPT.value, f"{reasons[i]}; {reason}" if reasons[i] else reason
    table = table.set_column(table.schema.get_field_index("status"), "status", string_array(status))
    index = table.schema.get_field_index("status_reason")
    return table.set_column(index, "status_reason", string_array(reasons))


class SideQueries:
    """Queries of a scan that do not depend on the listed rows (heads, special writes), run
    on a second read-only connection in a thread while the listing fetches checkpoints:
    SQLite runs such a query's whole scan (an aggregate, a filter that few rows pass)
    inside a step that releases the GIL. Only for a database no writer has open (opened
    immutable: both connections read the same data). :meth:`rows` is None when the query
    failed here; the caller then runs it itself (and reports its error as usual)."""

    def __init__(self, connect: Callable[[], sqlite3.Connection],
                 queries: Mapping[str, tuple[str, tuple[Any, ...]]]) -> None:
        self._results: dict[str, list[tuple[Any, ...]]] = {}
        self._thread = threading.Thread(target=self._run, args=(connect, dict(queries)),
                                        name="lastgood-sqlite-side", daemon=True)
        self._thread.start()

    def _run(self, connect: Callable[[], sqlite3.Connection],
             queries: Mapping[str, tuple[str, tuple[Any, ...]]]) -> None:
        try:
            conn = connect()
        except Exception:  # noqa: BLE001 - the caller runs the queries itself
            return
        try:
            for name, (sql, params) in queries.items():
                try:
                    self._results[name] = conn.execute(sql, params).fetchall()
                except sqlite3.Error:
                    pass
        finally:
            conn.close()

    def rows(self, name: str) -> list[tuple[Any, ...]] | None:
        self._thread.join()
        return self._results.get(name)

    def join(self) -> None:
        self._thread.join()


def close_in_background(conn: sqlite3.Connection) -> None:
    """Close a scan's connection in a thread: unmapping the pages a full scan touched
    (~0.1 s for a 1.4 GB database) runs beside the index insert (SQLite releases the GIL)."""
    threading.Thread(target=conn.close, name="lastgood-sqlite-close").start()


class Skipped:
    """Rows the validation boundary rejected: rowid -> finding, and the rowids as the
    JSON parameter the listing queries skip them by."""

    def __init__(self, bad: dict[int, Finding]) -> None:
        self.bad = bad

    @property
    def param(self) -> str:
        return json.dumps(sorted(self.bad))

    def update(self, other: Skipped) -> None:
        self.bad.update(other.bad)

    def findings(self) -> list[Finding]:
        return [self.bad[rowid] for rowid in sorted(self.bad)]


class StructureMemo:
    """The structure facts a scan read anyway (keys listed, odd codecs, ``__error__``
    writes), so the structure check of what was just listed costs one query."""

    def __init__(self, stamp: tuple[Any, ...]) -> None:
        self.stamp = stamp
        self.token: str | None = None
        self.count = 0
        self.odd_codecs: dict[Key, str | None] = {}
        self.errors: list[tuple[Any, ...]] = []
        self._columns: list[tuple[Sequence[str], Sequence[str], Sequence[str]]] = []
        self._listed: set[Key] | None = None

    @property
    def listed(self) -> set[Key]:
        """The keys listed, built on first use (a full index never needs them)."""
        if self._listed is None:
            self._listed = {key for threads, namespaces, ids in self._columns
                            for key in zip(threads, _none_as_empty(namespaces), ids)}
        return self._listed

    def clear(self) -> None:
        self.count, self._columns, self._listed = 0, [], None
        self.odd_codecs.clear()

    def add_rows(self, cols: CheckpointColumns) -> None:
        if cols.codecs is not None and not all(is_known_type(c) for c in set(cols.codecs)):
            keys = zip(cols.thread_ids, _none_as_empty(cols.namespaces), cols.checkpoint_ids)
            self.odd_codecs.update((k, c) for k, c in zip(keys, cols.codecs) if not is_known_type(c))
        self._columns.append((cols.thread_ids, cols.namespaces, cols.checkpoint_ids))
        self.count += len(cols.checkpoint_ids)
        self._listed = None

    def add_error(self, row: tuple[Any, ...]) -> None:
        """An EVENTS_SQL row of an ``__error__`` write, in STRUCTURE_ERRORS_SQL's order."""
        thread, ns, cid, task_id, idx, _channel, type_, value = row
        self.errors.append((thread, ns or "", cid, task_id, idx, type_, value, ""))


def structure_findings(problems: Sequence[tuple[Any, ...]], errors: Sequence[tuple[Any, ...]],
                        aes_key: bytes | None) -> dict[Key, list[Finding]]:
    """Findings per key from STRUCTURE_ROWS_SQL rows (gone, odd codec) and
    STRUCTURE_ERRORS_SQL rows (pending ``__error__`` writes)."""
    findings: dict[Key, list[Finding]] = {}
    gone: set[Key] = set()
    for thread, ns, cid, present, type_ in problems:
        where = (thread, ns, cid)
        if not present:
            gone.add(where)
            findings.setdefault(where, []).append(
                Finding(Check.MISSING, "error", "the checkpoint row no longer exists", *where))
        else:
            findings.setdefault(where, []).extend(codec_findings(type_, where))
    for thread, ns, cid, task_id, idx, type_, value, _path in sorted(errors, key=write_order):
        where = (thread, ns, cid)
        label = f"pending write '__error__' (task {task_id}, idx {idx})"
        if where not in gone:
            findings.setdefault(where, []).append(pending_error_finding(label, type_, value, where, aes_key))
    return findings


def decodable_writes(conn: sqlite3.Connection, sql: str, after: int,
                      findings: list[Finding]) -> list[tuple[Any, ...]]:
    """EVENTS_SQL rows when some text in ``writes`` is not UTF-8: each such row is skipped
    with a finding naming its rowid (the other special writes still become events)."""
    with reading_past_bad_text(conn):
        rows = conn.execute(sql.replace("SELECT ", "SELECT rowid, ", 1), (after,)).fetchall()
    good = []
    for rowid, *row in rows:
        bad = [name for name, value in zip(WRITES_TEXT_COLUMNS, row) if isinstance(value, NotUtf8)]
        if bad:
            findings.append(Finding(Check.ROW_INVALID, "error",
                                    f"writes row (rowid {rowid}) skipped: {', '.join(bad)} not valid UTF-8"))
        else:
            good.append(tuple(row))
    return good


def _none_as_empty(values: Sequence[str | None]) -> Sequence[str]:
    return values if None not in values else [v or "" for v in values]


def valid_columns(rows: list[tuple[Any, ...]], skipped: Skipped) -> CheckpointColumns | None:
    """LIST_SQL rows as CheckpointColumns (key columns also as Arrow arrays), without the
    rows whose key columns the validation boundary rejects (added to ``skipped``); None
    when no row is left."""
    _rowids, threads, namespaces, ids, parents, codecs, sizes, metadata = zip(*rows)
    arrays = key_arrays((threads, namespaces, ids, parents, codecs))
    if arrays is None:
        good = []
        for row in rows:
            if (problem := key_problem(row[1:6])) is None:
                good.append(row)
            else:
                skipped.bad[row[0]] = row_finding(f"rowid {row[0]}", row[1:6], problem)
        if not good:
            return None
        _rowids, threads, namespaces, ids, parents, codecs, sizes, metadata = zip(*good)
        arrays = key_arrays((threads, namespaces, ids, parents, codecs))
    return CheckpointColumns(threads, namespaces, ids, parents, metadata, codecs, sizes, arrays=arrays)


def write_order(row: tuple[Any, ...]) -> tuple[Any, ...]:
    """``STRUCTURE_ERRORS_SQL`` rows by key, then LangGraph's (task_path, task_id, idx)."""
    return row[0], row[1], row[2], row[7] or "", row[3], row[4]


def parse_token(token: str | None, version: int) -> dict[str, list[int]] | None:
    """The row counts a scan token of ``version`` holds (None when it is not one)."""
    if not token:
        return None
    try:
        value = json.loads(token)
    except ValueError:
        return None
    if not isinstance(value, dict) or value.get("v") != version:
        return None
    try:
        return {t: [int(value[t][0]), int(value[t][1])] for t in ("checkpoints", "writes")}
    except (KeyError, TypeError, ValueError, IndexError):
        return None


# --- column-wise ranges (readers.langgraph_sqlite_fetch) ----------------------------------

# the key columns as CHUNK_SQL concatenates them: index name, may be empty, '' stored as null
_CHUNK_KEYS = (("run_id", False, False), ("namespace", True, False), ("checkpoint_id", False, False),
               ("parent_id", True, True), ("codec", True, False))


def chunk_columns(row: tuple[Any, ...] | None) -> CheckpointColumns | None:
    """A CHUNK_SQL row as CheckpointColumns with every Arrow column built, when every row
    of its range is plain (see readers.langgraph_sqlite_fetch); None when some row is not,
    or the range is empty: then the range is listed row by row."""
    if row is None or not row[0] or row[1] != row[0]:
        return None
    n = row[0]
    lists: list[list[str]] = []
    arrays: dict[str, pa.Array] = {}
    for (name, may_be_empty, empty_is_null), buffer in zip(_CHUNK_KEYS, row[2:7]):
        built = _split_strings(buffer or b"", n, may_be_empty, empty_is_null)
        if built is None:
            return None
        lists.append(built[0])
        arrays[name] = built[1]
    threads, namespaces, ids, parents, codecs = lists
    metadata = row[8] or b""
    if not all(is_known_type(c) for c in set(codecs)) or metadata.count(b"\n") != n - 1:
        return None
    sizes = _int64s(row[7] or b"", n)
    parsed = metadata_joined(metadata, _cut(metadata, n, ord("\n"), pa.binary()))
    if sizes is None or parsed is None:
        return None
    arrays["size_bytes"] = sizes
    parents = [p or None for p in parents] if "" in parents else parents
    return CheckpointColumns(threads, namespaces, ids, parents, [], codecs, None, arrays=arrays,
                             parsed_metadata=parsed)


def _int64s(buffer: bytes, n: int) -> pa.Array | None:
    """``n`` comma-separated integers as an int64 array (None when they are not)."""
    values = buffer.split(b",")
    try:
        numbers = np.array(values, np.int64) if len(values) == n else None
    except (ValueError, OverflowError):
        return None
    # from_buffers: pa.array of a numpy array imports pandas
    return pa.Array.from_buffers(pa.int64(), n, [None, pa.py_buffer(numbers)]) if numbers is not None else None


def _split_strings(buffer: bytes, n: int, may_be_empty: bool,
                   empty_is_null: bool) -> tuple[list[str], pa.Array] | None:
    """``n`` NUL-separated values as a list and a string array, when they are valid UTF-8,
    none holds a NUL, and each is within MAX_ID_CHARS (and not empty unless allowed)."""
    try:
        values = buffer.decode().split("\x00")
    except UnicodeDecodeError:
        return None
    if len(values) != n:
        return None
    array = _cut(buffer, n, 0, pa.string(), limits.MAX_ID_CHARS, may_be_empty, empty_is_null)
    return (values, array) if array is not None else None


def _cut(buffer: bytes, n: int, separator: int, kind: pa.DataType, limit: int | None = None,
         may_be_empty: bool = True, empty_is_null: bool = False) -> pa.Array | None:
    """The ``n`` values of ``buffer`` between ``separator`` bytes as an Arrow array over
    one copy of the bytes without separators (numpy at C speed; UTF-8 checked by the caller)."""
    raw = np.frombuffer(buffer, np.uint8)
    at = raw == separator
    bounds = np.empty(n + 1, np.int64)
    bounds[0], bounds[-1] = -1, len(raw)
    bounds[1:-1] = np.flatnonzero(at)
    lengths = np.diff(bounds) - 1
    if limit is not None and n and int(lengths.max()) > limit:  # bytes >= characters: the row path decides
        return None
    empty = lengths == 0
    if not may_be_empty and empty.any():
        return None
    offsets = np.zeros(n + 1, np.int32)
    np.cumsum(lengths, out=offsets[1:])
    validity = None
    nulls = int(empty.sum()) if empty_is_null else 0
    if nulls:
        validity = pa.py_buffer(np.packbits(~empty, bitorder="little"))
    data = raw[~at] if n > 1 else raw
    return pa.Array.from_buffers(kind, n, [validity, pa.py_buffer(offsets), pa.py_buffer(data)], nulls)
