"""Sum of products with float32 row accumulation (shared by stats and deltas)."""

from __future__ import annotations

import numpy as np

ROW = 512


def sum_products(x: np.ndarray, y: np.ndarray) -> float:
    """Σ x·y in float64, using float32 row accumulation for float32 inputs."""
    if x.dtype != np.float32:
        return float(np.dot(x.astype(np.float64, copy=False), y.astype(np.float64, copy=False)))
    n = x.size
    full = n - n % ROW
    total = 0.0
    if full:
        rows = np.einsum("ij,ij->i", x[:full].reshape(-1, ROW), y[:full].reshape(-1, ROW))
        total = float(np.add.reduce(rows, dtype=np.float64))
    if n > full:
        total += float(np.dot(x[full:].astype(np.float64), y[full:].astype(np.float64)))
    return total
