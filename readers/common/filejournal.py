"""The recovery journal kept in files inside a store, and the commit every file-based backend shares.

Layout (relative to the store root; a format names its two paths)::

    <entries>/<seq:010d>.json   one sealed entry per file, never rewritten
    <lock>                      the action in progress: its intent

A commit, in order:

1. refuse a moved head (before the lock: a refused action writes nothing);
2. take the lock: create it exclusively (local: hard link of a synced temp file, which fails when
   the name exists; object stores: a conditional PUT where the backend has one, else check then
   PUT). A lock left by a dead process (or by an owner that gave up) is resolved first: completed
   when its work took effect, dropped otherwise; another process resolving it at the same moment
   is no error. Temp files (``.tmp-*``) a killed writer left are swept;
3. re-read the head; moved: drop the lock, ``ConflictError``;
4. replace the lock with the intent: the sealed entry and the format's work;
5. do the work (:meth:`FileJournal.perform`) — the commit point of an action that changes files;
6. write the entry (exclusive create) — the commit point of a marks-only action;
7. remove the lock.

When step 5 fails after some of the work took effect, or step 6 fails after the work took effect,
the intent stays, marked interrupted: ``pending()`` (``lastgood journal``) shows it, and the next
action completes it. Every control file (the lock, an entry) is read bounded and link-refusing: a
FIFO, a device, a link out of the store or an oversize file is refused, never read or waited on.

A format subclasses :class:`FileJournal`, sets ``entries_dir``/``lock_file`` and provides
``head``, ``prepare`` (the new head and the work), ``perform``, ``took_effect`` and ``check_head``.
:class:`MoveOps` adds idempotent move operations (``{"op": "move", "from", "to"}``: a rename, or on an
object store a copy then the deletes) — the work of a training store's prune and its undo, whichever
journal the format has.
"""

from __future__ import annotations

import contextlib
import errno
import os
import posixpath
import socket
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from lastgood import limits
from lastgood.errors import ConflictError, LastgoodError, NotAFile, ReaderError, TooLarge, UnsafePath
from lastgood.readers import journal as jr
from lastgood.readers.common.fsutil import atomic_write, full_fs, is_local, read_bounded, real_root, safe_join

STALE_LOCK_SECONDS = 60.0
REFUSED = (UnsafePath, NotAFile, TooLarge)  # what a bounded, link-refusing read refuses


@dataclass
class Prepared:
    """What an action does: the run's new head, notes for its entry, and the work (None: marks
    only). ``work`` goes into the intent (JSON); ``payload`` is handed to ``perform`` only."""

    new_head: str | None
    work: dict[str, Any] | None = None
    note: dict[str, Any] = field(default_factory=dict)
    payload: Any = None


class FileJournal:
    """``RecoveryBackend`` mechanics over a store folder (see the module docstring). A subclass sets
    ``self.fs``/``self.root`` with :meth:`open_journal` before anything else."""

    entries_dir: ClassVar[str] = ".lastgood/journal/entries"
    lock_file: ClassVar[str] = ".lastgood/journal/lock.json"
    sweep_dirs: ClassVar[tuple[str, ...]] = ()  # further folders a killed writer may leave temp files in
    local_only: ClassVar[str | None] = None  # why writes need a local folder (None: any filesystem)

    fs: Any
    root: str
    root_real: str | None
    local: bool

    def open_journal(self, fs: Any, root: str) -> None:
        self.fs, self.root = fs, root
        self.root_real = real_root(fs, root)
        self.local = is_local(fs)

    def _path(self, relative: str) -> str:
        return self.root if relative in ("", ".") else safe_join(self.root, relative)

    # ---- what a format provides -----------------------------------------------------------

    def head(self, run_id: str, namespace: str = "") -> str | None:
        raise NotImplementedError

    def prepare(self, change: jr.Change, head: str | None) -> Prepared:
        """The new head and the work that makes it so (called under the lock); default: marks only."""
        return Prepared(change.restore_from or head)

    def perform(self, intent: Mapping[str, Any], payload: Any) -> None:
        """Do the work of ``intent`` (the commit point); idempotent or one atomic step."""
        raise NotImplementedError

    def took_effect(self, intent: Mapping[str, Any]) -> bool:
        """Whether any of the work of ``intent`` happened (its entry is then owed)."""
        raise NotImplementedError

    def complete(self, intent: Mapping[str, Any]) -> None:
        """Finish the work of an interrupted ``intent`` that took effect (default: done already)."""

    def resolve_other(self, lock: Mapping[str, Any]) -> bool:
        """Resolve a stale intent of another kind (a prune); True when it was one."""
        return False

    def lock_extras(self, action_id: str, change: jr.Change | None) -> dict[str, Any]:
        """Fields of the lock beyond owner and time (noted before anything else is taken)."""
        return {}

    def locked(self, lock: Mapping[str, Any]) -> None:
        """Take what else an action holds once the lock is taken (raise to give it back)."""

    def unlocking(self, lock: Mapping[str, Any]) -> None:
        """Give back what ``locked`` took for ``lock`` (its own or a stale one's)."""

    # ---- reading ------------------------------------------------------------------------

    def read_control(self, path: str) -> bytes:
        """One of the store's control files, bounded and link-refusing (UnsafePath, NotAFile,
        TooLarge), never read past its limit or waited on."""
        return read_bounded(self.fs, path, limits.MAX_SMALL_FILE_BYTES, self.root_real)

    def journal_entries(self) -> list[dict[str, Any]]:
        return read_entries(self.fs, self._path(self.entries_dir), self.root_real)

    def pending(self) -> list[dict[str, Any]]:
        """An action in progress or interrupted (its lock), as stored."""
        lock = self._read_lock()
        return [lock] if lock else []

    def _read_lock(self) -> dict[str, Any] | None:
        try:
            return jr.parse_entry(self.read_control(self._path(self.lock_file))) or {"unreadable": True}
        except (FileNotFoundError, NotADirectoryError):
            return None
        except REFUSED as exc:
            raise ReaderError(f"the store's journal lock cannot be read: {exc}; remove {self.lock_file} by hand "
                              "once no action is running") from None

    # ---- writing ------------------------------------------------------------------------

    def commit(self, change: jr.Change) -> dict[str, Any]:
        self._refuse_moved_head(change)  # before the lock: a refused action leaves the store untouched
        lock = self._acquire(str(change.entry.get("id")), change)
        keep = False
        try:
            return self._commit_locked(change, lock)
        except Kept as kept:
            keep = True
            raise kept.error from None
        finally:
            if keep:
                self.unlocking(lock)  # the intent stays; what else the action held is given back
            else:
                self._release(lock)

    def append(self, entry: Mapping[str, Any]) -> dict[str, Any]:
        """Append an entry that changes no head (a failed check)."""
        lock = self._acquire(str(entry.get("id")))
        try:
            seq, prev = jr.tip(self.journal_entries())
            sealed = jr.seal(entry, seq, prev)
            self._write_entry(sealed)
            return sealed
        finally:
            self._release(lock)

    def _refuse_moved_head(self, change: jr.Change) -> str | None:
        head = self.head(change.run_id, change.namespace)
        if head != change.expected_head:
            raise ConflictError(self.moved_message(change, head))
        return head

    def moved_message(self, change: jr.Change, head: str | None) -> str:
        return (f"the head of run {change.run_id!r} moved: expected {change.expected_head}, found {head}; "
                "nothing was written — re-plan and try again")

    def _commit_locked(self, change: jr.Change, lock: dict[str, Any]) -> dict[str, Any]:
        head = self._refuse_moved_head(change)
        seq, prev = jr.tip(self.journal_entries())
        prepared = self.prepare(change, head)
        entry = {**change.entry, "new_head": prepared.new_head}
        if prepared.note:
            entry["note"] = {**dict(change.entry.get("note") or {}), **prepared.note}
        sealed = jr.seal(entry, seq, prev)
        if prepared.work is None:
            self._write_entry(sealed)  # marks only: the entry is the commit point
            return sealed
        intent = {**lock, **prepared.work, "entry": sealed}
        self._write_lock(intent)  # durable before the work: a crash or a failure is completable
        self._perform(intent, prepared.payload)
        try:
            self._write_entry(sealed)
        except ConflictError:
            raise
        except OSError as exc:
            self._mark_interrupted(intent, exc)
            raise Kept(ReaderError(
                f"the head of run {change.run_id!r} now names {prepared.new_head}, but its journal entry "
                f"could not be written ({exc.strerror or exc}); the action is kept as an interrupted intent "
                f"in {self.lock_file}: `lastgood journal` shows it, and the next action completes it once the "
                "journal is writable")) from exc
        return sealed

    def _perform(self, intent: dict[str, Any], payload: Any) -> None:
        """The work; when it fails part-way, the intent stays (marked failed) for the next action."""
        try:
            self.perform(intent, payload)
        except ConflictError:
            raise  # refused before anything of this action's took effect
        except BaseException as exc:
            if self._maybe_took_effect(intent):
                self._mark_interrupted(intent, exc, failed=True)
                raise Kept(exc) from exc
            raise

    def _maybe_took_effect(self, intent: Mapping[str, Any]) -> bool:
        try:
            return self.took_effect(intent)
        except (OSError, LastgoodError):
            return True  # cannot tell: keep the intent, the next action decides

    def _mark_interrupted(self, intent: Mapping[str, Any], exc: BaseException, failed: bool = False) -> None:
        """The intent says its owner gave up (so the next action resolves it at once); best effort:
        the intent as first written already holds the entry."""
        cause = str(getattr(exc, "strerror", None) or exc or type(exc).__name__)
        with contextlib.suppress(OSError):
            self._write_lock({**intent, "interrupted": True, **({"failed": True} if failed else {}), "cause": cause})

    def _entry_path(self, entry: Mapping[str, Any]) -> str:
        return self._path(f"{self.entries_dir}/{int(entry['seq']):010d}.json")

    def _write_entry(self, entry: Mapping[str, Any]) -> None:
        if not self._create(self._entry_path(entry), jr.canonical(entry)):
            raise ConflictError(f"journal entry {entry['seq']} was written by another action; "
                                "nothing was changed by this one")

    def _create(self, path: str, data: bytes) -> bool:
        return create_exclusive(self.fs, path, data)

    def _write_lock(self, value: Mapping[str, Any]) -> None:
        durable_write(self.fs, self._path(self.lock_file), jr.canonical(value))

    # ---- the lock -----------------------------------------------------------------------

    def _acquire(self, action_id: str, change: jr.Change | None = None) -> dict[str, Any]:
        if self.local_only and not self.local:
            raise ReaderError(self.local_only)
        lock = {"action_id": action_id, "pid": os.getpid(), "host": socket.gethostname(),
                "started": time.time(), **self.lock_extras(action_id, change)}
        for _attempt in range(2):
            if self._create_lock(lock):
                self._sweep_temp_files()
                try:
                    self.locked(lock)
                except BaseException:
                    self._release()  # what ``locked`` could not take it gives back itself
                    raise
                return lock
            existing = self._read_lock()
            if existing is None:
                continue  # released meanwhile
            if not is_stale(existing):
                raise ConflictError("another recovery action is in progress on this store "
                                    f"({existing.get('action_id')}); try again in a moment")
            self._resolve_stale(existing)
        raise ConflictError("could not take the store's journal lock; try again")

    def _create_lock(self, lock: Mapping[str, Any]) -> bool:
        try:
            return self._create(self._path(self.lock_file), jr.canonical(lock))
        except PermissionError as exc:
            raise ReaderError(f"the store is read-only here ({exc.strerror or exc}): cannot take its journal "
                              "lock; nothing was written") from None
        except OSError as exc:
            if exc.errno == errno.EROFS:
                raise ReaderError("the store is on a read-only filesystem: cannot take its journal lock; "
                                  "nothing was written") from None
            raise

    def _resolve_stale(self, lock: Mapping[str, Any]) -> None:
        """Finish an interrupted action whose work took effect (write its entry); drop it otherwise."""
        if self.resolve_other(lock):
            self._release(lock)
            return
        entry = lock.get("entry")
        if isinstance(entry, dict) and "seq" in entry and self.took_effect(lock):
            try:
                self.complete(lock)
                path = self._entry_path(entry)
                if not self.fs.exists(path):
                    self._create(path, jr.canonical(entry))
            except OSError as exc:
                raise ReaderError(
                    f"an interrupted action ({entry.get('id')}) changed run {entry.get('run_id')!r}, and its "
                    f"journal entry still cannot be written ({exc.strerror or exc}); nothing new was done") from None
        self._drop_stale(lock)

    def _drop_stale(self, lock: Mapping[str, Any]) -> None:
        """Remove a resolved stale lock, unless another process resolved it first and took the lock
        anew meanwhile (that one is not ours to remove)."""
        try:
            current = self._read_lock()
        except ReaderError:
            current = None
        if current is None or current == dict(lock):
            self._release(lock)
        else:
            self.unlocking(lock)

    def _release(self, lock: Mapping[str, Any] | None = None) -> None:
        if lock:
            self.unlocking(lock)
        with contextlib.suppress(FileNotFoundError):
            self.fs.rm_file(self._path(self.lock_file))

    def _sweep_temp_files(self) -> None:
        """Temp files a killed writer left (older than a stale lock: no live writer still renames them)."""
        if not self.local:
            return  # object stores write whole objects: no temp files
        cutoff = time.time() - STALE_LOCK_SECONDS
        folders = {posixpath.dirname(self.lock_file), self.entries_dir, *self.sweep_dirs}
        for folder in folders:
            sweep_temp_files(self._path(folder), cutoff)


class Kept(Exception):
    """An action whose work (some of it) took effect, kept as an interrupted intent."""

    def __init__(self, error: BaseException) -> None:
        super().__init__(str(error))
        self.error = error


@contextlib.contextmanager
def holding(journal: FileJournal, lock: Mapping[str, Any]) -> Iterator[None]:
    """``lock`` (taken with ``journal._acquire``) held for an action's work: released when the work
    ends, or fails before any of it took effect; when a :class:`Kept` says some did, the lock stays
    as the interrupted intent the next action rolls forward, and the kept error is raised."""
    try:
        yield
    except Kept as kept:
        raise kept.error from None
    except BaseException:
        journal._release(lock)
        raise
    journal._release(lock)


class MoveOps:
    """Idempotent move operations of an intent (what a prune and its undo do): ``apply`` renames
    unless the move took effect already, ``applied`` says whether it did. A local rename is atomic;
    on an object store every object is copied, then the sources deleted (an interrupted move is
    finished by copying what is missing)."""

    fs: Any
    local: bool
    _path: Callable[[str], str]  # the store path of a relative one (FileJournal's)

    def apply(self, op: Mapping[str, Any]) -> None:
        if op.get("op") != "move":
            raise ValueError(f"unknown journal operation {op.get('op')!r}")
        source, target = self._path(str(op["from"])), self._path(str(op["to"]))
        if self.fs.exists(source) and (not self.local or not self.fs.exists(target)):
            self._rename(source, target)

    def applied(self, op: Mapping[str, Any]) -> bool:
        return bool(self.fs.exists(self._path(str(op["to"])))) and not self.fs.exists(self._path(str(op["from"])))

    def ops_took_effect(self, intent: Mapping[str, Any]) -> bool:
        ops = intent.get("ops")
        if not isinstance(ops, list) or not all(isinstance(op, dict) for op in ops):
            return False
        return not ops or any(self.applied(op) for op in ops)

    def _rename(self, src: str, dst: str) -> None:
        if self.local:
            os.makedirs(posixpath.dirname(dst), exist_ok=True)
            os.rename(src, dst)
            sync_dir(posixpath.dirname(dst))
            sync_dir(posixpath.dirname(src))
            return
        fs = full_fs(self.fs)
        files = sorted(fs.find(src))
        done = set(fs.find(dst)) if fs.exists(dst) else set()
        for path in files:
            if dst + path[len(src):] not in done:
                fs.copy(path, dst + path[len(src):])
        fs.rm(files)


# ---- files ------------------------------------------------------------------------------


def read_entries(fs: Any, folder: str, root_real: str | None) -> list[dict[str, Any]]:
    """The entries of ``folder`` in sequence order. One that cannot be read (refused, gone, not
    JSON) stays in place, marked ``unreadable`` (the chain check reports it): it is never followed
    outside the store or waited on."""
    try:
        names = sorted(posixpath.basename(p) for p in fs.ls(folder, detail=False))
    except (FileNotFoundError, NotADirectoryError):
        return []
    paths = [f"{folder}/{n}" for n in names if n.endswith(".json") and not n.startswith(".")]
    if paths and not is_local(fs):
        return _remote_entries(fs, paths)
    return [_entry(fs, path, root_real) for path in paths]


def _entry(fs: Any, path: str, root_real: str | None) -> dict[str, Any]:
    try:
        entry = jr.parse_entry(read_bounded(fs, path, limits.MAX_SMALL_FILE_BYTES, root_real))
    except (OSError, *REFUSED) as exc:
        return {"id": None, "unreadable": posixpath.basename(path), "reason": str(exc) or type(exc).__name__}
    return entry if entry is not None else {"id": None, "unreadable": posixpath.basename(path)}


def _remote_entries(fs: Any, paths: list[str]) -> list[dict[str, Any]]:
    """An object store's entries in one batch (after their listed sizes: none read past the limit)."""
    sizes = _listed_sizes(fs, paths)
    wanted = [p for p in paths if (sizes.get(p) or 0) <= limits.MAX_SMALL_FILE_BYTES]
    blobs = full_fs(fs).cat(wanted, on_error="return") if wanted else {}
    out = []
    for path in paths:
        data = blobs.get(path)
        entry = jr.parse_entry(data) if isinstance(data, bytes) else None
        out.append(entry if entry is not None else {"id": None, "unreadable": posixpath.basename(path)})
    return out


def _listed_sizes(fs: Any, paths: list[str]) -> dict[str, int | None]:
    try:
        listed = fs.ls(posixpath.dirname(paths[0]), detail=True)
    except OSError:
        return {}
    return {str(i.get("name", "")).rstrip("/"): i.get("size") for i in listed}


def create_exclusive(fs: Any, path: str, data: bytes) -> bool:
    """Write ``path`` only if it does not exist; False when it does.

    Local: a synced temp file hard-linked into place (link fails on an existing name, atomically).
    Object stores: a conditional PUT (``mode="create"``: S3 ``If-None-Match: *``) where the backend
    has one; otherwise check, then one PUT (a race window, see docs/format.md)."""
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
        sync_dir(directory)


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


def durable_write(fs: Any, path: str, data: bytes) -> None:
    """Readers see the old file or the new one (a synced temp file renamed over it); locally the
    folder is synced too, so the rename survives a power cut."""
    atomic_write(fs, path, data)
    if is_local(fs):
        sync_dir(posixpath.dirname(path))


def sync_dir(directory: str) -> None:
    """fsync a local folder (a rename or link in it becomes durable)."""
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


def sweep_temp_files(folder: str, cutoff: float) -> None:
    """Remove ``.tmp-*`` files (not links, not folders) of a local ``folder`` last changed before ``cutoff``."""
    try:
        items = list(os.scandir(folder))
    except OSError:
        return
    for item in items:
        try:
            if item.name.startswith(".tmp-") and item.is_file(follow_symlinks=False) \
                    and item.stat(follow_symlinks=False).st_mtime < cutoff:
                os.unlink(item.path)
        except OSError:
            continue


def is_stale(lock: Mapping[str, Any]) -> bool:
    """A lock whose owner is gone: unreadable, given up (interrupted, failed), its process dead on
    this host, or older than :data:`STALE_LOCK_SECONDS`."""
    if lock.get("unreadable") or lock.get("interrupted") or lock.get("failed"):
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
