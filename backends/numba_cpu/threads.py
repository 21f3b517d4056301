"""How many threads a numba_cpu program's parallel work uses, decided when it runs.

Two thread pools do the parallel work of a program: numba's (the ``prange`` kernels) and
OpenBLAS's (``dot_general`` goes through numba's ``np.dot`` to the BLAS scipy ships). Both split
the work statically, one share per thread, and wait for the last share: when other processes
keep the cores busy, a thread the scheduler has not run holds the others up at the end of every
parallel loop, for a scheduler time slice (milliseconds). A 50 us matrix product then took
8-16 ms, where XLA's work-stealing pool degrades gracefully. So:

* a small product (under :data:`SMALL_DOT_MACS` multiply-adds, ~0.1 ms on one core) runs on the
  calling thread alone: the generated code brackets it with ``blas_threads(1)`` and a restore,
  so waking a pool costs it nothing and a busy machine cannot stall it;
* before a program with parallel work runs, :func:`apply` sets both pools of the running thread
  (both settings are per thread) to the cores other processes leave free
  (:func:`usable_threads`, from ``/proc/stat`` sampled at most every :data:`SAMPLE_S`): on an
  idle machine every core, under load fewer, down to the calling thread alone;
* OpenBLAS's idle workers would otherwise spin for ~0.1 s after each call, competing with the
  program's next kernel; ``OPENBLAS_THREAD_TIMEOUT`` (set in the package ``__init__``, before the
  library loads) puts them to sleep at once.

``blas_threads`` is an intrinsic calling OpenBLAS's ``openblas_set_num_threads_local`` through a
symbol registered with LLVM in every process (:func:`_register`), so numba's disk cache keeps
code that calls it: a ctypes pointer would be an address of one process. Without that function
(another BLAS) the symbol is a no-op.
"""

from __future__ import annotations

import _ctypes
import ctypes
import os
import threading
import time

from llvmlite import binding as _llvm
from llvmlite import ir
from numba import cfunc, types
from numba.core import cgutils
from numba.core.extending import intrinsic

__all__ = ["SMALL_DOT_MACS", "SAMPLE_S", "apply", "blas_threads", "usable_threads"]

#: Products with fewer multiply-adds (batch * M * N * K) run single-threaded.
SMALL_DOT_MACS = 1 << 23
#: How old the load figure may be before it is sampled again, in seconds.
SAMPLE_S = 0.2

_SYMBOL = "pjrt_hub_numba_cpu_blas_threads_local"


@cfunc(types.int32(types.int32), cache=True)
def _no_blas_threads(n):  # pragma: no cover - compiled, not run by Python
    return 0


def _openblas_local() -> "_ctypes.CFuncPtr | None":
    """``openblas_set_num_threads_local`` of the BLAS numba calls (scipy's), if it has one."""
    try:
        from scipy.linalg import cython_blas

        function = ctypes.CDLL(cython_blas.__file__).openblas_set_num_threads_local
    except (ImportError, OSError, AttributeError):
        return None
    function.restype = ctypes.c_int
    function.argtypes = [ctypes.c_int]
    return function


_LOCAL = _openblas_local()


def _register() -> None:
    address = ctypes.cast(_LOCAL, ctypes.c_void_p).value if _LOCAL is not None else _no_blas_threads.address
    _llvm.add_symbol(_SYMBOL, address)


_register()


@intrinsic
def blas_threads(typingctx, n):
    """Set the BLAS threads of the calling thread to ``n``; returns the previous setting."""
    if not isinstance(n, types.Integer):
        return None

    def codegen(context, builder, sig, args):
        fnty = ir.FunctionType(ir.IntType(32), [ir.IntType(32)])
        fn = cgutils.get_or_insert_function(builder.module, fnty, _SYMBOL)
        return builder.call(fn, [context.cast(builder, args[0], sig.args[0], types.int32)])

    return types.int32(n), codegen


# -- the load --------------------------------------------------------------------------------


class _Sample:
    __slots__ = ("when", "busy", "own", "threads")

    def __init__(self) -> None:
        self.when = 0.0
        self.busy = 0.0
        self.own = 0.0
        self.threads = 0  # 0: no figure yet


_last = _Sample()
_CORES = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
_TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def _busy_seconds() -> float | None:
    """CPU seconds all processes have spent running since boot (``/proc/stat``), or None."""
    try:
        with open("/proc/stat", "rb") as fh:
            fields = fh.readline().split()
    except OSError:
        return None
    # cpu user nice system idle iowait irq softirq steal ...
    values = [int(v) for v in fields[1:9]]
    return (sum(values) - values[3] - values[4]) / _TICK


def usable_threads(limit: int) -> int:
    """The cores other processes left free lately (at least 1, at most ``limit``).

    Busy time of the whole machine minus this process's own CPU time, over the last
    :data:`SAMPLE_S` or more; until there are two samples, ``limit``."""
    now = time.monotonic()
    last = _last
    if now - last.when < SAMPLE_S and last.threads:
        return min(limit, last.threads)
    busy = _busy_seconds()
    if busy is None:
        return limit
    own = time.process_time()
    if last.when and now > last.when:
        others = max(0.0, (busy - last.busy) - (own - last.own)) / (now - last.when)
        last.threads = max(1, int(_CORES - others + 0.5))
    last.when, last.busy, last.own = now, busy, own
    return min(limit, last.threads) if last.threads else limit


_applied = threading.local()


def apply(limit: int) -> None:
    """Set numba's and OpenBLAS's threads of the calling thread for the next program run."""
    n = usable_threads(limit)
    if getattr(_applied, "n", None) == n:
        return
    import numba

    numba.set_num_threads(min(n, numba.config.NUMBA_NUM_THREADS))
    if _LOCAL is not None:
        _LOCAL(n)
    _applied.n = n
