"""Write capability of Lightning checkpoint folders: move what ``fit(ckpt_path="last")`` resumes from.

restore X (and rollback, which also marks the later checkpoints superseded in the journal): the
run's last file — the one Lightning picks, else a new ``last.ckpt`` in the checkpoint folder — is
replaced by a copy of X: written beside it under a temporary name, synced, renamed over it (the
commit point; the copy's mtime is now, so it is also the newest last file Lightning sees). The file
it replaces is first kept in ``.lastgood/archive/<action>/<its path>`` (a link is kept as the link).
Undo puts the archived file back the same way, byte for byte (a link as the link); when there was
no last file before, undo archives the one the action wrote and removes it. The journal and the
intent lock are :mod:`lastgood.readers.training_folders.journal`'s.
"""

from __future__ import annotations

import os
import shutil
import uuid
from collections.abc import Mapping
from typing import Any

from lastgood.errors import CheckpointNotFound, DecodeError, LastgoodError, UsageError
from lastgood.readers import journal as jr
from lastgood.readers.lightning import layout as lay
from lastgood.readers.lightning.reader import LightningReader
from lastgood.readers.common.filejournal import sync_dir
from lastgood.readers.training_folders.journal import ARCHIVE, FolderRecovery


class LightningRecovery(FolderRecovery):
    """``RecoveryBackend`` of a Lightning store (see the module docstring)."""

    def _reader(self) -> LightningReader:
        return LightningReader(self.url, self.storage_options)

    def _run(self, reader: LightningReader, run_id: str) -> lay.Run:
        run = reader.runs().get(run_id)
        if run is None:
            raise CheckpointNotFound(f"no run {run_id!r} in this store")
        return run

    def head(self, run_id: str, namespace: str = "") -> str | None:
        with self._reader() as reader:
            run = reader.runs().get(run_id)
            return run.head if run else None

    # ---- the plan ------------------------------------------------------------------------------

    def moves_files(self, change: jr.Change) -> bool:
        """Also the undo of an action that wrote the run's first last file (no head before it)."""
        return bool(change.restore_from) or self._undoes_first_last(change)

    def _undoes_first_last(self, change: jr.Change) -> bool:
        undo_of = change.entry.get("undo_of")
        if not undo_of:
            return False
        original = next((e for e in self.journal_entries() if e.get("id") == undo_of), {})
        return original.get("previous_head") is None and original.get("new_head") is not None

    def plan(self, change: jr.Change, action_id: str) -> dict[str, Any]:
        with self._reader() as reader:
            run = self._run(reader, change.run_id)
            target = run.file_of(str(change.restore_from)) if change.restore_from else None
            if target is None and change.restore_from:
                raise CheckpointNotFound(f"no checkpoint {change.restore_from!r} in run {change.run_id!r}")
            if target is not None and str(target.facts.get("x", "")).startswith("unsafe"):
                # Lightning unpickles the file it resumes from: never one naming a global outside the allowlist
                raise UsageError(f"{target.name} can never be restored, forced or not: its pickle "
                                 f"{target.facts['x'].replace('unsafe: ', 'would import ')}; nothing was written")
            last = run.head_file.rel if run.head_file else f"{run.folder}/last.ckpt".lstrip("/")
            plan: dict[str, Any] = {"run_id": run.run_id, "last": last, "source": target.rel if target else None,
                                    "sig": target.sig if target else None,
                                    "archive": f"{ARCHIVE}/{action_id}/{last}" if self._exists(last) else None}
            undone = self._undone_archive(change, last)
            if undone is not None:
                plan["source"], plan["link"] = undone, self._link(undone)
                plan["sig"] = None if plan["link"] else lay.signature_of(self.folder, undone)
            elif self._undoes_first_last(change):
                plan["remove"] = True  # the undone action wrote the first last file: take it away
            return plan

    def _undone_archive(self, change: jr.Change, last: str) -> str | None:
        """Undoing an action that replaced ``last``: the file it archived (put back byte for byte)."""
        undo_of = change.entry.get("undo_of")
        if not undo_of:
            return None
        archived = f"{ARCHIVE}/{undo_of}/{last}"
        return archived if self._exists(archived) else None

    # ---- carrying it out (idempotent) ----------------------------------------------------------

    def carry_out(self, plan: Mapping[str, Any]) -> None:
        last, archive = str(plan["last"]), plan.get("archive")
        if archive and self._exists(last) and not self._exists(str(archive)):
            self._copy(last, str(archive), keep_link=True)
        if plan.get("remove"):
            if self._exists(last):
                self.folder.fs.rm_file(self.folder.path(last))
            return
        if not self._done(plan):
            self._replace(str(plan["source"]), last)

    def started(self, plan: Mapping[str, Any]) -> bool:
        return self._done(plan)

    def _done(self, plan: Mapping[str, Any]) -> bool:
        last = str(plan["last"])
        if plan.get("remove"):
            return not self._exists(last)
        if plan.get("link"):
            return self._link(last) == plan["link"]
        return self._exists(last) and self._link(last) is None and plan.get("sig") is not None \
            and lay.signature_of(self.folder, last) == plan["sig"]

    def _exists(self, rel: str) -> bool:
        return self.folder.entry(rel) is not None

    def _link(self, rel: str) -> str | None:
        if not self.folder.local:
            return None
        path = self.folder.path(rel)
        return os.readlink(path) if os.path.islink(path) else None

    def _replace(self, source: str, last: str) -> None:
        """``last`` becomes a copy of ``source`` (a link: the same link), in one rename."""
        if not self.folder.local:
            self.folder.fs.copy(self.folder.path(source), self.folder.path(last))
            return
        target = self.folder.path(last)
        tmp = os.path.join(os.path.dirname(target), f".tmp-{uuid.uuid4().hex}-{os.path.basename(target)}")
        self._write_copy(source, tmp)
        os.replace(tmp, target)
        sync_dir(os.path.dirname(target))

    def _copy(self, source: str, dest: str, keep_link: bool = False) -> None:
        if not self.folder.local:
            self.folder.fs.copy(self.folder.path(source), self.folder.path(dest))
            return
        target = self.folder.path(dest)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        tmp = f"{target}.tmp-{uuid.uuid4().hex}"
        self._write_copy(source, tmp, keep_link)
        os.replace(tmp, target)
        sync_dir(os.path.dirname(target))

    def _write_copy(self, source: str, tmp: str, keep_link: bool = True) -> None:
        """A synced copy of a store file at ``tmp`` (a link copied as the link)."""
        link = self._link(source)
        if link is not None and keep_link:
            os.symlink(link, tmp)
            return
        with self.folder.open(source) as src, open(tmp, "wb") as dst:
            shutil.copyfileobj(src, dst, 1 << 20)
            dst.flush()
            os.fsync(dst.fileno())

    # ---- the check ---------------------------------------------------------------------------

    def check_head(self, run_id: str, namespace: str, target_id: str, expected_state: Any) -> jr.HeadCheck:
        """Lightning's rule read back: the newest last file must hold the target's content."""
        try:
            with self._reader() as reader:
                run = self._run(reader, run_id)
                if run.head != target_id or run.head_file is None:
                    return jr.HeadCheck(False, f'fit(ckpt_path="last") would resume from {run.head}, not {target_id}')
                item = run.file_of(target_id)
                state = reader.load_state(reader.record_of(run, target_id, item or run.head_file, None))
        except (DecodeError, LastgoodError, OSError) as exc:
            return jr.HeadCheck(False, f"the new head does not load: {exc}")
        if expected_state is not None and state != expected_state:
            return jr.HeadCheck(False, f"{run.head_file.rel} does not hold the target's state")
        return jr.HeadCheck(True, f'fit(ckpt_path="last") resumes from {run.head_file.rel}, which holds '
                                  f"{target_id}'s state")
