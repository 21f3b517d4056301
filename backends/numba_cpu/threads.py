"""How many threads a numba_cpu program's parallel work uses, decided when it runs.

Two thread pools do the parallel work of a program: numba's (the ``prange`` kernels) and
OpenBLAS's (``dot_general`` goes through numba's ``np.dot`` to the BLAS scipy ships). When other
processes keep the cores busy, the scheduler runs each of a pool's threads part of the time, and
a pool that splits its work into one fixed share per thread waits, at the end of every parallel
loop, for the share of a thread it is not running: a time slice, milliseconds, many times what
a short loop or product takes on its own. A pool that steals work does not wait (XLA's does
that), and giving up a thread gives up that thread's share of the cores. What these choices
were measured against is in docs/measurements.md ("Under load"). So:

* numba's loops run on numba_cpu's own pool (.pool): the threads running programs claim each
  loop's chunks (:data:`~.codegen.CHUNKS_PER_THREAD` per thread) one at a time with the pool's
  workers, which sleep on a futex when idle. TBB (the ``tbb`` wheel, a dependency on Linux
  x86-64; :func:`_load_tbb` makes its library loadable, since numba looks for it by name only)
  stays numba's layer for every other thread, and for the programs too where the pool is off
  (``PJRT_HUB_NUMBA_POOL=0``, or off Linux x86-64). An idle oneTBB worker spins with
  ``sched_yield`` before it sleeps, and on an EEVDF kernel a thread that yields while the cores
  are contended waits long to run again, so a loaded loop waits for TBB's worker where the
  pool's caller would have done the chunks itself. A memory-bound program still slows under
  load on the pool, and more chunks per loop do not help it: a machine may serve a large working
  set from cache only while runs come back to back (``benchmarks/time_slicing.py``). When a run
  finds cores busy (:func:`usable_threads`), its loops take a spare worker as well
  (.pool.set_extra): the scheduler shares the cores among runnable threads, so three of ours
  next to two spinners get more of them than two do, as XLA's pool does.
  A thread waiting for an execution runs it itself when it can
  (.cpu_runtime's devices), which saves the wake-up of the device's thread, that a loaded
  machine runs late as well. Where the kernel shares the cores among sessions first and the
  neighbours have sessions of their own (autogroup), two cores and two such neighbours leave a
  program 2/3 of a core, and every program that keeps both cores busy takes 3x or more, XLA's
  as well (``bench --under-load``'s module docstring). On OpenMP or numba's workqueue with the pool off, the shares are fixed and
  a busy machine gets fewer threads, as below for OpenBLAS;
* OpenBLAS gives a float product other bits on several of its threads than on one (its
  threaded driver cuts the contracted dimension otherwise, and its AVX2 single-precision kernel
  sums some tiles in two parts: :func:`.kernels.dot_row_blocks`), and the eager tier must give
  the compiled code's bits whatever the load, so no product runs on a count of OpenBLAS's
  threads that the load chose. One large enough to share runs in row blocks, up to one per
  thread, each one BLAS call on one thread, as the chunks of a parallel loop on the pool, busy
  machine or idle: a block is run by whichever thread is free, and a product whose other thread
  never comes takes its one-thread time, where OpenBLAS's fixed shares wait for it. Where
  OpenBLAS's threads cannot be set per call (another BLAS), :func:`apply` has the blocks run
  in sequence (:func:`set_dot_blocks`, which the generated code reads with
  :func:`dot_in_blocks`), each on the BLAS's own threads, which would otherwise nest in numba's.
  A small product (under :data:`SMALL_DOT_MACS`, ~0.1 ms on one core) runs on the calling thread
  alone: the generated code brackets it with ``blas_threads(1)`` and a restore, so waking a pool
  costs it nothing and a busy machine cannot stall it. Products that are not cut (too few rows
  per thread, a transposed left side, one column) run on as many of OpenBLAS's threads as the
  program was compiled for, busy machine or not: a large one (:data:`LARGE_DOT_MACS` and more)
  through the generated code's own ``blas_threads``, one in between through :func:`apply`, which
  sets them before each run of a program, while :func:`restore` puts back the caller's after it
  (numba's settings are per thread, OpenBLAS's count is the process's: see below);
* OpenBLAS's idle workers would otherwise spin for ~0.1 s after each call, competing with the
  program's next kernel; ``OPENBLAS_THREAD_TIMEOUT`` (set in the package ``__init__``, before the
  library loads) puts them to sleep at once.

``blas_threads`` is an intrinsic calling OpenBLAS's ``openblas_set_num_threads_local`` through a
symbol registered with LLVM in every process (:func:`_register`), so numba's disk cache keeps
code that calls it: a ctypes pointer would be an address of one process. Without that function
(another BLAS) the symbol is a no-op. In scipy's OpenBLAS build (0.3.30) the count it sets is
the process's, not the calling thread's (one thread sets 1, another reads 1 back): two programs
running at once on two threads set it for each other (their results stay the same; a product
may get the other's count of threads). The row-block flag is one word at a symbol too.
"""

from __future__ import annotations

import _ctypes
import ctypes
import os
import time

from llvmlite import binding as _llvm
from llvmlite import ir
from numba import cfunc, types
from numba.core import cgutils
from numba.core.extending import intrinsic

from . import pool
from .kernels import LARGE_DOT_MACS, SMALL_DOT_MACS

__all__ = ["LARGE_DOT_MACS", "SMALL_DOT_MACS", "SAMPLE_S", "apply", "blas_threads", "dot_in_blocks", "restore",
           "set_dot_blocks", "usable_threads", "work_stealing"]

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


#: Symbol of one 64-bit word: nonzero while runs share large products' row blocks among their
#: threads (:func:`dot_in_blocks`); allocated once and never freed (compiled code reads it).
_BLOCKS_SYMBOL = "pjrt_hub_numba_cpu_dot_blocks"
_blocks_word: "ctypes.c_int64 | None" = None


def _register() -> None:
    global _blocks_word
    address = ctypes.cast(_LOCAL, ctypes.c_void_p).value if _LOCAL is not None else _no_blas_threads.address
    _llvm.add_symbol(_SYMBOL, address)
    word = pool.static_words(1)
    if not word:
        raise MemoryError("pjrt-hub numba_cpu: no memory for the dot-blocks flag")
    _blocks_word = ctypes.c_int64.from_address(word)
    _llvm.add_symbol(_BLOCKS_SYMBOL, word)


_register()


def set_dot_blocks(on: bool) -> None:
    """Whether the next runs share their large products' row blocks among their threads, or
    run them in sequence (:func:`apply` sets it before each run; process-wide)."""
    assert _blocks_word is not None
    _blocks_word.value = 1 if on else 0


@intrinsic
def dot_in_blocks(typingctx):
    """Whether this run shares its large products' row blocks among its threads
    (:func:`set_dot_blocks`)."""

    def codegen(context, builder, sig, args):
        module = builder.module
        try:
            word = module.get_global(_BLOCKS_SYMBOL)
        except KeyError:
            word = ir.GlobalVariable(module, ir.IntType(64), _BLOCKS_SYMBOL)
        return builder.icmp_signed("!=", builder.load(word), ir.Constant(ir.IntType(64), 0))

    return types.boolean(), codegen


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


# -- numba's threading layer ------------------------------------------------------------------

#: The cores this process may run on.
_CORES = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def _load_tbb() -> bool:
    """Make Intel TBB (the ``tbb`` wheel) loadable, so that numba picks its TBB threading layer.

    numba tries TBB first, but its TBB layer links ``libtbb.so.12`` by name, and the wheel puts
    that library in the environment's ``lib`` folder, off the loader's path; loading it here,
    globally, before numba starts its threads, lets numba's own lookup find it. Does nothing if
    the threads already run, if the user chose OpenMP or the workqueue
    (``NUMBA_THREADING_LAYER``), or without the wheel; numba then falls back to OpenMP or its
    workqueue as before. The process then has this ``libtbb.so.12``: an extension that needs a
    newer TBB under the same name gets this one.

    Nor in a process allowed a single core (``taskset -c 0``, a one-CPU cpuset) unless the user
    asked for TBB: there TBB starts no worker, and numba's TBB layer can then wait for ever at
    interpreter exit, in its ``unload_tbb``, for a task no thread runs (a process pinned to one
    core that had run a parallel numba_cpu program did, with numba 0.68.1 and TBB 2023.2.0).
    OpenMP and numba's workqueue exit."""
    import numba
    from numba.np.ufunc import parallel

    layer = str(numba.config.THREADING_LAYER).lower()
    # "safe" is TBB alone; "default", "threadsafe" and "forksafe" try it first (numba's order).
    if parallel._is_initialized or layer in ("omp", "workqueue"):
        return False
    if _CORES < 2 and layer not in ("tbb", "safe"):
        return False
    try:
        from importlib.metadata import PackageNotFoundError, distribution

        dist = distribution("tbb")
        paths = [f for f in dist.files or () if f.name == "libtbb.so.12"]
        if not paths:
            return False
        ctypes.CDLL(str(dist.locate_file(paths[0])), mode=ctypes.RTLD_GLOBAL)
    except (PackageNotFoundError, OSError):
        return False
    return True


_load_tbb()
pool.install()


def work_stealing() -> bool:
    """Whether the program's parallel loops run on threads that take the work of a thread the
    scheduler is not running: numba_cpu's pool (.pool) or TBB (OpenMP's and the workqueue's
    shares are fixed). Starts numba's threads if they were not running yet."""
    import numba
    from numba.np.ufunc import parallel

    parallel._launch_threads()
    return pool.install() or numba.threading_layer() == "tbb"


# -- the load --------------------------------------------------------------------------------


class _Sample:
    __slots__ = ("when", "busy", "own", "threads")

    def __init__(self) -> None:
        self.when = 0.0
        self.busy = 0.0
        self.own = 0.0
        self.threads = 0  # 0: no figure yet


_last = _Sample()
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


def _runnable_now() -> int | None:
    """Threads runnable on the machine at this instant (``/proc/loadavg``'s fourth field, this
    one included), or None."""
    try:
        with open("/proc/loadavg", "rb") as fh:
            return int(fh.read().split()[3].split(b"/")[0])
    except (OSError, ValueError, IndexError):
        return None


def usable_threads(limit: int) -> int:
    """The cores other processes left free lately (at least 1, at most ``limit``).

    Busy time of the whole machine minus this process's own CPU time, over the last
    :data:`SAMPLE_S` or more, and at most the other threads runnable now: the average may hold
    a burst of other work that has ended since (another plugin's turn in a benchmark, a build
    step), which would otherwise cost the next runs their threads (or cut their products into
    row blocks as if the machine were still busy). Until there are two samples, ``limit``."""
    now = time.monotonic()
    last = _last
    if now - last.when < SAMPLE_S and last.threads:
        return min(limit, last.threads)
    busy = _busy_seconds()
    if busy is None:
        return limit
    own = time.process_time()
    if last.when and now > last.when:
        window = now - last.when
        others = max(0.0, (busy - last.busy) - (own - last.own)) / window
        runnable = _runnable_now()
        if runnable is not None:
            others = min(others, float(max(0, runnable - 1)))
        last.threads = max(1, int(_CORES - others + 0.5))
    last.when, last.busy, last.own = now, busy, own
    return min(limit, last.threads) if last.threads else limit


#: Whether numba's layer steals work (:func:`work_stealing`), once known.
_stealing: bool | None = None


def apply(limit: int) -> tuple[int, int, int, int]:
    """Set numba's threads of the calling thread for the next program run, OpenBLAS's (the
    process's count in scipy's build), whether large products' row blocks run in parallel
    (:func:`set_dot_blocks`), and the thread's parallel chunk size to one iteration per task
    where threads steal work.

    Returns what the caller had (numba's threads, OpenBLAS's, the chunk size; -1: not set) and
    the thread's slot in the pool (.pool.enter), which the run puts back with :func:`restore`:
    the user's own parallel loops and BLAS calls on this thread keep their settings."""
    global _stealing
    import numba

    if _stealing is None:
        _stealing = work_stealing()  # the layer is chosen once per process
    n = usable_threads(limit)
    numba_before = numba.get_num_threads()
    # Where threads steal work (the pool, or TBB) a busy machine costs numba's loops only the
    # cores it takes: they keep every thread (one fewer would give up that thread's share of
    # the cores). A fixed share is waited for, so on the other layers a busy machine gets fewer.
    numba.set_num_threads(min(limit if _stealing else n, numba.config.NUMBA_NUM_THREADS))
    # The program's count whatever the load: a product's bits depend on it (.kernels.dot_row_blocks).
    blas_before = _LOCAL(limit) if _LOCAL is not None else -1
    # The row blocks in parallel, busy machine or idle; in sequence with a BLAS whose threads
    # cannot be set per call, which would nest its threads in numba's.
    set_dot_blocks(_LOCAL is not None)
    # Each chunk a task of its own, for idle threads to take.
    chunks_before = numba.set_parallel_chunksize(1) if _stealing else -1
    slot = pool.enter()
    # Busy cores: a spare thread on this run's loops gets the program a larger share of them,
    # as XLA's pool has (.pool.set_extra).
    pool.set_extra(slot, 1 if n < limit else 0)
    return numba_before, blas_before, chunks_before, slot


def restore(before: tuple[int, int, int, int]) -> None:
    """Put back the calling thread's settings :func:`apply` returned."""
    import numba

    numba_before, blas_before, chunks_before, slot = before
    pool.leave(slot)
    numba.set_num_threads(numba_before)
    if blas_before > 0 and _LOCAL is not None:
        _LOCAL(blas_before)
    if chunks_before >= 0:
        numba.set_parallel_chunksize(chunks_before)
