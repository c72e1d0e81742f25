"""Write capability of the native store: move a run's head, keep the journal.

Layout (see docs/format.md, "Recovery"):

    <root>/journal/entries/<seq:010d>.json   one journal entry per file, never rewritten
    <root>/journal/lock.json                 the action in progress (its intent)

A commit, in order:

1. create ``journal/lock.json`` exclusively (local: hard link of a synced temp
   file, which fails when the lock exists; object stores: a conditional PUT
   where the backend has one, else check-then-PUT — see docs/format.md);
2. re-read the head; if it is not the expected one: remove the lock,
   ``ConflictError``;
3. replace the lock with the intent: the sealed journal entry;
4. replace ``heads/<run>.json`` (temp + fsync + rename) — **the commit point**
   of an action that moves the head;
5. write ``journal/entries/<seq>.json`` (exclusive create) — the commit point
   of a marks-only action (quarantine, release);
6. remove the lock.

A kill at any moment leaves the old or the new head. A lock left by a dead
process is resolved by the next action: if its head switch happened, its
journal entry is written; otherwise it is dropped. Reading never writes.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from lastgood.errors import DecodeError, LastgoodError, ReaderError
from lastgood.readers import journal as jr
from lastgood.readers.common import filejournal as fj
from lastgood.readers.common.filejournal import REFUSED, FileJournal, Prepared
from lastgood.readers.common.filejournal import create_exclusive as _create_exclusive
from lastgood.readers.common.fsutil import open_fs
from lastgood.readers.native import format as nf

ENTRIES = f"{nf.JOURNAL}/entries"
LOCK = f"{nf.JOURNAL}/lock.json"
HEAD_FIELDS = ("step", "kind", "codec", "location", "checksum")


class NativeRecovery(FileJournal):
    """``RecoveryBackend`` for a native store (see ``lastgood.readers.journal``); the journal, its
    intent lock and the commit are :mod:`lastgood.readers.common.filejournal`'s."""

    entries_dir = ENTRIES
    lock_file = LOCK
    sweep_dirs = (nf.HEADS, nf.JOURNAL)

    def __init__(self, url: str, storage_options: Mapping[str, Any] | None = None) -> None:
        self.url = url
        self.storage_options = dict(storage_options or {})
        self.open_journal(*open_fs(url, storage_options))

    # ---- the head -----------------------------------------------------------------

    def head_record(self, run_id: str, namespace: str = "") -> dict[str, Any] | None:
        path = self._head_path(run_id, namespace)
        try:
            return jr.parse_entry(self.read_control(path))
        except FileNotFoundError:
            return None
        except REFUSED as exc:
            raise ReaderError(f"the head of run {run_id!r} cannot be read: {exc}") from None

    def head(self, run_id: str, namespace: str = "") -> str | None:
        record = self.head_record(run_id, namespace)
        return str(record["checkpoint_id"]) if record and record.get("checkpoint_id") else None

    def _head_path(self, run_id: str, namespace: str) -> str:
        suffix = f"@{nf.quote_name(namespace)}" if namespace else ""
        return self._path(f"{nf.HEADS}/{nf.quote_name(run_id)}{suffix}.json")

    # ---- the commit: move the head ------------------------------------------------------

    def prepare(self, change: jr.Change, head: str | None) -> Prepared:
        if not change.restore_from:
            return Prepared(head)
        return Prepared(change.restore_from, work={"target": dict(change.target or {}),
                                                   "run": [change.run_id, change.namespace]})

    def perform(self, intent: Mapping[str, Any], payload: Any) -> None:
        """Replace ``heads/<run>.json`` (temp + fsync + rename): the commit point."""
        entry, target = intent["entry"], dict(intent.get("target") or {})
        run_id, namespace = intent.get("run") or (entry["run_id"], entry["namespace"] or "")
        head = {"run_id": run_id, "namespace": namespace,
                "checkpoint_id": entry["new_head"],
                **{k: target.get(k) for k in HEAD_FIELDS},
                "updated_at": nf.iso(datetime.now(UTC)),
                "note": {"action_id": entry["id"], "action": entry["action"],
                         "operator": entry["operator"], "reason": entry["reason"],
                         "restored_from": entry["new_head"],
                         "restored_over": entry["previous_head"]}}
        fj.durable_write(self.fs, self._head_path(run_id, namespace), json.dumps(head, indent=1, default=str).encode())

    def took_effect(self, intent: Mapping[str, Any]) -> bool:
        entry = intent.get("entry") or {}
        if entry.get("new_head") == entry.get("previous_head"):
            return False  # marks only: the journal entry is the commit point
        run, ns = str(entry.get("run_id")), str(entry.get("namespace") or "")
        head = self.head_record(run, ns) or {}
        note = head.get("note") if isinstance(head.get("note"), dict) else {}
        return note.get("action_id") == entry.get("id")

    def resolve_other(self, lock: Mapping[str, Any]) -> bool:
        """A prune or its undo is completed, or dropped, by its own steps (lastgood.readers.native.pruning)."""
        if not (lock.get("prune") or lock.get("unprune")):
            return False
        from lastgood.readers.native.pruning import resolve_intent

        resolve_intent(self, lock)
        return True

    def _create(self, path: str, data: bytes) -> bool:
        return _create_exclusive(self.fs, path, data)  # looked up here: the attack tests replace it

    # ---- checks -------------------------------------------------------------------

    def check_head(self, run_id: str, namespace: str, target_id: str, expected_state: Any) -> jr.HeadCheck:
        """Load the head through ``NativeWriter.load_head_state`` and compare it."""
        from lastgood.readers.native.writer import NativeWriter

        try:
            writer = NativeWriter(self.url, self.storage_options, create=False)
            head = writer.head(run_id, namespace) or {}
            state = writer.load_head_state(run_id, namespace)
        except (DecodeError, LastgoodError, OSError) as exc:
            return jr.HeadCheck(False, f"the new head does not load: {exc}")
        if head.get("checkpoint_id") != target_id:
            return jr.HeadCheck(False, f"the head names {head.get('checkpoint_id')}, not {target_id}")
        if state != expected_state:
            return jr.HeadCheck(False, "NativeWriter.load_head_state differs from the target's state")
        return jr.HeadCheck(True, "NativeWriter.load_head_state returns the target's state")

    def side_effects(self, run_id: str, namespace: str, after: Sequence[str]) -> list[dict[str, Any]]:
        return []  # native events and metadata come from the index (lastgood.recovery.effects)
