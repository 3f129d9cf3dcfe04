"""Fixtures the training tests share: a fake Hub, three bayes teacher episodes, and tiny SFT runs that
GRPO starts from (built once per session, shared by every worker, read-only)."""

from __future__ import annotations

from pathlib import Path

import pytest

from ..fakehub import FakeHub
from .helpers import shared_sft_run, write_episodes

SFT_TINY = dict(
    model_name_or_path="rhythm-tiny", strip_reasoning=True, max_length=1536, lr_scheduler_type="constant",
    warmup_ratio=0.0, per_device_train_batch_size=4, gradient_accumulation_steps=1, lora_dropout=0.0, val_fraction=0.0,
    eval_on_start=False, logging_steps=10, save_steps=1000, bf16=False, gradient_checkpointing=False,
)


@pytest.fixture
def hub():
    with FakeHub() as h:
        yield h


@pytest.fixture(scope="module")
def teacher(tmp_path_factory):
    """Three bayes episodes (in-dist, train split); a test module that needs other data overrides it."""
    path = tmp_path_factory.mktemp("grpo") / "teacher.jsonl"
    write_episodes(path, range(3))
    return path


@pytest.fixture(scope="session")
def sft_model(tmp_path_factory, tiny_student) -> Path:
    """The tiny student SFT-trained as configs/sft-tiny.yaml trains it (every weight, whole weeks of
    BELIEF/ACTION lines), 30 steps on 3 episodes: most sampled replies parse (measured ~80%), so GRPO
    groups have rewards that differ. Built once per session, shared by every worker; read-only."""
    return shared_sft_run(tmp_path_factory, "rhythm-grpo-sft-full", 3, **SFT_TINY, use_peft=False, max_steps=30,
                          learning_rate=3e-3)


@pytest.fixture(scope="session")
def sft_adapter(tmp_path_factory, tiny_student) -> Path:
    """A tiny SFT LoRA adapter (the 3B recipe's path), a few steps: for GRPO's adapter plumbing
    (resume, Hub jobs), not for learning. Built once per session, shared by every worker; read-only."""
    return shared_sft_run(tmp_path_factory, "rhythm-grpo-sft", 3, **SFT_TINY, max_steps=2, learning_rate=3e-3)


@pytest.fixture(scope="module")
def greedy_week(sft_model):
    """The SFT student's own greedy week of one person (played by eval's model agent) and its step rows."""
    from rhythm.agents.base import EpisodeSpec
    from rhythm.model.load import ModelOptions
    from rhythm.train.grpo.data import PromptOptions, build_prompts, student_rollouts

    records = student_rollouts(str(sft_model), [EpisodeSpec("in-dist", "train", 7)], ModelOptions(max_new_tokens=16))
    rows, _ = build_prompts([], PromptOptions(), records)
    return records[0], rows
