"""Reader for Google ADK ``DatabaseSessionService`` databases on SQLite (schema v1).

Tables (``google/adk/sessions/schemas/v1.py``): ``sessions`` (session-scoped state as JSON text),
``events`` (one row per event, the whole ``Event.model_dump`` in ``event_data``), ``app_states`` and
``user_states`` (the ``app:``/``user:`` scopes, keys without prefix), ``adk_internal_metadata``.
Timestamps are SQLAlchemy ``DATETIME`` text, naive UTC (``YYYY-MM-DD HH:MM:SS.ffffff``).

Reading never writes: the file is opened read-only (``common.sqlite.connect_readonly``: no
``-wal``/``-shm`` left behind). The listing is SQL alone: the key columns, the timestamp as epoch
microseconds and one ``json_extract`` of the few fields the model needs (``rows.INFO_PATHS``) per
event, taken by rowid ranges; an incremental scan (only appends since the token) re-lists just the
sessions that gained events. Rowids follow insertion order, so events whose timestamp sorts them
before events written earlier are reported (``out-of-order``).
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager
from typing import Any

from lastgood.errors import CheckpointNotFound, DecodeError, ReaderError
from lastgood.readers.adk import model
from lastgood.readers.adk.base import V0_MESSAGE, AdkReader, RawListing, SessionKey, is_adk_schema
from lastgood.readers.adk.replay import SessionData, keys_by_run_id, matching_sessions, session_data
from lastgood.readers.base import backend_named
from lastgood.readers.common.gc_pause import gc_paused
from lastgood.readers.journal import RetentionBackend
from lastgood.readers.adk.sqlite_fetch import fetch_all, rows_where, take_prefetched
from lastgood.readers.common.sqlite import (NotUtf8, file_stamp, is_utf8, read_transaction, reading_past_bad_text,
                                            sqlite_path, sqlite_schema, table_columns)

TOKEN_VERSION = 1
TOUCHED = """(app_name, user_id, session_id) IN (SELECT app_name, user_id, session_id FROM events WHERE rowid > ?
  UNION SELECT app_name, user_id, id FROM sessions WHERE rowid > ?)"""
COUNTS_SQL = """SELECT (SELECT coalesce(max(rowid), 0) FROM events), (SELECT count(*) FROM events),
  (SELECT coalesce(max(rowid), 0) FROM sessions), (SELECT count(*) FROM sessions)"""
ORPHANS_SQL = """SELECT DISTINCT e.app_name, e.user_id, e.session_id FROM events e WHERE NOT EXISTS (
  SELECT 1 FROM sessions s WHERE s.app_name = e.app_name AND s.user_id = e.user_id AND s.id = e.session_id)"""
SHARED_IDS_SQL = """SELECT session_id FROM (SELECT DISTINCT app_name, user_id, session_id FROM events)
  GROUP BY session_id HAVING count(*) > 1
  UNION SELECT id FROM sessions GROUP BY id HAVING count(*) > 1"""
FIND_SQL = """SELECT app_name, user_id, id FROM sessions WHERE id = ? OR app_name || ':' || user_id || ':' || id = ?
  UNION SELECT DISTINCT app_name, user_id, session_id FROM events
  WHERE session_id = ? OR app_name || ':' || user_id || ':' || session_id = ?"""
ALL_KEYS_SQL = """SELECT app_name, user_id, id FROM sessions
  UNION SELECT DISTINCT app_name, user_id, session_id FROM events"""
RUN_KEYS_LIMIT = 200_000  # sessions whose run ids a reader holds in memory (~60 MB)
_OK = "(event_data IS NULL OR json_valid(event_data))"
REPLAY_SQL = f"""SELECT id, invocation_id,
  CASE WHEN event_data IS NULL THEN 1 WHEN json_valid(event_data) AND json_type(event_data) = 'object'
       THEN 1 ELSE 0 END,
  CASE WHEN NOT {_OK} THEN NULL ELSE CASE json_type(event_data, '$.actions.state_delta')
    WHEN 'object' THEN nullif(json_extract(event_data, '$.actions.state_delta'), '{{}}') WHEN 'null' THEN NULL
    ELSE '!' || json_type(event_data, '$.actions.state_delta') END END,
  CASE WHEN {_OK} THEN json_extract(event_data, '$.actions.rewind_before_invocation_id') END,
  CASE WHEN {_OK} THEN json_extract(event_data, '$.author', '$.content', '$.error_code', '$.error_message',
       '$.branch') END,
  CASE WHEN typeof(event_data) = 'text' THEN CAST(event_data AS BLOB) END
FROM events WHERE app_name = ? AND user_id = ? AND session_id = ? ORDER BY timestamp, id"""
STATE_SQL = """SELECT (SELECT state FROM sessions WHERE app_name = ?1 AND user_id = ?2 AND id = ?3),
  (SELECT state FROM app_states WHERE app_name = ?1),
  (SELECT state FROM user_states WHERE app_name = ?1 AND user_id = ?2)"""
STATE_COLUMNS = ("sessions.state", "app_states.state", "user_states.state")
BLOB_SQL = """SELECT CAST(event_data AS BLOB) FROM events
  WHERE app_name = ? AND user_id = ? AND session_id = ? AND id = ?"""
EXISTING_SQL = "SELECT id FROM events WHERE id IN (SELECT value FROM json_each(?))"


class AdkSqliteReader(AdkReader):
    """ADK DatabaseSessionService on SQLite, read-only."""

    name = "adk-sqlite"
    description = "Google ADK DatabaseSessionService on SQLite (sessions, events, app_states, user_states)"
    recovery_class = "lastgood.readers.adk.recovery:SqliteRecovery"

    def __init__(self, url: str, storage_options: Mapping[str, Any] | None = None) -> None:
        self.path = sqlite_path(url)
        super().__init__(url, storage_options)
        self._run_keys: dict[str, set[SessionKey]] | None = None
        self._run_keys_stamp: Any = None
        with self._read() as conn:
            if "event_data" not in table_columns(conn, "events"):
                raise ReaderError(f"{self.path}: {V0_MESSAGE}")

    @classmethod
    def sniff(cls, url: str, storage_options: Mapping[str, Any] | None = None) -> bool:
        return is_adk_schema(sqlite_schema(url))

    def retention(self) -> RetentionBackend:
        """Prune: whole stale sessions, archived, then deleted (:mod:`.retention`)."""
        return backend_named("lastgood.readers.adk.retention:AdkSqliteRetention", self)  # type: ignore[return-value]

    def _read(self) -> AbstractContextManager[sqlite3.Connection]:
        """A read-only connection holding one read transaction (a consistent snapshot)."""
        return read_transaction(self.path)

    # ---- listing -------------------------------------------------------------------------

    def _listing(self, since: str | None) -> RawListing:
        with self._read() as conn:
            ev_max, ev_count, ss_max, ss_count = conn.execute(COUNTS_SQL).fetchone()
            token = json.dumps({"v": TOKEN_VERSION, "events": [ev_max, ev_count],
                                "sessions": [ss_max, ss_count]}, sort_keys=True)
            if since == token:
                return RawListing(token, False, None, set(), frozenset(), True)
            after = _appended_after(conn, since, (ev_max, ev_count, ss_max, ss_count))
            shared = frozenset(r[0] for r in conn.execute(SHARED_IDS_SQL))
            with gc_paused():
                rows = self._all_rows(conn, ev_max) if after is None else self._session_rows(conn, *after)
            orphans = {tuple(r) for r in conn.execute(ORPHANS_SQL)}
        return RawListing(token, after is None, rows, orphans, shared, True)  # type: ignore[arg-type]

    def _all_rows(self, conn: sqlite3.Connection, last: int) -> list[model.Row]:
        prefetched = take_prefetched(self.path, last)
        return prefetched if prefetched is not None else fetch_all(self.path, conn, last)

    def _session_rows(self, conn: sqlite3.Connection, ev_after: int, ss_after: int) -> list[model.Row]:
        """Every event of the sessions that gained events (or a sessions row) since the token."""
        return rows_where(conn, TOUCHED, (ev_after, ss_after))

    # ---- one session -----------------------------------------------------------------------

    def _find_sessions(self, run_id: str) -> list[SessionKey]:
        """By a map of every run id the database holds, read once per state of its files (a lookup
        by SQL scans every event: 60 ms a session on 100,000 events, minutes for a data check)."""
        stamp = file_stamp(self.path)
        with self._lock:
            current, known = self._run_keys_stamp == stamp, self._run_keys
        if not current:  # read once per state of the files (None: too many to hold, looked up one by one)
            with self._read() as conn:
                known = run_keys(conn)
            with self._lock:
                self._run_keys, self._run_keys_stamp = known, stamp
        if known is not None:
            return matching_sessions(known.get(run_id, ()), run_id)
        with self._read() as conn:  # too many sessions to hold: one lookup at a time
            return find_sessions(conn, run_id)

    def _session_stamp(self, key: SessionKey) -> Any:
        return file_stamp(self.path)

    def _read_session(self, key: SessionKey) -> SessionData:
        with self._read() as conn:
            return read_session(conn, key)

    def _event_data(self, key: SessionKey, event_id: str) -> bytes | None:
        with self._read() as conn:
            row = conn.execute(BLOB_SQL, (*key, event_id)).fetchone()
        if row is None:
            raise CheckpointNotFound(f"event {event_id} of session {key[2]!r} not found")
        return bytes(row[0]) if row[0] is not None else None

    def _existing(self, ids: Sequence[str]) -> set[str]:
        if not ids:
            return set()
        with self._read() as conn:
            found = {r[0] for r in conn.execute(EXISTING_SQL, (json.dumps(list(ids)),))}
            replaced = {i for i in ids if "\ufffd" in i} - found
            if replaced:  # an id that is not UTF-8, listed with replacement characters: read the ids the same way
                with reading_past_bad_text(conn, lambda raw: raw.decode("utf-8", "replace")):
                    found |= {r[0] for r in conn.execute("SELECT id FROM events")} & replaced
        return found


def run_keys(conn: sqlite3.Connection, limit: int = RUN_KEYS_LIMIT) -> dict[str, set[SessionKey]] | None:
    """Every run id of the database (a session id, and its ``app:user:id`` form) -> the sessions (or
    orphan events' sessions) it names: what FIND_SQL finds for each; None beyond ``limit`` sessions."""
    keys = conn.execute(ALL_KEYS_SQL).fetchmany(limit + 1)
    return None if len(keys) > limit else keys_by_run_id(keys)


def find_sessions(conn: sqlite3.Connection, run_id: str) -> list[SessionKey]:
    """The (app, user, session id) keys whose run id is ``run_id`` (the session id, or app:user:id)."""
    return matching_sessions(conn.execute(FIND_SQL, (run_id, run_id, run_id, run_id)), run_id)


def read_session(conn: sqlite3.Connection, key: SessionKey) -> SessionData:
    """One session's state rows and every event in ADK's order, for replay. Text that is not UTF-8
    is read past (SQLite's JSON functions do, ADK's driver does not): such an event is marked, such
    a state row refuses the session."""
    rows, not_utf8 = [], []
    with reading_past_bad_text(conn):
        for *row, data in conn.execute(REPLAY_SQL, key):  # data: event_data's bytes, only to check them
            if not is_utf8(data) or any(isinstance(value, NotUtf8) for value in row):  # event_data, an id, a field
                row = [_text(row[0]), *(None if isinstance(value, NotUtf8) else value for value in row[1:])]
                not_utf8.append(row[0])
            rows.append(row)
        states = conn.execute(STATE_SQL, key).fetchone()
    bad = [name for name, value in zip(STATE_COLUMNS, states) if isinstance(value, NotUtf8)]
    if bad:
        raise DecodeError(f"{' and '.join(bad)} {'is' if len(bad) == 1 else 'are'} not UTF-8 text: ADK cannot "
                          "load this session (its database driver fails reading it)")
    return session_data(key, rows, states, not_utf8)


def _text(value: Any) -> Any:
    return value.decode("utf-8", "replace") if isinstance(value, NotUtf8) else value


def _appended_after(conn: sqlite3.Connection, since: str | None,
                    now: tuple[int, int, int, int]) -> tuple[int, int] | None:
    """(events rowid, sessions rowid) to list after when rows were only appended since ``since``."""
    try:
        old = json.loads(since) if since else None
    except ValueError:
        return None
    if not isinstance(old, dict) or old.get("v") != TOKEN_VERSION:
        return None
    try:
        (ev_max, ev_count), (ss_max, ss_count) = old["events"], old["sessions"]
    except (KeyError, TypeError, ValueError):
        return None
    for table, (old_max, old_count), (new_max, new_count) in (
            ("events", (ev_max, ev_count), now[:2]), ("sessions", (ss_max, ss_count), now[2:])):
        if new_max < old_max:
            return None
        added = conn.execute(f"SELECT count(*) FROM {table} WHERE rowid > ?", (old_max,)).fetchone()[0]
        if new_count - added != old_count:
            return None
    return int(ev_max), int(ss_max)
