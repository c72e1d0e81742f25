"""The recovery journal of a checkpoint folder, with file operations as an action's work.

Layout, under the store root (a folder the frameworks never look into)::

    .lastgood/journal/entries/<seq:010d>.json   one journal entry per file, never rewritten
    .lastgood/journal/lock.json                 the action in progress: its sealed entry and the
                                                file operations that carry it out (its intent)

The journal, the intent lock and the commit are :mod:`lastgood.readers.common.filejournal`'s; an
action's work here is a list of operations, each a rename or an atomic file replace, each
idempotent. A lock left by a dead process is resolved by the next action: if any of its operations
took effect, the rest are applied and its entry is written (roll forward); otherwise it is dropped.

A format's backend subclasses :class:`OperationsJournal` and says what the head is, which
operations make ``change.restore_from`` the head (:meth:`OperationsJournal.operations`) and how
to check the result.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from lastgood.readers import journal as jr
from lastgood.readers.common.exportops import ExportOps, expand
from lastgood.readers.common.filejournal import FileJournal, Prepared, durable_write
from lastgood.readers.common.fsutil import open_fs

JOURNAL = ".lastgood/journal"
ENTRIES = f"{JOURNAL}/entries"
LOCK = f"{JOURNAL}/lock.json"
QUARANTINE = ".lastgood/quarantine"

Operation = dict[str, Any]


class OperationsJournal(ExportOps, FileJournal):
    """``RecoveryBackend`` skeleton for folder formats (see the module docstring)."""

    entries_dir = ENTRIES
    lock_file = LOCK

    def __init__(self, url: str, storage_options: Mapping[str, Any] | None = None) -> None:
        self.url = url
        self.storage_options = dict(storage_options or {})
        self.open_journal(*open_fs(url, storage_options))

    def path(self, relative: str) -> str:
        return self._path(relative)

    # ---- what a format provides ------------------------------------------------------

    def operations(self, change: jr.Change) -> list[Operation]:
        """The file operations that make ``change.restore_from`` the run's head."""
        raise NotImplementedError

    def check_head(self, run_id: str, namespace: str, target_id: str, expected_state: Any) -> jr.HeadCheck:
        raise NotImplementedError

    def side_effects(self, run_id: str, namespace: str, after: Sequence[str]) -> list[dict[str, Any]]:
        return []

    def planned_operations(self, change: jr.Change) -> list[str]:
        """What a restore will do to the folder, one line per operation (nothing is written)."""
        if not change.restore_from:
            return []
        return [f"move {op['from']} → {op['to']}" if op["op"] == "move" else f"rewrite {op.get('path')}"
                for op in self.operations(change)]

    # ---- the work of an action: its operations ----------------------------------------

    def prepare(self, change: jr.Change, head: str | None) -> Prepared:
        if not change.restore_from:
            return Prepared(head)
        return Prepared(change.restore_from, work={"ops": self.operations(change)})

    def perform(self, intent: Mapping[str, Any], payload: Any) -> None:
        for op in expand(intent):
            self.apply(op)

    def took_effect(self, intent: Mapping[str, Any]) -> bool:
        return self.ops_took_effect(intent)

    def complete(self, intent: Mapping[str, Any]) -> None:
        self.perform(intent, None)

    # ---- operations: moves (MoveOps) and atomic replaces ----------------------------------

    def apply(self, op: Operation) -> None:
        """Carry out one operation unless it already took effect (idempotent)."""
        if op["op"] == "write":
            durable_write(self.fs, self.path(op["path"]), op["new"].encode())
        else:
            super().apply(op)  # a move (or ValueError)

    def applied(self, op: Operation) -> bool:
        if op["op"] != "write":
            return super().applied(op)  # a move, an export or import (ExportOps)
        try:
            return bytes(self.fs.cat_file(self.path(op["path"]))) == op["new"].encode()
        except FileNotFoundError:
            return False
