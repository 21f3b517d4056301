"""The binding classes of :mod:`pjrt_hub.abi.binding` implemented over a real PJRT C plugin.

Each class wraps one C handle. Ownership follows the header: what a ``*_Create``, ``Compile``,
``BufferFromHostBuffer``, ``Execute``, ``GetExecutable`` or ``ReadyEvent`` call returns is ours
to destroy; devices, memories, descriptions and a client's topology belong to the client and are
only borrowed. Every owned handle is registered with its client (:class:`_Owner`), so that
destroying the client first destroys what still lives of its buffers, executables and events, in
that order, whatever order Python's garbage collector picks; a handle is destroyed exactly once.

Host memory the plugin may still read or write is kept alive by the bridge: a host array given
with ``IMMUTABLE_UNTIL_TRANSFER_COMPLETES`` until ``done_with_host_buffer`` fires, a zero-copy
array for the whole life of its buffer, and a ``to_host_buffer`` destination until the copy is
done. The release rides on ``PJRT_Event_OnReady`` through one static ctypes trampoline, so no
per-call callback object has to outlive anything.

Calls the plugin's minor lacks raise :class:`~pjrt_hub.abi.Unimplemented` from
:meth:`.library.PluginLibrary.function`, before any struct is touched.
"""

from __future__ import annotations

import atexit
import ctypes
import itertools
import logging
import threading
import time
import weakref
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from pjrt_hub.abi import (
    Api,
    ApiVersion,
    Buffer,
    BufferType,
    Client,
    CompiledMemoryStats,
    CompileError,
    CompileOptions,
    DeadlineExceeded,
    Device,
    DeviceDescription,
    ErrorCode,
    Event,
    Executable,
    ExecuteOptions,
    ExecuteResult,
    FailedPrecondition,
    HostBufferSemantics,
    HostTransfer,
    InvalidArgument,
    LoadedExecutable,
    Memory,
    MemoryStats,
    NamedValues,
    PjrtError,
    Program,
    ToHost,
    TopologyDescription,
    Unimplemented,
    decode_compile_options,
    encode_compile_options,
    from_numpy_dtype,
    to_numpy_dtype,
)

from .library import (
    ExtensionInfo,
    PluginLibrary,
    decode_named_values,
    encode_named_values,
    open_library,
    pointer_array,
    read_pointers,
    read_string,
    unpack_int64s,
    void_fn,
)
from .structs import layout, struct_size

__all__ = [
    "CApi",
    "CBuffer",
    "CClient",
    "CDevice",
    "CDeviceDescription",
    "CEvent",
    "CExecutable",
    "CLoadedExecutable",
    "CMemory",
    "CTopologyDescription",
    "load_api",
]

log = logging.getLogger("pjrt_hub.c_api")

#: ``PJRT_HostBufferSemantics_kMutableZeroCopy`` arrived at 0.48.
MUTABLE_ZERO_COPY_SINCE = 48
#: Element types numpy holds one per byte but PJRT packs (ml_dtypes int4 and friends).
_PACKED = {BufferType.S4, BufferType.U4, BufferType.S2, BufferType.U2, BufferType.F4E2M1FN}


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
                    raise DeadlineExceeded(f"event not ready after {timeout:g} s", plugin=self._lib.name)
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
        callback(None)


def _event(lib: PluginLibrary, handle: int | None, owner: _Owner | None) -> Event:
    return CEvent(lib, handle, owner) if handle else _DoneEvent()


# -- descriptions, memories, devices ---------------------------------------------------------


def _string_query(lib: PluginLibrary, fn: str, handle_field: str, handle: int,
                  out: str, out_size: str) -> str:
    args = lib.args(fn + "_Args", **{handle_field: handle})
    lib.call(fn, args)
    return read_string(getattr(args, out), getattr(args, out_size))


def _int_query(lib: PluginLibrary, fn: str, handle_field: str, handle: int, out: str) -> int:
    args = lib.args(fn + "_Args", **{handle_field: handle})
    lib.call(fn, args)
    return getattr(args, out)


class CDeviceDescription(DeviceDescription):
    """``PJRT_DeviceDescription``: borrowed from a device or a topology."""

    __slots__ = ("_lib", "_handle", "_owner")

    def __init__(self, lib: PluginLibrary, handle: int, owner: Any) -> None:
        self._lib, self._handle, self._owner = lib, handle, owner

    def id(self) -> int:
        return _int_query(self._lib, "PJRT_DeviceDescription_Id", "device_description", self._handle, "id")

    def process_index(self) -> int:
        return _int_query(self._lib, "PJRT_DeviceDescription_ProcessIndex", "device_description",
                          self._handle, "process_index")

    def attributes(self) -> dict[str, Any]:
        args = self._lib.args("PJRT_DeviceDescription_Attributes_Args", device_description=self._handle)
        self._lib.call("PJRT_DeviceDescription_Attributes", args)
        return decode_named_values(args.attributes, args.num_attributes,
                                   what="PJRT_DeviceDescription_Attributes", plugin=self._lib.name)

    def kind(self) -> str:
        return _string_query(self._lib, "PJRT_DeviceDescription_Kind", "device_description", self._handle,
                             "device_kind", "device_kind_size")

    def debug_string(self) -> str:
        return _string_query(self._lib, "PJRT_DeviceDescription_DebugString", "device_description",
                             self._handle, "debug_string", "debug_string_size")

    def to_string(self) -> str:
        return _string_query(self._lib, "PJRT_DeviceDescription_ToString", "device_description",
                             self._handle, "to_string", "to_string_size")

    def __repr__(self) -> str:
        return f"<CDeviceDescription {self._handle:#x}>"


class CMemory(Memory):
    """``PJRT_Memory``: owned by the client."""

    __slots__ = ("_client", "_handle")

    def __init__(self, client: "CClient", handle: int) -> None:
        self._client, self._handle = client, handle

    @property
    def handle(self) -> int:
        return self._handle

    def id(self) -> int:
        return _int_query(self._client._lib, "PJRT_Memory_Id", "memory", self._handle, "id")

    def kind(self) -> str:
        return _string_query(self._client._lib, "PJRT_Memory_Kind", "memory", self._handle, "kind", "kind_size")

    def kind_id(self) -> int:
        return _int_query(self._client._lib, "PJRT_Memory_Kind_Id", "memory", self._handle, "kind_id")

    def debug_string(self) -> str:
        return _string_query(self._client._lib, "PJRT_Memory_DebugString", "memory", self._handle,
                             "debug_string", "debug_string_size")

    def to_string(self) -> str:
        return _string_query(self._client._lib, "PJRT_Memory_ToString", "memory", self._handle,
                             "to_string", "to_string_size")

    def addressable_by_devices(self) -> list[Device]:
        lib = self._client._lib
        args = lib.args("PJRT_Memory_AddressableByDevices_Args", memory=self._handle)
        lib.call("PJRT_Memory_AddressableByDevices", args)
        return [self._client._device(h) for h in read_pointers(args.devices, args.num_devices)]

    def __eq__(self, other: object) -> bool:
        return isinstance(other, CMemory) and other._handle == self._handle

    def __hash__(self) -> int:
        return hash(self._handle)

    def __repr__(self) -> str:
        return f"<CMemory {self._handle:#x}>"


class CDevice(Device):
    """``PJRT_Device``: owned by the client."""

    __slots__ = ("_client", "_handle")

    def __init__(self, client: "CClient", handle: int) -> None:
        self._client, self._handle = client, handle

    @property
    def handle(self) -> int:
        return self._handle

    def get_description(self) -> CDeviceDescription:
        lib = self._client._lib
        desc = _int_query(lib, "PJRT_Device_GetDescription", "device", self._handle, "device_description")
        return CDeviceDescription(lib, desc, self._client)

    def is_addressable(self) -> bool:
        return bool(_int_query(self._client._lib, "PJRT_Device_IsAddressable", "device", self._handle,
                               "is_addressable"))

    def local_hardware_id(self) -> int:
        return _int_query(self._client._lib, "PJRT_Device_LocalHardwareId", "device", self._handle,
                          "local_hardware_id")

    def addressable_memories(self) -> list[Memory]:
        lib = self._client._lib
        args = lib.args("PJRT_Device_AddressableMemories_Args", device=self._handle)
        lib.call("PJRT_Device_AddressableMemories", args)
        return [self._client._memory(h) for h in read_pointers(args.memories, args.num_memories)]

    def default_memory(self) -> Memory:
        lib = self._client._lib
        return self._client._memory(_int_query(lib, "PJRT_Device_DefaultMemory", "device", self._handle, "memory"))

    def memory_stats(self) -> MemoryStats:
        lib = self._client._lib
        args = lib.args("PJRT_Device_MemoryStats_Args", device=self._handle)
        lib.call("PJRT_Device_MemoryStats", args)

        def opt(name: str) -> int | None:
            return getattr(args, name) if getattr(args, name + "_is_set") else None

        return MemoryStats(
            bytes_in_use=args.bytes_in_use, peak_bytes_in_use=opt("peak_bytes_in_use"),
            num_allocs=opt("num_allocs"), largest_alloc_size=opt("largest_alloc_size"),
            bytes_limit=opt("bytes_limit"), bytes_reserved=opt("bytes_reserved"),
            peak_bytes_reserved=opt("peak_bytes_reserved"),
            largest_free_block_bytes=opt("largest_free_block_bytes"), pool_bytes=opt("pool_bytes"),
            peak_pool_bytes=opt("peak_pool_bytes"))

    def get_attributes(self) -> dict[str, Any]:
        lib = self._client._lib
        args = lib.args("PJRT_Device_GetAttributes_Args", device=self._handle)
        lib.call("PJRT_Device_GetAttributes", args)
        try:
            return decode_named_values(args.attributes, args.num_attributes,
                                       what="PJRT_Device_GetAttributes", plugin=lib.name)
        finally:
            if args.attributes_deleter and args.device_attributes:
                void_fn(args.attributes_deleter)(args.device_attributes)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, CDevice) and other._handle == self._handle

    def __hash__(self) -> int:
        return hash(self._handle)

    def __repr__(self) -> str:
        return f"<CDevice {self._handle:#x} of {self._client._lib.name}>"


# -- buffers ---------------------------------------------------------------------------------


class _RowMajorLayout:
    """A ``PJRT_Buffer_MemoryLayout`` asking for dense row-major data (what numpy holds)."""

    def __init__(self, lib: PluginLibrary, ndim: int) -> None:
        self.minor_to_major = (ctypes.c_int64 * max(1, ndim))(*range(ndim - 1, -1, -1))
        self.struct = lib.args("PJRT_Buffer_MemoryLayout", type=0)
        self.struct.tiled_struct_size = 56
        self.struct.minor_to_major = ctypes.addressof(self.minor_to_major)
        self.struct.minor_to_major_size = ndim


class CBuffer(_Handle, Buffer):
    """``PJRT_Buffer``: owned; destroyed with the object or its client."""

    __slots__ = ("_client", "_host")

    def __init__(self, client: "CClient", handle: int, host: Any = None) -> None:
        self._client = client
        self._owned = _Owned(client._lib, handle, "PJRT_Buffer_Destroy", "PJRT_Buffer_Destroy_Args",
                             "buffer", client._owner, 0)
        #: A zero-copy host array the buffer may alias.
        self._host = host

    def _query(self, fn: str, out: str) -> Any:
        lib = self._client._lib
        args = lib.args(fn + "_Args", buffer=self._live(fn))
        lib.call(fn, args)
        return getattr(args, out)

    def element_type(self) -> BufferType:
        return BufferType(self._query("PJRT_Buffer_ElementType", "type"))

    def dimensions(self) -> tuple[int, ...]:
        lib = self._client._lib
        args = lib.args("PJRT_Buffer_Dimensions_Args", buffer=self._live("dimensions"))
        lib.call("PJRT_Buffer_Dimensions", args)
        return unpack_int64s(args.dims, args.num_dims)

    def unpadded_dimensions(self) -> tuple[int, ...]:
        lib = self._client._lib
        args = lib.args("PJRT_Buffer_UnpaddedDimensions_Args", buffer=self._live("unpadded_dimensions"))
        lib.call("PJRT_Buffer_UnpaddedDimensions", args)
        return unpack_int64s(args.unpadded_dims, args.num_dims)

    def dynamic_dimension_indices(self) -> tuple[int, ...]:
        lib = self._client._lib
        args = lib.args("PJRT_Buffer_DynamicDimensionIndices_Args",
                        buffer=self._live("dynamic_dimension_indices"))
        lib.call("PJRT_Buffer_DynamicDimensionIndices", args)
        return tuple(int(v) for v in (ctypes.c_size_t * args.num_dynamic_dims).from_address(
            args.dynamic_dim_indices)) if args.num_dynamic_dims else ()

    def on_device_size_in_bytes(self) -> int:
        return self._query("PJRT_Buffer_OnDeviceSizeInBytes", "on_device_size_in_bytes")

    def device(self) -> Device:
        return self._client._device(self._query("PJRT_Buffer_Device", "device"))

    def memory(self) -> Memory:
        return self._client._memory(self._query("PJRT_Buffer_Memory", "memory"))

    def delete(self) -> None:
        lib = self._client._lib
        lib.call("PJRT_Buffer_Delete", lib.args("PJRT_Buffer_Delete_Args", buffer=self._live("delete")))

    def is_deleted(self) -> bool:
        return bool(self._query("PJRT_Buffer_IsDeleted", "is_deleted"))

    def is_on_cpu(self) -> bool:
        return bool(self._query("PJRT_Buffer_IsOnCpu", "is_on_cpu"))

    def unsafe_pointer(self) -> int:
        return self._query("PJRT_Buffer_UnsafePointer", "buffer_pointer") or 0

    def opaque_device_memory_data_pointer(self) -> int:
        return self._query("PJRT_Buffer_OpaqueDeviceMemoryDataPointer", "device_memory_ptr") or 0

    def increase_external_reference_count(self) -> None:
        lib = self._client._lib
        lib.call("PJRT_Buffer_IncreaseExternalReferenceCount",
                 lib.args("PJRT_Buffer_IncreaseExternalReferenceCount_Args",
                          buffer=self._live("increase_external_reference_count")))

    def decrease_external_reference_count(self) -> None:
        lib = self._client._lib
        lib.call("PJRT_Buffer_DecreaseExternalReferenceCount",
                 lib.args("PJRT_Buffer_DecreaseExternalReferenceCount_Args",
                          buffer=self._live("decrease_external_reference_count")))

    def ready_event(self) -> Event:
        return _event(self._client._lib, self._query("PJRT_Buffer_ReadyEvent", "event"), self._client._owner)

    def copy_to_device(self, device: Device) -> "CBuffer":
        lib = self._client._lib
        args = lib.args("PJRT_Buffer_CopyToDevice_Args", buffer=self._live("copy_to_device"),
                        dst_device=_device_handle(device, "copy_to_device", self._client))
        lib.call("PJRT_Buffer_CopyToDevice", args)
        return CBuffer(self._client, args.dst_buffer)

    def copy_to_memory(self, memory: Memory) -> "CBuffer":
        lib = self._client._lib
        if not isinstance(memory, CMemory):
            raise InvalidArgument(f"copy_to_memory: expected a memory of this plugin, got {memory!r}")
        args = lib.args("PJRT_Buffer_CopyToMemory_Args", buffer=self._live("copy_to_memory"),
                        dst_memory=memory.handle)
        lib.call("PJRT_Buffer_CopyToMemory", args)
        return CBuffer(self._client, args.dst_buffer)

    def to_host_buffer(self, dst: np.ndarray | None = None) -> ToHost:
        lib = self._client._lib
        handle = self._live("to_host_buffer")
        kind = self.element_type()
        if kind in _PACKED:
            raise Unimplemented(f"to_host_buffer: {kind.name} is packed below a byte on the device; "
                                "the C bridge does not unpack it", plugin=lib.name)
        dims = self.dimensions()
        dtype = to_numpy_dtype(kind)
        if dst is None:
            dst = np.empty(dims, dtype)
        else:
            if not isinstance(dst, np.ndarray):
                raise InvalidArgument(f"to_host_buffer: dst must be a numpy array, got {type(dst).__name__}")
            if dst.dtype != dtype or tuple(dst.shape) != dims:
                raise InvalidArgument(f"to_host_buffer: dst is {dst.dtype}{list(dst.shape)}, the buffer is "
                                      f"{dtype}{list(dims)}")
            if not (dst.flags.c_contiguous and dst.flags.writeable):
                raise InvalidArgument("to_host_buffer: dst must be C-contiguous and writeable")
        host_layout = _RowMajorLayout(lib, len(dims)) if len(dims) > 1 else None
        args = lib.args("PJRT_Buffer_ToHostBuffer_Args", src=handle, dst=dst.ctypes.data or None,
                        dst_size=dst.nbytes,
                        host_layout=ctypes.addressof(host_layout.struct) if host_layout else None)
        lib.call("PJRT_Buffer_ToHostBuffer", args)
        if args.event:
            _keep_until_ready(lib, args.event, dst, host_layout)
        return ToHost(dst, _event(lib, args.event, self._client._owner))

    def __repr__(self) -> str:
        return f"<CBuffer {self._owned.handle:#x} of {self._client._lib.name}>"


def _device_handle(device: Device | None, what: str, client: "CClient | None" = None) -> int:
    if device is None:
        return 0
    if not isinstance(device, CDevice) or (client is not None and device._client is not client):
        raise InvalidArgument(f"{what}: expected a device of this client, got {device!r}")
    return device.handle


# -- executables -----------------------------------------------------------------------------


class CExecutable(_Handle, Executable):
    """``PJRT_Executable``: owned (from ``GetExecutable`` or ``PJRT_Compile``)."""

    __slots__ = ("_lib", "_client")

    def __init__(self, lib: PluginLibrary, handle: int, client: "CClient | None") -> None:
        self._lib = lib
        self._client = client
        owner = client._owner if client is not None else None
        self._owned = _Owned(lib, handle, "PJRT_Executable_Destroy", "PJRT_Executable_Destroy_Args",
                             "executable", owner, 1)

    def _query(self, fn: str, out: str) -> Any:
        args = self._lib.args(fn + "_Args", executable=self._live(fn))
        self._lib.call(fn, args)
        return getattr(args, out)

    def _string(self, fn: str, out: str) -> str:
        args = self._lib.args(fn + "_Args", executable=self._live(fn))
        self._lib.call(fn, args)
        return read_string(getattr(args, out), getattr(args, out + "_size"))

    def name(self) -> str:
        return self._string("PJRT_Executable_Name", "executable_name")

    def num_replicas(self) -> int:
        return self._query("PJRT_Executable_NumReplicas", "num_replicas")

    def num_partitions(self) -> int:
        return self._query("PJRT_Executable_NumPartitions", "num_partitions")

    def num_outputs(self) -> int:
        return self._query("PJRT_Executable_NumOutputs", "num_outputs")

    def size_of_generated_code_in_bytes(self) -> int:
        return self._query("PJRT_Executable_SizeOfGeneratedCodeInBytes", "size_in_bytes")

    def fingerprint(self) -> str:
        return self._string("PJRT_Executable_Fingerprint", "executable_fingerprint")

    def get_cost_analysis(self) -> dict[str, Any]:
        args = self._lib.args("PJRT_Executable_GetCostAnalysis_Args", executable=self._live("cost analysis"))
        self._lib.call("PJRT_Executable_GetCostAnalysis", args)
        return decode_named_values(args.properties, args.num_properties,
                                   what="PJRT_Executable_GetCostAnalysis", plugin=self._lib.name)

    def output_memory_kinds(self) -> list[str]:
        args = self._lib.args("PJRT_Executable_OutputMemoryKinds_Args",
                              executable=self._live("output_memory_kinds"))
        self._lib.call("PJRT_Executable_OutputMemoryKinds", args)
        kinds = read_pointers(args.memory_kinds, args.num_outputs)
        sizes = (ctypes.c_size_t * args.num_outputs).from_address(args.memory_kind_sizes) \
            if args.num_outputs else ()
        return [read_string(k, s) for k, s in zip(kinds, sizes)]

    def output_element_types(self) -> list[BufferType]:
        args = self._lib.args("PJRT_Executable_OutputElementTypes_Args",
                              executable=self._live("output_element_types"))
        self._lib.call("PJRT_Executable_OutputElementTypes", args)
        if not args.num_output_types:
            return []
        raw = (ctypes.c_int32 * args.num_output_types).from_address(args.output_types)
        return [BufferType(v) for v in raw]

    def output_dimensions(self) -> list[tuple[int, ...]]:
        args = self._lib.args("PJRT_Executable_OutputDimensions_Args",
                              executable=self._live("output_dimensions"))
        self._lib.call("PJRT_Executable_OutputDimensions", args)
        if not args.num_outputs:
            return []
        sizes = list((ctypes.c_size_t * args.num_outputs).from_address(args.dim_sizes))
        flat = unpack_int64s(args.dims, sum(sizes))
        out, pos = [], 0
        for size in sizes:
            out.append(tuple(flat[pos:pos + size]))
            pos += size
        return out

    def get_compiled_memory_stats(self) -> CompiledMemoryStats:
        args = self._lib.args("PJRT_Executable_GetCompiledMemoryStats_Args",
                              executable=self._live("get_compiled_memory_stats"))
        self._lib.call("PJRT_Executable_GetCompiledMemoryStats", args)
        known = {f.name for f in layout("PJRT_Executable_GetCompiledMemoryStats_Args").fields
                 if f.since <= self._lib.minor}
        values = {name: getattr(args, name) for name in CompiledMemoryStats.__dataclass_fields__
                  if name in known}
        return CompiledMemoryStats(**values)

    def optimized_program(self) -> Program:
        lib = self._lib
        program = lib.args("PJRT_Program")
        args = lib.args("PJRT_Executable_OptimizedProgram_Args", executable=self._live("optimized_program"),
                        program=ctypes.addressof(program))
        lib.call("PJRT_Executable_OptimizedProgram", args)
        code = ctypes.create_string_buffer(max(1, program.code_size))
        program.code = ctypes.addressof(code)
        lib.call("PJRT_Executable_OptimizedProgram", args)
        fmt = read_string(program.format, program.format_size) or "hlo"
        return Program(code.raw[:program.code_size], fmt)

    def serialize(self) -> bytes:
        args = self._lib.args("PJRT_Executable_Serialize_Args", executable=self._live("serialize"))
        self._lib.call("PJRT_Executable_Serialize", args)
        try:
            return ctypes.string_at(args.serialized_bytes, args.serialized_bytes_size)
        finally:
            if args.serialized_executable_deleter and args.serialized_executable:
                void_fn(args.serialized_executable_deleter)(args.serialized_executable)

    def __repr__(self) -> str:
        return f"<CExecutable {self._owned.handle:#x} of {self._lib.name}>"


class _ExecutePlan:
    """The structs of one ``PJRT_LoadedExecutable_Execute`` shape, built once and reused."""

    __slots__ = ("rows", "row_addresses", "outer", "out_rows", "out_outer", "events", "options",
                 "args", "address", "num_devices", "num_args", "num_outputs", "fn")

    def __init__(self, lib: PluginLibrary, executable: int, num_devices: int, num_args: int,
                 num_outputs: int) -> None:
        self.num_devices, self.num_args, self.num_outputs = num_devices, num_args, num_outputs
        self.rows = [(ctypes.c_void_p * max(1, num_args))() for _ in range(num_devices)]
        self.outer = pointer_array(ctypes.addressof(r) for r in self.rows)
        self.out_rows = [(ctypes.c_void_p * max(1, num_outputs))() for _ in range(num_devices)]
        self.out_outer = pointer_array(ctypes.addressof(r) for r in self.out_rows)
        self.events = (ctypes.c_void_p * max(1, num_devices))()
        self.options = lib.args("PJRT_ExecuteOptions")
        self.args = lib.args("PJRT_LoadedExecutable_Execute_Args", executable=executable,
                             options=ctypes.addressof(self.options),
                             argument_lists=ctypes.addressof(self.outer), num_devices=num_devices,
                             num_args=num_args, output_lists=ctypes.addressof(self.out_outer),
                             device_complete_events=ctypes.addressof(self.events))
        self.address = ctypes.addressof(self.args)
        self.fn = lib.function("PJRT_LoadedExecutable_Execute")


class CLoadedExecutable(_Handle, LoadedExecutable):
    """``PJRT_LoadedExecutable``: owned; runs on the client's devices."""

    __slots__ = ("_client", "_num_outputs", "_plans")

    def __init__(self, client: "CClient", handle: int) -> None:
        self._client = client
        self._owned = _Owned(client._lib, handle, "PJRT_LoadedExecutable_Destroy",
                             "PJRT_LoadedExecutable_Destroy_Args", "executable", client._owner, 1)
        self._num_outputs: int | None = None
        self._plans: dict[tuple[int, int], list[_ExecutePlan]] = {}

    def get_executable(self) -> CExecutable:
        lib = self._client._lib
        args = lib.args("PJRT_LoadedExecutable_GetExecutable_Args", loaded_executable=self._live("get_executable"))
        lib.call("PJRT_LoadedExecutable_GetExecutable", args)
        return CExecutable(lib, args.executable, self._client)

    def num_outputs(self) -> int:
        if self._num_outputs is None:
            exe = self.get_executable()
            try:
                self._num_outputs = exe.num_outputs()
            finally:
                exe.destroy()
        return self._num_outputs

    def addressable_devices(self) -> list[Device]:
        lib = self._client._lib
        args = lib.args("PJRT_LoadedExecutable_AddressableDevices_Args", executable=self._live("addressable_devices"))
        lib.call("PJRT_LoadedExecutable_AddressableDevices", args)
        return [self._client._device(h) for h in read_pointers(args.addressable_devices,
                                                               args.num_addressable_devices)]

    def delete(self) -> None:
        lib = self._client._lib
        lib.call("PJRT_LoadedExecutable_Delete",
                 lib.args("PJRT_LoadedExecutable_Delete_Args", executable=self._live("delete")))

    def is_deleted(self) -> bool:
        lib = self._client._lib
        args = lib.args("PJRT_LoadedExecutable_IsDeleted_Args", executable=self._live("is_deleted"))
        lib.call("PJRT_LoadedExecutable_IsDeleted", args)
        return bool(args.is_deleted)

    def fingerprint(self) -> str:
        lib = self._client._lib
        args = lib.args("PJRT_LoadedExecutable_Fingerprint_Args", executable=self._live("fingerprint"))
        lib.call("PJRT_LoadedExecutable_Fingerprint", args)
        return read_string(args.executable_fingerprint, args.executable_fingerprint_size)

    def get_device_assignment(self) -> tuple[tuple[int, ...], ...]:
        lib = self._client._lib
        args = lib.args("PJRT_LoadedExecutable_GetDeviceAssignment_Args",
                        executable=self._live("get_device_assignment"))
        lib.call("PJRT_LoadedExecutable_GetDeviceAssignment", args)
        try:
            proto = ctypes.string_at(args.serialized_bytes, args.serialized_bytes_size)
        finally:
            if args.serialized_device_assignment_deleter and args.serialized_device_assignment:
                void_fn(args.serialized_device_assignment_deleter)(args.serialized_device_assignment)
        # A DeviceAssignmentProto is field 9 of ExecutableBuildOptionsProto, itself field 3 of
        # CompileOptionsProto: wrap it and let the abi codec read it.
        build = b"\x4a" + _varint(len(proto)) + proto
        wrapped = b"\x1a" + _varint(len(build)) + build
        assignment = decode_compile_options(wrapped).device_assignment
        return assignment or ()

    def execute(self, argument_lists: Sequence[Sequence[Buffer]], options: ExecuteOptions | None = None,
                execute_device: Device | None = None) -> ExecuteResult:
        lib = self._client._lib
        handle = self._live("execute")
        num_devices = len(argument_lists)
        if num_devices == 0:
            raise InvalidArgument("execute: argument_lists is empty; give one argument list per device")
        num_args = len(argument_lists[0])
        key = (num_devices, num_args)
        pool = self._plans.setdefault(key, [])
        plan = pool.pop() if pool else _ExecutePlan(lib, handle, num_devices, num_args, self.num_outputs())
        try:
            for d, (row, buffers) in enumerate(zip(plan.rows, argument_lists)):
                if len(buffers) != num_args:
                    raise InvalidArgument(f"execute: argument list {d} has {len(buffers)} buffers, "
                                          f"list 0 has {num_args}")
                for i, buf in enumerate(buffers):
                    if not isinstance(buf, CBuffer) or buf._client is not self._client:
                        raise InvalidArgument(f"execute: argument {i} of device {d} is {buf!r}, "
                                              "not a buffer of this executable's client")
                    row[i] = buf._live(f"execute argument {i} of device {d}")
            keep = self._set_options(plan, options, execute_device, num_devices)
            err = plan.fn(plan.address)
            del keep
            if err:
                raise lib.error(err, "PJRT_LoadedExecutable_Execute")
            client, owner = self._client, self._client._owner
            outputs = [[CBuffer(client, h) for h in out_row[:plan.num_outputs]] for out_row in plan.out_rows]
            events = [_event(lib, plan.events[d], owner) for d in range(num_devices)]
            return ExecuteResult(outputs, events)
        finally:
            for row in plan.rows:
                for i in range(num_args):
                    row[i] = None
            pool.append(plan)

    def _set_options(self, plan: _ExecutePlan, options: ExecuteOptions | None, execute_device: Device | None,
                     num_devices: int) -> Any:
        opts = plan.options
        plan.args.execute_device = _device_handle(execute_device, "execute", self._client)
        if execute_device is not None and num_devices != 1:
            raise InvalidArgument(f"execute: execute_device needs exactly one argument list, got {num_devices}")
        if options is None or options == _DEFAULT_EXECUTE_OPTIONS:
            opts.launch_id = 0
            opts.non_donatable_input_indices = None
            opts.num_non_donatable_input_indices = 0
            return None
        opts.launch_id = options.launch_id
        indices = options.non_donatable_input_indices
        array = (ctypes.c_int64 * max(1, len(indices)))(*indices)
        opts.non_donatable_input_indices = ctypes.addressof(array) if indices else None
        opts.num_non_donatable_input_indices = len(indices)
        return array

    def __repr__(self) -> str:
        return f"<CLoadedExecutable {self._owned.handle:#x} of {self._client._lib.name}>"


_DEFAULT_EXECUTE_OPTIONS = ExecuteOptions()


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)


# -- topology --------------------------------------------------------------------------------


class CTopologyDescription(TopologyDescription):
    """``PJRT_TopologyDescription``: owned when created by the API, borrowed from a client."""

    __slots__ = ("_lib", "_handle", "_owned", "_owner", "__weakref__")

    def __init__(self, lib: PluginLibrary, handle: int, owner: Any = None, owned: bool = False) -> None:
        self._lib, self._handle, self._owner = lib, handle, owner
        self._owned = _Owned(lib, handle, "PJRT_TopologyDescription_Destroy",
                             "PJRT_TopologyDescription_Destroy_Args", "topology", None, 3) if owned else None

    @property
    def handle(self) -> int:
        return self._handle

    def _string(self, fn: str, out: str) -> str:
        return _string_query(self._lib, fn, "topology", self._handle, out, out + "_size")

    def platform_name(self) -> str:
        return self._string("PJRT_TopologyDescription_PlatformName", "platform_name")

    def platform_version(self) -> str:
        return self._string("PJRT_TopologyDescription_PlatformVersion", "platform_version")

    def get_device_descriptions(self) -> list[DeviceDescription]:
        args = self._lib.args("PJRT_TopologyDescription_GetDeviceDescriptions_Args", topology=self._handle)
        self._lib.call("PJRT_TopologyDescription_GetDeviceDescriptions", args)
        return [CDeviceDescription(self._lib, h, self)
                for h in read_pointers(args.descriptions, args.num_descriptions)]

    def serialize(self) -> bytes:
        args = self._lib.args("PJRT_TopologyDescription_Serialize_Args", topology=self._handle)
        self._lib.call("PJRT_TopologyDescription_Serialize", args)
        try:
            return ctypes.string_at(args.serialized_bytes, args.serialized_bytes_size)
        finally:
            if args.serialized_topology_deleter and args.serialized_topology:
                void_fn(args.serialized_topology_deleter)(args.serialized_topology)

    def attributes(self) -> dict[str, Any]:
        args = self._lib.args("PJRT_TopologyDescription_Attributes_Args", topology=self._handle)
        self._lib.call("PJRT_TopologyDescription_Attributes", args)
        return decode_named_values(args.attributes, args.num_attributes,
                                   what="PJRT_TopologyDescription_Attributes", plugin=self._lib.name)

    def destroy(self) -> None:
        if self._owned is not None:
            self._owned.close()

    def __del__(self) -> None:
        if getattr(self, "_owned", None) is not None:
            _close_quietly(self._owned)


# -- client ----------------------------------------------------------------------------------


def _program_structs(lib: PluginLibrary, program: Program) -> tuple[ctypes.Structure, list[Any]]:
    if not isinstance(program, Program):
        raise InvalidArgument(f"compile: expected a pjrt_hub.abi.Program, got {type(program).__name__}")
    code = program.data()
    fmt = program.format.encode()
    code_buf = ctypes.create_string_buffer(code, len(code))
    fmt_buf = ctypes.create_string_buffer(fmt, len(fmt))
    struct = lib.args("PJRT_Program", code=ctypes.addressof(code_buf), code_size=len(code),
                      format=ctypes.addressof(fmt_buf), format_size=len(fmt))
    return struct, [code_buf, fmt_buf]


def _compile_error(lib: PluginLibrary, err: int, c_function: str) -> PjrtError:
    """A failed compile as :class:`CompileError` (an InvalidArgument) with the plugin's message.

    XLA reports an unparsable program as UNKNOWN ("error: custom op ... is unknown"); pjrt-hub's
    error tree says a program that does not compile is an InvalidArgument, whatever the plugin
    called it. Other codes (Unimplemented, ResourceExhausted, Internal, ...) are kept.
    """
    exc = lib.error(err, c_function)
    if exc.code not in (ErrorCode.UNKNOWN, ErrorCode.INVALID_ARGUMENT):
        return exc
    compile_error = CompileError(exc.message, plugin=lib.name)
    compile_error.plugin_code = exc.code  # type: ignore[attr-defined]
    compile_error.c_function = c_function  # type: ignore[attr-defined]
    compile_error.add_note(f"from {c_function} of plugin {lib.name!r} (PJRT C API {lib.version}), "
                           f"which reported it as {exc.code.name}")
    return compile_error


def _options_bytes(options: CompileOptions | bytes | None) -> bytes:
    if options is None:
        return encode_compile_options(CompileOptions())
    if isinstance(options, CompileOptions):
        return encode_compile_options(options)
    if isinstance(options, (bytes, bytearray, memoryview)):
        return bytes(options)
    raise InvalidArgument(f"compile: options must be CompileOptions or serialized bytes, "
                          f"got {type(options).__name__}")


class CClient(Client):
    """``PJRT_Client``: owns buffers, executables and events created through it."""

    __slots__ = ("_lib", "_owner", "_devices", "_memories", "__weakref__")

    def __init__(self, lib: PluginLibrary, handle: int) -> None:
        self._lib = lib
        self._owner = _Owner(lib, handle)
        self._devices: dict[int, CDevice] = {}
        self._memories: dict[int, CMemory] = {}

    @property
    def handle(self) -> int:
        return self._owner.handle

    def _live(self, what: str) -> int:
        handle = self._owner.handle
        if not handle:
            raise FailedPrecondition(f"{what}: the client was destroyed")
        return handle

    def _device(self, handle: int) -> CDevice:
        device = self._devices.get(handle)
        if device is None:
            device = self._devices[handle] = CDevice(self, handle)
        return device

    def _memory(self, handle: int) -> CMemory:
        memory = self._memories.get(handle)
        if memory is None:
            memory = self._memories[handle] = CMemory(self, handle)
        return memory

    def _string(self, fn: str, out: str) -> str:
        return _string_query(self._lib, fn, "client", self._live(fn), out, out + "_size")

    def platform_name(self) -> str:
        return self._string("PJRT_Client_PlatformName", "platform_name")

    def platform_version(self) -> str:
        return self._string("PJRT_Client_PlatformVersion", "platform_version")

    def process_index(self) -> int:
        return _int_query(self._lib, "PJRT_Client_ProcessIndex", "client", self._live("process_index"),
                          "process_index")

    def devices(self) -> list[Device]:
        args = self._lib.args("PJRT_Client_Devices_Args", client=self._live("devices"))
        self._lib.call("PJRT_Client_Devices", args)
        return [self._device(h) for h in read_pointers(args.devices, args.num_devices)]

    def addressable_devices(self) -> list[Device]:
        args = self._lib.args("PJRT_Client_AddressableDevices_Args", client=self._live("addressable_devices"))
        self._lib.call("PJRT_Client_AddressableDevices", args)
        return [self._device(h) for h in read_pointers(args.addressable_devices, args.num_addressable_devices)]

    def lookup_device(self, device_id: int) -> Device:
        args = self._lib.args("PJRT_Client_LookupDevice_Args", client=self._live("lookup_device"), id=device_id)
        self._lib.call("PJRT_Client_LookupDevice", args)
        return self._device(args.device)

    def lookup_addressable_device(self, local_hardware_id: int) -> Device:
        args = self._lib.args("PJRT_Client_LookupAddressableDevice_Args",
                              client=self._live("lookup_addressable_device"), local_hardware_id=local_hardware_id)
        self._lib.call("PJRT_Client_LookupAddressableDevice", args)
        return self._device(args.addressable_device)

    def addressable_memories(self) -> list[Memory]:
        args = self._lib.args("PJRT_Client_AddressableMemories_Args", client=self._live("addressable_memories"))
        self._lib.call("PJRT_Client_AddressableMemories", args)
        return [self._memory(h) for h in read_pointers(args.addressable_memories, args.num_addressable_memories)]

    def default_device_assignment(self, num_replicas: int, num_partitions: int) -> tuple[tuple[int, ...], ...]:
        if num_replicas < 1 or num_partitions < 1:
            raise InvalidArgument(f"default_device_assignment: num_replicas={num_replicas} and "
                                  f"num_partitions={num_partitions} must be >= 1")
        total = num_replicas * num_partitions
        out = (ctypes.c_int * total)()
        args = self._lib.args("PJRT_Client_DefaultDeviceAssignment_Args",
                              client=self._live("default_device_assignment"), num_replicas=num_replicas,
                              num_partitions=num_partitions, default_assignment_size=total,
                              default_assignment=ctypes.addressof(out))
        self._lib.call("PJRT_Client_DefaultDeviceAssignment", args)
        flat = list(out)
        return tuple(tuple(flat[r * num_partitions:(r + 1) * num_partitions]) for r in range(num_replicas))

    def topology_description(self) -> CTopologyDescription:
        handle = _int_query(self._lib, "PJRT_Client_TopologyDescription", "client",
                            self._live("topology_description"), "topology")
        return CTopologyDescription(self._lib, handle, owner=self, owned=False)

    def compile(self, program: Program, options: CompileOptions | bytes | None = None) -> CLoadedExecutable:
        lib = self._lib
        fn = lib.function("PJRT_Client_Compile")
        prog, keep = _program_structs(lib, program)
        opts = _options_bytes(options)
        opts_buf = ctypes.create_string_buffer(opts, max(1, len(opts)))
        args = lib.args("PJRT_Client_Compile_Args", client=self._live("compile"), program=ctypes.addressof(prog),
                        compile_options=ctypes.addressof(opts_buf), compile_options_size=len(opts))
        err = fn(ctypes.addressof(args))
        del keep
        if err:
            raise _compile_error(lib, err, "PJRT_Client_Compile")
        return CLoadedExecutable(self, args.executable)

    def deserialize_and_load(self, serialized: bytes) -> CLoadedExecutable:
        data = bytes(serialized)
        buf = ctypes.create_string_buffer(data, max(1, len(data)))
        args = self._lib.args("PJRT_Executable_DeserializeAndLoad_Args", client=self._live("deserialize_and_load"),
                              serialized_executable=ctypes.addressof(buf), serialized_executable_size=len(data))
        self._lib.call("PJRT_Executable_DeserializeAndLoad", args)
        return CLoadedExecutable(self, args.loaded_executable)

    def buffer_from_host_buffer(
        self,
        array: np.ndarray,
        *,
        device: Device | None = None,
        memory: Memory | None = None,
        semantics: HostBufferSemantics = HostBufferSemantics.IMMUTABLE_ONLY_DURING_CALL,
        element_type: BufferType | None = None,
    ) -> HostTransfer:
        lib = self._lib
        fn = lib.function("PJRT_Client_BufferFromHostBuffer")
        semantics = HostBufferSemantics(semantics)
        if semantics == HostBufferSemantics.MUTABLE_ZERO_COPY and lib.minor < MUTABLE_ZERO_COPY_SINCE:
            raise Unimplemented(f"buffer_from_host_buffer: kMutableZeroCopy was added in PJRT C API "
                                f"0.{MUTABLE_ZERO_COPY_SINCE}; plugin {lib.name!r} implements {lib.version}",
                                plugin=lib.name)
        host = np.asarray(array)
        kind = from_numpy_dtype(host.dtype) if element_type is None else BufferType(element_type)
        if element_type is not None and to_numpy_dtype(kind).itemsize != host.dtype.itemsize:
            raise InvalidArgument(f"buffer_from_host_buffer: element_type {kind.name} does not match the "
                                  f"array's {host.dtype} ({host.dtype.itemsize} bytes per element)")
        if kind in _PACKED:
            raise Unimplemented(f"buffer_from_host_buffer: {kind.name} is packed below a byte on the device; "
                                "the C bridge does not pack it", plugin=lib.name)
        zero_copy = semantics in (HostBufferSemantics.IMMUTABLE_ZERO_COPY, HostBufferSemantics.MUTABLE_ZERO_COPY)
        if not host.flags.c_contiguous:
            if semantics == HostBufferSemantics.MUTABLE_ZERO_COPY:
                raise InvalidArgument("buffer_from_host_buffer: kMutableZeroCopy needs a C-contiguous array")
            host = np.ascontiguousarray(host)
        if memory is not None and not isinstance(memory, CMemory):
            raise InvalidArgument(f"buffer_from_host_buffer: expected a memory of this plugin, got {memory!r}")
        if device is None and memory is None:
            device = self.addressable_devices()[0]
        dims = (ctypes.c_int64 * max(1, host.ndim))(*host.shape)
        args = lib.args("PJRT_Client_BufferFromHostBuffer_Args", client=self._live("buffer_from_host_buffer"),
                        data=host.ctypes.data or None, type=int(kind), dims=ctypes.addressof(dims),
                        num_dims=host.ndim, host_buffer_semantics=int(semantics),
                        device=_device_handle(device, "buffer_from_host_buffer", self),
                        memory=memory.handle if isinstance(memory, CMemory) else None)
        lib.check(fn(ctypes.addressof(args)), "PJRT_Client_BufferFromHostBuffer")
        buffer = CBuffer(self, args.buffer, host if zero_copy else None)
        done = args.done_with_host_buffer
        if done and semantics != HostBufferSemantics.IMMUTABLE_ONLY_DURING_CALL:
            _keep_until_ready(lib, done, host)
        return HostTransfer(buffer, _event(lib, done, self._owner))

    def create_uninitialized_buffer(self, dims: Sequence[int], element_type: BufferType, *,
                                    device: Device | None = None, memory: Memory | None = None) -> CBuffer:
        if device is None and memory is None:
            device = self.addressable_devices()[0]
        shape = (ctypes.c_int64 * max(1, len(dims)))(*dims)
        args = self._lib.args("PJRT_Client_CreateUninitializedBuffer_Args",
                              client=self._live("create_uninitialized_buffer"), shape_dims=ctypes.addressof(shape),
                              shape_num_dims=len(dims), shape_element_type=int(BufferType(element_type)),
                              device=_device_handle(device, "create_uninitialized_buffer", self),
                              memory=memory.handle if isinstance(memory, CMemory) else None)
        self._lib.call("PJRT_Client_CreateUninitializedBuffer", args)
        return CBuffer(self, args.buffer)

    def create_view_of_device_buffer(self, producer: Any, *, device: Device | None = None,
                                     on_delete: Callable[[], None] | None = None) -> Buffer:
        raise Unimplemented("create_view_of_device_buffer: the C bridge does not wrap external memory yet "
                            "(PJRT_Client_CreateViewOfDeviceBuffer)", plugin=self._lib.name)

    def destroy(self) -> None:
        """Destroy what is left of the client's buffers, executables and events, then the client."""
        self._owner.close()

    def __repr__(self) -> str:
        return f"<CClient {self._owner.handle:#x} of {self._lib.name}>"


# -- the API ---------------------------------------------------------------------------------

_INITIALIZED: set[str] = set()
_INIT_LOCK = threading.Lock()


class CApi(Api):
    """``PJRT_Api`` of a loaded C plugin: the entry to its clients, topologies and compiler."""

    __slots__ = ("_lib",)

    def __init__(self, lib: PluginLibrary) -> None:
        self._lib = lib

    @property
    def library(self) -> PluginLibrary:
        return self._lib

    @property
    def name(self) -> str:
        return self._lib.name

    def api_version(self) -> ApiVersion:
        return self._lib.version

    def has(self, c_function: str) -> bool:
        """Whether the plugin's table holds ``c_function`` (and pjrt-hub may call it)."""
        return self._lib.has(c_function)

    def extensions(self) -> Mapping[str, ExtensionInfo]:
        """The extension chain as data, by extension name (implementations are not wrapped here)."""
        nodes, _stopped = self._lib.extensions()
        return {node.name: node for node in nodes}

    def plugin_initialize(self) -> None:
        with _INIT_LOCK:
            if self._lib.path in _INITIALIZED:
                return
            self._lib.call("PJRT_Plugin_Initialize", self._lib.args("PJRT_Plugin_Initialize_Args"))
            _INITIALIZED.add(self._lib.path)

    def plugin_attributes(self) -> dict[str, Any]:
        return self._lib.plugin_attributes()

    def client_create(self, options: NamedValues | None = None) -> CClient:
        lib = self._lib
        fn = lib.function("PJRT_Client_Create")
        self.plugin_initialize()
        values = encode_named_values(options, minor=lib.minor, what="PJRT_Client_Create options")
        args = lib.args("PJRT_Client_Create_Args", create_options=values.address or None,
                        num_options=values.count)
        lib.check(fn(ctypes.addressof(args)), "PJRT_Client_Create")
        return CClient(lib, args.client)

    def topology_create(self, options: NamedValues | None = None, *, name: str = "") -> CTopologyDescription:
        lib = self._lib
        fn = lib.function("PJRT_TopologyDescription_Create")
        self.plugin_initialize()
        values = encode_named_values(options, minor=lib.minor, what="PJRT_TopologyDescription_Create options")
        encoded = name.encode()
        name_buf = ctypes.create_string_buffer(encoded, max(1, len(encoded)))
        args = lib.args("PJRT_TopologyDescription_Create_Args", topology_name=ctypes.addressof(name_buf),
                        topology_name_size=len(encoded), create_options=values.address or None,
                        num_options=values.count)
        lib.check(fn(ctypes.addressof(args)), "PJRT_TopologyDescription_Create")
        return CTopologyDescription(lib, args.topology, owned=True)

    def topology_deserialize(self, serialized: bytes) -> CTopologyDescription:
        lib = self._lib
        data = bytes(serialized)
        buf = ctypes.create_string_buffer(data, max(1, len(data)))
        args = lib.args("PJRT_TopologyDescription_Deserialize_Args", serialized_topology=ctypes.addressof(buf),
                        serialized_topology_size=len(data))
        lib.call("PJRT_TopologyDescription_Deserialize", args)
        return CTopologyDescription(lib, args.topology, owned=True)

    def compile(self, program: Program, topology: TopologyDescription,
                options: CompileOptions | bytes | None = None, *, client: CClient | None = None) -> CExecutable:
        lib = self._lib
        fn = lib.function("PJRT_Compile")
        if not isinstance(topology, CTopologyDescription):
            raise InvalidArgument(f"compile: expected a topology of this plugin, got {topology!r}")
        prog, keep = _program_structs(lib, program)
        opts = _options_bytes(options)
        opts_buf = ctypes.create_string_buffer(opts, max(1, len(opts)))
        args = lib.args("PJRT_Compile_Args", topology=topology.handle, program=ctypes.addressof(prog),
                        compile_options=ctypes.addressof(opts_buf), compile_options_size=len(opts),
                        client=client.handle if client is not None else None)
        err = fn(ctypes.addressof(args))
        del keep
        if err:
            raise _compile_error(lib, err, "PJRT_Compile")
        return CExecutable(lib, args.executable, client)

    def __repr__(self) -> str:
        return f"<CApi {self._lib.name!r} PJRT C API {self._lib.version}>"


def load_api(path: str, name: str | None = None) -> CApi:
    """Load the plugin at ``path`` in this process and wrap its ``PJRT_Api``.

    This dlopens the library and calls ``GetPjrtApi``; it creates no client. Probe an unknown
    plugin first (:func:`.probe.probe`): loading runs the plugin's static initializers here.
    """
    return CApi(open_library(path, name))

