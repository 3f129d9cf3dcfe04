"""Observation text: the compact, stable rendering that language models read.

The text is part of the benchmark's interface (teacher data and students depend on it), so its format
changes only with ``ENV_VERSION``. Numbers have two decimals; signed changes always carry a sign.
"""

from __future__ import annotations

from collections.abc import Sequence

from rhythm.env.constants import ACTIONS, DAYS, EPISODE_STEPS, METER_ABBREV, METERS, N_SLOTS, SLOTS

HISTORY_STEPS = 4
"""Earlier steps shown under "Recent", oldest first (the current step's change is shown above it)."""


def _signed(values: Sequence[float]) -> str:
    return " ".join(f"{a}{v:+.2f}" for a, v in zip(METER_ABBREV, values))


def when(t: int) -> str:
    """``"Tue afternoon"`` for step ``t``."""
    return f"{DAYS[t // N_SLOTS]} {SLOTS[t % N_SLOTS]}"


def render_observation(
    t: int,
    meters: Sequence[float],
    last_action: int,
    delta: Sequence[float],
    anomaly: Sequence[float],
    history: Sequence[tuple[int, int, Sequence[float]]] = (),
) -> str:
    """The observation before step ``t``.

    ``history`` holds ``(t, action, anomaly)`` of steps before the last one; the last
    ``HISTORY_STEPS`` are shown.
    """
    lines = [
        f"Day {t // N_SLOTS + 1} ({when(t)}), step {t + 1} of {EPISODE_STEPS}.",
        "Meters: " + ", ".join(f"{name} {v:.2f}" for name, v in zip(METERS, meters)),
    ]
    if last_action < 0:
        lines.append("Last action: none (start of the week)")
    else:
        lines.append(f"Last action: {ACTIONS[last_action]} ({when(t - 1)})")
        lines.append(f"Change:  {_signed(delta)}")
        lines.append(f"Anomaly: {_signed(anomaly)}")
    recent = list(history)[-HISTORY_STEPS:]
    if recent:
        lines.append("Recent anomalies (oldest first):")
        lines.extend(f"- {when(ht)} {ACTIONS[ha]}: {_signed(hx)}" for ht, ha, hx in recent)
    return "\n".join(lines)
