"""The filter's belief learned by SFT at as few states as a GRPO run judges (experimental, twentieth round of
docs/grpo-ablation.md): is the GRPO belief reward short of reward quality, or of states?

    rhythm relabel runs/grpo/student_rollouts.jsonl -o own.jsonl      # the GRPO run's own weeks, the filter's beliefs
    python benchmarks/belief_coverage.py OUT one --data own.jsonl --model runs/quickstart/sft
    python benchmarks/belief_coverage.py OUT all --data own.jsonl --model runs/quickstart/sft

``rhythm sft`` with ``configs/sft-tiny-dagger.yaml``'s settings at the GRPO run's budget: 40 steps of 2 weeks at lr
3e-4, constant after 5% warm-up, no validation. ``one``: a single belief number of a single state of each week
carries the loss (drawn by the week, 80 in the run: the states the enumerated GRPO row judged); ``all``: every belief
number of every state of the same weeks (84 a week). The loss weights go in through ``rhythm sft``'s ``tokenize``
hook, so the trainer is the shipped one.
"""

from __future__ import annotations

import argparse
import random
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import run_or_exit  # noqa: E402

from rhythm.config import load_config  # noqa: E402
from rhythm.model.tiny import number_value  # noqa: E402
from rhythm.train.data import DataReport, tokenize_examples  # noqa: E402
from rhythm.train.sft import SFTRunConfig, run_sft  # noqa: E402

CONFIG = Path(__file__).resolve().parents[1] / "rhythm" / "configs" / "sft-tiny-dagger.yaml"


def number_ids(tokenizer: Any) -> set[int]:
    """The tokens that write a protocol number on their own (:func:`rhythm.model.tiny.number_value`; the tiny
    tokenizer writes each belief number 0.00..1.00 as one)."""
    return {i for t, i in tokenizer.get_vocab().items() if number_value(t) is not None}


def belief_numbers_only(mode: str):
    """A ``tokenize`` hook: the shipped tokenization, then the loss kept on the replies' belief numbers alone, every
    one (``all``) or one a week, drawn by the week's key (``one``)."""

    def tokenize(rows: dict, tokenizer: Any, max_length: int | None, report: DataReport, **kw: Any) -> dict:
        data = tokenize_examples(rows, tokenizer, max_length, report, **kw)
        numbers = number_ids(tokenizer)
        for split in data.values():
            for ex in split:
                where = [j for j, (t, w) in enumerate(zip(ex["input_ids"], ex["loss_weights"], strict=True))
                         if w > 0 and t in numbers]
                keep = set(where) if mode == "all" else {random.Random(ex["episode"]).choice(where)}
                ex["loss_weights"] = [1.0 if j in keep else 0.0 for j in range(len(ex["input_ids"]))]
                ex["labels"] = [t if j in keep else -100 for j, t in enumerate(ex["input_ids"])]
        return data

    return tokenize


def run(a: argparse.Namespace) -> None:
    cfg = load_config(SFTRunConfig, str(CONFIG), [
        f"data={a.data}", f"model_name_or_path={a.model}", f"output_dir={a.out}", "max_steps=40",
        "learning_rate=3e-4", "per_device_train_batch_size=2", "gradient_accumulation_steps=1",
        "lr_scheduler_type=constant_with_warmup", "warmup_ratio=0.05", "val_fraction=0", "observation_loss=0",
        "echo_loss=null", f"overwrite_output_dir={str(a.overwrite).lower()}"])
    summary = run_sft(cfg, quiet=True, tokenize=belief_numbers_only(a.mode))
    print(f"{a.mode}: {summary['global_step']} steps -> {a.out}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out", help="output model directory")
    ap.add_argument("mode", choices=("one", "all"), help="one belief number a week, or every one")
    ap.add_argument("--data", required=True, help="relabelled weeks (rhythm relabel)")
    ap.add_argument("--model", required=True, help="the student to continue (a fully trained model directory)")
    ap.add_argument("--overwrite", action="store_true", help="replace a run already in OUT")
    run_or_exit("belief_coverage", run, ap.parse_args())


if __name__ == "__main__":
    main()
