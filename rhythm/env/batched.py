"""BatchedRhythmEnv: N weeks stepped at once with numpy, bit-identical to N ``RhythmEnv`` instances.

Used by the baselines, the teachers, the eval runner, GRPO rewards and the benchmarks. All episodes
start together and end together after 28 steps; there is no autoreset (call ``reset`` again).
``snapshot``/``restore`` copy the full state, so a state can be branched and replayed exactly.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from gymnasium import spaces
from gymnasium.vector import AutoresetMode, VectorEnv
from gymnasium.vector.utils import batch_space

from rhythm.env.constants import ENV_VERSION, EPISODE_STEPS, N_ACTIONS, N_DAYS, N_METERS, N_SLOTS
from rhythm.env.dynamics import Params, StepResult, make_params, noise_batch, start_meters, step_batch
from rhythm.env.profiles import belief_of, keys_for, sample_profiles
from rhythm.env.randomness import future_keys
from rhythm.env.rhythm_env import OBS_SIZE, OBSERVATION_SPACE


@dataclass
class BatchState:
    """Everything that determines the future of a batch of episodes (copy it to branch)."""

    t: int
    meters: np.ndarray
    last_action: np.ndarray
    delta: np.ndarray
    anomaly: np.ndarray

    def copy(self) -> BatchState:
        return BatchState(self.t, self.meters.copy(), self.last_action.copy(), self.delta.copy(), self.anomaly.copy())


def encode_batch(state: BatchState) -> np.ndarray:
    """Numeric observations ``(N, OBS_SIZE)``, row for row equal to ``encode_observation``."""
    n = len(state.meters)
    obs = np.zeros((n, OBS_SIZE), dtype=np.float32)
    obs[:, 0:5] = state.meters
    obs[:, 5:10] = state.delta
    obs[:, 10:15] = np.clip(state.anomaly, -2.0, 2.0)
    t = min(state.t, EPISODE_STEPS - 1)
    obs[:, 15] = (t // N_SLOTS) / (N_DAYS - 1)
    obs[:, 16 + t % N_SLOTS] = 1.0
    acted = state.last_action >= 0
    obs[np.flatnonzero(acted), 20 + state.last_action[acted]] = 1.0
    return obs


class BatchedRhythmEnv(VectorEnv):
    """``num_envs`` episodes of one condition and split, stepped together.

    ``gymnasium.make_vec("rhythm/RhythmEnv-v1", num_envs=N, condition=..., split=..., seed=...)`` builds
    one. There is no autoreset: all episodes end together after 28 steps; call ``reset`` again.
    """

    metadata = {"autoreset_mode": AutoresetMode.DISABLED, "env_version": ENV_VERSION}

    def __init__(self, condition: str = "in-dist", split: str = "train", num_envs: int = 1, seed: int = 0):
        sample_profiles(condition, split, np.zeros(1, dtype=np.int64))  # validates both names
        if int(seed) < 0:
            raise ValueError(f"seed must be >= 0, got {seed}")
        self._next_seed = int(seed)  # the first seed a reset() without seeds plays
        self.condition = condition
        self.split = split
        self.num_envs = num_envs
        self.single_action_space = spaces.Discrete(N_ACTIONS)
        self.single_observation_space = OBSERVATION_SPACE
        self.action_space = batch_space(self.single_action_space, num_envs)
        self.observation_space = batch_space(self.single_observation_space, num_envs)
        self.state: BatchState | None = None
        self.future: tuple[np.ndarray, np.ndarray] = (np.zeros(num_envs, dtype=np.int64), np.zeros(num_envs, dtype=np.int64))
        self._future_keys: np.ndarray | None = None

    def reset(
        self, *, seed: int | list[int] | np.ndarray | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        """Start ``num_envs`` episodes: ``seed`` is a list of episode seeds, or an int ``s`` for
        seeds ``s, s+1, ...``; without one (nor ``options={"seeds": ...}``), the ``num_envs`` seeds after
        the last one played (the constructor's ``seed`` first), so repeated resets meet new people.

        ``options={"future": d, "future_from": t}`` plays another future of the same weeks: from step ``t``
        on the env's noise comes from redrawn keys (:func:`future_keys`, draw ``d`` >= 1), before it the
        episodes' own; profiles and start meters are unchanged. Each is an int, or one per episode, so one batch
        can hold several futures of the same weeks. ``future: 0`` (the default) is the episodes' own noise
        throughout. Branch mode values an action under several futures
        this way (:mod:`rhythm.train.grpo.branch`)."""
        options = options or {}
        if seed is None:
            seed = options.get("seeds", self._next_seed)
        seeds = np.asarray(seed, dtype=np.int64)
        if seeds.ndim == 0:
            seeds = int(seeds) + np.arange(self.num_envs, dtype=np.int64)
        if len(seeds) != self.num_envs:
            raise ValueError(f"expected {self.num_envs} seeds, got {len(seeds)}")
        if (seeds < 0).any():
            raise ValueError("seeds must be >= 0")
        self.seeds = seeds
        self.future = _future(options, self.num_envs)
        self._next_seed = int(seeds[-1]) + 1
        self.keys = keys_for(self.condition, self.split, seeds)
        draws = self.future[0]
        self._future_keys = future_keys(self.keys, np.maximum(draws, 1)) if draws.any() else None
        self.profiles = sample_profiles(self.condition, self.split, seeds)
        self.params: Params = make_params(self.profiles)
        n = self.num_envs
        self.state = BatchState(0, start_meters(self.keys), np.full(n, -1), np.zeros((n, N_METERS)), np.zeros((n, N_METERS)))
        return encode_batch(self.state), self._info()

    @property
    def belief_targets(self) -> np.ndarray:
        """True (S, M, W) of every episode ``(N, 3)``; for graders and the oracle only."""
        return belief_of(self.profiles)

    def step_raw(self, actions: np.ndarray) -> StepResult:
        """Advance every episode; returns the raw :class:`StepResult` (used by runners and rewards)."""
        if self.state is None or self.state.t >= EPISODE_STEPS:
            raise RuntimeError("episodes are over (or not started); call reset()")
        actions = np.asarray(actions, dtype=np.int64)
        if actions.shape != (self.num_envs,) or (actions < 0).any() or (actions >= N_ACTIONS).any():
            raise ValueError(f"actions must be {self.num_envs} integers in [0, {N_ACTIONS})")
        s = self.state
        z = noise_batch(self.keys, s.t)
        if self._future_keys is not None:
            redrawn = (self.future[0] > 0) & (s.t >= self.future[1])
            z = np.where(redrawn[:, None], noise_batch(self._future_keys, s.t), z)
        res = step_batch(self.params, s.meters, s.t, actions, z)
        self.state = BatchState(s.t + 1, res.meters, actions, res.delta, res.anomaly)
        return res

    def step(self, actions: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        res = self.step_raw(actions)
        done = np.full(self.num_envs, self.state.t >= EPISODE_STEPS)
        info = self._info()
        info["crashes"] = res.crashes
        return encode_batch(self.state), res.reward, done, np.zeros(self.num_envs, dtype=bool), info

    def _info(self) -> dict[str, Any]:
        s = self.state
        return {"t": s.t, "meters": s.meters.copy(), "delta": s.delta.copy(), "anomaly": s.anomaly.copy()}

    def snapshot(self) -> BatchState:
        """A copy of the current state; :meth:`restore` it to replay from here."""
        if self.state is None:
            raise RuntimeError("call reset() first")
        return self.state.copy()

    def restore(self, state: BatchState) -> None:
        self.state = state.copy()


def _future(options: dict[str, Any], n: int) -> tuple[np.ndarray, np.ndarray]:
    """``reset``'s ``future`` / ``future_from`` options, checked: (draw, first redrawn step) of each episode."""
    draw = np.asarray(options.get("future", 0))
    if draw.dtype.kind not in "iu" or draw.ndim > 1 or (draw.ndim == 1 and len(draw) != n) or (draw < 0).any():
        raise ValueError(f"future must be an int >= 0 or {n} of them (0: the episodes' own noise), "
                         f"got {options.get('future')!r}")
    first = np.asarray(options.get("future_from", 0))
    if first.dtype.kind not in "iu" or first.ndim > 1 or (first.ndim == 1 and len(first) != n):
        raise ValueError(f"future_from must be an int or {n} ints (the first step of each episode's redrawn future)")
    if (first < 0).any() or (first > EPISODE_STEPS).any():
        raise ValueError(f"future_from must be in [0, {EPISODE_STEPS}]")
    return np.broadcast_to(draw, (n,)).astype(np.int64), np.broadcast_to(first, (n,)).astype(np.int64)
