"""Asynchronous execution on the device workers: events, errors, chains, and threads."""

from __future__ import annotations

import re
import threading
import time

import numpy as np
import pytest
from .cpu_runtime_minihlo import add_module, gate, module

from pjrt_hub.abi import (
    DeadlineExceeded,
    ExecutionError,
    FailedPrecondition,
    InvalidArgument,
    PjrtError,
    Program,
)
from pjrt_hub.backends.cpu_runtime import CpuApi, CpuEvent

F32 = np.float32


def sleepy(ms: int = 30, alias: bool = False) -> str:
    attr = " {tf.aliasing_output = 0 : i32}" if alias else ""
    return module(f"%0 = stablehlo.custom_call @sleep_{ms}ms(%arg0) : (tensor<4xf32>) -> tensor<4xf32>\n"
                  "%1 = stablehlo.add %0, %arg1 : tensor<4xf32>\nreturn %1 : tensor<4xf32>",
                  args=f"%arg0: tensor<4xf32>{attr}, %arg1: tensor<4xf32>", results="tensor<4xf32>",
                  name="jit_sleepy")


def gated_add(name: str, alias: bool = False) -> str:
    """``a + b`` that first waits for the gate ``name`` to open."""
    attr = " {tf.aliasing_output = 0 : i32}" if alias else ""
    return module(f"%0 = stablehlo.custom_call @gate_{name}(%arg0) : (tensor<4xf32>) -> tensor<4xf32>\n"
                  "%1 = stablehlo.add %0, %arg1 : tensor<4xf32>\nreturn %1 : tensor<4xf32>",
                  args=f"%arg0: tensor<4xf32>{attr}, %arg1: tensor<4xf32>", results="tensor<4xf32>",
                  name="jit_gated")


@pytest.fixture
def gated(request):
    """(name, gate) of this test; the gate is opened at teardown so no worker waits on."""
    name = re.sub(r"\W", "_", request.node.name)
    event = gate(name)
    event.clear()
    yield name, event
    event.set()


FAILING = module("%0 = stablehlo.custom_call @fail(%arg0) : (tensor<4xf32>) -> tensor<4xf32>\n"
                 "return %0 : tensor<4xf32>", args="%arg0: tensor<4xf32>", results="tensor<4xf32>",
                 name="jit_failing")


def put_on(client, array, device=0):
    return client.buffer_from_host_buffer(np.asarray(array, F32), device=client.devices()[device]).buffer


# -- events -------------------------------------------------------------------------------------


def test_event_set_await_and_callbacks_run_exactly_once():
    event = CpuEvent()
    seen = []
    event.on_ready(lambda error: seen.append(("early", error)))
    assert not event.is_ready() and event.error() is None
    with pytest.raises(DeadlineExceeded, match="not ready after 0.01 s"):
        event.await_(timeout=0.01)
    event.set()
    event.await_()
    event.await_(timeout=0)
    event.on_ready(lambda error: seen.append(("late", error)))
    assert seen == [("early", None), ("late", None)]
    with pytest.raises(InvalidArgument, match="set twice"):
        event.set()
    assert seen == [("early", None), ("late", None)]
    with pytest.raises(InvalidArgument, match="callback must be callable"):
        event.on_ready("nope")


def test_event_carries_an_error_to_waiters_and_callbacks():
    event = CpuEvent()
    errors = []
    event.on_ready(errors.append)
    failure = ExecutionError("boom")
    event.set(failure)
    assert event.error() is failure and errors == [failure]
    with pytest.raises(ExecutionError, match="boom"):
        event.await_()


def test_a_raising_callback_does_not_stop_the_others(caplog):
    event = CpuEvent()
    seen = []
    event.on_ready(lambda error: 1 / 0)
    event.on_ready(seen.append)
    event.set()
    assert seen == [None]
    assert "on_ready callback" in caplog.text


def test_await_from_many_threads():
    event = CpuEvent()
    woke = []
    threads = [threading.Thread(target=lambda: (event.await_(), woke.append(1))) for _ in range(4)]
    for thread in threads:
        thread.start()
    time.sleep(0.01)
    assert woke == []
    event.set()
    for thread in threads:
        thread.join(timeout=5)
    assert woke == [1, 1, 1, 1]


# -- asynchronous execution ---------------------------------------------------------------------


def test_execute_returns_at_once_and_the_work_runs_on_a_worker(async_client, gated):
    name, opened = gated
    executable = async_client.compile(Program(gated_add(name)))
    a, b = put_on(async_client, np.arange(4)), put_on(async_client, np.ones(4))
    result = executable.execute([[a, b]])
    (out,), (event,) = result.outputs[0], result.device_complete_events
    assert not event.is_ready() and not out.ready_event().is_ready()
    assert "pending" in repr(out)
    seen = []
    event.on_ready(seen.append)
    host = out.to_host_buffer()  # does not block: the copy waits for the data
    assert not host.event.is_ready() and seen == []
    opened.set()
    host.event.await_(timeout=5)
    np.testing.assert_array_equal(host.array, [1, 2, 3, 4])
    assert event.is_ready() and seen == [None]
    event.on_ready(seen.append)  # registered after ready: called at once
    assert seen == [None, None]


def test_chained_pending_executions_and_copies(async_client, gated):
    name, opened = gated
    first_step = async_client.compile(Program(gated_add(name)))
    adder = async_client.compile(Program(add_module()))
    a, b = put_on(async_client, np.zeros(4)), put_on(async_client, np.ones(4))
    (first,), = first_step.execute([[a, b]]).outputs
    (second,), = adder.execute([[first, b]]).outputs
    copy = second.copy_to_device(async_client.devices()[1])
    in_memory = second.copy_to_memory(async_client.devices()[0].addressable_memories()[1])
    dst = np.zeros(4, F32)
    host = second.to_host_buffer(dst)
    assert not any(e.is_ready() for e in (first.ready_event(), second.ready_event(), copy.ready_event(),
                                          in_memory.ready_event(), host.event))
    opened.set()
    host.event.await_(timeout=5)
    np.testing.assert_array_equal(dst, 2.0)
    copy.ready_event().await_(timeout=5)
    assert copy.device() is async_client.devices()[1]
    np.testing.assert_array_equal(copy.to_host_buffer().array, 2.0)
    np.testing.assert_array_equal(in_memory.to_host_buffer().array, 2.0)
    assert second.unsafe_pointer() != copy.unsafe_pointer()


def test_donating_a_pending_output_reuses_its_storage(async_client, gated):
    name, opened = gated
    first_step = async_client.compile(Program(gated_add(name, alias=True)))
    update = async_client.compile(Program(add_module(alias=True)))
    a, b = put_on(async_client, np.zeros(4)), put_on(async_client, np.ones(4))
    pointer = a.unsafe_pointer()
    producing = first_step.execute([[a, b]])
    (first,), = producing.outputs
    (second,), = update.execute([[first, b]]).outputs
    assert not producing.device_complete_events[0].is_ready()  # first was donated while pending
    assert a.is_deleted() and first.is_deleted()
    with pytest.raises(FailedPrecondition, match="donated to an execution of jit_add"):
        first.to_host_buffer()
    opened.set()
    second.ready_event().await_(timeout=5)
    np.testing.assert_array_equal(second.to_host_buffer().array, 2.0)
    assert second.unsafe_pointer() == pointer  # a's storage went through the whole chain
    device = async_client.devices()[0]
    assert device.memory_stats().bytes_in_use == 32  # b and second: the chain allocated nothing


def test_storage_read_by_a_pending_execution_is_not_overwritten_by_donation(compiler, gated):
    from pjrt_hub.backends.cpu_runtime import InlinePolicy

    # The reader is costly enough to go to the worker; the donating adder runs inline at once,
    # while the reader still has to read `a`. Reusing `a` in place would change what it reads.
    name, opened = gated
    client = CpuApi(compiler, inline_policy=InlinePolicy(max_flops=100)).client_create({"num_devices": 1})
    reader = client.compile(Program(module(
        f"%0 = stablehlo.custom_call @gate_{name}(%arg0) : (tensor<4xf32>) -> tensor<4xf32>\n"
        "%1 = stablehlo.add %arg1, %arg1 : tensor<1000xf32>\n%2 = stablehlo.negate %0 : tensor<4xf32>\n"
        "return %2 : tensor<4xf32>",
        args="%arg0: tensor<4xf32>, %arg1: tensor<1000xf32>", results="tensor<4xf32>", name="jit_reader")))
    donating = client.compile(Program(add_module(alias=True)))
    a, b = put_on(client, np.arange(4)), put_on(client, np.ones(4))
    (read,), = reader.execute([[a, put_on(client, np.zeros(1000))]]).outputs
    assert not read.ready_event().is_ready()
    (written,), = donating.execute([[a, b]]).outputs
    assert a.is_deleted() and written.ready_event().is_ready()
    np.testing.assert_array_equal(written.to_host_buffer().array, [1, 2, 3, 4])
    opened.set()
    read.ready_event().await_(timeout=5)
    np.testing.assert_array_equal(read.to_host_buffer().array, [0, -1, -2, -3])
    client.destroy()


def test_execution_error_surfaces_on_events_and_outputs_and_the_worker_lives(async_client):
    failing = async_client.compile(Program(FAILING))
    a = put_on(async_client, np.ones(4))
    result = failing.execute([[a]])
    (out,), (event,) = result.outputs[0], result.device_complete_events
    with pytest.raises(ExecutionError, match="custom call @fail was asked to fail") as info:
        event.await_(timeout=5)
    assert "jit_failing on cpu:0" in info.value.message and "RuntimeError" in info.value.message
    assert out.ready_event().error() is event.error()
    with pytest.raises(ExecutionError, match="custom call @fail was asked to fail"):
        out.to_host_buffer()
    assert "failed" in repr(out)
    # A failed output fed to another execution fails that one with the same error.
    adder = async_client.compile(Program(add_module()))
    (downstream,), = adder.execute([[out, put_on(async_client, np.ones(4))]]).outputs
    with pytest.raises(ExecutionError, match="asked to fail"):
        downstream.ready_event().await_(timeout=5)
    copy = out.copy_to_device(async_client.devices()[1])
    with pytest.raises(ExecutionError, match="asked to fail"):
        copy.to_host_buffer()
    # The device still works.
    (fine,), = adder.execute([[a, a]]).outputs
    fine.ready_event().await_(timeout=5)
    np.testing.assert_array_equal(fine.to_host_buffer().array, 2.0)
    assert async_client.devices()[0].memory_stats().bytes_in_use == 16 + 16  # a and fine


def test_execution_error_inline(client, put):
    failing = client.compile(Program(FAILING))
    (out,), = failing.execute([[put(np.ones(4, F32))]]).outputs
    assert out.ready_event().is_ready()
    with pytest.raises(ExecutionError, match="asked to fail"):
        out.ready_event().await_()
    with pytest.raises(ExecutionError, match="asked to fail"):
        out.to_host_buffer()


def test_pending_to_host_of_a_failed_execution_carries_the_error(async_client, gated):
    name, opened = gated
    failing = async_client.compile(Program(module(
        f"%0 = stablehlo.custom_call @gate_{name}(%arg0) : (tensor<4xf32>) -> tensor<4xf32>\n"
        "%1 = stablehlo.custom_call @fail(%0) : (tensor<4xf32>) -> tensor<4xf32>\nreturn %1 : tensor<4xf32>",
        args="%arg0: tensor<4xf32>", results="tensor<4xf32>")))
    (out,), = failing.execute([[put_on(async_client, np.ones(4))]]).outputs
    host = out.to_host_buffer()
    assert not host.event.is_ready()
    opened.set()
    with pytest.raises(ExecutionError, match="asked to fail"):
        host.event.await_(timeout=5)


def test_deleting_a_pending_output(async_client, gated):
    name, opened = gated
    executable = async_client.compile(Program(gated_add(name)))
    a = put_on(async_client, np.ones(4))
    result = executable.execute([[a, a]])
    (out,) = result.outputs[0]
    out.delete()
    assert out.is_deleted() and not result.device_complete_events[0].is_ready()
    opened.set()
    result.device_complete_events[0].await_(timeout=5)
    assert out.is_deleted()
    with pytest.raises(FailedPrecondition, match="was deleted"):
        out.to_host_buffer()
    assert async_client.devices()[0].memory_stats().bytes_in_use == 16  # only a


def test_synchronous_client_runs_everything_inline(compiler):
    from pjrt_hub.backends.cpu_runtime import InlinePolicy

    client = CpuApi(compiler, inline_policy=InlinePolicy(max_flops=-1)).client_create({"asynchronous": False})
    executable = client.compile(Program(sleepy(1)))
    a = put_on(client, np.ones(4))
    result = executable.execute([[a, a]])
    assert result.device_complete_events[0].is_ready()
    assert client.devices()[0]._worker._thread is None  # no worker was ever started
    np.testing.assert_array_equal(result.outputs[0][0].to_host_buffer().array, 2.0)


def test_replicas_run_on_their_own_device_workers(async_client):
    replicated = async_client.compile(Program(sleepy(5).replace(
        "module @jit_sleepy", "module @jit_sleepy attributes {mhlo.num_replicas = 4 : i32}")))
    program = replicated.get_executable().program
    threads = []
    run = program.run
    program.run = lambda args, out=None: (threads.append(threading.current_thread().name), run(args, out))[1]
    lists = [[put_on(async_client, np.ones(4), d), put_on(async_client, np.ones(4), d)] for d in range(4)]
    result = replicated.execute(lists)
    for event in result.device_complete_events:
        event.await_(timeout=5)
    assert sorted(threads) == [f"pjrt-hub cpu:{d}" for d in range(4)]
    for replica, (out,) in enumerate(result.outputs):
        assert out.device().id == replica
        np.testing.assert_array_equal(out.to_host_buffer().array, 2.0)


# -- threads ------------------------------------------------------------------------------------


def test_eight_threads_compile_and_execute_at_once(api):
    client = api.client_create()
    errors: list[BaseException] = []
    barrier = threading.Barrier(8)

    def work(worker: int) -> None:
        try:
            barrier.wait(timeout=10)
            for round_ in range(25):
                scale = worker * 100 + round_
                text = add_module(alias=round_ % 2 == 0, name=f"jit_w{worker}_r{round_ % 3}")
                executable = client.compile(Program(text))
                device = client.devices()[worker % 4]
                a = client.buffer_from_host_buffer(np.full(4, scale, F32), device=device).buffer
                b = client.buffer_from_host_buffer(np.arange(4, dtype=F32), device=device).buffer
                (out,), = executable.execute([[a, b]], execute_device=device).outputs
                host = out.to_host_buffer()
                host.event.await_(timeout=10)
                np.testing.assert_array_equal(host.array, scale + np.arange(4))
                assert a.is_deleted() == (round_ % 2 == 0)
                del a, b, out
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert errors == []
    assert all(device.memory_stats().bytes_in_use == 0 for device in client.devices())
    assert sum(device.memory_stats().num_allocs for device in client.devices()) == 8 * 25 * 2 + 8 * 12
    client.destroy()


def test_concurrent_delete_and_donation_race_leaves_consistent_state(api):
    client = api.client_create({"num_devices": 1})
    executable = client.compile(Program(add_module(alias=True)))
    outcomes = {"donated": 0, "deleted": 0}  # who won varies; the state must be consistent
    lock = threading.Lock()
    for _ in range(50):
        a = client.buffer_from_host_buffer(np.ones(4, F32)).buffer
        b = client.buffer_from_host_buffer(np.ones(4, F32)).buffer
        barrier = threading.Barrier(2)

        def donate(a=a, b=b, barrier=barrier) -> None:
            barrier.wait()
            try:
                executable.execute([[a, b]])
                with lock:
                    outcomes["donated"] += 1
            except PjrtError:
                pass

        def delete(a=a, barrier=barrier) -> None:
            barrier.wait()
            a.delete()
            with lock:
                outcomes["deleted"] += 1

        threads = [threading.Thread(target=donate), threading.Thread(target=delete)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=10)
        assert a.is_deleted()
        del threads, donate, delete
    assert outcomes["deleted"] == 50
    del a, b
    assert client.devices()[0].memory_stats().bytes_in_use == 0


def test_a_pending_constant_result_is_never_overwritten_by_donation(async_client, gated):
    name, opened = gated
    constant = async_client.compile(Program(module(
        f"%0 = stablehlo.constant dense<5.0> : tensor<4xf32>\n"
        f"%1 = stablehlo.custom_call @gate_{name}(%0) : (tensor<4xf32>) -> tensor<4xf32>\n"
        "return %1 : tensor<4xf32>", args="", results="tensor<4xf32>", name="jit_constant")))
    double = async_client.compile(Program(add_module(alias=True)))
    producing = constant.execute([[]])
    (c,), = producing.outputs
    (doubled,), = double.execute([[c, put_on(async_client, np.full(4, 5.0))]]).outputs
    assert not producing.device_complete_events[0].is_ready()  # c was donated while pending
    opened.set()
    doubled.ready_event().await_(timeout=5)
    np.testing.assert_array_equal(doubled.to_host_buffer().array, 10.0)
    (again,), = constant.execute([[]]).outputs
    again.ready_event().await_(timeout=5)
    np.testing.assert_array_equal(again.to_host_buffer().array, 5.0)


def test_zero_copy_host_array_is_released_only_after_pending_work_read_it(async_client, gated):
    from pjrt_hub.abi import HostBufferSemantics

    name, opened = gated
    executable = async_client.compile(Program(gated_add(name)))
    host = np.arange(4, dtype=F32)
    transfer = async_client.buffer_from_host_buffer(host, semantics=HostBufferSemantics.IMMUTABLE_ZERO_COPY)
    result = executable.execute([[transfer.buffer, transfer.buffer]])
    transfer.buffer.delete()  # deleted while the queued execution has still to read it
    assert not transfer.done_with_host_buffer.is_ready()
    opened.set()
    result.device_complete_events[0].await_(timeout=5)
    assert transfer.done_with_host_buffer.is_ready()
    np.testing.assert_array_equal(result.outputs[0][0].to_host_buffer().array, [0, 2, 4, 6])


def test_zero_copy_host_array_is_released_only_after_dlpack_consumers(client):
    from pjrt_hub.abi import HostBufferSemantics

    host = np.arange(4, dtype=F32)
    transfer = client.buffer_from_host_buffer(host, semantics=HostBufferSemantics.IMMUTABLE_ZERO_COPY)
    consumer = np.from_dlpack(transfer.buffer)
    transfer.buffer.destroy()  # destroying the handle does not wait, but the memory is still shared
    assert transfer.buffer.is_deleted()
    assert not transfer.done_with_host_buffer.is_ready()
    del consumer
    assert transfer.done_with_host_buffer.is_ready()


def test_a_host_copy_of_a_buffer_another_thread_donates_is_whole_or_refused(client):
    """The copy holds the storage: never half the old values and half the new (6 of 60 rounds
    were, when the copy read the array while the donating execution overwrote it in place)."""
    import threading

    n = 1 << 21
    donating = client.compile(Program(add_module(str(n), alias=True)))
    ones = put_on(client, np.ones(n, np.float32))
    outcomes = {"old": 0, "donated": 0}
    for _ in range(30):
        a = put_on(client, np.zeros(n, np.float32))
        start = threading.Barrier(2)

        def donate(start, a):
            start.wait()
            result = donating.execute([[a, ones]])
            for event in result.device_complete_events:
                event.await_(timeout=30)

        thread = threading.Thread(target=donate, args=(start, a))
        thread.start()
        start.wait()
        try:
            copy = a.to_host_buffer()
            copy.event.await_(timeout=30)
        except FailedPrecondition as exc:
            assert "donated" in str(exc)
            outcomes["donated"] += 1
        else:
            values = np.unique(copy.array)
            assert values.tolist() == [0.0], f"a host copy mixed old and new values: {values[:4]}"
            outcomes["old"] += 1
        thread.join()
    assert sum(outcomes.values()) == 30



def _unstarted_worker(monkeypatch):
    """A device worker whose thread never starts: only a waiter can run its tasks."""
    from pjrt_hub.backends.cpu_runtime import _devices

    monkeypatch.setattr(_devices._Worker, "_start", lambda self: None)
    return _devices._Worker("test")


def _await_in_thread(event, timeout: float = 30.0) -> bool:
    """``event.await_()`` on a thread of its own; whether it returned within ``timeout``."""
    waiter = threading.Thread(target=event.await_, daemon=True)
    waiter.start()
    waiter.join(timeout)
    return not waiter.is_alive()


def test_a_waiter_runs_the_queued_tasks_in_order_up_to_its_own(monkeypatch):
    worker = _unstarted_worker(monkeypatch)
    ran: list[tuple[int, int]] = []
    events = [CpuEvent(worker.help) for _ in range(3)]

    def task(i: int):
        def run() -> None:
            ran.append((i, threading.get_ident()))
            events[i].set()
        return run

    for i in range(3):
        worker.submit(task(i), helpable=True)
    assert _await_in_thread(events[1])  # no time limit: the waiter may run the work itself
    waiter = ran[0][1]
    assert ran == [(0, waiter), (1, waiter)] and waiter != threading.get_ident()
    assert not events[2].is_ready()
    events[2].await_(float("inf"))  # no limit either
    assert ran[2] == (2, threading.get_ident())


def test_a_waiter_does_not_run_work_that_may_loop_for_ever_nor_when_it_set_a_limit(monkeypatch):
    worker = _unstarted_worker(monkeypatch)
    first, second = CpuEvent(worker.help), CpuEvent(worker.help)
    worker.submit(first.set, helpable=False)  # a program with an unbounded loop
    worker.submit(second.set, helpable=True)
    assert not _await_in_thread(second, timeout=0.2)  # behind work a waiter must not run
    assert not first.is_ready() and not second.is_ready()
    second.set()  # lets the waiting thread go
    other = _unstarted_worker(monkeypatch)
    third = CpuEvent(other.help)
    other.submit(third.set, helpable=True)
    with pytest.raises(DeadlineExceeded):
        third.await_(timeout=0.05)  # a limit: the waiter only waits
    third.await_()
    assert third.is_ready()


def test_an_execution_awaited_at_once_runs_on_the_waiting_thread(async_client, monkeypatch):
    from pjrt_hub.backends.cpu_runtime import _devices

    executable = async_client.compile(Program(sleepy(1)))
    a, b = put_on(async_client, np.arange(4)), put_on(async_client, np.ones(4))
    assert async_client.addressable_devices()[0]._worker._thread is None
    monkeypatch.setattr(_devices._Worker, "_start", lambda self: None)  # no device thread at all
    result = executable.execute([[a, b]])
    assert _await_in_thread(result.device_complete_events[0])  # only a waiter could run it
    host = result.outputs[0][0].to_host_buffer()
    host.event.await_(timeout=5)
    np.testing.assert_array_equal(host.array, [1, 2, 3, 4])


def test_an_interrupt_while_a_waiter_runs_an_execution_fails_its_event_and_reaches_the_waiter(
        async_client, monkeypatch):
    import _thread

    from pjrt_hub.backends.cpu_runtime import _devices

    if threading.current_thread() is not threading.main_thread():
        pytest.skip("an interrupt reaches the main thread only")
    executable = async_client.compile(Program(sleepy(2000)))
    a, b = put_on(async_client, np.arange(4)), put_on(async_client, np.ones(4))
    monkeypatch.setattr(_devices._Worker, "_start", lambda self: None)  # the waiter runs it
    result = executable.execute([[a, b]])
    (event,) = result.device_complete_events
    timer = threading.Timer(0.2, _thread.interrupt_main)
    timer.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            event.await_()
    finally:
        timer.cancel()
    assert event.is_ready() and isinstance(event.error(), ExecutionError)
    assert "interrupted (KeyboardInterrupt)" in str(event.error())
    with pytest.raises(ExecutionError, match="interrupted"):
        result.outputs[0][0].to_host_buffer().event.await_(timeout=5)


def test_a_task_a_waiter_runs_may_stop_the_worker_without_waiting_for_itself():
    from pjrt_hub.backends.cpu_runtime import _devices

    worker = _devices._Worker("test")
    worker._start()  # the device's thread, asleep: nothing queued
    event = CpuEvent(worker.help)

    def destroy() -> None:  # a callback that destroys the client while its task runs
        worker.stop(wait=True)
        event.set()

    with worker._cond:  # queued without waking the device's thread: the waiter takes it
        worker._tasks.append((destroy, True))
    assert _await_in_thread(event, timeout=10)
