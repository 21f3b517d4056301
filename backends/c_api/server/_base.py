"""The core of a served ``PJRT_Api``: the struct, its callbacks, handles, errors and the helpers
every group of functions uses (:class:`_Base`); the functions themselves are in the sibling
modules, one per group, mixed into :class:`~.ServedApi`."""

from __future__ import annotations

import collections
import ctypes
import functools
import logging
import mmap
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence

import numpy as np

from pjrt_hub.abi import (
    Api,
    ApiVersion,
    BufferType,
    ErrorCode,
    InvalidArgument,
    PjrtError,
    Program,
    Unimplemented,
    encode_compile_options,
    history,
    to_numpy_dtype,
)
from pjrt_hub.abi.errors import without_terminal_codes
from pjrt_hub.abi.types import ExtensionType
from pjrt_hub.extensions import extension_spec

from .._native import SLOT_BYTES, SLOT_WORDS, Arena
from ..library import API_HEADER_SIZE, encode_named_values
from ..structs import layout

if TYPE_CHECKING:
    from .._native import DestroyGates

log = logging.getLogger("pjrt_hub.c_api.server")

#: The name jaxlib checks on the capsule that carries a ``PJRT_Api*``.
CAPSULE_NAME = b"pjrt_c_api"

#: ``bytes -> str | bytes``: what the plugin gets for a program's code (see the module docstring).
ProgramReader = Callable[[bytes], "str | bytes"]
#: ``(client, program, serialized CompileOptionsProto) -> LoadedExecutable``: how
#: ``PJRT_Client_Compile`` compiles, when the default ``client.compile(program, options)`` is not it.
CompileHook = Callable[[Any, Program, bytes], Any]
#: ``attributes -> attributes``: what a device's attributes become before they are laid out as
#: ``PJRT_NamedValue``s, for a caller that cannot read every type the C API has.
AttributeHook = Callable[[Mapping[str, Any]], Mapping[str, Any]]

_FN = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p)
_VOID_FN = ctypes.CFUNCTYPE(None, ctypes.c_void_p)
_ON_READY = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p)
_PAYLOAD_VISITOR = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p, ctypes.c_size_t,
                                    ctypes.c_void_p)
_ON_DELETE = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p)

#: The functions that return ``void`` rather than ``PJRT_Error*``.
_VOID_FUNCTIONS = frozenset({"PJRT_Error_Destroy", "PJRT_Error_Message"})
#: The functions with a native fast path (see :mod:`.._native`), besides the destroy functions.
_FAST_FUNCTIONS = ("PJRT_Executable_NumReplicas", "PJRT_Executable_NumPartitions", "PJRT_Executable_NumOutputs",
                   "PJRT_Memory_Kind", "PJRT_Buffer_Device", "PJRT_Buffer_Memory", "PJRT_Buffer_ReadyEvent",
                   "PJRT_Event_IsReady", "PJRT_Event_Error", "PJRT_Event_OnReady")
#: ``PJRT_Extension_Base``: struct_size, type (int, padded), next.
_EXTENSION_HEADER = 24
#: The extension chain's node layout with a leading ``struct_size`` arrived at 0.45.
_EXTENSION_LAYOUT_SINCE = 45
#: Fingerprints are 64-bit.
_U64 = (1 << 64) - 1
#: Handles one server hands out from its arena (48 bytes each, committed by the system as used).
ARENA_SLOTS = 1 << 18


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

    def __init__(self, kind: str, obj: Any, block: ctypes.Array | int) -> None:
        self.kind = kind
        self.obj = obj
        #: The handle's slot in the arena, or its own block when the arena is full.
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
    """Opaque C handles for Python objects: the address of a slot of memory we own.

    Devices, memories, descriptions, clients and topologies are *interned*: one handle per
    object for its life, because callers compare and cache them. Buffers, events, executables and
    errors get a fresh handle each time they are handed out, and the caller destroys each.

    Slots come from one arena (:class:`~.._native.Arena`), whose pages the system commits only
    when touched, so that native code can tell our handles from anything else by address alone.
    A slot's word 0 is the vtable a caller may read; words 1-5 hold answers the native fast paths
    give without Python (:meth:`memo`). Past the arena's last slot, handles are blocks of their
    own, answered by Python only.
    """

    def __init__(self, plugin: str, slots: int = ARENA_SLOTS) -> None:
        self.plugin = plugin
        self.entries: dict[int, _Entry] = {}
        self.interned: dict[tuple[str, int], int] = {}
        self.lock = threading.Lock()
        self._memory = mmap.mmap(-1, slots * SLOT_BYTES, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
        self.words = memoryview(self._memory).cast("Q")
        self.arena = Arena(ctypes.addressof(ctypes.c_char.from_buffer(self._memory)), slots)
        self._free: list[int] = []
        self._unused = iter(range(slots))  # next() on it is atomic: no lock to hand out a slot

    def new(self, kind: str, obj: Any, vtable: int = 0) -> int:
        try:
            slot = self._free.pop()
        except IndexError:
            slot = next(self._unused, -1)
        if slot < 0:
            block = (ctypes.c_void_p * SLOT_WORDS)(vtable or None)
            handle = ctypes.addressof(block)
            self.entries[handle] = _Entry(kind, obj, block)
            return handle
        word = slot * SLOT_WORDS
        self.words[word] = vtable
        self.words[word + 1] = 0
        handle = self.arena.base + slot * SLOT_BYTES
        self.entries[handle] = _Entry(kind, obj, slot)
        return handle

    def memo(self, handle: int, tag: int, *answers: int) -> None:
        """Let the native fast paths answer for ``handle`` from now on with ``answers``."""
        entry = self.entries.get(handle)
        if entry is None or not isinstance(entry.block, int):
            return
        word = entry.block * SLOT_WORDS
        words = self.words
        for i, value in enumerate(answers):
            words[word + 2 + i] = value & _U64
        words[word + 1] = tag  # last: a reader on another thread sees the tag only with the answers

    def forget(self, handle: int) -> None:
        """Stop the fast paths answering for ``handle`` (its state changed)."""
        entry = self.entries.get(handle)
        if entry is not None and isinstance(entry.block, int):
            self.words[entry.block * SLOT_WORDS + 1] = 0

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
            self.release(handle)
            if self.interned.get((kind, id(entry.obj))) == handle:
                del self.interned[(kind, id(entry.obj))]
        return entry.obj

    def release(self, handle: int) -> None:
        """Forget ``handle`` and give its slot back (untagged: a stale handle reaches Python)."""
        entry = self.entries.pop(handle, None)
        if entry is not None and isinstance(entry.block, int):
            self.words[entry.block * SLOT_WORDS + 1] = 0
            self._free.append(entry.block)


_C_TYPE = {
    "client": "PJRT_Client", "device": "PJRT_Device", "memory": "PJRT_Memory",
    "description": "PJRT_DeviceDescription", "topology": "PJRT_TopologyDescription",
    "buffer": "PJRT_Buffer", "event": "PJRT_Event", "executable": "PJRT_Executable",
    "loaded": "PJRT_LoadedExecutable", "error": "PJRT_Error", "context": "PJRT_ExecuteContext",
    "layout": "PJRT_Layouts_MemoryLayout", "memory_description": "PJRT_MemoryDescription",
}


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


class _Base:
    """What every group of functions of :class:`~.ServedApi` stands on: the struct, the callbacks,
    the handles, the errors, the native gates and the helpers that read and write Args structs."""

    def __init__(self, api: Api | Callable[[], Api], *, name: str, version: ApiVersion | str | None = None,
                 platform_name: str | None = None, program_reader: ProgramReader | None = None,
                 extensions: Mapping[str, int] | None = None, compile_hook: CompileHook | None = None,
                 device_attribute_hook: AttributeHook | None = None) -> None:
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
        self.device_attribute_hook = device_attribute_hook
        self._api_lock = threading.Lock()
        self._initialized = False
        self._handles = _Handles(name)
        self._keep: list[Any] = []
        self._strings: dict[Any, Any] = {}
        #: Bytes handed out with a deleter (serialized executables, topologies, layouts), by the
        #: handle the caller gives back to the deleter.
        self._serial_keep: dict[int, Any] = {}
        self._serial_deleter = self._deleter(self._serial_keep)
        #: Handles of the events the caller made (``PJRT_Event_Create``): the only ones it may set.
        self._created_events: set[int] = set()
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
        self._gates: DestroyGates | None = None
        #: The handle of an event that is ready without error, handed out for every such event
        #: when the native fast paths are in place (0: they are not).
        self._ready_event = 0
        self._gate_names: list[str] = []
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

    if TYPE_CHECKING:
        # Look-ups one group of functions defines and the others call; ServedApi has them all.
        def _client(self, handle: int, what: str) -> Any: ...
        def _device(self, handle: int, what: str) -> Any: ...
        def _memory(self, handle: int, what: str) -> Any: ...
        def _buffer(self, handle: int, what: str) -> Any: ...
        def _topology(self, handle: int, what: str) -> Any: ...
        def _executable_entry(self, handle: int, what: str) -> _Entry: ...
        def _program(self, address: int, what: str, read: bool = True) -> Program: ...
        def _device_handle(self, device: Any) -> int: ...
        def _memory_handle(self, memory: Any) -> int: ...
        def _loaded_handle(self, loaded: Any, options: bytes) -> int: ...
        def _memo_buffer(self, handle: int, buffer: Any, *, ready: bool) -> tuple[int, int]: ...

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

    def _wrapper(self, c_name: str, handler: Callable[[int], None] | None,
                 unimplemented_because: str | None = None) -> Callable[[int], int | None]:
        calls = self.calls
        make_error = self._make_error
        if handler is None:
            message = unimplemented_because or (f"{c_name} is not implemented by pjrt-hub's PJRT_Api for plugin "
                                                f"{self.name!r} (PJRT API {self.version})")

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
            later = tuple(fn for fn, since in functions if since > version)
            size = _EXTENSION_HEADER + 8 * len(served)
            # The functions of the extension's later versions follow, past struct_size: a caller
            # that reads them without checking the node's size (jaxlib does, for Layouts) then
            # calls a function that answers UNIMPLEMENTED instead of jumping to whatever memory
            # follows the node. A caller that checks sees the plugin's version.
            node = (ctypes.c_char * (size + 8 * len(later)))()
            base = ctypes.addressof(node)
            ctypes.c_size_t.from_address(base).value = size
            ctypes.c_int32.from_address(base + 8).value = int(ExtensionType[name])
            ctypes.c_void_p.from_address(base + 16).value = head or None
            for i, fn_name in enumerate(served):
                location = base + _EXTENSION_HEADER + 8 * i
                ctypes.c_void_p.from_address(location).value = self._callback(fn_name)
                self._locations[fn_name] = location
            for i, fn_name in enumerate(later):
                why = (f"{fn_name} is not in version {version} of the {name} extension that plugin {self.name!r} "
                       "offers (the node's struct_size ends before it)")
                fn = _FN(self._wrapper(fn_name, None, why))
                self._keep.append(fn)
                ctypes.c_void_p.from_address(base + size + 8 * i).value = ctypes.cast(fn, ctypes.c_void_p).value
            self._node_memory.append(node)
            self.extension_nodes.append(_ExtensionNode(name, version, served))
            head = base
        return head

    # -- destroys held back by the native gates -----------------------------------------------

    def _install_gates(self) -> None:
        """Put native gates (:mod:`._native`) in front of the destroy functions and deleters."""
        from pjrt_hub.backends.cpu_runtime import CpuEvent

        from .._native import FastPaths, build_gates

        targets: dict[str, tuple[int, int, bool]] = {}
        for c_name, location in self._locations.items():
            if c_name.endswith("_Destroy") and self.implemented.get(c_name):
                pointer = ctypes.c_void_p.from_address(location).value or 0
                targets[c_name] = (pointer, 16, c_name in _VOID_FUNCTIONS)
        targets["deleter"] = (self._serial_deleter, -1, True)
        fallbacks = {c_name: ctypes.c_void_p.from_address(self._locations[c_name]).value or 0
                     for c_name in _FAST_FUNCTIONS if self.implemented.get(c_name) and c_name not in targets}
        ready = CpuEvent()
        ready.set()
        self._ready_event = self._handles.new("event", ready)
        gates = build_gates(targets, FastPaths(self._handles.arena, self._ready_event, fallbacks))
        if gates is None:
            self._ready_event = 0  # no fast path to answer for it: hand out events as they are
            return
        for c_name, gate in gates.addresses.items():
            if c_name == "deleter":
                self._serial_deleter = gate
            else:
                ctypes.c_void_p.from_address(self._locations[c_name]).value = gate
        self._gate_names = gates.names
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
                message = without_terminal_codes(f"{c_name} of plugin {self.name!r} raised {type(exc).__name__}: "
                                                 f"{exc} (a bug in the plugin or in pjrt-hub's PJRT_Api)")
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
            self._handles.release(error)

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


@dataclass(frozen=True)
class _MemoryDescription:
    kind: str
    kind_id: int
    owner: Any


# -- module helpers ----------------------------------------------------------------------------


_STRUCT_INFO: dict[str, tuple[type[ctypes.Structure], int]] = {}


def _struct_info(name: str) -> tuple[type[ctypes.Structure], int]:
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
        for _first, _last, field_name in spec.stale:
            member = getattr(cls, field_name)
            minimum = min(minimum, member.offset + member.size)
        info = _STRUCT_INFO[name] = (cls, minimum if spec.has_head else 0)
    return info


@functools.lru_cache(maxsize=None)
def _field_end(struct: str, field_name: str) -> int:
    member = getattr(layout(struct).ctype, field_name)
    return member.offset + member.size


@functools.lru_cache(maxsize=None)
def _pointers(count: int) -> type[ctypes.Array[ctypes.c_void_p]]:
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
    """A numpy view of caller memory (no copy). Sub-byte types are one element per byte there, as
    numpy (ml_dtypes) holds them and as XLA's plugins take and give them: packing them is the
    device's business."""
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
        raw = memoryview((ctypes.c_char * extent).from_address(address))
        array = np.frombuffer(raw, dtype=dtype).reshape(tuple(dims))
    else:
        low = sum(min(0, s * (d - 1)) for s, d in zip(byte_strides, dims))
        high = sum(max(0, s * (d - 1)) for s, d in zip(byte_strides, dims)) + dtype.itemsize
        raw = memoryview((ctypes.c_char * (high - low)).from_address(address + low))
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
