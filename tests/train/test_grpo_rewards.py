"""GRPO rewards from the env: format penalty, belief accuracy, action value in the exact state."""

from __future__ import annotations

import numpy as np
import pytest

from rhythm.agents.base import EpisodeSpec
from rhythm.agents.episodes import play
from rhythm.agents.registry import make_agent
from rhythm.env.batched import BatchedRhythmEnv
from rhythm.env.constants import ACTION_INDEX, ACTIONS, EPISODE_STEPS
from rhythm.errors import RhythmError
from rhythm.grader import true_belief
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


def _exhausting_prefix(seed: int) -> list[str]:
    """Two days of deep work without sleep: vitality and cognition are near the floor."""
    return ["DEEP_WORK"] * 8


def test_doing_what_the_oracle_would_beats_a_crashing_action() -> None:
    seed, prefix = 2, _exhausting_prefix(2)
    env = BatchedRhythmEnv("in-dist", "train", 1)
    env.reset(seed=[seed])
    for name in prefix:
        env.step_raw(np.array([ACTION_INDEX[name]]))
    crash_run = env.snapshot()
    crashes = 0
    for _ in range(3):  # keep working: the meters crash
        crashes += int(env.step_raw(np.array([ACTION_INDEX["DEEP_WORK"]])).crashes[0])
    assert crashes > 0
    env.restore(crash_run)

    oracle = play(make_agent("oracle"), [EpisodeSpec("in-dist", "train", seed)])[0]  # for its reply format
    values = np.array(state_values("in-dist", "train", seed, len(prefix), tuple(prefix)))
    best = ACTIONS[int(np.argmax(values))]
    oracle_like = oracle.steps[0].response.rsplit("ACTION:", 1)[0] + f"ACTION: {best}"
    scores = action_value_reward(None, [_msg(oracle_like), _msg("ACTION: DEEP_WORK")], **_columns(2, "in-dist", seed, prefix))
    assert scores[0] == 1.0 and scores[1] < scores[0]
    assert values[ACTION_INDEX[best]] > values[ACTION_INDEX["DEEP_WORK"]]


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
    with pytest.raises(ValueError):
        state_values("discrete", "train", 1, 3, ("NAP",))


def test_reward_registry_by_name() -> None:
    assert [f.__name__ for f in get_reward_funcs(["format", "action_value"])] == ["format_reward", "action_value_reward"]
    with pytest.raises(RhythmError, match="unknown reward"):
        get_reward_funcs(["format", "vibes"])
    with pytest.raises(KeyError, match="column 'seed'"):
        belief_reward(None, [_msg("BELIEF: S=0 M=0 W=0\nACTION: NAP")], condition=["in-dist"], split=["train"])
