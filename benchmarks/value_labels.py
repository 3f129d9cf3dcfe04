"""Label the restore rule's action only where the student's own futures say it wins: docs/grpo-ablation.md's twenty-seventh round.

The few-weeks quickstart's DAgger stage learns the refined student's relabelled weeks with the actions as played
(``runs/quickstart-few/dagger-play/own_filtered.jsonl``). Labelling the restore rule's action at every state where it
names one (rounds 16, 17, 19) cut crashes and cost in-dist progress. This script labels it only where it is worth
more than the played action at that very state: at each state of the student's weeks where the rule
(:func:`rhythm.agents.restore.restoring_action`) names an action the student did not play, both actions are played
from that state under ``--draws`` futures, the student greedy after them (:func:`rhythm.train.grpo.branch.branch_scores`,
as the restore pairs value them; draw 0 is the person's own noise, the others redraw it from the branch step on, the
same for both actions). Where the rule's week scores higher in every draw, the relabelled week's ACTION line there
becomes the rule's; every other reply is kept as it is. (Row BV. The control, the rule's label at every such state,
``rhythm relabel --restore-below 0.25``, gained more, and is the shipped dagger stage's since that round.)

    python benchmarks/value_labels.py runs/quickstart-few/dagger-play/eval_results_v2.episodes.jsonl \\
        runs/quickstart-few/dagger-play/own_filtered.jsonl --model runs/quickstart-few/grpo -o own_value.jsonl
    rhythm sft --config configs/sft-tiny-dagger.yaml --model runs/quickstart-few/grpo \\
        --data runs/quickstart-few/data/teacher.jsonl,own_value.jsonl

PLAYS are the student's weeks as it played them (its own replies are the context its futures continue); OWN are
the same weeks relabelled (``rhythm relabel``). One JSON line: the states named, those relabelled, the gain over
the played action (draw 0) at each, and a determinism check (draw 0 with the played action replays the recorded
week; float rounding between batch neighbours can flip a rare greedy token, so it is reported, not asserted).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import report, run_or_exit  # noqa: E402

from rhythm.agents.restore import restore_labels  # noqa: E402
from rhythm.errors import RhythmError  # noqa: E402
from rhythm.eval.stats import mean_ci  # noqa: E402
from rhythm.protocol import format_ending, parse_reply  # noqa: E402
from rhythm.records import read_episodes, write_episodes  # noqa: E402


def key(record: dict[str, Any]) -> tuple[str, str, int]:
    return str(record["condition"]), str(record["split"]), int(record["seed"])


def contested(plays: list[dict[str, Any]], below: float) -> list[tuple[dict[str, Any], int, str]]:
    """(week, t, the rule's action) where the rule names an action the student did not play, the last step left out
    (:func:`rhythm.agents.restore.restore_labels`), ordered by step so that one batch of futures starts together."""
    states = [(r, t, rule) for r, week in zip(plays, restore_labels(plays, below), strict=True)
              for t, rule in enumerate(week) if rule is not None and rule != r["steps"][t]["action"]]
    return sorted(states, key=lambda s: s[1])


def values(model: str, states: list[tuple[dict[str, Any], int, str]], draws: int, chunk: int) -> np.ndarray:
    """``v[d, s, k]``: the final score of state ``s``'s week under draw ``d`` with the played action (k = 0) and with
    the rule's (k = 1), the student greedy after it."""
    import torch
    from rich.console import Console
    from rich.progress import track

    from rhythm.agents.model import ModelAgent, ModelOptions
    from rhythm.train.grpo.branch import State, branch_scores

    agent = ModelAgent(model, ModelOptions(max_new_tokens=16))
    branches = []
    for record, t, rule in states:
        steps = record["steps"]
        state = State(*key(record), t, tuple(s["response"] for s in steps[:t]))
        played = steps[t]["response"]
        branches += [(state, played), (state, f"{played.split(chr(10))[0]}\nACTION: {rule}")]
    scores: list[dict[str, Any]] = []
    with torch.no_grad():
        for i in track(range(0, len(branches), chunk), description="futures", console=Console(stderr=True), transient=True):
            scores += branch_scores(agent.model, agent.tokenizer, agent.stop_ids, agent.options.max_new_tokens,
                                    branches[i : i + chunk], "value_labels", futures=draws)
    return np.asarray([s["draws"] for s in scores]).T.reshape(draws, len(states), 2)


def relabelled(own: str, wins: dict[tuple[str, str, int], dict[int, str]]) -> list[dict[str, Any]]:
    """OWN's weeks with the rule's action as the label at the won states (the belief line as relabelled)."""
    out = []
    for where, record in read_episodes(own):
        won = wins.get(key(record), {})
        steps = list(record["steps"])
        for t, rule in won.items():
            parsed = parse_reply(steps[t]["response"])
            if not parsed.ok:
                raise RhythmError(f"{where}: step {t} of a relabelled week does not parse")
            steps[t] = {**steps[t], "response": format_ending(parsed.belief, rule), "action": rule}
        out.append({**record, "steps": steps})
    return out


def run(args: argparse.Namespace) -> None:
    started = time.perf_counter()
    plays = [record for _, record in read_episodes(args.plays)]
    states = contested(plays, args.below)
    if args.limit:
        states = states[: args.limit]
    v = values(args.model, states, args.draws, args.chunk)
    gain, won = v[:, :, 1] - v[:, :, 0], (v[:, :, 1] > v[:, :, 0]).all(axis=0)
    off = np.abs(v[0, :, 0] - np.asarray([r["score"]["final_score"] for r, _, _ in states]))
    wins: dict[tuple[str, str, int], dict[int, str]] = {}
    for (record, t, rule), w in zip(states, won, strict=True):
        if w:
            wins.setdefault(key(record), {})[t] = rule
    n = write_episodes(args.output, relabelled(args.own, wins)) if args.output else 0
    report("value_labels", {
        "plays": args.plays, "own": args.own, "model": args.model, "draws": args.draws, "below": args.below,
        "weeks": len(plays), "contested_states": len(states), "relabelled": int(won.sum()), "weeks_written": n,
        "gain_draw0_all": mean_ci(gain[0]), "gain_draw0_relabelled": mean_ci(gain[0][won]) if won.any() else None,
        "rule_wins_draw0": round(float((gain[0] > 0).mean()), 3), "ties_draw0": round(float((gain[0] == 0).mean()), 3),
        "played_branch_vs_recorded_max": round(float(off.max()), 6) if len(off) else None,
        "played_branch_vs_recorded_share_off": round(float(np.mean(off > 1e-9)), 4) if len(off) else None,
        "seconds": round(time.perf_counter() - started, 1),
    })


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("plays", help="the student's weeks as played (rhythm eval's *.episodes.jsonl)")
    ap.add_argument("own", help="the same weeks relabelled (rhythm relabel's output)")
    ap.add_argument("--model", required=True, help="the student that played them (what rhythm eval --agent model:PATH takes)")
    ap.add_argument("-o", "--output", default=None, help="the relabelled weeks with the won labels (JSONL); none: report only")
    ap.add_argument("--draws", type=int, default=2, help="futures per action (draw 0: the person's own noise)")
    ap.add_argument("--below", type=float, default=0.25, help="a meter below this runs low (the restore pairs' 0.25)")
    ap.add_argument("--chunk", type=int, default=256, help="branches played in one lockstep batch")
    ap.add_argument("--limit", type=int, default=0, help="only the first N contested states (a timing probe)")
    args = ap.parse_args(argv)
    if args.draws < 1:
        ap.error("--draws must be >= 1")
    run_or_exit("value_labels", run, args)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
