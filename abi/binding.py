"""The Python binding of the PJRT C API: the objects a plugin implements.

Each class mirrors one C handle (``PJRT_Client``, ``PJRT_Buffer``, ...) and each method one
``PJRT_*`` function, in snake case: ``PJRT_Client_PlatformName`` is ``Client.platform_name``. The
:func:`api` decorator ties a method to its C function, and the history tells the minor that added
it; that is how the host gates calls for a plugin built at an older minor.

A Python plugin subclasses these classes and overrides what it implements. A method it leaves
alone raises :class:`~pjrt_hub.abi.errors.Unimplemented` naming the method, never AttributeError.
The C bridge implements the same classes over ctypes.

Values with no handle (options, statistics, results of several parts) are frozen dataclasses or
named tuples defined here too, so that every plugin speaks the same types.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import (TYPE_CHECKING, Any, Callable, ClassVar, Mapping, NamedTuple, Protocol, Sequence, TypeVar,
                    runtime_checkable)

from .errors import Unimplemented
from .history import introduced_in
from .types import BufferType, HostBufferSemantics

if TYPE_CHECKING:
    import numpy as np

    from .errors import PjrtError
    from .version import ApiVersion

__all__ = [
    "Api",
    "ApiMethod",
    "Buffer",
    "Client",
    "CompileOptions",
    "CompiledMemoryStats",
    "Device",
    "DeviceDescription",
    "Event",
    "ExecuteOptions",
    "ExecuteResult",
    "Executable",
    "HostTransfer",
    "KeyValueStore",
    "LoadedExecutable",
    "Memory",
    "MemoryStats",
    "NamedValues",
    "PjrtObject",
    "Program",
    "ToHost",
    "TopologyDescription",
    "api",
    "api_methods",
]

#: ``PJRT_NamedValue`` lists (create options, attributes) as Python: str, int, list of int,
#: float or bool values by name.
NamedValues = Mapping[str, "str | int | float | bool | Sequence[int]"]

_F = TypeVar("_F", bound=Callable[..., Any])


@dataclass(frozen=True, slots=True)
class ApiMethod:
    """What the host knows of one binding method."""

    name: str
    c_function: str | None
    #: The minor that added the C function (0: older than the history); None for methods that
    #: exist only in the Python binding and are never gated.
    since: int | None


def api(c_function: str | None) -> Callable[[_F], _F]:
    """Tie a binding method to the ``PJRT_*`` function it mirrors (None: Python-only)."""

    def mark(fn: _F) -> _F:
        since = None if c_function is None else introduced_in(c_function)
        if c_function is not None and since is None:
            raise LookupError(f"{c_function} is not in the PJRT C API history")
        fn.__pjrt_api__ = ApiMethod(fn.__name__, c_function, since)  # type: ignore[attr-defined]  # a marker on the function: no Callable type declares it
        return fn

    return mark


def _unimplemented(obj: object, method: str) -> Unimplemented:
    return Unimplemented(f"{type(obj).__name__}.{method} is not implemented by this plugin")


class _Itself:
    """``obj.unwrapped`` of a plugin object: the object itself. Not a property: a plugin's own
    attribute of that name (an instance attribute it sets) still wins."""

    def __get__(self, obj: Any, owner: type | None = None) -> Any:
        return self if obj is None else obj


class PjrtObject:
    """Base of every handle. Subclasses list their API methods in :data:`__pjrt_methods__`."""

    __slots__ = ()
    __pjrt_methods__: ClassVar[dict[str, ApiMethod]] = {}

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        methods: dict[str, ApiMethod] = {}
        for klass in reversed(cls.__mro__):
            for name, value in vars(klass).items():
                info = getattr(value, "__pjrt_api__", None)
                if isinstance(info, ApiMethod):
                    methods[name] = info
        cls.__pjrt_methods__ = methods

    #: The plugin's own object: this one. A :class:`pjrt_hub.Gated` proxy has the same attribute
    #: and gives its target, so ``obj.unwrapped`` works whether or not a gate is in between.
    unwrapped = _Itself()


def api_methods(cls: type) -> Mapping[str, ApiMethod]:
    """The API methods of a binding class (or of a plugin's subclass of one)."""
    return getattr(cls, "__pjrt_methods__", {})


# -- values ------------------------------------------------------------------------------------


@runtime_checkable
class KeyValueStore(Protocol):
    """The three key-value callbacks of ``PJRT_Client_Create_Args`` (``kv_get_callback``,
    ``kv_try_get_callback``, ``kv_put_callback``): how the processes of a multi-process job find
    each other. The framework owns the store; a plugin only calls these."""

    def get(self, key: str, timeout: float) -> bytes:
        """The value of ``key``, waiting up to ``timeout`` seconds for it to be put
        (DeadlineExceeded after that)."""
        ...

    def try_get(self, key: str) -> bytes | None:
        """The value of ``key`` if it has been put, else None; never waits."""
        ...

    def put(self, key: str, value: bytes) -> None:
        ...



@dataclass(frozen=True, slots=True)
class Program:
    """``PJRT_Program``: code and its format (``"mlir"`` for StableHLO text or bytecode, ``"hlo"``)."""

    code: bytes | str
    format: str = "mlir"

    def text(self) -> str:
        return self.code if isinstance(self.code, str) else self.code.decode("utf-8")

    def data(self) -> bytes:
        return self.code.encode("utf-8") if isinstance(self.code, str) else bytes(self.code)


@dataclass(frozen=True, slots=True)
class CompileOptions:
    """The fields of ``CompileOptionsProto`` that pjrt-hub uses (see :mod:`.compile_options`)."""

    num_replicas: int = 1
    num_partitions: int = 1
    #: ``device_assignment[replica][partition]`` = device id; None lets the plugin choose.
    device_assignment: tuple[tuple[int, ...], ...] | None = None
    #: Extra options by name (``env_option_overrides``).
    env_option_overrides: Mapping[str, str | int | float | bool] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class ExecuteOptions:
    """``PJRT_ExecuteOptions``, plus a time limit that only the Python binding has.

    ``timeout`` is not a PJRT field: the C API has no way to stop an execution. It lives here,
    rather than in a separate call, because a limit belongs to one execution and must be in
    place before it starts (an execution that runs inline has not returned to its caller when
    the limit passes). Seconds from the ``execute`` call; once they pass, a plugin that can
    stop the execution does so: its completion events and outputs then carry
    :class:`~pjrt_hub.abi.errors.DeadlineExceeded`, and the client stays usable. Inputs it
    donated are gone either way, as after any failed execution. None (the default) sets no
    limit. A plugin that cannot stop an execution (the C bridge) leaves it running; bound the
    wait with ``Event.await_(timeout)``. :meth:`LoadedExecutable.cancel` stops executions on
    demand instead.
    """

    launch_id: int = 0
    #: Inputs that must not be donated even where the program aliases them (0.39).
    non_donatable_input_indices: tuple[int, ...] = ()
    #: Python binding only: seconds after which a plugin that can stop the execution does so,
    #: with DeadlineExceeded on its events and outputs (None: no limit).
    timeout: float | None = None


@dataclass(frozen=True, slots=True)
class MemoryStats:
    """``PJRT_Device_MemoryStats``; a None field is one the plugin does not report."""

    bytes_in_use: int
    peak_bytes_in_use: int | None = None
    num_allocs: int | None = None
    largest_alloc_size: int | None = None
    bytes_limit: int | None = None
    bytes_reserved: int | None = None
    peak_bytes_reserved: int | None = None
    largest_free_block_bytes: int | None = None
    pool_bytes: int | None = None
    peak_pool_bytes: int | None = None


@dataclass(frozen=True, slots=True)
class CompiledMemoryStats:
    """``PJRT_Executable_GetCompiledMemoryStats`` (0.40; more fields in later minors)."""

    generated_code_size_in_bytes: int = 0
    argument_size_in_bytes: int = 0
    output_size_in_bytes: int = 0
    alias_size_in_bytes: int = 0
    temp_size_in_bytes: int = 0
    host_generated_code_size_in_bytes: int = 0
    host_argument_size_in_bytes: int = 0
    host_output_size_in_bytes: int = 0
    host_alias_size_in_bytes: int = 0
    host_temp_size_in_bytes: int = 0
    peak_memory_in_bytes: int = 0
    total_size_in_bytes: int = 0

    def as_dict(self) -> dict[str, int]:
        return dataclasses.asdict(self)


class HostTransfer(NamedTuple):
    """Result of ``buffer_from_host_buffer``: the buffer, and when the host array is free again."""

    buffer: "Buffer"
    done_with_host_buffer: "Event"


class ToHost(NamedTuple):
    """Result of ``to_host_buffer``: the destination array, filled once ``event`` is ready."""

    array: "np.ndarray"
    event: "Event"


class ExecuteResult(NamedTuple):
    """Result of ``execute``: ``outputs[device][i]`` and one completion event per device."""

    outputs: list[list["Buffer"]]
    device_complete_events: list["Event"]


# -- handles -----------------------------------------------------------------------------------


class Event(PjrtObject):
    """``PJRT_Event``: completion of asynchronous work, possibly with an error."""

    __slots__ = ()

    @api("PJRT_Event_IsReady")
    def is_ready(self) -> bool:
        raise _unimplemented(self, "is_ready")

    @api("PJRT_Event_Error")
    def error(self) -> "PjrtError | None":
        """The error the work ended with, or None; only meaningful once ready."""
        raise _unimplemented(self, "error")

    @api("PJRT_Event_Await")
    def await_(self, timeout: float | None = None) -> None:
        """Block until ready; raise the event's error if it carries one.

        ``timeout`` (Python binding only; ``PJRT_Event_Await`` has none): seconds after which
        DeadlineExceeded is raised if the event is still pending. The wait ends, not the work:
        to stop an execution, give it ``ExecuteOptions.timeout`` or call
        ``LoadedExecutable.cancel``. None (the default) waits as long as it takes.
        """
        raise _unimplemented(self, "await_")

    @api("PJRT_Event_OnReady")
    def on_ready(self, callback: "Callable[[PjrtError | None], None]") -> None:
        """Call ``callback(error_or_None)`` once ready (at once if already ready)."""
        raise _unimplemented(self, "on_ready")

    @api("PJRT_Event_Destroy")
    def destroy(self) -> None:
        """Release the handle. Python plugins usually need nothing here."""


class Memory(PjrtObject):
    """``PJRT_Memory``: a memory space a device can address."""

    __slots__ = ()

    @api("PJRT_Memory_Id")
    def id(self) -> int:
        raise _unimplemented(self, "id")

    @api("PJRT_Memory_Kind")
    def kind(self) -> str:
        raise _unimplemented(self, "kind")

    @api("PJRT_Memory_Kind_Id")
    def kind_id(self) -> int:
        raise _unimplemented(self, "kind_id")

    @api("PJRT_Memory_DebugString")
    def debug_string(self) -> str:
        raise _unimplemented(self, "debug_string")

    @api("PJRT_Memory_ToString")
    def to_string(self) -> str:
        raise _unimplemented(self, "to_string")

    @api("PJRT_Memory_AddressableByDevices")
    def addressable_by_devices(self) -> list["Device"]:
        raise _unimplemented(self, "addressable_by_devices")


class DeviceDescription(PjrtObject):
    """``PJRT_DeviceDescription``: what a device is, without needing a client to use it."""

    __slots__ = ()

    @api("PJRT_DeviceDescription_Id")
    def id(self) -> int:
        raise _unimplemented(self, "id")

    @api("PJRT_DeviceDescription_ProcessIndex")
    def process_index(self) -> int:
        raise _unimplemented(self, "process_index")

    @api("PJRT_DeviceDescription_Attributes")
    def attributes(self) -> dict[str, Any]:
        raise _unimplemented(self, "attributes")

    @api("PJRT_DeviceDescription_Kind")
    def kind(self) -> str:
        raise _unimplemented(self, "kind")

    @api("PJRT_DeviceDescription_DebugString")
    def debug_string(self) -> str:
        raise _unimplemented(self, "debug_string")

    @api("PJRT_DeviceDescription_ToString")
    def to_string(self) -> str:
        raise _unimplemented(self, "to_string")


class Device(PjrtObject):
    """``PJRT_Device``."""

    __slots__ = ()

    @api("PJRT_Device_GetDescription")
    def get_description(self) -> DeviceDescription:
        raise _unimplemented(self, "get_description")

    @api("PJRT_Device_IsAddressable")
    def is_addressable(self) -> bool:
        raise _unimplemented(self, "is_addressable")

    @api("PJRT_Device_LocalHardwareId")
    def local_hardware_id(self) -> int:
        raise _unimplemented(self, "local_hardware_id")

    @api("PJRT_Device_AddressableMemories")
    def addressable_memories(self) -> list[Memory]:
        raise _unimplemented(self, "addressable_memories")

    @api("PJRT_Device_DefaultMemory")
    def default_memory(self) -> Memory:
        raise _unimplemented(self, "default_memory")

    @api("PJRT_Device_MemoryStats")
    def memory_stats(self) -> MemoryStats:
        raise _unimplemented(self, "memory_stats")

    @api("PJRT_Device_GetAttributes")
    def get_attributes(self) -> dict[str, Any]:
        raise _unimplemented(self, "get_attributes")


class Buffer(PjrtObject):
    """``PJRT_Buffer``: an array on a device."""

    __slots__ = ()

    @api("PJRT_Buffer_ElementType")
    def element_type(self) -> BufferType:
        raise _unimplemented(self, "element_type")

    @api("PJRT_Buffer_Dimensions")
    def dimensions(self) -> tuple[int, ...]:
        raise _unimplemented(self, "dimensions")

    @api("PJRT_Buffer_UnpaddedDimensions")
    def unpadded_dimensions(self) -> tuple[int, ...]:
        raise _unimplemented(self, "unpadded_dimensions")

    @api("PJRT_Buffer_DynamicDimensionIndices")
    def dynamic_dimension_indices(self) -> tuple[int, ...]:
        raise _unimplemented(self, "dynamic_dimension_indices")

    @api("PJRT_Buffer_OnDeviceSizeInBytes")
    def on_device_size_in_bytes(self) -> int:
        raise _unimplemented(self, "on_device_size_in_bytes")

    @api("PJRT_Buffer_Device")
    def device(self) -> Device:
        raise _unimplemented(self, "device")

    @api("PJRT_Buffer_Memory")
    def memory(self) -> Memory:
        raise _unimplemented(self, "memory")

    @api("PJRT_Buffer_Delete")
    def delete(self) -> None:
        """Free the device memory now; the handle stays and reports ``is_deleted``."""
        raise _unimplemented(self, "delete")

    @api("PJRT_Buffer_IsDeleted")
    def is_deleted(self) -> bool:
        raise _unimplemented(self, "is_deleted")

    @api("PJRT_Buffer_CopyToDevice")
    def copy_to_device(self, device: Device) -> "Buffer":
        raise _unimplemented(self, "copy_to_device")

    @api("PJRT_Buffer_CopyToMemory")
    def copy_to_memory(self, memory: Memory) -> "Buffer":
        raise _unimplemented(self, "copy_to_memory")

    @api("PJRT_Buffer_ToHostBuffer")
    def to_host_buffer(self, dst: "np.ndarray | None" = None) -> ToHost:
        """Copy to host, into ``dst`` when given (shape and dtype must match) or a new array."""
        raise _unimplemented(self, "to_host_buffer")

    @api("PJRT_Buffer_IsOnCpu")
    def is_on_cpu(self) -> bool:
        raise _unimplemented(self, "is_on_cpu")

    @api("PJRT_Buffer_ReadyEvent")
    def ready_event(self) -> Event:
        raise _unimplemented(self, "ready_event")

    @api("PJRT_Buffer_UnsafePointer")
    def unsafe_pointer(self) -> int:
        raise _unimplemented(self, "unsafe_pointer")

    @api("PJRT_Buffer_IncreaseExternalReferenceCount")
    def increase_external_reference_count(self) -> None:
        raise _unimplemented(self, "increase_external_reference_count")

    @api("PJRT_Buffer_DecreaseExternalReferenceCount")
    def decrease_external_reference_count(self) -> None:
        raise _unimplemented(self, "decrease_external_reference_count")

    @api("PJRT_Buffer_OpaqueDeviceMemoryDataPointer")
    def opaque_device_memory_data_pointer(self) -> int:
        raise _unimplemented(self, "opaque_device_memory_data_pointer")

    @api("PJRT_Buffer_Destroy")
    def destroy(self) -> None:
        """Release the handle (and the memory, if not already deleted)."""


class Executable(PjrtObject):
    """``PJRT_Executable``: a compiled program, not bound to devices."""

    __slots__ = ()

    @api("PJRT_Executable_Name")
    def name(self) -> str:
        raise _unimplemented(self, "name")

    @api("PJRT_Executable_NumReplicas")
    def num_replicas(self) -> int:
        raise _unimplemented(self, "num_replicas")

    @api("PJRT_Executable_NumPartitions")
    def num_partitions(self) -> int:
        raise _unimplemented(self, "num_partitions")

    @api("PJRT_Executable_NumOutputs")
    def num_outputs(self) -> int:
        raise _unimplemented(self, "num_outputs")

    @api("PJRT_Executable_SizeOfGeneratedCodeInBytes")
    def size_of_generated_code_in_bytes(self) -> int:
        raise _unimplemented(self, "size_of_generated_code_in_bytes")

    @api("PJRT_Executable_GetCostAnalysis")
    def get_cost_analysis(self) -> dict[str, Any]:
        raise _unimplemented(self, "get_cost_analysis")

    @api("PJRT_Executable_OutputMemoryKinds")
    def output_memory_kinds(self) -> list[str]:
        raise _unimplemented(self, "output_memory_kinds")

    @api("PJRT_Executable_OptimizedProgram")
    def optimized_program(self) -> Program:
        raise _unimplemented(self, "optimized_program")

    @api("PJRT_Executable_Serialize")
    def serialize(self) -> bytes:
        raise _unimplemented(self, "serialize")

    @api("PJRT_Executable_OutputElementTypes")
    def output_element_types(self) -> list[BufferType]:
        raise _unimplemented(self, "output_element_types")

    @api("PJRT_Executable_OutputDimensions")
    def output_dimensions(self) -> list[tuple[int, ...]]:
        raise _unimplemented(self, "output_dimensions")

    @api("PJRT_Executable_Fingerprint")
    def fingerprint(self) -> str:
        raise _unimplemented(self, "fingerprint")

    @api("PJRT_Executable_GetCompiledMemoryStats")
    def get_compiled_memory_stats(self) -> CompiledMemoryStats:
        raise _unimplemented(self, "get_compiled_memory_stats")

    @api("PJRT_Executable_Destroy")
    def destroy(self) -> None:
        """Release the handle."""


class LoadedExecutable(PjrtObject):
    """``PJRT_LoadedExecutable``: a compiled program loaded onto devices, ready to run."""

    __slots__ = ()

    @api("PJRT_LoadedExecutable_GetExecutable")
    def get_executable(self) -> Executable:
        raise _unimplemented(self, "get_executable")

    @api("PJRT_LoadedExecutable_AddressableDevices")
    def addressable_devices(self) -> list[Device]:
        raise _unimplemented(self, "addressable_devices")

    @api("PJRT_LoadedExecutable_Delete")
    def delete(self) -> None:
        raise _unimplemented(self, "delete")

    @api("PJRT_LoadedExecutable_IsDeleted")
    def is_deleted(self) -> bool:
        raise _unimplemented(self, "is_deleted")

    @api("PJRT_LoadedExecutable_Execute")
    def execute(self, argument_lists: Sequence[Sequence[Buffer]],
                options: ExecuteOptions | None = None,
                execute_device: Device | None = None) -> ExecuteResult:
        """Run on one argument list per device; outputs come back at once, each with a ready event."""
        raise _unimplemented(self, "execute")

    @api(None)
    def cancel(self) -> None:
        """Stop every execution of this executable that has not finished (Python binding only).

        PJRT has no such call; it is the on-demand twin of ``ExecuteOptions.timeout``, for a
        caller whose ``Event.await_(timeout)`` ran out, or who was interrupted. Executions not
        started yet never start; running ones stop where the plugin can stop them (a loop
        iteration). Their events and outputs carry :class:`~pjrt_hub.abi.errors.Cancelled`,
        their donated inputs are gone, and the client stays usable. Returns at once, without
        waiting for them to stop. A plugin that cannot stop executions raises Unimplemented.
        """
        raise _unimplemented(self, "cancel")

    @api("PJRT_LoadedExecutable_Fingerprint")
    def fingerprint(self) -> str:
        """Deprecated at 0.35 in favour of ``Executable.fingerprint``."""
        raise _unimplemented(self, "fingerprint")

    @api("PJRT_LoadedExecutable_GetDeviceAssignment")
    def get_device_assignment(self) -> tuple[tuple[int, ...], ...]:
        raise _unimplemented(self, "get_device_assignment")

    @api("PJRT_LoadedExecutable_Destroy")
    def destroy(self) -> None:
        """Release the handle."""


class TopologyDescription(PjrtObject):
    """``PJRT_TopologyDescription``: the devices of a platform, without a client."""

    __slots__ = ()

    @api("PJRT_TopologyDescription_PlatformName")
    def platform_name(self) -> str:
        raise _unimplemented(self, "platform_name")

    @api("PJRT_TopologyDescription_PlatformVersion")
    def platform_version(self) -> str:
        raise _unimplemented(self, "platform_version")

    @api("PJRT_TopologyDescription_GetDeviceDescriptions")
    def get_device_descriptions(self) -> list[DeviceDescription]:
        raise _unimplemented(self, "get_device_descriptions")

    @api("PJRT_TopologyDescription_Serialize")
    def serialize(self) -> bytes:
        raise _unimplemented(self, "serialize")

    @api("PJRT_TopologyDescription_Attributes")
    def attributes(self) -> dict[str, Any]:
        raise _unimplemented(self, "attributes")

    @api("PJRT_TopologyDescription_Destroy")
    def destroy(self) -> None:
        """Release the handle."""


class Client(PjrtObject):
    """``PJRT_Client``: the entry to a plugin's devices."""

    __slots__ = ()

    @api("PJRT_Client_PlatformName")
    def platform_name(self) -> str:
        raise _unimplemented(self, "platform_name")

    @api("PJRT_Client_ProcessIndex")
    def process_index(self) -> int:
        raise _unimplemented(self, "process_index")

    @api("PJRT_Client_PlatformVersion")
    def platform_version(self) -> str:
        raise _unimplemented(self, "platform_version")

    @api("PJRT_Client_Devices")
    def devices(self) -> list[Device]:
        raise _unimplemented(self, "devices")

    @api("PJRT_Client_AddressableDevices")
    def addressable_devices(self) -> list[Device]:
        raise _unimplemented(self, "addressable_devices")

    @api("PJRT_Client_LookupDevice")
    def lookup_device(self, device_id: int) -> Device:
        """The device with this global id; InvalidArgument "No matching device found for device_id N"."""
        raise _unimplemented(self, "lookup_device")

    @api("PJRT_Client_LookupAddressableDevice")
    def lookup_addressable_device(self, local_hardware_id: int) -> Device:
        raise _unimplemented(self, "lookup_addressable_device")

    @api("PJRT_Client_AddressableMemories")
    def addressable_memories(self) -> list[Memory]:
        raise _unimplemented(self, "addressable_memories")

    @api("PJRT_Client_Compile")
    def compile(self, program: Program, options: CompileOptions | bytes | None = None) -> LoadedExecutable:
        """Compile and load; ``options`` may be a serialized ``CompileOptionsProto``."""
        raise _unimplemented(self, "compile")

    @api("PJRT_Client_DefaultDeviceAssignment")
    def default_device_assignment(self, num_replicas: int, num_partitions: int) -> tuple[tuple[int, ...], ...]:
        raise _unimplemented(self, "default_device_assignment")

    @api("PJRT_Client_BufferFromHostBuffer")
    def buffer_from_host_buffer(
        self,
        array: "np.ndarray",
        *,
        device: Device | None = None,
        memory: Memory | None = None,
        semantics: HostBufferSemantics = HostBufferSemantics.IMMUTABLE_ONLY_DURING_CALL,
        element_type: BufferType | None = None,
    ) -> HostTransfer:
        """Copy (or alias, for the zero-copy semantics) a host array onto a device."""
        raise _unimplemented(self, "buffer_from_host_buffer")

    @api("PJRT_Executable_DeserializeAndLoad")
    def deserialize_and_load(self, serialized: bytes) -> LoadedExecutable:
        raise _unimplemented(self, "deserialize_and_load")

    @api("PJRT_Client_CreateViewOfDeviceBuffer")
    def create_view_of_device_buffer(self, producer: Any, *, device: Device | None = None,
                                     on_delete: Callable[[], None] | None = None) -> Buffer:
        """Wrap existing memory (any DLPack producer here) as a buffer, without a copy."""
        raise _unimplemented(self, "create_view_of_device_buffer")

    @api("PJRT_Client_TopologyDescription")
    def topology_description(self) -> TopologyDescription:
        raise _unimplemented(self, "topology_description")

    @api("PJRT_Client_CreateUninitializedBuffer")
    def create_uninitialized_buffer(self, dims: Sequence[int], element_type: BufferType, *,
                                    device: Device | None = None, memory: Memory | None = None) -> Buffer:
        raise _unimplemented(self, "create_uninitialized_buffer")

    @api("PJRT_Client_Destroy")
    def destroy(self) -> None:
        """Release the client and everything it owns."""


class Api(PjrtObject):
    """``PJRT_Api``: what a plugin hands the host, the analogue of ``GetPjrtApi()``."""

    __slots__ = ()

    def api_version(self) -> "ApiVersion":
        """``PJRT_Api.pjrt_api_version``: the version the plugin was built against."""
        raise _unimplemented(self, "api_version")

    def extensions(self) -> Mapping[str, Any]:
        """The extension implementations the plugin offers, by extension name."""
        return {}

    @api("PJRT_Plugin_Initialize")
    def plugin_initialize(self) -> None:
        """One-time setup before any other call."""

    @api("PJRT_Plugin_Attributes")
    def plugin_attributes(self) -> dict[str, Any]:
        raise _unimplemented(self, "plugin_attributes")

    @api("PJRT_Client_Create")
    def client_create(self, options: NamedValues | None = None, *,
                      kv_store: KeyValueStore | None = None) -> Client:
        """Create a client. A process of a multi-process job passes ``node_id`` and
        ``num_nodes`` options and the job's ``kv_store``, through which the processes exchange
        their topologies."""
        raise _unimplemented(self, "client_create")

    @api("PJRT_TopologyDescription_Create")
    def topology_create(self, options: NamedValues | None = None) -> TopologyDescription:
        raise _unimplemented(self, "topology_create")

    @api("PJRT_TopologyDescription_Deserialize")
    def topology_deserialize(self, serialized: bytes) -> TopologyDescription:
        raise _unimplemented(self, "topology_deserialize")

    @api("PJRT_Compile")
    def compile(self, program: Program, topology: TopologyDescription,
                options: CompileOptions | bytes | None = None) -> Executable:
        """Compile without a client, for a topology (ahead-of-time)."""
        raise _unimplemented(self, "compile")
