"""GRPO rewards from the env: format penalty, belief accuracy, action value in the exact state."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import spearmanr

from rhythm.agents.base import EpisodeSpec
from rhythm.agents.episodes import play
from rhythm.agents.planner import greedy_actions
from rhythm.agents.registry import make_agent
from rhythm.env import RhythmEnv
from rhythm.env.batched import BatchedRhythmEnv, BatchState
from rhythm.env.constants import ACTION_INDEX, ACTIONS, EPISODE_STEPS, N_ACTIONS, N_METERS
from rhythm.env.profiles import sample_profiles
from rhythm.errors import RhythmError
from rhythm.grader import MAE_PRIOR, score_episode, true_belief
from rhythm.train.grpo.rewards import (
    ROLLOUT_HORIZON,
    action_value_reward,
    belief_reward,
    format_reward,
    get_reward_funcs,
    state_values,
)


def _msg(text: str) -> list[dict[str, str]]:
    return [{"role": "assistant", "content": text}]


def _columns(n: int, condition: str, seed: int, prefix: list[str]) -> dict:
    return {"condition": [condition] * n, "split": ["train"] * n, "seed": [seed] * n, "t": [len(prefix)] * n,
            "prefix": [prefix] * n}


def test_unparseable_reply_gets_the_format_penalty() -> None:
    replies = ["BELIEF: S=0.2 M=0.5 W=0.5\nACTION: NAP", "ACTION: NAP", "I would rather not say.", "ACTION: FLY"]
    assert format_reward(None, [_msg(r) for r in replies]) == [1.0, 0.5, -1.0, -1.0]
    assert format_reward(None, replies) == [1.0, 0.5, -1.0, -1.0]  # plain-text completions too


def test_wrong_belief_scores_lower_than_the_true_one() -> None:
    truth = tuple(true_belief("in-dist", "train", [4])[0])
    wrong = tuple(1.0 - x for x in truth)
    replies = [f"BELIEF: S={b[0]:.2f} M={b[1]:.2f} W={b[2]:.2f}\nACTION: NAP" for b in (truth, wrong)] + ["ACTION: NAP"]
    scores = belief_reward(None, [_msg(r) for r in replies], **_columns(3, "in-dist", 4, []))
    assert scores[0] > 0.9 and scores[1] == 0.0 and scores[2] == 0.0


@pytest.mark.parametrize("condition", ["in-dist", "ood", "discrete"])
def test_belief_reward_is_the_graders_belief_score_for_beliefs_in_between(condition: str) -> None:
    """Beliefs off the truth by a fraction ``f`` of the condition's prior MAE (unevenly over S, M, W,
    towards 0.5 so they stay in [0, 1]) score ``1 - f`` on that condition's scale: computed here from
    the env's own target, and equal to what the grader records for an episode ending on that belief."""
    for seed in (0, 1, 2):
        env = RhythmEnv(condition, "train")
        env.reset(seed=seed)
        truth = np.asarray(env.belief_target, dtype=np.float64)
        towards_middle = np.where(truth < 0.5, 1.0, -1.0)
        replies, expected, beliefs = [], [], []
        for f in (0.2, 0.5, 0.8):
            belief = truth + towards_middle * f * MAE_PRIOR[condition] * np.array([0.5, 1.0, 1.5])
            assert abs(np.abs(belief - truth).mean() - f * MAE_PRIOR[condition]) < 1e-12
            replies.append(_msg("BELIEF: " + " ".join(f"{d}={v:.10f}" for d, v in zip("SMW", belief, strict=True)) + "\nACTION: NAP"))
            expected.append(1.0 - f)
            beliefs.append(tuple(float(f"{v:.10f}") for v in belief))
        scores = belief_reward(None, replies, **_columns(len(replies), condition, seed, []))
        assert scores == pytest.approx(expected, abs=1e-8)
        graded = [score_episode(0.0, 0, b, truth, condition).belief_score for b in beliefs]
        assert scores == pytest.approx(graded, abs=1e-12)


def _played_returns(condition: str, seeds: list[int], meters: np.ndarray, t: int) -> np.ndarray:
    """Mean return of each first action over the next ``ROLLOUT_HORIZON`` steps, played in the env itself
    from ``meters`` at step ``t``: the action, then each later step the greedy continuation, under the
    env's own noise of each seed in ``seeds`` (every action sees the same noise)."""
    n = len(seeds) * N_ACTIONS
    env = BatchedRhythmEnv(condition, "train", n)
    env.reset(seed=np.repeat(seeds, N_ACTIONS))
    env.restore(BatchState(t, np.repeat(meters[None], n, axis=0), np.full(n, -1), np.zeros((n, N_METERS)),
                           np.zeros((n, N_METERS))))
    first = np.tile(np.arange(N_ACTIONS), len(seeds))
    total = np.zeros(n)
    for h in range(min(ROLLOUT_HORIZON, EPISODE_STEPS - t)):
        action = first if h == 0 else greedy_actions(env.params, env.state.meters, t + h)
        total += env.step_raw(action).reward
    return total.reshape(len(seeds), N_ACTIONS).mean(axis=0)


def _state_after(condition: str, seed: int, prefix: list[str]) -> np.ndarray:
    env = BatchedRhythmEnv(condition, "train", 1)
    env.reset(seed=[seed])
    for name in prefix:
        env.step_raw(np.array([ACTION_INDEX[name]]))
    return env.state.meters[0]


def _every_action_rewarded(condition: str, seed: int, prefix: list[str]) -> np.ndarray:
    replies = [_msg(f"ACTION: {a}") for a in ACTIONS]
    return np.array(action_value_reward(None, replies, **_columns(len(replies), condition, seed, prefix)))


def _random_prefixes(rng: np.random.Generator, n: int) -> list[list[str]]:
    return [[ACTIONS[i] for i in rng.integers(0, N_ACTIONS, size=int(rng.integers(0, 24)))] for _ in range(n)]


def test_action_value_ranks_actions_as_played_continuations_do() -> None:
    """Discrete: many seeds share one person and differ only in noise, so a state can be played forward
    under 64 draws of the env's own noise (not the reward's planning noise). The reward's ranking of the
    ten first actions follows those played means in every state (rank correlation >= 0.75; measured
    0.87-1.0, mean 0.95), and its best action is among the two that played best (measured: the best)."""
    profiles = sample_profiles("discrete", "train", np.arange(600))
    for state, prefix in enumerate(_random_prefixes(np.random.default_rng(0), 8)):
        seed = 10 + state
        same_person = [s for s in range(600) if np.array_equal(profiles[s], profiles[seed])][:64]
        played = _played_returns("discrete", same_person, _state_after("discrete", seed, prefix), len(prefix))
        rewards = _every_action_rewarded("discrete", seed, prefix)
        assert spearmanr(rewards, played).statistic >= 0.75, (prefix, rewards, played)
        assert int(np.argmax(rewards)) in np.argsort(-played)[:2], (prefix, rewards, played)


@pytest.mark.parametrize("condition", ["in-dist", "ood"])
def test_action_value_agrees_with_the_episodes_own_continuations(condition: str) -> None:
    """In-dist and ood each seed is its own person, so the played check has one noise draw, the
    episode's own; over twelve states the reward's ranking still follows it (mean rank correlation
    >= 0.5; measured 0.68 in-dist, 0.79 ood)."""
    correlations = []
    for state, prefix in enumerate(_random_prefixes(np.random.default_rng(1), 12)):
        seed = 10 + state
        played = _played_returns(condition, [seed], _state_after(condition, seed, prefix), len(prefix))
        correlations.append(spearmanr(_every_action_rewarded(condition, seed, prefix), played).statistic)
    assert np.mean(correlations) >= 0.5, correlations


def test_the_action_that_plays_best_beats_a_crashing_one() -> None:
    """After two days of deep work without sleep, more deep work crashes the meters (shown by playing
    it); the action whose continuation played best scores near the top, and above deep work."""
    seed, prefix = 2, ["DEEP_WORK"] * 8
    env = BatchedRhythmEnv("in-dist", "train", 1)
    env.reset(seed=[seed])
    for name in prefix:
        env.step_raw(np.array([ACTION_INDEX[name]]))
    crashes = sum(int(env.step_raw(np.array([ACTION_INDEX["DEEP_WORK"]])).crashes[0]) for _ in range(3))
    assert crashes > 0

    played = _played_returns("in-dist", [seed], _state_after("in-dist", seed, prefix), len(prefix))
    best = ACTIONS[int(np.argmax(played))]
    oracle = play(make_agent("oracle"), [EpisodeSpec("in-dist", "train", seed)])[0]  # for its reply format
    reasoned = oracle.steps[0].response.rsplit("ACTION:", 1)[0] + f"ACTION: {best}"
    scores = action_value_reward(None, [_msg(reasoned), _msg("ACTION: DEEP_WORK")], **_columns(2, "in-dist", seed, prefix))
    assert scores[0] >= 0.8 and scores[1] < scores[0]


def test_a_group_is_scored_in_one_state_whatever_the_order() -> None:
    prefix = ["SLEEP", "NAP", "SOCIALIZE"]
    replies = [_msg(f"ACTION: {a}") for a in ACTIONS]
    cols = _columns(len(replies), "ood", 9, prefix)
    forward = action_value_reward(None, replies, **cols)
    backward = action_value_reward(None, replies[::-1], **cols)[::-1]
    assert forward == backward and max(forward) == 1.0 and min(forward) == 0.0
    # a different seed is a different person/state, so the values differ
    assert forward != action_value_reward(None, replies, **_columns(len(replies), "ood", 10, prefix))


def test_state_values_are_deterministic_and_checked() -> None:
    state_values.cache_clear()
    a = state_values("discrete", "train", 1, 2, ("NAP", "SLEEP"))
    state_values.cache_clear()
    assert a == state_values("discrete", "train", 1, 2, ("NAP", "SLEEP"))
    assert ROLLOUT_HORIZON <= EPISODE_STEPS
    with pytest.raises(ValueError, match="prefix has 1 actions but t is 3"):
        state_values("discrete", "train", 1, 3, ("NAP",))


def test_reward_registry_by_name() -> None:
    assert [f.__name__ for f in get_reward_funcs(["format", "action_value"])] == ["format_reward", "action_value_reward"]
    with pytest.raises(RhythmError, match="unknown reward"):
        get_reward_funcs(["format", "vibes"])
    with pytest.raises(KeyError, match="column 'seed'"):
        belief_reward(None, [_msg("BELIEF: S=0 M=0 W=0\nACTION: NAP")], condition=["in-dist"], split=["train"])
