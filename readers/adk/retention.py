"""Retention of Google ADK ``DatabaseSessionService`` databases (SQLite, PostgreSQL).

What a prune removes is whole stale sessions (:mod:`lastgood.readers.common.session_retention`): the
session's ``sessions`` row and its ``events`` (rowids kept: the reader's out-of-order check follows
them), archived first, deleted in one transaction (SQLite: ``BEGIN IMMEDIATE``, foreign keys on, as
ADK's engine has them; PostgreSQL: the session's row ``FOR UPDATE``, as ``append_event`` takes it) with the
``prune`` entry of the database's ``lastgood_journal`` (the journal its
rewinds use). ``app_states`` and ``user_states`` are shared by every session of the app or user:
they stay. The undo inserts the rows back as they were, so ``DatabaseSessionService.get_session``
returns the same session, events and state as before the prune.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Sequence
from typing import Any

from lastgood.readers.adk.model import run_id_of
from lastgood.readers.common.session_retention import SessionTable, SqliteSessionRetention, has_rowid
from lastgood.readers.common.session_retention_pg import PostgresSessionRetention


class _AdkSessions:
    """ADK's session rows: ``sessions`` (keyed app, user, id) and ``events`` (app, user, session id)."""

    def session_tables(self, conn: Any) -> list[SessionTable]:
        rowid = isinstance(conn, sqlite3.Connection)
        return [SessionTable("sessions", ("app_name", "user_id", "id"), rowid and has_rowid(conn, "sessions")),
                SessionTable("events", ("app_name", "user_id", "session_id"), rowid and has_rowid(conn, "events"))]

    def session_key(self, conn: Any, run_id: str) -> tuple[Any, ...] | None:
        found = self._module().find_sessions(conn, run_id)
        return tuple(found[0]) if len(found) == 1 else None

    def session_label(self, run_id: str) -> str:
        return f"ADK session {run_id!r}"

    def run_namer(self, conn: Any) -> Callable[[Sequence[Any]], str]:
        shared = frozenset(r[0] for r in conn.execute(self._module().SHARED_IDS_SQL).fetchall())
        return lambda key: run_id_of((str(key[0]), str(key[1]), str(key[2])), shared)

    def _module(self) -> Any:
        raise NotImplementedError


class AdkSqliteRetention(_AdkSessions, SqliteSessionRetention):
    """``RetentionBackend`` of the ``adk-sqlite`` reader."""

    reader_name = "adk-sqlite"
    reader_class = "lastgood.readers.adk.sqlite:AdkSqliteReader"
    recovery_class = "lastgood.readers.adk.recovery:SqliteRecovery"

    def _module(self) -> Any:
        from lastgood.readers.adk import sqlite

        return sqlite


class AdkPostgresRetention(_AdkSessions, PostgresSessionRetention):
    """``RetentionBackend`` of the ``adk-postgres`` reader."""

    reader_name = "adk-postgres"
    reader_class = "lastgood.readers.adk.postgres:AdkPostgresReader"
    recovery_class = "lastgood.readers.adk.recovery:PostgresRecovery"

    def _module(self) -> Any:
        from lastgood.readers.adk import postgres

        return postgres
