"""Branch mode: each sampled reply is scored by the week it leads to, the policy playing on greedily.

The checks are independent of the branch code: a branch that replays the student's own greedy reply
must give back the student's own greedy week (eval's runner, eval's engine), and a run's logged
rewards must be what the starting model's weeks score."""

from __future__ import annotations

from collections import defaultdict

import numpy as np
import orjson
import pytest

from rhythm.protocol import parse_reply
from rhythm.train.grpo.branch import State, branch_key, branch_scores, decision_mask, prompt_key
from rhythm.train.grpo.data import PromptOptions, build_prompts

from .helpers import TINY_CONFIG, load_model

FROM_MODEL = ["--set", "adapter=null", "--set", "use_peft=false"]


def test_branching_on_the_students_own_reply_gives_back_its_own_week(sft_model, greedy_week):
    record, rows = greedy_week
    model, tokenizer = load_model(sft_model)
    states = [State.of_row(rows[t]) for t in (0, 9, 27)]
    branches = [(s, record["steps"][s.t]["response"]) for s in states]
    scores = branch_scores(model, tokenizer, [tokenizer.eos_token_id], 16, branches, "test")
    for s, score in zip(states, scores, strict=True):
        assert score["final_score"] == pytest.approx(record["score"]["final_score"], abs=1e-12), s.t
        assert score["return"] == pytest.approx(record["score"]["return"], abs=1e-12) and score["crashes"] == record["score"]["crashes"]


def test_another_action_changes_the_week_from_its_step_on(sft_model, greedy_week):
    """The branch week plays the recorded actions before t, the branch action at t; the score is the
    grader's for that week (its return is the env's for those actions)."""
    record, rows = greedy_week
    model, tokenizer = load_model(sft_model)
    t = 5
    state = State.of_row(rows[t])
    own = parse_reply(record["steps"][t]["response"]).action_name
    other = "SLEEP" if own != "SLEEP" else "DEEP_WORK"
    reply = f"BELIEF: S=0.50 M=0.50 W=0.50\nACTION: {other}"
    [score] = branch_scores(model, tokenizer, [tokenizer.eos_token_id], 16, [(state, reply)], "test")
    assert score["final_score"] != pytest.approx(record["score"]["final_score"], abs=1e-9)
    assert state.replies == tuple(s["response"] for s in record["steps"][:t])


def test_the_futures_of_a_branch_played_in_one_batch_score_as_played_one_future_at_a_time(sft_model, greedy_week):
    """Every future of every branch shares one lockstep batch (the env takes a future per week); split into a batch
    per future (``max_rows``), the same weeks score the same, and the own future is the greedy week itself."""
    record, rows = greedy_week
    model, tokenizer = load_model(sft_model)
    branches = [(State.of_row(rows[t]), reply) for t in (2, 15, 26)
                for reply in (record["steps"][t]["response"], "BELIEF: S=0.50 M=0.50 W=0.50\nACTION: NAP")]
    together = branch_scores(model, tokenizer, [tokenizer.eos_token_id], 16, branches, "test", futures=3)
    apart = branch_scores(model, tokenizer, [tokenizer.eos_token_id], 16, branches, "test", futures=3,
                          max_rows=len(branches))
    assert [s["draws"] for s in together] == [s["draws"] for s in apart]
    assert all(len(s["draws"]) == 3 and s["final_score"] == pytest.approx(np.mean(s["draws"])) for s in together)
    assert together[0]["draws"][0] == pytest.approx(record["score"]["final_score"], abs=1e-12)
    assert len({tuple(s["draws"]) for s in together}) > 1


def test_state_identity_and_branch_keys(greedy_week):
    _, rows = greedy_week
    keys = {prompt_key(r["prompt"]) for r in rows}
    assert len(keys) == len(rows) == 28, "two states of one week share a prompt key"
    assert [State.of_row(r).t for r in rows] == list(range(28))
    a = "BELIEF: S=0.10 M=0.20 W=0.30\nACTION: SLEEP"
    b = "BELIEF: S=0.90 M=0.20 W=0.30\nACTION: SLEEP"
    assert branch_key(a, 3) == branch_key(b, 3), "before the last step only the action decides the week"
    assert branch_key(a, 27) != branch_key(b, 27), "at the last step the stated belief is graded"
    with pytest.raises(ValueError, match="holds 3 replies"):
        State.of_row({**rows[3], "t": 4})


@pytest.mark.slow
def test_branch_mode_run_rewards_each_reply_with_its_weeks_score(run_cli, tmp_path, sft_model):
    """Two steps through the CLI on the student's own states: replies of a group that name the same
    action share a score; the first step's scores are the starting model's weeks."""
    out = tmp_path / "grpo"
    code, stdout, err = run_cli(
        "grpo", "--config", TINY_CONFIG, "--model", str(sft_model), *FROM_MODEL, "--set", "data=", "-o", str(out),
        "--max-steps", "2", "--set", "mode=branch", "--set", "reward_funcs=[branch_score]", "--set", "reward_weights=[1.0]",
        "--set", "rollout_seeds=3", "--set", "num_generations=4", "--set", "per_device_train_batch_size=8",
        "--set", "logging_steps=1", "--set", "probe_states=4", "-q")
    assert code == 0, err
    summary = orjson.loads(stdout)
    assert summary["mode"] == "branch" and summary["global_step"] == 2
    log = [orjson.loads(x) for x in (out / "training_log.jsonl").read_bytes().splitlines()]
    steps = [e for e in log if "loss" in e]
    assert [e["step"] for e in steps] == [1, 2]  # every step logged (the checks below run on each)
    for e in steps:
        assert {"rewards/branch_score/mean", "groups_without_spread", "probe/kl", "probe/action_changed"} <= set(e)
    lines = [orjson.loads(x) for x in (out / "reward_log.jsonl").read_bytes().splitlines()]
    assert len(lines) == 16
    groups = defaultdict(list)
    for ln in lines:
        groups[(ln["batch"], ln["group"])].append(ln)
    for group in groups.values():
        by_key = defaultdict(set)
        for ln in group:
            by_key[branch_key(ln["reply"], ln["t"])].add(ln["rewards"]["branch_score"])
        assert all(len(v) == 1 for v in by_key.values()), "one action, two weeks"
    for e in steps:  # the share of groups whose replies all scored the same, from the reward log itself
        mine = [g for (batch, _), g in groups.items() if g[0]["step"] == e["step"]]
        assert e["groups_without_spread"] == pytest.approx(np.mean([len({ln["reward"] for ln in g}) == 1 for g in mine]))
    model, tokenizer = load_model(sft_model)
    rows, _ = build_prompts([], PromptOptions(), [orjson.loads(x) for x in (out / "student_rollouts.jsonl").read_bytes().splitlines()])
    by_t = {State.of_row(r).t: State.of_row(r) for r in rows}
    first = [ln for ln in lines if ln["step"] == 1]
    scores = branch_scores(model, tokenizer, [tokenizer.eos_token_id], 16, [(by_t[ln["t"]], ln["reply"]) for ln in first], "x")
    assert [ln["rewards"]["branch_score"] for ln in first] == pytest.approx([s["final_score"] for s in scores], abs=1e-12)


def test_only_the_judged_tokens_enter_the_loss(sft_model):
    """Before the last step the action line alone; at the last step the belief line alone; without an
    action line, the whole reply."""
    _, tokenizer = load_model(sft_model)
    reply = "BELIEF: S=0.25 M=0.75 W=0.50\nACTION: MEDITATE"
    ids = tokenizer(reply, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
    mask = decision_mask(tokenizer, ids, 4)
    assert 0 < sum(mask) < len(ids) and mask == sorted(mask), "one block at the end"
    kept = tokenizer.decode([i for i, m in zip(ids, mask, strict=True) if m], skip_special_tokens=True)
    assert "MEDITATE" in kept and "S=" not in kept and "0.25" not in kept
    last = decision_mask(tokenizer, ids, 27)
    assert [1 - m for m in last] == mask, "the last step trains exactly the other tokens"
    kept_last = tokenizer.decode([i for i, m in zip(ids, last, strict=True) if m], skip_special_tokens=True)
    assert "0.25" in kept_last and "0.75" in kept_last and "MEDITATE" not in kept_last
    lost = tokenizer("BELIEF: S=0.25 M=0.75 W=0.50", add_special_tokens=False)["input_ids"]
    assert decision_mask(tokenizer, lost, 4) == [1] * len(lost)
    reasoned = tokenizer("Plan: no ACTION beats rest.\n" + reply, add_special_tokens=False)["input_ids"]
    kept = tokenizer.decode([i for i, m in zip(reasoned, decision_mask(tokenizer, reasoned, 4), strict=True) if m])
    assert kept.strip().endswith("MEDITATE") and not any(w in kept for w in ("Plan", "beats", "0.25")), \
        "a reasoning that names ACTION stays out: the last action line is judged"
    lower = tokenizer("BELIEF: S=0.25 M=0.75 W=0.50\n**action:** meditate", add_special_tokens=False)["input_ids"]
    kept = tokenizer.decode([i for i, m in zip(lower, decision_mask(tokenizer, lower, 4), strict=True) if m])
    assert kept.strip().endswith("meditate") and "0.25" not in kept, "the action line parse_reply reads, as written"


@pytest.mark.slow
def test_a_branch_run_under_a_launcher_writes_its_files_once(tmp_path, sft_model, rhythm_cache):
    """Two CPU processes under torchrun: each plays the student's weeks (each needs the prompts), and one writes
    them and says so; they used to write the same student_rollouts.jsonl at once (and each printed every line)."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    out = tmp_path / "grpo"
    env = dict(os.environ, RHYTHM_CACHE=str(rhythm_cache), OMP_NUM_THREADS="1",
               TMPDIR=str(tmp_path))  # torchrun leaves a torchelastic_* folder in TMPDIR
    proc = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2", "-m", "rhythm.train.grpo",
         "--config", TINY_CONFIG, "--set", f"model_name_or_path={sft_model}", *FROM_MODEL, "--set", "data=",
         "--set", f"output_dir={out}", "--set", "max_steps=1", "--set", "mode=branch",
         "--set", "reward_funcs=[branch_score]", "--set", "reward_weights=[1.0]", "--set", "rollout_seeds=0-2",
         "--set", "num_generations=4", "--set", "per_device_train_batch_size=4", "--set", "probe_states=0", "-q"],
        env=env, cwd=Path(__file__).resolve().parents[2], capture_output=True, text=True, timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    (line,) = proc.stdout.strip().splitlines()  # one summary, from rank 0
    assert orjson.loads(line)["global_step"] == 1 and orjson.loads(line)["resolved"]["world_size"] == 2
    assert proc.stderr.count("student rollouts: 3 episodes played") == 1
    weeks = [orjson.loads(x) for x in (out / "student_rollouts.jsonl").read_bytes().splitlines()]
    assert sorted(w["seed"] for w in weeks) == [0, 1, 2]
