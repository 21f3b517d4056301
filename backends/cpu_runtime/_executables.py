"""Executables and the execute path: argument checks, donation, inline or worker execution.

Everything an execution checks that does not depend on the arguments is computed once, when the
executable is loaded (:class:`_Plan`): argument layouts, which inputs are donated and which
output may take over each one's storage, whether the program is cheap enough to run inline.

An execution takes its arguments' storage under the client's lock, all replicas at once, so that
a bad argument anywhere leaves every buffer as it was. Then it runs, either inline on the calling
thread (cheap programs whose inputs are ready: a thread hand-off would cost more than the work,
the choice XLA's CPU client makes for programs under 1000 flops) or on each device's worker
thread. Outputs are returned at once either way, with one event per device; an exception inside
the program becomes an :class:`ExecutionError` on that event and on every output, never an
exception out of the worker.

A program whose loops may run long or forever (``unbounded_loops``: a ``while`` that is not a
short counted loop) never runs inline, so that ``execute`` returns at once and the caller can
wait with a timeout. A ``cancellable`` program (one with a ``while``) reads a cancel flag
(:mod:`._cancel`) at every iteration, which ``ExecuteOptions.timeout`` and
:meth:`CpuLoadedExecutable.cancel` set. A stopped execution is a failed one: its event and
outputs carry DeadlineExceeded or Cancelled, its donated inputs stay donated (their storage is
freed, as after any failed execution), and the device goes on with its next execution.

Results are checked against the declared outputs. A result that is an input, or a view of one,
is copied: two buffers must not share storage the runtime may later overwrite by donation. A
result the program still references (a constant it returns every time) is kept but marked as
not reusable in place.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import struct
import sys
import traceback
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence, cast

import numpy as np

from pjrt_hub.abi import (
    Buffer,
    BufferType,
    Cancelled,
    CompiledMemoryStats,
    CompileOptions,
    DeadlineExceeded,
    Device,
    Event,
    Executable,
    ExecuteOptions,
    ExecuteResult,
    ExecutionError,
    FailedPrecondition,
    InvalidArgument,
    LoadedExecutable,
    PjrtError,
    Program,
)

from ._buffers import DONATED, LIVE, CpuBuffer, Layout, Pending, layout_of
from ._cancel import CancelFlag, watch
from ._collectives import CollectiveRun, Participant, participating
from ._events import READY, CpuEvent, as_pjrt_error, failed_event
from ._fast import fast_execute
from .compiler import CompiledProgram

if TYPE_CHECKING:
    from ._client import CpuClient
    from ._devices import CpuDevice

__all__ = ["CpuExecutable", "CpuLoadedExecutable", "InlinePolicy"]

_MAGIC = b"pjrt_hub.cpu_executable\n"
_FORMAT_VERSION = 1



def _exclusive_refs() -> int:
    # The same expression as the check in ``_run_program``, on a list held by a local, so that
    # the count is right on any CPython version.
    results = [np.empty(0)]
    return sys.getrefcount(results[0])


#: References a result array has when only the runtime's results list holds it.
_EXCLUSIVE_REFS = _exclusive_refs()


@dataclass(frozen=True, slots=True)
class InlinePolicy:
    """Which programs run on the calling thread: both limits must hold.

    A hand-off to a worker thread costs tens of microseconds in Python; below these limits the
    work is shorter than that. Programs whose cost analysis lacks a figure are estimated from
    their argument and result sizes.
    """

    max_flops: float = 100_000
    max_bytes_accessed: float = 1 << 20

    def allows(self, flops: float, bytes_accessed: float) -> bool:
        return flops <= self.max_flops and bytes_accessed <= self.max_bytes_accessed


# -- the unloaded executable --------------------------------------------------------------------


def _layouts(specs: Sequence[Any], what: str, name: str) -> tuple[Layout, ...]:
    layouts = []
    for index, spec in enumerate(specs):
        try:
            layouts.append(layout_of(tuple(spec.shape), np.dtype(spec.dtype)))
        except PjrtError as exc:
            raise InvalidArgument(f"{name}: {what} {index} has no PJRT element type: {exc.message}") from None
    return tuple(layouts)


class CpuExecutable(Executable):
    """``PJRT_Executable``: a compiled program with its replica and partition counts."""

    __slots__ = ("_program", "_compiler_name", "_num_replicas", "_num_partitions", "_assignment",
                 "_code", "_inputs", "_outputs", "_aliases", "_donated", "_cost", "_collectives", "_fingerprint",
                 "__weakref__")

    def __init__(self, program: CompiledProgram, *, compiler_name: str, num_replicas: int = 1,
                 num_partitions: int = 1, device_assignment: tuple[tuple[int, ...], ...] | None = None,
                 code: bytes | str | None = None, fingerprint: str | None = None) -> None:
        self._program = program
        # A deserialized executable is the one that was serialized, and keeps its fingerprint:
        # the program a compiler reads back may carry another one (numba_cpu's eager tier
        # fingerprints the program text, its compiled module the generated code).
        self._fingerprint = fingerprint
        self._compiler_name = compiler_name
        self._num_replicas = num_replicas
        self._num_partitions = num_partitions
        self._assignment = device_assignment
        self._code = code
        name = program.name
        self._inputs = _layouts(program.inputs, "input", name)
        self._outputs = _layouts(program.outputs, "output", name)
        self._aliases, self._donated = _donation_of(program, self._inputs, self._outputs)
        self._cost: dict[str, Any] | None = None
        #: The program meets other processes (collectives, replica_id): its launches must run
        #: concurrently, each knowing which process it is.
        self._collectives = bool(getattr(program, "uses_collectives", False))

    @property
    def program(self) -> CompiledProgram:
        return self._program

    def name(self) -> str:
        return self._program.name

    def num_replicas(self) -> int:
        return self._num_replicas

    def num_partitions(self) -> int:
        return self._num_partitions

    def num_outputs(self) -> int:
        return len(self._outputs)

    def size_of_generated_code_in_bytes(self) -> int:
        return int(getattr(self._program, "generated_code_size_in_bytes", 0) or 0)

    def get_cost_analysis(self) -> dict[str, Any]:
        if self._cost is None:
            self._cost = {str(key): float(value) for key, value in self._program.cost_analysis().items()}
        return dict(self._cost)

    def output_memory_kinds(self) -> list[str]:
        return ["device"] * len(self._outputs)

    def optimized_program(self) -> Program:
        # The compilers here do not rewrite the program text, so the program is what was compiled.
        if self._code is None:
            raise FailedPrecondition(f"PJRT_Executable_OptimizedProgram: {self.name()} kept no program text")
        return Program(self._code, "mlir")

    def output_element_types(self) -> list[BufferType]:
        return [layout.element_type for layout in self._outputs]

    def output_dimensions(self) -> list[tuple[int, ...]]:
        return [layout.shape for layout in self._outputs]

    def fingerprint(self) -> str:
        if self._fingerprint:
            return self._fingerprint
        # The executable is the program and the replica and partition counts it runs with, which
        # a compiler need not read (numba_cpu makes the same code for one replica and for two);
        # PJRT's fingerprint is unique to the executable, so the counts go into it (XLA's too).
        key = f"{self._program.fingerprint}\0{self._num_replicas}\0{self._num_partitions}"
        return hashlib.sha256(key.encode()).hexdigest()

    def get_compiled_memory_stats(self) -> CompiledMemoryStats:
        arguments = sum(layout.nbytes for layout in self._inputs)
        outputs = sum(layout.nbytes for layout in self._outputs)
        alias = sum(self._outputs[out].nbytes for out in self._aliases.values())
        temp = int(getattr(self._program, "temp_size_in_bytes", 0) or 0)
        peak = arguments + outputs - alias + temp
        return CompiledMemoryStats(
            generated_code_size_in_bytes=self.size_of_generated_code_in_bytes(),
            argument_size_in_bytes=arguments, output_size_in_bytes=outputs, alias_size_in_bytes=alias,
            temp_size_in_bytes=temp, peak_memory_in_bytes=peak, total_size_in_bytes=peak,
        )

    def serialize(self) -> bytes:
        program = self._program.serialize()
        code = self._code.encode() if isinstance(self._code, str) else (self._code or b"")
        header = {
            "version": _FORMAT_VERSION,
            "compiler": self._compiler_name,
            "num_replicas": self._num_replicas,
            "num_partitions": self._num_partitions,
            "device_assignment": self._assignment,
            "fingerprint": self.fingerprint(),
            "code_is_text": isinstance(self._code, str),
            "has_code": self._code is not None,
            "code_size": len(code),
            "program_size": len(program),
        }
        encoded = json.dumps(header, sort_keys=True).encode()
        return _MAGIC + struct.pack("<I", len(encoded)) + encoded + code + program

    def destroy(self) -> None:
        """Nothing to release; the program lives as long as something references it."""

    def __repr__(self) -> str:
        return (f"<CpuExecutable {self.name()} replicas={self._num_replicas} "
                f"partitions={self._num_partitions}>")


def _donation_of(program: CompiledProgram, inputs: tuple[Layout, ...],
                 outputs: tuple[Layout, ...]) -> tuple[dict[int, int], frozenset[int]]:
    """(input -> output whose storage it may become, donated inputs), checked against the specs."""
    name = program.name
    reuse: dict[int, int] = {}
    donated: set[int] = set()
    for out_index, in_index in dict(program.aliases).items():
        if not 0 <= out_index < len(outputs) or not 0 <= in_index < len(inputs):
            raise InvalidArgument(
                f"{name}: alias output {out_index} -> input {in_index} is out of range "
                f"({len(outputs)} outputs, {len(inputs)} inputs)"
            )
        donated.add(in_index)
        # An input aliased to an output of another shape is still donated (the program said so)
        # but its storage cannot hold that output; it is freed instead.
        if inputs[in_index] is outputs[out_index] and in_index not in reuse:
            reuse[in_index] = out_index
    for in_index in getattr(program, "donated_inputs", ()) or ():
        if not 0 <= in_index < len(inputs):
            raise InvalidArgument(f"{name}: donated input {in_index} is out of range ({len(inputs)} inputs)")
        donated.add(in_index)
    return reuse, frozenset(donated)


def deserialize_executable(serialized: bytes, compiler: Any) -> CpuExecutable:
    """The inverse of :meth:`CpuExecutable.serialize`; InvalidArgument for anything else."""

    def bad(reason: str) -> InvalidArgument:
        return InvalidArgument(f"PJRT_Executable_DeserializeAndLoad: {reason}")

    if not isinstance(serialized, (bytes, bytearray, memoryview)):
        raise bad(f"expected bytes, got {type(serialized).__name__}")
    data = bytes(serialized)
    if not data.startswith(_MAGIC) or len(data) < len(_MAGIC) + 4:
        raise bad("these bytes are not a serialized pjrt-hub CPU executable")
    (size,) = struct.unpack_from("<I", data, len(_MAGIC))
    start = len(_MAGIC) + 4
    try:
        header = json.loads(data[start:start + size].decode())
        if not isinstance(header, dict):
            raise ValueError("the header is not an object")
        if header.get("version") != _FORMAT_VERSION:
            raise ValueError(f"format version {header.get('version')!r}, expected {_FORMAT_VERSION}")
        code_size, program_size = int(header["code_size"]), int(header["program_size"])
        body = data[start + size:]
        if len(body) != code_size + program_size:
            raise ValueError(f"{len(body)} bytes of payload, the header announces {code_size + program_size}")
        replicas, partitions = int(header["num_replicas"]), int(header["num_partitions"])
        assignment = header["device_assignment"]
        if assignment is not None:
            assignment = tuple(tuple(int(d) for d in row) for row in assignment)
        fingerprint = header.get("fingerprint")
        if fingerprint is not None and not isinstance(fingerprint, str):
            raise ValueError(f"the fingerprint is {type(fingerprint).__name__}, not a string")
    except (ValueError, KeyError, TypeError, UnicodeDecodeError) as exc:
        raise bad(f"corrupt executable header ({exc})") from None
    if header.get("compiler") != compiler.name:
        raise bad(f"the executable was compiled by {header.get('compiler')!r}; "
                  f"this client compiles with {compiler.name!r}")
    raw = body[:code_size] if header.get("has_code") else None
    code: bytes | str | None = raw
    if raw is not None and header.get("code_is_text"):
        code = raw.decode("utf-8", "replace")
    try:
        program = compiler.deserialize(body[code_size:])
    except PjrtError as exc:
        raise bad(f"{compiler.name} could not read the program: {exc.message}") from None
    except Exception as exc:  # noqa: BLE001 - corrupt bytes may break a compiler in any way
        raise bad(f"{compiler.name} could not read the program: {type(exc).__name__}: {exc}") from None
    return CpuExecutable(program, compiler_name=compiler.name, num_replicas=replicas,
                         num_partitions=partitions, device_assignment=assignment, code=code,
                         fingerprint=fingerprint)


# -- the loaded executable ----------------------------------------------------------------------


class _Launch:
    """One device's share of an execution, from argument checks to outputs."""

    __slots__ = ("device", "replica", "buffers", "arrays", "pending", "held", "out", "out_pending",
                 "out_accounted", "out_release", "error", "cancel", "participant")

    def __init__(self, device: "CpuDevice", replica: int, buffers: Sequence[CpuBuffer]) -> None:
        self.device = device
        self.replica = replica
        self.buffers = buffers
        self.arrays: list[np.ndarray | None] = []
        #: (argument index, source, index in source) of inputs not computed yet.
        self.pending: list[tuple[int, Pending, int]] = []
        #: Buffers whose storage this execution uses and must give back.
        self.held: list[CpuBuffer] = []
        #: Donated storage outputs may take over (None: none of them).
        self.out: list[np.ndarray | None] | None = None
        self.out_pending: list[tuple[int, Pending, int]] = []
        self.out_accounted: dict[int, int] = {}
        self.out_release: dict[int, Any] = {}
        self.error: PjrtError | None = None
        #: Shared by the launches of one execute call; None: nothing can stop this launch.
        self.cancel: CancelFlag | None = None
        #: Which process of a collective execution this launch is (None: no collectives).
        self.participant: Participant | None = None


class CpuLoadedExecutable(LoadedExecutable):
    """``PJRT_LoadedExecutable``: an executable bound to devices of a client."""

    __slots__ = ("_executable", "_client", "_assignment", "_devices", "_deleted", "_name", "_program",
                 "_inputs", "_outputs", "_num_inputs", "_reuse", "_donated", "_inline", "_fast",
                 "_cancellable", "_unbounded", "_running", "_collectives", "_flat_ids", "_runs", "_node_of_flat", "_spans",
                 "_fresh", "_all_reusable", "_fast_outputs", "_entry", "_direct_entry", "_execute_fast",
                 "__weakref__")

    def __init__(self, executable: CpuExecutable, client: "CpuClient",
                 assignment: tuple[tuple[int, ...], ...], inline: bool, *, short: bool = True) -> None:
        self._executable = executable
        self._client = client
        self._assignment = assignment
        # Argument list i runs on addressable device i: replica-major, partition-minor. In a job of
        # several processes only this process's devices of the assignment are addressable.
        flat_devices = [d for row in assignment for d in row]
        self._devices = tuple(client._device_by_id[d] for d in flat_devices if d in client._device_by_id)
        self._deleted = False
        self._name = executable._program.name
        self._program = executable._program
        self._inputs = executable._inputs
        self._outputs = executable._outputs
        self._num_inputs = len(self._inputs)
        self._reuse = executable._aliases
        self._donated = tuple(sorted(executable._donated))
        self._inline = inline
        self._fast = inline and not self._donated and len(self._devices) == 1 and len(flat_devices) == 1
        #: The program's results need no checking (see ``fresh_results`` in .compiler).
        self._fresh = bool(getattr(self._program, "fresh_results", False))
        #: The program's direct entry (``direct_entry``), once it has one, and how to ask for it.
        #: The fast path runs it holding the client's lock, so only for a program that is
        #: ``short`` by the inline policy's limits (a synchronous client runs every program
        #: inline, however long); a longer one goes through ``run``, the lock let go.
        self._entry: Callable[..., Sequence[np.ndarray]] | None = None
        self._direct_entry = getattr(self._program, "direct_entry", None) if self._fresh and short else None
        #: The fast path for this number of arguments (see ._fast): called as
        #: ``self._execute_fast(self, args)``, a function held here, not a bound method.
        self._execute_fast = fast_execute(self._num_inputs)
        self._all_reusable = (True,) * len(self._outputs)
        #: (count, bytes, largest) of the outputs, accounted at once by the fast path.
        self._fast_outputs = (len(self._outputs), sum(layout.nbytes for layout in self._outputs),
                              max((layout.nbytes for layout in self._outputs), default=0))
        #: The program reads a cancel flag in its loops (``run(..., cancel=flag)``).
        self._cancellable = bool(getattr(self._program, "cancellable", False))
        #: The program has a loop that may run long or for ever.
        self._unbounded = bool(getattr(self._program, "unbounded_loops", False))
        #: Cancel flags of the executions not finished yet -> launches still to finish.
        self._running: dict[CancelFlag, int] = {}
        self._collectives = executable._collectives
        # Flattened process id (replica * num_partitions + partition) of each device's launch,
        # and the OS process (node) running each flattened id.
        self._flat_ids = tuple(f for f, d in enumerate(flat_devices) if d in client._device_by_id)
        self._node_of_flat = tuple(client._node_of_device.get(d, 0) for d in flat_devices)
        self._spans = len(set(self._node_of_flat)) > 1
        self._runs = itertools.count()

    # -- metadata --------------------------------------------------------------------------------

    def get_executable(self) -> Executable:
        return self._executable

    def addressable_devices(self) -> list[Device]:
        return list(self._devices)

    def delete(self) -> None:
        self._deleted = True

    def is_deleted(self) -> bool:
        return self._deleted

    def fingerprint(self) -> str:
        return self._executable.fingerprint()

    def get_device_assignment(self) -> tuple[tuple[int, ...], ...]:
        return self._assignment

    def destroy(self) -> None:
        self._deleted = True

    def cancel(self) -> None:
        """Stop the unfinished executions of this executable; see ``LoadedExecutable.cancel``.

        Executions queued behind others never start. A running one stops at its next loop
        iteration if its program is ``cancellable`` (it has a loop that could run forever);
        any other program has a bounded run and finishes, and its results stand.
        """
        reason = Cancelled(f"{self._name}: the execution was cancelled (LoadedExecutable.cancel)")
        with self._client._lock:
            flags = list(self._running)
        for flag in flags:
            flag.cancel(reason)

    def __repr__(self) -> str:
        devices = ", ".join(d._label for d in self._devices)
        return f"<CpuLoadedExecutable {self._name} on {devices}{' (deleted)' if self._deleted else ''}>"

    # -- execute ---------------------------------------------------------------------------------

    def execute(self, argument_lists: Sequence[Sequence[Buffer]], options: ExecuteOptions | None = None,
                execute_device: Device | None = None) -> ExecuteResult:
        # The common call first, with as few tests as it takes to know it may be one: a single
        # argument list and nothing else (_execute_fast checks the rest). Options without a
        # timeout come back to it below.
        if self._fast and options is None and execute_device is None and type(argument_lists) is list \
                and len(argument_lists) == 1:
            result = self._execute_fast(self, argument_lists[0])
            if result is not None:
                return result
        if self._deleted or self._client._destroyed:
            what = "was deleted" if self._deleted else "belongs to a destroyed client"
            raise FailedPrecondition(f"PJRT_LoadedExecutable_Execute: the executable {self._name} {what}")
        devices = self._devices if execute_device is None else self._portable_device(execute_device)
        # Typed as this client's buffers from here: _check refuses any other argument, and
        # _execute_fast returns None for one, before either uses it as a CpuBuffer.
        argument_lists = cast("Sequence[Sequence[CpuBuffer]]", argument_lists)
        if len(argument_lists) != len(devices):
            raise InvalidArgument(
                f"PJRT_LoadedExecutable_Execute: {self._name} runs on {len(devices)} device(s) "
                f"({', '.join(d._label for d in devices)}) and needs one argument list per device; "
                f"got {len(argument_lists)}"
            )
        timeout = None if options is None else options.timeout
        if timeout is not None:
            timeout = _seconds(timeout)
        elif (self._fast and execute_device is None and len(argument_lists) == 1
              and (options is not None or type(argument_lists) is not list)):
            # Options that change nothing here, or another sequence of one list (a plain list
            # without options took the fast path above).
            result = self._execute_fast(self, argument_lists[0])
            if result is not None:
                return result
        non_donatable = options.non_donatable_input_indices if options is not None else ()
        client = self._client
        with client._lock:
            launches = [self._check(args, device, replica, non_donatable)
                        for replica, (args, device) in enumerate(zip(argument_lists, devices))]
            for launch in launches:
                self._take(launch, non_donatable)
            inline = self._inline and not any(launch.pending or launch.out_pending for launch in launches)
            meets = self._collectives and (len(launches) > 1 or self._spans) and execute_device is None
            if meets:
                self._join(launches, options)
            if timeout is not None or self._cancellable or not inline or meets:
                self._arm(launches, timeout)
            if meets or (not inline and client._asynchronous):
                # Processes that meet at collectives must run at once, each on its device's thread.
                result = self._submit(launches)
                if not client._asynchronous:
                    for event in result.device_complete_events:
                        try:
                            event.await_()
                        except PjrtError:
                            pass
                return result
        outputs: list[list[Buffer]] = []
        events: list[Event] = []
        for launch in launches:
            buffers, event = self._run_inline(launch)
            outputs.append(buffers)
            events.append(event)
        return ExecuteResult(outputs, events)

    def _run_fast(self, arrays: list[np.ndarray]) -> tuple[Sequence[np.ndarray] | None, Sequence[bool] | None,
                                                          PjrtError | None]:
        """The fast path's run (see ._fast) when the program has no direct entry yet, or the
        entry refused the arrays: ``(results, reusable, None)``, with ``reusable`` None for
        fresh results, or ``(None, None, error)``."""
        try:
            if not self._fresh:
                return (*self._run_program(arrays, None), None)
            # New arrays of the declared types (see fresh_results); run coerces arrays the
            # direct entry refused.
            results = self._program.run(arrays, None)
            if len(results) == self._fast_outputs[0]:
                return results, None, None
            return (*self._run_checked(list(results), arrays, None), None)
        except Exception as exc:  # noqa: BLE001 - an execution error goes onto the event
            return None, None, self._execution_error(exc)

    def _execution_error(self, exc: Exception) -> PjrtError:
        """What the fast path puts on the event and the outputs when the program raised."""
        return as_pjrt_error(exc, f"{self._name} on {self._devices[0]._label}")

    def _made_outputs(self, results: Sequence[np.ndarray] | None, reusable: Sequence[bool] | None,
                      error: PjrtError | None) -> tuple[list[Buffer], Event]:
        """The fast path's outputs: fresh results (``reusable`` None), checked ones (``reusable``
        says which are ours to overwrite) or, after ``error``, failed ones. Caller holds the lock."""
        memory = self._devices[0]._memories[0]
        if error is not None:
            event = failed_event(error)
            return [CpuBuffer._make(memory, layout, None, event, 0, True)._failed_with(error)
                    for layout in self._outputs], event
        assert results is not None
        if reusable is None:
            return CpuBuffer._fresh_outputs(memory, self._outputs, results, self._fast_outputs), READY
        memory._alloc_outputs(self._fast_outputs)
        return [CpuBuffer._make(memory, layout, results[index], READY, layout.nbytes, reusable[index])
                for index, layout in enumerate(self._outputs)], READY

    def _portable_device(self, device: Device) -> tuple["CpuDevice", ...]:
        if len(self._devices) != 1:
            raise InvalidArgument(
                f"PJRT_LoadedExecutable_Execute: execute_device is only for single-device "
                f"executables; {self._name} runs on {len(self._devices)} devices"
            )
        from ._devices import CpuDevice

        if not isinstance(device, CpuDevice) or device._client is not self._client:
            raise InvalidArgument(
                f"PJRT_LoadedExecutable_Execute: execute_device {device!r} is not a device of this client"
            )
        return (device,)

    def _check(self, args: Sequence[CpuBuffer], device: "CpuDevice", replica: int,
               non_donatable: Sequence[int]) -> _Launch:
        """Validate one argument list; changes nothing. Caller holds the client's lock."""
        if len(args) != self._num_inputs:
            raise InvalidArgument(
                f"Execution supplied {len(args)} buffers but compiled program expected "
                f"{self._num_inputs} buffers (executable {self._name}, replica {replica})"
            )
        launch = _Launch(device, replica, args)
        arrays = launch.arrays
        inputs = self._inputs
        for index, buffer in enumerate(args):
            if type(buffer) is not CpuBuffer and not isinstance(buffer, CpuBuffer):
                raise InvalidArgument(
                    f"PJRT_LoadedExecutable_Execute: argument {index} of {self._name} (replica {replica}) "
                    f"is not a buffer of a pjrt-hub CPU client: got {type(buffer).__name__}"
                )
            if buffer._device is not device:
                raise InvalidArgument(
                    f"Buffer passed to Execute() as argument {index} to replica {replica} is on "
                    f"device {buffer._device._label}, but replica is assigned to device {device._label}."
                )
            if buffer._state != LIVE:
                raise buffer._unusable(
                    f"PJRT_LoadedExecutable_Execute: argument {index} of {self._name} (replica {replica})"
                )
            layout = buffer._layout
            expected = inputs[index]
            if layout is not expected and (layout.shape != expected.shape or layout.dtype != expected.dtype):
                raise InvalidArgument(
                    f"PJRT_LoadedExecutable_Execute: argument {index} of {self._name} (replica {replica}) "
                    f"has the wrong shape or element type: expected {expected.text}, got {layout.text}"
                )
            array = buffer._array
            if array is None:
                if buffer._error is not None:
                    launch.error = buffer._error
                elif buffer._source is not None:
                    launch.pending.append((index, buffer._source, buffer._index))
            arrays.append(array)
        for index in self._donated:
            if index in non_donatable:
                continue
            buffer = args[index]
            if buffer._ext_refs:
                raise FailedPrecondition(
                    f"Donation requested for buffer with external reference: argument {index} of "
                    f"{self._name} (replica {replica}) is a {buffer._describe()} with "
                    f"{buffer._ext_refs} external reference(s) (DLPack or IncreaseExternalReferenceCount)"
                )
            for other, candidate in enumerate(args):
                if candidate is buffer and other != index:
                    first, second = min(index, other), max(index, other)
                    both = other in self._donated and other not in non_donatable
                    if both:
                        raise InvalidArgument(
                            f"Attempt to donate the same buffer twice in Execute() (flattened argument "
                            f"{second}, replica {replica}, first use: {first}). Toy example for this "
                            "bug: `f(donate(a), donate(a))`."
                        )
                    raise InvalidArgument(
                        f"Attempt to donate a buffer which is also used by the same call to Execute() "
                        f"(flattened argument {second}, replica {replica}, first use: {first}). Toy "
                        "example for this bug: `f(a, donate(a))`."
                    )
        return launch

    def _take(self, launch: _Launch, non_donatable: Sequence[int]) -> None:
        """Hold the arguments' storage and carry out donations. Caller holds the client's lock."""
        held = launch.held
        donated = self._donated if launch.error is None else ()
        reuse = self._reuse
        default_memory = launch.device._memories[0]
        for index, buffer in enumerate(launch.buffers):
            if index in donated and index not in non_donatable:
                out_index = reuse.get(index)
                array = buffer._array
                if (out_index is not None and buffer._mutable and not buffer._uses
                        and buffer._memory is default_memory
                        and (array is None or array.flags.writeable)):
                    # The storage moves to the output, with its accounting and release hook.
                    if launch.out is None:
                        launch.out = [None] * len(self._outputs)
                    if array is None:
                        assert buffer._source is not None  # a live buffer without an array is pending
                        launch.out_pending.append((out_index, buffer._source, buffer._index))
                    launch.out[out_index] = array
                    launch.out_accounted[out_index] = buffer._accounted
                    launch.out_release[out_index] = buffer._release
                    buffer._accounted = 0
                    buffer._release = None
                    buffer._state = DONATED
                    buffer._donated_to = self._name
                    buffer._array = None
                    buffer._source = None
                    continue
                buffer._uses += 1
                held.append(buffer)
                buffer._donated_to = self._name
                buffer._drop_storage(DONATED)  # no hook yet: this execution still holds it
                continue
            buffer._uses += 1
            held.append(buffer)

    # -- stopping ----------------------------------------------------------------------------------

    def _arm(self, launches: list[_Launch], timeout: float | None) -> None:
        """Give the launches of one call a cancel flag, watched if there is a time limit.
        Caller holds the client's lock."""
        flag = CancelFlag(self._cancellable)
        for launch in launches:
            launch.cancel = flag
        self._running[flag] = len(launches)
        if timeout is not None:
            reason = DeadlineExceeded(f"{self._name}: the execution did not finish within its {timeout:g} s "
                                      f"limit (ExecuteOptions.timeout) and was stopped")
            if timeout > 0:
                watch(flag, timeout, reason)
            else:  # already past: never started, whichever thread gets there first
                flag.cancel(reason)

    def _disarm(self, launch: _Launch) -> None:
        """One launch finished; the last one of its call retires the flag. Caller holds the lock."""
        flag = launch.cancel
        if flag is None:
            return
        left = self._running.pop(flag, 1) - 1
        if left > 0:
            self._running[flag] = left
        else:
            flag.done = True

    # -- running ---------------------------------------------------------------------------------

    def _run_program(self, arrays: list[np.ndarray], out: list[np.ndarray | None] | None,
                     cancel: CancelFlag | None = None) -> tuple[list[np.ndarray], Sequence[bool]]:
        """Run and check the results; returns them with, for each, whether it is ours to reuse."""
        # A list of our own: results are replaced below, and the program may keep its list.
        if cancel is not None and self._cancellable:
            # A cancellable program's run takes cancel= besides the protocol's arguments (compiler.py).
            run: Callable[..., Sequence[np.ndarray]] = self._program.run
            results = list(run(arrays, out, cancel=cancel.flag))
        else:
            results = list(self._program.run(arrays, out))
        return self._run_checked(results, arrays, out)

    def _run_checked(self, results: list[np.ndarray], arrays: list[np.ndarray],
                     out: list[np.ndarray | None] | None) -> tuple[list[np.ndarray], Sequence[bool]]:
        """Check the results of a run against the declared outputs (see _run_program); the
        list is the caller's own, changed in place (the reference counts below rely on it
        being the only holder of its arrays)."""
        outputs = self._outputs
        if len(results) != len(outputs):
            raise ExecutionError(
                f"{self._name}: the program returned {len(results)} results but declares {len(outputs)} outputs"
            )
        if self._fresh:
            return results, self._all_reusable
        reusable = []
        for index, layout in enumerate(outputs):
            result = results[index]
            if type(result) is not np.ndarray:
                result = results[index] = np.asarray(result)
            dtype = result.dtype
            if result.shape != layout.shape or (dtype is not layout.dtype and dtype != layout.dtype):
                raise ExecutionError(
                    f"{self._name}: result {index} is {result.dtype}{list(result.shape)} but the "
                    f"program declares {layout.text} ({layout.dtype})"
                )
            if out is not None and result is out[index]:
                reusable.append(True)
                continue
            if not result.flags.c_contiguous:
                # Every buffer is dense row-major: what the Layouts extension reports, and what
                # unsafe_pointer, DLPack and the byte accounting assume.
                results[index] = result.copy(order="C")
                reusable.append(True)
                continue
            if (index and any(result is earlier for earlier in results[:index])) or _aliases_an_input(result, arrays):
                # One value returned twice, or an input (or a view of one) returned: each output
                # gets storage of its own.
                results[index] = result.copy()
                reusable.append(True)
                continue
            del result
            reusable.append(sys.getrefcount(results[index]) <= _EXCLUSIVE_REFS)
        return results, reusable

    def _join(self, launches: list[_Launch], options: ExecuteOptions | None) -> None:
        """Make the launches processes of one collective run."""
        executable = self._executable
        launch_id = options.launch_id if options is not None and options.launch_id else next(self._runs)
        nodes = self._node_of_flat
        run = CollectiveRun((id(self), launch_id), executable._num_replicas, executable._num_partitions,
                            self._flat_ids, hub=self._client._rendezvous,
                            timeout=self._client._collective_timeout, process_of=nodes.__getitem__,
                            engine=self._client._engine if self._spans else None)
        for launch, flat in zip(launches, self._flat_ids):
            launch.participant = Participant(run, flat)

    def _give_back(self, launch: _Launch) -> list[Any]:
        """Release the holds; returns the release hooks now due. Caller holds the client's lock."""
        hooks = []
        for buffer in launch.held:
            buffer._uses -= 1
            hook = buffer._take_release_hook()
            if hook is not None:
                hooks.append(hook)
        return hooks

    def _compute(self, launch: _Launch) -> tuple[list[np.ndarray], Sequence[bool], PjrtError | None]:
        """Wait for inputs still being computed, then run; an error is returned, not raised."""
        participant = launch.participant
        if launch.error is not None:
            if participant is not None:
                participant.run.fail(participant.flat, launch.error)
            return [], [], launch.error
        cancel = launch.cancel
        try:
            for index, source, position in launch.pending:
                _wait(source.event, cancel)
                launch.arrays[index] = source.array(position)
            for index, source, position in launch.out_pending:
                _wait(source.event, cancel)
                # out_pending is filled only where out is made; reusable is set with the results.
                assert launch.out is not None and source.reusable is not None
                if source.reusable[position]:
                    launch.out[index] = source.array(position)
            if cancel is not None and cancel.reason is not None:
                raise cancel.reason
            arrays = cast("list[np.ndarray]", launch.arrays)  # the pending inputs are filled in now
            if participant is None:
                results, reusable = self._run_program(arrays, launch.out, cancel)
            else:
                with participating(participant):
                    results, reusable = self._run_program(arrays, launch.out, cancel)
            return results, reusable, None
        except Exception as exc:  # noqa: BLE001 - an execution error goes onto the event
            if cancel is not None and cancel.reason is not None:
                # Whatever the program raised when it saw the flag, the reason is the flag's.
                error = cancel.reason
            else:
                error = as_pjrt_error(exc, f"{self._name} on {launch.device._label}")
            if participant is not None:
                participant.run.fail(participant.flat, error)
            return [], [], error

    def _run_inline(self, launch: _Launch) -> tuple[list[Buffer], CpuEvent]:
        results, reusable, error = self._compute(launch)
        if error is not None:
            _forget_frames(error)
        memory = launch.device._memories[0]
        outputs: list[Buffer] = []
        with self._client._lock:
            hooks = self._give_back(launch)
            self._disarm(launch)
            if error is None:
                event = READY
                accounted = launch.out_accounted
                released = launch.out_release
                for index, layout in enumerate(self._outputs):
                    nbytes = accounted.pop(index, None) if accounted else None
                    if nbytes is None:
                        nbytes = layout.nbytes
                        memory._alloc(nbytes)
                    outputs.append(CpuBuffer._make(memory, layout, results[index], READY, nbytes,
                                                   reusable[index], released.get(index) if released else None))
            else:
                event = failed_event(error)
                for layout in self._outputs:
                    buffer = CpuBuffer._make(memory, layout, None, event, 0, True)
                    buffer._error = error
                    outputs.append(buffer)
                for nbytes in launch.out_accounted.values():
                    memory._free(nbytes)
                hooks.extend(hook for hook in launch.out_release.values() if hook is not None)
        for hook in hooks:
            hook()
        return outputs, event

    def _submit(self, launches: list[_Launch]) -> ExecuteResult:
        """Create pending outputs and queue each launch on its device. Caller holds the lock."""
        outputs: list[list[Buffer]] = []
        events: list[Event] = []
        # A waiter may run a lone launch itself (see .devices._Worker): not the launches of a
        # program whose replicas meet in collectives, nor a loop that may run for ever, which
        # a waiter must be able to stop waiting for.
        helpable = len(launches) == 1 and not self._spans and not self._unbounded
        for launch in launches:
            worker = launch.device._worker
            event = CpuEvent(worker.help if helpable else None)
            task = _Execution(self, launch, event)
            memory = launch.device._memories[0]
            buffers = []
            for index, layout in enumerate(self._outputs):
                nbytes = launch.out_accounted.pop(index, None)
                if nbytes is None:
                    nbytes = layout.nbytes
                    memory._alloc(nbytes)
                buffer = CpuBuffer._make(memory, layout, None, event, nbytes, True,
                                         launch.out_release.pop(index, None))
                buffer._source = task
                buffer._index = index
                buffers.append(buffer)
            task.outputs = buffers
            outputs.append([*buffers])  # the caller's own list: it may change it, the task reads its own
            events.append(event)
            worker.submit(task, helpable)
        return ExecuteResult(outputs, events)


class _Execution(Pending):
    """A launch queued on a device's worker; its results feed the pending outputs."""

    __slots__ = ("executable", "launch", "outputs")

    def __init__(self, executable: CpuLoadedExecutable, launch: _Launch, event: CpuEvent) -> None:
        super().__init__(event)
        self.executable = executable
        #: None once the task has run (it lets go of the argument arrays).
        self.launch: _Launch | None = launch
        self.outputs: list[CpuBuffer] = []

    def __call__(self) -> None:
        executable, launch = self.executable, self.launch
        assert launch is not None  # a worker runs a task once
        interrupted: BaseException | None = None
        try:
            results, reusable, error = executable._compute(launch)
        except BaseException as exc:  # noqa: BLE001 - an interrupt of the waiter running it (_Worker.help)
            interrupted = exc
            results, reusable = [], []
            error = ExecutionError(f"{executable._name} on {launch.device._label}: interrupted "
                                   f"({type(exc).__name__})")
        if error is not None:
            _forget_frames(error)
        client = executable._client
        with client._lock:
            hooks = executable._give_back(launch)
            executable._disarm(launch)
            if error is None:
                self.results = results
                self.reusable = reusable
                for buffer, array, mutable in zip(self.outputs, results, reusable):
                    buffer._mutable = mutable
                    hook = buffer._settle(array, None)
                    if hook is not None:
                        hooks.append(hook)
            else:
                for buffer in self.outputs:
                    hook = buffer._settle(None, error)
                    if hook is not None:
                        hooks.append(hook)
        # Drop the argument arrays and the outputs before anyone is told: a waiter may check
        # memory right away, and consumers of the results need only ``results``.
        self.launch = None
        self.outputs = []
        del launch
        for hook in hooks:
            hook()
        self.event.set(error)
        if interrupted is not None:
            raise interrupted


def _forget_frames(error: BaseException) -> None:
    """Clear the locals of the frames an execution error was raised through.

    The error outlives the execution (on its event and outputs, and a cancel reason is one
    object shared by every launch of the call), and its traceback's frames hold the launch and
    so the argument buffers: without this, a stopped execution kept its inputs allocated until
    the error itself was dropped. The line numbers stay for anyone who prints the traceback.
    """
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if current.__traceback__ is not None:
            traceback.clear_frames(current.__traceback__)
        current = current.__cause__ or current.__context__


def _seconds(timeout: Any) -> float:
    """``ExecuteOptions.timeout`` as a float; InvalidArgument for anything but seconds >= 0."""
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not timeout >= 0:
        raise InvalidArgument(
            f"PJRT_LoadedExecutable_Execute: ExecuteOptions.timeout must be a number of seconds "
            f">= 0 or None, got {timeout!r}"
        )
    return float(timeout)  # inf is a deadline that never comes: the watchdog never wakes for it


def _wait(event: CpuEvent, cancel: CancelFlag | None) -> None:
    """Wait for an input still being computed, or until the execution waiting for it is stopped."""
    if cancel is None:
        event.await_()
        return
    while not event.is_ready():
        if cancel.reason is not None:
            raise cancel.reason
        try:
            event.await_(0.01)
        except DeadlineExceeded:
            if not event.is_ready():  # our own poll ran out, not the producer's error
                continue
            raise
    event.await_()


def _aliases_an_input(result: np.ndarray, arrays: Sequence[np.ndarray | None]) -> bool:
    for array in arrays:
        if result is array:
            return True
    base = result.base
    if base is None or not isinstance(base, np.ndarray):
        return False
    return any(array is not None and np.may_share_memory(result, array) for array in arrays)


def resolve_replication(program: CompiledProgram, options: CompileOptions) -> tuple[int, int]:
    """Replica and partition counts from the options, or from the module when the options keep
    the default; InvalidArgument when both are set and disagree."""
    counts = []
    for what in ("num_replicas", "num_partitions"):
        from_options = getattr(options, what)
        from_module = getattr(program, what, None) or 1
        if isinstance(from_options, bool) or not isinstance(from_options, int) or from_options < 1:
            raise InvalidArgument(f"compile option {what} must be a positive int, got {from_options!r}")
        if from_options != 1 and from_module != 1 and from_options != from_module:
            raise InvalidArgument(
                f"{program.name}: compile options ask for {what}={from_options} but the module "
                f"says mhlo.{what} = {from_module}"
            )
        counts.append(from_options if from_options != 1 else int(from_module))
    return counts[0], counts[1]


def cost_figures(program: CompiledProgram, inputs: tuple[Layout, ...],
                 outputs: tuple[Layout, ...]) -> tuple[float, float]:
    """(flops, bytes accessed) from the cost analysis, estimated from sizes where missing."""
    try:
        cost: Mapping[str, float] = program.cost_analysis() or {}
    except Exception:  # noqa: BLE001 - a missing analysis only costs the inline path
        cost = {}
    size = sum(layout.nbytes for layout in inputs) + sum(layout.nbytes for layout in outputs)
    elements = sum(layout.nbytes // max(layout.dtype.itemsize, 1) for layout in outputs)
    flops = cost.get("flops")
    accessed = cost.get("bytes accessed")
    return (float(flops) if flops is not None else float(elements),
            float(accessed) if accessed is not None else float(size))
