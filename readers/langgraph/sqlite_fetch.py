"""Column-wise listing of a LangGraph ``SqliteSaver`` database, and its prefetch.

A listing fetched row by row builds ~8 Python objects per checkpoint (0.3 s
for 100k rows, all holding the GIL) and then joins them again into Arrow
columns. Here SQLite concatenates each listed column of a rowid range into one
value (``group_concat``, NUL- or newline-separated; the whole range is one
GIL-free step), and the Arrow arrays are cut out of those buffers at C speed.

A range is taken this way only when every row in it is plain: key and type
columns text (a NULL only where LangGraph writes one), no separator inside a
value, ids within ``limits.MAX_ID_CHARS``, valid UTF-8, metadata a JSON object
per row, known codecs. Any other range is listed row by row by the reader,
through the validation boundary (``readers.langgraph_rows``) as before: the
findings are the same either way, this is only the fast way for clean ranges.

Ranges are fetched on up to two read-only connections in threads when no
writer has the database open (immutable: every connection reads the same
bytes), else on the scan's own connection, inside its transaction.

``prefetch`` starts a full listing's fetch before the caller has imported
anything heavy (the CLI calls it first thing for ``lastgood index DB``); the
reader's full scan takes the result when a stat of the files says nothing
changed since, and fetches itself otherwise. This module imports only the
standard library (and the light ``common.sqlite``) at load time.
"""

from __future__ import annotations

import sqlite3
import sys
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lastgood.readers.common.sqlite import connect_immutable, file_stamp, has_header, is_live

CHUNK_ROWS = 4096
THREADS = 2

# one row per rowid range: its row count, how many rows fit the column-wise path, and each
# listed column concatenated (NUL between key values, newline between metadata values)
_FITS = """typeof(thread_id) = 'text' AND typeof(checkpoint_id) = 'text' AND typeof(type) = 'text'
  AND typeof(checkpoint_ns) IN ('text', 'null') AND typeof(parent_checkpoint_id) IN ('text', 'null')
  AND typeof(metadata) IN ('text', 'blob') AND typeof(checkpoint) <> 'null'"""
CHUNK_SQL = f"""
SELECT count(*), total({_FITS}),
  CAST(group_concat(CAST(thread_id AS BLOB), x'00') AS BLOB),
  CAST(group_concat(CAST(coalesce(checkpoint_ns, '') AS BLOB), x'00') AS BLOB),
  CAST(group_concat(CAST(checkpoint_id AS BLOB), x'00') AS BLOB),
  CAST(group_concat(CAST(coalesce(parent_checkpoint_id, '') AS BLOB), x'00') AS BLOB),
  CAST(group_concat(CAST(type AS BLOB), x'00') AS BLOB),
  CAST(group_concat(length(checkpoint)) AS BLOB),
  CAST(group_concat(CAST(metadata AS BLOB), x'0a') AS BLOB)
FROM checkpoints WHERE rowid > ? AND rowid <= ? AND rowid NOT IN (SELECT value FROM json_each(?))
"""
# max(rowid) is one b-tree search; count(*) would walk every leaf page (~0.1 s for 100k big rows)
# before the threads start: a prefetch plans by rowids, at most PREFETCH_RANGES ranges
PLAN_SQL = "SELECT coalesce(max(rowid), 0) FROM checkpoints"
PREFETCH_RANGES = 1024

Range = tuple[int, int]  # rowid > lo AND rowid <= hi


def ranges(after: int, last: int, rows: int) -> list[Range]:
    """Rowid ranges after ``after`` up to ``last`` holding ~CHUNK_ROWS rows each when
    rowids are dense; never more ranges than ``rows`` (the table's) / CHUNK_ROWS + 1,
    however sparse, nor more than the rowids after ``after`` need."""
    if last <= after:
        return []
    count = max(1, -(-min(max(rows, 1), last - after) // CHUNK_ROWS))
    span = -(-(last - after) // count)
    return [(lo, min(lo + span, last)) for lo in range(after, last, span)]


NOT_BUILT = object()  # ChunkFetch.get: the range's columns are the caller's to build
Fetched = tuple[tuple[Any, ...] | None, Any]  # a range's CHUNK_SQL row (None: refused), its columns


class ChunkFetch:
    """The CHUNK_SQL rows of ``spans``, fetched in threads (each on a connection of its
    own), or by :meth:`get` on ``conn`` when no connect is given. Threads also build each
    range's columns with ``build`` (langgraph_sqlite_listing.chunk_columns: pure, and mostly
    numpy and Arrow work) while the caller is busy elsewhere. :meth:`get` returns a range's
    row, None when SQLite refused the range (then list it row by row), and its columns
    (NOT_BUILT when not built here)."""

    def __init__(self, spans: Sequence[Range], skipped: str,
                 connect: Callable[[], sqlite3.Connection] | None = None,
                 conn: sqlite3.Connection | None = None,
                 build: Callable[[tuple[Any, ...]], Any] | None = None) -> None:
        self.spans = list(spans)
        self.skipped = skipped
        self._conn = conn
        self._build = build
        self._rows: dict[int, Fetched] = {}
        self._done = [threading.Event() for _ in self.spans]
        self._stop = False
        self._threads: list[threading.Thread] = []
        if connect is not None and self.spans:
            parts = min(THREADS, len(self.spans))
            size = -(-len(self.spans) // parts)
            for start in range(0, len(self.spans), size):
                indices = range(start, min(start + size, len(self.spans)))
                thread = threading.Thread(target=self._run, args=(connect, indices),
                                          name="lastgood-sqlite-fetch", daemon=True)
                self._threads.append(thread)
                thread.start()

    def _run(self, connect: Callable[[], sqlite3.Connection], indices: range) -> None:
        try:
            conn = connect()
        except (sqlite3.Error, OSError):
            conn = None
        try:
            for i in indices:
                if self._stop:
                    break
                row = self._query(conn, i) if conn is not None else None
                self._rows[i] = row, self._built(row)
                self._done[i].set()
        finally:
            for i in indices:
                self._done[i].set()
            if conn is not None:
                conn.close()

    def _query(self, conn: sqlite3.Connection, i: int) -> tuple[Any, ...] | None:
        lo, hi = self.spans[i]
        try:
            return conn.execute(CHUNK_SQL, (lo, hi, self.skipped)).fetchone()
        except sqlite3.Error:  # e.g. a range's text over SQLite's length limit
            return None

    def _built(self, row: tuple[Any, ...] | None) -> Any:
        if self._build is None or row is None:
            return NOT_BUILT
        try:
            return self._build(row)
        except Exception:  # noqa: BLE001 - the caller builds it again and meets the error itself
            return NOT_BUILT

    def get(self, i: int) -> Fetched:
        if not self._threads:
            return (self._query(self._conn, i) if self._conn is not None else None), NOT_BUILT
        self._done[i].wait()
        return self._rows.get(i, (None, NOT_BUILT))

    def cancel(self) -> None:
        self._stop = True


# --- prefetch ------------------------------------------------------------------------------


@dataclass
class Prefetch:
    stamp: tuple[Any, ...]
    last: int
    fetch: ChunkFetch


_PREFETCHED: dict[str, Prefetch] = {}
_LOCK = threading.Lock()


def prefetch_url(url: str) -> bool:
    """:func:`prefetch` for a plain path to a SQLite file (other URL forms: False)."""
    path = Path(url).expanduser()
    return has_header(path) and prefetch(path)


def prefetch(path: Path) -> bool:
    """Start fetching a full listing of the LangGraph SQLite database at ``path`` in
    threads; False (nothing started) unless it is one and no writer has it open."""
    try:
        if not path.is_file() or is_live(path):
            return False
        stamp = file_stamp(path)
        conn = connect_immutable(path)
        try:
            columns = {row[1] for row in conn.execute("PRAGMA table_info(checkpoints)")}
            if not {"thread_id", "checkpoint_ns", "checkpoint_id", "parent_checkpoint_id", "type",
                    "checkpoint", "metadata"} <= columns:
                return False
            (last,) = conn.execute(PLAN_SQL).fetchone()
        finally:
            conn.close()
    except (sqlite3.Error, OSError):
        return False
    spans = ranges(0, last, min(last, PREFETCH_RANGES * CHUNK_ROWS))
    fetch = ChunkFetch(spans, "[]", connect=lambda: connect_immutable(path), build=_columns)
    with _LOCK:
        old = _PREFETCHED.pop(str(path.resolve()), None)
        _PREFETCHED[str(path.resolve())] = Prefetch(stamp, last, fetch)
    if old is not None:
        old.fetch.cancel()
    return True


def _columns(row: tuple[Any, ...]) -> Any:
    """chunk_columns once the command itself imported its module (a prefetch starts before
    the command's imports; importing Lastgood modules here too could cross them); before
    that the range is left to the scan (NOT_BUILT)."""
    listing = sys.modules.get("lastgood.readers.langgraph.sqlite_listing")
    chunk_columns = getattr(listing, "chunk_columns", None)  # None while still being imported
    return chunk_columns(row) if chunk_columns is not None else NOT_BUILT


def take_prefetched(path: Path, stamp: tuple[Any, ...], last: int) -> ChunkFetch | None:
    """The prefetched full listing of ``path`` when the files are as they were when it
    started (``stamp``) and it lists up to rowid ``last``; None otherwise (then fetch)."""
    with _LOCK:
        found = _PREFETCHED.pop(str(path.resolve()), None)
    if found is None:
        return None
    if found.stamp != stamp or found.last != last or file_stamp(path) != stamp:
        found.fetch.cancel()
        return None
    return found.fetch


def drop_prefetched(path: Path) -> None:
    """Stop and forget a prefetch of ``path`` (a scan that lists nothing needs none)."""
    with _LOCK:
        found = _PREFETCHED.pop(str(path.resolve()), None)
    if found is not None:
        found.fetch.cancel()
