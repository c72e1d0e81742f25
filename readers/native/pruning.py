"""The native store's prune and undo steps, and the completion of one a crash interrupted.

Used by :mod:`lastgood.readers.native.retention` (the flow) and by
``NativeRecovery._resolve_stale`` (the next action finds the intent of an interrupted one in
``journal/lock.json``); it imports neither, so the two stay free of an import cycle.

Prune, under the journal lock, after the archive is complete (docs/format.md "Prune"):

1. the intent: the sealed journal entry and ``prune: {part, remove, archive, manifest_sha256}``;
2. the catalog without the pruned entries is written as one new Parquet part (a kept entry whose
   parent went gets no parent);
3. the parts and clean tail files it replaces are removed — from here the pruned checkpoints are not
   listed (between 2 and 3 both are there: readers drop duplicates, nothing is missing);
4. the journal entry — the commit point;
5. the pruned checkpoints' blobs (LangGraph writes, and the head of a run deleted whole) are deleted.

A crash before 2 changed nothing (the intent is dropped); after 2 the next action completes 3–5.

Undo: blobs (and writes, heads) written back first, then one tail file listing the restored entries
(and the original entries of those reparented) — the commit point — then the journal entry. A crash
before that tail file leaves blobs nothing lists (removed by the completion); after it, the
completion writes the journal entry.
"""

from __future__ import annotations

import json
import posixpath
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from lastgood import limits
from lastgood.errors import ReaderError
from lastgood.readers.common.fsutil import atomic_write, full_fs, is_temp_name, safe_join
from lastgood.readers.native import format as nf

Key = tuple[str, str, str]
Thread = tuple[str, str]


@dataclass
class CatalogSnapshot:
    """Every catalog entry (one per key: the last read wins, as readers and compaction keep it)."""

    entries: dict[Key, dict[str, Any]] = field(default_factory=dict)
    parts: list[str] = field(default_factory=list)
    tails: list[str] = field(default_factory=list)  # clean tail files: folded into a new part
    untouchable: set[Key] = field(default_factory=set)  # listed in a tail with malformed lines

    def threads(self) -> dict[Thread, list[str]]:
        out: dict[Thread, list[str]] = {}
        for run, ns, cid in self.entries:
            out.setdefault((run, ns), []).append(cid)
        return out


def _names(fs: Any, root: str, folder: str, suffix: str) -> list[str]:
    try:
        paths = fs.ls(safe_join(root, folder), detail=False)
    except FileNotFoundError:
        return []
    names = [posixpath.basename(str(p).rstrip("/")) for p in paths]
    return sorted(n for n in names if n.endswith(suffix) and not is_temp_name(n))


def read_catalog(fs: Any, root: str) -> CatalogSnapshot:
    snap = CatalogSnapshot()
    snap.parts = _names(fs, root, nf.PARTS, ".parquet")
    for name in snap.parts:
        with fs.open(safe_join(root, f"{nf.PARTS}/{name}"), "rb") as handle:
            for row in nf.read_part(handle).to_pylist():
                snap.entries[_key(row)] = row
    for name in _names(fs, root, nf.TAIL, ".jsonl"):
        data = fs.cat_file(safe_join(root, f"{nf.TAIL}/{name}"))
        findings: list[Any] = []
        entries = nf.parse_tail_file(name, data, findings)
        for entry in entries:
            snap.entries[_key(entry)] = entry
        if findings:
            snap.untouchable.update(_key(e) for e in entries)
        else:
            snap.tails.append(name)
    return snap


def _key(entry: Mapping[str, Any]) -> Key:
    return str(entry["run_id"]), str(entry.get("namespace") or ""), str(entry["checkpoint_id"])


def new_part_name() -> str:
    return f"part-{nf.new_checkpoint_id()}.parquet"


def write_part(fs: Any, root: str, entries: Iterable[Mapping[str, Any]], name: str) -> None:
    """A new compacted part ``name`` holding ``entries`` (sorted like compaction's)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = sorted(entries, key=lambda e: (e["run_id"], e.get("namespace") or "", e.get("step") is None,
                                          e.get("step") or 0, e["checkpoint_id"]))
    table = nf.entries_table([dict(r) for r in rows])
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink, compression="zstd", row_group_size=256_000)
    atomic_write(fs, safe_join(root, f"{nf.PARTS}/{name}"), sink.getvalue().to_pybytes())


def remove_catalog_files(fs: Any, root: str, parts: Iterable[str], tails: Iterable[str]) -> None:
    for folder, names in ((nf.PARTS, parts), (nf.TAIL, tails)):
        for name in names:
            try:
                fs.rm_file(safe_join(root, f"{folder}/{name}"))
            except FileNotFoundError:
                pass


def head_path(run_id: str, namespace: str) -> str:
    suffix = f"@{nf.quote_name(namespace)}" if namespace else ""
    return f"{nf.HEADS}/{nf.quote_name(run_id)}{suffix}.json"


def writes_folder(key: Key) -> str:
    return nf.langgraph_writes_folder(*key)


def read_writes(fs: Any, root: str, key: Key) -> dict[str, bytes]:
    folder = writes_folder(key)
    out = {}
    for name in _names(fs, root, folder, nf.LG_WRITES_SUFFIX):
        out[name] = fs.cat_file(safe_join(root, f"{folder}/{name}"))
    return out


def delete_files(fs: Any, root: str, entry: Mapping[str, Any], head: bool) -> None:
    """A pruned checkpoint's blob, LangGraph writes and (a run deleted whole) head pointer."""
    key = _key(entry)
    paths = [str(entry["location"])] if entry.get("location") else []
    if head:
        paths.append(head_path(key[0], key[1]))
    for relative in paths:
        try:
            fs.rm_file(safe_join(root, relative))
        except FileNotFoundError:
            pass
    if entry.get("codec") == nf.LANGGRAPH_CODEC:
        try:
            fs.rm(safe_join(root, writes_folder(key)), recursive=True)
        except FileNotFoundError:
            pass


def bump_epoch(fs: Any, root: str, action_id: str) -> None:
    """Tell every index that entries were removed or replaced: its next refresh rescans everything."""
    body = json.dumps({"action_id": action_id, "at": nf.new_checkpoint_id()}).encode()
    atomic_write(fs, safe_join(root, f"{nf.CATALOG}/{nf.CATALOG_EPOCH}"), body)


def unprune_tail(undo_id: str) -> str:
    return f"{nf.TAIL}/unprune-{nf.quote_name(undo_id)}.jsonl"


# ---- completing an interrupted prune or undo (the intent in journal/lock.json) -------------------


def resolve_intent(recovery: Any, lock: Mapping[str, Any]) -> None:
    """Complete (or drop) the prune or undo whose intent ``lock`` is; the caller releases the lock."""
    entry = lock.get("entry")
    if not isinstance(entry, Mapping):
        return
    if isinstance(lock.get("prune"), Mapping):
        _finish_prune(recovery, entry, lock["prune"])
    elif isinstance(lock.get("unprune"), Mapping):
        _finish_unprune(recovery, entry, lock["unprune"])


def _entry_written(recovery: Any, entry: Mapping[str, Any]) -> bool:
    return any(e.get("id") == entry.get("id") for e in recovery.journal_entries())


def _write_entry(recovery: Any, entry: Mapping[str, Any]) -> None:
    if not _entry_written(recovery, entry):
        recovery._write_entry(entry)


def _finish_prune(recovery: Any, entry: Mapping[str, Any], info: Mapping[str, Any]) -> None:
    fs, root = full_fs(recovery.fs), recovery.root
    part = str(info.get("part") or "")
    if not _entry_written(recovery, entry) and not fs.exists(safe_join(root, f"{nf.PARTS}/{part}")):
        return  # nothing took effect: the intent is dropped
    manifest = _manifest(info)
    going = {(str(e[0]), str(e[1]), str(e[2])) for e in _entries(manifest)}
    snap = read_catalog(fs, root)
    with fs.open(safe_join(root, f"{nf.PARTS}/{part}"), "rb") as handle:
        in_part = {_key(row) for row in nf.read_part(handle, ("run_id", "namespace", "checkpoint_id")).to_pylist()}
    folded = [name for name in snap.tails if _tail_keys(fs, root, name) <= in_part | going]
    remove_catalog_files(fs, root, [p for p in info.get("remove_parts") or [] if p != part], folded)
    bump_epoch(fs, root, str(entry.get("id")))
    _write_entry(recovery, entry)
    delete_unlisted(recovery, fs, root, info, manifest)


def _manifest(info: Mapping[str, Any]) -> dict[str, Any]:
    from lastgood.readers.native.archive import Archive

    return Archive(str(info["archive"])).manifest(str(info["action_id"]), info.get("manifest_sha256"))


def _entries(manifest: Mapping[str, Any]) -> list[list[Any]]:
    from lastgood.readers.native.archive import manifest_entries

    return manifest_entries(manifest)


def _tail_keys(fs: Any, root: str, name: str) -> set[Key]:
    data = fs.cat_file(safe_join(root, f"{nf.TAIL}/{name}"))
    return {_key(e) for e in nf.parse_tail_file(name, data, [])}


def delete_unlisted(recovery: Any, fs: Any, root: str, info: Mapping[str, Any], manifest: Mapping[str, Any]
                    ) -> int:
    """Delete the files of the manifest's checkpoints that the catalog no longer lists."""
    listed = set(read_catalog(fs, root).entries)
    whole = {tuple(t) for t in info.get("whole_runs") or []}
    gone = 0
    for run, ns, cid, *rest in _entries(manifest):
        key = (str(run), str(ns), str(cid))
        if key in listed:
            continue
        location, codec = fingerprint_parts(str(rest[3] if len(rest) > 3 else ""))
        stub = {"run_id": run, "namespace": ns, "checkpoint_id": cid, "location": location, "codec": codec}
        delete_files(fs, root, stub, head=(run, ns) in whole and not any(k[:2] == (run, ns) for k in listed))
        gone += 1
    return gone


def fingerprint(entry: Mapping[str, Any]) -> str:
    """What a native checkpoint is stored as: checksum, size, codec and blob location (blobs are
    immutable: an entry with another checksum is another checkpoint's bytes)."""
    return json.dumps([entry.get("checksum"), entry.get("size_bytes"), entry.get("codec"), entry.get("location")])


def fingerprint_parts(text: str) -> tuple[str | None, str | None]:
    """(location, codec) from :func:`fingerprint`."""
    try:
        checksum, size, codec, location = json.loads(text)
    except (TypeError, ValueError):
        return None, None
    return location, codec


def _finish_unprune(recovery: Any, entry: Mapping[str, Any], info: Mapping[str, Any]) -> None:
    fs, root = full_fs(recovery.fs), recovery.root
    tail = str(info.get("tail") or "")
    if fs.exists(safe_join(root, tail)):
        bump_epoch(fs, root, str(entry.get("id")))
        _write_entry(recovery, entry)
        return
    for relative in info.get("written") or []:  # blobs nothing lists: the undo did not take effect
        try:
            fs.rm_file(safe_join(root, str(relative)))
        except FileNotFoundError:
            pass


def read_small(fs: Any, root: str, relative: str) -> bytes | None:
    try:
        data = fs.cat_file(safe_join(root, relative))
    except FileNotFoundError:
        return None
    if len(data) > limits.MAX_SMALL_FILE_BYTES:
        raise ReaderError(f"{relative} is larger than {limits.MAX_SMALL_FILE_BYTES} bytes")
    return bytes(data)


def json_entry(entry: Mapping[str, Any]) -> dict[str, Any]:
    """A catalog entry as plain JSON data (times as ISO text), for a bundle."""
    return json.loads(nf.entry_line(dict(entry)))
