"""The training-checkpoint targets, each next to its anchor measured in the same run.

    python benchmarks/bench_training.py [--repeat 3] [--idle-wait 15] [--skip-peers] [--no-write]

Targets (PRODUCT.md, training checkpoints):

* ``lastgood verify DIR --read-data`` (every file hashed, every tensor decoded, NaN/Inf and
  statistics) over ≥ 2 GB of float32 safetensors in a Trainer output folder
  (``checkpoint-N/model-0000K-of-00002.safetensors`` shards + index + ``trainer_state.json``):
  ≥ 0.8× the throughput of ``sha256sum`` per core, scaling with workers. Measured with
  ``--workers 1``, ``--workers N`` (N = all usable CPUs) and the default, each against
  ``sha256sum`` of the same files in as many processes (``xargs -P``); the store indexed
  before (the ``lastgood index DIR`` a user ran first), page cache warm.
* Tensor diff of two 1 GiB checkpoints (16 float32 tensors of 4096×4096 each; 5 of them
  changed, one NaN in one changed tensor): ``lastgood diff DIR checkpoint-100 checkpoint-200
  --format json`` (never seen: fresh LASTGOOD_HOME) vs a whole torch process
  (``.venv-fixtures/training``: torch 2.13 CPU) that loads both with
  ``safetensors.torch.load_file`` and computes per tensor ‖ΔW‖/‖W‖, cosine and NaN counts.
  Target ≥ 3× faster, the same numbers to 1e-5 relative (compared here), the NaN reported.
  Peer: ``modeldelta`` 0.4.4 in a scratch venv (same torch), timed once when it installs.
* Stats/NaN scan of one 1 GiB file: ``lastgood verify FOLDER --read-data`` (the folder holding
  the one file: Lastgood opens folders) vs ``lens analyze FILE`` (``weightlens`` 0.3.0, scratch
  venv) and ``sha256sum FILE``. Target ≥ 5× faster than weightlens.
* A Trainer folder of 1,000 small checkpoints (copies of
  ``sample_data/training/hf_trainer/checkpoint-8`` with distinct steps and consistent
  ``trainer_state.json``): ``lastgood index DIR`` cold ≤ 2 s, whole command, next to ``ls -R``
  and a Python ``os.scandir`` + ``stat`` walk of the same tree (whole processes).
* Peak RSS of ``lastgood verify DIR --read-data`` on a 4 GiB checkpoint < 1 GB.

Every figure is a whole process (``common.run_child``: wall time around the process, CPU time
and peak RSS from ``wait4``), medians of ``--repeat`` runs; the 1-minute load average and the
idle CPU share are recorded before each measurement. Data (≈ 8.3 GiB) is generated once under
``benchmarks/.cache/training`` with numpy + ``safetensors``. Writes the ``training`` section
of docs/benchmarks.md (``--no-write`` to skip).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import (  # noqa: E402
    ROOT,
    Samples,
    cache_bytecode,
    fmt_bytes,
    fmt_seconds,
    load_note,
    machine_info,
    publish_section,
    python_child,
    run_child,
    wait_for_idle,
)

SECTION = "training"
CACHE = ROOT / "benchmarks" / ".cache" / "training"
LASTGOOD = str(Path(sys.executable).with_name("lastgood"))
TORCH_PYTHON = ROOT / ".venv-fixtures" / "training" / "bin" / "python"
SAMPLE_CHECKPOINT = ROOT / "sample_data" / "training" / "hf_trainer" / "checkpoint-8"
VERIFY_TARGET, DIFF_TARGET, SCAN_TARGET, INDEX_TARGET, RSS_TARGET = 0.8, 3.0, 5.0, 2.0, 1e9
TOLERANCE = 1e-5
SIDE = 4096                       # tensors of SIDE × SIDE float32: 64 MiB each
DIFF_CHANGED = (1, 4, 7, 10, 13)  # 5 of the 16 tensors differ between the two diff checkpoints
NAN_TENSOR, NAN_AT = 7, (123, 456)
PEER_TIMEOUT = 900.0
IDLE_WAIT = 15.0
LOG: list[dict[str, Any]] = []    # every measurement: what, load, idle


# ---- data ---------------------------------------------------------------------------------

def tensor_name(i: int) -> str:
    layer, part = divmod(i, 4)
    return f"model.layers.{layer}.mlp.{('gate_proj', 'up_proj', 'down_proj', 'o_proj')[part]}.weight"


def trainer_state(run: str, step: int, every: int, max_steps: int) -> dict[str, Any]:
    """What ``TrainerState.save_to_json`` writes at ``step`` when logging, evaluating and saving
    every ``every`` steps: the whole log history so far, the best checkpoint by eval_loss."""
    history: list[dict[str, Any]] = []
    best = (math.inf, every)
    for s in range(every, step + 1, every):
        progress = s / max_steps
        loss = 3.9 * (1 + 20 * progress) ** -0.35 + 0.03 * math.sin(s * 0.37)
        eval_loss = loss + 0.08 + 0.02 * math.cos(s * 0.11)
        epoch = round(3 * progress, 4)
        history.append({"epoch": epoch, "grad_norm": 1.0 + 0.2 * math.sin(s), "learning_rate": 3e-2 * (1 - progress),
                        "loss": loss, "step": s})
        history.append({"epoch": epoch, "eval_loss": eval_loss, "eval_runtime": 0.0996,
                        "eval_samples_per_second": 160.659, "eval_steps_per_second": 20.082, "step": s})
        best = min(best, (eval_loss, s))
    return {
        "best_global_step": best[1], "best_metric": best[0], "best_model_checkpoint": f"{run}/checkpoint-{best[1]}",
        "epoch": round(3 * step / max_steps, 4), "eval_steps": every, "global_step": step,
        "is_hyper_param_search": False, "is_local_process_zero": True, "is_world_process_zero": True,
        "log_history": history, "logging_steps": every, "max_steps": max_steps, "num_input_tokens_seen": 0,
        "num_train_epochs": 3, "save_steps": every,
        "stateful_callbacks": {"TrainerControl": {"args": {
            "should_epoch_stop": False, "should_evaluate": False, "should_log": False, "should_save": True,
            "should_training_stop": step >= max_steps}, "attributes": {}}},
        "total_flos": 1718784.0 * step, "train_batch_size": 4, "trial_name": None, "trial_params": None,
    }


def write_state(folder: Path, run: str, step: int, every: int, max_steps: int) -> None:
    (folder / "trainer_state.json").write_text(
        json.dumps(trainer_state(run, step, every, max_steps), indent=2, sort_keys=True) + "\n")


def _random(seed: int) -> Any:
    import numpy as np

    return (np.random.default_rng(seed).standard_normal((SIDE, SIDE), dtype=np.float32) * np.float32(0.02))


def generate_sharded(out: str, steps: str, shards: int, per_shard: int) -> None:
    """A Trainer output folder: ``checkpoint-STEP`` for each step, each a sharded float32 model
    (``shards`` files of ``per_shard`` SIDE×SIDE tensors) with its index and trainer state."""
    from safetensors.numpy import save_file

    root = Path(out)
    step_list = [int(s) for s in str(steps).split(",")]
    for number, step in enumerate(step_list):
        folder = root / f"checkpoint-{step}"
        folder.mkdir(parents=True, exist_ok=True)
        weight_map, total = {}, 0
        for shard in range(shards):
            name = f"model-{shard + 1:05d}-of-{shards:05d}.safetensors"
            tensors = {}
            for j in range(per_shard):
                i = shard * per_shard + j
                tensors[tensor_name(i)] = _random(1000 * number + i)
                weight_map[tensor_name(i)] = name
                total += SIDE * SIDE * 4
            save_file(tensors, str(folder / name), metadata={"format": "pt"})
            del tensors
        (folder / "model.safetensors.index.json").write_text(
            json.dumps({"metadata": {"total_size": total}, "weight_map": weight_map}, indent=2, sort_keys=True) + "\n")
        write_state(folder, root.name, step, step_list[0], step_list[-1] * 2)


def generate_diff(out: str) -> None:
    """Two 1 GiB checkpoints of 16 tensors: B = A except DIFF_CHANGED (A + small noise), and one
    NaN in tensor NAN_TENSOR of B."""
    import numpy as np
    from safetensors.numpy import save_file

    root = Path(out)
    a = {tensor_name(i): _random(i) for i in range(16)}
    b = dict(a)
    for i in DIFF_CHANGED:
        noise = np.random.default_rng(100 + i).standard_normal((SIDE, SIDE), dtype=np.float32) * np.float32(1e-3)
        b[tensor_name(i)] = a[tensor_name(i)] + noise
    b[tensor_name(NAN_TENSOR)][NAN_AT] = np.nan
    for step, tensors in ((100, a), (200, b)):
        folder = root / f"checkpoint-{step}"
        folder.mkdir(parents=True, exist_ok=True)
        save_file(tensors, str(folder / "model.safetensors"), metadata={"format": "pt"})
        write_state(folder, root.name, step, 100, 1000)


def generate_many(out: str, count: int) -> None:
    """A Trainer folder of ``count`` copies of the sample's checkpoint-8, steps 8, 16, …, each
    with its own trainer state (log and eval every save, the history growing), files' times
    a minute apart in step order."""
    root = Path(out)
    root.mkdir(parents=True, exist_ok=True)
    every, max_steps = 8, 8 * count
    shutil.copyfile(SAMPLE_CHECKPOINT / "config.json", root / "config.json")
    started = time.time() - 60 * (count + 1)
    for k in range(1, count + 1):
        step = every * k
        folder = root / f"checkpoint-{step}"
        folder.mkdir(exist_ok=True)
        for item in sorted(SAMPLE_CHECKPOINT.iterdir()):
            if item.name != "trainer_state.json":
                shutil.copyfile(item, folder / item.name)
        write_state(folder, root.name, step, every, max_steps)
        stamp = started + 60 * k
        for item in folder.iterdir():
            os.utime(item, (stamp, stamp))


GENERATE = """
import sys
sys.path.insert(0, sys.argv[1])
import bench_training as b
getattr(b, sys.argv[2])(*[int(x) if x.isdigit() else x for x in sys.argv[3:]])
"""


def _generate(function: str, *args: Any) -> None:
    started = time.perf_counter()
    print(f"generating: {function}{tuple(args)} …", file=sys.stderr)
    python_child(GENERATE, str(Path(__file__).resolve().parent), function, *map(str, args)).check()
    print(f"  done in {fmt_seconds(time.perf_counter() - started)}", file=sys.stderr)


def prepare() -> dict[str, Path]:
    """The data sets (generated once, cached; a folder is complete when its stamp exists)."""
    CACHE.mkdir(parents=True, exist_ok=True)
    plans = {
        "verify": ("generate_sharded", ("500,1000", 2, 8)),     # 2 checkpoints × 2 shards × 512 MiB = 2 GiB
        "big": ("generate_sharded", ("2000", 4, 16)),           # 1 checkpoint × 4 shards × 1 GiB = 4 GiB
        "diff": ("generate_diff", ()),                         # 2 × 1 GiB
        "many": ("generate_many", (1000,)),                     # 1,000 small checkpoints
    }
    names = {"verify": "trainer-2x1g", "big": "trainer-1x4g", "diff": "trainer-diff-2x1g", "many": "trainer-1000"}
    paths = {}
    for key, (function, args) in plans.items():
        path = CACHE / names[key]
        stamp = path.with_suffix(".done")
        if not stamp.exists():
            shutil.rmtree(path, ignore_errors=True)
            _generate(function, str(path), *args)
            stamp.write_text("ok\n")
        paths[key] = path
    # the stats scan's folder holds one file: checkpoint B of the diff (a hard link, no copy)
    scan = CACHE / "scan-1g"
    target = paths["diff"] / "checkpoint-200" / "model.safetensors"
    if not (scan / "model.safetensors").exists() or (scan / "model.safetensors").stat().st_ino != target.stat().st_ino:
        shutil.rmtree(scan, ignore_errors=True)
        scan.mkdir()
        os.link(target, scan / "model.safetensors")
    paths["scan"] = scan
    return paths


def files_under(folder: Path) -> list[Path]:
    return sorted(p for p in folder.rglob("*") if p.is_file())


def warm(files: list[Path]) -> float:
    """Read ``files`` once (page cache warm for every measurement); seconds taken."""
    started = time.perf_counter()
    for path in files:
        with open(path, "rb") as handle:
            while handle.read(16 << 20):
                pass
    return time.perf_counter() - started


# ---- measuring ------------------------------------------------------------------------------

def measure(what: str, command: list[str], *, env: dict[str, str] | None = None, ok: tuple[int, ...] = (0,),
            timeout: float | None = None, cwd: str | None = None) -> dict[str, Any]:
    """One whole-process measurement after waiting (≤ IDLE_WAIT s) for a quieter machine."""
    idle = wait_for_idle(0.7, IDLE_WAIT) if IDLE_WAIT else None
    load = os.getloadavg()[0]
    child = run_child(command, extra_env=env, timeout=timeout, cwd=cwd)
    if child.returncode not in ok and "unexpected error" in child.stderr:
        time.sleep(10)  # a module caught mid-edit in a shared working tree: once more
        child = run_child(command, extra_env=env, timeout=timeout, cwd=cwd)
    if child.returncode not in ok:
        child.check()
    LOG.append({"what": what, "load": load, "idle": idle})
    return {"wall": child.wall, "cpu": child.user + child.system, "rss": child.peak_rss, "rc": child.returncode,
            "stdout": child.stdout, "stderr": child.stderr, "load": load, "idle": idle}


class Series:
    """Repeated measurements of one command: medians of wall, CPU, and the worst peak RSS."""

    def __init__(self) -> None:
        self.wall, self.cpu, self.rss, self.last = Samples(), Samples(), Samples(), {}

    def add(self, result: dict[str, Any]) -> dict[str, Any]:
        self.wall.add(result["wall"])
        self.cpu.add(result["cpu"])
        self.rss.add(result["rss"])
        self.last = result
        return result

    def __len__(self) -> int:
        return len(self.wall)


def fresh_home() -> dict[str, str]:
    return {"LASTGOOD_HOME": tempfile.mkdtemp(prefix="bench-training-home-", dir=CACHE)}


def sha256sum_command(files: list[Path], processes: int) -> list[str]:
    listing = CACHE / f"files-{abs(hash(tuple(files)))}.txt"
    listing.write_bytes(b"\0".join(str(p).encode() for p in files))
    per = max(1, math.ceil(len(files) / processes))
    return ["xargs", "-0", "-a", str(listing), "-P", str(processes), "-n", str(per), "sha256sum"]


# ---- 1. verify throughput -------------------------------------------------------------------------

def bench_verify(folder: Path, repeat: int) -> dict[str, Any]:
    files = files_under(folder)
    size = sum(p.stat().st_size for p in files)
    usable = len(os.sched_getaffinity(0))
    home = fresh_home()
    run_child([LASTGOOD, "index", str(folder)], extra_env=home).check()   # the user's `lastgood index DIR`
    warm(files)
    variants = [("1", ["--workers", "1"]), (str(usable), ["--workers", str(usable)]), ("default", [])]
    rows: dict[str, dict[str, Any]] = {}
    for label, extra in variants:
        rows[label] = {"lastgood": Series(), "sha256sum": Series(), "workers": None}
    never = Series()
    for r in range(repeat):
        for label, extra in variants:
            print(f"verify round {r + 1}/{repeat}: workers {label} …", file=sys.stderr)
            result = measure(f"verify --workers {label}", [LASTGOOD, "verify", str(folder), "--read-data",
                                                          "--format", "json", *extra], env=home, ok=(0, 1))
            report = json.loads(result["stdout"])
            rows[label]["lastgood"].add(result)
            rows[label]["workers"] = report["workers"]
            rows[label]["report"] = report
            processes = report["workers"]
            rows[label]["sha256sum"].add(measure(f"sha256sum -P {processes}", sha256sum_command(files, processes)))
        print(f"verify round {r + 1}/{repeat}: never seen (fresh home) …", file=sys.stderr)
        never.add(measure("verify never seen", [LASTGOOD, "verify", str(folder), "--read-data", "--format", "json"],
                          env=fresh_home(), ok=(0, 1)))
    return {"folder": folder, "files": len(files), "bytes": size, "rows": rows, "never": never,
            "checkpoints": len(list(folder.glob("checkpoint-*")))}


# ---- 2. tensor diff --------------------------------------------------------------------------------

TORCH_DIFF = """
import json, sys, time
started = time.perf_counter()
import torch
from safetensors.torch import load_file
imported = time.perf_counter()
a, b = load_file(sys.argv[1]), load_file(sys.argv[2])  # sys.argv[3]: float32 (as typed) or float64
loaded = time.perf_counter()
out = {}
for name in sorted(a.keys() & b.keys()):
    x, y = a[name].float().flatten(), b[name].float().flatten()
    nan_a, nan_b = int(torch.isnan(x).sum()), int(torch.isnan(y).sum())
    keep = torch.isfinite(x) & torch.isfinite(y)
    if not bool(keep.all()):   # like Lastgood: norms over the positions finite in both
        x, y = x[keep], y[keep]
    if sys.argv[3] == "float64":  # accumulate in float64 (float32 sums of 16M terms drift ~1e-4)
        x, y = x.double(), y.double()
    norm_a = torch.linalg.vector_norm(x)
    rel = (torch.linalg.vector_norm(y - x) / norm_a).item() if norm_a > 0 else 0.0
    cos = torch.nn.functional.cosine_similarity(x, y, dim=0).item()
    out[name] = {"relative_change": rel, "cosine": cos, "nan_a": nan_a, "nan_b": nan_b}
done = time.perf_counter()
print(json.dumps({"import": imported - started, "load": loaded - imported, "compute": done - loaded,
                  "torch": torch.__version__, "threads": torch.get_num_threads(), "tensors": out}))
"""


def relative_difference(x: float | None, y: float | None) -> float:
    if x is None or y is None:
        return math.inf if (x is None) != (y is None) else 0.0
    if x == y:
        return 0.0
    return abs(x - y) / max(abs(x), abs(y))


def compare(ours: dict[str, Any], torch_out: dict[str, Any]) -> dict[str, Any]:
    """Max relative difference of ‖ΔW‖/‖W‖ and cosine over the tensors both name (a tensor
    Lastgood leaves out of its list must be unchanged by torch's numbers), NaN counts equal."""
    listed = {t["name"]: t for t in ours["tensors"]}
    worst = {"relative_change": 0.0, "cosine": 0.0}
    missing, nan_mismatch = [], []
    for name, t in torch_out["tensors"].items():
        mine = listed.get(name)
        if mine is None:
            if t["relative_change"] != 0.0 or t["nan_a"] or t["nan_b"]:
                missing.append(name)
            continue
        for key in worst:
            worst[key] = max(worst[key], relative_difference(mine[key], t[key]))
        if (mine["nan_a"], mine["nan_b"]) != (t["nan_a"], t["nan_b"]):
            nan_mismatch.append(name)
    return {"worst": worst, "missing": missing, "nan_mismatch": nan_mismatch, "listed": len(listed),
            "torch_tensors": len(torch_out["tensors"])}


def bench_diff(folder: Path, repeat: int, peers: bool) -> dict[str, Any]:
    a, b = folder / "checkpoint-100" / "model.safetensors", folder / "checkpoint-200" / "model.safetensors"
    warm([a, b])
    command = [LASTGOOD, "diff", str(folder), "checkpoint-100", "checkpoint-200", "--format", "json"]
    ours, warm_home, anchor, exact = Series(), Series(), Series(), Series()
    known = fresh_home()
    run_child([LASTGOOD, "index", str(folder)], extra_env=known).check()
    torch = lambda precision: [str(TORCH_PYTHON), "-c", TORCH_DIFF, str(a), str(b), precision]
    for r in range(repeat):
        print(f"diff round {r + 1}/{repeat}: lastgood (never seen, then indexed before), torch float32, "
              "torch float64 …", file=sys.stderr)
        ours.add(measure("diff never seen", command, env=fresh_home()))
        warm_home.add(measure("diff indexed before", command, env=known))
        anchor.add(measure("torch diff float32", torch("float32")))
        exact.add(measure("torch diff float64", torch("float64")))
    mine = json.loads(ours.last["stdout"])
    theirs = json.loads(anchor.last["stdout"].strip().splitlines()[-1])
    theirs64 = json.loads(exact.last["stdout"].strip().splitlines()[-1])
    nan_tensor = tensor_name(NAN_TENSOR)
    nan_entry = next((t for t in mine["tensors"] if t["name"] == nan_tensor), None)
    result = {"ours": ours, "warm": warm_home, "anchor": anchor, "exact": exact,
              "agreement": compare(mine, theirs64), "agreement32": compare(mine, theirs),
              "summary": mine.get("summary"), "nan_entry": nan_entry,
              "torch_report": {k: v for k, v in theirs.items() if k != "tensors"},
              "torch64_report": {k: v for k, v in theirs64.items() if k != "tensors"},
              "nan_torch": theirs64["tensors"].get(nan_tensor), "nan_torch32": theirs["tensors"].get(nan_tensor)}
    if peers:
        result["modeldelta"] = run_modeldelta(folder)
    return result


def scratch_venv(name: str, package: str) -> tuple[Path | None, str]:
    """A venv under benchmarks/.cache with torch 2.13.0 and ``package`` (installed once)."""
    venv = CACHE.parent / f"venv-{name}"
    stamp = venv / ".bench-installed"
    if stamp.exists():
        return venv, stamp.read_text().strip()
    log = CACHE.parent / f"venv-{name}.log"
    constraint = CACHE.parent / "torch-constraint.txt"
    constraint.write_text("torch==2.13.0\n")
    steps = [["python3", "-m", "venv", str(venv)],
             [str(venv / "bin" / "pip"), "install", "-q", "torch==2.13.0"],
             [str(venv / "bin" / "pip"), "install", "-q", package, "-c", str(constraint)]]
    with log.open("w") as out:
        for step in steps:
            done = subprocess.run(step, stdout=out, stderr=subprocess.STDOUT)
            if done.returncode:
                return None, f"`{' '.join(step[-3:])}` failed (exit {done.returncode}; log {log.relative_to(ROOT)})"
    versions = subprocess.run([str(venv / "bin" / "python"), "-c",
                               f"import importlib.metadata as m; print('torch', m.version('torch'), '·', "
                               f"{package.split('==')[0]!r}, m.version({package.split('==')[0]!r}))"],
                              capture_output=True, text=True).stdout.strip()
    stamp.write_text(versions + "\n")
    return venv, versions


def last_lines(text: str, n: int = 3) -> str:
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return " ⏎ ".join(lines[-n:])[-400:]


def run_modeldelta(folder: Path) -> dict[str, Any]:
    venv, versions = scratch_venv("modeldelta", "modeldelta==0.4.4")
    if venv is None:
        return {"installed": False, "note": versions}
    out = CACHE / "modeldelta-out.json"
    out.unlink(missing_ok=True)
    print("diff: modeldelta (once; slow) …", file=sys.stderr)
    try:
        result = measure("modeldelta", [str(venv / "bin" / "modeldelta"), str(folder / "checkpoint-100"),
                                        str(folder / "checkpoint-200"), "-o", str(out), "-q"],
                         ok=tuple(range(-64, 256)), timeout=PEER_TIMEOUT, env={"HF_HUB_OFFLINE": "1"})
    except TimeoutError:
        return {"installed": True, "versions": versions, "wall": PEER_TIMEOUT, "rc": None,
                "note": f"still running after {PEER_TIMEOUT:.0f} s: stopped"}
    return {"installed": True, "versions": versions, "wall": result["wall"], "cpu": result["cpu"],
            "rss": result["rss"], "rc": result["rc"], "wrote": out.exists(),
            "note": last_lines(result["stderr"] or result["stdout"])}


# ---- 3. stats / NaN scan of one file -------------------------------------------------------------------

def bench_scan(folder: Path, repeat: int, peers: bool) -> dict[str, Any]:
    file = folder / "model.safetensors"
    warm([file])
    ours, sha = Series(), Series()
    lens = Series()
    venv, versions = scratch_venv("weightlens", "weightlens==0.3.0") if peers else (None, "skipped (--skip-peers)")
    found = {}
    for r in range(repeat):
        print(f"scan round {r + 1}/{repeat}: lastgood, sha256sum, weightlens …", file=sys.stderr)
        result = ours.add(measure("verify one file never seen",
                                  [LASTGOOD, "verify", str(folder), "--read-data", "--format", "json"],
                                  env=fresh_home(), ok=(0, 1)))
        found["lastgood"] = [f["message"] for f in json.loads(result["stdout"])["findings"]]
        sha.add(measure("sha256sum file", ["sha256sum", str(file)]))
        if venv is not None:
            try:
                out = lens.add(measure("lens analyze", [str(venv / "bin" / "lens"), "analyze", str(file)],
                                       ok=tuple(range(-64, 256)), timeout=PEER_TIMEOUT))
                found["weightlens"] = out
            except TimeoutError:
                found["weightlens"] = {"rc": None, "stdout": "", "stderr": f"timed out after {PEER_TIMEOUT:.0f} s"}
                break
    return {"file": file, "bytes": file.stat().st_size, "ours": ours, "sha": sha, "lens": lens, "found": found,
            "lens_versions": versions, "lens_installed": venv is not None}


# ---- 4. listing 1,000 checkpoints ----------------------------------------------------------------------

SCANDIR_WALK = """
import json, os, sys, time
t0 = time.perf_counter()
count = size = 0
stack = [sys.argv[1]]
while stack:
    with os.scandir(stack.pop()) as it:
        for entry in it:
            info = entry.stat(follow_symlinks=False)
            if entry.is_dir(follow_symlinks=False):
                stack.append(entry.path)
            else:
                count += 1
                size += info.st_size
print(json.dumps({"call": time.perf_counter() - t0, "files": count, "bytes": size}))
"""


def bench_many(folder: Path, repeat: int) -> dict[str, Any]:
    files = files_under(folder)
    warm(files)
    cold, again, ls, walk = Series(), Series(), Series(), Series()
    report = ""
    for r in range(repeat):
        print(f"index round {r + 1}/{repeat}: 1,000 checkpoints cold, warm, ls -R, scandir …", file=sys.stderr)
        home = fresh_home()
        result = cold.add(measure("index 1000 cold", [LASTGOOD, "index", str(folder)], env=home))
        report = result["stdout"].strip()
        again.add(measure("index 1000 warm", [LASTGOOD, "index", str(folder)], env=home))
        ls.add(measure("ls -R", ["sh", "-c", f"ls -R {folder} > /dev/null"]))
        walk.add(measure("scandir walk", [sys.executable, "-c", SCANDIR_WALK, str(folder)]))
    count = json.loads(walk.last["stdout"])
    listed = run_child([LASTGOOD, "ls", str(folder), "--format", "json"], extra_env=fresh_home()).check()
    rows = json.loads(listed.stdout)
    checkpoints = len(rows) if isinstance(rows, list) else len(rows.get("checkpoints", []))
    state_bytes = sum(p.stat().st_size for p in folder.glob("checkpoint-*/trainer_state.json"))
    return {"cold": cold, "warm": again, "ls": ls, "walk": walk, "report": report, "files": count["files"],
            "bytes": count["bytes"], "checkpoints": checkpoints, "state_bytes": state_bytes,
            "largest_state": max(p.stat().st_size for p in folder.glob("checkpoint-*/trainer_state.json"))}


# ---- 5. peak RSS on a 4 GiB checkpoint --------------------------------------------------------------------

def bench_rss(folder: Path, repeat: int) -> dict[str, Any]:
    files = files_under(folder)
    warm(files)
    home = fresh_home()
    run_child([LASTGOOD, "index", str(folder)], extra_env=home).check()
    ours, sha = Series(), Series()
    for r in range(repeat):
        print(f"rss round {r + 1}/{repeat}: verify the 4 GiB checkpoint …", file=sys.stderr)
        result = ours.add(measure("verify 4 GiB", [LASTGOOD, "verify", str(folder), "--read-data", "--format", "json"],
                                  env=home, ok=(0, 1)))
        ours.last["report"] = json.loads(result["stdout"])
        sha.add(measure("sha256sum 4 GiB", sha256sum_command(files, 1)))
    return {"bytes": sum(p.stat().st_size for p in files), "files": len(files), "ours": ours, "sha": sha}


# ---- report ---------------------------------------------------------------------------------------------

def mb(n: float) -> str:
    return f"{n / 1e6:,.0f} MB/s"


def yes(ok: bool) -> str:
    return "yes" if ok else "**no**"


def samples(series: Samples) -> str:
    return ", ".join(fmt_seconds(x) for x in series.values)


def build(v: dict[str, Any], d: dict[str, Any], s: dict[str, Any], m: dict[str, Any], r: dict[str, Any],
          repeat: int) -> tuple[list[list[str]], list[str], list[str]]:
    rows, notes, verdicts = [], [], []
    size = v["bytes"]
    # 1. verify
    verify_ok = []
    for label, row in v["rows"].items():
        n = row["workers"]
        ours, anchor = row["lastgood"], row["sha256sum"]
        per_core = size / ours.wall.median / n
        anchor_core = size / anchor.wall.median / n
        ratio = per_core / anchor_core
        cpu_ratio = anchor.cpu.median / ours.cpu.median
        ok = ratio >= VERIFY_TARGET and cpu_ratio >= VERIFY_TARGET
        verify_ok.append(ok)
        name = {"1": "`--workers 1`", "default": f"default options (resolved to {n} worker{'s' if n > 1 else ''})"}.get(
            label, f"`--workers {label}` (all usable CPUs)")
        rows.append([f"`lastgood verify DIR --read-data`, {name}: per core, wall (CPU s)",
                     f"{mb(per_core)} ({ours.cpu.median:.2f} s)",
                     f"{mb(anchor_core)} (`sha256sum`, {n} process{'es' if n > 1 else ''}; {anchor.cpu.median:.2f} s)",
                     f"{ratio:.2f}× by wall, {cpu_ratio:.2f}× by CPU", "≥ 0.8× per core", yes(ok)])
    never = v["never"]
    rows.append(["(reference) the same, never seen (fresh LASTGOOD_HOME: indexes first), default options",
                 f"{mb(size / never.wall.median)} ({never.cpu.median:.2f} s)", "—", "—", "—", "—"])
    one, many = v["rows"]["1"], v["rows"][str(max(int(k) for k in v["rows"] if k.isdigit()))]
    scaling = one["lastgood"].wall.median / many["lastgood"].wall.median
    sha_scaling = one["sha256sum"].wall.median / many["sha256sum"].wall.median
    verdicts.append(f"verify ≥ 0.8× `sha256sum` per core: {'met' if all(verify_ok) else 'MISSED'}")
    notes.append(f"Verify: {v['folder'].name}/, {v['checkpoints']} checkpoints × 2 shards of float32 (16 tensors of "
                 f"4096×4096 per checkpoint), {v['files']} files, {fmt_bytes(size)} ({size / 1e9:.2f} GB); "
                 f"throughput = those bytes / wall time of the whole command; the folder was indexed (`lastgood index "
                 f"DIR`) in the home first, and every file read before (page cache warm). `sha256sum` hashes the same "
                 f"files (`xargs -0 -P N -n …`), N = the workers the command reported. Scaling 1 → {many['workers']} "
                 f"workers: {scaling:.2f}× faster (`sha256sum` 1 → {many['workers']} processes: {sha_scaling:.2f}×). "
                 f"Wall samples — " + "; ".join(
                     f"workers {k}: {samples(x['lastgood'].wall)} vs sha256sum {samples(x['sha256sum'].wall)}"
                     for k, x in v["rows"].items()) + ".")
    # 2. diff
    ours, anchor, exact = d["ours"], d["anchor"], d["exact"]
    speed = anchor.wall.median / ours.wall.median
    speed_cpu = anchor.cpu.median / ours.cpu.median
    agree, agree32 = d["agreement"], d["agreement32"]
    worst = max(agree["worst"].values())
    nan_ok = bool(d["nan_entry"] and d["nan_entry"]["nan_b"] == 1 and (d["summary"] or {}).get("nan_appeared") == 1)
    same = worst <= TOLERANCE and not agree["missing"] and not agree["nan_mismatch"]
    version = d["torch_report"].get("torch")
    rows.append(["`lastgood diff DIR checkpoint-100 checkpoint-200 --format json`, two 1 GiB checkpoints, never seen: "
                 "wall (CPU s)",
                 f"{fmt_seconds(ours.wall.median)} ({ours.cpu.median:.2f} s)",
                 f"{fmt_seconds(anchor.wall.median)} ({anchor.cpu.median:.2f} s): torch {version} process, `load_file` "
                 "×2, per tensor ‖ΔW‖/‖W‖, cosine, NaN counts in float32 (as typed)",
                 f"{speed:.1f}× faster by wall, {speed_cpu:.1f}× by CPU", "≥ 3× faster",
                 yes(speed >= DIFF_TARGET and speed_cpu >= DIFF_TARGET)])
    rows.append(["(same command, the folder indexed before)", f"{fmt_seconds(d['warm'].wall.median)} "
                 f"({d['warm'].cpu.median:.2f} s)", "as above",
                 f"{anchor.wall.median / d['warm'].wall.median:.1f}× faster by wall", "—", "—"])
    rows.append(["(the anchor that gives the same numbers) torch accumulating in float64 (`.double()` per tensor)",
                 "as row 1", f"{fmt_seconds(exact.wall.median)} ({exact.cpu.median:.2f} s)",
                 f"{exact.wall.median / ours.wall.median:.1f}× faster by wall, "
                 f"{exact.cpu.median / ours.cpu.median:.1f}× by CPU", "—", "—"])
    rows.append(["diff numbers: max relative difference of ‖ΔW‖/‖W‖ / of cosine, over the 16 tensors; NaN counts",
                 f"{agree['worst']['relative_change']:.1e} / {agree['worst']['cosine']:.1e} vs torch float64; NaN counts "
                 f"{'equal' if not agree['nan_mismatch'] else 'differ: ' + ', '.join(agree['nan_mismatch'])}",
                 f"torch float32 vs Lastgood: {agree32['worst']['relative_change']:.1e} / "
                 f"{agree32['worst']['cosine']:.1e} (float32 torch's cosine of the NaN tensor: "
                 f"{(d['nan_torch32'] or {}).get('cosine', float('nan')):.6f})", "—", "≤ 1e-5", yes(same)])
    rows.append(["the NaN tensor reported", (f"`{tensor_name(NAN_TENSOR)}`: nan_b = {d['nan_entry']['nan_b']}, "
                 f"summary nan_appeared = {(d['summary'] or {}).get('nan_appeared')}") if d["nan_entry"] else "not listed",
                 f"torch: nan_b = {(d['nan_torch'] or {}).get('nan_b')}", "—", "reported", yes(nan_ok)])
    rows.append(["peak RSS, diff", fmt_bytes(ours.rss.worst),
                 f"{fmt_bytes(anchor.rss.worst)} (torch float32) / {fmt_bytes(exact.rss.worst)} (float64)",
                 "—", "—", "—"])
    md = d.get("modeldelta")
    if md:
        if not md.get("installed"):
            text = f"could not be installed: {md['note']}"
        else:
            text = (f"{fmt_seconds(md['wall'])}" + (f" (CPU {md['cpu']:.1f} s)" if md.get("cpu") else "")
                    + f", exit {md['rc']}" + (", wrote its report" if md.get("wrote") else ", no report")
                    + f": `{md['note']}`")
        rows.append(["(peer) `modeldelta A B -o out.json -q` (0.4.4, same torch, scratch venv; run once)", "—",
                     text.replace("\n", " "), "—", "—", "—"])
    verdicts.append(f"diff ≥ 3× torch: {'met' if speed >= DIFF_TARGET and speed_cpu >= DIFF_TARGET else 'MISSED'} "
                    f"({speed:.1f}× by wall, {speed_cpu:.1f}× by CPU), same numbers to 1e-5: "
                    f"{'met' if same else 'MISSED'}, NaN reported: {'met' if nan_ok else 'MISSED'}")
    tr, tr64 = d["torch_report"], d["torch64_report"]
    notes.append(f"Diff: {len(DIFF_CHANGED)} of 16 tensors changed (B = A + 1e-3·noise, A ~ 0.02·N(0,1)), one NaN in "
                 f"`{tensor_name(NAN_TENSOR)}` of B; Lastgood listed {agree['listed']} tensors (torch computed "
                 f"{agree['torch_tensors']}; a tensor Lastgood leaves out must have ‖ΔW‖ = 0 and no NaN in torch's "
                 f"numbers{': it did' if not agree['missing'] else ': not so for ' + ', '.join(agree['missing'])}). "
                 f"Both mask the positions not finite in either tensor for norms and cosine (Lastgood's definition). "
                 f"The float32 torch process ({tr.get('threads')} threads) spent {tr.get('import', 0):.2f} s importing "
                 f"torch, {tr.get('load', 0):.2f} s in `load_file` ×2 (memory-mapped), {tr.get('compute', 0):.2f} s "
                 f"computing; the float64 one {tr64.get('compute', 0):.2f} s computing (last runs). Float32 reductions "
                 f"over 16.8M elements drift: its cosine differs from the float64 one by up to "
                 f"{agree32['worst']['cosine']:.0e} (and can exceed 1), which is why the numbers are compared with the "
                 f"float64 run. Wall samples — lastgood never seen: {samples(ours.wall)}; indexed before: "
                 f"{samples(d['warm'].wall)}; torch float32: {samples(anchor.wall)}; float64: {samples(exact.wall)}.")
    # 3. scan
    ours, sha, lens = s["ours"], s["sha"], s["lens"]
    nan_lg = any("NaN" in text for text in s["found"].get("lastgood", []))
    if len(lens):
        lens_speed = lens.wall.median / ours.wall.median
        lens_cpu = lens.cpu.median / ours.cpu.median
        out = s["found"].get("weightlens") or {}
        lens_text = (f"{fmt_seconds(lens.wall.median)} (`lens analyze FILE`, exit {out.get('rc')}; CPU "
                     f"{lens.cpu.median:.2f} s, peak RSS {fmt_bytes(lens.rss.worst)})")
        lens_met = lens_speed >= SCAN_TARGET and lens_cpu >= SCAN_TARGET
        lens_ratio, lens_ok = f"{lens_speed:.1f}× faster by wall, {lens_cpu:.1f}× by CPU", yes(lens_met)
        verdicts.append(f"scan ≥ 5× weightlens: {'met' if lens_met else 'MISSED'} ({lens_speed:.1f}× by wall, "
                        f"{lens_cpu:.1f}× by CPU)")
    else:
        lens_text, lens_ratio, lens_ok = f"not run: {s['lens_versions']}", "—", "—"
        verdicts.append("scan ≥ 5× weightlens: not measured")
    rows.append(["`lastgood verify FOLDER --read-data`, one 1 GiB safetensors file (the folder holding it), never seen",
                 f"{fmt_seconds(ours.wall.median)} (CPU {ours.cpu.median:.2f} s, peak RSS {fmt_bytes(ours.rss.worst)}; "
                 f"{'NaN reported' if nan_lg else 'NaN **not** reported'})", lens_text, lens_ratio, "≥ 5× faster", lens_ok])
    rows.append(["(anchor) `sha256sum FILE`", "—", f"{fmt_seconds(sha.wall.median)} (CPU {sha.cpu.median:.2f} s)",
                 f"{sha.wall.median / ours.wall.median:.2f}× (Lastgood vs sha256sum)", "—", "—"])
    if len(lens):
        out = s["found"].get("weightlens") or {}
        said = (out.get("stdout") or "") + (out.get("stderr") or "")
        notes.append(f"Scan: weightlens {s['lens_versions']} in a scratch venv; its output "
                     f"{'mentions NaN' if 'nan' in said.lower() else 'does not mention NaN'}; last lines: "
                     f"`{last_lines(said, 4)}`. Lastgood's findings: {'; '.join(s['found'].get('lastgood', [])) or 'none'}. "
                     f"Wall samples — lastgood {samples(ours.wall)}; weightlens {samples(lens.wall)}; "
                     f"sha256sum {samples(sha.wall)}.")
    # 4. 1,000 checkpoints
    cold = m["cold"]
    rows.append([f"`lastgood index DIR`, a Trainer folder of {m['checkpoints']:,} checkpoints, cold (fresh home)",
                 f"{fmt_seconds(cold.wall.median)} (CPU {cold.cpu.median:.2f} s, peak RSS {fmt_bytes(cold.rss.worst)})",
                 f"{fmt_seconds(m['ls'].wall.median)} (`ls -R`) / {fmt_seconds(m['walk'].wall.median)} "
                 f"(`os.scandir` + `stat` walk, Python process)", "—", "≤ 2 s", yes(cold.wall.median <= INDEX_TARGET)])
    rows.append(["(reference) the same again, nothing changed", f"{fmt_seconds(m['warm'].wall.median)}", "—", "—", "—", "—"])
    verdicts.append(f"index 1,000 checkpoints ≤ 2 s: {'met' if cold.wall.median <= INDEX_TARGET else 'MISSED'} "
                    f"({fmt_seconds(cold.wall.median)} wall, {cold.cpu.median:.2f} s CPU)")
    notes.append(f"1,000 checkpoints: copies of `sample_data/training/hf_trainer/checkpoint-8` as checkpoint-8 … "
                 f"checkpoint-8000 ({m['files']:,} files, {fmt_bytes(m['bytes'])}), each with its own trainer_state.json "
                 f"(log + eval every 8 steps, the history growing as Trainer writes it: {fmt_bytes(m['state_bytes'])} "
                 f"in all, the last {fmt_bytes(m['largest_state'])}); files' times a minute apart. The cold index said: "
                 f"`{m['report'].splitlines()[0] if m['report'] else ''}`. Wall samples — cold {samples(cold.wall)}; "
                 f"again {samples(m['warm'].wall)}; ls -R {samples(m['ls'].wall)}; scandir {samples(m['walk'].wall)}.")
    # 5. RSS
    ours = r["ours"]
    report = ours.last.get("report", {})
    rows.append([f"peak RSS, `lastgood verify DIR --read-data` on one {fmt_bytes(r['bytes'])} checkpoint "
                 f"({r['files']} files)", f"{fmt_bytes(ours.rss.worst)} (wall {fmt_seconds(ours.wall.median)}, "
                 f"{mb(r['bytes'] / ours.wall.median)}; {report.get('workers')} worker(s))",
                 f"{fmt_bytes(r['sha'].rss.worst)} (`sha256sum`; wall {fmt_seconds(r['sha'].wall.median)})", "—",
                 "< 1 GB", yes(ours.rss.worst < RSS_TARGET)])
    verdicts.append(f"peak RSS < 1 GB: {'met' if ours.rss.worst < RSS_TARGET else 'MISSED'}")
    notes.append("Peak RSS is the kernel's high-water mark (`wait4` `ru_maxrss`) of the command's process tree's "
                 "largest process (workers are separate processes); worst of the runs.")
    return rows, notes, verdicts


def main(argv: list[str] | None = None) -> int:
    global IDLE_WAIT
    cache_bytecode()
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--idle-wait", type=float, default=15.0,
                        help="wait up to this many seconds for a quieter machine before each measurement")
    parser.add_argument("--skip-peers", action="store_true", help="leave out modeldelta and weightlens")
    parser.add_argument("--only", choices=["verify", "diff", "scan", "many", "rss"], action="append",
                        help="run only these parts; the others are taken from the last whole run's "
                             "measurements when there is one (else print only)")
    parser.add_argument("--no-write", action="store_true", help="print only; leave docs/benchmarks.md alone")
    parser.add_argument("--report-only", action="store_true",
                        help="rebuild the report from the last run's measurements (benchmarks/.cache/training)")
    args = parser.parse_args(argv)
    IDLE_WAIT = args.idle_wait
    if not TORCH_PYTHON.exists():
        raise SystemExit(f"{TORCH_PYTHON} missing: see sample_data/generators/training/README.md")
    saved = CACHE / "last-run.pickle"
    if args.report_only:
        import pickle

        info, v, d, s, m, r, LOG[:], args.repeat, IDLE_WAIT = pickle.loads(saved.read_bytes())
        started = time.perf_counter()
    else:
        info = machine_info(("safetensors", "numpy", "duckdb"))
        started = time.perf_counter()
        paths = prepare()
        parts = set(args.only or ["verify", "diff", "scan", "many", "rss"])
        try:
            v = bench_verify(paths["verify"], args.repeat) if "verify" in parts else None
            d = bench_diff(paths["diff"], args.repeat, not args.skip_peers) if "diff" in parts else None
            s = bench_scan(paths["scan"], args.repeat, not args.skip_peers) if "scan" in parts else None
            m = bench_many(paths["many"], args.repeat) if "many" in parts else None
            r = bench_rss(paths["big"], args.repeat) if "rss" in parts else None
        finally:
            for home in CACHE.glob("bench-training-home-*"):
                shutil.rmtree(home, ignore_errors=True)
            for listing in CACHE.glob("files-*.txt"):
                listing.unlink()
        import pickle

        if args.only:
            if not saved.exists():
                for name, value in (("verify", v), ("diff", d), ("scan", s), ("many", m), ("rss", r)):
                    if value is not None:
                        print(name, json.dumps(value, default=lambda o: o.__dict__ if hasattr(o, "__dict__")
                                               else str(o), indent=1)[:6000])
                return 0
            # the parts run now replace those of the last whole run; the rest are kept
            old = pickle.loads(saved.read_bytes())
            v, d, s, m, r = (new if new is not None else kept for new, kept in zip((v, d, s, m, r), old[1:6]))
            LOG[:] = old[6] + LOG
        saved.write_bytes(pickle.dumps((info, v, d, s, m, r, LOG, args.repeat, IDLE_WAIT)))
    rows, notes, verdicts = build(v, d, s, m, r, args.repeat)
    notes.append(load_note(LOG, f"Medians of {args.repeat} runs, each a fresh process, the command exactly as typed "
                                "(default options unless the row names one)", IDLE_WAIT))
    publish_section(
        SECTION, title="Training checkpoints (issue #31)",
        intro="Verify, tensor diff, stats scan, 1,000-checkpoint listing, peak RSS. Rerun: `python "
              "benchmarks/bench_training.py` (data ≈ 8.3 GiB, generated once under `benchmarks/.cache/training`; "
              "modeldelta and weightlens in scratch venvs there).",
        headers=["what", "Lastgood", "anchor (same run)", "ratio", "target", "met?"], rows=rows,
        summary="Targets: " + "; ".join(verdicts) + ".", notes=notes, machine=info, started=started,
        write=not args.no_write)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
