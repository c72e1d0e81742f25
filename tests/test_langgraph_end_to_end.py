"""Real LangGraph databases (SqliteSaver and PostgresSaver) through the `lastgood` CLI and the pages."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from tests.helpers import ROOT, lastgood_cli
from tests.langgraph_graphs import SqliteStore, build_all, write_sqlite_store

ENTRY = str(ROOT / "app" / "streamlit_app.py")


@pytest.fixture(scope="module")
def lg(tmp_path_factory: pytest.TempPathFactory) -> tuple[SqliteStore, Path]:
    base = tmp_path_factory.mktemp("lg")
    store = write_sqlite_store(base / "graph.sqlite")
    home = base / "home"
    assert lastgood_cli("index", str(store.path), home=home).returncode == 0
    return store, home


def ls(url: str, home: Path, env: dict[str, str] | None = None) -> list[dict]:
    done = lastgood_cli("ls", url, "--format", "json", home=home, env=env)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def show(url: str, checkpoint: str, home: Path) -> dict:
    done = lastgood_cli("show", url, checkpoint, "--format", "json", home=home)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_ls_matches_langgraphs_own_history(lg: tuple[SqliteStore, Path]) -> None:
    store, home = lg
    rows = ls(str(store.path), home)
    for (thread, ns), history in store.expected.items():
        mine = sorted((r for r in rows if r["run_id"] == thread and r["namespace"] == ns),
                      key=lambda r: r["checkpoint_id"], reverse=True)
        assert [r["checkpoint_id"] for r in mine] == [h["checkpoint_id"] for h in history]
        assert [(r["parent_id"], r["step"], r["trigger"]) for r in mine] == \
            [(h["parent_id"], h["step"], h["source"]) for h in history]
    assert {r["status"] for r in rows} == {"ok"}


def test_show_renders_messages_and_pending_errors(lg: tuple[SqliteStore, Path]) -> None:
    store, home = lg
    rows = ls(str(store.path), home)
    tools = next(t for t in store.threads if t.name == "tools")
    head = max((r for r in rows if r["run_id"] == tools.thread_id), key=lambda r: r["checkpoint_id"])
    shown = show(str(store.path), head["checkpoint_id"][:-4], home)
    expected = next(h for h in store.expected[(tools.thread_id, "")] if h["checkpoint_id"] == head["checkpoint_id"])
    messages = shown["state"]["messages"]
    assert [m["role"] for m in messages] == [m["type"] if "type" in m else m["role"]
                                             for m in expected["values"]["messages"]]
    assert any(m["tool_calls"] for m in messages)
    error = next(t for t in store.threads if t.name == "error")
    failing = next(h for h in store.expected[(error.thread_id, "")]
                   if any(ch == "__error__" for _, ch, _ in h["pending_writes"]))
    shown = show(str(store.path), failing["checkpoint_id"], home)
    assert any(w["channel"] == "__error__" for w in shown["pending_writes"])
    assert any(f["check"] == "pending-error" for f in shown["findings"])
    assert any(e["kind"] == "error" for e in shown["events"])


def test_reading_leaves_the_database_untouched(lg: tuple[SqliteStore, Path]) -> None:
    store, home = lg
    before = sorted(p.name for p in store.path.parent.iterdir())
    digest = store.path.read_bytes()
    ls(str(store.path), home)
    lastgood_cli("verify", str(store.path), "--read-data", home=home)
    assert sorted(p.name for p in store.path.parent.iterdir()) == before
    assert store.path.read_bytes() == digest


def test_pages_render_a_langgraph_database(lg: tuple[SqliteStore, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    store, home = lg
    monkeypatch.setenv("LASTGOOD_HOME", str(home))
    monkeypatch.setenv("LASTGOOD_STORES", str(store.path))
    at = AppTest.from_file(ENTRY, default_timeout=30).run()
    assert not at.exception, [e.value for e in at.exception]
    total = sum(len(h) for h in store.expected.values())
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["Checkpoints"] == f"{total:,}" and metrics["Runs"] == str(len(store.threads))
    at.switch_page("../pages/timeline.py").run()
    tools = next(t for t in store.threads if t.name == "tools")
    head = store.expected[(tools.thread_id, "")][0]["checkpoint_id"]
    at.selectbox(key="tl_run").select(tools.thread_id).run()
    at.selectbox(key="tl_ckpt").select(head).run()
    assert not at.exception, [e.value for e in at.exception]
    assert any(head in s.value for s in at.subheader)
    assert len(at.chat_message) >= 3 and {m.name for m in at.chat_message} >= {"user", "assistant"}


@pytest.mark.postgres
def test_cli_on_a_real_postgres_checkpointer(pg_create_database, tmp_path: Path) -> None:
    from langgraph.checkpoint.postgres import PostgresSaver

    dsn = pg_create_database("e2e")
    with PostgresSaver.from_conn_string(dsn) as saver:
        saver.setup()
        threads = build_all(saver)
        root = {t.thread_id: {"configurable": {"thread_id": t.thread_id, "checkpoint_ns": ""}} for t in threads}
        expected = {thread: [c.config["configurable"]["checkpoint_id"] for c in saver.list(config)]
                    for thread, config in root.items()}
    rows = ls(dsn, tmp_path / "home")
    for thread, ids in expected.items():
        assert sorted(r["checkpoint_id"] for r in rows if r["run_id"] == thread and r["namespace"] == "") == sorted(ids)
    tools = next(t for t in threads if t.name == "tools")
    shown = show(dsn, expected[tools.thread_id][0], tmp_path / "home")
    assert shown["state"]["messages"] and shown["checkpoint"]["run_id"] == tools.thread_id
    assert "postgres@" not in json.dumps(shown)
