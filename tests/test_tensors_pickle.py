"""Safe pickle walker: plain-data round trips, refusal of unsafe globals, work bounds."""

from __future__ import annotations

import argparse
import os
import pickle
import pickletools
import struct
import warnings
from collections import Counter, OrderedDict

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lastgood.readers.tensors._opdecode import iter_ops
from lastgood.readers.tensors.errors import PickleError, PickleTooLarge, TensorsError, UnsafeGlobal
from lastgood.readers.tensors.pickle_walk import (
    GlobalRef, Limits, PickledOrderedDict, PlainObject, check_globals, plain, walk,
)
from lastgood.readers.tensors.torch_pickle import TORCH_ALLOW, TensorRef, iter_tensors, torch_persistent_load

PROTOCOLS = range(0, pickle.HIGHEST_PROTOCOL + 1)

keys = st.one_of(st.integers(), st.text(max_size=5), st.booleans(), st.none(),
                 st.tuples(st.integers(), st.text(max_size=3)))
leaves = st.one_of(
    st.none(), st.booleans(), st.integers(), st.integers(min_value=-(2**200), max_value=2**200),
    st.floats(allow_nan=False), st.text(max_size=20), st.binary(max_size=20),
    st.binary(max_size=8).map(bytearray),
)
data = st.recursive(
    leaves,
    lambda inner: st.one_of(
        st.lists(inner, max_size=5), st.tuples(inner, inner),
        st.dictionaries(keys, inner, max_size=5), st.frozensets(keys, max_size=4),
        st.sets(keys, max_size=4),
    ),
    max_leaves=25,
)


@settings(max_examples=300, deadline=None)
@given(data, st.sampled_from(list(PROTOCOLS)))
def test_plain_data_round_trips(obj: object, protocol: int) -> None:
    assert walk(pickle.dumps(obj, protocol), TORCH_ALLOW) == obj


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_shared_and_recursive_structures(protocol: int) -> None:
    shared = [1, 2]
    looped: list = []
    looped.append(looped)
    tup = ([],)
    tup[0].append(tup)
    out = walk(pickle.dumps({"a": shared, "b": shared, "loop": looped, "tup": tup}, protocol), TORCH_ALLOW)
    assert out["a"] is out["b"] and out["a"] == [1, 2]
    assert out["loop"][0] is out["loop"]
    assert out["tup"][0][0] is out["tup"]


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_known_objects_become_plain_data(protocol: int) -> None:
    od = OrderedDict(a=1)
    od._metadata = {"": {"version": 1}}  # like nn.Module.state_dict()
    obj = {"ns": argparse.Namespace(lr=0.5), "od": od, "c": Counter("aab"),
           "f": np.float64(1.5), "i": np.int64(-3), "b": np.bool_(True), "u": np.uint8(7),
           "z": np.complex64(1 + 2j), "cx": complex(1, 2)}
    out = walk(pickle.dumps(obj, protocol), TORCH_ALLOW)
    assert isinstance(out["ns"], PlainObject)
    assert out["ns"]["__class__"] == "argparse.Namespace" and out["ns"]["state"] == {"lr": 0.5}
    assert isinstance(out["od"], PickledOrderedDict) and out["od"] == {"a": 1}
    assert out["od"].state == {"_metadata": {"": {"version": 1}}}
    assert out["c"] == Counter("aab")
    assert (out["f"], out["i"], out["b"], out["u"], out["z"], out["cx"]) == (1.5, -3, True, 7, 1 + 2j, 1 + 2j)
    assert type(out["f"]) is float and type(out["i"]) is int


def test_numpy_array_stays_plain() -> None:
    out = walk(pickle.dumps(np.arange(3), 2), TORCH_ALLOW)
    assert isinstance(out, PlainObject) and out["__class__"].endswith("_reconstruct")


# ------------------------------------------------------------------ unsafe --
def _unicode(text: str) -> bytes:
    raw = text.encode()
    return b"X" + struct.pack("<I", len(raw)) + raw


EVIL = {
    "GLOBAL os.system": (b"\x80\x02cos\nsystem\n" + _unicode("true") + b"\x85R.", "os.system"),
    "pickled os.system p2": (pickle.dumps(os.system, 2), "posix.system"),
    "pickled os.system p4": (pickle.dumps(os.system, 4), "posix.system"),
    "pickled eval p0": (pickle.dumps(eval, 0), "builtins.eval"),
    "py2 __builtin__.eval": (b"c__builtin__\neval\n(S'1'\ntR.", "builtins.eval"),
    "INST": (b"(ios\nsystem\nS'true'\n.", "os.system"),
    "STACK_GLOBAL memo": (b"\x80\x04\x8c\x02os\x94\x8c\x06system\x94h\x00h\x01\x93.", "os.system"),
    "STACK_GLOBAL computed": (b"\x80\x04\x8c\x02os2\x8c\x06system\x93.", "<computed>"),
    "EXT1": (b"\x80\x02\x82\x01.", "<extension 1>"),
    "subprocess": (pickle.dumps(__import__("subprocess").Popen, 2), "subprocess.Popen"),
}


@pytest.mark.parametrize("name", sorted(EVIL))
def test_unsafe_globals_are_refused(name: str) -> None:
    payload, global_name = EVIL[name]
    with pytest.raises(UnsafeGlobal) as err:
        walk(payload, TORCH_ALLOW)
    assert err.value.name == global_name
    assert err.value.code == "UnsafeGlobal"
    assert global_name in str(err.value)


def test_refusal_happens_before_any_handler_runs() -> None:
    calls: list[str] = []

    def spy(name: str, args: tuple) -> object:
        calls.append(name)
        return plain(name, args)

    allow = {"argparse.Namespace": spy}
    payload = pickle.dumps([argparse.Namespace(a=1), os.system], 2)
    with pytest.raises(UnsafeGlobal):
        walk(payload, allow)
    assert calls == []
    assert check_globals(pickle.dumps([argparse.Namespace(a=1)], 4), allow) == ["argparse.Namespace"]


# ---------------------------------------------------------------- bounds ----
def test_limits() -> None:
    big = pickle.dumps(list(range(1000)), 2)
    with pytest.raises(PickleTooLarge):
        walk(big, TORCH_ALLOW, limits=Limits(max_ops=100))
    with pytest.raises(PickleTooLarge):
        walk(big, TORCH_ALLOW, limits=Limits(max_container=10))
    memo_heavy = pickle.dumps([str(i) for i in range(100)], 2)
    with pytest.raises(PickleTooLarge):
        walk(memo_heavy, TORCH_ALLOW, limits=Limits(max_memo=10))
    deep = b"\x80\x02K\x01" + b"\x85" * 5000 + b"."
    with pytest.raises(PickleTooLarge):
        walk(deep, TORCH_ALLOW)
    assert walk(b"\x80\x02K\x01" + b"\x85" * 50 + b".", TORCH_ALLOW) is not None


@pytest.mark.parametrize("payload", [
    b"", b"\x80\x02", b"\x80\x02}q\x00(X\x01\x00\x00\x00a", b"\x80\x02K\x01t.",
    b"\x80\x02}K\x01b.", b"\x80\x02K\x01)R.", b"\x80\x02h\x05.", b"\x80\x02]K\x01K\x02s.",
    b"\x80\x02(K\x01Q.", b"\x80\x02\xff.", b"\x80\x02}K\x01K\x02u.", b"\x80\x02]}K\x01s.",
    b"\x80\x02L1" + b"0" * 5000 + b"L\n.",
])
def test_malformed_pickles_raise_pickle_error(payload: bytes) -> None:
    with pytest.raises(PickleError):
        walk(payload, TORCH_ALLOW)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=200))
def test_random_bytes_only_raise_our_errors(payload: bytes) -> None:
    try:
        walk(payload, TORCH_ALLOW, persistent_load=torch_persistent_load)
    except TensorsError:
        pass


@settings(max_examples=300, deadline=None)
@given(data, st.sampled_from(list(PROTOCOLS)), st.data())
def test_mutated_pickles_only_raise_our_errors(obj: object, protocol: int, draw: st.DataObject) -> None:
    payload = bytearray(pickle.dumps(obj, protocol))
    for _ in range(draw.draw(st.integers(1, 3))):
        payload[draw.draw(st.integers(0, len(payload) - 1))] = draw.draw(st.integers(0, 255))
    try:
        walk(bytes(payload), TORCH_ALLOW)
    except TensorsError:
        pass


# ------------------------------------------------------------ torch shapes --
def _tensor_pickle(pid_type: str, args_extra: bytes = b"") -> bytes:
    """Hand-made torch-style pickle of one tensor (storage key '0')."""
    return (b"\x80\x02}q\x00X\x01\x00\x00\x00wc" + b"torch._utils\n_rebuild_tensor_v2\n"
            + b"((X\x07\x00\x00\x00storagectorch\n" + pid_type.encode() + b"\nX\x01\x00\x00\x000"
            + b"X\x03\x00\x00\x00cpuK\x06tQK\x00K\x02K\x03\x86K\x03K\x01\x86\x89"
            + b"ccollections\nOrderedDict\n)R" + args_extra + b"tRs.")


def test_rebuild_tensor_v2() -> None:
    out = walk(_tensor_pickle("FloatStorage"), TORCH_ALLOW, persistent_load=torch_persistent_load)
    ref = out["w"]
    assert isinstance(ref, TensorRef)
    assert (ref.storage_key, ref.dtype, ref.shape, ref.stride, ref.storage_offset) == ("0", "F32", (2, 3), (3, 1), 0)
    assert ref.storage_nbytes == 24 and ref.is_contiguous and ref.extent() == (0, 24)
    assert list(iter_tensors(out)) == [("w", ref)]


def test_tensor_without_persistent_load_and_bad_pids() -> None:
    with pytest.raises(PickleError):
        walk(_tensor_pickle("FloatStorage"), TORCH_ALLOW)
    with pytest.raises(UnsafeGlobal):
        walk(_tensor_pickle("NotAStorage"), TORCH_ALLOW, persistent_load=torch_persistent_load)
    with pytest.raises(PickleError):
        walk(b"\x80\x02X\x01\x00\x00\x00xQ.", TORCH_ALLOW, persistent_load=torch_persistent_load)


def test_value_globals_are_not_callable() -> None:
    payload = b"\x80\x02ctorch\nfloat32\n)R."
    with pytest.raises(PickleError):
        walk(payload, TORCH_ALLOW)
    assert walk(b"\x80\x02ctorch\nfloat32\n.", TORCH_ALLOW) == GlobalRef("torch.float32", plain)


# ----------------------------------------------------------- opcode decoder --
def _genops_or_error(payload: bytes) -> list | str:
    """The oracle: the standard library's decoder (quiet: on a mutated STRING argument it warns about
    an invalid escape from codecs.escape_decode, which our decoder does not use)."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            return [(op.name, arg, pos) for op, arg, pos in pickletools.genops(payload)]
    except Exception:
        return "error"


def _iter_ops_or_error(payload: bytes) -> list | str:
    try:
        return list(iter_ops(payload))
    except PickleError:
        return "error"


@settings(max_examples=300, deadline=None)
@given(data, st.sampled_from(list(PROTOCOLS)), st.data())
def test_iter_ops_equals_pickletools(obj: object, protocol: int, draw: st.DataObject) -> None:
    payload = bytearray(pickle.dumps(obj, protocol))
    if draw.draw(st.booleans()):
        payload[draw.draw(st.integers(0, len(payload) - 1))] = draw.draw(st.integers(0, 255))
    if draw.draw(st.booleans()):
        payload = payload[: draw.draw(st.integers(0, len(payload)))]
    assert _iter_ops_or_error(bytes(payload)) == _genops_or_error(bytes(payload))


def test_replay_without_cache(monkeypatch: pytest.MonkeyPatch) -> None:
    from lastgood.readers.tensors import pickle_walk

    monkeypatch.setattr(pickle_walk, "_CACHE_OPS", 5)
    obj = {"a": [1, 2, 3], "b": ("x", b"y"), "c": {1.5}}
    for protocol in PROTOCOLS:
        assert walk(pickle.dumps(obj, protocol), TORCH_ALLOW) == obj
