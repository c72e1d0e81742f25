"""safetensors header validation: same verdict and error variant as the reference library."""

from __future__ import annotations

import json
import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lastgood.readers.tensors.dtypes import SAFETENSORS_DTYPES
from lastgood.readers.tensors.errors import SafetensorsError
from lastgood.readers.tensors.safetensors import (
    check_tensor_view, parse_header, parse_header_bytes, parse_index,
)

safetensors = pytest.importorskip("safetensors")

# Display strings of safetensors::SafeTensorError → variant names.
_MESSAGES = {
    "header too small": "HeaderTooSmall", "header too large": "HeaderTooLarge",
    "invalid header length": "InvalidHeaderLength", "invalid UTF-8 in header": "InvalidHeader",
    "invalid JSON in header": "InvalidHeaderDeserialization",
    "invalid offset for tensor": "InvalidOffset",
    "invalid shape, data type, or offset for tensor": "TensorInvalidInfo",
    "incomplete metadata, file not fully covered": "MetadataIncompleteBuffer",
    "overflow computing buffer size": "ValidationOverflow",
    "The slice is slicing for subbytes dtypes": "MisalignedSlice",
}


def reference(data: bytes) -> str:
    """The reference verdict: 'OK' or the error variant name."""
    try:
        safetensors.deserialize(data)
    except Exception as exc:  # SafetensorError
        text = str(exc)
        for needle, code in _MESSAGES.items():
            if needle in text:
                return code
        return f"unmapped: {text}"
    return "OK"


def ours(data: bytes) -> str:
    """Our verdict."""
    try:
        parse_header_bytes(data)
    except SafetensorsError as exc:
        return exc.code
    return "OK"


class Raw(str):
    """JSON text inserted verbatim (numbers like -0, 1e400, NaN)."""


class Obj(list):
    """A JSON object as ordered pairs (duplicates allowed)."""


def dump(value: object) -> str:
    """Serialize, honouring Raw and Obj."""
    if isinstance(value, Raw):
        return str(value)
    if isinstance(value, Obj):
        return "{" + ",".join(f"{json.dumps(k)}:{dump(v)}" for k, v in value) + "}"
    if isinstance(value, list):
        return "[" + ",".join(dump(v) for v in value) + "]"
    return json.dumps(value)


def file_of(header: str | bytes, data_len: int, n_delta: int = 0) -> bytes:
    """8-byte length + header + zero data."""
    raw = header.encode() if isinstance(header, str) else header
    return struct.pack("<Q", max(len(raw) + n_delta, 0)) + raw + b"\0" * data_len


def t(dtype: str, shape: list, begin: int, end: int) -> Obj:
    """A tensor-info object."""
    return Obj([("dtype", dtype), ("shape", shape), ("data_offsets", [begin, end])])


EXPLICIT = {
    "empty file": b"",
    "7 bytes": b"\0" * 7,
    "n too big for file": struct.pack("<Q", 50) + b"{}",
    "n over limit": struct.pack("<Q", 100_000_001) + b"{}",
    "n at limit, short file": struct.pack("<Q", 100_000_000) + b"{}",
    "n = 0": file_of("", 0),
    "empty object": file_of("{}", 0),
    "leading space (no InvalidHeaderStart in 0.8)": file_of(' {}', 0),
    "trailing spaces": file_of("{}   ", 0),
    "trailing NUL": file_of("{}\0", 0),
    "form feed": file_of("{}\x0c", 0),
    "BOM": file_of("\ufeff{}", 0),
    "bad utf8": file_of(b'{"\xff":1}', 0),
    "top array": file_of("[]", 0),
    "basic": file_of(dump(Obj([("a", t("F32", [2], 0, 8))])), 8),
    "extra data": file_of(dump(Obj([("a", t("F32", [2], 0, 8))])), 9),
    "short data": file_of(dump(Obj([("a", t("F32", [2], 0, 8))])), 7),
    "seq form": file_of('{"a":["F32",[2],[0,8]]}', 8),
    "seq form 4": file_of('{"a":["F32",[2],[0,8],1]}', 8),
    "enum map form": file_of('{"a":{"dtype":{"F32":null},"shape":[2],"data_offsets":[0,8]}}', 8),
    "enum map value": file_of('{"a":{"dtype":{"F32":1},"shape":[2],"data_offsets":[0,8]}}', 8),
    "-0 in shape": file_of('{"a":{"dtype":"F32","shape":[-0],"data_offsets":[0,0]}}', 0),
    "float shape": file_of('{"a":{"dtype":"F32","shape":[1.0],"data_offsets":[0,4]}}', 4),
    "bool shape": file_of('{"a":{"dtype":"F32","shape":[true],"data_offsets":[0,4]}}', 4),
    "u64 overflow literal": file_of('{"a":{"dtype":"F32","shape":[18446744073709551616],"data_offsets":[0,0]}}', 0),
    "shape overflow": file_of('{"a":{"dtype":"F32","shape":[18446744073709551615,2,0],"data_offsets":[0,0]}}', 0),
    "dup field": file_of('{"a":{"dtype":"F32","dtype":"F32","shape":[2],"data_offsets":[0,8]}}', 8),
    "dup __metadata__": file_of('{"__metadata__":null,"__metadata__":null}', 0),
    "dup tensor, last wins": file_of(dump(Obj([("a", t("F32", [2], 0, 8)), ("a", t("F32", [1], 0, 4))])), 4),
    "metadata int value": file_of('{"__metadata__":{"k":1}}', 0),
    "unknown field NaN": file_of('{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4],"x":NaN}}', 4),
    "unknown field 1e400": file_of('{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4],"x":1e400}}', 4),
    "unknown field 400 digits": file_of('{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4],"x":1' + "0" * 400 + "}}", 4),
    "lone surrogate key": file_of('{"a\\ud800":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}', 4),
    "surrogate pair key": file_of('{"a\\ud83d\\ude00":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}', 4),
    "depth 127": file_of('{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4],"x":' + "[" * 125 + "]" * 125 + "}}", 4),
    "depth 128": file_of('{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4],"x":' + "[" * 126 + "]" * 126 + "}}", 4),
    "F4 odd": file_of(dump(Obj([("a", t("F4", [3], 0, 2))])), 2),
    "F4 scalar": file_of(dump(Obj([("a", t("F4", [], 0, 0))])), 0),
    "F6 four": file_of(dump(Obj([("a", t("F6_E2M3", [4], 0, 3))])), 3),
    "gap": file_of(dump(Obj([("a", t("F32", [1], 0, 4)), ("b", t("F32", [1], 8, 12))])), 12),
    "end before begin": file_of(dump(Obj([("a", t("F32", [0], 0, 0)), ("b", t("F32", [0], 5, 3))])), 0),
    "huge end": file_of(dump(Obj([("a", t("F32", [0], 0, 2**64 - 1))])), 0),
}


@pytest.mark.parametrize("name", sorted(EXPLICIT))
def test_explicit_cases_match_reference(name: str) -> None:
    data = EXPLICIT[name]
    assert ours(data) == reference(data)


def test_every_dtype_name_and_width_matches_reference() -> None:
    for dtype, bits in SAFETENSORS_DTYPES.items():
        numel = 8  # whole bytes for every width
        size = numel * bits // 8
        good = file_of(dump(Obj([("x", t(dtype, [numel], 0, size))])), size)
        bad = file_of(dump(Obj([("x", t(dtype, [numel], 0, size + 1))])), size + 1)
        assert ours(good) == reference(good) == "OK", dtype
        assert ours(bad) == reference(bad) == "TensorInvalidInfo", dtype
    unknown = file_of(dump(Obj([("x", t("F128", [1], 0, 16))])), 16)
    assert ours(unknown) == reference(unknown) == "InvalidHeaderDeserialization"


def test_parse_header_result_and_two_reads() -> None:
    header = dump(Obj([("__metadata__", Obj([("format", "pt")])),
                       ("b", t("BF16", [2, 2], 16, 24)), ("a", t("F32", [2, 2], 0, 16))]))
    data = file_of(header, 24)
    calls = []

    def read_range(offset: int, size: int) -> bytes:
        calls.append((offset, size))
        return data[offset : offset + size]

    parsed = parse_header(read_range, len(data))
    assert len(calls) == 2
    assert parsed.metadata == {"format": "pt"}
    assert [x.name for x in parsed.tensors] == ["a", "b"]
    base = 8 + len(header)
    assert parsed.data_start == base
    a, b = parsed.tensors
    assert (a.begin, a.end, a.shape, a.dtype, a.numel) == (base, base + 16, (2, 2), "F32", 4)
    assert (b.begin, b.end, b.nbytes) == (base + 16, base + 24, 8)
    assert parsed.by_name()["b"] is b


def test_real_library_files_parse(tmp_path) -> None:
    np = pytest.importorskip("numpy")
    from safetensors.numpy import save

    arrays = {"w": np.ones((3, 5), np.float32), "i": np.arange(7, dtype=np.int64),
              "e": np.zeros((0, 4), np.float16), "s": np.array(3.0, np.float64)}
    data = save(arrays, metadata={"format": "np"})
    parsed = parse_header_bytes(data)
    assert {x.name: (x.dtype, x.shape) for x in parsed.tensors} == {
        "w": ("F32", (3, 5)), "i": ("I64", (7,)), "e": ("F16", (0, 4)), "s": ("F64", ())}
    for entry in parsed.tensors:
        assert data[entry.begin : entry.end] == arrays[entry.name].tobytes()


def test_check_tensor_view() -> None:
    check_tensor_view("F32", (2,), 8)
    with pytest.raises(SafetensorsError) as err:
        check_tensor_view("F32", (2,), 7)
    assert err.value.code == "InvalidTensorView"
    with pytest.raises(SafetensorsError) as err:
        check_tensor_view("F4", (3,), 2)
    assert err.value.code == "MisalignedSlice"


def test_short_read_is_reported() -> None:
    data = file_of("{}", 0)
    with pytest.raises(SafetensorsError) as err:
        parse_header(lambda off, size: data[off : off + size][:1], len(data))
    assert err.value.code == "ShortRead"


# ---------------------------------------------------------------- hypothesis --
DTYPES = sorted(SAFETENSORS_DTYPES)
ODD_NUMBERS = [Raw("-0"), Raw("1.0"), Raw("1e2"), Raw("-1"), Raw("18446744073709551616"),
               Raw("1e400"), Raw("NaN"), True, None, "2"]


@st.composite
def headers(draw) -> tuple[bytes, bool]:
    """A safetensors file, valid or mutated; returns (bytes, offsets_unique)."""
    count = draw(st.integers(0, 4))
    pairs: list = []
    offset = 0
    for i in range(count):
        dtype = draw(st.sampled_from(DTYPES))
        shape = draw(st.lists(st.integers(0, 4), max_size=3))
        numel = 1
        for d in shape:
            numel *= d
        nbits = numel * SAFETENSORS_DTYPES[dtype]
        size = nbits // 8 if nbits % 8 == 0 else draw(st.integers(0, 3))
        pairs.append([f"t{i}", dtype, shape, [offset, offset + size]])
        offset += size
    data_len = offset
    mutation = draw(st.sampled_from(
        ["none", "none", "offset", "dtype", "shape", "odd", "form", "metadata",
         "dup", "length", "data", "flip", "pad", "unknown"]))
    if pairs and mutation in ("offset", "dtype", "shape", "odd", "form", "dup", "unknown"):
        target = draw(st.sampled_from(pairs))
        if mutation == "offset":
            which = draw(st.integers(0, 1))
            target[3][which] = max(target[3][which] + draw(st.integers(-5, 5)), 0)
        elif mutation == "dtype":
            target[1] = draw(st.sampled_from(DTYPES + ["F128", "f32", "", "BF8"]))
        elif mutation == "shape":
            target[2] = draw(st.lists(st.integers(0, 2**64 + 5), max_size=4))
        elif mutation == "odd":
            spot = draw(st.sampled_from(["shape", "offset", "dtype"]))
            value = draw(st.sampled_from(ODD_NUMBERS))
            if spot == "shape":
                target[2] = target[2] + [value]
            elif spot == "offset":
                target[3] = [target[3][0], value]
            else:
                target[1] = value
        elif mutation == "form":
            target.append(draw(st.sampled_from(["seq", "enum_map"])))
        elif mutation == "dup":
            pairs.append(list(target))
        else:
            target.append("unknown")
    body = []
    for item in pairs:
        name, dtype, shape, offs = item[:4]
        extra = item[4] if len(item) > 4 else None
        if extra == "seq":
            body.append((name, [dtype, shape, offs]))
            continue
        dt = Obj([(dtype, None)]) if extra == "enum_map" and isinstance(dtype, str) else dtype
        fields = [("dtype", dt), ("shape", shape), ("data_offsets", offs)]
        if extra == "unknown":
            fields.append(("extra", draw(st.sampled_from([[1, 2], Raw("1e400"), "x", None]))))
        body.append((name, Obj(fields)))
    if mutation == "metadata" or draw(st.booleans()):
        meta = draw(st.sampled_from([
            Obj([("format", "pt")]), None, Obj([("k", 1)]), [], Obj([("a", "1"), ("a", "2")]),
            Obj([]), Obj([("k", None)])]))
        body.insert(draw(st.integers(0, len(body))), ("__metadata__", meta))
        if mutation == "metadata" and draw(st.booleans()):
            body.append(("__metadata__", None))
    header = dump(Obj(body)).encode()
    header += b" " * draw(st.integers(0, 8))
    if mutation == "pad":
        header = draw(st.sampled_from([b" ", b"\n", b"\t"])) + header + draw(
            st.sampled_from([b"", b"\0", b"x", b"\r\n"]))
    n_delta = draw(st.integers(-3, 3)) if mutation == "length" else 0
    if mutation == "data":
        data_len = max(data_len + draw(st.integers(-3, 3)), 0)
    blob = bytearray(file_of(header, data_len, n_delta))
    if mutation == "flip" and len(blob) > 8:
        pos = draw(st.integers(0, len(blob) - 1))
        blob[pos] = draw(st.integers(0, 255))
    if draw(st.integers(0, 9)) == 0:
        blob = blob[: draw(st.integers(0, len(blob)))]
    offsets = [tuple(p[3]) for p in pairs if isinstance(p[3], list)]
    nonempty = [o for o in offsets if o[0] != o[1]]
    unique = len(set(offsets)) == len(offsets) and len(set(nonempty)) == len(nonempty)
    return bytes(blob), unique


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(headers())
def test_random_headers_match_reference(case: tuple[bytes, bool]) -> None:
    data, offsets_unique = case
    ref, mine = reference(data), ours(data)
    assert (mine == "OK") == (ref == "OK"), (ref, mine, data[:300])
    if offsets_unique:  # with equal offsets the reference's HashMap order decides
        assert mine == ref, (data[:300],)


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=64), st.integers(0, 80))
def test_random_bytes_match_reference(tail: bytes, n: int) -> None:
    data = struct.pack("<Q", n) + tail
    assert ours(data) == reference(data)


# -------------------------------------------------------------------- index --
def test_parse_index() -> None:
    doc = {"metadata": {"total_size": 24}, "weight_map": {"a": "m-1.safetensors", "b": "m-2.safetensors",
                                                          "c": "m-1.safetensors"}}
    index = parse_index(json.dumps(doc).encode())
    assert index.total_size == 24
    assert index.files == ("m-1.safetensors", "m-2.safetensors")
    assert index.weight_map["b"] == "m-2.safetensors"
    assert parse_index(b'{"weight_map": {}}').total_size is None


@pytest.mark.parametrize("text, code", [
    (b"not json", "IndexInvalidJson"),
    (b"\xff", "IndexInvalidJson"),
    (b"[]", "IndexInvalidJson"),
    (b"{}", "IndexMissingWeightMap"),
    (b'{"weight_map": []}', "IndexMissingWeightMap"),
    (b'{"weight_map": {"a": 1}}', "IndexBadWeightMap"),
    (b'{"weight_map": {"a": "../x.safetensors"}}', "IndexBadFilename"),
    (b'{"weight_map": {"a": "/etc/passwd"}}', "IndexBadFilename"),
    (b'{"weight_map": {}, "metadata": []}', "IndexBadMetadata"),
    (b'{"weight_map": {}, "metadata": {"total_size": -1}}', "IndexBadMetadata"),
    (b'{"weight_map": {}, "metadata": {"total_size": "12"}}', "IndexBadMetadata"),
])
def test_parse_index_errors(text: bytes, code: str) -> None:
    with pytest.raises(SafetensorsError) as err:
        parse_index(text)
    assert err.value.code == code


def reference_safe_open(path) -> str:
    """The verdict of ``safetensors.safe_open`` (mmap-based) on a file."""
    try:
        with safetensors.safe_open(str(path), framework="numpy"):
            pass
    except Exception as exc:
        for needle, code in _MESSAGES.items():
            if needle in str(exc):
                return code
        return f"unmapped: {exc}"
    return "OK"


@pytest.mark.parametrize("name", sorted(EXPLICIT))
def test_safe_open_agrees(name: str, tmp_path) -> None:
    path = tmp_path / "x.safetensors"
    path.write_bytes(EXPLICIT[name])
    assert ours(EXPLICIT[name]) == reference_safe_open(path)
