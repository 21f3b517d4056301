"""numba_cpu's pool for the parallel loops of its programs (backends/numba_cpu/pool.py): loops of
threads running a program share their chunks with the pool's workers, other threads' loops stay
on numba's layer, reductions see thread ids in range, and two runs at once or a fork keep
their results."""

from __future__ import annotations

import subprocess
import sys
import threading

import numba
import numpy as np
import pytest

from numba import types
from numba.core.extending import intrinsic
from numba.np.ufunc.parallel import _iget_num_threads

from pjrt_hub.backends.numba_cpu import pool, threads

if not pool.install():
    pytest.skip("the pool runs on Linux x86-64 only", allow_module_level=True)
from pjrt_hub.backends.numba_cpu import _pool_code  # noqa: E402 - compiled only where the pool runs

CHUNKS = 32
_WAIT = 20_000_000  # system calls chunk 0 waits for another thread's chunk at most (~2-5 s)


@intrinsic
def _read_now(typingctx, flag):
    """``flag[0]`` (int64) loaded from memory at each call: an atomic load, which the compiler
    neither hoists out of a loop nor keeps in a register (a plain read of it was hoisted)."""
    def codegen(context, builder, sig, args):
        array = context.make_array(sig.args[0])(context, builder, args[0])
        return builder.load_atomic(array.data, "seq_cst", 8)

    return types.int64(flag), codegen


@numba.njit(parallel=True, cache=False, nogil=True)
def _who_runs(ids, flag):
    """Record ``get_thread_id`` per chunk. Chunk 0 waits (bounded) until some chunk other than
    it has run, so it ends early only if another thread took a chunk meanwhile."""
    for c in numba.prange(CHUNKS):
        ids[c] = numba.get_thread_id()
        if c == 0:
            n = 0
            while _read_now(flag) == 0 and n < _WAIT:
                n += 1
                _pool_code._gettid()
        else:
            flag[0] = 1


@numba.njit(parallel=True, cache=False, nogil=True)
def _total(x):
    # A parfor reduction over chunks, as the generated code's loops are: a program's thread
    # runs one task per iteration (threads.apply), so a prange over every element would be a
    # million tasks. Exact for integers in float64 in any order.
    s = 0.0
    for c in numba.prange(CHUNKS):
        part = 0.0
        for i in range(c * x.size // CHUNKS, (c + 1) * x.size // CHUNKS):
            part += x[i]
        s += part
    return s


@numba.njit(parallel=True, cache=False, nogil=True)
def _scaled(x, out):
    for c in numba.prange(CHUNKS):
        lo, hi = c * x.size // CHUNKS, (c + 1) * x.size // CHUNKS
        for i in range(lo, hi):
            out[i] = np.sqrt(x[i]) * 3.0 + 1.0


@numba.njit(cache=False, nogil=True)
def _num_threads():
    # What a parallel reduction sizes its partial results by (the symbol get_num_threads;
    # numba.get_num_threads() in compiled code asks numba's layer directly).
    return _iget_num_threads()


def _as_program_thread(fn, *args, busy: bool | None = None):
    """Run ``fn`` as a program run does: the thread's settings applied, and put back after;
    ``busy`` says what the machine's load is taken to be (None: as measured)."""
    usable = threads.usable_threads
    if busy is not None:
        threads.usable_threads = lambda limit: 1 if busy else limit
    try:
        before = threads.apply(numba.config.NUMBA_NUM_THREADS)
    finally:
        threads.usable_threads = usable
    try:
        return fn(*args)
    finally:
        threads.restore(before)


@pytest.mark.skipif(numba.config.NUMBA_NUM_THREADS < 2, reason="needs two threads")
def test_a_program_threads_loop_is_shared_with_the_pool_and_a_user_threads_loop_is_not():
    ids, flag = np.full(CHUNKS, -1, np.int64), np.zeros(1, np.int64)
    loops = pool.loops()
    _as_program_thread(_who_runs, ids, flag, busy=False)
    assert pool.loops() > loops and pool.workers() == numba.config.NUMBA_NUM_THREADS - 1 + pool.SPARE
    # Whichever thread took chunk 0 waited in it for another thread's chunk: the caller (id 0)
    # and a worker (id >= 1) both ran chunks; on an idle machine, not the spare.
    assert (ids == 0).any() and (ids >= 1).any(), ids
    assert ((ids >= 0) & (ids < numba.config.NUMBA_NUM_THREADS)).all(), ids
    # The same loop from a thread that runs no program goes to numba's layer.
    ids[:], flag[:] = -1, 0
    before = pool.loops()
    _who_runs(ids, flag)
    assert (ids >= 0).all()
    if threading.active_count() == 1 + pool.workers():  # no other thread could run a program meanwhile
        assert pool.loops() == before


@pytest.mark.parametrize("busy", [False, True])
def test_a_reduction_on_the_pool_indexes_its_partial_results_in_range(busy):
    """Busy, the loops take the spare as a third thread: numba sizes the partial results by the
    count the pool's get_num_threads gives (numba's plus the extra), and the spare's id is in it."""
    x = np.arange(1 << 20, dtype=np.float64)
    loops = pool.loops()
    for _ in range(20):
        assert _as_program_thread(_total, x, busy=busy) == x.sum()
    assert pool.loops() > loops or numba.config.NUMBA_NUM_THREADS < 2


@pytest.mark.skipif(numba.config.NUMBA_NUM_THREADS < 2, reason="needs two threads")
def test_a_busy_machine_gives_a_programs_loops_the_spare_thread_and_only_for_that_run():
    n = numba.config.NUMBA_NUM_THREADS
    assert _as_program_thread(_num_threads, busy=True) == n + pool.SPARE
    assert _as_program_thread(_num_threads, busy=False) == n
    assert _num_threads() == n  # not a program's thread, or after the run: numba's own count
    for _ in range(10):
        ids, flag = np.full(CHUNKS, -1, np.int64), np.zeros(1, np.int64)
        _as_program_thread(_who_runs, ids, flag, busy=True)
        assert ((ids >= 0) & (ids < n + pool.SPARE)).all(), ids
        assert (ids >= 1).any(), ids  # a thread besides the caller ran a chunk


def test_two_program_threads_at_once_both_get_their_results():
    x = np.random.default_rng(0).random(1 << 20)
    want = np.sqrt(x) * 3.0 + 1.0
    errors: list[str] = []

    def run() -> None:
        out = np.empty_like(x)
        for _ in range(30):
            out[:] = 0
            _as_program_thread(_scaled, x, out)
            if not np.array_equal(out, want):
                errors.append("wrong result")

    workers = [threading.Thread(target=run) for _ in range(3)]
    for w in workers:
        w.start()
    for w in workers:
        w.join(timeout=120)
    assert not any(w.is_alive() for w in workers) and errors == []


def test_a_forked_child_runs_its_loops_and_starts_a_pool_of_its_own():
    script = (
        "import os, numba, numpy as np\n"
        "from pjrt_hub.backends.numba_cpu import pool, threads\n"
        "@numba.njit(parallel=True, cache=False, nogil=True)\n"
        "def f(x, out):\n"
        "    for c in numba.prange(16):\n"
        "        for i in range(c * x.size // 16, (c + 1) * x.size // 16):\n"
        "            out[i] = x[i] * 2.0\n"
        "def run():\n"
        "    x = np.arange(1 << 20, dtype=np.float64); out = np.zeros_like(x)\n"
        "    before = threads.apply(numba.config.NUMBA_NUM_THREADS)\n"
        "    try:\n"
        "        f(x, out)\n"
        "    finally:\n"
        "        threads.restore(before)\n"
        "    return bool(np.array_equal(out, x * 2.0))\n"
        "assert run()\n"
        "pid = os.fork()\n"
        "if pid == 0:\n"
        "    os._exit(0 if run() and run() and pool.workers() == numba.config.NUMBA_NUM_THREADS - 1 + pool.SPARE else 3)\n"
        "_, status = os.waitpid(pid, 0)\n"
        "print('child', os.waitstatus_to_exitcode(status), 'parent', run())\n")
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=180)
    assert out.stdout.split() == ["child", "0", "parent", "True"], out.stderr


def test_a_programs_parallel_loops_run_on_the_pool(compiler):
    text = ("func.func @main(%a: tensor<2048x1024xf32>) -> tensor<2048x1024xf32> {\n"
            "  %0 = stablehlo.sqrt %a : tensor<2048x1024xf32>\n"
            "  return %0 : tensor<2048x1024xf32>\n}\n")
    program = compiler.compile(text)
    assert "prange(" in program.source
    a = np.linspace(0, 9, 2048 * 1024, dtype=np.float32).reshape(2048, 1024)
    loops = pool.loops()
    (got,) = program.run([a])
    np.testing.assert_array_equal(got, np.sqrt(a))
    assert pool.loops() > loops or numba.config.NUMBA_NUM_THREADS < 2
