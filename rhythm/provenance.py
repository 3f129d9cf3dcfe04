"""Where an output came from: package versions, env version and a timestamp, recorded in every file a
stage writes so a number can always be traced to the code and settings that produced it."""

from __future__ import annotations

import datetime as _dt
import platform
import shlex
import sys
from importlib import metadata

from rhythm.env.constants import ENV_VERSION, PROTOCOL_VERSION

_PACKAGES = (
    "rhythm",
    "numpy",
    "gymnasium",
    "torch",
    "transformers",
    "trl",
    "peft",
    "datasets",
    "accelerate",
    "huggingface_hub",
    "openai",
)


def versions(packages: tuple[str, ...] = _PACKAGES) -> dict[str, str]:
    """Installed versions of the packages that can change a result (absent ones are skipped)."""
    out = {"python": platform.python_version(), "env_version": ENV_VERSION}
    for name in packages:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return out


def package_version() -> str:
    """This package's installed version: the code version that cache keys and stage stamps record."""
    try:
        return metadata.version("rhythm")
    except metadata.PackageNotFoundError:  # run from a source tree without an install
        return "unknown"


def version_line() -> str:
    """What ``rhythm --version`` prints: the package version, the env version and the text protocol's."""
    return f"rhythm {package_version()} (env {ENV_VERSION}, text protocol v{PROTOCOL_VERSION})"


def now_iso() -> str:
    return _dt.datetime.now(_dt.timezone.utc).replace(microsecond=0).isoformat()


def made_by(**extra: object) -> dict[str, object]:
    """The provenance written beside an output: the command, when, ``extra`` (the stage's own keys), the versions."""
    return {"command": command_line(), "created_at": now_iso(), **extra, "versions": versions()}


def command_line() -> str:
    """The running command as it was typed: ``rhythm ...`` (the console script), ``python -m MODULE ...`` (what
    ``accelerate launch -m`` and Hugging Face Jobs run) or ``python SCRIPT ...`` (a benchmark)."""
    spec = getattr(sys.modules.get("__main__"), "__spec__", None)  # set under python -m only
    if spec is not None:
        head = ["python", "-m", spec.name.removesuffix(".__main__")]
    elif sys.argv[0].endswith(".py"):
        head = ["python", sys.argv[0]]
    else:
        head = ["rhythm"]
    return shlex.join([*head, *sys.argv[1:]])
