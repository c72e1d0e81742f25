"""A fast pickle opcode decoder, equivalent to :func:`pickletools.genops`.

Binary arguments (the opcodes ``torch.save`` and ``pickle.dump`` emit at
protocol ≥ 2) are decoded inline with :mod:`struct`; the text arguments of
protocol 0 fall back to pickletools' own readers.  Yields
``(opcode name, argument, position)`` and stops after ``STOP``; malformed
input raises :class:`PickleError`.  Nothing is executed.
"""

from __future__ import annotations

import io
import pickletools
import struct
import warnings
from collections.abc import Callable, Iterator
from typing import Any

from .errors import PickleError

_U2, _I4, _U4, _U8, _F8 = (struct.Struct(f).unpack_from for f in ("<H", "<i", "<I", "<Q", ">d"))


Reader = Callable[[bytes, int], tuple[Any, int]]


def _fixed(size: int, unpack: Callable[[bytes, int], tuple[Any, ...]] | None) -> Reader:
    """Reader of a fixed-size number."""
    def read(data: bytes, i: int) -> tuple[Any, int]:
        if i + size > len(data):
            raise PickleError("BadPickle", "pickle truncated inside an argument")
        return (data[i] if unpack is None else unpack(data, i)[0]), i + size
    return read


def _counted(count: Callable[[bytes, int], tuple[Any, int]], make: Callable[[bytes], Any],
             signed: bool = False) -> Callable[[bytes, int], tuple[Any, int]]:
    """Reader of a length-prefixed byte string, converted by ``make``."""
    def read(data: bytes, i: int) -> tuple[Any, int]:
        n, i = count(data, i)
        if signed and n < 0:
            raise PickleError("BadPickle", f"negative length {n}")
        if i + n > len(data):
            raise PickleError("BadPickle", "pickle truncated inside a string")
        return make(data[i : i + n]), i + n
    return read


def _text(opcode: pickletools.OpcodeInfo) -> Callable[[bytes, int], tuple[Any, int]]:
    """Fallback reader using pickletools (protocol-0 text arguments)."""
    reader = opcode.arg.reader  # type: ignore[union-attr]

    def read(data: bytes, i: int) -> tuple[Any, int]:
        stream = io.BytesIO(data)
        stream.seek(i)
        try:
            with warnings.catch_warnings():  # invalid string escapes warn, as in pickle
                warnings.simplefilter("ignore")
                arg = reader(stream)
        except (ValueError, AssertionError, OverflowError) as exc:
            raise PickleError("BadPickle", f"bad {opcode.name} argument: {exc}") from None
        return arg, stream.tell()
    return read


def _utf8(raw: bytes) -> str:
    """Decode like pickle does (lone surrogates pass)."""
    try:
        return str(raw, "utf-8", "surrogatepass")
    except UnicodeDecodeError as exc:
        raise PickleError("BadPickle", f"bad UTF-8 in pickle string: {exc}") from None


_u1, _u2, _i4, _u4, _u8 = _fixed(1, None), _fixed(2, _U2), _fixed(4, _I4), _fixed(4, _U4), _fixed(8, _U8)
_READERS: dict[str, Callable[[bytes, int], tuple[Any, int]]] = {
    "uint1": _u1, "uint2": _u2, "int4": _i4, "uint4": _u4, "uint8": _u8,
    "float8": _fixed(8, _F8),
    "long1": _counted(_u1, lambda b: int.from_bytes(b, "little", signed=True)),
    "long4": _counted(_i4, lambda b: int.from_bytes(b, "little", signed=True), signed=True),
    "string1": _counted(_u1, lambda b: b.decode("latin-1")),
    "string4": _counted(_i4, lambda b: b.decode("latin-1"), signed=True),
    "bytes1": _counted(_u1, bytes), "bytes4": _counted(_u4, bytes), "bytes8": _counted(_u8, bytes),
    "bytearray8": _counted(_u8, bytearray),
    "unicodestring1": _counted(_u1, _utf8), "unicodestring4": _counted(_u4, _utf8),
    "unicodestring8": _counted(_u8, _utf8),
}


def _table() -> list[tuple[str, Callable[[bytes, int], tuple[Any, int]] | None] | None]:
    """Opcode byte → (name, argument reader or None)."""
    table: list[tuple[str, Callable[[bytes, int], tuple[Any, int]] | None] | None] = [None] * 256
    for op in pickletools.opcodes:
        reader = None if op.arg is None else _READERS.get(op.arg.name) or _text(op)
        table[ord(op.code)] = (op.name, reader)
    return table


_TABLE = _table()


def iter_ops(data: bytes) -> Iterator[tuple[str, Any, int]]:
    """Yield (name, arg, pos) for each opcode up to and including STOP."""
    i, end = 0, len(data)
    while i < end:
        entry = _TABLE[data[i]]
        if entry is None:
            raise PickleError("BadPickle", f"unknown opcode {data[i]:#04x} at {i}")
        name, reader = entry
        pos, i = i, i + 1
        arg = None
        if reader is not None:
            arg, i = reader(data, i)
        yield name, arg, pos
        if name == "STOP":
            return
    raise PickleError("BadPickle", "pickle ends without STOP")
