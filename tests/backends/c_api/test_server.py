"""The served ``PJRT_Api`` (backends/c_api/server.py), consumed back through the C bridge; no JAX.

A Python plugin laid out as a C plugin must look like one to any C caller: the table of its minor,
errors as ``PJRT_Error`` with their codes, extensions from the plugin's protocols, nothing that
raises into C. The C bridge is such a caller, so these tests serve the reference interpreter (no
numba compile) and drive it through ``CApi``.
"""

from __future__ import annotations

import ctypes
from typing import Any

import numpy as np
import pytest

from pjrt_hub.abi import (
    BufferType,
    CompileError,
    ErrorCode,
    ExecutionError,
    FRAMEWORK_VERSION,
    Internal,
    InvalidArgument,
    PjrtError,
    Program,
    Unimplemented,
    history,
)
from pjrt_hub.backends.c_api import CApi
from pjrt_hub.backends.c_api.library import API_HEADER_SIZE, PluginLibrary
from pjrt_hub.backends.c_api.server import CAPSULE_NAME, ServedApi
from pjrt_hub.backends.cpu_runtime import CpuApi
from pjrt_hub.backends.cpu_runtime.builtin import STABLEHLO_ATTRIBUTES
from pjrt_hub.backends.reference import ReferenceCompiler
from pjrt_hub.extensions import MemoryLayout

ADD = """func.func @main(%a: tensor<2x3xf32>, %b: tensor<2x3xf32>) -> tensor<2x3xf32> {
  %0 = stablehlo.add %a, %b : tensor<2x3xf32>
  return %0 : tensor<2x3xf32>
}
"""


class Layouts:
    """A Layouts extension (version 3) of a host-memory plugin: dense row-major everywhere."""

    def buffer_memory_layout(self, buffer: Any) -> MemoryLayout:
        return MemoryLayout(tuple(range(len(buffer.dimensions()) - 1, -1, -1)))

    def client_default_layout(self, client: Any, element_type: Any, dims: Any) -> MemoryLayout:
        return MemoryLayout(tuple(range(len(dims) - 1, -1, -1)))

    def executable_output_layouts(self, executable: Any) -> list[MemoryLayout]:
        return [MemoryLayout(tuple(range(len(d) - 1, -1, -1))) for d in executable.output_dimensions()]

    def executable_parameter_layouts(self, executable: Any) -> list[MemoryLayout]:
        return [MemoryLayout((1, 0)), MemoryLayout((1, 0))]


class MemoryDescriptions:
    def memory_descriptions(self, device_description: Any) -> list[tuple[str, int]]:
        return [("device", 0), ("pinned_host", 1)]


def _api(**kwargs: Any) -> CpuApi:
    return CpuApi(ReferenceCompiler(), platform_name="cpu", api_version=FRAMEWORK_VERSION,
                  attributes=dict(STABLEHLO_ATTRIBUTES), **kwargs)


def _bridge(served: ServedApi, name: str = "served") -> CApi:
    return CApi(PluginLibrary.from_address(served.address, name, f"pjrt-hub-served:{name}"))


@pytest.fixture(scope="module")
def served() -> ServedApi:
    return ServedApi(_api(), name="reference", platform_name="reference_platform")


@pytest.fixture(scope="module")
def client(served: ServedApi) -> Any:
    return _bridge(served).client_create()


@pytest.mark.parametrize("minor", [81, 105, 117])
def test_the_struct_is_the_history_table_of_the_minor(minor):
    served = ServedApi(_api(), name="reference", version=f"0.{minor}")
    lib = PluginLibrary.from_address(served.address, "reference", "served")
    assert str(lib.version) == f"0.{minor}"
    assert lib.struct_size == API_HEADER_SIZE + 8 * history.slot_count(minor)
    assert lib.version_struct_size == 24
    assert lib.slot_names[:lib.num_slots] == history.function_slots(minor)[:lib.num_slots]
    assert all(lib.slot_pointer(i) for i in range(lib.num_slots)), "no slot is left NULL"
    assert served.implemented["PJRT_LoadedExecutable_Execute"] and served.implemented["PJRT_Client_Compile"]
    assert not served.implemented.get("PJRT_Client_DmaMap", True)


def test_a_lazily_made_api_is_made_once_on_first_use():
    made = []

    def make() -> CpuApi:
        made.append(1)
        return _api()

    served = ServedApi(make, name="lazy", version=FRAMEWORK_VERSION)
    assert made == []
    api = _bridge(served, "lazy")
    api.client_create()
    api.plugin_attributes()
    assert made == [1]


def test_the_capsule_carries_the_struct_under_the_name_jax_checks(served):
    capsule = served.capsule()
    get = ctypes.pythonapi.PyCapsule_GetPointer
    get.restype, get.argtypes = ctypes.c_void_p, [ctypes.py_object, ctypes.c_char_p]
    assert get(capsule, CAPSULE_NAME) == served.address


def test_a_program_round_trips_through_the_c_abi(client):
    assert client.platform_name() == "reference_platform"  # the served name, not the plugin's "cpu"
    assert len(client.devices()) == 4
    loaded = client.compile(Program(ADD))
    executable = loaded.get_executable()
    assert (executable.num_outputs(), executable.output_element_types(), executable.output_dimensions()) == \
        (1, [BufferType.F32], [(2, 3)])
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    buffers = [client.buffer_from_host_buffer(a).buffer for _ in range(2)]
    result = loaded.execute([buffers])
    result.device_complete_events[0].await_()
    out = result.outputs[0][0].to_host_buffer()
    out.event.await_()
    assert (out.array == 2 * a).all()
    assert loaded.get_device_assignment() == ((0,),)


def test_edge_shapes_and_bf16_round_trip(client):
    import ml_dtypes

    for host in (np.float32(3.5), np.zeros((0, 4), np.float32), np.arange(5).astype(ml_dtypes.bfloat16)):
        buffer = client.buffer_from_host_buffer(np.asarray(host)).buffer
        back = buffer.to_host_buffer()
        back.event.await_()
        assert back.array.dtype == np.asarray(host).dtype and back.array.shape == np.shape(host)
        assert (back.array == host).all()


def test_errors_reach_the_caller_as_pjrt_errors_with_their_code(client):
    with pytest.raises(CompileError, match="line 1"):
        client.compile(Program("func.func @main( this is not a program"))
    with pytest.raises(InvalidArgument, match="No matching device found for device_id 99"):
        client.lookup_device(99)
    with pytest.raises(CompileError, match="Unknown program format 'nonsense'") as caught:
        client.compile(Program(ADD, "nonsense"))
    assert caught.value.plugin_code == ErrorCode.INVALID_ARGUMENT  # the code the served plugin gave


def test_a_handle_that_is_not_alive_is_an_invalid_argument(served):
    lib = PluginLibrary.from_address(served.address, "reference", "served")
    args = lib.args("PJRT_Buffer_ElementType_Args", buffer=0xDEAD0)
    with pytest.raises(InvalidArgument, match="is not a live handle, expected a PJRT_Buffer"):
        lib.call("PJRT_Buffer_ElementType", args)


def test_a_slot_the_server_does_not_map_answers_unimplemented_naming_itself(served):
    lib = PluginLibrary.from_address(served.address, "reference", "served")
    args = (ctypes.c_uint64 * 8)(64)
    error = lib.function("PJRT_Client_DmaMap")(ctypes.addressof(args))
    with pytest.raises(Unimplemented, match="PJRT_Client_DmaMap is not implemented by pjrt-hub's PJRT_Api"):
        lib.check(error, "PJRT_Client_DmaMap")


def test_a_python_exception_in_the_plugin_becomes_an_internal_error_naming_the_function():
    class Broken(CpuApi):
        def plugin_attributes(self) -> dict[str, Any]:
            raise KeyError("oops")

    served = ServedApi(Broken(ReferenceCompiler()), name="broken")
    with pytest.raises(Internal, match="PJRT_Plugin_Attributes of plugin 'broken' raised KeyError"):
        _bridge(served, "broken").plugin_attributes()


def test_an_error_inside_a_program_arrives_on_the_event():
    class Failing:
        name = "failing"

        def __init__(self) -> None:
            self._inner = ReferenceCompiler()

        def compile(self, code: Any, options: Any) -> Any:
            program = self._inner.compile(code, options)

            def run(args: Any, out: Any = None) -> Any:
                raise ExecutionError("the device caught fire")

            program.run = run
            return program

        def deserialize(self, data: bytes) -> Any:
            raise InvalidArgument("no")

    served = ServedApi(CpuApi(Failing(), api_version=FRAMEWORK_VERSION), name="failing")
    client = _bridge(served, "failing").client_create()
    loaded = client.compile(Program(ADD))
    a = np.ones((2, 3), np.float32)
    result = loaded.execute([[client.buffer_from_host_buffer(a).buffer for _ in range(2)]])
    with pytest.raises(PjrtError, match="the device caught fire") as caught:
        result.device_complete_events[0].await_()
    assert caught.value.code == ErrorCode.INTERNAL


def test_extensions_are_served_from_the_plugin_protocols():
    served = ServedApi(_api(extensions={"Layouts": Layouts(), "MemoryDescriptions": MemoryDescriptions()}),
                       name="ext", extensions={"Layouts": 3, "MemoryDescriptions": 1})
    api = _bridge(served, "ext")
    extensions = api.extensions()
    assert extensions["Layouts"].version == 3 and extensions["MemoryDescriptions"].version == 1
    client = api.client_create()
    buffer = client.buffer_from_host_buffer(np.zeros((2, 3), np.float32)).buffer
    assert extensions["Layouts"].buffer_memory_layout(buffer) == MemoryLayout((1, 0))
    assert extensions["Layouts"].client_default_layout(client, BufferType.F32, (4, 5, 6)) == MemoryLayout((2, 1, 0))
    loaded = client.compile(Program(ADD))
    assert extensions["Layouts"].executable_output_layouts(loaded) == [MemoryLayout((1, 0))]
    description = client.devices()[0].get_description()
    assert extensions["MemoryDescriptions"].memory_descriptions(description) == [("device", 0), ("pinned_host", 1)]


def test_a_declared_extension_the_api_lacks_is_unimplemented():
    served = ServedApi(_api(), name="noext", extensions={"Layouts": 1})
    api = _bridge(served, "noext")
    client = api.client_create()
    buffer = client.buffer_from_host_buffer(np.zeros(3, np.float32)).buffer
    with pytest.raises(Unimplemented, match="declares the Layouts extension but its Api offers no"):
        api.extensions()["Layouts"].buffer_memory_layout(buffer)


def test_retire_points_every_slot_at_a_native_function_that_returns_null():
    served = ServedApi(_api(), name="retired", version=FRAMEWORK_VERSION)
    assert served.retire()
    lib = PluginLibrary.from_address(served.address, "retired", "served")
    pointers = {lib.slot_pointer(i) for i in range(lib.num_slots)}
    assert len(pointers) == 1
    args = lib.args("PJRT_Client_Create_Args")
    assert lib.function("PJRT_Client_Create")(ctypes.addressof(args)) is None
    assert not args.client and served.calls["PJRT_Client_Create"] == 0  # Python was never entered


def test_a_destroy_arriving_while_an_exception_is_in_flight_waits_for_the_next_call():
    llvm = pytest.importorskip("llvmlite.binding")
    served = ServedApi(_api(), name="gated", version=FRAMEWORK_VERSION)
    api = _bridge(served, "gated")
    client = api.client_create()
    buffer = client.buffer_from_host_buffer(np.ones(3, np.float32)).buffer
    handle = buffer.handle
    assert handle in served._handles.entries

    # A caller that sets a Python exception, then calls PJRT_Buffer_Destroy, then clears it: what
    # jaxlib does when it frees the arrays of a call that raised.
    set_string = ctypes.cast(ctypes.pythonapi.PyErr_SetString, ctypes.c_void_p).value
    clear = ctypes.cast(ctypes.pythonapi.PyErr_Clear, ctypes.c_void_p).value
    value_error = ctypes.c_void_p.in_dll(ctypes.pythonapi, "PyExc_ValueError").value
    message = ctypes.create_string_buffer(b"in flight")
    module = llvm.parse_assembly(f"""
define i8* @caller(i8* %fn, i8* %args) {{
  call void inttoptr (i64 {set_string} to void (i8*, i8*)*)(i8* inttoptr (i64 {value_error} to i8*),
      i8* inttoptr (i64 {ctypes.addressof(message)} to i8*))
  %f = bitcast i8* %fn to i8* (i8*)*
  %r = call i8* %f(i8* %args)
  call void inttoptr (i64 {clear} to void ()*)()
  ret i8* %r
}}""")
    engine = llvm.create_mcjit_compiler(module, llvm.Target.from_default_triple().create_target_machine())
    engine.finalize_object()
    caller = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p)(
        engine.get_function_address("caller"))
    lib = api.library
    args = lib.args("PJRT_Buffer_Destroy_Args", buffer=handle)
    destroy = lib.slot_pointer(lib.slot_names.index("PJRT_Buffer_Destroy"))
    calls_before = served.calls["PJRT_Buffer_Destroy"]
    assert caller(destroy, ctypes.addressof(args)) is None
    assert served.calls["PJRT_Buffer_Destroy"] == calls_before  # held back: no Python ran
    assert handle in served._handles.entries
    client.platform_name()  # the next call runs the held-back destroy first
    assert handle not in served._handles.entries
    buffer._owned.handle = 0  # already destroyed through the gate


def test_events_the_caller_makes_are_the_only_ones_it_sets(served, client):
    lib = PluginLibrary.from_address(served.address, "reference", "served")
    made = lib.call("PJRT_Event_Create", lib.args("PJRT_Event_Create_Args")).event
    message = ctypes.create_string_buffer(b"cancelled by the caller")
    lib.call("PJRT_Event_Set", lib.args("PJRT_Event_Set_Args", event=made, error_code=int(ErrorCode.CANCELLED),
                                        error_message=ctypes.addressof(message), error_message_size=23))
    with pytest.raises(PjrtError, match="cancelled by the caller") as caught:
        lib.call("PJRT_Event_Await", lib.args("PJRT_Event_Await_Args", event=made))
    assert caught.value.code == ErrorCode.CANCELLED
    with pytest.raises(InvalidArgument, match="set twice"):
        lib.call("PJRT_Event_Set", lib.args("PJRT_Event_Set_Args", event=made))
    ready = client.buffer_from_host_buffer(np.ones(2, np.float32)).buffer.ready_event()
    with pytest.raises(InvalidArgument, match="only events made by PJRT_Event_Create can be set"):
        lib.call("PJRT_Event_Set", lib.args("PJRT_Event_Set_Args", event=ready.handle))


def test_a_null_argument_list_is_an_invalid_argument_naming_the_device(served, client):
    executable = client.compile(Program(ADD))
    lib = PluginLibrary.from_address(served.address, "reference", "served")
    lists = (ctypes.c_void_p * 1)(None)  # device 0's argument list: NULL
    args = lib.args("PJRT_LoadedExecutable_Execute_Args", executable=executable._owned.handle,
                    num_devices=1, num_args=2, argument_lists=ctypes.addressof(lists))
    with pytest.raises(InvalidArgument, match="PJRT_LoadedExecutable_Execute: the argument list of device 0 is NULL"):
        lib.call("PJRT_LoadedExecutable_Execute", args)
