"""The JSON half of safetensors header parsing, matching serde_json + serde.

The reference deserializes the header with ``serde_json::from_str`` into::

    struct HashMetadata {
        #[serde(rename = "__metadata__")] metadata: Option<HashMap<String, String>>,
        #[serde(flatten)] tensors: HashMap<String, TensorInfo>,
    }
    struct TensorInfo { dtype: Dtype, shape: Vec<usize>, data_offsets: (usize, usize) }

Python's ``json`` differs from serde_json in ways that matter, all handled
here: NaN/Infinity literals, ``-0`` (a float to serde), integers beyond u64
(floats to serde), float overflow ("number out of range"), lone UTF-16
surrogate escapes, the 128-level recursion limit, duplicate struct fields,
the sequence form of structs (``["F32", [2], [0, 8]]``) and the map form of
unit enum variants (``{"F32": null}``).  Every failure is reported as
``InvalidHeaderDeserialization``, which is what the reference reports.
"""

from __future__ import annotations

import json
import re
from typing import Any

from .dtypes import SAFETENSORS_DTYPES
from .errors import SafetensorsError

Info = tuple[str, list[int], tuple[int, int]]

_U64 = (1 << 64) - 1
_I64_MIN = -(1 << 63)
_MAX_DEPTH = 127  # serde_json's recursion limit of 128, as observed
_SURROGATE = re.compile("[\ud800-\udfff]")


class _Pairs:
    """A JSON object kept as its ordered (key, value) pairs, duplicates included."""

    __slots__ = ("items",)

    def __init__(self, items: list[tuple[str, Any]]) -> None:
        self.items = items


class _Reject(Exception):
    """Raised inside the json hooks for input serde_json refuses."""


def _fail(message: str) -> SafetensorsError:
    """Build the error serde failures map to."""
    return SafetensorsError("InvalidHeaderDeserialization", f"invalid JSON in header: {message}")


def _parse_int(text: str) -> int | float:
    """serde_json integer semantics: ``-0`` and out-of-i64/u64 values are floats."""
    value = int(text)
    if text.startswith("-") and value == 0:
        return -0.0
    if value > _U64 or value < _I64_MIN:
        try:
            return float(value)
        except OverflowError:
            raise _Reject("number out of range") from None
    return value


def _parse_float(text: str) -> float:
    """serde_json float semantics: overflow to infinity is an error."""
    value = float(text)
    if value in (float("inf"), float("-inf")):
        raise _Reject("number out of range")
    return value


def _reject_constant(text: str) -> Any:
    """serde_json has no NaN / Infinity literals."""
    raise _Reject(f"expected value, got {text}")


def _loads(text: str) -> Any:
    """Parse ``text`` as serde_json would, keeping objects as :class:`_Pairs`."""
    try:
        doc = json.loads(
            text,
            object_pairs_hook=_Pairs,
            parse_int=_parse_int,
            parse_float=_parse_float,
            parse_constant=_reject_constant,
        )
    except (ValueError, RecursionError, _Reject) as exc:
        raise _fail(str(exc)) from None
    _check_tree(doc)
    return doc


def _check_tree(doc: Any) -> None:
    """Reject lone surrogates and nesting deeper than serde_json allows."""
    stack: list[tuple[Any, int]] = [(doc, 0)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, str):
            if _SURROGATE.search(node):
                raise _fail("lone surrogate in hex escape")
            continue
        if isinstance(node, _Pairs):
            children: list[Any] = [v for pair in node.items for v in pair]
        elif isinstance(node, list):
            children = node
        else:
            continue
        if depth + 1 > _MAX_DEPTH:
            raise _fail("recursion limit exceeded")
        stack.extend((child, depth + 1) for child in children)


def _usize(value: Any) -> int:
    """Deserialize a ``usize``: a non-negative JSON integer (never bool/float)."""
    if type(value) is not int or value < 0 or value > _U64:
        raise _fail(f"invalid type: {value!r}, expected usize")
    return value


def _dtype(value: Any) -> str:
    """Deserialize the ``Dtype`` enum: ``"F32"`` or ``{"F32": null}``."""
    if isinstance(value, _Pairs):
        if len(value.items) != 1:
            raise _fail("invalid value: map, expected map with a single key")
        value, unit = value.items[0]
        if unit is not None:
            raise _fail("expected unit")
    if not isinstance(value, str) or value not in SAFETENSORS_DTYPES:
        raise _fail(f"unknown variant {value!r}")
    return value


def _shape(value: Any) -> list[int]:
    """Deserialize ``Vec<usize>``."""
    if type(value) is not list:
        raise _fail("invalid type, expected a sequence")
    return [_usize(v) for v in value]


def _offsets(value: Any) -> tuple[int, int]:
    """Deserialize the ``(usize, usize)`` tuple."""
    if type(value) is not list or len(value) != 2:
        raise _fail("expected a tuple of size 2")
    return _usize(value[0]), _usize(value[1])


def _fields(value: _Pairs) -> list[Any]:
    """The three known fields of a map-form TensorInfo (unknown ones ignored)."""
    found: dict[str, Any] = {}
    for key, val in value.items:
        if key in ("dtype", "shape", "data_offsets"):
            if key in found:
                raise _fail(f"duplicate field `{key}`")
            found[key] = val
    for key in ("dtype", "shape", "data_offsets"):
        if key not in found:
            raise _fail(f"missing field `{key}`")
    return [found["dtype"], found["shape"], found["data_offsets"]]


def _tensor_info(value: Any) -> Info:
    """Deserialize a ``TensorInfo`` from its map or 3-element sequence form."""
    if isinstance(value, _Pairs):
        parts = _fields(value)
    elif type(value) is list:
        if len(value) != 3:
            raise _fail(f"invalid length {len(value)}, expected 3 elements in sequence")
        parts = value
    else:
        raise _fail("invalid type, expected struct TensorInfo")
    return _dtype(parts[0]), _shape(parts[1]), _offsets(parts[2])


def _metadata(value: Any) -> dict[str, str] | None:
    """Deserialize ``Option<HashMap<String, String>>`` (duplicates: last wins)."""
    if value is None:
        return None
    if not isinstance(value, _Pairs):
        raise _fail("invalid type, expected a map")
    out: dict[str, str] = {}
    for key, val in value.items:
        if not isinstance(val, str):
            raise _fail(f"invalid type: {val!r}, expected a string")
        out[key] = val
    return out


def parse_header_json(text: str) -> tuple[dict[str, str] | None, list[tuple[str, Info]]]:
    """Deserialize header JSON into (``__metadata__``, [(name, info), ...]).

    Duplicate tensor names keep the last value, as ``HashMap`` insertion does;
    a duplicate ``__metadata__`` is an error, as for any struct field.
    """
    doc = _loads(text)
    if not isinstance(doc, _Pairs):
        raise _fail("invalid type, expected struct HashMetadata")
    metadata: dict[str, str] | None = None
    seen_metadata = False
    tensors: dict[str, Info] = {}
    for key, value in doc.items:
        if key == "__metadata__":
            if seen_metadata:
                raise _fail("duplicate field `__metadata__`")
            seen_metadata = True
            metadata = _metadata(value)
        else:
            tensors[key] = _tensor_info(value)
    return metadata, list(tensors.items())
