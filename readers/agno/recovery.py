"""Write capability of Agno ``SqliteDb``/``PostgresDb`` stores: restore = Agno's own rewind.

What Agno resumes a session from (``agno/agent/_storage.py``, ``AgentSession.get_messages``): the
next ``agent.run(…, session_id=sid)`` starts from ``agno_sessions.session_data["session_state"]``
and replays the messages of the session's last runs (``num_history_runs``; runs PAUSED, CANCELLED,
ERROR or REGENERATED, and team members' runs, are skipped), read from ``agno_runs`` in ``run_index``
order; the new run gets the next ``run_index``. Agno's own way back is ``db.delete_run(run_id)``
plus ``agent.update_session_state(...)`` (deleting runs does not roll the state back; the per-run
``run_data.session_state`` snapshots are where an earlier state is).

Restoring run X does exactly that, non-destructively:

- every run of the session after X (Agno's order) moves from ``agno_runs`` to
  ``lastgood_agno_archive`` (its whole row as JSON, with the action id), and the session's
  ``session_data`` and ``updated_at`` as they were are archived beside them;
- ``session_data.session_state`` becomes X's snapshot (``run_data.session_state``), ``updated_at``
  now; nothing else of the session row changes (metrics, summary, agent data);
- the session's head is X itself (no new row): the next run continues after X with ``run_index``
  X's + 1, and its history is the runs up to X.

Undo (a restore of the previous head, which is archived) puts the runs that action archived back
in ``agno_runs`` and the session's archived ``session_data``: the store is as it was. A session
that still holds runs in the Agno 2.x ``runs`` column is refused (Agno would bring a removed run
back from it); a run whose session is gone too.

All in one transaction with the journal entry (``lastgood_journal``), after re-checking that the
session's last run is the expected head: SQLite ``BEGIN IMMEDIATE``; PostgreSQL ``SELECT … FOR
UPDATE`` on the session row. An agent in the middle of a run when the restore commits still holds
the old ``session_state`` in memory and writes it back when its run ends (Agno writes the whole
session row after each run): restore when no run of the session is in flight.
"""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Callable, Mapping, Sequence
from contextlib import closing
from typing import Any

from lastgood.errors import CheckpointNotFound, ConflictError, LastgoodError, ReaderError
from lastgood.readers import journal as jr
from lastgood.readers.common import sqljournal

ARCHIVE = "lastgood_agno_archive"
SQLITE_ARCHIVE_DDL = f"""CREATE TABLE IF NOT EXISTS {ARCHIVE} (seq INTEGER PRIMARY KEY, action_id TEXT NOT NULL,
    kind TEXT NOT NULL, session_id TEXT NOT NULL, run_id TEXT, row TEXT NOT NULL, restored_by TEXT)"""
POSTGRES_ARCHIVE_DDL = f"""CREATE TABLE IF NOT EXISTS {{schema}}{ARCHIVE} (
    seq BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY, action_id TEXT NOT NULL, kind TEXT NOT NULL,
    session_id TEXT NOT NULL, run_id TEXT, row TEXT NOT NULL, restored_by TEXT)"""
Key = tuple[Any, ...]


def run_key(row: Mapping[str, Any]) -> Key:
    """Agno's order of runs: ``run_index``, ``created_at``, ``run_id`` (NULLs first)."""
    index = row.get("run_index")
    return (1 if index is None else 2, index or 0, row.get("created_at") or 0, row.get("run_id") or "")


def _state_of(run_data: Any) -> Any:
    data = json.loads(run_data) if isinstance(run_data, (str, bytes)) else run_data
    state = data.get("session_state") if isinstance(data, dict) else None
    return state if isinstance(state, dict) else {}


class _Base(sqljournal.SqlJournal):
    """The shared flow; a dialect gives connections, the table names and the SQL details."""

    p = placeholder = "?"
    reader_name = ""

    def __init__(self, url: str, storage_options: Mapping[str, Any] | None = None) -> None:
        self.url = url
        self.runs, self.sessions, self.archive = "agno_runs", "agno_sessions", ARCHIVE

    # ---- what a dialect provides ---------------------------------------------------------------
    def _lock_session(self, conn: Any, session_id: str) -> None:
        """Hold the session row until the transaction ends."""

    def _rows(self, conn: Any, sql: str, params: Sequence[Any]) -> list[dict[str, Any]]:
        cur = conn.execute(sql.replace("?", self.p), tuple(params))
        names = [d[0] for d in cur.description]
        return [dict(zip(names, row)) for row in cur.fetchall()]

    def _insert_run(self, conn: Any, row: Mapping[str, Any]) -> None:
        raise NotImplementedError

    def _set_session(self, conn: Any, session_id: str, session_data: Any, updated_at: int) -> None:
        raise NotImplementedError

    def _legacy_runs(self, conn: Any, session_id: str) -> bool:
        return False

    # ---- reading ----------------------------------------------------------------------------------
    def _has_runs_table(self, conn: Any) -> bool:
        return True

    def _session_runs(self, conn: Any, session_id: str) -> list[dict[str, Any]]:
        """The session's stored runs in Agno's order ([] in an Agno 2.x store: no agno_runs table)."""
        if not self._has_runs_table(conn):
            return []
        rows = self._rows(conn, f"SELECT * FROM {self.runs} WHERE session_id = ?", (session_id,))
        return sorted(rows, key=run_key)

    def head(self, run_id: str, namespace: str = "") -> str | None:
        with closing(self._read()) as conn:
            runs = self._session_runs(conn, run_id)
        return runs[-1]["run_id"] if runs else None

    # ---- the flow ------------------------------------------------------------------------------------
    def _commit_in(self, conn: Any, change: jr.Change) -> dict[str, Any]:
        session = self._rows(conn, f"SELECT session_data, updated_at FROM {self.sessions} WHERE session_id = ?",
                             (change.run_id,))
        if change.restore_from and not session:
            raise ReaderError(f"session {change.run_id!r} has no agno_sessions row: Agno cannot resume it")
        self._lock_session(conn, change.run_id)
        if change.restore_from and self._legacy_runs(conn, change.run_id):
            raise ReaderError(f"session {change.run_id!r} still has runs in the Agno 2.x runs column: Agno "
                              "would bring removed runs back from it (migrate, then "
                              "SqliteDb.cleanup_legacy_runs_column()); nothing was written")
        runs = self._session_runs(conn, change.run_id)
        head = runs[-1]["run_id"] if runs else None
        if head != change.expected_head:
            raise ConflictError(f"the last run of session {change.run_id!r} moved: expected {change.expected_head}, "
                                f"found {head}; nothing was written — re-plan and try again")
        if change.restore_from and change.restore_from != head:
            self._restore(conn, change, runs, session[0])
        return sqljournal.append(conn, change.entry, change.restore_from or head, self.p)

    def _restore(self, conn: Any, change: jr.Change, runs: list[dict[str, Any]], session: dict[str, Any]) -> None:
        action, target = str(change.entry.get("id")), str(change.restore_from)
        live = {r["run_id"]: r for r in runs}
        source = live.get(target)
        brought: list[dict[str, Any]] = []
        saved: dict[str, Any] | None = None
        if source is None:
            source, brought, saved = self._unarchive(conn, change.run_id, target, action)
        later = [r for r in runs if run_key(r) > run_key(source)]
        self._archive(conn, action, change.run_id, later, session)
        now = int(time.time())
        if brought and saved is not None and not later:  # an undo: the session row as it was
            self._set_session(conn, change.run_id, saved.get("session_data"), saved.get("updated_at") or now)
            return
        data = session.get("session_data")
        data = json.loads(data) if isinstance(data, (str, bytes)) else dict(data or {})
        data["session_state"] = _state_of(source["run_data"])
        self._set_session(conn, change.run_id, data, now)

    def _archive(self, conn: Any, action: str, session_id: str, runs: list[dict[str, Any]],
                 session: dict[str, Any]) -> None:
        if not runs:
            return
        insert = f"INSERT INTO {self.archive} (action_id, kind, session_id, run_id, row) VALUES (?, ?, ?, ?, ?)"
        conn.execute(insert.replace("?", self.p), (action, "session", session_id, None, _json(session)))
        for run in runs:
            conn.execute(insert.replace("?", self.p), (action, "run", session_id, run["run_id"], _json(run)))
            conn.execute(f"DELETE FROM {self.runs} WHERE run_id = ?".replace("?", self.p), (run["run_id"],))

    def _unarchive(self, conn: Any, session_id: str, target: str, action: str) -> tuple[Any, list[Any], Any]:
        """Bring back the runs the latest action that archived ``target`` took, up to ``target``."""
        found = self._rows(conn, f"""SELECT action_id FROM {self.archive} WHERE session_id = ? AND run_id = ?
            AND kind = 'run' AND restored_by IS NULL ORDER BY seq DESC LIMIT 1""", (session_id, target))
        if not found:
            raise CheckpointNotFound(f"run {target} is neither in agno_runs nor archived by Lastgood")
        taken = found[0]["action_id"]
        rows = self._rows(conn, f"""SELECT seq, kind, row FROM {self.archive} WHERE action_id = ? AND session_id = ?
            AND restored_by IS NULL ORDER BY seq""", (taken, session_id))
        archived = [(r["seq"], json.loads(r["row"])) for r in rows if r["kind"] == "run"]
        source = next(run for _seq, run in archived if run["run_id"] == target)
        back = [(seq, run) for seq, run in archived if run_key(run) <= run_key(source)]
        for seq, run in back:
            self._insert_run(conn, run)
            conn.execute(f"UPDATE {self.archive} SET restored_by = ? WHERE seq = ?".replace("?", self.p), (action, seq))
        saved = next((json.loads(r["row"]) for r in rows if r["kind"] == "session"), None)
        whole = len(back) == len(archived)
        return source, [run for _seq, run in back], saved if whole else None

    def check_head(self, run_id: str, namespace: str, target_id: str, expected_state: Any) -> jr.HeadCheck:
        """The session's last run is the target, and ``session_data.session_state`` (what Agno's next
        run starts from) is the target's snapshot; read back with Lastgood's reader."""
        from lastgood.readers.base import CheckpointRecord
        from lastgood.readers.registry import open_reader

        with closing(self._read()) as conn:
            runs = self._session_runs(conn, run_id)
            session = self._rows(conn, f"SELECT session_data FROM {self.sessions} WHERE session_id = ?", (run_id,))
        if not runs or runs[-1]["run_id"] != target_id:
            return jr.HeadCheck(False, f"the session's last run is not {target_id}")
        data = session[0]["session_data"] if session else None
        data = json.loads(data) if isinstance(data, (str, bytes)) else data or {}
        try:
            with open_reader(self.url, self.reader_name) as reader:
                state = reader.load_state(CheckpointRecord(run_id=run_id, checkpoint_id=target_id))
        except LastgoodError as exc:
            return jr.HeadCheck(False, f"the target does not load: {exc}")
        if data.get("session_state") != state["session_state"]:
            return jr.HeadCheck(False, "session_data.session_state is not the target run's snapshot")
        return jr.HeadCheck(True, f"Agno resumes session {run_id!r} after run {target_id}, from its session_state")

    def side_effects(self, run_id: str, namespace: str, after: Sequence[str]) -> list[dict[str, Any]]:
        return []  # the listed events (tool calls, errors) are the side effects


def _json(row: Mapping[str, Any]) -> str:
    return json.dumps(dict(row), default=str)


class SqliteRecovery(_Base):
    """``RecoveryBackend`` for an Agno SqliteDb file."""

    reader_name = "agno-sqlite"

    def __init__(self, url: str, storage_options: Mapping[str, Any] | None = None) -> None:
        from lastgood.readers.common.sqlite import sqlite_path

        super().__init__(url, storage_options)
        self.path = sqlite_path(url)

    def _read(self) -> sqlite3.Connection:
        from lastgood.readers.common.sqlite import connect_readonly

        return connect_readonly(self.path)

    def _journal_exists(self, conn: Any) -> bool:
        return sqljournal.sqlite_exists(conn)

    def _transaction(self, body: Callable[[Any], dict[str, Any]]) -> dict[str, Any]:
        return sqljournal.sqlite_transaction(self.path, body, setup=(sqljournal.SQLITE_DDL, SQLITE_ARCHIVE_DDL),
                                             pragmas=("PRAGMA foreign_keys = ON",))  # as every SqliteDb connection

    def _insert_run(self, conn: Any, row: Mapping[str, Any]) -> None:
        names = list(row)
        conn.execute(f"INSERT INTO {self.runs} ({', '.join(names)}) VALUES ({', '.join('?' * len(names))})",
                     [row[n] for n in names])

    def _set_session(self, conn: Any, session_id: str, session_data: Any, updated_at: int) -> None:
        text = session_data if isinstance(session_data, str) else json.dumps(session_data)
        conn.execute(f"UPDATE {self.sessions} SET session_data = ?, updated_at = ? WHERE session_id = ?",
                     (text, updated_at, session_id))

    def _has_runs_table(self, conn: Any) -> bool:
        return bool(conn.execute(f"PRAGMA table_info({self.runs})").fetchall())

    def _legacy_runs(self, conn: Any, session_id: str) -> bool:
        columns = {r[1] for r in conn.execute(f"PRAGMA table_info({self.sessions})")}
        if "runs" not in columns:
            return False
        row = conn.execute(f"SELECT runs FROM {self.sessions} WHERE session_id = ?", (session_id,)).fetchone()
        blob = row[0] if row else None
        try:
            return bool(json.loads(blob)) if isinstance(blob, str) else bool(blob)
        except ValueError:
            return False


class PostgresRecovery(_Base):
    """``RecoveryBackend`` for an Agno PostgresDb database (its tables' schema first on the search path
    of every transaction; the journal and the archive are created beside them)."""

    p = placeholder = "%s"
    reader_name = "agno-postgres"

    def __init__(self, url: str, storage_options: Mapping[str, Any] | None = None) -> None:
        super().__init__(url, storage_options)
        self.wanted = (storage_options or {}).get("db_schema")

    def _schema(self, conn: Any) -> str:
        from lastgood.readers.agno.postgres import agno_schemas, pick_schema, use_schema

        schema = pick_schema(agno_schemas(conn), self.wanted)
        if schema is None:
            raise ReaderError("no Agno tables (agno_sessions + agno_runs) in this database")
        use_schema(conn, schema)
        return schema

    def _read(self) -> Any:
        from lastgood.readers.common.postgres import connect_readonly

        conn = connect_readonly(self.url)
        self._schema(conn)
        return conn

    def _journal_exists(self, conn: Any) -> bool:
        return sqljournal.postgres_exists(conn)

    def _transaction(self, body: Callable[[Any], dict[str, Any]]) -> dict[str, Any]:
        from lastgood.readers.agno.postgres import write_connection

        return sqljournal.postgres_transaction(write_connection(self.url), body, self._prepare)

    def _prepare(self, conn: Any) -> None:
        self._schema(conn)
        conn.execute(sqljournal.POSTGRES_DDL)
        conn.execute(POSTGRES_ARCHIVE_DDL.format(schema=""))
        conn.execute(f"LOCK TABLE {sqljournal.TABLE} IN SHARE ROW EXCLUSIVE MODE")

    def _lock_session(self, conn: Any, session_id: str) -> None:
        conn.execute(f"SELECT 1 FROM {self.sessions} WHERE session_id = %s FOR UPDATE", (session_id,))

    def _insert_run(self, conn: Any, row: Mapping[str, Any]) -> None:
        from psycopg.types.json import Jsonb

        names = list(row)
        values = [Jsonb(row[n]) if isinstance(row[n], (dict, list)) else row[n] for n in names]
        conn.execute(f"INSERT INTO {self.runs} ({', '.join(names)}) VALUES ({', '.join(['%s'] * len(names))})",
                     values)

    def _set_session(self, conn: Any, session_id: str, session_data: Any, updated_at: int) -> None:
        from psycopg.types.json import Jsonb

        data = json.loads(session_data) if isinstance(session_data, (str, bytes)) else session_data
        conn.execute(f"UPDATE {self.sessions} SET session_data = %s, updated_at = %s WHERE session_id = %s",
                     (Jsonb(data), updated_at, session_id))

    def _legacy_runs(self, conn: Any, session_id: str) -> bool:
        has = conn.execute("""SELECT count(*) FROM information_schema.columns WHERE table_name = %s
            AND column_name = 'runs' AND table_schema = current_schema()""", (self.sessions,)).fetchone()[0]
        if not has:
            return False
        row = conn.execute(f"SELECT runs FROM {self.sessions} WHERE session_id = %s", (session_id,)).fetchone()
        value = json.loads(row[0]) if row and isinstance(row[0], str) else (row[0] if row else None)
        return bool(value)
