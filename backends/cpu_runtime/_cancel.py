"""Stopping executions: a cancel flag per execution, and one watchdog thread for time limits.

A program cannot be stopped from outside in Python (a thread cannot be killed, and numba code
holds no GIL to interrupt), so stopping is cooperative: each execution that may need it gets a
:class:`CancelFlag`, whose one-element int32 array the program reads at every iteration of its
loops (numba_cpu compiles the read into the loop; the reference interpreter checks it in its
own). Setting the element stops the program at its next iteration; the runtime then replaces
whatever the program raised with the flag's reason (DeadlineExceeded or Cancelled).

Time limits (``ExecuteOptions.timeout``) are kept by one daemon thread for the whole process,
sleeping until the earliest deadline: a thread per execution would cost more than a small
execution. Executions that finish in time are only marked done; the watchdog drops them when
their deadline comes, or all at once when they pile up.
"""

from __future__ import annotations

import heapq
import itertools
import threading
import time

import numpy as np

from pjrt_hub.abi import PjrtError

__all__ = ["CancelFlag", "watch"]


class CancelFlag:
    """The cancel state of one execution (all its devices): ``flag[0] != 0`` once cancelled."""

    __slots__ = ("flag", "reason", "done", "__weakref__")

    def __init__(self, readable: bool = True) -> None:
        #: Read by the running program; int32 so that numba reads it with one atomic load. None
        #: for a program that reads no flag (the runtime still checks ``reason`` before a start).
        self.flag = np.zeros(1, np.int32) if readable else None
        #: Why it was cancelled: the error its events and outputs carry.
        self.reason: PjrtError | None = None
        #: The execution finished (a later cancel changes nothing).
        self.done = False

    def cancel(self, reason: PjrtError) -> None:
        """Ask the execution to stop with ``reason``; the first reason wins."""
        if self.reason is None and not self.done:
            self.reason = reason
            if self.flag is not None:
                self.flag[0] = 1

    @property
    def cancelled(self) -> bool:
        return self.reason is not None


class _Watchdog:
    """Cancels flags whose deadline passed; one daemon thread, started on first use."""

    #: Rebuild the heap when this many finished entries wait in it (and they are the majority).
    _PRUNE_AT = 1024

    def __init__(self) -> None:
        self._heap: list[tuple[float, int, CancelFlag, PjrtError]] = []
        self._order = itertools.count()
        self._wake = threading.Condition(threading.Lock())
        self._thread: threading.Thread | None = None

    def watch(self, flag: CancelFlag, deadline: float, reason: PjrtError) -> None:
        with self._wake:
            heap = self._heap
            if len(heap) >= self._PRUNE_AT and sum(entry[2].done for entry in heap) * 2 > len(heap):
                heap[:] = [entry for entry in heap if not entry[2].done]
                heapq.heapify(heap)
            earliest = heap[0][0] if heap else None
            heapq.heappush(heap, (deadline, next(self._order), flag, reason))
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="pjrt-hub cpu_runtime watchdog",
                                                daemon=True)
                self._thread.start()
            elif earliest is None or deadline < earliest:
                self._wake.notify()

    def _run(self) -> None:
        heap = self._heap
        with self._wake:
            while True:
                now = time.monotonic()
                while heap and (heap[0][2].done or heap[0][0] <= now):
                    _, _, flag, reason = heapq.heappop(heap)
                    if not flag.done:
                        flag.cancel(reason)
                # An infinite (or absurdly far) deadline is waited for without a timeout, which
                # threading could not represent anyway.
                wait = heap[0][0] - now if heap else None
                self._wake.wait(None if wait is None or wait >= threading.TIMEOUT_MAX else wait)


_WATCHDOG = _Watchdog()


def watch(flag: CancelFlag, timeout: float, reason: PjrtError) -> None:
    """Cancel ``flag`` with ``reason`` once ``timeout`` seconds have passed, unless it is done."""
    _WATCHDOG.watch(flag, time.monotonic() + timeout, reason)
