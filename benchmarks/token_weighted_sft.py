"""Research probe behind rows FW* and NI of docs/student.md ("Seeing the meters"): ``rhythm sft`` with every
token of the week in the loss, weighted by *token* rather than by the chat template's assistant mask.

Tokens the tiny student's replies are written in (belief numbers, ``BELIEF: S=``/`` M=``/`` W=``,
``\\nACTION:``, the action names and, unless ``--no-im-end``, ``<|im_end|>``) get weight 1 wherever they
appear; every other token gets ``--weight``. The difference from the shipped ``observation_loss``: the
action named in each observation's ``After ACTION:`` line (the echo of the student's own last action)
is weighted as a reply. Measured there: with it the student reads the serenity meter at 0.85-0.93 R^2 and
meditates; without it (``observation_loss``) 0.52-0.58. The rest of the command line is ``rhythm sft``'s::

    python benchmarks/token_weighted_sft.py --weight 0.1 [--no-im-end] -- \\
        --config configs/sft-tiny-openings.yaml --data runs/quickstart/data/teacher.jsonl -o A \\
        --set observation_loss=0 --set seed=0

It needs the tiny student's tokenizer (one token per number, marker and action name).
"""

from __future__ import annotations

import argparse
import sys

import rhythm.train.sft as sft
from rhythm.env.constants import ACTIONS


def patch(weight: float, im_end: bool) -> None:
    """Label every token of each week and weight it by token (see the module doc), through the same
    ``loss_weights`` column that ``observation_loss`` fills."""
    tokenize = sft.tokenize_examples  # rows -> tokens, then every token labelled and weighted here

    def by_token(rows, tokenizer, max_length, report, **kwargs):
        out = tokenize(rows, tokenizer, max_length, report)
        vocab = tokenizer.get_vocab()
        markers = ["BELIEF: S=", " M=", " W=", "\nACTION:", *(["<|im_end|>"] if im_end else [])]
        reply = {vocab[f"{i / 100:.2f}"] for i in range(101)} | {vocab[t] for t in markers} | {vocab[" " + a] for a in ACTIONS}
        for examples in out.values():
            for example in examples:
                example["labels"] = list(example["input_ids"])
                example["loss_weights"] = [1.0 if t in reply else weight for t in example["input_ids"]]
        return out

    run = sft.run_sft  # build_trainer's tokenize hook (its default was bound when it was defined)
    sft.run_sft = lambda cfg, **kwargs: run(cfg, tokenize=by_token, **kwargs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--weight", type=float, default=0.1, help="weight of every token the replies are not written in")
    parser.add_argument("--no-im-end", action="store_true", help="give <|im_end|> the weight too (row NI)")
    args, rest = parser.parse_known_args()
    patch(args.weight, not args.no_im_end)
    from rhythm.cli.main import app

    sys.argv = ["rhythm", "sft", *[a for a in rest if a != "--"]]
    app()


if __name__ == "__main__":
    main()
