"""Threads of numba_cpu programs: small products on the calling thread, the rest sized by the
load, mid-size programs run inline (no hand-off to a worker thread)."""

from __future__ import annotations

import numba
import numpy as np
import pytest

from pjrt_hub import PluginRegistry, RegistrySettings
from pjrt_hub.abi import Program
from pjrt_hub.backends.numba_cpu import threads


def _matmul(m: int, k: int, n: int) -> str:
    return (f"func.func @main(%a: tensor<{m}x{k}xf32>, %b: tensor<{k}x{n}xf32>) -> tensor<{m}x{n}xf32> {{\n"
            f"  %0 = stablehlo.dot_general %a, %b, contracting_dims = [1] x [0] : "
            f"(tensor<{m}x{k}xf32>, tensor<{k}x{n}xf32>) -> tensor<{m}x{n}xf32>\n"
            f"  return %0 : tensor<{m}x{n}xf32>\n}}\n")


def test_small_products_run_single_threaded_and_large_ones_follow_the_runtime(compiler):
    small = compiler.compile(_matmul(128, 256, 64))
    assert "blas_threads(1)" in small.source and small._threaded is False
    large = compiler.compile(_matmul(512, 512, 512))
    assert "blas_threads(" not in large.source and large._threaded is True
    rng = np.random.default_rng(0)
    a, b = rng.normal(size=(128, 256)).astype(np.float32), rng.normal(size=(256, 64)).astype(np.float32)
    (got,) = small.run([a, b])
    np.testing.assert_allclose(got, a @ b, rtol=1e-4, atol=1e-4)


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
