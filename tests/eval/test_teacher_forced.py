"""The teacher-forced belief probe: shapes, the teacher's own errors, and a clear refusal for tokenizers
without one token per number."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rhythm.agents.base import EpisodeSpec
from rhythm.agents.episodes import play
from rhythm.agents.registry import make_agent
from rhythm.env.profiles import belief_of, sample_profiles
from rhythm.errors import RhythmError


class Digits:
    """A tokenizer whose vocabulary is the ten digits: no number, marker or action name is one token."""

    def get_vocab(self):
        return {str(d): d for d in range(10)}


def _student_and_teacher_weeks(path):
    """The tiny student and two in-dist weeks of the bayes teacher."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    records = [r.to_dict() for r in play(make_agent("bayes"), [EpisodeSpec("in-dist", "train", s) for s in (0, 1)])]
    return AutoModelForCausalLM.from_pretrained(path).eval(), AutoTokenizer.from_pretrained(path), records


@pytest.mark.slow
def test_probe_reads_one_belief_per_step_and_the_teachers_own_error(tiny_student):
    from rhythm.eval.teacher_forced import teacher_forced_errors

    model, tok, records = _student_and_teacher_weeks(tiny_student)
    student, teacher = teacher_forced_errors(model, tok, records)
    assert student.shape == teacher.shape == (2, 28)
    assert np.all((student >= 0) & (student <= 1))

    # what the student "says" is its most likely number right after each of the three markers: a model that puts
    # its weight on 0.10 after "BELIEF: S=", 0.20 after " M=" and 0.30 after " W=" states (0.10, 0.20, 0.30)
    import torch

    vocab = tok.get_vocab()
    after = {vocab["BELIEF: S="]: vocab["0.10"], vocab[" M="]: vocab["0.20"], vocab[" W="]: vocab["0.30"]}

    class Says:
        device = torch.device("cpu")

        def __call__(self, input_ids, output_hidden_states=False):
            logits = torch.zeros(*input_ids.shape, len(vocab))
            for i, t in enumerate(input_ids[0].tolist()):
                if t in after:
                    logits[0, i, after[t]] = 5.0
            return type("Out", (), {"logits": logits})()

    said, _ = teacher_forced_errors(Says(), tok, records)
    for row, rec in zip(said, records, strict=True):
        truth = belief_of(sample_profiles("in-dist", "train", np.array([rec["seed"]])))[0]
        assert np.allclose(row, np.abs(np.array([0.1, 0.2, 0.3]) - truth).mean())
    for row, rec in zip(teacher, records, strict=True):
        truth = belief_of(sample_profiles("in-dist", "train", np.array([rec["seed"]])))[0]
        expected = [np.abs(np.array(s["belief"]) - truth).mean() for s in rec["steps"]]
        assert np.allclose(row, expected)


@pytest.mark.slow
def test_action_probe_reads_the_recorded_action_and_one_choice_per_step(tiny_student):
    from rhythm.env.constants import ACTION_INDEX, ACTIONS
    from rhythm.eval.teacher_forced import action_table, teacher_forced_actions

    model, tok, records = _student_and_teacher_weeks(tiny_student)
    recorded, student = teacher_forced_actions(model, tok, records)
    assert recorded.shape == student.shape == (2, 28)
    assert recorded.tolist() == [[ACTION_INDEX[s["action"]] for s in r["steps"]] for r in records]
    assert student.min() >= 0 and student.max() < len(ACTIONS)
    table = action_table(recorded, student).splitlines()
    counts = {line.split()[0]: int(line.split()[1]) for line in table[2:]}
    assert sum(counts.values()) == 56 and all(counts[ACTIONS[a]] == int((recorded == a).sum()) for a in set(recorded.ravel()))


def test_action_table_counts_and_recall():
    from rhythm.env.constants import ACTION_INDEX
    from rhythm.eval.teacher_forced import action_table

    sleep, meditate, work = ACTION_INDEX["SLEEP"], ACTION_INDEX["MEDITATE"], ACTION_INDEX["DEEP_WORK"]
    recorded = np.array([[sleep, sleep, meditate, work]])
    student = np.array([[sleep, work, sleep, work]])
    lines = action_table(recorded, student).splitlines()
    assert "at 0.500 of steps" in lines[0]
    rows = {line.split()[0]: line.split()[1:] for line in lines[2:]}
    assert rows == {"DEEP_WORK": ["1", "2", "1.00"], "MEDITATE": ["1", "0", "0.00"], "SLEEP": ["2", "2", "0.50"]}


def test_action_probe_refuses_a_tokenizer_without_action_tokens():
    from rhythm.eval.teacher_forced import teacher_forced_actions

    with pytest.raises(RhythmError, match="one token per action name"):
        teacher_forced_actions(None, Digits(), [])


def test_probe_refuses_a_tokenizer_that_splits_numbers():
    from rhythm.eval.teacher_forced import teacher_forced_errors

    with pytest.raises(RhythmError, match="one token per number"):
        teacher_forced_errors(None, Digits(), [])


def test_filter_on_the_bayes_teachers_own_weeks_gives_back_its_beliefs():
    """The filter is the teacher's own posterior, run on a week's observations and actions: on the teacher's
    weeks (two conditions at once) it must state what the teacher stated."""
    from rhythm.agents.filtering import filter_beliefs, with_beliefs

    specs = [EpisodeSpec("in-dist", "train", s) for s in (0, 1)] + [EpisodeSpec("ood", "train", 2)]
    records = [r.to_dict() for r in play(make_agent("bayes"), specs)]
    beliefs = np.array(filter_beliefs(records))
    assert beliefs.shape == (3, 28, 3)
    recorded = np.array([[s["belief"] for s in r["steps"]] for r in records])
    assert np.abs(beliefs - recorded).max() <= 0.005 + 1e-9
    swapped = with_beliefs(records, np.full_like(beliefs, 0.25))
    for old, new in zip(records, swapped, strict=True):
        assert [s["action"] for s in new["steps"]] == [s["action"] for s in old["steps"]]
        assert all(s["belief"] == [0.25] * 3 and s["response"].startswith("BELIEF: S=0.25 M=0.25 W=0.25") for s in new["steps"])


@pytest.mark.slow
def test_filter_probe_prints_four_rows(tiny_student, tmp_path, run_cli):
    from rhythm.records import JsonlWriter

    path = tmp_path / "weeks.jsonl"
    with JsonlWriter(path) as w:
        for r in play(make_agent("bayes"), [EpisodeSpec("in-dist", "train", s) for s in (0, 1)]):
            w.write(r.to_dict())
    probe = ("analyze", "teacher-forced", str(tiny_student), str(path))
    code, out, _ = run_cli(*probe, "--filter", "--condition", "in-dist")
    out = out.splitlines()
    assert code == 0 and "over 2 weeks" in out[0] and len(out) == 5 and "bayes filter on these weeks" in out[-1]
    code, out, err = run_cli(*probe, "--condition", "ood")
    assert code == 2 and out == "" and err.splitlines() == [f"rhythm: error: no weeks in {path} for condition ood"]
    code, out, _ = run_cli(*probe, "--actions")
    assert code == 0 and out.splitlines()[3].startswith("teacher-forced actions: the student picks the recorded one at")
    code, out, _ = run_cli(*probe, "--meters")  # two weeks: one fitted, one scored
    out = out.splitlines()
    assert code == 0 and out[-2].startswith("meters read linearly") and out[-1].split()[::4] == ["V", "C", "P", "S", "N"]
    # files joined with commas, as the help says; one week is too few for the read-out, said before any probe prints
    first = tmp_path / "first.jsonl"
    first.write_bytes(path.read_bytes().splitlines(keepends=True)[0])
    code, out, err = run_cli("analyze", "teacher-forced", str(tiny_student), str(first), "--meters")
    assert code == 2 and out == "" and err.splitlines() == [
        "rhythm: error: the meter read-out needs weeks on both sides of the fit: 1 weeks, fit share 0.7"]
    code, out, _ = run_cli("analyze", "teacher-forced", str(tiny_student), f"{first},{path}")
    assert code == 0 and "over 3 weeks" in out.splitlines()[0]


@given(st.integers(min_value=0, max_value=2**31 - 1))
@settings(max_examples=25, deadline=None)
def test_linear_readout_recovers_an_exact_linear_map_and_only_predicts_held_out_rows(seed):
    from rhythm.eval.teacher_forced import linear_readout

    rng = np.random.default_rng(seed)
    x = rng.normal(size=(60, 4))
    y = x @ rng.normal(size=(4, 2)) + rng.normal(size=2)
    fit = np.arange(60) < 40
    predicted = linear_readout(x, y, fit)
    assert predicted.shape == (20, 2)
    assert np.allclose(predicted, y[~fit], atol=1e-8)


def test_observed_meters_reads_the_five_values_of_both_observation_layouts():
    from rhythm.eval.teacher_forced import observed_meters

    record = play(make_agent("heuristic"), [EpisodeSpec("in-dist", "train", 3)])[0]
    for step in record.steps[:2]:  # step 1 says "Start of the week.", later steps "After ...: change ..."
        values = observed_meters(step.observation)
        assert len(values) == 5 and all(0.0 <= v <= 1.0 for v in values)
        assert " ".join(f"{v:.2f}" for v in values) in step.observation
    assert observed_meters(record.steps[1].observation) == pytest.approx(record.steps[0].meters, abs=0.005)


@pytest.mark.slow
def test_meter_readout_scores_every_meter_on_held_out_weeks(tiny_student):
    from rhythm.eval.teacher_forced import action_states, meter_readout

    model, tok, records = _student_and_teacher_weeks(tiny_student)
    hidden, meters = action_states(model, tok, records)
    assert hidden.shape == (2, 27, model.config.hidden_size) and meters.shape == (2, 27, 5)
    r2, low_mae = meter_readout(model, tok, records, fit_share=0.5)
    assert r2.shape == low_mae.shape == (5,)
    # by hand: a least-squares map (with bias) fitted on week 0's states, scored on week 1's
    design = np.c_[hidden.reshape(-1, hidden.shape[-1]), np.ones(2 * 27)]
    coef = np.linalg.lstsq(design[:27], meters[0], rcond=None)[0]
    error = np.abs(design[27:] @ coef - meters[1])
    expected_r2 = 1 - (error**2).sum(0) / ((meters[1] - meters[1].mean(0)) ** 2).sum(0)
    low = meters[1] < 0.2
    assert np.allclose(r2, expected_r2, equal_nan=True) and np.isfinite(r2).sum() >= 4
    assert np.allclose(low_mae, [error[low[:, m], m].mean() if low[:, m].any() else np.nan for m in range(5)],
                       equal_nan=True)
    with pytest.raises(RhythmError, match="both sides of the fit"):
        meter_readout(model, tok, records, fit_share=1.0)


def test_weeks_with_a_step_that_states_no_belief_are_one_clear_error(tmp_path, run_cli):
    """A heuristic's weeks, or a student's with a parse failure, crashed the probe in numpy broadcasting."""
    from rhythm.agents.base import EpisodeSpec
    from rhythm.agents.episodes import play
    from rhythm.agents.registry import make_agent
    from rhythm.records import write_episodes

    path = tmp_path / "heuristic.jsonl"
    write_episodes(path, [r.to_dict() for r in play(make_agent("heuristic"), [EpisodeSpec("in-dist", "eval", 0)])])
    code, _, err = run_cli("analyze", "teacher-forced", str(tmp_path / "no-model"), str(path))
    assert code == 2 and f"{path}:1: step 0 states no belief" in err
    short = tmp_path / "short.jsonl"  # a bayes week cut to 10 steps passes the record check; the probe's table is by step
    week = play(make_agent("bayes"), [EpisodeSpec("in-dist", "eval", 0)])[0].to_dict()
    write_episodes(short, [{**week, "steps": week["steps"][:10]}])
    code, out, err = run_cli("analyze", "teacher-forced", str(tmp_path / "no-model"), str(short))
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1 and f"{short}:1: a week of 10 steps" in err, err
