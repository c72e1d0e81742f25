"""Recovery on the native store: the head a resuming agent loads equals the target
after restore, rollback and undo; marks, refusals, conflicts, the journal."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import pytest

from lastgood.readers import journal as jr
from lastgood import recovery
from lastgood.index.catalog import Catalog
from lastgood.errors import ConflictError, UsageError
from lastgood.readers.native.writer import NativeWriter
from lastgood.stores import index_store
from tests.helpers import lastgood_cli, write_store


@pytest.fixture()
def native(tmp_path: Path) -> tuple[str, dict[str, list[dict[str, Any]]], Catalog]:
    url = str(tmp_path / "store")
    states = write_store(url, runs=2, steps=8)
    catalog = Catalog(tmp_path / "home" / "index.duckdb")
    index_store(catalog, url)
    return url, states, catalog


def ids_of(catalog: Catalog, store_id: int, run: str) -> list[str]:
    with catalog.connect() as con:
        rows = con.execute("""SELECT checkpoint_id FROM checkpoints WHERE store_id = ? AND run_id = ?
                              ORDER BY step""", [store_id, run]).fetchall()
    return [r[0] for r in rows]


def statuses(catalog: Catalog, store_id: int, run: str) -> dict[str, str]:
    with catalog.connect() as con:
        rows = con.execute("""SELECT checkpoint_id, status FROM checkpoints WHERE store_id = ?
                              AND run_id = ?""", [store_id, run]).fetchall()
    return dict(rows)


def apply(catalog: Catalog, url: str, plan_of: Any, reason: str = "test") -> recovery.ActionResult:
    store = index_store(catalog, url, check="none").store
    return recovery.apply_plan(catalog, store, plan_of(store), reason=reason, operator="tester")


def test_restore_rollback_undo_load_head_state_equals_the_target(native) -> None:
    url, states, catalog = native
    store = index_store(catalog, url, check="none").store
    ids = ids_of(catalog, store.store_id, "run-0")
    writer = NativeWriter(url, create=False)
    done = apply(catalog, url, lambda s: recovery.plan_restore(catalog, s, ids[3]))
    assert done.new_head == ids[3] and done.check["ok"]
    assert writer.load_head_state("run-0") == states["run-0"][3]
    assert writer.head("run-0")["note"]["reason"] == "test"
    rolled = apply(catalog, url, lambda s: recovery.plan_rollback(catalog, s, "run-0", ids[2]))
    assert writer.load_head_state("run-0") == states["run-0"][2]
    assert rolled.superseded == ids[3:]
    assert {c for c, s in statuses(catalog, store.store_id, "run-0").items() if s == "superseded"} == set(ids[3:])
    undone = apply(catalog, url, lambda s: recovery.plan_undo(catalog, s, rolled.action_id))
    assert writer.load_head_state("run-0") == states["run-0"][3] and undone.undo_of == rolled.action_id
    assert "superseded" not in statuses(catalog, store.store_id, "run-0").values()
    redo = apply(catalog, url, lambda s: recovery.plan_undo(catalog, s, undone.action_id))
    assert writer.load_head_state("run-0") == states["run-0"][2]
    assert redo.superseded == [] and set(ids[3:]) <= {
        c for c, s in statuses(catalog, store.store_id, "run-0").items() if s == "superseded"}
    report = recovery.journal_report(store)
    assert report["chain_ok"] and [a["action"] for a in report["actions"]] == [
        "restore", "rollback", "undo", "undo"]
    with catalog.connect() as con:  # the index mirrors the journal for SQL
        mirrored = con.execute("SELECT action, undoes FROM journal WHERE store_id = ? ORDER BY seq",
                               [store.store_id]).fetchall()
    assert [m[0] for m in mirrored] == ["restore", "rollback", "undo", "undo"]
    assert mirrored[2][1] == rolled.action_id
    writer2 = NativeWriter(url, create=False)  # the agent resumes and saves on top of the restored head
    saved = writer2.save("run-0", {"after": "restore"})
    assert saved.parent_id == ids[2] and writer2.load_head_state("run-0") == {"after": "restore"}


def test_quarantined_and_corrupt_targets_are_refused_without_force(native, tmp_path: Path) -> None:
    url, states, catalog = native
    store = index_store(catalog, url, check="none").store
    ids = ids_of(catalog, store.store_id, "run-1")
    apply(catalog, url, lambda s: recovery.plan_quarantine(catalog, s, ids[1]), reason="looks wrong")
    assert statuses(catalog, store.store_id, "run-1")[ids[1]] == "quarantined"
    store = index_store(catalog, url, check="none").store
    with pytest.raises(UsageError, match="quarantined.*--force"):
        recovery.plan_restore(catalog, store, ids[1])
    forced = recovery.plan_restore(catalog, store, ids[1], force=True)
    assert forced.warnings and "forced" in forced.warnings[0]
    fresh = Catalog(tmp_path / "fresh" / "index.duckdb")  # a new index reads the marks from the store
    fresh_id = index_store(fresh, url, check="none").store.store_id
    assert statuses(fresh, fresh_id, "run-1")[ids[1]] == "quarantined"
    apply(catalog, url, lambda s: recovery.plan_quarantine(catalog, s, ids[1], release=True), reason="ok")
    assert statuses(catalog, store.store_id, "run-1")[ids[1]] == "ok"
    blob = Path(url) / json.loads((Path(url) / "heads" / "run-1.json").read_text())["location"]
    full = next(p for p in sorted(blob.parent.iterdir()) if p.stat().st_size > 300)
    full.write_bytes(full.read_bytes()[:-5] + b"XXXXX")
    store = index_store(catalog, url, check="data", full=True).store
    corrupt = [c for c, s in statuses(catalog, store.store_id, "run-1").items() if s == "corrupt"]
    assert corrupt
    with pytest.raises(UsageError, match="corrupt.*--force"):
        recovery.plan_restore(catalog, store, corrupt[0])


def test_moved_head_conflicts_and_nothing_is_written(native) -> None:
    url, states, catalog = native
    store = index_store(catalog, url, check="none").store
    ids = ids_of(catalog, store.store_id, "run-0")
    plan = recovery.plan_restore(catalog, store, ids[1])
    NativeWriter(url, create=False).save("run-0", {"agent": "moved on"})
    head_before = (Path(url) / "heads" / "run-0.json").read_bytes()
    with pytest.raises(ConflictError, match="moved"):
        recovery.apply_plan(catalog, store, plan, reason="late", operator="tester")
    assert (Path(url) / "heads" / "run-0.json").read_bytes() == head_before
    assert recovery.journal_report(store)["actions"] == []
    assert not (Path(url) / "journal").exists()  # a refused action leaves the store as it was


def test_an_action_is_undone_once_and_a_stale_undo_never_lifts_a_later_action(native) -> None:
    url, _states, catalog = native
    store = index_store(catalog, url, check="none").store
    ids = ids_of(catalog, store.store_id, "run-0")
    first = apply(catalog, url, lambda s: recovery.plan_quarantine(catalog, s, ids[2]))
    undone = apply(catalog, url, lambda s: recovery.plan_undo(catalog, s, first.action_id))
    again = apply(catalog, url, lambda s: recovery.plan_quarantine(catalog, s, ids[2]))
    with pytest.raises(UsageError, match=f"already undone by {undone.action_id}"):
        recovery.plan_undo(catalog, store, first.action_id)
    assert statuses(catalog, store.store_id, "run-0")[ids[2]] == "quarantined"  # the later action stands
    assert [a["action"] for a in recovery.journal_report(store)["actions"]] == ["quarantine", "undo", "quarantine"]
    with pytest.raises(UsageError, match="already quarantined"):  # a redo would stack a second mark
        recovery.plan_undo(catalog, store, undone.action_id)
    apply(catalog, url, lambda s: recovery.plan_undo(catalog, s, again.action_id))
    assert statuses(catalog, store.store_id, "run-0")[ids[2]] == "ok"
    apply(catalog, url, lambda s: recovery.plan_undo(catalog, s, undone.action_id))  # now a redo is fine
    assert statuses(catalog, store.store_id, "run-0")[ids[2]] == "quarantined"
    marked = apply(catalog, url, lambda s: recovery.plan_quarantine(catalog, s, ids[5]))
    apply(catalog, url, lambda s: recovery.plan_quarantine(catalog, s, ids[5], release=True))
    with pytest.raises(UsageError, match="not quarantined any more"):  # released by hand already
        recovery.plan_undo(catalog, store, marked.action_id)


def test_undo_after_the_head_moved_is_a_conflict(native, tmp_path: Path) -> None:
    url, _states, catalog = native
    store = index_store(catalog, url, check="none").store
    ids = ids_of(catalog, store.store_id, "run-0")
    done = apply(catalog, url, lambda s: recovery.plan_restore(catalog, s, ids[3]))
    NativeWriter(url, create=False).save("run-0", {"agent": "moved on"})
    index_store(catalog, url, check="none")
    with pytest.raises(ConflictError, match="moved since"):
        recovery.plan_undo(catalog, store, done.action_id)
    cli = lastgood_cli("undo", url, done.action_id, "--reason", "r", "--yes", home=tmp_path / "h")
    assert cli.returncode == 1 and cli.stderr.count("\n") == 1 and "moved since" in cli.stderr


def test_a_dry_run_warns_when_the_expected_head_is_not_the_head(native, tmp_path: Path) -> None:
    url, _states, catalog = native
    store = index_store(catalog, url, check="none").store
    ids = ids_of(catalog, store.store_id, "run-0")
    dry = lastgood_cli("restore", url, ids[2], "--dry-run", "--expect-head", ids[4], "--format", "json",
                       home=tmp_path / "h")
    assert dry.returncode == 0
    assert any("--expect-head" in w and "conflict" in w for w in json.loads(dry.stdout)["warnings"])
    fine = lastgood_cli("restore", url, ids[2], "--dry-run", "--expect-head", ids[-1], "--format", "json",
                        home=tmp_path / "h")
    assert not any("--expect-head" in w for w in json.loads(fine.stdout)["warnings"])


def test_restoring_the_head_itself_is_a_no_op_that_exits_0(native, tmp_path: Path) -> None:
    url, _states, catalog = native
    store = index_store(catalog, url, check="none").store
    head = ids_of(catalog, store.store_id, "run-0")[-1]
    home = tmp_path / "h"
    for extra in (["--dry-run"], ["--reason", "again", "--yes"]):  # a preview, and a script run twice
        done = lastgood_cli("restore", url, head[:20], *extra, "--format", "json", home=home)
        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout) | {"message": ""} == {
            "action": "restore", "run_id": "run-0", "namespace": "", "target": head, "changed": False,
            "dry_run": extra == ["--dry-run"], "message": ""}
    rollback = lastgood_cli("rollback", url, "run-0", "--to", head, "--dry-run", home=home)
    assert rollback.returncode == 0 and "nothing to do" in rollback.stdout
    journal = lastgood_cli("journal", url, "--format", "json", home=home)
    assert journal.returncode == 0 and json.loads(journal.stdout)["entries"] == 0  # nothing written
    with pytest.raises(UsageError, match="already the head"):  # the pages show it as a refusal
        recovery.plan_restore(catalog, store, head)


def test_last_good_is_not_after_a_head_moved_back(native) -> None:
    from lastgood.integrity import health

    url, _states, catalog = native
    store = index_store(catalog, url, check="data").store
    ids = ids_of(catalog, store.store_id, "run-0")
    assert health.last_good(catalog, store.store_id, "run-0") == ids[-1]
    apply(catalog, url, lambda s: recovery.plan_restore(catalog, s, ids[3]))
    index_store(catalog, url, check="data")
    assert health.last_good(catalog, store.store_id, "run-0") == ids[3]  # not the head it moved away from
    assert health.last_good(catalog, store.store_id, "run-1") == ids_of(catalog, store.store_id, "run-1")[-1]


def test_parallel_restores_with_the_same_expected_head_exactly_one_wins(native) -> None:
    url, states, catalog = native
    store = index_store(catalog, url, check="none").store
    ids = ids_of(catalog, store.store_id, "run-0")
    head = recovery.backend(store).head("run-0")
    outcomes: list[str] = []
    barrier = threading.Barrier(6)

    def attempt(i: int) -> None:
        backend = recovery.backend(store)
        entry = {"id": jr.new_action_id(), "action": "restore", "operator": "t", "reason": f"race {i}",
                 "run_id": "run-0", "namespace": "", "target": ids[i], "previous_head": head,
                 "marks": jr.empty_marks()}
        change = jr.Change("run-0", "", head, ids[i], entry, {"step": i, "kind": "full"})
        barrier.wait()
        try:
            backend.commit(change)
            outcomes.append("won")
        except ConflictError:
            outcomes.append("conflict")

    threads = [threading.Thread(target=attempt, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(outcomes) == ["conflict"] * 5 + ["won"]
    report = recovery.journal_report(store)
    assert report["chain_ok"] and len(report["actions"]) == 1


def test_an_agent_saving_during_restores_never_leaves_a_mixed_state(native) -> None:
    url, states, catalog = native
    store = index_store(catalog, url, check="none").store
    ids = ids_of(catalog, store.store_id, "run-0")
    agent_states = [{"agent": i} for i in range(40)]
    stop = threading.Event()

    def agent() -> None:
        writer = NativeWriter(url, create=False)
        for state in agent_states:
            if stop.is_set():
                return
            try:
                writer.save("run-0", state, kind="full")
            except ConflictError:  # a restore moved the head: the agent resumes from it, as it must
                continue

    worker = threading.Thread(target=agent)
    worker.start()
    results = []
    for i in range(6):
        store = index_store(catalog, url, check="none").store
        try:
            plan = recovery.plan_restore(catalog, store, ids[i % 4])
            results.append(recovery.apply_plan(catalog, store, plan, reason="race", operator="t"))
        except (ConflictError, UsageError):
            results.append(None)
    stop.set()
    worker.join()
    final = NativeWriter(url, create=False).load_head_state("run-0")
    assert final in agent_states or final in states["run-0"][:4]
    assert recovery.journal_report(store)["chain_ok"]


def test_plan_lists_events_after_the_target_and_the_cli_contract(native, tmp_path: Path) -> None:
    url, states, catalog = native
    store = index_store(catalog, url, check="none").store
    ids = ids_of(catalog, store.store_id, "run-0")
    plan = recovery.plan_restore(catalog, store, ids[2]).to_dict()
    assert any(e["kind"] == "event:timeout" for e in plan["side_effects"])  # saved at step 5
    assert plan["diff"]["summary"]["removed"] > 0 and plan["resumes_from"] == ids[2]
    assert "sk-test" not in json.dumps(plan)  # redacted
    home = tmp_path / "cli-home"
    dry = lastgood_cli("rollback", url, "run-0", "--to", ids[2][:20], "--dry-run", "--format", "json", home=home)
    shape = json.loads(dry.stdout)
    assert {"action_id", "action", "run_id", "target", "previous_head", "new_head", "superseded",
            "dry_run"} <= set(shape) and shape["dry_run"] is True and shape["superseded"] == ids[3:]
    no_tty = lastgood_cli("rollback", url, "run-0", "--to", ids[2], "--reason", "r", home=home)
    assert no_tty.returncode == 2 and "--yes" in no_tty.stderr
    no_reason = lastgood_cli("rollback", url, "run-0", "--to", ids[2], "--yes", home=home)
    assert no_reason.returncode == 2 and "reason" in no_reason.stderr
    assert NativeWriter(url, create=False).head("run-0")["checkpoint_id"] == ids[-1]
    done = lastgood_cli("rollback", url, "run-0", "--to", ids[2], "--yes", "--reason", "r", "--format", "json",
                        home=home, env={"LASTGOOD_OPERATOR": "ana"})
    assert done.returncode == 0 and json.loads(done.stdout)["new_head"] == ids[2]
    journal = json.loads(lastgood_cli("journal", url, "--format", "json", home=home).stdout)
    assert journal["chain_ok"] and journal["actions"][0]["operator"] == "ana"
    entry = journal["actions"][0]
    assert {"id", "time", "operator", "action", "reason", "run_id", "target", "previous_head", "new_head",
            "superseded", "undo_of", "plan_digest", "hash", "prev_hash"} <= set(entry)


def test_tampering_with_a_native_journal_file_breaks_the_chain(native) -> None:
    url, states, catalog = native
    store = index_store(catalog, url, check="none").store
    ids = ids_of(catalog, store.store_id, "run-0")
    apply(catalog, url, lambda s: recovery.plan_restore(catalog, s, ids[1]))
    apply(catalog, url, lambda s: recovery.plan_quarantine(catalog, s, ids[2]))
    assert recovery.journal_report(store)["chain_ok"]
    first = Path(url) / "journal" / "entries" / "0000000001.json"
    entry = json.loads(first.read_text())
    entry["operator"] = "someone else"
    first.write_text(json.dumps(entry))
    report = recovery.journal_report(store)
    assert not report["chain_ok"] and "entry 1" in report["problems"][0]
    for plan in (recovery.plan_quarantine(catalog, store, ids[4]), recovery.plan_restore(catalog, store, ids[3]),
                 recovery.plan_undo(catalog, store, report["actions"][1]["id"])):
        assert any("journal chain is BROKEN" in w for w in plan.warnings), plan.action
    (Path(url) / "journal" / "entries" / "0000000001.json").unlink()
    assert not recovery.journal_report(store)["chain_ok"]
    assert any("BROKEN" in w for w in recovery.plan_quarantine(catalog, store, ids[4]).warnings)


def test_removing_the_newest_journal_entries_is_reported(native, tmp_path: Path) -> None:
    url, _states, catalog = native
    home = tmp_path / "h"
    store = index_store(catalog, url, check="none").store
    ids = ids_of(catalog, store.store_id, "run-0")
    for ref in (ids[1], ids[3], ids[5]):
        done = lastgood_cli("restore", url, ref, "--reason", "r", "--yes", home=home)
        assert done.returncode == 0, done.stderr
    journal = lastgood_cli("journal", url, "--format", "json", home=home)
    assert journal.returncode == 0 and json.loads(journal.stdout)["entries"] == 3
    for seq in (3, 2):  # the last two actions erased: what is left still links
        (Path(url) / "journal" / "entries" / f"{seq:010d}.json").unlink()
    journal = lastgood_cli("journal", url, "--format", "json", home=home)
    report = json.loads(journal.stdout)
    assert journal.returncode == 1 and not report["chain_ok"] and report["entries"] == 1
    assert "ends at entry 1" in report["problems"][0] and "entry 3" in report["problems"][0]
    dry = lastgood_cli("restore", url, ids[2], "--dry-run", "--format", "json", home=home)
    assert any("BROKEN" in w for w in json.loads(dry.stdout)["warnings"])
    for ref, problem in ((ids[2], "ends at entry 2, but entry 3"), (ids[4], "entry 3 (action")):
        lastgood_cli("restore", url, ref, "--reason", "after", "--yes", home=home)  # new entries 2, then 3
        journal = lastgood_cli("journal", url, "--format", "json", home=home)
        assert journal.returncode == 1 and problem in json.loads(journal.stdout)["problems"][0]  # it stays
    assert "is rewritten" in json.loads(journal.stdout)["problems"][0]  # entry 3 is another one now
    fresh = lastgood_cli("journal", url, "--format", "json", home=tmp_path / "other")
    assert fresh.returncode == 0  # an index that never read the lost entries cannot know


def test_restore_and_journal_on_an_object_store_style_filesystem(tmp_path: Path) -> None:
    """memory:// has no rename and no hard links: every file is one whole PUT."""
    import fsspec

    url = "memory://recovery-test/store"
    states = write_store(url, runs=1, steps=5)
    catalog = Catalog(tmp_path / "home" / "index.duckdb")
    store = index_store(catalog, url, check="none").store
    ids = ids_of(catalog, store.store_id, "run-0")
    rolled = apply(catalog, url, lambda s: recovery.plan_rollback(catalog, s, "run-0", ids[1]))
    assert rolled.check["ok"] and NativeWriter(url, create=False).load_head_state("run-0") == states["run-0"][1]
    apply(catalog, url, lambda s: recovery.plan_undo(catalog, s, rolled.action_id))
    assert NativeWriter(url, create=False).load_head_state("run-0") == states["run-0"][4]
    fs = fsspec.filesystem("memory")
    assert sorted(p.rsplit("/", 1)[-1] for p in fs.ls("/recovery-test/store/journal/entries", detail=False)) == [
        "0000000001.json", "0000000002.json"]
    assert not fs.exists("/recovery-test/store/journal/lock.json")
    assert recovery.journal_report(index_store(catalog, url, check="none").store)["chain_ok"]
    fs.rm("/recovery-test", recursive=True)


def test_a_failed_check_after_apply_is_reported_and_journaled(native, tmp_path: Path) -> None:
    url, states, catalog = native
    store = index_store(catalog, url, check="none").store
    ids = ids_of(catalog, store.store_id, "run-0")
    plan = recovery.plan_restore(catalog, store, ids[0])  # a full snapshot
    blob = Path(url) / plan.target_fields["location"]
    blob.write_bytes(blob.read_bytes().replace(b"system", b"SYSTEM"))  # damaged after planning
    fresh = index_store(catalog, url, check="none").store
    result = recovery.apply_plan(catalog, fresh, plan, reason="late damage", operator="t")
    assert result.check and not result.check["ok"] and "sha256" in result.check["message"]
    actions = recovery.journal_report(fresh)["actions"]
    assert [a["action"] for a in actions] == ["restore", "check-failed"]
    assert actions[1]["note"]["checks"] == result.action_id and recovery.journal_report(fresh)["chain_ok"]


def test_the_cli_asks_on_a_terminal(native, tmp_path: Path) -> None:
    import os
    import pty
    import subprocess
    import sys

    url, states, catalog = native
    store = index_store(catalog, url, check="none").store
    ids = ids_of(catalog, store.store_id, "run-1")
    exe = str(Path(sys.executable).with_name("lastgood"))
    env = dict(os.environ, LASTGOOD_HOME=str(tmp_path / "tty-home"))
    for answer, code in ((b"n\n", 2), (b"y\n", 0)):
        leader, follower = pty.openpty()
        proc = subprocess.Popen([exe, "restore", url, ids[1], "--reason", "asked"], stdin=follower,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
        os.close(follower)
        os.write(leader, answer)
        _, err = proc.communicate(timeout=120)
        os.close(leader)
        assert proc.returncode == code, err
        assert b"Apply? [y/N]" in err
    assert NativeWriter(url, create=False).head("run-1")["checkpoint_id"] == ids[1]


@pytest.mark.s3
def test_restore_on_s3_uses_conditional_writes(s3_env: dict[str, str], tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    import uuid

    import s3fs

    from lastgood.readers.native.recovery import _create_exclusive

    endpoint = s3_env["FSSPEC_S3_ENDPOINT_URL"]
    fs = s3fs.S3FileSystem(endpoint_url=endpoint, key="testing", secret="testing")
    bucket = f"lastgood-{uuid.uuid4().hex[:10]}"
    fs.mkdir(bucket)
    assert _create_exclusive(fs, f"{bucket}/lock", b"first")
    fs.invalidate_cache()
    assert not _create_exclusive(fs, f"{bucket}/lock", b"second")
    with monkeypatch.context() as m:  # a racer that passed the existence check: the PUT itself refuses
        m.setattr(fs, "exists", lambda path: False)
        assert not _create_exclusive(fs, f"{bucket}/lock", b"third")  # If-None-Match: *
    assert fs.cat_file(f"{bucket}/lock") == b"first"
    url = f"s3://{bucket}/agents"
    options = {"endpoint_url": endpoint, "key": "testing", "secret": "testing"}
    states = write_store(url, runs=1, steps=4, storage_options=options)
    home = tmp_path / "home"
    rows = json.loads(lastgood_cli("ls", url, "--format", "json", home=home, env=s3_env).stdout)
    done = lastgood_cli("rollback", url, "run-0", "--to", rows[1]["checkpoint_id"], "--reason", "s3",
                        "--yes", "--format", "json", home=home, env=s3_env)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["check"]["ok"]
    assert NativeWriter(url, options, create=False).load_head_state("run-0") == states["run-0"][1]
    journal = json.loads(lastgood_cli("journal", url, "--format", "json", home=home, env=s3_env).stdout)
    assert journal["chain_ok"] and journal["actions"][0]["superseded"] == [r["checkpoint_id"] for r in rows[2:]]


def test_an_unreadable_journal_entry_breaks_the_chain_and_nothing_else(native, tmp_path: Path) -> None:
    url, _states, catalog = native
    store = index_store(catalog, url, check="none").store
    ids = ids_of(catalog, store.store_id, "run-0")
    apply(catalog, url, lambda s: recovery.plan_quarantine(catalog, s, ids[2]))
    apply(catalog, url, lambda s: recovery.plan_quarantine(catalog, s, ids[3]))
    (Path(url) / "journal" / "entries" / "0000000001.json").write_text("not json{")
    home = tmp_path / "cli"
    listed = lastgood_cli("ls", url, "--status", "quarantined", "--format", "json", home=home)
    assert listed.returncode == 0 and [r["checkpoint_id"] for r in json.loads(listed.stdout)] == [ids[3]]
    journal = lastgood_cli("journal", url, home=home)
    assert journal.returncode == 1 and "chain BROKEN" in journal.stdout and "cannot be read" in journal.stdout
    dry = lastgood_cli("quarantine", url, ids[4], "--dry-run", home=home)
    assert dry.returncode == 0 and "journal chain is BROKEN" in dry.stdout
    done = lastgood_cli("quarantine", url, ids[4], "--reason", "r", "--yes", home=home)
    assert done.returncode == 0, done.stderr
    index_store(catalog, url, check="none")
    with catalog.connect() as con:  # the index mirrors the readable entries
        mirrored = con.execute("SELECT count(*) FROM journal WHERE store_id = ?", [store.store_id]).fetchone()[0]
    assert mirrored == 2
