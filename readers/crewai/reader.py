"""Reader for CrewAI Flows ``SQLiteFlowPersistence`` databases (see the package docstring).

Reading never writes: every query goes through ``common.sqlite.connect_readonly`` (``mode=ro``,
``immutable`` when no writer's ``-wal`` is beside the file), and a scan reads in one transaction
so its queries agree. The scan token remembers the last row id, the row count, the
``pending_feedback`` rows and the flow shape learnt (:mod:`.shape`): a refresh lists only the
rows added since, unless what it learnt changes the events of rows listed before (a run that
was "ended early" went on, a method turned out not to be final, a pause was answered) — then
the whole store is listed again, which is one SQL pass.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
import threading
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import closing
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lastgood import limits
from lastgood.checks import Check
from lastgood.errors import CheckpointNotFound, DecodeError
from lastgood.readers.base import CheckpointRecord, Finding, Reader, Scan, backend_named
from lastgood.readers.common import validate
from lastgood.readers.common.sqlite import connect_readonly, sqlite_path, sqlite_schema
from lastgood.readers.crewai import listing as ls
from lastgood.readers.crewai import shape as sh
from lastgood.readers.common.columns import checkpoints_table, events_table

if TYPE_CHECKING:
    from lastgood.readers.journal import RecoveryBackend, RetentionBackend

TOKEN_PREFIX = "crewai-flows:1:"
REQUIRED = frozenset({"id", "flow_uuid", "method_name", "timestamp", "state_json"})
PENDING_SQL = "SELECT id, flow_uuid, CAST(context_json AS BLOB) FROM pending_feedback ORDER BY id"
PAUSE_SQL = "SELECT max(id) FROM flow_states WHERE flow_uuid = ? AND method_name = ?"
LAST_SQL = "SELECT max(id) FROM flow_states WHERE flow_uuid = ?"
TAILS_SQL = """SELECT f.flow_uuid, c.n, f.id, f.method_name, f.timestamp FROM (
    SELECT flow_uuid, count(*) AS n, max(id) AS last FROM flow_states
    WHERE id <= ? AND flow_uuid IN (SELECT value FROM json_each(?)) GROUP BY flow_uuid) c
  JOIN flow_states f ON f.id = c.last"""
JOURNAL_SQL = "SELECT entry FROM lastgood_journal ORDER BY seq"
STRUCTURE_SQL = """WITH k(id) AS (SELECT value FROM json_each(?))
SELECT k.id, f.flow_uuid, f.id IS NOT NULL, CASE WHEN f.id IS NULL THEN 1 ELSE json_valid(f.state_json) END
FROM k LEFT JOIN flow_states f ON f.id = k.id"""


class CrewAIFlowsReader(Reader):
    """``flow_states`` rows as checkpoints: one run per ``flow_uuid``."""

    name = "crewai-flows"
    description = ("CrewAI Flows persisted with @persist (SQLiteFlowPersistence): a run per flow_uuid, "
                   "a checkpoint per flow_states row")

    def __init__(self, url: str, storage_options: Mapping[str, Any] | None = None) -> None:
        super().__init__(url, storage_options)
        self.path = sqlite_path(url)
        self._conn: sqlite3.Connection | None = None
        self._conn_stamp: tuple[int, ...] | None = None
        self._lock = threading.Lock()

    @classmethod
    def sniff(cls, url: str, storage_options: Mapping[str, Any] | None = None) -> bool:
        schema = sqlite_schema(url)
        return bool(schema) and REQUIRED <= schema.get("flow_states", frozenset())

    # ---- listing ----------------------------------------------------------------------

    def scan(self, since: str | None = None) -> Scan:
        with closing(connect_readonly(self.path)) as conn:
            conn.execute("BEGIN")  # one snapshot for every query of the scan
            try:
                return self._scan(conn, since)
            finally:
                conn.execute("ROLLBACK")

    def _scan(self, conn: sqlite3.Connection, since: str | None) -> Scan:
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        count, top = conn.execute("SELECT count(*), coalesce(max(id), 0) FROM flow_states").fetchone()
        pending = self._pending_rows(conn, tables)
        facts = {"max": top, "count": count, "pending": _digest(pending)}
        old = _parse_token(since)
        if old is not None and old["max"] == top and old["count"] == count and old["pending"] == facts["pending"]:
            return Scan(token=since or "", full=False, checkpoints=iter(()))
        if old is not None and old["pending"] == facts["pending"] and old["max"] < top:
            found = self._incremental(conn, old, facts, pending, tables)
            if found is not None:
                return found
        return self._full(conn, facts, pending, tables)

    def _full(self, conn: sqlite3.Connection, facts: dict[str, Any], pending: list[tuple[Any, ...]],
              tables: set[str]) -> Scan:
        findings: list[Finding] = []
        rows = conn.execute(ls.LIST_SQL, (0,)).fetchall()
        lister = ls.Lister(sh.FlowShape(), self._pauses(conn, pending, findings), self._journal(conn, tables),
                           self._confirmer(conn))
        lister.learn_starts(rows)
        lister.build(rows)
        lister.finish()
        return self._result(lister, findings, facts, full=True)

    def _incremental(self, conn: sqlite3.Connection, old: dict[str, Any], facts: dict[str, Any],
                     pending: list[tuple[Any, ...]], tables: set[str]) -> Scan | None:
        """Only the rows after the token's, or None when rows listed before must be listed again."""
        before = conn.execute("SELECT count(*) FROM flow_states WHERE id <= ?", (old["max"],)).fetchone()[0]
        if before != old["count"]:
            return None  # rows were deleted or rewritten
        rows = conn.execute(ls.LIST_SQL, (old["max"],)).fetchall()
        tails = self._tails(conn, list({r[1] for r in rows if isinstance(r[1], str)}), old["max"])
        known: sh.FlowShape = old["shape"]
        pauses = self._pauses(conn, pending, [])
        lister = ls.Lister(known.copy(), pauses, self._journal(conn, tables), self._confirmer(conn), tails)
        lister.learn_starts(rows)
        if lister.shape.starts != known.starts:
            return None  # restarts of listed rows may read differently
        lister.build(rows)
        finals = lister.shape.finals
        if finals != known.finals:
            return None  # "ended early" of runs not touched may change
        paused = {rid for rid, _p in pauses.values()}
        for uuid, tail in tails.items():
            was = sh.stopped_here(tail.method, None, finals, tail.last_id in paused)
            if was != sh.stopped_here(tail.method, lister.first_kinds.get(uuid), finals, tail.last_id in paused):
                return None  # a run listed as ended early went on
        lister.finish()
        return self._result(lister, [], facts, full=False)

    def _result(self, lister: ls.Lister, findings: list[Finding], facts: dict[str, Any], full: bool) -> Scan:
        batch = lister.batch
        token = TOKEN_PREFIX + json.dumps({**facts, "shape": lister.shape.to_json()}, sort_keys=True)
        tables = [checkpoints_table(batch.columns)] if batch.columns["checkpoint_id"] else []
        events = [events_table(batch.events)] if batch.events else []
        return Scan(token=token, full=full, checkpoints=iter(tables), events=iter(events),
                    findings=findings + batch.findings, heads=ls.heads_of(batch.tails))

    def _tails(self, conn: sqlite3.Connection, uuids: list[str], upto: int) -> dict[str, ls.Tail]:
        if not uuids:
            return {}
        rows = conn.execute(TAILS_SQL, (upto, json.dumps(uuids))).fetchall()
        return {u: ls.Tail(n, rid, m if isinstance(m, str) else str(m), ls.micros_of(t)) for u, n, rid, m, t in rows}

    def _pending_rows(self, conn: sqlite3.Connection, tables: set[str]) -> list[tuple[Any, ...]]:
        if "pending_feedback" not in tables:
            return []
        return conn.execute(PENDING_SQL).fetchall()

    def _pauses(self, conn: sqlite3.Connection, pending: list[tuple[Any, ...]], findings: list[Finding]
                ) -> dict[str, tuple[int, sh.Pending]]:
        """Each paused flow's pause row (the latest row of the paused method) and its question."""
        pauses: dict[str, tuple[int, sh.Pending]] = {}
        for row_id, uuid, context in pending:
            if not isinstance(uuid, str):
                continue
            ctx, problem = _context(context)
            method = ctx.get("method_name") if isinstance(ctx.get("method_name"), str) else None
            message = ctx.get("message") if isinstance(ctx.get("message"), str) else None
            pause = conn.execute(PAUSE_SQL, (uuid, method)).fetchone()[0] if method else None
            pause = pause or conn.execute(LAST_SQL, (uuid,)).fetchone()[0]
            if pause is None:
                findings.append(Finding(Check.ROW_INVALID, "warning", f"pending_feedback row {row_id} "
                                        "waits for feedback on a flow with no flow_states rows", uuid))
                continue
            if problem:
                findings.append(Finding(Check.ROW_INVALID, "warning", f"pending_feedback row {row_id}: "
                                        f"{problem}: Flow.from_pending cannot resume it", uuid, "", str(pause)))
            pauses[uuid] = (pause, sh.Pending(uuid, method, message, row_id))
        return pauses

    def _journal(self, conn: sqlite3.Connection, tables: set[str]) -> dict[int, dict[str, Any]]:
        """Lastgood's journal entries by the row they appended (``new_head``)."""
        if "lastgood_journal" not in tables:
            return {}
        out = {}
        for (text,) in conn.execute(JOURNAL_SQL):
            entry = _json_object(text)
            head = entry.get("new_head") if entry else None
            if isinstance(head, str) and head.isdigit() and head != entry.get("previous_head"):
                out[int(head)] = entry
        return out

    def _confirmer(self, conn: sqlite3.Connection) -> Any:
        def confirm(row: ls.Row) -> Any:
            found = conn.execute(ls.STATE_SQL, (row[0],)).fetchone()
            return ls.judge_state(found[1], row[1]) if found else (Check.MISSING, "the row is gone")
        return confirm

    # ---- one checkpoint ---------------------------------------------------------------

    def _connection(self) -> sqlite3.Connection:
        """A read-only connection, opened again when the file changed (an ``immutable`` one
        would not see rows written since)."""
        stamp = _file_stamp(self.path)
        if self._conn is None or stamp != self._conn_stamp:
            if self._conn is not None:
                self._conn.close()
            self._conn, self._conn_stamp = connect_readonly(self.path), stamp
        return self._conn

    def _row(self, record: CheckpointRecord) -> tuple[str, bytes]:
        if not record.checkpoint_id.isdigit():
            raise CheckpointNotFound(f"{record.checkpoint_id!r} is not a flow_states row id")
        with self._lock:
            found = self._connection().execute(ls.STATE_SQL, (int(record.checkpoint_id),)).fetchone()
        if found is None or found[0] != record.run_id:
            raise CheckpointNotFound(f"flow_states row {record.checkpoint_id} of flow {record.run_id} is gone")
        data = found[1]
        return found[0], bytes(data) if data is not None else b""

    def read_blob(self, record: CheckpointRecord) -> bytes:
        return self._row(record)[1]

    def load_state(self, record: CheckpointRecord) -> Any:
        """The row's ``state_json`` parsed, as ``SQLiteFlowPersistence.load_state`` returns it."""
        uuid, data = self._row(record)
        if len(data) > limits.MAX_BLOB_BYTES:
            raise DecodeError(f"state_json is {len(data)} bytes (limit {limits.MAX_BLOB_BYTES})", Check.TOO_LARGE)
        try:
            value = ls.parse_state(data)
            validate.check_state(value, "state_json", encoded_bytes=len(data), cost_per_byte=1)
        except (ValueError, UnicodeDecodeError) as exc:
            check = exc.check if isinstance(exc, validate.Invalid) else Check.UNDECODABLE
            raise DecodeError(f"state_json is not valid JSON ({exc})" if check == Check.UNDECODABLE
                              else str(exc), check) from None
        except RecursionError:
            raise DecodeError("state_json is nested too deeply", Check.TOO_DEEP) from None
        if not isinstance(value, dict):
            raise DecodeError(f"state_json is a JSON {type(value).__name__}, not an object")
        return value

    # ---- integrity ----------------------------------------------------------------------

    def check_checkpoints(self, records: Iterable[CheckpointRecord], read_data: bool = False
                          ) -> Iterator[Finding]:
        """Structure: the rows exist in their run and hold valid JSON (SQLite's ``json_valid``,
        confirmed with Python's ``json`` where it says no). Data: every state parsed as CrewAI
        parses it, an object whose ``id`` is the flow's uuid."""
        records = list(records)
        if not read_data:
            yield from self._structure(records)
            return
        for record in records:
            try:
                uuid, data = self._row(record)
            except CheckpointNotFound as exc:
                yield _finding(record, Check.MISSING, str(exc))
                continue
            problem = ls.judge_state(data, uuid)
            if problem is None:
                try:
                    self.load_state(record)
                except DecodeError as exc:
                    problem = (exc.check, str(exc))
            if problem is not None:
                yield _finding(record, *problem)

    def _structure(self, records: Sequence[CheckpointRecord]) -> Iterator[Finding]:
        by_id = {int(r.checkpoint_id): r for r in records if r.checkpoint_id.isdigit()}
        for record in records:
            if not record.checkpoint_id.isdigit():
                yield _finding(record, Check.MISSING, f"{record.checkpoint_id!r} is not a flow_states row id")
        if not by_id:
            return
        with self._lock:
            rows = self._connection().execute(STRUCTURE_SQL, (json.dumps(list(by_id)),)).fetchall()
        for rid, uuid, exists, valid in rows:
            record = by_id[int(rid)]
            if not exists or uuid != record.run_id:
                yield _finding(record, Check.MISSING, f"flow_states row {rid} of flow {record.run_id} is gone")
            elif not valid:
                problem = ls.judge_state(self._row(record)[1], record.run_id)
                if problem is not None and problem[0] != Check.ID_MISMATCH:
                    yield _finding(record, *problem)

    # ---- capabilities ---------------------------------------------------------------------

    def recovery(self) -> RecoveryBackend:
        return backend_named("lastgood.readers.crewai.recovery:CrewAIRecovery", self)

    def retention(self) -> RetentionBackend:
        """Prune: whole stale flows, archived, then deleted (:mod:`.retention`)."""
        return backend_named("lastgood.readers.crewai.retention:FlowRetention", self)  # type: ignore[return-value]

    def close(self) -> None:
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None


def _finding(record: CheckpointRecord, check: Check, message: str) -> Finding:
    return Finding(check, "error", message, record.run_id, record.namespace, record.checkpoint_id)


def _file_stamp(path: Path) -> tuple[int, ...]:
    out: list[int] = []
    for p in (path, Path(f"{path}-wal")):
        try:
            info = p.stat()
            out += [info.st_mtime_ns, info.st_size, info.st_ino]
        except OSError:
            out += [0, 0, 0]
    return tuple(out)


def _digest(rows: list[tuple[Any, ...]]) -> str:
    text = ";".join(f"{r[0]}:{r[1]}" for r in rows)
    return hashlib.sha256(text.encode("utf-8", "replace")).hexdigest()[:32]


def _parse_token(token: str | None) -> dict[str, Any] | None:
    if not token or not token.startswith(TOKEN_PREFIX):
        return None
    value = _json_object(token[len(TOKEN_PREFIX):])
    if value is None or not all(isinstance(value.get(k), int) for k in ("max", "count")):
        return None
    shape = sh.FlowShape.from_json(value.get("shape"))
    if shape is None or not isinstance(value.get("pending"), str):
        return None
    return {**value, "shape": shape}


def _json_object(text: Any) -> dict[str, Any] | None:
    try:
        value = json.loads(text)
    except (TypeError, ValueError, RecursionError):
        return None
    return value if isinstance(value, dict) else None


def _context(raw: Any) -> tuple[dict[str, Any], str | None]:
    """A ``pending_feedback.context_json`` and what is wrong with it."""
    data = bytes(raw) if isinstance(raw, (bytes, memoryview)) else raw
    if isinstance(data, (bytes, str)) and len(data) > limits.MAX_LINE_BYTES:
        return {}, f"context_json is larger than {limits.MAX_LINE_BYTES} bytes"
    value = _json_object(data)
    if value is None:
        return {}, "context_json is not a JSON object"
    return value, None
