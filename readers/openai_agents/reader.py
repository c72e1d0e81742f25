"""Reader for OpenAI Agents SDK session databases (``SQLiteSession``, ``AdvancedSQLiteSession``).

Run = session; namespace = branch (``""`` for a plain session and for an advanced session's
``main``); checkpoint = one item (see :mod:`lastgood.readers.openai_agents.listing` for the
listing, :mod:`…history` for states, :mod:`…recovery` for restores). Reading never writes: the
file is opened read-only (``mode=ro``, and ``immutable`` when no writer is active, so no
``-wal``/``-shm`` is left behind), unlike the SDK, whose constructor switches the file to WAL.

The state at a checkpoint is ``{"messages": [items up to it, in order], "session": {...}}``:
the items as ``get_items()`` returns them (rows that are not JSON skipped, as the SDK skips
them), with ``arguments``/``output`` JSON text shown parsed.
"""

from __future__ import annotations

import json
import os
import sqlite3
import threading
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from lastgood.checks import Check
from lastgood.errors import CheckpointNotFound, DecodeError, ReaderError
from lastgood.readers.base import CheckpointRecord, Finding, Reader, Scan, backend_named
from lastgood.readers.common.sqlite import (NotUtf8, connect_readonly, reading_past_bad_text, rows_past_bad_text,
                                            sqlite_path, sqlite_schema)
from lastgood.readers.journal import RecoveryBackend, RetentionBackend
from lastgood.readers.openai_agents.archived import archived_rows, list_archived, parents_of
from lastgood.readers.openai_agents.history import Lineage, lineage
from lastgood.readers.openai_agents.items import clarify, loads, normalize_message
from lastgood.readers.openai_agents.listing import (Walk, events_table, listing_sql, orphan_findings,
                                                    usage_rows)
from lastgood.readers.openai_agents.plainwalk import walk_plain
from lastgood.readers.openai_agents.recovery import decoded, layout_of
from lastgood.readers.openai_agents.schema import (ARCHIVED_ITEMS, ARCHIVED_STRUCTURE, ARCHIVED_USAGE, STRUCTURE,
                                                   USAGE, Layout, branch_of, detect, quote)

TOKEN_VERSION = 1
MAX_FILTERED_SESSIONS = 1000  # a check of more sessions lists the whole store (one pass, no filter)
Key = tuple[str, str, str]


@dataclass
class _Memo:
    """What the last full scan found, while the file is unchanged (answers structure checks)."""

    token: str
    stamp: tuple[Any, ...]
    listed: set[Key]
    findings: list[Finding]


def file_stamp(path: Path) -> tuple[Any, ...]:
    """Changes whenever the database (or its write-ahead log) is written."""
    out: list[Any] = []
    for name in (str(path), f"{path}-wal"):
        try:
            info = os.stat(name)
            out += [info.st_mtime_ns, info.st_size]
        except OSError:
            out += [None, None]
    return tuple(out)


class OpenAIAgentsReader(Reader):
    """OpenAI Agents SDK SQLiteSession / AdvancedSQLiteSession database, read-only."""

    name = "openai-agents"
    cumulative_states = True  # a state is the conversation up to its item
    description = "OpenAI Agents SDK session database (SQLiteSession / AdvancedSQLiteSession)"
    recovery_class: ClassVar[str] = "lastgood.readers.openai_agents.recovery:SessionRecovery"

    def __init__(self, url: str, storage_options: Mapping[str, Any] | None = None) -> None:
        super().__init__(url, storage_options)
        self.path = sqlite_path(url)
        self._lock = threading.RLock()
        self._conn: sqlite3.Connection | None = None
        self._stamp: tuple[Any, ...] = ()
        self._memo: _Memo | None = None
        with self._connection():
            pass

    @classmethod
    def sniff(cls, url: str, storage_options: Mapping[str, Any] | None = None) -> bool:
        return detect(sqlite_schema(url)) is not None

    def close(self) -> None:
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None

    @contextmanager
    def _connection(self) -> Iterator[sqlite3.Connection]:
        """The shared read-only connection, reopened when the file changed (a restore, a writer)."""
        with self._lock:
            stamp = file_stamp(self.path)
            if self._conn is None or stamp != self._stamp:
                self.close()
                self._conn, self._stamp = connect_readonly(self.path), stamp
                self.layout = _layout(self._conn, self.path)
            try:
                yield self._conn
            except sqlite3.Error as exc:
                raise ReaderError(f"{self.path}: SQLite error: {exc}") from exc

    # ---- listing -----------------------------------------------------------------------------

    def scan(self, since: str | None = None) -> Scan:
        stamp = file_stamp(self.path)
        conn = connect_readonly(self.path, mmap=True)
        try:
            conn.execute("BEGIN")
            try:
                return self._scan_in(conn, since, stamp)
            finally:
                conn.execute("COMMIT")
        except sqlite3.Error as exc:
            raise ReaderError(f"{self.path}: SQLite error: {exc}") from exc
        finally:
            conn.close()

    def _scan_in(self, conn: sqlite3.Connection, since: str | None, stamp: tuple[Any, ...]) -> Scan:
        layout = _layout(conn, self.path)
        counts = _counts(conn, layout)
        token = json.dumps({"v": TOKEN_VERSION, "advanced": layout.advanced, **counts}, sort_keys=True)
        if since == token:
            return Scan(token=token, full=False, checkpoints=iter(()), heads=None)
        sessions = _touched(conn, layout, since, counts)
        if sessions == []:
            return Scan(token=token, full=False, checkpoints=iter(()), heads=None)
        full = sessions is None
        archived = archived_rows(conn, layout) if full else []
        walk = self._walk(conn, layout, sessions, parents_of(archived))
        list_archived(walk, archived)
        listing = walk.out
        if full:
            self._remember(token, stamp, walk)
            findings = orphan_findings(conn, layout)
        else:
            findings = orphan_findings(conn, layout, _new_sessions(conn, layout, sessions or [], since))
        tables = [listing.table()] + ([walk.archived.table()] if walk.archived.count else [])
        events = [events_table(listing.events)] if listing.events else []
        return Scan(token=token, full=full, checkpoints=iter(tables), events=iter(events), findings=findings,
                    heads=listing.heads)

    def _walk(self, conn: sqlite3.Connection, layout: Layout, sessions: list[str] | None,
              wanted: set[int] | None = None) -> Walk:
        sql, params = listing_sql(layout, sessions)
        usage = usage_rows(conn, sessions) if layout.usage else None
        rows = _fetch(conn, sql, params)
        first_refs = _first_refs(rows) if layout.advanced else None
        walk = Walk(layout, usage, first_refs, wanted)
        if layout.advanced:
            walk.rows(rows)
        else:
            walk_plain(walk, rows)
        return walk

    def _remember(self, token: str, stamp: tuple[Any, ...], walk: Walk) -> None:
        listed: set[Key] = set()
        for listing in (walk.out, walk.archived):
            c = listing.columns
            listed.update(zip(c["run_id"], c["namespace"], c["checkpoint_id"]))
        self._memo = _Memo(token, stamp, listed, list(walk.out.findings))

    # ---- integrity -----------------------------------------------------------------------------

    def listed_structure(self, token: str | None) -> tuple[int, list[Finding]] | None:
        """The last full scan's per-item findings, when it made ``token`` and the file is unchanged."""
        memo = self._memo
        if memo is None or token != memo.token or file_stamp(self.path) != memo.stamp:
            return None
        return len(memo.listed), list(memo.findings)

    def check_structure(self, keys: Sequence[Key]) -> list[Finding]:
        """Malformed JSON, items that are not objects, structure rows without their message, duplicate
        sequence numbers, rows gone — for ``keys``, from one listing of their sessions."""
        wanted = set(keys)
        if not wanted:
            return []
        memo = self._memo
        if memo is not None and file_stamp(self.path) == memo.stamp and wanted <= memo.listed:
            return [f for f in memo.findings if (f.run_id, f.namespace, f.checkpoint_id) in wanted]
        sessions = sorted({k[0] for k in wanted})
        with self._connection() as conn:
            layout = self.layout
            walk = self._walk(conn, layout, sessions if len(sessions) <= MAX_FILTERED_SESSIONS else None)
            listed = {k for lst in (walk.out, walk.archived) for k in zip(
                lst.columns["run_id"], lst.columns["namespace"], lst.columns["checkpoint_id"])}
            archived = _archived_keys(conn, layout, wanted - listed)
        findings = [f for f in walk.out.findings if (f.run_id, f.namespace, f.checkpoint_id) in wanted]
        for run, ns, cid in sorted(wanted - listed - archived):
            findings.append(Finding(Check.MISSING, "error", f"item {cid} is no longer in session {run!r}", run, ns, cid))
        return findings

    def check_checkpoints(self, records: Iterable[CheckpointRecord], read_data: bool = False) -> Iterator[Finding]:
        """Both depths: every listed item's JSON is parsed by the structure check already."""
        yield from self.check_structure([(r.run_id, r.namespace or "", r.checkpoint_id) for r in records])

    # ---- one checkpoint ------------------------------------------------------------------------

    def load_state(self, record: CheckpointRecord) -> Any:
        with self._connection() as conn:
            with reading_past_bad_text(conn):  # an item that is not UTF-8: its own finding, not a failed read
                history = self._history(conn, record)
                own = history.units[-1]
                _require_item(own.data, record.checkpoint_id, own.message_id, self.layout)
                items = [clarify(item) for item in decoded([u.data for u in history.units])]
                session = self._session(conn, record, items)
        return {"messages": items, "session": session}

    def _history(self, conn: sqlite3.Connection, record: CheckpointRecord) -> Lineage:
        """The checkpoint's history; DecodeError when its item is gone (popped, cleared)."""
        try:
            return lineage(conn, self.layout, record.run_id, record.namespace or "", record.checkpoint_id)
        except CheckpointNotFound as exc:
            raise DecodeError(str(exc)) from None

    def _session(self, conn: sqlite3.Connection, record: CheckpointRecord, items: list[Any]) -> dict[str, Any]:
        layout = self.layout
        info: dict[str, Any] = {"session_id": record.run_id, "store": layout.kind}
        if layout.advanced:
            info["branch"] = branch_of(record.namespace or "")
        if layout.s is not None:
            row = conn.execute(f"SELECT created_at, updated_at FROM {layout.s} WHERE session_id = ?",
                               (record.run_id,)).fetchone()
            if row is None:
                info["session_row"] = None  # items without a session row (an orphan: see the findings)
            else:
                info.update(created_at=row[0], updated_at=row[1])
        turns = sum(1 for item in items if isinstance(item, dict) and item.get("role") == "user")
        info.update(items=len(items), turns=turns)
        if layout.usage:
            usage = usage_rows(conn, [record.run_id])
            branch = branch_of(record.namespace or "")
            info["usage"] = {str(t): u for (_s, b, t), u in sorted(usage.items(), key=lambda kv: kv[0][2])
                             if b == branch and isinstance(t, int) and t <= turns}
        return info

    def read_blob(self, record: CheckpointRecord) -> bytes:
        with self._connection() as conn:
            data = self._history(conn, record).units[-1].data
        return data.encode("utf-8", "surrogatepass") if isinstance(data, str) else bytes(data or b"")

    # ---- capabilities --------------------------------------------------------------------------

    def recovery(self) -> RecoveryBackend:
        return backend_named(self.recovery_class, self)

    def retention(self) -> RetentionBackend:
        """Prune: whole stale sessions, archived, then deleted (:mod:`.retention`)."""
        return backend_named("lastgood.readers.openai_agents.retention:SessionRetention", self)  # type: ignore[return-value]

    def normalize_message(self, value: Any) -> dict[str, Any] | None:
        return normalize_message(value)


# ---- helpers -----------------------------------------------------------------------------------


def _layout(conn: sqlite3.Connection, path: Path) -> Layout:
    try:
        return layout_of(conn, path)
    except sqlite3.DatabaseError as exc:
        raise ReaderError(f"{path} is not a readable SQLite database ({exc})") from None


def _fetch(conn: sqlite3.Connection, sql: str, params: tuple[Any, ...]) -> list[tuple[Any, ...]]:
    """The rows; text that is not UTF-8 is read as its bytes (``NotUtf8``) rather than failing the
    query: such an item does not parse, so it is listed with an ``undecodable`` finding (the SDK's
    ``get_items`` fails on it)."""
    return rows_past_bad_text(conn, lambda: conn.execute(sql, params).fetchall())


def _first_refs(rows: list[tuple[Any, ...]]) -> dict[int, int]:
    """message id -> the first structure row that references it (where its events are listed)."""
    first: dict[int, int] = {}
    for row in rows:
        mid, sid = row[6], row[0]
        if mid is not None and (mid not in first or sid < first[mid]):
            first[mid] = sid
    return first


def _require_item(data: Any, checkpoint_id: str, message_id: Any, layout: Layout) -> None:
    if data is None:
        raise DecodeError(f"item {checkpoint_id}: message {message_id} is not in {quote(layout.messages)}")
    try:
        loads(data)
    except (ValueError, UnicodeDecodeError) as exc:
        if isinstance(data, NotUtf8):
            raise DecodeError(f"item {checkpoint_id}: message_data is not UTF-8 text ({exc}); the SDK cannot "
                              "read this session") from None
        raise DecodeError(f"item {checkpoint_id}: message_data is not valid JSON ({exc})") from None


# ---- the scan token ----------------------------------------------------------------------------

# max(rowid) and count(*) as separate scalar subqueries: one b-tree search and SQLite's count fast path
COUNTS_SQL = "(SELECT coalesce(max(rowid), 0) FROM {t}), (SELECT count(*) FROM {t})"
APPENDED = ("messages", "structure", "usage")


def _tables(layout: Layout) -> dict[str, str]:
    names = {"messages": layout.messages}
    if layout.advanced:
        names["structure"] = STRUCTURE
    if layout.usage:
        names["usage"] = USAGE
    if layout.archive:
        names.update(archive_items=ARCHIVED_ITEMS, archive_structure=ARCHIVED_STRUCTURE,
                     archive_usage=ARCHIVED_USAGE)
    return names


def _counts(conn: sqlite3.Connection, layout: Layout) -> dict[str, list[int]]:
    out = {}
    for key, table in _tables(layout).items():
        try:
            row = conn.execute(f"SELECT {COUNTS_SQL.format(t=quote(table))}").fetchone()
        except sqlite3.OperationalError:  # an archive table not made (yet) for this layout
            continue
        out[key] = list(row)
    return out


def _touched(conn: sqlite3.Connection, layout: Layout, since: str | None, counts: dict[str, list[int]]
             ) -> list[str] | None:
    """Sessions with rows appended since ``since`` when only appends happened (None: list all)."""
    try:
        previous = json.loads(since) if since else None
    except ValueError:
        return None
    if not isinstance(previous, dict) or previous.get("v") != TOKEN_VERSION \
            or previous.get("advanced") != layout.advanced:
        return None
    if any(previous.get(k) != v for k, v in counts.items() if k not in APPENDED) or \
            set(previous) - {"v", "advanced"} != set(counts):
        return None  # a restore moved rows: list everything
    tables = _tables(layout)
    sessions: set[str] = set()
    for key in APPENDED:
        if key not in counts:
            continue
        old_max, old_count = previous[key]
        table = quote(tables[key])
        added = conn.execute(f"SELECT count(*) FROM {table} WHERE rowid > ?", (old_max,)).fetchone()[0]
        if counts[key][0] < old_max or counts[key][1] - added != old_count:
            return None  # rows deleted (pop_item, clear_session, compaction): list everything
        sessions.update(r[0] for r in conn.execute(f"SELECT DISTINCT session_id FROM {table} WHERE rowid > ?",
                                                   (old_max,)))
    return sorted(sessions)


def _new_sessions(conn: sqlite3.Connection, layout: Layout, sessions: list[str], since: str | None) -> list[str]:
    """Those of ``sessions`` that had no item when ``since`` was made (their orphan check is new)."""
    old_max = json.loads(since)["messages"][0] if since else 0
    rows = conn.execute(f"""SELECT session_id FROM {layout.m} WHERE session_id IN (SELECT value FROM json_each(?))
        GROUP BY session_id HAVING min(id) > ?""", (json.dumps(sessions), old_max)).fetchall()
    return [r[0] for r in rows]


def _archived_keys(conn: sqlite3.Connection, layout: Layout, keys: set[Key]) -> set[Key]:
    """Those of ``keys`` that are archived rows (not listed by a listing of live rows)."""
    if not keys or not layout.archive:
        return set()
    table = ARCHIVED_STRUCTURE if layout.advanced else ARCHIVED_ITEMS
    ids = [int(k[2]) for k in keys if k[2].isdigit()]
    rows = conn.execute(f"SELECT id FROM {table} WHERE id IN (SELECT value FROM json_each(?))",
                        (json.dumps(ids),)).fetchall()
    found = {str(r[0]) for r in rows}
    return {k for k in keys if k[2] in found}
