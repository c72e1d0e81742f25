"""`lastgood report` of a 200-checkpoint run with a 10,000-message diff: time, size, and opening it
offline in Chromium — each next to an anchor measured in the same run.

    python benchmarks/bench_report.py [--repeat 5] [--no-write]

Targets (the integrations issue): the whole command ≤ 3 s, the file ≤ 5 MB, and it opens offline
in Chromium ≤ 2 s.

The store (generated once into ``benchmarks/.cache/report-200x10k``, seeded): one native run of
200 checkpoints whose conversation grows from 0 to 10,000 chat messages (ids on every message, as
LangGraph's have), a tool call every few turns, an API key in the state (redacted in the report), an
event every 25 checkpoints; indexed once (``lastgood index``, which also runs the data check). The
command, as a user types it::

    lastgood report STORE --run run-0 --diff FIRST LAST -o report.html

(FIRST has no message, LAST 10,000: the diff adds 10,000 messages.) Anchors, same run: the same
diff alone, ``lastgood diff STORE FIRST LAST --format json`` (whole command, output to a file), for
the command; for the browser, a page of the same size made of one ``<pre>`` block of the report's
text, opened the same way. Opening = a fresh offline browser context, ``page.goto(file://…)`` until
the ``load`` event, then the last section present in the DOM (the Chromium process itself is started
once, before). Writes the ``report`` section of docs/benchmarks.md (``--no-write`` to skip).
"""

from __future__ import annotations

import argparse
import html
import json
import re
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import (  # noqa: E402
    BYTECODE_NOTE, ROOT, Samples, cache_bytecode, fmt_bytes, fmt_seconds, machine_info, machine_line,
    markdown_table, python_child, run_child, wait_for_idle, write_section,
)

from lastgood.report.html import PAGE_ROWS  # noqa: E402

SECTION = "report"
CHECKPOINTS, MESSAGES = 200, 10_000
TIME_TARGET, SIZE_TARGET, OPEN_TARGET = 3.0, 5 * 1000 * 1000, 2.0
CHROMIUM = "/usr/bin/chromium"
IDLE: list[float] = []

GENERATE = """
import json, sys
from datetime import UTC, datetime, timedelta
sys.path.insert(0, sys.argv[1])
from lastgood.readers.native.writer import NativeWriter, SaveRequest
out, checkpoints, total = sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
t0 = datetime(2026, 11, 20, 9, 0, tzinfo=UTC)

def message(i):
    if i % 7 == 3:
        return {"id": f"m{i}", "role": "assistant", "content": "",
                "tool_calls": [{"id": f"call{i}", "name": "search", "args": {"query": f"order {i}", "limit": 5}}]}
    if i % 7 == 4:
        return {"id": f"m{i}", "role": "tool", "content": json.dumps({"ok": True, "rows": i % 31, "ms": i % 97})}
    role = "user" if i % 2 else "assistant"
    return {"id": f"m{i}", "role": role, "content": f"message {i}: please check the order book for ticker T{i % 500} "
                                                     f"and report the spread"}

writer = NativeWriter(out, full_every=20)
requests, saved = [], []
for step in range(checkpoints):
    n = round(step * total / (checkpoints - 1))
    state = {"messages": [message(i) for i in range(n)], "tools": {"api_key": "sk-bench-0123456789abcdef0123"},
             "runtime": {"turn": step, "pending": [f"act-{step}"]}}
    event = {"kind": "timeout", "message": f"tool call timed out after {30 + step % 3 * 30} s"} if step % 25 == 12 else None
    saved.append(writer.save("run-0", state, agent="bench-agent", step=step, created_at=t0 + timedelta(seconds=20 * step),
                             trigger="final" if step == checkpoints - 1 else "periodic", event=event))
print(json.dumps({"first": saved[0].checkpoint_id, "last": saved[-1].checkpoint_id}))
"""

OPEN = """
import json, sys, time
from playwright.sync_api import sync_playwright
paths, repeat = sys.argv[2:], int(sys.argv[1])
out = {}
with sync_playwright() as p:
    browser = p.chromium.launch(executable_path="%s", args=["--no-sandbox", "--disable-gpu",
                                "--disable-background-networking", "--no-first-run"])
    for path in paths:
        samples, requests, opened = [], [], []
        for _ in range(repeat):
            context = browser.new_context(offline=True, viewport={"width": 1280, "height": 900})
            page = context.new_page()
            page.on("request", lambda r: requests.append(r.url))
            started = time.perf_counter()
            page.goto("file://" + path, wait_until="load")
            page.wait_for_selector("#journal, pre", state="attached")
            samples.append(time.perf_counter() - started)
            pages = page.locator("details.page > summary")
            if pages.count():  # the last page of the conversation opened: its rows drawn
                started = time.perf_counter()
                pages.last.click()
                page.wait_for_selector("details.page[open] tbody tr", state="visible")
                page.evaluate("() => new Promise(done => requestAnimationFrame(() => setTimeout(done)))")
                opened.append(time.perf_counter() - started)
            context.close()
        out[path] = {"samples": samples, "requests": sorted(set(requests)), "page": opened}
    browser.close()
print(json.dumps(out))
""" % CHROMIUM


def lastgood() -> list[str]:
    script = Path(sys.executable).with_name("lastgood")
    return [str(script)] if script.exists() else [sys.executable, "-m", "lastgood"]


def settle() -> None:
    idle = wait_for_idle(0.7, 30.0)
    if idle is not None:
        IDLE.append(idle)


def prepare(folder: Path) -> dict[str, Any]:
    store, home, stamp = folder / "store", folder / "home", folder / "generated.json"
    if stamp.exists() and (store / "lastgood-store.json").exists():
        return {**json.loads(stamp.read_text()), "store": store, "home": home}
    folder.mkdir(parents=True, exist_ok=True)
    print(f"writing {CHECKPOINTS} checkpoints growing to {MESSAGES:,} messages into {store} …", file=sys.stderr)
    ids = python_child(GENERATE, str(ROOT), str(store), str(CHECKPOINTS), str(MESSAGES), cwd=ROOT).check().report
    run_child([*lastgood(), "index", str(store), "--home", str(home)], cwd=ROOT).check()
    stamp.write_text(json.dumps(ids) + "\n")
    return {**ids, "store": store, "home": home}


def measure(data: dict[str, Any], repeat: int, out_dir: Path) -> dict[str, Any]:
    store, home = str(data["store"]), str(data["home"])
    report, anchor = out_dir / "report.html", out_dir / "diff.json"
    m: dict[str, Any] = {k: Samples() for k in ("report", "report_cpu", "diff", "diff_cpu")}
    for i in range(repeat):
        print(f"round {i + 1}/{repeat}: lastgood report, then lastgood diff …", file=sys.stderr)
        settle()
        child = run_child([*lastgood(), "report", store, "--run", "run-0", "--diff", data["first"], data["last"],
                           "-o", str(report), "--home", home], cwd=ROOT).check()
        m["report"].add(child.wall)
        m["report_cpu"].add(child.user + child.system)
        settle()
        child = run_child(["sh", "-c", f'"$0" "$@" > {anchor}', *lastgood(), "diff", store, data["first"],
                           data["last"], "--format", "json", "--home", home], cwd=ROOT).check()
        m["diff"].add(child.wall)
        m["diff_cpu"].add(child.user + child.system)
    text = report.read_text()
    added = json.loads(anchor.read_text())["summary"]["added"]
    shown = text.count('class="mark m-added"')
    if shown != added or added != MESSAGES:
        raise SystemExit(f"the report shows {shown} added messages, the diff {added}")
    if "sk-bench" in text or "<script" in text:
        raise SystemExit("the report holds a secret or a script")
    plain = out_dir / "plain.html"
    plain.write_text("<!DOCTYPE html><html><head><meta charset='utf-8'></head><body><pre>"
                     + html.escape(re.sub(r"<[^>]+>", " ", text)).ljust(len(text)) + "</pre></body></html>")
    settle()
    opened = json.loads(python_child(OPEN, str(repeat), str(report), str(plain), cwd=ROOT).check().stdout
                        .strip().splitlines()[-1])
    m.update(size=report.stat().st_size, plain_size=plain.stat().st_size, added=added,
             open=Samples(opened[str(report)]["samples"]), open_plain=Samples(opened[str(plain)]["samples"]),
             requests=opened[str(report)]["requests"], page=Samples(opened[str(report)]["page"]),
             pages=text.count('<details class="page">'))
    return m


def body(m: dict[str, Any], repeat: int) -> str:
    met = lambda ok: "yes" if ok else "**no**"  # noqa: E731
    samples = lambda s: ", ".join(fmt_seconds(x) for x in s.values)  # noqa: E731
    rows = [
        ["`lastgood report STORE --run R --diff A B -o report.html` (whole command)", fmt_seconds(m["report"].median),
         f"{fmt_seconds(m['diff'].median)} (`lastgood diff STORE A B --format json`, the same diff alone)",
         f"{m['report'].median / m['diff'].median:.2f}×", "≤ 3 s", met(m["report"].median <= TIME_TARGET)],
        ["CPU time (user+sys) of the same", fmt_seconds(m["report_cpu"].median), fmt_seconds(m["diff_cpu"].median),
         f"{m['report_cpu'].median / m['diff_cpu'].median:.2f}×", "—", "—"],
        ["the file", fmt_bytes(m["size"]) + f" ({m['size']:,} bytes)", "—", "—", "≤ 5 MB",
         met(m["size"] <= SIZE_TARGET)],
        ["opened offline in Chromium (fresh context → `load`, last section in the DOM)",
         fmt_seconds(m["open"].median), f"{fmt_seconds(m['open_plain'].median)} (one `<pre>` of the report's text, "
         f"{fmt_bytes(m['plain_size'])})", f"{m['open'].median / m['open_plain'].median:.2f}×", "≤ 2 s",
         met(m["open"].median <= OPEN_TARGET)],
        [f"opening one page of the conversation (click → its {PAGE_ROWS:,} rows drawn)", fmt_seconds(m["page"].median),
         "—", "—", "—", "—"],
    ]
    lines = [
        markdown_table(["what", "Lastgood", "anchor (same run)", "ratio", "target", "met"], rows), "",
        f"The run: {CHECKPOINTS} checkpoints of one native run whose conversation grows from 0 to {MESSAGES:,} "
        "messages (ids on each, tool calls and results among them), an API key in the state, an event every 25 "
        f"checkpoints. The report holds the store summary, the run's timeline (SVG, {CHECKPOINTS} checkpoints, 8 "
        f"events), its checkpoints and events, the findings, the diff of its first and last checkpoints "
        f"({m['added']:,} messages added, every one listed, aligned by id, in {m['pages']} closed pages of "
        f"{PAGE_ROWS:,}: parsed, laid out only when opened) and the journal. Medians of {repeat} "
        "runs, each a fresh process. Samples — report: " + samples(m["report"]) + "; diff: " + samples(m["diff"])
        + "; open: " + samples(m["open"]) + "; open (anchor page): " + samples(m["open_plain"]) + ".",
        "",
        f"Requests the page made in Chromium (offline context): {', '.join(m['requests'])} — the file itself "
        "and nothing else (the page's Content Security Policy allows nothing but its inline styles; it has no "
        "script).",
        "",
        f"Idle CPU share before the measurements: {', '.join(f'{x:.0%}' for x in IDLE) or 'not measured'}. "
        "On a busy machine the CPU time and the ratios to the same-run anchors are the fairer view.",
        "", machine_line(machine_info()),
    ]
    if BYTECODE_NOTE:
        lines.append(f"Note: {BYTECODE_NOTE[0]}.")
    return "## HTML report (`lastgood report`): a 200-checkpoint run, a 10,000-message diff\n\n" + "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cache", type=Path, default=ROOT / "benchmarks" / ".cache")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args()
    cache_bytecode()
    folder = args.cache / f"report-{CHECKPOINTS}x{MESSAGES // 1000}k"
    data = prepare(folder)
    m = measure(data, args.repeat, folder)
    text = body(m, args.repeat)
    print(f"report {fmt_seconds(m['report'].median)} (diff alone {fmt_seconds(m['diff'].median)}), "
          f"{fmt_bytes(m['size'])}, opens in {fmt_seconds(m['open'].median)} "
          f"(a plain page of its text {fmt_seconds(m['open_plain'].median)})")
    if args.no_write:
        print(text)
    else:
        print(f"wrote {write_section(SECTION, text)}", file=sys.stderr)


if __name__ == "__main__":
    main()
