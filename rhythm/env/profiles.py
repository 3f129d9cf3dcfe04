"""Hidden profiles: the latent factors of a simulated person, how each condition draws them, and the
belief target (S, M, W) derived from them.

A profile is a float64 vector of ``N_FACTORS`` factors, drawn from (condition, split, seed) through
:mod:`rhythm.env.randomness`, so train seed 0 and eval seed 0 are different people by construction.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

import numpy as np

from rhythm.env.constants import CONDITIONS, DISCRETE_PROFILES, SPLITS
from rhythm.env.randomness import STREAM_PROFILE, episode_keys, uniform_np


@dataclass(frozen=True)
class Factor:
    """One latent factor: its documented range and the value a neutral person has."""

    name: str
    low: float
    high: float
    neutral: float
    meaning: str


FACTORS: Final[tuple[Factor, ...]] = (
    Factor("social_vitality", -1.0, 1.0, 0.0, "socialising drains (-) or recharges (+) vitality"),
    Factor("social_serenity", -1.0, 1.0, 0.0, "socialising unsettles (-) or calms (+)"),
    Factor("connection_need", 0.0, 1.0, 0.5, "how fast connection decays; its weight in reward"),
    Factor("morning_cognition", -1.0, 1.0, 0.0, "work efficiency in the morning"),
    Factor("evening_cognition", -1.0, 1.0, 0.0, "work efficiency in the evening and at night"),
    Factor("work_vitality_recovery", -1.0, 1.0, 0.0, "work drains (-) or energises (+) vitality"),
    Factor("progress_serenity_bonus", -1.0, 1.0, 0.0, "progress stresses (-) or satisfies (+)"),
    Factor("progress_reward_weight", 0.0, 1.0, 0.5, "weight of progress in reward (faint trace)"),
    Factor("exercise_response", -1.0, 1.0, 0.0, "exercise exhausts (-) or energises (+)"),
    Factor("sleep_need", 0.0, 1.0, 0.5, "vitality lost per step and per missed night"),
)
FACTOR_NAMES: Final[tuple[str, ...]] = tuple(f.name for f in FACTORS)
N_FACTORS: Final[int] = len(FACTORS)
(SV, SS, CN, MC, EC, WVR, PSB, PRW, ER, SN) = range(N_FACTORS)
FACTOR_LOW: Final[np.ndarray] = np.array([f.low for f in FACTORS])
FACTOR_HIGH: Final[np.ndarray] = np.array([f.high for f in FACTORS])
NEUTRAL_FACTORS: Final[np.ndarray] = np.array([f.neutral for f in FACTORS])
SIGNED: Final[np.ndarray] = FACTOR_LOW < 0

IN_DIST_SPAN: Final[float] = 0.7
"""In-dist signed factors lie in [-0.7, 0.7], unit factors in [0.15, 0.85]."""

DISCRETE_FACTORS: Final[dict[str, np.ndarray]] = {
    #                         sv    ss    cn    mc    ec   wvr   psb   prw   er    sn
    "introvert": np.array([-0.7, -0.5, 0.30, 0.5, -0.3, 0.0, 0.3, 0.5, 0.2, 0.6]),
    "extrovert": np.array([0.7, 0.6, 0.80, -0.4, 0.5, -0.3, 0.0, 0.3, 0.5, 0.4]),
    "workaholic": np.array([-0.2, -0.1, 0.20, 0.6, 0.2, 0.7, 0.7, 0.9, -0.3, 0.3]),
}

CONDITION_ID: Final[dict[str, int]] = {name: i + 1 for i, name in enumerate(CONDITIONS)}
SPLIT_ID: Final[dict[str, int]] = {name: i for i, name in enumerate(SPLITS)}


def belief_of(factors: np.ndarray) -> np.ndarray:
    """The belief target (S, M, W) in [0, 1] of profiles ``(..., N_FACTORS) -> (..., 3)``.

    S = 0.5 + 0.35 social_vitality + 0.15 social_serenity
    M = 0.5 + 0.25 (morning_cognition - evening_cognition)
    W = 0.5 + 0.2 work_vitality_recovery + 0.15 progress_serenity_bonus
            + 0.15 (2 progress_reward_weight - 1)
    """
    f = np.asarray(factors, dtype=np.float64)
    s = 0.5 + 0.35 * f[..., SV] + 0.15 * f[..., SS]
    m = 0.5 + 0.25 * (f[..., MC] - f[..., EC])
    w = 0.5 + 0.2 * f[..., WVR] + 0.15 * f[..., PSB] + 0.15 * (2.0 * f[..., PRW] - 1.0)
    return np.clip(np.stack([s, m, w], axis=-1), 0.0, 1.0)


def _u(keys: np.ndarray, index: int) -> np.ndarray:
    return uniform_np(keys, STREAM_PROFILE, index)


def _sign(u: np.ndarray) -> np.ndarray:
    return np.where(u < 0.5, -1.0, 1.0)


def sample_in_dist(keys: np.ndarray) -> np.ndarray:
    """Training distribution: coherent, moderate people.

    Signed factors uniform in [-0.7, 0.7] and unit factors in [0.15, 0.85], except that
    social_serenity shares social_vitality's sign (sociable people are calmed by company) and
    evening_cognition has the opposite sign of morning_cognition (a person has one chronotype).
    """
    a = IN_DIST_SPAN
    f = np.empty((len(keys), N_FACTORS))
    for i in range(N_FACTORS):
        u = _u(keys, i)
        f[:, i] = a * (2.0 * u - 1.0) if SIGNED[i] else 0.15 + 0.7 * u
    f[:, SS] = np.where(f[:, SV] < 0, -1.0, 1.0) * a * _u(keys, 20 + SS)
    f[:, EC] = np.where(f[:, MC] < 0, 1.0, -1.0) * a * _u(keys, 20 + EC)
    return f


def sample_ood(keys: np.ndarray) -> np.ndarray:
    """Shifted distribution that in-dist never produces: extreme and incoherent people.

    Every signed factor has magnitude in [0.7, 1.0] (beyond the in-dist maximum of 0.7) with a random
    sign; every unit factor lies in [0, 0.15) or (0.85, 1]. Independently of in-dist's coupling, the
    social pair and the chronotype pair get independent signs, so half of OOD people are calmed by
    company that drains them, or sharp both morning and evening.
    """
    f = np.empty((len(keys), N_FACTORS))
    for i in range(N_FACTORS):
        u, side = _u(keys, i), _sign(_u(keys, 10 + i))
        if SIGNED[i]:
            f[:, i] = side * (0.7 + 0.3 * u)
        else:
            f[:, i] = np.where(side < 0, 0.15 * u, 0.85 + 0.15 * u)
    return np.clip(f, FACTOR_LOW, FACTOR_HIGH)


def sample_discrete(seeds: np.ndarray) -> np.ndarray:
    """Three fixed people; ``seed % 3`` picks one, and the seed still drives noise and start values."""
    table = np.stack([DISCRETE_FACTORS[name] for name in DISCRETE_PROFILES])
    return table[np.asarray(seeds, dtype=np.int64) % len(DISCRETE_PROFILES)].copy()


def sample_broad(keys: np.ndarray) -> np.ndarray:
    """Uniform over every factor's full documented range (used by priors, never by a condition)."""
    f = np.empty((len(keys), N_FACTORS))
    for i in range(N_FACTORS):
        f[:, i] = FACTOR_LOW[i] + (FACTOR_HIGH[i] - FACTOR_LOW[i]) * _u(keys, 40 + i)
    return f


def check_condition(condition: str) -> None:
    if condition not in CONDITION_ID:
        raise ValueError(f"unknown condition {condition!r}; expected one of {', '.join(CONDITIONS)}")


def check_split(split: str) -> None:
    if split not in SPLIT_ID:
        raise ValueError(f"unknown split {split!r}; expected one of {', '.join(SPLITS)}")


MAX_SEED = 2**63 - 1
"""The largest seed of a person (seeds are int64)."""


def check_seed(seed: object) -> int:
    """``seed`` as an int, or a ``ValueError`` unless it is a whole number in [0, :data:`MAX_SEED`]."""
    if isinstance(seed, (bool, np.bool_)) or not isinstance(seed, (int, np.integer)) or not 0 <= int(seed) <= MAX_SEED:
        raise ValueError(f"seed must be an integer in [0, 2**63 - 1], got {seed!r}")
    return int(seed)


def keys_for(condition: str, split: str, seeds: np.ndarray) -> np.ndarray:
    """Episode keys of (condition, split, seeds): the root of all randomness of those episodes."""
    check_condition(condition)
    check_split(split)
    return episode_keys(CONDITION_ID[condition], SPLIT_ID[split], np.asarray(seeds, dtype=np.uint64))


def sample_profiles(condition: str, split: str, seeds: np.ndarray) -> np.ndarray:
    """Profiles ``(len(seeds), N_FACTORS)`` of the given condition and split."""
    seeds = np.asarray(seeds, dtype=np.int64)
    if condition == "discrete":
        check_split(split)
        return sample_discrete(seeds)
    keys = keys_for(condition, split, seeds)
    return sample_in_dist(keys) if condition == "in-dist" else sample_ood(keys)
