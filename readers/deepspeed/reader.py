"""Reader of DeepSpeed save folders (see the package docstring).

Listing reads folder listings and the ``latest`` pointer only: a tag's step is N of
``global_stepN`` (none for a custom tag), its time the newest of its files' mtimes, its status
incomplete without a model-states file. Structure checks walk the model-states pickle (allowlist:
torch's, plus DeepSpeed's plain-data classes — :mod:`lastgood.readers.modelfiles.allow`) and
check that every data-parallel rank's optimizer file is there; the optimizer files' pickles are
checked for their globals. The tensors are the ``module`` state dict of the model states (names as
the model's own ``state_dict()``; another tensor-parallel rank's as ``mp_rank_01:name``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from lastgood.checks import Check
from lastgood.errors import DecodeError, ReaderError
from lastgood.readers.base import (
    CheckpointRecord,
    Finding,
    HeadRecord,
    Scan,
    Status,
    TensorEntry,
    backend_named,
)
from lastgood.readers.deepspeed import layout
from lastgood.readers.deepspeed.layout import Run, Tag
from lastgood.readers.journal import RetentionBackend
from lastgood.readers.modelfiles.allow import DEEPSPEED_ALLOW
from lastgood.readers.modelfiles.checks import Problem
from lastgood.readers.modelfiles.folderreader import Parts, RunFolderReader
from lastgood.readers.modelfiles.fsio import DIR, Folder, as_datetime, join
from lastgood.readers.modelfiles.plaindata import plain
from lastgood.readers.modelfiles.weights import TORCH, Weights, reason
from lastgood.readers.tensors.errors import TensorsError, UnsafeGlobal

TOKEN_VERSION = 1
MODULE = "module."
MAX_LISTED_NAMES = 50
SNIFF_FOLDERS = 50


class DeepSpeedReader(RunFolderReader[Run]):
    name = "deepspeed"
    description = ("DeepSpeed save folders: latest + global_stepN/ with mp_rank_*_model_states.pt and ZeRO "
                   "optimizer files (any fsspec URL)")
    allow = DEEPSPEED_ALLOW
    recovery_target = "lastgood.readers.deepspeed.recovery:DeepSpeedRecovery"
    token_version = TOKEN_VERSION

    @staticmethod
    def sniff_folder(folder: Folder) -> bool:
        """A folder (or a subfolder) with a tag folder holding ``*_model_states.pt`` or
        ``*_optim_states.pt`` files."""
        return _sniff(folder)

    def retention(self) -> RetentionBackend:
        """Prune: ``global_stepN/`` tag folders moved by rename into ``.lastgood/archive/`` (:mod:`.retention`)."""
        return backend_named("lastgood.readers.deepspeed.retention:DeepSpeedRetention", self)  # type: ignore[return-value]

    # ---- listing ------------------------------------------------------------------------

    def list_runs(self) -> list[Run]:
        return layout.list_runs(self.folder)

    def scan(self, since: str | None = None) -> Scan:
        runs = self.runs(fresh=True)
        listing = {run_id: {"stamps": {t.name: _stamp(t) for t in run.tags}, "latest": run.latest}
                   for run_id, run in runs.items()}
        token, previous, full = self.relisting(since, listing)
        if previous == listing:
            return self.empty_scan(token)
        records = []
        for run_id, run in runs.items():
            before = None if previous is None or full else (previous.get(run_id) or {}).get("stamps") or {}
            parent = None
            for tag in run.tags:
                if before is None or before.get(tag.name) != _stamp(tag):
                    records.append(self._record(run, tag, parent))
                parent = tag.name
        heads = [HeadRecord(run_id, run.head.name) for run_id, run in runs.items() if run.head is not None]
        return self.listed(token, full, records, self._pointer_findings(runs), heads)

    def _record(self, run: Run, tag: Tag, parent: str | None) -> CheckpointRecord:
        status, reason_ = (Status.OK, None) if tag.complete else (
            Status.INCOMPLETE, "no mp_rank_*_model_states.pt: the save did not finish")
        meta: dict[str, Any] = {"files": len(tag.entries), "optimizer_files": len(tag.optim_files)}
        if tag.name == run.latest:
            meta["latest"] = True
        return CheckpointRecord(
            run_id=run.run_id, checkpoint_id=tag.name, parent_id=parent, step=tag.step,
            created_at=as_datetime(tag.mtime), trigger="periodic" if tag.step is not None else "manual",
            status=status, status_reason=reason_, size_bytes=tag.size, codec="torch", location=tag.rel,
            metadata=meta)

    def _pointer_findings(self, runs: Mapping[str, Run]) -> list[Finding]:
        findings = []
        for run_id, run in runs.items():
            where = join(run.rel, layout.LATEST)
            if run.latest is not None and run.head is None:
                findings.append(Finding(Check.POINTER_DANGLING, "error",
                                        f"{where} names tag {run.latest!r}, which is not in the folder: "
                                        "load_checkpoint(tag=None) would fail", run_id))
            elif run.latest is None and run.tags:
                findings.append(Finding(Check.POINTER_DANGLING, "warning",
                                        f"no {where}: load_checkpoint(tag=None) resumes from nothing "
                                        "(it warns and returns None)", run_id))
        return findings

    # ---- one checkpoint ---------------------------------------------------------------

    def tag(self, record: CheckpointRecord) -> tuple[Run, Tag]:
        for fresh in (False, True):
            run = self.runs(fresh=fresh).get(record.run_id)
            tag = run.tag(record.checkpoint_id) if run is not None else None
            if run is not None and tag is not None and (tag.rel == record.location or fresh):
                return run, tag
        raise DecodeError(f"tag {record.checkpoint_id} of {record.run_id} is no longer there", Check.MISSING)

    def parts(self, record: CheckpointRecord) -> Parts:
        _run, tag = self.tag(record)
        models = tag.model_files
        weights = Weights(tag.rel, models[0], TORCH, False) if models else None
        pickles = tuple(n for n in tag.entries if n.endswith(".pt") and n not in models)
        return Parts(tag.rel, tag.entries, weights, pickles, self.allow)

    def model_tensors(self, parts: Parts) -> list[TensorEntry]:
        out: list[TensorEntry] = []
        for name in sorted(n for n in parts.entries if layout.MODEL_STATES.match(n)):
            rank = int(layout.MODEL_STATES.match(name)[2])
            rel = parts.rel(name)
            try:
                listed = self.files.file_tensors(TORCH, rel)
            except (TensorsError, OSError, ReaderError) as exc:
                raise DecodeError(f"{rel}: {reason(exc)}") from exc
            prefix = "" if rank == 0 else f"mp_rank_{rank:02d}:"
            out += [TensorEntry(prefix + t.name[len(MODULE):], t.dtype, t.shape, t.nbytes, t.file, t.offset)
                    for t in listed if t.name.startswith(MODULE)]
        return out

    def torch_name(self, entry: TensorEntry) -> str:
        return MODULE + entry.name.split(":", 1)[-1]

    def format_problems(self, record: CheckpointRecord, parts: Parts) -> list[Problem]:
        run, tag = self.tag(record)
        problems: list[Problem] = []
        is_head = run.latest == tag.name
        if not tag.complete:
            note = f": {layout.LATEST} names it, load_checkpoint would fail" if is_head else ""
            return [Problem(Check.INCOMPLETE, "error",
                            f"{tag.rel}: no mp_rank_*_model_states.pt, the save did not finish{note}")]
        states = self._model_states(parts)
        if states is None:
            return problems
        missing = [n for n in self._expected_optim(states, tag) if n not in tag.entries]
        if missing:
            problems.append(Problem(Check.INCOMPLETE, "error",
                                    f"{tag.rel}: {len(missing)} optimizer file(s) missing, e.g. {missing[0]} "
                                    "(the save did not finish on every rank)"))
        return problems

    def _model_states(self, parts: Parts) -> Mapping[str, Any] | None:
        if parts.weights is None:
            return None
        try:
            root = self.files.torch(parts.weights.main_path).root
        except (TensorsError, OSError, ReaderError):
            return None  # reported by the weights check
        return root if isinstance(root, Mapping) else None

    def _expected_optim(self, states: Mapping[str, Any], tag: Tag) -> list[str]:
        config = states.get("ds_config")
        zero = config.get("zero_optimization") if isinstance(config, Mapping) else None
        stage = zero.get("stage") if isinstance(zero, Mapping) else None
        stage = stage if isinstance(stage, int) else 0
        if not stage and states.get("optimizer") is not None:
            return []  # no ZeRO: the optimizer is inside the model states
        dp, mp = states.get("dp_world_size"), states.get("mp_world_size")
        if not isinstance(dp, int) or not isinstance(mp, int) or dp < 1 or mp < 1 or dp * mp > 1_000_000:
            return []
        bf16 = any(n.startswith("bf16_") for n in tag.optim_files)
        return layout.expected_optim_files(dp, mp, bf16)

    def load_state(self, record: CheckpointRecord) -> Any:
        run, tag = self.tag(record)
        if not tag.complete:
            raise DecodeError(f"{tag.rel}: no model states file, the save did not finish", Check.INCOMPLETE)
        parts = self.parts(record)
        try:
            states = self.files.torch(parts.weights.main_path).root if parts.weights else None
        except (TensorsError, OSError, ReaderError) as exc:
            raise DecodeError(f"{parts.weights.main_path if parts.weights else tag.rel}: {reason(exc)}") from exc
        return {
            "files": {name: entry.size for name, entry in sorted(parts.entries.items())},
            "tensors": self.tensor_shapes(parts),
            "model_states": _states_summary(states),
            "optimizer": self._optimizer_summary(parts),
            "recovery_scripts": {name: "copied in by DeepSpeed; Lastgood never runs it" for name in run.scripts},
        }

    def _optimizer_summary(self, parts: Parts) -> Any:
        first = next((n for n in sorted(parts.pickles) if layout.OPTIM_STATES.match(n)), None)
        if first is None:
            return None
        try:
            root = self.files.torch(parts.rel(first)).root
        except UnsafeGlobal as exc:
            return {"file": first, "refused": exc.message}
        except (TensorsError, OSError, ReaderError) as exc:
            return {"file": first, "not decoded": str(exc)}
        state = root.get("optimizer_state_dict") if isinstance(root, Mapping) else None
        if not isinstance(state, Mapping):
            return {"file": first}
        keep = ("zero_stage", "loss_scaler", "dynamic_loss_scale", "overflow", "clip_grad", "partition_count",
                "ds_version")
        out = {k: plain(state[k]) for k in keep if k in state}
        base = state.get("base_optimizer_state")
        if isinstance(base, Mapping):
            out["param_groups"] = plain([{k: v for k, v in g.items() if k != "params"}
                                         for g in base.get("param_groups") or [] if isinstance(g, Mapping)])
        return {"file": first, **out}

    def read_blob(self, record: CheckpointRecord) -> bytes:
        """The model states' pickle (``data.pkl``: structure and counters, no tensor bytes)."""
        _run, tag = self.tag(record)
        parts = self.parts(record)
        if parts.weights is None:
            raise DecodeError(f"{tag.rel}: no model states file", Check.INCOMPLETE)
        rel = parts.weights.main_path
        try:
            torch = self.files.torch(rel)
            pkl = torch.entries[f"{torch.prefix}/data.pkl"]
            with self.folder.open(rel) as f:
                return f.read(pkl.data_offset, pkl.length)
        except (TensorsError, OSError, ReaderError, KeyError) as exc:
            raise DecodeError(f"{rel}: {reason(exc)}") from exc


def _states_summary(states: Any) -> Any:
    if not isinstance(states, Mapping):
        return plain(states)
    out: dict[str, Any] = {}
    for key, value in states.items():
        if key == "module":
            continue
        if key == "param_shapes" and isinstance(value, list):
            out[key] = [{"parameters": len(group)} if isinstance(group, Mapping) else plain(group) for group in value]
        elif key == "buffer_names" and isinstance(value, list) and len(value) > MAX_LISTED_NAMES:
            out[key] = plain(value[:MAX_LISTED_NAMES]) + [f"… {len(value) - MAX_LISTED_NAMES} more"]
        else:
            out[str(key)] = plain(value)
    return out


def _stamp(tag: Tag) -> str:
    return ";".join(f"{n}:{e.size}:{e.mtime:.6f}" for n, e in sorted(tag.entries.items()))


def _sniff(folder: Folder) -> bool:
    candidates = [""] + [n for n, e in sorted(folder.listdir("").items())
                         if e.kind == DIR and not n.startswith(".") and not layout.skip_dir(n)][:SNIFF_FOLDERS]
    for rel in candidates:
        entries = folder.listdir(rel)
        if not layout.is_run(entries):
            continue
        tags = [n for n, e in sorted(entries.items()) if e.kind == DIR and not n.startswith(".")]
        for name in tags[:SNIFF_FOLDERS]:
            inside = folder.listdir(join(rel, name))
            if any(layout.MODEL_STATES.match(n) or layout.OPTIM_STATES.match(n) for n in inside):
                return True
    return False
