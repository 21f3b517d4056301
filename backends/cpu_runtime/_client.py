"""``PJRT_Client`` in host memory: devices, compilation, and buffers from host arrays and DLPack.

One re-entrant lock per client guards every buffer's state and every memory's accounting: the
critical sections are a few attribute updates, so one lock costs less than many, and re-entrancy
keeps a buffer finalizer that runs inside a critical section (garbage collection can strike
anywhere) from deadlocking.

Zero-copy rule (``IMMUTABLE_ZERO_COPY`` and ``MUTABLE_ZERO_COPY``): the buffer aliases the host
array when the array is C-contiguous, naturally aligned (its address a multiple of the element
size, numpy's ``aligned`` flag) and in native byte order; otherwise the data is copied, as PJRT
allows. Natural alignment is all numpy and numba kernels need; XLA asks 64 bytes because its
vectorised code does. Without a copy, ``done_with_host_buffer`` fires when the buffer is deleted,
destroyed or garbage collected, or when an execution that took it by donation lets go of it (and
not before pending executions and DLPack consumers that read it are done). Donation writes into
an aliased host array only under ``MUTABLE_ZERO_COPY`` and only if the array is writable; under
``IMMUTABLE_ZERO_COPY`` the donated buffer is consumed but its storage never written.

Copies to the device a buffer is already on are allowed (XLA's CPU client once refused them, with
a note to lift the restriction); they make an independent buffer.
"""

from __future__ import annotations

import threading
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from pjrt_hub.abi import (
    Buffer,
    BufferType,
    Client,
    CompileError,
    CompileOptions,
    Device,
    FailedPrecondition,
    HostBufferSemantics,
    HostTransfer,
    InvalidArgument,
    LoadedExecutable,
    Memory,
    PjrtError,
    Program,
    ResourceExhausted,
    TopologyDescription,
    decode_compile_options,
    to_numpy_dtype,
)

from ._buffers import CpuBuffer, layout_of
from ._devices import CpuDevice, CpuMemory, RemoteCpuDevice
from ._events import READY, CpuEvent
from .helper_thread import split_copy
from ._collectives import DEFAULT_COLLECTIVE_TIMEOUT, Rendezvous
from ._executables import (
    CpuExecutable,
    CpuLoadedExecutable,
    InlinePolicy,
    cost_figures,
    deserialize_executable,
    resolve_replication,
)
from ._topology import CpuDeviceDescription, CpuTopologyDescription
from .compiler import ProgramCompiler

__all__ = ["CpuClient", "compile_program", "default_assignment"]

_ZERO_COPY = (HostBufferSemantics.IMMUTABLE_ZERO_COPY, HostBufferSemantics.MUTABLE_ZERO_COPY)


class CpuClient(Client):
    """``PJRT_Client`` over N CPU devices sharing the host's memory."""

    __slots__ = ("_compiler", "_topology", "_devices", "_device_by_id", "_lock", "_asynchronous",
                 "_inline_policy", "_destroyed", "_rendezvous", "_collective_timeout", "_remote",
                 "_all_devices", "_process_index", "_node_of_device", "_engine", "__weakref__")

    def __init__(self, compiler: ProgramCompiler, topology: CpuTopologyDescription, *,
                 asynchronous: bool = True, inline_policy: InlinePolicy | None = None,
                 collective_timeout: float = DEFAULT_COLLECTIVE_TIMEOUT,
                 remote: Sequence[CpuDeviceDescription] = (), process_index: int = 0,
                 engine: Any = None) -> None:
        self._compiler = compiler
        self._topology = topology
        self._lock = threading.RLock()
        self._asynchronous = asynchronous
        self._inline_policy = inline_policy or InlinePolicy()
        self._destroyed = False
        #: Where this client's devices meet at collectives, and how long they wait there.
        self._rendezvous = Rendezvous()
        self._collective_timeout = float(collective_timeout)
        count = topology.num_devices
        self._devices = tuple(CpuDevice(self, description, count) for description in topology.descriptions)
        self._device_by_id = {device.id: device for device in self._devices}
        # The devices of the other processes of a job (none in a single-process client).
        self._process_index = process_index
        self._remote = tuple(RemoteCpuDevice(d) for d in remote)
        self._all_devices: tuple[CpuDevice | RemoteCpuDevice, ...] = tuple(sorted((*self._devices, *self._remote), key=lambda d: d.id))
        self._node_of_device = {d.id: d.get_description().process_index() for d in self._all_devices}
        #: The engine for collectives that span processes (None in a single-process client).
        self._engine = engine

    # -- identity and devices --------------------------------------------------------------------

    def platform_name(self) -> str:
        return self._topology.platform_name()

    def process_index(self) -> int:
        return self._process_index

    def platform_version(self) -> str:
        return self._topology.platform_version()

    def devices(self) -> list[Device]:
        return list(self._all_devices)

    def addressable_devices(self) -> list[Device]:
        return list(self._devices)

    def lookup_device(self, device_id: int) -> Device:
        device = next((d for d in self._all_devices if d.id == device_id), None) if _is_int(device_id) else None
        if device is None:
            raise InvalidArgument(f"No matching device found for device_id {device_id}")
        return device

    def lookup_addressable_device(self, local_hardware_id: int) -> Device:
        device = self._device_by_id.get(local_hardware_id) if _is_int(local_hardware_id) else None
        if device is None:
            raise InvalidArgument(f"No matching device found for local_hardware_id {local_hardware_id}")
        return device

    def addressable_memories(self) -> list[Memory]:
        return [memory for device in self._devices for memory in device._memories]

    def topology_description(self) -> TopologyDescription:
        return self._topology

    def default_device_assignment(self, num_replicas: int, num_partitions: int) -> tuple[tuple[int, ...], ...]:
        return default_assignment(num_replicas, num_partitions, len(self._all_devices))

    # -- compilation -----------------------------------------------------------------------------

    def compile(self, program: Program, options: CompileOptions | bytes | None = None) -> LoadedExecutable:
        self._check_alive("PJRT_Client_Compile")
        options = _compile_options(options)
        executable = compile_program(self._compiler, program, options, len(self._all_devices))
        return self._load(executable)

    def deserialize_and_load(self, serialized: bytes) -> LoadedExecutable:
        self._check_alive("PJRT_Executable_DeserializeAndLoad")
        return self._load(deserialize_executable(serialized, self._compiler))

    def load(self, executable: CpuExecutable) -> CpuLoadedExecutable:
        """Load an executable compiled ahead of time (``Api.compile``) onto this client's devices."""
        if not isinstance(executable, CpuExecutable):
            raise InvalidArgument(f"load: expected an executable of a pjrt-hub CPU runtime, got {executable!r}")
        if executable._compiler_name != self._compiler.name:
            raise InvalidArgument(
                f"load: the executable was compiled by {executable._compiler_name!r}; "
                f"this client compiles with {self._compiler.name!r}"
            )
        return self._load(executable)

    def _load(self, executable: CpuExecutable) -> CpuLoadedExecutable:
        replicas, partitions = executable._num_replicas, executable._num_partitions
        assignment = executable._assignment
        if assignment is None:
            assignment = default_assignment(replicas, partitions, len(self._all_devices))
        else:
            _check_assignment(assignment, replicas, partitions, self._node_of_device)
        flops, accessed = cost_figures(executable._program, executable._inputs, executable._outputs)
        # A program with a loop that may run long or forever runs on the worker even when its
        # cost figures say cheap (they count a loop body once), so that execute returns and
        # the caller can wait with a timeout, or cancel it.
        short = (self._inline_policy.allows(flops, accessed)
                 and not getattr(executable._program, "unbounded_loops", False))
        inline = not self._asynchronous or short
        return CpuLoadedExecutable(executable, self, assignment, inline, short=short)

    # -- buffers ---------------------------------------------------------------------------------

    def _memory_for(self, device: Device | None, memory: Memory | None, action: str) -> CpuMemory:
        if memory is not None:
            if not isinstance(memory, CpuMemory) or memory._device._client is not self:
                raise InvalidArgument(f"{action}: {memory!r} is not a memory of this client")
            if device is not None and memory._device is not device:
                raise InvalidArgument(
                    f"{action}: memory {memory.to_string()} belongs to {memory._device._label}, "
                    f"not to the requested device {getattr(device, '_label', device)!r}"
                )
            return memory
        if device is None:
            return self._devices[0]._memories[0]
        if not isinstance(device, CpuDevice) or device._client is not self:
            raise InvalidArgument(f"{action}: {device!r} is not a device of this client")
        return device._memories[0]

    def buffer_from_host_buffer(
        self,
        array: np.ndarray,
        *,
        device: Device | None = None,
        memory: Memory | None = None,
        semantics: HostBufferSemantics = HostBufferSemantics.IMMUTABLE_ONLY_DURING_CALL,
        element_type: BufferType | None = None,
    ) -> HostTransfer:
        action = "PJRT_Client_BufferFromHostBuffer"
        self._check_alive(action)
        target = self._memory_for(device, memory, action)
        try:
            semantics = HostBufferSemantics(semantics)
        except ValueError:
            raise InvalidArgument(
                f"{action}: unknown host buffer semantics {semantics!r}; expected one of "
                + ", ".join(f"{s.name} ({s.value})" for s in HostBufferSemantics)
            ) from None
        if not isinstance(array, np.ndarray):
            try:
                array = np.asarray(array)
            except Exception as exc:  # noqa: BLE001 - anything numpy cannot read is a bad argument
                raise InvalidArgument(f"{action}: cannot read {type(array).__name__} as an array: {exc}") from None
        if not array.dtype.isnative:
            array = array.astype(array.dtype.newbyteorder("="))
        layout = layout_of(array.shape, array.dtype)
        if element_type is not None:
            try:
                requested = BufferType(element_type)
            except ValueError:
                raise InvalidArgument(f"{action}: unknown element_type {element_type!r}") from None
            if requested != layout.element_type:
                raise InvalidArgument(
                    f"{action}: element_type {requested.name} does not match the host array's dtype "
                    f"{array.dtype} ({layout.element_type.name}); convert the array first"
                )
        flags = array.flags
        if semantics in _ZERO_COPY and flags.c_contiguous and flags.aligned:
            done = CpuEvent()
            mutable = semantics == HostBufferSemantics.MUTABLE_ZERO_COPY and bool(flags.writeable)
            buffer = CpuBuffer._make(target, layout, array, READY, 0, mutable, _setter(done))
            return HostTransfer(buffer, done)
        # The copy happens during the call for every other case, so the host array is free at once
        # (IMMUTABLE_UNTIL_TRANSFER_COMPLETES included: its transfer is complete on return).
        try:
            copy = np.empty(array.shape, array.dtype)
        except MemoryError:
            raise ResourceExhausted(f"PJRT_Client_BufferFromHostBuffer: cannot allocate {layout.nbytes} bytes of "
                                    f"host memory for a {layout.text} buffer") from None
        split_copy(copy, array)
        with self._lock:
            target._alloc(layout.nbytes)
        return HostTransfer(CpuBuffer._make(target, layout, copy, READY, layout.nbytes, True), READY)

    def create_uninitialized_buffer(self, dims: Sequence[int], element_type: BufferType, *,
                                    device: Device | None = None, memory: Memory | None = None) -> Buffer:
        action = "PJRT_Client_CreateUninitializedBuffer"
        self._check_alive(action)
        target = self._memory_for(device, memory, action)
        shape = tuple(dims)
        if not all(_is_int(d) and d >= 0 for d in shape):
            raise InvalidArgument(f"{action}: dimensions must be non-negative ints, got {list(dims)}")
        layout = layout_of(shape, to_numpy_dtype(element_type))
        array = np.empty(shape, layout.dtype)
        with self._lock:
            target._alloc(layout.nbytes)
        return CpuBuffer._make(target, layout, array, READY, layout.nbytes, True)

    def create_view_of_device_buffer(self, producer: Any, *, device: Device | None = None,
                                     on_delete: Callable[[], None] | None = None) -> Buffer:
        action = "PJRT_Client_CreateViewOfDeviceBuffer"
        self._check_alive(action)
        target = self._memory_for(device, None, action)
        if on_delete is not None and not callable(on_delete):
            raise InvalidArgument(f"{action}: on_delete must be callable, got {on_delete!r}")
        if not hasattr(producer, "__dlpack__"):
            raise InvalidArgument(
                f"{action}: {type(producer).__name__} is not a DLPack producer (it has no __dlpack__)"
            )
        try:
            array = np.from_dlpack(producer)
        except Exception as exc:  # noqa: BLE001 - the producer's own error says what is wrong
            raise InvalidArgument(f"{action}: cannot view the {type(producer).__name__}: {exc}") from None
        if not array.flags.c_contiguous:
            raise InvalidArgument(
                f"{action}: a view needs dense row-major storage; the producer's {array.dtype} "
                f"array of shape {array.shape} has strides {array.strides}"
            )
        layout = layout_of(array.shape, array.dtype)
        return CpuBuffer._make(target, layout, array, READY, 0, bool(array.flags.writeable), on_delete)

    # -- life cycle ------------------------------------------------------------------------------

    def _check_alive(self, action: str) -> None:
        if self._destroyed:
            raise FailedPrecondition(f"{action}: the client was destroyed")

    def destroy(self) -> None:
        """Finish the queued work and stop the device threads."""
        self._destroyed = True
        for device in self._devices:
            device._worker.stop(wait=True)

    def __del__(self) -> None:
        try:
            for device in self._devices:
                device._worker.stop(wait=False)
        except Exception:  # noqa: BLE001 - finalizers must not raise
            pass

    def __repr__(self) -> str:
        return (f"<CpuClient {self.platform_name()} x{len(self._devices)} "
                f"compiler={self._compiler.name}{' (destroyed)' if self._destroyed else ''}>")


def _setter(event: CpuEvent) -> Callable[[], None]:
    def fire() -> None:
        event.set()

    return fire


def _is_int(value: Any) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, bool)


def _compile_options(options: Any) -> CompileOptions:
    if options is not None and not isinstance(options, (CompileOptions, bytes, bytearray, memoryview)):
        raise InvalidArgument(
            "PJRT_Client_Compile: options must be CompileOptions, a serialized CompileOptionsProto "
            f"or None, got {type(options).__name__}"
        )
    if isinstance(options, (bytearray, memoryview)):
        options = bytes(options)
    return decode_compile_options(options)


def _check_option_names(compiler: ProgramCompiler, options: CompileOptions) -> None:
    """Refuse an option override nobody takes, as XLA does (a typo must not pass silently).

    Taken are the compiler's own (``option_names``) and XLA's ``xla_*`` debug options, which
    frameworks send to every plugin (JAX: ``xla_cpu_enable_fast_min_max``) and which a pjrt-hub
    backend, not being XLA, ignores without reading their values."""
    own = tuple(getattr(compiler, "option_names", ()))
    for name in options.env_option_overrides:
        if not (name.startswith("xla_") or name in own):
            taken = f"{compiler.name} takes {', '.join(own)}" if own else f"{compiler.name} takes none of its own"
            raise InvalidArgument(f"No such compile option: '{name}' ({taken}; XLA's xla_* options are accepted "
                                  "and ignored)")


def compile_program(compiler: ProgramCompiler, program: Program, options: CompileOptions,
                    num_devices: int) -> CpuExecutable:
    """Compile ``program`` with ``compiler`` into an executable for ``num_devices`` devices."""
    if not isinstance(program, Program):
        raise InvalidArgument(
            f"PJRT_Client_Compile: expected a Program (code and format), got {type(program).__name__}"
        )
    if program.format != "mlir":
        raise InvalidArgument(f"Unknown program format '{program.format}'.")
    _check_option_names(compiler, options)
    try:
        compiled = compiler.compile(program.code, options)
    except PjrtError:
        raise
    except Exception as exc:  # noqa: BLE001 - a compiler bug still reaches the user as a compile error
        raise CompileError(f"{compiler.name} failed to compile the program: {type(exc).__name__}: {exc}",
                           plugin=compiler.name) from exc
    replicas, partitions = resolve_replication(compiled, options)
    if replicas * partitions > num_devices:
        raise InvalidArgument(
            f"{compiled.name} needs {replicas} replica(s) x {partitions} partition(s) = "
            f"{replicas * partitions} devices; there are {num_devices}"
        )
    assignment = options.device_assignment
    if assignment is not None:
        assignment = tuple(tuple(row) for row in assignment)
        _check_assignment(assignment, replicas, partitions, range(num_devices))
    return CpuExecutable(compiled, compiler_name=compiler.name, num_replicas=replicas,
                         num_partitions=partitions, device_assignment=assignment, code=program.code)


def default_assignment(num_replicas: int, num_partitions: int, num_devices: int) -> tuple[tuple[int, ...], ...]:
    """XLA's default placement: replica r of partition p on device ``p * num_replicas + r``."""
    for what, value in (("num_replicas", num_replicas), ("num_partitions", num_partitions)):
        if not _is_int(value) or value < 1:
            raise InvalidArgument(f"default device assignment: {what} must be a positive int, got {value!r}")
    if num_replicas * num_partitions > num_devices:
        raise InvalidArgument(
            f"default device assignment: {num_replicas} replica(s) x {num_partitions} partition(s) "
            f"need {num_replicas * num_partitions} devices; there are {num_devices}"
        )
    return tuple(tuple(p * num_replicas + r for p in range(num_partitions)) for r in range(num_replicas))


def _check_assignment(assignment: tuple[tuple[int, ...], ...], replicas: int, partitions: int,
                      known: Mapping[int, Any] | range) -> None:
    if len(assignment) != replicas or any(len(row) != partitions for row in assignment):
        raise InvalidArgument(
            f"device_assignment is {len(assignment)}x{len(assignment[0]) if assignment else 0} but the "
            f"executable has {replicas} replica(s) x {partitions} partition(s)"
        )
    seen: set[int] = set()
    for row in assignment:
        for device_id in row:
            if device_id not in known:
                raise InvalidArgument(f"No matching device found for device_id {device_id}")
            if device_id in seen:
                raise InvalidArgument(f"device_assignment uses device {device_id} twice: {assignment}")
            seen.add(device_id)
