"""``rhythm sft``: distil teacher episodes into a student with TRL + PEFT LoRA, here or on Hugging Face Jobs."""

from __future__ import annotations

from typing import Annotated, Optional

import typer

from rhythm.cli.options import CheckpointResumeOpt, ConfigOpt, DryRunOpt, FlavorOpt, QuietOpt, SetOpt, overrides


def sft_command(
    data: Annotated[Optional[str], typer.Option("--data", help="Teacher episodes JSONL (several: comma-separated; - for stdin).")] = None,
    model: Annotated[Optional[str], typer.Option("--model", help="Student: Hub id, local path or rhythm-tiny.")] = None,
    output_dir: Annotated[Optional[str], typer.Option("--output-dir", "-o", help="Adapter, checkpoints, training_log.jsonl, config.")] = None,
    max_steps: Annotated[Optional[int], typer.Option("--max-steps", help="Optimizer steps (-1: from num_train_epochs).")] = None,
    resume: CheckpointResumeOpt = False,
    flavor: FlavorOpt = None,
    dry_run: DryRunOpt = False,
    config: ConfigOpt = None,
    set_: SetOpt = None,
    quiet: QuietOpt = False,
) -> None:
    """Supervised fine-tuning on teacher episodes (assistant-only loss, validation by episode)."""
    import sys

    import orjson

    from rhythm.cli.ui import err_console
    from rhythm.config import load_config
    from rhythm.errors import RhythmError
    from rhythm.train.sft import SFTRunConfig, data_paths, run_sft, validate

    given = {"data": data, "model_name_or_path": model, "output_dir": output_dir, "max_steps": max_steps,
             "flavor": flavor, "resume_from_checkpoint": "latest" if resume else None}
    cfg = load_config(SFTRunConfig, config, overrides(given, set_))
    if dry_run and not cfg.flavor:
        raise RhythmError("--dry-run describes a Hugging Face Jobs submission; add --flavor (e.g. a10g-large)")
    validate(cfg)
    if cfg.flavor:
        from rhythm.cli.jobs import submit_stage

        submit_stage("sft", cfg, data_paths(cfg), dry_run=dry_run, lands="model")
        return
    summary = run_sft(cfg, quiet=quiet, log=err_console.print)
    err_console.print(
        f"sft: {summary['global_step']} steps, train loss {summary['train_loss_first']:.3f} -> {summary['train_loss_last']:.3f}"
        + (f", validation loss {summary['eval_loss_first']:.3f} -> {summary['eval_loss_last']:.3f}" if summary["eval_loss_last"] is not None else "")
        + f", {summary['seconds']:.0f} s -> {summary['output_dir']}"
    )
    sys.stdout.write(orjson.dumps({k: v for k, v in summary.items() if k != "data"}).decode() + "\n")
