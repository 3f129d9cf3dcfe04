"""rhythm quickstart: every stage's artifacts, an honest summary, and reuse of unchanged stages."""

from __future__ import annotations

import re
import struct
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import orjson
import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

import rhythm.quickstart
from rhythm.agents import teachers
from rhythm.agents.filtering import filter_beliefs
from rhythm.agents.restore import restore_labels
from rhythm.agents.tiny import _corpus
from rhythm.env.constants import ENV_VERSION
from rhythm.errors import RhythmError
from rhythm.locking import lock_path, output_lock
from rhythm.protocol import parse_reply
from rhythm.quickstart import (
    PENDING,
    STAMP,
    DaggerStage,
    QuickstartConfig,
    paired_sentences,
    quickstart,
    run_stage,
    stage_digest,
    summary_table,
)
from rhythm.records import read_episodes
from tests.shared import QUICKSTART_MINI as MINI

RHYTHM = [sys.executable, "-m", "rhythm.cli.main"]
TINY_CHANGED = "tiny student (what the agents write, or how it is built) changed"


def _png_size(path: Path) -> tuple[int, int]:
    head = path.read_bytes()[:24]
    assert head[:8] == b"\x89PNG\r\n\x1a\n"
    return struct.unpack(">II", head[16:24])


@pytest.mark.slow
def test_quickstart_runs_every_stage_and_reuses_them(tmp_path: Path, tiny_student: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = QuickstartConfig(out=str(tmp_path / "qs"), **MINI)
    said: list[str] = []
    first = quickstart(cfg, say=said.append, quiet=True)
    out = Path(cfg.out)
    # the tiny student trains every weight, on openings then whole weeks, and GRPO refines that model
    for rel in ("data/teacher.jsonl", "data/reeval.json", "sft-openings/model.safetensors", "sft/model.safetensors", "sft/training_log.jsonl",
                "grpo/model.safetensors", "grpo/training_log.jsonl", "eval/sft/eval_results_v2.json",
                "eval/grpo/eval_results_v2.episodes.jsonl", "quickstart_config.yaml", "summary.md", "summary.json"):
        assert (out / rel).exists(), rel
    assert not (out / "sft/adapter_config.json").exists() and not (out / "grpo/adapter_config.json").exists()
    for name in ("final_scores", "belief_accuracy", "training_loss"):
        w, h = _png_size(out / "plots" / f"{name}.png")
        assert w > 400 and h > 300
    assert len((out / "data/teacher.jsonl").read_bytes().splitlines()) == 6
    assert not any(s["reused"] for s in first["stages"])
    summary = (out / "summary.md").read_text()
    for agent in ("student SFT", "student SFT+GRPO", "random", "heuristic"):
        assert agent in summary
    assert "minus SFT on in-dist (paired, same seeds)" in summary
    assert set(first["students"]["student SFT"]) == {"in-dist", "ood", "discrete"}
    assert first["grpo_minus_sft"]["discrete"]["episodes"] == 3
    merged = orjson.loads((out / "eval/sft/eval_results_v2.json").read_bytes())["config"]  # what all conditions ran
    assert merged["condition"] == "all" and merged["seeds"] == {"in-dist": "0-1", "ood": "0-1", "discrete": "0-2"}

    # the same inputs again: every stage is reused and the summary is the same
    second = quickstart(cfg, say=said.append, quiet=True)
    assert all(s["reused"] for s in second["stages"])
    assert second["students"] == first["students"]

    # an output deleted by hand is made again, not passed over for the stamp beside it: weights, an eval's weeks, a figure
    def merged_weeks() -> list:
        return [(r["condition"], r["seed"], r["score"]) for _, r in read_episodes(out / "eval/sft/eval_results_v2.episodes.jsonl")]

    merged = merged_weeks()
    gone = ("grpo/model.safetensors", "eval/sft/in-dist/eval_results_v2.episodes.jsonl", "plots/belief_accuracy.png")
    for rel in gone:
        (out / rel).unlink()
    again = quickstart(cfg, say=said.append, quiet=True)
    rerun = {s["name"] for s in again["stages"] if not s["reused"]}
    assert {"grpo", "eval sft in-dist", "plot"} <= rerun and not rerun & {"generate", "sft-openings", "sft", "eval sft ood"}
    assert all((out / rel).exists() for rel in gone)
    assert merged_weeks() == merged and len(merged) == sum(MINI["eval_episodes"].values())  # played again, the same
    assert again["students"]["student SFT"] == first["students"]["student SFT"]

    # a changed teacher sentence, then a new env version: the teacher data is stale each time, and the quickstart
    # says why as it plays the weeks again
    class Stop(Exception):
        pass

    def stop_after_generate(line: str) -> None:
        said.append(line)
        if line.startswith("[generate] done"):
            raise Stop

    # the teacher weeks are written again, with the new sentence
    plan = teachers._plan_sentence
    with monkeypatch.context() as m:
        m.setattr(teachers, "_plan_sentence", lambda *args: plan(*args).replace("Plan:", "Planned:"))
        _corpus.cache_clear()
        with pytest.raises(Stop):
            quickstart(cfg, say=stop_after_generate, quiet=True)
    _corpus.cache_clear()
    assert any(line.startswith(f"[generate] {TINY_CHANGED} (") for line in said)
    assert b"Planned:" in (out / "data/teacher.jsonl").read_bytes()

    # the env version
    with monkeypatch.context() as m:
        m.setattr(rhythm.quickstart, "ENV_VERSION", "rhythm-v999")
        with pytest.raises(Stop):
            quickstart(cfg, say=stop_after_generate, quiet=True)
    assert f"[generate] env version changed ({ENV_VERSION} -> rhythm-v999): rerunning" in said

    # Killed mid-stage and started again: the same figures. A changed logging interval (no effect on any
    # weight) makes SFT and what follows run again; the run is killed while SFT trains. Meanwhile a
    # second quickstart on the folder is refused at once, and a third waits for the lock, then resumes.
    _killed_mid_sft_then_resumed(out, tmp_path, {**MINI, "sft": {**MINI["sft"], "logging_steps": 2}})
    resumed = orjson.loads((out / "summary.json").read_bytes())
    assert {s["name"]: s["reused"] for s in resumed["stages"]}["sft"] is False
    as_written = orjson.loads(orjson.dumps(first))  # the summary as summary.json holds it (lists, not tuples)
    assert resumed["students"] == as_written["students"] and resumed["grpo_minus_sft"] == as_written["grpo_minus_sft"]

    # more teacher seeds: data changes, so SFT and everything after it run again
    third = quickstart(QuickstartConfig(out=cfg.out, **{**MINI, "seeds": "0-6"}), say=said.append, quiet=True)
    reused = {s["name"]: s["reused"] for s in third["stages"]}
    assert not reused["generate"] and not reused["sft-openings"] and not reused["sft"] and not reused["grpo"] and not reused["eval sft in-dist"]
    assert len((out / "data/teacher.jsonl").read_bytes().splitlines()) == 7

    # the dagger stage on top: the refined student plays train-split people, the filter states their beliefs
    dagger = DaggerStage(config="configs/sft-tiny-dagger.yaml", seeds="5512-5513", copies=2, restore_below=0.25,
                         sft={"max_steps": 2, "eval_steps": 2, "save_steps": 2, "logging_steps": 1})
    fourth = quickstart(QuickstartConfig(out=cfg.out, **{**MINI, "seeds": "0-6"}, dagger=dagger), say=said.append, quiet=True)
    reused = {s["name"]: s["reused"] for s in fourth["stages"]}
    assert reused["sft"] and reused["grpo"] and not reused["dagger-play"] and not reused["dagger"]
    played = [r for _, r in read_episodes(out / "dagger-play/eval_results_v2.episodes.jsonl")]
    own = [r for _, r in read_episodes(out / "dagger-play/own_filtered.jsonl")]
    assert [(r["seed"], r["split"]) for r in own] == [(r["seed"], r["split"]) for r in played] == [(5512, "train"), (5513, "train")]
    assert [[s["action"] for s in r["steps"]] for r in own] == [[s["action"] for s in r["steps"]] for r in played]
    stated = np.array([[s["belief"] for s in r["steps"]] for r in own])
    assert np.abs(stated - filter_beliefs(played)).max() <= 0.005 + 1e-9
    assert all(parse_reply(s["response"]).belief == tuple(s["belief"]) for r in own for s in r["steps"])
    labels = [[rule or s["action"] for rule, s in zip(named, r["steps"], strict=True)] for named, r in zip(restore_labels(played, 0.25), played, strict=True)]
    assert [[s["response"].split("ACTION: ")[1] for s in r["steps"]] for r in own] == labels  # the restore rule's labels
    trained = yaml.safe_load((out / "dagger/sft_config.yaml").read_text())
    assert trained["model_name_or_path"] == str(out / "grpo") and trained["max_steps"] == 2
    assert trained["data"].split(",") == [str(out / "data/teacher.jsonl"), *[str(out / "dagger-play/own_filtered.jsonl")] * 2]
    assert (out / "dagger/model.safetensors").exists() and (out / "eval/dagger/eval_results_v2.episodes.jsonl").exists()
    assert set(fourth["minus_sft"]) == {"student SFT+GRPO", "student SFT+GRPO+DAgger"}
    assert fourth["minus_sft"]["student SFT+GRPO"] == fourth["grpo_minus_sft"]
    assert "SFT+GRPO+DAgger minus SFT on ood (paired, same seeds)" in (out / "summary.md").read_text()


def _wait_for(condition, what: str, proc: subprocess.Popen) -> None:
    while not condition():
        assert proc.poll() is None, f"the quickstart ended before {what}"
        time.sleep(0.05)


def _killed_mid_sft_then_resumed(out: Path, tmp_path: Path, config: dict) -> None:
    cfg_file = tmp_path / "killed.yaml"
    cfg_file.write_text(yaml.safe_dump(config))
    cmd = [*RHYTHM, "quickstart", "--config", str(cfg_file), "--out", str(out), "--quiet"]
    first_err, waiter_err = tmp_path / "first.err", tmp_path / "waiter.err"
    with first_err.open("w") as err:
        first = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=err)
    waiter: subprocess.Popen | None = None
    try:
        # it holds the lock, and its data stage is over (the stamp says another env version, so it reran
        # generate: the data folder is final only once the next stage begins)
        _wait_for(lambda: "[reeval]" in first_err.read_text(), "its data stage ended", first)
        before = stage_digest(out / "data")
        with waiter_err.open("w") as err:  # started beside the refused run: both while the first still trains
            waiter = subprocess.Popen([*cmd, "--wait-lock"], stdout=subprocess.DEVNULL, stderr=err)
        refused = subprocess.run(cmd, capture_output=True, text=True)
        assert refused.returncode == 2 and len(refused.stderr.splitlines()) == 1
        assert "is being written by another rhythm run" in refused.stderr and stage_digest(out / "data") == before
        _wait_for(lambda: "waiting for the other run" in waiter_err.read_text(), "the waiter waited", waiter)
        log = out / "sft" / "training_log.jsonl"  # the stale SFT folder (and its stamp) deleted, training begun
        _wait_for(lambda: not (out / "sft" / STAMP).exists() and log.exists() and log.stat().st_size > 0,
                  "SFT was training", first)
        first.kill()
        first.wait()
        assert waiter.wait() == 0, waiter_err.read_text()
    finally:
        for proc in (first, waiter):  # never leave one behind, even when the test fails
            if proc is not None and proc.poll() is None:
                proc.kill()
                proc.wait()


def test_a_training_stages_weights_are_its_adapter_or_its_model_or_its_shards_index(tmp_path: Path) -> None:
    from rhythm.quickstart import weights_file

    assert weights_file(tmp_path, adapter=True) == tmp_path / "adapter_model.safetensors"
    assert weights_file(tmp_path, adapter=False) == tmp_path / "model.safetensors"
    (tmp_path / "model.safetensors.index.json").write_text("{}")  # a model saved in shards
    assert weights_file(tmp_path, adapter=False) == tmp_path / "model.safetensors.index.json"


def test_run_stage_reruns_only_when_config_or_inputs_change(tmp_path: Path) -> None:
    src = tmp_path / "in.txt"
    src.write_text("a")
    target = tmp_path / "stage" / "out.txt"
    calls: list[int] = []

    def fn() -> dict:
        calls.append(1)
        target.parent.mkdir(exist_ok=True)
        target.write_text(src.read_text())
        return {"n": len(calls)}

    said: list[str] = []

    def run(config: dict) -> bool:
        return run_stage("s", tmp_path / "stage", config, [src], {"out": target}, fn, said.append, tmp_path).reused

    assert run({"k": 1, "sec": {"a": 1, "b": 2}}) is False
    assert run({"k": 1, "sec": {"a": 1, "b": 2}}) is True
    assert run({"k": 2, "sec": {"a": 1, "b": 3}}) is False  # config changed, and the stage says which settings
    assert said[-2] == "[s] config changed (k: 1 -> 2; sec.b: 2 -> 3): rerunning"
    assert run({"k": 2}) is False and said[-2] == "[s] config changed (sec.a: 1 -> <unset>; sec.b: 3 -> <unset>): rerunning"
    src.write_text("b")
    assert run({"k": 2}) is False  # input changed
    target.unlink()
    assert run({"k": 2}) is False  # output missing
    assert len(calls) == 5
    assert stage_digest(src) != stage_digest(tmp_path / "stage")
    stamp = orjson.loads((tmp_path / "stage" / ".rhythm_stage.json").read_bytes())
    assert stamp["stage"] == "s" and stamp["info"] == {"n": 5}


def test_an_interrupted_stage_goes_on_from_what_it_wrote_and_other_folders_are_left_alone(tmp_path: Path) -> None:
    """A stage killed mid-way leaves its pending stamp: rerun with the same stamp, it keeps what it wrote (generate
    resumes its weeks, SFT and GRPO their checkpoints); with another stamp, or finished and stale, what it writes is
    cleared first; what no stage made (a folder of the user's at --out) is refused, not deleted."""
    out = tmp_path / "stage" / "weeks.txt"
    said: list[str] = []

    def stage(config: dict, fail: bool = False) -> bool:
        def fn() -> None:
            with out.open("a") as fh:
                fh.write("week\n")
            if fail:
                raise KeyboardInterrupt
        return run_stage("generate", tmp_path / "stage", config, [], {"out": out}, fn, said.append, tmp_path, clears=(out,)).reused

    (tmp_path / "stage").mkdir()
    out.write_text("the user's\n")
    with pytest.raises(RhythmError, match=r"weeks.txt exists and no quickstart stage made it; move it away"):
        stage({"k": 1})
    assert out.read_text() == "the user's\n"
    out.unlink()
    with pytest.raises(KeyboardInterrupt):
        stage({"k": 1}, fail=True)
    assert stage({"k": 1}) is False and out.read_text() == "week\nweek\n"  # went on from the killed run's week
    assert said[-2] == "[generate] interrupted earlier, inputs unchanged: going on from what it wrote"
    assert stage({"k": 1}) is True and not (tmp_path / "stage" / PENDING).exists()
    with pytest.raises(KeyboardInterrupt):
        stage({"k": 2}, fail=True)  # stale: cleared, then killed
    assert stage({"k": 3}) is False and out.read_text() == "week\n"  # another stamp than the killed run's: cleared

    # a stage that clears nothing (a plot, an eval) writes over no file it did not make either
    figure = tmp_path / "plots" / "final_scores.png"
    figure.parent.mkdir()
    figure.write_text("the user's own figure")
    with pytest.raises(RhythmError, match=r"final_scores.png exists and no quickstart stage made it"):
        run_stage("plot", figure.parent, {}, [], {"png": figure}, lambda: figure.write_text("drawn"), said.append, tmp_path)
    assert figure.read_text() == "the user's own figure"


def test_an_interrupted_training_stage_resumes_from_its_newest_checkpoint(tmp_path: Path) -> None:
    """SFT and GRPO stages go on from the newest checkpoint a killed run of theirs saved (a resumed run ends as an
    uninterrupted one: tests/train); killed before its first, the folder starts afresh but for the pending stamp."""
    from rhythm.quickstart import going_on
    from rhythm.train.sft import SFTRunConfig

    run, said = tmp_path / "sft", []
    cfg = SFTRunConfig(output_dir=str(run))
    assert going_on(run, cfg, said.append) == cfg  # nothing there yet
    run.mkdir()
    for name in (PENDING, "training_log.jsonl", "checkpoint-3/model.safetensors"):
        (run / name).parent.mkdir(exist_ok=True)
        (run / name).write_text("x")
    assert going_on(run, cfg, said.append) == cfg and [p.name for p in run.iterdir()] == [PENDING]
    (run / "checkpoint-3").mkdir()
    (run / "checkpoint-3" / "trainer_state.json").write_text('{"global_step": 3}')
    assert going_on(run, cfg, said.append).resume_from_checkpoint == "latest"
    assert said == [f"resuming from {run / 'checkpoint-3'}"]


def test_a_training_stage_killed_after_its_run_finished_keeps_the_run(tmp_path: Path) -> None:
    """Killed between the run's summary and the stage's stamp, the stage keeps the finished run: resumed, its last
    checkpoint would be refused as finished. A summary cut short is not a finished run: the run goes on."""
    from rhythm.quickstart import train_or_keep
    from rhythm.train.sft import SFTRunConfig

    run, said, calls = tmp_path / "sft", [], []
    cfg = SFTRunConfig(output_dir=str(run))

    def train(config: SFTRunConfig, quiet: bool, log) -> dict:
        calls.append(config)
        return {"global_step": 4}

    run.mkdir()
    (run / "sft_summary.json").write_bytes(orjson.dumps({"global_step": 3, "eval_loss_last": 1.5}))
    assert train_or_keep(run, cfg, "sft", train, said.append, True) == {"global_step": 3, "eval_loss_last": 1.5}
    assert calls == [] and said == [f"{run} finished before the stage was stamped: keeping it"]
    (run / "sft_summary.json").write_bytes(b'{"global_st')  # killed while the summary was written
    assert train_or_keep(run, cfg, "sft", train, said.append, True) == {"global_step": 4}
    assert calls == [cfg] and not (run / "sft_summary.json").exists()


def test_the_summary_table_takes_references_without_the_heuristic() -> None:
    row = {"final_score": 0.5, "ci95": [0.4, 0.6], "final_score_v2": 0.6, "behaviour_score": 0.55, "belief_mae": None,
           "belief_mae_prior": 0.15, "parse_failure_rate": 0.0, "win_rate_vs_heuristic": None,
           "references": {"random": {"final_score": 0.1, "final_score_v2": 0.2, "behaviour_score": 0.3}}}
    assert summary_table({"student SFT": {"in-dist": row}}).splitlines()[2].endswith("| — | 0.0% | — |")


def _stage(tmp_path: Path, said: list[str]) -> bool:
    target = tmp_path / "stage" / "out.txt"

    def fn() -> None:
        target.parent.mkdir(exist_ok=True)
        target.write_text("made")

    return run_stage("generate", tmp_path / "stage", {"k": 1}, [], {"out": target}, fn, said.append, tmp_path).reused


@pytest.mark.parametrize("name, value, why", [
    ("ENV_VERSION", "rhythm-v999", f"env version changed ({ENV_VERSION} -> rhythm-v999)"),
    ("package_version", lambda: "9.9.9", "package version changed ("),
])
def test_a_new_env_or_package_version_reruns_a_stage_and_says_why(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name, value, why) -> None:
    said: list[str] = []
    assert _stage(tmp_path, said) is False
    assert _stage(tmp_path, said) is True
    monkeypatch.setattr(rhythm.quickstart, name, value)
    assert _stage(tmp_path, said) is False
    assert said[-2].startswith(f"[generate] {why}") and said[-2].endswith(": rerunning")
    assert _stage(tmp_path, said) is True  # the new stamp holds


def test_a_changed_teacher_sentence_makes_every_stage_stale_and_says_why(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """What the agents write is in every stamp (through the tiny student's cache key): teacher weeks written before a
    teacher sentence changed are not reused, nor anything made from them or from the old tiny student."""
    said: list[str] = []
    _corpus.cache_clear()
    try:
        assert _stage(tmp_path, said) is False
        assert _stage(tmp_path, said) is True
        plan = teachers._plan_sentence
        monkeypatch.setattr(teachers, "_plan_sentence", lambda *args: plan(*args).replace("Plan:", "Planned:"))
        _corpus.cache_clear()
        assert _stage(tmp_path, said) is False
        assert said[-2].startswith(f"[generate] {TINY_CHANGED} (rhythm-tiny-") and said[-2].endswith(": rerunning")
        assert _stage(tmp_path, said) is True  # the new stamp holds
    finally:
        _corpus.cache_clear()  # the memoised corpus must not keep the patched sentence


@pytest.mark.parametrize("root", [".", "2", "data", "/tmp/qs/"])
def test_a_stamp_writes_paths_under_the_folder_as_out_and_nothing_else(root: str) -> None:
    """``--out .`` (or 2, or data) once broke the stamp: the folder's name was replaced inside numbers and words."""
    under = root.rstrip("/") + "/"
    settings = {"learning_rate": 0.002, "max_steps": 120, "seeds": "0-2", "note": "data2 .2",
                "data": f"{under}data/t.jsonl,other/t.jsonl", "output_dir": f"{under}sft", "eval": {"out": [f"{under}x"]},
                "agent": f"model:{under}grpo", "other": "model:elsewhere/grpo", "time": "12:30"}
    assert rhythm.quickstart._under_out(settings, root) == {
        "learning_rate": 0.002, "max_steps": 120, "seeds": "0-2", "note": "data2 .2", "data": "<out>/data/t.jsonl,other/t.jsonl",
        "output_dir": "<out>/sft", "eval": {"out": ["<out>/x"]}, "agent": "model:<out>/grpo",  # an eval stage's agent
        "other": "model:elsewhere/grpo", "time": "12:30"}


def test_a_stale_stage_names_the_changed_input(tmp_path: Path) -> None:
    src = tmp_path / "in.txt"
    src.write_text("a")
    said: list[str] = []
    target = tmp_path / "stage" / "out.txt"

    def run() -> bool:
        return run_stage("sft", tmp_path / "stage", {}, [src], {"out": target}, lambda: target.write_text("x") and None, said.append,
                         tmp_path).reused

    target.parent.mkdir()
    assert run() is False
    src.write_text("b")
    assert run() is False
    assert said[-2] == "[sft] input changed (in.txt): rerunning"


def test_a_moved_quickstart_folder_reuses_its_stages(tmp_path: Path) -> None:
    """The stamp records paths under the quickstart's folder relative to it: moved, nothing is stale."""
    def run(root: Path) -> bool:
        src, target = root / "data" / "in.txt", root / "stage" / "out.txt"
        config = {"data": str(src), "output_dir": str(root / "stage")}
        return run_stage("s", root / "stage", config, [src], {"out": target}, lambda: target.write_text("x") and None,
                         lambda m: None, root).reused

    old = tmp_path / "a" / "qs"
    (old / "data").mkdir(parents=True)
    (old / "stage").mkdir()
    (old / "data" / "in.txt").write_text("a")
    assert run(old) is False
    assert run(old) is True
    new = tmp_path / "b" / "moved"
    new.parent.mkdir()
    old.rename(new)
    assert run(new) is True
    (new / "data" / "in.txt").write_text("b")
    assert run(new) is False  # still a real stamp: a changed input reruns


def test_a_second_quickstart_on_one_run_directory_stops_at_once(run_cli, tmp_path: Path) -> None:
    """Its SFT and GRPO stages delete stale run folders, so a second quickstart on the same --out would
    delete a run still training: it stops before touching anything, with one line and exit 2."""
    out = tmp_path / "qs"
    out.mkdir()
    (out / "summary.md").write_text("kept")
    with output_lock(out):
        code, stdout, err = run_cli("quickstart", "--out", str(out), "--quiet")
    assert code == 2 and stdout == ""
    assert err.splitlines() == [
        f"rhythm: error: {out} is being written by another rhythm run (it holds {lock_path(out)}); "
        "wait for it to finish, or pass --wait-lock to wait for it"]
    assert sorted(p.name for p in out.iterdir()) == ["summary.md"] and (out / "summary.md").read_text() == "kept"


_ci = st.tuples(st.floats(-0.1, 0.1), st.floats(0, 0.05), st.floats(0, 0.05)).map(
    lambda m: {"mean": m[0], "ci95": [m[0] - m[1], m[0] + m[2]], "episodes": 100, "win_rate": 0.5})


_row = st.fixed_dictionaries({c: _ci for c in ("in-dist", "ood", "discrete")})


@given(grpo=_row, dagger=st.one_of(st.none(), _row))
def test_paired_sentences_say_where_each_ci_lies_and_point_to_the_docs_only_when_grpo_gained_nowhere(grpo, dagger) -> None:
    minus_sft = {"student SFT+GRPO": grpo, **({"student SFT+GRPO+DAgger": dagger} if dagger else {})}
    sentences = paired_sentences(minus_sft)
    per_row = sentences[: 3 * len(minus_sft)]
    expected = [(label.removeprefix("student "), cond, d) for label, row in minus_sft.items() for cond, d in row.items()]
    assert len(per_row) == len(expected) == 3 * len(minus_sft)
    for sentence, (label, cond, d) in zip(per_row, expected, strict=True):
        lo, hi = d["ci95"]
        assert sentence.startswith(f"{label} minus SFT on {cond} (paired, same seeds): {d['mean']:+.3f} [")
        assert sentence.endswith("its CI above 0." if lo > 0 else "its CI below 0." if hi < 0 else "its CI reaches 0.")
    nothing = not any(d["ci95"][0] > 0 for d in grpo.values())
    rest = sentences[3 * len(minus_sft):]
    assert len(rest) == int(nothing)
    if nothing:
        assert "docs/grpo.md" in rest[0] and ("quickstart-dagger.yaml" in rest[0]) is (dagger is None)


@pytest.mark.parametrize("over, needle", [
    ({"grpo": {"foo": 1}}, "quickstart grpo: unknown key 'foo' for GRPORunConfig"),
    ({"sft": {"learning_rate": -1}}, "quickstart sft: learning_rate=-1"),
    ({"references": ["wizard"]}, "unknown agent 'wizard'"),
    ({"eval_episodes": {"sideways": 3}}, "eval_episodes takes a positive count"),
    ({"eval_episodes": {}}, "eval_episodes takes a positive count"),  # crashed after every training stage
    # no stage 1: the SFT stage starts where its config says, which was found missing after the teacher stage
    ({"openings_config": None, "openings": {}, "sft_config": "configs/sft-tiny-weeks.yaml", "sft": {}},
     "quickstart sft: model_name_or_path (no openings stage runs first) not found: runs/sft-tiny-openings"),
    # the stages' own rules, not only their keys (each of these failed after the teacher and SFT stages)
    ({"grpo": {**MINI["grpo"], "mode": "step"}}, "quickstart grpo: reward branch_score is the score of the week"),
    ({"grpo": {**MINI["grpo"], "reward_weights": [1.0, 2.0]}}, "quickstart grpo: reward_weights has 2 values for 1"),
    ({"sft": {**MINI["sft"], "val_fraction": 1.0}}, "quickstart sft: val_fraction=1.0"),
    ({"dagger": DaggerStage(config="configs/sft-tiny-dagger.yaml", seeds="5512-x")}, "malformed seed range '5512-x'"),
    # the teacher stage's: a finished run's data was cleared before the typo was refused
    ({"seeds": "0-3,"}, "malformed seed range '0-3,'"),
    ({"concurrency": 0}, "--concurrency and chunk must be >= 1"),
    # settings the quickstart would ignore, or undo, while recording them
    ({"grpo": {**MINI["grpo"], "jobs": {"flavor": "a10g-large"}}}, "quickstart grpo: jobs.flavor=a10g-large: the quickstart runs"),
    ({"grpo": {**MINI["grpo"], "use_peft": True}}, "quickstart sft: grpo.use_peft: the SFT student is full weights"),
    ({"dagger": DaggerStage(copies=3)}, "dagger settings without dagger.config: no DAgger stage runs"),
    ({"grpo": {**MINI["grpo"], "episode": {"every_k_turns": 4}}}, "quickstart grpo: episode is read by episode mode only"),
    ({"openings_config": None, "sft_config": "configs/sft-tiny-weeks.yaml"}, "openings settings without openings_config"),
])
def test_every_stages_settings_are_checked_before_the_first_stage(tmp_path: Path, over, needle) -> None:
    """A bad key for a late stage stops the run at once, not after the teacher and SFT stages (minutes)."""
    said: list[str] = []
    with pytest.raises(RhythmError, match=re.escape(needle)):
        quickstart(QuickstartConfig(out=str(tmp_path / "qs"), **{**MINI, **over}), say=said.append, quiet=True)
    assert said == [] and not (tmp_path / "qs").exists()


def test_a_failed_quickstart_records_no_config_it_did_not_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """quickstart_config.yaml is written with the summary: a run that fails leaves the last finished run's (or none),
    not settings that nothing in the folder was made with."""
    def fail(cfg, **kwargs):
        raise RhythmError("the teacher failed")

    monkeypatch.setattr(rhythm.quickstart, "generate", fail)
    with pytest.raises(RhythmError, match="the teacher failed"):
        quickstart(QuickstartConfig(out=str(tmp_path / "qs"), **MINI), say=lambda line: None, quiet=True)
    assert (tmp_path / "qs").is_dir() and not (tmp_path / "qs" / "quickstart_config.yaml").exists()
