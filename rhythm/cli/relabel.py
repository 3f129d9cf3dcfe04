"""``rhythm relabel``: DAgger labels for the belief, from recorded weeks and the benchmark's bayes filter."""

from __future__ import annotations

from typing import Annotated

import typer

from rhythm.cli.options import QuietOpt, ResumeOpt, WaitLockOpt


def relabel_command(
    episodes: Annotated[str, typer.Argument(help="Episodes JSONL (rhythm eval's *.episodes.jsonl, teacher data); - for stdin.")],
    output: Annotated[str, typer.Option("--output", "-o", help="Relabelled weeks (JSONL); - for stdout.")] = "-",
    restore_below: Annotated[float | None, typer.Option(
        "--restore-below", min=0.0, max=1.0,
        help="Where a meter (not progress) is below this and the restore rule names the action that keeps it off "
             "the crash line, label that action instead of the one played (the few-weeks quickstart: 0.25).")] = None,
    resume: ResumeOpt = False,
    wait_lock: WaitLockOpt = False,
    quiet: QuietOpt = False,
) -> None:
    """Every reply of recorded weeks rewritten as the bayes filter's belief for that week's own actions and
    observations and the action as played: the teacher's belief at the states the agent reached, for rhythm sft
    (DAgger for the belief; no teacher call). The quickstart's dagger stage does this with its refined student,
    with --restore-below 0.25 in configs/quickstart-few.yaml (docs/grpo-ablation.md, twenty-seventh round).

    \b
    Examples:
      rhythm eval --agent model:runs/quickstart-few/grpo --split train --seeds 5512-9607 --condition in-dist -o own/eval_results_v2.json
      rhythm relabel own/eval_results_v2.episodes.jsonl -o own.jsonl --restore-below 0.25
      rhythm sft --config configs/sft-tiny-dagger.yaml --data data/teacher.jsonl,own.jsonl --model runs/quickstart-few/grpo
    """
    from rhythm.agents.filtering import relabel_file
    from rhythm.cli.ui import err_console, progress_bars

    with progress_bars(disable=quiet) as bars:  # ~30 ms a week: 4,096 weeks are two minutes
        written, skipped = relabel_file(episodes, output, restore_below, resume=resume, bars=bars, wait_lock=wait_lock,
                                        say=lambda msg: err_console.print(msg, markup=False, highlight=False))
    if output != "-":
        err_console.print(f"relabelled {written} weeks -> {output}" + (f" ({skipped} already there)" if skipped else ""),
                          markup=False, highlight=False)
