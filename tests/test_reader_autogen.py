"""The AutoGen AgentChat reader (``autogen``) on the state files AutoGen itself wrote
(``sample_data/autogen``, see ``sample_data/generators/autogen/README.md``): the conformance kit,
then series and lineage, events (tool calls, tool errors, the half turn, the rollback), states,
redaction inside JSON strings, findings, restore semantics read back, the CLI."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import pytest

from lastgood.checks import Check
from lastgood.errors import ConflictError, DecodeError
from lastgood.readers.base import CheckpointRecord, Status, as_table
from lastgood.readers.testing import Damage, ReaderConformance
from tests.helpers import ROOT, lastgood_cli

SAMPLE = ROOT / "sample_data" / "autogen"
FLIGHTS_KEY = "sk-proj-Zr4Tn8Wq2Lk6Hv1Xc9Mb3Jp7Df5Gs0Ay2Ue8Ko4Ri6Nt1Vw"  # search_flights arguments (JSON text)
HOTEL_KEY = "sk-proj-Hb2Q"  # "partner": {"api_key": …} in book_hotel's result (JSON text), state-0004
REFUND_KEY = "sk-proj-Pg7Q"  # "gateway": {"api_key": …} in issue_refund's result, support-agent


def copy_store(tmp: Path) -> str:
    target = tmp / "autogen"
    shutil.copytree(SAMPLE, target)
    return str(target)


def save_as_the_app_does(path: Path, state: dict[str, Any]) -> None:
    """``json.dumps(await team.save_state(), indent=2, ensure_ascii=False)`` + newline, via a temp file."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(state, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    os.replace(tmp, path)


def next_turn(url: str) -> None:
    folder = Path(url) / "trip-team"
    state = json.loads((folder / "state-0005.json").read_text())
    manager = state["agent_states"]["RoundRobinGroupChatManager"]
    manager["message_thread"].append({"id": "7d4c2a1e-0000-4000-8000-000000000006", "source": "user",
                                      "models_usage": None, "metadata": {}, "created_at": "2026-11-03T14:40:00.400000Z",
                                      "content": "Thanks!", "type": "TextMessage"})
    manager["message_thread"].append({"id": "7d4c2a1e-0000-4000-8000-000000000007", "source": "critic",
                                      "models_usage": {"prompt_tokens": 12, "completion_tokens": 3}, "metadata": {},
                                      "created_at": "2026-11-03T14:40:01.200000Z", "content": "APPROVED",
                                      "type": "TextMessage"})
    save_as_the_app_does(folder / "state-0006.json", state)


def listing(url: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]], Any]:
    from lastgood.readers.registry import open_reader

    with open_reader(url) as reader:
        scan = reader.scan()
        checkpoints = [r for b in scan.checkpoints for r in as_table(b).to_pylist()]
        events = [r for t in scan.events for r in t.to_pylist()]
    return checkpoints, events, scan


def open_store(url: str) -> Any:
    from lastgood.readers.registry import open_reader

    return open_reader(url)


def T(n: int, run: str = "trip-team") -> str:
    """The checkpoint id of ``RUN/state-000n.json``."""
    return f"state-{n:04d}~{run}"


def record(url: str, run: str, cid: str) -> CheckpointRecord:
    checkpoints, _events, _scan = listing(url)
    row = next(c for c in checkpoints if (c["run_id"], c["checkpoint_id"]) == (run, cid))
    return CheckpointRecord(run_id=run, checkpoint_id=cid, location=row["location"])


# ---- the conformance kit ------------------------------------------------------------------------


class TestAutoGenKit(ReaderConformance):
    reader_name = "autogen"
    secret = FLIGHTS_KEY

    def make_store(self, tmp: Path) -> str:
        tmp.mkdir(parents=True, exist_ok=True)
        return copy_store(tmp)

    def append(self, url: str) -> int:
        next_turn(url)
        return 1

    def damages(self) -> list[Damage]:
        def truncated(url: str) -> None:
            path = Path(url) / "support-agent" / "state-0002.json"
            path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])

        def not_a_state(url: str) -> None:
            (Path(url) / "trip-team" / "state-0003.json").write_text('{"hello": "world"}\n')

        return [Damage("a truncated state file", truncated, {Check.UNDECODABLE}, "structure"),
                Damage("JSON that is not a state", not_a_state, {Check.ROW_INVALID}, "structure")]


# ---- series, lineage, events ----------------------------------------------------------------------


def test_sniffed_by_shape_not_by_name(tmp_path: Path) -> None:
    from lastgood.readers.autogen.reader import AutoGenReader
    from lastgood.readers.registry import pick_reader

    odd = tmp_path / "saves"
    (odd / "crew").mkdir(parents=True)
    for i, source in enumerate(sorted((SAMPLE / "trip-team").glob("*.json")), 1):
        shutil.copyfile(source, odd / "crew" / f"turn_{i:02d}.json")
    assert pick_reader(str(odd)) == "autogen"
    checkpoints, _events, _scan = listing(str(odd))
    assert [c["checkpoint_id"] for c in checkpoints] == [f"turn_{i:02d}~crew" for i in range(1, 6)]
    assert {c["run_id"] for c in checkpoints} == {"crew"}
    assert not AutoGenReader.sniff(str(ROOT / "sample_data" / "pydantic_graph"))
    assert not AutoGenReader.sniff(str(ROOT / "sample_data" / "openai_agents.sqlite"))


def test_series_lineage_and_heads() -> None:
    checkpoints, _events, scan = listing(str(SAMPLE))
    team = [c for c in checkpoints if c["run_id"] == "trip-team"]
    assert [(c["checkpoint_id"], c["parent_id"], c["step"]) for c in team] == [
        (T(1), None, 0), (T(2), T(1), 1), (T(3), T(2), 2), (T(4), T(2), 3), (T(5), T(4), 4)]  # 4 continues 2
    assert [c["created_at"].isoformat() for c in team][:2] == ["2026-11-03T14:05:02.800000+00:00",
                                                               "2026-11-03T14:10:06.800000+00:00"]
    meta = json.loads(team[2]["metadata"])
    assert meta["half_turn"] is True and meta["next_speaker_index"] == 1 and meta["participants"] == ["planner", "critic"]
    assert json.loads(team[3]["metadata"])["continues"] == T(2)
    assert team[3]["location"] == "trip-team/state-0004.json"
    assert {c["trigger"] for c in team} == {"save_state"} and team[0]["agent"] == "RoundRobinGroupChatManager"
    agent = [c for c in checkpoints if c["run_id"] == "support-agent"]
    assert [json.loads(c["metadata"])["messages"] for c in agent] == [4, 8, 10]
    assert {h.run_id: h.checkpoint_id for h in scan.heads} == {"trip-team": T(5), "support-agent": T(3, "support-agent")}


def test_events_tool_calls_errors_half_turn_and_rollback() -> None:
    _checkpoints, events, _scan = listing(str(SAMPLE))
    team = [(e["checkpoint_id"], e["kind"], e["channel"]) for e in events if e["run_id"] == "trip-team"]
    assert team == [(T(1), "tool_call", "search_flights"), (T(2), "tool_call", "book_hotel"),
                    (T(2), "error", "book_hotel"), (T(3), "ended_early", None),
                    (T(4), "tool_call", "book_hotel"), (T(4), "rewind", None)]
    error = next(e for e in events if e["kind"] == "error")
    assert "No availability at Pestana Palace" in error["message"]
    assert [e["kind"] for e in events if e["run_id"] == "support-agent"] == ["tool_call", "tool_call"]


def test_state_moves_the_conversation_to_messages() -> None:
    url = str(SAMPLE)
    with open_store(url) as reader:
        team = reader.load_state(record(url, "trip-team", T(2)))
        agent = reader.load_state(record(url, "support-agent", T(1, "support-agent")))
    assert [m["type"] for m in team["messages"]][:3] == ["TextMessage", "ToolCallRequestEvent", "ToolCallExecutionEvent"]
    assert team["messages"][1]["content"][0]["arguments"]["origin"] == "LYS"  # JSON arguments parsed
    assert "message_thread" not in team["agent_states"]["RoundRobinGroupChatManager"]
    assert team["agent_states"]["RoundRobinGroupChatManager"]["next_speaker_index"] == 0
    assert len(team["agent_states"]["planner"]["agent_state"]["llm_context"]["messages"]) == 9
    assert team["type"] == "TeamState" and team["version"] == "1.0.0"
    assert [m["type"] for m in agent["messages"]] == ["UserMessage", "AssistantMessage",
                                                      "FunctionExecutionResultMessage", "AssistantMessage"]
    assert agent["llm_context"] == {} and agent["type"] == "AssistantAgentState"


def test_redaction_hides_secrets_in_json_strings() -> None:
    from lastgood.redact import redact

    url = str(SAMPLE)
    with open_store(url) as reader:
        for run, cid, secret in (("trip-team", T(1), FLIGHTS_KEY), ("trip-team", T(4), HOTEL_KEY),
                                 ("support-agent", T(2, "support-agent"), REFUND_KEY)):
            state = reader.load_state(record(url, run, cid))
            raw = reader.read_blob(record(url, run, cid)).decode()
            assert secret in json.dumps(state) and secret in raw
            assert secret not in json.dumps(redact(state)), (run, cid)
            assert secret not in redact(raw), (run, cid)  # the participants' contexts keep JSON text


def test_normalize_message_shapes() -> None:
    from lastgood.readers.autogen.states import normalize_message

    assert normalize_message({"id": "1", "source": "user", "content": "hi", "type": "TextMessage"}) == {
        "role": "user", "content": "hi", "name": "user", "id": "1"}
    assert normalize_message({"source": "critic", "content": "ok", "type": "TextMessage"})["role"] == "assistant"
    call = normalize_message({"source": "planner", "type": "ToolCallRequestEvent",
                              "content": [{"id": "c1", "arguments": "{\"a\": 1}", "name": "f"}]})
    assert call == {"role": "assistant", "content": "", "tool_calls": [{"id": "c1", "name": "f", "args": {"a": 1}}],
                    "name": "planner"}
    result = normalize_message({"type": "FunctionExecutionResultMessage",
                                "content": [{"content": "boom", "name": "f", "call_id": "c1", "is_error": True}]})
    assert result == {"role": "tool", "content": "boom", "tool_call_id": "c1", "name": "f"}
    assert normalize_message({"content": "x", "source": "user", "type": "UserMessage"})["role"] == "user"
    assert normalize_message({"type": "MemoryQueryEvent", "content": []}) is None


def test_damaged_files_are_findings_and_do_not_break_the_lineage(tmp_path: Path) -> None:
    url = copy_store(tmp_path)
    path = Path(url) / "trip-team" / "state-0002.json"
    path.write_bytes(path.read_bytes()[:300])
    checkpoints, _events, _scan = listing(url)
    team = {c["checkpoint_id"]: c for c in checkpoints if c["run_id"] == "trip-team"}
    assert team[T(2)]["parent_id"] == T(1) and team[T(3)]["parent_id"] == T(1)
    with open_store(url) as reader:
        damaged = record(url, "trip-team", T(2))
        (finding,) = reader.check_checkpoints([damaged])
        assert finding.check == Check.UNDECODABLE and "not valid JSON" in finding.message
        with pytest.raises(DecodeError, match="not valid JSON"):
            reader.load_state(damaged)


def test_an_append_is_listed_incrementally(tmp_path: Path) -> None:
    url = copy_store(tmp_path)
    with open_store(url) as reader:
        first = reader.scan()
        list(first.checkpoints)
        next_turn(url)
        again = reader.scan(first.token)
        rows = [r for b in again.checkpoints for r in as_table(b).to_pylist()]
        assert not again.full and {r["run_id"] for r in rows} == {"trip-team"}
        assert rows[-1]["checkpoint_id"] == T(6) and rows[-1]["parent_id"] == T(5)
        assert reader.scan(again.token).checkpoints is not None and not list(reader.scan(again.token).checkpoints)


# ---- recovery -------------------------------------------------------------------------------------


def index(url: str, tmp: Path) -> tuple[Any, Any]:
    from lastgood.index.catalog import Catalog
    from lastgood.stores import index_store

    catalog = Catalog(str(tmp / f"index-{len(list(tmp.glob('index-*')))}.duckdb"))
    return catalog, index_store(catalog, url, check="structure").store


def test_restore_writes_the_target_as_the_newest_file(tmp_path: Path) -> None:
    from lastgood import recovery

    url = copy_store(tmp_path)
    folder = Path(url) / "trip-team"
    catalog, store = index(url, tmp_path)
    restored = recovery.apply_plan(catalog, store, recovery.plan_restore(catalog, store, "trip-team/state-0002"),
                                   reason="the hotel booking went wrong", operator="ana")
    assert restored.check["ok"], restored.check
    assert (restored.previous_head, restored.new_head) == (T(5), T(6))
    assert (folder / "state-0006.json").read_bytes() == (folder / "state-0002.json").read_bytes()
    checkpoints, _events, scan = listing(url)
    new = next(c for c in checkpoints if c["checkpoint_id"] == T(6))
    assert new["trigger"] == "restore" and new["parent_id"] == T(2)
    assert json.loads(new["metadata"])["restored_by"] == restored.action_id
    assert {h.run_id: h.checkpoint_id for h in scan.heads}["trip-team"] == T(6)

    _catalog, store = index(url, tmp_path)
    undone = recovery.apply_plan(catalog, store, recovery.plan_undo(catalog, store, restored.action_id),
                                 reason="undo", operator="ana")
    assert undone.check["ok"] and undone.new_head == T(7)
    assert (folder / "state-0007.json").read_bytes() == (folder / "state-0005.json").read_bytes()
    assert sorted(p.name for p in folder.iterdir()) == [f"state-000{i}.json" for i in range(1, 8)]
    entries = recovery.backend(store).journal_entries()
    assert [e["action"] for e in entries] == ["restore", "undo"] and entries[0]["note"]["file"] == "trip-team/state-0006.json"


def test_rollback_marks_the_later_files_superseded(tmp_path: Path) -> None:
    from lastgood import recovery
    from lastgood.index import queries

    url = copy_store(tmp_path)
    catalog, store = index(url, tmp_path)
    recovery.apply_plan(catalog, store, recovery.plan_rollback(catalog, store, "trip-team", "trip-team/state-0002"),
                        reason="drop the failed turns", operator="ana")
    statuses = {r["checkpoint_id"]: r["status"] for r in queries.list_checkpoints(catalog, store.store_id, "trip-team")}
    assert statuses == {T(1): Status.OK, T(2): Status.OK, T(3): Status.SUPERSEDED, T(4): Status.SUPERSEDED,
                        T(5): Status.SUPERSEDED, T(6): Status.OK}


def test_a_new_save_meanwhile_is_a_conflict(tmp_path: Path) -> None:
    from lastgood import recovery

    url = copy_store(tmp_path)
    catalog, store = index(url, tmp_path)
    plan = recovery.plan_restore(catalog, store, "trip-team/state-0002")
    next_turn(url)  # the app saved state-0006
    with pytest.raises(ConflictError, match="saved meanwhile"):
        recovery.apply_plan(catalog, store, plan, reason="late", operator="ana")
    assert not (Path(url) / ".lastgood" / "journal").exists()
    assert json.loads((Path(url) / "trip-team" / "state-0006.json").read_text())["type"] == "TeamState"


# ---- the CLI --------------------------------------------------------------------------------------


def cli(home: Path, *args: str) -> Any:
    done = lastgood_cli(*args, "--format", "json", home=home)
    assert done.returncode in (0, 1), done.stderr
    return json.loads(done.stdout)


def test_cli_ls_show_verify_diff(tmp_path: Path) -> None:
    url = copy_store(tmp_path)
    home = tmp_path / "home"
    listed = cli(home, "ls", url)
    rows = listed if isinstance(listed, list) else listed.get("checkpoints", listed)
    assert len(rows) == 8
    shown = cli(home, "show", url, "trip-team/state-0004")
    text = json.dumps(shown)
    assert shown["state"]["messages"] and HOTEL_KEY not in text and FLIGHTS_KEY not in text
    assert {e["kind"] for e in shown["events"]} == {"tool_call", "rewind"}
    verified = cli(home, "verify", url)
    assert not [f for f in verified.get("findings", []) if f["severity"] == "error"]
    diff = cli(home, "diff", url, "trip-team/state-0002", "trip-team/state-0004")
    assert HOTEL_KEY not in json.dumps(diff) and FLIGHTS_KEY not in json.dumps(diff)
