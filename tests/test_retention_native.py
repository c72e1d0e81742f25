"""Prune and undo on real native stores: what is always kept, the archive, byte-for-byte undo."""

from __future__ import annotations

import hashlib
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from lastgood import recovery, retention
from lastgood.errors import ConflictError, UsageError
from lastgood.index import queries
from lastgood.index.catalog import Catalog
from lastgood.readers import journal as jr
from lastgood.readers.base import Capability, capabilities
from lastgood.readers.native.archive import Archive
from lastgood.readers.native.reader import NativeReader
from lastgood.readers.native.writer import NativeWriter
from lastgood.retention.policy import Duration, Policy
from lastgood.stores import index_store
from tests.helpers import T0, agent_state, write_store

NOW = T0 + timedelta(days=1)


def _open(tmp_path: Path, url: str) -> tuple[Catalog, Any]:
    catalog = Catalog(tmp_path / "home" / "index.duckdb")
    return catalog, index_store(catalog, url).store


def _states(catalog: Catalog, store: Any) -> dict[tuple[str, str, str], Any]:
    rows = queries.list_checkpoints(catalog, store.store_id)
    out = {}
    for row in rows:
        full = queries.resolve_checkpoint(catalog, store.store_id, f"{row['run_id']}/{row['checkpoint_id']}")
        out[(row["run_id"], row["namespace"], row["checkpoint_id"])] = store.reader.load_state(full)
    return out


def _listing(catalog: Catalog, store: Any) -> list[dict[str, Any]]:
    return queries.list_checkpoints(catalog, store.store_id, fields=("run_id", "namespace", "checkpoint_id",
                                                                     "parent_id", "step", "kind", "size_bytes"))


def _blobs(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted((root / "blobs").rglob("*")) if p.is_file()}


def test_the_native_reader_offers_retention(tmp_path: Path) -> None:
    write_store(str(tmp_path / "s"), runs=1, steps=2)
    assert Capability.RETENTION in capabilities(NativeReader(str(tmp_path / "s")))


def test_prune_then_undo_brings_every_checkpoint_back_byte_for_byte(tmp_path: Path) -> None:
    url = str(tmp_path / "store")
    write_store(url, runs=3, steps=12)
    catalog, store = _open(tmp_path, url)
    listing, states, blobs = _listing(catalog, store), _states(catalog, store), _blobs(Path(url))
    sizes = {str(p.relative_to(url)): p.stat().st_size for p in Path(url, "blobs").rglob("*") if p.is_file()}
    plan = retention.plan_prune(catalog, store, Policy(last=3), now=NOW)
    kept = {(r["run_id"], r["namespace"], r["checkpoint_id"]) for r in plan.checkpoints(keep=True)}
    assert plan.summary["forget"] == 36 - len(kept) > 0
    result = retention.apply_prune(catalog, store, plan, reason="keep 3", operator="ana")
    store = index_store(catalog, url).store
    after = _states(catalog, store)
    assert set(after) == kept and all(after[k] == states[k] for k in kept)  # every kept state reads the same
    assert Path(url, "blobs").exists() and len(_blobs(Path(url))) == len(kept)
    assert NativeWriter(url, create=False).load_head_state("run-0") == agent_state(11)
    assert not queries.findings(catalog, store.store_id, severity="error")
    archived = {tuple(r[:3]) for r in Archive(result.archive).manifest(result.action_id)["entries"]}
    assert archived == set(states) - kept
    freed = sum(size for p, size in sizes.items() if p not in _blobs(Path(url)))  # the blob files that went
    assert result.space["returned_bytes"] == freed > 0 and "space is back" in result.space["notes"][0]
    undo = retention.plan_undo_prune(catalog, store, result.action_id)
    assert undo.conflicts == []
    back = retention.apply_undo_prune(catalog, store, undo, reason="need them", operator="ana")
    assert back.checkpoints == len(archived) and back.undo_of == result.action_id
    store = index_store(catalog, url, full=True).store
    assert _listing(catalog, store) == listing
    assert _blobs(Path(url)) == blobs  # byte for byte
    assert _states(catalog, store) == states
    entries = store.reader.recovery().journal_entries()
    assert jr.verify_chain(entries).ok and [e["action"] for e in entries] == ["prune", "undo"]
    assert entries[0]["reason"] == "keep 3" and entries[0]["operator"] == "ana"
    with pytest.raises(UsageError, match="already undone"):
        retention.plan_undo_prune(catalog, store, result.action_id)


def test_incremental_parents_heads_pins_and_journaled_targets_are_always_kept(tmp_path: Path) -> None:
    url = str(tmp_path / "store")
    write_store(url, runs=2, steps=10)  # full_every=4: steps 0, 4, 8 full; the rest patches
    catalog, store = _open(tmp_path, url)
    rows = queries.list_checkpoints(catalog, store.store_id, run_id="run-0")
    by_step = {r["step"]: r["checkpoint_id"] for r in rows}
    retention.pin(catalog, store, by_step[1], reason="evidence", operator="ana")
    restore = recovery.plan_restore(catalog, store, by_step[2])
    recovery.apply_plan(catalog, store, restore, reason="try again", operator="ana")
    store = index_store(catalog, url).store
    plan = retention.plan_prune(catalog, store, Policy(last=1), now=NOW)
    keep = {r["checkpoint_id"]: r["reasons"] for r in plan.checkpoints(keep=True) if r["run_id"] == "run-0"}
    assert any(r.startswith("pinned") for r in keep[by_step[1]])
    assert any("restore" in r for r in keep[by_step[2]])  # the restore's target (also the new head)
    assert "head" in keep[by_step[2]]
    assert keep[by_step[0]] and keep[by_step[0]][0].startswith("needed by")  # step 1 and 2 patch on 0
    assert "last 1" in keep[by_step[9]] and any(r.startswith("needed by") for r in keep[by_step[8]])
    gone = {r["checkpoint_id"] for r in plan.checkpoints(keep=False) if r["run_id"] == "run-0"}
    assert gone == {by_step[s] for s in (3, 4, 5, 6, 7)}
    retention.apply_prune(catalog, store, plan, reason="tidy", operator="ana")
    store = index_store(catalog, url).store
    reader = NativeReader(url)
    for row in queries.list_checkpoints(catalog, store.store_id):  # every kept checkpoint still reads
        reader.load_state(queries.resolve_checkpoint(catalog, store.store_id, f"{row['run_id']}/{row['checkpoint_id']}"))
    assert NativeWriter(url, create=False).load_head_state("run-0") == agent_state(2)


def test_a_chain_of_patches_no_rule_keeps_is_walked_to_its_full_checkpoint(tmp_path: Path) -> None:
    url = str(tmp_path / "store")
    write_store(url, runs=1, steps=8)  # full_every=4: 0 and 4 full; 5, 6, 7 patch on the one before
    catalog, store = _open(tmp_path, url)
    by_step = {r["step"]: r["checkpoint_id"] for r in queries.list_checkpoints(catalog, store.store_id)}
    plan = retention.plan_prune(catalog, store, Policy(last=1), now=NOW)
    keep = {r["checkpoint_id"]: r["reasons"] for r in plan.checkpoints(keep=True)}
    assert "last 1" in keep[by_step[7]]
    assert keep[by_step[6]] == [f"needed by {by_step[7]} (incremental)"]  # two steps through checkpoints
    assert keep[by_step[5]] == [f"needed by {by_step[6]} (incremental)"]  # no rule keeps, to the full one
    assert keep[by_step[4]] == [f"needed by {by_step[5]} (incremental)"]
    assert {r["checkpoint_id"] for r in plan.checkpoints(keep=False)} == {by_step[s] for s in range(4)}
    assert plan.summary["kept_by"]["needed: incremental"] == 3


def test_stale_runs_go_whole_unless_pinned_and_undo_refuses_a_run_written_since(tmp_path: Path) -> None:
    url = str(tmp_path / "store")
    writer = NativeWriter(url)
    for run, age in (("old", 90), ("kept-old", 80), ("fresh", 1)):
        for step in range(3):
            writer.save(run, agent_state(step), created_at=NOW - timedelta(days=age, minutes=-step))
    catalog, store = _open(tmp_path, url)
    cid = queries.list_checkpoints(catalog, store.store_id, run_id="kept-old")[0]["checkpoint_id"]
    retention.pin(catalog, store, cid, reason="audit", operator="ana")
    plan = retention.plan_prune(catalog, store, Policy(runs_within=Duration(days=30)), now=NOW)
    per_run = {r["run_id"]: r for r in plan.per_run}
    assert per_run["old"]["goes_whole"] and per_run["old"]["forget"] == 3
    assert per_run["kept-old"]["forget"] == 0 and per_run["fresh"]["forget"] == 0
    result = retention.apply_prune(catalog, store, plan, reason="stale", operator="ana")
    assert not Path(url, "heads", "old.json").exists()  # the run is gone, head included
    assert NativeWriter(url, create=False).load_head_state("old") is None
    NativeWriter(url).save("old", {"new": "life"}, created_at=NOW)  # an agent reuses the run
    store = index_store(catalog, url).store
    undo = retention.plan_undo_prune(catalog, store, result.action_id)
    assert undo.conflicts and "written to since" in undo.conflicts[0]
    with pytest.raises(ConflictError):
        retention.apply_undo_prune(catalog, store, undo, reason="back", operator="ana")
    forced = retention.plan_undo_prune(catalog, store, result.action_id, force=True)
    retention.apply_undo_prune(catalog, store, forced, reason="back anyway", operator="ana")
    store = index_store(catalog, url).store
    assert len(queries.list_checkpoints(catalog, store.store_id, run_id="old")) == 4
    assert NativeWriter(url, create=False).load_head_state("old") == {"new": "life"}  # the newer head stays


def test_saved_policy_is_a_journal_entry_used_when_no_options_are_given(tmp_path: Path) -> None:
    url = str(tmp_path / "store")
    write_store(url, runs=2, steps=6)
    catalog, store = _open(tmp_path, url)
    with pytest.raises(UsageError, match="no retention policy"):
        retention.plan_prune(catalog, store)
    retention.save_policy(store, Policy(last=2), reason="default", operator="ana")
    saved = retention.saved_policy(store)
    assert saved["policy"] == {"last": 2} and saved["options"] == ["--keep-last 2"]
    plan = retention.plan_prune(catalog, store, now=NOW)
    assert plan.policy_source == "saved" and plan.policy == Policy(last=2)
    entry = store.reader.recovery().journal_entries()[-1]
    recovery.apply_plan(catalog, store, recovery.plan_undo(catalog, store, entry["id"]), reason="oops",
                        operator="ana")
    assert retention.saved_policy(store) is None  # undone: no policy again


def test_a_conflicting_protection_found_under_the_lock_deletes_nothing(tmp_path: Path) -> None:
    url = str(tmp_path / "store")
    write_store(url, runs=1, steps=8)
    catalog, store = _open(tmp_path, url)
    plan = retention.plan_prune(catalog, store, Policy(last=1), now=NOW)
    victim = plan.checkpoints(keep=False)[0]
    retention.pin(catalog, store, victim["checkpoint_id"], reason="late pin", operator="bob")
    before = _blobs(Path(url))
    with pytest.raises(ConflictError, match="must be kept"):
        retention.apply_prune(catalog, store, plan, reason="tidy", operator="ana")
    assert _blobs(Path(url)) == before
    assert [e["action"] for e in store.reader.recovery().journal_entries()] == ["pin"]
    assert not Path(url, "journal", "lock.json").exists()


def test_storage_report_numbers(tmp_path: Path) -> None:
    url = str(tmp_path / "store")
    writer = NativeWriter(url)
    for day in range(5):
        for run in ("a", "b"):
            writer.save(run, agent_state(day), agent=f"agent-{run}", created_at=NOW - timedelta(days=5 - day))
    catalog, store = _open(tmp_path, url)
    report = retention.storage_report(catalog, store, stale_after="2d", now=NOW + timedelta(days=3))
    data = report.to_dict()
    assert data["store"]["checkpoints"] == 10 and data["store"]["runs"] == 2 and data["store"]["prunable"]
    assert len(data["growth"]) == 5 and data["growth"][-1]["cumulative_bytes"] == data["store"]["size_bytes"]
    assert {r["run_id"] for r in data["stale_runs"]} == {"a", "b"}
    assert {c["channel"] for c in data["channels"]} >= {"llm", "tools", "runtime"}
    assert data["tables"][0]["table"] == "blobs" and data["tables"][0]["bytes"] == data["store"]["size_bytes"]
    assert data["footprint"]["files"]["blobs"] > 0 and data["policy"] is None
    assert data["projection"][0]["days"] == 30
