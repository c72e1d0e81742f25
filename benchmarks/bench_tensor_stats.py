"""Tensor statistics throughput against ``sha256sum`` on the same 256 MiB of float32 (the anchor).

    python benchmarks/bench_tensor_stats.py

Prints MB/s of the stats pass alone, of hash+decode+stats in one pass (what ``verify --read-data``
does per tensor) and of ``sha256sum`` over the same bytes, best of three each, and the ratio.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable

import numpy as np

from lastgood.readers.tensors.stats import TensorStats, iter_chunks, tensor_stats

SIZE = 256 << 20


def best_mbs(fn: Callable[[], object]) -> float:
    times = []
    for _ in range(3):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return SIZE / min(times) / 1e6


def main() -> None:
    raw = np.random.default_rng(0).standard_normal(SIZE // 4, dtype=np.float32).tobytes()

    def combined() -> None:
        digest, stats = hashlib.sha256(), TensorStats()
        for chunk in iter_chunks(raw, "F32"):
            digest.update(chunk)
            stats.update_bytes(chunk, "F32")

    stats_mbs = best_mbs(lambda: tensor_stats(iter_chunks(raw, "F32"), "F32"))
    combined_mbs = best_mbs(combined)
    sha = shutil.which("sha256sum") or "sha256sum"
    with tempfile.NamedTemporaryFile() as fh:
        fh.write(raw)
        fh.flush()
        sha_mbs = best_mbs(lambda: subprocess.run([sha, fh.name], check=True, capture_output=True))
    print(f"stats {stats_mbs:.0f} MB/s, hash+decode+stats {combined_mbs:.0f} MB/s, "
          f"sha256sum {sha_mbs:.0f} MB/s, ratio {combined_mbs / sha_mbs:.2f}")


if __name__ == "__main__":
    main()
