"""Write a Google ADK ``DatabaseSessionService`` SQLite store with real ADK runs.

    .venv-fixtures/adk/bin/python sample_data/generators/adk/generate.py \
        --out sample_data/adk.sqlite

Every row is written by ADK itself: a ``Runner`` drives an ``LlmAgent`` whose
model is ``ScriptedLlm`` (a ``google.adk.models.BaseLlm`` subclass that
returns scripted ``LlmResponse`` objects -- no network, no real LLM). Tools
are plain Python functions wrapped by ADK's ``FunctionTool``; they write state
through ``tool_context.state[...]`` with session, ``app:``, ``user:`` and
``temp:`` keys. Events are persisted by ``DatabaseSessionService.append_event``
on a ``sqlite+aiosqlite://`` URL.

Determinism: ADK reads time and ids through ``google.adk.platform.time`` and
``google.adk.platform.uuid``; this script installs a simulated clock (starting
2026-11-03 09:00:00 UTC, +0.25 s per clock read, minutes between invocations)
and a seeded uuid4 generator, so session ids, event ids, invocation ids,
function-call ids, event timestamps and ``sessions.create_time/update_time``
are the same on every run. Only ``app_states.update_time`` and
``user_states.update_time`` vary: ADK fills them with the database's own
``CURRENT_TIMESTAMP`` (``default=func.now(), onupdate=func.now()``).

Contents (app ``helpdesk``, agent ``helpdesk_agent``, users ``alice``/``bob``):

* alice / orders session: three invocations -- a ``lookup_order`` tool call,
  a ``set_preference`` call (``user:`` state), and a ``refund_order`` call
  whose tool raises ``ValueError``; the agent's ``on_tool_error_callback``
  turns it into an ``{"error": ...}`` function response.
* alice / integration session (the rewind session): ``configure_integration``
  with an ``api_key="sk-proj-..."`` argument (``app:`` state), a lookup, a
  ``cancel_order`` call, then ``Runner.rewind_async(rewind_before_invocation_id=
  <the cancel invocation>)`` and one more invocation after the rewind.
* bob / reports session: a lookup (with a ``state_delta`` passed to
  ``run_async``), an invocation where the model answers with
  ``error_code``/``error_message`` (an error event), one aborted through
  ``run_async(abort_signal=...)`` while ``search_tickets`` runs (ADK seals the
  dangling call with an ``INVOCATION_ABORTED`` function response), and one
  where the ``export_report`` tool raises uncaught: ADK appends an error event
  (``error_code="RuntimeError"``) after the function-call event, no function
  response is ever written, and ``run_async`` re-raises.

The file is written beside ``--out`` and renamed into place; it is left in
``journal_mode=DELETE`` with no ``-wal``/``-shm``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import random
import sqlite3
import sys
import uuid
import warnings
from collections import deque
from datetime import datetime, timezone
from typing import Any, AsyncGenerator

from google.adk.agents import LlmAgent
from google.adk.models import BaseLlm, LlmRequest, LlmResponse
from google.adk.platform import time as platform_time
from google.adk.platform import uuid as platform_uuid
from google.adk.runners import Runner
from google.adk.sessions import DatabaseSessionService
from google.adk.tools import ToolContext
from google.genai import types

APP_NAME = "helpdesk"
AGENT_NAME = "helpdesk_agent"
MODEL_NAME = "scripted-helpdesk-1"
SECRET_API_KEY = "sk-proj-Lg7fQ2xVb9T3kP0sW4nZ8rYc1mD6hJ5e"
START = datetime(2026, 11, 3, 9, 0, 0, tzinfo=timezone.utc).timestamp()


# --------------------------------------------------------------------------
# Simulated clock and ids (ADK's own provider hooks)
# --------------------------------------------------------------------------
class SimClock:
    """Monotonic fake clock: every read advances 0.25 s; ``jump`` adds gaps."""

    def __init__(self, start: float) -> None:
        self.now = start

    def __call__(self) -> float:
        self.now += 0.25
        return self.now

    def jump(self, seconds: float) -> None:
        self.now += seconds


class SeededUuid:
    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)

    def __call__(self) -> str:
        return str(uuid.UUID(int=self.rng.getrandbits(128), version=4))


# --------------------------------------------------------------------------
# The scripted model
# --------------------------------------------------------------------------
def text(msg: str) -> LlmResponse:
    return LlmResponse(content=types.Content(role="model", parts=[types.Part(text=msg)]))


def call(name: str, say: str | None = None, **args: Any) -> LlmResponse:
    parts = []
    if say:
        parts.append(types.Part(text=say))
    parts.append(types.Part(function_call=types.FunctionCall(name=name, args=args)))
    return LlmResponse(content=types.Content(role="model", parts=parts))


def model_error(code: str, message: str) -> LlmResponse:
    return LlmResponse(error_code=code, error_message=message)


class ScriptedLlm(BaseLlm):
    """A ``BaseLlm`` that replays a queue of scripted ``LlmResponse`` objects.

    Each ``generate_content_async`` call pops the next response; the
    generator loads one invocation's script before each ``run_async``. Usage
    metadata is derived from the request so it is deterministic too.
    """

    script: Any = None  # deque[LlmResponse]
    calls: int = 0

    @classmethod
    def supported_models(cls) -> list[str]:
        return [r"scripted-.*"]

    async def generate_content_async(
        self, llm_request: LlmRequest, stream: bool = False
    ) -> AsyncGenerator[LlmResponse, None]:
        if not self.script:
            raise RuntimeError("ScriptedLlm: script exhausted")
        resp: LlmResponse = self.script.popleft()
        self.calls += 1
        prompt_tokens = 40 + 12 * len(llm_request.contents or [])
        resp = resp.model_copy(deep=True)
        resp.model_version = MODEL_NAME
        if resp.error_code is None:
            resp.usage_metadata = types.GenerateContentResponseUsageMetadata(
                prompt_token_count=prompt_tokens,
                candidates_token_count=18,
                total_token_count=prompt_tokens + 18,
            )
        yield resp


# --------------------------------------------------------------------------
# Tools (ADK wraps each function in a FunctionTool; ``tool_context`` injected)
# --------------------------------------------------------------------------
ORDERS = {
    "1042": {"status": "shipped", "carrier": "UPS", "total": 250.0},
    "2077": {"status": "processing", "carrier": None, "total": 89.9},
    "3310": {"status": "delivered", "carrier": "DHL", "total": 1200.0},
}


def lookup_order(order_id: str, tool_context: ToolContext) -> dict:
    """Look up an order by id and remember it in session state."""
    order = dict(ORDERS[order_id], order_id=order_id)
    tool_context.state["last_order"] = order
    seen = tool_context.state.get("user:orders_seen", 0)
    tool_context.state["user:orders_seen"] = seen + 1
    tool_context.state["temp:lookup_latency_ms"] = 42  # never persisted
    return {"order": order}


def set_preference(key: str, value: str, tool_context: ToolContext) -> dict:
    """Store a user-scoped preference (shared by all of the user's sessions)."""
    tool_context.state[f"user:pref_{key}"] = value
    return {"ok": True, "key": key, "value": value}


def refund_order(order_id: str, amount: float, tool_context: ToolContext) -> dict:
    """Refund an order. Raises when the amount is over the refund limit."""
    tool_context.state["refund_attempts"] = tool_context.state.get("refund_attempts", 0) + 1
    if amount > 100:
        raise ValueError(f"refund of {amount:.2f} for order {order_id} exceeds the 100.00 limit")
    return {"refunded": amount}


def configure_integration(service: str, api_key: str, tool_context: ToolContext) -> dict:
    """Connect a payment integration; the key is only echoed as a fingerprint."""
    integrations = list(tool_context.state.get("app:integrations", []))
    if service not in integrations:
        integrations.append(service)
    tool_context.state["app:integrations"] = integrations
    tool_context.state["integration_status"] = {"service": service, "connected": True,
                                                "key_suffix": api_key[-4:]}
    return {"connected": service}


def cancel_order(order_id: str, reason: str, tool_context: ToolContext) -> dict:
    """Cancel an order and record it in session state."""
    order = dict(tool_context.state.get("last_order") or {}, order_id=order_id, status="cancelled")
    tool_context.state["last_order"] = order
    tool_context.state["cancelled_orders"] = list(tool_context.state.get("cancelled_orders", [])) + [order_id]
    tool_context.state["cancel_reason"] = reason
    return {"cancelled": order_id}


def export_report(report: str, tool_context: ToolContext) -> dict:
    """Export a report. Always fails: the export backend is down."""
    tool_context.state["export_requested"] = report
    raise RuntimeError("export backend unavailable: connection refused (report=%s)" % report)


ABORT: dict[str, asyncio.Event] = {}


async def search_tickets(query: str, tool_context: ToolContext) -> dict:
    """Search support tickets. Slow: the operator presses "stop" while it runs
    (the generator's abort signal is set from inside the tool), so ADK cancels
    the invocation and seals the dangling call with an INVOCATION_ABORTED
    function response."""
    tool_context.state["ticket_query"] = query  # lost: the call never completes
    ABORT["signal"].set()
    await asyncio.sleep(0.5)
    return {"tickets": []}


def on_tool_error(tool, args, tool_context: ToolContext, error: Exception):
    """Agent ``on_tool_error_callback``: turn refund errors into a response.

    Returns None for every other tool, so ADK re-raises (export_report crashes
    its invocation).
    """
    if tool.name == "refund_order":
        tool_context.state["last_tool_error"] = {"tool": tool.name, "error": str(error)}
        return {"error": f"{type(error).__name__}: {error}"}
    return None


# --------------------------------------------------------------------------
# Driving the runs
# --------------------------------------------------------------------------
def user_msg(s: str) -> types.Content:
    return types.Content(role="user", parts=[types.Part(text=s)])


async def run_invocation(runner: Runner, model: ScriptedLlm, clock: SimClock, *,
                         user_id: str, session_id: str, message: str,
                         script: list[LlmResponse], state_delta: dict | None = None,
                         gap: float = 95.0, expect_error: type[BaseException] | None = None,
                         abortable: bool = False) -> str | None:
    """One ``run_async`` (= one invocation). Returns its invocation id."""
    clock.jump(gap)
    model.script = deque(script)
    inv_id = None
    ABORT["signal"] = asyncio.Event()
    try:
        async for ev in runner.run_async(user_id=user_id, session_id=session_id,
                                         new_message=user_msg(message), state_delta=state_delta,
                                         abort_signal=ABORT["signal"] if abortable else None):
            inv_id = ev.invocation_id
    except Exception as exc:  # the uncaught-tool-error invocation
        if expect_error is None or not isinstance(exc, expect_error):
            raise
        print(f"  (expected) invocation crashed: {type(exc).__name__}: {exc}", file=sys.stderr)
    else:
        if expect_error is not None:
            raise AssertionError(f"expected {expect_error.__name__}")
    if model.script:
        raise AssertionError(f"unused scripted responses: {list(model.script)}")
    return inv_id


async def build(db_path: str, db_url: str | None = None) -> dict:
    clock = SimClock(START)
    ids = SeededUuid(2026110301)
    platform_time.set_time_provider(clock)
    platform_uuid.set_id_provider(ids)

    model = ScriptedLlm(model=MODEL_NAME)
    agent = LlmAgent(
        name=AGENT_NAME,
        model=model,
        instruction="You are the helpdesk agent. Use the tools to look up, refund and cancel orders.",
        tools=[lookup_order, set_preference, refund_order, configure_integration,
               cancel_order, export_report, search_tickets],
        on_tool_error_callback=on_tool_error,
    )
    service = DatabaseSessionService(db_url=db_url or f"sqlite+aiosqlite:///{db_path}")
    runner = Runner(app_name=APP_NAME, agent=agent, session_service=service)
    summary: dict[str, Any] = {"app_name": APP_NAME, "sessions": []}

    # ---- alice / orders ------------------------------------------------------
    s1 = await service.create_session(app_name=APP_NAME, user_id="alice",
                                      state={"channel": "web", "user:tier": "gold",
                                             "app:support_hours": "09-17 UTC"})
    invs = []
    invs.append(await run_invocation(runner, model, clock, user_id="alice", session_id=s1.id,
        message="Where is my order 1042?",
        script=[call("lookup_order", order_id="1042"),
                text("Order 1042 has shipped with UPS.")]))
    invs.append(await run_invocation(runner, model, clock, user_id="alice", session_id=s1.id,
        message="Please answer me in French from now on.",
        script=[call("set_preference", "Noted, switching language.", key="language", value="fr"),
                text("C'est noté : je vous répondrai en français.")]))
    invs.append(await run_invocation(runner, model, clock, user_id="alice", session_id=s1.id,
        message="Refund order 1042 in full.",
        script=[call("refund_order", order_id="1042", amount=250.0),
                text("Je ne peux pas rembourser 250,00 : la limite est de 100,00. "
                     "Un agent humain va vous recontacter.")]))
    summary["sessions"].append({"user_id": "alice", "session_id": s1.id,
                                "kind": "tool error handled by on_tool_error_callback",
                                "invocations": invs})

    # ---- alice / integration + rewind ---------------------------------------
    clock.jump(3600)
    s2 = await service.create_session(app_name=APP_NAME, user_id="alice", state={"channel": "console"})
    invs = []
    invs.append(await run_invocation(runner, model, clock, user_id="alice", session_id=s2.id,
        message="Connect our Stripe account, the key is " + SECRET_API_KEY,
        script=[call("configure_integration", service="stripe", api_key=SECRET_API_KEY),
                text("Stripe is connected.")]))
    invs.append(await run_invocation(runner, model, clock, user_id="alice", session_id=s2.id,
        message="What's the status of order 2077?",
        script=[call("lookup_order", order_id="2077"),
                text("Order 2077 is still processing.")]))
    invs.append(await run_invocation(runner, model, clock, user_id="alice", session_id=s2.id,
        message="Cancel order 2077, I ordered the wrong size.",
        script=[call("cancel_order", order_id="2077", reason="wrong size"),
                text("Order 2077 is cancelled.")]))
    clock.jump(300)
    # The framework's own rewind: appends one event that undoes the session-
    # scoped state changes made from invocation invs[2] on.
    await runner.rewind_async(user_id="alice", session_id=s2.id,
                              rewind_before_invocation_id=invs[2])
    after = await run_invocation(runner, model, clock, user_id="alice", session_id=s2.id,
        message="Sorry, don't cancel 2077 -- just tell me when it ships.",
        script=[call("lookup_order", order_id="2077"),
                text("Order 2077 is processing; I'll tell you once it ships.")])
    summary["sessions"].append({"user_id": "alice", "session_id": s2.id,
                                "kind": "rewind_async before the cancel invocation",
                                "invocations": invs, "rewound_before": invs[2],
                                "after_rewind": after})

    # ---- bob / reports: error event + crashed invocation ---------------------
    clock.jump(5400)
    s3 = await service.create_session(app_name=APP_NAME, user_id="bob", state={"channel": "slack"})
    invs = []
    invs.append(await run_invocation(runner, model, clock, user_id="bob", session_id=s3.id,
        message="Look up order 3310 for me.", state_delta={"user:team": "finance"},
        script=[call("lookup_order", order_id="3310"),
                text("Order 3310 was delivered by DHL.")]))
    invs.append(await run_invocation(runner, model, clock, user_id="bob", session_id=s3.id,
        message="Summarise every order I have ever placed.",
        script=[model_error("MALFORMED_FUNCTION_CALL",
                            "Malformed function call: list_orders(user='bob', limit=)")]))
    invs.append(await run_invocation(runner, model, clock, user_id="bob", session_id=s3.id,
        message="Find my open tickets about invoices.",
        script=[call("search_tickets", query="invoice status:open")],
        abortable=True))
    invs.append(await run_invocation(runner, model, clock, user_id="bob", session_id=s3.id,
        message="Export the Q3 finance report.",
        script=[call("export_report", report="q3-finance")],
        expect_error=RuntimeError))
    summary["sessions"].append({"user_id": "bob", "session_id": s3.id,
                                "kind": "model error event + aborted invocation + uncaught tool exception",
                                "invocations": invs})

    await service.close()
    platform_time.reset_time_provider()
    platform_uuid.reset_id_provider()
    return summary


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    where = ap.add_mutually_exclusive_group(required=True)
    where.add_argument("--out", help="where to write the SQLite store")
    where.add_argument("--postgres", metavar="DSN",
                       help="write the same sessions into this (empty) PostgreSQL database instead, e.g. "
                            "postgresql://postgres@127.0.0.1:5432/adk (needs psycopg in the venv: "
                            "pip install 'psycopg[binary]'); ADK creates its tables there itself")
    args = ap.parse_args()
    logging.basicConfig(level=logging.CRITICAL)
    warnings.simplefilter("ignore")
    if args.postgres:
        url = "postgresql+psycopg://" + args.postgres.split("://", 1)[1]
        print(json.dumps(asyncio.run(build("", url)), indent=2))
        return
    out = os.path.abspath(args.out)
    tmp = out + ".tmp"
    for p in (tmp, tmp + "-journal", tmp + "-wal", tmp + "-shm"):
        if os.path.exists(p):
            os.remove(p)
    summary = asyncio.run(build(tmp))
    con = sqlite3.connect(tmp)
    mode = con.execute("PRAGMA journal_mode=DELETE").fetchone()[0]
    con.execute("VACUUM")
    con.close()
    assert mode == "delete", mode
    for p in (tmp + "-wal", tmp + "-shm", tmp + "-journal"):
        assert not os.path.exists(p), p
    os.replace(tmp, out)
    print(json.dumps(summary, indent=2))


if __name__ == "__main__":
    main()
