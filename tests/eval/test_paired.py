"""``rhythm analyze paired`` (:mod:`rhythm.eval.paired`): two agents' final scores paired by person, the arithmetic by hand, and the
command line's bad input."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rhythm.agents.base import EpisodeSpec
from rhythm.agents.episodes import play
from rhythm.agents.registry import make_agent
from rhythm.errors import RhythmError
from rhythm.eval.paired import (
    distance_shares,
    episode_value,
    final_scores,
    lower_is_better,
    paired_differences,
    paired_table,
)
from rhythm.records import JsonlWriter

people = st.dictionaries(
    st.tuples(st.sampled_from(["in-dist", "ood", "discrete"]), st.just("train"), st.integers(0, 10_000)),
    st.floats(min_value=-1.0, max_value=1.0, allow_nan=False), min_size=1, max_size=30)


@given(people, st.one_of(st.just(0.0), st.floats(0.01, 0.5), st.floats(-0.5, -0.01)))
@settings(max_examples=100, deadline=None)
def test_a_constant_shift_is_the_difference_with_a_zero_width_interval(first, shift):
    second = {k: v + shift for k, v in first.items()}
    diffs = paired_differences(first, second)
    assert sum(d["episodes"] for d in diffs.values()) == len(first)
    for d in diffs.values():
        assert d["mean"] == pytest.approx(shift, abs=1e-6)
        if d["episodes"] == 1:
            assert d["ci95"] is None  # one person: no interval
        else:
            assert d["ci95"][0] == pytest.approx(shift, abs=1e-6) and d["ci95"][1] == pytest.approx(shift, abs=1e-6)
        assert d["win_rate"] == (1.0 if shift > 0 else 0.0 if shift < 0 else 0.5)


def test_only_shared_people_are_paired_and_conditions_keep_the_benchmark_order():
    first = {("ood", "train", 1): 0.2, ("in-dist", "train", 1): 0.5, ("in-dist", "train", 2): 0.1, ("discrete", "eval", 3): 0.9}
    second = {("ood", "train", 1): 0.6, ("in-dist", "train", 1): 0.4, ("in-dist", "train", 2): 0.4, ("discrete", "train", 3): 0.0}
    diffs = paired_differences(first, second)
    assert list(diffs) == ["in-dist", "ood"]  # discrete's person is on another split: not the same person
    assert diffs["in-dist"]["episodes"] == 2 and diffs["in-dist"]["mean"] == pytest.approx(0.1)
    lo, hi = diffs["in-dist"]["ci95"]
    assert lo <= 0.1 <= hi
    assert diffs["in-dist"]["win_rate"] == 0.5 and diffs["ood"]["win_rate"] == 1.0
    assert diffs["ood"]["mean"] == pytest.approx(0.4)
    with pytest.raises(RhythmError, match="share no person"):
        paired_differences({("ood", "train", 1): 0.1}, {("ood", "train", 2): 0.1})


@given(people, people, st.floats(-1.0, 2.0, allow_nan=False))
@settings(max_examples=60, deadline=None)
def test_a_second_that_goes_k_of_each_persons_way_closes_k_of_the_distance(first, gaps, k):
    target = {key: v + (0.1 + abs(gaps.get(key, 0.3))) for key, v in first.items()}  # every gap positive
    second = {key: v + k * (target[key] - v) for key, v in first.items()}
    shares = distance_shares(first, second, target)
    assert sum(d["episodes"] for d in shares.values()) == len(first)
    for d in shares.values():
        assert d["share"] == pytest.approx(k, abs=1e-5)
        if d["episodes"] == 1:
            assert d["ci95"] is None
        else:
            assert d["ci95"][0] == pytest.approx(k, abs=1e-4) and d["ci95"][1] == pytest.approx(k, abs=1e-4)


def test_the_share_is_the_ratio_of_mean_differences_over_the_people_all_three_played():
    first = {("ood", "train", s): 0.5 for s in range(6)}
    second = {("ood", "train", s): 0.5 + d for s, d in enumerate([0.00, 0.02, 0.01, 0.03, 0.00, 0.04])}
    target = {("ood", "train", s): 0.5 + d for s, d in enumerate([0.05, 0.02, 0.04, 0.06, 0.03, 0.99])}
    del target[("ood", "train", 5)]  # played by two sides only: left out
    d = distance_shares(first, second, target)["ood"]
    assert d["episodes"] == 5 and d["share"] == pytest.approx(0.06 / 0.20, abs=1e-6)
    assert d["ci95"][0] < d["share"] < d["ci95"][1]
    assert distance_shares(first, second, target) == {"ood": d}, "the same people give the same interval"
    lower = {k: -v for k, v in first.items()}, {k: -v for k, v in second.items()}, {k: -v for k, v in target.items()}
    assert distance_shares(*lower)["ood"]["share"] == pytest.approx(d["share"]), "direction does not matter"
    assert distance_shares(first, second, first)["ood"] == {"episodes": 6, "share": None, "ci95": None}
    with pytest.raises(RhythmError, match="share no person"):
        distance_shares(first, second, {("in-dist", "train", 0): 0.5})


def test_a_distance_that_is_zero_in_some_resamples_gives_an_interval_not_nan():
    """Crash counts are whole numbers: some resamples' mean distance is 0, their share 0 / 0 or x / 0. The interval
    leaves the undefined ones out and reads an unbounded end as infinite, never as NaN."""
    first = dict.fromkeys((("ood", "train", s) for s in range(20)), 3.0)
    second = {("ood", "train", s): 3.0 + d for s, d in enumerate([2, 0, 0, 1, 0, 0, 3, 0, 0, 0, 1, 0, 0, 0, 2, 0, 0, 0, 0, 1])}
    target = {("ood", "train", s): 3.0 + d for s, d in enumerate([1, 0, 0, -1, 0, 0, 0, 0, 1, 0, 0, 0, 0, -1, 0, 0, 0, 1, 0, 0])}
    d = distance_shares(first, second, target)["ood"]
    assert d["share"] == pytest.approx(10 / 1) and not any(np.isnan(d["ci95"]))
    line = paired_table(paired_differences(first, second, lower_better=True), {"ood": d}).splitlines()[1]
    assert "nan" not in line and "-0%" not in line


def test_a_person_played_twice_on_one_side_is_refused():
    rec = {"condition": "ood", "split": "train", "seed": 4, "score": {"final_score": 0.3}}
    assert final_scores([rec]) == {("ood", "train", 4): 0.3}
    with pytest.raises(RhythmError, match="ood person 4 .* appears twice"):
        final_scores([rec, rec])


def test_crash_metrics_count_the_steps_a_meter_ends_below_the_line_and_fewer_wins():
    steps = [{"meters": [0.5, 0.5, 0.05, 0.10, 0.5]}, {"meters": [0.09, 0.5, 0.2, 0.0999, 0.5]}, {"meters": [0.5] * 5}]
    rec = {"condition": "ood", "split": "train", "seed": 4, "score": {"final_score": 0.3, "crashes": 3}, "steps": steps}
    assert episode_value(rec, "crashes:S") == 1.0, "0.10 itself is not below the line"
    assert [episode_value(rec, f"crashes:{m}") for m in "VCPN"] == [1.0, 0.0, 1.0, 0.0]
    assert episode_value(rec, "crashes") == 3.0 and episode_value(rec) == 0.3
    with pytest.raises(RhythmError, match="unknown metric 'crashes:X'"):
        final_scores([rec], "crashes:X")
    fewer = {("ood", "train", s): 2.0 for s in range(5)}
    diffs = paired_differences(fewer, {k: v - 1 for k, v in fewer.items()}, lower_better=True)
    assert diffs["ood"]["mean"] == pytest.approx(-1.0) and diffs["ood"]["win_rate"] == 1.0


def test_the_belief_metric_is_the_graders_last_belief_error_lower_wins_and_a_week_without_one_is_left_out():
    recs = [{"condition": "ood", "split": "train", "seed": s, "score": {"final_score": 0.3, "belief_mae": mae}}
            for s, mae in ((1, 0.2), (2, None), (3, 0.05))]
    assert episode_value(recs[0], "belief_mae") == 0.2 and episode_value(recs[1], "belief_mae") is None
    assert final_scores(recs, "belief_mae") == {("ood", "train", 1): 0.2, ("ood", "train", 3): 0.05}
    with pytest.raises(RhythmError, match="ood person 2 .* appears twice"):
        final_scores([recs[1], recs[1]], "belief_mae")
    assert lower_is_better("belief_mae") and not lower_is_better("final_score")


def test_the_score_parts_are_the_graders_and_a_week_graded_without_them_is_refused():
    rec = {"condition": "ood", "split": "train", "seed": 4,
           "score": {"final_score": 0.5, "behaviour_score": 0.45, "belief_score": 0.7}}
    assert [episode_value(rec, m) for m in ("final_score", "behaviour_score", "belief_score")] == [0.5, 0.45, 0.7]
    assert not lower_is_better("behaviour_score") and not lower_is_better("belief_score")
    with pytest.raises(RhythmError, match="ood person 4 has no score.belief_score"):
        final_scores([{**rec, "score": {"final_score": 0.5}}], "belief_score")


@pytest.fixture(scope="module")
def two_agents(tmp_path_factory):
    """Heuristic and bayes weeks of the same people, in two conditions (bayes split over two files)."""
    root = tmp_path_factory.mktemp("paired")
    specs = [EpisodeSpec(c, "train", s) for c in ("ood", "in-dist") for s in range(4)]
    records = {}
    for agent in ("heuristic", "bayes"):
        records[agent] = [r.to_dict() for r in play(make_agent(agent), specs)]
    paths = {"heuristic": [root / "h.jsonl"], "bayes": [root / "b1.jsonl", root / "b2.jsonl"]}
    for agent, files in paths.items():
        chunks = [records[agent]] if len(files) == 1 else [records[agent][:3], records[agent][3:]]
        for path, chunk in zip(files, chunks, strict=True):
            with JsonlWriter(path) as w:
                for r in chunk:
                    w.write(r)
    return root, records, paths


def test_the_command_pairs_real_episode_files(two_agents, run_cli):
    root, records, paths = two_agents
    code, out, _ = run_cli("analyze", "paired", str(paths["heuristic"][0]), ",".join(map(str, paths["bayes"])))
    assert code == 0
    out = out.splitlines()
    assert out[0].startswith("condition") and [line.split()[0] for line in out[1:]] == ["in-dist", "ood"]
    for line in out[1:]:
        cond = line.split()[0]
        h = {r["seed"]: r["score"]["final_score"] for r in records["heuristic"] if r["condition"] == cond}
        b = {r["seed"]: r["score"]["final_score"] for r in records["bayes"] if r["condition"] == cond}
        mean = sum(b[s] - h[s] for s in h) / len(h)
        assert line.split()[1] == "4" and float(line.split()[2]) == pytest.approx(mean, abs=5e-4)
    # a trailing comma (a list built in a shell loop) is no empty path read as the folder "."
    again = run_cli("analyze", "paired", f"{paths['heuristic'][0]},", ",".join(map(str, paths["bayes"])) + ",")
    assert again[0] == 0 and again[1].splitlines() == out


def test_the_per_meter_crashes_add_up_to_the_envs_count_and_the_belief_metric_pairs_the_graders(two_agents, tmp_path,
                                                                                                  run_cli):
    _, records, paths = two_agents
    files = str(paths["heuristic"][0]), ",".join(map(str, paths["bayes"]))

    def means(metric):
        code, out, err = run_cli("analyze", "paired", *files, "--metric", metric)
        assert code == 0, err
        return [float(line.split()[2]) for line in out.splitlines()[1:]]

    worse = tmp_path / "worse.jsonl"  # the bayes weeks with every stated belief 0.01 further off, one week with none
    with JsonlWriter(worse) as w:
        for n, r in enumerate(records["bayes"]):
            w.write({**r, "score": {**r["score"], "belief_mae": None if n == 0 else r["score"]["belief_mae"] + 0.01}})
    code, out, err = run_cli("analyze", "paired", files[1], str(worse), "--metric", "belief_mae")
    assert code == 0, err
    rows = {line.split()[0]: line.split() for line in out.splitlines()[1:]}
    assert rows["ood"][1] == "3" and rows["in-dist"][1] == "4", "the week that states no belief is left out"
    assert all(float(r[2]) == pytest.approx(0.01, abs=5e-4) and float(r[-1]) == 0.0 for r in rows.values())
    parts = 0.8 * np.array(means("behaviour_score")) + 0.2 * np.array(means("belief_score"))
    assert parts == pytest.approx(means("final_score"), abs=1.2e-3), "the final score's difference is its parts'"
    total = means("crashes")
    by_meter = [means(f"crashes:{m}") for m in "VCPSN"]
    assert [sum(c) for c in zip(*by_meter, strict=True)] == pytest.approx(total, abs=3e-3)


def test_the_command_prints_the_share_of_a_targets_distance(two_agents, tmp_path, run_cli):
    _, records, paths = two_agents
    halfway = tmp_path / "halfway.jsonl"  # each week's score halfway from heuristic's to bayes's
    h = {(r["condition"], r["seed"]): r["score"]["final_score"] for r in records["heuristic"]}
    with JsonlWriter(halfway) as w:
        for r in records["bayes"]:
            key = (r["condition"], r["seed"])
            w.write({**r, "score": {**r["score"], "final_score": (h[key] + r["score"]["final_score"]) / 2}})
    bayes = ",".join(map(str, paths["bayes"]))
    code, out, err = run_cli("analyze", "paired", str(paths["heuristic"][0]), str(halfway), "--target", bayes)
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0].endswith("share of target - first [95% CI]")
    assert [line.split()[6] for line in lines[1:]] == ["50%", "50%"] and all(line.endswith("of 4") for line in lines[1:])
    code, _, err = run_cli("analyze", "paired", str(paths["heuristic"][0]), str(halfway), "--target", str(tmp_path / "no.jsonl"))
    assert code == 2 and len(err.strip().splitlines()) == 1


def test_the_command_gives_one_line_and_exit_2_on_bad_input(two_agents, tmp_path, run_cli):
    _, _, paths = two_agents
    broken = tmp_path / "broken.jsonl"
    broken.write_bytes(paths["heuristic"][0].read_bytes() + b"{not json\n")
    for args in ([str(paths["heuristic"][0]), str(paths["heuristic"][0]), "--metric", "steps"],
                 [str(tmp_path / "missing.jsonl"), str(paths["heuristic"][0])],
                 [str(broken), str(paths["heuristic"][0])]):
        code, _, err = run_cli("analyze", "paired", *args)
        err = err.strip().splitlines()
        assert code == 2 and len(err) == 1 and err[0].startswith("rhythm: error:")
    assert "broken.jsonl:9" in err[0]  # the bad line is named


def test_a_side_that_states_no_belief_is_named_when_pairing_the_belief(tmp_path):
    from rhythm.agents.base import EpisodeSpec
    from rhythm.agents.episodes import play
    from rhythm.agents.registry import make_agent
    from rhythm.eval.paired import final_scores_of
    from rhythm.records import write_episodes

    path = tmp_path / "heuristic.jsonl"
    write_episodes(path, [r.to_dict() for r in play(make_agent("heuristic"), [EpisodeSpec("ood", "eval", 0)])])
    assert final_scores_of(str(path))[0] != {}
    with pytest.raises(RhythmError, match=r"heuristic.jsonl: no week has a belief_mae \(the agent states no belief\)"):
        final_scores_of(str(path), "belief_mae")


def _weeks(path, seeds, env_version="rhythm-v1", condition="in-dist"):
    from rhythm.agents.base import EpisodeSpec
    from rhythm.agents.episodes import play
    from rhythm.agents.registry import make_agent
    from rhythm.records import write_episodes

    records = [r.to_dict() for r in play(make_agent("heuristic"), [EpisodeSpec(condition, "eval", s) for s in seeds])]
    write_episodes(path, [{**r, "env_version": env_version} for r in records])
    return str(path)


def test_weeks_of_another_env_version_are_not_paired(tmp_path, run_cli):
    """The same seed is another person under another env version: pairing by seed would pair strangers."""
    a = _weeks(tmp_path / "a.jsonl", range(3))
    b = _weeks(tmp_path / "b.jsonl", range(3), env_version="rhythm-v0")
    code, _, err = run_cli("analyze", "paired", a, b)
    assert code == 2 and "different env versions (rhythm-v0, rhythm-v1)" in err
    code, _, err = run_cli("analyze", "paired", a, f"{a},{b}")
    assert code == 2 and "mixes weeks of env versions" in err
    code, _, err = run_cli("analyze", "belief-steps", b)
    assert code == 2 and "env version 'rhythm-v0'" in err


def test_weeks_left_unpaired_are_said(tmp_path, run_cli):
    """Pairing keeps the people both sides played; what it left out is said on stderr, not dropped silently."""
    a = _weeks(tmp_path / "a.jsonl", range(4))
    b = _weeks(tmp_path / "b.jsonl", range(2))
    ood = _weeks(tmp_path / "ood.jsonl", range(2), condition="ood")
    code, out, err = run_cli("analyze", "paired", f"{a},{ood}", b)
    assert code == 0 and "in-dist" in out
    assert "paired 2 people; not paired: 4 of 6 first weeks (no shared person in ood)" in " ".join(err.split())
    code, _, err = run_cli("analyze", "paired", b, b)
    assert code == 0 and "not paired" not in err
    # a target that played fewer people: the differences' note is about the two sides; the share says its own count
    code, out, err = run_cli("analyze", "paired", a, a, "--target", _weeks(tmp_path / "t.jsonl", range(3)))
    said = " ".join(err.split())
    assert code == 0 and "not paired" not in said, said
    assert "the share of the target's distance is over the 3 people all three played (the differences: 4)" in said


def test_a_person_twice_is_refused_by_belief_steps(tmp_path, run_cli):
    """Counted twice, a week would narrow the interval as if it were two people (paired refuses it too)."""
    a = _weeks(tmp_path / "a.jsonl", range(3))
    code, _, err = run_cli("analyze", "belief-steps", f"{a},{a}")
    assert code == 2 and "in-dist person 0 (eval split) appears twice" in err


@pytest.mark.parametrize("edit, args, needle", [
    (lambda r: r.update(score=None), [], "in-dist person 0 has no score.final_score"),
    (lambda r: r.update(score={}), ["--metric", "crashes"], "in-dist person 0 has no score.crashes"),
    (lambda r: [s.pop("meters") for s in r["steps"]], ["--metric", "crashes:S"], "a step records no meters"),
], ids=["score-null", "score-empty", "no-meters"])
def test_weeks_the_record_check_lets_through_are_one_line_where_a_reader_needs_more(tmp_path, run_cli, edit, args, needle):
    """A null or empty score and steps without meters pass the record check (a week need not be graded to be
    replayed), but pairing or profiling them needs the fields: one line and exit 2, not a traceback."""
    good = _weeks(tmp_path / "good.jsonl", range(2))
    weeks = [orjson.loads(line) for line in Path(good).read_bytes().splitlines()]
    edit(weeks[0])
    odd = tmp_path / "odd.jsonl"
    odd.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in weeks))
    code, out, err = run_cli("analyze", "paired", str(odd), good, *args)
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1 and needle in err, err
    if args:  # the profile reads the crashes and the meters too
        code, out, err = run_cli("analyze", "behaviour", str(odd))
        assert code == 2 and out == "" and len(err.strip().splitlines()) == 1, err
