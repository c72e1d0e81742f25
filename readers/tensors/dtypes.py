"""Dtype tables and little-endian decoding of raw tensor bytes.

Dtype names are the safetensors spellings (``F32``, ``BF16``, ``F8_E4M3`` …,
see ``safetensors::tensor::Dtype``); torch-only types get names in the same
style (``C128``, ``QINT8`` …).  Decoding never copies more than it must:
numpy-native dtypes come back as zero-copy views of the input buffer.
"""

from __future__ import annotations

from typing import Final

import numpy as np

from .errors import DtypeError

# The reference list, in the order of safetensors' ``Dtype`` enum (0.8.0).
SAFETENSORS_DTYPES: Final[dict[str, int]] = {
    "BOOL": 8, "F4": 4, "F6_E2M3": 6, "F6_E3M2": 6, "U8": 8, "I8": 8,
    "F8_E5M2": 8, "F8_E4M3": 8, "F8_E8M0": 8, "F8_E4M3FNUZ": 8,
    "F8_E5M2FNUZ": 8, "I16": 16, "U16": 16, "F16": 16, "BF16": 16,
    "I32": 32, "U32": 32, "F32": 32, "C64": 64, "F64": 64, "I64": 64,
    "U64": 64,
}

# Types torch can store that safetensors cannot name.
TORCH_ONLY_DTYPES: Final[dict[str, int]] = {
    "C128": 128, "C32": 32, "QINT8": 8, "QUINT8": 8, "QINT32": 32,
    "QUINT4X2": 8, "QUINT2X4": 8, "F4_E2M1FN_X2": 8, "BITS8": 8,
    "BITS16": 16, "BITS1X8": 8, "BITS2X4": 8, "BITS4X2": 8,
}

DTYPE_BITS: Final[dict[str, int]] = {**SAFETENSORS_DTYPES, **TORCH_ONLY_DTYPES}

# ``torch.<X>Storage`` legacy typed-storage classes (also ``torch.cuda.<X>``).
TORCH_STORAGE_DTYPES: Final[dict[str, str]] = {
    "DoubleStorage": "F64", "FloatStorage": "F32", "HalfStorage": "F16",
    "BFloat16Storage": "BF16", "LongStorage": "I64", "IntStorage": "I32",
    "ShortStorage": "I16", "CharStorage": "I8", "ByteStorage": "U8",
    "BoolStorage": "BOOL", "ComplexFloatStorage": "C64",
    "ComplexDoubleStorage": "C128", "QInt8Storage": "QINT8",
    "QUInt8Storage": "QUINT8", "QInt32Storage": "QINT32",
    "QUInt4x2Storage": "QUINT4X2", "QUInt2x4Storage": "QUINT2X4",
    # Names some third-party writers emit for fp8 storages.
    "Float8_e4m3fnStorage": "F8_E4M3", "Float8_e5m2Storage": "F8_E5M2",
    "Float8_e4m3fnuzStorage": "F8_E4M3FNUZ",
    "Float8_e5m2fnuzStorage": "F8_E5M2FNUZ",
    "Float8_e8m0fnuStorage": "F8_E8M0",
}

# ``torch.<dtype>`` globals as pickled by torch (``GLOBAL 'torch float32'``).
TORCH_DTYPES: Final[dict[str, str]] = {
    "float64": "F64", "double": "F64", "float32": "F32", "float": "F32",
    "float16": "F16", "half": "F16", "bfloat16": "BF16", "int64": "I64",
    "long": "I64", "int32": "I32", "int": "I32", "int16": "I16",
    "short": "I16", "int8": "I8", "uint8": "U8", "uint16": "U16",
    "uint32": "U32", "uint64": "U64", "bool": "BOOL", "complex64": "C64",
    "cfloat": "C64", "complex128": "C128", "cdouble": "C128",
    "complex32": "C32", "chalf": "C32", "float8_e4m3fn": "F8_E4M3",
    "float8_e5m2": "F8_E5M2", "float8_e4m3fnuz": "F8_E4M3FNUZ",
    "float8_e5m2fnuz": "F8_E5M2FNUZ", "float8_e8m0fnu": "F8_E8M0",
    "float4_e2m1fn_x2": "F4_E2M1FN_X2", "qint8": "QINT8", "quint8": "QUINT8",
    "qint32": "QINT32", "quint4x2": "QUINT4X2", "quint2x4": "QUINT2X4",
    "bits8": "BITS8", "bits16": "BITS16", "bits1x8": "BITS1X8",
    "bits2x4": "BITS2X4", "bits4x2": "BITS4X2",
}

# dtypes numpy represents natively (little-endian spellings).
NUMPY_DTYPES: Final[dict[str, str]] = {
    "BOOL": "?", "U8": "u1", "I8": "i1", "I16": "<i2", "U16": "<u2",
    "F16": "<f2", "I32": "<i4", "U32": "<u4", "F32": "<f4", "I64": "<i8",
    "U64": "<u8", "F64": "<f8", "C64": "<c8", "C128": "<c16",
    "QINT8": "i1", "QUINT8": "u1", "QINT32": "<i4",
}


def bits(dtype: str) -> int:
    """Return the width in bits of one element of ``dtype``."""
    try:
        return DTYPE_BITS[dtype]
    except KeyError:
        raise DtypeError("UnknownDtype", f"unknown dtype {dtype!r}") from None


def itemsize(dtype: str) -> int:
    """Return the byte width of ``dtype``; sub-byte dtypes raise DtypeError."""
    width = bits(dtype)
    if width % 8:
        raise DtypeError("SubByteDtype", f"{dtype} is {width} bits wide")
    return width // 8


def nbytes(dtype: str, numel: int) -> int:
    """Return the byte size of ``numel`` elements; raise if not whole bytes."""
    total = numel * bits(dtype)
    if total % 8:
        raise DtypeError("MisalignedSlice", f"{numel} x {dtype} is not whole bytes")
    return total // 8


def torch_global_dtype(name: str) -> str | None:
    """Map a pickled torch global (``torch.FloatStorage``, ``torch.float32``,
    ``torch.cuda.HalfStorage``) to a dtype name, or None if it is not one."""
    module, _, attr = name.rpartition(".")
    if module in ("torch", "torch.cuda") and attr in TORCH_STORAGE_DTYPES:
        return TORCH_STORAGE_DTYPES[attr]
    if module == "torch" and attr in TORCH_DTYPES:
        return TORCH_DTYPES[attr]
    return None


def _fp8_table(ebits: int, mbits: int, bias: int, kind: str) -> np.ndarray:
    """Build the 256-entry float32 table of an 8-bit float format.

    ``kind`` is ``ieee`` (max exponent = Inf/NaN, E5M2), ``fn`` (only
    S.1111.111 is NaN, no Inf: OCP E4M3FN) or ``fnuz`` (0x80 is the only NaN,
    no Inf, no negative zero).
    """
    code = np.arange(256, dtype=np.int64)
    sign = np.where(code & 0x80, -1.0, 1.0)
    exp = (code >> mbits) & ((1 << ebits) - 1)
    man = code & ((1 << mbits) - 1)
    frac = man / float(1 << mbits)
    normal = np.ldexp(1.0 + frac, (exp - bias).astype(np.int32))
    subnormal = np.ldexp(frac, 1 - bias)
    value = sign * np.where(exp == 0, subnormal, normal)
    top = (1 << ebits) - 1
    if kind == "ieee":
        value = np.where((exp == top) & (man == 0), sign * np.inf, value)
        value = np.where((exp == top) & (man != 0), np.nan, value)
    elif kind == "fn":
        value = np.where((code & 0x7F) == 0x7F, np.nan, value)
    elif kind == "fnuz":
        value = np.where(code == 0x80, np.nan, value)
    return value.astype(np.float32)


def _e8m0_table() -> np.ndarray:
    """Build the E8M0 (``float8_e8m0fnu``) table: 2**(e-127), 0xFF is NaN."""
    code = np.arange(256, dtype=np.int32)
    value = np.ldexp(np.ones(256), code - 127)
    value[255] = np.nan
    return value.astype(np.float32)


FP8_TABLES: Final[dict[str, np.ndarray]] = {
    "F8_E4M3": _fp8_table(4, 3, 7, "fn"),
    "F8_E5M2": _fp8_table(5, 2, 15, "ieee"),
    "F8_E4M3FNUZ": _fp8_table(4, 3, 8, "fnuz"),
    "F8_E5M2FNUZ": _fp8_table(5, 2, 16, "fnuz"),
    "F8_E8M0": _e8m0_table(),
}
for _table in FP8_TABLES.values():
    _table.setflags(write=False)


def _as_bytes(raw: bytes | bytearray | memoryview) -> memoryview:
    """Return a flat byte memoryview of ``raw`` without copying."""
    view = memoryview(raw)
    return view if view.format == "B" and view.ndim == 1 else view.cast("B")


def _check_length(view: memoryview, dtype: str) -> int:
    """Return the element count of ``view``; raise if it is not whole items."""
    size = itemsize(dtype)
    if len(view) % size:
        raise DtypeError(
            "BadLength", f"{len(view)} bytes is not a multiple of {size} ({dtype})"
        )
    return len(view) // size


def is_decodable(dtype: str) -> bool:
    """True if :func:`decode` can turn ``dtype`` bytes into numbers."""
    return dtype in NUMPY_DTYPES or dtype in FP8_TABLES or dtype in ("BF16", "C32")


def decode(raw: bytes | bytearray | memoryview, dtype: str) -> np.ndarray:
    """Decode little-endian ``raw`` into a 1-D numpy array.

    Native dtypes are zero-copy views (read-only if ``raw`` is); BF16 and the
    fp8 formats decode to float32 (exactly); C32 to complex64.  Sub-byte and
    quantized-packed dtypes raise ``DtypeError('NotDecodable')``.
    """
    view = _as_bytes(raw)
    bits(dtype)
    if not is_decodable(dtype):
        raise DtypeError("NotDecodable", f"{dtype} values cannot be decoded")
    _check_length(view, dtype)
    if dtype in NUMPY_DTYPES:
        return np.frombuffer(view, dtype=NUMPY_DTYPES[dtype])
    if dtype == "BF16":
        halves = np.frombuffer(view, dtype="<u2").astype(np.uint32)
        return (halves << 16).view(np.float32)
    if dtype == "C32":
        return np.frombuffer(view, dtype="<f2").astype(np.float32).view(np.complex64)
    return FP8_TABLES[dtype][np.frombuffer(view, dtype=np.uint8)]


def to_float64(raw: bytes | bytearray | memoryview, dtype: str) -> np.ndarray:
    """Decode ``raw`` (little-endian ``dtype`` values) to a float64 array.

    Integers above 2**53 round to the nearest float64.  Complex dtypes raise
    ``DtypeError('NotReal')``; sub-byte ones ``DtypeError('NotDecodable')``.
    """
    if dtype in ("C32", "C64", "C128"):
        raise DtypeError("NotReal", f"{dtype} is complex")
    return decode(raw, dtype).astype(np.float64)


def to_float(raw: bytes | bytearray | memoryview, dtype: str) -> np.ndarray:
    """Decode to the narrowest float type that holds every value exactly.

    float32 for F32 (zero-copy), F16, BF16, fp8, BOOL and 8/16-bit integers;
    float64 for F64 and 32/64-bit integers.  Used by the statistics code so
    that float32 tensors are never widened.
    """
    if dtype in ("C32", "C64", "C128"):
        raise DtypeError("NotReal", f"{dtype} is complex")
    values = decode(raw, dtype)
    if values.dtype == np.float32 or values.dtype == np.float64:
        return values
    if values.dtype.itemsize <= 2 or values.dtype == np.bool_:
        return values.astype(np.float32)
    return values.astype(np.float64)
