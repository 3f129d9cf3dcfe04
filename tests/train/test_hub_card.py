"""The dataset card's cost: a week whose cost is unknown (no price for the model, replies without usage) is never
counted as $0; the card says "unknown", or "at least" with how many weeks it leaves out."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from rhythm.train.hub import dataset_card, episode_cost, episode_stats

from .helpers import write_episodes

PRICED = {"cost_usd": 0.125, "prompt_tokens": 900, "completion_tokens": 100, "requests": 28}
UNPRICED = {"cost_usd": None, "prompt_tokens": 900, "completion_tokens": 100, "requests": 28}
NO_COST_KEY = {"prompt_tokens": 900, "completion_tokens": 100, "requests": 28}  # an eval agent's week with no price


@pytest.fixture(scope="module")
def bayes(tmp_path_factory) -> list[dict]:
    return write_episodes(tmp_path_factory.mktemp("card") / "bayes.jsonl", range(2))


def _write(path: Path, records: list[dict]) -> Path:
    path.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in records))
    return path


def _api_weeks(path: Path, week: dict, usages: list[dict]) -> Path:
    """One week per usage, as an API teacher's weeks (seeds 0, 1, ...)."""
    return _write(path, [{**week, "agent": "openai", "model": "m", "seed": i, "usage": u} for i, u in enumerate(usages)])


@pytest.mark.parametrize("usage, cost", [(PRICED, 0.125), (UNPRICED, None), (NO_COST_KEY, None),
                                         ({"seconds": 1.5}, 0.0), ({"cost_usd": 0.0, "prompt_tokens": 0}, 0.0),
                                         ({"cost_usd": None}, None), ({"usage_missing": 2}, None)])
def test_an_episodes_cost_is_its_price_nothing_spent_or_unknown(usage, cost) -> None:
    assert episode_cost(usage) == cost


def test_the_card_never_shows_an_unknown_cost_as_zero(tmp_path: Path, bayes: list[dict]) -> None:
    files = {
        "bayes.jsonl": episode_stats([_write(tmp_path / "b.jsonl", bayes)]),
        "unpriced.jsonl": episode_stats([_api_weeks(tmp_path / "u.jsonl", bayes[0], [UNPRICED, NO_COST_KEY])]),
        "mixed.jsonl": episode_stats([_api_weeks(tmp_path / "m.jsonl", bayes[0], [PRICED, UNPRICED])]),
    }
    assert [files[n]["cost_unknown"] for n in files] == [0, 2, 1]
    rows = {line.split("|")[1].strip(): line.split("|")[-2].strip() for line in dataset_card("me/d", files).splitlines()
            if line.startswith("| `")}
    assert rows == {"`bayes.jsonl`": "$0.00", "`unpriced.jsonl`": "unknown",
                    "`mixed.jsonl`": "at least $0.12 (1 week without a known cost)"}
    card = dataset_card("me/d", files)
    assert "| cost | at least $0.12 (3 weeks without a known cost) (3600 prompt + 400 completion tokens) |" in card
    assert "| cost | unknown (1800 prompt" in dataset_card("me/d", {"unpriced.jsonl": files["unpriced.jsonl"]})
    assert "| cost | $0.00 (" in dataset_card("me/d", {"bayes.jsonl": files["bayes.jsonl"]})



def test_the_cards_means_over_several_files_are_the_means_over_their_weeks(tmp_path: Path, bayes: list[dict]) -> None:
    """A file whose weeks mostly state no belief weighed its one belief error by all its weeks: the same weeks gave
    one mean belief MAE as one file and another as two. Each mean is over the weeks that have the value, however
    the weeks are split into files."""
    from rhythm.train.hub import episode_stats_merge

    silent = [{**week, "seed": 40 + i, "score": {**week["score"], "belief_mae": None if i else 0.4}}
              for i, week in enumerate([bayes[0]] * 4)]
    one = episode_stats([_write(tmp_path / "all.jsonl", [*bayes, *silent])])
    two = episode_stats_merge([episode_stats([_write(tmp_path / "a.jsonl", bayes)]),
                               episode_stats([_write(tmp_path / "b.jsonl", silent)])])
    maes = [w["score"]["belief_mae"] for w in [*bayes, *silent] if w["score"]["belief_mae"] is not None]
    assert one["mean_belief_mae"] == pytest.approx(sum(maes) / len(maes), abs=1e-4)
    assert two["mean_belief_mae"] == pytest.approx(one["mean_belief_mae"], abs=1e-4)
    assert two["mean_final_score"] == pytest.approx(one["mean_final_score"], abs=1e-4)
