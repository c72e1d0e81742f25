"""SQLite files every reader of a SQLite-backed store shares: the path a URL names, a read-only
connection that leaves no file behind, and a cheap look at the schema for sniffing.

Reading never writes: the database is opened through a ``file:`` URI with ``mode=ro`` (and
``query_only``); when no ``-wal``/``-journal`` file is beside it, also ``immutable=1`` so SQLite
creates no ``-wal``/``-shm`` files.
"""

from __future__ import annotations

import functools
import sqlite3
from collections.abc import Callable, Iterator
from contextlib import closing, contextmanager
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import unquote

from lastgood.errors import ReaderError, StoreNotFound

SQLITE_HEADER = b"SQLite format 3\x00"
T = TypeVar("T")
MMAP_LIMIT = 2**31
LIVE_SUFFIXES = ("-wal", "-journal")


class NotUtf8(bytes):
    """The bytes of a SQLite TEXT value that is not valid UTF-8 (what :func:`text_or_not_utf8` gives
    for it, where Python's driver would fail the whole query)."""


def text_or_not_utf8(raw: bytes) -> str | NotUtf8:
    """A connection's ``text_factory`` that keeps reading past text that is not UTF-8."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return NotUtf8(raw)


@contextmanager
def reading_past_bad_text(conn: sqlite3.Connection, factory: Callable[[bytes], Any] = text_or_not_utf8
                          ) -> Iterator[sqlite3.Connection]:
    """``conn`` reading TEXT with ``factory`` for the block (default: text that is not UTF-8 as
    ``NotUtf8``), then as ``str`` again."""
    conn.text_factory = factory
    try:
        yield conn
    finally:
        conn.text_factory = str


def rows_past_bad_text(conn: sqlite3.Connection, read: Callable[[], list[T]],
                       repair: Callable[[T], T] | None = None) -> list[T]:
    """``read()``; when Python's driver fails it on text that is not UTF-8, ``read()`` again with
    such text as ``NotUtf8`` (each row through ``repair``, when given)."""
    try:
        return read()
    except sqlite3.OperationalError as exc:
        if "decode" not in str(exc).lower():
            raise
    with reading_past_bad_text(conn):
        rows = read()
    return [repair(row) for row in rows] if repair is not None else rows


def is_utf8(data: bytes | None) -> bool:
    """Whether the bytes of a TEXT value (``CAST(col AS BLOB)``) are UTF-8 (None: nothing to read)."""
    try:
        (data or b"").decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def is_live(path: Path) -> bool:
    """A writer may be active: its ``-wal`` or ``-journal`` file is beside the database."""
    return any(Path(f"{path}{suffix}").exists() for suffix in LIVE_SUFFIXES)


def file_stamp(path: Path) -> tuple[Any, ...]:
    """Size and mtime of the database and its journal/WAL: a commit changes one of them."""
    stamp: list[Any] = []
    for suffix in ("", *LIVE_SUFFIXES):
        try:
            info = Path(f"{path}{suffix}").stat()
            stamp.append((info.st_size, info.st_mtime_ns))
        except OSError:
            stamp.append(None)
    return tuple(stamp)


def connect_immutable(path: Path) -> sqlite3.Connection:
    """A read-only, immutable, memory-mapped connection (only when no writer is active): what the
    listings fetched in threads read on, every connection seeing the same bytes."""
    conn = sqlite3.connect(path.resolve().as_uri() + "?mode=ro&immutable=1", uri=True, isolation_level=None,
                           check_same_thread=False)
    conn.execute("PRAGMA query_only = 1")
    conn.execute(f"PRAGMA mmap_size = {min(path.stat().st_size, MMAP_LIMIT)}")
    return conn


def sqlite_path(url: str) -> Path:
    """The database path for a plain path, ``file://path`` or ``sqlite:///path`` URL.

    ``sqlite:///rel.db`` is relative (SQLAlchemy style) unless only the
    absolute ``/rel.db`` exists; ``sqlite:////abs.db`` is absolute.
    """
    if url.startswith("sqlite://"):
        rest = unquote(url[len("sqlite://"):].split("?", 1)[0])
        if rest.startswith("//"):
            return Path(rest[1:])
        relative = Path(rest.lstrip("/"))
        return relative if relative.exists() or not Path(rest).exists() else Path(rest)
    if url.startswith("file://"):
        rest = unquote(url[len("file://"):].split("?", 1)[0])
        return Path(rest[len("localhost"):] if rest.startswith("localhost/") else rest)
    if "://" in url:
        raise ReaderError(f"not a SQLite path or URL: {url}")
    return Path(url).expanduser()


def connect_readonly(path: Path, mmap: bool = False) -> sqlite3.Connection:
    """A read-only connection that leaves no file behind (StoreNotFound if absent).

    ``mmap`` maps the file when no writer is active (immutable): a full scan
    walks every blob's overflow pages, and mapped pages skip a copy each.
    """
    if not path.is_file():
        raise StoreNotFound(f"store not found: {path} (no such file)")
    uri = path.resolve().as_uri() + "?mode=ro" + ("" if is_live(path) else "&immutable=1")
    try:
        conn = sqlite3.connect(uri, uri=True, isolation_level=None, check_same_thread=False)
    except sqlite3.Error as exc:
        raise ReaderError(f"{path} could not be opened read-only ({exc})") from None
    try:
        conn.execute("PRAGMA query_only = 1")
        if mmap and not is_live(path):
            conn.execute(f"PRAGMA mmap_size = {min(path.stat().st_size, MMAP_LIMIT)}")
        conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
    except sqlite3.DatabaseError as exc:
        conn.close()
        raise ReaderError(f"{path} is not a readable SQLite database ({exc})") from None
    return conn


@contextmanager
def read_transaction(path: Path) -> Iterator[sqlite3.Connection]:
    """A read-only connection holding one read transaction (a consistent snapshot), closed after;
    a SQLite error inside becomes one ReaderError naming the file."""
    with closing(connect_readonly(path)) as conn:
        try:
            conn.execute("BEGIN")
            yield conn
            conn.execute("COMMIT")
        except sqlite3.Error as exc:
            raise ReaderError(f"{path}: SQLite error: {exc}") from exc


def table_columns(conn: sqlite3.Connection, table: str) -> set[str]:
    return {row[1] for row in conn.execute(f"PRAGMA table_info({table})")}


def has_header(path: Path) -> bool:
    try:
        with path.open("rb") as handle:
            return handle.read(16) == SQLITE_HEADER
    except OSError:
        return False


def sqlite_schema(url: str) -> dict[str, frozenset[str]] | None:
    """Table name -> column names of the SQLite database ``url`` names, or None when it is not
    one (no such file, not a SQLite header, unreadable): what readers sniff a store by. Read
    once per file version, however many readers ask."""
    try:
        path = sqlite_path(url)
        if not path.is_file() or not has_header(path):
            return None
        stat = path.stat()
        return _schema(str(path.resolve()), stat.st_mtime_ns, stat.st_size)
    except (ReaderError, StoreNotFound, sqlite3.Error, OSError):
        return None


@functools.lru_cache(maxsize=32)
def _schema(path: str, _mtime_ns: int, _size: int) -> dict[str, frozenset[str]]:
    with closing(connect_readonly(Path(path))) as conn:
        tables = [row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
        return {table: frozenset(table_columns(conn, table)) for table in tables}
