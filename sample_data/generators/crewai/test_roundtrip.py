"""CrewAI round trip: ``lastgood restore/rollback/undo`` on a copy of ``crewai_flows.db``, then CrewAI's own
``SQLiteFlowPersistence.load_state`` / ``load_pending_feedback`` (``readback.py`` in the crewai virtualenv)
says what a ``kickoff(inputs={"id": uuid})`` / ``Flow.from_pending`` would resume from.

    .venv/bin/python -m pytest sample_data/generators/crewai/test_roundtrip.py
"""

from __future__ import annotations

import json
import shutil
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[3]
STORE = ROOT / "sample_data" / "crewai_flows.db"
RESUMED = "57c2db87-63ef-4c36-bbd3-f15d0c899e7a"  # rows 8-9, then a second kickoff: rows 10-14
PAUSED = "0dc2f2e7-9f87-464c-891f-7e20424e811b"  # rows 15-19 + a pending_feedback row
FAILED = "c7ea4734-e207-4b12-9cd6-9020f9784d5a"  # rows 6-7


def _copy(tmp_path: Path) -> str:
    path = tmp_path / "crewai_flows.db"
    shutil.copy(STORE, path)
    return str(path)


def _state(store: str, row: int) -> dict[str, Any]:
    with sqlite3.connect(f"file:{store}?mode=ro", uri=True) as conn:
        return json.loads(conn.execute("SELECT state_json FROM flow_states WHERE id = ?", (row,)).fetchone()[0])


def _resume(readback: Callable[..., Any], store: str, uuid: str) -> dict[str, Any]:
    result = readback("crewai", store, uuid)
    return result["runs"][0]


def _act(lastgood: Callable[..., Any], *args: str) -> dict[str, Any]:
    done = lastgood(*args, "--yes", "--reason", "round trip", "--format", "json")
    assert done["check"] is None or done["check"]["ok"], done
    return done


def test_restore_and_undo_move_what_crewai_resumes_from(tmp_path: Path, readback: Callable[..., Any],
                                                        lastgood: Callable[..., Any]) -> None:
    store = _copy(tmp_path)
    before = _resume(readback, store, RESUMED)
    assert before["resume_state"] == _state(store, 14)

    restored = _act(lastgood, "restore", store, "12")
    assert restored["previous_head"] == "14" and restored["new_head"] == "20"  # a new row; nothing rewritten
    after = _resume(readback, store, RESUMED)
    assert after["resume_state"] == _state(store, 12), "load_state returns the target's state"
    assert after["pending_feedback"] is None

    undone = _act(lastgood, "undo", store, restored["action_id"])
    assert undone["undo_of"] == restored["action_id"]
    assert _resume(readback, store, RESUMED)["resume_state"] == before["resume_state"]

    others = readback("crewai", store, FAILED, PAUSED)["runs"]
    assert others[0]["resume_state"] == _state(store, 7) and others[1]["resume_state"] == _state(store, 19)
    journal = lastgood("journal", store, "--format", "json")
    assert journal["chain_ok"] and [a["action"] for a in journal["actions"]] == ["restore", "undo"]


def test_a_paused_flow_restored_resumes_from_the_target_both_ways_and_undo_brings_the_pause_back(
        tmp_path: Path, readback: Callable[..., Any], lastgood: Callable[..., Any]) -> None:
    store = _copy(tmp_path)
    paused = _resume(readback, store, PAUSED)
    assert paused["pending_feedback"]["context"]["message"] == "Large order: approve shipping?"

    restored = _act(lastgood, "restore", store, "17")
    after = _resume(readback, store, PAUSED)
    assert after["resume_state"] == _state(store, 17)
    assert after["pending_feedback"] is None, "from_pending must not resume from the old pause"

    _act(lastgood, "undo", store, restored["action_id"])
    back = _resume(readback, store, PAUSED)
    assert back["resume_state"] == paused["resume_state"]
    assert back["pending_feedback"]["state"] == paused["pending_feedback"]["state"]
    assert back["pending_feedback"]["context"] == paused["pending_feedback"]["context"]


def test_rollback_resumes_from_the_target_and_supersedes_what_came_after(
        tmp_path: Path, readback: Callable[..., Any], lastgood: Callable[..., Any]) -> None:
    store = _copy(tmp_path)
    rolled = _act(lastgood, "rollback", store, RESUMED, "--to", "11")
    assert set(rolled["superseded"]) == {"12", "13", "14"}
    assert _resume(readback, store, RESUMED)["resume_state"] == _state(store, 11)
    listed = {r["checkpoint_id"]: r["status"] for r in lastgood("ls", store, "--run", RESUMED, "--format", "json")}
    assert listed["12"] == listed["13"] == listed["14"] == "superseded"
    assert listed[rolled["new_head"]] == "ok"
