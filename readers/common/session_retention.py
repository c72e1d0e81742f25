"""Retention of agent-framework session stores in SQL databases: what goes is whole stale sessions.

A session store's checkpoint is the session's state after item (event, run) N, and each state is the
one before it plus one item: every checkpoint needs the one before it to be read. :meth:`dependencies`
gives those edges (rule ``session-history``), so the core's keep-last/keep-daily… rules keep whole
sessions (their heads are always kept), and what a prune removes is whole sessions that
``--keep-runs-within`` finds stale.

A prune, in order:

1. **read** — in one read snapshot, every row of each planned session, from every table of the
   format that belongs to it (sessions, items/events, structure, usage, Lastgood's own archive of a
   restore's rows…), as the database holds them (SQLite: types and rowids kept; PostgreSQL:
   :mod:`.session_retention_pg`), and a digest of them; then the
   format's reader lists the store: a session whose checkpoints are not exactly the planned ones
   (written to since the plan) stays (``skipped``);
2. **archive** — the rows, session by session, into the native archive
   (:mod:`lastgood.readers.native.archive`; the session's rows travel with its first checkpoint, the
   others name it), its manifest (with each pack's sha256) written last;
3. **delete + journal** — one transaction (SQLite ``BEGIN IMMEDIATE``; PostgreSQL the session's row
   ``FOR UPDATE``, under the journal's lock) re-checks that nothing planned became
   pinned or a journaled action's target (else nothing is deleted), re-reads each session's digest
   (a session written to during the prune stays whole: ``skipped``), deletes the others' rows and
   appends the ``prune`` entry (archive, manifest sha256, the sessions deleted) to the format's own
   journal table.

A kill before step 3 commits leaves every session in the store (and maybe in an archive no journal
entry names); after, in the archive that the journal's entry names. The undo inserts the rows back
byte for byte (same ids, rowids, sequence numbers) in one transaction that also appends the ``undo``
entry; a session that exists again (written to since) is a conflict, and ``--force`` leaves it in
the archive. Both are single transactions, so nothing is ever pending.
"""

from __future__ import annotations

import hashlib
import importlib
import sqlite3
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, closing, contextmanager
from dataclasses import dataclass
from typing import Any

import msgpack

from lastgood.errors import ConflictError, ReaderError
from lastgood.readers import journal as jr
from lastgood.readers.base import as_table
from lastgood.readers.common import sqljournal
from lastgood.readers.common.sqlite import connect_readonly, sqlite_path, table_columns
from lastgood.readers.common.urls import display_url
from lastgood.readers.native.archive import Archive, default_archive_beside, manifest_path
from lastgood.readers.journal import breakdown_row

HISTORY_RULE = "session-history"  # a checkpoint needs the one before it (its state is that one plus an item)
ROWID = "__lastgood_rowid__"
Key = tuple[str, str, str]


@dataclass(frozen=True, slots=True)
class SessionTable:
    """A table whose rows belong to sessions: ``columns`` hold the session's key (in key order)."""

    name: str
    columns: tuple[str, ...]
    rowid: bool = True  # SQLite: an ordinary rowid table (not WITHOUT ROWID), its rowids are kept
    schema: str | None = None  # PostgreSQL: the table's schema when it is not on the search path

    @property
    def sql_name(self) -> str:
        return (quote(self.schema) + "." if self.schema else "") + quote(self.name)


@dataclass
class _Session:
    run_id: str
    key: tuple[Any, ...]
    tables: dict[str, list[dict[str, Any]]]
    digest: str


def quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


class SessionRetention:
    """The flow every SQL session store shares; a dialect (:class:`SqliteSessionRetention`,
    ``session_retention_pg.PostgresSessionRetention``) gives connections, rows and space; a format
    gives ``reader_name``, ``reader_class`` ("module:Class"), ``recovery_class`` (its journal), and
    :meth:`session_tables` / :meth:`session_key` (what a session's rows are)."""

    reader_name = "sessions"
    reader_class = ""
    recovery_class = ""
    placeholder = "?"
    back_again_text = "exists again (written to since the prune)"  # an undo's conflict, after the session's name

    def __init__(self, url: str, storage_options: Mapping[str, Any] | None = None) -> None:
        self.url = url
        self.storage_options = dict(storage_options or {})

    # ---- what a format provides --------------------------------------------------------------

    def session_tables(self, conn: Any) -> list[SessionTable]:
        """The tables a session's rows are in, parents first (deleted in reverse order)."""
        raise NotImplementedError

    def session_key(self, conn: Any, run_id: str) -> tuple[Any, ...] | None:
        """The values of a session's key columns for the index's ``run_id`` (None: no such session)."""
        raise NotImplementedError

    def session_label(self, run_id: str) -> str:
        return f"session {run_id!r}"

    def run_namer(self, conn: Any) -> Callable[[Sequence[Any]], str]:
        """The index's run id of a session key (the inverse of :meth:`session_key`)."""
        return lambda key: str(key[0])

    # ---- what a dialect provides ---------------------------------------------------------------

    def _snapshot(self) -> AbstractContextManager[Any]:
        """A connection in one read transaction (a consistent snapshot)."""
        raise NotImplementedError

    def _rows(self, conn: Any, table: SessionTable, key: Sequence[Any]) -> list[dict[str, Any]]:
        """The session's rows of ``table`` as stored (each value's type kept), in a stable order."""
        raise NotImplementedError

    def _insert(self, conn: Any, table: SessionTable, rows: Sequence[Mapping[str, Any]]) -> None:
        raise NotImplementedError

    def _lock(self, conn: Any, tables: Sequence[SessionTable], key: Sequence[Any]) -> None:
        """Hold the session against the framework's writes until the transaction ends (SQLite: the
        transaction's write lock does)."""

    def _journal(self, conn: Any) -> list[dict[str, Any]]:
        raise NotImplementedError

    # ---- plumbing ----------------------------------------------------------------------------

    def recovery(self) -> Any:
        return load_class(self.recovery_class)(self.url, self.storage_options)

    def _reader(self) -> Any:
        return load_class(self.reader_class)(self.url, self.storage_options)

    def _source(self) -> dict[str, Any]:
        return {"reader": self.reader_name, "store": display_url(self.url)}

    def _where(self, table: SessionTable) -> str:
        return " AND ".join(f"{quote(c)} = {self.placeholder}" for c in table.columns)

    # ---- the keep-set --------------------------------------------------------------------------

    def dependencies(self, rows: Any) -> Any:
        return history_edges(rows)

    # ---- reading a session's rows ----------------------------------------------------------------

    def _read_session(self, conn: Any, tables: Sequence[SessionTable], run_id: str) -> _Session | None:
        key = self.session_key(conn, run_id)
        if key is None:
            return None
        found = {t.name: self._rows(conn, t, key) for t in tables}
        if not any(found.values()):
            return None
        return _Session(run_id, key, found, _digest(found))

    def _exists(self, conn: Any, tables: Sequence[SessionTable], key: Sequence[Any]) -> bool:
        for t in tables:
            if conn.execute(f"SELECT 1 FROM {t.sql_name} WHERE {self._where(t)} LIMIT 1", tuple(key)).fetchone():
                return True
        return False

    def _listed(self, runs: set[str] | None) -> dict[str, set[Key]]:
        """The reader's checkpoints of ``runs`` (None: of every run) now (a full listing of the store)."""
        reader = self._reader()
        try:
            out: dict[str, set[Key]] = {}
            for batch in reader.scan().checkpoints:
                for r in as_table(batch).select(["run_id", "namespace", "checkpoint_id"]).to_pylist():
                    if runs is None or r["run_id"] in runs:
                        out.setdefault(r["run_id"], set()).add((r["run_id"], r["namespace"] or "", r["checkpoint_id"]))
            return out
        finally:
            reader.close()

    # ---- prune -----------------------------------------------------------------------------------

    def prune(self, request: jr.PruneRequest) -> jr.RetentionOutcome:
        action_id = str(request.entry["id"])
        planned: dict[str, dict[Key, dict[str, Any]]] = {}
        for r in request.forget.to_pylist():
            planned.setdefault(r["run_id"], {})[(r["run_id"], r["namespace"] or "", r["checkpoint_id"])] = r
        outcome = jr.RetentionOutcome(entry={})
        sessions = self._read_planned(planned, outcome)
        listed = self._listed(set(sessions))
        for run_id in sorted(sessions):
            if listed.get(run_id, set()) != set(planned[run_id]):
                del sessions[run_id]
                skip_run(outcome, planned[run_id], "the session is not as planned (written to since the plan, or "
                                                    "only part of it was to go; a session goes whole): kept")
        archive = Archive(request.archive_url, request.archive_options)
        extra = {"sessions": {s.run_id: {"key": list(s.key), "digest": s.digest, "carrier": list(min(planned[s.run_id])),
                                         "rows": {t: len(v) for t, v in s.tables.items() if v}}
                              for s in sessions.values()}}
        items = self._items(sessions, planned)
        manifest, digest = archive.stage(action_id, self._source(), items, extra, request.progress,
                                         sum(len(planned[r]) for r in sessions))
        note = {**dict(request.entry.get("note") or {}), "archive": display_url(request.archive_url),
                "manifest": manifest_path(action_id), "manifest_sha256": digest, "bytes": manifest["bytes"]}
        sealed = self.recovery()._transaction(
            lambda conn: self._delete_in(conn, request.entry, note, sessions, planned, outcome))
        outcome.entry, outcome.bytes = sealed, int(manifest["bytes"])
        if request.progress:
            request.progress("delete", outcome.checkpoints, outcome.checkpoints)
        outcome.space = self.reclaim(request.vacuum)
        return outcome

    def _read_planned(self, planned: Mapping[str, Mapping[Key, Any]], outcome: jr.RetentionOutcome
                      ) -> dict[str, _Session]:
        sessions: dict[str, _Session] = {}
        with self._snapshot() as conn:
            tables = self.session_tables(conn)
            for run_id in sorted(planned):
                session = self._read_session(conn, tables, run_id)
                if session is None:
                    skip_run(outcome, planned[run_id], "no longer in the store")
                else:
                    sessions[run_id] = session
        return sessions

    def _items(self, sessions: Mapping[str, _Session], planned: Mapping[str, Mapping[Key, dict[str, Any]]]
               ) -> Iterator[tuple[Key, Any, dict[str, Any], str]]:
        for run_id in sorted(sessions):
            session = sessions[run_id]
            carrier = min(planned[run_id])
            for key in sorted(planned[run_id]):
                rows = ({"session": list(session.key), "tables": session.tables} if key == carrier
                        else {"session": list(session.key), "with": list(carrier[1:])})
                yield key, planned[run_id][key], rows, session.digest

    def _delete_in(self, conn: Any, entry: Mapping[str, Any], note: dict[str, Any],
                   sessions: Mapping[str, _Session], planned: Mapping[str, Mapping[Key, Any]],
                   outcome: jr.RetentionOutcome) -> dict[str, Any]:
        """Under the write lock: refuse what became protected; keep what changed; delete the rest;
        the journal entry, in the same transaction."""
        self._refuse_protected(conn, {k for run in sessions for k in planned[run]})
        tables = self.session_tables(conn)
        gone = []
        for run_id, session in sorted(sessions.items()):
            self._lock(conn, tables, session.key)
            now = self._read_session(conn, tables, run_id)
            if now is None or now.digest != session.digest:
                skip_run(outcome, planned[run_id], "written to during the prune: kept whole")
                continue
            for t in reversed(tables):
                conn.execute(f"DELETE FROM {t.sql_name} WHERE {self._where(t)}", tuple(session.key))
            gone.append(run_id)
            outcome.checkpoints += len(planned[run_id])
        note.update(count=outcome.checkpoints, sessions=gone)
        return sqljournal.append(conn, {**entry, "note": note}, None, self.placeholder)

    def _refuse_protected(self, conn: Any, keys: set[Key]) -> None:
        entries = self._journal(conn)
        protected = dict(jr.journal_targets(entries))
        protected.update({k: f"pinned by {p.action_id}" for k, p in jr.fold_pins(entries).items()})
        found = [f"{k[2]} of {k[0]!r} ({why})" for k, why in protected.items() if k in keys]
        if found:
            raise ConflictError("since the plan, " + "; ".join(found[:5]) + " must be kept: nothing was deleted "
                                "(the archive written for it can be removed) — plan the prune again")

    # ---- undo --------------------------------------------------------------------------------------

    def _archived(self, original: Mapping[str, Any], options: Mapping[str, Any] | None = None
                  ) -> tuple[Archive, dict[str, Any], list[str]]:
        note = original.get("note") if isinstance(original.get("note"), Mapping) else {}
        archive = Archive(str(note.get("archive") or ""), options)
        manifest = archive.manifest(str(original["id"]), note.get("manifest_sha256"))
        return archive, manifest, [str(s) for s in note.get("sessions") or []]

    def _back_again(self, manifest: Mapping[str, Any], runs: Sequence[str]) -> list[str]:
        """The pruned sessions that exist in the store again (written to since the prune)."""
        info = manifest.get("sessions") or {}
        with self._snapshot() as conn:
            tables = self.session_tables(conn)
            return [run for run in runs if run in info and self._exists(conn, tables, info[run]["key"])]

    def unprune_conflicts(self, original: Mapping[str, Any], force: bool = False) -> list[str]:
        try:
            _, manifest, runs = self._archived(original)
        except (ReaderError, OSError, ValueError) as exc:
            return [f"the archive cannot be read: {exc}"]
        if force:
            return []
        return [f"{self.session_label(run)} {self.back_again_text}: restoring would mix its old history into the new "
                "one (--force leaves it in the archive)" for run in self._back_again(manifest, runs)]

    def unprune(self, request: jr.UnpruneRequest) -> jr.RetentionOutcome:
        archive, manifest, runs = self._archived(request.original, request.archive_options)
        info = manifest.get("sessions") or {}
        back = {run: self._bundle(archive, manifest, run) for run in runs if run in info}
        outcome = jr.RetentionOutcome(entry={})
        sealed = self.recovery()._transaction(lambda conn: self._restore_in(conn, request, back, info, outcome))
        outcome.entry = sealed
        archive.mark_restored(str(request.original["id"]), str(sealed["id"]), outcome.checkpoints)
        if request.progress:
            request.progress("restore", outcome.checkpoints, outcome.checkpoints)
        return outcome

    def _bundle(self, archive: Archive, manifest: Mapping[str, Any], run: str) -> tuple[dict[str, Any], int, int]:
        """(the session's tables, its checkpoints, its packs' bytes), checked against the manifest."""
        info = manifest["sessions"][run]
        carrier = (run, *[str(v) for v in info["carrier"][1:]])
        entries = [e for e in manifest["entries"] if e[0] == run]
        found = list(archive.bundles(manifest, {tuple(carrier)}))  # type: ignore[arg-type]
        if not found or "tables" not in found[0][1]:
            raise ReaderError(f"the archive lacks the rows of {self.session_label(run)}; nothing was restored")
        tables = found[0][1]["tables"]
        if _digest(tables) != info["digest"]:
            raise ReaderError(f"the archived rows of {self.session_label(run)} do not match the manifest's digest; "
                              "nothing was restored")
        size = sum(int(p) for p in {str(e[3]): e[5] for e in entries}.values())
        return tables, len(entries), size

    def _restore_in(self, conn: Any, request: jr.UnpruneRequest,
                    back: Mapping[str, tuple[dict[str, Any], int, int]], info: Mapping[str, Any],
                    outcome: jr.RetentionOutcome) -> dict[str, Any]:
        tables = {t.name: t for t in self.session_tables(conn)}
        order = list(tables)
        for run, (rows, count, size) in sorted(back.items()):
            self._lock(conn, list(tables.values()), info[run]["key"])
            if self._exists(conn, list(tables.values()), info[run]["key"]):
                if not request.force:
                    raise ConflictError(f"{self.session_label(run)} exists again (written to since the prune); "
                                        "nothing was restored (--force leaves it in the archive)")
                outcome.skipped.append({"run_id": run, "namespace": "", "checkpoint_id": None,
                                        "reason": "the session exists again (written since the prune): left in the archive"})
                continue
            for name in sorted(rows, key=lambda n: order.index(n) if n in order else len(order)):
                self._insert(conn, tables.get(name) or SessionTable(name, ()), rows[name])
            outcome.checkpoints += count
            outcome.bytes += size
        return sqljournal.append(conn, request.entry, None, self.placeholder)

    # ---- interrupted actions: none (each is one transaction after the archive) ----------------------

    def pending(self) -> list[dict[str, Any]]:
        return []

    def resume(self) -> list[dict[str, Any]]:
        return []


class SqliteSessionRetention(SessionRetention):
    """The SQLite dialect: reads on a read-only connection, the actions in ``BEGIN IMMEDIATE``
    (the format's recovery ``_transaction``), rowids kept."""

    def __init__(self, url: str, storage_options: Mapping[str, Any] | None = None) -> None:
        super().__init__(url, storage_options)
        self.path = sqlite_path(url)
        if not self.path.is_file():
            raise ReaderError(f"{self.path}: no such database")

    def default_archive(self) -> str | None:
        return default_archive_beside(str(self.path.resolve()))

    @contextmanager
    def _snapshot(self) -> Iterator[sqlite3.Connection]:
        with closing(connect_readonly(self.path)) as conn:
            conn.execute("BEGIN")
            try:
                yield conn
            finally:
                conn.execute("COMMIT")

    def _connect(self, read_only: bool) -> sqlite3.Connection:
        """What ``retention_space.sqlite_reclaim`` writes with (no transaction of its own)."""
        uri = self.path.resolve().as_uri() + ("?mode=ro" if read_only else "")
        try:
            return sqlite3.connect(uri, uri=True, timeout=30.0, isolation_level=None)
        except sqlite3.Error as exc:
            raise ReaderError(f"{self.path}: cannot open: {exc}") from None

    def _rows(self, conn: Any, table: SessionTable, key: Sequence[Any]) -> list[dict[str, Any]]:
        select = f"rowid AS {ROWID}, *" if table.rowid else "*"
        order = " ORDER BY rowid" if table.rowid else ""
        cur = conn.execute(f"SELECT {select} FROM {table.sql_name} WHERE {self._where(table)}{order}", tuple(key))
        names = [d[0] for d in cur.description]
        return [dict(zip(names, row)) for row in cur.fetchall()]

    def _insert(self, conn: Any, table: SessionTable, rows: Sequence[Mapping[str, Any]]) -> None:
        present = table_columns(conn, table.name)
        for record in rows:
            names = [n for n in record if n != ROWID]
            require_columns(table.name, set(names) - present)
            columns = (["rowid"] if ROWID in record else []) + [quote(n) for n in names]
            values = ([record[ROWID]] if ROWID in record else []) + [record[n] for n in names]
            conn.execute(f"INSERT INTO {table.sql_name} ({', '.join(columns)}) VALUES ({', '.join('?' * len(values))})",
                         values)

    def _journal(self, conn: Any) -> list[dict[str, Any]]:
        return sqljournal.entries(conn) if sqljournal.sqlite_exists(conn) else []

    # ---- what the store holds, and space -------------------------------------------------------------

    def breakdown(self, channels: bool = True, sample: int = 200) -> list[dict[str, Any]]:
        """Bytes per table (on disk from ``dbstat`` when SQLite has it, else the values' lengths,
        ``estimated``) and per session and table (the values' lengths)."""
        out: list[dict[str, Any]] = []
        with closing(connect_readonly(self.path)) as conn:
            pages = _dbstat(conn)
            run_of = self.run_namer(conn)
            for t in self.session_tables(conn):
                length = " + ".join(f"coalesce(length({quote(c)}), 0)" for c in table_columns(conn, t.name)) or "0"
                group = ", ".join(quote(c) for c in t.columns)
                total = conn.execute(f"SELECT count(*), coalesce(sum({length}), 0) FROM {t.sql_name}").fetchone()
                size, estimated = (pages[t.name], False) if t.name in pages else (int(total[1]), True)
                out.append(breakdown_row(t.name, int(total[0]), size, estimated=estimated))
                for values in conn.execute(f"SELECT {group}, count(*), coalesce(sum({length}), 0) FROM {t.sql_name} "
                                           f"GROUP BY {group}").fetchall():
                    out.append(breakdown_row(t.name, int(values[-2]), int(values[-1]), run_id=run_of(values[:-2])))
        return out

    def footprint(self) -> dict[str, Any]:
        from lastgood.readers.langgraph.retention_space import sqlite_footprint

        return sqlite_footprint(self.path)

    def reclaim(self, vacuum: bool = False) -> dict[str, Any]:
        from lastgood.readers.langgraph.retention_space import sqlite_reclaim

        return sqlite_reclaim(self, vacuum)


# ---- helpers -------------------------------------------------------------------------------------


def history_edges(rows: Any) -> Any:
    """Each checkpoint needs the one before it (``parent_id``; in its own namespace when it is there,
    else where it is): a session's state is its predecessor's plus one item, so a kept checkpoint
    keeps its whole history (rule ``session-history``)."""
    from lastgood.readers.langgraph.retention_rules import edges_table

    found = rows.select(["run_id", "namespace", "checkpoint_id", "parent_id"]).to_pylist()
    where: dict[tuple[str, str], list[str]] = {}
    for r in found:
        where.setdefault((r["run_id"], r["checkpoint_id"]), []).append(r["namespace"] or "")
    edges = []
    for r in found:
        parent, ns = r["parent_id"], r["namespace"] or ""
        homes = where.get((r["run_id"], parent)) if parent else None
        if homes:
            edges.append((r["run_id"], ns, r["checkpoint_id"], ns if ns in homes else homes[0], parent, HISTORY_RULE))
    return edges_table(edges)


def load_class(spec: str) -> Any:
    module, _, name = spec.partition(":")
    return getattr(importlib.import_module(module), name)


def tables_with(conn: sqlite3.Connection, columns: Sequence[str], first: Sequence[str] = (),
                skip: Sequence[str] = ("lastgood_journal",)) -> list[SessionTable]:
    """Every table with all of ``columns`` (besides ``skip`` and SQLite's own), ``first`` ones first."""
    names = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE "
                                        "'sqlite_%' ORDER BY name")]
    found = [n for n in names if n not in skip and set(columns) <= table_columns(conn, n)]
    found.sort(key=lambda n: (list(first).index(n) if n in first else len(first), n))
    return [SessionTable(n, tuple(columns), has_rowid(conn, n)) for n in found]


def has_rowid(conn: sqlite3.Connection, table: str) -> bool:
    try:
        conn.execute(f"SELECT rowid FROM {quote(table)} LIMIT 0")
        return True
    except sqlite3.OperationalError:
        return False


def require_columns(table: str, missing: set[str]) -> None:
    if missing:
        raise ReaderError(f"the {table} table no longer has the columns {sorted(missing)} the archived rows were "
                          "stored with; nothing was restored")


def _digest(tables: Mapping[str, Sequence[Mapping[str, Any]]]) -> str:
    body = msgpack.packb({t: [sorted(r.items()) for r in rows] for t, rows in sorted(tables.items()) if rows},
                         use_bin_type=True)
    return "sha256:" + hashlib.sha256(body).hexdigest()


def _dbstat(conn: sqlite3.Connection) -> dict[str, int]:
    try:
        return {name: int(size) for name, size in conn.execute("SELECT name, sum(pgsize) FROM dbstat GROUP BY name")}
    except sqlite3.Error:
        return {}


def skip_run(outcome: jr.RetentionOutcome, keys: Mapping[Key, Any], reason: str) -> None:
    outcome.skipped += [{"run_id": k[0], "namespace": k[1], "checkpoint_id": k[2], "reason": reason} for k in sorted(keys)]
