"""Does the belief sharpen over the week? Belief MAE at chosen steps of played weeks, with 95% CIs, beside
the constant prior's on the same people.

Run: ``rhythm analyze belief-steps EPISODES.jsonl[,MORE.jsonl] [--steps 1,4,8,16,28]`` on ``rhythm
eval``'s (or the quickstart's) ``*.episodes.jsonl``. Per condition it prints the mean MAE at each step, the
last step's MAE with its CI, the constant prior's MAE, their ratio with a CI that resamples people with
their own prior error (issue 13's "<= 0.5x the prior"), and the last step's MAE over the first's. Intervals
are seeded BCa bootstraps (:mod:`rhythm.eval.stats`), so the same weeks always print the same figures.
Weeks that state no belief at a step are left out of that step (and of its ratio).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from rhythm.env.constants import CONDITIONS, EPISODE_STEPS
from rhythm.errors import RhythmError
from rhythm.eval.plots import belief_errors
from rhythm.eval.stats import bootstrap_ci, ci_text, mean_ci
from rhythm.grader import prior_mae_beside
from rhythm.records import file_list, read_episodes

DEFAULT_STEPS = (1, 4, 8, 16, EPISODE_STEPS)


@dataclass(frozen=True)
class BeliefSteps:
    """One condition's belief error over the week (steps count from 1)."""

    episodes: int
    steps: tuple[int, ...]
    mae: tuple[float, ...]
    """Mean MAE at each of ``steps``."""
    last_ci: tuple[float, float] | None
    """The last step's MAE's 95% CI; None for a single week (:func:`rhythm.eval.stats.mean_ci`)."""
    prior: float
    """The constant prior-mean belief's MAE on the weeks that stated a belief at the last step."""
    ratio: float
    """Last step's MAE / the prior's."""
    ratio_ci: tuple[float, float] | None
    """The ratio's 95% CI, people resampled with their own prior error; None for a single week."""
    last_over_first: float
    """Last step's MAE / the first step's, on the weeks that stated a belief at both (NaN when none did)."""


def _ratio_ci(errors: np.ndarray, priors: np.ndarray) -> tuple[float, float] | None:
    if len(errors) < 2:
        return None  # one week says nothing of the spread
    if np.ptp(errors / priors) == 0.0:
        r = float(errors.mean() / priors.mean())
        return r, r
    return bootstrap_ci((errors, priors), lambda a, b, axis=-1: a.mean(axis=axis) / b.mean(axis=axis))


def belief_steps(errors: np.ndarray, priors: np.ndarray, steps: tuple[int, ...]) -> BeliefSteps:
    """From ``errors`` (episodes x EPISODE_STEPS, NaN where no belief was stated) and each episode's prior
    error: the figures of :class:`BeliefSteps` at ``steps`` (1-based, ascending; the last one carries the CIs)."""
    if not steps or any(not 1 <= s <= errors.shape[1] for s in steps) or list(steps) != sorted(set(steps)):
        raise RhythmError(f"steps must be ascending, distinct and within 1..{errors.shape[1]}, got {list(steps)}")
    last = errors[:, steps[-1] - 1]
    stated = ~np.isnan(last)
    if not stated.any():
        raise RhythmError(f"no week states a belief at step {steps[-1]}")
    ci = mean_ci(last[stated])["ci95"]  # one week: no interval
    with np.errstate(invalid="ignore"):
        mae = tuple(float(np.nanmean(errors[:, s - 1])) if (~np.isnan(errors[:, s - 1])).any() else float("nan") for s in steps)
    prior = prior_mae_beside(priors, stated)
    both = stated & ~np.isnan(errors[:, steps[0] - 1])  # one set of weeks for both ends of the ratio
    over_first = _over(float(last[both].mean()), float(errors[both, steps[0] - 1].mean())) if both.any() else float("nan")
    return BeliefSteps(len(errors), tuple(steps), mae, None if ci is None else (float(ci[0]), float(ci[1])), prior,
                       _over(float(last[stated].mean()), prior), _ratio_ci(last[stated], priors[stated]), over_first)


def _over(a: float, b: float) -> float:
    return a / b if b > 0 else float("nan")


def belief_steps_of(files: str, steps: tuple[int, ...]) -> dict[str, BeliefSteps]:
    """:func:`belief_steps` of each condition (the benchmark's order) in ``files`` (comma-separated JSONL paths)."""
    errors = belief_errors([pair for path in file_list(files) for pair in read_episodes(path)])
    if not errors:
        raise RhythmError(f"no weeks in {files}")
    return {c: belief_steps(*errors[c], steps) for c in sorted(errors, key=lambda c: (CONDITIONS + (c,)).index(c))}


def belief_steps_table(rows: dict[str, BeliefSteps]) -> str:
    """:func:`belief_steps_of` as the table ``rhythm analyze belief-steps`` prints."""
    steps = next(iter(rows.values())).steps
    lines = [f"condition  weeks  belief MAE at steps {'/'.join(map(str, steps))}  step {steps[-1]} [95% CI]  prior  "
             f"step {steps[-1]} / prior [95% CI]  step {steps[-1]} / step {steps[0]}"]
    for cond, r in rows.items():
        lines.append(f"{cond:9s}  {r.episodes:5d}  {' / '.join(f'{m:.3f}' for m in r.mae)}  {r.mae[-1]:.3f} "
                     f"{ci_text(r.last_ci)}  {r.prior:.3f}  {r.ratio:.2f}x {ci_text(r.ratio_ci, '.2f')}  {r.last_over_first:.2f}")
    return "\n".join(lines)
