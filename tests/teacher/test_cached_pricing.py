"""Prompt tokens a server serves from its cache are priced at ``cached_input``: the ledger, the records,
the summary and ``--max-cost-usd`` all count the true spend. Against the loopback server (its prompt
cache follows OpenAI's rule: nothing below 1,024 tokens, then whole 128-token blocks), through the real
``openai`` client."""

from __future__ import annotations

import asyncio
from pathlib import Path

import orjson
import pytest

from rhythm.model.llm_client import ChatClient, CostMeter, LLMConfig, Price, resolve_target
from tests.fake_openai import FakeOpenAI, prompt_tokens

KEY = "sk-test-cache-0123456789"
PRICE = Price(input=2.5, cached_input=0.25, output=15.0)


@pytest.fixture(autouse=True)
def _key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", KEY)


def _complete_all(server: FakeOpenAI, conversations: list[list[dict]], prices: dict) -> tuple[list, CostMeter]:
    llm = LLMConfig(model="m", base_url=server.base_url, prices=prices)

    async def go() -> list:
        async with ChatClient(resolve_target("openai", "m", llm), llm) as client:
            return [await client.complete(messages) for messages in conversations], client.meter

    return asyncio.run(go())


def _long_conversation(words: int, first: str = "alpha") -> list[dict]:
    return [{"role": "system", "content": " ".join([first] + ["rule"] * words)}, {"role": "user", "content": "Mon morning."}]


def test_price_arithmetic_and_a_missing_cached_price_is_the_input_price() -> None:
    assert PRICE.cost(2000, 100, 1536) == pytest.approx((464 * 2.5 + 1536 * 0.25 + 100 * 15.0) / 1e6)
    assert Price(input=2.5, output=15.0).cost(2000, 100, 1536) == Price(input=2.5, output=15.0).cost(2000, 100)


def test_two_requests_sharing_a_long_prefix_cost_less_by_exactly_the_cached_tokens() -> None:
    first = _long_conversation(1500)
    second = [*first, {"role": "assistant", "content": "ACTION: SLEEP"}, {"role": "user", "content": "Mon afternoon."}]
    unrelated = _long_conversation(1500, first="omega") + second[2:]  # as long as `second`, differs at token 3
    n_first, n_second = len(prompt_tokens(first)), len(prompt_tokens(second))
    assert n_first > 1024 and len(prompt_tokens(unrelated)) == n_second
    with FakeOpenAI(api_key=KEY, usage=(0, 20), prompt_cache=True) as server:
        shared, meter = _complete_all(server, [first, second], {"m": PRICE})
    with FakeOpenAI(api_key=KEY, usage=(0, 20), prompt_cache=True) as server:
        apart, _ = _complete_all(server, [first, unrelated], {"m": PRICE})
    # the second request shares all of the first prompt; OpenAI caches whole 128-token blocks of it
    expected_cached = n_first // 128 * 128
    assert [c.cached_tokens for c in shared] == [0, expected_cached] and [c.cached_tokens for c in apart] == [0, 0]
    assert [c.prompt_tokens for c in shared] == [n_first, n_second]
    assert shared[1].cost_usd == pytest.approx((n_second - expected_cached) * 2.5e-6 + expected_cached * 0.25e-6 + 20 * 15e-6)
    saving = apart[1].cost_usd - shared[1].cost_usd
    assert saving == pytest.approx(expected_cached * (2.5 - 0.25) / 1e6) and saving > 0
    assert meter.cached_tokens == expected_cached and meter.spent == pytest.approx(shared[0].cost_usd + shared[1].cost_usd)


def test_a_server_that_reports_no_cached_tokens_is_charged_the_full_input_price() -> None:
    first = _long_conversation(1500)
    with FakeOpenAI(api_key=KEY, usage=(2000, 20)) as server:  # no prompt_tokens_details at all
        replies, meter = _complete_all(server, [first, first], {"m": PRICE})
    assert [c.cached_tokens for c in replies] == [0, 0]
    assert meter.spent == pytest.approx(2 * (2000 * 2.5 + 20 * 15.0) / 1e6) and meter.cached_tokens == 0


def test_generate_records_cached_tokens_and_the_budget_stops_at_the_true_spend(tmp_path: Path, run_cli) -> None:
    out = tmp_path / "c.jsonl"
    prices = "llm.prices={m: {input: 100.0, cached_input: 10.0, output: 0.0}}"
    with FakeOpenAI(api_key=KEY, usage=(0, 0), prompt_cache=True) as server:
        code, _, err = run_cli("generate", "--teacher", "openai", "--model", "m", "--base-url", server.base_url,
                               "--seeds", "0-1", "--output", str(out), "--max-cost-usd", "2.0", "--quiet", "--set", prices)
    usages = [s.usage for s in server.seen]
    true_costs = [(u["prompt_tokens"] - u["prompt_tokens_details"]["cached_tokens"]) * 100e-6
                  + u["prompt_tokens_details"]["cached_tokens"] * 10e-6 for u in usages]
    full_costs = [u["prompt_tokens"] * 100e-6 for u in usages]
    spent = sum(true_costs)
    # it stopped once the true spend reached the budget, not before and not later...
    assert code == 1 and sum(true_costs[:-1]) < 2.0 <= spent and f"cost ${spent:.4f} of $2.0000 budget" in err
    # ...which is later than the full-price count would have stopped: it crossed $2 within the first week
    assert sum(full_costs[:28]) > 2.0 and len(server.seen) > 28
    (record,) = [orjson.loads(line) for line in out.read_bytes().splitlines()]
    cached = [step["usage"]["cached_tokens"] for step in record["steps"]]
    assert cached[0] == 0 and cached[-1] > 1024 and record["usage"]["cached_tokens"] == sum(cached)
    assert record["usage"]["cost_usd"] == pytest.approx(sum(true_costs[:28]))
    tokens_in = sum(u["prompt_tokens"] for u in usages)
    tokens_cached = sum(u["prompt_tokens_details"]["cached_tokens"] for u in usages)
    assert f"{tokens_in:,} in ({tokens_cached:,} cached) / 0 out" in err


@pytest.mark.parametrize("price, needle", [
    ("{m: {inptu: 100, outptu: 100}}", "unknown key 'inptu' in prices.m (Price); did you mean 'input'?"),
    ("{m: {}}", "(m.input: Field required)"),
    ("{m: {input: 2.5}}", "(m.output: Field required)"),
    ("{m: {input: -50, output: 1}}", "(m.input: Input should be greater than or equal to 0)"),
    ("{m: {input: 1, output: 1, cached_input: -1}}", "(m.cached_input: Input should be greater than or equal to 0)"),
], ids=["misspelt", "empty", "no-output", "negative", "negative-cached"])
@pytest.mark.parametrize("command", ["generate", "eval"])
def test_a_price_that_would_let_the_budget_pass_is_refused_before_anything_is_sent(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, run_cli, command: str, price: str, needle: str) -> None:
    """A misspelt, missing or negative price would make tokens free (or refund them) and ``--max-cost-usd`` would never
    stop the run: the generate teacher and the eval agent both refuse it with one line, exit 2, before any request."""
    monkeypatch.chdir(tmp_path)
    with FakeOpenAI(api_key=KEY) as server:
        if command == "generate":
            args = ["generate", "--teacher", "openai:m", "--base-url", server.base_url, "--seeds", "0-3",
                    "-o", "bg.jsonl", "--max-cost-usd", "0.001", "--quiet"]
        else:
            args = ["eval", "--agent", "openai:m", "--seeds", "0", "--condition", "discrete", "--set", f"llm.base_url={server.base_url}",
                    "--set", "llm.max_cost_usd=0.001", "--set", "references=[]"]
        code, _, err = run_cli(*args, "--set", f"llm.prices={price}")
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and lines[0].startswith("rhythm: error:") and needle in lines[0], err
    assert server.seen == [] and list(tmp_path.iterdir()) == []
