"""Does a student keep low meters off the crash line? At every state of its weeks where the restore pairs name an
action (:func:`rhythm.agents.restore.restoring_action`: a meter below ``--below`` that one action can keep off the
crash line), how often it played that action; with ``--model``, the probability each model gives it there.

The restore pairs (``configs/grpo-tiny-restore.yaml``) compare the student's action with that one at such states;
``benchmarks/serenity_room.py --rule restore`` plays it everywhere. This says how much of the rule a student has
learned, on the weeks it played (docs/grpo-ablation.md, fourteenth round):

    python benchmarks/restore_adherence.py runs/eval/eval_results_v2.episodes.jsonl --condition ood
    python benchmarks/restore_adherence.py QS_WEEKS.jsonl --model QS --model REFINED --states 200   # P(the rule's action)

One JSON line per file (named states a week, the share played) and per model (mean probability of the rule's action
among the ten action lines after the week's own belief line, the share where it is the most likely, teacher-forced on
the same ``--states`` named states, sampled with ``--seed``; the last step is left out, as the pairs leave it out).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import report, run_or_exit  # noqa: E402

from rhythm.agents.episodes import replay_records  # noqa: E402
from rhythm.agents.restore import restoring_action  # noqa: E402
from rhythm.env.constants import CONDITIONS, EPISODE_STEPS  # noqa: E402
from rhythm.errors import RhythmError  # noqa: E402
from rhythm.records import read_episodes  # noqa: E402


def start_meters(records: list[dict[str, Any]]) -> list[np.ndarray]:
    """The meters each agent saw before its first action (the env replayed to step 0)."""
    out: list[np.ndarray] = [np.empty(0)] * len(records)
    for idx, _, done in replay_records(records, lambda r: []):
        for i, m in zip(idx, done.start_meters, strict=True):
            out[i] = m
    return out


def named_states(records: list[dict[str, Any]], below: float) -> list[tuple[dict[str, Any], int, str]]:
    """(record, t, the rule's action) at every step where :func:`restoring_action` names one, read off the meters
    the agent saw: the start meters at t = 0, the meters after the step before otherwise."""
    out = []
    for record, seen in zip(records, start_meters(records), strict=True):
        for t, step in enumerate(record["steps"]):
            action = restoring_action(seen, t, below)
            if action is not None:
                out.append((record, t, action))
            seen = step["meters"]
    return out


def adherence(records: list[dict[str, Any]], below: float) -> dict[str, Any]:
    """Named states a week and the share of them where the played action is the rule's."""
    named = named_states(records, below)
    played = sum(record["steps"][t]["action"] == action for record, t, action in named)
    return {"weeks": len(records), "named_per_week": round(len(named) / max(len(records), 1), 3),
            "played_share": round(played / max(len(named), 1), 3)}


def action_probabilities(model_path: str, states: list[tuple[dict[str, Any], int, str]]) -> dict[str, Any]:
    """Mean probability of the rule's action, and how often it is the most likely, at ``states``."""
    from scipy.special import softmax
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from rhythm.env.constants import ACTION_INDEX
    from rhythm.protocol import record_conversation
    from rhythm.train.grpo.pairs import action_candidates, action_logprobs

    tokenizer = AutoTokenizer.from_pretrained(model_path)
    model = AutoModelForCausalLM.from_pretrained(model_path).eval()
    stop = tokenizer.eos_token_id
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else stop
    probs, top = [], []
    for record, t, action in states:
        prompt = tokenizer.apply_chat_template(record_conversation(record, t), add_generation_prompt=True,
                                               tokenize=True, return_dict=True)["input_ids"]
        logp = action_logprobs(model, prompt, action_candidates(tokenizer, record["steps"][t]["response"], stop), pad)
        probs.append(float(softmax(logp)[ACTION_INDEX[action]]))
        top.append(int(np.argmax(logp)) == ACTION_INDEX[action])
    return {"model": model_path, "states": len(states), "p_rule_action": round(float(np.mean(probs)), 3),
            "rule_action_most_likely": round(float(np.mean(top)), 3)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("episodes", nargs="+", help="episodes JSONL (rhythm eval's eval_results_v2.episodes.jsonl)")
    ap.add_argument("--condition", choices=CONDITIONS, default="in-dist")
    ap.add_argument("--below", type=float, default=0.25, help="a meter below this runs low (the restore pairs' 0.25)")
    ap.add_argument("--model", action="append", default=[], help="a student to read the probabilities of (repeatable)")
    ap.add_argument("--states", type=int, default=200, help="named states of the first file the models are read on")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    run_or_exit("restore_adherence", run, args)


def run(args: argparse.Namespace) -> None:
    weeks = {}
    for path in args.episodes:
        weeks[path] = [r for _, r in read_episodes(path) if r["condition"] == args.condition]
        if not weeks[path]:
            raise RhythmError(f"{path}: no {args.condition} week")
        report("restore_adherence", {"episodes": path, "condition": args.condition, "below": args.below,
                                     **adherence(weeks[path], args.below)})
    if args.model:
        named = [s for s in named_states(weeks[args.episodes[0]], args.below) if s[1] < EPISODE_STEPS - 1]
        picked = np.random.default_rng(args.seed).permutation(len(named))[: args.states]
        for model in args.model:
            report("restore_adherence", {"episodes": args.episodes[0], "condition": args.condition, "below": args.below,
                                         **action_probabilities(model, [named[i] for i in sorted(picked)])})


if __name__ == "__main__":
    main()
