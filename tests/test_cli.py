"""The CLI: bad input gets one line on stderr and exit code 2; help is instant."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import orjson
import pytest


@pytest.mark.parametrize(
    "args, needle",
    [
        (["generate", "--seeds", "5-x", "--output", "-"], "malformed seed range"),
        (["eval", "--seeds", "5-x"], "malformed seed range"),
        (["eval", "--seeds", ""], "empty seed range"),  # not the default seeds
        (["eval", "--condition", "sideways"], "unknown condition"),
        (["generate", "--condition", "sideways", "--output", "-"], "unknown condition"),
        (["eval", "--agent", "wizard"], "unknown agent"),
        (["generate", "--teacher", "wizard", "--output", "-"], "unknown agent"),
        (["eval", "--set", "episodez=3"], "did you mean 'episodes'"),
        (["eval", "--config", "missing.yaml"], "config file not found"),
        (["reeval", "--jsonl", "missing.jsonl"], "file not found"),
        (["eval", "--no-such-flag"], "No such option"),
        (["eval", "--episodes", "many"], "--episodes"),
        (["eval", "--split", "bogus"], "unknown split 'bogus'; expected one of"),
        (["analyze", "paired", "missing.jsonl", "other.jsonl"], "file not found: missing.jsonl"),
        (["analyze", "paired", "only-one.jsonl"], "Missing argument 'SECOND'"),
        (["analyze", "belief-steps", "missing.jsonl"], "file not found: missing.jsonl"),
        (["analyze", "belief-steps", "missing.jsonl", "--steps", "1,x"], "--steps must be comma-separated integers"),
        (["analyze", "tables"], "nothing to tabulate"),
        (["analyze", "paired", "-", "-"], "stdin (-) can be read only once"),
        (["analyze", "teacher-forced", "missing-model", "missing.jsonl", "--condition", "oodd"], "unknown condition 'oodd'"),
        (["sft", "--data", "."], ". is a folder; give its JSONL files"),
        (["plot", "--results", "."], ". is a folder; give its eval_results_v2.json"),
        (["analyze", "tables", "missing.json"], "file not found: missing.json"),
        (["analyze", "teacher-forced", "missing-model", "missing.jsonl"], "file not found: missing.jsonl"),
        (["analyze", "nonsense"], "No such command 'nonsense'"),
        (["eval", "--agent", "openai:m", "--concurrency", "0"], "concurrency"),
        (["eval", "--output", ""], "the output path is empty"),
        (["eval", "--output", "-"], "give --output a path, not -"),
        (["eval", "--output", "r.episodes.jsonl"], "is the results JSON (its weeks go beside it as NAME.episodes.jsonl)"),
        (["generate", "--seeds", "0-1", "--output", ""], "the output path is empty"),
        (["eval", "--set", "teacher.posterior.particles=0"], "teacher.posterior.particles=0: input should be greater"),
        (["generate", "--set", "teacher_options.planner.horizon=0", "--output", "-"], "planner.horizon=0"),
        (["generate", "--teacher", "model:runs/sft", "--output", "-"], "is a student, not a teacher"),
        (["reeval", "--jsonl", "-", "--set", "tolerance=-1"], "tolerance=-1"),
        (["eval", "--agent", "bayes:x"], "agent 'bayes' takes no argument, got 'bayes:x'"),
        (["generate", "--teacher", "heuristic:fast", "--output", "-"], "agent 'heuristic' takes no argument"),
        (["eval", "--seeds", "0-1", "--episodes", "3"], "give --episodes (seeds 0..N-1) or --seeds, not both"),
        (["eval", "--set", "seeds=0-1", "--set", "episodes=3"], "give episodes (3: seeds 0..N-1) or seeds (0-1), not both"),
        (["generate", "--model", "gpt-4o-mini", "--max-cost-usd", "5", "--output", "x.jsonl"],
         "--model, --max-cost-usd set up a chat-model teacher (--teacher openai or azure); the bayes teacher would ignore it"),
        (["generate", "--teacher", "heuristic", "--base-url", "http://localhost:8000/v1", "--output", "-"], "the heuristic teacher"),
        (["generate", "--max-cost-usd", "-5", "--output", "-"], "llm.max_cost_usd=-5.0: input should be greater than 0"),
        (["sft", "--data", "x.jsonl", "--resume", "--set", "overwrite_output_dir=true"], "contradict each other"),
        (["grpo", "--resume", "--set", "overwrite_output_dir=true"], "contradict each other"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(run_cli, args, needle, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # default outputs (eval_results_v2.json ...) would land here
    code, out, err = run_cli(*args)
    assert code == 2
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    assert lines[0].startswith("rhythm: error:") and needle in lines[0]
    assert list(tmp_path.iterdir()) == []  # bad input writes nothing, not even a lock file


def test_an_eval_flag_wins_over_the_configs_other_way_of_naming_the_seeds(run_cli, tmp_path: Path) -> None:
    """``--episodes`` over a config's ``seeds`` (and ``--seeds`` over its ``episodes``): what is played and what the
    results record agree, rather than seeds silently winning over the flag."""
    config = tmp_path / "c.yaml"
    config.write_text("seeds: 0-4\nepisodes: null\n")
    for flag, played in ((["--episodes", "3"], 3), (["--seeds", "1-2", "--set", "episodes=7"], 2)):
        out = tmp_path / f"{played}.json"
        code, _, err = run_cli("eval", "--agent", "random", "--condition", "in-dist", "--config", str(config), *flag,
                               "--set", "references=[]", "--output", str(out), "--quiet")
        assert code == 0, err
        results = orjson.loads(out.read_bytes())
        assert results["conditions"]["in-dist"]["episodes"] == played
        assert (results["config"]["episodes"], results["config"]["seeds"]) == ((3, None) if played == 3 else (None, "1-2"))


@pytest.mark.parametrize("args, needle", [
    (["--agent", "openai:m", "--concurrency", "0"], "llm.concurrency"),
    (["--agent", "model:./no-such-model-dir"], "model path not found"),
    (["--seeds", "5-x"], "malformed seed range"),
])
def test_eval_with_bad_settings_keeps_the_last_eval(run_cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                    args, needle) -> None:
    """Settings, seeds and agents are checked before the episodes file is replaced: the last eval's
    records stay."""
    monkeypatch.chdir(tmp_path)
    results, episodes = tmp_path / "r.json", tmp_path / "r.episodes.jsonl"
    results.write_bytes(b"{}\n")
    episodes.write_bytes(b'{"seed": 0}\n')
    size = [] if "--seeds" in args else ["--episodes", "1"]
    code, out, err = run_cli("eval", *args, *size, "--output", str(results), "--quiet")
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1 and needle in err, err
    assert episodes.read_bytes() == b'{"seed": 0}\n' and results.read_bytes() == b"{}\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.episodes.jsonl", "r.json"]


@pytest.mark.parametrize("args, needle", [
    (["eval", "--episodes", "1", "--output", "{folder}"], "is a folder; give a file path"),
    (["eval", "--episodes", "1", "--output", "{file}/r.json"], "is a file, not a folder"),
    (["generate", "--seeds", "0-1", "--output", "{file}/t.jsonl"], "is a file, not a folder"),
    (["reeval", "--jsonl", "{file}", "--output", "{file}"], "is also an input of this run"),
    (["relabel", "{file}", "--output", "{file}"], "is also an input of this run"),
    (["quickstart", "--out", "{file}"], "is a file; give a folder"),
    (["plot", "--results", "{file}", "--out", "{file}"], "is a file; give a folder"),
    (["eval", "--config", "{latin1}"], "not UTF-8 text"),
])
def test_an_output_that_cannot_be_written_is_refused_before_any_work(run_cli, tmp_path: Path, args, needle) -> None:
    """One line and exit 2 before anything is played or read, and every file already there stays as it was."""
    folder, file, latin1 = tmp_path / "d", tmp_path / "t.jsonl", tmp_path / "latin1.yaml"
    folder.mkdir()
    file.write_bytes(b'{"seed": 0}\n')
    latin1.write_bytes("agent: h\xe9uristic\n".encode("latin-1"))
    code, out, err = run_cli(*[a.format(folder=folder, file=file, latin1=latin1) for a in args])
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1 and needle in err, err
    assert file.read_bytes() == b'{"seed": 0}\n' and list(folder.iterdir()) == []
    assert sorted(p.name for p in tmp_path.iterdir()) == ["d", "latin1.yaml", "t.jsonl"]


def test_a_failed_eval_keeps_the_last_evals_episodes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The episodes stream to a partial file that replaces the old one only once the results are written."""
    import rhythm.eval.evaluate as evaluate_module
    from rhythm.errors import RhythmError
    from rhythm.eval.evaluate import EvalConfig, run_eval

    out = tmp_path / "r.json"
    results, _, episodes = run_eval(EvalConfig(agent="heuristic", condition="discrete", episodes=2, references=[],
                                               output=str(out)))
    before = (out.read_bytes(), episodes.read_bytes())
    real = evaluate_module.evaluate

    def dies_midway(cfg, *, on_records, **kwargs):
        real(cfg, on_records=on_records, **kwargs)  # every episode played and streamed, then the run fails
        raise RuntimeError("killed")

    monkeypatch.setattr(evaluate_module, "evaluate", dies_midway)
    with pytest.raises(RuntimeError, match="killed"):
        run_eval(EvalConfig(agent="random", condition="discrete", episodes=3, references=[], output=str(out)))
    assert (out.read_bytes(), episodes.read_bytes()) == before
    monkeypatch.setattr(evaluate_module, "evaluate", real)
    with pytest.raises(RhythmError, match="holds 3 weeks of an eval that did not finish; pass --resume"):
        run_eval(EvalConfig(agent="random", condition="discrete", episodes=3, references=[], output=str(out)))
    run_eval(EvalConfig(agent="random", condition="discrete", episodes=3, references=[], output=str(out)), start_over=True)
    assert len(episodes.read_bytes().splitlines()) == 3 and not episodes.with_name(episodes.name + ".partial").exists()


def test_broken_jsonl_line_names_file_and_line(run_cli, tmp_path: Path) -> None:
    bad = tmp_path / "episodes.jsonl"
    bad.write_text('{"schema": 1}\n')
    code, _, err = run_cli("reeval", "--jsonl", str(bad))
    assert code == 2 and f"{bad}:1: episode record lacks" in err


def test_rhythm_debug_shows_the_traceback_instead_of_one_line(tmp_path: Path) -> None:
    cmd = [sys.executable, "-m", "rhythm.cli.main", "generate", "--seeds", "5-x", "--output", str(tmp_path / "t.jsonl")]
    plain = subprocess.run(cmd, capture_output=True, text=True)
    debug = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "RHYTHM_DEBUG": "1"})
    assert plain.returncode == 2 and plain.stderr.splitlines() == [
        "rhythm: error: malformed seed range '5-x' at '5-x'; expected e.g. 0-29 or 0,5,9"]
    assert debug.returncode == 1 and debug.stderr.startswith("Traceback (most recent call last):")
    assert debug.stderr.rstrip().splitlines()[-1] == "rhythm.errors.RhythmError: malformed seed range '5-x' at '5-x'; expected e.g. 0-29 or 0,5,9"
    assert not (tmp_path / "t.jsonl").exists()


def test_a_reader_that_stops_early_ends_generate_quietly(tmp_path: Path) -> None:
    """``rhythm generate --output - | head -1``: the reader gets one whole record, and generate stops on
    the closed pipe with exit 1 and no traceback (not after playing every seed: 100,000 would take
    well over an hour)."""
    err = tmp_path / "err.txt"
    script = (f"{sys.executable} -m rhythm.cli.main generate --seeds 0-99999 --output - --quiet 2>{err} | head -1; "
              "echo ${PIPESTATUS[0]} >&2")
    proc = subprocess.Popen(["bash", "-c", script], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        out, status = proc.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        pytest.fail("generate went on playing seeds after its reader had closed the pipe")
    first = orjson.loads(out)  # one whole line, and only one
    assert first["seed"] == 0 and len(first["steps"]) == 28 and out.count("\n") == 1
    assert status.strip() == "1" and err.read_text() == ""


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full, a device whose every write fails ENOSPC")
@pytest.mark.parametrize("to", ["file", "stdout"])
def test_a_full_disk_is_one_line_and_exit_2(tmp_path: Path, to: str) -> None:
    """``--output`` on a full disk (a link to /dev/full), or ``--output -`` into one: one line naming the cause, exit 2,
    no traceback, and no second error from the exit's flush of stdout."""
    out = tmp_path / "t.jsonl"
    out.symlink_to("/dev/full")
    cmd = [sys.executable, "-m", "rhythm.cli.main", "generate", "--seeds", "0-1", "--quiet", "--output", str(out) if to == "file" else "-"]
    with open("/dev/full", "wb") as full:
        proc = subprocess.run(cmd, stdout=full if to == "stdout" else subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                              cwd=tmp_path)
    assert proc.returncode == 2 and proc.stderr.splitlines() == [
        "rhythm: error: cannot write the output: No space left on device (ENOSPC); what was written before stays; "
        "free space (or fix the device) and rerun"], proc.stderr


def test_help_does_not_import_torch() -> None:
    """``rhythm --help`` and every command's ``--help`` print without importing torch or transformers."""
    helps = [[], *([c] for c in COMMANDS), ["analyze"], *(["analyze", c] for c in ANALYSES)]
    code = ("import contextlib, io, sys, rhythm.cli.main as m\n"
            f"for args in {helps!r}:\n"
            "    with contextlib.redirect_stdout(io.StringIO()), contextlib.suppress(SystemExit):\n"
            "        m.main([*args, '--help'])\n"
            "print('torch' in sys.modules, 'transformers' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "False"], out.stderr


def test_every_command_has_help(run_cli) -> None:
    code, out, _ = run_cli("--help")
    assert code == 0
    for cmd in ("generate", "reeval", "eval"):
        assert cmd in out
        c, o, _ = run_cli(cmd, "--help")
        assert c == 0 and "--config" in o


COMMANDS = ("generate", "reeval", "upload", "sft", "grpo", "eval", "plot", "quickstart", "relabel")
ANALYSES = ("paired", "behaviour", "belief-steps", "tables", "teacher-forced")


def test_every_help_shows_an_example(run_cli) -> None:
    code, out, _ = run_cli("--help")
    for line in ("rhythm generate --seeds 0-29", "rhythm eval --condition ood", "rhythm sft --flavor a10g-large"):
        assert line in out
    for cmd in COMMANDS:
        code, out, _ = run_cli(cmd, "--help")
        assert code == 0 and "Examples:" in out and f"\n    rhythm {cmd}" in out, out


@pytest.mark.parametrize(
    "cmd, needle",
    [
        ("reeval", "file not found: data/teacher_30ep.jsonl"),
        ("upload", "nothing to upload; pass --files FILE"),
        ("sft", "file not found: data/teacher_30ep.jsonl"),
        ("grpo", "file not found: data/teacher_30ep.jsonl"),
        ("plot", "nothing to plot: pass --results FILE"),
    ],
)
def test_no_arguments_in_an_empty_directory_says_what_is_missing(run_cli, tmp_path, monkeypatch, cmd, needle) -> None:
    monkeypatch.chdir(tmp_path)
    code, out, err = run_cli(cmd)
    assert code == 2 and out == "" and err.splitlines() == [f"rhythm: error: {needle}" + err.split(needle, 1)[1].rstrip("\n")]
    assert list(tmp_path.iterdir()) == []  # nothing written


def test_every_analysis_tool_is_a_subcommand_with_an_example(run_cli) -> None:
    code, out, _ = run_cli("--help")
    assert code == 0 and "analyze" in out
    for tool in ("paired", "belief-steps", "tables", "teacher-forced"):
        code, out, _ = run_cli("analyze", tool, "--help")
        assert code == 0 and "Examples:" in out and f"\n    rhythm analyze {tool}" in out, out


def test_analyze_tables_prints_the_docs_tables(run_cli, tmp_path: Path) -> None:
    from rhythm.eval.evaluate import EvalConfig, run_eval

    out_path = tmp_path / "heuristic" / "eval_results_v2.json"
    run_eval(EvalConfig(agent="heuristic", condition="discrete", episodes=2, output=str(out_path)), say=lambda m: None)
    code, out, err = run_cli("analyze", "tables", str(out_path))
    assert code == 0 and err == ""
    assert out.startswith("|") and "heuristic" in out and "discrete" in out
    row = next(line for line in out.splitlines() if line.startswith("| heuristic |"))
    assert row.count("[") == 1 and row.endswith(", 2 |"), row  # the agent's v3 with its CI, and the people
    assert "Note:" not in out
    other = tmp_path / "other" / "eval_results_v2.json"
    run_eval(EvalConfig(agent="heuristic", condition="discrete", seeds="5-7", output=str(other)), say=lambda m: None)
    code, out, err = run_cli("analyze", "tables", str(out_path), str(other))
    assert code == 2 and "heuristic is evaluated in discrete by two of the files" in err
    bayes = tmp_path / "bayes" / "eval_results_v2.json"
    run_eval(EvalConfig(agent="bayes", condition="discrete", seeds="5-7", references=[], output=str(bayes)),
             say=lambda m: None)
    code, out, err = run_cli("analyze", "tables", str(out_path), str(bayes))
    assert code == 0 and "| teacher (bayes) |" in out
    assert "Note: in discrete the files played different people (heuristic: eval seeds 0-1; teacher (bayes): eval " \
           "seeds 5-7)" in " ".join(out.split())


def test_version_prints_the_package_and_env_versions(run_cli) -> None:
    from importlib import metadata

    from rhythm.env import ENV_VERSION

    code, out, err = run_cli("--version")
    assert code == 0 and err == ""
    assert out.strip() == f"rhythm {metadata.version('rhythm')} (env {ENV_VERSION}, text protocol v2)"


@pytest.mark.parametrize(
    "args, line",
    [
        (["--no-such-flag"], "rhythm: error: No such option: --no-such-flag (see --help)"),
        (["eval", "--no-such-flag"], "rhythm: error: eval: No such option: --no-such-flag (see --help)"),
    ],
)
def test_a_usage_error_names_the_program_once(run_cli, args, line) -> None:
    code, out, err = run_cli(*args)
    assert code == 2 and out == "" and err.splitlines() == [line]


def test_a_failing_read_is_one_line_that_does_not_blame_a_full_disk(run_cli, monkeypatch, tmp_path: Path) -> None:
    """EIO comes from a read as well as a write: the line names the device and the file, not an output to free
    space for."""
    import errno

    import rhythm.eval.reeval as reeval

    def failing(path):
        raise OSError(errno.EIO, "Input/output error", str(path))
        yield  # a generator, as read_episodes is

    monkeypatch.setattr(reeval, "read_episodes", failing)
    data = tmp_path / "weeks.jsonl"
    data.write_text("{}\n")
    code, out, err = run_cli("reeval", "--jsonl", str(data), "--quiet")
    assert code == 2 and out == "" and err.splitlines() == [
        f"rhythm: error: the device failed a read or write on {data}: Input/output error (EIO); what was written "
        "before stays; fix the device and rerun"], err
