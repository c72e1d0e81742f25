"""The agent-framework targets: OpenAI Agents ``SQLiteSession`` and Google ADK databases of 100,000 items.

    python benchmarks/bench_agents.py [--repeat 3] [--ui-repeat 2] [--idle-wait 15] [--no-ui] [--no-write]

Targets (PRODUCT.md, agent frameworks), each for both kinds of store:

* ``lastgood index DB`` of a never-seen 100,000-item DB (fresh LASTGOOD_HOME, default options)
  ≤ 2× a raw ``sqlite3`` scan of the same columns in a whole Python process (the columns
  Lastgood's listing reads: OpenAI ``agent_messages`` id, session_id, created_at, message_data;
  ADK ``events`` app_name, user_id, session_id, id, invocation_id, timestamp, event_data;
  ``fetchall()``). A second anchor adds ``json.loads`` of every item (the least work that
  yields each item's role/type/tool, which the listing takes from it).
* ``lastgood show DB <head of the 10,000-item session>`` ≤ 1 s (the DB indexed before, as
  after a ``lastgood ls``/``index``; the never-seen figure is given beside it).
* ``lastgood ui DB`` → the Overview's figures in Chromium, never seen, ≤ 5 s: measured with
  ``bench_ui_open``'s machinery (its ``measure``: the clock starts as the command is spawned
  and stops when Chromium shows the Overview's metrics and a drawn figure; next to a bare
  two-element Streamlit app timed the same way, the floor under any Streamlit dashboard).
* The fixed floor: ``lastgood index`` of a tiny store of the same kind (the sample DB: 57
  items / 41 events, never seen) — what every command costs before it reads anything, so the
  gap to each target can be stated against it.

The DBs are made from ``sample_data/openai_agents.sqlite`` and ``sample_data/adk.sqlite`` by
copying their rows with SQL (``INSERT … SELECT`` from the attached sample, driven by a plan
table): every session of the big DB is a whole sample session copied (new session ids; new
item/event, invocation and tool-call ids per copy, so calls still pair with their outputs;
times shifted so each session's items ascend), one session is 10,000 items of whole sample
sessions back to back, the rest fill the DB to exactly 100,000. Cached in
``benchmarks/.cache/agents``. Every figure is a whole process (``common.run_child``), medians
of ``--repeat`` runs; the load average and idle CPU share are recorded before each.
Writes the ``agents`` section of docs/benchmarks.md (``--no-write`` to skip).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sqlite3
import sys
import tempfile
import time
from datetime import UTC, datetime
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
    run_child,
    wait_for_idle,
)

SECTION = "agents"
CACHE = ROOT / "benchmarks" / ".cache" / "agents"
LASTGOOD = str(Path(sys.executable).with_name("lastgood"))
ITEMS, BIG = 100_000, 10_000
INDEX_TARGET, SHOW_TARGET, UI_TARGET = 2.0, 1.0, 5.0
IDLE_WAIT = 15.0
LOG: list[dict[str, Any]] = []
KINDS = {
    "openai": {"sample": ROOT / "sample_data" / "openai_agents.sqlite", "label": "OpenAI Agents `SQLiteSession`",
               "items": "items"},
    "adk": {"sample": ROOT / "sample_data" / "adk.sqlite", "label": "Google ADK `DatabaseSessionService` (SQLite)",
            "items": "events"},
}

# The raw scans: the columns each listing reads, fetched in a whole Python process.
RAW_SCAN = """
import json, sqlite3, sys, time
t0 = time.perf_counter()
conn = sqlite3.connect(sys.argv[1])
rows = conn.execute(sys.argv[2]).fetchall()
scanned = time.perf_counter()
parsed = 0
if sys.argv[3] == "json":
    for row in rows:
        if row[-1] is not None:
            json.loads(row[-1])
            parsed += 1
print(json.dumps({"call": time.perf_counter() - t0, "scan": scanned - t0, "rows": len(rows), "parsed": parsed}))
"""
# The least an index of the store into DuckDB does, in one process: import duckdb and pyarrow, the
# raw scan, the columns as Arrow arrays (the data column as its length; built from buffers, as
# Lastgood builds its own: pa.array of Python strings would import pandas) and one CREATE TABLE AS
# into a new DuckDB file. No parsing of the items: what any listing adds to it is its own work.
RAW_COPY = """
import json, os, sqlite3, sys, tempfile, time
t0 = time.perf_counter()
import duckdb, numpy as np, pyarrow as pa

def strings(values):
    if None in values or not all(type(v) is str for v in values):
        values = ["" if v is None else str(v) for v in values]
    text = "".join(values)
    data = text.encode()
    sized = values if len(data) == len(text) else [v.encode() for v in values]
    sizes = np.fromiter(map(len, sized), np.int64, len(values))
    offsets = np.zeros(len(values) + 1, np.int32)
    np.cumsum(sizes, out=offsets[1:])
    return pa.Array.from_buffers(pa.string(), len(values), [None, pa.py_buffer(offsets), pa.py_buffer(data)])

cur = sqlite3.connect(sys.argv[1]).execute(sys.argv[2])
names = [d[0] for d in cur.description]
rows = cur.fetchall()
columns = list(zip(*rows))
arrays = {name: strings(column) for name, column in zip(names[:-1], columns[:-1])}
arrays["size"] = pa.array(np.fromiter((len(v or "") for v in columns[-1]), np.int64, len(rows)))
incoming = pa.Table.from_pydict(arrays)
con = duckdb.connect(os.path.join(tempfile.mkdtemp(), "index.duckdb"))
con.execute("CREATE TABLE copied AS SELECT * FROM incoming")
con.close()
print(json.dumps({"call": time.perf_counter() - t0, "rows": len(rows)}))
"""
RAW_SQL = {
    "openai": "SELECT id, session_id, created_at, message_data FROM agent_messages",
    "adk": "SELECT app_name, user_id, session_id, id, invocation_id, timestamp, event_data FROM events",
}
# bench_ui_open's anchor slot: a snippet run with the store as argv[1]
UI_ANCHOR = """
import json, sqlite3, sys, time
t0 = time.perf_counter()
rows = sqlite3.connect(sys.argv[1]).execute({sql!r}).fetchall()
print(json.dumps({{"call": time.perf_counter() - t0, "rows": len(rows)}}))
"""


# ---- data -----------------------------------------------------------------------------------

def fill(total: int, sizes: dict[str, int], cycle: list[str]) -> list[str]:
    """Templates (names of ``sizes``) whose sizes add up to exactly ``total``: ``cycle`` repeated,
    then an exact change of the last few hundred items (unbounded knapsack)."""
    out, left, i = [], total, 0
    while left > 300:
        name = cycle[i % len(cycle)]
        out.append(name)
        left -= sizes[name]
        i += 1
    best: dict[int, list[str]] = {0: []}
    for amount in range(1, left + 1):
        for name, size in sizes.items():
            if size <= amount and amount - size in best:
                best[amount] = best[amount - size] + [name]
                break
    if left not in best:
        raise SystemExit(f"cannot make {left} items from sessions of {sorted(sizes.values())}")
    return out + best[left]


def plan_sessions(sizes: dict[str, int]) -> list[tuple[str, list[str]]]:
    """(new session name, the template sessions copied into it in order): one session of BIG
    items, the rest one template each, ITEMS in all."""
    ordered = sorted(sizes, key=lambda k: (-sizes[k], k))
    big = fill(BIG, sizes, ordered)
    rest = fill(ITEMS - BIG, sizes, sorted(sizes))
    sessions = [(f"big-{BIG}", big)]
    sessions += [(f"s{n:05d}", [name]) for n, name in enumerate(rest)]
    return sessions


def make_openai(target: Path) -> dict[str, Any]:
    sample = KINDS["openai"]["sample"]
    shutil.copyfile(sample, target)
    conn = sqlite3.connect(target, isolation_level=None)
    conn.execute("ATTACH DATABASE ? AS src", (f"file:{sample}?mode=ro",))
    sizes = dict(conn.execute("SELECT session_id, count(*) FROM src.agent_messages GROUP BY 1"))
    sessions = plan_sessions(sizes)
    conn.execute("BEGIN")
    conn.execute("DELETE FROM agent_messages")
    conn.execute("DELETE FROM agent_sessions")
    conn.execute("DELETE FROM sqlite_sequence")
    conn.execute("CREATE TEMP TABLE plan (session_id TEXT, position INTEGER, template TEXT, copy INTEGER, "
                 "shift INTEGER, tag TEXT)")
    rows, copy = [], 0
    for position, (name, templates) in enumerate(sessions):
        session_id = name if name.startswith("big") else f"{templates[0]}-{name}"
        for c, template in enumerate(templates):
            # sessions start 30 s apart; the copies in one session follow each other 30 s apart
            rows.append((session_id, position * 100_000 + c, template, copy, 30 * (position + c), f"{copy:06x}"))
            copy += 1
    conn.executemany("INSERT INTO plan VALUES (?, ?, ?, ?, ?, ?)", rows)
    # new items: ids from AUTOINCREMENT in (session, copy, item) order; tool-call ids renamed per copy
    conn.execute("""
        INSERT INTO agent_messages (session_id, message_data, created_at)
        SELECT p.session_id,
               replace(replace(replace(m.message_data,
                   '": "call_', '": "call_' || p.tag), '": "fc_', '": "fc_' || p.tag), '": "msg_', '": "msg_' || p.tag),
               datetime(m.created_at, printf('%+d seconds', p.shift))
        FROM plan p JOIN src.agent_messages m ON m.session_id = p.template
        ORDER BY p.position, m.id""")
    conn.execute("""
        INSERT INTO agent_sessions (session_id, created_at, updated_at)
        SELECT session_id, min(created_at), max(created_at) FROM agent_messages GROUP BY session_id""")
    conn.execute("COMMIT")
    conn.execute("DETACH DATABASE src")
    conn.execute("VACUUM")
    big = next(s for s, _ in sessions if s.startswith("big"))
    head = conn.execute("SELECT max(id) FROM agent_messages WHERE session_id = ?", (big,)).fetchone()[0]
    info = {"items": conn.execute("SELECT count(*) FROM agent_messages").fetchone()[0],
            "sessions": conn.execute("SELECT count(*) FROM agent_sessions").fetchone()[0],
            "big_items": conn.execute("SELECT count(*) FROM agent_messages WHERE session_id = ?", (big,)).fetchone()[0],
            "big_session": big, "head": str(head)}
    conn.close()
    return info


def make_adk(target: Path) -> dict[str, Any]:
    sample = KINDS["adk"]["sample"]
    shutil.copyfile(sample, target)
    conn = sqlite3.connect(target, isolation_level=None)
    conn.execute("ATTACH DATABASE ? AS src", (f"file:{sample}?mode=ro",))
    templates = {sid: (app, user, count, start, end) for app, user, sid, count, start, end in conn.execute(
        "SELECT app_name, user_id, session_id, count(*), min(timestamp), max(timestamp) FROM src.events GROUP BY 1, 2, 3")}
    sizes = {sid: t[2] for sid, t in templates.items()}
    sessions = plan_sessions(sizes)
    conn.execute("BEGIN")
    conn.execute("DELETE FROM events")
    conn.execute("DELETE FROM sessions")
    conn.execute("CREATE TEMP TABLE plan (app_name TEXT, user_id TEXT, session_id TEXT, position INTEGER, "
                 "template TEXT, copy INTEGER, shift INTEGER, tag TEXT)")
    rows, copy = [], 0
    epoch = lambda text: datetime.fromisoformat(text).replace(tzinfo=UTC).timestamp()
    for position, (name, chosen) in enumerate(sessions):
        app, user = templates[chosen[0]][:2]
        session_id = f"{copy:08x}-0000-4000-8000-{position:012x}"
        at = epoch(templates[chosen[0]][3]) + 60 * position  # sessions start a minute apart …
        for template in chosen:
            start, end = epoch(templates[template][3]), epoch(templates[template][4])
            shift = int(at - start) + 1
            rows.append((app, user, session_id, position, template, copy, shift, f"{copy:06x}"))
            at = end + shift + 30  # … and the copies in one session follow each other
            copy += 1
    conn.executemany("INSERT INTO plan VALUES (?, ?, ?, ?, ?, ?, ?, ?)", rows)
    conn.execute("CREATE INDEX temp.plan_session ON plan (session_id, copy)")
    # new event ids / invocation ids / tool-call ids per copy, the JSON's own id, invocation_id and
    # timestamp kept equal to the columns; times shifted (text keeps SQLAlchemy's 6 decimals)
    conn.execute("""
        INSERT INTO events (id, app_name, user_id, session_id, invocation_id, timestamp, event_data)
        SELECT substr(e.id, 1, 24) || printf('%012x', p.copy), p.app_name, p.user_id, p.session_id,
               substr(e.invocation_id, 1, 26) || printf('%012x', p.copy),
               strftime('%Y-%m-%d %H:%M:%f', e.timestamp, printf('%+d seconds', p.shift)) || '000',
               json_set(replace(e.event_data, '"adk-', '"adk-' || p.tag || '-'),
                        '$.id', substr(e.id, 1, 24) || printf('%012x', p.copy),
                        '$.invocation_id', substr(e.invocation_id, 1, 26) || printf('%012x', p.copy),
                        '$.timestamp', json_extract(e.event_data, '$.timestamp') + p.shift)
        FROM plan p JOIN src.events e ON e.session_id = p.template
        ORDER BY p.position, p.copy, e.timestamp, e.id""")
    # each session: the state of the sample session it was copied from (the last one for the big one)
    conn.execute("""
        INSERT INTO sessions (app_name, user_id, id, state, create_time, update_time)
        SELECT p.app_name, p.user_id, p.session_id, s.state,
               strftime('%Y-%m-%d %H:%M:%f', s.create_time, printf('%+d seconds', first.shift)) || '000',
               strftime('%Y-%m-%d %H:%M:%f', s.update_time, printf('%+d seconds', p.shift)) || '000'
        FROM plan p JOIN src.sessions s ON s.id = p.template
        JOIN plan first ON first.session_id = p.session_id
          AND first.copy = (SELECT min(copy) FROM plan WHERE session_id = p.session_id)
        WHERE p.copy = (SELECT max(copy) FROM plan WHERE session_id = p.session_id)""")
    conn.execute("COMMIT")
    conn.execute("DETACH DATABASE src")
    conn.execute("VACUUM")
    big = conn.execute("SELECT session_id FROM plan WHERE position = 0").fetchone()[0]
    head = conn.execute("SELECT id FROM events WHERE session_id = ? ORDER BY timestamp DESC, id DESC LIMIT 1",
                        (big,)).fetchone()[0]
    info = {"items": conn.execute("SELECT count(*) FROM events").fetchone()[0],
            "sessions": conn.execute("SELECT count(*) FROM sessions").fetchone()[0],
            "big_items": conn.execute("SELECT count(*) FROM events WHERE session_id = ?", (big,)).fetchone()[0],
            "big_session": big, "head": head}
    conn.close()
    return info


def prepare(kind: str) -> tuple[Path, Path, dict[str, Any]]:
    """(the 100k DB, a copy of the tiny sample DB, facts about the big one); made once."""
    CACHE.mkdir(parents=True, exist_ok=True)
    db = CACHE / f"{kind}-{ITEMS}.sqlite"
    stamp = db.with_suffix(".json")
    tiny = CACHE / f"{kind}-sample.sqlite"
    if not tiny.exists():
        shutil.copyfile(KINDS[kind]["sample"], tiny)
    if stamp.exists() and db.exists():
        return db, tiny, json.loads(stamp.read_text())
    started = time.perf_counter()
    print(f"making the {kind} DB ({ITEMS:,} items, SQL copies of the sample's rows) …", file=sys.stderr)
    db.unlink(missing_ok=True)
    info = (make_openai if kind == "openai" else make_adk)(db)
    if info["items"] != ITEMS or info["big_items"] != BIG:
        raise SystemExit(f"made {info}, expected {ITEMS} items with one session of {BIG}")
    info["seconds"] = time.perf_counter() - started
    info["bytes"] = db.stat().st_size
    stamp.write_text(json.dumps(info, indent=2) + "\n")
    return db, tiny, info


# ---- measuring ----------------------------------------------------------------------------

def measure(what: str, command: list[str], *, env: dict[str, str] | None = None,
            ok: tuple[int, ...] = (0,)) -> dict[str, Any]:
    """One whole-process measurement after waiting (≤ IDLE_WAIT s) for a quieter machine."""
    idle = wait_for_idle(0.7, IDLE_WAIT) if IDLE_WAIT else None
    load = os.getloadavg()[0]
    child = run_child(command, extra_env=env, cwd=ROOT)
    if child.returncode not in ok and "unexpected error" in child.stderr:
        time.sleep(10)  # a module caught mid-edit in a shared working tree: once more
        child = run_child(command, extra_env=env, cwd=ROOT)
    if child.returncode not in ok:
        child.check()
    LOG.append({"what": what, "load": load, "idle": idle})
    return {"wall": child.wall, "cpu": child.user + child.system, "rss": child.peak_rss, "rc": child.returncode,
            "stdout": child.stdout, "stderr": child.stderr, "load": load, "idle": idle}


class Series:
    """Repeated measurements of one command: medians of wall and CPU, worst peak RSS."""

    def __init__(self) -> None:
        self.wall, self.cpu, self.rss, self.last = Samples(), Samples(), Samples(), {}

    def add(self, result: dict[str, Any]) -> dict[str, Any]:
        self.wall.add(result["wall"])
        self.cpu.add(result["cpu"])
        self.rss.add(result["rss"])
        self.last = result
        return result


def fresh_home() -> dict[str, str]:
    return {"LASTGOOD_HOME": tempfile.mkdtemp(prefix="bench-agents-home-", dir=CACHE)}


def warm(path: Path) -> None:
    with open(path, "rb") as handle:
        while handle.read(16 << 20):
            pass


def bench_cli(kind: str, db: Path, tiny: Path, info: dict[str, Any], repeat: int) -> dict[str, Any]:
    warm(db)
    out = {name: Series() for name in ("index", "raw", "raw_json", "raw_copy", "floor", "show", "show_cold",
                                       "index_warm")}
    known = fresh_home()
    run_child([LASTGOOD, "index", str(db)], extra_env=known).check()
    head = info["head"]
    for r in range(repeat):
        print(f"{kind} round {r + 1}/{repeat}: index (never seen), raw scans, floor, show …", file=sys.stderr)
        result = out["index"].add(measure(f"{kind} index cold", [LASTGOOD, "index", str(db)], env=fresh_home()))
        out["index_report"] = result["stdout"].strip()
        out["raw"].add(measure(f"{kind} raw scan", [sys.executable, "-c", RAW_SCAN, str(db), RAW_SQL[kind], "-"]))
        out["raw_json"].add(measure(f"{kind} raw scan + json", [sys.executable, "-c", RAW_SCAN, str(db),
                                                                RAW_SQL[kind], "json"]))
        out["raw_copy"].add(measure(f"{kind} raw scan into DuckDB", [sys.executable, "-c", RAW_COPY, str(db),
                                                                      RAW_SQL[kind]]))
        out["floor"].add(measure(f"{kind} tiny index", [LASTGOOD, "index", str(tiny)], env=fresh_home()))
        out["index_warm"].add(measure(f"{kind} index again", [LASTGOOD, "index", str(db)], env=known))
        shown = out["show"].add(measure(f"{kind} show", [LASTGOOD, "show", str(db), head], env=known))
        out["show_bytes"] = len(shown["stdout"])
        out["show_cold"].add(measure(f"{kind} show never seen", [LASTGOOD, "show", str(db), head], env=fresh_home()))
    out["raw_report"] = json.loads(out["raw"].last["stdout"])
    out["show_head"] = out["show"].last["stdout"].splitlines()[:3]
    return out


def bench_ui(kind: str, db: Path, info: dict[str, Any], repeat: int, timeout: float) -> dict[str, Any]:
    import bench_ui_open

    homes = CACHE / f"homes-ui-{kind}"
    shutil.rmtree(homes, ignore_errors=True)
    try:
        return bench_ui_open.measure(str(db), UI_ANCHOR.format(sql=RAW_SQL[kind]), info["items"], repeat, homes,
                                     IDLE_WAIT, timeout)
    finally:
        shutil.rmtree(homes, ignore_errors=True)


# ---- report -------------------------------------------------------------------------------

def yes(ok: bool) -> str:
    return "yes" if ok else "**no**"


def samples(series: Samples) -> str:
    return ", ".join(fmt_seconds(x) for x in series.values)


def rows_for(kind: str, info: dict[str, Any], c: dict[str, Any], ui: dict[str, Any] | None,
             verdicts: list[str], notes: list[str]) -> list[list[str]]:
    label, items = KINDS[kind]["label"], KINDS[kind]["items"]
    index, raw, raw_json, floor = c["index"], c["raw"], c["raw_json"], c["floor"]
    ratio = index.wall.median / raw.wall.median
    show = c["show"]
    rows = [
        [f"{label}: `lastgood index DB`, 100,000 {items}, never seen — wall (CPU s)",
         f"{fmt_seconds(index.wall.median)} ({index.cpu.median:.2f} s)",
         f"{fmt_seconds(raw.wall.median)} ({raw.cpu.median:.2f} s): raw `sqlite3` scan of the same columns, process",
         f"{ratio:.2f}× the scan (CPU {index.cpu.median / raw.cpu.median:.2f}×)", "≤ 2×", yes(ratio <= INDEX_TARGET)],
        [f"(reference) the same vs the raw scan + `json.loads` of every {items[:-1]}",
         "as above", f"{fmt_seconds(raw_json.wall.median)} ({raw_json.cpu.median:.2f} s)",
         f"{index.wall.median / raw_json.wall.median:.2f}× the scan", "—", "—"],
        ["(reference) the same vs the raw scan written into a new DuckDB table (the least a DuckDB index of "
         "the store does: duckdb + pyarrow imported, the scan, its columns as Arrow — the data as its length — "
         "and one `CREATE TABLE … AS`; no item parsed), process",
         "as above", f"{fmt_seconds(c['raw_copy'].wall.median)} ({c['raw_copy'].cpu.median:.2f} s)",
         f"{index.wall.median / c['raw_copy'].wall.median:.2f}× that copy", "—", "—"],
        [f"(floor) `lastgood index` of the tiny sample DB ({'57 items' if kind == 'openai' else '41 events'}), "
         "never seen", f"{fmt_seconds(floor.wall.median)} ({floor.cpu.median:.2f} s)", "—",
         f"{floor.wall.median / raw.wall.median:.2f}× the 100k scan", "—", "—"],
        [f"`lastgood show DB {c['head_label']}` (head of the 10,000-{items[:-1]} session; DB indexed before)",
         f"{fmt_seconds(show.wall.median)} ({show.cpu.median:.2f} s; {fmt_bytes(c['show_bytes'])} printed)",
         f"{fmt_seconds(floor.wall.median)} (the floor above)", "—", "≤ 1 s", yes(show.wall.median <= SHOW_TARGET)],
        ["(reference) the same `show`, never seen (fresh home)",
         f"{fmt_seconds(c['show_cold'].wall.median)} ({c['show_cold'].cpu.median:.2f} s)", "—", "—", "—", "—"],
        ["(reference) `lastgood index DB` again, nothing changed", f"{fmt_seconds(c['index_warm'].wall.median)}",
         "—", "—", "—", "—"],
        ["peak RSS, never-seen `lastgood index DB` / `show`", f"{fmt_bytes(index.rss.worst)} / {fmt_bytes(show.rss.worst)}",
         f"{fmt_bytes(raw.rss.worst)} (raw scan)", "—", "—", "—"],
    ]
    cpu_ratio = index.cpu.median / raw.cpu.median
    verdicts.append(f"{kind}: index ≤ 2× the raw scan {'met' if ratio <= INDEX_TARGET else 'MISSED'} ({ratio:.2f}× by "
                    f"wall, {cpu_ratio:.2f}× by CPU; the tiny store's index alone is "
                    f"{floor.cpu.median / raw.cpu.median:.2f}× the scan's CPU); show ≤ 1 s "
                    f"{'met' if show.wall.median <= SHOW_TARGET else 'MISSED'} ({fmt_seconds(show.wall.median)} wall, "
                    f"{show.cpu.median:.2f} s CPU)")
    if ui:
        cold = ui["cold"]
        rows.append([f"`lastgood ui DB`, never seen → Overview figures in Chromium",
                     f"{fmt_seconds(cold.median)} (CPU {fmt_seconds(ui['cpu']['cold'].median)})",
                     f"{fmt_seconds(ui['floor']['cold'].median)} (a two-element Streamlit app, cold)",
                     f"+{fmt_seconds(cold.median - ui['floor']['cold'].median)} over the app", "≤ 5 s",
                     yes(cold.median <= UI_TARGET)])
        rows.append(["(reference) the same DB reopened; first page served; the whole Overview (tables) cold",
                     f"{fmt_seconds(ui['reopen'].median)}; {fmt_seconds(ui['served'].median)}; "
                     f"{fmt_seconds(ui['complete']['cold'].median)}",
                     f"{fmt_seconds(ui['floor']['reopen'].median)} (the app, reopened)", "—", "—", "—"])
        verdicts.append(f"{kind}: ui ≤ 5 s {'met' if cold.median <= UI_TARGET else 'MISSED'} "
                        f"({fmt_seconds(cold.median)}, {fmt_seconds(ui['cpu']['cold'].median)} CPU; the two-element "
                        f"app {fmt_seconds(ui['floor']['cold'].median)}; the Overview showed "
                        f"{ui['metrics'].get('Checkpoints')} checkpoints)")
        notes.append(f"{kind} ui samples — cold: {samples(cold)}; reopened: {samples(ui['reopen'])}; two-element app "
                     f"cold: {samples(ui['floor']['cold'])}; raw scan: {samples(ui['raw'])}.")
    first = c["index_report"].splitlines()[0] if c["index_report"] else ""
    notes.append(f"{kind}: DB {fmt_bytes(info['bytes'])}, {info['items']:,} {items} in {info['sessions']:,} sessions "
                 f"(made in {fmt_seconds(info['seconds'])}); the cold index said `{first}`; raw scan fetched "
                 f"{c['raw_report']['rows']:,} rows. Wall samples — index: {samples(index.wall)}; raw scan: "
                 f"{samples(raw.wall)}; + json: {samples(raw_json.wall)}; into DuckDB: {samples(c['raw_copy'].wall)}; tiny index: {samples(floor.wall)}; show: "
                 f"{samples(show.wall)}; show never seen: {samples(c['show_cold'].wall)}.")
    return rows


def main(argv: list[str] | None = None) -> int:
    global IDLE_WAIT
    cache_bytecode()
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--ui-repeat", type=int, default=2, help="rounds of the Chromium measurement")
    parser.add_argument("--timeout", type=float, default=180.0, help="give up on one page load after this")
    parser.add_argument("--idle-wait", type=float, default=15.0,
                        help="wait up to this many seconds for a quieter machine before each measurement")
    parser.add_argument("--no-ui", action="store_true", help="leave out the Chromium measurement")
    parser.add_argument("--kinds", default="openai,adk")
    parser.add_argument("--no-write", action="store_true", help="print only; leave docs/benchmarks.md alone")
    args = parser.parse_args(argv)
    IDLE_WAIT = args.idle_wait
    info_machine = machine_info(("duckdb", "streamlit", "playwright", "orjson"))
    started = time.perf_counter()
    rows: list[list[str]] = []
    notes: list[str] = []
    verdicts: list[str] = []
    kinds = [k for k in args.kinds.split(",") if k]
    try:
        for kind in kinds:
            db, tiny, info = prepare(kind)
            cli = bench_cli(kind, db, tiny, info, args.repeat)
            cli["head_label"] = info["head"]
            ui = None if args.no_ui else bench_ui(kind, db, info, args.ui_repeat, args.timeout)
            rows += rows_for(kind, info, cli, ui, verdicts, notes)
    finally:
        for home in CACHE.glob("bench-agents-home-*"):
            shutil.rmtree(home, ignore_errors=True)
    notes.append(load_note(LOG, f"Medians of {args.repeat} runs ({args.ui_repeat} rounds in Chromium), each a fresh "
                                "process, the command exactly as typed (default options)", IDLE_WAIT))
    publish_section(
        SECTION, title="Agent-framework stores (issue #30)",
        intro="100,000-item OpenAI Agents `SQLiteSession` and Google ADK SQLite DBs: `index`, `show`, `ui`. Rerun: "
              "`python benchmarks/bench_agents.py` (DBs made once from the sample DBs by SQL copies, cached under "
              "`benchmarks/.cache/agents`; the ui rows need Chromium + Playwright as `bench_ui_open.py` does).",
        headers=["what", "Lastgood", "anchor (same run)", "ratio", "target", "met?"], rows=rows,
        summary="Targets: " + "; ".join(verdicts) + ".", notes=notes, machine=info_machine, started=started,
        write=not args.no_write and len(kinds) == 2)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
