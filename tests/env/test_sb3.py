"""Stable-Baselines3 PPO trains on the registered env: the example in the README, as a test."""

from __future__ import annotations

from pathlib import Path

import gymnasium
import numpy as np
import pytest

import rhythm  # noqa: F401  (registers the ids)
from rhythm.env import ENV_ID, EPISODE_STEPS


@pytest.mark.slow
def test_ppo_trains_a_few_thousand_steps_and_its_saved_policy_plays_a_week(tmp_path: Path, monkeypatch) -> None:
    from stable_baselines3 import PPO

    monkeypatch.setenv("SB3_LOGDIR", str(tmp_path / "sb3"))  # SB3's logger folder, else a new /tmp/SB3-* every run

    env = gymnasium.make(ENV_ID, condition="in-dist", split="train", seed=0)
    model = PPO("MlpPolicy", env, n_steps=512, batch_size=128, seed=0, device="cpu", stats_window_size=1000)
    model.learn(total_timesteps=3072)
    episodes = list(model.ep_info_buffer)  # SB3's Monitor: one entry per finished week
    assert len(episodes) == 3072 // EPISODE_STEPS and {e["l"] for e in episodes} == {EPISODE_STEPS}
    model.save(tmp_path / "ppo_rhythm")

    policy = PPO.load(tmp_path / "ppo_rhythm", device="cpu")
    played = gymnasium.make(ENV_ID, condition="ood", split="eval", seed=0)
    obs, _ = played.reset()
    steps, terminated, truncated, total = 0, False, False, 0.0
    while not (terminated or truncated):
        action, _ = policy.predict(obs, deterministic=True)
        assert played.action_space.contains(int(action))
        obs, reward, terminated, truncated, _ = played.step(action)
        steps, total = steps + 1, total + reward
    assert steps == EPISODE_STEPS and terminated and not truncated and np.isfinite(total)


def test_sb3_make_vec_env_builds_copies_that_play_other_people() -> None:
    """SB3's helper asks for ``render_mode="rgb_array"`` by default, which the env draws; seeded, its copies start
    on seeds s, s+1 and then draw other people each."""
    from stable_baselines3.common.env_util import make_vec_env

    vec = make_vec_env(ENV_ID, n_envs=2, seed=0)
    vec.reset()
    seen = [tuple(vec.get_attr("seed_value"))]
    for _ in range(EPISODE_STEPS):
        vec.step(np.array([0, 1]))  # the last step resets each copy (SB3's autoreset)
    seen.append(tuple(vec.get_attr("seed_value")))
    assert seen[0] == (0, 1) and len(set(seen[0] + seen[1])) == 4
    frames = vec.get_images()
    assert [f.shape for f in frames] == [(120, 168, 3)] * 2
