"""The CrewAI Flows reader on ``sample_data/crewai_flows.db`` (written by CrewAI 1.15's own
``SQLiteFlowPersistence``; see ``sample_data/generators/crewai/README.md``): the conformance kit, the
events the issue asks for, the findings of damaged rows, recovery read back, and the CLI."""

from __future__ import annotations

import json
import shutil
import sqlite3
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest

from lastgood.checks import Check
from lastgood.errors import ConflictError
from lastgood.readers import journal as jr
from lastgood.readers.base import CheckpointRecord, as_table
from lastgood.readers.registry import open_reader
from lastgood.readers.testing import Damage, ReaderConformance
from tests.helpers import ROOT, lastgood_cli

SAMPLE = ROOT / "sample_data" / "crewai_flows.db"
SECRET = "sk-proj-Qm4Tz8cVw1Lr6Ny0Bh3Kd7Xs9Fa2Pj5U"
COMPLETED = "5720b304-8763-40ac-b351-45b483d0efc7"
FAILED = "c7ea4734-e207-4b12-9cd6-9020f9784d5a"
RESUMED = "57c2db87-63ef-4c36-bbd3-f15d0c899e7a"
PAUSED = "0dc2f2e7-9f87-464c-891f-7e20424e811b"
NEW_RUN = "9f1b7c3e-0a2d-4e5f-8b6c-7d8e9f0a1b2c"


def copy_store(tmp: Path) -> str:
    tmp.mkdir(parents=True, exist_ok=True)
    path = tmp / "crewai_flows.db"
    shutil.copy(SAMPLE, path)
    return str(path)


def save_state(url: str, flow_uuid: str, method: str, state: dict[str, Any]) -> None:
    """``SQLiteFlowPersistence._save_state_sql``, as CrewAI 1.15 writes a row."""
    with sqlite3.connect(url) as conn:
        conn.execute("INSERT INTO flow_states (flow_uuid, method_name, timestamp, state_json) VALUES (?, ?, ?, ?)",
                     (flow_uuid, method, datetime.now(timezone.utc).isoformat(), json.dumps(state)))
    conn.close()


def order_state(flow_uuid: str, steps: list[str], **extra: Any) -> dict[str, Any]:
    return {"id": flow_uuid, "order_id": "ORD-2001", "customer": "zoe@example.com",
            "items": [{"sku": "MUG-1", "qty": 2, "unit_price": 9.0}],
            "payment": {"provider": "stripe", "gateway_api_key": SECRET, "charge_id": None, "attempts": 0},
            "total": 18.0, "stage": steps[-1], "shipping": None, "tracking_number": None,
            "steps_done": steps, "log": [f"{s}: ok" for s in steps], "fail_charge": None, **extra}


def sql(url: str, statement: str, *params: Any) -> None:
    with sqlite3.connect(url) as conn:
        conn.execute(statement, params)
    conn.close()


def listing(url: str, since: str | None = None) -> tuple[list[dict[str, Any]], list[dict[str, Any]], Any]:
    with open_reader(url, "crewai-flows") as reader:
        scan = reader.scan(since)
        rows = [r for b in scan.checkpoints for r in as_table(b).to_pylist()]
        events = [e for t in scan.events for e in t.to_pylist()]
    return rows, events, scan


# ---- the kit ----------------------------------------------------------------------------


def _truncate(url: str) -> None:
    sql(url, "UPDATE flow_states SET state_json = substr(state_json, 1, 100) WHERE id = 3")


def _broken_inside(url: str) -> None:  # starts and ends as CrewAI writes: only a full parse sees it
    sql(url, """UPDATE flow_states SET state_json = replace(state_json, '"stage": ', '"stage" ') WHERE id = 12""")


def _not_an_object(url: str) -> None:
    sql(url, "UPDATE flow_states SET state_json = '[1, 2, 3]' WHERE id = 16")


def _other_id(url: str) -> None:
    sql(url, "UPDATE flow_states SET state_json = replace(state_json, ?, ?) WHERE id = 4",
        COMPLETED, FAILED)


def _clock_back(url: str) -> None:
    sql(url, "UPDATE flow_states SET timestamp = '2026-11-03T12:00:00+00:00' WHERE id = 13")


def _bad_pending(url: str) -> None:
    sql(url, "UPDATE pending_feedback SET context_json = '{not json'")


class TestCrewAIKit(ReaderConformance):
    reader_name = "crewai-flows"
    secret = SECRET

    def make_store(self, tmp: Path) -> str:
        return copy_store(tmp)

    def append(self, url: str) -> int:
        """A new kickoff of the flow: three methods completed, as CrewAI saves them."""
        steps: list[str] = []
        for method in ("receive_order", "validate_order", "charge_payment"):
            steps.append(method)
            save_state(url, NEW_RUN, method, order_state(NEW_RUN, steps))
        return 3

    def damages(self) -> list[Damage]:
        return [
            Damage("a truncated state_json", _truncate, {Check.UNDECODABLE}, "none"),
            Damage("state_json broken inside", _broken_inside, {Check.UNDECODABLE}, "structure"),
            Damage("state_json that is not an object", _not_an_object, {Check.UNDECODABLE}, "none"),
            Damage("a state whose id is another flow's", _other_id, {Check.ID_MISMATCH}, "none"),
            Damage("timestamps out of order", _clock_back, {Check.OUT_OF_ORDER}, "none"),
            Damage("a pending_feedback context that is not JSON", _bad_pending, {Check.ROW_INVALID}, "none"),
        ]


# ---- what is listed ---------------------------------------------------------------------


def test_runs_checkpoints_steps_and_heads_follow_crewais_row_order(tmp_path: Path) -> None:
    url = copy_store(tmp_path)
    rows, _events, scan = listing(url)
    by_run: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        by_run.setdefault(row["run_id"], []).append(row)
    assert {k: [r["checkpoint_id"] for r in v] for k, v in by_run.items()} == {
        COMPLETED: ["1", "2", "3", "4", "5"], FAILED: ["6", "7"],
        RESUMED: [str(i) for i in range(8, 15)], PAUSED: ["15", "16", "17", "18", "19"]}
    resumed = by_run[RESUMED]
    assert [r["step"] for r in resumed] == list(range(7))
    assert [r["parent_id"] for r in resumed] == [None, *[str(i) for i in range(8, 14)]]
    assert {r["trigger"] for r in rows} == {"method"} and {r["codec"] for r in rows} == {"json"}
    metadata = [json.loads(r["metadata"]) for r in resumed]
    assert [m["method"] for m in metadata][:4] == ["receive_order", "validate_order"] * 2
    assert metadata[2].get("restart") is True and "restart" not in metadata[0]
    assert str(resumed[0]["created_at"]) == "2026-11-03 13:31:12.001096+00:00"
    assert {(h.run_id, h.checkpoint_id) for h in scan.heads} == {
        (COMPLETED, "5"), (FAILED, "7"), (RESUMED, "14"), (PAUSED, "19")}
    assert scan.findings == []


def test_events_name_the_pause_the_runs_that_stopped_early_and_the_second_kickoff(tmp_path: Path) -> None:
    _rows, events, _scan = listing(copy_store(tmp_path))
    found = {(e["run_id"], e["checkpoint_id"], e["kind"]) for e in events}
    assert found == {(FAILED, "7", "ended_early"), (RESUMED, "9", "ended_early"), (RESUMED, "10", "restart"),
                     (PAUSED, "19", "interrupt")}
    message = {e["checkpoint_id"]: e["message"] for e in events}
    assert message["19"] == "waiting for human feedback at manager_review: Large order: approve shipping?"
    assert "stopped after validate_order" in message["7"] and "ship_order" in message["7"]
    assert all(e["created_at"] is not None for e in events)


def test_state_is_the_rows_state_json_and_redaction_hides_the_key_also_inside_json_strings(tmp_path: Path) -> None:
    from lastgood.redact import redact

    url = copy_store(tmp_path)
    tool_output = json.dumps({"charge": {"api_key": "sk-live-4eC39HqLyjWDarjtT1zdp7dc", "ok": True}})
    save_state(url, NEW_RUN, "receive_order", order_state(
        NEW_RUN, ["receive_order"], tool_output=tool_output, note="retry with sk-proj-Zx9Yw8Vu7Ts6Rq5Po4Nm3Lk2"))
    with open_reader(url) as reader:
        state = reader.load_state(CheckpointRecord(run_id=PAUSED, checkpoint_id="19"))
        raw = sqlite3.connect(url).execute("SELECT state_json FROM flow_states WHERE id = 19").fetchone()[0]
        assert state == json.loads(raw) and reader.read_blob(CheckpointRecord(run_id=PAUSED, checkpoint_id="19")) \
            == raw.encode()
        added = reader.load_state(CheckpointRecord(run_id=NEW_RUN, checkpoint_id="20"))
    shown = json.dumps(redact([state, added]))
    for secret in (SECRET, "sk-live-4eC39HqLyjWDarjtT1zdp7dc", "sk-proj-Zx9Yw8Vu7Ts6Rq5Po4Nm3Lk2"):
        assert secret not in shown


def test_the_sniff_goes_by_the_schema_not_the_file_name(tmp_path: Path) -> None:
    from lastgood.readers.registry import pick_reader

    renamed = tmp_path / "whatever.sqlite3"
    shutil.copy(SAMPLE, renamed)
    assert pick_reader(str(renamed)) == "crewai-flows"
    other = tmp_path / "flow_states.db"
    sqlite3.connect(other).execute("CREATE TABLE flow_states (id INTEGER PRIMARY KEY, name TEXT)").connection.close()
    from lastgood.readers.crewai.reader import CrewAIFlowsReader

    assert not CrewAIFlowsReader.sniff(str(other))


def test_damaged_rows_are_findings_and_the_rest_still_loads(tmp_path: Path) -> None:
    url = copy_store(tmp_path)
    for damage in (_truncate, _not_an_object, _other_id, _clock_back):
        damage(url)
    rows, _events, scan = listing(url)
    status = {r["checkpoint_id"]: r["status"] for r in rows}
    assert (status["3"], status["16"], status["4"]) == ("corrupt", "corrupt", "corrupt")
    assert [c for c, s in status.items() if s != "ok"] == ["3", "4", "16"]
    checks = {(f.checkpoint_id, f.check) for f in scan.findings}
    assert checks == {("3", Check.UNDECODABLE), ("16", Check.UNDECODABLE), ("4", Check.ID_MISMATCH),
                      ("13", Check.OUT_OF_ORDER)}
    with open_reader(url) as reader:
        assert reader.load_state(CheckpointRecord(run_id=COMPLETED, checkpoint_id="5"))["stage"] == "shipped"
        found = list(reader.check_checkpoints([CheckpointRecord(run_id=COMPLETED, checkpoint_id=c) for c in "345"],
                                              read_data=True))
    assert {(f.checkpoint_id, f.check) for f in found} == {("3", Check.UNDECODABLE), ("4", Check.ID_MISMATCH)}


def test_nan_in_a_state_is_json_as_crewai_reads_it_not_damage(tmp_path: Path) -> None:
    url = copy_store(tmp_path)
    state = order_state(NEW_RUN, ["receive_order"])
    state = {"total": float("nan"), **{k: v for k, v in state.items() if k != "total"}}  # id not first
    save_state(url, NEW_RUN, "receive_order", state)
    rows, _events, scan = listing(url)
    assert [r["status"] for r in rows if r["run_id"] == NEW_RUN] == ["ok"] and scan.findings == []


# ---- refreshes ----------------------------------------------------------------------------


def test_a_run_listed_as_ended_early_that_goes_on_is_listed_again(tmp_path: Path) -> None:
    url = copy_store(tmp_path)
    _rows, events, first = listing(url)
    assert (FAILED, "7", "ended_early") in {(e["run_id"], e["checkpoint_id"], e["kind"]) for e in events}
    save_state(url, FAILED, "charge_payment", order_state(FAILED, ["receive_order", "validate_order", "charge_payment"]))
    rows, events, again = listing(url, first.token)
    assert again.full, "the ended_early event of row 7 must go: the whole store is listed again"
    assert not [e for e in events if e["checkpoint_id"] == "7"]
    assert {e["checkpoint_id"] for e in events if e["kind"] == "ended_early"} == {"9", "20"}


def test_a_second_kickoff_after_a_failure_is_incremental_and_keeps_the_event(tmp_path: Path) -> None:
    url = copy_store(tmp_path)
    _rows, before, first = listing(url)
    save_state(url, FAILED, "receive_order", order_state(FAILED, ["receive_order", "validate_order"]))
    rows, events, again = listing(url, first.token)
    assert not again.full and [r["checkpoint_id"] for r in rows] == ["20"]
    assert rows[0]["step"] == 2 and rows[0]["parent_id"] == "7"
    assert {(e["checkpoint_id"], e["kind"]) for e in events} == {
        ("7", "ended_early"), ("20", "restart"), ("20", "ended_early")}
    assert [e for e in events if e["checkpoint_id"] == "7"] == [e for e in before if e["checkpoint_id"] == "7"]
    assert listing(url, again.token)[2].token == again.token


# ---- recovery -------------------------------------------------------------------------------


def _change(url: str, run: str, target: str | None, action: str = "restore", expected: str | None = "same",
            **entry: Any) -> jr.Change:
    from lastgood.readers.crewai.recovery import CrewAIRecovery

    head = CrewAIRecovery(url).head(run) if expected == "same" else expected
    body = {"id": jr.new_action_id(), "time": jr.now_iso(), "operator": "test", "action": action,
            "reason": "test", "run_id": run, "namespace": "", "target": target, "previous_head": head,
            "marks": jr.empty_marks(), "note": {"restored_from": target}, **entry}
    return jr.Change(run, "", head, target if action != "quarantine" else None, body)


def test_restore_appends_a_row_with_the_targets_state_json_and_journals_in_the_same_database(tmp_path: Path) -> None:
    from lastgood.readers.crewai.recovery import CrewAIRecovery

    url = copy_store(tmp_path)
    backend = CrewAIRecovery(url)
    sealed = backend.commit(_change(url, RESUMED, "11"))
    assert sealed["new_head"] == "20" == backend.head(RESUMED) and sealed["previous_head"] == "14"
    with sqlite3.connect(url) as conn:
        new = conn.execute("SELECT flow_uuid, method_name, timestamp, state_json FROM flow_states WHERE id = 20").fetchone()
        source = conn.execute("SELECT state_json FROM flow_states WHERE id = 11").fetchone()[0]
        assert conn.execute("SELECT count(*) FROM flow_states").fetchone()[0] == 20
    assert new[0] == RESUMED and new[1] == "lastgood:restore" and new[3] == source
    assert datetime.fromisoformat(new[2]).tzinfo is not None
    check = backend.check_head(RESUMED, "", "11", json.loads(source))
    assert check.ok, check.message
    rows, events, _ = listing(url)
    added = next(r for r in rows if r["checkpoint_id"] == "20")
    assert added["trigger"] == "restore" and added["step"] == 7
    assert json.loads(added["metadata"])["lastgood"]["restored_from"] == "11"
    assert ("20", "rewind") in {(e["checkpoint_id"], e["kind"]) for e in events}
    assert jr.verify_chain(backend.journal_entries()).ok


def test_a_moved_head_is_a_conflict_and_nothing_is_written(tmp_path: Path) -> None:
    from lastgood.readers.crewai.recovery import CrewAIRecovery

    url = copy_store(tmp_path)
    before = Path(url).read_bytes()
    with pytest.raises(ConflictError):
        CrewAIRecovery(url).commit(_change(url, RESUMED, "11", expected="13"))
    with sqlite3.connect(url) as conn:
        assert conn.execute("SELECT count(*) FROM flow_states").fetchone()[0] == 19
        assert conn.execute("SELECT name FROM sqlite_master WHERE name = 'lastgood_journal'").fetchone() is None
    assert Path(url).read_bytes() == before


def test_restoring_a_paused_flow_archives_its_pending_feedback_and_the_undo_brings_it_back(tmp_path: Path) -> None:
    from lastgood.readers.crewai.recovery import CrewAIRecovery

    url = copy_store(tmp_path)
    backend = CrewAIRecovery(url)
    pending = sqlite3.connect(url).execute("SELECT * FROM pending_feedback").fetchall()
    restored = backend.commit(_change(url, PAUSED, "17"))
    assert sqlite3.connect(url).execute("SELECT count(*) FROM pending_feedback").fetchone()[0] == 0
    assert restored["note"]["pending_feedback"] == "archived (row 1)"
    _rows, events, _ = listing(url)
    assert "interrupt" not in {e["kind"] for e in events}
    undo = backend.commit(_change(url, PAUSED, "19", action="undo", undo_of=restored["id"]))
    assert sqlite3.connect(url).execute("SELECT * FROM pending_feedback").fetchall() == pending
    assert undo["new_head"] == "21" and backend.check_head(PAUSED, "", "19", None).ok
    _rows, events, _ = listing(url)
    assert ("19", "interrupt") in {(e["checkpoint_id"], e["kind"]) for e in events}


def test_reading_never_creates_the_journal_or_wal_files(tmp_path: Path) -> None:
    from lastgood.readers.crewai.recovery import CrewAIRecovery

    url = copy_store(tmp_path)
    listing(url)
    assert CrewAIRecovery(url).journal_entries() == [] and CrewAIRecovery(url).head(PAUSED) == "19"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["crewai_flows.db"]


# ---- the CLI --------------------------------------------------------------------------------


def test_cli_ls_show_verify_as_json(tmp_path: Path) -> None:
    url = copy_store(tmp_path / "store")
    home = tmp_path / "home"
    listed = json.loads(lastgood_cli("ls", url, "--run", PAUSED, "--format", "json", home=home).stdout)
    assert [r["checkpoint_id"] for r in listed] == ["15", "16", "17", "18", "19"]
    shown = lastgood_cli("show", url, "19", "--format", "json", home=home)
    assert shown.returncode == 0 and SECRET not in shown.stdout
    data = json.loads(shown.stdout)
    assert data["state"]["payment"]["gateway_api_key"] == "[redacted]"
    assert data["checkpoint"]["metadata"] == {"method": "manager_review", "pending_feedback": True}
    assert "interrupt" in {e["kind"] for e in data["events"]}
    _bad_pending(url)
    _truncate(url)
    done = lastgood_cli("verify", url, "--format", "json", home=home)
    report = json.loads(done.stdout)
    assert done.returncode == 1
    assert {(f["checkpoint_id"], f["check"]) for f in report["findings"] if f["severity"] == "error"} >= {
        ("3", "undecodable")}
