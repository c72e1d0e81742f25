"""A checkpoint folder on any fsspec URL: listings, bounded small reads, range reads, streams.

Local folders are read with ``os`` calls (``scandir``, ``pread``): a file is opened only after
its real path is found inside the store (a link leading out is refused) and found to be a
regular file. Other filesystems go through fsspec: one recursive ``find`` lists the whole store
(a thousand checkpoint folders on S3 in a few LIST requests, not one per folder), and reads are
ranged ``cat_file`` calls, so a header costs two small GETs and never the tensor bytes.
"""

from __future__ import annotations

import errno
import functools
import os
import posixpath
import stat
import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, BinaryIO

from lastgood.errors import NotAFile, UnsafePath
from lastgood.readers.common.fsinfo import info_mtime
from lastgood.readers.common.fsutil import inside, is_local, open_fs, read_bounded, real_root, require_dir, safe_join

DIR, FILE, OTHER = "dir", "file", "other"
LOCAL_CHUNK = 1 << 20  # a stream's chunks: cache-resident (hashing and statistics run on each)
REMOTE_CHUNK = 16 << 20  # one GET per chunk from an object store


@dataclass(frozen=True, slots=True)
class Entry:
    """One name in a folder listing (``size`` 0 for folders)."""

    name: str
    kind: str
    size: int
    mtime: float


class Folder:
    """The store root: cached listings and reads relative to it (``""`` is the root)."""

    def __init__(self, url: str, storage_options: Mapping[str, Any] | None = None) -> None:
        self.url = url
        self.fs, self.root = open_fs(url, storage_options)
        require_dir(self.fs, self.root, url)
        self.local = is_local(self.fs)
        self.root_real = real_root(self.fs, self.root)
        self._dirs: dict[str, dict[str, Entry]] = {}
        self._walked = False
        self._lock = threading.RLock()  # listings filled by several reading threads (object stores)

    @property
    def name(self) -> str:
        """The root folder's own name."""
        return posixpath.basename(self.root.rstrip("/")) or "."

    def path(self, rel: str) -> str:
        return self.root if not rel else safe_join(self.root, rel)

    def forget(self) -> None:
        """Drop cached listings (a new scan sees the folder as it is now)."""
        with self._lock:
            self._dirs.clear()
            self._walked = False

    # ---- listings ---------------------------------------------------------------------

    def listdir(self, rel: str = "") -> dict[str, Entry]:
        """``{name: Entry}`` of a folder ({} when it is not there)."""
        found = self._dirs.get(rel)
        if found is not None:
            return found
        with self._lock:  # a thread that finds a walk under way waits for it, never caches a gap
            found = self._dirs.get(rel)
            if found is None:
                if not self.local and not self._walked:
                    self.walk()
                    found = self._dirs.get(rel)
                if found is None:
                    found = self._local_list(rel) if self.local else {}
                self._dirs[rel] = found
        return found

    def entry(self, rel: str) -> Entry | None:
        parent, name = posixpath.split(rel)
        return self.listdir(parent).get(name)

    def _local_list(self, rel: str) -> dict[str, Entry]:
        out: dict[str, Entry] = {}
        try:
            with os.scandir(self.path(rel)) as entries:
                for item in entries:
                    out[item.name] = _local_entry(item)
        except (FileNotFoundError, NotADirectoryError, PermissionError):
            return {}
        return out

    def walk(self) -> None:
        """An object store: list everything under the root at once (fsspec ``find``)."""
        with self._lock:
            self._walk()

    def _walk(self) -> None:
        self._walked = True
        try:
            infos = self.fs.find(self.root, withdirs=True, detail=True)
        except FileNotFoundError:
            return
        prefix = self.root.rstrip("/") + "/"
        dirs: dict[str, dict[str, Entry]] = {"": {}}
        for path, info in infos.items():
            path = str(info.get("name") or path).rstrip("/")
            if not path.startswith(prefix):
                continue
            rel = path[len(prefix):]
            parent, name = posixpath.split(rel)
            kind = DIR if info.get("type") == "directory" else FILE if info.get("type") == "file" else OTHER
            dirs.setdefault(parent, {})[name] = Entry(name, kind, int(info.get("size") or 0) if kind == FILE else 0,
                                                      _mtime(info))
            if kind == DIR:
                dirs.setdefault(rel, {})
        for rel in list(dirs):  # folders implied by a file's path (object stores have no folders)
            parent, name = posixpath.split(rel)
            if rel and name not in dirs.setdefault(parent, {}):
                dirs[parent][name] = Entry(name, DIR, 0, 0.0)
        self._dirs.update(dirs)

    # ---- reads -------------------------------------------------------------------------

    def read_small(self, rel: str, limit: int) -> bytes:
        """A whole small file, never more than ``limit`` bytes (FileNotFoundError, UnsafePath,
        NotAFile, TooLarge)."""
        return read_bounded(self.fs, self.path(rel), limit, self.root_real)

    def open(self, rel: str, size: int | None = None) -> RangeFile:
        """A file for range reads (local: its real path checked inside the store first)."""
        path = self.path(rel)
        if self.local:
            return LocalFile(path, self.root_real or os.path.realpath(self.root))
        return RemoteFile(self.fs, path, size)


class RangeFile:
    """A file read by ranges; ``fileobj()`` for parsers that seek (zip)."""

    size: int

    def read(self, offset: int, length: int) -> bytes:
        raise NotImplementedError

    def fileobj(self) -> BinaryIO:
        raise NotImplementedError

    def stream(self, start: int = 0, end: int | None = None) -> Iterator[memoryview]:
        """Consecutive chunks of ``[start, end)``; a chunk is valid until the next one is read."""
        raise NotImplementedError

    def close(self) -> None:
        """Release the handle."""

    def __enter__(self) -> RangeFile:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class LocalFile(RangeFile):
    def __init__(self, path: str, root_real: str) -> None:
        self.path, fd = _open_inside(path, root_real)  # refuses links out of the store
        self.fd = fd
        self.handle: BinaryIO | None = None  # a file object only for parsers that seek (zip)
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            os.close(fd)
            raise NotAFile(f"{posixpath.basename(path)} is not a regular file")
        self.size = info.st_size

    def read(self, offset: int, length: int) -> bytes:
        if length <= 0:
            return b""
        first = os.pread(self.fd, min(length, 1 << 30), offset)
        if len(first) == length or not first:  # the usual case: one call
            return first
        parts = [first]
        offset, length = offset + len(first), length - len(first)
        while length > 0:
            chunk = os.pread(self.fd, min(length, 1 << 30), offset)
            if not chunk:
                break
            parts.append(chunk)
            offset += len(chunk)
            length -= len(chunk)
        return b"".join(parts)

    def fileobj(self) -> BinaryIO:
        if self.handle is None:
            self.handle = os.fdopen(self.fd, "rb", buffering=0, closefd=False)
        return self.handle

    def stream(self, start: int = 0, end: int | None = None) -> Iterator[memoryview]:
        end = self.size if end is None else end
        buffer = bytearray(LOCAL_CHUNK)
        view, fd, offset = memoryview(buffer), self.fd, start
        while offset < end:
            got = os.preadv(fd, [view[: min(LOCAL_CHUNK, end - offset)]], offset)
            if got <= 0:
                return
            yield view[:got]
            offset += got

    def close(self) -> None:
        if self.fd < 0:
            return
        if self.handle is not None:
            self.handle.close()
        os.close(self.fd)
        self.fd = -1


class RemoteFile(RangeFile):
    def __init__(self, fs: Any, path: str, size: int | None = None) -> None:
        self.fs, self.path = fs, path
        self.size = int(size if size is not None else fs.info(path)["size"])
        self._handle: BinaryIO | None = None

    def read(self, offset: int, length: int) -> bytes:
        if length <= 0 or offset >= self.size:
            return b""
        return bytes(self.fs.cat_file(self.path, start=offset, end=min(offset + length, self.size)))

    def fileobj(self) -> BinaryIO:
        if self._handle is None:
            self._handle = self.fs.open(self.path, "rb")
        return self._handle

    def stream(self, start: int = 0, end: int | None = None) -> Iterator[memoryview]:
        end = self.size if end is None else end
        for offset in range(start, end, REMOTE_CHUNK):
            data = self.read(offset, min(REMOTE_CHUNK, end - offset))
            if not data:
                return
            view = memoryview(data)
            for at in range(0, len(view), LOCAL_CHUNK):  # cache-sized pieces for hashing and stats
                yield view[at:at + LOCAL_CHUNK]

    def close(self) -> None:
        if self._handle is not None:
            self._handle.close()


@functools.lru_cache(maxsize=8192)
def _real_folder(folder: str) -> str:
    """``os.path.realpath(folder)``, from its parent's (cached): one ``lstat`` for a folder whose
    parent was resolved before (a thousand checkpoint folders of one run), not one per component."""
    parent, name = os.path.split(folder)
    if not name or not parent or parent == folder or name in (".", ".."):
        return os.path.realpath(folder)
    joined = os.path.join(_real_folder(parent), name)
    return os.path.realpath(joined) if os.path.islink(joined) else joined


_READ_FLAGS = os.O_RDONLY | os.O_NONBLOCK  # a FIFO is refused after opening, never waited on
_NO_FOLLOW = getattr(os, "O_NOFOLLOW", 0)
_LINK_ERRNOS = (errno.ELOOP, errno.EMLINK)  # O_NOFOLLOW met a link (Linux, macOS; FreeBSD)


def _open_inside(path: str, root_real: str) -> tuple[str, int]:
    """The file's real path, inside the store, and a descriptor of it: its folder's links resolved
    (cached), its own link followed (a Hub snapshot's link into ``blobs/``); UnsafePath when it
    leads out. The file is opened without following a link first: only a link costs a look."""
    folder, name = os.path.split(path)
    real = os.path.join(_real_folder(folder), name)
    if _NO_FOLLOW:
        if not inside(real, root_real):
            raise UnsafePath(f"{name} resolves outside the store root")
        try:
            return real, os.open(real, _READ_FLAGS | _NO_FOLLOW)
        except OSError as exc:
            if exc.errno not in _LINK_ERRNOS:
                raise
    if os.path.islink(real):
        real = os.path.realpath(real)
    if not inside(real, root_real):
        raise UnsafePath(f"{name} resolves outside the store root")
    return real, os.open(real, _READ_FLAGS)


def _local_entry(item: os.DirEntry[str]) -> Entry:
    """A listing entry; a link to a file is the file (a Hub cache snapshot is links into
    ``blobs/``; reads check where it leads), a link to a folder is never followed."""
    try:
        if item.is_dir(follow_symlinks=False):
            return Entry(item.name, DIR, 0, item.stat(follow_symlinks=False).st_mtime)
        info = item.stat()
    except OSError:
        return Entry(item.name, OTHER, 0, 0.0)
    if stat.S_ISREG(info.st_mode):
        return Entry(item.name, FILE, info.st_size, info.st_mtime)
    return Entry(item.name, OTHER, 0, info.st_mtime)


def _mtime(info: Mapping[str, Any]) -> float:
    """Seconds since the epoch from whichever field an fsspec backend fills (0.0: none does)."""
    found = info_mtime(info)
    return 0.0 if found is None else found


def as_datetime(seconds: float) -> datetime:
    return datetime.fromtimestamp(max(seconds, 0.0), UTC)


def join(*parts: str) -> str:
    """Relative paths joined, ``""`` parts dropped."""
    return "/".join(p for p in parts if p)
