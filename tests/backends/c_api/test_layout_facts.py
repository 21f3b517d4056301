"""The facts the bridge is built on, checked without a plugin: Args struct sizes per minor (from
the 0.55, 0.81 and 0.114 headers), the slot table of each minor (from real plugins' symbols), and
the guarded readers of plugin memory (named values, extension chains)."""

from __future__ import annotations

import ctypes

import pytest

from pjrt_hub.abi import InvalidArgument, Unimplemented, history
from pjrt_hub.backends.c_api.library import decode_named_values, encode_named_values, walk_extensions
from pjrt_hub.backends.c_api.structs import STRUCTS, struct_size

# PJRT_STRUCT_SIZE values from the headers: xla-cpu-pjrt's bundled 0.81 header compiled with gcc,
# and the 0.114 header vendored by pypjrt 0.1.1.
HEADER_081 = {
    "PJRT_Client_Create_Args": 88, "PJRT_ExecuteOptions": 112, "PJRT_Client_BufferFromHostBuffer_Args": 120,
    "PJRT_Executable_GetCompiledMemoryStats_Args": 112, "PJRT_Plugin_Attributes_Args": 32,
    "PJRT_Device_MemoryStats_Args": 185, "PJRT_Executable_DeserializeAndLoad_Args": 64,
    "PJRT_LoadedExecutable_Execute_Args": 80, "PJRT_Buffer_ToHostBuffer_Args": 56, "PJRT_NamedValue": 56,
    "PJRT_Event_IsReady_Args": 25, "PJRT_Error_GetCode_Args": 28, "PJRT_Program": 48,
    "PJRT_Buffer_MemoryLayout": 76, "PJRT_Compile_Args": 64,
}
HEADER_114 = dict(HEADER_081, **{
    "PJRT_ExecuteOptions": 144, "PJRT_Executable_GetCompiledMemoryStats_Args": 144,
    "PJRT_Device_MemoryStats_Args": 201, "PJRT_Executable_DeserializeAndLoad_Args": 72,
})


@pytest.mark.parametrize("minor,sizes", [(81, HEADER_081), (114, HEADER_114)])
def test_struct_sizes_are_the_headers(minor, sizes):
    assert {name: struct_size(name, minor) for name in sizes} == sizes


def test_older_minors_get_the_sizes_of_their_headers():
    # 0.55 header: traits of PJRT_Plugin_Attributes_Args name `attributes`; no KV try-get yet.
    assert struct_size("PJRT_Plugin_Attributes_Args", 55) == 24
    assert struct_size("PJRT_Client_Create_Args", 55) == 72
    assert struct_size("PJRT_ExecuteOptions", 55) == 72
    # 0.39-0.45: the donation fields exist but the traits still end at launch_id (fixed in 0.46).
    assert struct_size("PJRT_ExecuteOptions", 40) == 52
    assert struct_size("PJRT_ExecuteOptions", 46) == 72
    assert struct_size("PJRT_Device_AddressableMemories_Args", 45) == 32
    assert struct_size("PJRT_Executable_GetCompiledMemoryStats_Args", 40) == 64


def test_ctypes_offsets_follow_the_0_114_header():
    cls = STRUCTS["PJRT_ExecuteOptions"].ctype
    assert (cls.launch_id.offset, cls.non_donatable_input_indices.offset, cls.multi_slice_config.offset,
            cls.num_hlo_output_callbacks.offset) == (48, 56, 112, 136)
    cls = STRUCTS["PJRT_Client_BufferFromHostBuffer_Args"].ctype
    assert (cls.host_buffer_semantics.offset, cls.done_with_host_buffer.offset, cls.buffer.offset) == (72, 104, 112)
    cls = STRUCTS["PJRT_Device_MemoryStats_Args"].ctype
    assert (cls.peak_pool_bytes_is_set.offset, cls.peak_allocated_bytes.offset) == (184, 192)


def test_args_objects_have_slack_and_array_elements_have_the_c_stride():
    for name, spec in STRUCTS.items():
        if name == "PJRT_NamedValue":
            assert ctypes.sizeof(spec.ctype) == 56  # the stride of PJRT_NamedValue arrays
        else:
            assert ctypes.sizeof(spec.ctype) >= struct_size(name, 10**6) + 64, name


def test_slot_tables_match_the_plugins_symbols():
    # The slot counts jax-cuda12-pjrt 0.4.23, xla-cpu-pjrt 0.0.1, fastatomstruct-xla-cpu and
    # lammps-jax-pjrt-cpu report, and the function behind their last slots.
    assert history.slot_count(40) == 96  # PJRT_Api_STRUCT_SIZE stale from 0.40 to 0.56
    assert history.function_slots(40)[96] == "PJRT_Executable_GetCompiledMemoryStats"
    assert history.slot_count(57) == len(history.function_slots(57)) == 101
    assert history.slot_count(81) == 118
    slots_106 = history.function_slots(106)
    assert len(slots_106) == 136 and slots_106[135] == "PJRT_Device_ClearMemoryStats"
    assert "PJRT_Buffer_CopyRawFromHost" not in slots_106
    assert history.function_slots(105)[135] == "PJRT_Buffer_CopyRawFromHost"
    assert history.function_slots(114)[-2:] == ("PJRT_TopologyDescription_MakeCanonicalShapeForMemorySpace",
                                                "PJRT_TopologyDescription_GetMemorySpaceKindIds")
    assert history.slot_count(110) == history.slot_count(115) == 138
    assert history.introduced_in("PJRT_Device_ClearMemoryStats") == 106
    assert history.UNSTABLE_SLOT_LAYOUT_MINORS == {56: 58}


def test_named_values_round_trip_every_kind():
    values = {"name": "cpu", "count": -3, "dims": [1, 2, 3], "ratio": 0.5, "flag": False, "empty": []}
    array = encode_named_values(values, minor=81)
    assert array.count == 6 and array.array[0].struct_size == 56
    assert decode_named_values(array.address, array.count) == values


def test_named_values_refuse_what_the_minor_or_the_struct_cannot_hold():
    with pytest.raises(Unimplemented, match=r"kBool needs PJRT C API 0\.30; the plugin implements 0\.29"):
        encode_named_values({"flag": True}, minor=29)
    with pytest.raises(InvalidArgument, match="'opts' has a value of type dict"):
        encode_named_values({"opts": {}}, minor=81)


class _New(ctypes.Structure):
    pass


_New._fields_ = [("struct_size", ctypes.c_size_t), ("type", ctypes.c_int32), ("next", ctypes.c_void_p),
                 ("payload", ctypes.c_char * 16)]


class _Old(ctypes.Structure):
    _fields_ = [("type", ctypes.c_int32), ("next", ctypes.c_void_p)]


def test_extension_walk_reads_each_layout_and_stops_on_garbage():
    second = _New(24, 4, None)
    first = _New(40, 19, ctypes.addressof(second))
    nodes, stopped = walk_extensions(ctypes.addressof(first), 81)
    assert [(n.type, n.name, n.struct_size) for n in nodes] == [(19, "Shardings", 40), (4, "Layouts", 24)]
    assert stopped is None

    old_second = _Old(1, None)
    old_first = _Old(0, ctypes.addressof(old_second))
    nodes, _ = walk_extensions(ctypes.addressof(old_first), 40)
    assert [(n.name, n.struct_size) for n in nodes] == [("Gpu_Custom_Call", None), ("Profiler", None)]
    # The same pre-0.45 nodes read with the 0.45 layout: the size is garbage, the walk stops.
    nodes, stopped = walk_extensions(ctypes.addressof(old_first), 45)
    assert nodes == [] and "pre-0.45 layout" in stopped

    second.next = ctypes.addressof(first)
    nodes, stopped = walk_extensions(ctypes.addressof(first), 81)
    assert len(nodes) == 2 and "loops back" in stopped
    second.next = 0x18
    nodes, stopped = walk_extensions(ctypes.addressof(first), 81)
    assert len(nodes) == 2 and "not readable" in stopped
    second.type = 1 << 20
    second.next = None
    nodes, stopped = walk_extensions(ctypes.addressof(first), 81)
    assert len(nodes) == 1 and "type id 1048576" in stopped
    # Before 0.31 the field was `void* priv`: nothing to walk.
    assert walk_extensions(ctypes.addressof(first), 30) == ([], None)
