"""Lastgood restore / rollback / undo on copies of the SDK-written stores, read back by the
OpenAI Agents SDK itself (``readback.py``: ``SQLiteSession.get_items()`` /
``AdvancedSQLiteSession.get_items()`` on a branch) — what ``Runner.run(agent, input, session=…)``
would send the model next. Run: ``.venv/bin/python -m pytest sample_data/generators/openai_agents/test_roundtrip.py``.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[3]
PLAIN = ROOT / "sample_data" / "openai_agents.sqlite"
ADVANCED = ROOT / "sample_data" / "openai_agents_advanced.sqlite"
NAME = "openai_agents"


def copy(source: Path, tmp: Path) -> str:
    target = tmp / source.name
    shutil.copyfile(source, target)
    return str(target)


def items(readback: Callable[..., Any], store: str, session: str, *branch: str) -> list[Any]:
    return readback(NAME, store, session, *(("--branch", branch[0]) if branch else ()), "--items-only")


def act(lastgood: Callable[..., Any], *args: str) -> dict[str, Any]:
    result = lastgood(*args, "--yes", "--reason", "round trip", "--format", "json")
    assert isinstance(result, dict) and result.get("action_id"), result
    assert (result.get("check") or {}).get("ok", True), result
    return result


def test_plain_restore_then_undo(tmp_path: Path, readback: Callable[..., Any],
                                 lastgood: Callable[..., Any]) -> None:
    store = copy(PLAIN, tmp_path)
    original = items(readback, store, "support-7f3a")
    assert len(original) == 12
    restored = act(lastgood, "restore", store, "15")  # support-7f3a: turn 2's tool output
    assert (restored["previous_head"], restored["new_head"]) == ("30", "15")
    assert items(readback, store, "support-7f3a") == original[:7]
    assert items(readback, store, "trading-2b91") == items(readback, str(PLAIN), "trading-2b91")
    act(lastgood, "undo", store, restored["action_id"])
    assert items(readback, store, "support-7f3a") == original


def test_plain_rollback_then_the_sdk_continues(tmp_path: Path, readback: Callable[..., Any],
                                               lastgood: Callable[..., Any],
                                               framework_python: Callable[[str], Path]) -> None:
    store = copy(PLAIN, tmp_path)
    original = items(readback, store, "research-c044")
    rolled = act(lastgood, "rollback", store, "research-c044", "--to", "40")  # before the aborted turn 4
    assert items(readback, store, "research-c044") == original[:12]
    script = ("import asyncio, sys; from agents import SQLiteSession\n"
              "s = SQLiteSession('research-c044', sys.argv[1])\n"
              "asyncio.run(s.add_items([{'content': 'Try again, one paper at a time.', 'role': 'user'}]))\n"
              "s.close()\n")
    subprocess.run([str(framework_python(NAME)), "-c", script, store], check=True, timeout=120)
    continued = items(readback, store, "research-c044")
    assert continued[:12] == original[:12] and continued[12]["content"] == "Try again, one paper at a time."
    refused = lastgood("undo", store, rolled["action_id"], "--yes", "--reason", "too late", "--format", "json",
                       check=False)
    assert refused.returncode != 0 and "moved" in (refused.stderr + refused.stdout)  # the SDK wrote since


@pytest.mark.parametrize("namespace, branch, target, keep", [
    ("", None, "8", 8),                                    # main: what a new session object resumes
    ("retry-from-turn-2", "retry-from-turn-2", "20", 8),   # a branch: the app must switch_to_branch
])
def test_advanced_restore_then_undo(tmp_path: Path, readback: Callable[..., Any], lastgood: Callable[..., Any],
                                    namespace: str, branch: str | None, target: str, keep: int) -> None:
    store = copy(ADVANCED, tmp_path)
    on_branch = (branch,) if branch else ()
    other = () if branch else ("retry-from-turn-2",)
    original = items(readback, store, "planner-a1", *on_branch)
    untouched = items(readback, store, "planner-a1", *other)
    restored = act(lastgood, "restore", store, f"{target}@{namespace}")
    assert restored["new_head"] == target
    assert items(readback, store, "planner-a1", *on_branch) == original[:keep]
    assert items(readback, store, "planner-a1", *other) == untouched
    full = readback(NAME, store, "planner-a1", *(("--branch", branch) if branch else ()))
    assert [t["turn"] for t in full["turns"]] == [1, 2]
    assert {u["user_turn_number"] for u in full["turn_usage"]} <= {1, 2}
    journal = lastgood("journal", store, "--format", "json")
    note = journal["actions"][-1]["note"]
    assert note["branch"] == (branch or "main")
    act(lastgood, "undo", store, restored["action_id"])
    assert items(readback, store, "planner-a1", *on_branch) == original
    assert readback(NAME, store, "planner-a1", *(("--branch", branch) if branch else ()))["turn_usage"] == \
        readback(NAME, str(ADVANCED), "planner-a1", *(("--branch", branch) if branch else ()))["turn_usage"]
    assert json.dumps(items(readback, store, "planner-a1", *other)) == json.dumps(untouched)
