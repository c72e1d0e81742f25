"""Prune and undo on a real Hugging Face Trainer output folder (sample_data/training/hf_trainer):
checkpoint folders renamed into ``.lastgood/archive/<action>/`` and back, byte for byte; the head
and ``best_model_checkpoint`` kept; a folder written during the prune untouched; a prune killed
after its first rename rolled forward by the next action."""

from __future__ import annotations

import hashlib
import json
import re
import shutil
from pathlib import Path
from typing import Any

import pytest

from lastgood import retention
from lastgood.errors import ConflictError
from lastgood.index import queries
from lastgood.index.catalog import Catalog
from lastgood.readers import journal as jr
from lastgood.readers.base import Capability, capabilities
from lastgood.readers.hf_trainer.reader import HfTrainerReader
from lastgood.readers.hf_trainer.retention import ARCHIVE, TrainerRetention
from lastgood.retention.policy import Policy
from lastgood.stores import index_store
from tests.helpers import lastgood_cli
from tests.training_stores import prune_killed_after_first_op, stamp_in_order

SAMPLE = Path(__file__).resolve().parent.parent / "sample_data" / "training" / "hf_trainer"
PRUNED = {"checkpoint-8", "checkpoint-24", "checkpoint-32"}  # keep-last 1: the head 40 and the best 16 stay
CHECKPOINT = re.compile(r"^checkpoint-(\d+)$")  # transformers.trainer_utils.PREFIX_CHECKPOINT_DIR


def _copy(tmp_path: Path) -> Path:
    """The sample's checkpoints, their files' times in step order as the Trainer wrote them (a git
    checkout gives them all the checkout's time, in any order)."""
    out = tmp_path / "out"
    shutil.copytree(SAMPLE, out)
    stamp_in_order(out, "checkpoint-*")
    return out


def last_checkpoint(folder: Path) -> str | None:
    """``transformers.trainer_utils.get_last_checkpoint``'s rule: the highest ``checkpoint-N`` child."""
    found = [(int(m[1]), p.name) for p in folder.iterdir() if p.is_dir() and (m := CHECKPOINT.match(p.name))]
    return max(found)[1] if found else None


def _tree(folder: Path) -> dict[str, str]:
    """sha256 of every file outside ``.lastgood``."""
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file() and ".lastgood" not in p.parts}


def _open(tmp_path: Path, url: str) -> tuple[Catalog, Any]:
    catalog = Catalog(tmp_path / "home" / "index.duckdb")
    return catalog, index_store(catalog, url).store


def _listed(catalog: Catalog, store: Any) -> set[str]:
    return {r["checkpoint_id"] for r in queries.list_checkpoints(catalog, store.store_id)}


def test_the_hf_trainer_reader_offers_retention(tmp_path: Path) -> None:
    assert Capability.RETENTION in capabilities(HfTrainerReader(str(SAMPLE)))
    assert TrainerRetention(str(SAMPLE)).best_checkpoints() == {"hf_trainer": "checkpoint-16"}


def test_prune_keeps_head_and_best_then_undo_is_byte_identical(tmp_path: Path) -> None:
    out = _copy(tmp_path)
    before = _tree(out)
    catalog, store = _open(tmp_path, str(out))
    plan = retention.plan_prune(catalog, store, Policy(last=1))
    assert plan.archive == f"{out}/{ARCHIVE}"
    assert {r["checkpoint_id"] for r in plan.checkpoints(keep=False)} == PRUNED
    why = {r["checkpoint_id"]: r["reasons"] for r in plan.checkpoints(keep=True)}
    assert "head" in why["checkpoint-40"] and any("best-model-checkpoint" in r for r in why["checkpoint-16"])
    result = retention.apply_prune(catalog, store, plan, reason="tidy", operator="ana")
    assert result.checkpoints == 3 and result.bytes == plan.summary["bytes_forget"]
    assert sorted(p.name for p in out.glob("checkpoint-*")) == ["checkpoint-16", "checkpoint-40"]
    assert last_checkpoint(out) == "checkpoint-40"
    moved = out / ARCHIVE / result.action_id
    assert sorted(p.name for p in moved.iterdir()) == ["checkpoint-24", "checkpoint-32", "checkpoint-8"]
    assert result.space["returned_bytes"] == 0 and "no space is freed" in result.space["notes"][0]
    store = index_store(catalog, str(out), check="none").store
    assert _listed(catalog, store) == {"checkpoint-16", "checkpoint-40"}
    entries = store.reader.recovery().journal_entries()
    assert jr.verify_chain(entries).ok and entries[-1]["action"] == "prune"
    assert {i["checkpoint_id"] for i in entries[-1]["note"]["manifest"]} == PRUNED
    undo = retention.plan_undo_prune(catalog, store, result.action_id)
    assert undo.conflicts == []
    back = retention.apply_undo_prune(catalog, store, undo, reason="need them", operator="ana")
    assert back.checkpoints == 3 and _tree(out) == before and not moved.exists()
    store = index_store(catalog, str(out), check="none").store
    assert len(_listed(catalog, store)) == 5
    entries = store.reader.recovery().journal_entries()
    assert jr.verify_chain(entries).ok and [e["action"] for e in entries] == ["prune", "undo"]


def test_a_folder_written_during_the_prune_is_not_touched(tmp_path: Path) -> None:
    out = _copy(tmp_path)
    catalog, store = _open(tmp_path, str(out))
    plan = retention.plan_prune(catalog, store, Policy(last=1))
    shutil.copytree(out / "checkpoint-40", out / "checkpoint-48")  # the Trainer saves meanwhile
    (out / "checkpoint-8" / "extra.bin").write_bytes(b"x" * 10)  # and a planned folder changes
    result = retention.apply_prune(catalog, store, plan, reason="tidy", operator="ana")
    assert [s["checkpoint_id"] for s in result.skipped] == ["checkpoint-8"]
    assert "written to since the plan" in result.skipped[0]["reason"]
    assert (out / "checkpoint-8" / "extra.bin").exists() and (out / "checkpoint-48").is_dir()
    assert last_checkpoint(out) == "checkpoint-48" and result.checkpoints == 2


def test_a_conflicting_undo_is_refused(tmp_path: Path) -> None:
    out = _copy(tmp_path)
    catalog, store = _open(tmp_path, str(out))
    result = retention.apply_prune(catalog, store, retention.plan_prune(catalog, store, Policy(last=1)),
                                   reason="tidy", operator="ana")
    (out / "checkpoint-24").mkdir()  # the name is taken again
    undo = retention.plan_undo_prune(catalog, store, result.action_id)
    assert any("checkpoint-24 exists again" in c for c in undo.conflicts)
    with pytest.raises(ConflictError):
        retention.apply_undo_prune(catalog, store, undo, reason="back", operator="ana")
    assert not (out / "checkpoint-8").exists()
    forced = retention.plan_undo_prune(catalog, store, result.action_id, force=True)
    back = retention.apply_undo_prune(catalog, store, forced, reason="back", operator="ana")
    assert back.checkpoints == 2 and [s["checkpoint_id"] for s in back.skipped] == ["checkpoint-24"]
    assert (out / ARCHIVE / result.action_id / "checkpoint-24" / "model.safetensors").is_file()


def test_a_prune_killed_after_its_first_rename_is_rolled_forward(tmp_path: Path) -> None:
    out = _copy(tmp_path)
    catalog, store = _open(tmp_path, str(out))
    plan = retention.plan_prune(catalog, store, Policy(last=1))
    entry = prune_killed_after_first_op(lambda: TrainerRetention(str(out)), plan.forget_table(catalog),
                                        plan.archive)
    backend = TrainerRetention(str(out))
    lock = backend.pending()
    assert len(lock) == 1 and lock[0]["retention"] == "prune" and len(lock[0]["ops"]) == 3
    archived = out / ARCHIVE / entry["id"]
    assert len(list(archived.iterdir())) == 1  # each folder is in the store or the archive, the intent says which
    assert backend.resume() == [{"action_id": entry["id"], "kind": "prune"}]
    assert backend.pending() == [] and len(list(archived.iterdir())) == 3
    entries = backend.recovery.journal_entries()
    assert jr.verify_chain(entries).ok and entries[-1]["id"] == entry["id"]
    assert last_checkpoint(out) == "checkpoint-40"


def test_cli_dry_run_apply_ls_and_undo(tmp_path: Path) -> None:
    out, home = _copy(tmp_path), tmp_path / "home"

    def cli(*args: str) -> Any:
        done = lastgood_cli(*args, "--format", "json", home=home, env={"LASTGOOD_OPERATOR": "t"})
        assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
        return json.loads(done.stdout)

    plan = cli("prune", str(out), "--keep-last", "1", "--dry-run")
    assert plan["dry_run"] and {r["checkpoint_id"] for r in plan["forget"]} == PRUNED
    done = cli("prune", str(out), "--keep-last", "1", "--reason", "tidy", "--yes")
    assert {r["checkpoint_id"] for r in cli("ls", str(out))} == {"checkpoint-16", "checkpoint-40"}
    cli("undo", str(out), done["action_id"], "--reason", "back", "--yes")
    assert len(cli("ls", str(out))) == 5 and last_checkpoint(out) == "checkpoint-40"
