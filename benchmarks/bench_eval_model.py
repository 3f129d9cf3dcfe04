"""Benchmark: model eval with a kept KV cache (lockstep) against a loop that re-encodes the conversation.

    python benchmarks/bench_eval_model.py                        # CPU: tiny student, 8 in-dist episodes
    python benchmarks/bench_eval_model.py --model runs/quickstart/sft --threads 2

Plays the same 8 in-dist eval episodes twice with the same weights:

- ``lockstep``: ``model:PATH`` as ``rhythm eval`` runs it: all 8 weeks in one batch, each step prefilling
  only the new turn into the batch's kept key/value cache and decoding the replies together
  (:class:`rhythm.model.lockstep.LockstepChat`);
- ``reencode``: what a plain transformers loop does: one episode at a time, each step a ``generate``
  call on the whole conversation so far, re-encoded from scratch.

It prints one JSON line: both wall times, the speedup (target >= 5x), whether every reply is identical,
and throughput in tokens/s (prompt tokens processed + tokens generated, per second) beside the model's
raw forward throughput at the same batch (one no-cache forward of 8 whole weeks), so the engine's
overhead is visible. ``--check`` exits 1 when the speedup target is missed or a reply differs. The
model is loaded once, outside the timings; the best of ``--repeats`` runs counts.
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import report, run_or_exit  # noqa: E402


class ReencodeAgent:
    """Batch-1 baseline: every step re-encodes the episode's whole conversation and calls ``generate``."""

    def __init__(self, model, tokenizer, stop_ids, max_new_tokens: int) -> None:
        self.model, self.tokenizer, self.stop_ids, self.max_new_tokens = model, tokenizer, stop_ids, max_new_tokens
        self.name = "reencode"
        self.tokens = 0

    def reset(self, episodes) -> None:
        pass

    def act(self, obs):
        from rhythm.agents.base import Decision
        from rhythm.model.lockstep import reencode_reply
        from rhythm.protocol import parse_reply

        out = []
        for i in range(len(obs.prompts)):
            messages = obs.conversation(i)
            text = reencode_reply(self.model, self.tokenizer, messages, stop_ids=self.stop_ids, max_new_tokens=self.max_new_tokens)
            p = parse_reply(text)
            out.append(Decision(p.action, p.belief, text, p.ok))
        return out


def forward_throughput(model, batch: int, length: int, vocab: int) -> float:
    """Tokens/s of one no-cache forward over ``batch`` x ``length`` tokens (best of 3)."""
    import torch

    ids = torch.randint(0, vocab, (batch, length), generator=torch.Generator().manual_seed(0))
    best = float("inf")
    with torch.inference_mode():
        for _ in range(3):
            start = time.perf_counter()
            model(input_ids=ids, use_cache=False)
            best = min(best, time.perf_counter() - start)
    return batch * length / best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="rhythm-tiny", help="model:PATH of the student (default: the tiny student, random weights)")
    parser.add_argument("--episodes", type=int, default=8)
    parser.add_argument("--max-new-tokens", type=int, default=16, help="reply budget (the quickstart's)")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--threads", type=int, default=1, help="torch threads (1: a fair one-core comparison)")
    parser.add_argument("--min-speedup", type=float, default=5.0)
    parser.add_argument("--check", action="store_true", help="exit 1 if the target is missed or a reply differs")
    run_or_exit("bench_eval_model", _run, parser.parse_args())  # a model path not found: one line, exit 2


def _run(args: argparse.Namespace) -> None:
    import torch

    torch.set_num_threads(args.threads)
    from rhythm.agents.base import EpisodeSpec
    from rhythm.agents.episodes import play
    from rhythm.agents.model import ModelAgent
    from rhythm.model.load import ModelOptions

    options = ModelOptions(device="cpu", max_new_tokens=args.max_new_tokens, batch_size=args.episodes)
    agent = ModelAgent(args.model, options)
    baseline = ReencodeAgent(agent.model, agent.tokenizer, agent.stop_ids, args.max_new_tokens)
    specs = [EpisodeSpec("in-dist", "eval", s) for s in range(args.episodes)]
    play(agent, specs[:1])  # warm-up
    best: dict[str, float] = {}
    replies: dict[str, list[list[str]]] = {}
    tokens = 0
    for _ in range(args.repeats):
        for name, who, size in (("lockstep", agent, args.episodes), ("reencode", baseline, 1)):
            if name == "lockstep":
                agent.options = replace(options, batch_size=size)
            start = time.perf_counter()
            records = play(who, specs, batch_size=size, model="bench")
            wall = time.perf_counter() - start
            best[name] = min(best.get(name, float("inf")), wall)
            replies[name] = [[s.response for s in r.steps] for r in records]
            if name == "lockstep":
                tokens = sum(e.prefill_tokens + e.decode_tokens for e in agent.engines)
    identical = replies["lockstep"] == replies["reencode"]
    differing = sum(a != b for ra, rb in zip(replies["lockstep"], replies["reencode"]) for a, b in zip(ra, rb))
    week = len(agent.engines[0]._ids[0])
    raw = forward_throughput(agent.model, args.episodes, week, len(agent.tokenizer))
    speedup = best["reencode"] / best["lockstep"]
    report("eval_model_cpu", {
        "model": args.model, "episodes": args.episodes, "threads": args.threads, "max_new_tokens": args.max_new_tokens,
        "lockstep_s": round(best["lockstep"], 2), "reencode_s": round(best["reencode"], 2), "speedup": round(speedup, 2),
        "replies_identical": identical, "replies_differing": differing, "replies": sum(len(r) for r in replies["lockstep"]),
        "tokens_per_week": week, "lockstep_tokens_per_s": round(tokens / best["lockstep"]),
        "raw_forward_tokens_per_s": round(raw), "engine_efficiency": round(tokens / best["lockstep"] / raw, 3),
    }, {"speedup": args.min_speedup}, check=args.check)
    if args.check and not identical:
        sys.exit(1)


if __name__ == "__main__":
    main()
