"""Opening stores and keeping their index fresh: the entry point the CLI and pages share."""

from __future__ import annotations

import os
from pathlib import Path
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from lastgood.index import attached
from lastgood.index.catalog import Catalog, RefreshReport
from lastgood.index.marks import sync_marks
from lastgood.index.store import OpenStore  # noqa: F401 - the entry point hands it out
from lastgood.credentials import Vault, split_url
from lastgood.config import Settings, load_settings
from lastgood import limits
from lastgood.errors import NotRecognised, UsageError
from lastgood.integrity.verify import VerifyReport, count_to_check, verify_store
from lastgood.readers.registry import display_url, normalize_url, open_reader

CHECK_DEPTHS = ("auto", "data", "structure", "none")
# "auto" decodes the blobs not yet data-checked when they add up to at most this many bytes
# (a first look at a store with huge blobs lists at once; `lastgood verify --read-data` does
# the rest); LASTGOOD_AUTO_DATA_BYTES overrides it (0: never decode automatically)
AUTO_DATA_BYTES = 16 * 2**20
# …and, on an object store or a database server, at most this many checkpoints (each is a request: a
# first look at 10,000 small blobs on S3 would wait on 10,000 GETs; `verify --read-data` reads them all)
AUTO_DATA_REMOTE_CHECKPOINTS = 256
# every refresh runs the catalog-level structure checks (lineage, codecs, saves, heads); the walk of
# the blob files (presence and size of each) runs automatically only for stores of at most
# lastgood.limits.AUTO_WALK_ENTRIES checkpoints (LASTGOOD_AUTO_WALK_ENTRIES;
# beyond: pending until `lastgood verify STORE` or a data check)…
# …and, when the blob files are on an object store, of at most this many unless
# LASTGOOD_AUTO_WALK_ENTRIES says otherwise (its listing is one request per 1,000 objects,
# one page after another: 10 sequential LISTs for 10,000 blobs would dwarf the catalog's few GETs)
AUTO_WALK_REMOTE_ENTRIES = 1_000
Progress = Callable[[int, int | None], None]


@dataclass
class IndexSummary:
    store: OpenStore
    refresh: RefreshReport
    verify: VerifyReport | None


def open_catalog(settings: Settings | None = None) -> Catalog:
    return Catalog((settings or load_settings()).index_path)


def open_store(catalog: Catalog, url: str, reader_name: str | None = None,
               storage_options: Mapping[str, Any] | None = None) -> OpenStore:
    """The store at ``url`` (full or public form), named in the index by its public URL;
    a secret in the URL is kept in the home's private credentials file (lastgood.credentials)."""
    with secret_kept_only_if_opened(catalog, url):
        return _open_store(catalog, url, reader_name, storage_options)


def _open_store(catalog: Catalog, url: str, reader_name: str | None = None,
                storage_options: Mapping[str, Any] | None = None) -> OpenStore:
    url = normalize_url(url)
    vault, public = _vault(catalog), split_url(url)[0]
    full = vault.resolve(vault.remember(url)) if vault is not None else url
    try:
        reader = open_reader(full, reader_name, storage_options)
    except NotRecognised:
        known = None if reader_name else catalog.recorded_reader(public)
        if known is None:
            raise
        # a store the index knows, no longer recognisable (a prune took every run of a folder of run
        # files): opened as the reader that indexed it, so `journal` and `undo` still work on it
        reader = open_reader(full, known, storage_options)
    reader.snapshot_dir, reader.snapshot_min_bytes = catalog.parts_dir, attached.min_bytes()
    return OpenStore(public, catalog.store_id(public, reader.name, display_url(public)), reader)


def _vault(catalog: Catalog) -> Vault | None:
    return Vault(Path(catalog.path).parent) if catalog.path != ":memory:" else None


@contextmanager
def secret_kept_only_if_opened(catalog: Catalog, url: str) -> Iterator[None]:
    """A store that fails to open or to be read (a wrong password, no such bucket) leaves the
    credentials file as it was: a secret typed for it is not kept on disk."""
    vault, public = _vault(catalog), split_url(normalize_url(url))[0]
    previous = vault.kept(public) if vault is not None else None
    try:
        yield
    except BaseException:
        if vault is not None:
            vault.put_back(public, previous)
        raise


def index_store(catalog: Catalog, url: str, *, reader_name: str | None = None, full: bool = False,
                check: str = "auto", progress: Progress | None = None) -> IndexSummary:
    """Refresh the index for ``url`` and check what is new at the chosen depth.

    A refresh lists and structure-checks (set-based queries, never one per
    checkpoint). ``auto`` then decodes the checkpoints not yet data-checked
    when their blobs add up to at most :func:`auto_data_bytes` (a first look
    at a huge store stays fast: listing never waits on decoding; the rest is
    reported as pending, see :func:`data_pending`). Blobs are immutable, so a
    checkpoint checked once is not read again on later refreshes; ``full``
    rescans and re-checks everything.
    """
    if check not in CHECK_DEPTHS:
        raise UsageError(f"--check must be one of {', '.join(CHECK_DEPTHS)}")
    with secret_kept_only_if_opened(catalog, url):  # one guard for the open and the first read
        store = _open_store(catalog, url, reader_name)
        refresh = refresh_consistent(catalog, store, full=full, progress=progress)
    _sync_recovery_marks(catalog, store)
    if check == "auto":
        pending = data_pending(catalog, store.store_id, only_unverified=not full)
        affordable = pending.size_bytes <= auto_data_bytes() and (
            not _remote(store.url) or pending.checkpoints <= AUTO_DATA_REMOTE_CHECKPOINTS)
        check = "data" if affordable else "structure"
    report = None
    if check != "none":  # nothing new to check (a reopen): no verification pass at all
        pending = full or count_to_check(catalog, store.store_id, check, True)
        report = (verify_store(catalog, store.store_id, store.reader, read_data=check == "data",
                               only_unverified=not full, progress=progress,
                               blob_walk=store_size(catalog, store.store_id) <= auto_walk_entries(store))
                  if pending else VerifyReport(depth=check))
    return IndexSummary(store, refresh, report)


def _remote(url: str) -> bool:
    """An object store or a database server: each checkpoint read is a request over the network."""
    return "://" in url and not url.startswith(("file://", "sqlite://", "memory://"))


@dataclass(frozen=True)
class Pending:
    """Checkpoints whose blobs have not been decoded by a data check yet."""

    checkpoints: int
    size_bytes: int


def data_pending(catalog: Catalog, store_id: int, only_unverified: bool = True) -> Pending:
    """How many checkpoints (and blob bytes) a data check would still read."""
    where = "AND coalesce(verified, '') <> 'data'" if only_unverified else ""
    with catalog.connect() as con:
        count, size = con.execute(f"""SELECT count(*), coalesce(sum(size_bytes), 0) FROM checkpoints
                                      WHERE store_id = ? {where}""", [store_id]).fetchone()
    return Pending(int(count), int(size))


def store_size(catalog: Catalog, store_id: int) -> int:
    """Checkpoints the index holds for the store."""
    with catalog.connect() as con:
        return int(con.execute("SELECT count(*) FROM checkpoints WHERE store_id = ?", [store_id]).fetchone()[0])


def blobs_pending(catalog: Catalog, store_id: int) -> int:
    """Checkpoints whose blob files nothing has looked at yet (the store was beyond
    :func:`auto_walk_entries` and neither ``lastgood verify`` nor a data check has run)."""
    with catalog.connect() as con:
        return int(con.execute("""SELECT count(*) FROM checkpoints WHERE store_id = ?
                                  AND coalesce(verified, '') = 'catalog'""", [store_id]).fetchone()[0])


def auto_walk_entries(store: OpenStore | None = None) -> int:
    """Stores of at most this many checkpoints get their blob files walked on every refresh
    (``LASTGOOD_AUTO_WALK_ENTRIES`` overrides it); ``store``'s blob files on an object store:
    at most :data:`AUTO_WALK_REMOTE_ENTRIES` unless that variable is set."""
    limit = limits.auto_walk_entries()
    if store is None or os.environ.get("LASTGOOD_AUTO_WALK_ENTRIES", "").strip():
        return limit
    from lastgood.integrity.parallel import remote_blob_files

    return min(limit, AUTO_WALK_REMOTE_ENTRIES) if remote_blob_files(store.reader) else limit


def auto_data_bytes() -> int:
    """The automatic data check's byte budget (``LASTGOOD_AUTO_DATA_BYTES`` overrides it)."""
    raw = os.environ.get("LASTGOOD_AUTO_DATA_BYTES", "").strip()
    try:
        return max(0, int(raw)) if raw else AUTO_DATA_BYTES
    except ValueError:
        raise UsageError(f"LASTGOOD_AUTO_DATA_BYTES must be a number of bytes, not {raw!r}") from None


def _sync_recovery_marks(catalog: Catalog, store: OpenStore) -> None:
    """Quarantined/superseded statuses come from the store's journal (lastgood.index.marks)."""
    sync_marks(catalog, store)


def refresh_consistent(catalog: Catalog, store: OpenStore, *, full: bool = False,
                       progress: Progress | None = None) -> RefreshReport:
    """``catalog.refresh``, again when a file the scan listed vanished before the index
    read it (a writer compacting meanwhile): the failed refresh rolled back, and the
    next scan lists the consistent new snapshot. A vanished file means the catalog
    changed, so this goes on for as long as it keeps changing, within
    limits.SNAPSHOT_SECONDS (not a fixed number of attempts)."""
    import time

    from lastgood.limits import SNAPSHOT_SECONDS

    deadline = time.monotonic() + SNAPSHOT_SECONDS
    while True:
        try:
            return catalog.refresh(store.store_id, store.reader, full=full, progress=progress)
        except Exception as exc:
            if time.monotonic() >= deadline or not _vanished(exc):
                raise


def _vanished(exc: BaseException) -> bool:
    """A listed file was gone when read: FileNotFoundError, or DuckDB's 'No files found'."""
    return isinstance(exc, FileNotFoundError) or (
        type(exc).__module__.startswith(("duckdb", "_duckdb"))
        and ("No files found" in str(exc) or "No such file or directory" in str(exc)))
