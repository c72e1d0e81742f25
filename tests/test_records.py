"""Printing many rows: the column-wise redaction, escaping, table and JSON give exactly what the
value-by-value walk gave, and a million-row ``ls`` no longer takes minutes (lastgood.records)."""

from __future__ import annotations

import json
import time
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from lastgood.cli import output
from lastgood.records import COLUMNAR_MIN_ROWS, columns_of
from lastgood.redact import MASK, redact

SECRETISH = ["sk-abcdefghijklmnop1234", "postgresql://bob:hunter2@db/x", "api_key=abc123", "Bearer abcdefghijklmnop",
             "AKIAABCDEFGHIJKLMNOP", "tok", "plain", "", "a\x1b[31mred", "bidi\u202eevil", "line\nbreak", "k: v"]
LEAVES = st.one_of(st.none(), st.integers(), st.booleans(), st.floats(allow_nan=False), st.sampled_from(SECRETISH),
                   st.text(max_size=12), st.just(datetime(2026, 11, 1, 8, 0, 1, tzinfo=UTC)))
VALUES = st.one_of(LEAVES, st.lists(LEAVES, max_size=3), st.dictionaries(st.sampled_from(["token", "n"]), LEAVES,
                                                                          max_size=2))
KEYS = st.lists(st.sampled_from(["run_id", "api_key", "password", "status", "max_tokens", "note\x07", "dsn"]),
                min_size=1, max_size=5, unique=True)


class Text(str):
    """A ``str`` subclass: always walked value by value."""


def _records(keys: list[str], cells: list[Any], rows: int) -> list[dict[str, Any]]:
    return [{k: cells[(i * len(keys) + j) % len(cells)] for j, k in enumerate(keys)} for i in range(rows)]


@settings(max_examples=60, deadline=None)
@given(KEYS, st.lists(VALUES, min_size=1, max_size=40), st.integers(COLUMNAR_MIN_ROWS, 3 * COLUMNAR_MIN_ROWS))
def test_redacting_records_a_column_at_a_time_equals_row_by_row(keys: list[str], cells: list[Any],
                                                                rows: int) -> None:
    records = _records(keys, cells, rows)
    assert columns_of(records) is not None
    expected = [redact(r) for r in records]  # one dict at a time: the value-by-value walk
    assert redact(records) == expected
    assert output.escape_tree(records) == [output.escape_tree(r) for r in records]
    assert output.escape_tree(redact(records)) == [output.escape_tree(r) for r in expected]


def test_a_secret_in_one_row_of_many_is_masked_and_the_input_is_left_alone() -> None:
    rows = [{"run_id": f"run-{i}", "note": "fine", "password": "pw" if i % 2 else ""} for i in range(500)]
    rows[321]["note"] = "connect postgresql://bob:hunter2@db/x now"
    rows[400]["run_id"] = Text("token=abcdef123")
    out = redact(rows)
    assert "hunter2" not in json.dumps(out)
    assert out[321]["note"] == f"connect postgresql://{MASK}@db/x now"
    assert out[400]["run_id"] == f"token={MASK}" and out[1]["password"] == MASK and out[0]["password"] == ""
    assert rows[321]["note"].endswith("hunter2@db/x now") and rows[1]["password"] == "pw"
    out[0]["run_id"] = "changed"  # a copy even where nothing was redacted
    assert rows[0]["run_id"] == "run-0"


def test_mixed_shapes_and_few_rows_take_the_value_by_value_walk() -> None:
    assert columns_of([{"a": 1}] * (COLUMNAR_MIN_ROWS - 1)) is None
    assert columns_of([{"a": 1}] * COLUMNAR_MIN_ROWS + [{"b": 1}]) is None
    assert columns_of([{"a": 1, "b": 2}] * COLUMNAR_MIN_ROWS + [{"b": 2, "a": 1}]) is None
    mixed = [{"a": "sk-abcdefghijklmnop1234"}] * COLUMNAR_MIN_ROWS + ["sk-abcdefghijklmnop1234"]
    assert redact(mixed) == [{"a": MASK}] * COLUMNAR_MIN_ROWS + [MASK]


def _old_table(rows: list[list[Any]], header: list[str]) -> str:
    widths = [max(len(str(c)) for c in col) for col in zip(header, *rows)]
    return "\n".join("  ".join(str(c).ljust(w) for c, w in zip(r, widths)).rstrip() for r in [header, *rows])


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 5).flatmap(lambda n: st.tuples(
    st.lists(st.text(max_size=6), min_size=n, max_size=n),
    st.lists(st.lists(st.one_of(st.none(), st.integers(), st.text(max_size=8)), min_size=n, max_size=n),
             max_size=20))))
def test_table_prints_what_it_printed_cell_by_cell(case: tuple[list[str], list[list[Any]]]) -> None:
    header, rows = case
    assert output.table(rows, header) == _old_table(rows, header)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.dictionaries(st.sampled_from(["a", "b", "c"]), st.one_of(
    LEAVES, st.floats(), st.lists(st.integers(), max_size=2))), max_size=5))
def test_json_of_records_is_the_text_json_dumps_writes(rows: list[dict[str, Any]]) -> None:
    try:
        expected = json.dumps(rows, default=output.to_jsonable, indent=2, ensure_ascii=False, allow_nan=False)
    except ValueError:
        expected = json.dumps(output._nan_safe(rows), default=output.to_jsonable, indent=2, ensure_ascii=False)
    assert output.dumps(rows) == expected


def ls_rows(n: int) -> list[dict[str, Any]]:
    start = datetime(2026, 11, 1, tzinfo=UTC)
    return [{"run_id": f"run-{i // 500:06d}", "namespace": "", "checkpoint_id": str(uuid.UUID(int=i)),
             "parent_id": str(uuid.UUID(int=i - 1)) if i % 500 else None, "step": i % 500,
             "created_at": start + timedelta(seconds=i), "trigger": "periodic", "kind": "incremental",
             "status": "ok", "status_reason": None, "size_bytes": 469, "data_checked": False} for i in range(n)]


def test_printing_a_hundred_thousand_ls_rows_takes_seconds_not_minutes(capsys: Any) -> None:
    """``output.emit`` as ``lastgood ls`` calls it, both formats. The value-by-value walk took
    ~21 s for these rows here (~210 s for a million); the column-wise one ~3.5 s. The bound
    leaves room for a busy machine."""
    rows = ls_rows(100_000)
    started = time.perf_counter()
    output.emit(rows, "table", output.render_ls)
    output.emit(rows, "json", output.render_ls)
    elapsed = time.perf_counter() - started
    table_text, json_text = capsys.readouterr().out.split("\n[\n", 1)
    assert table_text.count("\n") == 100_001 and json.loads("[\n" + json_text)[-1]["step"] == 99_999 % 500
    assert elapsed < 10.0, f"{elapsed:.1f} s"


TIMES = st.one_of(st.none(), st.datetimes(min_value=datetime(1971, 1, 1), max_value=datetime(2200, 12, 31),
                                         timezones=st.just(UTC)))


def _listed_times(times: list[datetime | None], zone: str) -> tuple[list[Any], list[Any], list[Any]]:
    """``created_at`` of ``times`` as ``ls`` reads it: Python datetimes, "table" text, "json" text."""
    from lastgood.index import queries
    from lastgood.index.catalog import Catalog

    catalog = Catalog(":memory:")
    with catalog.connect() as con:
        con.execute(f"SET GLOBAL TimeZone = '{zone}'")
        con.execute("INSERT INTO stores (url) VALUES ('x')")
        con.executemany("INSERT INTO checkpoint_rows (store_id, run_id, checkpoint_id, created_at, status) "
                        "VALUES (1, 'r', ?, ?, 'ok')", [[f"c{i:04d}", t] for i, t in enumerate(times)])
    listed = [queries.list_checkpoints(catalog, 1, time_text=style) for style in (None, "table", "json")]
    return tuple([row["created_at"] for row in rows] for rows in listed)  # type: ignore[return-value]


@settings(max_examples=40, deadline=None)
@given(st.lists(TIMES, min_size=1, max_size=30))
def test_ls_times_formatted_by_duckdb_are_the_text_python_printed(times: list[datetime | None]) -> None:
    values, table_text, json_text = _listed_times(times, "UTC")
    assert table_text == [output._time(v) if v is not None else None for v in values]
    assert json_text == [output.to_jsonable(v) if v is not None else None for v in values]
    assert any(v is None for v in values) or all(isinstance(t, str) for t in json_text)


def test_outside_utc_the_table_keeps_the_local_time_and_json_keeps_pythons_offset() -> None:
    summer = datetime(2026, 7, 1, 12, 0, 0, 250000, tzinfo=UTC)
    values, table_text, json_text = _listed_times([summer], "Europe/Berlin")
    assert table_text == ["2026-07-01 14:00:00"] == [output._time(values[0])]
    assert json_text == values and output.to_jsonable(json_text[0]) == "2026-07-01T14:00:00.250000+02:00"



def test_json_of_records_holding_bytes_is_the_text_json_dumps_writes() -> None:
    rows = [{"a": b"raw", "b": 1}] * 3  # bytes are shown as a dict: not a flat record's one line
    assert output.dumps(rows) == json.dumps(rows, default=output.to_jsonable, indent=2, ensure_ascii=False)


def _printed(capsys: Any, fn: Any, *args: Any) -> str:
    fn(*args)
    return capsys.readouterr().out


def test_ls_printed_a_chunk_at_a_time_is_the_same_text(capsys: Any) -> None:
    rows = ls_rows(300)
    rows[7]["status_reason"] = "token sk-abcdefghijklmnop1234 \x1b[31m leaked"
    rows[250]["run_id"] = "run-\u202eevil"
    for size in (1, 64, 100, 300):
        chunks = [rows[i:i + size] for i in range(0, len(rows), size)]
        for fmt in ("table", "json"):
            expected = _printed(capsys, output.emit, rows, fmt, output.render_ls)
            assert "sk-abcdefghijklmnop1234" not in expected and "\x1b" not in expected
            assert _printed(capsys, output.emit_listing, iter(chunks), fmt) == expected, (size, fmt)
    for fmt in ("table", "json"):
        assert _printed(capsys, output.emit_listing, iter([]), fmt) == _printed(capsys, output.emit, [], fmt,
                                                                                output.render_ls)


def test_the_listing_read_a_chunk_at_a_time_is_the_whole_listing() -> None:
    from lastgood.index import queries
    from lastgood.index.catalog import Catalog

    catalog = Catalog(":memory:")
    with catalog.connect() as con:
        con.execute("INSERT INTO stores (url) VALUES ('x')")
        con.executemany("INSERT INTO checkpoint_rows (store_id, run_id, checkpoint_id, step, created_at, status) "
                        "VALUES (1, ?, ?, ?, ?, 'ok')",
                        [[f"r{i % 3}", f"c{i:03d}", i, datetime(2026, 11, 1, tzinfo=UTC) + timedelta(seconds=i)]
                         for i in range(50)])
    for fields, style in ((None, "table"), (queries.LS_FIELDS + queries.LS_CHECK_FIELDS, "json")):
        whole = queries.list_checkpoints(catalog, 1, fields=fields, time_text=style)
        chunks = list(queries.iter_checkpoints(catalog, 1, fields=fields, time_text=style, chunk_rows=7))
        assert [len(c) for c in chunks] == [7] * 7 + [1]
        assert [row for chunk in chunks for row in chunk] == whole
    assert list(queries.iter_checkpoints(catalog, 1, run_id="none")) == []


def test_ls_rows_keep_the_times_order_when_times_are_printed_as_text() -> None:
    """Sorting is by the time, never by its text ("…:03Z" sorts after "…:03.500000Z"; a local
    time repeats when clocks go back)."""
    second = datetime(2026, 11, 1, 12, 29, 3, tzinfo=UTC)
    times = [second + timedelta(microseconds=500_000), second, second - timedelta(microseconds=100_000),
             datetime(2026, 10, 25, 0, 30, tzinfo=UTC), datetime(2026, 10, 25, 1, 10, tzinfo=UTC)]
    for zone in ("UTC", "Europe/Berlin"):  # 2026-10-25 01:00 UTC: Berlin's 03:00 becomes 02:00
        values, table_text, json_text = _listed_times(times, zone)
        # by the instant: Python compares two datetimes of one ZoneInfo by their wall time (DuckDB 2.0.1
        # returns ZoneInfo, 2.0.0 pytz's fixed offsets), and 02:10 after 02:30 is right when clocks go back
        assert [v.timestamp() for v in values] == sorted(v.timestamp() for v in values)
        assert table_text == [output._time(v) for v in values]
        assert json_text == [output.to_jsonable(v) if zone == "UTC" else v for v in values]
