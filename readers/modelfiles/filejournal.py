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

import os
import posixpath
from collections.abc import Mapping, Sequence
from typing import Any

from lastgood.readers import journal as jr
from lastgood.readers.common.filejournal import FileJournal, Prepared, durable_write, sync_dir
from lastgood.readers.common.fsutil import full_fs, open_fs

JOURNAL = ".lastgood/journal"
ENTRIES = f"{JOURNAL}/entries"
LOCK = f"{JOURNAL}/lock.json"
QUARANTINE = ".lastgood/quarantine"

Operation = dict[str, Any]


class OperationsJournal(FileJournal):
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
        for op in intent.get("ops") or []:
            self.apply(op)

    def took_effect(self, intent: Mapping[str, Any]) -> bool:
        ops = intent.get("ops")
        if not isinstance(ops, list) or not all(isinstance(op, dict) for op in ops):
            return False
        return not ops or any(self.applied(op) for op in ops)

    def complete(self, intent: Mapping[str, Any]) -> None:
        self.perform(intent, None)

    # ---- operations: moves and atomic replaces -----------------------------------------

    def apply(self, op: Operation) -> None:
        """Carry out one operation unless it already took effect (idempotent)."""
        if op["op"] == "move":
            if self.fs.exists(self.path(op["from"])) and (not self.local or not self.fs.exists(self.path(op["to"]))):
                self._move(op["from"], op["to"])
        elif op["op"] == "write":
            durable_write(self.fs, self.path(op["path"]), op["new"].encode())
        else:
            raise ValueError(f"unknown journal operation {op['op']!r}")

    def applied(self, op: Operation) -> bool:
        if op["op"] == "move":
            return self.fs.exists(self.path(op["to"])) and not self.fs.exists(self.path(op["from"]))
        try:
            return bytes(self.fs.cat_file(self.path(op["path"]))) == op["new"].encode()
        except FileNotFoundError:
            return False

    def _move(self, source: str, target: str) -> None:
        """A folder renamed: atomic on a local filesystem; on an object store a copy of every object
        then the deletes (an interrupted move is finished by copying what is missing)."""
        src, dst = self.path(source), self.path(target)
        if self.local:
            os.makedirs(posixpath.dirname(dst), exist_ok=True)
            os.rename(src, dst)
            sync_dir(posixpath.dirname(dst))
            sync_dir(posixpath.dirname(src))
        else:  # object stores: copy each object not copied yet, then delete the sources
            fs = full_fs(self.fs)
            files = sorted(fs.find(src))
            done = set(fs.find(dst)) if fs.exists(dst) else set()
            for path in files:
                target = dst + path[len(src):]
                if target not in done:
                    fs.copy(path, target)
            fs.rm(files)
