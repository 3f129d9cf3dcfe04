"""The filter's beliefs on part of the student's own weeks: does it learn to recover from its own belief errors?

``rhythm sft``'s ``filter_beliefs`` (``configs/sft-tiny-filter.yaml``) replaces *every* belief of a week the
student played with the benchmark's bayes filter posterior for that week's own actions and observations
(:func:`rhythm.agents.filtering.filter_beliefs`), so the context holds the filter's beliefs throughout. This probe
asks the other question: each step is relabelled only with probability ``--share`` and the other steps keep the
student's own beliefs, out of the loss, as the context it meets in free play (an early error it should learn to
correct). Only the relabelled numbers are learned; teacher weeks train as ``rhythm sft`` trains them; only in-dist
weeks are relabelled. At ``--share 1`` it builds the same examples as ``filter_beliefs`` (checked token for token).
A probe (docs/grpo.md, ninth round, row DB1): at 0.5 the student's belief got worse (0.077 -> 0.083 in-dist), so
``rhythm sft`` carries share 1 only.

    rhythm eval --agent model:runs/quickstart-few/sft --split train --seeds 5000-5511 --condition in-dist \\
        --set 'references=[]' --set model.max_new_tokens=16 -o runs/own/eval_results_v2.json
    python benchmarks/filter_belief_probe.py --share 0.5 -- --config configs/sft-tiny-expert.yaml \\
        --set model_name_or_path=runs/quickstart-few/sft --set best_week_per_person=false \\
        --set data=runs/quickstart-few/data/teacher.jsonl,runs/own/eval_results_v2.episodes.jsonl \\
        --set output_dir=runs/sft-filter-half

It relies on the tiny student's tokenizer (each belief number one token) and checks it.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

import numpy as np

import rhythm.train.sft as sft
from rhythm.errors import RhythmError
from rhythm.train.common import entry_main
from rhythm.train.data import DataOptions, DataReport, build_examples, filtered_replies, tokenize_examples


def _own(row: dict[str, Any]) -> bool:
    return row["agent"].startswith("model:") and row["condition"] == "in-dist"


def filter_examples(share: float, seed: int):
    """A ``build_examples`` for :mod:`rhythm.train.sft`: each own in-dist week's steps relabelled with
    probability ``share`` by the filter (:func:`rhythm.train.data.filtered_replies`; row ``relabelled``: the
    reply indices whose numbers are learned)."""

    def build(paths: list[str], options: DataOptions) -> tuple[dict[str, list[dict[str, Any]]], DataReport]:
        rows, report = build_examples(paths, options)
        own = [row for split in rows.values() for row in split if _own(row)]
        if not own:
            raise RhythmError("filter_belief_probe: no in-dist weeks played by a model in the data")
        rng = np.random.default_rng(seed)
        for row, replies in zip(own, filtered_replies(own), strict=True):
            messages = [dict(m) for m in row["messages"]]
            chosen = [k for k in range(len(replies)) if rng.random() < share]
            for k in chosen:
                i, content = replies[k]
                messages[i]["content"] = content
            # beliefs_only: tokenize_examples puts the loss on every reply's belief numbers alone; filter_weights
            # then keeps the relabelled replies' numbers
            row["messages"], row["beliefs_only"], row["relabelled"] = messages, True, chosen
        return rows, report

    return build


def filter_weights(rows: dict[str, list[dict[str, Any]]], tokenizer, max_length: int | None, report: DataReport,
                   **kwargs: Any) -> dict[str, list[dict[str, Any]]]:
    """:func:`rhythm.train.data.tokenize_examples`; then a relabelled week learns its relabelled numbers only."""
    out = tokenize_examples(rows, tokenizer, max_length, report, **kwargs)
    for examples in out.values():
        for example in examples:
            relabelled = example.pop("relabelled", None)
            if relabelled is None:
                continue
            numbers = [i for i, w in enumerate(example["loss_weights"]) if w > 0]  # 3 a reply, in order
            if len(numbers) != 3 * sum(m["role"] == "assistant" for m in example["messages"]):
                raise RhythmError("filter_belief_probe needs the tiny student's tokenizer (one token per number)")
            learned = {i for k in relabelled for i in numbers[3 * k : 3 * k + 3]}
            example["loss_weights"] = [1.0 if i in learned else 0.0 for i in range(len(example["input_ids"]))]
            example["labels"] = [t if i in learned else -100 for i, t in enumerate(example["input_ids"])]
    return out


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="python benchmarks/filter_belief_probe.py", description=__doc__.split("\n\n")[0])
    ap.add_argument("--share", type=float, default=0.5, help="chance that a step of an own week is relabelled")
    ap.add_argument("--seed", type=int, default=0, help="seed of the steps chosen")
    ap.add_argument("rest", nargs=argparse.REMAINDER, help="-- then rhythm sft's --config / --set arguments")
    args = ap.parse_args(argv)
    if not 0.0 < args.share <= 1.0:
        ap.error("--share must be in (0, 1]")
    rest = args.rest[1:] if args.rest[:1] == ["--"] else args.rest

    def train(cfg: sft.SFTRunConfig, quiet: bool = False) -> dict[str, Any]:
        sft.tokenize_examples = filter_weights  # the probe's one change to the trainer's data path
        return sft.run_sft(cfg, quiet=quiet, examples=filter_examples(args.share, args.seed))

    return entry_main("sft", sft.SFTRunConfig, train, rest, omit=("data",), doc=__doc__.split("\n\n")[0],
                      prog="python benchmarks/filter_belief_probe.py")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
