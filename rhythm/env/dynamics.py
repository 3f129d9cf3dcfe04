"""Dynamics of RhythmEnv as pure functions: how a profile turns into effect tables, and one step.

Two implementations of the step exist on purpose, as in Gymnasium's CartPole and its vector twin:
:func:`step_batch` (numpy, N episodes at once: baselines, planners, GRPO rewards, benchmarks) and
:func:`step_scalar` (plain floats, one episode: ``RhythmEnv`` at >20k steps/s). They perform the same
IEEE operations in the same order, so they agree bit for bit; ``tests/env/test_batched.py`` holds them
to it. Per-profile tables are built once per episode by :func:`make_params` (numpy, shared by both).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from rhythm.env.constants import (
    ADMIN,
    AFTERNOON,
    CRASH_PENALTY,
    CRASH_THRESHOLD,
    DEEP_WORK,
    EPISODE_STEPS,
    EVENING,
    EXERCISE,
    FAMILY_TIME,
    LEARN,
    LEISURE,
    MEDITATE,
    MORNING,
    N_ACTIONS,
    N_METERS,
    N_SLOTS,
    NAP,
    NIGHT,
    SLEEP,
    SOCIALIZE,
    C,
    N,
    P,
    S,
    V,
)
from rhythm.env.profiles import CN, EC, ER, MC, NEUTRAL_FACTORS, PRW, PSB, SN, SS, SV, WVR
from rhythm.env.randomness import (
    STREAM_NOISE,
    STREAM_START,
    normal_at,
    normals_np,
    stream_bases,
    uniform_np,
)

# Neutral effect of each action on (V, C, P, S, N), before modulation, efficiency, drift and noise.
BASE_EFFECT = np.zeros((N_ACTIONS, N_METERS))
BASE_EFFECT[DEEP_WORK] = (-0.04, -0.08, 0.08, -0.01, 0.0)
BASE_EFFECT[ADMIN] = (-0.01, -0.03, 0.03, 0.0, 0.0)
BASE_EFFECT[LEARN] = (-0.02, -0.05, 0.045, 0.01, 0.0)
BASE_EFFECT[EXERCISE] = (-0.01, 0.02, 0.0, 0.02, 0.0)
BASE_EFFECT[SOCIALIZE] = (0.0, -0.01, 0.0, 0.01, 0.12)
BASE_EFFECT[FAMILY_TIME] = (0.0, 0.0, 0.0, 0.03, 0.07)
BASE_EFFECT[MEDITATE] = (0.0, 0.03, 0.0, 0.05, 0.0)
BASE_EFFECT[LEISURE] = (0.02, 0.02, -0.005, 0.03, 0.0)
BASE_EFFECT[NAP] = (0.05, 0.03, 0.0, 0.0, 0.0)
BASE_EFFECT[SLEEP] = (0.2, 0.22, 0.0, 0.02, 0.0)

# (action, meter, factor, coefficient): effect += coefficient * (factor - neutral).
MODULATION: tuple[tuple[int, int, int, float], ...] = (
    (DEEP_WORK, V, WVR, 0.15),
    (ADMIN, V, WVR, 0.05),
    (LEARN, V, WVR, 0.08),
    (EXERCISE, V, ER, 0.15),
    (EXERCISE, S, ER, 0.08),
    (SOCIALIZE, V, SV, 0.15),
    (SOCIALIZE, S, SS, 0.10),
    (FAMILY_TIME, V, SV, 0.04),
    (FAMILY_TIME, S, SS, 0.03),
    (NAP, V, SN, 0.05),
)

WORK_MASK = np.zeros(N_ACTIONS, dtype=bool)
WORK_MASK[[DEEP_WORK, ADMIN, LEARN]] = True
SLEEP_MULT = np.array([0.35, 0.35, 0.6, 1.0])
"""SLEEP restores fully only at night; earlier slots give this fraction."""
MISS_NIGHT_C = 0.06
NOISE_SIGMA = np.array([0.04, 0.04, 0.025, 0.04, 0.04])
"""Standard deviation of the Gaussian-shaped noise added to each meter's change per step."""
START_LOW = np.array([0.55, 0.55, 0.0, 0.45, 0.35])
START_HIGH = np.array([0.80, 0.80, 0.10, 0.70, 0.60])

_SLEEP_MULT = tuple(float(x) for x in SLEEP_MULT)
_SIGMA = tuple(float(x) for x in NOISE_SIGMA)
_WORK = tuple(bool(x) for x in WORK_MASK)
_NOISE_BASES = stream_bases(STREAM_NOISE, EPISODE_STEPS * N_METERS)


@dataclass(frozen=True)
class Params:
    """Per-episode tables derived from profiles; every array has a leading episode axis."""

    table: np.ndarray  # (N, actions, meters) action effects after modulation
    efficiency: np.ndarray  # (N, slots) multiplier on work's progress
    serenity_per_progress: np.ndarray  # (N,) serenity gained per unit of progress from work
    miss_night_v: np.ndarray  # (N,) vitality lost when the night slot is not slept
    drift: np.ndarray  # (N, meters) change every step regardless of action
    weights: np.ndarray  # (N, meters) reward weight of each meter's change (sums to 1)

    def take(self, index: np.ndarray) -> Params:
        """The params of a subset (or repetition) of episodes."""
        return Params(*(getattr(self, f)[index] for f in self.__dataclass_fields__))


def make_params(factors: np.ndarray) -> Params:
    """Tables of each profile ``(N, N_FACTORS)``. Elementwise only, so rows do not depend on N."""
    f = np.atleast_2d(np.asarray(factors, dtype=np.float64))
    n = f.shape[0]
    d = f - NEUTRAL_FACTORS
    table = np.broadcast_to(BASE_EFFECT, (n, N_ACTIONS, N_METERS)).copy()
    for action, meter, factor, coef in MODULATION:
        table[:, action, meter] += coef * d[:, factor]
    eff = np.empty((n, N_SLOTS))
    eff[:, MORNING] = 1.0 + 1.2 * f[:, MC]
    eff[:, AFTERNOON] = 1.0
    eff[:, EVENING] = 1.0 + 1.2 * f[:, EC]
    eff[:, NIGHT] = 0.5 + 0.5 * f[:, EC]
    eff = np.maximum(eff, 0.0)
    sps = 1.0 * f[:, PSB] + 0.4 * (f[:, PRW] - 0.5)
    miss_v = 0.04 + 0.08 * f[:, SN]
    drift = np.zeros((n, N_METERS))
    drift[:, V] = -0.015 - 0.02 * f[:, SN]
    drift[:, C] = -0.015
    drift[:, S] = -0.02
    drift[:, N] = -0.01 - 0.04 * f[:, CN]
    raw = np.empty((n, N_METERS))
    raw[:, V] = 0.5
    raw[:, C] = 0.3
    raw[:, P] = 0.3 + 1.8 * f[:, PRW]
    raw[:, S] = 0.8
    raw[:, N] = 0.2 + 1.6 * f[:, CN]
    total = raw[:, V] + raw[:, C] + raw[:, P] + raw[:, S] + raw[:, N]
    weights = raw / total[:, None]
    return Params(table, eff, sps, miss_v, drift, weights)


NEUTRAL_PARAMS = make_params(NEUTRAL_FACTORS[None, :])


def start_meters(keys: np.ndarray) -> np.ndarray:
    """Start meters ``(N, 5)``: uniform in [START_LOW, START_HIGH], drawn from each episode's key."""
    out = np.empty((len(keys), N_METERS))
    for k in range(N_METERS):
        out[:, k] = START_LOW[k] + (START_HIGH[k] - START_LOW[k]) * uniform_np(keys, STREAM_START, k)
    return out


def noise_batch(keys: np.ndarray, t: int, stream: int = STREAM_NOISE) -> np.ndarray:
    """Standardised noise ``(N, 5)`` for step ``t`` (index ``t * 5 + meter`` of the stream)."""
    return normals_np(keys, stream, range(t * N_METERS, (t + 1) * N_METERS))


def expected_delta(
    params: Params, meters: np.ndarray, slot: np.ndarray, action: np.ndarray
) -> np.ndarray:
    """Noise-free change before clipping, for each episode's (meters, slot, action).

    ``action`` is ``(N,)`` (one action each; result ``(N, 5)``) or ``(N, A)`` (A candidate actions
    each, as planners ask; result ``(N, A, 5)``). ``params`` holds one row per episode or a single row
    shared by all (the neutral person).
    """
    n = len(action)
    rows = np.arange(n) if len(params.table) == n else np.zeros(n, dtype=np.int64)
    col = (n,) + (1,) * (action.ndim - 1)
    d = params.table[rows.reshape(col), action]
    work = WORK_MASK[action]
    eff = params.efficiency[rows, slot].reshape(col)
    gain = d[..., P] * eff * (0.2 + 0.4 * meters[:, C] + 0.4 * meters[:, V]).reshape(col)
    d[..., P] = np.where(work, gain, d[..., P])
    d[..., S] = d[..., S] + np.where(work, params.serenity_per_progress[rows].reshape(col) * gain, 0.0)
    sleep = action == SLEEP
    mult = SLEEP_MULT[slot].reshape(col)
    d[..., V] = np.where(sleep, d[..., V] * mult, d[..., V])
    d[..., C] = np.where(sleep, d[..., C] * mult, d[..., C])
    missed = (slot == NIGHT).reshape(col) & ~sleep
    d[..., V] = d[..., V] - np.where(missed, params.miss_night_v[rows].reshape(col), 0.0)
    d[..., C] = d[..., C] - np.where(missed, MISS_NIGHT_C, 0.0)
    return d + params.drift[rows].reshape(col + (N_METERS,))


def expected_delta_all(params: Params, meters: np.ndarray, slot: int) -> np.ndarray:
    """:func:`expected_delta` of every action at one slot, ``(N, A, 5)``: what a planner's rollout asks.

    Bit for bit the same as ``expected_delta(params, meters, slot, arange(A))`` broadcast over the
    rows (the same IEEE operations on every element it keeps), at a fraction of the work: only the work
    actions (the first three) get the progress gain, only SLEEP (the last) the sleep multiplier.
    ``params`` holds one row per episode.
    """
    d = params.table.copy()
    work = slice(DEEP_WORK, LEARN + 1)
    eff = params.efficiency[:, slot][:, None]
    gain = d[:, work, P] * eff * (0.2 + 0.4 * meters[:, C] + 0.4 * meters[:, V])[:, None]
    d[:, work, P] = gain
    d[:, work, S] = d[:, work, S] + params.serenity_per_progress[:, None] * gain
    d[:, LEARN + 1 :, S] = d[:, LEARN + 1 :, S] + 0.0
    mult = SLEEP_MULT[slot]
    d[:, SLEEP, V] = d[:, SLEEP, V] * mult
    d[:, SLEEP, C] = d[:, SLEEP, C] * mult
    if slot == NIGHT:  # every action but SLEEP misses the night
        d[:, :SLEEP, V] = d[:, :SLEEP, V] - params.miss_night_v[:, None]
        d[:, :SLEEP, C] = d[:, :SLEEP, C] - MISS_NIGHT_C
    return d + params.drift[:, None, :]


def apply_delta(meters: np.ndarray, delta: np.ndarray, z: np.ndarray) -> np.ndarray:
    """New meters: ``clip(meters + delta + sigma * z, 0, 1)``."""
    return np.minimum(1.0, np.maximum(0.0, meters + delta + NOISE_SIGMA * z))


def reward_batch(weights: np.ndarray, old: np.ndarray, new: np.ndarray) -> np.ndarray:
    """Profile-weighted meter changes minus the crash penalty, summed left to right."""
    ch = new - old
    r = weights[:, 0] * ch[:, 0]
    for k in range(1, N_METERS):
        r = r + weights[:, k] * ch[:, k]
    crashes = (new < CRASH_THRESHOLD).sum(axis=1)
    return r - CRASH_PENALTY * crashes, crashes


@dataclass
class StepResult:
    """Everything one batched step produces."""

    meters: np.ndarray  # (N, 5) after the step
    reward: np.ndarray  # (N,)
    crashes: np.ndarray  # (N,) meters below the crash threshold after the step
    delta: np.ndarray  # (N, 5) observed change
    anomaly: np.ndarray  # (N, 5) observed change minus a neutral person's noise-free change


def _advance(
    params: Params, meters: np.ndarray, slot: np.ndarray, action: np.ndarray, z: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """New meters, reward and crashes of N steps: the arithmetic :func:`step_batch` and :func:`rollout_step` share."""
    new = apply_delta(meters, expected_delta(params, meters, slot, action), z)
    reward, crashes = reward_batch(params.weights, meters, new)
    return new, reward, crashes


def rollout_step(
    params: Params, meters: np.ndarray, t: int, action: np.ndarray, z: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """New meters and reward of N simulated steps at one slot: :func:`step_batch` without the observation's
    delta and anomaly, which a planner's rollout never reads."""
    action = np.asarray(action, dtype=np.int64)
    new, reward, _ = _advance(params, meters, np.full(len(action), t % N_SLOTS), action, z)
    return new, reward


def step_batch(
    params: Params,
    meters: np.ndarray,
    t: np.ndarray | int,
    action: np.ndarray,
    z: np.ndarray,
) -> StepResult:
    """Advance N episodes one step given their actions and standardised noise ``z``."""
    action = np.asarray(action, dtype=np.int64)
    slot = np.asarray(t, dtype=np.int64) % N_SLOTS
    if slot.ndim == 0:
        slot = np.full(len(action), int(slot))
    new, reward, crashes = _advance(params, meters, slot, action, z)
    neutral = np.minimum(1.0, np.maximum(0.0, meters + expected_delta(NEUTRAL_PARAMS, meters, slot, action)))
    delta = new - meters
    return StepResult(new, reward, crashes, delta, delta - (neutral - meters))


# ---------------------------------------------------------------------------------------------
# Scalar twin: the same arithmetic on Python floats, for one episode. Keep in lockstep with the
# numpy functions above (tests/env/test_batched.py compares them bit for bit).
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ScalarParams:
    """One episode's :class:`Params` as nested Python lists/floats."""

    table: list[list[float]]
    efficiency: list[float]
    serenity_per_progress: float
    miss_night_v: float
    drift: list[float]
    weights: list[float]

    @classmethod
    def from_params(cls, params: Params, row: int = 0) -> ScalarParams:
        return cls(
            params.table[row].tolist(),
            params.efficiency[row].tolist(),
            float(params.serenity_per_progress[row]),
            float(params.miss_night_v[row]),
            params.drift[row].tolist(),
            params.weights[row].tolist(),
        )


NEUTRAL_SCALAR = ScalarParams.from_params(NEUTRAL_PARAMS)


def expected_delta_scalar(p: ScalarParams, meters: list[float], slot: int, action: int) -> list[float]:
    """Scalar twin of :func:`expected_delta`."""
    d = list(p.table[action])
    if _WORK[action]:
        gain = d[P] * p.efficiency[slot] * (0.2 + 0.4 * meters[C] + 0.4 * meters[V])
        d[P] = gain
        d[S] = d[S] + p.serenity_per_progress * gain
    else:
        d[S] = d[S] + 0.0
    if action == SLEEP:
        mult = _SLEEP_MULT[slot]
        d[V] = d[V] * mult
        d[C] = d[C] * mult
    elif slot == NIGHT:
        d[V] = d[V] - p.miss_night_v
        d[C] = d[C] - MISS_NIGHT_C
    else:
        d[V] = d[V] - 0.0
        d[C] = d[C] - 0.0
    dr = p.drift
    return [d[0] + dr[0], d[1] + dr[1], d[2] + dr[2], d[3] + dr[3], d[4] + dr[4]]


def step_scalar(
    p: ScalarParams, meters: list[float], t: int, action: int, key: int
) -> tuple[list[float], float, int, list[float], list[float]]:
    """Scalar twin of :func:`step_batch` with the env's own noise: (meters, reward, crashes, delta,
    anomaly)."""
    slot = t % N_SLOTS
    d = expected_delta_scalar(p, meters, slot, action)
    dn = expected_delta_scalar(NEUTRAL_SCALAR, meters, slot, action)
    base = t * N_METERS
    new = [0.0] * N_METERS
    delta = [0.0] * N_METERS
    anomaly = [0.0] * N_METERS
    crashes = 0
    w = p.weights
    reward = 0.0
    for k in range(N_METERS):
        m = meters[k]
        x = m + d[k] + _SIGMA[k] * normal_at(key, _NOISE_BASES[base + k])
        x = 1.0 if x > 1.0 else (0.0 if x < 0.0 else x)
        xn = m + dn[k]
        xn = 1.0 if xn > 1.0 else (0.0 if xn < 0.0 else xn)
        new[k] = x
        delta[k] = x - m
        anomaly[k] = delta[k] - (xn - m)
        reward = w[0] * delta[0] if k == 0 else reward + w[k] * delta[k]
        crashes += x < CRASH_THRESHOLD
    return new, reward - CRASH_PENALTY * crashes, crashes, delta, anomaly

