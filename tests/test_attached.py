"""Compacted parts the index reads in place (lastgood.index.attached, readers.native_profile).

Every test compares an index that attached the part with one that copied its rows
(the attach threshold set out of reach): both must hold the same rows, statuses and
findings, whatever the part holds and whatever is done to the store afterwards.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from lastgood.index import attached
from lastgood.index import queries
from lastgood.index.catalog import Catalog
from lastgood.readers.native import format as nf
from lastgood.readers.native.profile import part_profile
from lastgood.readers.native.writer import NativeWriter
from lastgood.recovery import apply_plan, plan_quarantine
from lastgood.stores import index_store, open_store
from tests.helpers import write_store

NEVER = str(1 << 40)


def compacted(tmp_path: Path, runs: int = 3, steps: int = 8) -> str:
    url = str(tmp_path / "store")
    write_store(url, runs=runs, steps=steps)
    NativeWriter(url).compact()
    assert len(list((Path(url) / nf.PARTS).glob("*.parquet"))) == 1
    assert not list((Path(url) / nf.TAIL).glob("*.jsonl"))
    return url


def rewrite_part(url: str, change: Callable[[list[dict[str, Any]]], None]) -> None:
    """Rewrite the store's one part with ``change`` applied to its rows (same file name)."""
    path = next((Path(url) / nf.PARTS).glob("*.parquet"))
    table = pq.read_table(path)
    rows = table.to_pylist()
    change(rows)
    pq.write_table(pa.Table.from_pylist(rows, schema=table.schema), path, compression="zstd")


def index(tmp_path: Path, name: str, url: str, monkeypatch: pytest.MonkeyPatch,
          attach: bool, **options: Any) -> tuple[Catalog, int]:
    monkeypatch.setenv("LASTGOOD_ATTACH_BYTES", "0" if attach else NEVER)
    catalog = Catalog(tmp_path / name / "index.duckdb")
    summary = index_store(catalog, url, **options)
    return catalog, summary.store.store_id


def contents(catalog: Catalog) -> tuple[list[tuple], list[tuple], list[tuple]]:
    with catalog.connect() as con:
        rows = con.execute("""SELECT * EXCLUDE (store_id, data_checked_at) FROM checkpoints
                              ORDER BY run_id, namespace, checkpoint_id""").fetchall()
        found = con.execute("""SELECT run_id, checkpoint_id, "check", severity, message, depth FROM findings
                               ORDER BY ALL""").fetchall()
        runs = con.execute("SELECT * EXCLUDE (store_id) FROM runs ORDER BY run_id").fetchall()
    return rows, found, runs


def is_attached(catalog: Catalog, store_id: int) -> bool:
    with catalog.connect() as con:
        return attached.is_attached(con, store_id)


def test_a_clean_part_is_read_in_place_and_holds_what_a_copy_holds(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    url = compacted(tmp_path)
    kept, kept_id = index(tmp_path, "kept", url, monkeypatch, attach=True)
    copied, copied_id = index(tmp_path, "copied", url, monkeypatch, attach=False)
    assert is_attached(kept, kept_id) and not is_attached(copied, copied_id)
    assert contents(kept) == contents(copied)
    with kept.connect() as con:
        (path,) = con.execute("SELECT path FROM attached_parts").fetchone()
        assert con.execute("SELECT count(*) FROM checkpoint_rows").fetchone()[0] == 0
    assert Path(path).parent == tmp_path / "kept" / attached.PARTS_DIR
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600  # the index's copy: owner only
    assert stat.S_IMODE(os.stat(Path(path).parent).st_mode) == 0o700
    # the reader read a copy and the store is as it was: one part, nothing added
    assert [p.name for p in (Path(url) / nf.PARTS).iterdir()] == [p.name for p in (Path(url) / nf.PARTS).glob("*.parquet")]
    assert len(list((Path(url) / nf.PARTS).iterdir())) == 1
    # a reopen lists nothing new and keeps the part attached
    again = index_store(kept, url)
    assert not again.refresh.changed and is_attached(kept, kept_id)


@pytest.mark.parametrize("damage", ["orphan", "backwards", "codec", "shared_id", "spike", "event"])
def test_a_part_with_something_to_find_gives_the_same_findings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                               damage: str) -> None:
    url = compacted(tmp_path, runs=3, steps=12)

    def change(rows: list[dict[str, Any]]) -> None:
        if damage == "orphan":
            rows[3]["parent_id"] = "01a00000-0000-7000-8000-000000000000"
        elif damage == "backwards":  # a cycle: 5's parent is 4, and now 4's parent is 5
            assert rows[5]["parent_id"] == rows[4]["checkpoint_id"]
            rows[4]["parent_id"] = rows[5]["checkpoint_id"]
        elif damage == "codec":
            rows[2]["codec"] = "mystery"
        elif damage == "shared_id":
            rows[20]["checkpoint_id"] = rows[2]["checkpoint_id"]  # run-1 reuses an id of run-0
        elif damage == "spike":
            rows[7]["size_bytes"] = 50_000_000
        elif damage == "event":
            rows[6]["metadata"] = '{"event": {"kind": "oom", "message": "killed"}}'

    rewrite_part(url, change)
    kept, kept_id = index(tmp_path, "kept", url, monkeypatch, attach=True)
    copied, _ = index(tmp_path, "copied", url, monkeypatch, attach=False)
    assert contents(kept) == contents(copied)
    if damage == "event":  # not damage: the event is listed (the part's pass said there is one)
        for catalog in (kept, copied):
            with catalog.connect() as con:
                assert con.execute("SELECT kind FROM events WHERE kind = 'oom'").fetchall() == [("oom",)]
    else:
        assert contents(kept)[1], "the damage is found"


def test_writes_give_the_same_rows_as_on_a_copied_index(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A data check (every row read), a quarantine (one row), new saves (an incremental refresh):
    the attached store's rows become the table's where needed, and both indexes agree after each."""
    url = compacted(tmp_path)
    kept, kept_id = index(tmp_path, "kept", url, monkeypatch, attach=True, check="structure")
    copied, copied_id = index(tmp_path, "copied", url, monkeypatch, attach=False, check="structure")
    assert is_attached(kept, kept_id)
    for catalog in (kept, copied):
        index_store(catalog, url, check="data")
    assert contents(kept) == contents(copied)
    assert is_attached(kept, kept_id), "a data check of every row changes the part's constants only"
    target = queries.list_checkpoints(copied, copied_id, run_id="run-1")[3]["checkpoint_id"]
    store = open_store(kept, url)  # the mark is in the store's journal: both indexes take it
    apply_plan(kept, store, plan_quarantine(kept, store, f"run-1/{target}"), reason="test", operator="tester")
    for catalog in (kept, copied):
        index_store(catalog, url)
    assert not is_attached(kept, kept_id), "a mark on one checkpoint copies the rows into the table"
    assert contents(kept)[0] == contents(copied)[0]
    with kept.connect() as con:
        assert con.execute("SELECT status FROM checkpoints WHERE checkpoint_id = ?", [target]).fetchall() == [
            ("quarantined",)]
    NativeWriter(url).save("run-2", {"messages": ["new"]})
    for catalog in (kept, copied):
        index_store(catalog, url)
    assert contents(kept)[0] == contents(copied)[0]


def test_an_incremental_refresh_copies_the_rows_first(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    url = compacted(tmp_path)
    kept, kept_id = index(tmp_path, "kept", url, monkeypatch, attach=True)
    copied, _ = index(tmp_path, "copied", url, monkeypatch, attach=False)
    NativeWriter(url).save("run-0", {"messages": ["later"]})
    for catalog in (kept, copied):
        index_store(catalog, url)
    assert not is_attached(kept, kept_id)
    assert contents(kept) == contents(copied)


def test_a_copy_removed_by_hand_is_listed_again_not_a_broken_index(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    url = compacted(tmp_path)
    kept, kept_id = index(tmp_path, "kept", url, monkeypatch, attach=True)
    expected = contents(kept)
    with kept.connect() as con:
        (path,) = con.execute("SELECT path FROM attached_parts").fetchone()
    kept.close()
    os.unlink(path)
    reopened = Catalog(tmp_path / "kept" / "index.duckdb")
    assert queries.list_checkpoints(reopened, kept_id) == []  # no query fails on the missing file
    summary = index_store(reopened, url)
    assert summary.refresh.full and contents(reopened) == expected


def test_unreferenced_copies_are_collected_once_stale(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    url = compacted(tmp_path)
    kept, kept_id = index(tmp_path, "kept", url, monkeypatch, attach=True)
    folder = tmp_path / "kept" / attached.PARTS_DIR
    with kept.connect() as con:
        (path,) = con.execute("SELECT path FROM attached_parts").fetchone()
    fresh, stale = folder / "copy-fresh.parquet", folder / "copy-stale.parquet"
    fresh.write_bytes(b"x")
    stale.write_bytes(b"x")
    old = os.stat(stale).st_mtime - attached.STALE_SECONDS - 5
    os.utime(stale, (old, old))
    os.utime(path, (old, old))  # referenced: kept however old
    with kept.connect() as con:
        attached.collect(con, str(folder))
    assert sorted(p.name for p in folder.iterdir()) == sorted([Path(path).name, "copy-fresh.parquet"])
    index_store(kept, url, full=True)  # a full listing attaches a new copy; the old one waits its turn
    with kept.connect() as con:
        (newer,) = con.execute("SELECT path FROM attached_parts").fetchone()
    assert newer != path and Path(path).exists() and Path(newer).exists()


def test_profile_counts(tmp_path: Path) -> None:
    url = compacted(tmp_path, runs=2, steps=6)
    path = str(next((Path(url) / nf.PARTS).glob("*.parquet")))
    clean = part_profile(path)
    assert clean is not None and clean.rows == 12
    assert (clean.unclean, clean.orphans, clean.backwards, clean.shared_ids) == (0, 0, 0, 0)
    assert clean.events == 2  # write_store records an event at step 5 of each run
    assert sorted(n for n, _, _ in clean.run_sizes) == [6, 6]

    def damage(rows: list[dict[str, Any]]) -> None:
        rows[1]["parent_id"] = "missing"
        rows[2]["codec"] = "mystery"
        rows[8]["checkpoint_id"] = rows[3]["checkpoint_id"]

    rewrite_part(url, damage)
    found = part_profile(path)
    assert found is not None
    assert found.orphans >= 1 and found.unclean == 1 and found.shared_ids == 1

    def repeat(rows: list[dict[str, Any]]) -> None:
        rows.append(dict(rows[0]))

    rewrite_part(url, repeat)
    assert part_profile(path) is None  # a checkpoint listed twice: read row by row

    def bad_row(rows: list[dict[str, Any]]) -> None:
        rows.pop()
        rows[0]["run_id"] = ""

    rewrite_part(url, bad_row)
    assert part_profile(path) is None


def test_the_index_reads_its_own_copy_not_the_stores_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """What was validated is what is read: the store's part overwritten after the copy was taken
    (a writer, or someone hostile) changes nothing the index holds; the next refresh reports the
    new file unreadable, as an index that copied the rows does, and both keep what they read."""
    url = compacted(tmp_path)
    kept, kept_id = index(tmp_path, "kept", url, monkeypatch, attach=True)
    copied, _ = index(tmp_path, "copied", url, monkeypatch, attach=False)
    before = contents(kept)
    part = next((Path(url) / nf.PARTS).glob("*.parquet"))
    part.write_bytes(b"PAR1 not a part any more PAR1")
    assert contents(kept) == before
    for catalog in (kept, copied):
        summary = index_store(catalog, url)
        assert any("unreadable catalog part" in f.message for f in summary.refresh.findings)
    assert is_attached(kept, kept_id)
    assert contents(kept) == contents(copied)
    assert contents(kept)[0] == before[0]


def test_the_views_columns_are_the_tables(tmp_path: Path) -> None:
    catalog = Catalog(tmp_path / "h" / "index.duckdb")
    with catalog.connect() as con:
        names = [r[0] for r in con.execute("""SELECT column_name FROM duckdb_columns()
            WHERE table_name = 'checkpoint_rows' ORDER BY column_index""").fetchall()]
    assert tuple(names) == attached.ROW_COLUMNS


def test_an_index_from_before_the_view_keeps_its_rows(tmp_path: Path) -> None:
    """Migration 5 renames the table the earlier ones made and puts the view in its place: an
    index written by the previous release opens with every row, and writes go on working."""
    from lastgood.index.catalog import MIGRATIONS

    url = str(tmp_path / "store")
    write_store(url, runs=2, steps=4)
    path = tmp_path / "h" / "index.duckdb"
    path.parent.mkdir()
    con = duckdb.connect(str(path))
    con.execute("CREATE TABLE schema_version (version INTEGER NOT NULL)")
    for number, sql in enumerate(MIGRATIONS[:4], start=1):
        con.execute(sql)
        con.execute("INSERT INTO schema_version VALUES (?)", [number])
    con.execute("INSERT INTO stores (url, reader) VALUES ('old', 'native')")
    con.execute("""INSERT INTO checkpoints (store_id, run_id, checkpoint_id, status, listed_status)
                   VALUES (1, 'r', 'c1', 'ok', 'ok'), (1, 'r', 'c2', 'corrupt', 'corrupt')""")
    con.close()
    catalog = Catalog(path)
    with catalog.connect() as con:
        assert con.execute("SELECT checkpoint_id, status FROM checkpoints ORDER BY 1").fetchall() == [
            ("c1", "ok"), ("c2", "corrupt")]
        assert con.execute("SELECT checkpoints, corrupt FROM runs").fetchall() == [(2, 1)]
    summary = index_store(catalog, url)
    assert summary.refresh.checkpoints == 8 and len(queries.list_checkpoints(catalog, summary.store.store_id)) == 8
