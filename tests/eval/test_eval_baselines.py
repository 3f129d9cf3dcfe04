"""rhythm eval on the baselines: schema, byte-identical reruns, and the ordering the benchmark promises."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from rhythm.agents.base import EpisodeSpec
from rhythm.agents.episodes import play
from rhythm.agents.planner import PlannerConfig
from rhythm.agents.registry import make_agent
from rhythm.agents.teachers import TeacherConfig
from rhythm.eval.evaluate import EvalConfig, evaluate, summarize_condition
from rhythm.eval.stats import paired_win_rate

CONDITION_KEYS = {
    "episodes", "final_score", "final_score_v2", "behaviour_score", "belief_mae", "belief_mae_prior",
    "win_rate_vs", "parse_failure_rate", "action_counts", "normalized_score", "references", "seeds", "split",
}


@pytest.mark.slow  # > 3 s on 2 cores
def test_eval_is_byte_identical_across_runs_and_has_the_schema(run_cli, tmp_path: Path) -> None:
    out = tmp_path / "eval_results_v2.json"
    runs = []
    for _ in range(2):
        code, _, err = run_cli("eval", "--agent", "random", "--condition", "all", "--episodes", "6", "--output", str(out), "-q")
        assert code == 0, err
        runs.append(out.read_bytes())
    assert runs[0] == runs[1]
    res = orjson.loads(runs[0])
    assert res["agent"] == "random" and res["grader"] == "v3" and res["config"]["episodes"] == 6
    assert set(res["conditions"]) == {"in-dist", "ood", "discrete"}
    for cond in res["conditions"].values():
        assert CONDITION_KEYS <= set(cond)
        assert cond["split"] == "eval" and cond["episodes"] == 6
        lo, hi = cond["final_score"]["ci95"]
        assert lo <= cond["final_score"]["mean"] <= hi
        assert set(cond["win_rate_vs"]) == {"random", "heuristic"} and cond["win_rate_vs"]["random"] == 0.5
        assert cond["belief_mae"]["mean"] is None and cond["parse_failure_rate"] == 0.0
        assert sum(cond["action_counts"].values()) == 6 * 28
        refs = cond["references"]
        expected = (cond["final_score"]["mean"] - refs["random"]["final_score"]) / (
            refs["oracle"]["final_score"] - refs["random"]["final_score"])
        assert cond["normalized_score"] == pytest.approx(expected, abs=1e-6)  # (agent - random) / (oracle - random)
    episodes = out.with_name("eval_results_v2.episodes.jsonl").read_bytes().splitlines()
    assert len(episodes) == 18 and all(orjson.loads(e)["split"] == "eval" for e in episodes)


def test_heuristic_beats_random_on_every_condition_at_default_sizes() -> None:
    res = evaluate(EvalConfig(agent="heuristic", references=["random"]))
    for name, cond in res.conditions.items():
        assert cond.episodes == {"in-dist": 100, "ood": 50, "discrete": 15}[name]
        assert cond.final_score.mean > cond.references["random"].final_score
        assert cond.final_score_v2.mean > cond.references["random"].final_score_v2
        assert cond.win_rate_vs["random"] > 0.8


def test_results_files_round_trip_through_the_typed_object(run_cli, tmp_path: Path) -> None:
    """EvalResults.load then save writes the very bytes rhythm eval wrote (report, tables, plots and the
    quickstart all read the typed object)."""
    from rhythm.eval.results import EvalResults

    out = tmp_path / "eval_results_v2.json"
    code, _, err = run_cli("eval", "--agent", "bayes", "--condition", "all", "--episodes", "2", "--output", str(out), "-q")
    assert code == 0, err
    res = EvalResults.load(out)
    assert res.conditions["ood"].references["oracle"].final_score is not None
    assert res.save(tmp_path / "again.json").read_bytes() == out.read_bytes()


def test_a_shared_played_cache_plays_each_scripted_agent_once_with_the_same_results() -> None:
    """The quickstart evaluates three agents beside the same references: with one cache each scripted
    agent plays each condition once, and every result equals a fresh evaluation's."""
    from rhythm.eval.evaluate import played_key

    played: list[str] = []

    def bars(label: str, total: int):
        played.append(label)
        return None

    cache: dict = {}
    first = EvalConfig(agent="heuristic", condition="in-dist", episodes=3, references=["random"])
    second = EvalConfig(agent="random", condition="in-dist", episodes=3, references=["heuristic"], output="other.json")
    a = evaluate(first, progress_factory=bars, played_cache=cache)
    b = evaluate(second, progress_factory=bars, played_cache=cache)
    assert played == ["heuristic in-dist", "random in-dist"]
    assert a.conditions == evaluate(first).conditions and b.conditions == evaluate(second).conditions
    assert len(cache) == 2
    seeds = [0, 1, 2]
    assert played_key(first, "model:runs/x", "in-dist", seeds) is None and played_key(first, "openai:gpt", "in-dist", seeds) is None
    # other teacher settings are other episodes
    other = EvalConfig(agent="bayes", teacher=TeacherConfig(planner=PlannerConfig(horizon=2)))
    assert played_key(other, "bayes", "in-dist", seeds) != played_key(first, "bayes", "in-dist", seeds)


def test_seeds_typed_in_another_order_give_the_same_results() -> None:
    """The results record the seeds as a range (``0-5``): the weeks and their intervals are that range's, however
    the seeds were typed."""
    typed = [evaluate(EvalConfig(agent="random", condition="in-dist", seeds=seeds, references=["heuristic"]))
             for seeds in ("0-5", "5,4,3,2,1,0")]
    assert typed[0].conditions == typed[1].conditions and typed[0].conditions["in-dist"].seeds == "0-5"


def test_scripted_agents_play_in_bounded_batches_with_the_same_weeks(monkeypatch: pytest.MonkeyPatch) -> None:
    """A scripted agent's weeks do not depend on its batch: a bounded one (memory, a partial file that fills as it
    plays) gives the results of one batch a condition."""
    import rhythm.eval.evaluate as evaluation

    cfg = EvalConfig(agent="bayes", condition="discrete", episodes=5, references=["heuristic", "random", "oracle"])
    whole = evaluate(cfg)
    batches: list[int] = []
    monkeypatch.setattr(evaluation, "SCRIPTED_BATCH", 2)
    small = evaluate(cfg, on_records=lambda name, condition, records: batches.append(len(records)) if name == "bayes" else None)
    assert small.conditions == whole.conditions and batches == [2, 2, 1]


def test_the_priors_error_is_on_the_episodes_whose_belief_error_is_reported() -> None:
    """A week that states no last belief has no belief error; the prior's error beside it leaves that week out too,
    so their ratio compares the same people (and all weeks count when none stated a belief)."""
    from rhythm.agents.base import EpisodeSpec
    from rhythm.agents.episodes import play
    from rhythm.agents.registry import make_agent
    from rhythm.eval.evaluate import prior_on_stated

    records = play(make_agent("bayes"), [EpisodeSpec("ood", "eval", s) for s in range(6)])
    priors = [r.score["belief_mae_prior"] for r in records]
    assert prior_on_stated(records) == pytest.approx(sum(priors) / 6, abs=1e-6)
    for r in records[:4]:
        r.score["belief_mae"] = None
    assert prior_on_stated(records) == pytest.approx((priors[4] + priors[5]) / 2, abs=1e-6)
    for r in records:
        r.score["belief_mae"] = None
    assert prior_on_stated(records) == pytest.approx(sum(priors) / 6, abs=1e-6)


def test_the_headline_grader_decides_the_win_rates_and_the_normalised_score() -> None:
    """``--grader v2`` used to change only the label: both scores stay under their own names, and what the headline
    grader decides (win rates, the normalised score) is computed on its score."""
    runs = {g: evaluate(EvalConfig(agent="bayes", condition="in-dist", seeds="0-7", grader=g,
                                   references=["random", "oracle", "heuristic"])).conditions["in-dist"]
            for g in ("v3", "v2")}
    v3, v2 = runs["v3"], runs["v2"]
    played = {name: play(make_agent(name), [EpisodeSpec("in-dist", "eval", s) for s in range(8)])
              for name in ("bayes", "random", "heuristic")}
    for cond, key in ((v3, "final_score"), (v2, "final_score_v2")):
        ours = [r.score[key] for r in played["bayes"]]
        for ref in ("random", "heuristic"):  # each the week-by-week comparison on its own grader's score
            assert cond.win_rate_vs[ref] == paired_win_rate(ours, [r.score[key] for r in played[ref]])
    # Both graders rank these weeks alike; where they disagree, each grader's win rate follows its own score.
    for r in played["heuristic"][:3]:
        r.score["final_score_v2"] = 2.0
    wins = {g: summarize_condition("in-dist", played["bayes"], {"heuristic": played["heuristic"]}, grader=g)
            for g in ("v3", "v2")}
    assert wins["v3"]["win_rate_vs"]["heuristic"] == 1.0 and wins["v2"]["win_rate_vs"]["heuristic"] == 5 / 8
    assert v3.final_score == v2.final_score and v3.final_score_v2 == v2.final_score_v2
    for cond, key in ((v3, "final_score"), (v2, "final_score_v2")):
        refs = cond.references
        agent = getattr(cond, key).mean
        expected = (agent - getattr(refs["random"], key)) / (getattr(refs["oracle"], key) - getattr(refs["random"], key))
        assert cond.normalized_score == pytest.approx(expected, abs=1e-5)
    assert v3.normalized_score != pytest.approx(v2.normalized_score, abs=1e-3)
