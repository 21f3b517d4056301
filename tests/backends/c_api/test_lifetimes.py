"""What a C handle may be used with, and for how long: objects borrowed from a client (devices,
memories, descriptions, its topology) end with it, and a client's objects are not another's."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import numpy as np
import pytest

from pjrt_hub.abi import BufferType, InvalidArgument


def test_borrowed_objects_refuse_calls_once_their_client_is_destroyed(xla_cpu_path):
    # Before, a device description used after PJRT_Client_Destroy was a read of freed memory: a
    # segfault on 0.81. A child process, so that a regression fails this test, not the run.
    script = textwrap.dedent(f"""
        from pjrt_hub.abi import FailedPrecondition
        from pjrt_hub.backends.c_api import load_api
        api = load_api({xla_cpu_path!r})
        client = api.client_create()
        device = client.addressable_devices()[0]
        memory, description = device.default_memory(), device.get_description()
        topology = client.topology_description()
        topology_device = topology.get_device_descriptions()[0]
        descriptions = api.extensions()["MemoryDescriptions"]
        client.destroy()
        calls = [description.id, device.local_hardware_id, memory.kind, topology.platform_name,
                 topology_device.id, device.get_description, lambda: descriptions.memory_descriptions(description)]
        for call in calls:
            try:
                call()
            except FailedPrecondition as exc:
                print("refused:", exc.message)
        """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    lines = done.stdout.splitlines()
    assert len(lines) == 7 and all("the client was destroyed" in line for line in lines), lines
    assert "id (of a device description)" in lines[0] and "platform_name" in lines[3]


def test_a_memory_of_another_client_is_refused(api, client):
    other = api.client_create()
    try:
        foreign = other.addressable_devices()[0].default_memory()
        with pytest.raises(InvalidArgument, match="buffer_from_host_buffer: expected a memory of this client"):
            client.buffer_from_host_buffer(np.zeros(2, np.float32), memory=foreign)
        with pytest.raises(InvalidArgument, match="create_uninitialized_buffer: expected a memory of this client"):
            client.create_uninitialized_buffer((2,), BufferType.F32, memory=foreign)
        buffer = client.buffer_from_host_buffer(np.zeros(2, np.float32)).buffer
        with pytest.raises(InvalidArgument, match="copy_to_memory: expected a memory of this client"):
            buffer.copy_to_memory(foreign)
        own = client.addressable_devices()[0].default_memory()
        assert buffer.copy_to_memory(own).memory() == own
    finally:
        other.destroy()
