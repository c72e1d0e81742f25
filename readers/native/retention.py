"""Retention of the native store: storage breakdown, the keep-set's dependencies, prune and undo.

The steps, their order and the completion of an interrupted one are in
:mod:`lastgood.readers.native.pruning`; archives in :mod:`lastgood.readers.native.archive`. A bundle
holds a checkpoint's catalog entry (as plain JSON data), its blob's bytes, its LangGraph writes
files (``lastgood.langgraph.LastgoodSaver`` stores) and, for a run deleted whole, its head file.

Dependencies: an incremental checkpoint needs its parent (its blob is a patch against the parent's
state, and names the parent's blob); LangGraph checkpoints (codec ``langgraph``) need what the
LangGraph rules say (:mod:`lastgood.readers.langgraph.retention_rules`).
"""

from __future__ import annotations

import os
import posixpath
import time
from collections.abc import Mapping
from typing import Any

from lastgood.errors import ConflictError
from lastgood.readers import journal as jr
from lastgood.readers.common.fsutil import atomic_write, full_fs, is_local, safe_join
from lastgood.readers.common.urls import display_url
from lastgood.readers.native import format as nf
from lastgood.readers.native import pruning as steps
from lastgood.readers.native.archive import Archive, default_archive_beside, manifest_entries, manifest_path
from lastgood.readers.native.recovery import NativeRecovery


Key = tuple[str, str, str]


class NativeRetention:
    """``RetentionBackend`` for a native store."""

    reader_name = "native"
    dependency_rows = {"codec": [nf.LANGGRAPH_CODEC]}  # only LangGraph checkpoints have format edges

    def __init__(self, url: str, storage_options: Mapping[str, Any] | None = None) -> None:
        self.url = url
        self.storage_options = dict(storage_options or {})
        self.recovery = NativeRecovery(url, storage_options)
        self.fs, self.root = full_fs(self.recovery.fs), self.recovery.root

    def default_archive(self) -> str | None:
        if is_local(self.fs):
            return default_archive_beside(self.root)
        return self.url.rstrip("/") + ".lastgood-archive"

    # ---- dependencies ------------------------------------------------------------------------

    def dependencies(self, rows: Any) -> Any:
        """LangGraph checkpoints' edges (the core adds the incremental parents: the common model's)."""
        from lastgood.readers.langgraph.retention_rules import edges_table, metadata_edges

        return edges_table(metadata_edges(rows))

    # ---- prune -------------------------------------------------------------------------------

    def prune(self, request: jr.PruneRequest) -> jr.RetentionOutcome:
        self.resume()
        action_id = str(request.entry["id"])
        fields = {(r["run_id"], r["namespace"] or "", r["checkpoint_id"]): r for r in request.forget.to_pylist()}
        snap = steps.read_catalog(self.fs, self.root)
        skipped: list[dict[str, Any]] = []
        going = self._going(snap, sorted(fields), skipped)
        whole = _whole(snap, going)
        reparented = _reparented(snap, set(going))
        archive = Archive(request.archive_url, request.archive_options)
        items = ((k, fields[k], self._bundle(snap.entries[k], k[:2] in whole), steps.fingerprint(snap.entries[k]))
                 for k in going)
        extra = {"whole_runs": [list(t) for t in sorted(whole)], "reparented": reparented}
        manifest, digest = archive.stage(action_id, {"reader": "native", "store": display_url(self.url)}, items,
                                         extra, request.progress, len(going))
        note = {**dict(request.entry.get("note") or {}), "archive": display_url(request.archive_url),
                "manifest": manifest_path(action_id), "manifest_sha256": digest, "count": manifest["count"],
                "bytes": manifest["bytes"]}
        info = {"action_id": action_id, "archive": request.archive_url, "manifest_sha256": digest,
                "whole_runs": extra["whole_runs"]}
        outcome = self._switch({**request.entry, "note": note}, info, set(going), whole,
                               {tuple(r[:3]) for r in reparented}, request.progress)
        outcome.bytes = int(manifest["bytes"])
        outcome.skipped[:0] = skipped
        outcome.space = {**self.reclaim(request.vacuum), "returned_bytes": _blob_bytes(snap, going, outcome.skipped)}
        return outcome

    def _going(self, snap: steps.CatalogSnapshot, keys: list[Key], skipped: list[dict[str, Any]]) -> list[Key]:
        """The keys that can go: listed, in a clean catalog file, and no kept incremental's parent."""
        wanted = set(keys)
        needed = {(e["run_id"], e.get("namespace") or "", e["parent_id"]) for k, e in snap.entries.items()
                  if k not in wanted and e.get("kind") == "incremental" and e.get("parent_id")}
        going = []
        for key in keys:
            if key not in snap.entries:
                skipped.append(_skip(key, "no longer in the catalog"))
            elif key in snap.untouchable:
                skipped.append(_skip(key, "its catalog file has malformed lines (left for `lastgood verify`): kept"))
            elif key in needed:
                skipped.append(_skip(key, "a kept incremental checkpoint is a patch against it: kept"))
            else:
                going.append(key)
        return going

    def _bundle(self, entry: Mapping[str, Any], whole: bool) -> dict[str, Any]:
        key = (entry["run_id"], entry.get("namespace") or "", entry["checkpoint_id"])
        rows: dict[str, Any] = {"entry": steps.json_entry(entry), "blob": None, "writes": {}, "head": None}
        if entry.get("location"):
            try:
                rows["blob"] = self.fs.cat_file(safe_join(self.root, str(entry["location"])))
            except FileNotFoundError:
                rows["blob"] = None  # a missing blob (a finding already): the entry alone is archived
        if entry.get("codec") == nf.LANGGRAPH_CODEC:
            rows["writes"] = steps.read_writes(self.fs, self.root, key)
        if whole:
            rows["head"] = steps.read_small(self.fs, self.root, steps.head_path(key[0], key[1]))
        return rows

    def _switch(self, entry: dict[str, Any], info: dict[str, Any], going: set[Key], whole: set[tuple[str, str]],
                allowed: set[Key], progress: jr.ProgressFn | None) -> jr.RetentionOutcome:
        """Under the journal lock: re-check, rewrite the catalog, journal, delete (pruning's steps).
        A failure after the intent is written leaves it (marked interrupted) for the next action."""
        recovery = self.recovery
        lock = recovery._acquire(str(entry["id"]))
        intent: dict[str, Any] | None = None
        try:
            snap = steps.read_catalog(self.fs, self.root)
            outcome = jr.RetentionOutcome(entry={})
            going = self._recheck(snap, going, whole, outcome)
            kept, going = _without(snap, going, allowed, outcome)
            seq, prev = jr.tip(recovery.journal_entries())
            sealed = jr.seal({**entry, "new_head": None}, seq, prev)
            part = steps.new_part_name()
            intent = {**lock, "entry": sealed, "prune": {**info, "part": part, "remove_parts": snap.parts}}
            recovery._write_lock(intent)
            steps.write_part(self.fs, self.root, kept, part)
            steps.remove_catalog_files(self.fs, self.root, snap.parts, snap.tails)
            steps.bump_epoch(self.fs, self.root, str(sealed["id"]))
            recovery._write_entry(sealed)
            for n, key in enumerate(sorted(going), start=1):
                steps.delete_files(self.fs, self.root, snap.entries[key],
                                   head=key[:2] in whole and not _has_other(snap, going, key[:2]))
                if n % 1000 == 0:
                    recovery._write_lock({**intent, "started": time.time()})  # alive: not a stale lock
                    if progress:
                        progress("delete", n, len(going))
            outcome.entry, outcome.checkpoints = sealed, len(going)
        except BaseException:
            if intent is not None:
                _keep_interrupted(recovery, intent)
            else:
                recovery._release()
            raise
        recovery._release()
        return outcome

    def _recheck(self, snap: steps.CatalogSnapshot, going: set[Key], whole: set[tuple[str, str]],
                 outcome: jr.RetentionOutcome) -> set[Key]:
        """Under the lock: nothing that became protected goes; a run to go whole that was written
        to meanwhile stays whole; a checkpoint whose entry changed stays."""
        entries = self.recovery.journal_entries()
        protected = dict(jr.journal_targets(entries))
        protected.update({k: f"pinned by {p.action_id}" for k, p in jr.fold_pins(entries).items()})
        found = [f"{k[2]} of {k[0]!r} ({protected[k]})" for k in going if k in protected]
        for run, ns in sorted({k[:2] for k in going} - whole):
            head = self.recovery.head(run, ns)
            if head and (run, ns, head) in going:
                found.append(f"{head} of {run!r} (the run's head)")
        if found:
            raise ConflictError("since the plan, " + "; ".join(found[:5]) + " must be kept: nothing was deleted "
                                "(the archive written for it can be removed) — plan the prune again")
        kept = set()
        for key in going:
            if key not in snap.entries:
                continue
            if key[:2] in whole and _has_other(snap, going, key[:2]):
                outcome.skipped.append(_skip(key, "its run was written to during the prune: kept whole"))
                continue
            kept.add(key)
        return kept

    # ---- undo ----------------------------------------------------------------------------------

    def _archive_of(self, original: Mapping[str, Any], options: Mapping[str, Any] | None = None
                    ) -> tuple[Archive, dict[str, Any]]:
        note = original.get("note") if isinstance(original.get("note"), Mapping) else {}
        archive = Archive(str(note.get("archive") or ""), options)
        return archive, archive.manifest(str(original["id"]), note.get("manifest_sha256"))

    def unprune_conflicts(self, original: Mapping[str, Any], force: bool = False) -> list[str]:
        try:
            _, manifest = self._archive_of(original)
        except (OSError, Exception) as exc:  # noqa: BLE001 - any failure to read the archive is the answer
            return [f"the archive cannot be read: {exc}"]
        return [] if force else self._conflicts(manifest, steps.read_catalog(self.fs, self.root))

    def _conflicts(self, manifest: Mapping[str, Any], snap: steps.CatalogSnapshot) -> list[str]:
        archived = {(str(e[0]), str(e[1]), str(e[2])) for e in manifest_entries(manifest)}
        threads = snap.threads()
        found = []
        for run, ns in (tuple(t) for t in manifest.get("whole_runs") or []):
            newer = [c for c in threads.get((run, ns), []) if (run, ns, c) not in archived]
            if newer:
                found.append(f"run {run!r}" + (f" [{ns}]" if ns else "") + f" was deleted whole and has been written "
                             f"to since ({len(newer)} new checkpoint(s)): restoring would mix its old history into "
                             "the new one (--force restores anyway)")
        return found

    def unprune(self, request: jr.UnpruneRequest) -> jr.RetentionOutcome:
        self.resume()
        archive, manifest = self._archive_of(request.original, request.archive_options)
        bundles = list(archive.bundles(manifest))
        recovery = self.recovery
        lock = recovery._acquire(str(request.entry["id"]))
        intent: dict[str, Any] | None = None
        try:
            snap = steps.read_catalog(self.fs, self.root)
            conflicts = [] if request.force else self._conflicts(manifest, snap)
            if conflicts:
                raise ConflictError("; ".join(conflicts) + "; nothing was restored")
            outcome = jr.RetentionOutcome(entry={})
            seq, prev = jr.tip(recovery.journal_entries())
            sealed = jr.seal({**request.entry, "new_head": None}, seq, prev)
            tail = steps.unprune_tail(str(sealed["id"]))
            restore = [(k, rows) for k, rows, _ in bundles if k not in snap.entries]
            outcome.skipped = [_skip(k, "already in the catalog: left as it is") for k, _, _ in bundles
                               if k in snap.entries]
            written = [str(rows["entry"]["location"]) for _, rows in restore if rows.get("blob") is not None]
            intent = {**lock, "entry": sealed, "unprune": {"tail": tail, "written": written}}
            recovery._write_lock(intent)
            self._write_back(restore)
            lines = [nf.entry_line(dict(rows["entry"])) for _, rows in restore]
            lines += self._reparented_lines(manifest, snap)
            atomic_write(self.fs, safe_join(self.root, tail), b"".join(lines))
            self._langgraph_markers(restore)
            steps.bump_epoch(self.fs, self.root, str(sealed["id"]))
            recovery._write_entry(sealed)
            outcome.entry, outcome.checkpoints = sealed, len(restore)
            outcome.bytes = sum({str(e[3]): int(e[5]) for _, _, e in bundles}.values())
        except BaseException:
            if intent is not None:
                _keep_interrupted(recovery, intent)
            else:
                recovery._release()
            raise
        recovery._release()
        archive.mark_restored(str(request.original["id"]), str(sealed["id"]), outcome.checkpoints)
        return outcome

    def _write_back(self, restore: list[tuple[Key, dict[str, Any]]]) -> None:
        for key, rows in restore:
            entry = rows["entry"]
            if rows.get("blob") is not None:
                _put(self.fs, safe_join(self.root, str(entry["location"])), rows["blob"])
            for name, data in (rows.get("writes") or {}).items():
                _put(self.fs, safe_join(self.root, f"{steps.writes_folder(key)}/{name}"), data)
            head = steps.head_path(key[0], key[1])
            if rows.get("head") is not None and not self.fs.exists(safe_join(self.root, head)):
                _put(self.fs, safe_join(self.root, head), rows["head"])
        if is_local(self.fs):
            os.sync()  # every blob on disk before the tail file lists it

    def _reparented_lines(self, manifest: Mapping[str, Any], snap: steps.CatalogSnapshot) -> list[bytes]:
        lines = []
        for run, ns, cid, parent in manifest.get("reparented") or []:
            entry = snap.entries.get((run, ns, cid))
            if entry is not None and not entry.get("parent_id"):
                lines.append(nf.entry_line({**entry, "parent_id": parent}))
        return lines

    def _langgraph_markers(self, restore: list[tuple[Key, dict[str, Any]]]) -> None:
        """LangGraph checkpoints are looked up by their own commit marker's name: write those too."""
        for key, rows in restore:
            if rows["entry"].get("codec") == nf.LANGGRAPH_CODEC:
                name = f"{nf.TAIL}/{nf.langgraph_tail_name(*key)}"
                atomic_write(self.fs, safe_join(self.root, name), nf.entry_line(dict(rows["entry"])))

    # ---- interrupted prunes and undos ----------------------------------------------------------

    def pending(self) -> list[dict[str, Any]]:
        return [lock for lock in self.recovery.pending() if lock.get("prune") or lock.get("unprune")]

    def resume(self) -> list[dict[str, Any]]:
        """An interrupted prune or undo (a stale lock) is completed by taking the lock (the recovery
        backend resolves it through :func:`pruning.resolve_intent`)."""
        pending = self.pending()
        if not pending and not self.recovery.pending():
            return []
        self.recovery._acquire("resume")
        self.recovery._release()
        return [{"action_id": p.get("action_id"), "kind": "prune" if p.get("prune") else "unprune"} for p in pending]

    # ---- what the store holds, and space ----------------------------------------------------------

    def breakdown(self, channels: bool = True, sample: int = 200) -> list[dict[str, Any]]:
        from lastgood.readers.native.retention_space import breakdown

        return breakdown(self, channels, sample)

    def footprint(self) -> dict[str, Any]:
        from lastgood.readers.native.retention_space import footprint

        return footprint(self)

    def reclaim(self, vacuum: bool = False) -> dict[str, Any]:
        return {"returned_bytes": 0, "free_bytes": 0, "vacuumed": False,
                "notes": ["pruned blob files were deleted and the catalog compacted into one part: the space is "
                          "back on the filesystem (on object stores, as soon as the bucket's versioning or "
                          "lifecycle rules allow)"]}


def _blob_bytes(snap: steps.CatalogSnapshot, going: list[Key], skipped: list[dict[str, Any]]) -> int:
    """Bytes of the blob files the prune deleted (the catalog's size of each; skipped ones stayed)."""
    stayed = {(s["run_id"], s["namespace"], s["checkpoint_id"]) for s in skipped}
    return sum(int(snap.entries[k].get("size_bytes") or 0) for k in going if k not in stayed)


def _skip(key: Key, reason: str) -> dict[str, Any]:
    return {"run_id": key[0], "namespace": key[1], "checkpoint_id": key[2], "reason": reason}


def _whole(snap: steps.CatalogSnapshot, going: list[Key]) -> set[tuple[str, str]]:
    counts: dict[tuple[str, str], int] = {}
    for key in going:
        counts[key[:2]] = counts.get(key[:2], 0) + 1
    threads = snap.threads()
    return {t for t, n in counts.items() if len(threads.get(t, [])) == n}


def _has_other(snap: steps.CatalogSnapshot, going: set[Key], thread: tuple[str, str]) -> bool:
    return any((*thread, cid) not in going for cid in snap.threads().get(thread, []))


def _reparented(snap: steps.CatalogSnapshot, going: set[Key]) -> list[list[str]]:
    """Kept entries whose parent goes: ``[run, namespace, checkpoint_id, parent_id]`` each."""
    return [[*key, str(e["parent_id"])] for key, e in snap.entries.items()
            if key not in going and e.get("parent_id") and (key[0], key[1], e["parent_id"]) in going]


def _without(snap: steps.CatalogSnapshot, going: set[Key], allowed: set[Key], outcome: jr.RetentionOutcome
             ) -> tuple[list[dict[str, Any]], set[Key]]:
    """The catalog's entries minus ``going``. A kept entry whose parent goes gets no parent when the
    manifest recorded it (``allowed``: its undo restores the parent id); any other such parent
    (an entry added meanwhile) stays."""
    going = set(going)
    while True:
        held = {(k[0], k[1], e["parent_id"]) for k, e in snap.entries.items()
                if k not in going and k not in allowed and e.get("parent_id")
                and (k[0], k[1], e["parent_id"]) in going}
        if not held:
            break
        going -= held
        outcome.skipped += [_skip(k, "a checkpoint added meanwhile has it as its parent: kept") for k in held]
    kept = []
    for key, entry in snap.entries.items():
        if key in going:
            continue
        if entry.get("parent_id") and (key[0], key[1], entry["parent_id"]) in going:
            entry = {**entry, "parent_id": None}
            outcome.reparented += 1
        kept.append(entry)
    return kept, going


def _keep_interrupted(recovery: Any, intent: dict[str, Any]) -> None:
    """Leave the intent for the next action to complete (marked interrupted: it needs no wait)."""
    try:
        recovery._write_lock({**intent, "interrupted": True})
    except OSError:
        pass


def _put(fs: Any, path: str, data: bytes) -> None:
    if is_local(fs):
        os.makedirs(posixpath.dirname(path), exist_ok=True)
        with open(path, "wb") as handle:
            handle.write(data)
    else:
        fs.pipe_file(path, data)

