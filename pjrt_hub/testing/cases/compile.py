"""compile: ``PJRT_Client_Compile`` and the executables it makes (upstream's Compile,
CompileInvalidOption, CompileInvalidProgramFormat; GetNumOutputs, GetDeviceAssignment)."""

from __future__ import annotations

import numpy as np

from pjrt_hub.abi import BufferType, CompiledMemoryStats, ErrorCode, PjrtError

from .._case import case, check, expect_error
from .._context import PluginUnderTest
from .._programs import INVALID_PROGRAM, add_one, same_name_programs, two_outputs
from .client import device_id

#: Upstream's messages (pjrt_c_api_test.cc), which frameworks and users search for.
INVALID_OPTIONS_MESSAGE = "PJRT_Client_Compile: failed to deserialize CompileOptionsProto"
UNKNOWN_FORMAT_MESSAGE = "Unknown program format 'invalid'."


@case("compile")
def mlir_program(ctx: PluginUnderTest) -> None:
    """A StableHLO program compiles to a loaded executable: one replica, one partition, one output,
    loaded on an addressable device."""
    loaded = ctx.compile(add_one())
    executable = loaded.get_executable()
    check(isinstance(executable.name(), str), f"PJRT_Executable_Name returned {executable.name()!r}")
    for what, value, expected in (("NumReplicas", executable.num_replicas(), 1),
                                  ("NumPartitions", executable.num_partitions(), 1),
                                  ("NumOutputs", executable.num_outputs(), 1)):
        check(value == expected, f"PJRT_Executable_{what} is {value!r}, expected {expected}")
    devices = loaded.addressable_devices()
    addressable = {device_id(d) for d in ctx.devices}
    check(devices and {device_id(d) for d in devices} <= addressable,
          f"PJRT_LoadedExecutable_AddressableDevices: {[device_id(d) for d in devices]}, expected addressable devices")
    check(loaded.is_deleted() is False, "a new executable reports PJRT_LoadedExecutable_IsDeleted true")


@case("compile")
def num_outputs(ctx: PluginUnderTest) -> None:
    """PJRT_Executable_NumOutputs counts every result of @main."""
    count = ctx.compile(two_outputs()).get_executable().num_outputs()
    check(count == 2, f"PJRT_Executable_NumOutputs of a two-result program is {count!r}")


@case("compile", min_api_minor=29)
def output_types_and_dimensions(ctx: PluginUnderTest) -> None:
    """PJRT_Executable_OutputElementTypes and OutputDimensions describe the results of @main."""
    executable = ctx.compile(two_outputs()).get_executable()
    types = list(executable.output_element_types())
    check(types == [BufferType.F32, BufferType.F32], f"PJRT_Executable_OutputElementTypes: {types}, expected [F32, F32]")
    dims = [tuple(d) for d in executable.output_dimensions()]
    check(dims == [(2, 3), (2, 3)], f"PJRT_Executable_OutputDimensions: {dims}, expected [(2, 3), (2, 3)]")


@case("compile", min_api_minor=35)
def fingerprint(ctx: PluginUnderTest) -> None:
    """PJRT_Executable_Fingerprint is stable: the same program compiles to the same fingerprint."""
    first = ctx.compile(add_one()).get_executable().fingerprint()
    second = ctx.compile(add_one()).get_executable().fingerprint()
    check(first, f"PJRT_Executable_Fingerprint is empty ({first!r})")
    check(first == second, f"the same program compiled twice has fingerprints {first!r} and {second!r}")
    other = ctx.compile(two_outputs()).get_executable().fingerprint()
    check(other != first, "two different programs have the same fingerprint")


@case("compile", min_api_minor=40)
def compiled_memory_stats(ctx: PluginUnderTest) -> None:
    """PJRT_Executable_GetCompiledMemoryStats reports sizes >= 0."""
    stats = ctx.compile(add_one()).get_executable().get_compiled_memory_stats()
    check(isinstance(stats, CompiledMemoryStats), f"got {type(stats).__name__}, expected CompiledMemoryStats")
    negative = {k: v for k, v in stats.as_dict().items() if v < 0}
    check(not negative, f"negative compiled memory stats: {negative}")


@case("compile", min_api_minor=79)
def device_assignment(ctx: PluginUnderTest) -> None:
    """PJRT_LoadedExecutable_GetDeviceAssignment of a one-device program is one replica x one partition."""
    assignment = [tuple(r) for r in ctx.compile(add_one()).get_device_assignment()]
    check(len(assignment) == 1 and len(assignment[0]) == 1,
          f"PJRT_LoadedExecutable_GetDeviceAssignment is {assignment}, expected one replica of one partition")


@case("compile")
def serialize_round_trip(ctx: PluginUnderTest) -> None:
    """PJRT_Executable_Serialize then PJRT_Executable_DeserializeAndLoad gives an executable that
    computes the same."""
    data = ctx.compile(add_one()).get_executable().serialize()
    check(isinstance(data, (bytes, bytearray)) and data, f"PJRT_Executable_Serialize returned {type(data).__name__}")
    loaded = ctx.call(ctx.client.deserialize_and_load, bytes(data), what="PJRT_Executable_DeserializeAndLoad",
                      timeout=60.0)
    got = ctx.run(loaded, np.array([1, 2, 3, 4], np.float32))[0]
    check(np.array_equal(got, [2, 3, 4, 5]), f"the deserialized executable computed {got.tolist()}, expected [2, 3, 4, 5]")


@case("compile")
def invalid_program(ctx: PluginUnderTest) -> None:
    """A program that is not StableHLO fails to compile with InvalidArgument."""
    expect_error(lambda: ctx.compile(INVALID_PROGRAM), code=ErrorCode.INVALID_ARGUMENT,
                 what="PJRT_Client_Compile of text that is not StableHLO")


@case("compile")
def invalid_option(ctx: PluginUnderTest) -> None:
    """Options that are not a CompileOptionsProto fail: InvalidArgument
    "PJRT_Client_Compile: failed to deserialize CompileOptionsProto"."""
    expect_error(lambda: ctx.compile(add_one(), b"invalid compile options"), code=ErrorCode.INVALID_ARGUMENT,
                 message=INVALID_OPTIONS_MESSAGE, what="PJRT_Client_Compile with malformed options")


@case("compile")
def invalid_program_format(ctx: PluginUnderTest) -> None:
    """A program of format 'invalid' fails: InvalidArgument "Unknown program format 'invalid'."."""
    expect_error(lambda: ctx.compile(add_one(), fmt="invalid"), code=ErrorCode.INVALID_ARGUMENT,
                 message=UNKNOWN_FORMAT_MESSAGE, what="PJRT_Client_Compile of format 'invalid'")


@case("compile")
def executable_delete(ctx: PluginUnderTest) -> None:
    """After PJRT_LoadedExecutable_Delete, PJRT_LoadedExecutable_IsDeleted is true."""
    loaded = ctx.compile(add_one())
    loaded.delete()
    check(loaded.is_deleted() is True, "PJRT_LoadedExecutable_IsDeleted is false after PJRT_LoadedExecutable_Delete")


@case("compile")
def execute_deleted(ctx: PluginUnderTest) -> None:
    """Executing a loaded executable after PJRT_LoadedExecutable_Delete fails with a PJRT error."""
    loaded = ctx.compile(add_one())
    buffer = ctx.put(np.zeros(4, np.float32))
    loaded.delete()
    try:
        ctx.execute(loaded, [[buffer]])
    except PjrtError:
        return
    check(False, "executing a deleted executable succeeded")


@case("compile", timeout=120.0)
def same_module_name(ctx: PluginUnderTest) -> None:
    """Two programs that share a module name (JAX names every jit of a function ``f`` @jit_f) are
    two executables: each computes its own function, directly and after serialize/deserialize,
    and their fingerprints differ."""
    plus, times = same_name_programs()
    x = np.array([1.0, 2.0, 3.0, 4.0], np.float32)
    expected = {"x + 1": x + 1, "x * 2": x * 2}
    loaded = {"x + 1": ctx.compile(plus), "x * 2": ctx.compile(times)}
    for label, executable in loaded.items():
        got = ctx.run(executable, x)[0]
        check(np.array_equal(got, expected[label]),
              f"@jit_f computing {label} gave {got.tolist()}, expected {expected[label].tolist()}: the plugin "
              "took it for the other program of the same module name (a cache keyed by name?)")
    executables = {label: e.get_executable() for label, e in loaded.items()}
    if not ctx.declared_version or ctx.declared_version.minor >= 35:
        try:
            prints = {label: e.fingerprint() for label, e in executables.items()}
        except PjrtError as exc:
            if exc.code is not ErrorCode.UNIMPLEMENTED:
                raise
        else:
            check(prints["x + 1"] != prints["x * 2"],
                  f"two different programs named @jit_f have the same fingerprint {prints['x + 1']!r}; "
                  "PJRT_Executable_Fingerprint identifies the compiled program, not its name")
    serialized = {label: bytes(e.serialize()) for label, e in executables.items()}
    for label in ("x * 2", "x + 1"):  # the second first: a name-keyed cache would return it for both
        again = ctx.call(ctx.client.deserialize_and_load, serialized[label], what="PJRT_Executable_DeserializeAndLoad",
                         timeout=60.0)
        got = ctx.run(again, x)[0]
        check(np.array_equal(got, expected[label]),
              f"the deserialized @jit_f that computes {label} gave {got.tolist()}, expected "
              f"{expected[label].tolist()}: serialize/deserialize mixed up two programs of one module name")
