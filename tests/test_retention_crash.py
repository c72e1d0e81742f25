"""Crash injection: prunes and their undos killed with SIGKILL at random moments (like
test_recovery_crash). A forked child alternates prune and undo on a real store; after every kill,
before anything repairs it: the store reads, and every checkpoint is in the store or in an archive
that the journal (or the interrupted action's intent / progress row) names. Then the next action
completes the interrupted one, and the store is exactly "before" (undo done) or "after" (prune done).
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from lastgood.readers import journal as jr
from lastgood.readers.base import as_table
from lastgood.readers.native.archive import Archive, manifest_keys
from lastgood.readers.native.reader import NativeReader
from lastgood.readers.native.writer import NativeWriter
from tests.helpers import agent_state, kill_loop

TRIALS = 24
BUDGET = 6.0  # seconds of kill loop per store (at least MIN_TRIALS kills): bounded on a busy machine
MIN_TRIALS = 6
FORGET = ("run_id", "namespace", "checkpoint_id", "parent_id", "step", "created_at", "trigger", "agent", "metadata",
          "size_bytes")


def _entry(action: str, **fields: Any) -> dict[str, Any]:
    return {"id": jr.new_action_id(), "time": jr.now_iso(), "operator": "crash", "action": action,
            "reason": "trial", "run_id": None, "namespace": "", "target": None, "previous_head": None,
            "superseded": [], "undo_of": None, "marks": jr.empty_marks(), "note": {}, **fields}


def _loop(backend: Any, forget: Any, archive: str) -> None:
    """The killed process: prune, undo, prune, undo… forever."""
    while True:
        _step(backend, forget, archive)


def _step(backend: Any, forget: Any, archive: str) -> None:
    entries = backend_entries(backend)
    last = _open_prune(entries)
    if last is None:
        backend.prune(jr.PruneRequest(_entry("prune"), forget, archive))
    else:
        undo = _entry("undo", undo_of=last["id"], note={"retention": jr.UNPRUNE})
        backend.unprune(jr.UnpruneRequest(undo, last))


def backend_entries(backend: Any) -> list[dict[str, Any]]:
    recovery = getattr(backend, "recovery", None) or backend._recovery()
    return recovery.journal_entries()


def _open_prune(entries: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The newest prune not undone."""
    undone = jr.undone_ids(entries)
    prunes = [e for e in entries if e.get("action") == "prune" and e["id"] not in undone]
    return prunes[-1] if prunes else None


def _kill_loop(run_child: Any, check: Any, settle: Any, seed: int, trials: int, delay: float,
               needed: int = 2) -> int:
    return kill_loop(run_child, check, seed, trials, delay, needed=needed, min_trials=MIN_TRIALS, budget=BUDGET,
                     settle=settle)


# ---- the native store ------------------------------------------------------------------------


def _native_rows(url: str) -> list[dict[str, Any]]:
    scan = NativeReader(url).scan()
    return [r for b in scan.checkpoints for r in as_table(b).to_pylist()]


def test_sigkill_during_native_prunes_and_undos_never_loses_a_checkpoint(tmp_path: Path) -> None:
    from lastgood.readers.native.retention import NativeRetention

    url, archive = str(tmp_path / "store"), str(tmp_path / "archive")
    writer = NativeWriter(url, full_every=1)  # full checkpoints: no dependency to respect here
    for run in range(6):
        for step in range(8):
            writer.save(f"run-{run}", agent_state(step))
    rows = _native_rows(url)
    original = {(r["run_id"], r["namespace"], r["checkpoint_id"]): r["checksum"] for r in rows}
    going = sorted((r for r in rows if r["step"] < 6), key=lambda r: (r["run_id"], r["step"]))
    import pyarrow as pa

    forget = pa.Table.from_pylist([{k: r[k] for k in FORGET} for r in going])
    going_keys = {(r["run_id"], r["namespace"], r["checkpoint_id"]) for r in going}

    def check() -> int:
        listed = {(r["run_id"], r["namespace"], r["checkpoint_id"]): r for r in _native_rows(url)}
        for key, row in listed.items():  # every listed checkpoint is whole
            blob = Path(url, row["location"])
            assert blob.exists(), f"{key} listed without its blob"
        backend = NativeRetention(url)
        lock = backend.recovery.pending()
        named = set()
        for entry in [*backend.recovery.journal_entries(), *[p["entry"] for p in lock if p.get("prune")]]:
            if entry.get("action") == "prune":
                named |= set(manifest_keys(Archive(archive).manifest(entry["id"])))
        missing = set(original) - set(listed)
        assert missing <= named, f"lost: {sorted(missing - named)[:3]}"
        return 1 if lock else 0

    def settle() -> None:
        backend = NativeRetention(url)
        backend.resume()
        assert not Path(url, "journal", "lock.json").exists()
        entries = backend.recovery.journal_entries()
        assert jr.verify_chain(entries).ok
        listed = {(r["run_id"], r["namespace"], r["checkpoint_id"]) for r in _native_rows(url)}
        assert listed == (set(original) - going_keys if _open_prune(entries) else set(original))

    interrupted = _kill_loop(lambda: _loop(NativeRetention(url), forget, archive), check, settle, 20261123,
                             TRIALS, 0.6)
    print(f"interrupted mid-action: {interrupted}")
    assert interrupted >= 2, "no kill landed inside a prune or an undo"
    backend = NativeRetention(url)
    while _open_prune(backend.recovery.journal_entries()):
        _step(backend, forget, archive)
    after = {(r["run_id"], r["namespace"], r["checkpoint_id"]): r["checksum"] for r in _native_rows(url)}
    assert after == original  # every checkpoint back, same bytes


# ---- LangGraph SQLite --------------------------------------------------------------------------


def test_sigkill_during_sqlite_prunes_and_undos_never_loses_a_checkpoint(tmp_path: Path) -> None:
    from langgraph.checkpoint.sqlite import SqliteSaver

    from lastgood.readers.langgraph.retention_sqlite import SqliteRetention
    from tests.langgraph_graphs import build_tools

    path, archive = tmp_path / "lg.sqlite", str(tmp_path / "archive")
    with sqlite3.connect(str(path), check_same_thread=False) as conn:
        saver = SqliteSaver(conn)
        for n in range(8):
            build_tools(saver, thread_id=f"t-{n}")
        original = _sqlite_rows(conn)
    going = [r for r in original.values() if r["rank"] > 2]
    import pyarrow as pa

    forget = pa.Table.from_pylist([{"run_id": r["thread_id"], "namespace": r["checkpoint_ns"],
                                    "checkpoint_id": r["checkpoint_id"], "parent_id": r["parent"], "step": None,
                                    "created_at": None, "trigger": None, "agent": None, "metadata": "{}",
                                    "size_bytes": None} for r in going])
    going_keys = {(r["thread_id"], r["checkpoint_ns"], r["checkpoint_id"]) for r in going}

    def check() -> int:
        with sqlite3.connect(str(path)) as conn:
            assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
            present = _sqlite_rows(conn)
            for thread in {k[0] for k in original}:  # LangGraph still reads every thread
                assert SqliteSaver(conn).get_tuple({"configurable": {"thread_id": thread}}) is not None
        backend = SqliteRetention(str(path))
        named = set()
        for entry in backend._recovery().journal_entries():
            if entry.get("action") == "prune":
                named |= set(manifest_keys(Archive(archive).manifest(entry["id"])))
        missing = set(original) - set(present)
        assert missing <= named, f"lost: {sorted(missing - named)[:3]}"
        for key in set(present) & set(original):  # what is there is what was there
            assert present[key]["digest"] == original[key]["digest"]
        return 1 if backend.pending() else 0

    def settle() -> None:
        backend = SqliteRetention(str(path))
        backend.resume()
        assert backend.pending() == []
        entries = backend._recovery().journal_entries()
        assert jr.verify_chain(entries).ok
        with sqlite3.connect(str(path)) as conn:
            present = set(_sqlite_rows(conn))
        assert present == (set(original) - going_keys if _open_prune(entries) else set(original))

    interrupted = _kill_loop(lambda: _loop(SqliteRetention(str(path)), forget, archive), check, settle, 7,
                             TRIALS, 0.8)
    print(f"interrupted mid-action: {interrupted}")
    assert interrupted >= 2, "no kill landed inside a prune or an undo"
    backend = SqliteRetention(str(path))
    while _open_prune(backend._recovery().journal_entries()):
        _step(backend, forget, archive)
    with sqlite3.connect(str(path)) as conn:
        after = _sqlite_rows(conn)
        assert {k: v["digest"] for k, v in after.items()} == {k: v["digest"] for k, v in original.items()}
        assert {k: v["parent"] for k, v in after.items()} == {k: v["parent"] for k, v in original.items()}


def _sqlite_rows(conn: sqlite3.Connection) -> dict[tuple[str, str, str], dict[str, Any]]:
    import hashlib

    out = {}
    for thread, ns, cid, parent, type_, blob, meta, rank in conn.execute("""SELECT thread_id, checkpoint_ns,
            checkpoint_id, parent_checkpoint_id, type, checkpoint, metadata, row_number() OVER (
            PARTITION BY thread_id, checkpoint_ns ORDER BY checkpoint_id DESC) FROM checkpoints"""):
        writes = conn.execute("""SELECT task_id, idx, channel, type, value FROM writes WHERE thread_id = ?
            AND checkpoint_ns = ? AND checkpoint_id = ? ORDER BY task_id, idx""", (thread, ns, cid)).fetchall()
        digest = hashlib.sha256(json.dumps([type_, blob.hex(), bytes(meta).hex(),
                                            [[w[0], w[1], w[2], w[3], bytes(w[4]).hex()] for w in writes]]).encode())
        out[(thread, ns, cid)] = {"thread_id": thread, "checkpoint_ns": ns, "checkpoint_id": cid, "parent": parent,
                                  "rank": rank, "digest": digest.hexdigest()}
    return out


@pytest.mark.postgres
def test_sigkill_during_postgres_prunes_and_undos_never_loses_a_checkpoint(pg_create_database: Any,
                                                                          tmp_path: Path) -> None:
    import psycopg
    from langgraph.checkpoint.postgres import PostgresSaver

    from lastgood.readers.langgraph.retention_postgres import PostgresRetention
    from tests.langgraph_graphs import build_tools

    dsn, archive = pg_create_database("prune_crash"), str(tmp_path / "archive")
    with PostgresSaver.from_conn_string(dsn) as saver:
        saver.setup()
        for n in range(6):
            build_tools(saver, thread_id=f"t-{n}")

    def rows() -> dict[tuple[str, str, str], str]:
        with psycopg.connect(dsn) as conn:
            return {(t, ns, c): f"{cp}|{meta}|{p}" for t, ns, c, cp, meta, p in conn.execute(
                """SELECT thread_id, checkpoint_ns, checkpoint_id, checkpoint::text, metadata::text,
                   parent_checkpoint_id FROM checkpoints""")}
    original = rows()
    by_thread: dict[str, list[str]] = {}
    for t, _, c in original:
        by_thread.setdefault(t, []).append(c)
    going_keys = {(t, "", c) for t, ids in by_thread.items() for c in sorted(ids)[:-2]}
    import pyarrow as pa

    forget = pa.Table.from_pylist([{"run_id": t, "namespace": ns, "checkpoint_id": c, "parent_id": None, "step": None,
                                    "created_at": None, "trigger": None, "agent": None, "metadata": "{}",
                                    "size_bytes": None} for t, ns, c in sorted(going_keys)])

    def check() -> int:
        present = rows()
        backend = PostgresRetention(dsn)
        named = set()
        for entry in backend._recovery().journal_entries():
            if entry.get("action") == "prune":
                named |= set(manifest_keys(Archive(archive).manifest(entry["id"])))
        assert set(original) - set(present) <= named
        return 1 if backend.pending() else 0

    def settle() -> None:
        backend = PostgresRetention(dsn)
        backend.resume()
        entries = backend._recovery().journal_entries()
        assert jr.verify_chain(entries).ok and backend.pending() == []
        assert set(rows()) == (set(original) - going_keys if _open_prune(entries) else set(original))

    interrupted = _kill_loop(lambda: _loop(PostgresRetention(dsn), forget, archive), check, settle, 11, 24, 1.2, needed=1)
    assert interrupted >= 1
    backend = PostgresRetention(dsn)
    while _open_prune(backend._recovery().journal_entries()):
        _step(backend, forget, archive)
    assert rows() == original
