"""The secrets matrix: a marker in every field an operator can see, checked everywhere.

Markers sit in run ids, checkpoint ids, agent names, triggers, state (a key, a URL
with a password, an environment-style ``KEY=value``), metadata, event texts, a
LangGraph ``__error__`` text and a Postgres password echoed by a connection error.
Every command's table and JSON output, the index file itself, and every page's
HTML (and chart data) in Chromium must show none of them.
"""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path

import msgpack
import pytest

from lastgood.cli.main import main
from lastgood.readers.native.writer import NativeWriter, SaveRequest
from tests.fixtures_browser import DemoStore, start_streamlit, stop_group, wait_for_health
from tests.helpers import ROOT, T0

MARKERS = {
    "run_id": "sk-RUNIDMARKER0123456789",
    "checkpoint_id": "sk-CKPTMARKER0123456789",
    "agent": "sk-AGENTMARKER0123456789",
    "trigger": "sk-TRIGGERMARKER012345",
    "state": "sk-STATEMARKER0123456789",
    "url": "URLPASSWORDMARKER99",
    "env": "ENVMARKER0123456789",
    "metadata": "sk-METAMARKER0123456789",
    "event": "sk-EVENTMARKER0123456789",
    "langgraph_error": "sk-LGERRORMARKER0123456789",
    "postgres": "PGPASSWORDMARKER99",
}


def leaked(text: str) -> list[str]:
    return [name for name, marker in MARKERS.items() if marker in text]


@pytest.fixture(scope="module")
def secret_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("secrets") / "store"
    writer = NativeWriter(str(root))
    state = {"note": f"key {MARKERS['state']}", "db": f"https://ops:{MARKERS['url']}@db.example/x",
             "env": f"OPENAI_API_KEY={MARKERS['env']} PATH=/usr/bin",
             "messages": [{"role": "user", "content": f"use {MARKERS['state']} please"}]}
    writer.save_many([
        SaveRequest(MARKERS["run_id"], state, trigger=MARKERS["trigger"], agent=MARKERS["agent"],
                    metadata={"config": MARKERS["metadata"]}, created_at=T0, checkpoint_id=MARKERS["checkpoint_id"],
                    event={"kind": "error", "message": f"401 for {MARKERS['event']}"}),
        SaveRequest("plain-run", {"ok": 1}, agent="plain", created_at=T0),
    ])
    return root


@pytest.fixture(scope="module")
def secret_langgraph(tmp_path_factory: pytest.TempPathFactory) -> Path:
    db = tmp_path_factory.mktemp("secrets-lg") / "graph.sqlite"
    shutil.copy(ROOT / "sample_data" / "langgraph.sqlite", db)
    con = sqlite3.connect(db)
    thread, ns, cid = con.execute("SELECT thread_id, checkpoint_ns, checkpoint_id FROM checkpoints LIMIT 1").fetchone()
    value = msgpack.packb(f"AuthenticationError: Incorrect API key provided: {MARKERS['langgraph_error']}")
    con.execute("INSERT INTO writes (thread_id, checkpoint_ns, checkpoint_id, task_id, task_path, idx, channel, "
                "type, value) VALUES (?, ?, ?, 'secret-task', '', -1, '__error__', 'msgpack', ?)",
                (thread, ns, cid, value))
    con.commit()
    con.close()
    return db


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out + err


@pytest.mark.parametrize("fmt", ["table", "json"])
def test_no_marker_in_any_command_output(fmt: str, secret_store: Path, secret_langgraph: Path, tmp_path: Path,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    home = str(tmp_path / "home")
    outputs = {}
    for store, target in ((secret_store, MARKERS["checkpoint_id"]), (secret_langgraph, None)):
        for command in (["index"], ["ls"], ["verify"], ["verify", "--read-data"]):
            outputs[(store.name, *command)] = run(capsys, command[0], str(store), *command[1:],
                                                  "--format", fmt, "--home", home)
        if target is None:  # the LangGraph checkpoint the __error__ write was added to
            con = sqlite3.connect(store)
            target = con.execute("SELECT checkpoint_id FROM writes WHERE task_id = 'secret-task'").fetchone()[0]
            con.close()
        outputs[(store.name, "show")] = run(capsys, "show", str(store), target, "--format", fmt, "--home", home)
    for key, (code, text) in outputs.items():
        assert code in (0, 1), (key, text[-500:])
        assert not leaked(text), (key, leaked(text))
    everything = "".join(text for _code, text in outputs.values())
    assert "[redacted]" in everything
    assert "Incorrect API key provided" in everything  # the error text is shown, its key is not


def test_a_postgres_password_in_a_connection_error_is_redacted(tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    home = str(tmp_path / "home")
    for url in (f"postgresql://ops:{MARKERS['postgres']}@127.0.0.1:1/db",
                f"postgresql://ops@127.0.0.1:1/db?password={MARKERS['postgres']}"):
        code, text = run(capsys, "ls", url, "--home", home)
        assert code == 2 and len(text.strip().splitlines()) == 1
        assert not leaked(text), text


def test_the_index_holds_no_marker_credentials(secret_store: Path, tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    home = tmp_path / "home"
    run(capsys, "ls", f"postgresql://ops:{MARKERS['postgres']}@127.0.0.1:1/db", "--home", str(home))
    run(capsys, "ls", str(secret_store), "--home", str(home))
    for path in home.glob("index.duckdb*"):
        assert MARKERS["postgres"].encode() not in path.read_bytes()
        assert path.stat().st_mode & 0o077 == 0


@pytest.mark.browser
def test_no_marker_in_any_page_in_chromium(secret_store: Path, chromium_browser, tmp_path: Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    home = tmp_path / "home"
    assert run(capsys, "index", str(secret_store), "--home", str(home))[0] in (0, 1)
    proc, url = start_streamlit(DemoStore(secret_store, home), tmp_path / "streamlit.log")
    try:
        wait_for_health(url, proc, timeout=60)
        context = chromium_browser.new_context(viewport={"width": 1400, "height": 900})
        page = context.new_page()
        page.set_default_timeout(30_000)
        seen = []
        for name in ("overview", "timeline", "integrity"):
            page.goto(f"{url}/{name}" if name != "overview" else url)
            page.locator("[data-testid='stMain']").first.wait_for()
            page.wait_for_timeout(3000)
            seen.append((name, page.content()))
            charts = page.evaluate("() => [...document.querySelectorAll('.js-plotly-plot')]"
                                   ".map(p => JSON.stringify(p.data || []))")
            seen.append((f"{name} charts", " ".join(charts)))
        page.goto(f"{url}/timeline")
        _pick_first_checkpoint(page)
        page.get_by_text("Checkpoint", exact=False).first.wait_for()
        page.wait_for_timeout(3000)
        for tab in page.get_by_role("tab").all():
            tab.click()
            page.wait_for_timeout(500)
            seen.append(("checkpoint tab", page.content()))
        context.close()
    finally:
        stop_group(proc)
    for name, html in seen:
        assert not leaked(html), (name, leaked(html))
    assert any("[redacted]" in html for _name, html in seen)


def _pick_first_checkpoint(page) -> None:
    """The Timeline's checkpoint picker, first option. A rerun that redraws the picker while its list
    opens (the page's first run still finishing, under load) closes the list: open it again."""
    picker = page.get_by_test_id("stSelectbox").filter(has_text="Checkpoint")
    option = page.get_by_role("option").first
    for _ in range(5):
        picker.click()
        try:
            option.wait_for(timeout=10_000)
            option.click(timeout=10_000)
            return
        except Exception:  # noqa: BLE001 - the list closed under us: try again
            page.keyboard.press("Escape")
    raise AssertionError(f"the checkpoint picker never listed its options: {page.inner_text('body')[:1000]}")
