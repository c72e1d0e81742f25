"""The data-depth pass: each file read once, in bounded chunks.

One sequential read of a file feeds, chunk by chunk (1 MiB, cache-resident):

- the file's sha256, when the folder records one to compare it with (a ``SHA256SUMS`` file,
  ``<file>.sha256`` beside it, or a Hugging Face cache blob named by its sha256 — the formats
  themselves record none). Without a recorded checksum the file's digest would be compared with
  nothing and kept nowhere: it is not computed (a second pass of sha256 over every byte, a third of
  the scan's time; the tensors' own sha256, below, cover their bytes);
- the CRC-32 of every zip entry of a torch file (what ``torchzip.check_crc`` computes, in the
  same pass instead of a second read);
- the statistics (``TensorStats``: NaN/±Inf, zeros, min/max/mean/std/norm) and the sha256 of
  every tensor whose bytes lie in the file, split at element boundaries across chunks.

Memory stays at a few chunks whatever the file size. Strided torch views (not one byte range)
are read on their own afterwards, up to :data:`MAX_STRIDED_BYTES`.
"""

from __future__ import annotations

import hashlib
import zlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from lastgood.readers.modelfiles.fsio import RangeFile
from lastgood.readers.tensors import dtypes
from lastgood.readers.tensors.stats import TensorStats
from lastgood.readers.tensors.torchzip import ZipEntry

MAX_STRIDED_BYTES = 256 * 1024 * 1024


@dataclass
class TensorScan:
    """One tensor being read: where its bytes are, what they add up to."""

    name: str
    dtype: str
    shape: tuple[int, ...]
    start: int
    end: int
    stats: TensorStats | None = None
    digest: object = None
    carry: bytearray = field(default_factory=bytearray)
    decodable: bool = True

    def __post_init__(self) -> None:
        self.digest = hashlib.sha256()
        self.decodable = dtypes.is_decodable(self.dtype) and self.dtype not in ("C32", "C64", "C128") \
            and dtypes.bits(self.dtype) % 8 == 0
        self.stats = TensorStats() if self.decodable else None

    @property
    def numel(self) -> int:
        count = 1
        for dim in self.shape:
            count *= dim
        return count

    @property
    def sha256(self) -> str:
        return self.digest.hexdigest()  # type: ignore[attr-defined]

    def feed(self, piece: memoryview) -> None:
        self.digest.update(piece)  # type: ignore[attr-defined]
        if self.stats is None:
            return
        size = dtypes.itemsize(self.dtype)
        if self.carry:
            need = size - len(self.carry)
            self.carry += piece[:need]
            piece = piece[need:]
            if len(self.carry) < size:
                return
            self.stats.update_bytes(bytes(self.carry), self.dtype)
            self.carry.clear()
        usable = len(piece) - len(piece) % size
        if usable:
            self.stats.update_bytes(piece[:usable], self.dtype)
        if usable < len(piece):
            self.carry += piece[usable:]


@dataclass
class EntryCrc:
    entry: ZipEntry
    crc: int = 0
    done: int = 0

    @property
    def status(self) -> str:
        """As ``torchzip.CrcResult.status``: ok, mismatch, disabled, truncated, skipped."""
        if self.done < self.entry.length:
            return "truncated"
        if self.entry.compressed:
            return "skipped"
        if self.crc == self.entry.crc:
            return "ok"
        return "disabled" if self.entry.crc == 0 else "mismatch"


@dataclass
class FileScan:
    """What one pass over a file found."""

    rel: str
    size: int
    read: int = 0
    sha256: str | None = None  # None: not asked for (no recorded checksum to compare with)
    tensors: list[TensorScan] = field(default_factory=list)
    crcs: list[EntryCrc] = field(default_factory=list)


def scan_file(f: RangeFile, rel: str, tensors: Iterable[TensorScan] = (),
              entries: Mapping[str, ZipEntry] | None = None, file_sha256: bool = True) -> FileScan:
    """Read ``f`` once: the zip entries' CRC-32s, every tensor's stats and sha256, and the file's
    sha256 when ``file_sha256`` (else ``FileScan.sha256`` stays None)."""
    result = FileScan(rel, f.size, tensors=sorted(tensors, key=lambda t: (t.start, t.end)))
    result.crcs = [EntryCrc(e) for e in sorted((entries or {}).values(), key=lambda e: e.data_offset)]
    digest = hashlib.sha256() if file_sha256 else None
    spans = _Spans(result.tensors, result.crcs)
    offset = 0
    for chunk in f.stream():
        if digest is not None:
            digest.update(chunk)
        spans.feed(offset, chunk)
        offset += len(chunk)
    result.read = offset
    result.sha256 = digest.hexdigest() if digest is not None else None
    return result


class _Spans:
    """Byte ranges (tensors, zip entries) sorted by start, fed the chunks that overlap them."""

    def __init__(self, tensors: list[TensorScan], crcs: list[EntryCrc]) -> None:
        self.items: list[tuple[int, int, TensorScan | EntryCrc]] = sorted(
            [(t.start, t.end, t) for t in tensors] + [(c.entry.data_offset, c.entry.data_offset + c.entry.length, c)
                                                        for c in crcs], key=lambda item: (item[0], item[1]))
        self.next = 0
        self.active: list[tuple[int, int, TensorScan | EntryCrc]] = []

    def feed(self, offset: int, chunk: memoryview) -> None:
        end = offset + len(chunk)
        while self.next < len(self.items) and self.items[self.next][0] < end:
            self.active.append(self.items[self.next])
            self.next += 1
        if not self.active:
            return
        still = []
        for start, stop, item in self.active:
            lo, hi = max(start, offset), min(stop, end)
            if lo < hi:
                piece = chunk[lo - offset:hi - offset]
                if isinstance(item, EntryCrc):
                    item.crc = zlib.crc32(piece, item.crc)
                    item.done += len(piece)
                else:
                    item.feed(piece)
            if stop > end:
                still.append((start, stop, item))
        self.active = still
