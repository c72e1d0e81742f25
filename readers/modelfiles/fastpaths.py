"""Quick acceptance paths in front of ``lastgood.readers.tensors``'s exact parsers.

Listing a thousand checkpoints checks a thousand safetensors headers and four thousand pickles;
the exact parsers (a port of the reference's serde rules; a full opcode decoder) take about a
millisecond each. The paths here accept only what is plainly valid — a header of plain JSON
(no escapes, no duplicates, exactly the three known fields, integer offsets); a pickle of the
binary opcodes ``torch.save`` writes whose globals are all in the allowlist — and hand
everything else to the exact parser, so a verdict (and an error code) is always the exact one.
Nothing is ever unpickled.
"""

from __future__ import annotations

import _compat_pickle
import json
import re
from collections.abc import Callable, Mapping
from typing import Any

from lastgood.readers.tensors.dtypes import SAFETENSORS_DTYPES
from lastgood.readers.tensors.errors import SafetensorsError
from lastgood.readers.tensors.pickle_walk import Limits, check_globals
from lastgood.readers.tensors.safetensors import MAX_HEADER_SIZE, N_LEN, SafetensorsHeader, TensorEntry, parse_header

ReadRange = Callable[[int, int], "bytes | bytearray | memoryview"]
_U64 = (1 << 64) - 1
_FIELDS = frozenset({"dtype", "shape", "data_offsets"})
# each is quoted once per tensor in a plain header: another count means a duplicate somewhere
_FIELD_KEYS = (b'"dtype"', b'"shape"', b'"data_offsets"')
_NEGATIVE = re.compile(rb"[\[,:]\s*-")  # a negative number (or such text in a name: the exact path)
MAX_MEMO_HEADER = 1 << 20  # headers up to this size are remembered by their bytes …
MAX_MEMO_ENTRIES = 256  # … this many (then forgotten at once)
HeaderMemo = dict[tuple[int, bytes], "SafetensorsHeader | SafetensorsError"]


class _Reject(Exception):
    """Not plainly valid: the exact parser decides."""


# ---- safetensors headers ------------------------------------------------------------------


def read_header(read_range: ReadRange, file_size: int, seen: HeaderMemo | None = None) -> SafetensorsHeader:
    """``parse_header``'s result (or its ``SafetensorsError``), reading the same two ranges:
    the 8-byte length, then the JSON. ``seen``: verdicts by (file size, header bytes) — the
    checkpoints of a run repeat one header, and the verdict depends on nothing else."""
    if file_size < N_LEN:
        return parse_header(read_range, file_size)
    first = bytes(read_range(0, N_LEN))
    n = int.from_bytes(first, "little") if len(first) == N_LEN else -1
    if n < 0 or n > MAX_HEADER_SIZE or N_LEN + n > file_size:
        return parse_header(_served(read_range, first), file_size)
    raw = bytes(read_range(N_LEN, n))
    if seen is None or len(raw) != n or n > MAX_MEMO_HEADER:
        return _judge(read_range, first, raw, n, file_size)
    key = (file_size, raw)
    verdict = seen.get(key)
    if verdict is None:
        try:
            verdict = _judge(read_range, first, raw, n, file_size)
        except SafetensorsError as exc:
            verdict = exc
        if len(seen) >= MAX_MEMO_ENTRIES:
            seen.clear()
        seen[key] = verdict
    if isinstance(verdict, SafetensorsError):
        raise verdict
    return verdict


def _judge(read_range: ReadRange, first: bytes, raw: bytes, n: int, file_size: int) -> SafetensorsHeader:
    fast = _plain_header(n, raw, file_size) if len(raw) == n else None
    return fast if fast is not None else parse_header(_served(read_range, first + raw), file_size)


def _served(read_range: ReadRange, prefix: bytes) -> ReadRange:
    """``read_range`` answering from bytes already read (no second request)."""
    def read(offset: int, size: int) -> bytes | bytearray | memoryview:
        if offset + size <= len(prefix):
            return prefix[offset:offset + size]
        return read_range(offset, size)
    return read


def _plain_header(n: int, raw: bytes, file_size: int) -> SafetensorsHeader | None:
    if b"\\" in raw or _NEGATIVE.search(raw):
        return None
    try:
        doc = json.loads(raw.decode("utf-8"))
        if type(doc) is not dict or raw.count(b'"__metadata__"') > ("__metadata__" in doc):
            return None
        metadata = _metadata(doc.pop("__metadata__", None))
        infos = [_info(name, value) for name, value in doc.items()]
        if any(raw.count(key) != len(infos) for key in _FIELD_KEYS):  # a duplicate key or name
            return None
        infos.sort(key=lambda item: (item[3], item[4]))
        if _buffer_end(infos) + N_LEN + n != file_size:
            return None
    except (ValueError, RecursionError, _Reject):
        return None
    base = N_LEN + n
    tensors = tuple(TensorEntry(name, dtype, shape, base + s, base + e) for name, dtype, shape, s, e in infos)
    return SafetensorsHeader(n, tensors, metadata)


def _metadata(value: Any) -> dict[str, str] | None:
    if value is None:
        return None
    if type(value) is not dict or any(type(v) is not str for v in value.values()):
        raise _Reject
    return value


def _info(name: str, value: Any) -> tuple[str, str, tuple[int, ...], int, int]:
    if type(value) is not dict or value.keys() != _FIELDS:
        raise _Reject
    dtype, shape, offsets = value["dtype"], value["shape"], value["data_offsets"]
    if type(dtype) is not str or dtype not in SAFETENSORS_DTYPES:
        raise _Reject
    if type(shape) is not list or any(type(d) is not int or d > _U64 for d in shape):
        raise _Reject
    if type(offsets) is not list or len(offsets) != 2 or any(type(o) is not int or o > _U64 for o in offsets):
        raise _Reject
    return name, dtype, tuple(shape), offsets[0], offsets[1]


def _buffer_end(infos: list[tuple[str, str, tuple[int, ...], int, int]]) -> int:
    """``Metadata::validate`` for plainly valid headers; _Reject for anything it would refuse."""
    start = 0
    for _name, dtype, shape, s, e in infos:
        if s != start or e < s:
            raise _Reject
        numel = 1
        for dim in shape:
            numel *= dim
        bits = numel * SAFETENSORS_DTYPES[dtype]
        if bits > _U64 or bits % 8 or e - s != bits // 8:
            raise _Reject
        start = e
    return start


# ---- pickle globals ---------------------------------------------------------------------------
_COUNTED: dict[int, tuple[int, bool, bool]] = {  # opcode → (length width, signed, UTF-8 text)
    0x8a: (1, False, False), 0x8b: (4, True, False), ord("T"): (4, True, False), ord("U"): (1, False, False),
    ord("B"): (4, False, False), ord("C"): (1, False, False), 0x8e: (8, False, False), 0x96: (8, False, False),
    0x8c: (1, False, True), ord("X"): (4, False, True), 0x8d: (8, False, True),
}


def _advance_table() -> list[int]:
    """Opcode byte → bytes to skip (opcode + fixed argument); 0: look closer."""
    table = [0] * 256
    for code in "N\x88\x89]aelt)\x85\x86\x87}dsu\x8f\x90\x91021(\x94RbQo\x81\x92\x97\x98":
        table[ord(code)] = 1
    for code, size in {"J": 4, "K": 1, "M": 2, "G": 8, "h": 1, "j": 4, "q": 1, "r": 4, "\x80": 1, "\x95": 8}.items():
        table[ord(code)] = 1 + size
    return table


_ADVANCE = _advance_table()


def _fixed_run() -> re.Pattern[bytes]:
    """Any run of opcodes whose argument has a fixed size (and is not a name)."""
    by_size: dict[int, list[int]] = {}
    for code, step in enumerate(_ADVANCE):
        if step:
            by_size.setdefault(step - 1, []).append(code)
    parts = [b"[" + b"".join(re.escape(bytes([c])) for c in codes) + b"]" + (rb"[\s\S]{%d}" % size if size else b"")
             for size, codes in sorted(by_size.items())]
    # LONG1 of up to 8 bytes (numpy's RNG state is hundreds of them): its length byte, then the bytes
    parts.append(rb"\x8a(?:" + b"|".join(re.escape(bytes([n])) + (rb"[\s\S]{%d}" % n if n else b"")
                                         for n in range(9)) + b")")
    return re.compile(b"(?:" + b"|".join(parts) + b")*")


_FIXED_RUN = _fixed_run()


def pickle_globals(data: bytes, allow: Mapping[str, Any], limits: Limits = Limits()) -> list[str]:
    """``check_globals``' verdict: every global the pickle names (``UnsafeGlobal`` for one
    outside ``allow``, ``PickleError`` for a damaged stream)."""
    found = _binary_globals(data, limits.max_ops)
    if found is None:
        return check_globals(data, allow, limits)
    names = [_map_name(module, name) for module, name in found]
    if any(name not in allow for name in names):
        return check_globals(data, allow, limits)  # the exact walk names the first one
    return names


def _binary_globals(data: bytes, max_ops: int) -> list[tuple[str, str]] | None:
    """The (module, name) of every GLOBAL/INST, or None for anything but a well-formed stream of
    binary opcodes ending in STOP (the exact decoder handles those). Runs of opcodes with fixed-size
    arguments are skipped by one regular-expression match; Python looks only at the others."""
    if len(data) > max_ops:  # each opcode is at least a byte: the op count cannot exceed the size
        return None
    i, end, found = 0, len(data), []
    skip, advance, counted = _FIXED_RUN.match, _ADVANCE, _COUNTED
    while i < end:
        code = data[i]
        step = advance[code]
        if step:  # one opcode with a fixed-size argument inline, a run of them by the expression
            i += step
            if i < end and advance[data[i]]:
                i = skip(data, i).end()  # type: ignore[union-attr]  # (?:…)* always matches
            continue
        i += 1
        spec = counted.get(code)
        if spec is not None:
            width, signed, text = spec
            if i + width > end:
                return None
            n = int.from_bytes(data[i:i + width], "little", signed=signed)
            i += width
            if n < 0 or i + n > end or (text and not data[i:i + n].isascii() and not _utf8(data[i:i + n])):
                return None
            i += n
        elif code == 0x63 or code == 0x69:  # GLOBAL, INST
            pair, i = _pair(data, i)
            if pair is None:
                return None
            found.append(pair)
        elif code == 0x2e:  # STOP
            return found
        else:
            return None  # text opcodes, STACK_GLOBAL, EXT*, unknown: the exact decoder
    return None  # no STOP, or an argument cut short


def _utf8(raw: bytes) -> bool:
    try:
        str(raw, "utf-8", "surrogatepass")
    except UnicodeDecodeError:
        return False
    return True


def _pair(data: bytes, i: int) -> tuple[tuple[str, str] | None, int]:
    """A GLOBAL's two text lines, when plain ASCII without escapes."""
    first = data.find(b"\n", i)
    second = data.find(b"\n", first + 1) if first >= 0 else -1
    if second < 0:
        return None, i
    module, name = data[i:first], data[first + 1:second]
    if b"\\" in module or b"\\" in name or not (module + name).isascii():
        return None, i
    return (module.decode("ascii"), name.decode("ascii")), second + 1


def _map_name(module: str, name: str) -> str:
    """Python 2 → 3 renames, as pickle (fix_imports) and the exact walker apply them."""
    if (module, name) in _compat_pickle.NAME_MAPPING:
        module, name = _compat_pickle.NAME_MAPPING[(module, name)]
    elif module in _compat_pickle.IMPORT_MAPPING:
        module = _compat_pickle.IMPORT_MAPPING[module]
    return f"{module}.{name}"
