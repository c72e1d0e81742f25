"""Write capability of DCP step folders: restore X = move every later step folder of the run aside
into ``.lastgood/quarantine/<action>/`` (DCP has no "latest" pointer; a script that resumes from the
newest step folder then picks X); undo moves them back (renames: byte for byte). See
:mod:`lastgood.readers.training_folders.moves`."""

from __future__ import annotations

from typing import Any

from lastgood.errors import UsageError
from lastgood.readers.dcp.reader import DcpReader
from lastgood.readers.training_folders.moves import StepFolder, StepFolderRecovery


class DcpRecovery(StepFolderRecovery):
    reader_class = DcpReader

    def refuse_target(self, reader: Any, target: StepFolder) -> None:
        """DCP unpickles ``.metadata`` and its non-tensor items when it loads: a pickle naming a
        global outside the allowlist must never become what training resumes from."""
        unsafe = reader.unsafe_reason(reader.record_of(target))
        if unsafe:
            raise UsageError(f"{target.checkpoint_id} can never be restored, forced or not: {unsafe}; "
                             "nothing was written")
