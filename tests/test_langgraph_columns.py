"""Column building for big LangGraph listings: Arrow arrays from buffers (no pandas
import), the set-based parent check and the pending-error structure check."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pytest

from lastgood.checks import Check
from tests.helpers import lastgood_cli

from lastgood.readers.common.columns import constant_strings, int64_array, string_array
from lastgood.readers.langgraph.rows import columns_ok, key_arrays
from lastgood.index import prefetch
from lastgood.readers.langgraph import sqlite as langgraph_sqlite
from lastgood.readers.langgraph import sqlite_fetch as langgraph_sqlite_fetch
from lastgood.readers.langgraph import sqlite_listing as langgraph_sqlite_listing
from lastgood.readers.langgraph.sqlite import LangGraphSqliteReader, missing_parents

ROOT = Path(__file__).resolve().parent.parent
SCHEMA = """
CREATE TABLE checkpoints (thread_id TEXT NOT NULL, checkpoint_ns TEXT NOT NULL DEFAULT '',
  checkpoint_id TEXT NOT NULL, parent_checkpoint_id TEXT, type TEXT, checkpoint BLOB, metadata BLOB,
  PRIMARY KEY (thread_id, checkpoint_ns, checkpoint_id));
"""


@pytest.mark.parametrize("values", [
    ["a", "bb", "", "ccc"], ["é", None, "日本", ""], [None, None], [], ["x" * 1000] * 50,
])
def test_string_array_matches_pa_array(values: list[str | None]) -> None:
    assert string_array(values).equals(pa.array(values, pa.string()))
    assert string_array(tuple(values)).to_pylist() == values


GOOD_KEYS = (["t1", "t2", "t3"], ["", None, "ns"], ["c1", "c2", "日本"], [None, "", "c1"],
             ["msgpack", None, ""])


@pytest.mark.parametrize("column, value", [
    (0, None), (0, ""), (0, 7), (0, b"t"), (0, "x" * 1025), (0, "a\x00b"), (2, ""), (2, "\ud800"),
    (1, 3.5), (1, "n\x00"), (3, "p" * 1025), (4, b"msgpack"),
])
def test_key_arrays_follow_the_columns_ok_rules(column: int, value: object) -> None:
    """The arrays are built only when the fast check would pass; any value it rejects
    sends the batch to the row-by-row judge (None)."""
    assert columns_ok(GOOD_KEYS)
    arrays = key_arrays(GOOD_KEYS)
    assert arrays is not None
    assert arrays["run_id"].to_pylist() == ["t1", "t2", "t3"]
    assert arrays["namespace"].to_pylist() == ["", "", "ns"]  # NULL namespace stored as ''
    assert arrays["checkpoint_id"].to_pylist() == ["c1", "c2", "日本"]
    assert arrays["parent_id"].to_pylist() == [None, None, "c1"]  # '' parent: no parent
    assert arrays["codec"].to_pylist() == ["msgpack", None, ""]
    bad = [list(c) for c in GOOD_KEYS]
    bad[column][1] = value
    assert key_arrays(bad) is None
    if value != "\ud800":  # SQLite never returns a lone surrogate; the row judge rejects it
        assert not columns_ok(bad)


def test_binary_int_and_constant_arrays() -> None:
    blobs = [b"{}", None, b"\xff\x00", b""]
    assert string_array(blobs, binary=True).equals(pa.array(blobs, pa.binary()))
    ints = [1, None, -(2**63), 2**63 - 1, 0]
    assert int64_array(ints).equals(pa.array(ints, pa.int64()))
    assert constant_strings("full", 3).to_pylist() == ["full"] * 3
    assert constant_strings("ok", 0).to_pylist() == []


def test_odd_values_fall_back_to_pa_array() -> None:
    assert string_array([b"bytes-as-text", "text"]).to_pylist() == ["bytes-as-text", "text"]
    with pytest.raises((pa.ArrowInvalid, pa.ArrowTypeError)):
        string_array([1, "a"])


def test_missing_parents_with_unique_ids() -> None:
    batch = (("t1", "t1", "t2"), ("", None, ""), ("a", "b", "c"), (None, "a", "gone"))
    assert missing_parents([batch]) == {("t2", "", "c"): "gone"}
    assert missing_parents([(("t",), ("",), ("a",), ("",))]) == {}


def test_missing_parents_matches_whole_keys_when_ids_repeat() -> None:
    # "b" exists, but only in thread t1: t2's row lost its parent
    first = (("t1", "t1"), ("", ""), ("a", "b"), (None, "a"))
    second = (("t2", "t2"), ("", ""), ("a", "c"), (None, "b"))
    assert missing_parents([first, second]) == {("t2", "", "c"): "b"}


def _tiny_db(path: Path, rows: int = 30) -> Path:
    conn = sqlite3.connect(path)
    conn.executescript(SCHEMA)
    meta = json.dumps({"source": "loop", "step": 1, "graph_id": "g"}).encode()
    for i in range(rows):
        parent = None if i == 0 else f"1f000000-0000-6000-8000-{i - 1:012d}"
        conn.execute("INSERT INTO checkpoints VALUES ('t', '', ?, ?, 'msgpack', X'80', ?)",
                     (f"1f000000-0000-6000-8000-{i:012d}", parent, meta))
    conn.commit()
    conn.close()
    return path


def test_listing_does_not_import_pandas(tmp_path: Path) -> None:
    db = _tiny_db(tmp_path / "tiny.sqlite")
    code = (
        "import sys\n"
        "from lastgood.readers.langgraph.sqlite import LangGraphSqliteReader\n"
        f"scan = LangGraphSqliteReader({str(db)!r}).scan()\n"
        "rows = sum(t.num_rows for t in scan.checkpoints)\n"
        "print(rows, len(scan.heads), 'pandas' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["30", "1", "False"]


def test_scan_of_tiny_db_is_ok_and_leaves_no_files(tmp_path: Path) -> None:
    db = _tiny_db(tmp_path / "tiny.sqlite")
    before = sorted(p.name for p in tmp_path.iterdir())
    with LangGraphSqliteReader(str(db)) as reader:
        scan = reader.scan()
        table = pa.concat_tables(list(scan.checkpoints))
    assert set(table["status"].to_pylist()) == {"ok"}
    assert table["parent_id"].null_count == 1 and table["step"].to_pylist() == [1] * 30
    assert [h.checkpoint_id for h in scan.heads] == [max(table["checkpoint_id"].to_pylist())]
    assert sorted(p.name for p in tmp_path.iterdir()) == before


def test_heads_and_events_are_the_same_with_or_without_the_side_connection(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Heads and special writes are queried beside the listing (a second connection in a
    thread) when no writer is active, and on the scan's own connection when one is: the
    scan reports the same either way."""
    db = _tiny_db(tmp_path / "two.sqlite", rows=5)
    conn = sqlite3.connect(db)
    conn.execute("INSERT INTO checkpoints VALUES ('u', '', '1f000000-0000-6000-8000-000000000099', NULL, "
                 "'msgpack', X'80', '{\"step\": 0}')")
    conn.execute("""CREATE TABLE writes (thread_id TEXT NOT NULL, checkpoint_ns TEXT NOT NULL DEFAULT '',
        checkpoint_id TEXT NOT NULL, task_id TEXT NOT NULL, task_path TEXT NOT NULL DEFAULT '',
        idx INTEGER NOT NULL, channel TEXT NOT NULL, type TEXT, value BLOB,
        PRIMARY KEY (thread_id, checkpoint_ns, checkpoint_id, task_id, idx))""")
    conn.execute("INSERT INTO writes VALUES ('t', '', '1f000000-0000-6000-8000-000000000002', 'task', '', -3, "
                 "'__interrupt__', 'msgpack', X'A3616263')")  # msgpack "abc"
    conn.execute("INSERT INTO writes VALUES ('t', '', '1f000000-0000-6000-8000-000000000002', 'task', '', 0, "
                 "'messages', 'msgpack', X'80')")
    conn.commit()
    conn.close()

    sides: list[object] = []
    real_side = langgraph_sqlite.SideQueries

    def side(*args: object) -> object:
        sides.append(real_side(*args))
        return sides[-1]

    monkeypatch.setattr(langgraph_sqlite, "SideQueries", side)

    def scanned() -> tuple[list[tuple[str, str, str]], list[dict[str, object]]]:
        with LangGraphSqliteReader(str(db)) as reader:
            scan = reader.scan()
            heads = sorted((h.run_id, h.namespace, h.checkpoint_id) for h in scan.heads)
            events = [row for table in scan.events for row in table.select(["run_id", "kind", "message"]).to_pylist()]
        return heads, events

    quiet = scanned()
    assert len(sides) == 1 and sides[0].rows("heads") and sides[0].rows("events")  # answered beside the listing
    assert quiet[0] == [("t", "", "1f000000-0000-6000-8000-000000000004"),
                        ("u", "", "1f000000-0000-6000-8000-000000000099")]
    assert quiet[1] == [{"run_id": "t", "kind": "interrupt", "message": "abc"}]
    Path(f"{db}-journal").write_bytes(b"")  # an (empty, not hot) journal: a writer may be active
    assert scanned() == quiet
    assert len(sides) == 1  # with a writer possibly active, the scan's own connection answered


# --- column-wise ranges and the prefetch (readers.langgraph_sqlite_fetch) -----------------

ID = "1f000000-0000-6000-8000-{:012d}"


def _mixed_db(path: Path) -> Path:
    """60 plain rows in two threads, with odd rows among them: each kind of value the
    column-wise path must hand to the row-by-row judge, and some it may keep."""
    conn = sqlite3.connect(path)
    conn.executescript(SCHEMA.replace("NOT NULL", ""))
    meta = json.dumps({"source": "loop", "step": 1, "graph_id": "g"}).encode()
    for i in range(60):
        parent = None if i in (0, 30) else ID.format(i - 1)
        conn.execute("INSERT INTO checkpoints VALUES (?, '', ?, ?, 'msgpack', X'80', ?)",
                     ("t" if i < 30 else "日本", ID.format(i), parent, meta))
    odd = [  # (rowid, column, SQL value); the row of rowid r holds ID.format(r - 1)
        (3, "thread_id", "X'74'"), (8, "metadata", "CAST('{\"step\":\n 2}' AS BLOB)"), (12, "metadata", "NULL"),
        (17, "type", "'weird'"), (21, "parent_checkpoint_id", "'gone'"), (25, "checkpoint_id", "X'C328'"),
        (33, "thread_id", "'a' || char(0) || 'b'"), (37, "checkpoint_id", "'" + "x" * 1025 + "'"),
        (41, "checkpoint_ns", "NULL"), (42, "parent_checkpoint_id", "''"), (45, "checkpoint", "NULL"),
        (49, "metadata", "'not json'"), (53, "type", "NULL"), (57, "metadata", "'{\"step\": 3}'"),
    ]
    for rowid, column, value in odd:
        conn.execute(f"UPDATE checkpoints SET {column} = {value} WHERE rowid = ?", (rowid,))
    conn.execute("UPDATE checkpoints SET checkpoint_id = CAST(checkpoint_id AS TEXT) WHERE rowid = 25")
    conn.commit()
    conn.close()
    return path


def _listing(db: Path) -> tuple[list[dict[str, object]], list[tuple[object, ...]], list[tuple[str, ...]]]:
    with LangGraphSqliteReader(str(db)) as reader:
        scan = reader.scan()
        tables = list(scan.checkpoints)
        rows = pa.concat_tables(tables).sort_by("checkpoint_id").to_pylist() if tables else []
        findings = sorted(((f.check, f.severity, f.message, f.run_id, f.checkpoint_id) for f in scan.findings),
                          key=repr)
        heads = sorted(((h.run_id, h.namespace, h.checkpoint_id) for h in scan.heads or ()), key=repr)
    return rows, findings, heads


def _count_paths(monkeypatch: pytest.MonkeyPatch, force_rows: bool = False) -> dict[str, int]:
    counts = {"columns": 0, "rows": 0}
    real = langgraph_sqlite.chunk_columns

    def chunk_columns(row: object) -> object:
        cols = None if force_rows else real(row)
        counts["columns" if cols is not None else "rows"] += 1
        return cols

    monkeypatch.setattr(langgraph_sqlite, "chunk_columns", chunk_columns)
    return counts


@pytest.mark.parametrize("live", [False, True])
def test_column_wise_ranges_list_what_rows_list(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                live: bool) -> None:
    """Ranges of plain rows are taken column-wise, any range with an odd row row by row:
    rows, statuses, findings and heads are those of the row-by-row listing, whether the
    ranges were fetched in threads (no writer) or on the scan's connection (writer)."""
    db = _mixed_db(tmp_path / "mixed.sqlite")
    if live:
        Path(f"{db}-journal").write_bytes(b"")
    monkeypatch.setattr(langgraph_sqlite_fetch, "CHUNK_ROWS", 3)
    counts = _count_paths(monkeypatch)
    fast = _listing(db)
    assert counts["columns"] >= 5 and counts["rows"] >= 5  # both ways were taken
    counts = _count_paths(monkeypatch, force_rows=True)
    assert _listing(db) == fast
    rows, findings, _heads = fast
    assert len(rows) == 60 - 4  # blob thread, not-UTF-8 id, NUL in thread, 1025-char id: skipped
    statuses = {row["checkpoint_id"]: row["status"] for row in rows}
    assert statuses[ID.format(16)] == statuses[ID.format(20)] == statuses[ID.format(48)] == "corrupt"
    assert statuses[ID.format(7)] == statuses[ID.format(40)] == statuses[ID.format(56)] == "ok"
    assert {f[0] for f in findings} >= {Check.ROW_INVALID, Check.UNKNOWN_CODEC, Check.PARENT_MISSING,
                                        Check.METADATA_INVALID}
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["mixed.sqlite"] + ["mixed.sqlite-journal"] * live)


def test_a_prefetch_is_taken_only_while_the_files_are_unchanged(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(langgraph_sqlite_fetch, "CHUNK_ROWS", 7)
    db = _mixed_db(tmp_path / "mixed.sqlite")
    expected = _listing(db)
    taken: list[object] = []
    real_take = langgraph_sqlite.take_prefetched
    monkeypatch.setattr(langgraph_sqlite, "take_prefetched", lambda *a: taken.append(real_take(*a)) or taken[-1])
    assert langgraph_sqlite_fetch.prefetch_url(str(db))
    assert _listing(db) == expected and taken[-1] is not None  # the scan used the prefetch
    assert langgraph_sqlite_fetch.prefetch_url(str(db))
    conn = sqlite3.connect(db)  # a commit after the prefetch started: the scan reads again
    conn.execute("INSERT INTO checkpoints VALUES ('new', '', ?, NULL, 'msgpack', X'80', '{}')", (ID.format(99),))
    conn.commit()
    conn.close()
    rows, _findings, heads = _listing(db)
    assert taken[-1] is None and len(rows) == len(expected[0]) + 1 and ("new", "", ID.format(99)) in heads
    assert not langgraph_sqlite_fetch.prefetch_url(str(tmp_path / "absent.sqlite"))
    (tmp_path / "plain.txt").write_text("not a database")
    assert not langgraph_sqlite_fetch.prefetch_url(str(tmp_path / "plain.txt"))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mixed.sqlite", "plain.txt"]


def test_prefetch_command_starts_only_a_first_listing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    db = str(_tiny_db(tmp_path / "tiny.sqlite"))
    home = tmp_path / "home"
    started: list[str] = []
    monkeypatch.setattr(langgraph_sqlite_fetch, "prefetch", lambda path: started.append(str(path)) or True)

    def command(*argv: str) -> bool:
        monkeypatch.setattr(prefetch, "_started", False)
        return prefetch.prefetch_command(argv)

    assert command("index", db, "--home", str(home)) and started == [db]
    assert command("--home", str(home), "ls", db, "--status", "ok")
    assert command(f"--home={home}", "show", db, "abc", "--format", "json")
    assert not command("ui", db, "--home", str(home))
    assert not command("index", db, "--home", str(home), "--reader", "native")
    assert not command("index", f"postgresql://h/{db}", "--home", str(home))
    assert not command("index", str(tmp_path / "nothing.sqlite"), "--home", str(home))
    home.mkdir()
    (home / "index.duckdb").write_bytes(b"")
    assert not command("index", db, "--home", str(home))  # an index exists: maybe a reopen
    assert len(started) == 3
    assert prefetch.prefetch_store(db) and not prefetch.prefetch_store(db, "native") and len(started) == 4
    monkeypatch.setattr(prefetch, "_started", True)
    assert not prefetch.prefetch_command(["index", db, "--home", str(tmp_path / "other")])  # once per process


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="counts threads in /proc")
def test_listing_commands_start_no_openblas_threads(tmp_path: Path) -> None:
    """`lastgood index/ls/show` import numpy with OpenBLAS at one thread (its pool spins for
    work the listing never gives it, on the cores the fetch threads need); a value the user
    set stays; other commands are left alone."""
    code = ("import os, sys; from lastgood.index.prefetch import prefetch_command; "
            "prefetch_command(sys.argv[1:]); import numpy; "
            "print(os.environ.get('OPENBLAS_NUM_THREADS'), len(os.listdir('/proc/self/task')))")
    home = str(tmp_path / "home")

    def run(*argv: str, **env: str) -> list[str]:
        import os

        environ = {k: v for k, v in os.environ.items() if k != "OPENBLAS_NUM_THREADS"}
        done = subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True,
                              env={**environ, **env}, check=True)
        return done.stdout.split()

    absent = str(tmp_path / "absent.sqlite")  # nothing to prefetch: no fetch threads either
    assert run("index", absent, "--home", home) == ["1", "1"]
    assert run("--home", home, "ls", absent) == ["1", "1"]
    assert run("index", absent, "--home", home, OPENBLAS_NUM_THREADS="2")[0] == "2"
    assert run("verify", absent, "--home", home)[0] == "None"


def test_cli_index_with_prefetch_matches_the_api_and_writes_nothing(tmp_path: Path) -> None:
    """The console script prefetches a first listing (fresh home); the index it builds is
    the one the API builds, and the store's folder gains no file."""
    (tmp_path / "store").mkdir()
    db = _mixed_db(tmp_path / "store" / "mixed.sqlite")
    done = lastgood_cli("index", str(db), "--format", "json", home=tmp_path / "home", check_json=True)
    report = json.loads(done.stdout)
    from lastgood.config import load_settings
    from lastgood.stores import index_store, open_catalog
    from lastgood.integrity.verify import store_findings

    catalog = open_catalog(load_settings(tmp_path / "api"))
    summary = index_store(catalog, str(db))
    found = store_findings(catalog, summary.store.store_id)
    assert report["checkpoints_read"] == summary.refresh.checkpoints == 56
    def keys(findings: list[dict[str, object]]) -> list[tuple[object, ...]]:
        return sorted((f["check"], f["severity"], f["message"], str(f.get("checkpoint_id"))) for f in findings)

    assert keys(report["findings"]) == keys(found) and len(found) >= 8
    assert sorted(p.name for p in db.parent.iterdir()) == ["mixed.sqlite"]


@pytest.mark.parametrize("after, last, rows", [(0, 100_800, 100_800), (100_790, 100_800, 100_800),
                                               (0, 2**62, 10), (7, 7, 3), (0, 5, 0)])
def test_ranges_cover_every_rowid_once_in_a_bounded_number_of_queries(after: int, last: int, rows: int) -> None:
    spans = langgraph_sqlite_fetch.ranges(after, last, rows)
    assert len(spans) <= rows // langgraph_sqlite_fetch.CHUNK_ROWS + 1
    if last > after:
        assert spans[0][0] == after and spans[-1][1] == last
        assert all(a[1] == b[0] and a[0] < a[1] for a, b in zip(spans, spans[1:]))
    else:
        assert spans == []


def test_chunk_sizes_parse_or_send_the_range_row_by_row() -> None:
    assert langgraph_sqlite_listing._int64s(b"1,22,333", 3).to_pylist() == [1, 22, 333]
    for raw, n in ((b"1,,3", 3), (b"1,2", 3), (b"99999999999999999999", 1), (b"x", 1)):
        assert langgraph_sqlite_listing._int64s(raw, n) is None
