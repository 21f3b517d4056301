"""topology: ``PJRT_TopologyDescription_*`` of the client's topology."""

from __future__ import annotations

from pjrt_hub.abi import NotFound, Unimplemented

from .._case import case, check, skip
from .._context import PluginUnderTest, describe


@case("topology", min_api_minor=36)
def platform(ctx: PluginUnderTest) -> None:
    """The client's topology has the client's platform name, and a platform version string."""
    topology = ctx.client.topology_description()
    name = topology.platform_name()
    check(name == ctx.client.platform_name(),
          f"PJRT_TopologyDescription_PlatformName is {name!r}, the client's is {ctx.client.platform_name()!r}")
    version = topology.platform_version()
    check(isinstance(version, str), f"PJRT_TopologyDescription_PlatformVersion returned {type(version).__name__}")


@case("topology", min_api_minor=36)
def device_descriptions(ctx: PluginUnderTest) -> None:
    """The topology describes as many devices as the client has, with the same ids."""
    topology = ctx.client.topology_description()
    ids = sorted(d.id() for d in topology.get_device_descriptions())
    expected = sorted(d.get_description().id() for d in ctx.client.devices())
    check(ids == expected, f"PJRT_TopologyDescription_GetDeviceDescriptions has device ids {ids}, the client {expected}")


@case("topology", min_api_minor=75)
def serialize_round_trip(ctx: PluginUnderTest) -> None:
    """PJRT_TopologyDescription_Serialize then PJRT_TopologyDescription_Deserialize keeps the platform
    and the devices (where the plugin deserializes topologies at all: that takes an ahead-of-time
    compiler, which a plugin may not have)."""
    topology = ctx.client.topology_description()
    data = topology.serialize()
    check(isinstance(data, (bytes, bytearray)) and data, f"PJRT_TopologyDescription_Serialize returned {data!r}")
    try:
        again = ctx.api.topology_deserialize(bytes(data))
    except (NotFound, Unimplemented) as exc:
        # XLA's CPU plugins answer NOT_FOUND "No compiler registered for platform" when they are
        # built without a topology compiler: an optional feature missing, not a broken one.
        skip(f"plugin {ctx.name} does not deserialize topologies: {describe(exc)}")
    check(again.platform_name() == topology.platform_name(),
          f"the deserialized topology is of platform {again.platform_name()!r}, expected {topology.platform_name()!r}")
    count, expected = len(again.get_device_descriptions()), len(topology.get_device_descriptions())
    check(count == expected, f"the deserialized topology has {count} devices, expected {expected}")
