"""torch.save files: walker results equal torch.load(weights_only=True); damage is reported."""

from __future__ import annotations

import hashlib
import io
import json
import pickletools
import struct
import zipfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lastgood.readers.tensors.errors import TensorsError, TorchFileError, UnsafeGlobal
from lastgood.readers.tensors.torchzip import (
    check_crc, inspect_torch_file, read_tensor, read_tensor_bytes, tensor_bytes,
)

FIXTURES = Path(__file__).parent / "fixtures" / "tensors"
CANARY = Path("/tmp/lastgood_tensors_evil_canary")
TORCH_FIXTURES = ["state_dict", "nested", "dtypes", "views", "params", "bytesio", "attrs",
                  "proto4", "nocrc"]


def inspect_bytes(data: bytes):
    """Inspect an in-memory file; return (TorchFile, file object)."""
    fh = io.BytesIO(data)
    return inspect_torch_file(fh, len(data)), fh


def rows(tf, fh) -> list[dict]:
    """The fields the generator records, computed without torch."""
    return [{
        "name": t.name, "dtype": t.ref.dtype, "shape": list(t.ref.shape),
        "stride": list(t.ref.stride), "storage_offset": t.ref.storage_offset,
        "requires_grad": t.ref.requires_grad, "is_parameter": t.ref.is_parameter,
        "sha256": hashlib.sha256(read_tensor_bytes(fh, t)).hexdigest(),
    } for t in tf.tensors]


@pytest.mark.parametrize("stem", TORCH_FIXTURES)
def test_walker_matches_torch_load(stem: str) -> None:
    expected = json.loads((FIXTURES / f"{stem}.expected.json").read_text())["tensors"]
    tf, fh = inspect_bytes((FIXTURES / f"{stem}.pt").read_bytes())
    assert not tf.legacy and tf.byteorder == "little"
    assert rows(tf, fh) == expected
    statuses = {c.status for c in check_crc(fh, tf.entries)}
    assert statuses == ({"disabled"} if stem == "nocrc" else {"ok"})


def test_prefix_and_non_tensor_values() -> None:
    tf, _ = inspect_bytes((FIXTURES / "bytesio.pt").read_bytes())
    assert tf.prefix == "archive"
    tf, _ = inspect_bytes((FIXTURES / "nested.pt").read_bytes())
    root = tf.root
    assert root["epoch"] == 3 and root["best"] == float("inf") and root["history"] == [0.5, 0.25]
    assert root["tag"] == ("run", 7) and root["blob"] == b"\x00\x01" and root["classes"] == {1, 2}
    assert root["np_step"] == 12 and root["np_loss"] == 0.125
    assert root["args"]["state"] == {"lr": 1e-3, "name": "tiny"}
    groups = root["optimizer"]["param_groups"]
    assert groups[0]["lr"] == 1e-3 and groups[0]["params"] == [0, 1, 2, 3]
    assert root["model"].state["_metadata"][""]["version"] == 1


def test_views_and_values() -> None:
    tf, fh = inspect_bytes((FIXTURES / "views.pt").read_bytes())
    by = {t.name: t for t in tf.tensors}
    base = np.arange(12, dtype=np.float32).reshape(3, 4)
    assert np.array_equal(read_tensor(fh, by["base"]), base)
    assert np.array_equal(read_tensor(fh, by["col"]), base[:, 2])
    assert np.array_equal(read_tensor(fh, by["t"]), base.T)
    assert np.array_equal(read_tensor(fh, by["tail"]), base.reshape(-1)[5:9])
    spans = {name: tensor_bytes(t) for name, t in by.items()}
    start = spans["base"].start
    assert spans["base"].end - start == 48 and spans["base"].contiguous
    assert (spans["row"].start - start, spans["row"].end - start, spans["row"].contiguous) == (16, 32, True)
    assert (spans["tail"].start - start, spans["tail"].contiguous) == (20, True)
    assert not spans["col"].contiguous and not spans["t"].contiguous
    assert len({t.entry.name for t in tf.tensors}) == 1  # one shared storage
    raw = (FIXTURES / "views.pt").read_bytes()
    assert raw[spans["base"].start : spans["base"].end] == base.tobytes()


def test_training_args_is_plain_data() -> None:
    want = json.loads((FIXTURES / "training_args.expected.json").read_text())
    tf, _ = inspect_bytes((FIXTURES / "training_args.bin").read_bytes())
    assert tf.tensors == ()
    assert tf.root["__class__"] == "transformers.training_args.TrainingArguments"
    state = tf.root["state"]
    for key in ("learning_rate", "save_steps", "output_dir"):
        assert state[key] == want[key]
    assert state["lr_scheduler_type"]["args"] == (want["lr_scheduler_type"],)
    assert state["eval_strategy"]["args"] == (want["eval_strategy"],)


def test_legacy_and_foreign_files() -> None:
    tf, _ = inspect_bytes((FIXTURES / "legacy.pt").read_bytes())
    assert tf.legacy and tf.tensors == ()
    for data in (b"", b"hello world", b"\x80\x02}q\x00."):
        with pytest.raises(TorchFileError) as err:
            inspect_bytes(data)
        assert err.value.code == "NotATorchFile"


def test_evil_pickle_is_refused_and_never_runs() -> None:
    data = (FIXTURES / "evil.pt").read_bytes()
    pkl = zipfile.ZipFile(io.BytesIO(data)).read("evil/data.pkl")
    ops = [(op.name, arg) for op, arg, _ in pickletools.genops(pkl)]
    assert ("GLOBAL", "os system") in ops and ("REDUCE", None) in ops
    CANARY.unlink(missing_ok=True)
    with pytest.raises(UnsafeGlobal) as err:
        inspect_bytes(data)
    assert err.value.name == "os.system"
    assert "os.system" in str(err.value)
    assert not CANARY.exists()


# ------------------------------------------------------------------ damage --
def rezip(data: bytes, drop: str = "", replace: dict[str, bytes] | None = None) -> bytes:
    """Copy a zip, leaving out ``drop`` and replacing some members."""
    src = zipfile.ZipFile(io.BytesIO(data))
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_STORED) as dst:
        for info in src.infolist():
            if info.filename != drop:
                dst.writestr(info.filename, (replace or {}).get(info.filename, src.read(info)))
    return out.getvalue()


def zero_crcs(data: bytes) -> bytes:
    """Zero every CRC field, as torch does with CRC writing disabled."""
    blob = bytearray(data)
    for sig, at in ((b"PK\x03\x04", 14), (b"PK\x01\x02", 16)):
        pos = blob.find(sig)
        while pos >= 0:
            blob[pos + at : pos + at + 4] = b"\0\0\0\0"
            pos = blob.find(sig, pos + 4)
    return bytes(blob)


def expect_code(data: bytes, code: str) -> None:
    with pytest.raises(TorchFileError) as err:
        inspect_bytes(data)
    assert err.value.code == code, err.value


STATE = (FIXTURES / "state_dict.pt").read_bytes()


@pytest.mark.parametrize("cut", [1, 22, 100, len(STATE) // 2])
def test_truncated_zip(cut: int) -> None:
    expect_code(STATE[:-cut], "TruncatedZip")


def test_missing_storage_entry() -> None:
    expect_code(rezip(STATE, drop="state_dict/data/0"), "MissingStorage")


def test_zeroed_local_header_and_pickle() -> None:
    info = zipfile.ZipFile(io.BytesIO(STATE)).getinfo("state_dict/data/1")
    blob = bytearray(STATE)
    blob[info.header_offset : info.header_offset + 30] = bytes(30)
    expect_code(bytes(blob), "BadLocalHeader")
    pkl = zipfile.ZipFile(io.BytesIO(STATE)).getinfo("state_dict/data.pkl")
    blob = bytearray(STATE)
    start = pkl.header_offset + 30 + len(pkl.filename) + len(pkl.extra)
    blob[start + 10 : start + 40] = bytes(30)
    expect_code(bytes(blob), "CrcMismatch")


def test_crc_check_finds_zeroed_storage_and_disabled_crcs() -> None:
    tf, _ = inspect_bytes(STATE)
    entry = tf.entries["state_dict/data/0"]
    blob = bytearray(STATE)
    blob[entry.data_offset : entry.data_offset + 4] = bytes(4)
    tf2, fh2 = inspect_bytes(bytes(blob))
    status = {c.name: c.status for c in check_crc(fh2, tf2.entries)}
    assert status["state_dict/data/0"] == "mismatch"
    assert sum(s == "ok" for s in status.values()) == len(status) - 1
    tf3, fh3 = inspect_bytes(zero_crcs(STATE))
    assert {c.status for c in check_crc(fh3, tf3.entries) if c.expected == 0} <= {"disabled", "ok"}
    assert "disabled" in {c.status for c in check_crc(fh3, tf3.entries)}


def _one_tensor_zip(numel: int, payload: int, size: tuple[int, int], offset: int = 0) -> bytes:
    """A hand-made torch zip holding one FloatStorage tensor."""
    pkl = (b"\x80\x02}X\x01\x00\x00\x00wctorch._utils\n_rebuild_tensor_v2\n"
           b"((X\x07\x00\x00\x00storagectorch\nFloatStorage\nX\x01\x00\x00\x000"
           b"X\x03\x00\x00\x00cpuJ" + struct.pack("<i", numel) + b"tQJ" + struct.pack("<i", offset)
           + b"J" + struct.pack("<i", size[0]) + b"J" + struct.pack("<i", size[1]) + b"\x86"
           + b"J" + struct.pack("<i", size[1]) + b"K\x01\x86\x89ccollections\nOrderedDict\n)RtRs.")
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_STORED) as z:
        z.writestr("archive/data.pkl", pkl)
        z.writestr("archive/data/0", bytes(payload))
    return out.getvalue()


def test_storage_and_tensor_extents() -> None:
    tf, fh = inspect_bytes(_one_tensor_zip(6, 24, (2, 3)))
    assert np.array_equal(read_tensor(fh, tf.tensors[0]), np.zeros((2, 3), np.float32))
    expect_code(_one_tensor_zip(6, 20, (2, 3)), "StorageTooSmall")
    expect_code(_one_tensor_zip(6, 24, (3, 3)), "TensorOutOfBounds")
    expect_code(_one_tensor_zip(6, 24, (2, 3), offset=1), "TensorOutOfBounds")


# -------------------------------------------------------------- hypothesis --
FUZZ_SOURCES = {stem: (FIXTURES / f"{stem}.pt").read_bytes() for stem in TORCH_FIXTURES}
FUZZ_SOURCES["no_crc_state"] = zero_crcs(STATE)  # lets damage reach the pickle walker


def exercise(data: bytes) -> None:
    """Everything a reader does with a file; only our errors may escape."""
    try:
        tf, fh = inspect_bytes(data)
        check_crc(fh, tf.entries)
        for tensor in tf.tensors:
            tensor_bytes(tensor)
            read_tensor(fh, tensor)
    except TensorsError:
        pass


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(sorted(FUZZ_SOURCES)), st.data())
def test_random_damage_only_raises_our_errors(stem: str, draw: st.DataObject) -> None:
    blob = bytearray(FUZZ_SOURCES[stem])
    for _ in range(draw.draw(st.integers(1, 8))):
        pos = draw.draw(st.integers(0, len(blob) - 1))
        blob[pos] = draw.draw(st.integers(0, 255))
    if draw.draw(st.booleans()):
        blob = blob[: draw.draw(st.integers(0, len(blob)))]
    exercise(bytes(blob))


@settings(max_examples=200, deadline=None)
@given(st.data())
def test_random_pickle_damage_only_raises_our_errors(draw: st.DataObject) -> None:
    src = zipfile.ZipFile(io.BytesIO(STATE))
    pkl = bytearray(src.read("state_dict/data.pkl"))
    for _ in range(draw.draw(st.integers(1, 4))):
        pkl[draw.draw(st.integers(0, len(pkl) - 1))] = draw.draw(st.integers(0, 255))
    exercise(rezip(STATE, replace={"state_dict/data.pkl": bytes(pkl)}))
