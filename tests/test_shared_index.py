"""The index shared between the dashboard's background data check and CLI commands beside it.

DuckDB lets one process at a time open the index file. A data check takes minutes, so the
dashboard's background check opens the index per operation and reads what it checks a page at a
time, closing the file between pages: a CLI command run meanwhile gets it at once. Real stores
(the damaged sample store, the native writer), real processes for the command beside the check.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from lastgood.index import queries
from lastgood.integrity import verify
from lastgood.index.catalog import Catalog
from lastgood.stores import index_store
from lastgood.integrity.verify import store_findings, verify_store
from tests.helpers import SAMPLE_STORE, lastgood_cli, write_store


def _snapshot(catalog: Catalog, sid: int) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]], dict[str, int]]:
    findings = sorted((f["checkpoint_id"] or "", f["check"], f["severity"], f["message"])
                      for f in store_findings(catalog, sid))
    rows = sorted((r["checkpoint_id"], r["status"], r["status_reason"] or "")
                  for r in queries.list_checkpoints(catalog, sid))
    return findings, rows, queries.verification_depths(catalog, sid)


def _indexed(tmp_path: Path, name: str, keep_open: bool) -> tuple[Catalog, Any]:
    store = tmp_path / "agents"
    if not store.exists():
        shutil.copytree(SAMPLE_STORE, store)
    catalog = Catalog(tmp_path / f"{name}.duckdb", keep_open=keep_open)
    return catalog, index_store(catalog, str(store), check="none")


@pytest.mark.parametrize("page_rows", [50, 10_000])
def test_a_check_read_in_pages_finds_what_one_read_finds(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                         page_rows: int) -> None:
    monkeypatch.setattr(verify, "PAGE_ROWS", page_rows)
    whole, summary = _indexed(tmp_path, "whole", keep_open=True)
    verify_store(whole, summary.store.store_id, summary.store.reader, read_data=True, workers=1)
    paged, other = _indexed(tmp_path, "paged", keep_open=False)  # as the background check opens it
    report = verify_store(paged, other.store.store_id, other.store.reader, read_data=True, workers=1)
    assert report.checked == queries.overview(paged, other.store.store_id).checkpoints
    assert _snapshot(paged, other.store.store_id) == _snapshot(whole, summary.store.store_id)


def test_the_pages_keep_step_order_and_read_each_checkpoint_once(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(verify, "PAGE_ROWS", 4)
    write_store(str(tmp_path / "store"), runs=3, steps=9)
    catalog = Catalog(tmp_path / "index.duckdb", keep_open=False)
    sid = index_store(catalog, str(tmp_path / "store"), check="none").store.store_id
    with catalog.connect() as con:  # one run's checkpoints without a step: they come last in it
        con.execute("UPDATE checkpoint_rows SET step = NULL WHERE run_id = 'run-1' AND step >= 7")
    select = "SELECT run_id, namespace, step, checkpoint_id FROM checkpoints WHERE store_id = $sid"
    paged = [tuple(r.values()) for r in verify._pages(catalog, select, {"sid": sid})]
    streamed = [tuple(r.values()) for r in verify._streamed(catalog, select, {"sid": sid}, 5)]
    assert paged == streamed and len(paged) == 27 == len(set(paged))


def test_a_command_beside_a_check_gets_the_index_between_its_pages(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(verify, "PAGE_ROWS", 5)
    write_store(str(tmp_path / "store"), runs=2, steps=8)
    home = tmp_path / "home"
    catalog = Catalog(home / "index.duckdb", keep_open=False)
    sid = index_store(catalog, str(tmp_path / "store"), check="none").store.store_id
    select = "SELECT run_id, namespace, step, checkpoint_id FROM checkpoints WHERE store_id = $sid"
    pages = verify._pages(catalog, select, {"sid": sid})
    first = next(pages)  # the check is reading: between two pages
    started = time.monotonic()
    done = lastgood_cli("runs", str(tmp_path / "store"), home=home)
    assert done.returncode == 0, done.stderr
    assert time.monotonic() - started < 10  # not the 15 s wait for a busy index
    assert len([first, *pages]) == 16  # and the check goes on after it


def test_waiting_for_a_busy_index_stops_when_cancelled(tmp_path: Path) -> None:
    holder = Catalog(tmp_path / "index.duckdb")
    with holder.connect():
        pass  # the index exists, and this process holds it open (keep_open)
    waiter = subprocess.Popen([sys.executable, "-c", WAITER, str(tmp_path / "index.duckdb")],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        out, err = waiter.communicate(timeout=60)
    finally:
        holder.close()
    assert waiter.returncode == 0, err
    waited = float(out.strip())
    assert 0.3 <= waited < 5  # waited for the holder, stopped when cancelled (not the 600 s it may wait)


WAITER = """
import sys, threading, time
from lastgood.index.catalog import Catalog
from lastgood.errors import LastgoodError
cancel = threading.Event()
threading.Timer(0.5, cancel.set).start()
started = time.monotonic()
try:
    Catalog(sys.argv[1], keep_open=False, lock_wait=600, cancel=cancel)
except LastgoodError as exc:
    assert "busy" in str(exc), exc
    print(time.monotonic() - started)
else:
    raise SystemExit("opened an index another process holds")
"""


def test_the_background_checks_count_includes_the_schema_drift_it_found(tmp_path: Path) -> None:
    from lastgood.integrity import background
    from lastgood.readers.native.writer import NativeWriter
    from tests.helpers import agent_state

    url = str(tmp_path / "store")
    writer = NativeWriter(url, full_every=1)
    states = [agent_state(i) for i in range(6)]
    states[3]["runtime"]["turn"] = "three"  # number -> string: drift at 3, and back at 4
    for state in states:
        writer.save("run-0", state)
    index_path = str(tmp_path / "index.duckdb")
    catalog = Catalog(index_path)
    sid = index_store(catalog, url, check="none").store.store_id
    catalog.close()
    job = background.start(index_path, url, "data")
    background.wait(index_path, url, timeout=120)
    assert job.state == "done", job.error
    catalog = Catalog(index_path)
    drift = [f for f in store_findings(catalog, sid) if f["check"] == "schema-drift"]
    assert len(drift) == 2
    assert job.warnings_found == len(drift)  # "in them 0 warning(s)" before: drift came after the chunks
    assert "2 warning(s)" in job.summary()


def test_a_langgraph_check_read_in_pages_finds_what_one_read_finds(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    from tests.langgraph_graphs import write_sqlite_store

    monkeypatch.setattr(verify, "PAGE_ROWS", 3)  # subgraph namespaces and steps cut across pages
    db = tmp_path / "lg.sqlite"
    write_sqlite_store(db)
    snapshots = []
    for name, keep_open in (("whole", True), ("paged", False)):
        catalog = Catalog(tmp_path / f"{name}.duckdb", keep_open=keep_open)
        summary = index_store(catalog, str(db), check="none")
        report = verify_store(catalog, summary.store.store_id, summary.store.reader, read_data=True, workers=1)
        assert report.checked == queries.overview(catalog, summary.store.store_id).checkpoints
        snapshots.append(_snapshot(catalog, summary.store.store_id))
    assert snapshots[0] == snapshots[1]
