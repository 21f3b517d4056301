"""A loaded PJRT plugin library: ``GetPjrtApi``, the ``PJRT_Api`` table, and how to call into it.

:class:`PluginLibrary` reads the bootstrap prefix of ``PJRT_Api`` (struct_size, extension chain,
version), then hands out the plugin's functions by their C name. A function is only handed out when
its slot lies inside the table the plugin reports (``struct_size``), the history places it there
for the plugin's minor, and the pointer is not NULL; anything else raises
:class:`~pjrt_hub.abi.Unimplemented` naming the function, the minor that added it and the plugin's
minor, so a skewed plugin gives an error rather than a jump through garbage.

Also here, because the probe and the bridge both need them: turning a ``PJRT_Error*`` into the
matching :class:`~pjrt_hub.abi.PjrtError` (and destroying it), ``PJRT_NamedValue`` lists in both
directions, and a guarded walk of the extension chain.
"""

from __future__ import annotations

import ctypes
import os
import threading
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Mapping, Sequence

from pjrt_hub.abi import (
    ApiVersion,
    InvalidArgument,
    PjrtError,
    PluginLoadError,
    PluginValidationError,
    Unimplemented,
    error_for_code,
    history,
)
from pjrt_hub.abi.types import ExtensionType

from .structs import layout, struct_size

__all__ = [
    "API_HEADER_SIZE",
    "ExtensionInfo",
    "NamedValueArray",
    "PluginLibrary",
    "decode_named_values",
    "encode_named_values",
    "open_library",
    "walk_extensions",
]

#: Bytes before the first function pointer of ``PJRT_Api``: struct_size, extension_start and the
#: 24-byte ``PJRT_Api_Version`` (struct_size, extension_start, major, minor).
API_HEADER_SIZE = 40
#: ``PJRT_Extension_Base`` gained a leading ``struct_size`` at 0.45 ("breaking change").
EXTENSION_STRUCT_SIZE_SINCE = 45
#: ``PJRT_Api.extension_start`` was ``void* priv`` (no chain) before 0.31.
EXTENSION_CHAIN_SINCE = 31
#: Limits for a walk of plugin-provided memory: more than this is garbage, not a table.
MAX_SLOTS = 4096
MAX_EXTENSIONS = 64
MAX_EXTENSION_SIZE = 1 << 16
MAX_NAMED_VALUES = 4096
MAX_STRING = 1 << 20
NAMED_VALUE_STRIDE = 56  # sizeof(PJRT_NamedValue): unchanged since the struct exists

_FN = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p)
_VOID_FN = ctypes.CFUNCTYPE(None, ctypes.c_void_p)

_OPEN_LOCK = threading.Lock()
_OPENED: dict[str, "PluginLibrary"] = {}


def default_plugin_name(path: str) -> str:
    """``xla_cpu_pjrt`` for ``.../xla_cpu_pjrt.so``, ``tt`` for ``libtt.so``."""
    base = os.path.basename(path)
    stem = base.split(".so")[0]
    return stem[3:] if stem.startswith("lib") and len(stem) > 3 else stem


# -- reading plugin memory -------------------------------------------------------------------


class _Maps:
    """Readable address ranges of this process, to vet pointers before following them."""

    def __init__(self) -> None:
        self.ranges: list[tuple[int, int]] | None = None
        try:
            with open("/proc/self/maps") as fh:
                ranges = []
                for line in fh:
                    span, perms = line.split()[:2]
                    if perms[0] == "r":
                        lo, hi = span.split("-")
                        ranges.append((int(lo, 16), int(hi, 16)))
            self.ranges = ranges
        except OSError:  # not Linux: only the cheaper checks apply
            self.ranges = None

    def readable(self, address: int, size: int) -> bool:
        if address < 4096 or size < 0:
            return False
        if self.ranges is None:
            return True
        end = address + size
        for lo, hi in self.ranges:
            if lo <= address and end <= hi:
                return True
        # A struct may straddle two adjacent mappings.
        covered = address
        for lo, hi in sorted(self.ranges):
            if lo <= covered < hi:
                covered = hi
                if covered >= end:
                    return True
        return False


def _read_string(address: int | None, size: int) -> str:
    if not address or size <= 0:
        return ""
    if size > MAX_STRING:
        raise PluginValidationError("plugin", f"string of {size} bytes is implausible")
    return ctypes.string_at(address, size).decode("utf-8", errors="replace")


# -- extensions ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ExtensionInfo:
    """One node of a plugin's extension chain."""

    type: int
    name: str
    #: None for the pre-0.45 node layout ``{type, next}``, which has no struct_size.
    struct_size: int | None
    address: int

    def as_dict(self) -> dict[str, Any]:
        return {"type": self.type, "name": self.name, "struct_size": self.struct_size}


def extension_name(type_id: int) -> str:
    try:
        return ExtensionType(type_id).name
    except ValueError:
        return f"Unknown({type_id})"


def walk_extensions(head: int | None, minor: int) -> tuple[list[ExtensionInfo], str | None]:
    """Follow an extension chain laid out for ``minor``; return the nodes and why it stopped early.

    Every node is vetted before it is read: the address must be mapped and readable for the node's
    header, a cycle or more than :data:`MAX_EXTENSIONS` nodes ends the walk, and a node whose
    struct_size is smaller than its own header ends it too (that is the signature of reading a
    pre-0.45 node with the 0.45 layout).
    """
    if minor < EXTENSION_CHAIN_SINCE or not head:
        return [], None
    maps = _Maps()
    nodes: list[ExtensionInfo] = []
    seen: set[int] = set()
    new_layout = minor >= EXTENSION_STRUCT_SIZE_SINCE
    header = 24 if new_layout else 16
    node: int | None = head
    while node:
        if node in seen:
            return nodes, f"the chain loops back to node {len(nodes)} at {node:#x}"
        if len(nodes) >= MAX_EXTENSIONS:
            return nodes, f"more than {MAX_EXTENSIONS} extensions; the chain is not trusted"
        if node % 8 or not maps.readable(node, header):
            return nodes, f"extension node {len(nodes)} at {node:#x} is not readable memory"
        seen.add(node)
        if new_layout:
            size = ctypes.c_size_t.from_address(node).value
            type_id = ctypes.c_int32.from_address(node + 8).value
            nxt = ctypes.c_void_p.from_address(node + 16).value
            if size < header or size > MAX_EXTENSION_SIZE:
                return nodes, (f"extension node {len(nodes)} has struct_size {size}, which no "
                               f"extension has (pre-0.45 layout read as 0.45?)")
            if not maps.readable(node, size):
                return nodes, f"extension node {len(nodes)} claims {size} bytes that are not mapped"
        else:
            size = None
            type_id = ctypes.c_int32.from_address(node).value
            nxt = ctypes.c_void_p.from_address(node + 8).value
        if not 0 <= type_id < 1 << 16:
            return nodes, f"extension node {len(nodes)} has type id {type_id}, which is garbage"
        nodes.append(ExtensionInfo(type_id, extension_name(type_id), size, node))
        node = nxt
    return nodes, None


# -- named values ----------------------------------------------------------------------------

_NV_STRING, _NV_INT64, _NV_INT64_LIST, _NV_FLOAT, _NV_BOOL = range(5)
#: ``PJRT_NamedValue_kBool`` arrived at 0.30.
NAMED_VALUE_BOOL_SINCE = 30


def decode_named_values(address: int | None, count: int, *, what: str = "attributes",
                        plugin: str = "plugin") -> dict[str, Any]:
    """Read a ``PJRT_NamedValue`` array into a dict (str, int, list of int, float or bool)."""
    if not address or count == 0:
        return {}
    if not 0 < count <= MAX_NAMED_VALUES:
        raise PluginValidationError(plugin, f"{what}: {count} named values is implausible")
    maps = _Maps()
    if not maps.readable(address, count * NAMED_VALUE_STRIDE):
        raise PluginValidationError(plugin, f"{what}: the named value array at {address:#x} is not readable")
    out: dict[str, Any] = {}
    for i in range(count):
        base = address + i * NAMED_VALUE_STRIDE
        name = _read_string(ctypes.c_void_p.from_address(base + 16).value,
                            ctypes.c_size_t.from_address(base + 24).value)
        kind = ctypes.c_int32.from_address(base + 32).value
        size = ctypes.c_size_t.from_address(base + 48).value
        if kind == _NV_STRING:
            value: Any = _read_string(ctypes.c_void_p.from_address(base + 40).value, size)
        elif kind == _NV_INT64:
            value = ctypes.c_int64.from_address(base + 40).value
        elif kind == _NV_INT64_LIST:
            pointer = ctypes.c_void_p.from_address(base + 40).value
            if size > MAX_NAMED_VALUES or (size and not maps.readable(pointer or 0, 8 * size)):
                raise PluginValidationError(plugin, f"{what}: {name!r} points to an unreadable int64 list")
            value = list((ctypes.c_int64 * size).from_address(pointer or 0)) if size else []  # readable: not NULL
        elif kind == _NV_FLOAT:
            value = ctypes.c_float.from_address(base + 40).value
        elif kind == _NV_BOOL:
            value = ctypes.c_bool.from_address(base + 40).value
        else:
            value = f"<PJRT_NamedValue type {kind} unknown to pjrt-hub>"
        out[name] = value
    return out


class NamedValueArray:
    """A ``PJRT_NamedValue`` array built from Python values, with the memory it points to."""

    def __init__(self, values: Mapping[str, Any] | None, *, minor: int, what: str = "create options"):
        values = dict(values or {})
        cls = layout("PJRT_NamedValue").ctype
        self.array = (cls * max(1, len(values)))()
        self._keep: list[Any] = []
        size = struct_size("PJRT_NamedValue", minor)
        for slot, (name, value) in zip(self.array, values.items()):
            if not isinstance(name, str):
                raise InvalidArgument(f"{what}: option names must be str, got {name!r}")
            encoded = name.encode()
            buf = ctypes.create_string_buffer(encoded, len(encoded))
            self._keep.append(buf)
            slot.struct_size = size
            slot.name = ctypes.addressof(buf)
            slot.name_size = len(encoded)
            self._fill(slot, name, value, minor, what)
        self.count = len(values)

    def _fill(self, slot: Any, name: str, value: Any, minor: int, what: str) -> None:
        base = ctypes.addressof(slot)
        if isinstance(value, bool):
            if minor < NAMED_VALUE_BOOL_SINCE:
                raise Unimplemented(f"{what}: {name!r} is a bool, and PJRT_NamedValue_kBool needs "
                                    f"PJRT C API 0.{NAMED_VALUE_BOOL_SINCE}; the plugin implements 0.{minor}")
            slot.type = _NV_BOOL
            ctypes.c_bool.from_address(base + 40).value = value
            slot.value_size = 1
        elif isinstance(value, int):
            slot.type = _NV_INT64
            slot.value = value
            slot.value_size = 1
        elif isinstance(value, float):
            slot.type = _NV_FLOAT
            ctypes.c_float.from_address(base + 40).value = value
            slot.value_size = 1
        elif isinstance(value, str):
            data = value.encode()
            buf = ctypes.create_string_buffer(data, len(data))
            self._keep.append(buf)
            slot.type = _NV_STRING
            ctypes.c_void_p.from_address(base + 40).value = ctypes.addressof(buf)
            slot.value_size = len(data)
        elif isinstance(value, (list, tuple)) and all(isinstance(v, int) and not isinstance(v, bool)
                                                      for v in value):
            arr = (ctypes.c_int64 * max(1, len(value)))(*value)
            self._keep.append(arr)
            slot.type = _NV_INT64_LIST
            ctypes.c_void_p.from_address(base + 40).value = ctypes.addressof(arr)
            slot.value_size = len(value)
        else:
            raise InvalidArgument(f"{what}: {name!r} has a value of type {type(value).__name__}; "
                                  "PJRT_NamedValue holds str, int, float, bool or a list of int")

    @property
    def address(self) -> int:
        return ctypes.addressof(self.array) if self.count else 0


def encode_named_values(values: Mapping[str, Any] | None, *, minor: int,
                        what: str = "create options") -> NamedValueArray:
    return NamedValueArray(values, minor=minor, what=what)


# -- the library -----------------------------------------------------------------------------


class PluginLibrary:
    """A dlopened plugin: its ``PJRT_Api``, its version and its functions by C name."""

    def __init__(self, path: str, name: str | None = None) -> None:
        self.path = os.path.realpath(path)
        self.name = name or default_plugin_name(path)
        try:
            self._dll: ctypes.CDLL | None = ctypes.CDLL(self.path, mode=os.RTLD_LOCAL | os.RTLD_NOW)
        except OSError as exc:
            raise PluginLoadError(self.name, f"cannot load {self.path}: {exc}") from None
        try:
            get_api = self._dll.GetPjrtApi
        except AttributeError:
            raise PluginLoadError(self.name, f"{self.path} does not export GetPjrtApi") from None
        get_api.restype = ctypes.c_void_p
        get_api.argtypes = []
        address = get_api()
        if not address:
            raise PluginLoadError(self.name, f"GetPjrtApi() of {self.path} returned NULL")
        self._read_table(address)

    @classmethod
    def from_address(cls, address: int, name: str, origin: str) -> "PluginLibrary":
        """A ``PJRT_Api`` already in this process (one served by :mod:`.server`), read like one a
        library's ``GetPjrtApi`` returned; ``origin`` stands where a library's path would."""
        lib = cls.__new__(cls)
        lib.path = origin
        lib.name = name
        lib._dll = None
        if not address:
            raise PluginLoadError(name, f"{origin}: the PJRT_Api* is NULL")
        lib._read_table(address)
        return lib

    def _read_table(self, address: int) -> None:
        self.api_address: int = address
        if not _Maps().readable(address, API_HEADER_SIZE):
            raise PluginValidationError(self.name, f"GetPjrtApi() returned {address:#x}, not readable memory")
        self.struct_size: int = ctypes.c_size_t.from_address(address).value
        self.extension_start: int = ctypes.c_void_p.from_address(address + 8).value or 0
        self.version_struct_size: int = ctypes.c_size_t.from_address(address + 16).value
        major = ctypes.c_int32.from_address(address + 32).value
        minor = ctypes.c_int32.from_address(address + 36).value
        if major < 0 or minor < 0 or major > 1000 or minor > 100000:
            raise PluginValidationError(self.name, f"PJRT_Api reports version {major}.{minor}, which is garbage")
        self.version = ApiVersion(major, minor)
        slots, rest = divmod(self.struct_size - API_HEADER_SIZE, 8)
        if self.struct_size < API_HEADER_SIZE or rest or slots > MAX_SLOTS:
            raise PluginValidationError(
                self.name, f"PJRT_Api.struct_size is {self.struct_size}: not {API_HEADER_SIZE} bytes "
                f"of header plus up to {MAX_SLOTS} 8-byte function pointers")
        if not _Maps().readable(address, self.struct_size):
            raise PluginValidationError(self.name, f"PJRT_Api claims {self.struct_size} bytes that are not mapped")
        self.num_slots: int = slots
        table_minor = min(minor, history.NEWEST_KNOWN.minor)
        #: Function names by slot, as the history places them for this minor.
        self.slot_names: tuple[str, ...] = history.function_slots(table_minor)
        self._slot_of = {n: i for i, n in enumerate(self.slot_names)}
        self._functions: dict[str, Callable[[int], int | None]] = {}
        self._arg_types: dict[str, tuple[type[ctypes.Structure], int]] = {}

    # -- introspection ---------------------------------------------------------------------

    @property
    def minor(self) -> int:
        return self.version.minor

    def slot_pointer(self, slot: int) -> int:
        if not 0 <= slot < self.num_slots:
            raise IndexError(f"slot {slot} is outside {self.name}'s {self.num_slots} slots")
        return ctypes.c_void_p.from_address(self.api_address + API_HEADER_SIZE + 8 * slot).value or 0

    def unavailable_reason(self, c_function: str) -> str | None:
        """Why ``c_function`` cannot be called on this plugin, or None when it can."""
        since = history.introduced_in(c_function)
        slot = self._slot_of.get(c_function)
        minor = self.minor
        added = f"added in PJRT C API 0.{since}" if since else "in the PJRT C API"
        if slot is None:
            if since is None:
                return f"{c_function} is not a PJRT_Api function pjrt-hub knows"
            return (f"{c_function} ({added}) is not available: plugin {self.name!r} implements "
                    f"PJRT C API {self.version}")
        if slot >= self.num_slots:
            why = (f"plugin {self.name!r} implements PJRT C API {self.version}" if since and since > minor
                   else f"the PJRT_Api of plugin {self.name!r} (API {self.version}) has {self.num_slots} "
                        f"function slots and it is slot {slot}")
            return f"{c_function} ({added}) is not available: {why}"
        unstable = history.UNSTABLE_SLOT_LAYOUT_MINORS.get(minor)
        if unstable is not None and slot >= unstable:
            return (f"{c_function} is not called: PJRT C API 0.{minor} has no stable PJRT_Api layout "
                    f"after slot {unstable}, so its slot {slot} may hold another function")
        if not self.slot_pointer(slot):
            return f"{c_function} is not implemented by plugin {self.name!r} (its slot is NULL)"
        return None

    def has(self, c_function: str) -> bool:
        return self.unavailable_reason(c_function) is None

    def function(self, c_function: str) -> Callable[[int], int | None]:
        """The plugin's ``PJRT_Error* fn(Args*)`` taking the address of an Args struct."""
        fn = self._functions.get(c_function)
        if fn is not None:
            return fn
        reason = self.unavailable_reason(c_function)
        if reason is not None:
            raise Unimplemented(reason, plugin=self.name)
        fn = _FN(self.slot_pointer(self._slot_of[c_function]))
        self._functions[c_function] = fn
        return fn

    # -- args and calls --------------------------------------------------------------------

    def args(self, struct_name: str, **fields: Any) -> ctypes.Structure:
        """A fresh Args struct sized for this plugin's minor, with ``fields`` set."""
        known = self._arg_types.get(struct_name)
        if known is None:
            known = self._arg_types[struct_name] = (layout(struct_name).ctype,
                                                    struct_size(struct_name, self.minor))
        cls, size = known
        return cls(struct_size=size, **fields)

    def call(self, c_function: str, args: ctypes.Structure) -> ctypes.Structure:
        """Call ``c_function`` with ``args``; raise the plugin's error as a PjrtError."""
        err = self.function(c_function)(ctypes.addressof(args))
        if err:
            raise self.error(err, c_function)
        return args

    def call_void(self, c_function: str, args: ctypes.Structure) -> None:
        """The few functions that return nothing (``PJRT_Error_Destroy``, ``PJRT_Error_Message``)."""
        self.function(c_function)(ctypes.addressof(args))

    def error(self, err: int, c_function: str | None = None) -> PjrtError:
        """Turn a ``PJRT_Error*`` into the matching PjrtError, destroying the C error."""
        code_args = self.args("PJRT_Error_GetCode_Args", error=err)
        code_fn = self.function("PJRT_Error_GetCode")
        inner = code_fn(ctypes.addressof(code_args))
        code = code_args.code if not inner else 2  # UNKNOWN if even the code cannot be read
        if inner:
            self.destroy_error(inner)
        msg_args = self.args("PJRT_Error_Message_Args", error=err)
        self.call_void("PJRT_Error_Message", msg_args)
        message = _read_string(msg_args.message, msg_args.message_size)
        self.destroy_error(err)
        exc = error_for_code(code, message, plugin=self.name)
        exc.c_function = c_function
        if c_function:
            exc.add_note(f"from {c_function} of plugin {self.name!r} (PJRT C API {self.version})")
        if "size: expected" in message and message.startswith("Unexpected "):
            exc.add_note(f"pjrt-hub sized the struct for PJRT C API {self.version} from headers up to "
                         f"0.{history.NEWEST_HEADER}; this is a bug in pjrt-hub's struct table or a "
                         f"plugin newer than it knows")
        return exc

    def destroy_error(self, err: int) -> None:
        self.call_void("PJRT_Error_Destroy", self.args("PJRT_Error_Destroy_Args", error=err))

    def check(self, err: int | None, c_function: str) -> None:
        if err:
            raise self.error(err, c_function)

    # -- bootstrap data --------------------------------------------------------------------

    def extensions(self) -> tuple[list[ExtensionInfo], str | None]:
        return walk_extensions(self.extension_start, self.minor)

    def plugin_attributes(self) -> dict[str, Any]:
        args = self.args("PJRT_Plugin_Attributes_Args")
        self.call("PJRT_Plugin_Attributes", args)
        return decode_named_values(args.attributes, args.num_attributes, what="PJRT_Plugin_Attributes",
                                   plugin=self.name)

    def __repr__(self) -> str:
        return f"<PluginLibrary {self.name!r} API {self.version} {self.num_slots} slots at {self.path}>"


def open_library(path: str, name: str | None = None) -> PluginLibrary:
    """Load a plugin library once per real path (a PJRT plugin is never unloaded)."""
    real = os.path.realpath(path)
    with _OPEN_LOCK:
        lib = _OPENED.get(real)
        if lib is None:
            lib = PluginLibrary(real, name)
            _OPENED[real] = lib
        return lib


def read_string(address: int | None, size: int) -> str:
    """A UTF-8 string the plugin returned as pointer and size."""
    return _read_string(address, size)


def read_pointers(address: int | None, count: int) -> list[int]:
    if not address or count <= 0:
        return []
    return [p or 0 for p in (ctypes.c_void_p * count).from_address(address)]


def pointer_array(values: Sequence[int] | Iterable[int]) -> ctypes.Array:
    values = list(values)
    return (ctypes.c_void_p * max(1, len(values)))(*values)


def void_fn(address: int) -> Callable[[int], None]:
    """A ``void fn(void*)`` the plugin handed out (deleters)."""
    return _VOID_FN(address)


def unpack_int64s(address: int | None, count: int) -> tuple[int, ...]:
    if not address or count <= 0:
        return ()
    return tuple((ctypes.c_int64 * count).from_address(address))

