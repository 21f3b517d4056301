"""The Args structs of the PJRT C API as ctypes classes, with their ``struct_size`` for each minor.

Fields are only ever appended to an Args struct, so one ctypes class with the newest layout serves
every minor: a caller fills what it knows and sets ``struct_size`` to what the *plugin's* minor
expects. That number is ``PJRT_STRUCT_SIZE(struct, last_field)`` of the plugin's header: the end of
the last field the traits name, not ``sizeof``. New plugins refuse a smaller one ("Unexpected
PJRT_Client_Create_Args size: expected 88, got 56"), older plugins accept a larger one and read
their own prefix.

The table below is data from the headers (``xla/pjrt/c/pjrt_c_api.h``): the 0.114 header gives the
layouts, the 0.55, 0.60, 0.81 and 0.105 headers and ``CHANGELOG.md`` give the minor in which each
later field arrived, and ``stale`` records traits that named an older last field than the struct
had (a header bug that upstream fixed in a later minor, e.g. 0.46 "update outdated struct sizes").
Fields already in the 0.55 header count as present from the start: before 0.55 the size we send may
be larger than the plugin's header says, which plugins accept.

Every Args class carries :data:`SLACK` spare bytes after its fields (not ``PJRT_NamedValue``,
which travels in arrays whose stride must be the C ``sizeof``): a plugin that writes an out field
past the ``struct_size`` it was given (the 0.40 CUDA plugin writes ``num_attributes`` of
``PJRT_Plugin_Attributes_Args`` when told 24) then writes into our memory, not past it.
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass
from functools import lru_cache

__all__ = [
    "Field",
    "SLACK",
    "STRUCTS",
    "StructLayout",
    "layout",
    "struct_size",
]

P = ctypes.c_void_p  # pointers and opaque handles
SZ = ctypes.c_size_t
I32 = ctypes.c_int32  # C int and enums
I64 = ctypes.c_int64
BOOL = ctypes.c_bool
F32 = ctypes.c_float

#: Spare bytes at the end of every Args object (see the module docstring).
SLACK = 64


@dataclass(frozen=True, slots=True)
class Field:
    name: str
    ctype: type
    #: The minor whose header first has this field (0: in every header we know).
    since: int = 0


def F(name: str, ctype: type, since: int = 0) -> Field:  # noqa: N802 - reads like a table row
    return Field(name, ctype, since)


@dataclass(frozen=True)
class StructLayout:
    """One Args (or value) struct: its fields after ``struct_size``/``extension_start``."""

    name: str
    fields: tuple[Field, ...]
    #: ``(first minor, last minor, last field the traits named)`` where the header's traits lag.
    stale: tuple[tuple[int, int, str], ...] = ()
    #: False for the few structs without the ``struct_size, extension_start`` head.
    has_head: bool = True
    #: False for structs that the C side indexes in arrays (``PJRT_NamedValue``): their stride
    #: must be the C ``sizeof``.
    slack: bool = True

    @property
    def ctype(self) -> type[ctypes.Structure]:
        return _ctype(self.name)

    def size_for(self, minor: int) -> int:
        """``<name>_STRUCT_SIZE`` in the header of this minor."""
        last = None
        for first, last_minor, field_name in self.stale:
            if first <= minor <= last_minor:
                last = field_name
        if last is None:
            present = [f for f in self.fields if f.since <= minor]
            if not present:
                return 16 if self.has_head else 0
            last = present[-1].name
        member = getattr(self.ctype, last)
        return member.offset + member.size


def _head() -> list[tuple[str, type]]:
    return [("struct_size", SZ), ("extension_start", P)]


@lru_cache(maxsize=None)
def _ctype(name: str) -> type[ctypes.Structure]:
    spec = STRUCTS[name]
    members = _head() if spec.has_head else []
    members += [(f.name, f.ctype) for f in spec.fields]
    if spec.slack:
        members.append(("_slack", ctypes.c_char * SLACK))
    return type(name, (ctypes.Structure,), {"_fields_": members})


def _s(name: str, *fields: Field, stale: tuple[tuple[int, int, str], ...] = (),
       slack: bool = True) -> StructLayout:
    return StructLayout(name, tuple(fields), stale, slack=slack)


def _handle_query(name: str, handle: str, *outs: Field) -> StructLayout:
    return _s(name, F(handle, P), *outs)


_LAYOUTS: list[StructLayout] = [
    # -- errors, plugin, events --------------------------------------------------------------
    _s("PJRT_Error_Destroy_Args", F("error", P)),
    _s("PJRT_Error_Message_Args", F("error", P), F("message", P), F("message_size", SZ)),
    _s("PJRT_Error_GetCode_Args", F("error", P), F("code", I32)),
    _s("PJRT_Error_ForEachPayload_Args", F("error", P), F("visitor", P), F("user_arg", P)),
    _s("PJRT_Plugin_Initialize_Args"),
    # The traits named `attributes` (size 24) up to at least 0.60; 0.75 and 0.81 expect 32. The
    # switch lies in 0.61-0.75; we take the larger from 0.61, which any plugin accepts.
    _s("PJRT_Plugin_Attributes_Args", F("attributes", P), F("num_attributes", SZ),
       stale=((0, 60, "attributes"),)),
    _s("PJRT_NamedValue", F("name", P), F("name_size", SZ), F("type", I32), F("value", I64),
       F("value_size", SZ), slack=False),
    _s("PJRT_Event_Destroy_Args", F("event", P)),
    _s("PJRT_Event_IsReady_Args", F("event", P), F("is_ready", BOOL)),
    _s("PJRT_Event_Error_Args", F("event", P)),
    _s("PJRT_Event_Await_Args", F("event", P)),
    _s("PJRT_Event_OnReady_Args", F("event", P), F("callback", P), F("user_arg", P)),
    _s("PJRT_Event_Create_Args", F("event", P)),
    _s("PJRT_Event_Set_Args", F("event", P), F("error_code", I32), F("error_message", P),
       F("error_message_size", SZ)),
    # -- client ------------------------------------------------------------------------------
    _s("PJRT_Client_Create_Args", F("create_options", P), F("num_options", SZ),
       F("kv_get_callback", P), F("kv_get_user_arg", P), F("kv_put_callback", P),
       F("kv_put_user_arg", P), F("client", P),
       F("kv_try_get_callback", P, 61), F("kv_try_get_user_arg", P, 61)),
    _s("PJRT_Client_Destroy_Args", F("client", P)),
    _handle_query("PJRT_Client_PlatformName_Args", "client", F("platform_name", P),
                  F("platform_name_size", SZ)),
    _handle_query("PJRT_Client_ProcessIndex_Args", "client", F("process_index", I32)),
    _handle_query("PJRT_Client_PlatformVersion_Args", "client", F("platform_version", P),
                  F("platform_version_size", SZ)),
    _handle_query("PJRT_Client_Devices_Args", "client", F("devices", P), F("num_devices", SZ)),
    _handle_query("PJRT_Client_AddressableDevices_Args", "client", F("addressable_devices", P),
                  F("num_addressable_devices", SZ)),
    _handle_query("PJRT_Client_LookupDevice_Args", "client", F("id", I32), F("device", P)),
    _handle_query("PJRT_Client_LookupAddressableDevice_Args", "client", F("local_hardware_id", I32),
                  F("addressable_device", P)),
    _handle_query("PJRT_Client_AddressableMemories_Args", "client", F("addressable_memories", P),
                  F("num_addressable_memories", SZ)),
    _s("PJRT_Program", F("code", P), F("code_size", SZ), F("format", P), F("format_size", SZ)),
    _s("PJRT_Client_Compile_Args", F("client", P), F("program", P), F("compile_options", P),
       F("compile_options_size", SZ), F("executable", P)),
    _s("PJRT_Client_DefaultDeviceAssignment_Args", F("client", P), F("num_replicas", I32),
       F("num_partitions", I32), F("default_assignment_size", SZ), F("default_assignment", P)),
    _s("PJRT_Client_BufferFromHostBuffer_Args", F("client", P), F("data", P), F("type", I32),
       F("dims", P), F("num_dims", SZ), F("byte_strides", P), F("num_byte_strides", SZ),
       F("host_buffer_semantics", I32), F("device", P), F("memory", P), F("device_layout", P),
       F("done_with_host_buffer", P), F("buffer", P)),
    _handle_query("PJRT_Client_TopologyDescription_Args", "client", F("topology", P)),
    _s("PJRT_Client_CreateViewOfDeviceBuffer_Args", F("client", P), F("device_buffer_ptr", P),
       F("dims", P), F("num_dims", SZ), F("element_type", I32), F("layout", P), F("device", P),
       F("on_delete_callback", P), F("on_delete_callback_arg", P), F("stream", I64), F("buffer", P),
       F("memory", P, 66)),
    _s("PJRT_Client_Load_Args", F("client", P), F("executable", P), F("compile_options", P),
       F("compile_options_size", SZ), F("loaded_executable", P)),
    _s("PJRT_Client_CreateUninitializedBuffer_Args", F("client", P), F("shape_dims", P),
       F("shape_num_dims", SZ), F("shape_element_type", I32), F("shape_layout", P),
       F("device", P), F("memory", P), F("buffer", P)),
    # -- device descriptions, devices, memories ----------------------------------------------
    _handle_query("PJRT_DeviceDescription_Id_Args", "device_description", F("id", I32)),
    _handle_query("PJRT_DeviceDescription_ProcessIndex_Args", "device_description",
                  F("process_index", I32)),
    _handle_query("PJRT_DeviceDescription_Attributes_Args", "device_description",
                  F("num_attributes", SZ), F("attributes", P)),
    _handle_query("PJRT_DeviceDescription_Kind_Args", "device_description", F("device_kind", P),
                  F("device_kind_size", SZ)),
    _handle_query("PJRT_DeviceDescription_DebugString_Args", "device_description",
                  F("debug_string", P), F("debug_string_size", SZ)),
    _handle_query("PJRT_DeviceDescription_ToString_Args", "device_description",
                  F("to_string", P), F("to_string_size", SZ)),
    _handle_query("PJRT_Device_GetDescription_Args", "device", F("device_description", P)),
    _handle_query("PJRT_Device_IsAddressable_Args", "device", F("is_addressable", BOOL)),
    _handle_query("PJRT_Device_LocalHardwareId_Args", "device", F("local_hardware_id", I32)),
    # 0.46 "update outdated struct sizes ... PJRT_Device_AddressableMemories_Args".
    _s("PJRT_Device_AddressableMemories_Args", F("device", P), F("memories", P),
       F("num_memories", SZ), stale=((0, 45, "memories"),)),
    _handle_query("PJRT_Device_DefaultMemory_Args", "device", F("memory", P)),
    _s("PJRT_Device_MemoryStats_Args", F("device", P), F("bytes_in_use", I64),
       F("peak_bytes_in_use", I64), F("peak_bytes_in_use_is_set", BOOL),
       F("num_allocs", I64), F("num_allocs_is_set", BOOL),
       F("largest_alloc_size", I64), F("largest_alloc_size_is_set", BOOL),
       F("bytes_limit", I64), F("bytes_limit_is_set", BOOL),
       F("bytes_reserved", I64), F("bytes_reserved_is_set", BOOL),
       F("peak_bytes_reserved", I64), F("peak_bytes_reserved_is_set", BOOL),
       F("bytes_reservable_limit", I64), F("bytes_reservable_limit_is_set", BOOL),
       F("largest_free_block_bytes", I64), F("largest_free_block_bytes_is_set", BOOL),
       F("pool_bytes", I64), F("pool_bytes_is_set", BOOL),
       F("peak_pool_bytes", I64), F("peak_pool_bytes_is_set", BOOL),
       F("peak_allocated_bytes", I64, 113), F("peak_allocated_bytes_is_set", BOOL, 113)),
    _s("PJRT_Device_GetAttributes_Args", F("device", P), F("attributes", P),
       F("num_attributes", SZ), F("device_attributes", P), F("attributes_deleter", P)),
    _handle_query("PJRT_Memory_Id_Args", "memory", F("id", I32)),
    _handle_query("PJRT_Memory_Kind_Args", "memory", F("kind", P), F("kind_size", SZ)),
    _handle_query("PJRT_Memory_Kind_Id_Args", "memory", F("kind_id", I32)),
    _handle_query("PJRT_Memory_DebugString_Args", "memory", F("debug_string", P),
                  F("debug_string_size", SZ)),
    _handle_query("PJRT_Memory_ToString_Args", "memory", F("to_string", P), F("to_string_size", SZ)),
    _handle_query("PJRT_Memory_AddressableByDevices_Args", "memory", F("devices", P),
                  F("num_devices", SZ)),
    # -- executables -------------------------------------------------------------------------
    _s("PJRT_Executable_Destroy_Args", F("executable", P)),
    _handle_query("PJRT_Executable_Name_Args", "executable", F("executable_name", P),
                  F("executable_name_size", SZ)),
    _handle_query("PJRT_Executable_NumReplicas_Args", "executable", F("num_replicas", SZ)),
    _handle_query("PJRT_Executable_NumPartitions_Args", "executable", F("num_partitions", SZ)),
    _handle_query("PJRT_Executable_NumOutputs_Args", "executable", F("num_outputs", SZ)),
    _handle_query("PJRT_Executable_SizeOfGeneratedCodeInBytes_Args", "executable",
                  F("size_in_bytes", I64)),
    _handle_query("PJRT_Executable_GetCostAnalysis_Args", "executable", F("num_properties", SZ),
                  F("properties", P)),
    _handle_query("PJRT_Executable_OutputMemoryKinds_Args", "executable", F("num_outputs", SZ),
                  F("memory_kinds", P), F("memory_kind_sizes", P)),
    _handle_query("PJRT_Executable_OptimizedProgram_Args", "executable", F("program", P)),
    _handle_query("PJRT_Executable_Serialize_Args", "executable", F("serialized_bytes", P),
                  F("serialized_bytes_size", SZ), F("serialized_executable", P),
                  F("serialized_executable_deleter", P)),
    _handle_query("PJRT_Executable_OutputElementTypes_Args", "executable", F("output_types", P),
                  F("num_output_types", SZ)),
    _handle_query("PJRT_Executable_OutputDimensions_Args", "executable", F("num_outputs", SZ),
                  F("dims", P), F("dim_sizes", P)),
    _handle_query("PJRT_Executable_Fingerprint_Args", "executable", F("executable_fingerprint", P),
                  F("executable_fingerprint_size", SZ)),
    _handle_query("PJRT_Executable_GetCompiledMemoryStats_Args", "executable",
                  F("generated_code_size_in_bytes", I64, 40), F("argument_size_in_bytes", I64, 40),
                  F("output_size_in_bytes", I64, 40), F("alias_size_in_bytes", I64, 40),
                  F("temp_size_in_bytes", I64, 40),
                  F("host_generated_code_size_in_bytes", I64, 43),
                  F("host_argument_size_in_bytes", I64, 43), F("host_output_size_in_bytes", I64, 43),
                  F("host_alias_size_in_bytes", I64, 43), F("host_temp_size_in_bytes", I64, 43),
                  F("peak_memory_in_bytes", I64, 72), F("total_size_in_bytes", I64, 90),
                  F("total_allocation_bytes", I64, 104), F("indefinite_allocations", I64, 104),
                  F("peak_unpadded_heap_bytes", I64, 104)),
    _s("PJRT_Executable_DeserializeAndLoad_Args", F("client", P), F("serialized_executable", P),
       F("serialized_executable_size", SZ), F("loaded_executable", P),
       F("overridden_serialized_compile_options", P, 71),
       F("overridden_serialized_compile_options_size", SZ, 71), F("load_options", P, 111)),
    _s("PJRT_LoadedExecutable_Destroy_Args", F("executable", P)),
    _handle_query("PJRT_LoadedExecutable_GetExecutable_Args", "loaded_executable",
                  F("executable", P)),
    _handle_query("PJRT_LoadedExecutable_AddressableDevices_Args", "executable",
                  F("addressable_devices", P), F("num_addressable_devices", SZ)),
    _s("PJRT_LoadedExecutable_Delete_Args", F("executable", P)),
    _handle_query("PJRT_LoadedExecutable_IsDeleted_Args", "executable", F("is_deleted", BOOL)),
    _handle_query("PJRT_LoadedExecutable_Fingerprint_Args", "executable",
                  F("executable_fingerprint", P), F("executable_fingerprint_size", SZ)),
    # PJRT_LogicalDeviceIds is {int replica; int partition}, 8 bytes per device.
    _handle_query("PJRT_LoadedExecutable_AddressableDeviceLogicalIds_Args", "executable",
                  F("addressable_device_logical_ids", P), F("num_addressable_device_logical_ids", SZ)),
    _handle_query("PJRT_Executable_GetCompileOptions_Args", "executable", F("serialized_bytes", P),
                  F("serialized_bytes_size", SZ), F("serialized_compile_options", P),
                  F("serialized_compile_options_deleter", P)),
    _handle_query("PJRT_LoadedExecutable_GetDeviceAssignment_Args", "executable",
                  F("serialized_bytes", P), F("serialized_bytes_size", SZ),
                  F("serialized_device_assignment", P), F("serialized_device_assignment_deleter", P)),
    # 0.39 added the donation fields but left the traits on `launch_id` until 0.46 fixed them.
    _s("PJRT_ExecuteOptions", F("send_callbacks", P), F("recv_callbacks", P),
       F("num_send_ops", SZ), F("num_recv_ops", SZ), F("launch_id", I32),
       F("non_donatable_input_indices", P, 39), F("num_non_donatable_input_indices", SZ, 39),
       F("context", P, 64), F("call_location", P, 76), F("num_tasks", SZ, 78),
       F("task_ids", P, 78), F("incarnation_ids", P, 78), F("multi_slice_config", P, 97),
       F("use_major_to_minor_data_layout_for_callbacks", BOOL, 108),
       F("hlo_output_callbacks", P, 112), F("num_hlo_output_callbacks", SZ, 112),
       stale=((39, 45, "launch_id"),)),
    _s("PJRT_LoadedExecutable_Execute_Args", F("executable", P), F("options", P),
       F("argument_lists", P), F("num_devices", SZ), F("num_args", SZ), F("output_lists", P),
       F("device_complete_events", P), F("execute_device", P)),
    # -- buffers -----------------------------------------------------------------------------
    _s("PJRT_Buffer_Destroy_Args", F("buffer", P)),
    _handle_query("PJRT_Buffer_ElementType_Args", "buffer", F("type", I32)),
    _handle_query("PJRT_Buffer_Dimensions_Args", "buffer", F("dims", P), F("num_dims", SZ)),
    _handle_query("PJRT_Buffer_UnpaddedDimensions_Args", "buffer", F("unpadded_dims", P),
                  F("num_dims", SZ)),
    _handle_query("PJRT_Buffer_DynamicDimensionIndices_Args", "buffer",
                  F("dynamic_dim_indices", P), F("num_dynamic_dims", SZ)),
    _handle_query("PJRT_Buffer_OnDeviceSizeInBytes_Args", "buffer",
                  F("on_device_size_in_bytes", SZ)),
    _handle_query("PJRT_Buffer_Device_Args", "buffer", F("device", P)),
    _handle_query("PJRT_Buffer_Memory_Args", "buffer", F("memory", P)),
    _s("PJRT_Buffer_Delete_Args", F("buffer", P)),
    _handle_query("PJRT_Buffer_IsDeleted_Args", "buffer", F("is_deleted", BOOL)),
    _handle_query("PJRT_Buffer_CopyToDevice_Args", "buffer", F("dst_device", P), F("dst_buffer", P)),
    _handle_query("PJRT_Buffer_CopyToMemory_Args", "buffer", F("dst_memory", P), F("dst_buffer", P)),
    # The union of PJRT_Buffer_MemoryLayout flattened to its larger member, the tiled layout.
    _s("PJRT_Buffer_MemoryLayout", F("tiled_struct_size", SZ), F("tiled_extension_start", P),
       F("minor_to_major", P), F("minor_to_major_size", SZ), F("tile_dims", P),
       F("tile_dim_sizes", P), F("num_tiles", SZ), F("type", I32)),
    _s("PJRT_Buffer_ToHostBuffer_Args", F("src", P), F("host_layout", P), F("dst", P),
       F("dst_size", SZ), F("event", P)),
    _handle_query("PJRT_Buffer_IsOnCpu_Args", "buffer", F("is_on_cpu", BOOL)),
    _handle_query("PJRT_Buffer_ReadyEvent_Args", "buffer", F("event", P)),
    _handle_query("PJRT_Buffer_UnsafePointer_Args", "buffer", F("buffer_pointer", P)),
    _s("PJRT_Buffer_IncreaseExternalReferenceCount_Args", F("buffer", P)),
    _s("PJRT_Buffer_DecreaseExternalReferenceCount_Args", F("buffer", P)),
    _handle_query("PJRT_Buffer_OpaqueDeviceMemoryDataPointer_Args", "buffer",
                  F("device_memory_ptr", P)),
    # -- topologies and ahead-of-time compilation --------------------------------------------
    _s("PJRT_TopologyDescription_Create_Args", F("topology_name", P), F("topology_name_size", SZ),
       F("create_options", P), F("num_options", SZ), F("topology", P)),
    _s("PJRT_TopologyDescription_Destroy_Args", F("topology", P)),
    _handle_query("PJRT_TopologyDescription_PlatformName_Args", "topology", F("platform_name", P),
                  F("platform_name_size", SZ)),
    _handle_query("PJRT_TopologyDescription_PlatformVersion_Args", "topology",
                  F("platform_version", P), F("platform_version_size", SZ)),
    _handle_query("PJRT_TopologyDescription_GetDeviceDescriptions_Args", "topology",
                  F("descriptions", P), F("num_descriptions", SZ)),
    _handle_query("PJRT_TopologyDescription_Serialize_Args", "topology", F("serialized_bytes", P),
                  F("serialized_bytes_size", SZ), F("serialized_topology", P),
                  F("serialized_topology_deleter", P)),
    _handle_query("PJRT_TopologyDescription_Attributes_Args", "topology", F("attributes", P),
                  F("num_attributes", SZ)),
    _handle_query("PJRT_TopologyDescription_Fingerprint_Args", "topology", F("fingerprint", ctypes.c_uint64)),
    _s("PJRT_TopologyDescription_Deserialize_Args", F("serialized_topology", P),
       F("serialized_topology_size", SZ), F("topology", P)),
    _s("PJRT_Compile_Args", F("topology", P), F("program", P), F("compile_options", P),
       F("compile_options_size", SZ), F("client", P), F("executable", P)),
    # -- execute contexts (0.52) -------------------------------------------------------------
    _s("PJRT_ExecuteContext_Create_Args", F("context", P)),
    _s("PJRT_ExecuteContext_Destroy_Args", F("context", P)),
    # -- extensions: the Args of the functions an extension node points to -------------------
    # Their layouts are the extension headers' (pjrt_c_api_layouts_extension.h,
    # pjrt_c_api_memory_descriptions_extension.h, pjrt_c_api_ffi_extension.h); an extension has
    # no core minor, so they do not vary with it (layouts that changed under one extension
    # version are settled by asking the plugin, see .extensions).
    _s("PJRT_Layouts_MemoryLayout_Destroy_Args", F("layout", P)),
    _s("PJRT_Layouts_MemoryLayout_Serialize_Args", F("layout", P), F("serialized_bytes", P),
       F("serialized_bytes_size", SZ), F("serialized_layout", P), F("serialized_layout_deleter", P)),
    _s("PJRT_Layouts_PJRT_Client_GetDefaultLayout_Args", F("client", P), F("type", I32), F("dims", P),
       F("num_dims", SZ), F("layout", P)),
    _s("PJRT_Layouts_PJRT_Buffer_MemoryLayout_Args", F("buffer", P), F("layout", P)),
    _s("PJRT_Layouts_PJRT_Topology_GetDefaultLayout_Args", F("topology_description", P), F("type", I32),
       F("dims", P), F("num_dims", SZ), F("layout", P)),
    _s("PJRT_Layouts_PJRT_Executable_GetOutputLayouts_Args", F("executable", P), F("num_outputs", SZ),
       F("layouts", P)),
    _s("PJRT_Layouts_PJRT_Executable_GetParameterLayouts_Args", F("executable", P),
       F("num_parameters", SZ), F("layouts", P)),
    # pjrt_c_api_shardings_extension.h (version 1): serialized xla.OpSharding per value.
    _s("PJRT_Shardings_PJRT_Executable_ParameterShardings_Args", F("executable", P), F("num_parameters", SZ),
       F("shardings", P), F("sharding_sizes", P)),
    _s("PJRT_Shardings_PJRT_Executable_OutputShardings_Args", F("executable", P), F("num_outputs", SZ),
       F("shardings", P), F("sharding_sizes", P)),
    _s("PJRT_DeviceDescription_MemoryDescriptions_Args", F("device_description", P),
       F("memory_descriptions", P), F("num_memory_descriptions", SZ), F("default_memory_index", SZ)),
    _s("PJRT_MemoryDescription_Kind_Args", F("memory_description", P), F("kind", P), F("kind_size", SZ),
       F("kind_id", I32)),
    # `type_info` points to {deleter, serialize, deserialize}; plugins that have it read it
    # unconditionally, so it is always sent (older layouts stop at type_id and ignore it).
    _s("PJRT_FFI_Type_Register_Args", F("type_name", P), F("type_name_size", SZ), F("type_id", I64),
       F("type_info", P)),
    # PJRT_FFI_UserData {type_id, data, deleter} inlined; the deleter is missing in some layouts.
    _s("PJRT_FFI_UserData_Add_Args", F("context", P), F("user_data_type_id", I64), F("user_data_data", P),
       F("user_data_deleter", P)),
]

STRUCTS: dict[str, StructLayout] = {spec.name: spec for spec in _LAYOUTS}


def layout(name: str) -> StructLayout:
    """The layout of a struct by its C name; KeyError names the struct if the table lacks it."""
    try:
        return STRUCTS[name]
    except KeyError:
        raise KeyError(f"{name} is not in the pjrt-hub struct table (backends/c_api/structs.py)") from None


@lru_cache(maxsize=None)
def struct_size(name: str, minor: int) -> int:
    """``<name>_STRUCT_SIZE`` as a plugin of this minor expects it."""
    return layout(name).size_for(minor)
