"""The Overview and the Timeline on a 1M-checkpoint index, in Chromium: navigation → usable.

    python benchmarks/bench_pages_1m.py [--checkpoints 1000000] [--runs 2000] [--repeat 3]
                                        [--cache benchmarks/.cache] [--no-write]

Target (PRODUCT.md): pages on a 1M-checkpoint index, real Chromium — the
Overview and the Timeline usable ≤ 3 s after navigation.

The store is the 1M-checkpoint native store ``bench_native_index.py`` writes
(cached in ``benchmarks/.cache``; generated here when missing). It is indexed
once, as a user does (``lastgood index STORE``, default options), then
``lastgood ui STORE`` runs on that home exactly as typed, and Debian's
Chromium, driven by Playwright, navigates. The dashboard's background data
check of the store (a million blobs, at a lower CPU priority) runs during every
measurement, as it does for an operator who just opened the store.

Each measurement starts its clock just before the navigation and stops when the
page is usable, as the page itself records it (the watch of
``bench_ui_open.py``: in the animation frame after every change, then the frame
after the painting one):

* Overview: a metric's value and a figure's drawn marks on the screen (the
  Checkpoints metric must read 1.0M);
* Timeline: the chart's points drawn on the screen (Plotly), beside its
  checkpoint picker.

Measured ``--repeat`` rounds, each starting in a new, empty browser profile
(nothing cached): the Overview by its address (in the first round, the server's
first session, right after ``lastgood ui`` answers); the Timeline by a click on
its sidebar link (the session's first: Plotly's script not loaded yet); the
Overview by its link; the Timeline by its link again; the Overview by its
address (a reload); the Timeline by its address (scripts now in the profile's
cache); then, in another new profile, the Timeline by its address.

Anchors, same run, each opened by its address in a new profile: a two-element
Streamlit app (a title, one metric; navigation → the metric visible), the
floor under any page here; and a Streamlit app of a title, one 500-point Plotly
chart and a picker (→ its points drawn), the floor under a Plotly page opened
with nothing cached (Plotly's script is 4.7 MB to load and compile).
Writes the ``pages-1m`` section of docs/benchmarks.md (``--no-write`` to skip).
"""

from __future__ import annotations

import argparse
import shutil
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_native_index import prepare_store
from bench_ui_open import (
    CHROMIUM,
    CHROMIUM_ARGS,
    FLOOR_APP,
    METRIC_SHOWN,
    free_port,
    lastgood_command,
    spawn_floor,
    spawn_ui,
    stop_group,
    wait_for_listener,
    watch_script,
)
from lastgood.display.figures import compact  # the Overview's metric format (1.0M)
from common import (
    ROOT,
    Samples,
    cache_bytecode,
    fmt_seconds,
    machine_info,
    machine_line,
    markdown_table,
    run_child,
    text_table,
    wait_for_idle,
    write_section,
)

SECTION = "pages-1m"
TARGET = 3.0
OVERVIEW_FIGURE = """() => [...document.querySelectorAll(
    '[data-testid="stMarkdownContainer"] svg.lastgood-chart rect.mark, '
    + '[data-testid="stMarkdownContainer"] svg.lastgood-chart polygon.mark')]
  .some(el => { const box = el.getBoundingClientRect(); return box.width > 0 && box.height > 0; })"""
TIMELINE_POINTS = """() => [...document.querySelectorAll('.js-plotly-plot .scatterlayer path.point')]
  .some(el => { const box = el.getBoundingClientRect(); return box.width > 0 && box.height > 0; })
  && [...document.querySelectorAll('[data-testid="stSelectbox"]')].some(el => el.innerText.includes('Checkpoint'))"""
OVERVIEW_USABLE = f"() => ({METRIC_SHOWN})() && ({OVERVIEW_FIGURE})()"
# Records, per page kind, when it was first usable since the last reset (window.__pagesDrawnReset()):
# tested in the animation frame after every change, the time taken in the frame after the painting one.
WATCH = watch_script({"overview": OVERVIEW_USABLE, "timeline": TIMELINE_POINTS, "metric": METRIC_SHOWN},
                     variable="__pagesDrawn")
# The floor under a Plotly page: a Streamlit app of a title, one Plotly chart of 500 points and a picker
FLOOR_PLOTLY = """import plotly.graph_objects as go
import streamlit as st
st.title("Hello")
st.plotly_chart(go.Figure(go.Scatter(x=list(range(500)), y=list(range(500)), mode="markers")))
st.selectbox("Checkpoint", ["a", "b"])
"""
CONDITIONS = {"overview": OVERVIEW_USABLE, "timeline": TIMELINE_POINTS, "metric": METRIC_SHOWN}


def usable_after(page: Any, name: str, started_epoch: float, timeout: float) -> float:
    """Seconds from ``started_epoch`` until the page recorded ``name`` usable (Playwright's wait
    only says when to read the record; the time is the page's own)."""
    page.wait_for_function(CONDITIONS[name], timeout=timeout * 1000, polling=50)
    deadline = time.perf_counter() + 2.0
    while time.perf_counter() < deadline:
        recorded = page.evaluate(f"() => (window.__pagesDrawn || {{}})[{name!r}] ?? null")
        if recorded:
            return recorded / 1000 - started_epoch
        time.sleep(0.02)
    return time.time() - started_epoch  # no record (should not happen): Playwright's later reading


def goto(page: Any, url: str, name: str, timeout: float) -> float:
    started = time.time()
    page.goto(url, timeout=timeout * 1000)
    return usable_after(page, name, started, timeout)


def click_link(page: Any, label: str, name: str, timeout: float) -> float:
    page.evaluate("() => window.__pagesDrawnReset()")
    link = page.get_by_test_id("stSidebarNav").get_by_role("link", name=label)
    started = time.time()
    link.click()
    return usable_after(page, name, started, timeout)


def overview_checkpoints(page: Any) -> str:
    labels = page.get_by_test_id("stMetricLabel").all_inner_texts()
    values = page.get_by_test_id("stMetricValue").all_inner_texts()
    return dict(zip((k.strip() for k in labels), (v.strip() for v in values))).get("Checkpoints", "")


def settle(idle: list[float], wait: float) -> None:
    seen = wait_for_idle(0.7, wait) if wait else None
    if seen is not None:
        idle.append(seen)


def _new_context(browser: Any) -> Any:
    """A new, empty browser profile with the watch installed."""
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    context.add_init_script(WATCH)
    return context


def measure(store: Path, checkpoints: int, home: Path, folder: Path, repeat: int, timeout: float,
            idle_wait: float) -> dict[str, Any]:
    from playwright.sync_api import sync_playwright

    names = ("first", "overview_new", "timeline_first_link", "overview_link", "timeline_link", "overview_url",
             "timeline_again", "timeline_new", "floor", "floor_plotly")
    s: dict[str, Samples] = {name: Samples() for name in names}
    idle: list[float] = []
    log = folder / "ui.log"
    app = folder / "floor" / "hello.py"
    app.parent.mkdir(parents=True, exist_ok=True)
    app.write_text(FLOOR_APP)
    plotly_app = folder / "floor" / "plotly_app.py"
    plotly_app.write_text(FLOOR_PLOTLY)
    port, floor_port, plotly_port = free_port(), free_port(), free_port()
    proc = spawn_ui(str(store), home, port, log)
    floor = spawn_floor(app, floor_port, log)
    floor_plotly = spawn_floor(plotly_app, plotly_port, log)
    url = f"http://127.0.0.1:{port}"
    new_page = lambda: _new_context(browser).new_page()
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            try:
                wait_for_listener(proc, port, time.perf_counter() + timeout, log)
                wait_for_listener(floor, floor_port, time.perf_counter() + timeout, log)
                wait_for_listener(floor_plotly, plotly_port, time.perf_counter() + timeout, log)
                for i in range(repeat):
                    tag = f"round {i + 1}/{repeat}"
                    print(f"{tag}: Overview by address, Timeline and Overview by link, reloads …", file=sys.stderr)
                    page = new_page()
                    settle(idle, idle_wait)
                    s["first" if i == 0 else "overview_new"].add(goto(page, url, "overview", timeout))
                    shown, expected = overview_checkpoints(page), compact(checkpoints)
                    if shown != expected:
                        raise SystemExit(f"the Overview shows {shown!r} checkpoints, expected {expected!r}")
                    for key, step in (
                            ("timeline_first_link", lambda: click_link(page, "Timeline", "timeline", timeout)),
                            ("overview_link", lambda: click_link(page, "Overview", "overview", timeout)),
                            ("timeline_link", lambda: click_link(page, "Timeline", "timeline", timeout)),
                            ("overview_url", lambda: goto(page, url, "overview", timeout)),
                            ("timeline_again", lambda: goto(page, f"{url}/timeline", "timeline", timeout))):
                        settle(idle, idle_wait)
                        s[key].add(step())
                    page.context.close()
                    print(f"{tag}: Timeline by address in a new profile …", file=sys.stderr)
                    page = new_page()
                    settle(idle, idle_wait)
                    s["timeline_new"].add(goto(page, f"{url}/timeline", "timeline", timeout))
                    page.context.close()
                    print(f"{tag}: anchor, a two-element Streamlit app by address …", file=sys.stderr)
                    page = new_page()
                    settle(idle, idle_wait)
                    s["floor"].add(goto(page, f"http://127.0.0.1:{floor_port}", "metric", timeout))
                    page.context.close()
                    page = new_page()
                    settle(idle, idle_wait)
                    s["floor_plotly"].add(goto(page, f"http://127.0.0.1:{plotly_port}", "timeline", timeout))
                    page.context.close()
            finally:
                browser.close()
    finally:
        stop_group(proc)
        stop_group(floor)
        stop_group(floor_plotly)
    return {"samples": s, "idle": idle}


def report(m: dict[str, Any], info: dict[str, Any], index_seconds: float, repeat: int) -> tuple[list[list[str]],
                                                                                              list[str], bool]:
    s = m["samples"]
    floor = fmt_seconds(s["floor"].median)
    met = lambda x: "yes" if x <= TARGET else "**no**"
    keys = (("Overview, first visit after `lastgood ui STORE` answers (new profile)", "first"),
            ("Overview by its address, new profile (later rounds)", "overview_new"),
            ("Timeline by its sidebar link, the session's first (Plotly's script not loaded yet)",
             "timeline_first_link"),
            ("Overview by its sidebar link (from the Timeline)", "overview_link"),
            ("Timeline by its sidebar link again", "timeline_link"),
            ("Overview by its address (a reload)", "overview_url"),
            ("Timeline by its address (same profile: its scripts in the browser's cache)", "timeline_again"),
            ("Timeline by its address in a new profile (nothing cached)", "timeline_new"))
    plotly = fmt_seconds(s["floor_plotly"].median)
    anchor = lambda key: (f"{plotly} (a title, a 500-point Plotly chart and a picker, by address, new profile)"
                          if key == "timeline_new" else f"{floor} (two-element app, by address, new profile)")
    rows = [[what, fmt_seconds(s[key].median), anchor(key), f"≤ {TARGET:.0f} s", met(s[key].worst)]
            for what, key in keys if len(s[key])]
    ok = all(s[key].worst <= TARGET for _, key in keys if len(s[key]))
    samples = lambda key: ", ".join(fmt_seconds(x) for x in s[key].values)
    notes = [
        (f"Index: {info['checkpoints']:,} checkpoints in {info['runs']:,} runs, the native store of "
         f"`bench_native_index.py` (cached); indexed once by `lastgood index STORE` in "
         f"{fmt_seconds(index_seconds)}, then `lastgood ui STORE` on that home, the background data check of its "
         "blobs running (lower CPU priority) through every measurement."),
        (f"Medians of {repeat} rounds (the first visit: once); \"met\" asks the slowest sample to be within the "
         "target. Each round opens a new, empty browser profile. The clock starts just before the navigation "
         "(`page.goto`, or the click on the sidebar link) and stops when the page records itself usable: the "
         "Overview's metrics and a drawn figure, the Timeline's chart points drawn and its checkpoint picker "
         "(read in the animation frame after every change, the time taken in the frame after the painting "
         "one, as in `bench_ui_open.py`)."),
        "Samples — " + "; ".join(f"{what.split(' (')[0].replace('`', '')}: {samples(key)}"
                                 for what, key in keys if len(s[key]))
        + f"; two-element app: {samples('floor')}; Plotly app: {samples('floor_plotly')}.",
    ]
    if m["idle"]:
        notes.append(f"Idle CPU share just before each measurement: {min(m['idle']):.0%}–{max(m['idle']):.0%} "
                     "(the background data check is part of what runs).")
    return rows, notes, ok


def main(argv: list[str] | None = None) -> int:
    cache_bytecode()
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--checkpoints", type=int, default=1_000_000)
    parser.add_argument("--runs", type=int, default=2000)
    parser.add_argument("--cache", default=str(ROOT / "benchmarks" / ".cache"))
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--timeout", type=float, default=120.0)
    parser.add_argument("--idle-wait", type=float, default=0.0,
                        help="wait up to this long for ≥ 70 %% idle CPU before a measurement (0: don't)")
    parser.add_argument("--no-write", action="store_true", help="print only; leave docs/benchmarks.md alone")
    args = parser.parse_args(argv)
    started = time.perf_counter()
    info_machine = machine_info(("streamlit", "playwright", "duckdb", "plotly"))
    store, info = prepare_store(Path(args.cache).resolve(), args.checkpoints, args.runs)
    folder = Path(args.cache).resolve() / "homes-pages-1m"
    shutil.rmtree(folder, ignore_errors=True)
    home = folder / "home"
    try:
        print("indexing the store once (lastgood index STORE) …", file=sys.stderr)
        indexed = run_child([*lastgood_command(), "index", str(store), "--format", "json"], cwd=ROOT,
                            extra_env={"LASTGOOD_HOME": str(home)}).check()
        m = measure(store, info["checkpoints"], home, folder, args.repeat, args.timeout, args.idle_wait)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    rows, notes, ok = report(m, info, indexed.wall, args.repeat)
    headers = ["navigation → usable", "Lastgood", "anchor", "target", "met?"]
    title = f"The Overview and the Timeline on a {info['checkpoints']:,}-checkpoint index (Chromium)"
    summary = f"Target ≤ {TARGET:.0f} s after navigation, for every sample: {'met' if ok else 'MISSED'}."
    body = "\n\n".join([f"## {title}", "Rerun: `python benchmarks/bench_pages_1m.py`.",
                        markdown_table(headers, rows), summary, "\n".join(f"- {n}" for n in notes),
                        f"Machine: {machine_line(info_machine)}."])
    print()
    print(title)
    print(text_table(headers, [[c.replace("`", "").replace("**", "") for c in r] for r in rows]))
    print(summary)
    for note in notes:
        print(f"- {note}")
    print(f"(benchmark took {fmt_seconds(time.perf_counter() - started)})", file=sys.stderr)
    if not args.no_write:
        print(f"wrote section {SECTION!r} of {write_section(SECTION, body)}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
