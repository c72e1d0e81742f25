"""Retention of DCP step folders: a pruned step folder is renamed into ``.lastgood/archive/<action>/``
(DCP never lists it: a script resumes from the step folders it sees). The newest visible step folder
is the head; folders a restore moved aside are kept (an undo needs them); a folder without
``.metadata`` (an unfinished save) is never touched. See
:mod:`lastgood.readers.training_folders.retention`."""

from __future__ import annotations

from typing import Any, ClassVar

from lastgood.readers.dcp.reader import DcpReader
from lastgood.readers.dcp.recovery import DcpRecovery
from lastgood.readers.training_folders.retention import StepFolderRetention


class DcpRetention(StepFolderRetention):
    reader_name = "torch-dcp"
    recovery_class: ClassVar[Any] = DcpRecovery
    reader_class: ClassVar[Any] = DcpReader
