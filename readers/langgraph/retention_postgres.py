"""Retention of a LangGraph PostgresSaver database: the SQL and connections (the flow: ``retention``).

Rows are archived with their JSONB as text (restored with ``::jsonb``: the same value) and their
BYTEA as bytes. A checkpoint's ``checkpoint_blobs`` are shared by every checkpoint of its thread
that has the same channel version: a prune archives and deletes only the blobs no kept checkpoint
references (each in the bundle of the newest pruned checkpoint that used it), and the deletion
re-checks that in its transaction. The read phase is one REPEATABLE READ snapshot; the deletions
take row locks only, so agents keep writing; the journal's append takes the same table lock as
every recovery action, for the few milliseconds it lasts.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

from lastgood.errors import ReaderError
from lastgood.readers.common.urls import display_url
from lastgood.readers.langgraph.retention import Key, LangGraphRetention, Thread
from lastgood.readers.langgraph.retention_progress import PARENTS, PROGRESS

TABLES = ("checkpoints", "checkpoint_writes", "checkpoint_blobs")
_UNNEST = "unnest(%s::text[], %s::text[], %s::text[]) AS k(thread_id, checkpoint_ns, checkpoint_id)"
FINGERPRINT = """pg_column_size(c.checkpoint) || ':' || coalesce(pg_column_size(c.metadata), 0) || '|' ||
    (SELECT count(*) || ':' || coalesce(sum(pg_column_size(w.blob)), 0) FROM checkpoint_writes w
     WHERE w.thread_id = c.thread_id AND w.checkpoint_ns = c.checkpoint_ns AND w.checkpoint_id = c.checkpoint_id)"""
# blobs the going checkpoints use that no other checkpoint of their thread does, with the newest going
# checkpoint that used each (its bundle holds it)
FREED_SQL = f"""
WITH k AS (SELECT * FROM {_UNNEST}),
going AS (SELECT c.thread_id, c.checkpoint_ns, c.checkpoint_id, v.key AS channel, v.value AS version
    FROM k JOIN checkpoints c USING (thread_id, checkpoint_ns, checkpoint_id)
    CROSS JOIN LATERAL jsonb_each_text(CASE jsonb_typeof(c.checkpoint -> 'channel_versions')
        WHEN 'object' THEN c.checkpoint -> 'channel_versions' ELSE '{{}}' END) AS v),
kept AS (SELECT DISTINCT c.thread_id, c.checkpoint_ns, v.key AS channel, v.value AS version
    FROM checkpoints c CROSS JOIN LATERAL jsonb_each_text(CASE jsonb_typeof(c.checkpoint -> 'channel_versions')
        WHEN 'object' THEN c.checkpoint -> 'channel_versions' ELSE '{{}}' END) AS v
    WHERE (c.thread_id, c.checkpoint_ns) IN (SELECT DISTINCT thread_id, checkpoint_ns FROM k)
      AND (c.thread_id, c.checkpoint_ns, c.checkpoint_id) NOT IN (SELECT thread_id, checkpoint_ns, checkpoint_id FROM k))
SELECT g.thread_id, g.checkpoint_ns, g.channel, g.version, max(g.checkpoint_id COLLATE "C")
FROM going g
WHERE NOT EXISTS (SELECT 1 FROM kept WHERE kept.thread_id = g.thread_id AND kept.checkpoint_ns = g.checkpoint_ns
                  AND kept.channel = g.channel AND kept.version = g.version)
  AND EXISTS (SELECT 1 FROM checkpoint_blobs b WHERE b.thread_id = g.thread_id AND b.checkpoint_ns = g.checkpoint_ns
              AND b.channel = g.channel AND b.version = g.version)
GROUP BY 1, 2, 3, 4
"""
DELETE_BLOB_SQL = """DELETE FROM checkpoint_blobs b WHERE b.thread_id = %s AND b.checkpoint_ns = %s AND b.channel = %s
    AND b.version = %s AND NOT EXISTS (SELECT 1 FROM checkpoints c WHERE c.thread_id = b.thread_id
        AND c.checkpoint_ns = b.checkpoint_ns AND c.checkpoint -> 'channel_versions' ->> b.channel = b.version)"""
PROGRESS_SQL = f"""CREATE TABLE IF NOT EXISTS {PROGRESS} (action_id TEXT PRIMARY KEY, kind TEXT NOT NULL,
    prune_id TEXT NOT NULL, state TEXT NOT NULL, archive TEXT NOT NULL, manifest_sha256 TEXT, total BIGINT,
    done BIGINT, skipped TEXT, owner TEXT, updated DOUBLE PRECISION)"""
PARENTS_SQL = f"""CREATE TABLE IF NOT EXISTS {PARENTS} (prune_id TEXT NOT NULL, thread_id TEXT NOT NULL,
    checkpoint_ns TEXT NOT NULL, checkpoint_id TEXT NOT NULL, parent_checkpoint_id TEXT)"""
COLUMNS_SQL = """SELECT column_name, data_type FROM information_schema.columns
    WHERE table_name = %s AND table_schema = ANY(current_schemas(false)) ORDER BY ordinal_position"""


class PostgresRetention(LangGraphRetention):
    """``RetentionBackend`` for a PostgresSaver database."""

    reader_name = "langgraph-postgres"
    placeholder = "%s"

    def __init__(self, url: str, storage_options: Mapping[str, Any] | None = None) -> None:
        super().__init__(url, storage_options)
        self._owners: dict[Key, list[tuple[str, str]]] = {}
        self._columns: dict[str, list[tuple[str, str]]] = {}
        self._blobs: dict[int, dict[Thread, list[tuple[str, str]]]] = {}

    def default_archive(self) -> str | None:
        """None: a database has no "beside"; the core puts the archive under LASTGOOD_HOME (pass
        ``--archive`` with a shared URL so that other operators can undo)."""
        return None

    def _recovery(self) -> Any:
        from lastgood.readers.langgraph.recovery import PostgresRecovery

        return PostgresRecovery(self.url)

    # ---- connections ----------------------------------------------------------------------

    @contextmanager
    def _reading(self, snapshot: bool = False) -> Iterator[Any]:
        import psycopg

        from lastgood.readers.common.postgres import connect_readonly, one_line

        conn = connect_readonly(self.url)
        try:
            yield conn
        except psycopg.Error as exc:
            raise ReaderError(f"{display_url(self.url)}: {one_line(str(exc), self.url)}") from None
        finally:
            conn.close()

    def _transaction(self, body: Callable[[Any], Any], journal: bool = False) -> Any:
        if journal:
            return self._recovery()._transaction(body)
        import psycopg

        from lastgood.readers.common.postgres import connect_error, one_line

        try:
            conn = psycopg.connect(self.url, autocommit=False, prepare_threshold=None)
        except psycopg.Error as exc:
            raise connect_error(self.url, exc) from None
        try:
            result = body(conn)
            conn.commit()
            return result
        except psycopg.Error as exc:
            conn.rollback()
            raise ReaderError(f"the batch was rolled back: {one_line(str(exc), self.url)}") from None
        except BaseException:
            conn.rollback()
            raise
        finally:
            conn.close()

    def _progress_exists(self, conn: Any) -> bool:
        return bool(conn.execute("SELECT to_regclass(%s)", (PROGRESS,)).fetchone()[0])

    def _create_tables(self, conn: Any) -> None:
        conn.execute(PROGRESS_SQL)
        conn.execute(PARENTS_SQL)

    def _table_columns(self, conn: Any, table: str) -> list[tuple[str, str]]:
        if table not in self._columns:
            self._columns[table] = [(n, t) for n, t in conn.execute(COLUMNS_SQL, (table,)).fetchall()]
        return self._columns[table]

    def _select(self, conn: Any, table: str, alias: str) -> tuple[str, list[str]]:
        columns = self._table_columns(conn, table)
        items = [f"{alias}.{n}::text" if t in ("jsonb", "json") else f"{alias}.{n}" for n, t in columns]
        return ", ".join(items), [n for n, _ in columns]

    # ---- rows -------------------------------------------------------------------------------

    def _extra(self, conn: Any, keys: Sequence[Key]) -> dict[str, Any]:
        self._owners = {}
        freed = []
        for thread, ns, channel, version, owner in conn.execute(FREED_SQL, _arrays(keys)).fetchall():
            self._owners.setdefault((thread, ns, owner), []).append((channel, version))
            freed.append([thread, ns, channel, version])
        return {"freed_blobs": freed}

    def _fetch(self, conn: Any, keys: Sequence[Key]) -> list[tuple[Key, dict[str, Any], str]]:
        select, names = self._select(conn, "checkpoints", "c")
        rows = conn.execute(f"""SELECT {select}, {FINGERPRINT} FROM {_UNNEST}
            JOIN checkpoints c USING (thread_id, checkpoint_ns, checkpoint_id)""", _arrays(keys)).fetchall()
        found: dict[Key, dict[str, Any]] = {}
        prints: dict[Key, str] = {}
        for row in rows:
            record = dict(zip(names, row[:-1]))
            key = (record["thread_id"], record["checkpoint_ns"], record["checkpoint_id"])
            found[key] = {"checkpoints": [record], "checkpoint_writes": [], "checkpoint_blobs": []}
            prints[key] = row[-1]
        select, names = self._select(conn, "checkpoint_writes", "w")
        for row in conn.execute(f"""SELECT {select} FROM {_UNNEST} JOIN checkpoint_writes w
                USING (thread_id, checkpoint_ns, checkpoint_id)""", _arrays(keys)).fetchall():
            record = _plain(dict(zip(names, row)))
            found[(record["thread_id"], record["checkpoint_ns"], record["checkpoint_id"])]["checkpoint_writes"].append(
                record)
        self._fetch_blobs(conn, [k for k in keys if k in found], found)
        return [(key, found[key], prints[key]) for key in keys if key in found]

    def _fetch_blobs(self, conn: Any, keys: Sequence[Key], found: dict[Key, dict[str, Any]]) -> None:
        select, names = self._select(conn, "checkpoint_blobs", "b")
        for key in keys:
            for channel, version in self._owners.get(key, ()):
                row = conn.execute(f"""SELECT {select} FROM checkpoint_blobs b WHERE b.thread_id = %s
                    AND b.checkpoint_ns = %s AND b.channel = %s AND b.version = %s""",
                                   (key[0], key[1], channel, version)).fetchone()
                if row is not None:
                    found[key]["checkpoint_blobs"].append(_plain(dict(zip(names, row))))

    def _fingerprints(self, conn: Any, keys: Sequence[Key]) -> dict[Key, str]:
        if not keys:
            return {}
        rows = conn.execute(f"""SELECT c.thread_id, c.checkpoint_ns, c.checkpoint_id, {FINGERPRINT} FROM {_UNNEST}
            JOIN checkpoints c USING (thread_id, checkpoint_ns, checkpoint_id)""", _arrays(keys)).fetchall()
        return {(t, ns, cid): fp for t, ns, cid, fp in rows}

    def _heads(self, conn: Any, threads: Sequence[Thread]) -> dict[Thread, str | None]:
        return {t: conn.execute("""SELECT max(checkpoint_id COLLATE "C") FROM checkpoints
            WHERE thread_id = %s AND checkpoint_ns = %s""", t).fetchone()[0] for t in threads}

    def _thread_rows(self, conn: Any, thread: Thread) -> list[tuple[str, str | None]]:
        return conn.execute("""SELECT checkpoint_id, NULLIF(parent_checkpoint_id, '') FROM checkpoints
            WHERE thread_id = %s AND checkpoint_ns = %s""", thread).fetchall()

    def _delete(self, conn: Any, keys: Sequence[Key], manifest: Mapping[str, Any]) -> None:
        if not keys:
            return
        arrays = _arrays(keys)
        conn.execute(f"""DELETE FROM checkpoint_writes w USING {_UNNEST} WHERE w.thread_id = k.thread_id
            AND w.checkpoint_ns = k.checkpoint_ns AND w.checkpoint_id = k.checkpoint_id""", arrays)
        conn.execute(f"""DELETE FROM checkpoints c USING {_UNNEST} WHERE c.thread_id = k.thread_id
            AND c.checkpoint_ns = k.checkpoint_ns AND c.checkpoint_id = k.checkpoint_id""", arrays)
        blobs = self._freed_by_thread(manifest)
        for thread in sorted({(k[0], k[1]) for k in keys}):
            for channel, version in blobs.get(thread, ()):
                conn.execute(DELETE_BLOB_SQL, (*thread, channel, version))

    def _freed_by_thread(self, manifest: Mapping[str, Any]) -> dict[Thread, list[tuple[str, str]]]:
        cached = self._blobs.get(id(manifest))
        if cached is None:
            cached = {}
            for thread, ns, channel, version in manifest.get("freed_blobs") or []:
                cached.setdefault((thread, ns), []).append((channel, version))
            self._blobs = {id(manifest): cached}
        return cached

    def _insert(self, conn: Any, key: Key, rows: Mapping[str, Any]) -> None:
        for table in TABLES:
            types = dict(self._table_columns(conn, table))
            for record in rows.get(table) or []:
                names = list(record)
                missing = set(names) - set(types)
                if missing:
                    raise ReaderError(f"the {table} table no longer has the columns {sorted(missing)} the archived "
                                      f"checkpoint {key[2]} was stored with; nothing more was restored")
                values = ", ".join("%s::jsonb" if types[n] in ("jsonb", "json") else "%s" for n in names)
                conflict = " ON CONFLICT DO NOTHING" if table == "checkpoint_blobs" else ""
                conn.execute(f"INSERT INTO {table} ({', '.join(names)}) VALUES ({values}){conflict}",
                             [record[n] for n in names])

    def _set_parent(self, conn: Any, key: Key, parent: str | None, only_if_null: bool) -> int:
        guard = " AND parent_checkpoint_id IS NULL" if only_if_null else ""
        return conn.execute(f"""UPDATE checkpoints SET parent_checkpoint_id = %s WHERE thread_id = %s
            AND checkpoint_ns = %s AND checkpoint_id = %s{guard}""", (parent, *key)).rowcount

    # ---- dependencies -------------------------------------------------------------------------

    def _interrupted(self, conn: Any) -> set[Key]:
        rows = conn.execute("""SELECT DISTINCT thread_id, checkpoint_ns, checkpoint_id FROM checkpoint_writes
            WHERE channel = '__interrupt__'""").fetchall()
        return {tuple(r) for r in rows}

    def _senders(self, conn: Any) -> set[Key]:
        rows = conn.execute("""SELECT DISTINCT thread_id, checkpoint_ns, checkpoint_id FROM checkpoint_writes
            WHERE channel = '__pregel_tasks'""").fetchall()
        return {tuple(r) for r in rows}

    def _versions(self, conn: Any, keys: Sequence[Key]) -> dict[Key, Any]:
        rows = conn.execute(f"""SELECT c.thread_id, c.checkpoint_ns, c.checkpoint_id, c.checkpoint ->> 'v'
            FROM {_UNNEST} JOIN checkpoints c USING (thread_id, checkpoint_ns, checkpoint_id)""",
                            _arrays(keys)).fetchall()
        return {(t, ns, cid): v for t, ns, cid, v in rows}

    # ---- what the store holds, and space ------------------------------------------------------

    def breakdown(self, channels: bool = True, sample: int = 200) -> list[dict[str, Any]]:
        from lastgood.readers.langgraph.retention_space import postgres_breakdown

        return postgres_breakdown(self, channels)

    def footprint(self) -> dict[str, Any]:
        from lastgood.readers.langgraph.retention_space import postgres_footprint

        return postgres_footprint(self)

    def reclaim(self, vacuum: bool = False) -> dict[str, Any]:
        from lastgood.readers.langgraph.retention_space import postgres_reclaim

        return postgres_reclaim(self, vacuum)


def _arrays(keys: Sequence[Key]) -> list[list[str]]:
    return [[k[0] for k in keys], [k[1] for k in keys], [k[2] for k in keys]]


def _plain(record: dict[str, Any]) -> dict[str, Any]:
    """BYTEA comes back as memoryview/bytes: bytes, so the bundle keeps them as msgpack bin."""
    return {k: bytes(v) if isinstance(v, (memoryview, bytearray)) else v for k, v in record.items()}

