"""The blob work of a verification, spread over workers.

A *chunk* is a list of checkpoint records of consecutive steps (so incremental
chains reuse the reader's cached parent states). :func:`check_chunk` runs the
reader's checks on one chunk and, at data depth, the content checks on the
states it decoded. Chunks run

- in this process (``workers=1``, or little work: starting processes costs more),
- on a local process pool (``workers=N``; hashing and decoding are CPU-bound,
  so threads would share one core), or
- on a Dask distributed cluster (``scheduler="tcp://host:port"``; each worker
  opens the store itself from its URL, so it must reach the store).

Object stores are read concurrently: a chunk's blobs come in with one
multi-path ``fs.cat`` (fsspec gathers the GETs with bounded concurrency; one
GET per object, no HEAD: sizes come from the catalog) before they are hashed
and decoded, and the next blobs' fetch runs while these are checked (in this
process a chunk ahead; in a worker process, which fetches its own chunks so
that the client's per-request CPU is spread over every worker, a part of its
chunk ahead). A chunk handed to a worker names the earlier checkpoints its
incremental states are rebuilt from (that worker may not have checked the
chunk before it): their blobs come in with the chunk's first fetch.

Results stream back as chunks complete, at most ``2 × workers`` in flight;
:func:`run_chunks` stops early when its ``cancel`` event is set.
"""

from __future__ import annotations

import itertools
import os
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from concurrent.futures import FIRST_COMPLETED, Future, wait
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from typing import Any

from lastgood.checks import Check
from lastgood.integrity.content import Shape, non_finite_finding, state_shape
from lastgood.errors import DecodeError, LastgoodError, UsageError
from lastgood.readers.common import validate
from lastgood.readers.common.gc_pause import gc_paused
from lastgood.readers.base import (ChecksCheckpoints, CheckpointRecord, Finding, HasBlobFiles, Reader, TensorSummary,
                                   capability)

CHUNK = 256                 # records per unit of parallel work
CHUNK_BYTES = 32 * 1024 * 1024  # … and at most about this many blob bytes (data depth)
MIN_PARALLEL_RECORDS = 4 * CHUNK  # below this a data check runs in-process
FETCH_PART = CHUNK // 4  # a worker checks an object store's chunk in parts of this many, fetching ahead


@dataclass(frozen=True)
class ReaderSpec:
    """How a worker opens the same store (no live handles cross processes)."""

    name: str
    url: str
    storage_options: tuple[tuple[str, Any], ...] = ()

    @classmethod
    def of(cls, reader: Reader) -> ReaderSpec:
        return cls(reader.name, reader.url, tuple(sorted(reader.storage_options.items())))

    def open(self) -> Reader:
        from lastgood.readers.registry import open_reader

        return open_reader(self.url, self.name, dict(self.storage_options))


@dataclass
class ChunkResult:
    """What one chunk's check found: findings, and the state shapes for drift."""

    checkpoint_ids: list[str]
    findings: list[Finding] = field(default_factory=list)
    shapes: dict[str, Shape] = field(default_factory=dict)
    tensors: list[TensorSummary] = field(default_factory=list)  # what a full read found per tensor


def default_workers() -> int:
    return max(1, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1)


# ---- one chunk -------------------------------------------------------------------------

def reader_findings(reader: Reader, records: list[CheckpointRecord], read_data: bool
                    ) -> Iterator[Finding | TensorSummary]:
    """The reader's own checks (findings, and at data depth what it found per tensor), or (without
    them) a decode of each state."""
    checker = capability(reader, ChecksCheckpoints)
    if checker is not None:
        yield from checker.check_checkpoints(records, read_data)
        return
    if read_data:
        for record in records:
            try:
                reader.load_state(record)
            except DecodeError as exc:
                yield Finding(exc.check, "error", str(exc), record.run_id, record.namespace,
                              record.checkpoint_id)


def check_chunk(reader: Reader, records: list[CheckpointRecord], read_data: bool,
                blobs: Mapping[str, bytes] | None = None) -> ChunkResult:
    """Check one chunk; at data depth also the content of every readable state.
    ``blobs``: the chunk's blobs of an object store, already fetched (:func:`fetch_blobs`)."""
    with _prefetched(reader, records, read_data, blobs), validate.finite_marks(), _gc_paused(read_data):
        try:
            found = list(reader_findings(reader, records, read_data))
        except LastgoodError:
            found = _one_by_one(reader, records, read_data)
        result = ChunkResult([r.checkpoint_id for r in records],
                             [f for f in found if isinstance(f, Finding)],
                             tensors=[t for t in found if isinstance(t, TensorSummary)])
        if read_data:
            _content(reader, records, result)
    return result


def _gc_paused(read_data: bool) -> AbstractContextManager[None]:
    """At data depth the cyclic GC is paused for the chunk: decoded states are many fresh
    containers without cycles, and each collection would rescan the reader's cache of them."""
    return gc_paused() if read_data else nullcontext()


def _one_by_one(reader: Reader, records: list[CheckpointRecord], read_data: bool
                ) -> list[Finding | TensorSummary]:
    """A reader that raised on a chunk, asked per checkpoint: the ones it still raises on
    become findings (verification never raises for a damaged checkpoint). When every
    checkpoint fails the store itself is unreadable, and that error is the answer."""
    findings: list[Finding | TensorSummary] = []
    failures: list[LastgoodError] = []
    for record in records:
        try:
            findings.extend(reader_findings(reader, [record], read_data))
        except LastgoodError as exc:
            failures.append(exc)
            findings.append(Finding(Check.UNDECODABLE, "error", f"the reader failed on this checkpoint: {exc}",
                                    record.run_id, record.namespace, record.checkpoint_id))
    if len(records) > 1 and len(failures) == len(records):
        raise failures[0]
    return findings


def _content(reader: Reader, records: list[CheckpointRecord], result: ChunkResult) -> None:
    """Each readable state's shape (schema drift between neighbours) and NaN/Inf. Not for readers of
    cumulative states (``Reader.cumulative_states``): their own data check read every item once."""
    if reader.cumulative_states:
        return
    damaged = {f.checkpoint_id for f in result.findings if f.severity == "error"}
    for record in records:
        if record.checkpoint_id in damaged:
            continue
        try:
            state = reader.load_state(record)
        except (DecodeError, LastgoodError):
            continue  # the reader's checks report why
        result.shapes[record.checkpoint_id] = state_shape(state)
        if validate.proven_finite(state):  # its decoder proved it holds no NaN/±Inf
            continue
        finding = non_finite_finding(record, state)
        if finding:
            result.findings.append(finding)


# ---- concurrent reads for object stores ------------------------------------------------

class _PrefetchedFS:
    """The reader's filesystem with some files already in memory (read by one ``cat``)."""

    def __init__(self, fs: Any, blobs: Mapping[str, bytes]) -> None:
        self._fs = fs
        self._blobs = blobs

    def held_size(self, path: str) -> int | None:
        """The size of ``path`` when its whole object is in memory (a GET proved it exists and how
        big it is: no listing needed), else None."""
        data = self._blobs.get(path)
        return None if data is None else len(data)

    def cat_file(self, path: str, start: int | None = None, end: int | None = None, **kwargs: Any) -> bytes:
        if path in self._blobs and not kwargs:
            return self._blobs[path][start:end]
        return self._fs.cat_file(path, start=start, end=end, **kwargs)

    def info(self, path: str, **kwargs: Any) -> dict[str, Any]:
        if path in self._blobs:
            return {"name": path, "size": len(self._blobs[path]), "type": "file"}
        return self._fs.info(path, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._fs, name)


class _prefetched:
    """Context: an fsspec-backed reader whose blobs for ``records`` were fetched concurrently.

    Only for remote filesystems (local reads are already fast) and readers whose blobs are
    files (capability ``blob-files``: ``fs`` and ``blob_path``)."""

    def __init__(self, reader: Reader, records: list[CheckpointRecord], read_data: bool,
                 blobs: Mapping[str, bytes] | None = None) -> None:
        self.reader = capability(reader, HasBlobFiles)
        self.fs = self.reader.fs if self.reader is not None else None
        self.blobs = blobs if blobs is not None else fetch_blobs(reader, self.fs, records) if read_data else {}

    def __enter__(self) -> None:
        if self.blobs and self.reader is not None:
            self.reader.fs = _PrefetchedFS(self.fs, self.blobs)

    def __exit__(self, *exc: object) -> None:
        if self.blobs and self.reader is not None:
            self.reader.fs = self.fs


def fetch_blobs(reader: Reader, fs: Any, records: list[CheckpointRecord],
                ancestors: Iterable[CheckpointRecord] = ()) -> dict[str, bytes]:
    """The blobs ``records`` (and ``ancestors``) name, fetched from the reader's filesystem ``fs``
    concurrently with one multi-path ``cat`` (empty unless ``fs`` is remote). s3fs would send a HEAD
    before each GET (to split big objects into ranges); ``max_concurrency=1`` skips it."""
    paths = _blob_paths(reader, itertools.chain(records, ancestors)) if _is_remote(fs) else []
    if not paths:
        return {}
    options = {"max_concurrency": 1} if "max_concurrency" in _parameters(fs._cat_file) else {}
    blobs = fs.cat(paths, on_error="omit", **options)
    return {_strip(fs, p): v for p, v in blobs.items() if isinstance(v, bytes)}


def _parameters(function: Any) -> Mapping[str, Any]:
    import inspect

    try:
        return inspect.signature(function).parameters
    except (TypeError, ValueError):
        return {}


def _is_remote(fs: Any) -> bool:
    from lastgood.readers.common.fsutil import is_local

    if fs is None or is_local(fs):  # first: asking a local store's fs for ``cat`` would import fsspec
        return False
    return hasattr(fs, "cat") and type(fs).__name__ != "MemoryFileSystem"


def _blob_paths(reader: Reader, records: Iterable[CheckpointRecord]) -> list[str]:
    files = capability(reader, HasBlobFiles)
    if files is None:
        return []
    path_of = files.blob_path
    paths = []
    for record in records:
        if record.location:
            try:
                paths.append(path_of(record.location))
            except LastgoodError:
                continue
    return list(dict.fromkeys(paths))


def blob_fs(reader: Reader) -> Any:
    """The filesystem of a reader whose blobs are files, else None."""
    files = capability(reader, HasBlobFiles)
    return files.fs if files is not None else None


def remote_blob_files(reader: Reader) -> bool:
    """Whether the reader's blobs are files on an object store (each read is a request)."""
    return _is_remote(blob_fs(reader))


class _Ancestors:
    """The earlier checkpoints a chunk's incremental states are rebuilt from that earlier chunks
    held (chunks come in step order; the worker checking this one may not have checked those, so
    it would read them one by one). Only what the last chunk and its own ancestors hold: a
    guess for fetching ahead, never needed for a correct check."""

    def __init__(self) -> None:
        self._known: dict[tuple[str, str, str], CheckpointRecord] = {}

    def of(self, chunk: list[CheckpointRecord]) -> list[CheckpointRecord]:
        inside = {(r.run_id, r.namespace, r.checkpoint_id) for r in chunk}
        found: dict[tuple[str, str, str], CheckpointRecord] = {}
        for record in chunk:
            current: CheckpointRecord | None = record
            while current is not None and current.kind == "incremental" and current.parent_id:
                key = (current.run_id, current.namespace, current.parent_id)
                if key in inside or key in found:
                    break
                current = self._known.get(key)
                if current is not None:
                    found[key] = current
        self._known = {**found, **{(r.run_id, r.namespace, r.checkpoint_id): r for r in chunk}}
        return list(found.values())


def _strip(fs: Any, path: str) -> str:
    return fs._strip_protocol(path) if hasattr(fs, "_strip_protocol") else path


# ---- many chunks ---------------------------------------------------------------------

_local = threading.local()


def check_chunk_remote(spec: ReaderSpec, records: list[CheckpointRecord], read_data: bool,
                       ancestors: tuple[CheckpointRecord, ...] = ()) -> ChunkResult:
    """:func:`check_chunk` in a worker: the store is opened once per worker thread. On an object
    store at data depth the chunk is checked in parts, each next part fetched while one is checked
    (the first with ``ancestors``: earlier checkpoints its incremental states are rebuilt from)."""
    readers: dict[ReaderSpec, Reader] = getattr(_local, "readers", None) or {}
    _local.readers = readers
    if spec not in readers:
        readers[spec] = spec.open()
    reader = readers[spec]
    if not read_data or not remote_blob_files(reader):
        return check_chunk(reader, records, read_data)
    parts = (records[i:i + FETCH_PART] for i in range(0, len(records), FETCH_PART))
    return _merged(records, list(_fetch_ahead(reader, parts, None, ancestors)))


def _merged(records: list[CheckpointRecord], results: list[ChunkResult]) -> ChunkResult:
    merged = ChunkResult([r.checkpoint_id for r in records])
    for result in results:
        merged.findings.extend(result.findings)
        merged.shapes.update(result.shapes)
        merged.tensors.extend(result.tensors)
    return merged


def run_chunks(reader: Reader, chunks: Iterator[list[CheckpointRecord]], read_data: bool, *,
               workers: int = 1, scheduler: str | None = None,
               cancel: threading.Event | None = None, background: bool = False) -> Iterator[ChunkResult]:
    """Results of every chunk (in completion order when parallel).

    ``background`` (the dashboard's checks): even one worker is a separate process, so
    decoding never holds the dashboard server's GIL while pages render."""
    if scheduler:
        yield from _on_dask(ReaderSpec.of(reader), chunks, read_data, scheduler, cancel)
    elif workers > 1 or (background and read_data):
        yield from _on_processes(reader, chunks, read_data, workers, cancel)
    elif read_data and _is_remote(blob_fs(reader)):
        yield from _fetch_ahead(reader, chunks, cancel)
    else:
        for chunk in chunks:
            if cancel is not None and cancel.is_set():
                return
            yield check_chunk(reader, chunk, read_data)


def _fetch_ahead(reader: Reader, chunks: Iterator[list[CheckpointRecord]],
                 cancel: threading.Event | None, ancestors: Iterable[CheckpointRecord] = ()
                 ) -> Iterator[ChunkResult]:
    """Data check of an object store: the next chunk's blobs are fetched (on a thread; fsspec's
    I/O loop does the waiting) while this chunk is checked; the first fetch brings ``ancestors``'
    blobs too."""
    from concurrent.futures import ThreadPoolExecutor

    fs = blob_fs(reader)  # the real one: check_chunk swaps in a prefetched view
    with ThreadPoolExecutor(1, thread_name_prefix="lastgood-fetch") as pool:
        chunk = next(chunks, None)
        fetching = pool.submit(fetch_blobs, reader, fs, chunk, ancestors) if chunk else None
        while chunk is not None and fetching is not None:
            if cancel is not None and cancel.is_set():
                fetching.cancel()
                return
            blobs = fetching.result()
            following = next(chunks, None)
            fetching = pool.submit(fetch_blobs, reader, fs, following) if following else None
            yield check_chunk(reader, chunk, True, blobs)
            chunk = following


def _on_processes(reader: Reader, chunks: Iterator[list[CheckpointRecord]], read_data: bool,
                  workers: int, cancel: threading.Event | None) -> Iterator[ChunkResult]:
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor  # imports multiprocessing's pools: only here
    from concurrent.futures.process import BrokenProcessPool

    spec = ReaderSpec.of(reader)
    unfinished: dict[tuple[str, ...], list[CheckpointRecord]] = {}  # submitted, no result handed on yet
    ancestors = _Ancestors() if read_data and remote_blob_files(reader) else None

    def submit(chunk: list[CheckpointRecord]) -> Any:
        unfinished[tuple(r.checkpoint_id for r in chunk)] = chunk
        before = tuple(ancestors.of(chunk)) if ancestors is not None else ()
        return pool.submit(check_chunk_remote, spec, chunk, read_data, before)

    # fork where there is one: workers start in milliseconds and need no importable __main__
    # (a script without the ``if __name__ == "__main__"`` guard, the dashboard); they only
    # open the store afresh and never touch the parent's index connection
    method = "fork" if "fork" in multiprocessing.get_all_start_methods() else "spawn"
    with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context(method),
                             initializer=_init_worker, initargs=(os.getpid(),)) as pool:
        try:
            for result in _bounded(submit, chunks, 2 * workers, cancel):
                unfinished.pop(tuple(result.checkpoint_ids), None)
                yield result
            return
        except BrokenProcessPool:  # a worker died (killed, out of memory, crashed): not the store's fault
            left = list(unfinished.values())
        finally:
            pool.shutdown(wait=True, cancel_futures=True)
    # its chunks, and the rest, are checked here: the same checks, one process
    for chunk in itertools.chain(left, chunks):
        if cancel is not None and cancel.is_set():
            return
        yield check_chunk(reader, chunk, read_data)


def _init_worker(parent: int | None = None) -> None:
    """Workers leave Ctrl-C to the parent, which stops handing out chunks and records whole ones.
    (Forked from a lowered-priority background thread, they inherit its nice value.)

    A forked worker's garbage collector never walks the objects it inherited (``gc.freeze``): the
    fork copied them from a parent whose other threads (DuckDB's, Arrow's, the dashboard's) may
    have been changing them, and CI saw a worker crash with a segmentation fault in its first
    collection. Its own objects are collected as usual."""
    import gc
    import signal

    from lastgood.processes import end_with_parent

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    end_with_parent(parent)  # a killed `lastgood verify` leaves no worker holding the index
    gc.freeze()
    release_inherited_sockets()


def release_inherited_sockets() -> None:
    """Let go of every socket a forked worker inherited: the dashboard server's listening socket
    and browser connections, a reader's database connection (a worker opens the store afresh).

    A connection stays open while any process holds it. With the workers of a long data check
    holding the dashboard's, a keep-alive connection the server had closed stayed open to the
    browser, which sent its next page request on it, and nobody ever read it: the page never
    loaded until the check ended. Each socket's descriptor now points at /dev/null instead
    (not closed: the number is not reused while objects copied from the parent still name it)."""
    import stat

    folder = "/proc/self/fd" if os.path.isdir("/proc/self/fd") else "/dev/fd"
    try:
        descriptors = [int(name) for name in os.listdir(folder)]
    except (OSError, ValueError):
        return
    null: int | None = None
    try:
        for fd in descriptors:
            try:
                if not stat.S_ISSOCK(os.fstat(fd).st_mode):
                    continue
                if null is None:
                    null = os.open(os.devnull, os.O_RDWR)
                os.dup2(null, fd)
            except OSError:
                continue  # the listing's own descriptor, already gone
    finally:
        if null is not None:
            os.close(null)


def _on_dask(spec: ReaderSpec, chunks: Iterator[list[CheckpointRecord]], read_data: bool,
             scheduler: str, cancel: threading.Event | None) -> Iterator[ChunkResult]:
    try:
        from distributed import Client
    except ModuleNotFoundError as exc:
        from lastgood.errors import MissingDependency

        raise MissingDependency("distributed", "dask", "--scheduler") from exc
    try:
        client = Client(scheduler, timeout=5, set_as_default=False)
    except (OSError, TimeoutError, ValueError) as exc:
        raise UsageError(f"cannot reach the Dask scheduler at {scheduler}: {exc}") from None
    with client:
        in_flight = 2 * max(1, sum(client.nthreads().values()))
        ancestors = _Ancestors()  # the workers' store may be remote: name each chunk's earlier links
        yield from _bounded(lambda chunk: client.submit(check_chunk_remote, spec, chunk, read_data,
                                                        tuple(ancestors.of(chunk)) if read_data else (),
                                                        pure=False),
                            chunks, in_flight, cancel)


def _bounded(submit: Callable[[list[CheckpointRecord]], Any], chunks: Iterator[list[CheckpointRecord]],
             limit: int, cancel: threading.Event | None) -> Iterator[ChunkResult]:
    """Keep at most ``limit`` chunks submitted; yield results as they complete."""
    pending: set[Any] = set()
    exhausted = False
    try:
        while pending or not exhausted:
            while not exhausted and len(pending) < limit and not (cancel and cancel.is_set()):
                chunk = next(chunks, None)
                if chunk is None:
                    exhausted = True
                else:
                    pending.add(submit(chunk))
            if cancel is not None and cancel.is_set():
                return
            if not pending:
                return
            done, pending = _wait_any(pending)
            for future in done:
                yield future.result()
    finally:
        for future in pending:
            future.cancel()


def _wait_any(pending: set[Any]) -> tuple[set[Any], set[Any]]:
    """The futures that finished (waiting up to half a second), and the rest."""
    if all(isinstance(f, Future) for f in pending):
        done, rest = wait(pending, timeout=0.5, return_when=FIRST_COMPLETED)
        return set(done), set(rest)
    deadline = time.monotonic() + 0.5  # Dask futures: poll (distributed.wait needs a default client)
    while time.monotonic() < deadline:
        done = {f for f in pending if f.done()}
        if done:
            return done, pending - done
        time.sleep(0.005)
    return set(), pending
