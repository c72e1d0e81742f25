"""Reader for Agno ``SqliteDb`` stores (``agno_sessions`` + ``agno_runs``, schema 3.0).

Tables (``agno/db/sqlite/schemas.py``, default names): ``agno_sessions`` (one row per session,
``session_data`` JSON text holding the current ``session_state``), ``agno_runs`` (one row per run:
``run_data`` = ``RunOutput.to_dict()``, and the columns Agno mirrors out of it: ``status``,
``run_index``, ``created_at``/``updated_at`` in Unix seconds…). A live store is in WAL mode (every
``SqliteDb`` connection sets it): it is read through ``common.sqlite.connect_readonly``, one read
transaction per listing, nothing left behind.

Runs are upserted in place (``continue_run`` rewrites a PAUSED run as COMPLETED under the same
``run_id``), so the scan token is not a rowid alone: the runs updated after the token's newest
``updated_at`` (or at it, with a different status or size) re-list their sessions.
"""

from __future__ import annotations

import json
import sqlite3
import threading
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import replace
from typing import Any

from lastgood.errors import CheckpointNotFound
from lastgood.readers.agno import model
from lastgood.readers.agno.base import AgnoReader, RawListing, RunState, is_agno_schema
from lastgood.readers.base import backend_named
from lastgood.readers.common.sqlite import (NotUtf8, file_stamp, is_utf8, read_transaction, reading_past_bad_text,
                                            sqlite_path, sqlite_schema, table_columns)
from lastgood.readers.journal import RetentionBackend

TOKEN_VERSION = 1
_UPD = "coalesce(updated_at, created_at)"
_COLUMNS = f"""rowid, session_id, run_id, run_index, created_at, {_UPD}, status, run_type, agent_id, team_id,
  workflow_id, user_id, parent_run_id, length(run_data)"""
LIST_SQL = f"""SELECT {_COLUMNS}, {model.sqlite_info()},
  CASE WHEN substr(ltrim(run_data), 1, 1) = char(123) THEN 1 ELSE 0 END, 'agno_runs'
FROM agno_runs WHERE {{where}}"""
SAFE_SQL = f"""SELECT {_COLUMNS}, CASE WHEN json_valid(run_data) THEN {model.sqlite_info()} END,
  CASE WHEN json_valid(run_data) AND json_type(run_data) = 'object' THEN 1 ELSE 0 END, 'agno_runs'
FROM agno_runs WHERE {{where}}"""
RUNS_TOKEN_SQL = f"""SELECT count(*), coalesce(max(rowid), 0), max({_UPD}) FROM agno_runs"""
AT_MAX_SQL = f"""SELECT run_id, status, length(run_data) FROM agno_runs WHERE {_UPD} = ? ORDER BY run_id"""
BELOW_SQL = f"SELECT count(*) FROM agno_runs WHERE {_UPD} < ?"
TOUCHED = f"""session_id IN (SELECT session_id FROM agno_runs WHERE rowid > ? OR {_UPD} > ?
  OR ({_UPD} = ? AND json_array(run_id, status, length(run_data)) NOT IN (SELECT value FROM json_each(?))))"""
ORPHANS_SQL = """SELECT DISTINCT session_id FROM agno_runs r
  WHERE NOT EXISTS (SELECT 1 FROM agno_sessions s WHERE s.session_id = r.session_id)"""
_OK = "json_valid(run_data) AND json_type(run_data) = 'object'"
STATE_SQL = f"""SELECT run_id, parent_run_id, run_index, created_at, CASE WHEN {_OK} THEN 1 ELSE 0 END,
  CASE WHEN {_OK} THEN json_extract(run_data, '$.messages') END,
  CASE WHEN {_OK} THEN json_extract(run_data, '$.session_state') END
FROM agno_runs WHERE session_id = ?"""
RUNS_CACHED = 16  # sessions whose runs a reader keeps
UNREADABLE_RUN = "run_data is not UTF-8 text: Agno cannot load this session (its database driver fails reading it)"
RUN_BLOBS_SQL = """SELECT run_id, CAST(run_data AS BLOB) FROM agno_runs
  WHERE session_id = ? AND typeof(run_data) = 'text'"""
LEGACY_SQL = """SELECT session_id, runs, agent_id, user_id FROM agno_sessions
  WHERE runs IS NOT NULL AND {where}"""
ARCHIVE_TABLE = "lastgood_agno_archive"
ARCHIVED_SQL = f"""SELECT action_id, row FROM {ARCHIVE_TABLE} WHERE session_id = ? AND kind = 'run'
  AND restored_by IS NULL ORDER BY seq"""
ARCHIVE_LIST_SQL = f"""SELECT action_id, row FROM {ARCHIVE_TABLE} WHERE kind = 'run' AND restored_by IS NULL
  AND run_id NOT IN (SELECT run_id FROM agno_runs) AND {{where}} ORDER BY seq"""


def loads(text: Any) -> Any:
    try:
        return json.loads(text) if isinstance(text, (str, bytes)) else text
    except ValueError:
        return None


class AgnoSqliteReader(AgnoReader):
    """Agno SqliteDb store, read-only."""

    name = "agno-sqlite"
    description = "Agno SqliteDb session store (agno_sessions + agno_runs, schema 3.0; 2.x runs column read too)"
    recovery_class = "lastgood.readers.agno.recovery:SqliteRecovery"

    def __init__(self, url: str, storage_options: Mapping[str, Any] | None = None) -> None:
        self.path = sqlite_path(url)
        super().__init__(url, storage_options)
        self.has_runs = self.legacy = self.archive = False
        self._runs_cache: dict[str, tuple[Any, list[RunState]]] = {}  # session id -> (files' stamp, runs)
        self._runs_lock = threading.Lock()
        with self._read():
            pass

    @classmethod
    def sniff(cls, url: str, storage_options: Mapping[str, Any] | None = None) -> bool:
        return is_agno_schema(sqlite_schema(url))

    def retention(self) -> RetentionBackend:
        """Prune: whole stale sessions, archived, then deleted (:mod:`.retention`)."""
        return backend_named("lastgood.readers.agno.retention:AgnoSqliteRetention", self)  # type: ignore[return-value]

    @contextmanager
    def _read(self) -> Iterator[sqlite3.Connection]:
        """A read transaction; the layout (runs table, legacy column, Lastgood's archive) as it is now."""
        with read_transaction(self.path) as conn:
            self.has_runs = bool(table_columns(conn, "agno_runs"))
            self.legacy = "runs" in table_columns(conn, "agno_sessions")
            self.archive = bool(table_columns(conn, ARCHIVE_TABLE))
            yield conn

    # ---- listing ----------------------------------------------------------------------------
    def _listing(self, since: str | None) -> RawListing:
        with self._read() as conn:
            token, runs_token = self._token(conn)
            if since == token:
                return RawListing(token, False, None, set())
            touched = self._touched(conn, since, runs_token)
            rows = self._rows(conn, touched)
            orphans = {r[0] for r in conn.execute(ORPHANS_SQL)} if self.has_runs else set()
        return RawListing(token, touched is None, rows, orphans)

    def _token(self, conn: sqlite3.Connection) -> tuple[str, list[Any]]:
        runs: list[Any] = [0, 0, None, 0, []]
        if self.has_runs:
            count, last, newest = conn.execute(RUNS_TOKEN_SQL).fetchone()
            below = conn.execute(BELOW_SQL, (newest,)).fetchone()[0] if newest is not None else 0
            runs = [count, last, newest, below, [list(r) for r in conn.execute(AT_MAX_SQL, (newest,))]]
        sessions = list(conn.execute("SELECT count(*), coalesce(max(rowid), 0) FROM agno_sessions").fetchone())
        if self.legacy:
            sessions.append(conn.execute("SELECT total(length(runs)) FROM agno_sessions").fetchone()[0])
        return json.dumps({"v": TOKEN_VERSION, "runs": runs, "sessions": sessions}, sort_keys=True), runs

    def _touched(self, conn: sqlite3.Connection, since: str | None, now: list[Any]) -> tuple[Any, ...] | None:
        """The TOUCHED parameters when runs were only added or updated at the tail since ``since``."""
        old = loads(since) if since else None
        if not isinstance(old, dict) or old.get("v") != TOKEN_VERSION or not self.has_runs:
            return None
        try:
            count, last, newest, below, at_max = old["runs"]
            old_sessions = old["sessions"]
        except (KeyError, TypeError, ValueError):
            return None
        sessions = json.loads(self._token(conn)[0])["sessions"]
        if newest is None or now[2] is None or now[2] < newest or sessions[0] < old_sessions[0] \
                or sessions[2:] != old_sessions[2:]:
            return None
        if conn.execute(BELOW_SQL, (newest,)).fetchone()[0] != below:
            return None
        still = {r[0] for r in conn.execute(AT_MAX_SQL, (newest,))} | {
            r[0] for r in conn.execute(f"SELECT run_id FROM agno_runs WHERE {_UPD} > ?", (newest,))}
        if any(run_id not in still for run_id, *_ in at_max):
            return None
        return last, newest, newest, json.dumps(at_max)

    def _rows(self, conn: sqlite3.Connection, touched: tuple[Any, ...] | None) -> list[model.Row]:
        rows: list[model.Row] = []
        where, params = ("1", ()) if touched is None else (TOUCHED, touched)
        if self.has_runs:
            try:
                rows = conn.execute(LIST_SQL.format(where=where), params).fetchall()
            except sqlite3.OperationalError as exc:
                if "json" not in str(exc).lower():
                    raise
                rows = conn.execute(SAFE_SQL.format(where=where), params).fetchall()
        sessions = None if touched is None else {r[model.SESSION] for r in rows}
        if self.legacy:
            rows += self._legacy(conn, sessions)
        if self.archive and self.has_runs:
            where, params = ("1", ()) if sessions is None else (
                "session_id IN (SELECT value FROM json_each(?))", (json.dumps(sorted(sessions)),))
            found = (model.archived_row(action, loads(text) or {}) for action, text in
                     conn.execute(ARCHIVE_LIST_SQL.format(where=where), params).fetchall())
            rows += [r for r in found if r is not None]
        return rows

    def _legacy(self, conn: sqlite3.Connection, sessions: set[str] | None) -> list[model.Row]:
        where, params = ("1", ()) if sessions is None else (
            "session_id IN (SELECT value FROM json_each(?))", (json.dumps(sorted(sessions)),))
        out: list[model.Row] = []
        for session, blob, agent, user in conn.execute(LEGACY_SQL.format(where=where), params).fetchall():
            ids = {r[0] for r in conn.execute("SELECT run_id FROM agno_runs WHERE session_id = ?", (session,))} \
                if self.has_runs else set()
            out += model.legacy_rows(session, loads(blob), ids, agent, user)
        return out

    # ---- one session -------------------------------------------------------------------------
    def _session_runs(self, session_id: str) -> list[RunState]:
        """The session's runs, kept while the database's files are unchanged (a data check loads the
        state of each of a session's runs in turn: one read of its runs, not one per run)."""
        stamp = file_stamp(self.path)
        with self._runs_lock:
            hit = self._runs_cache.get(session_id)
        if hit is not None and hit[0] == stamp:
            return hit[1]
        runs = self._read_session_runs(session_id)
        with self._runs_lock:
            self._runs_cache.pop(session_id, None)
            self._runs_cache[session_id] = (stamp, runs)
            while len(self._runs_cache) > RUNS_CACHED:
                self._runs_cache.pop(next(iter(self._runs_cache)))
        return runs

    def _read_session_runs(self, session_id: str) -> list[RunState]:
        """The session's runs; those Agno's driver cannot read are marked with why (TEXT that is not
        UTF-8 in the session's row or in the run's run_data: SQLite's JSON functions read past it)."""
        with self._read() as conn:
            runs = session_runs(conn, session_id, self.has_runs, self.legacy, self.archive)
            whole = _session_row_problem(conn, session_id)
            bad = {run_id for run_id, data in conn.execute(RUN_BLOBS_SQL, (session_id,)) if not is_utf8(data)} \
                if self.has_runs and whole is None else set()
        return [replace(r, valid=False, unreadable=whole or UNREADABLE_RUN)
                if r.archived_by is None and (whole or r.run_id in bad) else r for r in runs]

    def _run_data(self, session_id: str, run_id: str) -> bytes:
        with self._read() as conn:
            row = conn.execute("SELECT CAST(run_data AS BLOB) FROM agno_runs WHERE session_id = ? AND run_id = ?",
                               (session_id, run_id)).fetchone() if self.has_runs else None
            if row is None and self.archive:
                row = conn.execute(f"SELECT row FROM {ARCHIVE_TABLE} WHERE session_id = ? AND run_id = ? AND "
                                   "restored_by IS NULL ORDER BY seq DESC LIMIT 1", (session_id, run_id)).fetchone()
                data = (loads(row[0]) or {}).get("run_data") if row else None
                row = ((data if isinstance(data, str) else json.dumps(data)).encode(),) if row else None
            if row is None and self.legacy:
                blob = conn.execute("SELECT runs FROM agno_sessions WHERE session_id = ?", (session_id,)).fetchone()
                run = next((r for r in loads(blob[0]) or () if isinstance(r, dict) and r.get("run_id") == run_id),
                           None) if blob else None
                row = (json.dumps(run).encode(),) if run is not None else None
        if row is None:
            raise CheckpointNotFound(f"run {run_id} of session {session_id!r} not found")
        return bytes(row[0] or b"")

    def _existing(self, ids: Sequence[str]) -> set[str]:
        if not ids:
            return set()
        with self._read() as conn:
            found = {r[0] for r in conn.execute("SELECT run_id FROM agno_runs WHERE run_id IN "
                                                "(SELECT value FROM json_each(?))", (json.dumps(list(ids)),))} \
                if self.has_runs else set()
            if self.archive and set(ids) - found:
                found |= {r[0] for r in conn.execute(f"SELECT run_id FROM {ARCHIVE_TABLE} WHERE restored_by IS NULL "
                                                     "AND run_id IN (SELECT value FROM json_each(?))",
                                                     (json.dumps(list(ids)),))}
            if self.legacy and set(ids) - found:
                for (blob,) in conn.execute("SELECT runs FROM agno_sessions WHERE runs IS NOT NULL"):
                    found |= {r.get("run_id") for r in loads(blob) or () if isinstance(r, dict)} & set(ids)
        return found


def _session_row_problem(conn: sqlite3.Connection, session_id: str) -> str | None:
    """Why Agno cannot load the session from its agno_sessions row (a column that is not UTF-8
    text), or None."""
    with reading_past_bad_text(conn):
        cur = conn.execute("SELECT * FROM agno_sessions WHERE session_id = ?", (session_id,))
        row = cur.fetchone()
    bad = [d[0] for d, value in zip(cur.description, row or ()) if isinstance(value, NotUtf8)]
    return (f"agno_sessions.{', '.join(bad)} is not UTF-8 text: Agno cannot load this session (its database "
            "driver fails reading it)") if bad else None


def session_runs(conn: Any, session_id: str, has_runs: bool = True, legacy: bool = False, archive: bool = False,
                 sql: str = STATE_SQL, legacy_sql: str | None = None, archive_sql: str | None = None) -> list[RunState]:
    """A session's runs for its states, in Agno's order (legacy-column runs first), with the runs
    Lastgood archived (``archived_by``)."""
    runs: list[RunState] = []
    if has_runs:
        for run_id, parent, index, created, valid, messages, state in conn.execute(sql, (session_id,)).fetchall():
            key = (1 if index is None else 2, index or 0, created or 0, run_id)
            runs.append(RunState(run_id, parent, loads(messages), loads(state), valid == 1, key))
    table = {r.run_id for r in runs}
    if legacy:
        sql_legacy = legacy_sql or "SELECT runs FROM agno_sessions WHERE session_id = ?"
        row = conn.execute(sql_legacy, (session_id,)).fetchone()
        for position, run in enumerate(loads(row[0]) if row and row[0] is not None else []):
            if isinstance(run, dict) and run.get("run_id") not in table:
                runs.append(RunState(run.get("run_id"), run.get("parent_run_id"), run.get("messages"),
                                     run.get("session_state"), True, (0, position, 0, "")))
    if archive:
        for action, text in conn.execute(archive_sql or ARCHIVED_SQL, (session_id,)).fetchall():
            row = loads(text) or {}
            if row.get("run_id") in table:
                continue
            run = loads(row.get("run_data"))
            index = row.get("run_index")
            runs.append(RunState(row.get("run_id"), row.get("parent_run_id"),
                                 run.get("messages") if isinstance(run, dict) else None,
                                 run.get("session_state") if isinstance(run, dict) else None, isinstance(run, dict),
                                 (1 if index is None else 2, index or 0, row.get("created_at") or 0, row.get("run_id")),
                                 action))
    return sorted(runs, key=lambda r: (r.archived_by or "", r.key))
