"""Retention of AutoGen state folders (one series of ``state-NNNN.json`` files per team or agent).

What a prune removes is whole stale series (:mod:`lastgood.readers.common.session_retention_files`):
every file of the series, archived byte for byte into the native archive, then removed under the
folder's journal lock (``.lastgood/lock.json``, the journal its restores use), with the ``prune``
entry; a series that gained a file or whose files changed since they were archived stays. The
files of a series are its turn-by-turn history (what the Timeline and restores read), so a series is
kept whole like a session: each file needs the one numbered before it (a restore's file names its
target as parent, but the files between stay part of the series). The undo writes each file back byte for byte, so the app that loads the
newest file of the series (``team.load_state(json.load(…))``) resumes as before.
"""

from __future__ import annotations

from typing import Any

from lastgood.readers.common.session_retention import HISTORY_RULE
from lastgood.readers.common.session_retention_files import FileSessionRetention


class StateSeriesRetention(FileSessionRetention):
    """``RetentionBackend`` of the ``autogen`` reader."""

    reader_name = "autogen"
    reader_class = "lastgood.readers.autogen.reader:AutoGenReader"
    recovery_class = "lastgood.readers.autogen.recovery:StateFileRecovery"

    def session_files(self, recovery: Any, run_id: str) -> list[str]:
        recovery.store.parsed.clear()
        series = recovery.store.run(run_id)
        return [f.path for f in series.files] if series is not None else []

    def session_label(self, run_id: str) -> str:
        return f"state series {run_id!r}"

    def dependencies(self, rows: Any) -> Any:
        """Each file of a series needs the one numbered before it (rule ``session-history``)."""
        from lastgood.readers.autogen.layout import checkpoint_id_of
        from lastgood.readers.langgraph.retention_rules import edges_table

        wanted = {(r["run_id"], r["checkpoint_id"]) for r in rows.select(["run_id", "checkpoint_id"]).to_pylist()}
        edges = []
        for series in self.recovery().store.series():
            ids = [checkpoint_id_of(f.path) for f in series.files]
            edges += [(series.run_id, "", cid, "", before, HISTORY_RULE) for before, cid in zip(ids, ids[1:])
                      if (series.run_id, cid) in wanted]
        return edges_table(edges)
