"""PJRT_Client_*: the client, its devices and memories, compiling, and buffers from host memory."""

from __future__ import annotations

import ctypes
from typing import Any

from pjrt_hub.abi import HostBufferSemantics, InvalidArgument, Program, Unimplemented

from ..kv import CallerKeyValueStore
from ..library import decode_named_values
from ..structs import layout
from ._base import _Base, _buffer_type, _caller_release, _host_array, _is_text, encode_compile_options_default


class _ClientSlots(_Base):
    """The client functions of :class:`~.ServedApi`."""

    # -- client --------------------------------------------------------------------------------

    def _client(self, handle: int, what: str) -> Any:
        return self._handles.get(handle, "client", what)

    def _device_handle(self, device: Any) -> int:
        return self._handles.intern("device", device)

    def _memory_handle(self, memory: Any) -> int:
        return self._handles.intern("memory", memory, ctypes.addressof(self._memory_vtable))

    def _Client_Create(self, address: int) -> None:
        args = self._args(address, "PJRT_Client_Create_Args")
        options = decode_named_values(args.create_options, args.num_options, what="PJRT_Client_Create options",
                                      plugin=self.name) if args.num_options else {}
        store = self._caller_store(args)
        client = self.api.client_create(options) if store is None else self.api.client_create(options, kv_store=store)
        args.client = self._handles.intern("client", client)

    def _caller_store(self, args: Any) -> CallerKeyValueStore | None:
        """The caller's key-value callbacks as a store for the plugin; None when it gave none."""
        if not (args.kv_get_callback and args.kv_put_callback):
            return None
        try_get = try_get_arg = None
        if self._covers(args, "PJRT_Client_Create_Args", "kv_try_get_user_arg"):
            try_get, try_get_arg = args.kv_try_get_callback, args.kv_try_get_user_arg
        return CallerKeyValueStore(self.name, args.kv_get_callback, args.kv_get_user_arg, args.kv_put_callback,
                                   args.kv_put_user_arg, try_get, try_get_arg)

    def _Client_Destroy(self, address: int) -> None:
        args = self._args(address, "PJRT_Client_Destroy_Args")
        client = self._handles.drop(args.client, "client", "PJRT_Client_Destroy")
        if client is not None:
            client.destroy()

    def _Client_PlatformName(self, address: int) -> None:
        args = self._args(address, "PJRT_Client_PlatformName_Args")
        client = self._client(args.client, "PJRT_Client_PlatformName")
        name = self.platform_name or client.platform_name()
        args.platform_name, args.platform_name_size = self._string(("platform", args.client), name)

    def _Client_ProcessIndex(self, address: int) -> None:
        args = self._args(address, "PJRT_Client_ProcessIndex_Args")
        args.process_index = int(self._client(args.client, "PJRT_Client_ProcessIndex").process_index())

    def _Client_PlatformVersion(self, address: int) -> None:
        args = self._args(address, "PJRT_Client_PlatformVersion_Args")
        text = self._client(args.client, "PJRT_Client_PlatformVersion").platform_version()
        args.platform_version, args.platform_version_size = self._string(("platform_version", args.client), text)

    def _Client_Devices(self, address: int) -> None:
        args = self._args(address, "PJRT_Client_Devices_Args")
        devices = self._client(args.client, "PJRT_Client_Devices").devices()
        handles = [self._device_handle(d) for d in devices]
        args.devices = self._interned_array(("devices", args.client), handles)
        args.num_devices = len(handles)

    def _Client_AddressableDevices(self, address: int) -> None:
        args = self._args(address, "PJRT_Client_AddressableDevices_Args")
        devices = self._client(args.client, "PJRT_Client_AddressableDevices").addressable_devices()
        handles = [self._device_handle(d) for d in devices]
        args.addressable_devices = self._interned_array(("addressable_devices", args.client), handles)
        args.num_addressable_devices = len(handles)

    def _Client_LookupDevice(self, address: int) -> None:
        args = self._args(address, "PJRT_Client_LookupDevice_Args")
        device = self._client(args.client, "PJRT_Client_LookupDevice").lookup_device(args.id)
        args.device = self._device_handle(device)

    def _Client_LookupAddressableDevice(self, address: int) -> None:
        args = self._args(address, "PJRT_Client_LookupAddressableDevice_Args")
        client = self._client(args.client, "PJRT_Client_LookupAddressableDevice")
        args.addressable_device = self._device_handle(client.lookup_addressable_device(args.local_hardware_id))

    def _Client_AddressableMemories(self, address: int) -> None:
        args = self._args(address, "PJRT_Client_AddressableMemories_Args")
        memories = self._client(args.client, "PJRT_Client_AddressableMemories").addressable_memories()
        handles = [self._memory_handle(m) for m in memories]
        args.addressable_memories = self._interned_array(("memories", args.client), handles)
        args.num_addressable_memories = len(handles)

    def _Client_TopologyDescription(self, address: int) -> None:
        args = self._args(address, "PJRT_Client_TopologyDescription_Args")
        topology = self._client(args.client, "PJRT_Client_TopologyDescription").topology_description()
        args.topology = self._handles.intern("topology", topology)

    def _Client_DefaultDeviceAssignment(self, address: int) -> None:
        args = self._args(address, "PJRT_Client_DefaultDeviceAssignment_Args")
        client = self._client(args.client, "PJRT_Client_DefaultDeviceAssignment")
        replicas, partitions = args.num_replicas, args.num_partitions
        if replicas * partitions > args.default_assignment_size:
            raise InvalidArgument(
                f"PJRT_Client_DefaultDeviceAssignment: default_assignment_size {args.default_assignment_size} "
                f"is smaller than num_replicas * num_partitions = {replicas * partitions}")
        rows = client.default_device_assignment(replicas, partitions)
        out = (ctypes.c_int * (replicas * partitions)).from_address(args.default_assignment)
        for r, row in enumerate(rows):
            for p, device_id in enumerate(row):
                out[r * partitions + p] = int(device_id)

    def _program(self, address: int, what: str, read: bool = True) -> Program:
        program = self._args(address, "PJRT_Program")
        fmt = ctypes.string_at(program.format, program.format_size).decode() if program.format else ""
        code = ctypes.string_at(program.code, program.code_size) if program.code_size else b""
        if read and fmt == "mlir" and self.program_reader is not None and not _is_text(code):
            return Program(self.program_reader(code), fmt)
        return Program(code, fmt)

    def _Client_Compile(self, address: int) -> None:
        args = self._args(address, "PJRT_Client_Compile_Args")
        client = self._client(args.client, "PJRT_Client_Compile")
        if not args.program:
            raise InvalidArgument("PJRT_Client_Compile: the program is NULL")
        hook = self.compile_hook
        program = self._program(args.program, "PJRT_Client_Compile", read=hook is None)
        options = ctypes.string_at(args.compile_options, args.compile_options_size) \
            if args.compile_options_size else encode_compile_options_default()
        loaded = client.compile(program, options) if hook is None else hook(client, program, options)
        args.executable = self._loaded_handle(loaded, options)

    def _Client_BufferFromHostBuffer(self, address: int) -> None:
        args = self._args(address, "PJRT_Client_BufferFromHostBuffer_Args")
        what = "PJRT_Client_BufferFromHostBuffer"
        client = self._client(args.client, what)
        kind = _buffer_type(args.type, what)
        dims = self._int64s(args.dims, args.num_dims, f"{what}: dims")
        strides = self._int64s(args.byte_strides, args.num_byte_strides, f"{what}: byte_strides") \
            if args.byte_strides else None
        semantics = HostBufferSemantics(args.host_buffer_semantics)
        if self._covers(args, "PJRT_Client_BufferFromHostBuffer_Args", "device_layout") and args.device_layout:
            self._check_dense_layout(args.device_layout, len(dims), f"{what}: device_layout")
        # The view is writable for numpy (numba's fast dispatch knows only writable arrays); the
        # runtime keeps an immutable zero-copy buffer from ever being written (no donation into it).
        array = _host_array(args.data, kind, dims, strides, writable=True, what=what)
        device = self._handles.get(args.device, "device", what) if args.device else None
        memory = None
        if self._covers(args, "PJRT_Client_BufferFromHostBuffer_Args", "memory") and args.memory:
            memory = self._handles.get(args.memory, "memory", what)
        kwargs: dict[str, Any] = {"semantics": semantics, "element_type": kind}
        if memory is not None:
            kwargs["memory"] = memory
        if device is not None:
            kwargs["device"] = device
        transfer = client.buffer_from_host_buffer(array, **kwargs)
        args.buffer = self._handles.new("buffer", transfer.buffer)
        args.done_with_host_buffer = self._handles.new("event", transfer.done_with_host_buffer)

    def _check_dense_layout(self, address: int, ndim: int, what: str) -> None:
        memory_layout = layout("PJRT_Buffer_MemoryLayout").ctype.from_address(address)
        if memory_layout.type != 0:
            raise Unimplemented(f"{what}: only dense row-major (tiled, no tiles) layouts are supported")
        order = self._int64s(memory_layout.minor_to_major, memory_layout.minor_to_major_size, what)
        if order and order != tuple(range(ndim - 1, -1, -1)) or memory_layout.num_tiles:
            raise Unimplemented(f"{what}: layout minor_to_major={list(order)} with {memory_layout.num_tiles} "
                                "tiles; only the dense row-major layout is supported")

    def _Client_CreateUninitializedBuffer(self, address: int) -> None:
        args = self._args(address, "PJRT_Client_CreateUninitializedBuffer_Args")
        what = "PJRT_Client_CreateUninitializedBuffer"
        client = self._client(args.client, what)
        dims = self._int64s(args.shape_dims, args.shape_num_dims, what)
        kwargs = {}
        if args.device:
            kwargs["device"] = self._handles.get(args.device, "device", what)
        if args.memory:
            kwargs["memory"] = self._handles.get(args.memory, "memory", what)
        buffer = client.create_uninitialized_buffer(dims, _buffer_type(args.shape_element_type, what), **kwargs)
        args.buffer = self._handles.new("buffer", buffer)

    def _Client_CreateViewOfDeviceBuffer(self, address: int) -> None:
        args = self._args(address, "PJRT_Client_CreateViewOfDeviceBuffer_Args")
        what = "PJRT_Client_CreateViewOfDeviceBuffer"
        client = self._client(args.client, what)
        kind = _buffer_type(args.element_type, what)
        dims = self._int64s(args.dims, args.num_dims, what)
        if args.layout:
            self._check_dense_layout(args.layout, len(dims), f"{what}: layout")
        device = self._handles.get(args.device, "device", what) if args.device else None
        if device is None and self._covers(args, "PJRT_Client_CreateViewOfDeviceBuffer_Args", "memory") \
                and args.memory:
            # 0.66 names the memory instead of the device: the view lives on the memory's device.
            devices = self._handles.get(args.memory, "memory", what).addressable_by_devices()
            device = devices[0] if devices else None
        array = _host_array(args.device_buffer_ptr, kind, dims, None, writable=True, what=what)
        on_delete = _caller_release(args.on_delete_callback, args.device_buffer_ptr, args.on_delete_callback_arg) \
            if args.on_delete_callback else None
        buffer = client.create_view_of_device_buffer(array, device=device, on_delete=on_delete)
        args.buffer = self._handles.new("buffer", buffer)

    def _Executable_DeserializeAndLoad(self, address: int) -> None:
        args = self._args(address, "PJRT_Executable_DeserializeAndLoad_Args")
        client = self._client(args.client, "PJRT_Executable_DeserializeAndLoad")
        data = ctypes.string_at(args.serialized_executable, args.serialized_executable_size)
        loaded = client.deserialize_and_load(data)
        args.loaded_executable = self._loaded_handle(loaded, b"")

    def _Client_Load(self, address: int) -> None:
        args = self._args(address, "PJRT_Client_Load_Args")
        client = self._client(args.client, "PJRT_Client_Load")
        executable = self._handles.get(args.executable, "executable", "PJRT_Client_Load")
        load = getattr(client, "load", None)
        if load is None:
            raise Unimplemented(f"PJRT_Client_Load: plugin {self.name!r} cannot load an executable compiled "
                                "ahead of time")
        args.loaded_executable = self._loaded_handle(load(executable.obj), executable.options)
