"""``rhythm grpo``: refine the SFT student with GRPO, rewarded by the benchmark, here or on Hugging Face Jobs."""

from __future__ import annotations

from typing import Annotated, Optional

import typer

from rhythm.cli import options as opt


def grpo_command(
    adapter: Annotated[Optional[str], typer.Option("--adapter", help="What rhythm sft wrote (its output dir, or a Hub repo id): a LoRA adapter, or full weights, which are refined as --model DIR.")] = None,
    data: Annotated[Optional[str], typer.Option("--data", help="Teacher episodes JSONL whose states become prompts (comma-separated; - for stdin).")] = None,
    mode: Annotated[Optional[str], typer.Option("--mode", help="step: one recorded state per prompt; branch: step's states, each reply scored by the week it leads to; episode: play whole weeks, reward = final score.")] = None,
    model: Annotated[Optional[str], typer.Option("--model", help="A full model to refine (e.g. the tiny student's SFT output dir, with --set adapter=null), or an adapter's base (default: the adapter's own).")] = None,
    output_dir: Annotated[Optional[str], typer.Option("--output-dir", "-o", help="Adapter, checkpoints, training_log.jsonl, reward_log.jsonl, config.")] = None,
    max_steps: Annotated[Optional[int], typer.Option("--max-steps", help="Optimizer steps.")] = None,
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
    _help_config: opt.help_config_opt("rhythm grpo", "rhythm.train.grpo:GRPORunConfig") = False,
) -> None:
    """GRPO from the SFT adapter with rewards from the env (format, belief, action value; or whole-week scores).

    \b
    Examples:
      rhythm grpo --config configs/grpo-tiny.yaml --data data/teacher_30ep.jsonl   # from runs/sft-tiny -> runs/grpo-tiny
      rhythm grpo --flavor a10g-large      # YOU/rhythm-sft -> YOU/rhythm-grpo on Jobs
    """
    from rhythm.cli.stage import run_stage
    from rhythm.train.grpo import GRPORunConfig, check_given_sections, run_grpo, validate

    given = {"adapter": adapter, "data": data, "mode": mode, "model_name_or_path": model, "output_dir": output_dir,
             "max_steps": max_steps}
    run_stage("grpo", GRPORunConfig, validate, run_grpo, given, resume=resume, flavor=flavor, dry_run=dry_run,
              hub_model_id=hub_model_id, data_repo=data_repo, push_to_hub=push_to_hub, wait_lock=wait_lock,
              config=config, sets=set_, quiet=quiet, lands="adapter", line=_line, packages=_job_packages,
              check_given=check_given_sections)


def _line(summary: dict) -> str:
    parts = [f"{name} {v['first']:.3f} -> {v['last']:.3f}" for name, v in summary["rewards"].items() if v["first"] is not None]
    return (f"grpo ({summary['mode']}): {summary['global_step']} steps, {summary['seconds']:.0f} s; mean reward per function "
            + ", ".join(parts) + f" -> {summary['output_dir']}")


def _job_packages(cfg) -> tuple[str, ...]:
    """What a job installs: vLLM too when step mode generates with it."""
    from rhythm.train.jobs import JOB_PACKAGES

    return JOB_PACKAGES + (("vllm",) if cfg.mode == "step" and cfg.step.use_vllm else ())
