"""Names, sizes and versions of the RhythmEnv benchmark: the vocabulary every other module shares.

Changing anything here that alters trajectories or scores requires bumping ``ENV_VERSION``.
"""

from __future__ import annotations

from typing import Final

ENV_VERSION: Final[str] = "rhythm-v1"
"""Recorded in every output. Bumped whenever dynamics, profiles, noise or reward change."""

PROTOCOL_VERSION: Final[int] = 2
"""The text protocol (observation text, conversation layout, reply format), recorded in every output.
v1 showed each step alone with a 5-transition history; v2 makes one episode one conversation."""

METERS: Final[tuple[str, ...]] = ("vitality", "cognition", "progress", "serenity", "connection")
METER_ABBREV: Final[tuple[str, ...]] = ("V", "C", "P", "S", "N")
V, C, P, S, N = range(5)
N_METERS: Final[int] = len(METERS)

ACTIONS: Final[tuple[str, ...]] = (
    "DEEP_WORK",
    "ADMIN",
    "LEARN",
    "EXERCISE",
    "SOCIALIZE",
    "FAMILY_TIME",
    "MEDITATE",
    "LEISURE",
    "NAP",
    "SLEEP",
)
N_ACTIONS: Final[int] = len(ACTIONS)
ACTION_INDEX: Final[dict[str, int]] = {name: i for i, name in enumerate(ACTIONS)}
(DEEP_WORK, ADMIN, LEARN, EXERCISE, SOCIALIZE, FAMILY_TIME, MEDITATE, LEISURE, NAP, SLEEP) = range(10)
WORK_ACTIONS: Final[tuple[int, ...]] = (DEEP_WORK, ADMIN, LEARN)

SLOTS: Final[tuple[str, ...]] = ("morning", "afternoon", "evening", "night")
MORNING, AFTERNOON, EVENING, NIGHT = range(4)
N_SLOTS: Final[int] = len(SLOTS)
DAYS: Final[tuple[str, ...]] = ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")
N_DAYS: Final[int] = len(DAYS)
EPISODE_STEPS: Final[int] = N_DAYS * N_SLOTS

BELIEF_DIMS: Final[tuple[str, ...]] = ("S", "M", "W")
BELIEF_NAMES: Final[tuple[str, ...]] = ("social", "morning", "work")

CONDITIONS: Final[tuple[str, ...]] = ("in-dist", "ood", "discrete")
SPLITS: Final[tuple[str, ...]] = ("train", "eval")
DISCRETE_PROFILES: Final[tuple[str, ...]] = ("introvert", "extrovert", "workaholic")

CRASH_THRESHOLD: Final[float] = 0.10
CRASH_PENALTY: Final[float] = 0.02
"""Subtracted from the step reward for every meter below ``CRASH_THRESHOLD`` after the step."""


def condition_order(condition: str) -> tuple[int, str]:
    """Sort key: the benchmark's conditions in ``CONDITIONS`` order, any other name after them, alphabetically."""
    return (CONDITIONS.index(condition) if condition in CONDITIONS else len(CONDITIONS), condition)
