"""``lastgood.langgraph.LastgoodSaver``: LangGraph's own conformance suite on a folder, on ``memory://``,
on a compacted store and on S3 (moto); real graphs behaving as on SqliteSaver; Lastgood reading the
store natively (ls/show/verify, states and writes as LangGraph sees them); ``lastgood restore`` and a
graph resuming from it; a throughput smoke check against SqliteSaver (the figures:
benchmarks/bench_langgraph_saver.py)."""

from __future__ import annotations

import asyncio
import json
import os
import re
import sqlite3
import statistics
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import HumanMessage
from langgraph.checkpoint.base import ERROR, INTERRUPT
from langgraph.checkpoint.conformance import checkpointer_test, validate
from langgraph.checkpoint.conformance.capabilities import ALL_CAPABILITIES
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.graph import END, START, StateGraph
from langgraph.types import Command

from lastgood.errors import ConflictError, DecodeError
from lastgood.langgraph import LastgoodSaver
from lastgood.readers.base import record_from_row
from lastgood.readers.langgraph.serde import is_internal_channel
from lastgood.readers.native.reader import NativeReader
from tests.helpers import lastgood_cli
from tests.langgraph_graphs import (
    build_all,
    build_delta,
    build_delta_plain,
    build_interrupt,
    build_tools,
    delta_graph,
    expected_history,
    interrupt_graph,
    plain,
    tool_loop_graph,
)

CAPABILITIES = sorted(c.value for c in ALL_CAPABILITIES)


# ---- LangGraph's conformance suite -----------------------------------------------------------------

def conformance(make_saver: Any, capabilities: set[str] | None = None) -> dict[str, Any]:
    """Run langgraph-checkpoint-conformance; its report as a dict (every failure printed)."""
    @checkpointer_test(name=f"LastgoodSaver-{uuid.uuid4().hex[:6]}")
    async def factory() -> Any:
        yield make_saver()

    report = asyncio.run(validate(factory, capabilities=capabilities))
    result = report.to_dict()
    for name, cap in result["results"].items():
        for failure in cap["failures"]:
            print(f"{name}: {failure}")
    return result


def assert_all_pass(result: dict[str, Any], capabilities: list[str]) -> None:
    caps = result["results"]
    assert sorted(n for n, c in caps.items() if c["detected"]) == capabilities
    assert all(caps[n]["passed"] is True and caps[n]["tests_failed"] == 0 for n in capabilities), caps
    assert sum(caps[n]["tests_passed"] for n in capabilities) >= 5 * len(capabilities)


def test_conformance_every_capability_on_a_local_folder(tmp_path: Path) -> None:
    result = conformance(lambda: LastgoodSaver(str(tmp_path / uuid.uuid4().hex)))
    assert_all_pass(result, CAPABILITIES)
    assert result["conformance_level"] == "FULL"


def test_conformance_every_capability_on_memory() -> None:
    result = conformance(lambda: LastgoodSaver(f"memory://lastgood-conformance-{uuid.uuid4().hex}"))
    assert_all_pass(result, CAPABILITIES)


class CompactingSaver(LastgoodSaver):
    """Folds the commit markers into a Parquet part after every other put: lookups, listings,
    deletes, prunes and copies then find checkpoints in parts and tail files alike."""

    puts = 0

    def put(self, *args: Any, **kwargs: Any) -> Any:
        config = super().put(*args, **kwargs)
        CompactingSaver.puts += 1
        if CompactingSaver.puts % 2 == 0:
            self.compact()
        return config


def test_conformance_every_capability_on_a_compacted_store(tmp_path: Path) -> None:
    result = conformance(lambda: CompactingSaver(str(tmp_path / uuid.uuid4().hex), fsync="none"))
    assert_all_pass(result, CAPABILITIES)


@pytest.mark.s3
def test_conformance_base_capabilities_on_s3(s3_endpoint: str) -> None:
    import s3fs

    options = {"endpoint_url": s3_endpoint, "key": "testing", "secret": "testing"}
    bucket = f"lastgood-{uuid.uuid4().hex[:10]}"
    s3fs.S3FileSystem(**options).mkdir(bucket)
    base = ["delete_thread", "get_tuple", "list", "put", "put_writes"]
    result = conformance(lambda: LastgoodSaver(f"s3://{bucket}/{uuid.uuid4().hex[:8]}", options), set(base))
    assert_all_pass(result, base)


# ---- real graphs: the same behaviour as SqliteSaver, read natively by Lastgood ------------------------

@pytest.fixture(scope="module")
def graphs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Every scenario of tests/langgraph_graphs.py run on LastgoodSaver and on SqliteSaver."""
    base = tmp_path_factory.mktemp("saver")
    url = str(base / "store")
    saver = LastgoodSaver(url)
    threads = build_all(saver) + [build_delta_plain(saver)]
    expected = {(t.thread_id, ns): expected_history(t, saver, ns) for t in threads for ns in t.namespaces}
    conn = sqlite3.connect(str(base / "anchor.sqlite"), check_same_thread=False)
    sqlite = SqliteSaver(conn)
    anchor_threads = build_all(sqlite) + [build_delta_plain(sqlite)]
    anchor = {t.name: [expected_history(t, sqlite, ns) for ns in t.namespaces] for t in anchor_threads}
    conn.close()
    home = base / "home"
    return {"url": url, "saver": saver, "threads": threads, "expected": expected, "anchor": anchor, "home": home}


def _comparable(history: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    """A thread's history without the ids (checkpoint, task and interrupt ids differ in every run)."""
    def text(value: Any) -> str:
        return IDS.sub("<id>", json.dumps(value, sort_keys=True, default=str))
    return [(h["step"], h["source"], h["parent_id"] is None, text(h["values"]),
             [(ch, text(v)) for _, ch, v in h["pending_writes"]]) for h in history]


IDS = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}|[0-9a-f]{32}")


def test_real_graphs_behave_as_on_sqlitesaver(graphs: dict[str, Any]) -> None:
    for thread in graphs["threads"]:
        mine = [expected_history(thread, graphs["saver"], ns) for ns in thread.namespaces]
        assert [_comparable(h) for h in mine] == [_comparable(h) for h in graphs["anchor"][thread.name]], thread.name


def cli(*args: str, home: Path, ok: bool = True) -> Any:
    done = lastgood_cli(*args, "--format", "json", home=home, env={"LASTGOOD_OPERATOR": "tester"})
    if ok:
        assert done.returncode == 0, done.stderr
    return json.loads(done.stdout) if done.stdout.strip() else {"stderr": done.stderr, "rc": done.returncode}


def test_lastgood_ls_lists_what_langgraph_lists(graphs: dict[str, Any]) -> None:
    rows = cli("ls", graphs["url"], home=graphs["home"])
    assert len(rows) == sum(len(h) for h in graphs["expected"].values())
    for (thread, ns), history in graphs["expected"].items():
        mine = sorted((r for r in rows if r["run_id"] == thread and r["namespace"] == ns),
                      key=lambda r: r["checkpoint_id"], reverse=True)
        assert [(r["checkpoint_id"], r["parent_id"], r["step"], r["trigger"]) for r in mine] == \
            [(h["checkpoint_id"], h["parent_id"], h["step"], h["source"]) for h in history], (thread, ns)
    assert {r["status"] for r in rows} == {"ok"}


def test_native_reader_states_and_writes_are_langgraphs(graphs: dict[str, Any]) -> None:
    with NativeReader(graphs["url"]) as reader:
        scan = reader.scan()
        rows = [r for batch in scan.checkpoints for r in
                (batch.to_table() if hasattr(batch, "to_table") else batch).to_pylist()]
        for (thread, ns), history in graphs["expected"].items():
            records = sorted((record_from_row(r) for r in rows if r["run_id"] == thread and r["namespace"] == ns),
                             key=lambda r: r.checkpoint_id, reverse=True)
            for record, want in zip(records, history, strict=True):
                state = reader.load_state(record)
                user = {k: v for k, v in state.items() if not is_internal_channel(k) and v != []}
                for channel, value in list(user.items()):  # a DeltaChannel of numbers: seed + writes shown
                    if isinstance(value, dict) and "$not_shown" in value:
                        assert thread == "delta-plain-1" and "writes" in value
                        del user[channel]
                        want = {**want, "values": {k: v for k, v in want["values"].items() if k != channel}}
                assert user == {k: v for k, v in want["values"].items() if v != []}, (thread, ns, record.step)
                got = [(w.task_id, w.channel, w.value) for w in reader.pending_writes(record)]
                assert [(t, ch) for t, ch, _ in got] == [(t, ch) for t, ch, _ in want["pending_writes"]]
        heads = {(h.run_id, h.namespace): h.checkpoint_id for h in scan.heads}
        for (thread, ns), history in graphs["expected"].items():
            assert heads[(thread, ns)] == history[0]["checkpoint_id"]


def test_show_and_verify_read_the_store_and_run_nothing_from_it(graphs: dict[str, Any]) -> None:
    url, home = graphs["url"], graphs["home"]
    tools = next(t for t in graphs["threads"] if t.name == "tools")
    head = graphs["expected"][(tools.thread_id, "")][0]
    shown = cli("show", url, head["checkpoint_id"], home=home)
    assert [m["role"] for m in shown["state"]["messages"]] == [m["role"] for m in head["values"]["messages"]]
    assert any(m["tool_calls"] for m in shown["state"]["messages"])
    error = next(t for t in graphs["threads"] if t.name == "error")
    failing = next(h for h in graphs["expected"][(error.thread_id, "")]
                   if any(ch == ERROR for _, ch, _ in h["pending_writes"]))
    shown = cli("show", url, failing["checkpoint_id"], home=home)
    assert any(w["channel"] == ERROR and "exploded" in str(w["value"]) for w in shown["pending_writes"])
    verified = lastgood_cli("verify", url, "--read-data", "--format", "json", home=home)
    assert verified.returncode in (0, 1), verified.stderr
    findings = json.loads(verified.stdout)["findings"]
    assert not [f for f in findings if f["severity"] == "error"], findings
    assert any(f["check"] == "pending-error" for f in findings)


def test_diff_between_two_checkpoints(graphs: dict[str, Any]) -> None:
    tools = next(t for t in graphs["threads"] if t.name == "tools")
    history = graphs["expected"][(tools.thread_id, "")]
    done = lastgood_cli("diff", graphs["url"], history[-1]["checkpoint_id"], history[0]["checkpoint_id"],
                        home=graphs["home"])
    assert done.returncode in (0, 1), done.stderr
    assert "messages" in done.stdout


def test_special_writes_keep_their_index_and_task_path(tmp_path: Path) -> None:
    saver = LastgoodSaver(str(tmp_path / "s"))
    config = saver.put({"configurable": {"thread_id": "t", "checkpoint_ns": ""}}, _checkpoint(), _meta(), {})
    saver.put_writes(config, [("a", 1), ("b", {"x": [1, 2]})], "task-2", task_path="~b")
    saver.put_writes(config, [(ERROR, "boom"), (INTERRUPT, {"q": "?"})], "task-1", task_path="~a")
    saver.put_writes(config, [(ERROR, "boom again")], "task-1", task_path="~a")  # special: replaces
    saver.put_writes(config, [("a", 99)], "task-2", task_path="~b")  # regular: ignored (first one kept)
    writes = saver.get_tuple(config).pending_writes
    assert writes == [("task-1", INTERRUPT, {"q": "?"}), ("task-1", ERROR, "boom again"),  # LangGraph's order:
                      ("task-2", "a", 1), ("task-2", "b", {"x": [1, 2]})]  # task_path, task_id, idx
    with NativeReader(str(tmp_path / "s")) as reader:
        record = next(record_from_row(r) for b in reader.scan().checkpoints for r in b.to_pylist())
        stored = [(w.task_id, w.channel, w.idx, w.task_path) for w in reader.pending_writes(record)]
    assert stored == [("task-1", INTERRUPT, -3, "~a"), ("task-1", ERROR, -1, "~a"),
                      ("task-2", "a", 0, "~b"), ("task-2", "b", 1, "~b")]


# ---- restore with the CLI, then the real graph resumes ------------------------------------------------

def test_restore_then_the_real_graph_resumes_from_it(tmp_path: Path) -> None:
    url, home = str(tmp_path / "store"), tmp_path / "home"
    saver = LastgoodSaver(url)
    thread = build_tools(saver)
    graph = tool_loop_graph(saver)
    history = list(graph.get_state_history(thread.config))
    before_tools = next(s for s in history if s.next == ("tools",))
    target, target_values = before_tools.config["configurable"]["checkpoint_id"], plain(before_tools.values)
    earlier = [s.config["configurable"]["checkpoint_id"] for s in history]
    old_writes = cli("show", url, target, home=home)["pending_writes"]
    assert "messages" in {w["channel"] for w in old_writes}  # the tool's result, in the old timeline
    plan = cli("restore", url, target[:18], "--dry-run", home=home)
    assert plan["dry_run"] and plan["target"] == target and plan["previous_head"] == earlier[0]
    result = cli("restore", url, target, "--reason", "retry the tool", "--yes", home=home)
    assert result["check"]["ok"] and result["new_head"] == target
    assert cli("show", url, target, home=home)["pending_writes"] == []  # void now: the tool runs again
    assert saver.get_tuple({"configurable": {"thread_id": thread.thread_id}}).pending_writes == []
    state = graph.get_state(thread.config)  # the same process, the same saver: it reads the moved head
    assert state.config["configurable"]["checkpoint_id"] == target
    assert plain(state.values) == target_values and state.next == ("tools",)
    graph.invoke(None, thread.config)
    resumed = graph.get_state(thread.config)
    final = plain(resumed.values)
    assert final["messages"][: len(target_values["messages"])] == target_values["messages"]
    assert final["messages"][-1]["content"].startswith("The answer is")
    first_new = [s for s in graph.get_state_history(thread.config)
                 if s.config["configurable"]["checkpoint_id"] not in earlier][-1]
    assert first_new.parent_config["configurable"]["checkpoint_id"] == target
    new_writes = cli("show", url, target, home=home)["pending_writes"]  # the tool ran again: its new result
    assert sorted(w["channel"] for w in new_writes) == sorted(w["channel"] for w in old_writes)
    assert [w["task_id"] for w in new_writes] == [w["task_id"] for w in old_writes]  # the same task, run again
    fresh = tool_loop_graph(LastgoodSaver(url))  # another process's saver sees the same thread
    assert plain(fresh.get_state(thread.config).values) == final
    rows = cli("ls", url, "--run", thread.thread_id, home=home)
    assert {r["checkpoint_id"] for r in rows} >= set(earlier)
    journal = cli("journal", url, home=home)
    assert journal["chain_ok"] and [a["action"] for a in journal["actions"]] == ["restore"]


def test_restore_a_new_turn_away(tmp_path: Path) -> None:
    """Two turns, restore the end of the first, a third turn continues from it: turn two is gone."""
    url, home = str(tmp_path / "store"), tmp_path / "home"
    saver = LastgoodSaver(url)
    graph, config = tool_loop_graph(saver), {"configurable": {"thread_id": "turns"}}
    graph.invoke({"messages": [HumanMessage("one", id="h1")], "note": "a"}, config)
    after_one = graph.get_state(config)
    graph.invoke({"messages": [HumanMessage("two", id="h2")]}, config)
    cli("restore", url, after_one.config["configurable"]["checkpoint_id"], "--reason", "turn two was bad", "--yes",
        home=home)
    graph.invoke({"messages": [HumanMessage("three", id="h3")]}, config)
    humans = [m.content for m in graph.get_state(config).values["messages"] if m.type == "human"]
    assert humans == ["one", "three"]


def test_interrupted_thread_restores_before_the_interrupt_and_resumes(tmp_path: Path) -> None:
    url, home = str(tmp_path / "store"), tmp_path / "home"
    saver = LastgoodSaver(url)
    thread = build_interrupt(saver)
    graph = interrupt_graph(saver)
    asked = [s for s in graph.get_state_history(thread.config) if s.next == ("ask",)]
    cli("restore", url, asked[-1].config["configurable"]["checkpoint_id"], "--reason", "ask again", "--yes",
        home=home)
    assert graph.get_state(thread.config).next == ("ask",)
    graph.invoke(None, thread.config)
    paused = graph.get_state(thread.config)
    assert paused.next == ("ask",) and paused.tasks[0].interrupts
    graph.invoke(Command(resume="no"), thread.config)
    assert plain(graph.get_state(thread.config).values)["messages"][-1]["content"] == "approved: no"


def test_delta_channel_thread_restores_to_the_right_values(tmp_path: Path) -> None:
    url, home = str(tmp_path / "store"), tmp_path / "home"
    saver = LastgoodSaver(url)
    thread = build_delta(saver, turns=5)
    graph = delta_graph(saver)
    middle = next(s for s in graph.get_state_history(thread.config)
                  if len(s.values.get("messages", [])) == 6 and not s.next)
    target, expected = middle.config["configurable"]["checkpoint_id"], plain(middle.values)
    shown = cli("show", url, target, home=home)  # the native reader rebuilds the DeltaChannel too
    assert [m["content"] for m in shown["state"]["messages"]] == [m["content"] for m in expected["messages"]]
    cli("restore", url, target, "--reason", "back to turn 3", "--yes", home=home)
    assert plain(graph.get_state(thread.config).values) == expected
    graph.invoke({"messages": [{"role": "user", "content": "again", "id": "h-again"}]}, thread.config)
    after = plain(graph.get_state(thread.config).values)
    assert after["messages"][:6] == expected["messages"] and after["turns"] == expected["turns"] + 1


def test_rollback_then_undo(tmp_path: Path) -> None:
    url, home = str(tmp_path / "store"), tmp_path / "home"
    saver = LastgoodSaver(url)
    thread = build_tools(saver)
    graph = tool_loop_graph(saver)
    history = list(graph.get_state_history(thread.config))
    target = history[2].config["configurable"]["checkpoint_id"]
    later = {s.config["configurable"]["checkpoint_id"] for s in history[:2]}
    done = cli("rollback", url, thread.thread_id, "--to", target, "--reason", "bad answer", "--yes", home=home)
    assert set(done["superseded"]) == later
    assert graph.get_state(thread.config).config["configurable"]["checkpoint_id"] == target
    cli("undo", url, done["action_id"], "--reason", "it was fine", "--yes", home=home)
    assert plain(graph.get_state(thread.config).values) == plain(history[0].values)


def _restoring_graph(saver: Any, restore: Any) -> Any:
    """a -> b -> c; b runs ``restore`` (an operator restoring the thread while the graph runs)."""
    builder = StateGraph(dict)

    def step(name: str) -> Any:
        def run(state: dict[str, Any]) -> dict[str, Any]:
            if name == "b" and restore is not None:
                restore()
            return {"path": [*state.get("path", []), name]}
        return run

    for name in "abc":
        builder.add_node(name, step(name))
    builder.add_edge(START, "a")
    builder.add_edge("a", "b")
    builder.add_edge("b", "c")
    builder.add_edge("c", END)
    return builder.compile(checkpointer=saver)


def test_a_graph_running_across_a_restore_is_refused_then_resumes_from_it(tmp_path: Path) -> None:
    url, home = str(tmp_path / "store"), tmp_path / "home"
    saver = LastgoodSaver(url)
    config = {"configurable": {"thread_id": "live"}}
    _restoring_graph(saver, None).invoke({"path": ["start"]}, config)
    first = saver.get_tuple(config).config["configurable"]["checkpoint_id"]  # path: start a b c

    def restore() -> None:
        cli("restore", url, first, "--reason", "while it runs", "--yes", home=home)

    graph = _restoring_graph(saver, restore)
    with pytest.raises(ConflictError, match="moved by restore"):
        graph.invoke({"path": ["again"]}, config, durability="sync")
    assert saver.get_tuple(config).config["configurable"]["checkpoint_id"] == first  # the restore stands
    graph = _restoring_graph(saver, None)
    graph.invoke({"path": ["after"]}, config)
    assert graph.get_state(config).values["path"] == ["after", "a", "b", "c"]
    assert graph.get_state(config).parent_config is not None


# ---- async, efficiency, damage, crashes -------------------------------------------------------------

def test_async_graph_writes_what_the_sync_graph_writes(tmp_path: Path) -> None:
    saver = LastgoodSaver(str(tmp_path / "async"))
    graph = tool_loop_graph(saver)
    config = {"configurable": {"thread_id": "a"}}

    async def run() -> Any:
        await graph.ainvoke({"messages": [HumanMessage("what is 1 + 2?", id="h-1")], "note": "start"}, config)
        return [t async for t in saver.alist(config)], await saver.aget_tuple(config)

    listed, latest = asyncio.run(run())
    sync = build_tools(LastgoodSaver(str(tmp_path / "sync")), thread_id="a")
    assert plain(latest.checkpoint["channel_values"]["messages"]) == \
        plain(sync.graph.get_state(sync.config).values["messages"])
    assert len(listed) == len(list(sync.graph.get_state_history(sync.config)))


def test_latest_reads_the_head_and_list_reads_only_what_it_yields(tmp_path: Path, monkeypatch: Any) -> None:
    saver = LastgoodSaver(str(tmp_path / "s"), fsync="none")
    config = {"configurable": {"thread_id": "long", "checkpoint_ns": ""}}
    ids = []
    for step in range(300):
        checkpoint = _checkpoint({"n": step})
        config = saver.put(config, checkpoint, _meta(step=step), {})
        ids.append(checkpoint["id"])
    store = type(saver.store)

    def no_listing(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("get_tuple listed a folder")
    blobs: list[str] = []
    read_blob = store.read_blob
    monkeypatch.setattr(store, "read_blob", lambda self, entry: blobs.append(entry["checkpoint_id"]) or
                        read_blob(self, entry))
    with monkeypatch.context() as m:
        m.setattr(store, "thread_entries", no_listing)
        m.setattr(store, "all_entries", no_listing)
        latest = saver.get_tuple({"configurable": {"thread_id": "long"}})
        assert latest.checkpoint["channel_values"] == {"n": 299}
        assert saver.get_tuple({"configurable": {"thread_id": "long", "checkpoint_id": ids[10]}}) \
            .checkpoint["channel_values"] == {"n": 10}
    blobs.clear()
    page = list(saver.list({"configurable": {"thread_id": "long"}},
                           before={"configurable": {"checkpoint_id": ids[200]}}, limit=5))
    assert [t.checkpoint["id"] for t in page] == ids[195:200][::-1] and blobs == ids[195:200][::-1]
    started = time.perf_counter()
    assert len(list(saver.list({"configurable": {"thread_id": "long"}}, filter={"step": 7}))) == 1
    assert time.perf_counter() - started < 5


def test_a_damaged_blob_is_refused_and_reported(tmp_path: Path) -> None:
    url = str(tmp_path / "s")
    saver = LastgoodSaver(url)
    config = saver.put({"configurable": {"thread_id": "t", "checkpoint_ns": ""}}, _checkpoint({"k": "v"}),
                       _meta(), {})
    [blob] = list((tmp_path / "s" / "blobs").rglob("*.lg"))
    data = bytearray(blob.read_bytes())
    data[-1] ^= 1
    blob.write_bytes(bytes(data))
    with pytest.raises(DecodeError, match="sha256"):
        saver.get_tuple(config)
    verified = lastgood_cli("verify", url, "--read-data", "--format", "json", home=tmp_path / "home")
    assert any(f["check"] == "sha256-mismatch" for f in json.loads(verified.stdout)["findings"])


def test_a_save_that_dies_before_its_commit_marker_is_incomplete_not_latest(tmp_path: Path, monkeypatch: Any) -> None:
    url = str(tmp_path / "s")
    saver = LastgoodSaver(url)
    config = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}
    config = saver.put(config, _checkpoint({"n": 1}), _meta(step=0), {})
    real_replace = os.replace

    def die_at_commit(src: str, dst: str) -> None:
        if "/catalog/tail/" in dst:
            raise KeyboardInterrupt("killed")
        real_replace(src, dst)
    monkeypatch.setattr(os, "replace", die_at_commit)
    with pytest.raises(KeyboardInterrupt):
        saver.put(config, _checkpoint({"n": 2}), _meta(step=1), {})
    monkeypatch.undo()
    assert LastgoodSaver(url).get_tuple({"configurable": {"thread_id": "t"}}).checkpoint["channel_values"] == {"n": 1}
    rows = cli("ls", url, home=tmp_path / "home")
    assert sorted(r["status"] for r in rows) == ["incomplete", "ok"]
    assert not [p for p in (tmp_path / "s").rglob(".tmp-*")]


def test_delete_copy_and_prune_leave_a_store_lastgood_verifies(tmp_path: Path) -> None:
    url = str(tmp_path / "s")
    saver = LastgoodSaver(url)
    for thread in ("keep", "drop", "src"):
        build_tools(saver, thread_id=thread)
    saver.compact()
    build_tools(saver, thread_id="late")
    saver.delete_thread("drop")
    saver.copy_thread("src", "dst")
    saver.prune(["late"], strategy="keep_latest")
    home = tmp_path / "home"
    rows = cli("ls", url, home=home)
    runs = {r["run_id"] for r in rows}
    assert runs == {"keep", "src", "dst", "late"}
    assert len([r for r in rows if r["run_id"] == "late"]) == 1
    assert sorted(r["checkpoint_id"] for r in rows if r["run_id"] == "dst") == \
        sorted(r["checkpoint_id"] for r in rows if r["run_id"] == "src")
    verified = lastgood_cli("verify", url, "--read-data", "--format", "json", home=home)
    assert not [f for f in json.loads(verified.stdout)["findings"] if f["severity"] == "error"]
    assert not (tmp_path / "s" / "blobs" / "drop").exists() and not (tmp_path / "s" / "writes" / "drop").exists()


def test_long_and_odd_ids_are_stored_under_safe_names(tmp_path: Path) -> None:
    url = str(tmp_path / "s")
    saver = LastgoodSaver(url)
    thread, ns = "t/" + "x" * 120 + ":ü@=%", "parent:1|child/" + "y" * 60  # head name: 230 bytes
    config = {"configurable": {"thread_id": thread, "checkpoint_ns": ns}}
    for step in range(3):
        config = saver.put(config, _checkpoint({"n": step}), _meta(step=step), {})
    saver.put_writes(config, [("n", 9)], "task")
    latest = saver.get_tuple({"configurable": {"thread_id": thread, "checkpoint_ns": ns}})
    assert latest.checkpoint["channel_values"] == {"n": 2} and latest.pending_writes == [("task", "n", 9)]
    assert len(list(saver.list({"configurable": {"thread_id": thread}}))) == 3
    names = [p.name for p in (tmp_path / "s").rglob("*") if not p.name.startswith(".")]
    assert max(len(n) for n in names if not n.endswith(".json")) <= 41 + 1 + 41 + 1 + 36 + 6  # long ids: hashed
    rows = cli("ls", url, home=tmp_path / "home")
    assert {(r["run_id"], r["namespace"]) for r in rows} == {(thread, ns)}
    saver.delete_thread(thread)
    assert saver.get_tuple(config) is None and not list((tmp_path / "s" / "blobs").iterdir())


def test_throughput_smoke_against_sqlitesaver(tmp_path: Path) -> None:
    """Lenient: a put + get_tuple of real checkpoints costs at most a few times SqliteSaver's, each
    operation timed alternately on both (the figures: benchmarks/bench_langgraph_saver.py)."""
    from langgraph.checkpoint.memory import InMemorySaver

    source = InMemorySaver()
    graph, config = tool_loop_graph(source), {"configurable": {"thread_id": "src"}}
    for turn in range(4):
        graph.invoke({"messages": [HumanMessage(f"q{turn}", id=f"h{turn}")]}, config)
    tuples = list(reversed(list(source.list(config))))
    sqlite = SqliteSaver(sqlite3.connect(str(tmp_path / "a.sqlite"), check_same_thread=False))
    mine = LastgoodSaver(str(tmp_path / "store"))
    times: dict[str, list[float]] = {"sqlite": [], "lastgood": []}
    for tup in tuples:
        for name, saver in (("sqlite", sqlite), ("lastgood", mine)):
            parent = tup.parent_config["configurable"]["checkpoint_id"] if tup.parent_config else None
            cfg = {"configurable": {"thread_id": "t", "checkpoint_ns": "",
                                    **({"checkpoint_id": parent} if parent else {})}}
            started = time.perf_counter()
            saved = saver.put(cfg, tup.checkpoint, tup.metadata, {})
            saver.get_tuple(saved)
            times[name].append(time.perf_counter() - started)
    ratio = statistics.median(times["lastgood"]) / statistics.median(times["sqlite"])
    assert ratio < 8, f"put+get {ratio:.1f}x SqliteSaver's"


# ---- helpers -------------------------------------------------------------------------------------------

def _checkpoint(values: dict[str, Any] | None = None) -> dict[str, Any]:
    from langgraph.checkpoint.conformance.test_utils import generate_checkpoint

    values = values or {}
    return generate_checkpoint(channel_values=values, channel_versions={k: 1 for k in values})


def _meta(step: int = 0) -> dict[str, Any]:
    return {"source": "loop", "step": step, "parents": {}}
