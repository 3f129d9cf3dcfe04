"""Observation text: the compact, stable rendering of one step that language models read.

Under protocol v2 one episode is one conversation, so each user turn shows only the current step; the
history lives in the conversation (:func:`rhythm.protocol.conversation`). A turn reads::

    Tue evening. Meters V C P S N: 0.79 0.74 0.16 0.46 0.54
    After FAMILY_TIME: change +0.01 +0.02 -0.04 -0.02 -0.05, anomaly +0.01 +0.02 -0.03 -0.02 -0.04

Meters have two decimals in a fixed order (V C P S N); signed numbers always carry a sign. The text is
part of the benchmark's interface (teacher data and students depend on it), so it changes only with
``PROTOCOL_VERSION``.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from rhythm.env.constants import ACTIONS, DAYS, METER_ABBREV, N_SLOTS, SLOTS

METER_HEADER = "Meters " + " ".join(METER_ABBREV) + ":"

ECHOED_ACTION = re.compile(r"\nAfter (" + "|".join(sorted(ACTIONS, key=len, reverse=True)) + r"):")
"""An observation's echo of the action before it; group 1 is the action's name."""


def when(t: int) -> str:
    """``"Tue afternoon"`` for step ``t``."""
    return f"{DAYS[t // N_SLOTS]} {SLOTS[t % N_SLOTS]}"


def _numbers(values: Sequence[float], signed: bool) -> str:
    fmt = "{:+.2f}" if signed else "{:.2f}"
    return " ".join(fmt.format(float(v)) for v in values)


def render_observation(
    t: int,
    meters: Sequence[float],
    last_action: int,
    delta: Sequence[float],
    anomaly: Sequence[float],
) -> str:
    """The observation before step ``t`` (``last_action`` -1 at the start of the week)."""
    head = f"{when(t)}. {METER_HEADER} {_numbers(meters, False)}"
    if last_action < 0:
        return head + "\nStart of the week."
    return f"{head}\nAfter {ACTIONS[last_action]}: change {_numbers(delta, True)}, anomaly {_numbers(anomaly, True)}"
