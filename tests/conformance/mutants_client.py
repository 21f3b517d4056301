"""Mutant plugins for the cases read from the client area of pjrt_c_api.h
(pjrt_hub/testing/cases/contract_client.py): one defect each, of the kinds vendors ship there.

A value right in itself but owned wrongly (attributes or a device list handed out as the plugin's
own, so a caller's write changes what it reports), a handle that is not the one the client owns
(a lookup or a default memory made anew on every call), a client or an event shared where each
caller should get its own, an answer that changes between calls (a topology's order, its
serialized form), descriptions that do not tell things apart (or a kind that tells devices
apart), callbacks that run before their event is ready, and a topology that loses part of itself
on its way through its bytes. Each is the toy, or the reference plugin's runtime, with one method
replaced; ``tests/conformance/test_mutation_contract.py`` runs them and the unmodified bases as
controls. Like the main catalogue, the file also loads on
its own: ``pjrt-hub conformance --mutation-report tests/conformance/mutants_client.py``.
"""

from __future__ import annotations

import copy
import importlib
import importlib.util
import json
import threading
import time
from pathlib import Path
from typing import Any

from pjrt_hub.abi import Internal, InvalidArgument
from pjrt_hub.testing._mutation import Mutant
from pjrt_hub.testing.toy import ToyApi, ToyBuffer, ToyDeviceDescription, ToyEvent, ToyTopology

if __package__:
    from .mutants import BASES, reference, toy
else:  # loaded as a plain file by the CLI: the main catalogue is its sibling
    _spec = importlib.util.spec_from_file_location("pjrt_hub_mutants_main", Path(__file__).with_name("mutants.py"))
    assert _spec is not None and _spec.loader is not None
    _main = importlib.util.module_from_spec(_spec)
    _spec.loader.exec_module(_main)
    BASES, reference, toy = _main.BASES, _main.reference, _main.toy

__all__ = ["BASES", "MUTANTS"]


def _cpu_api() -> Any:
    return importlib.import_module("pjrt_hub.backends.cpu_runtime._api").CpuApi


# -- plugin and client ------------------------------------------------------------------------------


def _attributes_kept(self: ToyApi) -> dict[str, Any]:
    """The attributes built once and handed out as they are, to every caller."""
    kept = self.__dict__.get("_kept_attributes")
    if kept is None:
        kept = self.__dict__["_kept_attributes"] = ToyApi.plugin_attributes(self)
    return kept


def _attribute_lists_shared(self: Any) -> dict[str, Any]:
    """A copy of the mapping whose lists are still the plugin's (the runtime's bug before the
    contract cases found it)."""
    return dict(self._attributes)


def _one_client(self: ToyApi, options: Any = None, *, kv_store: Any = None) -> Any:
    """A process-wide client: every PJRT_Client_Create returns the first one."""
    kept = self.__dict__.get("_the_client")
    if kept is None:
        kept = self.__dict__["_the_client"] = ToyApi.client_create(self, options, kv_store=kv_store)
    return kept


def _refuse_callbacks(self: ToyApi, options: Any = None, *, kv_store: Any = None) -> Any:
    if kv_store is not None:
        raise InvalidArgument("PJRT_Client_Create: this plugin runs in one process; it takes no key-value callbacks")
    return ToyApi.client_create(self, options)


def _lookup_new_handle(self: Any, device_id: int) -> Any:
    """A fresh wrapper of the device on every lookup, equal in every answer but not the handle."""
    from pjrt_hub.testing.toy import ToyClient

    return copy.copy(ToyClient.lookup_device(self, device_id))


# -- devices and memories -----------------------------------------------------------------------------


class _PlatformOnlyDescription(ToyDeviceDescription):
    def debug_string(self) -> str:
        return "TOY"


def _memory_made_per_call(self: Any) -> Any:
    return copy.copy(self.memories[0])


class _KindPerDeviceDescription(ToyDeviceDescription):
    """A kind that numbers the device, as if it named the device rather than its kind."""

    def kind(self) -> str:
        return f"toy cpu {self._id}"


class _KeptAttributesDescription(ToyDeviceDescription):
    """Attributes built once and handed out as they are."""

    def __init__(self, device_id: int) -> None:
        super().__init__(device_id)
        self._kept = {"core_count": 1, "core_ids": [device_id]}

    def attributes(self) -> dict[str, Any]:
        return self._kept


def _device_attributes_kept(self: Any) -> dict[str, Any]:
    """The device's own mapping for every PJRT_Device_GetAttributes (the held-out catalogue's
    toy_device_attributes_shared_dict)."""
    kept = self.__dict__.get("_kept_attributes")
    if kept is None:
        kept = self.__dict__["_kept_attributes"] = {"toy_device": True}
    return kept


# -- events ------------------------------------------------------------------------------------------


class _MovedErrorEvent(ToyEvent):
    """An event whose status is moved out to the first waiter, as a C++ plugin that returns
    ``std::move(status_)`` from Await does: later calls find no error."""

    def await_(self, timeout: float | None = None) -> None:
        try:
            ToyEvent.await_(self, timeout)
        finally:
            self._error = None


def _ready_event_moves_its_error(self: ToyBuffer) -> Any:
    event = ToyBuffer.ready_event(self)
    moved = _MovedErrorEvent(ready=False)
    moved.set(event.error())
    return moved


class _SharedEvent(ToyEvent):
    """The buffer's own event handed to every caller; Destroy frees it for all of them."""

    def destroy(self) -> None:
        self._error = Internal("PJRT_Event used after PJRT_Event_Destroy")


def _callbacks_before_ready(self: Any, error: Any = None) -> None:
    """The callbacks run as "the work is done", and only then the event is marked done (the
    held-out catalogue's ref_on_ready_runs_before_event_is_ready)."""
    events = importlib.import_module("pjrt_hub.backends.cpu_runtime._events")
    with events._CALLBACKS:
        if self._done:
            raise InvalidArgument("PJRT_Event was set twice; an event completes exactly once")
        callbacks, self._callbacks = self._callbacks, None
    for callback in callbacks or ():
        events._call(callback, error)
    with events._CALLBACKS:
        self._error, self._done, latch = error, True, self._latch
    if latch is not None:
        latch.release()


def _callbacks_handed_to_a_thread(self: Any, error: Any = None) -> None:
    """The callbacks handed to a thread of their own, and the event marked done after: a race
    the callbacks win almost always (a thread starts slower than the setter goes on)."""
    events = importlib.import_module("pjrt_hub.backends.cpu_runtime._events")
    with events._CALLBACKS:
        if self._done:
            raise InvalidArgument("PJRT_Event was set twice; an event completes exactly once")
        callbacks, self._callbacks = self._callbacks, None
    if callbacks:
        threading.Thread(target=lambda: [events._call(c, error) for c in callbacks], daemon=True).start()
    with events._CALLBACKS:
        self._error, self._done, latch = error, True, self._latch
    if latch is not None:
        latch.release()


def _cpu_event() -> Any:
    return importlib.import_module("pjrt_hub.backends.cpu_runtime._events").CpuEvent


def _ready_event_shared(self: ToyBuffer) -> Any:
    shared = self.__dict__.get("_shared_ready")
    if shared is None:
        shared = self.__dict__["_shared_ready"] = _SharedEvent(error=ToyBuffer.ready_event(self).error())
    return shared


# -- topology ------------------------------------------------------------------------------------------


class _ReorderingTopology(ToyTopology):
    """Descriptions listed from a map rebuilt on every call: the order moves from call to call."""

    def __init__(self, num_devices: int) -> None:
        super().__init__(num_devices)
        self.calls = 0

    def get_device_descriptions(self) -> list[Any]:
        self.calls += 1
        shift = self.calls % len(self.descriptions)
        return self.descriptions[shift:] + self.descriptions[:shift]


class _StampedTopology(ToyTopology):
    """A serialization that records when it was made, so no two are the same key."""

    def serialize(self) -> bytes:
        return json.dumps({"platform": "toy", "devices": len(self.descriptions), "made": time.monotonic_ns()}).encode()


def _created_without_ids(self: Any, options: Any = None) -> Any:
    """Descriptions of a topology made without a client, which never assigned ids: all 0."""
    runtime = importlib.import_module("pjrt_hub.backends.cpu_runtime._topology")
    topology = runtime.CpuTopologyDescription(self._num_devices, platform_name=self._platform_name,
                                              platform_version=self._platform_version)
    topology._descriptions = tuple(runtime.CpuDeviceDescription(0, self._platform_name)
                                   for _ in topology.descriptions)
    return topology


def _cpu_topology() -> Any:
    return importlib.import_module("pjrt_hub.backends.cpu_runtime._topology")


def _deserialized_without_attributes(serialized: bytes) -> Any:
    """A topology read back with its platform and device count only (the held-out catalogue's
    ref_topology_round_trip_loses_attributes)."""
    runtime = _cpu_topology()
    topology = runtime.deserialize_topology(serialized)
    return runtime.CpuTopologyDescription(topology.num_devices, platform_name=topology.platform_name(),
                                          platform_version=topology.platform_version())


def _deserialized_without_version(serialized: bytes) -> Any:
    """A reader that fills in no platform version: the field was added after it was written."""
    runtime = _cpu_topology()
    topology = runtime.deserialize_topology(serialized)
    return runtime.CpuTopologyDescription(topology.num_devices, platform_name=topology.platform_name(),
                                          attributes=topology.attributes(), backend=topology._data.backend)


def _cpu_api_module() -> Any:
    return importlib.import_module("pjrt_hub.backends.cpu_runtime._api")


def _device_count_ignored(options: Any, default: int = 4) -> int:
    """The device count the plugin was built with, whatever the create options say."""
    return default


def _one_device_refused(options: Any, default: int = 4) -> int:
    """A count check off by one: a single device is refused (and the others taken)."""
    count = _cpu_topology().read_num_devices(options, default)
    if any(options.get(name) == 1 for name in ("num_devices", "cpu_device_count")):
        raise InvalidArgument("create option device count=1: the device count must be at least 2")
    return count


_client_create = _cpu_api().client_create


def _jobs_refused(self: Any, options: Any = None, *, kv_store: Any = None) -> Any:
    """A client of one process only: any job of several is refused as a bad argument."""
    if dict(options or {}).get("num_nodes", 1) != 1:
        raise InvalidArgument("create option num_nodes: this plugin runs in one process")
    return _client_create(self, options, kv_store=kv_store)


def _ids_within_their_process(ident: int, *rest: Any) -> Any:
    """The devices of the other processes keep the ids their own process gives them (0, 1, ...):
    with every process's devices counted from 0, they collide with this process's."""
    runtime = _cpu_topology()
    return runtime.CpuDeviceDescription(ident % runtime.DEFAULT_NUM_DEVICES, *rest)


def _json_letting_errors_out() -> Any:
    """A reader of the peers' topologies whose parser errors leave as they are, not as PJRT errors."""

    def loads(raw: Any) -> Any:
        try:
            return json.loads(raw)
        except ValueError as exc:
            raise RuntimeError(f"cannot parse a peer's topology: {exc}") from None

    return type("StrictJson", (), {"dumps": staticmethod(json.dumps), "loads": staticmethod(loads)})


_topology_serialize = _cpu_topology().CpuTopologyDescription.serialize


def _serialize_with_instance_address(self: Any) -> bytes:
    """The held-out catalogue's ref_topology_serialization_has_instance_address: the document
    carries the topology object's address, "unique" but no cache key."""
    runtime = _cpu_topology()
    data = _topology_serialize(self)
    document = json.loads(data[len(runtime._MAGIC):].decode())
    document["instance"] = id(self)
    return runtime._MAGIC + json.dumps(document, sort_keys=True).encode()


MUTANTS = [
    Mutant("attributes_handed_out", "plugin", "PJRT_Plugin_Attributes hands every caller the plugin's own mapping",
           ("plugin/attributes_stay_the_same",), toy(api={"plugin_attributes": _attributes_kept})),
    Mutant("runtime_attribute_lists_shared", "plugin", "PJRT_Plugin_Attributes copies the mapping but not the "
           "version lists in it", ("plugin/attributes_stay_the_same",),
           reference((_cpu_api(), "plugin_attributes", _attribute_lists_shared)), base="reference"),
    Mutant("one_client_per_process", "client", "PJRT_Client_Create returns the first client it made, every time",
           ("client/create_makes_a_new_client",), toy(api={"client_create": _one_client})),
    Mutant("refuses_key_value_callbacks", "client", "PJRT_Client_Create of one process refuses key-value callbacks",
           ("client/create_takes_key_value_callbacks",), toy(api={"client_create": _refuse_callbacks})),
    Mutant("devices_list_handed_out", "client", "PJRT_Client_Devices returns the client's own list",
           ("client/answers_stay_the_same",), toy(client={"devices": lambda self: self.devices_list})),
    Mutant("addresses_only_its_first_device", "client", "PJRT_Client_AddressableDevices of a single-process client "
           "lists its first device only", ("client/single_process_addresses_everything",),
           toy(client={"addressable_devices": lambda self: self.devices_list[:1]})),
    Mutant("lookup_makes_a_new_handle", "client", "PJRT_Client_LookupDevice wraps the device anew on every call",
           ("client/lookups_give_the_listed_handles",), toy(client={"lookup_device": _lookup_new_handle})),
    Mutant("default_memory_made_per_call", "devices", "PJRT_Device_DefaultMemory wraps the memory anew on every call",
           ("devices/descriptions_and_memories_stay_the_same",), toy(device={"default_memory": _memory_made_per_call})),
    Mutant("debug_string_names_the_platform", "devices", "every device's PJRT_DeviceDescription_DebugString is 'TOY'",
           ("devices/debug_strings_tell_them_apart",),
           toy(device={"get_description": lambda self: _PlatformOnlyDescription(self.description.id())})),
    Mutant("memory_ids_per_device", "memories", "PJRT_Memory_Id counts within a device: every device memory is 0",
           ("memories/ids_unique_within_a_kind",),
           toy(memory={"id": lambda self: 0 if self.kind() == "device" else self._id})),
    Mutant("await_moves_the_error_out", "events", "PJRT_Event_Await hands its error to the first waiter; "
           "PJRT_Event_Error then says there was none", ("events/error_is_the_same_on_every_call",),
           toy(buffer={"ready_event": _ready_event_moves_its_error})),
    Mutant("ready_event_freed_for_all", "events", "PJRT_Buffer_ReadyEvent hands out the buffer's own event, and "
           "PJRT_Event_Destroy of it breaks it for every holder", ("events/destroying_an_event_leaves_the_work_alone",),
           toy(buffer={"ready_event": _ready_event_shared})),
    Mutant("topology_order_moves", "topology", "PJRT_TopologyDescription_GetDeviceDescriptions lists the devices in "
           "another order on each call", ("topology/answers_stay_the_same",),
           toy(client={"topology_description": lambda self: _ReorderingTopology(len(self.devices_list))})),
    Mutant("topology_serialization_stamped", "topology", "PJRT_TopologyDescription_Serialize records when it ran",
           ("topology/serialized_form_is_a_stable_cache_key",),
           toy(client={"topology_description": lambda self: _StampedTopology(len(self.devices_list))})),
    Mutant("created_topology_without_ids", "topology", "PJRT_TopologyDescription_Create gives every device "
           "description id 0", ("topology/create_makes_a_new_topology",),
           reference((_cpu_api(), "topology_create", _created_without_ids)), base="reference"),
    # -- from the held-out catalogue's misses, and a defect of the same kind beside each ----------------
    Mutant("kind_per_device", "devices", "PJRT_DeviceDescription_Kind numbers the device ('toy cpu 0', "
           "'toy cpu 1') of identical devices", ("devices/kind_names_the_kind_not_the_device",),
           toy(device={"get_description": lambda self: _KindPerDeviceDescription(self.description.id())})),
    Mutant("device_attributes_handed_out", "devices", "PJRT_Device_GetAttributes returns the device's own mapping: "
           "a caller's write shows in later calls", ("devices/attributes_are_the_callers",),
           toy(device={"get_attributes": _device_attributes_kept})),
    Mutant("description_attributes_handed_out", "devices", "PJRT_DeviceDescription_Attributes returns the "
           "description's own mapping and lists", ("devices/attributes_are_the_callers",),
           toy(device={"get_description": lambda self: self.__dict__.setdefault(
               "_kept_description", _KeptAttributesDescription(self.description.id()))})),
    Mutant("on_ready_before_the_event_is_ready", "events", "PJRT_Event_OnReady's callbacks run before the event is "
           "marked ready: inside them PJRT_Event_IsReady is false", ("events/ready_when_on_ready_runs",),
           reference((_cpu_event(), "set", _callbacks_before_ready)), base="reference"),
    Mutant("on_ready_races_the_event", "events", "PJRT_Event_OnReady's callbacks start on a thread before the event "
           "is marked ready", ("events/ready_when_on_ready_runs",),
           reference((_cpu_event(), "set", _callbacks_handed_to_a_thread)), base="reference"),
    Mutant("deserialized_topology_without_attributes", "topology", "PJRT_TopologyDescription_Deserialize drops the "
           "topology's attributes", ("topology/deserialize_gives_back_the_topology",),
           reference((_cpu_api_module(), "deserialize_topology", _deserialized_without_attributes)), base="reference"),
    Mutant("deserialized_topology_without_version", "topology", "PJRT_TopologyDescription_Deserialize leaves the "
           "platform version empty", ("topology/deserialize_gives_back_the_topology",),
           reference((_cpu_api_module(), "deserialize_topology", _deserialized_without_version)), base="reference"),
    # -- from the mutation survivors of the runtime and the second held-out catalogue -----------------
    Mutant("device_count_option_ignored", "client", "PJRT_Client_Create ignores cpu_device_count: every client has "
           "the plugin's 4 devices", ("client/device_count_option",),
           reference((_cpu_api_module(), "read_num_devices", _device_count_ignored)), base="reference"),
    Mutant("one_device_refused", "client", "PJRT_Client_Create refuses cpu_device_count=1 (a bound off by one) and "
           "takes the other counts", ("client/device_count_option",),
           reference((_cpu_api_module(), "read_num_devices", _one_device_refused)), base="reference"),
    Mutant("jobs_refused", "client", "PJRT_Client_Create refuses num_nodes=2 as an invalid argument, though it takes "
           "num_nodes=1", ("client/joins_a_job_through_the_store",),
           reference((_cpu_api(), "client_create", _jobs_refused)), base="reference"),
    Mutant("remote_ids_within_their_process", "client", "a client of a job numbers the other processes' devices from 0, "
           "as their own process does: ids collide across the job", ("client/joins_a_job_through_the_store",),
           reference((_cpu_api_module(), "CpuDeviceDescription", _ids_within_their_process)), base="reference"),
    Mutant("silent_peer_raises_timeout_error", "client", "PJRT_Client_Create of a job whose peer never joins raises "
           "Python's TimeoutError instead of a PJRT error", ("client/joins_a_job_through_the_store",),
           reference((_cpu_api_module(), "DeadlineExceeded", TimeoutError)), base="reference"),
    Mutant("garbled_peer_topology_escapes", "client", "a peer's topology that cannot be parsed escapes "
           "PJRT_Client_Create as a bare RuntimeError", ("client/joins_a_job_through_the_store",),
           reference((_cpu_api_module(), "json", _json_letting_errors_out())), base="reference"),
    Mutant("topology_serialization_has_instance_address", "topology", "PJRT_TopologyDescription_Serialize writes the "
           "topology object's address: two topologies of the same devices serialize differently",
           ("topology/serialized_form_is_a_stable_cache_key",),
           reference((_cpu_topology().CpuTopologyDescription, "serialize", _serialize_with_instance_address)),
           base="reference"),
]
