"""fsspec helpers shared by file-based readers: open a URL, join safely, write atomically."""

from __future__ import annotations

import functools
import contextlib
import os
import posixpath
import stat
import sys
import uuid
from collections.abc import Mapping
from typing import Any

from lastgood import limits
from lastgood.checks import Check
from lastgood.errors import MissingDependency, NotAFile, StoreNotFound, TooLarge, UnsafePath

# fsspec protocol -> (package, lastgood extra)
PROTOCOL_EXTRAS: dict[str, tuple[str, str]] = {
    "s3": ("s3fs", "s3"),
    "s3a": ("s3fs", "s3"),
    "gs": ("gcsfs", "gcs"),
    "gcs": ("gcsfs", "gcs"),
    "az": ("adlfs", "azure"),
    "abfs": ("adlfs", "azure"),
    "abfss": ("adlfs", "azure"),
}


def open_fs(url: str, storage_options: Mapping[str, Any] | None = None) -> tuple[Any, str]:
    """The filesystem and root path for ``url``; a missing backend names its extra.

    An absolute local path (what lastgood.stores hands over) gets :class:`LocalFS`:
    reading a local store needs only ``os`` calls, so fsspec is imported when a
    write (or anything else) first needs it — its import is ~0.1 s of every command."""
    if url.startswith("/") and os.sep == "/" and "::" not in url and not storage_options:
        return LocalFS(), url.rstrip("/") or "/"
    import fsspec

    options = _object_store_defaults(url, storage_options)
    try:
        fs, root = fsspec.core.url_to_fs(url, **options)
    except ImportError as exc:
        protocol = url.split("://", 1)[0] if "://" in url else "file"
        package, extra = PROTOCOL_EXTRAS.get(protocol, (protocol, "all"))
        raise MissingDependency(package, extra, f"Reading {protocol}:// stores") from exc
    return fs, root.rstrip("/") or "/"


class LocalFS:
    """fsspec's LocalFileSystem, imported on first use of anything but the checks
    reading makes (``isdir``, ``exists``: the same answers, from ``os`` directly)."""

    protocol = ("file", "local")

    def isdir(self, path: str) -> bool:
        return os.path.isdir(path)

    def exists(self, path: str) -> bool:
        return os.path.exists(path)

    def ls(self, path: str, detail: bool = False, **kwargs: Any) -> list[Any]:
        if not detail and not kwargs:  # a folder's entry paths (a journal listing on every refresh)
            try:
                with os.scandir(path) as entries:
                    return [posixpath.join(path, e.name) for e in entries]
            except NotADirectoryError:
                pass
        return _local_filesystem().ls(path, detail=detail, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(_local_filesystem(), name)


def full_fs(fs: Any) -> Any:
    """fsspec's own filesystem object for ``fs`` (a :class:`LocalFS` resolved)."""
    return _local_filesystem() if isinstance(fs, LocalFS) else fs


@functools.cache
def _local_filesystem() -> Any:
    from fsspec.implementations.local import LocalFileSystem

    return LocalFileSystem()


S3_CONNECTIONS = 64  # requests in flight to one S3 endpoint (botocore's default pool is 10)


def _object_store_defaults(url: str, storage_options: Mapping[str, Any] | None) -> dict[str, Any]:
    """The user's storage options, plus a connection pool large enough for concurrent reads of many
    small objects on S3 (unless they set one)."""
    options = dict(storage_options or {})
    if url.startswith(("s3://", "s3a://")):
        config = dict(options.get("config_kwargs") or {})
        config.setdefault("max_pool_connections", S3_CONNECTIONS)
        options["config_kwargs"] = config
    return options


def require_dir(fs: Any, root: str, url: str) -> None:
    """Raise StoreNotFound unless ``root`` exists as a folder."""
    if not fs.isdir(root):
        raise StoreNotFound(f"store not found: {url} (no such folder)")


def safe_join(root: str, relative: str) -> str:
    """``root/relative``, refusing anything that would leave ``root``."""
    if not relative or relative.startswith(("/", "\\")) or "://" in relative or "\\" in relative:
        raise UnsafePath(f"blob path {relative!r} is not a relative path inside the store")
    normal = posixpath.normpath(relative)
    if normal == ".." or normal.startswith("../") or normal == ".":
        raise UnsafePath(f"blob path {relative!r} leaves the store root")
    return f"{root}/{normal}"


def real_root(fs: Any, root: str) -> str | None:
    """The store root with symlinks resolved (local stores), else None."""
    return os.path.realpath(root) if is_local(fs) else None


def inside(real: str, root_real: str) -> bool:
    return real == root_real or real.startswith(root_real.rstrip(os.sep) + os.sep)


def local_file_size(path: str, root_real: str) -> int:
    """Size of a local store file, after refusing symlinks out of the store and
    anything that is not a regular file (FIFOs and devices are never opened)."""
    return os.stat(_checked_real_path(path, root_real)).st_size


def _checked_real_path(path: str, root_real: str) -> str:
    """The real path of ``path`` (folder links resolved once and cached, the file's own
    link resolved each time); UnsafePath outside ``root_real``, NotAFile if not regular."""
    folder, name = os.path.split(path)
    real_folder = _real_folder(folder)
    if not inside(real_folder, root_real):
        raise UnsafePath(f"{_rel_name(path, root_real)} resolves outside the store root")
    real = os.path.join(real_folder, name)
    info = os.lstat(real)
    if stat.S_ISLNK(info.st_mode):
        real = os.path.realpath(real)
        if not inside(real, root_real):
            raise UnsafePath(f"{_rel_name(path, root_real)} resolves outside the store root")
        info = os.stat(real)
    if not stat.S_ISREG(info.st_mode):
        raise NotAFile(f"{_rel_name(path, root_real)} is not a regular file ({_kind(info.st_mode)})")
    return real


@functools.lru_cache(maxsize=4096)
def _real_folder(folder: str) -> str:
    return os.path.realpath(folder)


def read_bounded(fs: Any, path: str, limit: int,
                 root_real: str | None = None) -> bytes:
    """The bytes of one store file, never more than ``limit``.

    Local files: symlinks leaving ``root_real`` and non-regular files are refused
    before opening; the file is opened without following links and read at most
    ``limit + 1`` bytes. Other filesystems: the listed size and type are checked
    first. Raises FileNotFoundError, UnsafePath, NotAFile or TooLarge."""
    if is_local(fs):
        return _read_local(path, limit, root_real or os.path.realpath(posixpath.dirname(path)))
    info = fs.info(path)
    if info.get("type", "file") != "file":
        raise NotAFile(f"{path} is not a file ({info.get('type')})")
    size = info.get("size")
    if size is not None and size > limit:
        raise TooLarge(f"{posixpath.basename(path)} is {size} bytes (limit {limit})")
    data = fs.cat_file(path, start=0, end=limit + 1)
    if len(data) > limit:
        raise TooLarge(f"{posixpath.basename(path)} is larger than {limit} bytes")
    return data


def _open_bounded(path: str, limit: int, root_real: str) -> int:
    """A descriptor of a local store file opened without following links, after refusing
    links out of the store, anything but a regular file, and a file over ``limit``."""
    real = _checked_real_path(path, root_real)
    fd = os.open(real, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0))
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise NotAFile(f"{_rel_name(path, root_real)} is not a regular file")
        if info.st_size > limit:
            raise TooLarge(f"{_rel_name(path, root_real)} is {info.st_size} bytes (limit {limit})")
    except BaseException:
        os.close(fd)
        raise
    return fd


def _read_local(path: str, limit: int, root_real: str) -> bytes:
    fd = _open_bounded(path, limit, root_real)
    try:
        chunks, left = [], limit + 1
        while left > 0:
            chunk = os.read(fd, min(left, 1 << 20))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
    finally:
        os.close(fd)
    data = b"".join(chunks)
    if len(data) > limit:
        raise TooLarge(f"{_rel_name(path, root_real)} grew past {limit} bytes while read")
    return data


def private_copy(path: str, root_real: str, folder: str, limit: int, suffix: str = ".parquet") -> str:
    """A private copy (owner-only, in ``folder``) of one local store file, with
    read_bounded's refusals, taken through a descriptor opened without following links.
    Returns the copy's path; nothing is left behind when it fails."""
    fd = _open_bounded(path, limit, root_real)
    try:
        os.makedirs(folder, mode=0o700, exist_ok=True)
        copy = os.path.join(folder, f"copy-{uuid.uuid4().hex}{suffix}")
        out = os.open(copy, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o600)
        try:
            _copy_bounded(fd, out, limit, lambda: _rel_name(path, root_real))
        except BaseException:
            os.close(out)
            os.unlink(copy)
            raise
        os.close(out)
    finally:
        os.close(fd)
    return copy


def _copy_bounded(src: int, dst: int, limit: int, name: Any) -> None:
    copied = 0
    while copied <= limit:
        try:
            n = os.copy_file_range(src, dst, 1 << 28)
        except (AttributeError, OSError):
            chunk = os.read(src, 1 << 20)
            n = os.write(dst, chunk) if chunk else 0
        if n == 0:
            return
        copied += n
    raise TooLarge(f"{name()} grew past {limit} bytes while read")


def _rel_name(path: str, root_real: str) -> str:
    real = os.path.abspath(path)
    return os.path.relpath(real, root_real) if inside(real, root_real) else posixpath.basename(path)


def _kind(mode: int) -> str:
    for test, name in ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"),
                       (stat.S_ISDIR, "a folder")):
        if test(mode):
            return name
    return "not a regular file"


Size = int | None | tuple[Check, str]  # a blob's size, or why it is refused


def local_stamps(path: str, suffix: str) -> tuple[dict[str, str], list[str]]:
    """(name -> "size:mtime" of a local folder's regular files, names refused).

    os.scandir is 10x fsspec's ls. Symlinks and special files (FIFOs, devices)
    are refused: nothing in the catalog is read through a link."""
    stamps: dict[str, str] = {}
    refused: list[str] = []
    try:
        with os.scandir(path) as entries:
            for e in entries:
                if not e.name.endswith(suffix) or is_temp_name(e.name):
                    continue
                if e.is_file(follow_symlinks=False):
                    info = e.stat(follow_symlinks=False)
                    stamps[e.name] = f"{info.st_size}:{info.st_mtime}"
                else:
                    refused.append(e.name)
    except (FileNotFoundError, NotADirectoryError):
        return {}, []
    return stamps, refused


def local_sizes(path: str, folder: str, root_real: str) -> dict[str, Size]:
    """Sizes of a local blob folder's entries; links are resolved and must stay in the store."""
    sizes: dict[str, Size] = {}
    with os.scandir(path) as entries:
        for e in entries:
            key = posixpath.normpath(f"{folder}/{e.name}")
            if e.is_file(follow_symlinks=False):
                sizes[key] = e.stat(follow_symlinks=False).st_size
                continue
            try:
                sizes[key] = local_file_size(e.path, root_real)
            except FileNotFoundError:
                sizes[key] = (Check.BLOB_MISSING, f"blob {key} is a dangling link")
            except (UnsafePath, NotAFile, TooLarge) as exc:
                check = Check.UNSAFE_PATH if isinstance(exc, UnsafePath) else (
                    Check.NOT_A_FILE if isinstance(exc, NotAFile) else Check.TOO_LARGE)
                sizes[key] = (check, str(exc))
    return sizes


def blob_limit(recorded_size: int | None) -> int:
    """How many bytes a blob may have: its recorded size plus a margin, or the cap."""
    if recorded_size is None or recorded_size < 0:
        return limits.MAX_BLOB_BYTES
    return min(recorded_size + limits.BLOB_MARGIN_BYTES, limits.MAX_BLOB_BYTES)


def is_local(fs: Any) -> bool:
    if isinstance(fs, LocalFS):
        return True
    local = sys.modules.get("fsspec.implementations.local")  # not imported: fs cannot be one
    return local is not None and isinstance(fs, local.LocalFileSystem)


def atomic_write(
    fs: Any, path: str, data: bytes, durable: bool = True
) -> None:
    """Write ``data`` so that readers see either nothing or all of it.

    Local files: write a hidden temp file beside the target, fsync (unless the
    caller syncs a whole batch itself), rename. Object stores: a single PUT is
    already all-or-nothing.
    """
    if not is_local(fs):
        fs.pipe_file(path, data)
        return
    directory = posixpath.dirname(path)
    os.makedirs(directory, exist_ok=True)
    tmp = posixpath.join(directory, f".tmp-{uuid.uuid4().hex}-{posixpath.basename(path)}")
    try:
        with open(tmp, "wb") as handle:
            handle.write(data)
            if durable:
                handle.flush()
                os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)  # a failed write leaves no temp file behind (a kill still may: swept later)
        raise


def is_temp_name(name: str) -> bool:
    """Files being written (never part of the store yet)."""
    base = posixpath.basename(name)
    return base.startswith(".tmp-") or base.startswith(".")
