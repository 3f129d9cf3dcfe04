"""DAgger with the restore rule as the labeller (experimental, sixteenth round): a student's own weeks with the rule's
action as the reply at every state where it names one, every other reply kept, for ``rhythm sft``.

    python benchmarks/rule_labels.py WEEKS.jsonl -o OUT.jsonl [--filter] [--below 0.25]

WEEKS holds recorded weeks (``rhythm eval``'s episodes or a ``rhythm grpo`` run's ``student_rollouts.jsonl``). At each
state where :func:`rhythm.train.grpo.pairs.restoring_action` names an action (a meter below ``--below`` that one
action can keep off the crash line) the reply's action becomes that one; the recorded ``action`` stays, so the
week's observations still follow from what was played. ``--filter`` writes every reply's belief as the bayes
filter's (the ninth round's belief stage). Train with ``rhythm sft --data TEACHER,OUT,OUT,... ``. docs/grpo.md,
sixteenth round: it measured no help beyond the belief stage.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import run_or_exit  # noqa: E402
from restore_adherence import named_states  # noqa: E402

from rhythm.agents.filtering import filter_beliefs  # noqa: E402
from rhythm.env.constants import ACTIONS  # noqa: E402
from rhythm.protocol import format_ending, parse_reply  # noqa: E402
from rhythm.records import read_episodes  # noqa: E402


def run(a: argparse.Namespace) -> None:
    records = [record for _, record in read_episodes(a.weeks)]
    if a.filter:
        beliefs = filter_beliefs([{"condition": r["condition"], "split": r["split"], "seed": r["seed"],
                                   "steps": [{"action": s["action"]} for s in r["steps"]]} for r in records])
        for record, week in zip(records, beliefs, strict=True):
            for step, belief in zip(record["steps"], week, strict=True):
                step["response"] = format_ending([round(float(x), 2) for x in belief], step["action"])
    named = named_states(records, a.below)
    changed = 0
    for record, t, action in named:
        step = record["steps"][t]
        reply = parse_reply(step["response"])
        if reply.ok and ACTIONS[reply.action] != action:
            step["response"] = format_ending(reply.belief, action)
            changed += 1
    with open(a.output, "w") as out:
        for record in records:
            out.write(json.dumps(record) + "\n")
    print(f"{len(records)} weeks, {len(named)} named states, {changed} replies relabelled -> {a.output}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("weeks", help="recorded weeks (JSONL)")
    ap.add_argument("-o", "--output", required=True)
    ap.add_argument("--filter", action="store_true", help="every belief as the bayes filter's")
    ap.add_argument("--below", type=float, default=0.25, help="a meter below this is low (the restore pairs' bound)")
    run_or_exit("rule_labels", run, ap.parse_args())


if __name__ == "__main__":
    main()
