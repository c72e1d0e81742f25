"""The safe LangGraph decoder: round trips with LangGraph's own serializer, tagged
extension types, damage that only ever raises DecodeError, and the helpers."""

from __future__ import annotations

import json
import pickle
import uuid
from collections import OrderedDict, deque
from datetime import date, datetime, timedelta, timezone
from decimal import Decimal
from pathlib import Path
from typing import Any

import msgpack
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from langchain_core.messages import AIMessage, HumanMessage, RemoveMessage, SystemMessage, ToolMessage
from langgraph.checkpoint.base.id import uuid6
from langgraph.checkpoint.serde.encrypted import EncryptedSerializer
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer
from langgraph.types import Interrupt, Send

from lastgood.errors import DecodeError, ReaderError
from lastgood.readers.langgraph.common import (
    CheckpointColumns,
    checkpoint_record,
    checkpoints_batch,
    event_message,
    new_uuid6,
    uuid6_datetime,
)
from lastgood.readers.langgraph.delta import replay_messages
from lastgood.readers.langgraph.serde import (
    MAX_EXT_DEPTH,
    aes_key_from_env,
    decode_typed,
    is_known_type,
    normalize_message,
    normalize_state,
    pickle_globals,
    shared_decoding,
    suspicious_types,
)
from tests.langgraph_graphs import plain

SERDE = JsonPlusSerializer()
KEY = b"0123456789abcdef0123456789abcdef"

plain_scalars = (
    st.none() | st.booleans() | st.integers(min_value=-(2**63), max_value=2**64 - 1)
    | st.floats(allow_nan=False) | st.text() | st.binary(max_size=64)
)
plain_data = st.recursive(
    plain_scalars,
    lambda children: st.lists(children, max_size=5) | st.dictionaries(st.text(max_size=8), children, max_size=5),
    max_leaves=30,
)
json_data = st.recursive(
    st.none() | st.booleans() | st.integers(min_value=-(2**63), max_value=2**63 - 1)
    | st.floats(allow_nan=False) | st.text(),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4),
    max_leaves=20,
)
quick = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


# --- properties ------------------------------------------------------------------


@quick
@given(plain_data)
def test_plain_data_round_trips(value: Any) -> None:
    type_, data = SERDE.dumps_typed(value)
    decoded = decode_typed(type_, data)
    if isinstance(value, bytes):
        assert decoded["$bytes"] == len(value)
    else:
        assert decoded == value


@quick
@given(plain_data, st.data())
def test_truncation_raises_decode_error(value: Any, data: st.DataObject) -> None:
    type_, payload = SERDE.dumps_typed({"v": value})
    cut = data.draw(st.integers(min_value=0, max_value=len(payload) - 1))
    with pytest.raises(DecodeError):
        decode_typed(type_, payload[:cut])


@quick
@given(st.binary(max_size=200), st.sampled_from(["msgpack", "json", "pickle", "msgpack+aes", "bytes", "null"]))
def test_garbage_only_raises_decode_error(garbage: bytes, type_: str) -> None:
    try:
        decode_typed(type_, garbage, aes_key=KEY if type_.endswith("+aes") else None)
    except DecodeError:
        pass


@quick
@given(st.integers(min_value=-2, max_value=12), st.binary(max_size=60), plain_data)
def test_garbage_extensions_only_raise_decode_error(code: int, payload: bytes, value: Any) -> None:
    for inner in (payload, msgpack.packb(value), msgpack.packb(["m", "n", value]), msgpack.packb(["m", "n"])):
        try:
            decode_typed("msgpack", msgpack.packb({"x": msgpack.ExtType(code % 128, inner)}))
        except DecodeError:
            pass


@quick
@given(st.lists(st.sampled_from(["human", "ai", "tool", "remove"]), max_size=8), st.data())
def test_replay_matches_langgraph_delta_reducer(kinds: list[str], data: st.DataObject) -> None:
    from langgraph.graph.message import _messages_delta_reducer

    ids = [data.draw(st.sampled_from(["a", "b", "c", "d"])) for _ in kinds]
    made = {"human": HumanMessage, "ai": AIMessage, "remove": RemoveMessage,
            "tool": lambda content, id: ToolMessage(content=content, tool_call_id="t", id=id)}
    msgs = [made[k](content=f"m{i}", id=mid) if k != "remove" else RemoveMessage(id=mid)
            for i, (k, mid) in enumerate(zip(kinds, ids))]
    writes = [msgs[i : i + 2] for i in range(0, len(msgs), 2)]
    want = _messages_delta_reducer([], writes)
    got = replay_messages([], [decode_typed(*SERDE.dumps_typed(w)) for w in writes])
    assert [normalize_message(m) for m in got] == plain(want)


# --- extension types -------------------------------------------------------------


def test_extension_types_are_tagged() -> None:
    value = {
        "uuid": uuid.UUID(int=1), "dt": datetime(2024, 5, 4, 6, 32, tzinfo=timezone.utc),
        "date": date(2024, 1, 2), "delta": timedelta(seconds=5), "dec": Decimal("1.5"),
        "set": {1}, "deque": deque([1, 2]), "path": Path("/tmp/x"), "od": OrderedDict(a=1),
        "send": Send("node", {"x": 1}), "interrupt": Interrupt(value="ask", id="i1"),
    }
    decoded = decode_typed(*SERDE.dumps_typed(value))
    assert decoded["uuid"] == {"$type": "uuid.UUID", "value": "00000000-0000-0000-0000-000000000001"}
    assert decoded["dt"] == {"$type": "datetime.datetime", "$method": "fromisoformat",
                             "value": "2024-05-04T06:32:00+00:00"}
    assert decoded["date"] == {"$type": "datetime.date", "args": [2024, 1, 2]}
    assert decoded["dec"] == {"$type": "decimal.Decimal", "value": "1.5"}
    assert decoded["set"] == {"$type": "builtins.set", "value": [1]}
    assert decoded["path"]["$type"].startswith("pathlib.")
    assert decoded["send"] == {"$type": "langgraph.types.Send", "args": ["node", {"x": 1}]}
    assert decoded["interrupt"]["$type"] == "langgraph.types.Interrupt"
    assert decoded["interrupt"]["value"] == "ask"
    assert suspicious_types(decoded) == []


def test_numpy_arrays_are_summarised() -> None:
    np = pytest.importorskip("numpy")
    decoded = decode_typed(*SERDE.dumps_typed({"a": np.zeros((3, 4), dtype="float32")}))
    assert decoded["a"] == {"$type": "numpy.ndarray", "dtype": "<f4", "shape": [3, 4], "order": "C",
                            "size": 12, "nbytes": 48}


def test_messages_normalize() -> None:
    call = {"name": "add", "args": {"a": 1}, "id": "c1", "type": "tool_call"}
    msgs = [HumanMessage(content="hi", id="1"), AIMessage(content="", tool_calls=[call], id="2"),
            ToolMessage(content="3", tool_call_id="c1", name="add", id="3"), SystemMessage(content="s")]
    decoded = decode_typed(*SERDE.dumps_typed({"messages": msgs, "__start__": {"messages": msgs}}))
    state = normalize_state(decoded)
    assert list(state) == ["messages", "__start__"]
    assert state["messages"] == plain(msgs)
    assert state["__start__"]["messages"] == plain(msgs)
    assert [m["role"] for m in state["messages"]] == ["human", "ai", "tool", "system"]
    assert normalize_message({"$type": "uuid.UUID", "value": "x"}) is None
    assert normalize_message({"role": "assistant", "content": "x"})["role"] == "ai"


def test_state_order_puts_internal_channels_last() -> None:
    state = normalize_state({"__start__": 1, "branch:to:a": 2, "b": 3, "__pregel_tasks": 4, "a": 5})
    assert list(state) == ["b", "a", "__start__", "branch:to:a", "__pregel_tasks"]


# --- legacy json ----------------------------------------------------------------------


def test_legacy_json_constructors() -> None:
    lc1 = {"lc": 1, "type": "constructor", "id": ["langchain", "schema", "messages", "AIMessage"],
           "kwargs": {"content": "old", "additional_kwargs": {"tool_calls": [
               {"id": "c", "type": "function", "function": {"name": "f", "arguments": "{\"x\": 1}"}}]}}}
    secret = {"lc": 1, "type": "secret", "id": ["OPENAI_API_KEY"]}
    decoded = decode_typed("json", json.dumps({"m": lc1, "s": secret}).encode())
    assert decoded["s"] == {"$secret": "OPENAI_API_KEY"}
    message = normalize_message(decoded["m"])
    assert message["role"] == "ai" and message["tool_calls"] == [{"name": "f", "args": {"x": 1}, "id": "c"}]
    assert suspicious_types(decoded) == []
    with pytest.raises(DecodeError, match="json:"):
        decode_typed("json", b"{not json")


# --- pickle ---------------------------------------------------------------------------------


@pytest.mark.parametrize("protocol", range(pickle.HIGHEST_PROTOCOL + 1))
def test_pickle_globals_are_listed(protocol: int) -> None:
    data = pickle.dumps({"d": OrderedDict(a=Decimal("1"))}, protocol=protocol)
    found, problem = pickle_globals(data)
    assert problem is None
    assert "collections.OrderedDict" in found and "decimal.Decimal" in found
    with pytest.raises(DecodeError, match="pickle:"):
        decode_typed("pickle", data[: len(data) // 2])


# --- encryption --------------------------------------------------------------------------------


def test_encrypted_payloads(monkeypatch: pytest.MonkeyPatch) -> None:
    serde = EncryptedSerializer.from_pycryptodome_aes(key=KEY)
    type_, data = serde.dumps_typed({"secret": [1, 2]})
    assert type_ == "msgpack+aes" and is_known_type(type_)
    assert decode_typed(type_, data) == {"$encrypted": "msgpack+aes", "size": len(data)}
    assert decode_typed(type_, data, aes_key=KEY) == {"secret": [1, 2]}
    with pytest.raises(DecodeError, match="wrong LANGGRAPH_AES_KEY"):
        decode_typed(type_, data, aes_key=b"x" * 32)
    monkeypatch.setenv("LANGGRAPH_AES_KEY", KEY.decode())
    assert aes_key_from_env() == KEY
    monkeypatch.setenv("LANGGRAPH_AES_KEY", "short")
    with pytest.raises(ReaderError):
        aes_key_from_env()
    monkeypatch.delenv("LANGGRAPH_AES_KEY")
    assert aes_key_from_env() is None


def test_unknown_types() -> None:
    with pytest.raises(DecodeError, match="unknown serialization type 'foo'"):
        decode_typed("foo", b"x")
    with pytest.raises(DecodeError, match="unknown serialization type 'msgpack\\+rot13'"):
        decode_typed("msgpack+rot13", b"x")
    assert decode_typed("null", b"") is None and decode_typed(None, None) is None
    assert decode_typed("bytes", b"ab")["$bytes"] == 2


# --- common helpers --------------------------------------------------------------------------------


def test_uuid6_helpers() -> None:
    theirs = str(uuid6(clock_seq=5))
    ours = new_uuid6(clock_seq=5)
    assert uuid.UUID(ours).version == 6 and uuid.UUID(ours).variant == uuid.RFC_4122
    assert ours[19:23] == theirs[19:23] == "8005"
    assert abs(uuid6_datetime(ours) - datetime.now(timezone.utc)) < timedelta(seconds=5)
    assert abs(uuid6_datetime(theirs) - uuid6_datetime(ours)) < timedelta(seconds=5)
    assert new_uuid6() > ours and uuid6_datetime("not-a-uuid") is None


metadata_values = st.one_of(
    st.builds(lambda d: json.dumps(d).encode(), st.fixed_dictionaries(
        {}, optional={"source": st.sampled_from(["input", "loop", "update", "fork"]),
                      "step": st.integers(-1, 10**6), "graph_id": st.text(max_size=5),
                      "parents": st.dictionaries(st.text(max_size=3), st.text(max_size=3), max_size=2),
                      "user": json_data})),
    st.sampled_from([b"{broken", b"[1, 2]", b"\xff\xfe", b'{"step": "3"}', None, b'{"a":\n1}']),
)


@quick
@given(st.lists(metadata_values, min_size=1, max_size=12))
def test_batch_matches_row_by_row(metadata: list[Any]) -> None:
    n = len(metadata)
    ids = [new_uuid6(clock_seq=i) for i in range(n)]
    cols = CheckpointColumns(["t"] * n, [""] * n, ids, [None] * n, metadata, ["msgpack"] * n, [1] * n)
    table, _findings = checkpoints_batch(cols)
    for row, cid, raw in zip(table.to_pylist(), ids, metadata):
        record = checkpoint_record("t", "", cid, None, raw, 1, codec="msgpack")
        assert (row["step"], row["trigger"], row["agent"], row["status"]) == (
            record.step, record.trigger, record.agent, record.status)
        assert row["created_at"] == record.created_at
        assert json.loads(row["metadata"]) == json.loads(json.dumps(dict(record.metadata), default=str))
    assert table.schema.field("created_at").type == pa.timestamp("us", tz="UTC")


def test_event_messages() -> None:
    interrupt = decode_typed(*SERDE.dumps_typed([Interrupt(value={"q": "ok?"}, id="x")]))
    assert event_message("interrupt", interrupt) == '{"q": "ok?"}'
    assert event_message("error", "ValueError('boom')") == "ValueError('boom')"
    assert event_message("resume", None) is None


def test_deep_nesting_is_a_decode_error() -> None:
    nested = msgpack.packb(["uuid", "UUID", "0" * 32])
    for _ in range(2000):  # would overflow the C stack if followed natively
        nested = msgpack.packb(msgpack.ExtType(0, nested))
    with pytest.raises(DecodeError, match="nested deeper than"):
        decode_typed("msgpack", nested)
    with pytest.raises(DecodeError, match="nesting too deep"):
        decode_typed("msgpack", b"\x91" * 100_000 + b"\x01")
    with pytest.raises(DecodeError, match="json:"):
        decode_typed("json", "[" * 100_000)
    assert decode_typed("json", '{"text": "column"}') == {"text": "column"}


# --- the fast msgpack path (maps built in C, keys checked on the bounds walk) -------------

any_keys = st.one_of(st.text(max_size=6), st.integers(-3, 3), st.booleans(), st.none(), st.binary(max_size=4),
                     st.floats(allow_nan=False, width=32))
keyed_data = st.recursive(
    plain_scalars,
    lambda children: st.lists(children, max_size=4)
    | st.dictionaries(any_keys, children, max_size=4)
    | st.builds(lambda v: msgpack.ExtType(0, msgpack.packb(["uuid", "UUID", v])), st.text(max_size=4))
    | st.builds(lambda v: msgpack.ExtType(5, msgpack.packb(["m", "C", v])), children)
    | st.builds(lambda v: msgpack.ExtType(42, v), st.binary(max_size=6))
    | st.builds(lambda v, tail: msgpack.ExtType(5, msgpack.packb(["m", "C", v])[:-1] + tail),
                children, st.binary(max_size=2)),  # a damaged extension: short, or extra bytes
    max_leaves=30,
)


def _exact(data: bytes) -> Any:
    """The exact path: every map through ``_pairs_as_dict``, then the bounds."""
    from lastgood.readers.langgraph import serde

    return serde._bounded(serde.decode_msgpack(data), len(data))


def _outcome(decode: Any, data: bytes) -> tuple[str, Any]:
    try:
        return "value", _nan_marked(decode(data))
    except DecodeError as exc:
        return "error", (str(exc), exc.check)


def _nan_marked(value: Any) -> Any:
    """``value`` with each NaN replaced by a marker: NaN equals nothing, itself included, so two
    decodings holding one would never compare equal (hypothesis finds such payloads)."""
    if isinstance(value, float) and value != value:
        return "<NaN>"
    if isinstance(value, dict):
        return {k: _nan_marked(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_nan_marked(v) for v in value)
    return value


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(keyed_data, st.binary(max_size=3))
@example(msgpack.ExtType(5, msgpack.packb(["m", "C", float("inf")])[:-1] + b"\x01"), b"")  # a NaN inside
def test_fast_msgpack_decoding_equals_the_exact_path(value: Any, noise: bytes) -> None:
    """bytes keys, keys that collide once decoded, ext values as keys and damage all give the
    exact path's value or error."""
    data = msgpack.packb(value, use_bin_type=True)
    big = msgpack.packb([value, "x" * 300], use_bin_type=True)  # past the small-payload shortcut
    for payload in (data, big, big[:-1], data + noise):
        assert _outcome(lambda d: decode_typed("msgpack", d), payload) == _outcome(_exact, payload)


def test_fast_msgpack_keys_that_are_not_plain_take_the_exact_path() -> None:
    data = msgpack.packb({b"k": 1, "k2": {(1, 2): 3}, "pad": "x" * 300}, use_bin_type=True)
    assert decode_typed("msgpack", data) == {"k": 1, "k2": {"[1, 2]": 3}, "pad": "x" * 300}
    too_deep = msgpack.packb({"pad": "x" * 300, "v": [[[[0]]]]})
    for _ in range(250):
        too_deep = msgpack.packb([msgpack.ExtType(42, b""), msgpack.unpackb(too_deep, strict_map_key=False)])
    with pytest.raises(DecodeError, match="nested deeper than"):
        decode_typed("msgpack", too_deep)
    with shared_decoding(), pytest.raises(DecodeError, match="nested deeper than"):
        decode_typed("msgpack", too_deep)


def test_shared_decoding_gives_one_object_per_message_both_states_hold() -> None:
    msgs = [HumanMessage(content=f"question {i}", id=f"m{i}") for i in range(5)]
    edited = HumanMessage(content="question 2, edited", id="m2")
    blob_a = SERDE.dumps_typed({"messages": msgs, "memory": {"k": 1}})
    blob_b = SERDE.dumps_typed({"messages": [*msgs[:2], edited, *msgs[3:]], "memory": {"k": 2}})
    alone = [normalize_state(decode_typed(*blob)) for blob in (blob_a, blob_b)]
    with shared_decoding():
        a, b = (normalize_state(decode_typed(*blob)) for blob in (blob_a, blob_b))
        with shared_decoding():  # a nested block keeps the outer memos
            again = normalize_state(decode_typed(*blob_a))
    assert [a, b] == alone
    assert [x is y for x, y in zip(a["messages"], b["messages"])] == [True, True, False, True, True]
    assert again["messages"][0] is a["messages"][0]
    assert not any(x is y for x, y in zip(*(state["messages"] for state in alone)))
    after = normalize_state(decode_typed(*blob_a))
    assert after == a and after["messages"][0] is not a["messages"][0]  # the memos end with the block


def test_shared_decoding_keys_payloads_by_extension_depth() -> None:
    """A payload decoded within the depth bound is not reused where it would exceed it."""
    chain = msgpack.ExtType(42, b"")
    for _ in range(MAX_EXT_DEPTH):  # the deepest constructor at depth MAX_EXT_DEPTH - 1: allowed
        chain = msgpack.ExtType(2, msgpack.packb(["m", "T", {"v": chain}], use_bin_type=True))
    wrapped = msgpack.ExtType(2, msgpack.packb(["m", "W", {"v": chain}], use_bin_type=True))
    pad = "x" * 300
    assert decode_typed("msgpack", msgpack.packb({"v": chain, "pad": pad}))["v"]["$type"] == "m.T"
    data = msgpack.packb({"shallow": chain, "deep": wrapped, "pad": pad}, use_bin_type=True)
    with pytest.raises(DecodeError, match="nested deeper than"):
        decode_typed("msgpack", data)
    with shared_decoding(), pytest.raises(DecodeError, match="nested deeper than"):
        decode_typed("msgpack", data)
