"""``rhythm relabel``: recorded weeks with the bayes filter's beliefs and the actions as played (DAgger labels)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import orjson
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from rhythm.agents.base import EpisodeSpec
from rhythm.agents.episodes import play, replay, replay_records
from rhythm.agents.filtering import filter_beliefs, filtered_weeks
from rhythm.agents.registry import make_agent
from rhythm.agents.restore import restoring_action
from rhythm.env.constants import ACTION_INDEX, ACTIONS
from rhythm.protocol import parse_reply
from rhythm.records import JsonlWriter, read_episodes


def _weeks(path: Path, agent: str, specs: list[EpisodeSpec]) -> list[dict]:
    records = [r.to_dict() for r in play(make_agent(agent), specs)]
    with JsonlWriter(path) as w:
        for r in records:
            w.write(r)
    return records


def test_relabel_writes_the_filters_beliefs_and_keeps_the_actions(run_cli, tmp_path: Path) -> None:
    played = _weeks(tmp_path / "weeks.jsonl", "heuristic", [EpisodeSpec("in-dist", "train", 5), EpisodeSpec("ood", "train", 6)])
    code, _, err = run_cli("relabel", str(tmp_path / "weeks.jsonl"), "-o", str(tmp_path / "out" / "own.jsonl"))
    assert code == 0 and "relabelled 2 weeks" in err
    own = [r for _, r in read_episodes(tmp_path / "out" / "own.jsonl")]
    assert [[s["action"] for s in r["steps"]] for r in own] == [[s["action"] for s in r["steps"]] for r in played]
    stated = np.array([[s["belief"] for s in r["steps"]] for r in own])
    assert np.abs(stated - filter_beliefs(played)).max() <= 0.005 + 1e-9
    for r in own:
        for s in r["steps"]:
            reply = parse_reply(s["response"])
            assert reply.ok and reply.belief == tuple(s["belief"]) and s["response"].endswith(f"ACTION: {s['action']}")
    assert not (tmp_path / "out" / "own.jsonl.partial").exists()
    assert all(r["relabelled"] == {"belief": "bayes filter", "action": "as played"} for r in own)
    assert all(r["agent"] == "heuristic" and r["score"] == p["score"] for r, p in zip(own, played, strict=True))
    sidecar = yaml.safe_load((tmp_path / "out" / "own.jsonl.config.yaml").read_text())
    assert sidecar["restore_below"] is None and sidecar["_provenance"]["stage"] == "relabel"
    assert "versions" in sidecar["_provenance"] and " relabel " in sidecar["_provenance"]["command"]
    code, out, _ = run_cli("relabel", str(tmp_path / "weeks.jsonl"))  # stdout by default
    assert code == 0 and [orjson.loads(line) for line in out.splitlines()] == own


def test_the_filter_on_its_teachers_weeks_changes_little_and_weeks_may_differ_in_length(tmp_path: Path) -> None:
    """On the bayes teacher's own weeks the filter restates the teacher's beliefs; a cut week is relabelled too."""
    weeks = _weeks(tmp_path / "t.jsonl", "bayes", [EpisodeSpec("in-dist", "train", s) for s in (0, 1)])
    cut = {**weeks[1], "steps": weeks[1]["steps"][:8]}
    own = filtered_weeks([weeks[0], cut])
    assert [len(r["steps"]) for r in own] == [28, 8] and weeks[0]["steps"][0] is not own[0]["steps"][0]
    for before, after in zip([weeks[0], cut], own, strict=True):
        assert max(abs(a - b) for s, t in zip(before["steps"], after["steps"], strict=True)
                   for a, b in zip(s["belief"], t["belief"], strict=True)) <= 0.005 + 1e-9


@settings(max_examples=25, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["in-dist", "ood", "discrete"]), st.sampled_from(["train", "eval"]),
                          st.integers(0, 50), st.lists(st.sampled_from(ACTIONS), max_size=6)), min_size=1, max_size=8))
def test_replay_records_batches_records_as_each_alone(rows: list[tuple[str, str, int, list[str]]]) -> None:
    """Records of any conditions, splits and lengths, replayed in batches: every record once, with its own actions,
    and each the same as replayed alone; ``seen`` is the start state, then the meters after each step before."""
    records = [{"condition": c, "split": s, "seed": seed, "prefix": actions} for c, s, seed, actions in rows]
    visited: list[int] = []
    for idx, actions, played in replay_records(records, lambda r: r["prefix"]):
        visited += idx
        for k, i in enumerate(idx):
            r = records[i]
            alone = replay(r["condition"], r["split"], [r["seed"]], np.array([[ACTION_INDEX[a] for a in r["prefix"]]]))
            assert actions[k].tolist() == [ACTION_INDEX[a] for a in r["prefix"]]
            np.testing.assert_array_equal(played.meters[k], alone.meters[0])
            np.testing.assert_array_equal(played.final_meters[k], alone.final_meters[0])
            if r["prefix"]:
                np.testing.assert_array_equal(played.seen[k, 0], alone.start_meters[0])
                np.testing.assert_array_equal(played.seen[k, 1:], alone.meters[0, :-1])
    assert sorted(visited) == list(range(len(records)))


def test_relabel_bad_input_is_one_line_and_exit_2(run_cli, tmp_path: Path) -> None:
    code, out, err = run_cli("relabel", str(tmp_path / "missing.jsonl"))
    assert code == 2 and out == "" and len(err.splitlines()) == 1 and "missing.jsonl" in err
    broken = tmp_path / "broken.jsonl"
    broken.write_text('{"not": "an episode"}\n')
    target = tmp_path / "own.jsonl"
    target.write_text("kept\n")
    code, out, err = run_cli("relabel", str(broken), "-o", str(target))
    assert code == 2 and len(err.splitlines()) == 1 and "broken.jsonl:1" in err
    assert target.read_text() == "kept\n", "an earlier output survives a failed run"
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    code, _, err = run_cli("relabel", str(empty))
    assert code == 2 and err.strip() == f"rhythm: error: no weeks in {empty}"
    # a week of another env version or text protocol: the filter would read it through this env (and SFT took it)
    week = _weeks(tmp_path / "weeks.jsonl", "heuristic", [EpisodeSpec("in-dist", "train", 0)])[0]
    for other, needle in (({**week, "env_version": "rhythm-v0"}, "a week of env rhythm-v0"),
                          ({**week, "protocol": 1}, "record is text protocol v1")):
        path = tmp_path / "other.jsonl"
        path.write_bytes(orjson.dumps(other) + b"\n")
        code, out, err = run_cli("relabel", str(path), "-o", str(tmp_path / "other_out.jsonl"))
        assert code == 2 and len(err.splitlines()) == 1 and needle in err, err
        assert not (tmp_path / "other_out.jsonl").exists()


def test_restore_labels_name_the_rules_action_where_a_meter_runs_low_and_keep_the_rest(run_cli, tmp_path: Path) -> None:
    """``--restore-below``: the label is the restore rule's action at the meters seen before the step (the week
    replayed through its own actions), the last step and the steps where it names none keep the played action;
    the beliefs, the recorded actions and every other field stay as without it."""
    played = _weeks(tmp_path / "weeks.jsonl", "random", [EpisodeSpec("ood", "train", s) for s in range(4)])
    code, _, err = run_cli("relabel", str(tmp_path / "weeks.jsonl"), "-o", str(tmp_path / "own.jsonl"), "--restore-below", "0.3")
    assert code == 0 and "relabelled 4 weeks" in err
    own = [r for _, r in read_episodes(tmp_path / "own.jsonl")]
    plain = filtered_weeks(played)
    named = changed = 0
    for record, week, base in zip(played, own, plain, strict=True):
        seen = replay(record["condition"], record["split"], [record["seed"]], np.zeros((1, 0), dtype=np.int64)).start_meters[0]
        for t, (step, label, kept) in enumerate(zip(record["steps"], week["steps"], base["steps"], strict=True)):
            rule = restoring_action(seen, t, 0.3) if t < len(record["steps"]) - 1 else None
            named += rule is not None
            changed += rule is not None and rule != step["action"]
            assert label["response"].endswith(f"\nACTION: {rule or step['action']}")
            assert {**label, "response": None} == {**kept, "response": None}  # the action field stays as played
            seen = step["meters"]
    assert changed > 0 and named > changed  # a random agent lets meters run low, and sometimes plays the rule
    assert [w["relabelled"] for w in own] == [{"belief": "bayes filter", "action": "restore rule below 0.3"}] * 4
    unlabelled = filtered_weeks(played, restore_below=0.0)  # no meter is below 0: nothing is named
    assert [{**w, "relabelled": None} for w in unlabelled] == [{**w, "relabelled": None} for w in plain]


def test_sft_learns_the_restore_labels_and_keeps_weeks_that_had_a_parse_failure(run_cli, tmp_path: Path) -> None:
    """The DAgger stage's SFT (strip_reasoning, as configs/sft-tiny-dagger.yaml) trains on the label each relabelled
    reply names, not the action played (the stripped reply was rebuilt from the played action: the restore labels
    never reached training); a week with a parse failure as played is relabelled whole, and kept."""
    from rhythm.config import load_config
    from rhythm.train.data import DataOptions, build_examples
    from rhythm.train.sft import SFTRunConfig

    played = _weeks(tmp_path / "played.jsonl", "random", [EpisodeSpec("ood", "train", s) for s in range(4)])
    broken = {**played[0], "steps": [{**st, "response": "no idea", "parse_ok": False} if t == 3 else st
                                     for t, st in enumerate(played[0]["steps"])],
              "score": {**played[0]["score"], "parse_failures": 1}}
    with JsonlWriter(tmp_path / "weeks.jsonl") as w:
        for r in [broken, *played[1:]]:
            w.write(r)
    code, _, err = run_cli("relabel", str(tmp_path / "weeks.jsonl"), "-o", str(tmp_path / "own.jsonl"), "--restore-below", "0.3")
    assert code == 0, err
    own = [r for _, r in read_episodes(tmp_path / "own.jsonl")]
    assert all(st["parse_ok"] for w in own for st in w["steps"]) and own[0]["score"]["parse_failures"] == 0
    dagger = load_config(SFTRunConfig, "configs/sft-tiny-dagger.yaml")
    assert dagger.strip_reasoning and dagger.drop_parse_failures
    options = DataOptions(val_fraction=0.0, strip_reasoning=True, drop_parse_failures=True)
    rows, report = build_examples(str(tmp_path / "own.jsonl"), options)
    assert report.episodes_kept == 4 and not report.dropped_episodes
    by_seed = {r["seed"]: r for r in rows["train"]}
    for week in own:
        replies = [m["content"] for m in by_seed[week["seed"]]["messages"] if m["role"] == "assistant"]
        assert [r.split("ACTION: ")[1] for r in replies] == [st["response"].split("ACTION: ")[1] for st in week["steps"]]
    assert any(st["response"].split("ACTION: ")[1] != st["action"] for w in own for st in w["steps"]), "a label differs"


def test_relabelling_in_batches_labels_each_week_as_alone(tmp_path: Path, monkeypatch) -> None:
    """``rhythm relabel`` works through the weeks in batches under its progress bar: the same weeks as one call."""
    import rhythm.agents.filtering as filtering

    specs = [EpisodeSpec(c, "train", s) for c in ("in-dist", "ood") for s in range(3)]
    played = _weeks(tmp_path / "weeks.jsonl", "heuristic", specs)
    monkeypatch.setattr(filtering, "RELABEL_CHUNK", 4)
    advanced: list[int] = []
    assert filtering.relabel_file(str(tmp_path / "weeks.jsonl"), str(tmp_path / "own.jsonl"), 0.25,
                                  bars=lambda label, total: advanced.append(total) or advanced.append) == (6, 0)
    assert advanced == [6, 4, 2]
    own = [r for _, r in read_episodes(tmp_path / "own.jsonl")]
    assert own == orjson.loads(orjson.dumps(filtered_weeks(played, 0.25)))


def test_relabel_refuses_eval_weeks_and_resumes_what_a_killed_run_wrote(run_cli, tmp_path: Path) -> None:
    """What relabel writes is SFT data: an eval-split week is refused here (it used to pass, and only the next stage
    refused it). Each batch is written as it is labelled, so a killed run resumes to the file an unkilled one
    writes; an output that exists needs --resume, and a resume from another file or with another restore_below is
    refused."""
    ev = tmp_path / "eval.jsonl"
    _weeks(ev, "heuristic", [EpisodeSpec("in-dist", "eval", 1)])
    code, _, err = run_cli("relabel", str(ev), "-o", str(tmp_path / "x.jsonl"))
    assert code == 2 and f"{ev}:1: a week of an eval-split person" in err and not (tmp_path / "x.jsonl").exists()
    weeks = tmp_path / "weeks.jsonl"
    _weeks(weeks, "heuristic", [EpisodeSpec("in-dist", "train", s) for s in range(3)])
    whole, cut = tmp_path / "whole.jsonl", tmp_path / "cut.jsonl"
    assert run_cli("relabel", str(weeks), "-o", str(whole))[0] == 0
    lines = whole.read_bytes().splitlines(keepends=True)
    cut.write_bytes(lines[0] + lines[1][:40])  # killed in the second week's line
    (tmp_path / "cut.jsonl.config.yaml").write_bytes((tmp_path / "whole.jsonl.config.yaml").read_bytes())
    code, _, err = run_cli("relabel", str(weeks), "-o", str(cut))
    assert code == 2 and "exists; pass --resume" in err
    code, _, err = run_cli("relabel", str(weeks), "-o", str(cut), "--resume", "--restore-below", "0.25")
    assert code == 2 and "relabelled with other settings (restore_below: None -> 0.25)" in err
    other = tmp_path / "other.jsonl"
    other.write_bytes(weeks.read_bytes())
    code, _, err = run_cli("relabel", str(other), "-o", str(cut), "--resume")  # another file's weeks: not mixed in
    assert code == 2 and "relabelled with other settings (episodes: " in err
    code, _, err = run_cli("relabel", str(weeks), "-o", str(cut), "--resume")
    assert code == 0 and "relabelled 2 weeks" in err and "(1 already there)" in err
    assert cut.read_bytes() == whole.read_bytes()
