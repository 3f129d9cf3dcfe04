"""The built-in teachers: ``bayes`` (infers the person, then plans), ``oracle`` (knows the person, then
plans: the upper bound) and ``planner`` (plans as if the person were neutral: what planning earns with
no inference, the ablation that shows what inference adds).

All three act for a whole batch of episodes with numpy and are deterministic given the episodes.
``bayes`` writes its reasoning in the protocol: the anomalies it saw, what they imply about S, M and
W, its belief with uncertainty, and why it chose its action.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from rhythm.agents.base import BatchObservation, Decision, EpisodeSpec
from rhythm.agents.planner import PlannerConfig, action_values
from rhythm.agents.posterior import ParticlePosterior, PosteriorConfig
from rhythm.env.constants import ACTIONS, BELIEF_DIMS, METER_ABBREV, METERS
from rhythm.env.dynamics import NEUTRAL_PARAMS, NOISE_SIGMA, make_params
from rhythm.env.profiles import keys_for, sample_profiles
from rhythm.env.randomness import splitmix64_np
from rhythm.env.render import when
from rhythm.grader import true_belief
from rhythm.protocol import format_ending

_PLAN_SALT = np.uint64(0x504C414E)  # "PLAN"


@dataclass(frozen=True)
class TeacherConfig:
    """Settings of the built-in teachers (``bayes``, ``oracle``, ``planner``)."""

    posterior: PosteriorConfig = field(default_factory=PosteriorConfig)
    planner: PlannerConfig = field(default_factory=PlannerConfig)


def spec_keys(episodes: list[EpisodeSpec]) -> np.ndarray:
    return np.array([keys_for(e.condition, e.split, np.array([e.seed]))[0] for e in episodes], dtype=np.uint64)


def _plan_sentence(values: np.ndarray, action: int, horizon: int, samples: int, source: str) -> str:
    order = np.argsort(-values, kind="stable")
    runner_up = int(order[1]) if int(order[0]) == action else int(order[0])
    return (
        f"Plan: {ACTIONS[action]} is best ({values[action]:+.3f} expected over the next {horizon} steps "
        f"under {samples} {source}); next best {ACTIONS[runner_up]} ({values[runner_up]:+.3f})."
    )


def planning_keys(keys: np.ndarray) -> np.ndarray:
    """The planner's own noise keys of episodes with these env keys (apart from the env's noise)."""
    return splitmix64_np(np.asarray(keys, dtype=np.uint64) ^ _PLAN_SALT)


def posterior_values(post: ParticlePosterior, meters: np.ndarray, t: int, plan_keys: np.ndarray,
                     planner: PlannerConfig) -> np.ndarray:
    """The bayes teacher's value of every action at step ``t``: the planner's mean return over ``planner.samples``
    profiles drawn from the posterior ``post`` (``(E, A)``; its argmax is the action bayes plays)."""
    idx = post.sample(planner.samples, t)
    rows = (np.arange(len(idx))[:, None] * post.particles.shape[1] + idx).ravel()
    return action_values(post.params.take(rows), meters, t, plan_keys, planner.horizon)


class _Planning:
    """Shared plumbing: per-episode planning keys and the planner call."""

    name = "planning"

    def __init__(self, config: TeacherConfig | None = None) -> None:
        self.config = config or TeacherConfig()

    def _start(self, episodes: list[EpisodeSpec]) -> None:
        self.episodes = episodes
        self.keys = spec_keys(episodes)
        self.plan_keys = planning_keys(self.keys)

    def _plan(self, params, obs: BatchObservation) -> np.ndarray:
        return action_values(params, obs.meters, obs.t, self.plan_keys, self.config.planner.horizon)


class OracleAgent(_Planning):
    """Knows the true profile; plans against it. States the true belief."""

    name = "oracle"

    def reset(self, episodes: list[EpisodeSpec]) -> None:
        self._start(episodes)
        profiles = np.concatenate(
            [sample_profiles(e.condition, e.split, np.array([e.seed])) for e in episodes]
        )
        k = self.config.planner.samples
        self.params = make_params(np.repeat(profiles, k, axis=0))
        self.truth = np.concatenate([true_belief(e.condition, e.split, [e.seed]) for e in episodes])

    def act(self, obs: BatchObservation) -> list[Decision]:
        values = self._plan(self.params, obs)
        out = []
        for i, v in enumerate(values):
            a = int(np.argmax(v))
            b = tuple(float(x) for x in self.truth[i])
            text = "\n".join(
                [
                    "Knows the person: " + " ".join(f"{d}={x:.2f}" for d, x in zip(BELIEF_DIMS, b)) + ".",
                    _plan_sentence(v, a, self.config.planner.horizon, self.config.planner.samples, "noise draws"),
                    format_ending(b, a),
                ]
            )
            out.append(Decision(a, b, text))
        return out


class PlannerAgent(_Planning):
    """Plans as if every person were neutral: the same planner as bayes/oracle, without inference."""

    name = "planner"

    def reset(self, episodes: list[EpisodeSpec]) -> None:
        self._start(episodes)
        self.params = NEUTRAL_PARAMS.take(np.zeros(len(episodes) * self.config.planner.samples, dtype=np.int64))

    def act(self, obs: BatchObservation) -> list[Decision]:
        values = self._plan(self.params, obs)
        out = []
        for v in values:
            a = int(np.argmax(v))
            text = "\n".join(
                [
                    "Assumes a neutral person.",
                    _plan_sentence(v, a, self.config.planner.horizon, self.config.planner.samples, "noise draws"),
                    format_ending(None, a),
                ]
            )
            out.append(Decision(a, None, text))
        return out


def _implication(before: np.ndarray, after: np.ndarray) -> str:
    parts = []
    for d, b, a in zip(BELIEF_DIMS, before, after):
        delta = a - b
        if abs(delta) < 0.005:
            parts.append(f"{d} steady")
        else:
            parts.append(f"{d} {'up' if delta > 0 else 'down'} {abs(delta):.2f} ({b:.2f} -> {a:.2f})")
    return "Implies: " + ", ".join(parts) + "."


def _anomaly_sentence(t: int, action: int, anomaly: np.ndarray) -> str:
    z = anomaly / NOISE_SIGMA
    k = int(np.argmax(np.abs(z)))
    shown = " ".join(f"{m}{x:+.2f}" for m, x in zip(METER_ABBREV, anomaly))
    return (
        f"Saw after {ACTIONS[action]} ({when(t - 1)}): anomaly {shown}; "
        f"largest {METERS[k]} at {z[k]:+.1f} noise sd."
    )


class BayesAgent(_Planning):
    """Particle posterior over the profile, posterior-mean belief, planning against posterior draws."""

    name = "bayes"

    def reset(self, episodes: list[EpisodeSpec]) -> None:
        self._start(episodes)
        self.posterior = ParticlePosterior(self.keys, self.config.posterior)
        self._prev_meters: np.ndarray | None = None
        self._prev_belief, _ = self.posterior.belief()

    def act(self, obs: BatchObservation) -> list[Decision]:
        post = self.posterior
        if obs.t > 0:
            assert self._prev_meters is not None
            post.update(obs.t - 1, self._prev_meters, obs.last_action, obs.meters)
        mean, std = post.belief()
        k = self.config.planner.samples
        values = posterior_values(post, obs.meters, obs.t, self.plan_keys, self.config.planner)
        out = []
        for i, v in enumerate(values):
            a = int(np.argmax(v))
            b = tuple(round(float(x), 2) for x in mean[i])
            if obs.t == 0:
                seen = "Start of the week: no anomalies yet, so the belief is the prior."
                implied = "Implies: nothing yet."
            else:
                seen = _anomaly_sentence(obs.t, int(obs.last_action[i]), obs.anomaly[i])
                implied = _implication(self._prev_belief[i], mean[i])
            uncertain = BELIEF_DIMS[int(np.argmax(std[i]))]
            belief_line = (
                f"Belief after {obs.t} observations: "
                + " ".join(f"{d}={m:.2f}+-{s:.2f}" for d, m, s in zip(BELIEF_DIMS, mean[i], std[i]))
                + f" (least sure about {uncertain})."
            )
            plan = _plan_sentence(v, a, self.config.planner.horizon, k, "posterior samples")
            text = "\n".join([seen, implied, belief_line, plan, format_ending(b, a)])
            out.append(Decision(a, b, text))
        self._prev_meters = obs.meters.copy()
        self._prev_belief = mean
        return out
