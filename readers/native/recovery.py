"""Write capability of the native store: move a run's head, keep the journal.

Layout (see docs/format.md, "Recovery"):

    <root>/journal/entries/<seq:010d>.json   one journal entry per file, never rewritten
    <root>/journal/lock.json                 the action in progress (its intent)

A commit, in order:

1. create ``journal/lock.json`` exclusively (local: hard link of a synced temp
   file, which fails when the lock exists; object stores: a conditional PUT
   where the backend has one, else check-then-PUT — see docs/format.md);
2. re-read the head; if it is not the expected one: remove the lock,
   ``ConflictError``;
3. replace the lock with the intent: the sealed journal entry;
4. replace ``heads/<run>.json`` (temp + fsync + rename) — **the commit point**
   of an action that moves the head;
5. write ``journal/entries/<seq>.json`` (exclusive create) — the commit point
   of a marks-only action (quarantine, release);
6. remove the lock.

A kill at any moment leaves the old or the new head. A lock left by a dead
process is resolved by the next action: if its head switch happened, its
journal entry is written; otherwise it is dropped. Reading never writes.
"""

from __future__ import annotations

import json
import os
import socket
import time
import uuid
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from lastgood.readers import journal as jr
from lastgood.errors import ConflictError, DecodeError, LastgoodError
from lastgood.readers.native import format as nf
from lastgood.readers.common.fsutil import atomic_write, is_local, open_fs, safe_join

ENTRIES = f"{nf.JOURNAL}/entries"
LOCK = f"{nf.JOURNAL}/lock.json"
STALE_LOCK_SECONDS = 60.0
HEAD_FIELDS = ("step", "kind", "codec", "location", "checksum")


class NativeRecovery:
    """``RecoveryBackend`` for a native store (see ``lastgood.readers.journal``)."""

    def __init__(self, url: str, storage_options: Mapping[str, Any] | None = None) -> None:
        self.url = url
        self.storage_options = dict(storage_options or {})
        self.fs, self.root = open_fs(url, storage_options)

    def _path(self, relative: str) -> str:
        return safe_join(self.root, relative)

    # ---- reading ----------------------------------------------------------------

    def head_record(self, run_id: str, namespace: str = "") -> dict[str, Any] | None:
        try:
            value = jr.parse_entry(self.fs.cat_file(self._head_path(run_id, namespace)))
        except FileNotFoundError:
            return None
        return value

    def head(self, run_id: str, namespace: str = "") -> str | None:
        record = self.head_record(run_id, namespace)
        return str(record["checkpoint_id"]) if record and record.get("checkpoint_id") else None

    def journal_entries(self) -> list[dict[str, Any]]:
        try:
            names = sorted(p.rsplit("/", 1)[-1] for p in self.fs.ls(self._path(ENTRIES), detail=False))
        except FileNotFoundError:
            return []
        names = [n for n in names if n.endswith(".json") and not n.startswith(".")]
        if not names:
            return []
        paths = [self._path(f"{ENTRIES}/{n}") for n in names]
        blobs = self.fs.cat(paths, on_error="return")
        entries = []
        for path in paths:
            data = blobs.get(path)
            entry = jr.parse_entry(data) if isinstance(data, bytes) else None
            entries.append(entry if entry is not None else {"id": None, "unreadable": path})
        return entries

    def pending(self) -> list[dict[str, Any]]:
        """An action in progress or interrupted (its lock), as stored."""
        lock = self._read_lock()
        return [lock] if lock else []

    def _read_lock(self) -> dict[str, Any] | None:
        try:
            return jr.parse_entry(self.fs.cat_file(self._path(LOCK))) or {"unreadable": True}
        except FileNotFoundError:
            return None

    # ---- writing ----------------------------------------------------------------

    def commit(self, change: jr.Change) -> dict[str, Any]:
        self._refuse_moved_head(change)  # before the lock: a refused action leaves the store untouched
        lock = self._acquire(str(change.entry.get("id")))
        try:
            return self._commit_locked(change, lock)
        finally:
            self._release()

    def append(self, entry: Mapping[str, Any]) -> dict[str, Any]:
        """Append an entry that changes no head (a failed check)."""
        lock = self._acquire(str(entry.get("id")))
        try:
            seq, prev = jr.tip(self.journal_entries())
            sealed = jr.seal(entry, seq, prev)
            self._write_entry(sealed)
            return sealed
        finally:
            self._release()

    def _refuse_moved_head(self, change: jr.Change) -> str | None:
        head = self.head(change.run_id, change.namespace)
        if head != change.expected_head:
            raise ConflictError(
                f"the head of run {change.run_id!r} moved: expected {change.expected_head}, found {head}; "
                "nothing was written — re-plan and try again")
        return head

    def _commit_locked(self, change: jr.Change, lock: dict[str, Any]) -> dict[str, Any]:
        head = self._refuse_moved_head(change)
        seq, prev = jr.tip(self.journal_entries())
        new_head = change.restore_from or head
        sealed = jr.seal({**change.entry, "new_head": new_head}, seq, prev)
        self._write_lock({**lock, "entry": sealed, "target": dict(change.target or {})})
        if change.restore_from:
            self._write_head(change, sealed)
        self._write_entry(sealed)
        return sealed

    def _write_head(self, change: jr.Change, entry: Mapping[str, Any]) -> None:
        target = dict(change.target or {})
        head = {"run_id": change.run_id, "namespace": change.namespace,
                "checkpoint_id": change.restore_from,
                **{k: target.get(k) for k in HEAD_FIELDS},
                "updated_at": nf.iso(datetime.now(UTC)),
                "note": {"action_id": entry["id"], "action": entry["action"],
                         "operator": entry["operator"], "reason": entry["reason"],
                         "restored_from": change.restore_from,
                         "restored_over": entry["previous_head"]}}
        atomic_write(self.fs, self._head_path(change.run_id, change.namespace),
                     json.dumps(head, indent=1, default=str).encode())

    def _write_entry(self, entry: Mapping[str, Any]) -> None:
        path = self._path(f"{ENTRIES}/{int(entry['seq']):010d}.json")
        if not _create_exclusive(self.fs, path, jr.canonical(entry)):
            raise ConflictError(f"journal entry {entry['seq']} was written by another action; "
                                "nothing was changed by this one")

    # ---- the lock -----------------------------------------------------------------

    def _acquire(self, action_id: str) -> dict[str, Any]:
        lock = {"action_id": action_id, "pid": os.getpid(), "host": socket.gethostname(),
                "started": time.time()}
        for _attempt in range(2):
            if _create_exclusive(self.fs, self._path(LOCK), jr.canonical(lock)):
                return lock
            existing = self._read_lock()
            if existing is None:
                continue
            if not _is_stale(existing):
                raise ConflictError("another recovery action is in progress on this store "
                                    f"({existing.get('action_id')}); try again in a moment")
            self._resolve_stale(existing)
        raise ConflictError("could not take the store's journal lock; try again")

    def _resolve_stale(self, lock: Mapping[str, Any]) -> None:
        """Finish an interrupted action whose head switch happened; drop it otherwise."""
        entry = lock.get("entry")
        if isinstance(entry, dict) and self._took_effect(entry):
            path = self._path(f"{ENTRIES}/{int(entry['seq']):010d}.json")
            if not self.fs.exists(path):
                _create_exclusive(self.fs, path, jr.canonical(entry))
        self.fs.rm_file(self._path(LOCK))

    def _took_effect(self, entry: Mapping[str, Any]) -> bool:
        if entry.get("new_head") == entry.get("previous_head"):
            return False  # marks only: the journal entry is the commit point
        run, ns = str(entry.get("run_id")), str(entry.get("namespace") or "")
        head = self.head_record(run, ns) or {}
        note = head.get("note") if isinstance(head.get("note"), dict) else {}
        return note.get("action_id") == entry.get("id")

    def _write_lock(self, value: Mapping[str, Any]) -> None:
        atomic_write(self.fs, self._path(LOCK), jr.canonical(value))

    def _release(self) -> None:
        try:
            self.fs.rm_file(self._path(LOCK))
        except FileNotFoundError:
            pass

    # ---- checks -------------------------------------------------------------------

    def check_head(self, run_id: str, namespace: str, target_id: str, expected_state: Any) -> jr.HeadCheck:
        """Load the head through ``NativeWriter.load_head_state`` and compare it."""
        from lastgood.readers.native.writer import NativeWriter

        try:
            writer = NativeWriter(self.url, self.storage_options, create=False)
            head = writer.head(run_id, namespace) or {}
            state = writer.load_head_state(run_id, namespace)
        except (DecodeError, LastgoodError, OSError) as exc:
            return jr.HeadCheck(False, f"the new head does not load: {exc}")
        if head.get("checkpoint_id") != target_id:
            return jr.HeadCheck(False, f"the head names {head.get('checkpoint_id')}, not {target_id}")
        if state != expected_state:
            return jr.HeadCheck(False, "NativeWriter.load_head_state differs from the target's state")
        return jr.HeadCheck(True, "NativeWriter.load_head_state returns the target's state")

    def side_effects(self, run_id: str, namespace: str, after: Sequence[str]) -> list[dict[str, Any]]:
        return []  # native events and metadata come from the index (lastgood.recovery.plan)

    def _head_path(self, run_id: str, namespace: str) -> str:
        suffix = f"@{nf.quote_name(namespace)}" if namespace else ""
        return self._path(f"{nf.HEADS}/{nf.quote_name(run_id)}{suffix}.json")


def _create_exclusive(fs: Any, path: str, data: bytes) -> bool:
    """Write ``path`` only if it does not exist; False when it does.

    Local: a synced temp file hard-linked into place (link fails on an
    existing name, atomically). Object stores: a conditional PUT
    (``mode="create"``: S3 ``If-None-Match: *``) where the backend has one;
    otherwise check, then one PUT (a race window, see docs/format.md).
    """
    if not is_local(fs):
        return _put_if_absent(fs, path, data)
    directory = os.path.dirname(path)
    os.makedirs(directory, exist_ok=True)
    tmp = os.path.join(directory, f".tmp-{uuid.uuid4().hex}")
    with open(tmp, "wb") as handle:
        handle.write(data)
        handle.flush()
        os.fsync(handle.fileno())
    try:
        os.link(tmp, path)
        return True
    except FileExistsError:
        return False
    finally:
        os.unlink(tmp)
        _sync_dir(directory)


def _put_if_absent(fs: Any, path: str, data: bytes) -> bool:
    if fs.exists(path):
        return False
    try:
        fs.pipe_file(path, data, mode="create")
        return True
    except FileExistsError:
        return False
    except (TypeError, ValueError, NotImplementedError):  # no conditional writes in this backend
        fs.pipe_file(path, data)
        return True


def _sync_dir(directory: str) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _is_stale(lock: Mapping[str, Any]) -> bool:
    if lock.get("unreadable"):
        return True
    if lock.get("host") == socket.gethostname() and isinstance(lock.get("pid"), int):
        try:
            os.kill(lock["pid"], 0)
        except ProcessLookupError:
            return True
        except PermissionError:
            return False
    started = lock.get("started")
    return not isinstance(started, (int, float)) or time.time() - started > STALE_LOCK_SECONDS
