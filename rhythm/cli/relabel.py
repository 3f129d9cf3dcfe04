"""``rhythm relabel``: DAgger labels for the belief, from recorded weeks and the benchmark's bayes filter."""

from __future__ import annotations

from typing import Annotated

import typer

from rhythm.cli.options import QuietOpt

CHUNK = 256
"""Weeks relabelled per batch (the filter plays them in lockstep); each week's labels are its own alone."""


def relabel_command(
    episodes: Annotated[str, typer.Argument(help="Episodes JSONL (rhythm eval's *.episodes.jsonl, teacher data); - for stdin.")],
    output: Annotated[str, typer.Option("--output", "-o", help="Relabelled weeks (JSONL); - for stdout.")] = "-",
    restore_below: Annotated[float | None, typer.Option(
        "--restore-below", min=0.0, max=1.0,
        help="Where a meter (not progress) is below this and the restore rule names the action that keeps it off "
             "the crash line, label that action instead of the one played (the few-weeks quickstart: 0.25).")] = None,
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
    from pathlib import Path

    from rhythm.agents.filtering import filtered_weeks
    from rhythm.cli.ui import err_console, progress_bars
    from rhythm.config import write_config
    from rhythm.errors import RhythmError
    from rhythm.provenance import made_by
    from rhythm.records import check_output, read_episodes, sidecar_path, write_episodes

    check_output(output, inputs=[episodes])
    records = [record for _, record in read_episodes(episodes)]
    if not records:
        raise RhythmError(f"no weeks in {episodes}")
    weeks: list[dict] = []
    with progress_bars(disable=quiet) as bars:  # ~30 ms a week: 4,096 weeks are two minutes
        advance = bars("relabel", len(records))
        for i in range(0, len(records), CHUNK):
            batch = records[i : i + CHUNK]
            weeks += filtered_weeks(batch, restore_below)
            advance(len(batch))
    written = write_episodes(output, weeks)
    if output != "-":  # what made the labels, beside them (as rhythm generate writes its config)
        write_config({"episodes": episodes, "output": output, "restore_below": restore_below},
                     sidecar_path(Path(output)), made_by(stage="relabel"))
        err_console.print(f"relabelled {written} weeks -> {output}", markup=False, highlight=False)
