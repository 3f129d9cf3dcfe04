"""Statistics for reports: means with seeded bootstrap 95% confidence intervals, and paired win rates.

Every interval a report, a table or a plot shows comes from :func:`bootstrap_ci`: ``scipy.stats.bootstrap``
(BCa, 9,999 resamples) with a fixed seed, so the same episodes in the same order always give the same interval,
byte for byte; the readers put them in seed order (eval writes them so), so a file's order does not move it.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable

import numpy as np
from scipy import stats

BOOTSTRAP_SEED = 20261122
BOOTSTRAP_RESAMPLES = 9999


def bootstrap_ci(samples: tuple[np.ndarray, ...], statistic: Callable[..., np.ndarray], seed: int = BOOTSTRAP_SEED) -> tuple[float, float]:
    """The one interval method: a seeded BCa bootstrap 95% CI of ``statistic(*samples, axis=-1)``, people
    resampled with all their values (samples are paired); where BCa fails on near-degenerate data, the
    percentile interval of the same number of resamples, less those where the statistic is undefined (a ratio's
    0 / 0)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = stats.bootstrap(samples, statistic, paired=len(samples) > 1, vectorized=True, n_resamples=BOOTSTRAP_RESAMPLES,
                              method="BCa", rng=np.random.default_rng(seed))
    lo, hi = float(res.confidence_interval.low), float(res.confidence_interval.high)
    if not (np.isfinite(lo) and np.isfinite(hi)):
        idx = np.random.default_rng(seed).integers(0, len(samples[0]), (BOOTSTRAP_RESAMPLES, len(samples[0])))
        values = statistic(*(s[idx] for s in samples), axis=-1)
        values = values[~np.isnan(values)]
        with np.errstate(invalid="ignore"):  # an end between two infinite resamples: the nearest one, unbounded
            ends = np.percentile(values, [2.5, 97.5])
        lo, hi = (float(v if not np.isnan(v) else np.percentile(values, q, method="nearest"))
                  for v, q in zip(ends, (2.5, 97.5), strict=True))
    return lo, hi


def mean_ci(values: np.ndarray | list[float], seed: int = BOOTSTRAP_SEED) -> dict[str, object]:
    """``{"mean": m, "ci95": [low, high]}``; a constant sample gets ``[m, m]``, a single value no interval (None):
    one week says nothing of the spread."""
    x = np.asarray(values, dtype=np.float64)
    x = x[~np.isnan(x)]
    if len(x) == 0:
        return {"mean": None, "ci95": None}
    m = float(x.mean())
    if len(x) < 2:
        return {"mean": round(m, 6), "ci95": None}
    if np.ptp(x) == 0.0:
        return {"mean": round(m, 6), "ci95": [round(m, 6), round(m, 6)]}
    lo, hi = bootstrap_ci((x,), np.mean, seed)
    return {"mean": round(m, 6), "ci95": [round(lo, 6), round(hi, 6)]}


def ci_text(ci: tuple[float, float] | list[float] | None, spec: str = ".3f") -> str:
    """``[low, high]`` as tables print it, in ``spec``; ``[no CI: n=1]`` for a sample of one (:func:`mean_ci`)."""
    return "[no CI: n=1]" if ci is None else f"[{ci[0]:{spec}}, {ci[1]:{spec}}]"


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
