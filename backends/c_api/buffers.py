"""``PJRT_Buffer``: owned arrays on a device, and their way back to the host.

A copy to the host asks for a dense row-major layout explicitly, so data lands as numpy holds it
whatever layout the buffer has on the device; the destination array is kept alive until the copy's
event fires."""

from __future__ import annotations

import ctypes
from typing import TYPE_CHECKING, Any

import numpy as np

from pjrt_hub.abi import (
    Buffer,
    BufferType,
    Device,
    Event,
    InvalidArgument,
    Memory,
    ToHost,
    Unimplemented,
    to_numpy_dtype,
)

from .devices import CDevice, CMemory
from .handles import _event, _Handle, _keep_until_ready, _Owned
from .library import PluginLibrary, unpack_int64s

if TYPE_CHECKING:
    from .client import CClient

#: Element types numpy holds one per byte but PJRT packs (ml_dtypes int4 and friends).
PACKED_TYPES = frozenset({BufferType.S4, BufferType.U4, BufferType.S2, BufferType.U2, BufferType.F4E2M1FN})


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
        if memory is None:
            raise InvalidArgument("copy_to_memory: memory is None")
        args = lib.args("PJRT_Buffer_CopyToMemory_Args", buffer=self._live("copy_to_memory"),
                        dst_memory=_memory_handle(memory, "copy_to_memory", self._client))
        lib.call("PJRT_Buffer_CopyToMemory", args)
        return CBuffer(self._client, args.dst_buffer)

    def to_host_buffer(self, dst: np.ndarray | None = None) -> ToHost:
        lib = self._client._lib
        handle = self._live("to_host_buffer")
        kind = self.element_type()
        if kind in PACKED_TYPES:
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


def _memory_handle(memory: Memory | None, what: str, client: "CClient") -> int:
    """The handle of a memory of ``client`` (a memory of another client, even of the same plugin,
    is a pointer into that client's state: the plugin would follow it wherever it points now)."""
    if memory is None:
        return 0
    if not isinstance(memory, CMemory) or memory._client is not client:
        raise InvalidArgument(f"{what}: expected a memory of this client, got {memory!r}")
    return memory._live(what)
