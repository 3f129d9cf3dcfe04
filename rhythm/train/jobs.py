"""Hugging Face Jobs: run a training stage (``sft`` or ``grpo``) on Hub hardware with the same code.

    rhythm sft --flavor a10g-large [--dry-run]     # model -> YOU/rhythm-sft, data -> YOU/rhythm-teacher
    rhythm grpo --flavor a10g-large [--dry-run]    # adapter <- YOU/rhythm-sft, model -> YOU/rhythm-grpo
    rhythm sft --config configs/sft.yaml --flavor a10g-large --hub-model-id me/student --data-repo me/data

Repos not given default from who the token says you are (:mod:`rhythm.train.repos`); the command
prints which repos it used.

What happens, in order (``--dry-run`` prints the plan and the job spec, token redacted, and stops
before the first request):

1. Local data files named in ``data`` are uploaded to ``data_repo`` (a dataset repo, with its card).
2. The *run repo* (``hub_model_id``, where the trained model will land) gets one plain commit under
   ``rhythm_job/``: ``run.py`` (a uv script with a PEP 723 header pinning the exact package versions
   installed here), ``config.yaml`` (the effective stage config) and ``src/rhythm/`` (this package's
   source, so the job runs the code you ran locally, not a release).
3. The job is submitted with ``huggingface_hub``: command ``uv run <script>``, the flavor, a timeout,
   ``HF_TOKEN`` as a *secret* (never in the environment, the command or any output), and the data repo,
   files and output repo as environment variables. A public run repo is fetched by URL
   (``run_uv_job(<resolve URL pinned to the commit>)``); a private one cannot be fetched anonymously,
   so it is mounted read-only into the container as a Jobs volume and run from there (``run_job``).
4. In the job, ``run.py`` downloads the data, runs ``python -m rhythm.train.<stage>`` (through
   ``accelerate launch`` when the flavor has several GPUs) with ``push_to_hub=true``, so the adapter,
   tokenizer, config, training log and model card are pushed to the run repo at the end.

Follow it with ``hf jobs logs <id>`` / ``hf jobs inspect <id>``.
"""

from __future__ import annotations

import dataclasses
import os
import re
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

import orjson
import yaml

import rhythm
from rhythm.agents.tiny import TINY_MODELS
from rhythm.config import config_dict
from rhythm.errors import RhythmError
from rhythm.model.load import means_local
from rhythm.train.hub import (
    JOB_DIR,
    check_repo_id,
    hub_error_line,
    hub_errors,
    read_episode_files,
    require_token,
    upload,
    upload_pairs,
)

MOUNT_PATH = "/rhythm-run"
UV_IMAGE = "ghcr.io/astral-sh/uv:python3.12-bookworm"
"""The image ``run_uv_job`` uses by default (uv + Python 3.12)."""
JOB_PACKAGES = (
    "torch", "transformers", "tokenizers", "trl", "peft", "datasets", "accelerate", "huggingface_hub",
    "numpy", "scipy", "gymnasium", "orjson", "PyYAML", "pydantic",
)
"""What ``rhythm.train`` imports in a job; pinned to the versions installed here."""
REDACTED = "***"

RUN_SCRIPT = '''\
# /// script
# requires-python = ">=3.11"
# dependencies = [
{deps}
# ]
# ///
"""rhythm {stage} on Hugging Face Jobs (written by `rhythm {stage} --flavor`).

Runs `python -m rhythm.train.{stage}` from the rhythm source committed beside this script, on the data
files of a Hub dataset repo, and pushes the result to the output model repo. Everything it needs comes
from the environment: RHYTHM_JOB_REPO / RHYTHM_JOB_REVISION (this folder's repo and commit) or
RHYTHM_JOB_DIR (the folder, mounted), RHYTHM_DATA_REPO / RHYTHM_DATA_FILES / RHYTHM_DATA_REVISION,
RHYTHM_OUTPUT_REPO, and the HF_TOKEN secret.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

STAGE = "{stage}"


def job_folder() -> Path:
    mounted = os.environ.get("RHYTHM_JOB_DIR")
    if mounted and Path(mounted).is_dir():
        return Path(mounted)
    from huggingface_hub import hf_hub_download

    repo, revision = os.environ["RHYTHM_JOB_REPO"], os.environ["RHYTHM_JOB_REVISION"]
    manifest = hf_hub_download(repo, "{job_dir}/manifest.json", revision=revision)
    for name in json.loads(Path(manifest).read_text())["files"]:
        hf_hub_download(repo, name, revision=revision)
    return Path(manifest).parent


def data_files() -> list[str]:
    from huggingface_hub import hf_hub_download

    names = [n for n in os.environ.get("RHYTHM_DATA_FILES", "").split(",") if n]
    if not names:  # a GRPO run whose prompts are its rollout seeds alone
        return []
    repo, revision = os.environ["RHYTHM_DATA_REPO"], os.environ.get("RHYTHM_DATA_REVISION") or None
    return [hf_hub_download(repo, n, repo_type="dataset", revision=revision) for n in names]


def main() -> int:
    folder = job_folder()
    output_dir = os.environ.get("RHYTHM_OUTPUT_DIR", "/tmp/rhythm-output")
    overrides = [
        "--set", "data=" + ",".join(data_files()),
        "--set", "output_dir=" + output_dir,
        "--set", "push_to_hub=true",
        "--set", "hub_model_id=" + os.environ["RHYTHM_OUTPUT_REPO"],
    ]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(folder / "src"), os.environ.get("PYTHONPATH", "")]))
    module = ["-m", "rhythm.train." + STAGE, "--config", str(folder / "config.yaml"), *overrides]
    gpus = int(os.environ.get("RHYTHM_NUM_PROCESSES") or 0)
    if not gpus:
        import torch

        gpus = torch.cuda.device_count()
    if gpus > 1:
        command = [sys.executable, "-m", "accelerate.commands.launch", "--num_processes", str(gpus), *module]
    else:
        command = [sys.executable, *module]
    print("rhythm job:", " ".join(command), file=sys.stderr, flush=True)
    return subprocess.call(command, env=env)


if __name__ == "__main__":
    sys.exit(main())
'''


def pinned_dependencies(packages: tuple[str, ...] = JOB_PACKAGES) -> list[str]:
    """``name==version`` of each package as installed here (local tags such as ``+cpu`` dropped)."""
    out = []
    for name in packages:
        try:
            version = metadata.version(name)
        except metadata.PackageNotFoundError:
            raise RhythmError(f"{name} is not installed; the job pins the versions installed here") from None
        out.append(f"{name}=={version.split('+')[0]}")
    return out


def run_script(stage: str, deps: list[str] | None = None) -> str:
    """The uv script a job runs (PEP 723 header with pinned dependencies)."""
    deps = pinned_dependencies() if deps is None else deps
    return RUN_SCRIPT.format(stage=stage, job_dir=JOB_DIR, deps="\n".join(f'#   "{d}",' for d in deps))


def package_sources() -> dict[str, bytes]:
    """``rhythm_job/src/rhythm/**.py``: this package's source, as it is installed here."""
    root = Path(rhythm.__file__).parent
    return {
        f"{JOB_DIR}/src/rhythm/{path.relative_to(root).as_posix()}": path.read_bytes()
        for path in sorted(root.rglob("*.py"))
        if "__pycache__" not in path.parts
    }


@dataclass(frozen=True)
class JobsConfig:
    """Hugging Face Jobs: where ``rhythm sft|grpo --flavor`` runs the stage (read only when ``flavor`` is set)."""

    flavor: str | None = None
    """Run on Hugging Face Jobs on this hardware (a10g-large, l4x1, a100-large, h100 ...); None = run here."""
    timeout: str = "3h"
    """Maximum wall time of the job (s/m/h/d suffix)."""
    data_repo: str | None = None
    """Dataset repo holding the data files (local files named in data are uploaded there first); defaults to
    YOU/rhythm-teacher (whoami)."""
    namespace: str | None = None
    """Namespace to run the job in (default: hub_model_id's owner)."""


@dataclass
class JobPlan:
    """Everything a submission does, computed before any request (``--dry-run`` prints it)."""

    stage: str
    flavor: str
    namespace: str
    run_repo: str
    private: bool
    data_repo: str
    data_files: list[str]
    """Names of the data files inside data_repo."""
    uploads: list[str]
    """Local data files to upload to data_repo first."""
    timeout: str
    image: str = UV_IMAGE
    files: dict[str, bytes] = field(default_factory=dict)
    """path in the run repo -> content (the script, the config, the source)"""
    env: dict[str, str] = field(default_factory=dict)
    labels: dict[str, str] = field(default_factory=dict)
    reads: list[str] = field(default_factory=list)
    """Model repos the job starts from that are the user's own work (GRPO's SFT adapter): checked to exist."""

    @property
    def script_path(self) -> str:
        return f"{JOB_DIR}/run.py"

    def command(self, endpoint: str, revision: str) -> list[str]:
        if self.private:
            return ["uv", "run", f"{MOUNT_PATH}/{self.script_path}"]
        return ["uv", "run", f"{endpoint.rstrip('/')}/{self.run_repo}/resolve/{revision}/{self.script_path}"]

    def volumes(self, revision: str) -> list[dict[str, Any]]:
        if not self.private:
            return []
        return [{"type": "model", "source": self.run_repo, "mountPath": MOUNT_PATH, "revision": revision, "readOnly": True}]

    def environment(self, revision: str, data_revision: str | None) -> dict[str, str]:
        env = dict(self.env, RHYTHM_JOB_REVISION=revision)
        if data_revision:
            env["RHYTHM_DATA_REVISION"] = data_revision
        if self.private:
            env["RHYTHM_JOB_DIR"] = f"{MOUNT_PATH}/{JOB_DIR}"
        return env

    def spec(self, endpoint: str, revision: str, data_revision: str | None, token: str | None) -> dict[str, Any]:
        """The job as it is sent (secrets included: redact before showing)."""
        return {
            "namespace": self.namespace,
            "flavor": self.flavor,
            "dockerImage": self.image,
            "command": self.command(endpoint, revision),
            "environment": self.environment(revision, data_revision),
            "secrets": {"HF_TOKEN": token},
            "timeout": self.timeout,
            "labels": self.labels,
            "volumes": self.volumes(revision),
        }


def plan_job(
    stage: str,
    config: Any,
    *,
    run_repo: str | None,
    data: list[str],
    data_repo: str | None,
    flavor: str,
    timeout: str,
    namespace: str | None = None,
    private: bool = True,
    config_overrides: dict[str, Any] | None = None,
    packages: tuple[str, ...] = JOB_PACKAGES,
) -> JobPlan:
    """Check the request and build the plan: files for the run repo, environment, data to upload. ``config`` is
    one its stage's ``validate`` passed (which asks for data, or for GRPO rollout seeds in its place).

    ``packages`` are pinned in the job script to the versions installed here (``rhythm grpo`` adds
    ``vllm`` when ``use_vllm`` is on, so it must be installed here too).
    """
    from huggingface_hub import JobHardware

    run_repo = check_repo_id(run_repo, "hub_model_id (the run's model repo)")
    flavors = [h.value for h in JobHardware]
    if flavor not in flavors:
        raise RhythmError(f"unknown flavor {flavor!r}; expected one of {', '.join(flavors)}")
    cfg = dataclasses.replace(config, **(config_overrides or {})) if config_overrides else config
    check_runs_elsewhere(cfg)
    timeout_seconds(timeout)
    uploads, names = [], []
    for item in data:
        if item == "-":
            raise RhythmError("a job cannot read stdin; pass a data file (it is uploaded to jobs.data_repo)")
        path = Path(item)
        if path.is_file():
            uploads.append(str(path))
            names.append(path.name)
        elif data_repo and repo_path(item):
            names.append(item)  # a file in data_repo: submit_job checks that it is there before anything is sent
        else:
            raise RhythmError(f"file not found: {item}" + ("" if data_repo else
                              " (or set jobs.data_repo to read it from a Hub dataset repo)"))
    if names and not data_repo:
        raise RhythmError("a job reads its data from the Hub: set jobs.data_repo=user/name (local files are uploaded there)")
    upload_pairs(uploads)  # two local files of one name would land on one path in the repo: refused here, dry run too
    if data_repo:
        check_repo_id(data_repo, "data_repo")

    job_config = config_dict(cfg)
    job_config.update({"data": ",".join(names), "push_to_hub": True, "hub_model_id": run_repo, "resume_from_checkpoint": None})
    job_config["jobs"] = {**job_config["jobs"], "flavor": None}  # the job runs where it is
    files = {
        f"{JOB_DIR}/run.py": run_script(stage, pinned_dependencies(packages)).encode(),
        f"{JOB_DIR}/config.yaml": yaml.safe_dump(job_config, sort_keys=False).encode(),
        **package_sources(),
    }
    files[f"{JOB_DIR}/manifest.json"] = orjson.dumps({"stage": stage, "files": sorted(files)}, option=orjson.OPT_INDENT_2)
    env = {
        "RHYTHM_STAGE": stage,
        "RHYTHM_JOB_REPO": run_repo,
        "RHYTHM_DATA_REPO": data_repo or "",
        "RHYTHM_DATA_FILES": ",".join(names),
        "RHYTHM_OUTPUT_REPO": run_repo,
        "PYTHONUNBUFFERED": "1",
    }
    if os.environ.get("HF_ENDPOINT"):
        env["HF_ENDPOINT"] = os.environ["HF_ENDPOINT"]  # a private Hub deployment: the job talks to the same one
    return JobPlan(
        stage=stage, flavor=flavor, namespace=namespace or run_repo.split("/")[0], run_repo=run_repo,
        private=private, data_repo=data_repo or "", data_files=names, uploads=uploads, timeout=timeout,
        files=files, env=env, labels={"rhythm-stage": stage},
        reads=[a for a in [getattr(cfg, "adapter", None)] if a and not Path(a).expanduser().exists()],
    )


def repo_path(item: str) -> bool:
    """Whether a data path that is not a file here can name a file in the data repo: a relative path inside it
    (``teacher.jsonl``, ``data/teacher.jsonl``), not an absolute one, a home one or one that climbs out."""
    path = Path(item)
    return not (path.is_absolute() or item.startswith("~") or ".." in path.parts)


def timeout_seconds(timeout: str | int | float) -> int:
    """``jobs.timeout`` in seconds, as the Jobs API reads it (a number, or one with an s / m / h / d suffix); any
    other value is one line here, before anything is uploaded."""
    text = str(timeout).strip()
    factor = {"s": 1, "m": 60, "h": 3600, "d": 86400}.get(text[-1:], None)
    try:
        seconds = int(float(text[:-1]) * factor) if factor else int(text)
    except ValueError:
        seconds = 0
    if seconds <= 0:
        raise RhythmError(f"jobs.timeout must be a positive number of seconds, or one with an s, m, h or d suffix "
                          f"(3h, 90m), got {timeout!r}")
    return seconds


def flavor_processes(flavor: str) -> int:
    """The processes a job of ``flavor`` launches: one per GPU, which the Jobs flavor names end with (``a10g-largex2``,
    ``h100x8``); one for any other flavor."""
    found = re.search(r"x(\d+)$", flavor)
    return int(found.group(1)) if found else 1


def check_runs_elsewhere(cfg: Any) -> None:
    """Refuse what only this machine has: a job runs on another one, where a local base model does not exist
    (it would fail there, on paid hardware) and a ``--resume`` has no checkpoints to resume from (it would be
    dropped in silence). A GRPO adapter here is refused by that stage's own ``validate``."""
    model = getattr(cfg, "model_name_or_path", None)
    if model and model not in TINY_MODELS and (means_local(model) or Path(model).expanduser().exists()):
        raise RhythmError(f"a job cannot read the local model {model}; push it to the Hub (rhythm upload --files {model} "
                          "--repo me/base --repo-type model) and pass --model me/base")
    if resumes(cfg):
        raise RhythmError("--resume continues from the checkpoints of a local output_dir, which a job cannot read; "
                          "drop --resume (a job starts a fresh run) or drop --flavor to resume here")


def resumes(cfg: Any) -> bool:
    """Whether ``resume_from_checkpoint`` asks to resume (latest, true or a path)."""
    return getattr(cfg, "resume_from_checkpoint", None) not in (None, False, "", "none", "None", "false")


def check_repo_files(api: Any, plan: JobPlan) -> None:
    """The data files the job reads from ``data_repo`` without uploading them are there, and the adapter it refines
    (a path mistyped here, or an SFT run not pushed yet, would otherwise start a paid job that fails reading it)."""
    for repo in plan.reads:
        try:
            there = api.repo_exists(repo, repo_type="model")
        except hub_errors() as err:
            raise RhythmError(f"cannot check the adapter {repo} on the Hub: {hub_error_line(err)}") from None
        if not there:
            raise RhythmError(f"adapter {repo} not found on the Hub (or not readable with this token): push the SFT run "
                              "there first (rhythm sft --flavor ..., or --push-to-hub), or pass --adapter user/name")
    uploaded = {Path(p).name for p in plan.uploads}
    for name in plan.data_files:
        if name in uploaded:
            continue
        try:
            there = api.file_exists(plan.data_repo, name, repo_type="dataset")
        except hub_errors() as err:
            raise RhythmError(f"cannot check {name} in {plan.data_repo}: {hub_error_line(err)}") from None
        if not there:
            raise RhythmError(f"file not found: {name} (neither here nor in the dataset repo {plan.data_repo})")


@dataclass
class Submission:
    job_id: str | None
    url: str | None
    run_repo: str
    revision: str | None
    spec: dict[str, Any]
    """The job spec with secrets redacted."""
    dry_run: bool = False


def redact(spec: dict[str, Any]) -> dict[str, Any]:
    out = dict(spec)
    out["secrets"] = {k: (REDACTED if v else "<not set>") for k, v in spec.get("secrets", {}).items()}
    return out


def submit_job(plan: JobPlan, *, dry_run: bool = False, say=None) -> Submission:
    """Upload data, commit the job folder to the run repo, submit the job (or, dry, only describe it)."""
    from huggingface_hub import HfApi, constants, get_token

    say = say or (lambda msg: None)
    endpoint = constants.ENDPOINT
    if dry_run:  # what the submission would refuse, refused here too: no token, data that does not upload
        require_token()
        read_episode_files([Path(p) for p in plan.uploads])
        check_repo_files(HfApi(token=get_token()), plan)  # read only (no call when every file is uploaded)
        spec = plan.spec(endpoint, "<commit of rhythm_job/>", "<commit of the data upload>" if plan.uploads else None,
                         get_token())
        spec["would_upload"] = {"data_repo": plan.data_repo, "files": plan.uploads,
                                "private": "if created (an existing repo keeps its visibility)"}
        spec["would_commit"] = {"repo": plan.run_repo, "private": plan.private, "files": len(plan.files),
                                "script": plan.script_path}
        return Submission(None, None, plan.run_repo, None, redact(spec), dry_run=True)

    from huggingface_hub import CommitOperationAdd, Volume

    token = require_token()
    api = HfApi(token=token)
    check_repo_files(api, plan)
    data_revision = None
    if plan.uploads:
        # private whatever hub_private says: a public model repo (run_uv_job's URL) need not publish the teacher weeks
        result = upload(plan.uploads, plan.data_repo, repo_type="dataset", private=True)
        data_revision = result.commit_oid
        say(f"uploaded {', '.join(plan.data_files)} to {result.repo_url}")
    try:
        api.create_repo(plan.run_repo, repo_type="model", private=plan.private, exist_ok=True)
        commit = api.create_commit(
            plan.run_repo,
            [CommitOperationAdd(path_in_repo=p, path_or_fileobj=c) for p, c in sorted(plan.files.items())],
            commit_message=f"rhythm {plan.stage}: job script, config and source",
        )
        revision = str(commit.oid)
        say(f"committed {plan.script_path} and the job source to {plan.run_repo}@{revision[:8]}")
        spec = plan.spec(endpoint, revision, data_revision, token)
        common = dict(env=spec["environment"], secrets=spec["secrets"], flavor=plan.flavor, timeout=plan.timeout,
                      labels=plan.labels, namespace=plan.namespace)
        if plan.private:
            job = api.run_job(image=plan.image, command=spec["command"],
                              volumes=[Volume(**v) for v in spec["volumes"]], **common)
        else:
            job = api.run_uv_job(spec["command"][-1], image=plan.image, **common)
    except hub_errors() as err:
        raise RhythmError(f"submitting the {plan.stage} job failed: {hub_error_line(err)}") from None
    return Submission(job.id, job.url, plan.run_repo, revision, redact(spec))
