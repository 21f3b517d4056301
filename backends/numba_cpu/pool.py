"""numba_cpu's own threads for its parallel loops: they sleep when idle and take chunks as they go.

numba compiles a ``prange`` loop into a kernel over entries of a schedule and a call to the
symbol ``numba_parallel_for``, which its threading layer (TBB, OpenMP or its workqueue) defines.
On a machine other processes keep busy, none of the three gives a program its share of the
cores (measured in .threads): OpenMP and the workqueue cut the loop into one fixed share per
thread and wait for the share of a thread the scheduler is not running; TBB's idle workers spin
with ``sched_yield`` before they sleep, and on an EEVDF kernel a thread that yielded on busy
cores waits long to run again, so the worker joins a 2 ms loop late or not at all.

This module defines ``numba_parallel_for`` again, for the threads that run numba_cpu programs
(:func:`enter`/:func:`leave` around a run) and for them only. A loop's schedule entries (the
chunks .codegen cuts, one per entry) are claimed one at a time by the calling thread and by
the pool's workers, so a thread the scheduler does not run holds the loop up by one chunk at
most, and the caller does every chunk itself if no worker comes. An idle worker spins briefly
(:data:`SPIN`) and then sleeps on a futex: it takes no CPU from the program's own thread, and
a woken thread is run soon. Any other thread's loops (a user's own ``@njit(parallel=True)``
code) go to numba's layer as before, which this module keeps as the fallback:

* :func:`install` is a no-op off Linux x86-64 (the system call numbers are that ABI's), with
  ``PJRT_HUB_NUMBA_POOL=0``, or if numba's layer could not start;
* a thread running a program while another one's loop has the pool (two devices at once) runs
  its loop alone, as does a loop asked for one thread;
* after ``fork`` the child has no workers: its loops run on the calling thread until the next
  run starts a pool of its own.

``get_thread_id`` is defined again as well, since a parallel reduction indexes its partial
results by it: a pool worker is its slot (1 and up), a thread running a program is 0, and any
other thread asks numba's layer. The pool's state is a block of 64-bit words at a symbol the
compiled code finds by name (as it does ``numba_parallel_for``), so numba's disk cache keeps
code that uses it.
"""

from __future__ import annotations

import ctypes
import os
import platform
import sys
import threading

import numpy as np
from llvmlite import binding as _llvm
from llvmlite import ir
from numba import cfunc, njit, types
from numba.core import cgutils
from numba.core.extending import intrinsic

__all__ = ["SPIN", "active", "enter", "install", "leave", "loops", "workers"]

#: Times an idle thread checks for new work, with a ``pause`` in between (~10-50 us on x86-64),
#: before it sleeps.
SPIN = 2000
#: Times the caller of a loop checks whether the other threads' chunks are done before it sleeps.
WAIT_SPIN = 2000

_STATE = "pjrt_hub_numba_cpu_pool_state"
_SYSCALL = "pjrt_hub_numba_cpu_syscall"

# The words of the state.
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
_SPINS = 18  # SPIN
_WAIT_SPINS = 19  # WAIT_SPIN
_RUNNERS = 32  # tids of threads running a program (0: a free slot)
_MAX_RUNNERS = 64
_WORKER_TIDS = _RUNNERS + _MAX_RUNNERS  # tid of worker k at _WORKER_TIDS + k, k >= 1
_MAX_WORKERS = 255
_WORDS = _WORKER_TIDS + _MAX_WORKERS + 1

_SYS_GETTID = 186
_SYS_FUTEX = 202
_FUTEX_WAIT_PRIVATE = 128
_FUTEX_WAKE_PRIVATE = 129
_GEN_MASK = 0x7FFFFFFF
_INDEX_MASK = 0xFFFFFFFF

_state = np.zeros(_WORDS, np.int64)  # lives as long as the process: compiled code points here
_state[_SPINS] = SPIN
_state[_WAIT_SPINS] = WAIT_SPIN
_llvm.add_symbol(_STATE, _state.ctypes.data)
_llvm.add_symbol(_SYSCALL, ctypes.cast(ctypes.CDLL(None).syscall, ctypes.c_void_p).value)
_i64 = ir.IntType(64)
_i32 = ir.IntType(32)
_i8p = ir.IntType(8).as_pointer()


# -- intrinsics: the state's words, atomics, system calls, calls through pointers ------------


def _word(builder: ir.IRBuilder, index: ir.Value) -> ir.Value:
    module = builder.module
    try:
        state = module.get_global(_STATE)
    except KeyError:
        state = ir.GlobalVariable(module, ir.ArrayType(_i64, _WORDS), _STATE)
    return builder.gep(state, [_i64(0), index])


def _syscall(builder: ir.IRBuilder, *args: ir.Value) -> ir.Value:
    fnty = ir.FunctionType(_i64, [_i64], var_arg=True)
    fn = cgutils.get_or_insert_function(builder.module, fnty, _SYSCALL)
    return builder.call(fn, list(args))


@intrinsic
def _load(typingctx, index):
    def codegen(context, builder, sig, args):
        return builder.load_atomic(_word(builder, args[0]), "seq_cst", 8)

    return types.int64(types.int64), codegen


@intrinsic
def _store(typingctx, index, value):
    def codegen(context, builder, sig, args):
        builder.store_atomic(args[1], _word(builder, args[0]), "seq_cst", 8)
        return context.get_dummy_value()

    return types.none(types.int64, types.int64), codegen


@intrinsic
def _add(typingctx, index, value):
    """Add ``value`` to a word; returns the old value."""
    def codegen(context, builder, sig, args):
        return builder.atomic_rmw("add", _word(builder, args[0]), args[1], "seq_cst")

    return types.int64(types.int64, types.int64), codegen


@intrinsic
def _cas(typingctx, index, expected, value):
    """Set a word to ``value`` if it holds ``expected``; returns whether it did."""
    def codegen(context, builder, sig, args):
        pair = builder.cmpxchg(_word(builder, args[0]), args[1], args[2], "seq_cst", "seq_cst")
        return builder.extract_value(pair, 1)

    return types.boolean(types.int64, types.int64, types.int64), codegen


@intrinsic
def _futex_wait(typingctx, index, expected):
    """Sleep while the low 32 bits of a word hold those of ``expected`` (or until woken)."""
    def codegen(context, builder, sig, args):
        address = builder.ptrtoint(_word(builder, args[0]), _i64)
        _syscall(builder, _i64(_SYS_FUTEX), address, _i64(_FUTEX_WAIT_PRIVATE),
                 builder.trunc(args[1], _i32), _i64(0), _i64(0), _i64(0))
        return context.get_dummy_value()

    return types.none(types.int64, types.int64), codegen


@intrinsic
def _futex_wake(typingctx, index, count):
    def codegen(context, builder, sig, args):
        address = builder.ptrtoint(_word(builder, args[0]), _i64)
        _syscall(builder, _i64(_SYS_FUTEX), address, _i64(_FUTEX_WAKE_PRIVATE), builder.trunc(args[1], _i32))
        return context.get_dummy_value()

    return types.none(types.int64, types.int64), codegen


@intrinsic
def _gettid(typingctx):
    def codegen(context, builder, sig, args):
        return _syscall(builder, _i64(_SYS_GETTID))

    return types.int64(), codegen


@intrinsic
def _pause(typingctx):
    def codegen(context, builder, sig, args):
        fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(ir.VoidType(), []),
                                            "llvm.x86.sse2.pause")
        builder.call(fn, [])
        return context.get_dummy_value()

    return types.none(), codegen


@intrinsic
def _peek(typingctx, address, index):
    """The 64-bit word at ``address + 8 * index``."""
    def codegen(context, builder, sig, args):
        base = builder.inttoptr(args[0], _i64.as_pointer())
        return builder.load(builder.gep(base, [args[1]]))

    return types.int64(types.int64, types.int64), codegen


@intrinsic
def _call_kernel(typingctx, fn, args, dims, steps, data):
    """Call a gufunc kernel: ``void fn(char **args, intp *dims, intp *steps, void *data)``."""
    def codegen(context, builder, sig, a):
        fnty = ir.FunctionType(ir.VoidType(), [_i8p.as_pointer(), _i64.as_pointer(), _i64.as_pointer(), _i8p])
        callee = builder.inttoptr(a[0], fnty.as_pointer())
        builder.call(callee, [builder.inttoptr(a[1], _i8p.as_pointer()), builder.inttoptr(a[2], _i64.as_pointer()),
                              builder.inttoptr(a[3], _i64.as_pointer()), builder.inttoptr(a[4], _i8p)])
        return context.get_dummy_value()

    return types.none(types.int64, types.int64, types.int64, types.int64, types.int64), codegen


@intrinsic
def _call_layer_for(typingctx, fn, args, dims, steps, data, ndim, count, threads):
    """Call numba's layer's ``parallel_for``."""
    def codegen(context, builder, sig, a):
        fnty = ir.FunctionType(ir.VoidType(), [_i8p] * 5 + [_i64] * 3)
        callee = builder.inttoptr(builder.load_atomic(_word(builder, _i64(_LAYER_FOR)), "seq_cst", 8),
                                  fnty.as_pointer())
        builder.call(callee, [builder.inttoptr(v, _i8p) for v in a[:5]] + list(a[5:]))
        return context.get_dummy_value()

    return types.none(*([types.int64] * 8)), codegen


@intrinsic
def _call_layer_id(typingctx):
    """numba's layer's ``get_thread_id``."""
    def codegen(context, builder, sig, args):
        fnty = ir.FunctionType(_i64, [])
        callee = builder.inttoptr(builder.load_atomic(_word(builder, _i64(_LAYER_ID)), "seq_cst", 8),
                                  fnty.as_pointer())
        return builder.call(callee, [])

    return types.int64(), codegen


# -- the pool ---------------------------------------------------------------------------------


@njit(cache=True)
def _is_runner(tid):  # pragma: no cover - compiled
    for slot in range(_MAX_RUNNERS):
        if _load(_RUNNERS + slot) == tid:
            return True
    return False


@njit(cache=True)
def _run_entries(gen, total, fn, args, dims, steps, data, ndim, count):  # pragma: no cover
    """Claim the loop's entries one at a time and run them; returns how many this thread ran."""
    arg_space = np.empty(0, np.int64)
    dim_space = np.empty(0, np.int64)
    ran = 0
    while True:
        current = _load(_NEXT)
        entry = current & _INDEX_MASK
        if (current >> 32) != gen or entry >= total:
            return ran
        if not _cas(_NEXT, current, current + 1):
            continue
        if ran == 0:  # the loop's call is only known to be this one once an entry is claimed
            arg_space = np.empty(count, np.int64)
            dim_space = np.empty(ndim + 1, np.int64)
            for d in range(ndim + 1):
                dim_space[d] = _peek(dims, d)
            dim_space[0] = 1
        for j in range(count):
            arg_space[j] = _peek(args, j) + _peek(steps, j) * entry
        _call_kernel(fn, arg_space.ctypes.data, dim_space.ctypes.data, steps, data)
        ran += 1
        if _add(_DONE, 1) + 1 == total:
            _futex_wake(_DONE, 1)


@njit(cache=True)
def _run_alone(fn, args, dims, steps, data, ndim, count):  # pragma: no cover
    arg_space = np.empty(count, np.int64)
    dim_space = np.empty(ndim + 1, np.int64)
    for d in range(ndim + 1):
        dim_space[d] = _peek(dims, d)
    total = dim_space[0]
    dim_space[0] = 1
    for entry in range(total):
        for j in range(count):
            arg_space[j] = _peek(args, j) + _peek(steps, j) * entry
        _call_kernel(fn, arg_space.ctypes.data, dim_space.ctypes.data, steps, data)


@cfunc(types.void(*([types.int64] * 8)), cache=True)
def _parallel_for(fn, args, dims, steps, data, ndim, count, threads):  # pragma: no cover
    if not _is_runner(_gettid()):
        _call_layer_for(fn, args, dims, steps, data, ndim, count, threads)
        return
    total = _peek(dims, 0)
    if threads <= 1 or total <= 1 or _load(_WORKERS) == 0 or not _cas(_BUSY, 0, 1):
        _run_alone(fn, args, dims, steps, data, ndim, count)
        return
    gen = (_load(_GEN) + 1) & _GEN_MASK
    _store(_FN, fn)
    _store(_ARGS, args)
    _store(_DIMS, dims)
    _store(_STEPS, steps)
    _store(_DATA, data)
    _store(_NDIM, ndim)
    _store(_COUNT, count)
    _store(_TOTAL, total)
    _store(_THREADS, threads)
    _store(_DONE, 0)
    _store(_NEXT, gen << 32)
    _store(_GEN, gen)
    _add(_LOOPS, 1)
    if _load(_SLEEPING) > 0:
        _futex_wake(_GEN, threads - 1)
    _run_entries(gen, total, fn, args, dims, steps, data, ndim, count)
    spins = 0
    while True:
        done = _load(_DONE)
        if done >= total:
            break
        if spins < _load(_WAIT_SPINS):
            spins += 1
            _pause()
        else:
            _futex_wait(_DONE, done)
    _store(_NEXT, (gen << 32) | _INDEX_MASK)
    _store(_BUSY, 0)


@cfunc(types.int64(), cache=True)
def _get_thread_id():  # pragma: no cover
    tid = _gettid()
    workers = _load(_WORKERS)
    for k in range(1, workers + 1):
        if _load(_WORKER_TIDS + k) == tid:
            return k
    if _is_runner(tid):
        return 0
    return _call_layer_id()


@cfunc(types.void(types.int64), cache=True)
def _worker(k):  # pragma: no cover
    _store(_WORKER_TIDS + k, _gettid())
    seen = _load(_GEN)
    while True:
        gen = _load(_GEN)
        if gen == seen:
            spins = 0
            while _load(_GEN) == seen and spins < _load(_SPINS):
                spins += 1
                _pause()
            if spins >= _load(_SPINS):
                _add(_SLEEPING, 1)
                if _load(_GEN) == seen:
                    _futex_wait(_GEN, seen)
                _add(_SLEEPING, -1)
            continue
        seen = gen
        if k >= _load(_THREADS):
            continue
        _run_entries(gen, _load(_TOTAL), _load(_FN), _load(_ARGS), _load(_DIMS), _load(_STEPS), _load(_DATA),
                     _load(_NDIM), _load(_COUNT))


# -- Python's side ----------------------------------------------------------------------------

_lock = threading.Lock()
_installed = False
_pid = 0
_threads: list[threading.Thread] = []


def _supported() -> bool:
    return sys.platform == "linux" and platform.machine() in ("x86_64", "AMD64") and \
        os.environ.get("PJRT_HUB_NUMBA_POOL", "1") != "0"


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
        if not (layer_for and layer_id):
            return False
        _state[_LAYER_FOR] = layer_for
        _state[_LAYER_ID] = layer_id
        _llvm.add_symbol("numba_parallel_for", _parallel_for.address)
        _llvm.add_symbol("get_thread_id", _get_thread_id.address)
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
    _state[_WORKER_TIDS:] = 0
    _state[_RUNNERS:_RUNNERS + _MAX_RUNNERS] = 0
    _state[_BUSY] = 0
    _state[_SLEEPING] = 0
    _state[_THREADS] = 0
    worker = ctypes.CFUNCTYPE(None, ctypes.c_int64)(_worker.address)
    started = []
    for k in range(1, count + 1):
        thread = threading.Thread(target=worker, args=(k,), name=f"pjrt-hub-numba-{k}", daemon=True)
        thread.start()
        started.append(thread)
    _threads[:] = started
    _pid = os.getpid()
    _state[_WORKERS] = count


def enter() -> int:
    """Mark the calling thread as running a program (starting the pool's workers the first
    time); returns its slot for :func:`leave`, or -1 where its loops go to numba's layer."""
    if not install():
        return -1
    with _lock:
        if _pid != os.getpid():
            _start(min(_MAX_WORKERS, max(0, _cores() - 1)))
        tid = threading.get_native_id()
        for slot in range(_MAX_RUNNERS):
            if _state[_RUNNERS + slot] == 0:
                _state[_RUNNERS + slot] = tid
                return slot
    return -1  # more threads running programs at once than slots: numba's layer takes the rest


def leave(slot: int) -> None:
    if slot >= 0:
        _state[_RUNNERS + slot] = 0


def active() -> bool:
    """Whether this process's programs run their loops on the pool."""
    return _installed and _pid == os.getpid()


def _cores() -> int:
    import numba

    return int(numba.config.NUMBA_NUM_THREADS)
