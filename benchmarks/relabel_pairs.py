"""DAgger with the futures as the labeller: a branch-mode run's decided pairs as action labels for ``rhythm sft``.

    python benchmarks/relabel_pairs.py RUN -o OUT.jsonl [--filter] [--keep]

RUN is a ``rhythm grpo`` output folder of ``branch.group: pair`` (its ``reward_log.jsonl`` and
``student_rollouts.jsonl``). OUT holds the run's student weeks with, at each state where the pair's challenger
won (its futures agreed), the challenger's reply as the step's ``response``; the recorded ``action`` stays, so
the week's observations still follow from it. ``--filter`` writes every reply as the bayes filter's belief for
the week's recorded actions and observations, then the (relabelled) action; ``--keep`` leaves every action as
played (the control). Train with ``rhythm sft --data TEACHER,OUT ...``. docs/grpo.md, fifteenth round: it
measured no help.
"""

from __future__ import annotations

import argparse
import collections
import json

from rhythm.agents.filtering import filter_beliefs
from rhythm.protocol import format_ending


def winners(run: str) -> dict[tuple[int, int], dict]:
    """(seed, t) -> the winning challenger's reply-log entry, for the run's decided pairs the challenger won."""
    groups: dict[tuple[int, int], list[dict]] = collections.defaultdict(list)
    with open(f"{run}/reward_log.jsonl") as fh:
        for line in fh:
            r = json.loads(line)
            groups[(r["step"], r["group"])].append(r)
    return {(own["seed"], int(own["t"])): other for own, other in groups.values() if other["reward"] > own["reward"]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("run")
    ap.add_argument("-o", "--output", required=True)
    ap.add_argument("--filter", action="store_true", help="replies as the bayes filter's belief and the action")
    ap.add_argument("--keep", action="store_true", help="no relabelling (the control)")
    a = ap.parse_args()
    won = {} if a.keep else winners(a.run)
    with open(f"{a.run}/student_rollouts.jsonl") as fh:
        records = [json.loads(line) for line in fh]
    beliefs = filter_beliefs([{"condition": r["condition"], "split": r["split"], "seed": r["seed"],
                               "steps": [{"action": s["action"]} for s in r["steps"]]} for r in records]) if a.filter else None
    changed = 0
    with open(a.output, "w") as out:
        for n, record in enumerate(records):
            for k, step in enumerate(record["steps"]):
                challenger = won.get((record["seed"], int(step["t"])))
                action = challenger["action"] if challenger else step["action"]
                changed += action != step["action"]
                if beliefs is not None:
                    step["response"] = format_ending([round(float(x), 2) for x in beliefs[n][k]], action)
                elif challenger:
                    step["response"] = challenger["reply"]
            out.write(json.dumps(record) + "\n")
    print(f"{len(records)} weeks, {changed} actions relabelled -> {a.output}")


if __name__ == "__main__":
    main()
