"""BatchedRhythmEnv: N weeks stepped at once with numpy, bit-identical to N ``RhythmEnv`` instances.

Used by the baselines, the teachers, the eval runner, GRPO rewards and the benchmarks. All episodes
start together and end together after 28 steps; there is no autoreset (call ``reset`` again), unless it is
built with ``autoreset=True`` (Gymnasium's next-step autoreset, for RL loops and vector wrappers that need it).
``snapshot``/``restore`` copy the state a step reads (the step, meters, last action and its change), so a state can be
branched and replayed exactly within the same reset; the people and their noise are the reset's, not the snapshot's.
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
from rhythm.env.profiles import MAX_SEED, belief_of, check_seed, keys_for, sample_profiles
from rhythm.env.randomness import future_keys
from rhythm.env.render import meter_image, render_observation
from rhythm.env.rhythm_env import OBS_SIZE, OBSERVATION_SPACE


@dataclass
class BatchState:
    """What a step reads of a batch of episodes besides who they are (the reset's seeds, profiles and noise): copy it
    to branch a week within the same reset."""

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
    one. All episodes end together after 28 steps; call ``reset`` again, or build it with ``autoreset=True``:
    then the step after the last one starts the next ``num_envs`` people (the actions are ignored, the reward
    is 0), as Gymnasium's ``AutoresetMode.NEXT_STEP`` says. ``info`` holds one entry per episode under each key,
    as a sync vector env's does (``t``, ``day``, ``slot``, ``meters``, ``delta``, ``anomaly``; ``crashes`` after a
    step), and ``render()`` each episode's render, as :class:`RhythmEnv` draws it.
    """

    metadata = {"autoreset_mode": AutoresetMode.DISABLED, "render_modes": ["ansi", "rgb_array"],
                "env_version": ENV_VERSION}

    def __init__(self, condition: str = "in-dist", split: str = "train", num_envs: int = 1, seed: int | None = 0,
                 autoreset: bool = False, render_mode: str | None = None):
        seed = 0 if seed is None else seed  # gymnasium.make_vec(..., seed=None), as gymnasium.make takes it
        sample_profiles(condition, split, np.zeros(1, dtype=np.int64))  # validates both names
        if isinstance(num_envs, bool) or not isinstance(num_envs, (int, np.integer)) or num_envs < 1:
            raise ValueError(f"num_envs must be a positive integer, got {num_envs!r}")
        if render_mode not in (None, *self.metadata["render_modes"]):
            raise ValueError(f"unsupported render_mode {render_mode!r}; use 'ansi', 'rgb_array' or None")
        self._next_seed = check_seed(seed)  # the first seed a reset() without seeds plays
        self.condition = condition
        self.split = split
        self.num_envs = int(num_envs)
        self.render_mode = render_mode
        self.autoreset = autoreset
        if autoreset:
            self.metadata = {**self.metadata, "autoreset_mode": AutoresetMode.NEXT_STEP}
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
        unknown = set(options) - {"seed", "seeds", "future", "future_from"}
        if unknown:
            raise ValueError(f"unknown reset option(s) {sorted(unknown)}; BatchedRhythmEnv takes 'seeds' (or 'seed'), "
                             "'future' and 'future_from'")
        if "seed" in options and "seeds" in options:
            raise ValueError("give the reset option 'seeds' or 'seed', not both")
        if seed is None:
            seed = options.get("seeds", options.get("seed"))
        if seed is None and "future" in options:  # the next people have no week yet to play another future of
            raise ValueError("the reset option 'future' replays given weeks: pass their seeds (seed= or options seeds)")
        if seed is None:
            seed = self._next_seed
        raw = np.asarray(seed)
        span = self.num_envs - 1 if raw.ndim == 0 else 0  # an int s plays s .. s + num_envs - 1
        if raw.dtype.kind not in "iu" or raw.ndim > 1 or (raw < 0).any() or (raw > MAX_SEED - span).any():
            raise ValueError(f"seed must be an integer in [0, 2**63 - 1] or {self.num_envs} of them, got {seed!r}")
        seeds = raw.astype(np.int64)
        if raw.ndim == 0:
            seeds = seeds + np.arange(self.num_envs, dtype=np.int64)
        if len(seeds) != self.num_envs:
            raise ValueError(f"expected {self.num_envs} seeds, got {len(seeds)}")
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
        given = np.asarray(actions)
        if given.dtype.kind not in "iu" or given.shape != (self.num_envs,) or (given < 0).any() or (given >= N_ACTIONS).any():
            raise ValueError(f"actions must be {self.num_envs} integers in [0, {N_ACTIONS}), got {actions!r}")
        actions = given.astype(np.int64)
        s = self.state
        z = noise_batch(self.keys, s.t)
        if self._future_keys is not None:
            redrawn = (self.future[0] > 0) & (s.t >= self.future[1])
            z = np.where(redrawn[:, None], noise_batch(self._future_keys, s.t), z)
        res = step_batch(self.params, s.meters, s.t, actions, z)
        self.state = BatchState(s.t + 1, res.meters, actions, res.delta, res.anomaly)
        return res

    def step(self, actions: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        n = self.num_envs
        if self.autoreset and self.state is not None and self.state.t >= EPISODE_STEPS:  # next-step autoreset
            obs, info = self.reset()
            return obs, np.zeros(n), np.zeros(n, dtype=bool), np.zeros(n, dtype=bool), info
        res = self.step_raw(actions)
        done = np.full(n, self.state.t >= EPISODE_STEPS)
        info = self._info()
        info["crashes"], info["_crashes"] = res.crashes, np.ones(n, dtype=bool)
        return encode_batch(self.state), res.reward, done, np.zeros(n, dtype=bool), info

    def _info(self) -> dict[str, Any]:
        """Each key one entry per episode, beside its ``_key`` mask (all true: every episode has every key), as
        Gymnasium's vector envs give them."""
        s, n = self.state, self.num_envs
        t = min(s.t, EPISODE_STEPS - 1)  # the last observation keeps the last slot's clock, as RhythmEnv's does
        info = {"t": np.full(n, s.t), "day": np.full(n, t // N_SLOTS), "slot": np.full(n, t % N_SLOTS),
                "meters": s.meters.copy(), "delta": s.delta.copy(), "anomaly": s.anomaly.copy()}
        return {**info, **{f"_{key}": np.ones(n, dtype=bool) for key in info}}

    def render(self) -> tuple[Any, ...] | None:
        """Each episode's render (:meth:`RhythmEnv.render`): its text (``"ansi"``) or a picture of its meters
        (``"rgb_array"``); None without a render mode."""
        if self.render_mode is None:
            return None
        if self.state is None:
            raise RuntimeError("call reset() first")
        s = self.state
        if self.render_mode == "rgb_array":
            return tuple(meter_image(m, s.t) for m in s.meters)
        return tuple(render_observation(s.t, m, int(a), d, x) for m, a, d, x in zip(s.meters, s.last_action, s.delta, s.anomaly))

    def snapshot(self) -> BatchState:
        """A copy of the current state; :meth:`restore` it to replay from here, with the same people (a reset in
        between meets other people, whom the restored meters would then continue)."""
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
