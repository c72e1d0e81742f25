"""Write capability of Orbax CheckpointManager folders: restore X = move every later step folder of
the run aside into ``.lastgood/quarantine/<action>/`` — a folder whose name is no step to Orbax — so
``CheckpointManager(dir).latest_step()`` returns X; undo moves them back (renames: byte for byte).
Unfinished ``*.orbax-checkpoint-tmp*`` folders stay where they are (Orbax ignores them). See
:mod:`lastgood.readers.training_folders.moves`."""

from __future__ import annotations

from lastgood.readers.orbax.reader import OrbaxReader
from lastgood.readers.training_folders.moves import StepFolderRecovery


class OrbaxRecovery(StepFolderRecovery):
    reader_class = OrbaxReader
