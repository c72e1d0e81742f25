"""What ADK's ``DatabaseSessionService`` on SQLite and on PostgreSQL have in common, read the same way.

A dialect (``sqlite.py``, ``postgres.py``) keeps only its connection and its SQL: it lists the
``events`` rows (:mod:`lastgood.readers.adk.model`'s row shape, one SQL pass, ``event_data`` parsed
by the database), finds the session of a run, reads one session for replay (each event's state
delta, rewind target and conversation fields, in ADK's order) and one event's raw ``event_data``.
Everything else lives here or in :class:`lastgood.readers.common.sessions.SessionStoreReader` (the
scan, the presence check, recovery, which Agno's readers share): the state at an event
(:mod:`lastgood.readers.adk.replay`), the data check, the conversation messages.

The model: run = one session (run id = the session id; ``app:user:id`` when the same id exists for
several apps or users), namespace "", checkpoint = one event (its id), ordered by
``(timestamp, id)`` as ADK reads them; ``agent`` = the app name; state = ``{"state", "messages"}``
(see :mod:`lastgood.readers.adk.replay`).
"""

from __future__ import annotations

import threading
from abc import abstractmethod
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from lastgood.checks import Check
from lastgood.errors import CheckpointNotFound, DecodeError
from lastgood.readers.adk import model
from lastgood.readers.adk.messages import normalize_message
from lastgood.readers.adk.replay import SessionData, check_event, state_at
from lastgood.readers.base import CheckpointRecord, EventRecord, Finding
from lastgood.readers.common.sessions import SessionStoreReader

SessionKey = model.SessionKey
TABLES = {"sessions": {"app_name", "user_id", "id", "state", "create_time", "update_time"},
          "events": {"id", "app_name", "user_id", "session_id", "invocation_id", "timestamp"},
          "app_states": {"app_name", "state"}, "user_states": {"app_name", "user_id", "state"}}
CACHED_SESSIONS = 4


def is_adk_schema(schema: Mapping[str, Any] | None) -> bool:
    """The four tables of ``DatabaseSessionService`` with ADK's columns (schema v1 or v0)."""
    return bool(schema) and all(cols <= set(schema.get(table) or ()) for table, cols in TABLES.items())


V0_MESSAGE = ("this is ADK's schema v0 (events with one column per field and pickled actions): Lastgood "
              "never unpickles; migrate it to v1 with ADK's migration tool "
              "(google.adk.sessions.migration.migration_runner) and open the migrated database")


@dataclass
class RawListing:
    """What a dialect's listing query returned."""

    token: str
    full: bool
    rows: list[model.Row] | None  # None: nothing changed since the token
    orphans: set[SessionKey]
    shared_ids: frozenset[str]
    check_order: bool  # rows carry the write order (SQLite rowid)


class AdkReader(SessionStoreReader):
    """The base of ``DatabaseSessionService`` readers (see the module docstring)."""

    missing_message = "the event row no longer exists"

    def __init__(self, url: str, storage_options: Mapping[str, Any] | None = None) -> None:
        super().__init__(url, storage_options)
        self._lock = threading.RLock()
        self._keys: dict[str, SessionKey] = {}
        self._cache: dict[SessionKey, tuple[Any, SessionData]] = {}

    # ---- what a dialect provides -------------------------------------------------------

    @abstractmethod
    def _listing(self, since: str | None) -> RawListing:
        """The rows to list: every event (full), the events of the sessions changed since the
        token (incremental), or none when the token is unchanged."""

    @abstractmethod
    def _find_sessions(self, run_id: str) -> list[SessionKey]:
        """The sessions (or orphan events' sessions) whose run id is ``run_id``."""

    @abstractmethod
    def _read_session(self, key: SessionKey) -> SessionData:
        """One session's rows and all its events in ADK's order."""

    @abstractmethod
    def _session_stamp(self, key: SessionKey) -> Any:
        """A value that changes when the session's events or state rows change."""

    @abstractmethod
    def _event_data(self, key: SessionKey, event_id: str) -> bytes | None:
        """The raw ``event_data`` of one event (CheckpointNotFound when the row is gone)."""

    @abstractmethod
    def _existing(self, ids: Sequence[str]) -> set[str]:
        """Which of these event ids are still in the table."""

    # ---- listing ---------------------------------------------------------------------------

    def _list_rows(self, raw: RawListing) -> model.Listing:
        return model.list_rows(raw.rows or [], raw.shared_ids, raw.orphans, raw.check_order)

    def _events_table(self, events: Sequence[EventRecord]) -> Any:
        return model.events_table(events)

    # ---- one checkpoint ---------------------------------------------------------------------

    def session_key(self, run_id: str) -> SessionKey:
        """The (app, user, session id) of a run; CheckpointNotFound when there is none."""
        with self._lock:
            if run_id in self._keys:
                return self._keys[run_id]
        found = self._find_sessions(run_id)
        if len(found) != 1:
            raise CheckpointNotFound(f"no ADK session {run_id!r}" if not found else
                                     f"session id {run_id!r} exists for several apps/users: name it "
                                     "app:user:id")
        with self._lock:
            self._keys[run_id] = found[0]
        return found[0]

    def session_data(self, key: SessionKey) -> SessionData:
        """The session's replay data (cached while the session is unchanged)."""
        stamp = self._session_stamp(key)
        with self._lock:
            hit = self._cache.get(key)
            if hit is not None and hit[0] == stamp and stamp is not None:
                return hit[1]
        data = self._read_session(key)
        with self._lock:
            self._cache[key] = (stamp, data)
            while len(self._cache) > CACHED_SESSIONS:
                self._cache.pop(next(iter(self._cache)))
        return data

    def load_state(self, record: CheckpointRecord) -> Any:
        """``{"state": merged state at the event, "messages": the live conversation up to it}``."""
        data = self.session_data(self.session_key(record.run_id))
        position = data.index.get(record.checkpoint_id)
        if position is None:
            raise CheckpointNotFound(f"event {record.checkpoint_id} of session {record.run_id!r} not found")
        return state_at(data, position)

    def read_blob(self, record: CheckpointRecord) -> bytes:
        return self._event_data(self.session_key(record.run_id), record.checkpoint_id) or b""

    # ---- integrity ---------------------------------------------------------------------------

    def _data_findings(self, record: CheckpointRecord, batch: dict[Any, Any]) -> Iterator[Finding]:
        """Each event loads and its state replays (one read of each session a batch, not one replay
        per event; nor, on PostgreSQL, one query per event for the session's stamp)."""
        try:
            key = self.session_key(record.run_id)
            data = batch.get(key)
            if data is None:
                data = batch[key] = self.session_data(key)
            position = data.index.get(record.checkpoint_id)
            if position is None:
                raise CheckpointNotFound(f"event {record.checkpoint_id} is not in session {record.run_id!r}")
            check_event(data, position)
        except DecodeError as exc:
            yield Finding(exc.check, "error", str(exc), record.run_id, record.namespace, record.checkpoint_id)
        except CheckpointNotFound as exc:
            yield Finding(Check.MISSING, "error", str(exc), record.run_id, record.namespace, record.checkpoint_id)

    # ---- capabilities -------------------------------------------------------------------------

    def normalize_message(self, value: Any) -> dict[str, Any] | None:
        return normalize_message(value)
