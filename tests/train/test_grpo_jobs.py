"""``rhythm grpo --flavor``: the job committed to a fake Hub runs GRPO from an SFT adapter that it fetches
from the Hub itself, and pushes the refined adapter and its logs back."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import orjson
import pytest

from .helpers import TINY_CONFIG, rhythm


@pytest.mark.slow
def test_job_script_runs_grpo_from_a_hub_adapter_and_pushes(hub, tmp_path, teacher, sft_adapter, rhythm_cache):
    code, _, err = rhythm(hub, tmp_path, "upload", "--files", str(sft_adapter), "--repo", "tester/rhythm-sft",
                          "--repo-type", "model")
    assert code == 0, err
    code, out, err = rhythm(
        hub, tmp_path, "grpo", "--config", TINY_CONFIG, "--adapter", "tester/rhythm-sft", "--set", "model_name_or_path=null",
        "--data", str(teacher),
        "--flavor", "cpu-basic", "--set", "hub_model_id=tester/rhythm-grpo", "--set", "jobs.data_repo=tester/rhythm-teacher",
        "--set", "hub_private=false", "--max-steps", "2", "--set", "num_generations=4",
        "--set", "per_device_train_batch_size=8", "--set", "max_completion_length=16", "--set", "logging_steps=1",
        "--set", "step.strip_reasoning=true", "--set", "probe_states=0")
    assert code == 0, err
    (job_id, spec), = [(k, v["spec"]) for k, v in hub.jobs.items()]
    assert out.strip().startswith(job_id) and spec["flavor"] == "cpu-basic"
    assert spec["environment"]["RHYTHM_STAGE"] == "grpo"

    script = tmp_path / "run.py"
    script.write_bytes(hub.repo("tester/rhythm-grpo").files["rhythm_job/run.py"])
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "HUGGING"))}
    env.update(hub.env(tmp_path / "job-home", token=False), **spec["environment"], **spec["secrets"])
    env.update(RHYTHM_CACHE=str(rhythm_cache), RHYTHM_OUTPUT_DIR=str(tmp_path / "out"), RHYTHM_NUM_PROCESSES="1",
               PYTHONPATH="", OMP_NUM_THREADS="1")
    proc = subprocess.run([sys.executable, str(script)], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert hub.token not in proc.stdout + proc.stderr
    assert re.search(r"rhythm job: \S+ -m rhythm\.train\.grpo --config \S+/rhythm_job/config\.yaml --set data=", proc.stderr)
    # the adapter came from the Hub repo the SFT stage pushed to
    assert any(r.method == "GET" and "/tester/rhythm-sft/resolve/" in r.path and r.path.endswith("adapter_model.safetensors")
               for r in hub.requests)

    files = hub.repo("tester/rhythm-grpo").files
    for name in ("adapter_model.safetensors", "adapter_config.json", "training_log.jsonl", "reward_log.jsonl",
                 "grpo_config.yaml", "grpo_summary.json", "rhythm_job/run.py"):
        assert name in files, name
    assert not any(name.startswith("checkpoint-") for name in files)
    summary = orjson.loads(files["grpo_summary.json"])
    assert summary["global_step"] == 2 and summary["adapter_in"] == "tester/rhythm-sft"
    log = [orjson.loads(line) for line in files["training_log.jsonl"].splitlines()]
    assert [e["step"] for e in log if "rewards/action_value/mean" in e] == [1, 2] and {e["stage"] for e in log} == {"grpo"}
    assert len(files["reward_log.jsonl"].splitlines()) == 16
