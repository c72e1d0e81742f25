"""fsspec helpers shared by file-based readers: open a URL, join safely, write atomically."""

from __future__ import annotations

import os
import posixpath
import uuid
from collections.abc import Mapping
from typing import Any

import fsspec
from fsspec.implementations.local import LocalFileSystem

from lastgood.errors import MissingDependency, StoreNotFound, UnsafePath

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


def open_fs(url: str, storage_options: Mapping[str, Any] | None = None) -> tuple[fsspec.AbstractFileSystem, str]:
    """The filesystem and root path for ``url``; a missing backend names its extra."""
    try:
        fs, root = fsspec.core.url_to_fs(url, **dict(storage_options or {}))
    except ImportError as exc:
        protocol = url.split("://", 1)[0] if "://" in url else "file"
        package, extra = PROTOCOL_EXTRAS.get(protocol, (protocol, "all"))
        raise MissingDependency(package, extra, f"Reading {protocol}:// stores") from exc
    return fs, root.rstrip("/") or "/"


def require_dir(fs: fsspec.AbstractFileSystem, root: str, url: str) -> None:
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


def is_local(fs: fsspec.AbstractFileSystem) -> bool:
    return isinstance(fs, LocalFileSystem)


def atomic_write(
    fs: fsspec.AbstractFileSystem, path: str, data: bytes, durable: bool = True
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
    with open(tmp, "wb") as handle:
        handle.write(data)
        if durable:
            handle.flush()
            os.fsync(handle.fileno())
    os.replace(tmp, path)


def is_temp_name(name: str) -> bool:
    """Files being written (never part of the store yet)."""
    base = posixpath.basename(name)
    return base.startswith(".tmp-") or base.startswith(".")
