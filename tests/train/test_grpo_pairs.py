"""Branch mode's ``group: pair`` and ``futures``: the greedy action against the runner-up, each valued
under several futures, a pair kept only where its futures agree.

The runner-up is checked against the next-token distribution read independently (one forward pass after
the greedy reply's tokens up to its action), the futures against the env's own option."""

from __future__ import annotations

from collections import defaultdict

import numpy as np
import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rhythm.agents.restore import restoring_action
from rhythm.env.constants import ACTIONS, EPISODE_STEPS
from rhythm.errors import RhythmError
from rhythm.protocol import parse_reply
from rhythm.train.grpo.branch import State, branch_scores, state_meters
from rhythm.train.grpo.config import BranchMode, validate_branch
from rhythm.train.grpo.pairs import (
    action_candidates,
    agreed,
    agreed_rewards,
    pair_replies,
    shared_prefix,
)
from rhythm.train.grpo.probe import encode_prompts, greedy_replies

from .helpers import REPO, load_model, read_training_log

PAIRS_CONFIG = str(REPO / "rhythm" / "configs" / "grpo-tiny-pairs.yaml")
scores = st.lists(st.floats(0, 1, allow_nan=False), min_size=2, max_size=8)


@settings(max_examples=50, deadline=None)
@given(a=scores, shift=st.one_of(st.just(0.0), st.floats(1e-6, 0.5), st.floats(-0.5, -1e-6)),
       z=st.floats(0, 5, allow_nan=False))
def test_a_constant_difference_is_agreement_and_agreement_is_symmetric(a, shift, z):
    """Every future moving both scores alike (a difference with no spread but rounding's) is agreement at any z
    when the difference is not 0, and a tie is not; swapping the two replies does not change the verdict."""
    b = [x + shift for x in a]
    assert agreed(a, b, z) is (shift != 0.0)
    assert not agreed(a, list(a), z)
    noisy = [x + shift + 0.01 * (i % 3) for i, x in enumerate(a)]
    assert agreed(a, noisy, z) == agreed(noisy, a, z)


def test_a_difference_that_rounding_spreads_is_still_the_same_under_every_future():
    """0.3 added to each score leaves differences that differ in their last bits: the same verdict as 0.3 exactly."""
    a = [0.1, 0.7, 0.2, 0.9]
    shifted = [x + 0.3 for x in a]
    assert np.ptp(np.subtract(shifted, a)) > 0  # rounding spreads it
    assert agreed(a, shifted, 5.0) and agreed(a, shifted, 1e6) and agreed(shifted, a, 1e6)
    assert agreed([0.0, 0.0], [0.3, 0.3], 1e6) and not agreed([0.5, 0.5], [0.5, 0.5], 0.0)


def test_agreement_arithmetic():
    diff = np.array([0.02, 0.03, 0.01, 0.02])  # mean 0.02, sd 0.00816, se 0.00408: 4.9 standard errors
    base = np.array([0.5, 0.6, 0.4, 0.7])
    assert agreed(base, base + diff, 4.8) and not agreed(base, base + diff, 5.0)
    assert not agreed([0.5], [0.9], 0.0), "one future cannot say whether futures agree"


@settings(max_examples=50, deadline=None)
@given(data=st.data(), pairs=st.integers(1, 6), z=st.floats(0.5, 4, allow_nan=False))
def test_pairs_not_kept_get_their_mean_and_kept_pairs_are_untouched(data, pairs, z):
    draws = [data.draw(st.lists(st.floats(0, 1, allow_nan=False), min_size=4, max_size=4)) for _ in range(2 * pairs)]
    rewards = [float(np.mean(d)) for d in draws]
    out, kept = agreed_rewards(rewards, draws, z)
    assert kept == sum(agreed(draws[i], draws[i + 1], z) for i in range(0, 2 * pairs, 2))
    for i in range(0, 2 * pairs, 2):
        if agreed(draws[i], draws[i + 1], z):
            assert out[i:i + 2] == rewards[i:i + 2]
        else:
            assert out[i] == out[i + 1] == pytest.approx((rewards[i] + rewards[i + 1]) / 2)
    assert sum(out) == pytest.approx(sum(rewards))


@pytest.mark.parametrize("meters, t, below, expected", [
    ((0.6, 0.6, 0.0, 0.15, 0.5), 5, 0.25, "MEDITATE"),     # serenity lowest: +0.05 beats LEISURE/FAMILY_TIME's +0.03
    ((0.6, 0.6, 0.0, 0.25, 0.5), 5, 0.25, None),           # 0.25 itself is not below 0.25; progress 0 never counts
    ((0.6, 0.6, 0.0, 0.5, 0.12), 2, 0.25, "SOCIALIZE"),    # connection: +0.12
    ((0.2, 0.6, 0.0, 0.5, 0.5), 3, 0.25, "SLEEP"),         # vitality at night: SLEEP +0.2
    ((0.2, 0.6, 0.0, 0.5, 0.5), 4, 0.25, "SLEEP"),         # in the morning SLEEP gives 0.35 x 0.2 = 0.07 > NAP's 0.05
    ((0.6, 0.2, 0.0, 0.5, 0.5), 0, 0.25, "SLEEP"),         # cognition: 0.35 x 0.22 = 0.077 > MEDITATE/NAP's 0.03
    ((0.6, 0.6, 0.9, 0.3, 0.5), 0, 0.5, "MEDITATE"),       # the threshold is the setting's
    ((0.6, 0.6, 0.0, 0.05, 0.5), 1, 0.25, "MEDITATE"),     # 0.05 + 0.05 reaches the crash line (0.10) exactly
    ((0.6, 0.6, 0.0, 0.04, 0.5), 1, 0.25, None),           # 0.04 + 0.05 does not: it crashes whatever is played
    ((0.6, 0.6, 0.0, 0.0, 0.2), 1, 0.25, "SOCIALIZE"),     # then the next low meter that can be kept up
    ((0.6, 0.6, 0.0, 0.15, 0.5), 3, 0.25, None),           # at night only SLEEP: MEDITATE would miss the night
    ((0.6, 0.15, 0.0, 0.15, 0.5), 7, 0.25, "SLEEP"),       # cognition ties serenity at 0.15 and comes first: SLEEP
])
def test_the_restoring_action_raises_the_lowest_meter_most(meters, t, below, expected):
    assert restoring_action(meters, t, below) == expected


def test_state_meters_are_the_meters_the_week_recorded_before_each_step(greedy_week):
    """Replayed in batches by step, each row's meters equal the recorded week's meters after the step before it."""
    record, rows = greedy_week
    meters = state_meters(rows)
    for row, m in zip(rows, meters, strict=True):
        t = int(row["t"])
        if t > 0:
            assert m == pytest.approx(record["steps"][t - 1]["meters"], abs=1e-6)
    assert len({tuple(m) for m in meters}) == len(rows)


def test_shared_prefix():
    assert shared_prefix([[1, 2, 3], [1, 2, 4], [1, 2]]) == 2
    assert shared_prefix([[5, 6], [5, 6]]) == 2
    assert shared_prefix([[1], [2]]) == 0


@pytest.fixture(scope="module")
def four_states(sft_model, greedy_week):
    """The SFT student, its tokenizer, its stop ids and four states of its own greedy week, encoded."""
    _, rows = greedy_week
    model, tokenizer = load_model(sft_model)
    return model, tokenizer, [tokenizer.eos_token_id], encode_prompts(tokenizer, [rows[t]["prompt"] for t in (0, 6, 13, 20)])


def test_the_pair_is_the_greedy_reply_and_the_runner_up(four_states):
    import torch

    model, tokenizer, stop, ids = four_states
    pairs = pair_replies(model, tokenizer, ids, tokenizer.pad_token_id, stop, 16)
    greedy = greedy_replies(model, ids, tokenizer.pad_token_id, stop, 16)
    assert len(pairs) == 2 * len(ids)
    action_ids = [tokenizer(f"BELIEF: S=0.5\nACTION: {a}", add_special_tokens=False)["input_ids"][-1] for a in ACTIONS]
    assert len(set(action_ids)) == len(ACTIONS), "the tiny tokenizer has one token per action"
    for n, g in enumerate(greedy):
        first, second = pairs[2 * n], pairs[2 * n + 1]
        assert first == g, "the first of a pair is the policy's own greedy reply"
        one, two = (parse_reply(tokenizer.decode(r, skip_special_tokens=True)) for r in (first, second))
        assert one.belief == two.belief and one.action != two.action and two.ok
        k = next(i for i, tok in enumerate(g) if tok in action_ids)
        with torch.no_grad():
            logits = model(input_ids=torch.tensor([ids[n] + g[:k]])).logits[0, -1]
        ranked = [ACTIONS[i] for i in torch.argsort(logits[action_ids], descending=True)[:2].tolist()]
        assert [one.action_name, two.action_name] == ranked


@pytest.mark.parametrize("head", [
    "Saw after SLEEP (Mon night): anomaly V+0.05 C-0.02.\nPlan: MEDITATE is best.\nBELIEF: S=0.49 M=0.46 W=0.56",
    "BELIEF: S=0.49 M=0.46 W=0.56",
    "",
])
def test_each_candidate_is_what_the_reply_says_before_its_action_then_another_action(four_states, head):
    """A reasoning student's pair keeps its reasoning and belief; a protocol-lines student's keeps its belief line."""
    _, tokenizer, stop, _ = four_states
    reply = f"{head}\nACTION: NAP" if head else "ACTION: NAP"
    for action, ids in zip(ACTIONS, action_candidates(tokenizer, reply, stop[0]), strict=True):
        assert ids[-1] == stop[0]
        assert tokenizer.decode(ids[:-1]) == (f"{head}\nACTION: {action}" if head else f"ACTION: {action}")


def test_a_named_challenger_replaces_the_runner_up_unless_it_is_the_greedy_action(four_states):
    model, tokenizer, stop, ids = four_states
    plain = pair_replies(model, tokenizer, ids, tokenizer.pad_token_id, stop, 16)
    greedy = [parse_reply(tokenizer.decode(plain[2 * n], skip_special_tokens=True)).action_name for n in range(len(ids))]
    challengers = ["MEDITATE" if greedy[0] != "MEDITATE" else "NAP", greedy[1], None, "SOCIALIZE"]
    named = pair_replies(model, tokenizer, ids, tokenizer.pad_token_id, stop, 16, challengers)
    for n, c in enumerate(challengers):
        assert named[2 * n] == plain[2 * n], "the first of a pair is still the greedy reply"
        one, two = (parse_reply(tokenizer.decode(r, skip_special_tokens=True)) for r in named[2 * n:2 * n + 2])
        assert one.belief == two.belief
        if c is None or c == greedy[n]:
            assert named[2 * n + 1] == plain[2 * n + 1], "no challenger, or the greedy one: the runner-up"
        else:
            assert two.action_name == c


def test_a_branch_under_several_futures(sft_model, greedy_week):
    """Future 0 is the week's own (the student's greedy reply gives back its week); the others redraw the
    luck from the branch step on; the reward is their mean."""
    record, rows = greedy_week
    model, tokenizer = load_model(sft_model)
    states = [State.of_row(rows[t]) for t in (3, 26)]
    branches = [(s, record["steps"][s.t]["response"]) for s in states]
    one = branch_scores(model, tokenizer, [tokenizer.eos_token_id], 16, branches, "test")
    three = branch_scores(model, tokenizer, [tokenizer.eos_token_id], 16, branches, "test", futures=3)
    for a, b in zip(one, three, strict=True):
        assert a["draws"] == [a["final_score"]] and a["final_score"] == pytest.approx(record["score"]["final_score"], abs=1e-12)
        assert len(b["draws"]) == 3 and b["draws"][0] == a["final_score"]
        assert b["final_score"] == pytest.approx(np.mean(b["draws"]))
        assert len(set(b["draws"])) == 3, "each redrawn future is other luck"


@pytest.mark.parametrize("values, generations, match", [
    (dict(group="best"), 8, "branch.group must be sampled or pair"),
    (dict(futures=0), 8, "branch.futures=0: input should be greater than or equal to 1"),
    (dict(group="pair"), 8, "set num_generations=2"),
    (dict(agree_z=-1.0), 8, "branch.agree_z=-1.0: input should be greater than or equal to 0"),
    (dict(agree_z=2.0, futures=6), 8, "needs branch.group=pair"),
    (dict(agree_z=2.0, group="pair", futures=1), 2, "branch.futures >= 2"),
    (dict(challenger="best"), 2, "branch.challenger must be runner_up or restore"),
    (dict(challenger="restore"), 8, "needs branch.group=pair"),
    (dict(group="pair", restore_below=0.0), 2, "branch.restore_below=0.0: input should be greater than 0"),
    (dict(group="pair", restore_only=True), 2, "restore_only .* needs branch.challenger=restore"),
])
def test_branch_settings_are_checked(values, generations, match):
    with pytest.raises(RhythmError, match=match):
        validate_branch(BranchMode(**values), generations)
    validate_branch(BranchMode(group="pair", futures=6, agree_z=2.0), 2)  # the shipped pairs config's


@pytest.mark.slow
def test_pairs_run_compares_the_greedy_action_with_the_runner_up(run_cli, tmp_path, sft_model):
    """Two steps of the shipped pairs config on one person: every group is one belief line with two actions,
    no state is at the last step, and a pair the futures do not agree on scores the same twice."""
    out = tmp_path / "pairs"
    code, stdout, err = run_cli(
        "grpo", "--config", PAIRS_CONFIG, "--model", str(sft_model), "-o", str(out), "--max-steps", "2",
        "--set", "rollout_seeds=3", "--set", "branch.futures=3", "--set", "logging_steps=1", "--set", "probe_states=4",
        "--set", "anchor_states=4", "--set", "per_device_train_batch_size=8", "-q")  # 4 pairs a step
    assert code == 0, err
    summary = orjson.loads(stdout)
    assert summary["global_step"] == 2
    # one person's 28 states, the last one left out: the summary counts what was trained on beside what was built
    assert (summary["prompts"], summary["prompts_trained"]) == (28, 27)
    assert "prompts: 28 from 1 episodes (in-dist 28), 27 of them trained on;" in " ".join(err.split())
    lines = [orjson.loads(x) for x in (out / "reward_log.jsonl").read_bytes().splitlines()]
    assert len(lines) == 2 * 8
    groups = defaultdict(list)
    for ln in lines:
        groups[(ln["batch"], ln["group"])].append(ln)
    assert all(len(g) == 2 for g in groups.values())
    spread = 0
    for a, b in groups.values():
        assert a["t"] == b["t"] < EPISODE_STEPS - 1 and a["seed"] == b["seed"] == 3
        assert a["belief"] == b["belief"] and a["action"] != b["action"]
        spread += a["reward"] != b["reward"]
    log = [orjson.loads(x) for x in (out / "training_log.jsonl").read_bytes().splitlines()]
    steps = [e for e in log if "loss" in e]
    assert {"anchor/kl", "groups_without_spread"} <= set(steps[-1])
    assert np.mean([e["groups_without_spread"] for e in steps]) == pytest.approx(1 - spread / len(groups))


@pytest.mark.slow
def test_restore_pairs_compare_the_greedy_action_with_the_action_that_keeps_a_low_meter_up(run_cli, tmp_path, sft_model):
    """challenger restore with restore_only: every trained state has a meter to keep off the crash line, and
    its pair is the greedy action against the restoring action (the runner-up only where the two coincide)."""
    out = tmp_path / "restore"
    code, stdout, err = run_cli(
        "grpo", "--config", PAIRS_CONFIG, "--model", str(sft_model), "-o", str(out), "--max-steps", "1",
        "--set", "rollout_seeds=3-4", "--set", "branch.futures=2", "--set", "branch.challenger=restore",
        "--set", "branch.restore_only=true", "--set", "branch.restore_below=0.6", "--set", "probe_states=4",
        "--set", "anchor_states=4")
    assert code == 0, err
    assert "have a meter to keep off the crash line" in err
    lines = [orjson.loads(x) for x in (out / "reward_log.jsonl").read_bytes().splitlines()]
    groups = defaultdict(list)
    for ln in lines:
        groups[(ln["batch"], ln["group"])].append(ln)
    pairs = list(groups.values())
    assert len(pairs) == 8
    named = [restoring_action(m, a["t"], 0.6) for (a, _), m in zip(pairs, state_meters([a for a, _ in pairs]), strict=True)]
    for (a, b), action in zip(pairs, named, strict=True):
        assert action is not None, "only states with a restoring action are trained"
        assert a["belief"] == b["belief"] and a["action"] != b["action"]
        assert b["action"] == action or a["action"] == action


@pytest.mark.slow
def test_a_resumed_anchored_run_ends_as_an_uninterrupted_one(run_cli, tmp_path, sft_model):
    """The probe and the anchor measure against the policy the run started from, not the checkpoint it resumed,
    and the anchor draws the states an uninterrupted run draws next: a run resumed at step 2 of 4 logs the same
    figures and saves the same weights."""
    import shutil

    whole = tmp_path / "whole"
    args = ["grpo", "--config", PAIRS_CONFIG, "--model", str(sft_model), "--max-steps", "4", "--set", "rollout_seeds=3",
            "--set", "branch.futures=2", "--set", "logging_steps=1", "--set", "probe_states=4", "--set", "anchor_states=4",
            "--set", "save_steps=2", "--set", "save_total_limit=5", "--set", "per_device_train_batch_size=4", "-q"]  # 2 states a step
    code, _, err = run_cli(*args, "-o", str(whole))
    assert code == 0, err
    resumed = tmp_path / "resumed"
    shutil.copytree(whole, resumed)  # what a run killed after checkpoint-2 holds, and more, which the resume rewrites
    shutil.rmtree(resumed / "checkpoint-4")
    code, _, err = run_cli(*args, "-o", str(resumed), "--set", f"resume_from_checkpoint={resumed / 'checkpoint-2'}")
    assert code == 0, err
    figures = ("probe/kl", "probe/action_changed", "anchor/kl", "loss")

    def logged(folder):
        return [{k: e.get(k) for k in figures} for e in read_training_log(folder / "training_log.jsonl") if "loss" in e]

    assert logged(resumed) == logged(whole) and len(logged(whole)) == 4
    assert (resumed / "model.safetensors").read_bytes() == (whole / "model.safetensors").read_bytes()
