"""Cases from reading what pjrt-hub's Python binding promises beyond the C API (pjrt_hub.testing.contract.binding
lists each behaviour and the case that checks it).

They stop executions: ``ExecuteOptions.timeout`` and ``LoadedExecutable.cancel`` must end an
execution that could not finish by itself with DEADLINE_EXCEEDED or CANCELLED, on its events and
outputs, without touching the executions around it, and ``Event.await_(timeout)`` must end the
wait, not the work. Their program is the events cases' slow loop, given a trip count that keeps it
running far longer than any wait here (a plugin that fails to stop it wastes seconds, never hangs
the run). Whether a plugin can stop executions at all is its own answer: ``cancel`` of an idle
executable returns, or raises Unimplemented (the C bridge does, since the C API has no such call),
and only then may an execution outrun its limit.
"""

from __future__ import annotations

import sys
import time
from typing import Any

import numpy as np

from pjrt_hub.abi import CompileOptions, ErrorCode, ExecuteOptions, PjrtError

from .._case import case, check, fail, skip
from .._context import PluginUnderTest, describe, wait_compiled
from .._programs import slow_program, slow_program_result
from .events import COMPILING, SLOW_ELEMENTS, SlowWork, slow_work

#: Seconds a stopped execution may take to end after its limit or its cancel, before scaling:
#: a loop iteration of the slow program takes microseconds, so this is the machine's slack.
STOP_SLACK = 0.5
#: Seconds an execution that cannot finish is waited for before the case says it was not stopped.
STOP_WAIT = 5.0
#: How many measured runs (PENDING_SECONDS each) an execution that "cannot finish" would take:
#: long past every wait of these cases, short enough that a plugin which never stops it only
#: wastes some seconds of one thread.
_ENDLESS_RUNS = 40
#: A limit an execution of a few milliseconds never reaches.
_GENEROUS = 60.0


def _endless(work: SlowWork) -> int:
    return min(2**31 - 1, work.trips * _ENDLESS_RUNS)


def _start(ctx: PluginUnderTest, work: SlowWork, trips: int, options: ExecuteOptions | None = None,
           executable: Any = None, devices: Any = None, trips_per_device: Any = None) -> Any:
    """Put the slow program's inputs on each device and start one execution; do not wait for it."""
    devices = devices or [ctx.device]
    lists = []
    for index, device in enumerate(devices):
        count = trips if trips_per_device is None else trips_per_device[index]
        lists.append([ctx.put(work.host, device=device), ctx.put(np.array(count, np.int32), device=device)])
    what = (f"PJRT_LoadedExecutable_Execute (the slow loop, {trips if trips_per_device is None else trips_per_device} "
            f"trips, {options or ExecuteOptions()})")
    # An execution run on the caller's thread may hold the call until its limit has passed.
    return ctx.call((executable or work.executable).execute, lists, options or ExecuteOptions(), what=what,
                    timeout=COMPILING)


def _ended(ctx: PluginUnderTest, event: Any, within: float) -> tuple[PjrtError | None, bool]:
    """Wait up to ``within`` s for ``event``: (its error, whether it is ready)."""
    try:
        ctx.call(event.await_, ctx.seconds(within), what="PJRT_Event_Await", timeout=within + 1.0)
    except PjrtError as exc:
        return (exc if event.is_ready() else None), event.is_ready()
    return None, event.is_ready()


def _code(error: PjrtError | None) -> str:
    return "no error" if error is None else describe(error)


def _expect_stopped(ctx: PluginUnderTest, result: Any, code: ErrorCode, how: str) -> None:
    """Every completion event and output of ``result`` ends with ``code`` within STOP_WAIT s."""
    for index, event in enumerate(result.device_complete_events):
        error, ready = _ended(ctx, event, STOP_WAIT)
        check(ready, f"{how}: device_complete_events[{index}] was still pending {ctx.seconds(STOP_WAIT):g} s later; "
                     f"the execution (a loop that cannot finish in that time) was not stopped, expected {code.name}")
        check(error is not None and error.code is code,
              f"{how}: device_complete_events[{index}] ended with {_code(error)}, expected {code.name}")
    for device, outputs in enumerate(result.outputs):
        for index, buffer in enumerate(outputs):
            error, ready = _ended(ctx, buffer.ready_event(), STOP_WAIT)
            check(ready and error is not None and error.code is code,
                  f"{how}: output {index} of device {device} has {'a pending ready event' if not ready else _code(error)}"
                  f", expected its PJRT_Buffer_ReadyEvent to carry {code.name} like the execution's events")


def _expect_result(ctx: PluginUnderTest, work: SlowWork, result: Any, trips: int, how: str) -> None:
    """The execution ends without error and computes the slow loop of ``trips`` trips."""
    for index, event in enumerate(result.device_complete_events):
        error, ready = _ended(ctx, event, COMPILING / 2)
        check(ready and error is None, f"{how}: device_complete_events[{index}] ended with "
                                       f"{_code(error) if ready else 'nothing (still pending)'}, expected no error")
    got = ctx.fetch(result.outputs[0][0])
    expected = slow_program_result(work.host, min(trips, 200))  # every value has converged after 200 trips
    check(np.array_equal(got, expected), lambda: f"{how}: the slow loop computed {got[:3].tolist()}..., expected "
                                                 f"{expected[:3].tolist()}...")


def _can_stop(ctx: PluginUnderTest, executable: Any) -> bool:
    """``LoadedExecutable.cancel`` of an executable with nothing running: harmless (True), or
    Unimplemented for a plugin that cannot stop executions (False)."""
    try:
        ctx.call(executable.cancel, what="LoadedExecutable.cancel of an executable with nothing running")
    except PjrtError as exc:
        check(exc.code is ErrorCode.UNIMPLEMENTED,
              f"LoadedExecutable.cancel of an executable with nothing running raised {describe(exc)}; it is harmless "
              "there, or UNIMPLEMENTED from a plugin that cannot stop executions")
        return False
    return True


class _Stopping:
    """For the duration of a case that starts executions which cannot finish: a short GIL switch
    interval, so that the thread that stops an execution (a watchdog, the caller of cancel) gets
    to run at once and a late stop is the plugin's; and, when the case fails, a cancel of
    whatever is left, so that it leaves no loop running behind it."""

    def __init__(self, *executables: Any) -> None:
        self._executables = executables
        self._before = sys.getswitchinterval()

    def __enter__(self) -> None:
        self._before = sys.getswitchinterval()
        sys.setswitchinterval(min(self._before, 0.0005))

    def __exit__(self, kind: object, *exc: object) -> None:
        sys.setswitchinterval(self._before)
        if kind is None:
            return  # every execution the case started has ended, as it checked
        for executable in self._executables:
            try:
                executable.cancel()
            except PjrtError:
                pass  # the case has said what went wrong


def _work(ctx: PluginUnderTest) -> SlowWork:
    """The slow loop with the trip count measured for the events cases, on an executable of the
    binding cases' own: what cancel does to it (a plugin whose cancel sticks to the executable)
    must not fail the cases that share the events cases' one."""
    measured = slow_work(ctx)  # skips, saying why, where the plugin cannot compile a while loop
    executable = ctx.memo("binding/slow_loop", lambda: ctx.compile(slow_program(SLOW_ELEMENTS), timeout=COMPILING))
    wait_compiled(executable)
    return SlowWork(executable, measured.trips)


# -- ExecuteOptions.timeout ----------------------------------------------------------------------


@case("execute", timeout=COMPILING)
def timeout_bounds_an_execution(ctx: PluginUnderTest) -> None:
    """ExecuteOptions.timeout (the binding's own field): executions that finish within their
    limits give their results, whatever the limits of the others; one that cannot finish is
    stopped soon after its limit passes, with DEADLINE_EXCEEDED on its completion event and its
    outputs; the executable then runs again. A plugin that cannot stop executions (its cancel
    says Unimplemented) may let an execution outrun its limit, but must accept the field."""
    work = _work(ctx)
    short = max(1, work.trips // 4)
    if not _can_stop(ctx, work.executable):
        result = _start(ctx, work, work.trips, ExecuteOptions(timeout=0.05))
        outcome, ready = _ended(ctx, result.device_complete_events[0], COMPILING / 2)
        check(ready and (outcome is None or outcome.code is ErrorCode.DEADLINE_EXCEEDED),
              f"ExecuteOptions.timeout=0.05 on a plugin that cannot stop executions: the execution ended with "
              f"{_code(outcome) if ready else 'nothing'}; expected its result (left running) or DEADLINE_EXCEEDED")
        if outcome is None:
            _expect_result(ctx, work, result, work.trips, "an execution left running past its limit")
        return
    with _Stopping(work.executable):
        # Two limits that pass long after the work: the second is earlier than the first, so a
        # plugin that keeps one clock for all its limits must move it forward.
        for limit in (_GENEROUS, _GENEROUS / 2):
            result = _start(ctx, work, short, ExecuteOptions(timeout=limit))
            _expect_result(ctx, work, result, short, f"an execution of a few milliseconds with ExecuteOptions."
                                                     f"timeout={limit:g}")
        limit, late = 0.1, []
        for _attempt in range(2):  # a busy machine only ever delays the stop: the faster of two
            started = time.monotonic()
            result = _start(ctx, work, _endless(work), ExecuteOptions(timeout=limit))
            _expect_stopped(ctx, result, ErrorCode.DEADLINE_EXCEEDED,
                            f"an execution that cannot finish, with ExecuteOptions.timeout={limit:g}")
            late.append(time.monotonic() - started - limit)
            if late[-1] <= ctx.seconds(STOP_SLACK):
                break
        check(min(late) <= ctx.seconds(STOP_SLACK),
              f"an execution with ExecuteOptions.timeout={limit:g} ended {min(late):.2f} s after its limit passed "
              f"(twice); a plugin that can stop executions stops it at its next loop iteration")
    _expect_result(ctx, work, _start(ctx, work, short), short,
                   "the same executable, after an execution of it was stopped by its limit")


@case("execute", timeout=COMPILING)
def timeout_already_past(ctx: PluginUnderTest) -> None:
    """ExecuteOptions.timeout=0 is a limit that has passed when the execution starts: an
    execution that cannot finish is accepted and ends with DEADLINE_EXCEEDED (never refused as
    an invalid option); a negative limit is refused with INVALID_ARGUMENT or treated the same,
    never as no limit."""
    work = _work(ctx)
    if not _can_stop(ctx, work.executable):
        for limit in (0.0, -1.0):
            try:
                result = _start(ctx, work, 16, ExecuteOptions(timeout=limit))
            except PjrtError as exc:
                check(limit < 0 and exc.code is ErrorCode.INVALID_ARGUMENT,
                      f"PJRT_LoadedExecutable_Execute with ExecuteOptions.timeout={limit:g} raised {describe(exc)}")
                continue
            outcome, ready = _ended(ctx, result.device_complete_events[0], COMPILING / 2)
            check(ready and (outcome is None or outcome.code is ErrorCode.DEADLINE_EXCEEDED),
                  f"ExecuteOptions.timeout={limit:g} on a plugin that cannot stop executions: the execution ended "
                  f"with {_code(outcome) if ready else 'nothing'}; expected its result or DEADLINE_EXCEEDED")
        return
    with _Stopping(work.executable):
        for limit in (0.0, -1.0):
            how = f"an execution that cannot finish, with ExecuteOptions.timeout={limit:g}"
            try:
                result = _start(ctx, work, _endless(work), ExecuteOptions(timeout=limit))
            except PjrtError as exc:
                check(limit < 0 and exc.code is ErrorCode.INVALID_ARGUMENT,
                      f"PJRT_LoadedExecutable_Execute refused {how}: {describe(exc)}; "
                      + ("a limit of 0 s has simply passed already (DEADLINE_EXCEEDED on the events)" if limit == 0
                         else "expected INVALID_ARGUMENT, or DEADLINE_EXCEEDED on the events"))
                continue
            _expect_stopped(ctx, result, ErrorCode.DEADLINE_EXCEEDED, how)


# -- LoadedExecutable.cancel ---------------------------------------------------------------------


@case("execute", timeout=COMPILING)
def cancel_stops_running_and_queued_executions(ctx: PluginUnderTest) -> None:
    """LoadedExecutable.cancel (the binding's own call) is harmless on an executable with
    nothing running; with a running execution and one queued behind it, both end with CANCELLED
    on their events and outputs; executions started after it run as if it never happened. A
    plugin that cannot stop executions says Unimplemented (the case then skips)."""
    work = _work(ctx)
    if not _can_stop(ctx, work.executable):
        skip(f"plugin {ctx.name} cannot stop executions: LoadedExecutable.cancel says UNIMPLEMENTED, as the "
             "binding allows")
    short = max(1, work.trips // 4)
    _expect_result(ctx, work, _start(ctx, work, short), short,
                   "an execution started after LoadedExecutable.cancel of the idle executable")
    with _Stopping(work.executable):
        running = _start(ctx, work, _endless(work))
        queued = _start(ctx, work, _endless(work))
        ctx.call(work.executable.cancel, what="LoadedExecutable.cancel with two executions unfinished")
        _expect_stopped(ctx, running, ErrorCode.CANCELLED, "the running execution, after LoadedExecutable.cancel")
        _expect_stopped(ctx, queued, ErrorCode.CANCELLED, "the execution queued behind it, after "
                                                          "LoadedExecutable.cancel")
    _expect_result(ctx, work, _start(ctx, work, short), short,
                   "an execution started after LoadedExecutable.cancel stopped two others")


@case("execute", timeout=COMPILING)
def cancel_reaches_every_device_of_an_execution(ctx: PluginUnderTest) -> None:
    """LoadedExecutable.cancel stops an execution over two devices that has finished on one
    device and still runs on the other: the unfinished device's event and outputs carry
    CANCELLED (an execution is unfinished until all its devices are done)."""
    devices = ctx.need_devices(2)
    work = _work(ctx)
    if not _can_stop(ctx, work.executable):
        skip(f"plugin {ctx.name} cannot stop executions: LoadedExecutable.cancel says UNIMPLEMENTED, as the "
             "binding allows")
    executable = ctx.compile(slow_program(SLOW_ELEMENTS), CompileOptions(num_replicas=2), timeout=COMPILING)
    wait_compiled(executable)
    with _Stopping(executable):
        result = _start(ctx, work, 0, executable=executable, devices=devices, trips_per_device=(1, _endless(work)))
        error, ready = _ended(ctx, result.device_complete_events[0], STOP_WAIT)
        check(ready and error is None, f"device 0 of a two-replica execution (one loop trip) ended with "
                                       f"{_code(error) if ready else 'nothing (still pending)'}, expected no error")
        check(not result.device_complete_events[1].is_ready(),
              "device 1 of the two-replica execution (a loop that cannot finish) is already done")
        ctx.call(executable.cancel, what="LoadedExecutable.cancel of a two-device execution half done")
        error, ready = _ended(ctx, result.device_complete_events[1], STOP_WAIT)
        check(ready, f"after LoadedExecutable.cancel, device 1 of an execution whose device 0 had finished was "
                     f"still running {ctx.seconds(STOP_WAIT):g} s later; the execution was not finished, so cancel "
                     "must stop it there")
        check(error is not None and error.code is ErrorCode.CANCELLED,
              f"device 1 of the cancelled execution ended with {_code(error)}, expected CANCELLED")


# -- Event.await_(timeout) -----------------------------------------------------------------------


@case("events", timeout=COMPILING)
def await_with_a_time_limit(ctx: PluginUnderTest) -> None:
    """Event.await_(timeout) (the binding's own bound): on a pending event it raises
    DEADLINE_EXCEEDED once the bound passes (at once for 0 or a negative bound) and the work goes
    on; on a ready event it returns at once, for any bound, with the event's outcome."""
    work = _work(ctx)
    can_stop = _can_stop(ctx, work.executable)
    # A plugin that can stop it gets a loop that cannot finish during the case (cancelled at the
    # end); another one the measured loop, which must still run when the first bound passes.
    trips = _endless(work) if can_stop else work.trips
    with _Stopping(*((work.executable,) if can_stop else ())):
        result = _start(ctx, work, trips)
        event = result.device_complete_events[0]
        if event.is_ready():
            skip(f"plugin {ctx.name} finished the slow loop before PJRT_LoadedExecutable_Execute returned: nothing "
                 "pending to await with a bound")
        for bound in (0.02, 0.0, -1.0):
            started = time.monotonic()
            try:
                ctx.call(event.await_, bound, what=f"Event.await_({bound:g}) of a pending event", timeout=2.0)
            except PjrtError as exc:
                allowed = (ErrorCode.DEADLINE_EXCEEDED,) + ((ErrorCode.INVALID_ARGUMENT,) if bound < 0 else ())
                check(exc.code in allowed, f"Event.await_({bound:g}) of a pending event raised {describe(exc)}, "
                                           f"expected DEADLINE_EXCEEDED")
                if not can_stop and event.is_ready():
                    break  # the measured loop ended meanwhile: its own outcome is checked below
                check(not event.is_ready(), f"Event.await_({bound:g}) ran out, and the event became ready: the wait "
                                            "ends there, not the work")
                continue
            took = time.monotonic() - started
            check(not can_stop and event.is_ready() and took <= max(bound, 0.0) + ctx.seconds(STOP_SLACK),
                  f"Event.await_({bound:g}) of a pending event returned after {took:.2f} s "
                  f"({'the event is ready' if event.is_ready() else 'the event is still pending'}); expected "
                  f"DEADLINE_EXCEEDED once the bound had passed")
            break
        if can_stop:
            ctx.call(work.executable.cancel, what="LoadedExecutable.cancel (ending the case's loop)")
            _expect_stopped(ctx, result, ErrorCode.CANCELLED, "the loop awaited with bounds, after "
                                                              "LoadedExecutable.cancel")
        else:
            _expect_result(ctx, work, result, trips, "the loop awaited with bounds that ran out")
    done = _start(ctx, work, 1).device_complete_events[0]
    ctx.await_event(done, "an execution of one loop trip")
    for bound in (0.0, -1.0, 0.02):
        try:
            ctx.call(done.await_, bound, what=f"Event.await_({bound:g}) of a ready event", timeout=2.0)
        except PjrtError as exc:
            fail(f"Event.await_({bound:g}) of an event that is ready without error raised {describe(exc)}; a bound "
                 "only matters while the event is pending")
