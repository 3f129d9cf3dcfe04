"""The run steps ``rhythm sft`` and ``rhythm grpo`` share (``rhythm.train.common``): which checkpoint a resume
takes, what a finished run and an overwritten folder do, the trackers a run may report to."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import orjson
import pytest

from rhythm.errors import RhythmError
from rhythm.train.common import check_report_to, checkpoint_step, latest_checkpoint, prepare_run


@dataclass(frozen=True)
class Run:
    output_dir: str
    max_steps: int = 4
    resume_from_checkpoint: str | None = None
    overwrite_output_dir: bool = False
    report_to: str = "none"
    dtype: str = "auto"
    bf16: str = "auto"
    gradient_checkpointing: str = "auto"


def _checkpoint(folder: Path, step: int, whole: bool = True) -> Path:
    ckpt = folder / f"checkpoint-{step}"
    ckpt.mkdir(parents=True)
    (ckpt / "model.safetensors").write_bytes(b"w")
    if whole:  # written last by transformers: a run killed while saving leaves a checkpoint without it
        (ckpt / "trainer_state.json").write_bytes(orjson.dumps({"global_step": step}))
    return ckpt


def test_resume_takes_the_newest_checkpoint_written_whole(tmp_path: Path) -> None:
    assert latest_checkpoint(tmp_path) is None
    _checkpoint(tmp_path, 2)
    _checkpoint(tmp_path, 10)
    _checkpoint(tmp_path, 12, whole=False)
    (tmp_path / "checkpoint-x").mkdir()
    assert latest_checkpoint(tmp_path) == tmp_path / "checkpoint-10" and checkpoint_step(tmp_path / "checkpoint-10") == 10
    out, resume, _ = prepare_run(Run(str(tmp_path), max_steps=20, resume_from_checkpoint="latest"), quiet=True)
    assert resume == str(tmp_path / "checkpoint-10")


def test_a_finished_run_is_not_resumed_past_its_max_steps(tmp_path: Path) -> None:
    """transformers would train one step more and overwrite the finished model."""
    _checkpoint(tmp_path, 4)
    with pytest.raises(RhythmError, match=r"checkpoint-4 is at step 4, the run's max_steps=4: it finished; raise max_steps"):
        prepare_run(Run(str(tmp_path), max_steps=4, resume_from_checkpoint="latest"), quiet=True)
    assert prepare_run(Run(str(tmp_path), max_steps=6, resume_from_checkpoint="latest"), quiet=True)[1].endswith("checkpoint-4")


def test_overwriting_a_run_leaves_nothing_of_it(tmp_path: Path) -> None:
    """Not only its checkpoints: a LoRA adapter left beside a new run's full weights would be what eval loads."""
    run = tmp_path / "run"
    _checkpoint(run, 2)
    for name in ("adapter_config.json", "adapter_model.safetensors", "training_log.jsonl", "student_rollouts.jsonl"):
        (run / name).write_bytes(b"{}")
    with pytest.raises(RhythmError, match="already holds a run"):
        prepare_run(Run(str(run)), quiet=True)
    assert len(list(run.iterdir())) == 5
    prepare_run(Run(str(run), overwrite_output_dir=True), quiet=True)
    assert list(run.iterdir()) == []
    (tmp_path / "mine").mkdir()  # a folder that holds no run keeps what it holds
    (tmp_path / "mine" / "notes.txt").write_text("x")
    prepare_run(Run(str(tmp_path / "mine"), overwrite_output_dir=True), quiet=True)
    assert (tmp_path / "mine" / "notes.txt").read_text() == "x"


@pytest.mark.parametrize("report_to, message", [
    ("foo", "report_to=foo: foo is not supported, only"),
    ("wandb", "report_to=wandb: WandbCallback requires wandb to be installed"),
    ("none, foo", "report_to=none, foo: none is not supported"),
])
def test_report_to_names_an_installed_tracker(report_to: str, message: str) -> None:
    import importlib.util

    if report_to == "wandb" and importlib.util.find_spec("wandb") is not None:
        pytest.skip("wandb is installed here")
    check_report_to("none")
    check_report_to("")
    with pytest.raises(RhythmError, match=message.replace("(", r"\(")):
        check_report_to(report_to)
