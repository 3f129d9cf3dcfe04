"""Report statistics on data whose answers are known by hand: CIs, paired win rates, normalised score."""

from __future__ import annotations

import numpy as np
import pytest

from rhythm.eval.stats import ci_text, mean_ci, normalized_score, paired_win_rate


def test_mean_ci_degenerate_samples() -> None:
    assert mean_ci([]) == {"mean": None, "ci95": None}
    assert mean_ci([np.nan, np.nan]) == {"mean": None, "ci95": None}
    assert mean_ci([0.25]) == {"mean": 0.25, "ci95": None}  # one week: no interval, not a zero-width one
    assert mean_ci([0.25, np.nan]) == {"mean": 0.25, "ci95": None}
    assert ci_text(None) == "[no CI: n=1]" and ci_text([0.1, 0.25]) == "[0.100, 0.250]"
    assert mean_ci([0.4, 0.4, 0.4]) == {"mean": 0.4, "ci95": [0.4, 0.4]}
    # NaN (an episode without that score) is left out, not counted as zero
    assert mean_ci([0.2, np.nan, 0.2])["mean"] == 0.2


def test_mean_ci_matches_the_normal_interval_on_a_large_sample() -> None:
    x = np.random.default_rng(7).normal(0.5, 0.1, size=400)
    stat = mean_ci(x)
    m, se = x.mean(), x.std(ddof=1) / np.sqrt(len(x))
    lo, hi = stat["ci95"]
    assert stat["mean"] == round(float(m), 6)
    assert lo < m < hi
    assert lo == pytest.approx(m - 1.96 * se, abs=0.15 * 1.96 * se)
    assert hi == pytest.approx(m + 1.96 * se, abs=0.15 * 1.96 * se)


def test_mean_ci_of_two_point_sample_is_inside_its_range_and_deterministic() -> None:
    x = [0.0] * 10 + [1.0] * 10  # mean 0.5, standard error sqrt(0.25 / 20) ~ 0.112
    a, b = mean_ci(x), mean_ci(list(x))
    assert a == b  # seeded: same data, same interval, byte for byte
    lo, hi = a["ci95"]
    assert a["mean"] == 0.5 and 0.0 <= lo < 0.5 < hi <= 1.0
    assert 0.15 < hi - lo < 0.6  # ~2 * 1.96 * 0.112 = 0.44
    wider = mean_ci([0.0] * 3 + [1.0] * 3)
    assert wider["ci95"][1] - wider["ci95"][0] > hi - lo  # fewer episodes, wider interval


def test_paired_win_rate_by_hand() -> None:
    # wins, tie, loss, tie -> (1 + 0.5 + 0 + 0.5) / 4
    assert paired_win_rate([1, 2, 3, 4], [0, 2, 5, 4]) == 0.5
    assert paired_win_rate([0.3, 0.6, 0.9], [0.2, 0.6, 0.1]) == round(2.5 / 3, 6)
    assert paired_win_rate([1.0, 1.0], [0.0, 0.0]) == 1.0
    assert paired_win_rate([0.1, 0.2], [0.1, 0.2]) == 0.5  # an agent against itself
    # pairing matters: the same values in another order give another rate
    assert paired_win_rate([0.9, 0.1], [0.5, 0.5]) == 0.5
    assert paired_win_rate([0.1, 0.9], [0.5, 0.5]) == 0.5
    assert paired_win_rate([0.9, 0.1], [0.5, 0.0]) == 1.0
    with pytest.raises(ValueError, match="two non-empty samples of the same episodes"):
        paired_win_rate([1, 2], [1])
    with pytest.raises(ValueError, match="two non-empty samples of the same episodes"):
        paired_win_rate([], [])


def test_normalized_score_by_hand() -> None:
    assert normalized_score(0.5, 0.4, 0.8) == 0.25
    assert normalized_score(0.4, 0.4, 0.8) == 0.0
    assert normalized_score(0.8, 0.4, 0.8) == 1.0
    assert normalized_score(0.3, 0.4, 0.8) == -0.25  # below random is negative, not clipped
    assert normalized_score(0.9, 0.4, 0.8) == 1.25
    assert normalized_score(0.5, 0.6, 0.6) is None  # no span between random and oracle
    assert normalized_score(0.5, 0.7, 0.6) is None
