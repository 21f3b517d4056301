"""``PJRT_Event`` for the host runtime: a one-shot latch that may carry an error.

An event is created pending and set exactly once, by the worker that ran an execution or by the
runtime when a transfer finished. Most events of a tiny program are ready before anyone looks at
them, so a ready event costs nothing: :data:`READY` is one shared, already-set instance, and a
pending event allocates only a ``threading.Lock`` used as a latch (held from creation until
:meth:`CpuEvent.set`; waiters acquire and release it at once).
"""

from __future__ import annotations

import logging
import threading
from typing import Callable

from pjrt_hub.abi import DeadlineExceeded, Event, ExecutionError, InvalidArgument, PjrtError

__all__ = ["READY", "CpuEvent", "failed_event"]

_log = logging.getLogger(__name__)

#: Guards the callback lists of all events. Registration and setting are a few list operations,
#: so one lock for the process costs less than one per event.
_CALLBACKS = threading.Lock()

OnReady = Callable[["PjrtError | None"], None]
Helper = Callable[["CpuEvent"], None]


class CpuEvent(Event):
    """Completion of host work; ``error`` is the error the work ended with, if any."""

    __slots__ = ("_done", "_error", "_callbacks", "_latch", "_helper", "__weakref__")

    def __init__(self, helper: "Helper | None" = None) -> None:
        self._done = False
        #: Runs queued work on the waiting thread until this event is set, if it can (a
        #: device's queue: .devices._Worker.help); called by an :meth:`await_` without a limit.
        self._helper = helper
        self._error: PjrtError | None = None
        self._callbacks: list[OnReady] | None = None
        latch = threading.Lock()
        latch.acquire()
        self._latch: threading.Lock | None = latch

    @classmethod
    def _finished(cls, error: PjrtError | None) -> "CpuEvent":
        event = cls.__new__(cls)
        event._done = True
        event._error = error
        event._callbacks = None
        event._latch = None
        event._helper = None
        return event

    # -- producer side ----------------------------------------------------------------------

    def set(self, error: PjrtError | None = None) -> None:
        """Mark the work done (with ``error`` if it failed) and run the callbacks, once."""
        with _CALLBACKS:
            if self._done:
                raise InvalidArgument("PJRT_Event was set twice; an event completes exactly once")
            self._error = error
            self._done = True
            callbacks, self._callbacks = self._callbacks, None
            latch = self._latch
        if latch is not None:
            latch.release()
        if callbacks:
            for callback in callbacks:
                _call(callback, error)

    # -- consumer side ----------------------------------------------------------------------

    def is_ready(self) -> bool:
        return self._done

    def error(self) -> PjrtError | None:
        return self._error if self._done else None

    def await_(self, timeout: float | None = None) -> None:
        """Block until ready, or DeadlineExceeded after ``timeout`` seconds (the work goes on:
        a wait that runs out stops nothing; ``ExecuteOptions.timeout`` does)."""
        if not self._done:
            if self._helper is not None and (timeout is None or timeout >= threading.TIMEOUT_MAX):
                self._helper(self)
            latch = self._latch
            assert latch is not None  # only an event made finished (_finished) has none
            if timeout is None or timeout >= threading.TIMEOUT_MAX:  # inf: no limit, not an OverflowError
                latch.acquire()
            elif not latch.acquire(timeout=max(timeout, 0.0)):
                raise DeadlineExceeded(f"PJRT_Event_Await: the event was not ready after {timeout:g} s")
            latch.release()
        if self._error is not None:
            raise self._error.for_raise()

    def on_ready(self, callback: OnReady) -> None:
        if not callable(callback):
            raise InvalidArgument(f"PJRT_Event_OnReady: callback must be callable, got {callback!r}")
        if not self._done:
            with _CALLBACKS:
                if not self._done:
                    if self._callbacks is None:
                        self._callbacks = [callback]
                    else:
                        self._callbacks.append(callback)
                    return
        _call(callback, self._error)

    def destroy(self) -> None:
        """Nothing to release: a pending event still completes and runs its callbacks."""

    def __repr__(self) -> str:
        state = "pending" if not self._done else ("ready" if self._error is None else f"failed: {self._error}")
        return f"<CpuEvent {state}>"


def _call(callback: OnReady, error: PjrtError | None) -> None:
    # A callback that raises must not stop the others, nor kill the worker thread that set the
    # event; PJRT callbacks have no way to report an error either.
    try:
        callback(error)
    except Exception:  # noqa: BLE001
        _log.exception("PJRT_Event on_ready callback %r raised", callback)


#: The event of work that is already done without error; shared, since it never changes.
READY: CpuEvent = CpuEvent._finished(None)


def failed_event(error: BaseException) -> CpuEvent:
    """An event that is already done and carries ``error`` (wrapped as ExecutionError if needed)."""
    return CpuEvent._finished(as_pjrt_error(error))


def as_pjrt_error(error: BaseException, context: str = "") -> PjrtError:
    """Keep a PJRT error as it is; wrap anything else in ExecutionError with its message."""
    if isinstance(error, PjrtError):
        return error
    prefix = f"{context}: " if context else ""
    return ExecutionError(f"{prefix}{type(error).__name__}: {error}")
