"""Retention of training stores: prune = move checkpoint folders (or files) into the archive, by rename.

A pruned checkpoint — a step folder, a tag folder, a ``.ckpt`` file — is renamed (one atomic rename
on a local filesystem; on an object store a copy of every object, then the deletes) into

    <store>/.lastgood/archive/<action id>/<its path>

which the framework never lists (it looks at its own step folders or files). "Archive before delete"
is the rename itself: the bytes are kept, so the space comes back only when the archive folder is
removed (after which the prune can no longer be undone). The undo renames each one back, byte for byte.
With ``--archive URL`` (other than that default) each is copied to the archive, verified by sha256,
then deleted, and the undo copies it back (:mod:`.export`): the space comes back at once.

The prune and its undo are actions of the store's recovery journal (either flavour: the
``OperationsJournal`` of :mod:`lastgood.readers.modelfiles.filejournal` or the ``FolderRecovery`` of
:mod:`.journal`; both apply move operations, idempotently, with ``apply``/``applied``): the moves are
the intent's operations, written to the lock before the first rename; a kill at any moment leaves
each item in the store or in the archive, and the intent says which; the next action (or
:meth:`FolderRetention.resume`) rolls it forward and writes its journal entry.

A format says what its checkpoints are (:class:`Piece`: where each is, its bytes, whether it is
complete), each run's head, and what it always keeps beyond the core's rules (a best checkpoint,
folders a restore moved aside, …): :meth:`FolderRetention.layout`. Every checkpoint of a run
"needs" those (a dependency edge), so they are kept with the head; under the lock they are checked
again (a planned one that became one is left, ``skipped``).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from lastgood.errors import ConflictError, LastgoodError
from lastgood.readers import journal as jr
from lastgood.readers.common.exportops import expand
from lastgood.readers.common.filejournal import Kept, holding
from lastgood.readers.common.urls import display_url
from lastgood.readers.training_folders import export
from lastgood.readers.training_folders.journal import ARCHIVE
from lastgood.readers.training_folders.moves import StepFolder, newest
from lastgood.readers.journal import breakdown_row

Key = tuple[str, str, str]


def archive_path(action_id: str, rel: str) -> str:
    return f"{ARCHIVE}/{action_id}/{rel}"


@dataclass(frozen=True, slots=True)
class Piece:
    """One checkpoint as retention sees it: where it is (a folder or a file, relative to the store
    root), its bytes (as the listing counts them), and which table of the breakdown it is in."""

    run_id: str
    checkpoint_id: str
    rel: str
    size: int
    complete: bool = True
    area: str = "checkpoints"  # "checkpoints" | "quarantine" (moved aside) | "archived" | "unfinished"


@dataclass
class Layout:
    """The store as retention sees it: every checkpoint, each run's head, and what the format always
    keeps beyond the core's rules (``(run, checkpoint) -> rule``)."""

    pieces: list[Piece] = field(default_factory=list)
    heads: dict[str, str] = field(default_factory=dict)
    kept: dict[tuple[str, str], str] = field(default_factory=dict)
    _by_key: dict[tuple[str, str], Piece] = field(default_factory=dict, repr=False)

    def piece(self, run_id: str, checkpoint_id: str) -> Piece | None:
        if len(self._by_key) != len(self.pieces):
            self._by_key = {(p.run_id, p.checkpoint_id): p for p in self.pieces}
        return self._by_key.get((run_id, checkpoint_id))


class FolderRetention:
    """``RetentionBackend`` of a training store (see the module docstring). A format sets
    ``reader_name``, ``recovery_class`` (its recovery backend: the journal) and provides :meth:`layout`."""

    reader_name: ClassVar[str] = ""
    recovery_class: ClassVar[Any] = None
    noun: ClassVar[str] = "checkpoint folders"  # what a prune moves, in the notes
    where: ClassVar[str] = "store folder"

    def __init__(self, url: str, storage_options: Mapping[str, Any] | None = None) -> None:
        self.url = url
        self.storage_options = dict(storage_options or {})
        self.recovery = self.recovery_class(url, storage_options)

    def default_archive(self) -> str | None:
        return self.url.rstrip("/") + "/" + ARCHIVE

    # ---- what a format provides ------------------------------------------------------------------

    def layout(self) -> Layout:
        raise NotImplementedError

    def files_at(self, rel: str) -> dict[str, int]:
        """The files of a checkpoint (a folder: every file under it by its path inside; a file: its
        name) and their sizes — the manifest's ``files``, compared again before an undo."""
        fs, path = self.recovery.fs, self.recovery._path(rel)
        try:
            found = fs.find(path, detail=True)
        except FileNotFoundError:
            return {}
        out = {}
        for name, info in found.items():
            inner = str(name)[len(path):].lstrip("/") or rel.rsplit("/", 1)[-1]
            out[inner] = int(info.get("size") or 0)
        return dict(sorted(out.items()))

    # ---- the keep-set --------------------------------------------------------------------------

    def dependencies(self, rows: Any) -> Any:
        """Every checkpoint of a run needs what the format always keeps in it (so it stays with the head)."""
        from lastgood.readers.langgraph.retention_rules import edges_table

        kept: dict[str, list[tuple[str, str]]] = {}
        for (run_id, cid), rule in self.layout().kept.items():
            kept.setdefault(run_id, []).append((cid, rule))
        edges = [(r["run_id"], r["namespace"] or "", r["checkpoint_id"], "", cid, rule)
                 for r in rows.select(["run_id", "namespace", "checkpoint_id"]).to_pylist()
                 for cid, rule in kept.get(r["run_id"], []) if r["checkpoint_id"] != cid]
        return edges_table(edges)

    # ---- prune ---------------------------------------------------------------------------------

    def prune(self, request: jr.PruneRequest) -> jr.RetentionOutcome:
        shown = self._export_to(request)
        self.resume()
        action_id = str(request.entry["id"])
        prefix = f"{export.store_name(self.url)}/{action_id}"
        planned = {(r["run_id"], r["namespace"] or "", r["checkpoint_id"]): r for r in request.forget.to_pylist()}
        recovery = self.recovery
        lock = recovery._acquire(action_id)
        with holding(recovery, lock):
            outcome = jr.RetentionOutcome(entry={})
            going = self._recheck(planned, outcome)
            items = [export.item(recovery, p, prefix) if shown else self._item(p, action_id) for p in going]
            note = self._note(request, items, shown, prefix)
            seq, prev = jr.tip(recovery.journal_entries())
            sealed = jr.seal({**request.entry, "note": note, "new_head": None}, seq, prev)
            ops = export.prune_ops(items, shown, prefix) if shown else [
                {"op": "move", "from": i["from"], "to": i["to"]} for i in items]
            self._run_ops(lock, ops, sealed)
        outcome.entry, outcome.checkpoints, outcome.bytes = sealed, len(items), int(note["bytes"])
        space = export.space(self.noun, self.where, shown, prefix, items) if shown else self.reclaim(request.vacuum)
        outcome.space = {**space, "archived_bytes": outcome.bytes}
        return outcome

    def _note(self, request: jr.PruneRequest, items: list[dict[str, Any]], shown: str | None,
              prefix: str) -> dict[str, Any]:
        """The prune entry's note: the archive (no credentials), counts, and the manifest."""
        note = {**dict(request.entry.get("note") or {}), "archive": shown or display_url(self.default_archive() or ""),
                "count": len(items), "bytes": sum(i["bytes"] for i in items), "manifest": items}
        if shown:
            note.update(exported=True, archive_manifest=f"{prefix}/manifest.json")
        return note

    def _export_to(self, request: jr.PruneRequest) -> str | None:
        """The archive (its URL without credentials) a prune copies checkpoints to, then deletes them:
        an ``--archive`` other than the default; None: renamed into the store's own archive folder."""
        url = request.archive_url
        if "://" not in url and "::" not in url:
            url = os.path.abspath(os.path.expanduser(url))  # a roll-forward may run in another folder
        if url.rstrip("/") == (self.default_archive() or "").rstrip("/"):
            return None
        return export.prepare(self.recovery, url, request.archive_options, self.recovery.root)

    def _item(self, piece: Piece, action_id: str) -> dict[str, Any]:
        return {"run_id": piece.run_id, "checkpoint_id": piece.checkpoint_id, "from": piece.rel,
                "to": archive_path(action_id, piece.rel), "bytes": piece.size, "files": self.files_at(piece.rel)}

    def _recheck(self, planned: Mapping[Key, Mapping[str, Any]], outcome: jr.RetentionOutcome) -> list[Piece]:
        """Under the lock: nothing that became a head, pin or journaled target goes (refused: nothing
        moved); one the format now keeps, or gone, changed or unfinished since the plan, stays (skipped)."""
        layout = self.layout()
        entries = self.recovery.journal_entries()
        protected = dict(jr.journal_targets(entries))
        protected.update({k: f"pinned by {p.action_id}" for k, p in jr.fold_pins(entries).items()})
        for run_id, head in layout.heads.items():
            protected.setdefault((run_id, "", head), "the run's head")
        found = [f"{k[2]} of {k[0]!r} ({protected[k]})" for k in planned if k in protected]
        if found:
            raise ConflictError("since the plan, " + "; ".join(found[:5]) + " must be kept: nothing was moved "
                                "— plan the prune again")
        going = []
        for key, row in sorted(planned.items()):
            piece = layout.piece(key[0], key[2])
            rule = layout.kept.get((key[0], key[2]))
            if piece is None:
                outcome.skipped.append(_skip(key, f"no longer in the {self.where}"))
            elif rule is not None:
                outcome.skipped.append(_skip(key, f"kept ({rule})"))
            elif not piece.complete or not piece.rel or (
                    row.get("size_bytes") is not None and int(row["size_bytes"]) != piece.size):
                outcome.skipped.append(_skip(key, "written to since the plan: kept"))
            else:
                going.append(piece)
        return going

    def _run_ops(self, lock: Mapping[str, Any], ops: list[dict[str, Any]], sealed: dict[str, Any]) -> None:
        """The intent (with every move) durable first, then the moves, then the entry. A failure after
        a move leaves the intent, marked interrupted, for the next action to roll forward."""
        recovery = self.recovery
        intent = {**lock, "ops": ops, "entry": sealed, "retention": sealed["action"]}
        recovery._write_lock(intent)
        try:
            for op in expand(intent):
                recovery.apply(op)
            recovery._write_entry(sealed)
        except BaseException as exc:
            if recovery._maybe_took_effect(intent):
                recovery._mark_interrupted(intent, exc, failed=True)
                raise Kept(exc) from exc
            raise

    # ---- undo ----------------------------------------------------------------------------------

    def _manifest(self, original: Mapping[str, Any]) -> list[dict[str, Any]]:
        note = original.get("note") if isinstance(original.get("note"), Mapping) else {}
        return [dict(i) for i in note.get("manifest") or [] if isinstance(i, Mapping)]

    def _exported(self, original: Mapping[str, Any]) -> str | None:
        """The archive a prune copied its checkpoints to (None: renamed inside the store)."""
        note = original.get("note") if isinstance(original.get("note"), Mapping) else {}
        return str(note.get("archive")) if note.get("exported") else None

    def _state(self, item: Mapping[str, Any], shown: str | None = None) -> str | None:
        """Why ``item`` cannot come back as it went (None: it can)."""
        if shown:
            return export.state(self.recovery, shown, item)
        fs, path = self.recovery.fs, self.recovery._path
        if fs.exists(path(str(item["from"]))):
            return f"{item['from']} exists again (written since the prune)"
        if not fs.exists(path(str(item["to"]))):
            return f"{item['to']} is not in the archive any more"
        if self.files_at(str(item["to"])) != item.get("files"):
            return f"{item['to']} changed in the archive (its files differ from the manifest)"
        return None

    def unprune_conflicts(self, original: Mapping[str, Any], force: bool = False) -> list[str]:
        shown = self._exported(original)
        try:
            found = [why for i in self._manifest(original) if (why := self._state(i, shown))]
        except LastgoodError as exc:
            return [str(exc)]
        return [] if force and all("exists again" in why for why in found) else found

    def unprune(self, request: jr.UnpruneRequest) -> jr.RetentionOutcome:
        shown = self._exported(request.original)
        if shown:
            self.recovery.use_archive(shown, request.archive_options)
        self.resume()
        recovery = self.recovery
        lock = recovery._acquire(str(request.entry["id"]))
        outcome = jr.RetentionOutcome(entry={})
        with holding(recovery, lock):
            ops = self._unprune_ops(request, outcome)
            seq, prev = jr.tip(recovery.journal_entries())
            sealed = jr.seal({**request.entry, "new_head": None}, seq, prev)
            self._run_ops(lock, ops, sealed)
        self._tidy(f"{export.INCOMING}/{sealed['id']}" if shown else archive_path(str(request.original["id"]), ""))
        outcome.entry = sealed
        return outcome

    def _unprune_ops(self, request: jr.UnpruneRequest, outcome: jr.RetentionOutcome) -> list[dict[str, Any]]:
        ops, shown = [], self._exported(request.original)
        for item in self._manifest(request.original):
            why = self._state(item, shown)
            if why and not (request.force and "exists again" in why):
                raise ConflictError(why + "; nothing was restored")
            if why:
                key = (str(item["run_id"]), "", str(item["checkpoint_id"]))
                outcome.skipped.append(_skip(key, why + ": left in the archive"))
                continue
            ops.append(export.import_op(shown, item, str(request.entry["id"])) if shown else
                       {"op": "move", "from": item["to"], "to": item["from"]})
            outcome.checkpoints += 1
            outcome.bytes += int(item.get("bytes") or 0)
        if shown:
            ops.append(export.marker_op(shown, request.original, request.entry, [o["to"] for o in ops]))
        return ops

    def _tidy(self, folder: str) -> None:
        """Remove the folders under ``folder`` an undo left empty (best effort, local only)."""
        if not self.recovery.local:
            return
        top = self.recovery._path(folder).rstrip("/")
        for here, _dirs, _files in sorted(os.walk(top), key=lambda w: -len(w[0])):
            with contextlib.suppress(OSError):
                os.rmdir(here)
        with contextlib.suppress(OSError):
            os.rmdir(os.path.dirname(top))  # .lastgood/incoming/ (or archive/) when nothing else is in it

    # ---- interrupted prunes and undos ------------------------------------------------------------

    def pending(self) -> list[dict[str, Any]]:
        return [lock for lock in self.recovery.pending() if lock.get("retention")]

    def resume(self) -> list[dict[str, Any]]:
        """An interrupted prune or undo (a stale lock) is rolled forward by taking the lock."""
        pending = self.pending()
        if not self.recovery.pending():
            return []
        self.recovery._release(self.recovery._acquire("resume"))
        return [{"action_id": p.get("action_id"), "kind": "prune" if p.get("retention") == "prune" else "unprune"}
                for p in pending]

    # ---- what the store holds, and space --------------------------------------------------------

    def breakdown(self, channels: bool = True, sample: int = 200) -> list[dict[str, Any]]:
        """Bytes of the checkpoints by area (in place, moved aside, …) in all, per run, and per
        checkpoint with ``channels``; the archive's bytes."""
        out: list[dict[str, Any]] = []
        by_run: dict[tuple[str, str], list[Piece]] = {}
        totals: dict[str, list[int]] = {}
        for piece in self.layout().pieces:
            by_run.setdefault((piece.run_id, piece.area), []).append(piece)
            total = totals.setdefault(piece.area, [0, 0])
            total[0], total[1] = total[0] + 1, total[1] + piece.size
        out += [breakdown_row(area, count, size) for area, (count, size) in sorted(totals.items())]
        for (run_id, area), found in sorted(by_run.items()):
            out.append(breakdown_row(area, len(found), sum(p.size for p in found), run_id))
            out += [breakdown_row(area, 1, p.size, run_id, p.checkpoint_id) for p in found if channels]
        archived = self.footprint()["files"].get("archive", 0)
        if archived:
            out.append(breakdown_row("archive", 0, archived))
        return out

    def footprint(self) -> dict[str, Any]:
        fs, root = self.recovery.fs, self.recovery.root
        files: dict[str, int] = {}
        try:
            listing = fs.find(root, detail=True)
        except FileNotFoundError:
            listing = {}
        homes = {p.rel for p in self.layout().pieces if p.rel}
        for path, info in listing.items():
            area = self._area(str(path)[len(root):].lstrip("/"), homes)
            files[area] = files.get(area, 0) + int(info.get("size") or 0)
        return {"files": files, "bytes": sum(files.values()), "free_bytes": 0,
                "notes": [f"{ARCHIVE}/ holds pruned {self.noun}: their bytes stay on disk until it is removed"]}

    def _area(self, rel: str, homes: set[str]) -> str:
        if rel.startswith(ARCHIVE + "/"):
            return "archive"
        if rel.startswith(".lastgood/journal/"):
            return "journal"
        if "/.lastgood/quarantine/" in "/" + rel:
            return "quarantine"
        parts = rel.split("/")
        return "checkpoints" if any("/".join(parts[:n]) in homes for n in range(1, len(parts) + 1)) else "other"

    def reclaim(self, vacuum: bool = False) -> dict[str, Any]:
        return {"returned_bytes": 0, "free_bytes": 0, "vacuumed": False,
                "notes": [f"pruned {self.noun} were moved (renamed) into {ARCHIVE}/<action>/ inside the {self.where}: "
                          "no space is freed until that archive folder is removed, after which the prune can no "
                          "longer be undone"]}


class StepFolderRetention(FolderRetention):
    """Retention of step-folder stores (torch DCP, Orbax): the head is the newest visible step folder;
    folders a restore moved aside into ``.lastgood/quarantine/<action>/`` are always kept (an undo
    needs them); unfinished saves (no ``.metadata``, ``*.orbax-checkpoint-tmp*``) are never touched.
    ``reader_class``: the format's reader (``_layout()``, ``record_of``)."""

    reader_class: ClassVar[Any] = None

    def layout(self) -> Layout:
        with self.reader_class(self.url, self.storage_options) as reader:
            folders, files = reader._layout()
            out = Layout()
            for f in folders:
                size = reader.record_of(f, files.get(f.rel) or []).size_bytes or 0
                out.pieces.append(Piece(f.run_id, f.checkpoint_id, f.rel, int(size), f.complete and f.seen,
                                        _step_area(f)))
                if not f.visible:
                    out.kept[(f.run_id, f.checkpoint_id)] = f"moved aside by {f.action}"
        for run_id in {f.run_id for f in folders}:
            head = newest(f for f in folders if f.run_id == run_id)
            if head is not None:
                out.heads[run_id] = head.checkpoint_id
        return out


def _step_area(folder: StepFolder) -> str:
    return "quarantine" if not folder.visible else "checkpoints" if folder.seen else "unfinished"


def _skip(key: Key, reason: str) -> dict[str, Any]:
    return {"run_id": key[0], "namespace": key[1], "checkpoint_id": key[2], "reason": reason}
