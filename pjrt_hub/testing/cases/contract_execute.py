"""Cases from reading pjrt_c_api.h's execute functions sentence by sentence (pjrt_hub.testing.contract.execute
lists each behaviour and the case that checks it).

They look where a plugin can be right in value and still wrong: an output that shares storage with
an input, a sibling or a constant of the program, or that a later execution or a deletion changes;
executions running at the same time that read each other's values; an executable handle whose
release tears down what another handle still uses; metadata that changes between calls or across a
serialize round trip, or a fingerprint blind to the compile options; an error that stops at the
execution it happened in instead of reaching the work that depends on it; an argument a call
should refuse, at any position, and an execute_device of another client.
"""

from __future__ import annotations

import re
import sys
import threading
import time
from functools import partial
from typing import Any, Callable, cast

import numpy as np

from pjrt_hub.abi import (
    CompileOptions,
    ErrorCode,
    ExecuteOptions,
    HostBufferSemantics,
    PjrtError,
    Program,
)
from pjrt_hub.abi.compile_options import encode_compile_options

from .._case import case, check, expect_error, fail, skip
from .._context import CALL_TIMEOUT, COMPILE_TIMEOUT, PluginUnderTest, describe
from .._programs import (
    add_one,
    donating_add_one,
    elementwise,
    failing_program,
    main_module,
    slow_program,
    tensor,
    two_outputs,
)
from .client import device_id
from .buffers import _aligned, _wait_for
from .events import SLOW_ELEMENTS, slow_work

F32x4 = tensor((4,), "f32")
HOST = np.array([1.0, 2.0, 3.0, 4.0], np.float32)


def _passes_through() -> str:
    """``(x, x + x, x + x)``: an argument returned as it is, and one value returned twice (what
    ``jax.jit(lambda x: (x, x + x, x + x))`` lowers to)."""
    return elementwise("jit_passes_through", [F32x4], [("add", (0, 0))], results=[0, 1, 1])


def _returns_a_constant() -> str:
    """``(c, x + c)`` with ``c`` a constant of the program, returned as it is (what
    ``jax.jit(lambda x: (jnp.full(4, 3.0), x + 3.0))`` lowers to)."""
    t = F32x4
    body = (f"    %cst = stablehlo.constant dense<3.000000e+00> : {t}\n"
            f"    %0 = stablehlo.add %arg0, %cst : {t}\n"
            f"    return %cst, %0 : {t}, {t}\n")
    return main_module("jit_returns_a_constant", f"%arg0: {t}", f"{t}, {t}", body)


def _adds_three() -> str:
    """``x + y + z`` on f32[4]: three parameters of one type, so that any of them can be given a
    misfit while the others fit."""
    return elementwise("jit_adds_three", [F32x4] * 3, [("add", (0, 1)), ("add", (3, 2))], results=[4])


def _chain() -> str:
    """``((((x * 2 + 3) * 2) - x) + 3) * 2 = 6x + 18``: a straight line of steps, each reading the
    one before, so that an execution that reads another's intermediate value computes a visibly
    wrong result."""
    t = F32x4
    steps = ["%c2 = stablehlo.constant dense<2.000000e+00>", "%c3 = stablehlo.constant dense<3.000000e+00>",
             "%0 = stablehlo.multiply %arg0, %c2", "%1 = stablehlo.add %0, %c3", "%2 = stablehlo.multiply %1, %c2",
             "%3 = stablehlo.subtract %2, %arg0", "%4 = stablehlo.add %3, %c3", "%5 = stablehlo.multiply %4, %c2"]
    body = "".join(f"    {step} : {t}\n" for step in steps)
    return main_module("jit_chain", f"%arg0: {t}", t, body + f"    return %5 : {t}\n")


def _add_donating_second() -> str:
    """``x + y`` with ``y`` donated to the result (``jax.jit(f, donate_argnums=1)``)."""
    t = F32x4
    return elementwise("jit_add_donating_second", [t, t], [("add", (0, 1))]).replace(
        f"%arg1: {t}", f"%arg1: {t} {{tf.aliasing_output = 0 : i32}}")


def _donating(text: str, param: int, output: int) -> str:
    """``text`` with parameter ``param`` donated to result ``output`` (``tf.aliasing_output``, as
    ``jax.jit(f, donate_argnums=...)`` marks it)."""
    return re.sub(rf"(%arg{param}: tensor<[^>]*>)", rf"\1 {{tf.aliasing_output = {output} : i32}}", text, count=1)


def _flag_and_scalar() -> str:
    """``(x != 0, 2.5)``: a boolean output (PRED, stored a byte per element) and a scalar one
    (dimensions ``()``), the two outputs whose description is easiest to get wrong."""
    return main_module("jit_flag_and_scalar", f"%arg0: {F32x4}", f"{tensor((4,), 'i1')}, tensor<f32>",
                       f"    %0 = stablehlo.convert %arg0 : ({F32x4}) -> {tensor((4,), 'i1')}\n"
                       "    %1 = stablehlo.constant dense<2.500000e+00> : tensor<f32>\n"
                       f"    return %0, %1 : {tensor((4,), 'i1')}, tensor<f32>\n")


def _unimplemented(call: Any) -> Any:
    """``call()``, or None where the plugin answers UNIMPLEMENTED (the header lets it)."""
    try:
        return call()
    except PjrtError as exc:
        if exc.code is ErrorCode.UNIMPLEMENTED:
            return None
        raise


def _handle(buffer: Any) -> Any:
    """The plugin's own object behind a handle (the version gate wraps each in a proxy of its own)."""
    return getattr(buffer, "unwrapped", buffer)


def _sharing_storage(buffers: dict[str, Any]) -> list[str]:
    """The pairs of ``buffers`` (by label) whose bytes overlap in memory, for buffers in host memory:
    there PJRT_Buffer_UnsafePointer is the address of the bytes (as in XLA's CPU client; a
    framework's zero-copy views of a buffer are made from it). Buffers not on the CPU, or whose
    plugin does not implement the calls, are left out: nothing to compare."""
    spans: dict[str, tuple[int, int]] = {}
    for label, buffer in buffers.items():
        size = _unimplemented(buffer.on_device_size_in_bytes)
        if not size or not _unimplemented(buffer.is_on_cpu):
            continue
        start = _unimplemented(buffer.unsafe_pointer)
        if start:
            spans[label] = (int(start), int(start) + int(size))
    labels = list(spans)
    return [f"{a} and {b} (at {spans[a][0]:#x} and {spans[b][0]:#x})" for i, a in enumerate(labels)
            for b in labels[i + 1:] if spans[a][0] < spans[b][1] and spans[b][0] < spans[a][1]]


# -- compile -------------------------------------------------------------------------------------


@case("compile")
def program_read_only_during_compile(ctx: PluginUnderTest) -> None:
    """PJRT_Client_Compile reads the caller's program only during the call: overwriting the code
    afterwards (a framework reuses or frees it) changes nothing the executable computes.

    The code is given as a bytearray, the Python form of a caller's char buffer; after Compile
    returns, its constant 1 becomes a 2. A plugin that parses lazily, at the first Execute, from
    the caller's memory computes x + 2."""
    code = bytearray(add_one().encode())
    try:
        executable = ctx.call(ctx.client.compile, Program(cast(bytes, code)), CompileOptions(),
                              what="PJRT_Client_Compile", timeout=COMPILE_TIMEOUT)
    except PjrtError as exc:
        if exc.code is ErrorCode.INVALID_ARGUMENT:
            skip(f"plugin {ctx.name} takes program code only as bytes or str ({describe(exc)})")
        raise
    code[:] = code.replace(b"dense<1.000000e+00>", b"dense<2.000000e+00>")
    got = ctx.run(executable, HOST)[0]
    check(np.array_equal(got, HOST + 1),
          f"PJRT_Client_Compile kept reading the caller's program after it returned: x + 1 compiled, then the "
          f"caller's code changed to x + 2, and the executable computes {got.tolist()} for {HOST.tolist()}; "
          f"expected {(HOST + 1).tolist()} (the program needs to live only for the Compile call)")


@case("compile", timeout=COMPILE_TIMEOUT)
def topology_compile_loads_and_runs(ctx: PluginUnderTest) -> None:
    """PJRT_Compile compiles for a topology, without a client; once loaded by the client
    (serialized and given to PJRT_Executable_DeserializeAndLoad) it runs on the devices its
    compile options assign, and computes the program (read only during the compile call)."""
    device = ctx.devices[-1]
    code = bytearray(add_one().encode())
    options = CompileOptions(device_assignment=((device_id(device),),))
    try:
        topology = ctx.call(ctx.client.topology_description, what="PJRT_Client_TopologyDescription")
        executable = ctx.call(ctx.api.compile, Program(cast(bytes, code)), topology, options, what="PJRT_Compile",
                              timeout=COMPILE_TIMEOUT)
    except PjrtError as exc:
        # XLA's plugins without an ahead-of-time compiler answer NOT_FOUND "No compiler registered
        # for platform cpu".
        if exc.code in (ErrorCode.UNIMPLEMENTED, ErrorCode.NOT_FOUND):
            skip(f"plugin {ctx.name} does not compile ahead of time ({describe(exc)})")
        raise
    code[:] = code.replace(b"dense<1.000000e+00>", b"dense<2.000000e+00>")
    count = executable.num_outputs()
    check(count == 1, f"PJRT_Compile of a one-result program gave an executable with NumOutputs {count!r}, expected 1")
    loaded = ctx.call(ctx.client.deserialize_and_load, bytes(executable.serialize()),
                      what="PJRT_Executable_DeserializeAndLoad of a PJRT_Compile result", timeout=COMPILE_TIMEOUT)
    placed = [device_id(d) for d in loaded.addressable_devices()]
    check(placed == [device_id(device)],
          f"an executable PJRT_Compile made for device {device_id(device)} (its compile options' device assignment) "
          f"loads onto devices {placed}; expected [{device_id(device)}]: the compile options were not kept")
    got = ctx.run(loaded, HOST, device=device)[0]
    check(np.array_equal(got, HOST + 1),
          f"the executable PJRT_Compile made from x + 1 computes {got.tolist()} for {HOST.tolist()}, expected "
          f"{(HOST + 1).tolist()} (the caller changed its copy of the code after PJRT_Compile returned)")


@case("compile")
def executable_destroy_leaves_loaded_executable(ctx: PluginUnderTest) -> None:
    """The PJRT_Executable that PJRT_LoadedExecutable_GetExecutable returns is the caller's to
    destroy: PJRT_Executable_Destroy of it leaves the loaded executable running and describable."""
    loaded = ctx.compile(two_outputs())
    first = loaded.get_executable()
    name, outputs = first.name(), first.num_outputs()
    first.destroy()
    check(not loaded.is_deleted(), "PJRT_Executable_Destroy of the executable GetExecutable returned marked the "
                                   "loaded executable deleted; it frees only the handle the caller was given")
    x, y = np.arange(6, dtype=np.float32).reshape(2, 3), np.full((2, 3), 2.0, np.float32)
    try:
        got = ctx.run(loaded, x, y)
    except PjrtError as exc:
        fail(f"after PJRT_Executable_Destroy of the executable PJRT_LoadedExecutable_GetExecutable returned, the "
             f"loaded executable no longer runs ({describe(exc)}); Destroy frees the caller's handle only")
    check(len(got) == 2 and np.array_equal(got[0], x + y) and np.array_equal(got[1], x * y),
          f"after PJRT_Executable_Destroy of its GetExecutable handle, the loaded executable computes "
          f"{[g.tolist() for g in got]}, expected (x + y, x * y)")
    again = loaded.get_executable()
    check((again.name(), again.num_outputs()) == (name, outputs),
          f"a second PJRT_LoadedExecutable_GetExecutable after the first was destroyed describes "
          f"({again.name()!r}, {again.num_outputs()} outputs), expected ({name!r}, {outputs} outputs)")


@case("compile")
def delete_is_per_executable(ctx: PluginUnderTest) -> None:
    """Each PJRT_Client_Compile returns an executable of its own: deleting one of two executables
    compiled from the same program leaves the other not deleted and running."""
    first, second = ctx.compile(add_one()), ctx.compile(add_one())
    first.delete()
    check(second.is_deleted() is False,
          "PJRT_LoadedExecutable_Delete of one executable made PJRT_LoadedExecutable_IsDeleted true for another "
          "compiled from the same program: IsDeleted is true only after Delete of that executable (a compile "
          "cache handing out one object?)")
    try:
        got = ctx.run(second, HOST)[0]
    except PjrtError as exc:
        fail(f"an executable no longer runs after another compiled from the same program was deleted "
             f"({describe(exc)}); PJRT_LoadedExecutable_Delete acts on its own executable only")
    check(np.array_equal(got, HOST + 1), f"x + 1 gave {got.tolist()} after the other executable was deleted")


@case("compile", timeout=COMPILE_TIMEOUT)
def delete_lets_running_executions_finish(ctx: PluginUnderTest) -> None:
    """PJRT_LoadedExecutable_Delete (and _Destroy, which deletes) drops the executable only after
    its last execution completes: executions started before the call finish with the right
    outputs, which stay readable afterwards."""
    big = np.linspace(-1.0, 1.0, 1 << 18, dtype=np.float32)  # 1 MiB: asynchronous plugins queue it
    for release in ("delete", "destroy"):
        executable = ctx.compile(add_one(big.size))
        small = ctx.compile(add_one())
        result = ctx.call(executable.execute, [[ctx.put(big)]], ExecuteOptions(), what="PJRT_LoadedExecutable_Execute",
                          timeout=COMPILE_TIMEOUT)
        done = ctx.execute(small, [[ctx.put(HOST)]])
        getattr(executable, release)()
        getattr(small, release)()
        for index, event in enumerate(result.device_complete_events or ()):
            try:
                ctx.await_event(event, f"device_complete_events[{index}]")
            except PjrtError as exc:
                fail(f"an execution started before PJRT_LoadedExecutable_{release.capitalize()} failed "
                     f"({describe(exc)}); the executable is freed only after its last execution completes")
        for what, output, expected in (("the running execution", result.outputs[0][0], big + 1),
                                       ("a finished execution", done[0][0], HOST + 1)):
            try:
                got = ctx.fetch(output)
            except PjrtError as exc:
                fail(f"the output of {what} of an executable could not be read after "
                     f"PJRT_LoadedExecutable_{release.capitalize()} ({describe(exc)}); outputs belong to the caller "
                     "and outlive the executable")
            check(np.array_equal(got, expected),
                  f"after PJRT_LoadedExecutable_{release.capitalize()}, the output of {what} holds wrong values "
                  f"(first {got.reshape(-1)[:4].tolist()}, expected {expected.reshape(-1)[:4].tolist()})")


@case("compile")
def replicated_executable_describes_its_devices(ctx: PluginUnderTest) -> None:
    """An executable of two replicas, assigned to two devices in reverse id order, reports
    NumReplicas 2 and NumPartitions 1, lists those devices in replica order
    (PJRT_LoadedExecutable_AddressableDevices), gives that assignment back
    (GetDeviceAssignment) and runs argument list i on device i."""
    first, second = ctx.need_devices(2)
    assignment = ((device_id(second),), (device_id(first),))
    loaded = ctx.compile(add_one(replicas=2), CompileOptions(num_replicas=2, device_assignment=assignment))
    executable = loaded.get_executable()
    counts = (executable.num_replicas(), executable.num_partitions())
    check(counts == (2, 1), f"PJRT_Executable_NumReplicas and NumPartitions of a two-replica program are {counts}, "
                            "expected (2, 1)")
    listed = [device_id(d) for d in loaded.addressable_devices()]
    expected = [row[0] for row in assignment]
    check(listed == expected,
          f"PJRT_LoadedExecutable_AddressableDevices lists devices {listed}; the executable runs replica 0 on "
          f"device {expected[0]} and replica 1 on device {expected[1]}, so expected {expected} (argument list i "
          "goes to the i-th of them)")
    if ctx.declared_version is None or ctx.declared_version.minor >= 79:
        given = _unimplemented(loaded.get_device_assignment)
        if given is not None:
            rows = tuple(tuple(int(d) for d in row) for row in given)
            check(rows == assignment, f"PJRT_LoadedExecutable_GetDeviceAssignment is {rows}, expected the "
                                      f"assignment compiled with, {assignment}")
    inputs = [np.array([1, 2, 3, 4], np.float32), np.array([10, 20, 30, 40], np.float32)]
    devices = (second, first)
    outputs = ctx.execute(loaded, [[ctx.put(a, device=d)] for a, d in zip(inputs, devices)])
    for replica, (device, host) in enumerate(zip(devices, inputs)):
        placed = device_id(outputs[replica][0].device())
        check(placed == device_id(device), f"replica {replica}'s output is on device {placed}, expected "
                                           f"{device_id(device)} (the device the assignment gives it)")
        got = ctx.fetch(outputs[replica][0])
        check(np.array_equal(got, host + 1), f"replica {replica} computed {got.tolist()}, expected {(host + 1).tolist()}")


def _describe(loaded: Any) -> dict[str, Any]:
    """What an executable says of itself, for comparing two of them."""
    executable = loaded.get_executable()
    facts: dict[str, Any] = {
        "Name": executable.name(), "NumReplicas": executable.num_replicas(),
        "NumPartitions": executable.num_partitions(), "NumOutputs": executable.num_outputs(),
        "OutputElementTypes": [t.name for t in executable.output_element_types()],
        "OutputDimensions": [tuple(d) for d in executable.output_dimensions()],
        "AddressableDevices": [device_id(d) for d in loaded.addressable_devices()],
    }
    fingerprint = _unimplemented(executable.fingerprint)
    if fingerprint is not None:
        facts["Fingerprint"] = fingerprint
    return facts


@case("compile", timeout=COMPILE_TIMEOUT)
def serialize_round_trip_keeps_properties(ctx: PluginUnderTest) -> None:
    """PJRT_Executable_Serialize then PJRT_Executable_DeserializeAndLoad gives the same executable:
    the same name, replica, partition and output counts, output types and dimensions,
    fingerprint (where implemented) and devices (here: not the first one), and it runs there."""
    device = ctx.devices[-1]
    loaded = ctx.compile(two_outputs(), CompileOptions(device_assignment=((device_id(device),),)))
    before = _describe(loaded)
    again = ctx.call(ctx.client.deserialize_and_load, bytes(loaded.get_executable().serialize()),
                     what="PJRT_Executable_DeserializeAndLoad", timeout=COMPILE_TIMEOUT)
    after = _describe(again)
    changed = {k: (before[k], after.get(k)) for k in before if before[k] != after.get(k)}
    check(not changed, lambda: "after PJRT_Executable_Serialize and PJRT_Executable_DeserializeAndLoad the executable "
          "describes itself otherwise: " + "; ".join(f"PJRT_{'LoadedExecutable' if k == 'AddressableDevices' else 'Executable'}"
                                                     f"_{k} was {a!r}, is {b!r}" for k, (a, b) in changed.items()))
    x, y = np.arange(6, dtype=np.float32).reshape(2, 3), np.full((2, 3), 3.0, np.float32)
    got = ctx.run(again, x, y, device=device)
    check(np.array_equal(got[0], x + y) and np.array_equal(got[1], x * y),
          f"the deserialized executable computes {[g.tolist() for g in got]}, expected (x + y, x * y)")


@case("compile")
def executable_queries_are_stable(ctx: PluginUnderTest) -> None:
    """The PJRT_Executable queries answer the same on every call and on every GetExecutable handle,
    in their own types: Name, NumOutputs, SizeOfGeneratedCodeInBytes (a byte count),
    GetCostAnalysis (named values the executable owns: the caller changing its copy changes no
    later answer), OptimizedProgram (code and the format the plugin names), Fingerprint and the
    deprecated PJRT_LoadedExecutable_Fingerprint (equal, where implemented)."""
    loaded = ctx.compile(two_outputs())
    one, two = loaded.get_executable(), loaded.get_executable()
    for what, ask in (("Name", lambda e: e.name()), ("NumOutputs", lambda e: e.num_outputs()),
                      ("SizeOfGeneratedCodeInBytes", lambda e: _unimplemented(e.size_of_generated_code_in_bytes)),
                      ("OutputMemoryKinds", lambda e: _unimplemented(e.output_memory_kinds))):
        answers = [ask(one), ask(one), ask(two)]
        check(answers[0] == answers[1] == answers[2],
              f"PJRT_Executable_{what} answers {answers[0]!r}, then {answers[1]!r}, and {answers[2]!r} on a second "
              "GetExecutable handle of the same executable; it describes one compiled program, the same each time")
    size = _unimplemented(one.size_of_generated_code_in_bytes)
    check(size is None or (isinstance(size, int) and not isinstance(size, bool) and size >= 0),
          f"PJRT_Executable_SizeOfGeneratedCodeInBytes is {size!r}, expected a byte count >= 0")
    cost = _unimplemented(one.get_cost_analysis)
    if cost is not None:
        bad = {k: v for k, v in dict(cost).items() if not isinstance(k, str) or not _named_value(v)}
        check(not bad, f"PJRT_Executable_GetCostAnalysis returned values that are no PJRT_NamedValue (string, "
                       f"int64, int64 list, float, bool): {bad}")
        seen = dict(cost)
        if isinstance(cost, dict):
            cost.clear()
            cost["pjrt_hub_probe"] = -1.0
        later = dict(one.get_cost_analysis())
        check(later == seen, f"PJRT_Executable_GetCostAnalysis answered {seen}, then, after the caller changed the "
                             f"mapping it got, {later}: the properties are the executable's, a caller's copy "
                             "changes nothing")
    program = _unimplemented(one.optimized_program)
    if program is not None:
        check(isinstance(program, Program) and isinstance(program.format, str) and program.format
              and len(program.data()) > 0,
              f"PJRT_Executable_OptimizedProgram returned {program!r}; expected a program with code and the "
              "format the plugin sets")
        # PJRT_Program names what each format holds: "mlir" MLIR bytecode or text, "hlo" and
        # "hlo_with_config" a serialized HloModuleProto (WithConfig). A caller picks its reader
        # by the format, so the label must say what the code is.
        code = bytes(program.data())
        if program.format == "mlir":
            check(_is_mlir(code), f"PJRT_Executable_OptimizedProgram says format 'mlir' but the code is neither MLIR "
                                  f"text nor MLIR bytecode (it begins {code[:24]!r})")
        elif program.format in ("hlo", "hlo_with_config"):
            check(not _is_mlir(code), f"PJRT_Executable_OptimizedProgram says format {program.format!r} (a serialized "
                                      f"HloModuleProto) but the code is MLIR (it begins {code[:24]!r})")
        # The code itself may differ between calls (XLA serializes an HloModuleProto afresh each
        # time, and protobuf's output is not canonical); its format may not.
        second = two.optimized_program()
        check(second.format == program.format,
              f"PJRT_Executable_OptimizedProgram names the format {program.format!r}, then {second.format!r} on a "
              "second GetExecutable handle of the same executable")
    if ctx.declared_version is None or ctx.declared_version.minor >= 35:
        fingerprint = _unimplemented(one.fingerprint)
        loaded_fingerprint = _unimplemented(loaded.fingerprint)
        if fingerprint is not None and loaded_fingerprint is not None:
            check(fingerprint == loaded_fingerprint,
                  f"PJRT_LoadedExecutable_Fingerprint is {loaded_fingerprint!r} but PJRT_Executable_Fingerprint of "
                  f"its executable is {fingerprint!r}; the deprecated call names the same fingerprint")
        if fingerprint is not None:
            check(two.fingerprint() == fingerprint, "PJRT_Executable_Fingerprint differs between two GetExecutable "
                                                    "handles of one executable")


def _is_mlir(code: bytes) -> bool:
    """MLIR bytecode (its magic number) or MLIR text (a module or a function at a line's start)."""
    return code[:4] == b"ML\xefR" or re.search(rb"(^|\n)\s*(module\b|func\.func\b)", code) is not None


def _named_value(value: Any) -> bool:
    if isinstance(value, (str, bool, int, float)):
        return True
    return isinstance(value, (list, tuple)) and all(isinstance(v, int) and not isinstance(v, bool) for v in value)


@case("compile", min_api_minor=35, timeout=COMPILE_TIMEOUT)
def fingerprint_tells_replica_counts_apart(ctx: PluginUnderTest) -> None:
    """PJRT_Executable_Fingerprint is unique to the executable, whose compile options are among
    its inputs: one program compiled with num_replicas 1 and with num_replicas 2 gives executables
    of NumReplicas 1 and 2, which run on different numbers of devices, so their fingerprints
    differ; compiled again with the same options, the same fingerprint. (XLA's fingerprint does
    not change with the device assignment alone, so a case may not ask that.)"""
    ctx.need_devices(2)
    text = add_one()  # the program text says one replica; the options decide
    made: dict[int, tuple[int, str]] = {}
    for replicas in (1, 2):
        executable = ctx.compile(text, CompileOptions(num_replicas=replicas)).get_executable()
        fingerprint = _unimplemented(executable.fingerprint)
        if fingerprint is None:
            skip(f"plugin {ctx.name} does not implement PJRT_Executable_Fingerprint (the header lets it)")
        made[replicas] = (executable.num_replicas(), fingerprint)
    if made[1][0] == made[2][0]:
        skip(f"plugin {ctx.name} compiled x + 1 for {made[1][0]} replica(s) with num_replicas 1 and 2 alike (it took "
             "the count from the program text): the executables do not differ")
    check(made[1][1] != made[2][1],
          f"PJRT_Executable_Fingerprint is {made[1][1]!r} for an executable of NumReplicas {made[1][0]} and for one of "
          f"NumReplicas {made[2][0]}, compiled from one program with num_replicas 1 and 2: the fingerprint is unique to "
          "the executable, and the compile options are among what it was produced from (XLA's changes with them)")
    again = ctx.compile(text, CompileOptions(num_replicas=2)).get_executable().fingerprint()
    check(again == made[2][1], f"one program compiled twice with num_replicas 2 has fingerprints {made[2][1]!r} and "
                               f"{again!r}; identical inputs give the same fingerprint")


@case("compile", min_api_minor=35)
def fingerprint_ignores_how_options_are_passed(ctx: PluginUnderTest) -> None:
    """PJRT_Client_Compile takes its options as a serialized CompileOptionsProto (the binding also
    takes the CompileOptions value, which it serializes): one program compiled with the same
    options, given either way, is the same executable, with the same fingerprint."""
    for options in (CompileOptions(), CompileOptions(num_replicas=1, num_partitions=1)):
        given = _unimplemented(ctx.compile(add_one(), options).get_executable().fingerprint)
        if given is None:
            skip(f"plugin {ctx.name} does not implement PJRT_Executable_Fingerprint (the header lets it)")
        serialized = ctx.compile(add_one(), encode_compile_options(options)).get_executable().fingerprint()
        check(serialized == given,
              f"PJRT_Executable_Fingerprint is {given!r} for x + 1 compiled with {options} and {serialized!r} for the "
              "same program compiled with those options serialized: identical inputs give the same fingerprint, "
              "whatever form the caller's options came in")


@case("compile")
def compile_options_may_be_left_out(ctx: PluginUnderTest) -> None:
    """The binding's PJRT_Client_Compile takes CompileOptions, a serialized CompileOptionsProto or
    None (the defaults): without options x + 1 compiles and runs; options of any other type (a
    str, a dict) are refused with INVALID_ARGUMENT."""
    try:
        loaded = ctx.call(ctx.client.compile, Program(add_one()), None, what="PJRT_Client_Compile without options",
                          timeout=COMPILE_TIMEOUT)
    except PjrtError as exc:
        fail(f"PJRT_Client_Compile of x + 1 without options failed ({describe(exc)}); None stands for the default "
             "CompileOptions")
    got = ctx.run(loaded, HOST)[0]
    check(np.array_equal(got, HOST + 1), f"x + 1 compiled without options computes {got.tolist()}")
    for options in ("num_replicas=1", {"num_replicas": 1}):
        expect_error(partial(ctx.call, ctx.client.compile, Program(add_one()), options, what="PJRT_Client_Compile",
                             timeout=COMPILE_TIMEOUT),
                     code=ErrorCode.INVALID_ARGUMENT,
                     what=f"PJRT_Client_Compile with options of type {type(options).__name__} (neither CompileOptions "
                          "nor a serialized CompileOptionsProto)")


@case("errors", timeout=COMPILE_TIMEOUT)
def deserialize_truncated_executable(ctx: PluginUnderTest) -> None:
    """PJRT_Executable_DeserializeAndLoad of a serialized executable cut short (at any of its first
    bytes, at half its length, one byte short) is refused with a PJRT error every time: the bytes
    are no longer what PJRT_Executable_Serialize made."""
    data = bytes(ctx.compile(add_one()).get_executable().serialize())
    for length in sorted({*range(min(48, len(data))), len(data) // 2, len(data) - 1}):
        expect_error(partial(ctx.call, ctx.client.deserialize_and_load, data[:length],
                             what="PJRT_Executable_DeserializeAndLoad", timeout=COMPILE_TIMEOUT),
                     what=f"PJRT_Executable_DeserializeAndLoad of the first {length} of the {len(data)} bytes "
                          "PJRT_Executable_Serialize made")


@case("compile", timeout=COMPILE_TIMEOUT)
def device_assignment_and_counts_agree(ctx: PluginUnderTest) -> None:
    """PJRT_Client_DefaultDeviceAssignment(r, p) gives r rows of p distinct devices of the client,
    and a program compiled for r replicas without an assignment uses that one, even when it
    takes every device. An assignment whose shape differs from the replica and partition counts
    is refused with INVALID_ARGUMENT, or (XLA's choice: it takes the assignment's shape) the
    executable is what the assignment says: NumReplicas x NumPartitions devices, those listed."""
    devices = ctx.devices
    count = len(devices)
    known = {device_id(d) for d in ctx.client.devices()}
    for replicas, partitions in ((1, 1), (1, 2), (2, 1), (2, 2), (count, 1)):
        if replicas * partitions > count:
            continue
        what = f"PJRT_Client_DefaultDeviceAssignment({replicas}, {partitions})"
        rows = [tuple(int(d) for d in row) for row in ctx.call(ctx.client.default_device_assignment, replicas,
                                                                partitions, what=what)]
        ids = [d for row in rows for d in row]
        check(len(rows) == replicas and all(len(row) == partitions for row in rows),
              f"{what} is {rows}: expected {replicas} row(s), one per replica, of {partitions} device id(s), one per "
              "partition")
        check(len(set(ids)) == len(ids) and set(ids) <= known,
              f"{what} is {rows}: the ids must be distinct devices of the client ({sorted(known)})")
    # Every device, no assignment given: the default one of count replicas.
    loaded = ctx.compile(add_one(replicas=count), CompileOptions(num_replicas=count))
    placed = [device_id(d) for d in loaded.addressable_devices()]
    default = [row[0] for row in ctx.client.default_device_assignment(count, 1)]
    check(placed == default, f"x + 1 compiled for {count} replicas (every device) without a device assignment runs on "
                             f"devices {placed}; PJRT_Client_DefaultDeviceAssignment({count}, 1) gives {default}")
    inputs = [HOST * (i + 1) for i in range(count)]
    outputs = ctx.execute(loaded, [[ctx.put(h, device=d)] for h, d in zip(inputs, loaded.addressable_devices())])
    for replica, host in enumerate(inputs):
        got = ctx.fetch(outputs[replica][0])
        check(np.array_equal(got, host + 1), f"replica {replica} of {count} computed {got.tolist()}, expected "
                                             f"{(host + 1).tolist()}")
    if count < 2:
        return
    first, second = device_id(devices[0]), device_id(devices[1])
    for replicas, assignment in ((2, ((first,),)), (1, ((first,), (second,))), (1, ((first, second),))):
        what = (f"PJRT_Client_Compile of x + 1 for {replicas} replica(s) and 1 partition with device_assignment "
                f"{assignment}")
        try:
            loaded = ctx.call(ctx.client.compile, Program(add_one(replicas=replicas)),
                              CompileOptions(num_replicas=replicas, device_assignment=assignment), what=what,
                              timeout=COMPILE_TIMEOUT)
        except PjrtError as exc:
            check(exc.code is ErrorCode.INVALID_ARGUMENT, f"{what}: {describe(exc)}; expected INVALID_ARGUMENT")
            continue
        executable = loaded.get_executable()
        counts = (executable.num_replicas(), executable.num_partitions())
        listed = [device_id(d) for d in loaded.addressable_devices()]
        check(counts == (len(assignment), len(assignment[0])) and listed == [d for row in assignment for d in row],
              f"{what} was accepted, and the executable reports NumReplicas {counts[0]} and NumPartitions "
              f"{counts[1]} and runs on devices {listed}: the assignment the executable got and the counts it "
              "reports disagree (expected a refusal with INVALID_ARGUMENT, or an executable of the assignment's "
              "shape on its devices)")


@case("compile", timeout=COMPILE_TIMEOUT)
def delete_lets_running_loops_finish(ctx: PluginUnderTest) -> None:
    """PJRT_LoadedExecutable_Delete drops the executable only after its last execution completes,
    also for a program with a loop, which a runtime can stop between iterations: an execution
    running when Delete is called, and one queued behind it, finish with their results."""
    work = slow_work(ctx)  # skips a plugin that compiles no loop; gives the trips to take ~0.3 s
    executable = ctx.compile(slow_program(SLOW_ELEMENTS))
    results = [work.start(ctx, executable=executable) for _ in range(2)]
    ctx.call(executable.delete, what="PJRT_LoadedExecutable_Delete")
    for index, result in enumerate(results):
        what = "the running execution" if index == 0 else "the execution queued behind it"
        try:
            for event in result.device_complete_events or ():
                ctx.await_event(event, f"the completion event of {what}", timeout=60.0)
            got = ctx.fetch(result.outputs[0][0])
        except PjrtError as exc:
            fail(f"{what} of a loop failed after PJRT_LoadedExecutable_Delete ({describe(exc)}); Delete frees the "
                 "executable only after its last execution completes, and these had started")
        check(np.array_equal(got, work.expected),
              f"{what} of a loop gave wrong values after PJRT_LoadedExecutable_Delete (first "
              f"{got[:4].tolist()}, expected {work.expected[:4].tolist()})")


# -- execute -------------------------------------------------------------------------------------


@case("execute")
def outputs_are_what_the_executable_declares(ctx: PluginUnderTest) -> None:
    """The outputs of an execution are what the executable declares: as many as NumOutputs, each of
    the element type and dimensions of OutputElementTypes and OutputDimensions, in a memory of the
    kind PJRT_Executable_OutputMemoryKinds names for it (one kind per output). Among them a
    boolean output (PRED, though stored a byte per element) and a scalar one (no dimensions)."""
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    for text, what, hosts in ((two_outputs(), "(x + y, x * y) on f32[2,3]", (x, np.ones((2, 3), np.float32))),
                              (_flag_and_scalar(), "(x != 0, 2.5), a pred[4] and an f32[] output",
                               (HOST - 2,))):
        _declared_outputs(ctx, text, what, hosts)


def _declared_outputs(ctx: PluginUnderTest, text: str, what: str, hosts: tuple[np.ndarray, ...]) -> None:
    loaded = ctx.compile(text)
    executable = loaded.get_executable()
    outputs = ctx.execute(loaded, [[ctx.put(h) for h in hosts]])[0]
    count = executable.num_outputs()
    check(len(outputs) == count, f"PJRT_LoadedExecutable_Execute of {what} returned {len(outputs)} outputs; "
                                 f"PJRT_Executable_NumOutputs says {count}")
    if ctx.declared_version is None or ctx.declared_version.minor >= 29:
        types = list(executable.output_element_types())
        dims = [tuple(d) for d in executable.output_dimensions()]
        got = [(o.element_type(), tuple(o.dimensions())) for o in outputs]
        check(got == list(zip(types, dims)),
              f"the outputs of {what} are {[(t.name, list(d)) for t, d in got]}, but "
              f"PJRT_Executable_OutputElementTypes and OutputDimensions declare "
              f"{[(t.name, list(d)) for t, d in zip(types, dims)]}")
    kinds = _unimplemented(executable.output_memory_kinds)
    if kinds is None:
        return
    kinds = list(kinds)
    check(len(kinds) == count, f"PJRT_Executable_OutputMemoryKinds lists {len(kinds)} kinds ({kinds}) for "
                               f"{count} outputs of {what}; it has one per output")
    placed = [o.memory().kind() for o in outputs]
    check(placed == kinds, f"the outputs of {what} are in memories of kinds {placed}, but "
                           f"PJRT_Executable_OutputMemoryKinds says {kinds}")


@case("execute")
def outputs_do_not_alias_inputs(ctx: PluginUnderTest) -> None:
    """An output is a buffer of its own even where the program returns its argument as it is, one
    value twice, or a constant: it is not the argument's handle, its bytes are in memory no other
    live buffer uses (for host memory: the PJRT_Buffer_UnsafePointer ranges of the argument, the
    outputs and the outputs of an earlier execution do not overlap), and donating it to a program
    that reuses the storage in place changes neither the argument nor the sibling output."""
    passes = ctx.compile(_passes_through())
    donating = ctx.compile(donating_add_one())
    argument = ctx.put(HOST)
    outputs = ctx.execute(passes, [[argument]])[0]
    check(len(outputs) == 3, f"PJRT_LoadedExecutable_Execute returned {len(outputs)} outputs, expected 3")
    same = [i for i, o in enumerate(outputs) if _handle(o) is _handle(argument)]
    check(not same, f"PJRT_LoadedExecutable_Execute returned the argument's own handle as output {same}; every output "
                    "is a new PJRT_Buffer the caller destroys")
    check(_handle(outputs[1]) is not _handle(outputs[2]), "PJRT_LoadedExecutable_Execute returned one handle for two outputs of the same "
                                        "value; each output is a buffer of its own")
    shared = _sharing_storage({"the argument x": argument, **{f"output {i}": o for i, o in enumerate(outputs)}})
    check(not shared, lambda: f"the outputs of (x, x + x, x + x) share memory with each other or with the argument: "
                              f"{'; '.join(shared)} (PJRT_Buffer_UnsafePointer and OnDeviceSizeInBytes). Every output "
                              "of PJRT_LoadedExecutable_Execute is a new buffer with bytes of its own, even an argument "
                              "or a value returned as it is; writing through a zero-copy view of one would change "
                              "the other")
    constant = ctx.compile(_returns_a_constant())
    kept: dict[str, Any] = {}  # every buffer stays alive until the comparison
    for index, host in enumerate((HOST, HOST * 2)):
        given = ctx.put(host)
        c, plus = ctx.execute(constant, [[given]])[0]
        kept.update({f"x of execution {index}": given, f"c of execution {index}": c,
                     f"x + c of execution {index}": plus})
        for what, buffer, expected in (("c", c, np.full(4, 3.0, np.float32)), ("x + c", plus, host + 3)):
            got = ctx.fetch(buffer)
            check(np.array_equal(got, expected), f"execution {index} of (c, x + c) gave {what} = {got.tolist()}, "
                                                 f"expected {expected.tolist()}")
    shared = _sharing_storage(kept)
    check(not shared, lambda: f"the outputs of two executions of (c, x + c), c a constant of the program, share memory: "
                              f"{'; '.join(shared)} (PJRT_Buffer_UnsafePointer). Each execution's outputs are new "
                              "buffers: a constant the program returns is copied into an output of its own, not "
                              "handed out as the executable's storage")
    for index, watched in ((0, ("the argument", argument, HOST)), (1, ("output 2", outputs[2], HOST + HOST))):
        ctx.fetch(ctx.execute(donating, [[outputs[index]]])[0][0])
        what, buffer, expected = watched
        check(not buffer.is_deleted(), f"donating output {index} of (x, x + x, x + x) deleted {what}: "
                                       f"PJRT_LoadedExecutable_Execute had given output {index} the handle of {what}")
        got = ctx.fetch(buffer)
        check(np.array_equal(got, expected),
              f"donating output {index} of (x, x + x, x + x) to x + 1 changed {what} to {got.tolist()} (expected "
              f"{expected.tolist()}): PJRT_LoadedExecutable_Execute gave output {index} the storage of {what}, so "
              "reusing the donated output's storage overwrote it")
    argument.delete()
    got = ctx.fetch(outputs[2])
    check(np.array_equal(got, HOST + HOST), f"deleting the argument changed an output to {got.tolist()}")


@case("execute")
def each_execution_has_outputs_of_its_own(ctx: PluginUnderTest) -> None:
    """Every execution returns new output buffers: a later execution of the same executable leaves
    the earlier outputs' handles and values as they were, and deleting the later outputs leaves
    the earlier ones readable."""
    executable = ctx.compile(add_one())
    first_input, second_input = HOST, HOST * 10
    first = ctx.execute(executable, [[ctx.put(first_input)]])[0][0]
    second = ctx.execute(executable, [[ctx.put(second_input)]])[0][0]
    check(_handle(first) is not _handle(second), "two executions returned the same output handle; each execution's outputs are new "
                               "buffers the caller owns")
    got = ctx.fetch(first)
    check(np.array_equal(got, first_input + 1),
          f"the output of the first execution holds {got.tolist()} after a second execution (on "
          f"{second_input.tolist()}); expected {(first_input + 1).tolist()}: PJRT_LoadedExecutable_Execute reused the "
          "storage of earlier outputs")
    second.delete()
    check(not first.is_deleted(), "deleting the output of the second execution deleted the first execution's output")
    got = ctx.fetch(first)
    check(np.array_equal(got, first_input + 1), f"after the second output was deleted the first holds {got.tolist()}")


# -- events --------------------------------------------------------------------------------------


@case("events", timeout=COMPILE_TIMEOUT)
def one_completion_event_per_device(ctx: PluginUnderTest) -> None:
    """PJRT_LoadedExecutable_Execute on two devices returns one completion event per device (as
    many as output lists); once device i's event is ready, device i's outputs are ready. Each
    event is its own device's: when only device 1's input carries an error (the output of a
    failed execution), device 1's event reports an error, whatever device 0's says."""
    first, second = ctx.need_devices(2)
    assignment = ((device_id(first),), (device_id(second),))
    executable = ctx.compile(add_one(replicas=2), CompileOptions(num_replicas=2, device_assignment=assignment))
    arguments = [[ctx.put(HOST, device=first)], [ctx.put(HOST * 2, device=second)]]
    result = ctx.call(executable.execute, arguments, ExecuteOptions(), what="PJRT_LoadedExecutable_Execute",
                      timeout=COMPILE_TIMEOUT)
    events = list(result.device_complete_events or ())
    check(len(events) == len(result.outputs) == 2,
          f"PJRT_LoadedExecutable_Execute on 2 devices returned {len(events)} completion events and "
          f"{len(result.outputs)} output lists; device_complete_events has one event per device")
    for index, event in enumerate(events):
        ctx.await_event(event, f"device_complete_events[{index}]")
        ready = ctx.call(result.outputs[index][0].ready_event, what="PJRT_Buffer_ReadyEvent")
        ctx.await_event(ready, f"the ready event of device {index}'s output", timeout=1.0)
        got = ctx.fetch(result.outputs[index][0])
        expected = HOST * (index + 1) + 1
        check(np.array_equal(got, expected), f"device {index}'s output is {got.tolist()}, expected {expected.tolist()}")
    failed = _failed_output_on(ctx, second)
    if failed is None:
        return
    what = "PJRT_LoadedExecutable_Execute on 2 devices, device 1's argument the output of a failed execution"
    try:
        result = ctx.call(executable.execute, [[ctx.put(HOST, device=first)], [failed]], ExecuteOptions(), what=what,
                          timeout=COMPILE_TIMEOUT)
    except PjrtError:
        return  # refused at the call: no events to tell apart
    events = list(result.device_complete_events or ())
    check(len(events) == 2, f"{what} returned {len(events)} completion events, expected 2")
    error = _error_of(ctx, events[1], f"device_complete_events[1] of the {what}")
    check(error is not None, f"device_complete_events[1] of the {what} completed without an error: device 1's event "
                             "reports device 1's execution, which could not read its input "
                             f"(device_complete_events[0] is {'the same event' if events[0] is events[1] else 'another event'})")
    _error_of(ctx, events[0], f"device_complete_events[0] of the {what}")


def _failed_output_on(ctx: PluginUnderTest, device: Any) -> Any:
    """An f32[4] output of a failed execution on ``device``, or None where the plugin does not
    make one (it refuses the failing program, or runs it without an error)."""
    try:
        failing = ctx.compile(failing_program(), CompileOptions(device_assignment=((device_id(device),),)))
        result = ctx.call(failing.execute, [[ctx.put(HOST, device=device), ctx.put(np.array(2.0, np.float32),
                                                                                    device=device)]],
                          ExecuteOptions(), what="PJRT_LoadedExecutable_Execute (a program that cannot allocate its "
                                                 "output)", timeout=COMPILE_TIMEOUT)
    except PjrtError:
        return None
    if _error_of(ctx, result.device_complete_events[0], "the failed execution's completion event") is None:
        return None
    return result.outputs[0][0]


@case("events", timeout=COMPILE_TIMEOUT)
def failed_input_fails_the_execution(ctx: PluginUnderTest) -> None:
    """An execution given the output of a failed execution fails with that error, its code kept:
    refused at the call, or with the error on its completion event and its outputs (never values
    computed from a buffer that has none); a copy of that output to another device carries the
    error too. Two failures are passed on: a program that cannot allocate its output, and a loop
    stopped by ExecuteOptions.timeout (the binding's: DEADLINE_EXCEEDED, where the plugin can
    stop an execution)."""
    sources = [source for source in (_unallocatable_output(ctx), _timed_out_output(ctx)) if source is not None]
    if not sources:
        skip(f"plugin {ctx.name} makes no failed output to pass on (it refuses the failing program at the call or "
             "runs it without an error, and stops no execution at its time limit)")
    for index, (failed, original, n, what) in enumerate(sources):
        if index == 0 and len(ctx.devices) >= 2:
            _copy_fails_with_its_source(ctx, failed, original)
        # x + 1, then x + 1 donating x (last: it may consume the failed buffer); runtimes often
        # launch a donating program by another path than a plain one.
        for plus, program in ((ctx.compile(add_one(n)), "x + 1"), (ctx.compile(donating_add_one(n)), "x + 1, x donated")):
            _fails_with_its_input(ctx, plus, failed, original, f"PJRT_LoadedExecutable_Execute of {program} with the "
                                                               f"output of {what}")


def _unallocatable_output(ctx: PluginUnderTest) -> tuple[Any, PjrtError, int, str] | None:
    """The f32[4] output of the program that cannot allocate its other output, with its error."""
    try:
        failing = ctx.compile(failing_program())
        args = [ctx.put(HOST), ctx.put(np.array(2.0, np.float32))]
        result = ctx.call(failing.execute, [args], ExecuteOptions(), what="PJRT_LoadedExecutable_Execute "
                          "(a program that cannot allocate its output)", timeout=COMPILE_TIMEOUT)
    except PjrtError:
        return None
    original = _error_of(ctx, result.device_complete_events[0], "the failed execution's completion event")
    if original is None:
        return None
    return result.outputs[0][0], original, HOST.size, "a failed execution"


def _timed_out_output(ctx: PluginUnderTest) -> tuple[Any, PjrtError, int, str] | None:
    """The output of the slow loop run with ExecuteOptions.timeout 0 (past before it starts),
    with its error; None where the plugin compiles no loop or cannot stop an execution."""
    try:
        # Few trips: a plugin that cannot stop an execution runs it to the end, quickly.
        executable = ctx.compile(slow_program(_LENT))
        args = [ctx.put(np.zeros(_LENT, np.float32)), ctx.put(np.array(16, np.int32))]
        result = ctx.call(executable.execute, [args], ExecuteOptions(timeout=0.0),
                          what="PJRT_LoadedExecutable_Execute (a loop, with ExecuteOptions.timeout 0)",
                          timeout=COMPILE_TIMEOUT)
    except PjrtError:
        return None
    original = _error_of(ctx, result.device_complete_events[0], "the timed-out execution's completion event")
    if original is None:
        return None
    return result.outputs[0][0], original, _LENT, "an execution stopped at its time limit"


def _fails_with_its_input(ctx: PluginUnderTest, plus: Any, failed: Any, original: PjrtError, what: str) -> None:
    try:
        dependent = ctx.call(plus.execute, [[failed]], ExecuteOptions(), what=what, timeout=COMPILE_TIMEOUT)
    except PjrtError as exc:
        _same_code(exc, original, f"{what}, refused at the call")
        return
    error = _error_of(ctx, dependent.device_complete_events[0], f"the completion event of the {what}")
    if error is None:
        fail(f"{what} completed without an error; the error of the execution that made its input "
             f"({describe(original)}) goes on to every execution that reads it")
    _same_code(error, original, f"the completion event of the {what}")
    output = dependent.outputs[0][0]
    error = _error_of(ctx, ctx.call(output.ready_event, what="PJRT_Buffer_ReadyEvent"),
                      f"the output's ready event of the {what}")
    check(error is not None, f"the output of the {what} says ready without an error")
    expect_error(lambda: ctx.fetch(output), what=f"PJRT_Buffer_ToHostBuffer of the output of the {what}")


def _copy_fails_with_its_source(ctx: PluginUnderTest, failed: Any, original: PjrtError) -> None:
    try:
        copy = ctx.call(failed.copy_to_device, ctx.devices[1], what="PJRT_Buffer_CopyToDevice of a failed output")
    except PjrtError as exc:
        _same_code(exc, original, "PJRT_Buffer_CopyToDevice of a failed output, refused at the call")
        return
    try:
        got = ctx.fetch(copy)
    except PjrtError as exc:
        _same_code(exc, original, "PJRT_Buffer_ToHostBuffer of a copy of a failed output")
        return
    fail(f"a copy (PJRT_Buffer_CopyToDevice) of the output of a failed execution holds values ({got.reshape(-1)[:4]}); "
         f"it carries the error of the execution ({describe(original)})")


def _error_of(ctx: PluginUnderTest, event: Any, what: str) -> PjrtError | None:
    try:
        ctx.call(event.await_, ctx.seconds(CALL_TIMEOUT), what=f"{what}: PJRT_Event_Await", timeout=CALL_TIMEOUT + 1)
    except PjrtError as exc:
        if exc.code is ErrorCode.DEADLINE_EXCEEDED and not event.is_ready():
            fail(f"{what} never became ready")
        return exc
    return event.error()


def _same_code(error: PjrtError, original: PjrtError, where: str) -> None:
    check(error.code is original.code,
          f"{where}: {describe(error)}; expected the error of the failed execution it depends on, "
          f"{describe(original)} (same code)")


# -- errors --------------------------------------------------------------------------------------


@case("errors")
def execute_device_with_two_argument_lists(ctx: PluginUnderTest) -> None:
    """PJRT_LoadedExecutable_Execute with execute_device set and two argument lists fails with
    INVALID_ARGUMENT: with execute_device, num_devices is 1 (XLA: "num_devices and corresponding
    output list sizes must be 1 ... with non-null execute_device")."""
    device = ctx.device
    executable = ctx.compile(add_one(), CompileOptions(device_assignment=((device_id(device),),)))
    lists = [[ctx.put(HOST, device=device)], [ctx.put(HOST * 2, device=device)]]

    def run() -> Any:
        result = executable.execute(lists, ExecuteOptions(), device)
        for event in result.device_complete_events or ():
            event.await_(ctx.seconds(CALL_TIMEOUT))
        return result

    expect_error(lambda: ctx.call(run, what="PJRT_LoadedExecutable_Execute with execute_device", timeout=30.0),
                 code=ErrorCode.INVALID_ARGUMENT,
                 what="PJRT_LoadedExecutable_Execute with execute_device set and 2 argument lists (num_devices must be 1)")


#: Arguments that do not fit an f32[4] parameter: (what, host array, same byte size as f32[4]).
_MISFITS: tuple[tuple[str, np.ndarray, bool], ...] = (
    ("f32[5]", np.ones(5, np.float32), False),
    ("f64[4]", np.ones(4, np.float64), False),
    ("f16[4]", np.ones(4, np.float16), False),
    ("s32[4]", np.ones(4, np.int32), True),
    ("f32[2,2]", np.ones((2, 2), np.float32), True),
)


def _executables_of_three(ctx: PluginUnderTest) -> list[tuple[str, Any]]:
    """x + y + z, and the same donating z: runtimes often launch a donating program by another
    path than a plain one, and both must check what they are given."""
    return [("x + y + z (f32[4] each)", ctx.compile(_adds_three())),
            ("x + y + z (f32[4] each, z donated)", ctx.compile(_donating(_adds_three(), 2, 0)))]


@case("errors")
def every_argument_is_checked(ctx: PluginUnderTest) -> None:
    """PJRT_LoadedExecutable_Execute checks each argument against its own parameter, wherever it
    is in the list and whether or not the program donates an input: an argument of another byte
    size (f32[5], f64[4] or f16[4] for f32[4]) is refused with INVALID_ARGUMENT at every
    position; one of the same byte size but another element type or shape (s32[4], f32[2,2]),
    which XLA lets through (it compares byte sizes), is refused at every position or at none."""
    for program, executable in _executables_of_three(ctx):
        for what, host, same_size in _MISFITS:
            refused: list[int] = []
            for position in range(3):
                args = [ctx.put(HOST) for _ in range(3)]  # fresh: a donated one is gone after a run
                args[position] = ctx.put(host)
                call = f"PJRT_LoadedExecutable_Execute of {program} with {what} as argument {position}"
                try:
                    ctx.execute(executable, [args])
                except PjrtError as exc:
                    check(exc.code is ErrorCode.INVALID_ARGUMENT,
                          f"{call}: {describe(exc)}; an argument that does not fit its parameter is refused with "
                          "INVALID_ARGUMENT (XLA: \"expected parameter N of size S but got buffer with incompatible "
                          "size\")")
                    refused.append(position)
            ran = [p for p in range(3) if p not in refused]
            if not same_size:
                check(not ran, f"PJRT_LoadedExecutable_Execute ran {program} with {what} as argument {ran} (refused "
                               f"it at {refused or 'no position'}): an argument of another byte size than its "
                               "parameter is refused with INVALID_ARGUMENT, at every position")
            else:
                check(not refused or not ran,
                      f"PJRT_LoadedExecutable_Execute of {program} refused {what} for an f32[4] parameter as argument "
                      f"{refused} but ran it as argument {ran}: the arguments are checked at some positions only; "
                      "each is checked against its own parameter alike")


def _with_at(ctx: PluginUnderTest, thing: Any, position: int) -> list[list[Any]]:
    """One argument list of three, ``thing`` at ``position`` and fitting buffers elsewhere."""
    return [[thing if i == position else ctx.put(HOST) for i in range(3)]]


@case("errors", timeout=COMPILE_TIMEOUT)
def argument_lists_are_checked(ctx: PluginUnderTest) -> None:
    """PJRT_LoadedExecutable_Execute takes one argument list per device, each with one buffer of
    the executable's client per parameter, and refuses anything else with INVALID_ARGUMENT, with
    or without ExecuteOptions and whether or not the program donates: a list with too few
    buffers (none, two of three), an entry that is no buffer (None, the host array itself, any
    other object), and, for an executable of two replicas, one argument list or a short one."""
    misuses: list[tuple[str, Any, Callable[[], list[list[Any]]]]] = []
    for program, executable in _executables_of_three(ctx):
        misuses += [
            (f"{program} with no argument", executable, lambda: [[]]),
            (f"{program} with two arguments of three", executable, lambda: [[ctx.put(HOST), ctx.put(HOST)]]),
        ]
        for what, thing in (("None", None), ("the host array", HOST), ("an object()", object())):
            for position in (0, 2):
                misuses.append((f"{program} with {what} as argument {position}", executable,
                                partial(_with_at, ctx, thing, position)))
    if len(ctx.devices) >= 2:
        first, second = ctx.devices[:2]
        replicated = ctx.compile(add_one(replicas=2), CompileOptions(
            num_replicas=2, device_assignment=((device_id(first),), (device_id(second),))))
        misuses += [
            ("x + 1 on two replicas with one argument list", replicated, lambda: [[ctx.put(HOST, device=first)]]),
            ("x + 1 on two replicas with the second argument list empty", replicated,
             lambda: [[ctx.put(HOST, device=first)], []]),
        ]
    for what, executable, arguments in misuses:
        for options in (None, ExecuteOptions()):
            lists = arguments()

            def run(executable: Any = executable, lists: list[list[Any]] = lists, options: Any = options) -> Any:
                result = executable.execute(lists) if options is None else executable.execute(lists, options)
                for event in result.device_complete_events or ():
                    event.await_(ctx.seconds(CALL_TIMEOUT))
                return result

            expect_error(lambda: ctx.call(run, what="PJRT_LoadedExecutable_Execute", timeout=COMPILE_TIMEOUT),
                         code=ErrorCode.INVALID_ARGUMENT,
                         what=f"PJRT_LoadedExecutable_Execute of {what}, "
                              f"{'without options' if options is None else 'with ExecuteOptions()'}")


@case("errors", timeout=COMPILE_TIMEOUT)
def execute_device_of_another_client(ctx: PluginUnderTest) -> None:
    """PJRT_LoadedExecutable_Execute refuses an execute_device that is not one of its client's
    devices (the header: it must be an addressable device; a device of a second client of the same
    plugin is not one): whether the argument is on that device (a buffer of the second client) or
    on the executable's own device, the call or its completion event ends in a PJRT error."""
    executable = ctx.compile(add_one(), CompileOptions(device_assignment=((device_id(ctx.device),),)))
    own = ctx.put(HOST)
    other = ctx.call(ctx.registry.create_client, ctx.name, what="PJRT_Client_Create (a second client)",
                     timeout=COMPILE_TIMEOUT)
    try:
        foreign = other.addressable_devices()[0]
        transfer = ctx.call(other.buffer_from_host_buffer, HOST, device=foreign,
                            what="PJRT_Client_BufferFromHostBuffer on the second client")
        ctx.await_event(transfer.done_with_host_buffer, "done_with_host_buffer on the second client")
        for where, argument in (("on that device (a buffer of the second client)", transfer.buffer),
                                ("on the executable's own device", own)):
            def run(argument: Any = argument) -> Any:
                result = executable.execute([[argument]], ExecuteOptions(), foreign)
                for event in result.device_complete_events or ():
                    event.await_(ctx.seconds(CALL_TIMEOUT))
                return result

            expect_error(lambda: ctx.call(run, what="PJRT_LoadedExecutable_Execute with execute_device", timeout=30.0),
                         what=f"PJRT_LoadedExecutable_Execute with execute_device a device of another client of the "
                              f"plugin and the argument {where} (execute_device must be a device of the executable's "
                              "client)")
        transfer.buffer.delete()
    finally:
        ctx.call(other.destroy, what="PJRT_Client_Destroy (the second client)", timeout=COMPILE_TIMEOUT)


# -- donation ------------------------------------------------------------------------------------


@case("buffers", min_api_minor=39)
def non_donatable_lets_one_buffer_fill_two_arguments(ctx: PluginUnderTest) -> None:
    """ExecuteOptions.non_donatable_input_indices is how a caller passes one buffer for a donated
    parameter and another: with the donated one listed, f(b, b) runs, computes b + b, and b
    stays alive and unchanged."""
    executable = ctx.compile(_add_donating_second())
    buffer = ctx.put(HOST)
    try:
        outputs = ctx.execute(executable, [[buffer, buffer]], ExecuteOptions(non_donatable_input_indices=(1,)))
    except PjrtError as exc:
        fail(f"PJRT_LoadedExecutable_Execute refused one buffer for two parameters although the donated one is in "
             f"non_donatable_input_indices ({describe(exc)}); a buffer not donated may be passed more than once")
    got = ctx.fetch(outputs[0][0])
    check(np.array_equal(got, HOST + HOST), f"x + y with x = y = {HOST.tolist()} gave {got.tolist()}")
    check(not buffer.is_deleted(), "a buffer passed for a parameter listed in non_donatable_input_indices was donated")
    kept = ctx.fetch(buffer)
    check(np.array_equal(kept, HOST), f"the buffer listed as non-donatable changed to {kept.tolist()}")


def _sum_and_product(donated: tuple[int, ...]) -> str:
    """``(x + y, x * y, x - y)`` with input ``i`` donated to output ``i`` for each ``i`` in ``donated``."""
    text = elementwise("jit_sum_and_product", [F32x4, F32x4], [("add", (0, 1)), ("multiply", (0, 1)),
                                                              ("subtract", (0, 1))])
    for index in donated:
        text = _donating(text, index, index)
    return text


def _expect_donated(buffer: Any, what: str) -> None:
    check(buffer.is_deleted(), f"{what} was not donated: PJRT_Buffer_IsDeleted is false after the execution; an "
                               "input the program aliases to an output is donated unless non_donatable_input_indices "
                               "lists it")


def _expect_kept(ctx: PluginUnderTest, buffer: Any, host: np.ndarray, what: str) -> None:
    check(not buffer.is_deleted(), f"{what} was donated (PJRT_Buffer_IsDeleted is true)")
    got = ctx.fetch(buffer)
    check(np.array_equal(got, host), f"{what} changed to {got.tolist()}, was {host.tolist()}")


@case("buffers")
def donation_into_one_of_several_outputs(ctx: PluginUnderTest) -> None:
    """A program with several outputs of which one takes a donated input's storage computes every
    output, the aliased one and the others: ``(x + y, x * y, x - y)`` with y donated to x * y
    gives all three, y donated and x as it was."""
    x, y = HOST, HOST * 10
    executable = ctx.compile(_sum_and_product((1,)))
    first, second = ctx.put(x), ctx.put(y)
    outputs = ctx.execute(executable, [[first, second]])[0]
    got = [ctx.fetch(o) for o in outputs]
    expected = [x + y, x * y, x - y]
    check(all(np.array_equal(g, e) for g, e in zip(got, expected)),
          f"(x + y, x * y, x - y) with y donated to x * y gave {[g.tolist() for g in got]}, expected "
          f"{[e.tolist() for e in expected]}")
    _expect_donated(second, "y, aliased to output 1,")
    _expect_kept(ctx, first, x, "x, not aliased,")


@case("buffers")
def donation_into_an_output_of_another_type(ctx: PluginUnderTest) -> None:
    """An input aliased to an output of another element type (f32[4] to s32[4], the bytes the
    same size) cannot hold the result as it is: the program is refused with INVALID_ARGUMENT, or
    it runs and gives the right result, the input donated or left as it was, never written
    with the output's bytes."""
    s32 = tensor((4,), "i32")
    text = main_module("jit_converted", f"%arg0: {F32x4} {{tf.aliasing_output = 0 : i32}}", s32,
                       f"    %0 = stablehlo.convert %arg0 : ({F32x4}) -> {s32}\n    return %0 : {s32}\n")
    try:
        executable = ctx.call(ctx.client.compile, Program(text), CompileOptions(), what="PJRT_Client_Compile",
                              timeout=COMPILE_TIMEOUT)
    except PjrtError as exc:
        check(exc.code is ErrorCode.INVALID_ARGUMENT,
              f"PJRT_Client_Compile of convert(x) with x (f32[4]) aliased to the s32[4] result: {describe(exc)}; "
              "expected success or INVALID_ARGUMENT")
        return
    host = HOST * 3
    argument = ctx.put(host)
    try:
        output = ctx.execute(executable, [[argument]])[0][0]
    except PjrtError as exc:
        fail(f"convert(x) with x (f32[4]) aliased to its s32[4] result compiled but failed to run ({describe(exc)}); "
             "a program the plugin accepted computes its result")
    got = ctx.fetch(output)
    check(got.dtype == np.int32 and np.array_equal(got, host.astype(np.int32)),
          f"convert(x) to s32 with x donated gave {got.dtype}{got.tolist()}, expected int32{host.astype(np.int32).tolist()}")
    if not argument.is_deleted():
        _expect_kept(ctx, argument, host, "x, aliased to an output of another type and not donated,")


@case("buffers", min_api_minor=39)
def non_donatable_leaves_the_other_donations(ctx: PluginUnderTest) -> None:
    """non_donatable_input_indices exempts the inputs it lists, and only those: with x and y both
    donated to ``(x + y, x * y)`` and x listed, x stays alive and unchanged, y is donated, and
    the results are right; listing y instead keeps y and donates x. One buffer given for both is
    still donated as the unlisted one and read as the other, so the call is refused with
    INVALID_ARGUMENT."""
    executable = ctx.compile(elementwise("jit_both_donated", [F32x4, F32x4], [("add", (0, 1)), ("multiply", (0, 1))])
                             .replace(f"%arg0: {F32x4}", f"%arg0: {F32x4} {{tf.aliasing_output = 0 : i32}}")
                             .replace(f"%arg1: {F32x4}", f"%arg1: {F32x4} {{tf.aliasing_output = 1 : i32}}"))
    x, y = HOST, HOST * 10
    for kept in (0, 1):
        buffers = [ctx.put(x), ctx.put(y)]
        outputs = ctx.execute(executable, [buffers], ExecuteOptions(non_donatable_input_indices=(kept,)))[0]
        got = [ctx.fetch(o) for o in outputs]
        check(np.array_equal(got[0], x + y) and np.array_equal(got[1], x * y),
              f"(x + y, x * y) with non_donatable_input_indices=({kept},) gave {[g.tolist() for g in got]}")
        names = ("x", "y")
        _expect_kept(ctx, buffers[kept], (x, y)[kept], f"{names[kept]}, listed in non_donatable_input_indices,")
        _expect_donated(buffers[1 - kept], f"{names[1 - kept]}, aliased and not listed in "
                                                f"non_donatable_input_indices ({kept},),")
        # One buffer for both: donated as the unlisted input, read as the listed one.
        shared = ctx.put(x)
        expect_error(partial(ctx.execute, executable, [[shared, shared]],
                             ExecuteOptions(non_donatable_input_indices=(kept,))),
                     code=ErrorCode.INVALID_ARGUMENT,
                     what=f"PJRT_LoadedExecutable_Execute of (x + y, x * y), both donated, with one buffer for x and y "
                          f"and non_donatable_input_indices=({kept},): the buffer is donated as {names[1 - kept]} and "
                          f"used again as {names[kept]} (XLA: \"Attempt to donate a buffer which is also used by the "
                          "same call to Execute()\")")


#: Elements of the host arrays the release case lends the plugin.
_LENT = 1024


def _fails_reading(n: int) -> str:
    """``(x + 1, broadcast(s))`` on ``x: f32[n]``, the broadcast too large to allocate: it reads
    its arguments and fails (see ``failing_program``)."""
    return failing_program().replace("tensor<4xf32>", tensor((n,), "f32"))


@case("buffers", min_api_minor=48, timeout=COMPILE_TIMEOUT)
def deleting_an_argument_releases_it_once_executions_are_done(ctx: PluginUnderTest) -> None:
    """An execution holds its arguments only until it completes: a kImmutableZeroCopy buffer that
    an execution read gives its host array back (done_with_host_buffer fires) once it is deleted
    and the execution is done, whether it is deleted after the execution completed, right after
    the Execute call, or after an execution that failed. (A plugin that copied the array at once
    has nothing to give back.) The program donates another input, which many runtimes launch by
    another path than a plain one."""
    t = tensor((_LENT,), "f32")
    donating = ctx.compile(elementwise("jit_add_donating_second", [t, t], [("add", (0, 1))]).replace(
        f"%arg1: {t}", f"%arg1: {t} {{tf.aliasing_output = 0 : i32}}"))
    try:
        failing: Any = ctx.compile(_fails_reading(_LENT))
    except PjrtError:
        failing = None
    scenarios = [("deleted after the execution completed", donating, True),
                 ("deleted right after the Execute call", donating, False)]
    if failing is not None:
        scenarios.append(("deleted after an execution that failed", failing, True))
    for what, executable, wait_first in scenarios:
        host = _aligned(np.linspace(-1.0, 1.0, _LENT, dtype=np.float32))
        transfer = ctx.call(ctx.client.buffer_from_host_buffer, host, device=ctx.device,
                            semantics=HostBufferSemantics.IMMUTABLE_ZERO_COPY,
                            what="PJRT_Client_BufferFromHostBuffer (kImmutableZeroCopy)")
        argument, lent = transfer.buffer, transfer.done_with_host_buffer
        second = ctx.put(host.copy()) if executable is donating else ctx.put(np.array(2.0, np.float32))
        try:
            result = ctx.call(executable.execute, [[argument, second]], ExecuteOptions(),
                              what="PJRT_LoadedExecutable_Execute", timeout=COMPILE_TIMEOUT)
        except PjrtError:
            result = None  # refused at the call: nothing read the argument
        if not wait_first:
            argument.delete()
        for event in (result.device_complete_events or ()) if result is not None else ():
            _error_of(ctx, event, "device_complete_events[0]")  # the failing program's error is expected
        if wait_first:
            argument.delete()
        for buffer in [second, *(result.outputs[0] if result is not None else ())]:
            if not buffer.is_deleted():
                buffer.delete()
        check(_wait_for(lent.is_ready, ctx.seconds(CALL_TIMEOUT)),
              f"a kImmutableZeroCopy argument {what} never gave its host array back: done_with_host_buffer did not "
              f"fire within {ctx.seconds(CALL_TIMEOUT):g} s of the deletion and the execution's end, so the "
              "execution still holds an argument it has finished with")


@case("buffers")
def donation_leaves_an_immutable_zero_copy_array_unwritten(ctx: PluginUnderTest) -> None:
    """A buffer made with kImmutableZeroCopy may alias the caller's host array, but the runtime
    never writes it: donating the buffer to x + 1 consumes the buffer and leaves the host array
    as it was (only kMutableZeroCopy lets donation reuse it)."""
    executable = ctx.compile(donating_add_one())
    host = HOST.copy()
    buffer = ctx.put(host, semantics=HostBufferSemantics.IMMUTABLE_ZERO_COPY, wait=False)
    got = ctx.fetch(ctx.execute(executable, [[buffer]])[0][0])
    check(np.array_equal(got, HOST + 1), f"x + 1 with x donated gave {got.tolist()}, expected {(HOST + 1).tolist()}")
    check(np.array_equal(host, HOST),
          f"donating a kImmutableZeroCopy buffer to x + 1 wrote the result into the caller's host array (now "
          f"{host.tolist()}, was {HOST.tolist()}): the runtime may alias that array but promises not to use it for "
          "aliased outputs")


# -- concurrency ---------------------------------------------------------------------------------

#: Threads that execute one executable at once, executions each between two looks at the clock,
#: and for how long they go on (they stop at the first wrong result).
RACERS = 4
RUNS = 10
RACE_SECONDS = 0.4
#: CPython's thread switch interval while they race (its default is 5 ms, longer than a whole
#: execution of a small program): switching every few microseconds interleaves the steps of
#: concurrent executions, which is where state they wrongly share shows.
SWITCH_INTERVAL = 2e-6


@case("concurrency", timeout=60.0)
def concurrent_executions_keep_their_values_apart(ctx: PluginUnderTest) -> None:
    """Executions of one executable that run at the same time, from several threads, each compute
    from their own arguments only: a runtime that keeps an execution's intermediate values where
    every execution of the executable writes them (on the program object, say) mixes them up. The
    threads run a chain of dependent steps over and over, with the interpreter switching threads
    every few microseconds, and check every result (PJRT_LoadedExecutable_Execute: the outputs are
    the program's results for the arguments given)."""
    executable = ctx.compile(_chain())
    device, limit = ctx.device, ctx.seconds(CALL_TIMEOUT)
    inputs = [HOST + np.float32(100 * racer) for racer in range(RACERS)]
    arguments = [ctx.put(x, device=device) for x in inputs]
    ctx.fetch(ctx.execute(executable, [[arguments[0]]])[0][0])  # compiled and warm before the race
    barrier = threading.Barrier(RACERS)
    wrong: list[str] = []
    lock = threading.Lock()
    counted = [0] * RACERS
    deadline = [0.0]

    def race(racer: int) -> None:
        expected = inputs[racer] * 6 + 18
        try:
            barrier.wait(limit)
            while not wrong and time.perf_counter() < deadline[0]:
                for _ in range(RUNS):
                    result = executable.execute([[arguments[racer]]])
                    for event in result.device_complete_events or ():
                        event.await_(limit)
                    copy = result.outputs[0][0].to_host_buffer()
                    copy.event.await_(limit)
                    got = np.asarray(copy.array)
                    counted[racer] += 1
                    if not np.array_equal(got, expected):
                        with lock:
                            wrong.append(f"thread {racer} got {got.tolist()} for x = {inputs[racer].tolist()}, "
                                         f"expected {expected.tolist()}")
                        return
        except Exception as exc:  # noqa: BLE001 - reported with the thread that saw it
            with lock:
                wrong.append(f"thread {racer}: {describe(exc)}")

    threads = [threading.Thread(target=race, args=(r,), name=f"pjrt-conformance racer {r}", daemon=True)
               for r in range(RACERS)]
    interval = sys.getswitchinterval()
    sys.setswitchinterval(SWITCH_INTERVAL)
    try:
        deadline[0] = time.perf_counter() + ctx.seconds(RACE_SECONDS)
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(ctx.seconds(30.0))
    finally:
        sys.setswitchinterval(interval)
    alive = [t.name for t in threads if t.is_alive()]
    if alive:
        fail(f"{len(alive)} of {RACERS} threads executing one executable at once did not finish: a deadlock between "
             f"concurrent PJRT_LoadedExecutable_Execute calls ({'; '.join(wrong[:2]) or 'no error seen'})")
    check(not wrong, lambda: f"concurrent executions of one executable (x -> 6x + 18 in six dependent steps, "
                             f"{sum(counted)} executions in {RACERS} threads) went wrong: {'; '.join(wrong[:3])}. Each "
                             "execution computes from its own arguments: values of one execution must not be where "
                             "another writes its own")
