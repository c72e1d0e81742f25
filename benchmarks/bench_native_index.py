"""Index a 1M-checkpoint native store, cold and warm, next to its anchor.

    python benchmarks/bench_native_index.py [--checkpoints 1000000] [--runs 2000]
                                            [--cache benchmarks/.cache] [--repeat 3]

Target (PRODUCT.md): index a 1M-checkpoint native store — ≥ 10× faster than
``pandas.read_json(lines=True)`` of the same catalog (cold); warm reopen
< 0.5 s; peak RSS < 1 GB.

Steps: generate the store once into the cache (``sample_data/generate.py``'s
``write_large``; reused while its size matches), export the same catalog
entries (every Parquet part and tail line, same fields, same line format as
the tail) to one JSON-lines file for the anchor, then, in one run and each in
a fresh subprocess, ``--repeat`` times:

* anchor: ``pandas.read_json(path, lines=True)``;
* cold: ``lastgood index STORE`` exactly as a user types it (default
  options: listing + catalog-level structure checks; the store is beyond
  LASTGOOD_AUTO_WALK_ENTRIES, so no blob file is looked at, and the blobs
  exceed the automatic data check's byte budget) into a fresh empty
  LASTGOOD_HOME (then ``SELECT count(*) FROM checkpoints`` must equal the
  number of entries, and ``blobs_pending`` every checkpoint);
* warm reopen: the same command again on that home (nothing changed);
* the same two through the Python API (``open_catalog`` + ``index_store``),
  to separate in-process time from interpreter start-up and imports;
* reference: cold ``lastgood index STORE --check none`` (listing only;
  ``--reference-repeat`` runs). ``--check DEPTH`` measures another depth instead
  of the default.

Prints the table and writes it to the ``native-index`` section of
docs/benchmarks.md (``--no-write`` to skip).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import (
    BYTECODE_NOTE,
    cache_bytecode,
    ROOT,
    ChildResult,
    Samples,
    fmt_bytes,
    fmt_ratio,
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

SECTION = "native-index"
SEED = 7
GB = 1024**3
COLD_TARGET = 10.0
WARM_TARGET = 0.5
RSS_TARGET = 1 * GB
STRUCTURE_TARGET = 10.0

GENERATE = """
import json, sys, time
from pathlib import Path
sys.path.insert(0, sys.argv[1])
sys.path.insert(0, sys.argv[1] + "/sample_data")
from generate import write_large
out, seed, runs, checkpoints = Path(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
started = time.perf_counter()
result = write_large(out, seed, runs, checkpoints)
print(json.dumps({"seconds": time.perf_counter() - started, "manifest": result}))
"""

EXPORT = """
import json, sys, time
from pathlib import Path
import pyarrow.parquet as pq
sys.path.insert(0, sys.argv[1])
from lastgood.readers.native import format as nf
store, target = Path(sys.argv[2]), Path(sys.argv[3])
started = time.perf_counter()
n = 0
tmp = target.with_suffix(".tmp")
with open(tmp, "wb") as out:
    for part in sorted((store / nf.PARTS).glob("*.parquet")):
        for batch in pq.ParquetFile(part).iter_batches(batch_size=65536):
            rows = batch.to_pylist()
            out.write(b"".join(nf.entry_line(r) for r in rows))
            n += len(rows)
    for tail in sorted((store / nf.TAIL).glob("*.jsonl")):
        if tail.name.startswith("."):
            continue
        for line in tail.read_bytes().splitlines():
            if line.strip():
                out.write(line.rstrip(b"\\n") + b"\\n")
                n += 1
tmp.replace(target)
print(json.dumps({"entries": n, "seconds": time.perf_counter() - started}))
"""

ANCHOR = """
import json, sys, time
t0 = time.perf_counter()
import pandas
t1 = time.perf_counter()
frame = pandas.read_json(sys.argv[1], lines=True)
t2 = time.perf_counter()
print(json.dumps({"import": t1 - t0, "call": t2 - t1, "rows": len(frame)}))
"""

API = """
import json, sys, time
t0 = time.perf_counter()
sys.path.insert(0, sys.argv[1])
from lastgood.config import load_settings
from lastgood.stores import index_store, open_catalog
t1 = time.perf_counter()
catalog = open_catalog(load_settings(sys.argv[3]))
t2 = time.perf_counter()
summary = index_store(catalog, sys.argv[2], check=sys.argv[4])
t3 = time.perf_counter()
print(json.dumps({"import": t1 - t0, "open_catalog": t2 - t1, "index_store": t3 - t2,
                  "call": t3 - t1, "refresh": summary.refresh.seconds,
                  "structure": summary.verify.seconds if summary.verify and summary.verify.depth == "structure" else None,
                  "checkpoints_read": summary.refresh.checkpoints, "full": summary.refresh.full,
                  "changed": summary.refresh.changed}))
"""

COUNT = """
import json, sys
import duckdb
con = duckdb.connect(sys.argv[1], read_only=True)
total = con.execute("SELECT count(*) FROM checkpoints").fetchone()[0]
distinct = con.execute("SELECT count(DISTINCT checkpoint_id) FROM checkpoints").fetchone()[0]
print(json.dumps({"count": total, "distinct": distinct}))
"""


# ---- data -----------------------------------------------------------------------

def prepare_store(cache: Path, checkpoints: int, runs: int) -> tuple[Path, dict[str, Any]]:
    folder = cache / f"native-{checkpoints}x{runs}"
    store, stamp = folder / "store", folder / "generated.json"
    if stamp.exists() and (store / "lastgood-store.json").exists():
        info = json.loads(stamp.read_text())
        if (info.get("checkpoints"), info.get("runs"), info.get("seed")) == (checkpoints, runs, SEED):
            print(f"reusing {store} ({checkpoints:,} checkpoints, {runs:,} runs; "
                  f"generated earlier in {fmt_seconds(info['seconds'])})", file=sys.stderr)
            return store, info
    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    print(f"generating {checkpoints:,} checkpoints in {runs:,} runs into {store} …", file=sys.stderr)
    child = python_child(GENERATE, str(ROOT), str(store), str(SEED), str(runs), str(checkpoints),
                         cwd=ROOT).check()
    info = {"checkpoints": checkpoints, "runs": runs, "seed": SEED,
            "seconds": child.report.get("seconds", child.wall), "manifest": child.report.get("manifest")}
    stamp.write_text(json.dumps(info, indent=2) + "\n")
    print(f"generated in {fmt_seconds(info['seconds'])}", file=sys.stderr)
    return store, info


def catalog_signature(store: Path) -> list[list[Any]]:
    files = sorted(p for d in ("catalog/parts", "catalog/tail") for p in (store / d).glob("*")
                   if p.is_file() and not p.name.startswith("."))
    return [[str(p.relative_to(store)), p.stat().st_size, p.stat().st_mtime_ns] for p in files]


def export_catalog(store: Path) -> tuple[Path, int]:
    """All catalog entries (parts + tail) as one JSON-lines file: the anchor's input."""
    target, stamp = store.parent / "catalog.jsonl", store.parent / "catalog.json"
    signature = catalog_signature(store)
    if target.exists() and stamp.exists():
        info = json.loads(stamp.read_text())
        if info.get("source") == signature:
            return target, int(info["entries"])
    child = python_child(EXPORT, str(ROOT), str(store), str(target), cwd=ROOT).check()
    entries = int(child.report["entries"])
    stamp.write_text(json.dumps({"source": signature, "entries": entries}) + "\n")
    print(f"exported {entries:,} catalog entries ({fmt_bytes(target.stat().st_size)}) to {target} "
          f"in {fmt_seconds(child.report['seconds'])}", file=sys.stderr)
    return target, entries


# ---- measuring ---------------------------------------------------------------------

def lastgood_command() -> list[str]:
    script = Path(sys.executable).with_name("lastgood")
    return [str(script)] if script.exists() else [sys.executable, "-m", "lastgood.cli.main"]


IDLE: list[float] = []  # idle CPU share seen just before each measurement
IDLE_WAIT = 30.0
CHECK = "auto"  # the depth measured: "auto" is what `lastgood index STORE` does by default


def settle() -> None:
    """Give a busy shared machine a moment (bounded) to go quiet before a measurement."""
    idle = wait_for_idle(0.7, IDLE_WAIT) if IDLE_WAIT > 0 else None
    if idle is not None:
        IDLE.append(idle)


def cli_index(store: Path, home: Path, check: str, timeout: float | None = None) -> ChildResult:
    settle()
    # exactly as a user types it: default options, the table a terminal shows (read back below)
    command = [*lastgood_command(), "index", str(store), *(() if check == "auto" else ("--check", check))]
    return run_child(command, cwd=ROOT, extra_env={"LASTGOOD_HOME": str(home)}, timeout=timeout).check()


def printed_count(text: str, pattern: str) -> int | None:
    """A number the command printed for people (``pattern`` has one group), or None."""
    found = re.search(pattern, text)
    return int(found.group(1)) if found else None


def api_index(store: Path, home: Path, check: str) -> ChildResult:
    settle()
    return python_child(API, str(ROOT), str(store), str(home), check, cwd=ROOT).check()


def count_rows(home: Path) -> dict[str, int]:
    return python_child(COUNT, str(home / "index.duckdb"), cwd=ROOT).check().report


def fresh_home(homes: Path, name: str) -> Path:
    home = homes / name
    if home.exists():
        shutil.rmtree(home)
    home.mkdir(parents=True)
    return home


class Series:
    """Wall, in-process call time and peak RSS of one measured thing over repeats."""

    def __init__(self) -> None:
        self.wall, self.call, self.rss, self.cpu = Samples(), Samples(), Samples(), Samples()
        self.reports: list[dict[str, Any]] = []

    def add(self, child: ChildResult, call_key: str | None = "call") -> None:
        self.wall.add(child.wall)
        self.rss.add(child.peak_rss)
        self.cpu.add(child.user + child.system)
        report = child.report
        self.reports.append(report)
        if call_key and call_key in report:
            self.call.add(report[call_key])

    def median_of(self, key: str) -> float:
        values = [r[key] for r in self.reports if key in r]
        return Samples(values).median


def measure(store: Path, jsonl: Path, entries: int, repeat: int, structure_repeat: int,
            structure_timeout: float, homes: Path) -> dict[str, Any]:
    s: dict[str, Series] = {k: Series() for k in
                            ("anchor", "cold_cli", "warm_cli", "cold_api", "warm_api", "structure", "verify")}
    counts, structure_note = [], None
    for i in range(repeat):
        print(f"round {i + 1}/{repeat}: anchor …", file=sys.stderr)
        settle()
        child = python_child(ANCHOR, str(jsonl), cwd=ROOT).check()
        if child.report.get("rows") != entries:
            raise SystemExit(f"anchor read {child.report.get('rows')} rows, expected {entries}")
        s["anchor"].add(child)

        print(f"round {i + 1}/{repeat}: lastgood index (CLI) cold + warm …", file=sys.stderr)
        home = fresh_home(homes, "cli")
        child = cli_index(store, home, CHECK)
        read = printed_count(child.stdout, r"read (\d+) catalog rows")
        pending = printed_count(child.stdout, r"blob check pending for (\d+) checkpoint")
        if CHECK == "auto" and pending != entries:  # beyond LASTGOOD_AUTO_WALK_ENTRIES
            raise SystemExit(f"cold index left {pending} blob checks pending, expected {entries}")
        s["cold_cli"].add(child, None)
        count = count_rows(home)
        counts.append(count)
        if count["count"] != entries or count["distinct"] != entries or read != entries:
            raise SystemExit(f"index holds {count} rows (read {read}), catalog has {entries} entries")
        child = cli_index(store, home, CHECK)
        if printed_count(child.stdout, r"read (\d+) catalog rows") != 0:
            raise SystemExit("warm reopen read catalog rows of an unchanged store")
        s["warm_cli"].add(child, None)
        print(f"round {i + 1}/{repeat}: lastgood verify (structure, every checkpoint again) …", file=sys.stderr)
        settle()
        command = [*lastgood_command(), "verify", str(store)]
        child = run_child(command, cwd=ROOT, extra_env={"LASTGOOD_HOME": str(home)})
        if child.returncode not in (0, 1) or printed_count(child.stdout, r"checked (\d+) checkpoints") != entries:
            raise SystemExit(f"verify failed or checked too few: {child.stderr[-500:]}")
        s["verify"].add(child, None)
        shutil.rmtree(home)

        print(f"round {i + 1}/{repeat}: index_store (API) cold + warm …", file=sys.stderr)
        home = fresh_home(homes, "api")
        s["cold_api"].add(api_index(store, home, CHECK))
        s["warm_api"].add(api_index(store, home, CHECK), "index_store")
        shutil.rmtree(home)

        if i < structure_repeat:
            print(f"round {i + 1}/{repeat}: lastgood index --check none (cold, reference) …", file=sys.stderr)
            home = fresh_home(homes, "structure")
            try:
                s["structure"].add(cli_index(store, home, "none", timeout=structure_timeout), None)
            except TimeoutError:
                structure_note = f"stopped after {fmt_seconds(structure_timeout)}"
            shutil.rmtree(home)
    return {"series": s, "counts": counts, "structure_note": structure_note}


# ---- reporting ---------------------------------------------------------------------

def _opt() -> str:
    return "" if CHECK == "auto" else f" --check {CHECK}"


def met(ok: bool) -> str:
    return "yes" if ok else "**no**"


def build_rows(m: dict[str, Any]) -> list[list[str]]:
    s = m["series"]
    anchor, cold, warm = s["anchor"], s["cold_cli"], s["warm_cli"]
    cold_api, warm_api, structure = s["cold_api"], s["warm_api"], s["structure"]
    rows = [
        [f"cold index, `lastgood index STORE{_opt()}` (whole command)", fmt_seconds(cold.wall.median),
         f"{fmt_seconds(anchor.wall.median)} (`python -c` import pandas + read_json)",
         fmt_ratio(anchor.wall.median, cold.wall.median), "≥ 10×",
         met(anchor.wall.median / cold.wall.median >= COLD_TARGET)],
        ["cold index, in-process (`open_catalog` + `index_store`)", fmt_seconds(cold_api.call.median),
         f"{fmt_seconds(anchor.call.median)} (the `read_json` call alone)",
         fmt_ratio(anchor.call.median, cold_api.call.median), "≥ 10×",
         met(anchor.call.median / cold_api.call.median >= COLD_TARGET)],
        [f"warm reopen, `lastgood index STORE{_opt()}` (whole command)", fmt_seconds(warm.wall.median),
         "—", "—", "< 0.5 s", met(warm.wall.median < WARM_TARGET)],
        ["warm reopen, in-process `index_store`", fmt_seconds(warm_api.call.median),
         "—", "—", "< 0.5 s", met(warm_api.call.median < WARM_TARGET)],
        ["structure check in the cold index (in-process, `verify_store`: it records what the listing's one "
         "pass over the part found, see below; catalog level: the blob files are left to `verify`)",
         fmt_seconds(cold_api.median_of("structure")), "—", "—", "≤ 10 s",
         met(cold_api.median_of("structure") <= STRUCTURE_TARGET)],
        ["structure check, `lastgood verify STORE` (whole command, all checkpoints again, every blob file)",
         fmt_seconds(s["verify"].wall.median), "—", "—", "≤ 10 s",
         met(s["verify"].wall.median <= STRUCTURE_TARGET)],
        ["peak RSS, cold `lastgood index`", fmt_bytes(cold.rss.worst),
         f"{fmt_bytes(anchor.rss.worst)} (read_json)", fmt_ratio(anchor.rss.worst, cold.rss.worst),
         "< 1 GB", met(cold.rss.worst < RSS_TARGET)],
        ["peak RSS, warm `lastgood index`", fmt_bytes(warm.rss.worst), "—", "—", "< 1 GB",
         met(warm.rss.worst < RSS_TARGET)],
    ]
    if len(structure.wall) or m["structure_note"]:
        value = fmt_seconds(structure.wall.median) if len(structure.wall) else m["structure_note"]
        ratio = fmt_ratio(anchor.wall.median, structure.wall.median) if len(structure.wall) else "—"
        if m["structure_note"] and len(structure.wall):
            value += f" ({m['structure_note']} once)"
        rss = f", peak RSS {fmt_bytes(structure.rss.worst)}" if len(structure.wall) else ""
        rows.append(["(reference) cold `lastgood index STORE --check none`, listing only", value + rss,
                     f"{fmt_seconds(anchor.wall.median)} (as row 1)", ratio, "— (no target)", "—"])
    return rows


def details(m: dict[str, Any], entries: int, store_info: dict[str, Any], jsonl: Path,
            store: Path, repeat: int) -> list[str]:
    s = m["series"]
    samples = lambda xs: ", ".join(fmt_seconds(x) for x in xs.values)
    cold_api, warm_api = s["cold_api"], s["warm_api"]
    parts = sorted((store / "catalog" / "parts").glob("*.parquet"))
    tails = sorted((store / "catalog" / "tail").glob("*.jsonl"))
    lines = [
        ("Default index of a store beyond `LASTGOOD_AUTO_WALK_ENTRIES` (100,000 checkpoints): listing plus "
         "catalog-level structure checks (saves, codecs, locations, lineage, heads); no blob file is "
         f"looked at, and each cold run reported `blobs_pending` = {entries:,} (ls/index say "
         "\"blob check pending\"). `lastgood verify STORE` walks every blob file (presence and size)."),
        ("How the cold index works: the store's one compacted part is copied into the index's home "
         "(`$LASTGOOD_HOME/parts/`, ~40 ms), the copy is read once by DuckDB to validate every row and count "
         "what the catalog checks would look at (unknown codecs and odd locations, parents missing or going "
         "back, ids in several runs, size spikes, events: `lastgood.readers.native.profile`), and the index's "
         "`checkpoints` view reads the copy in place (`lastgood.index.attached`): no row is copied into DuckDB. "
         "A count that is not zero runs that check's own query; the first write that gives one checkpoint a "
         "status of its own copies the rows into the index's table (~1 s per million)."),
        (f"Store: {entries:,} checkpoints in {store_info['runs']:,} runs "
        f"(`write_large`, seed {store_info.get('seed')}; generated once in "
        f"{fmt_seconds(store_info['seconds'])} and cached); catalog = {len(parts)} Parquet part(s) "
        f"({fmt_bytes(sum(p.stat().st_size for p in parts))}) + {len(tails)} tail file(s). "
        f"Anchor input: the same {entries:,} entries as one JSON-lines file "
        f"({fmt_bytes(jsonl.stat().st_size)}), tail-line format."),
        (f"Medians of {repeat} runs, each in a fresh process; cold = fresh empty LASTGOOD_HOME "
        "(the OS page cache is warm: store files were read before); peak RSS = worst of the runs. "
        f"After each cold index `SELECT count(*) FROM checkpoints` = {m['counts'][0]['count']:,} "
        f"(distinct ids {m['counts'][0]['distinct']:,}) = catalog entries."),
        (f"Samples — anchor process: {samples(s['anchor'].wall)}; read_json call: "
        f"{samples(s['anchor'].call)}; cold CLI: {samples(s['cold_cli'].wall)}; warm CLI: "
        f"{samples(s['warm_cli'].wall)}."),
        (f"Where the time goes (medians, API runs): imports {fmt_seconds(cold_api.median_of('import'))}; "
        f"cold: open_catalog {fmt_seconds(cold_api.median_of('open_catalog'))}, index_store "
        f"{fmt_seconds(cold_api.median_of('index_store'))} (refresh "
        f"{fmt_seconds(cold_api.median_of('refresh'))}); warm: open_catalog "
        f"{fmt_seconds(warm_api.median_of('open_catalog'))}, index_store "
        f"{fmt_seconds(warm_api.median_of('index_store'))}; pandas import in the anchor "
        f"{fmt_seconds(s['anchor'].median_of('import'))}."),
        f"CPU time (user+sys, medians) — anchor process {fmt_seconds(s['anchor'].cpu.median)}; "
        f"cold CLI {fmt_seconds(s['cold_cli'].cpu.median)}; warm CLI {fmt_seconds(s['warm_cli'].cpu.median)}; "
        f"verify CLI {fmt_seconds(s['verify'].cpu.median)}"
        + (f"; --check none CLI {fmt_seconds(s['structure'].cpu.median)}" if len(s['structure'].cpu) else "")
        + ". DuckDB and Arrow use every CPU, `read_json` one, so CPU time is the fairer view on a busy machine.",
    ]
    lines.append("Bytecode: Lastgood's modules compiled once before measuring (as an installed package has "
                 "them; an environment with PYTHONDONTWRITEBYTECODE=1 recompiles them in every command, "
                 "~0.1 s each)" + (f" — {BYTECODE_NOTE[0]}" if BYTECODE_NOTE else "") + ".")
    if IDLE:
        lines.append(f"The machine is shared: idle CPU share just before each measurement was "
                     f"{min(IDLE):.0%}–{max(IDLE):.0%} (median {Samples(IDLE).median:.0%}; "
                     f"each waited ≤ {IDLE_WAIT:.0f} s for ≥ 70 %); wall times on a busy machine run long.")
    return lines


def main(argv: list[str] | None = None) -> int:
    global IDLE_WAIT, CHECK
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--checkpoints", type=int, default=1_000_000)
    parser.add_argument("--runs", type=int, default=2000)
    parser.add_argument("--cache", default=str(ROOT / "benchmarks" / ".cache"))
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--check", default="auto", choices=("auto", "data", "structure", "none"),
                        help="the depth to measure (default: the command's own default)")
    parser.add_argument("--reference-repeat", "--structure-repeat", dest="structure_repeat", type=int,
                        default=1, help="cold --check none reference runs (default 1)")
    parser.add_argument("--structure-timeout", type=float, default=600.0,
                        help="give up on one reference run after this many seconds")
    parser.add_argument("--idle-wait", type=float, default=30.0,
                        help="wait up to this many seconds for a quiet machine before each measurement")
    parser.add_argument("--no-write", action="store_true", help="print only; leave docs/benchmarks.md alone")
    args = parser.parse_args(argv)

    IDLE_WAIT = args.idle_wait
    CHECK = args.check
    cache_bytecode()
    info = machine_info()
    cache = Path(args.cache).resolve()
    started = time.perf_counter()
    store, store_info = prepare_store(cache, args.checkpoints, args.runs)
    jsonl, entries = export_catalog(store)
    homes = store.parent / "homes"
    structure_repeat = args.structure_repeat
    m = measure(store, jsonl, entries, args.repeat, structure_repeat, args.structure_timeout, homes)
    shutil.rmtree(homes, ignore_errors=True)

    headers = ["what", "time", "anchor", "ratio", "target", "met?"]
    rows = build_rows(m)
    notes = details(m, entries, store_info, jsonl, store, args.repeat)
    title = f"Index a {args.checkpoints:,}-checkpoint native store (cold / warm reopen)"
    command = "python benchmarks/bench_native_index.py"
    if (args.checkpoints, args.runs) != (1_000_000, 2000):
        command += f" --checkpoints {args.checkpoints} --runs {args.runs}"
    body = "\n\n".join([
        f"## {title}",
        "Target: ≥ 10× faster than `pandas.read_json(lines=True)` of the same catalog (cold); "
        "warm reopen < 0.5 s; peak RSS < 1 GB. Rerun: `" + command + "`.",
        markdown_table(headers, rows),
        "\n".join(f"- {line}" for line in notes),
        f"Machine: {machine_line(info)}.",
    ])
    print()
    print(title)
    print(text_table(headers, [[c.replace("`", "").replace("**", "") for c in r] for r in rows]))
    print()
    for line in notes:
        print(f"- {line}")
    print(f"Machine: {machine_line(info)}")
    print(f"(benchmark took {fmt_seconds(time.perf_counter() - started)})", file=sys.stderr)
    if not args.no_write:
        path = write_section(SECTION, body)
        print(f"wrote section {SECTION!r} of {path}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
