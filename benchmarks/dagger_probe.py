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
  learns only where the teacher would have chosen it too (other steps are marked ``explored``). ``rhythm sft``
  refuses explored steps; ``dagger_probe.py sft`` (:func:`train`) is ``rhythm sft`` with their ACTION lines
  kept in context and out of the loss (a probe: row D2 did not beat the student it started from, so ``rhythm
  sft`` does not carry it).
- ``oracle`` (``--beta B``): every reply states the student's own belief; the env's ``oracle`` (the planner with the
  person's true profile: no teacher call) labels the action, and where the two differ the oracle's action is
  played and shown with probability B (else the student's, marked ``explored``). The transcript stays true to what
  was played, and the student's own states get the oracle's action. Learn with ``dagger_probe.py sft``.

Run (docs/student.md, rows D1 and D2)::

    python benchmarks/dagger_probe.py --model runs/quickstart/sft --seeds 4800-5759 --output data/dagger.jsonl
    python benchmarks/dagger_probe.py --model runs/quickstart/sft --seeds 4800-5759 --output data/dagger-own.jsonl --actions student
    python benchmarks/dagger_probe.py --model runs/quickstart/sft --seeds 5000-6023 --output data/dagger-oracle.jsonl --actions oracle --beta 0.5
    rhythm sft --config configs/sft-tiny.yaml --data data/dagger.jsonl --model runs/quickstart/sft -o runs/sft-dagger \\
        --set learning_rate=1e-3 --set lr_scheduler_type=cosine --set max_steps=120
    python benchmarks/dagger_probe.py sft --config configs/sft-tiny.yaml --set data=data/dagger-own.jsonl \\
        --set model_name_or_path=runs/quickstart/sft --set output_dir=runs/sft-dagger-own \\
        --set learning_rate=1e-3 --set lr_scheduler_type=cosine --set max_steps=120

Seeds are in-dist, train split: keep them apart from the teacher data's and from the free-play seeds
(100000+). Prints one JSON line: weeks, how often the student's action was the teacher's (the oracle's), seconds.
docs/grpo-ablation.md's seventh round has the ``oracle`` rows.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import report  # noqa: E402

from rhythm.agents.base import Agent, BatchObservation, Decision, EpisodeSpec  # noqa: E402
from rhythm.agents.episodes import play  # noqa: E402
from rhythm.agents.model import ModelAgent  # noqa: E402
from rhythm.agents.teachers import BayesAgent, OracleAgent, TeacherConfig  # noqa: E402
from rhythm.env.constants import ACTIONS  # noqa: E402
from rhythm.errors import RhythmError  # noqa: E402
from rhythm.model.load import ModelOptions  # noqa: E402
from rhythm.protocol import format_ending  # noqa: E402
from rhythm.records import dumps, read_episodes  # noqa: E402
from rhythm.seeds import parse_seeds  # noqa: E402
from rhythm.train.common import entry_main  # noqa: E402
from rhythm.train.data import DataOptions, DataReport, build_examples  # noqa: E402
from rhythm.train.sft import SFTRunConfig, run_sft, validate  # noqa: E402


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


class OracleSteers:
    """The student writes each reply; the oracle's action is played where they agree, and where they differ with
    probability ``beta`` (seeded), else the student's own, marked explored (see the module doc)."""

    def __init__(self, student: Agent, oracle: OracleAgent, beta: float, seed: int = 0) -> None:
        self.student, self.oracle, self.beta = student, oracle, beta
        self.name = f"dagger({oracle.name} steers {student.name})"
        self.rng = np.random.default_rng(seed)
        self.agreed = 0
        self.steps = 0

    def reset(self, episodes: list[EpisodeSpec]) -> None:
        self.student.reset(episodes)
        self.oracle.reset(episodes)

    def act(self, obs: BatchObservation) -> list[Decision]:
        out = []
        for s, o in zip(self.student.act(obs), self.oracle.act(obs)):
            agree = s.action == o.action
            self.agreed += agree
            self.steps += 1
            if s.belief is None:  # an unparseable reply stays as written (and its week is left out of SFT)
                out.append(Decision(s.action, None, s.text, parse_ok=s.parse_ok, explored=not agree))
                continue
            steer = agree or self.rng.random() < self.beta
            action = o.action if steer else s.action
            out.append(Decision(action, s.belief, format_ending(s.belief, action), explored=not steer))
        return out


def split_turns(messages: list[dict[str, Any]], explored: list[bool]) -> list[dict[str, Any]]:
    """Keep the ACTION line of each ``explored`` step out of the loss: an assistant message renders as ``context +
    content + after`` (the tiny student's chat template) and only ``content`` is learned (with ``<|im_end|>`` when
    ``after`` is empty), so such a reply's BELIEF line is learned and its ACTION line is context. Every message gets
    both fields: one schema."""
    out: list[dict[str, Any]] = []
    turns = iter(explored)
    for m in messages:
        m = {**m, "context": None, "after": None}
        if m["role"] == "assistant":
            belief, _, action = m["content"].partition("\n")
            if next(turns):
                m.update(context="", content=belief, after="\n" + action)
            else:
                m.update(context="", after="")
        out.append(m)
    return out


def explored_examples(paths: list[str], options: DataOptions) -> tuple[dict[str, list[dict[str, Any]]], DataReport]:
    """:func:`rhythm.train.data.build_examples` for weeks with explored steps: the weeks are read without the flag
    (copies in a temporary folder), then :func:`split_turns` takes each explored step's ACTION line out of the loss."""
    explored: dict[str, list[bool]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        plain = [Path(tmp) / str(i) / Path(path).name for i, path in enumerate(paths)]
        for path, copy in zip(paths, plain):
            copy.parent.mkdir()
            with open(copy, "wb") as f:
                for _, record in read_episodes(path):
                    key = f"{record['condition']}/{record['split']}/{record['seed']}"
                    if key in explored:
                        raise RhythmError(f"{path}: {key} played twice; one week per person")
                    explored[key] = [bool(step.pop("explored", False)) for step in record["steps"]]
                    f.write(orjson.dumps(record) + b"\n")
        if any(map(any, explored.values())) and not options.strip_reasoning:
            raise RhythmError("explored steps need strip_reasoning: true "
                              "(only the protocol lines can be split into learned and unlearned parts)")
        rows, report = build_examples([str(p) for p in plain], options)
    report.files = [str(p) for p in paths]
    for split in rows.values():
        for row in split:
            row["messages"] = split_turns(row["messages"], explored[row["episode"]])
    return rows, report


def train(cfg: SFTRunConfig, quiet: bool = False) -> dict[str, Any]:
    """``rhythm sft`` on weeks with explored steps (:func:`explored_examples`)."""
    if cfg.observation_loss > 0 or (cfg.echo_loss is not None and cfg.echo_loss != cfg.observation_loss):
        raise RhythmError("observation_loss or echo_loss would put the explored steps' unlearned ACTION lines in "
                          "the loss; leave them at 0 and null")
    return run_sft(cfg, quiet=quiet, examples=explored_examples)


def main() -> None:
    if sys.argv[1:2] == ["sft"]:
        sys.exit(entry_main("sft", SFTRunConfig, train, sys.argv[2:], validate, omit=("data",), doc=train.__doc__,
                                prog="python benchmarks/dagger_probe.py sft"))
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", required=True, help="the student: a rhythm sft output dir")
    ap.add_argument("--seeds", required=True, help="in-dist train-split seeds, e.g. 4800-5759")
    ap.add_argument("--output", required=True, help="episodes JSONL for rhythm sft")
    ap.add_argument("--actions", choices=["teacher", "student", "oracle"], default="teacher")
    ap.add_argument("--beta", type=float, default=0.5, help="--actions oracle: how often a differing oracle action is played")
    ap.add_argument("--batch-size", type=int, default=64)
    args = ap.parse_args()
    seeds = parse_seeds(args.seeds)
    student = ModelAgent(args.model, ModelOptions(max_new_tokens=16, batch_size=args.batch_size))
    if args.actions == "oracle":
        if not 0.0 <= args.beta <= 1.0:
            ap.error(f"--beta must be in [0, 1], got {args.beta}")
        agent = OracleSteers(student, OracleAgent(TeacherConfig()), args.beta)
    else:
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
