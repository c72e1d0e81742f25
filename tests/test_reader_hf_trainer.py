"""The hf-trainer reader on real Trainer output (sample_data/training/hf_trainer, written by
transformers.Trainer): the kit, listing, states, checks at both depths, recovery read back with
the reader (the framework's own get_last_checkpoint runs in the round-trip suite)."""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import pytest
from lastgood.checks import Check
from lastgood.readers.base import Capability, Status, TensorSummary, as_table, capabilities, record_from_row
from lastgood.readers.testing import Damage, ReaderConformance

from tests.helpers import lastgood_cli
from tests.training_stores import (
    CANARY,
    SECRET_TOKEN,
    TRAINING,
    copy_tree,
    cut_before_central_directory,
    drop_canary,
    flip_byte_in_zip_storage,
    lie_about_header_length,
    set_mtime,
    stamp_in_order,
    torch_zip,
    training_args_pickle,
    truncate_half,
    write_into_tensor,
)

SOURCE = TRAINING / "hf_trainer"


def make_outputs(tmp: Path) -> Path:
    """A sweep folder: run-a (the fixture: checkpoint-8 … 40) and run-b (its first two saves); run-a's
    checkpoint-16 has a training_args.bin whose hub_token is secret-shaped."""
    root = tmp / "outputs"
    run_a = copy_tree(SOURCE, root / "run-a")
    run_b = copy_tree(SOURCE, root / "run-b", keep={"checkpoint-8", "checkpoint-16", "config.json"})
    args = training_args_pickle({"output_dir": "run-a", "learning_rate": 0.03, "hub_token": SECRET_TOKEN})
    (run_a / "checkpoint-16" / "training_args.bin").write_bytes(torch_zip("training_args", args))
    stamp_in_order(run_a, "checkpoint-*")
    stamp_in_order(run_b, "checkpoint-*")
    return root


def add_checkpoint(run: Path, step: int) -> Path:
    """What Trainer writes at the next save: a new checkpoint-N with its trainer_state."""
    newest = max(run.glob("checkpoint-*"), key=lambda p: int(p.name.split("-")[1]))
    target = run / f"checkpoint-{step}"
    shutil.copytree(newest, target)
    state = json.loads((target / "trainer_state.json").read_text())
    state["global_step"], state["max_steps"] = step, step + 40
    state["log_history"].append({"epoch": 3.0, "loss": 0.7, "learning_rate": 0.001, "grad_norm": 1.0, "step": step})
    state["stateful_callbacks"]["TrainerControl"]["args"]["should_training_stop"] = False
    (target / "trainer_state.json").write_text(json.dumps(state, indent=2, sort_keys=True))
    set_mtime(target, time.time() + step)
    return target


def checkpoint(url: str, name: str, run: str = "run-a") -> Path:
    return Path(url) / run / name


class TestHfTrainerKit(ReaderConformance):
    reader_name = "hf-trainer"
    secret = SECRET_TOKEN

    def make_store(self, tmp: Path) -> str:
        return str(make_outputs(tmp))

    def append(self, url: str) -> int:
        add_checkpoint(Path(url) / "run-a", 48)
        return 1

    def damages(self) -> list[Damage]:
        return [
            Damage("a truncated model.safetensors",
                   lambda url: truncate_half(checkpoint(url, "checkpoint-16") / "model.safetensors"),
                   {Check.SAFETENSORS_HEADER}, "structure"),
            Damage("a header that lies about its length",
                   lambda url: lie_about_header_length(checkpoint(url, "checkpoint-24") / "model.safetensors"),
                   {Check.SAFETENSORS_HEADER}, "structure"),
            Damage("a zero-byte optimizer.pt",
                   lambda url: (checkpoint(url, "checkpoint-24") / "optimizer.pt").write_bytes(b""),
                   {Check.INCOMPLETE}, "structure"),
            Damage("an unfinished save (no trainer_state.json)",
                   lambda url: (checkpoint(url, "checkpoint-32") / "trainer_state.json").unlink(),
                   {Check.INCOMPLETE}, "structure"),
            Damage("optimizer.pt cut before its zip central directory",
                   lambda url: cut_before_central_directory(checkpoint(url, "checkpoint-8") / "optimizer.pt"),
                   {Check.TORCH_FILE}, "structure"),
            Damage("a malicious training_args.bin",
                   lambda url: drop_canary(checkpoint(url, "checkpoint-8", "run-b") / "training_args.bin"),
                   {Check.UNSAFE_PICKLE}, "structure"),
            Damage("NaN written into a weight",
                   lambda url: write_into_tensor(checkpoint(url, "checkpoint-40") / "model.safetensors"),
                   {Check.NON_FINITE}),
            Damage("a flipped bit in an optimizer tensor",
                   lambda url: flip_byte_in_zip_storage(checkpoint(url, "checkpoint-32") / "optimizer.pt"),
                   {Check.CRC_MISMATCH}),
        ]


# ---- listing and states -------------------------------------------------------------------------


def _open(url: str):
    from lastgood.readers.registry import open_reader

    return open_reader(url, "hf-trainer")


def _records(reader) -> list:
    return [record_from_row(r) for b in reader.scan().checkpoints for r in as_table(b).to_pylist()]


def test_the_listing_says_what_trainer_wrote(tmp_path: Path) -> None:
    url = str(make_outputs(tmp_path))
    with _open(url) as reader:
        scan = reader.scan()
        rows = [r for b in scan.checkpoints for r in as_table(b).to_pylist()]
        run_a = {r["checkpoint_id"]: r for r in rows if r["run_id"] == "run-a"}
        assert list(run_a) == ["checkpoint-8", "checkpoint-16", "checkpoint-24", "checkpoint-32", "checkpoint-40"]
        assert [run_a[c]["step"] for c in run_a] == [8, 16, 24, 32, 40]
        assert run_a["checkpoint-16"]["trigger"] == "best"  # best_model_checkpoint of the newest state
        assert run_a["checkpoint-40"]["trigger"] == "final"  # should_training_stop, step == max_steps
        assert run_a["checkpoint-24"]["trigger"] == "periodic"
        assert run_a["checkpoint-24"]["parent_id"] == "checkpoint-16"
        meta = json.loads(run_a["checkpoint-24"]["metadata"])
        assert meta["loss"] == pytest.approx(1.1710639) and meta["eval_loss"] == pytest.approx(2.6191774)
        assert meta["epoch"] == 1.5 and "learning_rate" in meta and "grad_norm" in meta
        assert {(h.run_id, h.checkpoint_id) for h in scan.heads} == {("run-a", "checkpoint-40"),
                                                                    ("run-b", "checkpoint-16")}
        assert capabilities(reader) >= {Capability.TENSORS, Capability.METRICS, Capability.CHECKS,
                                        Capability.RECOVERY}


def test_an_unfinished_save_is_incomplete_and_a_tmp_folder_is_reported(tmp_path: Path) -> None:
    url = str(make_outputs(tmp_path))
    (checkpoint(url, "checkpoint-40") / "trainer_state.json").unlink()
    (Path(url) / "run-a" / "tmp-checkpoint-48").mkdir()
    with _open(url) as reader:
        scan = reader.scan()
        rows = {r["checkpoint_id"]: r for b in scan.checkpoints for r in as_table(b).to_pylist()
                if r["run_id"] == "run-a"}
        assert rows["checkpoint-40"]["status"] == Status.INCOMPLETE
        assert any("tmp-checkpoint-48" in f.message for f in scan.findings)
        findings = list(reader.check_checkpoints([record_from_row(rows["checkpoint-40"])]))
    assert any(f.check == Check.INCOMPLETE and "resume_from_checkpoint=True would pick it" in f.message
               for f in findings)


def test_state_is_a_small_summary_and_metrics_are_the_log_history(tmp_path: Path) -> None:
    url = str(make_outputs(tmp_path))
    with _open(url) as reader:
        record = next(r for r in _records(reader) if r.run_id == "run-a" and r.checkpoint_id == "checkpoint-24")
        state = reader.load_state(record)
        assert set(state) == {"files", "trainer_state", "tensors", "config", "training_args"}
        assert "log_history" not in state["trainer_state"] and state["trainer_state"]["log_history_entries"] == 15
        assert state["tensors"]["lm_head.weight"] == {"dtype": "F32", "shape": [48, 16]}
        assert state["training_args"]["__class__"] == "transformers.training_args.TrainingArguments"
        assert state["training_args"]["learning_rate"] == 0.03
        assert len(json.dumps(state)) < 20_000
        points = reader.metrics("run-a")
        losses = [p for p in points if p.name == "loss"]
        assert [p.step for p in losses] == list(range(2, 41, 2)) and points[0].run_id == "run-a"
        assert {p.name for p in points} >= {"loss", "eval_loss", "learning_rate", "grad_norm"}


def test_tensors_come_from_the_header_and_read_in_chunks(tmp_path: Path) -> None:
    from safetensors.numpy import load_file

    url = str(make_outputs(tmp_path))
    expected = load_file(str(checkpoint(url, "checkpoint-24") / "model.safetensors"))
    with _open(url) as reader:
        record = next(r for r in _records(reader) if r.run_id == "run-a" and r.checkpoint_id == "checkpoint-24")
        entries = {e.name: e for e in reader.tensors(record)}
        assert set(entries) == set(expected)
        entry = entries["model.embed_tokens.weight"]
        chunks = list(reader.read_tensor(record, entry, 1000))
        assert all(len(c) <= 1000 and len(c) % 4 == 0 for c in chunks)
        assert b"".join(bytes(c) for c in chunks) == expected[entry.name].tobytes()


def test_data_depth_yields_a_tensor_summary_per_weight(tmp_path: Path) -> None:
    import numpy as np
    from safetensors.numpy import load_file

    url = str(make_outputs(tmp_path))
    weights = load_file(str(checkpoint(url, "checkpoint-8") / "model.safetensors"))
    with _open(url) as reader:
        record = next(r for r in _records(reader) if r.run_id == "run-a" and r.checkpoint_id == "checkpoint-8")
        out = list(reader.check_checkpoints([record], read_data=True))
    summaries = {s.name: s for s in out if isinstance(s, TensorSummary)}
    assert set(summaries) == set(weights)
    value = weights["lm_head.weight"].astype(np.float64)
    s = summaries["lm_head.weight"]
    assert s.numel == value.size and s.shape == (48, 16) and s.dtype == "F32"
    assert s.mean == pytest.approx(value.mean()) and s.std == pytest.approx(value.std())
    assert s.norm == pytest.approx(np.linalg.norm(value)) and s.min == pytest.approx(value.min())
    import hashlib

    assert s.sha256 == hashlib.sha256(weights["lm_head.weight"].tobytes()).hexdigest()
    assert [f for f in out if not isinstance(f, TensorSummary)] == []


def test_nan_loss_and_a_loss_spike_in_the_log_are_warnings(tmp_path: Path) -> None:
    url = str(make_outputs(tmp_path))
    state_path = checkpoint(url, "checkpoint-16") / "trainer_state.json"
    state = json.loads(state_path.read_text())
    for item in state["log_history"]:
        if item.get("step") == 12 and "loss" in item:
            item["loss"] = 40.0
        if item.get("step") == 14 and "loss" in item:
            item["loss"] = float("nan")
    state_path.write_text(json.dumps(state, indent=2, sort_keys=True))
    with _open(url) as reader:
        record = next(r for r in _records(reader) if r.run_id == "run-a" and r.checkpoint_id == "checkpoint-16")
        found = [f for f in reader.check_checkpoints([record], read_data=True) if not isinstance(f, TensorSummary)]
    assert any(f.check == Check.LOSS_SPIKE and "step 12" in f.message for f in found)
    assert any(f.check == Check.NON_FINITE and "loss is nan at step 14" in f.message for f in found)


def test_a_flipped_weight_bit_is_caught_only_by_a_recorded_checksum(tmp_path: Path) -> None:
    """safetensors records no checksum: a finite bit flip is invisible to every check but a
    comparison with a recorded sha256 (here a SHA256SUMS file beside it; the per-tensor sha256 in the
    TensorSummary rows lets the index compare two verifications)."""
    import hashlib

    from tests.training_stores import flip_byte_in_tensor

    url = str(make_outputs(tmp_path))
    folder = checkpoint(url, "checkpoint-8")
    flip_byte_in_tensor(folder / "model.safetensors")

    def data_findings() -> set[Check]:
        with _open(url) as reader:
            record = next(r for r in _records(reader) if r.run_id == "run-a" and r.checkpoint_id == "checkpoint-8")
            return {f.check for f in reader.check_checkpoints([record], read_data=True)
                    if not isinstance(f, TensorSummary)}
    assert data_findings() == set()
    original = (SOURCE / "checkpoint-8" / "model.safetensors").read_bytes()
    (folder / "SHA256SUMS").write_text(f"{hashlib.sha256(original).hexdigest()}  model.safetensors\n")
    assert Check.SHA256_MISMATCH in data_findings()


def test_the_canary_pickle_is_refused_and_never_runs(tmp_path: Path) -> None:
    CANARY.unlink(missing_ok=True)
    url = str(make_outputs(tmp_path))
    drop_canary(checkpoint(url, "checkpoint-24") / "training_args.bin")
    with _open(url) as reader:
        record = next(r for r in _records(reader) if r.run_id == "run-a" and r.checkpoint_id == "checkpoint-24")
        found = list(reader.check_checkpoints([record], read_data=True))
        state = reader.load_state(record)
    unsafe = [f for f in found if not isinstance(f, TensorSummary) and f.check == Check.UNSAFE_PICKLE]
    assert unsafe and unsafe[0].severity == "error" and "would import os.system" in unsafe[0].message
    assert state["training_args"] == {"refused": "would import os.system"}
    assert not CANARY.exists()


def test_sharded_torch_weights_and_peft_adapters_in_checkpoints(tmp_path: Path) -> None:
    url = str(make_outputs(tmp_path))
    ckpt = checkpoint(url, "checkpoint-24")
    (ckpt / "model.safetensors").unlink()
    for name in ("adapter_model.safetensors", "adapter_config.json"):
        shutil.copyfile(TRAINING / "peft_adapter" / name, ckpt / name)
    with _open(url) as reader:
        record = next(r for r in _records(reader) if r.run_id == "run-a" and r.checkpoint_id == "checkpoint-24")
        assert {e.name for e in reader.tensors(record)} and all("lora" in e.name for e in reader.tensors(record))
        assert reader.load_state(record)["adapter_config"]["peft_type"] == "LORA"
        assert list(reader.check_checkpoints([record])) == []


# ---- recovery, read back -----------------------------------------------------------------------------


def test_rollback_moves_later_checkpoints_aside_and_undo_brings_them_back(tmp_path: Path) -> None:
    from lastgood.index import queries
    from lastgood.index.catalog import Catalog
    from lastgood.readers import journal as jr
    from lastgood.recovery import plan as recovery
    from lastgood.recovery.apply import apply_plan
    from lastgood.stores import index_store

    url = str(make_outputs(tmp_path))
    catalog = Catalog(str(tmp_path / "index.duckdb"))
    store = index_store(catalog, url, check="structure").store
    plan = recovery.plan_rollback(catalog, store, "run-a", "checkpoint-24")
    assert sorted(plan.superseded) == ["checkpoint-32", "checkpoint-40"] and plan.expected_head == "checkpoint-40"
    assert len(list((Path(url) / "run-a").glob("checkpoint-*"))) == 5  # planning writes nothing
    result = apply_plan(catalog, store, plan, reason="bad eval", operator="test")
    assert result.check is not None and result.check["ok"], result.check
    live = sorted(int(p.name.split("-")[1]) for p in (Path(url) / "run-a").glob("checkpoint-*"))
    assert live == [8, 16, 24]
    moved = sorted(p.relative_to(Path(url) / "run-a").as_posix()
                   for p in (Path(url) / "run-a" / ".lastgood" / "quarantine").glob("*/*"))
    assert moved == [f".lastgood/quarantine/{result.action_id}/checkpoint-32",
                     f".lastgood/quarantine/{result.action_id}/checkpoint-40"]
    rows = {r["checkpoint_id"]: r for r in queries.list_checkpoints(catalog, store.store_id) if r["run_id"] == "run-a"}
    assert rows["checkpoint-40"]["status"] == "superseded" and rows["checkpoint-24"]["status"] == "ok"
    with _open(url) as reader:
        moved_row = next(r for r in _records(reader) if r.run_id == "run-a" and r.checkpoint_id == "checkpoint-40")
        assert moved_row.metadata["moved_by"] == result.action_id
    undo = apply_plan(catalog, store, recovery.plan_undo(catalog, store, result.action_id),
                               reason="false alarm", operator="test")
    assert undo.check is not None and undo.check["ok"], undo.check
    live = sorted(int(p.name.split("-")[1]) for p in (Path(url) / "run-a").glob("checkpoint-*"))
    assert live == [8, 16, 24, 32, 40]
    with _open(url) as reader:
        assert reader.recovery().head("run-a") == "checkpoint-40"
        assert jr.verify_chain(reader.recovery().journal_entries()).ok


def test_resumed_training_after_a_rollback_gets_new_ids(tmp_path: Path) -> None:
    """Training resumed from checkpoint-24 writes checkpoint-32 again: the new folder is
    checkpoint-32~2, the one moved aside keeps its id (and its superseded mark)."""
    from lastgood.readers import journal as jr

    url = str(make_outputs(tmp_path))
    with _open(url) as reader:
        backend = reader.recovery()
        entry = {"id": jr.new_action_id(), "time": jr.now_iso(), "operator": "t", "action": "rollback",
                 "reason": "r", "run_id": "run-a", "namespace": "", "target": "checkpoint-24",
                 "previous_head": "checkpoint-40", "superseded": [], "undo_of": None, "plan_digest": None,
                 "marks": jr.empty_marks(), "note": {}}
        backend.commit(jr.Change("run-a", "", "checkpoint-40", "checkpoint-24", entry))
    add_checkpoint(Path(url) / "run-a", 32)
    with _open(url) as reader:
        ids = {r.checkpoint_id: r for r in _records(reader) if r.run_id == "run-a"}
        assert {"checkpoint-32", "checkpoint-32~2", "checkpoint-40"} <= set(ids)
        assert ids["checkpoint-32~2"].location == "run-a/checkpoint-32"
        assert ids["checkpoint-32~2"].parent_id == "checkpoint-24"
        assert ids["checkpoint-40"].parent_id == "checkpoint-32"
        assert reader.recovery().head("run-a") == "checkpoint-32~2"


def test_an_interrupted_rollback_is_finished_by_the_next_action(tmp_path: Path) -> None:
    from lastgood.readers import journal as jr
    from lastgood.readers.modelfiles import filejournal

    url = str(make_outputs(tmp_path))
    with _open(url) as reader:
        backend = reader.recovery()
        entry = {"id": "act-interrupted", "time": jr.now_iso(), "operator": "t", "action": "rollback",
                 "reason": "r", "run_id": "run-a", "namespace": "", "target": "checkpoint-24",
                 "previous_head": "checkpoint-40", "superseded": [], "undo_of": None, "plan_digest": None,
                 "marks": jr.empty_marks(), "note": {}}
        change = jr.Change("run-a", "", "checkpoint-40", "checkpoint-24", entry)
        ops = backend.operations(change)
        sealed = jr.seal({**entry, "new_head": "checkpoint-24"}, 1, "")
        lock = {"action_id": "act-interrupted", "pid": 999_999_999, "host": "gone", "started": 0,
                "entry": sealed, "ops": ops}
        (Path(url) / filejournal.LOCK).parent.mkdir(parents=True)
        (Path(url) / filejournal.LOCK).write_bytes(jr.canonical(lock))
        backend.apply(ops[0])  # killed after the first rename
        assert backend.head("run-a") == "checkpoint-32"
        backend.append({"id": jr.new_action_id(), "action": "check-failed", "run_id": "run-a"})
        assert backend.head("run-a") == "checkpoint-24"
        assert [e["id"] for e in backend.journal_entries()][:1] == ["act-interrupted"]
        assert not (Path(url) / filejournal.LOCK).exists()


def test_cli_verify_show_and_a_dry_run(tmp_path: Path) -> None:
    url = str(make_outputs(tmp_path))
    home = tmp_path / "home"
    done = lastgood_cli("verify", url, "--read-data", "--format", "json", home=home)
    assert done.returncode == 0, done.stderr + done.stdout
    shown = lastgood_cli("show", url, "run-a/checkpoint-16", "--format", "json", home=home)
    assert shown.returncode == 0, shown.stderr
    assert SECRET_TOKEN not in shown.stdout and "[redacted]" in shown.stdout
    dry = lastgood_cli("rollback", url, "run-a", "--to", "checkpoint-24", "--reason", "bad eval", "--dry-run",
                       "--format", "json", home=home, env={"LASTGOOD_ALLOW_WRITE": "1", "LASTGOOD_OPERATOR": "t"})
    assert sorted(json.loads(dry.stdout)["superseded"]) == ["checkpoint-32", "checkpoint-40"]
    assert not (Path(url) / "run-a" / ".lastgood").exists()


# ---- what listing and structure checks read ----------------------------------------------------------


def test_listing_and_structure_checks_read_no_tensor_bytes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Headers, zip directories, pickles and trainer_state.json only: every range read of a weights file
    ends inside its header, and no read of a torch file touches a tensor storage's bytes."""
    import zipfile

    from lastgood.readers.modelfiles import fsio

    from tests.training_stores import header_of

    url = str(make_outputs(tmp_path))
    reads: list[tuple[str, int, int]] = []
    original = fsio.LocalFile.read

    def spy(self, offset: int, length: int) -> bytes:
        reads.append((self.path, offset, offset + length))
        return original(self, offset, length)
    monkeypatch.setattr(fsio.LocalFile, "read", spy)
    monkeypatch.setattr(fsio.LocalFile, "stream", lambda *a, **k: pytest.fail("a file was streamed"))
    with _open(url) as reader:
        records = _records(reader)
        assert not [f for f in reader.check_checkpoints(records) if f.severity == "error"]
    assert reads
    for name, start, end in reads:
        path = Path(name)
        if path.suffix == ".safetensors":
            n, _ = header_of(path)
            assert end <= 8 + n, (name, start, end)
        elif zipfile.is_zipfile(path):
            with zipfile.ZipFile(path) as archive:
                storages = [i for i in archive.infolist() if "/data/" in i.filename]
            for info in storages:
                data_start = info.header_offset + 30 + len(info.filename) + len(info.extra)
                assert end <= info.header_offset or start >= data_start + info.compress_size, (name, info.filename)


def test_a_memory_url_is_read_the_same_way(tmp_path: Path) -> None:
    import fsspec

    fs = fsspec.filesystem("memory")
    for path in SOURCE.rglob("*"):
        if path.is_file():
            fs.pipe_file(f"/lastgood-test-trainer/hf_trainer/{path.relative_to(SOURCE)}", path.read_bytes())
    url = "memory://lastgood-test-trainer/hf_trainer"
    try:
        from lastgood.readers.registry import pick_reader

        assert pick_reader(url) == "hf-trainer"
        with _open(url) as reader:
            scan = reader.scan()
            records = [record_from_row(r) for b in scan.checkpoints for r in as_table(b).to_pylist()]
            assert sorted(r.step for r in records) == [8, 16, 24, 32, 40]
            assert scan.heads[0].checkpoint_id == "checkpoint-40"
            out = list(reader.check_checkpoints(records, read_data=True))
            assert [f for f in out if not isinstance(f, TensorSummary)] == []
            assert len([s for s in out if isinstance(s, TensorSummary)]) == 5 * 21
            assert reader.load_state(records[0])["tensors"]["lm_head.weight"]["shape"] == [48, 16]
    finally:
        fs.rm("/lastgood-test-trainer", recursive=True)


@pytest.mark.s3
def test_on_s3_listing_checks_and_a_rollback(s3_env: dict[str, str], tmp_path: Path) -> None:
    """An S3 bucket (moto): listing by one recursive LIST, headers by range GETs, a data check, and a
    rollback whose moves are copies then deletes."""
    import uuid

    import s3fs

    fs = s3fs.S3FileSystem(endpoint_url=s3_env["FSSPEC_S3_ENDPOINT_URL"], key="testing", secret="testing")
    bucket = f"lastgood-{uuid.uuid4().hex[:10]}"
    fs.mkdir(bucket)
    fs.put(str(SOURCE), f"{bucket}/hf_trainer", recursive=True)
    url = f"s3://{bucket}/hf_trainer"
    from lastgood.readers.registry import open_reader

    options = {"endpoint_url": s3_env["FSSPEC_S3_ENDPOINT_URL"], "key": "testing", "secret": "testing"}
    with open_reader(url, "hf-trainer", options) as reader:
        records = _records(reader)
        assert sorted(r.step for r in records) == [8, 16, 24, 32, 40]
        out = list(reader.check_checkpoints(records, read_data=True))
        assert [f for f in out if not isinstance(f, TensorSummary)] == []
        assert len([s for s in out if isinstance(s, TensorSummary)]) == 5 * 21
        from lastgood.readers import journal as jr

        backend = reader.recovery()
        entry = {"id": jr.new_action_id(), "time": jr.now_iso(), "operator": "t", "action": "rollback",
                 "reason": "r", "run_id": "hf_trainer", "namespace": "", "target": "checkpoint-24",
                 "previous_head": "checkpoint-40", "superseded": [], "undo_of": None, "plan_digest": None,
                 "marks": jr.empty_marks(), "note": {}}
        backend.commit(jr.Change("hf_trainer", "", "checkpoint-40", "checkpoint-24", entry))
        assert backend.head("hf_trainer") == "checkpoint-24"
        assert len(backend.journal_entries()) == 1
    fs.invalidate_cache()
    live = sorted(p.rsplit("/", 1)[-1] for p in fs.ls(f"{bucket}/hf_trainer") if "/checkpoint-" in p)
    assert live == ["checkpoint-16", "checkpoint-24", "checkpoint-8"]
