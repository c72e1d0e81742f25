"""The write paths under attack (the reliability issue's attack pass): each case failed before.

A head that moves without a journal entry, control files behind the same validation boundary as
the blobs, undo onto a quarantined checkpoint, an agent writing while an action runs, unsafe restore
targets, workers outliving a killed verify, temp files left by kills, read-only databases.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from lastgood import recovery
from lastgood.errors import ConflictError, ReaderError, UsageError
from lastgood.index.catalog import Catalog
from lastgood.readers import journal as jr
from lastgood.readers.native import format as nf
from lastgood.readers.native import recovery as native_recovery
from lastgood.readers.native.writer import NativeWriter
from lastgood.stores import index_store
from tests.helpers import ROOT, lastgood_cli, write_store

TIMEOUT = 60  # a command that used to hang on a FIFO must answer well within this


@pytest.fixture()
def native(tmp_path: Path) -> tuple[str, Catalog]:
    url = str(tmp_path / "store")
    write_store(url, runs=2, steps=6)
    catalog = Catalog(tmp_path / "home" / "index.duckdb")
    index_store(catalog, url)
    return url, catalog


def _ids(catalog: Catalog, store_id: int, run: str = "run-0") -> list[str]:
    with catalog.connect() as con:
        return [r[0] for r in con.execute("SELECT checkpoint_id FROM checkpoints WHERE store_id = ? AND run_id = ? "
                                          "ORDER BY step", [store_id, run]).fetchall()]


def _apply(catalog: Catalog, url: str, plan_of: Any) -> recovery.ActionResult:
    store = index_store(catalog, url, check="none").store
    return recovery.apply_plan(catalog, store, plan_of(store), reason="attack", operator="tester")


# ---- 1. a head never moves without a durable journal entry or intent -------------------------


def test_a_journal_entry_that_cannot_be_written_leaves_an_interrupted_intent_the_next_action_completes(
        native: tuple[str, Catalog], monkeypatch: pytest.MonkeyPatch) -> None:
    url, catalog = native
    store = index_store(catalog, url, check="none").store
    target = _ids(catalog, store.store_id)[2]
    real_create = native_recovery._create_exclusive

    def denied(fs: Any, path: str, data: bytes) -> bool:
        if "/journal/entries/" in path:
            raise PermissionError(13, "Permission denied")
        return real_create(fs, path, data)

    monkeypatch.setattr(native_recovery, "_create_exclusive", denied)
    with pytest.raises(ReaderError, match="interrupted intent"):
        _apply(catalog, url, lambda s: recovery.plan_restore(catalog, s, target))
    writer = native_recovery.NativeRecovery(url)
    assert writer.head("run-0") == target  # the head moved…
    pending = writer.pending()
    assert pending and pending[0]["interrupted"] and pending[0]["entry"]["new_head"] == target  # …and says so
    report = recovery.journal_report(index_store(catalog, url, check="none").store)
    assert report["pending"] and report["entries"] == 0
    done = lastgood_cli("journal", url, home=Path(catalog.path).parent.parent / "cli-home")  # the CLI's own index
    assert done.returncode == 1 and "interrupted" in done.stdout

    monkeypatch.setattr(native_recovery, "_create_exclusive", real_create)  # the journal is writable again
    _apply(catalog, url, lambda s: recovery.plan_quarantine(catalog, s, _ids(catalog, s.store_id)[1]))
    entries = writer.journal_entries()
    assert [e["action"] for e in entries] == ["restore", "quarantine"] and jr.verify_chain(entries).ok
    assert writer.pending() == []


# ---- 2. the store's control files behind the same bounded, link-refusing read ---------------


def _run(args: list[str], home: Path) -> subprocess.CompletedProcess[str]:
    exe = Path(sys.executable).with_name("lastgood")
    return subprocess.run([str(exe), *args], capture_output=True, text=True, timeout=TIMEOUT,
                          env={**os.environ, "LASTGOOD_HOME": str(home), "LASTGOOD_ALLOW_WRITE": "1"})


def test_fifos_devices_and_links_in_the_control_files_never_hang_or_leak(native: tuple[str, Catalog],
                                                                        tmp_path: Path) -> None:
    url, catalog = native
    home = tmp_path / "cli-home"  # the CLI's own index (this process holds the fixture's open)
    store = index_store(catalog, url, check="none").store
    target = _ids(catalog, store.store_id)[2]
    assert _run(["quarantine", url, target, "--reason", "x", "--yes"], home).returncode == 0
    entries = Path(url) / "journal" / "entries"
    first = sorted(entries.iterdir())[0]
    outside = tmp_path / "outside.json"
    outside.write_text(first.read_text())

    first.unlink()
    os.mkfifo(first)  # a FIFO where an entry was
    for command in (["journal", url], ["ls", url], ["verify", url]):
        done = _run(command, home)  # answered: never waiting on the FIFO
        assert "Traceback" not in done.stderr, done.stderr
    assert _run(["journal", url], home).returncode == 1
    first.unlink()
    first.symlink_to(outside)  # an entry linked outside the store: not read, not counted
    done = _run(["journal", url, "--format", "json"], home)
    assert done.returncode == 1 and json.loads(done.stdout)["chain_ok"] is False

    lock = Path(url) / "journal" / "lock.json"
    os.mkfifo(lock)
    other = _ids(catalog, store.store_id)[3]
    for command in (["journal", url], ["quarantine", url, other, "--reason", "x", "--yes"]):
        done = _run(command, home)
        assert done.returncode == 2 and "lock" in done.stderr and len(done.stderr.splitlines()) == 1, done.stderr
    lock.unlink()

    head = Path(url) / nf.HEADS / "run-0.json"
    head.unlink()
    os.mkfifo(head)
    done = _run(["restore", url, target, "--reason", "x", "--yes"], home)
    assert done.returncode == 2 and "cannot be read" in done.stderr, done.stderr
    head.unlink()
    head.symlink_to("/dev/zero")  # would be read without end
    done = _run(["restore", url, target, "--reason", "x", "--yes"], home)
    assert done.returncode == 2 and "cannot be read" in done.stderr, done.stderr


# ---- 3. undo is refused onto what a restore would be refused ---------------------------------


def test_undo_onto_a_quarantined_checkpoint_is_refused_like_a_restore(native: tuple[str, Catalog],
                                                                      tmp_path: Path) -> None:
    url, catalog = native
    store = index_store(catalog, url, check="none").store
    ids = _ids(catalog, store.store_id)
    head = ids[-1]
    restored = _apply(catalog, url, lambda s: recovery.plan_restore(catalog, s, ids[1]))
    _apply(catalog, url, lambda s: recovery.plan_quarantine(catalog, s, head))
    with pytest.raises(UsageError, match="quarantined"):
        _apply(catalog, url, lambda s: recovery.plan_undo(catalog, s, restored.action_id))
    home = tmp_path / "cli-home"  # the CLI's own index (this process holds the fixture's open)
    dry = lastgood_cli("undo", url, restored.action_id, "--dry-run", home=home)
    assert dry.returncode == 2 and "--force" in dry.stderr
    forced = lastgood_cli("undo", url, restored.action_id, "--dry-run", "--force", "--format", "json", home=home)
    assert forced.returncode == 0 and any("quarantined" in w for w in json.loads(forced.stdout)["warnings"])


# ---- 4. an agent writing while an action runs -------------------------------------------------


def test_a_writer_whose_head_was_moved_by_an_action_is_refused_not_overwriting_it(
        native: tuple[str, Catalog]) -> None:
    url, catalog = native
    writer = NativeWriter(url, create=False)
    writer.save("run-0", {"turn": "before"})
    store = index_store(catalog, url, check="none").store
    target = _ids(catalog, store.store_id)[2]
    rolled = _apply(catalog, url, lambda s: recovery.plan_rollback(catalog, s, "run-0", target))
    with pytest.raises(ConflictError, match=rolled.action_id):
        writer.save("run-0", {"turn": "built on the old head"})
    assert native_recovery.NativeRecovery(url).head("run-0") == target  # the rollback stands
    saved = writer.save("run-0", {"turn": "after reloading"})  # the next save builds on the new head
    assert saved.parent_id == target


def test_the_langgraph_check_reads_the_checkpoint_the_action_wrote_not_a_later_one(tmp_path: Path) -> None:
    from langgraph.checkpoint.sqlite import SqliteSaver

    from lastgood.readers.langgraph.recovery import SqliteRecovery
    from tests.langgraph_graphs import build_tools, write_sqlite_store

    db = write_sqlite_store(tmp_path / "graph.sqlite").path
    catalog = Catalog(tmp_path / "home" / "index.duckdb")
    store = index_store(catalog, str(db), check="none").store
    ids = _ids(catalog, store.store_id, "tools-1")
    writer = SqliteRecovery(str(db))
    change = jr.Change("tools-1", "", writer.head("tools-1"), ids[1],
                       {"id": jr.new_action_id(), "action": "restore", "operator": "t", "reason": "r",
                        "run_id": "tools-1", "namespace": "", "target": ids[1],
                        "previous_head": writer.head("tools-1"), "marks": jr.empty_marks()})
    writer.commit(change)
    conn = sqlite3.connect(db, check_same_thread=False)
    try:
        build_tools(SqliteSaver(conn), "tools-1")  # the agent goes on writing right after the commit
    finally:
        conn.close()
    check = writer.check_head("tools-1", "", ids[1], None)
    assert check.ok, check.message


# ---- 5. a checkpoint that would run code is never a restore target --------------------------


def test_a_pickled_checkpoint_is_never_restored_even_forced(tmp_path: Path) -> None:
    import pickle
    import shutil

    db = tmp_path / "lg.sqlite"
    shutil.copy(ROOT / "sample_data" / "langgraph.sqlite", db)
    with sqlite3.connect(db) as conn:
        thread, cid = conn.execute("SELECT thread_id, checkpoint_id FROM checkpoints WHERE checkpoint_ns = '' "
                                   "ORDER BY thread_id, checkpoint_id LIMIT 1 OFFSET 3").fetchone()
        conn.execute("UPDATE checkpoints SET type = 'pickle', checkpoint = ? WHERE thread_id = ? AND checkpoint_id = ?",
                     (pickle.dumps({"x": 1}), thread, cid))
        rows = conn.execute("SELECT count(*) FROM checkpoints").fetchone()[0]
    home = tmp_path / "home"
    done = lastgood_cli("restore", str(db), cid, "--force", "--reason", "x", "--yes", home=home)
    assert done.returncode == 2 and "never be restored" in done.stderr, done.stderr
    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT count(*) FROM checkpoints").fetchone()[0] == rows  # nothing written


# ---- 7. workers die with a killed verify ------------------------------------------------------


def _children(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == pid:
                found.append(int(entry.name))
    return found


def _alive(pid: int) -> bool:
    try:
        state = (Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def test_killing_verify_with_workers_leaves_no_worker_behind(tmp_path: Path) -> None:
    url = str(tmp_path / "store")
    write_store(url, runs=40, steps=60)
    exe = Path(sys.executable).with_name("lastgood")
    proc = subprocess.Popen([str(exe), "verify", url, "--read-data", "--workers", "2"],
                            env={**os.environ, "LASTGOOD_HOME": str(tmp_path / "home")},
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    workers: list[int] = []
    while time.monotonic() < deadline and len(workers) < 2 and proc.poll() is None:
        workers = [c for c in _children(proc.pid) if "python" in (Path("/proc") / str(c) / "cmdline").read_bytes().decode(errors="replace")]
        time.sleep(0.05)
    assert workers, "the verify never started its workers"
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and any(_alive(w) for w in workers):
        time.sleep(0.1)
    assert not [w for w in workers if _alive(w)]


# ---- 8. temp files, read-only databases -------------------------------------------------------


def test_temp_files_a_killed_writer_left_are_swept_by_the_next_action(native: tuple[str, Catalog]) -> None:
    url, catalog = native
    old = time.time() - 3600
    leftovers = [Path(url) / nf.HEADS / ".tmp-dead-run-0.json", Path(url) / "journal" / ".tmp-dead-lock.json"]
    fresh = Path(url) / nf.HEADS / ".tmp-live-run-1.json"
    for path in [*leftovers, fresh]:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("{}")
    for path in leftovers:
        os.utime(path, (old, old))
    store = index_store(catalog, url, check="none").store
    _apply(catalog, url, lambda s: recovery.plan_quarantine(catalog, s, _ids(catalog, store.store_id)[1]))
    assert not any(p.exists() for p in leftovers) and fresh.exists()  # a live writer's is left alone


def test_a_read_only_database_is_refused_and_left_without_new_files(tmp_path: Path) -> None:
    import shutil

    folder = tmp_path / "ro"
    folder.mkdir()
    db = folder / "lg.sqlite"
    shutil.copy(ROOT / "sample_data" / "langgraph.sqlite", db)
    home = tmp_path / "home"
    rows = json.loads(lastgood_cli("ls", str(db), "--format", "json", home=home).stdout)
    target = [r["checkpoint_id"] for r in rows if r["run_id"] == "trading-approval-001"][1]
    db.chmod(0o444)
    before = sorted(p.name for p in folder.iterdir())
    done = lastgood_cli("restore", str(db), target, "--reason", "x", "--yes", home=home)
    assert done.returncode == 2 and "read-only" in done.stderr, done.stderr
    assert sorted(p.name for p in folder.iterdir()) == before  # no -wal, no -shm
