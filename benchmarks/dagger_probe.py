"""DAgger data for the tiny student: the student plays its own weeks, the bayes teacher labels them.

A student trained on the teacher's weeks only ever saw the teacher's states; in free play it drifts into
states the teacher avoids (crashed meters) and compounds its own errors. DAgger (Ross et al., 2011) plays
the student and asks the teacher what it would have done there. Here the student acts with its own
replies in its context (as in free play); the bayes teacher watches the same week (its particle filter
reads the student's actions) and writes its belief and action for every step. Two ways to write such a
week as one SFT conversation (a transcript cannot show the student's reply and learn the teacher's):

- ``teacher`` (default): every reply is the teacher's ``BELIEF``/``ACTION`` lines, learned; the next
  observation still says ``After <the student's action>``.
- ``student``: every reply states the teacher's belief (learned) and the student's action, which the loss
  learns only where the teacher would have chosen it too (other steps are marked ``explored``).

Run (docs/student.md, rows D1 and D2)::

    python benchmarks/dagger_probe.py --model runs/sft --seeds 4800-5759 --output data/dagger.jsonl
    python benchmarks/dagger_probe.py --model runs/sft --seeds 4800-5759 --output data/dagger-own.jsonl --actions student
    rhythm sft --config configs/sft-tiny.yaml --data data/dagger.jsonl --model runs/sft -o runs/sft-dagger \\
        --set learning_rate=1e-3 --set lr_scheduler_type=cosine --set max_steps=120

Seeds are in-dist, train split: keep them apart from the teacher data's and from the free-play seeds
(100000+). Prints one JSON line: weeks, how often the student's action was the teacher's, seconds.
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import report  # noqa: E402

from rhythm.agents.base import Agent, BatchObservation, Decision, EpisodeSpec  # noqa: E402
from rhythm.agents.episodes import play  # noqa: E402
from rhythm.agents.model import ModelAgent  # noqa: E402
from rhythm.agents.teachers import BayesAgent, TeacherConfig  # noqa: E402
from rhythm.env.constants import ACTIONS  # noqa: E402
from rhythm.model.load import ModelOptions  # noqa: E402
from rhythm.protocol import format_ending  # noqa: E402
from rhythm.records import dumps  # noqa: E402
from rhythm.seeds import parse_seeds  # noqa: E402


class StudentActsTeacherLabels:
    """The student's action is played; the reply recorded is the teacher's label (see the module doc)."""

    def __init__(self, student: Agent, teacher: BayesAgent, actions: str) -> None:
        self.student, self.teacher, self.actions = student, teacher, actions
        self.name = f"dagger({teacher.name} labels {student.name})"
        self.agreed = 0
        self.steps = 0

    def reset(self, episodes: list[EpisodeSpec]) -> None:
        self.student.reset(episodes)
        self.teacher.reset(episodes)
        self.own: list[list[tuple[str, str]]] = [[] for _ in episodes]

    def act(self, obs: BatchObservation) -> list[Decision]:
        mine = self.student.act(replace(obs, history=[list(h) for h in self.own]))
        labels = self.teacher.act(obs)
        out = []
        for i, (s, t) in enumerate(zip(mine, labels)):
            self.own[i].append((obs.prompts[i], s.text))
            agree = s.action == t.action
            self.agreed += agree
            self.steps += 1
            shown = t.action if self.actions == "teacher" else s.action
            out.append(Decision(s.action, t.belief, format_ending(t.belief, shown),
                                explored=self.actions == "student" and not agree))
        return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", required=True, help="the student: a rhythm sft output dir")
    ap.add_argument("--seeds", required=True, help="in-dist train-split seeds, e.g. 4800-5759")
    ap.add_argument("--output", required=True, help="episodes JSONL for rhythm sft")
    ap.add_argument("--actions", choices=["teacher", "student"], default="teacher")
    ap.add_argument("--batch-size", type=int, default=64)
    args = ap.parse_args()
    seeds = parse_seeds(args.seeds)
    student = ModelAgent(args.model, ModelOptions(max_new_tokens=16, batch_size=args.batch_size))
    agent = StudentActsTeacherLabels(student, BayesAgent(TeacherConfig()), args.actions)
    started = time.perf_counter()
    records = play(agent, [EpisodeSpec("in-dist", "train", s) for s in seeds], batch_size=args.batch_size)
    seconds = time.perf_counter() - started
    Path(args.output).parent.mkdir(parents=True, exist_ok=True)
    with open(args.output, "wb") as f:
        for r in records:
            f.write(dumps(r))
    counts = np.bincount([ACTIONS.index(s.action) for r in records for s in r.steps], minlength=len(ACTIONS))
    report("dagger_probe", {"weeks": len(records), "actions": args.actions,
            "student_action_is_teachers": round(agent.agreed / max(agent.steps, 1), 3),
            "student_actions": dict(zip(ACTIONS, counts.tolist())), "seconds": round(seconds, 1)})


if __name__ == "__main__":
    main()
