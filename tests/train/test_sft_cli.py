"""``rhythm sft`` on bad input: one clear line on stderr, exit code 2, before anything heavy runs."""

from __future__ import annotations

import orjson
import pytest

from rhythm.locking import lock_path, output_lock

from .helpers import write_episodes, write_v1_episodes


@pytest.fixture(scope="module")
def teacher(tmp_path_factory):
    path = tmp_path_factory.mktemp("clidata") / "t.jsonl"
    records = write_episodes(path, [0, 1])
    write_v1_episodes(path.with_name("v1.jsonl"), records)
    return path


@pytest.mark.parametrize(
    "args, message",
    [
        (["--data", "nope.jsonl"], "file not found: nope.jsonl"),
        (["--data", "{broken}"], "broken.jsonl:2: not valid JSON"),
        (["--data", "{teacher}", "--set", "lora_rank=8"], "unknown key 'lora_rank' for SFTRunConfig; did you mean 'lora_r'?"),
        (["--data", "{teacher}", "--set", "learning_rate=fast"], "learning_rate='fast' is not a valid float"),
        (["--data", "{teacher}", "--set", "learning_rate=-1"], "learning_rate=-1.0: input should be greater than 0"),
        (["--data", "{teacher}", "--set", "seed=-5"], "seed=-5: input should be greater than or equal to 0"),
        (["--data", "{teacher}", "-o", ""], "the output_dir path is empty"),
        (["--data", "{teacher}", "--set", "bf16=maybe"], "bf16='maybe' is not a valid"),
        (["--data", "{teacher}", "--max-steps", "0"], "max_steps must be positive or -1"),
        (["--data", "{teacher}", "--dry-run"], "--dry-run describes a Hugging Face Jobs submission"),
        (["--data", "{teacher}", "--config", "nope.yaml"], "config file not found: nope.yaml"),
        (["--data", "{teacher}", "--set", "push_to_hub=true"], "push_to_hub needs hub_model_id"),
        # NaN passes every bound; an infinite length or rate trains nothing meaningful (an overwrite lost the earlier run)
        (["--data", "{teacher}", "--max-steps", "-1", "--set", "num_train_epochs=.inf"], "num_train_epochs must be a finite number, got inf"),
        (["--data", "{teacher}", "--set", "min_score=.nan"], "min_score must be a finite number, got nan"),
        (["--data", "{teacher}", "--set", "learning_rate=.inf"], "learning_rate must be a finite number, got inf"),
        (["--data", "{teacher}", "--set", "save_total_limit=0"], "save_total_limit=0: input should be greater than or equal to 1"),
        # a name the Hub refuses is refused before the training, not after it
        (["--data", "{teacher}", "--set", "push_to_hub=true", "--set", "hub_model_id=me/my student"],
         "hub_model_id (the run's model repo) 'me/my student' is not a name the Hub takes (Repo id must use alphanumeric"),
        (["--data", "{teacher}", "--set", "min_score=1.5"], "no training examples left"),
        (["--data", "{teacher}", "--resume", "-o", "{tmp}/empty"], "no finished checkpoint-N folder (one with trainer_state.json) in"),
        (["--data", "-", "--resume"], "a run reading its data from stdin (data=-) cannot be resumed"),
        (["--data", "{v1}"], "v1.jsonl:1: record is text protocol v1, this rhythm speaks v2"),
        (["--data", "{teacher}", "--set", "max_length=200"], "every training week is longer than max_length=200 tokens"),
        (["--data", "{teacher}", "--set", "context_noise=0.5"], "'context_noise' is no longer a key of SFTRunConfig"),
        (["--data", "{teacher}", "--model", "{tmp}/empty-model"], "cannot load the tokenizer of"),
        (["--data", "{teacher}", "--model", "{tmp}/out"], "is also an input of this run"),  # trained in place
        (["--data", "{teacher}", "--set", "lr_scheduler_type=cosin"], "cannot build the trainer with these settings: cosin"),
        (["--data", "{teacher}", "--set", "attn_implementation=foo"], "cannot build the trainer with these settings:"),
        (["--data", "{teacher}", "--set", "use_peft=true", "--set", "lora_target_modules=[qproj]", "-q"],
         "cannot build the trainer with these settings: Target modules {'qproj'} not found"),
        (["--data", "{teacher}", "--set", "use_peft=true", "--set", "lora_target_modules=[q_proj,qproj_typo]", "-q"],
         "lora_target_modules names qproj_typo, which the model has no module of (its linear layers: down_proj,"),
    ],
)
def test_bad_input_exits_2_with_one_line(run_cli, tmp_path, teacher, tiny_student, args, message):
    # tiny_student: the offline student is built before the command runs (its build writes progress bars)
    broken = tmp_path / "broken.jsonl"
    broken.write_bytes(teacher.read_bytes().splitlines()[0] + b"\n{\"schema\": \n")
    (tmp_path / "empty-model").mkdir()
    args = [a.format(teacher=teacher, broken=broken, tmp=tmp_path, v1=teacher.with_name("v1.jsonl")) for a in args]
    code, out, err = run_cli("sft", "--config", "configs/sft-tiny.yaml", "-o", str(tmp_path / "out"), *args)
    assert code == 2, err
    assert out == "" and len(err.strip().splitlines()) == 1 and message in err, err
    assert not (tmp_path / "out").exists()  # a run that fails leaves no empty output folder behind


@pytest.mark.slow
def test_sft_command_trains_and_prints_the_summary(run_cli, tmp_path, teacher, tiny_student):
    out = tmp_path / "run"
    code, stdout, err = run_cli("sft", "--config", "configs/sft-tiny.yaml", "--data", str(teacher), "-o", str(out),
                                "--max-steps", "2", "--set", "val_fraction=0", "--set", "per_device_train_batch_size=2", "-q")
    assert code == 0, err
    summary = orjson.loads(stdout)  # stdout holds the result only; logs went to stderr
    assert summary["global_step"] == 2 and summary["output_dir"] == str(out) and summary["eval_loss_last"] is None
    assert "sft: 2 steps, train loss" in err and (out / "model.safetensors").exists()  # sft-tiny trains every weight
    assert "{'loss'" not in err  # -q: the log entries go to training_log.jsonl, not the terminal
    card = (out / "README.md").read_text()  # ours, not TRL's (which names no local base: "[None]")
    assert "[None]" not in card and "| base model | `rhythm-tiny` |" in card and "| steps / epochs | 2 /" in card


def test_the_python_m_entry_takes_rhythm_sfts_set_syntax(capsys):
    """``python -m rhythm.train.sft`` (what accelerate and Jobs run) reads ``--set key=value`` as ``rhythm sft``
    does: a bad key is one line and exit 2, before anything heavy starts."""
    from rhythm.train.sft import main

    assert main(["--config", "configs/sft-tiny.yaml", "--set", "lora_rank=8"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == "rhythm sft: error: command line: unknown key 'lora_rank' for SFTRunConfig; did you mean 'lora_r'?"
    assert main(["--config", "configs/sft-tiny.yaml", "--set", "jobs.timeout=90m", "--set", "data=/nonexistent.jsonl"]) == 2
    assert capsys.readouterr().err.strip() == "rhythm sft: error: file not found: /nonexistent.jsonl"


def test_the_python_m_entries_run_under_a_profiler(tmp_path):
    """``python -m cProfile -m rhythm.train.sft`` (or grpo): the module runs beside another ``__main__``, where a
    dataclass cannot resolve string annotations such as ``ClassVar`` or ``Share``; the help prints, and a config
    loads (up to the missing data file it names)."""
    import subprocess
    import sys

    for stage in ("sft", "grpo"):
        entry = [sys.executable, "-m", "cProfile", "-o", str(tmp_path / "p.prof"), "-m", f"rhythm.train.{stage}"]
        proc = subprocess.run([*entry, "--help"], capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0 and f"python -m rhythm.train.{stage}" in proc.stdout, proc.stderr
        proc = subprocess.run([*entry, "--config", f"configs/{stage}-tiny.yaml", "--set", f"data={tmp_path / 'no.jsonl'}",
                               "--set", f"output_dir={tmp_path / 'out'}"], capture_output=True, text=True, timeout=120)
        # (cProfile swallows the exit code: the one line is the check)
        assert proc.stderr.strip() == f"rhythm {stage}: error: file not found: {tmp_path / 'no.jsonl'}", proc.stderr


def test_a_second_run_on_one_output_folder_stops_at_once(run_cli, tmp_path, teacher, tiny_student):
    """While another run holds the output folder: exit 2 with one line, the folder untouched."""
    out = tmp_path / "out"
    out.mkdir()
    (out / "training_log.jsonl").write_bytes(b'{"step": 1}\n')
    with output_lock(out):
        code, stdout, err = run_cli("sft", "--config", "configs/sft-tiny.yaml", "--data", str(teacher), "-o", str(out), "-q")
    assert code == 2 and stdout == ""
    assert err.splitlines() == [f"rhythm: error: {out} is being written by another rhythm run (it holds {lock_path(out)}); "
                                "wait for it to finish, or pass --wait-lock to wait for it"]
    assert [p.name for p in out.iterdir()] == ["training_log.jsonl"]
    assert (out / "training_log.jsonl").read_bytes() == b'{"step": 1}\n'


def test_the_python_m_entry_takes_the_output_folders_lock_in_its_first_process(tmp_path, teacher, capsys, monkeypatch):
    """``python -m rhythm.train.sft`` holds the lock ``rhythm sft`` holds: a second run stops at once, the folder
    untouched; under a launcher the first process alone takes it (the others run under its lock)."""
    from rhythm.train.sft import main

    out = tmp_path / "out"
    out.mkdir()
    (out / "training_log.jsonl").write_bytes(b'{"step": 1}\n')
    args = ["--config", "configs/sft-tiny.yaml", "--set", f"data={teacher}", "--set", f"output_dir={out}", "--set",
            "overwrite_output_dir=true", "-q"]
    with output_lock(out):
        assert main(args) == 2
        assert capsys.readouterr().err.strip().startswith(f"rhythm sft: error: {out} is being written by another")
        monkeypatch.setenv("RANK", "1")  # a later process of a launch: past the lock, to the run, which here stops
        assert main([*args, "--set", "model_name_or_path=runs/typo"]) == 2
        assert capsys.readouterr().err.strip() == "rhythm sft: error: model path not found: runs/typo"
    assert (out / "training_log.jsonl").read_bytes() == b'{"step": 1}\n'


def test_a_bad_config_under_a_launcher_is_said_by_its_first_process_only(capsys, monkeypatch):
    """Every process of a launch loads the same config: one line, not one per process (all exit 2)."""
    from rhythm.train.sft import main

    for rank, said in (("1", ""), ("0", "rhythm sft: error: max_steps must be positive or -1, got 0")):
        monkeypatch.setenv("RANK", rank)
        assert main(["--config", "configs/sft-tiny.yaml", "--set", "max_steps=0"]) == 2
        assert capsys.readouterr().err.strip() == said


def test_the_summary_line_does_not_read_one_logged_loss_as_a_loss_that_never_moved() -> None:
    from rhythm.cli.sft import _line

    summary = {"global_step": 5, "train_loss_first": 6.949, "train_loss_last": 6.949, "train_loss_steps": [1, 1],
               "eval_loss_last": None, "seconds": 3, "output_dir": "runs/x"}
    assert _line(summary) == "sft: 5 steps, train loss 6.949 (logged at step 1 only: see logging_steps), 3 s -> runs/x"
    summary.update(train_loss_last=2.5, train_loss_steps=[1, 5], eval_loss_first=7.0, eval_loss_last=3.0)
    assert _line(summary) == "sft: 5 steps, train loss 6.949 -> 2.500, validation loss 7.000 -> 3.000, 3 s -> runs/x"
    summary.update(eval_loss_first=3.0, eval_loss_steps=[5, 5])  # one validation, at the end
    assert _line(summary) == "sft: 5 steps, train loss 6.949 -> 2.500, validation loss 3.000 (at step 5 only), 3 s -> runs/x"
