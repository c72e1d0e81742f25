"""Prune archives: a native Lastgood store that holds what a prune deleted, byte for byte.

An archive is an ordinary native store (``lastgood ls/show/verify ARCHIVE`` work on it), on any
fsspec URL. What one prune archived of one run is a *pack*: one catalog entry (run = the run,
checkpoint id = ``<action>.<n>``, n counting the prune's packs, metadata ``lastgood_archive: {action_id, source, checkpoints}``)
and one blob, codec ``msgpack``, holding each archived checkpoint's rows or files exactly as the store
kept them (bytes stay bytes), with the index's fields of the checkpoint::

    {"lastgood_archive": 1, "source": "langgraph-sqlite", "action_id": "act-…", "run": [run, namespace],
     "checkpoints": {checkpoint_id: {"fields": {…index fields…}, "rows": {…format's own rows…}}}}

A run's pack is split past PACK_CHECKPOINTS checkpoints or PACK_BYTES bytes. One file per run (not
per checkpoint) keeps archiving a hundred thousand checkpoints to a few thousand file writes.

Layout (besides the native store's own files, docs/format.md "Prune archives")::

    <archive>/blobs/<run>[@<ns>]/<action>.<n>.msgpack   the packs
    <archive>/catalog/tail/prune-<action>-<n>.jsonl      their catalog entries (the commit marker)
    <archive>/prunes/<action>/manifest.json              written last, synced: the archive step's
                                                         commit — each checkpoint, its pack, the
                                                         pack's sha256 and size, a fingerprint
    <archive>/prunes/<action>/restored-<undo>.json       the undo that brought them back

Packs are written without a sync each, then synced at once before the catalog and the manifest
(local disks); a crash before the manifest leaves packs nothing lists. An archive is never deleted
or rewritten by Lastgood: remove an old prune's files by hand once it will not be undone.
"""

from __future__ import annotations

import hashlib
import json
import os
import posixpath
from collections.abc import Iterable, Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import msgpack

from lastgood import limits
from lastgood.errors import ReaderError
from lastgood.readers.common.fsutil import atomic_write, full_fs, is_local, open_fs, safe_join
from lastgood.readers.native import format as nf

MANIFEST_FORMAT = "lastgood-prune-archive"
MANIFEST_VERSION = 1
PRUNES = "prunes"
BUNDLE_TAG = "lastgood_archive"
TAIL_ENTRIES = 50_000  # catalog entries per tail file (well under limits.MAX_CATALOG_FILE_BYTES)
WRITERS = 4
PACK_CHECKPOINTS = 2000
PACK_BYTES = 64 * 2**20
ENTRY_FIELDS = ("run_id", "namespace", "checkpoint_id", "location", "sha256", "size", "fingerprint")

Key = tuple[str, str, str]
# one checkpoint to archive: its key, the index's fields (journal.FORGET_COLUMNS), its rows, and a
# fingerprint of the stored rows (what the deletion compares, so nothing changed since is deleted)
Item = tuple[Key, Mapping[str, Any], Mapping[str, Any], str]


def manifest_path(action_id: str) -> str:
    return f"{PRUNES}/{nf.quote_name(action_id)}/manifest.json"


def pack_location(thread: tuple[str, str], action_id: str, n: int) -> str:
    return f"{nf.BLOBS}/{nf.thread_folder(*thread)}/{nf.quote_name(action_id)}.{n}.msgpack"


def decode_pack(data: bytes) -> dict[str, Any]:
    value = msgpack.unpackb(data, raw=False, strict_map_key=False)
    if not isinstance(value, dict) or value.get(BUNDLE_TAG) != 1 or not isinstance(value.get("checkpoints"), dict):
        raise ReaderError("not a Lastgood archive pack")
    return value


class Archive:
    """One archive store (created on first use)."""

    def __init__(self, url: str, storage_options: Mapping[str, Any] | None = None) -> None:
        self.url = url
        fs, self.root = open_fs(url, storage_options)
        self.fs = full_fs(fs)

    def _path(self, relative: str) -> str:
        return safe_join(self.root, relative)

    def create(self) -> None:
        """The archive's store marker, unless it is there (the folder is made as needed)."""
        marker = self._path(nf.MARKER)
        if self.fs.exists(marker):
            return
        self.fs.makedirs(self.root, exist_ok=True)
        body = {"format": nf.FORMAT_NAME, "version": nf.FORMAT_VERSION, "created_at": nf.iso(datetime.now(UTC)),
                "purpose": "lastgood prune archive"}
        atomic_write(self.fs, marker, json.dumps(body, indent=2).encode())

    # ---- writing ---------------------------------------------------------------------

    def stage(self, action_id: str, source: Mapping[str, Any], items: Iterable[Item],
              extra: Mapping[str, Any] | None = None, progress: Any = None, total: int = 0
              ) -> tuple[dict[str, Any], str]:
        """Write every item into its run's pack, the packs' catalog entries, then the manifest;
        (manifest, its sha256). ``items`` come grouped by run and namespace."""
        self.create()
        packer = _Packer(self, action_id, str(source.get("reader") or ""), progress, total)
        with ThreadPoolExecutor(WRITERS) as pool:
            packer.pool = pool
            for item in items:
                packer.add(item)
            packer.flush()
            packer.wait(0)
        if progress:
            progress("archive", len(packer.entries), total)
        self._sync()
        for n in range(0, len(packer.lines), TAIL_ENTRIES):
            name = f"{nf.TAIL}/prune-{nf.quote_name(action_id)}-{n // TAIL_ENTRIES}.jsonl"
            atomic_write(self.fs, self._path(name), b"".join(packer.lines[n:n + TAIL_ENTRIES]))
        manifest = {"format": MANIFEST_FORMAT, "version": MANIFEST_VERSION, "action_id": action_id,
                    "source": dict(source), "created_at": nf.iso(datetime.now(UTC)), "count": len(packer.entries),
                    "bytes": packer.bytes, "packs": packer.packs, "entry_fields": list(ENTRY_FIELDS),
                    "entries": packer.entries, **dict(extra or {})}
        body = json.dumps(manifest, separators=(",", ":"), ensure_ascii=False, default=str).encode()
        atomic_write(self.fs, self._path(manifest_path(action_id)), body)
        return manifest, "sha256:" + hashlib.sha256(body).hexdigest()

    def _put(self, pool: ThreadPoolExecutor, location: str, data: bytes) -> Future[str]:
        """Write one pack; its sha256. Local: in the pool, hashed there too (hashing a big buffer
        lets go of the GIL, so it overlaps the reading of the next rows); object stores: a PUT."""
        if not is_local(self.fs):
            done: Future[str] = Future()
            self.fs.pipe({self._path(location): data})
            done.set_result(nf.sha256_text(data))
            return done
        return pool.submit(_hash_and_write, self._path(location), data)

    def _sync(self) -> None:
        if is_local(self.fs):
            os.sync()  # every bundle on disk before the catalog lists it

    def mark_restored(self, action_id: str, undo_id: str, count: int) -> None:
        body = {"undo": undo_id, "restored": count, "at": nf.iso(datetime.now(UTC))}
        name = f"{PRUNES}/{nf.quote_name(action_id)}/restored-{nf.quote_name(undo_id)}.json"
        atomic_write(self.fs, self._path(name), json.dumps(body).encode())

    # ---- reading ---------------------------------------------------------------------

    def manifest(self, action_id: str, digest: str | None = None) -> dict[str, Any]:
        """The manifest of a prune (its sha256 checked against the journal's ``digest``)."""
        path = self._path(manifest_path(action_id))
        try:
            body = self.fs.cat_file(path)
        except FileNotFoundError:
            raise ReaderError(f"the archive {self.url} has no manifest for {action_id} ({manifest_path(action_id)}): "
                              "it was moved or deleted") from None
        if digest and "sha256:" + hashlib.sha256(body).hexdigest() != digest:
            raise ReaderError(f"the archive's manifest of {action_id} does not match the journal's sha256: "
                              "it was changed")
        value = json.loads(body)
        if not isinstance(value, dict) or value.get("format") != MANIFEST_FORMAT:
            raise ReaderError(f"{manifest_path(action_id)} is not a Lastgood prune manifest")
        return value

    def has_manifest(self, action_id: str) -> bool:
        return bool(self.fs.exists(self._path(manifest_path(action_id))))

    def bundles(self, manifest: Mapping[str, Any], keys: set[Key] | None = None
                ) -> Iterator[tuple[Key, dict[str, Any], list[Any]]]:
        """(key, rows, manifest entry) of each archived checkpoint (of ``keys`` when given), each
        pack's sha256 checked: a changed or missing pack is a ReaderError naming it."""
        chosen = [e for e in manifest_entries(manifest) if keys is None or tuple(e[:3]) in keys]
        by_pack: dict[str, list[list[Any]]] = {}
        for entry in chosen:
            by_pack.setdefault(str(entry[3]), []).append(entry)
        for location, entries in by_pack.items():
            data = self._get_many([location])[0]
            if data is None:
                raise ReaderError(f"the archive lost {location} ({len(entries)} checkpoint(s))")
            if nf.sha256_text(data) != entries[0][4]:
                raise ReaderError(f"the archive's pack {location} does not match its sha256: it was changed")
            checkpoints = decode_pack(data)["checkpoints"]
            for entry in entries:
                stored = checkpoints.get(str(entry[2]))
                if not isinstance(stored, dict):
                    raise ReaderError(f"the archive's pack {location} lacks checkpoint {entry[2]}")
                yield (str(entry[0]), str(entry[1]), str(entry[2])), stored["rows"], entry

    def _get_many(self, locations: Sequence[str]) -> list[bytes | None]:
        paths = [self._path(loc) for loc in locations]
        if is_local(self.fs):
            return [_read_file(p) for p in paths]
        found = self.fs.cat(paths, on_error="omit")
        return [found.get(p) for p in paths]


def manifest_entries(manifest: Mapping[str, Any]) -> list[list[Any]]:
    entries = manifest.get("entries")
    if not isinstance(entries, list):
        raise ReaderError("the prune manifest lists no entries")
    return entries


def manifest_keys(manifest: Mapping[str, Any]) -> list[Key]:
    return [(str(e[0]), str(e[1]), str(e[2])) for e in manifest_entries(manifest)]


class _Packer:
    """Items into packs (one per run, split when big), written by a pool, with their catalog lines
    and manifest entries."""

    def __init__(self, archive: Archive, action_id: str, kind: str, progress: Any, total: int) -> None:
        self.archive, self.action_id, self.kind, self.progress, self.total = archive, action_id, kind, progress, total
        self.pool: Any = None
        self.jobs: list[Any] = []
        self.entries: list[list[Any]] = []
        self.lines: list[bytes] = []
        self.bytes = self.packs = 0
        self.thread: tuple[str, str] | None = None
        self.current: dict[str, Any] = {}
        self.fingerprints: dict[str, str] = {}
        self.newest: Any = None
        self.size = 0
        self.number: dict[tuple[str, str], int] = {}

    def add(self, item: Item) -> None:
        key, fields, rows, fingerprint = item
        thread = (key[0], key[1])
        if thread != self.thread or len(self.current) >= PACK_CHECKPOINTS or self.size >= PACK_BYTES:
            self.flush()
            self.thread = thread
        self.current[key[2]] = {"fields": _plain_fields(fields), "rows": dict(rows)}
        self.fingerprints[key[2]] = fingerprint
        self.size += int(fields.get("size_bytes") or 0) + 256  # the index's size of it: enough to split packs
        created = fields.get("created_at")
        if created is not None and (self.newest is None or str(created) > str(self.newest)):
            self.newest = created

    def flush(self) -> None:
        if not self.current or self.thread is None:
            return
        n = self.number[self.thread] = self.number.get(self.thread, -1) + 1
        location = pack_location(self.thread, self.action_id, n)
        data = msgpack.packb({BUNDLE_TAG: 1, "source": self.kind, "action_id": self.action_id,
                              "run": list(self.thread), "checkpoints": self.current}, use_bin_type=True)
        checkpoints = [(cid, self.fingerprints[cid]) for cid in self.current]
        pack = _Pack(self.thread, location, len(data), self.packs, checkpoints, self.newest)
        self.bytes += len(data)
        self.packs += 1
        self.jobs.append((self.archive._put(self.pool, location, data), pack))
        self.current, self.fingerprints, self.newest, self.size = {}, {}, None, 0
        self.wait(2 * WRITERS)
        if self.progress:
            self.progress("archive", len(self.entries), self.total)

    def wait(self, keep: int) -> None:
        """Bounded memory: wait for the oldest writes until at most ``keep`` are in flight; each
        written pack's manifest entries and catalog line, in the order the packs were made."""
        while len(self.jobs) > keep:
            job, pack = self.jobs.pop(0)
            digest = job.result()
            for cid, fingerprint in pack.checkpoints:
                self.entries.append([*pack.thread, cid, pack.location, digest, pack.size, fingerprint])
            self.lines.append(_pack_line(pack.thread, self.action_id, pack.number, self.kind, pack.location,
                                         pack.size, digest, len(pack.checkpoints), pack.newest))


@dataclass(frozen=True, slots=True)
class _Pack:
    """A pack being written: what its manifest entries and catalog line need once its sha256 is known."""

    thread: tuple[str, str]
    location: str
    size: int
    number: int
    checkpoints: list[tuple[str, str]]  # (checkpoint id, fingerprint)
    newest: Any


def _plain_fields(fields: Mapping[str, Any]) -> dict[str, Any]:
    return {k: (nf.iso(v) if isinstance(v, datetime) else v) for k, v in fields.items()}


def _pack_line(thread: tuple[str, str], action_id: str, n: int, kind: str, location: str, size: int,
               digest: str, count: int, newest: Any) -> bytes:
    """The catalog entry of one pack (a checkpoint of the archive store)."""
    meta = {"lastgood_archive": {"action_id": action_id, "source": kind, "checkpoints": count}}
    row = {"run_id": thread[0], "namespace": thread[1], "checkpoint_id": f"{action_id}.{n}", "parent_id": None,
           "step": None, "created_at": nf.iso(newest) if isinstance(newest, datetime) else newest,
           "trigger": "manual", "kind": "full", "size_bytes": size, "checksum": digest, "agent": None,
           "codec": "msgpack", "location": location, "metadata": json.dumps(meta, sort_keys=True)}
    return json.dumps(row, separators=(",", ":"), ensure_ascii=False).encode() + b"\n"


def _hash_and_write(path: str, data: bytes) -> str:
    """Write a pack (its run's folder made when missing: in the writer, where a slow filesystem's
    metadata calls overlap the reading) and return its sha256."""
    try:
        handle = open(path, "wb")
    except FileNotFoundError:
        os.makedirs(posixpath.dirname(path), exist_ok=True)
        handle = open(path, "wb")
    with handle:
        handle.write(data)
    return nf.sha256_text(data)


def _read_file(path: str) -> bytes | None:
    try:
        with open(path, "rb") as handle:
            return handle.read(limits.MAX_BLOB_BYTES + 1)
    except FileNotFoundError:
        return None


def default_archive_beside(path: str) -> str:
    """``<store>.lastgood-archive`` beside a store's folder or file."""
    return path.rstrip("/") + ".lastgood-archive"
