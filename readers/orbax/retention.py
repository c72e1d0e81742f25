"""Retention of Orbax CheckpointManager folders: a pruned step folder is renamed into
``.lastgood/archive/<action>/`` — no step to Orbax, so ``CheckpointManager(dir).all_steps()`` no
longer lists it and ``latest_step()`` is unchanged (the head, the highest step, is always kept).
Folders a restore moved aside are kept (an undo needs them); unfinished ``*.orbax-checkpoint-tmp*``
folders are not checkpoints and are never touched. See
:mod:`lastgood.readers.training_folders.retention`."""

from __future__ import annotations

from typing import Any, ClassVar

from lastgood.readers.orbax.reader import OrbaxReader
from lastgood.readers.orbax.recovery import OrbaxRecovery
from lastgood.readers.training_folders.retention import StepFolderRetention


class OrbaxRetention(StepFolderRetention):
    reader_name = "orbax"
    recovery_class: ClassVar[Any] = OrbaxRecovery
    reader_class: ClassVar[Any] = OrbaxReader
