"""The torch-dcp reader: torch.distributed.checkpoint step folders (.metadata + __R_N.distcp),
read without unpickling; recovery moves later step folders aside (and back).

Store: sample_data/training/dcp (written by torch 2.13's dcp.save: step-10/20/30, each .distcp a
concatenation of one torch.save zip per item), copied into two runs.
"""

from __future__ import annotations

import io
import json
import shutil
import zipfile
from pathlib import Path

import numpy as np
import pytest

from lastgood.checks import Check
from lastgood.errors import ConflictError, DecodeError
from lastgood.readers.base import Capability, Status, TensorSummary, as_table, capabilities, record_from_row
from lastgood.readers.registry import open_reader
from lastgood.readers.testing import Damage, ReaderConformance
from tests.helpers import ROOT, lastgood_cli, tree_digest

DCP = ROOT / "sample_data" / "training" / "dcp"
EVIL_PICKLE = b"\x80\x02cos\nsystem\nX\x2b\x00\x00\x00echo LASTGOOD-CANARY > /tmp/lastgood-canary\x85R."


def make_store(tmp: Path) -> Path:
    """``runA/step-{10,20,30}`` (the sample) and ``runB/step-{15,25}`` (copies)."""
    root = tmp / "dcp"
    shutil.copytree(DCP, root / "runA")
    for source, name in (("step-10", "step-15"), ("step-20", "step-25")):
        shutil.copytree(DCP / source, root / "runB" / name)
    return root


def listed(root: Path):
    with open_reader(str(root), "torch-dcp") as reader:
        scan = reader.scan()
        rows = [r for b in scan.checkpoints for r in as_table(b).to_pylist()]
    return [record_from_row(r) for r in rows], scan


def record(root: Path, run: str, checkpoint_id: str):
    return next(r for r in listed(root)[0] if (r.run_id, r.checkpoint_id) == (run, checkpoint_id))


def checks(root: Path, run: str, checkpoint_id: str, read_data: bool = True) -> list:
    with open_reader(str(root), "torch-dcp") as reader:
        return list(reader.check_checkpoints([record(root, run, checkpoint_id)], read_data))


def found(items: list) -> set[Check]:
    return {f.check for f in items if not isinstance(f, TensorSummary)}


def items(folder: Path) -> dict[str, tuple[int, int]]:
    """``fqn -> (offset, length)`` of a step folder's storage items, from its metadata."""
    from lastgood.readers.tensors.dcp import parse_dcp_metadata

    meta = parse_dcp_metadata((folder / ".metadata").read_bytes())
    return {i.fqn: (i.file_offset, i.length) for i in meta.storage}


def flip_tensor_byte(folder: Path, fqn: str = "model.fc1.weight") -> None:
    offset, length = items(folder)[fqn]
    data = bytearray((folder / "__0_0.distcp").read_bytes())
    member = _member(bytes(data[offset:offset + length]), "/data/0")
    data[offset + member + 3] ^= 0x20
    (folder / "__0_0.distcp").write_bytes(bytes(data))


def _member(zip_bytes: bytes, suffix: str) -> int:
    """Where a member's data starts inside one item's zip."""
    with zipfile.ZipFile(io.BytesIO(zip_bytes)) as archive:
        info = next(i for i in archive.infolist() if i.filename.endswith(suffix))
    start = info.header_offset
    return start + 30 + int.from_bytes(zip_bytes[start + 26:start + 28], "little") + \
        int.from_bytes(zip_bytes[start + 28:start + 30], "little")


class TestDcpKit(ReaderConformance):
    reader_name = "torch-dcp"

    def make_store(self, tmp: Path) -> str:
        tmp.mkdir(parents=True, exist_ok=True)
        return str(make_store(tmp))

    def append(self, url: str) -> int:
        shutil.copytree(Path(url) / "runA" / "step-30", Path(url) / "runA" / "step-40", copy_function=shutil.copyfile)
        return 1

    def damages(self) -> list[Damage]:
        def step(url: str, name: str = "step-20") -> Path:
            return Path(url) / "runA" / name

        def cut(url: str) -> None:
            data = step(url) / "__0_0.distcp"
            data.write_bytes(data.read_bytes()[:40_000])

        return [
            Damage("a missing .metadata (an unfinished save)", lambda u: (step(u) / ".metadata").unlink(),
                   {Check.INCOMPLETE}, "structure"),
            Damage("a truncated .distcp (extents beyond its size)", cut, {Check.SIZE_MISMATCH}, "structure"),
            Damage("a missing .distcp", lambda u: (step(u) / "__0_0.distcp").unlink(), {Check.BLOB_MISSING},
                   "structure"),
            Damage("a flipped tensor byte", lambda u: flip_tensor_byte(step(u)), {Check.CRC_MISMATCH}),
            Damage("a malicious .metadata", lambda u: (step(u) / ".metadata").write_bytes(EVIL_PICKLE),
                   {Check.UNSAFE_PICKLE}, "structure"),
        ]


# ---- the listing ---------------------------------------------------------------------------------


def test_runs_step_folders_and_the_newest_as_head(tmp_path: Path) -> None:
    root = make_store(tmp_path)
    records, scan = listed(root)
    assert [(r.run_id, r.checkpoint_id, r.step, r.parent_id) for r in records] == [
        ("runA", "step-10", 10, None), ("runA", "step-20", 20, "step-10"), ("runA", "step-30", 30, "step-20"),
        ("runB", "step-15", 15, None), ("runB", "step-25", 25, "step-15")]
    assert {h.run_id: h.checkpoint_id for h in scan.heads} == {"runA": "step-30", "runB": "step-25"}
    assert all(r.size_bytes == 8405 + 62070 and r.status == Status.OK for r in records)


def test_a_folder_without_metadata_is_an_unfinished_save(tmp_path: Path) -> None:
    root = make_store(tmp_path)
    (root / "runA" / "step-30" / ".metadata").unlink()
    records, scan = listed(root)
    step30 = next(r for r in records if r.checkpoint_id == "step-30")
    assert step30.status == Status.INCOMPLETE and "DCP writes it last" in step30.status_reason
    assert scan.findings == [] and [f.check for f in checks(root, "runA", "step-30", False)] == [Check.INCOMPLETE]
    with open_reader(str(root), "torch-dcp") as reader:
        with pytest.raises(DecodeError) as caught:
            reader.load_state(step30)
    assert caught.value.check == Check.INCOMPLETE


def test_a_single_dcp_folder_is_one_checkpoint(tmp_path: Path) -> None:
    root = tmp_path / "one"
    shutil.copytree(DCP / "step-20", root)
    records, scan = listed(root)
    assert [(r.run_id, r.checkpoint_id, r.location) for r in records] == [("one", "one", "")]
    with open_reader(str(root), "torch-dcp") as reader:
        assert reader.load_state(records[0])["extra.step"] == 20


# ---- reading ---------------------------------------------------------------------------------------


def test_state_holds_the_plain_items_and_tensors_as_dtype_and_shape(tmp_path: Path) -> None:
    root = make_store(tmp_path)
    with open_reader(str(root), "torch-dcp") as reader:
        state = reader.load_state(record(root, "runA", "step-20"))
    assert state["extra.step"] == 20 and state["extra.tag"] == "step-20" and isinstance(state["extra.loss"], float)
    assert state["model.fc1.weight"] == {"dtype": "F32", "shape": [8, 4]}
    assert state["model.norm.num_batches_tracked"] == {"dtype": "I64", "shape": [], "value": 20}
    assert state["optim.state.0.step"]["value"] == 20.0
    assert state["optim.param_groups.0.params"] == [0, 1, 2, 3, 4, 5]
    json.dumps(state)


def test_tensors_are_read_from_their_item_ranges(tmp_path: Path) -> None:
    root = make_store(tmp_path)
    folder = root / "runA" / "step-10"
    offset, length = items(folder)["model.fc2.weight"]
    blob = (folder / "__0_0.distcp").read_bytes()[offset:offset + length]
    with zipfile.ZipFile(io.BytesIO(blob)) as archive:  # the item is a torch.save zip of its own
        expected = archive.read(next(n for n in archive.namelist() if n.endswith("/data/0")))
    with open_reader(str(root), "torch-dcp") as reader:
        rec = record(root, "runA", "step-10")
        entry = next(e for e in reader.tensors(rec) if e.name == "model.fc2.weight")
        assert (entry.dtype, entry.shape, entry.nbytes, entry.file) == ("F32", (2, 8), 64, "runA/step-10/__0_0.distcp")
        assert b"".join(reader.read_tensor(rec, entry, 16)) == expected
    assert np.frombuffer(expected, np.float32).shape == (16,)


def test_data_depth_summarises_every_tensor_and_finds_damage(tmp_path: Path) -> None:
    root = make_store(tmp_path)
    healthy = checks(root, "runA", "step-30")
    summaries = [s for s in healthy if isinstance(s, TensorSummary)]
    assert len(summaries) == 27 and found(healthy) == set()
    assert {s.name for s in summaries} >= {"model.fc1.weight", "optim.state.5.exp_avg_sq"}
    flip_tensor_byte(root / "runA" / "step-30", "model.fc2.bias")
    crc = [f for f in checks(root, "runA", "step-30") if not isinstance(f, TensorSummary)]
    assert [f.check for f in crc] == [Check.CRC_MISMATCH] and crc[0].message.startswith("model.fc2.bias: ")


def test_extents_beyond_the_file_are_a_truncated_distcp(tmp_path: Path) -> None:
    root = make_store(tmp_path)
    data = root / "runA" / "step-20" / "__0_0.distcp"
    data.write_bytes(data.read_bytes()[:50_000])
    problems = checks(root, "runA", "step-20", read_data=False)
    assert {f.check for f in problems} == {Check.SIZE_MISMATCH}
    assert all("beyond file size 50000" in f.message for f in problems)


def test_a_malicious_metadata_is_never_run(tmp_path: Path) -> None:
    root = make_store(tmp_path)
    (root / "runA" / "step-20" / ".metadata").write_bytes(EVIL_PICKLE)
    [finding] = checks(root, "runA", "step-20")
    assert finding.check == Check.UNSAFE_PICKLE and "would import os.system" in finding.message


# ---- recovery: later step folders moved aside, and back ----------------------------------------------


def _index(root: Path, tmp: Path):
    from lastgood.index.catalog import Catalog
    from lastgood.stores import index_store

    catalog = Catalog(str(tmp / "index.duckdb"))
    return catalog, index_store(catalog, str(root), reader_name="torch-dcp", check="structure").store


def test_rollback_moves_later_folders_aside_and_undo_brings_them_back(tmp_path: Path) -> None:
    from lastgood import recovery

    root = make_store(tmp_path)
    digest = tree_digest(root / "runA")
    catalog, store = _index(root, tmp_path)
    done = recovery.apply_plan(catalog, store, recovery.plan_rollback(catalog, store, "runA", "runA/step-10"),
                               reason="loss spiked", operator="test")
    assert done.check["ok"], done.check
    assert sorted(p.name for p in (root / "runA").iterdir()) == ["step-10"]
    aside = root / ".lastgood" / "quarantine" / done.action_id / "runA"
    assert sorted(p.name for p in aside.iterdir()) == ["step-20", "step-30"]
    records, scan = listed(root)
    moved = [r for r in records if r.metadata.get("moved_aside_by") == done.action_id]
    assert {r.checkpoint_id for r in moved} == {"step-20", "step-30"}
    assert {h.run_id: h.checkpoint_id for h in scan.heads}["runA"] == "step-10"
    with open_reader(str(root), "torch-dcp") as reader:  # a moved-aside folder still reads
        assert reader.load_state(moved[0])["extra.step"] in (20, 30)
    recovery.apply_plan(catalog, store, recovery.plan_undo(catalog, store, done.action_id), reason="undo",
                        operator="test")
    assert tree_digest(root / "runA") == digest
    assert sorted(p.name for p in (root / "runB").iterdir()) == ["step-15", "step-25"]


def test_a_folder_written_again_blocks_bringing_the_old_one_back(tmp_path: Path) -> None:
    from lastgood import recovery

    root = make_store(tmp_path)
    catalog, store = _index(root, tmp_path)
    done = recovery.apply_plan(catalog, store, recovery.plan_restore(catalog, store, "runA/step-20"),
                               reason="test", operator="test")
    shutil.copytree(DCP / "step-20", root / "runA" / "step-30")  # training resumed and saved step 30 again
    recovery.refresh_index(catalog, store)
    records, _ = listed(root)
    assert {r.checkpoint_id for r in records if r.run_id == "runA"} == {
        "step-10", "step-20", "step-30", f"step-30~{done.action_id}"}
    with pytest.raises(ConflictError, match="exists again"):
        recovery.apply_plan(catalog, store, recovery.plan_restore(catalog, store, f"runA/step-30~{done.action_id}"),
                            reason="test", operator="test")


def test_cli_ls_and_verify(tmp_path: Path) -> None:
    root = make_store(tmp_path)
    home = tmp_path / "home"
    rows = json.loads(lastgood_cli("--format", "json", "ls", str(root), home=home).stdout)
    assert len(rows) == 5
    verified = lastgood_cli("--format", "json", "verify", str(root), "--read-data", home=home)
    assert verified.returncode == 0, verified.stdout[-2000:]


def test_capabilities() -> None:
    from lastgood.readers.dcp.reader import DcpReader

    assert capabilities(DcpReader) == {Capability.CHECKS, Capability.TENSORS, Capability.RECOVERY,
                                      Capability.RETENTION}


def test_any_fsspec_url_is_read_by_range() -> None:
    import fsspec

    fs = fsspec.filesystem("memory")
    for path in DCP.rglob("*"):
        if path.is_file():
            fs.pipe_file(f"/dcpmem/dcp/{path.relative_to(DCP)}", path.read_bytes())
    try:
        url = "memory://dcpmem/dcp"
        from lastgood.readers.registry import pick_reader

        assert pick_reader(url) == "torch-dcp"
        with open_reader(url, "torch-dcp") as reader:
            scan = reader.scan()
            records = [record_from_row(r) for b in scan.checkpoints for r in as_table(b).to_pylist()]
            assert [r.checkpoint_id for r in records] == ["step-10", "step-20", "step-30"]
            assert reader.load_state(records[1])["extra.step"] == 20
            found_items = list(reader.check_checkpoints(records, True))
        assert sum(isinstance(s, TensorSummary) for s in found_items) == 81 and found(found_items) == set()
    finally:
        fs.rm("/dcpmem", recursive=True)


def test_an_interrupted_move_is_finished_by_the_next_action(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from lastgood import recovery
    from lastgood.readers.training_folders.moves import StepFolderRecovery

    root = make_store(tmp_path)
    catalog, store = _index(root, tmp_path)
    real = StepFolderRecovery._move

    def killed_after_one(self: StepFolderRecovery, src: str, dst: str) -> None:
        real(self, src, dst)
        raise OSError("killed between two moves")
    monkeypatch.setattr(StepFolderRecovery, "_move", killed_after_one)
    with pytest.raises(OSError):
        recovery.apply_plan(catalog, store, recovery.plan_rollback(catalog, store, "runA", "runA/step-10"),
                            reason="test", operator="test")
    monkeypatch.setattr(StepFolderRecovery, "_move", real)
    assert sorted(p.name for p in (root / "runA").iterdir()) == ["step-10", "step-30"]  # half done
    backend = recovery.backend(store)
    assert backend.pending()[0]["failed"] and backend.journal_entries() == []
    # the next action (on any run) finds the intent, finishes it and journals it first
    recovery.apply_plan(catalog, store, recovery.plan_quarantine(catalog, store, "runB/step-15"),
                        reason="test", operator="test")
    assert sorted(p.name for p in (root / "runA").iterdir()) == ["step-10"]
    assert [e["action"] for e in backend.journal_entries()] == ["rollback", "quarantine"]
    assert not backend.pending()


def test_a_folder_with_an_unsafe_pickle_is_never_made_the_newest(tmp_path: Path) -> None:
    from lastgood import recovery
    from lastgood.errors import UsageError

    root = make_store(tmp_path)
    (root / "runA" / "step-20" / ".metadata").write_bytes(EVIL_PICKLE)
    catalog, store = _index(root, tmp_path)
    with pytest.raises(UsageError, match="can never be restored.*os.system"):  # refused by the planner
        recovery.plan_restore(catalog, store, "runA/step-20", force=True)
    plan = recovery.Plan("restore", "runA", "", "step-20", recovery.backend(store).head("runA", ""),
                         restore_from="step-20")  # and by the backend itself, for a plan made before the finding
    with pytest.raises(UsageError, match="can never be restored.*os.system"):
        recovery.apply_plan(catalog, store, plan, reason="test", operator="test")
    assert sorted(p.name for p in (root / "runA").iterdir()) == ["step-10", "step-20", "step-30"]
    assert recovery.backend(store).journal_entries() == []
    assert not (root / ".lastgood" / "journal" / "lock.json").exists()
