"""The deepspeed reader on a real DeepSpeed save folder (sample_data/training/deepspeed, written by
engine.save_checkpoint on CPU): the kit, listing, the latest pointer, ZeRO files, pickle allowlist,
recovery (rewrite `latest`) read back the way DeepSpeed resolves it."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from lastgood.checks import Check
from lastgood.readers.base import Status, TensorSummary, as_table, record_from_row
from lastgood.readers.testing import Damage, ReaderConformance

from tests.training_stores import (
    CANARY,
    TRAINING,
    copy_tree,
    cut_before_central_directory,
    drop_canary,
    flip_byte_in_zip_storage,
    set_mtime,
    stamp_in_order,
)

SOURCE = TRAINING / "deepspeed"


def make_saves(tmp: Path) -> Path:
    """Two save folders: run-a (global_step5/10/15, latest → 15) and run-b (global_step5 and a 10 of its own
    named global_step11, latest → 11; the kit names checkpoints by bare id, so run-a's must be unique)."""
    root = tmp / "saves"
    run_a = copy_tree(SOURCE, root / "run-a")
    run_b = copy_tree(SOURCE, root / "run-b", keep={"global_step5", "global_step10", "latest", "zero_to_fp32.py"})
    (run_b / "global_step10").rename(run_b / "global_step11")
    (run_b / "latest").write_text("global_step11")
    stamp_in_order(run_a, "global_step*")
    stamp_in_order(run_b, "global_step*")
    return root


def resolve_tag(folder: Path) -> str | None:
    """DeepSpeedEngine.load_checkpoint(dir, tag=None)'s own resolution (readback.py mirrors it)."""
    latest = folder / "latest"
    return latest.read_text().strip() if latest.is_file() else None


def tag(url: str, name: str, run: str = "run-a") -> Path:
    return Path(url) / run / name


class TestDeepSpeedKit(ReaderConformance):
    reader_name = "deepspeed"

    def make_store(self, tmp: Path) -> str:
        return str(make_saves(tmp))

    def append(self, url: str) -> int:
        run = Path(url) / "run-a"
        shutil.copytree(run / "global_step15", run / "global_step20")
        (run / "latest").write_text("global_step20")
        set_mtime(run / "global_step20", 1_800_000_000)
        return 1

    def damages(self) -> list[Damage]:
        return [
            Damage("latest names a missing tag", lambda url: (Path(url) / "run-a" / "latest").write_text("global_step99"),
                   {Check.POINTER_DANGLING}, "structure"),
            Damage("a tag folder without model states (an unfinished save)",
                   lambda url: (tag(url, "global_step10") / "mp_rank_00_model_states.pt").unlink(),
                   {Check.INCOMPLETE}, "structure"),
            Damage("a ZeRO optimizer file missing",
                   lambda url: (tag(url, "global_step5") / "zero_pp_rank_0_mp_rank_00_optim_states.pt").unlink(),
                   {Check.INCOMPLETE}, "structure"),
            Damage("model states cut before the zip central directory",
                   lambda url: cut_before_central_directory(tag(url, "global_step5", "run-b") / "mp_rank_00_model_states.pt"),
                   {Check.TORCH_FILE}, "structure"),
            Damage("a malicious optimizer file",
                   lambda url: drop_canary(tag(url, "global_step11", "run-b") / "zero_pp_rank_0_mp_rank_00_optim_states.pt"),
                   {Check.UNSAFE_PICKLE}, "structure"),
            Damage("a flipped bit in the fp32 master weights",
                   lambda url: flip_byte_in_zip_storage(tag(url, "global_step15") / "zero_pp_rank_0_mp_rank_00_optim_states.pt"),
                   {Check.CRC_MISMATCH}),
        ]


def _open(url: str):
    from lastgood.readers.registry import open_reader

    return open_reader(url, "deepspeed")


def _records(reader) -> list:
    return [record_from_row(r) for b in reader.scan().checkpoints for r in as_table(b).to_pylist()]


def test_tags_steps_and_the_latest_pointer(tmp_path: Path) -> None:
    url = str(make_saves(tmp_path))
    with _open(url) as reader:
        scan = reader.scan()
        rows = [r for b in scan.checkpoints for r in as_table(b).to_pylist()]
        run_a = [(r["checkpoint_id"], r["step"], r["parent_id"]) for r in rows if r["run_id"] == "run-a"]
        assert run_a == [("global_step5", 5, None), ("global_step10", 10, "global_step5"),
                         ("global_step15", 15, "global_step10")]
        assert {(h.run_id, h.checkpoint_id) for h in scan.heads} == {("run-a", "global_step15"),
                                                                    ("run-b", "global_step11")}
        assert scan.findings == []


def test_the_allowlist_covers_zero_classes_and_the_state_names_the_scripts(tmp_path: Path) -> None:
    url = str(make_saves(tmp_path))
    with _open(url) as reader:
        record = next(r for r in _records(reader) if r.run_id == "run-a" and r.checkpoint_id == "global_step15")
        assert list(reader.check_checkpoints([record])) == []
        state = reader.load_state(record)
    assert state["model_states"]["global_steps"] == 15 and state["model_states"]["my_step"] == 15
    assert state["optimizer"]["zero_stage"] == 1
    assert state["optimizer"]["loss_scaler"]["__class__"] == "deepspeed.runtime.fp16.loss_scaler.LossScaler"
    assert "zero_to_fp32.py" in state["recovery_scripts"]
    assert state["tensors"]["fc1.weight"] == {"dtype": "F32", "shape": [8, 4]}


def test_data_depth_summaries_come_from_the_module_state_dict(tmp_path: Path) -> None:
    url = str(make_saves(tmp_path))
    with _open(url) as reader:
        record = next(r for r in _records(reader) if r.run_id == "run-a" and r.checkpoint_id == "global_step10")
        out = list(reader.check_checkpoints([record], read_data=True))
        entries = reader.tensors(record)
        raw = b"".join(bytes(c) for c in reader.read_tensor(record, entries[0], 64))
    summaries = {s.name for s in out if isinstance(s, TensorSummary)}
    assert summaries == {e.name for e in entries} and "fc1.weight" in summaries
    assert [f for f in out if not isinstance(f, TensorSummary)] == []
    assert len(raw) == entries[0].nbytes


def test_a_canary_among_the_optimizer_files_never_runs(tmp_path: Path) -> None:
    CANARY.unlink(missing_ok=True)
    url = str(make_saves(tmp_path))
    drop_canary(tag(url, "global_step5") / "zero_pp_rank_0_mp_rank_00_optim_states.pt")
    with _open(url) as reader:
        record = next(r for r in _records(reader) if r.run_id == "run-a" and r.checkpoint_id == "global_step5")
        found = [f for f in reader.check_checkpoints([record], read_data=True) if not isinstance(f, TensorSummary)]
        state = reader.load_state(record)
    assert any(f.check == Check.UNSAFE_PICKLE and "would import os.system" in f.message for f in found)
    assert state["optimizer"]["refused"] == "would import os.system"
    assert not CANARY.exists()


def test_an_unfinished_tag_named_by_latest_is_an_error(tmp_path: Path) -> None:
    url = str(make_saves(tmp_path))
    (tag(url, "global_step15") / "mp_rank_00_model_states.pt").unlink()
    with _open(url) as reader:
        records = {r.checkpoint_id: r for r in _records(reader) if r.run_id == "run-a"}
        assert records["global_step15"].status == Status.INCOMPLETE
        found = list(reader.check_checkpoints([records["global_step15"]]))
    assert any("latest names it" in f.message for f in found)


def test_rollback_rewrites_latest_and_undo_puts_it_back(tmp_path: Path) -> None:
    from lastgood.readers import journal as jr

    url = str(make_saves(tmp_path))
    with _open(url) as reader:
        backend = reader.recovery()
        entry = {"id": jr.new_action_id(), "time": jr.now_iso(), "operator": "t", "action": "rollback",
                 "reason": "r", "run_id": "run-a", "namespace": "", "target": "global_step5",
                 "previous_head": "global_step15", "superseded": [], "undo_of": None, "plan_digest": None,
                 "marks": jr.empty_marks(), "note": {}}
        sealed = backend.commit(jr.Change("run-a", "", "global_step15", "global_step5", entry))
        assert (Path(url) / "run-a" / "latest").read_bytes() == b"global_step5"  # no newline, as DeepSpeed writes
        assert resolve_tag(Path(url) / "run-a") == "global_step5" == backend.head("run-a")
        assert (tag(url, "global_step15") / "mp_rank_00_model_states.pt").exists()  # nothing moved
        undo = {**entry, "id": jr.new_action_id(), "action": "undo", "undo_of": sealed["id"],
                "previous_head": "global_step5"}
        backend.commit(jr.Change("run-a", "", "global_step5", "global_step15", undo))
        assert resolve_tag(Path(url) / "run-a") == "global_step15"
        assert jr.verify_chain(backend.journal_entries()).ok
        assert json.loads((Path(url) / ".lastgood" / "journal" / "entries" / "0000000001.json").read_text())["new_head"] \
            == "global_step5"
