"""pydantic-graph round trip: ``lastgood restore/rollback/undo`` on a copy of ``sample_data/pydantic_graph``,
then pydantic-graph 1.107's own ``FileStatePersistence`` (``readback.py`` in the pydantic_graph virtualenv:
``load_all`` with the graph's types, and ``iter_from_persistence`` entered — its ``load_next``) says what the
run resumes from.

    .venv/bin/python -m pytest sample_data/generators/pydantic_graph/test_roundtrip.py
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[3]
STORE = ROOT / "sample_data" / "pydantic_graph"
ENDED = "run_9b04d3e6"  # completed through the Review -> DraftReply loop
PAUSED = "run_64af0c25"  # Review left `created`: resumable
FAILED = "run_2f8a61c0"  # LookupAccount `error`


def _copy(tmp_path: Path) -> str:
    folder = tmp_path / "pydantic_graph"
    shutil.copytree(STORE, folder)
    return str(folder)


def _snapshots(store: str, run: str) -> list[dict[str, Any]]:
    return json.loads((Path(store) / f"{run}.json").read_text())


def _resume(readback: Callable[..., Any], store: str, run: str) -> dict[str, Any]:
    return readback("pydantic_graph", store, run)["runs"][0]


def _act(lastgood: Callable[..., Any], *args: str) -> dict[str, Any]:
    done = lastgood(*args, "--yes", "--reason", "round trip", "--format", "json")
    assert done["check"] is None or done["check"]["ok"], done
    return done


def _expect_resume_at(found: dict[str, Any], snapshot_id: str, target: dict[str, Any]) -> None:
    assert found["resume_error"] is None and found["resume"] is not None, found  # (status: "error" wins)
    resume = found["resume"]
    assert resume["snapshot_id"] == snapshot_id
    assert resume["node_id"] == target["node"]["node_id"]
    assert resume["node"] == target["node"] and resume["state"] == target["state"]


def test_restore_of_an_ended_run_resumes_at_the_target_and_undo_gives_the_file_back(
        tmp_path: Path, readback: Callable[..., Any], lastgood: Callable[..., Any]) -> None:
    store = _copy(tmp_path)
    original = (Path(store) / f"{ENDED}.json").read_bytes()
    before = _resume(readback, store, ENDED)
    assert before["status"] == "ended" and before["resume"] is None
    target = _snapshots(store, ENDED)[2]  # the first DraftReply, before the loop
    restored = _act(lastgood, "restore", store, target["id"])
    after = _resume(readback, store, ENDED)
    _expect_resume_at(after, restored["new_head"], target)
    assert after["snapshot_count"] == 8 and [s["id"] for s in after["snapshots"][:7]] == \
        [s["id"] for s in json.loads(original)]

    undone = _act(lastgood, "undo", store, restored["action_id"])
    assert undone["new_head"] == restored["previous_head"]
    assert (Path(store) / f"{ENDED}.json").read_bytes() == original, "undo restores the file byte for byte"
    back = _resume(readback, store, ENDED)
    assert back["status"] == "ended" and back["resume"] is None and back["resume_error"]
    archived = sorted((Path(store) / ".lastgood" / "archive" / f"{ENDED}.json").iterdir())
    assert len(archived) == 2 and original in {p.read_bytes() for p in archived}


def test_a_paused_run_restored_earlier_resumes_there_not_at_its_old_created_snapshot(
        tmp_path: Path, readback: Callable[..., Any], lastgood: Callable[..., Any]) -> None:
    store = _copy(tmp_path)
    snapshots = _snapshots(store, PAUSED)
    assert _resume(readback, store, PAUSED)["resume"]["snapshot_id"] == snapshots[3]["id"]
    restored = _act(lastgood, "restore", store, snapshots[1]["id"])  # LookupAccount
    found = _resume(readback, store, PAUSED)
    _expect_resume_at(found, restored["new_head"], snapshots[1])
    statuses = [s["status"] for s in found["snapshots"] if s["kind"] == "node"]
    assert statuses == ["success", "success", "success", "pending", "created"]  # the old resume point: superseded


def test_a_failed_run_restored_before_its_failure_runs_again_from_there(
        tmp_path: Path, readback: Callable[..., Any], lastgood: Callable[..., Any]) -> None:
    store = _copy(tmp_path)
    first, failed = _snapshots(store, FAILED)
    assert failed["status"] == "error"  # the run's head: it cannot be resumed, nor "restored" to itself
    assert _resume(readback, store, FAILED)["resume"] is None
    restored = _act(lastgood, "restore", store, first["id"])
    _expect_resume_at(_resume(readback, store, FAILED), restored["new_head"], first)


def test_rollback_supersedes_what_came_after_and_an_end_snapshot_is_refused(
        tmp_path: Path, readback: Callable[..., Any], lastgood: Callable[..., Any]) -> None:
    store = _copy(tmp_path)
    snapshots = _snapshots(store, ENDED)
    rolled = _act(lastgood, "rollback", store, ENDED, "--to", snapshots[3]["id"])
    assert set(rolled["superseded"]) == {s["id"] for s in snapshots[4:]}
    _expect_resume_at(_resume(readback, store, ENDED), rolled["new_head"], snapshots[3])
    listed = {r["checkpoint_id"]: r["status"] for r in lastgood("ls", store, "--run", ENDED, "--format", "json")}
    assert all(listed[s["id"]] == "superseded" for s in snapshots[4:]) and listed[rolled["new_head"]] == "ok"

    written = (Path(store) / f"{ENDED}.json").read_bytes()
    refused = lastgood("restore", store, snapshots[-1]["id"], "--yes", "--reason", "rt", "--force", check=False)
    assert refused.returncode == 2 and "end snapshot" in refused.stderr, refused.stderr
    assert (Path(store) / f"{ENDED}.json").read_bytes() == written, "a refused restore writes nothing"
