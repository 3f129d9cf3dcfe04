"""The flow ``rhythm sft`` and ``rhythm grpo`` share, so that each command states only what differs: the config
(defaults, file, options, ``--set``), the Hub repos (defaults from whoami: :mod:`rhythm.train.repos`), the
stage's checks, then a Hugging Face Jobs submission (``--flavor``) or a run here under the output folder's lock."""

from __future__ import annotations

import sys
from collections.abc import Callable, Collection, Sequence
from pathlib import Path
from typing import Any, TypeVar

C = TypeVar("C")


def run_stage(stage: str, cls: type, validate: Callable[[Any], None], run: Callable[..., dict[str, Any]],
              given: dict[str, object], *, resume: bool, flavor: str | None, dry_run: bool, hub_model_id: str | None,
              data_repo: str | None, push_to_hub: bool, wait_lock: bool, config: Path | None, sets: list[str] | None,
              quiet: bool, lands: str, line: Callable[[dict[str, Any]], str], omit: Collection[str] = (),
              packages: Callable[[Any], Sequence[str]] | None = None,
              check_given: Callable[[Any, Collection[str]], None] | None = None) -> None:
    """Load ``cls`` from the config, the stage's own options (``given``) and the shared ones, check it, and
    submit it to Jobs (the ``lands`` = what the job pushes: model, adapter; ``packages(cfg)``: what it installs)
    or ``run`` it here: ``line(summary)`` goes to stderr, the summary less ``omit`` to stdout as one JSON line.
    ``check_given(cfg, keys)``: the stage's check of the settings given on the command line."""
    import orjson

    from rhythm.cli import options as opt
    from rhythm.cli.ui import err_console
    from rhythm.config import load_config
    from rhythm.locking import output_lock
    from rhythm.train.run_folder import data_paths

    given = {**given, "jobs.flavor": flavor, "resume_from_checkpoint": "latest" if resume else None,
             "hub_model_id": hub_model_id, "jobs.data_repo": data_repo, "push_to_hub": push_to_hub or None}
    merged = opt.overrides(given, sets)
    cfg = load_config(cls, config, merged)
    if check_given is not None:
        check_given(cfg, list(merged))
    cfg, repos = resolve_hub_repos(stage, cfg, dry_run=dry_run)
    validate(cfg)
    if cfg.jobs.flavor:
        submit_stage(stage, cfg, data_paths(cfg), dry_run=dry_run, repos=repos, lands=lands,
                     packages=packages(cfg) if packages else None)
        return
    if repos:  # push_to_hub
        err_console.print(repos, markup=False, highlight=False, soft_wrap=True)
    with output_lock(cfg.output_dir, wait=wait_lock, say=err_console.print):  # one run per output folder
        summary = run(cfg, quiet=quiet, log=err_console.print)
    err_console.print(line(summary))
    sys.stdout.write(orjson.dumps({k: v for k, v in summary.items() if k not in omit}).decode() + "\n")


def resolve_hub_repos(stage: str, cfg: C, *, dry_run: bool) -> tuple[C, str | None]:
    """Check ``--dry-run`` goes with ``--flavor`` and fill the repos not given from whoami; returns the
    config and the line saying which repos the run uses (None for a run that pushes nowhere)."""
    from rhythm.errors import RhythmError
    from rhythm.train.repos import fill_hub_repos, repos_line

    if dry_run and not cfg.jobs.flavor:  # type: ignore[attr-defined]
        raise RhythmError("--dry-run describes a Hugging Face Jobs submission; add --flavor (e.g. a10g-large)")
    cfg, choices = fill_hub_repos(stage, cfg)
    return cfg, (repos_line(choices) if choices else None)


def submit_stage(stage: str, cfg: Any, data: list[str], *, dry_run: bool, lands: str,
                 packages: Sequence[str] | None = None, repos: str | None = None) -> None:
    """Plan and submit ``stage`` with ``cfg``'s Jobs fields; print the spec (dry run) or the job id/URL.

    Data (the job's id and URL, or the redacted spec) goes to stdout, messages (``repos``, the line of
    :func:`resolve_hub_repos`, once the plan is sound) to stderr.
    """
    import orjson

    from rhythm.cli.ui import err_console
    from rhythm.train.jobs import JOB_PACKAGES, plan_job, submit_job

    jobs = cfg.jobs
    plan = plan_job(stage, cfg, run_repo=cfg.hub_model_id, data=data, data_repo=jobs.data_repo, flavor=jobs.flavor,
                    timeout=jobs.timeout, namespace=jobs.namespace, private=cfg.hub_private,
                    packages=tuple(packages) if packages is not None else JOB_PACKAGES)
    if repos:
        err_console.print(repos, markup=False, highlight=False, soft_wrap=True)
    sub = submit_job(plan, dry_run=dry_run, say=err_console.print)
    if sub.dry_run:
        sys.stdout.write(orjson.dumps(sub.spec, option=orjson.OPT_INDENT_2).decode() + "\n")
        err_console.print("dry run: nothing was written to the Hub")
        return
    sys.stdout.write(f"{sub.job_id}\t{sub.url}\n")
    err_console.print(f"submitted job {sub.job_id} on {jobs.flavor}: {sub.url}; the {lands} lands in {sub.run_repo}")
