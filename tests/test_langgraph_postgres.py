"""LangGraphPostgresReader against a real PostgreSQL written by LangGraph's own PostgresSaver.

Every scenario of ``tests/langgraph_graphs.py`` runs through a real
``PostgresSaver``; the reader (connected as a role that may only SELECT) must
list and decode exactly what LangGraph's ``saver.list`` / ``get_state_history``
return.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import psycopg
import pyarrow as pa
import pytest
from langgraph.checkpoint.postgres import PostgresSaver
from langgraph.checkpoint.serde.encrypted import EncryptedSerializer
from psycopg.rows import dict_row

from lastgood.errors import DecodeError, ReaderError, StoreNotFound
from lastgood.readers.base import CheckpointRecord, record_from_row
from lastgood.readers.langgraph.postgres import LangGraphPostgresReader
from lastgood.readers.langgraph.serde import is_internal_channel
from lastgood.readers.registry import open_reader
from tests.fixtures_pg import dsn_for_database
from tests.langgraph_graphs import BuiltThread, build_all, build_error, build_fork, build_tools
from tests.helpers import rows_and_findings

pytestmark = pytest.mark.postgres


@dataclass
class Store:
    dsn: str  # superuser
    readonly_dsn: str  # a role with SELECT rights only
    saver: PostgresSaver
    threads: list[BuiltThread]


def readonly_role(dsn: str) -> str:
    """A login role that can only SELECT in ``dsn``'s database; its DSN."""
    role = f"lastgood_ro_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f"CREATE ROLE {role} LOGIN")
        conn.execute("REVOKE CREATE ON SCHEMA public FROM PUBLIC")
        conn.execute(f"GRANT USAGE ON SCHEMA public TO {role}")
        conn.execute(f"GRANT SELECT ON ALL TABLES IN SCHEMA public TO {role}")
    return dsn.replace("postgres@", f"{role}@", 1)


@pytest.fixture(scope="module")
def store(pg_module_dsn: str) -> Iterator[Store]:
    with PostgresSaver.from_conn_string(pg_module_dsn) as saver:
        saver.setup()
        threads = build_all(saver)
        yield Store(pg_module_dsn, readonly_role(pg_module_dsn), saver, threads)


@pytest.fixture(scope="module")
def reader(store: Store) -> Iterator[LangGraphPostgresReader]:
    with LangGraphPostgresReader(store.readonly_dsn) as opened:
        yield opened


@pytest.fixture(scope="module")
def listing(reader: LangGraphPostgresReader) -> dict[tuple[str, str, str], CheckpointRecord]:
    scan = reader.scan()
    rows = pa.concat_tables(list(scan.checkpoints)).to_pylist()
    return {(r["run_id"], r["namespace"], r["checkpoint_id"]): record_from_row(r) for r in rows}


def namespaces(store: Store, thread: BuiltThread) -> list[str]:
    with psycopg.connect(store.dsn) as conn:
        rows = conn.execute("SELECT DISTINCT checkpoint_ns FROM checkpoints WHERE thread_id = %s",
                            (thread.thread_id,)).fetchall()
    return sorted(r[0] for r in rows)


def saver_tuples(store: Store, thread: BuiltThread, ns: str) -> list[Any]:
    config = {"configurable": {"thread_id": thread.thread_id, "checkpoint_ns": ns}}
    return list(store.saver.list(config))


def plain(value: Any) -> Any:
    """LangChain messages (objects or the reader's dicts) as (role, content, tool calls)."""
    if isinstance(value, list):
        return [plain(v) for v in value]
    if type(value).__name__ == "_DeltaSnapshot":  # a DeltaChannel snapshot as the saver loads it
        return plain(value.value)
    if hasattr(value, "type") and hasattr(value, "content"):
        calls = [(c["name"], c["args"], c["id"]) for c in getattr(value, "tool_calls", None) or []]
        return (value.type, value.content, calls)
    if isinstance(value, dict) and "role" in value and "tool_calls" in value:
        return (value["role"], value["content"], [(c["name"], c["args"], c["id"]) for c in value["tool_calls"]])
    return value


def user_channels(values: dict[str, Any]) -> dict[str, Any]:
    return {k: plain(v) for k, v in values.items() if not is_internal_channel(k)}


# --- listing ------------------------------------------------------------------------------


def test_listing_matches_saver_list(store: Store, listing: dict) -> None:
    checked = 0
    for thread in store.threads:
        for ns in namespaces(store, thread):
            expected = {t.config["configurable"]["checkpoint_id"]: t for t in saver_tuples(store, thread, ns)}
            ours = {cid: r for (run, n, cid), r in listing.items() if run == thread.thread_id and n == ns}
            assert set(ours) == set(expected), (thread.name, ns)
            for cid, tup in expected.items():
                record = ours[cid]
                parent = tup.parent_config["configurable"]["checkpoint_id"] if tup.parent_config else None
                assert record.parent_id == parent
                assert record.step == tup.metadata["step"]
                assert record.trigger == tup.metadata["source"]
                assert record.status == "ok"
                assert record.size_bytes and record.size_bytes > 0
                assert record.created_at is not None
                checked += 1
    assert checked == len(listing)
    assert {n for (_r, n, _c) in listing} > {""}, "a subgraph namespace is listed"


def test_listing_matches_state_history(store: Store, listing: dict) -> None:
    for thread in store.threads:
        history = list(thread.graph.get_state_history(thread.config))
        ours = sorted((cid for (run, ns, cid) in listing if run == thread.thread_id and ns == ""), reverse=True)
        assert ours == [s.config["configurable"]["checkpoint_id"] for s in history], thread.name


def test_heads_are_newest_per_namespace(store: Store, reader: LangGraphPostgresReader) -> None:
    heads = {(h.run_id, h.namespace): h.checkpoint_id for h in reader.scan().heads or []}
    for thread in store.threads:
        for ns in namespaces(store, thread):
            newest = saver_tuples(store, thread, ns)[0]
            assert heads[(thread.thread_id, ns)] == newest.config["configurable"]["checkpoint_id"]


# --- states -----------------------------------------------------------------------------------


def test_states_match_langgraph(store: Store, reader: LangGraphPostgresReader, listing: dict) -> None:
    for thread in store.threads:
        history = {s.config["configurable"]["checkpoint_id"]: s.values
                   for s in thread.graph.get_state_history(thread.config)}
        for ns in namespaces(store, thread):
            for tup in saver_tuples(store, thread, ns):
                cid = tup.config["configurable"]["checkpoint_id"]
                ours = user_channels(reader.load_state(listing[(thread.thread_id, ns, cid)]))
                stored = user_channels(tup.checkpoint["channel_values"])
                for channel, value in stored.items():  # what the saver itself decodes
                    assert ours[channel] == value, (thread.name, ns, cid, channel)
                for channel, value in user_channels(history.get(cid, {}) if ns == "" else {}).items():
                    # rebuilt DeltaChannels; reducers LangGraph shows with their empty default
                    assert ours.get(channel, []) == value, (thread.name, cid, channel)
                assert set(ours) <= set(stored) | set(history.get(cid, {}) if ns == "" else {})


def test_delta_channel_is_rebuilt(store: Store, reader: LangGraphPostgresReader, listing: dict) -> None:
    thread = next(t for t in store.threads if t.name == "delta")
    head = max(cid for (run, _ns, cid) in listing if run == thread.thread_id)
    messages = reader.load_state(listing[(thread.thread_id, "", head)])["messages"]
    assert [m["content"] for m in messages][-2:] == ["turn 3", "reply 4"]


# --- writes and events ------------------------------------------------------------------------


def test_error_writes_become_events(store: Store, reader: LangGraphPostgresReader, listing: dict) -> None:
    thread = next(t for t in store.threads if t.name == "error")
    events = pa.concat_tables(list(reader.scan().events)).to_pylist()
    errors = [e for e in events if e["run_id"] == thread.thread_id and e["kind"] == "error"]
    assert len(errors) == 1 and "branch b exploded" in errors[0]["message"]
    assert errors[0]["channel"] == "__error__"
    tup = next(t for t in saver_tuples(store, thread, "") if t.pending_writes)
    assert errors[0]["checkpoint_id"] == tup.config["configurable"]["checkpoint_id"]
    record = listing[(thread.thread_id, "", errors[0]["checkpoint_id"])]
    ours = {(w.task_id, w.channel): w.value for w in reader.pending_writes(record)}
    assert ours == {(task, channel): value for task, channel, value in tup.pending_writes}
    found = list(reader.check_checkpoints([record], read_data=True))
    assert [f.check for f in found] == ["pending-error"]
    assert found[0].severity == "warning" and found[0].checkpoint_id == record.checkpoint_id


def test_interrupt_and_resume_events(store: Store, reader: LangGraphPostgresReader) -> None:
    events = pa.concat_tables(list(reader.scan().events)).to_pylist()
    kinds = {(e["run_id"], e["kind"]) for e in events}
    assert {("interrupt-1", "interrupt"), ("interrupt-1", "resume")} <= kinds
    asked = next(e for e in events if e["run_id"] == "interrupt-1" and e["kind"] == "interrupt")
    assert "approve the plan?" in asked["message"]


def test_clean_store_has_no_findings(store: Store, reader: LangGraphPostgresReader, listing: dict) -> None:
    assert reader.scan().findings == []
    found = list(reader.check_checkpoints(listing.values(), read_data=True))
    assert {f.check for f in found} == {"pending-error"}
    structure = list(reader.check_checkpoints(listing.values(), read_data=False))
    assert structure and {f.check for f in structure} == {"pending-error"}  # a failed task, no decode
    assert {(f.checkpoint_id, f.message) for f in structure} == \
        {(f.checkpoint_id, f.message) for f in found if f.check == "pending-error"}


def test_read_blob_holds_row_and_blobs(reader: LangGraphPostgresReader, listing: dict) -> None:
    record = max((r for r in listing.values() if r.run_id == "tools-1"), key=lambda r: r.checkpoint_id)
    document = json.loads(reader.read_blob(record))
    assert document["checkpoint"]["id"] == record.checkpoint_id
    assert document["parent_checkpoint_id"] == record.parent_id
    assert document["metadata"]["step"] == record.step
    assert "messages" in {b["channel"] for b in document["blobs"]}
    assert reader.read_blob(record) == reader.read_blob(record)


# --- the reader never writes ----------------------------------------------------------------------


def fingerprint(dsn: str) -> list[Any]:
    """Tables and a digest of every row LangGraph stores."""
    with psycopg.connect(dsn) as conn:
        tables = conn.execute("SELECT tablename FROM pg_tables WHERE schemaname = 'public' ORDER BY 1").fetchall()
        digests = [conn.execute(f"SELECT count(*), md5(coalesce(string_agg(t::text, '|' ORDER BY t::text), '')) "
                                f"FROM {name} t").fetchone() for (name,) in tables]
    return [tables, digests]


def test_reader_needs_only_select_and_changes_nothing(store: Store, listing: dict) -> None:
    with psycopg.connect(store.readonly_dsn) as conn, pytest.raises(psycopg.errors.InsufficientPrivilege):
        conn.execute("DELETE FROM checkpoints")
    before = fingerprint(store.dsn)
    with LangGraphPostgresReader(store.readonly_dsn) as fresh:
        for batch in fresh.scan().checkpoints:
            assert batch.num_rows
        for record in listing.values():
            fresh.load_state(record)
            fresh.read_blob(record)
            fresh.pending_writes(record)
        list(fresh.check_checkpoints(listing.values(), read_data=True))
    assert fingerprint(store.dsn) == before


def test_registry_opens_postgres_urls(store: Store) -> None:
    with open_reader(store.readonly_dsn) as opened:
        assert isinstance(opened, LangGraphPostgresReader)
    assert LangGraphPostgresReader.sniff(store.readonly_dsn) and not LangGraphPostgresReader.sniff("x.sqlite")
    # picked by its tables, so a database that cannot be reached cannot be sniffed: one clear line, no password
    with pytest.raises(StoreNotFound, match=r"cannot connect to postgres://nowhere\.invalid/db") as raised:
        LangGraphPostgresReader.sniff("postgres://u:hunter2@nowhere.invalid/db")
    assert "hunter2" not in str(raised.value)


# --- damage and bad DSNs --------------------------------------------------------------------------


@pytest.fixture
def damaged_dsn(pg_create_database: Callable[[str], str]) -> str:
    dsn = pg_create_database("damaged")
    with PostgresSaver.from_conn_string(dsn) as saver:
        saver.setup()
        build_tools(saver)
        build_fork(saver)
    return dsn


def _records(reader: LangGraphPostgresReader) -> tuple[list[CheckpointRecord], Any]:
    scan = reader.scan()
    rows = pa.concat_tables(list(scan.checkpoints)).to_pylist()
    return [record_from_row(r) for r in rows], scan


def test_damaged_blob_is_reported_for_its_checkpoints_only(damaged_dsn: str) -> None:
    with psycopg.connect(damaged_dsn, autocommit=True) as conn:
        version = conn.execute("SELECT version FROM checkpoint_blobs WHERE thread_id = 'tools-1' "
                               "AND channel = 'messages' ORDER BY version LIMIT 1 OFFSET 1").fetchone()[0]
        conn.execute("UPDATE checkpoint_blobs SET blob = %s WHERE thread_id = 'tools-1' AND channel = 'messages' "
                     "AND version = %s", (b"\xc1\xc1 not msgpack", version))
        hit = {r[0] for r in conn.execute("SELECT checkpoint_id FROM checkpoints WHERE thread_id = 'tools-1' "
                                          "AND checkpoint -> 'channel_versions' ->> 'messages' = %s", (version,))}
    with LangGraphPostgresReader(damaged_dsn) as reader:
        records, scan = _records(reader)
        assert hit and scan.findings == []
        for record in records:
            if record.checkpoint_id in hit:
                with pytest.raises(DecodeError, match="channel 'messages'.*msgpack"):
                    reader.load_state(record)
            else:
                assert isinstance(reader.load_state(record), dict)
        found = list(reader.check_checkpoints(records, read_data=True))
        assert {f.checkpoint_id for f in found if f.check == "undecodable"} == hit
        assert all(f.severity == "error" for f in found if f.check == "undecodable")
        assert {f.check for f in reader.check_checkpoints(records, read_data=False)} <= {"pending-error"}


def test_unknown_codec_and_missing_parent(damaged_dsn: str) -> None:
    with psycopg.connect(damaged_dsn, autocommit=True) as conn:
        conn.execute("UPDATE checkpoint_blobs SET type = 'zstd-msgpack' WHERE thread_id = 'fork-1' "
                     "AND channel = 'messages'")
        middle, child = conn.execute(
            "SELECT c.parent_checkpoint_id, c.checkpoint_id FROM checkpoints c WHERE thread_id = 'tools-1' "
            "AND (metadata ->> 'step')::int = 2").fetchone()
        conn.execute("DELETE FROM checkpoints WHERE thread_id = 'tools-1' AND checkpoint_id = %s", (middle,))
    with LangGraphPostgresReader(damaged_dsn) as reader:
        records, scan = _records(reader)
        broken = next(r for r in records if r.checkpoint_id == child)
        assert broken.status == "corrupt" and middle in (broken.status_reason or "")
        assert [(f.check, f.checkpoint_id) for f in scan.findings] == [("parent-missing", child)]
        fork = [r for r in records if r.run_id == "fork-1"]
        codecs = list(reader.check_checkpoints(fork, read_data=False))
        assert codecs and {f.check for f in codecs} == {"unknown-codec"}
        with pytest.raises(DecodeError, match="zstd-msgpack"):
            reader.load_state(next(r for r in fork if r.checkpoint_id in {f.checkpoint_id for f in codecs}))


def test_damaged_checkpoint_jsonb_fails_alone(damaged_dsn: str) -> None:
    with psycopg.connect(damaged_dsn, autocommit=True) as conn:
        bad = conn.execute("SELECT checkpoint_id FROM checkpoints WHERE thread_id = 'tools-1' "
                           "AND (metadata ->> 'step')::int = 1").fetchone()[0]
        conn.execute("""UPDATE checkpoints SET checkpoint = checkpoint || '{"channel_versions": "x",
                        "updated_channels": null}' WHERE checkpoint_id = %s""", (bad,))
    with LangGraphPostgresReader(damaged_dsn) as reader:
        records, _scan = _records(reader)
        broken = next(r for r in records if r.checkpoint_id == bad)
        with pytest.raises(DecodeError, match="not objects"):
            reader.load_state(broken)
        found = list(reader.check_checkpoints(records, read_data=False))
        assert [(f.check, f.checkpoint_id) for f in found] == [("undecodable", bad)]
        assert all(isinstance(reader.load_state(r), dict) for r in records if r.checkpoint_id != bad)


def test_sizes_add_up_to_stored_bytes(store: Store, listing: dict) -> None:
    """Each checkpoint counts its row and the blobs it introduced, so a thread sums to its storage."""
    with psycopg.connect(store.dsn) as conn:
        stored = conn.execute(
            "SELECT (SELECT sum(pg_column_size(checkpoint)) FROM checkpoints WHERE thread_id = 'tools-1') "
            "+ (SELECT sum(pg_column_size(blob)) FROM checkpoint_blobs WHERE thread_id = 'tools-1')").fetchone()[0]
    assert sum(r.size_bytes for (run, _ns, _c), r in listing.items() if run == "tools-1") == stored


def test_encrypted_store(pg_create_database: Callable[[str], str], monkeypatch: pytest.MonkeyPatch) -> None:
    dsn, key = pg_create_database("encrypted"), b"0123456789abcdef"
    serde = EncryptedSerializer.from_pycryptodome_aes(key=key)
    with psycopg.connect(dsn, autocommit=True, prepare_threshold=0, row_factory=dict_row) as conn:
        saver = PostgresSaver(conn, serde=serde)
        saver.setup()
        build_tools(saver)
    monkeypatch.delenv("LANGGRAPH_AES_KEY", raising=False)
    with LangGraphPostgresReader(dsn) as reader:
        records, _scan = _records(reader)
        head = max(records, key=lambda r: r.checkpoint_id)
        assert reader.load_state(head)["messages"]["$encrypted"] == "msgpack+aes"
        found = list(reader.check_checkpoints(records, read_data=True))
        assert found and {(f.check, f.severity) for f in found} == {("encrypted", "info")}
    with LangGraphPostgresReader(dsn, {"aes_key": key}) as reader:
        messages = reader.load_state(head)["messages"]
        assert [m["content"] for m in messages][-1] == "The answer is 3"
        assert list(reader.check_checkpoints(records, read_data=True)) == []


def test_refresh_token_and_appends(pg_create_database: Callable[[str], str]) -> None:
    dsn = pg_create_database("live")
    with PostgresSaver.from_conn_string(dsn) as saver:
        saver.setup()
        build_tools(saver)
        with LangGraphPostgresReader(dsn) as reader:
            first = reader.scan()
            total = sum(b.num_rows for b in first.checkpoints)
            same = reader.scan(first.token)
            assert same.token == first.token and not same.full and list(same.checkpoints) == []
            build_error(saver)
            later = reader.scan(first.token)
            added = pa.concat_tables(list(later.checkpoints)).to_pylist()
            assert not later.full and {r["run_id"] for r in added} == {"error-1"}
            assert [h.run_id for h in later.heads or []] == ["error-1"]
            assert "error" in {e["kind"] for t in later.events for e in t.to_pylist()}
            with psycopg.connect(dsn, autocommit=True) as conn:
                conn.execute("DELETE FROM checkpoints WHERE thread_id = 'error-1'")
            rescan = reader.scan(later.token)
            assert rescan.full and sum(b.num_rows for b in rescan.checkpoints) == total


def test_database_without_langgraph_tables(pg_create_database: Callable[[str], str]) -> None:
    with pytest.raises(ReaderError, match="no LangGraph PostgresSaver tables"):
        LangGraphPostgresReader(pg_create_database("empty"))


def test_unreachable_dsn_hides_password(pg_dsn: str) -> None:
    missing_db = dsn_for_database(pg_dsn, "no_such_db").replace("postgres@", "postgres:s3cr3t-pw@", 1)
    with pytest.raises(StoreNotFound) as caught:
        LangGraphPostgresReader(missing_db)
    assert "s3cr3t-pw" not in str(caught.value) and "\n" not in str(caught.value)
    assert "no_such_db" in str(caught.value)
    closed_port = "postgresql://user:s3cr3t-pw@127.0.0.1:1/db"
    with pytest.raises((StoreNotFound, ReaderError)) as caught:
        LangGraphPostgresReader(closed_port)
    assert "s3cr3t-pw" not in str(caught.value) and "\n" not in str(caught.value)


def test_rows_with_bad_key_columns_become_findings(damaged_dsn: str) -> None:
    """Postgres rows pass the same validation boundary as SQLite rows (issue #7): an empty
    or oversized id is a finding naming the row, every other row still loads."""
    with psycopg.connect(damaged_dsn, autocommit=True) as conn:
        ids = [r[0] for r in conn.execute("SELECT checkpoint_id FROM checkpoints WHERE thread_id = 'fork-1' "
                                          "ORDER BY checkpoint_id")]
        total = conn.execute("SELECT count(*) FROM checkpoints").fetchone()[0]
        conn.execute("UPDATE checkpoints SET checkpoint_id = '' WHERE checkpoint_id = %s", (ids[1],))
        conn.execute("UPDATE checkpoints SET checkpoint_id = repeat('x', 2000) WHERE checkpoint_id = %s", (ids[-1],))
    with LangGraphPostgresReader(damaged_dsn) as reader:
        records, scan = _records(reader)
        invalid = sorted((f for f in scan.findings if f.check == "row-invalid"), key=lambda f: len(f.message))
        assert len(records) == total - 2 and {r.checkpoint_id for r in records}.isdisjoint({"", "x" * 2000})
        assert len(invalid) == 2 and all(f.severity == "error" and f.run_id == "fork-1" for f in invalid)
        assert "checkpoint '')" in invalid[0].message and "checkpoint_id is missing" in invalid[0].message
        assert "checkpoint_id is 2000 characters long" in invalid[1].message
        assert "x" * 2000 not in invalid[1].message  # the row is named, shortened
        assert all(h.checkpoint_id in {r.checkpoint_id for r in records} for h in scan.heads)
        assert all(isinstance(reader.load_state(r), dict) for r in records if r.run_id == "tools-1")


# --- the structure check a full listing answers ---------------------------------------------


def _structure_keyed(reader: LangGraphPostgresReader, records: list[CheckpointRecord]) -> list[Any]:
    return sorted(reader.check_checkpoints(records, read_data=False), key=repr)


@pytest.fixture
def every_damage_dsn(damaged_dsn: str) -> str:
    """The damaged DB plus a failed task, an unknown codec, a malformed and a mislabelled
    checkpoint JSONB, and a row whose key the listing rejects."""
    with PostgresSaver.from_conn_string(damaged_dsn) as saver:
        build_error(saver)
    with psycopg.connect(damaged_dsn, autocommit=True) as conn:
        conn.execute("UPDATE checkpoint_blobs SET type = 'zstd-msgpack' WHERE thread_id = 'fork-1' "
                     "AND channel = 'messages'")
        ids = [r[0] for r in conn.execute("SELECT checkpoint_id FROM checkpoints WHERE thread_id = 'tools-1' "
                                          "ORDER BY checkpoint_id")]
        conn.execute("""UPDATE checkpoints SET checkpoint = checkpoint || '{"channel_values": [1]}'
                        WHERE checkpoint_id = %s""", (ids[1],))
        conn.execute("""UPDATE checkpoints SET checkpoint = checkpoint || '{"id": "someone-else"}'
                        WHERE checkpoint_id = %s""", (ids[2],))
        conn.execute("UPDATE checkpoints SET checkpoint_id = '' WHERE checkpoint_id = %s", (ids[3],))
    return damaged_dsn


def test_full_listing_answers_the_structure_check(every_damage_dsn: str) -> None:
    """After a full scan the reader gives the structure findings of exactly the listed
    checkpoints (asked once for the whole store), equal to the keyed set-based check."""
    with LangGraphPostgresReader(every_damage_dsn) as reader:
        assert reader.listed_structure(None) is None  # nothing listed yet
        records, scan = _records(reader)
        answer = reader.listed_structure(scan.token)
        assert answer is not None and reader.listed_structure("another token") is None
        count, found = answer
        assert count == len(records)
        assert sorted(found, key=repr) == _structure_keyed(reader, records)
        assert {f.check for f in found} == {"pending-error", "unknown-codec", "undecodable", "id-mismatch"}
        assert all(f.checkpoint_id != "" for f in found)  # the rejected row's problems are its scan finding
        assert {f.check for f in scan.findings} == {"row-invalid", "parent-missing"}  # its child lost it
        again = reader.scan(scan.token)  # unchanged: nothing listed, the answer stays
        assert list(again.checkpoints) == [] and reader.listed_structure(scan.token) == answer


def test_index_records_the_same_with_and_without_the_listed_answer(
        every_damage_dsn: str, tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    from lastgood.index.catalog import Catalog
    from lastgood.stores import index_store

    results, keyed_calls = [], []
    real = LangGraphPostgresReader.check_structure
    monkeypatch.setattr(LangGraphPostgresReader, "check_structure",
                        lambda self, keys: keyed_calls.append(len(keys)) or real(self, keys))
    for listed in (True, False):
        if not listed:
            monkeypatch.setattr(LangGraphPostgresReader, "listed_structure", lambda self, token: None)
        catalog = Catalog(tmp_path / f"index-{listed}.duckdb")
        summary = index_store(catalog, every_damage_dsn, check="structure")
        assert summary.verify is not None and summary.verify.checked == summary.refresh.checkpoints
        assert bool(keyed_calls) is not listed
        results.append(rows_and_findings(catalog))
    assert results[0] == results[1]
    assert {f[1] for f in results[0][1]} >= {"pending-error", "unknown-codec", "undecodable", "id-mismatch"}


def test_listing_split_across_two_connections_lists_the_same(
        every_damage_dsn: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Halves by page range on two connections sharing one snapshot (structure checks on a
    third, beside them) list exactly what one connection lists, findings included, for a
    role that may only SELECT."""
    import threading

    from lastgood.readers.langgraph import postgres as pg_reader
    from lastgood.readers.langgraph import postgres_fetch as fetch

    with psycopg.connect(every_damage_dsn) as conn:
        pages = conn.execute("SELECT pg_relation_size('checkpoints') / 8192").fetchone()[0]
    assert pages >= 2  # both halves hold rows
    select_only = readonly_role(every_damage_dsn)
    results, opened = [], []
    real_connect = pg_reader.connect_readonly

    def connect(url: str) -> Any:  # with ``refused``, the server takes no third connection
        opened.append(url)
        if refused and len(opened) > 2:
            raise StoreNotFound("too many connections")
        return real_connect(url)

    monkeypatch.setattr(pg_reader, "connect_readonly", connect)
    monkeypatch.setattr(pg_reader, "BATCH_ROWS", 3)  # many batches from each half
    for split, refused in ((False, False), (True, False), (True, True)):
        monkeypatch.setattr(fetch, "MIN_SPLIT_PAGES", 1 if split else 10**9)
        opened.clear()
        with LangGraphPostgresReader(select_only) as reader:
            records, scan = _records(reader)
            listed = reader.listed_structure(scan.token)
            assert listed is not None and not reader._scans  # every listing connection closed
        # the reader's own, the listing's (+ its other half, + the structure check's; refused: one try)
        assert len(opened) == {(False, False): 2, (True, False): 4, (True, True): 3}[split, refused]
        results.append((sorted(map(repr, records)), sorted(map(repr, scan.findings)),
                        listed[0], sorted(map(repr, listed[1]))))
    assert results[0] == results[1] == results[2]
    assert not [t for t in threading.enumerate() if t.name.startswith("lastgood-pg-")]


def test_listing_stopped_early_ends_its_threads_and_connections(
        every_damage_dsn: str, monkeypatch: pytest.MonkeyPatch) -> None:
    import threading

    from lastgood.readers.langgraph import postgres as pg_reader
    from lastgood.readers.langgraph import postgres_fetch as fetch

    monkeypatch.setattr(fetch, "MIN_SPLIT_PAGES", 1)
    monkeypatch.setattr(pg_reader, "BATCH_ROWS", 2)
    with LangGraphPostgresReader(every_damage_dsn) as reader:
        scan = reader.scan()
        first = next(scan.checkpoints)
        assert first.num_rows == 2 and len(reader._scans) == 3  # the listing, its other half, the structure
        scan.checkpoints.close()  # type: ignore[attr-defined]
        assert not reader._scans and reader.listed_structure(scan.token) is None
    assert not [t for t in threading.enumerate() if t.name.startswith("lastgood-pg-")]


def test_reader_sessions_are_read_only_without_jit(store: Store) -> None:
    """JIT is switched off by a statement (no startup option a pooler could refuse)."""
    from lastgood.readers.common.postgres import connect_readonly

    with connect_readonly(store.readonly_dsn) as conn:
        assert conn.execute("SHOW jit").fetchone()[0] == "off"
        assert conn.execute("SHOW transaction_read_only").fetchone()[0] == "on"


def test_task_nodes_name_the_nodes_whose_tasks_ran(store: Store, reader: LangGraphPostgresReader) -> None:
    threads = {t.thread_id for t in store.threads}
    nodes = reader.task_nodes(sorted(threads))
    names = {n for found in nodes.values() for n in found}
    assert {"__start__", "agent", "tools", "child_step"} <= names  # child_step: a subgraph's node
    assert {key[0] for key in nodes} <= threads and any(key[1] for key in nodes)  # keyed by namespace too
    assert reader.task_nodes([]) == {}
