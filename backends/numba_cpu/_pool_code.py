"""The compiled side of .pool: intrinsics, the claim loop, ``numba_parallel_for``,
``get_thread_id``, ``get_num_threads`` and the workers' loop, as numba cfuncs (Linux x86-64 only: the system call
numbers and ``pause`` are that ABI's, so only :func:`.pool.install` imports this module, after
checking the platform and registering the symbols it uses)."""

from __future__ import annotations

from llvmlite import ir
from numba import cfunc, njit, types
from numba.core import cgutils
from numba.core.extending import intrinsic

from .pool import (_ARGS, _BUSY, _COUNT, _DATA, _DIMS, _DONE, _FN, _GEN, _GEN_MASK, _INDEX_MASK,
                   _LAYER_FOR, _LAYER_ID, _LAYER_NUM, _LOOPS, _MAX_ARGS, _MAX_DIMS, _MAX_RUNNERS,
                   _MAX_WORKERS, _NDIM, _NEXT, _RUNNER_EXTRA, _RUNNERS, _SLEEPING, _STATE, _STEPS,
                   _SYSCALL, _THREADS, _TOTAL, _WAITING, _WORDS, _WORKER_TIDS, _WORKERS)

#: Times an idle thread checks for new work, with a ``pause`` in between (~10-50 us on x86-64),
#: before it sleeps.
SPIN = 2000
#: Times the caller of a loop checks whether the other threads' chunks are done before it sleeps.
WAIT_SPIN = 2000

_SYS_GETTID = 186
_SYS_FUTEX = 202
_FUTEX_WAIT_PRIVATE = 128
_FUTEX_WAKE_PRIVATE = 129

_i64 = ir.IntType(64)
_i32 = ir.IntType(32)
_i8p = ir.IntType(8).as_pointer()


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
def _poke(typingctx, address, index, value):
    """Store ``value`` at ``address + 8 * index``."""
    def codegen(context, builder, sig, args):
        base = builder.inttoptr(args[0], _i64.as_pointer())
        builder.store(args[2], builder.gep(base, [args[1]]))
        return context.get_dummy_value()

    return types.none(types.int64, types.int64, types.int64), codegen


@intrinsic
def _scratch(typingctx, words):
    """The address of ``words`` (a constant) 64-bit words on the calling function's stack,
    allocated once at its entry: no heap, so nothing can fail after an entry is claimed."""
    if not isinstance(words, types.IntegerLiteral):
        return None
    size = words.literal_value

    def codegen(context, builder, sig, args):
        return builder.ptrtoint(cgutils.alloca_once(builder, _i64, size=size), _i64)

    return types.int64(words), codegen


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


def _layer_callee(builder: ir.IRBuilder, word: int, fnty: ir.FunctionType) -> ir.Value:
    """The numba layer function whose address is at state ``word``, as a ``fnty`` pointer."""
    address = builder.load_atomic(_word(builder, _i64(word)), "seq_cst", 8)
    return builder.inttoptr(address, fnty.as_pointer())


@intrinsic
def _call_layer_for(typingctx, fn, args, dims, steps, data, ndim, count, threads):
    """Call numba's layer's ``parallel_for``."""
    def codegen(context, builder, sig, a):
        callee = _layer_callee(builder, _LAYER_FOR, ir.FunctionType(ir.VoidType(), [_i8p] * 5 + [_i64] * 3))
        builder.call(callee, [builder.inttoptr(v, _i8p) for v in a[:5]] + list(a[5:]))
        return context.get_dummy_value()

    return types.none(*([types.int64] * 8)), codegen


def _layer_query(name: str, word: int, doc: str):
    """An intrinsic calling the numba layer function at state ``word``, which takes no
    arguments and returns an int64."""
    def typer(typingctx):
        def codegen(context, builder, sig, args):
            return builder.call(_layer_callee(builder, word, ir.FunctionType(_i64, [])), [])

        return types.int64(), codegen

    typer.__name__, typer.__doc__ = name, doc
    return intrinsic(typer)


_call_layer_id = _layer_query("_call_layer_id", _LAYER_ID, "numba's layer's ``get_thread_id``.")
_call_layer_num = _layer_query("_call_layer_num", _LAYER_NUM,
                               "numba's layer's ``get_num_threads`` (the calling thread's count).")


@njit(cache=True)
def _runner_slot(tid):  # pragma: no cover
    """The slot of the thread ``tid`` among those running a program, or -1."""
    for slot in range(_MAX_RUNNERS):
        if _load(_RUNNERS + slot) == tid:
            return slot
    return -1


@njit(cache=True)
def _copy_dims(dim_space, dims, ndim):  # pragma: no cover
    """A schedule entry's dimensions: the loop's, with one entry in the first."""
    for d in range(1, ndim + 1):
        _poke(dim_space, d, _peek(dims, d))
    _poke(dim_space, 0, 1)


@njit(cache=True)
def _call_entry(entry, fn, args, steps, data, count, arg_space, dim_space):  # pragma: no cover
    """Run schedule entry ``entry``: the arguments moved to it, as numba's layers do."""
    for j in range(count):
        _poke(arg_space, j, _peek(args, j) + _peek(steps, j) * entry)
    _call_kernel(fn, arg_space, dim_space, steps, data)


@njit(cache=True)
def _run_entries(gen, total, fn, args, dims, steps, data, ndim, count):  # pragma: no cover
    """Claim the loop's entries one at a time and run them; returns how many this thread ran."""
    arg_space = _scratch(_MAX_ARGS)
    dim_space = _scratch(_MAX_DIMS)
    ran = 0
    while True:
        current = _load(_NEXT)
        entry = current & _INDEX_MASK
        if (current >> 32) != gen or entry >= total:
            return ran
        if not _cas(_NEXT, current, current + 1):
            continue
        if ran == 0:  # the loop's call is only known to be this one once an entry is claimed
            _copy_dims(dim_space, dims, ndim)
        _call_entry(entry, fn, args, steps, data, count, arg_space, dim_space)
        ran += 1
        if _add(_DONE, 1) + 1 == total and _load(_WAITING) != 0:
            _futex_wake(_DONE, 1)


@njit(cache=True)
def _run_alone(fn, args, dims, steps, data, ndim, count):  # pragma: no cover
    arg_space = _scratch(_MAX_ARGS)
    dim_space = _scratch(_MAX_DIMS)
    _copy_dims(dim_space, dims, ndim)
    for entry in range(_peek(dims, 0)):
        _call_entry(entry, fn, args, steps, data, count, arg_space, dim_space)


@cfunc(types.void(*([types.int64] * 8)), cache=True)
def _parallel_for(fn, args, dims, steps, data, ndim, count, threads):  # pragma: no cover
    if _runner_slot(_gettid()) < 0 or count > _MAX_ARGS or ndim + 1 > _MAX_DIMS:
        # numba's layer runs at most its own count of threads (a runner's extra is the pool's).
        _call_layer_for(fn, args, dims, steps, data, ndim, count, min(threads, _call_layer_num()))
        return
    total = _peek(dims, 0)
    threads = min(threads, _load(_WORKERS) + 1)  # no more threads than the pool has (.pool.set_extra)
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
    if _load(_SLEEPING) > 0:  # all of them: one may be a worker this loop is not for
        _futex_wake(_GEN, _MAX_WORKERS)
    _run_entries(gen, total, fn, args, dims, steps, data, ndim, count)
    spins = 0
    while True:
        done = _load(_DONE)
        if done >= total:
            break
        if spins < WAIT_SPIN:
            spins += 1
            _pause()
        else:
            _store(_WAITING, 1)
            if _load(_DONE) == done:
                _futex_wait(_DONE, done)
            _store(_WAITING, 0)
    _store(_NEXT, (gen << 32) | _INDEX_MASK)
    _store(_BUSY, 0)


@cfunc(types.int64(), cache=True)
def _get_thread_id():  # pragma: no cover
    tid = _gettid()
    workers = _load(_WORKERS)
    for k in range(1, workers + 1):
        if _load(_WORKER_TIDS + k) == tid:
            return k
    if _runner_slot(tid) >= 0:
        return 0
    return _call_layer_id()


@cfunc(types.int64(), cache=True)
def _get_num_threads():  # pragma: no cover
    n = _call_layer_num()
    if n > 1:
        slot = _runner_slot(_gettid())
        if slot >= 0:
            return n + _load(_RUNNER_EXTRA + slot)
    return n


@cfunc(types.void(types.int64), cache=True)
def _worker(k):  # pragma: no cover
    _store(_WORKER_TIDS + k, _gettid())
    seen = _load(_GEN)
    # Spins before sleeping: none after a loop that was not for this worker (the spare on an
    # idle machine, woken with the others), so that it takes no CPU from the loop's threads.
    spin = SPIN
    while True:
        gen = _load(_GEN)
        if gen == seen:
            spins = 0
            while _load(_GEN) == seen and spins < spin:
                spins += 1
                _pause()
            if spins >= spin:
                _add(_SLEEPING, 1)
                if _load(_GEN) == seen:
                    _futex_wait(_GEN, seen)
                _add(_SLEEPING, -1)
            continue
        seen = gen
        if k >= _load(_THREADS):
            spin = 0
            continue
        spin = SPIN
        _run_entries(gen, _load(_TOTAL), _load(_FN), _load(_ARGS), _load(_DIMS), _load(_STEPS), _load(_DATA),
                     _load(_NDIM), _load(_COUNT))
