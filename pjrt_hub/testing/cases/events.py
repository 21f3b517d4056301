"""events: ``PJRT_Event_*`` and asynchrony. Every wait is bounded: an event that never fires fails
its case in seconds.

Asynchrony is observed with a slow program (a loop whose trip count is an argument, measured once
per run so that it takes :data:`PENDING_SECONDS` on the plugin): what an event and a buffer say
while that work is still running, and what a copy holds when its event fires. A plugin that runs
everything before ``Execute`` returns has nothing pending to observe: those cases skip, saying so.
"""

from __future__ import annotations

import functools
import threading
import time
from typing import Any

import numpy as np

from pjrt_hub.abi import ErrorCode, ExecuteOptions, PjrtError

from .._case import case, check, expect_error, skip
from .._context import CALL_TIMEOUT, PluginUnderTest, describe
from .._programs import add_one, failing_program, slow_program, slow_program_result


def _execution_event(ctx: PluginUnderTest):
    executable = ctx.compile(add_one())
    buffer = ctx.put(np.zeros(4, np.float32))
    result = ctx.call(executable.execute, [[buffer]], what="PJRT_LoadedExecutable_Execute", timeout=60.0)
    events = result.device_complete_events
    check(events and len(events) == 1, f"PJRT_LoadedExecutable_Execute returned {len(events or [])} completion "
                                       "events for one device")
    return events[0], result.outputs[0][0]


@case("events")
def await_(ctx: PluginUnderTest) -> None:
    """PJRT_Event_Await of an execution's completion event returns; the event is then ready, without error."""
    event, output = _execution_event(ctx)
    ctx.await_event(event, "device_complete_events[0]")
    check(event.error() is None, f"a good execution's event carries an error: {event.error()}")
    ctx.await_event(output.ready_event(), "the output's PJRT_Buffer_ReadyEvent")


@case("events")
def is_ready(ctx: PluginUnderTest) -> None:
    """PJRT_Event_IsReady becomes true by itself (polling, without awaiting)."""
    event, _ = _execution_event(ctx)
    deadline = time.monotonic() + ctx.seconds(CALL_TIMEOUT)
    while not event.is_ready():
        check(time.monotonic() < deadline, f"PJRT_Event_IsReady stayed false for {ctx.seconds(CALL_TIMEOUT):g} s")
        time.sleep(0.005)


@case("events")
def on_ready_fires_once(ctx: PluginUnderTest) -> None:
    """PJRT_Event_OnReady calls back exactly once, with no error, for a pending or a ready event."""
    event, _ = _execution_event(ctx)
    calls: list[object] = []
    fired = threading.Event()

    def callback(error: object) -> None:
        calls.append(error)
        fired.set()

    event.on_ready(callback)
    check(fired.wait(ctx.seconds(CALL_TIMEOUT)), f"the PJRT_Event_OnReady callback did not fire within "
                                                 f"{ctx.seconds(CALL_TIMEOUT):g} s")
    ctx.await_event(event, "device_complete_events[0]")
    time.sleep(0.05)  # a second, wrong call would come from the same completion
    check(len(calls) == 1, f"the PJRT_Event_OnReady callback fired {len(calls)} times")
    check(calls[0] is None, f"the callback got an error for a good execution: {calls[0]}")

    late: list[object] = []
    event.on_ready(late.append)
    deadline = time.monotonic() + ctx.seconds(CALL_TIMEOUT)
    while not late and time.monotonic() < deadline:
        time.sleep(0.005)
    time.sleep(0.05)
    check(len(late) == 1, f"a callback registered on a ready event fired {len(late)} times, expected once")


# -- work still pending ------------------------------------------------------------------------

#: Seconds a case that compiles a program of its own may take (numba on a cold cache, a busy machine).
COMPILING = 120.0
#: Seconds the slow program is made to take on the plugin under test: long enough that work
#: started now is still running when the case looks at it, short enough to keep the suite quick.
PENDING_SECONDS = 0.3
#: Elements of the slow program's data (1 MiB of f32).
SLOW_ELEMENTS = 1 << 18
#: After this many steps of ``x * 0.5 + 1`` every f32 in [-4, 4] has reached its fixed point 2.
_CONVERGED = 200


class SlowWork:
    """The slow program, compiled, with the trip count that makes it take about
    :data:`PENDING_SECONDS` on this plugin (measured once per run)."""

    def __init__(self, executable: Any, trips: int) -> None:
        self.executable, self.trips = executable, trips
        self.host = np.linspace(-4.0, 4.0, SLOW_ELEMENTS, dtype=np.float32)
        self.expected = slow_program_result(self.host, min(trips, _CONVERGED))

    def start(self, ctx: PluginUnderTest, client: Any = None, executable: Any = None, device: Any = None) -> Any:
        """Put the inputs (waiting for the transfers) and start one execution; do not wait for it."""
        client = client or ctx.client
        device = device or (ctx.device if client is ctx.client else client.addressable_devices()[0])
        args = []
        for array in (self.host, np.array(self.trips, np.int32)):
            transfer = ctx.call(client.buffer_from_host_buffer, array, device=device,
                                what="PJRT_Client_BufferFromHostBuffer")
            ctx.await_event(transfer.done_with_host_buffer, "done_with_host_buffer")
            args.append(transfer.buffer)
        return ctx.call((executable or self.executable).execute, [args], ExecuteOptions(),
                        what="PJRT_LoadedExecutable_Execute (the slow program)", timeout=60.0)


def slow_work(ctx: PluginUnderTest) -> SlowWork:
    """Compile the slow program and measure its trip count; skip if the plugin cannot compile it."""

    def make() -> SlowWork:
        try:
            executable = ctx.compile(slow_program(SLOW_ELEMENTS))
        except PjrtError as exc:
            if exc.code is ErrorCode.UNIMPLEMENTED:
                skip(f"plugin {ctx.name} does not compile the slow program (a while loop): {describe(exc)}")
            raise

        def timed(trips: int) -> float:
            started = time.perf_counter()
            result = SlowWork(executable, trips).start(ctx)
            for event in result.device_complete_events:
                ctx.await_event(event, "the slow program's completion event", timeout=60.0)
            # The outputs too: a plugin whose completion event fires early (the fault the
            # events cases look for) would otherwise be timed as faster than it is.
            for buffer in result.outputs[0]:
                ctx.await_event(buffer.ready_event(), "the slow program's output", timeout=60.0)
            return time.perf_counter() - started

        timed(16)  # warm-up: the first run pays one-time costs (threads, caches)
        trips, elapsed, before = 16, 0.0, None
        while trips < (1 << 22):
            elapsed = timed(trips)
            if elapsed >= 0.05 and before is not None:
                # Other work on the machine only ever adds time: the faster of two runs.
                elapsed = min(elapsed, timed(trips))
                break
            before = (trips, elapsed)
            trips *= 8
        # The cost of one trip from the difference of two runs, so that a launch's fixed cost
        # (large on a busy machine, against a fast plugin's short trips) does not count.
        per_trip = elapsed / trips
        if before is not None and elapsed > before[1]:
            per_trip = (elapsed - before[1]) / (trips - before[0])
        trips = max(16, min(1 << 22, int(PENDING_SECONDS / max(per_trip, 1e-9))))
        return SlowWork(executable, trips)

    return ctx.memo("slow_work", make)


def _ready_soon(event: Any, seconds: float = 0.2) -> bool:
    deadline = time.monotonic() + seconds
    while not event.is_ready():
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.001)
    return True


def _first_difference(got: np.ndarray, expected: np.ndarray) -> str:
    if got.shape != expected.shape:
        return f"shape {list(got.shape)} instead of {list(expected.shape)}"
    where = np.flatnonzero(got != expected)
    index = int(where[0])
    return f"{len(where)} of {got.size} elements wrong, e.g. [{index}] = {got.reshape(-1)[index]!r} instead of " \
           f"{expected.reshape(-1)[index]!r}"


@case("events", timeout=COMPILING)
def pending_execution(ctx: PluginUnderTest) -> None:
    """While an execution is still running, its output does not claim to be ready; a copy of that
    output to host started meanwhile holds the final values when (not after) its event fires;
    and once the execution's event fires, its output is ready."""
    work = slow_work(ctx)
    result = work.start(ctx)
    event, output = result.device_complete_events[0], result.outputs[0][0]
    pending = not event.is_ready()
    output_ready = output.ready_event().is_ready()
    still_pending = not event.is_ready()
    if not pending:
        # A plugin that sets the completion event and then the outputs' events does so within
        # microseconds; the grace is far below the slow program's time, however loaded the machine.
        check(_ready_soon(output.ready_event(), 0.05), "the execution's event said complete when Execute returned, but "
              "its output's PJRT_Buffer_ReadyEvent is not ready: the event fired before the work was done")
        skip(f"plugin {ctx.name} had finished the slow program ({work.trips} steps) when Execute returned: "
             "there was no pending work to observe")
    check(not (output_ready and still_pending),
          "the output of a still-running execution reports ready (PJRT_Buffer_ReadyEvent) before the execution "
          "computing it has finished; PJRT fires it when the data is there")
    copy = ctx.call(output.to_host_buffer, what="PJRT_Buffer_ToHostBuffer of a pending output")
    seen: dict[str, Any] = {}
    fired = threading.Event()

    def when_ready(error: Any) -> None:
        seen["values"] = np.array(copy.array, copy=True)
        seen["error"] = error
        fired.set()

    copy.event.on_ready(when_ready)
    ctx.await_event(copy.event, "the copy to host of a pending output", timeout=60.0)
    check(fired.wait(ctx.seconds(CALL_TIMEOUT)), "the copy's PJRT_Event_OnReady callback did not run")
    check(seen["error"] is None, f"the copy to host failed: {seen['error']}")
    check(np.array_equal(seen["values"], work.expected),
          lambda: "when the copy's event fired, the host array was not complete: "
                  f"{_first_difference(seen['values'], work.expected)}; PJRT_Buffer_ToHostBuffer's event fires once "
                  "the copy is done")
    ctx.await_event(event, "the slow program's completion event", timeout=60.0)
    check(_ready_soon(output.ready_event()), "the execution's event fired but its output is not ready")


@case("events", timeout=COMPILING)
def pending_input(ctx: PluginUnderTest) -> None:
    """An execution given an input that another execution is still computing waits for it: it
    computes from the final values and completes after the input's producer."""
    work = slow_work(ctx)
    plus = ctx.compile(add_one(SLOW_ELEMENTS))
    first = work.start(ctx)
    first_event, produced = first.device_complete_events[0], first.outputs[0][0]
    if first_event.is_ready():
        skip(f"plugin {ctx.name} had finished the slow program ({work.trips} steps) when Execute returned: "
             "its output was never a pending input")
    second = ctx.call(plus.execute, [[produced]], ExecuteOptions(), what="PJRT_LoadedExecutable_Execute "
                      "with a pending input", timeout=60.0)
    second_event = second.device_complete_events[0]
    # Judged by the input's own ready event: an execution's completion event may fire a little
    # after its outputs are defined (XLA's does), so the reader may finish between the two.
    input_ready = produced.ready_event()
    order: list[bool] = []
    second_event.on_ready(lambda error: order.append(input_ready.is_ready()))
    ctx.await_event(second_event, "the completion event of the execution with a pending input", timeout=60.0)
    check(_ready_soon(first_event, 5.0), "the producer of the input never completed")
    check(not order or order[0], "the execution that reads a pending input completed while that input was not "
                                 "ready yet (its PJRT_Buffer_ReadyEvent had not fired)")
    got = ctx.fetch(second.outputs[0][0])
    expected = work.expected + np.float32(1)
    check(np.array_equal(got, expected), lambda: "x + 1 of a pending input computed from something other than its "
          f"final value: {_first_difference(got, expected)}")


def failing_executable(ctx: PluginUnderTest) -> Any:
    """The program that cannot allocate its output (:func:`failing_program`), compiled; skips,
    saying why, where the plugin does not compile it."""
    try:
        return ctx.compile(failing_program())
    except PjrtError as exc:
        if exc.code is ErrorCode.UNIMPLEMENTED:
            skip(f"plugin {ctx.name} does not compile the failing program: {describe(exc)}")
        raise


@case("events", timeout=COMPILING)
def execution_error_reaches_every_event_and_output(ctx: PluginUnderTest) -> None:
    """An error inside a running execution (here: an output too large to allocate) reaches its
    completion event and every output, the small one included; nothing hangs and no output
    pretends to hold values."""
    executable = failing_executable(ctx)
    args = [ctx.put(np.array([1.0, 2.0, 3.0, 4.0], np.float32)), ctx.put(np.array(2.0, np.float32))]
    try:
        result = ctx.call(executable.execute, [args], ExecuteOptions(), what="PJRT_LoadedExecutable_Execute "
                          "(a program that cannot allocate its output)", timeout=60.0)
    except PjrtError as exc:
        skip(f"plugin {ctx.name} refused the execution at the call ({describe(exc)}): there is no error inside "
             "a running execution to observe")
    events, outputs = result.device_complete_events, result.outputs[0]
    check(len(outputs) == 2, f"the failed execution returned {len(outputs)} outputs, expected 2")
    for index, event in enumerate(events):
        _await_error(ctx, event, f"completion event {index} of the failed execution")
    for index, output in enumerate(outputs):
        _await_error(ctx, output.ready_event(), f"the ready event of output {index} of the failed execution")

        def read(output: Any = output) -> Any:
            copy = output.to_host_buffer()
            copy.event.await_(ctx.seconds(CALL_TIMEOUT))
            return copy.array

        what = f"PJRT_Buffer_ToHostBuffer of output {index} of the failed execution"
        expect_error(functools.partial(ctx.call, read, what=what), what=what)


def _await_error(ctx: PluginUnderTest, event: Any, what: str) -> None:
    try:
        ctx.call(event.await_, ctx.seconds(CALL_TIMEOUT), what=f"{what}: PJRT_Event_Await", timeout=CALL_TIMEOUT + 1)
    except PjrtError:
        pass
    check(event.is_ready(), f"{what} never became ready")
    check(event.error() is not None, f"{what} fired without an error; PJRT puts the execution's error on every "
                                     "event and every output of it")
