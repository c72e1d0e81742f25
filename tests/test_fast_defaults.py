"""Big stores open fast: structure checks are set-based (a bounded number of queries,
whatever the number of checkpoints) and the default data check never decodes more
blobs than its byte budget allows, so ``ls`` does not wait on decoding.

Real LangGraph databases (SQLite files and a real PostgreSQL server), the real
``lastgood`` command; statements are counted with SQLite's trace callback and by
counting psycopg cursor executions.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import duckdb
import psycopg
import pytest
from langgraph.checkpoint.postgres import PostgresSaver
from langgraph.checkpoint.sqlite import SqliteSaver

import lastgood.readers.langgraph.sqlite as lg_sqlite
from lastgood.index.catalog import Catalog
from lastgood.readers.base import CheckpointRecord
from lastgood.readers.langgraph.postgres import LangGraphPostgresReader
from lastgood.readers.langgraph.sqlite import LangGraphSqliteReader
from lastgood.stores import index_store
from tests.helpers import lastgood_cli, rows_and_findings
from tests.langgraph_graphs import build_error, build_tools

BLOB_READ = "SELECT type, checkpoint, parent_checkpoint_id"  # ROW_SQL: one checkpoint's blob


def _sqlite_db(path: Path, tool_threads: int) -> Path:
    """A real SqliteSaver DB: one failing thread plus ``tool_threads`` tool loops."""
    conn = sqlite3.connect(str(path), check_same_thread=False)
    try:
        saver = SqliteSaver(conn)
        build_error(saver)
        for i in range(tool_threads):
            build_tools(saver, f"tools-{i}")
    finally:
        conn.close()
    return path


@pytest.fixture(scope="module")
def small_and_big(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    folder = tmp_path_factory.mktemp("fast-defaults")
    return _sqlite_db(folder / "small.sqlite", 1), _sqlite_db(folder / "big.sqlite", 12)


@pytest.fixture
def statements(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every SQL statement the SQLite reader runs, on any of its connections."""
    seen: list[str] = []
    real = lg_sqlite.connect_readonly

    def traced(path: Path, mmap: bool = False) -> sqlite3.Connection:
        conn = real(path, mmap)
        conn.set_trace_callback(seen.append)
        return conn

    monkeypatch.setattr(lg_sqlite, "connect_readonly", traced)
    return seen


def _keys(path: Path) -> list[tuple[str, str, str]]:
    with sqlite3.connect(path) as conn:
        return conn.execute("SELECT thread_id, checkpoint_ns, checkpoint_id FROM checkpoints").fetchall()


def _records(keys: list[tuple[str, str, str]]) -> list[CheckpointRecord]:
    return [CheckpointRecord(run_id=t, namespace=ns, checkpoint_id=c) for t, ns, c in keys]


def _selects(seen: list[str]) -> list[str]:
    return [s for s in seen if s.lstrip().upper().startswith(("SELECT", "WITH"))]


def test_sqlite_structure_check_is_two_queries_for_any_number_of_checkpoints(
        small_and_big: tuple[Path, Path], statements: list[str]) -> None:
    counts = {}
    for path in small_and_big:
        keys = _keys(path)
        with LangGraphSqliteReader(str(path)) as reader:
            before = len(statements)
            findings = list(reader.check_checkpoints(_records(keys), read_data=False))
            counts[len(keys)] = len(_selects(statements[before:]))
        assert [f.check for f in findings] == ["pending-error"]  # the failed task, found by SQL
        assert "branch b exploded" in findings[0].message
    (small, n_small), (big, n_big) = sorted(counts.items())
    assert big > 5 * small  # the second DB really is bigger …
    assert n_small == n_big == 2  # … and the check is still one rows query and one writes query


def test_sqlite_structure_check_after_a_scan_reuses_the_listing(
        small_and_big: tuple[Path, Path], statements: list[str]) -> None:
    path = small_and_big[1]
    with LangGraphSqliteReader(str(path)) as reader:
        scan = reader.scan()
        list(scan.checkpoints)
        list(scan.events)
        before = len(statements)
        findings = reader.check_structure(_keys(path))
        queries = _selects(statements[before:])
    assert [f.check for f in findings] == ["pending-error"]
    assert queries == []  # the listing already read every codec and special write


def test_a_write_after_the_scan_makes_the_structure_check_ask_the_store(
        small_and_big: tuple[Path, Path], statements: list[str], tmp_path: Path) -> None:
    path = tmp_path / "live.sqlite"
    path.write_bytes(small_and_big[0].read_bytes())
    with LangGraphSqliteReader(str(path)) as reader:
        scan = reader.scan()
        list(scan.checkpoints)
        list(scan.events)
        conn = sqlite3.connect(str(path), check_same_thread=False)
        try:
            build_error(SqliteSaver(conn), "error-2")  # a writer commits after the listing
        finally:
            conn.close()
        before = len(statements)
        findings = reader.check_structure(_keys(path))
        queries = _selects(statements[before:])
    assert sorted(f.run_id for f in findings if f.check == "pending-error") == ["error-1", "error-2"]
    assert len(queries) == 2


def test_index_structure_check_statements_do_not_grow_with_the_store(
        small_and_big: tuple[Path, Path], statements: list[str], tmp_path: Path) -> None:
    counts = []
    for i, path in enumerate(small_and_big):
        before = len(statements)
        summary = index_store(Catalog(tmp_path / f"index-{i}.duckdb"), str(path), check="structure")
        counts.append(len(statements) - before)
        assert summary.verify is not None and summary.verify.checked == len(_keys(path))
        assert not any(s.startswith(BLOB_READ) for s in statements[before:])
    assert counts[0] == counts[1] < 30


def test_index_right_after_a_listing_records_its_structure_check_without_the_keys(
        small_and_big: tuple[Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The index's structure check of a just-listed DB is answered by the listing and
    recorded by one SQL predicate (no key round trip); its findings, statuses and
    ``verified`` marks are exactly those of the store-asked check."""
    import lastgood.integrity.verify as verify

    path = tmp_path / "damaged.sqlite"
    path.write_bytes(small_and_big[0].read_bytes())
    conn = sqlite3.connect(path)
    conn.execute("UPDATE checkpoints SET type = 'zstd' WHERE rowid = 3")  # unknown codec
    conn.commit()
    conn.close()
    results = []
    calls: list[int] = []
    real = verify._key_chunk

    def counted(*args: Any) -> Any:  # the chunk of keys fetched from the index for check_structure
        calls.append(1)
        return real(*args)

    monkeypatch.setattr(verify, "_key_chunk", counted)
    for listed in (True, False):
        if not listed:  # the reader cannot answer: keys go to check_structure
            monkeypatch.setattr(LangGraphSqliteReader, "listed_structure", lambda self, token: None)
        calls.clear()
        catalog = Catalog(tmp_path / f"index-{listed}.duckdb")
        summary = index_store(catalog, str(path), check="structure")
        assert summary.verify is not None and summary.verify.checked == len(_keys(path))
        assert bool(calls) is not listed
        results.append(rows_and_findings(catalog))
    assert results[0] == results[1]
    rows, found = results[0]
    assert {r[3] for r in rows} == {"structure"}
    assert {(f[1], f[4]) for f in found} >= {("unknown-codec", "structure"), ("pending-error", "structure")}


def test_postgres_structure_check_is_a_few_queries_for_any_number_of_checkpoints(
        pg_create_database: Callable[[str], str], monkeypatch: pytest.MonkeyPatch) -> None:
    dsn = pg_create_database("fast_structure")
    with PostgresSaver.from_conn_string(dsn) as saver:
        saver.setup()
        build_error(saver)
        for i in range(8):
            build_tools(saver, f"tools-{i}")
    executed: list[str] = []
    real = psycopg.Cursor.execute

    def counting(self: Any, query: Any, *args: Any, **kwargs: Any) -> Any:
        executed.append(str(query))
        return real(self, query, *args, **kwargs)

    monkeypatch.setattr(psycopg.Cursor, "execute", counting)
    with LangGraphPostgresReader(dsn) as reader:
        with psycopg.connect(dsn) as conn:
            keys = conn.execute("SELECT thread_id, checkpoint_ns, checkpoint_id FROM checkpoints").fetchall()
        counts = []
        for subset in (keys[:3], keys):
            before = len(executed)
            findings = list(reader.check_checkpoints(_records(subset), read_data=False))
            counts.append(len(executed) - before)
    assert len(keys) > 40 and counts[0] == counts[1] <= 4
    assert {f.check for f in findings} == {"pending-error"}


# ---- the default data check: by bytes, and ls never waits on it ------------------------

def _index_rows(home: Path) -> list[tuple[Any, ...]]:
    con = duckdb.connect(str(home / "index.duckdb"), read_only=True)
    try:
        return con.execute("SELECT verified, count(*) FROM checkpoints GROUP BY ALL").fetchall()
    finally:
        con.close()


def test_ls_lists_without_decoding_when_blobs_exceed_the_budget(
        small_and_big: tuple[Path, Path], tmp_path: Path) -> None:
    db, home = small_and_big[1], tmp_path / "home"
    budget = {"LASTGOOD_AUTO_DATA_BYTES": "1000"}  # far less than the DB's blobs
    done = lastgood_cli("ls", str(db), "--format", "json", home=home, env=budget)
    assert done.returncode == 0, done.stderr
    rows = json.loads(done.stdout)
    assert len(rows) == len(_keys(db)) and all(r["data_checked"] is False for r in rows)
    assert _index_rows(home) == [("structure", len(rows))]  # structure-checked, no blob decoded
    table = lastgood_cli("ls", str(db), home=home, env=budget)
    assert f"data check pending for {len(rows)}" in table.stdout
    assert "lastgood verify --read-data" in table.stdout


def test_ls_decodes_new_blobs_within_the_budget(small_and_big: tuple[Path, Path], tmp_path: Path) -> None:
    db, home = small_and_big[0], tmp_path / "home"
    done = lastgood_cli("ls", str(db), "--format", "json", home=home)
    assert done.returncode == 0, done.stderr
    rows = json.loads(done.stdout)
    assert rows and all(r["data_checked"] is True for r in rows)
    assert _index_rows(home) == [("data", len(rows))]
    assert "data check pending" not in lastgood_cli("ls", str(db), home=home).stdout


def test_auto_budget_counts_bytes_not_checkpoints(
        small_and_big: tuple[Path, Path], tmp_path: Path, statements: list[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    db = small_and_big[1]
    with sqlite3.connect(db) as conn:
        total = conn.execute("SELECT sum(length(checkpoint)) FROM checkpoints").fetchone()[0]
    monkeypatch.setenv("LASTGOOD_AUTO_DATA_BYTES", str(total - 1))
    summary = index_store(Catalog(tmp_path / "a.duckdb"), str(db))
    assert summary.verify.depth == "structure"
    assert not any(s.startswith(BLOB_READ) for s in statements)
    monkeypatch.setenv("LASTGOOD_AUTO_DATA_BYTES", str(total))
    summary = index_store(Catalog(tmp_path / "b.duckdb"), str(db))
    assert summary.verify.depth == "data" and summary.verify.checked == len(_keys(db))
    assert sum(s.startswith(BLOB_READ) for s in statements) >= len(_keys(db))


def test_index_reports_pending_data_checks(small_and_big: tuple[Path, Path], tmp_path: Path) -> None:
    db, home = small_and_big[1], tmp_path / "home"
    with sqlite3.connect(db) as conn:
        blob_bytes = conn.execute("SELECT sum(length(checkpoint)) FROM checkpoints").fetchone()[0]
    budget = {"LASTGOOD_AUTO_DATA_BYTES": "1000"}
    report = json.loads(lastgood_cli("index", str(db), "--format", "json", home=home, env=budget).stdout)
    assert report["check"] == "structure" and report["checked"] == len(_keys(db))
    assert report["data_pending"] == {"checkpoints": len(_keys(db)), "size_bytes": blob_bytes}
    again = lastgood_cli("index", str(db), home=home, env=budget)  # a reopen still says so
    assert again.returncode == 0 and f"data check pending for {len(_keys(db))} checkpoint(s)" in again.stdout
    done = json.loads(lastgood_cli("index", str(db), "--format", "json", home=home).stdout)  # default budget
    assert done["check"] == "data" and done["data_pending"] == {"checkpoints": 0, "size_bytes": 0}
