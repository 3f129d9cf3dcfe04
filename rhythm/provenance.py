"""Where an output came from: package versions, env version and a timestamp, recorded in every file a
stage writes so a number can always be traced to the code and settings that produced it."""

from __future__ import annotations

import datetime as _dt
import hashlib
import platform
import re
import shlex
import sys
from collections.abc import Callable
from importlib import metadata
from pathlib import Path
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

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
    "scipy",  # the bootstrap intervals
    "matplotlib",  # the plots
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
    return _dt.datetime.now(_dt.UTC).replace(microsecond=0).isoformat()


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
    return shlex.join([*head, *(_redact_arg(a) for a in sys.argv[1:])])


_SECRET_PARAMS = re.compile(r"key|token|secret|sig|password|auth", re.IGNORECASE)


def redact_url(url: str) -> str:
    """``url`` without a password and with secret-looking query values masked."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return url
    netloc = parts.netloc
    if "@" in netloc:
        netloc = "***@" + netloc.rsplit("@", 1)[1]
    query = parts.query
    if query:
        query = urlencode([(k, "***" if _SECRET_PARAMS.search(k) else v) for k, v in parse_qsl(query, keep_blank_values=True)])
    return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))


_URL = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://[^\s'\",}]+")


def _redact_arg(arg: str) -> str:
    """A command-line argument as provenance records it: each URL in it (``--base-url URL``, ``--set llm.base_url=URL``,
    ``--set=...``, a mapping ``--set 'llm={base_url: URL}'``) without its password or secret-looking query values, since
    a recorded command travels with the data it made."""
    return _URL.sub(lambda m: redact_url(m.group(0)), arg) if "://" in arg else arg


def file_digest(path: str | Path, keep: Callable[[Path], bool] = lambda rel: True) -> str:
    """sha256 (16 hex) of a file, or of the files under a directory whose relative path ``keep`` accepts (names and
    contents, sorted): what a stage stamp or an eval records of the inputs a result was made from."""
    p = Path(path)
    h = hashlib.sha256()
    files = sorted(x for x in p.rglob("*") if x.is_file() and keep(x.relative_to(p))) if p.is_dir() else [p]
    for f in files:
        h.update(str(f.relative_to(p) if p.is_dir() else f.name).encode())
        with f.open("rb") as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                h.update(block)
    return h.hexdigest()[:16]
