"""Write capability of a pydantic-graph run folder: rewrite one run file so the run resumes at a target.

pydantic-graph resumes a run with ``iter_from_persistence``, whose ``load_next`` starts at the
*first* snapshot with status ``created``; its own way back is ``snapshot_node(state, node)``,
which appends one. So restore X = the run file with, appended, a new ``created`` node snapshot
of X's node with X's state (``NodeSnapshot`` field order, a fresh ``<node_id>:<uuid hex>`` id, no
``start_ts``/``duration``) — exactly what ``snapshot_node`` writes — and any earlier ``created``
snapshot set to ``pending`` (the status ``load_next`` gives the one it hands out), so the restored
one is what resumes. An end snapshot cannot be resumed and is refused as a target. A file cut
short is rewritten from the snapshots before the damage (the archive keeps it as it was).

Undo of an action that rewrote the file restores the archived file byte for byte (when the file
is still the one the action wrote; otherwise it is a conflict). Files (see :mod:`.layout`; the
journal, its intent lock and the commit are :mod:`lastgood.readers.common.filejournal`'s):

1. create ``.lastgood/journal/lock.json`` exclusively (a synced temp file hard-linked into place),
   then pydantic-graph's own ``<run>.json.pydantic-graph-persistence-lock`` the same way, so a
   running graph waits (its lock times out after 1 s; an action holds it for milliseconds);
2. re-read the head; if it is not the expected one: ``ConflictError``, nothing written;
3. write the archive ``.lastgood/archive/<run file>/<action id>.json`` (temp + fsync + rename);
4. replace the lock with the intent: the sealed journal entry and the file's sha256 before/after;
5. replace the run file (temp + fsync + rename + folder fsync) — **the commit point**;
6. write ``.lastgood/journal/entries/<seq>.json`` (exclusive create) — the commit point of a
   marks-only action;
7. remove both locks.

A kill at any moment leaves the old file or the new one. A lock left by a dead process is resolved
by the next action: if the run file is the intent's "after", its journal entry is written;
otherwise the action is dropped; pydantic-graph's lock is removed when it is the one it took.
"""

from __future__ import annotations

import json
import os
import secrets
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from lastgood import limits
from lastgood.errors import CheckpointNotFound, ConflictError, LastgoodError, UsageError
from lastgood.readers import journal as jr
from lastgood.readers.common.filejournal import FileJournal, Prepared, create_exclusive, durable_write
from lastgood.readers.common.fsutil import LocalFS, read_bounded
from lastgood.readers.pydantic_graph import layout
from lastgood.readers.pydantic_graph import runfile as rf
from lastgood.readers.pydantic_graph.reader import local_root


class PydanticGraphRecovery(FileJournal):
    """``RecoveryBackend`` for a folder of ``FileStatePersistence`` run files; the journal, its
    intent lock and the commit are :mod:`lastgood.readers.common.filejournal`'s."""

    entries_dir = layout.ENTRIES
    lock_file = layout.LOCK
    sweep_dirs = (".",)  # a run file's temp file, beside it

    def __init__(self, url: str, storage_options: Mapping[str, Any] | None = None) -> None:
        root = local_root(url)
        if root is None:
            raise UsageError(f"{url}: pydantic-graph run folders are written on local paths only")
        self.url, self.folder = url, root
        self.open_journal(LocalFS(), str(root))

    # ---- reading ----------------------------------------------------------------------

    def _read(self, run_id: str) -> tuple[Path, bytes, rf.RunFile]:
        path = self.folder / f"{run_id}.json"
        if "/" in run_id or run_id.startswith(".") or not path.is_file() or path.is_symlink():
            raise CheckpointNotFound(f"no run file {run_id}.json in {self.folder}")
        data = self._bytes(path)
        return path, data, rf.read_run(path.name, data)

    def _bytes(self, path: Path) -> bytes:
        """A run file (or an archive) of the folder: links out of it refused, size bounded."""
        return read_bounded(LocalFS(), str(path), limits.MAX_CATALOG_FILE_BYTES, os.path.realpath(self.folder))

    def head(self, run_id: str, namespace: str = "") -> str | None:
        try:
            _path, _data, run = self._read(run_id)
        except CheckpointNotFound:
            return None
        index = rf.head_index(run.snapshots)
        return None if index is None else run.snapshots[index].cid

    # ---- writing: the run file rewritten ----------------------------------------------------

    def prepare(self, change: jr.Change, head: str | None) -> Prepared:
        """The new file (handed to ``perform``) and, written first, the archive of the old one."""
        if not change.restore_from:
            return Prepared(head)
        path, before, run = self._read(change.run_id)
        after, new_head, how = self._rewrite(change, before, run)
        archive = layout.archive_path(self.folder, path.name, str(change.entry.get("id")))
        note = {**how, "file": path.name, "archive": str(archive.relative_to(self.folder)),
                "sha256_before": layout.sha256(before), "sha256_after": layout.sha256(after)}
        durable_write(self.fs, str(archive), before)
        return Prepared(new_head, work={}, note=note, payload=after)

    def perform(self, intent: Mapping[str, Any], payload: Any) -> None:
        """Replace the run file (temp + fsync + rename + folder fsync): the commit point."""
        durable_write(self.fs, str(self.folder / str(intent["entry"]["note"]["file"])), payload)

    def took_effect(self, intent: Mapping[str, Any]) -> bool:
        """The run file is the intent's "after"."""
        entry = intent.get("entry") if isinstance(intent.get("entry"), dict) else {}
        note = entry.get("note") if isinstance(entry.get("note"), dict) else {}
        if not note.get("file"):
            return False  # marks only: the journal entry is the commit point
        try:
            data = self._bytes(self.folder / str(note["file"]))
        except (OSError, LastgoodError):
            return False
        return layout.sha256(data) == note.get("sha256_after")

    def _rewrite(self, change: jr.Change, before: bytes, run: rf.RunFile) -> tuple[bytes, str, dict[str, Any]]:
        """The new file, the new head and what the journal notes about it."""
        undone = self._undone(change)
        if undone is not None:
            note = undone.get("note") if isinstance(undone.get("note"), dict) else {}
            if note.get("sha256_after") != layout.sha256(before):
                raise ConflictError(f"run file {run.name} changed since {undone.get('id')} wrote it; nothing "
                                    "was written — restore the checkpoint you want instead")
            archived = self._bytes(self.folder / str(note.get("archive")))
            if layout.sha256(archived) != note.get("sha256_before"):
                raise ConflictError(f"the archive of {undone.get('id')} does not hold the file it replaced")
            return archived, str(change.restore_from), {"file_restored_from": note.get("archive")}
        target = run.by_id(str(change.restore_from))
        if target is None:
            raise CheckpointNotFound(f"snapshot {change.restore_from} is not in {run.name}")
        if target.kind != "node" or target.node_id is None or target.broken:
            raise UsageError(f"{change.restore_from} is {'an end snapshot' if target.kind == 'end' else 'damaged'}: "
                             "pydantic-graph resumes only at a node snapshot (iter_from_persistence); "
                             "restore the node snapshot before it")
        snapshots, pending = [s.value for s in run.snapshots], []
        for snap, value in zip(run.snapshots, snapshots):
            if snap.kind == "node" and snap.status == "created":
                value["status"] = "pending"
                pending.append(snap.cid)
        new_id = f"{target.node_id}:{uuid.uuid4().hex}"  # pydantic_graph.basenode.generate_snapshot_id
        snapshots.append(new_snapshot(target.value, new_id))
        how: dict[str, Any] = {"appended": new_id}
        if pending:
            how["set_pending"] = pending
        if run.damage:
            how["salvaged"] = f"the file did not parse ({run.damage}): rewritten from its first " \
                              f"{len(run.snapshots)} snapshots"
        return dump(snapshots), new_id, how

    def _undone(self, change: jr.Change) -> dict[str, Any] | None:
        """The action an undo reverses, when that action rewrote this run's file."""
        if change.entry.get("action") != "undo" or not change.entry.get("undo_of"):
            return None
        for entry in self.journal_entries():
            if entry.get("id") == change.entry.get("undo_of"):
                note = entry.get("note") if isinstance(entry.get("note"), dict) else {}
                if note.get("archive") and entry.get("run_id") == change.run_id:
                    return entry
        return None

    def resolve_other(self, lock: Mapping[str, Any]) -> bool:
        """An interrupted prune or its undo: finished (:mod:`lastgood.readers.common.session_retention_files`)."""
        from lastgood.readers.common.session_retention_files import resolve_retention

        return resolve_retention(self, lock)

    # ---- pydantic-graph's own lock, held with Lastgood's ------------------------------------

    def lock_extras(self, action_id: str, change: jr.Change | None) -> dict[str, Any]:
        """Noted in the lock before it is taken, so a stale one can be recognised."""
        if change is None or not change.restore_from:
            return {}
        return {"pg_lock": {"path": f"{change.run_id}.json{layout.PG_LOCK_SUFFIX}", "token": secrets.token_urlsafe()}}

    def locked(self, lock: Mapping[str, Any]) -> None:
        """pydantic-graph's lock: the file exists while one of its operations runs (a running graph
        waits; its lock times out after 1 s, an action holds it for milliseconds)."""
        pg = lock.get("pg_lock")
        if isinstance(pg, dict) and not create_exclusive(self.fs, str(self.folder / pg["path"]),
                                                         pg["token"].encode() + b"\n"):
            raise ConflictError(f"pydantic-graph is writing this run (its lock file {pg['path']} exists; "
                                "remove it if no graph run is alive); nothing was written")

    def unlocking(self, lock: Mapping[str, Any]) -> None:
        """pydantic-graph's lock, when it is the one ``lock`` took."""
        pg = lock.get("pg_lock")
        if not isinstance(pg, dict):
            return
        path = self.folder / str(pg.get("path"))
        data = layout.read_small(path)
        if data and data.startswith(str(pg.get("token")).encode()):
            try:
                path.unlink()
            except FileNotFoundError:
                pass

    # ---- checks -----------------------------------------------------------------------

    def check_head(self, run_id: str, namespace: str, target_id: str, expected_state: Any) -> jr.HeadCheck:
        """Read the run back as pydantic-graph would: every snapshot of a shape its ``TypeAdapter``
        accepts, and what ``load_next`` hands out (the first ``created`` snapshot) holding the
        target's node and state."""
        try:
            _path, _data, run = self._read(run_id)
        except (CheckpointNotFound, OSError) as exc:
            return jr.HeadCheck(False, f"the run file cannot be read back: {exc}")
        broken = run.damage or next((f"{s.cid}: {s.broken}" for s in run.snapshots if s.broken), None)
        if broken:
            return jr.HeadCheck(False, f"FileStatePersistence cannot load the file: {broken}")
        resume = rf.resume_index(run.snapshots)
        head = rf.head_index(run.snapshots)
        snap = run.snapshots[head] if head is not None else None
        if snap is None:
            return jr.HeadCheck(False, "the run file has no snapshots")
        if expected_state is not None and rf.state_of(snap) != expected_state:
            return jr.HeadCheck(False, f"the run resumes from {snap.cid}, whose node and state are not the target's")
        if resume is None:
            return jr.HeadCheck(snap.cid == target_id, f"no created snapshot: the run's last snapshot is "
                                f"{snap.cid} (iter_from_persistence has nothing to resume, as before)")
        return jr.HeadCheck(True, f"FileStatePersistence.load_next would start at {snap.cid} ({snap.node_id}) "
                                  "with the target's node and state")

    def side_effects(self, run_id: str, namespace: str, after: Sequence[str]) -> list[dict[str, Any]]:
        return []  # run files record no tool calls; events come from the index


# ---- the file format ------------------------------------------------------------------------


def new_snapshot(target: Mapping[str, Any], snapshot_id: str) -> dict[str, Any]:
    """``NodeSnapshot(state=…, node=…)`` as ``snapshot_node`` appends it (its fields in order)."""
    return {"state": json.loads(json.dumps(target.get("state"))), "node": json.loads(json.dumps(target.get("node"))),
            "start_ts": None, "duration": None, "status": "created", "kind": "node", "id": snapshot_id}


def dump(snapshots: list[Any]) -> bytes:
    """The array as ``TypeAdapter(list[Snapshot]).dump_json(indent=2)`` writes it (same bytes for
    the files pydantic-graph 1.107 wrote: two-space indent, UTF-8 unescaped)."""
    return json.dumps(snapshots, indent=2, ensure_ascii=False).encode()
