"""An episode's usage as its record keeps it: the fields SPEC section 5 names, whole-number counts, and a cost
that is the sum only where every step's cost is known."""

from __future__ import annotations

import pytest

from rhythm.agents.episodes import episode_usage


def _steps(*usages: dict) -> list[dict]:
    return list(usages)


def test_an_agent_that_reads_no_tokens_spent_nothing() -> None:
    assert episode_usage(_steps({}, {})) == {"prompt_tokens": 0, "completion_tokens": 0, "cost_usd": 0.0}


def test_counts_sum_to_whole_numbers_and_a_priced_week_sums_its_cost() -> None:
    usage = episode_usage(_steps({"prompt_tokens": 10.0, "completion_tokens": 2, "requests": 1, "cost_usd": 0.25},
                                 {"prompt_tokens": 12, "completion_tokens": 3.0, "requests": 2, "cost_usd": 0.5}))
    assert usage == {"prompt_tokens": 22, "completion_tokens": 5, "requests": 3, "cost_usd": 0.75}
    assert all(type(v) is int for k, v in usage.items() if k != "cost_usd")


@pytest.mark.parametrize("second", [
    {"prompt_tokens": 12, "completion_tokens": 3, "usage_missing": 1},  # a reply without usage: its cost unknown
    {"prompt_tokens": 12, "completion_tokens": 3},  # a model without a price (an unpriced API)
    {"prompt_tokens": 12, "completion_tokens": 3, "cost_usd": None},  # a plugin that says its cost is unknown
])
def test_a_week_with_a_step_of_unknown_cost_has_no_summed_cost(second: dict) -> None:
    """Not the known steps' part: a cost that reads as the whole when it is not."""
    usage = episode_usage(_steps({"prompt_tokens": 10, "completion_tokens": 2, "cost_usd": 0.25}, second))
    assert usage["cost_usd"] is None and usage["prompt_tokens"] == 22


def test_a_local_students_week_costs_nothing() -> None:
    """A local model's steps say they cost 0.0 (:func:`rhythm.agents.model.decision_of`): its week is not unknown."""
    usage = episode_usage(_steps({"prompt_tokens": 10, "completion_tokens": 2, "cost_usd": 0.0},
                                 {"prompt_tokens": 12, "completion_tokens": 3, "cost_usd": 0.0}))
    assert usage == {"prompt_tokens": 22, "completion_tokens": 5, "cost_usd": 0.0}


@pytest.mark.parametrize(("usage", "text"), [
    ({"prompt_tokens": 22, "completion_tokens": 5, "cost_usd": 0.0}, "22 prompt + 5 completion tokens"),
    ({"prompt_tokens": 1234, "completion_tokens": 56, "requests": 28, "cost_usd": 0.0012},
     "1,234 prompt + 56 completion tokens, 28 requests, $0.0012"),
    ({"prompt_tokens": 10, "completion_tokens": 2, "requests": 1, "retries": 2, "cost_usd": 0.0},
     "10 prompt + 2 completion tokens, 1 request, 2 retries, $0.0000"),  # a free API call is still an API call
    ({"prompt_tokens": 10, "completion_tokens": 2, "requests": 2, "retries": 1, "cost_usd": None},
     "10 prompt + 2 completion tokens, 2 requests, 1 retry, cost unknown"),
])
def test_the_usage_line_shows_a_cost_only_where_requests_were_sent_or_money_spent(usage: dict, text: str) -> None:
    """A local student's weeks cost 0.0 and send no request: "$0.0000" under its table would read as a free API."""
    from rhythm.cli.report import usage_text

    assert usage_text(usage) == text
