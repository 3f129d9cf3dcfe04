"""benchmarks/branch_room.py: redrawn futures keep a week's past and change only what follows the branch
step; the room arithmetic on a hand-made table."""

from __future__ import annotations

import numpy as np
import pytest

from rhythm.env import batched
from rhythm.env.batched import BatchedRhythmEnv
from tests.train.helpers import load_benchmark

ACTIONS_PLAYED = [0, 9, 4, 5, 0, 6, 9, 3, 1, 2]  # any fixed sequence of action indices


def _probe():
    return load_benchmark("branch_room")


def _meters(seeds: list[int]) -> np.ndarray:
    """Meters after each of the fixed actions, ``(steps, people, meters)``."""
    env = BatchedRhythmEnv("in-dist", "train", len(seeds))
    env.reset(seed=seeds)
    out = []
    for a in ACTIONS_PLAYED:
        env.step(np.full(len(seeds), a))
        out.append(env.state.meters.copy())
    return np.stack(out)


def test_draw_zero_is_the_real_noise():
    probe = _probe()
    real = _meters([3, 4])
    with probe.redrawn_noise(0, np.array([2, 5])):
        again = _meters([3, 4])
    assert np.array_equal(real, again)


@pytest.mark.parametrize("draw", [1, 3])
def test_a_redrawn_future_keeps_the_past_and_changes_what_follows(draw):
    probe = _probe()
    first = np.array([2, 6])
    real, original = _meters([3, 4]), batched.noise_batch
    with probe.redrawn_noise(draw, first):
        other = _meters([3, 4])
    for person, t0 in enumerate(first):
        assert np.array_equal(real[:t0, person], other[:t0, person])  # before the branch step: the same state
        assert not np.array_equal(real[t0, person], other[t0, person])  # from it on: another future
    assert batched.noise_batch is original
    assert np.array_equal(_meters([3, 4]), real)  # the env's own noise is back once the probe is done


def test_two_draws_are_two_futures():
    probe = _probe()
    first = np.array([0])
    with probe.redrawn_noise(1, first):
        one = _meters([7])
    with probe.redrawn_noise(2, first):
        two = _meters([7])
    assert not np.array_equal(one, two)


def test_room_against_a_hand_made_table():
    probe = _probe()
    q = np.array([[0.50, 0.60, 0.40],   # greedy 0: the best is 1, gain 0.10
                  [0.70, 0.65, 0.70],   # greedy 2: a tie for the best, gain 0
                  [0.30, 0.30, 0.35]])  # greedy 2: greedy is the best, gain 0
    out = probe.room(q, np.array([0, 2, 2]))
    assert out["mean_gain"] == pytest.approx(0.10 / 3, abs=1e-5)
    assert out["greedy_is_best"] == pytest.approx(2 / 3, abs=1e-3)
