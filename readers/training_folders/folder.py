"""A training-checkpoint store folder on any fsspec URL: walk it, read ranges of its files.

Local folders are walked with ``os.scandir`` without following links: a link is listed as one
(``kind == "link"``) and read only when it resolves inside the store. Other filesystems are walked
with ``fs.find`` (they have no links). Files are read by range (:meth:`Folder.open` gives a seekable
file object; remote ones fetch blocks on demand), so a listing or a check never holds a whole
checkpoint in memory.
"""

from __future__ import annotations

import io
import os
import posixpath
import stat
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import IO, Any

from lastgood import limits
from lastgood.errors import NotAFile, StoreNotFound, UnsafePath
from lastgood.readers.common.fsinfo import info_mtime
from lastgood.readers.common.fsutil import (full_fs, inside, is_local, local_file_size, open_fs, read_bounded,
                                            real_root, safe_join)
from lastgood.readers.training_folders import LASTGOOD_DIR

MAX_WALK_ENTRIES = 2_000_000  # entries one walk lists at most (a pathological folder)
REMOTE_BLOCK = 1 << 20  # block size of remote range reads


@dataclass(frozen=True, slots=True)
class Entry:
    """One walked entry: ``rel`` is its path under the store root (posix); ``parent`` and ``name``
    its two halves."""

    rel: str
    kind: str  # "file" | "dir" | "link" (local symlink) | "other" (FIFO, device…)
    size: int | None = None
    mtime: float | None = None  # seconds since the epoch
    parent: str = field(init=False, compare=False)
    name: str = field(init=False, compare=False)

    def __post_init__(self) -> None:
        parent, _, name = self.rel.rpartition("/")
        object.__setattr__(self, "parent", parent)
        object.__setattr__(self, "name", name)

    @property
    def stamp(self) -> str:
        return f"{self.kind}:{self.size}:{self.mtime}"


class Folder:
    """The store at ``url``: a folder, or (``allow_file``) one file whose folder is the root."""

    def __init__(self, url: str, storage_options: Mapping[str, Any] | None = None, *,
                 allow_file: bool = False) -> None:
        self.url = url
        self.fs, root = open_fs(url, storage_options)
        self.only: str | None = None  # the one file of a single-file store
        if not self.fs.isdir(root):
            if not (allow_file and _is_file(self.fs, root)):
                raise StoreNotFound(f"store not found: {url} (no such folder)")
            root, self.only = posixpath.dirname(root) or "/", posixpath.basename(root)
        self.root = root
        self.local = is_local(self.fs)
        self.root_real = real_root(self.fs, root)

    # ---- paths -----------------------------------------------------------------------------

    def path(self, rel: str) -> str:
        """The full path of ``rel``; refuses a path leaving the store."""
        return safe_join(self.root, rel)

    def exists(self, rel: str) -> bool:
        return bool(self.fs.exists(self.path(rel)))

    # ---- walking ---------------------------------------------------------------------------

    def walk(self, under: str = "", max_depth: int = 4, keep_hidden: frozenset[str] = frozenset(),
             skip_lastgood: bool = True, limit: int = MAX_WALK_ENTRIES) -> list[Entry]:
        """Entries under ``under`` (relative), ``max_depth`` levels deep; hidden names (and what is
        under them) are skipped except ``keep_hidden`` and, unless ``skip_lastgood``, ``.lastgood``."""
        if self.only is not None:
            return [e for e in [self.entry(self.only)] if e is not None]

        def shown(name: str) -> bool:
            return not name.startswith(".") or name in keep_hidden or (
                name == LASTGOOD_DIR and not skip_lastgood)
        start = self.path(under) if under else self.root
        walker = self._walk_local if self.local else self._walk_remote
        entries = []
        for entry in walker(start, under, max_depth, shown):
            entries.append(entry)
            if len(entries) >= limit:
                break
        return entries

    def _walk_local(self, start: str, under: str, max_depth: int, shown: Any) -> Iterator[Entry]:
        stack = [(start, under, 1)]
        while stack:
            path, rel, depth = stack.pop()
            try:
                with os.scandir(path) as scan:
                    found = [e for e in scan if shown(e.name)]
            except (FileNotFoundError, NotADirectoryError, PermissionError):
                continue
            prefix = f"{rel}/" if rel else ""
            for item in found:
                entry = _local_entry(item, prefix + item.name)
                yield entry
                if entry.kind == "dir" and depth < max_depth:
                    stack.append((item.path, entry.rel, depth + 1))

    def _walk_remote(self, start: str, under: str, max_depth: int, shown: Any) -> Iterator[Entry]:
        try:
            found = self.fs.find(start, maxdepth=max_depth, withdirs=True, detail=True)
        except FileNotFoundError:
            return
        prefix = self.root.rstrip("/") + "/"
        skip = len(under.split("/")) if under else 0
        for path, info in sorted(found.items()):
            path = path.rstrip("/")
            if not path.startswith(prefix):
                continue
            rel = path[len(prefix):]
            if all(shown(part) for part in rel.split("/")[skip:]):
                yield _remote_entry(rel, info)

    def entry(self, rel: str) -> Entry | None:
        """One entry (None when it does not exist)."""
        path = self.path(rel)
        if self.local:
            try:
                info = os.lstat(path)
            except (FileNotFoundError, NotADirectoryError):
                return None
            return Entry(rel, _kind(info.st_mode), info.st_size, info.st_mtime)
        try:
            return _remote_entry(rel, self.fs.info(path))
        except FileNotFoundError:
            return None

    def listdir(self, rel: str) -> list[Entry]:
        """The entries directly in folder ``rel`` (hidden ones included)."""
        path = self.path(rel) if rel else self.root
        if self.local:
            try:
                with os.scandir(path) as scan:
                    return [_local_entry(e, f"{rel}/{e.name}" if rel else e.name) for e in scan]
            except (FileNotFoundError, NotADirectoryError):
                return []
        try:
            found = self.fs.ls(path, detail=True)
        except FileNotFoundError:
            return []
        return [_remote_entry(f"{rel}/{posixpath.basename(i['name'].rstrip('/'))}" if rel
                              else posixpath.basename(i["name"].rstrip("/")), i) for i in found]

    # ---- links -----------------------------------------------------------------------------

    def link_target(self, rel: str) -> str | None:
        """The store-relative path a local link resolves to; UnsafePath when it leaves the store."""
        if not self.local:
            return None
        real = os.path.realpath(self.path(rel))
        if not self.root_real or not inside(real, self.root_real):
            raise UnsafePath(f"{rel} is a link leading out of the store")
        return os.path.relpath(real, self.root_real).replace(os.sep, "/")

    # ---- reading ---------------------------------------------------------------------------

    def size(self, rel: str) -> int:
        """The size of a store file (a local link is followed only inside the store)."""
        path = self.path(rel)
        if self.local:
            return local_file_size(path, self.root_real or self.root)
        info = self.fs.info(path)
        if info.get("type", "file") != "file":
            raise NotAFile(f"{rel} is not a file ({info.get('type')})")
        return int(info.get("size") or 0)

    def open(self, rel: str) -> IO[bytes]:
        """A seekable binary file object of a store file, read by range."""
        path = self.path(rel)
        if self.local:
            local_file_size(path, self.root_real or self.root)  # refuses links out, FIFOs, devices
            real = os.path.realpath(path)
            if self.root_real and not inside(real, self.root_real):
                raise UnsafePath(f"{rel} resolves outside the store root")
            return open(real, "rb")  # noqa: SIM115 - the caller closes it
        return full_fs(self.fs).open(path, "rb", block_size=REMOTE_BLOCK, cache_type="bytes")

    def read_small(self, rel: str, limit: int = limits.MAX_SMALL_FILE_BYTES) -> bytes:
        """The bytes of a small store file (bounded; links out of the store refused)."""
        return read_bounded(self.fs, self.path(rel), limit, self.root_real)

    def read_range(self, rel: str, start: int, length: int) -> bytes:
        with self.open(rel) as handle:
            handle.seek(start)
            return handle.read(length)


class Window(io.RawIOBase):
    """Bytes ``[start, start + length)`` of a file object, as a file object of their own (a DCP
    item: one torch.save zip inside a ``.distcp`` file)."""

    def __init__(self, base: IO[bytes], start: int, length: int) -> None:
        super().__init__()
        self.base, self.start, self.length, self.pos = base, start, length, 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self.pos

    def seek(self, offset: int, whence: int = 0) -> int:
        base = {0: 0, 1: self.pos, 2: self.length}[whence]
        self.pos = max(0, base + offset)
        return self.pos

    def read(self, size: int | None = -1) -> bytes:
        left = max(0, self.length - self.pos)
        size = left if size is None or size < 0 else min(size, left)
        if size == 0:
            return b""
        self.base.seek(self.start + self.pos)
        data = self.base.read(size)
        self.pos += len(data)
        return data

    def readinto(self, buffer: Any) -> int:
        data = self.read(len(buffer))
        buffer[: len(data)] = data
        return len(data)


def _is_file(fs: Any, path: str) -> bool:
    try:
        return bool(fs.isfile(path))
    except OSError:
        return False


_KINDS = {stat.S_IFREG: "file", stat.S_IFDIR: "dir", stat.S_IFLNK: "link"}


def _kind(mode: int) -> str:
    return _KINDS.get(stat.S_IFMT(mode), "other")


def _local_entry(item: os.DirEntry[str], rel: str) -> Entry:
    try:
        info = item.stat(follow_symlinks=False)
    except FileNotFoundError:
        return Entry(rel, "other")
    return Entry(rel, _kind(info.st_mode), info.st_size, info.st_mtime)


def _remote_entry(rel: str, info: Mapping[str, Any]) -> Entry:
    kind = "dir" if info.get("type") == "directory" else "file"
    size = info.get("size")
    return Entry(rel, kind, int(size) if isinstance(size, (int, float)) else None, info_mtime(info))


def as_datetime(seconds: float | None) -> datetime:
    """A tz-aware UTC datetime from epoch seconds (the epoch when unknown)."""
    if seconds is None:
        return datetime(1970, 1, 1, tzinfo=UTC)
    return datetime.fromtimestamp(seconds, tz=UTC)
