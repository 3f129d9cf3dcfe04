"""How much could one-step policy improvement gain for a student? The room an action-judging refine stage has.

Branch mode (``rhythm grpo``, docs/grpo.md) rewards a reply by the week it leads to, the student greedy
after it. This probe asks what the best such reply would gain: the student plays train-split people greedily;
at ``--states-per-week`` random steps of each week it keeps its greedy belief line and plays **every** action,
then itself greedily to the week's end (:func:`rhythm.train.grpo.branch.branch_scores`, as the refine stage
plays branches). Each branch is played under ``--draws`` futures: draw 0 is the person's real noise, draws 1..
redraw the env's noise from the branch step on (the env's ``future`` option: the steps before keep theirs, so
the state is the same). One draw's best action has hindsight of that one future; the honest estimate
picks the best action on draws 1.. and values it on draw 0 (``cross_validated_gain``, with its 95% CI).

    python benchmarks/branch_room.py --model runs/quickstart/sft --seeds 5000-5039 --states-per-week 4 --draws 5

Prints one JSON line: a determinism check (draw 0 with the greedy action replays the played week), and per
state, a single draw's apparent gain of the best action over the greedy one and how often the greedy action is
that best, the same over the mean of the draws, the cross-validated gain, and the variance of an action's
effect (its score minus the state's mean over actions) between actions against the noise variance of one draw.
Seeds are train split, apart from the teacher data's and the free-play seeds (100000+).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import report  # noqa: E402

from rhythm.agents.base import EpisodeSpec
from rhythm.agents.episodes import play
from rhythm.agents.model import ModelAgent, ModelOptions
from rhythm.env.constants import ACTIONS, EPISODE_STEPS
from rhythm.eval.stats import mean_ci
from rhythm.seeds import parse_seeds
from rhythm.train.grpo.branch import State, branch_scores


def action_values(agent: ModelAgent, records: list[dict], per_week: int, draws: int,
                  seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(q, greedy, played)``: ``q[d, s, a]`` the final score of state ``s``'s week with action ``a`` under draw
    ``d``; ``greedy[s]`` the student's own action there; ``played[s]`` the final score of the week it played
    (``records``, the student ``agent``'s own weeks, whose model then plays the branches as eval plays)."""
    import torch

    rng = np.random.default_rng(seed)
    branches, greedy, played = [], [], []
    for r in records:
        for t in sorted(rng.choice(EPISODE_STEPS - 1, per_week, replace=False)):  # not the last step: its action is one step's reward
            steps = r["steps"]
            state = State(r["condition"], r["split"], int(r["seed"]), int(t), tuple(s["response"] for s in steps[:t]))
            belief = steps[t]["response"].split("\n")[0]
            branches += [(state, f"{belief}\nACTION: {a}") for a in ACTIONS]
            greedy.append(ACTIONS.index(steps[t]["action"]))
            played.append(r["score"]["final_score"])
    with torch.no_grad():
        scores = branch_scores(agent.model, agent.tokenizer, agent.stop_ids, agent.options.max_new_tokens, branches,
                               "branch_room", futures=draws)
    q = np.asarray([s["draws"] for s in scores]).T  # (draws, branches)
    return q.reshape(draws, len(greedy), len(ACTIONS)), np.asarray(greedy), np.asarray(played)


def room(q: np.ndarray, greedy: np.ndarray) -> dict[str, float]:
    """Apparent gain of the best action over the greedy one, per state, and how often greedy is that best."""
    idx = np.arange(len(greedy))
    gap = q.max(axis=1) - q[idx, greedy]
    return {"mean_gain": round(float(gap.mean()), 5), "greedy_is_best": round(float(np.mean(gap <= 1e-12)), 3)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", required=True, help="the student: what rhythm eval --agent model:PATH takes")
    ap.add_argument("--seeds", default="5000-5039", help="in-dist train-split people (default 5000-5039)")
    ap.add_argument("--condition", default="in-dist")
    ap.add_argument("--states-per-week", type=int, default=4)
    ap.add_argument("--draws", type=int, default=5, help="futures per branch (>= 2: draw 0 is the real noise)")
    ap.add_argument("--seed", type=int, default=0, help="which steps of each week are probed")
    args = ap.parse_args()
    if args.draws < 2:
        ap.error("--draws must be >= 2 (the cross-validated gain picks on draws 1.. and values on draw 0)")
    started = time.perf_counter()
    specs = [EpisodeSpec(args.condition, "train", s) for s in parse_seeds(args.seeds)]
    agent = ModelAgent(args.model, ModelOptions(max_new_tokens=16))
    records = [r.to_dict() for r in play(agent, specs)]  # its greedy weeks, as eval plays them
    q, greedy, played = action_values(agent, records, args.states_per_week, args.draws, args.seed)
    idx = np.arange(len(greedy))
    picked = q[1:].mean(axis=0).argmax(axis=1)
    effect = q - q.mean(axis=2, keepdims=True)  # an action's effect within one draw (common random numbers)
    noise_var = float(effect.var(axis=0, ddof=1).mean())
    report("branch_room", {
        "model": args.model, "condition": args.condition, "people": len(records), "states": len(greedy),
        "draws": args.draws,
        # draw 0 with the student's own action is the week it played: 0 unless branching broke determinism
        "greedy_branch_vs_played_week": float(np.abs(q[0][idx, greedy] - played).max()),
        "one_draw": room(q[0], greedy), "mean_of_draws": room(q.mean(axis=0), greedy),
        "cross_validated_gain": mean_ci(q[0][idx, picked] - q[0][idx, greedy]),
        "switch_rate": round(float(np.mean(picked != greedy)), 3),
        "effect_variance_between_actions": round(float(effect.mean(axis=0).var(axis=1, ddof=1).mean()) - noise_var / args.draws, 7),
        "effect_noise_variance_one_draw": round(noise_var, 7),
        "seconds": round(time.perf_counter() - started, 1),
    })


if __name__ == "__main__":
    main()
