"""Reader of safetensors folders (see the package docstring).

A run is a folder holding safetensors weights (the store itself, or folders up to three levels
below: ``models/base/``, ``models/adapter/``, a Hub cache snapshot); a checkpoint is a model:
each ``*.safetensors.index.json`` with the shards it names (id: the index's name), and each
other ``.safetensors`` file (id: its name: ``model.safetensors``, ``adapter_model.safetensors``,
``step-100.safetensors``…). Its step is the last number in a plain file's name (none for a
``save_pretrained`` model), its time the newest of its files' mtimes. Listing reads folder
listings and the small config files, no header; checks and tensors read headers; a data check
streams every byte once (:mod:`lastgood.readers.modelfiles.datascan`).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from lastgood.checks import Check
from lastgood.errors import DecodeError, LastgoodError, ReaderError
from lastgood.readers.base import CheckpointRecord, Scan
from lastgood.readers.modelfiles.discover import find_runs, run_ids
from lastgood.readers.modelfiles.folderreader import parse_token, FolderReader, Parts
from lastgood.readers.modelfiles.fsio import FILE, Entry, Folder, as_datetime, join
from lastgood.readers.modelfiles.listing import records_table
from lastgood.readers.modelfiles.weights import INDEX_SUFFIX, ST_SUFFIX, Weights, reason, weights_of
from lastgood.readers.tensors.errors import TensorsError
from lastgood.readers.tensors.safetensors import MAX_HEADER_SIZE

ST_INDEX = ST_SUFFIX + INDEX_SUFFIX
SAVE_PRETRAINED = ("model.safetensors", "adapter_model.safetensors", "diffusion_pytorch_model.safetensors")
CONFIGS = ("config.json", "adapter_config.json")
SNIFF_FILES = 3
TOKEN_VERSION = 1
_LAST_NUMBER = re.compile(r"(\d+)(?!.*\d)")


@dataclass
class Model:
    """One checkpoint: a model's weights in a run folder."""

    run_id: str
    folder: str
    weights: Weights
    files: dict[str, Entry]

    @property
    def checkpoint_id(self) -> str:
        return self.weights.main

    @property
    def mtime(self) -> float:
        return max((e.mtime for e in self.files.values()), default=0.0)


class SafetensorsReader(FolderReader):
    name = "safetensors"
    description = ("safetensors weights: save_pretrained folders (single or sharded), PEFT adapters, "
                   "folders of .safetensors files (any fsspec URL)")
    read_only_reason = "a save_pretrained folder has no resume pointer"

    def __init__(self, url: str, storage_options: Mapping[str, Any] | None = None) -> None:
        super().__init__(url, storage_options)
        self._models: dict[tuple[str, str], Model] | None = None

    @classmethod
    def sniff(cls, url: str, storage_options: Mapping[str, Any] | None = None) -> bool:
        """A folder (or a subfolder) with a file whose first bytes are a safetensors header."""
        try:
            folder = Folder(url, storage_options)
            return any(_looks_like_safetensors(folder, rel) for rel in _candidates(folder))
        except (LastgoodError, OSError, ValueError):
            return False

    # ---- listing ------------------------------------------------------------------------

    def models(self, fresh: bool = False) -> dict[tuple[str, str], Model]:
        if self._models is None or fresh:
            self.folder.forget()
            rels = find_runs(self.folder, _holds_weights, lambda name: False, into_runs=True)
            ids = run_ids(self.folder, rels)
            self._models = {(m.run_id, m.checkpoint_id): m for rel in rels for m in self._models_in(ids[rel], rel)}
        return self._models

    def _models_in(self, run_id: str, rel: str) -> list[Model]:
        entries = {n: e for n, e in self.folder.listdir(rel).items() if e.kind == FILE}
        models: list[Model] = []
        taken: set[str] = set()
        for name in sorted(n for n in entries if n.endswith(ST_INDEX)):
            weights = weights_of(rel, name)
            shards = self._shards(weights)
            taken.update(shards)
            models.append(Model(run_id, rel, weights, {n: entries[n] for n in [name, *shards] if n in entries}))
        for name in sorted(n for n in entries if n.endswith(ST_SUFFIX) and n not in taken):
            models.append(Model(run_id, rel, weights_of(rel, name), {name: entries[name]}))
        return models

    def _shards(self, weights: Weights) -> tuple[str, ...]:
        try:
            return self.files.shard_files(weights)
        except (TensorsError, OSError, ReaderError):
            return ()

    def scan(self, since: str | None = None) -> Scan:
        models = self.models(fresh=True)
        listing = {f"{run}\x00{cid}": _stamp(m) for (run, cid), m in models.items()}
        token = json.dumps({"v": TOKEN_VERSION, "models": listing}, sort_keys=True)
        previous = parse_token(since, TOKEN_VERSION, "models")
        if previous == listing:
            return self.empty_scan(token)
        full = previous is None or bool(set(previous) - set(listing))
        changed = [key for key in listing if previous is None or full or previous.get(key) != listing[key]]
        runs_touched = {key.split("\x00")[0] for key in changed}
        records = [r for run in sorted(runs_touched) for r in self._records(run, models, changed, full)]
        return Scan(token=token, full=full, checkpoints=iter([records_table(records)] if records else []),
                    heads=[])

    def _records(self, run_id: str, models: Mapping[tuple[str, str], Model], changed: list[str],
                 full: bool) -> list[CheckpointRecord]:
        mine = sorted((m for (run, _), m in models.items() if run == run_id),
                      key=lambda m: (_step(m) if _step(m) is not None else -1, m.mtime, m.checkpoint_id))
        wanted = set(changed)
        out, parent = [], None
        for model in mine:
            if full or f"{run_id}\x00{model.checkpoint_id}" in wanted:
                out.append(self._record(model, parent))
            parent = model.checkpoint_id if _step(model) is not None else None
        return out

    def _record(self, model: Model, parent: str | None) -> CheckpointRecord:
        return CheckpointRecord(
            run_id=model.run_id, checkpoint_id=model.checkpoint_id, parent_id=parent, step=_step(model),
            created_at=as_datetime(model.mtime), trigger="manual",
            size_bytes=sum(e.size for e in model.files.values()), codec="safetensors",
            location=model.weights.main_path, metadata=self._metadata(model))

    def _metadata(self, model: Model) -> dict[str, Any]:
        main = model.weights.main
        kind = ("sharded" if model.weights.sharded else "save_pretrained" if main in SAVE_PRETRAINED else "file")
        meta: dict[str, Any] = {"kind": kind, "files": len(model.files)}
        if kind != "file":
            for name in CONFIGS:
                config = self._config(model, name)
                if isinstance(config, dict):
                    meta.update({k: config[k] for k in ("model_type", "peft_type", "base_model_name_or_path", "r")
                                 if isinstance(config.get(k), (str, int, float))})
        return meta

    def _config(self, model: Model, name: str) -> Any:
        if self.folder.entry(join(model.folder, name)) is None:
            return None
        try:
            return self.json_file(join(model.folder, name))
        except DecodeError:
            return None

    # ---- one checkpoint ---------------------------------------------------------------

    def model(self, record: CheckpointRecord) -> Model:
        found = self.models().get((record.run_id, record.checkpoint_id))
        if found is None or found.weights.main_path != record.location:
            found = self.models(fresh=True).get((record.run_id, record.checkpoint_id))
        if found is None:
            raise DecodeError(f"{record.location} is no longer there", Check.MISSING)
        return found

    def parts(self, record: CheckpointRecord) -> Parts:
        model = self.model(record)
        return Parts(model.folder, model.files, model.weights)

    def load_state(self, record: CheckpointRecord) -> Any:
        model = self.model(record)
        parts = self.parts(record)
        state: dict[str, Any] = {
            "files": {name: entry.size for name, entry in sorted(model.files.items())},
            "tensors": self.tensor_shapes(parts),
            "metadata": self._header_metadata(model),
        }
        if model.weights.sharded:
            index = self.files.index(model.weights.main_path)
            state["index"] = {"metadata": index.metadata, "shards": list(index.files)}
        if model.weights.main in SAVE_PRETRAINED or model.weights.sharded:
            for name in CONFIGS:
                config = self._config(model, name)
                if config is not None:
                    state[name.removesuffix(".json")] = config
        return state

    def _header_metadata(self, model: Model) -> Any:
        first = next(iter(sorted(n for n in model.files if n.endswith(ST_SUFFIX))), None)
        if first is None:
            return None
        try:
            return self.files.header(join(model.folder, first)).metadata
        except (TensorsError, OSError, ReaderError) as exc:
            raise DecodeError(f"{join(model.folder, first)}: {reason(exc)}") from exc

    def read_blob(self, record: CheckpointRecord) -> bytes:
        """The main file's header (the 8-byte length and the JSON) or the index: never tensor bytes."""
        model = self.model(record)
        rel = model.weights.main_path
        try:
            if model.weights.sharded:
                return self.folder.read_small(rel, MAX_HEADER_SIZE)
            with self.folder.open(rel) as f:
                n = int.from_bytes(f.read(0, 8), "little")
                return f.read(0, 8 + min(n, MAX_HEADER_SIZE, max(f.size - 8, 0)))
        except (OSError, ReaderError) as exc:
            raise DecodeError(f"{rel} cannot be read: {exc}") from exc


def _holds_weights(entries: Mapping[str, Entry]) -> bool:
    return any(e.kind == FILE and n.endswith(ST_SUFFIX) for n, e in entries.items())


def _step(model: Model) -> int | None:
    if model.weights.main in SAVE_PRETRAINED or model.weights.sharded:
        return None
    match = _LAST_NUMBER.search(model.weights.main.removesuffix(ST_SUFFIX))
    return int(match[1]) if match else None


def _stamp(model: Model) -> str:
    return ";".join(f"{n}:{e.size}:{e.mtime:.6f}" for n, e in sorted(model.files.items()))


def _candidates(folder: Folder) -> list[str]:
    """Up to a few ``.safetensors`` files in the root and its subfolders (two levels)."""
    found: list[str] = []
    queue = [("", 0)]
    while queue and len(found) < SNIFF_FILES:
        rel, depth = queue.pop(0)
        entries = folder.listdir(rel)
        found += [join(rel, n) for n, e in sorted(entries.items()) if e.kind == FILE and n.endswith(ST_SUFFIX)]
        if depth < 2:
            queue += [(join(rel, n), depth + 1) for n, e in sorted(entries.items())
                      if e.kind != FILE and not n.startswith(".")][:20]
    return found[:SNIFF_FILES]


def _looks_like_safetensors(folder: Folder, rel: str) -> bool:
    """Contents, not the name: a little-endian u64 header length that fits the file, then ``{``."""
    entry = folder.entry(rel)
    if entry is None or entry.size < 10:
        return False
    with folder.open(rel, entry.size) as f:
        head = f.read(0, 9)
    n = int.from_bytes(head[:8], "little")
    return len(head) == 9 and 2 <= n <= min(entry.size - 8, MAX_HEADER_SIZE) and head[8:9] == b"{"
