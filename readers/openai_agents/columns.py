"""Arrow columns built from buffers: ``pa.array`` of Python objects imports pandas on first use
(~0.3-0.7 s of a command that never needs it), building from numpy buffers does not and is as fast.
Without numpy, ``pa.array`` is the fallback."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from lastgood.readers.common.columns import validity
from lastgood.readers.common.lazy import installed, lazy_module

pa = lazy_module("pyarrow")
np = lazy_module("numpy") if installed("numpy") else None


def strings(values: Sequence[str | None]) -> Any:
    """A string array (None = null)."""
    n = len(values)
    if np is None or n == 0:
        return pa.array(values, pa.string())
    valid = None
    if None in values:
        valid = validity(values, n)
        values = ["" if v is None else v for v in values]
    text = "".join(values)
    data = text.encode("utf-8", "surrogatepass")
    if len(data) >= 2**31 - 1:  # past 32-bit offsets: let Arrow chunk it
        return pa.array(values, pa.string())
    lengths = np.fromiter(map(len, values if len(data) == len(text) else
                              (v.encode("utf-8", "surrogatepass") for v in values)), np.int64, n)
    offsets = np.zeros(n + 1, np.int32)
    np.cumsum(lengths, out=offsets[1:])
    return pa.Array.from_buffers(pa.string(), n, [valid, pa.py_buffer(offsets), pa.py_buffer(data)])


def ints(values: Sequence[int | None], type_: Any = None) -> Any:
    """An int64 array (or ``type_`` of the same width, e.g. a UTC timestamp in microseconds)."""
    type_ = type_ if type_ is not None else pa.int64()
    n = len(values)
    if np is None or n == 0:
        return pa.array(values, pa.int64()).view(type_) if n else pa.array([], type_)
    valid = None
    if None in values:
        valid = validity(values, n)
        values = [0 if v is None else v for v in values]
    data = np.fromiter(values, np.int64, n)
    return pa.Array.from_buffers(type_, n, [valid, pa.py_buffer(data)])


def constant(value: str | None, n: int) -> Any:
    """``value`` repeated ``n`` times (None: all null)."""
    if value is None:
        return pa.nulls(n, pa.string())
    if np is None:
        return pa.array([value] * n, pa.string())
    data = value.encode()
    offsets = np.arange(n + 1, dtype=np.int32) * len(data)
    return pa.Array.from_buffers(pa.string(), n, [None, pa.py_buffer(offsets), pa.py_buffer(data * n)])


def table(columns: dict[str, Any], schema: Any) -> Any:
    """A table in ``schema``'s column order from arrays by name."""
    return pa.Table.from_arrays([columns[f.name] for f in schema], schema=schema)
