"""The listing query of an ADK SQLite database, fetched by rowid ranges in a thread, and its prefetch.

Most of a listing's time is SQLite parsing each ``event_data`` once (``json_extract`` of the fields
in :data:`INFO_PATHS`), which runs without the GIL: ranges are fetched on a read-only connection
in a thread when no writer has the database open (immutable: it reads the same bytes). One thread,
not two: two connections fetching at once took ~1.3 s of CPU where one takes ~0.7 s, and ended
later on two cores (each row's tuple is built under the GIL, and SQLite's allocator is shared).
``prefetch_url`` starts a full listing's fetch before the ``lastgood`` command has imported
anything heavy (the registry names it for ``adk-sqlite``); the reader's full scan takes the result
when a stat of the files says nothing changed since, and fetches itself otherwise.
This module imports only the standard library (and the light ``common.sqlite``).
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from lastgood.readers.adk.rows import INFO, INFO_PATHS, NOT_UTF8
from lastgood.readers.common.sqlite import (NotUtf8, connect_immutable, file_stamp, has_header, is_live,
                                            rows_past_bad_text)

CHUNK_ROWS = 10_000
THREADS = 1

_INFO = "json_extract(event_data, " + ", ".join("'$." + ".".join(p) + "'" for _, p in INFO_PATHS) + ")"
# epoch microseconds of SQLAlchemy's DATETIME text ('YYYY-MM-DD HH:MM:SS.ffffff', naive UTC)
TS_MICROS = """CASE typeof(timestamp)
  WHEN 'text' THEN unixepoch(substr(timestamp, 1, 19)) * 1000000
       + CAST(substr(substr(timestamp, 21) || '000000', 1, 6) AS INTEGER)
  WHEN 'integer' THEN timestamp * 1000000 WHEN 'real' THEN CAST(timestamp * 1000000 AS INTEGER) END"""
_PARTS = """CASE WHEN instr(event_data, '"function_') THEN json_extract(event_data, '$.content.parts') END"""
_VALID = "CASE WHEN event_data IS NULL THEN NULL WHEN substr(ltrim(event_data), 1, 1) = char(123) THEN 1 ELSE 0 END"
_KEYS = "rowid, app_name, user_id, session_id, id, invocation_id"
# the fast form parses event_data once; json_extract raises on malformed JSON: then the rows are
# listed again with SAFE_SQL, which asks json_valid first
LIST_SQL = f"""SELECT {_KEYS}, {TS_MICROS}, length(event_data), {_INFO}, {_VALID}, {_PARTS}
FROM events WHERE {{where}}"""
SAFE_SQL = f"""SELECT {_KEYS}, {TS_MICROS}, length(event_data), CASE WHEN json_valid(event_data) THEN {_INFO} END,
  CASE WHEN event_data IS NULL THEN NULL WHEN json_valid(event_data) AND json_type(event_data) = 'object'
       THEN 1 ELSE 0 END,
  CASE WHEN json_valid(event_data) THEN {_PARTS} END
FROM events WHERE {{where}}"""
RANGE = "rowid > ? AND rowid <= ?"


def rows_where(conn: sqlite3.Connection, where: str, params: Sequence[Any]) -> list[tuple[Any, ...]]:
    """The listed rows ``where`` selects (fast query; the safe one when some event_data is
    malformed); text that is not UTF-8 read as ``NotUtf8`` when the driver failed on some."""
    return rows_past_bad_text(conn, lambda: _rows_where(conn, where, params), _readable)


def _readable(row: tuple[Any, ...]) -> tuple[Any, ...]:
    """A row read past text that is not UTF-8: its text decoded with replacement characters, its
    event_data fields dropped and its validity :data:`NOT_UTF8` (an event ADK cannot load)."""
    if not any(isinstance(value, NotUtf8) for value in row):
        return row
    text = [value.decode("utf-8", "replace") if isinstance(value, NotUtf8) else value for value in row[:INFO]]
    return (*text, None, NOT_UTF8, None)


def _rows_where(conn: sqlite3.Connection, where: str, params: Sequence[Any]) -> list[tuple[Any, ...]]:
    try:
        return conn.execute(LIST_SQL.format(where=where), tuple(params)).fetchall()
    except sqlite3.OperationalError as exc:
        if "json" not in str(exc).lower() or "decode" in str(exc).lower():
            raise
        return conn.execute(SAFE_SQL.format(where=where), tuple(params)).fetchall()


def ranges(last: int) -> list[tuple[int, int]]:
    return [(lo, min(lo + CHUNK_ROWS, last)) for lo in range(0, last, CHUNK_ROWS)]


class Fetch:
    """Every range's rows, fetched in threads on connections of their own."""

    def __init__(self, path: Path, last: int) -> None:
        self.spans = ranges(last)
        self.rows: dict[int, list[tuple[Any, ...]] | BaseException] = {}
        self.done = threading.Event()
        parts = max(1, min(THREADS, len(self.spans)))
        self._left = parts
        self._lock = threading.Lock()
        for k in range(parts):
            threading.Thread(target=self._run, args=(path, range(k, len(self.spans), parts)),
                             name="lastgood-adk-fetch", daemon=True).start()
        if not self.spans:
            self.done.set()

    def _run(self, path: Path, indices: range) -> None:
        try:
            conn = connect_immutable(path)
        except (sqlite3.Error, OSError) as exc:
            for i in indices:
                self.rows[i] = exc
        else:
            try:
                for i in indices:
                    try:
                        self.rows[i] = rows_where(conn, RANGE, self.spans[i])
                    except sqlite3.Error as exc:
                        self.rows[i] = exc
            finally:
                conn.close()
        with self._lock:
            self._left -= 1
            if self._left <= 0:
                self.done.set()

    def result(self) -> list[tuple[Any, ...]] | None:
        """Every row in range order, or None when a range failed (then the caller lists itself)."""
        self.done.wait()
        out: list[tuple[Any, ...]] = []
        for i in range(len(self.spans)):
            got = self.rows.get(i)
            if not isinstance(got, list):
                return None
            out.extend(got)
        return out


_PREFETCHED: dict[str, tuple[tuple[Any, ...], int, Fetch]] = {}
_LOCK = threading.Lock()
LAST_SQL = "SELECT coalesce(max(rowid), 0) FROM events"


def prefetch_url(url: str) -> bool:
    """Start the full listing of the ADK SQLite database at ``url`` (a plain path) in threads;
    False (nothing started) unless it is one and no writer has it open."""
    path = Path(url).expanduser()
    try:
        if not has_header(path) or is_live(path):
            return False
        stamp = file_stamp(path)
        conn = connect_immutable(path)
        try:
            tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
            columns = {r[1] for r in conn.execute("PRAGMA table_info(events)")}
            if not {"sessions", "events", "app_states", "user_states"} <= tables or "event_data" not in columns:
                return False
            (last,) = conn.execute(LAST_SQL).fetchone()
        finally:
            conn.close()
    except (sqlite3.Error, OSError):
        return False
    with _LOCK:
        _PREFETCHED[str(path.resolve())] = (stamp, last, Fetch(path, last))
    return True


def take_prefetched(path: Path, last: int) -> list[tuple[Any, ...]] | None:
    """The prefetched rows of ``path`` when its files are as they were when the fetch started and
    it lists up to rowid ``last``; None otherwise."""
    with _LOCK:
        found = _PREFETCHED.pop(str(path.resolve()), None)
    if found is None:
        return None
    stamp, fetched_last, fetch = found
    if fetched_last != last or file_stamp(path) != stamp:
        return None
    return fetch.result()


def fetch_all(path: Path, conn: sqlite3.Connection, last: int) -> list[tuple[Any, ...]]:
    """Every listed row: in threads when no writer is active, else on ``conn`` (its transaction)."""
    if not is_live(path) and last > CHUNK_ROWS:
        rows = Fetch(path, last).result()
        if rows is not None:
            return rows
    out: list[tuple[Any, ...]] = []
    for span in ranges(last):
        out.extend(rows_where(conn, RANGE, span))
    return out
