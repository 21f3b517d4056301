"""The bridge end to end on a real plugin: xla-cpu-pjrt 0.0.1 (PJRT C API 0.81)."""

from __future__ import annotations

import gc

import ml_dtypes
import numpy as np
import pytest

from pjrt_hub.abi import (
    BufferType,
    CompileError,
    CompileOptions,
    ExecuteOptions,
    FailedPrecondition,
    HostBufferSemantics,
    InvalidArgument,
    NotFound,
    PjrtError,
    Program,
    Unimplemented,
    from_numpy_dtype,
)
from pjrt_hub.backends.c_api import CBuffer, CEvent, probe

from .conftest import ADD_PROGRAM

pytestmark = pytest.mark.real_plugin

TWO_OUTPUTS = """func.func @main(%a: tensor<4xf32>, %b: tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>) {
  %0 = stablehlo.add %a, %b : tensor<4xf32>
  %1 = stablehlo.multiply %a, %b : tensor<4xf32>
  return %0, %1 : tensor<4xf32>, tensor<4xf32>
}"""


def host(client, array, **kwargs) -> CBuffer:
    transfer = client.buffer_from_host_buffer(np.asarray(array), **kwargs)
    transfer.done_with_host_buffer.await_()
    return transfer.buffer


def fetch(buffer) -> np.ndarray:
    result = buffer.to_host_buffer()
    result.event.await_()
    return result.array


@pytest.fixture(scope="module")
def add(client):
    return client.compile(Program(ADD_PROGRAM))


def test_the_api_reads_version_attributes_and_extensions(api):
    assert str(api.api_version()) == "0.81"
    attributes = api.plugin_attributes()
    assert attributes["xla_version"] == 2
    assert attributes["stablehlo_current_version"] == [1, 13, 3]
    assert attributes["stablehlo_minimum_version"] == [0, 9, 0]
    extensions = api.extensions()
    assert list(extensions) == ["PhaseCompile", "FFI", "MemoryDescriptions", "Layouts"]
    assert extensions["Layouts"].struct_size == 72


def test_probe_of_the_real_plugin(xla_cpu_path):
    report = probe(xla_cpu_path)
    assert report.outcome == "ok" and report.api_version == "0.81"
    assert (report.api_struct_size, report.num_slots, report.expected_slots) == (984, 118, 118)
    assert len(report.functions) == 118 and report.null_functions == []
    assert report.extension_names() == ["PhaseCompile", "FFI", "MemoryDescriptions", "Layouts"]
    assert report.attributes["stablehlo_current_version"] == [1, 13, 3]


def test_client_devices_and_descriptions(client):
    assert client.platform_name() == "cpu"
    assert client.process_index() == 0
    devices = client.devices()
    assert len(devices) == 4 and client.addressable_devices() == devices
    assert client.lookup_device(2) is devices[2]
    assert client.lookup_addressable_device(1) == devices[1]
    descriptions = [d.get_description() for d in devices]
    assert [d.id() for d in descriptions] == [0, 1, 2, 3]
    assert {d.kind() for d in descriptions} == {"cpu"}
    assert descriptions[0].debug_string() == "TFRT_CPU_0"
    assert descriptions[3].to_string() == "CpuDevice(id=3)"
    assert descriptions[0].process_index() == 0 and descriptions[0].attributes() == {}
    assert devices[0].is_addressable() and devices[1].local_hardware_id() == 1
    with pytest.raises(InvalidArgument, match="No matching device found for device_id 99"):
        client.lookup_device(99)


def test_cpu_device_count_option(api):
    small = api.client_create({"cpu_device_count": 2})
    try:
        assert len(small.devices()) == 2
    finally:
        small.destroy()


def test_memories(client):
    device = client.devices()[0]
    memories = device.addressable_memories()
    assert [m.kind() for m in memories] == ["device", "pinned_host", "unpinned_host"]
    default = device.default_memory()
    assert default == memories[0] and default.kind() == "device"
    assert default.addressable_by_devices() == [device]
    assert default.to_string() == "CPU_DEVICE_0"
    assert "CpuDeviceMemory" in default.debug_string()
    assert isinstance(default.kind_id(), int) and isinstance(default.id(), int)
    assert set(client.addressable_memories()) >= set(memories)


def test_compile_and_execute_add(client, add):
    a = host(client, np.array([1, 2, 3, 4], np.float32))
    b = host(client, np.array([10, 20, 30, 40], np.float32))
    result = add.execute([[a, b]])
    assert len(result.outputs) == 1 and len(result.device_complete_events) == 1
    result.device_complete_events[0].await_()
    out = result.outputs[0][0]
    np.testing.assert_array_equal(fetch(out), [11, 22, 33, 44])
    assert out.element_type() == BufferType.F32 and out.dimensions() == (4,)
    assert out.on_device_size_in_bytes() == 16 and out.is_on_cpu()
    assert out.device() == client.devices()[0] and out.memory().kind() == "device"
    assert out.unsafe_pointer() == out.opaque_device_memory_data_pointer() != 0


def test_execute_options_and_several_outputs(client):
    exe = client.compile(Program(TWO_OUTPUTS), CompileOptions())
    x = host(client, np.arange(4, dtype=np.float32))
    result = exe.execute([[x, x]], ExecuteOptions(launch_id=7, non_donatable_input_indices=(0, 1)))
    result.device_complete_events[0].await_()
    total, product = (fetch(o) for o in result.outputs[0])
    np.testing.assert_array_equal(total, [0, 2, 4, 6])
    np.testing.assert_array_equal(product, [0, 1, 4, 9])
    assert not x.is_deleted()


def test_execute_refuses_mismatched_arguments(client, add):
    x = host(client, np.arange(4, dtype=np.float32))
    with pytest.raises(InvalidArgument, match="supplied 1 buffers but compiled program expected 2"):
        add.execute([[x]])
    with pytest.raises(InvalidArgument, match="argument 1 of device 0 is 3"):
        add.execute([[x, 3]])
    with pytest.raises(InvalidArgument, match="argument_lists is empty"):
        add.execute([])


DTYPES = [np.float32, np.float64, np.float16, ml_dtypes.bfloat16, np.int8, np.int16, np.int32, np.int64,
          np.uint8, np.uint16, np.uint32, np.uint64, np.bool_, np.complex64, np.complex128,
          ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e5m2]


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
def test_buffers_round_trip(client, dtype):
    array = (np.arange(24) % 3 == 0) if dtype is np.bool_ else (np.arange(24) - 7).astype(dtype)
    array = array.reshape(2, 3, 4)
    buffer = host(client, array)
    assert buffer.dimensions() == (2, 3, 4)
    assert buffer.element_type() == from_numpy_dtype(dtype)
    assert buffer.on_device_size_in_bytes() == array.nbytes
    got = fetch(buffer)
    assert got.dtype == array.dtype and got.shape == array.shape
    np.testing.assert_array_equal(got.view(np.uint8), array.view(np.uint8))


def test_scalars_empty_arrays_and_strided_inputs(client):
    assert fetch(host(client, np.float32(3.5))).tolist() == 3.5
    assert fetch(host(client, np.zeros((0, 3), np.int32))).shape == (0, 3)
    strided = np.arange(20, dtype=np.int32).reshape(4, 5)[:, ::2]
    np.testing.assert_array_equal(fetch(host(client, strided)), strided)


def test_to_host_into_a_given_array(client):
    buffer = host(client, np.arange(6, dtype=np.float32).reshape(2, 3))
    dst = np.full((2, 3), -1, np.float32)
    result = buffer.to_host_buffer(dst)
    result.event.await_()
    assert result.array is dst and dst.tolist() == [[0, 1, 2], [3, 4, 5]]
    with pytest.raises(InvalidArgument, match=r"dst is float32\[3, 2\], the buffer is float32\[2, 3\]"):
        buffer.to_host_buffer(np.empty((3, 2), np.float32))
    with pytest.raises(InvalidArgument, match="C-contiguous"):
        buffer.to_host_buffer(np.empty((3, 2), np.float32).T)


@pytest.mark.parametrize("dtype", [ml_dtypes.int4, ml_dtypes.uint4, ml_dtypes.int2, ml_dtypes.float4_e2m1fn])
def test_sub_byte_types_cross_one_element_per_byte(client, dtype):
    # XLA takes and gives them as numpy holds them, one per byte, and packs them on the device.
    array = (np.arange(15).reshape(3, 5) % 2).astype(dtype)
    buffer = host(client, array)
    assert buffer.on_device_size_in_bytes() < array.nbytes
    got = fetch(buffer)
    assert got.dtype == array.dtype and got.shape == array.shape
    np.testing.assert_array_equal(got.view(np.uint8), array.view(np.uint8))


def test_the_host_array_lives_as_long_as_the_plugin_reads_it(client):
    # Until-transfer-completes: the bridge holds the array until done_with_host_buffer fires.
    transfer = client.buffer_from_host_buffer(np.arange(1000, dtype=np.float64),
                                              semantics=HostBufferSemantics.IMMUTABLE_UNTIL_TRANSFER_COMPLETES)
    gc.collect()
    transfer.done_with_host_buffer.await_()
    np.testing.assert_array_equal(fetch(transfer.buffer), np.arange(1000))
    # Zero copy of a 64-byte aligned array: the buffer aliases it, and keeps it alive.
    raw = np.empty(16 + 64, np.uint8)
    offset = (-raw.ctypes.data) % 64
    aligned = raw[offset:offset + 16].view(np.float32)
    aligned[:] = [1, 2, 3, 4]
    zero = client.buffer_from_host_buffer(aligned, semantics=HostBufferSemantics.IMMUTABLE_ZERO_COPY)
    assert zero.buffer.unsafe_pointer() == aligned.ctypes.data
    assert not zero.done_with_host_buffer.is_ready()  # fires when the buffer goes
    del aligned, raw
    gc.collect()
    np.testing.assert_array_equal(fetch(zero.buffer), [1, 2, 3, 4])
    zero.buffer.destroy()
    zero.done_with_host_buffer.await_(timeout=10)


def test_delete_and_destroy_semantics(client, add):
    buffer = host(client, np.arange(4, dtype=np.float32))
    assert not buffer.is_deleted()
    buffer.delete()
    assert buffer.is_deleted()
    with pytest.raises(InvalidArgument, match="deleted or donated"):
        add.execute([[buffer, buffer]])
    late = buffer.to_host_buffer()
    assert late.event.is_ready()
    assert "deleted or donated" in late.event.error().message
    with pytest.raises(InvalidArgument, match="deleted or donated"):
        late.event.await_()
    buffer.destroy()
    buffer.destroy()  # idempotent
    with pytest.raises(FailedPrecondition, match="dimensions: the CBuffer was destroyed"):
        buffer.dimensions()


def test_ready_events(client):
    buffer = host(client, np.arange(4, dtype=np.float32))
    event = buffer.ready_event()
    assert isinstance(event, CEvent)
    seen = []
    event.on_ready(seen.append)
    event.await_(timeout=10)
    assert event.is_ready() and event.error() is None and seen == [None]
    event.destroy()
    with pytest.raises(FailedPrecondition):
        event.is_ready()


def test_copies_between_devices_and_memories(client):
    buffer = host(client, np.arange(4, dtype=np.int32))
    other = buffer.copy_to_device(client.devices()[2])
    assert other.device() == client.devices()[2]
    np.testing.assert_array_equal(fetch(other), [0, 1, 2, 3])
    pinned = [m for m in client.devices()[0].addressable_memories() if m.kind() == "pinned_host"][0]
    moved = buffer.copy_to_memory(pinned)
    assert moved.memory().kind() == "pinned_host"
    np.testing.assert_array_equal(fetch(moved), [0, 1, 2, 3])


def test_external_reference_counts(client):
    buffer = host(client, np.arange(4, dtype=np.float32))
    buffer.increase_external_reference_count()
    buffer.decrease_external_reference_count()
    with pytest.raises(InvalidArgument, match="decrease reference on a buffer with zero reference count"):
        buffer.decrease_external_reference_count()


def test_a_malformed_program_is_a_compile_error_with_the_plugins_message(client):
    with pytest.raises(CompileError) as info:
        client.compile(Program("func.func @main(%a: tensor<4xf32>) -> tensor<4xf32> { garbage }"))
    error = info.value
    assert isinstance(error, InvalidArgument)
    assert "custom op 'garbage' is unknown" in error.message and "StableHLO v1.13.3" in error.message
    assert error.plugin == "xla_cpu_pjrt" and error.c_function == "PJRT_Client_Compile"
    with pytest.raises(InvalidArgument, match="failed to deserialize CompileOptionsProto"):
        client.compile(Program(ADD_PROGRAM), b"\xff\xff\xff")
    with pytest.raises(InvalidArgument, match="Unknown program format 'invalid'"):
        client.compile(Program(ADD_PROGRAM, format="invalid"))


def test_a_function_past_the_plugins_minor_is_unimplemented(api, client):
    with pytest.raises(Unimplemented) as info:
        client.devices()[0].get_attributes()
    message = str(info.value)
    assert "PJRT_Device_GetAttributes" in message and "0.92" in message and "0.81" in message
    with pytest.raises(Unimplemented, match=r"PJRT_Client_Load \(added in PJRT C API 0.95\).*0\.81"):
        api.library.function("PJRT_Client_Load")
    assert not api.has("PJRT_Executable_ParameterMemoryKinds") and api.has("PJRT_Client_Compile")


def test_plugin_errors_keep_their_code(client, add):
    exe = add.get_executable()
    with pytest.raises(Unimplemented, match="GetOutputMemoryKinds is not supported"):
        exe.output_memory_kinds()
    with pytest.raises(Unimplemented, match="GetAllocatorStats"):
        client.devices()[0].memory_stats()


def test_executable_queries(client, add):
    exe = add.get_executable()
    assert exe.name() == "main"
    assert (exe.num_replicas(), exe.num_partitions(), exe.num_outputs()) == (1, 1, 1)
    assert exe.output_element_types() == [BufferType.F32]
    assert exe.output_dimensions() == [(4,)]
    assert exe.fingerprint() and exe.fingerprint() == exe.fingerprint()
    assert exe.get_cost_analysis()["flops"] == 4.0
    stats = exe.get_compiled_memory_stats()
    assert (stats.argument_size_in_bytes, stats.output_size_in_bytes) == (32, 16)
    program = exe.optimized_program()
    assert program.format == "hlo_with_config" and b"main" in program.data()
    assert add.get_device_assignment() == ((0,),)
    assert add.addressable_devices() == [client.devices()[0]]
    assert not add.is_deleted()
    exe.destroy()


def test_serialize_and_deserialize(client, add):
    exe = add.get_executable()
    loaded = client.deserialize_and_load(exe.serialize())
    a = host(client, np.array([1, 2, 3, 4], np.float32))
    result = loaded.execute([[a, a]])
    result.device_complete_events[0].await_()
    np.testing.assert_array_equal(fetch(result.outputs[0][0]), [2, 4, 6, 8])


def test_device_assignment_and_topology(client):
    assert client.default_device_assignment(2, 1) == ((0,), (1,))
    with pytest.raises(InvalidArgument, match="must be >= 1"):
        client.default_device_assignment(0, 1)
    topology = client.topology_description()
    assert (topology.platform_name(), topology.platform_version()) == ("cpu", "cpu")
    assert [d.id() for d in topology.get_device_descriptions()] == [0, 1, 2, 3]
    assert topology.serialize()


def test_replicated_compile_options(client):
    exe = client.compile(Program(ADD_PROGRAM), CompileOptions(num_replicas=2))
    devices = client.devices()
    a0 = host(client, np.ones(4, np.float32), device=devices[0])
    a1 = host(client, np.full(4, 2, np.float32), device=devices[1])
    result = exe.execute([[a0, a0], [a1, a1]])
    for event in result.device_complete_events:
        event.await_()
    assert [fetch(row[0]).tolist() for row in result.outputs] == [[2] * 4, [4] * 4]
    assert result.outputs[1][0].device() == devices[1]


def test_destroying_the_client_destroys_what_it_owns(api):
    client = api.client_create({"cpu_device_count": 1})
    exe = client.compile(Program(ADD_PROGRAM))
    buffer = host(client, np.ones(4, np.float32))
    event = buffer.ready_event()
    client.destroy()
    for handle in (exe, buffer, event):
        assert handle.handle == 0
    with pytest.raises(FailedPrecondition, match="the client was destroyed"):
        client.devices()
    with pytest.raises(FailedPrecondition, match="the CBuffer was destroyed"):
        buffer.dimensions()
    client.destroy()  # idempotent


def test_errors_are_pjrt_errors_with_the_plugin_name(client):
    with pytest.raises(PjrtError) as info:
        client.lookup_device(-1)
    assert info.value.plugin == "xla_cpu_pjrt"
    assert any("PJRT_Client_LookupDevice" in note for note in info.value.__notes__)


def test_handles_of_another_client_are_refused(api, client, add):
    other = api.client_create({"cpu_device_count": 1})
    try:
        foreign = host(other, np.ones(4, np.float32))
        with pytest.raises(InvalidArgument, match="not a buffer of this executable's client"):
            add.execute([[foreign, foreign]])
        with pytest.raises(InvalidArgument, match="expected a device of this client"):
            client.buffer_from_host_buffer(np.ones(4, np.float32), device=other.devices()[0])
    finally:
        other.destroy()


def test_ahead_of_time_paths_report_the_plugins_answer(api, client):
    # xla-cpu-pjrt 0.81 has neither a topology factory nor an AOT compiler for its platform.
    with pytest.raises(Unimplemented, match="Topology not supported for CPU compilation"):
        api.topology_create()
    with pytest.raises(NotFound, match="No compiler registered for platform cpu"):
        api.compile(Program(ADD_PROGRAM), client.topology_description(), client=client)


def test_an_executable_outlives_the_loaded_executable_it_came_from(xla_cpu_path):
    """XLA's PJRT_Executable from GetExecutable borrows from the loaded one; querying it after the
    loaded one was collected segfaulted. Run in a child so a regression is a failure, not a crash."""
    import subprocess
    import sys
    import textwrap

    script = textwrap.dedent(f"""
        import gc
        from pjrt_hub.abi import Program
        from pjrt_hub.backends.c_api import load_api
        client = load_api({xla_cpu_path!r}).client_create({{}})
        loaded = client.compile(Program("func.func @main(%a: tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>) "
                                        "{{ return %a, %a : tensor<4xf32>, tensor<4xf32> }}"))
        executable = loaded.get_executable()
        del loaded
        gc.collect()
        print(executable.num_outputs())
        executable.destroy()
        again = client.compile(Program("func.func @main(%a: tensor<4xf32>) -> tensor<4xf32> {{ return %a : tensor<4xf32> }}"))
        derived = again.get_executable()
        again.destroy()          # destroys what it lent first
        client.destroy()
    """)
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip() == "2"
