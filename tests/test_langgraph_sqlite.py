"""LangGraphSqliteReader against real SqliteSaver databases written by real graphs."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sqlite3
import threading
import time
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from langgraph.checkpoint.sqlite import SqliteSaver

from lastgood.errors import ReaderError, StoreNotFound
from lastgood.readers.base import CHECKPOINT_SCHEMA, EVENT_SCHEMA, CheckpointRecord, record_from_row
from lastgood.readers.langgraph.delta import DELTA_NOTE
from lastgood.readers.langgraph.serde import decode_typed, is_internal_channel
from lastgood.readers.common.sqlite import sqlite_path
from lastgood.readers.langgraph.sqlite import LangGraphSqliteReader
from lastgood.readers.registry import open_reader, pick_reader
from tests.langgraph_graphs import SqliteStore, build_tools, tool_loop_graph, write_sqlite_store


@pytest.fixture(scope="session")
def lg_store(tmp_path_factory: pytest.TempPathFactory) -> SqliteStore:
    return write_sqlite_store(tmp_path_factory.mktemp("lg-sqlite") / "checkpoints.sqlite")


@pytest.fixture(scope="session")
def listing(lg_store: SqliteStore) -> tuple[pa.Table, Any]:
    with LangGraphSqliteReader(str(lg_store.path)) as reader:
        scan = reader.scan()
        table = pa.concat_tables(list(scan.checkpoints))
        events = pa.concat_tables(list(scan.events))
    return table, scan, events


def _records(table: pa.Table, thread_id: str, namespace: str = "") -> list[CheckpointRecord]:
    rows = [r for r in table.to_pylist() if r["run_id"] == thread_id and r["namespace"] == namespace]
    return sorted((record_from_row(r) for r in rows), key=lambda r: r.checkpoint_id, reverse=True)


def _user_values(state: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in state.items() if not is_internal_channel(k)}


def _stored(values: dict[str, Any]) -> dict[str, Any]:
    """LangGraph shows a reducer channel that was never written as ``[]`` (its
    empty default, known from the graph); the store has no value for it."""
    return {k: v for k, v in values.items() if v != []}


# --- equivalence with LangGraph ------------------------------------------------


def test_listing_matches_langgraph(lg_store: SqliteStore, listing: Any) -> None:
    table, scan, _ = listing
    assert table.schema == CHECKPOINT_SCHEMA
    assert scan.full and not scan.findings
    assert table.num_rows == sum(len(h) for h in lg_store.expected.values())
    for (thread_id, ns), history in lg_store.expected.items():
        records = _records(table, thread_id, ns)
        got = [(r.checkpoint_id, r.parent_id, r.step, r.trigger) for r in records]
        want = [(h["checkpoint_id"], h["parent_id"], h["step"], h["source"]) for h in history]
        assert got == want, (thread_id, ns)
        assert all(r.status == "ok" and r.kind == "full" and r.codec == "msgpack" for r in records)


def test_namespaces_include_the_subgraph(lg_store: SqliteStore, listing: Any) -> None:
    table, _, _ = listing
    namespaces = {r["namespace"] for r in table.to_pylist() if r["run_id"] == "subgraph-1"}
    assert "" in namespaces and any(ns.startswith("child:") for ns in namespaces)


@pytest.mark.parametrize("name", ["tools", "interrupt", "fork", "subgraph", "error", "delta"])
def test_states_match_langgraph(lg_store: SqliteStore, listing: Any, name: str) -> None:
    table, _, _ = listing
    thread = next(t for t in lg_store.threads if t.name == name)
    with LangGraphSqliteReader(str(lg_store.path)) as reader:
        for ns in thread.namespaces:
            history = lg_store.expected[(thread.thread_id, ns)]
            for record, want in zip(_records(table, thread.thread_id, ns), history, strict=True):
                state = reader.load_state(record)
                assert _stored(_user_values(state)) == _stored(want["values"]), (name, ns, record.step)


def test_user_channels_come_first(lg_store: SqliteStore, listing: Any) -> None:
    table, _, _ = listing
    with LangGraphSqliteReader(str(lg_store.path)) as reader:
        for record in _records(table, "tools-1"):
            keys = list(reader.load_state(record))
            flags = [is_internal_channel(k) for k in keys]
            assert flags == sorted(flags), keys


def test_pending_writes_match_langgraph(lg_store: SqliteStore, listing: Any) -> None:
    table, _, _ = listing
    with LangGraphSqliteReader(str(lg_store.path)) as reader:
        for (thread_id, ns), history in lg_store.expected.items():
            for record, want in zip(_records(table, thread_id, ns), history, strict=True):
                got = [(w.task_id, w.channel) for w in reader.pending_writes(record)]
                assert got == [(t, ch) for t, ch, _ in want["pending_writes"]]


def test_created_at_comes_from_the_uuid6_id(lg_store: SqliteStore, listing: Any) -> None:
    table, _, _ = listing
    with LangGraphSqliteReader(str(lg_store.path)) as reader:
        for record in (record_from_row(r) for r in table.to_pylist()):
            ts = datetime.fromisoformat(decode_typed("msgpack", reader.read_blob(record))["ts"])
            assert record.created_at is not None and record.created_at.tzinfo is not None
            assert abs(record.created_at - ts) < timedelta(seconds=1)


def test_delta_channel_threads_are_detected(lg_store: SqliteStore, listing: Any) -> None:
    table, _, _ = listing
    records = _records(table, "delta-plain-1")
    want = lg_store.expected[("delta-plain-1", "")]
    with LangGraphSqliteReader(str(lg_store.path)) as reader:
        for record, expected in zip(records, want, strict=True):
            numbers = reader.load_state(record).get("numbers")
            if expected["values"].get("numbers", []) == []:  # never written
                assert numbers is None
            elif isinstance(numbers, dict):  # rebuilt by LangGraph from writes: shown, not hidden
                assert numbers["$not_shown"] == DELTA_NOTE
                seed = numbers["seed"] or []  # None: no stored value yet, LangGraph starts empty
                assert numbers["writes"]
                assert expected["values"]["numbers"][: len(seed)] == seed
            else:  # stored in this checkpoint, or nothing written since the stored value
                assert numbers == expected["values"]["numbers"]
        assert any(isinstance(reader.load_state(r).get("numbers"), dict) for r in records)


# --- events, heads, findings -----------------------------------------------------------


def test_events(listing: Any) -> None:
    _, _, events = listing
    assert events.schema == EVENT_SCHEMA
    rows = events.to_pylist()
    errors = [r for r in rows if r["kind"] == "error"]
    assert [(r["run_id"], r["channel"]) for r in errors] == [("error-1", "__error__")]
    assert "branch b exploded" in errors[0]["message"]
    interrupts = {r["run_id"] for r in rows if r["kind"] == "interrupt"}
    assert {"interrupt-1", "subgraph-1"} <= interrupts
    assert any(r["kind"] == "resume" and r["message"] == "yes" for r in rows)
    assert any("approve the plan?" in (r["message"] or "") for r in rows if r["kind"] == "interrupt")


def test_heads_are_the_max_checkpoint_id(lg_store: SqliteStore, listing: Any) -> None:
    _, scan, _ = listing
    heads = {(h.run_id, h.namespace): h.checkpoint_id for h in scan.heads}
    assert heads == {key: max(h["checkpoint_id"] for h in hist) for key, hist in lg_store.expected.items()}


def test_check_checkpoints_reports_the_failed_task(lg_store: SqliteStore, listing: Any) -> None:
    table, _, _ = listing
    records = [record_from_row(r) for r in table.to_pylist()]
    with LangGraphSqliteReader(str(lg_store.path)) as reader:
        findings = list(reader.check_checkpoints(records, read_data=True))
        assert [f.check for f in findings] == ["pending-error"]
        assert findings[0].run_id == "error-1" and "branch b exploded" in findings[0].message
        quick = list(reader.check_checkpoints(records, read_data=False))  # structure depth
    assert [(f.check, f.severity, f.checkpoint_id, f.message) for f in quick] == [
        (f.check, f.severity, f.checkpoint_id, f.message) for f in findings]


# --- read-only ----------------------------------------------------------------------------


def _fingerprint(directory: Path) -> dict[str, tuple[str, int]]:
    return {p.name: (hashlib.sha256(p.read_bytes()).hexdigest(), p.stat().st_mtime_ns)
            for p in sorted(directory.iterdir())}


def test_reading_changes_nothing(lg_store: SqliteStore) -> None:
    directory = Path(lg_store.path).parent
    before = _fingerprint(directory)
    with LangGraphSqliteReader(f"file://{lg_store.path}") as reader:
        scan = reader.scan()
        records = [record_from_row(r) for t in scan.checkpoints for r in t.to_pylist()]
        list(scan.events)
        for record in records:
            reader.load_state(record)
            reader.read_blob(record)
            reader.pending_writes(record)
        list(reader.check_checkpoints(records, read_data=True))
        assert _fingerprint(directory) == before
    assert LangGraphSqliteReader.sniff(str(lg_store.path))
    assert _fingerprint(directory) == before


def test_missing_path_is_store_not_found(tmp_path: Path) -> None:
    target = tmp_path / "nope.sqlite"
    for url in (str(target), f"file://{target}", f"sqlite:///{target}"):
        with pytest.raises(StoreNotFound):
            LangGraphSqliteReader(url)
        assert not LangGraphSqliteReader.sniff(url)
    assert list(tmp_path.iterdir()) == []


def test_url_forms(lg_store: SqliteStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = Path(lg_store.path)
    assert sqlite_path(f"sqlite:///{path}") == path
    assert sqlite_path(f"sqlite:////{str(path).lstrip('/')}") == path
    assert sqlite_path(f"file://{path}") == path
    monkeypatch.chdir(path.parent)
    assert sqlite_path(f"sqlite:///{path.name}") == Path(path.name)
    for url in (str(path), f"file://{path}", f"sqlite:///{path}"):
        with LangGraphSqliteReader(url) as reader:
            assert sum(t.num_rows for t in reader.scan().checkpoints) > 0


def test_registry_picks_this_reader(lg_store: SqliteStore) -> None:
    assert pick_reader(str(lg_store.path)) == "langgraph-sqlite"
    with open_reader(str(lg_store.path)) as reader:
        assert isinstance(reader, LangGraphSqliteReader)


def test_sqlite_without_langgraph_tables(tmp_path: Path) -> None:
    other = tmp_path / "other.sqlite"
    with sqlite3.connect(other) as conn:
        conn.execute("CREATE TABLE notes (id INTEGER)")
    conn.close()
    assert not LangGraphSqliteReader.sniff(str(other))
    with pytest.raises(ReaderError, match="checkpoints"):
        LangGraphSqliteReader(str(other))
    text = tmp_path / "plain.db"
    text.write_text("not a database at all, just text " * 10)
    with pytest.raises(ReaderError, match="not a readable SQLite database"):
        LangGraphSqliteReader(str(text))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["other.sqlite", "plain.db"]


# --- incremental scans ------------------------------------------------------------------------


def test_incremental_token(lg_store: SqliteStore, tmp_path: Path) -> None:
    path = tmp_path / "copy.sqlite"
    shutil.copy(lg_store.path, path)
    with LangGraphSqliteReader(str(path)) as reader:
        first = reader.scan()
        before = sum(t.num_rows for t in first.checkpoints)
        same = reader.scan(first.token)
        assert same.token == first.token and not same.full and list(same.checkpoints) == []
        assert same.heads is None and not same.findings
    conn = sqlite3.connect(path, check_same_thread=False)
    saver = SqliteSaver(conn)
    build_tools(saver, thread_id="tools-2")
    with LangGraphSqliteReader(str(path)) as reader:
        added = reader.scan(first.token)
        rows = [r for t in added.checkpoints for r in t.to_pylist()]
        assert not added.full and rows and {r["run_id"] for r in rows} == {"tools-2"}
        assert all(r["status"] == "ok" for r in rows)
        saver.delete_thread("tools-1")
        redone = reader.scan(added.token)
        assert redone.full
        assert sum(t.num_rows for t in redone.checkpoints) == before + len(rows) - 5
    conn.close()


# --- a live database -------------------------------------------------------------------------------


def test_scans_while_a_writer_runs(tmp_path: Path) -> None:
    path = tmp_path / "live.sqlite"
    conn = sqlite3.connect(path, check_same_thread=False)
    saver = SqliteSaver(conn)
    graph = tool_loop_graph(saver)
    stop = threading.Event()
    errors: list[BaseException] = []

    def write() -> None:
        from langchain_core.messages import HumanMessage

        i = 0
        try:
            while not stop.is_set():
                graph.invoke({"messages": [HumanMessage(content="1 + 2?", id=f"h-{i}")]},
                             {"configurable": {"thread_id": f"live-{i % 3}"}})
                i += 1
        except BaseException as exc:  # noqa: BLE001 - surfaced by the assertion below
            errors.append(exc)

    build_tools(saver, thread_id="seed")  # creates the tables and the -wal file
    writer = threading.Thread(target=write, daemon=True)
    writer.start()
    try:
        assert os.path.exists(f"{path}-wal")
        deadline = time.monotonic() + 1.5
        scans = 0
        with LangGraphSqliteReader(str(path)) as reader:
            while time.monotonic() < deadline:
                _assert_consistent(reader)
                scans += 1
        assert scans >= 3
    finally:
        stop.set()
        writer.join(timeout=10)
        conn.close()
    assert not errors


def _assert_consistent(reader: LangGraphSqliteReader) -> None:
    scan = reader.scan()
    rows = [r for t in scan.checkpoints for r in t.to_pylist()]
    ids = {(r["run_id"], r["namespace"], r["checkpoint_id"]) for r in rows}
    assert all(r["parent_id"] is None or (r["run_id"], r["namespace"], r["parent_id"]) in ids for r in rows)
    assert not scan.findings and all(r["status"] == "ok" for r in rows)
    heads = {(h.run_id, h.namespace, h.checkpoint_id) for h in scan.heads}
    assert heads <= ids
    latest = max(rows, key=lambda r: r["checkpoint_id"])
    reader.load_state(record_from_row(latest))


# --- rows the validation boundary rejects (issue #7) ---------------------------------------

# column -> (SQL value written over it, what the finding must say); each lands on another row
KEY_DAMAGE = {
    "thread_id": ("CAST(X'74C328' AS TEXT)", "thread_id is not valid UTF-8"),
    "checkpoint_ns": ("CAST(X'FF' AS TEXT)", "checkpoint_ns is not valid UTF-8"),
    "checkpoint_id": ("X'3132333435'", "checkpoint_id must be text, not blob"),  # TEXT affinity keeps blobs
    "parent_checkpoint_id": ("CAST(X'E282' AS TEXT)", "parent_checkpoint_id is not valid UTF-8"),
    "type": ("X'00FF'", "type must be text, not blob"),
}


def _damage_keys(path: Path) -> tuple[dict[int, str], set[str], int]:
    """One damaged key column per row (plus a NUL in an id and metadata that is not
    UTF-8 text): rowid -> expected problem, the checkpoint ids that must still be listed,
    and the rowid whose metadata was damaged."""
    conn = sqlite3.connect(path)
    rows = conn.execute("SELECT rowid, checkpoint_id FROM checkpoints ORDER BY rowid").fetchall()
    targets = [rows[i][0] for i in range(1, len(rows), max(1, len(rows) // 8))][:7]
    expected: dict[int, str] = {}
    for rowid, (column, (value, problem)) in zip(targets, KEY_DAMAGE.items()):
        conn.execute(f"UPDATE checkpoints SET {column} = {value} WHERE rowid = ?", (rowid,))
        expected[rowid] = problem
    conn.execute("UPDATE checkpoints SET checkpoint_id = checkpoint_id || char(0) WHERE rowid = ?", (targets[5],))
    expected[targets[5]] = "checkpoint_id contains a NUL character"
    conn.execute("UPDATE checkpoints SET metadata = CAST(X'7B22C3' AS TEXT) WHERE rowid = ?", (targets[6],))
    conn.commit()
    conn.close()
    still = {cid for rowid, cid in rows if rowid not in expected}
    return expected, still, targets[6]


def test_rows_with_bad_key_columns_become_findings(lg_store: SqliteStore, tmp_path: Path) -> None:
    path = tmp_path / "bad-keys.sqlite"
    shutil.copy(lg_store.path, path)
    expected, still, bad_metadata = _damage_keys(path)
    before = hashlib.sha256(path.read_bytes()).hexdigest()
    with LangGraphSqliteReader(str(path)) as reader:
        scan = reader.scan()
        rows = [r for t in scan.checkpoints for r in t.to_pylist()]
        findings = list(scan.findings)
        heads = {h.checkpoint_id for h in scan.heads}
    assert {r["checkpoint_id"] for r in rows} == still  # every valid row still loads
    invalid = [f for f in findings if f.check == "row-invalid"]
    assert len(invalid) == len(expected)
    for rowid, problem in expected.items():
        [finding] = [f for f in invalid if f"(rowid {rowid}," in f.message or f"(rowid {rowid})" in f.message]
        assert problem in finding.message and finding.severity == "error" and finding.checkpoint_id is None
    corrupt = [r for r in rows if r["status"] == "corrupt" and "metadata" in (r["status_reason"] or "")]
    assert len(corrupt) == 1 and any(f.check == "metadata-invalid" for f in findings)
    assert heads <= still
    assert hashlib.sha256(path.read_bytes()).hexdigest() == before  # read-only


def test_cli_indexes_a_db_with_bad_key_columns(lg_store: SqliteStore, tmp_path: Path) -> None:
    from tests.helpers import lastgood_cli

    path = tmp_path / "bad-keys.sqlite"
    shutil.copy(lg_store.path, path)
    expected, still, _ = _damage_keys(path)
    home = tmp_path / "home"
    done = lastgood_cli("index", str(path), "--format", "json", home=home)
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr  # findings reported, exit 0
    report = json.loads(done.stdout)
    assert report["checkpoints_read"] == len(still)
    listed = lastgood_cli("ls", str(path), "--format", "json", home=home, check_json=True)
    assert {r["checkpoint_id"] for r in json.loads(listed.stdout)} == still
    verify = lastgood_cli("verify", str(path), "--format", "json", home=home, check_json=True)
    assert verify.returncode == 1  # error findings (docs/cli.md)
    messages = [f["message"] for f in json.loads(verify.stdout)["findings"] if f["check"] == "row-invalid"]
    assert sorted(int(m.split("rowid ")[1].split(",")[0].split(")")[0]) for m in messages) == sorted(expected)


def test_rows_of_wrong_types_are_skipped_without_a_decode_error(lg_store: SqliteStore, tmp_path: Path) -> None:
    """Blobs and NULs in key columns (every text is UTF-8): the listing's own per-batch
    check rejects those rows by rowid, no second pass over the table."""
    path = tmp_path / "bad-types.sqlite"
    shutil.copy(lg_store.path, path)
    conn = sqlite3.connect(path)
    rowids = [r[0] for r in conn.execute("SELECT rowid FROM checkpoints ORDER BY rowid LIMIT 3 OFFSET 4")]
    conn.execute("UPDATE checkpoints SET type = X'6A736F6E' WHERE rowid = ?", (rowids[0],))
    conn.execute("UPDATE checkpoints SET thread_id = thread_id || char(0) WHERE rowid = ?", (rowids[2],))
    conn.commit()
    total = conn.execute("SELECT count(*) FROM checkpoints").fetchone()[0]
    conn.close()
    with LangGraphSqliteReader(str(path)) as reader:
        scan = reader.scan()
        rows = [r for t in scan.checkpoints for r in t.to_pylist()]
    assert len(rows) == total - 2
    messages = sorted(f.message for f in scan.findings if f.check == "row-invalid")
    assert len(messages) == 2
    assert f"(rowid {rowids[0]}," in messages[0] and "type must be text, not blob" in messages[0]
    assert f"(rowid {rowids[2]}," in messages[1] and "thread_id contains a NUL character" in messages[1]


def test_special_writes_with_text_that_is_not_utf8_become_findings(lg_store: SqliteStore, tmp_path: Path) -> None:
    path = tmp_path / "bad-writes.sqlite"
    shutil.copy(lg_store.path, path)
    conn = sqlite3.connect(path)
    special = conn.execute("SELECT rowid, channel FROM writes WHERE idx < 0 ORDER BY rowid").fetchall()
    rowid = special[0][0]
    conn.execute("UPDATE writes SET task_id = CAST(X'FFFE' AS TEXT) WHERE rowid = ?", (rowid,))
    conn.commit()
    conn.close()
    with LangGraphSqliteReader(str(path)) as reader:
        scan = reader.scan()
        rows = [r for t in scan.checkpoints for r in t.to_pylist()]
        events = [e for t in scan.events for e in t.to_pylist()]
    assert len(rows) == len(_listed_ids(lg_store.path))  # the checkpoints are untouched
    [finding] = [f for f in scan.findings if f.check == "row-invalid"]
    assert finding.message == f"writes row (rowid {rowid}) skipped: task_id not valid UTF-8"
    assert len(events) == len(special) - 1  # every other special write is still an event


def _listed_ids(path: Path) -> set[str]:
    conn = sqlite3.connect(path)
    try:
        return {r[0] for r in conn.execute("SELECT checkpoint_id FROM checkpoints")}
    finally:
        conn.close()
