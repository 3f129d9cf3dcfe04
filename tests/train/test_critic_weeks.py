"""benchmarks/critic_weeks.py (docs/grpo-ablation.md, thirty-first round): the critic is the bayes teacher's own
planner, each advantage has mean 0 under the policy, a week's action tokens are found, and a run trains."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rhythm.agents.base import EpisodeSpec
from rhythm.agents.episodes import play
from rhythm.agents.registry import make_agent
from rhythm.env.constants import ACTIONS, EPISODE_STEPS
from rhythm.errors import RhythmError
from tests.train.helpers import load_benchmark

critic = load_benchmark("critic_weeks")


def test_the_critics_best_action_is_the_one_bayes_plays_on_its_own_weeks():
    """Read along bayes's own weeks, the critic's values are the ones bayes weighed: their argmax is its action."""
    specs = [EpisodeSpec(c, "train", s) for c in ("in-dist", "ood") for s in range(3)]
    records = [r.to_dict() for r in play(make_agent("bayes"), specs)]
    values = critic.teacher_values(records)
    for record, week in zip(records, values, strict=True):
        assert week.shape == (EPISODE_STEPS, len(ACTIONS))
        assert [ACTIONS[int(a)] for a in week.argmax(-1)] == [s["action"] for s in record["steps"]]


@settings(max_examples=50, deadline=None)
@given(st.integers(0, 2**32 - 1), st.sampled_from(["value", "argmax"]))
def test_each_advantage_has_mean_zero_under_the_policy(seed, kind):
    """Whatever the values and the policy, the advantage of an action drawn from the policy averages 0 at each
    state (the baseline is exact), so only what the critic ranks moves the policy, not a constant."""
    rng = np.random.default_rng(seed)
    values = rng.normal(0, 0.02, (4, len(ACTIONS)))
    probs = rng.dirichlet(np.full(len(ACTIONS), 0.5), 4)
    each = np.stack([critic.advantages(values, probs, [a] * 4, kind) for a in range(len(ACTIONS))], axis=-1)
    assert np.allclose((probs * each).sum(-1), 0.0, atol=1e-12)
    best = values.argmax(-1)
    assert np.all(each[np.arange(4), best] >= 0.0)  # the critic's best action never loses


@settings(max_examples=50, deadline=None)
@given(st.integers(0, 2**32 - 1))
def test_the_mirror_target_is_a_distribution_between_the_policy_and_the_best_action(seed):
    rng = np.random.default_rng(seed)
    probs, adv = rng.dirichlet(np.ones(len(ACTIONS))), rng.normal(0, 1, len(ACTIONS))
    for eta in (1e-3, 1.0, 1e3):
        q = critic.mirror_target(probs, adv, eta)
        assert q.min() >= 0 and q.sum() == pytest.approx(1.0)
    gap = np.diff(np.sort(adv)[-2:])[0]  # cold beside the best two's gap: the best action, whatever its old share
    assert critic.mirror_target(probs, adv, gap / 200).argmax() == adv.argmax()
    assert np.allclose(critic.mirror_target(probs, adv, 1e6), probs, atol=1e-5)  # hot: the policy as it was
    better = critic.mirror_target(probs, adv, 1.0) / probs
    assert np.all(np.diff(better[np.argsort(adv)]) >= -1e-12)  # a better action gains more of its old share


def test_advantages_refuse_an_unknown_kind_and_zero_a_step_without_probabilities():
    values, probs = np.zeros((2, len(ACTIONS))), np.full((2, len(ACTIONS)), np.nan)
    assert critic.advantages(values, probs, [0, 1], "value").tolist() == [0.0, 0.0]
    assert critic.advantages(np.eye(2, len(ACTIONS)), np.full((2, len(ACTIONS)), 0.1), [0, 0], "hits").tolist() == [1.0, 0.0]
    with pytest.raises(RhythmError, match="value, argmax or hits"):
        critic.advantages(values, probs, [0, 1], "mean")


def test_a_weeks_completion_has_one_action_token_per_turn(tiny_student):
    """Rendered as one row, each of the 28 turns points at the token naming its recorded action."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_student)
    record = play(make_agent("bayes"), [EpisodeSpec("in-dist", "train", 4)])[0].to_dict()
    prompt, completion = critic.week_ids(tok, record)
    action_ids = dict(zip(critic.action_token_ids(tok), ACTIONS, strict=True))
    marks = [tok.convert_tokens_to_ids(n) for n in (critic.ACTION_MARK, "assistant\n", "<|im_end|>")]
    pos = critic.action_positions(completion, *marks, set(action_ids))
    assert len(pos) == EPISODE_STEPS and prompt[-1] == marks[1]
    assert [action_ids[completion[k]] for k in pos] == [s["action"] for s in record["steps"]]
    # a reply that names no action has no position; one that names two, its last
    assert critic.action_positions([marks[0], marks[2]], *marks, set(action_ids)) == [None]
    twice = [marks[0], completion[pos[0]], marks[0], completion[pos[1]], marks[2]]
    assert critic.action_positions(twice, *marks, set(action_ids)) == [3]


@pytest.mark.slow
def test_a_run_trains_and_logs_every_step(sft_model, tmp_path, capsys):
    """Two steps of one person played twice: the weights move, every step is logged, one JSON line is printed."""
    import torch
    from safetensors.torch import load_file

    out = tmp_path / "critic"
    critic.main(["--model", str(sft_model), "--out", str(out), "--steps", "2", "--people", "1", "--lr", "1e-3"])
    line = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert line["benchmark"] == "critic_weeks" and line["states"] == 2 * 2 * EPISODE_STEPS
    log = [json.loads(x) for x in (out / "critic_log.jsonl").read_text().splitlines()]
    assert [e["step"] for e in log] == [1, 2] and all(e["regret"] >= 0 for e in log)
    before, after = load_file(sft_model / "model.safetensors"), load_file(out / "model.safetensors")
    assert any(not torch.equal(before[k], after[k]) for k in before)
    # the mirror-descent loss (greedy plays, a cross-entropy at every action token) trains through the same trainer
    # (two steps: the first one's learning rate is 0, the warm-up's start)
    critic.main(["--model", str(sft_model), "--out", str(tmp_path / "mpo"), "--steps", "2", "--people", "1",
                 "--adv", "mpo", "--eta", "0.1", "--lr", "1e-3"])
    history = json.loads((tmp_path / "mpo" / "log_history.json").read_text())
    assert history[0]["loss"] > 0  # a cross-entropy to a distribution
    mpo = load_file(tmp_path / "mpo" / "model.safetensors")
    assert any(not torch.equal(before[k], mpo[k]) for k in before)


def test_a_folder_without_a_model_is_one_line_and_exit_2(tmp_path, capsys):
    with pytest.raises(SystemExit) as exc:
        critic.main(["--model", str(tmp_path), "--out", str(tmp_path / "o")])
    assert exc.value.code == 2 and "no config.json" in capsys.readouterr().err


def test_agreement_counts_by_hand():
    """Two weeks whose actions are known: the shares, where they differ, and the low-serenity states."""
    M, D = ACTIONS.index("MEDITATE"), ACTIONS.index("DEEP_WORK")
    records = [{"steps": [{"action": "DEEP_WORK"}] * EPISODE_STEPS} for _ in range(2)]
    values = [np.zeros((EPISODE_STEPS, len(ACTIONS))) for _ in range(2)]
    values[0][:, D], values[1][:, M] = 1.0, 1.0  # the critic agrees on week 0, names MEDITATE all of week 1
    probs = np.full((2, EPISODE_STEPS, len(ACTIONS)), 0.05)
    probs[..., M] = 0.25
    seen = [np.full((EPISODE_STEPS, 5), 0.5) for _ in range(2)]
    seen[1][:4, 3] = 0.1  # four low-serenity states in week 1
    got = critic.agreement(records, values, probs, seen)
    assert got["states"] == 2 * EPISODE_STEPS and got["agree"] == 0.5
    assert got["played_share"] == {"DEEP_WORK": 1.0} and got["best_share"] == {"DEEP_WORK": 0.5, "MEDITATE": 0.5}
    assert got["median_p_best_where_they_differ"] == {"MEDITATE": 0.25}
    assert got["low_serenity"] == {"states": 4, "meditate_best": 1.0, "meditate_played": 0.0}
