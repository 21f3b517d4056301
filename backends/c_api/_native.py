"""Native gates in front of the served struct's destroy functions, compiled with llvmlite.

A C caller destroys handles from C++ destructors, and some of those run while a Python exception
is in flight on the calling thread: when a JAX call raises, CPython releases the call's argument
arrays before the exception reaches Python code, and each array's destructor calls
``PJRT_Buffer_Destroy``. A ctypes callback entered in that state runs Python with the error
indicator set; the first call inside fails with ``SystemError``, and whatever the callback does
then, the exception in flight is gone (the user sees "error return without exception set"
instead of the plugin's error), or jaxlib aborts on the destroy's error.

No Python code can avoid it, so the destroy slots point at a few instructions of native code
instead: the gate takes the GIL (``PyGILState_Ensure``: the caller may have released it, jaxlib does
around destructors, while its thread state still holds the exception), and when an exception is set
it records the handle in a queue and returns NULL without running Python; otherwise it lets the
GIL go and calls the Python callback as usual. The queue is drained by the next callback that runs
normally (it is appended to under the GIL only, so appending needs no atomic operation). llvmlite ships with numba,
one of pjrt-hub's dependencies; where it cannot build the gates, the slots keep pointing at the
Python callbacks directly.
"""

from __future__ import annotations

import ctypes
import logging
import threading
from typing import Any

__all__ = ["DestroyGates", "build_gates"]

log = logging.getLogger("pjrt_hub.c_api.server")

#: Handles a gate may hold back before the next normal callback drains them; past this they
#: are dropped (their Python objects then live until the process ends, a leak, not a crash).
QUEUE_CAPACITY = 1 << 16

_LOCK = threading.Lock()
_ENGINES: list[Any] = []  # an MCJIT engine owns the machine code: it must live forever
_INITIALIZED = False


class DestroyGates:
    """The native gates of one served struct, and their queue of held-back handles."""

    def __init__(self, engine: Any, addresses: dict[str, int], count_address: int, queue_address: int,
                 names: list[str]) -> None:
        self._engine = engine
        self.addresses = addresses
        #: The gated function of each gate index (what a queued ``(index, handle)`` destroys).
        self.names = names
        self._count = ctypes.c_int64.from_address(count_address)
        self._queue = (ctypes.c_uint64 * QUEUE_CAPACITY).from_address(queue_address)
        self._codes = (ctypes.c_uint64 * QUEUE_CAPACITY).from_address(queue_address + 8 * QUEUE_CAPACITY)

    def pending(self) -> bool:
        return self._count.value != 0

    def take(self) -> list[tuple[int, int]]:
        """The held-back ``(gate index, handle)`` pairs, emptying the queue. Call with the GIL
        held (the gates append only under it)."""
        count = self._count.value
        if not count:
            return []
        count = min(count, QUEUE_CAPACITY)
        out = [(int(self._codes[i]), int(self._queue[i])) for i in range(count)]
        self._count.value = 0
        return out


def _initialize() -> Any:
    global _INITIALIZED
    import llvmlite.binding as llvm

    if not _INITIALIZED:
        try:
            llvm.initialize()
        except (RuntimeError, AttributeError):  # newer llvmlite initializes by itself
            pass
        llvm.initialize_native_target()
        llvm.initialize_native_asmprinter()
        _INITIALIZED = True
    return llvm


def build_gates(targets: dict[str, tuple[int, int, bool]]) -> DestroyGates | None:
    """Gates for ``targets``: name -> (Python callback address, byte offset of the handle in the
    argument, whether the function returns void). The argument is a pointer to an Args struct
    (offset 16) or the handle itself (offset -1: the deleters). None if llvmlite cannot."""
    try:
        with _LOCK:
            llvm = _initialize()
            ensure = ctypes.cast(ctypes.pythonapi.PyGILState_Ensure, ctypes.c_void_p).value
            release = ctypes.cast(ctypes.pythonapi.PyGILState_Release, ctypes.c_void_p).value
            err_occurred = ctypes.cast(ctypes.pythonapi.PyErr_Occurred, ctypes.c_void_p).value
            lines = [
                "@count = global i64 0",
                f"@queue = global [{2 * QUEUE_CAPACITY} x i64] zeroinitializer",
            ]
            names = sorted(targets)
            for index, name in enumerate(names):
                callback, offset, void = targets[name]
                ret = "void" if void else "i8*"
                handle = ("%h = ptrtoint i8* %args to i64" if offset < 0 else
                          f"%hp = getelementptr i8, i8* %args, i64 {offset}\n"
                          f"  %hq = bitcast i8* %hp to i64*\n  %h = load i64, i64* %hq")
                lines.append(f"""
define {ret} @gate_{index}(i8* %args) {{
entry:
  %state = call i32 inttoptr (i64 {ensure} to i32 ()*)()
  %err = call i8* inttoptr (i64 {err_occurred} to i8* ()*)()
  %set = icmp ne i8* %err, null
  br i1 %set, label %defer, label %let_go
let_go:
  call void inttoptr (i64 {release} to void (i32)*)(i32 %state)
  br label %call
defer:
  {handle}
  %n = load i64, i64* @count
  %room = icmp slt i64 %n, {QUEUE_CAPACITY}
  br i1 %room, label %push, label %done
push:
  %slot = getelementptr [{2 * QUEUE_CAPACITY} x i64], [{2 * QUEUE_CAPACITY} x i64]* @queue, i64 0, i64 %n
  store i64 %h, i64* %slot
  %ci = add i64 %n, {QUEUE_CAPACITY}
  %cslot = getelementptr [{2 * QUEUE_CAPACITY} x i64], [{2 * QUEUE_CAPACITY} x i64]* @queue, i64 0, i64 %ci
  store i64 {index}, i64* %cslot
  %n1 = add i64 %n, 1
  store i64 %n1, i64* @count
  br label %done
done:
  call void inttoptr (i64 {release} to void (i32)*)(i32 %state)
  {"ret void" if void else "ret i8* null"}
call:
  {"call void" if void else "%r = call i8*"} inttoptr (i64 {callback} to {ret} (i8*)*)(i8* %args)
  {"ret void" if void else "ret i8* %r"}
}}""")
            module = llvm.parse_assembly("\n".join(lines))
            module.verify()
            machine = llvm.Target.from_default_triple().create_target_machine()
            engine = llvm.create_mcjit_compiler(module, machine)
            engine.finalize_object()
            _ENGINES.append(engine)
            addresses = {name: engine.get_function_address(f"gate_{i}") for i, name in enumerate(names)}
            return DestroyGates(engine, addresses, engine.get_global_value_address("count"),
                                engine.get_global_value_address("queue"), names)
    except Exception as exc:  # noqa: BLE001 - without gates the struct still works
        log.warning("pjrt-hub could not build the native destroy gates (%s): a destroy that arrives while a "
                    "Python exception is in flight will lose that exception", exc)
        return None
