"""RhythmEnv: manage a simulated person's week without knowing who the person is.

## Description

An episode is one week: 7 days x 4 slots (morning, afternoon, evening, night) = 28 steps. In each slot
the agent picks one of 10 activities for the person. Five meters move in response. How they move
depends on a hidden profile of 10 latent factors: an introvert is drained by a party that recharges an
extrovert; a morning person gets twice the work done before lunch that an evening person does. The
agent sees only the meters and how far each change departs from what a neutral person would have
shown (the *anomaly*), so it must infer the person from their responses and act on what it inferred.
At the last step it states a belief (S, M, W) about the person, which the grader scores.

## Action Space

``Discrete(10)``; stable upper-case names in ``rhythm.env.ACTIONS``. Neutral effect on
(V, C, P, S, N) per step, then what the profile adds (``coef * factor``):

| # | action      | V     | C     | P      | S     | N     | profile modulation                                |
|---|-------------|-------|-------|--------|-------|-------|---------------------------------------------------|
| 0 | DEEP_WORK   | -0.04 | -0.08 | +0.08* | -0.01 | 0     | V +0.15 work_vitality_recovery                    |
| 1 | ADMIN       | -0.01 | -0.03 | +0.03* | 0     | 0     | V +0.05 work_vitality_recovery                    |
| 2 | LEARN       | -0.02 | -0.05 | +0.045*| +0.01 | 0     | V +0.08 work_vitality_recovery                    |
| 3 | EXERCISE    | -0.01 | +0.02 | 0      | +0.02 | 0     | V +0.15, S +0.08 exercise_response                |
| 4 | SOCIALIZE   | 0     | -0.01 | 0      | +0.01 | +0.12 | V +0.15 social_vitality, S +0.10 social_serenity  |
| 5 | FAMILY_TIME | 0     | 0     | 0      | +0.03 | +0.07 | V +0.04 social_vitality, S +0.03 social_serenity  |
| 6 | MEDITATE    | 0     | +0.03 | 0      | +0.05 | 0     |                                                   |
| 7 | LEISURE     | +0.02 | +0.02 | -0.005 | +0.03 | 0     |                                                   |
| 8 | NAP         | +0.05 | +0.03 | 0      | 0     | 0     | V +0.05 (sleep_need - 0.5)                        |
| 9 | SLEEP       | +0.20 | +0.22 | 0      | +0.02 | 0     | x0.35 morning/afternoon, x0.6 evening, x1 night   |

(*) Work (DEEP_WORK, ADMIN, LEARN): progress = base x efficiency(slot) x (0.2 + 0.4 C + 0.4 V), where
efficiency is 1 + 1.2 morning_cognition in the morning, 1 in the afternoon, 1 + 1.2 evening_cognition
in the evening and 0.5 + 0.5 evening_cognition at night (never below 0). Work also changes serenity by
progress x (progress_serenity_bonus + 0.4 (progress_reward_weight - 0.5)).

A night slot not slept costs V 0.04 + 0.08 sleep_need and C 0.06.

## Observation Space

``Box(low, high, (30,), float32)``: meters (5, in [0, 1]), last change of each meter (5, in [-2, 2]), last anomaly
(5, in [-2, 2]), day / 6 (in [0, 1]), slot one-hot (4), last action one-hot (10; zeros before the first step). ``info`` carries the
same quantities as float64 (``meters``, ``delta``, ``anomaly``) with ``t``, ``day`` and ``slot``.
:func:`rhythm.env.render.render_observation` gives the text form language models read.

The anomaly is the observed change minus the change a neutral person (every factor at its neutral
value) would have shown without noise from the same state: what is left is the profile's signature
plus noise.

## Rewards

Per step: sum over meters of weight x change, minus 0.02 for every meter below 0.10 after the step
(a crash). Raw weights V 0.5, C 0.3, P 0.3 + 1.8 progress_reward_weight, S 0.8,
N 0.2 + 1.6 connection_need, normalised to sum to 1. The weights differ per person, so the best
week differs too. The return telescopes to weights . (final - start meters) minus crash penalties;
:mod:`rhythm.grader` maps it to ``behaviour_score = clip((return + 1) / 2, 0, 1)``.

## Starting State

Meters uniform in V [0.55, 0.80], C [0.55, 0.80], P [0, 0.10], S [0.45, 0.70], N [0.35, 0.60], drawn
from the episode's seed.

## Dynamics and Noise

Every step, after the action: drift V -0.015 - 0.02 sleep_need, C -0.015, S -0.02,
N -0.01 - 0.04 connection_need. Then noise: each meter's change gets sigma x z with sigma
(V, C, P, S, N) = (0.04, 0.04, 0.025, 0.04, 0.04), z a standardised Gaussian-shaped number (sum of
four uniforms; see :mod:`rhythm.env.randomness`). Meters are clipped to [0, 1]. A typical profile
effect (0.02-0.10) is half a sigma to two and a half on the meters of sigma 0.04 (0.8 to four on progress), so
inference takes several observations.

## Latent Factors (the hidden profile)

| factor                  | range    | trace in observations                                   |
|-------------------------|----------|---------------------------------------------------------|
| social_vitality         | [-1, 1]  | clear: V anomaly of SOCIALIZE (and FAMILY_TIME)         |
| social_serenity         | [-1, 1]  | clear: S anomaly of SOCIALIZE (and FAMILY_TIME)         |
| connection_need         | [0, 1]   | moderate: N drifts faster every step                    |
| morning_cognition       | [-1, 1]  | moderate: P anomaly of morning work                     |
| evening_cognition       | [-1, 1]  | moderate: P anomaly of evening and night work           |
| work_vitality_recovery  | [-1, 1]  | clear: V anomaly of work                                |
| progress_serenity_bonus | [-1, 1]  | moderate: S anomaly of work, scaled by progress         |
| progress_reward_weight  | [0, 1]   | faint: a small share of work's S anomaly; reward weight |
| exercise_response       | [-1, 1]  | clear: V and S anomaly of EXERCISE                      |
| sleep_need              | [0, 1]   | moderate: V drift, NAP and missed nights                |

## Belief Target

Three numbers in [0, 1] (:func:`rhythm.env.profiles.belief_of`):
S (social) = 0.5 + 0.35 social_vitality + 0.15 social_serenity;
M (morning) = 0.5 + 0.25 (morning_cognition - evening_cognition);
W (work) = 0.5 + 0.2 work_vitality_recovery + 0.15 progress_serenity_bonus
+ 0.15 (2 progress_reward_weight - 1). W includes the faint factor, so it cannot be inferred exactly.

## Conditions and Splits

The profile is drawn from (condition, split, seed); train seed 0 and eval seed 0 are different people
(``discrete`` excepted: its three people are the same in both splits, and the split changes their noise and start).

- ``in-dist``: the training distribution. Signed factors uniform in [-0.7, 0.7], unit factors in
  [0.15, 0.85]; social_serenity shares social_vitality's sign and evening_cognition has the opposite
  sign of morning_cognition (coherent people with one chronotype).
- ``ood``: a region in-dist never produces. Every signed factor has magnitude in [0.7, 1.0] and every
  unit factor lies in [0, 0.15) or (0.85, 1]; both pairs' signs are independent, so half the people
  are calmed by company that drains them, or sharp both morning and evening.
- ``discrete``: three fixed people (introvert, extrovert, workaholic; ``seed % 3``); the seed drives
  noise and start values.

## Episode End

``terminated`` after 28 steps (the week is over); never truncated.

## Arguments

``RhythmEnv(condition="in-dist", split="train", seed=None, render_mode=None)``; ``reset(seed=s)`` plays
seed ``s`` of that condition and split (``options={"seed": s}`` too). A ``reset()`` without a seed plays
a seed drawn from the env's generator, or, when the env was built with ``seed=s``, the seed after the last
one played (``s`` first), so an RL library that resets without seeds walks the split's people in order.
Copies of the env (``gymnasium.make_vec(..., vectorization_mode="sync")`` or ``"async"``, Stable-Baselines3's
``make_vec_env``) are built alike, so built with ``seed=s`` they would all play the same people: leave ``seed`` out
and seed them through ``reset(seed=s)`` (Gymnasium gives copy ``i`` seed ``s + i``; each copy's later resets draw
from its own seeded generator). ``render_mode="ansi"`` renders the text, ``"rgb_array"`` a picture of the meters
(:func:`rhythm.env.render.meter_image`; ``gymnasium.make(..., render_mode="human")`` shows it in a window through Gymnasium's ``HumanRendering``, which
needs ``pip install pygame``). Registered as ``rhythm/RhythmEnv-v1``
(``gymnasium.make("rhythm/RhythmEnv-v1", condition="ood", split="eval", seed=0)`` after ``import rhythm``;
``gymnasium.make_vec`` gives :class:`rhythm.env.batched.BatchedRhythmEnv`).

## Version History

- rhythm-v1: first release. (The observation *text* follows the text protocol's own version,
  ``PROTOCOL_VERSION``: v2 shows one step per turn and leaves the history to the conversation.)
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from rhythm.env.constants import (
    ACTIONS,
    ENV_VERSION,
    EPISODE_STEPS,
    N_ACTIONS,
    N_DAYS,
    N_METERS,
    N_SLOTS,
)
from rhythm.env.dynamics import ScalarParams, make_params, start_meters, step_scalar
from rhythm.env.profiles import belief_of, check_seed, keys_for, sample_profiles
from rhythm.env.render import meter_image, render_observation

OBS_SIZE = 3 * N_METERS + 1 + N_SLOTS + N_ACTIONS
_OBS_LOW = np.full(OBS_SIZE, -2.0, dtype=np.float32)
_OBS_HIGH = np.full(OBS_SIZE, 2.0, dtype=np.float32)
_OBS_LOW[:N_METERS] = 0.0
_OBS_HIGH[:N_METERS] = 1.0
_OBS_LOW[3 * N_METERS :] = 0.0
_OBS_HIGH[3 * N_METERS :] = 1.0
OBSERVATION_SPACE = spaces.Box(_OBS_LOW, _OBS_HIGH, dtype=np.float32)


def encode_observation(
    t: int, meters: list[float], last_action: int, delta: list[float], anomaly: list[float]
) -> np.ndarray:
    """The numeric observation vector (see the module docstring's Observation Space)."""
    vec = np.zeros(OBS_SIZE, dtype=np.float32)
    vec[0:5] = meters
    vec[5:10] = delta
    vec[10:15] = np.clip(anomaly, -2.0, 2.0)
    t = min(t, EPISODE_STEPS - 1)  # the terminal observation keeps the last slot's clock
    vec[15] = (t // N_SLOTS) / (N_DAYS - 1)
    vec[16 + t % N_SLOTS] = 1.0
    if last_action >= 0:
        vec[20 + last_action] = 1.0
    return vec


class RhythmEnv(gym.Env[np.ndarray, np.int64]):
    """One week of one hidden person (see the module docstring for the full specification)."""

    # render_fps: a viewer that animates the ansi text shows a day a second (Gymnasium's checker asks for it)
    metadata = {"render_modes": ["ansi", "rgb_array"], "render_fps": N_SLOTS, "env_version": ENV_VERSION}

    def __init__(
        self, condition: str = "in-dist", split: str = "train", seed: int | None = None, render_mode: str | None = None
    ):
        sample_profiles(condition, split, np.zeros(1, dtype=np.int64))  # validates both names
        if render_mode not in (None, *self.metadata["render_modes"]):
            raise ValueError(f"unsupported render_mode {render_mode!r}; use 'ansi', 'rgb_array' or None")
        self.condition = condition
        self.split = split
        self.render_mode = render_mode
        self.action_space = spaces.Discrete(N_ACTIONS)
        self.observation_space = OBSERVATION_SPACE
        self._next_seed = None if seed is None else check_seed(seed)  # what a reset() without a seed plays
        self.seed_value: int | None = None
        self.profile: np.ndarray | None = None
        self._t = EPISODE_STEPS

    @property
    def belief_target(self) -> np.ndarray:
        """The true (S, M, W) of the current person; graders and the oracle read it, agents do not."""
        if self.profile is None:
            raise RuntimeError("call reset() first")
        return belief_of(self.profile)

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        seed = None if seed is None else check_seed(seed)  # before Gymnasium's own check, which takes no numpy int
        super().reset(seed=seed)
        unknown = set(options or {}) - {"seed"}
        if unknown:
            raise ValueError(f"unknown reset option(s) {sorted(unknown)}; RhythmEnv takes 'seed'")
        episode_seed = (options or {}).get("seed", seed)
        if episode_seed is None:
            episode_seed = self._next_seed if self._next_seed is not None else int(self.np_random.integers(0, 2**31 - 1))
        episode_seed = check_seed(episode_seed)
        if self._next_seed is not None:
            self._next_seed = episode_seed + 1
        seeds = np.array([episode_seed], dtype=np.int64)
        self.seed_value = episode_seed
        self.profile = sample_profiles(self.condition, self.split, seeds)[0]
        self._key = int(keys_for(self.condition, self.split, seeds)[0])
        self._params = ScalarParams.from_params(make_params(self.profile[None, :]))
        self._meters = start_meters(np.array([self._key], dtype=np.uint64))[0].tolist()
        self._t = 0
        self._last_action = -1
        self._delta = [0.0] * N_METERS
        self._anomaly = [0.0] * N_METERS
        return self._obs(), self._info()

    def step(self, action: int | np.integer) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        if self._t >= EPISODE_STEPS:
            raise RuntimeError("episode is over; call reset()")
        whole = type(action) is int or isinstance(action, np.integer) or (  # a bool or a float is no action
            isinstance(action, np.ndarray) and action.shape == () and action.dtype.kind in "iu")
        if not whole or not 0 <= action < N_ACTIONS:
            raise ValueError(f"action must be an integer in [0, {N_ACTIONS}), got {action!r}")
        a = int(action)
        new, reward, crashes, delta, anomaly = step_scalar(self._params, self._meters, self._t, a, self._key)
        self._meters, self._delta, self._anomaly = new, delta, anomaly
        self._last_action = a
        self._t += 1
        info = self._info()
        info["crashes"] = crashes
        return self._obs(), reward, self._t >= EPISODE_STEPS, False, info

    def _obs(self) -> np.ndarray:
        return encode_observation(self._t, self._meters, self._last_action, self._delta, self._anomaly)

    def _info(self) -> dict[str, Any]:
        t = min(self._t, EPISODE_STEPS - 1)
        return {
            "t": self._t,
            "day": t // N_SLOTS,
            "slot": t % N_SLOTS,
            "meters": list(self._meters),
            "delta": list(self._delta),
            "anomaly": list(self._anomaly),
        }

    @property
    def text(self) -> str:
        """The current observation as text (what a language model sees)."""
        return render_observation(self._t, self._meters, self._last_action, self._delta, self._anomaly)

    def render(self) -> str | np.ndarray | None:
        """The text (``render_mode="ansi"``), a picture of the meters (``"rgb_array"``), or None."""
        if self.render_mode is None:
            return None
        if self.profile is None:
            raise RuntimeError("call reset() first")
        return self.text if self.render_mode == "ansi" else meter_image(self._meters, self._t)

    def action_name(self, action: int) -> str:
        return ACTIONS[action]
