"""Shared helpers for benchmarks: pin to one core, time a callable, print one JSON line of results."""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from collections.abc import Callable
from typing import Any


def pin_one_core() -> str:
    """Single-threaded numpy/BLAS on one CPU core (best effort); returns what was done."""
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[var] = "1"
    if hasattr(os, "sched_setaffinity"):
        cpu = min(os.sched_getaffinity(0))
        os.sched_setaffinity(0, {cpu})
        return f"pinned to cpu {cpu}"
    return "not pinned (no sched_setaffinity)"


def best_rate(fn: Callable[[], int], seconds: float = 3.0, repeats: int = 3) -> float:
    """Best of ``repeats`` runs of ``fn`` (which returns units of work) within ``seconds`` each: units/s."""
    best = 0.0
    for _ in range(repeats):
        done, start = 0, time.perf_counter()
        while time.perf_counter() - start < seconds / repeats:
            done += fn()
        best = max(best, done / (time.perf_counter() - start))
    return best


def bench_args(doc: str, *flags: tuple[str, str]) -> argparse.Namespace:
    """A benchmark's flags (``--check``: exit 1 on a missed target; ``flags``: more ``(--name, help)`` switches),
    parsed so that ``--help`` or a mistyped flag stops before any work."""
    parser = argparse.ArgumentParser(description=doc.strip().split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="exit 1 when a target is missed")
    for flag, text in flags:
        parser.add_argument(flag, action="store_true", help=text)
    return parser.parse_args()


def report(name: str, results: dict, targets: dict | None = None, check: bool = False) -> None:
    """Print one JSON line: the figures, the targets, whether each is met, and the machine; with ``check`` (the
    benchmark's ``--check``) a missed target exits 1."""
    from rhythm.provenance import package_version, versions

    out = {"benchmark": name, **results, "python": platform.python_version(), "machine": platform.machine(),
           "processor": _processor(), "cpus": os.cpu_count(), "rhythm": package_version(),
           "versions": versions(("numpy", "torch", "transformers", "trl")),
           "measured_at": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
    if targets:
        out["targets"] = targets
        out["met"] = {k: results[k] >= v for k, v in targets.items()}
    print(json.dumps(out), flush=True)
    if targets and not all(out["met"].values()) and check:
        sys.exit(1)


def _processor() -> str:
    """The CPU's model name (Linux's /proc/cpuinfo), else what platform says: two machine states of one model
    differ less than two models."""
    try:
        for line in open("/proc/cpuinfo", encoding="utf-8"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def run_or_exit(name: str, run: Callable[[Any], None], args: Any) -> None:
    """``run(args)``; a :class:`rhythm.errors.RhythmError` becomes one ``NAME: error: ...`` line and exit code 2."""
    from rhythm.errors import RhythmError

    try:
        run(args)
    except RhythmError as err:
        print(f"{name}: error: {err}", file=sys.stderr)
        sys.exit(2)
