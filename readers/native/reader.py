"""Reader for the native Lastgood store (layout in readers/native/format.py, docs/format.md).

Listing reads only the catalog: compacted Parquet parts plus the tail of
JSON-lines commit markers, and the pending markers of saves in progress. A
malformed catalog line becomes a store-level finding; every other line loads.
"""

from __future__ import annotations

import json
import os
import posixpath
import sys
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from lastgood import limits
from lastgood.checks import Check
from lastgood.errors import DecodeError, NotAFile, ReaderError, TooLarge, UnsafePath
from lastgood.readers.native import format as nf
from lastgood.readers.native import structure as native_structure
from lastgood.readers.common import validate
from lastgood.readers.base import (
    Status,
    CheckpointRecord,
    backend_named,
    Finding,
    HeadRecord,
    ParquetSource,
    PendingWrite,
    Reader,
    Scan,
    checkpoints_table,
)
from lastgood.readers.common.fsutil import (Size, blob_limit, is_local, is_temp_name, local_file_size,
                                     local_sizes, local_stamps, open_fs, private_copy, read_bounded, real_root,
                                     require_dir, safe_join)
from lastgood.readers.common.jsonpatch import PatchError, apply_patch_sized
from lastgood.readers.native.profile import part_profile

if TYPE_CHECKING:  # pyarrow is imported when something is listed (a reopen lists nothing new)
    import pyarrow as pa

    from lastgood.readers.journal import RecoveryBackend, RetentionBackend

MAX_CHAIN = limits.MAX_CHAIN
STATE_CACHE_SIZE = 256
REFUSED = (UnsafePath, NotAFile, TooLarge)


class NativeReader(Reader):
    name = "native"
    description = "Lastgood's own checkpoint store on any fsspec URL"
    fs: Any  # the store's fsspec filesystem (capability: blob files)

    def __init__(self, url: str, storage_options: Mapping[str, Any] | None = None) -> None:
        super().__init__(url, storage_options)
        self.fs, self.root = open_fs(url, storage_options)
        require_dir(self.fs, self.root, url)
        self.root_real = real_root(self.fs, self.root)
        self._check_marker(url)
        self._states: OrderedDict[tuple[str, str], tuple[Any, int | None]] = OrderedDict()
        self._refused: list[Finding] = []
        self._last_listing: dict[str, dict[str, str]] | None = None
        self._full_scan: tuple[str, list[Any]] | None = None  # (token, batches) of the last full scan
        self._walk_ahead: native_structure.WalkAhead | None = None

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

    def blob_path(self, location: str) -> str:
        """The path of a blob (a record's ``location``) on ``fs``; refuses one leaving the store."""
        return self._path(location)

    def recovery(self) -> RecoveryBackend:
        return backend_named("lastgood.readers.native.recovery:NativeRecovery", self)

    def retention(self) -> RetentionBackend:
        return backend_named("lastgood.readers.native.retention:NativeRetention", self)  # type: ignore[return-value]

    # ---- listing -------------------------------------------------------------

    def scan(self, since: str | None = None) -> Scan:
        """The catalog since ``since``. A file that vanishes while being read (a concurrent
        compaction) makes the whole listing be read again, for as long as the catalog keeps
        changing between attempts, within limits.SNAPSHOT_SECONDS; a listing that stays the
        same while a file in it cannot be read gives up after limits.SNAPSHOT_STALLED tries."""
        deadline = time.monotonic() + limits.SNAPSHOT_SECONDS
        attempt = stalled = 0
        before = None
        while True:
            try:
                return self._scan_once(since)
            except FileNotFoundError:
                attempt += 1
                listing = self._last_listing
                stalled = stalled + 1 if listing == before else 0
                before = listing
                if stalled >= limits.SNAPSHOT_STALLED or time.monotonic() >= deadline:
                    raise ReaderError(f"{self.url}: the catalog kept changing while it was read "
                                      f"({attempt} attempts); try again") from None
                time.sleep(min(0.02 * attempt, 0.25))

    def _scan_once(self, since: str | None) -> Scan:
        self._refused = []
        listing = self._last_listing = self._listing()
        token = json.dumps(listing, sort_keys=True)
        previous = nf.parse_token(since)
        if previous == listing:
            return Scan(token=token, full=False, checkpoints=iter(()))
        full = previous is None or nf.something_vanished(previous, listing)
        base = {} if full else previous
        new_heads = nf.added(base.get("heads", {}), listing["heads"])
        findings: list[Finding] = list(self._refused)
        heads = _HeadsAhead(self, new_heads)  # read while DuckDB reads the catalog (GIL released)
        try:
            batches, part_events, tails = self._entry_batches(listing, base, findings, snapshot=full)
        except BaseException:
            heads.wait()
            raise
        head_records, head_findings = heads.take()
        findings.extend(head_findings)
        self._full_scan = (token, batches) if full else None
        if full and is_local(self.fs) and _walk_ahead_worth(sum(b.num_rows for b in batches)):
            self._walk_ahead = native_structure.WalkAhead(self.root)
        return Scan(
            token=token,
            full=full,
            checkpoints=iter(batches),
            events=iter([*part_events, *[nf.entry_events(t) for t in tails if t.num_rows]]),
            findings=findings,
            heads=head_records,
        )

    def _entry_batches(self, listing: dict[str, dict[str, str]], base: dict[str, Any],
                       findings: list[Finding], snapshot: bool = False
                       ) -> tuple[list[Any], list[pa.Table], list[pa.Table]]:
        """Parts, tail and pending entries added since ``base``: (batches, part events, tails).
        ``snapshot``: a listing that is one part and nothing else is read from a private copy
        the index may keep (Reader.snapshot_dir)."""
        sole = snapshot and len(listing["parts"]) == 1 and not listing["tail"] and not listing["pending"]
        parts, part_events = self._parts(nf.added(base.get("parts", {}), listing["parts"]), findings, sole)
        tails = self._tail_tables(nf.added(base.get("tail", {}), listing["tail"]), findings)
        pending = self._pending_table(listing["pending"], tails, parts, findings)
        batches = [*parts, *[_as_checkpoints(t) for t in tails if t.num_rows], pending]
        return [b for b in batches if b is not None and b.num_rows], part_events, tails

    def _listing(self) -> dict[str, dict[str, str]]:
        return {
            "parts": self._stamps(nf.PARTS, ".parquet"),
            "tail": self._stamps(nf.TAIL, ".jsonl"),
            "pending": self._stamps(nf.PENDING, ".json"),
            "heads": self._stamps(nf.HEADS, ".json"),
            "epoch": self._stamps(nf.CATALOG, nf.CATALOG_EPOCH),
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

    def _parts(self, names: list[str], findings: list[Finding], snapshot: bool = False
               ) -> tuple[list[pa.Table | ParquetSource], list[pa.Table]]:
        """Compacted parts: local files go to the index as Parquet (DuckDB reads them
        itself) once they pass validation; remote ones, and parts with invalid rows,
        are read here row by row. Events come from their metadata column."""
        batches: list[pa.Table | ParquetSource] = []
        events = []
        for name in sorted(names):
            relative = f"{nf.PARTS}/{name}"
            try:
                batch = self._part(relative, findings, snapshot)
            except FileNotFoundError:
                raise
            except Exception as exc:  # noqa: BLE001 - the refusals below; anything else is a bug
                if not _part_refused(exc):
                    raise
                findings.append(Finding(_refusal_check(exc), "error",
                                        f"{relative}: unreadable catalog part, skipped: {exc}"))
                continue
            batches.append(batch)
            if getattr(batch, "profile", None) is None or batch.profile.events:
                events.append(nf.entry_events(batch.paths[0] if isinstance(batch, ParquetSource) else batch))
        return batches, events

    def _part(self, relative: str, findings: list[Finding], snapshot: bool = False) -> pa.Table | ParquetSource:
        path = self._path(relative)
        if is_local(self.fs):
            size = local_file_size(path, str(self.root_real))
            if size > limits.MAX_CATALOG_FILE_BYTES:
                raise TooLarge(f"{size} bytes (limit {limits.MAX_CATALOG_FILE_BYTES})")
            if snapshot and self.snapshot_dir is not None and size >= self.snapshot_min_bytes:
                return self._private_part(path, relative, findings)
            rows = nf.part_rows(path)
            if validate.part_is_clean(path, rows):
                return ParquetSource((path,), rows)
            table = nf.read_part(path)
        else:
            import pyarrow as pa

            table = nf.read_part(pa.BufferReader(self._read(relative, limits.MAX_CATALOG_FILE_BYTES)))
            if validate.part_is_clean(table, table.num_rows):
                return _as_checkpoints(table)
        entries = validate.part_entries(table, relative, findings)
        return _as_checkpoints(nf.entries_table(entries))

    def _private_part(self, path: str, relative: str, findings: list[Finding]) -> pa.Table | ParquetSource:
        """The part read from a private copy, validated after it was taken (what was checked
        is what the index reads), in one pass that also counts what the index's checks start
        from; a part with invalid rows is read row by row, the copy dropped."""
        assert self.snapshot_dir is not None
        copy = private_copy(path, str(self.root_real), self.snapshot_dir, limits.MAX_CATALOG_FILE_BYTES)
        try:
            if (profile := part_profile(copy)) is not None:
                return ParquetSource((copy,), profile.rows, private=True, profile=profile)
            table = nf.read_part(copy)
        except BaseException:
            os.unlink(copy)
            raise
        os.unlink(copy)
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
            for entry in nf.parse_tail_file(relative, data, findings):
                entries[(entry["run_id"], entry["namespace"], entry["checkpoint_id"])] = entry
        return [nf.entries_table(list(entries.values()))] if entries else []

    def _pending_table(self, names: dict[str, str], tails: list[pa.Table],
                       parts: list[pa.Table | ParquetSource], findings: list[Finding]) -> pa.Table | None:
        if not names:
            return None
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
                records.append(nf.pending_record(marker))
        return checkpoints_table(records)

    def _heads(self, names: list[str], findings: list[Finding]) -> list[HeadRecord]:
        fetched = self._fetch_small(sorted(f"{nf.HEADS}/{name}" for name in names))
        heads = []
        for name in sorted(names):
            relative = f"{nf.HEADS}/{name}"
            try:
                data = fetched[relative] if relative in fetched else self._read(relative, limits.MAX_SMALL_FILE_BYTES)
                run_id, cid, namespace = validate.native_head(validate.json_object(data, relative))
            except FileNotFoundError:
                continue
            except (validate.Invalid, *REFUSED) as exc:
                findings.append(Finding(_refusal_check(exc), "error", f"{relative}: head ignored: {exc}"))
                continue
            heads.append(HeadRecord(run_id, cid, namespace))
        return heads

    def _fetch_small(self, relatives: list[str]) -> dict[str, bytes]:
        """Small store files of an object store fetched at once (one multi-path ``cat``: the requests
        go out together, not one after another); local files are read one by one by the caller,
        through the link-refusing open. A file not fetched here is read the usual way."""
        if is_local(self.fs) or len(relatives) < 2:
            return {}
        paths = {self._path(r): r for r in relatives}
        try:
            blobs = self.fs.cat(list(paths), on_error="omit")
        except Exception:  # noqa: BLE001 - a batch that fails is read one by one, with the usual errors
            return {}
        return {paths.get(p, p): data for p, data in blobs.items()
                if isinstance(data, bytes) and len(data) <= limits.MAX_SMALL_FILE_BYTES}

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
        state = self._state(ref, record.size_bytes)
        if record.codec == nf.LANGGRAPH_CODEC:
            return self._langgraph_state(record, state)
        return state

    # ---- LangGraph checkpoints (lastgood.langgraph.LastgoodSaver; format.py's last section) -----------

    def _langgraph_state(self, record: CheckpointRecord, checkpoint: Any) -> Any:
        """The channel values of a LangGraph checkpoint as the LangGraph readers show them: user
        channels first, messages normalized, DeltaChannels rebuilt from the writes of ancestors."""
        from lastgood.readers.langgraph.delta import rebuild_delta_values
        from lastgood.readers.langgraph.serde import normalize_state

        if not isinstance(checkpoint, dict) or "$encrypted" in checkpoint:
            return checkpoint
        entries = _LangGraphEntries(self, record.run_id, record.namespace)
        meta, parent = dict(record.metadata or {}), record.parent_id
        if not meta:  # a bare record (a head pointer's): the catalog entry has them
            entry = entries.get(record.checkpoint_id)
            if entry is not None:
                meta, parent = _json_object(entry.get("metadata")), entry.get("parent_id")
        return normalize_state(rebuild_delta_values(checkpoint, meta, parent, entries.ancestor))

    def _langgraph_write_rows(self, run_id: str, namespace: str, checkpoint_id: str,
                              resumed: _LangGraphEntries | None = None) -> list[nf.LangGraphWrite]:
        """The stored writes of one LangGraph checkpoint, merged as LangGraph's savers do (each file's
        sha256 checked: DecodeError). ``resumed`` (the thread's entries): without the writes a restore or
        rollback made void (recorded before it sent the thread back to this checkpoint:
        format.langgraph_resume_times), as the saver leaves them out."""
        folder = nf.langgraph_writes_folder(run_id, namespace, checkpoint_id)
        try:
            names = sorted(posixpath.basename(p.rstrip("/")) for p in self.fs.ls(self._path(folder), detail=False))
        except (FileNotFoundError, NotADirectoryError):
            return []
        if resumed is not None and names and (since := resumed.resume_times().get(checkpoint_id)):
            names = [n for n in names if (nf.writes_time(n) or since) >= since]
        files = []
        for name in names:
            if not name.endswith(nf.LG_WRITES_SUFFIX) or is_temp_name(name):
                continue
            try:
                data = self._read(f"{folder}/{name}", blob_limit(None))
            except FileNotFoundError:
                continue
            except REFUSED as exc:
                raise DecodeError(f"{folder}/{name} refused: {exc}", _refusal_check(exc)) from None
            files.append(nf.parse_langgraph_writes(data, f"{folder}/{name}"))
        return nf.merge_langgraph_writes(files)

    def pending_writes(self, record: CheckpointRecord) -> list[PendingWrite]:
        """Writes stored against a LangGraph checkpoint (``writes/``), values decoded safely; an
        undecodable value becomes ``{"$undecodable": cause}``. Other checkpoints have none."""
        if record.codec != nf.LANGGRAPH_CODEC:
            return []
        thread = _LangGraphEntries(self, record.run_id, record.namespace)
        return _decoded_writes(self._langgraph_write_rows(record.run_id, record.namespace, record.checkpoint_id,
                                                          resumed=thread))

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
                state, cost = value, validate.known_cost(value)  # None: measured if a patch needs it
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

    def _apply(self, base: Any, cost: int | None, envelope: dict[str, Any],
               link: dict[str, Any]) -> tuple[Any, int]:
        try:
            return apply_patch_sized(base, envelope["ops"], cost)
        except PatchError as exc:
            check = Check.TOO_LARGE if exc.too_large else Check.CHAIN_BROKEN
            raise DecodeError(f"incremental chain broken at {_cid(link)}: {exc}", check) from None

    def _remember(self, key: tuple[str, str], state: Any, cost: int | None) -> None:
        self._states[key] = (state, cost)
        if len(self._states) > STATE_CACHE_SIZE:
            self._states.popitem(last=False)

    # ---- integrity -------------------------------------------------------------

    def check_checkpoints(
        self, records: Iterable[CheckpointRecord], read_data: bool = False
    ) -> Iterator[Finding]:
        """Format checks: blob path, codec, blob present with the listed size, and
        with ``read_data`` the sha256, decoding and the incremental chain. Bare keys
        (records without a location, as a set-based structure check hands them over)
        are looked up in the catalog: :meth:`check_structure`."""
        records = list(records)
        if not read_data and records and not any(r.location for r in records):
            yield from self.check_structure([(r.run_id, r.namespace, r.checkpoint_id) for r in records])
            return
        sizes = self._blob_sizes(records)
        for record in records:
            problem = self._structural_problem(record, sizes)
            if problem:
                yield _finding(record, *problem)
            elif read_data:
                yield from self._data_findings(record)

    def check_structure(self, keys: Sequence[tuple[str, str, str]]) -> list[Finding]:
        """Structure depth for ``keys`` (run, namespace, id) as listed now (lastgood.readers.native.structure;
        the blob tree is walked once when the keys are a good share of the store)."""
        entries, _ = self._entries(None)
        try:
            walk = len(keys) * 4 >= entries.count
            return self._unclean_findings(entries.unclean(self._walk() if walk else None, keys))
        finally:
            entries.close()

    def listed_structure(self, token: str | None) -> tuple[int, list[Finding]] | None:
        """(checkpoints, findings) of a structure check of everything the catalog lists,
        when ``token`` (what the index holds) is still the catalog's listing."""
        return self._listed(token, lambda entries: self._unclean_findings(entries.unclean(self._walk(), None)))

    def listed_catalog_structure(self, token: str | None) -> tuple[int, list[Finding]] | None:
        """:meth:`listed_structure` without the blob files: what the catalog alone shows
        (saves never committed, unknown codecs, locations missing or leaving the store).
        Whether each blob exists with its listed size is left to ``lastgood verify`` or
        the data check (the index records these checkpoints as ``verified = 'catalog'``)."""
        memo = self._full_scan
        if token is not None and memo is not None and memo[0] == token and _profiled_clean(memo[1]):
            return memo[1][0].num_rows, []  # the part's one pass found nothing to look at
        return self._listed(token, lambda entries: [
            _finding(r, *p) for r in entries.catalog_unclean() if (p := self._catalog_problem(r))])

    def _listed(self, token: str | None, judge: Callable[[native_structure.CatalogEntries], list[Finding]]
                ) -> tuple[int, list[Finding]] | None:
        """(entries, ``judge``'s findings) when ``token`` is still the catalog's listing."""
        memo, listed = self._full_scan, None
        if token is None:
            return None
        if memo is None or memo[0] != token:
            listed = self._listing_token()
            if listed != token:
                return None  # the index holds another listing: not worth reading the catalog
        entries, read = self._entries(token, listed)
        try:
            return None if read != token else (entries.count, judge(entries))
        except Exception as exc:  # noqa: BLE001 - a part compacted away meanwhile: the caller asks by keys
            if native_structure.vanished(exc):
                return None
            raise
        finally:
            entries.close()

    def _listing_token(self) -> str:
        return json.dumps(self._listing(), sort_keys=True)

    def _entries(self, token: str | None, listed: str | None = None
                 ) -> tuple[native_structure.CatalogEntries, str]:
        """The catalog's entries and their listing token: the last full scan's batches when that
        is ``token`` (without one: the listing now), else read again (after a file vanished too).
        ``listed``: the listing token the caller has just taken (not listed again)."""
        memo, deadline, attempt, stalled, before = self._full_scan, time.monotonic() + limits.SNAPSHOT_SECONDS, 0, 0, ""
        while True:  # like scan: again while the catalog keeps changing, within the deadline
            remembered = memo is not None and token is not None and token == memo[0]
            now = "" if remembered else (listed or self._listing_token())  # the memo needs no listing
            listed = None
            try:
                if memo is not None and (token or now) == memo[0]:
                    return native_structure.CatalogEntries(memo[1]), memo[0]
                return native_structure.CatalogEntries(self._entry_batches(json.loads(now), {}, [])[0]), now
            except Exception as exc:  # noqa: BLE001 - FileNotFoundError, or DuckDB's "No files found"
                if not native_structure.vanished(exc):
                    raise
            memo, attempt = None, attempt + 1
            stalled, before = (stalled + 1 if now and now == before else 0), now
            if stalled >= limits.SNAPSHOT_STALLED or time.monotonic() >= deadline:
                raise ReaderError(f"{self.url}: the catalog kept changing while it was read; try again")
            time.sleep(min(0.02 * attempt, 0.25))

    def _walk(self) -> native_structure.Blobs:
        ahead, self._walk_ahead = self._walk_ahead, None
        if ahead is not None and (blobs := ahead.take()) is not None:
            return blobs
        if is_local(self.fs):
            return native_structure.walk_local(self.root)
        return native_structure.walk_remote(self.fs, self.root)

    def _unclean_findings(self, records: list[CheckpointRecord]) -> list[Finding]:
        sizes = self._blob_sizes(records)
        return [_finding(r, *problem) for r in records if (problem := self._structural_problem(r, sizes))]

    def _blob_sizes(self, records: list[CheckpointRecord]) -> dict[str, Size]:
        """Sizes of the blobs these records name (or why a blob is refused): one
        listing per folder they live in. Nothing is opened. Blobs a data check has
        already fetched whole (its view of ``fs`` has ``held_size``) need no listing."""
        held, records = self._held_sizes(records)
        if not records:
            return held
        return {**self._listed_sizes(records), **held}

    def _held_sizes(self, records: list[CheckpointRecord]) -> tuple[dict[str, Size], list[CheckpointRecord]]:
        """(sizes of the blobs in memory, the records whose blobs are not)."""
        held_size = getattr(self.fs, "held_size", None)
        if held_size is None:
            return {}, records
        sizes: dict[str, Size] = {}
        rest = []
        for record in records:
            try:
                size = held_size(self._path(record.location)) if record.location else None
            except UnsafePath:
                size = None
            if size is None:
                rest.append(record)
            else:
                sizes[posixpath.normpath(record.location)] = size
        return sizes, rest

    def _listed_sizes(self, records: list[CheckpointRecord]) -> dict[str, Size]:
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

    def _catalog_problem(self, record: CheckpointRecord) -> tuple[Check, str] | None:
        """What the catalog entry alone shows is wrong (no blob file looked at)."""
        if record.status == Status.INCOMPLETE:
            return (Check.INCOMPLETE, record.status_reason or "save never committed")
        if not record.location:
            return (Check.BLOB_MISSING, "catalog entry names no blob")
        try:
            self._path(record.location)
        except UnsafePath as exc:
            return (Check.UNSAFE_PATH, str(exc))
        if record.codec not in nf.CODECS:
            return (Check.UNKNOWN_CODEC, f"unknown codec {record.codec!r} (known: {', '.join(nf.CODECS)})")
        return None

    def _structural_problem(
        self, record: CheckpointRecord, sizes: dict[str, Size]
    ) -> tuple[Check, str] | None:
        if problem := self._catalog_problem(record):
            return problem
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
        its sha256 (a state in the cache was checked when it was read); a LangGraph checkpoint's
        writes files too."""
        try:
            self.load_state(record)
            if record.codec == nf.LANGGRAPH_CODEC:
                yield from self._langgraph_findings(record)
        except DecodeError as exc:
            yield _finding(record, exc.check, str(exc))

    def _langgraph_findings(self, record: CheckpointRecord) -> list[Finding]:
        """What the LangGraph readers report of a checkpoint's payload and its writes (pickles never
        loaded, types LangGraph would import named, encrypted payloads, failed tasks' errors)."""
        from lastgood.readers.langgraph.findings import payload_findings
        from lastgood.readers.langgraph.serde import aes_key_from_env

        where, key = (record.run_id, record.namespace, record.checkpoint_id), aes_key_from_env()
        type_, data = nf.langgraph_typed(self.read_blob(record))
        found = list(payload_findings("checkpoint", type_, data, where, key, expected_id=record.checkpoint_id))
        for write in self._langgraph_write_rows(record.run_id, record.namespace, record.checkpoint_id):
            found += payload_findings(f"write {write.channel!r} of task {write.task_id}", write.type, write.data,
                                      where, key, channel=write.channel)
        return found


# ---- helpers ------------------------------------------------------------------

class _LangGraphEntries:
    """Catalog entries of one LangGraph thread and namespace, looked up by checkpoint id: the
    checkpoint's own commit marker (a fixed name, no listing), else the compacted parts (read once)."""

    def __init__(self, reader: NativeReader, run_id: str, namespace: str) -> None:
        self.reader, self.run_id, self.namespace = reader, run_id, namespace
        self._parts: dict[str, dict[str, Any]] | None = None
        self._resumed: dict[str, int] | None = None

    def resume_times(self) -> dict[str, int]:
        """When a restore or rollback last made each checkpoint of the thread its head (nanoseconds): from
        the journal, and from the head itself (its journal entry is written just after it)."""
        if self._resumed is None:
            backend = self.reader.recovery()
            times = {key[2]: when for key, when in nf.langgraph_resume_times(backend.journal_entries()).items()
                     if key[:2] == (self.run_id, self.namespace)}
            head = backend.head_record(self.run_id, self.namespace) or {}  # type: ignore[attr-defined]
            moved = nf.time_ns(head.get("updated_at"))
            if isinstance(head.get("checkpoint_id"), str) and nf.head_note(head).get("action") in nf.RESUME_ACTIONS \
                    and moved:
                times[head["checkpoint_id"]] = max(times.get(head["checkpoint_id"], 0), moved)
            self._resumed = times
        return self._resumed

    def get(self, checkpoint_id: str) -> dict[str, Any] | None:
        name = nf.langgraph_tail_name(self.run_id, self.namespace, checkpoint_id)
        try:
            data = self.reader._read(f"{nf.TAIL}/{name}", limits.MAX_CATALOG_FILE_BYTES)
        except (FileNotFoundError, *REFUSED):
            return self._in_parts().get(checkpoint_id)
        for entry in nf.parse_tail_file(name, data, []):
            if (entry["run_id"], entry["namespace"], entry["checkpoint_id"]) == (
                    self.run_id, self.namespace, checkpoint_id):
                return entry
        return self._in_parts().get(checkpoint_id)

    def _in_parts(self) -> dict[str, dict[str, Any]]:
        if self._parts is None:
            self._parts = {}
            for name in sorted(self.reader._stamps(nf.PARTS, ".parquet")):
                try:
                    table = nf.read_part(_pa_reader(self.reader._read(f"{nf.PARTS}/{name}",
                                                                     limits.MAX_CATALOG_FILE_BYTES)))
                except (FileNotFoundError, *REFUSED):
                    continue
                for row in table.to_pylist():
                    if row["run_id"] == self.run_id and (row["namespace"] or "") == self.namespace:
                        self._parts[row["checkpoint_id"]] = row
        return self._parts

    def ancestor(self, checkpoint_id: str) -> Any:
        """``lastgood.readers.langgraph.delta.Ancestor`` of ``checkpoint_id``, or None when it is not listed."""
        from lastgood.readers.langgraph.delta import Ancestor

        entry = self.get(checkpoint_id)
        if entry is None or entry.get("codec") != nf.LANGGRAPH_CODEC:
            return None
        ref = _ref(checkpoint_id, entry.get("location"), entry.get("codec"), entry.get("checksum"), entry.get("kind"))
        checkpoint = self.reader._state(ref, entry.get("size_bytes"))
        if not isinstance(checkpoint, dict) or "$encrypted" in checkpoint:
            raise DecodeError(f"ancestor {checkpoint_id} cannot be decoded here (encrypted without the key)")
        writes = _decoded_writes(self.reader._langgraph_write_rows(self.run_id, self.namespace, checkpoint_id,
                                                                   resumed=self))
        return Ancestor(checkpoint, entry.get("parent_id"), writes)


def _pa_reader(data: bytes) -> Any:
    import pyarrow as pa

    return pa.BufferReader(data)


def _json_object(text: Any) -> dict[str, Any]:
    try:
        value = json.loads(text) if isinstance(text, str) else text
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def _decoded_writes(rows: list[nf.LangGraphWrite]) -> list[PendingWrite]:
    from lastgood.readers.langgraph.serde import aes_key_from_env, decode_typed

    key, writes = aes_key_from_env(), []
    for row in rows:
        try:
            value = decode_typed(row.type, row.data, aes_key=key)
        except DecodeError as exc:
            value = {"$undecodable": str(exc)}
        writes.append(PendingWrite(row.task_id, row.channel, value, row.idx, row.task_path))
    return writes


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


def _walk_ahead_worth(rows: int) -> bool:
    """A listing this big whose blob files the index walks (lastgood.limits.auto_walk_entries)."""
    return native_structure.WALK_AHEAD_ROWS <= rows <= limits.auto_walk_entries()


class _HeadsAhead:
    """The run heads a scan lists, read in a thread when there are many (``take`` waits and
    re-raises what the thread raised); few are read by ``take`` itself."""

    THREAD_FROM = 256  # head files

    def __init__(self, reader: NativeReader, names: list[str]) -> None:
        self.reader, self.names = reader, names
        self.findings: list[Finding] = []
        self.records: list[HeadRecord] = []
        self.error: BaseException | None = None
        self.thread: threading.Thread | None = None
        if len(names) >= self.THREAD_FROM:
            self.thread = threading.Thread(target=self._run, name="lastgood-heads", daemon=True)
            self.thread.start()

    def _run(self) -> None:
        try:
            self.records = self.reader._heads(self.names, self.findings)
        except BaseException as exc:  # noqa: BLE001 - handed to take()
            self.error = exc

    def wait(self) -> None:
        if self.thread is not None:
            self.thread.join()

    def take(self) -> tuple[list[HeadRecord], list[Finding]]:
        if self.thread is None:
            self._run()
        self.wait()
        if self.error is not None:
            raise self.error
        return self.records, self.findings


def _part_refused(exc: BaseException) -> bool:
    """A part that cannot be read as one (a finding, not a failure); pyarrow's errors count
    once it is loaded (it is not imported for a part DuckDB reads in one pass)."""
    if isinstance(exc, (*REFUSED, ValueError, KeyError, OSError)):
        return True
    pa = sys.modules.get("pyarrow")
    return pa is not None and isinstance(exc, pa.ArrowException)


def _profiled_clean(batches: list[Any]) -> bool:
    """One part whose profile found no entry for the catalog-level check to look at."""
    return (len(batches) == 1 and isinstance(batches[0], ParquetSource) and batches[0].profile is not None
            and batches[0].profile.unclean == 0)


def _ids(batch: pa.Table | ParquetSource) -> list[str]:
    if not isinstance(batch, ParquetSource):
        return batch.column("checkpoint_id").to_pylist()
    ids: list[str] = []
    for path in batch.paths:
        ids += nf.read_part(path, columns=("checkpoint_id",)).column(0).to_pylist()
    return ids


def _as_checkpoints(entries: pa.Table) -> pa.Table:
    import pyarrow as pa

    from lastgood.readers.base import lazy_schema

    schema = lazy_schema("CHECKPOINT_SCHEMA")
    n = entries.num_rows
    columns = {name: entries.column(name) for name in nf.ENTRY_NAMES}
    columns["status"] = pa.array([Status.OK.value] * n, pa.string())
    columns["status_reason"] = pa.nulls(n, pa.string())
    return pa.table([columns[name] for name in schema.names], schema=schema)
