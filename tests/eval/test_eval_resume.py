"""``rhythm eval --resume``: a killed eval goes on from its partial episodes file, and the result is the
uninterrupted run's."""

from __future__ import annotations

import os
import re
from pathlib import Path

import orjson
import pytest

import rhythm.agents.episodes as episodes_module
from rhythm.config import config_dict, read_recorded
from rhythm.errors import RhythmError
from rhythm.eval.evaluate import EvalConfig, resumed_weeks, run_eval


def _weeks(path: Path) -> list[dict]:
    """The episodes of a JSONL without what differs between two plays of the same week (when, how long)."""
    drop = ("created_at", "usage")
    return [{k: v for k, v in orjson.loads(line).items() if k not in drop} for line in path.read_bytes().splitlines()]


def _run_in(folder: Path, cfg: EvalConfig, **kwargs):
    """``run_eval`` with a relative output inside ``folder``, so two folders' results files can be compared byte
    for byte (the effective config, output path included, is part of them)."""
    folder.mkdir(exist_ok=True)
    here = Path.cwd()
    os.chdir(folder)
    try:
        return run_eval(cfg, **kwargs)
    finally:
        os.chdir(here)


def _killed_after(monkeypatch: pytest.MonkeyPatch, agent_batches: int, agent: str) -> None:
    """Make the run die (as Ctrl-C would) when ``agent`` starts its batch after ``agent_batches`` finished ones."""
    real = episodes_module.play_batch
    seen = {"n": 0}

    def play_batch(a, *args, **kwargs):
        if a.name == agent:
            if seen["n"] == agent_batches:
                raise KeyboardInterrupt
            seen["n"] += 1
        return real(a, *args, **kwargs)

    monkeypatch.setattr(episodes_module, "play_batch", play_batch)


def test_a_resumed_eval_equals_an_uninterrupted_one_and_plays_only_the_missing_weeks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cfg = EvalConfig(agent="bayes", condition="all", episodes=4, output="r.json")
    fresh = _run_in(tmp_path / "fresh", cfg)[0]
    fresh_episodes = tmp_path / "fresh" / "r.episodes.jsonl"

    _killed_after(monkeypatch, 1, "bayes")  # in-dist played and written, killed as ood starts
    with pytest.raises(KeyboardInterrupt):
        _run_in(tmp_path / "killed", cfg)
    folder = tmp_path / "killed"
    partial = folder / "r.episodes.jsonl.partial"
    assert not (folder / "r.json").exists() and len(partial.read_bytes().splitlines()) == 4
    with partial.open("ab") as fh:  # and a week torn mid-line by the kill
        fh.write(fresh_episodes.read_bytes().splitlines(keepends=True)[5][:200])
    monkeypatch.undo()

    played: dict[str, int] = {}
    said: list[str] = []
    results = _run_in(folder, cfg, resume=True, say=said.append,
                                       progress_factory=lambda label, total: played.setdefault(label, total) and None)[0]
    assert said == [f"resuming from {Path('r.episodes.jsonl.partial')}: 4 of the agent's weeks kept"]
    assert "bayes in-dist" not in played and played["bayes ood"] == played["bayes discrete"] == 4 * 28
    assert played["oracle in-dist"] == 4 * 28  # the references are played again, all of them
    assert (folder / "r.json").read_bytes() == (tmp_path / "fresh" / "r.json").read_bytes()
    assert results == fresh
    assert _weeks(folder / "r.episodes.jsonl") == _weeks(fresh_episodes)
    assert not partial.exists() and not (folder / "r.episodes.jsonl.partial.config.yaml").exists()
    sidecars = [read_recorded(f / "r.episodes.jsonl.config.yaml") for f in (folder, tmp_path / "fresh")]
    assert sidecars[0][0] == sidecars[1][0] == config_dict(cfg)  # the effective config beside the episodes
    assert sidecars[0][1]["config_hash"] == results.config_hash


def test_resume_keeps_weeks_written_out_of_order_and_writes_them_in_order(tmp_path: Path) -> None:
    """A partial in any order (a hand-edited one) ends as the fresh run's file: conditions, then seeds, in order."""
    cfg = EvalConfig(agent="heuristic", condition="all", episodes=3, references=[], output="r.json")
    _run_in(tmp_path / "fresh", cfg)
    lines = (tmp_path / "fresh" / "r.episodes.jsonl").read_bytes().splitlines(keepends=True)
    (tmp_path / "shuffled").mkdir()
    (tmp_path / "shuffled" / "r.episodes.jsonl.partial").write_bytes(b"".join([lines[7], lines[0], lines[4]]))
    _run_in(tmp_path / "shuffled", cfg, resume=True)
    assert _weeks(tmp_path / "shuffled" / "r.episodes.jsonl") == _weeks(tmp_path / "fresh" / "r.episodes.jsonl")
    assert (tmp_path / "shuffled" / "r.json").read_bytes() == (tmp_path / "fresh" / "r.json").read_bytes()


@pytest.mark.parametrize("args, needle", [
    (["--episodes", "4", "--resume"], "played with other settings or weights (config_hash "),  # another eval's weeks
    (["--episodes", "4", "--resume"], ": episodes: 3 -> 4)"),  # and which setting differs
    (["--episodes", "3"], "holds 3 weeks of an eval that did not finish; pass --resume"),  # a forgotten --resume
], ids=["other-settings", "named", "no-resume"])
def test_a_killed_runs_weeks_are_never_mixed_nor_lost(run_cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                     args, needle) -> None:
    """One line and exit 2, and the partial stays as it was."""
    out = tmp_path / "r.json"
    _killed_after(monkeypatch, 1, "heuristic")
    with pytest.raises(KeyboardInterrupt):
        run_eval(EvalConfig(agent="heuristic", condition="all", episodes=3, references=[], output=str(out)))
    monkeypatch.undo()
    partial = tmp_path / "r.episodes.jsonl.partial"
    before = partial.read_bytes()
    code, stdout, err = run_cli("eval", "--agent", "heuristic", *args, "--set", "references=[]", "-o", str(out), "-q")
    assert code == 2 and stdout == "" and len(err.strip().splitlines()) == 1, err
    assert needle in err and "to start over" in err
    assert partial.read_bytes() == before and not out.exists()


def test_a_partial_with_blank_and_repeated_lines_ends_as_the_fresh_runs_file(tmp_path: Path) -> None:
    cfg = EvalConfig(agent="heuristic", condition="all", episodes=2, references=[], output="r.json")
    _run_in(tmp_path / "fresh", cfg)
    lines = (tmp_path / "fresh" / "r.episodes.jsonl").read_bytes().splitlines(keepends=True)
    (tmp_path / "damaged").mkdir()
    (tmp_path / "damaged" / "r.episodes.jsonl.partial").write_bytes(
        b"".join([lines[0], b"\n", lines[1], lines[1], b"   \n", lines[3].replace(b"\n", b"\r\n"), b"\n"]))
    said: list[str] = []
    _run_in(tmp_path / "damaged", cfg, resume=True, say=said.append)
    assert said[0].endswith(": 3 of the agent's weeks kept")
    assert _weeks(tmp_path / "damaged" / "r.episodes.jsonl") == _weeks(tmp_path / "fresh" / "r.episodes.jsonl")
    assert (tmp_path / "damaged" / "r.json").read_bytes() == (tmp_path / "fresh" / "r.json").read_bytes()


def _cut_short(week: dict) -> None:
    week["steps"] = week["steps"][:5]


@pytest.mark.parametrize("edit, needle", [
    (lambda w: w.update(env_version="rhythm-v0"), "a week of env rhythm-v0"),
    (lambda w: w.update(protocol=1), "protocol v1"),
    # a week cut short was summed with the whole ones (61 steps' actions for 3 weeks); a score of null, or without
    # final_score, crashed with a traceback
    (_cut_short, "r.episodes.jsonl.partial:2: not a whole graded week (5 steps of 28"),
    (lambda w: w.update(score=None), "r.episodes.jsonl.partial:2: not a whole graded week (its score lacks"),
    (lambda w: w["score"].pop("final_score"), "not a whole graded week (its score lacks final_score"),
], ids=["env", "protocol", "cut-short", "no-score", "no-final-score"])
def test_resume_refuses_a_week_it_cannot_keep(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, edit, needle) -> None:
    cfg = EvalConfig(agent="heuristic", condition="all", episodes=2, references=[], output=str(tmp_path / "r.json"))
    _killed_after(monkeypatch, 1, "heuristic")
    with pytest.raises(KeyboardInterrupt):
        run_eval(cfg)
    monkeypatch.undo()
    partial = tmp_path / "r.episodes.jsonl.partial"
    weeks = [orjson.loads(line) for line in partial.read_bytes().splitlines()]
    edit(weeks[1])
    partial.write_bytes(b"".join(orjson.dumps(w) + b"\n" for w in weeks))
    with pytest.raises(RhythmError, match=re.escape(needle)):
        run_eval(cfg, resume=True)
    assert not (tmp_path / "r.json").exists() and partial.exists()


def test_an_evals_hash_covers_its_models_weights() -> None:
    """Weeks of a retrained model never pass for the old one's on --resume: the weights are in the hash."""
    from rhythm.config import config_hash
    from rhythm.eval.evaluate import HOW_NOT_WHAT, eval_hash

    cfg = EvalConfig(agent="model:runs/x")
    assert eval_hash(cfg, {}) == config_hash(cfg, ignore=HOW_NOT_WHAT)  # scripted agents: the settings alone
    assert len({eval_hash(cfg, {}), eval_hash(cfg, {"model:runs/x": "a" * 16}),
                eval_hash(cfg, {"model:runs/x": "b" * 16})}) == 3


def test_a_resume_refused_for_other_weights_names_them(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The refusal reads what differs from the partial's config sidecar: settings and model weights alike."""
    cfg = EvalConfig(agent="heuristic", condition="all", episodes=2, references=[], output=str(tmp_path / "r.json"))
    _killed_after(monkeypatch, 1, "heuristic")
    with pytest.raises(KeyboardInterrupt):
        run_eval(cfg)
    partial = tmp_path / "r.episodes.jsonl.partial"
    assert len(resumed_weeks(cfg, partial, {})) == 2
    with pytest.raises(RhythmError, match=r"this eval's is \w+: weights\.model:x: <unset> -> b{16}\)"):
        resumed_weeks(cfg, partial, {"model:x": "b" * 16})
    (tmp_path / "r.episodes.jsonl.partial.config.yaml").unlink()  # no sidecar: the hashes alone
    with pytest.raises(RhythmError, match=r"this eval's is \w+\); --resume would mix them"):
        resumed_weeks(cfg, partial, {"model:x": "b" * 16})


def test_an_eval_records_no_password_of_a_url(tmp_path: Path) -> None:
    """The results' config and the episodes' sidecar record ``llm.base_url`` without its password (they travel with
    the weeks, to a dataset repo too); ``rhythm generate`` already wrote its config so."""
    from rhythm.model.llm_client import LLMConfig

    cfg = EvalConfig(agent="heuristic", condition="discrete", episodes=2, references=[], output=str(tmp_path / "r.json"),
                     llm=LLMConfig(base_url="http://user:S3CRET@127.0.0.1:9/v1?api-key=K3Y&region=eu"))
    run_eval(cfg)
    for path in tmp_path.iterdir():
        assert b"S3CRET" not in path.read_bytes() and b"K3Y" not in path.read_bytes(), path
    assert orjson.loads((tmp_path / "r.json").read_bytes())["config"]["llm"]["base_url"] == (
        "http://***@127.0.0.1:9/v1?api-key=%2A%2A%2A&region=eu")


def test_resume_without_a_partial_plays_every_week(tmp_path: Path) -> None:
    said: list[str] = []
    cfg = EvalConfig(agent="heuristic", condition="discrete", episodes=2, references=[], output=str(tmp_path / "r.json"))
    results, _, episodes = run_eval(cfg, resume=True, say=said.append)
    assert said == [f"nothing to resume in {tmp_path / 'r.episodes.jsonl.partial'}; playing every week"]
    assert results.conditions["discrete"].episodes == 2 and len(episodes.read_bytes().splitlines()) == 2


@pytest.mark.slow
@pytest.mark.parametrize("sampled", [False, True], ids=["greedy", "sampled"])
def test_a_resumed_model_eval_equals_an_uninterrupted_one(tiny_student: Path, tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch, sampled: bool) -> None:
    """The student's weeks are written batch by batch, each week as it is played; a resume keeps the whole batches
    and plays the rest as an uninterrupted run batches them (a sampled reply is drawn for the weeks that share its
    batch), so greedy and sampled replies alike come out the same, also after a kill inside a batch."""
    from rhythm.model.load import ModelOptions

    options = ModelOptions(device="cpu", batch_size=2, max_new_tokens=6, do_sample=sampled, temperature=1.0)
    cfg = EvalConfig(agent=f"model:{tiny_student}", condition="in-dist", episodes=5, references=["random"],
                     output="r.json", model=options)
    _run_in(tmp_path / "fresh", cfg)
    _killed_after(monkeypatch, 2, cfg.agent)
    with pytest.raises(KeyboardInterrupt):
        _run_in(tmp_path / "killed", cfg)
    partial = tmp_path / "killed" / "r.episodes.jsonl.partial"
    assert len(partial.read_bytes().splitlines()) == 4
    partial.write_bytes(b"".join(line + b"\n" for line in partial.read_bytes().splitlines()[:3]))  # inside batch 2
    monkeypatch.undo()
    _run_in(tmp_path / "killed", cfg, resume=True)
    assert (tmp_path / "killed" / "r.json").read_bytes() == (tmp_path / "fresh" / "r.json").read_bytes()
    assert _weeks(tmp_path / "killed" / "r.episodes.jsonl") == _weeks(tmp_path / "fresh" / "r.episodes.jsonl")


@pytest.mark.slow
def test_a_model_eval_resumed_on_another_device_or_dtype_is_refused(tiny_student: Path, tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """A model's weeks played in bfloat16 on a GPU and the rest in float32 here would be one results file of two
    models' replies: the resume compares what ``auto`` became (the partial's sidecar) and refuses, keeping the weeks."""
    import yaml

    from rhythm.model.load import ModelOptions

    cfg = EvalConfig(agent=f"model:{tiny_student}", condition="in-dist", episodes=4, references=[], output="r.json",
                     model=ModelOptions(device="cpu", batch_size=2, max_new_tokens=6))
    _killed_after(monkeypatch, 1, cfg.agent)
    with pytest.raises(KeyboardInterrupt):
        _run_in(tmp_path, cfg)
    monkeypatch.undo()
    partial, sidecar = tmp_path / "r.episodes.jsonl.partial", tmp_path / "r.episodes.jsonl.partial.config.yaml"
    held, recorded = partial.read_bytes(), yaml.safe_load(sidecar.read_text())
    assert recorded["_provenance"]["runtime"] == {cfg.agent: {"device": "cpu", "dtype": "float32"}}
    recorded["_provenance"]["runtime"] = {cfg.agent: {"device": "cuda", "dtype": "bfloat16"}}  # as a GPU run writes it
    sidecar.write_text(yaml.safe_dump(recorded))
    with pytest.raises(RhythmError, match=r"its weeks were played as model:\S+ on cuda in bfloat16 and this machine "
                                          r"plays model:\S+ on cpu in float32 \(their replies differ\)"):
        _run_in(tmp_path, cfg, resume=True)
    assert partial.read_bytes() == held
    recorded["_provenance"]["runtime"] = {cfg.agent: {"device": "cpu", "dtype": "float32"}}
    sidecar.write_text(yaml.safe_dump(recorded))
    results, _, _ = _run_in(tmp_path, cfg, resume=True)
    assert results.conditions["in-dist"].episodes == 4


def test_what_decides_an_evals_weeks_is_in_its_hash_and_how_they_are_sent_is_not() -> None:
    """The hash a resumed eval checks its partial against: the same for another output, server, concurrency,
    retries or budget; another for another agent, model setting, people or grader."""
    from dataclasses import replace

    from rhythm.config import config_hash
    from rhythm.eval.evaluate import HOW_NOT_WHAT
    from rhythm.model.llm_client import LLMConfig

    base = EvalConfig(agent="openai:m", llm=LLMConfig(model="m"))
    h = config_hash(base, ignore=HOW_NOT_WHAT)
    same = [replace(base, output="elsewhere.json"),
            replace(base, llm=LLMConfig(model="m", base_url="http://127.0.0.1:9/v1", concurrency=64, max_retries=0,
                                        timeout_s=5, max_cost_usd=1.0))]
    assert all(config_hash(c, ignore=HOW_NOT_WHAT) == h for c in same)
    other = [replace(base, agent="openai:n"), replace(base, episodes=7), replace(base, split="train"),
             replace(base, grader="v2"), replace(base, llm=LLMConfig(model="m", temperature=0.5))]
    assert len({config_hash(c, ignore=HOW_NOT_WHAT) for c in other} | {h}) == len(other) + 1
