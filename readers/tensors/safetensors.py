"""Safetensors header and index parsing with the reference's exact verdicts.

:func:`parse_header` accepts a file iff ``safetensors`` 0.8.0
(``SafeTensors::read_metadata`` in ``safetensors/src/tensor.rs``) does, and
reports the same error variant.  The JSON layer mirrors serde_json + serde's
derived ``Deserialize`` impls (see :mod:`._stjson`); the checks after it are a
line-by-line port of ``read_metadata`` and ``Metadata::validate``.
"""

from __future__ import annotations

import json
import posixpath
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from . import _stjson
from .dtypes import SAFETENSORS_DTYPES
from .errors import SafetensorsError

ReadRange = Callable[[int, int], "bytes | bytearray | memoryview"]

N_LEN = 8
MAX_HEADER_SIZE = 100_000_000
_U64 = (1 << 64) - 1


@dataclass(frozen=True)
class TensorEntry:
    """One tensor of a safetensors file; ``begin``/``end`` are absolute file offsets."""

    name: str
    dtype: str
    shape: tuple[int, ...]
    begin: int
    end: int

    @property
    def nbytes(self) -> int:
        """Byte length of the tensor's data."""
        return self.end - self.begin

    @property
    def numel(self) -> int:
        """Number of elements (1 for a scalar)."""
        count = 1
        for dim in self.shape:
            count *= dim
        return count


@dataclass(frozen=True)
class SafetensorsHeader:
    """A validated header: tensors sorted by offset, plus ``__metadata__``."""

    header_size: int
    tensors: tuple[TensorEntry, ...]
    metadata: dict[str, str] | None

    @property
    def data_start(self) -> int:
        """Absolute offset of the first data byte (``8 + header_size``)."""
        return N_LEN + self.header_size

    def by_name(self) -> dict[str, TensorEntry]:
        """Return the tensors keyed by name."""
        return {t.name: t for t in self.tensors}


def _read_exact(read_range: ReadRange, offset: int, size: int) -> bytes:
    """Read ``size`` bytes at ``offset``; a short read means the file changed."""
    data = bytes(read_range(offset, size))
    if len(data) != size:
        raise SafetensorsError("ShortRead", f"read {len(data)} of {size} bytes at {offset}")
    return data


def parse_header(read_range: ReadRange, file_size: int) -> SafetensorsHeader:
    """Read and validate the header of a safetensors file of ``file_size`` bytes.

    ``read_range(offset, length)`` returns file bytes; it is called at most
    twice (the 8-byte length, then the JSON).  Raises :class:`SafetensorsError`
    with the reference error name as ``code``.
    """
    if file_size < N_LEN:
        raise SafetensorsError("HeaderTooSmall", "header too small")
    n = int.from_bytes(_read_exact(read_range, 0, N_LEN), "little")
    if n > MAX_HEADER_SIZE:
        raise SafetensorsError("HeaderTooLarge", "header too large")
    if N_LEN + n > file_size:
        raise SafetensorsError("InvalidHeaderLength", "invalid header length")
    raw = _read_exact(read_range, N_LEN, n)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise SafetensorsError("InvalidHeader", f"invalid UTF-8 in header: {exc}") from None
    metadata, infos = _stjson.parse_header_json(text)
    buffer_end = _validate(infos)
    if buffer_end + N_LEN + n != file_size:
        raise SafetensorsError(
            "MetadataIncompleteBuffer", "incomplete metadata, file not fully covered"
        )
    base = N_LEN + n
    tensors = tuple(
        TensorEntry(name, dtype, tuple(shape), base + s, base + e)
        for name, (dtype, shape, (s, e)) in infos
    )
    return SafetensorsHeader(n, tensors, metadata)


def parse_header_bytes(data: bytes | bytearray | memoryview) -> SafetensorsHeader:
    """Validate a whole safetensors file held in memory."""
    view = memoryview(data)
    return parse_header(lambda off, size: view[off : off + size], len(view))


def _checked_mul(a: int, b: int) -> int:
    """usize multiplication that reports overflow like ``checked_mul``."""
    product = a * b
    if product > _U64:
        raise SafetensorsError(
            "ValidationOverflow",
            "overflow computing buffer size from shape and/or element type",
        )
    return product


def _validate(infos: list[tuple[str, _stjson.Info]]) -> int:
    """Port of ``Metadata::validate``: sorts ``infos`` in place by offsets and
    returns the end of the data buffer."""
    infos.sort(key=lambda item: item[1][2])
    start = 0
    for name, (dtype, shape, (s, e)) in infos:
        if s != start or e < s:
            raise SafetensorsError("InvalidOffset", f"invalid offset for tensor `{name}`")
        start = e
        nelements = 1
        for dim in shape:
            nelements = _checked_mul(nelements, dim)
        nbits = _checked_mul(nelements, SAFETENSORS_DTYPES[dtype])
        if nbits % 8:
            raise SafetensorsError(
                "MisalignedSlice",
                "The slice is slicing for subbytes dtypes, and the slice does not "
                "end up at a byte boundary, this is invalid.",
            )
        if e - s != nbits // 8:
            raise SafetensorsError(
                "TensorInvalidInfo", "invalid shape, data type, or offset for tensor"
            )
    return start


def check_tensor_view(dtype: str, shape: tuple[int, ...], data_len: int) -> None:
    """Port of ``TensorView::new``: raise unless ``data_len`` bytes hold ``shape``."""
    nelements = 1
    for dim in shape:
        nelements *= dim
    nbits = nelements * SAFETENSORS_DTYPES[dtype]
    if nbits % 8:
        raise SafetensorsError("MisalignedSlice", "slice does not end on a byte boundary")
    if data_len != nbits // 8:
        raise SafetensorsError(
            "InvalidTensorView",
            f"tensor of type {dtype} and shape {shape} can't be created from {data_len} bytes",
        )


@dataclass(frozen=True)
class SafetensorsIndex:
    """A parsed ``model.safetensors.index.json``."""

    metadata: dict[str, object]
    total_size: int | None
    weight_map: dict[str, str]

    @property
    def files(self) -> tuple[str, ...]:
        """The shard file names, sorted, each once."""
        return tuple(sorted(set(self.weight_map.values())))


def _index_error(code: str, message: str) -> SafetensorsError:
    """Build an index-file error."""
    return SafetensorsError(code, message)


def _check_shard_name(name: object) -> str:
    """Return ``name`` if it is a safe relative shard path, else raise."""
    if not isinstance(name, str) or not name:
        raise _index_error("IndexBadWeightMap", f"shard name {name!r} is not a string")
    norm = posixpath.normpath(name.replace("\\", "/"))
    if norm.startswith("/") or norm == ".." or norm.startswith("../") or "\x00" in name:
        raise _index_error("IndexBadFilename", f"shard name {name!r} escapes the folder")
    return name


def parse_index(json_bytes: bytes | str) -> SafetensorsIndex:
    """Parse and validate a sharded-checkpoint index file.

    Requires a JSON object whose ``weight_map`` maps tensor names to relative
    shard file names; ``metadata`` (optional) must be an object whose
    ``total_size`` (optional) is a non-negative integer.
    """
    try:
        text = json_bytes.decode("utf-8") if isinstance(json_bytes, bytes) else json_bytes
        doc = json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise _index_error("IndexInvalidJson", f"index is not JSON: {exc}") from None
    if not isinstance(doc, dict):
        raise _index_error("IndexInvalidJson", "index is not a JSON object")
    weight_map = doc.get("weight_map")
    if not isinstance(weight_map, dict):
        raise _index_error("IndexMissingWeightMap", "index has no weight_map object")
    checked = {str(k): _check_shard_name(v) for k, v in weight_map.items()}
    metadata = doc.get("metadata", {})
    if metadata is None:
        metadata = {}
    if not isinstance(metadata, Mapping):
        raise _index_error("IndexBadMetadata", "index metadata is not an object")
    total = metadata.get("total_size")
    if isinstance(total, float) and total.is_integer():
        total = int(total)
    if total is not None and (type(total) is not int or total < 0):
        raise _index_error("IndexBadMetadata", f"total_size {total!r} is not a size")
    return SafetensorsIndex(dict(metadata), total, checked)
