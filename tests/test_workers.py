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


@pytest.mark.slow
def test_sigterm_of_generate_stops_it_as_ctrl_c_does(tmp_path: Path) -> None:
    """``kill PID`` (a scheduler ending the job): the workers stop, every line written is whole, one line says so,
    and the exit code is 143, with no traceback and no leaked-semaphore warning; --resume then finishes the run."""
    out = tmp_path / "t.jsonl"
    cmd = [*RHYTHM, "generate", "--seeds", "0-119", "--concurrency", "2", "--output", str(out), "--quiet", "--set", "chunk=4"]
    proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 60
    while time.time() < deadline and not (out.exists() and out.stat().st_size > 0):
        time.sleep(0.05)
    parent = psutil.Process(proc.pid)
    children = parent.children(recursive=True)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    try:
        assert proc.returncode == 143, err
        assert err.strip().splitlines()[-1] == "rhythm: terminated (SIGTERM); everything written so far is whole", err
        assert "Traceback" not in err and "leaked" not in err
        psutil.wait_procs(children, timeout=60)
        assert _alive(children) == []
    finally:
        for p in _alive(children):
            p.kill()
    import orjson

    written = [orjson.loads(line)["seed"] for line in out.read_bytes().splitlines()]  # every line whole
    assert 0 < len(written) < 120
    subprocess.run([*cmd, "--resume"], check=True, capture_output=True)
    assert sorted(orjson.loads(line)["seed"] for line in out.read_bytes().splitlines()) == list(range(120))
