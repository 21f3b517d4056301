"""``PJRT_DeviceDescription``, ``PJRT_Memory`` and ``PJRT_Device``: borrowed from the client, never destroyed.

They live as long as what they were borrowed from (the client, or a topology), so every call first
checks that it is still there: a description read after its client was destroyed is a
FailedPrecondition here, where the plugin would read freed memory (XLA's CPU plugin segfaults)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pjrt_hub.abi import (
    Device,
    DeviceDescription,
    Memory,
    MemoryStats,
)

from .library import PluginLibrary, decode_named_values, read_pointers, read_string, void_fn

if TYPE_CHECKING:
    from .client import CClient


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

    def _live(self, what: str) -> int:
        """The handle, once the client or topology it belongs to is known to be alive."""
        live = getattr(self._owner, "_live", None)
        if live is not None:
            live(f"{what} (of a device description)")
        return self._handle

    def id(self) -> int:
        return _int_query(self._lib, "PJRT_DeviceDescription_Id", "device_description", self._live("id"), "id")

    def process_index(self) -> int:
        return _int_query(self._lib, "PJRT_DeviceDescription_ProcessIndex", "device_description",
                          self._live("process_index"), "process_index")

    def attributes(self) -> dict[str, Any]:
        args = self._lib.args("PJRT_DeviceDescription_Attributes_Args", device_description=self._live("attributes"))
        self._lib.call("PJRT_DeviceDescription_Attributes", args)
        return decode_named_values(args.attributes, args.num_attributes,
                                   what="PJRT_DeviceDescription_Attributes", plugin=self._lib.name)

    def kind(self) -> str:
        return _string_query(self._lib, "PJRT_DeviceDescription_Kind", "device_description", self._live("kind"),
                             "device_kind", "device_kind_size")

    def debug_string(self) -> str:
        return _string_query(self._lib, "PJRT_DeviceDescription_DebugString", "device_description",
                             self._live("debug_string"), "debug_string", "debug_string_size")

    def to_string(self) -> str:
        return _string_query(self._lib, "PJRT_DeviceDescription_ToString", "device_description",
                             self._live("to_string"), "to_string", "to_string_size")

    def __repr__(self) -> str:
        return f"<CDeviceDescription {self._handle:#x}>"


class _ClientOwned:
    """A handle the client owns (devices, memories): alive exactly as long as the client."""

    __slots__ = ("_client", "_handle")
    _what = "handle"

    def __init__(self, client: "CClient", handle: int) -> None:
        self._client, self._handle = client, handle

    @property
    def handle(self) -> int:
        return self._handle

    def _live(self, what: str) -> int:
        self._client._live(f"{what} (of a {self._what})")
        return self._handle

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and other._handle == self._handle

    def __hash__(self) -> int:
        return hash(self._handle)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self._handle:#x}>"


class CMemory(_ClientOwned, Memory):
    """``PJRT_Memory``: owned by the client."""

    __slots__ = ()
    _what = "memory"

    def id(self) -> int:
        return _int_query(self._client._lib, "PJRT_Memory_Id", "memory", self._live("id"), "id")

    def kind(self) -> str:
        return _string_query(self._client._lib, "PJRT_Memory_Kind", "memory", self._live("kind"), "kind", "kind_size")

    def kind_id(self) -> int:
        return _int_query(self._client._lib, "PJRT_Memory_Kind_Id", "memory", self._live("kind_id"), "kind_id")

    def debug_string(self) -> str:
        return _string_query(self._client._lib, "PJRT_Memory_DebugString", "memory", self._live("debug_string"),
                             "debug_string", "debug_string_size")

    def to_string(self) -> str:
        return _string_query(self._client._lib, "PJRT_Memory_ToString", "memory", self._live("to_string"),
                             "to_string", "to_string_size")

    def addressable_by_devices(self) -> list[Device]:
        lib = self._client._lib
        args = lib.args("PJRT_Memory_AddressableByDevices_Args", memory=self._live("addressable_by_devices"))
        lib.call("PJRT_Memory_AddressableByDevices", args)
        return [self._client._device(h) for h in read_pointers(args.devices, args.num_devices)]

class CDevice(_ClientOwned, Device):
    """``PJRT_Device``: owned by the client."""

    __slots__ = ()
    _what = "device"

    def get_description(self) -> CDeviceDescription:
        lib = self._client._lib
        desc = _int_query(lib, "PJRT_Device_GetDescription", "device", self._live("get_description"),
                          "device_description")
        return CDeviceDescription(lib, desc, self._client)

    def is_addressable(self) -> bool:
        return bool(_int_query(self._client._lib, "PJRT_Device_IsAddressable", "device", self._live("is_addressable"),
                               "is_addressable"))

    def local_hardware_id(self) -> int:
        return _int_query(self._client._lib, "PJRT_Device_LocalHardwareId", "device", self._live("local_hardware_id"),
                          "local_hardware_id")

    def addressable_memories(self) -> list[Memory]:
        lib = self._client._lib
        args = lib.args("PJRT_Device_AddressableMemories_Args", device=self._live("addressable_memories"))
        lib.call("PJRT_Device_AddressableMemories", args)
        return [self._client._memory(h) for h in read_pointers(args.memories, args.num_memories)]

    def default_memory(self) -> Memory:
        lib = self._client._lib
        handle = _int_query(lib, "PJRT_Device_DefaultMemory", "device", self._live("default_memory"), "memory")
        return self._client._memory(handle)

    def memory_stats(self) -> MemoryStats:
        lib = self._client._lib
        args = lib.args("PJRT_Device_MemoryStats_Args", device=self._live("memory_stats"))
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
        args = lib.args("PJRT_Device_GetAttributes_Args", device=self._live("get_attributes"))
        lib.call("PJRT_Device_GetAttributes", args)
        try:
            return decode_named_values(args.attributes, args.num_attributes,
                                       what="PJRT_Device_GetAttributes", plugin=lib.name)
        finally:
            if args.attributes_deleter and args.device_attributes:
                void_fn(args.attributes_deleter)(args.device_attributes)

    def __repr__(self) -> str:
        return f"<CDevice {self._handle:#x} of {self._client._lib.name}>"
