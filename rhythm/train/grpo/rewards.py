"""GRPO rewards computed by the benchmark itself: plain functions with TRL's reward signature
``f(prompts, completions, **columns) -> list[float]``, found by name in :data:`REWARD_FUNCS`.

Each prompt is one state of one episode, identified by its dataset columns ``condition``, ``split``,
``seed``, ``t`` and ``prefix`` (the actions taken before ``t``). Replaying the prefix reproduces the
exact state, so every completion of a GRPO group is scored in the same hidden profile, seed and
state. Rewards reuse the grader and the planner, so RL and evaluation cannot disagree:

- ``format``: 1 if the reply parses with an action and a belief, 0.5 with an action only, -1 if it
  names no valid action (the format penalty).
- ``belief``: the v3 belief score (``rhythm.grader.belief_score``) of the stated belief against the
  episode's true profile; 0 without a belief.
- ``action_value``: where the chosen action ranks between the worst (0) and best (1) first action,
  by its expected return over the next ``ROLLOUT_HORIZON`` steps: the batched env rolled forward
  under the true profile with the planner's greedy continuation, over ``ROLLOUT_SAMPLES`` noise draws
  (planning noise, never the episode's own). An unparseable reply is valued as the fallback action the
  env would play.
- ``branch_score``: branch mode only (``mode: branch``). The final score (v3) of the week the reply leads
  to: from the reply's state, the reply is played and the policy plays the rest of the week greedily, as
  eval plays it (:mod:`rhythm.train.grpo.branch`). Replies of one group share the person and the env's
  noise, so their scores differ only by what the reply did.
- ``final_score``: episode mode only (``rhythm grpo`` with ``mode: episode``). The final score (v3) of
  the whole week this reply was part of, graded by ``rhythm.grader.score_episode`` when the student
  finished playing it (:mod:`rhythm.train.grpo`). Every turn of a week gets its week's score, and GRPO
  compares it with the other weeks of the same person: the reward the eval reports, with no proxy.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np
import orjson

from rhythm.agents.episodes import replay
from rhythm.agents.planner import action_values
from rhythm.env.constants import ACTION_INDEX
from rhythm.env.dynamics import make_params
from rhythm.env.profiles import keys_for, sample_profiles
from rhythm.env.randomness import splitmix64_np
from rhythm.errors import RhythmError
from rhythm.grader import belief_mae, belief_score, true_belief
from rhythm.protocol import parse_reply
from rhythm.train.processes import gathered, is_main_process, rank

ROLLOUT_SAMPLES = 16
ROLLOUT_HORIZON = 8
_REWARD_SALT = np.uint64(0x52455744)  # "REWD": rollout noise for rewards, apart from the env's and planners'

RewardFunc = Callable[..., list[float]]


def completion_text(completion: Any) -> str:
    """The reply text of a completion as TRL passes it: a string, or a list of chat messages."""
    if isinstance(completion, str):
        return completion
    if isinstance(completion, list) and completion:
        last = completion[-1]
        if isinstance(last, dict):
            content = last.get("content", "")
            if isinstance(content, list):  # multimodal-style content parts
                return "".join(p.get("text", "") for p in content if isinstance(p, dict))
            return str(content)
    return "" if completion is None else str(completion)


@lru_cache(maxsize=65536)
def state_values(condition: str, split: str, seed: int, t: int, prefix: tuple[str, ...]) -> tuple[float, ...]:
    """Expected return of each first action from the state after ``prefix`` (cached per state)."""
    if len(prefix) != t:
        raise ValueError(f"prefix has {len(prefix)} actions but t is {t}")
    meters = replay(condition, split, [seed], np.array([[ACTION_INDEX[name] for name in prefix]], dtype=np.int64)).final_meters
    profile = sample_profiles(condition, split, np.array([seed]))
    params = make_params(np.repeat(profile, ROLLOUT_SAMPLES, axis=0))
    keys = splitmix64_np(keys_for(condition, split, np.array([seed])) ^ _REWARD_SALT)
    values = action_values(params, meters, t, keys, ROLLOUT_HORIZON)[0]
    return tuple(float(v) for v in values)


@lru_cache(maxsize=65536)
def _truth(condition: str, split: str, seed: int) -> tuple[float, ...]:
    """The grader's true belief of one person, cached: a reward batch asks for the same people again and again."""
    return tuple(float(x) for x in true_belief(condition, split, [seed])[0])


def _column(kwargs: dict[str, Any], name: str, n: int) -> Sequence[Any]:
    if name not in kwargs:
        raise KeyError(f"reward needs the dataset column {name!r} (see rhythm.train.grpo.data)")
    col = kwargs[name]
    if len(col) != n:
        raise ValueError(f"column {name!r} has {len(col)} values for {n} completions")
    return col


def format_reward(prompts: list[Any], completions: list[Any], **kwargs: Any) -> list[float]:
    """1 with action and belief, 0.5 with an action only, -1 without a valid action."""
    out = []
    for c in completions:
        parsed = parse_reply(completion_text(c))
        out.append(-1.0 if not parsed.ok else (1.0 if parsed.belief is not None else 0.5))
    return out


def belief_reward(prompts: list[Any], completions: list[Any], **kwargs: Any) -> list[float]:
    """v3 belief score of the stated belief against this episode's true profile."""
    n = len(completions)
    cond, split, seed = (_column(kwargs, k, n) for k in ("condition", "split", "seed"))
    out = []
    for i, c in enumerate(completions):
        parsed = parse_reply(completion_text(c))
        if parsed.belief is None:
            out.append(0.0)
            continue
        truth = np.array(_truth(cond[i], split[i], int(seed[i])))
        out.append(float(belief_score(float(belief_mae(np.array(parsed.belief), truth)), cond[i], "v3")))
    return out


def action_value_reward(prompts: list[Any], completions: list[Any], **kwargs: Any) -> list[float]:
    """Rank of the chosen action's expected return in this state: 0 = worst first action, 1 = best."""
    n = len(completions)
    cond, split, seed, t, prefix = (_column(kwargs, k, n) for k in ("condition", "split", "seed", "t", "prefix"))
    out = []
    for i, c in enumerate(completions):
        parsed = parse_reply(completion_text(c))  # unparseable -> the fallback the env would play
        values = np.array(state_values(cond[i], split[i], int(seed[i]), int(t[i]), tuple(prefix[i])))
        span = values.max() - values.min()
        out.append(1.0 if span <= 1e-12 else float((values[parsed.action] - values.min()) / span))
    return out


def branch_score_reward(prompts: list[Any], completions: list[Any], **kwargs: Any) -> list[float]:
    """The final score of the week each reply leads to when the policy plays on greedily from it (branch
    mode; column ``branch_score``)."""
    return [float(x) for x in _column(kwargs, "branch_score", len(completions))]


def final_score_reward(prompts: list[Any], completions: list[Any], **kwargs: Any) -> list[float]:
    """The final score of the week each reply was played in (episode mode; column ``final_score``)."""
    return [float(x) for x in _column(kwargs, "final_score", len(completions))]


REWARD_FUNCS: dict[str, RewardFunc] = {
    "format": format_reward,
    "belief": belief_reward,
    "action_value": action_value_reward,
    "final_score": final_score_reward,
    "branch_score": branch_score_reward,
}


def get_reward_funcs(names: Sequence[str]) -> list[RewardFunc]:
    """Reward functions by name (unknown names raise with the valid ones)."""
    unknown = [n for n in names if n not in REWARD_FUNCS]
    if unknown:
        raise RhythmError(f"unknown reward function(s) {', '.join(unknown)}; expected {', '.join(REWARD_FUNCS)}")
    return [REWARD_FUNCS[n] for n in names]


# ---------------------------------------------------------------------------------- reward logging


class RewardLog:
    """Wraps the reward functions so every scored reply is logged (``reward_log.jsonl``).

    The wrappers keep the registry names (TRL logs ``rewards/<name>/mean``). TRL calls them in order
    on the same batch; when the last one has run, one line per reply is written: the optimizer step
    it trains (1-based, as in ``training_log.jsonl``), its group, the state, the parsed action and
    belief, each reward and the weighted total. With several processes each scores its own share of
    the batch, and rank 0 writes every process's lines.
    """

    def __init__(self, path: Path | None, names: Sequence[str], weights: Sequence[float] | None,
                 num_generations: int, log_replies: bool = True) -> None:
        self.path = path
        self.names = list(names)
        self.funcs = get_reward_funcs(self.names)
        self.weights = list(weights) if weights is not None else [1.0] * len(self.names)
        self.num_generations = num_generations
        self.log_replies = log_replies
        self.batches = 0
        self._no_spread: list[float] = []
        self._pending: dict[str, list[float]] = {}

    def pop_metrics(self) -> dict[str, float]:
        """``groups_without_spread``: the share of groups (one prompt's replies) whose weighted rewards are all
        equal, so they carry no gradient, over the batches scored since the last call (every process's replies). TRL's own
        ``frac_reward_zero_std`` measures the same with ``scale_rewards: group`` but the whole batch with
        ``batch``; this one is per group either way."""
        if not self._no_spread:
            return {}
        out = {"groups_without_spread": float(np.mean(self._no_spread))}
        self._no_spread = []
        return out

    def wrapped(self) -> list[Callable[..., list[float]]]:
        out = []
        for name, func in zip(self.names, self.funcs, strict=True):
            def call(prompts, completions, _name=name, _func=func, **kwargs):
                values = [float(v) for v in _func(prompts, completions, **kwargs)]
                self._pending[_name] = values
                if _name == self.names[-1]:
                    self._flush(completions, kwargs)
                return values

            call.__name__ = name
            call.__qualname__ = name
            call.__doc__ = func.__doc__
            out.append(call)
        return out

    def _flush(self, completions: list[Any], kwargs: dict[str, Any]) -> None:
        rewards = {n: self._pending.get(n, [math.nan] * len(completions)) for n in self.names}
        self._pending = {}
        state = kwargs.get("trainer_state")
        step = (state.global_step + 1) if state is not None else None
        totals = [sum(w * rewards[n][i] for n, w in zip(self.names, self.weights, strict=True)) for i in range(len(completions))]
        self.batches += 1
        g = self.num_generations
        everyone = gathered(totals)  # the whole batch: a group may span processes, and each holds a share of them
        groups = [everyone[i:i + g] for i in range(0, len(everyone), g)]
        self._no_spread.append(float(np.mean([max(x) - min(x) <= 1e-12 for x in groups])))
        if self.path is None:
            return
        lines = []
        first = rank() * len(completions)  # a launch's processes score consecutive shares: groups numbered across them
        for i, c in enumerate(completions):
            text = completion_text(c)
            parsed = parse_reply(text)
            line: dict[str, Any] = {"step": step, "batch": self.batches, "group": (first + i) // self.num_generations}
            for key in ("condition", "split", "seed", "t", "prefix", "week", "final_score", "final_score_v2", "branch_score"):
                if key in kwargs:
                    line[key] = kwargs[key][i]
            line.update(action=parsed.action_name, parse_ok=parsed.ok,
                        belief=None if parsed.belief is None else [round(b, 4) for b in parsed.belief],
                        rewards={n: rewards[n][i] for n in self.names}, reward=totals[i])
            if self.log_replies:
                line["reply"] = text
            lines.append(orjson.dumps(line, option=orjson.OPT_SERIALIZE_NUMPY) + b"\n")
        lines = gathered(lines)  # every process scores each batch: the first writes them all
        if not is_main_process():
            return
        with self.path.open("ab") as fh:
            fh.write(b"".join(lines))
            fh.flush()
