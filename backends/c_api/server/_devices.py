"""PJRT_DeviceDescription_*, PJRT_Device_* and PJRT_Memory_*: what the devices and memories are."""

from __future__ import annotations

from typing import Any, Mapping

from pjrt_hub.abi import Unimplemented

from .._native import TAG_MEMORY
from ._base import _Base


class _DeviceSlots(_Base):
    """The device, description and memory functions of :class:`~.ServedApi`."""

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
            values = entry.keep("attributes", self._named_values(self._device_attributes(entry.obj.attributes()),
                                                                 "PJRT_DeviceDescription_Attributes"))
        args.attributes = values.address or None
        args.num_attributes = values.count

    def _device_attributes(self, attributes: Mapping[str, Any]) -> Mapping[str, Any]:
        hook = self.device_attribute_hook
        return attributes if hook is None else hook(attributes)

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
        values = self._named_values(self._device_attributes(attributes), "PJRT_Device_GetAttributes")
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
        args.kind, args.kind_size = answer = self._string(("memory kind", args.memory), kind)
        if self._ready_event:
            self._handles.memo(args.memory, TAG_MEMORY, *answer)

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
