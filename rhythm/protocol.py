"""The text protocol every language model speaks: system prompt, user message, reply format, parser.

Protocol v2: one episode is one conversation. The system prompt comes once; each step is a user turn
with that step's observation (:func:`rhythm.env.render.render_observation`) and the agent's reply, and
every earlier turn stays in context, so a belief can be *updated* rather than guessed.
:func:`conversation` builds it from observations and replies, and :func:`record_conversation` from a
stored episode up to step ``t``: SFT data, GRPO prompts, model eval and LLM agents all go through them.

A reply is free reasoning that ends with two lines::

    BELIEF: S=0.30 M=0.70 W=0.55
    ACTION: DEEP_WORK

:func:`parse_reply` takes the last valid ``ACTION`` and the last valid ``BELIEF`` line anywhere in the
reply (the last on a line that names two), tolerates case, spacing, markdown emphasis (``**ACTION:** `deep work```),
punctuation and text after the action (``ACTION: SLEEP, it is night``), percentages (``S=30%`` is 0.30), decimal
commas (``S=0,30``) and fractions (``S=1/3``), and never raises. A reply with no valid action gets
``FALLBACK_ACTION`` and counts as a parse failure. Teacher data, SFT examples, GRPO prompts and eval
all go through this module.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final

from rhythm.env.constants import ACTION_INDEX, ACTIONS, BELIEF_DIMS, PROTOCOL_VERSION
from rhythm.records import check_protocol

__all__ = ["PROTOCOL_VERSION", "conversation", "record_conversation", "parse_reply"]

FALLBACK_ACTION: Final[str] = "LEISURE"
"""Played when a reply names no valid action: mild and never harmful, so a parse failure costs the
score of a wasted slot rather than a crash."""

SYSTEM_PROMPT: Final[str] = f"""\
You manage one week of a person whose personality is hidden: 7 days x 4 slots (morning, afternoon, \
evening, night), 28 steps, Mon morning to Sun night. Each step you choose one activity for them.
Five meters in [0, 1] respond: vitality (V), cognition (C), progress (P), serenity (S), connection (N). \
Each step shows the meters (in the order V C P S N), the last action, its change of each meter, and the \
anomaly: the change minus what a neutral person would have shown. Anomalies reveal who the person is; \
earlier steps stay in this conversation, so weigh all the evidence so far.
Actions: {", ".join(ACTIONS)}. Work (DEEP_WORK, ADMIN, LEARN) makes progress and costs energy; \
SOCIALIZE and FAMILY_TIME build connection; SLEEP restores most at night, and a night without sleep hurts.
Goal: raise the person's meters over the week, weighted by what this person values. A meter below \
0.10 is a crash and costs reward.
Belief: three numbers in [0, 1]. S (social): 0 = company drains and unsettles them, 1 = it recharges \
and calms them. M (morning): 0 = sharpest in the evening, 1 = sharpest in the morning. W (work): \
0 = work drains and stresses them, 1 = work energises and satisfies them and progress matters most.
Reply: reason briefly about the anomalies, then end with exactly two lines:
BELIEF: S=<0-1> M=<0-1> W=<0-1>
ACTION: <one action name>"""

FORMAT_REMINDER: Final[str] = (
    "Your reply did not end with a valid action. End with exactly two lines:\n"
    "BELIEF: S=<0-1> M=<0-1> W=<0-1>\nACTION: <one of " + ", ".join(ACTIONS) + ">"
)

_DECORATION = re.compile(r"[*`#>|~]+|(?<![A-Za-z])_+|_+(?![A-Za-z])")
_ACTION_LINE = re.compile(r"\baction\s*[:=\uff1a]\s*(.*)", re.IGNORECASE)
_ACTION_LABEL = re.compile(r"\baction\s*[:=\uff1a]\s*", re.IGNORECASE)
_BELIEF_LINE = re.compile(r"\bbelief\s*[:=]?\s*(.*)", re.IGNORECASE)
_NUMBER = r"[+-]?(?:\d+(?:[.,]\d+)?|[.,]\d+)(?:[eE][+-]?\d+)?"  # a decimal comma too: S=0,30 is 0.30, not 0; 3e-1 is 0.3, not 3
_BELIEF_ITEM = re.compile(rf"\b([smw])\s*[:=]\s*({_NUMBER})(?:\s*/\s*({_NUMBER}))?(\s*%)?", re.IGNORECASE)
_SEPARATORS = re.compile(r"[\s\-\u2010-\u2015]+")
_ACTIONS_LONGEST_FIRST = sorted(ACTIONS, key=len, reverse=True)


@dataclass(frozen=True)
class ParsedReply:
    """What a reply said. ``action`` is the fallback index when ``ok`` is False."""

    action: int
    belief: tuple[float, float, float] | None
    ok: bool

    @property
    def action_name(self) -> str:
        return ACTIONS[self.action]


def conversation(
    observations: Sequence[str], replies: Sequence[str] = (), *, max_turns: int | None = None
) -> list[dict[str, str]]:
    """The chat of one episode so far: the system prompt, then each step's observation and reply.

    With as many replies as observations the chat ends on the assistant (an SFT example); with one
    fewer it ends on the current observation (the prompt of the next reply). ``max_turns`` keeps only
    the last K steps (for API cost); the system prompt always stays.
    """
    if len(replies) not in (len(observations), len(observations) - 1):
        raise ValueError(f"{len(observations)} observations need {len(observations) - 1} or {len(observations)} replies, got {len(replies)}")
    if max_turns is not None and max_turns < 1:
        raise ValueError(f"max_turns must be >= 1 or None, got {max_turns}")
    first = 0 if max_turns is None else max(0, len(observations) - max_turns)
    messages = [{"role": "system", "content": SYSTEM_PROMPT}]
    for i in range(first, len(observations)):
        messages.append({"role": "user", "content": observations[i]})
        if i < len(replies):
            messages.append({"role": "assistant", "content": replies[i]})
    return messages


def record_conversation(
    record: dict[str, Any],
    t: int | None = None,
    *,
    include_reply: bool = False,
    replies: Sequence[str] | None = None,
    max_turns: int | None = None,
    where: str = "record",
) -> list[dict[str, str]]:
    """A stored episode (a JSONL record) as its conversation up to step ``t`` (default: the last step).

    Without ``include_reply`` it ends on step ``t``'s observation: what the agent saw when it replied.
    ``replies`` replaces the recorded responses (e.g. the protocol lines alone). A record written under
    another protocol version raises one line naming ``where``.
    """
    check_protocol(record, where)
    steps = record["steps"]
    last = len(steps) - 1 if t is None else t
    if not 0 <= last < len(steps):
        raise ValueError(f"{where}: step {t} is outside the episode's {len(steps)} steps")
    said = [s["response"] for s in steps] if replies is None else list(replies)
    observations = [s["observation"] for s in steps[: last + 1]]
    return conversation(observations, said[: last + 1 if include_reply else last], max_turns=max_turns)


def format_belief(belief: tuple[float, float, float] | list[float]) -> str:
    return "BELIEF: " + " ".join(f"{d}={min(1.0, max(0.0, float(v))):.2f}" for d, v in zip(BELIEF_DIMS, belief))


def format_ending(belief: tuple[float, float, float] | list[float] | None, action: int | str) -> str:
    """The two closing lines of a reply (just the action line when there is no belief)."""
    name = action if isinstance(action, str) else ACTIONS[action]
    lines = [format_belief(belief)] if belief is not None else []
    return "\n".join([*lines, f"ACTION: {name}"])


def _match_action(raw: str) -> int | None:
    """The action a line's text after ``ACTION:`` names: its first word, whatever punctuation or text follows
    (``SLEEP, it is night``, ``<SLEEP>``); a longer word (``SLEEPING``) names none."""
    token = _SEPARATORS.sub("_", raw.strip().upper()).strip("_.,;:!?\"'()[]{}<>\u200b")
    for name in _ACTIONS_LONGEST_FIRST:
        if token.startswith(name) and not token[len(name) : len(name) + 1].isalnum():
            return ACTION_INDEX[name]
    return None


def _line_action(line: str) -> int | None:
    """The last valid action a line names after an ``ACTION:`` label (a reply written on one line may name one
    earlier, ``Last action: SOCIALIZE ... ACTION: NAP``)."""
    for label in reversed(list(_ACTION_LABEL.finditer(line))):
        found = _match_action(line[label.end() :])
        if found is not None:
            return found
    return None


def _match_belief(raw: str) -> tuple[float, float, float] | None:
    found: dict[str, float] = {}
    for key, value, over, percent in _BELIEF_ITEM.findall(raw):
        try:  # S=30% is 0.30, not 30 clipped to 1; S=1/3 is 0.33, not 1
            v = float(value.replace(",", ".")) / (100 if percent else 1) / (float(over.replace(",", ".")) if over else 1)
        except (ValueError, ZeroDivisionError):
            continue
        if math.isfinite(v):  # clipped into [0, 1] on either side; the first value of each dimension counts
            found.setdefault(key.upper(), min(1.0, max(0.0, v)))
    if all(d in found for d in BELIEF_DIMS):
        return (found["S"], found["M"], found["W"])
    return None


def action_line_start(text: str) -> int | None:
    """Where a reply's last ACTION line starts (a character offset into ``text``), None when no line names one.
    The one definition of "the action line": a cut or unknown action counts, since it is what the reply played
    (the fallback). :func:`before_action` drops it; branch mode's loss judges it (``decision_mask``)."""
    start, found = 0, None
    for line in text.splitlines(keepends=True):
        if _ACTION_LINE.search(_DECORATION.sub(" ", line)):
            found = start
        start += len(line)
    return found


def before_action(text: str) -> str:
    """What a reply says before its last ACTION line (its reasoning and belief), the whole reply when it has none:
    the part an action follows, which a comparison of actions after the same reasoning keeps."""
    start = action_line_start(text)
    return (text if start is None else text[:start]).strip()


def parse_reply(text: object) -> ParsedReply:
    """Parse a model's reply; never raises. The last valid ACTION and BELIEF lines win."""
    if not isinstance(text, str):
        text = "" if text is None else str(text)
    action: int | None = None
    belief: tuple[float, float, float] | None = None
    for line in reversed(text.splitlines()):
        clean = _DECORATION.sub(" ", line)
        if action is None:
            action = _line_action(clean)
        if belief is None:
            m = _BELIEF_LINE.search(clean)
            if m:
                belief = _match_belief(m.group(1))
        if action is not None and belief is not None:
            break
    if action is None:
        return ParsedReply(ACTION_INDEX[FALLBACK_ACTION], belief, False)
    return ParsedReply(action, belief, True)
