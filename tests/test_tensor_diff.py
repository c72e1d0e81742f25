"""Tensor diff of two training checkpoints (``lastgood diff`` on a Trainer output folder): the numbers
equal numpy's over the same tensors, a NaN that appears is reported (never a crash), and tensors
added, removed or reshaped are listed."""

from __future__ import annotations

import json
import shutil
import struct
from pathlib import Path

import numpy as np
import pytest

from lastgood.investigate.tensordiff import aligned
from tests.helpers import ROOT, lastgood_cli

TRAINER = ROOT / "sample_data" / "training" / "hf_trainer"


def _load(path: Path) -> dict[str, np.ndarray]:
    """A safetensors file's float32 tensors, read by hand (header + offsets): the reference."""
    data = path.read_bytes()
    size = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8:8 + size])
    base = 8 + size
    out = {}
    for name, info in header.items():
        if name == "__metadata__" or info["dtype"] != "F32":
            continue
        begin, end = info["data_offsets"]
        out[name] = np.frombuffer(data[base + begin:base + end], dtype="<f4").reshape(info["shape"]).astype(np.float64)
    return out


@pytest.fixture
def trainer(tmp_path: Path) -> Path:
    shutil.copytree(TRAINER, tmp_path / "run")
    return tmp_path / "run"


def _diff(store: Path, a: str, b: str, home: Path) -> dict:
    done = lastgood_cli("diff", str(store), a, b, "--format", "json", home=home)
    assert done.returncode in (0, 1), done.stderr
    return json.loads(done.stdout)


def test_the_numbers_are_numpys(trainer: Path, tmp_path: Path) -> None:
    result = _diff(trainer, "checkpoint-8", "checkpoint-40", tmp_path / "home")
    a, b = _load(trainer / "checkpoint-8" / "model.safetensors"), _load(trainer / "checkpoint-40" / "model.safetensors")
    rows = {r["name"]: r for r in result["tensors"]}
    assert set(rows) == set(a) and result["summary"]["compared"] == len(a)
    for name, row in rows.items():
        delta = b[name] - a[name]
        relative = np.linalg.norm(delta) / np.linalg.norm(a[name])
        cosine = float(np.dot(a[name].ravel(), b[name].ravel()) / (np.linalg.norm(a[name]) * np.linalg.norm(b[name])))
        assert row["relative_change"] == pytest.approx(relative, rel=1e-5), name
        assert row["max_abs_diff"] == pytest.approx(np.abs(delta).max(), rel=1e-5), name
        assert row["cosine"] == pytest.approx(cosine, rel=1e-5), name
    changes = [row["relative_change"] for row in result["tensors"]]
    assert changes == sorted(changes, reverse=True)  # most changed first
    assert {layer["layer"] for layer in result["layers"]} >= {"model.layers.0", "model.layers.1"}


def test_a_nan_that_appears_is_reported_not_a_crash(trainer: Path, tmp_path: Path) -> None:
    target = trainer / "checkpoint-40" / "model.safetensors"
    data = bytearray(target.read_bytes())
    size = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8:8 + size])
    name = "model.layers.1.mlp.up_proj.weight"
    begin = 8 + size + header[name]["data_offsets"][0]
    data[begin + 12:begin + 16] = struct.pack("<f", float("nan"))
    target.write_bytes(bytes(data))
    result = _diff(trainer, "checkpoint-8", "checkpoint-40", tmp_path / "home")
    row = next(r for r in result["tensors"] if r["name"] == name)
    assert row["nan_appeared"] and row["nan_b"] == 1 and row["error"] is None
    assert result["summary"]["nan_appeared"] == 1
    text = lastgood_cli("diff", str(trainer), "checkpoint-8", "checkpoint-40", home=tmp_path / "home").stdout
    assert "NaN appeared" in text


def test_two_differently_chunked_streams_pair_up_element_by_element() -> None:
    values = np.arange(1000, dtype="<f4").tobytes()
    chunks_a = [values[i:i + 333] for i in range(0, len(values), 333)]
    chunks_b = [values[i:i + 1000] for i in range(0, len(values), 1000)]
    pairs = list(aligned(chunks_a, chunks_b, 4))
    assert all(len(x) == len(y) and len(x) % 4 == 0 for x, y in pairs)
    assert b"".join(bytes(x) for x, _ in pairs) == values == b"".join(bytes(y) for _, y in pairs)
    with pytest.raises(ValueError):
        list(aligned([values], [values[:-4]], 4))


def test_a_state_store_is_not_given_a_tensor_diff(tmp_path: Path) -> None:
    """Agent stores keep the state diff's shape (changes with JSON Pointer paths)."""
    rows = json.loads(lastgood_cli("ls", str(ROOT / "sample_data" / "agents"), "--run", "trading-003",
                                   "--format", "json", home=tmp_path / "home").stdout)
    result = json.loads(lastgood_cli("diff", str(ROOT / "sample_data" / "agents"), rows[0]["checkpoint_id"],
                                     rows[1]["checkpoint_id"], "--format", "json", home=tmp_path / "home").stdout)
    assert "tensors" not in result and "changes" in result
