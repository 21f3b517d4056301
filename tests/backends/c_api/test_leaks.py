"""Nothing leaks: every executable, buffer, event and error the bridge creates is destroyed.

Resident memory is measured after a warm-up (XLA grows pools and caches on first use) and again
after many rounds. A leaked executable costs about 110 kB on xla-cpu-pjrt, so 300 leaked ones
(the compile rounds below; a compile takes ~25 ms) would add ~33 MB; the slack below is far under
that and far over the noise (~0.1 MB).
"""

from __future__ import annotations

import gc
import os

import numpy as np
import pytest

from pjrt_hub.abi import CompileError, InvalidArgument, Program

from .conftest import ADD_PROGRAM

pytestmark = pytest.mark.real_plugin

SLACK_BYTES = 8 << 20


def rss() -> int:
    gc.collect()
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


@pytest.fixture(scope="module")
def small_client(api):
    client = api.client_create({"cpu_device_count": 1})
    yield client
    client.destroy()


def test_compile_and_execute_rounds_keep_rss_flat(small_client):
    client = small_client
    host = np.arange(4, dtype=np.float32)

    def round_trip() -> None:
        exe = client.compile(Program(ADD_PROGRAM))
        x = client.buffer_from_host_buffer(host).buffer
        result = exe.execute([[x, x]])
        result.device_complete_events[0].await_()
        fetched = result.outputs[0][0].to_host_buffer()
        fetched.event.await_()
        assert fetched.array[3] == 6.0

    for _ in range(30):
        round_trip()
    before = rss()
    for _ in range(300):
        round_trip()
    grown = rss() - before
    assert grown < SLACK_BYTES, f"RSS grew by {grown / 1e6:.1f} MB over 300 compile-and-execute rounds"


def test_transfers_events_and_errors_keep_rss_flat(small_client):
    client = small_client
    exe = client.compile(Program(ADD_PROGRAM))
    host = np.arange(4096, dtype=np.float32)
    small = np.arange(4, dtype=np.float32)
    dst = np.empty(4, np.float32)

    def round_trip() -> None:
        big = client.buffer_from_host_buffer(host)
        big.done_with_host_buffer.await_()
        x = client.buffer_from_host_buffer(small).buffer
        result = exe.execute([[x, x]])
        result.device_complete_events[0].await_()
        result.outputs[0][0].to_host_buffer(dst).event.await_()
        big.buffer.ready_event().await_()
        try:
            exe.execute([[x]])  # a PJRT_Error from the plugin, to be destroyed
        except InvalidArgument:
            pass

    for _ in range(300):
        round_trip()
    before = rss()
    for _ in range(5000):
        round_trip()
    grown = rss() - before
    assert grown < SLACK_BYTES, f"RSS grew by {grown / 1e6:.1f} MB over 5000 transfer rounds"


def test_compile_errors_keep_rss_flat(small_client):
    def fail() -> None:
        with pytest.raises(CompileError):
            small_client.compile(Program("func.func @main() -> () { garbage }"))

    for _ in range(50):
        fail()
    before = rss()
    for _ in range(500):
        fail()
    assert rss() - before < SLACK_BYTES


def test_plugin_errors_are_destroyed(small_client):
    # A PJRT_Error is small (~200 B with its message), so it takes many to see one leak.
    def fail() -> None:
        try:
            small_client.lookup_device(99)
        except InvalidArgument:
            pass

    for _ in range(2000):
        fail()
    before = rss()
    for _ in range(100_000):
        fail()
    grown = rss() - before
    assert grown < 4 << 20, f"RSS grew by {grown / 1e6:.1f} MB over 100000 plugin errors"
