"""The grader: the one definition of a score. Eval, reeval, the teachers' records and the GRPO rewards
all call these functions, so no two stages can disagree about what a score is.

    final_score     = 0.8 * behaviour_score + 0.2 * belief_score
    behaviour_score = clip((return + 1) / 2, 0, 1)       return: sum of step rewards, crashes included
    belief v2       = 1 - MAE(belief, truth)                        (published grader)
    belief v3       = clip(1 - MAE(belief, truth) / MAE_prior, 0, 1) (default)

MAE is the mean absolute error over (S, M, W) of the belief stated at the last step; an episode with
no belief scores 0 belief under both graders. ``MAE_prior`` is the expected MAE of the constant
prior-mean belief of a condition (``PRIOR_MEAN``): a constant guess earns about nothing under v3,
while under v2 it earns ~0.85 of the belief credit. Both constants are Monte Carlo estimates over
200,000 train-split profiles (exact for ``discrete``); :func:`estimate_prior` recomputes them and a
test holds the table to it. Per episode the v3 score is clipped at 0, so a constant guess still
earns some belief score (its unclipped mean is 0 for the prior mean): on 20,000 eval-split people the prior mean
averages 0.11 in-dist and 0.16 ood, the best constant on a 0.05 grid 0.16 and 0.18 (0.03-0.04 of final score,
against 0.17 under v2). In ``discrete`` a constant equal to one of the three people's belief is exact for a third
of the weeks and averages 0.33 (0.07 of final score): read the discrete belief score beside that.

Returns below ``RETURN_LOW`` score 0 behaviour: a week that crashes most of the time (the random agent: a fifth of
its in-dist weeks, two fifths of its ood weeks) sits at that floor, so its mean behaviour is a little flattered and
ties at 0 count half in win rates.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any, Final

import numpy as np

from rhythm.env.constants import CONDITIONS, ENV_VERSION
from rhythm.env.profiles import belief_of, sample_profiles
from rhythm.errors import RhythmError

GRADERS: Final[tuple[str, ...]] = ("v3", "v2")
DEFAULT_GRADER: Final[str] = "v3"
BEHAVIOUR_WEIGHT: Final[float] = 0.8
BELIEF_WEIGHT: Final[float] = 0.2
RETURN_LOW: Final[float] = -1.0
RETURN_HIGH: Final[float] = 1.0

PRIOR_MEAN: Final[dict[str, tuple[float, float, float]]] = {
    "in-dist": (0.5004, 0.5002, 0.5002),
    "ood": (0.4997, 0.4993, 0.4998),
    "discrete": (0.4767, 0.5250, 0.5967),
}
MAE_PRIOR: Final[dict[str, float]] = {"in-dist": 0.1488, "ood": 0.2452, "discrete": 0.1948}
PRIOR_SAMPLES: Final[int] = 200_000


def estimate_prior(condition: str, n: int = PRIOR_SAMPLES) -> tuple[np.ndarray, float]:
    """Prior-mean belief and its expected MAE for a condition, from ``n`` train-split profiles."""
    n = 3 if condition == "discrete" else n
    beliefs = belief_of(sample_profiles(condition, "train", np.arange(n)))
    mean = beliefs.mean(axis=0)
    return mean, float(np.abs(beliefs - mean).mean())


def true_belief(condition: str, split: str, seeds: Sequence[int] | np.ndarray) -> np.ndarray:
    """The hidden (S, M, W) of the people of ``(condition, split, seeds)``: ``(len(seeds), 3)``. The one
    place a report, a plot, a probe or a reward finds the truth a stated belief is graded against."""
    return belief_of(sample_profiles(condition, split, np.asarray(seeds, dtype=np.int64)))


def week_truth(record: Mapping[str, Any], where: str | None = None) -> np.ndarray:
    """The true (S, M, W) of a recorded week's person (:func:`true_belief`). A week of another env version is
    refused with one line naming ``where`` (or the person): under the same seed it is another person here."""
    if record.get("env_version") != ENV_VERSION:
        where = where or f"{record.get('condition')} person {record.get('seed')}"
        raise RhythmError(f"{where}: a week of env version {record.get('env_version')!r}; the true beliefs are "
                          f"{ENV_VERSION}'s, another person under the same seed")
    return true_belief(record["condition"], record["split"], [int(record["seed"])])[0]


def prior_mae(condition: str, truth: np.ndarray) -> np.ndarray:
    """MAE of the condition's constant prior-mean belief (``PRIOR_MEAN``) against ``truth``, per row:
    the constant guess every report shows beside an agent's belief MAE, on the same people."""
    return belief_mae(np.asarray(PRIOR_MEAN[condition]), truth)


def prior_mae_beside(priors: np.ndarray | Sequence[float], stated: np.ndarray | Sequence[bool]) -> float:
    """The prior's MAE that a report shows beside a mean belief MAE: the mean of the weeks' ``priors``
    (:func:`prior_mae`) over the weeks that mean covers (``stated``: those that stated the belief it grades), over
    all of them when none did. The one rule the eval summary, reeval, the belief-steps table and the plots follow,
    so an agent's figure and the prior's always compare the same people."""
    priors, stated = np.asarray(priors, dtype=np.float64), np.asarray(stated, dtype=bool)
    return float(priors[stated].mean() if stated.any() else priors.mean())


def behaviour_score(returns: np.ndarray | float) -> np.ndarray | float:
    """The return mapped linearly from [RETURN_LOW, RETURN_HIGH] to [0, 1], clipped."""
    out = np.clip((np.asarray(returns, dtype=np.float64) - RETURN_LOW) / (RETURN_HIGH - RETURN_LOW), 0.0, 1.0)
    return float(out) if out.ndim == 0 else out


def belief_mae(belief: np.ndarray, truth: np.ndarray) -> np.ndarray:
    """Mean absolute error over (S, M, W); NaN rows (no belief) give NaN."""
    return np.abs(np.asarray(belief, dtype=np.float64) - np.asarray(truth, dtype=np.float64)).mean(axis=-1)


def belief_mae_by_step(beliefs: Sequence[tuple[int, Sequence[float] | None]], truth: np.ndarray, steps: int) -> np.ndarray:
    """MAE of the belief stated at each step of one episode: ``(steps,)``, NaN where none was stated.

    ``beliefs`` holds ``(t, belief)`` pairs; a step outside ``0..steps-1`` is ignored, a belief that does
    not have one number per dimension raises ``ValueError``.
    """
    errors = np.full(steps, np.nan)
    for t, belief in beliefs:
        if belief is None or not 0 <= t < steps:
            continue
        if len(belief) != len(truth):
            raise ValueError(f"step {t}: belief {list(belief)!r} does not have {len(truth)} numbers")
        errors[t] = float(belief_mae(np.asarray(belief, dtype=np.float64), truth))
    return errors


def belief_score(mae: np.ndarray | float, condition: str, grader: str = DEFAULT_GRADER) -> np.ndarray | float:
    """Belief credit in [0, 1] from the MAE (NaN = no belief = 0)."""
    if condition not in MAE_PRIOR:
        raise ValueError(f"unknown condition {condition!r}; expected one of {', '.join(CONDITIONS)}")
    mae = np.asarray(mae, dtype=np.float64)
    if grader == "v2":
        score = 1.0 - mae
    elif grader == "v3":
        score = 1.0 - mae / MAE_PRIOR[condition]
    else:
        raise ValueError(f"unknown grader {grader!r}; expected one of {', '.join(GRADERS)}")
    out = np.where(np.isnan(mae), 0.0, np.clip(score, 0.0, 1.0))
    return float(out) if out.ndim == 0 else out


def final_score(behaviour: np.ndarray | float, belief: np.ndarray | float) -> np.ndarray | float:
    return BEHAVIOUR_WEIGHT * np.asarray(behaviour) + BELIEF_WEIGHT * np.asarray(belief)


@dataclass(frozen=True)
class Score:
    """An episode's grades, as stored in every record (``score`` field of the JSONL)."""

    final_score: float
    final_score_v2: float
    behaviour_score: float
    belief_score: float
    belief_score_v2: float
    belief_mae: float | None
    belief_mae_prior: float
    return_: float
    crashes: int

    def to_dict(self) -> dict[str, float | int | None]:
        d = asdict(self)
        d["return"] = d.pop("return_")
        return d


SCORE_KEYS = tuple("return" if name == "return_" else name for name in Score.__dataclass_fields__)
"""The keys of a record's ``score`` that the grader writes (:meth:`Score.to_dict`)."""


def score_episode(
    episode_return: float,
    crashes: int,
    belief: tuple[float, float, float] | list[float] | None,
    truth: np.ndarray,
    condition: str,
) -> Score:
    """Grade one finished episode from its return, crash count and last stated belief."""
    mae = float(belief_mae(np.asarray(belief), truth)) if belief is not None else float("nan")
    beh = float(behaviour_score(episode_return))
    v3 = float(belief_score(mae, condition, "v3"))
    v2 = float(belief_score(mae, condition, "v2"))
    return Score(
        final_score=float(final_score(beh, v3)),
        final_score_v2=float(final_score(beh, v2)),
        behaviour_score=beh,
        belief_score=v3,
        belief_score_v2=v2,
        belief_mae=None if np.isnan(mae) else mae,
        belief_mae_prior=float(prior_mae(condition, truth)),
        return_=float(episode_return),
        crashes=int(crashes),
    )
