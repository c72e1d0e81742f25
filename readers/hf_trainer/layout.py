"""The folders of Trainer runs: checkpoints live and moved aside, their ids, the heads.

Live checkpoints are the ``checkpoint-N`` folders of an output folder (``tmp-checkpoint-N`` is
a save in flight: not a checkpoint, Trainer never resumes from it). Checkpoints a rollback moved
aside are under ``<output folder>/.lastgood/quarantine/<action id>/checkpoint-N``, where
``get_last_checkpoint`` (which lists the output folder's own ``checkpoint-N`` children) never
looks; they are listed too, so the journal's marks and an undo can name them.

One folder name can exist more than once (training resumed from a rollback writes
``checkpoint-32`` again while the old one is moved aside): the incarnations of a name, oldest
first by their files' time, are ``checkpoint-32``, ``checkpoint-32~2``, …
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from lastgood.readers.modelfiles.discover import find_runs, run_ids
from lastgood.readers.modelfiles.filejournal import QUARANTINE
from lastgood.readers.modelfiles.fsio import DIR, FILE, Entry, Folder, join

CHECKPOINT = re.compile(r"^checkpoint-(\d+)$")  # transformers.trainer_utils.PREFIX_CHECKPOINT_DIR
IN_FLIGHT = re.compile(r"^tmp-checkpoint-(\d+)$")
STATE = "trainer_state.json"
ARGS = "training_args.bin"
GENERATION = "~"


@dataclass
class Found:
    """One checkpoint folder."""

    name: str
    step: int
    rel: str
    moved_by: str | None
    entries: dict[str, Entry]
    checkpoint_id: str = ""
    mtime: float = 0.0

    @property
    def complete(self) -> bool:
        entry = self.entries.get(STATE)
        return entry is not None and entry.kind == FILE

    @property
    def size(self) -> int:
        return sum(e.size for e in self.entries.values())


@dataclass
class Run:
    run_id: str
    rel: str
    checkpoints: list[Found] = field(default_factory=list)
    in_flight: list[str] = field(default_factory=list)
    _ids: dict[str, Found] = field(default_factory=dict, repr=False)

    @property
    def live(self) -> list[Found]:
        return [c for c in self.checkpoints if c.moved_by is None]

    @property
    def head(self) -> Found | None:
        """``get_last_checkpoint``: the live folder with the highest N."""
        live = self.live
        return max(live, key=lambda c: c.step) if live else None

    def by_id(self, checkpoint_id: str) -> Found | None:
        if len(self._ids) != len(self.checkpoints):
            self._ids = {c.checkpoint_id: c for c in self.checkpoints}
        return self._ids.get(checkpoint_id)


def is_run(entries: Mapping[str, Entry]) -> bool:
    return any(e.kind == DIR and CHECKPOINT.match(name) for name, e in entries.items())


def skip_dir(name: str) -> bool:
    return bool(CHECKPOINT.match(name) or IN_FLIGHT.match(name))


def list_runs(folder: Folder) -> list[Run]:
    rels = find_runs(folder, is_run, skip_dir, max_depth=2)
    ids = run_ids(folder, rels)
    return [list_run(folder, ids[rel], rel) for rel in rels]


def list_run(folder: Folder, run_id: str, rel: str) -> Run:
    run = Run(run_id, rel)
    entries = folder.listdir(rel)
    for name, entry in sorted(entries.items()):
        if entry.kind != DIR:
            continue
        match = CHECKPOINT.match(name)
        if match:
            run.checkpoints.append(_found(folder, name, int(match[1]), join(rel, name), None))
        elif IN_FLIGHT.match(name):
            run.in_flight.append(join(rel, name))
    quarantine = join(rel, QUARANTINE)
    for action in sorted(folder.listdir(quarantine)):
        for name, entry in sorted(folder.listdir(join(quarantine, action)).items()):
            match = CHECKPOINT.match(name)
            if match and entry.kind == DIR:
                run.checkpoints.append(_found(folder, name, int(match[1]), join(quarantine, action, name), action))
    _name_incarnations(run.checkpoints)
    run.checkpoints.sort(key=lambda c: (c.step, c.mtime, c.checkpoint_id))
    return run


def _found(folder: Folder, name: str, step: int, rel: str, moved_by: str | None) -> Found:
    entries = files_of(folder, rel)
    mtime = max((e.mtime for e in entries.values()), default=0.0)
    if not entries:
        own = folder.entry(rel)
        mtime = own.mtime if own is not None else 0.0
    return Found(name, step, rel, moved_by, entries, mtime=mtime)


def files_of(folder: Folder, rel: str) -> dict[str, Entry]:
    """A checkpoint folder's files, and those one folder down (DeepSpeed's ``global_stepN/``)
    as ``sub/name``."""
    out: dict[str, Entry] = {}
    for name, entry in folder.listdir(rel).items():
        if entry.kind == FILE:
            out[name] = entry
        elif entry.kind == DIR and not name.startswith("."):
            for sub, inner in folder.listdir(join(rel, name)).items():
                if inner.kind == FILE:
                    out[f"{name}/{sub}"] = inner
    return out


def _name_incarnations(checkpoints: list[Found]) -> None:
    by_name: dict[str, list[Found]] = {}
    for c in checkpoints:
        by_name.setdefault(c.name, []).append(c)
    for name, found in by_name.items():
        found.sort(key=lambda c: (c.mtime, c.moved_by is None, c.moved_by or ""))
        for number, c in enumerate(found, start=1):
            c.checkpoint_id = name if number == 1 else f"{name}{GENERATION}{number}"


def parents(run: Run) -> dict[str, str | None]:
    """Each checkpoint's parent: the one before it from the same place (live, or moved aside by
    the same action), else the live one with the greatest lower step."""
    groups: dict[str | None, list[Found]] = {}
    for c in sorted(run.checkpoints, key=lambda c: (c.step, c.mtime)):
        groups.setdefault(c.moved_by, []).append(c)
    live = groups.get(None, [])
    live_steps = [c.step for c in live]
    out: dict[str, str | None] = {}
    for moved_by, found in groups.items():
        for position, c in enumerate(found):
            before = found[position - 1] if position and found[position - 1].step < c.step else None
            if before is None and moved_by is not None:
                at = bisect.bisect_left(live_steps, c.step)
                before = live[at - 1] if at else None
            out[c.checkpoint_id] = before.checkpoint_id if before is not None else None
    return out
