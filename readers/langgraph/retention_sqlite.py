"""Retention of a LangGraph SqliteSaver file: the SQL and connections (the flow: ``retention``).

Rows are archived as SQLite holds them (every column, each value with its type: BLOB stays bytes,
TEXT stays text) and inserted back the same way. Keys go to SQLite as one JSON array parameter
(``json_each``), so no temporary table is needed on the read-only snapshot connection. Deleting
uses ``secure_delete = FAST`` (freed pages are not overwritten with zeros: the archive keeps every
byte anyway, and zeroing them would write the whole freed size once more).
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import closing, contextmanager
from pathlib import Path
from typing import Any

import msgpack

from lastgood.errors import ReaderError
from lastgood.readers.common.sqlite import sqlite_path, table_columns
from lastgood.readers.langgraph.retention import Key, LangGraphRetention, Thread
from lastgood.readers.langgraph.retention_progress import PARENTS, PROGRESS
from lastgood.readers.native.archive import default_archive_beside

TIMEOUT = 30.0
_KEYS = """json_each(?) AS k CROSS JOIN {table} {alias} ON {alias}.thread_id = k.value ->> 0
    AND {alias}.checkpoint_ns = k.value ->> 1 AND {alias}.checkpoint_id = k.value ->> 2"""
_LEN = "typeof({c}) || ':' || coalesce(length({c}), 0)"
FINGERPRINT = (f"{_LEN.format(c='c.checkpoint')} || '|' || {_LEN.format(c='c.metadata')} || '|' || "
               "(SELECT count(*) || ':' || coalesce(sum(length(w.value)), 0) FROM writes w WHERE "
               "w.thread_id = c.thread_id AND w.checkpoint_ns = c.checkpoint_ns AND w.checkpoint_id = c.checkpoint_id)")
FINGERPRINT_NO_WRITES = f"{_LEN.format(c='c.checkpoint')} || '|' || {_LEN.format(c='c.metadata')} || '|0:0'"
PROGRESS_SQL = f"""CREATE TABLE IF NOT EXISTS {PROGRESS} (action_id TEXT PRIMARY KEY, kind TEXT NOT NULL,
    prune_id TEXT NOT NULL, state TEXT NOT NULL, archive TEXT NOT NULL, manifest_sha256 TEXT, total INTEGER,
    done INTEGER, skipped TEXT, owner TEXT, updated REAL)"""
PARENTS_SQL = f"""CREATE TABLE IF NOT EXISTS {PARENTS} (prune_id TEXT NOT NULL, thread_id TEXT NOT NULL,
    checkpoint_ns TEXT NOT NULL, checkpoint_id TEXT NOT NULL, parent_checkpoint_id TEXT)"""


class SqliteRetention(LangGraphRetention):
    """``RetentionBackend`` for a SqliteSaver file."""

    reader_name = "langgraph-sqlite"
    placeholder = "?"

    def __init__(self, url: str, storage_options: Mapping[str, Any] | None = None) -> None:
        super().__init__(url, storage_options)
        self.path = sqlite_path(url)
        if not self.path.is_file():
            raise ReaderError(f"{self.path}: no such database")

    def default_archive(self) -> str:
        return default_archive_beside(str(self.path.resolve()))

    def _recovery(self) -> Any:
        from lastgood.readers.langgraph.recovery import SqliteRecovery

        return SqliteRecovery(self.url)

    # ---- connections ----------------------------------------------------------------------

    def _connect(self, read_only: bool) -> sqlite3.Connection:
        uri = self.path.resolve().as_uri() + ("?mode=ro" if read_only else "")
        try:
            conn = sqlite3.connect(uri, uri=True, timeout=TIMEOUT, isolation_level=None, check_same_thread=False)
        except sqlite3.Error as exc:
            raise ReaderError(f"{self.path}: cannot open: {exc}") from None
        if not read_only:  # (reads are not memory-mapped: a prune's memory stays a batch's, not the file's)
            conn.execute("PRAGMA secure_delete = FAST")
        return conn

    @contextmanager
    def _reading(self, snapshot: bool = False) -> Iterator[sqlite3.Connection]:
        from lastgood.readers.common.sqlite import connect_readonly

        with closing(self._connect(True) if snapshot else connect_readonly(self.path)) as conn:
            try:
                conn.execute("BEGIN")
                yield conn
            except sqlite3.Error as exc:
                raise ReaderError(f"{self.path}: SQLite error: {exc}") from None
            finally:
                if conn.in_transaction:
                    conn.execute("COMMIT")

    def _transaction(self, body: Callable[[Any], Any], journal: bool = False) -> Any:
        recovery = self._recovery()
        return recovery._transaction(lambda conn: _fast(conn) or body(conn))

    def _progress_exists(self, conn: Any) -> bool:
        return conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?",
                            (PROGRESS,)).fetchone() is not None

    def _create_tables(self, conn: Any) -> None:
        conn.execute(PROGRESS_SQL)
        conn.execute(PARENTS_SQL)

    def _columns(self, conn: Any, table: str) -> set[str]:
        cache = self.__dict__.setdefault("_column_cache", {})
        if table not in cache:
            cache[table] = table_columns(conn, table)
        return cache[table]

    def _has_writes(self, conn: Any) -> bool:
        return {"checkpoint_id", "value"} <= self._columns(conn, "writes")

    # ---- rows -------------------------------------------------------------------------------

    def _fetch(self, conn: Any, keys: Sequence[Key]) -> list[tuple[Key, dict[str, Any], str]]:
        param = json.dumps(list(keys))
        writes = self._has_writes(conn)
        fingerprint = FINGERPRINT if writes else FINGERPRINT_NO_WRITES
        cur = conn.execute(f"SELECT c.*, {fingerprint} FROM {_KEYS.format(table='checkpoints', alias='c')}",
                           (param,))
        names = [d[0] for d in cur.description][:-1]
        found: dict[Key, dict[str, Any]] = {}
        prints: dict[Key, str] = {}
        for row in cur.fetchall():
            record = dict(zip(names, row[:-1]))
            key = (record["thread_id"], record["checkpoint_ns"], record["checkpoint_id"])
            found[key] = {"checkpoints": [record], "writes": []}
            prints[key] = row[-1]
        if writes:
            cur = conn.execute(f"SELECT w.* FROM {_KEYS.format(table='writes', alias='w')}", (param,))
            names = [d[0] for d in cur.description]
            for row in cur.fetchall():
                record = dict(zip(names, row))
                key = (record["thread_id"], record["checkpoint_ns"], record["checkpoint_id"])
                if key in found:
                    found[key]["writes"].append(record)
        return [(key, found[key], prints[key]) for key in keys if key in found]

    def _fingerprints(self, conn: Any, keys: Sequence[Key]) -> dict[Key, str]:
        if not keys:
            return {}
        fingerprint = FINGERPRINT if self._has_writes(conn) else FINGERPRINT_NO_WRITES
        rows = conn.execute(f"""SELECT c.thread_id, c.checkpoint_ns, c.checkpoint_id, {fingerprint}
            FROM {_KEYS.format(table='checkpoints', alias='c')}""", (json.dumps(list(keys)),)).fetchall()
        return {(t, ns, cid): fp for t, ns, cid, fp in rows}

    def _heads(self, conn: Any, threads: Sequence[Thread]) -> dict[Thread, str | None]:
        return {t: conn.execute("SELECT max(checkpoint_id) FROM checkpoints WHERE thread_id = ? AND checkpoint_ns = ?",
                                t).fetchone()[0] for t in threads}

    def _thread_rows(self, conn: Any, thread: Thread) -> list[tuple[str, str | None]]:
        return conn.execute("""SELECT checkpoint_id, parent_checkpoint_id FROM checkpoints
            WHERE thread_id = ? AND checkpoint_ns = ?""", thread).fetchall()

    def _delete(self, conn: Any, keys: Sequence[Key], manifest: Mapping[str, Any]) -> None:
        if not keys:
            return
        param = json.dumps(list(keys))
        if self._has_writes(conn):
            conn.execute(f"""DELETE FROM writes WHERE rowid IN (SELECT w.rowid FROM
                {_KEYS.format(table='writes', alias='w')})""", (param,))
        conn.execute(f"""DELETE FROM checkpoints WHERE rowid IN (SELECT c.rowid FROM
            {_KEYS.format(table='checkpoints', alias='c')})""", (param,))

    def _insert(self, conn: Any, key: Key, rows: Mapping[str, Any]) -> None:
        for table in ("checkpoints", "writes"):
            for record in rows.get(table) or []:
                names = list(record)
                missing = set(names) - self._columns(conn, table)
                if missing:
                    raise ReaderError(f"the {table} table no longer has the columns {sorted(missing)} the archived "
                                      f"checkpoint {key[2]} was stored with; nothing more was restored")
                conn.execute(f"INSERT INTO {table} ({', '.join(names)}) VALUES ({', '.join('?' * len(names))})",
                             [record[n] for n in names])

    def _set_parent(self, conn: Any, key: Key, parent: str | None, only_if_null: bool) -> int:
        guard = " AND parent_checkpoint_id IS NULL" if only_if_null else ""
        return conn.execute(f"""UPDATE checkpoints SET parent_checkpoint_id = ? WHERE thread_id = ?
            AND checkpoint_ns = ? AND checkpoint_id = ?{guard}""", (parent, *key)).rowcount

    # ---- dependencies -------------------------------------------------------------------------

    def _interrupted(self, conn: Any) -> set[Key]:
        return self._special_writes(conn)[0]

    def _senders(self, conn: Any) -> set[Key]:
        return self._special_writes(conn)[1]

    def _special_writes(self, conn: Any) -> tuple[set[Key], set[Key]]:
        """Checkpoints with a pending ``__interrupt__``, and those with ``__pregel_tasks`` writes: one
        pass over ``writes`` for both (remembered for the connection that asked)."""
        cached = self.__dict__.get("_special")
        if cached is not None and cached[0] is conn:
            return cached[1]
        found: tuple[set[Key], set[Key]] = (set(), set())
        if self._has_writes(conn):
            rows = conn.execute("""SELECT thread_id, checkpoint_ns, checkpoint_id,
                max(idx < 0 AND channel = '__interrupt__'), max(channel = '__pregel_tasks') FROM writes
                WHERE channel IN ('__interrupt__', '__pregel_tasks') GROUP BY 1, 2, 3""").fetchall()
            found = ({(t, ns, c) for t, ns, c, i, _ in rows if i}, {(t, ns, c) for t, ns, c, _, s in rows if s})
        self.__dict__["_special"] = (conn, found)
        return found

    def _versions(self, conn: Any, keys: Sequence[Key]) -> dict[Key, Any]:
        rows = conn.execute(f"""SELECT c.thread_id, c.checkpoint_ns, c.checkpoint_id, c.type, c.checkpoint
            FROM {_KEYS.format(table='checkpoints', alias='c')}""", (json.dumps(list(keys)),)).fetchall()
        return {(t, ns, cid): _version(type_, blob) for t, ns, cid, type_, blob in rows}

    # ---- what the store holds, and space ------------------------------------------------------

    def breakdown(self, channels: bool = True, sample: int = 200) -> list[dict[str, Any]]:
        from lastgood.readers.langgraph.retention_space import sqlite_breakdown

        return sqlite_breakdown(self, channels, sample)

    def footprint(self) -> dict[str, Any]:
        from lastgood.readers.langgraph.retention_space import sqlite_footprint

        return sqlite_footprint(self.path)

    def reclaim(self, vacuum: bool = False) -> dict[str, Any]:
        from lastgood.readers.langgraph.retention_space import sqlite_reclaim

        return sqlite_reclaim(self, vacuum)


def _fast(conn: sqlite3.Connection) -> None:
    conn.execute("PRAGMA secure_delete = FAST")


def _version(type_: Any, blob: Any) -> Any:
    """The ``v`` of a serialized checkpoint (msgpack or json), extension types left undecoded."""
    try:
        if type_ == "msgpack":
            value = msgpack.unpackb(bytes(blob), raw=False, strict_map_key=False, ext_hook=lambda c, d: None)
        elif type_ == "json":
            value = json.loads(blob)
        else:
            return None
    except (ValueError, TypeError, msgpack.UnpackException):
        return None
    return value.get("v") if isinstance(value, dict) else None


def file_size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0
