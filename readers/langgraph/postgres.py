"""Reader for LangGraph ``PostgresSaver`` databases, read-only.

Tables (``langgraph.checkpoint.postgres.base.MIGRATIONS``): ``checkpoints``
(checkpoint JSONB with the inline primitive channel values, metadata JSONB),
``checkpoint_blobs`` (every other channel value, keyed by channel version and
shared by the checkpoints whose ``channel_versions`` name it) and
``checkpoint_writes`` (pending writes, errors, interrupts).

Every statement runs in a ``READ ONLY`` transaction (``REPEATABLE READ`` so a
scan sees one snapshot); nothing is created or migrated, so a role with only
``SELECT`` rights is enough. The listing comes from SQL alone; values are
decoded only by ``load_state``/``pending_writes``/``check_checkpoints`` with
the safe decoder in ``readers.langgraph_serde`` (nothing named in the data is
imported or run).

``size_bytes`` is the stored size of the checkpoint row's JSONB plus the blobs
the checkpoint introduced (its ``updated_channels``; every referenced blob
when the checkpoint does not say), so summing a thread's sizes gives its
storage; ``storage_options={"blob_sizes": False}`` skips the blob lookups.

A full listing of a big table is read in halves by two connections sharing one
snapshot, in threads (``langgraph_postgres_fetch``); the whole-store structure
checks run beside it in the same snapshot, so ``listed_structure`` answers the
structure check of what was listed without sending any key back (the SQL is in
``langgraph_postgres_sql``).

``read_blob`` returns one JSON document (UTF-8, sorted keys) holding the row
as stored: ``checkpoint`` and ``metadata`` JSONB, the parent id, and each
referenced ``checkpoint_blobs`` row (channel, version, type, size, sha256,
base64 data) - the bytes LangGraph would read to rebuild the checkpoint.
"""

from __future__ import annotations

import base64
import hashlib
import json
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, suppress
from dataclasses import dataclass, replace
from typing import Any

import psycopg

from lastgood.checks import Check
from lastgood.errors import CheckpointNotFound, DecodeError, ReaderError
from lastgood.readers.base import (
    CheckpointRecord,
    Finding,
    HeadRecord,
    Scan,
)
from lastgood.readers.langgraph.common import (
    KNOWN_CODECS_SQL,
    ERROR,
    CheckpointColumns,
    checkpoints_batch,
    event_record,
    events_table,
)
from lastgood.readers.langgraph.findings import codec_findings, payload_findings, pending_error_finding
from lastgood.readers.langgraph.postgres_fetch import in_snapshot, in_thread, split_parts, stream_rows
from lastgood.readers.langgraph.postgres_sql import (
    ADDED_SQL,
    BLOB_SIZES,
    BLOBS_SQL,
    CHECK_BLOBS_SQL,
    CHECK_ROWS_SQL,
    CHECK_WRITES_SQL,
    EVENTS_SQL,
    HEADS_AFTER_SQL,
    HEADS_SQL,
    MISSING_PARENTS_SQL,
    ROW_SQL,
    SCAN_SQL,
    STORE_BLOBS_SQL,
    STORE_ROWS_SQL,
    STORE_WRITES_SQL,
    STRUCTURE_BLOBS_SQL,
    STRUCTURE_ROWS_SQL,
    STRUCTURE_WRITES_SQL,
    TABLES_SQL,
    TOKEN_SQL,
    UNKNOWN_BLOB_CODECS_SQL,
    WRITES_SQL,
)
from lastgood.readers.langgraph.rows import columns_ok, key_problem, valid_rows
from lastgood.readers.langgraph.serde import decode_typed
from lastgood.readers.langgraph.base import Key, LangGraphReader, key_of
from lastgood.readers.common.lazy import lazy_module
from lastgood.readers.common.postgres import ReadConnection, connect_readonly, postgres_schema, read_error
from lastgood.readers.common.urls import is_postgres_url
from lastgood.readers.common.urls import display_url

pa = lazy_module("pyarrow")  # imported on first use: the listing's queries start without it

BATCH_ROWS = 20_000
EVENT_BATCH_ROWS = 20_000
CHECK_CHUNK = 200
TOKEN_VERSION = 1
KEY_COLUMNS = slice(0, 4)  # SCAN_SQL's thread_id, checkpoint_ns, checkpoint_id, parent id


def _connect(url: str) -> psycopg.Connection[Any]:
    """The reader's own connection, through this module's ``connect_readonly`` (looked up at each
    call, like the listing's)."""
    return connect_readonly(url)


# --- the reader ----------------------------------------------------------------------------


class LangGraphPostgresReader(LangGraphReader):
    """LangGraph PostgresSaver tables, read through read-only transactions."""

    name = "langgraph-postgres"
    description = "LangGraph PostgresSaver database (checkpoints, checkpoint_blobs, checkpoint_writes)"
    recovery_class = "lastgood.readers.langgraph.recovery:PostgresRecovery"
    retention_class = "lastgood.readers.langgraph.retention_postgres:PostgresRetention"

    def __init__(self, url: str, storage_options: Mapping[str, Any] | None = None) -> None:
        super().__init__(url, storage_options)
        self.blob_sizes = bool(self.storage_options.get("blob_sizes", True))
        self._lock = threading.RLock()
        self._pg = ReadConnection(url, self._lock, _connect)
        self._scans: list[psycopg.Connection[Any]] = []
        self._listed: _Listed | None = None
        try:
            with self._read() as cur:
                self._task_path = self._check_tables(cur)
        except BaseException:
            self.close()
            raise

    @classmethod
    def sniff(cls, url: str, storage_options: Mapping[str, Any] | None = None) -> bool:
        if not is_postgres_url(url):
            return False
        tables = postgres_schema(url)
        return {"thread_id", "checkpoint_ns"} <= tables.get("checkpoints", frozenset()) and "checkpoint_blobs" in tables

    def close(self) -> None:
        with self._lock:
            for conn in self._scans:
                conn.close()
            self._scans.clear()
            self._pg.close()

    # connections ---------------------------------------------------------------------

    def _read(self) -> AbstractContextManager[psycopg.Cursor[Any]]:
        """A cursor in a fresh read-only transaction on the shared connection."""
        return self._pg.cursor()

    def _db_error(self, exc: psycopg.Error) -> ReaderError:
        return read_error(self.url, exc)

    def _check_tables(self, cur: psycopg.Cursor[Any]) -> str:
        *present, has_task_path = cur.execute(TABLES_SQL).fetchone() or (False, False, False, False)
        tables = ("checkpoints", "checkpoint_blobs", "checkpoint_writes")
        missing = [table for table, ok in zip(tables, present) if not ok]
        if missing:
            raise ReaderError(
                f"{display_url(self.url)} has no LangGraph PostgresSaver tables ({', '.join(missing)} "
                "missing): not a database PostgresSaver.setup() ran on")
        return "task_path" if has_task_path else "''"

    # scan -------------------------------------------------------------------------------

    def scan(self, since: str | None = None) -> Scan:
        """List checkpoints from SQL only, in one REPEATABLE READ read-only transaction.

        Unchanged token: nothing. Only appends since ``since`` (count and newest
        id agree): the new rows, the heads of their threads, and every event when
        the special writes changed (events replace a checkpoint's events). Else a
        full listing. Batches stream from server-side cursors; the transaction
        ends when they are exhausted (or on ``close``). Missing parents are found
        beside the first batch and lead ``Scan.findings``; other row findings join
        as batches come.
        """
        conn = connect_readonly(self.url)
        try:
            with conn.cursor() as cur:
                token, cutoff, events_changed = self._plan(cur, since)
                if cutoff is None:
                    conn.close()
                    return Scan(token=token, full=False, checkpoints=iter(()))
                heads = [HeadRecord(t, c, ns) for t, ns, c in
                         (cur.execute(HEADS_AFTER_SQL, {"cutoff": cutoff}) if cutoff else cur.execute(HEADS_SQL))
                         if key_problem((t, ns, c)) is None]  # never a head the listing skips
                events = self._event_tables(cur) if events_changed else []
        except BaseException as exc:
            conn.close()
            if isinstance(exc, psycopg.Error):
                raise self._db_error(exc) from None
            raise
        findings: list[Finding] = []
        with self._lock:
            self._scans.append(conn)
        batches = self._checkpoint_batches(conn, cutoff, findings, token)
        return Scan(token=token, full=not cutoff, checkpoints=batches, events=iter(events),
                    findings=findings, heads=heads)

    def _plan(self, cur: psycopg.Cursor[Any], since: str | None) -> tuple[str, str | None, bool]:
        """``(token, cutoff, events changed)``; cutoff None = unchanged, '' = full listing."""
        count, last_id, events = cur.execute(TOKEN_SQL).fetchone() or (0, None, 0)
        token = json.dumps({"v": TOKEN_VERSION, "checkpoints": [count, last_id], "events": events},
                           sort_keys=True)
        if since == token:
            return token, None, False
        previous = _parse_token(since)
        if previous is None or previous["checkpoints"][1] is None:
            return token, "", True
        (old_count, old_last), old_events = previous["checkpoints"], previous["events"]
        if last_id is None or last_id < old_last:
            return token, "", True
        added = cur.execute(ADDED_SQL, {"cutoff": old_last}).fetchone()[0]
        if count - added != old_count:
            return token, "", True
        return token, old_last, events != old_events

    def _checkpoint_batches(
        self, conn: psycopg.Connection[Any], cutoff: str, findings: list[Finding], token: str,
    ) -> Iterator[pa.Table]:
        """The listing's batches; a full listing then asks the structure checks for the
        whole store in its snapshot, for :meth:`listed_structure`."""
        sql = SCAN_SQL.format(blobs=BLOB_SIZES if self.blob_sizes else "0")
        self._listed, listed, skipped, orphans = None, 0, set(), None
        conns, structure = [conn], None
        try:
            parts, params, snapshot = (split_parts(conn, sql, self._scan_connection) if not cutoff
                                       else ([(conn, sql)], {}, None))
            conns = [part[0] for part in parts]
            side = in_snapshot(self._scan_connection, snapshot) if snapshot else None
            if side is not None:
                conns.append(side)
            parents, structure = self._beside_listing(side or conn, cutoff, side is not None)
            for rows in stream_rows(parts, {"cutoff": cutoff, **params}, BATCH_ROWS):
                if orphans is None:
                    orphans = _take_parents(parents(), findings)
                columns = list(zip(*rows))
                if not columns_ok(columns[KEY_COLUMNS]):  # the validation boundary: row by row on failure
                    valid = valid_rows(rows, findings, KEY_COLUMNS)
                    skipped |= {tuple(r[:3]) for r in rows} - {tuple(r[:3]) for r in valid}
                    if not valid:
                        continue
                    columns = list(zip(*valid))
                listed += len(columns[0])
                yield self._batch(columns, orphans, findings)
            if orphans is None:  # nothing listed: the parents' findings still count
                _take_parents(parents(), findings)
            if not cutoff:
                found = structure() if structure else self._store_structure(conn)
                if skipped:  # the rows the listing rejected have their finding already
                    found = [f for f in found if (f.run_id, f.namespace or "", f.checkpoint_id) not in skipped]
                self._listed = _Listed(token, listed, found)
        except psycopg.Error as exc:
            raise self._db_error(exc) from None
        finally:
            if structure is not None and self._listed is None:  # unwinding: let its queries end first
                with suppress(BaseException):
                    structure()
            with self._lock:
                self._scans = [c for c in self._scans if c not in conns and not c.closed]
            for used in conns:
                used.close()

    def _beside_listing(self, conn: psycopg.Connection[Any], cutoff: str, threaded: bool,
                        ) -> tuple[Callable[[], dict[Key, str]], Callable[[], list[Finding]] | None]:
        """The missing parents (waited for before the first batch) and, on a connection of
        its own, the whole-store structure check after them, in threads beside the listing.
        Without one (``threaded`` False) the parents are asked at once on the listing's
        connection, before it lists."""
        if not threaded:
            missing = _missing_parents(conn, cutoff)
            return (lambda: missing), None

        parents = in_thread(lambda: _missing_parents(conn, cutoff))

        def structure() -> list[Finding]:
            parents()  # the connection is free once the parents are in
            return self._store_structure(conn)

        return parents, in_thread(structure)

    def _scan_connection(self) -> psycopg.Connection[Any]:
        """Another read-only connection for the listing, closed by :meth:`close` too."""
        conn = connect_readonly(self.url)
        with self._lock:
            self._scans.append(conn)
        return conn

    def _store_structure(self, conn: psycopg.Connection[Any]) -> list[Finding]:
        """The structure findings of every checkpoint in ``conn``'s snapshot."""
        with conn.cursor() as cur:
            return self._structure(cur, (STORE_ROWS_SQL, STORE_BLOBS_SQL, STORE_WRITES_SQL))

    @staticmethod
    def _batch(columns: Sequence[Sequence[Any]], orphans: set[Key], findings: list[Finding]) -> pa.Table:
        threads, namespaces, ids, parents, metadata, sizes = columns
        parent_ok = ([(t, ns, c) not in orphans for t, ns, c in zip(threads, namespaces, ids)] if orphans
                     else [True] * len(ids))
        cols = CheckpointColumns(threads, namespaces, ids, parents, metadata, None, sizes, parent_ok)
        table, batch_findings = checkpoints_batch(cols)
        findings.extend(f for f in batch_findings if f.check != Check.PARENT_MISSING)
        return table

    def _event_tables(self, cur: psycopg.Cursor[Any]) -> list[pa.Table]:
        tables, events = [], []
        for row in cur.execute(EVENTS_SQL):
            event = event_record(*row, aes_key=self.aes_key)
            if event is not None:
                events.append(event)
            if len(events) >= EVENT_BATCH_ROWS:
                tables.append(events_table(events))
                events = []
        return tables + ([events_table(events)] if events else [])

    # one checkpoint ---------------------------------------------------------------------

    def _row(self, cur: psycopg.Cursor[Any], key: Key) -> tuple[Any, Any, str | None]:
        row = cur.execute(ROW_SQL, key).fetchone()
        if row is None:
            raise CheckpointNotFound(f"checkpoint {key[2]} of thread {key[0]!r} not found")
        return row[0], row[1], row[2]

    def _session(self) -> AbstractContextManager[psycopg.Cursor[Any]]:
        return self._read()

    def _checkpoint(self, session: psycopg.Cursor[Any], key: Key) -> tuple[Any, Any, str | None]:
        checkpoint, metadata, parent_id = self._row(session, key)
        return self._with_values(session, key, checkpoint), metadata, parent_id

    def _with_values(self, cur: psycopg.Cursor[Any], key: Key, checkpoint: Any) -> dict[str, Any]:
        """The checkpoint with ``channel_values`` = inline values + decoded blobs (as LangGraph merges them)."""
        if not isinstance(checkpoint, dict) or not all(
                isinstance(checkpoint.get(part, {}), dict) for part in ("channel_values", "channel_versions")):
            raise DecodeError(f"checkpoint {key[2]}: the checkpoint JSONB is not a LangGraph checkpoint "
                              "(channel_values/channel_versions are not objects)")
        values = dict(checkpoint.get("channel_values") or {})
        for channel, version, type_, blob in cur.execute(BLOBS_SQL, key):
            if type_ == "empty":
                continue
            try:
                values[channel] = decode_typed(type_, blob, aes_key=self.aes_key)
            except DecodeError as exc:
                raise DecodeError(f"checkpoint {key[2]}: channel {channel!r} (blob version {version}, "
                                  f"type {type_}): {exc}") from None
        return {**checkpoint, "channel_values": values}

    def read_blob(self, record: CheckpointRecord) -> bytes:
        """The row and its referenced blobs as one JSON document (see the module docstring)."""
        key = key_of(record)
        with self._read() as cur:
            checkpoint, metadata, parent_id = self._row(cur, key)
            blobs = [_blob_entry(*row) for row in cur.execute(BLOBS_SQL, key)]
        document = {"format": "langgraph-postgres", "thread_id": key[0], "checkpoint_ns": key[1],
                    "checkpoint_id": key[2], "parent_checkpoint_id": parent_id,
                    "checkpoint": checkpoint, "metadata": metadata,
                    "blobs": sorted(blobs, key=lambda b: (b["channel"], b["version"]))}
        return json.dumps(document, sort_keys=True, ensure_ascii=False, default=str).encode()

    def _task_path_rows(self, session: psycopg.Cursor[Any], run_ids: list[str]) -> list[tuple[Any, ...]]:
        if self._task_path == "''" or not run_ids:
            return []
        return session.execute("SELECT DISTINCT thread_id, checkpoint_ns, checkpoint_id, task_path "
                               "FROM checkpoint_writes WHERE thread_id = ANY(%s)", (run_ids,)).fetchall()

    def _write_rows(self, session: psycopg.Cursor[Any], key: Key) -> list[tuple[Any, ...]]:
        return session.execute(WRITES_SQL.format(task_path=self._task_path), key).fetchall()

    # integrity ----------------------------------------------------------------------------

    def _check_data(self, records: Iterable[CheckpointRecord], read_data: bool = True) -> Iterator[Finding]:
        chunk: list[CheckpointRecord] = []
        for record in records:
            chunk.append(record)
            if len(chunk) >= CHECK_CHUNK:
                yield from self._check_chunk(chunk, read_data)
                chunk = []
        if chunk:
            yield from self._check_chunk(chunk, read_data)

    def check_structure(self, keys: Sequence[Key]) -> list[Finding]:
        """Structure depth for ``keys``: three or four set-based queries, whatever their number."""
        keys = list(dict.fromkeys(keys))
        if not keys:
            return []
        arrays = [list(column) for column in zip(*keys)]
        with self._read() as cur:
            return self._structure(cur, (STRUCTURE_ROWS_SQL, STRUCTURE_BLOBS_SQL, STRUCTURE_WRITES_SQL), arrays)

    def listed_structure(self, token: str | None) -> tuple[int, list[Finding]] | None:
        """Structure findings for every checkpoint this reader's last full scan listed,
        with their number, when that scan made ``token``: asked once for the whole store
        in the listing's snapshot (see ``verify._record_listed``). None when no full
        scan of this reader made ``token`` (check with :meth:`check_structure`)."""
        listed = self._listed
        if listed is None or token is None or listed.token != token:
            return None
        return listed.count, listed.findings

    def _structure(self, cur: psycopg.Cursor[Any], sqls: tuple[str, str, str],
                   arrays: Sequence[Any] = ()) -> list[Finding]:
        """Findings of the rows, blobs and writes queries ``sqls`` (keyed by ``arrays``, if any)."""
        rows_sql, blobs_sql, writes_sql = (_known(sql) for sql in sqls)
        rows = cur.execute(rows_sql, arrays or None).fetchall()
        odd_blobs = cur.execute(_known(UNKNOWN_BLOB_CODECS_SQL)).fetchone()[0]
        blobs = cur.execute(blobs_sql, arrays or None).fetchall() if odd_blobs else []
        writes = cur.execute(writes_sql, arrays or None).fetchall()
        found: list[Finding] = []
        for thread, ns, cid, present, *shape in rows:
            found.extend(_row_findings((thread, ns, cid), shape if present else None))
        found.extend(self._blob_findings(blobs, False))
        for thread, ns, cid, task_id, channel, type_, idx, blob in writes:
            label = f"pending write {channel!r} (task {task_id}, idx {idx})"
            found.extend(codec_findings(type_, (thread, ns, cid), label))
            if channel == ERROR:  # a failed task is a structure finding too
                found.append(pending_error_finding(label, type_, blob, (thread, ns, cid), self.aes_key))
        return found

    def _check_chunk(self, records: list[CheckpointRecord], read_data: bool) -> list[Finding]:
        keys = list(dict.fromkeys(key_of(r) for r in records))
        arrays = [list(column) for column in zip(*keys)]
        with self._read() as cur:
            rows = {tuple(r[:3]): r[3:] for r in cur.execute(CHECK_ROWS_SQL, arrays)}
            blobs = cur.execute(CHECK_BLOBS_SQL, [read_data, *arrays]).fetchall()
            writes = cur.execute(CHECK_WRITES_SQL, [read_data, *arrays]).fetchall()
        found: list[Finding] = []
        for key in keys:
            found.extend(_row_findings(key, rows.get(key)))
        found.extend(self._blob_findings(blobs, read_data))
        for thread, ns, cid, task_id, channel, type_, idx, blob in writes:
            label = f"pending write {channel!r} (task {task_id}, idx {idx})"
            found.extend(self._payload_findings(label, type_, blob, (thread, ns, cid), read_data, channel))
            if channel == ERROR and not read_data:  # a failed task is a structure finding too
                found.append(pending_error_finding(label, type_, blob, (thread, ns, cid), self.aes_key))
        return found

    def _blob_findings(self, blobs: Sequence[tuple[Any, ...]], read_data: bool) -> Iterator[Finding]:
        """Each blob is checked once, however many checkpoints of the chunk share it."""
        checked: dict[tuple[Any, ...], list[Finding]] = {}
        for thread, ns, cid, channel, version, type_, blob in blobs:
            shared = (thread, ns, channel, version)
            if shared not in checked:
                label = f"channel {channel!r} (blob version {version})"
                checked[shared] = list(self._payload_findings(label, type_, blob, (thread, ns, cid), read_data))
            yield from (replace(f, checkpoint_id=cid) for f in checked[shared])

    def _payload_findings(
        self, label: str, type_: str | None, blob: bytes | None, where: Key, read_data: bool,
        channel: str | None = None,
    ) -> Iterator[Finding]:
        if read_data:
            yield from payload_findings(label, type_, blob, where, self.aes_key, None, channel)
        else:
            yield from codec_findings(type_, where, label)


# --- helpers -------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Listed:
    """What a full scan found at structure depth: its token, rows listed, findings."""

    token: str
    count: int
    findings: list[Finding]


def _known(sql: str) -> str:
    """``sql`` with ``$KNOWN`` as the list of codecs LangGraph writes."""
    return sql.replace("$KNOWN", KNOWN_CODECS_SQL)


def _missing_parents(conn: psycopg.Connection[Any], cutoff: str) -> dict[Key, str]:
    """Listed checkpoints (after ``cutoff``) whose parent row is not there -> the parent's id."""
    with conn.cursor() as cur:
        return {(t, ns, c): p for t, ns, c, p in cur.execute(MISSING_PARENTS_SQL, {"cutoff": cutoff})}


def _take_parents(missing: dict[Key, str], findings: list[Finding]) -> set[Key]:
    """Their findings put first in ``findings``; the keys whose parent is missing."""
    findings[:0] = [_parent_finding(key, parent) for key, parent in sorted(missing.items())]
    return set(missing)


def _parent_finding(key: Key, parent_id: str) -> Finding:
    """Worded like ``langgraph_common`` so the scan's row status and finding agree."""
    return Finding(Check.PARENT_MISSING, "error", f"parent checkpoint {parent_id} is missing", *key)


def _row_findings(key: Key, row: Sequence[Any] | None) -> Iterator[Finding]:
    if row is None:
        yield Finding(Check.MISSING, "error", "the checkpoint row no longer exists", *key)
        return
    values_type, versions_type, stored_id = row
    if values_type not in (None, "object") or versions_type not in (None, "object"):
        yield Finding(Check.UNDECODABLE, "error", "checkpoint JSONB: channel_values/channel_versions "
                      f"are {values_type}/{versions_type}, not objects", *key)
    if stored_id not in (None, key[2]):
        yield Finding(Check.ID_MISMATCH, "warning", f"checkpoint JSONB says id {stored_id}, the row {key[2]}", *key)


def _blob_entry(channel: str, version: str, type_: str | None, blob: bytes | None) -> dict[str, Any]:
    data = bytes(blob) if blob is not None else None
    return {"channel": channel, "version": version, "type": type_,
            "size": None if data is None else len(data),
            "sha256": None if data is None else hashlib.sha256(data).hexdigest(),
            "data_base64": None if data is None else base64.b64encode(data).decode("ascii")}


def _parse_token(token: str | None) -> dict[str, Any] | None:
    if not token:
        return None
    try:
        value = json.loads(token)
        count, last_id = value["checkpoints"]
        parsed = {"checkpoints": (int(count), last_id if isinstance(last_id, str) else None),
                  "events": int(value["events"])}
    except (ValueError, TypeError, KeyError):
        return None
    return parsed if value.get("v") == TOKEN_VERSION else None
