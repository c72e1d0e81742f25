"""A torch zip's central directory and its ``data.pkl``, read with two or three range reads.

The structure check of a thousand checkpoints opens four thousand torch files; ``zipfile`` builds
a ``ZipInfo`` per entry (an optimizer file has one per tensor). Here the end-of-central-directory
record (zip64 too) is found in the file's last 64 KiB, the directory is walked with ``struct``,
and ``data.pkl`` (torch writes it first) is read with its local header in one read. Anything
unexpected returns None and the caller asks ``zipfile`` (whose verdict and error codes count).
"""

from __future__ import annotations

import struct
import zlib

from lastgood.readers.modelfiles.fsio import RangeFile
from lastgood.readers.tensors.errors import TorchFileError

EOCD, ZIP64_LOCATOR, ZIP64_EOCD, CENTRAL, LOCAL = (b"PK\x05\x06", b"PK\x06\x07", b"PK\x06\x06", b"PK\x01\x02",
                                                  b"PK\x03\x04")
TAIL = 65_536 + 22
SHORT_TAIL = 22 + 20 + 56  # end record, zip64 locator, zip64 end record
_CENTRAL = struct.Struct("<4s4x2H4x3I5H4xI")  # sig, flags, method, crc, csize, usize, n, x, c, disk, attr, offset
_LOCAL = struct.Struct("<4s22xHH")
_U32 = 0xFFFFFFFF


def data_pickle(f: RangeFile, max_bytes: int) -> bytes | None:
    """``<prefix>/data.pkl``'s bytes (CRC-32 checked), or None when the quick path does not apply.
    Raises TorchFileError ``TruncatedZip`` when the file ends before its central directory."""
    tail_start = max(0, f.size - SHORT_TAIL)  # no archive comment (torch writes none): the records end the file
    tail = f.read(tail_start, f.size - tail_start)
    if tail[-22:-18] != EOCD:
        tail_start = max(0, f.size - TAIL)
        tail = f.read(tail_start, f.size - tail_start)
    at = tail.rfind(EOCD)
    if at < 0 or len(tail) - at < 22:
        raise TorchFileError("TruncatedZip", "no zip central directory (the file ends before it was written)")
    count, cd_size, cd_offset = struct.unpack_from("<10xHII", tail, at)
    if count == 0xFFFF or cd_size == _U32 or cd_offset == _U32:
        found = _zip64(f, tail, tail_start, at)
        if found is None:
            return None
        count, cd_size, cd_offset = found
    if cd_offset + cd_size > f.size or count == 0:
        return None
    directory = tail[cd_offset - tail_start:cd_offset - tail_start + cd_size] if cd_offset >= tail_start \
        else f.read(cd_offset, cd_size)
    entry = _first_pickle(directory, count)
    if entry is None:
        return None
    crc, csize, offset, name, method = entry
    if method != 0 or csize > max_bytes:
        return None
    return _read_stored(f, offset, name, csize, crc)


def _zip64(f: RangeFile, tail: bytes, tail_start: int, at: int) -> tuple[int, int, int] | None:
    if at < 20 or tail[at - 20:at - 16] != ZIP64_LOCATOR:
        return None
    (record,) = struct.unpack_from("<8xQ", tail, at - 20)
    head = tail[record - tail_start:record - tail_start + 56] if record >= tail_start else f.read(record, 56)
    if len(head) < 56 or head[:4] != ZIP64_EOCD:
        return None
    count, size, offset = struct.unpack_from("<32xQQQ", head)
    return count, size, offset


def _first_pickle(directory: bytes, count: int) -> tuple[int, int, int, bytes, int] | None:
    """(crc, size, local header offset, name, method) of ``<prefix>/data.pkl``, the prefix being
    the first entry's folder (as torch reads it)."""
    pos, prefix = 0, None
    for _ in range(count):
        if directory[pos:pos + 4] != CENTRAL or pos + 46 > len(directory):
            return None
        _sig, _flags, method, crc, csize, _usize, n, x, c, _disk, _attr, offset = _CENTRAL.unpack_from(directory, pos)
        name = directory[pos + 46:pos + 46 + n]
        if csize == _U32 or offset == _U32:
            return None  # zip64 sizes inside the entry: zipfile reads those
        if prefix is None:
            if b"/" not in name:
                return None
            prefix = name.split(b"/", 1)[0]
        if name == prefix + b"/data.pkl":
            return crc, csize, offset, name, method
        pos += 46 + n + x + c
    return None


def _read_stored(f: RangeFile, offset: int, name: bytes, size: int, crc: int) -> bytes | None:
    guess = 30 + len(name) + 128 + size
    block = f.read(offset, guess)
    if len(block) < 30 or block[:4] != LOCAL:
        return None
    _sig, n, x = _LOCAL.unpack_from(block)
    if block[30:30 + n] != name:
        return None
    start = 30 + n + x
    data = block[start:start + size] if start + size <= len(block) else f.read(offset + start, size)
    if len(data) != size:
        return None
    if crc and zlib.crc32(data) != crc:
        raise TorchFileError("CrcMismatch", f"{name.decode('utf-8', 'replace')} fails its CRC-32")
    return data
