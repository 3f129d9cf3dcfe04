"""``rhythm generate``: teacher episodes (train split) as JSONL."""

from __future__ import annotations

from typing import Annotated, Optional

import typer

from rhythm.cli.options import ConditionOpt, ConfigOpt, QuietOpt, ResumeOpt, SeedsOpt, SetOpt, overrides


def generate_command(
    teacher: Annotated[Optional[str], typer.Option("--teacher", help="bayes (default) | oracle | planner | openai | azure")] = None,
    seeds: SeedsOpt = None,
    condition: ConditionOpt = None,
    split: Annotated[Optional[str], typer.Option("--split", help="train (default) or eval.")] = None,
    output: Annotated[Optional[str], typer.Option("--output", "-o", help="JSONL file, or - for stdout.")] = None,
    concurrency: Annotated[Optional[int], typer.Option("--concurrency", help="Worker processes (CPU teachers) or requests in flight (API teachers).")] = None,
    resume: ResumeOpt = False,
    config: ConfigOpt = None,
    set_: SetOpt = None,
    quiet: QuietOpt = False,
) -> None:
    """Play a teacher on train-split seeds and write one episode per JSONL line."""
    from rhythm.cli.ui import err_console, progress_bars
    from rhythm.config import load_config
    from rhythm.teacher.generate import GenerateConfig, generate, summary_line, validate

    given = {"teacher": teacher, "seeds": seeds, "condition": condition, "split": split, "output": output,
             "concurrency": concurrency, "resume": resume or None}
    cfg = load_config(GenerateConfig, config, overrides(given, set_))
    validate(cfg)
    with progress_bars(disable=quiet) as bars:
        state: dict = {}

        def on_total(n: int) -> None:
            state["advance"] = bars(f"{cfg.teacher} episodes", n)

        summary = generate(cfg, progress=lambda n: state["advance"](n), on_total=on_total)
    err_console.print(summary_line(summary))
