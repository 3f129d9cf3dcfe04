"""Hub repo names a training run uses when none are given, from who the token says you are.

    rhythm sft --flavor a10g-large      # model -> YOU/rhythm-sft, data -> YOU/rhythm-teacher
    rhythm grpo --flavor a10g-large     # model -> YOU/rhythm-grpo, adapter <- YOU/rhythm-sft, data -> YOU/rhythm-teacher

A Jobs submission (``--flavor``) needs a model repo for the result (``hub_model_id``) and a dataset
repo the job reads its data from (``data_repo``); ``push_to_hub`` needs the model repo. Whatever is not
given defaults to the names in :data:`RUN_REPOS` and :data:`DATA_REPO` under the token's user
(``whoami``), and GRPO's adapter to the SFT run's repo; every default is reported, so the command can
print which repos it used. Given names are kept as they are. A local run that pushes asks whoami even
with every name given: the token must work, and be able to write, before hours of training, not after.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from rhythm.errors import RhythmError
from rhythm.train.hub import check_repo_id

RUN_REPOS = {"sft": "rhythm-sft", "grpo": "rhythm-grpo"}
"""Model repo name of each stage's result, under the user's namespace."""
DATA_REPO = "rhythm-teacher"
"""Dataset repo the teacher data of a job is uploaded to, under the user's namespace."""

C = TypeVar("C")


@dataclass(frozen=True)
class RepoChoice:
    """One repo a run uses: what it is for, its id, and whether it was derived from whoami."""

    role: str
    repo_id: str
    derived: bool

    def describe(self) -> str:
        return f"{self.role} {self.repo_id}" + (" (default from whoami)" if self.derived else "")


STAGE_REPOS = "name the repos with --hub-model-id user/name and --data-repo user/name"


def hub_account(instead: str = STAGE_REPOS) -> dict[str, Any] | None:
    """What whoami says of the Hub token (``HF_TOKEN`` or the saved login), with a user ``name``; None
    without a token. ``instead``: what the error line tells the user to do instead of asking whoami."""
    from huggingface_hub import HfApi, get_token

    token = get_token()
    if not token:
        return None
    try:
        account = HfApi(token=token).whoami()
    except Exception as err:  # HTTP, connection, or a malformed answer: one line for the user
        msg = str(err).splitlines()[0] if str(err) else type(err).__name__
        raise RhythmError(f"asking the Hub who you are (whoami) failed: {msg}; or {instead}") from None
    if not isinstance(account, dict) or not account.get("name"):
        raise RhythmError(f"the Hub's whoami gave no user name; {instead}")
    return account


def hub_user(instead: str = STAGE_REPOS) -> str | None:
    """The user name of the Hub token from whoami (:func:`hub_account`); None without a token."""
    account = hub_account(instead)
    return None if account is None else str(account["name"])


def check_push_account(account: dict[str, Any] | None) -> None:
    """Refuse a local run that would push (``push_to_hub``) without a token, or with a read-only one: the push
    comes after training, so it is checked before. A fine-grained token's scopes are left to the Hub."""
    if account is None:
        raise RhythmError("push_to_hub needs a Hugging Face token, checked now rather than after training: set "
                          "HF_TOKEN (or run `hf auth login`), or drop --push-to-hub")
    role = ((account.get("auth") or {}).get("accessToken") or {}).get("role")
    if role == "read":
        raise RhythmError(f"push_to_hub needs a token that can write; {account['name']}'s token is read-only: use a "
                          "write token (HF_TOKEN or `hf auth login`), or drop --push-to-hub")


def user_repo(name: str, option: str) -> str:
    """``USER/name`` for the token's user (``rhythm upload`` without ``--repo``), or one clear line."""
    user = hub_user(f"pass {option} user/name")
    if user is None:
        raise RhythmError(f"no repo given: pass {option} user/name, or set HF_TOKEN (or run `hf auth login`) "
                          f"so it defaults to YOU/{name}")
    return f"{user}/{name}"


def _default_of(cfg: Any, name: str) -> Any:
    field = next(f for f in dataclasses.fields(cfg) if f.name == name)
    return field.default


def fill_hub_repos(stage: str, cfg: C) -> tuple[C, list[RepoChoice]]:
    """``cfg`` with the Hub repos a submission or push needs filled in, and the repos it will use.

    Asks whoami when something is missing, and for a local run that pushes (its token is checked
    before training: :func:`check_push_account`); nothing is asked (and nothing reported) for a local run
    that pushes nowhere.
    """
    jobs = cfg.jobs  # type: ignore[attr-defined]
    flavor, push = jobs.flavor, getattr(cfg, "push_to_hub", False)
    if not flavor and not push:
        return cfg, []
    wanted: dict[str, str | None] = {"hub_model_id": cfg.hub_model_id}  # type: ignore[attr-defined]
    if flavor:
        wanted["data_repo"] = jobs.data_repo
    adapter = getattr(cfg, "adapter", None)
    default_adapter = flavor and stage == "grpo" and adapter == _default_of(cfg, "adapter") and not Path(adapter).exists()
    missing = [k for k, v in wanted.items() if not v] + (["adapter"] if default_adapter else [])
    labels = {"hub_model_id": "hub_model_id (the run's model repo)", "data_repo": "data_repo"}
    for key, value in wanted.items():  # a name given is checked before the Hub is asked anything
        if value:
            check_repo_id(value, labels[key])
    names = {"hub_model_id": RUN_REPOS[stage], "data_repo": DATA_REPO, "adapter": RUN_REPOS["sft"]}
    local_push = bool(push) and not flavor
    instead = STAGE_REPOS if missing else "check HF_TOKEN (or `hf auth login`), or drop --push-to-hub"
    account = hub_account(instead) if missing or local_push else None
    user = None if account is None else str(account["name"])
    if missing and user is None:
        named = [k for k in ("hub_model_id", "data_repo", "adapter") if k in missing]  # the ones to give, not the given
        need = " and ".join(named)
        options = " and ".join(f"--{k.replace('_', '-')} user/name" for k in named)
        defaults = " and ".join(f"YOU/{names[k]}" for k in named)
        why = "a Hugging Face Jobs run" if flavor else "push_to_hub"
        raise RhythmError(f"{why} needs {need}: pass {options}, or set HF_TOKEN (or run `hf auth login`) "
                          f"so {'it defaults' if len(named) == 1 else 'they default'} to {defaults}")
    if local_push:
        check_push_account(account)
    changes = {k: f"{user}/{names[k]}" for k in missing}
    roles = {"hub_model_id": "model", "data_repo": "data", "adapter": "adapter"}
    current = {**wanted, **({"adapter": adapter} if flavor and stage == "grpo" and adapter else {})}  # none: a full model
    choices = [RepoChoice(roles[k], str(changes.get(k, v)), k in changes) for k, v in current.items()]
    for key in changes.keys() & labels.keys():  # the defaults from whoami too, before anything is said or sent
        check_repo_id(changes[key], labels[key])
    if "data_repo" in changes:
        changes["jobs"] = dataclasses.replace(jobs, data_repo=changes.pop("data_repo"))
    return (dataclasses.replace(cfg, **changes) if changes else cfg), choices  # type: ignore[type-var]


def repos_line(choices: list[RepoChoice]) -> str:
    """``hub repos: model me/rhythm-sft (default from whoami), data me/rhythm-teacher (...)``."""
    return "hub repos: " + ", ".join(c.describe() for c in choices)
