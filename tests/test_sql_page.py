"""The SQL page (editor, examples, grid with row cap and true count, exports, the query in the URL),
the exports under every page's tables, and the "Download report" buttons — Streamlit AppTest over
the demo store (tests/fixtures_browser.py: a secret in its state and in an error event, one
damaged checkpoint). A download is made by calling the very function Streamlit registered for it."""

from __future__ import annotations

import csv
import io
import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from streamlit.runtime.media_file_manager import MediaFileManager
from streamlit.testing.v1 import AppTest

from lastgood.display import export
from lastgood.index.sql import EXAMPLES
from lastgood.ui import report_button
from lastgood.ui.sql import GRID_SENT_KEY, PAGE_LIMIT, VIEWS_KEY
from tests.fixtures_browser import SECRET, DemoStore, build_demo_store

ROOT = Path(__file__).resolve().parents[1]
ENTRY = str(ROOT / "app" / "streamlit_app.py")
TIMEOUT = 60


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> DemoStore:
    base = tmp_path_factory.mktemp("sqlpage")
    return build_demo_store(base / "store", base / "home")


@pytest.fixture()
def downloads(demo: DemoStore, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """The app's environment; every deferred download registered, by file name (the latest wins)."""
    monkeypatch.setenv("LASTGOOD_HOME", str(demo.home))
    monkeypatch.setenv("LASTGOOD_STORES", demo.url)
    monkeypatch.delenv("LASTGOOD_ALLOW_WRITE", raising=False)
    registered: dict[str, Any] = {"url": demo.url}
    original = MediaFileManager.add_deferred

    def recording(self: MediaFileManager, data_callable: Any, mimetype: Any, coordinates: str,
                  file_name: str | None = None, **kwargs: Any) -> str:
        registered[str(file_name)] = data_callable
        return original(self, data_callable, mimetype, coordinates, file_name, **kwargs)

    monkeypatch.setattr(MediaFileManager, "add_deferred", recording)
    return registered


def open_page(page: str, **params: str) -> AppTest:
    at = AppTest.from_file(ENTRY, default_timeout=TIMEOUT)
    for name, value in params.items():
        at.query_params[name] = value
    at.run()
    if page != "overview":
        at.switch_page(f"../pages/{page}.py")
        for name, value in params.items():
            at.query_params[name] = value
        at.run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def captions(at: AppTest) -> str:
    return "\n".join(c.value for c in at.caption)


def labels(at: AppTest) -> list[str]:
    return [b.proto.label for b in at.get("download_button")]


def test_a_linked_query_runs_capped_with_its_true_count_and_exports_whole(downloads: dict[str, Any]) -> None:
    query = f"SELECT n, n % 7 AS r FROM range({PAGE_LIMIT + 2_000}) t(n)"
    at = open_page("sql", sql=query)
    assert at.text_area(key="sql_query").value == query
    (grid,) = at.dataframe
    assert len(grid.value) == PAGE_LIMIT and list(grid.value.columns) == ["n", "r"]
    assert f"{PAGE_LIMIT:,} of {PAGE_LIMIT + 2_000:,} rows" in captions(at)
    assert at.query_params["sql"] == query and at.query_params["store"] == downloads["url"]
    assert labels(at) == ["CSV", "Parquet", "JSON"]
    rows = list(csv.DictReader(io.StringIO(downloads["lastgood-sql-result.csv"]().decode())))
    assert len(rows) == PAGE_LIMIT + 2_000 and rows[-1] == {"n": str(PAGE_LIMIT + 1_999), "r": str((PAGE_LIMIT + 1_999) % 7)}
    parquet = pq.read_table(io.BytesIO(downloads["lastgood-sql-result.parquet"]()))
    assert parquet.num_rows == PAGE_LIMIT + 2_000
    assert len(json.loads(downloads["lastgood-sql-result.json"]())) == PAGE_LIMIT + 2_000


def test_an_example_fills_the_editor_the_grid_and_the_url(downloads: dict[str, Any]) -> None:
    at = open_page("sql")
    title, query = next((t, q) for t, q in EXAMPLES if t == "Findings by check per agent")
    at.selectbox(key="sql_example").select(title).run()
    assert not at.exception
    assert at.text_area(key="sql_query").value == query and at.query_params["sql"] == query
    (grid,) = at.dataframe
    assert list(grid.value.columns) == ["agent", "check_id", "severity", "findings"]
    assert "blob-missing" in set(grid.value["check_id"])  # the demo store's damaged checkpoint
    stale = next(q for t, q in EXAMPLES if t.startswith("Runs whose last good"))
    at.selectbox(key="sql_example").select(EXAMPLES[0][0]).run()
    assert at.text_area(key="sql_query").value == stale and len(at.dataframe[0].value) == 3  # runs from 2026-11


def test_a_refused_or_failing_query_is_one_error_line(downloads: dict[str, Any], tmp_path: Path) -> None:
    at = open_page("sql")
    at.text_area(key="sql_query").input(f"COPY (SELECT * FROM checkpoints) TO '{tmp_path}/x.csv'").run()
    assert not at.exception and "only queries run here" in at.error[0].value and not at.dataframe
    at.text_area(key="sql_query").input("SELECT nope FROM checkpoints").run()
    assert not at.exception and at.error[0].value.startswith("the query failed: Binder Error")
    assert list(tmp_path.iterdir()) == []


def test_secrets_stay_redacted_in_the_grid_and_the_exports(downloads: dict[str, Any]) -> None:
    at = open_page("sql", sql="SELECT kind, message FROM events")
    (grid,) = at.dataframe
    assert "[redacted]" in " ".join(grid.value["message"]) and SECRET not in grid.value.to_csv()
    for fmt in ("csv", "json", "parquet"):
        assert SECRET.encode() not in downloads[f"lastgood-sql-result.{fmt}"]()


def test_every_table_exports_named_after_what_it_holds(downloads: dict[str, Any], demo: DemoStore) -> None:
    at = open_page("overview").run()  # the tables follow the first screen
    assert {"lastgood-recent-failures.csv", "lastgood-agents.csv", "lastgood-runs.json"} <= set(downloads)
    runs = list(csv.DictReader(io.StringIO(downloads["lastgood-runs.csv"]().decode())))
    assert sorted(r["run_id"] for r in runs) == ["run-alpha", "run-beta", "run-gamma"]
    at.switch_page("../pages/integrity.py").run()
    assert not at.exception
    findings = json.loads(downloads["lastgood-findings.json"]())
    assert any(f["check"] == "blob-missing" and f["run_id"] == "run-gamma" for f in findings)
    assert {"lastgood-runs-health.parquet", "lastgood-findings-by-check.csv"} <= set(downloads)
    assert SECRET.encode() not in downloads["lastgood-findings.csv"]()


def test_download_report_on_integrity_timeline_and_diff(downloads: dict[str, Any], demo: DemoStore) -> None:
    at = open_page("integrity")
    assert "Download report" in labels(at)
    whole = downloads["lastgood-report.html"]().decode()
    assert whole.startswith("<!DOCTYPE html>") and 'id="findings"' in whole and SECRET not in whole
    at = open_page("timeline", store=demo.url, run="run-beta")
    assert "Download report" in labels(at)
    run_report = downloads["lastgood-report-run-beta.html"]().decode()
    assert 'id="timeline"' in run_report and run_report.count('class="ckpt"') == 6 and SECRET not in run_report
    beta = demo.of_run("run-beta")
    at = open_page("diff", store=demo.url, a=beta[1].checkpoint_id, b=beta[4].checkpoint_id)
    assert "Download report" in labels(at)
    name = next(n for n in downloads if n.startswith("lastgood-report-diff-"))
    assert name == report_button.file_name(None, (beta[1].checkpoint_id, beta[4].checkpoint_id))
    assert 'id="diff"' in downloads[name]().decode()


def test_export_encodes_nested_times_and_mixed_values() -> None:
    when = datetime(2026, 11, 3, 12, 0, tzinfo=UTC)
    frame = pd.DataFrame({"run_id": ["a", "b"], "at": [when, when], "meta": [{"k": 1}, None],
                          "mixed": [1, "two"]})
    rows = list(csv.DictReader(io.StringIO(export.encode(frame, "csv").decode())))
    assert rows[0]["meta"] == '{"k": 1}' and rows[1]["mixed"] == "two"
    assert json.loads(export.encode(frame, "json"))[0] == {"run_id": "a", "at": "2026-11-03T12:00:00+00:00",
                                                           "meta": {"k": 1}, "mixed": "1"}
    table = pq.read_table(io.BytesIO(export.encode(pa.table({"n": [1, 2]}), "parquet")))
    assert table.column("n").to_pylist() == [1, 2]
    assert export.file_stem("diff changes /messages") == "lastgood-diff-changes-messages"
    with pytest.raises(ValueError):
        export.encode(frame, "xlsx")


def test_the_editor_sits_above_the_result_it_is_drawn_after(downloads: dict[str, Any]) -> None:
    """The editor's widgets are drawn after the grid (the browser builds the grid first) into a slot
    placed above it: the page reads editor, examples, result."""
    at = open_page("sql", sql="SELECT 1 AS one")
    kinds = [node.type for node in at.main if hasattr(node, "type")]
    assert kinds.index("selectbox") < kinds.index("text_area") < kinds.index("dataframe")
    assert at.text_area(key="sql_query").value == "SELECT 1 AS one" and len(at.dataframe[0].value) == 1


def test_the_views_reference_is_sent_only_once_opened(downloads: dict[str, Any]) -> None:
    """Its ~2.6 kB of Markdown is not part of the first screen; opening the expander (a rerun)
    brings every view with its columns."""
    at = open_page("sql", sql="SELECT 1 AS one")
    (views,) = at.expander
    assert views.label == "Views and their columns" and not views.children
    assert not any("`checkpoints`" in m.value for m in at.markdown)
    at.session_state[VIEWS_KEY] = True  # what the browser sends when the operator opens it
    at.run()
    assert not at.exception
    shown = "\n".join(m.value for m in at.expander[0].markdown)
    assert all(f"**`{name}`**" in shown for name in ("checkpoints", "runs", "findings", "events", "actions"))
    assert "`run_id` VARCHAR" in shown and len(at.dataframe) == 1  # the result stays


def test_the_waiting_grid_is_replaced_by_the_result_or_goes(downloads: dict[str, Any], tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """The first run's empty grid (placed before the store is opened, so the browser loads the grid's
    code meanwhile) never stays beside a result, an error or a page without a store."""
    at = open_page("sql", sql="SELECT 2 AS two")
    (grid,) = at.dataframe
    assert list(grid.value.columns) == ["two"] and at.session_state[GRID_SENT_KEY] is True
    at.text_area(key="sql_query").input("SELECT nope FROM checkpoints").run()
    assert at.error and not at.dataframe
    monkeypatch.setenv("LASTGOOD_HOME", str(tmp_path / "empty-home"))
    monkeypatch.setenv("LASTGOOD_STORES", "[]")
    alone = open_page("sql")
    assert not alone.dataframe and any("No store selected" in i.value for i in alone.info)
