"""Native code in front of the served struct's functions, compiled with llvmlite: gates for the
destroy functions, and fast paths for the calls a framework makes on every execute.

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

The fast paths exist because jaxlib calls about eighteen C functions per execute, and a ctypes
callback costs microseconds before it does anything. Most of those calls ask for what cannot
change: an executable's replica, partition and output counts, a memory's kind, a buffer's device
and memory, or the state of an event that was ready when it was handed out. The server writes
such answers into the handle's own memory (a slot of an arena it owns, see :class:`Arena`) once,
with a tag saying what they are, and the fast path answers from there without entering Python. A
handle outside the arena, a slot without the tag, an Args struct too small or a NULL argument goes
to the Python callback as before, so every error stays the callback's.
"""

from __future__ import annotations

import ctypes
import logging
import threading
from dataclasses import dataclass
from typing import Any

__all__ = ["Arena", "DestroyGates", "FastPaths", "build_gates"]

log = logging.getLogger("pjrt_hub.c_api.server")

#: Handles a gate may hold back before the next normal callback drains them; past this they
#: are dropped (their Python objects then live until the process ends, a leak, not a crash).
QUEUE_CAPACITY = 1 << 16

_LOCK = threading.Lock()
_ENGINES: list[Any] = []  # an MCJIT engine owns the machine code: it must live forever
_INITIALIZED = False


#: Words in one handle slot: the vtable a caller may read (word 0), the tag (1), the answers (2-5).
SLOT_WORDS = 6
SLOT_BYTES = 8 * SLOT_WORDS
#: What a slot's answers are (word 1); 0 means none.
TAG_EXECUTABLE = 0x504A_5254_4558_4531  # words 2-4: num_replicas, num_partitions, num_outputs
TAG_MEMORY = 0x504A_5254_4D45_4D31  # words 2-3: kind, kind_size
TAG_BUFFER = 0x504A_5254_4255_4631  # words 2-4: device, memory, 1 when ready without error

#: c_name -> (smallest struct_size, tag, ((answer word, Args offset), ...)): the answers a fast
#: path copies from a tagged slot into the Args struct. Every Args struct here has its handle at
#: offset 16 and these fields at the offsets given since PJRT API 0.1.
_COPIES: dict[str, tuple[int, int, tuple[tuple[int, int], ...]]] = {
    "PJRT_Executable_NumReplicas": (32, TAG_EXECUTABLE, ((2, 24),)),
    "PJRT_Executable_NumPartitions": (32, TAG_EXECUTABLE, ((3, 24),)),
    "PJRT_Executable_NumOutputs": (32, TAG_EXECUTABLE, ((4, 24),)),
    "PJRT_Memory_Kind": (40, TAG_MEMORY, ((2, 24), (3, 32))),
    "PJRT_Buffer_Device": (32, TAG_BUFFER, ((2, 24),)),
    "PJRT_Buffer_Memory": (32, TAG_BUFFER, ((3, 24),)),
}


@dataclass(frozen=True)
class Arena:
    """Where a server's handles live: ``slots`` slots of :data:`SLOT_BYTES` from ``base``."""

    base: int
    slots: int


@dataclass(frozen=True)
class FastPaths:
    """What the fast paths of one server need: its arena, the handle of its ready event (an event
    that is ready without error and that destroying does not end), and the function each fast path
    falls back to (its Python callback), by C name."""

    arena: Arena
    ready_event: int
    fallbacks: dict[str, int]


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


def build_gates(targets: dict[str, tuple[int, int, bool]], fast: FastPaths | None = None) -> DestroyGates | None:
    """Gates for ``targets``: name -> (Python callback address, byte offset of the handle in the
    argument, whether the function returns void). The argument is a pointer to an Args struct
    (offset 16) or the handle itself (offset -1: the deleters). With ``fast``, the fast paths too;
    a destroy function with a fast path gets the fast path's address, which falls back to its
    gate. None if llvmlite cannot."""
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
            fast_names: list[str] = []
            if fast is not None:
                gate_of = {name: f"@gate_{i}" for i, name in enumerate(names)}
                for c_name, ir in _fast_path_ir(fast, gate_of):
                    lines.append(ir.replace("@FAST", f"@fast_{len(fast_names)}"))
                    fast_names.append(c_name)
            module = llvm.parse_assembly("\n".join(lines))
            module.verify()
            machine = llvm.Target.from_default_triple().create_target_machine()
            engine = llvm.create_mcjit_compiler(module, machine)
            engine.finalize_object()
            _ENGINES.append(engine)
            addresses = {name: engine.get_function_address(f"gate_{i}") for i, name in enumerate(names)}
            addresses.update({name: engine.get_function_address(f"fast_{i}") for i, name in enumerate(fast_names)})
            return DestroyGates(engine, addresses, engine.get_global_value_address("count"),
                                engine.get_global_value_address("queue"), names)
    except Exception as exc:  # noqa: BLE001 - without gates the struct still works
        log.warning("pjrt-hub could not build the native destroy gates (%s): a destroy that arrives while a "
                    "Python exception is in flight will lose that exception", exc)
        return None


def _fast_path_ir(fast: FastPaths, gate_of: dict[str, str]) -> list[tuple[str, str]]:
    """``(c_name, LLVM IR of its fast path named @FAST)`` for each function ``fast`` covers."""
    out = []

    def fallback(c_name: str, void: bool = False) -> str:
        target = gate_of.get(c_name) or f"inttoptr (i64 {fast.fallbacks[c_name]} to {'void' if void else 'i8*'} (i8*)*)"
        return (f"call void {target}(i8* %args)\n  ret void" if void else
                f"%r = call i8* {target}(i8* %args)\n  ret i8* %r")

    def function(c_name: str, min_size: int, check: str, body: str, void: bool = False) -> None:
        if c_name not in fast.fallbacks and c_name not in gate_of:
            return
        ret = "void" if void else "i8*"
        out.append((c_name, f"""
define {ret} @FAST(i8* %args) {{
entry:
  %sp = bitcast i8* %args to i64*
  %size = load i64, i64* %sp
  %big = icmp uge i64 %size, {min_size}
  br i1 %big, label %read, label %slow
read:
  %hp = getelementptr i8, i8* %args, i64 16
  %hq = bitcast i8* %hp to i64*
  %h = load i64, i64* %hq
{check}
fast:
{body}
slow:
  {fallback(c_name, void)}
}}"""))

    def in_arena(tag: int) -> str:
        """Branch to %fast when %h is a slot of the arena tagged ``tag`` (with %slot its words)."""
        return f"""  %off = sub i64 %h, {fast.arena.base}
  %inside = icmp ult i64 %off, {fast.arena.slots * SLOT_BYTES}
  br i1 %inside, label %aligned, label %slow
aligned:
  %rem = urem i64 %off, {SLOT_BYTES}
  %whole = icmp eq i64 %rem, 0
  br i1 %whole, label %tagged, label %slow
tagged:
  %slot = inttoptr i64 %h to i64*
  %tp = getelementptr i64, i64* %slot, i64 1
  %tag = load i64, i64* %tp
  %ours = icmp eq i64 %tag, {tag}
  br i1 %ours, label %fast, label %slow"""

    def store(word: int, offset: int, value: str | None = None, kind: str = "i64") -> str:
        lines = []
        if value is None:
            lines += [f"  %w{word} = getelementptr i64, i64* %slot, i64 {word}", f"  %v{word} = load i64, i64* %w{word}"]
            value = f"%v{word}"
        lines += [f"  %a{offset} = getelementptr i8, i8* %args, i64 {offset}",
                  f"  %p{offset} = bitcast i8* %a{offset} to {kind}*", f"  store {kind} {value}, {kind}* %p{offset}"]
        return "\n".join(lines)

    for c_name, (min_size, tag, copies) in _COPIES.items():
        function(c_name, min_size, in_arena(tag),
                 "\n".join(store(word, offset) for word, offset in copies) + "\n  ret i8* null")

    # A buffer known ready: the server's ready event instead of a new one.
    function("PJRT_Buffer_ReadyEvent", 32, in_arena(TAG_BUFFER).replace("label %fast", "label %ready") + """
ready:
  %rw = getelementptr i64, i64* %slot, i64 4
  %r1 = load i64, i64* %rw
  %known = icmp eq i64 %r1, 1
  br i1 %known, label %fast, label %slow""", store(0, 24, str(fast.ready_event)) + "\n  ret i8* null")

    is_ready = f"""  %ours = icmp eq i64 %h, {fast.ready_event}
  br i1 %ours, label %fast, label %slow"""
    function("PJRT_Event_IsReady", 25, is_ready, store(0, 24, "1", "i8") + "\n  ret i8* null")
    function("PJRT_Event_Error", 24, is_ready, "  ret i8* null")
    function("PJRT_Event_Destroy", 24, is_ready, "  ret i8* null")
    function("PJRT_Event_OnReady", 40, is_ready.replace("label %fast", "label %call"), """  ret i8* null
call:
  %cp = getelementptr i8, i8* %args, i64 24
  %cq = bitcast i8* %cp to i8**
  %cb = load i8*, i8** %cq
  %none = icmp eq i8* %cb, null
  br i1 %none, label %slow, label %run
run:
  %up = getelementptr i8, i8* %args, i64 32
  %uq = bitcast i8* %up to i8**
  %user = load i8*, i8** %uq
  %fn = bitcast i8* %cb to void (i8*, i8*)*
  call void %fn(i8* null, i8* %user)
  br label %fast""")
    # Destroying no error (jaxlib's error deleters do, on success).
    function("PJRT_Error_Destroy", 24, """  %none = icmp eq i64 %h, 0
  br i1 %none, label %fast, label %slow""", "  ret void", void=True)
    return out
