"""Reader for the native Lastgood store (layout in readers/native_format.py, docs/format.md).

Listing reads only the catalog: compacted Parquet parts plus the tail of
JSON-lines commit markers, and the pending markers of saves in progress. A
malformed catalog line becomes a store-level finding; every other line loads.
"""

from __future__ import annotations

import json
import posixpath
import time
from collections import OrderedDict
from collections.abc import Iterable, Iterator, Mapping
from datetime import datetime
from typing import Any

import pyarrow as pa

from lastgood import limits
from lastgood.checks import Check
from lastgood.errors import DecodeError, NotAFile, ReaderError, TooLarge, UnsafePath
from lastgood.readers import native_format as nf
from lastgood.readers import validate
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
from lastgood.readers.fsutil import (Size, blob_limit, is_local, is_temp_name, local_file_size,
                                     local_sizes, local_stamps, open_fs, read_bounded, real_root,
                                     require_dir, safe_join)
from lastgood.readers.jsonpatch import PatchError, apply_patch_sized

MAX_CHAIN = limits.MAX_CHAIN
STATE_CACHE_SIZE = 256
REFUSED = (UnsafePath, NotAFile, TooLarge)


class NativeReader(Reader):
    name = "native"
    description = "Lastgood's own checkpoint store on any fsspec URL"

    def __init__(self, url: str, storage_options: Mapping[str, Any] | None = None) -> None:
        super().__init__(url, storage_options)
        self.fs, self.root = open_fs(url, storage_options)
        require_dir(self.fs, self.root, url)
        self.root_real = real_root(self.fs, self.root)
        self._check_marker(url)
        self._states: OrderedDict[tuple[str, str], tuple[Any, int]] = OrderedDict()
        self._refused: list[Finding] = []

    def _check_marker(self, url: str) -> None:
        """Refuse a folder that is not a native store, or one of a format version we do not know."""
        try:
            data = self._read(nf.MARKER, limits.MAX_SMALL_FILE_BYTES)
        except FileNotFoundError:
            raise ReaderError(f"{url} is not a Lastgood store (no {nf.MARKER})") from None
        except REFUSED as exc:
            raise ReaderError(f"{url}: store marker refused: {exc}") from None
        try:
            marker = validate.json_object(data, nf.MARKER)
        except validate.Invalid as exc:
            raise ReaderError(f"{url}: store marker unreadable: {exc}") from None
        validate.store_marker(marker, url, nf.FORMAT_NAME, nf.FORMAT_VERSION)

    def _read(self, relative: str, limit: int) -> bytes:
        """One store file, bounded, refusing symlinks out and special files."""
        return read_bounded(self.fs, self._path(relative), limit, self.root_real)

    @classmethod
    def sniff(cls, url: str, storage_options: Mapping[str, Any] | None = None) -> bool:
        fs, root = open_fs(url, storage_options)
        return bool(fs.exists(f"{root}/{nf.MARKER}"))

    def _path(self, relative: str) -> str:
        return safe_join(self.root, relative)

    # ---- listing -------------------------------------------------------------

    def scan(self, since: str | None = None) -> Scan:
        """The catalog since ``since``; a file that vanishes while being read (a
        concurrent compaction) makes the whole listing be read again."""
        for attempt in range(limits.SNAPSHOT_RETRIES):
            try:
                return self._scan_once(since)
            except FileNotFoundError:
                if attempt + 1 == limits.SNAPSHOT_RETRIES:
                    raise ReaderError(f"{self.url}: the catalog kept changing while it was read "
                                      f"({limits.SNAPSHOT_RETRIES} attempts); try again") from None
                time.sleep(0.02 * (attempt + 1))
        raise AssertionError("unreachable")  # pragma: no cover

    def _scan_once(self, since: str | None) -> Scan:
        self._refused = []
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
        findings: list[Finding] = list(self._refused)
        parts, part_events = self._parts(new_parts, findings)
        tails = self._tail_tables(new_tail, findings)
        pending = self._pending_table(listing["pending"], tails, parts, findings)
        batches = [*parts, *[_as_checkpoints(t) for t in tails if t.num_rows], pending]
        return Scan(
            token=token,
            full=full,
            checkpoints=iter([b for b in batches if b.num_rows]),
            events=iter([*part_events, *[_events(t) for t in tails if t.num_rows]]),
            findings=findings,
            heads=self._heads(new_heads, findings),
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
            stamps, refused = local_stamps(path, suffix)
            self._refused.extend(
                Finding(Check.NOT_A_FILE, "error", f"{folder}/{name}: not a regular file; ignored")
                for name in refused)
            return stamps
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

    def _parts(self, names: list[str], findings: list[Finding]
               ) -> tuple[list[pa.Table | ParquetSource], list[pa.Table]]:
        """Compacted parts: local files go to the index as Parquet (DuckDB reads them
        itself) once they pass validation; remote ones, and parts with invalid rows,
        are read here row by row. Events come from their metadata column."""
        batches: list[pa.Table | ParquetSource] = []
        events = []
        for name in sorted(names):
            relative = f"{nf.PARTS}/{name}"
            try:
                batch = self._part(relative, findings)
            except FileNotFoundError:
                raise
            except (*REFUSED, ValueError, KeyError, OSError, pa.ArrowException) as exc:
                findings.append(Finding(_refusal_check(exc), "error",
                                        f"{relative}: unreadable catalog part, skipped: {exc}"))
                continue
            batches.append(batch)
            events.append(_events(batch.paths[0] if isinstance(batch, ParquetSource) else batch))
        return batches, events

    def _part(self, relative: str, findings: list[Finding]) -> pa.Table | ParquetSource:
        path = self._path(relative)
        if is_local(self.fs):
            size = local_file_size(path, str(self.root_real))
            if size > limits.MAX_CATALOG_FILE_BYTES:
                raise TooLarge(f"{size} bytes (limit {limits.MAX_CATALOG_FILE_BYTES})")
            rows = nf.part_rows(path)
            if validate.part_is_clean(path, rows):
                return ParquetSource((path,), rows)
            table = nf.read_part(path)
        else:
            table = nf.read_part(pa.BufferReader(self._read(relative, limits.MAX_CATALOG_FILE_BYTES)))
            if validate.part_is_clean(table, table.num_rows):
                return _as_checkpoints(table)
        entries = validate.part_entries(table, relative, findings)
        return _as_checkpoints(nf.entries_table(entries))

    def _tail_tables(self, names: list[str], findings: list[Finding]) -> list[pa.Table]:
        entries: dict[tuple[str, str, str], dict[str, Any]] = {}
        for name in sorted(names):
            relative = f"{nf.TAIL}/{name}"
            try:
                data = self._read(relative, limits.MAX_CATALOG_FILE_BYTES)
            except REFUSED as exc:
                findings.append(Finding(_refusal_check(exc), "error", f"{relative}: refused: {exc}"))
                continue
            for entry in _parse_tail_file(relative, data, findings):
                entries[(entry["run_id"], entry["namespace"], entry["checkpoint_id"])] = entry
        return [nf.entries_table(list(entries.values()))] if entries else []

    def _pending_table(self, names: dict[str, str], tails: list[pa.Table],
                       parts: list[pa.Table | ParquetSource], findings: list[Finding]) -> pa.Table:
        if not names:
            return checkpoints_table([])
        committed = {cid for t in tails for cid in t.column("checkpoint_id").to_pylist()}
        committed |= {cid for p in parts for cid in _ids(p)}
        records = []
        for name in sorted(names):
            relative = f"{nf.PENDING}/{name}"
            try:
                marker = validate.native_pending(
                    validate.json_object(self._read(relative, limits.MAX_SMALL_FILE_BYTES), relative))
            except FileNotFoundError:
                continue  # the save committed meanwhile: its entry is in the next listing
            except (validate.Invalid, *REFUSED) as exc:
                findings.append(Finding(_refusal_check(exc), "warning",
                                        f"{relative}: pending marker ignored: {exc}"))
                continue
            if marker["checkpoint_id"] not in committed:
                records.append(_pending_record(marker))
        return checkpoints_table(records)

    def _heads(self, names: list[str], findings: list[Finding]) -> list[HeadRecord]:
        heads = []
        for name in sorted(names):
            relative = f"{nf.HEADS}/{name}"
            try:
                data = self._read(relative, limits.MAX_SMALL_FILE_BYTES)
                run_id, cid, namespace = validate.native_head(validate.json_object(data, relative))
            except FileNotFoundError:
                continue
            except (validate.Invalid, *REFUSED) as exc:
                findings.append(Finding(_refusal_check(exc), "error", f"{relative}: head ignored: {exc}"))
                continue
            heads.append(HeadRecord(run_id, cid, namespace))
        return heads

    # ---- one checkpoint ------------------------------------------------------

    def read_blob(self, record: CheckpointRecord) -> bytes:
        """The blob's bytes: at most its recorded size plus a margin; symlinks out of
        the store and non-regular files are refused without being opened."""
        return self._read_ref(_ref(record.checkpoint_id, record.location, record.codec,
                                   record.checksum, record.kind), record.size_bytes)

    def _read_ref(self, ref: dict[str, Any], size: int | None = None) -> bytes:
        location = ref.get("location")
        if not location or not isinstance(location, str):
            raise DecodeError(f"checkpoint {ref.get('checkpoint_id')} has no blob location",
                              Check.BLOB_MISSING)
        try:
            return self._read(location, blob_limit(size))
        except FileNotFoundError:
            raise DecodeError(f"blob missing: {location}", Check.BLOB_MISSING) from None
        except REFUSED as exc:
            raise DecodeError(f"blob {location} refused: {exc}", _refusal_check(exc)) from None
        except IsADirectoryError:
            raise DecodeError(f"blob {location} is a folder", Check.NOT_A_FILE) from None

    def load_state(self, record: CheckpointRecord) -> Any:
        ref = _ref(record.checkpoint_id, record.location, record.codec, record.checksum, record.kind)
        return self._state(ref, record.size_bytes)

    def _state(self, ref: dict[str, Any], size: int | None = None) -> Any:
        """The state at ``ref``: walk parents back (iteratively) to a full or cached
        state, then apply the patches forward. Cycles and chains longer than
        MAX_CHAIN are findings, never recursion."""
        chain: list[tuple[dict[str, Any], dict[str, Any]]] = []
        seen: set[tuple[str, str]] = set()
        current = ref
        while True:
            key = _key(current)
            if key in self._states:
                self._states.move_to_end(key)
                state, cost = self._states[key]
                break
            if key in seen:
                raise DecodeError(f"incremental chain has a cycle at {_cid(current)}", Check.PARENT_CYCLE)
            if len(chain) >= MAX_CHAIN:
                raise DecodeError(f"incremental chain longer than {MAX_CHAIN} checkpoints",
                                  Check.CHAIN_BROKEN)
            seen.add(key)
            value = self._decode_link(current, size if not chain else None, bool(chain))
            if current.get("kind") != "incremental":
                state, cost = value, validate.cost(value)
                self._remember(key, state, cost)
                break
            chain.append((current, value))
            current = value["parent"]
        for link, envelope in reversed(chain):
            state, cost = self._apply(state, cost, envelope, link)
            self._remember(_key(link), state, cost)
        return state

    def _decode_link(self, ref: dict[str, Any], size: int | None, ancestor: bool) -> Any:
        """One blob of a chain, checked and decoded (an envelope when incremental)."""
        try:
            data = self._read_ref(ref, size)
            _check_checksum(data, ref)
            value = nf.decode_payload(data, str(ref.get("codec")))
            if ref.get("kind") == "incremental" and (
                    not nf.is_patch(value) or not isinstance(value.get("parent"), dict)):
                raise DecodeError("incremental payload is not a patch envelope")
        except DecodeError as exc:
            if not ancestor:
                raise
            raise DecodeError(f"incremental chain broken: parent {_cid(ref)} unreadable ({exc})",
                              Check.CHAIN_BROKEN) from None
        return value

    def _apply(self, base: Any, cost: int, envelope: dict[str, Any],
               link: dict[str, Any]) -> tuple[Any, int]:
        try:
            return apply_patch_sized(base, envelope["ops"], cost)
        except PatchError as exc:
            check = Check.TOO_LARGE if exc.too_large else Check.CHAIN_BROKEN
            raise DecodeError(f"incremental chain broken at {_cid(link)}: {exc}", check) from None

    def _remember(self, key: tuple[str, str], state: Any, cost: int) -> None:
        self._states[key] = (state, cost)
        if len(self._states) > STATE_CACHE_SIZE:
            self._states.popitem(last=False)

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

    def _blob_sizes(self, records: list[CheckpointRecord]) -> dict[str, Size]:
        """Sizes of the blobs these records name (or why a blob is refused): one
        listing per folder they live in. Nothing is opened."""
        folders = {posixpath.dirname(posixpath.normpath(r.location)) for r in records
                   if r.location and not _leaves_root(r.location)}
        if len(folders) * 4 > len(records):  # few records per folder: ask for each blob
            return self._sizes_one_by_one(records)
        sizes: dict[str, Size] = {}
        for folder in sorted(folders):
            try:
                if is_local(self.fs):
                    sizes.update(local_sizes(self._path(folder), folder, str(self.root_real)))
                    continue
                listing = self.fs.ls(self._path(folder), detail=True)
            except (FileNotFoundError, NotADirectoryError, UnsafePath):
                continue
            for info in listing:
                sizes[_rel(self.root, info["name"])] = _remote_size(info)
        return sizes

    def _sizes_one_by_one(self, records: list[CheckpointRecord]) -> dict[str, Size]:
        sizes: dict[str, Size] = {}
        for record in records:
            if not record.location:
                continue
            key = posixpath.normpath(record.location)
            try:
                path = self._path(record.location)
                if is_local(self.fs):
                    sizes[key] = local_file_size(path, str(self.root_real))
                else:
                    sizes[key] = _remote_size(self.fs.info(path))
            except (FileNotFoundError, NotADirectoryError):
                continue
            except REFUSED as exc:
                sizes[key] = (_refusal_check(exc), str(exc))
        return sizes

    def _structural_problem(
        self, record: CheckpointRecord, sizes: dict[str, Size]
    ) -> tuple[Check, str] | None:
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
        if isinstance(actual, tuple):
            return actual
        if record.size_bytes is not None and actual is not None and actual != record.size_bytes:
            return (Check.SIZE_MISMATCH, f"blob is {actual} bytes, catalog says {record.size_bytes}")
        return None

    def _data_findings(self, record: CheckpointRecord) -> Iterator[Finding]:
        """Re-hash, decode and replay: ``load_state`` checks each blob it reads against
        its sha256 (a state in the cache was checked when it was read)."""
        try:
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


def _remote_size(info: Mapping[str, Any]) -> Size:
    if info.get("type", "file") != "file":
        return (Check.NOT_A_FILE, f"{info.get('name')} is not a file ({info.get('type')})")
    return info.get("size")


def _refusal_check(exc: BaseException) -> Check:
    if isinstance(exc, (validate.Invalid, DecodeError)):
        return exc.check
    if isinstance(exc, UnsafePath):
        return Check.UNSAFE_PATH
    if isinstance(exc, NotAFile):
        return Check.NOT_A_FILE
    if isinstance(exc, TooLarge):
        return Check.TOO_LARGE
    return Check.CATALOG_UNREADABLE


def _key(ref: Mapping[str, Any]) -> tuple[str, str]:
    return (str(ref.get("location")), str(ref.get("checksum")))


def _cid(ref: Mapping[str, Any]) -> str:
    return str(ref.get("checkpoint_id"))[:limits.MAX_ID_CHARS]


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


def _parse_tail_file(name: str, data: bytes, findings: list[Finding]) -> list[dict[str, Any]]:
    """Valid entries of one tail file; each invalid line is a finding naming file:line."""
    entries = []
    for lineno, line in enumerate(data.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            entry, problem = nf.parse_entry_checked(line)
        except validate.Invalid as exc:
            findings.append(Finding(Check.CATALOG_LINE, "error",
                                    f"{name}:{lineno}: malformed catalog line: {exc}"))
            continue
        if problem:
            findings.append(Finding(Check.METADATA_INVALID, "warning", f"{name}:{lineno}: {problem}",
                                    entry["run_id"], entry["namespace"], entry["checkpoint_id"]))
        entries.append(entry)
    return entries


def _pending_record(marker: dict[str, Any]) -> CheckpointRecord:
    started = marker["started_at"]
    return CheckpointRecord(
        run_id=marker["run_id"], checkpoint_id=marker["checkpoint_id"],
        namespace=marker["namespace"], parent_id=marker["parent_id"],
        step=marker["step"], created_at=started, trigger=marker["trigger"],
        kind=marker["kind"], status="incomplete",
        status_reason=f"save started {_when(started)} but never committed (no commit marker)",
        agent=marker["agent"], codec=marker["codec"], location=marker["location"],
    )


def _when(ts: datetime | None) -> str:
    return nf.iso(ts) if ts else "at an unknown time"


def _ids(batch: pa.Table | ParquetSource) -> list[str]:
    if not isinstance(batch, ParquetSource):
        return batch.column("checkpoint_id").to_pylist()
    ids: list[str] = []
    for path in batch.paths:
        ids += nf.read_part(path, columns=("checkpoint_id",)).column(0).to_pylist()
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
        try:
            event = json.loads(metadata or "{}").get("event")
        except (ValueError, AttributeError, RecursionError):
            continue
        if isinstance(event, dict):
            found.append({"run_id": run_id, "namespace": namespace, "checkpoint_id": checkpoint_id,
                          "created_at": created_at, "kind": _event_text(event.get("kind", "event"), 64),
                          "channel": None, "task_id": None,
                          "message": _event_text(event.get("message"), limits.MAX_TEXT_CHARS)})
    return rows_table(found, EVENT_SCHEMA)


def _event_text(value: Any, limit: int) -> str | None:
    """An event field as bounded text (events come from untrusted metadata)."""
    if value is None:
        return None
    text = value if isinstance(value, str) else json.dumps(value, default=str)[:limit]
    return text[:limit].encode("utf-8", "replace").decode("utf-8")
