"""Checksums recorded beside a checkpoint's files, when there are any.

Neither safetensors, ``torch.save``, Trainer nor DeepSpeed records a checksum of a file. Some
folders carry one anyway: a ``SHA256SUMS`` (or ``sha256sums.txt``) file in ``sha256sum``'s
format, a ``<file>.sha256`` beside the file, or — in a Hugging Face cache snapshot — a link to
``blobs/<sha256>`` (the Hub names large files by their sha256). A data check compares the sha256
it streams with these; without one, a flipped byte in tensor data is caught only by a zip CRC-32
(torch files) or when it turns a value into NaN/Inf.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping

from lastgood.errors import ReaderError
from lastgood.readers.modelfiles.fsio import FILE, Entry, Folder, join

SUM_FILES = ("SHA256SUMS", "sha256sums.txt", "SHA256SUMS.txt")
MAX_SUMS_BYTES = 1024 * 1024
_LINE = re.compile(r"^([0-9a-fA-F]{64}) [ *]?(.+)$")
_HEX64 = re.compile(r"^[0-9a-f]{64}$")


def recorded_sha256(folder: Folder, rel: str, entries: Mapping[str, Entry]) -> dict[str, str]:
    """``{file name: sha256 hex}`` recorded for ``entries`` (files of the folder ``rel``). The sum
    files are looked for in the folder's listing, not only among ``entries``: a checkpoint that is
    one file of a folder (a plain ``.safetensors``, a model without its config) has them beside it."""
    listed = folder.listdir(rel)
    found: dict[str, str] = {}
    for name in SUM_FILES:
        entry = entries.get(name) or listed.get(name)
        if entry is not None and entry.kind == FILE:
            found.update(_sum_file(folder, join(rel, name)))
    for name in entries:
        side = entries.get(name + ".sha256") or listed.get(name + ".sha256")
        if side is not None and side.kind == FILE:
            text = _text(folder, join(rel, name + ".sha256"))
            digest = text.split()[0].lower() if text.split() else ""
            if _HEX64.match(digest):
                found[name] = digest
    if folder.local:
        found.update(_hub_blobs(folder, rel, entries, found))
    return found


def _sum_file(folder: Folder, rel: str) -> dict[str, str]:
    out = {}
    for line in _text(folder, rel).splitlines():
        match = _LINE.match(line.strip())
        if match:
            out[match[2].strip().removeprefix("./")] = match[1].lower()
    return out


def _text(folder: Folder, rel: str) -> str:
    try:
        return folder.read_small(rel, MAX_SUMS_BYTES).decode("utf-8", "replace")
    except (OSError, ReaderError):
        return ""


def _hub_blobs(folder: Folder, rel: str, entries: Mapping[str, Entry], known: Mapping[str, str]) -> dict[str, str]:
    """Links into a Hub cache's ``blobs/`` folder whose name is a sha256 (large files)."""
    out = {}
    for name in entries:
        if name in known:
            continue
        path = folder.path(join(rel, name))
        if os.path.islink(path):
            target = os.path.basename(os.readlink(path))
            if _HEX64.match(target) and os.path.basename(os.path.dirname(os.readlink(path))) == "blobs":
                out[name] = target
    return out
