"""Chunked statistics and deltas against direct numpy formulas in float64."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from lastgood.readers.tensors.errors import DtypeError, TensorsError
from lastgood.readers.tensors.stats import (
    TensorDelta, TensorStats, iter_chunks, iter_range_chunks, tensor_delta, tensor_stats,
)

RTOL = 1e-6


def reference_stats(x: np.ndarray) -> dict:
    """Direct numpy statistics over the finite values, in float64."""
    x = x.astype(np.float64).reshape(-1)
    finite = x[np.isfinite(x)]
    out = {"numel": x.size, "nan": int(np.isnan(x).sum()), "posinf": int((x == np.inf).sum()),
           "neginf": int((x == -np.inf).sum()), "zeros": int((finite == 0).sum()),
           "finite": finite.size}
    if finite.size:
        out.update(min=finite.min(), max=finite.max(), mean=finite.mean(), std=finite.std(),
                   l2=math.sqrt(np.dot(finite, finite)))
    return out


def assert_stats(ours: TensorStats, x: np.ndarray) -> None:
    ref = reference_stats(x)
    got = ours.as_dict()
    for key in ("numel", "nan", "posinf", "neginf", "zeros", "finite"):
        assert got[key] == ref[key], key
    if not ref["finite"]:
        assert got["mean"] is None and got["min"] is None
        return
    assert got["min"] == ref["min"] and got["max"] == ref["max"]
    scale = max(abs(ref["min"]), abs(ref["max"]))
    assert abs(got["mean"] - ref["mean"]) <= RTOL * scale
    assert abs(got["std"] - ref["std"]) <= RTOL * max(ref["std"], 1e-300) + 1e-7 * scale
    assert abs(got["l2"] - ref["l2"]) <= RTOL * ref["l2"]


def stats_of(x: np.ndarray, dtype: str, chunk_bytes: int) -> TensorStats:
    return tensor_stats(iter_chunks(x.tobytes(), dtype, chunk_bytes), dtype)


finite32 = st.floats(width=32, allow_nan=False, allow_infinity=False)
any32 = st.floats(width=32)


@settings(max_examples=300, deadline=None)
@given(arrays(np.float32, st.integers(0, 3000), elements=st.one_of(finite32, any32)),
       st.sampled_from([4, 64, 1000, 4096, 1 << 20]))
def test_stats_match_numpy(x: np.ndarray, chunk_bytes: int) -> None:
    assert_stats(stats_of(x, "F32", chunk_bytes), x)


@pytest.mark.parametrize("scale", [1e-30, 1e-3, 1.0, 1e20, 5e37])
def test_stats_random_normal_with_specials(scale: float) -> None:
    rng = np.random.default_rng(7)
    x = (rng.standard_normal(200_003) * scale).astype(np.float32)
    x[[5, 77, 1000]] = [np.nan, np.inf, -np.inf]
    x[10:20] = 0
    assert_stats(stats_of(x, "F32", 65536), x)


def test_large_mean_small_spread_keeps_precision() -> None:
    rng = np.random.default_rng(3)
    x = (1.0 + rng.standard_normal(1_000_000) * 1e-4).astype(np.float32)
    assert_stats(stats_of(x, "F32", 1 << 18), x)
    ones = np.ones(100_000, np.float32)
    assert stats_of(ones, "F32", 4096).std == 0.0


@pytest.mark.parametrize("dtype, np_dtype", [
    ("F64", "<f8"), ("F16", "<f2"), ("I64", "<i8"), ("I32", "<i4"), ("U8", "u1"), ("BOOL", "?"),
])
def test_other_dtypes(dtype: str, np_dtype: str) -> None:
    rng = np.random.default_rng(11)
    x = (rng.standard_normal(10_001) * 50).astype(np_dtype)
    assert_stats(stats_of(x, dtype, 4096), x)


def test_bf16_bytes() -> None:
    rng = np.random.default_rng(5)
    f32 = rng.standard_normal(5000).astype(np.float32)
    bf16 = (f32.view(np.uint32) >> 16).astype("<u2")
    exact = (bf16.astype(np.uint32) << 16).view(np.float32)
    assert_stats(tensor_stats(iter_chunks(bf16.tobytes(), "BF16", 1000), "BF16"), exact)


def test_merge_equals_single_pass() -> None:
    rng = np.random.default_rng(9)
    x = rng.standard_normal(30_000).astype(np.float32)
    x[100] = np.nan
    left, right = TensorStats(), TensorStats()
    left.update(x[:12_345])
    right.update(x[12_345:])
    assert_stats(left.merge(right), x)
    assert TensorStats().merge(TensorStats()).as_dict()["mean"] is None


def test_iter_range_chunks() -> None:
    x = np.arange(1000, dtype=np.float32)
    blob = b"head" + x.tobytes() + b"tail"
    chunks = list(iter_range_chunks(lambda o, n: blob[o : o + n], 4, 4 + x.nbytes, "F32", 1000))
    assert {len(c) % 4 for c in chunks} == {0} and b"".join(chunks) == x.tobytes()
    assert_stats(tensor_stats(chunks, "F32"), x)
    with pytest.raises(TensorsError):
        list(iter_range_chunks(lambda o, n: b"", 0, 8, "F32"))


# ------------------------------------------------------------------- delta --
def reference_delta(a: np.ndarray, b: np.ndarray) -> dict:
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    keep = np.isfinite(a64) & np.isfinite(b64)
    fa, fb = a64[keep], b64[keep]
    d = fb - fa
    out = {"diff_l2": np.linalg.norm(d), "a_l2": np.linalg.norm(fa), "b_l2": np.linalg.norm(fb),
           "max_abs_diff": np.abs(d).max() if d.size else 0.0,
           "nan_a": int(np.isnan(a64).sum()), "nan_b": int(np.isnan(b64).sum()),
           "nan_appeared": int((np.isnan(b64) & ~np.isnan(a64)).sum()),
           "inf_a": int(np.isinf(a64).sum()), "inf_b": int(np.isinf(b64).sum())}
    out["relative_change"] = out["diff_l2"] / out["a_l2"] if out["a_l2"] else None
    norms = out["a_l2"] * out["b_l2"]
    out["cosine"] = float(np.dot(fa, fb) / norms) if norms else None
    return out


def assert_delta(ours: TensorDelta, a: np.ndarray, b: np.ndarray) -> None:
    ref, got = reference_delta(a, b), ours.as_dict()
    for key in ("nan_a", "nan_b", "nan_appeared", "inf_a", "inf_b"):
        assert got[key] == ref[key], key
    assert abs(got["max_abs_diff"] - ref["max_abs_diff"]) <= RTOL * ref["max_abs_diff"]
    for key in ("diff_l2", "a_l2", "b_l2"):
        assert abs(got[key] - ref[key]) <= RTOL * ref[key], key
    if ref["relative_change"] is not None:
        assert abs(got["relative_change"] - ref["relative_change"]) <= RTOL * ref["relative_change"]
    if ref["cosine"] is not None:
        assert abs(got["cosine"] - ref["cosine"]) <= RTOL


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 5000), st.floats(1e-6, 1.0), st.integers(0, 3), st.sampled_from([4, 512, 4096, 1 << 20]),
       st.sampled_from([1e-30, 1.0, 1e25]))
def test_delta_matches_numpy(n: int, noise: float, specials: int, chunk_bytes: int, scale: float) -> None:
    rng = np.random.default_rng(n)
    a = (rng.standard_normal(n) * scale).astype(np.float32)
    b = (a + rng.standard_normal(n) * noise * scale).astype(np.float32)
    for _ in range(specials if n else 0):
        which = a if rng.integers(2) else b
        which[rng.integers(n)] = rng.choice([np.nan, np.inf, -np.inf])
    delta = tensor_delta(iter_chunks(a.tobytes(), "F32", chunk_bytes),
                         iter_chunks(b.tobytes(), "F32", chunk_bytes), "F32")
    assert delta.numel == n
    assert_delta(delta, a, b)


def test_delta_edge_cases() -> None:
    zeros = np.zeros(1000, np.float32)
    same = TensorDelta()
    same.update(zeros, zeros)
    assert same.relative_change == 0.0 and same.cosine is None and same.diff_l2 == 0.0
    grew = TensorDelta()
    grew.update(zeros, np.ones(1000, np.float32))
    assert grew.relative_change == math.inf and grew.cosine is None
    nan_b = np.ones(1000, np.float32)
    nan_b[3] = np.nan
    appeared = TensorDelta()
    appeared.update(np.ones(1000, np.float32), nan_b)
    assert appeared.nan_appeared == 1 and appeared.cosine == pytest.approx(1.0)
    with pytest.raises(DtypeError):
        tensor_delta([b"\0" * 8], [b"\0" * 8, b"\0" * 8], "F32")
    with pytest.raises(DtypeError):
        TensorDelta().update(np.zeros(3), np.zeros(4))
    bf16 = TensorDelta()
    bf16.update_bytes(b"\x80\x3f" * 4, b"\x00\x40" * 4, "BF16")  # 1.0 -> 2.0
    assert bf16.diff_l2 == pytest.approx(2.0) and bf16.max_abs_diff == 1.0
