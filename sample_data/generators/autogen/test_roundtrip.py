"""Lastgood restore / rollback / undo on a copy of the AutoGen-written state folder, read back by
AutoGen itself (``readback.py``: the newest state file of a series -> a fresh team or agent ->
``load_state`` -> ``save_state``), which is what an app that resumes from its latest save loads.
Run: ``.venv/bin/python -m pytest sample_data/generators/autogen/test_roundtrip.py``.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[3]
SAMPLE = ROOT / "sample_data" / "autogen"
NAME = "autogen"


def copy(tmp: Path) -> Path:
    target = tmp / "autogen"
    shutil.copytree(SAMPLE, target)
    return target


def act(lastgood: Callable[..., Any], *args: str) -> dict[str, Any]:
    result = lastgood(*args, "--yes", "--reason", "round trip", "--format", "json")
    assert isinstance(result, dict) and result.get("action_id"), result
    assert (result.get("check") or {}).get("ok", True), result
    return result


def saved(folder: Path, name: str) -> Any:
    return json.loads((folder / f"{name}.json").read_text(encoding="utf-8"))


def test_team_restore_then_undo(tmp_path: Path, readback: Callable[..., Any], lastgood: Callable[..., Any]) -> None:
    store = copy(tmp_path)
    team = store / "trip-team"
    restored = act(lastgood, "restore", str(store), "trip-team/state-0002")  # before the failed turn
    assert (restored["previous_head"], restored["new_head"]) == ("state-0005~trip-team", "state-0006~trip-team")
    back = readback(NAME, str(store), "trip-team")
    assert back["state_file"].endswith("state-0006.json") and back["roundtrip_identical"]
    assert back["state"] == saved(team, "state-0002") and back["participants"] == ["planner", "critic"]
    thread = back["state"]["agent_states"]["RoundRobinGroupChatManager"]["message_thread"]
    assert len(thread) == 10 and thread[-1]["content"] == "REVISE: we still need a hotel."
    act(lastgood, "undo", str(store), restored["action_id"])
    back = readback(NAME, str(store), "trip-team")
    assert back["state_file"].endswith("state-0007.json") and back["state"] == saved(team, "state-0005")
    assert readback(NAME, str(store), "support-agent")["state"] == saved(store / "support-agent", "state-0003")


def test_agent_rollback(tmp_path: Path, readback: Callable[..., Any], lastgood: Callable[..., Any]) -> None:
    store = copy(tmp_path)
    rolled = act(lastgood, "rollback", str(store), "support-agent", "--to", "support-agent/state-0001")
    assert rolled["new_head"] == "state-0004~support-agent"
    back = readback(NAME, str(store), "support-agent")
    assert back["kind"] == "agent" and back["roundtrip_identical"]
    assert back["state"] == saved(store / "support-agent", "state-0001")
    assert len(back["state"]["llm_context"]["messages"]) == 4
    listed = lastgood("ls", str(store), "--run", "support-agent", "--format", "json")
    rows = listed if isinstance(listed, list) else listed.get("checkpoints", listed)
    assert {r["checkpoint_id"]: r["status"] for r in rows} == {
        "state-0001~support-agent": "ok", "state-0002~support-agent": "superseded",
        "state-0003~support-agent": "superseded", "state-0004~support-agent": "ok"}
