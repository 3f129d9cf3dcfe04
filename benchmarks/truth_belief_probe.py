"""Truth-labelled beliefs: can the student's end-of-week belief learn from the person's true profile?

The few-teacher-weeks student's in-dist distance to the full-data student is half its belief at the last step
(MAE 0.077 against 0.062). The environment knows each person, so its own weeks can be labelled for free: this
is ``rhythm sft`` where, in every week a model played (``agent: model:...``, e.g. ``rhythm eval``'s episodes
JSONL), the last step's belief is replaced by the true (S, M, W) rounded to 0.01 and **only those three number
tokens** are learned (the rest of the week is context: its own earlier beliefs, as it played them). Teacher weeks
in the same data train as ``rhythm sft`` trains them. Cross-entropy against one draw of the truth per week is
the posterior's own training signal (its argmax tends to the posterior's mode), with no reward noise.

A probe (docs/grpo-ablation.md, sixth round, rows TB1-TB3): it did not improve the belief at any learning rate tried, so
``rhythm sft`` does not carry it. It relies on the tiny student's tokenizer (each number one token: the last reply
is ``BELIEF: S=`` n `` M=`` n `` W=`` n ``\\nACTION:`` a ``<|im_end|>``) and checks that layout.

    rhythm eval --agent model:runs/quickstart-few/sft --split train --seeds 5000-5511 --condition in-dist \\
        --set 'references=[]' --set model.max_new_tokens=16 -o runs/own/eval_results_v2.json
    python benchmarks/truth_belief_probe.py --config configs/sft-tiny-weeks.yaml \\
        --set model_name_or_path=runs/quickstart-few/sft --set output_dir=runs/sft-truth \\
        --set data=runs/quickstart-few/data/teacher.jsonl,runs/own/eval_results_v2.episodes.jsonl \\
        --set learning_rate=3e-5 --set max_steps=120
"""

from __future__ import annotations

import sys
from typing import Any

import numpy as np

import rhythm.train.sft as sft
from rhythm.errors import RhythmError
from rhythm.grader import true_belief
from rhythm.protocol import format_ending, parse_reply
from rhythm.train.common import entry_main
from rhythm.train.data import DataOptions, DataReport, build_examples, tokenize_examples


def truth_examples(paths: list[str], options: DataOptions) -> tuple[dict[str, list[dict[str, Any]]], DataReport]:
    """:func:`rhythm.train.data.build_examples`, with each model-played week's last belief set to the truth."""
    rows, report = build_examples(paths, options)
    for split in rows.values():
        for row in split:
            if not row["agent"].startswith("model:"):
                continue
            truth = np.round(true_belief(row["condition"], row["split"], [row["seed"]])[0], 2)
            messages = [dict(m) for m in row["messages"]]
            last = max(i for i, m in enumerate(messages) if m["role"] == "assistant")
            messages[last]["content"] = format_ending([float(x) for x in truth], parse_reply(messages[last]["content"]).action)
            row["messages"], row["truth_last"] = messages, True
    return rows, report


def truth_weights(rows: dict[str, list[dict[str, Any]]], tokenizer, max_length: int | None, report: DataReport,
                  **kwargs: Any) -> dict[str, list[dict[str, Any]]]:
    """:func:`rhythm.train.data.tokenize_examples`; then a truth-labelled week learns its last belief's numbers only."""
    out = tokenize_examples(rows, tokenizer, max_length, report, **kwargs)
    for split in out.values():
        for example in split:
            if not example.get("truth_last"):
                continue
            end = max(i for i, w in enumerate(example["loss_weights"]) if w > 0)  # the last reply's <|im_end|>
            numbers = [end - 7, end - 5, end - 3]
            if tokenizer.decode(example["input_ids"][end - 8]) != "BELIEF: S=":
                raise RhythmError("truth_belief_probe needs the tiny student's tokenizer (one token per number)")
            weights = [0.0] * len(example["input_ids"])
            for i in numbers:
                weights[i] = 1.0
            example["loss_weights"] = weights
            example["labels"] = [t if w > 0 else -100 for t, w in zip(example["input_ids"], weights, strict=True)]
    return out


def train(cfg: sft.SFTRunConfig, quiet: bool = False) -> dict[str, Any]:
    """``rhythm sft`` with the truth at the end of each model-played week (:func:`truth_examples`)."""
    sft.tokenize_examples = truth_weights  # the probe's one change to the trainer's data path
    return sft.run_sft(cfg, quiet=quiet, examples=truth_examples)


if __name__ == "__main__":
    sys.exit(entry_main("sft", sft.SFTRunConfig, train, sys.argv[1:], sft.validate, omit=("data",), doc=train.__doc__,
                        prog="python benchmarks/truth_belief_probe.py"))
