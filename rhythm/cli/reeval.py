"""``rhythm reeval``: replay stored episodes, regrade them, flag what does not replay."""

from __future__ import annotations

from typing import Annotated, Optional

import typer

from rhythm.cli.options import ConfigOpt, QuietOpt, SetOpt, overrides


def reeval_command(
    jsonl: Annotated[Optional[str], typer.Option("--jsonl", help="Episodes JSONL, or - for stdin.")] = None,
    output: Annotated[Optional[str], typer.Option("--output", "-o", help="Write the summary JSON here.")] = None,
    strict: Annotated[bool, typer.Option("--strict", help="Exit 1 if any record does not replay.")] = False,
    quiet: QuietOpt = False,
    config: ConfigOpt = None,
    set_: SetOpt = None,
) -> None:
    """Replay each record's actions, recompute v3 and v2, and compare with random and heuristic.

    \b
    Examples:
      rhythm reeval      # data/teacher_30ep.jsonl
      rhythm generate --seeds 0-9 -o - | rhythm reeval --jsonl - --strict
    """
    from pathlib import Path

    import orjson

    from rhythm.cli.report import print_reeval_table
    from rhythm.cli.ui import err_console, progress_bars
    from rhythm.config import load_config
    from rhythm.eval.reeval import ReevalConfig, reeval
    from rhythm.records import check_output

    cfg = load_config(ReevalConfig, config, overrides({"jsonl": jsonl, "output": output, "strict": strict or None}, set_))
    if cfg.output is not None:
        check_output(cfg.output, inputs=[cfg.jsonl])
    with progress_bars(disable=quiet) as bars:
        summary = reeval(cfg, progress_factory=bars)
    print_reeval_table(summary)
    if cfg.output:
        Path(cfg.output).parent.mkdir(parents=True, exist_ok=True)
        Path(cfg.output).write_bytes(orjson.dumps(summary, option=orjson.OPT_INDENT_2) + b"\n")
        err_console.print(f"wrote {cfg.output}")
    if cfg.strict and summary["flagged"]:
        raise typer.Exit(1)
