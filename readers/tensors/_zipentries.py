"""Zip central directory + local headers → absolute data offsets of entries.

``zipfile`` parses the central directory (zip64 included); each entry's local
header is then read here, because the data offset depends on the local extra
field, which torch uses to align storages to 64 bytes.
"""

from __future__ import annotations

import struct
import zipfile
from dataclasses import dataclass
from typing import BinaryIO

from .errors import TensorsError, TorchFileError

_LOCAL = struct.Struct("<4s5H3L2H")


@dataclass(frozen=True)
class ZipEntry:
    """One zip member: where its (stored) bytes are and their recorded CRC-32."""

    name: str
    header_offset: int
    data_offset: int
    length: int
    file_size: int
    crc: int
    compressed: bool


def read_at(fileobj: BinaryIO, offset: int, size: int) -> bytes:
    """Read up to ``size`` bytes at absolute ``offset`` (short at end of file)."""
    if offset < 0 or size < 0:
        raise TorchFileError("EntryOutOfBounds", f"bad range {offset}+{size}")
    fileobj.seek(offset)
    return fileobj.read(size)


def _open_zip(fileobj: BinaryIO) -> zipfile.ZipFile:
    """Parse the central directory, mapping zipfile's failures to our codes."""
    try:
        return zipfile.ZipFile(fileobj)
    except zipfile.BadZipFile as exc:
        text = str(exc)
        truncated = "not a zip file" in text or "Truncated" in text
        code = "TruncatedZip" if truncated else "BadZip"
        raise TorchFileError(code, f"zip central directory unreadable: {text}") from None
    except OSError:
        raise
    except Exception as exc:  # struct.error, ValueError, UnicodeDecodeError, …
        raise TorchFileError("BadZip", f"zip central directory unreadable: {exc}") from None


def _local_entry(fileobj: BinaryIO, size: int, info: zipfile.ZipInfo) -> ZipEntry:
    """Read ``info``'s local header and return its :class:`ZipEntry`."""
    head = read_at(fileobj, info.header_offset, _LOCAL.size)
    if len(head) != _LOCAL.size:
        raise TorchFileError("BadLocalHeader", f"{info.filename}: local header cut short")
    fields = _LOCAL.unpack(head)
    if fields[0] != b"PK\x03\x04":
        raise TorchFileError("BadLocalHeader", f"{info.filename}: bad local header signature")
    name_len, extra_len = fields[9], fields[10]
    encoding = "utf-8" if info.flag_bits & 0x800 else "cp437"
    name = read_at(fileobj, info.header_offset + _LOCAL.size, name_len)
    if name != info.orig_filename.encode(encoding, "replace"):
        raise TorchFileError("BadLocalHeader", f"{info.filename}: local name differs")
    data_offset = info.header_offset + _LOCAL.size + name_len + extra_len
    if data_offset + info.compress_size > size:
        raise TorchFileError("EntryOutOfBounds", f"{info.filename}: data runs past end of file")
    return ZipEntry(info.filename, info.header_offset, data_offset, info.compress_size,
                    info.file_size, info.CRC, info.compress_type != zipfile.ZIP_STORED)


def list_entries(fileobj: BinaryIO, size: int) -> dict[str, ZipEntry]:
    """All entries of the zip in ``fileobj`` (``size`` bytes), in directory order.

    Raises ``TorchFileError`` with code ``TruncatedZip`` (no or cut central
    directory), ``BadZip``, ``DuplicateEntry``, ``BadLocalHeader`` or
    ``EntryOutOfBounds``.
    """
    with _open_zip(fileobj) as archive:
        infos = archive.infolist()
    entries: dict[str, ZipEntry] = {}
    for info in infos:
        if info.filename in entries:
            raise TorchFileError("DuplicateEntry", f"{info.filename} appears twice")
        try:
            entries[info.filename] = _local_entry(fileobj, size, info)
        except (TensorsError, OSError):
            raise
        except Exception as exc:  # struct.error, UnicodeEncodeError, …
            raise TorchFileError("BadLocalHeader", f"{info.filename}: {exc}") from None
    return entries
