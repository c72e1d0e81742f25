"""Retention of pydantic-graph run folders (``FileStatePersistence``: one ``<run>.json`` per run).

What a prune removes is whole stale runs (:mod:`lastgood.readers.common.session_retention_files`):
each run file, archived byte for byte into the native archive, then removed under the folder's
journal lock (``.lastgood/journal/lock.json``, the journal its restores use), with the ``prune``
entry; a run file written to since it was archived stays. Each snapshot of a run file is the state
after one more node, so a run is kept whole like a session. The copies of run files that restores
archived (``.lastgood/archive/``) are Lastgood's and stay. The undo writes each file back byte for
byte, so ``FileStatePersistence(path).load_all()`` returns the same snapshots as before.
"""

from __future__ import annotations

from typing import Any

from lastgood.readers.common.session_retention_files import FileSessionRetention


class RunFileRetention(FileSessionRetention):
    """``RetentionBackend`` of the ``pydantic-graph`` reader."""

    reader_name = "pydantic-graph"
    reader_class = "lastgood.readers.pydantic_graph.reader:PydanticGraphReader"
    recovery_class = "lastgood.readers.pydantic_graph.recovery:PydanticGraphRecovery"

    def session_files(self, recovery: Any, run_id: str) -> list[str]:
        name = f"{run_id}.json"
        if "/" in run_id or run_id.startswith(".") or not recovery.fs.exists(recovery._path(name)):
            return []
        return [name]

    def session_label(self, run_id: str) -> str:
        return f"run file {run_id}.json"
