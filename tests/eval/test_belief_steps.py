"""``rhythm analyze belief-steps`` (:mod:`rhythm.eval.belief_steps`): the belief's error over the week against the prior's, by hand, with the
prior itself as the agent, and the command line's bad input."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from rhythm.agents.base import EpisodeSpec
from rhythm.agents.episodes import play
from rhythm.agents.registry import make_agent
from rhythm.errors import RhythmError
from rhythm.eval.belief_steps import belief_steps, belief_steps_of, belief_steps_table
from rhythm.grader import PRIOR_MEAN
from rhythm.records import JsonlWriter


def test_figures_by_hand():
    errors = np.full((4, 28), np.nan)
    errors[:, 0] = [0.2, 0.2, 0.2, 0.6]
    errors[:, 27] = [0.1, 0.05, 0.1, np.nan]  # the last week stated no belief at step 28
    priors = np.array([0.2, 0.1, 0.2, 0.9])
    r = belief_steps(errors, priors, (1, 28))
    assert r.episodes == 4 and r.steps == (1, 28)
    assert r.mae == pytest.approx((0.3, 0.25 / 3))
    assert r.prior == pytest.approx(0.5 / 3)  # the prior's error on the weeks that stated one
    assert r.ratio == pytest.approx(0.5) and r.ratio_ci == pytest.approx((0.5, 0.5))  # every week at half its prior
    assert r.last_over_first == pytest.approx((0.25 / 3) / 0.2)  # on the three weeks that stated both
    assert r.last_ci[0] <= r.mae[-1] <= r.last_ci[1]
    for bad in ((), (28, 1), (0, 28), (1, 29), (4, 4)):
        with pytest.raises(RhythmError, match="steps must be"):
            belief_steps(errors, priors, bad)
    with pytest.raises(RhythmError, match="no week states a belief at step 2"):
        belief_steps(errors, priors, (1, 2))


def test_a_single_week_has_no_intervals_and_the_table_says_so():
    """One week says nothing of the spread: no CI (not a zero-width one) for its MAE or its ratio to the prior."""
    errors = np.full((1, 28), 0.1)
    r = belief_steps(errors, np.array([0.2]), (1, 28))
    assert r.last_ci is None and r.ratio_ci is None and r.ratio == pytest.approx(0.5)
    assert belief_steps_table({"in-dist": r}).splitlines()[1].count("[no CI: n=1]") == 2


@given(arrays(np.float64, st.tuples(st.integers(2, 30), st.just(28)), elements=st.floats(0.0, 1.0)),
       st.integers(0, 10_000))
@settings(max_examples=50, deadline=None)
def test_the_intervals_hold_their_estimates(errors, seed):
    priors = np.random.default_rng(seed).uniform(0.05, 0.5, len(errors))
    r = belief_steps(errors, priors, (1, 8, 28))
    assert r.last_ci[0] - 1e-6 <= r.mae[-1] <= r.last_ci[1] + 1e-6  # mean_ci rounds to 6 places
    assert 0.0 <= r.ratio_ci[0] <= r.ratio_ci[1]
    assert r.ratio == pytest.approx(errors[:, 27].mean() / priors.mean())


@pytest.fixture(scope="module")
def weeks(tmp_path_factory):
    """Bayes weeks in two conditions, and the same weeks with the constant prior as every stated belief."""
    root = tmp_path_factory.mktemp("belief-steps")
    records = [r.to_dict() for r in play(make_agent("bayes"), [EpisodeSpec(c, "train", s) for c in ("ood", "in-dist") for s in range(5)])]
    prior = [{**r, "steps": [{**s, "belief": list(PRIOR_MEAN[r["condition"]])} for s in r["steps"]]} for r in records]
    paths = {}
    for name, recs in (("bayes", records), ("prior", prior)):
        paths[name] = root / f"{name}.jsonl"
        with JsonlWriter(paths[name]) as w:
            for r in recs:
                w.write(r)
    return paths


def test_the_prior_as_the_agent_is_one_times_the_prior_and_the_teacher_sharpens(weeks, run_cli):
    code, out, _ = run_cli("analyze", "belief-steps", str(weeks["prior"]))
    assert code == 0
    lines = out.splitlines()
    assert [line.split()[0] for line in lines[1:]] == ["in-dist", "ood"]
    for line in lines[1:]:
        assert "1.00x [1.00, 1.00]" in line and line.split()[-1] == "1.00"
    code, out, _ = run_cli("analyze", "belief-steps", str(weeks["bayes"]), "--steps", "1,28")
    assert code == 0
    for line in out.splitlines()[1:]:
        assert float(line.split()[-1]) < 1.0  # the teacher's belief sharpens over the week


def test_the_same_weeks_in_another_order_give_the_same_table(weeks, tmp_path, run_cli):
    """The readers take the weeks in seed order: files concatenated the other way round move no interval."""
    lines = weeks["bayes"].read_bytes().splitlines(keepends=True)
    reversed_file = tmp_path / "reversed.jsonl"
    reversed_file.write_bytes(b"".join(reversed(lines)))
    forth, back = (belief_steps_of(str(path), (1, 28)) for path in (weeks["bayes"], reversed_file))
    assert forth == back and all(row.last_ci is not None for row in forth.values())


def test_bad_input_is_one_line_and_exit_2(weeks, tmp_path, run_cli):
    broken = tmp_path / "broken.jsonl"
    broken.write_bytes(weeks["bayes"].read_bytes() + b"{oops\n")
    for args in ([str(tmp_path / "missing.jsonl")], [str(broken)], [str(weeks["bayes"]), "--steps", "1,x"],
                 [str(weeks["bayes"]), "--steps", "28,1"]):
        code, _, err = run_cli("analyze", "belief-steps", *args)
        err = err.strip().splitlines()
        assert code == 2 and len(err) == 1 and err[0].startswith("rhythm: error:")
