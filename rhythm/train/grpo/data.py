"""GRPO prompts: states of recorded episodes, each carrying what is needed to score a reply in it.

Step mode (the default of ``rhythm grpo``): one prompt per (episode, step) of teacher episodes (JSONL,
a file or ``-``), and optionally of the student's own rollouts. A row is TRL's conversational
``prompt``, the episode's conversation up to step t with the recorded agent's earlier replies
(protocol v2, :func:`rhythm.protocol.record_conversation`; with ``strip_reasoning`` those replies are
cut to their BELIEF/ACTION lines, as a student trained that way writes them), plus the state's
identity, which the reward functions of :mod:`rhythm.train.grpo.rewards` read:

    condition, split, seed   the person (the hidden profile is drawn from these)
    t                        the step (0..27)
    prefix                   the actions played before t; replaying them reproduces the exact state
    episode, source          "condition/split/seed" and the agent that played it

Every episode is replayed once while it is read: the recorded meters must come out of the env again,
so a file from another env version (or a hand-edited one) fails with ``path:line`` instead of training
on states that do not exist.

Subsampling is deterministic for a seed: ``every_k_steps`` keeps every k-th step of each episode from
a seeded per-episode offset (so a stride of 4 does not keep mornings only), then ``max_prompts`` keeps
a seeded random subset of that many.

Episode mode: one row per (episode, trained turn) with a placeholder prompt naming the episode and
turn; the real prompts are rendered as :mod:`rhythm.train.grpo` plays the week (see
:func:`episode_rows`).

    from rhythm.train.grpo.data import PromptOptions, build_prompts
    rows, report = build_prompts(["data/teacher_30ep.jsonl"], PromptOptions(every_k_steps=2, max_prompts=256))
"""

from __future__ import annotations

import random
import re
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from rhythm.agents.base import EpisodeSpec
from rhythm.agents.episodes import play, replay
from rhythm.agents.model import ModelAgent
from rhythm.env.constants import ACTION_INDEX, EPISODE_STEPS
from rhythm.errors import RhythmError
from rhythm.protocol import SYSTEM_PROMPT, format_ending, parse_reply, record_conversation
from rhythm.records import check_episode, check_trainable, read_episodes
from rhythm.seeds import parse_seeds
from rhythm.train.grpo.config import GRPORunConfig, has_rollouts, turns_per_week
from rhythm.train.run_folder import data_paths

METER_TOLERANCE = 1e-6
"""How far a recorded meter may sit from its replay (records store full float64 precision)."""


@dataclass(frozen=True)
class PromptOptions:
    """How recorded episodes become GRPO prompts (the data fields of ``GRPORunConfig``)."""

    every_k_steps: int = 1
    """Keep every k-th step of each episode (1 = all 28), from a seeded offset per episode."""
    max_prompts: int | None = None
    """At most this many prompts, a seeded random subset (None = all that every_k_steps kept)."""
    seed: int = 0
    """Seeds the per-episode offsets and the subset."""
    strip_reasoning: bool = False
    """Earlier replies in each prompt cut to their BELIEF/ACTION lines (match the SFT data's setting)."""


@dataclass
class PromptReport:
    """What was read and what became prompts (counts)."""

    files: list[str] = field(default_factory=list)
    episodes_read: int = 0
    steps_read: int = 0
    episodes_replayed: int = 0
    """Episodes whose recorded meters were reproduced by the env (all of them, or reading fails)."""
    prompts: int = 0
    episodes: int = 0
    """Distinct (condition, split, seed) among the prompts."""
    by_condition: dict[str, int] = field(default_factory=dict)
    by_source: dict[str, int] = field(default_factory=dict)
    trained: int | None = None
    """The prompts the trainer takes, after the mode's own cuts (branch: one of prompts that read alike; pairs: none
    at the last step; ``restore_only``); None: all of them."""

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)

    def summary_line(self) -> str:
        conds = ", ".join(f"{k} {v}" for k, v in sorted(self.by_condition.items()))
        return (
            f"prompts: {self.prompts} from {self.episodes} episodes ({conds})"
            + ("; " if self.trained in (None, self.prompts) else f", {self.trained} of them trained on; ")
            + f"read {self.episodes_read} episodes / {self.steps_read} steps, all replayed"
        )


def _identity(record: dict[str, Any]) -> tuple[str, str, int]:
    """(condition, split, seed) of a record that :func:`rhythm.records.check_episode` has passed."""
    return str(record["condition"]), str(record["split"]), int(record["seed"])


def replay_meters(condition: str, split: str, seed: int, actions: Sequence[str]) -> np.ndarray:
    """Meters after each action ``(len(actions), 5)``, replayed in the env (:func:`rhythm.agents.episodes.replay`)."""
    return replay(condition, split, [seed], np.array([[ACTION_INDEX[name] for name in actions]], dtype=np.int64)).meters[0]


def check_replay(record: dict[str, Any], where: str, actions: Sequence[str]) -> None:
    """Raise unless replaying ``actions`` reproduces every recorded ``meters`` of the record."""
    condition, split, seed = _identity(record)
    replayed = replay_meters(condition, split, seed, actions)
    for i, step in enumerate(record["steps"]):
        recorded = step.get("meters")
        if recorded is None:
            continue
        if len(recorded) != 5 or not np.allclose(np.asarray(recorded, dtype=np.float64), replayed[i], atol=METER_TOLERANCE, rtol=0):
            raise RhythmError(
                f"{where}: episode {condition}/{split}/{seed} does not replay (meters after step {i} differ); "
                "was it written by another env version? check it with rhythm reeval"
            )


def state_row(record: dict[str, Any], step: dict[str, Any], prefix: list[str], source: str,
              replies: list[str] | None = None, where: str = "record") -> dict[str, Any]:
    """One GRPO prompt: the conversation up to ``step`` and the identity of its state."""
    return {
        "prompt": record_conversation(record, int(step["t"]), replies=replies, where=where),
        "condition": str(record["condition"]),
        "split": str(record["split"]),
        "seed": int(record["seed"]),
        "t": int(step["t"]),
        "prefix": list(prefix),
        "episode": f"{record['condition']}/{record['split']}/{record['seed']}",
        "source": source,
    }


def _offset(options: PromptOptions, episode: str, source: str) -> int:
    if options.every_k_steps <= 1:
        return 0
    return random.Random(f"{options.seed}|{source}|{episode}").randrange(options.every_k_steps)


def record_rows(record: dict[str, Any], where: str, options: PromptOptions, report: PromptReport | None = None) -> list[dict[str, Any]]:
    """The prompts of one episode record (checked by :func:`rhythm.records.check_episode`; replayed first)."""
    actions = [step["action"] for step in record["steps"]]
    check_replay(record, where, actions)
    source = str(record.get("agent") or "unknown")
    episode = f"{record['condition']}/{record['split']}/{record['seed']}"
    offset = _offset(options, episode, source)
    replies = None
    if options.strip_reasoning:
        replies = [format_ending(parse_reply(s["response"]).belief, s["action"]) for s in record["steps"]]  # as played
    rows = []
    for i, step in enumerate(record["steps"]):
        if options.every_k_steps > 1 and i % options.every_k_steps != offset:
            continue
        observation = step["observation"]
        if not isinstance(observation, str) or not observation.strip():
            raise RhythmError(f"{where}: step {i} has no observation text")
        rows.append(state_row(record, step, actions[:i], source, replies, where))
    if report is not None:
        report.episodes_read += 1
        report.steps_read += len(record["steps"])
        report.episodes_replayed += 1
    return rows


def subsample(rows: list[dict[str, Any]], max_prompts: int | None, seed: int) -> list[dict[str, Any]]:
    """At most ``max_prompts`` rows, a seeded random subset kept in its original order."""
    if max_prompts is None or len(rows) <= max_prompts:
        return rows
    keep = sorted(random.Random(seed).sample(range(len(rows)), max_prompts))
    return [rows[i] for i in keep]


def _finish(rows: list[dict[str, Any]], report: PromptReport) -> tuple[list[dict[str, Any]], PromptReport]:
    report.prompts = len(rows)
    report.episodes = len({r["episode"] for r in rows})
    report.by_condition = dict(sorted(Counter(r["condition"] for r in rows).items()))
    report.by_source = dict(sorted(Counter(r["source"] for r in rows).items()))
    if not rows:
        raise RhythmError(f"no GRPO prompts from {', '.join(report.files) or 'the given episodes'}")
    return rows, report


Read = list[tuple[str, dict[str, Any]]]
"""Episodes already read from files: ``("path:line", record)`` pairs (:func:`read_data`)."""


def read_data(paths: str | Sequence[str]) -> Read:
    """Every episode of ``paths`` (files or ``-``), validated, as ``("path:line", record)``: read once, so a run
    that builds its prompts and its probe from the same data reads stdin once."""
    paths = [paths] if isinstance(paths, str) else list(paths)
    if sum(1 for p in paths if str(p) == "-") > 1:
        raise RhythmError("stdin (-) can be read only once")
    read = [pair for path in paths for pair in read_episodes(path)]
    for where, record in read:
        check_trainable(record, where)
    return read


def build_prompts(
    paths: str | Sequence[str],
    options: PromptOptions = PromptOptions(),
    extra_records: Iterable[dict[str, Any]] = (),
    read: Read | None = None,
) -> tuple[list[dict[str, Any]], PromptReport]:
    """Prompts from episode files (``-`` = stdin; ``read``: their episodes, already read) and ``extra_records``
    (e.g. student rollouts).

    ``max_prompts`` applies to the union. A bad record raises :class:`RhythmError` naming ``file:line``.
    """
    paths = [paths] if isinstance(paths, str) else list(paths)
    read = read_data(paths) if read is None else read
    if options.every_k_steps < 1:
        raise RhythmError(f"every_k_steps must be >= 1, got {options.every_k_steps}")
    if options.max_prompts is not None and options.max_prompts < 1:
        raise RhythmError(f"max_prompts must be >= 1 (or null), got {options.max_prompts}")
    report = PromptReport(files=[str(p) for p in paths])
    rows: list[dict[str, Any]] = []
    for where, record in read:
        rows.extend(record_rows(record, where, options, report))
    for i, record in enumerate(extra_records):  # the student's own weeks, read from no file: checked as files are
        rows.extend(record_rows(check_episode(record, f"<rollout {i}>"), f"<rollout {i}>", options, report))
    return _finish(subsample(rows, options.max_prompts, options.seed), report)


# ------------------------------------------------------------------------------ student rollouts


def student_rollouts(model: str, specs: Sequence[Any], model_options: Any = None, progress=None) -> list[dict[str, Any]]:
    """The student plays ``specs`` (train-split :class:`~rhythm.agents.base.EpisodeSpec`) as eval plays it.

    ``model`` is what ``rhythm eval --agent model:PATH`` takes (an adapter dir, a model dir, a Hub id).
    Returns episode records (dicts), ready for :func:`build_prompts` ``extra_records``.
    """
    bad = [s for s in specs if s.split != "train"]
    if bad:
        raise RhythmError("student rollouts play train-split seeds only (eval seeds are for rhythm eval)")
    agent = ModelAgent(model, model_options)
    try:
        records = play(agent, list(specs), progress=progress)
    finally:
        del agent
    return [r.to_dict() for r in records]


# ---------------------------------------------------------------------------------- episode mode

_PLACEHOLDER = re.compile(r"^\[rhythm episode (?P<condition>[a-z-]+)/(?P<split>[a-z]+)/(?P<seed>\d+), turn (?P<t>\d+)\]")


def placeholder_prompt(condition: str, split: str, seed: int, t: int) -> list[dict[str, str]]:
    """The dataset prompt of an episode-mode row: it names the episode and turn; the observation the
    student actually sees is rendered while the week is played."""
    return [
        {"role": "system", "content": SYSTEM_PROMPT},
        {"role": "user", "content": f"[rhythm episode {condition}/{split}/{seed}, turn {t}] (rendered as the week is played)"},
    ]


def parse_placeholder(prompt: Any) -> tuple[str, str, int, int]:
    """``(condition, split, seed, t)`` of an episode-mode prompt (as TRL hands it to the rollout)."""
    text = prompt[-1]["content"] if isinstance(prompt, list) and prompt else str(prompt)
    m = _PLACEHOLDER.match(text if isinstance(text, str) else "")
    if not m:
        raise ValueError(f"not an episode-mode prompt: {str(text)[:80]!r}")
    return m["condition"], m["split"], int(m["seed"]), int(m["t"])


def episode_keys(paths: str | Sequence[str], extra_records: Iterable[dict[str, Any]] = (),
                 read: Read | None = None) -> tuple[list[tuple[str, str, int]], PromptReport]:
    """The distinct (condition, split, seed) of the episodes in ``paths`` (``read``: already read) and
    ``extra_records``, in first-seen order."""
    paths = [paths] if isinstance(paths, str) else list(paths)
    read = read_data(paths) if read is None else read
    report = PromptReport(files=[str(p) for p in paths])
    seen: dict[tuple[str, str, int], None] = {}

    def add(record: dict[str, Any]) -> None:
        seen[_identity(record)] = None
        report.episodes_read += 1
        report.steps_read += len(record["steps"])

    for _, record in read:
        add(record)
    for i, record in enumerate(extra_records):
        add(check_episode(record, f"<rollout {i}>"))
    return list(seen), report


def episode_rows(
    keys: Sequence[tuple[str, str, int]],
    *,
    every_k_turns: int = 1,
    max_episodes: int | None = None,
    seed: int = 0,
    report: PromptReport | None = None,
) -> list[dict[str, Any]]:
    """Episode-mode rows: for each person (seeded order, at most ``max_episodes``), one row per trained
    turn ``t = 0, k, 2k, ...``, consecutive, so a generation batch holds whole weeks.

    Every turn of a week is played by the student; ``every_k_turns`` only chooses which turns the loss
    sees (fewer tokens per optimizer step, the same weeks).
    """
    if every_k_turns < 1:
        raise RhythmError(f"episode.every_k_turns must be >= 1, got {every_k_turns}")
    if max_episodes is not None and max_episodes < 1:
        raise RhythmError(f"episode.max_episodes must be >= 1 (or null), got {max_episodes}")
    order = list(keys)
    random.Random(seed).shuffle(order)
    if max_episodes is not None:
        order = order[:max_episodes]
    rows = []
    for condition, split, s in order:
        for t in range(0, EPISODE_STEPS, every_k_turns):
            rows.append({
                "prompt": placeholder_prompt(condition, split, s, t),
                "condition": condition, "split": split, "seed": s, "t": t,
                "prefix": [],  # replaced by the played week's actions before rewards are computed
                "episode": f"{condition}/{split}/{s}", "source": "student-week",
            })
    if report is not None:
        _finish(rows, report)
    return rows


# ------------------------------------------------------------------------------- a run's rows


def rollout_specs(cfg: GRPORunConfig) -> list[Any]:
    if not has_rollouts(cfg):
        return []
    seeds = parse_seeds(str(cfg.rollout_seeds))
    return [EpisodeSpec(c, "train", s) for c in cfg.rollout_conditions for s in seeds]


def build_rows(cfg: GRPORunConfig, student_records: Sequence[dict[str, Any]] = (),
               read: Read | None = None) -> tuple[list[dict[str, Any]], Any]:
    """The training rows of either mode and their report (pure Python, no torch); ``read``: the data's episodes,
    when already read (:func:`read_data`)."""
    paths = data_paths(cfg)
    if cfg.mode in ("step", "branch"):
        step = cfg.step
        return build_prompts(paths, PromptOptions(step.every_k_steps, step.max_prompts, cfg.seed, step.strip_reasoning),
                             student_records, read)
    keys, report = episode_keys(paths, student_records, read)
    episode = cfg.episode
    rows = episode_rows(keys, every_k_turns=episode.every_k_turns, max_episodes=episode.max_episodes, seed=cfg.seed, report=report)
    people = len(rows) // turns_per_week(cfg)
    if people < episode.episodes_per_step:
        raise RhythmError(f"episode.episodes_per_step is {episode.episodes_per_step} but the data names only {people} people")
    return rows, report
