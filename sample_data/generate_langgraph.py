"""Write a LangGraph ``SqliteSaver`` database with real LangGraph graphs (no LLM).

    python sample_data/generate_langgraph.py --out sample_data/langgraph.sqlite
    python sample_data/generate_langgraph.py --out big.sqlite --threads 1600 --steps 63

Every checkpoint is written by LangGraph itself: ``StateGraph`` tool-calling
loops compiled with a ``SqliteSaver`` on one connection. The nodes are
deterministic (a seeded generator keyed by the thread and the message count
stands in for the LLM and the tools), so the *content* of every thread is the
same on every run; checkpoint ids (uuid6), ``ts`` and ``run_id`` are made by
LangGraph from the clock, as in any real database. For the small sample the
clock LangGraph's uuid6 reads is simulated (seconds to minutes between
checkpoints, threads hours apart from 2026-11-03 08:00 UTC) so a timeline of
the sample looks like days of agent work rather than one second.

State channels: ``messages`` (``add_messages``: HumanMessage, then AIMessage
with ``tool_calls`` -> ToolMessage -> ... -> a final AIMessage), ``plan`` (the
thread's script), ``tools`` (tool connection settings, including an
``api_key`` shaped like ``sk-…`` that Lastgood must redact), one agent-specific
channel (``portfolio`` for trading, ``ticket`` for support, ``notes`` for
research) and ``summary`` (set by the optional ``finalize`` node).

One thread of ``--steps S`` writes exactly S checkpoints in the root namespace
(the input checkpoint, step -1, counts), for any S >= 3.

The default sample (no ``--threads``) holds 12 plain threads of 16-24 steps
over three agents (metadata ``graph_id`` = trading-agent / support-agent /
research-agent) plus four special threads:

- ``trading-approval-001``: a node calls ``interrupt()`` before an order is
  placed; the thread is resumed with ``Command(resume=...)``;
- ``support-error-001``: a parallel ``audit`` branch raises next to ``tools``,
  leaving the ``tools`` branch's pending writes and an ``__error__`` write;
- ``research-fork-001``: ``update_state`` on an older checkpoint (a different
  tool call; ``source="update"``), the run continued from that fork, and one
  ``as_node="__copy__"`` copy of an older checkpoint (``source="fork"``);
- ``research-subgraph-001``: the ``tools`` node is a compiled subgraph, so its
  checkpoints land in a non-empty ``checkpoint_ns`` (``tools:<uuid>``).

With ``--threads N`` only plain threads are written (``--specials`` adds the
four). The file is written beside ``--out`` and renamed into place when
complete; it is left in ``journal_mode=DELETE`` with no ``-wal``/``-shm``.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sqlite3
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, TypedDict

from langchain_core.messages import AIMessage, AnyMessage, HumanMessage, ToolMessage
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages
from langgraph.types import Command, interrupt

API_KEY = "sk-lastgood-langgraph-5c0ffee7d1e4a2b9"
API_BASE = "https://tools.internal.example/v1"
DEFAULT_OUT = Path(__file__).resolve().parent / "langgraph.sqlite"
RECURSION_LIMIT = 10_000
AGENTS = ("trading-agent", "support-agent", "research-agent")
ASKS = {
    "trading-agent": ["Rebalance toward 60/40", "What is AAPL trading at?", "Cut exposure to energy",
                      "Hedge the NVDA position", "Summarise today's P&L"],
    "support-agent": ["My order #4411 never arrived", "I was charged twice", "How do I reset my password?",
                      "Cancel my subscription", "The app crashes on login"],
    "research-agent": ["Survey checkpointing in agent frameworks", "Compare DuckDB and SQLite for analytics",
                       "Find papers on state-space models", "What changed in Python 3.13?",
                       "Collect benchmarks for vector databases"],
}
TOOLS = {
    "trading-agent": ("get_quote", "place_order", "get_positions"),
    "support-agent": ("lookup_order", "refund", "search_kb"),
    "research-agent": ("web_search", "fetch_page", "summarise"),
}
SYMBOLS = ("AAPL", "NVDA", "MSFT", "XOM", "TLT", "SPY", "AMZN", "CVX")
TOPICS = ("checkpoint formats", "write-ahead logging", "uuid6 ordering", "msgpack codecs",
          "DuckDB indexes", "state diffs", "time travel", "human in the loop")


class AgentState(TypedDict, total=False):
    messages: Annotated[list[AnyMessage], add_messages]
    plan: dict[str, Any]
    tools: dict[str, Any]
    portfolio: dict[str, Any]
    ticket: dict[str, Any]
    notes: list[dict[str, Any]]
    summary: str


# ---- the thread's script ---------------------------------------------------------


def make_plan(agent: str, thread_id: str, steps: int, seed: int, **extra: Any) -> dict[str, Any]:
    """How many tool calls (and whether ``finalize`` runs) give exactly ``steps`` checkpoints.

    Checkpoints of one invoke: input (step -1) + ``__start__`` (step 0) + one
    per node run: ``agent``/``tools`` pairs, the final ``agent``, ``finalize``.
    """
    if steps < 3:
        raise ValueError("--steps must be at least 3")
    calls, finalize = divmod(steps - 3, 2)
    return {"agent": agent, "thread": thread_id, "seed": seed, "tool_calls": calls,
            "finalize": bool(finalize), **extra}


def _rng(state: AgentState, salt: str) -> random.Random:
    plan = state["plan"]
    return random.Random(f"{plan['seed']}:{plan['thread']}:{len(state['messages'])}:{salt}")


def _calls_done(state: AgentState) -> int:
    return sum(1 for m in state["messages"] if isinstance(m, ToolMessage))


def _tool_args(agent: str, tool: str, rng: random.Random) -> dict[str, Any]:
    if agent == "trading-agent":
        args: dict[str, Any] = {"symbol": rng.choice(SYMBOLS)}
        if tool == "place_order":
            args.update(side=rng.choice(("buy", "sell")), quantity=rng.randint(1, 40) * 5)
        return args
    if agent == "support-agent":
        if tool == "search_kb":
            return {"query": rng.choice(("refund policy", "password reset", "shipping delays", "double charge"))}
        return {"order_id": f"#{rng.randint(4000, 4999)}", **({"amount": rng.randint(5, 120)} if tool == "refund" else {})}
    if tool == "web_search":
        return {"query": rng.choice(TOPICS), "max_results": 5}
    if tool == "fetch_page":
        return {"url": f"https://example.org/papers/{rng.randint(100, 999)}"}
    return {"topic": rng.choice(TOPICS), "words": 80}


# ---- nodes -------------------------------------------------------------------------


def agent_node(state: AgentState) -> dict[str, Any]:
    """The stand-in LLM: a tool call until the plan's budget is used, then an answer."""
    plan = state["plan"]
    agent, n, done = plan["agent"], len(state["messages"]), _calls_done(state)
    rng = _rng(state, "agent")
    if done < plan["tool_calls"]:
        tool = rng.choice(TOOLS[agent])
        if plan.get("approve_at") == done and agent == "trading-agent":
            tool = "place_order"  # the call the approval thread pauses on
        call = {"name": tool, "args": _tool_args(agent, tool, rng), "id": f"call_{n:03d}_{rng.getrandbits(32):08x}",
                "type": "tool_call"}
        thought = f"Step {done + 1}: calling {tool}." if rng.random() < 0.5 else ""
        return {"messages": [AIMessage(content=thought, tool_calls=[call], id=f"ai-{n:03d}",
                                       response_metadata={"model": "stand-in-llm", "finish_reason": "tool_calls"})]}
    answer = f"Done after {done} tool calls: {rng.choice(('all good', 'see the summary', 'follow-up needed'))}."
    return {"messages": [AIMessage(content=answer, id=f"ai-{n:03d}",
                                   response_metadata={"model": "stand-in-llm", "finish_reason": "stop"})]}


def tools_node(state: AgentState) -> dict[str, Any]:
    """Run the requested tool deterministically; update the agent's own channel."""
    plan = state["plan"]
    agent = plan["agent"]
    call = state["messages"][-1].tool_calls[0]
    rng = _rng(state, "tools")
    args, tool = call["args"], call["name"]
    update: dict[str, Any] = {}
    if agent == "trading-agent":
        result, update["portfolio"] = _trade(state.get("portfolio") or {}, tool, args, rng)
    elif agent == "support-agent":
        result, update["ticket"] = _support(state.get("ticket") or {}, tool, args, rng)
    else:
        result, update["notes"] = _research(state.get("notes") or [], tool, args, rng)
    message = ToolMessage(content=json.dumps(result, sort_keys=True), tool_call_id=call["id"], name=tool,
                          id=f"tool-{call['id']}")
    connection = dict(state.get("tools") or {})
    connection["calls"] = int(connection.get("calls", 0)) + 1
    connection["last_tool"] = tool
    return {"messages": [message], "tools": connection, **update}


def _trade(portfolio: dict[str, Any], tool: str, args: dict[str, Any], rng: random.Random) -> tuple[Any, dict]:
    portfolio = {**portfolio, "cash": portfolio.get("cash", 100_000.0),
                 "positions": dict(portfolio.get("positions", {})), "orders": list(portfolio.get("orders", []))}
    price = round(rng.uniform(20, 900), 2)
    symbol = args.get("symbol", "SPY")
    if tool == "place_order":
        qty = args["quantity"] if args["side"] == "buy" else -args["quantity"]
        portfolio["positions"][symbol] = portfolio["positions"].get(symbol, 0) + qty
        portfolio["cash"] = round(portfolio["cash"] - qty * price, 2)
        order = {"id": f"ord-{len(portfolio['orders']) + 1:04d}", "symbol": symbol, "qty": qty, "price": price}
        portfolio["orders"].append(order)
        return {"filled": order}, portfolio
    if tool == "get_positions":
        return {"positions": portfolio["positions"], "cash": portfolio["cash"]}, portfolio
    return {"symbol": symbol, "price": price, "change_pct": round(rng.uniform(-3, 3), 2)}, portfolio


def _support(ticket: dict[str, Any], tool: str, args: dict[str, Any], rng: random.Random) -> tuple[Any, dict]:
    ticket = {**ticket, "id": ticket.get("id", f"T-{rng.randint(10000, 99999)}"), "status": ticket.get("status", "open"),
              "priority": ticket.get("priority", rng.choice(("low", "normal", "high"))),
              "history": list(ticket.get("history", []))}
    if tool == "refund":
        ticket["status"] = "refunded"
        result: Any = {"refund_id": f"rf-{rng.getrandbits(24):06x}", "amount": args["amount"], "ok": True}
    elif tool == "lookup_order":
        result = {"order_id": args["order_id"], "state": rng.choice(("shipped", "lost", "delivered")),
                  "carrier": rng.choice(("UPS", "DHL", "USPS"))}
        ticket["status"] = "investigating"
    else:
        result = {"articles": [f"kb-{rng.randint(100, 999)}" for _ in range(3)]}
    ticket["history"].append({"tool": tool, "args": args})
    return result, ticket


def _research(notes: list[dict[str, Any]], tool: str, args: dict[str, Any], rng: random.Random) -> tuple[Any, list]:
    if tool == "web_search":
        result: Any = [{"title": f"On {args['query']} ({i})", "url": f"https://example.org/{rng.getrandbits(20):05x}"}
                       for i in range(3)]
    elif tool == "fetch_page":
        result = {"url": args["url"], "chars": rng.randint(2000, 40000), "title": f"Paper {rng.randint(1, 99)}"}
    else:
        result = {"summary": f"{args['topic']}: " + " ".join(rng.choice(TOPICS) for _ in range(6))}
    return result, [*notes, {"tool": tool, "finding": json.dumps(result, sort_keys=True)[:160]}]


def approve_node(state: AgentState) -> dict[str, Any]:
    """Human in the loop: pause before an order is placed."""
    call = state["messages"][-1].tool_calls[0]
    decision = interrupt({"question": "place this order?", "tool_call": call})
    portfolio = dict(state.get("portfolio") or {})
    portfolio["approval"] = decision
    return {"portfolio": portfolio}


def audit_node(state: AgentState) -> dict[str, Any]:
    """A parallel branch that fails (the ``error`` scenario)."""
    raise RuntimeError(f"audit service unavailable while checking {state['messages'][-1].tool_calls[0]['name']}")


def finalize_node(state: AgentState) -> dict[str, Any]:
    plan = state["plan"]
    return {"summary": f"{plan['agent']} finished {plan['thread']} after {_calls_done(state)} tool calls"}


def _route(state: AgentState) -> Any:
    last = state["messages"][-1]
    plan = state["plan"]
    if getattr(last, "tool_calls", None):
        done = _calls_done(state)
        if plan.get("approve_at") == done and not (state.get("portfolio") or {}).get("approval"):
            return "approve"
        if plan.get("fail_at") == done:
            return ["tools", "audit"]
        return "tools"
    return "finalize" if plan.get("finalize") else END


def tools_subgraph() -> Any:
    """``tools`` as a compiled subgraph: run the tool, then reflect on it."""
    def reflect(state: AgentState) -> dict[str, Any]:
        notes = list(state.get("notes") or [])
        if notes:
            notes[-1] = {**notes[-1], "reflected": True}
        return {"notes": notes}

    sub = StateGraph(AgentState)
    sub.add_node("run_tool", tools_node)
    sub.add_node("reflect", reflect)
    sub.add_edge(START, "run_tool")
    sub.add_edge("run_tool", "reflect")
    sub.add_edge("reflect", END)
    return sub.compile()


def agent_graph(saver: Any, subgraph: bool = False) -> Any:
    builder = StateGraph(AgentState)
    builder.add_node("agent", agent_node)
    builder.add_node("tools", tools_subgraph() if subgraph else tools_node)
    builder.add_node("approve", approve_node)
    builder.add_node("audit", audit_node)
    builder.add_node("finalize", finalize_node)
    builder.add_edge(START, "agent")
    builder.add_conditional_edges("agent", _route, ["tools", "approve", "audit", "finalize", END])
    builder.add_edge("approve", "tools")
    builder.add_edge("tools", "agent")
    builder.add_edge("audit", "agent")
    builder.add_edge("finalize", END)
    return builder.compile(checkpointer=saver)


# ---- threads ------------------------------------------------------------------------


def thread_config(thread_id: str, agent: str, **metadata: Any) -> dict[str, Any]:
    return {"configurable": {"thread_id": thread_id}, "recursion_limit": RECURSION_LIMIT,
            "metadata": {"graph_id": agent, "user_id": f"user-{sum(map(ord, thread_id)) % 97:02d}", **metadata}}


def first_input(agent: str, thread_id: str, plan: dict[str, Any]) -> dict[str, Any]:
    rng = random.Random(f"{plan['seed']}:{thread_id}:input")
    value: dict[str, Any] = {
        "messages": [HumanMessage(content=rng.choice(ASKS[agent]), id="human-000")],
        "plan": plan,
        "tools": {"api_base": API_BASE, "api_key": API_KEY, "timeout_s": 30, "calls": 0},
    }
    if agent == "trading-agent":
        value["portfolio"] = {"cash": 100_000.0, "positions": {"SPY": 120, "TLT": 40}, "orders": []}
    elif agent == "support-agent":
        value["ticket"] = {"id": f"T-{rng.randint(10000, 99999)}", "status": "open", "priority": "normal",
                           "customer": f"cust-{rng.randint(1000, 9999)}", "history": []}
    else:
        value["notes"] = []
    return value


def run_plain(graph: Any, agent: str, thread_id: str, steps: int, seed: int) -> None:
    plan = make_plan(agent, thread_id, steps, seed)
    graph.invoke(first_input(agent, thread_id, plan), thread_config(thread_id, agent))


def run_approval(graph: Any, seed: int, steps: int) -> str:
    thread_id, agent = "trading-approval-001", "trading-agent"
    plan = make_plan(agent, thread_id, steps, seed, approve_at=2)
    config = thread_config(thread_id, agent, scenario="interrupt")
    graph.invoke(first_input(agent, thread_id, plan), config)
    if not graph.get_state(config).interrupts:
        raise RuntimeError("the approval thread did not pause")
    graph.invoke(Command(resume={"approved": True, "by": "ops@example.com"}), config)
    return thread_id


def run_error(graph: Any, seed: int, steps: int) -> str:
    thread_id, agent = "support-error-001", "support-agent"
    plan = make_plan(agent, thread_id, steps, seed, fail_at=3)
    try:
        graph.invoke(first_input(agent, thread_id, plan), thread_config(thread_id, agent, scenario="error"))
    except RuntimeError as exc:
        if "audit service unavailable" not in str(exc):
            raise
    else:
        raise RuntimeError("the error thread did not fail")
    return thread_id


def run_fork(graph: Any, seed: int, steps: int) -> str:
    thread_id, agent = "research-fork-001", "research-agent"
    plan = make_plan(agent, thread_id, steps, seed)
    config = thread_config(thread_id, agent, scenario="fork")
    graph.invoke(first_input(agent, thread_id, plan), config)
    history = list(graph.get_state_history(config))  # newest first
    at_tools = [s for s in history if s.next == ("tools",)]
    older = at_tools[len(at_tools) // 2]
    old_call = older.values["messages"][-1]
    call = {"name": "web_search", "args": {"query": "lastgood forks", "max_results": 3}, "id": "call_fork_0001",
            "type": "tool_call"}
    replacement = AIMessage(content="Let me search something else.", tool_calls=[call], id=old_call.id)
    meta = {"metadata": config["metadata"], "recursion_limit": RECURSION_LIMIT}
    graph.update_state({**at_tools[-1].config, **meta}, None, as_node="__copy__")  # source="fork"
    forked = graph.update_state({**older.config, **meta}, {"messages": [replacement]}, as_node="agent")
    graph.invoke(None, {**forked, **meta})  # continue from the update (source="update")
    return thread_id


def run_subgraph(seed: int, steps: int, saver: Any) -> str:
    thread_id, agent = "research-subgraph-001", "research-agent"
    graph = agent_graph(saver, subgraph=True)
    plan = make_plan(agent, thread_id, steps, seed)
    graph.invoke(first_input(agent, thread_id, plan), thread_config(thread_id, agent, scenario="subgraph"))
    return thread_id


# ---- the database ------------------------------------------------------------------------


def generate(out: Path, *, threads: int | None = None, steps: int = 20, seed: int = 7,
             specials: bool | None = None, log: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Write the database to ``out`` (atomically); a summary of what is in it."""
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    sample = threads is None
    specials = sample if specials is None else specials
    tmp = out.with_name(f".{out.name}.tmp-{os.getpid()}")
    _remove_db(tmp)
    started = time.perf_counter()
    conn = sqlite3.connect(str(tmp), check_same_thread=False)
    try:
        saver = SqliteSaver(conn)
        saver.setup()
        conn.execute("PRAGMA synchronous=OFF")  # generation only: no fsync per commit
        graphs = {agent: agent_graph(saver) for agent in AGENTS}
        plain = _plain_threads(threads, steps, seed)
        clock = SimulatedClock(seed) if sample else None
        restore = clock.install() if clock else (lambda: None)
        for i, (agent, thread_id, n_steps) in enumerate(plain, 1):
            if clock:
                clock.next_thread()
            run_plain(graphs[agent], agent, thread_id, n_steps, seed)
            if log and (i % 100 == 0 or i == len(plain)):
                log(f"{i}/{len(plain)} threads, {time.perf_counter() - started:.0f} s")
        special_ids = []
        if specials:
            special_steps = 20 if sample else steps
            special_ids = [run_approval(graphs["trading-agent"], seed, special_steps),
                           run_error(graphs["support-agent"], seed, special_steps),
                           run_fork(graphs["research-agent"], seed, special_steps),
                           run_subgraph(seed, special_steps, saver)]
        restore()
        conn.commit()
        summary = _summary(conn)
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        conn.execute("PRAGMA journal_mode=DELETE")
    finally:
        conn.close()
    for suffix in ("-wal", "-shm"):
        if Path(f"{tmp}{suffix}").exists():
            raise RuntimeError(f"{tmp}{suffix} left behind")
    _remove_db(out)
    os.replace(tmp, out)
    summary.update(path=str(out), bytes=out.stat().st_size, seconds=round(time.perf_counter() - started, 1),
                   seed=seed, steps=steps, plain_threads=len(plain), special_threads=special_ids,
                   api_key=API_KEY)
    return summary


class SimulatedClock:
    """A stand-in for ``time`` in LangGraph's uuid6 module: each reading moves on
    20-140 s; ``next_thread`` jumps ahead about two hours. Only ids are affected."""

    START_NS = 1_793_692_800 * 10**9  # 2026-11-03 08:00:00 UTC

    def __init__(self, seed: int) -> None:
        self._rng = random.Random(seed)
        self._now = self.START_NS

    def time_ns(self) -> int:
        self._now += self._rng.randint(20, 140) * 10**9
        return self._now

    def next_thread(self) -> None:
        self._now += self._rng.randint(90, 150) * 60 * 10**9

    def install(self) -> Callable[[], None]:
        import langgraph.checkpoint.base.id as uuid_module

        original = uuid_module.time
        uuid_module.time = self  # type: ignore[assignment]
        return lambda: setattr(uuid_module, "time", original)


def _plain_threads(threads: int | None, steps: int, seed: int) -> list[tuple[str, str, int]]:
    if threads is None:  # the sample: 12 threads of 16-24 steps, 4 per agent
        rng = random.Random(f"{seed}:sample")
        return [(AGENTS[i % 3], f"{AGENTS[i % 3].split('-')[0]}-{i // 3 + 1:03d}", rng.randint(16, 24))
                for i in range(12)]
    return [(AGENTS[i % 3], f"{AGENTS[i % 3].split('-')[0]}-{i:05d}", steps) for i in range(threads)]


def _summary(conn: sqlite3.Connection) -> dict[str, Any]:
    one = lambda sql: conn.execute(sql).fetchone()[0]
    return {
        "checkpoints": one("SELECT count(*) FROM checkpoints"),
        "threads": one("SELECT count(DISTINCT thread_id) FROM checkpoints"),
        "namespaces": one("SELECT count(DISTINCT checkpoint_ns) FROM checkpoints WHERE checkpoint_ns != ''"),
        "writes": one("SELECT count(*) FROM writes"),
        "error_writes": one("SELECT count(*) FROM writes WHERE channel = '__error__'"),
        "interrupt_writes": one("SELECT count(*) FROM writes WHERE channel = '__interrupt__'"),
        "sources": dict(conn.execute(
            "SELECT json_extract(metadata, '$.source') s, count(*) FROM checkpoints GROUP BY s ORDER BY s").fetchall()),
    }


def _remove_db(path: Path) -> None:
    for suffix in ("", "-wal", "-shm", "-journal"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help=f"database to write (default {DEFAULT_OUT})")
    parser.add_argument("--threads", type=int, help="plain threads (default: the small sample, with specials)")
    parser.add_argument("--steps", type=int, default=20, help="checkpoints per plain thread with --threads (default 20)")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--specials", action=argparse.BooleanOptionalAction, default=None,
                        help="add the interrupt/error/fork/subgraph threads (default: only for the sample)")
    parser.add_argument("--quiet", action="store_true")
    args = parser.parse_args(argv)
    log = None if args.quiet else (lambda msg: print(msg, file=sys.stderr, flush=True))
    summary = generate(args.out, threads=args.threads, steps=args.steps, seed=args.seed,
                       specials=args.specials, log=log)
    print(json.dumps(summary, indent=None if args.quiet else 2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
