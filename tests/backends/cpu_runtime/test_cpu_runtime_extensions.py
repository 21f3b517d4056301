"""The runtime's Layouts and MemoryDescriptions: what they report is how the data really sits.

Each layout is checked against the strides of the buffer's own storage (through DLPack, which
hands out the runtime's array without a copy), for host arrays in every order, zero-copy and
copied, 0-d, zero-size and bf16 arrays, and for execution results a compiler returns in Fortran
order. Memory kinds are checked against the memories a client's devices really have.
"""

from __future__ import annotations

import ctypes
from typing import Any, Mapping, Sequence

import ml_dtypes
import numpy as np
import pytest
from .cpu_runtime_minihlo import MiniCompiler, module

from pjrt_hub.abi import BufferType, CompileOptions, HostBufferSemantics, InvalidArgument, Program
from pjrt_hub.backends.cpu_runtime import CpuApi
from pjrt_hub.backends.cpu_runtime._extensions import CpuLayouts, CpuMemoryDescriptions, builtin_extensions
from pjrt_hub.backends.cpu_runtime.builtin import EXTENSION_VERSIONS, builtin_declaration
from pjrt_hub.extensions import KNOWN_EXTENSIONS, MemoryLayout


def strides_of(layout: MemoryLayout, shape: tuple[int, ...], itemsize: int) -> tuple[int, ...]:
    """The byte strides of a dense array laid out as ``layout`` says."""
    strides = [0] * len(shape)
    step = itemsize
    for dim in layout.minor_to_major:
        strides[dim] = step
        step *= shape[dim]
    return tuple(strides)


def assert_layout_is_the_storage(layouts: CpuLayouts, buffer: Any, expected: np.ndarray) -> None:
    """Reading the buffer's memory (``unsafe_pointer``) with the strides the layout implies gives
    the values the buffer holds: the layout is how the data really sits."""
    layout = layouts.buffer_memory_layout(buffer)
    assert layout.tiles == ()
    assert sorted(layout.minor_to_major) == list(range(expected.ndim))
    if expected.size == 0:
        return  # no bytes to read; the rank was checked
    raw = (ctypes.c_char * expected.nbytes).from_address(buffer.unsafe_pointer())
    seen = np.ndarray(expected.shape, expected.dtype, buffer=raw,
                      strides=strides_of(layout, expected.shape, expected.itemsize))
    np.testing.assert_array_equal(seen, expected)


HOST_ARRAYS = {
    "c_order": np.arange(24, dtype=np.float32).reshape(2, 3, 4),
    "fortran_order": np.asfortranarray(np.arange(24, dtype=np.float32).reshape(2, 3, 4)),
    "transposed_view": np.arange(12, dtype=np.int64).reshape(3, 4).T,
    "strided_view": np.arange(40, dtype=np.float64).reshape(5, 8)[:, ::2],
    "zero_d": np.array(3.5, dtype=np.float32),
    "zero_size": np.zeros((0, 3), dtype=np.float32),
    "bf16": np.arange(10, dtype=np.float32).reshape(5, 2).astype(ml_dtypes.bfloat16),
    "pred": np.array([[True, False], [False, True]]),
}


@pytest.mark.parametrize("semantics", [HostBufferSemantics.IMMUTABLE_ONLY_DURING_CALL,
                                       HostBufferSemantics.IMMUTABLE_ZERO_COPY])
@pytest.mark.parametrize("name", sorted(HOST_ARRAYS))
def test_buffer_layouts_are_the_strides_of_the_storage(client, name, semantics):
    array = HOST_ARRAYS[name]
    buffer = client.buffer_from_host_buffer(array, semantics=semantics).buffer
    assert_layout_is_the_storage(CpuLayouts(), buffer, array)
    assert CpuLayouts().buffer_memory_layout(buffer) == MemoryLayout(tuple(range(array.ndim - 1, -1, -1)))


class FortranCompiler(MiniCompiler):
    """The mini compiler, but every result comes back in Fortran order: a program may return any
    array of the right shape, and the runtime must still hold what Layouts says."""

    def compile(self, code: str | bytes, options: CompileOptions) -> Any:
        program = super().compile(code, options)
        run = program.run

        def fortran_run(args: Sequence[np.ndarray], out: Sequence[np.ndarray | None] | None = None) -> list:
            return [np.array(r, order="F") for r in run(args, out)]

        program.run = fortran_run  # type: ignore[method-assign]  # this one program returns Fortran-order arrays
        return program


TWO = module(
    """
    %0 = stablehlo.add %arg0, %arg1 : tensor<3x4xf32>
    %1 = stablehlo.negate %arg2 : tensor<i32>
    return %0, %1 : tensor<3x4xf32>, tensor<i32>
    """,
    args="%arg0: tensor<3x4xf32>, %arg1: tensor<3x4xf32>, %arg2: tensor<i32>",
    results="tensor<3x4xf32>, tensor<i32>",
)


@pytest.mark.parametrize("asynchronous", [True, False])
def test_results_returned_in_another_order_are_stored_row_major(asynchronous):
    client = CpuApi(FortranCompiler()).client_create({"asynchronous": asynchronous})
    try:
        exe = client.compile(Program(TWO))
        a = np.arange(12, dtype=np.float32).reshape(3, 4)
        args = [client.buffer_from_host_buffer(x).buffer for x in (a, a, np.array(7, np.int32))]
        result = exe.execute([args])
        sum_, neg = result.outputs[0]
        result.device_complete_events[0].await_(30)
        layouts = CpuLayouts()
        assert_layout_is_the_storage(layouts, sum_, a + a)
        assert_layout_is_the_storage(layouts, neg, np.array(-7, np.int32))
        assert layouts.executable_output_layouts(exe) == [MemoryLayout((1, 0)), MemoryLayout(())]
    finally:
        client.destroy()


def test_executable_layouts_give_one_layout_per_parameter_and_output(client):
    exe = client.compile(Program(TWO))
    layouts = CpuLayouts()
    for target in (exe, exe.get_executable()):
        assert layouts.executable_output_layouts(target) == [MemoryLayout((1, 0)), MemoryLayout(())]
        assert layouts.executable_parameter_layouts(target) == [MemoryLayout((1, 0))] * 2 + [MemoryLayout(())]


def test_default_layouts_are_what_a_new_buffer_gets(client, api):
    layouts = CpuLayouts()
    for dims, kind in (((2, 3, 4), BufferType.F32), ((), BufferType.S8), ((0, 5), BufferType.BF16)):
        expected = layouts.client_default_layout(client, kind, dims)
        assert layouts.topology_default_layout(api.topology_create(), kind, dims) == expected
        fresh = client.create_uninitialized_buffer(dims, kind)
        assert layouts.buffer_memory_layout(fresh) == expected


@pytest.mark.parametrize("call, message", [
    (lambda layouts, c: layouts.buffer_memory_layout(np.zeros(3)), "expected a buffer of this plugin"),
    (lambda layouts, c: layouts.client_default_layout(object(), BufferType.F32, (2,)), "expected a client of this plugin"),
    (lambda layouts, c: layouts.client_default_layout(c, 12345, (2,)), "element_type 12345 is not a PJRT_Buffer_Type"),
    (lambda layouts, c: layouts.client_default_layout(c, BufferType.TOKEN, (2,)), "has no numpy dtype"),
    (lambda layouts, c: layouts.client_default_layout(c, BufferType.F32, (2, -1)), "non-negative ints"),
    (lambda layouts, c: layouts.client_default_layout(c, BufferType.F32, 3), "a sequence of ints"),
    (lambda layouts, c: layouts.executable_output_layouts("program"), "expected an executable of this plugin"),
    (lambda layouts, c: layouts.topology_default_layout(c, BufferType.F32, (2,)), "expected a topology of this plugin"),
])
def test_bad_arguments_are_invalid_arguments_naming_the_call(client, call, message):
    with pytest.raises(InvalidArgument, match=message):
        call(CpuLayouts(), client)


def test_memory_descriptions_are_the_memories_a_device_has(client, api):
    descriptions = CpuMemoryDescriptions()
    for device in client.devices():
        kinds = descriptions.memory_descriptions(device.get_description())
        assert kinds[0] == (device.default_memory().kind(), device.default_memory().kind_id())
        assert sorted(kinds) == sorted((m.kind(), m.kind_id()) for m in device.addressable_memories())
    # Without a client: from a topology's descriptions, the same answer.
    for description in api.topology_create().get_device_descriptions():
        assert descriptions.memory_descriptions(description) == kinds
    with pytest.raises(InvalidArgument, match="expected a device description of this plugin"):
        descriptions.memory_descriptions(client.devices()[0])


def test_the_declared_versions_are_the_implemented_ones():
    offered: Mapping[str, Any] = builtin_extensions()
    assert builtin_declaration("x").extensions == EXTENSION_VERSIONS
    assert set(offered) == set(EXTENSION_VERSIONS)
    for name, version in EXTENSION_VERSIONS.items():
        spec = KNOWN_EXTENSIONS[name]
        assert spec.missing_methods(offered[name], version) == ()
        assert offered[name].version == version
