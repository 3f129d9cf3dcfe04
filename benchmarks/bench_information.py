"""The information ceiling of a prompt: how well can *anything* infer the person from what it is shown?

The env's own particle filter (the bayes teacher's posterior, the env's exact likelihood) is given the
transitions of the bayes teacher's weeks (eval split) and asked for the belief at the last step, once
with the whole week (protocol v2: the conversation holds every step) and once with only the last K
transitions (a K-step window: protocol v1 showed 5; ``llm.history_turns: K`` sends K). Its belief MAE
is a floor for any student shown the same text; the constant prior guess is the ceiling to beat.

Run: ``python benchmarks/bench_information.py [--windows 5,10] [--episodes 100,50,15]`` (about a
minute on one core). Prints one JSON line per condition and a markdown table on stderr.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import report  # noqa: E402


def transitions(condition: str, seeds: list[int]) -> tuple[list[tuple[int, np.ndarray, np.ndarray, np.ndarray]], np.ndarray, np.ndarray]:
    """Replay the bayes teacher's weeks: per step ``(t, before, action, after)``, the episode keys and the truths."""
    from rhythm.agents.base import EpisodeSpec
    from rhythm.agents.episodes import play
    from rhythm.agents.registry import make_agent
    from rhythm.agents.teachers import spec_keys
    from rhythm.env.batched import BatchedRhythmEnv
    from rhythm.env.constants import ACTION_INDEX, EPISODE_STEPS
    from rhythm.grader import true_belief

    specs = [EpisodeSpec(condition, "eval", s) for s in seeds]
    records = play(make_agent("bayes"), specs)
    env = BatchedRhythmEnv(condition, "eval", len(seeds))
    env.reset(seed=seeds)
    out = []
    for t in range(EPISODE_STEPS):
        before = env.state.meters.copy()
        actions = np.array([ACTION_INDEX[r.steps[t].action] for r in records], dtype=np.int64)
        res = env.step_raw(actions)
        out.append((t, before, actions, res.meters.copy()))
    return out, spec_keys(specs), true_belief(condition, "eval", seeds)


def window_mae(steps: list, keys: np.ndarray, truth: np.ndarray, window: int | None) -> np.ndarray:
    """Per-episode belief MAE of a fresh posterior fed only the last ``window`` transitions (None: all)."""
    from rhythm.agents.posterior import ParticlePosterior
    from rhythm.grader import belief_mae

    post = ParticlePosterior(keys)
    first = 0 if window is None else max(0, len(steps) - window)
    for t, before, action, after in steps[first:]:
        post.update(t, before, action, after)
    belief, _ = post.belief()
    return belief_mae(belief, truth)


def main() -> None:
    from rhythm.env.constants import CONDITIONS
    from rhythm.eval.stats import mean_ci
    from rhythm.grader import prior_mae

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--windows", default="5", help="comma-separated K (transitions shown), e.g. 5,10")
    parser.add_argument("--episodes", default="100,50,15", help="eval episodes for in-dist,ood,discrete")
    args = parser.parse_args()
    windows = [int(k) for k in args.windows.split(",")]
    counts = dict(zip(CONDITIONS, (int(n) for n in args.episodes.split(","))))
    rows = []
    for condition in CONDITIONS:
        seeds = list(range(counts[condition]))
        steps, keys, truth = transitions(condition, seeds)
        prior = prior_mae(condition, truth)
        res = {"condition": condition, "episodes": len(seeds), "prior_mae": mean_ci(prior.tolist())}
        for k in windows:
            res[f"last_{k}_mae"] = mean_ci(window_mae(steps, keys, truth, k).tolist())
        res["whole_week_mae"] = mean_ci(window_mae(steps, keys, truth, None).tolist())
        report(f"information_ceiling/{condition}", res)
        rows.append(res)
    head = " | ".join(f"last {k} transitions" for k in windows)
    print(f"| condition | constant prior | {head} | whole week (protocol v2) |", file=sys.stderr)
    print("|---|---|" + "---|" * len(windows) + "---|", file=sys.stderr)
    for r in rows:
        p = r["prior_mae"]["mean"]
        cells = [f"{r[f'last_{k}_mae']['mean']:.3f} ({r[f'last_{k}_mae']['mean'] / p:.2f}x)" for k in windows]
        whole = r["whole_week_mae"]["mean"]
        print(f"| {r['condition']} ({r['episodes']}) | {p:.3f} | {' | '.join(cells)} | {whole:.3f} ({whole / p:.2f}x) |", file=sys.stderr)


if __name__ == "__main__":
    main()
