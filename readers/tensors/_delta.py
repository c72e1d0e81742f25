"""Chunked comparison of two tensors of equal shape and dtype (see :mod:`.stats`).

Norms, the dot product and the difference norm are taken over the positions
where both tensors are finite; NaN/Inf positions are counted instead.  The
fast path needs no finiteness pass: if Σa², Σb² and Σ(b-a)² computed in
float32 rows are all finite, no element was NaN or Inf.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np

from . import dtypes
from ._sums import sum_products as _sum_products
from .errors import DtypeError


def _vanished(sumsq: float, values: np.ndarray) -> bool:
    """True if float32 squares of ``values`` underflowed (sum tiny or 0 but values ≠ 0)."""
    if values.dtype != np.float32:
        return False
    return 0 < sumsq < 2.0**-90 or (sumsq == 0 and bool(values.any()))


@dataclass
class TensorDelta:
    """Running comparison of tensor A (before) with tensor B (after)."""

    numel: int = 0
    nan_a: int = 0
    nan_b: int = 0
    nan_appeared: int = 0
    inf_a: int = 0
    inf_b: int = 0
    max_abs_diff: float = 0.0
    _dd: float = 0.0
    _aa: float = 0.0
    _bb: float = 0.0
    _ab: float = 0.0

    def update_bytes(self, raw_a: bytes | memoryview, raw_b: bytes | memoryview, dtype: str) -> None:
        """Add aligned chunks of both tensors as raw little-endian ``dtype`` bytes."""
        self.update(dtypes.to_float(raw_a, dtype), dtypes.to_float(raw_b, dtype))

    def update(self, a: np.ndarray, b: np.ndarray) -> None:
        """Add aligned chunks of both tensors as arrays of equal size."""
        a, b = np.asarray(a).reshape(-1), np.asarray(b).reshape(-1)
        if a.size != b.size:
            raise DtypeError("ShapeMismatch", f"chunks of {a.size} and {b.size} elements")
        if a.dtype != b.dtype or a.dtype not in (np.float32, np.float64):
            a, b = a.astype(np.float64), b.astype(np.float64)
        with np.errstate(invalid="ignore", over="ignore"):
            self._update(a, b)

    def _update(self, a: np.ndarray, b: np.ndarray) -> None:
        """Body of :meth:`update` (NaN/Inf warnings silenced by the caller)."""
        self.numel += a.size
        if a.size == 0:
            return
        diff = np.subtract(b, a)
        sums = (_sum_products(a, a), _sum_products(b, b), _sum_products(a, b),
                _sum_products(diff, diff))
        if not all(math.isfinite(s) for s in sums) or any(
                _vanished(s, v) for s, v in ((sums[0], a), (sums[1], b), (sums[3], diff))):
            self._update_slow(a, b)
            return
        self._add(sums, float(max(diff.max(), -diff.min())))

    def _add(self, sums: tuple[float, float, float, float], max_abs: float) -> None:
        """Accumulate (Σa², Σb², Σab, Σd²) and the chunk's max |Δ|."""
        self._aa += sums[0]
        self._bb += sums[1]
        self._ab += sums[2]
        self._dd += sums[3]
        self.max_abs_diff = max(self.max_abs_diff, max_abs)

    def _update_slow(self, a: np.ndarray, b: np.ndarray) -> None:
        """Chunk with NaN/Inf (or float32 overflow): count, mask, use float64."""
        nan_a, nan_b = np.isnan(a), np.isnan(b)
        self.nan_a += int(np.count_nonzero(nan_a))
        self.nan_b += int(np.count_nonzero(nan_b))
        self.nan_appeared += int(np.count_nonzero(nan_b & ~nan_a))
        self.inf_a += int(np.count_nonzero(np.isinf(a)))
        self.inf_b += int(np.count_nonzero(np.isinf(b)))
        keep = np.isfinite(a) & np.isfinite(b)
        a64, b64 = a[keep].astype(np.float64), b[keep].astype(np.float64)
        if a64.size == 0:
            return
        diff = b64 - a64
        sums = (float(np.dot(a64, a64)), float(np.dot(b64, b64)), float(np.dot(a64, b64)),
                float(np.dot(diff, diff)))
        self._add(sums, float(np.abs(diff).max()))

    @property
    def diff_l2(self) -> float:
        """‖B − A‖₂ over positions finite in both."""
        return math.sqrt(self._dd)

    @property
    def a_l2(self) -> float:
        """‖A‖₂ over positions finite in both."""
        return math.sqrt(self._aa)

    @property
    def b_l2(self) -> float:
        """‖B‖₂ over positions finite in both."""
        return math.sqrt(self._bb)

    @property
    def relative_change(self) -> float:
        """‖B − A‖ / ‖A‖ (0 if both are 0, inf if only A is 0)."""
        if self._aa == 0:
            return 0.0 if self._dd == 0 else math.inf
        return self.diff_l2 / self.a_l2

    @property
    def cosine(self) -> float | None:
        """cos(A, B); None when either norm is 0."""
        if self._aa == 0 or self._bb == 0:
            return None
        return max(-1.0, min(1.0, self._ab / (self.a_l2 * self.b_l2)))

    def as_dict(self) -> dict[str, Any]:
        """Plain-data summary."""
        return {
            "numel": self.numel, "diff_l2": self.diff_l2, "a_l2": self.a_l2,
            "b_l2": self.b_l2, "relative_change": self.relative_change,
            "max_abs_diff": self.max_abs_diff, "cosine": self.cosine,
            "nan_a": self.nan_a, "nan_b": self.nan_b, "nan_appeared": self.nan_appeared,
            "inf_a": self.inf_a, "inf_b": self.inf_b,
        }


def tensor_delta(chunks_a: Iterable[bytes | memoryview], chunks_b: Iterable[bytes | memoryview],
                 dtype: str) -> TensorDelta:
    """Compare two tensors given as aligned byte chunks of the same dtype."""
    delta = TensorDelta()
    sentinel = object()
    iter_b = iter(chunks_b)
    for raw_a in chunks_a:
        raw_b = next(iter_b, sentinel)
        if raw_b is sentinel:
            raise DtypeError("ShapeMismatch", "tensor B is shorter than tensor A")
        delta.update_bytes(raw_a, raw_b, dtype)  # type: ignore[arg-type]
    if next(iter_b, sentinel) is not sentinel:
        raise DtypeError("ShapeMismatch", "tensor B is longer than tensor A")
    return delta
