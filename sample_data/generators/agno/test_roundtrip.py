"""Agno round trip: ``lastgood restore/rollback/undo`` on a copy of ``agno.sqlite``, then Agno's own API
(``readback.py`` in the agno virtualenv: ``Agent.get_session``, ``get_session_state``,
``get_session_messages`` — the history the next run replays —, ``get_last_run_output``, the PAUSED
runs ``continue_run`` would resume) says what the next run of the session starts from.

    .venv/bin/python -m pytest sample_data/generators/agno/test_roundtrip.py
"""

from __future__ import annotations

import json
import shutil
import sqlite3
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[3]
STORE = ROOT / "sample_data" / "agno.sqlite"


def _copy(tmp_path: Path) -> str:
    path = tmp_path / "agno.sqlite"
    shutil.copy(STORE, path)
    return str(path)


def _runs(store: str, session: str) -> list[tuple[str, int, dict[str, Any]]]:
    with sqlite3.connect(f"file:{store}?mode=ro", uri=True) as conn:
        rows = conn.execute("SELECT run_id, run_index, run_data FROM agno_runs WHERE session_id = ? "
                            "ORDER BY run_index", (session,)).fetchall()
    return [(run_id, index, json.loads(data)) for run_id, index, data in rows]


def _history(runs: list[tuple[str, int, dict[str, Any]]]) -> list[str]:
    """Message ids of the runs Agno replays (the last 3 not skipped), system messages left out."""
    kept = [data for _id, _i, data in runs if data["status"] not in ("PAUSED", "CANCELLED", "ERROR", "REGENERATED")]
    return [m["id"] for data in kept[-3:] for m in data["messages"] if m["role"] != "system"
            and not m.get("from_history")]


def _act(lastgood: Callable[..., Any], *args: str) -> dict[str, Any]:
    done = lastgood(*args, "--yes", "--reason", "round trip", "--format", "json")
    assert "action_id" in done, done
    assert done["check"] is None or done["check"]["ok"], done
    return done


def test_restore_then_undo_moves_what_agno_resumes_from(tmp_path: Path, readback: Callable[..., Any],
                                                        lastgood: Callable[..., Any]) -> None:
    store = _copy(tmp_path)
    before = readback("agno", store, "cart-001")
    runs = _runs(store, "cart-001")
    target_id, _index, target = runs[2]

    restored = _act(lastgood, "restore", store, target_id)
    assert restored["new_head"] == target_id
    after = readback("agno", store, "cart-001")
    assert after["session_state"] == target["session_state"], "the next run starts from run 2's state"
    assert [r["run_id"] for r in after["runs"]] == [r[0] for r in runs[:3]]
    assert after["last_run_id"] == target_id
    assert [m["id"] for m in after["history"]] == _history(runs[:3]), "its history is runs 0-2"
    assert after["session"]["session_data"]["session_metrics"] == before["session"]["session_data"]["session_metrics"]

    _act(lastgood, "undo", store, restored["action_id"])
    assert readback("agno", store, "cart-001") == before, "undo gives Agno the session back as it was"


def test_rollback_drops_a_paused_run_and_undo_brings_it_back(tmp_path: Path, readback: Callable[..., Any],
                                                             lastgood: Callable[..., Any]) -> None:
    store = _copy(tmp_path)
    before = readback("agno", store, "cart-002")
    assert before["paused_run_ids"]
    runs = _runs(store, "cart-002")
    rolled = _act(lastgood, "rollback", store, "cart-002", "--to", runs[0][0])
    assert len(rolled["superseded"]) == 2
    after = readback("agno", store, "cart-002")
    assert after["paused_run_ids"] == [] and after["last_run_id"] == runs[0][0]
    assert after["session_state"] == runs[0][2]["session_state"] == {"cart": {"bread": 1}, "orders": []}
    assert [m["id"] for m in after["history"]] == _history(runs[:1])

    _act(lastgood, "undo", store, rolled["action_id"])
    assert readback("agno", store, "cart-002") == before


# ---- the same on PostgreSQL: a store Agno's PostgresDb wrote itself (generate.py --postgres) ------

sys.path.insert(0, str(ROOT))
from tests.fixtures_pg import pg_create_database, pg_dsn  # noqa: E402,F401 - fixtures


@pytest.mark.postgres
def test_restore_and_undo_on_postgres(pg_create_database: Callable[[str], str], framework_python: Callable[[str], Path],
                                      readback: Callable[..., Any], lastgood: Callable[..., Any]) -> None:
    import psycopg

    dsn = pg_create_database("agno_roundtrip")
    done = subprocess.run([str(framework_python("agno")), str(ROOT / "sample_data/generators/agno/generate.py"),
                           "--postgres", dsn], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    before = readback("agno", dsn, "cart-001")
    with psycopg.connect(dsn) as conn:
        runs = conn.execute("SELECT run_id, run_data FROM ai.agno_runs WHERE session_id = 'cart-001' "
                            "ORDER BY run_index").fetchall()
    restored = _act(lastgood, "restore", dsn, runs[2][0])
    after = readback("agno", dsn, "cart-001")
    assert after["session_state"] == runs[2][1]["session_state"]
    assert after["last_run_id"] == runs[2][0] and len(after["runs"]) == 3
    _act(lastgood, "undo", dsn, restored["action_id"])
    assert readback("agno", dsn, "cart-001") == before
