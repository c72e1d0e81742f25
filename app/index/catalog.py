"""The DuckDB index: schema migrations, ingest from readers, status bookkeeping.

One index file (``$LASTGOOD_HOME/index.duckdb``) holds every store the operator
opened. Connections are short-lived (one per operation, retried while another
process holds the write lock) so the dashboard and the CLI can share it.
Read queries for the CLI and pages live in ``app.queries``.
"""

from __future__ import annotations

import hashlib
import itertools
import threading
import time
import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import duckdb

from lastgood.index import attached
from lastgood.config import private_dir, private_file
from lastgood.checks import Check
from lastgood.errors import LastgoodError
from lastgood.readers.base import (CHECKPOINT_NAMES, MARKED_STATUSES, Finding, HeadRecord, ParquetSource, Reader,
                                   Scan, Status, sql_status_counts, sql_statuses)

_INCOMPLETE = sql_statuses(Status.INCOMPLETE)

if TYPE_CHECKING:  # a command that lists nothing new (a reopen) never imports pyarrow
    import pyarrow as pa

Progress = Callable[[int, int | None], None]

MIGRATIONS: list[str] = [
    # 1: the common model
    """
    CREATE SEQUENCE IF NOT EXISTS store_ids START 1;
    CREATE TABLE stores (
        store_id INTEGER PRIMARY KEY DEFAULT nextval('store_ids'),
        url TEXT NOT NULL UNIQUE, display_url TEXT, reader TEXT,
        scan_token TEXT, indexed_at TIMESTAMPTZ, verified_at TIMESTAMPTZ);
    -- ids, checksums and blob paths are unique strings: compressing them costs more
    -- time than it saves space (half of a cold 1M-row ingest), so they are stored plain
    CREATE TABLE checkpoints (
        store_id INTEGER NOT NULL, run_id TEXT NOT NULL, namespace TEXT NOT NULL DEFAULT '',
        checkpoint_id TEXT NOT NULL USING COMPRESSION uncompressed,
        parent_id TEXT USING COMPRESSION uncompressed, step BIGINT, created_at TIMESTAMPTZ,
        trigger TEXT, kind TEXT, status TEXT, status_reason TEXT, size_bytes BIGINT,
        checksum TEXT USING COMPRESSION uncompressed, agent TEXT, codec TEXT,
        location TEXT USING COMPRESSION uncompressed, metadata JSON,
        listed_status TEXT, listed_reason TEXT, verified TEXT);
    CREATE TABLE events (
        store_id INTEGER NOT NULL, run_id TEXT, namespace TEXT, checkpoint_id TEXT,
        created_at TIMESTAMPTZ, kind TEXT, channel TEXT, task_id TEXT, message TEXT);
    CREATE TABLE findings (
        store_id INTEGER NOT NULL, run_id TEXT, namespace TEXT, checkpoint_id TEXT,
        "check" TEXT NOT NULL, severity TEXT NOT NULL, message TEXT, depth TEXT,
        found_at TIMESTAMPTZ);
    CREATE TABLE heads (
        store_id INTEGER NOT NULL, run_id TEXT NOT NULL, namespace TEXT NOT NULL DEFAULT '',
        checkpoint_id TEXT NOT NULL);
    CREATE TABLE journal (
        store_id INTEGER NOT NULL, action_id TEXT NOT NULL, seq BIGINT, acted_at TIMESTAMPTZ,
        operator TEXT, action TEXT, run_id TEXT, namespace TEXT, target TEXT,
        previous_head TEXT, new_head TEXT, superseded JSON, reason TEXT,
        undoes TEXT, hash TEXT, prev_hash TEXT);
    """,
    # 2: the per-run summary pages and `ls` lean on
    f"""
    CREATE VIEW runs AS
    SELECT c.store_id, c.run_id,
           arg_max(c.agent, c.created_at) AS agent,
           count(*) AS checkpoints,
           count(DISTINCT c.namespace) AS namespaces,
           min(c.created_at) AS first_at, max(c.created_at) AS last_at,
           max(c.step) AS last_step,
           coalesce(sum(c.size_bytes), 0) AS size_bytes,
           {sql_status_counts("c.status")}
    FROM checkpoints c GROUP BY c.store_id, c.run_id;
    """,
    # 3: when a checkpoint's data was last read (--read-data-subset covers the least recent first)
    """
    ALTER TABLE checkpoints ADD COLUMN IF NOT EXISTS data_checked_at TIMESTAMPTZ;
    """,
    # 4: what each checkpoint changed against its parent, and fields tracked over time (lastgood.investigate.history)
    """
    CREATE TABLE IF NOT EXISTS step_changes (
        store_id INTEGER NOT NULL, run_id TEXT NOT NULL, namespace TEXT NOT NULL DEFAULT '',
        checkpoint_id TEXT NOT NULL, parent_id TEXT, added INTEGER, removed INTEGER,
        changed INTEGER, moved INTEGER, paths TEXT[], error TEXT, computed_at TIMESTAMPTZ);
    CREATE TABLE IF NOT EXISTS tracked_values (
        store_id INTEGER NOT NULL, run_id TEXT NOT NULL, namespace TEXT NOT NULL DEFAULT '',
        checkpoint_id TEXT NOT NULL, path TEXT NOT NULL, kind TEXT, value JSON, number DOUBLE,
        length BIGINT, error TEXT, tracked_at TIMESTAMPTZ);
    """,
    # 5: ``checkpoints`` is a view: the table's rows and attached Parquet parts (lastgood.index.attached)
    f"""
    ALTER TABLE checkpoints RENAME TO checkpoint_rows;
    CREATE TABLE IF NOT EXISTS attached_parts (
        store_id INTEGER PRIMARY KEY, path TEXT NOT NULL, rows BIGINT NOT NULL,
        verified TEXT, data_checked_at TIMESTAMPTZ, facts JSON);
    CREATE VIEW checkpoints AS SELECT {', '.join(attached.ROW_COLUMNS)} FROM checkpoint_rows;
    """,
    # 6: the furthest entry of each store's journal this index read: a journal that no longer
    # holds it lost entries from its end, which its hash chain alone cannot show (lastgood.recovery.plan)
    """
    CREATE TABLE IF NOT EXISTS journal_tips (
        store_id INTEGER PRIMARY KEY, seq BIGINT NOT NULL, hash TEXT NOT NULL, action_id TEXT,
        seen_at TIMESTAMPTZ NOT NULL);
    """,
    # 7: what a full read found in each tensor of a training checkpoint (lastgood.index.tensors)
    """
    CREATE TABLE IF NOT EXISTS tensor_stats (
        store_id INTEGER NOT NULL, run_id TEXT NOT NULL, namespace TEXT NOT NULL DEFAULT '',
        checkpoint_id TEXT NOT NULL, name TEXT NOT NULL, dtype TEXT, shape TEXT, numel BIGINT,
        nan BIGINT, posinf BIGINT, neginf BIGINT, zeros BIGINT,
        min DOUBLE, max DOUBLE, mean DOUBLE, std DOUBLE, norm DOUBLE, sha256 TEXT,
        checked_at TIMESTAMPTZ NOT NULL DEFAULT now());
    """,
]

CHECKPOINT_COLUMNS = ", ".join(CHECKPOINT_NAMES)
LOCK_RETRY_SECONDS = 15.0


@dataclass
class RefreshReport:
    store_id: int
    full: bool
    changed: bool
    checkpoints: int = 0
    events: int = 0
    findings: list[Finding] = field(default_factory=list)
    seconds: float = 0.0


class Catalog:
    """The index file and the operations that write it."""

    def __init__(self, path: str | Path, keep_open: bool = True, *, lock_wait: float = LOCK_RETRY_SECONDS,
                 cancel: threading.Event | None = None) -> None:
        """``keep_open`` holds one connection for the object's life (fast, for one
        command); without it each operation opens and closes the file so other
        processes (the CLI beside a running dashboard) can take the write lock.
        ``lock_wait``: seconds an open waits while another process holds the index (then
        "busy"); ``cancel`` set stops that wait at once (background work being cancelled)."""
        self.path = str(path)
        self.lock_wait, self.cancel = lock_wait, cancel
        self.parts_dir = attached.parts_dir(self.path)  # where attached parts are kept
        if self.path != ":memory:":
            private_dir(Path(self.path).parent)  # 0700 when created; a file there: one-line error
        self.keep_open = keep_open or self.path == ":memory:"
        self._con: duckdb.DuckDBPyConnection | None = None
        with self.connect() as con:
            migrate(con)
            attached.repair(con)
        if self.path != ":memory:":
            private_file(self.path)  # the index holds store contents: owner only (0600)

    @contextmanager
    def connect(self) -> Iterator[duckdb.DuckDBPyConnection]:
        """A connection for one operation (a cursor of the kept one, or a fresh one)."""
        if self.keep_open:
            if self._con is None:
                self._con = _connect_with_retry(self.path, self.lock_wait, self.cancel)
                _held.add(self)
            cur = use_index(self._con.cursor(), self.path)
            try:
                yield cur
            finally:
                cur.close()
            return
        con = _connect_with_retry(self.path, self.lock_wait, self.cancel)
        try:
            yield con
        finally:
            _close(con)

    def close(self) -> None:
        if self._con is not None:
            _close(self._con)
            self._con = None
        _held.discard(self)

    # ---- stores -----------------------------------------------------------------

    def store_id(self, url: str, reader: str, display_url: str) -> int:
        with self.connect() as con:
            row = con.execute("SELECT store_id FROM stores WHERE url = ?", [url]).fetchone()
            if row:
                con.execute("UPDATE stores SET reader = ?, display_url = ? WHERE store_id = ?",
                            [reader, display_url, row[0]])
                return int(row[0])
            con.execute("INSERT INTO stores (url, reader, display_url) VALUES (?, ?, ?)",
                        [url, reader, display_url])
            return int(con.execute("SELECT store_id FROM stores WHERE url = ?", [url]).fetchone()[0])

    def recorded_reader(self, url: str) -> str | None:
        """The reader that last indexed the store at ``url`` (its public URL), if any."""
        with self.connect() as con:
            row = con.execute("SELECT reader FROM stores WHERE url = ?", [url]).fetchone()
        return str(row[0]) if row and row[0] else None

    def scan_token(self, store_id: int) -> str | None:
        with self.connect() as con:
            row = con.execute("SELECT scan_token FROM stores WHERE store_id = ?", [store_id]).fetchone()
        return row[0] if row else None

    # ---- ingest -----------------------------------------------------------------

    def refresh(self, store_id: int, reader: Reader, *, full: bool = False,
                progress: Progress | None = None) -> RefreshReport:
        """Bring the store's rows up to date; reads only what changed unless ``full``."""
        started = time.perf_counter()
        scan = reader.scan(None if full else self.scan_token(store_id))
        report = RefreshReport(store_id, scan.full, changed=False)
        with self.connect() as con:
            con.execute("SET preserve_insertion_order = false")
            con.execute("BEGIN TRANSACTION")
            try:
                self._ingest(con, store_id, scan, report, progress)
                con.execute("UPDATE stores SET scan_token = ?, indexed_at = ? WHERE store_id = ?",
                            [scan.token, datetime.now(UTC), store_id])
                con.execute("COMMIT")
            except BaseException:
                con.execute("ROLLBACK")
                raise
        if report.changed and self.parts_dir is not None:
            with self.connect() as con:
                attached.collect(con, self.parts_dir)  # copies a full listing replaced
        report.findings = scan.findings
        report.seconds = time.perf_counter() - started
        return report

    def _ingest(self, con: duckdb.DuckDBPyConnection, store_id: int, scan: Scan,
                report: RefreshReport, progress: Progress | None) -> None:
        batches = scan.checkpoints
        if scan.full:
            attached.detach(con, store_id)
            for table in ("checkpoint_rows", "events", "heads"):
                con.execute(f"DELETE FROM {table} WHERE store_id = ?", [store_id])
            con.execute("DELETE FROM findings WHERE store_id = ? AND checkpoint_id IS NULL", [store_id])
            batches = self._attach_sole_part(con, store_id, batches, report)
        else:
            first_batch = next(batches, None)
            if first_batch is not None:
                attached.materialize(con, store_id)  # new rows may replace some of the part's
                batches = itertools.chain([first_batch], batches)
        first = scan.full
        for batch in batches:
            rows = _upsert_checkpoints(con, store_id, batch, fresh=first and report.checkpoints == 0)
            report.checkpoints += rows
            report.changed = True
            if progress:
                progress(report.checkpoints, None)
        for batch in scan.events:
            _insert_events(con, store_id, batch, replace=not scan.full)
            report.events += batch.num_rows
        _insert_findings(con, store_id, scan.findings, depth="catalog")
        if scan.heads:
            _upsert_heads(con, store_id, scan.heads)
        report.changed = report.changed or bool(scan.findings or scan.heads)

    def _attach_sole_part(self, con: duckdb.DuckDBPyConnection, store_id: int,
                          batches: Iterator[Any], report: RefreshReport) -> Iterator[Any]:
        """A full listing that is one private copy of a compacted part (and nothing else)
        becomes the store's rows in place (lastgood.index.attached); otherwise the batches, untouched."""
        first = next(batches, None)
        second = next(batches, None) if first is not None else None
        if (second is None and isinstance(first, ParquetSource) and first.private
                and len(first.paths) == 1 and self.parts_dir is not None):
            facts = first.profile.facts() if first.profile is not None else None
            attached.attach(con, store_id, first.paths[0], first.num_rows, facts)
            report.checkpoints += first.num_rows
            report.changed = True
            return iter(())
        return itertools.chain([b for b in (first, second) if b is not None], batches)

    # ---- verification results ---------------------------------------------------

    def record_findings(self, store_id: int, checkpoint_ids: list[str], findings: list[Finding],
                        depth: str) -> None:
        """Replace the findings a check at ``depth`` makes for ``checkpoint_ids`` and set
        their statuses from every finding they have (one transaction).

        A structure check replaces structure findings only (what a data check found
        stays true until a data check says otherwise); a data check replaces both.
        ``verified`` never goes down from 'data' to 'structure'."""
        with self.connect() as con:
            try:
                _temp_table(con, "checked_ids", {"checkpoint_id": ("VARCHAR", checkpoint_ids)})
                _record_checked(con, store_id, "checkpoint_id IN (SELECT checkpoint_id FROM checked_ids)",
                                {}, findings, depth)
            finally:
                con.execute("DROP TABLE IF EXISTS checked_ids")

    def record_findings_where(self, store_id: int, where: str, params: dict[str, Any],
                              findings: list[Finding], depth: str, level: str | None = None) -> None:
        """:meth:`record_findings` for every checkpoint of the store matching the SQL
        predicate ``where`` (named ``$`` parameters in ``params``): a set-based check
        of a whole selection is recorded without its ids going through Python.
        ``level`` 'catalog': a structure check that did not look at the blob files
        (``verified`` becomes 'catalog' unless a data check was recorded)."""
        with self.connect() as con:
            _record_checked(con, store_id, where, params, findings, depth, level)

    def replace_lineage_findings(self, store_id: int, findings: list[Finding]) -> None:
        """Replace the store's lineage findings (parents missing, cycles, chains built on damage)."""
        self._replace_store_wide(store_id, findings, "lineage")

    def replace_content_findings(self, store_id: int, findings: list[Finding]) -> None:
        """Replace the store's store-wide content findings (size spikes)."""
        self._replace_store_wide(store_id, findings, "content")

    def _replace_store_wide(self, store_id: int, findings: list[Finding], depth: str) -> None:
        with self.connect() as con:
            con.execute("BEGIN TRANSACTION")
            try:
                con.execute("DELETE FROM findings WHERE store_id = ? AND depth = ?", [store_id, depth])
                _insert_findings(con, store_id, findings, depth)
                _reset_statuses(con, store_id, "status <> listed_status")
                _apply_error_statuses(con, store_id)
                con.execute("COMMIT")
            except BaseException:
                con.execute("ROLLBACK")
                raise


def distinct_findings(where: str) -> str:
    """SQL (a subquery) of the findings matching ``where``: one per checkpoint and check — the
    same damage seen while listing, at structure depth and at data depth is one finding, kept at
    its highest severity and the shallowest depth that found it. Every count and list of
    findings reads them this way, so ``verify``, ``runs``, ``index`` and the pages agree."""
    return f"""(SELECT * EXCLUDE (pick) FROM (
        SELECT *, row_number() OVER (
            PARTITION BY store_id, run_id, namespace, coalesce(checkpoint_id, message), "check"
            ORDER BY CASE severity WHEN 'error' THEN 0 WHEN 'warning' THEN 1 ELSE 2 END,
                     CASE depth WHEN 'catalog' THEN 0 WHEN 'structure' THEN 1 WHEN 'lineage' THEN 1
                                WHEN 'content' THEN 1 ELSE 2 END, found_at, message) AS pick
        FROM findings WHERE {where}) WHERE pick = 1)"""


_held: weakref.WeakSet[Catalog] = weakref.WeakSet()  # catalogs holding a connection


def close_all() -> None:
    """Close every catalog of this process that holds its connection open (before a process
    ends without the interpreter's teardown: the index's last changes reach its file)."""
    for catalog in list(_held):
        catalog.close()


def _reset_statuses(con: duckdb.DuckDBPyConnection, store_id: int, where: str,
                    params: dict[str, Any] | None = None) -> None:
    if attached.is_attached(con, store_id):
        return  # an attached part's rows are as listed, always (lastgood.index.attached)
    con.execute(f"""UPDATE checkpoint_rows SET status = listed_status, status_reason = listed_reason
                    WHERE store_id = $sid AND status NOT IN {sql_statuses(*MARKED_STATUSES)} AND ({where})
                      AND (status IS DISTINCT FROM listed_status OR status_reason IS DISTINCT FROM listed_reason)""",
                {**(params or {}), "sid": store_id})


def _record_checked(con: duckdb.DuckDBPyConnection, store_id: int, where: str, params: dict[str, Any],
                    findings: list[Finding], depth: str, level: str | None = None) -> None:
    """The body of ``record_findings``: ``where`` selects the checked checkpoints; ``verified``
    becomes ``level`` (default ``depth``; 'catalog': structure without the blob files), and a
    structure check never takes it down from 'data'."""
    replaced = ["structure", "data"] if depth == "data" else ["structure"]
    now = datetime.now(UTC)
    params = {**params, "sid": store_id}
    # ``where`` may depend on ``verified``/``data_checked_at``: they change last, in one statement
    checked = f"checkpoint_id IN (SELECT checkpoint_id FROM checkpoints WHERE store_id = $sid AND ({where}))"
    con.execute("BEGIN TRANSACTION")
    try:
        con.execute(f"""DELETE FROM findings WHERE store_id = $sid
                        AND depth IN (SELECT unnest($depths::VARCHAR[])) AND {checked}""",
                    {**params, "depths": replaced})
        _insert_findings(con, store_id, findings, depth)
        _reset_statuses(con, store_id, where, params)
        _apply_error_statuses(con, store_id)
        _set_verified(con, store_id, where, params, {"depth": depth, "level": level or depth, "now": now})
        con.execute("UPDATE stores SET verified_at = ? WHERE store_id = ?", [now, store_id])
        con.execute("COMMIT")
    except BaseException:
        con.execute("ROLLBACK")
        raise


_VERIFIED = "CASE WHEN $depth = 'structure' AND verified = 'data' THEN 'data' ELSE $level END"
_CHECKED_AT = "CASE WHEN $depth = 'data' THEN $now ELSE data_checked_at END"


def _set_verified(con: duckdb.DuckDBPyConnection, store_id: int, where: str, params: dict[str, Any],
                  values: dict[str, Any]) -> None:
    """``verified``/``data_checked_at`` of the checked checkpoints (``values``: depth, level,
    now). On an attached part: its constants when every row was checked, nothing when none
    was, else its rows are copied into the table first."""
    if attached.is_attached(con, store_id):
        checked = con.execute(f"SELECT count(*) FROM checkpoints WHERE store_id = $sid AND ({where})",
                              params).fetchone()[0]
        if not checked:
            return
        verified, checked_at, rows = attached.constants(con, store_id)
        if checked == rows:
            new = con.execute(f"""SELECT {_VERIFIED}, {_CHECKED_AT}
                                  FROM (SELECT $v AS verified, $c::TIMESTAMPTZ AS data_checked_at)""",
                              {**values, "v": verified, "c": checked_at}).fetchone()
            attached.set_constants(con, store_id, new[0], new[1])
            return
        attached.materialize(con, store_id)
    con.execute(f"""UPDATE checkpoint_rows SET verified = {_VERIFIED}, data_checked_at = {_CHECKED_AT}
                    WHERE store_id = $sid AND ({where})""", {**params, **values})


def migrate(con: duckdb.DuckDBPyConnection) -> int:
    """Apply pending numbered migrations; returns the schema version."""
    con.execute("CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL)")
    row = con.execute("SELECT max(version) FROM schema_version").fetchone()
    current = int(row[0] or 0)
    if current >= len(MIGRATIONS):
        return current
    con.execute("BEGIN TRANSACTION")  # all pending ones at once: a new index is one commit, not five
    try:
        for number, sql in enumerate(MIGRATIONS[current:], start=current + 1):
            con.execute(sql)
            con.execute("INSERT INTO schema_version VALUES (?)", [number])
        con.execute("COMMIT")
    except BaseException:
        con.execute("ROLLBACK")
        raise
    return len(MIGRATIONS)


# DuckDB shares one database instance between the connections of a process; a connect that
# meets another thread's close half-way (its instance torn down, the file still registered)
# fails with "Unique file handle conflict". Opens and closes of the index take turns.
_OPEN_CLOSE = threading.Lock()
HANDLE_CONFLICT = "unique file handle conflict"


# Rows per row group of the index. DuckDB writes a bulk insert to the file while it runs only
# in whole row groups, each thread its own; a smaller part stays in memory and is written,
# serially, by the commit or the insert's end. At DuckDB's default (122,880 rows) the listing of
# a 100,800-checkpoint store was such a part: its commit took ~0.2 s of a ~1.1 s `lastgood
# index`. At 65,536 neither of the two threads' ~50,000-row shares filled a group; at 32,768
# each writes one while it inserts (insert + commit ~0.09 s against ~0.15 s; the native 1M
# store's ingest and an index written at another size reopen unchanged). The size is an ATTACH
# option (not kept in the file), so the index is attached to a named in-memory instance, one
# per index file (shared by the process's connections, as a file's instance is).
ROW_GROUP_SIZE = 32_768
INDEX_ALIAS = '"index"'  # the name DuckDB gives index.duckdb when it opens the file itself


def _open(path: str) -> duckdb.DuckDBPyConnection:
    """A connection whose default database is the index file (attached with ROW_GROUP_SIZE)."""
    if path == ":memory:":
        return duckdb.connect(path)
    con = duckdb.connect(":memory:lastgood-" + hashlib.sha256(path.encode()).hexdigest()[:24])
    try:
        quoted = path.replace("'", "''")
        con.execute(f"ATTACH IF NOT EXISTS '{quoted}' AS {INDEX_ALIAS} (ROW_GROUP_SIZE {ROW_GROUP_SIZE})")
        con.execute(f"USE {INDEX_ALIAS}")
    except BaseException:
        con.close()
        raise
    return con


def use_index(cur: duckdb.DuckDBPyConnection, path: str) -> duckdb.DuckDBPyConnection:
    """A cursor (a new connection to the same instance) whose default database is the index."""
    if path != ":memory:":
        cur.execute(f"USE {INDEX_ALIAS}")
    return cur


# a held lock surfaces as IOException before DuckDB 2.0, as ResourceInUseException since
INDEX_BUSY: tuple[type[Exception], ...] = tuple(
    e for e in (duckdb.IOException, getattr(duckdb, "ResourceInUseException", None)) if e is not None)


def _connect_with_retry(path: str, wait: float = LOCK_RETRY_SECONDS,
                        cancel: threading.Event | None = None) -> duckdb.DuckDBPyConnection:
    deadline = time.monotonic() + wait
    while True:
        try:
            with _OPEN_CLOSE:
                return _plain_utc(_open(path))
        except INDEX_BUSY as exc:
            message = str(exc).lower()
            if (("lock" not in message and HANDLE_CONFLICT not in message) or time.monotonic() > deadline
                    or (cancel is not None and cancel.is_set())):
                raise LastgoodError(f"the index {path} is busy or unreadable: {exc}") from None
            if cancel is not None:
                cancel.wait(0.1)
            else:
                time.sleep(0.1)


def _close(con: duckdb.DuckDBPyConnection) -> None:
    with _OPEN_CLOSE:
        con.close()


# another name for UTC as the session's time zone: DuckDB hands each timestamp to pytz, whose
# first lookup of a name other than "UTC" scans every zone it ships (~0.1 s per command)
UTC_ALIASES = frozenset(("Etc/UTC", "Etc/UCT", "Etc/Universal", "Etc/Zulu", "UCT", "Universal", "Zulu"))


def _plain_utc(con: duckdb.DuckDBPyConnection) -> duckdb.DuckDBPyConnection:
    """The connection (and its cursors) with TimeZone 'UTC' when the machine's zone is UTC by another name."""
    (zone,) = con.execute("SELECT current_setting('TimeZone')").fetchall()[0]  # fetchall: no result left open
    if zone in UTC_ALIASES:
        con.execute("SET GLOBAL TimeZone = 'UTC'")
    return con


def _upsert_checkpoints(con: duckdb.DuckDBPyConnection, store_id: int,
                        batch: pa.Table | ParquetSource, fresh: bool) -> int:
    """Insert a batch (an Arrow table, or Parquet files DuckDB reads itself); returns its rows."""
    params: dict[str, Any] = {"sid": store_id}
    if isinstance(batch, ParquetSource):
        source = f"(SELECT *, {sql_statuses(Status.OK)} AS status, NULL AS status_reason FROM read_parquet($paths))"
        params["paths"] = list(batch.paths)
    else:
        con.register("incoming", batch)
        source = "incoming"
    try:
        if not fresh:
            # an 'incomplete' pending row never replaces a listed checkpoint
            con.execute(f"""DELETE FROM checkpoint_rows c USING {source} i
                WHERE c.store_id = $sid AND c.checkpoint_id = i.checkpoint_id AND c.run_id = i.run_id
                AND c.namespace = coalesce(i.namespace, '')
                AND NOT (i.status = {_INCOMPLETE} AND c.listed_status <> {_INCOMPLETE})""", params)
        keep = "" if fresh else """WHERE NOT EXISTS (SELECT 1 FROM checkpoint_rows c WHERE
            c.store_id = $sid AND c.checkpoint_id = i.checkpoint_id AND c.run_id = i.run_id
            AND c.namespace = coalesce(i.namespace, ''))"""
        con.execute(f"""INSERT INTO checkpoint_rows ({CHECKPOINT_COLUMNS}, store_id, listed_status,
                listed_reason)
            SELECT i.run_id, coalesce(i.namespace, ''), i.checkpoint_id, i.parent_id, i.step,
                i.created_at, i.trigger, i.kind, i.status, i.status_reason, i.size_bytes,
                i.checksum, i.agent, i.codec, i.location, i.metadata, $sid, i.status,
                i.status_reason
            FROM {source} i {keep}""", params)
        return batch.num_rows
    finally:
        if not isinstance(batch, ParquetSource):
            con.unregister("incoming")


def _insert_events(con: duckdb.DuckDBPyConnection, store_id: int, batch: pa.Table,
                   replace: bool) -> None:
    con.register("incoming_events", batch)
    try:
        if replace:
            con.execute("""DELETE FROM events e USING (SELECT DISTINCT checkpoint_id FROM
                incoming_events) i WHERE e.store_id = ? AND e.checkpoint_id = i.checkpoint_id""",
                        [store_id])
        con.execute("""INSERT INTO events SELECT ?, run_id, coalesce(namespace, ''), checkpoint_id,
            created_at, kind, channel, task_id, message FROM incoming_events""", [store_id])
    finally:
        con.unregister("incoming_events")


def _insert_findings(con: duckdb.DuckDBPyConnection, store_id: int, findings: list[Finding],
                     depth: str) -> None:
    if not findings:
        return
    _temp_table(con, "new_findings", {
        "run_id": ("VARCHAR", [f.run_id for f in findings]),
        "namespace": ("VARCHAR", [f.namespace or "" for f in findings]),
        "checkpoint_id": ("VARCHAR", [f.checkpoint_id for f in findings]),
        "check_name": ("VARCHAR", [f.check for f in findings]),
        "severity": ("VARCHAR", [f.severity for f in findings]),
        "message": ("VARCHAR", [f.message for f in findings])})
    con.execute("""INSERT INTO findings SELECT ?, run_id, namespace, checkpoint_id, check_name, severity,
                   message, ?, ? FROM new_findings""", [store_id, depth, datetime.now(UTC)])
    con.execute("DROP TABLE new_findings")


def _upsert_heads(con: duckdb.DuckDBPyConnection, store_id: int, heads: list[HeadRecord]) -> None:
    _temp_table(con, "incoming_heads", {
        "run_id": ("VARCHAR", [h.run_id for h in heads]),
        "namespace": ("VARCHAR", [h.namespace or "" for h in heads]),
        "checkpoint_id": ("VARCHAR", [h.checkpoint_id for h in heads])})
    try:
        con.execute("""DELETE FROM heads h USING incoming_heads i WHERE h.store_id = ?
                       AND h.run_id = i.run_id AND h.namespace = i.namespace""", [store_id])
        con.execute("INSERT INTO heads SELECT ?, run_id, namespace, checkpoint_id FROM incoming_heads",
                    [store_id])
    finally:
        con.execute("DROP TABLE IF EXISTS incoming_heads")


def _temp_table(con: duckdb.DuckDBPyConnection, name: str,
                columns: dict[str, tuple[str, list[Any]]]) -> None:
    """A temporary table from Python lists, zipped by DuckDB's unnest (no Arrow, no executemany)."""
    select = ", ".join(f"unnest(${col}::{sql_type}[]) AS {col}" for col, (sql_type, _) in columns.items())
    con.execute(f"CREATE OR REPLACE TEMP TABLE {name} AS SELECT {select}",
                {col: values for col, (_, values) in columns.items()})


def _apply_error_statuses(con: duckdb.DuckDBPyConnection, store_id: int) -> None:
    """Checkpoints with an error finding become corrupt (or incomplete), with its message."""
    if attached.is_attached(con, store_id):
        if not con.execute("""SELECT count(*) FROM findings WHERE store_id = ? AND severity = 'error'
                              AND checkpoint_id IS NOT NULL""", [store_id]).fetchone()[0]:
            return
        attached.materialize(con, store_id)
    con.execute(f"""
        UPDATE checkpoint_rows c SET
            status = CASE WHEN f."check" = $incomplete THEN {_INCOMPLETE} ELSE {sql_statuses(Status.CORRUPT)} END,
            status_reason = f.message
        FROM (SELECT checkpoint_id, run_id, namespace,
                     arg_min("check", found_at) AS "check", arg_min(message, found_at) AS message
              FROM findings WHERE store_id = $sid AND severity = 'error' AND checkpoint_id IS NOT NULL
              GROUP BY ALL) f
        WHERE c.store_id = $sid AND c.checkpoint_id = f.checkpoint_id AND c.run_id = f.run_id
          AND c.namespace = f.namespace AND c.status NOT IN {sql_statuses(*MARKED_STATUSES)}""",
                {"sid": store_id, "incomplete": str(Check.INCOMPLETE)})
