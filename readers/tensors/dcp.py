"""torch.distributed.checkpoint (DCP) ``.metadata`` parsing and extent checks.

The ``.metadata`` file is a pickle of ``torch.distributed.checkpoint.metadata
.Metadata``; it is walked with :data:`DCP_ALLOW` (no torch import) and turned
into :class:`DcpMetadata`.  :func:`check_extents` compares the recorded
``(relative_path, offset, length)`` of every item with the sizes of the
``*.distcp`` files on disk.
"""

from __future__ import annotations

import posixpath
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from . import dtypes
from .errors import DcpError
from .pickle_walk import GlobalRef, Limits, PlainObject, walk
from .torch_pickle import DCP_ALLOW

_MODULE = "torch.distributed.checkpoint.metadata."
_PROPERTY_FIELDS = ("dtype", "layout", "requires_grad", "memory_format", "pin_memory")


@dataclass(frozen=True)
class DcpChunk:
    """One saved chunk of a tensor: its position and extent in the global tensor."""

    offsets: tuple[int, ...]
    sizes: tuple[int, ...]


@dataclass(frozen=True)
class DcpTensor:
    """``TensorStorageMetadata``: a (possibly sharded) tensor."""

    fqn: str
    dtype: str
    size: tuple[int, ...]
    chunks: tuple[DcpChunk, ...]
    requires_grad: bool = False


@dataclass(frozen=True)
class DcpBytes:
    """``BytesStorageMetadata``: a non-tensor value saved with ``torch.save``."""

    fqn: str


@dataclass(frozen=True)
class DcpStorageItem:
    """One ``storage_data`` entry: ``MetadataIndex`` → ``_StorageInfo``."""

    fqn: str
    offset: tuple[int, ...] | None
    index: int | None
    relative_path: str
    file_offset: int
    length: int
    transforms: tuple[str, ...] = ()


@dataclass(frozen=True)
class DcpMetadata:
    """The parts of a DCP ``Metadata`` a reader needs."""

    state_dict: dict[str, DcpTensor | DcpBytes]
    storage: tuple[DcpStorageItem, ...]
    version: str | None
    save_id: str | None
    checkpoint_id: str | None


@dataclass(frozen=True)
class DcpProblem:
    """A finding of :func:`check_extents`."""

    code: str
    fqn: str
    relative_path: str
    message: str


def _fail(message: str) -> DcpError:
    """Build a metadata-structure error."""
    return DcpError("BadDcpMetadata", message)


def _state(obj: Any, cls: str) -> Any:
    """The BUILD state of a plain object of class ``cls`` (module-qualified)."""
    if not isinstance(obj, PlainObject) or not str(obj.get("__class__", "")).endswith(cls):
        found = obj.get("__class__") if isinstance(obj, dict) else type(obj).__name__
        raise _fail(f"expected {cls}, got {found}")
    return obj.get("state")


def _fields(obj: Any, cls: str) -> dict[str, Any]:
    """The dataclass fields of ``obj`` (its dict state)."""
    state = _state(obj, cls)
    if state is None:
        return {}
    if isinstance(state, tuple) and len(state) == 2 and isinstance(state[0], dict):
        state = state[0]  # (dict, slots) form
    if not isinstance(state, dict):
        raise _fail(f"{cls} state is {type(state).__name__}")
    return state


def _ints(value: Any, what: str) -> tuple[int, ...]:
    """A tuple of non-negative ints (``torch.Size`` walks to a tuple)."""
    if not isinstance(value, (tuple, list)) or not all(type(v) is int and v >= 0 for v in value):
        raise _fail(f"{what} is not a size: {value!r:.80}")
    return tuple(value)


def _properties(obj: Any) -> tuple[str, bool]:
    """(dtype name, requires_grad) from a ``TensorProperties``."""
    state = _state(obj, "TensorProperties")
    if isinstance(state, tuple):
        state = dict(zip(_PROPERTY_FIELDS, state))
    if not isinstance(state, dict):
        raise _fail("TensorProperties without state")
    ref = state.get("dtype")
    dtype = dtypes.torch_global_dtype(ref.name) if isinstance(ref, GlobalRef) else None
    if dtype is None:
        raise _fail(f"unknown tensor dtype {ref!r}")
    return dtype, bool(state.get("requires_grad", False))


def _entry(fqn: str, obj: Any) -> DcpTensor | DcpBytes:
    """Convert one ``state_dict_metadata`` value."""
    if isinstance(obj, PlainObject) and str(obj.get("__class__")).endswith("BytesStorageMetadata"):
        return DcpBytes(fqn)
    fields = _fields(obj, "TensorStorageMetadata")
    dtype, grad = _properties(fields.get("properties"))
    chunks = fields.get("chunks")
    if not isinstance(chunks, list):
        raise _fail(f"{fqn}: chunks is not a list")
    out = []
    for chunk in chunks:
        cf = _fields(chunk, "ChunkStorageMetadata")
        out.append(DcpChunk(_ints(cf.get("offsets"), "offsets"), _ints(cf.get("sizes"), "sizes")))
    return DcpTensor(fqn, dtype, _ints(fields.get("size"), f"{fqn} size"), tuple(out), grad)


def _storage_item(key: Any, value: Any) -> DcpStorageItem:
    """Convert one ``storage_data`` pair."""
    index = _fields(key, "MetadataIndex")
    info = _fields(value, "_StorageInfo")
    fqn, offset, idx = index.get("fqn"), index.get("offset"), index.get("index")
    path, start, length = info.get("relative_path"), info.get("offset"), info.get("length")
    if not isinstance(fqn, str) or not isinstance(path, str):
        raise _fail("storage_data entry without fqn or relative_path")
    if type(start) is not int or type(length) is not int or start < 0 or length < 0:
        raise _fail(f"{fqn}: bad offset/length {start!r}/{length!r}")
    if idx is not None and type(idx) is not int:
        raise _fail(f"{fqn}: bad chunk index {idx!r}")
    transforms = info.get("transform_descriptors") or ()
    return DcpStorageItem(fqn, None if offset is None else _ints(offset, "offset"), idx,
                          path, start, length, tuple(str(t) for t in transforms))


def parse_dcp_metadata(data: bytes, limits: Limits = Limits()) -> DcpMetadata:
    """Walk a DCP ``.metadata`` pickle and return its state dict and storage map.

    Raises :class:`DcpError` for an unexpected structure, and the walker's
    errors (``UnsafeGlobal`` …) for unsafe or malformed pickles.
    """
    fields = _fields(walk(data, DCP_ALLOW, limits=limits), _MODULE + "Metadata")
    sdm = fields.get("state_dict_metadata")
    storage = fields.get("storage_data") or {}
    if not isinstance(sdm, dict) or not isinstance(storage, dict):
        raise _fail("state_dict_metadata / storage_data are not dicts")
    state_dict = {str(k): _entry(str(k), v) for k, v in sdm.items()}
    items = tuple(_storage_item(k, v) for k, v in storage.items())
    meta = fields.get("storage_meta")
    extra = _fields(meta, "StorageMeta") if meta is not None else {}
    version = fields.get("version")
    return DcpMetadata(
        state_dict, items, version if isinstance(version, str) else None,
        _opt_str(extra.get("save_id")), _opt_str(extra.get("checkpoint_id")),
    )


def _opt_str(value: Any) -> str | None:
    """``value`` if it is a string, else None."""
    return value if isinstance(value, str) else None


def _bad_path(path: str) -> bool:
    """True if a relative path escapes the checkpoint folder."""
    norm = posixpath.normpath(path.replace("\\", "/"))
    return not path or norm.startswith("/") or norm == ".." or norm.startswith("../")


def check_extents(meta: DcpMetadata, file_sizes: Mapping[str, int]) -> list[DcpProblem]:
    """Compare storage items with data-file sizes and with the state dict.

    Problem codes: ``BadRelativePath``, ``MissingFile``, ``BeyondEnd``,
    ``Overlap``, ``UnknownFqn``, ``MissingStorageData``, ``ChunkOutOfBounds``.
    """
    problems: list[DcpProblem] = []
    by_file: dict[str, list[DcpStorageItem]] = {}
    for item in meta.storage:
        if _bad_path(item.relative_path):
            problems.append(DcpProblem("BadRelativePath", item.fqn, item.relative_path,
                                       "path escapes the checkpoint folder"))
        elif item.relative_path not in file_sizes:
            problems.append(DcpProblem("MissingFile", item.fqn, item.relative_path, "data file missing"))
        elif item.file_offset + item.length > file_sizes[item.relative_path]:
            problems.append(DcpProblem(
                "BeyondEnd", item.fqn, item.relative_path,
                f"bytes {item.file_offset}..{item.file_offset + item.length} beyond "
                f"file size {file_sizes[item.relative_path]}"))
        by_file.setdefault(item.relative_path, []).append(item)
    problems += _overlaps(by_file)
    problems += _coverage(meta)
    return problems


def _overlaps(by_file: dict[str, list[DcpStorageItem]]) -> list[DcpProblem]:
    """Items whose byte ranges overlap inside one file."""
    problems = []
    for path, items in by_file.items():
        items = sorted(items, key=lambda i: (i.file_offset, i.length))
        for prev, cur in zip(items, items[1:]):
            if cur.file_offset < prev.file_offset + prev.length:
                problems.append(DcpProblem("Overlap", cur.fqn, path, f"overlaps {prev.fqn}"))
    return problems


def _coverage(meta: DcpMetadata) -> list[DcpProblem]:
    """State-dict entries without storage, storage without entries, bad chunks."""
    problems = []
    keys = {(i.fqn, i.offset) for i in meta.storage}
    for item in meta.storage:
        if item.fqn not in meta.state_dict:
            problems.append(DcpProblem("UnknownFqn", item.fqn, item.relative_path, "not in state dict"))
    for fqn, entry in meta.state_dict.items():
        wanted = [None] if isinstance(entry, DcpBytes) else [c.offsets for c in entry.chunks]
        for offset in wanted:
            if (fqn, offset) not in keys:
                problems.append(DcpProblem("MissingStorageData", fqn, "", f"no data for chunk {offset}"))
        if isinstance(entry, DcpTensor):
            for chunk in entry.chunks:
                if not _chunk_fits(chunk, entry.size):
                    problems.append(DcpProblem("ChunkOutOfBounds", fqn, "",
                                               f"chunk {chunk} outside size {entry.size}"))
    return problems


def _chunk_fits(chunk: DcpChunk, size: tuple[int, ...]) -> bool:
    """True if the chunk lies inside a tensor of ``size``."""
    if len(chunk.offsets) != len(size) or len(chunk.sizes) != len(size):
        return False
    return all(o + s <= d for o, s, d in zip(chunk.offsets, chunk.sizes, size))
