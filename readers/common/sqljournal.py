"""The recovery journal as a table inside the store's own database (SQLite or PostgreSQL), and the
write transaction every SQL recovery backend runs its action in.

``lastgood_journal(seq, id, entry, hash)``: one sealed entry per row (:func:`lastgood.readers.journal.seal`),
created by the first write action (reading never creates it) and written in the same transaction
as the change it records: an action happens whole or not at all, so nothing is ever pending.

SQLite: a file nobody may write (``chmod a-w``, read-only even for root) is refused before it is
opened — opening it would leave ``-wal``/``-shm`` files beside it; the action runs under
``BEGIN IMMEDIATE`` (the database's write lock). PostgreSQL: the caller's ``prepare`` takes the
table locks it needs; any database error rolls everything back and is one line.
"""

from __future__ import annotations

import os
import sqlite3
import stat
from collections.abc import Callable, Iterable, Mapping
from contextlib import closing
from pathlib import Path
from typing import Any, TypeVar

from lastgood.errors import ReaderError
from lastgood.readers import journal as jr

T = TypeVar("T")
TABLE = "lastgood_journal"
SQLITE_DDL = f"""CREATE TABLE IF NOT EXISTS {TABLE} (
    seq INTEGER PRIMARY KEY, id TEXT NOT NULL UNIQUE, entry TEXT NOT NULL, hash TEXT NOT NULL)"""
POSTGRES_DDL = f"""CREATE TABLE IF NOT EXISTS {TABLE} (
    seq BIGINT PRIMARY KEY, id TEXT NOT NULL UNIQUE, entry TEXT NOT NULL, hash TEXT NOT NULL)"""
TIP_SQL = f"SELECT seq, hash FROM {TABLE} ORDER BY seq DESC LIMIT 1"
ENTRIES_SQL = f"SELECT entry FROM {TABLE} ORDER BY seq"


def append(conn: Any, entry: Mapping[str, Any], new_head: str | None, placeholder: str = "?") -> dict[str, Any]:
    """Seal ``entry`` (with ``new_head``) after the journal's tip and insert it (the caller's transaction)."""
    tip = conn.execute(TIP_SQL).fetchone()
    seq, prev = (int(tip[0]) + 1, str(tip[1])) if tip else (1, "")
    sealed = jr.seal({**entry, "new_head": new_head}, seq, prev)
    p = placeholder
    conn.execute(f"INSERT INTO {TABLE} (seq, id, entry, hash) VALUES ({p}, {p}, {p}, {p})",
                 (seq, sealed["id"], jr.canonical(sealed).decode(), sealed["hash"]))
    return sealed


def entries(conn: Any) -> list[dict[str, Any]]:
    """Every entry in order (an unreadable one as ``{"id": None, "unreadable": True}``)."""
    return [jr.parse_entry(r[0]) or {"id": None, "unreadable": True} for r in conn.execute(ENTRIES_SQL).fetchall()]


def sqlite_exists(conn: Any, name: str = TABLE) -> bool:
    found = conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (name,)).fetchone()
    return found is not None


def postgres_exists(conn: Any, name: str = TABLE) -> bool:
    return bool(conn.execute("SELECT to_regclass(%s)", (name,)).fetchone()[0])


class SqlJournal:
    """What every SQL ``RecoveryBackend`` shares: the journal read in a read-only connection, and
    ``commit``/``append`` each one write transaction. A dialect gives ``_read`` (a read-only
    connection), ``_journal_exists(conn)``, ``_transaction(body)`` and ``placeholder``; a format
    gives ``_commit_in(conn, change)`` (re-check the head, change the rows, append the entry)."""

    placeholder = "?"

    def _read(self) -> Any:
        raise NotImplementedError

    def _journal_exists(self, conn: Any) -> bool:
        raise NotImplementedError

    def _transaction(self, body: Callable[[Any], T]) -> T:
        raise NotImplementedError

    def _commit_in(self, conn: Any, change: jr.Change) -> dict[str, Any]:
        raise NotImplementedError

    def journal_entries(self) -> list[dict[str, Any]]:
        with closing(self._read()) as conn:
            return entries(conn) if self._journal_exists(conn) else []

    def commit(self, change: jr.Change) -> dict[str, Any]:
        return self._transaction(lambda conn: self._commit_in(conn, change))

    def append(self, entry: Mapping[str, Any]) -> dict[str, Any]:
        """An entry that changes no head (a failed check), in its own transaction."""
        return self._transaction(lambda conn: append(conn, entry, entry.get("new_head"), self.placeholder))

    def pending(self) -> list[dict[str, Any]]:
        return []  # an action is one transaction: it happened whole or not at all


# ---- SQLite: the write transaction ------------------------------------------------------------


def open_for_writing(path: Path | str) -> sqlite3.Connection:
    """A connection to write ``path`` with, after refusing a file that is read-only (its mode, or
    not writable by this process) or missing: both say nothing was written."""
    try:
        mode = os.stat(path).st_mode
    except OSError as exc:
        raise ReaderError(f"{path}: cannot write: {exc.strerror or exc}; nothing was written") from None
    # a file nobody may write (chmod a-w) is read-only even for root; checked before opening it,
    # which would leave -wal/-shm files beside it
    if not mode & (stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH) or not os.access(path, os.W_OK):
        raise ReaderError(f"{path} is read-only (mode {stat.filemode(mode)}): cannot write; nothing was written")
    try:
        return sqlite3.connect(str(path), timeout=30, isolation_level=None)
    except sqlite3.Error as exc:
        raise ReaderError(f"{path}: cannot open for writing: {exc}") from None


def sqlite_transaction(path: Path | str, body: Callable[[sqlite3.Connection], T],
                       setup: Iterable[str] = (SQLITE_DDL,), pragmas: Iterable[str] = (),
                       errors: type[sqlite3.Error] = sqlite3.Error) -> T:
    """``body(conn)`` in one ``BEGIN IMMEDIATE`` transaction, after ``setup`` (the journal table by
    default); an SQLite error of ``errors`` (a read-only folder, a full disk, a lock held too long)
    rolls it all back and says nothing was written; anything else rolls back and is raised."""
    with closing(open_for_writing(path)) as conn:
        try:
            for pragma in pragmas:
                conn.execute(pragma)
            conn.execute("BEGIN IMMEDIATE")
            for statement in setup:
                conn.execute(statement)
            result = body(conn)
            conn.execute("COMMIT")
            return result
        except errors as exc:
            _roll_back(conn)
            raise ReaderError(f"{path}: cannot write: {exc}; nothing was written") from None
        except BaseException:
            _roll_back(conn)
            raise


def _roll_back(conn: sqlite3.Connection) -> None:
    if conn.in_transaction:
        conn.execute("ROLLBACK")


# ---- PostgreSQL: the write transaction -----------------------------------------------------------


def postgres_connect(url: str) -> Any:
    """A connection to write with (no autocommit; connection errors as one line, credentials hidden)."""
    import psycopg

    from lastgood.readers.common.postgres import connect_error

    try:
        return psycopg.connect(url, autocommit=False, prepare_threshold=None)
    except psycopg.Error as exc:
        raise connect_error(url, exc) from None


def postgres_transaction(conn: Any, body: Callable[[Any], T], prepare: Callable[[Any], None]) -> T:
    """``prepare(conn)`` (tables, locks) then ``body(conn)``, committed together on ``conn`` (closed
    after); any database error rolls it all back, as one line."""
    import psycopg

    with closing(conn):
        try:
            prepare(conn)
            result = body(conn)
            conn.commit()
            return result
        except psycopg.Error as exc:
            conn.rollback()
            raise ReaderError(f"the action was rolled back: {exc}".splitlines()[0]) from None
        except BaseException:
            conn.rollback()
            raise
