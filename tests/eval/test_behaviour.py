"""``rhythm analyze behaviour`` (:mod:`rhythm.eval.behaviour`): what agents did, counted by hand."""

from __future__ import annotations

import orjson
import pytest

from rhythm.agents.base import EpisodeSpec
from rhythm.agents.episodes import play
from rhythm.agents.registry import make_agent
from rhythm.env.constants import ACTIONS, ENV_VERSION
from rhythm.eval.behaviour import behaviour_profile, behaviour_table, belief_reach, label, labels
from rhythm.records import JsonlWriter, graded_belief


def _week(condition, seed, actions, crashes, behaviour, mae, meters=None):
    meters = meters or [[0.5] * 5] * len(actions)
    return {"condition": condition, "seed": seed, "steps": [{"action": a, "meters": m} for a, m in zip(actions, meters)],
            "score": {"crashes": crashes, "behaviour_score": behaviour, "belief_mae": mae}}


def test_shares_crashes_and_belief_error_by_hand():
    low = [[0.5, 0.5, 0.05, 0.09, 0.5], [0.5, 0.5, 0.5, 0.0999, 0.5], [0.10, 0.5, 0.5, 0.5, 0.5], [0.5] * 5]
    records = [_week("ood", 1, ["SLEEP", "SLEEP", "DEEP_WORK", "NAP"], 3, 0.5, 0.2, meters=low),
               _week("in-dist", 2, ["SLEEP", "MEDITATE"], 1, 0.7, None),
               _week("ood", 3, ["DEEP_WORK", "DEEP_WORK"], 0, 0.3, 0.1)]
    prof = behaviour_profile(records)
    assert list(prof) == ["in-dist", "ood"], "the benchmark's order of conditions"
    ood = prof["ood"]
    assert ood["episodes"] == 2 and ood["crashes"] == pytest.approx(1.5) and ood["behaviour"] == pytest.approx(0.4)
    assert ood["belief_mae"] == pytest.approx(0.15)
    assert ood["crashes_by_meter"] == pytest.approx({"V": 0.0, "C": 0.0, "P": 0.5, "S": 1.0, "N": 0.0}), \
        "below 0.10 after a step is a crash (0.10 itself is not), averaged over the condition's weeks"
    assert ood["actions"]["DEEP_WORK"] == pytest.approx(3 / 6) and ood["actions"]["SLEEP"] == pytest.approx(2 / 6)
    assert ood["actions"]["NAP"] == pytest.approx(1 / 6) and sum(ood["actions"].values()) == pytest.approx(1.0)
    assert set(ood["actions"]) == set(ACTIONS)
    assert prof["in-dist"]["belief_mae"] is None, "no belief stated: no error to average"
    table = behaviour_table([("a", prof)]).splitlines()
    assert "NAP" in table[0] and "LEISUR" not in table[0], "actions nobody played are left out"
    assert table[2].split()[:5] == ["ood", "a", "2", "1.50", "0.00/0.00/0.50/1.00/0.00"]


def test_the_belief_reach_is_the_farthest_stated_number_from_half_beside_the_truths():
    from rhythm.grader import true_belief

    def week(seed, beliefs):
        return {"condition": "ood", "split": "train", "seed": seed, "env_version": ENV_VERSION,
                "score": {"crashes": 0, "behaviour_score": 0.5},
                "steps": [{"belief": b, "action": "SLEEP", "meters": [0.5] * 5} for b in beliefs]}

    records = [week(1, [[0.9, 0.5, 0.5], [0.3, 0.6, 0.55]]), week(2, [[0.5, 0.5, 0.5], [0.45, 0.5, 0.5]]),
               week(3, [[0.05, 0.5, 0.5], None]), week(4, [None, None])]
    truth = true_belief("ood", "train", [1, 2])
    stated, true = belief_reach(records)
    assert stated == pytest.approx(0.2), "the belief of each week's last step (0.3 and 0.45), not an earlier one"
    assert true == pytest.approx(abs(truth - 0.5).max()), \
        "the truth of the people graded on a belief: 3 stated one only before its last step, 4 none"
    assert belief_reach(records[2:]) is None, "as the grader: an earlier belief does not stand in for the last step's"
    assert [graded_belief(r) for r in records] == [[0.3, 0.6, 0.55], [0.45, 0.5, 0.5], None, None]
    row = behaviour_table([("a", behaviour_profile(records))]).splitlines()[1]
    assert f"0.20 ({true:.2f})" in row


def test_the_command_reads_eval_files_and_names_agents_by_folder(tmp_path, run_cli):
    path = tmp_path / "heuristic" / "eval_results_v2.episodes.jsonl"
    path.parent.mkdir()
    records = [r.to_dict() for r in play(make_agent("heuristic"), [EpisodeSpec("in-dist", "train", s) for s in range(3)])]
    with JsonlWriter(path) as w:
        for r in records:
            w.write(r)
    assert label(str(path)) == "heuristic" and label("x/teacher.jsonl") == "teacher.jsonl"
    code, out, err = run_cli("analyze", "behaviour", str(path))
    assert code == 0, err
    row = out.splitlines()[1].split()
    assert row[:3] == ["in-dist", "heuristic", "3"]
    assert behaviour_profile(records)["in-dist"]["belief_reach"] is None and row[6:8] == ["-", "-"], "the heuristic states none"
    assert float(row[3]) == pytest.approx(sum(r["score"]["crashes"] for r in records) / 3, abs=0.005)
    by_meter = behaviour_profile(records)["in-dist"]["crashes_by_meter"]
    assert sum(by_meter.values()) == pytest.approx(sum(r["score"]["crashes"] for r in records) / 3), \
        "the crashes on each meter add up to the env's own count"
    code, _, err = run_cli("analyze", "behaviour", str(tmp_path / "missing.jsonl"))
    assert code == 2 and "not found" in err
    # a person given twice for one agent would weigh double
    code, out, err = run_cli("analyze", "behaviour", f"{path},{path}")
    assert code == 2 and out == "" and err.splitlines() == [
        f"rhythm: error: {path}:1: in-dist person 0 (train split) appears twice (first at {path}:1); one agent's mean "
        "would count it double"]


def test_agents_that_share_a_folder_name_are_told_apart_by_their_parents():
    few, full = "runs/few/eval/sft/eval_results_v2.episodes.jsonl", "runs/full/eval/sft/eval_results_v2.episodes.jsonl"
    teacher = "runs/full/eval/teacher/eval_results_v2.episodes.jsonl"
    assert labels([few, full, teacher]) == ["few/eval/sft", "full/eval/sft", "teacher"]
    assert labels([few, "data/teacher.jsonl"]) == ["sft", "teacher.jsonl"]
    assert labels([few, few]) == ["runs/few/eval/sft/eval_results_v2"] * 2, "the same file twice: as long as it gets"
    # two evals written to one folder (the README's -o runs/eval/eval_results_v2.json and -o runs/eval/train.json)
    one = ["runs/eval/eval_results_v2.episodes.jsonl", "runs/eval/train.episodes.jsonl", "runs/sft/eval_results_v2.episodes.jsonl"]
    assert labels(one) == ["eval/eval_results_v2", "eval/train", "sft"]
    table = behaviour_table([(name, behaviour_profile([_week("ood", 1, ["SLEEP"], 0, 0.5, 0.1)]))
                             for name in ("a-name-longer-than-sixteen/eval/sft", "b")])
    assert table.splitlines()[1].split()[1] == "a-name-longer-than-sixteen/eval/sft", "names are never cut"


def test_empty_inputs_are_one_clear_error(tmp_path, run_cli):
    """An empty episodes file, or a results file that holds no condition, printed an empty table and exit 0."""
    empty = tmp_path / "empty.jsonl"
    empty.write_bytes(b"")
    code, _, err = run_cli("analyze", "behaviour", str(empty))
    assert code == 2 and f"no weeks in {empty}" in err
    results = tmp_path / "r.json"
    results.write_text('{"agent": "bayes", "conditions": {}}')
    code, _, err = run_cli("analyze", "tables", str(results))
    assert code == 2 and "holds no condition's results" in err


def test_a_results_file_without_the_priors_error_shows_it_as_not_available(tmp_path, run_cli):
    """An older results file (or one written by hand) may hold no ``belief_mae_prior``: the belief table says n/a
    there, not a traceback."""
    out = tmp_path / "b.json"
    code, _, err = run_cli("eval", "--agent", "bayes", "--condition", "in-dist", "--episodes", "2", "--set",
                           "references=[]", "--output", str(out), "--quiet")
    assert code == 0, err
    results = orjson.loads(out.read_bytes())
    results["conditions"]["in-dist"]["belief_mae_prior"] = None
    out.write_bytes(orjson.dumps(results))
    code, table, err = run_cli("analyze", "tables", str(out))
    assert code == 0, err
    (row,) = [line for line in table.splitlines() if line.startswith("| teacher (bayes) | in-dist |")]
    assert row.split("|")[4:6] == [" n/a ", " n/a "]


def test_weeks_of_another_env_version_are_refused_where_the_truth_is_read(tmp_path, run_cli):
    """The reach of the truth (behaviour) and the probe's errors (teacher-forced) read this env's true beliefs: under
    another env version the same seed is another person, refused as belief-steps and the plots refuse it."""
    weeks = [r.to_dict() for r in play(make_agent("bayes"), [EpisodeSpec("in-dist", "eval", s) for s in range(2)])]
    old = tmp_path / "old.jsonl"
    old.write_bytes(b"".join(orjson.dumps({**r, "env_version": "rhythm-v0"}) + b"\n" for r in weeks))
    for args in (["behaviour", str(old)], ["teacher-forced", str(tmp_path / "no-model"), str(old)],
                 ["belief-steps", str(old)]):
        code, out, err = run_cli("analyze", *args)
        assert code == 2 and out == "" and len(err.strip().splitlines()) == 1, (args, err)
        assert "a week of env version 'rhythm-v0'; the true beliefs are" in err, err
