"""Recovery on real LangGraph checkpointers (SqliteSaver and PostgresSaver), through the CLI.

After `lastgood restore`, the real graph resumes from the restored state and
LangGraph's own history still lists every earlier checkpoint.
"""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from langgraph.types import Command

from tests.helpers import langgraph_db, lastgood_cli
from tests.langgraph_graphs import (
    build_delta,
    build_interrupt,
    build_tools,
    delta_graph,
    interrupt_graph,
    plain,
    tool_loop_graph,
)

SaverFactory = Callable[[], Any]


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def db(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[str, SaverFactory]:
    """(store URL, a context manager giving a fresh saver on it)."""
    return langgraph_db(request, tmp_path, "recovery")


def cli(*args: str, home: Path, ok: bool = True) -> dict[str, Any]:
    done = lastgood_cli(*args, "--format", "json", home=home, env={"LASTGOOD_OPERATOR": "tester"})
    if ok:
        assert done.returncode == 0, done.stderr
    return json.loads(done.stdout) if done.stdout.strip() else {"stderr": done.stderr, "rc": done.returncode}


def history_ids(graph: Any, config: dict[str, Any]) -> list[str]:
    return [s.config["configurable"]["checkpoint_id"] for s in graph.get_state_history(config)]


def test_restore_then_the_real_graph_resumes_from_it(db: tuple[str, SaverFactory], tmp_path: Path) -> None:
    url, saver_of = db
    with saver_of() as saver:
        thread = build_tools(saver)
        graph = tool_loop_graph(saver)
        history = list(graph.get_state_history(thread.config))
        before_tools = next(s for s in history if s.next == ("tools",))
        target = before_tools.config["configurable"]["checkpoint_id"]
        target_values = plain(before_tools.values)
        earlier = history_ids(graph, thread.config)
    home = tmp_path / "home"
    plan = cli("restore", url, target[:18], "--dry-run", home=home)
    assert plan["dry_run"] and plan["target"] == target and plan["previous_head"] == earlier[0]
    assert any(e["kind"] == "tool_result" and e["tool"] == "add" for e in plan["side_effects"])
    result = cli("restore", url, target, "--reason", "retry the tool", "--yes", home=home)
    assert result["check"]["ok"] and result["new_head"] not in earlier
    with saver_of() as saver:
        graph = tool_loop_graph(saver)
        state = graph.get_state(thread.config)
        assert state.config["configurable"]["checkpoint_id"] == result["new_head"]
        assert plain(state.values) == target_values and state.next == ("tools",)
        assert state.metadata["lastgood"]["reason"] == "retry the tool"
        assert state.metadata["restored_from"] == target
        graph.invoke(None, thread.config)
        final = plain(graph.get_state(thread.config).values)
        assert final["messages"][: len(target_values["messages"])] == target_values["messages"]
        assert final["messages"][-1]["content"].startswith("The answer is")
        assert set(earlier) <= set(history_ids(graph, thread.config))
    journal = cli("journal", url, home=home)
    assert journal["chain_ok"] and [a["action"] for a in journal["actions"]] == ["restore"]
    assert journal["actions"][0]["operator"] == "tester"


def test_interrupted_thread_restores_before_the_interrupt_and_resumes(
        db: tuple[str, SaverFactory], tmp_path: Path) -> None:
    url, saver_of = db
    with saver_of() as saver:
        thread = build_interrupt(saver)
        graph = interrupt_graph(saver)
        history = list(graph.get_state_history(thread.config))
        asked = [s for s in history if s.next == ("ask",)]
        target = asked[-1].config["configurable"]["checkpoint_id"]  # the oldest: before the interrupt
    home = tmp_path / "home"
    plan = cli("restore", url, target, "--dry-run", home=home)
    assert {"interrupt", "resume"} <= {e["kind"] for e in plan["side_effects"]}
    cli("restore", url, target, "--reason", "ask again", "--yes", home=home)
    with saver_of() as saver:
        graph = interrupt_graph(saver)
        assert graph.get_state(thread.config).next == ("ask",)
        graph.invoke(None, thread.config)
        paused = graph.get_state(thread.config)
        assert paused.next == ("ask",) and paused.tasks[0].interrupts
        graph.invoke(Command(resume="no"), thread.config)
        messages = plain(graph.get_state(thread.config).values)["messages"]
        assert messages[-1]["content"] == "approved: no"


def test_delta_channel_thread_restores_to_the_right_values(db: tuple[str, SaverFactory], tmp_path: Path) -> None:
    url, saver_of = db
    with saver_of() as saver:
        thread = build_delta(saver, turns=5)
        graph = delta_graph(saver)
        history = list(graph.get_state_history(thread.config))
        middle = next(s for s in history if len(s.values.get("messages", [])) == 6 and not s.next)
        target, expected = middle.config["configurable"]["checkpoint_id"], plain(middle.values)
    home = tmp_path / "home"
    cli("restore", url, target, "--reason", "back to turn 3", "--yes", home=home)
    with saver_of() as saver:
        graph = delta_graph(saver)
        assert plain(graph.get_state(thread.config).values) == expected
        graph.invoke({"messages": [{"role": "user", "content": "again", "id": "h-again"}]}, thread.config)
        after = plain(graph.get_state(thread.config).values)
        assert after["messages"][:6] == expected["messages"] and after["turns"] == expected["turns"] + 1


def test_rollback_supersedes_later_checkpoints_and_undo_round_trips(
        db: tuple[str, SaverFactory], tmp_path: Path) -> None:
    url, saver_of = db
    with saver_of() as saver:
        thread = build_tools(saver)
        graph = tool_loop_graph(saver)
        history = list(graph.get_state_history(thread.config))
        target = history[2].config["configurable"]["checkpoint_id"]
        later = {s.config["configurable"]["checkpoint_id"] for s in history[:2]}
        head_values = plain(history[0].values)
    home = tmp_path / "home"
    done = cli("rollback", url, thread.thread_id, "--to", target, "--reason", "bad answer", "--yes", home=home)
    assert set(done["superseded"]) == later
    rows = cli("ls", url, "--run", thread.thread_id, home=home)
    assert {r["checkpoint_id"] for r in rows if r["status"] == "superseded"} == later
    fresh = cli("ls", url, "--run", thread.thread_id, home=tmp_path / "fresh-home")  # a new index sees marks too
    assert {r["checkpoint_id"] for r in fresh if r["status"] == "superseded"} == later
    undone = cli("undo", url, done["action_id"], "--reason", "it was fine", "--yes", home=home)
    assert undone["check"]["ok"] and undone["previous_head"] == done["new_head"]
    rows = cli("ls", url, "--run", thread.thread_id, home=home)
    assert not [r for r in rows if r["status"] == "superseded"]
    with saver_of() as saver:
        assert plain(tool_loop_graph(saver).get_state(thread.config).values) == head_values
    journal = cli("journal", url, home=home)
    assert journal["chain_ok"] and journal["actions"][1]["undo_of"] == done["action_id"]


def test_moved_head_conflicts_and_nothing_is_written(db: tuple[str, SaverFactory], tmp_path: Path) -> None:
    url, saver_of = db
    with saver_of() as saver:
        thread = build_tools(saver)
        ids = history_ids(tool_loop_graph(saver), thread.config)
    home = tmp_path / "home"
    done = lastgood_cli("restore", url, ids[2], "--reason", "x", "--yes", "--expect-head", ids[1],
                        home=home)
    assert done.returncode == 1 and "moved" in done.stderr and "Traceback" not in done.stderr
    with saver_of() as saver:
        assert history_ids(tool_loop_graph(saver), thread.config) == ids
    assert cli("journal", url, home=home)["actions"] == []


def test_parallel_restores_with_the_same_expected_head_one_wins(
        db: tuple[str, SaverFactory], tmp_path: Path) -> None:
    url, saver_of = db
    with saver_of() as saver:
        thread = build_tools(saver)
        ids = history_ids(tool_loop_graph(saver), thread.config)
    exe = str(Path(sys.executable).with_name("lastgood"))
    procs = [subprocess.Popen([exe, "restore", url, ids[1 + i % 3], "--reason", f"race {i}", "--yes",
                               "--expect-head", ids[0], "--home", str(tmp_path / f"h{i}")],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for i in range(4)]
    codes = [p.wait(timeout=120) for p in procs]
    assert sorted(codes) == [0, 1, 1, 1], [p.stderr.read() for p in procs]
    journal = cli("journal", url, home=tmp_path / "h-check")
    assert journal["chain_ok"] and len(journal["actions"]) == 1


def test_reading_never_creates_the_journal_table(tmp_path: Path) -> None:
    from langgraph.checkpoint.sqlite import SqliteSaver

    path = tmp_path / "lg.sqlite"
    with sqlite3.connect(str(path), check_same_thread=False) as conn:
        build_tools(SqliteSaver(conn))
    home = tmp_path / "home"
    cli("ls", str(path), home=home)
    assert cli("journal", str(path), home=home) == {"chain_ok": True, "entries": 0, "problems": [],
                                                     "actions": [], "pending": []}
    with sqlite3.connect(str(path)) as conn:
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    assert "lastgood_journal" not in tables


@contextmanager
def read_only_folder(folder: Path) -> Iterator[Path]:
    """``folder`` seen read-only: a read-only bind mount as root (who ignores file modes), else modes."""
    import os

    view = folder.with_name(folder.name + "-ro")
    view.mkdir()
    if os.geteuid() == 0:
        if subprocess.run(["mount", "--bind", str(folder), str(view)]).returncode != 0:
            pytest.skip("this machine refuses a bind mount to root (no CAP_SYS_ADMIN)")
        try:
            subprocess.run(["mount", "-o", "remount,bind,ro", str(view)], check=True)
            yield view
        finally:
            subprocess.run(["umount", str(view)], check=True)
        return
    view.rmdir()
    for path in folder.iterdir():
        path.chmod(0o444)
    folder.chmod(0o555)
    try:
        yield folder
    finally:
        folder.chmod(0o755)


def test_a_write_to_a_read_only_database_is_one_clear_line(tmp_path: Path) -> None:
    from langgraph.checkpoint.sqlite import SqliteSaver

    folder = tmp_path / "db"
    folder.mkdir()
    with sqlite3.connect(str(folder / "lg.sqlite"), check_same_thread=False) as conn:
        build_tools(SqliteSaver(conn))
    before = (folder / "lg.sqlite").read_bytes()
    with read_only_folder(folder) as seen:
        url, home = str(seen / "lg.sqlite"), tmp_path / "home"
        rows = cli("ls", url, home=home)
        target = next(r["checkpoint_id"] for r in rows if r["step"] == 1)
        done = lastgood_cli("restore", url, target, "--reason", "ro", "--yes", home=home)
        assert done.returncode == 2 and done.stderr.count("\n") == 1
        assert "cannot write" in done.stderr and "nothing was written" in done.stderr
        assert "a bug" not in done.stderr
    assert (folder / "lg.sqlite").read_bytes() == before


def _two_journaled_actions(tmp_path: Path) -> tuple[Path, list[str], Path]:
    """A real LangGraph SQLite DB with a restore and a quarantine journaled: (path, ids, home)."""
    from langgraph.checkpoint.sqlite import SqliteSaver

    path = tmp_path / "lg.sqlite"
    with sqlite3.connect(str(path), check_same_thread=False) as conn:
        thread = build_tools(SqliteSaver(conn))
        ids = history_ids(tool_loop_graph(SqliteSaver(conn)), thread.config)
    home = tmp_path / "home"
    cli("restore", str(path), ids[2], "--reason", "first", "--yes", home=home)
    cli("quarantine", str(path), ids[1], "--reason", "second", "--yes", home=home)
    return path, ids, home


def test_a_tampered_journal_breaks_the_chain(tmp_path: Path) -> None:
    path, ids, home = _two_journaled_actions(tmp_path)
    with sqlite3.connect(str(path)) as conn:
        entry = json.loads(conn.execute("SELECT entry FROM lastgood_journal WHERE seq = 1").fetchone()[0])
        entry["reason"] = "rewritten"
        conn.execute("UPDATE lastgood_journal SET entry = ? WHERE seq = 1", (json.dumps(entry),))
    done = lastgood_cli("journal", str(path), "--format", "json", home=home)
    report = json.loads(done.stdout)
    assert done.returncode == 1 and not report["chain_ok"] and "hash" in report["problems"][0]
    with sqlite3.connect(str(path)) as conn:  # an entry that is not JSON at all: reads still work
        conn.execute("UPDATE lastgood_journal SET entry = 'garbage{' WHERE seq = 1")
    assert lastgood_cli("journal", str(path), home=home).returncode == 1
    listed = lastgood_cli("ls", str(path), "--status", "quarantined", "--format", "json", home=home)
    assert listed.returncode == 0 and [r["checkpoint_id"] for r in json.loads(listed.stdout)] == [ids[1]]


def test_deleting_the_newest_journal_rows_is_reported(tmp_path: Path) -> None:
    path, _ids, home = _two_journaled_actions(tmp_path)
    assert lastgood_cli("journal", str(path), home=home).returncode == 0
    with sqlite3.connect(str(path)) as conn:
        conn.execute("DELETE FROM lastgood_journal WHERE seq = 2")
    done = lastgood_cli("journal", str(path), "--format", "json", home=home)
    report = json.loads(done.stdout)
    assert done.returncode == 1 and not report["chain_ok"] and "entry 2" in report["problems"][0]


def test_an_agent_writing_during_restores_gives_conflicts_or_a_consistent_order(
        db: tuple[str, SaverFactory], tmp_path: Path) -> None:
    import threading

    from langchain_core.messages import HumanMessage

    from lastgood import recovery
    from lastgood.index.catalog import Catalog
    from lastgood.errors import ConflictError
    from lastgood.stores import index_store

    url, saver_of = db
    with saver_of() as saver:
        thread = build_tools(saver)
        targets = history_ids(tool_loop_graph(saver), thread.config)[1:4]
    catalog = Catalog(tmp_path / "home" / "index.duckdb")
    stop = threading.Event()

    def agent() -> None:
        with saver_of() as agent_saver:
            graph = tool_loop_graph(agent_saver)
            for turn in range(6):
                if stop.is_set():
                    return
                graph.invoke({"messages": [HumanMessage(content=f"again {turn}", id=f"h-again-{turn}")]},
                             thread.config)

    worker = threading.Thread(target=agent)
    worker.start()
    applied, conflicts = [], 0
    for i in range(6):
        store = index_store(catalog, url, check="none").store
        try:
            plan = recovery.plan_restore(catalog, store, targets[i % 3])
            applied.append(recovery.apply_plan(catalog, store, plan, reason="race", operator="t",
                                               refresh=False))
        except ConflictError:
            conflicts += 1
        finally:
            store.reader.close()
    stop.set()
    worker.join()
    assert applied or conflicts
    with saver_of() as saver:
        for result in applied:  # every restored checkpoint holds exactly its target's values
            made = saver.get_tuple({"configurable": {**thread.config["configurable"], "checkpoint_ns": "",
                                                     "checkpoint_id": result.new_head}})
            source = saver.get_tuple({"configurable": {**thread.config["configurable"], "checkpoint_ns": "",
                                                       "checkpoint_id": result.target}})
            assert made.checkpoint["channel_values"] == source.checkpoint["channel_values"]
            assert made.parent_config == source.parent_config
        ids = history_ids(tool_loop_graph(saver), thread.config)
        assert len(ids) == len(set(ids)) and {r.new_head for r in applied} <= set(ids)
    store = index_store(catalog, url, check="none").store
    assert recovery.journal_report(store)["chain_ok"]


def test_the_check_falls_back_to_lastgoods_reader_without_langgraph(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    from langgraph.checkpoint.sqlite import SqliteSaver

    from lastgood.readers.langgraph.recovery import SqliteRecovery

    path = tmp_path / "lg.sqlite"
    with sqlite3.connect(str(path), check_same_thread=False) as conn:
        thread = build_tools(SqliteSaver(conn))
        ids = history_ids(tool_loop_graph(SqliteSaver(conn)), thread.config)
    cli("restore", str(path), ids[2], "--reason", "x", "--yes", home=tmp_path / "home")
    monkeypatch.setitem(sys.modules, "langgraph.checkpoint.sqlite", None)  # import now fails
    good = SqliteRecovery(str(path)).check_head(thread.thread_id, "", ids[2], None)
    assert good.ok and "Lastgood's reader" in good.message
    bad = SqliteRecovery(str(path)).check_head(thread.thread_id, "", ids[0], None)
    assert not bad.ok
