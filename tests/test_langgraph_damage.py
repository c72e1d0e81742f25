"""Damaged SqliteSaver databases: every problem gets a status or finding with its
reason, and every other checkpoint still loads."""

from __future__ import annotations

import shutil
import sqlite3
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from lastgood.errors import DecodeError
from lastgood.readers.base import CheckpointRecord, record_from_row
from lastgood.readers.langgraph.sqlite import LangGraphSqliteReader
from tests.langgraph_graphs import SqliteStore, write_sqlite_store


@dataclass
class Damaged:
    path: Path
    truncated: str
    garbage: str
    unknown_type: str
    orphan: str
    deleted_parent: str
    bad_metadata: str
    bad_write: str
    delta_broken: str


def _ids(conn: sqlite3.Connection, thread_id: str) -> list[str]:
    return [r[0] for r in conn.execute(
        "SELECT checkpoint_id FROM checkpoints WHERE thread_id = ? AND checkpoint_ns = '' ORDER BY checkpoint_id",
        (thread_id,))]


@pytest.fixture(scope="session")
def damaged(tmp_path_factory: pytest.TempPathFactory) -> Damaged:
    directory = tmp_path_factory.mktemp("damaged")
    store: SqliteStore = write_sqlite_store(directory / "clean.sqlite")
    path = directory / "damaged.sqlite"
    shutil.copy(store.path, path)
    conn = sqlite3.connect(path)
    tools, fork, interrupt, delta = (_ids(conn, t) for t in ("tools-1", "fork-1", "interrupt-1", "delta-1"))
    update = "UPDATE checkpoints SET {} WHERE thread_id = ? AND checkpoint_id = ?"
    conn.execute(update.format("checkpoint = substr(checkpoint, 1, length(checkpoint) / 2)"), ("tools-1", tools[2]))
    conn.execute(update.format("checkpoint = X'C1C1FFFF00'"), ("tools-1", tools[3]))
    conn.execute(update.format("type = 'foo'"), ("interrupt-1", interrupt[1]))
    conn.execute(update.format("metadata = CAST('{\"step\": 3, broken' AS BLOB)"), ("interrupt-1", interrupt[2]))
    conn.execute("DELETE FROM checkpoints WHERE thread_id = 'fork-1' AND checkpoint_id = ?", (fork[1],))
    conn.execute("UPDATE writes SET value = X'93' WHERE thread_id = 'error-1' AND channel = '__error__'")
    delta_seed = next(cid for cid in reversed(delta[:-1]) if _stores_messages(conn, cid))
    conn.execute(update.format("checkpoint = X'00'"), ("delta-1", delta_seed))
    conn.commit()
    conn.close()
    return Damaged(path, tools[2], tools[3], interrupt[1], fork[2], fork[1], interrupt[2],
                   _error_checkpoint(path), delta[-1])


def _stores_messages(conn: sqlite3.Connection, checkpoint_id: str) -> bool:
    from lastgood.readers.langgraph.serde import decode_typed

    type_, blob = conn.execute("SELECT type, checkpoint FROM checkpoints WHERE checkpoint_id = ?", (checkpoint_id,)).fetchone()
    return "messages" in decode_typed(type_, blob)["channel_values"]


def _error_checkpoint(path: Path) -> str:
    with sqlite3.connect(path) as conn:
        return conn.execute("SELECT checkpoint_id FROM writes WHERE channel = '__error__'").fetchone()[0]


@pytest.fixture(scope="session")
def scanned(damaged: Damaged) -> tuple[dict[str, CheckpointRecord], Any]:
    with LangGraphSqliteReader(str(damaged.path)) as reader:
        scan = reader.scan()
        table = pa.concat_tables(list(scan.checkpoints))
    return {r["checkpoint_id"]: record_from_row(r) for r in table.to_pylist()}, scan


def test_scan_statuses(damaged: Damaged, scanned: Any) -> None:
    records, scan = scanned
    assert damaged.deleted_parent not in records
    orphan = records[damaged.orphan]
    assert orphan.status == "corrupt" and damaged.deleted_parent in orphan.status_reason
    unknown = records[damaged.unknown_type]
    assert unknown.status == "corrupt" and "unknown serialization type 'foo'" in unknown.status_reason
    meta = records[damaged.bad_metadata]
    assert meta.status == "corrupt" and "metadata is not valid JSON" in meta.status_reason
    assert meta.metadata == {"$raw": '{"step": 3, broken'}
    # blobs are not decoded while listing: damaged blobs list as ok
    assert records[damaged.truncated].status == "ok" and records[damaged.garbage].status == "ok"
    bad = {damaged.orphan, damaged.unknown_type, damaged.bad_metadata}
    assert all(r.status == "ok" for cid, r in records.items() if cid not in bad)
    checks = {(f.check, f.checkpoint_id) for f in scan.findings}
    assert checks == {("parent-missing", damaged.orphan), ("unknown-codec", damaged.unknown_type),
                      ("metadata-invalid", damaged.bad_metadata)}


def test_load_state_reports_the_cause(damaged: Damaged, scanned: Any) -> None:
    records, _ = scanned
    with LangGraphSqliteReader(str(damaged.path)) as reader:
        with pytest.raises(DecodeError, match="msgpack: truncated data at byte"):
            reader.load_state(records[damaged.truncated])
        with pytest.raises(DecodeError, match="msgpack: invalid byte 0xc1 at byte 0"):
            reader.load_state(records[damaged.garbage])
        with pytest.raises(DecodeError, match="unknown serialization type 'foo'"):
            reader.load_state(records[damaged.unknown_type])


def test_everything_else_still_loads(damaged: Damaged, scanned: Any) -> None:
    records, _ = scanned
    broken = {damaged.truncated, damaged.garbage, damaged.unknown_type}
    delta_seed_gone = 0
    with LangGraphSqliteReader(str(damaged.path)) as reader:
        for cid, record in records.items():
            if cid in broken:
                continue
            if record.run_id == "delta-1" and cid != damaged.delta_broken:
                try:
                    reader.load_state(record)
                except DecodeError:
                    delta_seed_gone += 1  # the damaged delta checkpoint itself
                continue
            state = reader.load_state(record)
            assert isinstance(state, dict)
            reader.pending_writes(record)
    assert delta_seed_gone == 1


def test_delta_channel_with_a_damaged_ancestor_is_marked(damaged: Damaged, scanned: Any) -> None:
    records, _ = scanned
    with LangGraphSqliteReader(str(damaged.path)) as reader:
        messages = reader.load_state(records[damaged.delta_broken])["messages"]
    assert isinstance(messages, dict)
    assert "could not be decoded" in messages["$not_shown"] and "incomplete" in messages["$not_shown"]


def test_undecodable_write(damaged: Damaged, scanned: Any) -> None:
    records, _ = scanned
    with LangGraphSqliteReader(str(damaged.path)) as reader:
        writes = reader.pending_writes(records[damaged.bad_write])
        scan = reader.scan()
        events = [e for t in scan.events for e in t.to_pylist() if e["kind"] == "error"]
    error = next(w for w in writes if w.channel == "__error__")
    assert "truncated" in error.value["$undecodable"]
    assert len(events) == 1 and "undecodable" in events[0]["message"]


def test_check_checkpoints_findings(damaged: Damaged, scanned: Any) -> None:
    records, _ = scanned
    with LangGraphSqliteReader(str(damaged.path)) as reader:
        findings = list(reader.check_checkpoints(records.values(), read_data=True))
        quick = list(reader.check_checkpoints(records.values(), read_data=False))
    got = {(f.check, f.checkpoint_id) for f in findings}
    assert ("undecodable", damaged.truncated) in got
    assert ("undecodable", damaged.garbage) in got
    assert ("unknown-codec", damaged.unknown_type) in got
    assert ("undecodable", damaged.bad_write) in got
    assert all(f.severity == "error" for f in findings if f.check in ("undecodable", "unknown-codec"))
    truncated = next(f for f in findings if f.checkpoint_id == damaged.truncated)
    assert "truncated data at byte" in truncated.message
    assert {(f.check, f.checkpoint_id) for f in quick} == {("unknown-codec", damaged.unknown_type),
                                                        ("pending-error", damaged.bad_write)}
    assert "undecodable" in next(f for f in quick if f.check == "pending-error").message
