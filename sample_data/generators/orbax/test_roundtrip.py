"""Orbax round trips: ``lastgood rollback/restore/undo`` on copies of ``sample_data/training/orbax``, then
Orbax itself (the ``orbax`` virtualenv: orbax-checkpoint 0.12.8, jax 0.10.2) says what training resumes
from: ``CheckpointManager(dir).latest_step()`` (``readback.py orbax``) and a real ``restore`` of it.
Later step folders are moved aside into ``.lastgood/quarantine/<action>/``, which Orbax does not see as
a step; undo moves them back.

    .venv/bin/python -m pytest sample_data/generators/orbax/test_roundtrip.py
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[3]
ORBAX = ROOT / "sample_data" / "training" / "orbax"

RESTORE = r"""
import json, sys, warnings
warnings.filterwarnings("ignore")
import orbax.checkpoint as ocp
with ocp.CheckpointManager(sys.argv[1]) as manager:
    step = manager.latest_step()
    restored = manager.restore(step, args=ocp.args.Composite(metadata=ocp.args.JsonRestore(),
                                                             state=ocp.args.StandardRestore()))
print(json.dumps({"latest_step": step, "metadata": restored["metadata"], "state_step": int(restored["state"]["step"]),
                  "count": int(restored["state"]["opt_state"]["count"])}))
"""


def _copy(tmp_path: Path) -> Path:
    folder = tmp_path / "orbax"
    shutil.copytree(ORBAX, folder)
    return folder


def _act(lastgood: Callable[..., Any], *args: str) -> dict[str, Any]:
    done = lastgood(*args, "--yes", "--reason", "round trip", "--format", "json")
    assert isinstance(done, dict) and (done["check"] is None or done["check"]["ok"]), done
    return done


def _restored(python: Path, store: Path) -> dict[str, Any]:
    done = subprocess.run([str(python), "-c", RESTORE, str(store)], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def _tree(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file() and ".lastgood" not in p.parts}


def test_rollback_makes_latest_step_the_target_and_undo_brings_the_steps_back(
        tmp_path: Path, readback: Callable[..., Any], lastgood: Callable[..., Any],
        framework_python: Callable[[str], Path]) -> None:
    python = framework_python("orbax")
    store = _copy(tmp_path)
    tree = _tree(store)
    assert readback("training", "orbax", str(store))["latest_step"] == 40
    rolled = _act(lastgood, "rollback", str(store), "orbax", "--to", "20")
    assert sorted(rolled["superseded"]) == ["30", "40"]
    after = readback("training", "orbax", str(store))
    assert after["latest_step"] == 20 and after["all_steps"] == [10, 20]
    restored = _restored(python, store)
    assert restored["latest_step"] == 20 and restored["metadata"]["step"] == 20
    assert restored["state_step"] == 20 and restored["count"] == 20
    _act(lastgood, "undo", str(store), rolled["action_id"])
    back = readback("training", "orbax", str(store))
    assert back["latest_step"] == 40 and back["all_steps"] == [10, 20, 30, 40]
    assert _restored(python, store)["state_step"] == 40
    assert _tree(store) == tree


def test_an_uncommitted_latest_step_is_flagged_and_rolled_back(
        tmp_path: Path, readback: Callable[..., Any], lastgood: Callable[..., Any]) -> None:
    store = _copy(tmp_path)
    (store / "40" / "commit_success.txt").unlink()
    assert readback("training", "orbax", str(store))["latest_step"] == 40  # Orbax trusts it
    listed = {r["checkpoint_id"]: r for r in lastgood("ls", str(store), "--format", "json")}
    assert listed["40"]["status"] == "incomplete"
    restored = _act(lastgood, "restore", str(store), "30")
    assert readback("training", "orbax", str(store))["latest_step"] == 30
    assert (store / ".lastgood" / "quarantine" / restored["action_id"] / "40").is_dir()
    # undoing it would make the uncommitted step the head again: refused, nothing moves
    refused = lastgood("undo", str(store), restored["action_id"], "--yes", "--reason", "x", check=False)
    assert refused.returncode == 2 and "40 is incomplete" in refused.stderr
    assert readback("training", "orbax", str(store))["latest_step"] == 30
    journal = lastgood("journal", str(store), "--format", "json")
    assert journal["chain_ok"] and [a["action"] for a in journal["actions"]] == ["restore"]
