"""The refine-stage ablation's research rows stay reproducible: their patch still applies to the code."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PATCH = ROOT / "benchmarks" / "grpo_research.patch"


def skip_outside_git() -> None:
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")


def test_research_patch_applies_to_the_working_tree() -> None:
    """benchmarks/grpo_ablation.sh applies the patch to HEAD for its patched rows; when branch.py or trainer.py
    change, the patch must be rebased with them, or those rows of docs/grpo-ablation.md cannot be rerun."""
    skip_outside_git()
    done = subprocess.run(["git", "apply", "--check", str(PATCH)], cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize(("name", "commit"), [("belief_factor_judge", "dba9339"), ("belief_episode_reward", "1b2a2fd")])
def test_round_twenty_patches_apply_to_their_commits(tmp_path: Path, name: str, commit: str) -> None:
    """The twentieth round's rows that are not in the shipped code rerun on a fixed commit's tree with their patch:
    QF1, QE1 and QE2 on dba9339 (the tenth round's reverted ``branch.judge: filter``), EPB12 on 1b2a2fd."""
    skip_outside_git()
    tree = subprocess.run(["git", "archive", commit], cwd=ROOT, capture_output=True)
    if tree.returncode != 0:
        pytest.skip(f"commit {commit} is not in this clone (shallow?)")
    subprocess.run(["tar", "-x", "-C", str(tmp_path)], input=tree.stdout, check=True)
    subprocess.run(["git", "init", "-q"], cwd=tmp_path, check=True)
    patch = ROOT / "benchmarks" / f"{name}.patch"
    done = subprocess.run(["git", "apply", "--check", str(patch)], cwd=tmp_path, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
