"""Benchmark: `restore` on LangGraph SQLite databases of 1k, 10k and 100k checkpoints.

Target (PRODUCT.md): restore on a 100k LangGraph DB ≤ 100 ms, independent of
history length. Each database is written by real LangGraph graphs
(``sample_data/generate_langgraph.py``, 63-checkpoint threads), copied to a
scratch file (the cache stays pristine), indexed once, then restored
``--repeat`` times on different threads in one fresh child process:

- **apply** = ``recovery.apply_plan`` without the index refresh: the write
  transaction (re-check the head, copy the checkpoint row, append the journal
  entry) plus the check through ``SqliteSaver.get_tuple``;
- **plan** = the dry run (diff head → target, side effects after the target);
- **refresh** = the incremental re-index that makes ``ls`` show the new head.

The anchor is LangGraph's own write of one checkpoint (``SqliteSaver.put`` of
the same checkpoint, same DB) — what any fork costs at the storage level.

    .venv/bin/python benchmarks/bench_restore.py [--repeat 7] [--no-write]

Writes the ``restore`` section of docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import (  # noqa: E402
    ROOT,
    fmt_seconds,
    machine_info,
    machine_line,
    markdown_table,
    python_child,
    run_child,
    text_table,
    write_section,
)

SECTION = "restore"
SEED = 7
STEPS = 63
SIZES = {"1k": 16, "10k": 160, "100k": 1600}  # threads of 63 checkpoints
GENERATOR = ROOT / "sample_data" / "generate_langgraph.py"
CACHE = ROOT / "benchmarks" / ".cache"
TARGET_MS = 100.0

CHILD = r"""
import json, sqlite3, sys, time
from pathlib import Path
from lastgood.index import queries
from lastgood import recovery
from lastgood.index.catalog import Catalog
from lastgood.stores import index_store

db, home, repeat = sys.argv[1], Path(sys.argv[2]), int(sys.argv[3])
catalog = Catalog(home / "index.duckdb")
t0 = time.perf_counter()
store = index_store(catalog, db, check="none").store
index_s = time.perf_counter() - t0
with catalog.connect() as con:
    runs = [r[0] for r in con.execute(
        "SELECT DISTINCT run_id FROM checkpoints WHERE store_id = ? ORDER BY run_id", [store.store_id]).fetchall()]
picks = [runs[i * len(runs) // repeat] for i in range(repeat)]
applies, plans, refreshes, checks = [], [], [], []
for run in picks:
    rows = queries.list_checkpoints(catalog, store.store_id, run_id=run)
    target = rows[len(rows) // 2]["checkpoint_id"]
    t1 = time.perf_counter()
    plan = recovery.plan_restore(catalog, store, target)
    t2 = time.perf_counter()
    result = recovery.apply_plan(catalog, store, plan, reason="bench", operator="bench", refresh=False)
    t3 = time.perf_counter()
    recovery.refresh_index(catalog, store)
    t4 = time.perf_counter()
    plans.append(t2 - t1); applies.append(t3 - t2); refreshes.append(t4 - t3)
    checks.append(bool(result.check and result.check["ok"]))
# the anchor: LangGraph's own put of the same checkpoint (a fork at the storage level)
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer
conn = sqlite3.connect(db, check_same_thread=False)
saver = SqliteSaver(conn, serde=JsonPlusSerializer(allowed_msgpack_modules=None))
puts = []
for run in picks:
    tup = saver.get_tuple({"configurable": {"thread_id": run, "checkpoint_ns": ""}})
    t5 = time.perf_counter()
    saver.put(tup.parent_config or tup.config, tup.checkpoint, tup.metadata, {})
    puts.append(time.perf_counter() - t5)
conn.close()
journal = recovery.journal_report(store)
print(json.dumps({"index": index_s, "apply": applies, "plan": plans, "refresh": refreshes,
                  "put": puts, "checks_ok": all(checks), "chain_ok": journal["chain_ok"],
                  "entries": journal["entries"]}))
"""


def prepare(label: str, threads: int) -> Path:
    """A cached DB of ``threads`` × 63 checkpoints written by real LangGraph."""
    CACHE.mkdir(parents=True, exist_ok=True)
    db = CACHE / f"langgraph-{threads}x{STEPS}-seed{SEED}.sqlite"
    if db.exists() and db.with_name(db.name + ".json").exists():
        return db
    print(f"generating {label} ({threads} threads × {STEPS}) with LangGraph into {db} …", file=sys.stderr)
    child = run_child([sys.executable, str(GENERATOR), "--out", str(db), "--threads", str(threads),
                       "--steps", str(STEPS), "--seed", str(SEED), "--quiet"], cwd=ROOT).check()
    db.with_name(db.name + ".json").write_text(json.dumps(child.report, indent=2) + "\n")
    return db


def measure(db: Path, repeat: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="bench-restore-") as scratch:
        work = Path(scratch) / "work.sqlite"
        shutil.copyfile(db, work)
        child = python_child(CHILD, str(work), str(Path(scratch) / "home"), str(repeat), cwd=ROOT).check()
        report = dict(child.report)
    if not (report["checks_ok"] and report["chain_ok"] and report["entries"] == repeat):
        raise SystemExit(f"restore on {db.name}: a check failed: {report}")
    return report


def median_ms(values: list[float]) -> float:
    return statistics.median(values) * 1000


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=8)
    parser.add_argument("--sizes", default=",".join(SIZES), help="which DBs: 1k,10k,100k")
    parser.add_argument("--no-write", action="store_true", help="print only; leave docs/benchmarks.md alone")
    args = parser.parse_args(argv)
    info = machine_info(("duckdb", "langgraph", "langgraph-checkpoint-sqlite"))
    rows, results = [], {}
    for label in args.sizes.split(","):
        db = prepare(label, SIZES[label])
        m = measure(db, args.repeat)
        results[label] = m
        apply_ms = median_ms(m["apply"][1:])
        rows.append([label, f"{SIZES[label] * STEPS:,}", f"{median_ms(m['put']):.1f} ms",
                     f"{apply_ms:.1f} ms", f"{max(m['apply'][1:]) * 1000:.1f} ms",
                     f"{m['apply'][0] * 1000:.0f} ms",
                     f"{median_ms(m['plan']):.0f} ms", f"{median_ms(m['refresh']):.0f} ms",
                     fmt_seconds(m["index"]), "met" if apply_ms <= TARGET_MS else "missed"])
    headers = ["DB", "checkpoints", "anchor: SqliteSaver.put", "restore apply (median)", "apply (max)",
               "first apply in the process",
               "plan (dry run)", "index refresh after", "first index", f"≤ {TARGET_MS:.0f} ms"]
    print(text_table(headers, rows))
    applies = [median_ms(results[k]["apply"][1:]) for k in results]
    flat = max(applies) / min(applies) if applies and min(applies) else float("nan")
    body = "\n".join([
        "## Restore on LangGraph SQLite DBs of 1k, 10k and 100k checkpoints",
        "",
        markdown_table(headers, rows),
        "",
        f"Apply = the write transaction (`BEGIN IMMEDIATE`, re-check the head, copy the checkpoint row "
        f"with a new id, append the hash-chained journal entry, `COMMIT`) plus the check through "
        f"`SqliteSaver.get_tuple`; median and max of restores 2…{args.repeat} on different threads, "
        f"each the middle checkpoint of a {STEPS}-checkpoint thread, in one process. The first apply "
        "of a process is shown on its own: it also imports LangGraph's saver for the check and creates "
        "the journal table (a `lastgood restore` command pays it once, on top of Python start-up). "
        "Largest/smallest median across DB sizes: "
        f"{flat:.2f}× (flat = independent of the DB's history length: every statement is a primary-key "
        f"lookup; every thread here has {STEPS} checkpoints, so a thread with a much longer history of its "
        "own is not measured). The plan (dry run: state diff head → target, side effects after the target) and the "
        "incremental index refresh that makes `ls` show the new head are listed separately; they are "
        "not part of the ≤ 100 ms target. DBs generated by real LangGraph graphs "
        "(`sample_data/generate_langgraph.py`, seed 7), copied to a scratch file before each run.",
        "",
        f"Machine: {machine_line(info)}. The machine was shared with other work during this run.",
        "",
        "Rerun: `.venv/bin/python benchmarks/bench_restore.py`",
    ])
    if not args.no_write:
        path = write_section(SECTION, body)
        print(f"wrote section {SECTION!r} of {path}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
