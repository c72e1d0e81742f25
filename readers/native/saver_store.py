"""The files behind ``LastgoodSaver`` (lastgood.readers.native.langgraph_saver): checkpoints and pending writes
of LangGraph threads written in the native store's format — catalog entries, blobs, heads, ``writes/`` — and
read back through the head pointer and the catalog (layout: docs/format.md, "LangGraph checkpointer")."""



from __future__ import annotations

import contextlib
import json
import os
import posixpath
import threading
import uuid
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import orjson

from lastgood import limits
from lastgood.readers.native import format as nf
from lastgood.checks import Check
from lastgood.errors import DecodeError
from lastgood.readers.common.fsutil import (atomic_write, blob_limit, is_local, is_temp_name, read_bounded,
                                            real_root, safe_join)

from lastgood.readers.native.writer import NativeWriter

if TYPE_CHECKING:
    from langchain_core.runnables import RunnableConfig

Entry = dict[str, Any]  # a catalog entry: the columns of docs/format.md ("metadata" as JSON text)
PART_CACHE_ENTRIES = 200_000  # parsed tail entries kept for listings (per saver)
FSYNC_MODES = ("data", "full", "none")


class _Store:
    """The native store's files as the saver uses them (docs/format.md; names in format.py's LangGraph
    section). Thread-safe: LangGraph saves from a background thread while tasks write."""

    def __init__(self, url: str, storage_options: Mapping[str, Any] | None, fsync: str) -> None:
        self.writer = NativeWriter(url, storage_options, create=True)
        self.fs, self.root = self.writer.fs, self.writer.root
        self.local = is_local(self.fs)
        self.root_real = real_root(self.fs, self.root)
        self.sync_data, self.sync_folders = fsync in ("data", "full"), fsync == "full"
        self._lock = threading.Lock()
        self._tails: dict[str, tuple[Any, Entry | None]] = {}  # tail name -> (stamp, entry)
        self._parts: dict[str, list[Entry]] = {}  # part name -> its LangGraph entries (parts never change)
        self._journal: dict[str, dict[str, Any]] = {}  # journal entry name -> entry (never rewritten)

    # -- files --

    def path(self, relative: str) -> str:
        return safe_join(self.root, relative)

    def read(self, relative: str, limit: int) -> bytes:
        if self.local:
            return read_bounded(self.fs, self.path(relative), limit, self.root_real)
        data = self.fs.cat_file(self.path(relative), start=0, end=limit + 1)  # one request, bounded
        if len(data) > limit:
            raise DecodeError(f"{relative} is larger than {limit} bytes", Check.TOO_LARGE)
        return data

    def write(self, relative: str, data: bytes, durable: bool = True) -> None:
        """One file, whole (see :meth:`commit`)."""
        self.commit([(relative, data)], durable)

    def commit(self, files: list[tuple[str, bytes]], durable: bool = True) -> None:
        """Write ``files`` so each appears whole, in the given order. Object stores: one PUT each.
        Local disks: every file is written to a hidden temp file beside its target; with ``durable``
        and fsync "data" or "full", their data is synced (all at once: the syncs run together and the
        filesystem's journal commits them as one), then each is renamed into place in order; with
        "full" their folders are synced after (together again) so the renames survive a power loss.
        Whatever is synced, a killed process leaves every file old or new, whole."""
        if not self.local:
            for relative, data in files:
                atomic_write(self.fs, self.path(relative), data)
            return
        temps: list[tuple[str, str]] = []
        try:
            fds = []
            try:
                for relative, data in files:
                    path = self.path(relative)
                    folder = posixpath.dirname(path)
                    os.makedirs(folder, exist_ok=True)
                    tmp = posixpath.join(folder, f".tmp-{uuid.uuid4().hex}")  # hidden, short: names near 255 fit
                    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0), 0o644)
                    fds.append(fd)
                    temps.append((tmp, path))
                    view = memoryview(data)
                    while view:
                        view = view[os.write(fd, view):]
                if durable and self.sync_data:
                    _sync_together(fds)
            finally:
                for fd in fds:
                    os.close(fd)
            for tmp, path in temps:
                os.replace(tmp, path)
        except BaseException:
            for tmp, _path in temps:
                with contextlib.suppress(OSError):
                    os.unlink(tmp)
            raise
        if durable and self.sync_folders:
            folders = []
            try:
                for folder in dict.fromkeys(posixpath.dirname(path) for _tmp, path in temps):
                    folders.append(os.open(folder, os.O_RDONLY))
                _sync_together(folders)
            finally:
                for fd in folders:
                    os.close(fd)

    def remove(self, relative: str) -> None:
        try:
            self.fs.rm_file(self.path(relative))
        except FileNotFoundError:
            pass

    def remove_tree(self, relative: str) -> None:
        try:
            self.fs.rm(self.path(relative), recursive=True)
        except FileNotFoundError:
            pass

    def names(self, folder: str, prefix: str = "", suffix: str = "") -> dict[str, Any]:
        """Names (and change stamps) of the files in ``folder`` starting with ``prefix``: one directory
        read locally, a prefix listing on object stores that have one."""
        path = self.path(folder)
        found: dict[str, Any] = {}
        if self.local:
            try:
                with os.scandir(path) as entries:
                    for item in entries:
                        name = item.name
                        if name.startswith(prefix) and name.endswith(suffix) and not is_temp_name(name):
                            info = item.stat(follow_symlinks=False)
                            found[name] = (info.st_mtime_ns, info.st_size)
            except (FileNotFoundError, NotADirectoryError):
                pass
            return found
        try:
            try:
                if not prefix:
                    raise TypeError
                listing = self.fs.find(path, maxdepth=1, prefix=prefix, detail=True).values()  # s3fs, gcsfs
            except TypeError:  # no prefix listing here: the whole folder, not from fsspec's cache
                self.fs.invalidate_cache(path)
                listing = self.fs.ls(path, detail=True)
        except (FileNotFoundError, NotADirectoryError):
            return found
        for info in listing:
            name = posixpath.basename(info["name"].rstrip("/"))
            if (info.get("type", "file") == "file" and name.startswith(prefix) and name.endswith(suffix)
                    and not is_temp_name(name)):
                found[name] = (info.get("size"), info.get("ETag") or info.get("etag") or info.get("mtime")
                               or info.get("LastModified") or info.get("created"))
        return found

    # -- saving --

    def save(self, entry: Entry, blob: bytes) -> None:
        """The native save protocol: pending marker, blob, commit marker, head, pending marker removed."""
        run, ns, checkpoint_id = entry["run_id"], entry["namespace"], entry["checkpoint_id"]
        entry["checksum"] = nf.sha256_text(blob)
        entry["size_bytes"] = len(blob)
        entry["location"] = nf.langgraph_blob_location(run, ns, checkpoint_id, entry["checksum"])
        tail = nf.langgraph_tail_name(run, ns, checkpoint_id)
        pending = f"{nf.PENDING}/{tail[:-len('.jsonl')]}.json"
        marker = {k: entry[k] for k in ("run_id", "namespace", "checkpoint_id", "parent_id", "step", "trigger",
                                        "kind", "agent", "codec", "location")}
        marker["started_at"] = entry["created_at"]
        self.write(pending, json.dumps(marker).encode(), durable=False)  # shows a crashed save as incomplete
        # blob, then the commit marker (from here on the checkpoint exists), then the head: each whole,
        # renamed in this order, their data synced (fsync "data"/"full") before the first rename
        self.commit([(entry["location"], blob), (f"{nf.TAIL}/{tail}", nf.entry_line(entry)), _head_file(entry)])
        self.remove(pending)

    def write_head(self, entry: Entry) -> None:
        self.write(*_head_file(entry))

    def save_writes(self, run: str, ns: str, checkpoint_id: str, data: bytes) -> None:
        folder = nf.langgraph_writes_folder(run, ns, checkpoint_id)
        self.write(f"{folder}/{nf.langgraph_writes_name()}", data)

    # -- reading --

    def read_head(self, run: str, ns: str) -> dict[str, Any] | None:
        try:
            value = json.loads(self.read(_head_name(run, ns), limits.MAX_SMALL_FILE_BYTES))
        except (FileNotFoundError, ValueError):
            return None
        return value if isinstance(value, dict) else None

    def lookup(self, run: str, ns: str, checkpoint_id: str) -> Entry | None:
        """One checkpoint's entry: its commit marker (a fixed name), else the compacted parts."""
        name = nf.langgraph_tail_name(run, ns, checkpoint_id)
        try:
            data = self.read(f"{nf.TAIL}/{name}", limits.MAX_CATALOG_FILE_BYTES)
        except FileNotFoundError:
            data = b""
        for entry in _parse_lines(data):
            if _key(entry) == (run, ns, checkpoint_id):
                return entry
        return self._part_index().get((run, ns, checkpoint_id))

    def latest(self, run: str, ns: str) -> tuple[Entry | None, dict[str, Any] | None]:
        """(the entry the thread's head names, the head); the newest id when there is no head or it
        names nothing listed (a save killed between its commit marker and its head)."""
        head = self.read_head(run, ns)
        if head and isinstance(head.get("checkpoint_id"), str):
            entry = self.lookup(run, ns, head["checkpoint_id"])
            if entry is not None:
                return entry, head
        entries = self.thread_entries(run, ns)
        return (max(entries, key=lambda e: e["checkpoint_id"]) if entries else None), None

    def thread_entries(self, run: str, ns: str | None) -> list[Entry]:
        """Entries of a thread (one namespace, or all when ``ns`` is None): its commit markers (found by
        name prefix) over the compacted parts' rows."""
        run_seg = nf.key_segment(run)
        ns_seg = None if not ns else nf.key_segment(ns)
        wanted = []
        for name, stamp in self.names(nf.TAIL, f"{run_seg}@", ".jsonl").items():
            parts = nf.langgraph_tail_parts(name)
            if parts is None or parts[0] != run_seg or (ns is not None and parts[1] != ns_seg):
                continue
            wanted.append((name, stamp))
        merged: dict[tuple[str, str, str], Entry] = {}
        for key, entry in self._part_index().items():
            if key[0] == run and (ns is None or key[1] == ns):
                merged[key] = entry
        for entry in self._tail_entries(wanted):
            key = _key(entry)
            if key[0] == run and (ns is None or key[1] == ns):
                merged[key] = entry
        return list(merged.values())

    def all_entries(self) -> list[Entry]:
        """Every LangGraph entry of the store."""
        wanted = [(n, s) for n, s in self.names(nf.TAIL, "", ".jsonl").items() if nf.langgraph_tail_parts(n)]
        merged = dict(self._part_index())
        for entry in self._tail_entries(wanted):
            merged[_key(entry)] = entry
        return [e for e in merged.values() if e.get("codec") == nf.LANGGRAPH_CODEC]

    def _tail_entries(self, names: list[tuple[str, Any]]) -> list[Entry]:
        out = []
        for name, stamp in names:
            with self._lock:
                cached = self._tails.get(name)
            if cached is not None and cached[0] == stamp and stamp is not None:
                entry = cached[1]
            else:
                try:
                    entries = _parse_lines(self.read(f"{nf.TAIL}/{name}", limits.MAX_CATALOG_FILE_BYTES))
                except FileNotFoundError:
                    continue  # compacted or deleted meanwhile: the parts have it, or it is gone
                entry = entries[-1] if entries else None
                with self._lock:
                    if len(self._tails) >= PART_CACHE_ENTRIES:
                        self._tails.clear()
                    self._tails[name] = (stamp, entry)
            if entry is not None and entry.get("codec") == nf.LANGGRAPH_CODEC:
                out.append(entry)
        return out

    def _part_index(self) -> dict[tuple[str, str, str], Entry]:
        """The LangGraph entries of every compacted part, by key (each part read once: parts are
        immutable, named once)."""
        names = sorted(self.names(nf.PARTS, "", ".parquet"))
        if not names:
            return {}
        index: dict[tuple[str, str, str], Entry] = {}
        for name in names:
            with self._lock:
                rows = self._parts.get(name)
            if rows is None:
                rows = self._read_part(name)
                with self._lock:
                    self._parts[name] = rows
            for row in rows:
                index[_key(row)] = row
        with self._lock:
            for gone in set(self._parts) - set(names):
                del self._parts[gone]
        return index

    def _read_part(self, name: str) -> list[Entry]:
        import pyarrow as pa

        try:
            data = self.read(f"{nf.PARTS}/{name}", limits.MAX_CATALOG_FILE_BYTES)
        except FileNotFoundError:
            return []
        rows = nf.read_part(pa.BufferReader(data)).to_pylist()
        for row in rows:
            row["namespace"] = row.get("namespace") or ""
            if isinstance(row.get("created_at"), datetime):
                row["created_at"] = nf.iso(row["created_at"])
        return [r for r in rows if r.get("codec") == nf.LANGGRAPH_CODEC]

    def read_blob(self, entry: Entry) -> bytes:
        data = self.read(entry["location"], blob_limit(entry.get("size_bytes")))
        if entry.get("checksum") and nf.sha256_text(data) != entry["checksum"]:
            raise DecodeError(f"checkpoint {entry['checkpoint_id']} of thread {entry['run_id']!r}: its blob "
                              f"{entry['location']} does not match the catalog's sha256 (damaged or changed)",
                              Check.SHA256_MISMATCH)
        return data

    def writes(self, run: str, ns: str, checkpoint_id: str, head: Mapping[str, Any] | None = None) -> list[Any]:
        """The checkpoint's pending writes (``format.LangGraphWrite``), merged as LangGraph's savers do;
        those recorded before a restore or rollback made it the head again are left out
        (``format.langgraph_resume_times``). ``head``: the thread's head, when it was read."""
        folder = nf.langgraph_writes_folder(run, ns, checkpoint_id)
        names = sorted(self.names(folder, "", nf.LG_WRITES_SUFFIX))
        if names and (since := self.resume_time(run, ns, checkpoint_id, head)) is not None:
            names = [n for n in names if (nf.writes_time(n) or since) >= since]
        files = []
        for name in names:
            try:
                data = self.read(f"{folder}/{name}", blob_limit(None))
            except FileNotFoundError:
                continue
            files.append(nf.parse_langgraph_writes(data, f"{folder}/{name}"))
        return nf.merge_langgraph_writes(files)

    def resume_time(self, run: str, ns: str, checkpoint_id: str, head: Mapping[str, Any] | None) -> int | None:
        """When a restore or rollback last made this checkpoint its thread's head (ns), or None: from the
        journal, and from the head itself (its journal entry is written just after it)."""
        folder = f"{nf.JOURNAL}/entries"
        names = self.names(folder, "", ".json")
        with self._lock:
            known = dict(self._journal)
        for name in set(names) - set(known):
            try:
                value = json.loads(self.read(f"{folder}/{name}", limits.MAX_SMALL_FILE_BYTES))
            except (FileNotFoundError, ValueError):
                continue
            known[name] = value if isinstance(value, dict) else {}
        with self._lock:
            self._journal = {n: e for n, e in known.items() if n in names}
        times = nf.langgraph_resume_times(self._journal.values())
        when = times.get((run, ns, checkpoint_id))
        action = nf.head_note(head).get("action")
        if head is not None and head.get("checkpoint_id") == checkpoint_id and action in nf.RESUME_ACTIONS:
            moved = nf.time_ns(head.get("updated_at"))
            if moved is not None:
                when = max(when or 0, moved)
        return when

    # -- deleting and copying --

    def delete_thread(self, run: str) -> None:
        """Heads first (nothing names a removed checkpoint), then the commit markers (the checkpoints
        are gone from here on), the parts' rows, pending markers, writes and blobs."""
        run_seg, head_prefix = nf.key_segment(run), nf.quote_name(run)
        for name in self.names(nf.HEADS, head_prefix, ".json"):
            if name == f"{head_prefix}.json" or name.startswith(f"{head_prefix}@"):
                self.remove(f"{nf.HEADS}/{name}")
        for name in self.names(nf.TAIL, f"{run_seg}@", ".jsonl"):
            parts = nf.langgraph_tail_parts(name)
            if parts is not None and parts[0] == run_seg:
                self.remove(f"{nf.TAIL}/{name}")
        self._rewrite_parts(lambda run_id, ns, cid: run_id == run)
        for name in self.names(nf.PENDING, f"{run_seg}@", ".json"):
            self.remove(f"{nf.PENDING}/{name}")
        for folder in (nf.WRITES, nf.BLOBS):
            for name in self._folders(folder):
                if name == run_seg or name.startswith(f"{run_seg}@"):
                    self.remove_tree(f"{folder}/{name}")

    def delete_entries(self, entries: list[Entry], fix_heads: bool) -> None:
        """Remove these checkpoints; with ``fix_heads``, a head naming one first moves to the newest
        checkpoint left in its thread and namespace (or is removed)."""
        if not entries:
            return
        doomed = {_key(e) for e in entries}
        if fix_heads:
            for run, ns in {(k[0], k[1]) for k in doomed}:
                head = self.read_head(run, ns)
                if head is None or (run, ns, head.get("checkpoint_id")) not in doomed:
                    continue
                left = [e for e in self.thread_entries(run, ns) if _key(e) not in doomed]
                if left:
                    self.write_head(max(left, key=lambda e: e["checkpoint_id"]))
                else:
                    self.remove(_head_name(run, ns))
        for run, ns, checkpoint_id in doomed:
            self.remove(f"{nf.TAIL}/{nf.langgraph_tail_name(run, ns, checkpoint_id)}")
        self._rewrite_parts(lambda run_id, ns, cid: (run_id, ns, cid) in doomed)
        for entry in entries:
            self.remove_tree(nf.langgraph_writes_folder(*_key(entry)))
            self.remove(entry["location"])

    def copy_thread(self, source: str, target: str) -> None:
        """Blobs and writes first, then the commit markers, then the heads (a crash leaves only
        unlisted files, or a target listed without its head: its newest checkpoint is its latest)."""
        entries = sorted(self.thread_entries(source, None), key=lambda e: e["checkpoint_id"])
        copied: dict[tuple[str, str], dict[str, Entry]] = {}
        for entry in entries:
            ns, checkpoint_id = entry.get("namespace") or "", entry["checkpoint_id"]
            blob = self.read_blob(entry)
            new = {**entry, "run_id": target, "namespace": ns,
                   "location": nf.langgraph_blob_location(target, ns, checkpoint_id, entry["checksum"])}
            self.write(new["location"], blob)
            source_folder = nf.langgraph_writes_folder(source, ns, checkpoint_id)
            target_folder = nf.langgraph_writes_folder(target, ns, checkpoint_id)
            for name in sorted(self.names(source_folder, "", nf.LG_WRITES_SUFFIX)):
                self.write(f"{target_folder}/{name}", self.read(f"{source_folder}/{name}", blob_limit(None)))
            copied.setdefault((target, ns), {})[checkpoint_id] = new
        for (run, ns), by_id in copied.items():
            for checkpoint_id, new in by_id.items():
                self.write(f"{nf.TAIL}/{nf.langgraph_tail_name(run, ns, checkpoint_id)}", nf.entry_line(new))
        for (run, ns), by_id in copied.items():
            head = (self.read_head(source, ns) or {}).get("checkpoint_id")
            self.write_head(by_id[head] if head in by_id else by_id[max(by_id)])

    def _folders(self, folder: str) -> list[str]:
        try:
            return [posixpath.basename(p.rstrip("/")) for p in self.fs.ls(self.path(folder), detail=False)]
        except (FileNotFoundError, NotADirectoryError):
            return []

    def _rewrite_parts(self, drop: Any) -> None:
        """Write each compacted part that holds a row to drop again without those rows (a new part
        first, then the old one removed: a crash in between leaves duplicates, never a loss)."""
        import pyarrow as pa
        import pyarrow.parquet as pq

        for name in sorted(self.names(nf.PARTS, "", ".parquet")):
            try:
                table = nf.read_part(pa.BufferReader(self.read(f"{nf.PARTS}/{name}",
                                                               limits.MAX_CATALOG_FILE_BYTES)))
            except FileNotFoundError:
                continue
            keys = zip(table.column("run_id").to_pylist(), table.column("namespace").to_pylist(),
                       table.column("checkpoint_id").to_pylist(), strict=True)
            keep = [not drop(run, ns or "", cid) for run, ns, cid in keys]
            if all(keep):
                continue
            if any(keep):
                sink = pa.BufferOutputStream()
                pq.write_table(table.filter(pa.array(keep)), sink, compression="zstd")
                self.write(f"{nf.PARTS}/part-{nf.new_checkpoint_id()}.parquet", sink.getvalue().to_pybytes())
            self.remove(f"{nf.PARTS}/{name}")
            with self._lock:
                self._parts.pop(name, None)

    def compact(self) -> Any:
        report = self.writer.compact()
        with self._lock:
            self._tails.clear()
        return report


# ---- helpers ------------------------------------------------------------------------------------

def _thread(config: RunnableConfig) -> tuple[str, str]:
    configurable = config["configurable"]
    return str(configurable["thread_id"]), configurable.get("checkpoint_ns") or ""


def _head_name(run: str, ns: str) -> str:
    """``heads/<run>[@<namespace>].json``, the name NativeWriter and NativeRecovery use."""
    suffix = f"@{nf.quote_name(ns)}" if ns else ""
    return f"{nf.HEADS}/{nf.quote_name(run)}{suffix}.json"


def _head_file(entry: Entry) -> tuple[str, bytes]:
    """The head pointer naming ``entry``: the fields NativeWriter writes."""
    head = {key: entry.get(key) for key in ("run_id", "namespace", "checkpoint_id", "step", "kind", "codec",
                                             "location", "checksum")}
    head["updated_at"] = nf.iso(datetime.now(UTC))
    return _head_name(entry["run_id"], entry.get("namespace") or ""), json.dumps(head, indent=1).encode()


_SYNC_POOL: list[ThreadPoolExecutor] = []
_SYNC_POOL_LOCK = threading.Lock()


def _sync_together(fds: list[int]) -> None:
    """fsync every descriptor, concurrently: a journaling filesystem commits syncs that arrive
    together as one, so N files cost about one sync."""
    if len(fds) <= 1:
        for fd in fds:
            os.fsync(fd)
        return
    with _SYNC_POOL_LOCK:
        if not _SYNC_POOL:
            _SYNC_POOL.append(ThreadPoolExecutor(max_workers=4, thread_name_prefix="lastgood-fsync"))
    futures = [_SYNC_POOL[0].submit(os.fsync, fd) for fd in fds[1:]]
    os.fsync(fds[0])
    for future in futures:
        future.result()


def _key(entry: Entry) -> tuple[str, str, str]:
    return entry["run_id"], entry.get("namespace") or "", entry["checkpoint_id"]


def _parse_lines(data: bytes) -> list[Entry]:
    """Catalog entries of a commit marker (lines that are not entries are skipped: the reader
    reports them)."""
    entries = []
    for line in data.splitlines():
        if not line.strip():
            continue
        try:
            entry = orjson.loads(line)
        except orjson.JSONDecodeError:
            try:
                entry = json.loads(line)
            except ValueError:
                continue
        if (isinstance(entry, dict) and isinstance(entry.get("run_id"), str)
                and isinstance(entry.get("checkpoint_id"), str) and isinstance(entry.get("location"), str)):
            entry["namespace"] = entry.get("namespace") or ""
            entries.append(entry)
    return entries


def _metadata(entry: Entry) -> dict[str, Any]:
    raw = entry.get("metadata")
    if isinstance(raw, dict):
        return raw
    try:
        value = json.loads(raw) if raw else {}
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def _matches(metadata: Mapping[str, Any], wanted: Mapping[str, Any]) -> bool:
    return all(metadata.get(key) == value for key, value in wanted.items())


def _created_at(ts: Any) -> str:
    if isinstance(ts, str):
        try:
            return nf.iso(datetime.fromisoformat(ts))
        except ValueError:
            pass
    return nf.iso(datetime.now(UTC))
