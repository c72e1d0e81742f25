"""Retention of LangGraph SqliteSaver / PostgresSaver databases: storage breakdown, the keep-set's
dependencies, prune (archive, then delete) and its undo, journaled (docs/format.md "Prune").

A prune, in order:

1. **archive** — in one read snapshot, every checkpoint to go is read as stored (its ``checkpoints``
   row, its ``writes``, and on Postgres the ``checkpoint_blobs`` only it used) and written to the
   archive (:mod:`lastgood.readers.native.archive`) with a fingerprint of its rows (types and
   lengths, writes' count and bytes); the archive's manifest is written last;
2. **journal** — one short write transaction re-checks that none of them is a thread's head, pinned
   or named by a journaled action, then appends the "prune" entry (naming the archive and the
   manifest's sha256) and a progress row (table ``lastgood_retention``);
3. **delete** — in short transactions of whole threads (an agent's ``put`` waits milliseconds, never
   its busy timeout): each re-checks heads, pins and journal targets and compares the fingerprint;
   a checkpoint changed or protected since it was archived stays (reported as skipped), a thread
   written to during the prune that was to go whole stays whole. A kept checkpoint whose parent
   goes gets no parent, as in LangGraph's own ``prune``; its old parent id is kept in
   ``lastgood_retention_parents`` for the undo;
4. **space** — :meth:`reclaim` (SQLite: incremental vacuum when the database has it, else the free
   pages are reported, VACUUM when asked; Postgres: what autovacuum does, said plainly).

A kill at any moment leaves every checkpoint in the database, in the archive, or both; the journal
entry (and the progress row, until the deletion completes) says which. :meth:`resume` completes an
interrupted prune or undo; every prune and undo starts by calling it. The undo inserts the archived
rows back as they were (bytes, types, parent ids) in the same kind of batches.
"""

from __future__ import annotations

import gc
import json
import os
import socket
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from typing import Any

from lastgood.errors import ConflictError, ReaderError
from lastgood.readers import journal as jr
from lastgood.readers.common.urls import display_url
from lastgood.readers.langgraph.retention_progress import PARENTS, PROGRESS, read_pending
from lastgood.readers.langgraph.retention_rules import edges_table, metadata_edges, sends_edges
from lastgood.readers.native.archive import Archive, manifest_entries, manifest_path

Key = tuple[str, str, str]
Thread = tuple[str, str]
BATCH = 2000  # checkpoints per delete/insert transaction (whole threads; a bigger thread is one batch)
READ_BATCH = 500
STALE_SECONDS = 120.0  # a running prune on another host that has not progressed for this long is stale


class LangGraphRetention:
    """The flow both dialects share; a dialect gives connections and SQL (see ``retention_sqlite``)."""

    reader_name = "langgraph"
    placeholder = "?"

    def __init__(self, url: str, storage_options: Mapping[str, Any] | None = None) -> None:
        self.url = url
        self.storage_options = dict(storage_options or {})

    # ---- what a dialect provides ----------------------------------------------------------

    def _reading(self, snapshot: bool = False) -> AbstractContextManager[Any]:
        """A connection in one read transaction; ``snapshot``: one that stays consistent while writers
        write (a read that leaves no file behind otherwise)."""
        raise NotImplementedError

    def _transaction(self, body: Callable[[Any], Any], journal: bool = False) -> Any:
        """``body(conn)`` in one short write transaction (committed, or rolled back on error);
        ``journal``: one that appends to the journal (serialized with every recovery action)."""
        raise NotImplementedError

    def _recovery(self) -> Any:
        raise NotImplementedError

    def _progress_exists(self, conn: Any) -> bool:
        raise NotImplementedError

    def _create_tables(self, conn: Any) -> None:
        raise NotImplementedError

    def _fetch(self, conn: Any, keys: Sequence[Key]) -> list[tuple[Key, dict[str, Any], str]]:
        """(key, rows, fingerprint) of each key still in the database."""
        raise NotImplementedError

    def _fingerprints(self, conn: Any, keys: Sequence[Key]) -> dict[Key, str]:
        raise NotImplementedError

    def _heads(self, conn: Any, threads: Sequence[Thread]) -> dict[Thread, str | None]:
        raise NotImplementedError

    def _thread_rows(self, conn: Any, thread: Thread) -> list[tuple[str, str | None]]:
        """(checkpoint_id, parent id) of every checkpoint of the thread."""
        raise NotImplementedError

    def _delete(self, conn: Any, keys: Sequence[Key], manifest: Mapping[str, Any]) -> None:
        raise NotImplementedError

    def _insert(self, conn: Any, key: Key, rows: Mapping[str, Any]) -> None:
        raise NotImplementedError

    def _set_parent(self, conn: Any, key: Key, parent: str | None, only_if_null: bool) -> int:
        raise NotImplementedError

    def _interrupted(self, conn: Any) -> set[Key]:
        raise NotImplementedError

    def _senders(self, conn: Any) -> set[Key]:
        raise NotImplementedError

    def _versions(self, conn: Any, keys: Sequence[Key]) -> dict[Key, Any]:
        raise NotImplementedError

    def _extra(self, conn: Any, keys: Sequence[Key]) -> dict[str, Any]:
        """What the manifest adds for this dialect (Postgres: the blobs each checkpoint frees)."""
        return {}

    def sql(self, text: str) -> str:
        return text.replace("?", self.placeholder)

    # ---- dependencies ------------------------------------------------------------------------

    def dependencies(self, rows: Any) -> Any:
        with self._reading() as conn:
            edges = metadata_edges(rows, self._interrupted(conn))
            edges += sends_edges(rows, self._senders(conn), lambda keys: self._versions(conn, keys))
        return edges_table(edges)

    # ---- prune -----------------------------------------------------------------------------

    def prune(self, request: jr.PruneRequest) -> jr.RetentionOutcome:
        with _no_cycle_collection():
            return self._prune(request)

    def _prune(self, request: jr.PruneRequest) -> jr.RetentionOutcome:
        self.resume()
        action_id = str(request.entry["id"])
        fields = {(r["run_id"], r["namespace"] or "", r["checkpoint_id"]): r for r in request.forget.to_pylist()}
        keys = sorted(fields)
        archive = Archive(request.archive_url, request.archive_options)
        skipped: list[dict[str, Any]] = []
        with self._reading(snapshot=True) as conn:
            whole = self._whole_threads(conn, keys)
            extra = {"whole_runs": [list(t) for t in whole], **self._extra(conn, keys)}
            items = self._items(conn, keys, fields, skipped)
            manifest, digest = archive.stage(action_id, self._source(), items, extra, request.progress, len(keys))
        note = {**dict(request.entry.get("note") or {}), "archive": display_url(request.archive_url),
                "manifest": manifest_path(action_id), "manifest_sha256": digest,
                "count": manifest["count"], "bytes": manifest["bytes"]}
        sealed = self._begin("prune", {**request.entry, "note": note}, action_id, request.archive_url, digest,
                             manifest)
        outcome = self._delete_all(action_id, manifest, request.progress)
        outcome.entry, outcome.bytes = sealed, int(manifest["bytes"])
        outcome.skipped[:0] = skipped
        outcome.space = self.reclaim(request.vacuum)
        return outcome

    def _source(self) -> dict[str, Any]:
        return {"reader": self.reader_name, "store": display_url(self.url)}

    def _items(self, conn: Any, keys: list[Key], fields: Mapping[Key, Any], skipped: list[dict[str, Any]]
               ) -> Iterator[tuple[Key, Any, dict[str, Any], str]]:
        for start in range(0, len(keys), READ_BATCH):
            batch = keys[start:start + READ_BATCH]
            found = {key: (rows, fp) for key, rows, fp in self._fetch(conn, batch)}
            for key in batch:
                if key not in found:
                    skipped.append(_skip(key, "no longer in the database"))
                    continue
                rows, fingerprint = found[key]
                yield key, fields[key], rows, fingerprint

    def _whole_threads(self, conn: Any, keys: list[Key]) -> list[Thread]:
        """Threads every checkpoint of which goes (a stale run deleted whole)."""
        going: dict[Thread, int] = {}
        for run, ns, _ in keys:
            going[(run, ns)] = going.get((run, ns), 0) + 1
        return [t for t, n in going.items() if len(self._thread_rows(conn, t)) == n]

    def _begin(self, kind: str, entry: Mapping[str, Any], prune_id: str, archive_url: str, digest: str,
               manifest: Mapping[str, Any]) -> dict[str, Any]:
        """The journal entry and the progress row, in one transaction; a prune first re-checks that
        nothing it archived became protected (a head, a pin, a journaled action's target)."""
        keys = set(_entry_keys(manifest))

        def body(conn: Any) -> dict[str, Any]:
            self._create_tables(conn)
            if kind == "prune":
                self._refuse_protected(conn, keys, manifest)
            sealed = self._recovery()._append(conn, entry, None)
            conn.execute(self.sql(f"""INSERT INTO {PROGRESS} (action_id, kind, prune_id, state, archive,
                manifest_sha256, total, done, skipped, owner, updated) VALUES (?, ?, ?, 'running', ?, ?, ?, 0, '[]', ?, ?)"""),
                (str(sealed["id"]), kind, prune_id, archive_url, digest, len(keys), _owner(), time.time()))
            return sealed
        return self._transaction(body, journal=True)

    def _refuse_protected(self, conn: Any, keys: set[Key], manifest: Mapping[str, Any]) -> None:
        protected = self._protected(conn)
        whole = {tuple(t) for t in manifest.get("whole_runs") or []}
        threads = sorted({(k[0], k[1]) for k in keys} - whole)
        heads = self._heads(conn, threads)
        found = [f"{k[2]} of {k[0]!r} ({why})" for k, why in protected.items() if k in keys]
        found += [f"{head} of {t[0]!r} (the thread's head)" for t, head in heads.items() if (*t, head) in keys]
        if found:
            raise ConflictError("since the plan, " + "; ".join(found[:5]) + (" …" if len(found) > 5 else "")
                                + " must be kept: nothing was deleted (the archive written for it can be removed) — "
                                  "plan the prune again")

    def _protected(self, conn: Any) -> dict[Key, str]:
        entries = self._journal(conn)
        protected = dict(jr.journal_targets(entries))
        protected.update({k: f"pinned by {p.action_id}" for k, p in jr.fold_pins(entries).items()})
        return protected

    def _journal(self, conn: Any) -> list[dict[str, Any]]:
        from lastgood.readers.langgraph.recovery import TABLE

        if not self._journal_exists(conn):
            return []
        rows = conn.execute(f"SELECT entry FROM {TABLE} ORDER BY seq").fetchall()
        return [jr.parse_entry(r[0]) or {} for r in rows]

    def _journal_exists(self, conn: Any) -> bool:
        return bool(self._recovery()._journal_exists(conn))

    def _delete_all(self, action_id: str, manifest: Mapping[str, Any], progress: jr.ProgressFn | None
                    ) -> jr.RetentionOutcome:
        outcome = jr.RetentionOutcome(entry={})
        entries = manifest_entries(manifest)
        forget = {(e[0], e[1], e[2]): e[6] for e in entries}
        whole = {tuple(t) for t in manifest.get("whole_runs") or []}
        done = 0
        for batch in thread_batches(list(forget)):
            self._transaction(lambda conn, b=batch: self._delete_batch(conn, action_id, b, forget, whole, manifest,
                                                                       outcome))
            done += len(batch)
            if progress:
                progress("delete", done, len(forget))
        self._finish(action_id, outcome.skipped)
        return outcome

    def _delete_batch(self, conn: Any, action_id: str, batch: list[Key], forget: Mapping[Key, str],
                      whole: set[Thread], manifest: Mapping[str, Any], outcome: jr.RetentionOutcome) -> None:
        threads = sorted({(k[0], k[1]) for k in batch})
        heads = self._heads(conn, threads)
        protected = self._protected(conn)
        current = self._fingerprints(conn, batch)
        going: list[Key] = []
        for key in batch:
            head = heads.get((key[0], key[1]))
            if key not in current:
                continue  # already gone (an interrupted run of this prune deleted it)
            if (key[0], key[1]) in whole and head is not None and (key[0], key[1], head) not in forget:
                outcome.skipped.append(_skip(key, "its thread was written to during the prune: kept whole"))
            elif (key[0], key[1]) not in whole and head is not None and (key[0], key[1], head) in forget:
                outcome.skipped.append(_skip(key, "its thread's head would go: kept"))
            elif key in protected:
                outcome.skipped.append(_skip(key, f"protected since the plan ({protected[key]})"))
            elif current[key] != forget[key]:
                outcome.skipped.append(_skip(key, "changed since it was archived: kept"))
            else:
                going.append(key)
        outcome.reparented += self._reparent(conn, action_id, going)
        self._delete(conn, going, manifest)
        outcome.checkpoints += len(going)
        self._advance(conn, action_id, len(batch), outcome.skipped)

    def _reparent(self, conn: Any, action_id: str, going: list[Key]) -> int:
        """Kept checkpoints whose parent goes get no parent (the old one is remembered for the undo)."""
        gone: dict[Thread, set[str]] = {}
        for run, ns, cid in going:
            gone.setdefault((run, ns), set()).add(cid)
        count = 0
        for thread, ids in gone.items():
            for cid, parent in self._thread_rows(conn, thread):
                if parent in ids and cid not in ids:
                    conn.execute(self.sql(f"""INSERT INTO {PARENTS} (prune_id, thread_id, checkpoint_ns, checkpoint_id,
                        parent_checkpoint_id) VALUES (?, ?, ?, ?, ?)"""), (action_id, *thread, cid, parent))
                    self._set_parent(conn, (*thread, cid), None, only_if_null=False)
                    count += 1
        return count

    def _advance(self, conn: Any, action_id: str, n: int, skipped: list[dict[str, Any]]) -> None:
        conn.execute(self.sql(f"UPDATE {PROGRESS} SET done = done + ?, updated = ?, skipped = ? WHERE action_id = ?"),
                     (n, time.time(), json.dumps(skipped[-200:]), action_id))

    def _finish(self, action_id: str, skipped: list[dict[str, Any]]) -> None:
        self._transaction(lambda conn: conn.execute(
            self.sql(f"UPDATE {PROGRESS} SET state = 'done', updated = ?, skipped = ? WHERE action_id = ?"),
            (time.time(), json.dumps(skipped[-200:]), action_id)))

    # ---- undo ---------------------------------------------------------------------------

    def _archive_of(self, original: Mapping[str, Any], options: Mapping[str, Any] | None = None
                    ) -> tuple[Archive, dict[str, Any]]:
        note = original.get("note") if isinstance(original.get("note"), Mapping) else {}
        url = self._archive_url(original)
        archive = Archive(url, options)
        return archive, archive.manifest(str(original["id"]), note.get("manifest_sha256"))

    def _archive_url(self, original: Mapping[str, Any]) -> str:
        """The archive's full URL: the progress row's (it may hold what the journal shows masked)."""
        with self._reading() as conn:
            if self._progress_exists(conn):
                row = conn.execute(self.sql(f"SELECT archive FROM {PROGRESS} WHERE action_id = ?"),
                                   (str(original["id"]),)).fetchone()
                if row:
                    return str(row[0])
        note = original.get("note") if isinstance(original.get("note"), Mapping) else {}
        return str(note.get("archive") or "")

    def unprune_conflicts(self, original: Mapping[str, Any], force: bool = False) -> list[str]:
        try:
            _, manifest = self._archive_of(original)
        except (ReaderError, OSError) as exc:
            return [f"the archive cannot be read: {exc}"]
        return [] if force else self._conflicts(manifest)

    def _conflicts(self, manifest: Mapping[str, Any]) -> list[str]:
        keys = set(_entry_keys(manifest))
        found = []
        with self._reading(snapshot=True) as conn:
            for run, ns in (tuple(t) for t in manifest.get("whole_runs") or []):
                newer = [cid for cid, _ in self._thread_rows(conn, (run, ns)) if (run, ns, cid) not in keys]
                if newer:
                    found.append(f"thread {run!r}" + (f" [{ns}]" if ns else "") + f" was deleted whole and has been "
                                 f"written to since ({len(newer)} new checkpoint(s), newest {max(newer)}): restoring "
                                 "would mix its old history into the new one (--force restores anyway)")
        return found

    def unprune(self, request: jr.UnpruneRequest) -> jr.RetentionOutcome:
        with _no_cycle_collection():
            return self._unprune(request)

    def _unprune(self, request: jr.UnpruneRequest) -> jr.RetentionOutcome:
        self.resume()
        original = request.original
        archive, manifest = self._archive_of(original, request.archive_options)
        conflicts = [] if request.force else self._conflicts(manifest)
        if conflicts:
            raise ConflictError("; ".join(conflicts) + "; nothing was restored")
        note = original.get("note") if isinstance(original.get("note"), Mapping) else {}
        sealed = self._begin("unprune", request.entry, str(original["id"]), archive.url,
                             str(note.get("manifest_sha256") or ""), manifest)
        outcome = self._restore_all(str(sealed["id"]), str(original["id"]), archive, manifest, request.progress)
        outcome.entry = sealed
        archive.mark_restored(str(original["id"]), str(sealed["id"]), outcome.checkpoints)
        return outcome

    def _restore_all(self, action_id: str, prune_id: str, archive: Archive, manifest: Mapping[str, Any],
                     progress: jr.ProgressFn | None) -> jr.RetentionOutcome:
        outcome = jr.RetentionOutcome(entry={})
        keys = _entry_keys(manifest)
        done = 0
        seen: set[str] = set()
        for batch in thread_batches(keys):
            bundles = list(archive.bundles(manifest, set(batch)))
            packs = {str(e[3]): int(e[5]) for _, _, e in bundles}
            outcome.bytes += sum(size for loc, size in packs.items() if loc not in seen)
            seen.update(packs)
            self._transaction(lambda conn, b=bundles: self._restore_batch(conn, action_id, prune_id, b, outcome))
            done += len(batch)
            if progress:
                progress("restore", done, len(keys))
        self._finish(action_id, outcome.skipped)
        return outcome

    def _restore_batch(self, conn: Any, action_id: str, prune_id: str,
                       bundles: list[tuple[Key, dict[str, Any], list[Any]]], outcome: jr.RetentionOutcome) -> None:
        present = self._fingerprints(conn, [key for key, _, _ in bundles])
        for key, rows, _entry in bundles:
            if key in present:
                outcome.skipped.append(_skip(key, "already in the database: left as it is"))
                continue
            self._insert(conn, key, rows)
            outcome.checkpoints += 1
        for thread in sorted({(k[0], k[1]) for k, _, _ in bundles}):
            rows = conn.execute(self.sql(f"""SELECT checkpoint_id, parent_checkpoint_id FROM {PARENTS}
                WHERE prune_id = ? AND thread_id = ? AND checkpoint_ns = ?"""), (prune_id, *thread)).fetchall()
            for cid, parent in rows:
                outcome.reparented += self._set_parent(conn, (*thread, cid), parent, only_if_null=True)
            conn.execute(self.sql(f"DELETE FROM {PARENTS} WHERE prune_id = ? AND thread_id = ? AND checkpoint_ns = ?"),
                         (prune_id, *thread))
        self._advance(conn, action_id, len(bundles), outcome.skipped)

    # ---- interrupted prunes and undos --------------------------------------------------------

    def pending(self) -> list[dict[str, Any]]:
        with self._reading() as conn:
            return read_pending(conn) if self._progress_exists(conn) else []

    def resume(self) -> list[dict[str, Any]]:
        completed = []
        for row in self.pending():
            if _alive(row):
                raise ConflictError(f"another {row['kind']} ({row['action_id']}) is running on this database "
                                    f"(pid {row['owner'].get('pid')} on {row['owner'].get('host')}); try again when it ends")
            full_url = self._archive_url({"id": row["action_id"], "note": {"archive": row["archive"]}})
            archive = Archive(full_url)
            manifest = archive.manifest(str(row["prune_id"]), row["manifest_sha256"] or None)
            self._transaction(lambda conn, r=row: conn.execute(
                self.sql(f"UPDATE {PROGRESS} SET owner = ?, updated = ? WHERE action_id = ?"),
                (_owner(), time.time(), r["action_id"])))
            if row["kind"] == "prune":
                outcome = self._delete_all(str(row["action_id"]), manifest, None)
            else:
                outcome = self._restore_all(str(row["action_id"]), str(row["prune_id"]), archive, manifest, None)
            completed.append({"action_id": row["action_id"], "kind": row["kind"], "checkpoints": outcome.checkpoints})
        return completed


# ---- helpers -------------------------------------------------------------------------------


def thread_batches(keys: Sequence[Key], size: int = BATCH) -> Iterator[list[Key]]:
    """``keys`` in batches of whole threads (sorted), about ``size`` each."""
    batch: list[Key] = []
    ordered = sorted(keys)
    for i, key in enumerate(ordered):
        batch.append(key)
        last_of_thread = i + 1 == len(ordered) or ordered[i + 1][:2] != key[:2]
        if last_of_thread and len(batch) >= size:
            yield batch
            batch = []
    if batch:
        yield batch


@contextmanager
def _no_cycle_collection() -> Iterator[None]:
    """Python's cycle collector paused for a prune or undo: it allocates a few hundred thousand
    rows and dicts, none in a cycle, and each full collection would walk them all (about 8% of the
    prune's CPU time on the 100k-checkpoint benchmark, measured once). Restored as it was, whatever
    happens."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def _entry_keys(manifest: Mapping[str, Any]) -> list[Key]:
    return [(str(e[0]), str(e[1]), str(e[2])) for e in manifest_entries(manifest)]


def _skip(key: Key, reason: str) -> dict[str, Any]:
    return {"run_id": key[0], "namespace": key[1], "checkpoint_id": key[2], "reason": reason}


def _owner() -> str:
    return json.dumps({"pid": os.getpid(), "host": socket.gethostname()})


def _alive(row: Mapping[str, Any]) -> bool:
    """Is the prune or undo of this progress row still being run (by another process)?"""
    owner = row.get("owner") or {}
    if owner.get("host") == socket.gethostname() and isinstance(owner.get("pid"), int):
        if owner["pid"] == os.getpid():
            return False  # this process: an earlier call failed half-way; completing it is safe
        try:
            os.kill(owner["pid"], 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True
    updated = row.get("updated")
    return isinstance(updated, (int, float)) and time.time() - updated < STALE_SECONDS
