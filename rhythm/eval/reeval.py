"""Replay stored episodes and regrade them: ``rhythm reeval --jsonl FILE|-``.

Each record's stored actions are replayed in the env (same condition, split and seed). The replay
must reproduce the stored meters, rewards, every number of the score, each step's place in the week
and (in this rhythm's text protocol) the observation text it answered; each reply must state the
step's action, belief (to its 2 decimals) and ``parse_ok``. A record that does not (edited by hand,
or written by another env version) is flagged with the reason and where it is. Scores are recomputed
with the current grader (v3 and v2) and set beside ``random`` and ``heuristic`` on the same seeds.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from rhythm.agents.base import EpisodeSpec
from rhythm.agents.episodes import ProgressFn, play, week_score
from rhythm.agents.episodes import replay as replay_actions
from rhythm.agents.registry import make_agent
from rhythm.config import NonNegative, config_dict
from rhythm.env.batched import BatchedRhythmEnv
from rhythm.env.constants import ACTION_INDEX, ENV_VERSION, EPISODE_STEPS, N_SLOTS
from rhythm.errors import RhythmError
from rhythm.eval.stats import mean_ci
from rhythm.grader import prior_mae_beside
from rhythm.protocol import FALLBACK_ACTION, PROTOCOL_VERSION, parse_reply
from rhythm.provenance import versions
from rhythm.records import graded_belief, read_episodes, record_protocol

BELIEF_TEXT_ROUNDING = 0.005
"""How far a stored belief may be from its reply's ``BELIEF:`` line, which states it to 2 decimals."""


@dataclass(frozen=True)
class ReevalConfig:
    """``rhythm reeval``: which file, what to compare against, how strict."""

    jsonl: str = "data/teacher_30ep.jsonl"
    """Episodes JSONL, or - for stdin."""
    output: str | None = None
    """Optional summary JSON."""
    baselines: list[str] = field(default_factory=lambda: ["random", "heuristic"])
    """Agents replayed on the same seeds for comparison."""
    tolerance: NonNegative = 1e-6
    """Largest difference between stored and replayed numbers that still counts as equal."""
    strict: bool = False
    """Exit with code 1 when any record is flagged."""


@dataclass
class Replayed:
    where: str
    condition: str
    split: str
    seed: int
    agent: str
    """The agent as its report row names it: with its ``model`` where the record names one apart (``openai:gpt-x``),
    so two models' weeks are never one row."""
    flags: list[str]
    score: dict[str, Any]


def agent_label(rec: dict[str, Any]) -> str:
    """:attr:`Replayed.agent` of a record."""
    agent, model = str(rec["agent"]), rec.get("model")
    return agent if not model or str(model) in agent else f"{agent}:{model}"


def _differs(a: Any, b: Any, tol: float) -> bool:
    if a is None or b is None:
        return (a is None) != (b is None)
    return abs(float(a) - float(b)) > tol


REPLAY_CHUNK = 512  # records replayed together: the progress bar moves, the results are the same


def replay(items: list[tuple[str, dict[str, Any]]], tolerance: float = 1e-6,
           progress: ProgressFn | None = None) -> list[Replayed]:
    """Replay every record; flag any whose stored outcome does not reproduce. ``progress(n)``: n records done."""
    progress = progress or (lambda n: None)
    groups: dict[tuple[str, str], list[tuple[str, dict[str, Any]]]] = defaultdict(list)
    out: list[Replayed] = []
    for where, rec in items:
        flags = []
        if rec.get("env_version") != ENV_VERSION:
            flags.append(f"env_version {rec.get('env_version')!r} is not {ENV_VERSION!r}")
        if len(rec["steps"]) != EPISODE_STEPS:
            flags.append(f"has {len(rec['steps'])} steps, expected {EPISODE_STEPS}")
        try:
            BatchedRhythmEnv(rec["condition"], rec["split"], 1)
        except ValueError as err:
            raise RhythmError(f"{where}: {err}") from None
        if len(rec["steps"]) != EPISODE_STEPS:
            out.append(Replayed(where, rec["condition"], rec["split"], rec["seed"], agent_label(rec), flags, {}))
            progress(1)
            continue
        rec["_flags"] = flags
        groups[(rec["condition"], rec["split"])].append((where, rec))
    chunks = [(key, group[i : i + REPLAY_CHUNK]) for key, group in groups.items() for i in range(0, len(group), REPLAY_CHUNK)]
    for (condition, split), group in chunks:
        actions = np.zeros((len(group), EPISODE_STEPS), dtype=np.int64)
        for i, (_where, rec) in enumerate(group):
            for t, step in enumerate(rec["steps"]):
                name = str(step.get("action", ""))
                if name not in ACTION_INDEX:
                    rec["_flags"].append(f"step {t}: unknown action {name!r}")
                    name = FALLBACK_ACTION
                actions[i, t] = ACTION_INDEX[name]
        played = replay_actions(condition, split, [rec["seed"] for _, rec in group], actions, texts=True)
        for i, (where, rec) in enumerate(group):
            texts = played.observations[i] if record_protocol(rec) == PROTOCOL_VERSION else None  # v1 rendered others
            for t, step in enumerate(rec["steps"]):
                rec["_flags"].extend(step_flags(step, t, played, i, tolerance, texts))
            score = week_score(played.returns[i], played.crashes[i], graded_belief(rec),
                               played.belief_targets[i], condition, [s.get("parse_ok", True) for s in rec["steps"]])
            stored = rec.get("score") or {}
            for key, value in score.items():
                if key in stored and _differs(stored[key], value, tolerance):
                    rec["_flags"].append(f"score.{key} {stored[key]} does not replay ({value})")
            flags = list(dict.fromkeys(rec.pop("_flags")))  # dedupe, keep order
            out.append(Replayed(where, condition, split, int(rec["seed"]), agent_label(rec), flags, score))
        progress(len(group))
    return out


def step_flags(step: dict[str, Any], t: int, played: Any, i: int, tolerance: float,
               texts: list[str] | None) -> list[str]:
    """What in stored step ``t`` does not agree with the replay of its week (``played``, week ``i``) or with its own
    reply: its place in the week, the observation text it answered (``texts``: the replay's, in the record's
    protocol; None: not compared), the meters and reward after it (a step without them is flagged: it could not be
    checked), and the action, belief and ``parse_ok`` its reply states."""
    flags = []
    if (step.get("t"), step.get("day"), step.get("slot")) != (t, t // N_SLOTS, t % N_SLOTS):
        flags.append(f"step {t}: t/day/slot {step.get('t')}/{step.get('day')}/{step.get('slot')} is not its place in "
                     f"the week ({t}/{t // N_SLOTS}/{t % N_SLOTS})")
    if texts is not None and "observation" in step and step["observation"] != texts[t]:
        flags.append(f"step {t}: stored observation text does not replay")
    meters, reward = played.meters[i, t], played.rewards[i, t]
    missing = [key for key in ("meters", "reward") if step.get(key) is None]  # a record states both (SPEC section 5)
    if missing:
        flags.append(f"step {t}: no stored {' or '.join(missing)} to check against the replay")
    if step.get("meters") is not None and (
        len(step["meters"]) != 5 or np.max(np.abs(np.asarray(step["meters"], dtype=float) - meters)) > tolerance
    ):
        flags.append(f"step {t}: stored meters do not replay")
    if step.get("reward") is not None and _differs(step["reward"], reward, tolerance):
        flags.append(f"step {t}: stored reward {step['reward']} does not replay ({reward:.6f})")
    parsed = parse_reply(step.get("response", ""))
    name = str(step.get("action", ""))
    if parsed.ok and parsed.action_name != name:
        flags.append(f"step {t}: response says {parsed.action_name}, record says {name}")
    if "parse_ok" in step and step["parse_ok"] != parsed.ok:
        flags.append(f"step {t}: parse_ok is {step['parse_ok']}, but the response {'parses' if parsed.ok else 'does not parse'}")
    belief = step.get("belief")
    if (belief is None) != (parsed.belief is None) or (
        belief is not None and np.max(np.abs(np.asarray(belief, dtype=float) - parsed.belief)) > BELIEF_TEXT_ROUNDING + tolerance
    ):
        flags.append(f"step {t}: stored belief {belief} is not the response's BELIEF line ({parsed.belief})")
    return flags


def reeval(cfg: ReevalConfig, progress_factory: Callable[[str, int], ProgressFn] | None = None) -> dict[str, Any]:
    """Replay, regrade and compare with baselines; returns the summary. ``progress_factory(label, total)`` gives a
    progress callback for the replay (records) and for each baseline (steps, as ``rhythm eval`` counts them)."""
    bar = progress_factory or (lambda label, total: None)
    items = list(read_episodes(cfg.jsonl))
    if not items:
        raise RhythmError(f"{cfg.jsonl}: no episodes")
    replayed = replay(items, cfg.tolerance, bar("replay", len(items)))
    groups: dict[tuple[str, str, str], list[Replayed]] = defaultdict(list)
    first: dict[tuple[str, str, str, int], str] = {}
    for r in replayed:
        person = (r.condition, r.split, r.agent, r.seed)
        if person in first:  # counted twice, its row's interval would narrow: flagged, and counted once
            r.flags.append(f"{r.agent} played {r.condition}/{r.split} seed {r.seed} already (at {first[person]}): counted once")
            continue
        first[person] = r.where
        groups[(r.condition, r.split, r.agent)].append(r)
    summary: dict[str, Any] = {
        "jsonl": cfg.jsonl,
        "config": config_dict(cfg),  # tolerance decides what is flagged
        "env_version": ENV_VERSION,
        "versions": versions(),
        "episodes": len(replayed),
        "flagged": [{"where": r.where, "seed": r.seed, "reasons": r.flags} for r in replayed if r.flags],
        "groups": [],
    }
    scored_steps = sum(EPISODE_STEPS for r in replayed if r.score)
    baseline_bars = {name: bar(name, scored_steps) for name in cfg.baselines}
    for (condition, split, agent), rs in sorted(groups.items()):
        scored = sorted((r for r in rs if r.score), key=lambda r: r.seed)  # seed order: one interval whatever the file's order
        seeds = [r.seed for r in scored]
        row: dict[str, Any] = {
            "condition": condition,
            "split": split,
            "agent": agent,
            "episodes": len(rs),
            "flagged": sum(bool(r.flags) for r in rs),
            "final_score": mean_ci([r.score["final_score"] for r in scored]),
            "final_score_v2": mean_ci([r.score["final_score_v2"] for r in scored]),
            "behaviour_score": mean_ci([r.score["behaviour_score"] for r in scored]),
            "belief_mae": mean_ci([np.nan if r.score["belief_mae"] is None else r.score["belief_mae"] for r in scored]),
            "belief_mae_prior": round(prior_mae_beside([r.score["belief_mae_prior"] for r in scored],
                                                       [r.score["belief_mae"] is not None for r in scored]), 6) if scored else None,
            "baselines": {},
        }
        specs = [EpisodeSpec(condition, split, s) for s in seeds]
        for name in cfg.baselines:
            recs = play(make_agent(name), specs, progress=baseline_bars[name]) if specs else []
            row["baselines"][name] = {
                "final_score": mean_ci([r.score["final_score"] for r in recs]),
                "final_score_v2": mean_ci([r.score["final_score_v2"] for r in recs]),
            }
        summary["groups"].append(row)
    return summary
