"""PostgreSQL connections every reader of a Postgres-backed store shares: read-only, repeatable-read
transactions, and connection errors as one line naming the server without its credentials."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
from psycopg import IsolationLevel

from lastgood.errors import ReaderError, StoreNotFound
from lastgood.readers.common.urls import display_url

CONNECT_TIMEOUT = 10
NOT_FOUND_HINTS = ("does not exist", "connection refused", "could not translate host name",
                   "timeout expired", "no route to host", "name or service not known")


def connect_readonly(url: str) -> psycopg.Connection[Any]:
    """A connection whose transactions are all READ ONLY and REPEATABLE READ.

    JIT compilation is off for the session (see :func:`_jit_off`)."""
    try:
        conn = psycopg.connect(url, autocommit=False, connect_timeout=CONNECT_TIMEOUT,
                               prepare_threshold=None)
        _jit_off(conn)
    except psycopg.Error as exc:
        raise connect_error(url, exc) from None
    conn.read_only = True
    conn.isolation_level = IsolationLevel.REPEATABLE_READ
    return conn


def _jit_off(conn: psycopg.Connection[Any]) -> None:
    """``SET jit = off`` for the session: the listing's estimated cost (one blob lookup per
    introduced channel) made the server spend ~0.3 s compiling a query that runs sooner
    without. A statement, not a startup option, so poolers that refuse ``options``
    accept it; a server without JIT (before PostgreSQL 11) is left as it is."""
    try:
        conn.execute("SET jit = off")
    except psycopg.errors.UndefinedObject:
        conn.rollback()
        return
    conn.commit()  # ends the transaction the SET opened (nothing written)


class ReadConnection:
    """One read-only connection a reader shares between its reads: each :meth:`cursor` is a fresh
    read-only transaction on it (rolled back at the end). A lost connection is dropped (the next read
    reopens it); every driver error leaves as :func:`read_error`."""

    def __init__(self, url: str, lock: threading.RLock | None = None,
                 connect: Callable[[str], psycopg.Connection[Any]] | None = None) -> None:
        self.url = url
        self.lock = lock if lock is not None else threading.RLock()
        self.connect = connect or connect_readonly
        self.conn: psycopg.Connection[Any] | None = None

    @contextmanager
    def cursor(self) -> Iterator[psycopg.Cursor[Any]]:
        """A cursor in a fresh read-only transaction on the shared connection."""
        with self.lock:
            if self.conn is None or self.conn.closed:
                self.conn = self.connect(self.url)
            conn = self.conn
            try:
                with conn.cursor() as cur:
                    yield cur
            except psycopg.OperationalError as exc:
                self.conn = None
                conn.close()
                raise read_error(self.url, exc) from None
            except psycopg.Error as exc:
                raise read_error(self.url, exc) from None
            finally:
                if not conn.closed:
                    conn.rollback()

    def close(self) -> None:
        with self.lock:
            if self.conn is not None:
                self.conn.close()
                self.conn = None


def read_error(url: str, exc: Exception) -> ReaderError:
    """A failed read as one line naming the server without credentials."""
    return ReaderError(f"{display_url(url)}: {one_line(str(exc), url)}")


def connect_error(url: str, exc: Exception) -> StoreNotFound | ReaderError:
    """A one-line error naming the server without credentials."""
    reason = one_line(str(exc), url).removeprefix("connection failed: ")
    message = f"cannot connect to {display_url(url)}: {reason}"
    if any(hint in reason.lower() for hint in NOT_FOUND_HINTS):
        return StoreNotFound(message)
    return ReaderError(message)


def one_line(text: str, url: str) -> str:
    """``text`` on one line, without the DSN's password (as written, percent-decoded, or as the
    driver quotes it back: "unexpected spaces found in …")."""
    line = " ".join(text.split())
    for password in sorted(_passwords(url), key=len, reverse=True):
        line = line.replace(password, "***")
    return line


def _passwords(url: str) -> set[str]:
    """Every form of the DSN's password: what the driver parsed, and what the URL holds between the
    user's ':' and the last '@' (a password with an unencoded '/', '@' or space included)."""
    from urllib.parse import unquote

    found: set[str] = set()
    try:
        value = psycopg.conninfo.conninfo_to_dict(url).get("password")
        if value:
            found.add(str(value))
    except psycopg.Error:
        pass
    if "://" in url and "@" in url.split("://", 1)[1]:
        userinfo = url.split("://", 1)[1].rsplit("@", 1)[0]
        if ":" in userinfo:
            raw = userinfo.split(":", 1)[1]
            found |= {raw, unquote(raw), " ".join(unquote(raw).split())}
    return {p for p in found if p}


SCHEMA_SQL = """SELECT table_name, array_agg(column_name::text) FROM information_schema.columns
WHERE table_schema = ANY(current_schemas(false)) GROUP BY table_name"""


SCHEMA_CACHE_SECONDS = 5.0  # one look serves every reader's sniff of the same URL
_schemas: dict[str, tuple[float, dict[str, frozenset[str]]]] = {}


def postgres_schema(url: str) -> dict[str, frozenset[str]]:
    """Table name -> column names visible on the search path of the database at ``url``: what
    readers sniff a store by (one short read-only connection, kept a few seconds so every reader
    asking in turn shares it). Raises the one-line connection error when the server cannot be
    reached."""
    import time

    now = time.monotonic()
    cached = _schemas.get(url)
    if cached is not None and now - cached[0] < SCHEMA_CACHE_SECONDS:
        return cached[1]
    with connect_readonly(url) as conn:
        rows = conn.execute(SCHEMA_SQL).fetchall()
    schema = {str(table): frozenset(columns or ()) for table, columns in rows}
    _schemas[url] = (now, schema)
    return schema
