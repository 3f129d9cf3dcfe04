"""The batched env steps N episodes exactly as N scalar envs would, and its state can be branched."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from rhythm.agents.base import EpisodeSpec
from rhythm.agents.episodes import play
from rhythm.agents.registry import make_agent
from rhythm.env import ACTIONS, CONDITIONS, EPISODE_STEPS, BatchedRhythmEnv, RhythmEnv


@settings(max_examples=25, deadline=None)
@given(
    condition=st.sampled_from(CONDITIONS),
    split=st.sampled_from(["train", "eval"]),
    seeds=st.lists(st.integers(0, 2**40), min_size=1, max_size=6, unique=True),
    data=st.data(),
)
def test_batched_equals_scalar_bit_for_bit(condition, split, seeds, data) -> None:
    actions = data.draw(
        st.lists(st.lists(st.integers(0, len(ACTIONS) - 1), min_size=len(seeds), max_size=len(seeds)),
                 min_size=EPISODE_STEPS, max_size=EPISODE_STEPS)
    )
    batch = BatchedRhythmEnv(condition, split, len(seeds))
    bobs, _ = batch.reset(seed=seeds)
    scalars = [RhythmEnv(condition, split) for _ in seeds]
    sobs = [env.reset(seed=s)[0] for env, s in zip(scalars, seeds)]
    assert np.array_equal(bobs, np.stack(sobs))
    for t in range(EPISODE_STEPS):
        bobs, brew, bterm, _, binfo = batch.step(np.array(actions[t]))
        for i, env in enumerate(scalars):
            obs, rew, term, _, info = env.step(actions[t][i])
            assert np.array_equal(obs, bobs[i])
            assert rew == brew[i]
            assert term == bterm[i]
            assert info["meters"] == binfo["meters"][i].tolist()
            assert info["anomaly"] == binfo["anomaly"][i].tolist()
    assert np.array_equal(batch.belief_targets, np.stack([e.belief_target for e in scalars]))


def test_runner_prompts_equal_scalar_env_text() -> None:
    recs = play(make_agent("heuristic"), [EpisodeSpec("ood", "eval", 5)])
    env = RhythmEnv("ood", "eval")
    env.reset(seed=5)
    for step in recs[0].steps:
        assert step.observation == env.text
        env.step(ACTIONS.index(step.action))


def test_snapshot_restore_gives_identical_continuations() -> None:
    env = BatchedRhythmEnv("in-dist", "train", 8)
    env.reset(seed=100)
    for t in range(5):
        env.step(np.full(8, t % 10))
    snap = env.snapshot()
    plan = [np.arange(8) % 10, np.full(8, 9), np.full(8, 4)]
    first = [env.step_raw(a).meters.copy() for a in plan]
    env.restore(snap)
    second = [env.step_raw(a).meters.copy() for a in plan]
    assert all(np.array_equal(a, b) for a, b in zip(first, second))
    env.restore(snap)
    other = env.step_raw(np.full(8, 9)).meters
    assert not np.array_equal(other, first[0])


def test_batched_refuses_wrong_shapes_and_finished_episodes() -> None:
    import pytest

    env = BatchedRhythmEnv("in-dist", "eval", 3)
    with pytest.raises(ValueError, match="expected 3 seeds, got 2"):
        env.reset(seed=[1, 2])
    env.reset(seed=0)
    with pytest.raises(ValueError, match=r"actions must be 3 integers in \[0, 10\)"):
        env.step(np.array([0, 1]))
    with pytest.raises(ValueError, match=r"actions must be 3 integers in \[0, 10\)"):
        env.step(np.array([0, 1, 10]))
    for _ in range(EPISODE_STEPS):
        env.step(np.zeros(3, dtype=int))
    with pytest.raises(RuntimeError, match="episodes are over"):
        env.step(np.zeros(3, dtype=int))


def _people_and_meters(seed: int, n: int, edges: bool):
    """A generator, ``n`` random people's params and meters (with ``edges``: clipped meters and signed zeros,
    which reach the planner too)."""
    from rhythm.env.constants import N_METERS
    from rhythm.env.dynamics import make_params
    from rhythm.env.profiles import FACTOR_HIGH, FACTOR_LOW, N_FACTORS

    rng = np.random.default_rng(seed)
    params = make_params(rng.uniform(FACTOR_LOW, FACTOR_HIGH, (n, N_FACTORS)))
    meters = rng.uniform(0.0, 1.0, (n, N_METERS))
    if edges:
        meters[rng.random((n, N_METERS)) < 0.3] = 0.0
        meters[rng.random((n, N_METERS)) < 0.2] = 1.0
    return rng, params, meters


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 2**32 - 1), st.integers(1, 40), st.integers(0, 3), st.booleans())
def test_expected_delta_all_equals_expected_delta_bit_for_bit(seed, n, slot, edges) -> None:
    """The planner's fast path (every action at one slot) is the general function, element for element."""
    from rhythm.env.constants import N_ACTIONS, N_METERS
    from rhythm.env.dynamics import expected_delta, expected_delta_all

    _, params, meters = _people_and_meters(seed, n, edges)
    general = expected_delta(params, meters, np.full(n, slot), np.broadcast_to(np.arange(N_ACTIONS), (n, N_ACTIONS)))
    fast = expected_delta_all(params, meters, slot)
    assert fast.shape == (n, N_ACTIONS, N_METERS)
    assert fast.tobytes() == general.tobytes()


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 2**32 - 1), st.integers(1, 40), st.integers(0, 27), st.booleans())
def test_rollout_step_is_step_batch_without_the_observation(seed, n, t, edges) -> None:
    """The planner's rollout step gives step_batch's meters and reward, bit for bit."""
    from rhythm.env.constants import N_ACTIONS, N_METERS
    from rhythm.env.dynamics import rollout_step, step_batch

    rng, params, meters = _people_and_meters(seed, n, edges)
    action, z = rng.integers(0, N_ACTIONS, n), rng.normal(size=(n, N_METERS)) * 3
    full = step_batch(params, meters, t, action, z)
    new, reward = rollout_step(params, meters, t, action, z)
    assert new.tobytes() == full.meters.tobytes() and reward.tobytes() == full.reward.tobytes()


@settings(max_examples=30, deadline=None)
@given(st.integers(0, 2**32 - 1), st.integers(1, 4), st.integers(0, 27))
def test_posterior_update_weighs_clipped_meters_by_the_normal_tail(seed, e, t) -> None:
    """The likelihood of a transition: the normal density, or its tail mass where the meter sits at 0 or 1
    (clipped), as the general formula computes it over every element."""
    from scipy.special import log_ndtr

    from rhythm.agents.posterior import ParticlePosterior, PosteriorConfig
    from rhythm.env.constants import N_ACTIONS, N_METERS, N_SLOTS
    from rhythm.env.dynamics import NOISE_SIGMA, expected_delta

    rng = np.random.default_rng(seed)
    cfg = PosteriorConfig(particles=50, ess_threshold=0.0)  # never resample: logw is the likelihood alone
    post = ParticlePosterior(rng.integers(0, 2**63, e).astype(np.uint64), cfg)
    before, after = rng.uniform(0, 1, (e, N_METERS)), np.clip(rng.uniform(-0.3, 1.3, (e, N_METERS)), 0.0, 1.0)
    after[0, 0], after[-1, 1] = 1.0, 0.0  # both tails in every example
    action = rng.integers(0, N_ACTIONS, e)
    p = cfg.particles
    m, x = np.repeat(before, p, axis=0), np.repeat(after, p, axis=0)
    mu = m + expected_delta(post.params, m, np.full(e * p, t % N_SLOTS), np.repeat(action, p))
    sigma = NOISE_SIGMA * cfg.noise_scale
    ll = np.where(x >= 1.0, log_ndtr(-(1.0 - mu) / sigma), np.where(x <= 0.0, log_ndtr(-mu / sigma), -0.5 * ((x - mu) / sigma) ** 2))
    expected = ll.sum(axis=1).reshape(e, p)
    expected -= expected.max(axis=1, keepdims=True)
    post.update(t, before, action, after)
    assert post.logw.tobytes() == expected.tobytes()
