"""A table as a file: CSV, Parquet or JSON bytes of a DataFrame or an Arrow table (the pages' export
buttons; what they export was redacted when it was read, so the files are too).

Nested or mixed values (dicts, lists) become JSON text in CSV and Parquet; JSON keeps them as
they are. Times are written in UTC (ISO 8601 in JSON).
"""

from __future__ import annotations

import io
import json
import re
from dataclasses import dataclass
from datetime import date, datetime
from typing import Any

import pyarrow as pa


@dataclass(frozen=True)
class Format:
    name: str
    label: str
    suffix: str
    mime: str


FORMATS = (Format("csv", "CSV", "csv", "text/csv"),
           Format("parquet", "Parquet", "parquet", "application/vnd.apache.parquet"),
           Format("json", "JSON", "json", "application/json"))
BY_NAME = {f.name: f for f in FORMATS}


def file_stem(name: str) -> str:
    """``lastgood-<name>`` with only letters, digits, ``-``, ``_`` and ``.`` (a safe file name)."""
    cleaned = re.sub(r"[^A-Za-z0-9._-]+", "-", name).strip("-.") or "table"
    return cleaned if cleaned.startswith("lastgood") else f"lastgood-{cleaned}"


def encode(frame: Any, fmt: str) -> bytes:
    """``frame`` (a pandas DataFrame or an Arrow table) as ``fmt`` ("csv", "parquet", "json")."""
    table = as_arrow(frame)
    if fmt == "json":
        return json.dumps(table.to_pylist(), ensure_ascii=False, default=_json_default, indent=1).encode("utf-8")
    flat = _flattened(table)
    sink = io.BytesIO()
    if fmt == "csv":
        import pyarrow.csv as pcsv

        pcsv.write_csv(flat, sink)
    elif fmt == "parquet":
        import pyarrow.parquet as pq

        pq.write_table(flat, sink)
    else:
        raise ValueError(f"unknown export format {fmt!r}")
    return sink.getvalue()


def as_arrow(frame: Any) -> pa.Table:
    """``frame`` as an Arrow table; a column of mixed Python values (``1`` beside ``"two"``) as text."""
    if isinstance(frame, pa.Table):
        return frame
    frame = frame.reset_index(drop=True)
    try:
        return pa.Table.from_pandas(frame, preserve_index=False)
    except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError):
        pass
    fixed = frame.copy()
    for column in fixed.columns:
        if fixed[column].dtype == object:
            try:
                pa.array(fixed[column], from_pandas=True)
            except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError):
                fixed[column] = [None if v is None else _text(v) for v in fixed[column]]
    return pa.Table.from_pandas(fixed, preserve_index=False)


def _flattened(table: pa.Table) -> pa.Table:
    """Nested columns as JSON text (CSV has no nesting; Parquet could, but a mixed column cannot)."""
    columns = [pa.array([None if v is None else _text(v) for v in col.to_pylist()], pa.string())
               if pa.types.is_nested(col.type) or pa.types.is_null(col.type) else col
               for col in table.columns]
    return pa.Table.from_arrays(columns, names=table.column_names)


def _text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=_json_default)


def _json_default(value: Any) -> Any:
    if isinstance(value, (datetime, date)):
        return value.isoformat()
    if isinstance(value, bytes):
        return f"<{len(value)} bytes>"
    return str(value)
