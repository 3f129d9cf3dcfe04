"""Terminal output for commands: a stderr console, progress bars and result tables. Data never goes
through here; it goes to files or stdout."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

err_console = Console(stderr=True, width=None if sys.stderr.isatty() else 160)


@contextmanager
def progress_bars(disable: bool = False) -> Iterator[Callable[[str, int], Callable[[int], None]]]:
    """Yields ``factory(label, total) -> advance(n)``; each call of the factory adds a bar. The display starts with
    the first bar, so a command that stops on bad input before any work prints its one line and nothing else."""
    progress = Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
        console=err_console,
        disable=disable,
    )

    def factory(label: str, total: int) -> Callable[[int], None]:
        if not progress.live.is_started:
            progress.start()
        task = progress.add_task(label, total=total)
        return lambda n: progress.advance(task, n)

    try:
        yield factory
    finally:
        if progress.live.is_started:
            progress.stop()
