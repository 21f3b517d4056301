"""PJRT_Buffer_*: arrays on a device, their metadata, copies and the way back to the host."""

from __future__ import annotations

import ctypes
from typing import Any

import numpy as np

from pjrt_hub.abi import BufferType, InvalidArgument, Unimplemented, to_numpy_dtype

from .._native import TAG_BUFFER
from ..structs import layout
from ._base import _Base, _Entry, _host_array


class _BufferSlots(_Base):
    """The buffer functions of :class:`~.ServedApi`."""

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
        args.device = self._buffer_place(args.buffer, "PJRT_Buffer_Device")[0]

    def _Buffer_Memory(self, address: int) -> None:
        args = self._args(address, "PJRT_Buffer_Memory_Args")
        args.memory = self._buffer_place(args.buffer, "PJRT_Buffer_Memory")[1]

    def _buffer_place(self, handle: int, what: str) -> tuple[int, int]:
        """The handles of a buffer's device and memory, which the native fast paths then give."""
        return self._memo_buffer(handle, self._buffer(handle, what), ready=False)

    def _memo_buffer(self, handle: int, buffer: Any, *, ready: bool) -> tuple[int, int]:
        """The handles of ``buffer``'s device and memory, written into ``handle``'s slot for the
        native fast paths with whether the buffer is known ready without error."""
        place = self._device_handle(buffer.device()), self._memory_handle(buffer.memory())
        if self._ready_event:
            self._handles.memo(handle, TAG_BUFFER, *place, int(ready))
        return place

    def _Buffer_Delete(self, address: int) -> None:
        args = self._args(address, "PJRT_Buffer_Delete_Args")
        self._buffer(args.buffer, "PJRT_Buffer_Delete").delete()
        self._handles.forget(args.buffer)

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
