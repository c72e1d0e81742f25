"""The native decoders' fast paths (issue #9's full-read throughput) give exactly the exact paths' answers.

``readers/native/format.decode_payload`` tries orjson (JSON) and msgpack with maps built in C
first, checks the bounds with the depth-only walk (``validate.nests_deeper``) when the cost
cannot exceed the budget, and marks values proven free of NaN/±Inf so the content check
skips its walk. Each shortcut is held here to the slow path it replaces: same value (and
types), or the same DecodeError (check and message); same findings through ``verify``.
"""

from __future__ import annotations

import json
import math
from collections import OrderedDict
from pathlib import Path
from typing import Any

import msgpack
import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lastgood import limits
from lastgood.index import queries
from lastgood.index.catalog import Catalog
from lastgood.checks import Check
from lastgood.integrity.content import non_finite_paths
from lastgood.errors import DecodeError
from lastgood.readers.native import format as nf
from lastgood.readers.common import validate
from lastgood.readers.native.writer import NativeWriter
from lastgood.stores import index_store
from lastgood.integrity.verify import _bounded_chunks, store_findings, verify_store
from tests.test_decode_bounds import Text, reference_depth


def same(a: Any, b: Any) -> bool:
    """Equal values of the same types all the way down (NaN equals NaN, 1 is not 1.0 or True)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, float):
        return a == b or (math.isnan(a) and math.isnan(b))
    if isinstance(a, dict):
        return len(a) == len(b) and all(same(ka, kb) and same(va, vb)  # keys too: a NaN key equals a NaN key
                                        for (ka, va), (kb, vb) in zip(a.items(), b.items()))
    if isinstance(a, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    return a == b


def outcome(decode: Any, data: bytes) -> tuple[str, Any]:
    try:
        return "value", decode(data)
    except DecodeError as exc:
        return "error", (exc.check, str(exc))


def assert_same_outcome(data: bytes, codec: str) -> None:
    exact = nf._exact_json if codec == "json" else nf._exact_msgpack
    fast = outcome(lambda d: nf.decode_payload(d, codec), data)
    slow = outcome(exact, data)
    assert fast[0] == slow[0], (data[:80], fast, slow)
    if fast[0] == "value":
        assert same(fast[1], slow[1]), data[:80]
    else:
        assert fast[1] == slow[1]


json_scalars = st.one_of(st.none(), st.booleans(), st.integers(min_value=-2**70, max_value=2**70),
                         st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=20))
json_values = st.recursive(json_scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=5), st.dictionaries(st.text(max_size=4), inner, max_size=4)), max_leaves=40)
# JSON texts json.loads reads and orjson may not, and broken ones
odd_tokens = st.sampled_from([
    "NaN", "-Infinity", "Infinity", "1e400", "-1e400", "18446744073709551616", "-9223372036854775809",
    "9223372036854775808", "12345678901234567890123", '"\\ud800"', '"\\udc00x"', '"\\ud83d\\ude00"',
    "1E5", "-0", "-0.0", "0.1e-400", "1.7976931348623157e308", "[1,]", "{\"a\":1,}", "01", "tru", '"\t"',
    '"\\u0000"', "[]", "{}", '{"a":1,"a":2}'])


@settings(max_examples=400, deadline=None)
@given(json_values, st.lists(odd_tokens, max_size=3), st.sampled_from(["plain", "bom", "utf16", "cut", "flip"]),
       st.integers(min_value=0, max_value=10**6))
def test_json_fast_path_equals_json_loads(value: Any, odd: list[str], form: str, where: int) -> None:
    text = json.dumps([value, *[json.loads(t) if t in ("[]", "{}") else 0 for t in odd]], allow_nan=True)
    if odd:  # splice the odd tokens in as raw text (most are not what json.dumps writes)
        text = "[" + text + "," + ",".join(odd) + "]"
    data = text.encode("utf-8", "surrogatepass")
    if form == "bom":
        data = b"\xef\xbb\xbf" + data
    elif form == "utf16":
        data = text.encode("utf-16", "surrogatepass")
    elif form == "cut":
        data = data[: where % (len(data) + 1)]
    elif form == "flip":
        index = where % len(data)
        data = data[:index] + bytes([data[index] ^ (1 << (where % 8))]) + data[index + 1:]
    assert_same_outcome(data, "json")


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=64))
def test_json_fast_path_equals_json_loads_on_any_bytes(data: bytes) -> None:
    assert_same_outcome(data, "json")


@settings(max_examples=400, deadline=None)
@given(st.floats(allow_nan=False, allow_infinity=False), st.integers(min_value=-2**80, max_value=2**80))
def test_orjson_numbers_are_json_loads_numbers(number: float, integer: int) -> None:
    for text in (repr(number), f"{number:.17e}", f"{number:.3g}", str(integer), f"{integer}e-3", f"{integer}.5"):
        assert_same_outcome(text.encode(), "json")


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=200))
def test_a_document_orjson_accepts_holds_no_nan_or_infinity(data: bytes) -> None:
    """Why the content check may skip a state orjson decoded: it refuses NaN/Infinity tokens
    and numbers past a double, so every float it returns is finite."""
    for text in (data, b"[" + data + b"]", b"[1e308, " + data + b"]"):
        try:
            value = orjson.loads(text)
        except orjson.JSONDecodeError:
            continue
        assert non_finite_paths(value, budget=10**6) == []
    for token in (b"NaN", b"Infinity", b"-Infinity", b"1e999", b"-1e999", b"[2e308]"):
        with pytest.raises(orjson.JSONDecodeError):
            orjson.loads(token)


msgpack_scalars = st.one_of(st.none(), st.booleans(), st.integers(min_value=-2**63, max_value=2**64 - 1),
                            st.floats(allow_nan=True, allow_infinity=True),
                            st.floats(width=32, allow_nan=True, allow_infinity=True),
                            st.text(max_size=10), st.binary(max_size=10))
msgpack_keys = st.one_of(st.text(max_size=4), st.integers(-5, 5), st.binary(max_size=3), st.booleans(),
                         st.none(), st.floats(allow_nan=False))


class Key:
    """A list or map as a msgpack map key (msgpack writes it; Python dicts cannot hold it)."""

    def __init__(self, value: Any) -> None:
        self.value = value


def packed(value: Any) -> bytes:
    """msgpack bytes of ``value``, where Key(...) keys are written as array/map keys."""
    packer = msgpack.Packer(use_bin_type=True)
    out = bytearray()

    def write(node: Any) -> None:
        if isinstance(node, dict):
            out.extend(packer.pack_map_header(len(node)))
            for key, child in node.items():
                write(key.value if isinstance(key, Key) else key)
                write(child)
        elif isinstance(node, list):
            out.extend(packer.pack_array_header(len(node)))
            for child in node:
                write(child)
        elif isinstance(node, msgpack.ExtType):
            out.extend(packer.pack(node))
        else:
            out.extend(packer.pack(node))

    write(value)
    return bytes(out)


msgpack_values = st.recursive(
    st.one_of(msgpack_scalars, st.builds(msgpack.ExtType, st.integers(0, 20), st.binary(max_size=8))),
    lambda inner: st.one_of(
        st.lists(inner, max_size=5),
        st.dictionaries(msgpack_keys, inner, max_size=4),
        st.dictionaries(st.builds(Key, st.lists(st.integers(0, 3), max_size=2)), inner, max_size=2),
        st.dictionaries(st.builds(Key, st.dictionaries(st.text(max_size=2), st.integers(0, 3), max_size=2)),
                        inner, max_size=2)),
    max_leaves=40)


@settings(max_examples=400, deadline=None)
@given(msgpack_values, st.sampled_from(["plain", "cut", "flip", "extra"]), st.integers(min_value=0, max_value=10**6))
def test_msgpack_fast_path_equals_the_hook_path(value: Any, form: str, where: int) -> None:
    data = packed(value)
    if form == "cut":
        data = data[: where % (len(data) + 1)]
    elif form == "flip":
        index = where % len(data)
        data = data[:index] + bytes([data[index] ^ (1 << (where % 8))]) + data[index + 1:]
    elif form == "extra":
        data += b"\xc0"
    assert_same_outcome(data, "msgpack")


@pytest.mark.parametrize("codec", ["json", "msgpack"])
def test_bounds_through_the_fast_paths(codec: str) -> None:
    """Depth just within and just past MAX_DEPTH, past orjson's own limit (1024), and past the
    cost budget: the same errors as the exact paths (their messages)."""
    for levels in (limits.MAX_DEPTH, limits.MAX_DEPTH + 1, 1024, 1025, 5000):
        data = ("[" * levels + "]" * levels).encode() if codec == "json" else b"\x91" * (levels - 1) + b"\x90"
        assert_same_outcome(data, codec)
    wide = {"rows": [[0] * 1000 for _ in range(limits.MAX_STATE_COST // 1000 + 1)]}
    data = nf.encode_payload(wide, codec)
    assert_same_outcome(data, codec)
    with pytest.raises(DecodeError) as caught:
        nf.decode_payload(data, codec)
    assert caught.value.check == Check.TOO_LARGE


def test_big_integers_stay_integers() -> None:
    """orjson reads an integer past 64 bits as a float; the exact path keeps the int."""
    for text in (b"18446744073709551616", b"[1, -9223372036854775809]", b'{"n": 123456789012345678901234567890}'):
        value = nf.decode_payload(text, "json")
        assert same(value, json.loads(text))
    assert nf.decode_payload(b"18446744073709551615", "json") == 2**64 - 1  # still a u64: orjson's int


nested_values = st.recursive(
    st.one_of(st.none(), st.integers(), st.floats(allow_nan=True), st.text(max_size=5), st.text(max_size=5).map(Text)),
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.lists(inner, max_size=3).map(tuple),
                            st.dictionaries(st.text(max_size=3), inner, max_size=4),
                            st.dictionaries(st.text(max_size=3), inner, max_size=3).map(OrderedDict)),
    max_leaves=50)


@settings(max_examples=400, deadline=None)
@given(nested_values, st.integers(min_value=0, max_value=10))
def test_nests_deeper_agrees_with_measure(value: Any, limit: int) -> None:
    assert validate.nests_deeper(value, limit) == (reference_depth(value) > limit)
    assert validate.nests_deeper(value, limit) == validate.measure(value, 10**9, limit)[1]
    keys: set[type] = set()
    measured: set[type] = set()
    if not validate.nests_deeper(value, 10**6, keys):
        validate.measure(value, 10**9, None, measured)
        assert keys == measured


@settings(max_examples=300, deadline=None)
@given(nested_values)
def test_nests_deeper_floats_says_when_a_float_is_not_plain(value: Any) -> None:
    floats: list[bool] = []
    validate.nests_deeper(value, 10**6, None, floats)
    leaves, stack = [], [value]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            stack.extend(node.values())
        elif isinstance(node, (list, tuple)):
            stack.extend(node)
        else:
            leaves.append(node)
    odd = any(type(v) not in (int, float, str, type(None), bool) for v in leaves) or \
        any(type(n) not in (dict, list, tuple) for n in _containers(value))
    huge = any(isinstance(v, float) and not (math.isfinite(v) and abs(v) < 2.0**63) for v in leaves)
    if huge:
        assert floats == [False]
    if not odd and not huge:
        assert floats == []


def _containers(value: Any) -> list[Any]:
    found, stack = [], [value]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            found.append(node)
            stack.extend(node.values())
        elif isinstance(node, (list, tuple)):
            found.append(node)
            stack.extend(node)
    return found


def test_finite_marks_only_inside_the_block_and_answered_once() -> None:
    data = nf.encode_payload({"x": [1.5, 2.5]}, "json")
    outside = nf.decode_payload(data, "json")
    assert not validate.proven_finite(outside)  # nothing is remembered outside a block
    with validate.finite_marks():
        value = nf.decode_payload(data, "json")
        nan = nf.decode_payload(b'{"x": [NaN]}', "json")  # json.loads' path: not marked
        packed_nan = nf.decode_payload(nf.encode_payload({"x": [float("inf")]}, "msgpack"), "msgpack")
        packed_ok = nf.decode_payload(nf.encode_payload({"x": [1.0]}, "msgpack"), "msgpack")
        assert validate.proven_finite(value) and not validate.proven_finite(value)
        assert not validate.proven_finite(nan) and not validate.proven_finite(packed_nan)
        assert validate.proven_finite(packed_ok)
    with validate.finite_marks():
        assert not validate.proven_finite(value)  # a new block starts empty


@pytest.mark.parametrize("codec", ["json", "msgpack"])
@pytest.mark.parametrize("workers", [1, 2])
def test_non_finite_findings_are_the_same_through_verify(tmp_path: Path, codec: str, workers: int) -> None:
    """NaN, ±Inf (float64 and, through msgpack, float32-sized values) in some states, finite
    huge numbers in others: verify reports exactly the states with non-finite numbers."""
    url = str(tmp_path / "store")
    writer = NativeWriter(url, codec=codec, full_every=3)
    odd = {2: float("nan"), 4: float("inf"), 7: float("-inf"), 9: 1e300, 10: 2.0**70, 11: -(2.0**80)}
    for step in range(14):
        value = odd.get(step, 0.5)
        writer.save("run-0", {"scores": [0.25, value], "step": step, "nested": {"v": [value]}})
    catalog = Catalog(tmp_path / "index.duckdb")
    summary = index_store(catalog, url, check="none")
    sid = summary.store.store_id
    verify_store(catalog, sid, summary.store.reader, read_data=True, workers=workers)
    steps = {r["checkpoint_id"]: r["step"] for r in queries.list_checkpoints(catalog, sid)}
    flagged = {steps[f["checkpoint_id"]]: f["message"] for f in store_findings(catalog, sid)
               if f["check"] == Check.NON_FINITE}
    assert sorted(flagged) == [2, 4, 7]
    assert flagged[2] == "NaN or infinite number at /nested/v/0, /scores/1"
    assert not any(f["severity"] == "error" for f in store_findings(catalog, sid))


def test_data_chunks_are_cut_by_bytes() -> None:
    from lastgood.readers.base import CheckpointRecord

    def record(i: int, size: int | None) -> CheckpointRecord:
        return CheckpointRecord(run_id="r", checkpoint_id=f"c{i}", namespace="", parent_id=None, step=i,
                                created_at=None, size_bytes=size)

    records = [record(i, 10) for i in range(10)]
    assert [len(c) for c in _bounded_chunks(iter(records), 4, 25)] == [3, 3, 3, 1]
    assert [len(c) for c in _bounded_chunks(iter(records), 4, None)] == [4, 4, 2]
    assert [len(c) for c in _bounded_chunks(iter([record(0, None)] * 5), 2, 1)] == [2, 2, 1]
