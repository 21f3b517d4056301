"""One helper thread for two-way splits of large work: numpy's loops and ctypes calls let go of
the GIL, so a second thread runs half of it on the second core (numba_cpu's eager tier: row
segments, machine kernel halves; the runtime's copies of large buffers). Each user has its own
thread, made on first use: a row segment's helper may split a kernel call in turn, which must
not wait behind itself."""

from __future__ import annotations

import os
import threading
from concurrent.futures import Future
from typing import Any, Callable

__all__ = ["CORES", "HelperThread", "split_copy"]

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

    def split(self, fn: Callable[[int, int], Any], n: int, half: int) -> list[Any]:
        """``fn(0, n)`` in two halves, ``fn(0, half)`` on this thread while ``fn(half, n)`` runs on
        the helper; their results. Whole here (one result) where ``half`` splits nothing or there
        is no helper. The helper's half is always waited for, even when this thread's raises:
        it may be working on memory the caller frees."""
        other = self.submit(fn, half, n) if 0 < half < n else None
        if other is None:
            return [fn(0, n)]
        try:
            mine = fn(0, half)
        finally:
            theirs = other.result()
        return [mine, theirs]

    def start(self) -> None:
        """Make the thread now (it is made on the first submit otherwise)."""
        future = self.submit(lambda: None)
        if future is not None:
            future.result()


#: From this many bytes, :func:`split_copy` copies in two halves.
SPLIT_COPY_BYTES = 8 << 20

_COPY_HELPER = HelperThread("pjrt-hub-copy")


def split_copy(dst: Any, src: Any) -> None:
    """``np.copyto(dst, src, casting="no")``, large C-contiguous arrays in two halves on two
    threads. A fresh destination's pages are faulted in as it is written (a few microseconds a
    page where huge pages are short): on both cores, that takes half as long."""
    import numpy as np

    if (dst.nbytes < SPLIT_COPY_BYTES or dst.shape != src.shape or dst.dtype != src.dtype
            or not dst.flags.c_contiguous or not src.flags.c_contiguous):
        np.copyto(dst, src, casting="no")
        return
    d, s = dst.reshape(-1), src.reshape(-1)
    _COPY_HELPER.split(lambda start, stop: np.copyto(d[start:stop], s[start:stop]), d.size, d.size // 2)
