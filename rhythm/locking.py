"""One writer per output: an exclusive lock held for the length of a run.

Two runs appending to one file (two terminals, a retried CI job) would each read what is there, play
what is missing and append it: every missing episode twice. So every stage that writes or appends to
an output (``rhythm generate``, ``rhythm relabel``, ``rhythm eval``'s episodes, ``rhythm sft|grpo`` output folders) first
takes this lock; a second writer fails at once with one line naming the output, or waits for the first
when asked (``--wait-lock``). The loser touches nothing.

The lock is an OS lock (``flock``, through the ``filelock`` library) on a hidden file beside the output,
``.NAME.lock``, never on the output itself: the kernel releases it when the holder exits, however it
exits (SIGKILL included), so a crashed run never leaves a stale lock behind. The empty lock file stays.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from rhythm.errors import RhythmError


def lock_path(output: str | Path) -> Path:
    """The lock file of ``output``: ``DIR/.NAME.lock`` beside it (outside any output folder); beside the file a link
    names, so a run on the link and a run on the file hold one lock (a linked folder on the way is one folder)."""
    out = Path(output)
    out = out.resolve() if out.is_symlink() else out
    return out.parent / f".{out.name}.lock"


class OutputLocked(RhythmError):
    """Another run holds the lock of this output."""


@contextmanager
def output_lock(
    output: str | Path | None,
    *,
    wait: bool = False,
    say: Callable[[str], None] | None = None,
) -> Iterator[Path | None]:
    """Hold the exclusive lock of ``output`` for the ``with`` block; yields the lock file's path.

    ``None`` or ``-`` (stdout) needs no lock. Without ``wait`` a held lock raises :class:`OutputLocked`
    at once (one line, exit 2 in the CLI); with ``wait`` it blocks until the other run ends.
    """
    if output is None or str(output) == "-":
        yield None
        return
    from filelock import FileLock, Timeout

    path = lock_path(output)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.touch(exist_ok=True)  # a place no file can be made in is not another run's lock (filelock waits on it)
    except OSError as err:
        raise RhythmError(f"cannot write beside {output}: {err.strerror or err} ({path})") from None
    lock = FileLock(str(path))
    try:
        lock.acquire(blocking=False)
    except Timeout:
        if not wait:
            raise OutputLocked(
                f"{output} is being written by another rhythm run (it holds {path}); "
                "wait for it to finish, or pass --wait-lock to wait for it"
            ) from None
        if say:
            say(f"waiting for the other run writing {output} to finish ...")
        lock.acquire()
    try:
        yield path
    finally:
        lock.release()
