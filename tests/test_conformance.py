"""One conformance suite every registered reader passes, against real stores.

A new reader adds a store factory to STORES and must pass all of this before anything else.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest

from lastgood.index.catalog import Catalog
from lastgood.errors import DecodeError
from lastgood.stores import index_store
from lastgood.index import queries
from lastgood.readers.base import as_table, CHECKPOINT_SCHEMA, EVENT_SCHEMA, Reader, record_from_row
from lastgood.readers.registry import BUILTIN_READERS, open_reader, pick_reader
from tests.helpers import write_store


def native_local(tmp: Path, request: pytest.FixtureRequest) -> str:
    url = str(tmp / "native")
    write_store(url, runs=3, steps=7)
    return url


def native_memory(tmp: Path, request: pytest.FixtureRequest) -> str:
    url = f"memory://conformance-{uuid.uuid4().hex}"
    write_store(url, runs=2, steps=5, codec="msgpack")
    return url


def langgraph_sqlite(tmp: Path, request: pytest.FixtureRequest) -> str:
    from tests.langgraph_graphs import write_sqlite_store

    path = tmp / "graph.sqlite"
    write_sqlite_store(path)
    return str(path)


def langgraph_postgres(tmp: Path, request: pytest.FixtureRequest) -> str:
    from langgraph.checkpoint.postgres import PostgresSaver

    from tests.langgraph_graphs import build_all

    dsn = request.getfixturevalue("pg_create_database")("conformance")
    with PostgresSaver.from_conn_string(dsn) as saver:
        saver.setup()
        build_all(saver)
    return dsn


STORES: dict[str, tuple[str, Callable[[Path, pytest.FixtureRequest], str]]] = {
    "native-local": ("native", native_local),
    "native-memory": ("native", native_memory),
    "langgraph-sqlite": ("langgraph-sqlite", langgraph_sqlite),
    "langgraph-postgres": ("langgraph-postgres", langgraph_postgres),
}


@pytest.fixture(scope="module", params=sorted(STORES))
def store(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> tuple[str, str]:
    reader_name, factory = STORES[request.param]
    if reader_name == "langgraph-postgres":
        request.applymarker(pytest.mark.postgres)
    return reader_name, factory(tmp_path_factory.mktemp(request.param), request)


@pytest.fixture(scope="module")
def scanned(store: tuple[str, str]):
    reader_name, url = store
    reader = open_reader(url)
    scan = reader.scan()
    tables = [as_table(b) for b in scan.checkpoints]
    events = list(scan.events)
    yield reader, scan, tables, events
    reader.close()


def test_every_builtin_reader_has_a_conformance_store() -> None:
    assert {name for name, _ in STORES.values()} == set(BUILTIN_READERS)


def test_reader_is_picked_from_the_url(store: tuple[str, str]) -> None:
    reader_name, url = store
    assert pick_reader(url) == reader_name


def test_scan_yields_the_common_schema_and_unique_ids(scanned) -> None:
    reader, scan, tables, events = scanned
    assert isinstance(reader, Reader) and scan.full and tables
    for table in tables:
        assert table.schema.equals(CHECKPOINT_SCHEMA, check_metadata=False)
    for table in events:
        assert table.schema.equals(EVENT_SCHEMA, check_metadata=False)
    rows = [r for t in tables for r in t.to_pylist()]
    keys = [(r["run_id"], r["namespace"], r["checkpoint_id"]) for r in rows]
    assert len(keys) == len(set(keys))
    assert all(r["run_id"] and r["checkpoint_id"] and r["created_at"] is not None for r in rows)
    assert {r["status"] for r in rows} <= {"ok", "corrupt", "incomplete", "quarantined", "superseded"}
    ids = {r["checkpoint_id"] for r in rows}
    assert {h.checkpoint_id for h in scan.heads or []} <= ids


def test_every_state_decodes_to_plain_json_data(scanned) -> None:
    reader, _, tables, _ = scanned
    for row in (r for t in tables for r in t.to_pylist()):
        record = record_from_row(row)
        try:
            state = reader.load_state(record)
        except DecodeError as exc:  # allowed only with a reason, never a crash or a silent None
            assert str(exc)
            continue
        json.dumps(state, allow_nan=True)
        assert isinstance(reader.read_blob(record), bytes)
        json.dumps([w.__class__.__name__ for w in reader.pending_writes(record)])


def test_an_unchanged_store_rescans_to_nothing(scanned) -> None:
    reader, scan, _, _ = scanned
    again = reader.scan(scan.token)
    assert sum(t.num_rows for t in again.checkpoints) == 0


def test_index_and_structure_check_find_no_errors_on_a_healthy_store(store: tuple[str, str],
                                                                     tmp_path: Path) -> None:
    _, url = store
    catalog = Catalog(tmp_path / "index.duckdb")
    summary = index_store(catalog, url, check="structure")
    rows = queries.list_checkpoints(catalog, summary.store.store_id)
    assert rows and len(rows) == summary.refresh.checkpoints
    errors = [f for f in summary.verify.findings if f.severity == "error"]
    assert errors == []
