"""Write actions on DeepSpeed save folders: rewrite ``latest``.

``engine.load_checkpoint(dir, tag=None)`` resumes from the tag in ``dir/latest``. A restore or a
rollback to tag X replaces ``latest`` atomically (a temp file beside it, then a rename) with ``X``
— no newline, as DeepSpeed writes it; no tag folder is moved or deleted (a rollback also marks
the later tags superseded in the journal). Undo writes the previous tag back. The journal is
``.lastgood/journal/`` at the store root (:mod:`lastgood.readers.modelfiles.filejournal`). Note:
training resumed from X that saves a tag that already exists (``global_step15`` again) overwrites
that folder's files, as DeepSpeed always does.
"""

from __future__ import annotations

import json
from typing import Any

from lastgood.errors import DecodeError, LastgoodError
from lastgood.readers import journal as jr
from lastgood.readers.deepspeed import layout
from lastgood.readers.deepspeed.layout import Run
from lastgood.readers.modelfiles.filejournal import Operation, OperationsJournal
from lastgood.readers.modelfiles.fsio import join


class DeepSpeedRecovery(OperationsJournal):
    """``RecoveryBackend`` of the ``deepspeed`` reader."""

    def _reader(self) -> Any:
        from lastgood.readers.deepspeed.reader import DeepSpeedReader

        return DeepSpeedReader(self.url, self.storage_options)

    def _run(self, run_id: str) -> Run | None:
        return self._reader().runs(fresh=True).get(run_id)

    def head(self, run_id: str, namespace: str = "") -> str | None:
        run = self._run(run_id)
        return run.head.name if run is not None and run.head is not None else None

    def operations(self, change: jr.Change) -> list[Operation]:
        run = self._run(change.run_id)
        tag = run.tag(change.restore_from) if run is not None else None
        if run is None or tag is None:
            raise LastgoodError(f"tag {change.restore_from} of run {change.run_id!r} is not in the folder")
        if not tag.complete:
            raise LastgoodError(f"tag {tag.name} has no model states: load_checkpoint would fail on it")
        return [{"op": "write", "path": join(run.rel, layout.LATEST), "old": run.latest, "new": tag.name}]

    def check_head(self, run_id: str, namespace: str, target_id: str, expected_state: Any) -> jr.HeadCheck:
        """Read ``latest`` back as DeepSpeed does and load the tag's state with the reader
        (DeepSpeed's own resolution runs in the round-trip suite)."""
        reader = self._reader()
        run = reader.runs(fresh=True).get(run_id)
        if run is None or run.latest != target_id or run.head is None:
            return jr.HeadCheck(False, f"latest names {run.latest if run else None!r}, not {target_id}")
        if expected_state is None:
            return jr.HeadCheck(True, f"latest names {target_id}")
        from lastgood.readers.base import CheckpointRecord

        record = CheckpointRecord(run_id=run_id, checkpoint_id=target_id, location=run.head.rel)
        try:
            state = reader.load_state(record)
        except DecodeError as exc:
            return jr.HeadCheck(False, f"the new head does not load: {exc}")
        if json.dumps(state, sort_keys=True, default=str) != json.dumps(expected_state, sort_keys=True, default=str):
            return jr.HeadCheck(False, f"{run.head.rel} differs from the target's state")
        return jr.HeadCheck(True, f"latest names {target_id}, whose state is the target's")
