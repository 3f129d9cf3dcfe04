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
    unseeded = gymnasium.make_vec(ENV_ID, num_envs=2, seed=None)  # as gymnasium.make(ENV_ID, seed=None) takes it
    unseeded.reset()
    assert unseeded.seeds.tolist() == [0, 1]


def test_a_fresh_interpreter_makes_the_env_by_naming_the_module() -> None:
    code = "import gymnasium as g; e = g.make('rhythm:rhythm/RhythmEnv-v1', split='eval'); print(e.reset(seed=0)[0].shape)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd="/")
    assert out.stdout.strip() == "(30,)"


def test_import_rhythm_alone_registers_the_id() -> None:
    code = "import gymnasium as g, rhythm; print(type(g.make('rhythm/RhythmEnv-v1').unwrapped).__name__)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "RhythmEnv"


def test_copies_seeded_through_reset_play_other_people_reproducibly() -> None:
    """Sync copies built alike (no ``seed`` kwarg) and seeded by ``reset(seed=s)``: copy i plays s + i, later
    resets draw other people from each copy's own generator, and the same seed gives the same people again."""
    def people(vec) -> list[list[int]]:
        seen = []
        for i in range(3):
            vec.reset(seed=0 if i == 0 else None)
            seen.append(list(vec.get_attr("seed_value")))
        return seen

    first = people(gymnasium.make_vec(ENV_ID, num_envs=3, vectorization_mode="sync"))
    assert first[0] == [0, 1, 2] and len({s for row in first for s in row}) == 9
    assert people(gymnasium.make_vec(ENV_ID, num_envs=3, vectorization_mode="sync")) == first


def test_the_batched_env_meets_gymnasiums_vector_conventions() -> None:
    """``info`` holds one entry per episode with its mask (``DictInfoToList`` reads it), ``render_mode`` is taken,
    and with ``autoreset=True`` the step after the last starts the next people (next-step autoreset), which
    Gymnasium's vector wrappers and continuous RL loops need."""
    from gymnasium.vector import AutoresetMode
    from gymnasium.wrappers.vector import DictInfoToList, NormalizeObservation

    listed = DictInfoToList(gymnasium.make_vec(ENV_ID, num_envs=2))
    _, infos = listed.reset(seed=3)
    assert [i["t"] for i in infos] == [0, 0] and infos[1]["meters"].shape == (5,)
    sync = gymnasium.make_vec(ENV_ID, num_envs=2, vectorization_mode="sync")
    _, sync_info = sync.reset(seed=3)
    _, batched_info = gymnasium.make_vec(ENV_ID, num_envs=2).reset(seed=3)
    assert set(batched_info) == set(sync_info)
    for key in sync_info:
        np.testing.assert_array_equal(np.array(batched_info[key].tolist(), dtype=float), np.array(sync_info[key].tolist(), dtype=float))

    vec = gymnasium.make_vec(ENV_ID, num_envs=3, autoreset=True, render_mode="ansi", seed=5)
    assert vec.metadata["autoreset_mode"] == AutoresetMode.NEXT_STEP
    vec = NormalizeObservation(vec)
    vec.reset()
    for _ in range(EPISODE_STEPS - 1):
        vec.step(np.zeros(3, dtype=np.int64))
    _, _, terminated, _, _ = vec.step(np.zeros(3, dtype=np.int64))
    assert terminated.all()
    obs, reward, terminated, truncated, info = vec.step(np.zeros(3, dtype=np.int64))  # the autoreset step
    assert vec.unwrapped.seeds.tolist() == [8, 9, 10] and (reward == 0).all() and not (terminated | truncated).any()
    assert info["t"].tolist() == [0, 0, 0] and len(vec.render()) == 3 and "Start of the week." in vec.render()[0]
    assert gymnasium.make_vec(ENV_ID, num_envs=2).metadata["autoreset_mode"] == AutoresetMode.DISABLED


def test_the_batched_env_refuses_what_it_cannot_play() -> None:
    vec = BatchedRhythmEnv(num_envs=2)
    vec.reset(options={"seed": 5})  # the scalar env's option name works too
    assert vec.seeds.tolist() == [5, 6]
    for options, needle in (({"seeds": [1, 2], "seed": 1}, "not both"), ({"sead": 1}, r"unknown reset option\(s\) \['sead'\]")):
        with pytest.raises(ValueError, match=needle):
            vec.reset(options=options)
    for seed in (2**63 - 1, [1.5, 2], -1, [0, 2**63]):
        with pytest.raises(ValueError, match="seed must be an integer"):
            vec.reset(seed=seed)
    vec.reset(seed=[2**63 - 1, 0])
    for actions in (np.array([3.7, 2.2]), np.array([True, False]), np.array([1, 10]), np.array([1])):
        with pytest.raises(ValueError, match=r"actions must be 2 integers in \[0, 10\)"):
            vec.step(actions)
    for n in (0, -1, 2.5):
        with pytest.raises(ValueError, match="num_envs must be a positive integer"):
            BatchedRhythmEnv(num_envs=n)
