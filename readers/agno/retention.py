"""Retention of Agno ``SqliteDb`` / ``PostgresDb`` stores.

What a prune removes is whole stale sessions (:mod:`lastgood.readers.common.session_retention`): the
session's ``agno_sessions`` row (its state, summary, metrics; Agno 2.x's ``runs`` column with it), its
``agno_runs`` rows and the rows a restore moved into ``lastgood_agno_archive``, archived first, then
deleted in one transaction (SQLite: ``BEGIN IMMEDIATE``, foreign keys on, as every ``SqliteDb``
connection has them; PostgreSQL: the session's row ``FOR UPDATE``, as ``upsert_session`` takes it, in the
schema ``PostgresDb(db_schema=…)`` names) with the ``prune`` entry of the store's ``lastgood_journal`` (the journal its restores use).
The undo inserts the rows back as they were, so ``get_session`` / ``get_runs`` return the
same session and runs as before the prune.
"""

from __future__ import annotations

import sqlite3
from typing import Any

from lastgood.errors import ReaderError
from lastgood.readers.common.session_retention import SessionTable, SqliteSessionRetention, tables_with
from lastgood.readers.common.session_retention_pg import PostgresSessionRetention

SESSIONS, RUNS, ARCHIVE = "agno_sessions", "agno_runs", "lastgood_agno_archive"


class AgnoSqliteRetention(SqliteSessionRetention):
    """``RetentionBackend`` of the ``agno-sqlite`` reader."""

    reader_name = "agno-sqlite"
    reader_class = "lastgood.readers.agno.sqlite:AgnoSqliteReader"
    recovery_class = "lastgood.readers.agno.recovery:SqliteRecovery"

    def session_tables(self, conn: sqlite3.Connection) -> list[SessionTable]:
        own = (SESSIONS, RUNS, ARCHIVE)
        return [t for t in tables_with(conn, ("session_id",), first=own) if t.name in own]

    def session_key(self, conn: sqlite3.Connection, run_id: str) -> tuple[Any, ...] | None:
        return (run_id,)

    def session_label(self, run_id: str) -> str:
        return f"Agno session {run_id!r}"


class AgnoPostgresRetention(PostgresSessionRetention):
    """``RetentionBackend`` of the ``agno-postgres`` reader (tables in the Agno schema)."""

    reader_name = "agno-postgres"
    reader_class = "lastgood.readers.agno.postgres:AgnoPostgresReader"
    recovery_class = "lastgood.readers.agno.recovery:PostgresRecovery"

    def session_tables(self, conn: Any) -> list[SessionTable]:
        from lastgood.readers.agno.postgres import agno_schemas, pick_schema

        found = agno_schemas(conn)
        schema = pick_schema(found, self.storage_options.get("db_schema"))
        if schema is None:
            raise ReaderError("no Agno tables (agno_sessions + agno_runs) in this database")
        present = found[schema]
        return [SessionTable(n, ("session_id",), False, schema) for n in (SESSIONS, RUNS, ARCHIVE)
                if "session_id" in present.get(n, frozenset())]

    def session_key(self, conn: Any, run_id: str) -> tuple[Any, ...] | None:
        return (run_id,)

    def session_label(self, run_id: str) -> str:
        return f"Agno session {run_id!r}"
