"""Write OpenAI Agents SDK session stores with the SDK's own persistence code.

    .venv-fixtures/openai_agents/bin/python sample_data/generators/openai_agents/generate.py \
        --out sample_data/openai_agents.sqlite \
        --advanced-out sample_data/openai_agents_advanced.sqlite

Every row is written by ``agents.SQLiteSession`` / ``AdvancedSQLiteSession``
while real ``Runner.run(agent, text, session=...)`` calls execute. No LLM or
network is used: ``ScriptedModel`` below subclasses ``agents.models.interface.Model``
and answers from a fixed script (user message -> function_call(s) ->
[the SDK runs the tool and appends function_call_output] -> final assistant
message). Tracing is disabled so nothing is exported.

Plain store (``--out``, tables ``agent_sessions`` / ``agent_messages``), 4 sessions:

The first three sessions run side by side (one turn each in rotation), so their
rows interleave in ``agent_messages``.

- ``support-7f3a``  3 turns; ``rotate_api_key`` arguments carry ``sk-proj-...``;
- ``trading-2b91``  3 turns; ``connect_broker`` output JSON carries ``"api_key"``;
                    one turn has two parallel tool calls;
- ``research-c044`` 3 turns + 1 aborted; ``fetch_paper`` raises for one DOI,
                    so its function_call_output is the error text; the 4th run
                    raised ``MaxTurnsExceeded`` (``max_turns=2``) and left a
                    partial turn: user message, 2 function_call + outputs, no
                    final assistant message;
- ``ops-91d2``      3 turns, but turn 2 was answered wrongly and undone with
                    ``session.pop_item()`` (4 pops: back to before its user
                    message) and asked again: ``agent_messages.id`` has a gap.

Advanced store (``--advanced-out``, ``AdvancedSQLiteSession(create_tables=True)``):

- ``planner-a1``  3 turns on ``main`` (usage stored after each with
                  ``store_run_usage``), then ``create_branch_from_turn(2,
                  "retry-from-turn-2")`` and 2 new turns on that branch (one
                  tool raises there); the session object ends on that branch;
- ``analyst-b2``  2 turns on ``main`` only, usage stored.

Content is deterministic (ids of items are derived from the script);
``created_at``/``updated_at`` columns are SQLite ``CURRENT_TIMESTAMP`` (UTC,
``YYYY-MM-DD HH:MM:SS``, wall clock: the SDK gives no way to set them).
The database is written beside the target, switched from the SDK's WAL mode to
``journal_mode=DELETE`` once every session is closed, and renamed into place.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import os
import sqlite3
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

os.environ.setdefault("OPENAI_AGENTS_DISABLE_TRACING", "1")
os.environ.setdefault("OPENAI_API_KEY", "sk-not-used-no-network")

from agents import (  # noqa: E402
    Agent,
    RunConfig,
    Runner,
    RunContextWrapper,
    SQLiteSession,
    function_tool,
    set_tracing_disabled,
)
from agents.exceptions import MaxTurnsExceeded  # noqa: E402
from agents.extensions.memory import AdvancedSQLiteSession  # noqa: E402
from agents.items import ModelResponse, TResponseInputItem  # noqa: E402
from agents.models.interface import Model, ModelTracing  # noqa: E402
from agents.usage import Usage  # noqa: E402
from openai.types.responses import (  # noqa: E402
    ResponseFunctionToolCall,
    ResponseOutputMessage,
    ResponseOutputText,
)
from openai.types.responses.response_usage import (  # noqa: E402
    InputTokensDetails,
    OutputTokensDetails,
)

set_tracing_disabled(True)
RUN_CONFIG = RunConfig(tracing_disabled=True, workflow_name="lastgood-fixture")


# --------------------------------------------------------------------------- model


@dataclass
class Turn:
    """What the scripted model does for one user message.

    ``steps`` is a list of model responses that call tools (each a list of
    ``(tool_name, arguments_dict)`` issued together); after the last step the
    model answers ``final``.
    """

    user: str
    steps: list[list[tuple[str, dict[str, Any]]]] = field(default_factory=list)
    final: str = ""


def _hid(*parts: Any) -> str:
    return hashlib.sha1("|".join(map(str, parts)).encode()).hexdigest()[:24]


def _text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return str(content)


class ScriptedModel(Model):
    """A ``Model`` that replays a script keyed by the latest user message.

    The step inside a turn is the number of model responses already in the
    input after that user message (function_call items grouped by response),
    so the SDK's own loop (call tool -> append output -> ask model again)
    drives it.
    """

    def __init__(self, name: str, turns: list[Turn]):
        self.name = name
        self.turns = {t.user: t for t in turns}
        self.calls = 0

    def _respond(self, input: str | list[TResponseInputItem]) -> ModelResponse:
        items: list[Any] = [{"role": "user", "content": input}] if isinstance(input, str) else list(input)
        last_user = max(i for i, it in enumerate(items) if isinstance(it, dict) and it.get("role") == "user")
        user_text = _text_of(items[last_user]["content"])
        turn = self.turns.get(user_text)
        if turn is None:
            raise RuntimeError(f"{self.name}: no script for user message {user_text!r}")
        outputs = sum(1 for it in items[last_user + 1 :] if isinstance(it, dict) and it.get("type") == "function_call_output")
        # step = how many tool-calling responses came back already
        step, seen = 0, 0
        while step < len(turn.steps) and seen + len(turn.steps[step]) <= outputs:
            seen += len(turn.steps[step])
            step += 1
        self.calls += 1
        out: list[Any]
        if step < len(turn.steps):
            out = []
            for n, (tool, args) in enumerate(turn.steps[step]):
                call_id = "call_" + _hid(self.name, user_text, step, n)
                out.append(
                    ResponseFunctionToolCall(
                        id="fc_" + _hid("item", self.name, user_text, step, n),
                        call_id=call_id,
                        type="function_call",
                        name=tool,
                        arguments=json.dumps(args, separators=(",", ":")),
                        status="completed",
                    )
                )
        else:
            out = [
                ResponseOutputMessage(
                    id="msg_" + _hid("msg", self.name, user_text),
                    type="message",
                    role="assistant",
                    status="completed",
                    content=[ResponseOutputText(type="output_text", text=turn.final, annotations=[], logprobs=[])],
                )
            ]
        in_tokens = len(json.dumps(items, default=str)) // 4
        out_tokens = len(json.dumps([o.model_dump() for o in out])) // 4
        usage = Usage(
            requests=1,
            input_tokens=in_tokens,
            input_tokens_details=InputTokensDetails(cached_tokens=in_tokens // 2, cache_write_tokens=0),
            output_tokens=out_tokens,
            output_tokens_details=OutputTokensDetails(reasoning_tokens=0),
            total_tokens=in_tokens + out_tokens,
        )
        return ModelResponse(output=out, usage=usage, response_id="resp_" + _hid("resp", self.name, user_text, step))

    async def get_response(self, system_instructions, input, model_settings, tools, output_schema, handoffs, tracing: ModelTracing, *, previous_response_id, conversation_id, prompt) -> ModelResponse:  # noqa: E501
        return self._respond(input)

    async def stream_response(self, *args: Any, **kwargs: Any) -> AsyncIterator[Any]:  # pragma: no cover
        raise NotImplementedError("the fixture only uses Runner.run")
        yield  # noqa: unreachable


# --------------------------------------------------------------------------- tools

SECRET_KEY = "sk-proj-Fx3kQ9mZ2vT7LwN4bR8cY1dH6jP0sA5eG2uK9oM3qV7xB4nC"
BROKER_KEY = "sk-proj-Bk9Lm2Qw7Xe4Rt1Yu8Io5Pa3Sd6Fg0Hj2Kl4Zx7Cv9Bn1Mq"


@function_tool
def lookup_customer(email: str) -> str:
    """Find a customer record by e-mail."""
    return json.dumps({"customer_id": "cus_" + _hid(email)[:10], "email": email, "plan": "team", "seats": 12})


@function_tool
def rotate_api_key(customer_id: str, old_key: str) -> str:
    """Revoke a customer's API key and issue a new one."""
    return json.dumps({"customer_id": customer_id, "revoked": old_key[:11] + "…", "status": "rotated"})


@function_tool
def open_ticket(customer_id: str, summary: str) -> str:
    """Open a support ticket."""
    return json.dumps({"ticket": "T-" + _hid(customer_id, summary)[:6].upper(), "state": "open"})


@function_tool
def connect_broker(account: str) -> str:
    """Connect to the broker; returns the session settings."""
    return json.dumps({"account": account, "endpoint": "https://broker.example/v2", "api_key": BROKER_KEY, "ttl_s": 900})


@function_tool
def get_quote(symbol: str) -> str:
    """Last trade price for a symbol."""
    price = {"ACME": 101.25, "GLOBX": 48.1, "INITECH": 12.9}.get(symbol, 1.0)
    return json.dumps({"symbol": symbol, "last": price, "currency": "USD"})


@function_tool
def place_order(symbol: str, side: str, qty: int, limit: float) -> str:
    """Place a limit order."""
    return json.dumps({"order_id": "ord_" + _hid(symbol, side, qty)[:8], "status": "accepted", "symbol": symbol, "qty": qty})


def _paper_error(ctx: RunContextWrapper[Any], error: Exception) -> str:
    # What an app typically returns to the model: the error text (the SDK's
    # default hides it behind a generic sentence).
    return f"An error occurred while running the tool. Error: {type(error).__name__}: {error}"


@function_tool(failure_error_function=_paper_error)
def fetch_paper(doi: str) -> str:
    """Fetch a paper's abstract by DOI."""
    if doi.endswith(".404"):
        raise LookupError(f"DOI {doi} not found (HTTP 404 from resolver)")
    return json.dumps({"doi": doi, "title": "Checkpointing long-running agents", "year": 2025, "abstract": "We study ..."})


@function_tool
def summarize(text: str) -> str:
    """Summarize a text in one sentence."""
    return json.dumps({"summary": text[:60]})


@function_tool
def restart_service(name: str) -> str:
    """Restart a service."""
    return json.dumps({"service": name, "state": "restarted"})


@function_tool
def service_status(name: str) -> str:
    """Status of a service."""
    return json.dumps({"service": name, "state": "degraded" if name == "billing" else "ok", "p99_ms": 870})


# --------------------------------------------------------------------------- scripts

CUS = "cus_" + _hid("dana@example.com")[:10]

SUPPORT = [
    Turn("Customer dana@example.com says her API key leaked. Who is she?", [[("lookup_customer", {"email": "dana@example.com"})]],
         f"Dana is customer {CUS} on the team plan (12 seats)."),
    Turn(f"Rotate her key {SECRET_KEY} now.", [[("rotate_api_key", {"customer_id": CUS, "old_key": SECRET_KEY})]],
         "Done: the leaked key is revoked and a new one was issued."),
    Turn("Open a ticket so security can follow up.", [[("open_ticket", {"customer_id": CUS, "summary": "leaked key rotated"})]],
         "Ticket opened for the security team."),
]

TRADING = [
    Turn("Connect to broker account ACC-7781.", [[("connect_broker", {"account": "ACC-7781"})]], "Connected to the broker (session valid 15 min)."),
    Turn("Quote ACME and GLOBX.", [[("get_quote", {"symbol": "ACME"}), ("get_quote", {"symbol": "GLOBX"})]],
         "ACME last 101.25 USD, GLOBX last 48.10 USD."),
    Turn("Buy 50 ACME with a limit of 101.", [[("get_quote", {"symbol": "ACME"})], [("place_order", {"symbol": "ACME", "side": "buy", "qty": 50, "limit": 101.0})]],
         "Limit order for 50 ACME at 101.00 accepted."),
]

RESEARCH = [
    Turn("Get the abstract of 10.1234/ckpt.2025.", [[("fetch_paper", {"doi": "10.1234/ckpt.2025"})]], "It studies checkpointing long-running agents (2025)."),
    Turn("Also get 10.1234/ckpt.404.", [[("fetch_paper", {"doi": "10.1234/ckpt.404"})]], "I could not fetch that one: the resolver says it does not exist."),
    Turn("Summarize what we have.", [[("summarize", {"text": "Checkpointing long-running agents: we study recovery."})]], "One paper so far: checkpointing long-running agents."),
]
RESEARCH_ABORTED = Turn(
    "Fetch every paper it cites.",
    [[("fetch_paper", {"doi": "10.1234/cite.1"})], [("fetch_paper", {"doi": "10.1234/cite.2"})], [("fetch_paper", {"doi": "10.1234/cite.3"})]],
    "never reached: max_turns=2",
)

OPS = [
    Turn("Is billing healthy?", [[("service_status", {"name": "billing"})]], "Billing is degraded (p99 870 ms)."),
    Turn("Restart it.", [[("restart_service", {"name": "search"})]], "Restarted search."),  # wrong service: undone below
    Turn("Restart the billing service.", [[("restart_service", {"name": "billing"})]], "Billing was restarted."),
    Turn("Check billing again.", [[("service_status", {"name": "billing"})]], "Billing reports degraded still; watching it."),
]

PLANNER_MAIN = [
    Turn("Plan the migration of the orders DB.", [[("service_status", {"name": "orders-db"})]], "Plan: snapshot, replicate, cut over."),
    Turn(f"Use the ops key {SECRET_KEY} to take the snapshot.", [[("rotate_api_key", {"customer_id": "ops", "old_key": SECRET_KEY})]],
         "Snapshot credentials rotated; snapshot scheduled."),
    Turn("Cut over now.", [[("restart_service", {"name": "orders-db"})]], "Cut over done."),
]
PLANNER_BRANCH = [
    Turn("Instead, fetch the runbook 10.1234/runbook.404 first.", [[("fetch_paper", {"doi": "10.1234/runbook.404"})]],
         "The runbook could not be fetched; I will not cut over without it."),
    Turn("Then just check orders-db status.", [[("service_status", {"name": "orders-db"})]], "orders-db is ok."),
]
ANALYST = [
    Turn("Quote INITECH.", [[("get_quote", {"symbol": "INITECH"})]], "INITECH last 12.90 USD."),
    Turn("Summarize the day.", [], "Quiet day: one quote checked."),
]


def agent_for(name: str, turns: list[Turn], tools: list[Any]) -> Agent:
    return Agent(name=name, instructions=f"You are {name}.", model=ScriptedModel(name, turns), tools=tools)


async def run_turns(agent: Agent, session: Any, turns: list[Turn], *, store_usage: bool = False) -> None:
    for t in turns:
        result = await Runner.run(agent, t.user, session=session, run_config=RUN_CONFIG)
        assert result.final_output == t.final, (result.final_output, t.final)
        if store_usage:
            await session.store_run_usage(result)


# --------------------------------------------------------------------------- stores


async def write_plain(path: Path) -> None:
    tools_support = [lookup_customer, rotate_api_key, open_ticket]
    tools_trading = [connect_broker, get_quote, place_order]
    tools_research = [fetch_paper, summarize]
    tools_ops = [service_status, restart_service]

    # Three agents work at the same time: their turns alternate, so the
    # sessions' rows interleave in agent_messages (order by id per session).
    live = [
        (SQLiteSession(sid, path), agent, turns)
        for sid, agent, turns in [
            ("support-7f3a", agent_for("support-agent", SUPPORT, tools_support), SUPPORT),
            ("trading-2b91", agent_for("trading-agent", TRADING, tools_trading), TRADING),
            ("research-c044", agent_for("research-agent", RESEARCH + [RESEARCH_ABORTED], tools_research), RESEARCH),
        ]
    ]
    try:
        for i in range(3):
            for s, agent, turns in live:
                await run_turns(agent, s, turns[i : i + 1])
        # research's 4th turn keeps calling tools and hits max_turns: the SDK
        # raises MaxTurnsExceeded and the session keeps the partial turn (user
        # message, 2 calls + outputs, no final assistant message).
        s, agent, _ = live[2]
        try:
            await Runner.run(agent, RESEARCH_ABORTED.user, session=s, max_turns=2, run_config=RUN_CONFIG)
            raise AssertionError("expected MaxTurnsExceeded")
        except MaxTurnsExceeded:
            pass
    finally:
        for s, _, _ in live:
            s.close()

    s = SQLiteSession("ops-91d2", path)
    try:
        agent = agent_for("ops-agent", OPS, tools_ops)
        await run_turns(agent, s, OPS[:2])
        # the operator undoes the wrong turn: pop until its user message is gone
        popped = [await s.pop_item() for _ in range(4)]
        assert popped[-1] == {"content": OPS[1].user, "role": "user"}, popped[-1]
        await run_turns(agent, s, OPS[2:])
    finally:
        s.close()


async def write_advanced(path: Path) -> None:
    tools = [service_status, rotate_api_key, restart_service, fetch_paper, get_quote]
    s = AdvancedSQLiteSession(session_id="planner-a1", db_path=path, create_tables=True)
    try:
        agent = agent_for("planner-agent", PLANNER_MAIN + PLANNER_BRANCH, tools)
        await run_turns(agent, s, PLANNER_MAIN, store_usage=True)
        branch = await s.create_branch_from_turn(2, "retry-from-turn-2")
        assert branch == "retry-from-turn-2"
        await run_turns(agent, s, PLANNER_BRANCH, store_usage=True)
    finally:
        s.close()

    s = AdvancedSQLiteSession(session_id="analyst-b2", db_path=path, create_tables=True)
    try:
        await run_turns(agent_for("analyst-agent", ANALYST, tools), s, ANALYST, store_usage=True)
    finally:
        s.close()


def finish(tmp: Path, out: Path) -> None:
    conn = sqlite3.connect(tmp)
    try:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        mode = conn.execute("PRAGMA journal_mode=DELETE").fetchone()[0]
        assert mode == "delete", mode
    finally:
        conn.close()
    for suffix in ("-wal", "-shm"):
        assert not Path(str(tmp) + suffix).exists(), suffix
    os.replace(tmp, out)


def _fresh_tmp(out: Path) -> Path:
    tmp = out.with_name(f".{out.name}.tmp-{os.getpid()}")
    for suffix in ("", "-wal", "-shm", "-journal"):
        Path(str(tmp) + suffix).unlink(missing_ok=True)
    return tmp


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, help="plain SQLiteSession store to write (e.g. sample_data/openai_agents.sqlite)")
    ap.add_argument("--advanced-out", type=Path, help="AdvancedSQLiteSession store to write (e.g. sample_data/openai_agents_advanced.sqlite)")
    args = ap.parse_args(argv)
    if not args.out and not args.advanced_out:
        ap.error("give --out and/or --advanced-out")
    for out, writer in ((args.out, write_plain), (args.advanced_out, write_advanced)):
        if out is None:
            continue
        out = out.resolve()
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = _fresh_tmp(out)
        try:
            asyncio.run(writer(tmp))
            finish(tmp, out)
        finally:
            for suffix in ("", "-wal", "-shm", "-journal"):
                Path(str(tmp) + suffix).unlink(missing_ok=True)
        print(f"wrote {out} ({out.stat().st_size} bytes)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
