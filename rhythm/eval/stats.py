"""Statistics for reports: means with seeded bootstrap 95% confidence intervals, and paired win rates.

Intervals come from ``scipy.stats.bootstrap`` (BCa, 9,999 resamples) with a fixed seed, so the same
episodes always give the same interval, byte for byte.
"""

from __future__ import annotations

import warnings

import numpy as np
from scipy import stats

BOOTSTRAP_SEED = 20261122
BOOTSTRAP_RESAMPLES = 9999


def mean_ci(values: np.ndarray | list[float], seed: int = BOOTSTRAP_SEED) -> dict[str, object]:
    """``{"mean": m, "ci95": [low, high]}``; a constant or single-value sample gets ``[m, m]``."""
    x = np.asarray(values, dtype=np.float64)
    x = x[~np.isnan(x)]
    if len(x) == 0:
        return {"mean": None, "ci95": None}
    m = float(x.mean())
    if len(x) < 2 or np.ptp(x) == 0.0:
        return {"mean": round(m, 6), "ci95": [round(m, 6), round(m, 6)]}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = stats.bootstrap(
            (x,), np.mean, n_resamples=BOOTSTRAP_RESAMPLES, method="BCa", rng=np.random.default_rng(seed)
        )
    lo, hi = float(res.confidence_interval.low), float(res.confidence_interval.high)
    if not (np.isfinite(lo) and np.isfinite(hi)):  # BCa can fail on near-degenerate data
        lo, hi = (float(v) for v in np.percentile(x, [2.5, 97.5]))
    return {"mean": round(m, 6), "ci95": [round(lo, 6), round(hi, 6)]}


def paired_win_rate(a: np.ndarray | list[float], b: np.ndarray | list[float]) -> float:
    """Share of paired episodes where ``a`` beats ``b`` (ties count half)."""
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    if a.shape != b.shape or len(a) == 0:
        raise ValueError("win rate needs two non-empty samples of the same episodes")
    return round(float(((a > b) + 0.5 * (a == b)).mean()), 6)


def normalized_score(agent: float, random: float, oracle: float) -> float | None:
    """``(agent - random) / (oracle - random)``: 0 = random, 1 = oracle."""
    span = oracle - random
    return None if span <= 0 else round((agent - random) / span, 6)
