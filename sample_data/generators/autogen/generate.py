"""Write AutoGen AgentChat state files the way an app saves them (no LLM).

    .venv-fixtures/autogen/bin/python sample_data/generators/autogen/generate.py --out sample_data/autogen

AutoGen has no checkpoint store of its own: an app calls ``await
team.save_state()`` / ``await agent.save_state()`` (JSON-ready dicts) and
persists them itself. This script does exactly that, one file per turn:

- ``<out>/trip-team/state-0001.json`` .. ``state-0005.json``: a
  ``RoundRobinGroupChat([planner, critic])`` (two ``AssistantAgent``s, each
  with a ``ScriptedReplayClient`` -- ``autogen_ext.models.replay.
  ReplayChatCompletionClient`` replaying scripted ``CreateResult``s, plus one
  scripted exception), terminated per run by
  ``TextMentionTermination("APPROVED") | TextMentionTermination("REVISE")``.
  After each ``await team.run(task=...)`` the app writes ``team.save_state()``
  (in a ``finally``, so a failed turn is checkpointed too).
  Turn 1: ``search_flights`` with ``api_key="sk-proj-..."`` in its arguments;
  turn 2: ``book_hotel`` raises (FunctionExecutionResult ``is_error: true``),
  the critic answers REVISE; turn 3: the planner's model call raises
  (HTTP 504) -> ``team.run`` raises RuntimeError, state-0003 is a half turn;
  the app then rolls back: a fresh team ``load_state``s state-0002 and goes
  on; turn 4: ``book_hotel`` succeeds, its result JSON carries ``"api_key"``;
  turn 5: text only. So state-0004 descends from state-0002, not 0003.
- ``<out>/support-agent/state-0001.json`` .. ``state-0003.json``: one
  ``AssistantAgent`` run three times (``await agent.run(task=...)``) with
  ``agent.save_state()`` written after each.

Each file is ``json.dumps(state, indent=2)`` of what save_state returned,
written to a temp name and renamed. The whole folder is built beside
``--out`` and swapped into place. Determinism: ``uuid.uuid4`` is seeded and
``datetime.now`` in ``autogen_agentchat.messages`` reads a simulated clock
(2026-11-03 14:00:00 UTC, +0.4 s per message, minutes between turns), so
message ids and ``created_at`` are the same on every run: the files are
byte-identical across regenerations.
"""

from __future__ import annotations

import random
import uuid as _uuid
from datetime import datetime as _datetime
from datetime import timedelta, timezone

_RNG = random.Random(20261103)
_uuid.uuid4 = lambda: _uuid.UUID(int=_RNG.getrandbits(128), version=4)  # type: ignore[assignment]
_clock = {"now": _datetime(2026, 11, 3, 14, 0, 0, tzinfo=timezone.utc)}


class _SimDatetime(_datetime):
    """``datetime`` whose ``now()`` reads the simulated clock."""

    @classmethod
    def now(cls, tz=None):  # type: ignore[override]
        _clock["now"] += timedelta(milliseconds=400)
        t = _clock["now"]
        return cls.fromtimestamp(t.timestamp(), tz)


def advance(seconds: float) -> None:
    _clock["now"] += timedelta(seconds=seconds)


import argparse  # noqa: E402
import asyncio  # noqa: E402
import json  # noqa: E402
import logging  # noqa: E402
import os  # noqa: E402
import shutil  # noqa: E402
import sys  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any, Mapping  # noqa: E402

import autogen_agentchat.messages as _ag_messages  # noqa: E402
from autogen_agentchat.agents import AssistantAgent  # noqa: E402
from autogen_agentchat.conditions import TextMentionTermination  # noqa: E402
from autogen_agentchat.teams import RoundRobinGroupChat  # noqa: E402
from autogen_core import FunctionCall  # noqa: E402
from autogen_core.models import CreateResult, ModelFamily, ModelInfo, RequestUsage  # noqa: E402
from autogen_ext.models.replay import ReplayChatCompletionClient  # noqa: E402

_ag_messages.datetime = _SimDatetime  # type: ignore[attr-defined]
# The replay client logs a warning per call ("tool_choice ... ignored", token counts).
# The failing turn is also logged with a traceback by the runtime.
for _name in ("autogen_core", "autogen_agentchat", "autogen_ext"):
    logging.getLogger(_name).setLevel(logging.CRITICAL + 1)

SECRET_KEY = "sk-proj-Zr4Tn8Wq2Lk6Hv1Xc9Mb3Jp7Df5Gs0Ay2Ue8Ko4Ri6Nt1Vw"
HOTEL_KEY = "sk-proj-Hb2Qm7Ye4Wn9Ls3Kd8Tx1Vc6Pz0Fr5Ja3Mu7Gi2Oe9Nh4Bq"

MODEL_INFO = ModelInfo(
    vision=False, function_calling=True, json_output=False, family=ModelFamily.UNKNOWN, structured_output=False
)


class ScriptedReplayClient(ReplayChatCompletionClient):
    """``ReplayChatCompletionClient`` whose script may also hold an exception:
    that call raises it (a model endpoint failing mid-run)."""

    async def create(self, messages: Any, **kwargs: Any) -> CreateResult:  # type: ignore[override]
        if self._current_index < len(self.chat_completions):
            nxt = self.chat_completions[self._current_index]
            if isinstance(nxt, BaseException):
                self._current_index += 1
                raise nxt
        return await super().create(messages, **kwargs)


def tool_call(name: str, args: dict[str, Any], call_id: str) -> CreateResult:
    return CreateResult(
        finish_reason="function_calls",
        content=[FunctionCall(id=call_id, name=name, arguments=json.dumps(args))],
        usage=RequestUsage(prompt_tokens=0, completion_tokens=len(json.dumps(args)) // 4),
        cached=False,
    )


# ------------------------------------------------------------------ tools


async def search_flights(origin: str, dest: str, date: str, api_key: str) -> str:
    """Search flights on the fares API."""
    return json.dumps({"flights": [{"no": "TP1245", "from": origin, "to": dest, "date": date, "eur": 142}]})


async def book_hotel(name: str, nights: int) -> str:
    """Book a hotel room."""
    if name == "Pestana Palace":
        raise RuntimeError(f"No availability at {name} for {nights} nights (HTTP 409)")
    return json.dumps({"booking": "HX-7731", "hotel": name, "nights": nights, "partner": {"api_key": HOTEL_KEY}})


async def lookup_order(order_id: str) -> str:
    """Look up an order."""
    return json.dumps({"order_id": order_id, "status": "delivered", "total_eur": 59.9})


async def issue_refund(order_id: str, amount_eur: float) -> str:
    """Refund an order through the payments API."""
    return json.dumps({"refund": "rf_2210", "order_id": order_id, "amount_eur": amount_eur,
                       "gateway": {"api_key": HOTEL_KEY.replace("Hb2", "Pg7"), "mode": "live"}})


# ------------------------------------------------------------------ the team

TEAM_TASKS = [
    "Plan a 3-day trip from Lyon to Lisbon on 2026-03-12.",
    "Add a hotel for 3 nights: Pestana Palace.",
    "Book the Pestana Palace anyway, any room type.",  # the planner's model call fails
    # -- the app rolls back to state-0002 here --
    "Try the Memmo Alfama instead.",
    "Summarize the itinerary in one line.",
]


def team_scripts() -> tuple[list[Any], list[Any], list[Any], list[Any]]:
    """(planner, critic) scripts before the failure, then after the rollback."""
    planner_1 = [
        tool_call("search_flights", {"origin": "LYS", "dest": "LIS", "date": "2026-03-12", "api_key": SECRET_KEY}, "call_tf_001"),
        "Flight TP1245 LYS->LIS on 2026-03-12 for 142 EUR.",
        tool_call("book_hotel", {"name": "Pestana Palace", "nights": 3}, "call_tf_002"),
        "Pestana Palace has no availability; the booking failed.",
        ConnectionError("model endpoint timed out (HTTP 504)"),
    ]
    critic_1 = ["APPROVED: the flight works.", "REVISE: we still need a hotel."]
    planner_2 = [
        tool_call("book_hotel", {"name": "Memmo Alfama", "nights": 3}, "call_tf_003"),
        "Booked Memmo Alfama for 3 nights (HX-7731).",
        "TP1245 on 12 March, 3 nights at Memmo Alfama (HX-7731), 142 EUR flight.",
    ]
    critic_2 = ["APPROVED: flight and hotel are set.", "APPROVED"]
    return planner_1, critic_1, planner_2, critic_2


def build_team(planner_script: list[Any] | None = None, critic_script: list[Any] | None = None) -> RoundRobinGroupChat:
    planner = AssistantAgent(
        "planner",
        model_client=ScriptedReplayClient(planner_script or [], model_info=MODEL_INFO),
        tools=[search_flights, book_hotel],
        reflect_on_tool_use=True,
        system_message="You plan trips. Use tools.",
    )
    critic = AssistantAgent(
        "critic",
        model_client=ScriptedReplayClient(critic_script or [], model_info=MODEL_INFO),
        system_message="Review the plan. Answer APPROVED or REVISE.",
    )
    return RoundRobinGroupChat(
        [planner, critic],
        termination_condition=TextMentionTermination("APPROVED") | TextMentionTermination("REVISE"),
    )


# ------------------------------------------------------------------ the single agent

AGENT_TASKS = ["Where is order A-1001?", "Refund it in full.", "Thanks, that's all."]


def build_agent(script: list[Any] | None = None) -> AssistantAgent:
    return AssistantAgent(
        "support_agent",
        model_client=ReplayChatCompletionClient(script or [], model_info=MODEL_INFO),
        tools=[lookup_order, issue_refund],
        reflect_on_tool_use=True,
        system_message="You are a support agent.",
    )


def agent_script() -> list[Any]:
    return [
        tool_call("lookup_order", {"order_id": "A-1001"}, "call_sa_001"),
        "Order A-1001 was delivered (59.90 EUR).",
        tool_call("issue_refund", {"order_id": "A-1001", "amount_eur": 59.9}, "call_sa_002"),
        "Refunded 59.90 EUR (rf_2210).",
        "You're welcome!",
    ]


# ------------------------------------------------------------------ writing


def write_json(path: Path, state: Mapping[str, Any]) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(state, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    os.replace(tmp, path)


async def write(out: Path) -> None:
    planner_1, critic_1, planner_2, critic_2 = team_scripts()
    folder = out / "trip-team"
    folder.mkdir(parents=True)

    async def turn(team: RoundRobinGroupChat, n: int, task: str, fails: bool = False) -> None:
        advance(300)
        try:
            result = await team.run(task=task)
            assert not fails, f"turn {n} should have failed"
            assert result.stop_reason and ("APPROVED" in result.stop_reason or "REVISE" in result.stop_reason)
        except RuntimeError as exc:  # AutoGen re-raises an agent's exception as RuntimeError
            assert fails and "HTTP 504" in str(exc), exc
        finally:
            # the app checkpoints after every turn, failed or not
            write_json(folder / f"state-{n:04d}.json", await team.save_state())

    team = build_team(planner_1, critic_1)
    await turn(team, 1, TEAM_TASKS[0])
    await turn(team, 2, TEAM_TASKS[1])
    await turn(team, 3, TEAM_TASKS[2], fails=True)
    # Rollback the way an AutoGen app does it: a fresh team loads the last good state.
    advance(600)
    team = build_team(planner_2, critic_2)
    await team.load_state(json.loads((folder / "state-0002.json").read_text(encoding="utf-8")))
    await turn(team, 4, TEAM_TASKS[3])
    await turn(team, 5, TEAM_TASKS[4])

    agent = build_agent(agent_script())
    folder = out / "support-agent"
    folder.mkdir(parents=True)
    advance(3600)
    for n, task in enumerate(AGENT_TASKS, 1):
        advance(120)
        await agent.run(task=task)
        write_json(folder / f"state-{n:04d}.json", await agent.save_state())


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, required=True, help="folder to write (e.g. sample_data/autogen); replaced whole")
    args = ap.parse_args(argv)
    out = args.out.resolve()
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.tmp-{os.getpid()}")
    old = out.with_name(f".{out.name}.old-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        asyncio.run(write(tmp))
        if out.exists():
            os.replace(out, old)
        os.replace(tmp, out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.rmtree(old, ignore_errors=True)
    files = sorted(p for p in out.rglob("*.json"))
    print(f"wrote {out}: {len(files)} files, {sum(p.stat().st_size for p in files)} bytes", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
