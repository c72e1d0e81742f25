"""Agno ``SqliteDb``/``PostgresDb`` readers (``agno-sqlite``, ``agno-postgres``): the conformance kit on
copies of the sample Agno wrote itself, and what the issue asks of them — runs as checkpoints with
their session_state snapshots and conversation, events (tool calls, tool errors, failed and paused
runs), redaction of the secret in a tool argument, the 2.x runs column, recovery as Agno's own
rewind (runs archived, session_state put back), the CLI."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from lastgood.checks import Check
from lastgood.readers.base import CheckpointRecord, Status
from lastgood.readers.testing import Damage, ReaderConformance
from tests import agno_stores as agno
from tests.helpers import lastgood_cli


def _run_id(url: str, session: str, index: int) -> str:
    return agno.rows(url, "SELECT run_id FROM agno_runs WHERE session_id = ? AND run_index = ?", (session, index))[0][0]


def _malformed(url: str) -> None:
    agno.sql(url, "UPDATE agno_runs SET run_data = substr(run_data, 1, 50) WHERE run_id = ?",
             (_run_id(url, agno.CART1, 1),))


def _orphans(url: str) -> None:
    agno.sql(url, "DELETE FROM agno_sessions WHERE session_id = ?", (agno.CART2,))


class TestAgnoSqliteKit(ReaderConformance):
    reader_name = "agno-sqlite"
    secret = agno.SECRET

    def make_store(self, tmp: Path) -> str:
        return agno.sqlite_store(tmp)

    def append(self, url: str) -> int:
        agno.append_run(url, agno.CART2, "Add a baguette.", {"cart": {"bread": 1, "baguette": 1}})
        return 1

    def damages(self) -> list[Damage]:
        return [
            Damage("malformed run_data", _malformed, {Check.UNDECODABLE}, "structure"),
            Damage("runs of a deleted session", _orphans, {Check.SESSION_MISSING}, "structure"),
        ]


# ---- PostgreSQL -----------------------------------------------------------------------------------


def _pg_not_an_object(url: str) -> None:
    agno.sql(url, "UPDATE agno_runs SET run_data = to_jsonb('truncated {\"run_id\": '::text) WHERE run_id = ?",
             (_run_id(url, agno.CART1, 1),))


def _pg_orphans(url: str) -> None:
    (name,) = agno.rows(url, "SELECT conname FROM pg_constraint WHERE conrelid = 'ai.agno_runs'::regclass "
                             "AND contype = 'f'")[0]
    agno.sql(url, f'ALTER TABLE ai.agno_runs DROP CONSTRAINT "{name}"')  # a dump restored without constraints
    agno.sql(url, "DELETE FROM agno_sessions WHERE session_id = ?", (agno.CART2,))


@pytest.mark.postgres
class TestAgnoPostgresKit(ReaderConformance):
    reader_name = "agno-postgres"
    secret = agno.SECRET

    @pytest.fixture(autouse=True)
    def _server(self, pg_create_database: Callable[[str], str]) -> None:
        self.create = pg_create_database

    def make_store(self, tmp: Path) -> str:
        dsn = agno.postgres_store(self.create("agno"))
        # Agno's tables live in schema "ai" (PostgresDb's default): on the search path of this test
        # database so the kit's byte-identity snapshot (tables on the search path) covers them
        agno.sql(dsn, f"ALTER DATABASE {dsn.rsplit('/', 1)[1]} SET search_path TO ai, public")
        return dsn

    def append(self, url: str) -> int:
        agno.append_run(url, agno.CART2, "Add a baguette.", {"cart": {"bread": 1, "baguette": 1}})
        return 1

    def damages(self) -> list[Damage]:
        return [
            Damage("run_data that is not an object", _pg_not_an_object, {Check.UNDECODABLE}, "structure"),
            Damage("runs of a deleted session", _pg_orphans, {Check.SESSION_MISSING}, "structure"),
        ]


# ---- focused: what the issue asks ---------------------------------------------------------------


@pytest.fixture
def store(tmp_path: Path) -> str:
    return agno.sqlite_store(tmp_path)


def _open(url: str, **options: Any) -> Any:
    from lastgood.readers.registry import open_reader

    return open_reader(url, storage_options=options or None)


def _listed(url: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]], Any]:
    from lastgood.readers.base import as_table

    with _open(url) as reader:
        scan = reader.scan()
        rows = [r for b in scan.checkpoints for r in as_table(b).to_pylist()]
        events = [e for b in scan.events for e in b.to_pylist()]
    return rows, events, scan


def _state(url: str, session: str, run_id: str) -> dict[str, Any]:
    with _open(url) as reader:
        return reader.load_state(CheckpointRecord(run_id=session, checkpoint_id=run_id))


def test_runs_are_checkpoints_in_run_index_order(store: str) -> None:
    rows, _events, scan = _listed(store)
    cart1 = [r for r in rows if r["run_id"] == agno.CART1]
    assert [r["step"] for r in cart1] == [0, 1, 2, 3, 4]
    assert [r["trigger"] for r in cart1] == ["completed"] * 4 + ["error"]
    assert cart1[1]["parent_id"] == cart1[0]["checkpoint_id"] and cart1[0]["parent_id"] is None
    assert {r["agent"] for r in rows} == {"shop-assistant"}
    fork = json.loads(next(r for r in rows if r["run_id"] == agno.FORK)["metadata"])
    assert fork["forked_from_session_id"] == agno.CART1 and fork["run_index"] == 0
    heads = {h.run_id: h.checkpoint_id for h in scan.heads}
    assert heads[agno.CART2] == _run_id(store, agno.CART2, 2)  # the PAUSED run continue_run resumes


def test_state_is_the_run_snapshot_and_the_conversation_up_to_it(store: str) -> None:
    second = _state(store, agno.CART1, _run_id(store, agno.CART1, 1))
    assert second["session_state"] == {"cart": {"apple": 2, "milk": 1}, "orders": []}
    roles = [m["role"] for m in second["messages"]]
    assert roles.count("system") == 1, "the system message each run stores is shown once"
    assert roles.count("user") == 2
    failed = _state(store, agno.CART1, _run_id(store, agno.CART1, 4))
    assert failed["session_state"]["last_error"] == "card_declined"
    with _open(store) as reader:
        normalized = [reader.normalize_message(m) for m in second["messages"]]
    assert normalized[2]["tool_calls"] == [{"id": normalized[3]["tool_call_id"], "name": "add_to_cart",
                                            "args": {"item": "apple", "qty": 2}}]
    assert normalized[3]["role"] == "tool" and normalized[3]["name"] == "add_to_cart"


def test_events_tool_calls_errors_and_pauses(store: str) -> None:
    _rows, events, _scan = _listed(store)
    found = {(e["run_id"], e["kind"], e["message"]) for e in events}
    declined = "checkout: Payment declined for card visa-4242: insufficient_funds (code 402)"
    assert (agno.CART1, "error", declined) in found
    assert (agno.CART1, "error", "the run failed: Service Unavailable: upstream overloaded") in found
    assert (agno.CART2, "interrupt", 'I have tools to execute, but I need confirmation. (waiting for confirmation '
            'of place_order({"address":"12 Rue des Lilas, Lyon"}))') in found
    assert (agno.CART1, "tool_call", 'connect_payment({"api_key":"[redacted]","provider":"stripe"})') in found


def test_the_secret_in_tool_arguments_is_redacted(store: str) -> None:
    from lastgood.redact import redact

    state = _state(store, agno.CART1, _run_id(store, agno.CART1, 2))
    text = json.dumps(state)
    assert agno.SECRET in text  # in the user text, the arguments JSON string, tool_args
    assert agno.SECRET not in json.dumps(redact(state))
    call = next(m for m in state["messages"] if "connect_payment" in json.dumps(m.get("tool_calls")))
    assert agno.SECRET in call["tool_calls"][0]["function"]["arguments"]  # a JSON *string*…
    assert agno.SECRET not in json.dumps(redact(call))  # …masked all the same


def test_restore_archives_later_runs_and_undo_puts_them_back(store: str) -> None:
    from lastgood.readers import journal as jr

    head, target = _run_id(store, agno.CART1, 4), _run_id(store, agno.CART1, 2)
    with _open(store) as reader:
        backend = reader.recovery()
        entry = {"id": jr.new_action_id(), "action": "restore", "operator": "t", "reason": "t"}
        sealed = backend.commit(jr.Change(agno.CART1, "", head, target, entry))
        assert sealed["new_head"] == target and backend.head(agno.CART1) == target
    assert agno.rows(store, "SELECT count(*) FROM agno_runs WHERE session_id = ?", (agno.CART1,)) == [(3,)]
    ((data,),) = agno.rows(store, "SELECT session_data FROM agno_sessions WHERE session_id = ?", (agno.CART1,))
    assert json.loads(data)["session_state"] == _state(store, agno.CART1, target)["session_state"]
    rows, _events, _scan = _listed(store)
    archived = [r for r in rows if r["status"] == Status.SUPERSEDED]
    assert {r["checkpoint_id"] for r in archived} == {_run_id_archived(store, 3), head}
    assert _state(store, agno.CART1, head)["session_state"]["last_error"] == "card_declined"  # still readable
    with _open(store) as reader:
        with pytest.raises(Exception, match="moved"):
            reader.recovery().commit(jr.Change(agno.CART1, "", head, target, {**entry, "id": "act-x"}))
        reader.recovery().commit(jr.Change(agno.CART1, "", target, head, {**entry, "id": jr.new_action_id(),
                                                                         "action": "undo"}))
    assert agno.rows(store, "SELECT count(*) FROM agno_runs WHERE session_id = ?", (agno.CART1,)) == [(5,)]
    session = "SELECT session_data FROM agno_sessions WHERE session_id = ?"
    assert agno.rows(store, session, (agno.CART1,)) == agno.rows(str(agno.SAMPLE), session, (agno.CART1,))


def _run_id_archived(url: str, index: int) -> str:
    return agno.rows(url, "SELECT run_id FROM lastgood_agno_archive WHERE json_extract(row, '$.run_index') = ?",
                     (index,))[0][0]


def _to_legacy(url: str) -> None:
    """Agno 2.x: the runs as a JSON list in agno_sessions.runs, no agno_runs table."""
    agno.sql(url, "ALTER TABLE agno_sessions ADD COLUMN runs JSON")
    agno.sql(url, """UPDATE agno_sessions SET runs = (SELECT json_group_array(json(run_data)) FROM
                     (SELECT run_data FROM agno_runs r WHERE r.session_id = agno_sessions.session_id
                      ORDER BY run_index))""")
    agno.sql(url, "DROP TABLE agno_runs")


def test_an_agno_2_store_lists_from_the_runs_column_read_only(store: str) -> None:
    from lastgood.readers import journal as jr

    before = _listed(store)[0]
    _to_legacy(store)
    rows, events, _scan = _listed(store)
    assert [(r["run_id"], r["checkpoint_id"], r["step"]) for r in rows] == [
        (r["run_id"], r["checkpoint_id"], r["step"]) for r in before]
    assert all(json.loads(r["metadata"])["legacy_runs_column"] for r in rows)
    assert any(e["kind"] == "interrupt" for e in events)
    last = rows[4]["checkpoint_id"]
    assert _state(store, agno.CART1, last)["session_state"]["last_error"] == "card_declined"
    with _open(store) as reader, pytest.raises(Exception, match="2.x runs column"):
        reader.recovery().commit(jr.Change(agno.CART1, "", last, rows[1]["checkpoint_id"],
                                           {"id": jr.new_action_id(), "action": "restore"}))


def test_cli_ls_show_verify_json(store: str, tmp_path: Path) -> None:
    home = tmp_path / "home"
    listed = json.loads(lastgood_cli("ls", store, "--format", "json", home=home).stdout)
    rows = listed["checkpoints"] if isinstance(listed, dict) else listed
    assert len(rows) == 12
    shown = lastgood_cli("show", store, _run_id(store, agno.CART1, 2), "--format", "json", home=home)
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout)["state"]["session_state"]["payment"]["key_last4"] == "b5Nc"
    assert agno.SECRET not in shown.stdout
    verified = lastgood_cli("verify", store, "--read-data", "--format", "json", home=home)
    assert verified.returncode == 0, verified.stderr
    assert json.loads(verified.stdout)["checked"] == 12


@pytest.mark.postgres
def test_postgres_tables_off_the_search_path_are_found(pg_create_database: Callable[[str], str]) -> None:
    from lastgood.readers.registry import pick_reader

    dsn = agno.postgres_store(pg_create_database("agno_ai"))  # schema "ai", not on the search path
    assert pick_reader(dsn) == "agno-postgres"
    rows, events, _scan = _listed(dsn)
    assert len(rows) == 12 and any(e["kind"] == "interrupt" for e in events)
    assert _state(dsn, agno.CART1, _run_id(dsn, agno.CART1, 1))["session_state"]["cart"] == {"apple": 2, "milk": 1}
    with pytest.raises(Exception, match="no Agno tables"):
        _open(dsn, db_schema="nope")


def test_a_continued_run_is_relisted_incrementally(store: str) -> None:
    """continue_run rewrites a PAUSED run in place (same run_id, later updated_at): found incrementally."""
    from lastgood.readers.base import as_table

    paused = _run_id(store, agno.CART2, 2)
    with _open(store) as reader:
        token = reader.scan().token
    agno.sql(store, """UPDATE agno_runs SET status = 'COMPLETED', updated_at = updated_at + 90,
                       run_data = json_set(run_data, '$.status', 'COMPLETED') WHERE run_id = ?""", (paused,))
    with _open(store) as reader:
        scan = reader.scan(token)
        rows = [r for b in scan.checkpoints for r in as_table(b).to_pylist()]
        assert not scan.full and {r["run_id"] for r in rows} == {agno.CART2}
        assert next(r for r in rows if r["checkpoint_id"] == paused)["trigger"] == "completed"
        assert reader.scan(scan.token).token == scan.token


def test_run_data_that_is_not_utf8_is_found_when_the_data_is_read(store: str, tmp_path: Path) -> None:
    """SQLite's JSON functions read past TEXT that is not UTF-8, Agno's driver fails the session on
    it: the data check names the run, its state is refused with that reason, the others show."""
    bad = _run_id(store, agno.CART1, 2)
    agno.sql(store, "UPDATE agno_runs SET run_data = CAST(X'7b2278223a22ff227d' AS TEXT) WHERE run_id = ?", (bad,))
    with _open(store) as reader:
        records = [CheckpointRecord(run_id=agno.CART1, checkpoint_id=_run_id(store, agno.CART1, i)) for i in range(5)]
        found = list(reader.check_checkpoints(records, read_data=True))
    assert [(f.check, f.checkpoint_id) for f in found] == [(Check.UNDECODABLE, bad)]
    assert "not UTF-8 text" in found[0].message
    with pytest.raises(Exception, match="not UTF-8 text"):
        _state(store, agno.CART1, bad)
    assert _state(store, agno.CART1, _run_id(store, agno.CART1, 3))["messages"]
    done = lastgood_cli("verify", store, "--read-data", home=tmp_path / "home")
    assert done.returncode != 0 and "not UTF-8 text" in done.stdout + done.stderr


def test_a_session_row_that_is_not_utf8_makes_each_of_its_runs_unreadable(store: str) -> None:
    """Agno reads the session's agno_sessions row first: TEXT there that is not UTF-8 fails the
    whole session, so every run of it is refused, naming the column; other sessions are untouched."""
    agno.sql(store, "UPDATE agno_sessions SET session_data = CAST(X'7b2278223a22ff227d' AS TEXT) WHERE session_id = ?",
             (agno.CART1,))
    with _open(store) as reader:
        found = list(reader.check_checkpoints(
            [CheckpointRecord(run_id=agno.CART1, checkpoint_id=_run_id(store, agno.CART1, i)) for i in range(5)]
            + [CheckpointRecord(run_id=agno.CART2, checkpoint_id=_run_id(store, agno.CART2, 0))], read_data=True))
    assert {f.run_id for f in found} == {agno.CART1} and len(found) == 5
    assert all("agno_sessions.session_data is not UTF-8 text" in f.message for f in found)


def _reads_each_session_once_then_sees_a_write(url: str, read: str) -> None:
    """Two data checks of CART1's runs, a run broken between them: the reader's ``read`` method
    is called once per check (not once per run), and the second check finds the broken run."""
    records = [CheckpointRecord(run_id=agno.CART1, checkpoint_id=_run_id(url, agno.CART1, i)) for i in range(5)]
    with _open(url) as reader:
        reads: list[str] = []
        real = getattr(reader, read)
        setattr(reader, read, lambda session: reads.append(session) or real(session))
        assert not list(reader.check_checkpoints(records, read_data=True))
        assert reads == [agno.CART1]
        agno.sql(url, "UPDATE agno_runs SET run_data = '[1]' WHERE run_id = ?", (records[2].checkpoint_id,))
        found = list(reader.check_checkpoints(records, read_data=True))
    assert reads == [agno.CART1, agno.CART1]
    assert [f.checkpoint_id for f in found] == [records[2].checkpoint_id]


def test_a_data_check_reads_each_session_once_and_a_write_is_seen(store: str) -> None:
    """A data check loads the state of each run of a session in turn: the session's runs (and the
    bytes of their run_data) are read once while the file is unchanged, and again after a write."""
    _reads_each_session_once_then_sees_a_write(store, "_read_session_runs")


@pytest.mark.postgres
def test_on_postgres_a_data_check_reads_each_session_once_a_batch(pg_create_database: Callable[[str], str]) -> None:
    """On PostgreSQL nothing tells cheaply whether a session changed: one batch of checks reads a
    session's runs once (not once per run), and the next batch reads them again and sees a write."""
    _reads_each_session_once_then_sees_a_write(agno.postgres_store(pg_create_database("agno_batch")), "_session_runs")
