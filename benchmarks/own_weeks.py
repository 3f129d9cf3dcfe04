"""``rhythm sft`` on the student's own weeks, two refinements from the environment alone that stay out of the
product: on the eval split neither moved the few-weeks student beyond its CIs (docs/grpo-ablation.md, sixth and ninth
rounds), so ``rhythm sft`` carries neither. Both take ``rhythm sft``'s ``--config`` / ``--set`` after ``--``.

    best     expert iteration (ReST-EM): of the weeks one person was played, only the highest
             score.final_score is learned (ties: the first read).
    filter   DAgger for the belief: in each week a model played (agent model:...), each step with probability
             --share (default 1) has its BELIEF replaced by the benchmark's bayes filter posterior for the week's
             own actions and observations (rhythm.agents.filtering), and only those numbers are learned; the
             actions stay as played, out of the loss (--keep-actions: in it, an anchor to the policy that played
             them). Teacher weeks train as rhythm sft trains them.

    python benchmarks/own_weeks.py best -- --config benchmarks/configs/own-weeks-best.yaml \\
        --set model_name_or_path=runs/quickstart-few/sft --set data=TEACHER,OWN_G,OWN_S1,... --set output_dir=OUT
    python benchmarks/own_weeks.py filter [--share 0.5] -- --config benchmarks/configs/own-weeks-filter.yaml ...

benchmarks/expert_iteration.sh plays the student's weeks with ``rhythm eval`` and runs either.
"""

from __future__ import annotations

import argparse
import functools
import re
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from rhythm.agents.filtering import filtered_weeks
from rhythm.env.constants import ACTIONS
from rhythm.errors import RhythmError
from rhythm.protocol import parse_reply
from rhythm.records import check_protocol, dumps, read_episodes
from rhythm.train.common import entry_main
from rhythm.train.data import (
    DataOptions,
    DataReport,
    build_examples,
    final_score,
    render_weeks,
    span_tokens,
    tokenize_examples,
    training_template,
    week_replies,
)
from rhythm.train.sft import SFTRunConfig, run_sft, validate

NOT_BEST = "not its person's best week (own_weeks.py best)"
BELIEF_NUMBERS = re.compile(r"BELIEF: S=(\d+\.\d+) M=(\d+\.\d+) W=(\d+\.\d+)")  # format_belief's line
ACTION_NAME = re.compile(r"ACTION: ([A-Z_]+)")


def best_examples(paths: list[str], options: DataOptions) -> tuple[dict[str, list[dict[str, Any]]], DataReport]:
    """:func:`rhythm.train.data.build_examples` on each person's best scored usable week: a week the data options
    would drop anyway is left to them (and counted under their reason), a usable week beaten by another of its
    person's is counted as ``NOT_BEST``."""
    if any(str(p) == "-" for p in paths):
        raise RhythmError("own_weeks.py best reads its files twice; stdin (-) cannot be one of them")
    usable: dict[str, int] = {}  # where -> steps of each week the data options keep
    best: dict[str, tuple[float, str]] = {}  # person -> (score, where) of its best usable week so far
    for path in paths:
        for where, record in read_episodes(path):
            check_protocol(record, where)
            steps = record["steps"][: options.first_turns]
            score = final_score(record, where)
            if week_replies(steps, options, where)[1] is not None or (options.min_score is not None and score < options.min_score):
                continue
            usable[where] = len(steps)
            person = f"{record['condition']}/{record['split']}/{record['seed']}"
            if person not in best or score > best[person][0]:
                best[person] = (score, where)
    beaten = usable.keys() - {where for _, where in best.values()}
    with tempfile.TemporaryDirectory() as tmp:
        copies = [str(Path(tmp) / f"{i}.jsonl") for i in range(len(paths))]
        for path, copy in zip(paths, copies, strict=True):
            with open(copy, "wb") as f:
                for where, record in read_episodes(path):
                    if where not in beaten:
                        f.write(dumps(record))
        rows, report = build_examples(copies, options)
    report.files = list(paths)
    for where in beaten:
        report.episodes_read += 1
        report.steps_read += usable[where]
        report.drop_episode(NOT_BEST, usable[where])
    return rows, report


def filtered_replies(rows: list[dict[str, Any]]) -> list[list[tuple[int, str]]]:
    """For each week, each reply as ``(message index, reply)`` with its BELIEF the bayes filter's posterior for the
    week's own actions and observations (rounded as the protocol states it) and its action as played
    (:func:`rhythm.agents.filtering.filtered_weeks`)."""
    replies = [[i for i, m in enumerate(row["messages"]) if m["role"] == "assistant"] for row in rows]
    weeks = filtered_weeks([{"condition": row["condition"], "split": row["split"], "seed": row["seed"],
                             "steps": [{"action": ACTIONS[parse_reply(row["messages"][i]["content"]).action]} for i in at]}
                            for row, at in zip(rows, replies, strict=True)])
    return [[(i, step["response"]) for i, step in zip(at, week["steps"], strict=True)]
            for at, week in zip(replies, weeks, strict=True)]


def filter_examples(share: float = 1.0, seed: int = 0):
    """A ``build_examples`` for :func:`rhythm.train.sft.build_trainer`: each step of each week a model played is
    relabelled by the filter with probability ``share``; the row's ``relabelled`` lists which replies."""

    def build(paths: list[str], options: DataOptions) -> tuple[dict[str, list[dict[str, Any]]], DataReport]:
        if not options.strip_reasoning:
            raise RhythmError("own_weeks.py filter rewrites whole replies as their protocol lines; set strip_reasoning: true")
        rows, report = build_examples(paths, options)
        own = [row for split in rows.values() for row in split if row["agent"].startswith("model:")]
        if not own:
            raise RhythmError("own_weeks.py filter: no week in the data was played by a model (agent model:...); "
                              "rhythm eval --agent model:DIR writes such weeks")
        rng = np.random.default_rng(seed)
        for row, replies in zip(own, filtered_replies(own), strict=True):
            messages = [dict(m) for m in row["messages"]]
            chosen = [k for k in range(len(replies)) if rng.random() < share]
            for k in chosen:
                i, content = replies[k]
                messages[i]["content"] = content
            row["messages"], row["relabelled"] = messages, chosen
        return rows, report

    return build


def filter_weights(rows: dict[str, list[dict[str, Any]]], tokenizer, max_length: int | None, report: DataReport,
                   keep_actions: bool = False, **kwargs: Any) -> dict[str, list[dict[str, Any]]]:
    """:func:`rhythm.train.data.tokenize_examples`; then a relabelled week learns its relabelled replies' belief
    numbers alone (the tokens that overlap them), and with ``keep_actions`` every reply's action name as played too:
    the policy that played the week anchors its own actions while its beliefs move."""
    out = tokenize_examples(rows, tokenizer, max_length, report, **kwargs)
    template = training_template(tokenizer)
    for examples in out.values():
        marked = [e for e in examples if e.get("relabelled") is not None]
        if not marked:
            continue
        enc = render_weeks(marked, tokenizer, template, offsets=True)
        for example, mask, text, offsets in zip(marked, enc["assistant_masks"], enc["text"], enc["offset_mapping"], strict=True):
            lines = [span_tokens(offsets, [m.span(g) for g in (1, 2, 3)]) for m in BELIEF_NUMBERS.finditer(text)]
            replies = [hit for hit in lines if all(m for h, m in zip(hit, mask, strict=True) if h)]  # one a reply
            learned = np.zeros(len(mask), dtype=bool)
            for k in example["relabelled"]:
                learned |= np.asarray(replies[k], dtype=bool)
            if keep_actions:
                for m in ACTION_NAME.finditer(text):
                    hit = np.asarray(span_tokens(offsets, [m.span(1)]), dtype=bool)
                    learned |= hit & np.asarray(mask, dtype=bool)
            example["loss_weights"] = learned.astype(float).tolist()
            example["labels"] = [t if hit else -100 for t, hit in zip(example["input_ids"], learned, strict=True)]
        for example in examples:
            example.pop("relabelled", None)  # the marker stays out of the trainer's dataset
    return out


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="python benchmarks/own_weeks.py", usage="%(prog)s {best,filter} [options] -- [rhythm sft --config / --set]",
                                 description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__.split("\n\n", 1)[1])
    ap.add_argument("variant", choices=["best", "filter"])
    ap.add_argument("--share", type=float, default=1.0, help="filter: chance that a step of an own week is relabelled")
    ap.add_argument("--seed", type=int, default=0, help="filter: seed of the steps drawn")
    ap.add_argument("--keep-actions", action="store_true",
                    help="filter: the own weeks' actions as played stay in the loss (an anchor to the policy that played them)")
    cut = argv.index("--") if "--" in argv else len(argv)  # after --: rhythm sft's --config / --set arguments
    args, rest = ap.parse_args(argv[:cut]), argv[cut + 1 :]
    if not 0.0 < args.share <= 1.0:
        ap.error("--share must be in (0, 1]")

    def train(cfg: SFTRunConfig, quiet: bool = False) -> dict[str, Any]:
        if args.variant == "best":
            return run_sft(cfg, quiet=quiet, examples=best_examples)
        weights = functools.partial(filter_weights, keep_actions=args.keep_actions)
        return run_sft(cfg, quiet=quiet, examples=filter_examples(args.share, args.seed), tokenize=weights)

    return entry_main("sft", SFTRunConfig, train, rest, validate, omit=("data",), doc=__doc__.split("\n\n")[0],
                      prog=f"python benchmarks/own_weeks.py {args.variant}")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
