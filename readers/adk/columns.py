"""Arrow columns built from buffers, for listings of agent-session stores (ADK, Agno).

``pa.array`` of Python objects imports pandas on first use (~0.3 s cold); building an array from
its buffers does not, and is as fast. pyarrow and numpy are imported on first use: reading one
state never needs them.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import repeat
from operator import is_not
from typing import Any

from lastgood.readers.common.lazy import lazy_module

pa = lazy_module("pyarrow")
np = lazy_module("numpy")


def validity(values: Sequence[Any], n: int) -> Any:
    """A validity bitmap of ``values`` (None = null), or None when none is null."""
    if None not in values:
        return None
    valid = np.fromiter(map(is_not, values, repeat(None)), np.bool_, n)
    return pa.py_buffer(np.packbits(valid, bitorder="little"))


def string_array(values: Sequence[str | None]) -> Any:
    """A string array of ``values`` (None = null); values that are not text go through pa.array."""
    n = len(values)
    if n == 0:
        return pa.array([], pa.string())
    valid = validity(values, n)
    texts = [v if v is not None else "" for v in values] if valid is not None else values
    try:
        text = "".join(texts)
        data = text.encode()
    except (TypeError, UnicodeError):
        return pa.array(values, pa.string())
    if len(data) >= 2**31 - 1:
        return pa.array(values, pa.large_string()).cast(pa.string())
    source = texts if len(data) == len(text) else (t.encode() for t in texts)
    offsets = np.zeros(n + 1, np.int32)
    np.cumsum(np.fromiter(map(len, source), np.int64, n), out=offsets[1:])
    return pa.Array.from_buffers(pa.string(), n, [valid, pa.py_buffer(offsets), pa.py_buffer(data)])


def int64_array(values: Sequence[int | None]) -> Any:
    """An int64 array of ``values`` (None = null)."""
    n = len(values)
    valid = validity(values, n)
    numbers = [0 if v is None else v for v in values] if valid is not None else values
    data = np.fromiter(numbers, np.int64, n)
    return pa.Array.from_buffers(pa.int64(), n, [valid, pa.py_buffer(data)])


def timestamp_array(micros: Sequence[int | None]) -> Any:
    """A UTC microsecond timestamp array of epoch microseconds (None = null)."""
    ints = int64_array(micros)
    return pa.Array.from_buffers(pa.timestamp("us", tz="UTC"), len(micros), ints.buffers())


def constant_strings(value: str | None, n: int) -> Any:
    """``value`` repeated ``n`` times (None: all null)."""
    if value is None:
        return pa.nulls(n, pa.string())
    data = value.encode()
    offsets = np.arange(n + 1, dtype=np.int32) * len(data)
    return pa.Array.from_buffers(pa.string(), n, [None, pa.py_buffer(offsets), pa.py_buffer(data * n)])


def table(columns: dict[str, Any], schema: Any) -> Any:
    """A table of ``schema`` from ``columns`` (name -> array), missing ones null."""
    n = max((len(c) for c in columns.values()), default=0)
    arrays = [columns.get(f.name) if f.name in columns else pa.nulls(n, f.type) for f in schema]
    return pa.Table.from_arrays(arrays, schema=schema)
