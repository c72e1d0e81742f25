"""Retention of DeepSpeed save folders: a pruned tag folder (``global_stepN/``) is renamed into
``.lastgood/archive/<action>/`` (``load_checkpoint`` only opens the tag ``latest`` names). The tag
in ``latest`` is the head, always kept; so is the one ``latest_universal`` names (what an engine
loading universal checkpoints resumes from). The journal is the store's
:mod:`lastgood.readers.modelfiles.filejournal`; the mechanics are
:mod:`lastgood.readers.training_folders.retention`'s."""

from __future__ import annotations

from typing import Any, ClassVar

from lastgood.readers.deepspeed import layout as lay
from lastgood.readers.deepspeed.recovery import DeepSpeedRecovery
from lastgood.readers.modelfiles.fsio import join
from lastgood.readers.training_folders.retention import FolderRetention, Layout, Piece

UNIVERSAL_RULE = "named by latest_universal"


class DeepSpeedRetention(FolderRetention):
    reader_name = "deepspeed"
    recovery_class: ClassVar[Any] = DeepSpeedRecovery
    noun = "tag folders"

    def layout(self) -> Layout:
        reader = self.recovery._reader()
        out = Layout()
        for run_id, run in reader.runs(fresh=True).items():
            out.pieces += [Piece(run_id, t.name, t.rel, t.size, t.complete) for t in run.tags]
            if run.head is not None:
                out.heads[run_id] = run.head.name
            universal = lay.read_pointer(reader.folder, join(run.rel, lay.LATEST_UNIVERSAL))
            if universal and run.tag(universal) is not None:
                out.kept[(run_id, universal)] = UNIVERSAL_RULE
        return out
