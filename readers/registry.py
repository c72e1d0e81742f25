"""Which reader opens which URL.

Built-in readers are named by dotted path and imported only when used, so
optional dependencies (psycopg, s3fs…) are needed only for the stores that
need them. Third-party readers register in the ``lastgood.readers`` entry-point
group as ``name = "package.module:ReaderClass"``.
"""

from __future__ import annotations

import functools
import importlib
import re
from collections.abc import Iterator, Mapping
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

from lastgood.errors import MissingDependency, ReaderError, LastgoodError, StoreNotFound, UsageError
from lastgood.readers.base import Reader

BUILTIN_READERS: dict[str, str] = {
    "native": "lastgood.readers.native.reader:NativeReader",
    "langgraph-sqlite": "lastgood.readers.langgraph.sqlite:LangGraphSqliteReader",
    "langgraph-postgres": "lastgood.readers.langgraph.postgres:LangGraphPostgresReader",
}

# top-level module that may be missing -> extra that provides it
MODULE_EXTRAS: dict[str, str] = {
    "psycopg": "postgres",
    "s3fs": "s3",
    "gcsfs": "gcs",
    "adlfs": "azure",
    "Crypto": "langgraph",
    "safetensors": "training",
    "distributed": "dask",
}

ENTRY_POINT_GROUP = "lastgood.readers"
SQLITE_SUFFIXES = (".sqlite", ".sqlite3", ".db")


def available_readers() -> dict[str, str]:
    """Every reader name -> 'module:Class' (built-ins first, then plugins)."""
    return dict(_available_readers())


@functools.cache
def _available_readers() -> tuple[tuple[str, str], ...]:
    found = dict(BUILTIN_READERS)
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        found.setdefault(ep.name, ep.value)
    return tuple(found.items())


def load_reader_class(name: str) -> type[Reader]:
    """Import the reader called ``name``; a missing package names the extra."""
    # built-ins win over plugins of the same name: no entry-point scan (~0.1 s) to open one
    target = BUILTIN_READERS.get(name) or available_readers().get(name)
    if target is None:
        known = ", ".join(sorted(available_readers()))
        raise UsageError(f"unknown reader {name!r} (known: {known})")
    module_name, _, attr = target.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        top = (exc.name or "").split(".")[0]
        if top in MODULE_EXTRAS:
            raise MissingDependency(top, MODULE_EXTRAS[top], f"The {name} reader") from exc
        raise
    return getattr(module, attr)


def _builtins_then_plugins() -> Iterator[str]:
    """Reader names in sniffing order; the plugins' entry points are scanned only when
    no built-in reader recognised the store."""
    yield from BUILTIN_READERS
    yield from (name for name in available_readers() if name not in BUILTIN_READERS)


def pick_reader(url: str, storage_options: Mapping[str, Any] | None = None) -> str:
    """The reader name for ``url``, from its scheme, suffix or contents."""
    scheme = url.split("://", 1)[0].lower() if "://" in url else ""
    if scheme in ("postgresql", "postgres"):
        return "langgraph-postgres"
    if scheme == "sqlite" or _looks_like_sqlite(url):
        return "langgraph-sqlite"
    if not scheme or scheme == "file":
        _require_local_path(url)
    for name in _builtins_then_plugins():
        if name in ("langgraph-postgres", "langgraph-sqlite"):
            continue
        try:
            if load_reader_class(name).sniff(url, storage_options):
                return name
        except MissingDependency:
            raise
        except ReaderError:
            continue
    raise ReaderError(
        f"no reader recognises {display_url(url)}; name one with --reader "
        f"({', '.join(sorted(available_readers()))})"
    )


def open_reader(
    url: str, reader: str | None = None, storage_options: Mapping[str, Any] | None = None
) -> Reader:
    """An open reader for ``url`` (chosen automatically unless named).

    Errors from storage libraries (an unknown protocol, missing credentials, a
    refused connection) become one-line ReaderErrors naming the URL without
    its credentials.
    """
    try:
        name = reader or pick_reader(url, storage_options)
        return load_reader_class(name)(url, storage_options)
    except LastgoodError:
        raise
    except Exception as exc:  # noqa: BLE001 - the boundary with fsspec/s3fs/drivers
        raise ReaderError(f"cannot open {display_url(url)}: {_one_line(exc)}") from exc


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    for secret in _url_secrets(str(exc)):
        text = text.replace(secret, "***")
    return f"{type(exc).__name__}: {text}"[:300]


def _url_secrets(text: str) -> list[str]:
    return [m.group(1) for m in re.finditer(r"://[^:/@\s]+:([^@/\s]+)@", text)]


def display_url(url: str) -> str:
    """``url`` without credentials, safe to show or log."""
    if "://" not in url:
        return url
    scheme, rest = url.split("://", 1)
    authority, sep, tail = rest.partition("/")
    if "@" in authority:
        authority = authority.rsplit("@", 1)[1]
    query_free = tail
    for marker in ("password=", "secret=", "token=", "key="):
        if marker in query_free.lower():
            query_free = query_free.split("?", 1)[0]
    return f"{scheme}://{authority}{sep}{query_free}"


def _looks_like_sqlite(url: str) -> bool:
    path = url[len("file://"):] if url.startswith("file://") else url
    if "://" in path:
        return False
    p = Path(path)
    if p.suffix.lower() in SQLITE_SUFFIXES:
        return True
    try:
        with p.open("rb") as handle:
            return handle.read(16) == b"SQLite format 3\x00"
    except OSError:
        return False


def _require_local_path(url: str) -> None:
    path = url[len("file://"):] if url.startswith("file://") else url
    if not Path(path).exists():
        raise StoreNotFound(f"store not found: {path} (no such file or folder)")
