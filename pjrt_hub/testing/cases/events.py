"""events: ``PJRT_Event_*``. Every wait is bounded: an event that never fires fails its case in
seconds."""

from __future__ import annotations

import threading
import time

import numpy as np

from .._case import case, check
from .._context import CALL_TIMEOUT, PluginUnderTest
from .._programs import add_one


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
