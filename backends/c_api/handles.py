"""Who destroys a C handle, and when: ownership, the ``PJRT_Event_OnReady`` trampoline, events.

Every owned handle (buffer, executable, event) is registered with its client (:class:`_Owner`), so that
destroying the client first destroys what still lives of its buffers, executables and events, in that
order, whatever order Python's garbage collector picks; a handle is destroyed exactly once. Host memory
the plugin may still read or write is released through ``PJRT_Event_OnReady`` by one static ctypes
trampoline, and memory lent to a view (``PJRT_Client_CreateViewOfDeviceBuffer``) through its
``on_delete_callback`` by another, so no per-call callback object has to outlive anything."""

from __future__ import annotations

import atexit
import ctypes
import itertools
import logging
import time
import weakref
from typing import Any, Callable

from pjrt_hub.abi import DeadlineExceeded, Event, FailedPrecondition, InvalidArgument, PjrtError

from .library import PluginLibrary

log = logging.getLogger("pjrt_hub.c_api")


# -- ownership -------------------------------------------------------------------------------


class _Owned:
    """One C handle that must be destroyed exactly once, by ``destroy_fn(args{field=handle})``."""

    __slots__ = ("lib", "handle", "destroy_fn", "args_name", "field", "owner", "kind", "__weakref__")

    def __init__(self, lib: PluginLibrary, handle: int, destroy_fn: str, args_name: str, field: str,
                 owner: "_Owner | None", kind: int) -> None:
        self.lib = lib
        self.handle = handle
        self.destroy_fn = destroy_fn
        self.args_name = args_name
        self.field = field
        self.owner = owner
        #: Destroy order within an owner: 0 buffers, 1 executables, 2 events, 3 the rest.
        self.kind = kind
        if owner is not None:
            owner.children.add(self)

    @property
    def alive(self) -> bool:
        return self.handle != 0

    def close(self) -> None:
        handle, self.handle = self.handle, 0
        if not handle:
            return
        if self.owner is not None:
            self.owner.children.discard(self)
        args = self.lib.args(self.args_name, **{self.field: handle})
        self.lib.call(self.destroy_fn, args)


class _Owner(_Owned):
    """A client: it owns children that must go before it."""

    __slots__ = ("children",)

    def __init__(self, lib: PluginLibrary, handle: int) -> None:
        self.children: set[_Owned] = set()
        super().__init__(lib, handle, "PJRT_Client_Destroy", "PJRT_Client_Destroy_Args", "client", None, 3)
        _LIVE_CLIENTS.add(self)

    def close(self) -> None:
        if not self.handle:
            return
        for child in sorted(list(self.children), key=lambda c: c.kind):
            _close_quietly(child)
        super().close()

    def __del__(self) -> None:
        _close_quietly(self)


_LIVE_CLIENTS: "weakref.WeakSet[_Owner]" = weakref.WeakSet()


def _close_quietly(owned: _Owned) -> None:
    try:
        owned.close()
    except Exception as exc:  # noqa: BLE001 - a finalizer must not raise
        log.warning("destroying a %s handle failed: %s", owned.destroy_fn, exc)


@atexit.register
def _destroy_live_clients() -> None:
    # Tear clients down while the interpreter still works: plugin threads and static destructors
    # are happier with an orderly PJRT_Client_Destroy than with whatever the exit leaves.
    for owner in list(_LIVE_CLIENTS):
        _close_quietly(owner)


class _Handle:
    """Base of the wrappers that own their handle (buffers, events, executables)."""

    __slots__ = ("_owned", "__weakref__")
    _owned: _Owned

    @property
    def handle(self) -> int:
        """The raw C pointer (0 once destroyed)."""
        return self._owned.handle

    def _live(self, what: str) -> int:
        handle = self._owned.handle
        if not handle:
            raise FailedPrecondition(f"{what}: the {type(self).__name__} was destroyed")
        return handle

    def destroy(self) -> None:
        self._owned.close()

    def __del__(self) -> None:
        owned = getattr(self, "_owned", None)
        if owned is not None:
            _close_quietly(owned)


# -- OnReady: one trampoline for every callback ----------------------------------------------


_ON_READY_TYPE = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p)
_PENDING: dict[int, tuple[PluginLibrary, Callable[[PjrtError | None], None]]] = {}
_TOKENS = itertools.count(1)


def _on_ready(err: int | None, user_arg: int | None) -> None:
    entry = _PENDING.pop(user_arg or 0, None)
    if entry is None:
        return
    lib, callback = entry
    try:
        error = lib.error(err, "PJRT_Event_OnReady") if err else None
        callback(error)
    except Exception:  # noqa: BLE001 - runs on a plugin thread; nothing can catch it there
        log.exception("PJRT_Event_OnReady callback failed")


_ON_READY = _ON_READY_TYPE(_on_ready)
_ON_READY_ADDRESS = ctypes.cast(_ON_READY, ctypes.c_void_p).value


def _register_on_ready(lib: PluginLibrary, event: int, callback: Callable[[PjrtError | None], None]) -> None:
    _check_callable(callback)
    token = next(_TOKENS)
    _PENDING[token] = (lib, callback)
    args = lib.args("PJRT_Event_OnReady_Args", event=event, callback=_ON_READY_ADDRESS, user_arg=token)
    try:
        lib.call("PJRT_Event_OnReady", args)
    except BaseException:
        _PENDING.pop(token, None)
        raise


def _keep_until_ready(lib: PluginLibrary, event: int, *objects: Any) -> None:
    """Hold ``objects`` until ``event`` fires (the plugin still reads or writes their memory)."""
    keep = list(objects)

    def release(_error: PjrtError | None) -> None:
        keep.clear()

    _register_on_ready(lib, event, release)


# -- views: the caller's memory lent to the plugin --------------------------------------------


_ON_DELETE_TYPE = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p)
#: Memory lent to a plugin by ``PJRT_Client_CreateViewOfDeviceBuffer``, by token: the array (kept
#: alive until the plugin is done with it) and the caller's ``on_delete``.
_LENT: dict[int, tuple[Any, Callable[[], None] | None]] = {}


def _on_delete(_pointer: int | None, user_arg: int | None) -> None:
    entry = _LENT.pop(user_arg or 0, None)
    if entry is None:
        return
    _array, on_delete = entry
    if on_delete is None:
        return
    try:
        on_delete()
    except Exception:  # noqa: BLE001 - runs on a plugin thread; nothing can catch it there
        log.exception("the on_delete callback of a view failed")


_ON_DELETE = _ON_DELETE_TYPE(_on_delete)
_ON_DELETE_ADDRESS = ctypes.cast(_ON_DELETE, ctypes.c_void_p).value


def _lend(array: Any, on_delete: Callable[[], None] | None) -> int:
    """Keep ``array`` alive until the plugin calls back through :data:`_ON_DELETE_ADDRESS` with
    the returned token (its ``on_delete_callback_arg``), then run ``on_delete``."""
    token = next(_TOKENS)
    _LENT[token] = (array, on_delete)
    return token


def _unlend(token: int) -> None:
    """The view was never made: forget the loan without running its ``on_delete``."""
    _LENT.pop(token, None)


# -- events ----------------------------------------------------------------------------------


class CEvent(_Handle, Event):
    """``PJRT_Event``: owned; destroyed with the object or its client."""

    __slots__ = ("_lib",)

    def __init__(self, lib: PluginLibrary, handle: int, owner: _Owner | None) -> None:
        self._lib = lib
        self._owned = _Owned(lib, handle, "PJRT_Event_Destroy", "PJRT_Event_Destroy_Args", "event", owner, 2)

    def is_ready(self) -> bool:
        args = self._lib.args("PJRT_Event_IsReady_Args", event=self._live("is_ready"))
        self._lib.call("PJRT_Event_IsReady", args)
        return bool(args.is_ready)

    def error(self) -> PjrtError | None:
        args = self._lib.args("PJRT_Event_Error_Args", event=self._live("error"))
        err = self._lib.function("PJRT_Event_Error")(ctypes.addressof(args))
        return self._lib.error(err, "PJRT_Event_Error") if err else None

    def await_(self, timeout: float | None = None) -> None:
        handle = self._live("await_")
        if timeout is not None:
            # PJRT_Event_Await has no timeout: poll IsReady, then await the (ready) event.
            deadline = time.monotonic() + timeout
            pause = 1e-5
            while not self.is_ready():
                if time.monotonic() >= deadline:
                    # The work goes on: the C API cannot stop an execution.
                    raise DeadlineExceeded(f"PJRT_Event_Await: the event was not ready after {timeout:g} s",
                                           plugin=self._lib.name)
                time.sleep(pause)
                pause = min(pause * 2, 0.01)
        args = self._lib.args("PJRT_Event_Await_Args", event=handle)
        self._lib.call("PJRT_Event_Await", args)

    def on_ready(self, callback: Callable[[PjrtError | None], None]) -> None:
        _register_on_ready(self._lib, self._live("on_ready"), callback)


class _DoneEvent(Event):
    """Stands in where a plugin returned no event (the work was done when the call returned)."""

    __slots__ = ()

    def is_ready(self) -> bool:
        return True

    def error(self) -> None:
        return None

    def await_(self, timeout: float | None = None) -> None:
        return None

    def on_ready(self, callback: Callable[[PjrtError | None], None]) -> None:
        _check_callable(callback)
        callback(None)


def _check_callable(callback: Any) -> None:
    # Refused here: the plugin would call it on its own thread, where nobody sees it fail.
    if not callable(callback):
        raise InvalidArgument(f"PJRT_Event_OnReady: callback must be callable, got {callback!r}")


def _event(lib: PluginLibrary, handle: int | None, owner: _Owner | None) -> Event:
    return CEvent(lib, handle, owner) if handle else _DoneEvent()
