"""The refine-stage ablation's research rows stay reproducible: their patch still applies to the code."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PATCH = ROOT / "benchmarks" / "grpo_research.patch"


def test_research_patch_applies_to_the_working_tree() -> None:
    """benchmarks/grpo_ablation.sh applies the patch to HEAD for its patched rows; when branch.py or trainer.py
    change, the patch must be rebased with them, or those rows of docs/grpo.md cannot be rerun."""
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    done = subprocess.run(["git", "apply", "--check", str(PATCH)], cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
