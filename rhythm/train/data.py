"""SFT data: teacher episodes (JSONL files or ``-``) become examples, one whole week each: the system prompt,
then each step's observation and the teacher's reply (protocol v2, :func:`rhythm.protocol.record_conversation`).
Train and validation are split **by person**; each week is rendered and tokenized once, as TRL would, with a loss
weight per token. What is left out, and why, is counted in a :class:`DataReport`; other protocols are refused.

    rows, report = build_examples(["data/teacher_30ep.jsonl"], DataOptions(val_fraction=0.1, min_score=0.5))
    examples = tokenize_examples(rows, tokenizer, max_length=1536, report=report)
"""

from __future__ import annotations

import math
import random
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from rhythm.env.constants import ACTIONS
from rhythm.env.render import ECHOED_ACTION
from rhythm.errors import RhythmError
from rhythm.protocol import format_ending, parse_reply, record_conversation
from rhythm.records import check_protocol, check_trainable, read_episodes

# Why an episode is left out (the keys of DataReport.dropped_*).
BELOW_MIN_SCORE = "episode final_score below min_score"
PARSE_FAILURE = "a reply has no valid ACTION (parse_ok false)"
EMPTY_REPLY = "an empty reply"
NO_BELIEF = "a reply has no valid BELIEF line (strip_reasoning keeps only the two protocol lines)"
TOO_LONG = "longer than max_length tokens (truncation would drop the last turns' loss)"


@dataclass(frozen=True)
class DataOptions:
    """How episodes become examples: the data fields of ``SFTRunConfig``, which documents them."""

    val_fraction: float = 0.1
    seed: int = 0
    min_score: float | None = None
    strip_reasoning: bool = False
    drop_parse_failures: bool = True
    first_turns: int | None = None


@dataclass
class DataReport:
    """What was read, what was kept, what was dropped and why (counts)."""

    files: list[str] = field(default_factory=list)
    episodes_read: int = 0
    steps_read: int = 0
    episodes_kept: int = 0
    """people (condition/split/seed) with a week kept: the unit of the train / validation split"""
    train_episodes: int = 0
    validation_episodes: int = 0
    train_examples: int = 0
    validation_examples: int = 0
    dropped_episodes: dict[str, int] = field(default_factory=dict)
    """reason -> episodes left out whole"""
    dropped_steps: dict[str, int] = field(default_factory=dict)
    """reason -> steps left out (the steps of dropped episodes, up to ``first_turns``)"""
    steps_past_first_turns: int = 0
    """Steps after each week's first ``first_turns``, which the curriculum stage leaves out of every week."""
    max_tokens: int = 0
    """Tokens of the longest rendered week (set once a tokenizer has seen the data)."""

    def drop_episode(self, reason: str, steps: int) -> None:
        self.dropped_episodes[reason] = self.dropped_episodes.get(reason, 0) + 1
        self.dropped_steps[reason] = self.dropped_steps.get(reason, 0) + steps

    def count(self, rows: dict[str, list[dict[str, Any]]]) -> None:
        """The example and episode counts of ``{"train": [...], "validation": [...]}``."""
        train, validation = rows.get("train", []), rows.get("validation", [])
        self.train_examples, self.validation_examples = len(train), len(validation)
        self.train_episodes, self.validation_episodes = (len({e["episode"] for e in r}) for r in (train, validation))
        self.episodes_kept = self.train_episodes + self.validation_episodes

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)

    def summary_line(self) -> str:
        dropped = sum(self.dropped_episodes.values())
        why = "; ".join(f"{n} {r}" for r, n in sorted(self.dropped_episodes.items())) or "none"
        twice = Counter(self.files)  # a file named n times is read n times (the DAgger stage's copies): said, not hidden
        repeats = "".join(f"; {f} read {n} times (its weeks weigh {n}x)" for f, n in twice.items() if n > 1)
        cut = f"; {self.steps_past_first_turns} steps past first_turns left out" if self.steps_past_first_turns else ""
        return (f"data: {self.episodes_read} episodes / {self.steps_read} steps read{repeats}{cut}; "
                f"train {self.train_examples} whole-week examples, validation {self.validation_examples}; "
                f"dropped {dropped} episodes ({why})")


def week_replies(steps: list[dict[str, Any]], options: DataOptions, where: str) -> tuple[list[str], str | None]:
    """The assistant turns of one episode, or the reason it is left out."""
    replies = []
    for i, step in enumerate(steps):
        observation, response = step["observation"], step["response"]
        if not isinstance(observation, str) or not observation.strip():
            raise RhythmError(f"{where}: step {i} has no observation text")
        if not isinstance(response, str):
            raise RhythmError(f"{where}: step {i} response is not text")
        if not response.strip():
            return [], EMPTY_REPLY
        parsed = parse_reply(response)
        ok = step.get("parse_ok", parsed.ok)
        if not isinstance(ok, bool):
            raise RhythmError(f"{where}: step {i} parse_ok must be true or false, got {ok!r}")
        if (options.drop_parse_failures and not ok) or (options.strip_reasoning and not parsed.ok):
            return [], PARSE_FAILURE
        if options.strip_reasoning and parsed.belief is None:
            return [], NO_BELIEF
        # the reply's own action: the label, which rhythm relabel's restore rule sets apart from the action played
        replies.append(format_ending(parsed.belief, ACTIONS[parsed.action]) if options.strip_reasoning else response)
    return replies, None


def final_score(record: dict[str, Any], where: str) -> float:
    """The record's ``score.final_score``, or a :class:`RhythmError` naming ``where``."""
    score = record.get("score")
    value = score.get("final_score") if isinstance(score, dict) else None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise RhythmError(f"{where}: score.final_score is missing or not a number; min_score needs it")
    return float(value)


def split_episodes(keys: Sequence[str], val_fraction: float, seed: int) -> tuple[set[str], set[str]]:
    """Split episode keys into (train, validation), a seeded shuffle of the sorted keys: at least one episode goes
    to validation when ``val_fraction > 0`` and there are two or more, and at least one always stays in train."""
    if not 0.0 <= val_fraction < 1.0:
        raise RhythmError(f"val_fraction must be in [0, 1), got {val_fraction}")
    ordered = sorted(set(keys))
    random.Random(seed).shuffle(ordered)
    n_val = 0
    if val_fraction > 0 and len(ordered) >= 2:
        n_val = min(len(ordered) - 1, max(1, round(val_fraction * len(ordered))))
    return set(ordered[n_val:]), set(ordered[:n_val])


def build_examples(
    paths: str | Sequence[str], options: DataOptions = DataOptions()
) -> tuple[dict[str, list[dict[str, Any]]], DataReport]:
    """Read episodes from ``paths`` (files or ``-``) and return ``({"train": [...], "validation": [...]}, report)``.

    A record that lacks what it needs raises :class:`RhythmError` naming ``file:line``.
    """
    paths = [paths] if isinstance(paths, str) else list(paths)
    if not paths:
        raise RhythmError("no data files given")
    if sum(1 for p in paths if str(p) == "-") > 1:
        raise RhythmError("stdin (-) can be read only once")
    report = DataReport(files=[str(p) for p in paths])
    by_episode: dict[str, list[dict[str, Any]]] = {}
    people: set[str] = set()  # every person read: the split is drawn over them, before any filter
    for path in paths:
        for where, record in read_episodes(path):
            check_protocol(record, where)  # before any filter, so a v1 file is never silently thinned
            check_trainable(record, where)
            report.episodes_read += 1
            # The person, not the file, is the unit of the split: the same (condition, split, seed) played
            # by two teachers must not land on both sides.
            episode = f"{record['condition']}/{record['split']}/{record['seed']}"
            people.add(episode)
            steps = record["steps"]
            report.steps_read += len(steps)
            if options.first_turns is not None:
                report.steps_past_first_turns += max(0, len(steps) - options.first_turns)
                steps = steps[: options.first_turns]
                record = {**record, "steps": steps}
            if any(step.get("explored") for step in steps):
                raise RhythmError(f"{where}: explored steps train with python benchmarks/dagger_probe.py sft, which "
                                  "keeps their ACTION lines out of the loss")
            if options.min_score is not None and final_score(record, where) < options.min_score:
                report.drop_episode(BELOW_MIN_SCORE, len(steps))
                continue
            replies, reason = week_replies(steps, options, where)
            if reason is not None:
                report.drop_episode(reason, len(steps))
                continue
            rows = by_episode.setdefault(episode, [])
            messages = record_conversation(record, include_reply=True, replies=replies, where=where)
            rows.append({"messages": messages, "episode": episode, "condition": str(record["condition"]),
                         "split": str(record["split"]), "seed": int(record["seed"]), "agent": str(record["agent"])})
    # drawn over every person read, so runs that differ only in a filter (min_score, drop_parse_failures) validate
    # on the same people, less those the filter left out
    _, val_keys = split_episodes(list(people), options.val_fraction, options.seed)
    out: dict[str, list[dict[str, Any]]] = {"train": [], "validation": []}
    for episode in sorted(by_episode):
        out["validation" if episode in val_keys else "train"].extend(by_episode[episode])
    report.count(out)
    if not out["train"]:
        raise RhythmError(f"no training examples left in {', '.join(report.files)} ({report.summary_line()})")
    return out, report


def tokenize_examples(
    rows: dict[str, list[dict[str, Any]]], tokenizer, max_length: int | None, report: DataReport, chunk: int = 256,
    observation_loss: float = 0.0, echo_loss: float | None = None,
) -> dict[str, list[dict[str, Any]]]:
    """Render and tokenize every week once, in batches, as TRL would (it then skips its own preparation), adding
    ``input_ids``, ``labels``, ``loss_weights`` (:func:`week_weights`) and ``reply_mask`` (the replies' tokens, which
    the reply-only metrics read). A week over ``max_length`` tokens is left
    out and counted (TRL's truncation would cut its last turns' loss); the report records the longest week."""
    template = training_template(tokenizer)
    echo = echo_loss is not None and echo_loss != observation_loss
    out: dict[str, list[dict[str, Any]]] = {}
    for name, examples in rows.items():
        kept = []
        for i in range(0, len(examples), chunk):
            batch = examples[i : i + chunk]
            enc = render_weeks(batch, tokenizer, template, offsets=echo)
            echoes = map(echo_tokens, enc["text"], enc["offset_mapping"]) if echo else [None] * len(batch)
            for example, ids, mask, echoed in zip(batch, enc["input_ids"], enc["assistant_masks"], echoes, strict=True):
                report.max_tokens = max(report.max_tokens, len(ids))
                if max_length is not None and len(ids) > max_length:
                    report.drop_episode(TOO_LONG, sum(m["role"] == "assistant" for m in example["messages"]))
                    continue
                if not any(mask):
                    raise RhythmError(f"episode {example['episode']}: no assistant tokens in the rendered chat (the "
                                      "chat template needs {% generation %} markers for assistant-only loss)")
                weights = week_weights(mask, observation_loss, echoed, echo_loss)
                labels = [t if w > 0 else -100 for t, w in zip(ids, weights, strict=True)]
                kept.append({**example, "input_ids": ids, "labels": labels, "loss_weights": weights, "reply_mask": list(mask)})
        out[name] = kept
    report.count(out)
    if report.train_examples == 0:
        raise RhythmError(f"every training week is longer than max_length={max_length} tokens "
                          f"(the longest is {report.max_tokens}); raise max_length")
    return out


def training_template(tokenizer) -> str | None:
    """What ``SFTTrainer`` renders with under ``assistant_only_loss``: None (the tokenizer's own template) when it
    has ``{% generation %}`` markers, else TRL's training template for that model family."""
    from trl.chat_template_utils import get_training_chat_template, has_generation_markers

    return None if has_generation_markers(tokenizer.chat_template) else get_training_chat_template(tokenizer)


def week_weights(assistant_mask: Sequence[int], observation_loss: float,
                 echo_mask: Sequence[int] | None = None, echo_loss: float | None = None) -> list[float]:
    """The loss weight of each token of a week: 1 in the replies, ``echo_loss`` on the action names the
    observations echo (``echo_mask``; None: as the rest), ``observation_loss`` on everything else."""
    echo_mask = echo_mask if echo_loss is not None and echo_mask is not None else [0] * len(assistant_mask)
    return [1.0 if m else float(echo_loss if e else observation_loss) for m, e in zip(assistant_mask, echo_mask, strict=True)]


def span_tokens(offsets: Sequence[tuple[int, int]], spans: Iterable[tuple[int, int]]) -> list[int]:
    """1 for each token (given by its character ``offsets``) that overlaps one of the character ``spans``, else 0."""
    import numpy as np

    starts, ends = np.asarray(offsets, dtype=np.int64).reshape(-1, 2).T
    mask = np.zeros(len(starts), dtype=bool)
    for s, e in spans:
        mask |= (starts < e) & (s < ends)
    return mask.astype(int).tolist()


def echo_tokens(text: str, offsets: Sequence[tuple[int, int]]) -> list[int]:
    """1 for each token (given by its character ``offsets`` in ``text``) that overlaps the action name an
    observation echoes (``After DEEP_WORK:``), else 0."""
    return span_tokens(offsets, (m.span(1) for m in ECHOED_ACTION.finditer(text)))


def render_weeks(batch: list[dict[str, Any]], tokenizer, template: str | None, offsets: bool = False) -> dict[str, list]:
    """Each week rendered and tokenized once, as TRL would: ``input_ids`` and ``assistant_masks``; with ``offsets``
    also its ``text`` and its tokens' character ``offset_mapping`` (a fast tokenizer's, from the same call), for loss
    weights placed on the text."""
    if offsets and not getattr(tokenizer, "is_fast", False):
        raise RhythmError("loss weights placed on the text (echo_loss) need a fast tokenizer (character offsets)")
    messages = [e["messages"] for e in batch]
    enc = tokenizer.apply_chat_template(messages, chat_template=template, tokenize=True, return_dict=True,
                                        return_assistant_tokens_mask=True,
                                        tokenizer_kwargs={"return_offsets_mapping": True} if offsets else None)
    if offsets:
        enc["text"] = tokenizer.apply_chat_template(messages, chat_template=template, tokenize=False)
    return enc
