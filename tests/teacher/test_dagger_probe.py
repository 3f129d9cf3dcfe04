"""benchmarks/dagger_probe.py: the student's actions are played, every reply is the teacher's label, and
the student keeps its own replies in its context."""

from __future__ import annotations

import pytest

from rhythm.agents.base import EpisodeSpec
from rhythm.agents.episodes import play
from rhythm.agents.registry import make_agent
from rhythm.env.constants import ACTIONS
from rhythm.errors import RhythmError
from rhythm.protocol import parse_reply
from rhythm.records import JsonlWriter
from rhythm.train.data import DataOptions
from rhythm.train.sft import SFTRunConfig
from tests.train.helpers import load_benchmark, masked_runs

SEEDS = (0, 1, 2)


def _probe():
    return load_benchmark("dagger_probe")


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


class Said:
    """An agent whose decisions, and the observations it decided on, are kept week by week (in the order the weeks
    were dealt): what a wrapper around it was given to pass on."""

    def __init__(self, inner) -> None:
        self.inner, self.name = inner, inner.name
        self.weeks: list[list[tuple]] = []

    def reset(self, episodes):
        self.inner.reset(episodes)
        self.batch = [[] for _ in episodes]
        self.weeks.extend(self.batch)

    def act(self, obs):
        decisions = self.inner.act(obs)
        for i, (week, d) in enumerate(zip(self.batch, decisions, strict=True)):
            week.append((d, obs.meters[i].copy(), obs.slot, obs.t))
        return decisions


@pytest.mark.parametrize("actions", ["teacher", "student"])
def test_student_acts_and_the_teacher_labels(actions):
    probe = _probe()
    specs = [EpisodeSpec("in-dist", "train", s) for s in SEEDS]
    student, teacher = Recording(), Said(make_agent("bayes"))
    labelled = play(probe.StudentActsTeacherLabels(student, teacher, actions), specs)
    alone = play(make_agent("heuristic"), specs)
    teacher_on_them = play(make_agent("bayes"), specs)
    relabelled = 0
    for week, own, prior, labels in zip(labelled, alone, teacher_on_them, teacher.weeks, strict=True):
        # the week is the student's: its actions, hence its meters
        assert [s.action for s in week.steps] == [s.action for s in own.steps]
        assert [s.meters for s in week.steps] == [s.meters for s in own.steps]
        first = parse_reply(week.steps[0].response)
        assert list(first.belief) == prior.steps[0].belief  # before any action, the teacher's prior belief
        for step, (label, *_) in zip(week.steps, labels, strict=True):
            said, meant = parse_reply(step.response), parse_reply(label.text)
            assert said.ok and step.response.count("\n") == 1  # the protocol lines only
            assert said.belief == meant.belief  # every step: the teacher's belief on the student's week
            assert said.action_name == (meant.action_name if actions == "teacher" else step.action)
            relabelled += said.action_name != step.action
    assert (relabelled > 0) == (actions == "teacher")  # the teacher's label is not the action played everywhere
    if actions == "student":
        agreed = sum(not s.explored for w in labelled for s in w.steps)
        assert agreed == labelled_agreement(probe, specs)
    # the student saw its own replies, never the teacher's labels
    last = student.seen[-1]
    assert all(reply == own_step.response for h, week in zip(last.history, alone, strict=True)
               for (_, reply), own_step in zip(h, week.steps, strict=False))


@pytest.mark.parametrize("beta", [0.0, 1.0])
def test_the_oracle_steers_with_probability_beta(beta):
    """``--actions oracle``: the student's belief in every reply; at beta 1 the oracle's own week is played (its
    actions, its meters), at beta 0 the student's own, with the steps where the oracle would differ marked explored."""
    probe = _probe()
    specs = [EpisodeSpec("in-dist", "train", s) for s in SEEDS]
    agent = probe.OracleSteers(make_agent("bayes"), make_agent("oracle"), beta)
    steered = play(agent, specs)
    played = play(make_agent("oracle" if beta == 1.0 else "bayes"), specs)
    for week, own in zip(steered, played, strict=True):
        assert [s.action for s in week.steps] == [s.action for s in own.steps]
        assert [s.meters for s in week.steps] == [s.meters for s in own.steps]
        for step in week.steps:
            said = parse_reply(step.response)
            assert said.ok and said.action_name == step.action and step.response.count("\n") == 1
    explored = sum(s.explored for w in steered for s in w.steps)
    assert explored + agent.agreed == agent.steps if beta == 0.0 else explored == 0
    assert 0 < agent.agreed < agent.steps, "the bayes student and the oracle differ on some steps, not all"
    if beta == 0.0:  # the student's own week: its own beliefs, as it stated them
        assert [s.belief for w in steered for s in w.steps] == [s.belief for w in played for s in w.steps]


def labelled_agreement(probe, specs) -> int:
    agent = probe.StudentActsTeacherLabels(make_agent("heuristic"), make_agent("bayes"), "teacher")
    play(agent, specs)
    return agent.agreed


@pytest.mark.slow
def test_explored_actions_stay_out_of_the_loss(tmp_path, tiny_student):
    """A step marked ``explored`` (an action that was not the agent's choice) keeps its ACTION line in the
    conversation (the student sees it in context) but out of the loss; its BELIEF line and every other reply
    are learned. ``rhythm sft`` refuses such weeks (tests/train/test_sft_data.py); the probe's ``sft`` trains them."""
    from transformers import AutoTokenizer

    probe = _probe()
    tok = AutoTokenizer.from_pretrained(tiny_student)
    path = tmp_path / "explored.jsonl"
    records = [r.to_dict() for r in play(make_agent("bayes"), [EpisodeSpec("in-dist", "train", s) for s in (0, 1)])]
    for r in records:
        for step in r["steps"][::3]:
            step["explored"] = True
    with JsonlWriter(path) as w:
        for r in records:
            w.write(r)
    with pytest.raises(RhythmError, match="explored steps need strip_reasoning"):
        probe.explored_examples([str(path)], DataOptions(val_fraction=0.0))
    rows, report = probe.explored_examples([str(path)], DataOptions(val_fraction=0.0, strip_reasoning=True))
    assert report.files == [str(path)] and report.train_examples == 2
    for row, rec in zip(rows["train"], records, strict=True):
        replies = [m for m in row["messages"] if m["role"] == "assistant"]
        out = tok.apply_chat_template(row["messages"], tokenize=True, return_dict=True, return_assistant_tokens_mask=True)
        runs = masked_runs(out["input_ids"], out["assistant_masks"])
        assert [tok.decode(r) for r in runs] == [m["content"] + ("" if m["after"] else "<|im_end|>") for m in replies]
        for m, step in zip(replies, rec["steps"], strict=True):
            shown = parse_reply(m["context"] + m["content"] + m["after"])
            assert shown.ok and shown.action_name == step["action"]  # the played action is always in context
            assert list(parse_reply(m["content"]).belief) == step["belief"]
            assert ("ACTION" in m["content"]) == (not step.get("explored"))
    for weights in ({"observation_loss": 0.1}, {"echo_loss": 1.0}):  # either would train the unlearned parts
        with pytest.raises(RhythmError, match="observation_loss or echo_loss would put the explored"):
            probe.train(SFTRunConfig(data=str(path), strip_reasoning=True, **weights))


def test_meditate_below_forces_meditate_only_where_serenity_is_low():
    """benchmarks/serenity_room.py: the inner agent's week, but MEDITATE wherever serenity is below the bound
    outside the night slot; the reply keeps the inner agent's belief."""
    from rhythm.env.constants import NIGHT, S

    room = load_benchmark("serenity_room")
    specs = [EpisodeSpec("ood", "train", s) for s in range(6)]
    inner = Said(make_agent("bayes"))
    agent = room.RuledStudent(inner, 0.3)
    forced = play(agent, specs)
    steps = [(w, t) for w in forced for t in range(len(w.steps))]
    # the meters an agent sees at step t are those after step t - 1
    low = [(w, t) for w, t in steps if t > 0 and t % 4 != NIGHT and w.steps[t - 1].meters[S] < 0.3]
    assert low, "some ood person's serenity falls below 0.3"
    assert all(w.steps[t].action == "MEDITATE" for w, t in low)
    changed = 0
    for week, said in zip(forced, inner.weeks, strict=True):  # every step: the rule's action or the inner agent's
        for t, (step, (d, meters, slot, _)) in enumerate(zip(week.steps, said, strict=True)):
            rule = meters[S] < 0.3 and slot != NIGHT
            if t:  # the meters it saw are the week's after the step before
                assert rule == (week.steps[t - 1].meters[S] < 0.3 and t % 4 != NIGHT)
            assert step.action == ("MEDITATE" if rule else ACTIONS[d.action]) and step.belief == list(d.belief)
            changed += rule and ACTIONS[d.action] != "MEDITATE"
    assert agent.forced == changed > 0
    first = play(make_agent("bayes"), specs)  # the same weeks up to the first forced step
    for week, own in zip(forced, first, strict=True):
        for step, mine in zip(week.steps, own.steps, strict=True):
            assert step.belief == mine.belief and parse_reply(step.response).action_name == step.action
            if step.action != mine.action:  # from here on the weeks differ
                assert step.action == "MEDITATE"
                break


def test_the_restore_rule_plays_the_restore_pairs_action_wherever_one_is_named():
    """benchmarks/serenity_room.py --rule restore: wherever ``restoring_action`` names an action at the state the agent
    sees, that action is played, with the inner agent's belief; elsewhere the inner agent's own action."""
    from rhythm.agents.restore import restoring_action

    room = load_benchmark("serenity_room")
    specs = [EpisodeSpec("ood", "train", s) for s in range(6)]
    inner = Said(make_agent("bayes"))
    agent = room.RuledStudent(inner, 0.25, rule="restore")
    weeks = play(agent, specs)
    named = changed = 0
    for week, said in zip(weeks, inner.weeks, strict=True):
        for t, (step, (d, meters, _, at)) in enumerate(zip(week.steps, said, strict=True)):
            if t:  # the meters the agent saw are the week's after the step before
                assert list(meters) == pytest.approx(week.steps[t - 1].meters, abs=1e-12)
            action = restoring_action(meters, at, 0.25)
            named += action is not None
            changed += action is not None and action != ACTIONS[d.action]
            assert step.action == (action or ACTIONS[d.action]) and step.belief == list(d.belief)
            assert parse_reply(step.response).action_name == step.action
    assert named > 0 and agent.forced == changed > 0
