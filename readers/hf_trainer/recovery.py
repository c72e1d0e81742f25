"""Write actions on Trainer output folders: the head is a pointer here.

``Trainer.train(resume_from_checkpoint=True)`` resumes from
``transformers.trainer_utils.get_last_checkpoint(output_dir)``: the ``checkpoint-N`` child with
the highest N, nothing else consulted. So making checkpoint X the head means the later
``checkpoint-M`` folders (M > X) must leave the output folder: each is renamed (one atomic
rename per folder, on the same filesystem) into

    <output_dir>/.lastgood/quarantine/<action id>/checkpoint-M

which ``get_last_checkpoint`` never lists (nor Trainer's rotation, which globs
``checkpoint-*`` children). A restore and a rollback do the same moves (a restore is
non-destructive too: nothing is deleted); a rollback also marks the moved ones superseded in
the journal. Restoring a checkpoint that was moved aside (an undo) renames it back, with the
ones its action moved below it, after moving aside whatever live folder now has its step or a
higher one. The journal is ``.lastgood/journal/`` at the store root
(:mod:`lastgood.readers.modelfiles.filejournal`: intent lock, one file per entry, an interrupted
action finished by the next one). Dry runs list the moves (the plan's superseded checkpoints).
On object stores a move copies every object, then deletes.
"""

from __future__ import annotations

import json
from typing import Any

from lastgood.errors import DecodeError, LastgoodError
from lastgood.readers import journal as jr
from lastgood.readers.hf_trainer.layout import Found, Run
from lastgood.readers.modelfiles.filejournal import QUARANTINE, Operation, OperationsJournal
from lastgood.readers.modelfiles.fsio import join


class TrainerRecovery(OperationsJournal):
    """``RecoveryBackend`` of the ``hf-trainer`` reader."""

    def _reader(self) -> Any:
        from lastgood.readers.hf_trainer.reader import HfTrainerReader

        return HfTrainerReader(self.url, self.storage_options)

    def _run(self, run_id: str) -> Run | None:
        return self._reader().runs(fresh=True).get(run_id)

    def head(self, run_id: str, namespace: str = "") -> str | None:
        run = self._run(run_id)
        head = run.head if run is not None else None
        return head.checkpoint_id if head is not None else None

    def operations(self, change: jr.Change) -> list[Operation]:
        run = self._run(change.run_id)
        target = run.by_id(str(change.restore_from)) if run is not None else None
        if run is None or target is None:
            raise LastgoodError(f"checkpoint {change.restore_from} of run {change.run_id!r} is not in the folder")
        action = str(change.entry.get("id"))
        leaving = sorted((c for c in run.live if c.step > target.step or (c.step == target.step and c is not target)),
                         key=lambda c: -c.step)
        ops = [_move(c.rel, join(run.rel, QUARANTINE, action, c.name)) for c in leaving]
        if target.moved_by is not None:
            ops += [_move(c.rel, join(run.rel, c.name)) for c in _coming_back(run, target, leaving)]
        return ops

    def check_head(self, run_id: str, namespace: str, target_id: str, expected_state: Any) -> jr.HeadCheck:
        """Read back with the reader: the highest live ``checkpoint-N`` is the target and its
        state is the target's (``get_last_checkpoint`` itself runs in the round-trip suite)."""
        reader = self._reader()
        run = reader.runs(fresh=True).get(run_id)
        head = run.head if run is not None else None
        if head is None or head.checkpoint_id != target_id:
            return jr.HeadCheck(False, f"the highest checkpoint-N is {head.name if head else 'none'}, not {target_id}")
        if expected_state is None:
            return jr.HeadCheck(True, f"get_last_checkpoint picks {head.rel}")
        try:
            record = next(r for r in _records(reader, run_id) if r.checkpoint_id == target_id)
            state = reader.load_state(record)
        except (DecodeError, StopIteration) as exc:
            return jr.HeadCheck(False, f"the new head does not load: {exc}")
        if json.dumps(state, sort_keys=True, default=str) != json.dumps(expected_state, sort_keys=True, default=str):
            return jr.HeadCheck(False, f"{head.rel} differs from the target's state")
        return jr.HeadCheck(True, f"get_last_checkpoint picks {head.rel}, whose state is the target's")


def _move(source: str, target: str) -> Operation:
    return {"op": "move", "from": source, "to": target}


def _coming_back(run: Run, target: Found, leaving: list[Found]) -> list[Found]:
    """The target and the folders its action moved below it, lowest first, where no live
    folder (staying) has the name."""
    staying = {c.name for c in run.live if c not in leaving}
    back = [c for c in run.checkpoints
            if c.moved_by == target.moved_by and c.step <= target.step and c.name not in staying]
    return sorted(back, key=lambda c: c.step)


def _records(reader: Any, run_id: str) -> list[Any]:
    scan = reader.scan()
    from lastgood.readers.base import as_table, record_from_row

    return [record_from_row(row) for batch in scan.checkpoints for row in as_table(batch).to_pylist()
            if row["run_id"] == run_id]
