"""Write capability of ADK ``DatabaseSessionService`` databases: restore = a rewind, as ADK does it.

``Runner.rewind_async(rewind_before_invocation_id=INV)`` deletes nothing: it appends ONE event
(author ``user``, a fresh invocation id) whose ``actions.rewind_before_invocation_id`` is INV and
whose ``actions.state_delta`` puts the session-scoped keys back as they were before INV's first
event (changed keys get their old value, keys added since get null; ``app:``/``user:``/``temp:``
keys are never rewound), through the normal ``append_event`` (so ``sessions.state`` and
``sessions.update_time`` change as for any event). ADK then leaves every event from INV's first
one up to the rewind event out of every later prompt (``_apply_rewinds``).

Restoring event X appends exactly that (see :func:`lastgood.readers.adk.replay.plan_rewind`):

- X is the last event of its invocation: one rewind event naming the invocation that follows X
  (ADK's own operation, on the same terms); this also brings back events an earlier rewind
  dropped, when X is one of them (an undo);
- X is inside an invocation (ADK cannot cut one in two): the rewind names X's own invocation,
  then copies of that invocation's live events up to X follow (new event ids, one new invocation
  id, same author/content/actions; session-scoped state deltas only — ``app:``/``user:`` writes
  were applied once and are not repeated); each copy carries
  ``custom_metadata.lastgood.copy_of`` = the original event id.

One difference from ``rewind_async``: keys the session was created with (``create_session(state=…)``,
in no event) and that no event ever changed keep their value, where ``rewind_async`` sets them to
null (it replays events only; the sample's ``"channel": "console"`` became null).

Appended events carry ``custom_metadata.lastgood = {action_id, action, restored_from,
restored_over}``; timestamps are now, or 1 ms after the session's last event when the clock is
behind it (ADK orders by timestamp). Undo is a restore of the previous head: another appended
rewind event, which drops the restore's events again (the session resumes from the old head,
its state back as it was). Nothing is ever deleted or overwritten.

All in one transaction with the journal entry (``lastgood_journal`` in the same database), after
re-checking that the session's latest event (ADK's ``ORDER BY timestamp DESC, id DESC``) is the
expected head: SQLite ``BEGIN IMMEDIATE``; PostgreSQL ``SELECT … FOR UPDATE`` on the sessions row
(what ``append_event`` locks there). A process holding the session loaded before the restore
gets ADK's ``StaleSessionError`` on its next append (``sessions.update_time`` moved) and reloads.
"""

from __future__ import annotations

import json
import sqlite3
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from contextlib import closing
from datetime import UTC, datetime
from typing import Any

from lastgood.errors import CheckpointNotFound, ConflictError, LastgoodError, ReaderError
from lastgood.readers import journal as jr
from lastgood.readers.common import sqljournal
from lastgood.readers.adk.replay import RewindPlan, SessionData, is_session_key, plan_rewind

SessionKey = tuple[str, str, str]
STEP_US = 1000  # appended events are 1 ms apart (ADK orders by timestamp)


def _ts_micros(value: Any) -> int:
    """Epoch microseconds of a timestamp column value (naive UTC text or datetime)."""
    if isinstance(value, str):
        value = datetime.fromisoformat(value)
    if isinstance(value, datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=UTC)
        delta = value - datetime(1970, 1, 1, tzinfo=UTC)
        return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds
    return int(float(value) * 1_000_000)


def naive_utc(micros: int) -> datetime:
    return datetime.fromtimestamp(micros // 1_000_000, UTC).replace(microsecond=micros % 1_000_000, tzinfo=None)


def rewind_event(plan: RewindPlan, note: Mapping[str, Any], micros: int) -> dict[str, Any]:
    """The rewind event as ``rewind_async`` writes it (``Event.model_dump(mode="json",
    exclude_none=True)`` field order), plus Lastgood's note in ``custom_metadata``."""
    return {"custom_metadata": {"lastgood": dict(note)}, "invocation_id": f"e-{uuid.uuid4()}", "author": "user",
            "actions": {"state_delta": plan.state_delta, "artifact_delta": {}, "requested_auth_configs": {},
                        "requested_tool_confirmations": {}, "rewind_before_invocation_id": plan.rewind_before},
            "node_info": {"path": ""}, "id": str(uuid.uuid4()), "timestamp": micros / 1_000_000}


def copied_event(original: Mapping[str, Any], delta: Mapping[str, Any], invocation_id: str,
                 note: Mapping[str, Any], micros: int) -> dict[str, Any]:
    """A copy of a stored event: new id, invocation id and timestamp, session-scoped delta only."""
    event = {k: v for k, v in original.items() if k not in ("id", "invocation_id", "timestamp")}
    custom = dict(original.get("custom_metadata") or {}) if isinstance(original.get("custom_metadata"), dict) else {}
    custom["lastgood"] = {**note, "copy_of": original.get("id")}
    actions = dict(original.get("actions") or {}) if isinstance(original.get("actions"), dict) else {}
    actions["state_delta"] = dict(delta)
    actions.pop("rewind_before_invocation_id", None)
    return {"custom_metadata": custom, **{k: v for k, v in event.items() if k != "custom_metadata"},
            "actions": actions, "invocation_id": invocation_id, "id": str(uuid.uuid4()),
            "timestamp": micros / 1_000_000}


class _Base(sqljournal.SqlJournal):
    """The shared flow; a dialect gives connections, SQL and the session reads."""

    placeholder = "?"
    reader_name = ""

    def __init__(self, url: str, storage_options: Mapping[str, Any] | None = None) -> None:
        self.url = url

    # ---- what a dialect provides ---------------------------------------------------------------
    def _find(self, conn: Any, run_id: str) -> list[SessionKey]:
        raise NotImplementedError

    def _session(self, conn: Any, key: SessionKey) -> SessionData:
        raise NotImplementedError

    def _lock_session(self, conn: Any, key: SessionKey) -> None:
        """Hold the session against ADK's appends until the transaction ends."""

    def _insert(self, conn: Any, key: SessionKey, event: dict[str, Any], micros: int) -> None:
        raise NotImplementedError

    def _update_session(self, conn: Any, key: SessionKey, state: dict[str, Any], micros: int) -> None:
        raise NotImplementedError

    def _raw_events(self, conn: Any, key: SessionKey, ids: Sequence[str]) -> dict[str, dict[str, Any]]:
        raise NotImplementedError

    # ---- the flow ------------------------------------------------------------------------------
    def _key(self, conn: Any, run_id: str) -> SessionKey:
        found = self._find(conn, run_id)
        if len(found) != 1:
            raise CheckpointNotFound(f"no ADK session {run_id!r}" if not found
                                     else f"session id {run_id!r} exists for several apps/users")
        return found[0]

    def _head(self, conn: Any, key: SessionKey) -> tuple[str | None, int | None]:
        p = self.placeholder
        row = conn.execute(f"""SELECT id, timestamp FROM events WHERE app_name = {p} AND user_id = {p}
            AND session_id = {p} ORDER BY timestamp DESC, id DESC LIMIT 1""", key).fetchone()
        return (row[0], _ts_micros(row[1])) if row else (None, None)

    def head(self, run_id: str, namespace: str = "") -> str | None:
        with closing(self._read()) as conn:
            try:
                return self._head(conn, self._key(conn, run_id))[0]
            except CheckpointNotFound:
                return None

    def _commit_in(self, conn: Any, change: jr.Change) -> dict[str, Any]:
        key = self._key(conn, change.run_id)
        self._lock_session(conn, key)
        head, head_us = self._head(conn, key)
        if head != change.expected_head:
            raise ConflictError(f"the latest event of session {change.run_id!r} moved: expected "
                                f"{change.expected_head}, found {head}; nothing was written — re-plan and try again")
        new_head = head
        if change.restore_from and change.restore_from != head:
            new_head = self._rewind(conn, key, change, head, head_us or 0)
        return sqljournal.append(conn, change.entry, new_head, self.placeholder)

    def _rewind(self, conn: Any, key: SessionKey, change: jr.Change, head: str | None, head_us: int) -> str:
        data = self._session(conn, key)
        position = data.index.get(str(change.restore_from))
        if position is None:
            raise CheckpointNotFound(f"event {change.restore_from} is not in session {change.run_id!r}")
        try:
            plan = plan_rewind(data, position)
        except ValueError as exc:
            raise ReaderError(f"cannot restore {change.restore_from}: {exc}; nothing was written") from None
        entry = change.entry
        note = {"action_id": entry.get("id"), "action": entry.get("action"),
                "restored_from": change.restore_from, "restored_over": head}
        micros = max(time.time_ns() // 1000, head_us + STEP_US)
        events = [rewind_event(plan, note, micros)]
        if plan.copies:
            originals = self._raw_events(conn, key, [data.events[i].id for i in plan.copies])
            invocation = f"e-{uuid.uuid4()}"
            for n, (i, delta) in enumerate(zip(plan.copies, plan.copy_deltas), start=1):
                original = originals.get(data.events[i].id)
                if original is None:
                    raise ReaderError(f"event {data.events[i].id} cannot be copied (its event_data does not load)")
                events.append(copied_event(original, delta, invocation, note, micros + n * STEP_US))
        state = dict(data.state)
        for n, event in enumerate(events):
            state.update((k, v) for k, v in event["actions"]["state_delta"].items() if is_session_key(k))
            self._insert(conn, key, event, micros + n * STEP_US)
        self._update_session(conn, key, state, micros + (len(events) - 1) * STEP_US)
        return str(events[-1]["id"])

    def check_head(self, run_id: str, namespace: str, target_id: str, expected_state: Any) -> jr.HeadCheck:
        """The new head's state and live conversation, read back with Lastgood's reader, are the
        target's (ADK's own ``get_session`` is checked by the round-trip suite)."""
        from lastgood.readers.base import CheckpointRecord
        from lastgood.readers.registry import open_reader

        head = self.head(run_id, namespace)
        try:
            with open_reader(self.url, self.reader_name) as reader:
                states = [reader.load_state(CheckpointRecord(run_id=run_id, namespace=namespace, checkpoint_id=c))
                          for c in (head, target_id)]
        except LastgoodError as exc:
            return jr.HeadCheck(False, f"the new head does not load: {exc}")
        if states[0] != states[1]:
            return jr.HeadCheck(False, f"the state at the new head {head} differs from the target's")
        return jr.HeadCheck(True, f"the session resumes from {head}: its state and live conversation are "
                                  f"the target's (read back with Lastgood's reader)")

    def side_effects(self, run_id: str, namespace: str, after: Sequence[str]) -> list[dict[str, Any]]:
        return []  # the listed events (tool calls, errors) are the side effects


class SqliteRecovery(_Base):
    """``RecoveryBackend`` for an ADK SQLite database."""

    placeholder = "?"
    reader_name = "adk-sqlite"

    def __init__(self, url: str, storage_options: Mapping[str, Any] | None = None) -> None:
        from lastgood.readers.common.sqlite import sqlite_path

        super().__init__(url, storage_options)
        self.path = sqlite_path(url)

    def _find(self, conn: Any, run_id: str) -> list[SessionKey]:
        from lastgood.readers.adk.sqlite import find_sessions

        return find_sessions(conn, run_id)

    def _session(self, conn: Any, key: SessionKey) -> SessionData:
        from lastgood.readers.adk.sqlite import read_session

        return read_session(conn, key)

    def _read(self) -> sqlite3.Connection:
        from lastgood.readers.common.sqlite import connect_readonly

        return connect_readonly(self.path)

    def _journal_exists(self, conn: Any) -> bool:
        return sqljournal.sqlite_exists(conn)

    def _transaction(self, body: Callable[[Any], dict[str, Any]]) -> dict[str, Any]:
        return sqljournal.sqlite_transaction(self.path, body, pragmas=("PRAGMA foreign_keys = ON",))  # as ADK's engine

    def _insert(self, conn: Any, key: SessionKey, event: dict[str, Any], micros: int) -> None:
        conn.execute("""INSERT INTO events (id, app_name, user_id, session_id, invocation_id, timestamp, event_data)
            VALUES (?, ?, ?, ?, ?, ?, ?)""", (event["id"], *key, event["invocation_id"], _sqlite_time(micros),
                                              json.dumps(event)))

    def _update_session(self, conn: Any, key: SessionKey, state: dict[str, Any], micros: int) -> None:
        conn.execute("UPDATE sessions SET state = ?, update_time = ? WHERE app_name = ? AND user_id = ? AND id = ?",
                     (json.dumps(state), _sqlite_time(micros), *key))

    def _raw_events(self, conn: Any, key: SessionKey, ids: Sequence[str]) -> dict[str, dict[str, Any]]:
        rows = conn.execute("""SELECT id, event_data FROM events WHERE app_name = ? AND user_id = ?
            AND session_id = ? AND id IN (SELECT value FROM json_each(?))""", (*key, json.dumps(list(ids))))
        return {r[0]: _object(r[1]) for r in rows if _object(r[1]) is not None}  # type: ignore[misc]


def _sqlite_time(micros: int) -> str:
    """SQLAlchemy's SQLite DATETIME text (always six fractional digits)."""
    return naive_utc(micros).strftime("%Y-%m-%d %H:%M:%S.%f")


def _object(text: Any) -> dict[str, Any] | None:
    if isinstance(text, dict):
        return text
    try:
        value = json.loads(text) if isinstance(text, (str, bytes)) else None
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


class PostgresRecovery(_Base):
    """``RecoveryBackend`` for an ADK PostgreSQL database."""

    placeholder = "%s"
    reader_name = "adk-postgres"

    def _find(self, conn: Any, run_id: str) -> list[SessionKey]:
        from lastgood.readers.adk.postgres import find_sessions

        return find_sessions(conn, run_id)

    def _session(self, conn: Any, key: SessionKey) -> SessionData:
        from lastgood.readers.adk.postgres import read_session

        return read_session(conn, key)

    def _read(self) -> Any:
        from lastgood.readers.common.postgres import connect_readonly

        return connect_readonly(self.url)

    def _journal_exists(self, conn: Any) -> bool:
        return sqljournal.postgres_exists(conn)

    def _transaction(self, body: Callable[[Any], dict[str, Any]]) -> dict[str, Any]:
        return sqljournal.postgres_transaction(sqljournal.postgres_connect(self.url), body, _lock_journal)

    def _lock_session(self, conn: Any, key: SessionKey) -> None:
        conn.execute("SELECT 1 FROM sessions WHERE app_name = %s AND user_id = %s AND id = %s FOR UPDATE", key)

    def _insert(self, conn: Any, key: SessionKey, event: dict[str, Any], micros: int) -> None:
        from psycopg.types.json import Jsonb

        conn.execute("""INSERT INTO events (id, app_name, user_id, session_id, invocation_id, timestamp, event_data)
            VALUES (%s, %s, %s, %s, %s, %s, %s)""", (event["id"], *key, event["invocation_id"], naive_utc(micros),
                                                     Jsonb(event)))

    def _update_session(self, conn: Any, key: SessionKey, state: dict[str, Any], micros: int) -> None:
        from psycopg.types.json import Jsonb

        conn.execute("UPDATE sessions SET state = %s, update_time = %s WHERE app_name = %s AND user_id = %s "
                     "AND id = %s", (Jsonb(state), naive_utc(micros), *key))

    def _raw_events(self, conn: Any, key: SessionKey, ids: Sequence[str]) -> dict[str, dict[str, Any]]:
        rows = conn.execute("""SELECT id, event_data FROM events WHERE app_name = %s AND user_id = %s
            AND session_id = %s AND id = ANY(%s)""", (*key, list(ids))).fetchall()
        return {r[0]: r[1] for r in rows if isinstance(r[1], dict)}


def _lock_journal(conn: Any) -> None:
    conn.execute(sqljournal.POSTGRES_DDL)
    conn.execute(f"LOCK TABLE {sqljournal.TABLE} IN SHARE ROW EXCLUSIVE MODE")
