"""``rhythm plot``: final_scores.png, belief_accuracy.png and training_loss.png from eval results and
training logs."""

from __future__ import annotations

from typing import Annotated, Optional

import typer

from rhythm.cli.options import ConfigOpt, SetOpt, overrides


def plot_command(
    results: Annotated[
        Optional[list[str]],
        typer.Option("--results", "-r", help="Results JSON of rhythm eval (repeatable); its <stem>.episodes.jsonl feeds the belief plot."),
    ] = None,
    log: Annotated[
        Optional[list[str]],
        typer.Option("--log", help="Training dir holding training_log.jsonl from rhythm sft / grpo (repeatable)."),
    ] = None,
    out: Annotated[Optional[str], typer.Option("--out", "-o", help="Directory for the PNGs (default plots).")] = None,
    paths: Annotated[
        Optional[list[str]],
        typer.Argument(help="More inputs, so --results a.json b.json works: .json files are results, others logs.", show_default=False),
    ] = None,
    config: ConfigOpt = None,
    set_: SetOpt = None,
) -> None:
    """Draw final scores (with CIs, beside the published run), belief MAE per step, and training curves.

    \b
    Examples:
      rhythm plot --results eval_results_v2.json --log runs/sft-tiny      # -> plots/
    """
    from rhythm.cli.ui import err_console
    from rhythm.config import load_config
    from rhythm.eval.plots import PlotConfig, make_plots

    more = list(paths or [])
    given = {
        "results": (list(results or []) + [p for p in more if p.endswith(".json")]) or None,
        "logs": (list(log or []) + [p for p in more if not p.endswith(".json")]) or None,
        "out": out,
    }
    cfg = load_config(PlotConfig, config, overrides(given, set_))
    summary = make_plots(cfg)
    for note in summary.notes:
        err_console.print(f"note: {note}")
    for path in summary.written:
        print(path)
