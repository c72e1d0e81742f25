"""ADK round trip: ``lastgood restore/rollback/undo`` on a copy of ``adk.sqlite``, then ADK's own
``DatabaseSessionService.get_session`` (``readback.py`` in the adk virtualenv) says what the next
``Runner.run_async`` resumes from: the merged state, and the events that survive rewinds
(``_apply_rewinds``, what the next prompt is built from).

    .venv/bin/python -m pytest sample_data/generators/adk/test_roundtrip.py
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from lastgood.readers.base import CheckpointRecord
from lastgood.readers.registry import open_reader

ROOT = Path(__file__).resolve().parents[3]
STORE = ROOT / "sample_data" / "adk.sqlite"
ORDERS = "af4b8529-69eb-4747-ab31-2859caf2cc06"  # created with channel=web (in no event)
REWIND = "d4745f58-d132-4354-90b2-3f04a77ef005"  # ADK rewound it once already (event 614d20c4)
CANCEL_RESULT = "0ec75344-cd32-494a-9b05-0d278b9167fa"  # cancel_order's result: dropped by ADK's rewind
LOOKUP_ANSWER = "a47a1d74-0cf5-4c9a-a213-cc100a471f5e"  # last event of the lookup invocation
FIRST_ANSWER = "e34551cb-ad3b-422b-8086-adf8513821e8"  # last event of ORDERS' first invocation


def _copy(tmp_path: Path) -> str:
    path = tmp_path / "adk.sqlite"
    shutil.copy(STORE, path)
    return str(path)


def _session(readback: Callable[..., Any], store: str, session: str) -> dict[str, Any]:
    (found,) = readback("adk", store, session)["sessions"]
    return found


def _expected(store: str, session: str, event_id: str) -> dict[str, Any]:
    """Lastgood's own reading of the target (before any action): state and live conversation."""
    with open_reader(store) as reader:
        return reader.load_state(CheckpointRecord(run_id=session, checkpoint_id=event_id))


def _resumes_from(adk: dict[str, Any]) -> dict[str, Any]:
    """What ADK resumes from, in the shape of Lastgood's state: the merged state without the keys
    ADK holds as null (removed), and each live event's conversation fields."""
    state = {k: v for k, v in adk["state"].items() if v is not None}
    by_id = {e["id"]: e for e in adk["events"]}
    messages = []
    for event_id in adk["live_event_ids"]:
        event = by_id[event_id]
        if "content" not in event and "error_code" not in event:
            continue
        message = {"author": event["author"]}
        message.update({k: event[k] for k in ("content", "error_code", "error_message", "branch") if k in event})
        messages.append(message)
    return {"state": state, "messages": messages}


def _act(lastgood: Callable[..., Any], *args: str) -> dict[str, Any]:
    done = lastgood(*args, "--yes", "--reason", "round trip", "--format", "json")
    assert "action_id" in done, done
    assert done["check"] is None or done["check"]["ok"], done
    return done


def test_restore_inside_a_rewound_invocation_and_undo(tmp_path: Path, readback: Callable[..., Any],
                                                      lastgood: Callable[..., Any]) -> None:
    store = _copy(tmp_path)
    before = _session(readback, store, REWIND)
    target = _expected(store, REWIND, CANCEL_RESULT)
    assert target["state"]["cancelled_orders"] == ["2077"]  # the state ADK's own rewind took back

    restored = _act(lastgood, "restore", store, CANCEL_RESULT)
    after = _session(readback, store, REWIND)
    assert _resumes_from(after) == target, "get_session resumes from the target's state and conversation"
    appended = after["events"][before["event_count"]:]
    assert appended[0]["actions"]["rewind_before_invocation_id"] == "e-463b1090-daae-4bfa-851f-2003b236394c"
    assert [e["custom_metadata"]["lastgood"]["copy_of"] for e in appended[1:]] == [
        "84d10547-0c9d-4dad-a143-049c28aad9cd", "438b9b24-2e31-47d6-bd4b-28669a17a816", CANCEL_RESULT]
    assert after["last_event"]["id"] == restored["new_head"]
    assert after["state"]["user:orders_seen"] == before["state"]["user:orders_seen"], "user: keys are not rewound"
    assert after["event_count"] == before["event_count"] + 4, "nothing deleted: one rewind event and 3 copies"

    _act(lastgood, "undo", store, restored["action_id"])
    undone = _session(readback, store, REWIND)
    assert _resumes_from(undone) == _resumes_from(before)
    assert undone["live_event_ids"] == before["live_event_ids"]


def test_restore_at_an_invocation_boundary_is_one_rewind_event(tmp_path: Path, readback: Callable[..., Any],
                                                               lastgood: Callable[..., Any]) -> None:
    store = _copy(tmp_path)
    before = _session(readback, store, REWIND)
    target = _expected(store, REWIND, LOOKUP_ANSWER)
    _act(lastgood, "restore", store, LOOKUP_ANSWER)
    after = _session(readback, store, REWIND)
    assert after["event_count"] == before["event_count"] + 1
    assert after["rewinds"][-1]["rewind_before_invocation_id"] == "e-463b1090-daae-4bfa-851f-2003b236394c"
    assert _resumes_from(after) == target
    assert after["live_event_ids"][-1] == LOOKUP_ANSWER


def test_rollback_keeps_the_keys_the_session_was_created_with(tmp_path: Path, readback: Callable[..., Any],
                                                               lastgood: Callable[..., Any]) -> None:
    store = _copy(tmp_path)
    target = _expected(store, ORDERS, FIRST_ANSWER)
    rolled = _act(lastgood, "rollback", store, ORDERS, "--to", FIRST_ANSWER)
    assert len(rolled["superseded"]) == 8
    after = _session(readback, store, ORDERS)
    assert _resumes_from(after) == target
    # rewind_async would set it to null (its replay sees no event writing it); Lastgood keeps it
    assert after["state"]["channel"] == "web"
    assert after["state"]["refund_attempts"] is None and after["state"]["last_order"]["order_id"] == "1042"


# ---- the same on PostgreSQL: a store ADK itself wrote there (generate.py --postgres) ------------

sys.path.insert(0, str(ROOT))
from tests.fixtures_pg import pg_create_database, pg_dsn  # noqa: E402,F401 - fixtures


@pytest.mark.postgres
def test_restore_and_undo_on_postgres(pg_create_database: Callable[[str], str], framework_python: Callable[[str], Path],
                                      readback: Callable[..., Any], lastgood: Callable[..., Any]) -> None:
    dsn = pg_create_database("adk_roundtrip")
    done = subprocess.run([str(framework_python("adk")), str(ROOT / "sample_data/generators/adk/generate.py"),
                           "--postgres", dsn], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    before = _session(readback, dsn, REWIND)
    target = _expected(dsn, REWIND, CANCEL_RESULT)

    restored = _act(lastgood, "restore", dsn, CANCEL_RESULT)
    assert restored["check"]["ok"]
    after = _session(readback, dsn, REWIND)
    assert _resumes_from(after) == target
    assert after["last_event"]["id"] == restored["new_head"]

    _act(lastgood, "undo", dsn, restored["action_id"])
    undone = _session(readback, dsn, REWIND)
    assert _resumes_from(undone) == _resumes_from(before)
    assert undone["live_event_ids"] == before["live_event_ids"]
