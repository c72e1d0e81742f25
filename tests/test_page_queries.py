"""The first page's queries read ahead by ``lastgood ui`` (lastgood.index.page_queries, issue #8).

On a store the index already holds, ``lastgood ui`` runs the Overview's queries in a thread while
Streamlit starts; the first page run takes those results instead of querying after the browser
asked. Real native stores, a real index, a real AppTest run of the Overview, the real command
(its server start replaced: nothing is served).
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest
from streamlit.testing.v1 import AppTest

from lastgood.index import page_queries
from lastgood.index import queries
from lastgood.serve import process as serve
from lastgood.serve import startup
from lastgood.index.catalog import Catalog
from lastgood.readers.native.writer import NativeWriter
from lastgood.redact import redact_text
from lastgood.stores import index_store, normalize_url
from tests.helpers import write_store

ROOT = Path(__file__).resolve().parents[1]
ENTRY = str(ROOT / "app" / "streamlit_app.py")
SECRET = "sk-proj-Q3vN8xT2mK7pL4wR9sZ1cB6dF0gH5jY8"


@pytest.fixture()
def indexed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[str, str, int]:
    """A native store already in the index (a reopen), one of its events holding an API key."""
    url = normalize_url(str(tmp_path / "store"))
    write_store(url, runs=2, steps=6)
    NativeWriter(url).save("run-0", {"messages": []}, trigger="error", agent="agent-0",
                           event={"kind": "error", "message": f"tool call refused with key {SECRET}"})
    home = tmp_path / "home"
    index_path = str(home / "index.duckdb")
    catalog = Catalog(index_path)
    store_id = index_store(catalog, url, check="structure").store.store_id
    catalog.close()
    for name, value in (("LASTGOOD_HOME", str(home)), ("LASTGOOD_STORES", url)):
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("LASTGOOD_ALLOW_WRITE", raising=False)
    monkeypatch.delenv("LASTGOOD_BACKGROUND_CHECK", raising=False)
    yield url, index_path, store_id
    page_queries.forget()


def _same(a: Any, b: Any) -> bool:
    return a.equals(b) if hasattr(a, "equals") else a == b


def test_a_prepared_result_is_the_query_result_redacted_and_taken_once(indexed) -> None:
    _, index_path, store_id = indexed
    page_queries.prepare(index_path, store_id).join(60)
    catalog = Catalog(index_path)
    try:
        for name, *args in page_queries.OVERVIEW:
            taken = page_queries.take(index_path, store_id, name, tuple(args))
            assert taken is not page_queries.MISSING, name
            assert _same(taken, page_queries.run(catalog, name, store_id, *args)), name
            assert page_queries.take(index_path, store_id, name, tuple(args)) is page_queries.MISSING
        raw = page_queries.QUERIES["overview_failures"](catalog, store_id)
    finally:
        catalog.close()
    assert redact_text(SECRET) != SECRET and SECRET in str(raw.to_pylist())  # the index holds it
    page_queries.prepare(index_path, store_id).join(60)
    failures = page_queries.take(index_path, store_id, "overview_failures", ())
    assert SECRET not in str(failures.to_pylist())  # what the page is handed is redacted
    assert "tool call refused" in str(failures.to_pylist())


def test_stale_forgotten_or_failed_results_are_not_taken(indexed, tmp_path: Path, monkeypatch) -> None:
    _, index_path, store_id = indexed
    page_queries.prepare(index_path, store_id).join(60)
    monkeypatch.setattr(page_queries, "PREPARED_SECONDS", 0.0)
    assert page_queries.take(index_path, store_id, "overview", ()) is page_queries.MISSING  # too old
    monkeypatch.undo()

    page_queries.prepare(index_path, store_id).join(60)
    page_queries.forget()  # the dashboard's caches were cleared: the index changed
    assert page_queries.take(index_path, store_id, "overview", ()) is page_queries.MISSING

    blocker = tmp_path / "not-a-folder"
    blocker.write_text("")
    page_queries.prepare(str(blocker / "index.duckdb"), store_id).join(60)  # the index cannot open
    assert page_queries.take(str(blocker / "index.duckdb"), store_id, "overview", ()) is page_queries.MISSING
    assert page_queries.take(index_path, store_id, "never-prepared", ()) is page_queries.MISSING


def test_a_page_asking_while_the_query_runs_waits_for_it(indexed, monkeypatch) -> None:
    _, index_path, store_id = indexed
    release, calls = threading.Event(), []
    real = page_queries.QUERIES["overview"]

    def slow(catalog: Catalog, sid: int) -> queries.Overview:
        calls.append(sid)
        release.wait(30)
        return real(catalog, sid)

    monkeypatch.setitem(page_queries.QUERIES, "overview", slow)
    thread = page_queries.prepare(index_path, store_id, (("overview",),))
    threading.Timer(0.3, release.set).start()
    taken = page_queries.take(index_path, store_id, "overview", ())  # blocks until the thread has it
    thread.join(60)
    assert taken is not page_queries.MISSING and taken.checkpoints == 13
    assert calls == [store_id]  # read once, by the thread


def test_the_overview_takes_every_query_read_ahead(indexed, monkeypatch) -> None:
    _, index_path, store_id = indexed
    monkeypatch.setattr(startup, "first_page_shown", threading.Event())
    page_queries.prepare(index_path, store_id).join(60)
    asked: list[str] = []
    real_run = page_queries.run
    monkeypatch.setattr(page_queries, "run", lambda c, name, *a: asked.append(name) or real_run(c, name, *a))

    at = AppTest.from_file(ENTRY, default_timeout=60).run()
    assert not at.exception, [e.value for e in at.exception]
    assert {m.label: m.value for m in at.metric}["Checkpoints"] == "13"
    overview_names = {name for name, *_ in page_queries.OVERVIEW}
    # the first screen took every one but the runs table's, which its tables take on the next run
    assert [key[2] for key in page_queries._prepared] == ["overview_runs"]
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    assert any("head" in t.value.columns for t in at.dataframe), "the runs table is drawn"
    assert not overview_names & set(asked), asked  # none queried again by the page
    assert not page_queries._prepared  # every one taken
    assert not any(SECRET in str(e.value) for e in [*at.markdown, *at.caption, *at.warning, *at.info])


@pytest.mark.parametrize(("known", "allow_write", "prepared"),
                         [(True, False, True), (False, False, False), (True, True, False),
                          ("and a new one", False, False)])
def test_lastgood_ui_reads_ahead_only_for_a_known_store_shown_as_it_is(
        indexed, tmp_path: Path, monkeypatch, known: bool | str, allow_write: bool, prepared: bool) -> None:
    from lastgood.cli import main as cli
    from lastgood.ui import webserver

    url, index_path, store_id = indexed
    urls = [url]
    if known is not True:  # a never-seen store, indexed by a child process while the server starts
        other = normalize_url(str(tmp_path / "other"))
        write_store(other, runs=1, steps=2)
        urls = [other] if not known else [url, other]
    for name in ("LASTGOOD_BACKGROUND_CHECK", "LASTGOOD_ALLOW_WRITE"):
        monkeypatch.setenv(name, "0")
    calls: list[tuple[str, int]] = []
    monkeypatch.setattr(page_queries, "prepare", lambda path, sid: calls.append((path, sid)))
    def listening(host: str, port: int, when_listening=None) -> None:  # nothing served
        when_listening()  # what the server does once it listens

    monkeypatch.setattr(webserver, "run", listening)
    monkeypatch.setattr(serve, "refresh_in_background", lambda *a, **k: None)
    monkeypatch.setattr(serve, "shutdown", lambda code=0: None)
    argv = ["ui", *urls, "--port", "8599", "--home", str(Path(index_path).parent)]
    assert cli.main([*argv, "--allow-write"] if allow_write else argv) == 0
    assert calls == ([(index_path, store_id)] if prepared else [])


def test_results_no_page_took_are_dropped_after_their_time(indexed, monkeypatch) -> None:
    _, index_path, store_id = indexed
    monkeypatch.setattr(page_queries, "PREPARED_SECONDS", 0.2)
    monkeypatch.setattr(page_queries, "TAKE_WAIT_SECONDS", 0.1)
    thread = page_queries.prepare(index_path, store_id)
    assert len(page_queries._prepared) == len(page_queries.OVERVIEW)  # kept for the first page…
    thread.join(60)
    deadline = time.monotonic() + 10
    while page_queries._prepared and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not page_queries._prepared  # …and dropped when it did not come for them


def test_the_timelines_first_screen_is_read_while_the_overview_is_shown(indexed, monkeypatch) -> None:
    from lastgood import ui
    from lastgood.ui import timeline

    _, index_path, store_id = indexed
    monkeypatch.setattr(startup, "first_page_shown", threading.Event())
    monkeypatch.setattr(timeline, "TIMELINE_WARM_UP_DELAY", 0.0)
    asked: list[str] = []
    real_run = page_queries.run
    monkeypatch.setattr(page_queries, "run", lambda c, name, *a: asked.append(name) or real_run(c, name, *a))

    at = AppTest.from_file(ENTRY, default_timeout=60).run()
    assert not at.exception, [e.value for e in at.exception]
    warming = [t for t in threading.enumerate() if t.name == "lastgood-timeline-warm-up"]
    assert warming
    for thread in warming:
        thread.join(60)
    first_screen = {"runs", "lanes", "lane_points", "lane_events", "problems", "waiting_runs"}
    assert first_screen <= set(asked)  # read in the background
    assert timeline.warm_up_timeline(ui.StoreRef(index_path, indexed[0], store_id)) is None  # once per CACHE_TTL

    asked.clear()
    at.switch_page("../pages/timeline.py").run()
    assert not at.exception, [e.value for e in at.exception]
    assert at.get("plotly_chart")  # the most recent runs' lanes drawn…
    assert not first_screen & set(asked), asked  # …from what was read ahead
