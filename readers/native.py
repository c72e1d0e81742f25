"""Reader for the native Lastgood store (layout in readers/native_format.py, docs/format.md).

Listing reads only the catalog: compacted Parquet parts plus the tail of
JSON-lines commit markers, and the pending markers of saves in progress. A
malformed catalog line becomes a store-level finding; every other line loads.
"""

from __future__ import annotations

from lastgood.checks import Check
import json
import os
import posixpath
from collections import OrderedDict
from collections.abc import Iterable, Iterator, Mapping
from datetime import datetime
from typing import Any

import pyarrow as pa

from lastgood.errors import DecodeError, ReaderError, UnsafePath
from lastgood.readers import native_format as nf
from lastgood.readers.base import (
    CHECKPOINT_SCHEMA,
    EVENT_SCHEMA,
    CheckpointRecord,
    Finding,
    HeadRecord,
    ParquetSource,
    Reader,
    Scan,
    checkpoints_table,
    rows_table,
)
from lastgood.readers.fsutil import is_local, is_temp_name, open_fs, require_dir, safe_join
from lastgood.readers.jsonpatch import PatchError, apply_patch

MAX_CHAIN = 10_000
STATE_CACHE_SIZE = 256


class NativeReader(Reader):
    name = "native"
    description = "Lastgood's own checkpoint store on any fsspec URL"

    def __init__(self, url: str, storage_options: Mapping[str, Any] | None = None) -> None:
        super().__init__(url, storage_options)
        self.fs, self.root = open_fs(url, storage_options)
        require_dir(self.fs, self.root, url)
        if not self.fs.exists(self._path(nf.MARKER)):
            raise ReaderError(f"{url} is not a Lastgood store (no {nf.MARKER})")
        self._states: OrderedDict[tuple[str, str], Any] = OrderedDict()

    @classmethod
    def sniff(cls, url: str, storage_options: Mapping[str, Any] | None = None) -> bool:
        fs, root = open_fs(url, storage_options)
        return bool(fs.exists(f"{root}/{nf.MARKER}"))

    def _path(self, relative: str) -> str:
        return safe_join(self.root, relative)

    # ---- listing -------------------------------------------------------------

    def scan(self, since: str | None = None) -> Scan:
        listing = self._listing()
        token = json.dumps(listing, sort_keys=True)
        previous = _parse_token(since)
        if previous == listing:
            return Scan(token=token, full=False, checkpoints=iter(()))
        full = previous is None or _something_vanished(previous, listing)
        base = {} if full else previous
        new_parts = _added(base.get("parts", {}), listing["parts"])
        new_tail = _added(base.get("tail", {}), listing["tail"])
        new_heads = _added(base.get("heads", {}), listing["heads"])
        findings: list[Finding] = []
        parts, part_events = self._parts(new_parts)
        tails = self._tail_tables(new_tail, findings)
        pending = self._pending_table(listing["pending"], tails, parts)
        batches = [*parts, *[_as_checkpoints(t) for t in tails if t.num_rows], pending]
        return Scan(
            token=token,
            full=full,
            checkpoints=iter([b for b in batches if b.num_rows]),
            events=iter([*part_events, *[_events(t) for t in tails if t.num_rows]]),
            findings=findings,
            heads=self._heads(new_heads),
        )

    def _listing(self) -> dict[str, dict[str, str]]:
        return {
            "parts": self._stamps(nf.PARTS, ".parquet"),
            "tail": self._stamps(nf.TAIL, ".jsonl"),
            "pending": self._stamps(nf.PENDING, ".json"),
            "heads": self._stamps(nf.HEADS, ".json"),
        }

    def _stamps(self, folder: str, suffix: str) -> dict[str, str]:
        path = self._path(folder)
        if is_local(self.fs):
            return _local_stamps(path, suffix)
        try:
            entries = self.fs.ls(path, detail=True)
        except FileNotFoundError:
            return {}
        stamps = {}
        for info in entries:
            name = posixpath.basename(info["name"].rstrip("/"))
            if info.get("type") == "file" and name.endswith(suffix) and not is_temp_name(name):
                stamps[name] = _stamp(info)
        return stamps

    def _parts(self, names: list[str]) -> tuple[list[pa.Table | ParquetSource], list[pa.Table]]:
        """Compacted parts: local files go to the index as Parquet (DuckDB reads them
        itself); remote ones are read here. Events come from their metadata column."""
        batches: list[pa.Table | ParquetSource] = []
        events = []
        for name in sorted(names):
            path = self._path(f"{nf.PARTS}/{name}")
            if is_local(self.fs):
                batches.append(ParquetSource((path,), nf.part_rows(path)))
                events.append(_events(path))
            else:
                with self.fs.open(path, "rb") as handle:
                    entries = nf.read_part(handle)
                batches.append(_as_checkpoints(entries))
                events.append(_events(entries))
        return batches, events

    def _tail_tables(self, names: list[str], findings: list[Finding]) -> list[pa.Table]:
        if not names:
            return []
        paths = [self._path(f"{nf.TAIL}/{name}") for name in sorted(names)]
        blobs = self.fs.cat(paths, on_error="return")
        entries: list[dict[str, Any]] = []
        for path in paths:
            entries.extend(_parse_tail_file(path, blobs.get(path), self.root, findings))
        return [nf.entries_table(entries)] if entries else []

    def _pending_table(self, names: dict[str, str], tails: list[pa.Table],
                       parts: list[pa.Table | ParquetSource]) -> pa.Table:
        if not names:
            return checkpoints_table([])
        committed = {cid for t in tails for cid in t.column("checkpoint_id").to_pylist()}
        committed |= {cid for p in parts for cid in _ids(self.fs, p)}
        paths = [self._path(f"{nf.PENDING}/{name}") for name in sorted(names)]
        blobs = self.fs.cat(paths, on_error="return")
        records = [_pending_record(p, blobs.get(p)) for p in paths]
        return checkpoints_table(r for r in records if r and r.checkpoint_id not in committed)

    def _heads(self, names: list[str]) -> list[HeadRecord]:
        if not names:
            return []
        paths = [self._path(f"{nf.HEADS}/{name}") for name in sorted(names)]
        blobs = self.fs.cat(paths, on_error="return")
        heads = []
        for path in paths:
            head = _parse_json_object(blobs.get(path))
            if head and head.get("run_id") and head.get("checkpoint_id"):
                heads.append(
                    HeadRecord(head["run_id"], head["checkpoint_id"], head.get("namespace") or "")
                )
        return heads

    # ---- one checkpoint ------------------------------------------------------

    def read_blob(self, record: CheckpointRecord) -> bytes:
        if not record.location:
            raise DecodeError(f"checkpoint {record.checkpoint_id} has no blob location")
        try:
            return self.fs.cat_file(self._path(record.location))
        except FileNotFoundError:
            raise DecodeError(f"blob missing: {record.location}", Check.BLOB_MISSING) from None

    def load_state(self, record: CheckpointRecord) -> Any:
        ref = _ref(record.checkpoint_id, record.location, record.codec, record.checksum, record.kind)
        return self._state(ref, depth=0)

    def _state(self, ref: dict[str, Any], depth: int) -> Any:
        if depth > MAX_CHAIN:
            raise DecodeError("incremental chain too long or cyclic", Check.CHAIN_BROKEN)
        key = (str(ref.get("location")), str(ref.get("checksum")))
        if key in self._states:
            self._states.move_to_end(key)
            return self._states[key]
        state = self._decode(ref, depth)
        self._states[key] = state
        if len(self._states) > STATE_CACHE_SIZE:
            self._states.popitem(last=False)
        return state

    def _decode(self, ref: dict[str, Any], depth: int) -> Any:
        record = CheckpointRecord(run_id="", checkpoint_id=str(ref.get("checkpoint_id")),
                                  location=ref.get("location"))
        try:
            data = self.read_blob(record)
        except UnsafePath as exc:
            raise DecodeError(str(exc), Check.UNSAFE_PATH) from None
        _check_checksum(data, ref)
        value = nf.decode_payload(data, str(ref.get("codec")))
        if ref.get("kind") != "incremental":
            return value
        return self._apply(value, ref, depth)

    def _apply(self, value: Any, ref: dict[str, Any], depth: int) -> Any:
        if not nf.is_patch(value) or not isinstance(value.get("parent"), dict):
            raise DecodeError("incremental payload is not a patch envelope")
        parent = value["parent"]
        try:
            base = self._state(parent, depth + 1)
        except DecodeError as exc:
            raise DecodeError(
                f"incremental chain broken: parent {parent.get('checkpoint_id')} unreadable ({exc})",
                Check.CHAIN_BROKEN,
            ) from None
        try:
            return apply_patch(base, value["ops"])
        except PatchError as exc:
            raise DecodeError(f"incremental chain broken: {exc}", Check.CHAIN_BROKEN) from None

    # ---- integrity -------------------------------------------------------------

    def check_checkpoints(
        self, records: Iterable[CheckpointRecord], read_data: bool = False
    ) -> Iterator[Finding]:
        """Format checks: blob path, codec, blob present with the listed size, and
        with ``read_data`` the sha256, decoding and the incremental chain."""
        records = list(records)
        sizes = self._blob_sizes(records)
        for record in records:
            problem = self._structural_problem(record, sizes)
            if problem:
                yield _finding(record, *problem)
            elif read_data:
                yield from self._data_findings(record)

    def _blob_sizes(self, records: list[CheckpointRecord]) -> dict[str, int | None]:
        """Sizes of the blobs these records name: one listing per folder they live in."""
        folders = {posixpath.dirname(posixpath.normpath(r.location)) for r in records
                   if r.location and not _leaves_root(r.location)}
        if len(folders) * 4 > len(records):  # few records per folder: ask for each blob
            return self._sizes_one_by_one(records)
        sizes: dict[str, int | None] = {}
        for folder in sorted(folders):
            try:
                listing = self.fs.ls(self._path(folder), detail=True)
            except (FileNotFoundError, UnsafePath):
                continue
            for info in listing:
                sizes[_rel(self.root, info["name"])] = info.get("size")
        return sizes

    def _sizes_one_by_one(self, records: list[CheckpointRecord]) -> dict[str, int | None]:
        sizes: dict[str, int | None] = {}
        for record in records:
            if record.location:
                try:
                    sizes[posixpath.normpath(record.location)] = self.fs.info(
                        self._path(record.location)).get("size")
                except (FileNotFoundError, UnsafePath):
                    continue
        return sizes

    def _structural_problem(
        self, record: CheckpointRecord, sizes: dict[str, int | None]
    ) -> tuple[str, str] | None:
        if record.status == "incomplete":
            return (Check.INCOMPLETE, record.status_reason or "save never committed")
        if not record.location:
            return (Check.BLOB_MISSING, "catalog entry names no blob")
        try:
            self._path(record.location)
        except UnsafePath as exc:
            return (Check.UNSAFE_PATH, str(exc))
        if record.codec not in nf.CODECS:
            return (Check.UNKNOWN_CODEC, f"unknown codec {record.codec!r} (known: {', '.join(nf.CODECS)})")
        location = posixpath.normpath(record.location)
        if location not in sizes:
            return (Check.BLOB_MISSING, f"blob {record.location} does not exist")
        actual = sizes[location]
        if record.size_bytes is not None and actual is not None and actual != record.size_bytes:
            return (Check.SIZE_MISMATCH, f"blob is {actual} bytes, catalog says {record.size_bytes}")
        return None

    def _data_findings(self, record: CheckpointRecord) -> Iterator[Finding]:
        try:
            data = self.read_blob(record)
            _check_checksum(data, _ref(record.checkpoint_id, record.location, record.codec,
                                       record.checksum, record.kind))
            self.load_state(record)
        except DecodeError as exc:
            yield _finding(record, exc.check, str(exc))


# ---- helpers ------------------------------------------------------------------

def _ref(cid: str, location: str | None, codec: str | None, checksum: str | None,
         kind: str | None) -> dict[str, Any]:
    return {"checkpoint_id": cid, "location": location, "codec": codec,
            "checksum": checksum, "kind": kind or "full"}


def _check_checksum(data: bytes, ref: dict[str, Any]) -> None:
    expected = ref.get("checksum")
    if expected and nf.sha256_text(data) != expected:
        raise DecodeError(
            f"sha256 mismatch: blob {ref.get('location')} hashes to "
            f"{nf.sha256_text(data)[7:19]}…, catalog says {str(expected)[7:19]}…",
            Check.SHA256_MISMATCH,
        )


def _finding(record: CheckpointRecord, check: Check, message: str) -> Finding:
    severity = "error"
    return Finding(check=check, severity=severity, message=message, run_id=record.run_id,
                   namespace=record.namespace, checkpoint_id=record.checkpoint_id)


def _leaves_root(location: str) -> bool:
    normal = posixpath.normpath(location)
    return normal.startswith(("..", "/")) or "://" in location


def _rel(root: str, path: str) -> str:
    return posixpath.normpath(path[len(root):].lstrip("/"))


def _stamp(info: Mapping[str, Any]) -> str:
    for key in ("ETag", "etag", "mtime", "LastModified", "last_modified", "created"):
        if info.get(key) is not None:
            return f"{info.get('size')}:{info[key]}"
    return str(info.get("size"))


def _local_stamps(path: str, suffix: str) -> dict[str, str]:
    """Name -> "size:mtime" of a local folder's files (os.scandir: 10x fsspec's ls)."""
    try:
        with os.scandir(path) as entries:
            return {e.name: f"{e.stat().st_size}:{e.stat().st_mtime}" for e in entries
                    if e.is_file() and e.name.endswith(suffix) and not is_temp_name(e.name)}
    except FileNotFoundError:
        return {}


def _parse_token(token: str | None) -> dict[str, dict[str, str]] | None:
    if not token:
        return None
    try:
        value = json.loads(token)
    except json.JSONDecodeError:
        return None
    return value if isinstance(value, dict) else None


def _added(before: Mapping[str, str], after: Mapping[str, str]) -> list[str]:
    return [name for name, stamp in after.items() if before.get(name) != stamp]


def _something_vanished(before: Mapping[str, Any], after: Mapping[str, Any]) -> bool:
    """Parts or tail files removed with no new part to hold them: rescan everything."""
    gone = any(n not in after.get(k, {}) for k in ("parts", "tail") for n in before.get(k, {}))
    gone_pending = any(n not in after["pending"] for n in before.get("pending", {}))
    grew = bool(_added(before.get("parts", {}), after["parts"]))
    return (gone and not grew) or (gone_pending and not after["tail"] and not grew)


def _parse_json_object(data: Any) -> dict[str, Any] | None:
    if not isinstance(data, bytes):
        return None
    try:
        value = json.loads(data)
    except (UnicodeDecodeError, json.JSONDecodeError):
        return None
    return value if isinstance(value, dict) else None


def _parse_tail_file(path: str, data: Any, root: str, findings: list[Finding]) -> list[dict[str, Any]]:
    name = _rel(root, path)
    if not isinstance(data, bytes):
        findings.append(Finding(Check.CATALOG_UNREADABLE, "error", f"{name}: cannot be read ({data})"))
        return []
    entries = []
    for lineno, line in enumerate(data.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            entries.append(nf.parse_entry(line))
        except (ValueError, TypeError) as exc:
            findings.append(Finding(Check.CATALOG_LINE, "error", f"{name}:{lineno}: malformed catalog line: {exc}"))
    return entries


def _pending_record(path: str, data: Any) -> CheckpointRecord | None:
    marker = _parse_json_object(data)
    if not marker or not marker.get("checkpoint_id") or not marker.get("run_id"):
        return None
    started = nf.parse_time(marker.get("started_at"))
    return CheckpointRecord(
        run_id=marker["run_id"], checkpoint_id=marker["checkpoint_id"],
        namespace=marker.get("namespace") or "", parent_id=marker.get("parent_id"),
        step=marker.get("step"), created_at=started, trigger=marker.get("trigger"),
        kind=marker.get("kind") or "full", status="incomplete",
        status_reason=f"save started {_when(started)} but never committed (no commit marker)",
        agent=marker.get("agent"), codec=marker.get("codec"), location=marker.get("location"),
    )


def _when(ts: datetime | None) -> str:
    return nf.iso(ts) if ts else "at an unknown time"


def _ids(fs: Any, batch: pa.Table | ParquetSource) -> list[str]:
    if not isinstance(batch, ParquetSource):
        return batch.column("checkpoint_id").to_pylist()
    ids: list[str] = []
    for path in batch.paths:
        with fs.open(path, "rb") as handle:
            ids += nf.read_part(handle, columns=("checkpoint_id",)).column(0).to_pylist()
    return ids


def _as_checkpoints(entries: pa.Table) -> pa.Table:
    n = entries.num_rows
    columns = {name: entries.column(name) for name in nf.ENTRY_SCHEMA.names}
    columns["status"] = pa.array(["ok"] * n, pa.string())
    columns["status_reason"] = pa.nulls(n, pa.string())
    return pa.table([columns[name] for name in CHECKPOINT_SCHEMA.names], schema=CHECKPOINT_SCHEMA)


def _events(entries: pa.Table | str) -> pa.Table:
    """Events recorded in entry metadata as {"event": {"kind":…, "message":…}}.

    ``entries`` is a table or a local Parquet path; DuckDB finds the few rows that
    carry an event without turning a million metadata strings into Python."""
    import duckdb

    con = duckdb.connect()
    try:
        if isinstance(entries, str):
            source = "read_parquet($path)"
            params = {"path": entries}
        else:
            con.register("entries", entries)
            source, params = "entries", {}
        rows = con.execute(f"""SELECT run_id, namespace, checkpoint_id, created_at, metadata
            FROM {source} WHERE metadata LIKE '%"event"%'""", params).fetchall()
    finally:
        con.close()
    found = []
    for run_id, namespace, checkpoint_id, created_at, metadata in rows:
        event = json.loads(metadata or "{}").get("event")
        if isinstance(event, dict):
            found.append({"run_id": run_id, "namespace": namespace, "checkpoint_id": checkpoint_id,
                          "created_at": created_at, "kind": str(event.get("kind", "event")),
                          "channel": None, "task_id": None, "message": event.get("message")})
    return rows_table(found, EVENT_SCHEMA)
