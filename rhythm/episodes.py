"""Play agents in the env and record what happened: the runner behind ``generate``, ``eval`` and the
quickstart.

Episodes of one (condition, split) advance in lockstep in a :class:`BatchedRhythmEnv`; the agent sees
every live episode's observation (numbers and text) and answers each with a :class:`Decision`. Each
finished episode becomes an :class:`EpisodeRecord` with its steps and its grades from
:mod:`rhythm.grader`.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Callable, Sequence

import numpy as np

from rhythm.agents.base import Agent, BatchObservation, Decision, EpisodeSpec
from rhythm.env.batched import BatchedRhythmEnv
from rhythm.env.constants import ACTIONS, ENV_VERSION, EPISODE_STEPS, N_SLOTS
from rhythm.env.render import render_observation
from rhythm.grader import score_episode
from rhythm.provenance import now_iso
from rhythm.records import EpisodeRecord, StepRecord

ProgressFn = Callable[[int], None]
"""Called with the number of episode-steps just completed."""


def _sum_usage(decisions: Sequence[Decision]) -> dict[str, float]:
    total: dict[str, float] = defaultdict(float)
    for d in decisions:
        for k, v in d.usage.items():
            total[k] += v
    return dict(total)


def play_batch(
    agent: Agent,
    condition: str,
    split: str,
    seeds: Sequence[int],
    *,
    config_hash: str = "",
    model: str | None = None,
    progress: ProgressFn | None = None,
) -> list[EpisodeRecord]:
    """Play one episode per seed, all in lockstep; returns their records in seed order."""
    seeds = [int(s) for s in seeds]
    n = len(seeds)
    env = BatchedRhythmEnv(condition, split, n)
    env.reset(seed=seeds)
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
            decisions_by_episode[i].append(d)
            history[i].append((prompts[i], d.text))
            steps[i].append(
                StepRecord(
                    t=t,
                    day=t // N_SLOTS,
                    slot=t % N_SLOTS,
                    observation=prompts[i],
                    response=d.text,
                    belief=None if d.belief is None else [round(float(x), 4) for x in d.belief],
                    action=ACTIONS[d.action],
                    parse_ok=bool(d.parse_ok),
                    reward=float(res.reward[i]),
                    meters=[float(x) for x in res.meters[i]],
                    explored=d.explored,
                )
            )
        if progress is not None:
            progress(n)
    seconds = (time.perf_counter() - started) / max(n, 1)
    truths = env.belief_targets
    records = []
    created = now_iso()
    for i, seed in enumerate(seeds):
        last_belief = decisions_by_episode[i][-1].belief
        score = score_episode(float(returns[i]), int(crashes[i]), last_belief, truths[i], condition)
        usage = _sum_usage(decisions_by_episode[i])
        usage["seconds"] = round(seconds + usage.get("seconds", 0.0), 4)
        score_d = score.to_dict()
        score_d["parse_failures"] = sum(not d.parse_ok for d in decisions_by_episode[i])
        records.append(
            EpisodeRecord(
                env_version=ENV_VERSION,
                condition=condition,
                split=split,
                seed=seed,
                agent=agent.name,
                model=model,
                config_hash=config_hash,
                created_at=created,
                steps=steps[i],
                score=score_d,
                usage=usage,
            )
        )
    return records


def play(
    agent: Agent,
    specs: Sequence[EpisodeSpec],
    *,
    batch_size: int | None = None,
    config_hash: str = "",
    model: str | None = None,
    progress: ProgressFn | None = None,
) -> list[EpisodeRecord]:
    """Play any episodes: grouped by (condition, split), in batches of ``batch_size`` (all if None)."""
    groups: dict[tuple[str, str], list[int]] = defaultdict(list)
    for spec in specs:
        groups[(spec.condition, spec.split)].append(spec.seed)
    out: list[EpisodeRecord] = []
    for (condition, split), seeds in groups.items():
        size = batch_size or len(seeds)
        for start in range(0, len(seeds), size):
            out.extend(
                play_batch(
                    agent, condition, split, seeds[start : start + size],
                    config_hash=config_hash, model=model, progress=progress,
                )
            )
    return out
