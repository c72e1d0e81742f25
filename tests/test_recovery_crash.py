"""Crash injection: recovery actions killed with SIGKILL at random moments.

Each trial forks a process that applies restores and quarantines in a loop on
a real native store and kills it after a random delay (a fork, so the 50+
trials do not each pay Python's start-up). After every kill: the store
loads, the head is the old or a new one (never a broken file), the journal
chain verifies, the journal agrees with the head (or an interrupted action's
intent does), no checkpoint is lost, and the next action succeeds.
"""

from __future__ import annotations

import os
import random
import signal
import time
from pathlib import Path
from typing import Any

import pytest

from lastgood.readers import journal as jr
from lastgood.readers.base import as_table
from lastgood.readers.native.reader import NativeReader
from lastgood.readers.native.recovery import NativeRecovery
from lastgood.readers.native.writer import NativeWriter
from tests.helpers import write_store

TRIALS = 60


def _loop(url: str, targets: list[dict[str, Any]]) -> None:
    """The killed process: restore / quarantine forever."""
    backend = NativeRecovery(url)
    i = 0
    while True:
        _one_action(backend, targets, i)
        i += 1


def _one_action(backend: NativeRecovery, targets: list[dict[str, Any]], i: int) -> dict[str, Any]:
    head = backend.head("run-0")
    target = targets[i % len(targets)]
    if target["checkpoint_id"] == head:
        target = targets[(i + 1) % len(targets)]
    quarantine = i % 3 == 2
    entry = {"id": jr.new_action_id(), "time": jr.now_iso(), "operator": "crash", "reason": f"trial {i}",
             "action": "quarantine" if quarantine else "restore", "run_id": "run-0", "namespace": "",
             "target": target["checkpoint_id"], "previous_head": head,
             "marks": {**jr.empty_marks(), "quarantine": [target["checkpoint_id"]] if quarantine else []}}
    change = jr.Change("run-0", "", head, None if quarantine else target["checkpoint_id"], entry, target)
    return backend.commit(change)


def _listed_ids(url: str) -> set[str]:
    scan = NativeReader(url).scan()
    return {cid for batch in scan.checkpoints for cid in as_table(batch).column("checkpoint_id").to_pylist()}


def test_sigkill_at_random_moments_leaves_old_or_new_head_and_a_valid_chain(tmp_path: Path) -> None:
    url = str(tmp_path / "store")
    states = write_store(url, runs=1, steps=6)["run-0"]
    writer = NativeWriter(url, create=False)
    original = _listed_ids(url)
    reader = NativeReader(url)
    scan = reader.scan()
    rows = [r for b in scan.checkpoints for r in as_table(b).to_pylist()]
    by_id = {r["checkpoint_id"]: r for r in rows}
    ordered = sorted(rows, key=lambda r: r["step"])
    targets = [{k: r[k] for k in ("checkpoint_id", "step", "kind", "codec", "location", "checksum")}
               for r in ordered]
    state_of = {r["checkpoint_id"]: states[r["step"]] for r in ordered}
    rng = random.Random(20261122)
    started = time.monotonic()
    interrupted = 0
    for trial in range(TRIALS):
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the child is killed
            try:
                _loop(url, targets)
            finally:
                os._exit(3)
        time.sleep(rng.uniform(0.0, 0.04))
        os.kill(pid, signal.SIGKILL)
        _, status = os.waitpid(pid, 0)
        assert os.WIFSIGNALED(status), f"trial {trial}: the child ended on its own ({status})"
        interrupted += _check_store(url, writer, by_id, state_of, original)
        _one_action(NativeRecovery(url), targets, trial)  # the next action resolves any stale lock
        assert not (Path(url) / "journal" / "lock.json").exists()
        assert jr.verify_chain(NativeRecovery(url).journal_entries()).ok
    print(f"interrupted mid-action: {interrupted}/{TRIALS}")
    assert interrupted >= 5, "no kill landed inside an action"
    assert time.monotonic() - started < 90
    assert len(NativeRecovery(url).journal_entries()) >= TRIALS


def _check_store(url: str, writer: NativeWriter, by_id: dict[str, Any], state_of: dict[str, Any],
                 original: set[str]) -> int:
    """Invariants after a kill; returns 1 when an action was caught mid-way (a lock left)."""
    assert original <= _listed_ids(url), "a checkpoint was lost"
    head = writer.head("run-0")
    assert head and head["checkpoint_id"] in by_id, f"head is broken: {head}"
    assert writer.load_head_state("run-0") == state_of[head["checkpoint_id"]]
    backend = NativeRecovery(url)
    entries = backend.journal_entries()
    assert jr.verify_chain(entries).ok
    moved = [e for e in entries if e["new_head"] != e["previous_head"]]
    pending = backend.pending()
    intent = pending[0].get("entry") if pending else None
    journaled = moved[-1]["new_head"] if moved else None
    assert head["checkpoint_id"] == journaled or (intent and head["checkpoint_id"] == intent["new_head"]) \
        or (not moved and head["checkpoint_id"] == max(by_id, key=lambda c: by_id[c]["step"]))
    return 1 if pending else 0


SQLITE_TRIALS = 20


def test_sigkill_during_sqlite_restores_leaves_a_consistent_database(tmp_path: Path) -> None:
    """The same on a real SqliteSaver file: the transaction is all or nothing."""
    import sqlite3

    from langgraph.checkpoint.sqlite import SqliteSaver

    from lastgood.readers.langgraph.recovery import SqliteRecovery
    from tests.langgraph_graphs import build_tools, tool_loop_graph

    path = tmp_path / "lg.sqlite"
    with sqlite3.connect(str(path), check_same_thread=False) as conn:
        thread = build_tools(SqliteSaver(conn))
        original = [s.config["configurable"]["checkpoint_id"]
                    for s in tool_loop_graph(SqliteSaver(conn)).get_state_history(thread.config)]
    run = thread.thread_id
    rng = random.Random(7)
    for trial in range(SQLITE_TRIALS):
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the child is killed
            try:
                backend = SqliteRecovery(str(path))
                i = 0
                while True:
                    head = backend.head(run)
                    entry = {"id": jr.new_action_id(), "action": "restore", "operator": "crash",
                             "reason": f"trial {i}", "run_id": run, "namespace": "",
                             "target": original[1 + i % 3], "previous_head": head, "marks": jr.empty_marks()}
                    backend.commit(jr.Change(run, "", head, original[1 + i % 3], entry))
                    i += 1
            finally:
                os._exit(3)
        time.sleep(rng.uniform(0.0, 0.15))
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        with sqlite3.connect(str(path), check_same_thread=False) as conn:
            assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
            saver = SqliteSaver(conn)
            head = saver.get_tuple(thread.config)
            listed = {t.config["configurable"]["checkpoint_id"] for t in saver.list(thread.config)}
        entries = SqliteRecovery(str(path)).journal_entries()
        assert jr.verify_chain(entries).ok and set(original) <= listed
        made = head.config["configurable"]["checkpoint_id"]
        assert made == original[0] or made == entries[-1]["new_head"]  # old head, or the last journaled one
    assert len(SqliteRecovery(str(path)).journal_entries()) >= SQLITE_TRIALS  # kills landed mid-stream


@pytest.mark.postgres
def test_sigkill_during_postgres_restores_leaves_a_consistent_database(pg_create_database) -> None:
    from langgraph.checkpoint.postgres import PostgresSaver

    from lastgood.readers.langgraph.recovery import PostgresRecovery
    from tests.langgraph_graphs import build_tools, tool_loop_graph

    dsn = pg_create_database("crash")
    with PostgresSaver.from_conn_string(dsn) as saver:
        saver.setup()
        thread = build_tools(saver)
        original = [s.config["configurable"]["checkpoint_id"]
                    for s in tool_loop_graph(saver).get_state_history(thread.config)]
    run = thread.thread_id
    rng = random.Random(11)
    for trial in range(12):
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the child is killed
            try:
                backend = PostgresRecovery(dsn)
                i = 0
                while True:
                    head = backend.head(run)
                    target = original[1 + i % 3]
                    entry = {"id": jr.new_action_id(), "action": "restore", "operator": "crash",
                             "reason": f"trial {i}", "run_id": run, "namespace": "", "target": target,
                             "previous_head": head, "marks": jr.empty_marks()}
                    backend.commit(jr.Change(run, "", head, target, entry))
                    i += 1
            finally:
                os._exit(3)
        time.sleep(rng.uniform(0.05, 0.4))
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        entries = PostgresRecovery(dsn).journal_entries()
        assert jr.verify_chain(entries).ok
        with PostgresSaver.from_conn_string(dsn) as saver:
            head = saver.get_tuple(thread.config)
            listed = {t.config["configurable"]["checkpoint_id"] for t in saver.list(thread.config)}
            made = head.config["configurable"]["checkpoint_id"]
            assert set(original) <= listed
            assert made == original[0] or made == entries[-1]["new_head"]
            if made != original[0]:
                source = saver.get_tuple({"configurable": {**thread.config["configurable"], "checkpoint_ns": "",
                                                           "checkpoint_id": entries[-1]["target"]}})
                assert head.checkpoint["channel_values"] == source.checkpoint["channel_values"]
    assert len(PostgresRecovery(dsn).journal_entries()) >= 12
