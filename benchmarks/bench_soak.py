"""Soak: long incremental chains and many more fuzz examples than CI runs.

    python benchmarks/bench_soak.py chain [--n 50000]     # write, load, index, verify, show
    python benchmarks/bench_soak.py fuzz [--scale 10]     # tests/test_fuzz_stores.py, scaled, random seeds

``chain`` writes one run of N incremental checkpoints (``NativeWriter(full_every=N+1)``,
the case that made the old recursive reader raise RecursionError at ~330) and times,
each in a fresh process through the real CLI: ``index``, ``verify --read-data``,
``show`` of the tip, and the writer's own ``load_head_state``. Results are printed as
JSON; the figures in docs/benchmarks.md ("Hostile stores") come from this script.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LASTGOOD = Path(sys.executable).with_name("lastgood")

WRITE = """
import sys
from lastgood.readers.native.writer import NativeWriter, SaveRequest
n = int(sys.argv[2])
w = NativeWriter(sys.argv[1], full_every=n + 1)
w.save_many(SaveRequest("long", {"turn": i, "log": [i % 7, "x"], "note": f"step {i}"}) for i in range(n))
print(w.head("long")["checkpoint_id"])
"""
LOAD = """
import sys
from lastgood.readers.native.writer import NativeWriter
assert NativeWriter(sys.argv[1]).load_head_state("long")["turn"] == int(sys.argv[2]) - 1
"""


def timed(command: list[str], env: dict[str, str] | None = None) -> tuple[float, str]:
    started = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, env=env, check=False)
    seconds = time.perf_counter() - started
    if done.returncode not in (0,):
        raise SystemExit(f"{command[:3]} failed ({done.returncode}): {done.stderr[-800:]}")
    return round(seconds, 2), done.stdout


def chain(n: int) -> dict[str, object]:
    with tempfile.TemporaryDirectory(prefix="lastgood-chain-") as folder:
        store, home = os.path.join(folder, "store"), os.path.join(folder, "home")
        env = dict(os.environ, LASTGOOD_HOME=home)
        write_s, tip = timed([sys.executable, "-c", WRITE, store, str(n)])
        load_s, _ = timed([sys.executable, "-c", LOAD, store, str(n)])
        index_s, _ = timed([str(LASTGOOD), "index", store, "--check", "structure"], env)
        verify_s, out = timed([str(LASTGOOD), "verify", store, "--read-data", "--format", "json"], env)
        show_s, shown = timed([str(LASTGOOD), "show", store, tip.strip(), "--format", "json"], env)
        assert json.loads(out)["checked"] == n and not json.loads(out)["findings"]
        assert json.loads(shown)["state"]["turn"] == n - 1
    return {"chain": n, "write_s": write_s, "load_head_state_s": load_s, "index_s": index_s,
            "verify_read_data_s": verify_s, "show_tip_s": show_s, "cpus": os.cpu_count()}


def chain_section(r: dict[str, object]) -> str:
    return f"""## Hostile stores: a {r['chain']:,}-checkpoint incremental chain (issue #7)

One run whose every checkpoint after the first is an incremental patch on its parent
(`NativeWriter(full_every=N+1)`): before issue #7 the recursive reader raised
`RecursionError` at ~330 links. Now chains are replayed iteratively (cycles are
findings; states are cached, so `verify --read-data` in step order is linear).
Each figure is one fresh process through the real CLI (`benchmarks/bench_soak.py chain`).
Anchor: there is no external tool for this; the anchor is the limit it replaces (a crash at ~330).

| step | seconds |
|---|---|
| write {r['chain']:,} checkpoints (`save_many`) | {r['write_s']} |
| `NativeWriter.load_head_state` of the tip (cold: replays every link) | {r['load_head_state_s']} |
| `lastgood index --check structure` | {r['index_s']} |
| `lastgood verify --read-data` (every blob re-hashed, decoded, replayed) | {r['verify_read_data_s']} |
| `lastgood show` of the tip (cold: replays every link) | {r['show_tip_s']} |

Machine: {r['cpus']} CPUs shared with other work (wall times are inflated and noisy)."""


def fuzz(scale: float) -> dict[str, object]:
    env = dict(os.environ, LASTGOOD_FUZZ_SCALE=str(scale), LASTGOOD_DEBUG="1", LASTGOOD_FUZZ_RANDOM="1")
    test = ROOT / "tests" / "test_fuzz_stores.py"
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(test),
                           "-o", "addopts=", "--hypothesis-seed", str(int(time.time()))],
                          cwd=ROOT, env=env, check=False)
    return {"scale": scale, "seconds": round(time.perf_counter() - started, 1), "passed": done.returncode == 0}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="what", required=True)
    sub.add_parser("chain").add_argument("--n", type=int, default=50_000)
    sub.add_parser("fuzz").add_argument("--scale", type=float, default=10.0)
    args = parser.parse_args()
    result = chain(args.n) if args.what == "chain" else fuzz(args.scale)
    print(json.dumps(result))
    if args.what == "chain":
        sys.path.insert(0, str(ROOT / "benchmarks"))
        from common import write_section

        write_section("hostile-chain", chain_section(result))


if __name__ == "__main__":
    main()
