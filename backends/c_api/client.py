"""``PJRT_Client`` and ``PJRT_TopologyDescription``: compile, transfer from the host, devices and topology."""

from __future__ import annotations

import ctypes
from typing import Any, Callable, Sequence

import numpy as np

from pjrt_hub.abi import (
    Buffer,
    BufferType,
    Client,
    CompileError,
    CompileOptions,
    Device,
    DeviceDescription,
    ErrorCode,
    FailedPrecondition,
    HostBufferSemantics,
    HostTransfer,
    InvalidArgument,
    Memory,
    PjrtError,
    Program,
    TopologyDescription,
    Unimplemented,
    encode_compile_options,
    from_numpy_dtype,
    to_numpy_dtype,
)

from .buffers import CBuffer, _device_handle, _memory_handle
from .devices import CDevice, CDeviceDescription, CMemory, _int_query, _string_query
from .executables import CLoadedExecutable
from .handles import _ON_DELETE_ADDRESS, _close_quietly, _event, _keep_until_ready, _lend, _Owned, _Owner, _unlend
from .library import PluginLibrary, decode_named_values, read_pointers, void_fn

#: ``PJRT_HostBufferSemantics_kMutableZeroCopy`` arrived at 0.48.
MUTABLE_ZERO_COPY_SINCE = 48


# -- topology --------------------------------------------------------------------------------


class CTopologyDescription(TopologyDescription):
    """``PJRT_TopologyDescription``: owned when created by the API, borrowed from a client."""

    __slots__ = ("_lib", "_handle", "_owned", "_owner", "__weakref__")

    def __init__(self, lib: PluginLibrary, handle: int, owner: Any = None, owned: bool = False) -> None:
        self._lib, self._handle, self._owner = lib, handle, owner
        self._owned = _Owned(lib, handle, "PJRT_TopologyDescription_Destroy",
                             "PJRT_TopologyDescription_Destroy_Args", "topology", None, 3) if owned else None

    @property
    def handle(self) -> int:
        return self._handle

    def _live(self, what: str) -> int:
        """The handle, once the topology (or the client it is borrowed from) is known to be alive."""
        if self._owned is not None and not self._owned.alive:
            raise FailedPrecondition(f"{what}: the topology description was destroyed")
        if self._owner is not None:
            self._owner._live(f"{what} (of the client's topology)")
        return self._handle

    def _string(self, fn: str, out: str) -> str:
        return _string_query(self._lib, fn, "topology", self._live(out), out, out + "_size")

    def platform_name(self) -> str:
        return self._string("PJRT_TopologyDescription_PlatformName", "platform_name")

    def platform_version(self) -> str:
        return self._string("PJRT_TopologyDescription_PlatformVersion", "platform_version")

    def get_device_descriptions(self) -> list[DeviceDescription]:
        args = self._lib.args("PJRT_TopologyDescription_GetDeviceDescriptions_Args",
                              topology=self._live("get_device_descriptions"))
        self._lib.call("PJRT_TopologyDescription_GetDeviceDescriptions", args)
        return [CDeviceDescription(self._lib, h, self)
                for h in read_pointers(args.descriptions, args.num_descriptions)]

    def serialize(self) -> bytes:
        args = self._lib.args("PJRT_TopologyDescription_Serialize_Args", topology=self._live("serialize"))
        self._lib.call("PJRT_TopologyDescription_Serialize", args)
        try:
            return ctypes.string_at(args.serialized_bytes, args.serialized_bytes_size)
        finally:
            if args.serialized_topology_deleter and args.serialized_topology:
                void_fn(args.serialized_topology_deleter)(args.serialized_topology)

    def attributes(self) -> dict[str, Any]:
        args = self._lib.args("PJRT_TopologyDescription_Attributes_Args", topology=self._live("attributes"))
        self._lib.call("PJRT_TopologyDescription_Attributes", args)
        return decode_named_values(args.attributes, args.num_attributes,
                                   what="PJRT_TopologyDescription_Attributes", plugin=self._lib.name)

    def destroy(self) -> None:
        if self._owned is not None:
            self._owned.close()

    def __del__(self) -> None:
        owned = getattr(self, "_owned", None)
        if owned is not None:
            _close_quietly(owned)


# -- client ----------------------------------------------------------------------------------


def _program_structs(lib: PluginLibrary, program: Program) -> tuple[ctypes.Structure, list[Any]]:
    if not isinstance(program, Program):
        raise InvalidArgument(f"compile: expected a pjrt_hub.abi.Program, got {type(program).__name__}")
    code = program.data()
    fmt = program.format.encode()
    code_buf = ctypes.create_string_buffer(code, len(code))
    fmt_buf = ctypes.create_string_buffer(fmt, len(fmt))
    struct = lib.args("PJRT_Program", code=ctypes.addressof(code_buf), code_size=len(code),
                      format=ctypes.addressof(fmt_buf), format_size=len(fmt))
    return struct, [code_buf, fmt_buf]


def _compile_error(lib: PluginLibrary, err: int, c_function: str) -> PjrtError:
    """A failed compile as :class:`CompileError` (an InvalidArgument) with the plugin's message.

    XLA reports an unparsable program as UNKNOWN ("error: custom op ... is unknown"); pjrt-hub's
    error tree says a program that does not compile is an InvalidArgument, whatever the plugin
    called it. Other codes (Unimplemented, ResourceExhausted, Internal, ...) are kept.
    """
    exc = lib.error(err, c_function)
    if exc.code not in (ErrorCode.UNKNOWN, ErrorCode.INVALID_ARGUMENT):
        return exc
    compile_error = CompileError(exc.message, plugin=lib.name)
    compile_error.plugin_code = exc.code
    compile_error.c_function = c_function
    compile_error.add_note(f"from {c_function} of plugin {lib.name!r} (PJRT C API {lib.version}), "
                           f"which reported it as {exc.code.name}")
    return compile_error


def _options_bytes(options: CompileOptions | bytes | None) -> bytes:
    if options is None:
        return encode_compile_options(CompileOptions())
    if isinstance(options, CompileOptions):
        return encode_compile_options(options)
    if isinstance(options, (bytes, bytearray, memoryview)):
        return bytes(options)
    raise InvalidArgument(f"compile: options must be CompileOptions or serialized bytes, "
                          f"got {type(options).__name__}")


class CClient(Client):
    """``PJRT_Client``: owns buffers, executables and events created through it."""

    __slots__ = ("_lib", "_owner", "_devices", "_memories", "__weakref__")

    def __init__(self, lib: PluginLibrary, handle: int) -> None:
        self._lib = lib
        self._owner = _Owner(lib, handle)
        self._devices: dict[int, CDevice] = {}
        self._memories: dict[int, CMemory] = {}

    @property
    def handle(self) -> int:
        return self._owner.handle

    def _live(self, what: str) -> int:
        handle = self._owner.handle
        if not handle:
            raise FailedPrecondition(f"{what}: the client was destroyed")
        return handle

    def _device(self, handle: int) -> CDevice:
        device = self._devices.get(handle)
        if device is None:
            device = self._devices[handle] = CDevice(self, handle)
        return device

    def _memory(self, handle: int) -> CMemory:
        memory = self._memories.get(handle)
        if memory is None:
            memory = self._memories[handle] = CMemory(self, handle)
        return memory

    def _string(self, fn: str, out: str) -> str:
        return _string_query(self._lib, fn, "client", self._live(fn), out, out + "_size")

    def platform_name(self) -> str:
        return self._string("PJRT_Client_PlatformName", "platform_name")

    def platform_version(self) -> str:
        return self._string("PJRT_Client_PlatformVersion", "platform_version")

    def process_index(self) -> int:
        return _int_query(self._lib, "PJRT_Client_ProcessIndex", "client", self._live("process_index"),
                          "process_index")

    def devices(self) -> list[Device]:
        args = self._lib.args("PJRT_Client_Devices_Args", client=self._live("devices"))
        self._lib.call("PJRT_Client_Devices", args)
        return [self._device(h) for h in read_pointers(args.devices, args.num_devices)]

    def addressable_devices(self) -> list[Device]:
        args = self._lib.args("PJRT_Client_AddressableDevices_Args", client=self._live("addressable_devices"))
        self._lib.call("PJRT_Client_AddressableDevices", args)
        return [self._device(h) for h in read_pointers(args.addressable_devices, args.num_addressable_devices)]

    def lookup_device(self, device_id: int) -> Device:
        args = self._lib.args("PJRT_Client_LookupDevice_Args", client=self._live("lookup_device"), id=device_id)
        self._lib.call("PJRT_Client_LookupDevice", args)
        return self._device(args.device)

    def lookup_addressable_device(self, local_hardware_id: int) -> Device:
        args = self._lib.args("PJRT_Client_LookupAddressableDevice_Args",
                              client=self._live("lookup_addressable_device"), local_hardware_id=local_hardware_id)
        self._lib.call("PJRT_Client_LookupAddressableDevice", args)
        return self._device(args.addressable_device)

    def addressable_memories(self) -> list[Memory]:
        args = self._lib.args("PJRT_Client_AddressableMemories_Args", client=self._live("addressable_memories"))
        self._lib.call("PJRT_Client_AddressableMemories", args)
        return [self._memory(h) for h in read_pointers(args.addressable_memories, args.num_addressable_memories)]

    def default_device_assignment(self, num_replicas: int, num_partitions: int) -> tuple[tuple[int, ...], ...]:
        if num_replicas < 1 or num_partitions < 1:
            raise InvalidArgument(f"default_device_assignment: num_replicas={num_replicas} and "
                                  f"num_partitions={num_partitions} must be >= 1")
        total = num_replicas * num_partitions
        out = (ctypes.c_int * total)()
        args = self._lib.args("PJRT_Client_DefaultDeviceAssignment_Args",
                              client=self._live("default_device_assignment"), num_replicas=num_replicas,
                              num_partitions=num_partitions, default_assignment_size=total,
                              default_assignment=ctypes.addressof(out))
        self._lib.call("PJRT_Client_DefaultDeviceAssignment", args)
        flat = list(out)
        return tuple(tuple(flat[r * num_partitions:(r + 1) * num_partitions]) for r in range(num_replicas))

    def topology_description(self) -> CTopologyDescription:
        handle = _int_query(self._lib, "PJRT_Client_TopologyDescription", "client",
                            self._live("topology_description"), "topology")
        return CTopologyDescription(self._lib, handle, owner=self, owned=False)

    def compile(self, program: Program, options: CompileOptions | bytes | None = None) -> CLoadedExecutable:
        lib = self._lib
        fn = lib.function("PJRT_Client_Compile")
        prog, keep = _program_structs(lib, program)
        opts = _options_bytes(options)
        opts_buf = ctypes.create_string_buffer(opts, max(1, len(opts)))
        args = lib.args("PJRT_Client_Compile_Args", client=self._live("compile"), program=ctypes.addressof(prog),
                        compile_options=ctypes.addressof(opts_buf), compile_options_size=len(opts))
        err = fn(ctypes.addressof(args))
        del keep
        if err:
            raise _compile_error(lib, err, "PJRT_Client_Compile")
        return CLoadedExecutable(self, args.executable)

    def deserialize_and_load(self, serialized: bytes) -> CLoadedExecutable:
        data = bytes(serialized)
        buf = ctypes.create_string_buffer(data, max(1, len(data)))
        args = self._lib.args("PJRT_Executable_DeserializeAndLoad_Args", client=self._live("deserialize_and_load"),
                              serialized_executable=ctypes.addressof(buf), serialized_executable_size=len(data))
        self._lib.call("PJRT_Executable_DeserializeAndLoad", args)
        return CLoadedExecutable(self, args.loaded_executable)

    def buffer_from_host_buffer(
        self,
        array: np.ndarray,
        *,
        device: Device | None = None,
        memory: Memory | None = None,
        semantics: HostBufferSemantics = HostBufferSemantics.IMMUTABLE_ONLY_DURING_CALL,
        element_type: BufferType | None = None,
    ) -> HostTransfer:
        lib = self._lib
        fn = lib.function("PJRT_Client_BufferFromHostBuffer")
        try:
            semantics = HostBufferSemantics(semantics)
        except ValueError:
            raise InvalidArgument(f"buffer_from_host_buffer: {semantics!r} is not a host buffer semantics",
                                  plugin=lib.name) from None
        if semantics == HostBufferSemantics.MUTABLE_ZERO_COPY and lib.minor < MUTABLE_ZERO_COPY_SINCE:
            raise Unimplemented(f"buffer_from_host_buffer: kMutableZeroCopy was added in PJRT C API "
                                f"0.{MUTABLE_ZERO_COPY_SINCE}; plugin {lib.name!r} implements {lib.version}",
                                plugin=lib.name)
        host = np.asarray(array)
        kind = from_numpy_dtype(host.dtype.newbyteorder("=")) if element_type is None else BufferType(element_type)
        if element_type is not None and to_numpy_dtype(kind).itemsize != host.dtype.itemsize:
            raise InvalidArgument(f"buffer_from_host_buffer: element_type {kind.name} does not match the "
                                  f"array's {host.dtype} ({host.dtype.itemsize} bytes per element)")
        zero_copy = semantics in (HostBufferSemantics.IMMUTABLE_ZERO_COPY, HostBufferSemantics.MUTABLE_ZERO_COPY)
        copied = not (host.flags.c_contiguous and host.flags.aligned and host.dtype.isnative)
        if copied:
            # A plugin reads dense, aligned, native-order memory: views with strides, unaligned and
            # big-endian arrays are copied (np.ascontiguousarray would also turn 0-d into 1-d).
            # The zero-copy semantics allow aliasing without demanding it, so they hold for the
            # copy: the plugin may alias it (the bridge keeps it alive), and the caller's array
            # is the caller's again when the call returns.
            host = np.array(host, dtype=host.dtype.newbyteorder("="), order="C")
        memory_handle = _memory_handle(memory, "buffer_from_host_buffer", self)
        if device is None and memory is None:
            device = self.addressable_devices()[0]
        dims = (ctypes.c_int64 * max(1, host.ndim))(*host.shape)
        args = lib.args("PJRT_Client_BufferFromHostBuffer_Args", client=self._live("buffer_from_host_buffer"),
                        data=host.ctypes.data or None, type=int(kind), dims=ctypes.addressof(dims),
                        num_dims=host.ndim, host_buffer_semantics=int(semantics),
                        device=_device_handle(device, "buffer_from_host_buffer", self),
                        memory=memory_handle or None)
        lib.check(fn(ctypes.addressof(args)), "PJRT_Client_BufferFromHostBuffer")
        buffer = CBuffer(self, args.buffer, host if zero_copy else None)
        done = args.done_with_host_buffer
        if done and semantics != HostBufferSemantics.IMMUTABLE_ONLY_DURING_CALL:
            _keep_until_ready(lib, done, host)
        plugin_done = _event(lib, done, self._owner)
        # A copied array was the caller's again when the call returned: the plugin's event is the copy's.
        return HostTransfer(buffer, _event(lib, None, self._owner) if copied else plugin_done)

    def create_uninitialized_buffer(self, dims: Sequence[int], element_type: BufferType, *,
                                    device: Device | None = None, memory: Memory | None = None) -> CBuffer:
        if device is None and memory is None:
            device = self.addressable_devices()[0]
        shape = (ctypes.c_int64 * max(1, len(dims)))(*dims)
        args = self._lib.args("PJRT_Client_CreateUninitializedBuffer_Args",
                              client=self._live("create_uninitialized_buffer"), shape_dims=ctypes.addressof(shape),
                              shape_num_dims=len(dims), shape_element_type=int(BufferType(element_type)),
                              device=_device_handle(device, "create_uninitialized_buffer", self),
                              memory=_memory_handle(memory, "create_uninitialized_buffer", self) or None)
        self._lib.call("PJRT_Client_CreateUninitializedBuffer", args)
        return CBuffer(self, args.buffer)

    def create_view_of_device_buffer(self, producer: Any, *, device: Device | None = None,
                                     on_delete: Callable[[], None] | None = None) -> Buffer:
        """A buffer over the memory of ``producer`` (a numpy array or a DLPack producer in host
        memory, what a plugin whose devices are the host can address), without a copy.

        The memory stays the caller's: the array is kept alive until the plugin's
        ``on_delete_callback`` says it no longer uses it, and ``on_delete`` runs then, once."""
        what = "create_view_of_device_buffer"
        array = producer
        if not isinstance(array, np.ndarray):
            if not hasattr(producer, "__dlpack__"):
                raise InvalidArgument(f"{what}: {type(producer).__name__} is neither a numpy array nor a DLPack "
                                      "producer")
            try:
                array = np.from_dlpack(producer)
            except (BufferError, TypeError, RuntimeError) as exc:
                raise InvalidArgument(f"{what}: the C bridge views host memory only; the DLPack producer "
                                      f"{type(producer).__name__} gave none ({exc})") from None
        if not (array.flags.c_contiguous and array.flags.aligned and array.dtype.isnative):
            raise InvalidArgument(f"{what}: the memory must be a dense row-major, aligned array in native byte "
                                  f"order, got {array.dtype.str}{list(array.shape)} with strides {list(array.strides)}")
        kind = from_numpy_dtype(array.dtype)
        if device is None:
            device = self.addressable_devices()[0]
        dims = (ctypes.c_int64 * max(1, array.ndim))(*array.shape)
        token = _lend(array, on_delete)
        args = self._lib.args("PJRT_Client_CreateViewOfDeviceBuffer_Args", client=self._live(what),
                              device_buffer_ptr=array.ctypes.data or None, dims=ctypes.addressof(dims),
                              num_dims=array.ndim, element_type=int(kind),
                              device=_device_handle(device, what, self), on_delete_callback=_ON_DELETE_ADDRESS,
                              on_delete_callback_arg=token)
        try:
            self._lib.call("PJRT_Client_CreateViewOfDeviceBuffer", args)
        except BaseException:
            _unlend(token)
            raise
        return CBuffer(self, args.buffer)

    def destroy(self) -> None:
        """Destroy what is left of the client's buffers, executables and events, then the client."""
        self._owner.close()

    def __repr__(self) -> str:
        return f"<CClient {self._owner.handle:#x} of {self._lib.name}>"
