"""One ``torch.save`` zip as Lastgood sees it, on top of :mod:`lastgood.readers.tensors`.

Shared by the torch-files, lightning and torch-dcp readers (a Lightning ``.ckpt`` is a torch zip,
and so is every item of a DCP ``.distcp`` file):

- :func:`inspect`: the file's zip layout and pickle, walked with the allowlist — never unpickled;
  a global outside the allowlist raises ``UnsafeGlobal`` before anything is built;
- :func:`problem`: a ``TensorsError`` (or an I/O failure) as the check and message of a finding;
- :func:`plain_state`: the pickled object as plain data — numbers, strings, containers; a tensor as
  ``{dtype, shape}`` (plus ``value`` for a one-element tensor when a scalar reader is given);
- :func:`tensor_entries` / :func:`tensor_chunks`: the tensors and their bytes, by range, in chunks;
- :func:`crc_findings` / :func:`summaries`: the data-depth checks — every entry's CRC-32, and per
  tensor the statistics (:class:`TensorSummary`) with NaN/Inf and all-zero warnings.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import IO, Any

from lastgood import limits
from lastgood.checks import Check
from lastgood.errors import DecodeError, NotAFile, TooLarge, UnsafePath
from lastgood.readers.base import CheckpointRecord, Finding, TensorEntry, TensorSummary
from lastgood.readers.tensors import dtypes
from lastgood.readers.tensors.errors import (DtypeError, PickleError, PickleTooLarge, TensorsError, TorchFileError,
                                             UnsafeGlobal)
from lastgood.readers.tensors.pickle_walk import GlobalRef, PlainObject
from lastgood.readers.tensors.stats import TensorStats, iter_chunks, iter_range_chunks
from lastgood.readers.tensors.torch_pickle import StorageRef, TensorRef
from lastgood.readers.tensors.torchzip import (TorchFile, TorchTensor, check_crc, inspect_torch_file,
                                               read_tensor_bytes, tensor_bytes)

LEGACY_MESSAGE = "legacy non-zip torch format: not decoded"
MAX_SCALARS = 512  # one-element tensors whose value a state shows (the rest: dtype and shape)
MAX_LISTED = 5  # tensor names a warning lists
CHUNK_BYTES = 1 << 20

# TorchFileError codes -> the check a finding names
_FILE_CHECKS = {
    "TruncatedZip": Check.INCOMPLETE, "MissingStorage": Check.BLOB_MISSING,
    "StorageTooSmall": Check.SIZE_MISMATCH, "EntryOutOfBounds": Check.SIZE_MISMATCH,
    "TensorOutOfBounds": Check.SIZE_MISMATCH, "CrcMismatch": Check.CRC_MISMATCH,
}


def inspect(handle: IO[bytes], size: int) -> TorchFile:
    """The torch file's layout and tensors (``TorchFile.legacy`` for the pre-zip format)."""
    return inspect_torch_file(handle, size)


def problem(exc: BaseException) -> tuple[Check, str]:
    """The check and message of a finding for a file that could not be inspected or read."""
    if isinstance(exc, DecodeError):
        return exc.check, str(exc)
    if isinstance(exc, UnsafeGlobal):
        return Check.UNSAFE_PICKLE, f"unsafe pickle: {exc.message}; nothing of this file was decoded"
    if isinstance(exc, PickleTooLarge):
        return Check.TOO_LARGE, f"pickle too large: {exc.message}"
    if isinstance(exc, TorchFileError):
        check = _FILE_CHECKS.get(exc.code, Check.TORCH_FILE)
        if check is Check.INCOMPLETE:
            return check, f"truncated: {exc.message} (the save did not finish or the file was cut)"
        return check, f"{exc.code}: {exc.message}"
    if isinstance(exc, (PickleError, DtypeError, TensorsError)):
        return Check.UNDECODABLE, f"{exc.code}: {exc.message}"
    if isinstance(exc, FileNotFoundError):
        return Check.BLOB_MISSING, "the file is gone"
    if isinstance(exc, UnsafePath):
        return Check.UNSAFE_PATH, str(exc)
    if isinstance(exc, NotAFile):
        return Check.NOT_A_FILE, str(exc)
    if isinstance(exc, TooLarge):
        return Check.TOO_LARGE, str(exc)
    return Check.UNDECODABLE, f"{type(exc).__name__}: {exc}"


def finding(exc: BaseException, record: CheckpointRecord, prefix: str = "") -> Finding:
    check, message = problem(exc)
    return Finding(check, "error", prefix + message, record.run_id, record.namespace, record.checkpoint_id)


def decode_error(exc: BaseException, prefix: str = "") -> DecodeError:
    check, message = problem(exc)
    return DecodeError(prefix + message, check)


def legacy_finding(record: CheckpointRecord, prefix: str = "") -> Finding:
    return Finding(Check.TORCH_FILE, "warning", prefix + LEGACY_MESSAGE, record.run_id, record.namespace,
                   record.checkpoint_id)


# ---- state ------------------------------------------------------------------------------------


ScalarReader = Callable[[TensorRef], Any]


def scalar_reader(handle: IO[bytes], tf: TorchFile) -> ScalarReader:
    """Reads the value of a one-element tensor of ``tf`` (at most :data:`MAX_SCALARS` per state)."""
    by_ref = {t.ref: t for t in tf.tensors}
    budget = [MAX_SCALARS]

    def read(ref: TensorRef) -> Any:
        tensor = by_ref.get(ref)
        if tensor is None or budget[0] <= 0 or ref.numel != 1 or not dtypes.is_decodable(ref.dtype):
            return None
        budget[0] -= 1
        try:
            raw = read_tensor_bytes(handle, tensor)
            value = dtypes.decode(raw, ref.dtype)[0].item()
        except (TensorsError, OSError, ValueError):
            return None
        return str(value) if isinstance(value, complex) else value
    return read


def plain_state(root: Any, scalars: ScalarReader | None = None) -> Any:
    """The pickled object as plain JSON-like data (bounded by lastgood.limits)."""
    budget = [limits.MAX_STATE_COST]
    return _plain(root, scalars, 0, budget)


def _plain(value: Any, scalars: ScalarReader | None, depth: int, budget: list[int]) -> Any:
    budget[0] -= 1
    if depth > limits.MAX_DEPTH or budget[0] < 0:
        return {"$not_shown": "too deep" if depth > limits.MAX_DEPTH else "too large"}
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, TensorRef):
        return tensor_value(value, scalars)
    if isinstance(value, StorageRef):
        return {"storage": value.key, "dtype": value.dtype, "numel": value.numel}
    if isinstance(value, GlobalRef):
        return value.name
    if isinstance(value, (bytes, bytearray)):
        return {"$bytes": len(value)}
    if isinstance(value, complex):
        return str(value)
    if isinstance(value, PlainObject):
        return {"__class__": value.get("__class__"),
                **{k: _plain(value.get(k), scalars, depth + 1, budget) for k in ("args", "state")
                   if value.get(k) is not None}}
    if isinstance(value, Mapping):
        return {_key(k): _plain(v, scalars, depth + 1, budget) for k, v in value.items()}
    if isinstance(value, (set, frozenset)):
        return [_plain(v, scalars, depth + 1, budget) for v in sorted(value, key=repr)]
    if isinstance(value, (list, tuple)):
        return [_plain(v, scalars, depth + 1, budget) for v in value]
    return repr(value)[:200]


def tensor_value(ref: TensorRef, scalars: ScalarReader | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {"dtype": ref.dtype, "shape": list(ref.shape)}
    if scalars is not None and ref.numel == 1:
        value = scalars(ref)
        if value is not None:
            out["value"] = value
    return out


def _key(key: Any) -> str:
    if isinstance(key, str):
        return key
    if isinstance(key, (int, float, bool)) or key is None:
        return str(key)
    if isinstance(key, GlobalRef):
        return key.name
    return repr(key)[:200]


# ---- tensors ----------------------------------------------------------------------------------


def tensor_name(tensor: TorchTensor, prefix: str = "") -> str:
    name = tensor.name or "tensor"
    return f"{prefix}{name}" if prefix else name


def tensor_entries(tf: TorchFile, file_rel: str, base: int = 0, prefix: str = "") -> list[TensorEntry]:
    """Every tensor of ``tf`` (``base``: where the zip starts in ``file_rel``)."""
    out = []
    for tensor in tf.tensors:
        ref = tensor.ref
        span = tensor_bytes(tensor)
        out.append(TensorEntry(tensor_name(tensor, prefix), ref.dtype, tuple(ref.shape),
                               dtypes.nbytes(ref.dtype, ref.numel), file_rel,
                               base + span.start if ref.is_contiguous else None))
    return out


def find_tensor(tf: TorchFile, name: str, prefix: str = "") -> TorchTensor:
    for tensor in tf.tensors:
        if tensor_name(tensor, prefix) == name:
            return tensor
    raise DecodeError(f"no tensor {name!r} in this checkpoint", Check.MISSING)


def tensor_chunks(handle: IO[bytes], tensor: TorchTensor, chunk_bytes: int = CHUNK_BYTES
                  ) -> Iterator[bytes | memoryview]:
    """The tensor's bytes in C order, in chunks of about ``chunk_bytes`` (a contiguous tensor is
    read range by range; a strided view is gathered first)."""
    ref = tensor.ref
    if ref.numel == 0:
        return
    if ref.is_contiguous:
        span = tensor_bytes(tensor)
        length = dtypes.nbytes(ref.dtype, ref.numel)

        def read_range(offset: int, size: int) -> bytes:
            handle.seek(offset)
            return handle.read(size)
        yield from iter_range_chunks(read_range, span.start, span.start + length, _chunk_dtype(ref.dtype),
                                     chunk_bytes)
        return
    yield from iter_chunks(read_tensor_bytes(handle, tensor),
                           _chunk_dtype(ref.dtype), chunk_bytes)


def _chunk_dtype(dtype: str) -> str:
    """A dtype whose element size splits chunks (sub-byte dtypes: by byte)."""
    try:
        dtypes.itemsize(dtype)
        return dtype
    except DtypeError:
        return "U8"


# ---- data-depth checks ------------------------------------------------------------------------


def crc_findings(handle: IO[bytes], tf: TorchFile, record: CheckpointRecord,
                 chunk_bytes: int = CHUNK_BYTES, prefix: str = "") -> list[Finding]:
    """Every zip entry's CRC-32 recomputed; mismatches and cut entries as findings."""
    out = []
    for result in check_crc(handle, tf.entries, chunk_bytes):
        if result.status == "mismatch":
            out.append(Finding(Check.CRC_MISMATCH, "error",
                               f"{prefix}{result.name}: CRC-32 {result.actual:08x}, the zip records "
                               f"{result.expected:08x} (the bytes changed after the save)",
                               record.run_id, record.namespace, record.checkpoint_id))
        elif result.status == "truncated":
            out.append(Finding(Check.SIZE_MISMATCH, "error", f"{prefix}{result.name}: the file ends inside it",
                               record.run_id, record.namespace, record.checkpoint_id))
    return out


def summary(handle: IO[bytes], tensor: TorchTensor, record: CheckpointRecord, name: str,
            chunk_bytes: int = CHUNK_BYTES) -> TensorSummary:
    """One tensor read whole, chunk by chunk: statistics and the sha256 of its bytes."""
    ref = tensor.ref
    stats, digest = TensorStats(), hashlib.sha256()
    numeric = dtypes.is_decodable(ref.dtype) and ref.dtype not in ("C32", "C64", "C128")
    for chunk in tensor_chunks(handle, tensor, chunk_bytes):
        digest.update(chunk)
        if numeric:
            stats.update_bytes(chunk, ref.dtype)
    return summary_of(record, name, ref.dtype, tuple(ref.shape), ref.numel, stats if numeric else None,
                      digest.hexdigest())


def summary_of(record: CheckpointRecord, name: str, dtype: str, shape: tuple[int, ...], numel: int,
               stats: TensorStats | None, sha256: str | None) -> TensorSummary:
    if stats is None:
        return TensorSummary(record.run_id, record.checkpoint_id, name, dtype, shape, record.namespace,
                             numel=numel, sha256=sha256)
    done = stats.as_dict()
    return TensorSummary(record.run_id, record.checkpoint_id, name, dtype, shape, record.namespace,
                         numel=numel, nan=stats.nan, posinf=stats.posinf, neginf=stats.neginf,
                         zeros=stats.zeros, min=done["min"], max=done["max"], mean=done["mean"],
                         std=done["std"], norm=done["l2"], sha256=sha256)


def summaries(handle: IO[bytes], tf: TorchFile, record: CheckpointRecord, chunk_bytes: int = CHUNK_BYTES,
              prefix: str = "") -> Iterator[Finding | TensorSummary]:
    """A :class:`TensorSummary` per tensor, then the warnings about them (NaN/Inf, all zeros)."""
    found: list[TensorSummary] = []
    for tensor in tf.tensors:
        try:
            item = summary(handle, tensor, record, tensor_name(tensor, prefix), chunk_bytes)
        except (TensorsError, OSError) as exc:
            yield finding(exc, record, f"{tensor_name(tensor, prefix)}: ")
            continue
        found.append(item)
        yield item
    yield from tensor_warnings(found, record)


def tensor_warnings(found: Iterable[TensorSummary], record: CheckpointRecord) -> Iterator[Finding]:
    """One NaN/Inf warning and one all-zero warning per checkpoint, naming the tensors."""
    found = list(found)
    bad = [s for s in found if s.nan or s.posinf or s.neginf]
    if bad:
        named = ", ".join(f"{s.name} ({_counts(s)})" for s in bad[:MAX_LISTED])
        more = f" and {len(bad) - MAX_LISTED} more" if len(bad) > MAX_LISTED else ""
        yield Finding(Check.NON_FINITE, "warning", f"NaN or infinite values in {len(bad)} tensor(s): {named}{more}",
                      record.run_id, record.namespace, record.checkpoint_id)
    zero = [s for s in found if is_all_zero(s)]
    if zero:
        named = ", ".join(s.name for s in zero[:MAX_LISTED])
        more = f" and {len(zero) - MAX_LISTED} more" if len(zero) > MAX_LISTED else ""
        yield Finding(Check.ZERO_TENSOR, "warning", f"{len(zero)} weight matrix(es) hold only zeros: {named}{more}",
                      record.run_id, record.namespace, record.checkpoint_id)


def is_all_zero(s: TensorSummary) -> bool:
    """A floating matrix (2+ dimensions, 2+ elements) whose every value is 0: a weight that was
    never trained or was zeroed — biases, norms and counters start at zero legitimately."""
    floating = s.dtype.startswith(("F", "BF"))
    return floating and len(s.shape) >= 2 and s.numel >= 2 and s.zeros == s.numel


def _counts(s: TensorSummary) -> str:
    parts = [f"{n} {label}" for n, label in ((s.nan, "NaN"), (s.posinf, "+Inf"), (s.neginf, "-Inf")) if n]
    return ", ".join(parts)
