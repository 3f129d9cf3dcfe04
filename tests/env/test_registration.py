"""The Gymnasium ids: ``gymnasium.make`` / ``make_vec`` after ``import rhythm``, keyword arguments, the checker."""

from __future__ import annotations

import subprocess
import sys
import warnings

import gymnasium
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

import rhythm  # noqa: F401  (registers the ids)
from rhythm.env import ENV_ID, ENV_VERSION, EPISODE_STEPS, BatchedRhythmEnv, RhythmEnv


def test_the_id_carries_the_env_version() -> None:
    assert ENV_ID == "rhythm/RhythmEnv-v" + ENV_VERSION.split("-v")[1] == "rhythm/RhythmEnv-v1"
    assert ENV_ID in gymnasium.registry


def _checker_warnings(env: gymnasium.Env) -> list[str]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        check_env(env)
    return [str(w.message) for w in caught]


@pytest.mark.parametrize("kwargs", [{}, {"condition": "ood", "split": "eval", "seed": 7}, {"condition": "discrete"}])
def test_the_made_env_passes_the_checker_without_warnings(kwargs) -> None:
    env = gymnasium.make(ENV_ID, **kwargs)
    assert _checker_warnings(env.unwrapped) == []
    # on the wrapped env the checker's only remark is that make() wrapped it (OrderEnforcing, PassiveEnvChecker)
    assert [m for m in _checker_warnings(env) if "different from the unwrapped version" not in m] == []


def test_make_passes_condition_split_and_seed() -> None:
    env = gymnasium.make(ENV_ID, condition="ood", split="eval", seed=5)
    assert isinstance(env.unwrapped, RhythmEnv)
    assert (env.unwrapped.condition, env.unwrapped.split) == ("ood", "eval")
    played = []
    for _ in range(3):
        obs, _ = env.reset()
        played.append(env.unwrapped.seed_value)
        direct, _ = RhythmEnv("ood", "eval").reset(seed=played[-1])
        np.testing.assert_array_equal(obs, direct)
    assert played == [5, 6, 7]  # resets without a seed walk the split's people in order
    env.reset(seed=40)
    env.reset()
    assert env.unwrapped.seed_value == 41
    with pytest.raises(ValueError, match="unknown split"):
        gymnasium.make(ENV_ID, split="test")


def test_without_a_seed_kwarg_resets_draw_seeds_from_the_env_generator() -> None:
    env = gymnasium.make(ENV_ID)
    env.reset(seed=3)
    first = env.unwrapped.seed_value
    env.reset()
    again = gymnasium.make(ENV_ID)
    again.reset(seed=3)
    again.reset()
    assert first == 3 and env.unwrapped.seed_value == again.unwrapped.seed_value != 4


def test_make_vec_gives_the_batched_env() -> None:
    vec = gymnasium.make_vec(ENV_ID, num_envs=4, condition="discrete", split="eval", seed=10)
    assert isinstance(vec, BatchedRhythmEnv) and vec.num_envs == 4
    obs, _ = vec.reset()
    assert obs.shape == (4, *vec.single_observation_space.shape) and vec.seeds.tolist() == [10, 11, 12, 13]
    for t in range(EPISODE_STEPS):
        obs, reward, terminated, truncated, _ = vec.step(vec.action_space.sample())
        assert terminated.all() == (t == EPISODE_STEPS - 1) and not truncated.any()
    vec.reset()
    assert vec.seeds.tolist() == [14, 15, 16, 17]  # the next people, not the same ones again
    direct = BatchedRhythmEnv("discrete", "eval", 4)
    np.testing.assert_array_equal(direct.reset(seed=14)[0], vec.reset(seed=14)[0])


def test_a_fresh_interpreter_makes_the_env_by_naming_the_module() -> None:
    code = "import gymnasium as g; e = g.make('rhythm:rhythm/RhythmEnv-v1', split='eval'); print(e.reset(seed=0)[0].shape)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd="/")
    assert out.stdout.strip() == "(30,)"


def test_import_rhythm_alone_registers_the_id() -> None:
    code = "import gymnasium as g, rhythm; print(type(g.make('rhythm/RhythmEnv-v1').unwrapped).__name__)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "RhythmEnv"
