"""Rollout planning against sampled profiles: how the ``bayes`` and ``oracle`` agents choose actions.

For each episode, each candidate first action and each of K sampled profiles, the batched env is
rolled forward ``horizon`` steps with a greedy continuation (each later step takes the action with the
best noise-free one-step reward under that profile). An action's value is the mean return over the K
samples; the K rollouts of every candidate share their noise (common random numbers), so actions are
compared on the same luck. Planning noise comes from its own stream and never sees the env's.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from rhythm.config import Positive
from rhythm.env.constants import CRASH_PENALTY, CRASH_THRESHOLD, EPISODE_STEPS, N_ACTIONS, N_SLOTS
from rhythm.env.dynamics import Params, expected_delta_all, noise_batch, rollout_step
from rhythm.env.randomness import STREAM_PLAN, splitmix64_np

_ALL_ACTIONS = np.arange(N_ACTIONS)


@dataclass(frozen=True)
class PlannerConfig:
    """Rollout planner settings."""

    samples: Positive = 16
    """Profiles sampled per decision (K): posterior draws for bayes, the true profile for oracle."""
    horizon: Positive = 8
    """Steps simulated per rollout, the candidate action included (two days of slots)."""


def greedy_actions(params: Params, meters: np.ndarray, t: int) -> np.ndarray:
    """The action with the best noise-free one-step reward for each row (the rollout policy)."""
    d = expected_delta_all(params, meters, t % N_SLOTS)
    new = np.clip(meters[:, None, :] + d, 0.0, 1.0)
    gain = ((new - meters[:, None, :]) * params.weights[:, None, :]).sum(axis=2)
    crashes = (new < CRASH_THRESHOLD).sum(axis=2)
    return np.argmax(gain - CRASH_PENALTY * crashes, axis=1)


def action_values(
    params: Params,
    meters: np.ndarray,
    t: int,
    plan_keys: np.ndarray,
    horizon: int,
) -> np.ndarray:
    """Mean rollout return of every first action: ``(E, A)``.

    ``params`` has ``E * K`` rows (episode-major: K sampled profiles per episode), ``meters`` is
    ``(E, 5)``, ``plan_keys`` ``(E,)`` seeds the rollouts' noise.
    """
    e = len(meters)
    k = len(params.table) // e
    rows = np.repeat(np.arange(e * k), N_ACTIONS)  # (E*K*A,) sample-major, then action
    p = params.take(rows)
    m = np.repeat(meters, k * N_ACTIONS, axis=0)
    first = np.tile(_ALL_ACTIONS, e * k)
    sample = np.tile(np.repeat(np.arange(k, dtype=np.uint64), N_ACTIONS), e)
    keys = splitmix64_np(np.repeat(plan_keys, k * N_ACTIONS) ^ (sample + np.uint64(1)))
    total = np.zeros(len(rows))
    for h in range(min(horizon, EPISODE_STEPS - t)):
        action = first if h == 0 else greedy_actions(p, m, t + h)
        m, reward = rollout_step(p, m, t + h, action, noise_batch(keys, t + h, STREAM_PLAN))
        total += reward
    return total.reshape(e, k, N_ACTIONS).mean(axis=1)
