"""The safetensors reader on real save_pretrained output (hf_base, hf_sharded: max_shard_size 16KB, a
PEFT LoRA adapter) and a plain folder of .safetensors files: the kit, the reference's error codes,
index ↔ shards ↔ headers, data-depth statistics, the fast header path against the exact parser."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import numpy as np
import pytest
from lastgood.checks import Check
from lastgood.readers.base import TensorSummary, as_table, record_from_row
from lastgood.readers.testing import Damage, ReaderConformance

from tests.training_stores import (
    TRAINING,
    copy_tree,
    lie_about_header_length,
    set_mtime,
    truncate_half,
    write_into_tensor,
    zero_tensor,
)

T0 = 1_700_000_000


def write_plain(folder: Path, step: int, seed: int) -> Path:
    from safetensors.numpy import save_file

    rng = np.random.default_rng(seed)
    path = folder / f"step-{step}.safetensors"
    save_file({"w": rng.standard_normal((16, 8), dtype=np.float32), "b": np.zeros(8, np.float32) + 0.5,
               "count": np.array([step], np.int64)}, str(path), metadata={"format": "pt"})
    set_mtime(path, T0 + step)
    return path


def make_models(tmp: Path) -> Path:
    root = tmp / "models"
    for name in ("hf_base", "hf_sharded", "peft_adapter"):
        copy_tree(TRAINING / name, root / name)
    plain = root / "snapshots"
    plain.mkdir()
    for step in (100, 200, 300):
        write_plain(plain, step, step)
    return root


class TestSafetensorsKit(ReaderConformance):
    reader_name = "safetensors"

    def make_store(self, tmp: Path) -> str:
        return str(make_models(tmp))

    def append(self, url: str) -> int:
        write_plain(Path(url) / "snapshots", 400, 4)
        return 1

    def damages(self) -> list[Damage]:
        def sharded(url: str) -> Path:
            return Path(url) / "hf_sharded"

        def bad_index(url: str) -> None:
            index = sharded(url) / "model.safetensors.index.json"
            data = json.loads(index.read_text())
            data["weight_map"]["lm_head.weight"] = "model-00001-of-00002.safetensors"  # in shard 2
            index.write_text(json.dumps(data))

        return [
            Damage("a truncated shard", lambda url: truncate_half(sharded(url) / "model-00002-of-00002.safetensors"),
                   {Check.SAFETENSORS_HEADER}, "structure"),
            Damage("a missing shard", lambda url: (sharded(url) / "model-00001-of-00002.safetensors").unlink(),
                   {Check.SHARD_MISSING}, "structure"),
            Damage("an index mapping a tensor to the wrong shard", bad_index, {Check.INDEX_MISMATCH}, "structure"),
            Damage("an index that is not JSON",
                   lambda url: (sharded(url) / "model.safetensors.index.json").write_text("{weight_map"),
                   {Check.INDEX_MISMATCH}, "structure"),
            Damage("a header length lie", lambda url: lie_about_header_length(Path(url) / "hf_base" / "model.safetensors"),
                   {Check.SAFETENSORS_HEADER}, "structure"),
            Damage("a zero-byte file", lambda url: (Path(url) / "snapshots" / "step-200.safetensors").write_bytes(b""),
                   {Check.INCOMPLETE}, "structure"),
            Damage("NaN in an adapter weight",
                   lambda url: write_into_tensor(Path(url) / "peft_adapter" / "adapter_model.safetensors"),
                   {Check.NON_FINITE}),
            Damage("an all-zero weight", lambda url: zero_tensor(Path(url) / "snapshots" / "step-100.safetensors", "w"),
                   {Check.ZERO_TENSOR}),
        ]


def _open(url: str):
    from lastgood.readers.registry import open_reader

    return open_reader(url, "safetensors")


def _records(reader) -> dict:
    rows = [r for b in reader.scan().checkpoints for r in as_table(b).to_pylist()]
    return {(r["run_id"], r["checkpoint_id"]): record_from_row(r) for r in rows}


def test_one_checkpoint_per_model_and_per_plain_file(tmp_path: Path) -> None:
    url = str(make_models(tmp_path))
    with _open(url) as reader:
        records = _records(reader)
    assert set(records) == {("hf_base", "model.safetensors"), ("hf_sharded", "model.safetensors.index.json"),
                            ("peft_adapter", "adapter_model.safetensors"), ("snapshots", "step-100.safetensors"),
                            ("snapshots", "step-200.safetensors"), ("snapshots", "step-300.safetensors")}
    assert records[("snapshots", "step-200.safetensors")].step == 200
    assert records[("snapshots", "step-200.safetensors")].parent_id == "step-100.safetensors"
    sharded = records[("hf_sharded", "model.safetensors.index.json")]
    assert sharded.size_bytes == 1756 + 16720 + 12344 and sharded.metadata["kind"] == "sharded"
    adapter = records[("peft_adapter", "adapter_model.safetensors")]
    assert adapter.metadata["peft_type"] == "LORA" and adapter.metadata["base_model_name_or_path"] == "hf_base"


def test_sharded_state_and_tensors_follow_the_index(tmp_path: Path) -> None:
    from safetensors.numpy import load_file

    url = str(make_models(tmp_path))
    folder = Path(url) / "hf_sharded"
    expected = {**load_file(str(folder / "model-00001-of-00002.safetensors")),
                **load_file(str(folder / "model-00002-of-00002.safetensors"))}
    with _open(url) as reader:
        record = _records(reader)[("hf_sharded", "model.safetensors.index.json")]
        entries = {e.name: e for e in reader.tensors(record)}
        assert set(entries) == set(expected)
        for name in ("lm_head.weight", "model.norm.weight"):
            data = b"".join(bytes(c) for c in reader.read_tensor(record, entries[name], 256))
            assert data == expected[name].tobytes()
        state = reader.load_state(record)
        assert state["index"]["metadata"]["total_size"] == 26944 and len(state["index"]["shards"]) == 2
        assert state["metadata"] == {"format": "pt"} and state["config"]["model_type"] == "llama"
        assert list(reader.check_checkpoints([record])) == []
        assert reader.read_blob(record) == (folder / "model.safetensors.index.json").read_bytes()


def test_data_depth_statistics_match_numpy(tmp_path: Path) -> None:
    from safetensors.numpy import load_file

    url = str(make_models(tmp_path))
    path = Path(url) / "snapshots" / "step-300.safetensors"
    values = load_file(str(path))
    with _open(url) as reader:
        record = _records(reader)[("snapshots", "step-300.safetensors")]
        out = list(reader.check_checkpoints([record], read_data=True))
    summaries = {s.name: s for s in out if isinstance(s, TensorSummary)}
    w = values["w"].astype(np.float64)
    assert summaries["w"].mean == pytest.approx(w.mean()) and summaries["w"].norm == pytest.approx(np.linalg.norm(w))
    assert summaries["count"].dtype == "I64" and summaries["count"].max == 300
    assert summaries["b"].min == summaries["b"].max == 0.5
    assert [f for f in out if not isinstance(f, TensorSummary)] == []


def test_non_finite_values_are_counted_by_kind(tmp_path: Path) -> None:
    url = str(make_models(tmp_path))
    path = Path(url) / "snapshots" / "step-100.safetensors"
    write_into_tensor(path, "w", float("nan"), 2)
    write_into_tensor(path, "b", float("-inf"), 1)
    with _open(url) as reader:
        record = _records(reader)[("snapshots", "step-100.safetensors")]
        out = list(reader.check_checkpoints([record], read_data=True))
    summaries = {s.name: s for s in out if isinstance(s, TensorSummary)}
    assert (summaries["w"].nan, summaries["b"].neginf) == (2, 1)
    assert summaries["w"].numel == 128 and summaries["w"].mean is not None
    assert {f.check for f in out if not isinstance(f, TensorSummary)} == {Check.NON_FINITE}


def test_a_norm_jump_between_consecutive_files_is_a_warning(tmp_path: Path) -> None:
    from safetensors.numpy import save_file

    url = str(make_models(tmp_path))
    path = Path(url) / "snapshots" / "step-300.safetensors"
    save_file({"w": np.full((16, 8), 50.0, np.float32), "b": np.zeros(8, np.float32) + 0.5,
               "count": np.array([300], np.int64)}, str(path))
    set_mtime(path, T0 + 300)
    with _open(url) as reader:
        records = _records(reader)
        ordered = [records[("snapshots", f"step-{s}.safetensors")] for s in (100, 200, 300)]
        found = [f for f in reader.check_checkpoints(ordered, read_data=True) if not isinstance(f, TensorSummary)]
    assert [(f.check, f.checkpoint_id) for f in found] == [(Check.NORM_JUMP, "step-300.safetensors")]
    assert "tensor w" in found[0].message


def test_errors_name_the_reference_codes(tmp_path: Path) -> None:
    url = str(make_models(tmp_path))
    base = Path(url) / "hf_base" / "model.safetensors"
    data = bytearray(base.read_bytes())
    data += b"\x00" * 4  # bytes no tensor covers
    base.write_bytes(bytes(data))
    with _open(url) as reader:
        record = _records(reader)[("hf_base", "model.safetensors")]
        found = list(reader.check_checkpoints([record]))
    assert [f.check for f in found] == [Check.SAFETENSORS_HEADER]
    assert "MetadataIncompleteBuffer" in found[0].message and found[0].severity == "error"


@pytest.mark.parametrize("header", [
    b'{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}',
    b'{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}',
    b'{"a":{"dtype":"F32","dtype":"F32","shape":[2],"data_offsets":[0,8]}}',
    b'{"__metadata__":{"k":"v"},"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}',
    b'{"__metadata__":{"k":"v"},"__metadata__":null,"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}',
    b'{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8],"extra":[1,[2]]}}',
    b'{"a":{"dtype":"F32","shape":[-0],"data_offsets":[0,0]}}',
    b'{"a":{"dtype":"F32","shape":[2.0],"data_offsets":[0,8]}}',
    b'{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}  ',
    b'{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}x',
    b'{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"I8","shape":[],"data_offsets":[8,9]}}',
    b'{"a\\u00e9":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}',
    b'{"a":{"dtype":"F4","shape":[3],"data_offsets":[0,2]}}',
    b'{"a":["F32",[2],[0,8]]}',
    b'[]',
])
def test_the_fast_header_path_agrees_with_the_exact_parser(header: bytes) -> None:
    from lastgood.readers.modelfiles.fastpaths import read_header
    from lastgood.readers.tensors.errors import SafetensorsError
    from lastgood.readers.tensors.safetensors import parse_header_bytes

    data = struct.pack("<Q", len(header)) + header + bytes(9)
    for size in (len(data) - 1, len(data)):
        blob = data[:size]
        try:
            exact = parse_header_bytes(blob)
        except SafetensorsError as exc:
            exact = exc.code
        try:
            fast = read_header(lambda off, n, blob=blob: blob[off:off + n], len(blob))
        except SafetensorsError as exc:
            fast = exc.code
        assert fast == exact


def test_the_fast_pickle_scan_agrees_with_the_exact_one() -> None:
    import pickle
    import zipfile

    from lastgood.readers.modelfiles.fastpaths import pickle_globals
    from lastgood.readers.tensors.errors import TensorsError
    from lastgood.readers.tensors.pickle_walk import check_globals
    from lastgood.readers.tensors.torch_pickle import TORCH_ALLOW

    samples = [pickle.dumps({"a": [1, 2.5, "x", b"y", None, True]}, protocol=p) for p in range(6)]
    samples.append(b"\x80\x02cos\nsystem\nX\x02\x00\x00\x00ls\x85R.")
    samples.append(b"\x80\x02X\x0c\x00\x00\x00cos\nsystem\n0N.")  # the name is inside a string: no global
    samples.append(b"\x80\x02X\xff\x00\x00\x00short.")  # truncated
    for path in sorted(TRAINING.rglob("*")):
        if path.suffix in (".pt", ".pth", ".bin", ".ckpt") and zipfile.is_zipfile(path):
            with zipfile.ZipFile(path) as archive:
                samples += [archive.read(n) for n in archive.namelist() if n.endswith("data.pkl")]

    def verdict(scan, data: bytes) -> object:
        try:
            return scan(data, TORCH_ALLOW)
        except TensorsError as exc:
            return (type(exc).__name__, exc.code)
    for data in samples:
        assert verdict(pickle_globals, data) == verdict(check_globals, data)


def test_sniffing_reads_contents_not_names(tmp_path: Path) -> None:
    from lastgood.readers.registry import load_reader_class

    cls = load_reader_class("safetensors")
    fake = tmp_path / "fake"
    fake.mkdir()
    (fake / "model.safetensors").write_bytes(b"not a safetensors file at all")
    assert not cls.sniff(str(fake))
    real = tmp_path / "real"
    real.mkdir()
    write_plain(real, 1, 1)
    assert cls.sniff(str(real))
    assert not cls.sniff(str(tmp_path / "missing"))


def test_the_file_sha256_is_taken_only_when_a_recorded_one_is_there_to_compare(tmp_path: Path) -> None:
    """One pass either way: the tensors' statistics and sha256 do not depend on whether the file's
    own sha256 is computed; it is computed (and compared) when a checksum is recorded beside the
    file — a finite change that no other check sees is caught then, and only then."""
    import hashlib

    from lastgood.readers.modelfiles.datascan import TensorScan, scan_file
    from lastgood.readers.modelfiles.fsio import Folder
    from tests.training_stores import header_of

    url = str(make_models(tmp_path))
    path = Path(url) / "snapshots" / "step-200.safetensors"
    raw, (n, header) = path.read_bytes(), header_of(path)

    def scan(file_sha256: bool):
        tensors = [TensorScan(name, v["dtype"], tuple(v["shape"]), 8 + n + v["data_offsets"][0],
                              8 + n + v["data_offsets"][1]) for name, v in header.items() if name != "__metadata__"]
        with Folder(url).open("snapshots/step-200.safetensors") as f:
            return scan_file(f, "snapshots/step-200.safetensors", tensors, file_sha256=file_sha256)
    without, with_sum = scan(False), scan(True)
    assert without.sha256 is None and with_sum.sha256 == hashlib.sha256(raw).hexdigest()
    assert without.read == with_sum.read == len(raw)
    for a, b in zip(without.tensors, with_sum.tensors, strict=True):
        assert a.sha256 == b.sha256 == hashlib.sha256(raw[a.start:a.end]).hexdigest()
        assert a.stats is not None and b.stats is not None and a.stats.as_dict() == b.stats.as_dict()

    def data_checks() -> list:
        with _open(url) as reader:
            record = _records(reader)[("snapshots", "step-200.safetensors")]
            return [f.check for f in reader.check_checkpoints([record], read_data=True)
                    if not isinstance(f, TensorSummary)]
    write_into_tensor(path, "w", 7.0, 1)  # finite: no NaN, no zero tensor, no norm jump
    assert data_checks() == []
    side = path.with_name(path.name + ".sha256")  # sha256sum's line, beside the file
    side.write_text(f"{hashlib.sha256(raw).hexdigest()}  {path.name}\n")
    assert data_checks() == [Check.SHA256_MISMATCH]
    side.write_text(hashlib.sha256(path.read_bytes()).hexdigest() + "\n")
    assert data_checks() == []
    side.unlink()
    (path.parent / "SHA256SUMS").write_text(f"{hashlib.sha256(raw).hexdigest()}  {path.name}\n")
    assert data_checks() == [Check.SHA256_MISMATCH]


def test_the_listing_is_checkpoints_table_without_importing_pandas(tmp_path: Path) -> None:
    """The listing's table is ``checkpoints_table``'s, value for value, built from buffers: pandas
    (imported by ``pa.array``, ~0.4 s of a cold command) stays out of ``lastgood verify FOLDER``."""
    import subprocess
    import sys

    from lastgood.readers.base import checkpoints_table

    url = str(make_models(tmp_path))
    with _open(url) as reader:
        tables = list(reader.scan().checkpoints)
        models = reader.models()
        records = [r for run in sorted({run for run, _ in models})
                   for r in reader._records(run, models, [f"{k[0]}\x00{k[1]}" for k in models], True)]
    assert len(tables) == 1 and tables[0].equals(checkpoints_table(records))
    code = ("import sys; from lastgood.readers.registry import open_reader; "
            f"r = open_reader({url!r}, 'safetensors'); t = list(r.scan().checkpoints)[0]; "
            "print(t.num_rows, 'pandas' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.stdout.split() == ["6", "False"], done.stderr
