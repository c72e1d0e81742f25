"""A folder reader's listing as an Arrow table, built from numpy buffers.

``readers.base.checkpoints_table`` builds its columns with ``pa.array``, which imports pandas the
first time (~0.4 s of a cold ``lastgood index`` of a Trainer folder, more than listing a thousand
checkpoints takes). The columns here come from ``readers.common.columns`` (buffers, no pandas): the
same table, value for value, metadata as the same JSON text.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from lastgood.readers.base import CheckpointRecord, epoch_micros, lazy_schema
from lastgood.readers.common.columns import int64_array, pa, strings_of, timestamps


def records_table(records: Sequence[CheckpointRecord]) -> Any:
    """``checkpoints_table(records)``, without importing pandas."""
    schema = lazy_schema("CHECKPOINT_SCHEMA")
    return pa.Table.from_arrays([_column(records, f.name, f.type) for f in schema], schema=schema)


def _column(records: Sequence[CheckpointRecord], name: str, kind: Any) -> Any:
    if name == "metadata":
        return strings_of([json.dumps(dict(r.metadata), default=str, sort_keys=True) for r in records])
    if name == "created_at":
        return timestamps([epoch_micros(r.created_at) for r in records])
    values = [getattr(r, name) for r in records]
    return int64_array(values) if pa.types.is_integer(kind) else strings_of(values)

