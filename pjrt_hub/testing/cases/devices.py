"""devices and memories: ``PJRT_Device_*``, ``PJRT_DeviceDescription_*``, ``PJRT_Memory_*``
(upstream's DeviceId, DeviceProcessIndex, DeviceIsAddressable, DeviceLocalHardwareId,
DeviceDescriptionAndMemoryDescriptions)."""

from __future__ import annotations

import gc
from typing import Any

import numpy as np

from pjrt_hub.abi import ErrorCode, PjrtError

from .._case import case, check, skip
from .._context import PluginUnderTest, describe
from .client import device_id


@case("devices")
def id(ctx: PluginUnderTest) -> None:  # noqa: A001 - the PJRT name
    """PJRT_DeviceDescription_Id is a non-negative int, unique across the client."""
    ids = [device_id(d) for d in ctx.client.devices()]
    for i in ids:
        check(isinstance(i, int) and not isinstance(i, bool) and i >= 0, f"device id {i!r} is not an int >= 0")
    check(len(set(ids)) == len(ids), f"device ids are not unique: {ids}")


@case("devices")
def process_index(ctx: PluginUnderTest) -> None:
    """Addressable devices belong to the client's process (PJRT_DeviceDescription_ProcessIndex)."""
    mine = ctx.client.process_index()
    for device in ctx.devices:
        index = device.get_description().process_index()
        check(index == mine, f"addressable device {device_id(device)} has process index {index}, the client {mine}")


@case("devices")
def is_addressable(ctx: PluginUnderTest) -> None:
    """PJRT_Device_IsAddressable holds exactly for the client's addressable devices."""
    addressable = {device_id(d) for d in ctx.devices}
    for device in ctx.client.devices():
        flag = device.is_addressable()
        check(flag == (device_id(device) in addressable),
              f"device {device_id(device)}: PJRT_Device_IsAddressable is {flag}, but it is "
              f"{'' if device_id(device) in addressable else 'not '}among the addressable devices")


@case("devices")
def local_hardware_id(ctx: PluginUnderTest) -> None:
    """Addressable devices have distinct local hardware ids >= 0."""
    ids = [d.local_hardware_id() for d in ctx.devices]
    check(all(isinstance(i, int) and i >= 0 for i in ids), f"local hardware ids must be ints >= 0, got {ids}")
    check(len(set(ids)) == len(ids), f"local hardware ids are not unique: {ids}")


@case("devices")
def description(ctx: PluginUnderTest) -> None:
    """Every device has a description: kind, debug string and to-string are strings, attributes named values."""
    for device in ctx.devices:
        desc = device.get_description()
        for name in ("kind", "debug_string", "to_string"):
            value = getattr(desc, name)()
            check(isinstance(value, str) and value, f"device {device_id(device)}: "
                  f"PJRT_DeviceDescription_{name.title().replace('_', '')} returned {value!r}, expected a non-empty string")
        attrs = desc.attributes()
        check(isinstance(attrs, dict), f"device {device_id(device)}: PJRT_DeviceDescription_Attributes returned "
                                       f"{type(attrs).__name__}, expected named values")


@case("devices", min_api_minor=92)
def attributes(ctx: PluginUnderTest) -> None:
    """PJRT_Device_GetAttributes returns named values."""
    for device in ctx.devices:
        attrs = device.get_attributes()
        check(isinstance(attrs, dict), f"device {device_id(device)}: PJRT_Device_GetAttributes returned "
                                       f"{type(attrs).__name__}, expected named values")


@case("devices")
def memories(ctx: PluginUnderTest) -> None:
    """Each device addresses at least one memory, and its default memory is one of them."""
    for device in ctx.devices:
        held = [(m.kind(), m.id()) for m in device.addressable_memories()]
        check(held, f"device {device_id(device)}: PJRT_Device_AddressableMemories returned none")
        default = device.default_memory()
        check((default.kind(), default.id()) in held,
              f"device {device_id(device)}: default memory {default.kind()} {default.id()} is not among its "
              f"addressable memories {held}")


@case("memories")
def kind(ctx: PluginUnderTest) -> None:
    """Every memory has a non-empty kind and string forms (PJRT_Memory_Kind, DebugString, ToString)."""
    for memory in ctx.client.addressable_memories():
        for name in ("kind", "debug_string", "to_string"):
            value = getattr(memory, name)()
            check(isinstance(value, str) and value, f"memory {memory.id()}: {name} returned {value!r}, "
                                                    "expected a non-empty string")


@case("memories", min_api_minor=48)
def kind_id(ctx: PluginUnderTest) -> None:
    """PJRT_Memory_Kind_Id: the same kind has the same id, different kinds different ids."""
    seen: dict[str, int] = {}
    for memory in ctx.client.addressable_memories():
        kind, kind_id = memory.kind(), memory.kind_id()
        check(isinstance(kind_id, int), f"memory kind {kind}: kind_id {kind_id!r} is not an int")
        if kind in seen:
            check(seen[kind] == kind_id, f"memory kind {kind} has kind ids {seen[kind]} and {kind_id}")
        seen[kind] = kind_id
    check(len(set(seen.values())) == len(seen), f"different memory kinds share a kind id: {seen}")


@case("memories")
def addressable_by_devices(ctx: PluginUnderTest) -> None:
    """Memories and devices agree: a memory lists the devices that list it (both directions)."""
    for device in ctx.devices:
        for memory in device.addressable_memories():
            users = {device_id(d) for d in memory.addressable_by_devices()}
            check(device_id(device) in users,
                  f"device {device_id(device)} addresses memory {memory.kind()} {memory.id()}, but "
                  f"PJRT_Memory_AddressableByDevices lists only {sorted(users)}")
    for memory in ctx.client.addressable_memories():
        users = memory.addressable_by_devices()
        check(users, f"memory {memory.kind()} {memory.id()} is addressable by no device")
        for device in users:
            held = {(m.kind(), m.id()) for m in device.addressable_memories()}
            check((memory.kind(), memory.id()) in held,
                  f"memory {memory.kind()} {memory.id()} lists device {device_id(device)}, which does not "
                  "list it among its addressable memories")


@case("memories")
def default_memory(ctx: PluginUnderTest) -> None:
    """A device's default memory is addressable by that device."""
    for device in ctx.devices:
        memory = device.default_memory()
        users = {device_id(d) for d in memory.addressable_by_devices()}
        check(device_id(device) in users, f"the default memory of device {device_id(device)} is not addressable by it")


def settled_bytes_in_use(ctx: PluginUnderTest, device: Any) -> int:
    """PJRT_Device_MemoryStats' bytes_in_use once buffers of earlier cases left to the collector
    are gone; skips, saying why, where the plugin does not report memory statistics."""
    gc.collect()
    try:
        return device.memory_stats().bytes_in_use
    except PjrtError as exc:
        if exc.code is ErrorCode.UNIMPLEMENTED:
            skip(f"plugin {ctx.name} does not report memory statistics ({describe(exc)})")
        raise


@case("devices")
def memory_stats_follow_allocations(ctx: PluginUnderTest) -> None:
    """PJRT_Device_MemoryStats (where implemented): bytes_in_use grows by at least a new buffer's
    size on its device and shrinks by as much when the buffer is deleted."""
    device = ctx.device
    size = 1 << 20
    before = settled_bytes_in_use(ctx, device)
    buffer = ctx.put(np.zeros(size // 4, np.float32), device=device)
    during = device.memory_stats().bytes_in_use
    check(during - before >= size, f"PJRT_Device_MemoryStats: bytes_in_use went from {before} to {during} when a "
                                   f"{size}-byte buffer was made on the device")
    buffer.delete()
    gc.collect()
    after = device.memory_stats().bytes_in_use
    check(during - after >= size, f"PJRT_Device_MemoryStats: bytes_in_use went from {during} to {after} when a "
                                  f"{size}-byte buffer was deleted; its memory is still counted")
