"""`lastgood sql` over a 1M-checkpoint native index, next to the same query in a bare DuckDB process.

    python benchmarks/bench_sql.py [--store PATH] [--home PATH] [--repeat 5] [--no-write]

Target (the integrations issue): a ``GROUP BY run`` aggregate over a 1M-checkpoint native index in
≤ 1 s, the whole command as a user types it::

    lastgood sql STORE "SELECT run_id, count(*) AS checkpoints, sum(size_bytes) AS bytes
                        FROM checkpoints GROUP BY run_id ORDER BY run_id"

It refreshes the store's index (nothing changed: a reopen), checks the query, builds the read-only
sandbox with the views over that store's rows (the compacted part read in place, through the
read-only file system), runs it with the redacting views and prints the table.

Anchor, same run: the same aggregate in a bare ``python -c "import duckdb …"`` process over the
same index file (``duckdb.connect(index, read_only=True)``, the index's own ``checkpoints`` view,
``WHERE store_id = N``, rows printed) — what DuckDB alone costs, with no refresh, no sandbox and no
redaction. Also measured once each (whole command): the SQL page's example queries over the same
index, and the in-process split of one ``lastgood sql`` (imports, refresh, ``run_query``).

The store is made as the issue says (``sample_data/generate.py --out STORE --checkpoints 1000000
--no-damage``) into ``benchmarks/.cache/sql-1m`` unless ``--store`` names one, and indexed into
``--home`` (default beside it) unless it is there already. Writes the ``sql`` section of
docs/benchmarks.md (``--no-write`` to skip).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import (  # noqa: E402
    BYTECODE_NOTE, ROOT, ChildResult, Samples, cache_bytecode, fmt_seconds, machine_info, machine_line,
    markdown_table, python_child, run_child, text_table, wait_for_idle, write_section,
)

SECTION = "sql"
TARGET = 1.0
QUERY = ("SELECT run_id, count(*) AS checkpoints, sum(size_bytes) AS bytes FROM checkpoints "
         "GROUP BY run_id ORDER BY run_id")

ANCHOR = """
import json, sys, time
t0 = time.perf_counter()
import duckdb
con = duckdb.connect(sys.argv[1], read_only=True)
sid = con.execute("SELECT store_id FROM stores WHERE url = ?", [sys.argv[2]]).fetchone()[0]
rows = con.execute("SELECT run_id, count(*) AS checkpoints, sum(size_bytes) AS bytes FROM checkpoints "
                   "WHERE store_id = ? GROUP BY run_id ORDER BY run_id", [sid]).fetchall()
for row in rows:
    print(*row, sep="  ")
print(json.dumps({"rows": len(rows), "total": sum(r[1] for r in rows), "call": time.perf_counter() - t0}))
"""

SPLIT = """
import json, sys, time
t0 = time.perf_counter()
from lastgood.config import load_settings
from lastgood.index.sql import run_query
from lastgood.stores import index_store, open_catalog
t1 = time.perf_counter()
catalog = open_catalog(load_settings(sys.argv[2]))
store = index_store(catalog, sys.argv[1]).store
t2 = time.perf_counter()
table, total, _ = run_query(catalog, store.store_id, sys.argv[3], limit=None)
t3 = time.perf_counter()
print(json.dumps({"import": t1 - t0, "refresh": t2 - t1, "run_query": t3 - t2, "rows": total}))
"""


def lastgood() -> list[str]:
    script = Path(sys.executable).with_name("lastgood")
    return [str(script)] if script.exists() else [sys.executable, "-m", "lastgood"]


IDLE: list[float] = []


def settle() -> None:
    idle = wait_for_idle(0.7, 30.0)
    if idle is not None:
        IDLE.append(idle)


def prepare(store: Path, home: Path) -> None:
    if not (store / "lastgood-store.json").exists():
        print(f"generating 1,000,000 checkpoints into {store} (minutes) …", file=sys.stderr)
        run_child([sys.executable, str(ROOT / "sample_data" / "generate.py"), "--out", str(store), "--checkpoints",
                   "1000000", "--no-damage", "--manifest", str(store.parent / "manifest.json")], cwd=ROOT).check()
    if not (home / "index.duckdb").exists():
        print(f"indexing {store} into {home} …", file=sys.stderr)
        run_child([*lastgood(), "index", str(store), "--home", str(home)], cwd=ROOT).check()


def sql_command(store: Path, home: Path, query: str) -> ChildResult:
    settle()
    return run_child([*lastgood(), "sql", str(store), query, "--home", str(home)], cwd=ROOT).check()


def footer_rows(child: ChildResult) -> int:
    last = child.stdout.strip().splitlines()[-1]
    return int(last.split()[0].replace(",", ""))


def measure(store: Path, home: Path, repeat: int) -> dict[str, Any]:
    sql, anchor, cpu_sql, cpu_anchor, startup = Samples(), Samples(), Samples(), Samples(), Samples()
    printed: dict[str, Any] = {}
    for i in range(repeat):
        print(f"round {i + 1}/{repeat}: lastgood sql, then the bare duckdb process …", file=sys.stderr)
        child = sql_command(store, home, QUERY)
        sql.add(child.wall)
        cpu_sql.add(child.user + child.system)
        printed["lastgood"] = [line.split()[:3] for line in child.stdout.splitlines()[1:-1]]
        settle()
        bare = python_child(ANCHOR, str(home / "index.duckdb"), str(store), cwd=ROOT).check()
        anchor.add(bare.wall)
        cpu_anchor.add(bare.user + bare.system)
        printed["anchor"] = [line.split()[:3] for line in bare.stdout.splitlines()[:-1]]
        printed["total"] = bare.report["total"]
        settle()
        startup.add(run_child([sys.executable, "-c", "pass"], cwd=ROOT).check().wall)  # the interpreter alone
    if printed["lastgood"] != printed["anchor"]:
        raise SystemExit(f"lastgood sql and duckdb disagree:\n{printed['lastgood']}\n{printed['anchor']}")
    settle()
    split = python_child(SPLIT, str(store), str(home), QUERY, cwd=ROOT).check().report
    examples = {}
    from_examples = json.loads(run_child([sys.executable, "-c", "import json; from lastgood.index.sql import "
                                          "EXAMPLES; print(json.dumps(EXAMPLES[:3]))"], cwd=ROOT).check().stdout)
    for title, query in from_examples:
        child = sql_command(store, home, query)
        examples[title] = (child.wall, child.user + child.system, footer_rows(child))
    return {"sql": sql, "anchor": anchor, "startup": startup, "cpu_sql": cpu_sql, "cpu_anchor": cpu_anchor, "split": split,
            "examples": examples, "rows": len(printed["anchor"]), "total": printed["total"]}


def report(m: dict[str, Any], store: Path, repeat: int) -> str:
    sql, anchor = m["sql"], m["anchor"]
    ok = "yes" if sql.median <= TARGET else "**no**"
    rows = [["`lastgood sql STORE \"… GROUP BY run_id …\"` (whole command)", fmt_seconds(sql.median),
             f"{fmt_seconds(anchor.median)} (bare `duckdb` process, same index file, same aggregate)",
             f"{sql.median / anchor.median:.1f}× the anchor", "≤ 1 s", ok],
            ["the interpreter alone (`python -c pass`)", fmt_seconds(m["startup"].median), "—", "—", "—", "—"],
            ["CPU time (user+sys) of the two commands", fmt_seconds(m["cpu_sql"].median), fmt_seconds(m["cpu_anchor"].median),
             f"{m['cpu_sql'].median / m['cpu_anchor'].median:.1f}×", "—", "—"]]
    samples = lambda s: ", ".join(fmt_seconds(x) for x in s.values)  # noqa: E731
    split = m["split"]
    lines = [
        markdown_table(["what", "Lastgood", "anchor (same run)", "ratio", "target", "met"], rows),
        "",
        f"The query: `{QUERY}` over {m['total']:,} checkpoints in {m['rows']} runs (the store made by "
        "`sample_data/generate.py --checkpoints 1000000 --no-damage`, its compacted part read in place by the "
        f"index). Medians of {repeat} runs, each a fresh process; both print the same {m['rows']} rows "
        "(checked). Samples — lastgood sql: " + samples(sql) + "; anchor: " + samples(anchor) + "; `python -c pass`: "
        + samples(m["startup"]) + ".",
        "",
        "What the command does beyond the anchor: refreshes the store's index (a reopen, nothing changed), checks "
        "the query on DuckDB's parse, builds a private in-memory sandbox (the store's rows only; the part reached "
        "through a read-only file system; external access off, configuration locked), runs the query through the "
        "redacting views (every `run_id` is screened for secret shapes: ~0.1 s of CPU per million rows) and "
        f"redacts the result. In-process split of one run: imports {fmt_seconds(split['import'])}, refresh "
        f"(`index_store`) {fmt_seconds(split['refresh'])}, `run_query` {fmt_seconds(split['run_query'])}.",
        "",
        "The SQL page's example queries over the same index (whole command, one run each):",
        "",
        markdown_table(["example", "wall", "CPU", "rows"],
                       [[title, fmt_seconds(w), fmt_seconds(c), f"{n:,}"] for title, (w, c, n) in m["examples"].items()]),
        "",
        f"Idle CPU share before the measurements: {', '.join(f'{x:.0%}' for x in IDLE) or 'not measured'}. "
        "On a busy machine the CPU time and the ratio to the same-run anchor are the fairer view.",
        "",
        machine_line(machine_info()),
    ]
    if BYTECODE_NOTE:
        lines.append(f"Note: {BYTECODE_NOTE[0]}.")
    return "## SQL (`lastgood sql`) over a 1M-checkpoint index\n\n" + "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--store", type=Path, default=ROOT / "benchmarks" / ".cache" / "sql-1m" / "store")
    parser.add_argument("--home", type=Path, help="the index's home (default: beside the store)")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args()
    args.store = args.store.resolve()  # the anchor finds the store by the URL the index holds: absolute
    home = args.home or args.store.parent / "home"
    cache_bytecode()
    prepare(args.store, home)
    m = measure(args.store, home, args.repeat)
    body = report(m, args.store, args.repeat)
    print(text_table(["lastgood sql", "anchor", "lastgood / anchor"],
                     [[fmt_seconds(m["sql"].median), fmt_seconds(m["anchor"].median),
                       f"{m['sql'].median / m['anchor'].median:.1f}×"]]))
    if not args.no_write:
        print(f"wrote {write_section(SECTION, body)}", file=sys.stderr)
    else:
        print(body)


if __name__ == "__main__":
    main()
