"""Compilation and executables of the host runtime: formats, options, metadata, serialization."""

from __future__ import annotations

import numpy as np
import pytest
from .cpu_runtime_minihlo import MiniCompiler, add_module, module

from pjrt_hub.abi import (
    BufferType,
    CompileError,
    CompileOptions,
    FailedPrecondition,
    InvalidArgument,
    ParseError,
    Program,
    encode_compile_options,
)
from pjrt_hub.backends.cpu_runtime import CpuApi, CpuExecutable

TWO_OUT = module(
    """
    %0 = stablehlo.add %arg0, %arg1 : tensor<2x3xf32>
    %1 = stablehlo.multiply %arg0, %arg1 : tensor<2x3xf32>
    %2 = stablehlo.negate %arg2 : tensor<5xi32>
    return %0, %1, %2 : tensor<2x3xf32>, tensor<2x3xf32>, tensor<5xi32>
    """,
    args="%arg0: tensor<2x3xf32> {tf.aliasing_output = 1 : i32}, %arg1: tensor<2x3xf32>, %arg2: tensor<5xi32>",
    results="tensor<2x3xf32>, tensor<2x3xf32>, tensor<5xi32>", name="jit_three",
)


def test_only_mlir_programs_compile(client):
    with pytest.raises(InvalidArgument) as info:
        client.compile(Program(b"HloModule m", format="hlo"))
    assert info.value.message == "Unknown program format 'hlo'."
    with pytest.raises(InvalidArgument, match="expected a Program"):
        client.compile(add_module())


def test_options_may_be_dataclass_bytes_or_none(client):
    for options in (None, CompileOptions(), encode_compile_options(CompileOptions()), bytearray(b"")):
        assert client.compile(Program(add_module()), options).get_executable().num_replicas() == 1
    replicated = encode_compile_options(CompileOptions(num_replicas=2))
    assert client.compile(Program(add_module()), replicated).get_executable().num_replicas() == 2


def test_an_option_nobody_takes_is_refused_by_name(client, compiler, monkeypatch):
    with pytest.raises(InvalidArgument, match="No such compile option: 'invalid_key'"):
        client.compile(Program(add_module()), CompileOptions(env_option_overrides={"invalid_key": "x"}))
    # XLA's debug options, which frameworks send to every plugin, are taken (and ignored).
    xla = CompileOptions(env_option_overrides={"xla_cpu_enable_fast_min_max": False, "xla_foo": True})
    assert client.compile(Program(add_module()), xla).get_executable().num_outputs() == 1
    monkeypatch.setattr(compiler, "option_names", ("mini_depth",), raising=False)
    own = CompileOptions(env_option_overrides={"mini_depth": 3})
    assert client.compile(Program(add_module()), own).get_executable().num_outputs() == 1
    with pytest.raises(InvalidArgument, match="No such compile option: 'mini_width'.*takes mini_depth"):
        client.compile(Program(add_module()), CompileOptions(env_option_overrides={"mini_width": 3}))


def test_malformed_options_get_upstreams_message(client):
    with pytest.raises(InvalidArgument, match="PJRT_Client_Compile: failed to deserialize CompileOptionsProto"):
        client.compile(Program(add_module()), b"\xff\xff\xff")
    with pytest.raises(InvalidArgument, match="options must be CompileOptions, a serialized CompileOptionsProto or None"):
        client.compile(Program(add_module()), {"num_replicas": 2})


def test_compile_errors_pass_through_and_compiler_bugs_are_wrapped(client, compiler, monkeypatch):
    with pytest.raises(ParseError, match="no func.func @main"):
        client.compile(Program("module @m {}"))

    def crash(code, options):
        raise KeyError("oops")

    monkeypatch.setattr(compiler, "compile", crash)
    with pytest.raises(CompileError, match="minihlo failed to compile the program: KeyError: 'oops'"):
        client.compile(Program(add_module()))


def test_replica_counts_and_device_assignments(client):
    module_says_two = add_module(attributes="mhlo.num_replicas = 2 : i32")
    assert client.compile(Program(module_says_two)).get_executable().num_replicas() == 2
    with pytest.raises(InvalidArgument, match="options ask for num_replicas=3 but the module says mhlo.num_replicas = 2"):
        client.compile(Program(module_says_two), CompileOptions(num_replicas=3))
    with pytest.raises(InvalidArgument, match=r"needs 5 replica\(s\) x 1 partition\(s\) = 5 devices; there are 4"):
        client.compile(Program(add_module()), CompileOptions(num_replicas=5))
    placed = client.compile(Program(add_module()), CompileOptions(num_replicas=2, device_assignment=((3,), (1,))))
    assert placed.get_device_assignment() == ((3,), (1,))
    assert placed.addressable_devices() == [client.devices()[3], client.devices()[1]]
    with pytest.raises(InvalidArgument, match="No matching device found for device_id 7"):
        client.compile(Program(add_module()), CompileOptions(device_assignment=((7,),)))
    with pytest.raises(InvalidArgument, match="uses device 1 twice"):
        client.compile(Program(add_module()), CompileOptions(num_replicas=2, device_assignment=((1,), (1,))))
    with pytest.raises(InvalidArgument, match=r"device_assignment is 1x1 but the executable has 2 replica"):
        client.compile(Program(add_module()), CompileOptions(num_replicas=2, device_assignment=((1,),)))
    partitioned = client.compile(Program(add_module()), CompileOptions(num_replicas=2, num_partitions=2))
    assert partitioned.get_device_assignment() == ((0, 2), (1, 3))
    assert [d.id for d in partitioned.addressable_devices()] == [0, 2, 1, 3]


def test_executable_metadata(client):
    loaded = client.compile(Program(TWO_OUT))
    executable = loaded.get_executable()
    assert executable.name() == "jit_three"
    assert (executable.num_replicas(), executable.num_partitions(), executable.num_outputs()) == (1, 1, 3)
    assert executable.output_element_types() == [BufferType.F32, BufferType.F32, BufferType.S32]
    assert executable.output_dimensions() == [(2, 3), (2, 3), (5,)]
    assert executable.output_memory_kinds() == ["device"] * 3
    assert executable.get_cost_analysis() == {"flops": 17.0, "bytes accessed": 136.0}
    stats = executable.get_compiled_memory_stats()
    assert (stats.argument_size_in_bytes, stats.output_size_in_bytes, stats.alias_size_in_bytes) == (68, 68, 24)
    assert stats.peak_memory_in_bytes == 68 + 68 - 24
    assert executable.optimized_program() == Program(TWO_OUT, "mlir")
    assert loaded.addressable_devices() == [client.devices()[0]]
    assert loaded.get_device_assignment() == ((0,),)
    assert loaded.fingerprint() == executable.fingerprint()
    assert client.compile(Program(TWO_OUT)).get_executable().fingerprint() == executable.fingerprint()
    assert client.compile(Program(add_module())).get_executable().fingerprint() != executable.fingerprint()


def test_serialize_and_deserialize_and_load(client, compiler, put):
    loaded = client.compile(Program(add_module(attributes="mhlo.num_replicas = 2 : i32")))
    data = loaded.get_executable().serialize()
    before = compiler.compilations
    again = client.deserialize_and_load(data)
    assert compiler.compilations == before  # deserialized, not compiled from text
    executable = again.get_executable()
    assert executable.num_replicas() == 2
    assert executable.fingerprint() == loaded.get_executable().fingerprint()
    assert executable.optimized_program().text() == loaded.get_executable().optimized_program().text()
    a = [put(np.ones(4, np.float32), device=d) for d in (0, 1)]
    result = again.execute([[a[0], a[0]], [a[1], a[1]]])
    for outputs in result.outputs:
        np.testing.assert_array_equal(outputs[0].to_host_buffer().array, 2.0)


@pytest.mark.parametrize(("data", "message"), [
    (b"nonsense", "not a serialized pjrt-hub CPU executable"),
    (b"pjrt_hub.cpu_executable\n\x05\x00\x00\x00{bad}", "corrupt executable header"),
    (b"pjrt_hub.cpu_executable\n\xff\x00\x00\x00{}", "corrupt executable header"),
])
def test_deserialize_rejects_corrupt_bytes(client, data, message):
    with pytest.raises(InvalidArgument, match=message):
        client.deserialize_and_load(data)


def test_deserialize_rejects_a_damaged_program_and_another_compiler(client):
    data = client.compile(Program(add_module())).get_executable().serialize()
    damaged = data.replace(b"minihlo\nmodule", b"minihlX\nmodule")
    with pytest.raises(InvalidArgument, match="minihlo could not read the program: not a serialized minihlo program"):
        client.deserialize_and_load(damaged)
    truncated = data[:-10]
    with pytest.raises(InvalidArgument, match="bytes of payload"):
        client.deserialize_and_load(truncated)

    class Other(MiniCompiler):
        name = "other"

    other = CpuApi(Other()).client_create({"num_devices": 1})
    with pytest.raises(InvalidArgument, match="compiled by 'minihlo'; this client compiles with 'other'"):
        other.deserialize_and_load(data)


def test_ahead_of_time_compile_for_a_topology(api, client, put):
    topology = api.topology_create({"num_devices": 2})
    executable = api.compile(Program(add_module()), topology, CompileOptions(num_replicas=2))
    assert isinstance(executable, CpuExecutable)
    loaded = client.load(executable)
    a, b = put(np.ones(4, np.float32)), put(np.ones(4, np.float32), device=1)
    outputs = loaded.execute([[a, a], [b, b]]).outputs
    assert [o[0].device().id for o in outputs] == [0, 1]
    with pytest.raises(InvalidArgument, match="needs 3 replica"):
        api.compile(Program(add_module()), topology, CompileOptions(num_replicas=3))
    with pytest.raises(InvalidArgument, match="is not a topology of a pjrt-hub CPU plugin"):
        api.compile(Program(add_module()), "topology")
    # Serialized AOT executables load on any client with enough devices.
    assert client.deserialize_and_load(executable.serialize()).get_executable().num_replicas() == 2


def test_deleted_executable_refuses_to_run(client, put):
    loaded = client.compile(Program(add_module()))
    a = put(np.ones(4, np.float32))
    assert not loaded.is_deleted()
    loaded.delete()
    assert loaded.is_deleted()
    with pytest.raises(FailedPrecondition, match="the executable jit_add was deleted"):
        loaded.execute([[a, a]])


def test_executables_of_a_destroyed_client_refuse_to_run(api):
    client = api.client_create({"num_devices": 1})
    loaded = client.compile(Program(add_module()))
    a = client.buffer_from_host_buffer(np.ones(4, np.float32)).buffer
    client.destroy()
    with pytest.raises(FailedPrecondition, match="the executable jit_add belongs to a destroyed client"):
        loaded.execute([[a, a]])
