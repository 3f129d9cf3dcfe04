"""Submitting a training stage to Hugging Face Jobs from the CLI (``rhythm sft|grpo --flavor``), and
naming the Hub repos a submission or push uses (defaults from whoami: :mod:`rhythm.train.repos`)."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any, TypeVar

C = TypeVar("C")


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
        err_console.print("dry run: nothing was sent")
        return
    sys.stdout.write(f"{sub.job_id}\t{sub.url}\n")
    err_console.print(f"submitted job {sub.job_id} on {jobs.flavor}: {sub.url}; the {lands} lands in {sub.run_repo}")
