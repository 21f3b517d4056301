"""numba_cpu's own threads for its parallel loops: they sleep when idle and take chunks as they go.

numba compiles a ``prange`` loop into a kernel over entries of a schedule and a call to the
symbol ``numba_parallel_for``, which its threading layer (TBB, OpenMP or its workqueue) defines.
On a machine other processes keep busy, none of the three gives a program its share of the
cores (measured in .threads): OpenMP and the workqueue cut the loop into one fixed share per
thread and wait for the share of a thread the scheduler is not running; TBB's idle workers spin
with ``sched_yield`` before they sleep, and on an EEVDF kernel a thread that yielded on busy
cores waits long to run again, so the worker joins a short loop late or not at all.

This module defines ``numba_parallel_for`` again, for the threads that run numba_cpu programs
(:func:`enter`/:func:`leave` around a run) and for them only. A loop's schedule entries (the
chunks .codegen cuts, one per entry) are claimed one at a time by the calling thread and by
the pool's workers, so a thread the scheduler does not run holds the loop up by one chunk at
most, and the caller does every chunk itself if no worker comes. An idle worker spins briefly
(``._pool_code.SPIN``) and then sleeps on a futex: it takes no CPU from the program's own thread, and
a woken thread is run soon. Any other thread's loops (a user's own ``@njit(parallel=True)``
code) go to numba's layer as before, which this module keeps as the fallback:

* :func:`install` does nothing off Linux x86-64 (the system call numbers and ``pause`` are that
  ABI's; the compiled side, ._pool_code, is imported only there), with
  ``PJRT_HUB_NUMBA_POOL=0``, or if numba's layer could not start;
* a thread running a program while another one's loop has the pool (two devices at once) runs
  its loop alone, as does a loop asked for one thread; a loop with more than
  :data:`_MAX_ARGS` arguments goes to numba's layer (the pool keeps each call on the stack, so
  nothing can fail once a chunk is claimed);
* after ``fork`` the child has no workers until its next run starts a pool of its own (a loop
  before that runs on the calling thread).

``get_thread_id`` is defined again as well, since a parallel reduction indexes its partial
results by it: a pool worker is its slot (1 and up), a thread running a program is 0, and any
other thread asks numba's layer. A parallel loop inside a chunk (generated code has none) would
go to numba's layer and see the worker's slot as its id. The pool's state is a block of 64-bit
words at a symbol the compiled code finds by name (as it does ``numba_parallel_for``), so
numba's disk cache keeps code that uses it.
"""

from __future__ import annotations

import ctypes
import os
import platform
import sys
import threading

import numpy as np
from llvmlite import binding as _llvm

__all__ = ["SPARE", "enter", "install", "leave", "loops", "set_extra", "static_words", "workers"]

_STATE = "pjrt_hub_numba_cpu_pool_state"
_SYSCALL = "pjrt_hub_numba_cpu_syscall"

# The words of the state. ._pool_code compiles them in, and numba's disk cache keys its code on
# that file alone: a change here needs a change there too.
_GEN = 0  # the newest loop's generation; workers sleep on it (a futex word)
_NEXT = 1  # (generation << 32) | next schedule entry to claim
_TOTAL = 2  # schedule entries of the loop
_DONE = 3  # entries finished; the caller sleeps on it (a futex word)
_BUSY = 4  # 1 while a loop has the pool
_FN, _ARGS, _DIMS, _STEPS, _DATA, _NDIM, _COUNT = 5, 6, 7, 8, 9, 10, 11  # the loop's call
_THREADS = 12  # threads the loop may use, its caller included
_SLEEPING = 13  # workers asleep on _GEN
_WORKERS = 14  # workers started
_LAYER_FOR = 15  # numba's layer's parallel_for
_LAYER_ID = 16  # numba's layer's get_thread_id
_LOOPS = 17  # loops the pool ran with its workers
_WAITING = 18  # 1 while the loop's caller sleeps on _DONE
_LAYER_NUM = 19  # numba's layer's get_num_threads
_RUNNERS = 32  # tids of threads running a program (0: a free slot)
_MAX_RUNNERS = 64
_WORKER_TIDS = _RUNNERS + _MAX_RUNNERS  # tid of worker k at _WORKER_TIDS + k, k >= 1
_MAX_WORKERS = 255
# Threads a runner's loops may use beyond numba's count, at _RUNNER_EXTRA + its slot (set_extra).
_RUNNER_EXTRA = _WORKER_TIDS + _MAX_WORKERS + 1
_WORDS = _RUNNER_EXTRA + _MAX_RUNNERS

#: A loop with more arguments or dimensions than this goes to numba's layer (the pool keeps
#: each entry's call on the stack).
_MAX_ARGS = 512
_MAX_DIMS = 64
_GEN_MASK = 0x7FFFFFFF
_INDEX_MASK = 0xFFFFFFFF

#: The state. :func:`install` puts it in memory that is never freed (daemon workers may still
#: read it while the interpreter exits) and gives compiled code its address.
_state = np.zeros(_WORDS, np.int64)


# -- Python's side ----------------------------------------------------------------------------

_lock = threading.Lock()


def _new_lock() -> None:
    """After a fork: the parent's lock may have been held by a thread the child does not have."""
    global _lock
    _lock = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_new_lock)
_installed = False
_pid = 0


def _supported() -> bool:
    return sys.platform == "linux" and platform.machine() in ("x86_64", "AMD64") and \
        os.environ.get("PJRT_HUB_NUMBA_POOL", "1") != "0"


#: Words :func:`static_words` allocated where the C library cannot be reached by name.
_kept: list[ctypes.Array[ctypes.c_int64]] = []


def static_words(count: int) -> int:
    """The address of ``count`` zeroed 64-bit words that are never freed (0 if there is no
    memory): state compiled code finds at a symbol, which threads may still read while the
    interpreter exits (calloc'd; elsewhere an array this module keeps)."""
    try:
        libc = ctypes.CDLL(None)
        calloc = libc.calloc
    except (OSError, TypeError, AttributeError):  # no C library by that name (Windows)
        words = (ctypes.c_int64 * count)()
        _kept.append(words)
        return ctypes.addressof(words)
    calloc.restype = ctypes.c_void_p
    calloc.argtypes = [ctypes.c_size_t, ctypes.c_size_t]
    return calloc(count, 8) or 0


def install() -> bool:
    """Define ``numba_parallel_for`` and ``get_thread_id`` for the pool (once per process),
    keeping numba's layer for other threads; must run before programs are compiled or loaded
    from the cache, since the symbols are resolved then. Returns whether the pool is in use."""
    global _installed
    with _lock:
        if _installed:
            return True
        if not _supported():
            return False
        from numba.np.ufunc import parallel

        try:
            parallel._launch_threads()
        except Exception:  # numba's own error, raised again by its first parallel loop
            return False
        layer_for = _llvm.address_of_symbol("numba_parallel_for")
        layer_id = _llvm.address_of_symbol("get_thread_id")
        layer_num = _llvm.address_of_symbol("get_num_threads")
        if not (layer_for and layer_id and layer_num):
            return False
        global _state
        address = static_words(_WORDS)
        if not address:
            return False
        _state = np.ctypeslib.as_array((ctypes.c_int64 * _WORDS).from_address(address))
        _state[_LAYER_FOR] = layer_for
        _state[_LAYER_ID] = layer_id
        _state[_LAYER_NUM] = layer_num
        _llvm.add_symbol(_STATE, address)
        _llvm.add_symbol(_SYSCALL, ctypes.cast(ctypes.CDLL(None).syscall, ctypes.c_void_p).value)
        from . import _pool_code

        _llvm.add_symbol("numba_parallel_for", _pool_code._parallel_for.address)
        _llvm.add_symbol("get_thread_id", _pool_code._get_thread_id.address)
        _llvm.add_symbol("get_num_threads", _pool_code._get_num_threads.address)
        _installed = True
        return True


def workers() -> int:
    """The workers running in this process (0: none yet, or loops run on numba's layer)."""
    return int(_state[_WORKERS]) if _pid == os.getpid() else 0


def loops() -> int:
    """Parallel loops this process's pool has shared with its workers so far."""
    return int(_state[_LOOPS])


def _start(count: int) -> None:
    """Start ``count`` workers (the process's first run, or the first after a ``fork``)."""
    global _pid
    _state[_WORKERS] = 0
    _state[_WORKER_TIDS:] = 0  # the runners' extra threads too
    _state[_RUNNERS:_RUNNERS + _MAX_RUNNERS] = 0
    _state[_BUSY] = 0
    _state[_SLEEPING] = 0
    _state[_THREADS] = 0
    from . import _pool_code

    worker = ctypes.CFUNCTYPE(None, ctypes.c_int64)(_pool_code._worker.address)
    for k in range(1, count + 1):
        threading.Thread(target=worker, args=(k,), name=f"pjrt-hub-numba-{k}", daemon=True).start()
    _pid = os.getpid()
    _state[_WORKERS] = count


def enter() -> int:
    """Mark the calling thread as running a program (starting the pool's workers the first
    time); returns its slot for :func:`leave`, or -1 where its loops go to numba's layer."""
    if not install():
        return -1
    with _lock:
        if _pid != os.getpid():
            # A worker per core besides the caller, and a spare for a busy machine (set_extra).
            _start(min(_MAX_WORKERS, max(0, _cores() - 1) + SPARE))
        tid = threading.get_native_id()
        for slot in range(_MAX_RUNNERS):
            if _state[_RUNNERS + slot] == 0:
                _state[_RUNNERS + slot] = tid
                return slot
    return -1  # more threads running programs at once than slots: numba's layer takes the rest


def leave(slot: int) -> None:
    if slot >= 0:
        _state[_RUNNER_EXTRA + slot] = 0
        _state[_RUNNERS + slot] = 0


#: Workers started beyond one per core, for :func:`set_extra`.
SPARE = 1


def set_extra(slot: int, extra: int) -> None:
    """Let the parallel loops of the thread in ``slot`` (:func:`enter`) use ``extra`` (at most
    :data:`SPARE`) threads beyond numba's count, until :func:`leave`; 0 puts it back.

    For a busy machine (.threads.apply sets it where other processes keep cores busy): the
    scheduler shares the cores among the runnable threads, so a program on two threads next to
    two spinning processes gets one of two cores, and on three 1.2 of them, as XLA's pool does
    (its threads with the caller: 1.1-1.2 cores under ``bench --under-load 2``). The chunks go
    to whichever thread claims them, so a thread the scheduler does not run costs a loop
    nothing. On an idle machine (one thread per core is faster there) the spare takes no part:
    woken with the other workers at each loop, it goes back to sleep at once, without spinning.

    numba sizes a parallel reduction's partial results by ``get_num_threads`` and indexes them
    by ``get_thread_id``: the pool defines the first again as well, as numba's count plus the
    calling runner's extra, so the spare's id (its slot) stays in range."""
    if slot >= 0:
        _state[_RUNNER_EXTRA + slot] = max(0, min(SPARE, extra))


def _cores() -> int:
    import numba

    return int(numba.config.NUMBA_NUM_THREADS)
