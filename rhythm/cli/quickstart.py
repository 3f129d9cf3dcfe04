"""``rhythm quickstart``: the whole recipe offline on a CPU, in one run directory."""

from __future__ import annotations

from typing import Annotated, Optional

import typer

from rhythm.cli.options import ConfigOpt, QuietOpt, SetOpt, WaitLockOpt, help_config_opt, overrides


def quickstart_command(
    out: Annotated[Optional[str], typer.Option("--out", "-o", help="Run directory (default runs/quickstart).")] = None,
    config: ConfigOpt = None,
    set_: SetOpt = None,
    wait_lock: WaitLockOpt = False,
    quiet: QuietOpt = False,
    _help_config: help_config_opt("rhythm quickstart", "rhythm.quickstart:QuickstartConfig") = False,
) -> None:
    """Teacher data, reeval, tiny SFT, short GRPO, eval beside the baselines, plots, summary; a rerun reuses unchanged stages.

    \b
    Examples:
      rhythm quickstart      # -> runs/quickstart, 13-26 min on 2 cores (by CPU)
      rhythm quickstart --config configs/quickstart-few.yaml   # a tenth of the teacher weeks, GRPO then DAgger, 26-45 min
      rhythm quickstart --config configs/quickstart-few-short.yaml   # cut to ~26 min where that one takes 37
    """
    import os

    from rhythm.cli.ui import err_console
    from rhythm.config import load_config
    from rhythm.quickstart import QuickstartConfig, quickstart

    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    cfg = load_config(QuickstartConfig, config, overrides({"out": out}, set_))
    summary = quickstart(cfg, say=lambda m: err_console.print(m, markup=False, highlight=False), quiet=quiet,
                         wait_lock=wait_lock)
    from pathlib import Path

    print((Path(cfg.out) / "summary.md").read_text())
    err_console.print(f"quickstart: {summary['seconds']:.0f} s of stage time -> {cfg.out}", markup=False)
