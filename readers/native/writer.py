"""Writing the native Lastgood store: the API an agent calls to save checkpoints.

    writer = NativeWriter("s3://bucket/agents")      # any fsspec URL
    saved = writer.save("run-42", state, trigger="periodic")
    writer.load_head_state("run-42")
    writer.compact()                                 # fold the tail into Parquet

A save writes, in order: a pending marker, the blob (temp + rename, or one
PUT), the commit marker (a catalog tail line), the head pointer, and removes
the pending marker. A crash before the commit marker leaves the checkpoint
unlisted (shown as *incomplete* through its pending marker); never a listed
checkpoint with a partial blob. Run ``compact`` from one process at a time.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from lastgood import limits
from lastgood.errors import ConflictError, NotAFile, StoreNotFound, TooLarge, UnsafePath
from lastgood.readers.native import format as nf
from lastgood.readers.common.fsutil import (atomic_write, full_fs, is_local, is_temp_name, open_fs, read_bounded,
                                            real_root, safe_join)
from lastgood.readers.common.jsonpatch import make_patch

DEFAULT_FULL_EVERY = 10


@dataclass(frozen=True, slots=True)
class SavedCheckpoint:
    run_id: str
    checkpoint_id: str
    namespace: str
    parent_id: str | None
    step: int
    kind: str
    location: str
    size_bytes: int
    checksum: str
    created_at: datetime


@dataclass(slots=True)
class SaveRequest:
    """One checkpoint to save (used by ``save_many``)."""

    run_id: str
    state: Any
    trigger: str = "periodic"
    namespace: str = ""
    kind: str | None = None
    metadata: Mapping[str, Any] = field(default_factory=dict)
    agent: str | None = None
    step: int | None = None
    created_at: datetime | None = None
    event: Mapping[str, Any] | None = None
    checkpoint_id: str | None = None


@dataclass(slots=True)
class _Head:
    ref: dict[str, Any]
    step: int
    state: Any
    chain: int


@dataclass(frozen=True, slots=True)
class CompactionReport:
    entries: int
    parts_removed: int
    tail_removed: int
    rejected: int
    part: str | None


class NativeWriter:
    """Saves checkpoints into a native store, creating it when asked."""

    def __init__(
        self,
        url: str,
        storage_options: Mapping[str, Any] | None = None,
        *,
        codec: str = "json",
        full_every: int = DEFAULT_FULL_EVERY,
        create: bool = True,
    ) -> None:
        if codec not in nf.WRITER_CODECS:
            raise ValueError(f"unknown codec {codec!r} (known: {', '.join(nf.WRITER_CODECS)})")
        self.url = url
        self.codec = codec
        self.full_every = max(1, full_every)
        fs, self.root = open_fs(url, storage_options)
        self.fs = full_fs(fs)  # a writer uses fsspec's methods: import it now, not in the first save
        self._heads: dict[tuple[str, str], _Head] = {}
        self._ensure_store(create)

    def _path(self, relative: str) -> str:
        return safe_join(self.root, relative)

    def _ensure_store(self, create: bool) -> None:
        marker = self._path(nf.MARKER)
        if self.fs.exists(marker):
            return
        if not create:
            raise StoreNotFound(f"store not found: {self.url} (no {nf.MARKER})")
        self.fs.makedirs(self.root, exist_ok=True)
        body = {"format": nf.FORMAT_NAME, "version": nf.FORMAT_VERSION,
                "created_at": nf.iso(datetime.now(UTC))}
        atomic_write(self.fs, marker, json.dumps(body, indent=2).encode())

    # ---- saving ----------------------------------------------------------------

    def save(self, run_id: str, state: Any, *, trigger: str = "periodic", namespace: str = "",
             kind: str | None = None, metadata: Mapping[str, Any] | None = None,
             agent: str | None = None, step: int | None = None,
             created_at: datetime | None = None, event: Mapping[str, Any] | None = None,
             ) -> SavedCheckpoint:
        """Save one checkpoint of ``run_id`` whose parent is the run's current head."""
        request = SaveRequest(run_id, state, trigger, namespace, kind, metadata or {}, agent,
                              step, created_at, event)
        entry, payload, head = self._prepare(request)
        pending = self._path(f"{nf.PENDING}/{nf.quote_name(entry['checkpoint_id'])}.json")
        atomic_write(self.fs, pending, json.dumps(_pending_marker(entry)).encode())
        atomic_write(self.fs, self._path(entry["location"]), payload)
        self._commit([entry])
        self._write_head(entry)
        self.fs.rm_file(pending)
        self._heads[(request.run_id, request.namespace)] = head
        return _saved(entry)

    def save_many(self, requests: Iterable[SaveRequest]) -> list[SavedCheckpoint]:
        """Save many checkpoints with one commit marker (bulk loads, generators).

        Blobs are written first and synced; the single tail file that lists
        them is the commit. A crash before it leaves unlisted blobs only.
        """
        entries, heads = [], {}
        for request in requests:
            entry, payload, head = self._prepare(request, check=(request.run_id, request.namespace) not in heads)
            atomic_write(self.fs, self._path(entry["location"]), payload, durable=False)
            entries.append(entry)
            heads[(request.run_id, request.namespace)] = (entry, head)
            self._heads[(request.run_id, request.namespace)] = head
        if not entries:
            return []
        if is_local(self.fs):
            os.sync()
        self._commit(entries)
        for entry, _head in heads.values():
            self._write_head(entry)
        return [_saved(e) for e in entries]

    def _prepare(self, request: SaveRequest, check: bool = True) -> tuple[dict[str, Any], bytes, _Head]:
        key = (request.run_id, request.namespace)
        parent = self._current_parent(*key) if check else self._heads.get(key)
        snapshot = nf.decode_payload(nf.encode_payload(request.state, self.codec), self.codec)
        kind = self._choose_kind(request.kind, parent)
        cid = request.checkpoint_id or nf.new_checkpoint_id()
        location = nf.blob_location(request.run_id, cid, self.codec)
        if kind == "incremental":
            body = nf.patch_envelope(parent.ref, make_patch(parent.state, snapshot))
        else:
            body = snapshot
        payload = nf.encode_payload(body, self.codec)
        step = request.step if request.step is not None else (parent.step + 1 if parent else 0)
        entry = _entry(request, cid, parent, kind, step, location, payload, self.codec)
        ref = {"checkpoint_id": cid, "location": location, "codec": self.codec,
               "checksum": entry["checksum"], "kind": kind}
        chain = parent.chain + 1 if (kind == "incremental" and parent) else 0
        return entry, payload, _Head(ref, step, snapshot, chain)

    def _choose_kind(self, wanted: str | None, parent: _Head | None) -> str:
        if wanted not in (None, *nf.KINDS):
            raise ValueError(f"kind must be one of {nf.KINDS}")
        if parent is None or parent.state is _UNKNOWN:
            return "full"
        if wanted:
            return wanted
        return "incremental" if parent.chain + 1 < self.full_every else "full"

    def _commit(self, entries: list[dict[str, Any]]) -> None:
        name = f"{nf.quote_name(entries[0]['checkpoint_id'])}-{len(entries)}.jsonl"
        atomic_write(self.fs, self._path(f"{nf.TAIL}/{name}"),
                     b"".join(nf.entry_line(e) for e in entries))

    def _write_head(self, entry: dict[str, Any]) -> None:
        head = {key: entry[key] for key in ("run_id", "namespace", "checkpoint_id", "step",
                                            "kind", "codec", "location", "checksum")}
        head["updated_at"] = nf.iso(datetime.now(UTC))
        atomic_write(self.fs, self._head_path(entry["run_id"], entry["namespace"]),
                     json.dumps(head, indent=1).encode())

    def _head_path(self, run_id: str, namespace: str) -> str:
        suffix = f"@{nf.quote_name(namespace)}" if namespace else ""
        return self._path(f"{nf.HEADS}/{nf.quote_name(run_id)}{suffix}.json")

    # ---- heads -------------------------------------------------------------------

    def head(self, run_id: str, namespace: str = "") -> dict[str, Any] | None:
        """The run's head pointer (checkpoint id, step, blob), or None."""
        try:
            data = read_bounded(self.fs, self._head_path(run_id, namespace), limits.MAX_SMALL_FILE_BYTES,
                                real_root(self.fs, self.root))
        except FileNotFoundError:
            return None
        except (UnsafePath, NotAFile, TooLarge) as exc:
            raise StoreNotFound(f"the head of run {run_id!r} cannot be read: {exc}") from None
        try:
            value = json.loads(data)
        except ValueError:
            return None  # a damaged head: the run resumes as a new one; the reader reports it
        return value if isinstance(value, dict) else None

    def _current_parent(self, run_id: str, namespace: str) -> _Head | None:
        """The head this save builds on. When the run's head on disk is no longer what this writer
        last saved (``lastgood restore``/``rollback`` moved it, or another writer saved), the save is
        refused: building on the old head would overwrite the action and mark nothing."""
        cached = self._heads.get((run_id, namespace))
        if cached is None:
            return self._load_head(run_id, namespace)
        on_disk = self.head(run_id, namespace) or {}
        if on_disk.get("checkpoint_id") != cached.ref["checkpoint_id"]:
            self._heads.pop((run_id, namespace), None)  # the next save builds on the new head
            note = on_disk.get("note") if isinstance(on_disk.get("note"), dict) else {}
            by = f" by {note.get('action')} {note.get('action_id')}" if note.get("action_id") else ""
            raise ConflictError(
                f"the head of run {run_id!r} was moved{by} (now {on_disk.get('checkpoint_id')}, this writer's "
                f"last save {cached.ref['checkpoint_id']}): nothing was saved; resume from "
                "load_head_state() and save again")
        return cached

    def _load_head(self, run_id: str, namespace: str) -> _Head | None:
        head = self.head(run_id, namespace)
        if not head:
            return None
        ref = {k: head.get(k) for k in ("checkpoint_id", "location", "codec", "checksum", "kind")}
        return _Head(ref, int(head.get("step") or 0), _UNKNOWN, 0)

    def load_head_state(self, run_id: str, namespace: str = "") -> Any:
        """The state a resuming agent should continue from (None for a new run)."""
        from lastgood.readers.base import CheckpointRecord
        from lastgood.readers.native.reader import NativeReader

        head = self.head(run_id, namespace)
        if head is None:
            return None
        record = CheckpointRecord(run_id=run_id, namespace=namespace,
                                  checkpoint_id=head["checkpoint_id"], kind=head.get("kind") or "full",
                                  codec=head.get("codec"), location=head.get("location"),
                                  checksum=head.get("checksum"))
        return NativeReader(self.url, self.fs.storage_options).load_state(record)

    # ---- compaction --------------------------------------------------------------

    def compact(self) -> CompactionReport:
        """Fold tail files and older parts into one Parquet part.

        The new part is written (atomically) before anything is removed; a
        crash in between only leaves duplicates, which readers drop. Tail
        files with malformed lines move to catalog/rejected/ instead.
        """
        parts = self._names(nf.PARTS, ".parquet")
        tails = self._names(nf.TAIL, ".jsonl")
        tables = [self._read_part(n) for n in parts]
        entries, good, bad = self._read_tails(tails)
        if entries:
            tables.append(nf.entries_table(entries))
        if not tables or (len(parts) <= 1 and not tails):
            return CompactionReport(sum(t.num_rows for t in tables), 0, 0, 0, None)
        merged = _dedupe(pa.concat_tables(tables))
        name = f"part-{nf.new_checkpoint_id()}.parquet"
        sink = pa.BufferOutputStream()
        pq.write_table(merged, sink, compression="zstd", row_group_size=256_000)
        atomic_write(self.fs, self._path(f"{nf.PARTS}/{name}"), sink.getvalue().to_pybytes())
        for old in parts:
            self.fs.rm_file(self._path(f"{nf.PARTS}/{old}"))
        for tail in good:
            self.fs.rm_file(self._path(f"{nf.TAIL}/{tail}"))
        if bad:
            self.fs.makedirs(self._path(nf.REJECTED), exist_ok=True)
        for tail in bad:
            self.fs.mv(self._path(f"{nf.TAIL}/{tail}"), self._path(f"{nf.REJECTED}/{tail}"))
        return CompactionReport(merged.num_rows, len(parts), len(good), len(bad), name)

    def _names(self, folder: str, suffix: str) -> list[str]:
        try:
            paths = self.fs.ls(self._path(folder), detail=False)
        except FileNotFoundError:
            return []
        names = [p.rstrip("/").rsplit("/", 1)[-1] for p in paths]
        return sorted(n for n in names if n.endswith(suffix) and not is_temp_name(n))

    def _read_part(self, name: str) -> pa.Table:
        with self.fs.open(self._path(f"{nf.PARTS}/{name}"), "rb") as handle:
            return nf.read_part(handle)

    def _read_tails(self, names: list[str]) -> tuple[list[dict[str, Any]], list[str], list[str]]:
        entries: list[dict[str, Any]] = []
        good, bad = [], []
        for name in names:
            data = self.fs.cat_file(self._path(f"{nf.TAIL}/{name}"))
            parsed, malformed = _parse_lines(data)
            entries.extend(parsed)
            (bad if malformed else good).append(name)
        return entries, good, bad


_UNKNOWN = object()


def _parse_lines(data: bytes) -> tuple[list[dict[str, Any]], bool]:
    entries, malformed = [], False
    for line in data.splitlines():
        if line.strip():
            try:
                entry, problem = nf.parse_entry_checked(line)
            except (ValueError, TypeError):
                malformed = True
                continue
            entries.append(entry)
            malformed = malformed or problem is not None  # keep the original line: reject the file
    return entries, malformed


def _dedupe(table: pa.Table) -> pa.Table:
    """One row per (run, namespace, id), the last one read (LangGraph's copy_thread keeps ids)."""
    last: dict[tuple[str, str, str], int] = {}
    keys = zip(table.column("run_id").to_pylist(), table.column("namespace").to_pylist(),
               table.column("checkpoint_id").to_pylist(), strict=True)
    for index, (run, namespace, cid) in enumerate(keys):
        last[(run, namespace or "", cid)] = index
    keep = pa.array(sorted(last.values()), pa.int64())
    table = table.take(keep) if len(keep) != table.num_rows else table
    return table.sort_by([("run_id", "ascending"), ("namespace", "ascending"),
                          ("step", "ascending"), ("checkpoint_id", "ascending")])


def _entry(request: SaveRequest, cid: str, parent: _Head | None, kind: str, step: int,
           location: str, payload: bytes, codec: str) -> dict[str, Any]:
    metadata = dict(request.metadata)
    if request.event:
        metadata["event"] = dict(request.event)
    return {
        "run_id": request.run_id, "namespace": request.namespace, "checkpoint_id": cid,
        "parent_id": parent.ref["checkpoint_id"] if parent else None, "step": step,
        "created_at": request.created_at or datetime.now(UTC), "trigger": request.trigger,
        "kind": kind, "size_bytes": len(payload), "checksum": nf.sha256_text(payload),
        "agent": request.agent, "codec": codec, "location": location,
        "metadata": json.dumps(metadata, sort_keys=True, default=str),
    }


def _pending_marker(entry: dict[str, Any]) -> dict[str, Any]:
    keys = ("run_id", "namespace", "checkpoint_id", "parent_id", "step", "trigger", "kind",
            "agent", "codec", "location")
    marker = {key: entry[key] for key in keys}
    marker["started_at"] = nf.iso(entry["created_at"])
    return marker


def _saved(entry: dict[str, Any]) -> SavedCheckpoint:
    return SavedCheckpoint(entry["run_id"], entry["checkpoint_id"], entry["namespace"],
                           entry["parent_id"], entry["step"], entry["kind"], entry["location"],
                           entry["size_bytes"], entry["checksum"], entry["created_at"])
