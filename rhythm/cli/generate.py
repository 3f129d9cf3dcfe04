"""``rhythm generate``: teacher episodes (train split) as JSONL."""

from __future__ import annotations

from typing import Annotated, Optional

import typer

from rhythm.cli.options import ConditionOpt, ConfigOpt, QuietOpt, ResumeOpt, SeedsOpt, SetOpt, WaitLockOpt, overrides


def generate_command(
    teacher: Annotated[Optional[str], typer.Option("--teacher", help="bayes (default) | oracle | planner | heuristic | random | openai | azure | an installed rhythm.agents entry point")] = None,
    seeds: SeedsOpt = None,
    condition: ConditionOpt = None,
    split: Annotated[Optional[str], typer.Option("--split", help="train (default) or eval.")] = None,
    output: Annotated[Optional[str], typer.Option("--output", "-o", help="JSONL file, or - for stdout.")] = None,
    concurrency: Annotated[Optional[int], typer.Option("--concurrency", help="Worker processes (CPU teachers) or episodes in flight (openai / azure).")] = None,
    resume: ResumeOpt = False,
    wait_lock: WaitLockOpt = False,
    model: Annotated[Optional[str], typer.Option("--model", help="openai: model name (key from OPENAI_API_KEY).")] = None,
    base_url: Annotated[Optional[str], typer.Option("--base-url", help="openai: any OpenAI-compatible endpoint, e.g. http://localhost:8000/v1.")] = None,
    endpoint: Annotated[Optional[str], typer.Option("--endpoint", help="azure: https://RESOURCE.openai.azure.com (key from AZURE_OPENAI_API_KEY, else Entra ID).")] = None,
    deployment: Annotated[Optional[str], typer.Option("--deployment", help="azure: deployment name.")] = None,
    api_version: Annotated[Optional[str], typer.Option("--api-version", help="azure: api-version, e.g. 2025-04-01-preview.")] = None,
    max_cost_usd: Annotated[Optional[float], typer.Option("--max-cost-usd", help="openai / azure: send no request once this much is spent (prices: llm.prices).")] = None,
    config: ConfigOpt = None,
    set_: SetOpt = None,
    quiet: QuietOpt = False,
) -> None:
    """Play a teacher on train-split seeds and write one episode per JSONL line.

    \b
    Examples:
      rhythm generate --seeds 0-29      # bayes teacher -> data/teacher_30ep.jsonl
      rhythm generate --seeds 0-999 --concurrency 2 -o data/teacher_1000ep.jsonl

    Exit code 1 when an openai / azure run could not write every episode (failed episodes, budget
    reached): rerun with --resume to play the rest.
    """
    from rhythm.cli.ui import err_console, progress_bars
    from rhythm.config import load_config
    from rhythm.errors import RhythmError
    from rhythm.teacher.generate import GenerateConfig, generate, summary_line, validate
    from rhythm.teacher.output import chat_teacher

    given = {"teacher": teacher, "seeds": seeds, "condition": condition, "split": split, "output": output,
             "concurrency": concurrency, "resume": resume or None, "llm.model": model, "llm.base_url": base_url,
             "llm.endpoint": endpoint, "llm.deployment": deployment, "llm.api_version": api_version,
             "llm.max_cost_usd": max_cost_usd}
    cfg = load_config(GenerateConfig, config, overrides(given, set_))
    chat_flags = {"--model": model, "--base-url": base_url, "--endpoint": endpoint, "--deployment": deployment,
                  "--api-version": api_version, "--max-cost-usd": max_cost_usd}
    stray = [flag for flag, value in chat_flags.items() if value is not None]
    if stray and not chat_teacher(cfg.teacher):  # a forgotten --teacher openai
        raise RhythmError(f"{', '.join(stray)} set{'s' if len(stray) == 1 else ''} up a chat-model teacher (--teacher "
                          f"openai or azure); the {cfg.teacher} teacher would ignore it")
    validate(cfg)
    with progress_bars(disable=quiet) as bars:
        state: dict = {}

        def on_total(n: int) -> None:
            state["advance"] = bars(f"{cfg.teacher} episodes", n)

        summary = generate(cfg, progress=lambda n: state["advance"](n), on_total=on_total, wait_lock=wait_lock,
                           say=err_console.print)
    err_console.print(summary_line(summary), markup=False, highlight=False, soft_wrap=True)
    if summary.failed or summary.stopped:
        raise typer.Exit(1)
