"""benchmarks/bench_grpo.py: a refine step's time split into the rollout and the rest, from a real (tiny) run."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
BENCH = [sys.executable, str(REPO / "benchmarks" / "bench_grpo.py")]


@pytest.mark.slow
def test_the_benchmark_times_each_step_and_its_rollout(sft_model, rhythm_cache, tmp_path):
    env = dict(os.environ, RHYTHM_CACHE=str(rhythm_cache), TMPDIR=str(tmp_path))
    proc = subprocess.run([*BENCH, "--model", str(sft_model), "--steps", "3", "--set", "rollout_seeds=0",
                           "--set", "per_device_train_batch_size=8", "--set", "probe_states=0"],
                          env=env, cwd=REPO, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (line,) = proc.stdout.splitlines()
    out = json.loads(line)
    assert out["steps"] == 3 and out["batch"] == 8 and out["startup_s"] > 0
    assert 0 < out["rollout_s"] < out["step_s"] and out["train_s"] > 0
    assert out["projected_stage_s"] == pytest.approx(out["startup_s"] + 40 * out["step_s"], abs=0.1)
    assert out["loss_tokens_per_step"] > 8 * 16 and 0 <= out["padding_share"] < 1  # 8 prompts and their replies
    assert list(tmp_path.glob("bench_grpo_*")) == []  # its run folder is removed


@pytest.mark.slow  # ~10 s: the error comes once transformers is imported
def test_a_missing_model_is_one_line_and_exit_2(tmp_path):
    proc = subprocess.run([*BENCH, "--model", str(tmp_path / "nowhere"), "--steps", "2"], cwd=REPO,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2 and proc.stderr.strip().count("\n") == 0, proc.stderr[-2000:]
    assert proc.stderr.startswith("bench_grpo: error: ") and "nowhere" in proc.stderr
