"""generate -> reeval: whole lines, resume after a kill, pipes, tamper detection."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import orjson
import pytest

from rhythm.env.constants import ENV_VERSION
from rhythm.teacher.generate import GenerateConfig, generate

RHYTHM = [sys.executable, "-m", "rhythm.cli.main"]


def _lines(path: Path) -> list[dict]:
    return [orjson.loads(line) for line in path.read_bytes().splitlines()]


def test_generate_writes_records_and_config(tmp_path: Path) -> None:
    out = tmp_path / "t.jsonl"
    summary = generate(GenerateConfig(seeds="0-3", output=str(out)))
    recs = _lines(out)
    assert summary.episodes == 4 and [r["seed"] for r in recs] == [0, 1, 2, 3]
    for r in recs:
        assert r["split"] == "train" and r["agent"] == "bayes" and r["env_version"] == "rhythm-v1"
        assert len(r["steps"]) == 28 and set(r["score"]) >= {"final_score", "final_score_v2", "behaviour_score", "belief_mae", "crashes"}
        assert set(r["usage"]) >= {"seconds"} and r["config_hash"]
        assert set(r["steps"][0]) == {"t", "day", "slot", "observation", "response", "belief", "action", "parse_ok", "reward", "meters"}
    sidecar = Path(str(out) + ".config.yaml").read_text()
    assert "teacher: bayes" in sidecar and "versions" in sidecar


@pytest.mark.slow  # > 3 s on 2 cores
def test_killed_run_resumes_without_duplicates_or_torn_lines(tmp_path: Path) -> None:
    out = tmp_path / "big.jsonl"
    cmd = [*RHYTHM, "generate", "--seeds", "0-59", "--output", str(out), "--quiet", "--set", "chunk=2"]
    proc = subprocess.Popen(cmd, stderr=subprocess.DEVNULL, start_new_session=True)
    deadline = time.time() + 60
    while time.time() < deadline and (not out.exists() or out.read_bytes().count(b"\n") < 6):
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    written = out.read_bytes().count(b"\n")
    assert 6 <= written < 60
    with out.open("ab") as fh:  # as if the kill had landed mid-line
        fh.write(b'{"schema": 1, "seed": 9')
    done = subprocess.run([*cmd, "--resume"], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert f"{written} already there" in done.stderr and "cut a torn last line" in done.stderr
    seeds = [r["seed"] for r in _lines(out)]
    assert sorted(seeds) == list(range(60))


def _without_timing(path: Path) -> list[dict]:
    return [{k: v for k, v in r.items() if k not in ("created_at", "usage")} for r in _lines(path)]


def test_generate_writes_the_same_file_whatever_the_workers_chunks_or_output(tmp_path: Path) -> None:
    """Weeks in seed order with the same config_hash: how the work was spread, or where it went, changes nothing."""
    one = tmp_path / "one.jsonl"
    generate(GenerateConfig(teacher="heuristic", seeds="0-7", output=str(one)))
    two = tmp_path / "two.jsonl"
    generate(GenerateConfig(teacher="heuristic", seeds="0-7", output=str(two), concurrency=2, chunk=1))
    assert _without_timing(two) == _without_timing(one)
    assert [r["seed"] for r in _lines(two)] == list(range(8))


def test_resume_refuses_a_file_made_with_other_settings(tmp_path: Path) -> None:
    from dataclasses import replace

    from rhythm.errors import RhythmError

    out = tmp_path / "t.jsonl"
    cfg = GenerateConfig(teacher="heuristic", seeds="0-2", output=str(out))
    generate(cfg)
    more = generate(replace(cfg, seeds="0-4", resume=True, concurrency=2, chunk=1))  # how, not what: resumes
    assert more.skipped == 3 and more.episodes == 2 and len({r["config_hash"] for r in _lines(out)}) == 1
    for spelt in ("Heuristic", " heuristic", "heuristic:"):  # the same teacher, however it is typed
        assert generate(replace(cfg, teacher=spelt, seeds="0-4", resume=True)).skipped == 5
    before = out.read_bytes()
    planner = replace(cfg.teacher_options.planner, samples=4)
    changes = ("teacher: heuristic -> random", f"teacher_options.planner.samples: {cfg.teacher_options.planner.samples} -> 4")
    for other, change in zip((replace(cfg, teacher="random"), replace(cfg, teacher_options=replace(cfg.teacher_options, planner=planner))), changes):
        with pytest.raises(RhythmError, match=rf"holds weeks made with other settings \(.*: {change}\): --resume would mix them"):
            generate(replace(other, seeds="0-5", resume=True))
    assert out.read_bytes() == before
    with pytest.raises(RhythmError, match=r"holds train-split weeks; this run plays the eval split: --resume would mix"):
        generate(replace(cfg, seeds="0-5", split="eval", resume=True))
    assert out.read_bytes() == before
    generate(replace(cfg, seeds="0-1", condition="ood", resume=True))  # another condition, the same split: one file
    assert {(r["condition"], r["split"]) for r in _lines(out)} == {("in-dist", "train"), ("ood", "train")}


def test_a_section_the_teacher_does_not_read_leaves_the_hash_and_the_resume_alone(tmp_path: Path) -> None:
    """``llm.*`` for a CPU teacher (``teacher_options`` for a chat model) makes the same weeks: the same hash, at its
    defaults the hash every earlier file carries, and a file stamped with the older all-sections hash resumes."""
    from dataclasses import replace

    from rhythm.model.llm_client import LLMConfig
    from rhythm.teacher.output import data_hash, full_hash

    out = tmp_path / "t.jsonl"
    cfg = GenerateConfig(teacher="heuristic", seeds="0-1", output=str(out))
    odd = replace(cfg, llm=LLMConfig(model="m", temperature=0.3))
    assert data_hash(cfg) == full_hash(cfg) == data_hash(odd) != full_hash(odd)
    chat = GenerateConfig(teacher="openai", llm=LLMConfig(model="m"))
    planner = replace(chat.teacher_options.planner, samples=4)
    assert data_hash(chat) == data_hash(replace(chat, teacher_options=replace(chat.teacher_options, planner=planner)))
    assert data_hash(chat) != data_hash(replace(chat, llm=LLMConfig(model="m", temperature=0.3)))
    generate(odd)
    assert {r["config_hash"] for r in _lines(out)} == {data_hash(cfg)}
    assert generate(replace(cfg, seeds="0-2", resume=True)).skipped == 2  # without the llm settings: resumes
    old = b"".join(orjson.dumps({**r, "config_hash": full_hash(odd)}) + b"\n" for r in _lines(out))
    out.write_bytes(old)  # a file this command wrote before: its hash covered the llm section
    assert generate(replace(odd, seeds="0-3", resume=True)).skipped == 3
    assert [r["seed"] for r in _lines(out)] == [0, 1, 2, 3]


@pytest.mark.parametrize("field, value, shown", [("env_version", "rhythm-v0", "env rhythm-v0, protocol v2"),
                                                   ("protocol", 1, f"env {ENV_VERSION}, protocol v1")])
def test_resume_refuses_a_file_of_another_env_or_protocol(tmp_path: Path, field: str, value, shown: str) -> None:
    """The config hash covers the settings, not the env's or the protocol's version: an upgrade that keeps the settings
    would append the new weeks beside the old ones (a file SFT then refuses whole)."""
    from dataclasses import replace

    from rhythm.errors import RhythmError

    out = tmp_path / "t.jsonl"
    cfg = GenerateConfig(teacher="heuristic", seeds="0-1", output=str(out))
    generate(cfg)
    lines = [orjson.loads(line) for line in out.read_bytes().splitlines()]
    lines[1][field] = value
    before = b"".join(orjson.dumps(r) + b"\n" for r in lines)
    out.write_bytes(before)
    with pytest.raises(RhythmError, match=rf"t\.jsonl:2: a week of {shown} .*--resume would mix them: give another output"):
        generate(replace(cfg, seeds="0-3", resume=True))
    assert out.read_bytes() == before


@pytest.mark.slow  # > 3 s on 2 cores
def test_generate_pipes_into_reeval(tmp_path: Path) -> None:
    summary = tmp_path / "summary.json"
    shell = f"{' '.join(RHYTHM)} generate --seeds 0-4 --output - --quiet | {' '.join(RHYTHM)} reeval --jsonl - --output {summary} --strict"
    res = subprocess.run(shell, shell=True, capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    data = orjson.loads(summary.read_bytes())
    assert data["episodes"] == 5 and data["flagged"] == []
    group = data["groups"][0]
    assert group["agent"] == "bayes" and set(group["baselines"]) == {"random", "heuristic"}
    assert group["final_score"]["mean"] > group["baselines"]["heuristic"]["final_score"]["mean"]


def test_reeval_of_the_same_weeks_in_another_order_gives_the_same_intervals(tmp_path: Path, run_cli) -> None:
    out = tmp_path / "t.jsonl"
    generate(GenerateConfig(seeds="0-9", output=str(out)))
    backwards = tmp_path / "backwards.jsonl"
    backwards.write_bytes(b"".join(reversed(out.read_bytes().splitlines(keepends=True))))
    groups = []
    for path in (out, backwards):
        summary = tmp_path / f"{path.stem}.json"
        assert run_cli("reeval", "--jsonl", str(path), "--output", str(summary), "--quiet", "--set", "baselines=[]")[0] == 0
        groups.append(orjson.loads(summary.read_bytes())["groups"])
    assert groups[0] == groups[1] and groups[0][0]["final_score"]["ci95"][0] < groups[0][0]["final_score"]["mean"]
    recorded = orjson.loads((tmp_path / "backwards.json").read_bytes())["config"]  # what decided the flags
    assert recorded["jsonl"] == str(backwards) and recorded["baselines"] == [] and recorded["tolerance"] == 1e-6


def test_reeval_gives_each_model_its_row_and_counts_a_week_once(tmp_path: Path, run_cli) -> None:
    """Two API models' weeks (agent "openai", the model apart) are two rows; a week given twice is flagged and
    counted once, so no interval narrows."""
    out = tmp_path / "t.jsonl"
    generate(GenerateConfig(seeds="0-3", output=str(out)))
    weeks = _lines(out)
    renamed = [{**r, "agent": "openai", "model": "big" if r["seed"] < 2 else "small"} for r in weeks]
    mixed = tmp_path / "mixed.jsonl"
    mixed.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in [*renamed, renamed[0]]))
    summary = tmp_path / "s.json"
    assert run_cli("reeval", "--jsonl", str(mixed), "--output", str(summary), "--quiet", "--set", "baselines=[]")[0] == 0
    data = orjson.loads(summary.read_bytes())
    rows = {g["agent"]: g for g in data["groups"]}
    assert set(rows) == {"openai:big", "openai:small"} and rows["openai:big"]["episodes"] == 2
    assert rows["openai:big"]["final_score"]["mean"] == pytest.approx(sum(r["score"]["final_score"] for r in weeks[:2]) / 2)
    (flag,) = data["flagged"]
    assert flag["where"].endswith(":5") and "played in-dist/train seed 0 already (at " in flag["reasons"][0]


def test_reeval_flags_a_tampered_record(tmp_path: Path, run_cli) -> None:
    out = tmp_path / "t.jsonl"
    generate(GenerateConfig(seeds="0-2", output=str(out)))
    recs = _lines(out)
    recs[1]["steps"][10]["meters"][2] += 0.05  # someone "improved" progress
    recs[2]["score"]["final_score"] = 0.99
    out.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in recs))
    code, _, err = run_cli("reeval", "--jsonl", str(out), "--strict")
    assert code == 1
    assert f"{out}:2" in err and "step 10: stored meters do not replay" in err
    assert f"{out}:3" in err and "score.final_score" in err
    assert f"{out}:1" not in err


def _edit(step: int, key: str, value=None, text: tuple[str, str] | None = None):
    def edit(record: dict) -> None:
        target = record["score"] if step < 0 else record["steps"][step]
        target[key] = target[key].replace(*text) if text else value(target[key]) if callable(value) else value
    return edit


@pytest.mark.parametrize(("edit", "says"), [
    (_edit(5, "observation", text=("Tue", "Wed")), "step 5: stored observation text does not replay"),
    (_edit(5, "day", 3), "step 5: t/day/slot 5/3/1 is not its place"),
    (_edit(10, "belief", [0.1, 0.1, 0.1]), "step 10: stored belief [0.1, 0.1, 0.1] is not the response's BELIEF line"),
    (_edit(27, "response", text=("BELIEF: S=", "BELIEF: S=0.99 was S=")), "step 27: stored belief"),
    (_edit(3, "parse_ok", False), "step 3: parse_ok is False, but the response parses"),
    (_edit(-1, "crashes", lambda n: n + 1), "score.crashes"),
    (_edit(-1, "return", lambda r: r + 0.1), "score.return"),
    (_edit(-1, "belief_score_v2", 0.5), "score.belief_score_v2"),
    (_edit(-1, "parse_failures", 2), "score.parse_failures 2 does not replay (0)"),
    (_edit(12, "meters", None), "step 12: no stored meters to check against the replay"),
    (lambda record: record["steps"][20].pop("reward"), "step 20: no stored reward to check against the replay"),
])
def test_reeval_flags_an_edit_of_what_a_week_says_or_trains_on(tmp_path: Path, run_cli, edit, says: str) -> None:
    """The observation text SFT trains on, the step's place, a belief or its reply line, ``parse_ok`` and every
    number of the score: each is what the replay or the reply itself gives, and an edit to any is flagged; so is a
    step whose meters or reward were dropped (nothing to check them against)."""
    out = tmp_path / "t.jsonl"
    generate(GenerateConfig(seeds="0-1", output=str(out)))
    recs = _lines(out)
    edit(recs[1])
    out.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in recs))
    code, _, err = run_cli("reeval", "--jsonl", str(out), "--strict", "--set", "baselines=[]")
    assert code == 1 and f"{out}:2" in err and f"{out}:1 " not in err
    assert says in " ".join(err.split()), err


@pytest.mark.parametrize("teacher", ["oracle", "bayes", "random", "heuristic", "planner"])
def test_every_built_in_agents_weeks_replay_as_written(tmp_path: Path, run_cli, teacher: str) -> None:
    """The grade is of the belief as the record keeps it (4 decimals): the oracle's full-precision truth was graded
    unrounded, and every one of its weeks failed ``reeval --strict``."""
    out = tmp_path / "t.jsonl"
    generate(GenerateConfig(seeds="0-2", output=str(out), teacher=teacher, condition="ood"))
    code, _, err = run_cli("reeval", "--jsonl", str(out), "--strict", "--set", "baselines=[]")
    assert code == 0, err


def test_reeval_replays_in_chunks_alike_and_counts_its_progress(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The replay runs in chunks so that its progress bar moves: the same summary as in one batch, with every
    record (the replay) and every step of every baseline counted once."""
    from rhythm.eval import reeval as module

    out = tmp_path / "t.jsonl"
    generate(GenerateConfig(seeds="0-4", output=str(out)))
    cfg = module.ReevalConfig(jsonl=str(out))
    whole = module.reeval(cfg)
    monkeypatch.setattr(module, "REPLAY_CHUNK", 2)
    bars: dict[str, list[int]] = {}

    def factory(label: str, total: int):
        bars[label] = [total, 0]
        return lambda n: bars[label].__setitem__(1, bars[label][1] + n)

    chunked = module.reeval(cfg, progress_factory=factory)
    assert {k: v for k, v in chunked.items() if k != "versions"} == {k: v for k, v in whole.items() if k != "versions"}
    assert bars == {"replay": [5, 5], "random": [5 * 28, 5 * 28], "heuristic": [5 * 28, 5 * 28]}


def test_reeval_still_reads_a_v1_file(tmp_path: Path, run_cli) -> None:
    """Records of text protocol v1 (schema 1, no protocol key) replay and regrade as they did: reeval
    looks at actions and meters, not at the text, so old data stays comparable."""
    from tests.train.helpers import write_v1_episodes

    out = tmp_path / "t.jsonl"
    generate(GenerateConfig(seeds="0-2", output=str(out)))
    old = write_v1_episodes(tmp_path / "v1.jsonl", _lines(out))
    assert all(r["schema"] == 1 and "protocol" not in r for r in _lines(old))
    code, _, err = run_cli("reeval", "--jsonl", str(old), "--strict", "--output", str(tmp_path / "v1.json"))
    assert code == 0, err
    code, _, _ = run_cli("reeval", "--jsonl", str(out), "--strict", "--output", str(tmp_path / "v2.json"))
    assert code == 0
    v1, v2 = (orjson.loads((tmp_path / n).read_bytes()) for n in ("v1.json", "v2.json"))
    assert v1["flagged"] == [] and v1["episodes"] == 3 and v1["groups"] == v2["groups"]


def test_reeval_shows_the_priors_error_on_the_weeks_that_stated_a_belief(tmp_path: Path) -> None:
    """As in the eval summary: a week whose last step states no belief has no belief error, and the prior's error
    beside the mean leaves it out too (grader.prior_mae_beside)."""
    from rhythm.eval.reeval import ReevalConfig, reeval

    out = tmp_path / "t.jsonl"
    generate(GenerateConfig(seeds="0-4", condition="ood", output=str(out)))
    recs = _lines(out)
    for r in recs[:3]:
        r["steps"][-1]["belief"] = None
    out.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in recs))
    group = reeval(ReevalConfig(jsonl=str(out), baselines=[]))["groups"][0]
    priors = [r["score"]["belief_mae_prior"] for r in recs]
    assert group["belief_mae_prior"] == pytest.approx((priors[3] + priors[4]) / 2, abs=1e-6)
    assert group["belief_mae"]["mean"] == pytest.approx((recs[3]["score"]["belief_mae"] + recs[4]["score"]["belief_mae"]) / 2, abs=1e-6)
