"""The LangGraph Postgres listing's fetch: server-side cursors read in threads.

A full listing of a big ``checkpoints`` table is split by page range (``ctid``,
a TID range scan on PostgreSQL 14+) into halves read by two connections that
share one snapshot (``pg_export_snapshot`` / ``SET TRANSACTION SNAPSHOT``): the
server computes both halves at once (the per-checkpoint blob-size lookups are
most of the listing's time), and each half is fetched in a thread (psycopg waits
on the socket without the interpreter lock), so the server computes the next
batch while the caller builds Arrow columns from the last. A standby (no
snapshot export) or a small table is read by one connection, still in a thread.
Every connection stays read-only; nothing is written.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Any, TypeVar

import psycopg
from psycopg import sql

from lastgood.errors import LastgoodError

# Split only tables of at least this many 8 KiB pages (~16 MiB): below, one
# connection's start-up costs more than the half it would save.
MIN_SPLIT_PAGES = 2048
PAGES_SQL = """
SELECT pg_relation_size('checkpoints') / current_setting('block_size')::int8, pg_is_in_recovery()
"""
# The halves: rows on pages before the split, and the rest (a partition of every row).
PART_FILTERS = (" AND c.ctid < %(split)s::tid", " AND c.ctid >= %(split)s::tid")
_DONE = object()
Part = tuple[psycopg.Connection[Any], str]
T = TypeVar("T")


def split_parts(conn: psycopg.Connection[Any], scan_sql: str, connect: Callable[[], psycopg.Connection[Any]],
                ) -> tuple[list[Part], dict[str, Any], str | None]:
    """The listing's parts (connection, SQL), their extra parameters and the shared
    snapshot: two halves on ``conn`` and a new connection in ``conn``'s snapshot, or
    ``conn`` alone (snapshot None)."""
    with conn.cursor() as cur:
        pages, standby = cur.execute(PAGES_SQL).fetchone() or (0, True)
        if standby or pages < MIN_SPLIT_PAGES:
            return [(conn, scan_sql)], {}, None
        snapshot = cur.execute("SELECT pg_export_snapshot()").fetchone()[0]
    other = in_snapshot(connect, snapshot)
    if other is None:
        return [(conn, scan_sql)], {}, None
    split = f"({pages // 2},0)"
    return [(conn, scan_sql + PART_FILTERS[0]), (other, scan_sql + PART_FILTERS[1])], {"split": split}, snapshot


def in_snapshot(connect: Callable[[], psycopg.Connection[Any]], snapshot: str) -> psycopg.Connection[Any] | None:
    """A new connection whose transaction reads the exported ``snapshot``; None when the
    server refuses one more (e.g. ``max_connections``): the caller reads without it."""
    try:
        conn = connect()
    except (psycopg.Error, LastgoodError):
        return None
    try:
        conn.execute(sql.SQL("SET TRANSACTION SNAPSHOT {}").format(sql.Literal(snapshot)))
    except psycopg.Error:
        conn.close()
        return None
    return conn


def in_thread(work: Callable[[], T]) -> Callable[[], T]:
    """``work`` started in a thread; the returned function waits for its result (or raises its error)."""
    outcome: dict[str, Any] = {}

    def run() -> None:
        try:
            outcome["result"] = work()
        except BaseException as exc:  # raised by the waiting side
            outcome["error"] = exc

    thread = threading.Thread(target=run, name="lastgood-pg-side", daemon=True)
    thread.start()

    def wait() -> T:
        thread.join()
        if "error" in outcome:
            raise outcome["error"]
        return outcome["result"]

    return wait


def stream_rows(parts: Sequence[Part], params: dict[str, Any], batch_rows: int) -> Iterator[list[Any]]:
    """Row batches of every part as they arrive; a part's error is raised here. Closing
    the iterator stops the threads (each after its current batch)."""
    rows_queue: queue.Queue[Any] = queue.Queue(maxsize=2 * len(parts))
    stop = threading.Event()

    def put(item: Any) -> None:
        while not stop.is_set():
            try:
                rows_queue.put(item, timeout=0.1)
                return
            except queue.Full:
                continue

    def fetch(conn: psycopg.Connection[Any], query: str) -> None:
        try:
            with conn.cursor(name="lastgood_scan", binary=True) as cur:  # bytea as bytes, not hex
                cur.itersize = batch_rows
                cur.execute(query, params)
                while not stop.is_set() and (rows := cur.fetchmany(batch_rows)):
                    put(rows)
        except BaseException as exc:  # handed to the consumer, raised there
            put(exc)
        finally:
            put(_DONE)

    threads = [threading.Thread(target=fetch, args=part, name="lastgood-pg-fetch", daemon=True)
               for part in parts]
    for thread in threads:
        thread.start()
    try:
        done = 0
        while done < len(threads):
            item = rows_queue.get()
            if item is _DONE:
                done += 1
            elif isinstance(item, BaseException):
                raise item
            else:
                yield item
    finally:
        stop.set()
        for thread in threads:
            thread.join()
