"""Reader for LangGraph ``SqliteSaver`` databases (``checkpoints`` + ``writes`` tables).

Reading never writes: the database is opened through a ``file:`` URI with
``mode=ro`` (and ``query_only``); when no ``-wal``/``-journal`` file is beside
it, also ``immutable=1`` so SQLite creates no ``-wal``/``-shm`` files. When a
``-wal`` exists (a live writer), each scan reads in one transaction so the
listing is consistent.

The listing comes from SQL only (ids, parents, type, blob length and the JSON
metadata); checkpoint blobs are decoded only by ``load_state``,
``pending_writes`` and ``check_checkpoints``, with the safe decoder in
``readers.langgraph_serde`` (nothing named in the data is imported or run).
"""

from __future__ import annotations

from lastgood.checks import Check
import json
import sqlite3
import threading
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import Any

from lastgood.errors import CheckpointNotFound, DecodeError, ReaderError
from lastgood.readers.base import (
    CheckpointRecord,
    Finding,
    HeadRecord,
    Scan,
)
from lastgood.readers.common.gc_pause import gc_paused
from lastgood.readers.langgraph.common import (
    ERROR,
    KNOWN_CODECS_SQL,
    checkpoints_batch,
    event_record,
    events_table,
)
from lastgood.readers.langgraph.findings import payload_findings
from lastgood.readers.langgraph.rows import ALL_ROWS_SQL, sqlite_row_findings
from lastgood.readers.langgraph.sqlite_fetch import NOT_BUILT, ChunkFetch, drop_prefetched, ranges, take_prefetched
from lastgood.readers.langgraph.sqlite_listing import (  # noqa: F401 - missing_parents is re-exported
    ParentColumns,
    SideQueries,
    Skipped,
    StructureMemo,
    chunk_columns,
    close_in_background,
    decodable_writes,
    mark_missing_parents,
    missing_parents,
    parse_token,
    structure_findings,
    valid_columns,
)
from lastgood.readers.langgraph.serde import decode_typed
from lastgood.readers.common.lazy import lazy_module
from lastgood.readers.common.sqlite import (connect_readonly, file_stamp, is_live, sqlite_path, sqlite_schema,
                                          table_columns)
from lastgood.readers.langgraph.base import Key, LangGraphReader, is_marker, key_of

pa = lazy_module("pyarrow")  # imported on first use: reading one state never needs it

TOKEN_VERSION = 1

# metadata as bytes whatever its SQLite type (TEXT that is not UTF-8 must not fail the scan);
# rows the validation boundary rejected (lastgood.readers.langgraph.rows) are skipped by rowid.
# A listing goes by rowid ranges: each is taken column-wise (langgraph_sqlite_fetch.CHUNK_SQL)
# when all its rows are plain, else row by row with this query
_SKIPPED = "rowid NOT IN (SELECT value FROM json_each(?))"
LIST_SQL = f"""
SELECT rowid, thread_id, checkpoint_ns, checkpoint_id, parent_checkpoint_id, type,
       length(checkpoint), CAST(metadata AS BLOB)
FROM checkpoints WHERE rowid > ? AND rowid <= ? AND {_SKIPPED}
"""
MISSING_PARENTS_SQL = f"""
SELECT c.thread_id, c.checkpoint_ns, c.checkpoint_id, c.parent_checkpoint_id FROM checkpoints c
WHERE c.rowid > ? AND c.{_SKIPPED} AND coalesce(c.parent_checkpoint_id, '') != '' AND NOT EXISTS (
  SELECT 1 FROM checkpoints p WHERE p.thread_id = c.thread_id AND p.checkpoint_ns = c.checkpoint_ns
    AND p.checkpoint_id = c.parent_checkpoint_id AND p.{_SKIPPED})
"""
# Special writes (__error__ -1, __scheduled__ -2, __interrupt__ -3, __resume__ -4) are the
# only ones with a negative idx (WRITES_IDX_MAP). ``idx`` is in the primary-key index, so
# SQLite filters on the index and reads only the matching rows, not every write's value.
EVENTS_SQL = """
SELECT thread_id, checkpoint_ns, checkpoint_id, task_id, idx, channel, type, value
FROM writes {index} WHERE idx < 0 AND rowid > ?
"""
# max(rowid) and count(*) as separate scalar subqueries: together in one SELECT, SQLite walks
# the whole key index for max(rowid) (0.2 s for 300k writes); apart, max(rowid) is one b-tree
# search and count(*) SQLite's page-count fast path
COUNTS_SQL = "(SELECT coalesce(max(rowid), 0) FROM {table}), (SELECT count(*) FROM {table})"
HEADS_SQL = f"""SELECT thread_id, checkpoint_ns, max(checkpoint_id) FROM checkpoints WHERE {_SKIPPED}
GROUP BY thread_id, checkpoint_ns"""
# Structure checks are set-based: the keys to check go in as one JSON array parameter
# (``json_each``, no temp table on a read-only connection), so a check of any number of
# checkpoints is two queries, each an index lookup per key.
_KEYS_CTE = """WITH k(thread_id, checkpoint_ns, checkpoint_id) AS (
  SELECT json_extract(value, '$[0]'), json_extract(value, '$[1]'), json_extract(value, '$[2]')
  FROM json_each(?))"""
# rows gone from the store (anti-join) or stored with a codec LangGraph cannot write
STRUCTURE_ROWS_SQL = _KEYS_CTE + """
SELECT k.thread_id, k.checkpoint_ns, k.checkpoint_id, c.checkpoint_id IS NOT NULL, c.type
FROM k LEFT JOIN checkpoints c ON c.thread_id = k.thread_id AND c.checkpoint_ns = k.checkpoint_ns
  AND c.checkpoint_id = k.checkpoint_id
WHERE c.checkpoint_id IS NULL OR NOT (c.type IS NULL OR c.type IN ({known}))
"""
# pending ``__error__`` writes of those checkpoints, in one filtered pass over ``writes``
STRUCTURE_ERRORS_SQL = _KEYS_CTE + """
SELECT w.thread_id, w.checkpoint_ns, w.checkpoint_id, w.task_id, w.idx, w.type, w.value, {task_path}
FROM k JOIN writes w ON w.thread_id = k.thread_id AND w.checkpoint_ns = k.checkpoint_ns
  AND w.checkpoint_id = k.checkpoint_id
WHERE w.channel = '__error__'
"""
ROW_SQL = (
    "SELECT type, checkpoint, parent_checkpoint_id, metadata FROM checkpoints "
    "WHERE thread_id = ? AND checkpoint_ns = ? AND checkpoint_id = ?"
)


# --- opening -------------------------------------------------------------------


def _pk_index_hint(conn: sqlite3.Connection, table: str, column: str) -> str:
    """``INDEXED BY <primary-key index>`` when that index holds ``column``, else ''."""
    for _seq, name, _unique, origin, _partial in conn.execute(f"PRAGMA index_list({table})"):
        if origin == "pk" and column in {row[2] for row in conn.execute(f"PRAGMA index_info({name})")}:
            return f'INDEXED BY "{name}"'
    return ""


# --- the reader -------------------------------------------------------------------


class LangGraphSqliteReader(LangGraphReader):
    """LangGraph SqliteSaver database, read-only."""

    name = "langgraph-sqlite"
    description = "LangGraph SqliteSaver database (checkpoints + writes tables)"
    recovery_class = "lastgood.readers.langgraph.recovery:SqliteRecovery"
    retention_class = "lastgood.readers.langgraph.retention_sqlite:SqliteRetention"

    def __init__(self, url: str, storage_options: Mapping[str, Any] | None = None) -> None:
        self.path = sqlite_path(url)
        super().__init__(url, storage_options)
        self._lock = threading.RLock()
        self._conn: sqlite3.Connection | None = None
        self._conn_live = False
        self._conn_stamp: tuple[Any, ...] | None = None
        self._has_writes = False
        self._task_path = "''"
        self._writes_index = ""
        self._memo: StructureMemo | None = None
        self._stamp: tuple[Any, ...] = ()
        try:
            with self._connection() as conn:
                self._check_tables(conn)
        except BaseException:
            self.close()
            raise

    @classmethod
    def sniff(cls, url: str, storage_options: Mapping[str, Any] | None = None) -> bool:
        schema = sqlite_schema(url)
        return schema is not None and {"thread_id", "checkpoint_ns"} <= schema.get("checkpoints", set())

    def close(self) -> None:
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None

    # connections ------------------------------------------------------------------

    @contextmanager
    def _connection(self) -> Iterator[sqlite3.Connection]:
        """The shared connection: reopened when a writer appears or goes away, and when the file
        changed under an immutable one (which would keep reading the file as it was)."""
        with self._lock:
            live = is_live(self.path)
            stamp = None if live else file_stamp(self.path)
            if self._conn is None or live != self._conn_live or stamp != self._conn_stamp:
                self.close()
                self._conn, self._conn_live = connect_readonly(self.path), live
                self._conn_stamp = stamp
            with _sqlite_errors(self.path):
                yield self._conn

    def _check_tables(self, conn: sqlite3.Connection) -> None:
        columns = table_columns(conn, "checkpoints")
        needed = {"thread_id", "checkpoint_ns", "checkpoint_id", "parent_checkpoint_id", "type",
                  "checkpoint", "metadata"}
        if not columns:
            raise ReaderError(f"{self.path} has no LangGraph 'checkpoints' table: not a SqliteSaver database")
        if missing := needed - columns:
            raise ReaderError(f"{self.path}: the checkpoints table lacks LangGraph columns {sorted(missing)}")
        writes = table_columns(conn, "writes")
        self._has_writes = {"checkpoint_id", "channel", "value", "idx"} <= writes
        self._task_path = "task_path" if "task_path" in writes else "''"
        self._writes_index = _pk_index_hint(conn, "writes", "idx")

    # scan -----------------------------------------------------------------------------

    def scan(self, since: str | None = None) -> Scan:
        """List checkpoints from SQL only, in one read transaction."""
        self._stamp = file_stamp(self.path)  # before reading: any later commit changes it
        conn = connect_readonly(self.path, mmap=True)
        try:
            with _sqlite_errors(self.path):
                conn.execute("BEGIN")
                try:
                    return self._scan_in(conn, since)
                finally:
                    conn.execute("COMMIT")
        finally:
            close_in_background(conn)

    def _scan_in(self, conn: sqlite3.Connection, since: str | None) -> Scan:
        counts = self._counts(conn)
        token = json.dumps({"v": TOKEN_VERSION, **counts}, sort_keys=True)
        if since == token:  # nothing changed: no rows, and heads=None (unchanged)
            drop_prefetched(self.path)
            return Scan(token=token, full=False, checkpoints=iter(()), heads=None)
        after = self._appended_after(conn, since, counts)
        full = after is None
        ck_after, wr_after = after or (0, 0)
        side = self._side_queries(wr_after)
        try:
            return self._list(conn, token, full, (ck_after, counts["checkpoints"]), wr_after, side)
        finally:
            if side is not None:
                side.join()

    def _side_queries(self, wr_after: int) -> SideQueries | None:
        """Heads and special writes queried beside the listing when no writer is active."""
        if is_live(self.path):
            return None
        queries = {"heads": (HEADS_SQL, ("[]",))}
        if self._has_writes:
            queries["events"] = (EVENTS_SQL.format(index=self._writes_index), (wr_after,))
        return SideQueries(lambda: connect_readonly(self.path), queries)

    def _list(self, conn: sqlite3.Connection, token: str, full: bool, plan: tuple[int, list[int]],
              wr_after: int, side: SideQueries | None) -> Scan:
        memo = StructureMemo(self._stamp)
        memo.token = token
        skipped = Skipped({})
        tables, findings = self._checkpoint_tables(conn, plan, memo, skipped)
        # the side query ran without skipping rows: its heads stand only when none was skipped
        heads_rows = side.rows("heads") if side is not None and not skipped.bad else None
        heads = self._heads(conn, skipped) if heads_rows is None else [HeadRecord(t, c, ns) for t, ns, c in heads_rows]
        # a full listing read every row's codec and every special write: the memo answers
        # the structure check of what it listed (LangGraph writes ``__error__`` with idx -1)
        events = self._event_tables(conn, wr_after, memo if full else None, findings,
                                    side.rows("events") if side is not None else None)
        self._memo = memo if full else None
        if full and not self._has_writes:
            findings.append(Finding(Check.WRITES_MISSING, "warning", "the database has no LangGraph writes table"))
        return Scan(token=token, full=full, checkpoints=iter(tables), events=iter(events),
                    findings=findings, heads=heads)

    @staticmethod
    def _heads(conn: sqlite3.Connection, skipped: Skipped) -> list[HeadRecord]:
        return [HeadRecord(t, c, ns) for t, ns, c in conn.execute(HEADS_SQL, (skipped.param,))]

    def _counts(self, conn: sqlite3.Connection) -> dict[str, list[int]]:
        tables = ("checkpoints", "writes") if self._has_writes else ("checkpoints",)
        values = conn.execute(f"SELECT {', '.join(COUNTS_SQL.format(table=t) for t in tables)}").fetchone()
        counts = {t: list(values[2 * i: 2 * i + 2]) for i, t in enumerate(tables)}
        counts.setdefault("writes", [0, 0])
        return counts

    def _appended_after(
        self, conn: sqlite3.Connection, since: str | None, counts: Mapping[str, list[int]]
    ) -> tuple[int, int] | None:
        """The rowids to list after when only appends happened since ``since``, else None."""
        previous = parse_token(since, TOKEN_VERSION)
        if previous is None:
            return None
        for table in ("checkpoints", "writes"):
            if not self._only_appended(conn, table, previous[table], counts[table]):
                return None
        return previous["checkpoints"][0], previous["writes"][0]

    def _only_appended(self, conn: sqlite3.Connection, table: str, before: list[int], now: list[int]) -> bool:
        old_max, old_count = before
        if now[0] < old_max:
            return False
        if table == "writes" and not self._has_writes:
            return old_count == 0
        added = conn.execute(f"SELECT count(*) FROM {table} WHERE rowid > ?", (old_max,)).fetchone()[0]
        return now[1] - added == old_count

    @staticmethod
    def _undecodable_rows(conn: sqlite3.Connection, after: int) -> Skipped:
        """Every row's key columns fetched as bytes and judged (some hold text that is not
        UTF-8): the rows the validation boundary rejects, by rowid, with their findings."""
        return Skipped(sqlite_row_findings(conn.execute(ALL_ROWS_SQL, (after,))))

    def _checkpoint_tables(self, conn: sqlite3.Connection, plan: tuple[int, list[int]], memo: StructureMemo,
                           skipped: Skipped) -> tuple[list[pa.Table], list[Finding]]:
        """The listed rows as Arrow batches with their findings; a text column that is not
        UTF-8 fails the fetch: then every row is judged as bytes and the listing retried.
        ``plan``: list after this rowid, and the table's (max rowid, row count)."""
        after = plan[0]
        try:
            tables, findings = self._list_rows(conn, plan, memo, skipped)
        except sqlite3.OperationalError as exc:
            if "decode" not in str(exc).lower():
                raise
            skipped.update(self._undecodable_rows(conn, after))
            memo.clear()
            tables, findings = self._list_rows(conn, plan, memo, skipped)
        return tables, skipped.findings() + findings

    def _chunks(self, conn: sqlite3.Connection, plan: tuple[int, list[int]], skipped: Skipped) -> ChunkFetch:
        """The listing's rowid ranges, fetched column-wise: a full listing's prefetch when
        one is running for these files; in threads on connections of their own when no
        writer has the database open; else on the scan's connection, in its transaction."""
        after, (last, rows) = plan
        if not after and not skipped.bad and (fetch := take_prefetched(self.path, self._stamp, last)):
            return fetch
        spans = ranges(after, last, rows)
        if is_live(self.path) or len(spans) < 2:
            return ChunkFetch(spans, skipped.param, conn=conn)
        return ChunkFetch(spans, skipped.param, connect=lambda: connect_readonly(self.path, mmap=True),
                          build=chunk_columns)

    def _list_rows(self, conn: sqlite3.Connection, plan: tuple[int, list[int]], memo: StructureMemo,
                   skipped: Skipped) -> tuple[list[pa.Table], list[Finding]]:
        """Batches of listed rows (column-wise), then one vectorised parent check."""
        tables: list[pa.Table] = []
        findings: list[Finding] = []
        keys: list[ParentColumns] = []
        after = plan[0]
        fetch = self._chunks(conn, plan, skipped)
        try:
            with gc_paused():
                for i, (lo, hi) in enumerate(fetch.spans):
                    row, cols = fetch.get(i)
                    cols = chunk_columns(row) if cols is NOT_BUILT else cols
                    if cols is None:  # not plain: row by row, through the validation boundary
                        rows = conn.execute(LIST_SQL, (lo, hi, skipped.param)).fetchall()
                        cols = valid_columns(rows, skipped) if rows else None
                        del rows
                    if cols is None:
                        continue
                    table, batch_findings = checkpoints_batch(cols)
                    tables.append(table)
                    findings.extend(batch_findings)
                    keys.append((cols.thread_ids, cols.namespaces, cols.checkpoint_ids, cols.parent_ids))
                    memo.add_rows(cols)
        finally:
            fetch.cancel()
        missing = missing_parents(keys) if not after else self._missing_parents_after(conn, after, skipped)
        tables, parent_findings = mark_missing_parents(tables, missing)
        # one (chunked, zero-copy) table: the index inserts a whole full listing in one
        # statement, without the per-batch de-duplication later batches need
        return ([pa.concat_tables(tables)] if len(tables) > 1 else tables), findings + parent_findings

    @staticmethod
    def _missing_parents_after(conn: sqlite3.Connection, after: int,
                               skipped: Skipped) -> dict[tuple[str, str, str], str]:
        rows = conn.execute(MISSING_PARENTS_SQL, (after, skipped.param, skipped.param)).fetchall()
        return {(t, ns, cid): parent for t, ns, cid, parent in rows}

    def _event_tables(self, conn: sqlite3.Connection, after: int, memo: StructureMemo | None = None,
                      findings: list[Finding] | None = None,
                      rows: list[tuple[Any, ...]] | None = None) -> list[pa.Table]:
        """Special writes as events (``rows``: EVENTS_SQL's result when already fetched)."""
        if not self._has_writes:
            return []
        sql = EVENTS_SQL.format(index=self._writes_index)
        try:
            if rows is None:
                rows = conn.execute(sql, (after,)).fetchall()
        except sqlite3.OperationalError as exc:
            if "decode" not in str(exc).lower():
                raise
            rows = decodable_writes(conn, sql, after, findings if findings is not None else [])
        events = []
        for row in rows:
            if memo is not None and row[5] == ERROR:
                memo.add_error(row)
            event = event_record(*row, aes_key=self.aes_key)
            if event is not None:
                events.append(event)
        return [events_table(events)] if events else []

    # one checkpoint -----------------------------------------------------------------------

    def _row(self, record: CheckpointRecord) -> tuple[Any, ...]:
        with self._connection() as conn:
            return self._fetch_row(conn, key_of(record))

    @staticmethod
    def _fetch_row(conn: sqlite3.Connection, key: Key) -> tuple[Any, ...]:
        row = conn.execute(ROW_SQL, key).fetchone()
        if row is None:
            raise CheckpointNotFound(f"checkpoint {key[2]} of thread {key[0]!r} not found")
        return row

    def read_blob(self, record: CheckpointRecord) -> bytes:
        return bytes(self._row(record)[1] or b"")

    def _session(self) -> AbstractContextManager[sqlite3.Connection]:
        return self._connection()

    def _checkpoint(self, session: sqlite3.Connection, key: Key) -> tuple[Any, Any, str | None]:
        type_, blob, parent_id, metadata = self._fetch_row(session, key)
        checkpoint = decode_typed(type_, blob, aes_key=self.aes_key)
        if not is_marker(checkpoint):
            _require_checkpoint(checkpoint)
        return checkpoint, metadata, parent_id

    def _task_path_rows(self, session: sqlite3.Connection, run_ids: list[str]) -> list[tuple[Any, ...]]:
        if not self._has_writes or self._task_path == "''" or not run_ids:
            return []
        return session.execute("SELECT DISTINCT thread_id, checkpoint_ns, checkpoint_id, task_path FROM writes "
                               "WHERE thread_id IN (SELECT value FROM json_each(?))",
                               (json.dumps(run_ids),)).fetchall()

    def _write_rows(self, session: sqlite3.Connection, key: Key) -> list[tuple[Any, ...]]:
        if not self._has_writes:
            return []
        sql = (f"SELECT task_id, channel, type, value, {self._task_path}, idx FROM writes "
               "WHERE thread_id = ? AND checkpoint_ns = ? AND checkpoint_id = ?")
        return session.execute(sql, key).fetchall()

    # integrity ------------------------------------------------------------------------------

    def _check_data(self, records: Iterable[CheckpointRecord]) -> Iterator[Finding]:
        for record in records:
            yield from self._check_one(record)

    def check_structure(self, keys: Sequence[Key]) -> list[Finding]:
        """Structure depth for ``keys`` in two set-based queries, whatever their number:
        rows gone or with an unknown codec, and pending ``__error__`` writes."""
        keys = list(dict.fromkeys(keys))
        if not keys:
            return []
        problems, errors = self._memo_answers(keys)
        unknown = [key for key in keys if key not in self._memo.listed] if self._memo else keys
        if unknown:
            param = json.dumps(unknown)
            with self._connection() as conn:
                problems += conn.execute(STRUCTURE_ROWS_SQL.format(known=KNOWN_CODECS_SQL), (param,)).fetchall()
                if self._has_writes:
                    errors += conn.execute(STRUCTURE_ERRORS_SQL.format(task_path=self._task_path),
                                           (param,)).fetchall()
        findings = structure_findings(problems, errors, self.aes_key)
        return [f for key in keys for f in findings.get(key, ())]

    def listed_structure(self, token: str | None) -> tuple[int, list[Finding]] | None:
        """Structure findings for every checkpoint this reader's last full scan listed,
        with their number, when that scan made ``token`` and the files are unchanged
        since (a stat): the listing read every row's codec and every special write.
        None when the listing cannot answer (check with :meth:`check_structure`)."""
        memo = self._memo
        if memo is None or token is None or memo.token != token or file_stamp(self.path) != memo.stamp:
            return None
        problems = [(*key, True, codec) for key, codec in memo.odd_codecs.items()]
        errors = [row for row in memo.errors if tuple(row[:3]) in memo.listed] if memo.errors else []
        findings = structure_findings(problems, errors, self.aes_key)
        return memo.count, [f for key in sorted(findings) for f in findings[key]]

    def _memo_answers(self, keys: list[Key]) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]:
        """What this reader's last scan already found for ``keys`` (it read the same
        columns and special writes), while the files are unchanged since (a stat, no query)."""
        if self._memo is None:
            return [], []
        if file_stamp(self.path) != self._memo.stamp:
            self._memo = None
            return [], []
        wanted = set(keys)
        problems = [(*key, True, codec) for key, codec in self._memo.odd_codecs.items() if key in wanted]
        errors = [row for row in self._memo.errors if tuple(row[:3]) in wanted]
        return problems, errors

    def _check_one(self, record: CheckpointRecord) -> Iterator[Finding]:
        """Data depth: the checkpoint's blob and every write decoded (never executed)."""
        where = key_of(record)
        with self._connection() as conn:
            row = conn.execute(ROW_SQL, where).fetchone()
            writes = self._write_rows(conn, where) if row is not None else []
        if row is None:
            yield Finding(Check.MISSING, "error", "the checkpoint row no longer exists", *where)
            return
        type_, blob, _parent, _meta = row
        yield from payload_findings("checkpoint", type_, blob, where, self.aes_key, record.checkpoint_id)
        for task_id, channel, w_type, value, _path, idx in writes:
            label = f"pending write {channel!r} (task {task_id}, idx {idx})"
            yield from payload_findings(label, w_type, value, where, self.aes_key, None, channel)


@contextmanager
def _sqlite_errors(path: Path) -> Iterator[None]:
    """SQLite failures (locked, damaged file…) as ReaderError naming the database."""
    try:
        yield
    except sqlite3.Error as exc:
        raise ReaderError(f"{path}: SQLite error: {exc}") from exc


def _require_checkpoint(value: Any) -> None:
    if not isinstance(value, dict) or not isinstance(value.get("channel_values"), dict):
        raise DecodeError("the blob decoded, but it is not a LangGraph checkpoint (no channel_values)")


