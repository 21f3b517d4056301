"""version: the plugin is what it says it is.

Upstream's ``ApiVersion`` test checks that a plugin reports the version of the header it was built
with. Here the declaration plays the header: the version read before loading must be the version
the Api reports, and a Python plugin that declares a minor must implement the calls of that minor
(a C plugin's table is checked by the ``abi`` group instead). A call left to the binding's
placeholder raises Unimplemented at run time; a framework that trusted the declaration would make
that call, so the lie is caught here, by name, before it is.
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

from pjrt_hub.abi import ApiVersion, api_methods, binding

from .._case import Case, CaseFailure, CaseSkipped, add_case, case, check, fail
from .._context import PluginUnderTest, describe
from .._programs import add_one


@case("version")
def loaded(ctx: PluginUnderTest) -> None:
    """The registry found the plugin, read its declaration and the version policy accepted it."""
    r = ctx.load_record  # as loaded: what its Api does later is other cases' to say
    if r.outcome.value != "loaded":
        detail = f" ({r.error})" if r.error and r.error not in (r.reason or "") else ""
        fail(f"plugin {r.name} cannot be used: {r.outcome.value}: {r.reason}{detail}")


@case("version")
def api_version(ctx: PluginUnderTest) -> None:
    """The version the plugin's Api reports (PJRT_Api.pjrt_api_version) is the one it declared."""
    reported = ApiVersion.parse(ctx.api.api_version())
    check(reported == ctx.declared_version,
          f"plugin {ctx.name} declared PJRT API {ctx.declared_version} but its Api reports {reported}")
    check(reported.major == ctx.framework.major,
          f"plugin {ctx.name} reports major version {reported.major}, the framework's is {ctx.framework.major}")


# -- which binding methods a Python plugin implements ------------------------------------------

_B = binding


def _instances(ctx: PluginUnderTest) -> tuple[dict[type, Any], list[str]]:
    """The plugin's own object for each binding class, reached by calls of the oldest minors.

    Returns the objects found and, for classes it could not reach, why.
    """
    found: dict[type, Any] = {}
    problems: list[str] = []

    def get(cls: type, make: Callable[[], Any], how: str) -> None:
        try:
            obj = make()
        except CaseSkipped:  # the shared client failed in an earlier case
            raise
        except (CaseFailure, Exception) as exc:  # noqa: BLE001 - reported, not raised
            problems.append(f"{cls.__name__} (no instance: {how} failed: {describe(exc)})")
            return
        found[cls] = getattr(obj, "unwrapped", obj)

    # The Api and the client are the cases' shared objects: a failure to make them is the
    # case's (and later cases are skipped with it), not a class this search could not reach.
    found[_B.Api] = getattr(ctx.api, "unwrapped", ctx.api)
    found[_B.Client] = getattr(ctx.client, "unwrapped", ctx.client)
    if _B.Client in found:
        get(_B.Device, lambda: ctx.device, "Client.addressable_devices")
    if _B.Device in found:
        get(_B.DeviceDescription, lambda: ctx.device.get_description(), "Device.get_description")
        get(_B.Memory, lambda: ctx.device.default_memory(), "Device.default_memory")
        get(_B.Buffer, lambda: ctx.put(np.zeros(4, np.float32)), "Client.buffer_from_host_buffer")
        get(_B.LoadedExecutable, lambda: ctx.compile(add_one()), "Client.compile")
    if _B.Buffer in found:
        get(_B.Event, lambda: found[_B.Buffer].ready_event(), "Buffer.ready_event")
    if _B.LoadedExecutable in found:
        get(_B.Executable, lambda: found[_B.LoadedExecutable].get_executable(),
            "LoadedExecutable.get_executable")
    return found, problems


def _implements(obj: Any, base: type, method: str) -> bool:
    return getattr(type(obj), method, None) is not getattr(base, method)


def _owner(method_path: str) -> tuple[type, str]:
    cls_name, method = method_path.split(".")
    return getattr(_B, cls_name), method


def _c_name(cls: type, method: str) -> str:
    info = api_methods(cls)[method]
    return info.c_function or method


#: The calls every plugin must implement: those ``pjrt_c_api_test.cc`` exercises, the core of
#: every framework's use. A plugin that leaves one to the binding's placeholder does not conform.
REQUIRED_CALLS: tuple[str, ...] = (
    "Api.client_create", "Api.plugin_attributes",
    "Client.platform_name", "Client.process_index", "Client.platform_version", "Client.devices",
    "Client.addressable_devices", "Client.lookup_device", "Client.lookup_addressable_device",
    "Client.addressable_memories", "Client.compile", "Client.default_device_assignment",
    "Client.buffer_from_host_buffer",
    "DeviceDescription.id", "DeviceDescription.process_index", "DeviceDescription.kind",
    "DeviceDescription.debug_string", "DeviceDescription.to_string",
    "Device.get_description", "Device.is_addressable", "Device.local_hardware_id",
    "Device.addressable_memories", "Device.default_memory",
    "Memory.id", "Memory.kind", "Memory.debug_string", "Memory.to_string", "Memory.addressable_by_devices",
    "Buffer.element_type", "Buffer.dimensions", "Buffer.on_device_size_in_bytes", "Buffer.device",
    "Buffer.memory", "Buffer.delete", "Buffer.is_deleted", "Buffer.to_host_buffer", "Buffer.ready_event",
    "Buffer.increase_external_reference_count", "Buffer.decrease_external_reference_count",
    "Event.is_ready", "Event.error", "Event.await_", "Event.on_ready",
    "Executable.name", "Executable.num_replicas", "Executable.num_partitions", "Executable.num_outputs",
    "LoadedExecutable.get_executable", "LoadedExecutable.addressable_devices", "LoadedExecutable.delete",
    "LoadedExecutable.is_deleted", "LoadedExecutable.execute",
)


@case("version", kind="python")
def required_calls(ctx: PluginUnderTest) -> None:
    """Every core call (the ones the PJRT C API tests exercise) is implemented, not left to the binding's placeholder."""
    found, problems = ctx.memo("instances", lambda: _instances(ctx))
    missing = []
    for path in REQUIRED_CALLS:
        cls, method = _owner(path)
        obj = found.get(cls)
        if obj is not None and not _implements(obj, cls, method):
            missing.append(f"{type(obj).__name__}.{method} ({_c_name(cls, method)})")
    if missing or problems:
        fail(f"plugin {ctx.name} does not implement required calls: {', '.join(missing) or 'none missing'}"
             + (f"; could not check {', '.join(problems)}" if problems else ""))


def _minor_case(cls: type, method: str, since: int) -> Case:
    c_name = _c_name(cls, method)

    def run(ctx: PluginUnderTest) -> None:
        found, problems = ctx.memo("instances", lambda: _instances(ctx))
        obj = found.get(cls)
        if obj is None:
            fail(f"cannot check {cls.__name__}.{method}: "
                 + "; ".join(p for p in problems if p.startswith(cls.__name__)))
        check(_implements(obj, cls, method),
              f"plugin {ctx.name} declares PJRT API {ctx.declared_version}, but {type(obj).__name__}.{method} "
              f"({c_name}, added in 0.{since}) is not implemented: it is the binding's placeholder, "
              "which raises Unimplemented")

    return Case("version", f"implements_{cls.__name__}.{method}",
                f"A plugin that declares 0.{since} or newer implements {c_name} (added in 0.{since}).",
                run, min_api_minor=since, kind="python")


for _cls in (_B.Api, _B.Client, _B.Device, _B.DeviceDescription, _B.Memory, _B.Buffer, _B.Event,
             _B.Executable, _B.LoadedExecutable, _B.TopologyDescription):
    for _name, _info in api_methods(_cls).items():
        # Only calls of the history's own minors: the older ones are the required core above or
        # optional, and a deprecated call (LoadedExecutable.fingerprint) is never demanded.
        if _info.since and _cls.__dict__.get(_name) is not None:
            add_case(_minor_case(_cls, _name, _info.since))
