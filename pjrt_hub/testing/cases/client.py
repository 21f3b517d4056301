"""client: ``PJRT_Client_*`` (upstream's PlatformName, ClientProcessIndex, ClientDevices,
ClientAddressableDevices, LookupDevice*, LookupAddressableDevice, GetDefaultDeviceAssignment*)."""

from __future__ import annotations

from pjrt_hub.abi import ErrorCode

from .._case import case, check, expect_error
from .._context import PluginUnderTest


def device_id(device) -> int:
    return device.get_description().id()


@case("client")
def platform_name(ctx: PluginUnderTest) -> None:
    """PJRT_Client_PlatformName is a non-empty lower-case name, as frameworks key platforms by it."""
    name = ctx.client.platform_name()
    check(isinstance(name, str) and name, f"PJRT_Client_PlatformName returned {name!r}, expected a non-empty string")
    check(name == name.lower(), f"PJRT_Client_PlatformName {name!r} is not lower case")


@case("client")
def platform_version(ctx: PluginUnderTest) -> None:
    """PJRT_Client_PlatformVersion is a string."""
    version = ctx.client.platform_version()
    check(isinstance(version, str), f"PJRT_Client_PlatformVersion returned {type(version).__name__}, expected str")


@case("client")
def process_index(ctx: PluginUnderTest) -> None:
    """PJRT_Client_ProcessIndex is 0 in a single-process run."""
    index = ctx.client.process_index()
    check(index == 0, f"PJRT_Client_ProcessIndex returned {index!r}, expected 0 for a single process")


@case("client")
def devices(ctx: PluginUnderTest) -> None:
    """PJRT_Client_Devices is non-empty, with unique device ids."""
    devices = ctx.client.devices()
    check(len(devices) > 0, "PJRT_Client_Devices returned no device")
    ids = [device_id(d) for d in devices]
    check(len(set(ids)) == len(ids), f"PJRT_Client_Devices has duplicate device ids: {ids}")


@case("client")
def addressable_devices(ctx: PluginUnderTest) -> None:
    """PJRT_Client_AddressableDevices is a non-empty subset of PJRT_Client_Devices."""
    all_ids = {device_id(d) for d in ctx.client.devices()}
    ids = [device_id(d) for d in ctx.devices]
    check(set(ids) <= all_ids, f"addressable device ids {ids} are not all among the client's devices {sorted(all_ids)}")


@case("client")
def lookup_device(ctx: PluginUnderTest) -> None:
    """PJRT_Client_LookupDevice finds every device by its id."""
    for device in ctx.client.devices():
        wanted = device_id(device)
        found = ctx.client.lookup_device(wanted)
        check(device_id(found) == wanted, f"PJRT_Client_LookupDevice({wanted}) returned device {device_id(found)}")


@case("client")
def lookup_addressable_device(ctx: PluginUnderTest) -> None:
    """PJRT_Client_LookupAddressableDevice finds every addressable device by its local hardware id."""
    for device in ctx.devices:
        local = device.local_hardware_id()
        found = ctx.client.lookup_addressable_device(local)
        check(found.local_hardware_id() == local and device_id(found) == device_id(device),
              f"PJRT_Client_LookupAddressableDevice({local}) returned device {device_id(found)}, "
              f"expected {device_id(device)}")


@case("client")
def lookup_device_negative_id(ctx: PluginUnderTest) -> None:
    """PJRT_Client_LookupDevice(-1) fails with InvalidArgument "No matching device found for device_id -1"."""
    expect_error(lambda: ctx.client.lookup_device(-1), code=ErrorCode.INVALID_ARGUMENT,
                 message="No matching device found for device_id -1", what="PJRT_Client_LookupDevice(-1)")


@case("client")
def lookup_device_out_of_range_id(ctx: PluginUnderTest) -> None:
    """PJRT_Client_LookupDevice of an id past every device fails with InvalidArgument naming the id."""
    wanted = max(device_id(d) for d in ctx.client.devices()) + 1
    expect_error(lambda: ctx.client.lookup_device(wanted), code=ErrorCode.INVALID_ARGUMENT,
                 message=f"No matching device found for device_id {wanted}",
                 what=f"PJRT_Client_LookupDevice({wanted})")


def _check_assignment(ctx: PluginUnderTest, replicas: int, partitions: int) -> None:
    assignment = ctx.client.default_device_assignment(replicas, partitions)
    what = f"PJRT_Client_DefaultDeviceAssignment({replicas}, {partitions})"
    rows = [tuple(r) for r in assignment]
    check(len(rows) == replicas and all(len(r) == partitions for r in rows),
          f"{what} returned {rows}, expected {replicas} rows of {partitions}")
    ids = [i for r in rows for i in r]
    known = {device_id(d) for d in ctx.client.devices()}
    check(len(set(ids)) == len(ids) and set(ids) <= known,
          f"{what} returned {rows}: ids must be distinct devices of the client {sorted(known)}")


@case("client")
def default_device_assignment(ctx: PluginUnderTest) -> None:
    """PJRT_Client_DefaultDeviceAssignment gives distinct, existing devices, replicas x partitions."""
    _check_assignment(ctx, 1, 1)
    if len(ctx.client.devices()) >= 2:
        _check_assignment(ctx, 2, 1)


@case("client")
def addressable_memories(ctx: PluginUnderTest) -> None:
    """PJRT_Client_AddressableMemories holds every memory of every addressable device."""
    held = {(m.kind(), m.id()) for m in ctx.client.addressable_memories()}
    for device in ctx.devices:
        for memory in device.addressable_memories():
            check((memory.kind(), memory.id()) in held,
                  f"memory {memory.kind()} {memory.id()} of device {device_id(device)} is not among "
                  f"PJRT_Client_AddressableMemories {sorted(held)}")
