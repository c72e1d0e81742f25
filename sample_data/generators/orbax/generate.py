#!/usr/bin/env python3
"""Write a small, real Orbax CheckpointManager directory (CPU JAX).

    .venv-fixtures/orbax/bin/python sample_data/generators/orbax/generate.py --out sample_data/training

Writes <out>/orbax/ with steps 10, 20, 30, 40 (max_to_keep unset: all kept).
Each step holds two items, as ocp.args.Composite: "state" (StandardSave of a
small pytree of jax arrays: f32, bf16, int32 scalar) and "metadata" (JsonSave).
The per-step metrics (loss) go to the manager so best_step() has data.
Array values are seeded; _CHECKPOINT_METADATA carries Orbax's own wall-clock
timestamps, so those bytes differ between runs.
"""
from __future__ import annotations

import argparse
import os
import shutil
import sys
from pathlib import Path

os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import orbax.checkpoint as ocp  # noqa: E402

SEED = 1234
STEPS = (10, 20, 30, 40)


def make_state(step: int, key) -> dict:
    k1, k2, k3 = jax.random.split(key, 3)
    scale = 1.0 / step
    return {
        "params": {
            "dense": {
                "kernel": jax.random.normal(k1, (4, 8), dtype=jnp.float32) * scale,
                "bias": jnp.zeros((8,), dtype=jnp.float32) + step,
            },
            "head": {"kernel": jax.random.normal(k2, (8, 2), dtype=jnp.bfloat16)},
        },
        "opt_state": {"mu": jax.random.normal(k3, (4, 8), dtype=jnp.float32) * 0.01,
                      "count": jnp.asarray(step, dtype=jnp.int32)},
        "step": jnp.asarray(step, dtype=jnp.int32),
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="sample_data/training")
    a = ap.parse_args(argv)
    d = Path(a.out).resolve() / "orbax"
    if d.exists():
        shutil.rmtree(d)
    # Loss goes down then up: best_step (min loss) is 20, latest_step is 40.
    losses = {10: 0.9, 20: 0.4, 30: 0.55, 40: 0.6}
    options = ocp.CheckpointManagerOptions(create=True, best_fn=lambda m: m["loss"], best_mode="min")
    key = jax.random.PRNGKey(SEED)
    # Orbax insists on an absolute path (tensorstore OCDBT spec); commit_success.txt
    # files therefore record this machine's absolute path.
    with ocp.CheckpointManager(d, options=options) as mngr:
        for step in STEPS:
            key, sub = jax.random.split(key)
            mngr.save(
                step,
                args=ocp.args.Composite(
                    state=ocp.args.StandardSave(make_state(step, sub)),
                    metadata=ocp.args.JsonSave({"step": step, "run_name": "lastgood-fixture",
                                                "loss": losses[step]}),
                ),
                metrics={"loss": losses[step]},
            )
        mngr.wait_until_finished()
        print(f"  orbax: all_steps={mngr.all_steps()} latest={mngr.latest_step()} best={mngr.best_step()}")
    # self-check: restore the latest step
    with ocp.CheckpointManager(d) as mngr:
        r = mngr.restore(mngr.latest_step(), args=ocp.args.Composite(
            state=ocp.args.StandardRestore(), metadata=ocp.args.JsonRestore()))
        assert int(np.asarray(r.state["step"])) == STEPS[-1]
        assert r.metadata["step"] == STEPS[-1]
    print(f"  versions: jax={jax.__version__} orbax-checkpoint={ocp.__version__ if hasattr(ocp, '__version__') else '?'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
