"""Select within the refined student's own weeks by their crashes: the data of docs/grpo-ablation.md's twenty-fifth round.

The few-weeks quickstart's DAgger stage learns the refined student's relabelled weeks with its actions as played
(``runs/quickstart-few/dagger-play/own_filtered.jsonl``). This script writes a variant of such a file:

    --mark below   each step after which a meter is below the crash line is marked ``explored``: its ACTION line
                   leaves the loss, its BELIEF line stays (train with ``python benchmarks/dagger_probe.py sft``)
    --mark new     the same, only for the steps on which a meter crossed the line
    --max-crashes N  only the weeks with at most N crashes (train with ``rhythm sft``)
    --min-crashes N  only the weeks with at least N crashes (give it beside the whole file: those weeks twice)

    python benchmarks/crash_weeks.py runs/quickstart-few/dagger-play/own_filtered.jsonl --min-crashes 3 -o own_hi.jsonl
    rhythm sft --config configs/sft-tiny-dagger.yaml --model runs/quickstart-few/grpo \\
        --data runs/quickstart-few/data/teacher.jsonl,runs/quickstart-few/dagger-play/own_filtered.jsonl,own_hi.jsonl
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import run_or_exit  # noqa: E402

from rhythm.env.constants import CRASH_THRESHOLD  # noqa: E402
from rhythm.records import read_episodes, write_episodes  # noqa: E402


def crashed(before: list[float] | None, after: list[float], new_only: bool) -> bool:
    """Whether a meter is below the crash line after a step (``new_only``: one that was not before it; the week's
    first step has no recorded meters before it, so there any meter below the line counts as new)."""
    if not new_only or before is None:
        return min(after) < CRASH_THRESHOLD
    return any(a < CRASH_THRESHOLD <= b for a, b in zip(after, before, strict=True))


def marked(record: dict[str, Any], new_only: bool) -> dict[str, Any]:
    """The week with its crashing steps marked ``explored`` (the step's ``meters`` are those after it)."""
    steps, before = [], None
    for step in record["steps"]:
        steps.append({**step, "explored": True} if crashed(before, step["meters"], new_only) else step)
        before = step["meters"]
    return {**record, "steps": steps}


def selected(path: str, mark: str | None, max_crashes: int | None, min_crashes: int | None) -> Iterator[dict[str, Any]]:
    """The weeks of ``path`` whose crash count is within the bounds, marked as ``mark`` says (None: as read)."""
    for _, record in read_episodes(path):
        crashes = record["score"]["crashes"]
        if (max_crashes is not None and crashes > max_crashes) or (min_crashes is not None and crashes < min_crashes):
            continue
        yield marked(record, mark == "new") if mark else record


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("episodes", help="relabelled own weeks (JSONL), e.g. the quickstart's own_filtered.jsonl")
    ap.add_argument("-o", "--output", default="-", help="the selected weeks (JSONL); - for stdout")
    ap.add_argument("--mark", choices=["below", "new"], default=None)
    ap.add_argument("--max-crashes", type=int, default=None)
    ap.add_argument("--min-crashes", type=int, default=None)
    args = ap.parse_args(argv)
    run_or_exit("crash_weeks", run, args)
    return 0


def run(args: argparse.Namespace) -> None:
    n = write_episodes(args.output, selected(args.episodes, args.mark, args.max_crashes, args.min_crashes))
    print(f"{n} weeks -> {args.output}", file=sys.stderr)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
