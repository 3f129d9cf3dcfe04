"""How much of a student's room is serenity? The student plays as it would, except that where serenity is below
``--below`` (and it is not night) its action is MEDITATE: the reply keeps its own belief and names MEDITATE.
With ``--rule restore`` the rule covers every meter the restore pairs do: wherever
:func:`rhythm.agents.restore.restoring_action` names an action (a meter below ``--below`` that one action can keep off
the crash line), that action is played: what ``configs/grpo-tiny-restore.yaml`` could teach at most.

The few-teacher-weeks student crashes on serenity 2.3 times an in-dist week (the full-data student 0.3, the teacher
0.2; ``rhythm analyze behaviour``) and never meditates. Paired with the student's own weeks on the same people
(``rhythm analyze paired``), the forced weeks say what seeing serenity would be worth; as ``rhythm sft`` data they
say whether the student can learn a rule that depends on serenity alone (docs/grpo-ablation.md, seventh round, rows SR and
RD1). A probe: the rule is a hand-written one, not a refine stage.

    python benchmarks/serenity_room.py --model runs/quickstart-few/sft --condition in-dist --seeds 100000-100299 \\
        --below 0.2 --output runs/serenity/in-dist.episodes.jsonl
    rhythm analyze paired runs/eval-few/eval_results_v2.episodes.jsonl runs/serenity/in-dist.episodes.jsonl
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import report, run_or_exit  # noqa: E402

from rhythm.agents.base import Agent, BatchObservation, Decision, EpisodeSpec  # noqa: E402
from rhythm.agents.episodes import play  # noqa: E402
from rhythm.agents.model import ModelAgent  # noqa: E402
from rhythm.agents.restore import restoring_action  # noqa: E402
from rhythm.env.constants import ACTION_INDEX, ACTIONS, CONDITIONS, MEDITATE, NIGHT, S  # noqa: E402
from rhythm.model.load import ModelOptions  # noqa: E402
from rhythm.protocol import format_ending  # noqa: E402
from rhythm.records import JsonlWriter  # noqa: E402
from rhythm.seeds import parse_seeds  # noqa: E402


class RuledStudent:
    """``inner``'s replies, with the rule's action wherever the rule names one (a reply with no belief stays as
    written). ``rule``: ``serenity`` names MEDITATE where serenity is below ``below`` outside the night slot;
    ``restore`` names :func:`restoring_action`'s action, for any meter but progress below ``below``."""

    def __init__(self, inner: Agent, below: float, rule: str = "serenity") -> None:
        self.inner, self.below, self.rule = inner, below, rule
        self.name = inner.name
        self.forced = 0

    def ruled(self, obs: BatchObservation, i: int) -> int | None:
        """The action the rule plays in episode ``i``, or None where it leaves the student's."""
        if self.rule == "restore":
            named = restoring_action(obs.meters[i], obs.t, self.below)
            return None if named is None else ACTION_INDEX[named]
        return MEDITATE if obs.meters[i, S] < self.below and obs.slot != NIGHT else None

    def reset(self, episodes: list[EpisodeSpec]) -> None:
        self.inner.reset(episodes)

    def act(self, obs: BatchObservation) -> list[Decision]:
        out = []
        for i, d in enumerate(self.inner.act(obs)):
            action = self.ruled(obs, i)
            if action is not None and d.belief is not None:
                self.forced += d.action != action
                d = Decision(action, d.belief, format_ending(d.belief, ACTIONS[action]))
            out.append(d)
        return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", required=True, help="the student: a rhythm sft output dir")
    ap.add_argument("--condition", choices=CONDITIONS, default="in-dist")
    ap.add_argument("--split", choices=["train", "eval"], default="train")
    ap.add_argument("--seeds", required=True, help="e.g. 100000-100299")
    ap.add_argument("--below", type=float, default=0.2, help="a meter below this runs low")
    ap.add_argument("--rule", choices=["serenity", "restore"], default="serenity",
                    help="serenity: MEDITATE where serenity is low outside the night; restore: the restore pairs' action")
    ap.add_argument("--output", required=True, help="episodes JSONL")
    ap.add_argument("--batch-size", type=int, default=128)
    args = ap.parse_args()
    run_or_exit("serenity_room", run, args)


def run(args: argparse.Namespace) -> None:
    student = ModelAgent(args.model, ModelOptions(max_new_tokens=16, batch_size=args.batch_size))
    agent = RuledStudent(student, args.below, args.rule)
    started = time.perf_counter()
    records = play(agent, [EpisodeSpec(args.condition, args.split, s) for s in parse_seeds(args.seeds)],
                   batch_size=args.batch_size, model=args.model)
    Path(args.output).parent.mkdir(parents=True, exist_ok=True)
    with JsonlWriter(args.output) as w:
        for r in records:
            w.write(r.to_dict())
    report("serenity_room", {"weeks": len(records), "rule": args.rule, "below": args.below,
                             "forced_per_week": round(agent.forced / max(len(records), 1), 3),
                             "seconds": round(time.perf_counter() - started, 1)})


if __name__ == "__main__":
    main()
