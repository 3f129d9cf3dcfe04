"""The text protocol every language model speaks: system prompt, user message, reply format, parser.

A reply is free reasoning that ends with two lines::

    BELIEF: S=0.30 M=0.70 W=0.55
    ACTION: DEEP_WORK

:func:`parse_reply` takes the last valid ``ACTION`` and the last valid ``BELIEF`` line anywhere in the
reply, tolerates case, spacing, markdown emphasis (``**ACTION:** `deep work```) and extra text, and
never raises. A reply with no valid action gets ``FALLBACK_ACTION`` and counts as a parse failure.
Teacher data, SFT examples, GRPO prompts and eval all go through this module.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Final

from rhythm.env.constants import ACTION_INDEX, ACTIONS, BELIEF_DIMS

FALLBACK_ACTION: Final[str] = "LEISURE"
"""Played when a reply names no valid action: mild and never harmful, so a parse failure costs the
score of a wasted slot rather than a crash."""

SYSTEM_PROMPT: Final[str] = f"""\
You manage one week of a person whose personality is hidden: 7 days x 4 slots (morning, afternoon, \
evening, night), 28 steps. Each step you choose one activity for them.
Five meters in [0, 1] respond: vitality (V), cognition (C), progress (P), serenity (S), connection (N). \
Each observation shows the meters, the last change, and the anomaly: the change minus what a neutral \
person would have shown. Anomalies reveal who the person is.
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
_ACTION_LINE = re.compile(r"\baction\s*[:=]\s*(.*)", re.IGNORECASE)
_BELIEF_LINE = re.compile(r"\bbelief\s*[:=]?\s*(.*)", re.IGNORECASE)
_BELIEF_ITEM = re.compile(r"\b([smw])\s*[:=]\s*(\d*\.?\d+)", re.IGNORECASE)
_SEPARATORS = re.compile(r"[\s\-]+")
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


def user_message(observation_text: str) -> str:
    """The user turn for one step (the observation text, as the env renders it)."""
    return observation_text


def chat_messages(observation_text: str) -> list[dict[str, str]]:
    """System + user messages of one step, in the chat format every model client takes."""
    return [
        {"role": "system", "content": SYSTEM_PROMPT},
        {"role": "user", "content": user_message(observation_text)},
    ]


def format_belief(belief: tuple[float, float, float] | list[float]) -> str:
    return "BELIEF: " + " ".join(f"{d}={min(1.0, max(0.0, float(v))):.2f}" for d, v in zip(BELIEF_DIMS, belief))


def format_ending(belief: tuple[float, float, float] | list[float] | None, action: int | str) -> str:
    """The two closing lines of a reply (just the action line when there is no belief)."""
    name = action if isinstance(action, str) else ACTIONS[action]
    lines = [format_belief(belief)] if belief is not None else []
    return "\n".join([*lines, f"ACTION: {name}"])


def _match_action(raw: str) -> int | None:
    token = _SEPARATORS.sub("_", raw.strip().upper()).strip("_.,;:!?\"'()[]{}")
    for name in _ACTIONS_LONGEST_FIRST:
        if token == name or token.startswith(name + "_") or token.startswith(name + "."):
            return ACTION_INDEX[name]
    return None


def _match_belief(raw: str) -> tuple[float, float, float] | None:
    found: dict[str, float] = {}
    for key, value in _BELIEF_ITEM.findall(raw):
        try:
            v = float(value)
        except ValueError:  # pragma: no cover - the pattern only admits numbers
            continue
        if math.isfinite(v):
            found[key.upper()] = min(1.0, max(0.0, v))
    if all(d in found for d in BELIEF_DIMS):
        return (found["S"], found["M"], found["W"])
    return None


def parse_reply(text: object) -> ParsedReply:
    """Parse a model's reply; never raises. The last valid ACTION and BELIEF lines win."""
    if not isinstance(text, str):
        text = "" if text is None else str(text)
    action: int | None = None
    belief: tuple[float, float, float] | None = None
    for line in reversed(text.splitlines()):
        clean = _DECORATION.sub(" ", line)
        if action is None:
            m = _ACTION_LINE.search(clean)
            if m:
                action = _match_action(m.group(1))
        if belief is None:
            m = _BELIEF_LINE.search(clean)
            if m:
                belief = _match_belief(m.group(1))
        if action is not None and belief is not None:
            break
    if action is None:
        return ParsedReply(ACTION_INDEX[FALLBACK_ACTION], belief, False)
    return ParsedReply(action, belief, True)
