"""Threads of numba_cpu programs: small products on the calling thread, the rest sized by the
load, mid-size programs run inline (no hand-off to a worker thread)."""

from __future__ import annotations

import os

import numba
import numpy as np
import pytest

from pjrt_hub import PluginRegistry, RegistrySettings
from pjrt_hub.abi import Program
from pjrt_hub.backends.numba_cpu import kernels, pool, threads
from pjrt_hub.backends.numba_cpu.compiler import NumbaCompiler


def _matmul(m: int, k: int, n: int) -> str:
    return (f"func.func @main(%a: tensor<{m}x{k}xf32>, %b: tensor<{k}x{n}xf32>) -> tensor<{m}x{n}xf32> {{\n"
            f"  %0 = stablehlo.dot_general %a, %b, contracting_dims = [1] x [0] : "
            f"(tensor<{m}x{k}xf32>, tensor<{k}x{n}xf32>) -> tensor<{m}x{n}xf32>\n"
            f"  return %0 : tensor<{m}x{n}xf32>\n}}\n")


def test_small_products_run_single_threaded_mid_ones_follow_the_runtime_large_ones_use_all(numba_cache_dir):
    compiler = NumbaCompiler(cache_dir=numba_cache_dir, num_threads=2)
    small = compiler.compile(_matmul(128, 256, 64))  # 2**21 multiply-adds
    assert "blas_threads(1)" in small.source and small._threaded is False
    # Products with too few rows for a block per thread (kernels.DOT_BLOCK_ROWS) stay on OpenBLAS.
    mid = compiler.compile(_matmul(200, 512, 1024))  # ~2**26.6
    assert "blas_threads(" not in mid.source and "in prange(" not in mid.source and mid._threaded is True
    large = compiler.compile(_matmul(128, 1024, 1024))  # 2**27: every thread, load or not
    assert "blas_threads(2)" in large.source and large._threaded is True
    rng = np.random.default_rng(0)
    for program, (m, k, n) in ((small, (128, 256, 64)), (mid, (200, 512, 1024)), (large, (128, 1024, 1024))):
        a, b = rng.normal(size=(m, k)).astype(np.float32), rng.normal(size=(k, n)).astype(np.float32)
        (got,) = program.run([a, b])
        np.testing.assert_allclose(got, a @ b, rtol=1e-4, atol=1e-3)
    if threads._LOCAL is not None:
        # The product sets every thread for itself and gives the caller back its own setting
        # (the entry called directly: a run would first set the threads for the load).
        before = threads._LOCAL(1)
        try:
            large._entry(a, b)
            assert threads._LOCAL(before) == 1
        finally:
            threads._LOCAL(before)


@pytest.mark.parametrize("threads_for", [1, 2, 3])
def test_dot_row_blocks_one_per_thread_only_where_each_block_is_worth_it(threads_for):
    rows = kernels.dot_row_blocks
    assert rows(1024, 128, 1024, 1, threads_for, False) == (threads_for if threads_for > 1 else 1)
    assert rows(1024, 128, 1024, 1, 16, False) == 1024 // kernels.DOT_BLOCK_ROWS
    assert rows(255, 4096, 1024, 1, 2, False) == 1  # no 2 blocks of 128 rows
    assert rows(1024, 1, 1 << 20, 1, 2, False) == 1  # a matrix-vector product
    assert rows(1024, 128, 1024, 1, 2, True) == 1  # the left side transposed
    assert rows(1024, 8, 1023, 1, 2, False) == 1  # under SMALL_DOT_MACS
    # Blocks big enough to stay off OpenBLAS's small-matrix kernel: 2048 x 8 x 512 is 2**23
    # multiply-adds, two blocks of 2**22 whatever the threads.
    assert rows(2048, 8, 512, 1, 16, False) == 2
    assert rows(512, 8, 512, 4, 2, False) == 1  # 2**23 in all, 2**21 per batch


@pytest.mark.parametrize("m, k, n, dtype", [(2048, 512, 8, "f32"), (2048, 512, 8, "f64"), (1000, 333, 77, "f32"),
                                            (4096, 2048, 2, "f32")])
def test_row_blocks_give_the_bits_of_one_call_for_any_thread_count(m, k, n, dtype):
    from .tier_helpers import assert_same_bits, eager_program

    text = _matmul(m, k, n).replace("f32", dtype)
    rng = np.random.default_rng(3)
    np_type = np.float32 if dtype == "f32" else np.float64
    a, b = rng.normal(size=(m, k)).astype(np_type), rng.normal(size=(k, n)).astype(np_type)
    (whole,) = eager_program(text, 1).run([a, b])
    for cut_for in (2, 3, 16, 64):
        assert_same_bits(eager_program(text, cut_for).run([a, b]), [whole], f"cut for {cut_for} threads")


_BATCHED = ("func.func @main(%a: tensor<3x512x96xf32>, %b: tensor<3x96x256xf32>) -> tensor<3x512x256xf32> {\n"
            "  %0 = stablehlo.dot_general %a, %b, batching_dims = [0] x [0], contracting_dims = [2] x [1] : "
            "(tensor<3x512x96xf32>, tensor<3x96x256xf32>) -> tensor<3x512x256xf32>\n"
            "  return %0 : tensor<3x512x256xf32>\n}\n")  # 3 * 512 * 256 * 96 multiply-adds


@pytest.mark.parametrize("text, shapes", [
    (_matmul(1024, 256, 64), ((1024, 256), (256, 64))),  # 2**24 multiply-adds
    (_matmul(1000, 333, 77), ((1000, 333), (333, 77))),  # blocks of uneven rows
    (_BATCHED, ((3, 512, 96), (3, 96, 256))),
])
def test_a_large_product_runs_in_row_blocks_on_a_busy_machine_and_on_an_idle_one(
        numba_cache_dir, monkeypatch, text, shapes):
    from .tier_helpers import assert_same_bits, eager_program

    compiler = NumbaCompiler(cache_dir=numba_cache_dir, num_threads=2)
    program = compiler.compile(text)
    # One single-threaded BLAS call per block, the blocks a parallel loop's chunks.
    assert "in prange(2):" in program.source and "blas_threads(1)" in program.source, program.source
    rng = np.random.default_rng(1)
    a, b = (rng.normal(size=s).astype(np.float32) for s in shapes)
    eager = eager_program(text, threads=2).run([a, b])
    sharing = pool.install() and numba.config.NUMBA_NUM_THREADS >= 2
    # Blocks shared among threads wherever OpenBLAS's threads can be set per call, whatever the
    # load: a product on OpenBLAS's own threads would have other bits (kernels.dot_row_blocks).
    in_blocks = threads._LOCAL is not None
    for free in (1, 2):
        # The cores other processes leave free, as the run samples them: one of two is a busy
        # machine.
        monkeypatch.setattr(threads, "usable_threads", lambda limit, free=free: min(limit, free))
        loops = pool.loops()
        (got,) = program.run([a, b])
        np.testing.assert_allclose(got, np.matmul(a, b), rtol=1e-4, atol=1e-3)
        if sharing:
            assert (pool.loops() > loops) == in_blocks, (free, pool.loops(), loops)
        # Busy or idle, the same BLAS calls: the same bits, as on the eager tier.
        assert_same_bits(eager, [got], f"{free} free core(s)")
    if threads._LOCAL is not None:
        # The entry called directly, in blocks or not, gives the caller its BLAS setting back,
        # and the same bits.
        for blocks in (True, False):
            threads.set_dot_blocks(blocks)
            before = threads._LOCAL(2)
            try:
                (got,) = program._entry(a, b)
                assert threads._LOCAL(before) == 2
            finally:
                threads._LOCAL(before)
                threads.set_dot_blocks(False)
            assert_same_bits(eager, [got], f"entry, blocks {blocks}")


def test_parallel_loops_are_cut_into_chunks_for_idle_threads_to_take(compiler):
    from pjrt_hub.backends.numba_cpu.codegen import CHUNKS_PER_THREAD

    text = ("func.func @main(%a: tensor<4096x512xf32>) -> tensor<4096x512xf32> {\n"
            "  %0 = stablehlo.exponential %a : tensor<4096x512xf32>\n"
            "  return %0 : tensor<4096x512xf32>\n}\n")
    program = compiler.compile(text)
    chunks = compiler._lowering_options(None).num_threads * CHUNKS_PER_THREAD
    assert f"in prange({chunks}):" in program.source
    a = np.linspace(-3, 3, 4096 * 512, dtype=np.float32).reshape(4096, 512)
    (got,) = program.run([a])
    np.testing.assert_allclose(got, np.exp(a), rtol=5e-7)  # within 4 ulp of numpy


@numba.njit(cache=False)
def _set_and_restore(n):
    prev = threads.blas_threads(n)
    now = threads.blas_threads(prev)
    return prev, now


def test_blas_threads_returns_the_previous_setting():
    if threads._LOCAL is None:
        pytest.skip("this BLAS has no per-thread thread count")
    prev, now = _set_and_restore(1)
    assert now == 1 and prev >= 1


def test_usable_threads_leaves_the_cores_other_processes_use(monkeypatch):
    clock = {"t": 100.0, "busy": 1000.0, "own": 5.0}
    monkeypatch.setattr(threads, "_CORES", 2)
    monkeypatch.setattr(threads, "_last", threads._Sample())
    monkeypatch.setattr(threads, "_busy_seconds", lambda: clock["busy"])
    monkeypatch.setattr(threads.time, "monotonic", lambda: clock["t"])
    monkeypatch.setattr(threads.time, "process_time", lambda: clock["own"])
    monkeypatch.setattr(threads, "_runnable_now", lambda: None)  # no instant figure: the averages

    def after(seconds, busy, own):
        clock["t"] += seconds
        clock["busy"] += busy
        clock["own"] += own
        return threads.usable_threads(8)

    assert threads.usable_threads(8) == 8  # one sample: no figure yet
    assert after(1.0, 2.0, 1.9) == 2  # this process kept both cores busy: both are usable
    assert after(0.1, 0.0, 0.0) == 2  # within SAMPLE_S: the last figure
    assert after(1.0, 2.0, 0.1) == 1  # two other processes hold the cores: this thread alone
    assert after(1.0, 1.3, 0.3) == 1  # one core taken by others
    assert after(1.0, 0.4, 0.0) == 2  # a little background work leaves both
    assert threads.usable_threads(1) == 1


def test_a_burst_of_other_work_that_has_ended_leaves_the_cores_free(monkeypatch):
    """The average holds past load (another process's turn in a benchmark): the threads
    runnable now bound it, so a burst that has ended costs no threads, and one that goes on
    still does, over a long window or a short one."""
    clock = {"t": 100.0, "busy": 1000.0, "own": 5.0}
    runnable = {"now": 1}
    monkeypatch.setattr(threads, "_CORES", 2)
    monkeypatch.setattr(threads, "_last", threads._Sample())
    monkeypatch.setattr(threads, "_busy_seconds", lambda: clock["busy"])
    monkeypatch.setattr(threads.time, "monotonic", lambda: clock["t"])
    monkeypatch.setattr(threads.time, "process_time", lambda: clock["own"])
    monkeypatch.setattr(threads, "_runnable_now", lambda: runnable["now"])

    def after(seconds, busy, now):
        clock["t"] += seconds
        clock["busy"] += busy
        runnable["now"] = now
        return threads.usable_threads(8)

    threads.usable_threads(8)
    # Others kept both cores busy for most of the last second, and have stopped: this thread
    # is the only one runnable.
    assert after(1.0, 1.6, 1) == 2
    # They go on: two of them runnable besides this thread.
    assert after(1.0, 1.6, 3) == 1
    # One of them goes on.
    assert after(1.0, 1.6, 2) == 1
    # A turn of 0.25 s that kept both cores busy and has just ended, and one that goes on.
    assert after(0.25, 0.5, 1) == 2
    assert after(0.25, 0.5, 3) == 1
    # No instant figure (no /proc/loadavg): the average.
    monkeypatch.setattr(threads, "_runnable_now", lambda: None)
    assert after(1.0, 2.0, 1) == 1


def test_runnable_now_reads_the_machine():
    n = threads._runnable_now()
    if os.path.exists("/proc/loadavg"):
        assert n is not None and n >= 1  # this thread, at least
    else:
        assert n is None


def test_mid_size_programs_run_inline(tmp_path, monkeypatch):
    """A 128x256x64 product (4 Mflop) is done when execute returns: no worker hand-off."""
    monkeypatch.setenv("PJRT_HUB_CACHE", str(tmp_path))
    registry = PluginRegistry(RegistrySettings(allowed=frozenset({"numba_cpu"})), environ={})
    client = registry.create_client("numba_cpu")
    executable = client.compile(Program(_matmul(128, 256, 64)))
    device = client.addressable_devices()[0]
    buffers = []
    for shape in ((128, 256), (256, 64)):
        transfer = client.buffer_from_host_buffer(np.ones(shape, np.float32), device=device)
        transfer.done_with_host_buffer.await_()
        buffers.append(transfer.buffer)
    result = executable.execute([buffers])
    assert result.device_complete_events[0].is_ready()
    host = result.outputs[0][0].to_host_buffer()
    host.event.await_()
    assert (host.array == 256.0).all()


def test_under_load_work_stealing_keeps_every_thread_and_fixed_shares_do_not(monkeypatch):
    limit = numba.config.NUMBA_NUM_THREADS
    if limit < 2:
        pytest.skip("one thread: nothing to give up")
    monkeypatch.setattr(threads, "usable_threads", lambda n: 1)  # other processes hold the cores
    before = numba.get_num_threads(), numba.get_parallel_chunksize()
    try:
        monkeypatch.setattr(threads, "_stealing", True)
        numba.set_parallel_chunksize(7)
        saved = threads.apply(limit)
        assert numba.get_num_threads() == limit and numba.get_parallel_chunksize() == 1
        threads.restore(saved)
        assert numba.get_parallel_chunksize() == 7 and numba.get_num_threads() == before[0]
        monkeypatch.setattr(threads, "_stealing", False)
        saved = threads.apply(limit)
        assert numba.get_num_threads() == 1 and numba.get_parallel_chunksize() == 7
        threads.restore(saved)
        assert numba.get_num_threads() == before[0]
    finally:
        numba.set_num_threads(before[0])
        numba.set_parallel_chunksize(before[1])


def test_a_run_leaves_the_callers_settings_and_keeps_to_the_threads_it_was_compiled_for(tmp_path, monkeypatch):
    """The user's own parallel loops and BLAS calls on the thread that ran a program keep their
    settings; a program compiled for one thread sets one for its run."""
    from pjrt_hub.backends.numba_cpu import NumbaCompiler

    limits = []
    apply = threads.apply
    monkeypatch.setattr(threads, "apply", lambda limit: limits.append(limit) or apply(limit))
    text = ("func.func @main(%a: tensor<4096x512xf32>) -> tensor<4096x512xf32> {\n"
            "  %0 = stablehlo.exponential %a : tensor<4096x512xf32>\n"
            "  return %0 : tensor<4096x512xf32>\n}\n")
    a = np.ones((4096, 512), np.float32)
    before = numba.get_num_threads(), numba.get_parallel_chunksize()
    blas = threads._LOCAL(1) if threads._LOCAL is not None else None  # the caller's: one thread
    try:
        numba.set_parallel_chunksize(0)
        program = NumbaCompiler(tmp_path / "two").compile(text)
        (got,) = program.run([a])
        assert got[0, 0] == np.float32(np.e)
        assert numba.get_parallel_chunksize() == 0 and numba.get_num_threads() == before[0]
        if threads._LOCAL is not None:
            assert threads._LOCAL(1) == 1
        single = NumbaCompiler(tmp_path / "one", num_threads=1).compile(text)
        assert "in prange(" in single.source and single._threads == 1
        single.run([a])
        assert limits == [min(program._threads, numba.config.NUMBA_NUM_THREADS), 1]
    finally:
        numba.set_num_threads(before[0])
        numba.set_parallel_chunksize(before[1])
        if blas is not None:
            threads._LOCAL(blas)


def test_numba_runs_its_loops_on_tbb_when_the_wheel_is_installed():
    """In a fresh process (the layer is chosen once per process): with the ``tbb`` wheel, the
    TBB layer; a layer the user chose is kept. The programs' own loops steal work on the pool
    unless it is turned off."""
    import subprocess
    import sys
    from importlib.metadata import PackageNotFoundError, version

    try:
        version("tbb")
    except PackageNotFoundError:
        pytest.skip("the tbb wheel is not installed here")
    script = ("from pjrt_hub.backends.numba_cpu import threads\n"
              "import numba\n"
              "print(threads.work_stealing(), numba.threading_layer())\n")
    env = {k: v for k, v in __import__("os").environ.items()
           if k not in ("NUMBA_THREADING_LAYER", "PJRT_HUB_NUMBA_POOL")}
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=120)
    assert out.stdout.split() == ["True", "tbb"], out.stderr
    env["NUMBA_THREADING_LAYER"] = "safe"  # TBB alone
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=120)
    assert out.stdout.split() == ["True", "tbb"], out.stderr
    env["NUMBA_THREADING_LAYER"] = "workqueue"
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=120)
    assert out.stdout.split() == ["True", "workqueue"], out.stderr  # the program's loops: the pool
    env["PJRT_HUB_NUMBA_POOL"] = "0"
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=120)
    assert out.stdout.split() == ["False", "workqueue"], out.stderr


@pytest.mark.skipif(not hasattr(__import__("os"), "sched_setaffinity"), reason="needs CPU affinity")
def test_a_process_allowed_one_core_runs_a_parallel_program_and_exits():
    """TBB in a one-core process starts no worker, and numba's TBB layer then hung at exit
    after a parallel program ran: such a process gets numba's other layers."""
    import subprocess
    import sys

    script = ("import os\n"
              "os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})\n"
              "import numba, numpy as np\n"
              "from pjrt_hub._bench import _Loaded, _child_registry\n"
              "text = ('func.func @main(%a: tensor<2048x1024xf32>) -> tensor<2048x1024xf32> {\\n'\n"
              "        '  %0 = stablehlo.sqrt %a : tensor<2048x1024xf32>\\n'\n"
              "        '  return %0 : tensor<2048x1024xf32>\\n}\\n')\n"
              "client = _child_registry([]).create_client('numba_cpu')\n"
              "a = np.linspace(0, 9, 2048 * 1024, dtype=np.float32).reshape(2048, 1024)\n"
              "loaded = _Loaded(client, text, [a])\n"
              "loaded.settle()\n"
              "(got,) = loaded.outputs()\n"
              "assert np.array_equal(got, np.sqrt(a))\n"
              "print(numba.threading_layer())\n")
    env = {k: v for k, v in __import__("os").environ.items() if k != "NUMBA_THREADING_LAYER"}
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0 and out.stdout.strip() in ("omp", "workqueue"), out.stderr
