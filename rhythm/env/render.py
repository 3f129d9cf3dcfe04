"""Observation text: the compact, stable rendering of one step that language models read (and, for
``render_mode="rgb_array"``, a small picture of the meters, :func:`meter_image`).

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

import numpy as np

from rhythm.env.constants import ACTIONS, CRASH_THRESHOLD, DAYS, EPISODE_STEPS, METER_ABBREV, N_SLOTS, SLOTS

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
    """The observation before step ``t`` (``last_action`` -1 at the start of the week); after the last step the
    week's end keeps the last slot's clock, as the numeric observation does."""
    head = f"{when(min(t, EPISODE_STEPS - 1))}. {METER_HEADER} {_numbers(meters, False)}"
    if last_action < 0:
        return head + "\nStart of the week."
    return f"{head}\nAfter {ACTIONS[last_action]}: change {_numbers(delta, True)}, anomaly {_numbers(anomaly, True)}"


# meter_image's layout (pixels) and colours: one bar per meter (V C P S N), the crash line across them, and the
# week's 28 steps as a strip of cells under them.
_BAR, _GAP, _TOP, _BARS_H, _CELL = 24, 8, 4, 100, 5
_IMAGE_H, _IMAGE_W = _TOP + _BARS_H + 16, _GAP + len(METER_ABBREV) * (_BAR + _GAP)
_COLOURS = np.array([[230, 126, 34], [52, 152, 219], [39, 174, 96], [142, 68, 173], [22, 160, 133]], dtype=np.uint8)
_EMPTY, _CRASH_LINE, _DONE, _TODO = (225, 225, 225), (200, 30, 30), (90, 90, 90), (210, 210, 210)


def meter_image(meters: Sequence[float], t: int) -> np.ndarray:
    """The state before step ``t`` as an RGB image ``(120, 168, 3)`` of ``uint8``: each meter a bar filled to its
    level (in V C P S N order), a red line at the crash threshold, and the steps played so far as dark cells of a
    28-cell strip. What ``render_mode="rgb_array"`` returns, so video recorders and viewers can show a week."""
    image = np.full((_IMAGE_H, _IMAGE_W, 3), 255, dtype=np.uint8)
    bottom = _TOP + _BARS_H
    for i, level in enumerate(np.clip(np.asarray(meters, dtype=float), 0.0, 1.0)):
        left = _GAP + i * (_BAR + _GAP)
        image[_TOP:bottom, left : left + _BAR] = _EMPTY
        image[bottom - round(level * _BARS_H) : bottom, left : left + _BAR] = _COLOURS[i]
    image[bottom - round(CRASH_THRESHOLD * _BARS_H), _GAP : _IMAGE_W - _GAP] = _CRASH_LINE
    for step in range(EPISODE_STEPS):
        left = _GAP + step * _CELL
        image[bottom + 6 : bottom + 12, left : left + _CELL - 1] = _DONE if step < t else _TODO
    return image
