"""The PostgreSQL dialect of session-store retention (the flow: :mod:`.session_retention`).

Rows are archived as the server prints them (every column as text, NULL kept) and inserted back with
a cast to each column's type as it is now (``jsonb``, ``timestamp``, ``bytea``… read back from their
text exactly). The snapshot is a ``REPEATABLE READ, READ ONLY`` transaction; the delete and the undo
run in the format's recovery transaction (its journal lock), and take the session's row
``FOR UPDATE`` first — what the frameworks' own writers lock (ADK's ``append_event``, Agno's
``upsert_session``) — before the digest is compared again. A store on a database server has no
"beside": the core puts the archive under ``$LASTGOOD_HOME/archives/`` unless ``--archive`` is given.

Space: a DELETE leaves dead rows; (auto)VACUUM makes their space reusable inside the tables, and the
files on disk shrink only with VACUUM FULL, which locks the tables (never run here).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

from lastgood.readers.common import sqljournal
from lastgood.readers.common.session_retention import SessionRetention, SessionTable, quote, require_columns
from lastgood.readers.journal import breakdown_row

COLUMNS_SQL = """SELECT a.attname, format_type(a.atttypid, a.atttypmod) FROM pg_attribute a
    WHERE a.attrelid = %s::regclass AND a.attnum > 0 AND NOT a.attisdropped ORDER BY a.attnum"""
VACUUM_NOTE = ("DELETE leaves the rows' space to autovacuum, which makes it reusable inside the tables (new sessions "
               "fill it); the files on disk shrink only with VACUUM FULL, which locks the tables (Lastgood never runs it)")


class PostgresSessionRetention(SessionRetention):
    """The PostgreSQL dialect (a format gives its tables, key and classes, as for SQLite)."""

    placeholder = "%s"

    def default_archive(self) -> str | None:
        return None

    @contextmanager
    def _snapshot(self) -> Iterator[Any]:
        from lastgood.readers.common.postgres import connect_readonly

        conn = connect_readonly(self.url)
        try:
            conn.execute("SET DateStyle = ISO")
            yield conn
        finally:
            conn.rollback()
            conn.close()

    def _columns(self, conn: Any, table: SessionTable) -> list[tuple[str, str]]:
        cache = self.__dict__.setdefault("_column_cache", {})
        if table.sql_name not in cache:
            cache[table.sql_name] = [(n, t) for n, t in conn.execute(COLUMNS_SQL, (table.sql_name,)).fetchall()]
        return cache[table.sql_name]

    def _rows(self, conn: Any, table: SessionTable, key: Sequence[Any]) -> list[dict[str, Any]]:
        columns = self._columns(conn, table)
        select = ", ".join(f"{quote(n)}::text" for n, _ in columns)
        order = ", ".join(str(i + 1) for i in range(len(columns)))
        rows = conn.execute(f"SELECT {select} FROM {table.sql_name} WHERE {self._where(table)} ORDER BY {order}",
                            tuple(key)).fetchall()
        return [dict(zip([n for n, _ in columns], row)) for row in rows]

    def _insert(self, conn: Any, table: SessionTable, rows: Sequence[Mapping[str, Any]]) -> None:
        types = dict(self._columns(conn, table))
        for record in rows:
            names = list(record)
            require_columns(table.name, set(names) - set(types))
            values = ", ".join(f"%s::{types[n]}" for n in names)
            conn.execute(f"INSERT INTO {table.sql_name} ({', '.join(quote(n) for n in names)}) VALUES ({values})",
                         [record[n] for n in names])

    def _lock(self, conn: Any, tables: Sequence[SessionTable], key: Sequence[Any]) -> None:
        conn.execute("SET LOCAL DateStyle = ISO")
        first = tables[0]
        conn.execute(f"SELECT 1 FROM {first.sql_name} WHERE {self._where(first)} FOR UPDATE", tuple(key))

    def _journal(self, conn: Any) -> list[dict[str, Any]]:
        return sqljournal.entries(conn) if sqljournal.postgres_exists(conn) else []

    # ---- what the store holds, and space ------------------------------------------------------------

    def breakdown(self, channels: bool = True, sample: int = 200) -> list[dict[str, Any]]:
        """Bytes per table (``pg_total_relation_size``: rows, TOAST, indexes) and per session and table
        (``pg_column_size`` of its rows)."""
        out: list[dict[str, Any]] = []
        with self._snapshot() as conn:
            run_of = self.run_namer(conn)
            for t in self.session_tables(conn):
                count, size = conn.execute(f"SELECT count(*), pg_total_relation_size(%s::regclass) FROM {t.sql_name}",
                                           (t.sql_name,)).fetchone()
                out.append(breakdown_row(t.name, int(count), int(size)))
                group = ", ".join(quote(c) for c in t.columns)
                for values in conn.execute(f"SELECT {group}, count(*), coalesce(sum(pg_column_size(x.*)), 0) "
                                           f"FROM {t.sql_name} x GROUP BY {group}").fetchall():
                    out.append(breakdown_row(t.name, int(values[-2]), int(values[-1]), run_id=run_of(values[:-2])))
        return out

    def footprint(self) -> dict[str, Any]:
        with self._snapshot() as conn:
            tables = self.session_tables(conn)
            files, dead = {}, {}
            for t in tables:
                size, count = conn.execute("""SELECT pg_total_relation_size(c.oid), coalesce(s.n_dead_tup, 0)
                    FROM pg_class c LEFT JOIN pg_stat_user_tables s ON s.relid = c.oid WHERE c.oid = %s::regclass""",
                                           (t.sql_name,)).fetchone()
                files[t.name], dead[t.name] = int(size), int(count)
        notes = []
        if any(dead.values()):
            notes.append(f"{sum(dead.values()):,} dead rows wait for (auto)VACUUM, which makes their space reusable "
                         "inside the tables; the files shrink only with VACUUM FULL, which locks the tables")
        return {"files": files, "bytes": sum(files.values()), "dead_rows": dead, "free_bytes": None, "notes": notes}

    def reclaim(self, vacuum: bool = False) -> dict[str, Any]:
        before = self.footprint()
        notes = [VACUUM_NOTE]
        if vacuum:
            import psycopg

            with psycopg.connect(self.url, autocommit=True) as conn:
                conn.execute("VACUUM (ANALYZE) " + ", ".join(t.sql_name for t in self._tables()))
            notes.insert(0, "VACUUM (ANALYZE) ran: the deleted rows' space is reusable now")
        after = self.footprint()
        return {"before_bytes": before["bytes"], "after_bytes": after["bytes"],
                "returned_bytes": max(0, before["bytes"] - after["bytes"]), "free_bytes": None, "vacuumed": vacuum,
                "dead_rows": after["dead_rows"], "notes": notes}

    def _tables(self) -> list[SessionTable]:
        with self._snapshot() as conn:
            return self.session_tables(conn)
