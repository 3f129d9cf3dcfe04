"""``BatchedRhythmEnv.reset(options={"future": d, "future_from": t})``: another future of the same weeks,
the past and the person kept, the luck from step t on redrawn."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rhythm.env import EPISODE_STEPS, BatchedRhythmEnv
from rhythm.env.randomness import future_keys

ACTIONS_PLAYED = [0, 9, 4, 5, 0, 6, 9, 3, 1, 2, 7, 8, 0, 0, 4, 5, 6, 1, 1, 2, 3, 9, 9, 0, 4, 4, 7, 6]


def _week(seeds: list[int], options: dict | None = None, condition: str = "in-dist") -> tuple[np.ndarray, np.ndarray]:
    """Meters after each step of the fixed actions ``(steps, people, meters)``, and the rewards."""
    env = BatchedRhythmEnv(condition, "train", len(seeds))
    env.reset(seed=seeds, options=options)
    meters, rewards = [], []
    for a in ACTIONS_PLAYED:
        _, reward, *_ = env.step(np.full(len(seeds), a))
        meters.append(env.state.meters.copy())
        rewards.append(reward)
    return np.stack(meters), np.stack(rewards)


def test_future_zero_is_the_weeks_own_noise():
    own = _week([3, 4])
    assert all(np.array_equal(a, b) for a, b in zip(own, _week([3, 4], {"future": 0, "future_from": [2, 5]}), strict=True))


@settings(max_examples=20, deadline=None)
@given(draw=st.integers(1, 50), first=st.lists(st.integers(0, EPISODE_STEPS - 1), min_size=3, max_size=3),
       condition=st.sampled_from(["in-dist", "ood", "discrete"]))
def test_a_redrawn_future_keeps_the_past_and_changes_what_follows(draw, first, condition):
    seeds = [3, 4, 11]
    own, _ = _week(seeds, condition=condition)
    other, _ = _week(seeds, {"future": draw, "future_from": first}, condition)
    again, _ = _week(seeds, {"future": draw, "future_from": first}, condition)
    assert np.array_equal(other, again), "a future is a pure function of (person, draw, first step)"
    for person, t0 in enumerate(first):
        assert np.array_equal(own[:t0, person], other[:t0, person])  # before the first redrawn step: the same week
        assert not np.array_equal(own[t0, person], other[t0, person])  # from it on: other luck


def test_two_draws_are_two_futures_and_an_int_applies_to_every_week():
    one, _ = _week([7, 8], {"future": 1, "future_from": 0})
    two, _ = _week([7, 8], {"future": 2, "future_from": 0})
    assert not np.array_equal(one[0], two[0])
    same, _ = _week([7, 8], {"future": 1, "future_from": [0, 0]})
    assert np.array_equal(one, same)
    assert not np.array_equal(future_keys(np.array([5], dtype=np.uint64), 1), future_keys(np.array([5], dtype=np.uint64), 2))


@settings(max_examples=20, deadline=None)
@given(draws=st.lists(st.integers(0, 9), min_size=4, max_size=4),
       first=st.lists(st.integers(0, EPISODE_STEPS), min_size=4, max_size=4),
       condition=st.sampled_from(["in-dist", "ood", "discrete"]))
def test_one_batch_holds_several_futures_each_week_as_if_played_alone(draws, first, condition):
    seeds = [3, 3, 4, 9]  # the same person twice: two futures of one week side by side
    together, rewards = _week(seeds, {"future": draws, "future_from": first}, condition)
    for i, (seed, d, t0) in enumerate(zip(seeds, draws, first, strict=True)):
        alone, alone_rewards = _week([seed], {"future": d, "future_from": t0}, condition)
        assert np.array_equal(together[:, i], alone[:, 0]) and np.array_equal(rewards[:, i], alone_rewards[:, 0])


def test_a_later_reset_without_the_option_plays_the_own_future_again():
    env = BatchedRhythmEnv("in-dist", "train", 1)
    env.reset(seed=[5], options={"future": 3, "future_from": 0})
    env.reset(seed=[5])
    env.step(np.array([0]))
    plain = BatchedRhythmEnv("in-dist", "train", 1)
    plain.reset(seed=[5])
    plain.step(np.array([0]))
    assert np.array_equal(env.state.meters, plain.state.meters)


@pytest.mark.parametrize("options, match", [
    ({"future": -1}, "future must be an int >= 0"),
    ({"future": 1.5}, "future must be an int >= 0"),
    ({"future": [1, -1]}, "future must be an int >= 0"),
    ({"future": [1, 2, 3]}, "future must be an int >= 0 or 2 of them"),
    ({"future": True}, "future must be an int >= 0"),
    ({"future": 1, "future_from": [1, 2, 3]}, "future_from must be an int or 2 ints"),
    ({"future": 1, "future_from": 0.5}, "future_from must be an int or 2 ints"),
    ({"future": 1, "future_from": [-1, 0]}, r"future_from must be in \[0, 28\]"),
    ({"future": 1, "future_from": 29}, r"future_from must be in \[0, 28\]"),
])
def test_bad_future_options_are_refused(options, match):
    with pytest.raises(ValueError, match=match):
        BatchedRhythmEnv("in-dist", "train", 2).reset(seed=[1, 2], options=options)


def test_future_keys_refuse_draw_zero():
    with pytest.raises(ValueError, match="draw 1 or later"):
        future_keys(np.array([1], dtype=np.uint64), 0)


def test_another_future_needs_the_weeks_it_replays():
    """Without seeds, ``future`` would play the next people rather than another future of the weeks just played."""
    env = BatchedRhythmEnv("in-dist", "train", 2)
    env.reset(seed=[0, 1])
    with pytest.raises(ValueError, match="'future' replays given weeks: pass their seeds"):
        env.reset(options={"future": 1, "future_from": 10})
    env.reset(options={"seeds": [0, 1], "future": 1, "future_from": 10})
    assert env.seeds.tolist() == [0, 1]
