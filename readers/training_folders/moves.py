"""Recovery for formats whose "latest" is the newest step folder (torch DCP, Orbax).

Neither format has a pointer to move: DCP has no notion of "latest" at all (a training script picks a
folder, usually the newest), Orbax's ``CheckpointManager.latest_step()`` is the highest finalized
step folder. So restoring step X *moves aside* every step folder of the run after X, into
``.lastgood/quarantine/<action>/<its path>`` — a folder neither library sees as a step — and
brings back the folders an earlier action moved aside up to X (an undo brings back exactly what its
action moved). Moves are renames: undo gives the folders back byte for byte.

The moved-aside folders stay listed (same checkpoint id, ``location`` under the quarantine, metadata
``moved_aside_by``), so they can still be inspected and restored.
"""

from __future__ import annotations

import os
import posixpath
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from lastgood.errors import CheckpointNotFound, ConflictError, DecodeError, LastgoodError
from lastgood.readers import journal as jr
from lastgood.readers.common.filejournal import sync_dir
from lastgood.readers.training_folders.journal import QUARANTINE, FolderRecovery


@dataclass(frozen=True, slots=True)
class StepFolder:
    """One step folder of a run, where it is now and where it belongs."""

    run_id: str
    checkpoint_id: str
    rel: str  # where it is now (relative to the store root)
    home: str  # where it belongs: its path when the framework sees it
    key: tuple[Any, ...]  # its order within the run
    action: str | None = None  # the action that moved it aside (None: in place)
    complete: bool = True
    seen: bool = True  # the framework sees it as a step (Orbax ignores unfinished *.orbax-checkpoint-tmp*)

    @property
    def visible(self) -> bool:
        return self.action is None


def quarantine_path(action_id: str, home: str) -> str:
    return f"{QUARANTINE}/{action_id}/{home}"


def split_quarantined(rel: str) -> tuple[str, str] | None:
    """``(action, home)`` of a path under the quarantine folder."""
    prefix = QUARANTINE + "/"
    if not rel.startswith(prefix):
        return None
    action, _, home = rel[len(prefix):].partition("/")
    return (action, home) if action and home else None


def assign_ids(folders: Iterable[StepFolder]) -> list[StepFolder]:
    """A moved-aside folder keeps its id unless a folder of the same run has it too (one in place,
    or another moved aside): then ``<id>~<action>``."""
    folders = list(folders)
    taken = {(f.run_id, f.checkpoint_id) for f in folders if f.visible}
    count: dict[tuple[str, str], int] = {}
    for f in folders:
        if not f.visible:
            count[(f.run_id, f.checkpoint_id)] = count.get((f.run_id, f.checkpoint_id), 0) + 1
    out = []
    for f in folders:
        key = (f.run_id, f.checkpoint_id)
        if not f.visible and (key in taken or count[key] > 1):
            f = replace(f, checkpoint_id=f"{f.checkpoint_id}~{f.action}")
        out.append(f)
    return out


def current_location(reader: Any, record: Any) -> str:
    """Where a listed step folder is now: its ``location``, or — moved since it was listed (a restore
    moved it aside, an undo brought it back) — where it went. ``reader``: the format's reader."""
    rel = record.location or ""
    if not rel or reader.folder.entry(rel) is not None:
        return rel
    moved = split_quarantined(rel)
    if moved and reader.folder.entry(moved[1]) is not None:
        return moved[1]
    key = (record.run_id, record.checkpoint_id)
    found = [f.rel for f in reader.step_folders() if (f.run_id, f.checkpoint_id) == key]
    return found[0] if found else rel


def newest(folders: Iterable[StepFolder]) -> StepFolder | None:
    shown = [f for f in folders if f.visible and f.seen]
    return max(shown, key=lambda f: f.key) if shown else None


class StepFolderRecovery(FolderRecovery):
    """``RecoveryBackend`` moving step folders aside and back. ``reader_class``: the format's
    reader, which lists the layout (``step_folders()``), loads states and finds the head."""

    reader_class: Any = None

    def _reader(self) -> Any:
        return self.reader_class(self.url, self.storage_options)

    def _folders(self, run_id: str) -> list[StepFolder]:
        with self._reader() as reader:
            return [f for f in reader.step_folders() if f.run_id == run_id]

    def head(self, run_id: str, namespace: str = "") -> str | None:
        found = newest(self._folders(run_id))
        return found.checkpoint_id if found else None

    def refuse_target(self, reader: Any, target: StepFolder) -> None:
        """Raise UsageError when the framework must never load the target (a format's hook)."""

    def plan(self, change: jr.Change, action_id: str) -> dict[str, Any]:
        folders = self._folders(change.run_id)
        target = _pick(folders, str(change.restore_from))
        with self._reader() as reader:
            self.refuse_target(reader, target)
        aside = [f for f in folders if f.visible and f.seen and f.key > target.key]
        back = [f for f in folders if not f.visible and f.seen and f.key <= target.key]
        if target not in back and not target.visible:
            back.append(target)
        _refuse_clashes(folders, aside, back, target)
        moves = [[f.rel, quarantine_path(action_id, f.home)] for f in sorted(aside, key=lambda f: f.key)]
        moves += [[f.rel, f.home] for f in sorted(back, key=lambda f: f.key)]
        return {"run_id": change.run_id, "target": target.checkpoint_id, "moves": moves}

    def carry_out(self, plan: Mapping[str, Any]) -> None:
        for src, dst in plan.get("moves") or []:
            self._move(str(src), str(dst))

    def started(self, plan: Mapping[str, Any]) -> bool:
        return any(not self.folder.exists(src) and self.folder.exists(dst) for src, dst in plan.get("moves") or [])

    def _move(self, src: str, dst: str) -> None:
        """Rename one folder (idempotent: done already when only the destination exists)."""
        has_src, has_dst = self.folder.exists(src), self.folder.exists(dst)
        if not has_src and has_dst:
            return
        if has_dst or not has_src:
            raise ConflictError(f"cannot move {src} to {dst}: "
                                f"{'the destination exists' if has_dst else 'the folder is gone'}")
        source, target = self.folder.path(src), self.folder.path(dst)
        if self.folder.local:
            os.makedirs(os.path.dirname(target), exist_ok=True)
            os.rename(source, target)
            sync_dir(os.path.dirname(target))
            sync_dir(os.path.dirname(source))
        else:
            self.folder.fs.mv(source, target, recursive=True)

    def check_head(self, run_id: str, namespace: str, target_id: str, expected_state: Any) -> jr.HeadCheck:
        """The newest step folder, read back with the reader: it must be the target, with its state."""
        try:
            with self._reader() as reader:
                found = newest(f for f in reader.step_folders() if f.run_id == run_id)
                if found is None or found.checkpoint_id != target_id:
                    return jr.HeadCheck(False, f"the newest step folder is {found.home if found else None}, "
                                               f"not {target_id}")
                state = reader.load_state(reader.record_of(found))
        except (DecodeError, LastgoodError, OSError) as exc:
            return jr.HeadCheck(False, f"the new head does not load: {exc}")
        if expected_state is not None and state != expected_state:
            return jr.HeadCheck(False, "the newest step folder's state differs from the target's")
        return jr.HeadCheck(True, f"the newest step folder is {posixpath.basename(found.home)}, "
                                  "with the target's state")


def _pick(folders: list[StepFolder], checkpoint_id: str) -> StepFolder:
    found = [f for f in folders if f.checkpoint_id == checkpoint_id]
    if not found:
        raise CheckpointNotFound(f"no step folder {checkpoint_id!r} in this run any more")
    return found[0]


def _refuse_clashes(folders: list[StepFolder], aside: list[StepFolder], back: list[StepFolder],
                    target: StepFolder) -> None:
    """A folder brought back needs its place free (after the moves aside), and one place can take
    one folder: two moved-aside folders of the same place (the target's own wins)."""
    occupied = {f.home for f in folders if f.visible} - {f.home for f in aside}
    homes: dict[str, StepFolder] = {}
    for f in sorted(back, key=lambda f: f is not target):
        if f.home in occupied:
            raise ConflictError(f"{f.home} exists again (written after {f.action} moved the earlier one "
                                "aside): move or delete it first")
        if f.home in homes:
            back.remove(f)  # an older copy of the same place: stays aside
            continue
        homes[f.home] = f
