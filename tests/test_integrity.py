"""One truth about damaged snapshots: verify, ls, runs and show agree; findings record
their depth and clear when repaired; last good per run; content checks; subsets;
parallel, Dask and cancelled checks record exactly what a plain local check does."""

from __future__ import annotations

import json
import shutil
import sqlite3
import threading
from pathlib import Path
from typing import Any

import pytest

from lastgood.index import queries
from lastgood.index.catalog import Catalog
from lastgood.checks import Check
from lastgood.errors import UsageError
from lastgood.integrity.health import last_good, run_health
from lastgood.readers.native.writer import NativeWriter
from lastgood.stores import index_store
from lastgood.integrity.verify import Subset, cycle_members, store_findings, verify_store
from tests.helpers import SAMPLE_STORE, agent_state, lastgood_cli, load_manifest, write_store
from tests.langgraph_graphs import write_sqlite_store

# damage only a data check sees in the sample store; the rest shows at structure depth
DATA_ONLY = {"sha256-mismatch", "undecodable-payload", "broken-patch"}


def _errors(catalog: Catalog, sid: int) -> dict[str, set[str]]:
    found: dict[str, set[str]] = {}
    for f in store_findings(catalog, sid):
        if f["severity"] == "error":
            found.setdefault(f["checkpoint_id"] or "-", set()).add(f["check"])
    return found


def test_sample_damage_is_found_exactly_at_each_depth(tmp_path: Path) -> None:
    manifest = load_manifest()
    catalog = Catalog(tmp_path / "index.duckdb")
    summary = index_store(catalog, str(SAMPLE_STORE), check="none")
    sid, reader = summary.store.store_id, summary.store.reader
    expected = {d["checkpoint_id"]: d for d in manifest["damaged"]}
    structural = {cid for cid, d in expected.items() if d["damage"] not in DATA_ONLY}
    assert len(structural) >= 5 and len(expected) - len(structural) == 3

    verify_store(catalog, sid, reader)
    found = _errors(catalog, sid)
    assert set(found) - {"-"} == structural
    assert found["-"] == {str(Check.CATALOG_LINE)}

    verify_store(catalog, sid, reader, read_data=True)
    found = _errors(catalog, sid)
    assert set(found) - {"-"} == set(expected)
    for cid, damage in expected.items():
        assert damage["expected_check"] in found[cid], (damage, found[cid])
    statuses = {r["checkpoint_id"]: r["status"] for r in queries.list_checkpoints(catalog, sid)}
    assert {cid for cid, s in statuses.items() if s != "ok"} == set(expected)
    for cid, damage in expected.items():
        assert statuses[cid] == damage["expected_status"]


def test_a_structure_recheck_keeps_data_findings_and_a_repair_clears_them(tmp_path: Path) -> None:
    url = tmp_path / "store"
    write_store(str(url), runs=2, steps=6)
    catalog = Catalog(tmp_path / "index.duckdb")
    summary = index_store(catalog, str(url), check="none")
    sid, reader = summary.store.store_id, summary.store.reader
    row = queries.list_checkpoints(catalog, sid, run_id="run-0")[0]
    record = queries.resolve_checkpoint(catalog, sid, row["checkpoint_id"])
    blob = url / record.location
    original = blob.read_bytes()
    blob.write_bytes(original[:-3] + b"xyz")  # same size: only a data check sees it

    verify_store(catalog, sid, reader, read_data=True)
    damaged = _errors(catalog, sid)
    assert str(Check.SHA256_MISMATCH) in damaged[record.checkpoint_id]
    verify_store(catalog, sid, reader)  # structure: must not forget what the data check found
    assert _errors(catalog, sid) == damaged
    finding = next(f for f in store_findings(catalog, sid) if f["checkpoint_id"] == record.checkpoint_id
                   and f["check"] == Check.SHA256_MISMATCH)
    assert finding["depth"] == "data" and finding["found_at"] is not None

    blob.write_bytes(original)  # repaired
    verify_store(catalog, sid, reader, read_data=True)
    assert _errors(catalog, sid) == {}
    assert {r["status"] for r in queries.list_checkpoints(catalog, sid)} == {"ok"}


@pytest.fixture(scope="module")
def issue_db(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str]]:
    """The issue's example: truncated blob, garbage bytes, unknown type, deleted parent row."""
    directory = tmp_path_factory.mktemp("issue")
    store = write_sqlite_store(directory / "clean.sqlite", extra=False)
    path = directory / "damaged.sqlite"
    shutil.copy(store.path, path)
    conn = sqlite3.connect(path)

    def ids(thread: str) -> list[str]:
        return [r[0] for r in conn.execute("SELECT checkpoint_id FROM checkpoints WHERE thread_id = ? "
                                           "AND checkpoint_ns = '' ORDER BY checkpoint_id", (thread,))]

    tools, fork, interrupt = ids("tools-1"), ids("fork-1"), ids("interrupt-1")
    update = "UPDATE checkpoints SET {} WHERE thread_id = ? AND checkpoint_id = ?"
    conn.execute(update.format("checkpoint = substr(checkpoint, 1, length(checkpoint) / 2)"), ("tools-1", tools[2]))
    conn.execute(update.format("checkpoint = X'C1C1FFFF00'"), ("tools-1", tools[3]))
    conn.execute(update.format("type = 'foo'"), ("interrupt-1", interrupt[1]))
    conn.execute("DELETE FROM checkpoints WHERE thread_id = 'fork-1' AND checkpoint_id = ?", (fork[1],))
    conn.commit()
    conn.close()
    return path, {"truncated": tools[2], "garbage": tools[3], "unknown": interrupt[1], "orphan": fork[2]}


def _json(done: Any) -> Any:
    assert done.returncode in (0, 1), done.stderr
    return json.loads(done.stdout)


def test_issue_example_ls_verify_and_read_data_agree(issue_db: tuple[Path, dict[str, str]],
                                                     tmp_path: Path) -> None:
    path, damaged = issue_db
    expected = set(damaged.values())
    for home, first in ((tmp_path / "a", "ls"), (tmp_path / "b", "verify")):
        if first == "ls":
            rows = _json(lastgood_cli("ls", str(path), "--status", "corrupt", "--format", "json", home=home))
            assert {r["checkpoint_id"] for r in rows} == expected
        for extra in ([], ["--read-data"], []):
            done = lastgood_cli("verify", str(path), *extra, "--format", "json", home=home)
            assert done.returncode == 1
            errors = {f["checkpoint_id"] for f in _json(done)["findings"] if f["severity"] == "error"}
            assert errors == expected, (first, extra)
        rows = _json(lastgood_cli("ls", str(path), "--status", "corrupt", "--format", "json", home=home))
        assert {r["checkpoint_id"] for r in rows} == expected
        shown = _json(lastgood_cli("show", str(path), damaged["orphan"], "--format", "json", home=home))
        assert any(f["severity"] == "error" for f in shown["findings"])


def test_runs_reports_last_good_per_run_and_unverified_until_data_checked(tmp_path: Path) -> None:
    url = tmp_path / "store"
    write_store(str(url), runs=2, steps=6)
    home = tmp_path / "home"
    catalog = Catalog(tmp_path / "index.duckdb")
    summary = index_store(catalog, str(url), check="structure")
    sid, reader = summary.store.store_id, summary.store.reader
    rows = run_health(catalog, sid)
    assert {r["health"] for r in rows} == {"unverified"} and all(r["last_good"] is None for r in rows)
    assert all(r["unverified"] == 6 for r in rows)

    verify_store(catalog, sid, reader, read_data=True)
    heads = {r["run_id"]: r["head"] for r in run_health(catalog, sid)}
    assert all(last_good(catalog, sid, run) == head for run, head in heads.items())

    newest = queries.list_checkpoints(catalog, sid, run_id="run-1")[-1]
    (url / queries.resolve_checkpoint(catalog, sid, newest["checkpoint_id"]).location).write_bytes(b"{")
    verify_store(catalog, sid, reader, read_data=True)
    good = last_good(catalog, sid, "run-1")
    assert good is not None and good != newest["checkpoint_id"]
    assert good == queries.list_checkpoints(catalog, sid, run_id="run-1")[-2]["checkpoint_id"]

    done = lastgood_cli("runs", str(url), "--format", "json", home=home)
    assert done.returncode == 0, done.stderr
    runs = {r["run_id"]: r for r in json.loads(done.stdout)}
    fields = {"run_id", "namespace", "agent", "checkpoints", "ok", "corrupt", "incomplete", "quarantined",
              "unverified", "last_good", "head"}
    assert fields <= set(runs["run-0"])
    assert runs["run-1"]["corrupt"] == 1 and runs["run-1"]["last_good"] == good
    assert runs["run-0"]["last_good"] == runs["run-0"]["head"] and runs["run-0"]["unverified"] == 0


@pytest.mark.parametrize("chunked", [False, True])
def test_content_checks_nan_drift_and_size_spike(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                 chunked: bool) -> None:
    if chunked:  # chunks of 2 recorded one by one: drift still compares neighbours across them
        import lastgood.integrity.verify

        monkeypatch.setattr(lastgood.integrity.verify, "CHUNK", 2)
        monkeypatch.setattr(lastgood.integrity.verify, "FLUSH_SECONDS", -1.0)
    url = str(tmp_path / "store")
    writer = NativeWriter(url, full_every=1)
    states = [agent_state(i) for i in range(8)]
    states[3]["runtime"]["score"] = float("nan")
    states[5]["runtime"]["turn"] = "five"                     # number -> string
    states[6]["runtime"]["blob"] = "x" * 200_000              # a spike
    for state in states:
        writer.save("run-0", state)
    catalog = Catalog(tmp_path / "index.duckdb")
    summary = index_store(catalog, url, check="none")
    sid = summary.store.store_id
    verify_store(catalog, sid, summary.store.reader, read_data=True)
    ids = [r["checkpoint_id"] for r in queries.list_checkpoints(catalog, sid)]
    warnings = {(f["checkpoint_id"], f["check"]) for f in store_findings(catalog, sid) if f["severity"] == "warning"}
    assert (ids[3], Check.NON_FINITE) in warnings
    assert (ids[5], Check.SCHEMA_DRIFT) in warnings and (ids[6], Check.SCHEMA_DRIFT) in warnings
    assert (ids[6], Check.SIZE_SPIKE) in warnings
    drift = [f for f in store_findings(catalog, sid) if f["check"] == Check.SCHEMA_DRIFT]
    # score appears at 3 (new: not drift) and goes at 4, turn changes type at 5 and back at 6, blob
    # appears at 6 (new) and goes at 7
    assert sorted(f["checkpoint_id"] for f in drift) == sorted(ids[4:8])
    assert not any(f["severity"] == "error" for f in store_findings(catalog, sid))
    assert {r["status"] for r in queries.list_checkpoints(catalog, sid)} == {"ok"}


def test_read_data_subsets_cover_the_store(tmp_path: Path) -> None:
    url = str(tmp_path / "store")
    write_store(url, runs=3, steps=10)
    catalog = Catalog(tmp_path / "index.duckdb")
    summary = index_store(catalog, url, check="none")
    sid, reader = summary.store.store_id, summary.store.reader
    checked = [verify_store(catalog, sid, reader, subset=Subset.parse(f"{n}/3")).checked for n in (1, 2, 3)]
    assert sum(checked) == 30 and all(checked)
    assert queries.verification_depths(catalog, sid) == {"data": 30}

    fresh = Catalog(tmp_path / "fresh.duckdb")
    summary = index_store(fresh, url, check="none")
    for _ in range(4):
        assert verify_store(fresh, summary.store.store_id, reader, subset=Subset.parse("25%")).checked == 8
    assert queries.verification_depths(fresh, summary.store.store_id) == {"data": 30}
    for bad in ("0/3", "4/3", "0%", "150%", "half"):
        with pytest.raises(UsageError):
            Subset.parse(bad)


def _damaged_native(tmp_path: Path) -> tuple[Catalog, Any]:
    shutil.copytree(SAMPLE_STORE, tmp_path / "agents")
    catalog = Catalog(tmp_path / "index.duckdb")
    return catalog, index_store(catalog, str(tmp_path / "agents"), check="none")


def _snapshot(catalog: Catalog, sid: int) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]:
    findings = sorted((f["checkpoint_id"] or "", f["check"], f["severity"], f["message"])
                      for f in store_findings(catalog, sid))
    rows = sorted((r["checkpoint_id"], r["status"], r["status_reason"] or "")
                  for r in queries.list_checkpoints(catalog, sid))
    return findings, rows


def test_workers_1_equals_workers_n(tmp_path: Path) -> None:
    catalog, summary = _damaged_native(tmp_path)
    sid, reader = summary.store.store_id, summary.store.reader
    one = verify_store(catalog, sid, reader, read_data=True, workers=1)
    first = _snapshot(catalog, sid)
    many = verify_store(catalog, sid, reader, read_data=True, workers=3)
    assert (one.workers, many.workers) == (1, 3)
    assert many.checked == one.checked == load_manifest()["checkpoints"]
    assert _snapshot(catalog, sid) == first
    assert sorted(map(str, one.findings)) == sorted(map(str, many.findings))


def test_dask_local_cluster_equals_local_run(tmp_path: Path) -> None:
    from distributed import LocalCluster

    catalog, summary = _damaged_native(tmp_path)
    sid, reader = summary.store.store_id, summary.store.reader
    verify_store(catalog, sid, reader, read_data=True, workers=1)
    local = _snapshot(catalog, sid)
    other = Catalog(tmp_path / "other.duckdb")
    summary = index_store(other, str(tmp_path / "agents"), check="none")
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as cluster:
        report = verify_store(other, summary.store.store_id, summary.store.reader, read_data=True,
                              scheduler=cluster.scheduler_address)
    assert report.checked == load_manifest()["checkpoints"]
    assert _snapshot(other, summary.store.store_id) == local


def test_a_cancelled_check_records_whole_chunks_only(tmp_path: Path) -> None:
    catalog, summary = _damaged_native(tmp_path)
    sid, reader = summary.store.store_id, summary.store.reader
    cancel = threading.Event()
    report = verify_store(catalog, sid, reader, read_data=True, workers=1,
                          progress=lambda done, total: cancel.set(), cancel=cancel)
    assert report.cancelled and 0 < report.checked < load_manifest()["checkpoints"]
    assert queries.verification_depths(catalog, sid).get("data") == report.checked
    verify_store(catalog, sid, reader, read_data=True)
    complete = _snapshot(catalog, sid)
    fresh = Catalog(tmp_path / "fresh.duckdb")
    again = index_store(fresh, str(tmp_path / "agents"), check="none")
    verify_store(fresh, again.store.store_id, again.store.reader, read_data=True)
    assert _snapshot(fresh, again.store.store_id) == complete


def test_parent_cycles_are_found(tmp_path: Path) -> None:
    assert cycle_members({"a": "b", "b": "c", "c": "a", "d": "a", "e": "f"}) == {"a", "b", "c"}
    assert cycle_members({"x": "x"}) == {"x"}
    store = write_sqlite_store(tmp_path / "db.sqlite", extra=False)
    conn = sqlite3.connect(store.path)
    ids = [r[0] for r in conn.execute("SELECT checkpoint_id FROM checkpoints WHERE thread_id = 'tools-1' "
                                      "AND checkpoint_ns = '' ORDER BY checkpoint_id")]
    conn.execute("UPDATE checkpoints SET parent_checkpoint_id = ? WHERE thread_id = 'tools-1' "
                 "AND checkpoint_id = ?", (ids[2], ids[0]))
    conn.commit()
    conn.close()
    catalog = Catalog(tmp_path / "index.duckdb")
    summary = index_store(catalog, str(store.path), check="none")
    verify_store(catalog, summary.store.store_id, summary.store.reader)
    found = _errors(catalog, summary.store.store_id)
    assert {cid for cid, checks in found.items() if str(Check.PARENT_CYCLE) in checks} == set(ids[:3])


@pytest.mark.parametrize("workers", [1, 2])
def test_ctrl_c_records_whole_chunks_and_stops(tmp_path: Path, workers: int) -> None:
    catalog, summary = _damaged_native(tmp_path)
    sid, reader = summary.store.store_id, summary.store.reader

    def interrupt(done: int, total: int | None) -> None:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        verify_store(catalog, sid, reader, read_data=True, workers=workers, progress=interrupt)
    data_checked = queries.verification_depths(catalog, sid).get("data", 0)
    assert 0 < data_checked < load_manifest()["checkpoints"]
    recorded = {f["checkpoint_id"] for f in store_findings(catalog, sid) if f["depth"] == "data"}
    with catalog.connect() as con:
        checked = {r[0] for r in con.execute("SELECT checkpoint_id FROM checkpoints WHERE store_id = ? "
                                             "AND verified = 'data'", [sid]).fetchall()}
    assert recorded <= checked  # no data finding without its checkpoint's whole check recorded


_DYING: dict[str, int] = {}


def _dies_in_a_worker(*args: object) -> None:
    import os

    if os.getpid() != _DYING.get("parent"):
        os._exit(9)
    raise AssertionError("the parent never checks a chunk through the workers' entry point")


def test_a_worker_that_dies_leaves_its_chunks_to_the_parent(tmp_path: Path, monkeypatch) -> None:
    """A worker killed mid-check (out of memory, a crash) is not the store's fault: its chunks
    and the rest are checked in the parent, with exactly the findings of a run without it."""
    import os

    from lastgood.integrity import parallel

    catalog, summary = _damaged_native(tmp_path)
    sid, reader = summary.store.store_id, summary.store.reader
    expected = verify_store(catalog, sid, reader, read_data=True, workers=1)
    monkeypatch.setattr(parallel, "check_chunk_remote", _dies_in_a_worker)  # inherited by forked workers
    monkeypatch.setitem(_DYING, "parent", os.getpid())
    again = verify_store(catalog, sid, reader, read_data=True, workers=2)
    assert again.checked == expected.checked > 0
    key = lambda f: (f.checkpoint_id, str(f.check), f.message)
    assert sorted(map(key, again.findings)) == sorted(map(key, expected.findings))


def test_forked_workers_never_collect_what_they_inherited() -> None:
    """A forked worker's collector leaves the parent's objects alone (gc.freeze in its start-up):
    the fork may have copied them half-changed by another thread of the parent."""
    import gc
    import multiprocessing

    from lastgood.integrity.parallel import _init_worker

    if "fork" not in multiprocessing.get_all_start_methods():
        pytest.skip("no fork on this platform: workers are spawned afresh")
    inherited = [object() for _ in range(1000)]  # noqa: F841 - objects the child inherits
    with multiprocessing.get_context("fork").Pool(1, initializer=_init_worker) as pool:
        frozen = pool.apply(gc.get_freeze_count)
    assert frozen >= 1000 and gc.get_freeze_count() == 0  # frozen in the worker only


def test_workers_hold_none_of_the_parents_sockets(tmp_path: Path) -> None:
    """A data check's forked workers let go of the parent's sockets: a connection the parent
    closes while they run (the dashboard server ending a browser's keep-alive connection) is
    closed for its peer at once, not when the check ends (a page request the browser sent on
    it was never answered while the dashboard's background check ran)."""
    import socket

    catalog, summary = _damaged_native(tmp_path)
    ours, peer = socket.socketpair()  # made before the workers fork: they inherit it
    peer.settimeout(10)
    read: list[bytes] = []

    def progress(done: int, total: int | None) -> None:
        if done and not read:  # a chunk came back from a worker: the pool is running
            ours.close()
            read.append(peer.recv(1))  # b"" (end of stream) once no process holds our end

    report = verify_store(catalog, summary.store.store_id, summary.store.reader, read_data=True,
                          workers=2, progress=progress)
    assert report.workers == 2 and report.checked > 0
    assert read == [b""]
    peer.close()


def test_finding_messages_never_show_a_secret(tmp_path: Path) -> None:
    from lastgood.readers.base import Finding

    url = str(tmp_path / "store")
    write_store(url, runs=1, steps=3)
    catalog = Catalog(tmp_path / "index.duckdb")
    summary = index_store(catalog, url, check="none")
    sid = summary.store.store_id
    cid = queries.list_checkpoints(catalog, sid)[0]["checkpoint_id"]
    secret = "sk-live-0123456789abcdefABCDEF"
    catalog.record_findings(sid, [cid], [Finding(Check.PENDING_ERROR, "warning", f"tool failed: key={secret}",
                                                 "run-0", "", cid)], "data")
    shown = store_findings(catalog, sid)
    assert shown and secret not in json.dumps(shown, default=str)


def test_verify_cli_usage_errors_are_one_line(tmp_path: Path) -> None:
    url = str(tmp_path / "store")
    write_store(url, runs=2, steps=12)  # ids are random: 24 of them split by hash, both halves non-empty
    home = tmp_path / "home"
    subset = lastgood_cli("verify", url, "--read-data-subset", "1/2", "--format", "json", home=home)
    assert subset.returncode == 0, subset.stderr
    result = json.loads(subset.stdout)
    assert result["subset"] == "1/2" and result["depth"] == "data" and 0 < result["checked"] < 24
    for args in (["--workers", "0"], ["--read-data-subset", "7"], ["--read-data", "--scheduler", "tcp://127.0.0.1:9"]):
        done = lastgood_cli("verify", url, *args, home=home)
        assert done.returncode == 2 and done.stderr.count("\n") == 1, (args, done.stderr)
        assert done.stderr.startswith("lastgood: error:") and "Traceback" not in done.stderr


def test_a_background_check_not_yet_counted_says_so_rather_than_checking_0() -> None:
    from lastgood.integrity.background import VerifyJob

    job = VerifyJob("index.duckdb", "store", "data")
    assert job.summary() == "full read: checking — counting the checkpoints to read…"
    job._progress(0, 40)
    assert job.summary() == "full read: checking 0 of 40 checkpoints; in them 0 error(s) and 0 warning(s)"
    job._progress(40, 40)
    job.state = "done"
    assert job.summary().startswith("full read: checked 40 of 40 checkpoints")


def test_a_checkpoint_with_nothing_to_read_is_never_pending_a_data_check(tmp_path: Path) -> None:
    catalog = Catalog(tmp_path / "h" / "index.duckdb")
    sid = index_store(catalog, str(SAMPLE_STORE), check="data").store.store_id
    with catalog.connect() as con:  # a refresh re-lists an incomplete (pending) row: its check is structure again
        con.execute("""UPDATE checkpoint_rows SET verified = 'structure' WHERE store_id = ?
                       AND status IN ('incomplete', 'corrupt')""", [sid])
        damaged = con.execute("""SELECT count(*) FROM checkpoints WHERE store_id = ?
                                 AND status IN ('incomplete', 'corrupt')""", [sid]).fetchone()[0]
    assert damaged > 0
    assert queries.overview(catalog, sid).data_unread == 0  # as the runs' "unverified": nothing to read
    assert set(queries.verification_depths(catalog, sid)) == {"data"}
    assert sum(r["unverified"] for r in run_health(catalog, sid)) == 0
