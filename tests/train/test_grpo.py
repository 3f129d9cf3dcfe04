"""``rhythm grpo``: bad input, the Hugging Face Jobs spec, and tiny GRPO runs on CPU in both modes (step:
every group scored in one state; episode: whole weeks played and graded as eval grades them)."""

from __future__ import annotations

import shutil
from collections import defaultdict
from importlib import metadata

import numpy as np
import orjson
import pytest
import yaml

from rhythm.config import NULL, load_config
from rhythm.env.batched import BatchedRhythmEnv
from rhythm.env.constants import ACTION_INDEX, EPISODE_STEPS
from rhythm.grader import score_episode
from rhythm.locking import lock_path, output_lock
from rhythm.train.grpo import GRPORunConfig, assign_weeks
from rhythm.train.grpo.rewards import action_value_reward, belief_reward, format_reward

from .helpers import REPO, TINY_CONFIG, read_training_log

FROM_MODEL = ["--set", "adapter=null", "--set", "use_peft=false"]
"""GRPO from a fully trained model (the tiny student's default), given with --model."""


def _reply_cols(line: dict) -> dict:
    return {k: [line[k]] for k in ("condition", "split", "seed", "t", "prefix")}


# ------------------------------------------------------------------------------------ bad input


@pytest.mark.parametrize(
    "args, message",
    [
        (["--data", "nope.jsonl"], "file not found: nope.jsonl"),
        (["--data", "{broken}"], "broken.jsonl:2: not valid JSON"),
        (["--data", "{tampered}"], "tampered.jsonl:1: episode in-dist/train/0 does not replay"),
        (["--adapter", "{tmp}/nope"], "adapter not found:"),
        (["--mode", "week"], "mode must be step, branch or episode, got 'week'"),
        (["--set", "reward_funcs=[format,vibes]"], "unknown reward function(s) vibes"),
        (["--set", "reward_weights=[1.0]"], "reward_weights has 1 values for 3 reward_funcs"),
        (["--set", "reward_funcs=[final_score]", "--set", "reward_weights=null"], "final_score is the score of a played week: it needs mode=episode"),
        (["--set", "reward_funcs=[branch_score]", "--set", "reward_weights=null"], "branch_score is the score of the week a reply leads to: it needs mode=branch"),
        (["--mode", "branch", "--set", "reward_funcs=[branch_score]", "--set", "reward_weights=null", "--set", "step.use_vllm=true"], "branch mode plays weeks with the trained model itself"),
        (["--set", "probe_states=-1"], "probe_states=-1: input should be greater than or equal to 0"),
        (["--set", "anchor_weight=-1"], "anchor_weight=-1.0: input should be greater than or equal to 0"),
        (["--set", "anchor_states=0"], "anchor_states=0: input should be greater than or equal to 1"),
        (["--mode", "episode", "--set", "reward_funcs=[final_score]", "--set", "reward_weights=null", "--set", "anchor_weight=1"], "episode mode has none"),
        (["--mode", "branch"], "mode=branch rewards a reply with branch_score, which reward_funcs lacks (format, belief, action_value)"),
        (["--mode", "episode"], "mode=episode rewards a reply with final_score, which reward_funcs lacks"),
        (["--set", "num_generations=1"], "num_generations=1: input should be greater than or equal to 2"),
        (["--set", "per_device_train_batch_size=12"], "(12 completions) must be divisible by num_generations (8)"),
        (["--mode", "episode", "--set", "reward_funcs=[final_score]", "--set", "reward_weights=null", "--set", "per_device_train_batch_size=5"], "per_device_train_batch_size (5) must divide it"),
        (["--set", "step.max_episodes=10"], "unknown key 'step.max_episodes' for StepMode; did you mean 'step.max_prompts'?"),
        (["--set", "lora_rank=8"], "unknown key 'lora_rank' for GRPORunConfig; did you mean 'lora_r'?"),
        (["--set", "max_prompts=8"], "unknown key 'max_prompts' for GRPORunConfig; did you mean 'step.max_prompts'?"),
        (["--set", "learning_rate=fast"], "learning_rate='fast' is not a valid float"),
        (["--set", "top_p=5"], "top_p=5.0: input should be less than or equal to 1"),
        (["--set", "reward_weights=[1, 1, .nan]"], "reward_weights must be finite numbers"),
        (["--set", "reward_funcs=[format,belief,format]"], "reward_funcs names one reward twice"),
        (["--set", "step.generation_batch_size=64"], "step.generation_batch_size (64) spans more than one optimizer step (16 completions"),
        # a setting of a section the mode does not read would be recorded and do nothing
        (["--set", "episode.every_k_turns=4"], "episode.every_k_turns is read by episode mode only; mode=step would ignore it"),
        (["--set", "branch.futures=6"], "branch.futures is read by branch mode only; mode=step would ignore it"),
        (["--mode", "episode", "--set", "reward_funcs=[final_score]", "--set", "reward_weights=null", "--set", "step.max_prompts=3"],
         "step.max_prompts is read by step and branch mode only; mode=episode would ignore it"),
        (["--set", "step.generation_batch_size=0"], "step.generation_batch_size=0: input should be greater than or equal to 1"),
        (["--set", "rollout_seeds=5000-5001", "--set", "rollout_conditions=[]"], "rollout_conditions, which is empty"),
        (["--max-steps", "0"], "max_steps must be positive or -1"),
        (["--dry-run"], "--dry-run describes a Hugging Face Jobs submission"),
        (["--flavor", "a10g-large", "--set", "hub_model_id=me/x", "--set", "jobs.data_repo=me/d"], "a job cannot read the local adapter"),
    ],
)
def test_bad_input_exits_2_with_one_line(run_cli, tmp_path, teacher, args, message):
    broken = tmp_path / "broken.jsonl"
    broken.write_bytes(teacher.read_bytes().splitlines()[0] + b"\n{\"schema\": \n")
    record = orjson.loads(teacher.read_bytes().splitlines()[0])
    record["steps"][3]["meters"][0] += 0.05
    (tmp_path / "tampered.jsonl").write_bytes(orjson.dumps(record) + b"\n")
    adapter = tmp_path / "adapter"
    adapter.mkdir()
    args = [a.format(broken=broken, tampered=tmp_path / "tampered.jsonl", tmp=tmp_path) for a in args]
    code, out, err = run_cli("grpo", "--config", TINY_CONFIG, "--adapter", str(adapter), "--data", str(teacher),
                             "-o", str(tmp_path / "out"), *args)
    assert code == 2, err
    assert out == "" and len(err.strip().splitlines()) == 1 and message in err, err
    assert not (tmp_path / "out" / "training_log.jsonl").exists()


def test_too_few_states_for_one_batch_are_refused_before_the_model_loads(run_cli, tmp_path, teacher, tiny_student, monkeypatch):
    """TRL would train 0 steps and the run would save the starting model as refined: one line, exit 2 instead."""
    monkeypatch.setattr("rhythm.train.grpo.trainer.load_policy", lambda *a, **k: pytest.fail("the model was loaded"))
    code, out, err = run_cli("grpo", "--config", TINY_CONFIG, "--model", str(tiny_student), *FROM_MODEL, "--data", str(teacher),
                             "-o", str(tmp_path / "out"), "--set", "step.max_prompts=1", "-q")
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1, err
    assert "1 training states, fewer than the 2 one generation batch needs (16 completions / num_generations 8)" in err
    assert not (tmp_path / "out" / "model.safetensors").exists()


def test_a_second_run_on_one_output_folder_stops_at_once(run_cli, tmp_path, teacher):
    """While another run holds the output folder: exit 2 with one line, the folder untouched."""
    out = tmp_path / "out"
    out.mkdir()
    (out / "training_log.jsonl").write_bytes(b'{"step": 1}\n')
    adapter = tmp_path / "adapter"
    adapter.mkdir()
    with output_lock(out):
        code, stdout, err = run_cli("grpo", "--config", TINY_CONFIG, "--adapter", str(adapter), "--data", str(teacher),
                                    "-o", str(out), "-q")
    assert code == 2 and stdout == ""
    assert err.splitlines() == [f"rhythm: error: {out} is being written by another rhythm run (it holds {lock_path(out)}); "
                                "wait for it to finish, or pass --wait-lock to wait for it"]
    assert [p.name for p in out.iterdir()] == ["training_log.jsonl"]
    assert (out / "training_log.jsonl").read_bytes() == b'{"step": 1}\n'


def test_flavor_dry_run_describes_a_grpo_job(hub, tmp_path, teacher):
    from huggingface_hub import HfApi

    from .helpers import rhythm

    HfApi(endpoint=hub.url, token=hub.token).create_repo("tester/rhythm-sft")  # the adapter it refines is there
    args = ["grpo", "--config", str(REPO / "rhythm" / "configs" / "grpo.yaml"), "--adapter", "tester/rhythm-sft", "--data", str(teacher),
            "--flavor", "a10g-large", "--set", "hub_model_id=tester/rhythm-grpo", "--set", "jobs.data_repo=tester/rhythm-teacher"]
    code, out, err = rhythm(hub, tmp_path, *args, "--dry-run")
    assert code == 0, err
    spec = orjson.loads(out)
    assert spec["flavor"] == "a10g-large" and spec["labels"] == {"rhythm-stage": "grpo"} and spec["timeout"] == "4h"
    assert spec["environment"]["RHYTHM_STAGE"] == "grpo" and spec["environment"]["RHYTHM_OUTPUT_REPO"] == "tester/rhythm-grpo"
    assert spec["environment"]["RHYTHM_DATA_FILES"] == "teacher.jsonl"
    assert spec["secrets"]["HF_TOKEN"] == "***"
    assert spec["would_upload"] == {"data_repo": "tester/rhythm-teacher", "files": [str(teacher)],
                                    "private": "if created (an existing repo keeps its visibility)"}
    assert spec["would_commit"]["repo"] == "tester/rhythm-grpo" and spec["would_commit"]["script"] == "rhythm_job/run.py"
    assert "dry run: nothing was written to the Hub" in err

    # the committed files: a job script that runs the grpo stage, and a config the stage itself accepts
    from rhythm.train.jobs import plan_job

    cfg = load_config(GRPORunConfig, REPO / "rhythm" / "configs" / "grpo.yaml", {"adapter": "tester/rhythm-sft", "data": str(teacher)})
    plan = plan_job("grpo", cfg, run_repo="tester/rhythm-grpo", data=[str(teacher)], data_repo="tester/rhythm-teacher",
                    flavor="a10g-large", timeout=cfg.jobs.timeout)
    assert 'STAGE = "grpo"' in plan.files["rhythm_job/run.py"].decode()
    assert "rhythm_job/src/rhythm/train/grpo/__main__.py" in plan.files and "rhythm_job/src/rhythm/train/grpo/rewards.py" in plan.files
    job_cfg = load_config(GRPORunConfig, None, yaml.safe_load(plan.files["rhythm_job/config.yaml"]))
    assert job_cfg.adapter == "tester/rhythm-sft" and job_cfg.data == "teacher.jsonl" and job_cfg.push_to_hub
    assert job_cfg.model_name_or_path == "Qwen/Qwen2.5-3B-Instruct" and job_cfg.jobs.flavor is None

    # use_vllm pins vllm in the job script, so it must be installed here
    from importlib.util import find_spec

    code, out, err = rhythm(hub, tmp_path, *args, "--set", "step.use_vllm=true", "--dry-run")
    if find_spec("vllm") is None:
        assert code == 2 and "vllm is not installed" in err, err
    else:  # pragma: no cover - a machine with vllm
        assert code == 0 and any(line.startswith("#   \"vllm==") for line in plan_job(
            "grpo", cfg, run_repo="tester/rhythm-grpo", data=[str(teacher)], data_repo="tester/rhythm-teacher",
            flavor="a10g-large", timeout=cfg.jobs.timeout, packages=("vllm",)).files["rhythm_job/run.py"].decode().splitlines())


@pytest.mark.parametrize("name", ["grpo.yaml", "grpo-tiny.yaml", "grpo-tiny-branch.yaml", "grpo-tiny-pairs.yaml", "grpo-tiny-restore.yaml",
                                  "grpo-tiny-episode.yaml", "grpo-small.yaml"])
def test_shipped_configs_make_valid_trl_configs(name, tmp_path, teacher):
    """Every shipped config passes validation and TRL's own GRPOConfig checks (batch divisibility...)."""
    from rhythm.train.grpo import episode_batch, grpo_config, resolve_precision, validate

    (tmp_path / "adapter").mkdir()
    cfg = load_config(GRPORunConfig, REPO / "rhythm" / "configs" / name, {"adapter": str(tmp_path / "adapter"), "data": str(teacher)})
    validate(cfg)
    args = grpo_config(cfg, resolve_precision(cfg, cuda=False))
    assert args.bf16 is False and args.gradient_checkpointing is False and args.num_generations == cfg.num_generations
    assert args.generation_batch_size % args.num_generations == 0 and args.reward_weights == cfg.reward_weights
    assert args.disable_dropout  # greedy continuations, pairs, probe and anchor read the policy as eval plays it
    if cfg.mode == "episode":  # one batch of whole weeks per optimizer step, rows kept in order
        assert args.generation_batch_size == episode_batch(cfg) == args.per_device_train_batch_size * args.gradient_accumulation_steps
        assert args.shuffle_dataset is False
    else:
        assert args.shuffle_dataset is True


def test_branch_mode_keeps_one_row_a_prompt():
    """TRL hands the rollout prompts alone, and a branch is played for the person its prompt names: a row whose prompt
    reads exactly as an earlier one's (two people's first steps, the start meters to two decimals) is left out, said."""
    from rhythm.train.grpo.trainer import _unique_prompts

    said: list[str] = []
    rows = [{"prompt": [{"role": "user", "content": text}], "seed": seed} for seed, text in ((10, "a"), (695, "a"), (3, "b"))]
    assert [r["seed"] for r in _unique_prompts(rows, said.append)] == [10, 3]
    assert said == ["branch mode: 1 prompts left out: each reads exactly as another person's, and a branch is played "
                    "for the person its prompt names"]
    assert _unique_prompts(rows[::2], said.append) == rows[::2] and len(said) == 1


def test_rows_are_assigned_to_weeks_in_arrival_order():
    a, b = ("in-dist", "train", 3, 0), ("in-dist", "train", 3, 7)
    assert assign_weeks([a, a, b, b, a]) == [0, 1, 0, 1, 2]


# ------------------------------------------------------------------------------------- tiny runs


@pytest.mark.slow
def test_step_mode_run_scores_each_group_in_one_state(run_cli, tmp_path, teacher, sft_model):
    """Three steps from the SFT model through the CLI, with the student's own rollouts among the prompts
    (each the conversation so far) and a KL term; the model, logs and config are saved and every reward
    is reproducible from its row."""
    sft_out = sft_model
    out = tmp_path / "grpo"
    code, stdout, err = run_cli(
        "grpo", "--config", TINY_CONFIG, "--model", str(sft_out), *FROM_MODEL, "--data", str(teacher), "-o", str(out),
        "--max-steps", "3", "--set", "num_generations=4", "--set", "per_device_train_batch_size=8",
        "--set", "max_completion_length=24", "--set", "logging_steps=1", "--set", "step.every_k_steps=2",
        "--set", "rollout_seeds=0", "--set", "rollout_conditions=[discrete]", "--set", "beta=0.04",
        "--set", "step.strip_reasoning=true", "--set", "probe_states=4", "-q")
    assert code == 0, err
    summary = orjson.loads(stdout)
    assert summary["global_step"] == 3 and summary["mode"] == "step" and summary["reward_batches"] == 3
    said = " ".join(err.split())  # the console wraps long lines
    assert "grpo (step): 3 steps" in said and "student rollouts: 1 episodes played" in said
    assert "{'loss'" not in err  # -q: the log entries go to training_log.jsonl, not the terminal
    card = (out / "README.md").read_text()
    assert "[None]" not in card and f"| base model | `{sft_out}` |" in card and "| steps | 3 |" in card
    for name in ("model.safetensors", "config.json", "tokenizer.json", "grpo_config.yaml", "training_log.jsonl",
                 "reward_log.jsonl", "prompts_report.json", "grpo_summary.json", "student_rollouts.jsonl"):
        assert (out / name).exists(), name
    assert not (out / "ref").exists(), "TRL's frozen reference model was saved as part of the result"
    assert not (out / "adapter_config.json").exists()

    # the model is the SFT one, trained further: same tensors, different weights
    from safetensors.numpy import load_file

    before, after = load_file(sft_out / "model.safetensors"), load_file(out / "model.safetensors")
    assert set(before) == set(after)
    assert max(float(np.abs(after[k] - before[k]).max()) for k in before) > 1e-5

    # prompts: teacher states (every 2nd step) and the student's own rollout
    report = orjson.loads((out / "prompts_report.json").read_bytes())
    assert report["by_condition"] == {"in-dist": 42, "discrete": 14} and report["prompts"] == 56
    assert report["by_source"]["bayes"] == 42 and sum(report["by_source"].values()) == 56
    rollout = orjson.loads((out / "student_rollouts.jsonl").read_bytes())
    assert rollout["agent"] == f"model:{sft_out}" and rollout["split"] == "train" and len(rollout["steps"]) == EPISODE_STEPS
    assert rollout["protocol"] == 2

    # the training log: TRL's history with stage grpo, one mean per reward function per step, and the KL
    log = read_training_log(out / "training_log.jsonl")
    assert all(e["stage"] == "grpo" for e in log)
    steps = [e for e in log if "loss" in e]
    assert [e["step"] for e in steps] == [1, 2, 3]
    for e in steps:
        assert {"reward", "rewards/format/mean", "rewards/belief/mean", "rewards/action_value/mean", "kl"} <= set(e)

    # the reward log: 8 replies per step in groups of 4, each group one state, every reward reproducible
    lines = [orjson.loads(line) for line in (out / "reward_log.jsonl").read_bytes().splitlines()]
    assert len(lines) == 24 and [ln["step"] for ln in lines] == [1] * 8 + [2] * 8 + [3] * 8
    groups = defaultdict(list)
    for ln in lines:
        groups[(ln["batch"], ln["group"])].append(ln)
    assert len(groups) == 6 and all(len(g) == 4 for g in groups.values())
    weights = dict(zip(["format", "belief", "action_value"], [0.2, 0.25, 1.0], strict=True))
    for group in groups.values():
        states = {orjson.dumps({k: ln[k] for k in ("condition", "split", "seed", "t", "prefix")}) for ln in group}
        assert len(states) == 1, "a group's replies were scored in different states"
        value_of = {}
        for ln in group:
            reply = [[{"role": "assistant", "content": ln["reply"]}]]
            assert ln["rewards"]["action_value"] == action_value_reward(None, reply, **_reply_cols(ln))[0]
            assert ln["rewards"]["belief"] == belief_reward(None, reply, **_reply_cols(ln))[0]
            assert ln["rewards"]["format"] == format_reward(None, reply)[0]
            assert ln["reward"] == pytest.approx(sum(w * ln["rewards"][n] for n, w in weights.items()))
            assert value_of.setdefault(ln["action"], ln["rewards"]["action_value"]) == ln["rewards"]["action_value"]
    for e in steps:  # TRL's per-function means are the means of exactly these replies
        mine = [ln for ln in lines if ln["step"] == e["step"]]
        for name in weights:
            assert e[f"rewards/{name}/mean"] == pytest.approx(np.mean([ln["rewards"][name] for ln in mine]), abs=1e-5)

    # the effective config round-trips, with provenance; and eval can load the result
    written = yaml.safe_load((out / "grpo_config.yaml").read_text())
    provenance = written.pop("_provenance")
    cfg = load_config(GRPORunConfig, out / "grpo_config.yaml")
    assert cfg.beta == 0.04 and cfg.max_steps == 3 and cfg.model_name_or_path == str(sft_out) and str(cfg.rollout_seeds) == "0"
    assert cfg.adapter is None and cfg.use_peft is False and cfg.step.strip_reasoning is True
    assert provenance["stage"] == "grpo" and provenance["versions"]["trl"] == metadata.version("trl")
    assert provenance["trl"] == {"generation_batch_size": 8, "steps_per_generation": 1, "gradient_accumulation_steps": 1}
    from rhythm.model.load import ModelOptions, load_model

    _, _, source = load_model(str(out), ModelOptions(device="cpu"))
    assert source.adapter is None and source.path == str(out)


@pytest.mark.slow
def test_episode_mode_plays_whole_weeks_and_rewards_their_final_score(tmp_path, teacher, sft_model, capsys, monkeypatch):
    """Two steps of episode mode through ``python -m rhythm.train.grpo`` (the accelerate / Jobs entry), its data on
    stdin (read once, for the people played and the probe's states alike): each step the student plays two weeks
    of one person; every trained turn is rewarded with the final score of its week, which the grader reproduces
    from the actions alone."""
    import io
    import sys

    from rhythm.train.grpo.__main__ import main

    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(teacher.read_bytes())))
    sft_out = sft_model
    out = tmp_path / "episode"
    overrides = ["adapter=null", f"model_name_or_path={sft_out}", "use_peft=false", "data=-", f"output_dir={out}",
                 "mode=episode", "max_steps=2", "num_generations=2", "episode.every_k_turns=7", "per_device_train_batch_size=8",
                 "max_completion_length=24", "reward_funcs=[final_score,format]", "reward_weights=[1.0,0.1]", "logging_steps=1"]
    code = main(["--config", TINY_CONFIG, *[a for kv in overrides for a in ("--set", kv)], "--quiet"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    summary = orjson.loads(captured.out)
    assert summary["global_step"] == 2 and summary["mode"] == "episode"
    assert summary["trl"] == {"generation_batch_size": 8, "steps_per_generation": 1, "gradient_accumulation_steps": 1}
    assert (out / "model.safetensors").exists()

    weeks = [orjson.loads(line) for line in (out / "episode_rollouts.jsonl").read_bytes().splitlines()]
    assert [(w["grpo_step"], w["week"]) for w in weeks] == [(1, 0), (1, 1), (2, 0), (2, 1)]
    for w in weeks:  # a whole week, played by the policy, graded exactly as eval grades: replay it from its actions
        assert len(w["steps"]) == EPISODE_STEPS and w["split"] == "train" and w["agent"] == f"grpo:{sft_out}"
        env = BatchedRhythmEnv(w["condition"], w["split"], 1)
        env.reset(seed=[w["seed"]])
        ret, crashes = 0.0, 0
        for s in w["steps"]:
            res = env.step_raw(np.array([ACTION_INDEX[s["action"]]]))
            ret += float(res.reward[0])
            crashes += int(res.crashes[0])
        graded = score_episode(ret, crashes, w["steps"][-1]["belief"], env.belief_targets[0], w["condition"])
        assert graded.final_score == pytest.approx(w["score"]["final_score"], abs=1e-12)
    assert len({(w["condition"], w["seed"]) for w in weeks[:2]}) == 1  # one person's two weeks per step

    lines = [orjson.loads(line) for line in (out / "reward_log.jsonl").read_bytes().splitlines()]
    assert len(lines) == 16  # 2 steps x 4 trained turns (0, 7, 14, 21) x 2 weeks
    by_week = {(w["grpo_step"], w["week"]): w for w in weeks}
    for ln in lines:
        week = by_week[(ln["step"], ln["week"])]
        assert ln["seed"] == week["seed"] and ln["t"] in (0, 7, 14, 21)
        assert ln["rewards"]["final_score"] == week["score"]["final_score"] == ln["final_score"]
        assert ln["prefix"] == [s["action"] for s in week["steps"][: ln["t"]]]
        assert ln["action"] == week["steps"][ln["t"]]["action"]  # the reply trained on is the one that was played
    for members in _groups(lines).values():
        assert sorted(m["week"] for m in members) == [0, 1] and len({m["t"] for m in members}) == 1
    log = read_training_log(out / "training_log.jsonl")
    assert [e["step"] for e in log if "rewards/final_score/mean" in e] == [1, 2]
    assert all("probe/kl" in e for e in log if "rewards/final_score/mean" in e)


@pytest.mark.slow
def test_episode_mode_under_a_launcher_deals_each_process_its_own_people(tmp_path, teacher, sft_model, rhythm_cache):
    """Two CPU processes under torchrun: each plays whole weeks of its own person (both used to play the same weeks,
    and a group could hold weeks 0, 1, 0, 1: two copies of each), and one writes every process's weeks."""
    import os
    import subprocess
    import sys

    out = tmp_path / "episode"
    env = dict(os.environ, RHYTHM_CACHE=str(rhythm_cache), OMP_NUM_THREADS="1", TMPDIR=str(tmp_path))
    overrides = ["adapter=null", f"model_name_or_path={sft_model}", "use_peft=false", f"data={teacher}",
                 f"output_dir={out}", "mode=episode", "max_steps=1", "num_generations=2", "episode.every_k_turns=7",
                 "episode.episodes_per_step=2", "per_device_train_batch_size=8", "max_completion_length=24",
                 "reward_funcs=[final_score,format]", "reward_weights=[1.0,0.1]", "probe_states=0"]
    proc = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2", "-m", "rhythm.train.grpo",
         "--config", TINY_CONFIG, *[a for kv in overrides for a in ("--set", kv)], "-q"],
        env=env, cwd=REPO, capture_output=True, text=True, timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    (line,) = proc.stdout.strip().splitlines()
    summary = orjson.loads(line)
    assert summary["resolved"]["world_size"] == 2
    assert summary["trl"] == {"generation_batch_size": 16, "steps_per_generation": 1, "gradient_accumulation_steps": 1}
    weeks = [orjson.loads(x) for x in (out / "episode_rollouts.jsonl").read_bytes().splitlines()]
    people = {(w["condition"], w["seed"]) for w in weeks}
    assert len(weeks) == 4 and len(people) == 2  # two people, two weeks each: one person per process
    assert sorted((w["seed"], w["week"]) for w in weeks) == sorted((s, k) for _, s in people for k in (0, 1))
    lines = [orjson.loads(x) for x in (out / "reward_log.jsonl").read_bytes().splitlines()]
    for members in _groups(lines).values():  # every group: one turn of one person, in two different weeks
        assert sorted(m["week"] for m in members) == [0, 1] and len({m["t"] for m in members}) == 1


def test_episode_mode_under_a_launcher_needs_whole_people_per_process(monkeypatch, teacher):
    from rhythm.errors import RhythmError
    from rhythm.train.grpo import validate

    cfg = load_config(GRPORunConfig, "configs/grpo-tiny-episode.yaml", [f"data={teacher}", "adapter=null"])
    validate(cfg)
    monkeypatch.setenv("WORLD_SIZE", "2")
    with pytest.raises(RhythmError, match=r"each process plays whole people, so episode.episodes_per_step \(1\) must be "
                                          r"a multiple of 2"):
        validate(cfg)
    with pytest.raises(RhythmError, match=r"generates 28 completions per step and process \(7 turns x 4 weeks x 2 "
                                          r"people / 2 processes\); per_device_train_batch_size \(8\) must divide it"):
        validate(load_config(GRPORunConfig, "configs/grpo-tiny-episode.yaml",
                             [f"data={teacher}", "adapter=null", "episode.episodes_per_step=2", "per_device_train_batch_size=8"]))
    validate(load_config(GRPORunConfig, "configs/grpo-tiny-episode.yaml", [f"data={teacher}", "adapter=null", "episode.episodes_per_step=2"]))
    monkeypatch.delenv("WORLD_SIZE")  # a job on a flavor of 4 GPUs launches 4 processes there: refused before it is sent
    job = ["data=teacher.jsonl", "adapter=me/rhythm-sft", "hub_model_id=me/x", "jobs.data_repo=me/d", "jobs.flavor=l4x4",
           "episode.episodes_per_step=2"]
    with pytest.raises(RhythmError, match=r"episode mode under a job on l4x4 of 4 processes: .* \(2\) must be a multiple of 4"):
        validate(load_config(GRPORunConfig, "configs/grpo-tiny-episode.yaml", job))
    validate(load_config(GRPORunConfig, "configs/grpo-tiny-episode.yaml", [*job[:-1], "jobs.flavor=a10g-large"]))


@pytest.mark.parametrize("flavor, processes", [("cpu-basic", 1), ("a10g-large", 1), ("a10g-largex2", 2), ("l4x4", 4),
                                               ("h100x8", 8), ("l40sx1", 1)])
def test_a_jobs_processes_are_its_flavors_gpus(flavor, processes):
    from rhythm.train.jobs import flavor_processes

    assert flavor_processes(flavor) == processes


def test_the_reward_log_numbers_groups_across_a_launchs_processes(tmp_path, monkeypatch):
    """Each process scores a consecutive share of the batch; a group may span two shares (4 replies a prompt, 2 a
    process): the group of a line is its place in the whole batch over num_generations."""
    import rhythm.train.grpo.rewards as rewards

    monkeypatch.setattr(rewards, "is_main_process", lambda: True)  # each process's lines, as if it wrote them itself
    groups = {}
    for rank in ("0", "1", "2", "3"):
        monkeypatch.setenv("RANK", rank)
        log = rewards.RewardLog(tmp_path / f"r{rank}.jsonl", ["format"], None, num_generations=4)
        log.wrapped()[0](["p", "p"], ["BELIEF: S=0.50 M=0.50 W=0.50\nACTION: REST"] * 2)
        groups[rank] = [orjson.loads(x)["group"] for x in (tmp_path / f"r{rank}.jsonl").read_bytes().splitlines()]
    assert groups == {"0": [0, 0], "1": [0, 0], "2": [1, 1], "3": [1, 1]}


def _groups(lines: list[dict]) -> dict:
    out = defaultdict(list)
    for ln in lines:
        out[(ln["step"], ln["group"])].append(ln)
    return out


@pytest.mark.slow
def test_resume_continues_the_logs_from_the_checkpoint(tmp_path, teacher, sft_adapter):
    """A run resumed from checkpoint-1 of 2 neither repeats nor loses a step in training_log.jsonl or
    reward_log.jsonl; a finished run is not overwritten by accident."""
    import dataclasses

    from rhythm.errors import RhythmError
    from rhythm.train.grpo import run_grpo

    cfg = load_config(GRPORunConfig, TINY_CONFIG, {
        "adapter": str(sft_adapter), "model_name_or_path": NULL, "data": str(teacher), "output_dir": str(tmp_path / "run"), "max_steps": 2,
        "save_steps": 1, "save_total_limit": 5, "logging_steps": 1, "num_generations": 2,
        "per_device_train_batch_size": 4, "max_completion_length": 12, "step.strip_reasoning": True, "probe_states": 0})
    run_grpo(cfg, quiet=True, log=lambda m: None)
    with pytest.raises(RhythmError, match="already holds a run"):
        run_grpo(dataclasses.replace(cfg, max_steps=3), quiet=True, log=lambda m: None)
    with pytest.raises(RhythmError, match="checkpoint-2 is at step 2, where the run finished"):
        run_grpo(dataclasses.replace(cfg, resume_from_checkpoint="latest"), quiet=True, log=lambda m: None)
    stopped = tmp_path / "stopped"  # killed after its last checkpoint, before its final save: finished on resume
    shutil.copytree(tmp_path / "run", stopped)
    for name in ("adapter_model.safetensors", "grpo_summary.json"):
        (stopped / name).unlink()
    finished = run_grpo(dataclasses.replace(cfg, output_dir=str(stopped), resume_from_checkpoint="latest"), quiet=True,
                        log=lambda m: None)
    assert finished["global_step"] == 2 and finished["resumed_from_step"] == 2
    assert (stopped / "adapter_model.safetensors").read_bytes() == (tmp_path / "run" / "adapter_model.safetensors").read_bytes()
    summary = run_grpo(dataclasses.replace(cfg, max_steps=3, resume_from_checkpoint=str(tmp_path / "run" / "checkpoint-1")),
                       quiet=True, log=lambda m: None)
    assert summary["global_step"] == 3 and summary["resumed_from_step"] == 1
    log = read_training_log(tmp_path / "run" / "training_log.jsonl")
    assert [e["step"] for e in log if "loss" in e] == [1, 2, 3]
    lines = [orjson.loads(line) for line in (tmp_path / "run" / "reward_log.jsonl").read_bytes().splitlines()]
    assert [ln["step"] for ln in lines] == [1] * 4 + [2] * 4 + [3] * 4
    assert [ln["batch"] for ln in lines] == [1] * 4 + [2] * 4 + [3] * 4  # numbered on after the resume


# ------------------------------------------------------------------- --adapter with full weights


def test_an_adapter_folder_with_full_weights_is_refined_as_the_model(tmp_path, tiny_student):
    from rhythm.errors import RhythmError
    from rhythm.train.grpo.trainer import start_from_full_weights

    said: list[str] = []
    cfg = GRPORunConfig(adapter=str(tiny_student), model_name_or_path=None, use_peft=True, data="x.jsonl")
    start = start_from_full_weights(cfg, said.append)
    assert (start.adapter, start.model_name_or_path, start.use_peft) == (None, str(tiny_student), False)
    assert said == [f"{tiny_student} holds full weights, not a LoRA adapter: refining all of them "
                    f"(as --model {tiny_student} --set adapter=null --set use_peft=false)"]
    assert start_from_full_weights(GRPORunConfig(adapter=str(tiny_student), model_name_or_path=str(tiny_student)), said.append).adapter is None
    other = start_from_full_weights(GRPORunConfig(adapter=str(tiny_student), model_name_or_path="runs/sft-tiny"), said.append)
    assert other.model_name_or_path == str(tiny_student) and said[-1].endswith("; model_name_or_path runs/sft-tiny is not used")
    (tmp_path / "empty").mkdir()
    with pytest.raises(RhythmError, match="neither a LoRA adapter .* nor a model"):
        start_from_full_weights(GRPORunConfig(adapter=str(tmp_path / "empty")), said.append)
    lora = tmp_path / "lora"
    lora.mkdir()
    (lora / "adapter_config.json").write_text("{}")
    assert start_from_full_weights(GRPORunConfig(adapter=str(lora)), said.append).adapter == str(lora)  # a real adapter: as given


@pytest.mark.slow
def test_grpo_adapter_given_the_sft_models_folder_trains_it_and_records_the_start(run_cli, tmp_path, teacher, sft_model):
    from rhythm.eval.names import display_name

    out = tmp_path / "grpo"
    code, _, err = run_cli(
        "grpo", "--config", TINY_CONFIG, "--adapter", str(sft_model), "--data", str(teacher), "-o", str(out),
        "--max-steps", "1", "--set", "num_generations=4", "--set", "per_device_train_batch_size=8",
        "--set", "max_completion_length=24", "--set", "logging_steps=1", "-q")
    assert code == 0, err
    assert "holds full weights, not a LoRA adapter" in " ".join(err.split())
    written = yaml.safe_load((out / "grpo_config.yaml").read_text())
    assert (written["adapter"], written["model_name_or_path"], written["use_peft"]) == (None, str(sft_model), False)
    assert (out / "model.safetensors").is_file() and not (out / "adapter_config.json").exists()
    assert display_name(f"model:{out}") == "student (SFT+GRPO)"


@pytest.mark.slow
def test_an_adapter_refined_on_another_base_names_that_base(run_cli, tmp_path, teacher, sft_adapter, sft_model):
    """A LoRA adapter refined on ``--model`` (not the base it was trained on) is saved naming the base it was refined
    on, so eval plays the refined student: PEFT kept the old name, and eval loaded the adapter onto the old base."""
    from rhythm.model.load import adapter_config

    out = tmp_path / "grpo"
    code, _, err = run_cli(
        "grpo", "--config", TINY_CONFIG, "--adapter", str(sft_adapter), "--model", str(sft_model), "--data", str(teacher),
        "-o", str(out), "--max-steps", "1", "--set", "num_generations=4", "--set", "per_device_train_batch_size=8",
        "--set", "max_completion_length=24", "--set", "save_steps=1", "-q")
    assert code == 0, err
    assert adapter_config(str(sft_adapter))["base_model_name_or_path"] != str(sft_model)
    assert adapter_config(str(out))["base_model_name_or_path"] == str(sft_model)
    assert adapter_config(str(out / "checkpoint-1"))["base_model_name_or_path"] == str(sft_model)  # a checkpoint too


def test_a_lora_adapter_on_another_base_than_its_own_is_said_and_a_missing_one_refused(tmp_path, monkeypatch):
    """The tiny configs start from runs/sft-tiny: beside an adapter trained on another base, that base used to load
    in silence (another student), or, missing, be tried on the Hub for a minute before failing without the way out."""
    from rhythm.errors import RhythmError
    from rhythm.train.grpo.trainer import check_adapter_base

    monkeypatch.chdir(tmp_path)
    own, other, adapter = tmp_path / "sft", tmp_path / "sft-other", tmp_path / "lora"
    for folder in (own, other, adapter):
        folder.mkdir()
    (adapter / "adapter_config.json").write_text(orjson.dumps({"base_model_name_or_path": str(own)}).decode())
    said: list[str] = []
    with pytest.raises(RhythmError, match=rf"model_name_or_path runs/sft-tiny not found .* --set "
                                          rf"model_name_or_path=null loads it onto its own base {own}"):
        check_adapter_base(GRPORunConfig(adapter=str(adapter), model_name_or_path="runs/sft-tiny"), said.append)
    check_adapter_base(GRPORunConfig(adapter=str(adapter), model_name_or_path=str(other)), said.append)
    assert len(said) == 1 and f"was trained on {own}; it loads onto model_name_or_path {other} instead" in said[0]
    for same in ("sft", f"{tmp_path}/./sft", None):  # its own base, however it is written, or none given: nothing said
        check_adapter_base(GRPORunConfig(adapter=str(adapter), model_name_or_path=same), said.append)
    assert len(said) == 1


def test_a_hub_id_beside_an_adapter_trained_on_a_local_copy_is_said_not_refused(tmp_path, monkeypatch):
    """SFT on a downloaded copy of a base, GRPO on the Hub's: a Hub-shaped name is not refused as a missing path."""
    from rhythm.train.grpo.trainer import check_adapter_base

    monkeypatch.chdir(tmp_path)
    own, adapter = tmp_path / "qwen-local", tmp_path / "lora"
    own.mkdir()
    adapter.mkdir()
    (adapter / "adapter_config.json").write_text(orjson.dumps({"base_model_name_or_path": str(own)}).decode())
    said: list[str] = []
    check_adapter_base(GRPORunConfig(adapter=str(adapter), model_name_or_path="Qwen/Qwen2.5-0.5B-Instruct"), said.append)
    assert len(said) == 1 and "loads onto model_name_or_path Qwen/Qwen2.5-0.5B-Instruct instead" in said[0]


SPREAD_SCRIPT = """
import sys
from pathlib import Path
from accelerate import PartialState
from rhythm.train.grpo.rewards import RewardLog
from rhythm.train.processes import end_distributed

state = PartialState(cpu=True)  # gloo, from torchrun's environment, as a trainer with use_cpu sets it up
good = "BELIEF: S=0.50 M=0.50 W=0.50\\nACTION: DEEP_WORK"
replies = [good, good] if state.process_index == 0 else [good, "no action here"]
log = RewardLog(None, ["format"], None, num_generations=4)
log.wrapped()[0](["p", "p"], replies)
share = log.pop_metrics()["groups_without_spread"]
(Path(sys.argv[1]) / f"{state.process_index}.txt").write_text(str(share))  # a file each: printed lines can interleave
end_distributed()
"""


@pytest.mark.slow
def test_groups_without_spread_counts_a_group_split_over_processes_whole(tmp_path):
    """One group of 4 replies, 2 on each of two processes: the first's two score alike, the second's differ. The
    group has spread, in every process's figure (the first alone would call it a group without spread)."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    env = dict(os.environ, OMP_NUM_THREADS="1", TMPDIR=str(tmp_path))
    proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
                           "--no-python", sys.executable, "-c", SPREAD_SCRIPT, str(tmp_path)],
                          env=env, cwd=Path(__file__).resolve().parents[2], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert {p.name: p.read_text() for p in tmp_path.glob("?.txt")} == {"0.txt": "0.0", "1.txt": "0.0"}  # each process's
