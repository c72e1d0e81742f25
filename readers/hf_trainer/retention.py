"""Retention of Trainer output folders: prune = move checkpoint folders into the archive, by rename.

A pruned ``checkpoint-N`` folder is renamed (one atomic rename on a local filesystem) into

    <output folder>/.lastgood/archive/<action id>/<its path>

which neither ``get_last_checkpoint`` nor Trainer's rotation (they list the output folder's own
``checkpoint-N`` children) ever sees. "Archive before delete" is the rename itself: the bytes are
kept, so the space comes back only when the archive folder is removed (after which the prune can no
longer be undone). The undo renames each folder back, byte for byte.

The prune and its undo are actions of the store's recovery journal
(:mod:`lastgood.readers.modelfiles.filejournal`): their moves are the intent's operations, written
to the lock before the first rename; a kill at any moment leaves each folder in the output folder
or in the archive, and the intent says which; the next action (or :meth:`TrainerRetention.resume`)
rolls it forward and writes its journal entry.

Kept beyond the core's rules (heads, last good, pins, journaled targets): the Trainer's
``best_model_checkpoint`` (the newest ``trainer_state.json``): every checkpoint of the run needs it
(a dependency edge), since Trainer's rotation and ``load_best_model_at_end`` rely on it.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Mapping
from typing import Any

from lastgood.errors import ConflictError
from lastgood.readers import journal as jr
from lastgood.readers.common.urls import display_url
from lastgood.readers.hf_trainer.layout import Found, Run
from lastgood.readers.hf_trainer.recovery import TrainerRecovery
from lastgood.readers.modelfiles.fsio import join

ARCHIVE = ".lastgood/archive"
BEST_RULE = "best-model-checkpoint"  # trainer_state.json's best_model_checkpoint
Key = tuple[str, str, str]


def archive_path(action_id: str, rel: str) -> str:
    return join(ARCHIVE, action_id, rel)


class TrainerRetention:
    """``RetentionBackend`` of the ``hf-trainer`` reader (see the module docstring)."""

    reader_name = "hf-trainer"

    def __init__(self, url: str, storage_options: Mapping[str, Any] | None = None) -> None:
        self.url = url
        self.storage_options = dict(storage_options or {})
        self.recovery = TrainerRecovery(url, storage_options)

    def _reader(self) -> Any:
        return self.recovery._reader()

    def _runs(self) -> dict[str, Run]:
        return self._reader().runs(fresh=True)

    def default_archive(self) -> str | None:
        return self.url.rstrip("/") + "/" + ARCHIVE

    # ---- the keep-set --------------------------------------------------------------------------

    def best_checkpoints(self) -> dict[str, str]:
        """Each run's ``best_model_checkpoint`` (its checkpoint id), where the newest state names one."""
        reader = self._reader()
        out = {}
        for run_id, run in reader.runs(fresh=True).items():
            best = reader._best(run)
            if best:
                out[run_id] = best
        return out

    def dependencies(self, rows: Any) -> Any:
        """Every checkpoint of a run needs the run's best checkpoint (so it is kept with the head)."""
        from lastgood.readers.langgraph.retention_rules import edges_table

        best = self.best_checkpoints()
        edges = [(r["run_id"], r["namespace"] or "", r["checkpoint_id"], "", best[r["run_id"]], BEST_RULE)
                 for r in rows.select(["run_id", "namespace", "checkpoint_id"]).to_pylist()
                 if r["run_id"] in best and r["checkpoint_id"] != best[r["run_id"]]]
        return edges_table(edges)

    # ---- prune ---------------------------------------------------------------------------------

    def prune(self, request: jr.PruneRequest) -> jr.RetentionOutcome:
        self.resume()
        action_id = str(request.entry["id"])
        planned = {(r["run_id"], r["namespace"] or "", r["checkpoint_id"]): r for r in request.forget.to_pylist()}
        recovery = self.recovery
        lock = recovery._acquire(action_id)
        try:
            outcome = jr.RetentionOutcome(entry={})
            going = self._recheck(planned, outcome)
            items = [_item(run, c, action_id) for run, c in going]
            note = {**dict(request.entry.get("note") or {}), "archive": display_url(self.default_archive() or ""),
                    "count": len(items), "bytes": sum(i["bytes"] for i in items), "manifest": items}
            seq, prev = jr.tip(recovery.journal_entries())
            sealed = jr.seal({**request.entry, "note": note, "new_head": None}, seq, prev)
            ops = [{"op": "move", "from": i["from"], "to": i["to"]} for i in items]
            self._run_ops(lock, ops, sealed)
        except _Kept as kept:
            raise kept.error from None  # the intent stays: the next action rolls it forward
        except BaseException:
            recovery._release(lock)
            raise
        recovery._release(lock)
        outcome.entry, outcome.checkpoints, outcome.bytes = sealed, len(items), int(note["bytes"])
        outcome.space = {**self.reclaim(request.vacuum), "archived_bytes": outcome.bytes}
        if request.archive_url.rstrip("/") != (self.default_archive() or "").rstrip("/"):
            outcome.space["notes"].append(f"the archive given ({display_url(request.archive_url)}) is not used: "
                                          "Trainer checkpoint folders are archived by rename inside the output "
                                          f"folder ({ARCHIVE}/{action_id}/)")
        return outcome

    def _recheck(self, planned: Mapping[Key, Mapping[str, Any]], outcome: jr.RetentionOutcome
                 ) -> list[tuple[Run, Found]]:
        """Under the lock: nothing that became a head, pin, journaled target or the best checkpoint
        goes (refused: nothing moved); a folder gone or changed since the plan stays."""
        runs = self._runs()
        entries = self.recovery.journal_entries()
        protected = dict(jr.journal_targets(entries))
        protected.update({k: f"pinned by {p.action_id}" for k, p in jr.fold_pins(entries).items()})
        for run_id, best in self.best_checkpoints().items():
            protected.setdefault((run_id, "", best), BEST_RULE)
        for run_id, run in runs.items():
            if run.head is not None:
                protected.setdefault((run_id, "", run.head.checkpoint_id), "the run's head")
        found = [f"{k[2]} of {k[0]!r} ({protected[k]})" for k in planned if k in protected]
        if found:
            raise ConflictError("since the plan, " + "; ".join(found[:5]) + " must be kept: nothing was moved "
                                "— plan the prune again")
        going = []
        for key, row in sorted(planned.items()):
            run = runs.get(key[0])
            c = run.by_id(key[2]) if run is not None else None
            if run is None or c is None:
                outcome.skipped.append(_skip(key, "no longer in the output folder"))
            elif not c.complete or (row.get("size_bytes") is not None and int(row["size_bytes"]) != c.size):
                outcome.skipped.append(_skip(key, "written to since the plan: kept"))
            else:
                going.append((run, c))
        return going

    def _run_ops(self, lock: Mapping[str, Any], ops: list[dict[str, Any]], sealed: dict[str, Any]) -> None:
        """The intent (with every move) durable first, then the moves, then the entry. A failure after
        a move leaves the intent, marked interrupted, for the next action to roll forward."""
        recovery = self.recovery
        intent = {**lock, "ops": ops, "entry": sealed, "retention": sealed["action"]}
        recovery._write_lock(intent)
        try:
            for op in ops:
                recovery.apply(op)
            recovery._write_entry(sealed)
        except BaseException as exc:
            if recovery._maybe_took_effect(intent):
                recovery._mark_interrupted(intent, exc, failed=True)
                raise _Kept(exc) from exc
            raise

    # ---- undo ----------------------------------------------------------------------------------

    def _manifest(self, original: Mapping[str, Any]) -> list[dict[str, Any]]:
        note = original.get("note") if isinstance(original.get("note"), Mapping) else {}
        return [dict(i) for i in note.get("manifest") or [] if isinstance(i, Mapping)]

    def _state(self, item: Mapping[str, Any]) -> str | None:
        """Why ``item`` cannot come back as it went (None: it can)."""
        path = self.recovery.path
        if self.recovery.fs.exists(path(str(item["from"]))):
            return f"{item['from']} exists again (written since the prune)"
        if not self.recovery.fs.exists(path(str(item["to"]))):
            return f"{item['to']} is not in the archive any more"
        sizes = _sizes(self._reader().folder, str(item["to"]))
        if sizes != item.get("files"):
            return f"{item['to']} changed in the archive (its files differ from the manifest)"
        return None

    def unprune_conflicts(self, original: Mapping[str, Any], force: bool = False) -> list[str]:
        found = [why for why in map(self._state, self._manifest(original)) if why]
        return [] if force and all("exists again" in why for why in found) else found

    def unprune(self, request: jr.UnpruneRequest) -> jr.RetentionOutcome:
        self.resume()
        recovery = self.recovery
        lock = recovery._acquire(str(request.entry["id"]))
        outcome = jr.RetentionOutcome(entry={})
        try:
            items, ops = self._manifest(request.original), []
            for item in items:
                why = self._state(item)
                if why and not (request.force and "exists again" in why):
                    raise ConflictError(why + "; nothing was restored")
                if why:
                    key = (str(item["run_id"]), "", str(item["checkpoint_id"]))
                    outcome.skipped.append(_skip(key, why + ": left in the archive"))
                    continue
                ops.append({"op": "move", "from": item["to"], "to": item["from"]})
                outcome.checkpoints += 1
                outcome.bytes += int(item.get("bytes") or 0)
            seq, prev = jr.tip(recovery.journal_entries())
            sealed = jr.seal({**request.entry, "new_head": None}, seq, prev)
            self._run_ops(lock, ops, sealed)
        except _Kept as kept:
            raise kept.error from None
        except BaseException:
            recovery._release(lock)
            raise
        recovery._release(lock)
        self._tidy(str(request.original["id"]))
        outcome.entry = sealed
        return outcome

    def _tidy(self, action_id: str) -> None:
        """Remove the prune's archive folders left empty by its undo (best effort, local only)."""
        if not self.recovery.local:
            return
        top = self.recovery.path(join(ARCHIVE, action_id))
        for here, _dirs, _files in sorted(os.walk(top), key=lambda w: -len(w[0])):
            with contextlib.suppress(OSError):
                os.rmdir(here)

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

    # ---- what the folder holds, and space ----------------------------------------------------------

    def breakdown(self, channels: bool = True, sample: int = 200) -> list[dict[str, Any]]:
        """Bytes per run of its checkpoint folders (live, moved aside), and per folder with ``channels``."""
        out: list[dict[str, Any]] = []
        for run_id, run in sorted(self._runs().items()):
            for table, found in (("checkpoints", run.live), ("quarantine", [c for c in run.checkpoints if c.moved_by])):
                if found:
                    out.append(_row(table, len(found), sum(c.size for c in found), run_id))
                    out += [_row(table, 1, c.size, run_id, c.checkpoint_id) for c in found if channels]
        archived = self.footprint()["files"].get("archive", 0)
        if archived:
            out.append(_row("archive", 0, archived))
        return out

    def footprint(self) -> dict[str, Any]:
        fs, root = self.recovery.fs, self.recovery.root
        files: dict[str, int] = {}
        try:
            listing = fs.find(root, detail=True)
        except FileNotFoundError:
            listing = {}
        for path, info in listing.items():
            rel = str(path)[len(root):].lstrip("/")
            area = ("archive" if rel.startswith(ARCHIVE + "/") else "journal" if rel.startswith(".lastgood/journal/")
                    else "quarantine" if "/.lastgood/quarantine/" in "/" + rel else "checkpoints"
                    if any(p.startswith("checkpoint-") for p in rel.split("/")[:-1]) else "other")
            files[area] = files.get(area, 0) + int(info.get("size") or 0)
        return {"files": files, "bytes": sum(files.values()), "free_bytes": 0,
                "notes": [f"{ARCHIVE}/ holds pruned checkpoint folders: their bytes stay on disk until it is removed"]}

    def reclaim(self, vacuum: bool = False) -> dict[str, Any]:
        return {"returned_bytes": 0, "free_bytes": 0, "vacuumed": False,
                "notes": [f"pruned checkpoint folders were moved (renamed) into {ARCHIVE}/<action>/ inside the output "
                          "folder: no space is freed until that archive folder is removed, after which the prune "
                          "can no longer be undone"]}


class _Kept(Exception):
    def __init__(self, error: BaseException) -> None:
        super().__init__(str(error))
        self.error = error


def _item(run: Run, c: Found, action_id: str) -> dict[str, Any]:
    return {"run_id": run.run_id, "checkpoint_id": c.checkpoint_id, "from": c.rel, "to": archive_path(action_id, c.rel),
            "bytes": c.size, "files": {name: e.size for name, e in sorted(c.entries.items())}}


def _sizes(folder: Any, rel: str) -> dict[str, int]:
    from lastgood.readers.hf_trainer.layout import files_of

    folder.forget()
    return {name: e.size for name, e in sorted(files_of(folder, rel).items())}


def _skip(key: Key, reason: str) -> dict[str, Any]:
    return {"run_id": key[0], "namespace": key[1], "checkpoint_id": key[2], "reason": reason}


def _row(table: str, rows: int, size: int, run_id: str | None = None, channel: str | None = None) -> dict[str, Any]:
    return {"table": table, "channel": channel, "run_id": run_id, "rows": rows, "bytes": size, "estimated": False}
