"""``python -m rhythm.train.grpo [--config FILE] [--set key=value ...]``: the entry ``accelerate launch`` and
Hugging Face Jobs run (``rhythm grpo`` is the command for everything else)."""

from __future__ import annotations

import sys

from rhythm.train.common import entry_main
from rhythm.train.grpo.config import GRPORunConfig, check_given_sections, validate
from rhythm.train.grpo.trainer import run_grpo


def main(argv: list[str] | None = None) -> int:
    """``python -m rhythm.train.grpo [--config FILE] [--set key=value ...]``: the entry ``accelerate launch`` and jobs run."""
    return entry_main("grpo", GRPORunConfig, run_grpo, argv, validate, doc=main.__doc__, check_given=check_given_sections)


if __name__ == "__main__":
    sys.exit(main())
