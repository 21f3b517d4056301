"""Mutants for the cases of pjrt_hub/testing/cases/contract_binding.py: one defect each in what the
Python binding adds to the C API, of the kind a plugin ships (a time limit that fires late or with
the wrong code, a cancel that sticks to the executable or forgets a device, a bounded wait that
waits for the work anyway).

All are the reference plugin with one runtime function patched for the run (the toy cannot stop
executions: its cancel says Unimplemented, as the binding allows, and it runs no loops), built
like those of tests/conformance/mutants.py, whose factories they reuse.
tests/conformance/test_mutation_contract.py runs them and the unmodified bases as controls. Those
marked held-out copy defects of a catalogue written without reading the suite (kept outside the
repository), which the suite once let through; the others replay survivors of the mutation run
(tests/mutation/survivors.toml) that these cases now kill.
"""

from __future__ import annotations

import contextlib
import heapq
import math
import weakref
from typing import Any, Callable, Iterator

from pjrt_hub.abi import Cancelled, ExecutionError, PjrtError
from pjrt_hub.testing._mutation import Base, Mutant

from .mutants import BASES as _BASES, _runtime_module, reference

#: The bases the mutants here are made from (the same as the main catalogue's).
BASES: tuple[Base, ...] = _BASES


def _executables() -> Any:
    return _runtime_module("_executables")


# -- ExecuteOptions.timeout ------------------------------------------------------------------------


def _limit_reported_as_internal() -> Callable[..., Any]:
    """The watchdog stops the execution with INTERNAL instead of DEADLINE_EXCEEDED."""
    watch = _executables().watch

    def watch_as_internal(flag: Any, timeout: float, reason: PjrtError) -> None:
        watch(flag, timeout, ExecutionError(reason.message))

    return watch_as_internal


def _limit_checked_once_a_second() -> Callable[..., Any]:
    """The watchdog wakes a second after a limit is set, whatever the limit (a poll where a
    deadline should be): a limit of 0.1 s stops the execution a second late."""
    cancel = _runtime_module("_cancel")

    def watch_late(flag: Any, timeout: float, reason: PjrtError) -> None:
        cancel.watch(flag, max(timeout, 1.0), reason)

    return watch_late


def _positive_limits_only() -> Callable[..., Any]:
    """ExecuteOptions.timeout=0 is refused with INVALID_ARGUMENT (replays the survivor
    ``_executables.py:ReplaceComparisonOperator_GtE_Gt:879243f2c1``)."""
    seconds = _executables()._seconds

    def positive(timeout: Any) -> float:
        if timeout == 0:
            return seconds(-1.0)
        return seconds(timeout)

    return positive


def _negative_limit_is_no_limit() -> Callable[..., Any]:
    seconds = _executables()._seconds

    def no_limit(timeout: Any) -> float:
        if isinstance(timeout, (int, float)) and not isinstance(timeout, bool) and timeout < 0:
            return math.inf
        return seconds(timeout)

    return no_limit


@contextlib.contextmanager
def _one_clock_for_all_limits() -> Iterator[Any]:
    """The watchdog is woken only for the first limit set: a later, earlier limit waits for the
    first one's deadline (replays ``_cancel.py:NumberReplacer:5840260cca``, where the comparison
    with the earliest deadline never asks for a wake-up). A watchdog of its own for the run: the
    process's one must not be left asleep past a deadline it was never told of."""
    cancel = _runtime_module("_cancel")
    base = type(cancel._WATCHDOG)

    class OneClock(base):  # type: ignore[misc, valid-type]  # a subclass of the runtime's private class
        def watch(self, flag: Any, deadline: float, reason: PjrtError) -> None:
            if self._thread is None or not self._heap:
                super().watch(flag, deadline, reason)
                return
            with self._wake:
                heapq.heappush(self._heap, (deadline, next(self._order), flag, reason))

    with reference((cancel, "_WATCHDOG", OneClock()))() as plugin:
        yield plugin


# -- LoadedExecutable.cancel -----------------------------------------------------------------------


@contextlib.contextmanager
def _sticky_cancel() -> Iterator[Any]:
    """After cancel, every later execution of that executable is cancelled too (the
    executable's "cancelled" state is never reset)."""
    loaded = _executables().CpuLoadedExecutable
    cancel, arm = loaded.cancel, loaded._arm
    cancelled: weakref.WeakSet[Any] = weakref.WeakSet()

    def sticky(self: Any) -> None:
        cancelled.add(self)
        cancel(self)

    def arm_cancelled(self: Any, launches: list[Any], timeout: float | None) -> None:
        arm(self, launches, timeout)
        if self in cancelled and launches:
            launches[0].cancel.cancel(Cancelled(f"{self._name}: the execution was cancelled"))

    with reference((loaded, "cancel", sticky), (loaded, "_arm", arm_cancelled))() as plugin:
        yield plugin


def _retired_after_first_device() -> Callable[..., Any]:
    """A call's cancel flag is retired when its first device finishes, so a cancel no longer
    reaches the devices still running it (replays ``_executables.py:NumberReplacer:c80d208456``)."""

    def disarm(self: Any, launch: Any) -> None:
        flag = launch.cancel
        if flag is None:
            return
        self._running.pop(flag, None)
        flag.done = True

    return disarm


def _cancel_ignored(self: Any) -> None:
    """cancel returns and stops nothing, where a plugin that cannot stop says Unimplemented."""


# -- Event.await_(timeout) -------------------------------------------------------------------------


def _bound_ignored() -> Callable[..., Any]:
    """Event.await_ waits for the event whatever its bound (replays
    ``_events.py:ReplaceComparisonOperator_GtE_LtE:31f0bc99be``)."""
    await_ = _runtime_module("_events").CpuEvent.await_

    def await_unbounded(self: Any, timeout: float | None = None) -> None:
        await_(self, None)

    return await_unbounded


def _zero_bound_never_looks() -> Callable[..., Any]:
    await_ = _runtime_module("_events").CpuEvent.await_
    deadline = _runtime_module("_events").DeadlineExceeded

    def await_polling(self: Any, timeout: float | None = None) -> None:
        if timeout is not None and timeout <= 0:
            raise deadline("PJRT_Event_Await: a zero bound only polls, and the poll found nothing")
        await_(self, timeout)

    return await_polling


def _negative_bound_waits() -> Callable[..., Any]:
    """A negative bound waits for the event without a limit (replays
    ``_events.py:NumberReplacer:514da7af23``: the lock's -1, "forever")."""
    await_ = _runtime_module("_events").CpuEvent.await_

    def await_negative(self: Any, timeout: float | None = None) -> None:
        await_(self, None if timeout is not None and timeout < 0 else timeout)

    return await_negative


MUTANTS: tuple[Mutant, ...] = (
    Mutant("timeout_reported_as_internal", "execute", "an execution stopped by ExecuteOptions.timeout carries "
           "INTERNAL on its event and outputs instead of DEADLINE_EXCEEDED (held-out ref_timeout_reported_as_internal)",
           ("execute/timeout_bounds_an_execution",),
           reference((_executables(), "watch", _limit_reported_as_internal())), base="reference"),
    Mutant("timeout_fires_a_second_late", "execute", "the limit of ExecuteOptions.timeout is checked a second after "
           "it is set, whatever it is", ("execute/timeout_bounds_an_execution",),
           reference((_executables(), "watch", _limit_checked_once_a_second())), base="reference"),
    Mutant("earlier_limit_waits_for_the_first", "execute", "a limit set while a later one is pending is only "
           "checked at that later one's deadline", ("execute/timeout_bounds_an_execution",),
           _one_clock_for_all_limits, base="reference"),
    Mutant("zero_timeout_refused", "execute", "ExecuteOptions.timeout=0 is refused with INVALID_ARGUMENT",
           ("execute/timeout_already_past",), reference((_executables(), "_seconds", _positive_limits_only())),
           base="reference"),
    Mutant("negative_timeout_means_no_limit", "execute", "ExecuteOptions.timeout=-1 is taken as no limit (held-out "
           "ref_negative_timeout_means_no_limit)", ("execute/timeout_already_past",),
           reference((_executables(), "_seconds", _negative_limit_is_no_limit())), base="reference"),
    Mutant("cancel_sticks_to_the_executable", "execute", "after LoadedExecutable.cancel, every later execution of "
           "the executable is cancelled too (held-out ref_cancel_also_cancels_later_executions)",
           ("execute/cancel_stops_running_and_queued_executions",), _sticky_cancel, base="reference"),
    Mutant("cancel_does_nothing", "execute", "LoadedExecutable.cancel returns without stopping anything, instead "
           "of saying UNIMPLEMENTED", ("execute/cancel_stops_running_and_queued_executions",),
           reference((_executables().CpuLoadedExecutable, "cancel", _cancel_ignored)), base="reference"),
    Mutant("cancel_forgets_unfinished_devices", "execute", "a cancel no longer reaches the devices of an execution "
           "whose first device has finished", ("execute/cancel_reaches_every_device_of_an_execution",),
           reference((_executables().CpuLoadedExecutable, "_disarm", _retired_after_first_device())),
           base="reference"),
    Mutant("await_bound_ignored", "events", "Event.await_(timeout) waits until the event is ready, whatever the "
           "bound", ("events/await_with_a_time_limit",),
           reference((_runtime_module("_events").CpuEvent, "await_", _bound_ignored())), base="reference"),
    Mutant("await_zero_bound_raises_when_ready", "events", "Event.await_ with a zero bound raises DEADLINE_EXCEEDED "
           "without looking whether the event is ready (held-out ref_await_zero_timeout_raises_when_ready)",
           ("events/await_with_a_time_limit",),
           reference((_runtime_module("_events").CpuEvent, "await_", _zero_bound_never_looks())), base="reference"),
    Mutant("await_negative_bound_waits", "events", "Event.await_ with a negative bound waits for the event without "
           "a limit", ("events/await_with_a_time_limit",),
           reference((_runtime_module("_events").CpuEvent, "await_", _negative_bound_waits())), base="reference"),
)
