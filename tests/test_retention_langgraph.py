"""Prune and undo on real LangGraph checkpointers (SqliteSaver and PostgresSaver), read back through
LangGraph's own API: every kept checkpoint has the state it had (DeltaChannel threads included), a
pending interrupt still resumes, an agent writing during the prune loses nothing, and the undo gives
``list()`` back exactly."""

from __future__ import annotations

import threading
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from langgraph.types import Command

from lastgood import retention
from lastgood.index.catalog import Catalog
from lastgood.readers import journal as jr
from lastgood.readers.base import Capability, capabilities
from lastgood.retention.policy import Duration, Policy
from lastgood.stores import index_store
from tests.helpers import langgraph_db
from tests.langgraph_graphs import (build_all, build_delta, build_delta_plain, build_tools,
                                    delta_graph, plain, subgraph_graph, tool_loop_graph)

SaverFactory = Callable[[], Any]
LATER = datetime.now(UTC) + timedelta(days=1)


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def db(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[str, SaverFactory]:
    """(store URL, a context manager giving a fresh saver on it)."""
    return langgraph_db(request, tmp_path, "retention")


def _listing(saver: Any) -> list[tuple[Any, ...]]:
    """``saver.list(None)`` as comparable data: config, checkpoint, metadata, parent, pending writes."""
    return [(t.config, t.checkpoint, t.metadata, t.parent_config, t.pending_writes) for t in saver.list(None)]


def _history(thread: Any, saver: Any) -> dict[str, Any]:
    """``get_state_history`` of the thread: checkpoint id -> (values, next) as plain data."""
    return {s.config["configurable"]["checkpoint_id"]: (plain(s.values), s.next)
            for s in thread.graph.get_state_history(thread.config)}


def _open(tmp_path: Path, url: str) -> tuple[Catalog, Any]:
    catalog = Catalog(tmp_path / "home" / "index.duckdb")
    return catalog, index_store(catalog, url).store


def _rebind(threads: list[Any], saver: Any) -> None:
    """Each thread's graph compiled again on ``saver`` (a new connection)."""
    for thread in threads:
        thread.graph.checkpointer = saver


def test_langgraph_readers_offer_retention(db: tuple[str, SaverFactory]) -> None:
    url, saver_of = db
    with saver_of() as saver:
        build_tools(saver)
    from lastgood.readers.registry import open_reader

    assert Capability.RETENTION in capabilities(open_reader(url))


def test_kept_checkpoints_read_the_same_and_undo_gives_list_back(db: tuple[str, SaverFactory], tmp_path: Path) -> None:
    url, saver_of = db
    with saver_of() as saver:
        threads = build_all(saver) + [build_delta_plain(saver)]
        before_list = _listing(saver)
        before = {t.thread_id: _history(t, saver) for t in threads}
    catalog, store = _open(tmp_path, url)
    plan = retention.plan_prune(catalog, store, Policy(last=2), now=LATER)
    assert plan.summary["forget"] > 0
    delta_keep = [r for r in plan.checkpoints(keep=True) if r["run_id"] in ("delta-1", "delta-plain-1")]
    assert any(any("delta-ancestor" in x for x in r["reasons"]) for r in delta_keep)
    result = retention.apply_prune(catalog, store, plan, reason="keep 2", operator="ana")
    assert result.checkpoints == plan.summary["forget"] and not result.skipped
    space = result.space  # said plainly per backend: SQLite keeps free pages, Postgres leaves it to autovacuum
    if url.startswith("postgresql"):
        assert space["vacuumed"] is False and "autovacuum" in space["notes"][0] and space["free_bytes"] is None
    else:
        assert space["free_bytes"] > 0 and space["auto_vacuum"] == "none"
        assert "free pages inside the file" in " ".join(space["notes"])
    with saver_of() as saver:
        _rebind(threads, saver)
        for thread in threads:
            after = _history(thread, saver)
            assert after and set(after) <= set(before[thread.thread_id])
            for cid, state in after.items():  # LangGraph's own reading of each kept checkpoint
                assert state == before[thread.thread_id][cid], (thread.name, cid)
        kept = {r["checkpoint_id"] for r in plan.checkpoints(keep=True)}
        assert {t[0]["configurable"]["checkpoint_id"] for t in _listing(saver)} == kept
    store = index_store(catalog, url).store
    undo = retention.plan_undo_prune(catalog, store, result.action_id)
    retention.apply_undo_prune(catalog, store, undo, reason="back", operator="ana")
    with saver_of() as saver:
        assert _listing(saver) == before_list
    entries = store.reader.recovery().journal_entries()
    assert jr.verify_chain(entries).ok and [e["action"] for e in entries] == ["prune", "undo"]
    assert store.reader.recovery().pending() == []


def test_a_pending_interrupt_in_a_subgraph_still_resumes_after_a_prune(db: tuple[str, SaverFactory],
                                                                      tmp_path: Path) -> None:
    url, saver_of = db
    with saver_of() as saver:
        graph = subgraph_graph(saver)
        config = {"configurable": {"thread_id": "sub-pending"}}
        graph.invoke({"messages": [{"role": "user", "content": "delegate", "id": "h-1"}], "note": "start"}, config)
        for turn in range(3):  # more history in other threads
            build_tools(saver, thread_id=f"tools-{turn}")
        paused = graph.get_state(config, subgraphs=True)
        assert paused.next == ("child",)
    catalog, store = _open(tmp_path, url)
    plan = retention.plan_prune(catalog, store, Policy(last=1), now=LATER)
    reasons = {r["checkpoint_id"]: r["reasons"] for r in plan.checkpoints(keep=True) if r["run_id"] == "sub-pending"}
    assert any(any("subgraph-parent" in x or "interrupt-chain" in x for x in rs) for rs in reasons.values())
    retention.apply_prune(catalog, store, plan, reason="tidy", operator="ana")
    with saver_of() as saver:
        graph = subgraph_graph(saver)
        graph.invoke(Command(resume="done"), config)
        messages = plain(graph.get_state(config).values)["messages"]
        assert messages[-1]["content"] == "child got done"


def test_delta_thread_keeps_its_ancestors_back_to_the_snapshot(db: tuple[str, SaverFactory], tmp_path: Path) -> None:
    url, saver_of = db
    with saver_of() as saver:
        thread = build_delta(saver, turns=5)  # the head is not a snapshot: it needs ancestors
        history = list(delta_graph(saver).get_state_history(thread.config))
        head = plain(history[0].values)
    catalog, store = _open(tmp_path, url)
    plan = retention.plan_prune(catalog, store, Policy(last=1), now=LATER)
    kept = plan.checkpoints(keep=True)
    assert len(kept) > 1 and any("delta-ancestor" in r for row in kept for r in row["reasons"])
    retention.apply_prune(catalog, store, plan, reason="tidy", operator="ana")
    with saver_of() as saver:
        graph = delta_graph(saver)
        assert plain(graph.get_state(thread.config).values) == head
        graph.invoke({"messages": [{"role": "user", "content": "more", "id": "h-more"}]}, thread.config)
        after = plain(graph.get_state(thread.config).values)
        assert after["messages"][: len(head["messages"])] == head["messages"]


def test_an_agent_writing_during_the_prune_loses_nothing(db: tuple[str, SaverFactory], tmp_path: Path) -> None:
    url, saver_of = db
    with saver_of() as saver:
        for n in range(12):
            build_tools(saver, thread_id=f"old-{n}")
        build_tools(saver, thread_id="live")
    catalog, store = _open(tmp_path, url)
    plan = retention.plan_prune(catalog, store, Policy(last=1), now=LATER)
    written: list[str] = []
    stop = threading.Event()

    def agent() -> None:
        with saver_of() as saver:
            graph = tool_loop_graph(saver)
            config = {"configurable": {"thread_id": "live"}}
            while not stop.is_set():
                graph.invoke({"messages": [{"role": "user", "content": "again", "id": f"h-{len(written)}"}]}, config)
                written.extend(s.config["configurable"]["checkpoint_id"] for s in graph.get_state_history(config))
    worker = threading.Thread(target=agent)
    worker.start()
    try:
        result = retention.apply_prune(catalog, store, plan, reason="while it runs", operator="ana")
    finally:
        stop.set()
        worker.join(timeout=120)
    assert not worker.is_alive() and written
    going = {r["checkpoint_id"] for r in plan.checkpoints(keep=False)}
    with saver_of() as saver:
        present = {t.config["configurable"]["checkpoint_id"] for t in saver.list(None)}
        graph = tool_loop_graph(saver)
        latest = graph.get_state({"configurable": {"thread_id": "live"}})
    assert set(written) - going <= present  # everything the agent wrote after the plan survived
    assert latest.values["messages"]  # and its thread still reads
    assert result.checkpoints + len(result.skipped) >= len(going) - len(set(written) & going)


def test_stale_threads_go_whole_and_a_thread_written_since_conflicts(db: tuple[str, SaverFactory],
                                                                     tmp_path: Path) -> None:
    url, saver_of = db
    with saver_of() as saver:
        build_tools(saver, thread_id="stale")
        build_tools(saver, thread_id="fresh")
    catalog, store = _open(tmp_path, url)
    # every checkpoint is "old" seen from two days ahead; the fresh one is pinned (its run is held)
    fresh = [r for r in retention.plan_prune(catalog, store, Policy(last=1), now=LATER).checkpoints(keep=True)
             if r["run_id"] == "fresh"][0]
    retention.pin(catalog, store, fresh["checkpoint_id"], reason="keep", operator="ana")
    plan = retention.plan_prune(catalog, store, Policy(runs_within=Duration(days=1)), now=LATER + timedelta(days=1))
    runs = {r["run_id"]: r for r in plan.per_run}
    assert runs["stale"]["goes_whole"] and runs["fresh"]["forget"] == 0
    result = retention.apply_prune(catalog, store, plan, reason="stale", operator="ana")
    with saver_of() as saver:
        assert not list(saver.list({"configurable": {"thread_id": "stale"}}))
        build_tools(saver, thread_id="stale")  # the thread id is used again
    store = index_store(catalog, url).store
    undo = retention.plan_undo_prune(catalog, store, result.action_id)
    assert undo.conflicts and "written to since" in undo.conflicts[0]
