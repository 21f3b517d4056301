"""The C plugin's extensions through the protocols of pjrt_hub.extensions: Layouts, MemoryDescriptions
and FFI on the real xla-cpu-pjrt (0.81), and on a fake plugin for what XLA's does not show (a node
too small or with a NULL pointer, a default memory that is not listed first, the other FFI layout)."""

from __future__ import annotations

import ctypes
import uuid

import numpy as np
import pytest

from pjrt_hub.abi import BufferType, FailedPrecondition, InvalidArgument, PjrtError, Program, Unimplemented
from pjrt_hub.backends.c_api import (
    CDeviceDescription,
    CExtension,
    CFfiExtension,
    CLayoutsExtension,
    CMemoryDescriptionsExtension,
    load_api,
    parse_xla_layout,
)
from pjrt_hub.backends.c_api.extensions import COMBINE_DIMENSION
from pjrt_hub.backends.c_api.library import ExtensionInfo
from pjrt_hub.extensions import (
    FfiExtension,
    LayoutsExtension,
    MemoryDescriptionsExtension,
    MemoryLayout,
)

from .fakes import FAKE_EXTENSIONS

TWO_RESULTS = """func.func @main(%a: tensor<2x3xf32>, %b: tensor<4xi32>) -> (tensor<2x3xf32>, tensor<4x5x6xf32>) {
  %c = stablehlo.constant dense<1.0> : tensor<4x5x6xf32>
  return %a, %c : tensor<2x3xf32>, tensor<4x5x6xf32>
}"""


# -- the textual layout ------------------------------------------------------------------------


@pytest.mark.parametrize("text,expected", [
    ("{1,0}", MemoryLayout((1, 0))),
    ("{}", MemoryLayout(())),
    ("{ 0 }", MemoryLayout((0,))),
    ("{1,0:T(8,128)(2,1)}", MemoryLayout((1, 0), ((8, 128), (2, 1)))),
    ("{2,1,0:T(2,*)E(4)S(1)}", MemoryLayout((2, 1, 0), ((2, COMBINE_DIMENSION),))),
    ("{0:E(4)}", MemoryLayout((0,))),
])
def test_xla_layout_text_is_read(text, expected):
    assert parse_xla_layout(text) == expected


@pytest.mark.parametrize("text", ["", "1,0", "{1,0", "{a,b}", "f32[2]{1,0}"])
def test_text_that_is_no_layout_is_refused(text):
    with pytest.raises(ValueError, match="is not an XLA layout"):
        parse_xla_layout(text)


# -- xla-cpu-pjrt 0.81 -------------------------------------------------------------------------


def test_the_chain_is_wrapped_with_the_protocols_where_pjrt_hub_has_them(api):
    extensions = api.extensions()
    assert list(extensions) == ["PhaseCompile", "FFI", "MemoryDescriptions", "Layouts"]
    layouts, descriptions, ffi = extensions["Layouts"], extensions["MemoryDescriptions"], extensions["FFI"]
    assert isinstance(layouts, CLayoutsExtension) and isinstance(layouts, LayoutsExtension)
    assert isinstance(descriptions, CMemoryDescriptionsExtension) and isinstance(descriptions, MemoryDescriptionsExtension)
    assert isinstance(ffi, CFfiExtension) and isinstance(ffi, FfiExtension)
    assert type(extensions["PhaseCompile"]) is CExtension
    assert [(e.struct_size, e.version) for e in (layouts, descriptions, ffi)] == [(72, 2), (40, 1), (48, 2)]
    assert layouts.as_dict() == {"type": 4, "name": "Layouts", "struct_size": 72}


def test_layouts_of_a_buffer_a_shape_and_a_topology(api, client):
    layouts = api.extensions()["Layouts"]
    buffer = client.buffer_from_host_buffer(np.zeros((2, 3, 4), np.float32)).buffer
    assert layouts.buffer_memory_layout(buffer) == MemoryLayout((2, 1, 0))
    assert layouts.client_default_layout(client, BufferType.S8, [5, 6]) == MemoryLayout((1, 0))
    assert layouts.client_default_layout(client, BufferType.F32, ()) == MemoryLayout(())
    assert layouts.topology_default_layout(client.topology_description(), BufferType.BF16, (2, 3, 4)) == \
        MemoryLayout((2, 1, 0))


def test_output_layouts_of_a_compiled_program(api, client):
    layouts = api.extensions()["Layouts"]
    loaded = client.compile(Program(TWO_RESULTS))
    assert layouts.executable_output_layouts(loaded) == [MemoryLayout((1, 0)), MemoryLayout((2, 1, 0))]
    executable = loaded.get_executable()
    assert layouts.executable_output_layouts(executable) == [MemoryLayout((1, 0)), MemoryLayout((2, 1, 0))]


def test_a_function_the_node_does_not_cover_is_unimplemented_naming_it_and_the_size(api, client):
    layouts = api.extensions()["Layouts"]
    with pytest.raises(Unimplemented, match=r"PJRT_Layouts_PJRT_Executable_GetParameterLayouts is not in the "
                                            r"Layouts extension of plugin 'xla_cpu_pjrt': its node has "
                                            r"struct_size 72, and the function pointer lies at bytes 72-80"):
        layouts.executable_parameter_layouts(client.compile(Program(TWO_RESULTS)))


def test_layout_calls_check_their_arguments(api, client):
    layouts = api.extensions()["Layouts"]
    with pytest.raises(InvalidArgument, match="expected a buffer of plugin 'xla_cpu_pjrt', got 3"):
        layouts.buffer_memory_layout(3)
    with pytest.raises(InvalidArgument, match="element_type 999 is not a PJRT_Buffer_Type"):
        layouts.client_default_layout(client, 999, (2,))
    with pytest.raises(InvalidArgument, match=r"dims must not be negative, got \[2, -1\]"):
        layouts.client_default_layout(client, BufferType.F32, (2, -1))


def test_memory_descriptions_of_xla_cpu_are_empty(api, client):
    # What XLA's CPU plugin answers (a declared limitation of the conformance suite); the fake
    # plugin below has descriptions to read.
    descriptions = api.extensions()["MemoryDescriptions"]
    assert descriptions.memory_descriptions(client.devices()[0].get_description()) == []


def test_ffi_types_user_data_and_handlers(api):
    ffi = api.extensions()["FFI"]
    name = f"pjrt_hub.test.{uuid.uuid4().hex}"
    first, second = ffi.type_id_register(name + ".a"), ffi.type_id_register(name + ".b")
    assert isinstance(first, int) and first > 0 and second not in (0, first)
    with pytest.raises(PjrtError, match=f"Type name {name}.a already registered with type id {first}"):
        ffi.type_id_register(name + ".a")
    assert ffi.type_id_register(name + ".c", 987654321) == 987654321

    context = api.execute_context_create()
    data = ctypes.c_int64(42)
    ffi.user_data_add(context, first, data)
    with pytest.raises(PjrtError, match=f"User data with type id {first} already exists in execution context"):
        ffi.user_data_add(context, first, data)
    with pytest.raises(Unimplemented, match="takes no deleter for user data .its PJRT_FFI_UserData_Add_Args are 40"):
        ffi.user_data_add(context, second, data, deleter=0x1000)
    context.destroy()
    with pytest.raises(FailedPrecondition, match="CExecuteContext was destroyed"):
        ffi.user_data_add(context, second, data)

    calls = []
    handler = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p)(lambda frame: calls.append(frame))
    ffi.register_handler(f"pjrt_hub_test_{uuid.uuid4().hex}", "cpu", handler)
    # XLA asks a handler for its metadata when it is registered: the pointer reached it.
    assert len(calls) == 1 and calls[0]
    with pytest.raises(InvalidArgument, match="handler is NULL"):
        ffi.register_handler("target", "cpu", 0)
    with pytest.raises(InvalidArgument, match="must not be empty"):
        ffi.register_handler("", "cpu", handler)


# -- a fake plugin -------------------------------------------------------------------------------


@pytest.fixture
def fake_extensions(build_so):
    def build(*defines: str):
        path = build_so(f"fake_ext_{uuid.uuid4().hex[:8]}", FAKE_EXTENSIONS, *[f"-D{d}" for d in defines])
        return load_api(path), ctypes.CDLL(path)

    return build


def test_a_node_too_small_or_with_a_null_pointer_is_unimplemented(fake_extensions):
    api, _ = fake_extensions("LAYOUTS_SIZE=56")
    layouts = api.extensions()["Layouts"]
    assert layouts.version == 1  # 56 bytes: up to Buffer_MemoryLayout
    with pytest.raises(Unimplemented, match=r"PJRT_Layouts_PJRT_Executable_GetOutputLayouts is not in the Layouts "
                                            r"extension of plugin '.*': its node has struct_size 56, and the "
                                            r"function pointer lies at bytes 64-72"):
        layouts.executable_output_layouts(None)
    with pytest.raises(Unimplemented, match=r"PJRT_Layouts_PJRT_Buffer_MemoryLayout is not implemented by the "
                                            r"Layouts extension .* \(its pointer is NULL; struct_size 56\)"):
        layouts.buffer_memory_layout(None)
    # A covered, non-NULL function is called: the argument check comes next.
    with pytest.raises(InvalidArgument, match="expected a client of plugin"):
        layouts.client_default_layout(None, BufferType.F32, (1,))


def test_a_pre_0_45_node_is_never_called_into(fake_extensions):
    api, _ = fake_extensions()
    node = api.extensions()["Layouts"].info
    old = CLayoutsExtension(api.library, ExtensionInfo(node.type, node.name, None, node.address))
    assert old.version == 0
    with pytest.raises(Unimplemented, match="pre-0.45 node layout, which has no struct_size"):
        old.executable_output_layouts(None)


def test_memory_descriptions_put_the_default_first(fake_extensions):
    api, _ = fake_extensions()
    descriptions = api.extensions()["MemoryDescriptions"]
    description = CDeviceDescription(api.library, 0x1000, None)
    assert descriptions.memory_descriptions(description) == [("device", 10), ("pinned_host", 11),
                                                             ("unpinned_host", 12)]


@pytest.mark.parametrize("register_size,api_version", [(52, -1), (60, 1)])
def test_ffi_handlers_use_the_layout_the_plugin_checks_for(fake_extensions, register_size, api_version):
    api, fake = fake_extensions(f"REGISTER_SIZE={register_size}")
    ffi = api.extensions()["FFI"]
    fake.fake_last_handler.restype = ctypes.c_void_p
    fake.fake_last_target.restype = ctypes.c_char_p
    ffi.register_handler("my_target", "Host", 0x5000, traits=1)
    assert (fake.fake_last_handler(), fake.fake_last_api_version(), fake.fake_last_target()) == \
        (0x5000, api_version, b"my_target@Host")


def test_ffi_user_data_with_a_deleter_where_the_layout_has_one(fake_extensions):
    api, fake = fake_extensions()
    ffi = api.extensions()["FFI"]
    assert ffi.type_id_register("t") == 7 and ffi.type_id_register("u") == 8
    for name in ("fake_last_data", "fake_last_deleter", "fake_last_context"):
        getattr(fake, name).restype = ctypes.c_void_p
    context = api.execute_context_create()
    data = ctypes.c_double(1.5)
    ffi.user_data_add(context, 7, data, deleter=0x7000)
    assert (fake.fake_last_data(), fake.fake_last_deleter()) == (ctypes.addressof(data), 0x7000)
    assert fake.fake_last_context() == context.handle
    with pytest.raises(InvalidArgument, match="expected an execute context"):
        ffi.user_data_add(object(), 7, data)
    with pytest.raises(InvalidArgument, match="data: expected an address .* got str"):
        ffi.user_data_add(context, 7, "text")
