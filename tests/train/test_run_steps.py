"""The run steps ``rhythm sft`` and ``rhythm grpo`` share (``rhythm.train.common``): which checkpoint a resume
takes, what a finished run and an overwritten folder do, the trackers a run may report to."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

import orjson
import pytest

from rhythm.config import write_config
from rhythm.errors import RhythmError
from rhythm.provenance import file_digest
from rhythm.train.common import check_report_to, prepare_run
from rhythm.train.run_folder import (
    checkpoint_step,
    cleaned_on_failure,
    latest_checkpoint,
    overwritten_path,
    put_back_overwritten,
)


@dataclass(frozen=True)
class Run:
    output_dir: str
    max_steps: int = 4
    resume_from_checkpoint: str | None = None
    overwrite_output_dir: bool = False
    report_to: str = "none"
    data: str = ""
    model_name_or_path: str = "rhythm-tiny"
    learning_rate: float = 1e-3
    num_train_epochs: float = 3.0
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
    out, resume, _ = prepare_run(Run(str(tmp_path), max_steps=20, resume_from_checkpoint="latest"), "sft", quiet=True)
    assert resume == str(tmp_path / "checkpoint-10")


def test_a_finished_run_is_not_resumed_past_its_max_steps(tmp_path: Path) -> None:
    """transformers would train one step more and overwrite the finished model. A run stopped after its last
    checkpoint, before its summary, resumes (to save and report without a step: test_sft_train)."""
    _checkpoint(tmp_path, 4)
    assert prepare_run(Run(str(tmp_path), max_steps=4, resume_from_checkpoint="latest"), "sft", quiet=True)[1].endswith("checkpoint-4")
    (tmp_path / "sft_summary.json").write_bytes(orjson.dumps({"global_step": 2}))  # an earlier leg's
    assert prepare_run(Run(str(tmp_path), max_steps=4, resume_from_checkpoint="latest"), "sft", quiet=True)[1].endswith("checkpoint-4")
    with pytest.raises(RhythmError, match=r"checkpoint-4 is at step 4, past max_steps=2; resume with max_steps >= 4"):
        prepare_run(Run(str(tmp_path), max_steps=2, resume_from_checkpoint="latest"), "sft", quiet=True)
    (tmp_path / "sft_summary.json").write_bytes(orjson.dumps({"global_step": 4}))
    with pytest.raises(RhythmError, match=r"checkpoint-4 is at step 4, where the run finished; raise max_steps"):
        prepare_run(Run(str(tmp_path), max_steps=4, resume_from_checkpoint="latest"), "sft", quiet=True)
    assert prepare_run(Run(str(tmp_path), max_steps=6, resume_from_checkpoint="latest"), "sft", quiet=True)[1].endswith("checkpoint-4")
    # a run of epochs (max_steps -1) is done at its summary's step unless it is given more epochs (or steps)
    write_config(Run(str(tmp_path), max_steps=-1), tmp_path / "sft_config.yaml")
    with pytest.raises(RhythmError, match="where the run finished"):
        prepare_run(Run(str(tmp_path), max_steps=-1, resume_from_checkpoint="latest"), "sft", quiet=True)
    assert prepare_run(Run(str(tmp_path), max_steps=-1, num_train_epochs=4.0, resume_from_checkpoint="latest"), "sft",
                       quiet=True)[1].endswith("checkpoint-4")


def test_overwriting_a_run_leaves_nothing_of_it(tmp_path: Path) -> None:
    """Not only its checkpoints: a LoRA adapter left beside a new run's full weights would be what eval loads."""
    run = tmp_path / "run"
    _checkpoint(run, 2)
    for name in ("adapter_config.json", "adapter_model.safetensors", "training_log.jsonl", "student_rollouts.jsonl"):
        (run / name).write_bytes(b"{}")
    with pytest.raises(RhythmError, match="already holds a run"):
        prepare_run(Run(str(run)), "sft", quiet=True)
    assert len(list(run.iterdir())) == 5
    prepare_run(Run(str(run), overwrite_output_dir=True), "sft", quiet=True)
    assert list(run.iterdir()) == []  # set aside until the new run trains (or put back if it is refused first)
    assert len(list(overwritten_path(run).iterdir())) == 5
    (run / "half.json").write_text("a refused run's file")
    put_back_overwritten(run)
    assert len(list(run.iterdir())) == 5 and not (run / "half.json").exists() and not overwritten_path(run).exists()
    (tmp_path / "mine").mkdir()  # a folder that holds no run keeps what it holds
    (tmp_path / "mine" / "notes.txt").write_text("x")
    prepare_run(Run(str(tmp_path / "mine"), overwrite_output_dir=True), "sft", quiet=True)
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


def test_a_resume_with_other_settings_than_the_runs_is_refused_and_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A resume may train longer, log, save and push otherwise; other data, learning rate or model would train a run
    no config describes (the scheduler and data order come from the checkpoint, the config file from the flags)."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "t.jsonl").write_text("")
    _checkpoint(tmp_path / "run", 2)
    write_config(Run("run", data="t.jsonl"), tmp_path / "run" / "sft_config.yaml", extra={"command": "rhythm sft"})
    same = [Run("run", resume_from_checkpoint="latest", data=str(tmp_path / "t.jsonl")),  # the same file
            Run("run", resume_from_checkpoint="latest", data="t.jsonl", max_steps=8, report_to="none")]
    for cfg in same:
        assert prepare_run(cfg, "sft", quiet=True)[1].endswith("checkpoint-2")
    (tmp_path / "u.jsonl").write_text("")
    for change, named in [({"learning_rate": 0.1}, "learning_rate: 0.001 -> 0.1"),
                          ({"data": "u.jsonl"}, f"data: {tmp_path / 't.jsonl'} -> {tmp_path / 'u.jsonl'}"),
                          ({"model_name_or_path": "other"}, "model_name_or_path: rhythm-tiny -> other")]:
        cfg = Run("run", resume_from_checkpoint="latest", **{"data": "t.jsonl", **change})
        with pytest.raises(RhythmError, match=rf"run was trained with other settings \({named}\); resuming would"):
            prepare_run(cfg, "sft", quiet=True)
    (tmp_path / "base").mkdir()  # a path, however it is written; a key that one rhythm version does not know
    write_config(Run("run", data="t.jsonl", model_name_or_path="base"), tmp_path / "run" / "sft_config.yaml",
                 extra={"data_digest": file_digest(tmp_path / "t.jsonl")})
    recorded = (tmp_path / "run" / "sft_config.yaml").read_text()
    (tmp_path / "run" / "sft_config.yaml").write_text(recorded.replace("model_name_or_path:", "retired_knob: 3\nmodel_name_or_path:"))
    for model in ("./base", f"{tmp_path}/base/", "base"):
        cfg = Run("run", resume_from_checkpoint="latest", data=" t.jsonl ", model_name_or_path=model)
        assert prepare_run(cfg, "sft", quiet=True)[1].endswith("checkpoint-2")
    (tmp_path / "t.jsonl").write_text("{}\n")  # the same name, other weeks
    with pytest.raises(RhythmError, match=r"other settings \(the data files changed since the run started"):
        prepare_run(Run("run", resume_from_checkpoint="latest", data="t.jsonl", model_name_or_path="base"), "sft", quiet=True)
    (tmp_path / "run" / "sft_config.yaml").unlink()  # a run that wrote none: nothing to hold it to
    assert prepare_run(Run("run", resume_from_checkpoint="latest", learning_rate=0.1), "sft", quiet=True)[1]


def test_a_resume_under_another_number_of_processes_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A launcher's processes decide the batch of an optimizer step and where the data order resumes."""
    _checkpoint(tmp_path / "run", 2)
    write_config(Run(str(tmp_path / "run")), tmp_path / "run" / "sft_config.yaml", extra={"resolved": {"world_size": 2}})
    cfg = Run(str(tmp_path / "run"), resume_from_checkpoint="latest")
    with pytest.raises(RhythmError, match=r"other settings \(2 process\(es\), now 1: each optimizer step would take"):
        prepare_run(cfg, "sft", quiet=True)
    monkeypatch.setenv("WORLD_SIZE", "2")
    assert prepare_run(cfg, "sft", quiet=True)[1].endswith("checkpoint-2")


def test_under_a_launcher_the_first_process_alone_empties_an_overwritten_folder(tmp_path: Path,
                                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """All processes deleting the same files at once failed now and then (one found a file another had deleted)."""
    run = tmp_path / "run"
    _checkpoint(run, 2)
    cfg = Run(str(run), overwrite_output_dir=True)
    monkeypatch.setenv("RANK", "1")
    prepare_run(cfg, "sft", quiet=True)
    assert (run / "checkpoint-2").is_dir()
    monkeypatch.setenv("RANK", "0")
    prepare_run(cfg, "sft", quiet=True)
    assert list(run.iterdir()) == [] and [p.name for p in overwritten_path(run).iterdir()] == ["checkpoint-2"]
    monkeypatch.setenv("RANK", "1")  # a later process of the launch, after the first set the run aside
    prepare_run(cfg, "sft", quiet=True)


@pytest.mark.slow  # > 3 s on 2 cores: a refused run, then one that trains a step
def test_a_refused_overwrite_puts_the_earlier_run_back(tmp_path: Path, run_cli, teacher) -> None:
    """``overwrite_output_dir`` sets the earlier run aside; a run refused before it trains (here every week is longer
    than max_length, found once the data is tokenized) puts it back whole, and says why in one line."""
    run = tmp_path / "run"
    _checkpoint(run, 2)
    (run / "model.safetensors").write_bytes(b"the earlier run's weights")
    (run / "training_log.jsonl").write_bytes(b'{"step": 2}\n')
    before = {p.relative_to(run): p.read_bytes() for p in run.rglob("*") if p.is_file()}
    code, out, err = run_cli("sft", "--config", "configs/sft-tiny.yaml", "--data", str(teacher), "-o", str(run),
                             "--set", "overwrite_output_dir=true", "--set", "max_length=10", "-q")
    assert code == 2 and len(err.strip().splitlines()) == 1 and "longer than max_length=10" in err, err
    assert {p.relative_to(run): p.read_bytes() for p in run.rglob("*") if p.is_file()} == before
    assert not overwritten_path(run).exists()
    # failed inside train(), before its first step (a setting the trainer refuses there): put back too
    import transformers

    def refused(self, *args, **kwargs):
        raise RhythmError("refused before the first step")

    with pytest.MonkeyPatch.context() as m:
        m.setattr(transformers.Trainer, "_inner_training_loop", refused)
        code, out, err = run_cli("sft", "--config", "configs/sft-tiny.yaml", "--data", str(teacher), "-o", str(run),
                                 "--set", "overwrite_output_dir=true", "-q")
    assert code == 2 and "refused before the first step" in err, err
    assert {p.relative_to(run): p.read_bytes() for p in run.rglob("*") if p.is_file()} == before
    code, out, err = run_cli("sft", "--config", "configs/sft-tiny.yaml", "--data", str(teacher), "-o", str(run),
                             "--set", "overwrite_output_dir=true", "--max-steps", "1", "--set", "save_steps=1", "-q")
    assert code == 0, err  # it trained: the earlier run is gone, aside and all
    assert not (run / "checkpoint-2").exists() and (run / "checkpoint-1").is_dir() and not overwritten_path(run).exists()
    assert (run / "model.safetensors").read_bytes() != before[Path("model.safetensors")]


def test_a_run_set_aside_by_an_overwrite_that_was_killed_is_not_lost(tmp_path: Path) -> None:
    """Killed between setting the earlier run aside and training: the next run on the folder says where it is."""
    run = tmp_path / "run"
    _checkpoint(run, 2)
    prepare_run(Run(str(run), overwrite_output_dir=True), "sft", quiet=True)  # then killed: nothing put it back
    with pytest.raises(RhythmError, match=r"stopped before it trained, and the run it replaced is in .*\.run\.overwritten"):
        prepare_run(Run(str(run), overwrite_output_dir=True), "sft", quiet=True)
    assert [p.name for p in overwritten_path(run).iterdir()] == ["checkpoint-2"]
    # refused as rhythm sft refuses it (inside cleaned_on_failure): the folder's new run is not traded for the old one
    _checkpoint(run, 5)
    with pytest.raises(RhythmError, match="stopped before it trained"), cleaned_on_failure(run):
        prepare_run(Run(str(run), overwrite_output_dir=True), "sft", quiet=True)
    assert [p.name for p in run.iterdir()] == ["checkpoint-5"] and overwritten_path(run).is_dir()


def test_an_overwrite_of_the_current_folder_sets_the_run_aside_beside_it(tmp_path: Path, monkeypatch) -> None:
    run = tmp_path / "run"
    _checkpoint(run, 2)
    monkeypatch.chdir(run)
    assert overwritten_path(".") == tmp_path / ".run.overwritten"
    prepare_run(Run(".", overwrite_output_dir=True), "sft", quiet=True)
    assert list(run.iterdir()) == [] and [p.name for p in (tmp_path / ".run.overwritten").iterdir()] == ["checkpoint-2"]
    put_back_overwritten(".")
    assert [p.name for p in run.iterdir()] == ["checkpoint-2"]


def test_overwriting_refuses_to_delete_the_runs_own_inputs(tmp_path: Path) -> None:
    """``overwrite_output_dir`` empties the folder before the model is read: a model trained on in place, or data kept
    in the run's folder, would be gone before the run could fail on it."""
    from rhythm.train.sft import SFTRunConfig, validate

    run = tmp_path / "run"
    _checkpoint(run, 2)
    (run / "teacher.jsonl").write_text("{}\n")
    (tmp_path / "x.jsonl").write_text("{}\n")
    fine = SFTRunConfig(data=str(tmp_path / "x.jsonl"), model_name_or_path="rhythm-tiny", output_dir=str(run),
                        overwrite_output_dir=True)
    validate(fine)
    (run / "model").mkdir()
    for inputs in ({"model_name_or_path": str(run / "model")}, {"data": f"{tmp_path / 'x.jsonl'},{run / 'teacher.jsonl'}"}):
        with pytest.raises(RhythmError, match=r"overwrite_output_dir would delete .*, an input of this run inside output_dir"):
            validate(dataclasses.replace(fine, **inputs))
        validate(dataclasses.replace(fine, **inputs, overwrite_output_dir=False))  # then nothing is deleted
    for overwrite in (True, False):  # the model trained over in place: refused either way
        with pytest.raises(RhythmError, match=r"output_dir .*run is also an input of this run"):
            validate(dataclasses.replace(fine, model_name_or_path=str(run), overwrite_output_dir=overwrite))
    assert (run / "teacher.jsonl").exists() and (run / "checkpoint-2").exists()


def test_stdin_data_is_refused_under_a_launcher_of_several_processes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each process would read part of one stream (a false 'not valid JSON' on both ranks)."""
    from rhythm.train.sft import SFTRunConfig, validate

    cfg = SFTRunConfig(data="-", output_dir=str(tmp_path / "out"))
    validate(cfg)
    monkeypatch.setenv("WORLD_SIZE", "2")
    with pytest.raises(RhythmError, match=r"data=- \(stdin\) under a launcher of 2 processes"):
        validate(cfg)
