"""What the xdist workers of one test session share: a folder, and a lock to build things in it once."""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Iterator
from pathlib import Path


def shared_dir(tmp_path_factory) -> Path:
    """A folder all xdist workers of this session share (the plain basetemp without xdist)."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


@contextlib.contextmanager
def locked(folder: Path) -> Iterator[Path]:
    """Hold ``folder``'s lock (created if needed): one worker builds, the others wait, then reuse."""
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield folder


QUICKSTART_MINI = {
    "seeds": "0-5",
    "openings": {"max_steps": 2, "per_device_train_batch_size": 4, "eval_steps": 2, "save_steps": 2, "logging_steps": 1},
    "sft": {"max_steps": 4, "eval_steps": 2, "save_steps": 4, "logging_steps": 1},
    "grpo": {"max_steps": 1, "logging_steps": 1, "save_steps": 1, "rollout_seeds": "5000-5001", "per_device_train_batch_size": 16,
             "probe_states": 4},
    "eval_episodes": {"in-dist": 2, "ood": 2, "discrete": 3},
    "references": ["random", "heuristic"],
    "max_new_tokens": 16,  # the tiny student writes the two protocol lines (~11 tokens + <|im_end|>)
}
"""A quickstart small enough for a test: every stage runs, in a minute or two."""
