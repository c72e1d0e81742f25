"""Retention of Trainer output folders: prune = move checkpoint folders into the archive, by rename.

A pruned ``checkpoint-N`` folder is renamed (one atomic rename on a local filesystem) into

    <output folder>/.lastgood/archive/<action id>/<its path>

which neither ``get_last_checkpoint`` nor Trainer's rotation (they list the output folder's own
``checkpoint-N`` children) ever sees. "Archive before delete" is the rename itself: the bytes are
kept, so the space comes back only when the archive folder is removed (after which the prune can no
longer be undone). The undo renames each folder back, byte for byte.

The prune and its undo are actions of the store's recovery journal
(:mod:`lastgood.readers.modelfiles.filejournal`): their moves are the intent's operations, written
to the lock before the first rename; a kill at any moment leaves each folder in the output folder
or in the archive, and the intent says which; the next action (or :meth:`TrainerRetention.resume`)
rolls it forward and writes its journal entry. The mechanics are the training stores' shared ones
(:class:`lastgood.readers.training_folders.retention.FolderRetention`).

Kept beyond the core's rules (heads, last good, pins, journaled targets): the Trainer's
``best_model_checkpoint`` (the newest ``trainer_state.json``): every checkpoint of the run needs it
(a dependency edge), since Trainer's rotation and ``load_best_model_at_end`` rely on it; and the
folders a restore moved aside (an undo needs them).
"""

from __future__ import annotations

from typing import Any, ClassVar

from lastgood.readers.hf_trainer.layout import Run
from lastgood.readers.hf_trainer.recovery import TrainerRecovery
from lastgood.readers.training_folders.journal import ARCHIVE
from lastgood.readers.training_folders.retention import FolderRetention, Layout, Piece, archive_path

__all__ = ["ARCHIVE", "BEST_RULE", "TrainerRetention", "archive_path"]

BEST_RULE = "best-model-checkpoint"  # trainer_state.json's best_model_checkpoint
MOVED_RULE = "moved aside by {}"


class TrainerRetention(FolderRetention):
    """``RetentionBackend`` of the ``hf-trainer`` reader (see the module docstring)."""

    reader_name = "hf-trainer"
    recovery_class: ClassVar[Any] = TrainerRecovery
    where = "output folder"

    def _reader(self) -> Any:
        return self.recovery._reader()

    def _runs(self) -> dict[str, Run]:
        return self._reader().runs(fresh=True)

    def best_checkpoints(self) -> dict[str, str]:
        """Each run's ``best_model_checkpoint`` (its checkpoint id), where the newest state names one."""
        reader = self._reader()
        out = {}
        for run_id, run in reader.runs(fresh=True).items():
            best = reader._best(run)
            if best:
                out[run_id] = best
        return out

    def layout(self) -> Layout:
        out = Layout()
        for run_id, run in self._runs().items():
            for c in run.checkpoints:
                out.pieces.append(Piece(run_id, c.checkpoint_id, c.rel, c.size, c.complete,
                                        "quarantine" if c.moved_by else "checkpoints"))
                if c.moved_by:
                    out.kept[(run_id, c.checkpoint_id)] = MOVED_RULE.format(c.moved_by)
            if run.head is not None:
                out.heads[run_id] = run.head.checkpoint_id
        for run_id, best in self.best_checkpoints().items():
            out.kept.setdefault((run_id, best), BEST_RULE)
        return out

    def files_at(self, rel: str) -> dict[str, int]:
        """A checkpoint folder's files and those one folder down (the reader's view), with sizes."""
        from lastgood.readers.hf_trainer.layout import files_of

        folder = self._reader().folder
        folder.forget()
        return {name: e.size for name, e in sorted(files_of(folder, rel).items())}
