"""Own weeks as a world model: can the student learn to *see* serenity from weeks it played itself?

The few-teacher-weeks student reads serenity off its state at ``ACTION:`` at R^2 0.38 (the full-data student
0.82: ``rhythm analyze teacher-forced MODEL WEEKS --meters`` on 200 fresh teacher weeks), never meditates, and crashes on serenity 2.3 times
an in-dist week against 0.3 (``rhythm analyze behaviour``). The quickstart's stage 1 taught the full-data student
to see the meters by putting the week's observations in the loss (``observation_loss``, docs/student.md); the
environment gives observations for free. This is ``rhythm sft`` where the weeks a model played (``agent:
model:...``, e.g. ``rhythm eval``'s episodes) train **only their observations**, at ``--own-obs`` (their replies
at ``--own-reply``, default 0: the student's own choices are not imitated), and teacher weeks train as stage 1
does (replies 1, ``observation_loss`` and ``echo_loss`` from the config, e.g. 0.1 and 1).

A probe (docs/grpo-ablation.md, seventh round, row WM3): it did not make the student see serenity, so ``rhythm sft`` does
not carry it.

    python benchmarks/world_model_probe.py --own-obs 0.3 -- --config benchmarks/configs/own-weeks-best.yaml \\
        --set model_name_or_path=runs/quickstart-few/sft \\
        --set observation_loss=0.1 --set echo_loss=1.0 --set max_steps=600 --set output_dir=runs/sft-wm \\
        --set data=runs/quickstart-few/data/teacher.jsonl,runs/ei/own/g/eval_results_v2.episodes.jsonl,...
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

import rhythm.train.sft as sft
from rhythm.train.common import entry_main
from rhythm.train.data import DataReport, tokenize_examples


def own_week(row: dict[str, Any]) -> bool:
    return row["agent"].startswith("model:")


def world_model_weights(own_obs: float, own_reply: float):
    """A ``tokenize_examples`` for :mod:`rhythm.train.sft`: teacher weeks as the config says; the weeks a model
    played with every reply token at ``own_reply`` and every other token at ``own_obs``."""

    def tokenize(rows: dict[str, list[dict[str, Any]]], tokenizer, max_length: int | None, report: DataReport,
                 observation_loss: float = 0.0, echo_loss: float | None = None) -> dict[str, list[dict[str, Any]]]:
        teacher = {k: [r for r in v if not own_week(r)] for k, v in rows.items()}
        own = {k: [r for r in v if own_week(r)] for k, v in rows.items()}
        # one report for both: drops and the longest week add up; the counts are taken once more on the merged rows
        out = tokenize_examples(teacher, tokenizer, max_length, report, observation_loss=observation_loss, echo_loss=echo_loss)
        mine = tokenize_examples(own, tokenizer, max_length, report, observation_loss=own_obs) if any(own.values()) else {}
        for split in mine.values():
            for example in split:
                # tokenize_examples gives the replies 1 and everything else own_obs (< 1 here)
                weights = [own_reply if w == 1.0 else w for w in example["loss_weights"]]
                example["loss_weights"] = weights
                example["labels"] = [t if w > 0 else -100 for t, w in zip(example["input_ids"], weights, strict=True)]
        merged = {k: out.get(k, []) + mine.get(k, []) for k in rows}
        report.count(merged)
        return merged

    return tokenize


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="python benchmarks/world_model_probe.py", description=__doc__.split("\n\n")[0])
    ap.add_argument("--own-obs", type=float, default=0.3, help="loss weight of the own weeks' observations")
    ap.add_argument("--own-reply", type=float, default=0.0, help="loss weight of the own weeks' replies")
    ap.add_argument("rest", nargs=argparse.REMAINDER, help="-- then rhythm sft's --config / --set arguments")
    args = ap.parse_args(argv)
    if not 0.0 < args.own_obs < 1.0 or not 0.0 <= args.own_reply <= 1.0:
        ap.error("--own-obs must be in (0, 1) and --own-reply in [0, 1]")
    rest = args.rest[1:] if args.rest[:1] == ["--"] else args.rest

    def train(cfg: sft.SFTRunConfig, quiet: bool = False) -> dict[str, Any]:
        sft.tokenize_examples = world_model_weights(args.own_obs, args.own_reply)  # the probe's one change
        return sft.run_sft(cfg, quiet=quiet)

    return entry_main("sft", sft.SFTRunConfig, train, rest, sft.validate, omit=("data",), doc=__doc__.split("\n\n")[0],
                      prog="python benchmarks/world_model_probe.py")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
