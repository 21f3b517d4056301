"""``PJRT_Buffer``: owned arrays on a device, and their way back to the host.

A copy to the host asks for a dense row-major layout explicitly, so data lands as numpy holds it
whatever layout the buffer has on the device; the destination array is kept alive until the copy's
event fires. Sub-byte element types (S4, U4, S2, U2, F4E2M1FN) cross the C API one element per
byte, as numpy (ml_dtypes) holds them; a plugin packs them on its device (XLA's CPU plugin takes
and gives them that way)."""

from __future__ import annotations

import ctypes
import logging
import weakref
from typing import TYPE_CHECKING, Any

import numpy as np

from pjrt_hub.abi import (
    Buffer,
    BufferType,
    Device,
    Event,
    Internal,
    InvalidArgument,
    Memory,
    PjrtError,
    ResourceExhausted,
    ToHost,
    to_numpy_dtype,
)

from .devices import CDevice, CMemory
from .handles import _event, _Handle, _keep_until_ready, _Owned
from .library import PluginLibrary, unpack_int64s

if TYPE_CHECKING:
    from .client import CClient

log = logging.getLogger("pjrt_hub.c_api")


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
        dims = self.dimensions()
        dtype = to_numpy_dtype(kind)
        if dst is None:
            dst = self._host_array(dims, dtype)
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

    # -- DLPack ----------------------------------------------------------------------------------

    def __dlpack_device__(self) -> tuple[int, int]:
        if not self.is_on_cpu():
            raise BufferError(f"{self!r} is not in host memory; the C API says nothing of which DLPack device "
                              "another memory is, so the C bridge exports buffers in host memory only")
        return (_DL_CPU, 0)

    def __dlpack__(self, *, stream: Any = None, max_version: tuple[int, int] | None = None,
                   dl_device: tuple[int, int] | None = None, copy: bool | None = None) -> Any:
        """Export a buffer in host memory without a copy (unless ``copy=True``), as a framework
        shares a PJRT buffer: the data is awaited first (the consumer reads it at once), and an
        external reference (``PJRT_Buffer_IncreaseExternalReferenceCount``) holds it until the
        consumer's array is gone, so the plugin neither frees, moves nor donates it meanwhile.

        The capsule is numpy's, made from a view of ``PJRT_Buffer_UnsafePointer`` with the
        strides of the buffer's device layout (the Layouts extension's answer; dense row-major
        when the plugin has no such extension, as a host buffer is by default)."""
        if stream is not None and stream != -1:
            raise BufferError(f"a buffer in host memory has no streams; __dlpack__ got stream={stream!r}")
        device = self.__dlpack_device__()
        if dl_device is not None and tuple(dl_device) != device:
            raise BufferError(f"{self!r} lives on DLPack device {device}, not {tuple(dl_device)}")
        kind = self.element_type()
        dtype = to_numpy_dtype(kind)
        if dtype.type.__module__.startswith("ml_dtypes"):
            raise BufferError(f"{self!r} cannot be exported through DLPack: numpy's DLPack has no {dtype} type; "
                              "copy it with to_host_buffer() instead")
        self.ready_event().await_()
        kwargs: dict[str, Any] = {} if max_version is None else {"max_version": max_version}
        if copy:
            copied = self.to_host_buffer()
            copied.event.await_()
            return copied.array.__dlpack__(**kwargs)
        if copy is not None:
            kwargs["copy"] = copy
        dims = self.dimensions()
        strides = self._strides(dims, dtype.itemsize)
        self.increase_external_reference_count()
        try:
            view = _memory_view(self.unsafe_pointer(), dims, dtype, strides)
        except BaseException:
            self.decrease_external_reference_count()
            raise
        weakref.finalize(view, _release_reference, self)
        if max_version is not None and tuple(max_version) >= (1, 0):
            view.flags.writeable = False  # PJRT buffers are immutable; DLPack 1.0 can say so
        try:
            return view.__dlpack__(**kwargs)
        except TypeError:
            if not kwargs:
                raise
            view.flags.writeable = True  # numpy before 2.1: the legacy protocol only, no read-only flag
            return view.__dlpack__()

    def _strides(self, dims: tuple[int, ...], itemsize: int) -> tuple[int, ...]:
        """Byte strides of the data on the device, from the Layouts extension where the plugin has it."""
        layouts = _layouts_extension(self._client._lib)
        order = tuple(range(len(dims) - 1, -1, -1))
        if layouts is not None:
            found = layouts.buffer_memory_layout(self)
            if found.tiles:
                raise BufferError(f"{self!r} is tiled on its device ({found}); DLPack describes strides only: copy "
                                  "it with to_host_buffer() instead")
            if sorted(found.minor_to_major) == list(range(len(dims))):
                order = tuple(found.minor_to_major)
        strides = [0] * len(dims)
        step = itemsize
        for dim in order:
            strides[dim] = step
            step *= max(1, dims[dim])
        return tuple(strides)

    def _host_array(self, dims: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
        """A host array for the buffer's data, or the buffer's own error.

        The dimensions are the plugin's answer, not a promise: the output of a failed execution
        keeps the shape it was declared with (one too large to allocate is how the conformance
        suite makes an execution fail), and a plugin may answer anything. An allocation that
        cannot be made is not a Python MemoryError but the buffer's error, when its ready event
        already carries one (what the plugin's ToHostBuffer would report), else a
        RESOURCE_EXHAUSTED naming the size."""
        lib = self._client._lib
        if any(d < 0 for d in dims):
            raise Internal(f"to_host_buffer: PJRT_Buffer_Dimensions answered {list(dims)} for {self!r}; "
                           "a dimension cannot be negative", plugin=lib.name)
        count = 1
        for d in dims:
            count *= d
        try:
            return np.empty(dims, dtype)
        except (MemoryError, ValueError):
            pass
        own = self._settled_error()
        if own is not None:
            raise own
        raise ResourceExhausted(f"to_host_buffer: cannot allocate {count * dtype.itemsize} bytes of host memory "
                                f"for {dtype}{list(dims)}", plugin=lib.name)

    def _settled_error(self) -> PjrtError | None:
        """The error the buffer's ready event carries if it has fired with one (never waits)."""
        try:
            event = self.ready_event()
            return event.error() if event.is_ready() else None
        except PjrtError as exc:  # a deleted or donated buffer: its ready event reports that
            return exc

    def __repr__(self) -> str:
        return f"<CBuffer {self._owned.handle:#x} of {self._client._lib.name}>"


#: DLPack's device type for host memory (``kDLCPU``).
_DL_CPU = 1


def _layouts_extension(lib: PluginLibrary) -> Any:
    """The plugin's Layouts extension wrapper, or None when it has none."""
    from .extensions import wrap_extension

    nodes, _stopped = lib.extensions()
    for node in nodes:
        if node.name == "Layouts":
            return wrap_extension(lib, node)
    return None


def _memory_view(pointer: int, dims: tuple[int, ...], dtype: np.dtype, strides: tuple[int, ...]) -> np.ndarray:
    """A numpy array over plugin memory at ``pointer`` (no copy)."""
    count = 1
    for d in dims:
        count *= d
    if count == 0:
        return np.empty(dims, dtype)
    if not pointer:
        raise Internal(f"PJRT_Buffer_UnsafePointer gave NULL for {dtype}{list(dims)}")
    extent = sum((d - 1) * s for d, s in zip(dims, strides)) + dtype.itemsize
    raw = (ctypes.c_char * extent).from_address(pointer)
    return np.ndarray(dims, dtype=dtype, buffer=memoryview(raw), strides=strides)


def _release_reference(buffer: CBuffer) -> None:
    """The DLPack consumer is gone: give its external reference back (quietly, from a finalizer:
    the buffer's client may have been destroyed first, and the reference with it)."""
    if not buffer.handle:
        return
    try:
        buffer.decrease_external_reference_count()
    except PjrtError as exc:
        log.debug("giving back the external reference of a DLPack export failed: %s", exc)


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
