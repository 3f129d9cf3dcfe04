"""RhythmEnv: the Gymnasium contract, determinism, bounds, conditions and splits."""

from __future__ import annotations

import hashlib
import subprocess
import sys
import warnings

import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env
from hypothesis import given, settings
from hypothesis import strategies as st

from rhythm.env import ACTIONS, CONDITIONS, ENV_VERSION, EPISODE_STEPS, RhythmEnv
from rhythm.env import rhythm_env as spec_module
from rhythm.env.dynamics import NOISE_SIGMA
from rhythm.env.profiles import (
    CONDITION_ID,
    FACTOR_HIGH,
    FACTOR_LOW,
    IN_DIST_SPAN,
    SIGNED,
    belief_of,
    sample_profiles,
)

actions_seq = st.lists(st.integers(0, len(ACTIONS) - 1), min_size=EPISODE_STEPS, max_size=EPISODE_STEPS)


@pytest.mark.parametrize("condition", CONDITIONS)
def test_passes_gymnasium_env_checker(condition: str) -> None:
    """The checker passes with nothing to warn about. Its render check may only say what an env made
    without ``gymnasium.make`` lacks (a spec, hence no alternative render modes tried, and a frame
    rate, which a text render has no use for); any other warning fails."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        check_env(RhythmEnv(condition), skip_render_check=True)
    assert [str(w.message) for w in caught] == []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        check_env(RhythmEnv(condition, render_mode="ansi"))
        check_env(RhythmEnv(condition, render_mode="rgb_array"))
    expected = ("Not able to test alternative render modes due to the environment not having a spec",
                "No render fps was declared in the environment")
    unexpected = [str(w.message) for w in caught if not any(e in str(w.message) for e in expected)]
    assert unexpected == []


def test_default_constructor_is_in_dist_train() -> None:
    env = RhythmEnv()
    obs, info = env.reset(seed=0)
    assert env.condition == "in-dist" and env.split == "train"
    assert env.observation_space.contains(obs)
    assert info["t"] == 0 and info["slot"] == 0


def test_episode_is_28_steps_and_then_refuses() -> None:
    env = RhythmEnv()
    env.reset(seed=1)
    for t in range(EPISODE_STEPS):
        _, _, terminated, truncated, _ = env.step(t % len(ACTIONS))
        assert terminated == (t == EPISODE_STEPS - 1) and not truncated
    with pytest.raises(RuntimeError, match=r"episode is over; call reset\(\)"):
        env.step(0)


def test_bad_arguments_are_refused() -> None:
    with pytest.raises(ValueError, match="unknown condition"):
        RhythmEnv("sideways")
    with pytest.raises(ValueError, match="unknown split"):
        RhythmEnv("in-dist", "test")
    env = RhythmEnv()
    env.reset(seed=0)
    with pytest.raises(ValueError, match=r"action must be an integer in \[0, 10\), got 10"):
        env.step(10)
    for bad in (3.7, "3", True, np.array([3]), np.float32(2.0), -1):  # never cast into another action
        with pytest.raises(ValueError, match="action must be an integer"):
            env.step(bad)
    assert env.step(np.int64(3))[-1]["t"] == 1 and env.step(np.array(4))[-1]["t"] == 2  # what policies return
    with pytest.raises(ValueError, match=r"seed must be an integer in \[0, 2\*\*63 - 1\], got -1"):
        env.reset(seed=-1)  # the env's own line, not Gymnasium's Error
    assert env.reset(seed=np.int64(3))[0].tolist() == RhythmEnv().reset(seed=3)[0].tolist()  # what numpy code passes
    with pytest.raises(ValueError, match=r"seed must be an integer in \[0, 2\*\*63 - 1\]"):
        env.reset(seed=2**63)
    with pytest.raises(ValueError, match=r"seed must be an integer"):
        env.reset(options={"seed": 1.5})
    with pytest.raises(ValueError, match=r"unknown reset option\(s\) \['seeds'\]"):
        env.reset(options={"seeds": [1]})
    with pytest.raises(ValueError, match="seed must be an integer"):
        RhythmEnv(seed=-3)


@pytest.mark.parametrize("mode", [None, "ansi", "rgb_array"])
def test_render_modes(mode) -> None:
    """``ansi`` is the text a model reads, ``rgb_array`` a picture of the meters: each bar filled to its level,
    the steps played as dark cells; rendering before a reset says to reset."""
    env = RhythmEnv(render_mode=mode)
    if mode is not None:
        with pytest.raises(RuntimeError, match=r"call reset\(\) first"):
            env.render()
    env.reset(seed=4)
    for a in (0, 3, 9):
        env.step(a)
    frame = env.render()
    if mode is None:
        assert frame is None
    elif mode == "ansi":
        assert frame == env.text
    else:
        assert frame.shape == (120, 168, 3) and frame.dtype == np.uint8
        white, empty = np.array([255, 255, 255]), np.array([225, 225, 225])
        for i, level in enumerate(env._meters):  # bar i's column: coloured rows = level x 100 (the crash line aside)
            column = frame[4:104, 8 + i * 32 + 1]
            coloured = ~(column == empty).all(axis=1) & ~(column == white).all(axis=1) & ~(column == [200, 30, 30]).all(axis=1)
            assert abs(int(coloured.sum()) - round(level * 100)) <= 1
        strip = frame[110:116, 8:148:5, 0]
        assert (strip[0] == 90).sum() == 3 and (strip[0] == 210).sum() == EPISODE_STEPS - 3
    with pytest.raises(ValueError, match="unsupported render_mode 'human'"):
        RhythmEnv(render_mode="human")


def _trajectory_digest(condition: str, seed: int, actions: list[int]) -> str:
    env = RhythmEnv(condition)
    obs, _ = env.reset(seed=seed)
    h = hashlib.sha256(obs.tobytes())
    for a in actions:
        obs, reward, *_ , info = env.step(a)
        h.update(obs.tobytes())
        h.update(np.float64(reward).tobytes())
        h.update(np.asarray(info["meters"], dtype=np.float64).tobytes())
    return h.hexdigest()


def test_same_seed_same_trajectory_in_another_process() -> None:
    actions = [(3 * t + 1) % len(ACTIONS) for t in range(EPISODE_STEPS)]
    here = [_trajectory_digest(c, 7, actions) for c in CONDITIONS]
    code = (
        "from tests.env.test_env import _trajectory_digest\n"
        f"print(' '.join(_trajectory_digest(c, 7, {actions!r}) for c in {list(CONDITIONS)!r}))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=".")
    assert out.stdout.split() == here
    assert len(set(here)) == len(CONDITIONS)


@settings(max_examples=40, deadline=None)
@given(
    condition=st.sampled_from(CONDITIONS),
    seed=st.integers(0, 2**40),
    actions=actions_seq,
)
def test_meters_stay_in_unit_interval(condition: str, seed: int, actions: list[int]) -> None:
    env = RhythmEnv(condition)
    env.reset(seed=seed)
    for a in actions:
        obs, reward, _, _, info = env.step(a)
        assert all(0.0 <= m <= 1.0 for m in info["meters"])
        assert env.observation_space.contains(obs)
        assert np.isfinite(reward)


def test_train_and_eval_splits_are_different_people() -> None:
    seeds = np.arange(50)
    for condition in ("in-dist", "ood"):
        train = sample_profiles(condition, "train", seeds)
        evals = sample_profiles(condition, "eval", seeds)
        assert not np.isclose(train, evals).all(axis=1).any()


@settings(max_examples=30, deadline=None)
@given(seeds=st.lists(st.integers(0, 2**40), min_size=1, max_size=20))
def test_profiles_respect_documented_ranges(seeds: list[int]) -> None:
    for condition in CONDITIONS:
        f = sample_profiles(condition, "train", np.array(seeds))
        assert (f >= FACTOR_LOW).all() and (f <= FACTOR_HIGH).all()
        b = belief_of(f)
        assert ((b >= 0) & (b <= 1)).all()


def test_ood_never_overlaps_in_dist() -> None:
    seeds = np.arange(2000)
    ind = sample_profiles("in-dist", "eval", seeds)
    ood = sample_profiles("ood", "eval", seeds)
    assert (np.abs(ind[:, SIGNED]) <= IN_DIST_SPAN + 1e-12).all()
    assert (np.abs(ood[:, SIGNED]) >= IN_DIST_SPAN - 1e-12).all()
    unit = ~SIGNED
    assert ((ind[:, unit] >= 0.15) & (ind[:, unit] <= 0.85)).all()
    assert ((ood[:, unit] <= 0.15) | (ood[:, unit] >= 0.85)).all()


def test_discrete_cycles_three_people_and_seed_drives_start() -> None:
    f = sample_profiles("discrete", "eval", np.arange(6))
    assert np.array_equal(f[0], f[3]) and np.array_equal(f[1], f[4])
    assert not np.array_equal(f[0], f[1])
    a, b = RhythmEnv("discrete"), RhythmEnv("discrete")
    _, ia = a.reset(seed=0)
    _, ib = b.reset(seed=3)
    assert ia["meters"] != ib["meters"]


def test_docstring_is_the_spec() -> None:
    doc = spec_module.__doc__
    for section in ("## Description", "## Action Space", "## Observation Space", "## Rewards", "## Starting State",
                    "## Episode End", "## Latent Factors", "## Belief Target", "## Conditions and Splits", "## Version History"):
        assert section in doc
    assert ENV_VERSION in doc
    assert "(0.04, 0.04, 0.025, 0.04, 0.04)" in doc and tuple(NOISE_SIGMA) == (0.04, 0.04, 0.025, 0.04, 0.04)
    for name in ACTIONS:
        assert name in doc
    assert set(CONDITION_ID) == set(CONDITIONS)


def test_text_observation_is_stable_and_complete() -> None:
    """Protocol v2: each turn shows the current step alone (the history lives in the conversation)."""
    env = RhythmEnv()
    env.reset(seed=2)
    first = env.text
    assert first.startswith("Mon morning. Meters V C P S N: ") and first.endswith("\nStart of the week.")
    assert len(first.split(": ")[1].split("\n")[0].split()) == 5
    env.step(ACTIONS.index("SOCIALIZE"))
    text = env.text
    head, after = text.split("\n")
    assert head.startswith("Mon afternoon. Meters V C P S N: ")
    assert after.startswith("After SOCIALIZE: change ") and ", anomaly " in after
    change, anomaly = after.removeprefix("After SOCIALIZE: change ").split(", anomaly ")
    for numbers in (change, anomaly):
        assert len(numbers.split()) == 5 and all(v[0] in "+-" and len(v) == 5 for v in numbers.split())
    for _ in range(6):
        env.step(0)
    assert text != env.text and env.text.count("\n") == 1  # no "Recent" block: one step per turn
    assert env.text.startswith("Tue night.")  # t = 7
