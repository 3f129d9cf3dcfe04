"""``rhythm relabel``: DAgger labels for the belief, from recorded weeks and the benchmark's bayes filter."""

from __future__ import annotations

from typing import Annotated

import typer

from rhythm.cli.options import QuietOpt, ResumeOpt

CHUNK = 256
"""Weeks relabelled per batch (the filter plays them in lockstep); each week's labels are its own alone."""


def relabel_command(
    episodes: Annotated[str, typer.Argument(help="Episodes JSONL (rhythm eval's *.episodes.jsonl, teacher data); - for stdin.")],
    output: Annotated[str, typer.Option("--output", "-o", help="Relabelled weeks (JSONL); - for stdout.")] = "-",
    restore_below: Annotated[float | None, typer.Option(
        "--restore-below", min=0.0, max=1.0,
        help="Where a meter (not progress) is below this and the restore rule names the action that keeps it off "
             "the crash line, label that action instead of the one played (the few-weeks quickstart: 0.25).")] = None,
    resume: ResumeOpt = False,
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
    from rhythm.config import read_recorded, write_config
    from rhythm.errors import RhythmError
    from rhythm.provenance import made_by
    from rhythm.records import (
        JsonlWriter,
        check_output,
        check_trainable,
        done_keys,
        episode_key,
        read_episodes,
        sidecar_path,
    )

    check_output(output, inputs=[episodes])
    records = []
    for where, record in read_episodes(episodes):
        check_trainable(record, where)  # what relabel writes is SFT data: refused here, not at the next stage
        records.append(record)
    if not records:
        raise RhythmError(f"no weeks in {episodes}")
    settings = {"episodes": episodes, "output": output, "restore_below": restore_below}
    done: set = set()
    if resume and output != "-":
        recorded = read_recorded(sidecar_path(Path(output)))
        if recorded is not None and recorded[0].get("restore_below") != restore_below:
            raise RhythmError(f"{output} was relabelled with restore_below={recorded[0].get('restore_below')}; resume "
                              "with it, or write another --output")
        done = set(done_keys(Path(output)))
    todo = [r for r in records if episode_key(r) not in done]
    with JsonlWriter(output, resume=resume) as writer:  # each batch written as it is labelled: a kill keeps them
        if output != "-":  # what made the labels, beside them (as rhythm generate writes its config)
            write_config(settings, sidecar_path(Path(output)), made_by(stage="relabel"))
        with progress_bars(disable=quiet) as bars:  # ~30 ms a week: 4,096 weeks are two minutes
            advance = bars("relabel", len(todo))
            for i in range(0, len(todo), CHUNK):
                batch = todo[i : i + CHUNK]
                for week in filtered_weeks(batch, restore_below):
                    writer.write(week)
                advance(len(batch))
    if output != "-":
        err_console.print(f"relabelled {len(todo)} weeks -> {output}" + (f" ({len(done)} already there)" if done else ""),
                          markup=False, highlight=False)
