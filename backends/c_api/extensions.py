"""The extensions of a C plugin, served through the protocols of :mod:`pjrt_hub.extensions`.

An extension node is a struct of function pointers after a ``PJRT_Extension_Base`` header, and
its ``struct_size`` says how many of them the plugin's build has. A wrapper reads a pointer only
when the node covers it and calls it only when it is not NULL; anything else raises
:class:`~pjrt_hub.abi.Unimplemented` naming the function, where it lies and the node's size. A node
of the pre-0.45 layout (no ``struct_size``) is never called into.

Layouts, MemoryDescriptions and FFI are wrapped; every other node is an :class:`CExtension`, data
only. Some Args structs of the FFI extension changed layout while the extension kept its version
and node size; where it matters, the wrapper asks the plugin which size it checks for (a plugin
answers a ``struct_size`` of 1 with "expected N" before reading anything else) and picks the
layout of that size.
"""

from __future__ import annotations

import _ctypes
import ctypes
import re
import threading
from typing import Any, Callable, ClassVar, Mapping, Sequence

from pjrt_hub.abi import BufferType, InvalidArgument, PluginValidationError, Unimplemented
from pjrt_hub.extensions import (
    MemoryLayout,
    extension_spec,
    version_from_struct_size,
)

from .library import ExtensionInfo, PluginLibrary, read_pointers, read_string, void_fn
from .structs import SLACK, struct_size

__all__ = [
    "COMBINE_DIMENSION",
    "CExtension",
    "CFfiExtension",
    "CLayoutsExtension",
    "CMemoryDescriptionsExtension",
    "format_xla_layout",
    "parse_xla_layout",
    "wrap_extension",
]

_FN = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p)
#: Bytes of ``PJRT_Extension_Base`` (struct_size, type, next) before the first function pointer.
EXTENSION_HEADER_SIZE = 24
_EXPECTED_SIZE = re.compile(r"Unexpected (\w+) size: expected (\d+), got 1\b")


def _slots(*c_functions: str) -> dict[str, int]:
    """Byte offsets of the function pointers of a node, in the order its header declares them."""
    return {name: EXTENSION_HEADER_SIZE + 8 * i for i, name in enumerate(c_functions)}


def _unwrap(obj: Any) -> Any:
    """The plugin's own object behind the host's version gate (which passes ``unwrapped``)."""
    return getattr(obj, "unwrapped", obj)


class CExtension:
    """One node of a C plugin's extension chain: what it is, and its function pointers by name."""

    #: C name of each function pointer -> its byte offset in the node.
    FUNCTIONS: ClassVar[Mapping[str, int]] = {}

    def __init__(self, lib: PluginLibrary, info: ExtensionInfo) -> None:
        self._lib = lib
        self.info = info
        self._functions: dict[str, Callable[[int], int | None]] = {}
        self._sizes: dict[str, int | None] = {}
        self._lock = threading.Lock()

    # -- what the node is (the fields of ExtensionInfo) -------------------------------------

    @property
    def name(self) -> str:
        return self.info.name

    @property
    def type(self) -> int:
        return self.info.type

    @property
    def struct_size(self) -> int | None:
        return self.info.struct_size

    @property
    def address(self) -> int:
        return self.info.address

    @property
    def version(self) -> int:
        """The extension's version the node's size covers (0: not even version 1)."""
        spec = extension_spec(self.info.type)
        if spec is None or self.info.struct_size is None:
            return 0
        return version_from_struct_size(spec, self.info.struct_size)

    def as_dict(self) -> dict[str, Any]:
        return self.info.as_dict()

    # -- function pointers -----------------------------------------------------------------

    def unavailable_reason(self, c_function: str) -> str | None:
        """Why ``c_function`` of this node cannot be called, or None when it can."""
        offset = self.FUNCTIONS.get(c_function)
        where = f"the {self.name} extension of plugin {self._lib.name!r}"
        if offset is None:
            return f"{c_function} is not a function of {where} that pjrt-hub knows"
        size = self.info.struct_size
        if size is None:
            return (f"{c_function} is not called: {where} has the pre-0.45 node layout, which has no "
                    "struct_size to say which functions it holds")
        if size < offset + 8:
            return (f"{c_function} is not in {where}: its node has struct_size {size}, and the function "
                    f"pointer lies at bytes {offset}-{offset + 8}")
        if not ctypes.c_void_p.from_address(self.info.address + offset).value:
            return f"{c_function} is not implemented by {where} (its pointer is NULL; struct_size {size})"
        return None

    def has(self, c_function: str) -> bool:
        return self.unavailable_reason(c_function) is None

    def function(self, c_function: str) -> Callable[[int], int | None]:
        fn = self._functions.get(c_function)
        if fn is not None:
            return fn
        reason = self.unavailable_reason(c_function)
        if reason is not None:
            raise Unimplemented(reason, plugin=self._lib.name)
        address = ctypes.c_void_p.from_address(self.info.address + self.FUNCTIONS[c_function]).value
        assert address, "unavailable_reason() refuses a NULL function pointer"
        fn = _FN(address)
        self._functions[c_function] = fn
        return fn

    def _call(self, c_function: str, args: ctypes.Structure | ctypes.Array) -> None:
        err = self.function(c_function)(ctypes.addressof(args))
        if err:
            raise self._lib.error(err, c_function)

    def _expected_size(self, c_function: str) -> int | None:
        """The Args ``struct_size`` the plugin checks ``c_function`` against, asked of the plugin.

        The call gets zeroed memory whose ``struct_size`` is 1; a plugin refuses it with
        "Unexpected <Args> size: expected N, got 1" before it reads any other field. None when the
        answer names no size."""
        with self._lock:
            if c_function in self._sizes:
                return self._sizes[c_function]
        fn = self.function(c_function)
        probe = (ctypes.c_char * 256)()
        ctypes.c_size_t.from_buffer(probe).value = 1
        err = fn(ctypes.addressof(probe))
        found = None
        if err:
            match = _EXPECTED_SIZE.search(self._lib.error(err, c_function).message)
            found = int(match.group(2)) if match else None
        with self._lock:
            self._sizes[c_function] = found
        return found

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name} struct_size={self.struct_size} of {self._lib.name}>"


# -- Layouts ---------------------------------------------------------------------------------

#: XLA's ``Tile::kCombineDimension``: a tile dimension written ``*``, folded into the next one.
COMBINE_DIMENSION = -(1 << 63)
_LAYOUT_TEXT = re.compile(r"\{\s*([0-9,\s]*?)\s*(?::(.*))?\}", re.DOTALL)
_TILE = re.compile(r"\(([0-9*,\s]*)\)")


def parse_xla_layout(text: str) -> MemoryLayout:
    """Read XLA's textual layout (``{1,0}``, ``{1,0:T(8,128)(2,1)}``) as a :class:`MemoryLayout`.

    This is what ``PJRT_Layouts_MemoryLayout_Serialize`` returns for XLA-built plugins. Only the
    dimension order and the tiles are kept; other attributes (element size, memory space, ...)
    are not part of the protocol's value.
    """
    match = _LAYOUT_TEXT.fullmatch(text.strip())
    if match is None:
        raise ValueError(f"{text!r} is not an XLA layout like '{{1,0}}' or '{{1,0:T(8,128)}}'")
    order = tuple(int(x) for x in match.group(1).replace(" ", "").split(",") if x)
    tiles: list[tuple[int, ...]] = []
    attributes = match.group(2) or ""
    start = attributes.find("T(")
    if start >= 0:
        pos = start + 1
        while True:
            tile = _TILE.match(attributes, pos)
            if tile is None:
                break
            dims = [d.strip() for d in tile.group(1).split(",") if d.strip()]
            tiles.append(tuple(COMBINE_DIMENSION if d == "*" else int(d) for d in dims))
            pos = tile.end()
    return MemoryLayout(order, tuple(tiles))


def format_xla_layout(layout: MemoryLayout) -> str:
    """XLA's textual layout of a :class:`MemoryLayout` (``{1,0}``, ``{1,0:T(8,128)}``): the
    inverse of :func:`parse_xla_layout`, what ``PJRT_Layouts_MemoryLayout_Serialize`` hands out."""
    order = ",".join(str(int(d)) for d in layout.minor_to_major)
    if not layout.tiles:
        return "{" + order + "}"
    tiles = "".join("(" + ",".join("*" if d == COMBINE_DIMENSION else str(int(d)) for d in tile) + ")"
                    for tile in layout.tiles)
    return "{" + order + ":T" + tiles + "}"


def _dims_array(dims: Sequence[int], what: str) -> tuple[ctypes.Array, int]:
    try:
        values = [int(d) for d in dims]
    except (TypeError, ValueError):
        raise InvalidArgument(f"{what}: dims must be a sequence of ints, got {dims!r}") from None
    if any(d < 0 for d in values):
        raise InvalidArgument(f"{what}: dims must not be negative, got {values}")
    return (ctypes.c_int64 * max(1, len(values)))(*values), len(values)


class CLayoutsExtension(CExtension):
    """Layouts (``PJRT_Layouts_Extension``): memory layouts of buffers, clients, topologies and
    executables, read back through ``PJRT_Layouts_MemoryLayout_Serialize``."""

    FUNCTIONS = _slots(
        "PJRT_Layouts_MemoryLayout_Destroy",
        "PJRT_Layouts_MemoryLayout_Serialize",
        "PJRT_Layouts_PJRT_Client_GetDefaultLayout",
        "PJRT_Layouts_PJRT_Buffer_MemoryLayout",
        "PJRT_Layouts_PJRT_Topology_GetDefaultLayout",
        "PJRT_Layouts_PJRT_Executable_GetOutputLayouts",
        "PJRT_Layouts_PJRT_Executable_GetParameterLayouts",
    )

    def _need(self, *c_functions: str) -> None:
        # Every function a method uses is checked before the first call, so that a node too
        # small for one of them never gets a half-done sequence (a layout made, never destroyed).
        for name in c_functions:
            self.function(name)

    def _read(self, layout: int, *, owned: bool) -> MemoryLayout:
        lib = self._lib
        try:
            args = lib.args("PJRT_Layouts_MemoryLayout_Serialize_Args", layout=layout)
            self._call("PJRT_Layouts_MemoryLayout_Serialize", args)
            try:
                text = ctypes.string_at(args.serialized_bytes, args.serialized_bytes_size) \
                    if args.serialized_bytes_size else b""
            finally:
                if args.serialized_layout_deleter and args.serialized_layout:
                    void_fn(args.serialized_layout_deleter)(args.serialized_layout)
        finally:
            if owned:
                self._call("PJRT_Layouts_MemoryLayout_Destroy",
                           lib.args("PJRT_Layouts_MemoryLayout_Destroy_Args", layout=layout))
        try:
            return parse_xla_layout(text.decode("utf-8", errors="replace"))
        except ValueError as exc:
            raise PluginValidationError(lib.name, f"PJRT_Layouts_MemoryLayout_Serialize returned {text[:80]!r}, "
                                        f"which pjrt-hub cannot read: {exc}") from None

    def _default_layout(self, c_function: str, handle_field: str, handle: int, element_type: Any,
                        dims: Sequence[int], what: str) -> MemoryLayout:
        self._need(c_function, "PJRT_Layouts_MemoryLayout_Serialize", "PJRT_Layouts_MemoryLayout_Destroy")
        try:
            kind = BufferType(element_type)
        except ValueError:
            raise InvalidArgument(f"{what}: element_type {element_type!r} is not a PJRT_Buffer_Type") from None
        array, count = _dims_array(dims, what)
        args = self._lib.args(c_function + "_Args", **{handle_field: handle}, type=int(kind),
                              dims=ctypes.addressof(array), num_dims=count)
        self._call(c_function, args)
        return self._read(args.layout, owned=True)

    def buffer_memory_layout(self, buffer: Any) -> MemoryLayout:
        """The layout of the buffer's data on its device."""
        from .buffers import CBuffer

        self._need("PJRT_Layouts_PJRT_Buffer_MemoryLayout", "PJRT_Layouts_MemoryLayout_Serialize",
                   "PJRT_Layouts_MemoryLayout_Destroy")
        buffer = _unwrap(buffer)
        if not isinstance(buffer, CBuffer):
            raise InvalidArgument(f"Layouts.buffer_memory_layout: expected a buffer of plugin {self._lib.name!r}, "
                                  f"got {buffer!r}")
        args = self._lib.args("PJRT_Layouts_PJRT_Buffer_MemoryLayout_Args",
                              buffer=buffer._live("Layouts.buffer_memory_layout"))
        self._call("PJRT_Layouts_PJRT_Buffer_MemoryLayout", args)
        return self._read(args.layout, owned=True)

    def client_default_layout(self, client: Any, element_type: Any, dims: Sequence[int]) -> MemoryLayout:
        """The layout the client gives a new buffer of this element type and shape."""
        from .client import CClient

        self._need("PJRT_Layouts_PJRT_Client_GetDefaultLayout")
        client = _unwrap(client)
        if not isinstance(client, CClient):
            raise InvalidArgument(f"Layouts.client_default_layout: expected a client of plugin "
                                  f"{self._lib.name!r}, got {client!r}")
        return self._default_layout("PJRT_Layouts_PJRT_Client_GetDefaultLayout", "client",
                                    client._live("Layouts.client_default_layout"), element_type, dims,
                                    "Layouts.client_default_layout")

    def topology_default_layout(self, topology: Any, element_type: Any, dims: Sequence[int]) -> MemoryLayout:
        """The layout a topology's compiler gives an array of this element type and shape (a C
        extension function the protocol does not name)."""
        from .client import CTopologyDescription

        self._need("PJRT_Layouts_PJRT_Topology_GetDefaultLayout")
        topology = _unwrap(topology)
        if not isinstance(topology, CTopologyDescription):
            raise InvalidArgument(f"Layouts.topology_default_layout: expected a topology of plugin "
                                  f"{self._lib.name!r}, got {topology!r}")
        return self._default_layout("PJRT_Layouts_PJRT_Topology_GetDefaultLayout", "topology_description",
                                    topology._live("Layouts.topology_default_layout"), element_type, dims,
                                    "Layouts.topology_default_layout")

    def _executable_layouts(self, c_function: str, count_field: str, executable: Any, what: str) -> list[MemoryLayout]:
        from .executables import CExecutable, CLoadedExecutable

        executable = _unwrap(executable)
        self._need(c_function, "PJRT_Layouts_MemoryLayout_Serialize")
        if isinstance(executable, CLoadedExecutable):
            derived = executable.get_executable()
            try:
                return self._executable_layouts(c_function, count_field, derived, what)
            finally:
                derived.destroy()
        if not isinstance(executable, CExecutable):
            raise InvalidArgument(f"{what}: expected an executable of plugin {self._lib.name!r}, got {executable!r}")
        args = self._lib.args(c_function + "_Args", executable=executable._live(what))
        self._call(c_function, args)
        # The layouts belong to the executable (XLA's own C API client never destroys them):
        # they are read at once, while the executable is held here.
        return [self._read(p, owned=False) for p in read_pointers(args.layouts, getattr(args, count_field))]

    def executable_output_layouts(self, executable: Any) -> list[MemoryLayout]:
        """The layout of each output of a compiled program (Layouts version 2)."""
        return self._executable_layouts("PJRT_Layouts_PJRT_Executable_GetOutputLayouts", "num_outputs",
                                        executable, "Layouts.executable_output_layouts")

    def executable_parameter_layouts(self, executable: Any) -> list[MemoryLayout]:
        """The layout each parameter of a compiled program expects (Layouts version 3)."""
        return self._executable_layouts("PJRT_Layouts_PJRT_Executable_GetParameterLayouts", "num_parameters",
                                        executable, "Layouts.executable_parameter_layouts")


# -- MemoryDescriptions ----------------------------------------------------------------------


class CMemoryDescriptionsExtension(CExtension):
    """MemoryDescriptions (``PJRT_MemoryDescriptions_Extension``): the memory kinds of a device
    description, without a client (for ahead-of-time compilation)."""

    FUNCTIONS = _slots("PJRT_DeviceDescription_MemoryDescriptions", "PJRT_MemoryDescription_Kind")

    def memory_descriptions(self, device_description: Any) -> list[tuple[str, int]]:
        """``(kind, kind_id)`` of each memory of the device, the default one first."""
        from .devices import CDeviceDescription

        self.function("PJRT_DeviceDescription_MemoryDescriptions")
        self.function("PJRT_MemoryDescription_Kind")
        description = _unwrap(device_description)
        if not isinstance(description, CDeviceDescription):
            raise InvalidArgument(f"MemoryDescriptions.memory_descriptions: expected a device description of "
                                  f"plugin {self._lib.name!r}, got {description!r}")
        lib = self._lib
        args = lib.args("PJRT_DeviceDescription_MemoryDescriptions_Args",
                        device_description=description._live("MemoryDescriptions.memory_descriptions"))
        self._call("PJRT_DeviceDescription_MemoryDescriptions", args)
        found = []
        for handle in read_pointers(args.memory_descriptions, args.num_memory_descriptions):
            kind = lib.args("PJRT_MemoryDescription_Kind_Args", memory_description=handle)
            self._call("PJRT_MemoryDescription_Kind", kind)
            found.append((read_string(kind.kind, kind.kind_size), int(kind.kind_id)))
        # The plugin lists them "in no particular order" with the default's index (-1, as a
        # size_t, when there is none); the protocol puts the default first.
        default = args.default_memory_index
        if default < len(found):
            found.insert(0, found.pop(default))
        return found


# -- FFI -------------------------------------------------------------------------------------


class _RegisterHandlerTyped(ctypes.Structure):
    """``PJRT_FFI_Register_Handler_Args`` without ``api_version`` (typed XLA FFI handlers only)."""

    _fields_ = [("struct_size", ctypes.c_size_t), ("target_name", ctypes.c_void_p),
                ("target_name_size", ctypes.c_size_t), ("handler", ctypes.c_void_p),
                ("platform_name", ctypes.c_void_p), ("platform_name_size", ctypes.c_size_t),
                ("traits", ctypes.c_uint32), ("_slack", ctypes.c_char * SLACK)]


class _RegisterHandlerVersioned(ctypes.Structure):
    """``PJRT_FFI_Register_Handler_Args`` with ``api_version`` (0: untyped custom call, 1: typed FFI)."""

    _fields_ = [("struct_size", ctypes.c_size_t), ("target_name", ctypes.c_void_p),
                ("target_name_size", ctypes.c_size_t), ("api_version", ctypes.c_int32),
                ("handler", ctypes.c_void_p), ("platform_name", ctypes.c_void_p),
                ("platform_name_size", ctypes.c_size_t), ("traits", ctypes.c_uint32),
                ("_slack", ctypes.c_char * SLACK)]


def _end_of(cls: type[ctypes.Structure], field: str) -> int:
    member = getattr(cls, field)
    return member.offset + member.size


_REGISTER_HANDLER_LAYOUTS = {_end_of(cls, "traits"): cls for cls in (_RegisterHandlerTyped, _RegisterHandlerVersioned)}
#: ``PJRT_FFI_UserData_Add_Args`` up to ``user_data.data``: the layout without a deleter.
_USER_DATA_WITHOUT_DELETER = 40
#: XLA's FFI API version for typed handlers (``XLA_FFI_Handler*``).
TYPED_FFI = 1
#: ctypes callbacks handed to plugins as handlers: the plugin keeps the pointer for good.
_REGISTERED_CALLBACKS: list[Any] = []


class _TypeInfo(ctypes.Structure):
    """``PJRT_FFI_Type_Info``: deleter, serialize, deserialize; all NULL here."""

    _fields_ = [("deleter", ctypes.c_void_p), ("serialize", ctypes.c_void_p), ("deserialize", ctypes.c_void_p)]


_NO_TYPE_INFO = _TypeInfo()


def _c_pointer(value: Any, what: str) -> tuple[int, Any]:
    """An address from an int, None, a ctypes object or function; and what must stay alive."""
    if value is None:
        return 0, None
    if isinstance(value, bool):
        raise InvalidArgument(f"{what}: expected an address, a ctypes object or None, got {value!r}")
    if isinstance(value, int):
        if not 0 <= value < 1 << 64:
            raise InvalidArgument(f"{what}: {value:#x} is not an address")
        return value, None
    if isinstance(value, _ctypes.CFuncPtr):  # ctypes' function pointer base (ctypes._CFuncPtr)
        return ctypes.cast(value, ctypes.c_void_p).value or 0, value
    try:
        return ctypes.addressof(value), value
    except TypeError:
        raise InvalidArgument(f"{what}: expected an address (int), a ctypes object or None, "
                              f"got {type(value).__name__}") from None


def _utf8(text: Any, what: str) -> ctypes.Array:
    if not isinstance(text, str):
        raise InvalidArgument(f"{what}: expected str, got {type(text).__name__}")
    data = text.encode()
    return ctypes.create_string_buffer(data, max(1, len(data)))


class CFfiExtension(CExtension):
    """FFI (``PJRT_FFI_Extension``): XLA FFI types, user data for an execution, custom-call handlers.

    These hand C things to the plugin, so the protocol's arguments are C things here:
    ``user_data_add`` takes a :class:`~pjrt_hub.backends.c_api.CExecuteContext` and a pointer
    (an address or a ctypes object, kept alive as long as the context), ``register_handler`` the
    address of an ``XLA_FFI_Handler`` (a C function; a ctypes callback is kept alive for good,
    because the plugin never lets go of it).
    """

    FUNCTIONS = _slots("PJRT_FFI_Type_Register", "PJRT_FFI_UserData_Add", "PJRT_FFI_Register_Handler")

    def type_id_register(self, name: str, type_id: int = 0) -> int:
        """Register an FFI type by name and return its id; ``type_id`` 0 lets the plugin pick one,
        another value registers the name under that id."""
        self.function("PJRT_FFI_Type_Register")
        buf = _utf8(name, "FFI.type_id_register: name")
        if not name:
            raise InvalidArgument("FFI.type_id_register: the type name is empty")
        args = self._lib.args("PJRT_FFI_Type_Register_Args", type_name=ctypes.addressof(buf),
                              type_name_size=len(name.encode()), type_id=int(type_id),
                              type_info=ctypes.addressof(_NO_TYPE_INFO))
        self._call("PJRT_FFI_Type_Register", args)
        return int(args.type_id)

    def user_data_add(self, context: Any, type_id: int, data: Any, deleter: Any = None) -> None:
        """Attach ``data`` (a pointer) under ``type_id`` to an execute context, for the FFI handlers
        of executions run with it. ``deleter`` (a ``void(void*)`` address) runs when the context is
        destroyed, where the plugin's layout has one."""
        from .executables import CExecuteContext

        self.function("PJRT_FFI_UserData_Add")
        context = _unwrap(context)
        if not isinstance(context, CExecuteContext):
            raise InvalidArgument(f"FFI.user_data_add: expected an execute context of plugin {self._lib.name!r} "
                                  f"(CApi.execute_context_create()), got {context!r}")
        address, keep = _c_pointer(data, "FFI.user_data_add: data")
        deleter_address, deleter_keep = _c_pointer(deleter, "FFI.user_data_add: deleter")
        size = struct_size("PJRT_FFI_UserData_Add_Args", self._lib.minor)
        if deleter_address:
            expected = self._expected_size("PJRT_FFI_UserData_Add")
            if expected is not None and expected <= _USER_DATA_WITHOUT_DELETER:
                raise Unimplemented(f"FFI.user_data_add: plugin {self._lib.name!r} takes no deleter for user "
                                    f"data (its PJRT_FFI_UserData_Add_Args are {expected} bytes)",
                                    plugin=self._lib.name)
        args = self._lib.args("PJRT_FFI_UserData_Add_Args", context=context._live("FFI.user_data_add"),
                              user_data_type_id=int(type_id), user_data_data=address or None,
                              user_data_deleter=deleter_address or None)
        args.struct_size = size
        self._call("PJRT_FFI_UserData_Add", args)
        context._hold(keep, deleter_keep)

    def register_handler(self, target_name: str, platform_name: str, handler: Any, *, traits: int = 0) -> None:
        """Register ``handler``, the address of an ``XLA_FFI_Handler``, as the custom-call target
        ``target_name`` of ``platform_name`` (``"cpu"``, ``"CUDA"``, ...)."""
        self.function("PJRT_FFI_Register_Handler")
        address, keep = _c_pointer(handler, "FFI.register_handler: handler")
        if not address:
            raise InvalidArgument("FFI.register_handler: handler is NULL; pass the address of an XLA_FFI_Handler")
        name_buf = _utf8(target_name, "FFI.register_handler: target_name")
        platform_buf = _utf8(platform_name, "FFI.register_handler: platform_name")
        if not target_name or not platform_name:
            raise InvalidArgument(f"FFI.register_handler: target_name {target_name!r} and platform_name "
                                  f"{platform_name!r} must not be empty")
        expected = self._expected_size("PJRT_FFI_Register_Handler")
        layout = _REGISTER_HANDLER_LAYOUTS.get(expected or 0)
        if layout is None:
            known = ", ".join(str(s) for s in sorted(_REGISTER_HANDLER_LAYOUTS))
            size = expected if expected is not None else "an unstated number of"
            raise Unimplemented(f"FFI.register_handler: plugin {self._lib.name!r} expects "
                                f"PJRT_FFI_Register_Handler_Args of {size} bytes; pjrt-hub knows the layouts "
                                f"of {known} bytes", plugin=self._lib.name)
        args = layout(struct_size=expected, target_name=ctypes.addressof(name_buf),
                      target_name_size=len(target_name.encode()), handler=address,
                      platform_name=ctypes.addressof(platform_buf),
                      platform_name_size=len(platform_name.encode()), traits=int(traits))
        if layout is _RegisterHandlerVersioned:
            args.api_version = TYPED_FFI
        self._call("PJRT_FFI_Register_Handler", args)
        if keep is not None:
            _REGISTERED_CALLBACKS.append(keep)


_WRAPPERS: dict[str, type[CExtension]] = {
    "Layouts": CLayoutsExtension,
    "MemoryDescriptions": CMemoryDescriptionsExtension,
    "FFI": CFfiExtension,
}


def wrap_extension(lib: PluginLibrary, info: ExtensionInfo) -> CExtension:
    """The wrapper of one node: the protocol's implementation where pjrt-hub has one."""
    return _WRAPPERS.get(info.name, CExtension)(lib, info)
