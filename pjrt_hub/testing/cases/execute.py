"""execute and errors: ``PJRT_LoadedExecutable_Execute`` on the suite's programs and on the public
corpus (real JAX programs, compared with the manifest's tolerances), and the errors of bad calls."""

from __future__ import annotations

import numpy as np

from pjrt_hub.abi import CompileOptions, ErrorCode, HostBufferSemantics

from .._case import Case, add_case, case, check, expect_error, fail
from .._context import PluginUnderTest
from .._programs import CorpusProgram, add_one, load_corpus, two_outputs
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
    name = program.output_names[index]
    rtol, atol = program.tolerances[index]
    check(got.dtype == expected.dtype, f"{program.name} output {index} ({name}) is {got.dtype}, expected {expected.dtype}")
    check(got.shape == expected.shape,
          f"{program.name} output {index} ({name}) has shape {list(got.shape)}, expected {list(expected.shape)}")
    if rtol == 0 and atol == 0 or expected.dtype.kind in "biu":
        bad = got != expected
    else:
        bad = ~np.isclose(got.astype(np.float64), expected.astype(np.float64), rtol=rtol, atol=atol, equal_nan=False)
    if bad.any():
        where = tuple(int(i) for i in np.argwhere(bad)[0])
        error = np.abs(got.astype(np.float64) - expected.astype(np.float64))
        fail(f"{program.name} output {index} ({name}): {int(bad.sum())} of {bad.size} elements differ beyond "
             f"rtol={rtol:g} atol={atol:g}; first at {list(where)}: got {got[where]!r}, expected {expected[where]!r}; "
             f"max abs error {np.nanmax(error):.3g}")


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


@case("execute")
def scalar_and_zero_size_arguments(ctx: PluginUnderTest) -> None:
    """A program over a 0-d scalar, a zero-size array and a size-1 array: each result keeps its
    shape (a scalar is not a 1-element vector) and its values."""
    text = """func.func @main(%s: tensor<f32>, %z: tensor<0x3xf32>, %v: tensor<1x3xi32>)
    -> (tensor<f32>, tensor<0x3xf32>, tensor<1x3xi32>) {
  %0 = stablehlo.multiply %s, %s : tensor<f32>
  %1 = stablehlo.add %z, %z : tensor<0x3xf32>
  %2 = stablehlo.add %v, %v : tensor<1x3xi32>
  return %0, %1, %2 : tensor<f32>, tensor<0x3xf32>, tensor<1x3xi32>
}"""
    s, z, v = np.array(3.0, np.float32), np.zeros((0, 3), np.float32), np.array([[1, -2, 4]], np.int32)
    got = ctx.run(ctx.compile(text), s, z, v)
    check(len(got) == 3, f"three outputs expected, got {len(got)}")
    want = [np.array(9.0, np.float32), z, np.array([[2, -4, 8]], np.int32)]
    for i, (g, w) in enumerate(zip(got, want)):
        check(g.shape == w.shape and g.dtype == w.dtype, f"output {i} is {g.dtype}{list(g.shape)}, "
                                                         f"expected {w.dtype}{list(w.shape)}")
        check(np.array_equal(g, w), f"output {i} is {g.tolist()}, expected {w.tolist()}")
