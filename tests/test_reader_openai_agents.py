"""The OpenAI Agents SDK reader (``openai-agents``) on the stores the SDK itself wrote
(``sample_data/openai_agents*.sqlite``, see ``sample_data/generators/openai_agents/README.md``):
the conformance kit on a plain and an advanced store, then what the issue asks — listing, events,
states, redaction inside JSON strings, findings, restore/undo semantics read back, the CLI."""

from __future__ import annotations

import json
import shutil
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from lastgood.checks import Check
from lastgood.errors import ConflictError, DecodeError
from lastgood.readers.base import CheckpointRecord, Status, as_table
from lastgood.readers.testing import Damage, ReaderConformance
from tests.helpers import ROOT, lastgood_cli

PLAIN = ROOT / "sample_data" / "openai_agents.sqlite"
ADVANCED = ROOT / "sample_data" / "openai_agents_advanced.sqlite"
SUPPORT_KEY = "sk-proj-Fx3kQ9mZ2vT7LwN4bR8cY1dH6jP0sA5eG2uK9oM3qV7xB4nC"  # user text + rotate_api_key args
BROKER_KEY = "sk-proj-Bk9Lm2Qw7Xe4Rt1Yu8Io5Pa3Sd6Fg0Hj2Kl4Zx7Cv9Bn1Mq"  # "api_key" in connect_broker's output


def copy_store(source: Path, tmp: Path) -> str:
    tmp.mkdir(parents=True, exist_ok=True)
    path = tmp / source.name
    shutil.copyfile(source, path)
    return str(path)


def sql(url: str, statement: str, params: tuple[Any, ...] = ()) -> None:
    with sqlite3.connect(url) as conn:
        conn.execute(statement, params)
    conn.close()


def rows(url: str, statement: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    conn = sqlite3.connect(f"file:{url}?mode=ro", uri=True)
    try:
        return conn.execute(statement, params).fetchall()
    finally:
        conn.close()


def add_items(url: str, session: str, items: list[dict[str, Any]], advanced: bool = False) -> None:
    """``SQLiteSession.add_items`` / ``AdvancedSQLiteSession.add_items`` as the SDK writes them."""
    with sqlite3.connect(url) as conn:
        conn.execute("INSERT OR IGNORE INTO agent_sessions (session_id) VALUES (?)", (session,))
        ids = [conn.execute("INSERT INTO agent_messages (session_id, message_data) VALUES (?, ?)",
                            (session, json.dumps(item))).lastrowid for item in items]
        conn.execute("UPDATE agent_sessions SET updated_at = CURRENT_TIMESTAMP WHERE session_id = ?", (session,))
        if advanced:
            seq = conn.execute("SELECT COALESCE(MAX(sequence_number), 0) FROM message_structure WHERE session_id = ?",
                               (session,)).fetchone()[0]
            turn = conn.execute("SELECT COALESCE(MAX(user_turn_number), 0) FROM message_structure "
                                "WHERE session_id = ? AND branch_id = 'main'", (session,)).fetchone()[0]
            for i, (item, mid) in enumerate(zip(items, ids)):
                turn += item.get("role") == "user"
                kind = item.get("role") if item.get("role") in ("user", "assistant") else item.get("type")
                conn.execute("""INSERT INTO message_structure (session_id, message_id, branch_id, message_type,
                    sequence_number, user_turn_number, branch_turn_number, tool_name)
                    VALUES (?, ?, 'main', ?, ?, ?, ?, ?)""",
                             (session, mid, kind, seq + i + 1, turn, turn, item.get("name")))
            conn.execute("""INSERT OR REPLACE INTO turn_usage (session_id, branch_id, user_turn_number, requests,
                input_tokens, output_tokens, total_tokens, input_tokens_details, output_tokens_details)
                VALUES (?, 'main', ?, 2, 100, 20, 120, '{"cached_tokens": 0}', '{"reasoning_tokens": 0}')""",
                         (session, turn))
    conn.close()


A_TURN = [
    {"content": "One more status check.", "role": "user"},
    {"arguments": "{\"name\":\"billing\"}", "call_id": "call_kit_1", "name": "service_status",
     "type": "function_call", "id": "fc_kit_1", "status": "completed"},
    {"call_id": "call_kit_1", "output": "{\"service\": \"billing\", \"state\": \"ok\"}",
     "type": "function_call_output"},
    {"id": "msg_kit_1", "content": [{"annotations": [], "text": "Billing is ok.", "type": "output_text",
                                     "logprobs": []}], "role": "assistant", "status": "completed", "type": "message"},
]


# ---- the conformance kit ------------------------------------------------------------------------


class TestOpenAIAgentsPlainKit(ReaderConformance):
    reader_name = "openai-agents"
    secret = BROKER_KEY

    def make_store(self, tmp: Path) -> str:
        return copy_store(PLAIN, tmp)

    def append(self, url: str) -> int:
        add_items(url, "ops-91d2", A_TURN)
        return len(A_TURN)

    def damages(self) -> list[Damage]:
        return [
            Damage("a truncated item", lambda url: sql(url, "UPDATE agent_messages SET message_data = "
                                                            "substr(message_data, 1, 20) WHERE id = 27"),
                   {Check.UNDECODABLE}, "structure"),
            Damage("an item that is not an object", lambda url: sql(
                url, "UPDATE agent_messages SET message_data = '[1, 2]' WHERE id = 28"), {Check.ROW_INVALID}, "structure"),
            Damage("a session row deleted", lambda url: sql(url, "DELETE FROM agent_sessions WHERE session_id = 'ops-91d2'"),
                   {Check.SESSION_MISSING}, "structure"),
        ]


class TestOpenAIAgentsAdvancedKit(ReaderConformance):
    reader_name = "openai-agents"
    secret = SUPPORT_KEY

    def make_store(self, tmp: Path) -> str:
        return copy_store(ADVANCED, tmp)

    def append(self, url: str) -> int:
        add_items(url, "analyst-b2", A_TURN, advanced=True)
        return len(A_TURN)

    def damages(self) -> list[Damage]:
        return [
            Damage("a message row gone", lambda url: sql(url, "DELETE FROM agent_messages WHERE id = 7"),
                   {Check.MISSING}, "structure"),
            Damage("a duplicate sequence number", lambda url: sql(
                url, "UPDATE message_structure SET sequence_number = 6 WHERE id = 7"), {Check.SEQUENCE_DUPLICATE},
                "structure"),
            Damage("a truncated item", lambda url: sql(url, "UPDATE agent_messages SET message_data = "
                                                            "substr(message_data, 1, 20) WHERE id = 22"),
                   {Check.UNDECODABLE}, "data"),
        ]


# ---- listing, events, states ----------------------------------------------------------------------


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


def test_sniffed_by_schema_not_by_name(tmp_path: Path) -> None:
    from lastgood.readers.registry import pick_reader

    odd = tmp_path / "conversations.data"
    shutil.copyfile(PLAIN, odd)
    assert pick_reader(str(odd)) == "openai-agents"
    other = tmp_path / "agent_messages.sqlite"
    sqlite3.connect(other).execute("CREATE TABLE agent_messages (id INTEGER PRIMARY KEY, text TEXT)").connection.close()
    from lastgood.readers.openai_agents.reader import OpenAIAgentsReader

    assert not OpenAIAgentsReader.sniff(str(other))
    assert not OpenAIAgentsReader.sniff(str(ROOT / "sample_data" / "langgraph.sqlite"))


def test_custom_table_names_are_found(tmp_path: Path) -> None:
    path = tmp_path / "custom.sqlite"
    conn = sqlite3.connect(path)
    conn.executescript("""
        CREATE TABLE chat_sessions (session_id TEXT PRIMARY KEY, created_at TIMESTAMP DEFAULT CURRENT_TIMESTAMP,
                                    updated_at TIMESTAMP DEFAULT CURRENT_TIMESTAMP);
        CREATE TABLE chat_items (id INTEGER PRIMARY KEY AUTOINCREMENT, session_id TEXT NOT NULL,
                                 message_data TEXT NOT NULL, created_at TIMESTAMP DEFAULT CURRENT_TIMESTAMP);
        INSERT INTO chat_sessions (session_id) VALUES ('s1');
        INSERT INTO chat_items (session_id, message_data) VALUES ('s1', '{"content": "hi", "role": "user"}');
    """)
    conn.commit()
    conn.close()
    checkpoints, _events, _scan = listing(str(path))
    assert [(c["run_id"], c["checkpoint_id"], c["location"]) for c in checkpoints] == [("s1", "1", "chat_items:1")]


def test_plain_listing_maps_sessions_items_and_gaps() -> None:
    checkpoints, _events, scan = listing(str(PLAIN))
    ops = [c for c in checkpoints if c["run_id"] == "ops-91d2"]
    assert [c["checkpoint_id"] for c in ops] == ["46", "47", "48", "49", "54", "55", "56", "57", "58", "59", "60", "61"]
    assert ops[4]["parent_id"] == "49" and ops[4]["step"] == 4  # the popped ids 50-53 are a gap, no finding
    assert [c["trigger"] for c in ops[:4]] == ["user", "tool_call", "tool_output", "assistant"]
    meta = json.loads(ops[1]["metadata"])
    assert meta == {"turn": 1, "type": "function_call", "tool": "service_status",
                    "call_id": "call_b393f7c622f358365c687377"}
    times = [c["created_at"] for c in ops]
    assert times == sorted(times) and len(set(times)) == len(times)
    assert {h.run_id: h.checkpoint_id for h in scan.heads} == {
        "ops-91d2": "61", "research-c044": "45", "support-7f3a": "30", "trading-2b91": "36"}
    assert scan.findings == [] and len(checkpoints) == 57


def test_events_tool_calls_errors_and_the_aborted_turn() -> None:
    _checkpoints, events, _scan = listing(str(PLAIN))
    by_kind: dict[str, list[dict[str, Any]]] = {}
    for event in events:
        by_kind.setdefault(event["kind"], []).append(event)
    assert len(by_kind["tool_call"]) == 16
    (error,) = by_kind["error"]
    assert (error["run_id"], error["checkpoint_id"], error["channel"]) == ("research-c044", "25", "fetch_paper")
    assert "DOI 10.1234/ckpt.404 not found" in error["message"]
    (early,) = by_kind["ended_early"]
    assert (early["run_id"], early["checkpoint_id"]) == ("research-c044", "45")
    assert "turn 4" in early["message"]


def test_advanced_branches_are_namespaces_and_copies_give_events_once() -> None:
    checkpoints, events, scan = listing(str(ADVANCED))
    retry = [c for c in checkpoints if c["namespace"] == "retry-from-turn-2"]
    assert [c["checkpoint_id"] for c in retry] == [str(i) for i in range(13, 25)]
    assert [json.loads(c["metadata"])["message_id"] for c in retry[:5]] == [1, 2, 3, 4, 13]
    assert retry[4]["parent_id"] == "16" and retry[4]["step"] == 4
    main = [c for c in checkpoints if c["run_id"] == "planner-a1" and c["namespace"] == ""]
    assert len(main) == 12 and json.loads(main[0]["metadata"])["usage"]["total_tokens"] == 243
    assert "usage" not in json.loads(retry[0]["metadata"])  # copied turns have no usage on the new branch
    assert json.loads(retry[4]["metadata"])["usage"]["total_tokens"] == 600
    calls = [e for e in events if e["kind"] == "tool_call" and e["run_id"] == "planner-a1"]
    assert [(e["namespace"], e["checkpoint_id"]) for e in calls] == [
        ("", "2"), ("", "6"), ("", "10"), ("retry-from-turn-2", "18"), ("retry-from-turn-2", "22")]
    assert [e["checkpoint_id"] for e in events if e["kind"] == "error"] == ["19"]
    assert {(h.run_id, h.namespace): h.checkpoint_id for h in scan.heads} == {
        ("analyst-b2", ""): "30", ("planner-a1", ""): "12", ("planner-a1", "retry-from-turn-2"): "24"}


def test_state_is_the_items_up_to_the_checkpoint() -> None:
    with open_store(str(PLAIN)) as reader:
        state = reader.load_state(CheckpointRecord(run_id="trading-2b91", checkpoint_id="21"))
        messages = state["messages"]
        assert len(messages) == 9 and messages[-1]["call_id"] == "call_d5a4e55b8d81dc49d966f264"
        assert messages[7]["output"] == {"symbol": "ACME", "last": 101.25, "currency": "USD"}  # parsed for clarity
        assert messages[1]["arguments"] == {"account": "ACC-7781"}
        assert state["session"] == {"session_id": "trading-2b91", "store": "SQLiteSession",
                                    "created_at": state["session"]["created_at"],
                                    "updated_at": state["session"]["updated_at"], "items": 9, "turns": 2}
        blob = reader.read_blob(CheckpointRecord(run_id="trading-2b91", checkpoint_id="21"))
        assert json.loads(blob)["type"] == "function_call_output"
    with open_store(str(ADVANCED)) as reader:
        state = reader.load_state(CheckpointRecord(run_id="planner-a1", namespace="retry-from-turn-2",
                                                   checkpoint_id="20"))
        assert [m.get("role") or m.get("type") for m in state["messages"]][:5] == [
            "user", "function_call", "function_call_output", "assistant", "user"]
        assert state["messages"][4]["content"].startswith("Instead, fetch the runbook")
        assert state["session"]["branch"] == "retry-from-turn-2" and list(state["session"]["usage"]) == ["2"]


def test_redaction_hides_secrets_in_json_strings() -> None:
    from lastgood.redact import redact

    with open_store(str(PLAIN)) as reader:
        broker = reader.load_state(CheckpointRecord(run_id="trading-2b91", checkpoint_id="7"))
        support = reader.load_state(CheckpointRecord(run_id="support-7f3a", checkpoint_id="15"))
        raw_output = reader.read_blob(CheckpointRecord(run_id="trading-2b91", checkpoint_id="7")).decode()
        raw_args = reader.read_blob(CheckpointRecord(run_id="support-7f3a", checkpoint_id="14")).decode()
    assert BROKER_KEY in json.dumps(broker) and SUPPORT_KEY in json.dumps(support)
    assert BROKER_KEY not in json.dumps(redact(broker))
    assert SUPPORT_KEY not in json.dumps(redact(support))  # the user text and rotate_api_key's arguments
    # the stored rows hold them inside JSON *strings* ("arguments", "output"): redaction by shape and by
    # "api_key": "…" assignment covers the raw text too
    assert BROKER_KEY in raw_output and BROKER_KEY not in redact(raw_output)
    assert SUPPORT_KEY in raw_args and SUPPORT_KEY not in redact(raw_args)


def test_normalize_message_shapes() -> None:
    from lastgood.readers.openai_agents.items import normalize_message

    assert normalize_message({"content": "hi", "role": "user"}) == {"role": "user", "content": "hi"}
    call = normalize_message({"arguments": "{\"a\": 1}", "call_id": "c1", "name": "f", "type": "function_call",
                              "id": "fc_1"})
    assert call == {"role": "assistant", "content": "", "tool_calls": [{"id": "c1", "name": "f", "args": {"a": 1}}],
                    "id": "fc_1"}
    assert normalize_message({"call_id": "c1", "output": "done", "type": "function_call_output"}) == {
        "role": "tool", "content": "done", "tool_call_id": "c1"}
    assistant = normalize_message({"id": "m1", "content": [{"type": "output_text", "text": "ok"},
                                                           {"type": "refusal", "refusal": "no"}],
                                   "role": "assistant", "type": "message"})
    assert assistant == {"role": "assistant", "content": "ok\n[refusal] no", "id": "m1"}
    assert normalize_message({"type": "unknown_thing"}) is None and normalize_message("text") is None


def test_a_malformed_row_is_a_finding_and_the_rest_loads(tmp_path: Path) -> None:
    url = copy_store(PLAIN, tmp_path)
    sql(url, "UPDATE agent_messages SET message_data = '{\"content\": \"Open a tick' WHERE id = 27")
    with open_store(url) as reader:
        scan = reader.scan()
        list(scan.checkpoints)
        count, findings = reader.listed_structure(scan.token)
        assert count == 57
        (finding,) = findings
        assert (finding.check, finding.checkpoint_id, finding.severity) == (Check.UNDECODABLE, "27", "error")
        assert "row 27" in finding.message
        assert reader.check_structure([("support-7f3a", "", "27"), ("support-7f3a", "", "28")]) == findings
        with pytest.raises(DecodeError, match="not valid JSON"):
            reader.load_state(CheckpointRecord(run_id="support-7f3a", checkpoint_id="27"))
        later = reader.load_state(CheckpointRecord(run_id="support-7f3a", checkpoint_id="30"))
    assert len(later["messages"]) == 11  # 12 items, the malformed one skipped as the SDK skips it


@pytest.mark.parametrize("source", [PLAIN, ADVANCED], ids=["plain", "advanced"])
def test_an_item_that_is_not_utf8_is_a_finding_and_the_rest_loads(source: Path, tmp_path: Path) -> None:
    """Python's sqlite3 fails a whole query on TEXT that is not UTF-8 (the SDK's get_items too): the
    listing reads past it, the item is undecodable with that reason, the other states still show."""
    url = copy_store(source, tmp_path)
    ((item, session),) = rows(url, "SELECT id, session_id FROM agent_messages ORDER BY id LIMIT 1 OFFSET 3")
    sql(url, "UPDATE agent_messages SET message_data = CAST(X'7b2278223a22ff227d' AS TEXT) WHERE id = ?", (item,))
    with open_store(url) as reader:
        scan = reader.scan()
        listed = [r for b in scan.checkpoints for r in as_table(b).to_pylist()]
        count, findings = reader.listed_structure(scan.token)
        assert count == len(listed) and findings
        assert all(f.check == Check.UNDECODABLE and "not UTF-8 text" in f.message and "cannot read this session"
                   in f.message for f in findings), findings
        bad = {f.checkpoint_id for f in findings}
        one = next(r for r in listed if r["checkpoint_id"] in bad)
        with pytest.raises(DecodeError, match="not UTF-8 text"):
            reader.load_state(CheckpointRecord(run_id=one["run_id"], namespace=one["namespace"],
                                               checkpoint_id=one["checkpoint_id"]))
        later = [r for r in listed if r["run_id"] == session and r["namespace"] == one["namespace"]
                 and r["step"] > one["step"]]
        state = reader.load_state(CheckpointRecord(run_id=session, namespace=later[0]["namespace"],
                                                   checkpoint_id=later[0]["checkpoint_id"]))
        assert len(state["messages"]) == later[0]["step"]  # every item up to it, the bad one left out


def test_structure_row_without_message_and_orphan_session(tmp_path: Path) -> None:
    url = copy_store(ADVANCED, tmp_path)
    sql(url, "DELETE FROM agent_messages WHERE id = 14")
    sql(url, "DELETE FROM agent_sessions WHERE session_id = 'analyst-b2'")
    with open_store(url) as reader:
        scan = reader.scan()
        list(scan.checkpoints)
        (orphan,) = scan.findings
        assert (orphan.check, orphan.run_id, orphan.checkpoint_id) == (Check.SESSION_MISSING, "analyst-b2", None)
        _count, findings = reader.listed_structure(scan.token)
        assert [(f.check, f.namespace, f.checkpoint_id) for f in findings] == [
            (Check.MISSING, "retry-from-turn-2", "18")]
        state = reader.load_state(CheckpointRecord(run_id="planner-a1", namespace="retry-from-turn-2",
                                                   checkpoint_id="20"))
        assert len(state["messages"]) == 7  # the SDK's JOIN skips the structure row without its message


def test_incremental_scans(tmp_path: Path) -> None:
    url = copy_store(PLAIN, tmp_path)
    with open_store(url) as reader:
        first = reader.scan()
        list(first.checkpoints)
        add_items(url, "new-session", A_TURN[:1])
        again = reader.scan(first.token)
        listed = [r for b in again.checkpoints for r in as_table(b).to_pylist()]
        assert not again.full and [(r["run_id"], r["step"]) for r in listed] == [("new-session", 0)]
        sql(url, "DELETE FROM agent_messages WHERE id = (SELECT max(id) FROM agent_messages "
                 "WHERE session_id = 'ops-91d2')")  # pop_item
        popped = reader.scan(again.token)
        assert popped.full and sum(as_table(b).num_rows for b in popped.checkpoints) == 57


# ---- recovery -----------------------------------------------------------------------------------


def index_and_plan(url: str, tmp: Path) -> tuple[Any, Any]:
    from lastgood.index.catalog import Catalog
    from lastgood.stores import index_store

    catalog = Catalog(str(tmp / f"index-{len(list(tmp.iterdir()))}.duckdb"))
    return catalog, index_store(catalog, url, check="structure").store


def table_dump(url: str, table: str) -> list[tuple[Any, ...]]:
    return rows(url, f"SELECT * FROM {table} ORDER BY 1")


def test_restore_archives_the_later_items_and_undo_puts_them_back(tmp_path: Path) -> None:
    from lastgood.readers import journal as jr
    from lastgood import recovery

    url = copy_store(PLAIN, tmp_path / "store")
    before = table_dump(url, "agent_messages")
    catalog, store = index_and_plan(url, tmp_path)
    restored = recovery.apply_plan(catalog, store, recovery.plan_restore(catalog, store, "15"),
                                   reason="bad rotation", operator="ana")
    assert restored.check["ok"], restored.check
    assert (restored.previous_head, restored.new_head) == ("30", "15")
    sdk = rows(url, "SELECT id FROM agent_messages WHERE session_id = 'support-7f3a' ORDER BY id")
    assert [r[0] for r in sdk] == [1, 2, 3, 4, 13, 14, 15]
    archived = rows(url, "SELECT id, parent_id, action_id FROM lastgood_archived_items ORDER BY id")
    assert archived == [(16, 15, restored.action_id), (27, 16, restored.action_id), (28, 27, restored.action_id),
                        (29, 28, restored.action_id), (30, 29, restored.action_id)]
    _catalog, store = index_and_plan(url, tmp_path)
    checkpoints, _events, scan = listing(url)
    gone = {c["checkpoint_id"]: c for c in checkpoints if c["status"] == Status.SUPERSEDED}
    assert sorted(gone, key=int) == ["16", "27", "28", "29", "30"] and gone["27"]["parent_id"] == "16"
    assert gone["30"]["step"] == 11 and gone["30"]["location"].startswith("archived:")
    assert {h.run_id: h.checkpoint_id for h in scan.heads}["support-7f3a"] == "15"
    entry = recovery.backend(store).journal_entries()[-1]
    assert entry["note"]["archived"] == [16, 27, 28, 29, 30] and entry["new_head"] == "15"

    undone = recovery.apply_plan(catalog, store, recovery.plan_undo(catalog, store, restored.action_id),
                                 reason="undo", operator="ana")
    assert undone.check["ok"] and undone.new_head == "30"
    assert table_dump(url, "agent_messages") == before  # the same rows, ids included
    assert rows(url, "SELECT count(*) FROM lastgood_archived_items") == [(0,)]
    assert jr.verify_chain(recovery.backend(store).journal_entries()).ok


def test_restore_on_a_branch_keeps_shared_messages_and_usage(tmp_path: Path) -> None:
    from lastgood import recovery

    url = copy_store(ADVANCED, tmp_path / "store")
    dumps = {t: table_dump(url, t) for t in ("agent_messages", "message_structure", "turn_usage")}
    catalog, store = index_and_plan(url, tmp_path)
    restored = recovery.apply_plan(catalog, store, recovery.plan_restore(catalog, store, "20@retry-from-turn-2"),
                                   reason="retry turn 3", operator="ana")
    assert restored.check["ok"] and restored.new_head == "20"
    branch = rows(url, "SELECT id FROM message_structure WHERE branch_id = 'retry-from-turn-2' ORDER BY sequence_number")
    assert [r[0] for r in branch] == [13, 14, 15, 16, 17, 18, 19, 20]
    assert rows(url, "SELECT id FROM lastgood_archived_structure ORDER BY id") == [(21,), (22,), (23,), (24,)]
    assert rows(url, "SELECT id FROM lastgood_archived_items ORDER BY id") == [(17,), (18,), (19,), (20,)]
    assert rows(url, "SELECT user_turn_number FROM lastgood_archived_turn_usage") == [(3,)]
    assert table_dump(url, "message_structure")[:12] == dumps["message_structure"][:12]  # main untouched
    entry = recovery.backend(store).journal_entries()[-1]
    assert entry["note"]["branch"] == "retry-from-turn-2" and "switch_to_branch" in entry["note"]["resume"]
    _catalog, store = index_and_plan(url, tmp_path)
    recovery.apply_plan(catalog, store, recovery.plan_undo(catalog, store, restored.action_id),
                        reason="undo", operator="ana")
    assert {t: table_dump(url, t) for t in dumps} == dumps


def test_a_moved_head_is_a_conflict_and_nothing_is_written(tmp_path: Path) -> None:
    from lastgood import recovery

    url = copy_store(PLAIN, tmp_path / "store")
    catalog, store = index_and_plan(url, tmp_path)
    plan = recovery.plan_restore(catalog, store, "57")
    add_items(url, "ops-91d2", A_TURN[:1])  # the agent wrote meanwhile
    before = table_dump(url, "agent_messages")
    with pytest.raises(ConflictError, match="moved"):
        recovery.apply_plan(catalog, store, plan, reason="late", operator="ana")
    assert table_dump(url, "agent_messages") == before
    assert rows(url, "SELECT name FROM sqlite_master WHERE name LIKE 'lastgood_%'") == []  # rolled back whole


# ---- the CLI ------------------------------------------------------------------------------------


def cli(home: Path, *args: str) -> Any:
    done = lastgood_cli(*args, "--format", "json", home=home)
    assert done.returncode in (0, 1), done.stderr
    return json.loads(done.stdout)


@pytest.mark.parametrize("source", [PLAIN, ADVANCED], ids=["plain", "advanced"])
def test_cli_ls_show_verify_diff(source: Path, tmp_path: Path) -> None:
    url = copy_store(source, tmp_path / "store")
    home = tmp_path / "home"
    listed = cli(home, "ls", url)
    rows_ = listed if isinstance(listed, list) else listed.get("checkpoints", listed)
    assert len(rows_) == (57 if source == PLAIN else 30)
    ref, other = ("trading-2b91/7", "trading-2b91/36") if source == PLAIN else ("7", "12")
    shown = cli(home, "show", url, ref)
    text = json.dumps(shown)
    assert shown["state"]["messages"] and BROKER_KEY not in text and SUPPORT_KEY not in text
    verified = cli(home, "verify", url)
    assert not [f for f in verified.get("findings", []) if f["severity"] == "error"]
    diff = cli(home, "diff", url, ref, other)
    assert SUPPORT_KEY not in json.dumps(diff) and BROKER_KEY not in json.dumps(diff)
