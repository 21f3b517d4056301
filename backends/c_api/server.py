"""Serving a Python plugin as a PJRT C plugin: a ``PJRT_Api`` struct built with ctypes.

The C bridge (:mod:`.library`, :mod:`.client`, ...) consumes a C plugin through the Python binding;
this module is the other direction. :class:`ServedApi` takes any :class:`pjrt_hub.abi.Api` (numba_cpu,
the reference interpreter, a third-party Python plugin) and lays out a ``PJRT_Api`` in process
memory whose function slots are ctypes callbacks into it, so that a C caller (jaxlib, or the C
bridge itself) drives the Python plugin exactly as it drives a ``.so``.

The struct is built from the binding's own version history: it reports the plugin's API version,
holds exactly the slots :func:`pjrt_hub.abi.history.function_slots` gives that minor (in that
order, with the ``struct_size`` the history gives), and every slot is callable: a function the
server maps to a binding method forwards to it, any other answers ``UNIMPLEMENTED`` naming
itself, as XLA's own C API wrapper does for what a plugin lacks. Args structs are read and written
through the layouts of :mod:`.structs` (one table for both directions); a caller's ``struct_size``
decides which of the later fields are read.

Rules the C side imposes, kept here once for every slot:

* No exception ever crosses into C. A ctypes callback that raises returns NULL, which PJRT reads
  as success; every callback catches everything and returns a ``PJRT_Error*`` with the code of the
  :class:`~pjrt_hub.abi.PjrtError` (``INTERNAL`` for anything else, naming the function).
* Everything handed out (the struct, the callbacks, the capsule name, strings, arrays) lives as
  long as the C side may read it: the struct for the life of the process, a string of a buffer
  until the buffer is destroyed, a serialized executable until its deleter runs.
* Handles are addresses of small blocks of our own memory, so they are unique while alive; a
  ``PJRT_Error`` and a ``PJRT_Memory`` start with a pointer to their function table (the ``vtable``
  the newer headers give them), so a caller that follows it finds working functions.
* Blocking calls (``PJRT_Event_Await``, a compile) release the GIL while they wait, and callbacks
  into the caller (``PJRT_Event_OnReady``) are called through ctypes, which releases it too, so
  the caller's threads never wait on a lock we hold.

Program text: a framework sends StableHLO as MLIR bytecode (JAX sends a portable artifact); the
server hands the plugin what ``program_reader`` makes of the bytes (the JAX layer converts the
artifact to text with jaxlib's MLIR bindings). Without a reader the bytes go as they are.
"""

from __future__ import annotations

import atexit
import collections
import ctypes
import functools
import hashlib
import logging
import threading
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from pjrt_hub.abi import (
    Api,
    ApiVersion,
    BufferType,
    ErrorCode,
    Event,
    ExecuteOptions,
    HostBufferSemantics,
    InvalidArgument,
    PjrtError,
    Program,
    Unimplemented,
    encode_compile_options,
    history,
    to_numpy_dtype,
)
from pjrt_hub.abi.compile_options import encode_device_assignment
from pjrt_hub.abi.types import ExtensionType
from pjrt_hub.extensions import MemoryLayout, extension_spec

from .buffers import PACKED_TYPES
from .extensions import format_xla_layout
from .library import API_HEADER_SIZE, decode_named_values, encode_named_values
from .structs import layout

__all__ = ["CAPSULE_NAME", "CompileHook", "ProgramReader", "ServedApi", "serve"]

log = logging.getLogger("pjrt_hub.c_api.server")

#: The name jaxlib checks on the capsule that carries a ``PJRT_Api*``.
CAPSULE_NAME = b"pjrt_c_api"

#: ``bytes -> str | bytes``: what the plugin gets for a program's code (see the module docstring).
ProgramReader = Callable[[bytes], "str | bytes"]
#: ``(client, program, serialized CompileOptionsProto) -> LoadedExecutable``: how
#: ``PJRT_Client_Compile`` compiles, when the default ``client.compile(program, options)`` is not it.
CompileHook = Callable[[Any, Program, bytes], Any]

_FN = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p)
_VOID_FN = ctypes.CFUNCTYPE(None, ctypes.c_void_p)
_ON_READY = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p)
_PAYLOAD_VISITOR = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p, ctypes.c_size_t,
                                    ctypes.c_void_p)
_ON_DELETE = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p)

#: The functions that return ``void`` rather than ``PJRT_Error*``.
_VOID_FUNCTIONS = frozenset({"PJRT_Error_Destroy", "PJRT_Error_Message"})
#: ``PJRT_Extension_Base``: struct_size, type (int, padded), next.
_EXTENSION_HEADER = 24
#: The extension chain's node layout with a leading ``struct_size`` arrived at 0.45.
_EXTENSION_LAYOUT_SINCE = 45
#: Fingerprints are 64-bit.
_U64 = (1 << 64) - 1


class _ErrorTable(ctypes.Structure):
    """``PJRT_Error_FunctionTable`` (0.107): what a caller may call through ``error->vtable``."""

    _fields_ = [("struct_size", ctypes.c_size_t), ("instance_size", ctypes.c_size_t),
                ("extension_start", ctypes.c_void_p), ("destroy", ctypes.c_void_p),
                ("message", ctypes.c_void_p), ("get_code", ctypes.c_void_p),
                ("for_each_payload", ctypes.c_void_p)]


class _MemoryTable(ctypes.Structure):
    """``PJRT_Memory_FunctionTable`` (0.105): user data a caller attaches to a memory."""

    _fields_ = [("struct_size", ctypes.c_size_t), ("extension_start", ctypes.c_void_p),
                ("instance_struct_size", ctypes.c_size_t), ("get_user_data", ctypes.c_void_p),
                ("set_user_data", ctypes.c_void_p)]


# -- handles -----------------------------------------------------------------------------------


class _Entry:
    """One live handle: what it stands for, the memory that is its address, what it hands out."""

    __slots__ = ("kind", "obj", "block", "owned")

    def __init__(self, kind: str, obj: Any, block: ctypes.Array) -> None:
        self.kind = kind
        self.obj = obj
        self.block = block
        #: Memory handed to the caller that lives as long as the handle (strings, arrays).
        self.owned: dict[Any, Any] | None = None

    def keep(self, key: Any, value: Any) -> Any:
        if self.owned is None:
            self.owned = {}
        self.owned[key] = value
        return value

    def kept(self, key: Any) -> Any:
        return None if self.owned is None else self.owned.get(key)


class _Handles:
    """Opaque C handles for Python objects: the address of a 16-byte block we own.

    Devices, memories, descriptions, clients and topologies are *interned*: one handle per
    object for its life, because callers compare and cache them. Buffers, events, executables and
    errors get a fresh handle each time they are handed out, and the caller destroys each.
    """

    def __init__(self, plugin: str) -> None:
        self.plugin = plugin
        self.entries: dict[int, _Entry] = {}
        self.interned: dict[tuple[str, int], int] = {}
        self.lock = threading.Lock()

    def new(self, kind: str, obj: Any, vtable: int = 0) -> int:
        block = (ctypes.c_void_p * 2)(vtable or None, None)
        handle = ctypes.addressof(block)
        self.entries[handle] = _Entry(kind, obj, block)
        return handle

    def intern(self, kind: str, obj: Any, vtable: int = 0) -> int:
        key = (kind, id(obj))
        handle = self.interned.get(key)
        if handle is None:
            with self.lock:
                handle = self.interned.get(key)
                if handle is None:
                    handle = self.new(kind, obj, vtable)
                    self.interned[key] = handle
        return handle

    def entry(self, handle: int | None, kind: str, what: str) -> _Entry:
        entry = self.entries.get(handle or 0)
        if entry is None or entry.kind != kind:
            if not handle:
                raise InvalidArgument(f"{what}: the {_C_TYPE[kind]} is NULL")
            state = f"a {_C_TYPE[entry.kind]}" if entry is not None else "not a live handle"
            raise InvalidArgument(f"{what}: {handle:#x} is {state}, expected a {_C_TYPE[kind]} of plugin "
                                  f"{self.plugin!r}")
        return entry

    def get(self, handle: int | None, kind: str, what: str) -> Any:
        return self.entry(handle, kind, what).obj

    def drop(self, handle: int | None, kind: str, what: str) -> Any:
        if not handle:
            return None
        entry = self.entry(handle, kind, what)
        with self.lock:
            self.entries.pop(handle, None)
            if self.interned.get((kind, id(entry.obj))) == handle:
                del self.interned[(kind, id(entry.obj))]
        return entry.obj


_C_TYPE = {
    "client": "PJRT_Client", "device": "PJRT_Device", "memory": "PJRT_Memory",
    "description": "PJRT_DeviceDescription", "topology": "PJRT_TopologyDescription",
    "buffer": "PJRT_Buffer", "event": "PJRT_Event", "executable": "PJRT_Executable",
    "loaded": "PJRT_LoadedExecutable", "error": "PJRT_Error", "context": "PJRT_ExecuteContext",
    "layout": "PJRT_Layouts_MemoryLayout", "memory_description": "PJRT_MemoryDescription",
}


class _HostEvent(Event):
    """An event the caller creates and sets (``PJRT_Event_Create`` / ``PJRT_Event_Set``)."""

    __slots__ = ("_done", "_error", "_callbacks", "_lock")

    def __init__(self) -> None:
        self._done = threading.Event()
        self._error: PjrtError | None = None
        self._callbacks: list[Callable[[PjrtError | None], None]] = []
        self._lock = threading.Lock()

    def set(self, error: PjrtError | None) -> None:
        with self._lock:
            if self._done.is_set():
                raise InvalidArgument("PJRT_Event_Set: the event was set already")
            self._error = error
            self._done.set()
            callbacks, self._callbacks = self._callbacks, []
        for callback in callbacks:
            callback(error)

    def is_ready(self) -> bool:
        return self._done.is_set()

    def error(self) -> PjrtError | None:
        return self._error

    def await_(self, timeout: float | None = None) -> None:
        self._done.wait(timeout)
        if self._error is not None:
            raise self._error

    def on_ready(self, callback: Callable[[PjrtError | None], None]) -> None:
        with self._lock:
            if not self._done.is_set():
                self._callbacks.append(callback)
                return
        callback(self._error)


@dataclass
class _Executable:
    """A ``PJRT_Executable`` handle's object: the plugin's executable (made on first request) and
    the serialized options it was compiled with (``PJRT_Executable_GetCompileOptions``)."""

    obj: Any
    options: bytes = b""


@dataclass
class _Loaded:
    """A ``PJRT_LoadedExecutable`` handle's object: the plugin's loaded executable and its
    ``PJRT_Executable`` (shared by every ``GetExecutable``)."""

    obj: Any
    executable: _Executable


@dataclass(frozen=True)
class _ExtensionNode:
    name: str
    version: int
    functions: tuple[str, ...]


#: The extension functions the server implements, in the order of each extension's header,
#: with the extension version that covers each (Layouts: 1 up to the buffer layout, 2 output
#: layouts (core 0.81), 3 parameter layouts (core 0.93); MemoryDescriptions: 1).
_EXTENSION_FUNCTIONS: dict[str, tuple[tuple[str, int], ...]] = {
    "Layouts": (("PJRT_Layouts_MemoryLayout_Destroy", 1), ("PJRT_Layouts_MemoryLayout_Serialize", 1),
                ("PJRT_Layouts_PJRT_Client_GetDefaultLayout", 1), ("PJRT_Layouts_PJRT_Buffer_MemoryLayout", 1),
                ("PJRT_Layouts_PJRT_Topology_GetDefaultLayout", 1),
                ("PJRT_Layouts_PJRT_Executable_GetOutputLayouts", 2),
                ("PJRT_Layouts_PJRT_Executable_GetParameterLayouts", 3)),
    "MemoryDescriptions": (("PJRT_DeviceDescription_MemoryDescriptions", 1), ("PJRT_MemoryDescription_Kind", 1)),
    # No protocol in pjrt_hub.extensions: an executable that knows its shardings has
    # ``parameter_shardings()`` / ``output_shardings()`` returning serialized xla.OpSharding
    # protos (None: it does not know them).
    "Shardings": (("PJRT_Shardings_PJRT_Executable_ParameterShardings", 1),
                  ("PJRT_Shardings_PJRT_Executable_OutputShardings", 1)),
}


# -- the server --------------------------------------------------------------------------------


class ServedApi:
    """A ``PJRT_Api`` in this process whose functions are a Python plugin's binding methods.

    :param api: the plugin's :class:`~pjrt_hub.abi.Api`, or a function that makes it (called once,
        on the first call that needs it: the struct can be handed out before the plugin's heavy
        imports).
    :param name: the plugin's name, for messages.
    :param version: the PJRT API version to report; it decides the slots. Default: the Api's.
    :param platform_name: what ``PJRT_Client_PlatformName`` and the topology report instead of
        the plugin's own name (frameworks pick their lowering by it: JAX emits CPU-only custom
        calls for ``"cpu"``).
    :param program_reader: turns the code of an ``"mlir"`` program that is not text (bytecode)
        into what the plugin compiles.
    :param extensions: extension name -> version to serve, for the extensions the server knows
        (Layouts, MemoryDescriptions); their functions call the Api's ``extensions()`` objects.
    :param compile_hook: compiles for ``PJRT_Client_Compile`` instead of ``client.compile``; it
        gets the program as the caller sent it (the reader is not applied).
    """

    def __init__(self, api: Api | Callable[[], Api], *, name: str, version: ApiVersion | str | None = None,
                 platform_name: str | None = None, program_reader: ProgramReader | None = None,
                 extensions: Mapping[str, int] | None = None, compile_hook: CompileHook | None = None) -> None:
        self.name = name
        self._api_obj: Api | None = api if isinstance(api, Api) else None
        self._api_factory = None if isinstance(api, Api) else api
        if version is None:
            if self._api_obj is None:
                raise InvalidArgument("ServedApi: give the version when the Api is made lazily")
            version = self._api_obj.api_version()
        self.version = ApiVersion.parse(version)
        self.platform_name = platform_name
        self.program_reader = program_reader
        self.compile_hook = compile_hook
        self._api_lock = threading.Lock()
        self._initialized = False
        self._handles = _Handles(name)
        self._keep: list[Any] = []
        self._strings: dict[Any, Any] = {}
        #: Bytes handed out with a deleter (serialized executables, topologies, layouts), by the
        #: handle the caller gives back to the deleter.
        self._serial_keep: dict[int, Any] = {}
        self._serial_deleter = self._deleter(self._serial_keep)
        #: Calls per C function since the struct was built (which slots a caller uses).
        self.calls: collections.Counter[str] = collections.Counter()
        self._build_vtables()
        self._minor = min(self.version.minor, history.NEWEST_KNOWN.minor)
        self.slot_names: tuple[str, ...] = history.function_slots(self._minor)
        count = history.slot_count(self.version.minor)
        if count is None:
            count = len(self.slot_names)
        self.num_slots = min(count, len(self.slot_names))
        self.struct_size = API_HEADER_SIZE + 8 * self.num_slots
        self._struct = (ctypes.c_char * self.struct_size)()
        base = ctypes.addressof(self._struct)
        ctypes.c_size_t.from_address(base).value = self.struct_size
        ctypes.c_size_t.from_address(base + 16).value = 24  # PJRT_Api_Version_STRUCT_SIZE
        ctypes.c_int32.from_address(base + 32).value = self.version.major
        ctypes.c_int32.from_address(base + 36).value = self.version.minor
        #: C function name -> whether the server forwards it (False: it answers UNIMPLEMENTED).
        self.implemented: dict[str, bool] = {}
        #: Where each function's pointer is written (slot or extension node), by C name.
        self._locations: dict[str, int] = {}
        self._gates = None
        for slot, c_name in enumerate(self.slot_names[:self.num_slots]):
            location = base + API_HEADER_SIZE + 8 * slot
            ctypes.c_void_p.from_address(location).value = self._callback(c_name)
            self._locations[c_name] = location
        self.extension_nodes: list[_ExtensionNode] = []
        self._node_memory: list[ctypes.Array] = []
        head = self._build_extensions(dict(extensions or {}))
        ctypes.c_void_p.from_address(base + 8).value = head or None
        self._install_gates()
        self._capsule: Any = None
        #: True once :meth:`retire` pointed the slots away from Python (interpreter exit).
        self.retired = False

    # -- what a C caller gets ----------------------------------------------------------------

    @property
    def address(self) -> int:
        """The ``PJRT_Api*``."""
        return ctypes.addressof(self._struct)

    def capsule(self) -> Any:
        """A PyCapsule named ``"pjrt_c_api"`` around the ``PJRT_Api*`` (what jaxlib takes)."""
        if self._capsule is None:
            new = ctypes.pythonapi.PyCapsule_New
            new.restype = ctypes.py_object
            new.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
            self._capsule = new(self.address, CAPSULE_NAME, None)
        return self._capsule

    @property
    def api(self) -> Api:
        """The plugin's Api (made on first use)."""
        api = self._api_obj
        if api is None:
            with self._api_lock:
                if self._api_obj is None:
                    assert self._api_factory is not None
                    self._api_obj = self._api_factory()
                api = self._api_obj
        return api

    def retire(self) -> bool:
        """Point every slot at a native function that returns NULL and touches no Python.

        For interpreter exit: a caller destroys what it still holds (buffers, executables, its
        client) from its own threads while Python shuts down, and a thread that then tries to take
        the GIL is terminated (a C++ caller aborts). After this nothing the caller does reaches
        Python; what it releases is left to the exiting process. False where no such native
        function is known (the struct is then left as it is)."""
        stub = _native_null_function()
        if not stub:
            return False
        base = self.address
        for slot in range(self.num_slots):
            ctypes.c_void_p.from_address(base + API_HEADER_SIZE + 8 * slot).value = stub
        for node in self._node_memory:
            for offset in range(_EXTENSION_HEADER, len(node), 8):
                ctypes.c_void_p.from_address(ctypes.addressof(node) + offset).value = stub
        self.retired = True
        return True

    def __repr__(self) -> str:
        return (f"<ServedApi {self.name!r} PJRT API {self.version}, {self.num_slots} slots "
                f"({sum(self.implemented.values())} forwarded) at {self.address:#x}>")

    # -- callbacks -----------------------------------------------------------------------------

    def _callback(self, c_name: str) -> int:
        handler = getattr(self, "_" + c_name.removeprefix("PJRT_"), None)
        self.implemented[c_name] = handler is not None
        if c_name in _VOID_FUNCTIONS:
            assert handler is not None
            fn = _VOID_FN(self._void_wrapper(c_name, handler))
        else:
            fn = _FN(self._wrapper(c_name, handler))
        self._keep.append(fn)
        return ctypes.cast(fn, ctypes.c_void_p).value or 0

    def _wrapper(self, c_name: str, handler: Callable[[int], None] | None) -> Callable[[int], int | None]:
        calls = self.calls
        make_error = self._make_error
        if handler is None:
            message = (f"{c_name} is not implemented by pjrt-hub's PJRT_Api for plugin {self.name!r} "
                       f"(PJRT API {self.version})")

            def unimplemented(address: int) -> int | None:
                calls[c_name] += 1
                return make_error(Unimplemented(message), c_name)

            return unimplemented

        def callback(address: int) -> int | None:
            try:
                calls[c_name] += 1
                if self._gates is not None and self._gates.pending():
                    self._drain()
                handler(address)
                return None
            except BaseException as exc:  # noqa: BLE001 - nothing may cross into C
                return make_error(exc, c_name)

        return callback

    def _void_wrapper(self, c_name: str, handler: Callable[[int], None]) -> Callable[[int], None]:
        calls = self.calls

        def callback(address: int) -> None:
            calls[c_name] += 1
            try:
                handler(address)
            except BaseException:  # noqa: BLE001 - a void function has no way to report it
                log.exception("%s of served plugin %s failed", c_name, self.name)

        return callback

    # -- destroys held back by the native gates -----------------------------------------------

    def _install_gates(self) -> None:
        """Put native gates (:mod:`._native`) in front of the destroy functions and deleters."""
        from ._native import build_gates

        targets: dict[str, tuple[int, int, bool]] = {}
        for c_name, location in self._locations.items():
            if c_name.endswith("_Destroy") and self.implemented.get(c_name):
                pointer = ctypes.c_void_p.from_address(location).value or 0
                targets[c_name] = (pointer, 16, c_name in _VOID_FUNCTIONS)
        targets["deleter"] = (self._serial_deleter, -1, True)
        gates = build_gates(targets)
        if gates is None:
            return
        for c_name, gate in gates.addresses.items():
            if c_name == "deleter":
                self._serial_deleter = gate
            else:
                ctypes.c_void_p.from_address(self._locations[c_name]).value = gate
        self._gate_names = gates.names  # type: ignore[attr-defined]
        self._gates = gates

    def _drain(self) -> None:
        """Destroy what the gates held back (called from a callback running normally)."""
        assert self._gates is not None
        for index, handle in self._gates.take():
            name = self._gate_names[index]
            try:
                if name == "deleter":
                    self._serial_keep.pop(handle, None)
                    continue
                args = (ctypes.c_uint64 * 3)(24, 0, handle)
                getattr(self, "_" + name.removeprefix("PJRT_"))(ctypes.addressof(args))
            except Exception:  # noqa: BLE001 - a late destroy must not break the call that drains
                log.exception("destroying a held-back handle with %s failed", name)

    def _args(self, address: int, struct: str) -> Any:
        """The caller's Args struct at ``address``, refused when smaller than our oldest layout."""
        cls, minimum = _struct_info(struct)
        args = cls.from_address(address)
        if args.struct_size < minimum:
            raise InvalidArgument(f"Unexpected {struct} size: expected {minimum}, got {args.struct_size}")
        return args

    # -- errors --------------------------------------------------------------------------------

    def _build_vtables(self) -> None:
        error_fns = [_VOID_FN(self._error_vtable_destroy),
                     ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p)(
                         self._error_vtable_message),
                     ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p)(self._error_vtable_code),
                     ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p)(
                         lambda error, visitor, user_arg: None)]
        self._keep.extend(error_fns)
        table = _ErrorTable(ctypes.sizeof(_ErrorTable), 16, None,
                            *[ctypes.cast(f, ctypes.c_void_p).value for f in error_fns])
        self._error_vtable = table
        self._user_data: dict[tuple[int, int], Any] = {}
        memory_fns = [ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p)(self._memory_get_user_data),
                      ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p)(
                          self._memory_set_user_data)]
        self._keep.extend(memory_fns)
        self._memory_vtable = _MemoryTable(ctypes.sizeof(_MemoryTable), None, 16,
                                           *[ctypes.cast(f, ctypes.c_void_p).value for f in memory_fns])
        # The error of last resort: handed out when even making an error fails; never freed.
        self._static_error_message = ctypes.create_string_buffer(
            f"pjrt-hub: an error occurred in plugin {self.name!r} and could not be reported".encode())
        self._static_error = self._handles.new("error", (ErrorCode.INTERNAL, self._static_error_message,
                                                        len(self._static_error_message.value)),
                                               ctypes.addressof(self._error_vtable))

    def _make_error(self, exc: BaseException, c_name: str) -> int:
        try:
            if isinstance(exc, PjrtError):
                code, message = exc.code, exc.message
            elif isinstance(exc, KeyboardInterrupt):
                code, message = ErrorCode.CANCELLED, f"{c_name}: interrupted"
            else:
                code = ErrorCode.INTERNAL
                message = (f"{c_name} of plugin {self.name!r} raised {type(exc).__name__}: {exc} "
                           "(a bug in the plugin or in pjrt-hub's PJRT_Api)")
                log.debug("%s raised", c_name, exc_info=exc)
            data = message.encode("utf-8", "replace")
            buf = ctypes.create_string_buffer(data, max(1, len(data)))
            return self._handles.new("error", (int(code), buf, len(data)), ctypes.addressof(self._error_vtable))
        except BaseException:  # noqa: BLE001 - the last resort must not fail
            return self._static_error

    def _error_of(self, handle: int) -> tuple[int, Any, int]:
        return self._handles.get(handle, "error", "PJRT_Error")

    def _Error_Destroy(self, address: int) -> None:
        args = self._args(address, "PJRT_Error_Destroy_Args")
        if args.error and args.error != self._static_error:
            self._handles.drop(args.error, "error", "PJRT_Error_Destroy")

    def _Error_Message(self, address: int) -> None:
        args = self._args(address, "PJRT_Error_Message_Args")
        _code, buf, size = self._error_of(args.error)
        args.message = ctypes.addressof(buf)
        args.message_size = size

    def _Error_GetCode(self, address: int) -> None:
        args = self._args(address, "PJRT_Error_GetCode_Args")
        args.code = self._error_of(args.error)[0]

    def _Error_ForEachPayload(self, address: int) -> None:
        args = self._args(address, "PJRT_Error_ForEachPayload_Args")
        self._error_of(args.error)  # our errors carry no payloads: the visitor is never called

    def _error_vtable_destroy(self, error: int) -> None:
        if error and error != self._static_error:
            self._handles.entries.pop(error, None)

    def _error_vtable_message(self, error: int, message: int, size: int) -> None:
        entry = self._handles.entries.get(error)
        if entry is None or entry.kind != "error":
            return
        _code, buf, length = entry.obj
        ctypes.c_void_p.from_address(message).value = ctypes.addressof(buf)
        ctypes.c_size_t.from_address(size).value = length

    def _error_vtable_code(self, error: int) -> int:
        entry = self._handles.entries.get(error)
        return int(entry.obj[0]) if entry is not None and entry.kind == "error" else int(ErrorCode.UNKNOWN)

    def _memory_get_user_data(self, memory: int, key: int) -> int:
        entry = self._user_data.get((memory, key or 0))
        return entry[0] if entry else 0

    def _memory_set_user_data(self, memory: int, key: int, data: int, dtor: int) -> None:
        self._user_data[(memory, key or 0)] = (data or 0, dtor or 0)

    # -- small helpers ---------------------------------------------------------------------------

    def _string(self, key: Any, text: str) -> tuple[int, int]:
        """A UTF-8 copy of ``text`` that lives for the process (names and kinds of objects that
        live as long: few, small, and the same every time they are asked for)."""
        found = self._strings.get((key, text))
        if found is None:
            data = text.encode("utf-8")
            buf = ctypes.create_string_buffer(data, len(data) + 1)
            found = self._strings[(key, text)] = (ctypes.addressof(buf), len(data), buf)
        return found[0], found[1]

    @staticmethod
    def _owned_string(entry: _Entry, key: str, text: str | bytes) -> tuple[int, int]:
        """A copy of ``text`` that lives as long as the handle ``entry``."""
        data = text.encode("utf-8") if isinstance(text, str) else bytes(text)
        buf = entry.keep(key, ctypes.create_string_buffer(data, max(1, len(data))))
        return ctypes.addressof(buf), len(data)

    @staticmethod
    def _pointer_array(entry: _Entry | None, key: str, handles: Sequence[int], keep: list | None = None) -> int:
        array = (ctypes.c_void_p * max(1, len(handles)))(*handles)
        if entry is not None:
            entry.keep(key, array)
        elif keep is not None:
            keep.append(array)
        return ctypes.addressof(array)

    def _interned_array(self, key: Any, handles: Sequence[int]) -> int:
        array = self._strings.get(key)
        if array is None or list(array)[:len(handles)] != list(handles) or len(array) < len(handles):
            array = (ctypes.c_void_p * max(1, len(handles)))(*handles)
            self._strings[key] = array
        return ctypes.addressof(array)

    def _deleter(self, keep: dict[int, Any]) -> int:
        """A ``void deleter(T*)`` that forgets ``keep[T*]`` (serialized bytes handed to the caller)."""

        def delete(pointer: int) -> None:
            keep.pop(pointer or 0, None)

        fn = _VOID_FN(delete)
        self._keep.append(fn)
        return ctypes.cast(fn, ctypes.c_void_p).value or 0

    def _serialized(self, data: bytes, args: Any, bytes_field: str, size_field: str, handle_field: str,
                    deleter_field: str) -> None:
        """Hand out ``data`` with a handle and a deleter, as the Serialize functions do."""
        buf = ctypes.create_string_buffer(bytes(data), max(1, len(data)))
        handle = ctypes.addressof(buf)
        self._serial_keep[handle] = buf
        setattr(args, bytes_field, handle)
        setattr(args, size_field, len(data))
        setattr(args, handle_field, handle)
        setattr(args, deleter_field, self._serial_deleter)

    @staticmethod
    def _int64s(address: int | None, count: int, what: str) -> tuple[int, ...]:
        if count == 0:
            return ()
        if not address:
            raise InvalidArgument(f"{what}: {count} values announced but the pointer is NULL")
        return tuple((ctypes.c_int64 * count).from_address(address))

    @staticmethod
    def _covers(args: Any, struct: str, field_name: str) -> bool:
        """Whether the caller's ``struct_size`` includes ``field_name`` (a field later minors added)."""
        return args.struct_size >= _field_end(struct, field_name)

    def _named_values(self, values: Mapping[str, Any], what: str) -> Any:
        return encode_named_values(_plain_values(values), minor=self._minor, what=what)

    # -- plugin --------------------------------------------------------------------------------

    def _Plugin_Initialize(self, address: int) -> None:
        self._args(address, "PJRT_Plugin_Initialize_Args")
        api = self.api
        with self._api_lock:
            if not self._initialized:
                api.plugin_initialize()
                self._initialized = True

    def _Plugin_Attributes(self, address: int) -> None:
        args = self._args(address, "PJRT_Plugin_Attributes_Args")
        values = self._strings.get("plugin attributes")
        if values is None:
            values = self._named_values(self.api.plugin_attributes(), "PJRT_Plugin_Attributes")
            self._strings["plugin attributes"] = values
        args.attributes = values.address or None
        if self._covers(args, "PJRT_Plugin_Attributes_Args", "num_attributes"):
            args.num_attributes = values.count

    # -- events --------------------------------------------------------------------------------

    def _event(self, handle: int, what: str) -> Event:
        return self._handles.get(handle, "event", what)

    def _Event_Destroy(self, address: int) -> None:
        args = self._args(address, "PJRT_Event_Destroy_Args")
        event = self._handles.drop(args.event, "event", "PJRT_Event_Destroy")
        if event is not None:
            event.destroy()

    def _Event_IsReady(self, address: int) -> None:
        args = self._args(address, "PJRT_Event_IsReady_Args")
        args.is_ready = bool(self._event(args.event, "PJRT_Event_IsReady").is_ready())

    def _Event_Error(self, address: int) -> None:
        args = self._args(address, "PJRT_Event_Error_Args")
        error = self._event(args.event, "PJRT_Event_Error").error()
        if error is not None:
            raise error

    def _Event_Await(self, address: int) -> None:
        args = self._args(address, "PJRT_Event_Await_Args")
        self._event(args.event, "PJRT_Event_Await").await_()

    def _Event_OnReady(self, address: int) -> None:
        args = self._args(address, "PJRT_Event_OnReady_Args")
        event = self._event(args.event, "PJRT_Event_OnReady")
        if not args.callback:
            raise InvalidArgument("PJRT_Event_OnReady: the callback is NULL")
        callback = _on_ready_function(args.callback)
        user_arg = args.user_arg
        make_error = self._make_error

        def fire(error: PjrtError | None) -> None:
            callback(make_error(error, "PJRT_Event_OnReady") if error is not None else None, user_arg)

        event.on_ready(fire)

    def _Event_Create(self, address: int) -> None:
        args = self._args(address, "PJRT_Event_Create_Args")
        args.event = self._handles.new("event", _HostEvent())

    def _Event_Set(self, address: int) -> None:
        args = self._args(address, "PJRT_Event_Set_Args")
        event = self._event(args.event, "PJRT_Event_Set")
        if not isinstance(event, _HostEvent):
            raise InvalidArgument("PJRT_Event_Set: only events made by PJRT_Event_Create can be set")
        error = None
        if args.error_code != ErrorCode.OK:
            message = ctypes.string_at(args.error_message, args.error_message_size).decode("utf-8", "replace") \
                if args.error_message else ""
            from pjrt_hub.abi import error_for_code

            error = error_for_code(args.error_code, message)
        event.set(error)

    # -- client --------------------------------------------------------------------------------

    def _client(self, handle: int, what: str) -> Any:
        return self._handles.get(handle, "client", what)

    def _device_handle(self, device: Any) -> int:
        return self._handles.intern("device", device)

    def _memory_handle(self, memory: Any) -> int:
        return self._handles.intern("memory", memory, ctypes.addressof(self._memory_vtable))

    def _Client_Create(self, address: int) -> None:
        args = self._args(address, "PJRT_Client_Create_Args")
        options = decode_named_values(args.create_options, args.num_options, what="PJRT_Client_Create options",
                                      plugin=self.name) if args.num_options else {}
        client = self.api.client_create(options)
        args.client = self._handles.intern("client", client)

    def _Client_Destroy(self, address: int) -> None:
        args = self._args(address, "PJRT_Client_Destroy_Args")
        client = self._handles.drop(args.client, "client", "PJRT_Client_Destroy")
        if client is not None:
            client.destroy()

    def _Client_PlatformName(self, address: int) -> None:
        args = self._args(address, "PJRT_Client_PlatformName_Args")
        client = self._client(args.client, "PJRT_Client_PlatformName")
        name = self.platform_name or client.platform_name()
        args.platform_name, args.platform_name_size = self._string(("platform", args.client), name)

    def _Client_ProcessIndex(self, address: int) -> None:
        args = self._args(address, "PJRT_Client_ProcessIndex_Args")
        args.process_index = int(self._client(args.client, "PJRT_Client_ProcessIndex").process_index())

    def _Client_PlatformVersion(self, address: int) -> None:
        args = self._args(address, "PJRT_Client_PlatformVersion_Args")
        text = self._client(args.client, "PJRT_Client_PlatformVersion").platform_version()
        args.platform_version, args.platform_version_size = self._string(("platform_version", args.client), text)

    def _Client_Devices(self, address: int) -> None:
        args = self._args(address, "PJRT_Client_Devices_Args")
        devices = self._client(args.client, "PJRT_Client_Devices").devices()
        handles = [self._device_handle(d) for d in devices]
        args.devices = self._interned_array(("devices", args.client), handles)
        args.num_devices = len(handles)

    def _Client_AddressableDevices(self, address: int) -> None:
        args = self._args(address, "PJRT_Client_AddressableDevices_Args")
        devices = self._client(args.client, "PJRT_Client_AddressableDevices").addressable_devices()
        handles = [self._device_handle(d) for d in devices]
        args.addressable_devices = self._interned_array(("addressable_devices", args.client), handles)
        args.num_addressable_devices = len(handles)

    def _Client_LookupDevice(self, address: int) -> None:
        args = self._args(address, "PJRT_Client_LookupDevice_Args")
        device = self._client(args.client, "PJRT_Client_LookupDevice").lookup_device(args.id)
        args.device = self._device_handle(device)

    def _Client_LookupAddressableDevice(self, address: int) -> None:
        args = self._args(address, "PJRT_Client_LookupAddressableDevice_Args")
        client = self._client(args.client, "PJRT_Client_LookupAddressableDevice")
        args.addressable_device = self._device_handle(client.lookup_addressable_device(args.local_hardware_id))

    def _Client_AddressableMemories(self, address: int) -> None:
        args = self._args(address, "PJRT_Client_AddressableMemories_Args")
        memories = self._client(args.client, "PJRT_Client_AddressableMemories").addressable_memories()
        handles = [self._memory_handle(m) for m in memories]
        args.addressable_memories = self._interned_array(("memories", args.client), handles)
        args.num_addressable_memories = len(handles)

    def _Client_TopologyDescription(self, address: int) -> None:
        args = self._args(address, "PJRT_Client_TopologyDescription_Args")
        topology = self._client(args.client, "PJRT_Client_TopologyDescription").topology_description()
        args.topology = self._handles.intern("topology", topology)

    def _Client_DefaultDeviceAssignment(self, address: int) -> None:
        args = self._args(address, "PJRT_Client_DefaultDeviceAssignment_Args")
        client = self._client(args.client, "PJRT_Client_DefaultDeviceAssignment")
        replicas, partitions = args.num_replicas, args.num_partitions
        if replicas * partitions > args.default_assignment_size:
            raise InvalidArgument(
                f"PJRT_Client_DefaultDeviceAssignment: default_assignment_size {args.default_assignment_size} "
                f"is smaller than num_replicas * num_partitions = {replicas * partitions}")
        rows = client.default_device_assignment(replicas, partitions)
        out = (ctypes.c_int * (replicas * partitions)).from_address(args.default_assignment)
        for r, row in enumerate(rows):
            for p, device_id in enumerate(row):
                out[r * partitions + p] = int(device_id)

    def _program(self, address: int, what: str, read: bool = True) -> Program:
        program = self._args(address, "PJRT_Program")
        fmt = ctypes.string_at(program.format, program.format_size).decode() if program.format else ""
        code = ctypes.string_at(program.code, program.code_size) if program.code_size else b""
        if read and fmt == "mlir" and self.program_reader is not None and not _is_text(code):
            return Program(self.program_reader(code), fmt)
        return Program(code, fmt)

    def _Client_Compile(self, address: int) -> None:
        args = self._args(address, "PJRT_Client_Compile_Args")
        client = self._client(args.client, "PJRT_Client_Compile")
        if not args.program:
            raise InvalidArgument("PJRT_Client_Compile: the program is NULL")
        hook = self.compile_hook
        program = self._program(args.program, "PJRT_Client_Compile", read=hook is None)
        options = ctypes.string_at(args.compile_options, args.compile_options_size) \
            if args.compile_options_size else encode_compile_options_default()
        loaded = client.compile(program, options) if hook is None else hook(client, program, options)
        args.executable = self._loaded_handle(loaded, options)

    def _Client_BufferFromHostBuffer(self, address: int) -> None:
        args = self._args(address, "PJRT_Client_BufferFromHostBuffer_Args")
        what = "PJRT_Client_BufferFromHostBuffer"
        client = self._client(args.client, what)
        kind = _buffer_type(args.type, what)
        dims = self._int64s(args.dims, args.num_dims, f"{what}: dims")
        strides = self._int64s(args.byte_strides, args.num_byte_strides, f"{what}: byte_strides") \
            if args.byte_strides else None
        semantics = HostBufferSemantics(args.host_buffer_semantics)
        if self._covers(args, "PJRT_Client_BufferFromHostBuffer_Args", "device_layout") and args.device_layout:
            self._check_dense_layout(args.device_layout, len(dims), f"{what}: device_layout")
        # The view is writable for numpy (numba's fast dispatch knows only writable arrays); the
        # runtime keeps an immutable zero-copy buffer from ever being written (no donation into it).
        array = _host_array(args.data, kind, dims, strides, writable=True, what=what)
        device = self._handles.get(args.device, "device", what) if args.device else None
        memory = None
        if self._covers(args, "PJRT_Client_BufferFromHostBuffer_Args", "memory") and args.memory:
            memory = self._handles.get(args.memory, "memory", what)
        kwargs: dict[str, Any] = {"semantics": semantics, "element_type": kind}
        if memory is not None:
            kwargs["memory"] = memory
        if device is not None:
            kwargs["device"] = device
        transfer = client.buffer_from_host_buffer(array, **kwargs)
        args.buffer = self._handles.new("buffer", transfer.buffer)
        args.done_with_host_buffer = self._handles.new("event", transfer.done_with_host_buffer)

    def _check_dense_layout(self, address: int, ndim: int, what: str) -> None:
        memory_layout = layout("PJRT_Buffer_MemoryLayout").ctype.from_address(address)
        if memory_layout.type != 0:
            raise Unimplemented(f"{what}: only dense row-major (tiled, no tiles) layouts are supported")
        order = self._int64s(memory_layout.minor_to_major, memory_layout.minor_to_major_size, what)
        if order and order != tuple(range(ndim - 1, -1, -1)) or memory_layout.num_tiles:
            raise Unimplemented(f"{what}: layout minor_to_major={list(order)} with {memory_layout.num_tiles} "
                                "tiles; only the dense row-major layout is supported")

    def _Client_CreateUninitializedBuffer(self, address: int) -> None:
        args = self._args(address, "PJRT_Client_CreateUninitializedBuffer_Args")
        what = "PJRT_Client_CreateUninitializedBuffer"
        client = self._client(args.client, what)
        dims = self._int64s(args.shape_dims, args.shape_num_dims, what)
        kwargs = {}
        if args.device:
            kwargs["device"] = self._handles.get(args.device, "device", what)
        if args.memory:
            kwargs["memory"] = self._handles.get(args.memory, "memory", what)
        buffer = client.create_uninitialized_buffer(dims, _buffer_type(args.shape_element_type, what), **kwargs)
        args.buffer = self._handles.new("buffer", buffer)

    def _Client_CreateViewOfDeviceBuffer(self, address: int) -> None:
        args = self._args(address, "PJRT_Client_CreateViewOfDeviceBuffer_Args")
        what = "PJRT_Client_CreateViewOfDeviceBuffer"
        client = self._client(args.client, what)
        kind = _buffer_type(args.element_type, what)
        dims = self._int64s(args.dims, args.num_dims, what)
        if args.layout:
            self._check_dense_layout(args.layout, len(dims), f"{what}: layout")
        device = self._handles.get(args.device, "device", what) if args.device else None
        if device is None and self._covers(args, "PJRT_Client_CreateViewOfDeviceBuffer_Args", "memory") \
                and args.memory:
            # 0.66 names the memory instead of the device: the view lives on the memory's device.
            devices = self._handles.get(args.memory, "memory", what).addressable_by_devices()
            device = devices[0] if devices else None
        array = _host_array(args.device_buffer_ptr, kind, dims, None, writable=True, what=what)
        on_delete = _caller_release(args.on_delete_callback, args.device_buffer_ptr, args.on_delete_callback_arg) \
            if args.on_delete_callback else None
        buffer = client.create_view_of_device_buffer(array, device=device, on_delete=on_delete)
        args.buffer = self._handles.new("buffer", buffer)

    def _Executable_DeserializeAndLoad(self, address: int) -> None:
        args = self._args(address, "PJRT_Executable_DeserializeAndLoad_Args")
        client = self._client(args.client, "PJRT_Executable_DeserializeAndLoad")
        data = ctypes.string_at(args.serialized_executable, args.serialized_executable_size)
        loaded = client.deserialize_and_load(data)
        args.loaded_executable = self._loaded_handle(loaded, b"")

    def _Client_Load(self, address: int) -> None:
        args = self._args(address, "PJRT_Client_Load_Args")
        client = self._client(args.client, "PJRT_Client_Load")
        executable = self._handles.get(args.executable, "executable", "PJRT_Client_Load")
        load = getattr(client, "load", None)
        if load is None:
            raise Unimplemented(f"PJRT_Client_Load: plugin {self.name!r} cannot load an executable compiled "
                                "ahead of time")
        args.loaded_executable = self._loaded_handle(load(executable.obj), executable.options)

    # -- device descriptions, devices, memories ----------------------------------------------

    def _description(self, handle: int, what: str) -> Any:
        return self._handles.get(handle, "description", what)

    def _DeviceDescription_Id(self, address: int) -> None:
        args = self._args(address, "PJRT_DeviceDescription_Id_Args")
        args.id = int(self._description(args.device_description, "PJRT_DeviceDescription_Id").id())

    def _DeviceDescription_ProcessIndex(self, address: int) -> None:
        args = self._args(address, "PJRT_DeviceDescription_ProcessIndex_Args")
        args.process_index = int(self._description(args.device_description,
                                                   "PJRT_DeviceDescription_ProcessIndex").process_index())

    def _DeviceDescription_Attributes(self, address: int) -> None:
        args = self._args(address, "PJRT_DeviceDescription_Attributes_Args")
        entry = self._handles.entry(args.device_description, "description", "PJRT_DeviceDescription_Attributes")
        values = entry.kept("attributes")
        if values is None:
            values = entry.keep("attributes", self._named_values(entry.obj.attributes(),
                                                                 "PJRT_DeviceDescription_Attributes"))
        args.attributes = values.address or None
        args.num_attributes = values.count

    def _description_string(self, address: int, struct: str, method: str, out: str) -> None:
        args = self._args(address, struct)
        c_name = struct.removesuffix("_Args")
        text = getattr(self._description(args.device_description, c_name), method)()
        pointer, size = self._string((method, args.device_description), text)
        setattr(args, out, pointer)
        setattr(args, out + "_size", size)

    def _DeviceDescription_Kind(self, address: int) -> None:
        self._description_string(address, "PJRT_DeviceDescription_Kind_Args", "kind", "device_kind")

    def _DeviceDescription_DebugString(self, address: int) -> None:
        self._description_string(address, "PJRT_DeviceDescription_DebugString_Args", "debug_string", "debug_string")

    def _DeviceDescription_ToString(self, address: int) -> None:
        self._description_string(address, "PJRT_DeviceDescription_ToString_Args", "to_string", "to_string")

    def _device(self, handle: int, what: str) -> Any:
        return self._handles.get(handle, "device", what)

    def _Device_GetDescription(self, address: int) -> None:
        args = self._args(address, "PJRT_Device_GetDescription_Args")
        description = self._device(args.device, "PJRT_Device_GetDescription").get_description()
        args.device_description = self._handles.intern("description", description)

    def _Device_IsAddressable(self, address: int) -> None:
        args = self._args(address, "PJRT_Device_IsAddressable_Args")
        args.is_addressable = bool(self._device(args.device, "PJRT_Device_IsAddressable").is_addressable())

    def _Device_LocalHardwareId(self, address: int) -> None:
        args = self._args(address, "PJRT_Device_LocalHardwareId_Args")
        args.local_hardware_id = int(self._device(args.device, "PJRT_Device_LocalHardwareId").local_hardware_id())

    def _Device_AddressableMemories(self, address: int) -> None:
        args = self._args(address, "PJRT_Device_AddressableMemories_Args")
        memories = self._device(args.device, "PJRT_Device_AddressableMemories").addressable_memories()
        handles = [self._memory_handle(m) for m in memories]
        args.memories = self._interned_array(("memories", args.device), handles)
        if self._covers(args, "PJRT_Device_AddressableMemories_Args", "num_memories"):
            args.num_memories = len(handles)

    def _Device_DefaultMemory(self, address: int) -> None:
        args = self._args(address, "PJRT_Device_DefaultMemory_Args")
        args.memory = self._memory_handle(self._device(args.device, "PJRT_Device_DefaultMemory").default_memory())

    def _Device_MemoryStats(self, address: int) -> None:
        args = self._args(address, "PJRT_Device_MemoryStats_Args")
        stats = self._device(args.device, "PJRT_Device_MemoryStats").memory_stats()
        args.bytes_in_use = int(stats.bytes_in_use)
        for name in ("peak_bytes_in_use", "num_allocs", "largest_alloc_size", "bytes_limit", "bytes_reserved",
                     "peak_bytes_reserved", "largest_free_block_bytes", "pool_bytes", "peak_pool_bytes"):
            value = getattr(stats, name)
            if self._covers(args, "PJRT_Device_MemoryStats_Args", name + "_is_set"):
                setattr(args, name + "_is_set", value is not None)
                setattr(args, name, int(value or 0))
        if self._covers(args, "PJRT_Device_MemoryStats_Args", "bytes_reservable_limit_is_set"):
            args.bytes_reservable_limit_is_set = False
        if self._covers(args, "PJRT_Device_MemoryStats_Args", "peak_allocated_bytes_is_set"):
            args.peak_allocated_bytes_is_set = False

    def _Device_GetAttributes(self, address: int) -> None:
        args = self._args(address, "PJRT_Device_GetAttributes_Args")
        device = self._device(args.device, "PJRT_Device_GetAttributes")
        try:
            attributes = device.get_attributes()
        except Unimplemented:
            attributes = {}  # jaxlib treats an error here as fatal; no attributes is the honest answer
        values = self._named_values(attributes, "PJRT_Device_GetAttributes")
        args.attributes = values.address or None
        args.num_attributes = values.count
        # The handle the caller gives back to the deleter: any unique non-NULL value will do.
        args.device_attributes = values.address or id(values)
        self._serial_keep[args.device_attributes] = values
        args.attributes_deleter = self._serial_deleter

    def _memory(self, handle: int, what: str) -> Any:
        return self._handles.get(handle, "memory", what)

    def _Memory_Id(self, address: int) -> None:
        args = self._args(address, "PJRT_Memory_Id_Args")
        args.id = int(self._memory(args.memory, "PJRT_Memory_Id").id())

    def _Memory_Kind(self, address: int) -> None:
        args = self._args(address, "PJRT_Memory_Kind_Args")
        kind = self._memory(args.memory, "PJRT_Memory_Kind").kind()
        args.kind, args.kind_size = self._string(("memory kind", args.memory), kind)

    def _Memory_Kind_Id(self, address: int) -> None:
        args = self._args(address, "PJRT_Memory_Kind_Id_Args")
        args.kind_id = int(self._memory(args.memory, "PJRT_Memory_Kind_Id").kind_id())

    def _Memory_DebugString(self, address: int) -> None:
        args = self._args(address, "PJRT_Memory_DebugString_Args")
        text = self._memory(args.memory, "PJRT_Memory_DebugString").debug_string()
        args.debug_string, args.debug_string_size = self._string(("memory debug", args.memory), text)

    def _Memory_ToString(self, address: int) -> None:
        args = self._args(address, "PJRT_Memory_ToString_Args")
        text = self._memory(args.memory, "PJRT_Memory_ToString").to_string()
        args.to_string, args.to_string_size = self._string(("memory string", args.memory), text)

    def _Memory_AddressableByDevices(self, address: int) -> None:
        args = self._args(address, "PJRT_Memory_AddressableByDevices_Args")
        devices = self._memory(args.memory, "PJRT_Memory_AddressableByDevices").addressable_by_devices()
        handles = [self._device_handle(d) for d in devices]
        args.devices = self._interned_array(("memory devices", args.memory), handles)
        args.num_devices = len(handles)

    # -- executables ---------------------------------------------------------------------------

    def _loaded_handle(self, loaded: Any, options: bytes) -> int:
        return self._handles.new("loaded", _Loaded(loaded, _Executable(None, options)))

    def _loaded(self, handle: int, what: str) -> _Loaded:
        return self._handles.get(handle, "loaded", what)

    def _executable_entry(self, handle: int, what: str) -> _Entry:
        return self._handles.entry(handle, "executable", what)

    def _executable(self, handle: int, what: str) -> Any:
        return self._handles.get(handle, "executable", what).obj

    def _LoadedExecutable_Destroy(self, address: int) -> None:
        args = self._args(address, "PJRT_LoadedExecutable_Destroy_Args")
        loaded = self._handles.drop(args.executable, "loaded", "PJRT_LoadedExecutable_Destroy")
        if loaded is not None:
            loaded.obj.destroy()

    def _LoadedExecutable_GetExecutable(self, address: int) -> None:
        args = self._args(address, "PJRT_LoadedExecutable_GetExecutable_Args")
        loaded = self._loaded(args.loaded_executable, "PJRT_LoadedExecutable_GetExecutable")
        info = loaded.executable
        if info.obj is None:
            info.obj = loaded.obj.get_executable()
        args.executable = self._handles.new("executable", info)

    def _LoadedExecutable_AddressableDevices(self, address: int) -> None:
        args = self._args(address, "PJRT_LoadedExecutable_AddressableDevices_Args")
        entry = self._handles.entry(args.executable, "loaded", "PJRT_LoadedExecutable_AddressableDevices")
        handles = [self._device_handle(d) for d in entry.obj.obj.addressable_devices()]
        args.addressable_devices = self._pointer_array(entry, "addressable_devices", handles)
        args.num_addressable_devices = len(handles)

    def _LoadedExecutable_AddressableDeviceLogicalIds(self, address: int) -> None:
        args = self._args(address, "PJRT_LoadedExecutable_AddressableDeviceLogicalIds_Args")
        entry = self._handles.entry(args.executable, "loaded", "PJRT_LoadedExecutable_AddressableDeviceLogicalIds")
        loaded = entry.obj.obj
        assignment = loaded.get_device_assignment()
        where = {int(device_id): (r, p) for r, row in enumerate(assignment) for p, device_id in enumerate(row)}
        pairs = []
        for device in loaded.addressable_devices():
            replica, partition = where.get(int(device.get_description().id()), (0, 0))
            pairs += [replica, partition]
        array = entry.keep("logical_ids", (ctypes.c_int * max(2, len(pairs)))(*pairs))
        args.addressable_device_logical_ids = ctypes.addressof(array)
        args.num_addressable_device_logical_ids = len(pairs) // 2

    def _LoadedExecutable_Delete(self, address: int) -> None:
        args = self._args(address, "PJRT_LoadedExecutable_Delete_Args")
        self._loaded(args.executable, "PJRT_LoadedExecutable_Delete").obj.delete()

    def _LoadedExecutable_IsDeleted(self, address: int) -> None:
        args = self._args(address, "PJRT_LoadedExecutable_IsDeleted_Args")
        args.is_deleted = bool(self._loaded(args.executable, "PJRT_LoadedExecutable_IsDeleted").obj.is_deleted())

    def _LoadedExecutable_Fingerprint(self, address: int) -> None:
        args = self._args(address, "PJRT_LoadedExecutable_Fingerprint_Args")
        entry = self._handles.entry(args.executable, "loaded", "PJRT_LoadedExecutable_Fingerprint")
        text = entry.obj.obj.fingerprint()
        args.executable_fingerprint, args.executable_fingerprint_size = self._owned_string(entry, "fp", text)

    def _LoadedExecutable_GetDeviceAssignment(self, address: int) -> None:
        args = self._args(address, "PJRT_LoadedExecutable_GetDeviceAssignment_Args")
        loaded = self._loaded(args.executable, "PJRT_LoadedExecutable_GetDeviceAssignment").obj
        proto = encode_device_assignment(tuple(tuple(int(d) for d in row) for row in loaded.get_device_assignment()))
        self._serialized(proto, args, "serialized_bytes", "serialized_bytes_size", "serialized_device_assignment",
                         "serialized_device_assignment_deleter")

    def _LoadedExecutable_Execute(self, address: int) -> None:
        args = self._args(address, "PJRT_LoadedExecutable_Execute_Args")
        what = "PJRT_LoadedExecutable_Execute"
        info = self._loaded(args.executable, what)
        num_devices, num_args = args.num_devices, args.num_args
        get_buffer = self._handles.entries.get
        argument_lists = []
        outer = _pointers(num_devices).from_address(args.argument_lists) if num_devices else ()
        row_type = _pointers(num_args)
        for d in range(num_devices):
            row = row_type.from_address(outer[d]) if num_args else ()
            buffers = []
            for i, handle in enumerate(row):
                entry = get_buffer(handle or 0)
                if entry is None or entry.kind != "buffer":
                    self._handles.entry(handle, "buffer", f"{what}: argument {i} of device {d}")
                buffers.append(entry.obj)
            argument_lists.append(buffers)
        options = None
        if args.options:
            opts = self._args(args.options, "PJRT_ExecuteOptions")
            indices: tuple[int, ...] = ()
            if self._covers(opts, "PJRT_ExecuteOptions", "num_non_donatable_input_indices"):
                indices = self._int64s(opts.non_donatable_input_indices, opts.num_non_donatable_input_indices,
                                       f"{what}: non_donatable_input_indices")
            if opts.launch_id or indices:
                options = ExecuteOptions(launch_id=int(opts.launch_id), non_donatable_input_indices=indices)
        execute_device = None
        if self._covers(args, "PJRT_LoadedExecutable_Execute_Args", "execute_device") and args.execute_device:
            execute_device = self._device(args.execute_device, what)
        result = info.obj.execute(argument_lists, options, execute_device)
        outputs = result.outputs
        new = self._handles.new
        out_outer = _pointers(num_devices).from_address(args.output_lists) if num_devices else ()
        for d, buffers in enumerate(outputs):
            out_row = _pointers(len(buffers)).from_address(out_outer[d]) if buffers else ()
            for i, buffer in enumerate(buffers):
                out_row[i] = new("buffer", buffer)
        if args.device_complete_events:
            events = _pointers(num_devices).from_address(args.device_complete_events)
            for d, event in enumerate(result.device_complete_events):
                events[d] = new("event", event)

    def _Executable_Destroy(self, address: int) -> None:
        args = self._args(address, "PJRT_Executable_Destroy_Args")
        self._handles.drop(args.executable, "executable", "PJRT_Executable_Destroy")

    def _Executable_Name(self, address: int) -> None:
        args = self._args(address, "PJRT_Executable_Name_Args")
        entry = self._executable_entry(args.executable, "PJRT_Executable_Name")
        args.executable_name, args.executable_name_size = self._owned_string(entry, "name", entry.obj.obj.name())

    def _Executable_NumReplicas(self, address: int) -> None:
        args = self._args(address, "PJRT_Executable_NumReplicas_Args")
        args.num_replicas = int(self._executable(args.executable, "PJRT_Executable_NumReplicas").num_replicas())

    def _Executable_NumPartitions(self, address: int) -> None:
        args = self._args(address, "PJRT_Executable_NumPartitions_Args")
        args.num_partitions = int(self._executable(args.executable, "PJRT_Executable_NumPartitions").num_partitions())

    def _Executable_NumOutputs(self, address: int) -> None:
        args = self._args(address, "PJRT_Executable_NumOutputs_Args")
        args.num_outputs = int(self._executable(args.executable, "PJRT_Executable_NumOutputs").num_outputs())

    def _Executable_SizeOfGeneratedCodeInBytes(self, address: int) -> None:
        args = self._args(address, "PJRT_Executable_SizeOfGeneratedCodeInBytes_Args")
        executable = self._executable(args.executable, "PJRT_Executable_SizeOfGeneratedCodeInBytes")
        args.size_in_bytes = int(executable.size_of_generated_code_in_bytes())

    def _Executable_GetCostAnalysis(self, address: int) -> None:
        args = self._args(address, "PJRT_Executable_GetCostAnalysis_Args")
        entry = self._executable_entry(args.executable, "PJRT_Executable_GetCostAnalysis")
        values = entry.keep("cost", self._named_values(
            {k: float(v) for k, v in entry.obj.obj.get_cost_analysis().items()}, "PJRT_Executable_GetCostAnalysis"))
        args.num_properties = values.count
        args.properties = values.address or None

    def _Executable_OutputMemoryKinds(self, address: int) -> None:
        args = self._args(address, "PJRT_Executable_OutputMemoryKinds_Args")
        entry = self._executable_entry(args.executable, "PJRT_Executable_OutputMemoryKinds")
        kinds = [k.encode() for k in entry.obj.obj.output_memory_kinds()]
        bufs = [ctypes.create_string_buffer(k, max(1, len(k))) for k in kinds]
        pointers = (ctypes.c_void_p * max(1, len(bufs)))(*[ctypes.addressof(b) for b in bufs])
        sizes = (ctypes.c_size_t * max(1, len(bufs)))(*[len(k) for k in kinds])
        entry.keep("memory_kinds", (bufs, pointers, sizes))
        args.num_outputs = len(kinds)
        args.memory_kinds = ctypes.addressof(pointers)
        args.memory_kind_sizes = ctypes.addressof(sizes)

    def _Executable_OutputElementTypes(self, address: int) -> None:
        args = self._args(address, "PJRT_Executable_OutputElementTypes_Args")
        entry = self._executable_entry(args.executable, "PJRT_Executable_OutputElementTypes")
        types = [int(t) for t in entry.obj.obj.output_element_types()]
        array = entry.keep("output_types", (ctypes.c_int32 * max(1, len(types)))(*types))
        args.output_types = ctypes.addressof(array)
        args.num_output_types = len(types)

    def _Executable_OutputDimensions(self, address: int) -> None:
        args = self._args(address, "PJRT_Executable_OutputDimensions_Args")
        entry = self._executable_entry(args.executable, "PJRT_Executable_OutputDimensions")
        shapes = [tuple(int(d) for d in s) for s in entry.obj.obj.output_dimensions()]
        flat = [d for s in shapes for d in s]
        dims = (ctypes.c_int64 * max(1, len(flat)))(*flat)
        sizes = (ctypes.c_size_t * max(1, len(shapes)))(*[len(s) for s in shapes])
        entry.keep("output_dims", (dims, sizes))
        args.num_outputs = len(shapes)
        args.dims = ctypes.addressof(dims)
        args.dim_sizes = ctypes.addressof(sizes)

    def _Executable_Fingerprint(self, address: int) -> None:
        args = self._args(address, "PJRT_Executable_Fingerprint_Args")
        entry = self._executable_entry(args.executable, "PJRT_Executable_Fingerprint")
        args.executable_fingerprint, args.executable_fingerprint_size = self._owned_string(
            entry, "fp", entry.obj.obj.fingerprint())

    def _Executable_OptimizedProgram(self, address: int) -> None:
        args = self._args(address, "PJRT_Executable_OptimizedProgram_Args")
        entry = self._executable_entry(args.executable, "PJRT_Executable_OptimizedProgram")
        program = entry.obj.obj.optimized_program()
        data = program.data()
        target = self._args(args.program, "PJRT_Program")
        target.format, target.format_size = self._string(("program format", program.format), program.format)
        if not target.code:
            target.code_size = len(data)
            return
        if target.code_size < len(data):
            raise InvalidArgument(f"PJRT_Executable_OptimizedProgram: code_size {target.code_size} is smaller "
                                  f"than the program's {len(data)} bytes")
        ctypes.memmove(target.code, data, len(data))
        target.code_size = len(data)

    def _Executable_Serialize(self, address: int) -> None:
        args = self._args(address, "PJRT_Executable_Serialize_Args")
        data = self._executable(args.executable, "PJRT_Executable_Serialize").serialize()
        self._serialized(data, args, "serialized_bytes", "serialized_bytes_size", "serialized_executable",
                         "serialized_executable_deleter")

    def _Executable_GetCompiledMemoryStats(self, address: int) -> None:
        args = self._args(address, "PJRT_Executable_GetCompiledMemoryStats_Args")
        stats = self._executable(args.executable, "PJRT_Executable_GetCompiledMemoryStats").get_compiled_memory_stats()
        for name, value in stats.as_dict().items():
            if hasattr(args, name) and self._covers(args, "PJRT_Executable_GetCompiledMemoryStats_Args", name):
                setattr(args, name, int(value))

    def _Executable_GetCompileOptions(self, address: int) -> None:
        args = self._args(address, "PJRT_Executable_GetCompileOptions_Args")
        info = self._handles.get(args.executable, "executable", "PJRT_Executable_GetCompileOptions")
        if not info.options:
            raise Unimplemented("PJRT_Executable_GetCompileOptions: this executable was not compiled through "
                                "this PJRT_Api, its options are not known")
        self._serialized(info.options, args, "serialized_bytes", "serialized_bytes_size",
                         "serialized_compile_options", "serialized_compile_options_deleter")

    def _ExecuteContext_Create(self, address: int) -> None:
        args = self._args(address, "PJRT_ExecuteContext_Create_Args")
        args.context = self._handles.new("context", None)

    def _ExecuteContext_Destroy(self, address: int) -> None:
        args = self._args(address, "PJRT_ExecuteContext_Destroy_Args")
        self._handles.drop(args.context, "context", "PJRT_ExecuteContext_Destroy")

    # -- buffers -------------------------------------------------------------------------------

    def _buffer_entry(self, handle: int, what: str) -> _Entry:
        entry = self._handles.entries.get(handle or 0)
        if entry is None or entry.kind != "buffer":
            return self._handles.entry(handle, "buffer", what)
        return entry

    def _buffer(self, handle: int, what: str) -> Any:
        return self._buffer_entry(handle, what).obj

    def _Buffer_Destroy(self, address: int) -> None:
        args = self._args(address, "PJRT_Buffer_Destroy_Args")
        buffer = self._handles.drop(args.buffer, "buffer", "PJRT_Buffer_Destroy")
        if buffer is not None:
            buffer.destroy()

    def _Buffer_ElementType(self, address: int) -> None:
        args = self._args(address, "PJRT_Buffer_ElementType_Args")
        args.type = int(self._buffer(args.buffer, "PJRT_Buffer_ElementType").element_type())

    def _dims(self, address: int, struct: str, method: str, out: str, count: str) -> None:
        args = self._args(address, struct)
        entry = self._buffer_entry(args.buffer, struct.removesuffix("_Args"))
        array = entry.kept(method)
        if array is None:
            dims = [int(d) for d in getattr(entry.obj, method)()]
            array = entry.keep(method, ((ctypes.c_int64 * max(1, len(dims)))(*dims), len(dims)))
        setattr(args, out, ctypes.addressof(array[0]))
        setattr(args, count, array[1])

    def _Buffer_Dimensions(self, address: int) -> None:
        self._dims(address, "PJRT_Buffer_Dimensions_Args", "dimensions", "dims", "num_dims")

    def _Buffer_UnpaddedDimensions(self, address: int) -> None:
        self._dims(address, "PJRT_Buffer_UnpaddedDimensions_Args", "unpadded_dimensions", "unpadded_dims",
                   "num_dims")

    def _Buffer_DynamicDimensionIndices(self, address: int) -> None:
        args = self._args(address, "PJRT_Buffer_DynamicDimensionIndices_Args")
        entry = self._buffer_entry(args.buffer, "PJRT_Buffer_DynamicDimensionIndices")
        indices = [int(i) for i in entry.obj.dynamic_dimension_indices()]
        array = entry.keep("dynamic", (ctypes.c_size_t * max(1, len(indices)))(*indices))
        args.dynamic_dim_indices = ctypes.addressof(array)
        args.num_dynamic_dims = len(indices)

    def _Buffer_OnDeviceSizeInBytes(self, address: int) -> None:
        args = self._args(address, "PJRT_Buffer_OnDeviceSizeInBytes_Args")
        args.on_device_size_in_bytes = int(self._buffer(args.buffer, "PJRT_Buffer_OnDeviceSizeInBytes")
                                           .on_device_size_in_bytes())

    def _Buffer_Device(self, address: int) -> None:
        args = self._args(address, "PJRT_Buffer_Device_Args")
        args.device = self._device_handle(self._buffer(args.buffer, "PJRT_Buffer_Device").device())

    def _Buffer_Memory(self, address: int) -> None:
        args = self._args(address, "PJRT_Buffer_Memory_Args")
        args.memory = self._memory_handle(self._buffer(args.buffer, "PJRT_Buffer_Memory").memory())

    def _Buffer_Delete(self, address: int) -> None:
        args = self._args(address, "PJRT_Buffer_Delete_Args")
        self._buffer(args.buffer, "PJRT_Buffer_Delete").delete()

    def _Buffer_IsDeleted(self, address: int) -> None:
        args = self._args(address, "PJRT_Buffer_IsDeleted_Args")
        args.is_deleted = bool(self._buffer(args.buffer, "PJRT_Buffer_IsDeleted").is_deleted())

    def _Buffer_CopyToDevice(self, address: int) -> None:
        args = self._args(address, "PJRT_Buffer_CopyToDevice_Args")
        buffer = self._buffer(args.buffer, "PJRT_Buffer_CopyToDevice")
        copy = buffer.copy_to_device(self._device(args.dst_device, "PJRT_Buffer_CopyToDevice"))
        args.dst_buffer = self._handles.new("buffer", copy)

    def _Buffer_CopyToMemory(self, address: int) -> None:
        args = self._args(address, "PJRT_Buffer_CopyToMemory_Args")
        buffer = self._buffer(args.buffer, "PJRT_Buffer_CopyToMemory")
        copy = buffer.copy_to_memory(self._memory(args.dst_memory, "PJRT_Buffer_CopyToMemory"))
        args.dst_buffer = self._handles.new("buffer", copy)

    def _Buffer_ToHostBuffer(self, address: int) -> None:
        args = self._args(address, "PJRT_Buffer_ToHostBuffer_Args")
        what = "PJRT_Buffer_ToHostBuffer"
        buffer = self._buffer(args.src, what)
        kind = BufferType(buffer.element_type())
        if kind in PACKED_TYPES:
            raise Unimplemented(f"{what}: {kind.name} is packed below a byte; pjrt-hub's PJRT_Api does not pack it")
        dims = tuple(int(d) for d in buffer.dimensions())
        dtype = to_numpy_dtype(kind)
        order = None
        if args.host_layout:
            order = self._host_order(args.host_layout, len(dims), what)
        nbytes = int(np.prod(dims, dtype=np.int64)) * dtype.itemsize
        if not args.dst:
            args.dst_size = nbytes
            return
        if args.dst_size < nbytes:
            raise InvalidArgument(f"{what}: dst_size {args.dst_size} is smaller than the buffer's {nbytes} bytes")
        if order is None:
            view = _host_array(args.dst, kind, dims, None, writable=True, what=what)
            args.event = self._handles.new("event", buffer.to_host_buffer(view).event)
            return
        # A permuted host layout: the dimensions in memory run major to minor as `order` says.
        permuted = tuple(dims[d] for d in order)
        view = _host_array(args.dst, kind, permuted, None, writable=True, what=what)
        result = buffer.to_host_buffer()
        result.event.await_()
        np.copyto(view, np.transpose(result.array, order))
        args.event = self._handles.new("event", result.event)

    def _host_order(self, address: int, ndim: int, what: str) -> tuple[int, ...] | None:
        """The major-to-minor dimension order of a tiled host layout; None for row-major."""
        memory_layout = layout("PJRT_Buffer_MemoryLayout").ctype.from_address(address)
        if memory_layout.type != 0 or memory_layout.num_tiles:
            raise Unimplemented(f"{what}: host layouts with strides or tiles are not supported")
        minor_to_major = self._int64s(memory_layout.minor_to_major, memory_layout.minor_to_major_size, what)
        if not minor_to_major or minor_to_major == tuple(range(ndim - 1, -1, -1)):
            return None
        if sorted(minor_to_major) != list(range(ndim)):
            raise InvalidArgument(f"{what}: host layout minor_to_major {list(minor_to_major)} is not a "
                                  f"permutation of the buffer's {ndim} dimensions")
        return tuple(reversed(minor_to_major))

    def _Buffer_IsOnCpu(self, address: int) -> None:
        args = self._args(address, "PJRT_Buffer_IsOnCpu_Args")
        args.is_on_cpu = bool(self._buffer(args.buffer, "PJRT_Buffer_IsOnCpu").is_on_cpu())

    def _Buffer_ReadyEvent(self, address: int) -> None:
        args = self._args(address, "PJRT_Buffer_ReadyEvent_Args")
        args.event = self._handles.new("event", self._buffer(args.buffer, "PJRT_Buffer_ReadyEvent").ready_event())

    def _Buffer_UnsafePointer(self, address: int) -> None:
        args = self._args(address, "PJRT_Buffer_UnsafePointer_Args")
        args.buffer_pointer = int(self._buffer(args.buffer, "PJRT_Buffer_UnsafePointer").unsafe_pointer()) or None

    def _Buffer_IncreaseExternalReferenceCount(self, address: int) -> None:
        args = self._args(address, "PJRT_Buffer_IncreaseExternalReferenceCount_Args")
        self._buffer(args.buffer, "PJRT_Buffer_IncreaseExternalReferenceCount").increase_external_reference_count()

    def _Buffer_DecreaseExternalReferenceCount(self, address: int) -> None:
        args = self._args(address, "PJRT_Buffer_DecreaseExternalReferenceCount_Args")
        self._buffer(args.buffer, "PJRT_Buffer_DecreaseExternalReferenceCount").decrease_external_reference_count()

    def _Buffer_OpaqueDeviceMemoryDataPointer(self, address: int) -> None:
        args = self._args(address, "PJRT_Buffer_OpaqueDeviceMemoryDataPointer_Args")
        buffer = self._buffer(args.buffer, "PJRT_Buffer_OpaqueDeviceMemoryDataPointer")
        args.device_memory_ptr = int(buffer.opaque_device_memory_data_pointer()) or None

    # -- topologies and ahead-of-time compilation --------------------------------------------

    def _topology(self, handle: int, what: str) -> Any:
        return self._handles.get(handle, "topology", what)

    def _TopologyDescription_Create(self, address: int) -> None:
        args = self._args(address, "PJRT_TopologyDescription_Create_Args")
        options = decode_named_values(args.create_options, args.num_options, what="PJRT_TopologyDescription_Create",
                                      plugin=self.name) if args.num_options else {}
        args.topology = self._handles.new("topology", self.api.topology_create(options))

    def _TopologyDescription_Destroy(self, address: int) -> None:
        args = self._args(address, "PJRT_TopologyDescription_Destroy_Args")
        entry = self._handles.entry(args.topology, "topology", "PJRT_TopologyDescription_Destroy") \
            if args.topology else None
        if entry is not None and self._handles.interned.get(("topology", id(entry.obj))) != args.topology:
            self._handles.drop(args.topology, "topology", "PJRT_TopologyDescription_Destroy")

    def _TopologyDescription_PlatformName(self, address: int) -> None:
        args = self._args(address, "PJRT_TopologyDescription_PlatformName_Args")
        topology = self._topology(args.topology, "PJRT_TopologyDescription_PlatformName")
        name = self.platform_name or topology.platform_name()
        args.platform_name, args.platform_name_size = self._string(("topology platform", args.topology), name)

    def _TopologyDescription_PlatformVersion(self, address: int) -> None:
        args = self._args(address, "PJRT_TopologyDescription_PlatformVersion_Args")
        text = self._topology(args.topology, "PJRT_TopologyDescription_PlatformVersion").platform_version()
        args.platform_version, args.platform_version_size = self._string(("topology version", args.topology), text)

    def _TopologyDescription_GetDeviceDescriptions(self, address: int) -> None:
        args = self._args(address, "PJRT_TopologyDescription_GetDeviceDescriptions_Args")
        entry = self._handles.entry(args.topology, "topology", "PJRT_TopologyDescription_GetDeviceDescriptions")
        handles = [self._handles.intern("description", d) for d in entry.obj.get_device_descriptions()]
        args.descriptions = self._pointer_array(entry, "descriptions", handles)
        args.num_descriptions = len(handles)

    def _TopologyDescription_Serialize(self, address: int) -> None:
        args = self._args(address, "PJRT_TopologyDescription_Serialize_Args")
        data = self._topology(args.topology, "PJRT_TopologyDescription_Serialize").serialize()
        self._serialized(data, args, "serialized_bytes", "serialized_bytes_size", "serialized_topology",
                         "serialized_topology_deleter")

    def _TopologyDescription_Deserialize(self, address: int) -> None:
        args = self._args(address, "PJRT_TopologyDescription_Deserialize_Args")
        data = ctypes.string_at(args.serialized_topology, args.serialized_topology_size)
        args.topology = self._handles.new("topology", self.api.topology_deserialize(data))

    def _TopologyDescription_Attributes(self, address: int) -> None:
        args = self._args(address, "PJRT_TopologyDescription_Attributes_Args")
        entry = self._handles.entry(args.topology, "topology", "PJRT_TopologyDescription_Attributes")
        values = entry.kept("attributes") or entry.keep("attributes", self._named_values(
            entry.obj.attributes(), "PJRT_TopologyDescription_Attributes"))
        args.attributes = values.address or None
        args.num_attributes = values.count

    def _TopologyDescription_Fingerprint(self, address: int) -> None:
        args = self._args(address, "PJRT_TopologyDescription_Fingerprint_Args")
        topology = self._topology(args.topology, "PJRT_TopologyDescription_Fingerprint")
        try:
            data = topology.serialize()
        except Unimplemented:
            data = repr([(d.id(), d.kind()) for d in topology.get_device_descriptions()]).encode()
        digest = hashlib.sha256((self.platform_name or topology.platform_name()).encode() + b"\0" + data).digest()
        args.fingerprint = int.from_bytes(digest[:8], "little") & _U64

    def _Compile(self, address: int) -> None:
        args = self._args(address, "PJRT_Compile_Args")
        topology = self._topology(args.topology, "PJRT_Compile")
        program = self._program(args.program, "PJRT_Compile")
        options = ctypes.string_at(args.compile_options, args.compile_options_size) \
            if args.compile_options_size else encode_compile_options_default()
        executable = self.api.compile(program, topology, options)
        args.executable = self._handles.new("executable", _Executable(executable, options))

    # -- extensions ----------------------------------------------------------------------------

    def _build_extensions(self, requested: dict[str, int]) -> int:
        """The extension chain for ``requested`` (name -> version), newest node first; 0 if none."""
        if self.version.minor < _EXTENSION_LAYOUT_SINCE:
            return 0
        head = 0
        for name, version in requested.items():
            functions = _EXTENSION_FUNCTIONS.get(name)
            spec = extension_spec(name)
            if functions is None or spec is None:
                continue
            served = tuple(fn for fn, since in functions if since <= version)
            size = _EXTENSION_HEADER + 8 * len(served)
            node = (ctypes.c_char * size)()
            base = ctypes.addressof(node)
            ctypes.c_size_t.from_address(base).value = size
            ctypes.c_int32.from_address(base + 8).value = int(ExtensionType[name])
            ctypes.c_void_p.from_address(base + 16).value = head or None
            for i, fn_name in enumerate(served):
                location = base + _EXTENSION_HEADER + 8 * i
                ctypes.c_void_p.from_address(location).value = self._callback(fn_name)
                self._locations[fn_name] = location
            self._node_memory.append(node)
            self.extension_nodes.append(_ExtensionNode(name, version, served))
            head = base
        return head

    def _extension(self, name: str, what: str) -> Any:
        found = self.api.extensions().get(name)
        if found is None:
            raise Unimplemented(f"{what}: plugin {self.name!r} declares the {name} extension but its Api offers "
                                "no implementation of it")
        return found

    def _layout_handle(self, value: MemoryLayout) -> int:
        return self._handles.new("layout", value)

    def _Layouts_MemoryLayout_Destroy(self, address: int) -> None:
        args = self._args(address, "PJRT_Layouts_MemoryLayout_Destroy_Args")
        self._handles.drop(args.layout, "layout", "PJRT_Layouts_MemoryLayout_Destroy")

    def _Layouts_MemoryLayout_Serialize(self, address: int) -> None:
        args = self._args(address, "PJRT_Layouts_MemoryLayout_Serialize_Args")
        value = self._handles.get(args.layout, "layout", "PJRT_Layouts_MemoryLayout_Serialize")
        self._serialized(format_xla_layout(value).encode(), args, "serialized_bytes", "serialized_bytes_size",
                         "serialized_layout", "serialized_layout_deleter")

    def _Layouts_PJRT_Client_GetDefaultLayout(self, address: int) -> None:
        what = "PJRT_Layouts_PJRT_Client_GetDefaultLayout"
        args = self._args(address, what + "_Args")
        client = self._client(args.client, what)
        dims = self._int64s(args.dims, args.num_dims, what)
        value = self._extension("Layouts", what).client_default_layout(client, _buffer_type(args.type, what), dims)
        args.layout = self._layout_handle(value)

    def _Layouts_PJRT_Buffer_MemoryLayout(self, address: int) -> None:
        what = "PJRT_Layouts_PJRT_Buffer_MemoryLayout"
        args = self._args(address, what + "_Args")
        buffer = self._buffer(args.buffer, what)
        args.layout = self._layout_handle(self._extension("Layouts", what).buffer_memory_layout(buffer))

    def _Layouts_PJRT_Topology_GetDefaultLayout(self, address: int) -> None:
        what = "PJRT_Layouts_PJRT_Topology_GetDefaultLayout"
        args = self._args(address, what + "_Args")
        topology = self._topology(args.topology_description, what)
        dims = self._int64s(args.dims, args.num_dims, what)
        extension = self._extension("Layouts", what)
        method = getattr(extension, "topology_default_layout", None)
        if method is not None:
            value = method(topology, _buffer_type(args.type, what), dims)
        else:
            # The protocol has no topology method: a dense row-major layout is what every
            # pjrt-hub CPU plugin gives, and what a client of this topology would give.
            value = MemoryLayout(tuple(range(len(dims) - 1, -1, -1)))
        args.layout = self._layout_handle(value)

    def _executable_layouts(self, address: int, what: str, method: str, count: str) -> None:
        args = self._args(address, what + "_Args")
        entry = self._executable_entry(args.executable, what)
        values = getattr(self._extension("Layouts", what), method)(entry.obj.obj)
        # The layouts belong to the executable: the caller reads them and never destroys them.
        handles = [self._handles.new("layout", v) for v in values]
        entry.keep(method, [(h, self._handles.entries[h]) for h in handles])
        setattr(args, count, len(handles))
        args.layouts = self._pointer_array(entry, method + " array", handles)

    def _Layouts_PJRT_Executable_GetOutputLayouts(self, address: int) -> None:
        self._executable_layouts(address, "PJRT_Layouts_PJRT_Executable_GetOutputLayouts",
                                 "executable_output_layouts", "num_outputs")

    def _Layouts_PJRT_Executable_GetParameterLayouts(self, address: int) -> None:
        self._executable_layouts(address, "PJRT_Layouts_PJRT_Executable_GetParameterLayouts",
                                 "executable_parameter_layouts", "num_parameters")

    def _executable_shardings(self, address: int, what: str, method: str, count: str) -> None:
        args = self._args(address, what + "_Args")
        entry = self._executable_entry(args.executable, what)
        getter = getattr(entry.obj.obj, method, None)
        protos = getter() if getter is not None else None
        if protos is None:
            setattr(args, count, 0)
            args.shardings = None
            args.sharding_sizes = None
            return
        bufs = [ctypes.create_string_buffer(bytes(p), max(1, len(p))) for p in protos]
        pointers = (ctypes.c_void_p * max(1, len(bufs)))(*[ctypes.addressof(b) for b in bufs])
        sizes = (ctypes.c_size_t * max(1, len(bufs)))(*[len(p) for p in protos])
        entry.keep(method, (bufs, pointers, sizes))
        setattr(args, count, len(protos))
        args.shardings = ctypes.addressof(pointers)
        args.sharding_sizes = ctypes.addressof(sizes)

    def _Shardings_PJRT_Executable_ParameterShardings(self, address: int) -> None:
        self._executable_shardings(address, "PJRT_Shardings_PJRT_Executable_ParameterShardings",
                                   "parameter_shardings", "num_parameters")

    def _Shardings_PJRT_Executable_OutputShardings(self, address: int) -> None:
        self._executable_shardings(address, "PJRT_Shardings_PJRT_Executable_OutputShardings",
                                   "output_shardings", "num_outputs")

    def _DeviceDescription_MemoryDescriptions(self, address: int) -> None:
        what = "PJRT_DeviceDescription_MemoryDescriptions"
        args = self._args(address, what + "_Args")
        entry = self._handles.entry(args.device_description, "description", what)
        kinds = self._extension("MemoryDescriptions", what).memory_descriptions(entry.obj)
        handles = [self._handles.intern("memory_description", _MemoryDescription(str(k), int(i), entry.obj))
                   for k, i in kinds]
        entry.keep("memory descriptions", [self._handles.entries[h].obj for h in handles])
        args.memory_descriptions = self._pointer_array(entry, "memory description array", handles)
        args.num_memory_descriptions = len(handles)
        args.default_memory_index = 0 if handles else _U64  # the protocol lists the default first

    def _MemoryDescription_Kind(self, address: int) -> None:
        args = self._args(address, "PJRT_MemoryDescription_Kind_Args")
        description = self._handles.get(args.memory_description, "memory_description", "PJRT_MemoryDescription_Kind")
        args.kind, args.kind_size = self._string(("memory description", description.kind), description.kind)
        args.kind_id = description.kind_id


@dataclass(frozen=True)
class _MemoryDescription:
    kind: str
    kind_id: int
    owner: Any


# -- module helpers ----------------------------------------------------------------------------


_STRUCT_INFO: dict[str, tuple[type, int]] = {}


def _struct_info(name: str) -> tuple[type, int]:
    """The ctypes class of an Args struct and the smallest ``struct_size`` we accept: the end of
    its oldest fields (those every header has)."""
    info = _STRUCT_INFO.get(name)
    if info is None:
        spec = layout(name)
        cls = spec.ctype
        oldest = [f for f in spec.fields if f.since == 0]
        minimum = 16
        if oldest:
            member = getattr(cls, oldest[-1].name)
            minimum = member.offset + member.size
        for first, _last, field_name in spec.stale:
            member = getattr(cls, field_name)
            minimum = min(minimum, member.offset + member.size)
        info = _STRUCT_INFO[name] = (cls, minimum if spec.has_head else 0)
    return info


@functools.lru_cache(maxsize=None)
def _field_end(struct: str, field_name: str) -> int:
    member = getattr(layout(struct).ctype, field_name)
    return member.offset + member.size


@functools.lru_cache(maxsize=None)
def _pointers(count: int) -> type:
    """``void*[count]`` (ctypes makes a new array type per length; the hot path reuses them)."""
    return ctypes.c_void_p * count


_ON_READY_FUNCTIONS: dict[int, Any] = {}


def _on_ready_function(address: int) -> Any:
    fn = _ON_READY_FUNCTIONS.get(address)
    if fn is None:
        fn = _ON_READY_FUNCTIONS[address] = _ON_READY(address)
    return fn


def _caller_release(function: int, pointer: int, user_arg: int) -> Callable[[], None]:
    """``on_delete_callback(device_buffer_ptr, user_arg)`` of a view, as the binding's ``on_delete``."""
    fn = _ON_DELETE(function)

    def release() -> None:
        fn(pointer, user_arg)

    return release


def _is_text(code: bytes) -> bool:
    """MLIR bytecode starts ``ML\\xefR``; anything else is taken as text."""
    return not code.startswith(b"ML\xefR")


def _buffer_type(value: int, what: str) -> BufferType:
    try:
        return BufferType(value)
    except ValueError:
        raise InvalidArgument(f"{what}: {value} is not a PJRT_Buffer_Type") from None


def _host_array(address: int | None, kind: BufferType, dims: Sequence[int], byte_strides: Sequence[int] | None,
                *, writable: bool, what: str) -> np.ndarray:
    """A numpy view of caller memory (no copy)."""
    if kind in PACKED_TYPES:
        raise Unimplemented(f"{what}: {kind.name} is packed below a byte; pjrt-hub's PJRT_Api does not pack it")
    dtype = to_numpy_dtype(kind)
    if any(d < 0 for d in dims):
        raise InvalidArgument(f"{what}: dimensions must not be negative, got {list(dims)}")
    count = 1
    for d in dims:
        count *= d
    if count == 0:
        return np.empty(tuple(dims), dtype)
    if not address:
        raise InvalidArgument(f"{what}: the data pointer is NULL for {count} elements")
    if byte_strides is not None and len(byte_strides) != len(dims):
        raise InvalidArgument(f"{what}: {len(byte_strides)} byte strides for {len(dims)} dimensions")
    if byte_strides is None:
        extent = count * dtype.itemsize
        raw = (ctypes.c_char * extent).from_address(address)
        array = np.frombuffer(raw, dtype=dtype).reshape(tuple(dims))
    else:
        low = sum(min(0, s * (d - 1)) for s, d in zip(byte_strides, dims))
        high = sum(max(0, s * (d - 1)) for s, d in zip(byte_strides, dims)) + dtype.itemsize
        raw = (ctypes.c_char * (high - low)).from_address(address + low)
        array = np.ndarray(tuple(dims), dtype=dtype, buffer=raw, offset=-low, strides=tuple(byte_strides))
    if not writable:
        array.flags.writeable = False
    return array


def _plain_values(values: Mapping[str, Any]) -> dict[str, Any]:
    """Attribute values as PJRT_NamedValue holds them (numpy scalars and tuples made plain)."""
    out: dict[str, Any] = {}
    for name, value in values.items():
        if isinstance(value, np.generic):
            value = value.item()
        if isinstance(value, tuple):
            value = list(value)
        out[str(name)] = value
    return out


def encode_compile_options_default() -> bytes:
    from pjrt_hub.abi import CompileOptions

    return encode_compile_options(CompileOptions())


def serve(api: Api | Callable[[], Api], *, name: str, version: ApiVersion | str | None = None,
          platform_name: str | None = None, program_reader: ProgramReader | None = None,
          extensions: Mapping[str, int] | None = None, compile_hook: CompileHook | None = None) -> ServedApi:
    """A :class:`ServedApi` for ``api``, kept for the life of the process (a C caller keeps raw
    pointers into it and everything it hands out)."""
    served = ServedApi(api, name=name, version=version, platform_name=platform_name,
                       program_reader=program_reader, extensions=extensions, compile_hook=compile_hook)
    _SERVED.append(served)
    return served


#: Every struct served in this process: a C caller keeps raw pointers into them forever.
_SERVED: list[ServedApi] = []


def _native_null_function() -> int:
    """The address of a C function that takes pointer arguments, ignores them and returns 0.

    ``sched_yield`` from the C library is one: it takes no argument (extra ones in registers are
    ignored by the calling conventions of the platforms pjrt-hub runs on), has no effect beyond
    yielding the CPU, and returns 0, which a caller reads as a NULL ``PJRT_Error*``."""
    try:
        libc = ctypes.CDLL(None)
        return ctypes.cast(libc.sched_yield, ctypes.c_void_p).value or 0
    except (OSError, AttributeError):
        return 0


@atexit.register
def _retire_all() -> None:
    for served in _SERVED:
        served.retire()
