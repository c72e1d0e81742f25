"""Reader of Orbax ``CheckpointManager`` folders (``<step>/`` folders, :mod:`.structure`).

Model: run = the folder holding the step folders (several such folders: several runs); checkpoint
= one step folder (id = its name, step = its number, created_at = ``_CHECKPOINT_METADATA``'s commit
timestamp); head = what ``CheckpointManager(dir).latest_step()`` returns: the highest step folder
that is not an unfinished ``*.orbax-checkpoint-tmp*`` save. A step without ``commit_success.txt`` is
incomplete (latest_step() still trusts it: flagged); tmp folders are listed as incomplete
checkpoints. State = the JSON items as they are, the array trees' structure from ``_METADATA``
(type, shape) and ``_CHECKPOINT_METADATA``'s metrics and custom metadata; the array values are in
tensorstore's OCDBT format: **not decoded without tensorstore** (tensors are listed from the
metadata, with no offset; reading them raises saying so). Metrics = the JSON item ``metrics`` and
``_CHECKPOINT_METADATA.metrics`` per step.

Recovery: later step folders are moved aside into ``.lastgood/quarantine/<action>/`` (not a step to
Orbax), so ``latest_step()`` is the target; undo moves them back (:mod:`.recovery`).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

from lastgood.checks import Check
from lastgood.errors import DecodeError, ReaderError
from lastgood.readers.base import (CheckpointRecord, Finding, MetricPoint, Reader, Scan, Status, TensorEntry,
                                   TensorSummary, backend_named)
from lastgood.readers.orbax import structure as st
from lastgood.readers.training_folders.folder import Entry, Folder, as_datetime
from lastgood.readers.training_folders.journal import QUARANTINE
from lastgood.readers.training_folders.listing import scan_folders
from lastgood.readers.training_folders.moves import StepFolder, assign_ids, current_location, split_quarantined

if TYPE_CHECKING:
    from lastgood.readers.journal import RecoveryBackend, RetentionBackend

STEP = re.compile(r"^(?:.*_)?(\d+)(\.orbax-checkpoint-tmp.*)?$")
RUN_DEPTH = 2  # step folders at the root or one folder down
STEP_DEPTH = 5  # files inside a step folder: state/ocdbt.process_0/d/<hex>


class OrbaxReader(Reader):
    name = "orbax"
    ids_per_run = True  # step folders and file names repeat across runs
    description = "Orbax CheckpointManager folders (step folders, OCDBT arrays listed from their metadata)"

    def __init__(self, url: str, storage_options: Mapping[str, Any] | None = None) -> None:
        super().__init__(url, storage_options)
        self.folder = Folder(url, storage_options)

    @classmethod
    def sniff(cls, url: str, storage_options: Mapping[str, Any] | None = None) -> bool:
        try:
            folder = Folder(url, storage_options)
            entries = folder.walk(max_depth=RUN_DEPTH + 1, limit=5000)
        except Exception:  # noqa: BLE001 - "not mine", whatever the reason
            return False
        return any(e.name == st.CHECKPOINT_METADATA and e.kind == "file" and STEP.match(posixpath_name(e.parent))
                   or (e.kind == "dir" and st.TMP_MARK in e.name and STEP.match(e.name)) for e in entries)

    def recovery(self) -> RecoveryBackend:
        return backend_named("lastgood.readers.orbax.recovery:OrbaxRecovery", self)

    def retention(self) -> RetentionBackend:
        """Prune: step folders moved by rename into ``.lastgood/archive/`` (:mod:`.retention`)."""
        return backend_named("lastgood.readers.orbax.retention:OrbaxRetention", self)  # type: ignore[return-value]

    # ---- the layout ------------------------------------------------------------------------

    def _root_name(self) -> str:
        return self.folder.root.rstrip("/").rsplit("/", 1)[-1] or "orbax"

    def _walk(self) -> list[Entry]:
        entries = self.folder.walk(max_depth=RUN_DEPTH + STEP_DEPTH)
        return entries + self.folder.walk(QUARANTINE, max_depth=RUN_DEPTH + STEP_DEPTH + 1)

    def _layout(self) -> tuple[list[StepFolder], dict[str, list[Entry]]]:
        """Every step folder (in place or moved aside) and every file under each."""
        entries = self._walk()
        found = {e.rel for e in entries if e.kind == "dir" and self._is_step(e, entries)}
        # a folder inside a step folder is an item, whatever its name
        steps: dict[str, list[Entry]] = {rel: [] for rel in found if not any(p in found for p in _parents(rel))}
        for entry in entries:
            for parent in _parents(entry.rel):
                if parent in steps:
                    steps[parent].append(entry)
                    break
        return assign_ids(self._step_folder(rel, files) for rel, files in steps.items()), steps

    def _is_step(self, entry: Entry, entries: list[Entry]) -> bool:
        if not STEP.match(entry.name):
            return False
        moved = split_quarantined(entry.rel)
        home = moved[1] if moved else entry.rel
        if home.count("/") >= RUN_DEPTH or entry.rel.startswith(QUARANTINE + "/") and moved is None:
            return False
        prefix = entry.rel + "/"
        return st.TMP_MARK in entry.name or any(e.rel.startswith(prefix) for e in entries)

    def _step_folder(self, rel: str, files: list[Entry]) -> StepFolder:
        moved = split_quarantined(rel)
        action, home = moved if moved else (None, rel)
        parent, _, name = home.rpartition("/")
        number = int(STEP.match(name).group(1))  # type: ignore[union-attr]
        tmp = st.TMP_MARK in name
        own = {e.name for e in files if e.parent == rel}
        when = self._committed_at(rel, own) or max((e.mtime or 0.0 for e in files), default=0.0)
        return StepFolder(parent or self._root_name(), name, rel, home, (number, when, name), action,
                          complete=not tmp and st.COMMIT in own, seen=not tmp)

    def _committed_at(self, rel: str, own: set[str]) -> float | None:
        if st.CHECKPOINT_METADATA not in own:
            return None
        meta, _ = st.read_json(self.folder, f"{rel}/{st.CHECKPOINT_METADATA}")
        if not isinstance(meta, dict):
            return None
        for key in ("commit_timestamp_nsecs", "init_timestamp_nsecs"):
            value = meta.get(key)
            if type(value) is int and value > 0:
                return value / 1e9
        return None

    def step_folders(self) -> list[StepFolder]:
        return self._layout()[0]

    def record_of(self, folder: StepFolder, files: list[Entry] | None = None, parent: str | None = None
                  ) -> CheckpointRecord:
        files = files or []
        _own, items = st.items_of(files, folder.rel)
        meta: dict[str, Any] = {"items": sorted(items)} if items else {}
        if folder.action:
            meta["moved_aside_by"] = folder.action
        reason = None
        if not folder.seen:
            reason = "an unfinished save (.orbax-checkpoint-tmp): Orbax ignores it"
        elif not folder.complete:
            reason = f"no {st.COMMIT}: the commit was never confirmed (Orbax's latest_step() still picks it)"
        return CheckpointRecord(
            run_id=folder.run_id, checkpoint_id=folder.checkpoint_id, parent_id=parent, step=folder.key[0],
            created_at=as_datetime(folder.key[1] or None), trigger="save",
            status=Status.INCOMPLETE if reason else Status.OK, status_reason=reason,
            size_bytes=sum(e.size or 0 for e in files if e.kind == "file"), codec="orbax",
            location=folder.rel, metadata=meta)

    # ---- listing ---------------------------------------------------------------------------

    def scan(self, since: str | None = None) -> Scan:
        folders, files = self._layout()
        now = {e.rel: e.stamp for f in folders for e in files.get(f.rel, []) if e.kind != "dir"}
        # unfinished and uncommitted steps are listed incomplete (never a parent); their checks say why
        return scan_folders(self.name, since, folders, files, now,
                            lambda folder, parent: self.record_of(folder, files.get(folder.rel), parent))

    # ---- one checkpoint --------------------------------------------------------------------

    def _files(self, record: CheckpointRecord) -> tuple[list[Entry], dict[str, st.Item]]:
        rel = current_location(self, record)
        if self.folder.entry(rel) is None:
            raise DecodeError(f"the step folder {rel} is gone", Check.MISSING)
        return st.items_of(self.folder.walk(rel, max_depth=STEP_DEPTH), rel)

    def load_state(self, record: CheckpointRecord) -> Any:
        rel = current_location(self, record)
        own, items = self._files(record)
        state: dict[str, Any] = {}
        if any(e.rel == st.CHECKPOINT_METADATA for e in own):
            meta, problem = st.read_json(self.folder, f"{rel}/{st.CHECKPOINT_METADATA}")
            if problem:
                raise DecodeError(problem.message, problem.check)
            if isinstance(meta, dict):
                state["checkpoint"] = {k: meta.get(k) for k in ("metrics", "custom_metadata") if k in meta}
        state["items"] = {name: self._item_state(f"{rel}/{name}", item) for name, item in sorted(items.items())}
        return state

    def _item_state(self, item_rel: str, item: st.Item) -> Any:
        if item.has(st.TREE_METADATA):
            metadata, problem = st.read_json(self.folder, f"{item_rel}/{st.TREE_METADATA}")
            if problem:
                raise DecodeError(problem.message, problem.check)
            return {"tree": st.nest(st.tree_leaves(metadata)), "$values": st.NOT_DECODED}
        if item.has(item.name):
            value, problem = st.read_json(self.folder, f"{item_rel}/{item.name}")
            if problem:
                raise DecodeError(problem.message, problem.check)
            return value
        return {"$not_shown": "an item of a kind Lastgood does not read"}

    def read_blob(self, record: CheckpointRecord) -> bytes:
        rel = f"{current_location(self, record)}/{st.CHECKPOINT_METADATA}"
        try:
            return self.folder.read_small(rel)
        except (OSError, ReaderError) as exc:
            raise DecodeError(f"{rel}: {exc}", Check.MISSING if isinstance(exc, FileNotFoundError)
                              else Check.UNDECODABLE) from None

    # ---- capability: checks ----------------------------------------------------------------

    def check_checkpoints(self, records: Iterable[CheckpointRecord], read_data: bool = False
                          ) -> Iterator[Finding | TensorSummary]:
        for record in records:
            try:
                own, items = self._files(record)
            except DecodeError as exc:
                yield Finding(exc.check, "error", str(exc), record.run_id, record.namespace, record.checkpoint_id)
                continue
            for problem in st.step_problems(self.folder, current_location(self, record), own, items, read_data):
                yield Finding(problem.check, problem.severity, problem.message,  # type: ignore[arg-type]
                              record.run_id, record.namespace, record.checkpoint_id)

    # ---- capability: tensors ---------------------------------------------------------------

    def tensors(self, record: CheckpointRecord) -> list[TensorEntry]:
        """Every array leaf, from ``_METADATA`` (no offset: the values are in OCDBT)."""
        rel = current_location(self, record)
        _own, items = self._files(record)
        out = []
        for name, item in sorted(items.items()):
            if not item.has(st.TREE_METADATA):
                continue
            metadata, problem = st.read_json(self.folder, f"{rel}/{name}/{st.TREE_METADATA}")
            if problem:
                raise DecodeError(problem.message, problem.check)
            for keys, value in st.tree_leaves(metadata):
                shape = value.get("write_shape")
                out.append(TensorEntry(".".join(keys), str(value.get("dtype") or "unknown"),
                                       tuple(shape) if isinstance(shape, list) else (), 0, f"{rel}/{name}", None))
        return out

    def read_tensor(self, record: CheckpointRecord, entry: TensorEntry, chunk_bytes: int
                    ) -> Iterator[bytes | memoryview]:
        raise DecodeError(f"{entry.name}: {st.NOT_DECODED}", Check.UNDECODABLE)

    # ---- capability: metrics ---------------------------------------------------------------

    def metrics(self, run_id: str) -> list[MetricPoint]:
        """The JSON item ``metrics`` of each step, and ``_CHECKPOINT_METADATA.metrics``."""
        folders, files = self._layout()
        points: dict[tuple[int, str], MetricPoint] = {}
        for folder in folders:
            if folder.run_id != run_id or not folder.visible or not folder.seen:
                continue
            record = self.record_of(folder, files.get(folder.rel))
            try:
                state = self.load_state(record)
            except DecodeError:
                continue
            sources = [state.get("checkpoint", {}).get("metrics"), state.get("items", {}).get("metrics")]
            for source in sources:
                for name, value in (source or {}).items() if isinstance(source, dict) else []:
                    if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
                        points[(folder.key[0], name)] = MetricPoint(folder.key[0], str(name), float(value), run_id,
                                                                    record.created_at)
        return sorted(points.values(), key=lambda p: (p.step, p.name))


def posixpath_name(rel: str) -> str:
    return rel.rsplit("/", 1)[-1]


def _parents(rel: str) -> Iterator[str]:
    """``a/b/c`` → ``a/b``, ``a`` (nearest first)."""
    while "/" in rel:
        rel = rel.rsplit("/", 1)[0]
        yield rel


