"""Seed lists from the command line: ``0-29``, ``0,5,9``, ``10000-10049``, or a mix (``0-4,10``)."""

from __future__ import annotations

import re

from rhythm.env.profiles import MAX_SEED
from rhythm.errors import RhythmError

_PART = re.compile(r"^\s*([0-9]+)\s*(?:-\s*([0-9]+)\s*)?$")  # ASCII digits only (\d also takes other scripts')
MAX_SEEDS = 10_000_000
"""Seeds one spec may name in all: far beyond any run, short of what a typo would make fill memory."""


def parse_seeds(spec: str) -> list[int]:
    """Seeds in the order given, duplicates dropped; raises RhythmError with what is wrong."""
    if not isinstance(spec, str) or not spec.strip():
        raise RhythmError("empty seed range; expected e.g. 0-29 or 0,5,9")
    seeds: dict[int, None] = {}
    for part in spec.split(","):
        m = _PART.match(part)
        if not m:
            raise RhythmError(f"malformed seed range {spec!r} at {part.strip()!r}; expected e.g. 0-29 or 0,5,9")
        lo = int(m.group(1))
        hi = int(m.group(2)) if m.group(2) is not None else lo
        if hi < lo:
            raise RhythmError(f"seed range {part.strip()!r} runs backwards; write {hi}-{lo}")
        if hi > MAX_SEED:
            raise RhythmError(f"seed {hi} is too large (max {MAX_SEED})")
        if hi - lo >= MAX_SEEDS or len(seeds) + hi - lo >= MAX_SEEDS:
            raise RhythmError(f"{spec!r} names more than {MAX_SEEDS:,} seeds")
        for s in range(lo, hi + 1):
            seeds[s] = None
    return list(seeds)


def format_seeds(seeds: list[int]) -> str:
    """The shortest spec that :func:`parse_seeds` turns back into ``seeds`` (sorted runs)."""
    if not seeds:
        return ""
    ordered = sorted(set(seeds))
    parts, start, prev = [], ordered[0], ordered[0]
    for s in ordered[1:] + [None]:
        if s is not None and s == prev + 1:
            prev = s
            continue
        parts.append(str(start) if start == prev else f"{start}-{prev}")
        if s is not None:
            start = prev = s
    return ",".join(parts)
