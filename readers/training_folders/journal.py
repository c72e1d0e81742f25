"""The recovery journal inside a training store folder, with a format's plan as an action's work.

Layout (native-store style, under the store root)::

    .lastgood/journal/entries/<seq:010d>.json   one sealed entry per file, never rewritten
    .lastgood/journal/lock.json                 the action in progress: its intent and plan
    .lastgood/archive/<action>/…                what an action replaced (Lightning: last.ckpt)
    .lastgood/quarantine/<action>/…             what an action moved aside (DCP, Orbax step folders)

The journal, the intent lock and the commit are :mod:`lastgood.readers.common.filejournal`'s; an
action's work here is the format's plan (every file operation, idempotent). A plan that fails
part-way stays as the lock's intent, marked failed; a lock left by a dead process is resolved by
the next action: a plan that had started is finished and its entry written; one that had not is
dropped.

A prune or its undo (:mod:`.retention`) is an intent of its own kind: its work is a list of move
operations (``{"op": "move", "from", "to"}``, :class:`~lastgood.readers.common.filejournal.MoveOps`),
rolled forward the same way; with ``--archive URL`` elsewhere, export/import operations
(:mod:`lastgood.readers.common.exportops`: copy, verify, then delete).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from lastgood.readers import journal as jr
from lastgood.readers.common.exportops import ExportOps, expand
from lastgood.readers.common.filejournal import FileJournal, Prepared
from lastgood.readers.training_folders import LASTGOOD_DIR
from lastgood.readers.training_folders.folder import Folder

JOURNAL = f"{LASTGOOD_DIR}/journal"
ENTRIES = f"{JOURNAL}/entries"
LOCK = f"{JOURNAL}/lock.json"
ARCHIVE = f"{LASTGOOD_DIR}/archive"
QUARANTINE = f"{LASTGOOD_DIR}/quarantine"


def is_moves_intent(intent: Mapping[str, Any]) -> bool:
    """A prune's or an undo's intent (its work: move operations), not a format's plan."""
    return bool(intent.get("retention")) and "plan" not in intent


class FolderRecovery(ExportOps, FileJournal):
    """The shared half of a ``RecoveryBackend`` over a store folder. A format provides ``head``,
    ``plan`` (the file operations that make ``change.restore_from`` the head), ``carry_out``
    (idempotent), ``started`` (did any operation of a plan take effect) and ``check_head``."""

    entries_dir = ENTRIES
    lock_file = LOCK

    def __init__(self, url: str, storage_options: Mapping[str, Any] | None = None) -> None:
        self.url = url
        self.storage_options = dict(storage_options or {})
        self.folder = Folder(url, storage_options)
        self.open_journal(self.folder.fs, self.folder.root)

    # ---- what a format provides -----------------------------------------------------------

    def plan(self, change: jr.Change, action_id: str) -> dict[str, Any]:
        raise NotImplementedError

    def carry_out(self, plan: Mapping[str, Any]) -> None:
        raise NotImplementedError

    def moves_files(self, change: jr.Change) -> bool:
        """Whether the action changes files (else it only appends its journal entry: marks)."""
        return bool(change.restore_from)

    def started(self, plan: Mapping[str, Any]) -> bool:
        raise NotImplementedError

    def side_effects(self, run_id: str, namespace: str, after: Any) -> list[dict[str, Any]]:
        return []  # a training run's side effects are not recorded in its checkpoints

    def planned_operations(self, change: jr.Change) -> list[str]:
        """The folders a restore moves aside or brings back, one line each (nothing is written)."""
        if not self.moves_files(change):
            return []
        return [f"move {src} → {dst}" for src, dst in self.plan(change, str(change.entry.get("id"))).get("moves") or []]

    # ---- the work of an action: the format's plan ---------------------------------------------

    def prepare(self, change: jr.Change, head: str | None) -> Prepared:
        new_head = change.restore_from or head
        if not self.moves_files(change):
            return Prepared(new_head)
        return Prepared(new_head, work={"plan": self.plan(change, str(change.entry.get("id")))})

    def perform(self, intent: Mapping[str, Any], payload: Any) -> None:
        self.carry_out(intent["plan"])

    def took_effect(self, intent: Mapping[str, Any]) -> bool:
        if is_moves_intent(intent):
            return self.ops_took_effect(intent)
        plan = intent.get("plan")
        return isinstance(plan, dict) and self.started(plan)

    def complete(self, intent: Mapping[str, Any]) -> None:
        if is_moves_intent(intent):
            for op in expand(intent):
                self.apply(op)
            return
        self.carry_out(intent["plan"])
