"""Reader of Hugging Face Trainer output folders (see the package docstring).

Listing reads folder listings and each checkpoint's ``trainer_state.json``, nothing else: a
record's step is N, its time the newest of its files' mtimes (the format records no time), its
trigger ``final`` / ``best`` / ``periodic`` (:func:`.trainer_state.trigger`), its metadata the
numbers logged at that step (loss, learning_rate, grad_norm, eval_*, epoch). A folder without
``trainer_state.json`` (Trainer writes it after the weights and the optimizer) is listed as
incomplete. The state of a checkpoint is a small summary: its files and sizes, the trainer
state without the history, its tensors' dtypes and shapes (from headers), ``config.json`` and
the fields of ``training_args.bin`` (its pickle walked with an allowlist, never loaded).
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from typing import Any

from lastgood.checks import Check
from lastgood.errors import DecodeError, ReaderError
from lastgood.readers.base import (
    CheckpointRecord,
    Finding,
    HeadRecord,
    MetricPoint,
    Scan,
    Status,
    backend_named,
)
from lastgood.readers.hf_trainer import layout
from lastgood.readers.hf_trainer import trainer_state as ts
from lastgood.readers.hf_trainer.layout import ARGS, STATE, Found, Run
from lastgood.readers.journal import RetentionBackend
from lastgood.readers.modelfiles.allow import TRAINER_ALLOW
from lastgood.readers.modelfiles.checks import Problem
from lastgood.readers.modelfiles.folderreader import TORCH_SUFFIXES, Parts, RunFolderReader
from lastgood.readers.modelfiles.fsio import DIR, FILE, Folder, as_datetime, join
from lastgood.readers.modelfiles.plaindata import plain
from lastgood.readers.modelfiles.threads import in_order
from lastgood.readers.modelfiles.weights import weights_named
from lastgood.readers.tensors.errors import TensorsError, UnsafeGlobal

MAX_STATE_BYTES = 256 * 1024 * 1024
SNIFF_FOLDERS = 50
STATE_CACHE = 100_000
TOKEN_VERSION = 1
ADAPTER_CONFIG = "adapter_config.json"  # a PEFT model's checkpoint
WEIGHT_PREFIXES = ("pytorch_model", "adapter_model", "model-", "model.")


class HfTrainerReader(RunFolderReader[Run]):
    name = "hf-trainer"
    description = ("Hugging Face Trainer output folders: checkpoint-N/ with safetensors or torch weights, "
                   "trainer_state.json, optimizer and RNG state (any fsspec URL)")
    allow = TRAINER_ALLOW
    recovery_target = "lastgood.readers.hf_trainer.recovery:TrainerRecovery"
    token_version = TOKEN_VERSION

    def __init__(self, url: str, storage_options: Mapping[str, Any] | None = None) -> None:
        super().__init__(url, storage_options)
        self._states: dict[tuple[str, int, float], Any] = {}  # light states (last step's log only)

    @staticmethod
    def sniff_folder(folder: Folder) -> bool:
        """A folder (or one of its subfolders) with ``checkpoint-N/`` folders, one of which holds
        ``trainer_state.json`` or ``training_args.bin``."""
        return _sniff(folder)

    def retention(self) -> RetentionBackend:
        """Prune: checkpoint folders moved by rename into ``.lastgood/archive/`` (:mod:`.retention`)."""
        return backend_named("lastgood.readers.hf_trainer.retention:TrainerRetention", self)  # type: ignore[return-value]

    # ---- listing --------------------------------------------------------------------

    def list_runs(self) -> list[Run]:
        return layout.list_runs(self.folder)

    def scan(self, since: str | None = None) -> Scan:
        runs = self.runs(fresh=True)
        bests = {run_id: self._best(run) for run_id, run in runs.items()}
        listing = {run_id: {"stamps": {c.checkpoint_id: _stamp(c) for c in run.checkpoints},
                            "head": run.head.checkpoint_id if run.head else None, "best": bests[run_id]}
                   for run_id, run in runs.items()}
        token, previous, full = self.relisting(since, listing)
        if previous == listing:
            return self.empty_scan(token)
        records = [r for run_id, run in runs.items()
                   for r in self._records(run, bests[run_id], None if previous is None or full else previous.get(run_id))]
        heads = [HeadRecord(run_id, run.head.checkpoint_id) for run_id, run in runs.items() if run.head]
        return self.listed(token, full, records, self._listing_findings(runs), heads)

    def _records(self, run: Run, best: str | None, before: Mapping[str, Any] | None) -> list[CheckpointRecord]:
        parents = layout.parents(run)
        stamps = (before or {}).get("stamps") or {}
        touched = {before.get("best"), best} if before is not None and before.get("best") != best else set()
        listed = [c for c in run.checkpoints
                  if before is None or stamps.get(c.checkpoint_id) != _stamp(c) or c.checkpoint_id in touched]
        self._read_states(listed)
        return [self._record(run, c, parents.get(c.checkpoint_id), best) for c in listed]

    def _read_states(self, found: list[Found]) -> None:
        """The trainer states of ``found`` read ``read_threads()`` at a time (an object store: one
        request each, in flight together), kept for the records."""
        if self.read_threads() > 1:
            for _state in in_order(self._state_or_none, found, self.read_threads()):
                pass

    def _record(self, run: Run, c: Found, parent: str | None, best: str | None) -> CheckpointRecord:
        state = self._state_or_none(c)
        meta: dict[str, Any] = ts.metadata(state, c.step) if state is not None else {}
        if c.moved_by:
            meta["moved_by"] = c.moved_by
        if c.complete and state is None:
            meta["trainer_state"] = "unreadable"
        weights = weights_named(c.rel, c.entries)
        status, reason = (Status.OK, None) if c.complete else (
            Status.INCOMPLETE, f"no {STATE}: the save did not finish")
        return CheckpointRecord(
            run_id=run.run_id, checkpoint_id=c.checkpoint_id, parent_id=parent, step=c.step,
            created_at=as_datetime(c.mtime),
            trigger=ts.trigger(state, c.checkpoint_id == best) if state is not None else "periodic",
            status=status, status_reason=reason, size_bytes=c.size,
            codec=weights.kind if weights else None, location=c.rel, metadata=meta)

    def _best(self, run: Run) -> str | None:
        newest = self._newest_state(run)
        name = ts.best_name(newest) if newest is not None else None
        found = next((c for c in run.live if c.name == name), None)
        return found.checkpoint_id if found else None

    def _newest_state(self, run: Run) -> Mapping[str, Any] | None:
        for c in sorted(run.live, key=lambda c: -c.step):
            state = self._state_or_none(c)
            if state is not None:
                return state
        return None

    def _listing_findings(self, runs: Mapping[str, Run]) -> list[Finding]:
        return [Finding(Check.INCOMPLETE, "warning",
                        f"{rel}: a save in progress or interrupted (Trainer renames it checkpoint-N when done)",
                        run_id) for run_id, run in runs.items() for rel in run.in_flight]

    # ---- trainer_state.json ----------------------------------------------------------

    def _state(self, c: Found) -> Any:
        """The checkpoint's trainer state with only the last step's log entries (listing and
        structure checks: a long file is read at its two ends, :func:`.trainer_state.digest`)."""
        entry = c.entries.get(STATE)
        if entry is None:
            raise DecodeError(f"{c.rel}: no {STATE}: the save did not finish", Check.INCOMPLETE)
        key = (join(c.rel, STATE), entry.size, entry.mtime)
        value = self._states.get(key)
        if value is None:
            try:
                value = ts.last_step_only(self._read_state(key[0], entry.size, partial=True))
            except DecodeError as exc:
                value = exc
            if len(self._states) > STATE_CACHE:
                self._states.clear()
            self._states[key] = value
        if isinstance(value, DecodeError):
            raise value
        return value

    def full_state(self, c: Found) -> dict[str, Any]:
        """The whole trainer state, history included (parsed on each call: not kept)."""
        entry = c.entries.get(STATE)
        if entry is None:
            raise DecodeError(f"{c.rel}: no {STATE}: the save did not finish", Check.INCOMPLETE)
        return self._read_state(join(c.rel, STATE), entry.size, partial=False)

    def _read_state(self, rel: str, size: int, partial: bool) -> dict[str, Any]:
        try:
            if partial and size >= ts.PARTIAL_MIN_BYTES:
                with self.folder.open(rel, size) as f:
                    found = ts.digest(f.read, f.size)
                if found is not None:
                    return found
            value = json.loads(self.folder.read_small(rel, MAX_STATE_BYTES))
        except (ValueError, RecursionError) as exc:
            raise DecodeError(f"{rel} is not valid JSON: {exc}", Check.METADATA_INVALID) from exc
        except (OSError, ReaderError) as exc:
            raise DecodeError(f"{rel} cannot be read: {exc}") from exc
        if not isinstance(value, dict):
            raise DecodeError(f"{rel} is not a JSON object", Check.METADATA_INVALID)
        return value

    def _state_or_none(self, c: Found) -> Mapping[str, Any] | None:
        try:
            return self._state(c)
        except DecodeError:
            return None

    # ---- one checkpoint ----------------------------------------------------------------

    def found(self, record: CheckpointRecord) -> Found:
        """The checkpoint's folder: at its listed location, else wherever its id is now."""
        rel = record.location or ""
        if rel and self._present(rel):
            runs = self._runs or {}
            cached = runs.get(record.run_id)
            hit = cached.by_id(record.checkpoint_id) if cached else None
            if hit is not None and hit.rel == rel:
                return hit
            name = rel.rsplit("/", 1)[-1]
            match = layout.CHECKPOINT.match(name)
            if match:
                files = layout.files_of(self.folder, rel)
                return Found(name, int(match[1]), rel, None, files, record.checkpoint_id,
                             max((e.mtime for e in files.values()), default=0.0))
        run = self.runs(fresh=True).get(record.run_id)
        hit = run.by_id(record.checkpoint_id) if run else None
        if hit is None:
            raise DecodeError(f"checkpoint {record.checkpoint_id} of run {record.run_id} is no longer there",
                              Check.MISSING)
        return hit

    def _present(self, rel: str) -> bool:
        if self.folder.local:
            return os.path.isdir(self.folder.path(rel))
        entry = self.folder.entry(rel)
        return entry is not None and entry.kind == DIR

    def parts(self, record: CheckpointRecord) -> Parts:
        c = self.found(record)
        weights = weights_named(c.rel, c.entries)
        pickles = tuple(sorted(n for n in c.entries if n.endswith(TORCH_SUFFIXES)
                               and not n.startswith(WEIGHT_PREFIXES)))
        return Parts(c.rel, c.entries, weights, pickles, self.allow)

    def format_problems(self, record: CheckpointRecord, parts: Parts) -> list[Problem]:
        c = self.found(record)
        problems: list[Problem] = []
        try:
            state = self._state(c)
        except DecodeError as exc:
            head = self.runs().get(record.run_id)
            note = (": it is the newest checkpoint, resume_from_checkpoint=True would pick it"
                    if head is not None and head.head is not None and head.head.rel == c.rel else "")
            return [Problem(exc.check, "error", f"{exc}{note}")]
        if isinstance(state.get("global_step"), int) and state["global_step"] != c.step:
            problems.append(Problem(Check.METADATA_INVALID, "warning",
                                    f"{STATE} says global_step {state['global_step']}, the folder is {c.name}"))
        has_deepspeed = any("/" in n for n in parts.entries)
        if parts.weights is None and not has_deepspeed:
            problems.append(Problem(Check.BLOB_MISSING, "error",
                                    f"{c.rel}: no model weights (model.safetensors, its index, pytorch_model.bin…)"))
        return problems

    def format_data(self, record: CheckpointRecord, parts: Parts) -> list[Problem]:
        try:
            state = self.full_state(self.found(record))
        except DecodeError:
            return []
        match = layout.CHECKPOINT.match((record.parent_id or "").split(layout.GENERATION)[0])
        after = int(match[1]) if match else -1
        return ts.log_problems(state, after, record.step if record.step is not None else 0)

    def load_state(self, record: CheckpointRecord) -> Any:
        parts = self.parts(record)
        c = self.found(record)
        state = self.full_state(c)
        return {
            "files": {name: entry.size for name, entry in sorted(parts.entries.items())},
            "trainer_state": ts.summary(state, c.step),
            "tensors": self.tensor_shapes(parts),
            "config": self._json(parts, "config.json"),
            "training_args": self._training_args(parts),
            **({"adapter_config": self._json(parts, ADAPTER_CONFIG)} if ADAPTER_CONFIG in parts.entries else {}),
        }

    def _json(self, parts: Parts, name: str) -> Any:
        return self.json_file(parts.rel(name)) if name in parts.entries else None

    def _training_args(self, parts: Parts) -> Any:
        entry = parts.entries.get(ARGS)
        if entry is None or entry.kind != FILE or entry.size == 0:
            return None
        try:
            return plain(self.files.torch(parts.rel(ARGS)).root)
        except UnsafeGlobal as exc:
            return {"refused": exc.message}
        except (TensorsError, OSError, ReaderError) as exc:
            return {"not decoded": str(exc)}

    def read_blob(self, record: CheckpointRecord) -> bytes:
        c = self.found(record)
        if not c.complete:
            raise DecodeError(f"{c.rel}: no {STATE}", Check.INCOMPLETE)
        try:
            return self.folder.read_small(join(c.rel, STATE), MAX_STATE_BYTES)
        except (OSError, ReaderError) as exc:
            raise DecodeError(f"{c.rel}/{STATE} cannot be read: {exc}") from exc

    # ---- metrics capability --------------------------------------------------------------

    def metrics(self, run_id: str) -> list[MetricPoint]:
        """The full ``log_history`` of the run's newest complete checkpoint."""
        run = self.runs().get(run_id)
        for c in sorted(run.live if run is not None else [], key=lambda c: -c.step):
            try:
                return ts.metrics(self.full_state(c), run_id)
            except DecodeError:
                continue
        return []


def _stamp(c: Found) -> str:
    return f"{len(c.entries)}:{c.size}:{c.mtime:.6f}:{c.moved_by or ''}"


def _sniff(folder: Folder) -> bool:
    candidates = [""] + [name for name, e in sorted(folder.listdir("").items())
                         if e.kind == DIR and not name.startswith(".") and not layout.skip_dir(name)][:SNIFF_FOLDERS]
    for rel in candidates:
        entries = folder.listdir(rel)
        if not layout.is_run(entries):
            continue
        numbered = sorted(((int(m[1]), name) for name in entries if (m := layout.CHECKPOINT.match(name))),
                          reverse=True)
        for _step, name in numbered[:3]:
            inside = folder.listdir(join(rel, name))
            if STATE in inside or ARGS in inside:
                return True
    return False
