"""Which reader opens which URL: the one place a store format is named.

Built-in readers are one line each in :data:`BUILTIN_READERS`, named by dotted path and
imported only when used, so optional dependencies (psycopg, safetensors…) are needed only
for the stores that need them. Third-party readers register in the ``lastgood.readers``
entry-point group as ``name = "package.module:ReaderClass"``.

A reader is picked by asking each one, in the table's order, whether it recognises the
store (``Reader.sniff``: the scheme, the folder's marker files, the database's tables —
never the file name alone), plugins after built-ins; ``--reader NAME`` skips the asking.
"""

from __future__ import annotations

import functools
import importlib
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from lastgood.errors import LastgoodError, MissingDependency, NotRecognised, ReaderError, StoreNotFound, UsageError
from lastgood.readers.common.urls import _one_line, display_url  # noqa: F401 - display_url: re-exported

SQLITE, POSTGRES, FOLDER = "sqlite", "postgres", "folder"  # what kind of store a URL names


@dataclass(frozen=True, slots=True)
class Builtin:
    """A built-in reader: its class; the kind of store it reads (only asked about URLs of that kind:
    a SQLite file, a ``postgresql://`` DSN, or a folder/file on any fsspec filesystem — so sniffing
    a SQLite file never imports a Postgres driver); and optionally a function that starts a
    never-seen store's first listing before the command's heavy imports (standard library only;
    lastgood.index.prefetch)."""

    target: str
    kind: str
    prefetch: str | None = None


# sniffing order within a kind: the cheap, specific checks first
BUILTIN: dict[str, Builtin] = {
    "native": Builtin("lastgood.readers.native.reader:NativeReader", FOLDER),
    "langgraph-sqlite": Builtin("lastgood.readers.langgraph.sqlite:LangGraphSqliteReader", SQLITE,
                                prefetch="lastgood.readers.langgraph.sqlite_fetch:prefetch_url"),
    "langgraph-postgres": Builtin("lastgood.readers.langgraph.postgres:LangGraphPostgresReader", POSTGRES),
    "openai-agents": Builtin("lastgood.readers.openai_agents.reader:OpenAIAgentsReader", SQLITE),
    "crewai-flows": Builtin("lastgood.readers.crewai.reader:CrewAIFlowsReader", SQLITE),
    "adk-sqlite": Builtin("lastgood.readers.adk.sqlite:AdkSqliteReader", SQLITE,
                          prefetch="lastgood.readers.adk.sqlite_fetch:prefetch_url"),
    "adk-postgres": Builtin("lastgood.readers.adk.postgres:AdkPostgresReader", POSTGRES),
    "agno-sqlite": Builtin("lastgood.readers.agno.sqlite:AgnoSqliteReader", SQLITE),
    "agno-postgres": Builtin("lastgood.readers.agno.postgres:AgnoPostgresReader", POSTGRES),
    "autogen": Builtin("lastgood.readers.autogen.reader:AutoGenReader", FOLDER),
    "pydantic-graph": Builtin("lastgood.readers.pydantic_graph.reader:PydanticGraphReader", FOLDER),
    "hf-trainer": Builtin("lastgood.readers.hf_trainer.reader:HfTrainerReader", FOLDER),
    "deepspeed": Builtin("lastgood.readers.deepspeed.reader:DeepSpeedReader", FOLDER),
    "lightning": Builtin("lastgood.readers.lightning.reader:LightningReader", FOLDER),
    "torch-dcp": Builtin("lastgood.readers.dcp.reader:DcpReader", FOLDER),
    "orbax": Builtin("lastgood.readers.orbax.reader:OrbaxReader", FOLDER),
    "torch-files": Builtin("lastgood.readers.torch_files.reader:TorchFilesReader", FOLDER),
    "safetensors": Builtin("lastgood.readers.safetensors_files.reader:SafetensorsReader", FOLDER),
}
BUILTIN_READERS: dict[str, str] = {name: entry.target for name, entry in BUILTIN.items()}

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

if TYPE_CHECKING:
    from lastgood.readers.base import Reader

ENTRY_POINT_GROUP = "lastgood.readers"


def available_readers() -> dict[str, str]:
    """Every reader name -> 'module:Class' (built-ins first, then plugins)."""
    return dict(_available_readers())


@functools.cache
def _available_readers() -> tuple[tuple[str, str], ...]:
    from importlib.metadata import entry_points  # ~35 ms: only when a plugin may be needed

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


def _builtins_then_plugins(kind: str) -> Iterator[str]:
    """Reader names in sniffing order for a store of ``kind``; the plugins' entry points are
    scanned only when no built-in reader recognised the store (a plugin is asked about any URL)."""
    yield from (name for name, entry in BUILTIN.items() if entry.kind == kind)
    yield from (name for name in available_readers() if name not in BUILTIN_READERS)


def store_kind(url: str) -> str:
    """What kind of store ``url`` names: a Postgres DSN, a local SQLite file, or else a folder or
    file on an fsspec filesystem."""
    scheme = url.split("://", 1)[0].lower() if "://" in url else ""
    if scheme in ("postgresql", "postgres"):
        return POSTGRES
    if not scheme or scheme in ("file", "sqlite"):
        from lastgood.readers.common.sqlite import has_header, sqlite_path

        path = sqlite_path(url)
        if path.is_file() and has_header(path):
            return SQLITE
    return FOLDER


def prefetchers() -> dict[str, str]:
    """Reader name -> "module:function" of the readers that can start a first listing early."""
    return {name: entry.prefetch for name, entry in BUILTIN.items() if entry.prefetch}


def normalize_url(url: str) -> str:
    """Local paths become absolute and real so one store has one index entry: ``file://…`` and
    ``sqlite://…`` URLs become the plain path they name, a relative one is resolved here, once,
    not by whichever directory a later command runs in, and symbolic links on the way are
    followed (a store opened through a link and by its own path is one store)."""
    if url.startswith(("file://", "sqlite://")):
        from lastgood.readers.common.sqlite import sqlite_path  # the file:// and sqlite:// rules

        return os.path.realpath(sqlite_path(url))
    if "://" in url:
        return url.rstrip("/") if not url.startswith(("postgresql://", "postgres://")) else url
    return os.path.realpath(os.path.expanduser(url))


def pick_reader(url: str, storage_options: Mapping[str, Any] | None = None) -> str:
    """The reader name for ``url``: the first reader (built-ins in table order, then plugins)
    that recognises the store."""
    scheme = url.split("://", 1)[0].lower() if "://" in url else ""
    if not scheme or scheme in ("file", "sqlite"):
        _require_local_path(url)
    refusals: list[Exception] = []
    for name in _builtins_then_plugins(store_kind(url)):
        try:
            if load_reader_class(name).sniff(url, storage_options):
                return name
        except MissingDependency:
            raise
        except Exception as exc:  # noqa: BLE001 - a reader that cannot even look: the next one may
            refusals.append(exc)
    # nothing recognised the store: our own clear errors (cannot connect…) before a library's; a
    # reader that could not even be imported says nothing about this store
    relevant = [exc for exc in refusals if not isinstance(exc, ImportError)]
    ours = [exc for exc in relevant if isinstance(exc, LastgoodError)]
    holds = _what_it_holds(url)
    if ours or (relevant and not holds):  # a database's tables say more than a filesystem library
        raise (ours or relevant)[0]
    raise NotRecognised(f"no reader recognises {display_url(url)}{holds}; name one with "
                      f"--reader ({', '.join(sorted(available_readers()))})")


def _what_it_holds(url: str) -> str:
    """For a database no reader recognises: the tables it has."""
    from lastgood.readers.common.sqlite import sqlite_schema

    if url.lower().startswith(("postgresql://", "postgres://")):
        from lastgood.readers.common.postgres import postgres_schema

        schema, kind = postgres_schema(url), "PostgreSQL"
    elif "://" not in url or url.startswith(("file://", "sqlite://")):
        schema, kind = sqlite_schema(url), "SQLite"
    else:
        return ""
    if schema is None:
        return ""
    tables = ", ".join(sorted(schema)[:8]) or "no tables"
    return f" (a {kind} database with {tables}: not a checkpoint store Lastgood knows)"


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


def _require_local_path(url: str) -> None:
    from lastgood.readers.common.sqlite import sqlite_path

    path = sqlite_path(url)
    if not path.exists():
        raise StoreNotFound(f"store not found: {path} (no such file or folder)")
