"""Google ADK ``DatabaseSessionService`` readers (``adk-sqlite``, ``adk-postgres``): the conformance kit on
copies of the sample ADK wrote itself, and what the issue asks of them — state replayed with ADK's
scopes, the live conversation after rewinds, events, redaction of the secret in a tool argument,
recovery as ADK's rewind, the CLI."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from lastgood.checks import Check
from lastgood.readers.base import CheckpointRecord, Status
from lastgood.readers.testing import Damage, ReaderConformance
from tests import adk_stores as adk
from tests.helpers import lastgood_cli

BOB_EVENTS = ("SELECT id FROM events WHERE session_id = ? ORDER BY timestamp, id")


def _event_id(url: str, session: str, position: int) -> str:
    return adk.rows(url, BOB_EVENTS, (session,))[position][0]


def _malformed(url: str) -> None:
    adk.sql(url, "UPDATE events SET event_data = substr(event_data, 1, 40) WHERE id = ?",
            (_event_id(url, adk.ALICE_ORDERS, 5),))


def _orphans(url: str) -> None:
    adk.sql(url, "DELETE FROM sessions WHERE id = ?", (adk.BOB,))


def _list_delta(url: str) -> None:
    adk.sql(url, """UPDATE events SET event_data = json_set(event_data, '$.actions.state_delta', json('[1, 2]'))
                    WHERE id = ?""", (_event_id(url, adk.ALICE_ORDERS, 2),))


def _clock_back(url: str) -> None:
    adk.sql(url, "UPDATE events SET timestamp = '2026-11-03 09:00:00.000000' WHERE id = ?",
            (_event_id(url, adk.ALICE_ORDERS, 6),))


class TestAdkSqliteKit(ReaderConformance):
    reader_name = "adk-sqlite"
    secret = adk.SECRET

    def make_store(self, tmp: Path) -> str:
        return adk.sqlite_store(tmp)

    def append(self, url: str) -> int:
        return len(adk.append_invocation(url, "alice", adk.ALICE_ORDERS, "Anything else?", "No, all done."))

    def damages(self) -> list[Damage]:
        return [
            Damage("malformed event_data", _malformed, {Check.UNDECODABLE}, "structure"),
            Damage("events of a deleted session", _orphans, {Check.SESSION_MISSING}, "structure"),
            Damage("a state_delta that is a list", _list_delta, {Check.STATE_REPLAY}),
            Damage("a timestamp from a clock that went back", _clock_back, {Check.OUT_OF_ORDER}, "structure"),
        ]


# ---- PostgreSQL ---------------------------------------------------------------------------------


def _pg_not_an_object(url: str) -> None:
    adk.sql(url, "UPDATE events SET event_data = to_jsonb('truncated {\"content\": '::text) WHERE id = ?",
            (_event_id(url, adk.ALICE_ORDERS, 5),))


def _pg_orphans(url: str) -> None:
    (name,) = adk.rows(url, """SELECT conname FROM pg_constraint WHERE conrelid = 'events'::regclass
                               AND contype = 'f'""")[0]
    adk.sql(url, f'ALTER TABLE events DROP CONSTRAINT "{name}"')  # a dump restored without its constraints
    adk.sql(url, "DELETE FROM sessions WHERE id = ?", (adk.BOB,))


def _pg_list_delta(url: str) -> None:
    adk.sql(url, "UPDATE events SET event_data = jsonb_set(event_data, '{actions,state_delta}', '[1, 2]') WHERE id = ?",
            (_event_id(url, adk.ALICE_ORDERS, 2),))


@pytest.mark.postgres
class TestAdkPostgresKit(ReaderConformance):
    reader_name = "adk-postgres"
    secret = adk.SECRET

    @pytest.fixture(autouse=True)
    def _server(self, pg_create_database: Callable[[str], str]) -> None:
        self.create = pg_create_database

    def make_store(self, tmp: Path) -> str:
        return adk.postgres_store(self.create("adk"))

    def append(self, url: str) -> int:
        return len(adk.append_invocation(url, "alice", adk.ALICE_ORDERS, "Anything else?", "No, all done."))

    def damages(self) -> list[Damage]:
        return [
            Damage("event_data that is not an object", _pg_not_an_object, {Check.UNDECODABLE}, "structure"),
            Damage("events of a deleted session", _pg_orphans, {Check.SESSION_MISSING}, "structure"),
            Damage("a state_delta that is a list", _pg_list_delta, {Check.STATE_REPLAY}),
        ]


# ---- focused: what the issue asks ---------------------------------------------------------------

SECRET_SESSION_EVENTS = ("1da6c2d4-8c5e-4271-89fb-04f8e4f7cb21", "a87ecb04-add0-42df-8b66-ee17c853fadf",
                         "c9ab5040-98ad-45f6-859b-aa513b0dc0f6")
REWIND_EVENT = "614d20c4-ce8c-4663-b510-75d6f0d2b045"
CANCEL_RESULT = "0ec75344-cd32-494a-9b05-0d278b9167fa"
CANCEL_ASK = "84d10547-0c9d-4dad-a143-049c28aad9cd"


@pytest.fixture
def store(tmp_path: Path) -> str:
    return adk.sqlite_store(tmp_path)


def _open(url: str) -> Any:
    from lastgood.readers.registry import open_reader

    return open_reader(url)


def _state(url: str, session: str, event_id: str) -> dict[str, Any]:
    with _open(url) as reader:
        return reader.load_state(CheckpointRecord(run_id=session, checkpoint_id=event_id))


def _listed(url: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]], Any]:
    from lastgood.readers.base import as_table

    with _open(url) as reader:
        scan = reader.scan()
        rows = [r for b in scan.checkpoints for r in as_table(b).to_pylist()]
        events = [e for b in scan.events for e in b.to_pylist()]
    return rows, events, scan


def test_state_replays_session_keys_and_merges_the_shared_scopes(store: str) -> None:
    first = _state(store, adk.ALICE_ORDERS, "22ced926-32a9-4dff-9bb6-dc430793e9bd")["state"]
    # created with channel=web (in no event): known from sessions.state; app:/user: keys are the
    # current app_states/user_states rows, prefixed, as get_session merges them
    assert first == {"channel": "web", "app:support_hours": "09-17 UTC", "app:integrations": ["stripe"],
                     "user:tier": "gold", "user:orders_seen": 3, "user:pref_language": "fr"}
    after_lookup = _state(store, adk.ALICE_ORDERS, "b255f013-8078-4652-9eaa-88cc1c31c4f6")["state"]
    assert after_lookup["last_order"]["order_id"] == "1042"
    assert not any(k.startswith("temp:") for k in after_lookup), "temp: keys are never stored"
    head = _state(store, adk.ALICE_ORDERS, "0b1a2e8e-e73a-4836-bd5e-4e99b4f160c1")["state"]
    ((stored,),) = adk.rows(store, "SELECT state FROM sessions WHERE id = ?", (adk.ALICE_ORDERS,))
    assert {k: v for k, v in head.items() if ":" not in k} == json.loads(stored), "the head replays to sessions.state"


def test_a_rewind_takes_the_state_and_the_conversation_back(store: str) -> None:
    cancelled = _state(store, adk.ALICE_REWIND, CANCEL_RESULT)
    assert cancelled["state"]["cancelled_orders"] == ["2077"]
    rewound = _state(store, adk.ALICE_REWIND, REWIND_EVENT)
    assert "cancelled_orders" not in rewound["state"] and "channel" not in rewound["state"]  # null: removed
    assert rewound["state"]["last_order"]["status"] == "processing"
    before = _state(store, adk.ALICE_REWIND, "a47a1d74-0cf5-4c9a-a213-cc100a471f5e")
    assert rewound["messages"] == before["messages"], "the rewound invocation left the live conversation"
    assert len(cancelled["messages"]) == len(before["messages"]) + 3


def test_events_tool_calls_errors_aborts_and_rewinds(store: str) -> None:
    rows, events, _scan = _listed(store)
    kinds = {(e["run_id"][:8], e["kind"], e["channel"]) for e in events}
    assert ("d4745f58", "rewind", "rewind") in kinds
    assert ("049f8805", "ended_early", "error_code") in kinds  # INVOCATION_ABORTED
    assert ("af4b8529", "error", "refund_order") in kinds  # a function response {"error": …}
    messages = {e["message"] for e in events}
    assert "MALFORMED_FUNCTION_CALL: Malformed function call: list_orders(user='bob', limit=)" in messages
    assert "RuntimeError: export backend unavailable: connection refused (report=q3-finance)" in messages
    assert "rewound the session to before invocation e-463b1090-daae-4bfa-851f-2003b236394c" in messages
    assert 'configure_integration({"api_key":"[redacted]","service":"stripe"})' in messages
    triggers = [r["trigger"] for r in rows if r["run_id"] == adk.ALICE_REWIND]
    assert triggers[:4] == ["user", "tool_call", "tool_result", "model"] and triggers[12] == "rewind"
    by_id = {r["checkpoint_id"]: r for r in rows}
    meta = json.loads(by_id["a87ecb04-add0-42df-8b66-ee17c853fadf"]["metadata"])
    assert meta["invocation_id"] == "e-cf611f5e-0491-4a0d-99de-ec20ceed22cd" and meta["user_id"] == "alice"
    assert meta["tool_calls"] == ["configure_integration"]
    assert {r["agent"] for r in rows} == {adk.APP}
    assert [r["step"] for r in rows if r["run_id"] == adk.BOB] == list(range(12))


def test_the_secret_in_a_tool_argument_is_redacted(store: str) -> None:
    from lastgood.redact import redact

    state = _state(store, adk.ALICE_REWIND, SECRET_SESSION_EVENTS[2])
    call = state["messages"][1]["content"]["parts"][0]["function_call"]
    assert call["args"]["api_key"] == adk.SECRET  # the reader returns what is stored…
    shown = json.dumps(redact(state))
    assert adk.SECRET not in shown and "[redacted]" in shown  # …the core shows it masked
    with _open(store) as reader:
        normalized = [reader.normalize_message(m) for m in state["messages"]]
    assert normalized[1]["tool_calls"][0]["name"] == "configure_integration"
    assert normalized[2] == {"role": "tool", "content": '{"connected": "stripe"}', "name": "configure_integration",
                             "tool_call_id": call["id"]}
    assert adk.SECRET not in json.dumps(redact(normalized))


def test_normalize_message_shapes() -> None:
    from lastgood.readers.adk.messages import normalize_message

    assert normalize_message({"author": "user", "content": {"role": "user", "parts": [{"text": "hi"}]}}) == {
        "role": "user", "content": "hi"}
    error = normalize_message({"author": "agent", "error_code": "RuntimeError", "error_message": "boom"})
    assert error == {"role": "assistant", "content": "[RuntimeError] boom", "name": "agent"}
    assert normalize_message({"role": "user", "content": "not adk"}) is None
    assert normalize_message("text") is None


def test_damage_is_reported_and_the_rest_still_lists(store: str) -> None:
    _malformed(store)
    _orphans(store)
    _clock_back(store)
    rows, _events, scan = _listed(store)
    assert len(rows) == 41
    bad = [r for r in rows if r["status"] == Status.CORRUPT]
    assert len(bad) == 1 and "not a JSON object" in bad[0]["status_reason"]
    checks = {f.check for f in scan.findings}
    assert {Check.UNDECODABLE, Check.SESSION_MISSING, Check.OUT_OF_ORDER} <= checks
    with _open(store) as reader, pytest.raises(Exception, match="not a JSON object"):
        reader.load_state(CheckpointRecord(run_id=adk.ALICE_ORDERS, checkpoint_id=bad[0]["checkpoint_id"]))


def test_a_session_id_shared_by_two_users_gets_qualified_run_ids(store: str) -> None:
    adk.sql(store, "INSERT INTO sessions SELECT app_name, 'bob', id, state, create_time, update_time FROM sessions "
                   "WHERE id = ?", (adk.ALICE_ORDERS,))
    adk.sql(store, "INSERT INTO events SELECT id, app_name, 'bob', session_id, invocation_id, timestamp, event_data "
                   "FROM events WHERE session_id = ?", (adk.ALICE_ORDERS,))
    rows, _events, _scan = _listed(store)
    runs = {r["run_id"] for r in rows}
    assert {f"{adk.APP}:alice:{adk.ALICE_ORDERS}", f"{adk.APP}:bob:{adk.ALICE_ORDERS}"} <= runs
    state = _state(store, f"{adk.APP}:bob:{adk.ALICE_ORDERS}", "22ced926-32a9-4dff-9bb6-dc430793e9bd")
    assert state["state"]["user:team"] == "finance"  # bob's user_states row


def test_a_v0_database_is_refused_with_the_reason(tmp_path: Path) -> None:
    import sqlite3

    from lastgood.errors import ReaderError

    path = tmp_path / "v0.db"
    with sqlite3.connect(path) as conn:
        conn.executescript("""CREATE TABLE sessions (app_name, user_id, id, state, create_time, update_time);
            CREATE TABLE events (id, app_name, user_id, session_id, invocation_id, author, actions BLOB, timestamp);
            CREATE TABLE app_states (app_name, state, update_time);
            CREATE TABLE user_states (app_name, user_id, state, update_time);""")
    with pytest.raises(ReaderError, match="schema v0"):
        _open(str(path))


def test_restore_inside_an_invocation_appends_a_rewind_and_copies(store: str) -> None:
    from lastgood.readers import journal as jr

    with _open(store) as reader:
        backend = reader.recovery()
        head = backend.head(adk.ALICE_REWIND)
        target = reader.load_state(CheckpointRecord(run_id=adk.ALICE_REWIND, checkpoint_id=CANCEL_RESULT))
        entry = {"id": jr.new_action_id(), "action": "restore", "operator": "test", "reason": "t"}
        sealed = backend.commit(jr.Change(adk.ALICE_REWIND, "", head, CANCEL_RESULT, entry))
    new_head = sealed["new_head"]
    assert new_head != head and _state(store, adk.ALICE_REWIND, new_head) == target
    appended = adk.rows(store, "SELECT event_data FROM events WHERE rowid > 41 ORDER BY rowid")
    events = [json.loads(r[0]) for r in appended]
    assert events[0]["actions"]["rewind_before_invocation_id"] == "e-463b1090-daae-4bfa-851f-2003b236394c"
    assert events[0]["author"] == "user" and events[0]["custom_metadata"]["lastgood"]["restored_from"] == CANCEL_RESULT
    assert [e["custom_metadata"]["lastgood"]["copy_of"] for e in events[1:]] == [
        CANCEL_ASK, "438b9b24-2e31-47d6-bd4b-28669a17a816", CANCEL_RESULT]
    assert len({e["invocation_id"] for e in events[1:]}) == 1
    assert "user:orders_seen" not in json.dumps([e["actions"]["state_delta"] for e in events]), \
        "app:/user: writes are not repeated"
    with _open(store) as reader:
        entries = reader.recovery().journal_entries()
        assert jr.verify_chain(entries).ok and entries[-1]["new_head"] == new_head
        with pytest.raises(Exception, match="moved"):
            reader.recovery().commit(jr.Change(adk.ALICE_REWIND, "", head, CANCEL_ASK, {**entry, "id": "act-2"}))


def test_cli_ls_show_verify_json(store: str, tmp_path: Path) -> None:
    home = tmp_path / "home"
    listed = json.loads(lastgood_cli("ls", store, "--format", "json", home=home).stdout)
    rows = listed["checkpoints"] if isinstance(listed, dict) else listed
    assert len(rows) == 41
    shown = lastgood_cli("show", store, CANCEL_RESULT, "--format", "json", home=home)
    assert shown.returncode == 0, shown.stderr
    view = json.loads(shown.stdout)
    assert view["state"]["state"]["cancelled_orders"] == ["2077"]
    assert adk.SECRET not in shown.stdout
    verified = lastgood_cli("verify", store, "--read-data", "--format", "json", home=home)
    assert verified.returncode == 0, verified.stderr
    assert json.loads(verified.stdout)["checked"] == 41


@pytest.mark.parametrize("parts", [
    [{"function_call": {"name": "lookup", "id": "c1", "args": {"order_id": "7", "api_key": "sk-abcdefghijklmnopqrstu"}}},
     {"text": "and a note"}],
    [{"function_response": {"name": "lookup", "id": "c1", "response": {"error": "no such order"}}},
     {"function_response": {"name": "refund", "id": "c2", "response": {"result": "ok"}}}],
    [{"function_call": {"name": "a", "id": "1", "args": {}}}, {"function_response": {"name": "b", "response": 3}},
     "not a part", {"function_call": ["not", "a", "call"]}],
    [], None,
])
@pytest.mark.parametrize(("author", "role", "falsy"), [("helpdesk_agent", "model", None), ("user", "user", None),
                                                       (None, None, None), ("helpdesk_agent", "model", "")])
def test_the_tool_rows_short_way_gives_what_the_long_way_gives(parts: Any, author: Any, role: Any,
                                                                 falsy: Any) -> None:
    """model._tool_row (an event with parts and nothing else of note, read in one pass) against
    trigger_of, _metadata and events_of (the way every other event is read)."""
    from datetime import timedelta

    from lastgood.readers.adk import model
    from lastgood.readers.base import EPOCH

    info = list(model._NO_INFO)
    info[model.AUTHOR], info[model.ROLE] = author, role
    info[model.BRANCH] = info[model.ERROR_CODE] = info[model.TRANSFER] = falsy  # "" is kept in metadata, as None is not
    row = (7, "app", "alice", "s1", "e1", "inv-1", 1_793_700_484_000_123, 300, json.dumps(info), 1,
           None if parts is None else json.dumps(parts))
    events: list[Any] = []
    trigger, meta = model._tool_row(row, "s1", info, events)
    long_parts = model._parts(row[model.PARTS])
    assert trigger == model.trigger_of(info, long_parts, 1)
    assert json.loads(meta) == model._metadata(row, info, long_parts)
    assert events == (model.events_of(row, "s1", info, long_parts, EPOCH + timedelta(microseconds=row[model.TS]))
                      if long_parts else [])
    assert "sk-abcdefghijklmnopqrstu" not in repr(events)


@pytest.mark.parametrize(("author", "falsy"), [("helpdesk_agent", None), (None, None), ("user", ""), (None, 0)])
def test_a_plain_events_metadata_is_what_the_long_way_gives(author: Any, falsy: Any) -> None:
    """An event with no parts and nothing of note takes the listing's shortest way; its metadata is
    still _metadata's (no author key when there is none; a falsy branch or error code kept)."""
    from lastgood.readers.adk import model

    info = list(model._NO_INFO)
    info[model.AUTHOR], info[model.ROLE] = author, "model"
    info[model.BRANCH] = info[model.ERROR_CODE] = falsy
    row = (1, "app", "alice", "s1", "e1", "inv-1", 1_793_700_484_000_000, 120, json.dumps(info), 1, None)
    listing = model.list_rows([row], frozenset(), set(), True)
    meta = listing.checkpoints.column("metadata").to_pylist()[0]
    assert json.loads(meta) == model._metadata(row, info, None)
    assert listing.checkpoints.column("trigger").to_pylist() == ["user" if author == "user" else "model"]


def test_event_data_that_is_not_utf8_is_found_when_the_data_is_read(store: str, tmp_path: Path) -> None:
    """SQLite's JSON functions read past TEXT that is not UTF-8, ADK's driver fails the session on
    it: the data check names the event, its state is refused with that reason, the rest shows."""
    event = _event_id(store, adk.ALICE_ORDERS, 4)
    adk.sql(store, "UPDATE events SET event_data = CAST(X'7b2278223a22ff227d' AS TEXT) WHERE id = ?", (event,))
    with _open(store) as reader:
        found = list(reader.check_checkpoints([CheckpointRecord(run_id=adk.ALICE_ORDERS, checkpoint_id=event)],
                                              read_data=True))
        assert [(f.check, f.checkpoint_id) for f in found] == [(Check.UNDECODABLE, event)]
        assert "not UTF-8" in found[0].message
        later = _event_id(store, adk.ALICE_ORDERS, 6)
        assert not list(reader.check_checkpoints([CheckpointRecord(run_id=adk.ALICE_ORDERS, checkpoint_id=later)],
                                                 read_data=True))
    with pytest.raises(Exception, match="not UTF-8"):
        _state(store, adk.ALICE_ORDERS, event)
    assert _state(store, adk.ALICE_ORDERS, later)["messages"]
    done = lastgood_cli("verify", store, "--read-data", home=tmp_path / "home")
    assert done.returncode != 0 and "not UTF-8" in done.stdout + done.stderr


@pytest.mark.parametrize(("table", "where", "named"), [
    ("sessions", "id = ?", "sessions.state"),
    ("app_states", "app_name = (SELECT app_name FROM sessions WHERE id = ?)", "app_states.state")])
def test_a_state_column_that_is_not_utf8_makes_the_session_unreadable(store: str, table: str, where: str,
                                                                      named: str) -> None:
    """ADK loads a session with its state rows: TEXT there that is not UTF-8 fails it, so its states
    are refused naming the column (one finding per event at the data depth), not a SQLite error."""
    adk.sql(store, f"UPDATE {table} SET state = CAST(X'7b2278223a22ff227d' AS TEXT) WHERE {where}", (adk.ALICE_ORDERS,))
    event = _event_id(store, adk.ALICE_ORDERS, 2)
    with pytest.raises(Exception, match=f"{named} is not UTF-8 text"):
        _state(store, adk.ALICE_ORDERS, event)
    with _open(store) as reader:
        found = list(reader.check_checkpoints([CheckpointRecord(run_id=adk.ALICE_ORDERS, checkpoint_id=event)],
                                              read_data=True))
    assert [(f.check, f.checkpoint_id) for f in found] == [(Check.UNDECODABLE, event)]


def test_keys_that_are_not_utf8_are_read_past_and_the_rest_lists(store: str, tmp_path: Path) -> None:
    """Python's sqlite3 fails a whole query on TEXT that is not UTF-8: the listing reads past it. An
    event whose id or invocation id is not text is listed as undecodable (its id with replacement
    characters); the other events list as before."""
    before, _, _ = _listed(store)
    adk.sql(store, "UPDATE events SET id = CAST(X'666fff6f' AS TEXT) WHERE rowid = 7")
    adk.sql(store, "UPDATE events SET invocation_id = CAST(X'666fff6f' AS TEXT) WHERE rowid = 3")
    ((bad_inv,),) = adk.rows(store, "SELECT id FROM events WHERE rowid = 3")
    rows, _, scan = _listed(store)
    assert len(rows) == len(before)
    undecodable = {f.checkpoint_id for f in scan.findings if f.check == Check.UNDECODABLE}
    assert undecodable == {bad_inv, "fo\ufffdo"}
    assert {r["trigger"] for r in rows if r["checkpoint_id"] in undecodable} == {"undecodable"}
    assert all("not UTF-8" in f.message for f in scan.findings if f.check == Check.UNDECODABLE)
    done = lastgood_cli("verify", store, "--read-data", home=tmp_path / "home")
    assert "Traceback" not in done.stderr and "SQLite error" not in done.stdout + done.stderr
    assert "is not UTF-8 (its id, keys, invocation_id or event_data)" in done.stdout
    assert "no longer exists" not in done.stdout, "the event with a replaced id is still found in the table"


def test_a_run_id_finds_the_sessions_sql_finds_without_a_scan_per_lookup(store: str) -> None:
    """The reader looks run ids up in a map of the database's sessions read once per state of its
    files (a lookup by SQL scans every event): the same sessions FIND_SQL finds, for plain and
    qualified run ids, a session id two users share, orphan events and an unknown id."""
    import sqlite3

    from lastgood.readers.adk import sqlite as adk_sqlite

    adk.sql(store, "INSERT INTO sessions SELECT app_name, 'bob', id, state, create_time, update_time FROM sessions "
                   "WHERE id = ?", (adk.ALICE_ORDERS,))
    _orphans(store)  # bob's own session loses its sessions row: its events are orphans
    ids = [r[0] for r in adk.rows(store, "SELECT id FROM sessions UNION SELECT session_id FROM events")]
    asked = ids + [f"{a}:{u}:{s}" for a, u, s in adk.rows(store, adk_sqlite.ALL_KEYS_SQL)] + ["no-such-session"]
    conn = sqlite3.connect(store)
    try:
        expected = {run: adk_sqlite.find_sessions(conn, run) for run in asked}
        known = adk_sqlite.run_keys(conn)
        assert adk_sqlite.run_keys(conn, limit=1) is None  # beyond the limit: looked up one at a time
    finally:
        conn.close()
    assert known is not None
    assert len(expected[adk.ALICE_ORDERS]) == 2 and expected[adk.BOB], "the cases are there"
    with _open(store) as reader:
        scans: list[str] = []
        real = reader._read
        reader._read = lambda: scans.append("read") or real()
        assert {run: reader._find_sessions(run) for run in asked} == expected
        assert len(scans) == 1, "one read for every lookup"


@pytest.mark.postgres
def test_on_postgres_a_run_id_finds_the_sessions_sql_finds_scanning_events_only_for_new_ids(
        pg_create_database: Callable[[str], str], monkeypatch: pytest.MonkeyPatch) -> None:
    """On PostgreSQL a lookup reads ``sessions`` and the orphan events' sessions of the last
    listing (FIND_SQL scans every event: 44 ms a lookup on 100,000 events): the same sessions FIND_SQL
    finds, for plain and qualified ids, a shared session id, orphans and an unknown id; events are
    scanned only for an id neither knows, so orphan events written since are still found."""
    from lastgood.readers.adk import postgres as adk_pg

    url = adk.postgres_store(pg_create_database("adk_find"))
    adk.sql(url, "INSERT INTO sessions SELECT app_name, 'bob', id, state, create_time, update_time FROM sessions "
                 "WHERE id = ?", (adk.ALICE_ORDERS,))
    _pg_orphans(url)  # bob's own session loses its sessions row: its events are orphans
    keys = adk.rows(url, "SELECT app_name, user_id, id FROM sessions UNION SELECT app_name, user_id, session_id FROM events")
    asked = sorted({k[2] for k in keys} | {f"{a}:{u}:{s}" for a, u, s in keys}) + ["no-such-session"]
    import psycopg

    with psycopg.connect(url) as conn:
        expected = {run: adk_pg.find_sessions(conn, run) for run in asked}
    assert len(expected[adk.ALICE_ORDERS]) == 2 and expected[adk.BOB], "the cases are there"
    scans: list[str] = []
    real = adk_pg.find_sessions
    monkeypatch.setattr(adk_pg, "find_sessions", lambda cur, run: scans.append(run) or real(cur, run))
    with _open(url) as reader:
        reader.scan()  # the listing finds the orphans
        assert {run: reader._find_sessions(run) for run in asked} == expected
        assert scans == ["no-such-session"], "events scanned only for the id nothing knows"
        adk.sql(url, "DELETE FROM sessions WHERE id = ?", (adk.ALICE_REWIND,))  # new orphans, after the listing
        assert reader._find_sessions(adk.ALICE_REWIND) == [(adk.APP, "alice", adk.ALICE_REWIND)]


@pytest.mark.postgres
def test_on_postgres_a_data_check_asks_once_a_batch_whether_a_session_changed(
        pg_create_database: Callable[[str], str]) -> None:
    """On PostgreSQL the session's stamp is a query: one batch of checks asks it (and replays the
    session) once, not once per event; the next batch asks again and sees what ADK appended."""
    from lastgood.readers.base import CheckpointRecord

    url = adk.postgres_store(pg_create_database("adk_batch"))
    events = [r[0] for r in adk.rows(url, BOB_EVENTS, (adk.ALICE_ORDERS,))]
    records = [CheckpointRecord(run_id=adk.ALICE_ORDERS, checkpoint_id=e) for e in events]
    assert len(records) > 5
    with _open(url) as reader:
        stamps: list[Any] = []
        real = reader._session_stamp
        reader._session_stamp = lambda key: stamps.append(key) or real(key)
        assert not list(reader.check_checkpoints(records, read_data=True))
        assert len(stamps) == 1
        added = adk.append_invocation(url, "alice", adk.ALICE_ORDERS, "Anything else?", "No, all done.")
        later = records + [CheckpointRecord(run_id=adk.ALICE_ORDERS, checkpoint_id=e) for e in added]
        assert not list(reader.check_checkpoints(later, read_data=True)), "the new events are in the session read"
    assert len(stamps) == 2


@pytest.mark.postgres
def test_on_postgres_a_row_rewritten_in_place_is_seen_by_a_reader_that_read_its_session(
        pg_create_database: Callable[[str], str]) -> None:
    """ADK only appends, but a row can be rewritten in place (by hand, by a script): the session's
    stamp changes with it (its xmin), so an open reader (the dashboard's) replays the new rows."""
    from lastgood.readers.base import CheckpointRecord

    url = adk.postgres_store(pg_create_database("adk_in_place"))
    events = [r[0] for r in adk.rows(url, BOB_EVENTS, (adk.ALICE_ORDERS,))]
    record = CheckpointRecord(run_id=adk.ALICE_ORDERS, checkpoint_id=events[-1])
    with _open(url) as reader:
        before = reader.load_state(record)
        adk.sql(url, """UPDATE events SET event_data = jsonb_set(event_data, '{actions,state_delta}',
                        '{"edited_in_place": 1}') WHERE id = ?""", (events[2],))
        assert "edited_in_place" not in json.dumps(before)
        assert reader.load_state(record)["state"]["edited_in_place"] == 1
        adk.sql(url, "UPDATE sessions SET state = state || '{\"by_hand\": 2}' WHERE id = ?", (adk.ALICE_ORDERS,))
        assert reader.load_state(record)["state"]["by_hand"] == 2


@pytest.mark.parametrize(("value", "said"), [("json('[1, 2]')", "is an array"), ("'x'", "is a string"),
                                             ("7", "is a number")])
def test_a_state_delta_that_is_not_an_object_is_named_in_plain_words(store: str, value: str, said: str) -> None:
    from lastgood.readers.base import CheckpointRecord

    event = _event_id(store, adk.ALICE_ORDERS, 2)
    adk.sql(store, f"UPDATE events SET event_data = json_set(event_data, '$.actions.state_delta', {value}) WHERE id = ?",
            (event,))
    with _open(store) as reader:
        found = list(reader.check_checkpoints([CheckpointRecord(run_id=adk.ALICE_ORDERS, checkpoint_id=event)],
                                              read_data=True))
    assert [f.check for f in found] == [Check.STATE_REPLAY]
    assert f"actions.state_delta {said}, not an object" in found[0].message
