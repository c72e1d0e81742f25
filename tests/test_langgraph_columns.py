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

from lastgood.readers.langgraph_common import constant_strings, int64_array, string_array
from lastgood.readers.langgraph_rows import columns_ok, key_arrays
from lastgood.readers import langgraph_sqlite
from lastgood.readers.langgraph_sqlite import LangGraphSqliteReader, missing_parents

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
        "from lastgood.readers.langgraph_sqlite import LangGraphSqliteReader\n"
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
