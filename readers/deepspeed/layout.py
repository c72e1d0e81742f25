"""The folders of DeepSpeed saves: tags, their files, ``latest``.

Mirrors ``DeepSpeedEngine.load_checkpoint(load_dir, tag=None)``: ``latest`` (``latest_universal``
when the engine loads universal checkpoints) is read and ``.strip()``ed into the tag; the model
files are ``glob(dir/tag/"mp_rank_*_model_states.pt")`` (ZeRO-3: ``zero_pp_rank_*_mp_rank_*_model_states.pt``),
the optimizer files ``dir/tag/"[bf16_]zero_pp_rank_{dp}_mp_rank_{mp:02d}_optim_states.pt"`` for
every data-parallel rank.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from lastgood.errors import ReaderError
from lastgood.readers.modelfiles.discover import find_runs, run_ids
from lastgood.readers.modelfiles.fsio import DIR, FILE, Entry, Folder, join

LATEST = "latest"
LATEST_UNIVERSAL = "latest_universal"
SCRIPTS = ("zero_to_fp32.py", "zero_to_torch.py")
MODEL_STATES = re.compile(r"^(zero_pp_rank_\d+_)?mp_rank_(\d+)_model_states\.pt$")
OPTIM_STATES = re.compile(r"^(bf16_)?zero_pp_rank_(\d+)_mp_rank_(\d+)_optim_states\.pt$")
GLOBAL_STEP = re.compile(r"^global_step(\d+)$")
MAX_POINTER_BYTES = 4096


@dataclass
class Tag:
    name: str
    rel: str
    entries: dict[str, Entry]

    @property
    def step(self) -> int | None:
        match = GLOBAL_STEP.match(self.name)
        return int(match[1]) if match else None

    @property
    def model_files(self) -> list[str]:
        return sorted(n for n in self.entries if MODEL_STATES.match(n))

    @property
    def optim_files(self) -> list[str]:
        return sorted(n for n in self.entries if OPTIM_STATES.match(n))

    @property
    def complete(self) -> bool:
        return bool(self.model_files)

    @property
    def mtime(self) -> float:
        return max((e.mtime for e in self.entries.values()), default=0.0)

    @property
    def size(self) -> int:
        return sum(e.size for e in self.entries.values())


@dataclass
class Run:
    run_id: str
    rel: str
    tags: list[Tag] = field(default_factory=list)
    latest: str | None = None  # the pointer's text, stripped (None: no pointer file)
    pointer: str = LATEST
    scripts: list[str] = field(default_factory=list)

    def tag(self, name: str | None) -> Tag | None:
        return next((t for t in self.tags if t.name == name), None)

    @property
    def head(self) -> Tag | None:
        return self.tag(self.latest)


def is_run(entries: Mapping[str, Entry]) -> bool:
    return (entries.get(LATEST) is not None and entries[LATEST].kind == FILE) or any(
        e.kind == DIR and GLOBAL_STEP.match(n) for n, e in entries.items())


def skip_dir(name: str) -> bool:
    return bool(GLOBAL_STEP.match(name))


def list_runs(folder: Folder) -> list[Run]:
    rels = find_runs(folder, is_run, skip_dir, max_depth=2)
    ids = run_ids(folder, rels)
    return [list_run(folder, ids[rel], rel) for rel in rels]


def list_run(folder: Folder, run_id: str, rel: str) -> Run:
    entries = folder.listdir(rel)
    run = Run(run_id, rel, scripts=[n for n in SCRIPTS if n in entries])
    for name, entry in sorted(entries.items()):
        if entry.kind != DIR or name.startswith("."):
            continue
        files = {n: e for n, e in folder.listdir(join(rel, name)).items() if e.kind == FILE}
        if any(MODEL_STATES.match(n) or OPTIM_STATES.match(n) for n in files) or GLOBAL_STEP.match(name):
            run.tags.append(Tag(name, join(rel, name), files))
    run.tags.sort(key=lambda t: (t.step if t.step is not None else -1, t.mtime, t.name))
    if LATEST in entries:
        run.latest = read_pointer(folder, join(rel, LATEST))
    return run


def read_pointer(folder: Folder, rel: str) -> str | None:
    """The tag a pointer file names, as DeepSpeed reads it (``read().strip()``)."""
    try:
        return folder.read_small(rel, MAX_POINTER_BYTES).decode("utf-8", "replace").strip()
    except (OSError, ReaderError):
        return None


def expected_optim_files(dp_world_size: int, mp_world_size: int, bf16: bool) -> list[str]:
    prefix = "bf16_" if bf16 else ""
    return [f"{prefix}zero_pp_rank_{dp}_mp_rank_{mp:02d}_optim_states.pt"
            for mp in range(mp_world_size) for dp in range(dp_world_size)]
