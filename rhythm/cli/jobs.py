"""Submitting a training stage to Hugging Face Jobs from the CLI (``rhythm sft|grpo --flavor``)."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any


def submit_stage(stage: str, cfg: Any, data: list[str], *, dry_run: bool, lands: str,
                 packages: Sequence[str] | None = None) -> None:
    """Plan and submit ``stage`` with ``cfg``'s Jobs fields; print the spec (dry run) or the job id/URL.

    Data (the job's id and URL, or the redacted spec) goes to stdout, messages to stderr.
    """
    import orjson

    from rhythm.cli.ui import err_console
    from rhythm.train.jobs import JOB_PACKAGES, plan_job, submit_job

    plan = plan_job(stage, cfg, run_repo=cfg.hub_model_id, data=data, data_repo=cfg.data_repo, flavor=cfg.flavor,
                    timeout=cfg.timeout, namespace=cfg.namespace, private=cfg.hub_private,
                    packages=tuple(packages) if packages is not None else JOB_PACKAGES)
    sub = submit_job(plan, dry_run=dry_run, say=err_console.print)
    if sub.dry_run:
        sys.stdout.write(orjson.dumps(sub.spec, option=orjson.OPT_INDENT_2).decode() + "\n")
        err_console.print("dry run: nothing was sent")
        return
    sys.stdout.write(f"{sub.job_id}\t{sub.url}\n")
    err_console.print(f"submitted job {sub.job_id} on {cfg.flavor}: {sub.url}; the {lands} lands in {sub.run_repo}")
