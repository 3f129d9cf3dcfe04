"""Benchmark: batched model eval against one episode at a time.

    python benchmarks/bench_eval_model.py                      # CPU: tiny student, 8 episodes
    python benchmarks/bench_eval_model.py --gpu-model Qwen/Qwen2.5-3B-Instruct --gpu-episodes 64

Plays the same 8 in-dist eval episodes with the ``model:rhythm-tiny`` agent twice: ``--batch-size 1``
(one ``generate`` per episode per step) and the default batch (all 8 episodes per ``generate``), and
prints one JSON line with both timings and the speedup. The model is loaded once, outside the timings.
Runs alternate (``--repeats`` of each) and the fastest of each side counts: on a shared machine other
work only ever adds time. CPU seconds are reported beside wall seconds. ``--threads`` defaults to 1:
with two threads on two contended cores, one straggling thread stalls every op (measured: up to 5x
slower); one episode at a time cannot use a second thread anyway. Exit status 1 if batched is not at
least ``--min-speedup`` (5x) faster.

Where CUDA is available it also measures episodes/minute of a larger model (``--gpu-model``, default the
real student ``Qwen/Qwen2.5-3B-Instruct``; any local path works, and ``--gpu-random-init`` builds that
architecture with random weights so no download is needed) and prints a second JSON line
(``--throughput-device cpu`` runs that measurement on the CPU instead).
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from dataclasses import replace


def timed_play(agent, specs, batch_size: int) -> tuple[float, float, list]:
    """Wall seconds, CPU seconds and records of playing ``specs`` in batches of ``batch_size``."""
    from rhythm.episodes import play

    start, cpu = time.perf_counter(), time.process_time()
    records = play(agent, specs, batch_size=batch_size, model="bench")
    return time.perf_counter() - start, time.process_time() - cpu, records


def cpu_speedup(args: argparse.Namespace) -> dict:
    import torch

    from rhythm.agents.base import EpisodeSpec
    from rhythm.eval.evaluate import ModelOptions
    from rhythm.eval.model_agent import ModelAgent

    default = ModelOptions()
    options = replace(default, device="cpu", max_new_tokens=args.max_new_tokens)
    agent = ModelAgent(args.model, options)
    specs = [EpisodeSpec(args.condition, "eval", s) for s in range(args.episodes)]
    timed_play(agent, specs[:1], 1)  # warm-up: first-call allocations, prefix cache
    runs: dict[str, list[tuple[float, float]]] = {"batch1": [], "batched": []}
    records: dict[str, list] = {}
    calls: dict[str, int] = {}
    for i in range(args.repeats):
        for name, size in (("batch1", 1), ("batched", default.batch_size)):
            agent.options = replace(options, batch_size=size)
            before = agent.calls
            wall, cpu, records[name] = timed_play(agent, specs, size)
            calls[name] = agent.calls - before
            runs[name].append((wall, cpu))
            print(f"run {i + 1}/{args.repeats} {name}: {wall:.1f} s wall, {cpu:.1f} s cpu", file=sys.stderr, flush=True)
    t1, tb = min(w for w, _ in runs["batch1"]), min(w for w, _ in runs["batched"])
    c1, cb = min(c for _, c in runs["batch1"]), min(c for _, c in runs["batched"])
    same = [s.response for r in records["batch1"] for s in r.steps] == [s.response for r in records["batched"] for s in r.steps]
    return {
        "bench": "eval_model_cpu",
        "model": args.model,
        "condition": args.condition,
        "episodes": args.episodes,
        "max_new_tokens": args.max_new_tokens,
        "batch_size_default": default.batch_size,
        "seconds_batch1": round(t1, 3),
        "seconds_batched": round(tb, 3),
        "speedup": round(t1 / tb, 2),
        "cpu_seconds_batch1": round(c1, 3),
        "cpu_seconds_batched": round(cb, 3),
        "cpu_speedup": round(c1 / cb, 2),
        "runs_wall_batch1": [round(w, 2) for w, _ in runs["batch1"]],
        "runs_wall_batched": [round(w, 2) for w, _ in runs["batched"]],
        "generate_calls_batch1": calls["batch1"],
        "generate_calls_batched": calls["batched"],
        "completion_tokens": int(sum(r.usage.get("completion_tokens", 0) for r in records["batched"])),
        "replies_identical": same,
        "min_speedup": args.min_speedup,
        "passed": t1 / tb >= args.min_speedup,
        "torch_threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "machine": platform.machine(),
    }


def throughput(args: argparse.Namespace, device: str) -> dict:
    """Episodes per minute of ``--gpu-model`` on ``device``, at the eval's batch size and reply budget."""
    import torch

    from rhythm.agents.base import EpisodeSpec
    from rhythm.eval.evaluate import ModelOptions
    from rhythm.eval.model_agent import ModelAgent

    path = build_random_copy(args.gpu_model, args.out, device) if args.gpu_random_init else args.gpu_model
    options = replace(ModelOptions(), device=device, batch_size=args.gpu_batch_size, max_new_tokens=args.gpu_max_new_tokens)
    start = time.perf_counter()
    agent = ModelAgent(path, options)
    load_s = time.perf_counter() - start
    specs = [EpisodeSpec(args.condition, "eval", s) for s in range(args.gpu_episodes)]
    timed_play(agent, specs[: min(4, len(specs))], options.batch_size)  # warm-up
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    seconds, _, records = timed_play(agent, specs, options.batch_size)
    steps = sum(len(r.steps) for r in records)
    return {
        "bench": "eval_model_throughput",
        "model": args.gpu_model,
        "random_init": args.gpu_random_init,
        "device": torch.cuda.get_device_name(0) if device.startswith("cuda") else device,
        "dtype": agent.source.dtype,
        "episodes": len(records),
        "batch_size": options.batch_size,
        "max_new_tokens": options.max_new_tokens,
        "seconds": round(seconds, 2),
        "load_seconds": round(load_s, 2),
        "episodes_per_minute": round(60 * len(records) / seconds, 2),
        "steps_per_second": round(steps / seconds, 2),
        "completion_tokens": int(sum(r.usage.get("completion_tokens", 0) for r in records)),
        "parse_failure_rate": round(sum(not s.parse_ok for r in records for s in r.steps) / steps, 4),
    }


QWEN25_3B_SHAPE = dict(
    hidden_size=2048, intermediate_size=11008, num_hidden_layers=36, num_attention_heads=16, num_key_value_heads=2,
    max_position_embeddings=32768, rope_theta=1000000.0, tie_word_embeddings=True,
)
"""Qwen2.5-3B-Instruct's architecture (its config.json), for a random-weight stand-in with no download."""


def build_random_copy(name: str, out: str, device: str) -> str:
    """``name``'s architecture with random weights and the tiny student's tokenizer: no weights downloaded.

    The shape comes from ``name``'s config (a local dir, or the Hub when reachable), else Qwen2.5-3B's.
    Replies are noise, so every one runs to ``max_new_tokens``: a worst case for throughput.
    """
    from pathlib import Path

    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer, Qwen2Config

    from rhythm.train.tiny_model import tiny_student_path

    tokenizer = AutoTokenizer.from_pretrained(tiny_student_path())
    try:
        config = AutoConfig.from_pretrained(name)
    except (OSError, ValueError):
        print(f"no config for {name!r} here; using Qwen2.5-3B's shape", file=sys.stderr)
        config = Qwen2Config(**QWEN25_3B_SHAPE)
    config.vocab_size = len(tokenizer)
    config.eos_token_id = tokenizer.eos_token_id
    config.pad_token_id = tokenizer.pad_token_id
    dtype = torch.bfloat16 if device.startswith("cuda") else torch.float32
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(config, dtype=dtype)
    target = Path(out) / "random-model"
    model.save_pretrained(target)
    tokenizer.save_pretrained(target)
    return str(target)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="rhythm-tiny", help="model for the CPU comparison")
    p.add_argument("--condition", default="in-dist")
    p.add_argument("--episodes", type=int, default=8)
    p.add_argument("--max-new-tokens", type=int, default=160, help="reply budget (default: the eval default)")
    p.add_argument("--repeats", type=int, default=3, help="alternating runs of each; the fastest counts")
    p.add_argument("--threads", type=int, default=1, help="torch CPU threads (0: torch's default)")
    p.add_argument("--min-speedup", type=float, default=5.0)
    p.add_argument("--gpu-model", default="Qwen/Qwen2.5-3B-Instruct", help="larger model for the GPU throughput run")
    p.add_argument("--gpu-random-init", action="store_true", help="random weights of --gpu-model's shape (offline)")
    p.add_argument("--gpu-episodes", type=int, default=64)
    p.add_argument("--gpu-batch-size", type=int, default=64)
    p.add_argument("--gpu-max-new-tokens", type=int, default=160)
    p.add_argument("--skip-cpu", action="store_true", help="only the throughput run")
    p.add_argument("--throughput-device", default="cuda", help="device of the throughput run (skipped if absent)")
    p.add_argument("--out", default="runs/bench", help="where --gpu-random-init writes its model")
    args = p.parse_args(argv)

    import torch

    if args.threads > 0:
        torch.set_num_threads(args.threads)
    ok = True
    if not args.skip_cpu:
        result = cpu_speedup(args)
        print(json.dumps(result), flush=True)
        ok = result["passed"]
    device = args.throughput_device
    if device.startswith("cuda") and not torch.cuda.is_available():
        print(json.dumps({"bench": "eval_model_throughput", "skipped": "no CUDA device"}), flush=True)
    else:
        print(json.dumps(throughput(args, device)), flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
