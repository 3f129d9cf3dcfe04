"""Options shared by several commands, declared once so the same flag has the same help everywhere."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Optional

import typer

ConfigOpt = Annotated[
    Optional[Path],
    typer.Option("--config", "-c", help="YAML config (a path, or a shipped config: configs/sft-tiny.yaml or sft-tiny); its keys are the stage config's fields. CLI options win."),
]
SetOpt = Annotated[
    Optional[list[str]],
    typer.Option("--set", help="Override any config key: --set key=value (repeatable; dotted keys for nested)."),
]
SeedsOpt = Annotated[Optional[str], typer.Option("--seeds", help="Seeds: 0-29, 0,5,9 or 10000-10049.")]
ConditionOpt = Annotated[
    Optional[str], typer.Option("--condition", help="in-dist | ood | discrete (eval also takes all).")
]
ResumeOpt = Annotated[bool, typer.Option("--resume", help="Skip episodes already in the output; repair a torn last line.")]
QuietOpt = Annotated[bool, typer.Option("--quiet", "-q", help="No progress bars.")]


def help_config_opt(command: str, target: str) -> Any:
    """``--help-config`` for a command whose config is ``target`` (``module:Class``): print every field with
    its type, default and help (:mod:`rhythm.cli.config_help`), then exit."""

    def show(value: bool) -> None:
        if value:
            import importlib

            from rhythm.cli.config_help import describe_config

            module, _, name = target.partition(":")
            print(describe_config(getattr(importlib.import_module(module), name), command))
            raise typer.Exit()

    return Annotated[bool, typer.Option("--help-config", callback=show, is_eager=True, expose_value=False,
                                        help="List every config field (YAML key / --set key) with its type, default and help, and exit.")]


def overrides(options: dict[str, object], sets: list[str] | None) -> dict[str, object]:
    """Merge explicit options (None = not given) with ``--set key=value`` pairs; options win."""
    from rhythm.config import parse_overrides

    merged: dict[str, object] = dict(parse_overrides(sets or []))
    merged.update({k: v for k, v in options.items() if v is not None})
    return merged
CheckpointResumeOpt = Annotated[bool, typer.Option("--resume", help="Continue from the newest checkpoint in the output dir.")]
FlavorOpt = Annotated[Optional[str], typer.Option("--flavor", help="Run on Hugging Face Jobs on this hardware, e.g. a10g-large.")]
DryRunOpt = Annotated[bool, typer.Option("--dry-run", help="With --flavor: print the job spec (token redacted); nothing is written to the Hub.")]
WaitLockOpt = Annotated[
    bool,
    typer.Option("--wait-lock", help="If another run is writing the same output, wait for it instead of stopping (exit 2)."),
]
HubModelIdOpt = Annotated[
    Optional[str],
    typer.Option("--hub-model-id", help="Model repo for the result, user/name (default with --flavor / --push-to-hub: YOU/rhythm-STAGE from whoami)."),
]
DataRepoOpt = Annotated[
    Optional[str],
    typer.Option("--data-repo", help="With --flavor: dataset repo the job reads its data from; local files are uploaded there (default YOU/rhythm-teacher)."),
]
PushToHubOpt = Annotated[bool, typer.Option("--push-to-hub", help="Upload the trained result to --hub-model-id at the end.")]
