"""The one-walk measure of decoded data (readers/common/validate.py) against the stack walks it replaced.

``measure`` answers ``cost`` and ``depth_exceeds`` level by level with the per-value work
in C; these tests hold it to the plain definitions on random values, and check that deep,
wide and huge payloads still become findings (never a RecursionError) through the
readers' decoders.
"""

from __future__ import annotations

import json
from collections import OrderedDict
from typing import Any

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lastgood import limits
from lastgood.checks import Check
from lastgood.errors import DecodeError
from lastgood.readers.native import format as nf
from lastgood.readers.common import validate


def reference_cost(value: Any, budget: int = limits.MAX_STATE_COST) -> int:
    """The definition: nodes, plus one per dict key and per 256 characters of text."""
    total, stack = 0, [value]
    while stack and total <= budget:
        node = stack.pop()
        total += 1
        if isinstance(node, dict):
            stack.extend(node.values())
            total += len(node)
        elif isinstance(node, (list, tuple)):
            stack.extend(node)
        elif isinstance(node, (str, bytes)):
            total += len(node) // 256
    return total


def reference_depth(value: Any) -> int:
    """Levels of containers (0 for a scalar)."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        node, depth = stack.pop()
        children = node.values() if isinstance(node, dict) else node if isinstance(node, (list, tuple)) else None
        if children is not None:
            deepest = max(deepest, depth)
            stack.extend((child, depth + 1) for child in children)
    return deepest


class Text(str):
    """A str subclass (an enum value, say): counted as text."""


scalars = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=True),
                    st.text(max_size=600), st.binary(max_size=600), st.text(max_size=300).map(Text))
values = st.recursive(scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=6), st.lists(inner, max_size=4).map(tuple),
    st.dictionaries(st.text(max_size=4), inner, max_size=5),
    st.dictionaries(st.text(max_size=4), inner, max_size=3).map(OrderedDict)), max_leaves=60)


@settings(max_examples=300, deadline=None)
@given(values, st.integers(min_value=0, max_value=12))
def test_measure_agrees_with_the_definitions(value: Any, limit: int) -> None:
    total, too_deep = validate.measure(value, limits.MAX_STATE_COST, limit)
    assert too_deep == (reference_depth(value) > limit)
    if not too_deep:
        assert total == reference_cost(value)
    assert validate.cost(value) == reference_cost(value)
    assert validate.depth_exceeds(value, limit) == (reference_depth(value) > limit)


@settings(max_examples=100, deadline=None)
@given(values, st.integers(min_value=1, max_value=40))
def test_a_small_budget_still_says_over_budget(value: Any, budget: int) -> None:
    assert (validate.cost(value, budget) > budget) == (reference_cost(value) > budget)


def nested(levels: int) -> Any:
    value: Any = [1]
    for index in range(levels - 1):
        value = {"k": value} if index % 2 else [value, "x"]
    return value


def test_ten_thousand_levels_are_too_deep_not_a_recursion_error() -> None:
    deep = nested(10_000)
    assert validate.depth_exceeds(deep)
    with pytest.raises(validate.Invalid) as caught:
        validate.check_state(deep, "state", 20_000)
    assert caught.value.check == Check.TOO_DEEP
    assert not validate.depth_exceeds(nested(limits.MAX_DEPTH))
    assert validate.depth_exceeds(nested(limits.MAX_DEPTH + 1))


@pytest.mark.parametrize("codec", ["json", "msgpack"])
def test_deep_payloads_are_findings_through_the_decoder(codec: str) -> None:
    """Just past MAX_DEPTH (the decoders' own limits are far higher) and far past it."""
    for levels in (limits.MAX_DEPTH + 1, 5_000):
        data = ("[" * levels + "]" * levels).encode() if codec == "json" else \
            b"\x91" * (levels - 1) + b"\x90"
        with pytest.raises(DecodeError) as caught:
            nf.decode_payload(data, codec)
        assert caught.value.check == Check.TOO_DEEP, (codec, levels)
    ok = nf.decode_payload(nf.encode_payload(nested(limits.MAX_DEPTH), codec), codec)
    assert validate.cost(ok) == reference_cost(ok)


@pytest.mark.parametrize("codec", ["json", "msgpack"])
def test_a_state_past_the_cost_budget_is_too_large(codec: str) -> None:
    wide = {"rows": [[0] * 1000 for _ in range(limits.MAX_STATE_COST // 1000 + 1)]}
    with pytest.raises(DecodeError) as caught:
        nf.decode_payload(nf.encode_payload(wide, codec), codec)
    assert caught.value.check == Check.TOO_LARGE


def test_msgpack_ext_values_cost_at_most_cost_per_byte() -> None:
    """The byte bound behind check_state's shortcut holds for the costliest msgpack value."""
    data = msgpack.packb([msgpack.ExtType(5, b"") for _ in range(60)])
    value = nf.decode_payload(data, "msgpack")
    assert reference_cost(value) <= validate.COST_PER_BYTE * len(data)
    assert reference_cost(value) > 2 * len(data)  # why the factor is 3, not 2
    text = json.dumps({"a": [[], {}, "", 0, {"": []}]}, separators=(",", ":")).encode()
    assert reference_cost(json.loads(text)) <= len(text)


def test_cost_of_the_state_just_checked_is_its_measure() -> None:
    state = {"messages": [{"id": f"m{i}", "content": "x" * 700} for i in range(50)]}
    validate.check_state(state, "state", 10**6)
    assert validate.cost(state) == reference_cost(state)
    state["messages"].append({"id": "late", "content": "y" * 900})  # changed in place after the check
    assert validate.cost(state) == reference_cost(state)  # measured again, not the remembered cost
    other = {"messages": state["messages"][:10]}  # another value: measured afresh
    assert validate.cost(other) == reference_cost(other)
