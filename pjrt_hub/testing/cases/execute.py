"""execute and errors: ``PJRT_LoadedExecutable_Execute`` on the suite's programs and on the public
corpus (real JAX programs, compared with the manifest's tolerances), and the errors of bad calls."""

from __future__ import annotations

import numpy as np

from pjrt_hub.abi import CompileOptions, ErrorCode, ExecuteOptions, HostBufferSemantics, PjrtError

from .._case import Case, add_case, case, check, expect_error, fail
from .._context import PluginUnderTest, wait_compiled
from .._programs import CorpusProgram, add_one, elementwise, large_arrays, load_corpus, tensor, two_outputs
from .client import device_id


@case("execute")
def add_one_program(ctx: PluginUnderTest) -> None:
    """x + 1 on f32[4] {41, 42, 43, 44} gives {42, 43, 44, 45} (upstream's add-one computation)."""
    got = ctx.run(ctx.compile(add_one()), np.array([41, 42, 43, 44], np.float32))
    check(len(got) == 1, f"one output expected, got {len(got)}")
    check(got[0].dtype == np.float32, f"the output is {got[0].dtype}, expected float32")
    check(np.array_equal(got[0], [42, 43, 44, 45]), f"x + 1 of [41, 42, 43, 44] gave {got[0].tolist()}")


@case("execute")
def several_outputs(ctx: PluginUnderTest) -> None:
    """(x + y, x * y): the outputs come back in the order of @main's results."""
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    y = np.full((2, 3), 3.0, np.float32)
    got = ctx.run(ctx.compile(two_outputs()), x, y)
    check(len(got) == 2, f"two outputs expected, got {len(got)}")
    check(np.array_equal(got[0], x + y), f"output 0 (x + y) is {got[0].tolist()}")
    check(np.array_equal(got[1], x * y), f"output 1 (x * y) is {got[1].tolist()}")


@case("execute")
def outputs_on_the_device(ctx: PluginUnderTest) -> None:
    """Every output lives on the device the program ran on, ready."""
    for device in ctx.devices[:2]:
        options = CompileOptions(device_assignment=((device_id(device),),))
        executable = ctx.compile(add_one(), options)
        outputs = ctx.execute(executable, [[ctx.put(np.zeros(4, np.float32), device=device)]])
        placed = device_id(outputs[0][0].device())
        check(placed == device_id(device), f"a program assigned to device {device_id(device)} put its output on {placed}")


@case("execute")
def replicas(ctx: PluginUnderTest) -> None:
    """Two replicas on two devices: one argument list each, one output list each, on its device."""
    first, second = ctx.need_devices(2)
    assignment = ((device_id(first),), (device_id(second),))
    executable = ctx.compile(add_one(replicas=2), CompileOptions(num_replicas=2, device_assignment=assignment))
    inputs = [np.array([1, 2, 3, 4], np.float32), np.array([10, 20, 30, 40], np.float32)]
    outputs = ctx.execute(executable, [[ctx.put(inputs[0], device=first)], [ctx.put(inputs[1], device=second)]])
    for i, (device, host) in enumerate(zip((first, second), inputs)):
        check(len(outputs[i]) == 1, f"replica {i} returned {len(outputs[i])} outputs, expected 1")
        placed = device_id(outputs[i][0].device())
        check(placed == device_id(device), f"replica {i}'s output is on device {placed}, expected {device_id(device)}")
        got = ctx.fetch(outputs[i][0])
        check(np.array_equal(got, host + 1), f"replica {i} computed {got.tolist()}, expected {(host + 1).tolist()}")


def _compare(program: CorpusProgram, index: int, got: np.ndarray, expected: np.ndarray) -> None:
    problem = program.output_mismatch(index, got, expected)
    if problem is not None:
        fail(problem)


def _corpus_case(program: CorpusProgram) -> Case:
    def run(ctx: PluginUnderTest) -> None:
        inputs, expected = program.arrays()
        executable = ctx.compile(program.text())
        got = ctx.run(executable, *inputs)
        check(len(got) == len(expected), f"{program.name}: {len(got)} outputs, expected {len(expected)}")
        for i, (g, e) in enumerate(zip(got, expected)):
            _compare(program, i, g, e)

    return Case("execute", f"corpus_{program.name}",
                f"The corpus program {program.name} ({program.description}) computes the expected outputs "
                "within the manifest's tolerances.", run, timeout=300.0)


for _program in load_corpus():
    add_case(_corpus_case(_program))


# -- errors ------------------------------------------------------------------------------------


@case("errors")
def wrong_argument_count(ctx: PluginUnderTest) -> None:
    """Executing with the wrong number of arguments fails with InvalidArgument, not a crash."""
    executable = ctx.compile(add_one())
    args = [ctx.put(np.zeros(4, np.float32)), ctx.put(np.zeros(4, np.float32))]
    expect_error(lambda: ctx.execute(executable, [args]), code=ErrorCode.INVALID_ARGUMENT,
                 what="PJRT_LoadedExecutable_Execute with 2 arguments for 1")


@case("errors")
def wrong_argument_shape(ctx: PluginUnderTest) -> None:
    """Executing with an argument of the wrong shape fails with InvalidArgument."""
    executable = ctx.compile(add_one())
    expect_error(lambda: ctx.execute(executable, [[ctx.put(np.zeros(3, np.float32))]]),
                 code=ErrorCode.INVALID_ARGUMENT, what="PJRT_LoadedExecutable_Execute with f32[3] for f32[4]")


@case("errors")
def wrong_destination(ctx: PluginUnderTest) -> None:
    """PJRT_Buffer_ToHostBuffer into an array of the wrong size fails with InvalidArgument."""
    buffer = ctx.put(np.zeros(4, np.float32))

    def copy():
        result = buffer.to_host_buffer(np.zeros(3, np.float32))
        result.event.await_(ctx.seconds(5.0))

    expect_error(lambda: ctx.call(copy, what="PJRT_Buffer_ToHostBuffer"), code=ErrorCode.INVALID_ARGUMENT,
                 what="PJRT_Buffer_ToHostBuffer into f32[3] from f32[4]")


@case("errors")
def unsupported_host_dtype(ctx: PluginUnderTest) -> None:
    """A host array of a type PJRT has no element type for (unicode text) fails with InvalidArgument."""
    expect_error(lambda: ctx.client.buffer_from_host_buffer(np.array(["a", "b"]), device=ctx.device,
                                                            semantics=HostBufferSemantics.IMMUTABLE_ONLY_DURING_CALL),
                 code=ErrorCode.INVALID_ARGUMENT, what="PJRT_Client_BufferFromHostBuffer of a unicode array")


@case("execute", timeout=120.0)
def execute_device(ctx: PluginUnderTest) -> None:
    """PJRT_LoadedExecutable_Execute with execute_device runs a one-device program on that device
    (its outputs are there, and right): the device it was compiled for, and another one where the
    plugin runs executables elsewhere at all (XLA does so only for portable executables)."""
    first, second = ctx.need_devices(2)
    host = np.array([1.0, 2.0, 3.0, 4.0], np.float32)
    executable = ctx.compile(add_one(), CompileOptions(device_assignment=((device_id(second),),)))
    _run_on(ctx, executable, second, host)
    try:
        result = ctx.call(executable.execute, [[ctx.put(host, device=first)]], ExecuteOptions(), first,
                          what="PJRT_LoadedExecutable_Execute with execute_device", timeout=60.0)
    except PjrtError as exc:
        if exc.code not in (ErrorCode.INVALID_ARGUMENT, ErrorCode.UNIMPLEMENTED):
            raise
        return  # runs an executable only on the devices it was compiled for
    _check_placed(ctx, result, first, host)


def _run_on(ctx: PluginUnderTest, executable, device, host: np.ndarray) -> None:
    result = ctx.call(executable.execute, [[ctx.put(host, device=device)]], ExecuteOptions(), device,
                      what="PJRT_LoadedExecutable_Execute with execute_device", timeout=60.0)
    _check_placed(ctx, result, device, host)


def _check_placed(ctx: PluginUnderTest, result, device, host: np.ndarray) -> None:
    for event in result.device_complete_events or ():
        ctx.await_event(event, "device_complete_events[0]")
    check(len(result.outputs) == 1 and len(result.outputs[0]) == 1,
          f"execute_device: expected one output list of one output, got {[len(o) for o in result.outputs]}")
    output = result.outputs[0][0]
    placed = device_id(output.device())
    check(placed == device_id(device), f"executed with execute_device = device {device_id(device)}, the output is on "
                                       f"device {placed}; PJRT runs the program on the device it is told to")
    got = ctx.fetch(output)
    check(np.array_equal(got, host + 1), f"x + 1 on device {device_id(device)} gave {got.tolist()}")


@case("execute", timeout=180.0)
def large_arrays_run_after_run(ctx: PluginUnderTest) -> None:
    """x * y + x on two f32[2048, 2048]: large enough that a plugin spreads the work over
    threads. The result matches numpy's, and a second run, after a plugin that compiles in the
    background (numba_cpu) has its compiled program, gives the same bits."""
    rng = np.random.default_rng(7)
    x = rng.standard_normal((2048, 2048), dtype=np.float32)
    y = rng.standard_normal((2048, 2048), dtype=np.float32)
    expected = x * y + x
    executable = ctx.compile(large_arrays())
    runs = [ctx.run(executable, x, y)]
    wait_compiled(executable)
    runs.append(ctx.run(executable, x, y))
    for index, got in enumerate(runs):
        when = "the first run" if index == 0 else "a run after the plugin settled"
        check(len(got) == 1 and got[0].shape == (2048, 2048),
              f"{when} returned shapes {[list(g.shape) for g in got]}, expected [[2048, 2048]]")
        # One rounding of a fused multiply-add (1 ulp) is within the tolerance.
        bad = ~np.isclose(got[0], expected, rtol=1e-6, atol=1e-6)
        check(not bad.any(), f"{when}: x * y + x differs from numpy's at {int(bad.sum())} of {bad.size} elements")
    check(np.array_equal(runs[0][0].view(np.uint32), runs[1][0].view(np.uint32)),
          "x * y + x gave different bits on two runs of the same executable")


@case("execute", timeout=120.0)
def scalar_and_empty_arrays(ctx: PluginUnderTest) -> None:
    """A program on a 0-d array and on an empty f32[0,3] runs: its outputs keep those shapes (a
    scalar stays a scalar, an empty array keeps its zero) and the scalar's value is right."""
    scalar, empty = tensor((), "f32"), tensor((0, 3), "f32")
    executable = ctx.compile(elementwise("jit_edge_shapes", [scalar, empty], [("add", (0, 0)), ("negate", (1,))]))
    x, e = np.array(1.25, np.float32), np.zeros((0, 3), np.float32)
    outputs = ctx.execute(executable, [[ctx.put(x), ctx.put(e)]])[0]
    check(len(outputs) == 2, f"two outputs expected, got {len(outputs)}")
    dims = [tuple(o.dimensions()) for o in outputs]
    check(dims == [(), (0, 3)], f"the outputs have dimensions {[list(d) for d in dims]}, expected [[], [0, 3]]: "
                                "PJRT keeps a scalar 0-d and an empty array's zero dimension")
    got = [ctx.fetch(o) for o in outputs]
    check(got[0].shape == () and got[0] == np.float32(2.5), f"x + x of the scalar 1.25 came back as {got[0]!r}")
    check(got[1].shape == (0, 3), f"-x of an f32[0,3] came back with shape {list(got[1].shape)}")
