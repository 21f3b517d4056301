"""``PJRT_Executable`` and ``PJRT_LoadedExecutable``: compiled programs, their queries, and execution.

``execute`` reuses the Args structs and pointer arrays of each (devices, arguments) shape, so the
per-call work is filling in handles and one call into the plugin."""

from __future__ import annotations

import ctypes
import weakref
from typing import TYPE_CHECKING, Any, Sequence

from pjrt_hub.abi import (
    Buffer,
    BufferType,
    CompiledMemoryStats,
    Device,
    Executable,
    ExecuteOptions,
    ExecuteResult,
    InvalidArgument,
    LoadedExecutable,
    Program,
    Unimplemented,
    decode_compile_options,
)

from .buffers import CBuffer, _device_handle
from .handles import _event, _Handle, _Owned
from .library import (
    PluginLibrary,
    decode_named_values,
    pointer_array,
    read_pointers,
    read_string,
    unpack_int64s,
    void_fn,
)
from .structs import layout

if TYPE_CHECKING:
    from .client import CClient


# -- executables -----------------------------------------------------------------------------


class CExecutable(_Handle, Executable):
    """``PJRT_Executable``: owned (from ``GetExecutable`` or ``PJRT_Compile``).

    One from ``GetExecutable`` borrows from its loaded executable (XLA's 0.81 plugin segfaults when
    it is queried after the loaded one is gone), so it keeps that one alive, and the loaded one
    destroys its derived executables before itself.
    """

    __slots__ = ("_lib", "_client", "_loaded")

    def __init__(self, lib: PluginLibrary, handle: int, client: "CClient | None",
                 loaded: "CLoadedExecutable | None" = None) -> None:
        self._lib = lib
        self._client = client
        self._loaded = loaded
        owner = client._owner if client is not None else None
        self._owned = _Owned(lib, handle, "PJRT_Executable_Destroy", "PJRT_Executable_Destroy_Args",
                             "executable", owner, 1)

    def _query(self, fn: str, out: str) -> Any:
        args = self._lib.args(fn + "_Args", executable=self._live(fn))
        self._lib.call(fn, args)
        return getattr(args, out)

    def _string(self, fn: str, out: str) -> str:
        args = self._lib.args(fn + "_Args", executable=self._live(fn))
        self._lib.call(fn, args)
        return read_string(getattr(args, out), getattr(args, out + "_size"))

    def name(self) -> str:
        return self._string("PJRT_Executable_Name", "executable_name")

    def num_replicas(self) -> int:
        return self._query("PJRT_Executable_NumReplicas", "num_replicas")

    def num_partitions(self) -> int:
        return self._query("PJRT_Executable_NumPartitions", "num_partitions")

    def num_outputs(self) -> int:
        return self._query("PJRT_Executable_NumOutputs", "num_outputs")

    def size_of_generated_code_in_bytes(self) -> int:
        return self._query("PJRT_Executable_SizeOfGeneratedCodeInBytes", "size_in_bytes")

    def fingerprint(self) -> str:
        return self._string("PJRT_Executable_Fingerprint", "executable_fingerprint")

    def get_cost_analysis(self) -> dict[str, Any]:
        args = self._lib.args("PJRT_Executable_GetCostAnalysis_Args", executable=self._live("cost analysis"))
        self._lib.call("PJRT_Executable_GetCostAnalysis", args)
        return decode_named_values(args.properties, args.num_properties,
                                   what="PJRT_Executable_GetCostAnalysis", plugin=self._lib.name)

    def output_memory_kinds(self) -> list[str]:
        args = self._lib.args("PJRT_Executable_OutputMemoryKinds_Args",
                              executable=self._live("output_memory_kinds"))
        self._lib.call("PJRT_Executable_OutputMemoryKinds", args)
        kinds = read_pointers(args.memory_kinds, args.num_outputs)
        sizes = (ctypes.c_size_t * args.num_outputs).from_address(args.memory_kind_sizes) \
            if args.num_outputs else ()
        return [read_string(k, s) for k, s in zip(kinds, sizes)]

    def output_element_types(self) -> list[BufferType]:
        args = self._lib.args("PJRT_Executable_OutputElementTypes_Args",
                              executable=self._live("output_element_types"))
        self._lib.call("PJRT_Executable_OutputElementTypes", args)
        if not args.num_output_types:
            return []
        raw = (ctypes.c_int32 * args.num_output_types).from_address(args.output_types)
        return [BufferType(v) for v in raw]

    def output_dimensions(self) -> list[tuple[int, ...]]:
        args = self._lib.args("PJRT_Executable_OutputDimensions_Args",
                              executable=self._live("output_dimensions"))
        self._lib.call("PJRT_Executable_OutputDimensions", args)
        if not args.num_outputs:
            return []
        sizes = list((ctypes.c_size_t * args.num_outputs).from_address(args.dim_sizes))
        flat = unpack_int64s(args.dims, sum(sizes))
        out, pos = [], 0
        for size in sizes:
            out.append(tuple(flat[pos:pos + size]))
            pos += size
        return out

    def get_compiled_memory_stats(self) -> CompiledMemoryStats:
        args = self._lib.args("PJRT_Executable_GetCompiledMemoryStats_Args",
                              executable=self._live("get_compiled_memory_stats"))
        self._lib.call("PJRT_Executable_GetCompiledMemoryStats", args)
        known = {f.name for f in layout("PJRT_Executable_GetCompiledMemoryStats_Args").fields
                 if f.since <= self._lib.minor}
        values = {name: getattr(args, name) for name in CompiledMemoryStats.__dataclass_fields__
                  if name in known}
        return CompiledMemoryStats(**values)

    def optimized_program(self) -> Program:
        lib = self._lib
        program = lib.args("PJRT_Program")
        args = lib.args("PJRT_Executable_OptimizedProgram_Args", executable=self._live("optimized_program"),
                        program=ctypes.addressof(program))
        lib.call("PJRT_Executable_OptimizedProgram", args)
        code = ctypes.create_string_buffer(max(1, program.code_size))
        program.code = ctypes.addressof(code)
        lib.call("PJRT_Executable_OptimizedProgram", args)
        fmt = read_string(program.format, program.format_size) or "hlo"
        return Program(code.raw[:program.code_size], fmt)

    def serialize(self) -> bytes:
        args = self._lib.args("PJRT_Executable_Serialize_Args", executable=self._live("serialize"))
        self._lib.call("PJRT_Executable_Serialize", args)
        try:
            return ctypes.string_at(args.serialized_bytes, args.serialized_bytes_size)
        finally:
            if args.serialized_executable_deleter and args.serialized_executable:
                void_fn(args.serialized_executable_deleter)(args.serialized_executable)

    def __repr__(self) -> str:
        return f"<CExecutable {self._owned.handle:#x} of {self._lib.name}>"


class CExecuteContext(_Handle):
    """``PJRT_ExecuteContext``: owned; carries FFI user data (``FFI.user_data_add``) into executions.

    It belongs to no client. Memory handed to the plugin as user data is held here until the
    context is destroyed, since the plugin may read it in any execution until then.
    """

    __slots__ = ("_lib", "_kept")

    def __init__(self, lib: PluginLibrary, handle: int) -> None:
        self._lib = lib
        self._kept: list[Any] = []
        self._owned = _Owned(lib, handle, "PJRT_ExecuteContext_Destroy", "PJRT_ExecuteContext_Destroy_Args",
                             "context", None, 3)

    def _hold(self, *objects: Any) -> None:
        self._kept.extend(o for o in objects if o is not None)

    def destroy(self) -> None:
        super().destroy()
        self._kept.clear()

    def __repr__(self) -> str:
        return f"<CExecuteContext {self._owned.handle:#x} of {self._lib.name}>"


class _ExecutePlan:
    """The structs of one ``PJRT_LoadedExecutable_Execute`` shape, built once and reused."""

    __slots__ = ("rows", "row_addresses", "outer", "out_rows", "out_outer", "events", "options",
                 "args", "address", "num_devices", "num_args", "num_outputs", "fn")

    def __init__(self, lib: PluginLibrary, executable: int, num_devices: int, num_args: int,
                 num_outputs: int) -> None:
        self.num_devices, self.num_args, self.num_outputs = num_devices, num_args, num_outputs
        self.rows = [(ctypes.c_void_p * max(1, num_args))() for _ in range(num_devices)]
        self.outer = pointer_array(ctypes.addressof(r) for r in self.rows)
        self.out_rows = [(ctypes.c_void_p * max(1, num_outputs))() for _ in range(num_devices)]
        self.out_outer = pointer_array(ctypes.addressof(r) for r in self.out_rows)
        self.events = (ctypes.c_void_p * max(1, num_devices))()
        self.options = lib.args("PJRT_ExecuteOptions")
        self.args = lib.args("PJRT_LoadedExecutable_Execute_Args", executable=executable,
                             options=ctypes.addressof(self.options),
                             argument_lists=ctypes.addressof(self.outer), num_devices=num_devices,
                             num_args=num_args, output_lists=ctypes.addressof(self.out_outer),
                             device_complete_events=ctypes.addressof(self.events))
        self.address = ctypes.addressof(self.args)
        self.fn = lib.function("PJRT_LoadedExecutable_Execute")


class CLoadedExecutable(_Handle, LoadedExecutable):
    """``PJRT_LoadedExecutable``: owned; runs on the client's devices."""

    __slots__ = ("_client", "_num_outputs", "_plans", "_derived")

    def __init__(self, client: "CClient", handle: int) -> None:
        self._client = client
        self._derived: weakref.WeakSet[CExecutable] = weakref.WeakSet()
        self._owned = _Owned(client._lib, handle, "PJRT_LoadedExecutable_Destroy",
                             "PJRT_LoadedExecutable_Destroy_Args", "executable", client._owner, 1)
        self._num_outputs: int | None = None
        self._plans: dict[tuple[int, int], list[_ExecutePlan]] = {}

    def get_executable(self) -> CExecutable:
        lib = self._client._lib
        args = lib.args("PJRT_LoadedExecutable_GetExecutable_Args", loaded_executable=self._live("get_executable"))
        lib.call("PJRT_LoadedExecutable_GetExecutable", args)
        executable = CExecutable(lib, args.executable, self._client, self)
        self._derived.add(executable)
        return executable

    def destroy(self) -> None:
        for executable in list(self._derived):
            executable.destroy()
        super().destroy()

    def num_outputs(self) -> int:
        if self._num_outputs is None:
            exe = self.get_executable()
            try:
                self._num_outputs = exe.num_outputs()
            finally:
                exe.destroy()
        return self._num_outputs

    def addressable_devices(self) -> list[Device]:
        lib = self._client._lib
        args = lib.args("PJRT_LoadedExecutable_AddressableDevices_Args", executable=self._live("addressable_devices"))
        lib.call("PJRT_LoadedExecutable_AddressableDevices", args)
        return [self._client._device(h) for h in read_pointers(args.addressable_devices,
                                                               args.num_addressable_devices)]

    def delete(self) -> None:
        lib = self._client._lib
        lib.call("PJRT_LoadedExecutable_Delete",
                 lib.args("PJRT_LoadedExecutable_Delete_Args", executable=self._live("delete")))

    def cancel(self) -> None:
        """A C plugin's executions cannot be stopped: PJRT's C API has no call for it.

        ``ExecuteOptions.timeout`` is ignored here for the same reason; ``Event.await_(timeout)``
        still bounds the wait (``pjrt-hub run --timeout`` leaves such an execution running).
        """
        raise Unimplemented(f"LoadedExecutable.cancel: the PJRT C API has no way to stop an execution, "
                            f"so {self._client._lib.name}'s cannot be cancelled; bound the wait with "
                            f"Event.await_(timeout) instead", plugin=self._client._lib.name)

    def is_deleted(self) -> bool:
        lib = self._client._lib
        args = lib.args("PJRT_LoadedExecutable_IsDeleted_Args", executable=self._live("is_deleted"))
        lib.call("PJRT_LoadedExecutable_IsDeleted", args)
        return bool(args.is_deleted)

    def fingerprint(self) -> str:
        lib = self._client._lib
        args = lib.args("PJRT_LoadedExecutable_Fingerprint_Args", executable=self._live("fingerprint"))
        lib.call("PJRT_LoadedExecutable_Fingerprint", args)
        return read_string(args.executable_fingerprint, args.executable_fingerprint_size)

    def get_device_assignment(self) -> tuple[tuple[int, ...], ...]:
        lib = self._client._lib
        args = lib.args("PJRT_LoadedExecutable_GetDeviceAssignment_Args",
                        executable=self._live("get_device_assignment"))
        lib.call("PJRT_LoadedExecutable_GetDeviceAssignment", args)
        try:
            proto = ctypes.string_at(args.serialized_bytes, args.serialized_bytes_size)
        finally:
            if args.serialized_device_assignment_deleter and args.serialized_device_assignment:
                void_fn(args.serialized_device_assignment_deleter)(args.serialized_device_assignment)
        # A DeviceAssignmentProto is field 9 of ExecutableBuildOptionsProto, itself field 3 of
        # CompileOptionsProto: wrap it and let the abi codec read it.
        build = b"\x4a" + _varint(len(proto)) + proto
        wrapped = b"\x1a" + _varint(len(build)) + build
        assignment = decode_compile_options(wrapped).device_assignment
        return assignment or ()

    def execute(self, argument_lists: Sequence[Sequence[Buffer]], options: ExecuteOptions | None = None,
                execute_device: Device | None = None) -> ExecuteResult:
        lib = self._client._lib
        handle = self._live("execute")
        num_devices = len(argument_lists)
        if num_devices == 0:
            raise InvalidArgument("execute: argument_lists is empty; give one argument list per device")
        num_args = len(argument_lists[0])
        key = (num_devices, num_args)
        pool = self._plans.setdefault(key, [])
        plan = pool.pop() if pool else _ExecutePlan(lib, handle, num_devices, num_args, self.num_outputs())
        try:
            for d, (row, buffers) in enumerate(zip(plan.rows, argument_lists)):
                if len(buffers) != num_args:
                    raise InvalidArgument(f"execute: argument list {d} has {len(buffers)} buffers, "
                                          f"list 0 has {num_args}")
                for i, buf in enumerate(buffers):
                    if not isinstance(buf, CBuffer) or buf._client is not self._client:
                        raise InvalidArgument(f"execute: argument {i} of device {d} is {buf!r}, "
                                              "not a buffer of this executable's client")
                    row[i] = buf._live(f"execute argument {i} of device {d}")
            keep = self._set_options(plan, options, execute_device, num_devices)
            err = plan.fn(plan.address)
            del keep
            if err:
                raise lib.error(err, "PJRT_LoadedExecutable_Execute")
            client, owner = self._client, self._client._owner
            # A NULL output (a broken plugin) becomes a dead handle, refused when used.
            outputs: list[list[Buffer]] = [[CBuffer(client, h or 0) for h in out_row[:plan.num_outputs]]
                                           for out_row in plan.out_rows]
            events = [_event(lib, plan.events[d], owner) for d in range(num_devices)]
            return ExecuteResult(outputs, events)
        finally:
            for row in plan.rows:
                for i in range(num_args):
                    row[i] = None
            pool.append(plan)

    def _set_options(self, plan: _ExecutePlan, options: ExecuteOptions | None, execute_device: Device | None,
                     num_devices: int) -> Any:
        opts = plan.options
        plan.args.execute_device = _device_handle(execute_device, "execute", self._client)
        if execute_device is not None and num_devices != 1:
            raise InvalidArgument(f"execute: execute_device needs exactly one argument list, got {num_devices}")
        if options is None or options == _DEFAULT_EXECUTE_OPTIONS:
            opts.launch_id = 0
            opts.non_donatable_input_indices = None
            opts.num_non_donatable_input_indices = 0
            return None
        opts.launch_id = options.launch_id
        indices = options.non_donatable_input_indices
        array = (ctypes.c_int64 * max(1, len(indices)))(*indices)
        opts.non_donatable_input_indices = ctypes.addressof(array) if indices else None
        opts.num_non_donatable_input_indices = len(indices)
        return array

    def __repr__(self) -> str:
        return f"<CLoadedExecutable {self._owned.handle:#x} of {self._client._lib.name}>"


_DEFAULT_EXECUTE_OPTIONS = ExecuteOptions()


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)
