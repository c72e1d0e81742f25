"""The scan of a store of step folders (DCP, Orbax): one token of every listed file's stamp; a
rescan with files only added lists just the runs that gained them; each run's folders in order,
chained through the ones the framework sees in place, its newest visible one the head."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from lastgood.readers.base import CheckpointRecord, HeadRecord, Scan
from lastgood.readers.training_folders import stamps
from lastgood.readers.training_folders.folder import Entry
from lastgood.readers.training_folders.moves import StepFolder, newest
from lastgood.readers.training_folders.tables import records_table

RecordOf = Callable[[StepFolder, str | None], CheckpointRecord]  # (folder, parent id) -> its record


def scan_folders(reader: str, since: str | None, folders: Sequence[StepFolder],
                 files: Mapping[str, list[Entry]], now: Mapping[str, Any], record_of: RecordOf) -> Scan:
    """The scan of ``folders`` (``files``: each one's entries by its rel; ``now``: the stamps the
    token keeps) by the reader named ``reader``, incremental from ``since`` when it allows."""
    token = stamps.encode(now, reader=reader)
    before = stamps.decode(since)
    runs = sorted({f.run_id for f in folders})
    full = True
    if before is not None and before.get("reader") == reader:
        change = stamps.delta(before["stamps"], now)
        if change.unchanged:
            return Scan(token, False, iter(()))
        if not change.changed and not change.removed:
            full = False
            runs = sorted({f.run_id for f in folders if any(e.rel in change.added for e in files.get(f.rel, []))})
    records: list[CheckpointRecord] = []
    heads: list[HeadRecord] = []
    for run in runs:
        listed = sorted((f for f in folders if f.run_id == run), key=lambda f: (f.key, f.action or ""))
        parent = None
        for folder in listed:
            records.append(record_of(folder, parent))
            parent = folder.checkpoint_id if folder.visible and folder.seen else parent
        head = newest(listed)
        if head is not None:
            heads.append(HeadRecord(run, head.checkpoint_id))
    return Scan(token, full, iter([records_table(records)]) if records else iter(()), heads=heads)
