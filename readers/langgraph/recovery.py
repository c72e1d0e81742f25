"""Write capability of LangGraph SqliteSaver / PostgresSaver databases.

restore X = one new checkpoint row copied from X, whose parent is X's parent
(parent = the current head would give a wrong state on DeltaChannel threads),
with a new uuid6 id that sorts after every existing one (so LangGraph's
"latest" is the restored state), a fresh ``ts``, and metadata
``source="fork"``, ``step = max(head step, X step) + 1`` plus a note:
``restored_from``, ``restored_over`` and ``lastgood = {action_id, action,
operator, reason}``. Nothing is deleted or overwritten; X's pending writes are
not copied (like LangGraph's own ``update_state(..., as_node="__copy__")``, the
next run re-executes the tasks after X).

Journal: table ``lastgood_journal`` in the same database, created by the
first write action (reading never creates it) and written in the same
transaction as the new checkpoint, which first re-checks the expected head:

- SQLite: ``BEGIN IMMEDIATE`` (the database write lock) for the whole action;
- Postgres: ``LOCK TABLE checkpoints IN SHARE ROW EXCLUSIVE MODE`` — an agent's
  ``put`` (an INSERT) waits for the few milliseconds of the action, so its
  next checkpoint lands either before (the action then conflicts) or after.

Checkpoint payloads are rewritten at the msgpack level without interpreting
extension types (only the top-level ``id``/``ts`` change); JSONB in Postgres
with ``jsonb_set``. The post-apply check loads the head with LangGraph's own
saver using a strict serializer (allow-listed types only).
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Mapping, Sequence
from contextlib import closing
from datetime import UTC, datetime
from typing import Any

import msgpack

from lastgood.readers import journal as jr
from lastgood.errors import CheckpointNotFound, ConflictError, LastgoodError
from lastgood.readers.common import sqljournal
from lastgood.readers.langgraph.common import new_uuid6

TABLE = sqljournal.TABLE  # the journal table (retention names it too)
HEAD_SQL = ("SELECT max(checkpoint_id) FROM checkpoints WHERE thread_id = {p} AND checkpoint_ns = {p}")
ROW_SQL = ("SELECT type, checkpoint, metadata, parent_checkpoint_id FROM checkpoints "
           "WHERE thread_id = {p} AND checkpoint_ns = {p} AND checkpoint_id = {p}")


def _config(run_id: str, namespace: str, checkpoint_id: str | None = None) -> dict[str, Any]:
    conf = {"thread_id": run_id, "checkpoint_ns": namespace}
    if checkpoint_id:
        conf["checkpoint_id"] = checkpoint_id
    return {"configurable": conf}


def new_metadata(raw: Any, head_step: int | None, change: jr.Change, head: str | None) -> dict[str, Any]:
    """X's metadata with the fork note (step after both the head and X)."""
    meta = _as_dict(raw)
    steps = [s for s in (head_step, meta.get("step")) if isinstance(s, int)]
    entry = change.entry
    meta.update(source="fork", step=(max(steps) + 1) if steps else 0,
                restored_from=change.restore_from, restored_over=head,
                lastgood={"action_id": entry.get("id"), "action": entry.get("action"),
                          "operator": entry.get("operator"), "reason": entry.get("reason")})
    return meta


def _as_dict(raw: Any) -> dict[str, Any]:
    if isinstance(raw, dict):
        return dict(raw)
    if isinstance(raw, (bytes, bytearray, memoryview)):
        raw = bytes(raw).decode("utf-8", "replace")
    try:
        value = json.loads(raw) if raw else {}
    except (TypeError, json.JSONDecodeError):
        return {}
    return value if isinstance(value, dict) else {}


def rewrite_checkpoint(type_: str | None, blob: bytes, new_id: str, ts: str) -> bytes:
    """The serialized checkpoint with a new top-level ``id`` and ``ts``.

    msgpack: unpacked with extension types kept as opaque ``ExtType`` (nothing
    is imported or constructed) and packed again. Other encodings (encrypted,
    pickle) are copied as they are: their inner id stays X's.
    """
    if type_ == "msgpack":
        value = msgpack.unpackb(blob, raw=False, strict_map_key=False, use_list=True)
        if isinstance(value, dict):
            value["id"], value["ts"] = new_id, ts
            return msgpack.packb(value, use_bin_type=True)
    if type_ == "json":
        value = json.loads(blob)
        if isinstance(value, dict):
            value["id"], value["ts"] = new_id, ts
            return json.dumps(value).encode()
    return blob


def _values_equal(saver: Any, run_id: str, namespace: str, target_id: str,
                  written: str | None = None) -> jr.HeadCheck:
    """The checkpoint the action wrote (``written``; else the thread's latest) against the target, both
    read through the saver: an agent writing after the commit does not make a correct restore fail."""
    head = saver.get_tuple(_config(run_id, namespace, written))
    target = saver.get_tuple(_config(run_id, namespace, target_id))
    if head is None or target is None:
        return jr.HeadCheck(False, "get_tuple found no head or no target")
    if head.checkpoint["channel_values"] != target.checkpoint["channel_values"]:
        return jr.HeadCheck(False, f"{type(saver).__name__}.get_tuple: the head's values differ "
                                   "from the target's")
    return jr.HeadCheck(True, f"{type(saver).__name__}.get_tuple returns the target's values "
                              f"(head {head.config['configurable']['checkpoint_id']})")


def _check_with_reader(url: str, run_id: str, namespace: str, target_id: str, missing: str,
                       written: str | None = None) -> jr.HeadCheck:
    """Without LangGraph installed: compare head and target through Lastgood's own (safe) reader."""
    from lastgood.readers.base import CheckpointRecord
    from lastgood.readers.registry import open_reader

    reader = open_reader(url)
    try:
        head = written or _latest(url, run_id, namespace)
        states = [reader.load_state(CheckpointRecord(run_id=run_id, namespace=namespace, checkpoint_id=c))
                  for c in (head, target_id)]
    except LastgoodError as exc:
        return jr.HeadCheck(False, f"the new head does not load: {exc}")
    finally:
        reader.close()
    if states[0] != states[1]:
        return jr.HeadCheck(False, "the head's values differ from the target's (Lastgood's reader)")
    return jr.HeadCheck(True, f"the head holds the target's values (checked with Lastgood's reader: "
                              f"{missing} is not installed)")


def _latest(url: str, run_id: str, namespace: str) -> str | None:
    backend = PostgresRecovery(url) if url.startswith(("postgresql://", "postgres://")) else SqliteRecovery(url)
    return backend.head(run_id, namespace)


def _strict_serde() -> Any:
    from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

    return JsonPlusSerializer(allowed_msgpack_modules=None)


class _Base(sqljournal.SqlJournal):
    """Shared flow; subclasses give the connection, placeholder and table DDL."""

    placeholder = "?"
    written: dict[tuple[str, str], str | None]  # the checkpoint each committed action wrote, by thread

    def _insert_copy(self, conn: Any, change: jr.Change, head: str | None) -> str:
        p = self.placeholder
        key = (change.run_id, change.namespace)
        row = conn.execute(ROW_SQL.format(p=p), (*key, change.restore_from)).fetchone()
        if row is None:
            raise CheckpointNotFound(f"checkpoint {change.restore_from} of thread {change.run_id!r} "
                                     "is not in the database")
        head_step = None
        if head:
            head_row = conn.execute(ROW_SQL.format(p=p), (*key, head)).fetchone()
            head_step = _as_dict(head_row[2]).get("step") if head_row else None
        meta = new_metadata(row[2], head_step, change, head)
        new_id = new_uuid6(clock_seq=meta["step"] if meta["step"] >= 0 else None)
        if head is not None and new_id <= head:
            raise ConflictError(f"the head {head} sorts after a new id (clock behind?); nothing written")
        ts = datetime.now(UTC).isoformat()
        self._insert_row(conn, change, row, new_id, ts, meta)
        return new_id

    def _append(self, conn: Any, entry: Mapping[str, Any], new_head: str | None) -> dict[str, Any]:
        return sqljournal.append(conn, entry, new_head, self.placeholder)

    def _commit_in(self, conn: Any, change: jr.Change) -> dict[str, Any]:
        p = self.placeholder
        head = conn.execute(HEAD_SQL.format(p=p), (change.run_id, change.namespace)).fetchone()[0]
        if head != change.expected_head:
            raise ConflictError(
                f"the head of thread {change.run_id!r} moved: expected {change.expected_head}, found "
                f"{head}; nothing was written — re-plan and try again")
        new_head = self._insert_copy(conn, change, head) if change.restore_from else head
        sealed = self._append(conn, change.entry, new_head)
        self.written[(change.run_id, change.namespace)] = new_head  # what check_head reads back
        return sealed

    def side_effects(self, run_id: str, namespace: str, after: Sequence[str]) -> list[dict[str, Any]]:
        return []  # from the reader's pending writes (lastgood.recovery.effects)

    def pending(self) -> list[dict[str, Any]]:
        """A recovery action is one database transaction (never half done); a prune or its undo runs
        in batches: those a crash interrupted (lastgood.readers.langgraph.retention)."""
        from lastgood.readers.langgraph.retention_progress import PROGRESS, read_pending

        with closing(self._read()) as conn:
            return read_pending(conn) if self._table_exists(conn, PROGRESS) else []

    def _table_exists(self, conn: Any, name: str) -> bool:
        raise NotImplementedError

    def head(self, run_id: str, namespace: str = "") -> str | None:
        with closing(self._read()) as conn:
            return conn.execute(HEAD_SQL.format(p=self.placeholder), (run_id, namespace)).fetchone()[0]


class SqliteRecovery(_Base):
    """``RecoveryBackend`` for a SqliteSaver file."""

    placeholder = "?"

    def _table_exists(self, conn: Any, name: str) -> bool:
        return sqljournal.sqlite_exists(conn, name)

    def __init__(self, url: str, storage_options: Mapping[str, Any] | None = None) -> None:
        from lastgood.readers.common.sqlite import sqlite_path

        self.url = url
        self.path = sqlite_path(url)
        self.written = {}

    def _read(self) -> sqlite3.Connection:
        from lastgood.readers.common.sqlite import connect_readonly

        return connect_readonly(self.path)

    def _journal_exists(self, conn: Any) -> bool:
        return sqljournal.sqlite_exists(conn)

    def _transaction(self, body: Any) -> dict[str, Any]:
        return sqljournal.sqlite_transaction(self.path, body, errors=sqlite3.OperationalError)

    def _insert_row(self, conn: Any, change: jr.Change, row: tuple[Any, ...], new_id: str, ts: str,
                    meta: dict[str, Any]) -> None:
        type_, blob, _meta, parent = row
        conn.execute("""INSERT INTO checkpoints (thread_id, checkpoint_ns, checkpoint_id,
            parent_checkpoint_id, type, checkpoint, metadata) VALUES (?, ?, ?, ?, ?, ?, ?)""",
                     (change.run_id, change.namespace, new_id, parent, type_,
                      rewrite_checkpoint(type_, bytes(blob), new_id, ts),
                      json.dumps(meta, ensure_ascii=False).encode()))

    def check_head(self, run_id: str, namespace: str, target_id: str, expected_state: Any) -> jr.HeadCheck:
        try:
            from langgraph.checkpoint.sqlite import SqliteSaver
        except ImportError:
            return _check_with_reader(self.url, run_id, namespace, target_id, "langgraph-checkpoint-sqlite",
                                      self.written.get((run_id, namespace)))
        try:
            with closing(sqlite3.connect(str(self.path), check_same_thread=False)) as conn:
                return _values_equal(SqliteSaver(conn, serde=_strict_serde()), run_id, namespace,
                                     target_id, self.written.get((run_id, namespace)))
        except (sqlite3.Error, LastgoodError, ValueError, TypeError) as exc:
            return jr.HeadCheck(False, f"SqliteSaver.get_tuple failed: {exc}")


class PostgresRecovery(_Base):
    """``RecoveryBackend`` for a PostgresSaver database."""

    placeholder = "%s"

    def _table_exists(self, conn: Any, name: str) -> bool:
        return sqljournal.postgres_exists(conn, name)

    def __init__(self, url: str, storage_options: Mapping[str, Any] | None = None) -> None:
        self.url = url
        self.written = {}

    def _read(self) -> Any:
        from lastgood.readers.common.postgres import connect_readonly

        return connect_readonly(self.url)

    def _journal_exists(self, conn: Any) -> bool:
        return sqljournal.postgres_exists(conn)

    def _transaction(self, body: Any) -> dict[str, Any]:
        return sqljournal.postgres_transaction(sqljournal.postgres_connect(self.url), body, _lock_checkpoints)

    def _insert_row(self, conn: Any, change: jr.Change, row: tuple[Any, ...], new_id: str, ts: str,
                    meta: dict[str, Any]) -> None:
        from psycopg.types.json import Jsonb

        conn.execute("""INSERT INTO checkpoints (thread_id, checkpoint_ns, checkpoint_id,
            parent_checkpoint_id, type, checkpoint, metadata)
            SELECT thread_id, checkpoint_ns, %s, parent_checkpoint_id, type,
                   jsonb_set(jsonb_set(checkpoint, '{id}', to_jsonb(%s::text)), '{ts}', to_jsonb(%s::text)),
                   %s
            FROM checkpoints WHERE thread_id = %s AND checkpoint_ns = %s AND checkpoint_id = %s""",
                     (new_id, new_id, ts, Jsonb(meta), change.run_id, change.namespace,
                      change.restore_from))

    def check_head(self, run_id: str, namespace: str, target_id: str, expected_state: Any) -> jr.HeadCheck:
        import psycopg
        from psycopg.rows import dict_row

        try:
            from langgraph.checkpoint.postgres import PostgresSaver
        except ImportError:
            return _check_with_reader(self.url, run_id, namespace, target_id, "langgraph-checkpoint-postgres",
                                      self.written.get((run_id, namespace)))

        try:
            with psycopg.connect(self.url, autocommit=True, prepare_threshold=0,
                                 row_factory=dict_row) as conn:
                return _values_equal(PostgresSaver(conn, serde=_strict_serde()), run_id, namespace,
                                     target_id, self.written.get((run_id, namespace)))
        except (psycopg.Error, LastgoodError, ValueError, TypeError) as exc:
            return jr.HeadCheck(False, f"PostgresSaver.get_tuple failed: {str(exc).splitlines()[0]}")


def _lock_checkpoints(conn: Any) -> None:
    """An agent's ``put`` (an INSERT) waits for the few milliseconds of the action."""
    conn.execute("LOCK TABLE checkpoints IN SHARE ROW EXCLUSIVE MODE")
    conn.execute(sqljournal.POSTGRES_DDL)
