"""Real LangGraph graphs (no LLM, deterministic nodes) that write checkpoints.

Saver-agnostic: ``build_all(saver)`` runs every scenario against any
LangGraph checkpointer (SqliteSaver, PostgresSaver, InMemorySaver…) and
returns one ``BuiltThread`` per thread, with the compiled graph so tests can
compare a reader against ``graph.get_state_history(config)``.

Scenarios:
- ``tools``: a tool-calling loop (AIMessage with tool_calls -> ToolMessage ->
  final AIMessage) in a ``messages`` channel reduced by ``add_messages``;
- ``interrupt``: a node calling ``interrupt()``, resumed once with
  ``Command(resume=...)``;
- ``fork``: the tool loop, then ``update_state`` on an older checkpoint and a
  run continuing from the fork;
- ``subgraph``: a parent graph whose node is a compiled subgraph that
  interrupts, so subgraph checkpoints land in a non-empty ``checkpoint_ns``;
- ``error``: a parallel fan-out where one branch raises, leaving the other
  branch's pending writes and an ``__error__`` write;
- ``delta``: a ``messages`` channel declared as a ``DeltaChannel`` (beta),
  whose values live in writes between snapshots.
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Annotated, Any, TypedDict

from langchain_core.messages import AIMessage, AnyMessage, HumanMessage, ToolMessage
from langgraph.channels.delta import DeltaChannel
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import _messages_delta_reducer, add_messages
from langgraph.types import Command, interrupt


@dataclass
class BuiltThread:
    """One thread written by a scenario."""

    name: str
    config: dict[str, Any]
    graph: Any
    namespaces: list[str] = field(default_factory=lambda: [""])

    @property
    def thread_id(self) -> str:
        return self.config["configurable"]["thread_id"]


class MessagesState(TypedDict):
    messages: Annotated[list[AnyMessage], add_messages]
    note: str


class DeltaState(TypedDict):
    messages: Annotated[list, DeltaChannel(_messages_delta_reducer, snapshot_frequency=3)]
    turns: int


class FanState(TypedDict):
    results: Annotated[list[str], operator.add]


def _config(thread_id: str) -> dict[str, Any]:
    return {"configurable": {"thread_id": thread_id}}


# --- tool loop --------------------------------------------------------------


def _agent(state: MessagesState) -> dict[str, Any]:
    last = state["messages"][-1]
    n = len(state["messages"])
    if isinstance(last, ToolMessage):
        return {"messages": [AIMessage(content=f"The answer is {last.content}", id=f"ai-{n}")]}
    call = {"name": "add", "args": {"a": n, "b": 2}, "id": f"call-{n}", "type": "tool_call"}
    return {"messages": [AIMessage(content="", tool_calls=[call], id=f"ai-{n}")], "note": "calling"}


def _tools(state: MessagesState) -> dict[str, Any]:
    call = state["messages"][-1].tool_calls[0]
    result = call["args"]["a"] + call["args"]["b"]
    msg = ToolMessage(content=str(result), tool_call_id=call["id"], name=call["name"], id=f"tool-{call['id']}")
    return {"messages": [msg]}


def _route(state: MessagesState) -> str:
    last = state["messages"][-1]
    return "tools" if getattr(last, "tool_calls", None) else END


def tool_loop_graph(saver: Any) -> Any:
    builder = StateGraph(MessagesState)
    builder.add_node("agent", _agent)
    builder.add_node("tools", _tools)
    builder.add_edge(START, "agent")
    builder.add_conditional_edges("agent", _route, ["tools", END])
    builder.add_edge("tools", "agent")
    return builder.compile(checkpointer=saver)


def build_tools(saver: Any, thread_id: str = "tools-1") -> BuiltThread:
    graph = tool_loop_graph(saver)
    config = _config(thread_id)
    graph.invoke({"messages": [HumanMessage(content="what is 1 + 2?", id="h-1")], "note": "start"}, config)
    return BuiltThread("tools", config, graph)


# --- interrupt ---------------------------------------------------------------


def _ask(state: MessagesState) -> dict[str, Any]:
    answer = interrupt({"question": "approve the plan?"})
    return {"messages": [AIMessage(content=f"approved: {answer}", id="ai-approved")], "note": "asked"}


def interrupt_graph(saver: Any) -> Any:
    builder = StateGraph(MessagesState)
    builder.add_node("ask", _ask)
    builder.add_edge(START, "ask")
    builder.add_edge("ask", END)
    return builder.compile(checkpointer=saver)


def build_interrupt(saver: Any, thread_id: str = "interrupt-1") -> BuiltThread:
    graph = interrupt_graph(saver)
    config = _config(thread_id)
    graph.invoke({"messages": [HumanMessage(content="plan a trip", id="h-1")], "note": "start"}, config)
    graph.invoke(Command(resume="yes"), config)
    return BuiltThread("interrupt", config, graph)


# --- fork --------------------------------------------------------------------


def build_fork(saver: Any, thread_id: str = "fork-1") -> BuiltThread:
    graph = tool_loop_graph(saver)
    config = _config(thread_id)
    graph.invoke({"messages": [HumanMessage(content="what is 1 + 2?", id="h-1")], "note": "start"}, config)
    history = list(graph.get_state_history(config))
    older = next(s for s in history if s.next == ("tools",))
    call = {"name": "add", "args": {"a": 10, "b": 20}, "id": "call-fork", "type": "tool_call"}
    replacement = AIMessage(content="", tool_calls=[call], id=older.values["messages"][-1].id)
    forked = graph.update_state(older.config, {"messages": [replacement], "note": "forked"})
    graph.invoke(None, forked)
    return BuiltThread("fork", config, graph)


# --- subgraph ----------------------------------------------------------------


def _child_step(state: MessagesState) -> dict[str, Any]:
    reply = interrupt("child needs input")
    return {"messages": [AIMessage(content=f"child got {reply}", id="ai-child")], "note": "child"}


def subgraph_graph(saver: Any) -> Any:
    child = StateGraph(MessagesState)
    child.add_node("child_step", _child_step)
    child.add_edge(START, "child_step")
    child.add_edge("child_step", END)
    parent = StateGraph(MessagesState)
    parent.add_node("child", child.compile())
    parent.add_edge(START, "child")
    parent.add_edge("child", END)
    return parent.compile(checkpointer=saver)


def build_subgraph(saver: Any, thread_id: str = "subgraph-1") -> BuiltThread:
    graph = subgraph_graph(saver)
    config = _config(thread_id)
    graph.invoke({"messages": [HumanMessage(content="delegate", id="h-1")], "note": "start"}, config)
    state = graph.get_state(config, subgraphs=True)
    namespaces = [""] + [t.state.config["configurable"]["checkpoint_ns"] for t in state.tasks if t.state]
    graph.invoke(Command(resume="done"), config)
    return BuiltThread("subgraph", config, graph, namespaces)


# --- parallel fan-out with a failing branch ---------------------------------


def _good(state: FanState) -> dict[str, Any]:
    return {"results": ["good"]}


def _bad(state: FanState) -> dict[str, Any]:
    raise ValueError("branch b exploded")


def error_graph(saver: Any) -> Any:
    builder = StateGraph(FanState)
    builder.add_node("a", _good)
    builder.add_node("b", _bad)
    builder.add_edge(START, "a")
    builder.add_edge(START, "b")
    builder.add_edge("a", END)
    builder.add_edge("b", END)
    return builder.compile(checkpointer=saver)


def build_error(saver: Any, thread_id: str = "error-1") -> BuiltThread:
    graph = error_graph(saver)
    config = _config(thread_id)
    try:
        graph.invoke({"results": ["start"]}, config)
    except ValueError:
        pass
    return BuiltThread("error", config, graph)


# --- DeltaChannel ------------------------------------------------------------


def _delta_reply(state: DeltaState) -> dict[str, Any]:
    turn = state.get("turns", 0) + 1
    return {"messages": [AIMessage(content=f"reply {turn}", id=f"ai-{turn}")], "turns": turn}


def delta_graph(saver: Any) -> Any:
    builder = StateGraph(DeltaState)
    builder.add_node("reply", _delta_reply)
    builder.add_edge(START, "reply")
    builder.add_edge("reply", END)
    return builder.compile(checkpointer=saver)


def build_delta(saver: Any, thread_id: str = "delta-1", turns: int = 4) -> BuiltThread:
    graph = delta_graph(saver)
    config = _config(thread_id)
    for i in range(turns):
        graph.invoke({"messages": [HumanMessage(content=f"turn {i}", id=f"h-{i}")]}, config)
    return BuiltThread("delta", config, graph)


class PlainDeltaState(TypedDict):
    numbers: Annotated[list, DeltaChannel(lambda state, writes: state + [x for w in writes for x in w], snapshot_frequency=3)]


def _add_number(state: PlainDeltaState) -> dict[str, Any]:
    return {"numbers": [len(state.get("numbers", []))]}


def build_delta_plain(saver: Any, thread_id: str = "delta-plain-1", turns: int = 4) -> BuiltThread:
    """A DeltaChannel of plain numbers (a custom reducer a reader cannot replay)."""
    builder = StateGraph(PlainDeltaState)
    builder.add_node("add", _add_number)
    builder.add_edge(START, "add")
    builder.add_edge("add", END)
    graph = builder.compile(checkpointer=saver)
    config = _config(thread_id)
    for _ in range(turns):
        graph.invoke({"numbers": [100]}, config)
    return BuiltThread("delta-plain", config, graph)


BUILDERS: dict[str, Callable[[Any], BuiltThread]] = {
    "tools": build_tools,
    "interrupt": build_interrupt,
    "fork": build_fork,
    "subgraph": build_subgraph,
    "error": build_error,
    "delta": build_delta,
}


def build_all(saver: Any) -> list[BuiltThread]:
    """Run every scenario with ``saver``; one BuiltThread per thread."""
    return [build(saver) for build in BUILDERS.values()]


# --- what LangGraph itself reports, as plain data --------------------------------


def plain(value: Any) -> Any:
    """LangChain/LangGraph objects -> the plain shapes Lastgood's readers report.

    Messages become ``{"role", "content", "tool_calls", "id", "name",
    "tool_call_id"}`` (the shape of ``normalize_message``); containers are
    walked; anything else is returned as is.
    """
    from langchain_core.messages import BaseMessage

    if isinstance(value, BaseMessage):
        calls = [{"name": c["name"], "args": c["args"], "id": c["id"]} for c in getattr(value, "tool_calls", None) or []]
        return {"role": value.type, "content": value.content, "tool_calls": calls, "id": value.id,
                "name": value.name, "tool_call_id": getattr(value, "tool_call_id", None)}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    return value


def expected_history(thread: BuiltThread, saver: Any, namespace: str = "") -> list[dict[str, Any]]:
    """LangGraph's view of one thread/namespace, newest first, as plain data.

    ``values`` are the user channels: from ``graph.get_state_history`` for the
    root namespace (DeltaChannels rebuilt by LangGraph), else the stored
    ``channel_values`` from ``saver.list``.
    """
    config = {"configurable": {"thread_id": thread.thread_id, "checkpoint_ns": namespace}}
    snapshots = {}
    if namespace == "":
        snapshots = {s.config["configurable"]["checkpoint_id"]: s.values
                     for s in thread.graph.get_state_history(thread.config)}
    history = []
    for tup in saver.list(config):
        cid = tup.config["configurable"]["checkpoint_id"]
        stored = {k: v for k, v in tup.checkpoint["channel_values"].items()
                  if not k.startswith(("__", "branch:"))}
        history.append({
            "checkpoint_id": cid,
            "parent_id": tup.parent_config["configurable"]["checkpoint_id"] if tup.parent_config else None,
            "step": tup.metadata.get("step"),
            "source": tup.metadata.get("source"),
            "values": plain(snapshots.get(cid, stored)),
            "pending_writes": [(t, ch, plain(v)) for t, ch, v in tup.pending_writes or []],
        })
    return history


@dataclass
class SqliteStore:
    """A closed SqliteSaver database written by ``write_sqlite_store``."""

    path: Any
    threads: list[BuiltThread]
    expected: dict[tuple[str, str], list[dict[str, Any]]]


def write_sqlite_store(path: Any, extra: bool = True) -> SqliteStore:
    """Run every scenario (plus the plain DeltaChannel one) into a SQLite file.

    LangGraph's own view of each thread is captured before the connection
    closes; the file is left without ``-wal``/``-shm`` files.
    """
    import sqlite3

    from langgraph.checkpoint.sqlite import SqliteSaver

    conn = sqlite3.connect(str(path), check_same_thread=False)
    try:
        saver = SqliteSaver(conn)
        threads = build_all(saver) + ([build_delta_plain(saver)] if extra else [])
        expected = {(t.thread_id, ns): expected_history(t, saver, ns) for t in threads for ns in t.namespaces}
    finally:
        conn.close()
    return SqliteStore(path, threads, expected)
