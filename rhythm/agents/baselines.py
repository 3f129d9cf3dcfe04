"""Baselines without inference: ``random`` (uniform over actions) and ``heuristic`` (a fixed priority
list over five actions). Neither states a belief. Both are deterministic given the episode."""

from __future__ import annotations

import numpy as np

from rhythm.agents.base import BatchObservation, Decision, EpisodeSpec
from rhythm.env.constants import ACTIONS, DEEP_WORK, MEDITATE, N_ACTIONS, NAP, NIGHT, SLEEP, SOCIALIZE, N, S, V
from rhythm.env.profiles import keys_for
from rhythm.env.randomness import splitmix64_np, uniform_np
from rhythm.protocol import format_ending

STREAM_RANDOM_AGENT = 21


class RandomAgent:
    """Uniform random actions drawn from the episode's own key (its own stream): reproducible."""

    name = "random"

    def reset(self, episodes: list[EpisodeSpec]) -> None:
        keys = [keys_for(e.condition, e.split, np.array([e.seed]))[0] for e in episodes]
        self._keys = splitmix64_np(np.array(keys, dtype=np.uint64) ^ np.uint64(STREAM_RANDOM_AGENT))

    def act(self, obs: BatchObservation) -> list[Decision]:
        u = uniform_np(self._keys, STREAM_RANDOM_AGENT, obs.t)
        actions = np.minimum((u * N_ACTIONS).astype(np.int64), N_ACTIONS - 1)
        return [Decision(int(a), None, format_ending(None, int(a))) for a in actions]


# Highest priority first: (rule text, action, condition on (meters, slot)).
HEURISTIC_RULES: tuple[tuple[str, int], ...] = (
    ("it is night, so sleep", SLEEP),
    ("vitality is below 0.30, so nap", NAP),
    ("connection is below 0.35, so socialize", SOCIALIZE),
    ("serenity is below 0.35, so meditate", MEDITATE),
    ("nothing is low, so do deep work", DEEP_WORK),
)


def heuristic_actions(meters: np.ndarray, slot: int) -> np.ndarray:
    """Rule index chosen for each row of ``meters`` (first rule that applies)."""
    n = len(meters)
    if slot == NIGHT:
        return np.zeros(n, dtype=np.int64)
    rule = np.full(n, 4)
    rule = np.where(meters[:, S] < 0.35, 3, rule)
    rule = np.where(meters[:, N] < 0.35, 2, rule)
    rule = np.where(meters[:, V] < 0.30, 1, rule)
    return rule


class HeuristicAgent:
    """A fixed priority list over SLEEP, NAP, SOCIALIZE, MEDITATE and DEEP_WORK; no belief."""

    name = "heuristic"

    def reset(self, episodes: list[EpisodeSpec]) -> None:
        pass

    def act(self, obs: BatchObservation) -> list[Decision]:
        out = []
        for r in heuristic_actions(obs.meters, obs.slot):
            text, action = HEURISTIC_RULES[r]
            out.append(Decision(action, None, f"Rule: {text}.\n{format_ending(None, ACTIONS[action])}"))
        return out
