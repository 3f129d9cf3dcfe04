"""``rhythm sft``: distil teacher episodes into a student with TRL + PEFT LoRA, here or on Hugging Face Jobs."""

from __future__ import annotations

from typing import Annotated, Optional

import typer

from rhythm.cli import options as opt


def sft_command(
    data: Annotated[Optional[str], typer.Option("--data", help="Teacher episodes JSONL (several: comma-separated; - for stdin).")] = None,
    model: Annotated[Optional[str], typer.Option("--model", help="Student: Hub id, local path or rhythm-tiny.")] = None,
    output_dir: Annotated[Optional[str], typer.Option("--output-dir", "-o", help="Adapter, checkpoints, training_log.jsonl, config.")] = None,
    max_steps: Annotated[Optional[int], typer.Option("--max-steps", help="Optimizer steps (-1: from num_train_epochs).")] = None,
    resume: opt.CheckpointResumeOpt = False,
    flavor: opt.FlavorOpt = None,
    dry_run: opt.DryRunOpt = False,
    hub_model_id: opt.HubModelIdOpt = None,
    data_repo: opt.DataRepoOpt = None,
    push_to_hub: opt.PushToHubOpt = False,
    wait_lock: opt.WaitLockOpt = False,
    config: opt.ConfigOpt = None,
    set_: opt.SetOpt = None,
    quiet: opt.QuietOpt = False,
    _help_config: opt.help_config_opt("rhythm sft", "rhythm.train.sft:SFTRunConfig") = False,
) -> None:
    """Supervised fine-tuning on teacher episodes (assistant-only loss, validation by episode).

    \b
    Examples:
      rhythm sft --config configs/sft-tiny.yaml      # offline tiny student, CPU -> runs/sft-tiny
      rhythm sft --flavor a10g-large      # Hugging Face Jobs -> YOU/rhythm-sft
    """
    from rhythm.cli.stage import run_stage
    from rhythm.train.sft import SFTRunConfig, run_sft, validate

    given = {"data": data, "model_name_or_path": model, "output_dir": output_dir, "max_steps": max_steps}
    run_stage("sft", SFTRunConfig, validate, run_sft, given, resume=resume, flavor=flavor, dry_run=dry_run,
              hub_model_id=hub_model_id, data_repo=data_repo, push_to_hub=push_to_hub, wait_lock=wait_lock,
              config=config, sets=set_, quiet=quiet, lands="model", line=_line, omit=("data",))


def _line(summary: dict) -> str:
    eval_loss = summary["eval_loss_last"]
    first, last = summary.get("train_loss_steps") or (None, None)
    if first is None:
        trained = "train loss not logged"
    elif first == last:  # one entry: a first -> last of equal numbers would read as a loss that never moved
        trained = f"train loss {summary['train_loss_last']:.3f} (logged at step {last} only: see logging_steps)"
    else:
        trained = f"train loss {summary['train_loss_first']:.3f} -> {summary['train_loss_last']:.3f}"
    evaluated = summary.get("eval_loss_steps")  # absent in an older summary
    if eval_loss is None:
        validated = ""
    elif evaluated and evaluated[0] == evaluated[1]:  # one validation: no "X -> X"
        validated = f", validation loss {eval_loss:.3f} (at step {evaluated[1]} only)"
    else:
        validated = f", validation loss {summary['eval_loss_first']:.3f} -> {eval_loss:.3f}"
    return (f"sft: {summary['global_step']} steps, {trained}{validated}"
            + f", {summary['seconds']:.0f} s -> {summary['output_dir']}")
