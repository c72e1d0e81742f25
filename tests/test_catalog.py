"""The DuckDB index: ingest, incremental refresh, verification bookkeeping, migrations."""

from __future__ import annotations

import shutil
from pathlib import Path

import duckdb

from lastgood.index import queries
from lastgood.index.catalog import MIGRATIONS, Catalog
from lastgood.stores import index_store
from lastgood.readers.native.writer import NativeWriter
from tests.helpers import agent_state, write_store


def count(catalog: Catalog, sql: str) -> int:
    with catalog.connect() as con:
        return int(con.execute(sql).fetchone()[0])


def test_cold_index_then_refresh_reads_only_what_changed(tmp_path: Path) -> None:
    url = str(tmp_path / "s")
    write_store(url, runs=3, steps=6)
    catalog = Catalog(tmp_path / "index.duckdb")
    first = index_store(catalog, url)
    assert first.refresh.full and first.refresh.checkpoints == 18 and first.verify.checked == 18
    again = index_store(catalog, url)
    assert not again.refresh.changed and again.refresh.checkpoints == 0 and again.verify.checked == 0
    writer = NativeWriter(url)
    writer.save("run-1", agent_state(7))
    writer.save("run-new", agent_state(1))
    third = index_store(catalog, url)
    assert not third.refresh.full and third.refresh.checkpoints == 2 and third.verify.checked == 2
    assert count(catalog, "SELECT count(*) FROM checkpoints") == 20
    assert queries.head_of(catalog, third.store.store_id, "run-new") is not None


def test_compaction_is_picked_up_without_duplicates(tmp_path: Path) -> None:
    url = str(tmp_path / "s")
    write_store(url, runs=2, steps=5)
    catalog = Catalog(tmp_path / "index.duckdb")
    index_store(catalog, url)
    NativeWriter(url).compact()
    after = index_store(catalog, url)
    assert not after.refresh.full
    assert count(catalog, "SELECT count(*) FROM checkpoints") == 10
    assert count(catalog, "SELECT count(DISTINCT checkpoint_id) FROM checkpoints") == 10


def test_damage_found_by_index_sets_status_and_reason(tmp_path: Path) -> None:
    url = str(tmp_path / "s")
    write_store(url, runs=1, steps=5)
    catalog = Catalog(tmp_path / "index.duckdb")
    summary = index_store(catalog, url)
    rows = queries.list_checkpoints(catalog, summary.store.store_id)
    victim = rows[2]
    record = queries.resolve_checkpoint(catalog, summary.store.store_id, victim["checkpoint_id"])
    (Path(url) / record.location).unlink()
    index_store(catalog, url, full=True)
    after = {r["checkpoint_id"]: r for r in queries.list_checkpoints(catalog, summary.store.store_id)}
    assert after[victim["checkpoint_id"]]["status"] == "corrupt"
    assert "does not exist" in after[victim["checkpoint_id"]]["status_reason"]
    # its incremental child cannot be rebuilt either: chain broken, with the parent named
    child = rows[3]["checkpoint_id"]
    assert after[child]["status"] == "corrupt"
    assert victim["checkpoint_id"] in after[child]["status_reason"]
    assert [r["status"] for r in after.values()].count("ok") == 3


def test_a_repaired_blob_clears_its_status(tmp_path: Path) -> None:
    url = str(tmp_path / "s")
    write_store(url, runs=1, steps=3)
    catalog = Catalog(tmp_path / "index.duckdb")
    sid = index_store(catalog, url).store.store_id
    record = queries.resolve_checkpoint(catalog, sid, queries.list_checkpoints(catalog, sid)[0]["checkpoint_id"])
    blob = Path(url) / record.location
    shutil.copy(blob, tmp_path / "backup")
    blob.write_bytes(b"garbage")
    index_store(catalog, url, full=True)
    assert queries.resolve_checkpoint(catalog, sid, record.checkpoint_id).status == "corrupt"
    shutil.copy(tmp_path / "backup", blob)
    index_store(catalog, url, full=True)
    assert queries.resolve_checkpoint(catalog, sid, record.checkpoint_id).status == "ok"
    assert queries.findings(catalog, sid, record.checkpoint_id) == []


def test_migrations_are_numbered_and_idempotent(tmp_path: Path) -> None:
    path = tmp_path / "index.duckdb"
    Catalog(path)
    Catalog(path)
    con = duckdb.connect(str(path))
    versions = [r[0] for r in con.execute("SELECT version FROM schema_version ORDER BY 1").fetchall()]
    tables = {r[0] for r in con.execute("SELECT table_name FROM information_schema.tables").fetchall()}
    con.close()
    assert versions == list(range(1, len(MIGRATIONS) + 1))
    assert {"stores", "checkpoints", "findings", "events", "heads", "journal", "runs"} <= tables


def test_overview_and_timeline_aggregate_in_sql(tmp_path: Path) -> None:
    url = str(tmp_path / "s")
    write_store(url, runs=4, steps=10)
    catalog = Catalog(tmp_path / "index.duckdb")
    sid = index_store(catalog, url).store.store_id
    ov = queries.overview(catalog, sid)
    assert (ov.checkpoints, ov.runs, ov.agents, ov.by_status) == (40, 4, 2, {"ok": 40})
    points, aggregated = queries.timeline(catalog, sid, max_points=100)
    assert not aggregated and len(points) == 40
    buckets, aggregated = queries.timeline(catalog, sid, max_points=24)
    assert aggregated and len(buckets) < 40 and int(buckets["count"].sum()) == 40
    assert set(queries.runs(catalog, sid)["run_id"]) == {"run-0", "run-1", "run-2", "run-3"}


def test_auto_check_decodes_within_its_byte_budget_and_checks_structure_beyond(
        tmp_path: Path, monkeypatch) -> None:
    import lastgood.stores

    url = str(tmp_path / "s")
    write_store(url, runs=2, steps=4)
    catalog = Catalog(tmp_path / "index.duckdb")
    monkeypatch.setattr(lastgood.stores, "AUTO_DATA_BYTES", 5)  # bytes, not checkpoints
    first = index_store(catalog, url)
    assert (first.verify.depth, first.verify.checked) == ("structure", 8)
    NativeWriter(url).save("run-0", agent_state(9))
    monkeypatch.setattr(lastgood.stores, "AUTO_DATA_BYTES", 10**9)
    second = index_store(catalog, url)
    assert (second.verify.depth, second.verify.checked) == ("data", 9)  # 1 new + 8 never re-read


def test_compacted_store_under_a_path_with_quotes(tmp_path: Path) -> None:
    url = str(tmp_path / 'o\'brien "quoted" store')
    write_store(url, runs=2, steps=3)
    NativeWriter(url).compact()
    catalog = Catalog(tmp_path / "index.duckdb")
    summary = index_store(catalog, url)
    assert summary.refresh.checkpoints == 6
    assert count(catalog, "SELECT count(*) FROM checkpoints WHERE status = 'ok'") == 6


def test_threads_opening_and_closing_the_index_never_conflict(tmp_path: Path) -> None:
    """`lastgood ui` opens the index from its start-up thread (one connection per operation)
    while page runs hold it open: a connect that met another thread's close half-way failed with
    DuckDB's "Unique file handle conflict" (the dashboard then showed a traceback, not the page).
    Without the fix this test saw it ~7 times in its 600 opens."""
    import threading

    path = tmp_path / "index.duckdb"
    Catalog(path, keep_open=False)
    errors: list[BaseException] = []

    def opens(keep_open: bool) -> None:
        for _ in range(150):
            try:
                catalog = Catalog(path, keep_open=keep_open)
                with catalog.connect() as con:
                    con.execute("SELECT count(*) FROM checkpoints").fetchall()
                catalog.close()
            except BaseException as exc:  # noqa: BLE001 - collected and asserted below
                errors.append(exc)

    threads = [threading.Thread(target=opens, args=(n % 2 == 0,)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []


def test_the_index_is_written_in_row_groups_of_its_own_size(tmp_path: Path) -> None:
    """Every connection attaches the index with ROW_GROUP_SIZE rows per row group (a bulk insert of
    more is written while it runs, not by its commit); another Catalog of the same file in this
    process, its cursors, and a plain DuckDB connection after both closed all see the same rows."""
    from lastgood.index.catalog import ROW_GROUP_SIZE

    path = tmp_path / "home" / "index.duckdb"
    rows = ROW_GROUP_SIZE + 1_000
    first = Catalog(path)
    with first.connect() as con:
        assert con.execute("SELECT current_database()").fetchone()[0] == "index"
        con.execute("""INSERT INTO checkpoint_rows (store_id, run_id, checkpoint_id)
                       SELECT 1, 'run', CAST(i AS VARCHAR) FROM range(?) t(i)""", [rows])
        groups = con.execute("SELECT count(DISTINCT row_group_id) FROM pragma_storage_info('checkpoint_rows')")
        groups = groups.fetchone()[0]
    assert groups == 2  # DuckDB's default (122,880 rows) would hold them in one
    second = Catalog(path, keep_open=False)
    assert count(second, "SELECT count(*) FROM checkpoints") == rows
    first.close()
    with duckdb.connect(str(path), read_only=True) as plain:
        assert plain.execute("SELECT count(*) FROM checkpoints").fetchone()[0] == rows
