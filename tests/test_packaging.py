"""A non-editable install runs the recipe from any directory: the wheel ships the configs as package data.

The wheel is built from a copy of the package (nothing else of the checkout) and unpacked onto
``PYTHONPATH`` ahead of the development install; a short quickstart then runs from an empty folder,
reading ``configs/sft-tiny.yaml`` and ``configs/grpo-tiny-episode.yaml`` from the package.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from importlib import metadata
from pathlib import Path

import pytest
import yaml

from tests.shared import QUICKSTART_MINI as MINI

ROOT = Path(__file__).resolve().parents[1]


def _setuptools_builds_wheels() -> bool:
    """setuptools >= 70.1 is installed here (it builds wheels by itself, no network needed)."""
    try:
        major, minor = (int(x) for x in metadata.version("setuptools").split(".")[:2])
    except (metadata.PackageNotFoundError, ValueError):
        return False
    return (major, minor) >= (70, 1)


def _build_wheel(tmp: Path) -> Path:
    src = tmp / "src"
    shutil.copytree(ROOT / "rhythm", src / "rhythm", ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src / name)
    isolation = ["--no-build-isolation"] if _setuptools_builds_wheels() else []  # else pip fetches setuptools
    built = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", *isolation, "-w", str(tmp / "dist"), str(src)],
                           capture_output=True, text=True)
    assert built.returncode == 0, built.stderr[-3000:]
    (wheel,) = (tmp / "dist").glob("rhythm-*.whl")
    return wheel


@pytest.mark.slow
def test_a_wheel_runs_the_quickstart_from_another_directory(tmp_path: Path, tiny_student: Path) -> None:
    wheel = _build_wheel(tmp_path)
    names = zipfile.ZipFile(wheel).namelist()
    assert "rhythm/configs/sft-tiny.yaml" in names and "rhythm/configs/grpo-tiny-episode.yaml" in names
    site = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(site)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "mini.yaml").write_text(yaml.safe_dump(MINI))
    env = {**os.environ, "PYTHONPATH": str(site)}
    run = [sys.executable, "-c", "import sys; from rhythm.cli.main import main; sys.exit(main())"]
    where = subprocess.run([sys.executable, "-c", "import rhythm; print(rhythm.__file__)"], cwd=elsewhere, env=env,
                           check=True, capture_output=True, text=True).stdout
    assert Path(where.strip()).is_relative_to(site)
    done = subprocess.run([*run, "quickstart", "--config", "mini.yaml", "--out", "qs", "--quiet"], cwd=elsewhere, env=env,
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "student SFT+GRPO" in (elsewhere / "qs" / "summary.md").read_text()
