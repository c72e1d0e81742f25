"""Per-step changes: the dashboard's background data check records what each checkpoint changed
against its parent, and the Timeline's points say it on hover (and SQL can query it)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from lastgood.integrity import background
from lastgood.index import queries
from lastgood.index.catalog import Catalog
from lastgood.display.figures import TimelineData, timeline_figure
from lastgood.stores import index_store
from tests.helpers import write_store


def test_background_data_check_records_step_changes_shown_on_hover(tmp_path: Path) -> None:
    url = str(tmp_path / "store")
    write_store(url, runs=1, steps=5)  # each turn appends a user and an assistant message
    index_path = str(tmp_path / "index.duckdb")
    catalog = Catalog(index_path, keep_open=False)
    store_id = index_store(catalog, url, check="structure").store.store_id
    job = background.start(index_path, url, "data")
    job.thread.join(timeout=120)
    assert job.state == "done", job.error
    frame, aggregated = queries.timeline(catalog, store_id)
    assert not aggregated
    later = frame[frame["step"] > 0]
    assert len(later) == 4 and (later["step_added"] == 2).all()
    assert all("/llm" in list(paths) for paths in later["step_paths"])
    figure = timeline_figure(TimelineData(frame, aggregated, pd.DataFrame(), len(frame)), False, "step")
    hovers = [text for trace in figure.data for text in (trace.hovertext or [])]
    assert any("vs parent: +2 −0" in text for text in hovers)
