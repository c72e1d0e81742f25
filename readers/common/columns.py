"""Arrow columns built from buffers, and the common record tables built from plain lists.

``pa.array``/``pa.scalar`` of Python objects import pandas on first use (~0.3 s cold, whatever the
input); building from numpy buffers does not, and is as fast. Without numpy, ``pa.array`` is the
fallback. Every format's listing uses these (LangGraph's column-wise listings; ``checkpoints_table``
and ``events_table`` for the formats that list plain lists: CrewAI, pydantic-graph).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from itertools import repeat
from operator import is_not
from typing import Any

from lastgood.readers import base as readers_base
from lastgood.readers.base import EventRecord, epoch_micros
from lastgood.readers.common.lazy import installed, lazy_module

pa = lazy_module("pyarrow")
np = lazy_module("numpy") if installed("numpy") else None  # numpy comes with pandas


def string_array(values: Sequence[Any], binary: bool = False) -> pa.Array:
    """A string (or binary) array of ``values`` (str, or bytes when ``binary``; None = null)."""
    n = len(values)
    if np is None or n == 0:
        return pa.array(values, pa.binary() if binary else pa.string())
    try:
        return _string_buffers(values, n, binary)
    except (TypeError, UnicodeError, OverflowError):  # odd values: let pa.array judge them
        return pa.array(values, pa.binary() if binary else pa.string())


def _string_buffers(values: Sequence[Any], n: int, binary: bool) -> pa.Array:
    valid = None
    if None in values:
        valid = validity(values, n)
        empty = b"" if binary else ""
        values = [empty if v is None else v for v in values]
    if binary:
        data = b"".join(values)
        lengths = np.fromiter(map(len, values), np.int64, n)
    else:
        text = "".join(values)
        data = text.encode()
        ascii_only = len(data) == len(text)
        lengths = np.fromiter(map(len, values if ascii_only else (v.encode() for v in values)), np.int64, n)
    if len(data) >= 2**31 - 1:
        raise OverflowError("too large for 32-bit offsets")
    offsets = np.zeros(n + 1, np.int32)
    np.cumsum(lengths, out=offsets[1:])
    buffers = [valid, pa.py_buffer(offsets), pa.py_buffer(data)]
    return pa.Array.from_buffers(pa.binary() if binary else pa.string(), n, buffers)


def checked_strings(values: Sequence[Any], nullable: bool, limit: int, null: str = "none") -> pa.Array | None:
    """A string array of ``values`` when every one is a str (or None when ``nullable``) of at
    most ``limit`` characters without NUL, and not empty unless ``nullable``; None otherwise.
    The checks ride on the join that builds the array (C speed, no per-value Python).
    ``null``: "none" keeps None as null, "empty" stores None as '', "falsy" makes None and ''
    null (a LangGraph parent id)."""
    n = len(values)
    if np is None or n == 0:
        return None
    has_none = None in values
    if has_none and not nullable:
        return None
    texts = [v if v is not None else "" for v in values] if has_none else values
    try:
        text = "".join(texts)
        data = text.encode()
    except (TypeError, UnicodeError):  # another type, or a lone surrogate
        return None
    chars = np.fromiter(map(len, texts), np.int64, n)
    if "\x00" in text or int(chars.max()) > limit or len(data) >= 2**31 - 1:
        return None
    empty = not chars.all()
    if empty and not nullable:
        return None
    lengths = chars if len(data) == len(text) else np.fromiter((len(v.encode()) for v in texts), np.int64, n)
    offsets = np.zeros(n + 1, np.int32)
    np.cumsum(lengths, out=offsets[1:])
    valid = None
    if null == "falsy" and empty:
        valid = pa.py_buffer(np.packbits(chars > 0, bitorder="little"))
    elif null == "none" and has_none:
        valid = validity(values, n)
    return pa.Array.from_buffers(pa.string(), n, [valid, pa.py_buffer(offsets), pa.py_buffer(data)])


def utf8_view(binary: pa.Array) -> pa.Array:
    """A binary array as a string array over the same buffers, its UTF-8 checked
    (ArrowInvalid when not); unlike ``cast`` it does not import pyarrow.compute (~0.1 s)."""
    text = binary.view(pa.string())
    text.validate(full=True)
    return text


def int64_array(values: Sequence[int | None]) -> pa.Array:
    """An int64 array of ``values`` (None = null)."""
    n = len(values)
    if np is None or n == 0:
        return pa.array(values, pa.int64())
    valid = None
    if None in values:
        valid = validity(values, n)
        values = [0 if v is None else v for v in values]
    try:
        data = np.fromiter(values, np.int64, n)
    except (TypeError, ValueError, OverflowError):
        return pa.array(values, pa.int64())
    return pa.Array.from_buffers(pa.int64(), n, [valid, pa.py_buffer(data)])


def constant_strings(value: str, n: int) -> pa.Array:
    """``value`` repeated ``n`` times."""
    if np is None:
        return pa.repeat(pa.scalar(value, pa.string()), n)
    data = value.encode()
    offsets = np.arange(n + 1, dtype=np.int32) * len(data)
    return pa.Array.from_buffers(pa.string(), n, [None, pa.py_buffer(offsets), pa.py_buffer(data * n)])


def validity(values: Sequence[Any], n: int) -> pa.Buffer:
    """A validity bitmap of ``values`` (None = null)."""
    valid = np.fromiter(map(is_not, values, repeat(None)), np.bool_, n)  # C-level calls, no generator
    return pa.py_buffer(np.packbits(valid, bitorder="little"))


# --- the common record tables from plain lists ------------------------------------


def timestamps(micros: Sequence[int | None]) -> Any:
    return int64_array(micros).view(pa.timestamp("us", tz="UTC"))


def strings_of(values: Sequence[Any]) -> Any:
    """A string array; a column of one repeated value (a run's id, "ok", no reason) is built
    without joining its values."""
    values = list(values)
    n = len(values)
    if n and values.count(values[0]) == n:
        return pa.nulls(n, pa.string()) if values[0] is None else constant_strings(values[0], n)
    return string_array(values)


def checkpoints_table(columns: Mapping[str, Sequence[Any]]) -> Any:
    """A ``CHECKPOINT_SCHEMA`` table from lists: run_id, checkpoint_id, parent_id, step, micros,
    trigger, status, status_reason, size_bytes, location, metadata (optional: agent, namespace)."""
    n = len(columns["checkpoint_id"])
    strings = {name: strings_of(columns[name]) for name in
               ("run_id", "checkpoint_id", "parent_id", "trigger", "status", "status_reason", "location",
                "metadata") if name in columns}
    arrays = {
        **strings,
        "namespace": string_array(list(columns["namespace"])) if "namespace" in columns else constant_strings("", n),
        "step": int64_array(list(columns["step"])),
        "created_at": timestamps(list(columns["micros"])),
        "kind": constant_strings("full", n),
        "size_bytes": int64_array(list(columns["size_bytes"])),
        "checksum": pa.nulls(n, pa.string()),
        "agent": string_array(list(columns["agent"])) if "agent" in columns else pa.nulls(n, pa.string()),
        "codec": constant_strings("json", n),
    }
    schema = readers_base.CHECKPOINT_SCHEMA
    return pa.Table.from_pydict({name: arrays[name] for name in schema.names}, schema=schema)


def events_table(events: Sequence[EventRecord]) -> Any:
    schema = readers_base.EVENT_SCHEMA
    arrays = {name: string_array([getattr(e, name) for e in events])
              for name in schema.names if name != "created_at"}
    arrays["created_at"] = timestamps([epoch_micros(e.created_at) for e in events])
    return pa.Table.from_pydict({name: arrays[name] for name in schema.names}, schema=schema)

