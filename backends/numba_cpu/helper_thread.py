"""One helper thread for the eager tier's two-way splits (row segments, machine kernel halves):
numpy's loops and ctypes calls let go of the GIL, so a second thread runs half of the work on
the second core. Each user has its own thread, made on first use: a row segment's helper may
split a kernel call in turn, which must not wait behind itself. It imports no numba."""

from __future__ import annotations

import os
import threading
from concurrent.futures import Future
from typing import Any, Callable

__all__ = ["CORES", "HelperThread"]

#: The cores this process may run on.
CORES = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


class HelperThread:
    """A thread that runs what is submitted to it, one call at a time."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._lock = threading.Lock()
        self._pool: Any = None
        self._pid = 0

    def submit(self, fn: Callable[..., Any], *args: Any) -> "Future[Any] | None":
        """``fn(*args)`` on the helper thread, or None where there is none to be had (one core,
        or the interpreter exiting, which starts no more threads): the caller then runs it."""
        if CORES < 2:
            return None
        with self._lock:
            if self._pool is None or self._pid != os.getpid():
                # A forked child has the parent's pool but not its thread: work given to it
                # would wait forever. It gets a pool of its own.
                from concurrent.futures import ThreadPoolExecutor

                self._pool = ThreadPoolExecutor(1, thread_name_prefix=self.name)
                self._pid = os.getpid()
            pool = self._pool
        try:
            return pool.submit(fn, *args)
        except RuntimeError:
            return None

    def start(self) -> None:
        """Make the thread now (it is made on the first submit otherwise)."""
        future = self.submit(lambda: None)
        if future is not None:
            future.result()
