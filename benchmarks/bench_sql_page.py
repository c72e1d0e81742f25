"""The SQL page rendering a 10,000-row result in Chromium, next to a bare Streamlit grid of the same size.

    python benchmarks/bench_sql_page.py [--checkpoints 20000] [--repeat 3] [--no-write]

Target (the integrations issue): the SQL page renders a 10,000-row result ≤ 2 s.

A native store of ``--checkpoints`` checkpoints in 20 runs (``sample_data/generate.py --no-damage``,
cached in ``benchmarks/.cache``) is indexed once; ``lastgood ui STORE`` runs on that home as typed.
Each round opens, in a new empty browser profile, the page's link with the query in it
(``/sql?sql=…``, what the page writes into the address bar) and stops the clock when the page
shows the query's count (``10,000 row(s)``) and the grid is drawn (the watch of
``bench_ui_open.py``: tested in the animation frame after every change, timed in the frame after
the painting one). The query::

    SELECT run_id, checkpoint_id, step, created_at, trigger, status, size_bytes FROM checkpoints
    ORDER BY created_at DESC LIMIT 10000

Anchor, same run, opened the same way: a Streamlit app (``streamlit run``) that shows a caption and
``st.dataframe`` of a 10,000-row Arrow table of the same seven columns, made in the app — the
floor under any Streamlit page showing such a grid. Writes the ``sql-page`` section of
docs/benchmarks.md (``--no-write`` to skip).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any
from urllib.parse import quote

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_ui_open import (  # noqa: E402
    CHROMIUM, CHROMIUM_ARGS, free_port, lastgood_command, spawn_floor, spawn_ui, stop_group, wait_for_listener,
    watch_script,
)
from common import (  # noqa: E402
    ROOT, Samples, cache_bytecode, fmt_seconds, machine_info, machine_line, markdown_table, run_child, text_table,
    wait_for_idle, write_section,
)

SECTION = "sql-page"
TARGET = 2.0
ROWS = 10_000
QUERY = ("SELECT run_id, checkpoint_id, step, created_at, trigger, status, size_bytes FROM checkpoints\n"
         f"ORDER BY created_at DESC LIMIT {ROWS}")
GRID = f"""() => document.body.innerText.includes('{ROWS:,} row(s)')
  && [...document.querySelectorAll('[data-testid="stDataFrame"] canvas')]
  .some(el => {{ const box = el.getBoundingClientRect(); return box.width > 0 && box.height > 0; }})"""
WATCH = watch_script({"grid": GRID}, variable="__sqlDrawn")
FLOOR = f"""import datetime as dt
import pyarrow as pa
import streamlit as st
n = {ROWS}
start = dt.datetime(2026, 11, 1, tzinfo=dt.timezone.utc)
table = pa.table({{"run_id": [f"run-{{i % 20:03d}}" for i in range(n)],
                  "checkpoint_id": [f"01a19d12-03f0-7a67-a93c-{{i:012x}}" for i in range(n)],
                  "step": list(range(n)), "created_at": [start + dt.timedelta(seconds=i) for i in range(n)],
                  "trigger": ["periodic"] * n, "status": ["ok"] * n, "size_bytes": [4096 + i for i in range(n)]}})
st.title("SQL")
st.caption(f"{{n:,}} row(s) · 7 column(s)")
st.dataframe(table, hide_index=True)
"""


def prepare(cache: Path, checkpoints: int) -> tuple[Path, Path]:
    folder = cache / f"sql-page-{checkpoints}"
    store, home = folder / "store", folder / "home"
    if not (store / "lastgood-store.json").exists():
        print(f"generating {checkpoints:,} checkpoints into {store} …", file=sys.stderr)
        run_child([sys.executable, str(ROOT / "sample_data" / "generate.py"), "--out", str(store), "--checkpoints",
                   str(checkpoints), "--runs", "20", "--no-damage", "--manifest", str(folder / "manifest.json")],
                  cwd=ROOT).check()
    if not (home / "index.duckdb").exists():
        run_child([*lastgood_command(), "index", str(store), "--home", str(home)], cwd=ROOT).check()
    return store, home


def drawn(page: Any, url: str, timeout: float) -> float:
    started = time.time()
    page.goto(url, timeout=timeout * 1000)
    page.wait_for_function(GRID, timeout=timeout * 1000, polling=50)
    deadline = time.perf_counter() + 2.0
    while time.perf_counter() < deadline:
        recorded = page.evaluate("() => (window.__sqlDrawn || {}).grid ?? null")
        if recorded:
            return recorded / 1000 - started
        time.sleep(0.02)
    return time.time() - started


def measure(store: Path, home: Path, folder: Path, repeat: int, timeout: float) -> dict[str, Any]:
    from playwright.sync_api import sync_playwright

    page_s, floor_s, idle = Samples(), Samples(), []
    log, app = folder / "ui.log", folder / "floor" / "grid.py"
    app.parent.mkdir(parents=True, exist_ok=True)
    app.write_text(FLOOR)
    port, floor_port = free_port(), free_port()
    proc, floor = spawn_ui(str(store), home, port, log), spawn_floor(app, floor_port, log)
    link = f"http://127.0.0.1:{port}/sql?sql={quote(QUERY)}"
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            try:
                wait_for_listener(proc, port, time.perf_counter() + timeout, log)
                wait_for_listener(floor, floor_port, time.perf_counter() + timeout, log)
                for i in range(repeat):
                    print(f"round {i + 1}/{repeat}: the SQL page's link, then the bare grid …", file=sys.stderr)
                    for samples, url in ((page_s, link), (floor_s, f"http://127.0.0.1:{floor_port}")):
                        context = browser.new_context(viewport={"width": 1280, "height": 900})
                        context.add_init_script(WATCH)
                        seen = wait_for_idle(0.7, 20.0)
                        if seen is not None:
                            idle.append(seen)
                        samples.add(drawn(context.new_page(), url, timeout))
                        context.close()
            finally:
                browser.close()
    finally:
        stop_group(proc)
        stop_group(floor)
    return {"page": page_s, "floor": floor_s, "idle": idle}


def report(m: dict[str, Any], checkpoints: int, repeat: int) -> str:
    page, floor = m["page"], m["floor"]
    samples = lambda s: ", ".join(fmt_seconds(x) for x in s.values)  # noqa: E731
    rows = [[f"SQL page, {ROWS:,}-row result (link → count and grid drawn)", fmt_seconds(page.median),
             f"{fmt_seconds(floor.median)} (bare `st.dataframe` of {ROWS:,} × 7)",
             f"{page.median / floor.median:.1f}× the anchor", f"≤ {TARGET:g} s",
             "yes" if page.median <= TARGET else "**no**"]]
    lines = [
        markdown_table(["what", "Lastgood", "anchor (same run)", "ratio", "target", "met"], rows), "",
        f"The query `{QUERY.replace(chr(10), ' ')}` over a {checkpoints:,}-checkpoint native store, opened by "
        f"the page's own link in a new, empty browser profile each round (Chromium, Playwright); medians of "
        f"{repeat} rounds. Samples — SQL page: {samples(page)}; anchor: {samples(floor)}. The page runs the query "
        "in the read-only sandbox (redacting views) and sends the first 10,000 rows with the true count.", "",
        f"Idle CPU share before the measurements: {', '.join(f'{x:.0%}' for x in m['idle']) or 'not measured'}.", "",
        machine_line(machine_info(("duckdb", "pyarrow", "streamlit"))),
    ]
    return "## SQL page: a 10,000-row result in Chromium\n\n" + "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--checkpoints", type=int, default=20_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--cache", type=Path, default=ROOT / "benchmarks" / ".cache")
    parser.add_argument("--timeout", type=float, default=60.0)
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args()
    cache_bytecode()
    store, home = prepare(args.cache, args.checkpoints)
    m = measure(store, home, store.parent, args.repeat, args.timeout)
    print(text_table(["SQL page", "anchor", "page / anchor"],
                     [[fmt_seconds(m["page"].median), fmt_seconds(m["floor"].median),
                       f"{m['page'].median / m['floor'].median:.1f}×"]]))
    body = report(m, args.checkpoints, args.repeat)
    if args.no_write:
        print(body)
    else:
        print(f"wrote {write_section(SECTION, body)}", file=sys.stderr)


if __name__ == "__main__":
    main()
