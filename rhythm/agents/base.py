"""The agent contract: a batch of episodes advances in lockstep, and an agent answers every live
episode's observation with a :class:`Decision` (reply text, belief, action).

Batching is the contract, not an optimisation: baselines and the Bayesian teacher vectorise over
episodes with numpy, and a language model answers all episodes with one ``generate`` call.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from rhythm.protocol import conversation


@dataclass(frozen=True)
class EpisodeSpec:
    """Which episode is being played: enough to rebuild it anywhere."""

    condition: str
    split: str
    seed: int


@dataclass
class BatchObservation:
    """What every live episode shows its agent before step ``t``.

    ``last_action`` is -1 and ``delta``/``anomaly`` are zero before the first step. ``prompts`` holds
    each episode's observation text of this step; ``history`` holds, per episode, the earlier
    (observation, reply) pairs, so :meth:`conversation` gives a language agent the whole week so far.
    """

    t: int
    meters: np.ndarray  # (E, 5)
    last_action: np.ndarray  # (E,) int, -1 before the first step
    delta: np.ndarray  # (E, 5) last observed change
    anomaly: np.ndarray  # (E, 5) last change minus a neutral person's expected change
    prompts: list[str] = field(default_factory=list)
    history: list[list[tuple[str, str]]] = field(default_factory=list)

    def conversation(self, i: int, *, max_turns: int | None = None) -> list[dict[str, str]]:
        """Episode ``i``'s chat up to this step's observation (protocol v2), optionally its last K steps."""
        past = self.history[i] if self.history else []
        observations = [o for o, _ in past] + [self.prompts[i]]
        return conversation(observations, [r for _, r in past], max_turns=max_turns)

    @property
    def day(self) -> int:
        return self.t // 4

    @property
    def slot(self) -> int:
        return self.t % 4


@dataclass
class Decision:
    """One reply: the text as written, and what the protocol parser (or the agent) took from it."""

    action: int
    belief: tuple[float, float, float] | None
    text: str
    parse_ok: bool = True
    usage: dict[str, float] = field(default_factory=dict)
    explored: bool = False
    """The action is not the agent's own choice (``benchmarks/dagger_probe.py`` plays the student's where
    the teacher would not have); SFT leaves such ACTION lines out of the loss."""


class Agent(Protocol):
    """Plays a batch of episodes. ``reset`` starts them; ``act`` is called once per step."""

    name: str

    def reset(self, episodes: list[EpisodeSpec]) -> None: ...

    def act(self, obs: BatchObservation) -> list[Decision]: ...
