"""Write capability of AutoGen state folders: a restore writes the target as the series' newest file.

AutoGen has no resume pointer: an app rebuilds its team (or agent) and calls
``load_state(json.load(file))`` on a file it chooses — in the layout this reader lists, the
newest of the series (``state-NNNN.json`` with the highest number), which is what the sample
app and its ``readback.py`` load. So restore (or rollback, or the undo of one) to file X = a new
file, named after the newest with the next number (``state-0006.json``), holding X's bytes
unchanged: an app that loads the newest file resumes from X, ``team.load_state`` validating it as
it validates any save. Nothing is deleted or rewritten; a rollback also marks the files after X
superseded in the journal. Only for apps that resume from the newest numbered file — an app that
loads a fixed name or keeps its own pointer is not moved by it (stop the app first, as for any
restore: a running app keeps its state in memory and its next save wins).

Journal: one file per entry under ``.lastgood/journal/`` in the store folder (hidden: not a
series), under the intent lock ``.lastgood/lock.json`` — :mod:`lastgood.readers.common.filejournal`'s
commit: the intent names the new file and the sha256 of the bytes it gets; creating that file
exclusively is the commit point of a restore. A lock left by a dead process is resolved by the next
action: its entry is written when the new file exists with those bytes (the restore happened), else
dropped. Writes need a local folder.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from typing import Any

from lastgood.errors import CheckpointNotFound, ConflictError, LastgoodError, ReaderError
from lastgood.readers import journal as jr
from lastgood.readers.autogen.layout import Series, checkpoint_id_of
from lastgood.readers.autogen.states import parse_state
from lastgood.readers.autogen.store import JOURNAL_DIR, LOCK, REFUSED, StateStore
from lastgood.readers.common.filejournal import FileJournal, Prepared


class StateFileRecovery(FileJournal):
    """``RecoveryBackend`` for a folder of AutoGen state files."""

    entries_dir = JOURNAL_DIR
    lock_file = LOCK
    local_only = ("restoring AutoGen state files needs a local folder (writes are made with exclusive "
                  "creates and renames)")

    def __init__(self, url: str, storage_options: Mapping[str, Any] | None = None) -> None:
        self.store = StateStore(url, storage_options)
        self.open_journal(self.store.fs, self.store.root)

    # ---- reading ------------------------------------------------------------------------------

    def _series(self, run_id: str) -> Series | None:
        self.store.parsed.clear()
        return self.store.run(run_id)

    def resolve_other(self, lock: Mapping[str, Any]) -> bool:
        """An interrupted prune or its undo: finished (:mod:`lastgood.readers.common.session_retention_files`)."""
        from lastgood.readers.common.session_retention_files import resolve_retention

        return resolve_retention(self, lock)

    def head(self, run_id: str, namespace: str = "") -> str | None:
        series = self._series(run_id)
        return series.files[-1].checkpoint_id if series and series.files else None

    def moved_message(self, change: jr.Change, head: str | None) -> str:
        return (f"the newest state file of {change.run_id!r} is {head}, not {change.expected_head}: the app "
                "saved meanwhile; nothing was written — re-plan")

    # ---- writing: a new newest file holding the target's bytes --------------------------------

    def prepare(self, change: jr.Change, head: str | None) -> Prepared:
        if not change.restore_from:
            return Prepared(head)
        target_path, new_path = self._paths(self._series(change.run_id), change)
        data = self.store.read(target_path)
        note = {"file": new_path, "copy_of_file": target_path,
                "resume": "an app that loads the newest state file of the series resumes from "
                          f"{change.restore_from} (team.load_state / agent.load_state)"}
        return Prepared(checkpoint_id_of(new_path), work={"file": new_path, "sha256": _sha256(data)},
                        note=note, payload=data)

    def perform(self, intent: Mapping[str, Any], payload: Any) -> None:
        new_path = str(intent["file"])
        if not self._create(self.store.path(new_path), payload):
            raise ConflictError(f"{new_path} appeared meanwhile (the app saved): nothing was written")

    def took_effect(self, intent: Mapping[str, Any]) -> bool:
        """The new file is there with the bytes the intent names (a file the app saved under the
        same name meanwhile is not the restore's)."""
        written = intent.get("file")
        if not isinstance(written, str):
            return False
        try:
            data = self.store.read(written)
        except (FileNotFoundError, *REFUSED):
            return False
        return "sha256" not in intent or _sha256(data) == intent["sha256"]

    def _paths(self, series: Series | None, change: jr.Change) -> tuple[str, str]:
        """(the target's file, the new file's name after the newest)."""
        target = next((f for f in (series.files if series else []) if f.checkpoint_id == change.restore_from), None)
        if target is None or series is None:
            raise CheckpointNotFound(f"no state file {change.restore_from} in run {change.run_id!r}")
        new_path = series.next_name()
        if new_path is None:
            raise ReaderError(f"the files of run {change.run_id!r} have no number in their names: there is no "
                              "'newest file' an app would load, so a restore cannot move what it resumes from")
        return target.path, new_path

    # ---- checks ---------------------------------------------------------------------------------

    def check_head(self, run_id: str, namespace: str, target_id: str, expected_state: Any) -> jr.HeadCheck:
        """The newest file (what an app that loads the latest save resumes from) holds the target's state."""
        try:
            series = self._series(run_id)
            files = {f.checkpoint_id: f for f in (series.files if series else [])}
            if not series or target_id not in files:
                return jr.HeadCheck(False, f"no state file {target_id} in run {run_id!r}")
            newest = series.files[-1]
            head, target = (parse_state(self.store.read(f.path)) for f in (newest, files[target_id]))
        except (LastgoodError, OSError) as exc:
            return jr.HeadCheck(False, f"the state files do not read back: {exc}")
        if head.value is None or head.value != target.value:
            return jr.HeadCheck(False, f"the newest file {newest.path} does not hold {target_id}'s state")
        return jr.HeadCheck(True, f"the newest file {newest.path} holds {target_id}'s state (what "
                                  "team.load_state(json.load(newest)) resumes from)")

    def side_effects(self, run_id: str, namespace: str, after: Sequence[str]) -> list[dict[str, Any]]:
        return []  # tool calls after the target come from the index's events


def _sha256(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()
