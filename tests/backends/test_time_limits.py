"""Time limits on the built-in plugins: a never-ending loop is stopped, the client goes on.

numba_cpu and the reference interpreter both read the runtime's cancel flag in their ``while``
loops; executions get it through ``ExecuteOptions.timeout`` and ``LoadedExecutable.cancel``.
Clients come from the registry, as a user gets them (at the framework's own version no gate
stands in between). The only timing
in here is a generous guard against hanging.
"""

from __future__ import annotations

import gc
import time
from pathlib import Path

import numpy as np
import pytest

from pjrt_hub import PluginRegistry, RegistrySettings
from pjrt_hub.abi import (
    Cancelled,
    CompileOptions,
    DeadlineExceeded,
    ExecuteOptions,
    FailedPrecondition,
    InvalidArgument,
    Program,
)

from ..loop_programs import COUNT_TO_TEN, NEVER_ENDING, NEVER_ENDING_DONATING

#: Seconds within which anything here must have returned: "not hung", not a speed test.
GUARD = 60.0

CORPUS = Path(__file__).resolve().parents[2] / "pjrt_hub" / "data" / "corpus" / "public"


@pytest.fixture(scope="module", params=["reference", "numba_cpu"])
def client(request, tmp_path_factory):
    if request.param == "numba_cpu":
        pytest.importorskip("numba")
    with pytest.MonkeyPatch.context() as env:
        # numba_cpu's compile cache: a fresh one, not the user's.
        env.setenv("PJRT_HUB_CACHE", str(tmp_path_factory.mktemp("cache")))
        for name in ("PJRT_HUB_DISABLE_PLUGINS", "PJRT_HUB_PLUGINS", "PJRT_NAMES_AND_LIBRARY_PATHS"):
            env.delenv(name, raising=False)
        client = PluginRegistry(RegistrySettings.from_environment()).create_client(request.param)
        yield client
    client.destroy()


@pytest.fixture(scope="module")
def compiled(client):
    """``compiled(text)``: the program compiled once per client."""
    cache = {}

    def get(text: str):
        if text not in cache:
            cache[text] = client.compile(Program(text))
        return cache[text]

    return get


def put(client, array):
    transfer = client.buffer_from_host_buffer(np.asarray(array), device=client.addressable_devices()[0])
    transfer.done_with_host_buffer.await_(GUARD)
    return transfer.buffer


def fetch(buffer) -> np.ndarray:
    host = buffer.to_host_buffer()
    host.event.await_(GUARD)
    return host.array


def count_to_ten(client, compiled, start: int) -> int:
    """Run a loop that ends (on the worker, as the never-ending one): the device still works."""
    result = compiled(COUNT_TO_TEN).execute([[put(client, np.int32(start))]])
    return int(fetch(result.outputs[0][0]))


def test_a_never_ending_loop_is_stopped_by_its_timeout_and_the_client_goes_on(client, compiled):
    forever = compiled(NEVER_ENDING)
    start = time.monotonic()
    result = forever.execute([[put(client, np.int32(0))]], ExecuteOptions(timeout=0.5))
    with pytest.raises(DeadlineExceeded, match=r"jit_forever: .*within its 0\.5 s limit"):
        result.device_complete_events[0].await_(GUARD)
    assert time.monotonic() - start < GUARD
    # The output carries the error too.
    with pytest.raises(DeadlineExceeded, match="ExecuteOptions.timeout"):
        fetch(result.outputs[0][0])
    # The same client and device go on: another program, then the stopped one again.
    assert count_to_ten(client, compiled, 3) == 10
    again = forever.execute([[put(client, np.int32(5))]], ExecuteOptions(timeout=0.2))
    with pytest.raises(DeadlineExceeded):
        again.device_complete_events[0].await_(GUARD)
    assert count_to_ten(client, compiled, -4) == 10


def test_await_with_a_timeout_returns_on_a_pending_event_and_cancel_stops_the_loop(client, compiled):
    forever = compiled(NEVER_ENDING)
    # No time limit: execute returns at once all the same (the loop runs on the device's worker).
    running = forever.execute([[put(client, np.int32(0))]])
    queued = forever.execute([[put(client, np.int32(1))]])
    event = running.device_complete_events[0]
    start = time.monotonic()
    with pytest.raises(DeadlineExceeded, match=r"not ready after 0\.2 s"):
        event.await_(0.2)
    assert time.monotonic() - start < GUARD
    assert not event.is_ready()  # a wait that ran out stops nothing
    forever.cancel()
    with pytest.raises(Cancelled, match=r"LoadedExecutable\.cancel"):
        event.await_(GUARD)
    with pytest.raises(Cancelled):  # the queued one never started; an infinite wait is no limit
        queued.device_complete_events[0].await_(float("inf"))
    with pytest.raises(Cancelled):
        fetch(running.outputs[0][0])
    assert count_to_ten(client, compiled, 0) == 10


def test_a_timeout_stops_every_replica(client):
    forever = client.compile(Program(NEVER_ENDING), CompileOptions(num_replicas=2))
    devices = forever.addressable_devices()
    args = [[client.buffer_from_host_buffer(np.int32(0), device=device).buffer] for device in devices]
    result = forever.execute(args, ExecuteOptions(timeout=0.3))
    for event in result.device_complete_events:
        with pytest.raises(DeadlineExceeded):
            event.await_(GUARD)
    running = forever.execute(args)
    forever.cancel()
    for event in running.device_complete_events:
        with pytest.raises(Cancelled):
            event.await_(GUARD)


def settled_bytes_in_use(device, settle: float = 0.1) -> int:
    """The device's bytes in use once nothing more is being freed.

    Buffers of earlier tests may still wait in reference cycles (a raised error holds its
    frames) or in the worker of a cancelled execution, which lets go of its arguments just
    after it signals its event: collect, and wait until the count holds still.
    """
    deadline = time.monotonic() + GUARD
    gc.collect()
    current = device.memory_stats().bytes_in_use
    while time.monotonic() < deadline:
        time.sleep(settle)
        gc.collect()
        latest = device.memory_stats().bytes_in_use
        if latest == current:
            break
        current = latest
    return current


def test_a_stopped_execution_consumed_its_donated_input_and_frees_its_memory(client, compiled):
    device = client.addressable_devices()[0]
    forever = compiled(NEVER_ENDING_DONATING)
    before = settled_bytes_in_use(device)
    x = put(client, np.ones(4, np.float32))
    result = forever.execute([[x]], ExecuteOptions(timeout=0.3))
    # Donated when the execution was queued, as by any execution: gone, whatever happens next.
    assert x.is_deleted()
    with pytest.raises(FailedPrecondition, match="donated"):
        fetch(x)
    with pytest.raises(DeadlineExceeded):
        result.device_complete_events[0].await_(GUARD)
    # The donated storage went to the output, which failed: nothing stays allocated.
    assert settled_bytes_in_use(device) == before
    assert count_to_ten(client, compiled, 9) == 10


def test_a_program_that_ends_in_time_keeps_its_results(client, compiled):
    program = compiled(COUNT_TO_TEN)
    for timeout in (None, 30.0, float("inf")):
        result = program.execute([[put(client, np.int32(2))]], ExecuteOptions(timeout=timeout))
        assert int(fetch(result.outputs[0][0])) == 10


def test_a_timeout_of_zero_stops_the_execution_before_it_starts(client, compiled):
    result = compiled(COUNT_TO_TEN).execute([[put(client, np.int32(2))]], ExecuteOptions(timeout=0))
    with pytest.raises(DeadlineExceeded, match="within its 0 s limit"):
        result.device_complete_events[0].await_(GUARD)


@pytest.mark.parametrize("bad", [-1.0, float("nan"), "2", True])
def test_a_timeout_that_is_not_seconds_is_refused(client, compiled, bad):
    x = put(client, np.int32(0))
    with pytest.raises(InvalidArgument, match=r"ExecuteOptions\.timeout must be a number of seconds"):
        compiled(COUNT_TO_TEN).execute([[x]], ExecuteOptions(timeout=bad))
    assert not x.is_deleted()


def test_short_counted_loops_still_run_inline(client, compiled):
    """JAX's fori_loop with static bounds is a counted loop: it runs on the calling thread, as
    before there were cancel flags, so its execute returns a ready event."""
    program = compiled((CORPUS / "fori_loop.mlir").read_text())
    with np.load(CORPUS / "fori_loop.npz") as data:
        args = [put(client, data[f"in{i}"]) for i in range(3)]
        expected = data["out0"]
    result = program.execute([args])
    assert result.device_complete_events[0].is_ready()
    np.testing.assert_allclose(fetch(result.outputs[0][0]), expected, rtol=1e-4, atol=1e-5)
