"""Reader for a folder of pydantic-graph ``FileStatePersistence`` run files (see the package docstring).

Only local folders. A run file is recognised by its content (a JSON array of snapshots with
``kind`` node/end, ``id``, ``status``), never by its name; ``.json`` files that are not run
files, links and special files are findings, and the other runs still load. The scan token
keeps each file's stamp (size, mtime, inode), its snapshot count, a digest of its ids and which
snapshots had events: a refresh parses only the files that changed, and lists the whole folder
again when a file lost snapshots (an undo), a file went away, or an event of a snapshot listed
before must go (a paused run was resumed).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import stat
import threading
from collections import OrderedDict
from collections.abc import Iterable, Iterator, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lastgood import limits
from lastgood.checks import Check
from lastgood.errors import CheckpointNotFound, DecodeError, NotAFile, StoreNotFound, TooLarge, UnsafePath
from lastgood.readers.base import CheckpointRecord, EventRecord, Finding, HeadRecord, Reader, Scan, backend_named
from lastgood.readers.common import validate
from lastgood.readers.common.fsutil import LocalFS, read_bounded
from lastgood.readers.common.columns import checkpoints_table, events_table
from lastgood.readers.pydantic_graph import layout
from lastgood.readers.pydantic_graph import runfile as rf
from lastgood.readers.pydantic_graph.messages import normalize_message

if TYPE_CHECKING:
    from lastgood.readers.journal import RecoveryBackend, RetentionBackend

TOKEN_PREFIX = "pydantic-graph:1:"
SNIFF_BYTES = 64 * 1024
SNIFF_FILES = 8
CACHE_FILES = 16
_HEAD = re.compile(rb'^\s*\[\s*\{\s*"(state|kind|id|node|status)"\s*:')
COLUMNS = ("run_id", "checkpoint_id", "parent_id", "step", "micros", "trigger", "status", "status_reason",
           "size_bytes", "location", "metadata")


def local_root(url: str) -> Path | None:
    """The folder a local URL names (a plain path or ``file://``), else None."""
    if url.startswith("file://"):
        url = url[len("file://"):]
    elif "://" in url:
        return None
    return Path(url).expanduser()


def looks_like_run(head: bytes, complete: bool) -> bool:
    """A JSON array of snapshots: each an object with ``kind`` node/end and an ``id`` (node
    snapshots a ``status`` and a ``node``). A file longer than ``head``: its opening only."""
    if not complete:
        return bool(_HEAD.match(head)) and (b'"kind": "node"' in head or b'"kind": "end"' in head
                                             or len(head) >= SNIFF_BYTES)
    try:
        elements, damage = rf.parse_elements(head.decode("utf-8"))
    except UnicodeDecodeError:
        return False
    return bool(elements) and damage is None and all(_snapshot_shaped(value) for value, _s, _e in elements)


def _snapshot_shaped(value: Any) -> bool:
    if not isinstance(value, dict) or value.get("kind") not in rf.KINDS or "id" not in value:
        return False
    return value["kind"] == "end" or ("status" in value and isinstance(value.get("node"), dict))


class PydanticGraphReader(Reader):
    """Run files of one folder: a run per file, a checkpoint per snapshot."""

    name = "pydantic-graph"
    description = ("pydantic-graph FileStatePersistence: a folder of run files, each a JSON array of "
                   "snapshots (a run per file, a checkpoint per snapshot)")

    def __init__(self, url: str, storage_options: Mapping[str, Any] | None = None) -> None:
        super().__init__(url, storage_options)
        root = local_root(url)
        if root is None:
            raise StoreNotFound(f"{url}: pydantic-graph run folders are read from local paths only")
        self.root = root
        self.root_real = os.path.realpath(root)
        self._cache: OrderedDict[str, tuple[str, rf.RunFile]] = OrderedDict()
        self._lock = threading.Lock()

    @classmethod
    def sniff(cls, url: str, storage_options: Mapping[str, Any] | None = None) -> bool:
        root = local_root(url)
        if root is None or not root.is_dir():
            return False
        try:
            names = sorted(n for n in os.listdir(root) if n.endswith(".json") and not n.startswith("."))
        except OSError:
            return False
        for name in names[:SNIFF_FILES]:
            head, complete = _head(root / name)
            if head and looks_like_run(head, complete):
                return True
        return False

    # ---- files ------------------------------------------------------------------------

    def _files(self) -> tuple[dict[str, str], list[Finding]]:
        """Run file candidates (``*.json``, not hidden) -> stamp; links and special files refused."""
        stamps: dict[str, str] = {}
        refused: list[Finding] = []
        try:
            entries = list(os.scandir(self.root))
        except (FileNotFoundError, NotADirectoryError):
            raise StoreNotFound(f"store not found: {self.root} (no such folder)") from None
        for entry in entries:
            if not entry.name.endswith(".json") or entry.name.startswith("."):
                continue
            if entry.is_file(follow_symlinks=False):
                info = entry.stat(follow_symlinks=False)
                stamps[entry.name] = f"{info.st_size}:{info.st_mtime_ns}:{info.st_ino}"
            else:
                refused.append(Finding(Check.NOT_A_FILE, "error", f"{entry.name} is a link or not a regular "
                                       "file: not read", rf.run_id_of(entry.name)))
        return dict(sorted(stamps.items())), refused

    def _run(self, name: str, stamp: str | None = None) -> rf.RunFile:
        """The run file parsed (kept while its stamp holds). Raises OSError or a ReaderError."""
        stamp = stamp or _stamp(os.path.join(self.root_real, name))
        with self._lock:
            cached = self._cache.get(name)
            if cached is not None and cached[0] == stamp:
                self._cache.move_to_end(name)
                return cached[1]
        data = read_bounded(LocalFS(), os.path.join(self.root_real, name), limits.MAX_CATALOG_FILE_BYTES,
                            self.root_real)
        run = rf.read_run(name, data)
        with self._lock:
            self._cache[name] = (stamp, run)
            while len(self._cache) > CACHE_FILES:
                self._cache.popitem(last=False)
        return run

    # ---- listing ----------------------------------------------------------------------

    def scan(self, since: str | None = None) -> Scan:
        stamps, refused = self._files()
        journal = layout.journal_entries(self.root)
        old = _parse_token(since)
        if old is not None and old["journal"] == len(journal) and old["refused"] == len(refused) \
                and set(old["files"]) <= set(stamps):
            changed = [n for n in stamps if old["files"].get(n, [None])[0] != stamps[n]]
            if not changed:
                return Scan(token=since or "", full=False, checkpoints=iter(()))
            listing = self._listing(changed, stamps, journal)
            if _appended_only(listing, old["files"]):
                return listing.scan(old["files"], stamps, len(journal), refused, full=False)
        listing = self._listing(list(stamps), stamps, journal)
        listing.findings[:0] = refused
        return listing.scan({}, stamps, len(journal), refused, full=True)

    def _listing(self, names: list[str], stamps: Mapping[str, str], journal: list[dict[str, Any]]) -> _Listing:
        listing = _Listing(_restores(journal))
        for name in names:
            try:
                run = self._run(name, stamps[name])
            except FileNotFoundError:
                continue  # removed while listed: the next refresh sees it gone
            except (OSError, TooLarge, UnsafePath, NotAFile) as exc:
                check = Check.TOO_LARGE if isinstance(exc, TooLarge) else Check.UNDECODABLE
                listing.findings.append(Finding(check, "error", f"run file {name} cannot be read: {exc}",
                                                rf.run_id_of(name)))
                listing.files[name] = _FileFacts(0, "", [], True)
                continue
            listing.add(run, _mtime(stamps[name]))
        return listing

    # ---- one checkpoint ---------------------------------------------------------------

    def _snapshot(self, record: CheckpointRecord) -> tuple[rf.RunFile, rf.Snapshot]:
        name = (record.location or "").rsplit("#", 1)[0] or f"{record.run_id}.json"
        if rf.run_id_of(name) != record.run_id or "/" in name or name.startswith("."):
            name = f"{record.run_id}.json"
        try:
            run = self._run(name)
        except FileNotFoundError:
            raise CheckpointNotFound(f"run file {name} is gone") from None
        except (OSError, TooLarge, UnsafePath, NotAFile) as exc:
            raise DecodeError(f"run file {name} cannot be read: {exc}",
                              Check.TOO_LARGE if isinstance(exc, TooLarge) else Check.UNDECODABLE) from None
        snap = run.by_id(record.checkpoint_id)
        if snap is None:
            raise CheckpointNotFound(f"snapshot {record.checkpoint_id} is not in {name}")
        return run, snap

    def read_blob(self, record: CheckpointRecord) -> bytes:
        """The snapshot's own bytes, exactly as they are in the run file."""
        run, snap = self._snapshot(record)
        return run.blob(snap)

    def load_state(self, record: CheckpointRecord) -> Any:
        run, snap = self._snapshot(record)
        if snap.kind is None or not isinstance(snap.value, dict) or "state" not in snap.value:
            raise DecodeError(f"snapshot {snap.cid} is not one pydantic-graph can load: {snap.broken}")
        state = rf.state_of(snap)
        try:
            validate.check_state(state, "snapshot", encoded_bytes=snap.span[1] - snap.span[0], cost_per_byte=1)
        except validate.Invalid as exc:
            raise DecodeError(str(exc), exc.check) from None
        return state

    # ---- integrity ----------------------------------------------------------------------

    def check_checkpoints(self, records: Iterable[CheckpointRecord], read_data: bool = False
                          ) -> Iterator[Finding]:
        """Structure: the snapshot is still in its run file, which parses. Data: its state
        decodes within the bounds and pydantic-graph would accept the snapshot."""
        for record in records:
            try:
                run, snap = self._snapshot(record)
            except CheckpointNotFound as exc:
                yield _finding(record, Check.MISSING, str(exc))
                continue
            except DecodeError as exc:
                yield _finding(record, exc.check, str(exc))
                continue
            if snap.broken:
                yield _finding(record, Check.ROW_INVALID, snap.broken)
            if read_data:
                try:
                    self.load_state(record)
                except DecodeError as exc:
                    yield _finding(record, exc.check, str(exc))

    # ---- capabilities -------------------------------------------------------------------

    def recovery(self) -> RecoveryBackend:
        return backend_named("lastgood.readers.pydantic_graph.recovery:PydanticGraphRecovery", self)

    def retention(self) -> RetentionBackend:
        """Prune: whole stale run files, archived, then removed (:mod:`.retention`)."""
        return backend_named("lastgood.readers.pydantic_graph.retention:RunFileRetention", self)  # type: ignore[return-value]

    def normalize_message(self, value: Any) -> dict[str, Any] | None:
        """pydantic-ai ``ModelMessage`` dicts (a graph state's conversation), made plain."""
        return normalize_message(value)


class _FileFacts:
    """What the token keeps of one run file."""

    __slots__ = ("count", "digest", "events", "damaged")

    def __init__(self, count: int, digest: str, events: list[str], damaged: bool) -> None:
        self.count, self.digest, self.events, self.damaged = count, digest, events, damaged


class _Listing:
    """Checkpoint columns, events, findings and heads of the run files listed."""

    def __init__(self, restores: Mapping[str, dict[str, dict[str, Any]]]) -> None:
        self.restores = restores
        self.columns: dict[str, list[Any]] = {k: [] for k in COLUMNS}
        self.events: list[EventRecord] = []
        self.findings: list[Finding] = []
        self.heads: list[HeadRecord] = []
        self.files: dict[str, _FileFacts] = {}
        self.runs: dict[str, rf.RunFile] = {}

    def add(self, run: rf.RunFile, mtime: datetime) -> None:
        notes = self.restores.get(run.run_id, {})
        times = {cid: note["time"] for cid, note in notes.items() if isinstance(note.get("time"), datetime)}
        micros = rf.created_micros(run, times, mtime)
        (run_ids, cids, parents, steps, created, triggers, statuses, reasons, sizes, locations,
         metas) = (self.columns[name] for name in COLUMNS)
        parent = None
        for snap, at in zip(run.snapshots, micros):
            note = {k: v for k, v in notes[snap.cid].items() if k != "time"} if snap.cid in notes else None
            status, reason = rf.status_of(snap)
            run_ids.append(run.run_id)
            cids.append(snap.cid)
            parents.append(parent)
            steps.append(snap.index)
            created.append(at)
            triggers.append("restore" if note else (snap.node_id or "unknown"))
            statuses.append(status)
            reasons.append(reason)
            sizes.append(snap.span[1] - snap.span[0])
            locations.append(f"{run.name}#{snap.index}")
            metas.append(rf.metadata_text(snap, note))
            parent = snap.cid
        events = rf.events_of(run, micros, notes)
        self.events.extend(events)
        self.findings.extend(rf.findings_of(run))
        head = rf.head_index(run.snapshots)
        if head is not None:
            self.heads.append(HeadRecord(run.run_id, run.snapshots[head].cid))
        self.files[run.name] = _FileFacts(len(run.snapshots), _ids_digest(run.snapshots, len(run.snapshots)),
                                          sorted({e.checkpoint_id for e in events if e.checkpoint_id}),
                                          bool(run.damage))
        self.runs[run.name] = run

    def scan(self, kept: Mapping[str, list[Any]], stamps: Mapping[str, str], journal: int,
             refused: list[Finding], full: bool) -> Scan:
        files = {n: v for n, v in kept.items() if n in stamps}
        files.update({n: [stamps[n], f.count, f.digest, f.events, f.damaged] for n, f in self.files.items()})
        token = TOKEN_PREFIX + json.dumps({"files": files, "journal": journal, "refused": len(refused)},
                                          sort_keys=True)
        tables = [checkpoints_table(self.columns)] if self.columns["checkpoint_id"] else []
        events = [events_table(self.events)] if self.events else []
        return Scan(token=token, full=full, checkpoints=iter(tables), events=iter(events),
                    findings=self.findings, heads=self.heads)


def _appended_only(listing: _Listing, old: Mapping[str, list[Any]]) -> bool:
    """Every changed file kept its snapshots (maybe with new statuses) and added some after them,
    and no event of a snapshot listed before must go: the changed files alone can be listed."""
    for name, facts in listing.files.items():
        before = old.get(name)
        if before is None:
            continue
        _stamp_, count, digest, events, damaged = before
        run = listing.runs.get(name)
        if run is None or damaged or facts.damaged or facts.count < count:
            return False
        if _ids_digest(run.snapshots, count) != digest or not set(events) <= set(facts.events):
            return False
    return True


def _restores(journal: list[dict[str, Any]]) -> dict[str, dict[str, dict[str, Any]]]:
    """run -> snapshot id -> the action that appended that snapshot (its journal note)."""
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for entry in journal:
        note = entry.get("note") if isinstance(entry.get("note"), dict) else {}
        appended = note.get("appended")
        if isinstance(appended, str) and isinstance(entry.get("run_id"), str):
            try:
                at = datetime.fromisoformat(str(entry.get("time")).replace("Z", "+00:00"))
            except ValueError:
                at = None
            out.setdefault(entry["run_id"], {})[appended] = {
                "action": entry.get("action"), "action_id": entry.get("id"),
                "restored_from": note.get("restored_from"), "time": at}
    return out


def _ids_digest(snaps: list[rf.Snapshot], count: int) -> str:
    return hashlib.sha256("\n".join(s.cid for s in snaps[:count]).encode()).hexdigest()[:32]


def _parse_token(token: str | None) -> dict[str, Any] | None:
    if not token or not token.startswith(TOKEN_PREFIX):
        return None
    try:
        value = json.loads(token[len(TOKEN_PREFIX):])
    except ValueError:
        return None
    files = value.get("files") if isinstance(value, dict) else None
    if not isinstance(files, dict) or not all(isinstance(v, list) and len(v) == 5 for v in files.values()):
        return None
    if not isinstance(value.get("journal"), int) or not isinstance(value.get("refused"), int):
        return None
    return value


def _head(path: Path) -> tuple[bytes, bool]:
    """The first SNIFF_BYTES of a regular file (links not followed), and whether that is all of it."""
    try:
        info = os.lstat(path)
        if not stat.S_ISREG(info.st_mode):
            return b"", False
        with open(path, "rb") as handle:
            head = handle.read(SNIFF_BYTES)
    except OSError:
        return b"", False
    return head, info.st_size <= SNIFF_BYTES


def _stamp(path: str) -> str:
    info = os.lstat(path)
    return f"{info.st_size}:{info.st_mtime_ns}:{info.st_ino}"


def _mtime(stamp: str) -> datetime:
    """The modification time a stamp ("size:mtime_ns:inode") holds."""
    return datetime.fromtimestamp(int(stamp.split(":")[1]) / 1e9, UTC)


def _finding(record: CheckpointRecord, check: Check, message: str) -> Finding:
    return Finding(check, "error", message, record.run_id, record.namespace, record.checkpoint_id)
