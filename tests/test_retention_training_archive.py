"""`lastgood prune --archive URL` on training stores: pruned checkpoints are copied to the archive
(another local folder, an S3 bucket on moto), every file's sha256 checked, and only then deleted from
the store (the space comes back); `lastgood undo` copies them back byte for byte and leaves the archive
copy (with a restored marker); a prune killed after a copy and before its delete is rolled forward by
the next action (each checkpoint in the store or the archive, never neither); a roll-forward that
finds a source gone and its archive copy incomplete fails with one line and keeps the intent."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest

from lastgood import retention
from lastgood.errors import ReaderError, UsageError
from lastgood.index.catalog import Catalog
from lastgood.readers import journal as jr
from lastgood.readers.hf_trainer.retention import TrainerRetention
from lastgood.retention.policy import Policy
from lastgood.stores import index_store
from tests.test_retention_hf_trainer import PRUNED, _copy, _tree, last_checkpoint
from tests.test_retention_training import V0, V1, _cli, lightning, lightning_last, tree


def _open(tmp_path: Path, url: str) -> tuple[Catalog, Any]:
    catalog = Catalog(tmp_path / "home" / "index.duckdb")
    return catalog, index_store(catalog, url, check="none").store


def _files(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def _entry() -> dict[str, Any]:
    return {"id": jr.new_action_id(), "time": jr.now_iso(), "operator": "k", "action": "prune", "reason": "r",
            "run_id": None, "namespace": "", "target": None, "previous_head": None, "superseded": [],
            "undo_of": None, "marks": jr.empty_marks(), "note": {}}


def test_trainer_prune_to_another_folder_frees_the_space_and_undo_copies_back(tmp_path: Path) -> None:
    out, archive = _copy(tmp_path), tmp_path / "archive"
    before, originals = _tree(out), {name: _files(out / name) for name in PRUNED}
    catalog, store = _open(tmp_path, str(out))
    plan = retention.plan_prune(catalog, store, Policy(last=1), archive=str(archive))
    done = retention.apply_prune(catalog, store, plan, reason="free the disk", operator="ana")
    assert done.checkpoints == 3 and done.archive == str(archive)
    assert sorted(p.name for p in out.glob("checkpoint-*")) == ["checkpoint-16", "checkpoint-40"]
    assert not (out / ".lastgood" / "archive").exists() and last_checkpoint(out) == "checkpoint-40"
    home = archive / "out" / done.action_id
    assert {name: _files(home / name) for name in PRUNED} == originals  # byte for byte
    returned = sum(len((home / n / f).read_bytes()) for n in PRUNED for f in originals[n])
    assert done.space["returned_bytes"] == returned and "back on its disk" in done.space["notes"][0]
    entry = store.reader.recovery().journal_entries()[-1]
    assert entry["note"]["exported"] and entry["note"]["archive"] == str(archive)
    item = next(i for i in entry["note"]["manifest"] if i["checkpoint_id"] == "checkpoint-8")
    assert item["sha256"] == originals["checkpoint-8"] and item["to"] == f"out/{done.action_id}/checkpoint-8"
    assert json.loads((home / "manifest.json").read_text())["note"]["manifest"] == entry["note"]["manifest"]
    store = index_store(catalog, str(out), check="none").store
    undo = retention.plan_undo_prune(catalog, store, done.action_id)
    assert undo.conflicts == []
    back = retention.apply_undo_prune(catalog, store, undo, reason="need them", operator="ana")
    assert back.checkpoints == 3 and _tree(out) == before  # back in place, byte for byte
    assert {name: _files(home / name) for name in PRUNED} == originals  # the archive copy stays
    marker = json.loads((home / f"restored-{back.action_id}.json").read_text())
    assert marker["undo_of"] == done.action_id and sorted(marker["restored"]) == sorted(PRUNED)
    assert not (out / ".lastgood" / "incoming").exists()


def test_an_undo_refuses_a_checkpoint_back_in_place_or_changed_in_the_archive(tmp_path: Path) -> None:
    out, archive = _copy(tmp_path), tmp_path / "archive"
    catalog, store = _open(tmp_path, str(out))
    plan = retention.plan_prune(catalog, store, Policy(last=1), archive=str(archive))
    done = retention.apply_prune(catalog, store, plan, reason="tidy", operator="ana")
    (out / "checkpoint-24").mkdir()
    (archive / "out" / done.action_id / "checkpoint-8" / "config.json").write_text("{}")
    conflicts = retention.plan_undo_prune(catalog, store, done.action_id).conflicts
    assert any("checkpoint-24 exists again" in c for c in conflicts)
    assert any("checkpoint-8 changed in the archive" in c for c in conflicts)


def test_an_archive_inside_the_store_is_refused_with_nothing_moved(tmp_path: Path) -> None:
    out = _copy(tmp_path)
    catalog, store = _open(tmp_path, str(out))
    plan = retention.plan_prune(catalog, store, Policy(last=1), archive=str(out / "old"))
    with pytest.raises(UsageError, match="is inside the store"):
        retention.apply_prune(catalog, store, plan, reason="tidy", operator="ana")
    assert len(list(out.glob("checkpoint-*"))) == 5 and TrainerRetention(str(out)).pending() == []


def _killed_before_delete(out: Path, forget: Any, archive: Path | str, entry: dict[str, Any], deletes: int = 0) -> None:
    """The prune in a child process, killed (no cleanup) before its ``deletes``-th source delete."""
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the killed process
        backend = TrainerRetention(str(out))
        real, count = backend.recovery._delete, [0]

        def delete(path: str) -> None:
            if count[0] == deletes:
                os._exit(9)
            real(path)
            count[0] += 1

        backend.recovery._delete = delete  # type: ignore[method-assign]
        backend.prune(jr.PruneRequest(entry, forget, str(archive)))
        os._exit(0)
    assert os.waitpid(pid, 0)[1] != 0


def _places(out: Path, archive: Path, manifest: list[dict[str, Any]]) -> list[tuple[bool, bool]]:
    """(in the store, complete in the archive) of each item; never neither."""
    found = [((out / i["from"]).exists(), _files(archive / i["to"]) == i["sha256"] if (archive / i["to"]).exists()
              else False) for i in manifest]
    assert all(a or b for a, b in found), found
    return found


def test_a_prune_killed_after_a_copy_and_before_its_delete_is_rolled_forward(tmp_path: Path) -> None:
    out, archive = _copy(tmp_path), tmp_path / "archive"
    catalog, store = _open(tmp_path, str(out))
    forget = retention.plan_prune(catalog, store, Policy(last=1), archive=str(archive)).forget_table(catalog)
    entry = _entry()
    _killed_before_delete(out, forget, archive, entry, 0)
    backend = TrainerRetention(str(out))
    manifest = backend.pending()[0]["entry"]["note"]["manifest"]
    assert _places(out, archive, manifest)[0] == (True, True)  # copied, not yet deleted
    assert sum(a for a, _ in _places(out, archive, manifest)) == 3
    recovery = store.reader.recovery()  # the next action of any kind rolls it forward
    recovery._release(recovery._acquire("next"))
    assert backend.pending() == [] and _places(out, archive, manifest) == [(False, True)] * 3
    entries = recovery.journal_entries()
    assert jr.verify_chain(entries).ok and entries[-1]["id"] == entry["id"]
    assert last_checkpoint(out) == "checkpoint-40"


def test_a_roll_forward_whose_archive_copy_is_incomplete_keeps_the_intent(tmp_path: Path) -> None:
    out, archive = _copy(tmp_path), tmp_path / "archive"
    catalog, store = _open(tmp_path, str(out))
    forget = retention.plan_prune(catalog, store, Policy(last=1), archive=str(archive)).forget_table(catalog)
    entry = _entry()
    _killed_before_delete(out, forget, archive, entry, 1)  # the first source deleted, then the kill
    backend = TrainerRetention(str(out))
    first = backend.pending()[0]["entry"]["note"]["manifest"][0]
    assert not (out / first["from"]).exists()
    lost = archive / first["to"] / "config.json"
    saved = lost.read_bytes()
    lost.unlink()  # someone removed part of the archive meanwhile
    with pytest.raises(ReaderError, match="gone from the store, and its archive copy .* is missing"):
        backend.resume()
    assert len(backend.pending()) == 1  # the intent is kept: nothing else deleted
    assert sum((out / i["from"]).exists() for i in backend.pending()[0]["entry"]["note"]["manifest"]) == 2
    lost.write_bytes(saved)
    backend.resume()
    assert backend.pending() == [] and not list(out.glob("checkpoint-[28]*")) and (out / "checkpoint-16").is_dir()


def test_lightning_files_to_another_folder_through_the_cli(tmp_path: Path) -> None:
    root, archive = lightning(tmp_path), tmp_path / "elsewhere"
    before, resumes = tree(root), {run: lightning_last(root, run) for run in (V0, V1)}
    cli = _cli(tmp_path / "home")
    done = cli("prune", str(root), "--keep-last", "1", "--archive", str(archive), "--reason", "disk", "--yes")
    assert done["checkpoints"] == 4 and done["space"]["returned_bytes"] > 0
    gone = [f"{run}/checkpoints/{name}" for run, name in ((V0, "epoch=0-step=5.ckpt"), (V1, "epoch=1-step=12.ckpt"))]
    for rel in gone:
        assert not (root / rel).exists()
        assert hashlib.sha256((archive / root.name / done["action_id"] / rel).read_bytes()).hexdigest() == before[rel]
    assert {run: lightning_last(root, run) for run in (V0, V1)} == resumes
    cli("undo", str(root), done["action_id"], "--reason", "back", "--yes")
    assert tree(root) == before and (archive / root.name / done["action_id"] / gone[0]).is_file()


@pytest.mark.s3
def test_trainer_prune_to_s3_and_undo_byte_for_byte(s3_env: dict[str, str], tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    import fsspec
    import s3fs

    # fsspec read FSSPEC_S3_ENDPOINT_URL when it was imported; in this process set its config directly
    monkeypatch.setitem(fsspec.config.conf, "s3", {"endpoint_url": s3_env["FSSPEC_S3_ENDPOINT_URL"]})
    fs = s3fs.S3FileSystem(endpoint_url=s3_env["FSSPEC_S3_ENDPOINT_URL"], key="testing", secret="testing")
    bucket = f"lastgood-{uuid.uuid4().hex[:10]}"
    fs.mkdir(bucket)
    out = _copy(tmp_path)
    before = _tree(out)
    catalog, store = _open(tmp_path, str(out))
    secret = "s3cr3t-" + uuid.uuid4().hex
    plan = retention.plan_prune(catalog, store, Policy(last=1), archive=f"s3://{bucket}/archive")
    done = retention.apply_prune(catalog, store, plan, reason="to s3", operator="ana",
                                 archive_options={"key": "testing", "secret": secret})
    assert sorted(p.name for p in out.glob("checkpoint-*")) == ["checkpoint-16", "checkpoint-40"]
    fs.invalidate_cache()
    home = f"{bucket}/archive/out/{done.action_id}"
    copied = {p[len(home) + 1:]: hashlib.sha256(fs.cat_file(p)).hexdigest() for p in fs.find(home)}
    assert {k: v for k, v in copied.items() if k.startswith("checkpoint-")} == \
        {k: v for k, v in before.items() if k.split("/")[0] in PRUNED}
    assert "manifest.json" in copied
    written = b"".join(p.read_bytes() for p in (out / ".lastgood").rglob("*") if p.is_file())
    assert secret.encode() not in written and secret.encode() not in fs.cat_file(f"{home}/manifest.json")
    store = index_store(catalog, str(out), check="none").store
    undo = retention.plan_undo_prune(catalog, store, done.action_id)
    assert undo.conflicts == []
    retention.apply_undo_prune(catalog, store, undo, reason="back", operator="ana")
    assert _tree(out) == before
    fs.invalidate_cache()
    assert any(p.endswith(".json") and "restored-" in p for p in fs.find(home))
    shutil.rmtree(out / ".lastgood", ignore_errors=True)


@pytest.mark.s3
def test_on_s3_a_killed_prune_waits_for_an_unreachable_archive_then_rolls_forward(
        s3_env: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import fsspec
    import s3fs

    from tests.fixtures_s3 import free_port

    monkeypatch.setitem(fsspec.config.conf, "s3", {"endpoint_url": s3_env["FSSPEC_S3_ENDPOINT_URL"]})
    fs = s3fs.S3FileSystem(endpoint_url=s3_env["FSSPEC_S3_ENDPOINT_URL"], key="testing", secret="testing")
    bucket = f"lastgood-{uuid.uuid4().hex[:10]}"
    fs.mkdir(bucket)
    out = _copy(tmp_path)
    # a fresh process (fork and s3fs's event loop thread do not mix), killed after its first copy
    killed = subprocess.run([sys.executable, "-c", KILLED_PRUNE, str(out), str(tmp_path / "child"), f"s3://{bucket}/a"],
                            capture_output=True, text=True, timeout=120)
    assert killed.returncode == 9, killed.stderr
    assert len(TrainerRetention(str(out)).pending()) == 1
    assert sorted(p.name for p in out.glob("checkpoint-*")) == sorted([*PRUNED, "checkpoint-16", "checkpoint-40"])
    monkeypatch.setenv("AWS_MAX_ATTEMPTS", "1")  # a refused connection fails at once
    monkeypatch.setitem(fsspec.config.conf, "s3", {"endpoint_url": f"http://127.0.0.1:{free_port()}"})
    backend = TrainerRetention(str(out))
    with pytest.raises(ReaderError, match=f"the archive s3://{bucket}/a cannot be reached .* interrupted intent"):
        backend.resume()
    assert len(backend.pending()) == 1 and len(list(out.glob("checkpoint-*"))) == 5  # nothing lost
    monkeypatch.setitem(fsspec.config.conf, "s3", {"endpoint_url": s3_env["FSSPEC_S3_ENDPOINT_URL"]})
    assert [r["kind"] for r in TrainerRetention(str(out)).resume()] == ["prune"]
    assert sorted(p.name for p in out.glob("checkpoint-*")) == ["checkpoint-16", "checkpoint-40"]
    fs.invalidate_cache()
    assert {p.split("/")[4] for p in fs.find(f"{bucket}/a/out") if "/checkpoint-" in p} == PRUNED


KILLED_PRUNE = """
import os, sys
from lastgood import retention
from lastgood.index.catalog import Catalog
from lastgood.readers import journal as jr
from lastgood.readers.hf_trainer.retention import TrainerRetention
from lastgood.retention.policy import Policy
from lastgood.stores import index_store
from tests.test_retention_training_archive import _entry
out, home, archive = sys.argv[1:4]
catalog = Catalog(os.path.join(home, "index.duckdb"))
store = index_store(catalog, out, check="none").store
forget = retention.plan_prune(catalog, store, Policy(last=1), archive=archive).forget_table(catalog)
backend = TrainerRetention(out)
backend.recovery._delete = lambda path: os._exit(9)  # killed after the first copy, before its delete
backend.prune(jr.PruneRequest(_entry(), forget, archive))
"""
