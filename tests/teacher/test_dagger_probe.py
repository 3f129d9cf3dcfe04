"""benchmarks/dagger_probe.py: the student's actions are played, every reply is the teacher's label, and
the student keeps its own replies in its context."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from rhythm.agents.base import EpisodeSpec
from rhythm.agents.episodes import play
from rhythm.agents.registry import make_agent
from rhythm.protocol import parse_reply

SEEDS = (0, 1, 2)


def _probe():
    path = Path(__file__).resolve().parents[2] / "benchmarks" / "dagger_probe.py"
    spec = importlib.util.spec_from_file_location("dagger_probe", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class Recording:
    """The heuristic as a student that remembers the conversations it was shown."""

    def __init__(self) -> None:
        self.inner = make_agent("heuristic")
        self.name = "recording"
        self.seen: list = []

    def reset(self, episodes):
        self.inner.reset(episodes)

    def act(self, obs):
        self.seen.append(obs)
        return self.inner.act(obs)


@pytest.mark.parametrize("actions", ["teacher", "student"])
def test_student_acts_and_the_teacher_labels(actions):
    probe = _probe()
    specs = [EpisodeSpec("in-dist", "train", s) for s in SEEDS]
    student = Recording()
    labelled = play(probe.StudentActsTeacherLabels(student, make_agent("bayes"), actions), specs)
    alone = play(make_agent("heuristic"), specs)
    teacher_on_them = play(make_agent("bayes"), specs)
    for week, own, teacher in zip(labelled, alone, teacher_on_them, strict=True):
        # the week is the student's: its actions, hence its meters
        assert [s.action for s in week.steps] == [s.action for s in own.steps]
        assert [s.meters for s in week.steps] == [s.meters for s in own.steps]
        first = parse_reply(week.steps[0].response)
        assert list(first.belief) == teacher.steps[0].belief  # before any action, the teacher's prior belief
        for step in week.steps:
            said = parse_reply(step.response)
            assert said.ok and step.response.count("\n") == 1  # the protocol lines only
            if actions == "student":
                assert said.action_name == step.action
    if actions == "student":
        agreed = sum(not s.explored for w in labelled for s in w.steps)
        assert agreed == labelled_agreement(probe, specs)
    # the student saw its own replies, never the teacher's labels
    last = student.seen[-1]
    assert all(reply == own_step.response for h, week in zip(last.history, alone, strict=True)
               for (_, reply), own_step in zip(h, week.steps, strict=False))


def labelled_agreement(probe, specs) -> int:
    agent = probe.StudentActsTeacherLabels(make_agent("heuristic"), make_agent("bayes"), "teacher")
    play(agent, specs)
    return agent.agreed
