"""``challenger: teacher``: at each state of a week, the bayes teacher's own choice there (its filter reading the
week as played) where it differs from the action played."""

from __future__ import annotations

from rhythm.agents.base import EpisodeSpec
from rhythm.agents.baselines import HeuristicAgent
from rhythm.agents.episodes import play
from rhythm.agents.teachers import BayesAgent, TeacherConfig
from rhythm.env.constants import ACTIONS, EPISODE_STEPS
from rhythm.train.grpo.branch import teacher_challengers
from rhythm.train.grpo.data import PromptOptions, build_prompts

SPECS = [EpisodeSpec("in-dist", "train", s) for s in (11, 12, 13)] + [EpisodeSpec("ood", "train", 14)]


def rows_of(agent) -> list[dict]:
    records = [r.to_dict() for r in play(agent, SPECS)]
    rows, _ = build_prompts([], PromptOptions(), records)
    return rows


def test_the_teachers_own_weeks_name_no_challenger():
    rows = rows_of(BayesAgent(TeacherConfig()))
    assert len(rows) == len(SPECS) * EPISODE_STEPS
    assert teacher_challengers(rows) == [None] * len(rows)


def test_another_agents_weeks_name_the_teachers_action_where_it_differs():
    rows = rows_of(HeuristicAgent())
    named = teacher_challengers(rows)
    week = {(r["condition"], r["seed"]): r["prefix"] for r in rows if r["t"] == EPISODE_STEPS - 1}
    teacher_first = {(r["condition"], r["seed"]): r["prefix"][0] for r in rows_of(BayesAgent(TeacherConfig()))
                     if r["t"] == EPISODE_STEPS - 1}
    assert 0 < sum(c is not None for c in named) < len(rows)
    for row, challenger in zip(rows, named, strict=True):
        played = week[(row["condition"], row["seed"])]
        if row["t"] == EPISODE_STEPS - 1:
            assert challenger is None  # no row records the last step's action
        elif challenger is not None:
            assert challenger in ACTIONS and challenger != played[row["t"]]
        if row["t"] == 0:  # the first state is the person's own: the teacher's choice there is its own week's first
            first = teacher_first[(row["condition"], row["seed"])]
            assert challenger == (first if first != played[0] else None)
