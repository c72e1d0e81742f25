"""torch.distributed.checkpoint metadata: parsed without torch, extents checked."""

from __future__ import annotations

import io
import json
import pickle
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lastgood.readers.tensors.dcp import (
    DcpBytes, DcpChunk, DcpMetadata, DcpStorageItem, DcpTensor, check_extents, parse_dcp_metadata,
)
from lastgood.readers.tensors.errors import DcpError, PickleError, TensorsError, UnsafeGlobal
from lastgood.readers.tensors.torchzip import inspect_torch_file, read_tensor

FIXTURES = Path(__file__).parent / "fixtures" / "tensors"
FOLDER = FIXTURES / "dcp"
EXPECTED = json.loads((FIXTURES / "dcp.expected.json").read_text())
METADATA = (FOLDER / ".metadata").read_bytes()


def sizes() -> dict[str, int]:
    return {p.name: p.stat().st_size for p in FOLDER.iterdir() if p.name != ".metadata"}


def test_metadata_matches_torch() -> None:
    meta = parse_dcp_metadata(METADATA)
    got = {}
    for fqn, entry in meta.state_dict.items():
        if isinstance(entry, DcpBytes):
            got[fqn] = "bytes"
        else:
            got[fqn] = {"dtype": entry.dtype, "size": list(entry.size),
                        "chunks": [[list(c.offsets), list(c.sizes)] for c in entry.chunks]}
    assert got == EXPECTED["state_dict"]
    storage = sorted([i.fqn, None if i.offset is None else list(i.offset), i.index,
                      i.relative_path, i.file_offset, i.length] for i in meta.storage)
    assert storage == EXPECTED["storage"]
    assert meta.version == "1.0.0" and meta.save_id


def test_extents_of_real_folder_are_clean() -> None:
    assert sizes() == EXPECTED["sizes"]
    assert check_extents(parse_dcp_metadata(METADATA), sizes()) == []


def test_items_are_torch_files() -> None:
    meta = parse_dcp_metadata(METADATA)
    values = {}
    for item in meta.storage:
        blob = (FOLDER / item.relative_path).read_bytes()[item.file_offset : item.file_offset + item.length]
        tf = inspect_torch_file(io.BytesIO(blob), len(blob))
        if isinstance(meta.state_dict[item.fqn], DcpTensor):
            (tensor,) = tf.tensors
            assert tensor.ref.dtype == meta.state_dict[item.fqn].dtype
            values[item.fqn] = read_tensor(io.BytesIO(blob), tensor)
        else:
            values[item.fqn] = tf.root
    assert np.array_equal(values["model.w"], np.arange(6, dtype=np.float32).reshape(2, 3))
    assert np.array_equal(values["model.b"], np.ones(3, np.float32))
    assert values["step"] == 7 and values["opt.lr"] == 0.1


def test_files_shorter_than_recorded() -> None:
    meta = parse_dcp_metadata(METADATA)
    real = sizes()
    name = next(iter(real))
    problems = check_extents(meta, {name: real[name] - 1})
    assert [p.code for p in problems] == ["BeyondEnd"]
    last = max(meta.storage, key=lambda i: i.file_offset)
    assert problems[0].fqn == last.fqn and problems[0].relative_path == name
    cut = check_extents(meta, {name: 10})
    beyond = [i for i in meta.storage if i.file_offset + i.length > 10]
    assert {p.code for p in cut} == {"BeyondEnd"} and len(cut) == len(beyond)
    missing = check_extents(meta, {})
    assert {p.code for p in missing} == {"MissingFile"} and len(missing) == len(meta.storage)


def test_structural_problems() -> None:
    tensor = DcpTensor("w", "F32", (4,), (DcpChunk((0,), (2,)), DcpChunk((2,), (3,))))
    meta = DcpMetadata(
        {"w": tensor, "s": DcpBytes("s")},
        (DcpStorageItem("w", (0,), 0, "a.distcp", 0, 10),
         DcpStorageItem("w", (2,), 1, "a.distcp", 5, 10),
         DcpStorageItem("ghost", None, None, "a.distcp", 15, 1),
         DcpStorageItem("w", (9,), 2, "../escape", 0, 1)),
        "1.0.0", None, None,
    )
    codes = sorted(p.code for p in check_extents(meta, {"a.distcp": 16}))
    assert codes == ["BadRelativePath", "ChunkOutOfBounds", "MissingStorageData", "Overlap", "UnknownFqn"]


def test_unsafe_and_malformed_metadata() -> None:
    with pytest.raises(UnsafeGlobal):
        parse_dcp_metadata(pickle.dumps(__import__("os").system, 4))
    with pytest.raises(PickleError):
        parse_dcp_metadata(METADATA[: len(METADATA) // 2])
    with pytest.raises(DcpError):
        parse_dcp_metadata(pickle.dumps({"not": "metadata"}, 4))


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_random_damage_only_raises_our_errors(draw: st.DataObject) -> None:
    blob = bytearray(METADATA)
    for _ in range(draw.draw(st.integers(1, 6))):
        blob[draw.draw(st.integers(0, len(blob) - 1))] = draw.draw(st.integers(0, 255))
    if draw.draw(st.booleans()):
        blob = blob[: draw.draw(st.integers(0, len(blob)))]
    try:
        meta = parse_dcp_metadata(bytes(blob))
        check_extents(meta, sizes())
    except TensorsError:
        pass
