"""The torch-files reader: folders of torch.save files, read without unpickling (never torch).

Stores: the real files of sample_data/training/torch_save (written by torch 2.13: state dicts, a
resume dict, bf16, shared-storage views, the legacy format, the malicious evil.pt canary) and file
series written by tests/training_torch_zip.py (torch's zip layout; real torch loads them).
"""

from __future__ import annotations

import io
import json
import shutil
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest

from lastgood.checks import Check
from lastgood.errors import DecodeError
from lastgood.readers.base import Capability, Status, TensorSummary, as_table, capabilities, record_from_row
from lastgood.readers.registry import open_reader, pick_reader
from lastgood.readers.testing import Damage, ReaderConformance
from tests.helpers import ROOT, lastgood_cli, tree_digest
from tests.training_torch_zip import tiny_state_dict, torch_zip_bytes, write_torch

TORCH_SAVE = ROOT / "sample_data" / "training" / "torch_save"
CANARY = Path("/tmp/lastgood-canary")
SECRET = "sk-test-TORCHFILES-0123456789abcdef"


def _checkpoint(step: int, **extra: object) -> dict[str, object]:
    return {"step": step, "model": tiny_state_dict(step), "config": {"api_key": SECRET, "lr": 0.01}, **extra}


def make_store(tmp: Path, evil: bool = True) -> Path:
    """``files/`` (the real torch.save samples; ``evil``: with the malicious canary) and
    ``series/ckpt_{1,2,3}.pt``."""
    root = tmp / "torch"
    shutil.copytree(TORCH_SAVE, root / "files", ignore=None if evil else shutil.ignore_patterns("evil.pt"))
    for step in (1, 2, 3):
        write_torch(root / "series" / f"ckpt_{step}.pt", _checkpoint(step))
    return root


def listed(url: str | Path):
    with open_reader(str(url), "torch-files") as reader:
        scan = reader.scan()
        rows = [r for b in scan.checkpoints for r in as_table(b).to_pylist()]
    return [record_from_row(r) for r in rows], scan


def record(url: Path, checkpoint_id: str):
    return next(r for r in listed(url)[0] if r.checkpoint_id == checkpoint_id)


def checks(url: Path, checkpoint_id: str, read_data: bool = True) -> list:
    with open_reader(str(url), "torch-files") as reader:
        return list(reader.check_checkpoints([record(url, checkpoint_id)], read_data))


def found(items: list) -> set[Check]:
    return {f.check for f in items if not isinstance(f, TensorSummary)}


# ---- damage -------------------------------------------------------------------------------------


def truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


def flip_storage_byte(path: Path) -> None:
    with zipfile.ZipFile(path) as archive:
        info = next(i for i in archive.infolist() if "/data/" in i.filename and i.file_size >= 16)
    data = bytearray(path.read_bytes())
    offset = _data_offset(data, info)
    data[offset + 5] ^= 0x40
    path.write_bytes(bytes(data))


def _data_offset(data: bytes | bytearray, info: zipfile.ZipInfo) -> int:
    start = info.header_offset
    name_length = int.from_bytes(data[start + 26:start + 28], "little")
    extra_length = int.from_bytes(data[start + 28:start + 30], "little")
    return start + 30 + name_length + extra_length


def drop_storage(path: Path) -> None:
    """The zip rewritten without one storage record (data.pkl still names it)."""
    with zipfile.ZipFile(path) as src:
        records = [(i, src.read(i.filename)) for i in src.infolist()]
    dropped = next(i.filename for i, _ in records if i.filename.endswith("/data/0"))
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_STORED) as dst:
        for info, data in records:
            if info.filename != dropped:
                dst.writestr(info, data)


class TestTorchFilesKit(ReaderConformance):
    reader_name = "torch-files"
    secret = SECRET

    def make_store(self, tmp: Path) -> str:
        tmp.mkdir(parents=True, exist_ok=True)
        return str(make_store(tmp, evil=False))  # a healthy store: the canary is a damage

    def append(self, url: str) -> int:
        write_torch(Path(url) / "series" / "ckpt_4.pt", _checkpoint(4))
        return 1

    def damages(self) -> list[Damage]:
        def nan(url: str) -> None:
            bad = np.array([[np.nan, 1.0], [np.inf, 0.0]], dtype=np.float32)
            write_torch(_series(url, "ckpt_2.pt"), _checkpoint(2, bad=bad))

        def zero(url: str) -> None:
            write_torch(_series(url, "ckpt_3.pt"), _checkpoint(3, zero=np.zeros((4, 4), dtype=np.float32)))

        return [
            Damage("a truncated zip (no central directory)", lambda u: truncate(_series(u, "ckpt_2.pt")),
                   {Check.INCOMPLETE}, "structure"),
            Damage("a flipped storage byte", lambda u: flip_storage_byte(_series(u, "ckpt_2.pt")),
                   {Check.CRC_MISMATCH}),
            Damage("a missing storage entry", lambda u: drop_storage(_series(u, "ckpt_3.pt")),
                   {Check.BLOB_MISSING}, "structure"),
            Damage("a malicious pickle (evil.pt)", lambda u: shutil.copy(TORCH_SAVE / "evil.pt", Path(u) / "files"),
                   {Check.UNSAFE_PICKLE}, "structure"),
            Damage("the legacy format (already there)", lambda u: None, {Check.TORCH_FILE}, "structure"),
            Damage("NaN in a tensor", nan, {Check.NON_FINITE}),
            Damage("an all-zero weight matrix", zero, {Check.ZERO_TENSOR}),
        ]


def _series(url: str, name: str) -> Path:
    return Path(url) / "series" / name


# ---- the listing ----------------------------------------------------------------------------------


def test_runs_are_folders_and_numbered_series(tmp_path: Path) -> None:
    root = make_store(tmp_path)
    records, scan = listed(root)
    runs = {}
    for r in records:
        runs.setdefault(r.run_id, []).append(r)
    assert set(runs) == {"files", "series/ckpt_*"}
    series = runs["series/ckpt_*"]
    assert [(r.checkpoint_id, r.step, r.parent_id) for r in series] == [
        ("ckpt_1.pt", 1, None), ("ckpt_2.pt", 2, "ckpt_1.pt"), ("ckpt_3.pt", 3, "ckpt_2.pt")]
    assert {h.run_id: h.checkpoint_id for h in scan.heads} == {"series/ckpt_*": "ckpt_3.pt"}
    assert {r.checkpoint_id for r in runs["files"]} == {p.name for p in TORCH_SAVE.iterdir()}
    assert all(r.status == Status.OK and r.created_at.tzinfo for r in records)


def test_listing_reads_no_file_contents(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from lastgood.readers.training_folders.folder import Folder

    root = make_store(tmp_path)
    opened: list[str] = []
    real_open = Folder.open
    monkeypatch.setattr(Folder, "open", lambda self, rel: opened.append(rel) or real_open(self, rel))
    records, _ = listed(root)
    assert records and opened == []


def test_a_lone_numbered_file_joining_a_series_rescans_in_full(tmp_path: Path) -> None:
    root = tmp_path / "store"
    write_torch(root / "model_1.pt", _checkpoint(1))
    write_torch(root / "other.pt", _checkpoint(0))
    _, scan = listed(root)
    assert {r.run_id for r in listed(root)[0]} == {"store"}
    write_torch(root / "model_2.pt", _checkpoint(2))
    with open_reader(str(root), "torch-files") as reader:
        again = reader.scan(scan.token)
        rows = [r for b in again.checkpoints for r in as_table(b).to_pylist()]
    assert again.full and {(r["run_id"], r["checkpoint_id"]) for r in rows} >= {
        ("model_*", "model_1.pt"), ("model_*", "model_2.pt")}


def test_sniffing_leaves_other_training_folders_to_their_readers() -> None:
    training = ROOT / "sample_data" / "training"
    from lastgood.readers.torch_files.reader import TorchFilesReader

    assert TorchFilesReader.sniff(str(training / "torch_save"))
    assert TorchFilesReader.sniff(str(training / "torch_save" / "model_state_dict.pt"))
    for other in ("hf_trainer", "deepspeed", "lightning", "dcp", "orbax", "hf_sharded", "peft_adapter"):
        assert not TorchFilesReader.sniff(str(training / other)), other


# ---- reading without unpickling ------------------------------------------------------------------------


def test_state_is_the_pickle_as_plain_data_with_tensors_as_dtype_and_shape(tmp_path: Path) -> None:
    root = make_store(tmp_path)
    with open_reader(str(root), "torch-files") as reader:
        state = reader.load_state(record(root, "training_checkpoint.pth"))
    assert state["epoch"] == 2 and state["global_step"] == 3 and state["run_name"] == "lastgood-fixture"
    assert state["lr_history"] == [0.01, 0.01, 0.005]
    assert state["model_state_dict"]["fc1.weight"] == {"dtype": "F32", "shape": [8, 4]}
    assert state["model_state_dict"]["norm.num_batches_tracked"] == {"dtype": "I64", "shape": [], "value": 3}
    assert state["optimizer_state_dict"]["state"]["0"]["step"]["value"] == 3.0
    assert state["scheduler_state_dict"]["step_size"] >= 1
    json.dumps(state)


def test_tensors_are_listed_with_offsets_and_read_by_range(tmp_path: Path) -> None:
    root = make_store(tmp_path)
    expected = tiny_state_dict(2)
    with open_reader(str(root), "torch-files") as reader:
        rec = record(root, "ckpt_2.pt")
        entries = {e.name: e for e in reader.tensors(rec)}
        weight = entries["model.net.0.weight"]
        assert (weight.dtype, weight.shape, weight.nbytes, weight.file) == ("F32", (8, 4), 128, "series/ckpt_2.pt")
        raw = (root / "series" / "ckpt_2.pt").read_bytes()
        assert raw[weight.offset:weight.offset + 128] == expected["net.0.weight"].tobytes()
        chunks = list(reader.read_tensor(rec, weight, 48))
        assert len(chunks) == 3 and b"".join(chunks) == expected["net.0.weight"].tobytes()


def test_strided_views_are_gathered(tmp_path: Path) -> None:
    root = make_store(tmp_path)
    with open_reader(str(root), "torch-files") as reader:
        rec = record(root, "shared_views.pt")
        entries = {e.name: e for e in reader.tensors(rec)}
        base = np.frombuffer(b"".join(reader.read_tensor(rec, entries["base"], 1 << 20)), np.float32).reshape(4, 6)
        transposed = b"".join(reader.read_tensor(rec, entries["transposed"], 1 << 20))
        every_other = b"".join(reader.read_tensor(rec, entries["every_other_col"], 1 << 20))
    assert entries["transposed"].offset is None and entries["base"].offset is not None
    assert np.frombuffer(transposed, np.float32).reshape(6, 4).tolist() == base.T.tolist()
    assert np.frombuffer(every_other, np.float32).reshape(4, 3).tolist() == base[:, ::2].tolist()


def test_data_depth_yields_a_summary_per_tensor(tmp_path: Path) -> None:
    root = make_store(tmp_path)
    items = checks(root, "pytorch_model_bf16.bin")
    summaries = {s.name: s for s in items if isinstance(s, TensorSummary)}
    assert set(summaries) == {"fc1.weight", "fc1.bias", "norm.weight", "norm.bias", "norm.running_mean",
                              "norm.running_var", "norm.num_batches_tracked", "fc2.weight", "fc2.bias"}
    weight = summaries["fc1.weight"]
    assert weight.dtype == "BF16" and weight.numel == 32 and weight.nan == 0 and weight.sha256
    assert weight.min <= weight.mean <= weight.max and weight.std > 0 and weight.norm > 0
    assert found(items) == set()
    assert not any(isinstance(s, TensorSummary) for s in checks(root, "pytorch_model_bf16.bin", read_data=False))


def test_damage_is_told_apart(tmp_path: Path) -> None:
    root = make_store(tmp_path)
    series = root / "series"
    truncate(series / "ckpt_1.pt")
    flip_storage_byte(series / "ckpt_2.pt")
    drop_storage(series / "ckpt_3.pt")
    assert found(checks(root, "ckpt_1.pt")) == {Check.INCOMPLETE}
    assert found(checks(root, "ckpt_2.pt", read_data=False)) == set()  # a CRC needs the bytes
    crc = [f for f in checks(root, "ckpt_2.pt") if not isinstance(f, TensorSummary)]
    assert [f.check for f in crc] == [Check.CRC_MISMATCH] and "/data/" in crc[0].message
    missing = [f for f in checks(root, "ckpt_3.pt", read_data=False)]
    assert [f.check for f in missing] == [Check.BLOB_MISSING] and "storage '0'" in missing[0].message
    with open_reader(str(root), "torch-files") as reader:
        for name in ("ckpt_1.pt", "ckpt_3.pt"):
            with pytest.raises(DecodeError):
                reader.load_state(record(root, name))


def test_the_legacy_format_is_recognised_not_decoded(tmp_path: Path) -> None:
    root = make_store(tmp_path)
    [legacy] = checks(root, "legacy_format.pt")
    assert (legacy.check, legacy.severity, legacy.message) == (
        Check.TORCH_FILE, "warning", "legacy non-zip torch format: not decoded")
    with open_reader(str(root), "torch-files") as reader:
        with pytest.raises(DecodeError, match="legacy non-zip torch format"):
            reader.load_state(record(root, "legacy_format.pt"))


def test_nan_and_zero_warnings_name_the_tensors(tmp_path: Path) -> None:
    root = tmp_path / "store"
    write_torch(root / "w.pt", {"a": np.array([[np.nan, np.inf]], dtype=np.float32),
                                "zero": np.zeros((3, 3), dtype=np.float32), "bias": np.zeros(3, dtype=np.float32)})
    warnings = {f.check: f for f in checks(root, "w.pt") if not isinstance(f, TensorSummary)}
    assert warnings[Check.NON_FINITE].message == "NaN or infinite values in 1 tensor(s): a (1 NaN, 1 +Inf)"
    assert warnings[Check.ZERO_TENSOR].message.endswith("only zeros: zero")  # a zero bias is normal


def test_the_file_never_leaves_its_store_through_a_link(tmp_path: Path) -> None:
    outside = write_torch(tmp_path / "outside" / "secret.pt", _checkpoint(9))
    root = tmp_path / "store"
    write_torch(root / "a.pt", _checkpoint(1))
    (root / "b.pt").symlink_to(outside)
    [finding] = checks(root, "b.pt")
    assert finding.check == Check.UNSAFE_PATH


def test_any_fsspec_url_is_read_by_range(tmp_path: Path) -> None:
    import fsspec

    fs = fsspec.filesystem("memory")
    for path in sorted(TORCH_SAVE.iterdir()):
        fs.pipe_file(f"/torchmem/files/{path.name}", path.read_bytes())
    try:
        url = "memory://torchmem/files"
        assert pick_reader(url) == "torch-files"
        records, _ = listed(url)
        with open_reader(url, "torch-files") as reader:
            rec = next(r for r in records if r.checkpoint_id == "model_state_dict.pt")
            assert reader.load_state(rec)["fc1.weight"] == {"dtype": "F32", "shape": [8, 4]}
            items = list(reader.check_checkpoints(records, True))
        assert {f.check for f in items if not isinstance(f, TensorSummary)} == {Check.UNSAFE_PICKLE, Check.TORCH_FILE}
        assert sum(isinstance(s, TensorSummary) for s in items) > 20
    finally:
        fs.rm("/torchmem", recursive=True)


def test_capabilities_and_read_only(tmp_path: Path) -> None:
    from lastgood.readers.torch_files.reader import TorchFilesReader

    assert capabilities(TorchFilesReader) == {Capability.CHECKS, Capability.TENSORS}
    assert TorchFilesReader.read_only_reason


# ---- evil.pt never runs ---------------------------------------------------------------------------


def _canary() -> tuple[float, int] | None:
    try:
        info = CANARY.stat()
    except FileNotFoundError:
        return None
    return info.st_mtime, info.st_ino


def test_evil_pt_never_runs_in_any_code_path(tmp_path: Path) -> None:
    """ls, show, verify --read-data, diff and a full in-process read: the canary never appears
    (or, if some earlier process made it, is never touched again) and torch is never imported."""
    before = _canary()
    root = tmp_path / "ts"
    shutil.copytree(TORCH_SAVE, root)
    digest = tree_digest(root)
    home = tmp_path / "home"
    runs = [("ls", str(root)), ("show", str(root), "evil.pt"), ("verify", str(root), "--read-data"),
            ("diff", str(root), "model_state_dict.pt", "evil.pt")]
    outputs = [lastgood_cli("--format", "json", *args, home=home) for args in runs]
    assert _canary() == before
    shown = json.loads(outputs[1].stdout)
    assert shown["checkpoint"]["status"] == "corrupt"
    assert "would import os.system" in shown["checkpoint"]["status_reason"]
    verified = json.loads(outputs[2].stdout)
    evil = [f for f in verified["findings"] if f["checkpoint_id"] == "evil.pt"]
    assert [(f["check"], f["severity"]) for f in evil] == [("unsafe-pickle", "error")]
    assert "would import os.system" in evil[0]["message"] and outputs[2].returncode == 1
    assert outputs[3].returncode != 0 and "os.system" in outputs[3].stderr
    with open_reader(str(root), "torch-files") as reader:
        rec = record(root, "evil.pt")
        for read in (reader.load_state, reader.tensors, lambda r: list(reader.read_tensor(r, _entry(), 1 << 20))):
            with pytest.raises(DecodeError, match="os.system"):
                read(rec)
        assert found(list(reader.check_checkpoints([rec], True))) == {Check.UNSAFE_PICKLE}
    assert _canary() == before and "torch" not in sys.modules
    assert tree_digest(root) == digest


def _entry():
    from lastgood.readers.base import TensorEntry

    return TensorEntry("w", "F32", (2,), 8, "evil.pt", None)


def test_the_writer_of_these_tests_writes_torchs_layout() -> None:
    raw = torch_zip_bytes({"w": np.ones((2, 3), dtype=np.float32)}, "archive")
    with zipfile.ZipFile(io.BytesIO(raw)) as archive:
        names = [i.filename for i in archive.infolist()]
        offsets = {i.filename: _data_offset(raw, i) for i in archive.infolist()}
    assert names == ["archive/data.pkl", "archive/.format_version", "archive/.storage_alignment",
                     "archive/byteorder", "archive/data/0", "archive/version", "archive/.data/serialization_id"]
    assert all(offset % 64 == 0 for offset in offsets.values())
