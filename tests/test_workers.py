"""Worker processes never outlive their parent: SIGKILL of ``rhythm generate --concurrency 2`` leaves
nothing running (workers, multiprocessing's resource tracker)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

RHYTHM = [sys.executable, "-m", "rhythm.cli.main"]


def _alive(procs: list[psutil.Process]) -> list[psutil.Process]:
    out = []
    for p in procs:
        try:
            if p.is_running() and p.status() != psutil.STATUS_ZOMBIE:
                out.append(p)
        except psutil.NoSuchProcess:
            pass
    return out


@pytest.mark.slow
def test_sigkill_of_generate_leaves_no_process_behind(tmp_path: Path) -> None:
    out = tmp_path / "t.jsonl"
    proc = subprocess.Popen([*RHYTHM, "generate", "--seeds", "0-999", "--concurrency", "2", "--output", str(out),
                             "--quiet", "--set", "chunk=4"], stderr=subprocess.DEVNULL)
    parent = psutil.Process(proc.pid)
    children: list[psutil.Process] = []
    deadline = time.time() + 60
    while time.time() < deadline:  # two workers and the resource tracker, and work under way
        children = parent.children(recursive=True)
        if len(children) >= 3 and out.exists() and out.stat().st_size > 0:
            break
        time.sleep(0.05)
    assert len(children) >= 3, children
    try:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        psutil.wait_procs(children, timeout=60)  # returns as soon as all are gone; 60 s only guards a hang
        assert _alive(children) == []
    finally:
        for p in _alive(children):  # never leave them behind, even when the test fails
            p.kill()


def test_watchdog_ends_a_worker_whose_parent_is_gone() -> None:
    """The portable fallback alone (no death signal): a worker told its parent is another process exits.
    The watchdog runs in its daemon thread as in a worker; exit code 1 is its ``os._exit(1)``, while the
    main thread's wait would end the process with 0 (and no wall-clock bound is needed)."""
    code = ("import os, threading; from rhythm.workers import _watch_parent; "
            "threading.Thread(target=_watch_parent, args=(os.getppid() + 987654, 0.05), daemon=True).start(); "
            "threading.Event().wait(30)")
    done = subprocess.run([sys.executable, "-c", code])
    assert done.returncode == 1
