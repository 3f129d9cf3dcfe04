"""The processes of a launch (``torchrun``, ``accelerate launch``): how many, which one speaks and writes the run's
shared files, and the group closed at the end. Read from the launcher's environment, before the trainer (which
knows its own rank) exists; a run without a launcher is one process, the main one."""

from __future__ import annotations

import os
import sys


def world_size() -> int:
    """The processes a distributed launcher started (``torchrun`` / ``accelerate`` set ``WORLD_SIZE``); 1 alone."""
    return int(os.environ.get("WORLD_SIZE", "1"))


def rank() -> int:
    """This process's place in the launch (``RANK``; 0 without a launcher)."""
    return int(os.environ.get("RANK", "0"))


def is_main_process() -> bool:
    """Whether this is the launch's first process (``RANK`` 0; the only one without a launcher): the one that writes
    the run's shared files and says what it did, before the trainer (which knows its own rank) exists."""
    return rank() == 0


def process_seed(seed: int) -> int:
    """``seed`` made this process's own (itself without a launcher): processes sampling replies with one seed would
    draw alike for copies of one prompt."""
    return seed + 7_919 * rank()


def gathered(items: list) -> list:
    """Every process's ``items``, in rank order (``items`` alone without a launcher); every process calls it, as
    often as the others, so that the first can write what all of them made."""
    if world_size() == 1:
        return items
    from accelerate.utils import gather_object

    return gather_object(items)


def end_distributed() -> None:
    """Under a distributed launcher, wait for every rank, then close the process group. A process that
    exits with gloo's group still open can abort in its C++ teardown ("terminate called without an
    active exception", SIGABRT) after training finished, failing the whole launch."""
    if "torch" not in sys.modules:
        return
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()
