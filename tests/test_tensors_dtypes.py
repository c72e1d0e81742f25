"""Dtype tables and decoding: numpy-native, bf16, fp8 (vs torch's own tables), errors."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lastgood.readers.tensors import dtypes
from lastgood.readers.tensors.errors import DtypeError

FIXTURES = Path(__file__).parent / "fixtures" / "tensors"


def test_safetensors_table_widths() -> None:
    assert dtypes.SAFETENSORS_DTYPES["F4"] == 4
    assert dtypes.SAFETENSORS_DTYPES["F6_E2M3"] == dtypes.SAFETENSORS_DTYPES["F6_E3M2"] == 6
    eight = {"BOOL", "U8", "I8", "F8_E5M2", "F8_E4M3", "F8_E8M0", "F8_E4M3FNUZ", "F8_E5M2FNUZ"}
    assert {k for k, v in dtypes.SAFETENSORS_DTYPES.items() if v == 8} == eight
    assert {k for k, v in dtypes.SAFETENSORS_DTYPES.items() if v == 16} == {"I16", "U16", "F16", "BF16"}
    assert {k for k, v in dtypes.SAFETENSORS_DTYPES.items() if v == 32} == {"I32", "U32", "F32"}
    assert {k for k, v in dtypes.SAFETENSORS_DTYPES.items() if v == 64} == {"I64", "U64", "F64", "C64"}
    assert len(dtypes.SAFETENSORS_DTYPES) == 22


def test_sizes_and_errors() -> None:
    assert dtypes.itemsize("BF16") == 2
    assert dtypes.nbytes("F4", 4) == 2
    with pytest.raises(DtypeError) as err:
        dtypes.nbytes("F4", 3)
    assert err.value.code == "MisalignedSlice"
    with pytest.raises(DtypeError) as err:
        dtypes.itemsize("F6_E2M3")
    assert err.value.code == "SubByteDtype"
    with pytest.raises(DtypeError) as err:
        dtypes.bits("F128")
    assert err.value.code == "UnknownDtype"


@pytest.mark.parametrize("name, expected", [
    ("torch.FloatStorage", "F32"), ("torch.BFloat16Storage", "BF16"),
    ("torch.HalfStorage", "F16"), ("torch.cuda.LongStorage", "I64"),
    ("torch.Float8_e4m3fnStorage", "F8_E4M3"), ("torch.float32", "F32"),
    ("torch.bfloat16", "BF16"), ("torch.float8_e5m2", "F8_E5M2"),
    ("torch.float8_e8m0fnu", "F8_E8M0"), ("torch.uint16", "U16"),
    ("torch.complex128", "C128"), ("torch.Size", None), ("os.system", None),
])
def test_torch_global_dtype(name: str, expected: str | None) -> None:
    assert dtypes.torch_global_dtype(name) == expected


NATIVE = {"BOOL": np.bool_, "U8": np.uint8, "I8": np.int8, "I16": np.int16, "U16": np.uint16,
          "F16": np.float16, "I32": np.int32, "U32": np.uint32, "F32": np.float32,
          "I64": np.int64, "U64": np.uint64, "F64": np.float64, "C64": np.complex64,
          "C128": np.complex128}


@pytest.mark.parametrize("dtype", sorted(NATIVE))
def test_native_decode_is_zero_copy_and_exact(dtype: str) -> None:
    rng = np.random.default_rng(1)
    values = rng.integers(0, 2, 17).astype(NATIVE[dtype]) if dtype == "BOOL" else \
        (rng.standard_normal(17) * 100).astype(NATIVE[dtype])
    raw = values.astype(values.dtype.newbyteorder("<")).tobytes()
    decoded = dtypes.decode(raw, dtype)
    assert np.array_equal(decoded, values)
    buf = bytearray(raw)
    assert np.shares_memory(dtypes.decode(buf, dtype), np.frombuffer(buf, np.uint8))
    if dtype not in ("C64", "C128"):
        assert np.array_equal(dtypes.to_float64(raw, dtype), values.astype(np.float64))


@pytest.mark.parametrize("bits, value", [
    (0x3F80, 1.0), (0xBF80, -1.0), (0x4049, 3.140625), (0x0000, 0.0), (0x8000, -0.0),
    (0x7F80, math.inf), (0xFF80, -math.inf), (0x0001, 9.183549615799121e-41),
    (0x7F7F, 3.3895313892515355e38),
])
def test_bf16_known_patterns(bits: int, value: float) -> None:
    got = float(dtypes.decode(bits.to_bytes(2, "little"), "BF16")[0])
    assert got == value and math.copysign(1, got) == math.copysign(1, value)
    assert math.isnan(float(dtypes.decode((0x7FC0).to_bytes(2, "little"), "BF16")[0]))


@settings(max_examples=200, deadline=None)
@given(st.lists(st.floats(width=32, allow_nan=False), min_size=1, max_size=50))
def test_bf16_equals_float32_with_low_half_dropped(values: list[float]) -> None:
    f32 = np.array(values, np.float32)
    high = (f32.view(np.uint32) >> 16).astype("<u2")
    expected = (high.astype(np.uint32) << 16).view(np.float32)
    assert np.array_equal(dtypes.decode(high.tobytes(), "BF16"), expected)


def _torch_tables() -> dict[str, list[float]]:
    doc = json.loads((FIXTURES / "fp8_tables.json").read_text())
    return {k: [float(v) for v in vals] for k, vals in doc.items()}


@pytest.mark.parametrize("dtype", sorted(dtypes.FP8_TABLES))
def test_fp8_tables_equal_torch(dtype: str) -> None:
    torch_values = np.array(_torch_tables()[dtype])
    ours = dtypes.decode(bytes(range(256)), dtype).astype(np.float64)
    assert np.array_equal(np.isnan(ours), np.isnan(torch_values))
    finite = ~np.isnan(ours)
    assert np.array_equal(ours[finite], torch_values[finite])
    assert np.array_equal(np.signbit(ours[finite]), np.signbit(torch_values[finite]))


@pytest.mark.parametrize("dtype, code, value", [
    ("F8_E4M3", 0x38, 1.0), ("F8_E4M3", 0x7E, 448.0), ("F8_E4M3", 0xFE, -448.0),
    ("F8_E4M3", 0x7F, math.nan), ("F8_E4M3", 0xFF, math.nan), ("F8_E4M3", 0x01, 2.0**-9),
    ("F8_E4M3", 0x80, -0.0), ("F8_E5M2", 0x3C, 1.0), ("F8_E5M2", 0x7B, 57344.0),
    ("F8_E5M2", 0x7C, math.inf), ("F8_E5M2", 0xFC, -math.inf), ("F8_E5M2", 0x7D, math.nan),
    ("F8_E5M2", 0x01, 2.0**-16), ("F8_E8M0", 0x7F, 1.0), ("F8_E8M0", 0x00, 2.0**-127),
    ("F8_E8M0", 0xFE, 2.0**127), ("F8_E8M0", 0xFF, math.nan),
    ("F8_E4M3FNUZ", 0x40, 1.0), ("F8_E4M3FNUZ", 0x7F, 240.0), ("F8_E4M3FNUZ", 0x80, math.nan),
    ("F8_E5M2FNUZ", 0x40, 1.0), ("F8_E5M2FNUZ", 0x7F, 57344.0), ("F8_E5M2FNUZ", 0x80, math.nan),
])
def test_fp8_known_patterns(dtype: str, code: int, value: float) -> None:
    got = float(dtypes.decode(bytes([code]), dtype)[0])
    if math.isnan(value):
        assert math.isnan(got)
    else:
        assert got == value and math.copysign(1, got) == math.copysign(1, value)


def test_undecodable_and_bad_lengths() -> None:
    for dtype in ("F4", "F6_E2M3", "F6_E3M2", "QUINT4X2"):
        assert not dtypes.is_decodable(dtype)
        with pytest.raises(DtypeError):
            dtypes.decode(b"\0\0\0", dtype)
    with pytest.raises(DtypeError) as err:
        dtypes.decode(b"\0\0\0", "F32")
    assert err.value.code == "BadLength"
    with pytest.raises(DtypeError) as err:
        dtypes.to_float64(b"\0" * 8, "C64")
    assert err.value.code == "NotReal"


def test_to_float_widths() -> None:
    assert dtypes.to_float(b"\0" * 8, "F32").dtype == np.float32
    assert dtypes.to_float(b"\0" * 8, "BF16").dtype == np.float32
    assert dtypes.to_float(b"\0" * 8, "I16").dtype == np.float32
    assert dtypes.to_float(b"\0" * 8, "F8_E4M3").dtype == np.float32
    assert dtypes.to_float(b"\0" * 8, "I32").dtype == np.float64
    assert dtypes.to_float(b"\0" * 8, "U64").dtype == np.float64
    big = np.array([2**62 + 1], "<i8").tobytes()
    assert dtypes.to_float(big, "I64")[0] == float(2**62)
    c32 = np.array([1.5, -2.0], "<f2").tobytes()
    assert dtypes.decode(c32, "C32")[0] == complex(1.5, -2.0)
