"""The PJRT C API history as data: what each minor changed, when, and which ``PJRT_Api`` slots it added.

Sources: ``xla/pjrt/c/CHANGELOG.md`` and ``xla/pjrt/c/pjrt_c_api.h`` in openxla/xla, to the 0.114
header and changelog that pypjrt 0.1.1 vendors (:data:`NEWEST_HEADER`), plus what real plugins on
PyPI report (0.115 to 0.117) and the symbols behind their slots.
Dates are the changelog's; where it gives none the date is ``None`` and the version policy falls
back to a floor minor instead of guessing.

The slot order is the one of ``PJRT_Api``: the functions that existed before the history starts
(:data:`BASE_FUNCTIONS`), then each minor's additions in order, less what a minor removed. It holds
for every minor but 0.56 (see :data:`UNSTABLE_SLOT_LAYOUT_MINORS`): upstream's ABI test
(``pjrt_c_api_test.cc``, ``FieldOffsetsAndSizesForVersion``) builds the same order for 0.1-0.55 and
0.57 on, the 0.55 header has it, and so do the symbols behind the slots of real plugins (0.40, 0.81,
0.106). The count of a plugin's table is ``(PJRT_Api.struct_size - 40) / 8``; from 0.40 to 0.56 that
count is smaller than the struct (see :data:`STALE_API_STRUCT_SIZE`).

Minors newer than :data:`NEWEST_KNOWN` are accepted as versions; they just carry no facts.
"""

from __future__ import annotations

import datetime as _dt
from dataclasses import dataclass, field
from functools import lru_cache

from .version import ApiVersion

__all__ = [
    "BASE_FUNCTIONS",
    "FLOOR_MINOR",
    "HISTORY",
    "MinorRelease",
    "NEWEST_HEADER",
    "NEWEST_KNOWN",
    "OLDEST_KNOWN",
    "SLOT_LAYOUT_STABLE_SINCE",
    "STALE_API_STRUCT_SIZE",
    "UNSTABLE_SLOT_LAYOUT_MINORS",
    "function_slots",
    "introduced_in",
    "newest_addition",
    "release",
    "slot_count",
]

#: ``kMinPjRtMinor`` in ``xla/pjrt/pjrt_api.cc``: the oldest plugin minor upstream accepts, chosen
#: to give "a forward compatibility window of at least 12 weeks".
FLOOR_MINOR = 29

#: 0.57 "Rearranged fields in the PJRT_Api": it moved ``PJRT_Buffer_CopyRawToHost`` (added at 0.56)
#: to the end. The positions of the other slots are the same before and after.
SLOT_LAYOUT_STABLE_SINCE = 57

#: Minors whose slot positions are not known: upstream's ABI test says "No ABI stability at version
#: 0.56" (``PJRT_Buffer_CopyRawToHost`` sat among the Buffer functions then). The value is the first
#: slot whose position is in doubt: slots before it are the same as in every other minor.
UNSTABLE_SLOT_LAYOUT_MINORS: dict[int, int] = {56: 58}

#: From 0.40 to 0.56 the header's ``PJRT_Api_STRUCT_SIZE`` still ended at
#: ``PJRT_Client_TopologyDescription`` (slot 95), so plugins of those minors report
#: ``struct_size`` 808 (96 slots) although their table holds the functions added since; 0.57
#: "update[d] outdated struct sizes". Seen on jax-cuda12-pjrt 0.4.23 (0.40): struct_size 808.
#: (first minor, last minor, slots the plugin reports)
STALE_API_STRUCT_SIZE: tuple[int, int, int] = (40, 56, 96)

#: ``PJRT_Api`` function slots present before 0.29, in struct order (index = slot number).
BASE_FUNCTIONS: tuple[str, ...] = (
    "PJRT_Error_Destroy", "PJRT_Error_Message", "PJRT_Error_GetCode",
    "PJRT_Plugin_Initialize", "PJRT_Plugin_Attributes",
    "PJRT_Event_Destroy", "PJRT_Event_IsReady", "PJRT_Event_Error", "PJRT_Event_Await",
    "PJRT_Event_OnReady",
    "PJRT_Client_Create", "PJRT_Client_Destroy", "PJRT_Client_PlatformName",
    "PJRT_Client_ProcessIndex", "PJRT_Client_PlatformVersion", "PJRT_Client_Devices",
    "PJRT_Client_AddressableDevices", "PJRT_Client_LookupDevice",
    "PJRT_Client_LookupAddressableDevice", "PJRT_Client_AddressableMemories",
    "PJRT_Client_Compile", "PJRT_Client_DefaultDeviceAssignment",
    "PJRT_Client_BufferFromHostBuffer",
    "PJRT_DeviceDescription_Id", "PJRT_DeviceDescription_ProcessIndex",
    "PJRT_DeviceDescription_Attributes", "PJRT_DeviceDescription_Kind",
    "PJRT_DeviceDescription_DebugString", "PJRT_DeviceDescription_ToString",
    "PJRT_Device_GetDescription", "PJRT_Device_IsAddressable", "PJRT_Device_LocalHardwareId",
    "PJRT_Device_AddressableMemories", "PJRT_Device_DefaultMemory", "PJRT_Device_MemoryStats",
    "PJRT_Memory_Id", "PJRT_Memory_Kind", "PJRT_Memory_DebugString", "PJRT_Memory_ToString",
    "PJRT_Memory_AddressableByDevices",
    "PJRT_Executable_Destroy", "PJRT_Executable_Name", "PJRT_Executable_NumReplicas",
    "PJRT_Executable_NumPartitions", "PJRT_Executable_NumOutputs",
    "PJRT_Executable_SizeOfGeneratedCodeInBytes", "PJRT_Executable_GetCostAnalysis",
    "PJRT_Executable_OutputMemoryKinds", "PJRT_Executable_OptimizedProgram",
    "PJRT_Executable_Serialize",
    "PJRT_LoadedExecutable_Destroy", "PJRT_LoadedExecutable_GetExecutable",
    "PJRT_LoadedExecutable_AddressableDevices", "PJRT_LoadedExecutable_Delete",
    "PJRT_LoadedExecutable_IsDeleted", "PJRT_LoadedExecutable_Execute",
    "PJRT_Executable_DeserializeAndLoad", "PJRT_LoadedExecutable_Fingerprint",
    "PJRT_Buffer_Destroy", "PJRT_Buffer_ElementType", "PJRT_Buffer_Dimensions",
    "PJRT_Buffer_UnpaddedDimensions", "PJRT_Buffer_DynamicDimensionIndices",
    "PJRT_Buffer_GetMemoryLayout", "PJRT_Buffer_OnDeviceSizeInBytes", "PJRT_Buffer_Device",
    "PJRT_Buffer_Memory", "PJRT_Buffer_Delete", "PJRT_Buffer_IsDeleted",
    "PJRT_Buffer_CopyToDevice", "PJRT_Buffer_ToHostBuffer", "PJRT_Buffer_IsOnCpu",
    "PJRT_Buffer_ReadyEvent", "PJRT_Buffer_UnsafePointer",
    "PJRT_Buffer_IncreaseExternalReferenceCount", "PJRT_Buffer_DecreaseExternalReferenceCount",
    "PJRT_Buffer_OpaqueDeviceMemoryDataPointer",
    "PJRT_CopyToDeviceStream_Destroy", "PJRT_CopyToDeviceStream_AddChunk",
    "PJRT_CopyToDeviceStream_TotalBytes", "PJRT_CopyToDeviceStream_GranuleSize",
    "PJRT_CopyToDeviceStream_CurrentBytes",
    "PJRT_TopologyDescription_Create", "PJRT_TopologyDescription_Destroy",
    "PJRT_TopologyDescription_PlatformName", "PJRT_TopologyDescription_PlatformVersion",
    "PJRT_TopologyDescription_GetDeviceDescriptions", "PJRT_TopologyDescription_Serialize",
    "PJRT_TopologyDescription_Attributes",
    "PJRT_Compile",
)


@dataclass(frozen=True, slots=True)
class MinorRelease:
    """One minor of the PJRT C API: what it changed and which ``PJRT_Api`` slots it appended."""

    minor: int
    change: str
    date: _dt.date | None = None
    functions: tuple[str, ...] = ()
    #: Slot count of a real plugin built at this minor, where the appended-function record
    #: above is known to be incomplete (0.106 to 0.117 come from plugins, not from headers).
    observed_slots: int | None = None
    breaking: bool = False
    #: ``PJRT_Api`` functions this minor took out again (their slot goes to what follows).
    removed: tuple[str, ...] = ()
    extension_types: tuple[str, ...] = field(default=())

    @property
    def version(self) -> ApiVersion:
        return ApiVersion(0, self.minor)


def _d(text: str) -> _dt.date:
    return _dt.date.fromisoformat(text)


HISTORY: tuple[MinorRelease, ...] = (
    MinorRelease(29, "Added PJRT_Executable_OutputElementTypes and PJRT_Executable_OutputDimensions",
                 _d("2023-09-06"),
                 ("PJRT_Executable_OutputElementTypes", "PJRT_Executable_OutputDimensions")),
    MinorRelease(30, "Added PJRT_NamedValue_kBool", _d("2023-09-14")),
    MinorRelease(31, "Added PJRT_Structure_Base and PJRT_Structure_Type (the extension chain)",
                 _d("2023-09-22")),
    MinorRelease(32, "Added PJRT_Buffer_CopyToMemory", _d("2023-09-26"), ("PJRT_Buffer_CopyToMemory",)),
    MinorRelease(33, "Added PJRT_Client_CreateViewOfDeviceBuffer", _d("2023-10-03"),
                 ("PJRT_Client_CreateViewOfDeviceBuffer",)),
    MinorRelease(34, "Added the Profiler extension type", _d("2023-10-09"),
                 extension_types=("Profiler",)),
    MinorRelease(35, "Added PJRT_Executable_Fingerprint; deprecated PJRT_LoadedExecutable_Fingerprint",
                 _d("2023-10-20"), ("PJRT_Executable_Fingerprint",)),
    MinorRelease(36, "Added PJRT_Client_TopologyDescription", _d("2023-10-24"),
                 ("PJRT_Client_TopologyDescription",)),
    MinorRelease(37, "Added const to list and value types", _d("2023-10-27")),
    MinorRelease(38, "STRUCT_SIZE constants became enums", _d("2023-10-30")),
    MinorRelease(39, "Added non_donatable_input_indices to PJRT_ExecuteOptions", _d("2023-11-16")),
    MinorRelease(40, "Added PJRT_Executable_GetCompiledMemoryStats", _d("2023-11-27"),
                 ("PJRT_Executable_GetCompiledMemoryStats",)),
    MinorRelease(41, "Renamed PJRT_Structure_Base/Type to PJRT_Extension_Base/Type", _d("2024-02-13")),
    MinorRelease(42, "Renamed every priv field to extension_start", _d("2024-02-13")),
    MinorRelease(43, "Added fields to PJRT_Executable_GetCompiledMemoryStats", _d("2024-02-24")),
    MinorRelease(44, "Typed every void* extension field as PJRT_Extension_Base*", _d("2024-02-26")),
    MinorRelease(45, "Added struct_size to the beginning of PJRT_Extension_Base (extension nodes "
                 "change layout)", _d("2024-02-27"), breaking=True),
    MinorRelease(46, "Fixed outdated struct sizes (AddressableMemories_Args, ExecuteOptions)",
                 _d("2024-02-29")),
    MinorRelease(47, "Added the Custom_Partitioner extension; renamed kZeroCopy to kImmutableZeroCopy",
                 _d("2024-03-29"), extension_types=("Custom_Partitioner",)),
    MinorRelease(48, "Added the memory kind_id and kMutableZeroCopy", _d("2024-04-10"),
                 ("PJRT_Memory_Kind_Id",)),
    MinorRelease(49, "Added the Stream extension", _d("2024-04-19"), extension_types=("Stream",)),
    MinorRelease(50, "Added PJRT_Buffer_Type_TOKEN", _d("2024-04-26")),
    MinorRelease(51, "Added the Layouts extension", extension_types=("Layouts",)),
    MinorRelease(52, "Added PJRT_ExecuteContext", None,
                 ("PJRT_ExecuteContext_Create", "PJRT_ExecuteContext_Destroy")),
    MinorRelease(53, "Added the FFI extension", extension_types=("FFI",)),
    MinorRelease(54, "Deprecated PJRT_Buffer_GetMemoryLayout (use the Layouts extension)"),
    MinorRelease(55, "Added the F8E4M3 and F8E3M4 element types"),
    MinorRelease(56, "Added PJRT_Buffer_CopyRawToHost", _d("2024-11-11"), ("PJRT_Buffer_CopyRawToHost",)),
    MinorRelease(57, "Rearranged fields in PJRT_Api; fixed outdated struct sizes", breaking=True),
    MinorRelease(58, "(no changelog entry)"),
    MinorRelease(59, "Added the MemoryDescriptions extension", extension_types=("MemoryDescriptions",)),
    MinorRelease(60, "Added PJRT_Client_CreateBuffersForAsyncHostToDevice and "
                 "PJRT_AsyncHostToDeviceTransferManager_TransferRawDataToSubBuffer", None,
                 ("PJRT_AsyncHostToDeviceTransferManager_Destroy",
                  "PJRT_AsyncHostToDeviceTransferManager_TransferData",
                  "PJRT_Client_CreateBuffersForAsyncHostToDevice")),
    MinorRelease(61, "Added PJRT_KeyValueTryGet (non-blocking key-value get)"),
    MinorRelease(62, "Added more PJRT_AsyncHostToDeviceTransferManager methods", None,
                 ("PJRT_AsyncHostToDeviceTransferManager_RetrieveBuffer",
                  "PJRT_AsyncHostToDeviceTransferManager_Device",
                  "PJRT_AsyncHostToDeviceTransferManager_BufferCount",
                  "PJRT_AsyncHostToDeviceTransferManager_BufferSize",
                  "PJRT_AsyncHostToDeviceTransferManager_SetBufferError",
                  "PJRT_AsyncHostToDeviceTransferManager_AddMetadata")),
    MinorRelease(63, "Added the F4E2M1FN and F8E8M0FNU element types"),
    MinorRelease(64, "Added context to PJRT_ExecuteOptions"),
    MinorRelease(65, "Added the Triton extension", extension_types=("Triton",)),
    MinorRelease(66, "Added memory to PJRT_Client_CreateViewOfDeviceBuffer_Args (device deprecated)"),
    MinorRelease(67, "Added PJRT_Client_DmaMap and PJRT_Client_DmaUnmap", None,
                 ("PJRT_Client_DmaMap", "PJRT_Client_DmaUnmap")),
    MinorRelease(68, "Made topology parameters const", None, ("PJRT_Client_CreateUninitializedBuffer",)),
    MinorRelease(69, "Implemented PJRT_Client_CreateUninitializedBuffer"),
    MinorRelease(70, "Sharding ops may appear directly in the payload"),
    MinorRelease(71, "Added overridden_serialized_compile_options to DeserializeAndLoad"),
    MinorRelease(72, "Added peak_memory_in_bytes to compiled memory stats"),
    MinorRelease(73, "Added PJRT_Client_UpdateGlobalProcessInfo", None,
                 ("PJRT_Client_UpdateGlobalProcessInfo",)),
    MinorRelease(74, "Added the CrossHostTransfers extension", extension_types=("CrossHostTransfers",)),
    MinorRelease(75, "Added PJRT_TopologyDescription_Deserialize", None,
                 ("PJRT_TopologyDescription_Deserialize",)),
    MinorRelease(76, "Added call_location to PJRT_ExecuteOptions"),
    MinorRelease(77, "Added buffer aliasing (CreateAliasBuffer, FulfillAliasBuffer)", None,
                 ("PJRT_Client_CreateAliasBuffer", "PJRT_Client_FulfillAliasBuffer")),
    MinorRelease(78, "Added incarnations to PJRT_ExecuteOptions"),
    MinorRelease(79, "Added PJRT_LoadedExecutable_GetDeviceAssignment", None,
                 ("PJRT_LoadedExecutable_GetDeviceAssignment",)),
    MinorRelease(80, "Added the HostAllocator extension", extension_types=("HostAllocator",)),
    MinorRelease(81, "Added PJRT_Layouts_PJRT_Executable_GetOutputLayouts to the Layouts extension"),
    MinorRelease(82, "Added PJRT_Client_CreateErrorBuffer", None, ("PJRT_Client_CreateErrorBuffer",)),
    MinorRelease(83, "Added PJRT_AsyncHostToDeviceTransferManager_TransferLiteral", None,
                 ("PJRT_AsyncHostToDeviceTransferManager_TransferLiteral",)),
    MinorRelease(84, "Added PJRT_Buffer_CopyRawToHostFuture", None, ("PJRT_Buffer_CopyRawToHostFuture",)),
    MinorRelease(85, "Added PJRT_Device_PoisonExecution", None, ("PJRT_Device_PoisonExecution",)),
    MinorRelease(86, "Added PJRT_Device_CreateAsyncTrackingEvent and PJRT_AsyncTrackingEvent_Destroy",
                 None, ("PJRT_Device_CreateAsyncTrackingEvent", "PJRT_AsyncTrackingEvent_Destroy")),
    MinorRelease(87, "Added PJRT_Executable_GetCompileOptions", None,
                 ("PJRT_Executable_GetCompileOptions",)),
    MinorRelease(88, "Added PJRT_Buffer_DonateWithControlDependency", None,
                 ("PJRT_Buffer_DonateWithControlDependency",)),
    MinorRelease(89, "Added PJRT_Event_Create and PJRT_Event_Set", None,
                 ("PJRT_Event_Create", "PJRT_Event_Set")),
    MinorRelease(90, "Added total_size_in_bytes to compiled memory stats"),
    MinorRelease(91, "Added the Shardings extension", extension_types=("Shardings",)),
    MinorRelease(92, "Added PJRT_Device_GetAttributes", None, ("PJRT_Device_GetAttributes",)),
    MinorRelease(93, "Added PJRT_Layouts_PJRT_Executable_GetParameterLayouts to the Layouts extension"),
    MinorRelease(94, "Added the S1 and U1 element types"),
    MinorRelease(95, "Added PJRT_Client_Load", None, ("PJRT_Client_Load",)),
    MinorRelease(96, "Added PJRT_LoadedExecutable_AddressableDeviceLogicalIds", None,
                 ("PJRT_LoadedExecutable_AddressableDeviceLogicalIds",)),
    MinorRelease(97, "Added multi_slice_config to PJRT_ExecuteOptions"),
    MinorRelease(98, "Added PJRT_Buffer_Bitcast", None, ("PJRT_Buffer_Bitcast",)),
    MinorRelease(99, "Added PJRT_Error_ForEachPayload", None, ("PJRT_Error_ForEachPayload",)),
    MinorRelease(100, "Added payloads to PJRT_Device_PoisonExecution_Args"),
    MinorRelease(101, "Added PJRT_TopologyDescription_Fingerprint", None,
                  ("PJRT_TopologyDescription_Fingerprint",)),
    MinorRelease(102, "Added PJRT_Executable_ParameterMemoryKinds", None,
                  ("PJRT_Executable_ParameterMemoryKinds",)),
    MinorRelease(103, "Added payloads to PJRT_Client_CreateErrorBuffer_Args"),
    MinorRelease(104, "Added total_allocation_bytes, indefinite_allocations and "
                  "peak_unpadded_heap_bytes to compiled memory stats"),
    MinorRelease(105, "Added PJRT_Memory_FunctionTable (changelog); the 0.105 header at openxla/xla "
                  "0c79bedb also appends PJRT_Buffer_CopyRawFromHost", None, ("PJRT_Buffer_CopyRawFromHost",)),
    # 0.106 to 0.114: upstream CHANGELOG.md as vendored at 0.114 (pypjrt 0.1.1, vendor/), and the
    # slots of real plugins (fastatomstruct-xla-cpu 0.106: slot 135 is PJRT_Device_ClearMemoryStats).
    MinorRelease(106, "Added PJRT_Device_ClearMemoryStats; PJRT_Buffer_CopyRawFromHost is gone from "
                  "PJRT_Api (seen in fastatomstruct-xla-cpu 2026.6.23)", None,
                 ("PJRT_Device_ClearMemoryStats",), observed_slots=136,
                 breaking=True, removed=("PJRT_Buffer_CopyRawFromHost",)),
    MinorRelease(107, "Added PJRT_Error_FunctionTable"),
    MinorRelease(108, "Added use_major_to_minor_data_layout_for_callbacks to PJRT_ExecuteOptions"),
    MinorRelease(109, "Added PJRT_TopologyDescription_MakeCanonicalShapeForMemorySpace", None,
                 ("PJRT_TopologyDescription_MakeCanonicalShapeForMemorySpace",)),
    MinorRelease(110, "Added PJRT_TopologyDescription_GetMemorySpaceKindIds", None,
                 ("PJRT_TopologyDescription_GetMemorySpaceKindIds",)),
    MinorRelease(111, "Added PJRT_LoadOptions and load_options to PJRT_Executable_DeserializeAndLoad_Args"),
    MinorRelease(112, "Added PJRT_HloOutputCallbackInfo to PJRT_ExecuteOptions"),
    MinorRelease(113, "Added peak_allocated_bytes to PJRT_Device_MemoryStats_Args"),
    MinorRelease(114, "Added the F6E2M3FN and F6E3M2FN element types (also seen in jax-tt-plugin 0.1.3)",
                 observed_slots=138),
    MinorRelease(115, "Seen in lammps-jax-pjrt-cpu 0.11.2 (no upstream header seen)", observed_slots=138),
    MinorRelease(116, "Seen in jax-cuda12-pjrt 0.12.0.1 (no upstream header seen)", observed_slots=138),
    MinorRelease(117, "Seen in libtpu 0.0.52 (no upstream header seen)", observed_slots=138),
)

OLDEST_KNOWN: ApiVersion = HISTORY[0].version
NEWEST_KNOWN: ApiVersion = HISTORY[-1].version
#: The newest minor whose header we have (pypjrt 0.1.1 vendors openxla/xla's at 0.114): up to it
#: the slot table is complete; past it only the slot counts of real plugins are known.
NEWEST_HEADER = 114

_BY_MINOR = {r.minor: r for r in HISTORY}


def release(version: ApiVersion | int) -> MinorRelease | None:
    """The history entry of a minor, or None for a minor the history does not know."""
    minor = version.minor if isinstance(version, ApiVersion) else version
    return _BY_MINOR.get(minor)


@lru_cache(maxsize=None)
def function_slots(minor: int) -> tuple[str, ...]:
    """The ``PJRT_Api`` function names a plugin of this minor has, in slot order (as known)."""
    names = list(BASE_FUNCTIONS)
    for entry in HISTORY:
        if entry.minor > minor:
            break
        names = [name for name in names if name not in entry.removed]
        names.extend(entry.functions)
    return tuple(names)


def slot_count(minor: int) -> int | None:
    """How many function slots a plugin of this minor reports (``(struct_size - 40) / 8``), or None
    if the history cannot tell. From 0.40 to 0.56 that is fewer than its table holds
    (:data:`STALE_API_STRUCT_SIZE`); a caller must not read past it."""
    if minor < OLDEST_KNOWN.minor or minor > NEWEST_KNOWN.minor:
        return None
    first, last_stale, reported = STALE_API_STRUCT_SIZE
    if first <= minor <= last_stale:
        return reported
    entry = _BY_MINOR.get(minor)
    if entry is not None and entry.observed_slots is not None:
        return entry.observed_slots
    if minor > NEWEST_HEADER:
        return None  # past the newest header, between plugins we have only seen: not known
    return len(function_slots(minor))


@lru_cache(maxsize=None)
def _introductions() -> dict[str, int]:
    found = {name: 0 for name in BASE_FUNCTIONS}
    for entry in HISTORY:
        for name in entry.functions:
            found.setdefault(name, entry.minor)
    return found


def newest_addition() -> int:
    """The newest minor that added a ``PJRT_*`` function: a caller limited to this minor or a
    newer one may call every function the history knows."""
    return max(_introductions().values())


def introduced_in(c_function: str) -> int | None:
    """The minor that added a ``PJRT_*`` function (0 for those older than the history)."""
    return _introductions().get(c_function)
