"""Training round trips: ``lastgood restore/rollback/undo`` on copies of ``sample_data/training``, then the
frameworks' own resume resolution (``readback.py`` in the ``training`` virtualenv) says what training would
resume from:

- Hugging Face Trainer: ``transformers.trainer_utils.get_last_checkpoint(output_dir)`` — what
  ``Trainer.train(resume_from_checkpoint=True)`` resumes from (checkpoints moved aside into
  ``.lastgood/quarantine/`` are not seen);
- DeepSpeed: ``engine.load_checkpoint(dir, tag=None)``'s tag (``latest``, read and stripped) and the files
  it would open for it.

    .venv/bin/python -m pytest sample_data/generators/training/test_roundtrip.py
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[3]
TRAINING = ROOT / "sample_data" / "training"


def _copy(tmp_path: Path, name: str) -> str:
    folder = tmp_path / name
    shutil.copytree(TRAINING / name, folder)
    return str(folder)


def _act(lastgood: Callable[..., Any], *args: str) -> dict[str, Any]:
    done = lastgood(*args, "--yes", "--reason", "round trip", "--format", "json")
    assert isinstance(done, dict) and (done["check"] is None or done["check"]["ok"]), done
    return done


# ---- Hugging Face Trainer --------------------------------------------------------------------------


def test_trainer_rollback_makes_get_last_checkpoint_pick_the_target_and_undo_restores_it(
        tmp_path: Path, readback: Callable[..., Any], lastgood: Callable[..., Any]) -> None:
    store = _copy(tmp_path, "hf_trainer")
    assert readback("training", "hf_trainer", store)["resume_from"] == "checkpoint-40"
    rolled = _act(lastgood, "rollback", store, "hf_trainer", "--to", "checkpoint-24")
    assert sorted(rolled["superseded"]) == ["checkpoint-32", "checkpoint-40"]
    after = readback("training", "hf_trainer", store)
    assert after["resume_from"] == "checkpoint-24"
    assert after["trainer_state"]["global_step"] == 24
    assert after["checkpoints_sorted"] == ["checkpoint-8", "checkpoint-16", "checkpoint-24"]
    _act(lastgood, "undo", store, rolled["action_id"])
    back = readback("training", "hf_trainer", store)
    assert back["resume_from"] == "checkpoint-40" and back["trainer_state"]["global_step"] == 40


def test_trainer_restore_of_the_best_checkpoint_then_undo(
        tmp_path: Path, readback: Callable[..., Any], lastgood: Callable[..., Any]) -> None:
    store = _copy(tmp_path, "hf_trainer")
    restored = _act(lastgood, "restore", store, "checkpoint-16")
    after = readback("training", "hf_trainer", store)
    assert after["resume_from"] == "checkpoint-16"
    assert after["trainer_state"]["best_model_checkpoint"] == "hf_trainer/checkpoint-16"
    _act(lastgood, "undo", store, restored["action_id"])
    assert readback("training", "hf_trainer", store)["resume_from"] == "checkpoint-40"
    journal = lastgood("journal", store, "--format", "json")
    assert journal["chain_ok"] and len(journal["actions"]) == 2


def test_trainer_dry_run_lists_the_moves_and_changes_nothing(
        tmp_path: Path, readback: Callable[..., Any], lastgood: Callable[..., Any]) -> None:
    store = _copy(tmp_path, "hf_trainer")
    plan = lastgood("rollback", store, "hf_trainer", "--to", "checkpoint-8", "--dry-run", "--format", "json")
    assert plan["dry_run"] and sorted(plan["superseded"]) == ["checkpoint-16", "checkpoint-24",
                                                              "checkpoint-32", "checkpoint-40"]
    assert readback("training", "hf_trainer", store)["resume_from"] == "checkpoint-40"
    assert not (Path(store) / ".lastgood").exists()


# ---- DeepSpeed ------------------------------------------------------------------------------------


def test_deepspeed_rollback_points_latest_at_the_target_and_undo_points_it_back(
        tmp_path: Path, readback: Callable[..., Any], lastgood: Callable[..., Any]) -> None:
    store = _copy(tmp_path, "deepspeed")
    assert readback("training", "deepspeed", store)["resume_tag"] == "global_step15"
    rolled = _act(lastgood, "rollback", store, "deepspeed", "--to", "global_step10")
    after = readback("training", "deepspeed", store)
    assert after["resume_tag"] == "global_step10" and after["latest_file_raw"] == "global_step10"
    assert after["model_state_files"] == ["global_step10/mp_rank_00_model_states.pt"]
    assert all(z["exists"] for z in after["zero_optim_files"])
    assert after["model_states"]["global_steps"] == 10 and after["model_states"]["client_state"]["my_step"] == 10
    _act(lastgood, "undo", store, rolled["action_id"])
    back = readback("training", "deepspeed", store)
    assert back["resume_tag"] == "global_step15" and back["model_states"]["global_steps"] == 15


def test_deepspeed_restore_then_undo(tmp_path: Path, readback: Callable[..., Any],
                                     lastgood: Callable[..., Any]) -> None:
    store = _copy(tmp_path, "deepspeed")
    restored = _act(lastgood, "restore", store, "global_step5")
    assert readback("training", "deepspeed", store)["resume_tag"] == "global_step5"
    _act(lastgood, "undo", store, restored["action_id"])
    assert readback("training", "deepspeed", store)["resume_tag"] == "global_step15"
