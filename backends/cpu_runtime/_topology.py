"""Device descriptions and the topology: what the CPU devices are, without a client.

A topology is plain data (platform, version, one description per device, attributes), so it
serializes as a small tagged JSON document; :func:`deserialize_topology` checks every field and
answers InvalidArgument for anything else, since the bytes may come from another process or a
file.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Mapping

from pjrt_hub.abi import DeviceDescription, InvalidArgument, NamedValues, TopologyDescription

__all__ = [
    "DEFAULT_NUM_DEVICES",
    "CpuDeviceDescription",
    "CpuTopologyDescription",
    "deserialize_topology",
    "read_num_devices",
]

#: XLA's CPU plugin creates 4 devices unless told otherwise (``cpu_device_count``).
DEFAULT_NUM_DEVICES = 4

#: Create options that set the device count: ours, and the name XLA's CPU plugin uses.
DEVICE_COUNT_OPTIONS = ("num_devices", "cpu_device_count")

_MAGIC = b"pjrt_hub.cpu_topology\n"
_FORMAT_VERSION = 1


def _plain(value: Any) -> Any:
    """Attribute values as PJRT_NamedValue allows them: str, int, float, bool, list of int."""
    if isinstance(value, (str, int, float, bool)):
        return value
    if isinstance(value, (list, tuple)) and all(isinstance(v, int) and not isinstance(v, bool) for v in value):
        return list(value)
    raise InvalidArgument(
        f"attribute value {value!r} is not a PJRT_NamedValue (str, int, float, bool or list of int)"
    )


def _attributes(values: Mapping[str, Any] | None) -> dict[str, Any]:
    return {str(name): _plain(value) for name, value in (values or {}).items()}


def copied(attributes: Mapping[str, Any]) -> dict[str, Any]:
    """Attributes as a caller gets them: its own mapping and its own lists, so that what it does
    to them never changes what the plugin reports next."""
    return {name: list(value) if isinstance(value, list) else value for name, value in attributes.items()}


class CpuDeviceDescription(DeviceDescription):
    """``PJRT_DeviceDescription`` of one CPU device.

    ``backend`` (the plugin's name) names the device in its strings, which frameworks show users
    (JAX prints a device as its ``to_string``): a numba_cpu device must not read as XLA's own
    ``CpuDevice(id=0)``, or a user thinks the framework fell back to its CPU."""

    __slots__ = ("_id", "_platform_name", "_attributes", "_process_index", "_backend")

    def __init__(self, device_id: int, platform_name: str = "cpu",
                 attributes: Mapping[str, Any] | None = None, process_index: int = 0, backend: str = "") -> None:
        self._id = device_id
        self._platform_name = platform_name
        self._attributes = _attributes(attributes)
        self._process_index = process_index
        self._backend = backend

    def id(self) -> int:
        return self._id

    def process_index(self) -> int:
        return self._process_index

    def attributes(self) -> dict[str, Any]:
        return copied(self._attributes)

    def kind(self) -> str:
        return "cpu"

    def debug_string(self) -> str:
        return f"{self._backend or self._platform_name}:{self._id}"

    def to_string(self) -> str:
        kind = "".join(part.capitalize() for part in self._backend.split("_")) if self._backend else "Cpu"
        return f"{kind}Device(id={self._id})"

    def __repr__(self) -> str:
        return f"<CpuDeviceDescription {self.debug_string()}>"


@dataclass(frozen=True)
class _TopologyData:
    platform_name: str
    platform_version: str
    num_devices: int
    attributes: dict[str, Any] = field(default_factory=dict)
    device_attributes: dict[str, Any] = field(default_factory=dict)
    backend: str = ""


class CpuTopologyDescription(TopologyDescription):
    """``PJRT_TopologyDescription``: N CPU devices of one process."""

    __slots__ = ("_data", "_descriptions")

    def __init__(self, num_devices: int, *, platform_name: str = "cpu", platform_version: str = "",
                 attributes: Mapping[str, Any] | None = None,
                 device_attributes: Mapping[str, Any] | None = None, first_id: int = 0,
                 process_index: int = 0, backend: str = "") -> None:
        if isinstance(num_devices, bool) or not isinstance(num_devices, int) or num_devices < 1:
            raise InvalidArgument(f"a CPU topology needs a positive number of devices, got {num_devices!r}")
        self._data = _TopologyData(platform_name, platform_version, num_devices,
                                   _attributes(attributes), _attributes(device_attributes), backend)
        # In a job of several processes, device ids are global: this process's start at first_id.
        self._descriptions = tuple(
            CpuDeviceDescription(first_id + i, platform_name, self._data.device_attributes, process_index, backend)
            for i in range(num_devices)
        )

    @property
    def num_devices(self) -> int:
        return self._data.num_devices

    @property
    def descriptions(self) -> tuple[CpuDeviceDescription, ...]:
        return self._descriptions

    def platform_name(self) -> str:
        return self._data.platform_name

    def platform_version(self) -> str:
        return self._data.platform_version

    def get_device_descriptions(self) -> list[DeviceDescription]:
        return list(self._descriptions)

    def attributes(self) -> dict[str, Any]:
        return copied(self._data.attributes)

    def serialize(self) -> bytes:
        data = self._data
        document = {
            "version": _FORMAT_VERSION,
            "platform_name": data.platform_name,
            "platform_version": data.platform_version,
            "num_devices": data.num_devices,
            "attributes": data.attributes,
            "device_attributes": data.device_attributes,
            "backend": data.backend,
        }
        return _MAGIC + json.dumps(document, sort_keys=True).encode()

    def __repr__(self) -> str:
        return f"<CpuTopologyDescription {self._data.platform_name} x{self._data.num_devices}>"


def deserialize_topology(serialized: bytes) -> CpuTopologyDescription:
    """The inverse of :meth:`CpuTopologyDescription.serialize`; InvalidArgument for other bytes."""

    def bad(reason: str) -> InvalidArgument:
        return InvalidArgument(f"PJRT_TopologyDescription_Deserialize: {reason}")

    if not isinstance(serialized, (bytes, bytearray, memoryview)):
        raise bad(f"expected bytes, got {type(serialized).__name__}")
    serialized = bytes(serialized)
    if not serialized.startswith(_MAGIC):
        raise bad("these bytes are not a serialized pjrt-hub CPU topology")
    try:
        document = json.loads(serialized[len(_MAGIC):].decode())
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise bad(f"corrupt topology document ({exc})") from None
    if not isinstance(document, dict):
        raise bad("corrupt topology document (not an object)")
    if document.get("version") != _FORMAT_VERSION:
        raise bad(f"unsupported topology format version {document.get('version')!r} "
                  f"(this runtime reads version {_FORMAT_VERSION})")
    expected = {"platform_name": str, "platform_version": str, "num_devices": int,
                "attributes": dict, "device_attributes": dict}
    for key, kind in expected.items():
        value = document.get(key)
        if not isinstance(value, kind) or isinstance(value, bool):
            raise bad(f"field {key!r} should be {kind.__name__}, got {value!r}")
    backend = document.get("backend", "")  # absent from documents written before it was added
    if not isinstance(backend, str):
        raise bad(f"field 'backend' should be str, got {backend!r}")
    return CpuTopologyDescription(
        document["num_devices"], platform_name=document["platform_name"],
        platform_version=document["platform_version"], attributes=document["attributes"],
        device_attributes=document["device_attributes"], backend=backend,
    )


def read_num_devices(options: NamedValues, default: int = DEFAULT_NUM_DEVICES) -> int:
    """The device count from create options (``num_devices`` or XLA's ``cpu_device_count``)."""
    given: dict[str, int] = {}
    for name in DEVICE_COUNT_OPTIONS:
        if name not in options:
            continue
        value = options[name]
        if isinstance(value, bool) or not isinstance(value, int):
            raise InvalidArgument(
                f"Option passed to PJRT_Client_Create with name {name} has type "
                f"{type(value).__name__} but expected type int"
            )
        if value < 1:
            raise InvalidArgument(f"create option {name}={value}: the device count must be at least 1")
        given[name] = value
    if len(set(given.values())) > 1:
        raise InvalidArgument(
            "create options num_devices and cpu_device_count disagree "
            f"({given['num_devices']} vs {given['cpu_device_count']}); pass one of them"
        )
    return next(iter(given.values()), default)
