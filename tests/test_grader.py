"""Grader arithmetic on hand-computed cases, and what a constant guess earns under v3 and v2."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from rhythm.env.profiles import belief_of, sample_profiles
from rhythm.grader import (
    MAE_PRIOR,
    PRIOR_MEAN,
    behaviour_score,
    belief_mae,
    belief_score,
    estimate_prior,
    final_score,
    score_episode,
)


def test_behaviour_maps_return_linearly_and_clips() -> None:
    assert behaviour_score(0.0) == 0.5
    assert behaviour_score(1.0) == 1.0
    assert behaviour_score(-1.0) == 0.0
    assert behaviour_score(0.3) == pytest.approx(0.65)
    assert behaviour_score(-2.5) == 0.0 and behaviour_score(4.0) == 1.0


def test_v2_and_v3_on_a_hand_computed_case() -> None:
    belief, truth = [0.30, 0.70, 0.55], [0.40, 0.50, 0.55]
    mae = float(belief_mae(belief, truth))
    assert mae == pytest.approx((0.10 + 0.20 + 0.0) / 3)
    assert belief_score(mae, "in-dist", "v2") == pytest.approx(0.9)
    assert belief_score(mae, "in-dist", "v3") == pytest.approx(1 - 0.1 / 0.1488)
    assert belief_score(mae, "ood", "v3") == pytest.approx(1 - 0.1 / 0.2452)
    # a belief worse than the prior's expected error earns nothing under v3, but still 0.7 under v2
    assert belief_score(0.3, "in-dist", "v3") == 0.0 and belief_score(0.3, "in-dist", "v2") == pytest.approx(0.7)
    assert belief_score(0.0, "discrete", "v3") == 1.0


def test_final_score_weights_and_episode_record() -> None:
    assert final_score(0.5, 1.0) == pytest.approx(0.6)
    s = score_episode(0.2, 3, (0.3, 0.7, 0.55), np.array([0.4, 0.5, 0.55]), "in-dist")
    assert s.behaviour_score == pytest.approx(0.6)
    assert s.belief_score == pytest.approx(1 - 0.1 / 0.1488)
    assert s.final_score == pytest.approx(0.8 * 0.6 + 0.2 * (1 - 0.1 / 0.1488))
    assert s.final_score_v2 == pytest.approx(0.8 * 0.6 + 0.2 * 0.9)
    assert s.crashes == 3 and s.to_dict()["return"] == 0.2
    assert s.belief_mae_prior == pytest.approx(np.abs(np.array(PRIOR_MEAN["in-dist"]) - [0.4, 0.5, 0.55]).mean())


def test_no_belief_scores_zero_belief_under_both_graders() -> None:
    s = score_episode(0.0, 0, None, np.array([0.5, 0.5, 0.5]), "ood")
    assert s.belief_score == 0.0 and s.belief_score_v2 == 0.0 and s.belief_mae is None
    assert s.final_score == s.final_score_v2 == pytest.approx(0.4)


def test_unknown_condition_or_grader_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown condition 'sideways'; expected one of in-dist, ood, discrete"):
        belief_score(0.1, "sideways")
    with pytest.raises(ValueError, match="unknown grader 'v9'; expected one of v3, v2"):
        belief_score(0.1, "in-dist", "v9")


@pytest.mark.parametrize("condition", ["in-dist", "ood", "discrete"])
def test_prior_table_matches_its_estimate(condition: str) -> None:
    mean, mae = estimate_prior(condition)
    assert np.allclose(mean, PRIOR_MEAN[condition], atol=5e-4)
    assert mae == pytest.approx(MAE_PRIOR[condition], abs=5e-4)


@pytest.mark.parametrize("condition", ["in-dist", "ood", "discrete"])
def test_constant_prior_mean_belief_earns_about_nothing_under_v3(condition: str) -> None:
    n = 3000 if condition != "discrete" else 3
    truth = belief_of(sample_profiles(condition, "eval", np.arange(n)))
    mae = belief_mae(np.array(PRIOR_MEAN[condition]), truth)
    v3 = belief_score(mae, condition, "v3")
    v2 = belief_score(mae, condition, "v2")
    assert abs(float((1 - mae / MAE_PRIOR[condition]).mean())) < 0.03  # unclipped expectation is 0
    assert float(np.mean(v3)) < 0.2  # clipping per episode leaves a little
    assert float(np.mean(v2)) > 0.75  # while v2 paid ~0.8 for the same guess
    assert float(np.mean(v3)) < 0.25 * float(np.mean(v2))


def test_every_truth_and_prior_mae_is_the_graders() -> None:
    """The env, the records, the plots and the GRPO rewards find the same truth and the same prior MAE."""
    from rhythm.agents.base import EpisodeSpec
    from rhythm.agents.episodes import play
    from rhythm.agents.registry import make_agent
    from rhythm.env.batched import BatchedRhythmEnv
    from rhythm.eval.plots import belief_errors
    from rhythm.grader import prior_mae, true_belief
    from rhythm.train.grpo.rewards import _truth

    for condition in ("in-dist", "ood", "discrete"):
        seeds = [0, 3, 7]
        truth = true_belief(condition, "eval", seeds)
        env = BatchedRhythmEnv(condition, "eval", num_envs=len(seeds))
        env.reset(seed=seeds)
        assert np.array_equal(truth, env.belief_targets)
        assert [_truth(condition, "eval", s) for s in seeds] == [tuple(row) for row in truth]
        records = play(make_agent("bayes"), [EpisodeSpec(condition, "eval", s) for s in seeds])
        errors, priors = belief_errors([(f"rec:{i}", r.to_dict()) for i, r in enumerate(records)])[condition]
        assert priors == pytest.approx([r.score["belief_mae_prior"] for r in records], abs=1e-12)
        assert priors == pytest.approx(prior_mae(condition, truth), abs=1e-12)
        assert errors[:, -1] == pytest.approx([r.score["belief_mae"] for r in records], abs=1e-4)  # stored beliefs: 4 decimals


@given(st.lists(st.tuples(st.floats(0, 1), st.booleans()), min_size=1, max_size=30))
def test_the_prior_beside_a_belief_error_averages_the_weeks_that_stated_one(weeks: list[tuple[float, bool]]) -> None:
    from rhythm.grader import prior_mae_beside

    priors, stated = [p for p, _ in weeks], [s for _, s in weeks]
    kept = [p for p, s in weeks if s] or priors  # none stated: every week
    assert prior_mae_beside(priors, stated) == pytest.approx(sum(kept) / len(kept))
