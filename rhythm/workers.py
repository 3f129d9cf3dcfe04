"""Worker processes that never outlive their parent.

A ``ProcessPoolExecutor`` worker blocks on its task queue; when the parent dies by SIGKILL (out of
memory, a pre-empted job) nobody closes that queue, so the workers, and multiprocessing's resource
tracker that waits on them, run on as orphans. :func:`worker_pool` starts workers that watch their
parent two ways: on Linux the kernel sends them SIGKILL when the parent dies (``prctl``
``PR_SET_PDEATHSIG``), and everywhere a daemon thread checks every half second that the parent is still
their parent and exits the process when it is not. The resource tracker exits by itself once the last
worker holding its pipe is gone.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import signal
import sys
import threading
import time
from concurrent.futures import ProcessPoolExecutor

WATCH_INTERVAL_S = 0.5
"""How often a worker checks that its parent is alive (the fallback where prctl is not available)."""
PR_SET_PDEATHSIG = 1
"""From <linux/prctl.h>."""


def _set_parent_death_signal() -> bool:
    """Ask Linux to SIGKILL this process when its parent dies; False where that is not available."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def _watch_parent(parent_pid: int, interval: float) -> None:
    while True:
        if os.getppid() != parent_pid:  # re-parented: the parent is gone
            os._exit(1)
        time.sleep(interval)


def watch_parent(parent_pid: int, interval: float = WATCH_INTERVAL_S) -> None:
    """Pool initializer: end this worker when ``parent_pid`` dies (death signal, plus a watchdog thread)."""
    _set_parent_death_signal()
    if os.getppid() != parent_pid:  # the parent died before the death signal was armed
        os._exit(1)
    threading.Thread(target=_watch_parent, args=(parent_pid, interval), name="rhythm-parent-watch", daemon=True).start()


def worker_pool(workers: int) -> ProcessPoolExecutor:
    """A spawn-context process pool whose workers exit within about a second of their parent's death."""
    return ProcessPoolExecutor(
        max_workers=workers,
        mp_context=mp.get_context("spawn"),
        initializer=watch_parent,
        initargs=(os.getpid(),),
    )
