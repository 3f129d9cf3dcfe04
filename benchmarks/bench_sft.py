"""SFT throughput: tokens/s and peak memory of ``rhythm sft``'s own trainer (TRL SFTTrainer + PEFT).

    python benchmarks/bench_sft.py                      # tiny student, all weights, CPU (and the GPU case if CUDA is there)
    OMP_NUM_THREADS=1 python benchmarks/bench_sft.py --steps 30
    python benchmarks/bench_sft.py --only gpu           # a ~100M-parameter Qwen2 trained from scratch on the GPU

Prints one JSON line per case on stdout. The data are real bayes-teacher weeks rendered in protocol v2,
one whole week per example (1,028 tokens with the tiny tokenizer, protocol lines only); a case runs ``warmup`` steps, then times
``steps`` more. tokens/s counts the non-padding tokens TRL reports (``num_tokens``, prompt included),
per optimizer step. Peak memory: the process's max RSS on CPU (``rss_before_train_mb`` is the same
process before the trainer starts), ``torch.cuda.max_memory_allocated`` on the GPU.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import resource
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import report  # noqa: E402


def _rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def teacher_data(path: Path, episodes: int) -> Path:
    from rhythm.agents.base import EpisodeSpec
    from rhythm.agents.episodes import play
    from rhythm.agents.registry import make_agent
    from rhythm.records import JsonlWriter

    with JsonlWriter(path) as w:
        for rec in play(make_agent("bayes"), [EpisodeSpec("in-dist", "train", s) for s in range(episodes)]):
            w.write(rec)
    return path


def scratch_model(out: Path, tiny: str, hidden: int = 768, layers: int = 12, intermediate: int = 2560) -> Path:
    """A randomly initialised Qwen2 of ~100M parameters with the tiny student's tokenizer."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny)
    config = AutoConfig.from_pretrained(tiny)
    config.update(dict(hidden_size=hidden, num_hidden_layers=layers, intermediate_size=intermediate,
                       num_attention_heads=12, num_key_value_heads=4, initializer_range=0.02))
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = AutoModelForCausalLM.from_config(config)
    model.save_pretrained(out)
    tok.save_pretrained(out)
    return out


def run_case(name: str, cfg, warmup: int, steps: int) -> dict:
    import torch
    from transformers import TrainerCallback

    from rhythm.train.sft import build_trainer

    marks: list[tuple[float, int, float]] = []

    class Clock(TrainerCallback):
        def on_log(self, args, state, control, logs=None, **kwargs):
            if logs and "num_tokens" in logs and "loss" in logs:
                marks.append((time.perf_counter(), state.global_step, float(logs["num_tokens"])))

    cuda = torch.cuda.is_available() and name.startswith("gpu")
    cfg = replace(cfg, max_steps=warmup + steps, logging_steps=1, save_steps=10**6, eval_on_start=False,
                  val_fraction=0.0, overwrite_output_dir=True)
    with contextlib.redirect_stdout(sys.stderr):  # transformers prints its log lines on stdout
        run = build_trainer(cfg, quiet=True, callbacks=[Clock()])
    model = run.trainer.model
    params = sum(p.numel() for p in model.parameters())
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    rss_before = _rss_mb()
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    with contextlib.redirect_stdout(sys.stderr):
        run.trainer.train()
    (t0, s0, n0), (t1, s1, n1) = marks[warmup - 1], marks[-1]
    return {
        "case": name,
        "device": torch.cuda.get_device_name() if cuda else f"cpu ({torch.get_num_threads()} threads)",
        "model": "rhythm-tiny" if "rhythm-tiny" in cfg.model_name_or_path else "qwen2-scratch",
        "params": params,
        "trainable_params": trainable,
        "peft": cfg.use_peft,
        "precision": "bf16" if run.resolved["bf16"] else "fp32",
        "batch": cfg.per_device_train_batch_size * cfg.gradient_accumulation_steps,
        "timed_steps": s1 - s0,
        "tokens_per_step": round((n1 - n0) / (s1 - s0), 1),
        "tokens_per_s": round((n1 - n0) / (t1 - t0), 1),
        "s_per_step": round((t1 - t0) / (s1 - s0), 4),
        "peak_mem_mb": round(torch.cuda.max_memory_allocated() / 2**20, 1) if cuda else round(_rss_mb(), 1),
        "rss_before_train_mb": round(rss_before, 1),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=20, help="timed optimizer steps per case")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--episodes", type=int, default=24, help="teacher episodes of data (one whole-week example each)")
    parser.add_argument("--batch", type=int, default=8, help="CPU case batch size")
    parser.add_argument("--only", choices=("cpu", "gpu"), default=None)
    args = parser.parse_args(argv)

    import transformers

    transformers.logging.set_verbosity_error()
    with tempfile.TemporaryDirectory(prefix="bench-sft-") as folder:  # the runs' data and checkpoints, removed after
        run_cases(args, Path(folder))
    return 0


def run_cases(args: argparse.Namespace, tmp: Path) -> None:
    """Each case of ``args`` timed in ``tmp``, one JSON line each (:func:`_common.report`)."""
    import torch

    from rhythm.agents.tiny import tiny_student_path
    from rhythm.train.sft import SFTRunConfig

    data = teacher_data(tmp / "teacher.jsonl", args.episodes)
    tiny = str(tiny_student_path())
    base = SFTRunConfig(data=str(data), max_length=1536, learning_rate=3e-3, lr_scheduler_type="constant",
                        warmup_ratio=0.0, lora_dropout=0.0, report_to="none", seed=0, strip_reasoning=True,
                        val_fraction=0.0, logging_steps=10, save_steps=100)
    cases = []
    if args.only in (None, "cpu"):
        cases.append(("cpu-tiny-full", replace(base, model_name_or_path=tiny, output_dir=str(tmp / "cpu"), bf16=False,
                                                use_peft=False, gradient_checkpointing=False,
                                                per_device_train_batch_size=args.batch, gradient_accumulation_steps=1)))
    if args.only in (None, "gpu"):
        if torch.cuda.is_available():
            scratch = scratch_model(tmp / "scratch", tiny)
            cases.append(("gpu-100m-full", replace(base, model_name_or_path=str(scratch), output_dir=str(tmp / "gpu"),
                                                    use_peft=False, learning_rate=3e-4, bf16=True,
                                                    gradient_checkpointing=False, per_device_train_batch_size=16,
                                                    gradient_accumulation_steps=1)))
        else:
            print(json.dumps({"case": "gpu-100m-full", "skipped": "CUDA is not available"}), flush=True)
    for name, cfg in cases:
        result = run_case(name, cfg, args.warmup, args.steps)
        report(f"sft-{result.pop('case', name)}", result)


if __name__ == "__main__":
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    sys.exit(main())
