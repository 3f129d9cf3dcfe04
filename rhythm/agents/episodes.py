"""Play agents in the env and record what happened: the runner behind ``generate``, ``eval``, GRPO's
episode mode and the quickstart, and the one replay of stored actions.

Episodes of one (condition, split) advance in lockstep in a :class:`BatchedRhythmEnv`; the agent sees
every live episode's observation (numbers and text) and answers each with a :class:`Decision`. Every
step becomes a :class:`StepRecord` through :func:`make_step`, and every finished episode, whoever
played it (chat-model teachers too), becomes an :class:`EpisodeRecord` with its grades from
:mod:`rhythm.grader` through :func:`finish_episode`. :func:`replay` plays stored actions again (reeval,
GRPO's prompts and rewards), :func:`replay_records` the actions of stored records (relabelling, the restore rule).
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any, TypeVar

import numpy as np

from rhythm.agents.base import Agent, BatchObservation, Decision, EpisodeSpec
from rhythm.env.batched import BatchedRhythmEnv
from rhythm.env.constants import ACTION_INDEX, ACTIONS, ENV_VERSION, EPISODE_STEPS, N_SLOTS
from rhythm.env.render import render_observation
from rhythm.errors import RhythmError
from rhythm.grader import score_episode, true_belief
from rhythm.provenance import now_iso
from rhythm.records import EpisodeRecord, StepRecord

ProgressFn = Callable[[int], None]
"""Called with the number of episode-steps just completed."""


S = TypeVar("S", bound=StepRecord)


def stored_belief(belief: Sequence[float] | None) -> list[float] | None:
    """A stated belief as records keep it, and as the grader grades it (so a replay regrades the same number):
    rounded to 4 decimals."""
    return None if belief is None else [round(float(x), 4) for x in belief]


def check_belief(belief: Any, agent: str, t: int) -> None:
    """A belief an agent states is None or 3 finite numbers in [0, 1]; anything else (a plugin agent's bug) is one
    line naming the agent, not a week graded by numpy broadcasting and written where no reader takes it back."""
    try:
        values = np.asarray(belief, dtype=float)
        ok = values.shape == (3,) and bool(np.all(np.isfinite(values))) and bool(np.all((values >= 0) & (values <= 1)))
    except (TypeError, ValueError):
        ok = False
    if not ok:
        raise RhythmError(f"agent {agent!r} stated the belief {belief!r} at step {t}: a belief is 3 numbers in [0, 1] "
                          "(S, M, W), or None")


def make_step(t: int, observation: str, response: str, belief: Sequence[float] | None, action: str, parse_ok: bool,
              reward: float, meters: Sequence[float], cls: type[S] = StepRecord, **extra: Any) -> S:
    """One played step as its record (belief as :func:`stored_belief` keeps it, numbers as plain floats)."""
    return cls(
        t=t,
        day=t // N_SLOTS,
        slot=t % N_SLOTS,
        observation=observation,
        response=response,
        belief=stored_belief(belief),
        action=action,
        parse_ok=bool(parse_ok),
        reward=float(reward),
        meters=[float(x) for x in meters],
        **extra,
    )


def finish_episode(
    *,
    condition: str,
    split: str,
    seed: int,
    agent: str,
    model: str | None,
    config_hash: str,
    created_at: str,
    steps: list[StepRecord],
    episode_return: float,
    crashes: int,
    belief: Sequence[float] | None,
    truth: np.ndarray,
    usage: dict[str, Any],
) -> EpisodeRecord:
    """Grade a played week and make its record: the one place this happens. ``belief`` is the one the
    agent stated at its last step, graded as the record keeps it (:func:`stored_belief`)."""
    score = week_score(episode_return, crashes, stored_belief(belief), truth, condition, [s.parse_ok for s in steps])
    return EpisodeRecord(
        env_version=ENV_VERSION,
        condition=condition,
        split=split,
        seed=seed,
        agent=agent,
        model=model,
        config_hash=config_hash,
        created_at=created_at,
        steps=steps,
        score=score,
        usage=usage,
    )


def week_score(episode_return: float, crashes: int, belief: Sequence[float] | None, truth: np.ndarray, condition: str,
               parse_ok: Sequence[bool]) -> dict[str, Any]:
    """A week's ``score`` as its record holds it: the grader's figures (:func:`rhythm.grader.score_episode`) and
    ``parse_failures``, the replies that named no valid action. Reeval recomputes a stored week's with it."""
    score = score_episode(float(episode_return), int(crashes), belief, truth, condition).to_dict()
    score["parse_failures"] = sum(not ok for ok in parse_ok)
    return score


@dataclass
class Replay:
    """Stored actions played again: what the env did at every step."""

    meters: np.ndarray  # (E, T, 5) meters after each step
    rewards: np.ndarray  # (E, T)
    returns: np.ndarray  # (E,)
    crashes: np.ndarray  # (E,) int
    final_meters: np.ndarray  # (E, 5) the state after the last action (the start state when there is none)
    belief_targets: np.ndarray  # (E, 3)
    start_meters: np.ndarray  # (E, 5) the state before the first action
    observations: list[list[str]] | None = None  # (E, T) the text each action answered (``replay(..., texts=True)``)

    @cached_property
    def seen(self) -> np.ndarray:
        """(E, T, 5) the meters before each action: what the agent saw when it chose it (built once: callers index
        it per step)."""
        return np.concatenate([self.start_meters[:, None], self.meters[:, :-1]], axis=1)


def replay(condition: str, split: str, seeds: Sequence[int], actions: np.ndarray, texts: bool = False) -> Replay:
    """Play ``actions`` ``(E, T)`` (action indices) again from the start of each seed's week, in lockstep; with
    ``texts``, also the observation text each action answered."""
    actions = np.asarray(actions, dtype=np.int64).reshape(len(seeds), -1)
    n, steps = actions.shape
    env = BatchedRhythmEnv(condition, split, n)
    env.reset(seed=[int(s) for s in seeds])
    start = env.state.meters.copy()
    meters = np.zeros((n, steps, 5))
    rewards = np.zeros((n, steps))
    returns = np.zeros(n)
    crashes = np.zeros(n, dtype=np.int64)
    observations: list[list[str]] | None = [[] for _ in range(n)] if texts else None
    for t in range(steps):
        if observations is not None:
            st = env.state
            for i in range(n):
                observations[i].append(render_observation(t, st.meters[i], int(st.last_action[i]), st.delta[i], st.anomaly[i]))
        res = env.step_raw(actions[:, t])
        meters[:, t] = res.meters
        rewards[:, t] = res.reward
        returns += res.reward
        crashes += res.crashes
    return Replay(meters, rewards, returns, crashes, env.state.meters, true_belief(condition, split, seeds), start,
                  observations)


def replay_records(records: Sequence[Any], actions: Callable[[Any], Sequence[str]]
                   ) -> Iterator[tuple[list[int], np.ndarray, Replay]]:
    """:func:`replay` of stored records, one lockstep batch per condition, split and number of actions: for each
    batch, the records' indices, their actions ``(E, T)`` (indices) and the :class:`Replay`. ``actions`` names a
    record's actions (a week's steps, a state's prefix); each record needs ``condition``, ``split`` and ``seed``."""
    named = [list(actions(r)) for r in records]
    groups: dict[tuple[str, str, int], list[int]] = defaultdict(list)
    for i, r in enumerate(records):
        groups[(str(r["condition"]), str(r["split"]), len(named[i]))].append(i)
    for (condition, split, steps), rows in groups.items():
        played = np.array([[ACTION_INDEX[a] for a in named[i]] for i in rows], dtype=np.int64).reshape(len(rows), steps)
        yield rows, played, replay(condition, split, [int(records[i]["seed"]) for i in rows], played)


def week_actions(record: dict[str, Any]) -> list[str]:
    """A recorded week's actions as played: :func:`replay_records`' usual ``actions``."""
    return [s["action"] for s in record["steps"]]


def episode_usage(steps: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """An episode's usage from its steps' (a decision's ``usage``, or an API teacher step's): the counts summed (whole
    numbers), with the tokens SPEC section 5 names always there (0 for an agent that reads none) and ``cost_usd`` the
    sum where every step's cost is known, 0.0 for an agent that spent nothing (no tokens), None where it is not known
    (a step without usage, or a model with no price)."""
    total: dict[str, Any] = defaultdict(int)
    for usage in steps:
        for k, v in usage.items():
            if v is not None:  # a step's cost given as unknown: ``costs`` below says so
                total[k] += v
    costs = [usage.get("cost_usd") for usage in steps]
    known = total.get("usage_missing", 0) == 0 and all(c is not None for c in costs)
    spent_nothing = not any(steps)
    counts = {k: v if k == "seconds" else int(v) for k, v in total.items() if k != "cost_usd"}
    cost = round(float(total["cost_usd"]), 8) if known and costs else (0.0 if spent_nothing else None)
    return {"prompt_tokens": 0, "completion_tokens": 0, **counts, "cost_usd": cost}


def play_batch(
    agent: Agent,
    condition: str,
    split: str,
    seeds: Sequence[int],
    *,
    config_hash: str = "",
    model: str | None = None,
    progress: ProgressFn | None = None,
    env_options: dict[str, Any] | None = None,
) -> list[EpisodeRecord]:
    """Play one episode per seed, all in lockstep; returns their records in seed order. ``env_options`` go to
    the env's ``reset`` (e.g. a redrawn future: :meth:`rhythm.env.batched.BatchedRhythmEnv.reset`)."""
    seeds = [int(s) for s in seeds]
    n = len(seeds)
    env = BatchedRhythmEnv(condition, split, n)
    env.reset(seed=seeds, options=env_options)
    specs = [EpisodeSpec(condition, split, s) for s in seeds]
    started = time.perf_counter()
    agent.reset(specs)
    history: list[list[tuple[str, str]]] = [[] for _ in range(n)]
    steps: list[list[StepRecord]] = [[] for _ in range(n)]
    decisions_by_episode: list[list[Decision]] = [[] for _ in range(n)]
    returns = np.zeros(n)
    crashes = np.zeros(n, dtype=np.int64)
    for t in range(EPISODE_STEPS):
        s = env.state
        prompts = [render_observation(t, s.meters[i], int(s.last_action[i]), s.delta[i], s.anomaly[i]) for i in range(n)]
        obs = BatchObservation(
            t, s.meters.copy(), s.last_action.copy(), s.delta.copy(), s.anomaly.copy(), prompts, [list(h) for h in history]
        )
        decisions = agent.act(obs)
        if len(decisions) != n:
            raise RuntimeError(f"agent {agent.name!r} returned {len(decisions)} decisions for {n} episodes")
        res = env.step_raw(np.array([d.action for d in decisions], dtype=np.int64))
        returns += res.reward
        crashes += res.crashes
        for i, d in enumerate(decisions):
            if d.belief is not None:
                check_belief(d.belief, agent.name, t)
            decisions_by_episode[i].append(d)
            history[i].append((prompts[i], d.text))
            steps[i].append(make_step(t, prompts[i], d.text, d.belief, ACTIONS[d.action], d.parse_ok, res.reward[i],
                                      res.meters[i], explored=d.explored))
        if progress is not None:
            progress(n)
    seconds = (time.perf_counter() - started) / max(n, 1)
    truths = true_belief(condition, split, seeds)
    records = []
    created = now_iso()
    for i, seed in enumerate(seeds):
        usage = episode_usage([d.usage for d in decisions_by_episode[i]])
        usage["seconds"] = round(seconds + usage.get("seconds", 0.0), 4)
        records.append(finish_episode(
            condition=condition, split=split, seed=seed, agent=agent.name, model=model, config_hash=config_hash,
            created_at=created, steps=steps[i], episode_return=float(returns[i]), crashes=int(crashes[i]),
            belief=decisions_by_episode[i][-1].belief, truth=truths[i], usage=usage,
        ))
    return records


def play(
    agent: Agent,
    specs: Sequence[EpisodeSpec],
    *,
    batch_size: int | None = None,
    config_hash: str = "",
    model: str | None = None,
    progress: ProgressFn | None = None,
    on_batch: Callable[[list[EpisodeRecord]], None] | None = None,
) -> list[EpisodeRecord]:
    """Play any episodes: grouped by (condition, split), in batches of ``batch_size`` (all if None);
    ``on_batch`` sees each batch's records as soon as they are played (``rhythm eval`` writes them then)."""
    groups: dict[tuple[str, str], list[int]] = defaultdict(list)
    for spec in specs:
        groups[(spec.condition, spec.split)].append(spec.seed)
    out: list[EpisodeRecord] = []
    for (condition, split), seeds in groups.items():
        size = batch_size or len(seeds)
        for start in range(0, len(seeds), size):
            batch = play_batch(agent, condition, split, seeds[start : start + size], config_hash=config_hash,
                               model=model, progress=progress)
            if on_batch is not None:
                on_batch(batch)
            out.extend(batch)
    return out
