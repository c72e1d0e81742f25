"""A restore's dry run lists what it will do to a training folder's files, and writes nothing."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.helpers import lastgood_cli, tree_digest

SAMPLES = Path(__file__).resolve().parent.parent / "sample_data"


@pytest.mark.parametrize(("folder", "target", "moved"), [
    ("training/hf_trainer", "checkpoint-16", ["checkpoint-24", "checkpoint-32", "checkpoint-40"]),
    ("training/dcp", "step-10", ["step-20", "step-30"]),
])
def test_a_training_restore_dry_run_lists_every_folder_it_moves(tmp_path: Path, folder: str, target: str,
                                                                moved: list[str]) -> None:
    store = tmp_path / "store"
    shutil.copytree(SAMPLES / folder, store)
    before = tree_digest(store)
    out = lastgood_cli("restore", str(store), target, "--dry-run", "--format", "json", home=tmp_path / "home")
    assert out.returncode == 0, out.stderr
    operations = json.loads(out.stdout)["operations"]
    assert sorted(op.split()[1] for op in operations) == moved
    assert all(op.startswith("move ") and ".lastgood/quarantine/" in op for op in operations)
    table = lastgood_cli("restore", str(store), target, "--dry-run", home=tmp_path / "home")
    assert f"files:         {len(moved)} operation(s)" in table.stdout
    assert tree_digest(store) == before  # a dry run writes nothing


def test_a_native_restore_has_no_file_operations(tmp_path: Path) -> None:
    store = tmp_path / "agents"
    shutil.copytree(SAMPLES / "agents", store)
    listed = lastgood_cli("ls", str(store), "--format", "json", home=tmp_path / "home")
    first = next(r for r in json.loads(listed.stdout) if r["status"] == "ok")
    out = lastgood_cli("restore", str(store), first["checkpoint_id"], "--dry-run", "--format", "json",
                       home=tmp_path / "home")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["operations"] == []
