"""The restore rule: where a meter runs low, the action that keeps it off the crash line, read off the meters the
agent sees and the env's published neutral effects (the same for every person). The restore pairs compare a
student's action with it (``challenger: restore``, :mod:`rhythm.train.grpo.pairs`), and the few-teacher-weeks
quickstart's ``dagger`` stage labels it where a student let a meter run low (:func:`restore_labels`; docs/grpo-ablation.md,
twenty-seventh round)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from rhythm.agents.episodes import replay_records, week_actions
from rhythm.env.constants import ACTIONS, CRASH_THRESHOLD, N_SLOTS, NIGHT, SLEEP, P
from rhythm.env.dynamics import BASE_EFFECT, SLEEP_MULT


def restoring_action(meters: Sequence[float], t: int, below: float) -> str | None:
    """The action that can keep the lowest low meter off the crash line, or None.

    A meter (not progress, which only work raises) is low below ``below``. The action is the one that raises
    it most by the env's neutral table (``BASE_EFFECT``, SLEEP scaled by the slot's ``SLEEP_MULT``: public,
    the same for every person), and it is named only where it can do what it is for: that gain takes the
    meter to ``CRASH_THRESHOLD`` or above (a meter already deep below the line crashes whatever is played),
    and at night only SLEEP (any other action misses the night's sleep, which costs vitality and cognition).
    """
    m = np.asarray(meters, dtype=float)
    for low in sorted((i for i in range(len(m)) if i != P and m[i] < below), key=lambda i: m[i]):
        gain = BASE_EFFECT[:, low].copy()
        gain[SLEEP] *= SLEEP_MULT[t % N_SLOTS]
        best = int(np.argmax(gain))
        if m[low] + gain[best] >= CRASH_THRESHOLD and (t % N_SLOTS != NIGHT or best == SLEEP):
            return ACTIONS[best]
    return None


def restore_labels(records: Sequence[dict[str, Any]], below: float) -> list[list[str | None]]:
    """For each week, each step's restoring action (:func:`restoring_action` at the meters seen before it: the week
    replayed through its own actions), or None; the last step is always None (its action is worth one step's
    reward)."""
    out: list[list[str | None]] = [[] for _ in records]
    for rows, actions, played in replay_records(records, week_actions):
        last = actions.shape[1] - 1
        for k, i in enumerate(rows):
            out[i] = [restoring_action(played.seen[k, t], t, below) if t < last else None for t in range(last + 1)]
    return out
