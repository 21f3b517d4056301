"""Api, client creation, devices, memories and topology of the host runtime."""

from __future__ import annotations

import pytest
from pjrt_hub.abi import ApiVersion, Device, FailedPrecondition, InvalidArgument, Memory
from pjrt_hub.backends.cpu_runtime import DEFAULT_NUM_DEVICES, MEMORY_KINDS, CpuApi


def test_api_carries_what_the_plugin_passed(compiler):
    api = CpuApi(compiler, platform_name="cpu", api_version=ApiVersion(0, 81),
                 attributes={"xla_version": 2, "stablehlo_current_version": [1, 13, 3]})
    assert api.api_version() == ApiVersion(0, 81)
    assert api.plugin_attributes() == {"xla_version": 2, "stablehlo_current_version": [1, 13, 3]}
    # The caller cannot change the plugin's attributes through the returned dict.
    api.plugin_attributes()["xla_version"] = 99
    assert api.plugin_attributes()["xla_version"] == 2
    assert CpuApi(compiler, api_version="0.115").api_version() == ApiVersion(0, 115)


def test_api_rejects_a_non_compiler_and_bad_attributes(compiler):
    with pytest.raises(InvalidArgument, match="needs a ProgramCompiler"):
        CpuApi(object())
    with pytest.raises(InvalidArgument, match="not a PJRT_NamedValue"):
        CpuApi(compiler, attributes={"bad": {"nested": 1}})
    with pytest.raises(InvalidArgument, match="num_devices must be a positive int"):
        CpuApi(compiler, num_devices=0)


def test_client_has_four_devices_by_default_like_xla(api):
    client = api.client_create()
    assert len(client.devices()) == DEFAULT_NUM_DEVICES == 4
    assert client.addressable_devices() == client.devices()
    assert [d.get_description().id() for d in client.devices()] == [0, 1, 2, 3]
    assert client.platform_name() == "cpu"
    assert client.process_index() == 0
    assert "minihlo" in client.platform_version()


@pytest.mark.parametrize("option", ["num_devices", "cpu_device_count"])
def test_device_count_option(api, option):
    client = api.client_create({option: 2})
    assert [d.local_hardware_id() for d in client.devices()] == [0, 1]


@pytest.mark.parametrize(("options", "message"), [
    ({"intra_op_parallelism_threads": 2},
     "Unexpected option name passed to PJRT_Client_Create: intra_op_parallelism_threads"),
    ({"num_devices": "2"}, "name num_devices has type str but expected type int"),
    ({"num_devices": True}, "name num_devices has type bool but expected type int"),
    ({"asynchronous": 1}, "name asynchronous has type int but expected type bool"),
    ({"num_devices": 0}, "device count must be at least 1"),
    ({"num_devices": 2, "cpu_device_count": 3}, "disagree"),
])
def test_bad_create_options_are_refused(api, options, message):
    with pytest.raises(InvalidArgument, match=message):
        api.client_create(options)


def test_device_descriptions(client):
    device = client.devices()[1]
    description = device.get_description()
    assert description.id() == 1
    assert description.process_index() == 0
    assert description.kind() == "cpu"
    assert description.debug_string() == "cpu:1"
    assert description.to_string() == "CpuDevice(id=1)"
    assert description.attributes() == {}
    assert device.is_addressable()
    assert device.local_hardware_id() == 1
    assert device.get_attributes() == {}


def test_device_attributes_come_from_the_api(compiler):
    client = CpuApi(compiler, device_attributes={"vendor": "host"}).client_create({"num_devices": 1})
    assert client.devices()[0].get_description().attributes() == {"vendor": "host"}


def test_memories_of_a_device(client):
    device = client.devices()[2]
    memories = device.addressable_memories()
    assert [m.kind() for m in memories] == list(MEMORY_KINDS) == ["device", "pinned_host", "unpinned_host"]
    assert [m.kind_id() for m in memories] == [0, 1, 2]
    assert device.default_memory() is memories[0]
    for memory in memories:
        assert isinstance(memory, Memory)
        assert memory.addressable_by_devices() == [device]
        assert "cpu:2" in memory.debug_string()
    # Memory ids are unique across the client.
    ids = [m.id() for m in client.addressable_memories()]
    assert len(ids) == len(set(ids)) == 3 * len(client.devices())
    assert memories[1].to_string() == f"PINNED_HOST_{memories[1].id()}"


def test_lookup_device(client):
    assert client.lookup_device(3) is client.devices()[3]
    assert client.lookup_addressable_device(0) is client.devices()[0]


@pytest.mark.parametrize("device_id", [-1, 4, 1000, "0"])
def test_lookup_unknown_device_fails_like_upstream(client, device_id):
    with pytest.raises(InvalidArgument, match="No matching device found") as info:
        client.lookup_device(device_id)
    assert info.value.message == f"No matching device found for device_id {device_id}"
    with pytest.raises(InvalidArgument, match="No matching device found for local_hardware_id"):
        client.lookup_addressable_device(device_id)


def test_default_device_assignment(client):
    assert client.default_device_assignment(1, 1) == ((0,),)
    assert client.default_device_assignment(2, 1) == ((0,), (1,))
    # XLA places replica r of partition p on device p * replicas + r.
    assert client.default_device_assignment(2, 2) == ((0, 2), (1, 3))
    with pytest.raises(InvalidArgument, match="need 5 devices; there are 4"):
        client.default_device_assignment(5, 1)
    with pytest.raises(InvalidArgument, match="num_partitions must be a positive int"):
        client.default_device_assignment(1, 0)


def test_topology_of_a_client_and_round_trip(api, client):
    topology = client.topology_description()
    assert topology.platform_name() == "cpu"
    assert topology.platform_version() == client.platform_version()
    assert [d.id() for d in topology.get_device_descriptions()] == [0, 1, 2, 3]
    assert topology.attributes() == {"num_devices": 4}
    again = api.topology_deserialize(topology.serialize())
    assert again.serialize() == topology.serialize()
    assert [d.to_string() for d in again.get_device_descriptions()] == [
        d.to_string() for d in topology.get_device_descriptions()]


def test_topology_create(api):
    topology = api.topology_create({"cpu_device_count": 3})
    assert len(topology.get_device_descriptions()) == 3
    with pytest.raises(InvalidArgument, match="Unexpected option name passed to PJRT_TopologyDescription_Create"):
        api.topology_create({"asynchronous": True})


@pytest.mark.parametrize(("data", "message"), [
    (b"garbage", "not a serialized pjrt-hub CPU topology"),
    (b"pjrt_hub.cpu_topology\n{not json", "corrupt topology document"),
    (b"pjrt_hub.cpu_topology\n[]", "not an object"),
    (b'pjrt_hub.cpu_topology\n{"version": 99}', "unsupported topology format version 99"),
    (b'pjrt_hub.cpu_topology\n{"version": 1, "platform_name": "cpu", "platform_version": "", '
     b'"num_devices": "4", "attributes": {}, "device_attributes": {}}', "'num_devices' should be int"),
    ("text", "expected bytes"),
])
def test_topology_deserialize_rejects_corrupt_bytes(api, data, message):
    with pytest.raises(InvalidArgument, match=message):
        api.topology_deserialize(data)


def test_topology_of_another_platform_is_refused(compiler):
    gpu = CpuApi(compiler, platform_name="gpu-ish").topology_create()
    with pytest.raises(InvalidArgument, match="for platform 'gpu-ish'"):
        CpuApi(compiler).topology_deserialize(gpu.serialize())


def test_destroyed_client_refuses_new_work(api):
    client = api.client_create({"num_devices": 1})
    client.destroy()
    with pytest.raises(FailedPrecondition, match="the client was destroyed"):
        client.buffer_from_host_buffer([1.0])


def test_devices_are_binding_devices(client):
    assert all(isinstance(d, Device) for d in client.devices())

