"""Reader for Agno ``PostgresDb`` stores (``agno_sessions`` + ``agno_runs``, schema 3.0).

The same tables as ``SqliteDb``'s with PostgreSQL types (``agno/db/postgres/schemas.py``: JSONB for
``run_data``/``session_data``…, BIGINT Unix seconds), in the schema ``PostgresDb(db_schema=…)`` names
— ``ai`` by default, usually not on the search path. The schema is found by looking for the tables
(``storage_options={"db_schema": …}`` picks one when several hold Agno tables); every transaction
then puts it first on its search path, so the SQL names tables as on SQLite.

Every statement runs in a ``READ ONLY``, ``REPEATABLE READ`` transaction
(``common.postgres.connect_readonly``); nothing is created. PostgreSQL keeps no insertion order: the
scan token is the runs' newest ``updated_at``, the count below it, and the status and size of the
runs at it.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

from lastgood.errors import CheckpointNotFound, ReaderError
from lastgood.readers.agno import model
from lastgood.readers.agno.base import AgnoReader, RawListing, RunState, is_agno_schema
from lastgood.readers.agno.sqlite import ARCHIVE_TABLE, loads, session_runs
from lastgood.readers.base import backend_named
from lastgood.readers.common.lazy import lazy_module
from lastgood.readers.common.sessions import PostgresDialect
from lastgood.readers.common.urls import display_url
from lastgood.readers.journal import RetentionBackend

# psycopg (and the shared Postgres helpers, which import it) on first use: sniffing a SQLite file asks
# this reader too, and must not pay psycopg's import (~0.3 s)
psycopg = lazy_module("psycopg")
pgc = lazy_module("lastgood.readers.common.postgres")



TOKEN_VERSION = 1
_UPD = "coalesce(updated_at, created_at)"
_FP = "run_id || '|' || coalesce(status, '') || '|' || pg_column_size(run_data)"
LIST_SQL = f"""SELECT NULL::bigint, session_id, run_id, run_index, created_at, {_UPD}, status, run_type, agent_id,
  team_id, workflow_id, user_id, parent_run_id, pg_column_size(run_data), {model.postgres_info()},
  CASE WHEN jsonb_typeof(run_data) = 'object' THEN 1 ELSE 0 END, 'agno_runs'
FROM agno_runs WHERE {{where}}"""
TOKEN_SQL = f"SELECT count(*), max({_UPD}) FROM agno_runs"
AT_MAX_SQL = f"SELECT {_FP} FROM agno_runs WHERE {_UPD} = %s ORDER BY 1"
BELOW_SQL = f"SELECT count(*) FROM agno_runs WHERE {_UPD} < %s"
AFTER_SQL = f"SELECT run_id FROM agno_runs WHERE {_UPD} > %s"
TOUCHED = f"""session_id IN (SELECT session_id FROM agno_runs WHERE {_UPD} > %(newest)s
  OR ({_UPD} = %(newest)s AND NOT ({_FP} = ANY(%(fp)s))))"""
ORPHANS_SQL = """SELECT DISTINCT session_id FROM agno_runs r
  WHERE NOT EXISTS (SELECT 1 FROM agno_sessions s WHERE s.session_id = r.session_id)"""
STATE_SQL = """SELECT run_id, parent_run_id, run_index, created_at,
  CASE WHEN jsonb_typeof(run_data) = 'object' THEN 1 ELSE 0 END, (run_data -> 'messages')::text,
  (run_data -> 'session_state')::text
FROM agno_runs WHERE session_id = %s"""
LEGACY_SQL = "SELECT session_id, runs, agent_id, user_id FROM agno_sessions WHERE runs IS NOT NULL AND {where}"
ARCHIVED_SQL = f"""SELECT action_id, row FROM {ARCHIVE_TABLE} WHERE session_id = %s AND kind = 'run'
  AND restored_by IS NULL ORDER BY seq"""
ARCHIVE_LIST_SQL = f"""SELECT action_id, row FROM {ARCHIVE_TABLE} WHERE kind = 'run' AND restored_by IS NULL
  AND run_id NOT IN (SELECT run_id FROM agno_runs) AND {{where}} ORDER BY seq"""
SCHEMAS_SQL = """SELECT table_schema, table_name, array_agg(column_name::text) FROM information_schema.columns
  WHERE table_name IN ('agno_sessions', 'agno_runs', %s) GROUP BY table_schema, table_name"""


def agno_schemas(conn: Any) -> dict[str, dict[str, frozenset[str]]]:
    """Schema -> {table: columns} of every schema holding Agno tables (and Lastgood's archive)."""
    found: dict[str, dict[str, frozenset[str]]] = {}
    for schema, table, columns in conn.execute(SCHEMAS_SQL, (ARCHIVE_TABLE,)).fetchall():
        found.setdefault(schema, {})[table] = frozenset(columns or ())
    return {s: tables for s, tables in found.items() if is_agno_schema(tables)}


def pick_schema(found: Mapping[str, Any], wanted: str | None) -> str | None:
    """The schema to read: the one asked for, the only one, else Agno's default ``ai``."""
    if wanted:
        return wanted if wanted in found else None
    if len(found) == 1:
        return next(iter(found))
    return "ai" if "ai" in found else ("public" if "public" in found else None)


def use_schema(conn: Any, schema: str) -> None:
    """Put ``schema`` first on the search path for the current transaction."""
    conn.execute("SELECT set_config('search_path', %s, true)", (f'"{schema}", public',))


class AgnoPostgresReader(PostgresDialect, AgnoReader):
    """Agno PostgresDb store, read through read-only transactions."""

    name = "agno-postgres"
    description = "Agno PostgresDb session store (agno_sessions + agno_runs, schema 3.0, in its db_schema)"
    recovery_class = "lastgood.readers.agno.recovery:PostgresRecovery"
    schema: str  # the schema holding the Agno tables (found when the reader is made)
    tables: dict[str, frozenset[str]]  # its tables' columns

    def _check_store(self) -> None:
        with self._read(layout=False) as cur:
            found = agno_schemas(cur)
        schema = pick_schema(found, self.storage_options.get("db_schema"))
        if schema is None:
            raise ReaderError(f"{display_url(self.url)}: {_no_schema(self.storage_options.get('db_schema'), found)}")
        self.schema, self.tables = schema, found[schema]

    @classmethod
    def _sniff_database(cls, url: str) -> bool:
        conn = pgc.connect_readonly(url)
        try:
            return bool(agno_schemas(conn))
        finally:
            conn.close()

    def retention(self) -> RetentionBackend:
        """Prune: whole stale sessions, archived, then deleted (:mod:`.retention`)."""
        return backend_named("lastgood.readers.agno.retention:AgnoPostgresRetention", self)  # type: ignore[return-value]

    @contextmanager
    def _read(self, layout: bool = True) -> Iterator[Any]:
        """A cursor in a fresh read-only transaction, the Agno schema first on its search path."""
        with self._pg.cursor() as cur:
            if layout:
                use_schema(cur, self.schema)
                self.tables = agno_schemas(cur).get(self.schema, self.tables)
            yield cur

    @property
    def legacy(self) -> bool:
        return "runs" in self.tables.get("agno_sessions", ())

    @property
    def archive(self) -> bool:
        return ARCHIVE_TABLE in self.tables

    # ---- listing ----------------------------------------------------------------------------------
    def _listing(self, since: str | None) -> RawListing:
        with self._read() as cur:
            count, newest = cur.execute(TOKEN_SQL).fetchone()
            below = cur.execute(BELOW_SQL, (newest,)).fetchone()[0] if newest is not None else 0
            at_max = [r[0] for r in cur.execute(AT_MAX_SQL, (newest,)).fetchall()]
            sessions = list(cur.execute("SELECT count(*) FROM agno_sessions").fetchone())
            if self.legacy:
                sessions.append(cur.execute("SELECT coalesce(sum(length(runs::text)), 0) FROM agno_sessions "
                                            "WHERE runs IS NOT NULL").fetchone()[0])
            token = json.dumps({"v": TOKEN_VERSION, "runs": [count, newest, below, at_max], "sessions": sessions},
                               sort_keys=True, default=str)
            if since == token:
                return RawListing(token, False, None, set())
            touched = self._touched(cur, since, newest, sessions)
            where, params = ("TRUE", {}) if touched is None else (TOUCHED, touched)
            rows = cur.execute(LIST_SQL.replace("{where}", where), params).fetchall()
            names = None if touched is None else {r[model.SESSION] for r in rows}
            rows += self._extra_rows(cur, names)
            orphans = {r[0] for r in cur.execute(ORPHANS_SQL).fetchall()}
        return RawListing(token, touched is None, rows, orphans)

    @staticmethod
    def _touched(cur: Any, since: str | None, newest: Any, sessions: list[Any]) -> dict[str, Any] | None:
        old = loads(since) if since else None
        if not isinstance(old, dict) or old.get("v") != TOKEN_VERSION:
            return None
        try:
            _count, old_newest, below, at_max = old["runs"]
        except (KeyError, TypeError, ValueError):
            return None
        old_sessions = old.get("sessions") or [0]
        if old_newest is None or newest is None or newest < old_newest or sessions[0] < old_sessions[0] \
                or sessions[1:] != old_sessions[1:]:
            return None
        if cur.execute(BELOW_SQL, (old_newest,)).fetchone()[0] != below:
            return None
        still = {r[0].split("|")[0] for r in cur.execute(AT_MAX_SQL, (old_newest,)).fetchall()}
        still |= {r[0] for r in cur.execute(AFTER_SQL, (old_newest,)).fetchall()}
        if any(fp.split("|")[0] not in still for fp in at_max):
            return None
        return {"newest": old_newest, "fp": at_max}

    def _extra_rows(self, cur: Any, sessions: set[str] | None) -> list[model.Row]:
        """Runs only in the legacy column, and the runs Lastgood archived."""
        rows: list[model.Row] = []
        where, params = ("TRUE", ()) if sessions is None else ("session_id = ANY(%s)", (sorted(sessions),))
        if self.legacy:
            for session, blob, agent, user in cur.execute(LEGACY_SQL.format(where=where), params).fetchall():
                ids = {r[0] for r in cur.execute("SELECT run_id FROM agno_runs WHERE session_id = %s",
                                                 (session,)).fetchall()}
                rows += model.legacy_rows(session, blob, ids, agent, user)
        if self.archive:
            found = (model.archived_row(action, loads(text) or {})
                     for action, text in cur.execute(ARCHIVE_LIST_SQL.format(where=where), params).fetchall())
            rows += [r for r in found if r is not None]
        return rows

    # ---- one session -------------------------------------------------------------------------------
    def _session_runs(self, session_id: str) -> list[RunState]:
        with self._read() as cur:
            return session_runs(cur, session_id, True, self.legacy, self.archive, STATE_SQL,
                                "SELECT runs FROM agno_sessions WHERE session_id = %s", ARCHIVED_SQL)

    def _run_data(self, session_id: str, run_id: str) -> bytes:
        with self._read() as cur:
            row = cur.execute("SELECT run_data::text FROM agno_runs WHERE session_id = %s AND run_id = %s",
                              (session_id, run_id)).fetchone()
            if row is None and self.archive:
                row = cur.execute(f"SELECT row FROM {ARCHIVE_TABLE} WHERE session_id = %s AND run_id = %s "
                                  "AND restored_by IS NULL ORDER BY seq DESC LIMIT 1", (session_id, run_id)).fetchone()
                row = (json.dumps((loads(row[0]) or {}).get("run_data")),) if row else None
            if row is None and self.legacy:
                blob = cur.execute("SELECT runs FROM agno_sessions WHERE session_id = %s", (session_id,)).fetchone()
                run = next((r for r in loads(blob[0]) or () if isinstance(r, dict) and r.get("run_id") == run_id),
                           None) if blob else None
                row = (json.dumps(run),) if run is not None else None
        if row is None:
            raise CheckpointNotFound(f"run {run_id} of session {session_id!r} not found")
        return (row[0] or "").encode()

    def _existing(self, ids: Sequence[str]) -> set[str]:
        if not ids:
            return set()
        with self._read() as cur:
            found = {r[0] for r in cur.execute("SELECT run_id FROM agno_runs WHERE run_id = ANY(%s)",
                                               (list(ids),)).fetchall()}
            if self.archive:
                found |= {r[0] for r in cur.execute(f"SELECT run_id FROM {ARCHIVE_TABLE} WHERE run_id = ANY(%s) "
                                                    "AND restored_by IS NULL", (list(ids),)).fetchall()}
        return found


def _no_schema(wanted: str | None, found: Mapping[str, Any]) -> str:
    where = f"schema {wanted!r}" if wanted else "any schema"
    hint = f" (found in {', '.join(sorted(found))}: name one with db_schema)" if found else ""
    return f"no Agno tables (agno_sessions + agno_runs) in {where}{hint}"


def write_connection(url: str) -> Any:
    try:
        return psycopg.connect(url, autocommit=False, prepare_threshold=None)
    except psycopg.Error as exc:
        raise pgc.connect_error(url, exc) from None
