"""benchmarks/branch_room.py: the room arithmetic on a hand-made table (its redrawn futures are the env's
``future`` option, tested in tests/env/test_future.py)."""

from __future__ import annotations

import numpy as np
import pytest

from tests.train.helpers import load_benchmark


def test_room_against_a_hand_made_table():
    probe = load_benchmark("branch_room")
    q = np.array([[0.50, 0.60, 0.40],   # greedy 0: the best is 1, gain 0.10
                  [0.70, 0.65, 0.70],   # greedy 2: a tie for the best, gain 0
                  [0.30, 0.30, 0.35]])  # greedy 2: greedy is the best, gain 0
    out = probe.room(q, np.array([0, 2, 2]))
    assert out["mean_gain"] == pytest.approx(0.10 / 3, abs=1e-5)
    assert out["greedy_is_best"] == pytest.approx(2 / 3, abs=1e-3)
