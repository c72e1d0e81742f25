"""Inspect ``torch.save`` files without torch: zip layout, pickle, tensor byte ranges.

A zip-format file holds ``<stem>/data.pkl`` (the pickled object, walked with
:data:`TORCH_ALLOW`) and one stored entry ``<stem>/data/<key>`` per storage.
:func:`inspect_torch_file` validates the layout and lists every tensor with
the absolute file offset of its storage bytes; :func:`check_crc` streams the
entries' CRC-32s; :func:`tensor_bytes` / :func:`read_tensor_bytes` locate and
read one tensor.  Legacy (pre-1.6, non-zip) files are recognised, not decoded.
"""

from __future__ import annotations

import zlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, BinaryIO

import numpy as np

from . import dtypes
from ._zipentries import ZipEntry, list_entries, read_at
from .errors import PickleTooLarge, TensorsError, TorchFileError
from .pickle_walk import Handler, Limits, walk
from .torch_pickle import TORCH_ALLOW, StorageRef, TensorRef, iter_tensors, torch_persistent_load

# pickle.dumps(0x1950a86a20f9469cfc6c, protocol=2) without the trailing STOP.
_LEGACY_MAGIC = b"\x8a\x0al\xfc\x9cF\xf9 j\xa8P\x19"
MAX_PICKLE_BYTES = 1 << 30


@dataclass(frozen=True)
class TorchTensor:
    """A tensor found in ``data.pkl`` and the zip entry holding its storage."""

    name: str
    ref: TensorRef
    entry: ZipEntry


@dataclass(frozen=True)
class TensorBytes:
    """Where a tensor's bytes are: ``[start, end)`` in the file.

    ``contiguous`` tensors occupy exactly that range in C order; a strided
    view (``contiguous=False``) touches some of the bytes of that range.
    """

    start: int
    end: int
    contiguous: bool


@dataclass
class TorchFile:
    """What :func:`inspect_torch_file` learned about one file."""

    legacy: bool
    prefix: str = ""
    root: Any = None
    tensors: tuple[TorchTensor, ...] = ()
    storages: dict[str, StorageRef] = field(default_factory=dict)
    entries: dict[str, ZipEntry] = field(default_factory=dict)
    byteorder: str = "little"


def _is_legacy(head: bytes) -> bool:
    """True for the pre-zip format (pickled magic number) or the older tar one."""
    if len(head) >= 2 + len(_LEGACY_MAGIC) and head[0] == 0x80 \
            and head[2:2 + len(_LEGACY_MAGIC)] == _LEGACY_MAGIC:
        return True
    return head[257:262] == b"ustar"


def inspect_torch_file(fileobj: BinaryIO, size: int, *,
                       allow: Mapping[str, Handler] = TORCH_ALLOW,
                       limits: Limits = Limits()) -> TorchFile:
    """Validate a torch file of ``size`` bytes and list its tensors.

    Raises :class:`TorchFileError` (``NotATorchFile``, ``TruncatedZip``,
    ``BadZip``, ``NoDataPickle``, ``MissingStorage``, ``StorageTooSmall``,
    ``TensorOutOfBounds`` …) or the pickle walker's errors.
    """
    head = read_at(fileobj, 0, min(size, 512))
    if head[:4] in (b"PK\x03\x04", b"PK\x05\x06"):
        return _inspect_zip(fileobj, size, allow, limits)
    if _is_legacy(head):
        return TorchFile(legacy=True)
    raise TorchFileError("NotATorchFile", "neither a torch zip nor a legacy torch file")


def _find_prefix(entries: dict[str, ZipEntry]) -> str:
    """The archive folder name, taken from the first entry as torch does."""
    first = next(iter(entries), "")
    prefix = first.split("/", 1)[0] if "/" in first else ""
    if not prefix or f"{prefix}/data.pkl" not in entries:
        raise TorchFileError("NoDataPickle", "no <name>/data.pkl entry")
    return prefix


def _read_entry(fileobj: BinaryIO, entry: ZipEntry) -> bytes:
    """Read a small stored entry whole and verify its CRC (unless disabled)."""
    if entry.compressed:
        raise TorchFileError("CompressedEntry", f"{entry.name} is compressed")
    data = read_at(fileobj, entry.data_offset, entry.length)
    if len(data) != entry.length:
        raise TorchFileError("EntryOutOfBounds", f"{entry.name} is cut short")
    if entry.crc and zlib.crc32(data) != entry.crc:
        raise TorchFileError("CrcMismatch", f"{entry.name} fails its CRC-32")
    return data


def _inspect_zip(fileobj: BinaryIO, size: int, allow: Mapping[str, Handler],
                 limits: Limits) -> TorchFile:
    """Body of :func:`inspect_torch_file` for zip files."""
    entries = list_entries(fileobj, size)
    prefix = _find_prefix(entries)
    pkl = entries[f"{prefix}/data.pkl"]
    if pkl.length > MAX_PICKLE_BYTES:
        raise PickleTooLarge("PickleTooLarge", f"data.pkl is {pkl.length} bytes")
    storages: dict[str, StorageRef] = {}

    def persistent_load(pid: Any) -> StorageRef:
        ref = torch_persistent_load(pid)
        return storages.setdefault(ref.key, ref)

    root = walk(_read_entry(fileobj, pkl), allow, persistent_load=persistent_load, limits=limits)
    for ref in storages.values():
        _storage_entry(entries, prefix, ref)
    tensors = tuple(
        TorchTensor(name, ref, _check_tensor(entries, prefix, name, ref))
        for name, ref in iter_tensors(root)
    )
    order = entries.get(f"{prefix}/byteorder")
    byteorder = _read_entry(fileobj, order).decode("ascii", "replace") if order else "little"
    return TorchFile(False, prefix, root, tensors, storages, entries, byteorder)


def _storage_entry(entries: dict[str, ZipEntry], prefix: str, ref: StorageRef) -> ZipEntry:
    """The zip entry of a storage; raise if missing, compressed or too small."""
    entry = entries.get(f"{prefix}/data/{ref.key}")
    if entry is None:
        raise TorchFileError("MissingStorage", f"storage {ref.key!r} has no zip entry")
    if entry.compressed:
        raise TorchFileError("CompressedEntry", f"storage {ref.key!r} is compressed")
    if entry.length < ref.nbytes:
        raise TorchFileError(
            "StorageTooSmall", f"storage {ref.key!r}: {entry.length} bytes, {ref.nbytes} declared"
        )
    return entry


def _check_tensor(entries: dict[str, ZipEntry], prefix: str, name: str, ref: TensorRef) -> ZipEntry:
    """Check that tensor ``name`` lies inside its storage; return the storage entry."""
    entry = entries.get(f"{prefix}/data/{ref.storage_key}")
    if entry is None:
        raise TorchFileError("MissingStorage", f"{name}: storage {ref.storage_key!r} missing")
    try:
        _, end = ref.extent()
    except TensorsError as exc:
        raise TorchFileError("BadTensor", f"{name}: {exc.message}") from None
    if end > ref.storage_nbytes:
        raise TorchFileError(
            "TensorOutOfBounds", f"{name}: needs {end} bytes of a {entry.length}-byte storage"
        )
    return entry


def tensor_bytes(tensor: TorchTensor) -> TensorBytes:
    """The absolute byte range of ``tensor`` in the file (see :class:`TensorBytes`)."""
    start, end = tensor.ref.extent()
    base = tensor.entry.data_offset
    return TensorBytes(base + start, base + end, tensor.ref.is_contiguous)


def read_tensor_bytes(fileobj: BinaryIO, tensor: TorchTensor) -> bytes:
    """Return the tensor's element bytes in C order (gathering strided views)."""
    span = tensor_bytes(tensor)
    raw = read_at(fileobj, span.start, span.end - span.start)
    if len(raw) != span.end - span.start:
        raise TorchFileError("EntryOutOfBounds", f"{tensor.name}: file cut short")
    ref = tensor.ref
    if ref.is_contiguous or ref.numel == 0:
        return raw[: ref.numel * dtypes.itemsize(ref.dtype)] if ref.numel else b""
    size = dtypes.itemsize(ref.dtype)
    flat = np.frombuffer(raw, dtype=f"V{size}")
    view = np.lib.stride_tricks.as_strided(
        flat, shape=ref.shape, strides=[s * size for s in ref.stride], writeable=False
    )
    return np.ascontiguousarray(view).tobytes()


def read_tensor(fileobj: BinaryIO, tensor: TorchTensor) -> np.ndarray:
    """Decode a tensor's values into a numpy array of its shape."""
    flat = dtypes.decode(read_tensor_bytes(fileobj, tensor), tensor.ref.dtype)
    return flat.reshape(tensor.ref.shape)


@dataclass(frozen=True)
class CrcResult:
    """Outcome of re-computing one entry's CRC-32.

    ``status``: ``ok``, ``mismatch``, ``disabled`` (CRC field 0 on non-empty
    data: the writer had CRC writing turned off, not damage), ``truncated``
    (the file ends inside the entry) or ``skipped`` (a compressed entry;
    torch never writes those).
    """

    name: str
    expected: int
    actual: int
    status: str


def check_crc(fileobj: BinaryIO, entries: Mapping[str, ZipEntry],
              chunk_size: int = 1 << 24) -> list[CrcResult]:
    """Stream every stored entry in ``entries`` and compare CRC-32s."""
    results = []
    for entry in entries.values():
        crc, done = 0, 0
        while done < entry.length:
            block = read_at(fileobj, entry.data_offset + done, min(chunk_size, entry.length - done))
            if not block:
                break
            crc = zlib.crc32(block, crc)
            done += len(block)
        results.append(CrcResult(entry.name, entry.crc, crc, _crc_status(entry, crc, done)))
    return results


def _crc_status(entry: ZipEntry, crc: int, done: int) -> str:
    """Classify a recomputed CRC."""
    if done < entry.length:
        return "truncated"
    if entry.compressed:
        return "skipped"
    if crc == entry.crc:
        return "ok"
    return "disabled" if entry.crc == 0 else "mismatch"


__all__ = [
    "TorchFile", "TorchTensor", "TensorBytes", "CrcResult", "ZipEntry",
    "inspect_torch_file", "tensor_bytes", "read_tensor_bytes", "read_tensor",
    "check_crc",
]
