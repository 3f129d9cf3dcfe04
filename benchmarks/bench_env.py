"""Env throughput on one core: scalar ``RhythmEnv`` steps/s and ``BatchedRhythmEnv`` steps/s at N=4096.

Run: ``python benchmarks/bench_env.py`` (add ``--check`` to exit 1 when a target is missed).
Targets: scalar >= 20,000 steps/s; batched >= 2,000,000 steps/s (resets included in both).
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import bench_args, best_rate, pin_one_core, report  # noqa: E402

pinned = pin_one_core()

import numpy as np  # noqa: E402

from rhythm.env import EPISODE_STEPS, BatchedRhythmEnv, RhythmEnv  # noqa: E402

N = 4096


def main() -> None:
    args = bench_args(__doc__)
    env = RhythmEnv()
    actions = [(7 * t) % 10 for t in range(EPISODE_STEPS)]
    state = {"seed": 0}

    def scalar_episode() -> int:
        env.reset(seed=state["seed"])
        state["seed"] += 1
        for a in actions:
            env.step(a)
        return EPISODE_STEPS

    batch = BatchedRhythmEnv("in-dist", "train", N)
    batch_actions = [np.arange(N) % 10 for _ in range(EPISODE_STEPS)]

    def batched_episode() -> int:
        batch.reset(seed=state["seed"])
        state["seed"] += N
        for a in batch_actions:
            batch.step(a)
        return EPISODE_STEPS * N

    scalar = best_rate(scalar_episode, seconds=6)
    batched = best_rate(batched_episode, seconds=6)
    report(
        "env",
        {"scalar_steps_per_s": round(scalar), "batched_steps_per_s_n4096": round(batched), "pinning": pinned},
        {"scalar_steps_per_s": 20_000, "batched_steps_per_s_n4096": 2_000_000},
        check=args.check,
    )


if __name__ == "__main__":
    main()
