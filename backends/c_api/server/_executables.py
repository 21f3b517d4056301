"""PJRT_Executable_*, PJRT_LoadedExecutable_* and PJRT_ExecuteContext_*: compiled programs and running them."""

from __future__ import annotations

import ctypes
from typing import Any

from pjrt_hub.abi import ExecuteOptions, InvalidArgument, Unimplemented
from pjrt_hub.abi.compile_options import encode_device_assignment

from .._native import TAG_EXECUTABLE
from ._base import _Base, _Entry, _Executable, _Loaded, _pointers


#: The executable methods behind the counts the fast paths give, in their slot order.
_COUNTS = ("num_replicas", "num_partitions", "num_outputs")


class _ExecutableSlots(_Base):
    """The executable functions of :class:`~.ServedApi`."""

    # -- executables ---------------------------------------------------------------------------

    def _loaded_handle(self, loaded: Any, options: bytes) -> int:
        return self._handles.new("loaded", _Loaded(loaded, _Executable(None, options)))

    def _loaded(self, handle: int, what: str) -> _Loaded:
        return self._handles.get(handle, "loaded", what)

    def _executable_entry(self, handle: int, what: str) -> _Entry:
        return self._handles.entry(handle, "executable", what)

    def _executable(self, handle: int, what: str) -> Any:
        return self._handles.get(handle, "executable", what).obj

    def _LoadedExecutable_Destroy(self, address: int) -> None:
        args = self._args(address, "PJRT_LoadedExecutable_Destroy_Args")
        loaded = self._handles.drop(args.executable, "loaded", "PJRT_LoadedExecutable_Destroy")
        if loaded is not None:
            loaded.obj.destroy()

    def _LoadedExecutable_GetExecutable(self, address: int) -> None:
        args = self._args(address, "PJRT_LoadedExecutable_GetExecutable_Args")
        loaded = self._loaded(args.loaded_executable, "PJRT_LoadedExecutable_GetExecutable")
        info = loaded.executable
        if info.obj is None:
            info.obj = loaded.obj.get_executable()
        args.executable = self._handles.new("executable", info)

    def _LoadedExecutable_AddressableDevices(self, address: int) -> None:
        args = self._args(address, "PJRT_LoadedExecutable_AddressableDevices_Args")
        entry = self._handles.entry(args.executable, "loaded", "PJRT_LoadedExecutable_AddressableDevices")
        handles = [self._device_handle(d) for d in entry.obj.obj.addressable_devices()]
        args.addressable_devices = self._pointer_array(entry, "addressable_devices", handles)
        args.num_addressable_devices = len(handles)

    def _LoadedExecutable_AddressableDeviceLogicalIds(self, address: int) -> None:
        args = self._args(address, "PJRT_LoadedExecutable_AddressableDeviceLogicalIds_Args")
        entry = self._handles.entry(args.executable, "loaded", "PJRT_LoadedExecutable_AddressableDeviceLogicalIds")
        loaded = entry.obj.obj
        assignment = loaded.get_device_assignment()
        where = {int(device_id): (r, p) for r, row in enumerate(assignment) for p, device_id in enumerate(row)}
        pairs = []
        for device in loaded.addressable_devices():
            replica, partition = where.get(int(device.get_description().id()), (0, 0))
            pairs += [replica, partition]
        array = entry.keep("logical_ids", (ctypes.c_int * max(2, len(pairs)))(*pairs))
        args.addressable_device_logical_ids = ctypes.addressof(array)
        args.num_addressable_device_logical_ids = len(pairs) // 2

    def _LoadedExecutable_Delete(self, address: int) -> None:
        args = self._args(address, "PJRT_LoadedExecutable_Delete_Args")
        self._loaded(args.executable, "PJRT_LoadedExecutable_Delete").obj.delete()

    def _LoadedExecutable_IsDeleted(self, address: int) -> None:
        args = self._args(address, "PJRT_LoadedExecutable_IsDeleted_Args")
        args.is_deleted = bool(self._loaded(args.executable, "PJRT_LoadedExecutable_IsDeleted").obj.is_deleted())

    def _LoadedExecutable_Fingerprint(self, address: int) -> None:
        args = self._args(address, "PJRT_LoadedExecutable_Fingerprint_Args")
        entry = self._handles.entry(args.executable, "loaded", "PJRT_LoadedExecutable_Fingerprint")
        text = entry.obj.obj.fingerprint()
        args.executable_fingerprint, args.executable_fingerprint_size = self._owned_string(entry, "fp", text)

    def _LoadedExecutable_GetDeviceAssignment(self, address: int) -> None:
        args = self._args(address, "PJRT_LoadedExecutable_GetDeviceAssignment_Args")
        loaded = self._loaded(args.executable, "PJRT_LoadedExecutable_GetDeviceAssignment").obj
        proto = encode_device_assignment(tuple(tuple(int(d) for d in row) for row in loaded.get_device_assignment()))
        self._serialized(proto, args, "serialized_bytes", "serialized_bytes_size", "serialized_device_assignment",
                         "serialized_device_assignment_deleter")

    def _LoadedExecutable_Execute(self, address: int) -> None:
        args = self._args(address, "PJRT_LoadedExecutable_Execute_Args")
        what = "PJRT_LoadedExecutable_Execute"
        info = self._loaded(args.executable, what)
        num_devices, num_args = args.num_devices, args.num_args
        get_buffer = self._handles.entries.get
        argument_lists = []
        outer = _pointers(num_devices).from_address(args.argument_lists) if num_devices else ()
        row_type = _pointers(num_args)
        argument_handles: list[Any] = []
        for d in range(num_devices):
            row: ctypes.Array[ctypes.c_void_p] | tuple[()] = ()
            if num_args:
                row_address = outer[d]
                if not row_address:
                    raise InvalidArgument(f"{what}: the argument list of device {d} is NULL")
                row = row_type.from_address(row_address)
            buffers = []
            for i, handle in enumerate(row):
                entry = get_buffer(handle or 0)
                if entry is None or entry.kind != "buffer":  # entry() raises, naming what the handle is
                    entry = self._handles.entry(handle, "buffer", f"{what}: argument {i} of device {d}")
                buffers.append(entry.obj)
            argument_lists.append(buffers)
            argument_handles.append(row)
        options = None
        if args.options:
            opts = self._args(args.options, "PJRT_ExecuteOptions")
            indices: tuple[int, ...] = ()
            if self._covers(opts, "PJRT_ExecuteOptions", "num_non_donatable_input_indices"):
                indices = self._int64s(opts.non_donatable_input_indices, opts.num_non_donatable_input_indices,
                                       f"{what}: non_donatable_input_indices")
            if opts.launch_id or indices:
                options = ExecuteOptions(launch_id=int(opts.launch_id), non_donatable_input_indices=indices)
        execute_device = None
        if self._covers(args, "PJRT_LoadedExecutable_Execute_Args", "execute_device") and args.execute_device:
            execute_device = self._device(args.execute_device, what)
        result = info.obj.execute(argument_lists, options, execute_device)
        handles = self._handles
        if self._ready_event:
            # Donated arguments are deleted now: their ready events are no longer "ready".
            for inputs, input_handles in zip(argument_lists, argument_handles):
                for buffer, input_handle in zip(inputs, input_handles):
                    if buffer.is_deleted():
                        handles.forget(input_handle or 0)
        outputs = result.outputs
        new = handles.new
        ready = self._ready_event
        out_outer = _pointers(num_devices).from_address(args.output_lists) if num_devices else ()
        for d, buffers in enumerate(outputs):
            if not buffers:
                continue
            out_address = out_outer[d]
            if not out_address:
                raise InvalidArgument(f"{what}: the output list of device {d} is NULL")
            out_row = _pointers(len(buffers)).from_address(out_address)
            for i, buffer in enumerate(buffers):
                handle = out_row[i] = new("buffer", buffer)
                if ready:
                    event = buffer.ready_event()
                    self._memo_buffer(handle, buffer, ready=event.is_ready() and event.error() is None)
        if args.device_complete_events:
            events = _pointers(num_devices).from_address(args.device_complete_events)
            for d, event in enumerate(result.device_complete_events):
                if ready and event.is_ready() and event.error() is None:
                    event.destroy()  # the caller gets the server's ready event instead
                    events[d] = ready
                else:
                    events[d] = new("event", event)

    def _Executable_Destroy(self, address: int) -> None:
        args = self._args(address, "PJRT_Executable_Destroy_Args")
        self._handles.drop(args.executable, "executable", "PJRT_Executable_Destroy")

    def _Executable_Name(self, address: int) -> None:
        args = self._args(address, "PJRT_Executable_Name_Args")
        entry = self._executable_entry(args.executable, "PJRT_Executable_Name")
        args.executable_name, args.executable_name_size = self._owned_string(entry, "name", entry.obj.obj.name())

    def _Executable_NumReplicas(self, address: int) -> None:
        args = self._args(address, "PJRT_Executable_NumReplicas_Args")
        args.num_replicas = self._count(args.executable, "PJRT_Executable_NumReplicas", 0)

    def _Executable_NumPartitions(self, address: int) -> None:
        args = self._args(address, "PJRT_Executable_NumPartitions_Args")
        args.num_partitions = self._count(args.executable, "PJRT_Executable_NumPartitions", 1)

    def _Executable_NumOutputs(self, address: int) -> None:
        args = self._args(address, "PJRT_Executable_NumOutputs_Args")
        args.num_outputs = self._count(args.executable, "PJRT_Executable_NumOutputs", 2)

    def _count(self, handle: int, what: str, index: int) -> int:
        """One of an executable's replica, partition and output counts. All three are then given
        for this handle by the native fast paths (a framework asks for them on every execute)."""
        executable = self._executable(handle, what)
        if self._ready_event:
            try:
                counts = [int(getattr(executable, name)()) for name in _COUNTS]
            except Exception:  # noqa: BLE001 - then Python keeps answering, each count with its own error
                pass
            else:
                self._handles.memo(handle, TAG_EXECUTABLE, *counts)
                return counts[index]
        return int(getattr(executable, _COUNTS[index])())

    def _Executable_SizeOfGeneratedCodeInBytes(self, address: int) -> None:
        args = self._args(address, "PJRT_Executable_SizeOfGeneratedCodeInBytes_Args")
        executable = self._executable(args.executable, "PJRT_Executable_SizeOfGeneratedCodeInBytes")
        args.size_in_bytes = int(executable.size_of_generated_code_in_bytes())

    def _Executable_GetCostAnalysis(self, address: int) -> None:
        args = self._args(address, "PJRT_Executable_GetCostAnalysis_Args")
        entry = self._executable_entry(args.executable, "PJRT_Executable_GetCostAnalysis")
        values = entry.keep("cost", self._named_values(
            {k: float(v) for k, v in entry.obj.obj.get_cost_analysis().items()}, "PJRT_Executable_GetCostAnalysis"))
        args.num_properties = values.count
        args.properties = values.address or None

    def _Executable_OutputMemoryKinds(self, address: int) -> None:
        args = self._args(address, "PJRT_Executable_OutputMemoryKinds_Args")
        entry = self._executable_entry(args.executable, "PJRT_Executable_OutputMemoryKinds")
        kinds = [k.encode() for k in entry.obj.obj.output_memory_kinds()]
        bufs = [ctypes.create_string_buffer(k, max(1, len(k))) for k in kinds]
        pointers = (ctypes.c_void_p * max(1, len(bufs)))(*[ctypes.addressof(b) for b in bufs])
        sizes = (ctypes.c_size_t * max(1, len(bufs)))(*[len(k) for k in kinds])
        entry.keep("memory_kinds", (bufs, pointers, sizes))
        args.num_outputs = len(kinds)
        args.memory_kinds = ctypes.addressof(pointers)
        args.memory_kind_sizes = ctypes.addressof(sizes)

    def _Executable_OutputElementTypes(self, address: int) -> None:
        args = self._args(address, "PJRT_Executable_OutputElementTypes_Args")
        entry = self._executable_entry(args.executable, "PJRT_Executable_OutputElementTypes")
        types = [int(t) for t in entry.obj.obj.output_element_types()]
        array = entry.keep("output_types", (ctypes.c_int32 * max(1, len(types)))(*types))
        args.output_types = ctypes.addressof(array)
        args.num_output_types = len(types)

    def _Executable_OutputDimensions(self, address: int) -> None:
        args = self._args(address, "PJRT_Executable_OutputDimensions_Args")
        entry = self._executable_entry(args.executable, "PJRT_Executable_OutputDimensions")
        shapes = [tuple(int(d) for d in s) for s in entry.obj.obj.output_dimensions()]
        flat = [d for s in shapes for d in s]
        dims = (ctypes.c_int64 * max(1, len(flat)))(*flat)
        sizes = (ctypes.c_size_t * max(1, len(shapes)))(*[len(s) for s in shapes])
        entry.keep("output_dims", (dims, sizes))
        args.num_outputs = len(shapes)
        args.dims = ctypes.addressof(dims)
        args.dim_sizes = ctypes.addressof(sizes)

    def _Executable_Fingerprint(self, address: int) -> None:
        args = self._args(address, "PJRT_Executable_Fingerprint_Args")
        entry = self._executable_entry(args.executable, "PJRT_Executable_Fingerprint")
        args.executable_fingerprint, args.executable_fingerprint_size = self._owned_string(
            entry, "fp", entry.obj.obj.fingerprint())

    def _Executable_OptimizedProgram(self, address: int) -> None:
        args = self._args(address, "PJRT_Executable_OptimizedProgram_Args")
        entry = self._executable_entry(args.executable, "PJRT_Executable_OptimizedProgram")
        program = entry.obj.obj.optimized_program()
        data = program.data()
        target = self._args(args.program, "PJRT_Program")
        target.format, target.format_size = self._string(("program format", program.format), program.format)
        if not target.code:
            target.code_size = len(data)
            return
        if target.code_size < len(data):
            raise InvalidArgument(f"PJRT_Executable_OptimizedProgram: code_size {target.code_size} is smaller "
                                  f"than the program's {len(data)} bytes")
        ctypes.memmove(target.code, data, len(data))
        target.code_size = len(data)

    def _Executable_Serialize(self, address: int) -> None:
        args = self._args(address, "PJRT_Executable_Serialize_Args")
        data = self._executable(args.executable, "PJRT_Executable_Serialize").serialize()
        self._serialized(data, args, "serialized_bytes", "serialized_bytes_size", "serialized_executable",
                         "serialized_executable_deleter")

    def _Executable_GetCompiledMemoryStats(self, address: int) -> None:
        args = self._args(address, "PJRT_Executable_GetCompiledMemoryStats_Args")
        stats = self._executable(args.executable, "PJRT_Executable_GetCompiledMemoryStats").get_compiled_memory_stats()
        for name, value in stats.as_dict().items():
            if hasattr(args, name) and self._covers(args, "PJRT_Executable_GetCompiledMemoryStats_Args", name):
                setattr(args, name, int(value))

    def _Executable_GetCompileOptions(self, address: int) -> None:
        args = self._args(address, "PJRT_Executable_GetCompileOptions_Args")
        info = self._handles.get(args.executable, "executable", "PJRT_Executable_GetCompileOptions")
        if not info.options:
            raise Unimplemented("PJRT_Executable_GetCompileOptions: this executable was not compiled through "
                                "this PJRT_Api, its options are not known")
        self._serialized(info.options, args, "serialized_bytes", "serialized_bytes_size",
                         "serialized_compile_options", "serialized_compile_options_deleter")

    def _ExecuteContext_Create(self, address: int) -> None:
        args = self._args(address, "PJRT_ExecuteContext_Create_Args")
        args.context = self._handles.new("context", None)

    def _ExecuteContext_Destroy(self, address: int) -> None:
        args = self._args(address, "PJRT_ExecuteContext_Destroy_Args")
        self._handles.drop(args.context, "context", "PJRT_ExecuteContext_Destroy")
