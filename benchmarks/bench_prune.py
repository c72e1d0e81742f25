"""Prune: dry run and apply on the 100,800-checkpoint LangGraph DB, dry run on the 1M native store.

    python benchmarks/bench_prune.py [--repeat 3] [--no-native] [--no-write]

Targets (PRODUCT.md): prune dry run, keep-last-10, on the 100k LangGraph DB ≤ 3 s and on the 1M
native store ≤ 5 s; applying it (archive + delete + journal) ≤ 30 s.

Every figure is the command as a user types it (whole process, default options) on a store whose
index exists already (a prune follows `lastgood index`/`ls`/`ui`; the cold index is
bench_langgraph_index's and bench_native_index's figure), each in a fresh process:

* ``lastgood prune DB --keep-last 10 --dry-run`` (table) and ``--format json`` (every checkpoint
  listed with its rule); anchor: a raw ``sqlite3`` count of what goes (a window function over the
  checkpoints' ids) — the least work that answers "what would keep-last-10 remove";
* ``lastgood prune DB --keep-last 10 --reason … --yes`` on a scratch copy (archive every row and its
  writes, delete in batches, journal, index refresh); anchors: the same rows deleted with plain SQL in
  one ``sqlite3`` transaction (no archive, no checks), and ``cp`` of the database (the I/O floor of
  writing that many bytes); then ``lastgood undo`` of it (reported, no target);
* ``lastgood prune STORE --keep-last 10 --dry-run`` on the 1M native store; anchor: a DuckDB count of
  what goes over the catalog's Parquet part.

The LangGraph DB and the native store are those of bench_langgraph_index / bench_native_index
(generated once into benchmarks/.cache). Writes the ``prune`` section of docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import (  # noqa: E402
    ROOT,
    Samples,
    cache_bytecode,
    fmt_bytes,
    fmt_seconds,
    machine_info,
    machine_line,
    markdown_table,
    python_child,
    run_child,
    text_table,
    wait_for_idle,
    write_section,
)

SECTION = "prune"
DRY_TARGET, APPLY_TARGET, NATIVE_TARGET = 3.0, 30.0, 5.0

RAW_COUNT = """
import json, sqlite3, sys, time
t0 = time.perf_counter()
conn = sqlite3.connect(sys.argv[1])
n, size = conn.execute('''SELECT count(*), sum(length(c.checkpoint)) FROM checkpoints c JOIN (
    SELECT thread_id, checkpoint_ns, checkpoint_id, row_number() OVER (PARTITION BY thread_id, checkpoint_ns
    ORDER BY checkpoint_id DESC) AS rn FROM checkpoints) r USING (thread_id, checkpoint_ns, checkpoint_id)
    WHERE r.rn > 10''').fetchone()
print(json.dumps({"seconds": time.perf_counter() - t0, "rows": n, "bytes": size}))
"""

RAW_DELETE = """
import json, sqlite3, sys, time
t0 = time.perf_counter()
conn = sqlite3.connect(sys.argv[1], isolation_level=None)
conn.execute("BEGIN IMMEDIATE")
conn.execute('''CREATE TEMP TABLE going AS SELECT thread_id, checkpoint_ns, checkpoint_id FROM (
    SELECT thread_id, checkpoint_ns, checkpoint_id, row_number() OVER (PARTITION BY thread_id, checkpoint_ns
    ORDER BY checkpoint_id DESC) AS rn FROM checkpoints) WHERE rn > 10''')
w = conn.execute('''DELETE FROM writes WHERE (thread_id, checkpoint_ns, checkpoint_id) IN
    (SELECT thread_id, checkpoint_ns, checkpoint_id FROM going)''').rowcount
c = conn.execute('''DELETE FROM checkpoints WHERE (thread_id, checkpoint_ns, checkpoint_id) IN
    (SELECT thread_id, checkpoint_ns, checkpoint_id FROM going)''').rowcount
conn.execute("COMMIT")
print(json.dumps({"seconds": time.perf_counter() - t0, "checkpoints": c, "writes": w}))
"""

NATIVE_COUNT = """
import glob, json, sys, time
t0 = time.perf_counter()
import duckdb
parts = sorted(glob.glob(sys.argv[1] + "/catalog/parts/*.parquet"))
n, size = duckdb.sql(f'''SELECT count(*), sum(size_bytes) FROM (SELECT size_bytes, row_number() OVER (
    PARTITION BY run_id, namespace ORDER BY created_at DESC, step DESC, checkpoint_id DESC) AS rn
    FROM read_parquet({parts!r})) WHERE rn > 10''').fetchall()[0]
print(json.dumps({"seconds": time.perf_counter() - t0, "rows": n, "bytes": size}))
"""


def lastgood(*args: str, home: Path) -> list[str]:
    return [str(Path(sys.executable).with_name("lastgood")), *args, "--home", str(home)]


def timed(command: list[str], idle: list[float], **kwargs: Any) -> Any:
    seen = wait_for_idle(0.7, timeout=30)
    if seen is not None:
        idle.append(seen)
    return run_child(command, cwd=ROOT, extra_env={"LASTGOOD_OPERATOR": "bench"}, **kwargs).check()


def measure_langgraph(db: Path, repeat: int, scratch: Path, idle: list[float]) -> dict[str, Any]:
    home = scratch / "home"
    timed(lastgood("index", str(db), "--format", "json", home=home), idle)  # the index exists before a prune
    out: dict[str, Any] = {"dry": Samples(), "dry_cpu": Samples(), "json": Samples(), "json_cpu": Samples(),
                           "raw": Samples()}
    for _ in range(repeat):
        child = timed(lastgood("prune", str(db), "--keep-last", "10", "--dry-run", home=home), idle)
        out["dry"].add(child.wall)
        out["dry_cpu"].add(child.user + child.system)
        child = timed(lastgood("prune", str(db), "--keep-last", "10", "--dry-run", "--format", "json", home=home), idle)
        out["json"].add(child.wall)
        out["json_cpu"].add(child.user + child.system)
        out["plan"] = json.loads(child.stdout)["summary"]
        out["json_bytes"] = len(child.stdout)
        raw = python_child(RAW_COUNT, str(db), cwd=ROOT).check()
        out["raw"].add(raw.report["seconds"])
        out["raw_rows"], out["raw_bytes"] = raw.report["rows"], raw.report["bytes"]
    work, copy = scratch / "work.sqlite", scratch / "raw.sqlite"
    shutil.copyfile(db, work)
    timed(lastgood("index", str(work), "--format", "json", home=home), idle)
    child = timed(lastgood("prune", str(work), "--keep-last", "10", "--reason", "bench", "--yes", "--format", "json",
                           home=home), idle, timeout=1800)
    out["apply"], out["apply_cpu"], out["apply_rss"] = child.wall, child.user + child.system, child.peak_rss
    out["applied"] = json.loads(child.stdout)
    shutil.copyfile(db, copy)
    seen = wait_for_idle(0.7, timeout=30)
    cp = run_child(["cp", str(db), str(scratch / "cp.sqlite")])
    out["cp"] = cp.wall
    raw = python_child(RAW_DELETE, str(copy), cwd=ROOT).check()
    out["raw_delete"], out["raw_deleted"] = raw.report["seconds"], raw.report["checkpoints"]
    if seen is not None:
        idle.append(seen)
    child = timed(lastgood("undo", str(work), out["applied"]["action_id"], "--reason", "bench", "--yes",
                           "--format", "json", home=home), idle, timeout=1800)
    out["undo"], out["undo_cpu"] = child.wall, child.user + child.system
    out["undone"] = json.loads(child.stdout)["checkpoints"]
    archive = Path(str(work) + ".lastgood-archive")
    out["archive_bytes"] = sum(p.stat().st_size for p in archive.rglob("*") if p.is_file())
    for path in (work, copy, scratch / "cp.sqlite"):
        path.unlink(missing_ok=True)
    shutil.rmtree(archive, ignore_errors=True)
    return out


def measure_native(store: Path, repeat: int, scratch: Path, idle: list[float]) -> dict[str, Any]:
    home = scratch / "native-home"
    timed(lastgood("index", str(store), "--format", "json", home=home), idle, timeout=1800)
    out: dict[str, Any] = {"dry": Samples(), "dry_cpu": Samples(), "raw": Samples()}
    for _ in range(repeat):
        child = timed(lastgood("prune", str(store), "--keep-last", "10", "--dry-run", "--format", "json",
                               "--summary", home=home), idle)
        out["dry"].add(child.wall)
        out["dry_cpu"].add(child.user + child.system)
        out["plan"] = json.loads(child.stdout)["summary"]
        raw = python_child(NATIVE_COUNT, str(store), cwd=ROOT).check()
        out["raw"].add(raw.report["seconds"])
        out["raw_rows"] = raw.report["rows"]
    return out


def met(ok: bool) -> str:
    return "yes" if ok else "**no**"


def rows_of(lg: dict[str, Any] | None, nat: dict[str, Any] | None) -> list[list[str]]:
    rows = []
    if lg:
        rows += [
            ["dry run, `lastgood prune DB --keep-last 10 --dry-run` (100,800 checkpoints)", fmt_seconds(lg["dry"].median),
             f"{fmt_seconds(lg['raw'].median)} (raw `sqlite3` count of what goes)", f"≤ {DRY_TARGET:.0f} s",
             met(lg["dry"].median <= DRY_TARGET)],
            ["dry run, `--format json` (every checkpoint and its rule, "
             f"{fmt_bytes(lg['json_bytes'])} of JSON)", fmt_seconds(lg["json"].median), "—", f"≤ {DRY_TARGET:.0f} s",
             met(lg["json"].median <= DRY_TARGET)],
            [f"apply, `lastgood prune DB --keep-last 10 --reason … --yes` ({lg['applied']['checkpoints']:,} archived "
             "and deleted, journal, index refresh)", fmt_seconds(lg["apply"]),
             f"{fmt_seconds(lg['raw_delete'])} (plain SQL DELETE, no archive); {fmt_seconds(lg['cp'])} (`cp` of the DB)",
             f"≤ {APPLY_TARGET:.0f} s", met(lg["apply"] <= APPLY_TARGET)],
            [f"(reference) `lastgood undo` of it ({lg['undone']:,} restored)", fmt_seconds(lg["undo"]), "—", "—", "—"],
        ]
    if nat:
        rows.append(["dry run, 1,000,000-checkpoint native store (`--format json --summary`)",
                     fmt_seconds(nat["dry"].median), f"{fmt_seconds(nat['raw'].median)} (DuckDB count over the part)",
                     f"≤ {NATIVE_TARGET:.0f} s", met(nat["dry"].median <= NATIVE_TARGET)])
    return rows


def ratios(lg: dict[str, Any] | None, nat: dict[str, Any] | None) -> str:
    """Each figure over its anchor, both measured in this run (the steadier comparison on a busy machine)."""
    parts = []
    if lg:
        parts += [f"dry run {lg['dry'].median / lg['raw'].median:.1f}× the raw `sqlite3` count",
                  f"apply {lg['apply'] / lg['raw_delete']:.1f}× the plain SQL DELETE (which archives nothing) and "
                  f"{lg['apply'] / lg['cp']:.1f}× `cp` of the DB"]
    if nat:
        parts.append(f"native dry run {nat['dry'].median / nat['raw'].median:.1f}× the DuckDB count")
    return "Ratios to the anchors of the same run: " + "; ".join(parts) + "."


def details(lg: dict[str, Any] | None, nat: dict[str, Any] | None, idle: list[float], repeat: int) -> list[str]:
    notes = []
    if lg:
        plan = lg["plan"]
        notes += [
            f"LangGraph DB: bench_langgraph_index's 1,600 threads × 63 checkpoints (1.4 GiB). The plan forgets "
            f"{plan['forget']:,} checkpoints ({fmt_bytes(plan['bytes_forget'])} of checkpoint blobs) = the raw count's "
            f"{lg['raw_rows']:,} ({fmt_bytes(lg['raw_bytes'])}); it keeps {plan['keep']:,} ({plan['kept_by']}).",
            f"Apply: archive {fmt_bytes(lg['archive_bytes'])} (one bundle per checkpoint with its writes, synced, then "
            f"the manifest), then deletes in short transactions of whole threads (an agent's write waits milliseconds), "
            f"{lg['applied']['reparented']:,} kept checkpoints lost a parent that went; space: "
            + "; ".join(lg["applied"]["space"].get("notes") or []) + ".",
            f"CPU time (user+sys) — dry run {fmt_seconds(lg['dry_cpu'].median)}, JSON dry run "
            f"{fmt_seconds(lg['json_cpu'].median)}, apply {fmt_seconds(lg['apply_cpu'])} (peak RSS "
            f"{fmt_bytes(lg['apply_rss'])}), undo {fmt_seconds(lg['undo_cpu'])}.",
            f"Samples — dry run: {', '.join(fmt_seconds(v) for v in lg['dry'].values)}; JSON: "
            f"{', '.join(fmt_seconds(v) for v in lg['json'].values)}.",
        ]
    if nat:
        same = nat["plan"]["forget"] == nat["raw_rows"]
        notes.append(f"Native store: bench_native_index's 1,000,000 checkpoints in 2,000 runs. The plan forgets "
                     f"{nat['plan']['forget']:,} " + ("= the raw count" if same else
                                                      f"(the raw count {nat['raw_rows']:,}: the difference is "
                                                      "incremental parents a kept checkpoint needs)")
                     + f"; CPU time {fmt_seconds(nat['dry_cpu'].median)}; samples "
                     f"{', '.join(fmt_seconds(v) for v in nat['dry'].values)}.")
    notes.append(ratios(lg, nat))
    notes.append(f"Medians of {repeat} runs (apply and undo: one each, on a scratch copy), each a fresh process, "
                 "the store's index built before (warm). The machine is shared: idle CPU share before each "
                 f"measurement {min(idle or [0]):.0%}–{max(idle or [0]):.0%}; wall times on a busy machine run long "
                 "(the CPU times above are the steadier view).")
    return notes


def main(argv: list[str] | None = None) -> int:
    cache_bytecode()
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--cache", default=str(ROOT / "benchmarks" / ".cache"))
    parser.add_argument("--no-native", action="store_true")
    parser.add_argument("--no-langgraph", action="store_true")
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args(argv)
    import bench_langgraph_index
    import bench_native_index

    cache = Path(args.cache).resolve()
    info = machine_info()
    idle: list[float] = []
    with tempfile.TemporaryDirectory(prefix="bench-prune-", dir=cache) as tmp:
        scratch = Path(tmp)
        lg = nat = None
        if not args.no_langgraph:
            db, _ = bench_langgraph_index.prepare_db(cache, 1600, 63)
            lg = measure_langgraph(db, args.repeat, scratch, idle)
        if not args.no_native:
            store, _ = bench_native_index.prepare_store(cache, 1_000_000, 2000)
            nat = measure_native(store, args.repeat, scratch, idle)
    headers = ["what", "time", "anchor", "target", "met?"]
    rows = rows_of(lg, nat)
    print(text_table(headers, rows))
    notes = details(lg, nat, idle, args.repeat)
    print("\n".join(notes))
    body = "\n\n".join([
        "## Prune (`lastgood prune`)",
        "Target: dry run on the 100k LangGraph DB ≤ 3 s, on the 1M native store ≤ 5 s; apply ≤ 30 s. "
        "Rerun: `python benchmarks/bench_prune.py`.",
        markdown_table(headers, rows), "\n".join(f"- {n}" for n in notes), f"Machine: {machine_line(info)}."])
    if not args.no_write:
        write_section(SECTION, body)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
