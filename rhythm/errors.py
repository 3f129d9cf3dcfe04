"""User-facing errors: anything that is the caller's input, not a bug. The CLI prints the message as one
line on stderr and exits with code 2 (``RHYTHM_DEBUG=1`` shows the traceback)."""

from __future__ import annotations


class RhythmError(Exception):
    """Bad input: a malformed seed range, a missing file, a broken JSONL line, an unknown config key."""

    exit_code = 2
