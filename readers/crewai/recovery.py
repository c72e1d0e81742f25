"""Write capability of CrewAI Flows ``SQLiteFlowPersistence`` databases.

CrewAI resumes a flow from its latest ``flow_states`` row (``load_state``: ``ORDER BY id DESC
LIMIT 1``); nothing in its API rewinds. So restore X = one new row for X's flow holding X's
``state_json`` verbatim, ``method_name`` ``lastgood:<action>`` (restore, rollback, undo) and a
fresh ``timestamp`` as CrewAI writes it: the next ``kickoff(inputs={"id": uuid})`` restores X's
state and runs the flow from its ``@start`` method(s). Nothing is deleted or rewritten; the
undo of a restore is a restore of the previous head (one more row with its state).

A flow paused for human feedback also has a ``pending_feedback`` row, and ``Flow.from_pending``
would resume from *its* state, not from the latest row: a restore moves that row into
``lastgood_archive`` (its columns as JSON, with the head row it belonged to) so both ways in
resume from X; restoring that head row again (the undo) brings it back.

Journal: table ``lastgood_journal`` (as the LangGraph backend's), created by the first write
action (reading never creates it), written in the same transaction as the new row. The whole
action is one ``BEGIN IMMEDIATE`` transaction (SQLite's write lock; CrewAI's own writes wait
for it): the expected head — the latest row id of the flow — is checked first, so an action
planned against an older head is refused (``ConflictError``) and nothing is written.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable, Mapping, Sequence
from contextlib import closing
from datetime import datetime, timezone
from typing import Any

from lastgood.errors import CheckpointNotFound, ConflictError, LastgoodError
from lastgood.readers import journal as jr
from lastgood.readers.common import sqljournal
from lastgood.readers.common.sqlite import connect_readonly, sqlite_path
from lastgood.readers.crewai.listing import parse_state
from lastgood.readers.crewai.shape import MARK

JOURNAL = sqljournal.TABLE
ARCHIVE = "lastgood_archive"
ARCHIVE_SQL = f"""CREATE TABLE IF NOT EXISTS {ARCHIVE} (
    seq INTEGER PRIMARY KEY, action_id TEXT NOT NULL, table_name TEXT NOT NULL, flow_uuid TEXT NOT NULL,
    head_row INTEGER, row_json TEXT NOT NULL, restored_by TEXT)"""
HEAD_SQL = "SELECT max(id) FROM flow_states WHERE flow_uuid = ?"
ROW_SQL = "SELECT flow_uuid, state_json FROM flow_states WHERE id = ?"
INSERT_SQL = "INSERT INTO flow_states (flow_uuid, method_name, timestamp, state_json) VALUES (?, ?, ?, ?)"
PENDING_SQL = "SELECT id, flow_uuid, context_json, state_json, created_at FROM pending_feedback WHERE flow_uuid = ?"
PENDING_COLUMNS = ("id", "flow_uuid", "context_json", "state_json", "created_at")
ARCHIVED_SQL = f"""SELECT seq, row_json FROM {ARCHIVE} WHERE flow_uuid = ? AND head_row = ?
    AND table_name = 'pending_feedback' AND restored_by IS NULL ORDER BY seq DESC LIMIT 1"""


class CrewAIRecovery(sqljournal.SqlJournal):
    """``RecoveryBackend`` for a ``SQLiteFlowPersistence`` database (see the module docstring)."""

    def __init__(self, url: str, storage_options: Mapping[str, Any] | None = None) -> None:
        self.url = url
        self.path = sqlite_path(url)

    # ---- reading ----------------------------------------------------------------------

    def head(self, run_id: str, namespace: str = "") -> str | None:
        with closing(connect_readonly(self.path)) as conn:
            found = conn.execute(HEAD_SQL, (run_id,)).fetchone()[0]
        return None if found is None else str(found)

    def _read(self) -> sqlite3.Connection:
        return connect_readonly(self.path)

    def _journal_exists(self, conn: Any) -> bool:
        return sqljournal.sqlite_exists(conn)

    # ---- writing ----------------------------------------------------------------------

    def _commit_in(self, conn: sqlite3.Connection, change: jr.Change) -> dict[str, Any]:
        found = conn.execute(HEAD_SQL, (change.run_id,)).fetchone()[0]
        head = None if found is None else str(found)
        if head != change.expected_head:
            raise ConflictError(
                f"the head of flow {change.run_id!r} moved: expected {change.expected_head}, found {head}; "
                "nothing was written — re-plan and try again")
        if not change.restore_from:
            return _append(conn, change.entry, head)
        new_head, note = self._restore(conn, change, found)
        entry = {**change.entry, "note": {**_as_dict(change.entry.get("note")), **note}}
        return _append(conn, entry, new_head)

    def _restore(self, conn: sqlite3.Connection, change: jr.Change, head: int | None) -> tuple[str, dict[str, Any]]:
        source = _row_id(change.restore_from)
        row = conn.execute(ROW_SQL, (source,)).fetchone() if source is not None else None
        if row is None or row[0] != change.run_id:
            raise CheckpointNotFound(f"checkpoint {change.restore_from} of flow {change.run_id!r} is not "
                                     "in the database")
        action_id = str(change.entry.get("id"))
        note: dict[str, Any] = {}
        if _has_table(conn, "pending_feedback"):
            note.update(self._move_pending(conn, change.run_id, head, source, action_id))
        action = str(change.entry.get("action") or "restore")
        stamp = datetime.now(timezone.utc).isoformat()  # as SQLiteFlowPersistence stamps its rows
        cursor = conn.execute(INSERT_SQL, (change.run_id, f"{MARK}{action}", stamp, row[1]))
        return str(cursor.lastrowid), note

    def _move_pending(self, conn: sqlite3.Connection, run_id: str, head: int | None, source: int,
                      action_id: str) -> dict[str, Any]:
        """Archive the flow's pending feedback (it belongs to the head being left); bring back the
        one archived with the row being restored."""
        conn.execute(ARCHIVE_SQL)
        note: dict[str, Any] = {}
        current = conn.execute(PENDING_SQL, (run_id,)).fetchone()
        if current is not None:
            row = dict(zip(PENDING_COLUMNS, current))
            conn.execute(f"INSERT INTO {ARCHIVE} (action_id, table_name, flow_uuid, head_row, row_json) "
                         "VALUES (?, 'pending_feedback', ?, ?, ?)", (action_id, run_id, head, json.dumps(row)))
            conn.execute("DELETE FROM pending_feedback WHERE id = ?", (row["id"],))
            note["pending_feedback"] = f"archived (row {row['id']})"
        archived = conn.execute(ARCHIVED_SQL, (run_id, source)).fetchone()
        if archived is not None:
            row = json.loads(archived[1])
            free = conn.execute("SELECT 1 FROM pending_feedback WHERE id = ?", (row["id"],)).fetchone() is None
            columns = PENDING_COLUMNS if free else PENDING_COLUMNS[1:]
            conn.execute(f"INSERT INTO pending_feedback ({', '.join(columns)}) VALUES "
                         f"({', '.join('?' for _ in columns)})", [row[c] for c in columns])
            conn.execute(f"UPDATE {ARCHIVE} SET restored_by = ? WHERE seq = ?", (action_id, archived[0]))
            note["pending_feedback"] = f"brought back from the archive (row {row['id']})"
        return note

    def _transaction(self, body: Callable[[sqlite3.Connection], dict[str, Any]]) -> dict[str, Any]:
        return sqljournal.sqlite_transaction(self.path, body, errors=sqlite3.OperationalError)

    # ---- checks -----------------------------------------------------------------------

    def check_head(self, run_id: str, namespace: str, target_id: str, expected_state: Any) -> jr.HeadCheck:
        """Read the flow back as CrewAI does: ``load_state``'s query (the latest row, ``json.loads``),
        and ``load_pending_feedback``'s, which must not resume from another state."""
        try:
            with closing(connect_readonly(self.path)) as conn:
                latest = conn.execute("SELECT id, state_json FROM flow_states WHERE flow_uuid = ? "
                                      "ORDER BY id DESC LIMIT 1", (run_id,)).fetchone()
                target = conn.execute(ROW_SQL, (_row_id(target_id),)).fetchone()
                pending = (conn.execute(PENDING_SQL, (run_id,)).fetchone()
                           if _has_table(conn, "pending_feedback") else None)
        except (sqlite3.Error, LastgoodError) as exc:
            return jr.HeadCheck(False, f"the flow cannot be read back: {exc}")
        if latest is None or target is None:
            return jr.HeadCheck(False, "the flow or the target row is gone")
        try:
            state = json.loads(latest[1])
            wanted = expected_state if expected_state is not None else parse_state(target[1])
            paused = json.loads(pending[3]) if pending is not None else None
        except (TypeError, ValueError) as exc:
            return jr.HeadCheck(False, f"a state does not parse as CrewAI parses it: {exc}")
        if state != wanted:
            return jr.HeadCheck(False, f"load_state would restore row {latest[0]}, whose state is not the target's")
        if paused is not None and paused != wanted:
            return jr.HeadCheck(False, "Flow.from_pending would resume from a pending_feedback state that "
                                       "is not the target's")
        return jr.HeadCheck(True, f"SQLiteFlowPersistence.load_state's query returns the target's state "
                                  f"(row {latest[0]})")

    def side_effects(self, run_id: str, namespace: str, after: Sequence[str]) -> list[dict[str, Any]]:
        return []  # flows record no tool calls; events come from the index


def _append(conn: sqlite3.Connection, entry: Mapping[str, Any], new_head: str | None) -> dict[str, Any]:
    return sqljournal.append(conn, entry, new_head)


def _has_table(conn: sqlite3.Connection, name: str) -> bool:
    return sqljournal.sqlite_exists(conn, name)


def _row_id(checkpoint_id: str | None) -> int | None:
    return int(checkpoint_id) if checkpoint_id and checkpoint_id.isdigit() else None


def _as_dict(value: Any) -> dict[str, Any]:
    return dict(value) if isinstance(value, Mapping) else {}
