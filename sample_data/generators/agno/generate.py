"""Write an Agno ``SqliteDb`` store with real ``Agent.run`` calls (no LLM).

    .venv-fixtures/agno/bin/python sample_data/generators/agno/generate.py --out sample_data/agno.sqlite

Every row is written by Agno itself: ``Agent(..., db=SqliteDb(db_file=...))``
runs, ``Agent.continue_run`` (human confirmation) and ``Agent.fork_session``.
The model is ``ScriptedModel``, a subclass of ``agno.models.base.Model`` that
answers from a fixed script keyed by the latest user message: a tool call
(OpenAI-style ``tool_calls`` entry), then -- after Agno ran the tool and added
the tool message -- the final text. Telemetry is off; nothing leaves the machine.

Sessions (agent ``shop-assistant``, ``add_history_to_context=True``,
``num_history_runs=3``; ``session_state`` starts as ``{"cart": {}, ...}`` and
the tools change it through ``run_context.session_state``):

- ``cart-001`` (user ``u-dana``), 5 runs:
  0 add apples, 1 add milk (``add_to_cart``),
  2 ``connect_payment`` whose arguments carry ``api_key="sk-proj-..."``,
  -- the session is forked here (``fork_session``) --
  3 ``checkout`` raises (card declined): tool message with
    ``tool_call_error: true``, run status COMPLETED,
  4 the model raises ``ModelProviderError`` (HTTP 503): run status ERROR,
    only the system + user messages stored;
- the fork of ``cart-001`` (a uuid session id, ``session_data.forked_from_session_id
  = "cart-001"``): copies of runs 0-2 with new run ids, then its own run 3,
  a ``checkout`` with another card that succeeds;
- ``cart-002`` (user ``u-lee``), 3 runs: 0 add bread; 1 ``place_order``
  needs confirmation -> run PAUSED -> ``continue_run`` after confirming ->
  the same run row becomes COMPLETED; 2 another ``place_order`` left PAUSED
  (never confirmed).

Determinism: the script re-executes itself with ``PYTHONHASHSEED=0`` (Agno
writes ``agent_data.model`` in set order), ``uuid.uuid4`` is replaced by a seeded generator and
``time.time`` / ``time.perf_counter`` by a simulated clock (it starts
2026-11-03 09:00:00 UTC, advances 10 ms per reading and jumps minutes between
runs) *before* Agno is imported, so run/message/fork ids, ``created_at``
columns and metrics are the same on every run; ``datetime.now()`` in the two
Agno modules that call it (schema versions, run requirements) reads that clock
too.
The file is written beside ``--out``, switched from Agno's WAL mode to
``journal_mode=DELETE`` after the engine is disposed, and renamed into place.
"""

from __future__ import annotations

import os
import sys

if __name__ == "__main__" and os.environ.get("PYTHONHASHSEED") != "0":
    # Agno serializes some dicts in set order (agent_data.model): fix str hashing.
    os.execve(sys.executable, [sys.executable, *sys.argv], {**os.environ, "PYTHONHASHSEED": "0"})

# --- determinism: must run before agno (which does `from uuid import uuid4`,
# `from time import time`) is imported.
import random
import time as _time
import uuid as _uuid

_RNG = random.Random(20261103)
_T0 = 1793696400.0  # 2026-11-03T09:00:00Z
_clock = {"now": _T0}


def _fake_uuid4() -> _uuid.UUID:
    return _uuid.UUID(int=_RNG.getrandbits(128), version=4)


def _fake_time() -> float:
    _clock["now"] += 0.01
    return _clock["now"]


def advance(seconds: float) -> None:
    """Let simulated time pass between runs."""
    _clock["now"] += seconds


_uuid.uuid4 = _fake_uuid4
_time.time = _fake_time
_time.perf_counter = _fake_time

import argparse  # noqa: E402
import json  # noqa: E402
import sqlite3  # noqa: E402
from dataclasses import dataclass  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

os.environ["AGNO_TELEMETRY"] = "false"

from agno.agent import Agent  # noqa: E402
from agno.db.sqlite import SqliteDb  # noqa: E402
from agno.exceptions import ModelProviderError  # noqa: E402
from agno.metrics import MessageMetrics  # noqa: E402
from agno.models.base import Model  # noqa: E402
from agno.models.message import Message  # noqa: E402
from agno.models.response import ModelResponse  # noqa: E402
from agno.run import RunContext  # noqa: E402
from agno.run.base import RunStatus  # noqa: E402
from agno.tools import tool  # noqa: E402
from datetime import datetime as _datetime  # noqa: E402
import logging  # noqa: E402

import agno.db.sqlite.sqlite as _agno_sqlite  # noqa: E402
import agno.run.requirement as _agno_requirement  # noqa: E402


class _SimDatetime(_datetime):
    """datetime whose now() reads the simulated clock (Agno stamps schema
    versions and run requirements with datetime.now())."""

    @classmethod
    def now(cls, tz=None):  # type: ignore[override]
        return cls.fromtimestamp(_fake_time(), tz)


_agno_sqlite.datetime = _SimDatetime
_agno_requirement.datetime = _SimDatetime
# Agno logs the deliberately failing tool and model with tracebacks; keep the output short.
logging.getLogger("agno").disabled = True

SECRET_KEY = "sk-proj-Pq7Wm3Xk9Lt2Rv5Bn8Yc4Hd1Js6Fg0Ea3Ku7Mz2Qx9Vb5Nc"
AGENT_ID = "shop-assistant"

# ----------------------------------------------------------------- the script
# user message -> (tool name, arguments) or None, final answer, or RAISE
RAISE = object()
SCRIPT: dict[str, tuple[Any, Any]] = {
    "Add 2 apples to my cart.": (("add_to_cart", {"item": "apple", "qty": 2}), "Added 2 apples."),
    "And a litre of milk.": (("add_to_cart", {"item": "milk", "qty": 1}), "Added 1 milk."),
    f"Connect my payment account, key {SECRET_KEY}.": (
        ("connect_payment", {"provider": "stripe", "api_key": SECRET_KEY}),
        "Payment account connected.",
    ),
    "Check out with my Visa.": (("checkout", {"card": "visa-4242"}), "The checkout failed: the card was declined."),
    "Try the checkout again.": (None, RAISE),
    "Check out with my Mastercard instead.": (("checkout", {"card": "mc-5454"}), "Order placed and paid."),
    "Add a loaf of bread.": (("add_to_cart", {"item": "bread", "qty": 1}), "Added 1 bread."),
    "Place the order.": (("place_order", {"address": "12 Rue des Lilas, Lyon"}), "Order placed."),
    "Place the same order again.": (("place_order", {"address": "12 Rue des Lilas, Lyon"}), "Order placed."),
}


def _tokens(text: str) -> int:
    return max(1, len(text) // 4)


@dataclass
class ScriptedModel(Model):
    """``agno.models.base.Model`` that replays SCRIPT; no network."""

    id: str = "scripted-shop-1"
    name: str = "ScriptedModel"
    provider: str = "lastgood-fixture"

    def _respond(self, messages: list[Message]) -> ModelResponse:
        last_user = max(i for i, m in enumerate(messages) if m.role == "user")
        text = messages[last_user].get_content_string()
        call, final = SCRIPT[text]
        if final is RAISE:
            raise ModelProviderError("Service Unavailable: upstream overloaded", status_code=503, model_name=self.name, model_id=self.id)
        tool_results = [m for m in messages[last_user + 1 :] if m.role == "tool"]
        prompt = " ".join(m.get_content_string() for m in messages)
        r = ModelResponse(role="assistant")
        if call is not None and not tool_results:
            name, args = call
            call_id = "call_" + _uuid.UUID(int=hash_int(text), version=4).hex[:24]
            r.tool_calls = [{"id": call_id, "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}]
            out = json.dumps(r.tool_calls)
        else:
            r.content = final
            out = final
        r.response_usage = MessageMetrics(input_tokens=_tokens(prompt), output_tokens=_tokens(out), total_tokens=_tokens(prompt) + _tokens(out))
        return r

    def invoke(self, messages: list[Message], assistant_message: Message, **kwargs: Any) -> ModelResponse:
        return self._respond(messages)

    async def ainvoke(self, messages: list[Message], assistant_message: Message, **kwargs: Any) -> ModelResponse:
        return self._respond(messages)

    def invoke_stream(self, *args: Any, **kwargs: Any):  # pragma: no cover
        raise NotImplementedError("the fixture does not stream")

    def ainvoke_stream(self, *args: Any, **kwargs: Any):  # pragma: no cover
        raise NotImplementedError("the fixture does not stream")

    def _parse_provider_response(self, response: Any, **kwargs: Any) -> ModelResponse:
        return response

    def _parse_provider_response_delta(self, response: Any) -> ModelResponse:
        return response


def hash_int(text: str) -> int:
    import hashlib

    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:16], "big")


# ----------------------------------------------------------------- tools


def add_to_cart(run_context: RunContext, item: str, qty: int) -> str:
    """Add an item to the shopping cart."""
    cart = run_context.session_state.setdefault("cart", {})
    cart[item] = cart.get(item, 0) + qty
    return json.dumps({"cart": cart})


def connect_payment(run_context: RunContext, provider: str, api_key: str) -> str:
    """Connect the user's payment provider account."""
    run_context.session_state["payment"] = {"provider": provider, "key_last4": api_key[-4:], "connected": True}
    return json.dumps({"connected": True, "provider": provider, "account": "acct_" + api_key[-8:].lower()})


def checkout(run_context: RunContext, card: str) -> str:
    """Pay for the cart with a card."""
    if card.startswith("visa"):
        run_context.session_state["last_error"] = "card_declined"
        raise RuntimeError(f"Payment declined for card {card}: insufficient_funds (code 402)")
    run_context.session_state["orders"] = run_context.session_state.get("orders", []) + [
        {"order": "ord-" + card[-4:], "items": dict(run_context.session_state.get("cart", {}))}
    ]
    run_context.session_state["cart"] = {}
    run_context.session_state.pop("last_error", None)
    return json.dumps({"paid": True, "order": "ord-" + card[-4:]})


@tool(requires_confirmation=True)
def place_order(run_context: RunContext, address: str) -> str:
    """Place the order for delivery (needs the user's confirmation)."""
    orders = run_context.session_state.setdefault("orders", [])
    orders.append({"order": f"ord-{len(orders) + 1:03d}", "address": address})
    return json.dumps({"placed": True, "order": orders[-1]["order"]})


# ----------------------------------------------------------------- runs


def make_agent(db: SqliteDb) -> Agent:
    return Agent(
        id=AGENT_ID,
        name="Shop assistant",
        model=ScriptedModel(),
        db=db,
        tools=[add_to_cart, connect_payment, checkout, place_order],
        instructions="Help the user shop. Be brief.",
        session_state={"cart": {}, "orders": []},
        add_history_to_context=True,
        num_history_runs=3,
        telemetry=False,
    )


def run(agent: Agent, text: str, session_id: str, user_id: str, expect: RunStatus, gap: float = 240.0):
    advance(gap)
    r = agent.run(text, session_id=session_id, user_id=user_id)
    assert r.status == expect, (text, r.status, r.content)
    return r


def write(path: Path, db_url: str | None = None) -> dict[str, str]:
    if db_url:  # PostgresDb (tables in its default schema "ai")
        from agno.db.postgres import PostgresDb

        db = PostgresDb(db_url=db_url)
    else:
        db = SqliteDb(db_file=str(path))
    agent = make_agent(db)
    ok, err, paused = RunStatus.completed, RunStatus.error, RunStatus.paused
    try:
        run(agent, "Add 2 apples to my cart.", "cart-001", "u-dana", ok)
        run(agent, "And a litre of milk.", "cart-001", "u-dana", ok)
        run(agent, f"Connect my payment account, key {SECRET_KEY}.", "cart-001", "u-dana", ok)
        advance(60)
        fork_id = agent.fork_session(source_session_id="cart-001", user_id="u-dana")

        advance(1800)
        run(agent, "Add a loaf of bread.", "cart-002", "u-lee", ok)

        r = run(agent, "Check out with my Visa.", "cart-001", "u-dana", ok)
        assert any(t.tool_call_error for t in r.tools or []), "checkout should have failed"
        run(agent, "Try the checkout again.", "cart-001", "u-dana", err)

        r = run(agent, "Place the order.", "cart-002", "u-lee", paused)
        advance(90)  # the human reads the request, then confirms
        for req in r.active_requirements:
            req.confirm()
        r = agent.continue_run(run_id=r.run_id, requirements=r.requirements, session_id="cart-002", user_id="u-lee")
        assert r.status == ok, r.status

        run(agent, "Check out with my Mastercard instead.", fork_id, "u-dana", ok, gap=3600)
        run(agent, "Place the same order again.", "cart-002", "u-lee", paused)
    finally:
        db.db_engine.dispose()
    return {"fork": fork_id}


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


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    where = ap.add_mutually_exclusive_group(required=True)
    where.add_argument("--out", type=Path, help="SQLite file to write (e.g. sample_data/agno.sqlite)")
    where.add_argument("--postgres", metavar="DSN",
                       help="write the same sessions with PostgresDb into this (empty) PostgreSQL database instead, "
                            "e.g. postgresql://postgres@127.0.0.1:5432/agno (needs psycopg in the venv: "
                            "pip install 'psycopg[binary]'); Agno creates its tables (schema ai) itself")
    args = ap.parse_args(argv)
    if args.postgres:
        ids = write(Path(), "postgresql+psycopg://" + args.postgres.split("://", 1)[1])
        print(f"wrote {args.postgres.rsplit('@', 1)[-1]}; forked session {ids['fork']}", file=sys.stderr)
        return 0
    out = args.out.resolve()
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.tmp-{os.getpid()}")
    sides = ("", "-wal", "-shm", "-journal")
    for s in sides:
        Path(str(tmp) + s).unlink(missing_ok=True)
    try:
        ids = write(tmp)
        finish(tmp, out)
    finally:
        for s in sides:
            Path(str(tmp) + s).unlink(missing_ok=True)
    print(f"wrote {out} ({out.stat().st_size} bytes); forked session {ids['fork']}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
