"""Programs JAX partitions over several devices, run on a plugin that compiles one device's program.

JAX 0.10 sends every multi-device program as SPMD: one global program for ``num_partitions``
devices, with Shardy shardings on ``@main``, and one argument list per device holding that
device's shard; the plugin is expected to partition. pjrt-hub's backends do not partition
(numba_cpu and the reference interpreter compile the program they are given), so the served
plugin runs such programs in one of two ways, both correct for programs without collectives:

* **per device** (``pmap``, ``shard_map``): a program whose ``@main`` is one fully manual
  ``sdy.manual_computation`` already holds the per-device program, its body. It is compiled as
  ``N`` partitions of that body and each device runs it on its own shard, in parallel, with no copy.
* **global view** (``jit`` of sharded or replicated arrays): the global program is compiled for
  one device; an execution gathers the shards into global arrays, runs once on the first device
  of the assignment, and hands each device the part of each result its sharding gives it, as
  views of one host copy. A result the program leaves to the compiler gets the sharding XLA's
  propagation gives it through elementwise ops (:func:`._programs.read_program`), else it is
  replicated; ``sdy.sharding_constraint`` ops are the identities they are in value.

Either way the executable reports the shardings of its parameters and results (served through the
Shardings extension), which JAX asks for when it left them to the compiler.

Collectives (``psum`` inside ``pmap`` or ``shard_map``, ...) are the plugin's own: the partitions of
the per-device view meet in its runtime. A manual computation over only some mesh axes, or Shardy
ops inside a global program, are refused here, naming what is missing.
"""

from __future__ import annotations

import ctypes
from typing import Any, Sequence

import numpy as np

from pjrt_hub.abi import (
    BufferType,
    CompileOptions,
    Device,
    Executable,
    ExecuteOptions,
    ExecuteResult,
    LoadedExecutable,
    PjrtError,
    Program,
    Unimplemented,
    decode_compile_options,
)

from pjrt_hub._run import host_array
from pjrt_hub.abi.types import HostBufferSemantics, to_numpy_dtype
from pjrt_hub.backends.cpu_runtime import READY

from ._programs import ProgramInfo, Sharding, is_bytecode, localize_manual_computation, read_program, set_counts

__all__ = ["compile_for_jax"]

_ALIAS = HostBufferSemantics.IMMUTABLE_ZERO_COPY


def compile_for_jax(client: Any, program: Program, options: bytes) -> LoadedExecutable:
    """``PJRT_Client_Compile`` as JAX needs it (the served struct's compile hook)."""
    if program.format != "mlir" or (not is_bytecode(program.code) and "sdy." not in program.text()):
        # Not what JAX sends: text without Shardy goes to the plugin as it is.
        return client.compile(program, options)
    info = read_program(program.code)
    try:
        return _compile(client, info, options)
    finally:
        info.release()


def _compile(client: Any, info: ProgramInfo, options: bytes) -> LoadedExecutable:
    compile_options = decode_compile_options(options)
    partitions = max(compile_options.num_partitions, info.num_partitions)
    replicas = max(compile_options.num_replicas, info.num_replicas)
    if partitions * replicas == 1:
        return client.compile(Program(info.text, "mlir"), options)
    if replicas != 1:
        raise Unimplemented(f"{replicas} replicas x {partitions} partitions: pjrt-hub runs SPMD programs "
                            "of one replica")
    assignment = compile_options.device_assignment or client.default_device_assignment(1, partitions)
    devices = [client.lookup_device(int(d)) for d in assignment[0]]
    if info.single_manual_computation:
        text = localize_manual_computation(info)
        per_device = CompileOptions(num_replicas=1, num_partitions=len(devices),
                                    device_assignment=(tuple(int(d) for d in assignment[0]),))
        inner = client.compile(Program(text, "mlir"), per_device)
        return PerDeviceExecutable(inner, tuple(tuple(int(d) for d in row) for row in assignment), options, info)
    # The global view runs the program whole: a sharding constraint is the identity it is in value.
    partitioning = sorted(set(info.other_shardy_ops) - {"sdy.sharding_constraint"})
    if partitioning:
        raise Unimplemented(f"the program uses {partitioning} inside a partitioned program; pjrt-hub does not "
                            "partition programs itself (only a program that is one fully manual "
                            "sdy.manual_computation runs per device)")
    text = set_counts(info, partitions=1, replicas=1)
    first = CompileOptions(num_replicas=1, num_partitions=1, device_assignment=((int(assignment[0][0]),),))
    inner = client.compile(Program(text, "mlir"), first)
    return GlobalViewExecutable(client, inner, info, devices,
                                tuple(tuple(int(d) for d in row) for row in assignment), options)


class _PartitionedExecutable(Executable):
    """The ``PJRT_Executable`` JAX sees: one replica, ``N`` partitions, the inner program's outputs,
    and the shardings of those outputs (JAX asks for them when it left them to the compiler)."""

    __slots__ = ("_inner", "_partitions", "_options", "_parameter_shardings", "_output_shardings")

    def __init__(self, inner: Executable, partitions: int, options: bytes,
                 shardings: tuple[list[bytes], list[bytes]]) -> None:
        self._inner = inner
        self._partitions = partitions
        self._options = options
        self._parameter_shardings, self._output_shardings = shardings

    def parameter_shardings(self) -> list[bytes]:
        """Serialized ``xla.OpSharding`` of each parameter (served by the Shardings extension):
        what the program says, replicated where it says nothing."""
        return self._parameter_shardings

    def output_shardings(self) -> list[bytes]:
        """Serialized ``xla.OpSharding`` of each output, as for the parameters."""
        return self._output_shardings

    def name(self) -> str:
        return self._inner.name()

    def num_replicas(self) -> int:
        return 1

    def num_partitions(self) -> int:
        return self._partitions

    def num_outputs(self) -> int:
        return self._inner.num_outputs()

    def size_of_generated_code_in_bytes(self) -> int:
        return self._inner.size_of_generated_code_in_bytes()

    def get_cost_analysis(self) -> dict[str, Any]:
        return self._inner.get_cost_analysis()

    def output_memory_kinds(self) -> list[str]:
        return self._inner.output_memory_kinds()

    def output_element_types(self) -> list[BufferType]:
        return self._inner.output_element_types()

    def output_dimensions(self) -> list[tuple[int, ...]]:
        return self._inner.output_dimensions()

    def optimized_program(self) -> Program:
        return self._inner.optimized_program()

    def fingerprint(self) -> str:
        return self._inner.fingerprint()

    def get_compiled_memory_stats(self) -> Any:
        return self._inner.get_compiled_memory_stats()

    def serialize(self) -> bytes:
        raise Unimplemented("a program partitioned by pjrt-hub's JAX layer cannot be serialized")


class _Partitioned(LoadedExecutable):
    """What both ways share: the assignment JAX asked for, and the executable it sees."""

    __slots__ = ("_inner", "_assignment", "_options", "_deleted", "_shardings")

    def __init__(self, inner: LoadedExecutable, assignment: tuple[tuple[int, ...], ...], options: bytes,
                 info: ProgramInfo) -> None:
        self._inner = inner
        self._assignment = assignment
        self._options = options
        self._deleted = False
        self._shardings = (_op_shardings(info.arg_shardings, info.arg_shapes),
                           _op_shardings(info.result_shardings, info.result_shapes))

    def get_executable(self) -> Executable:
        return _PartitionedExecutable(self._inner.get_executable(), len(self._assignment[0]), self._options,
                                      self._shardings)

    def get_device_assignment(self) -> tuple[tuple[int, ...], ...]:
        return self._assignment

    def delete(self) -> None:
        self._deleted = True
        self._inner.delete()

    def is_deleted(self) -> bool:
        return self._deleted

    def fingerprint(self) -> str:
        return self._inner.fingerprint()

    def destroy(self) -> None:
        self._inner.destroy()


class PerDeviceExecutable(_Partitioned):
    """A fully manual computation, run as replicas of its body: device ``p`` runs partition ``p``."""

    __slots__ = ()

    def addressable_devices(self) -> list[Device]:
        return self._inner.addressable_devices()

    def execute(self, argument_lists: Sequence[Sequence[Any]], options: ExecuteOptions | None = None,
                execute_device: Device | None = None) -> ExecuteResult:
        return self._inner.execute(argument_lists, options, execute_device)


class GlobalViewExecutable(_Partitioned):
    """The global program on the first device, its inputs gathered and its results scattered."""

    __slots__ = ("_client", "_info", "_devices")

    def __init__(self, client: Any, inner: LoadedExecutable, info: ProgramInfo, devices: list[Device],
                 assignment: tuple[tuple[int, ...], ...], options: bytes) -> None:
        super().__init__(inner, assignment, options, info)
        self._client = client
        self._info = info
        self._devices = devices

    def addressable_devices(self) -> list[Device]:
        return list(self._devices)

    def execute(self, argument_lists: Sequence[Sequence[Any]], options: ExecuteOptions | None = None,
                execute_device: Device | None = None) -> ExecuteResult:
        if execute_device is not None:
            raise Unimplemented("a partitioned program runs on all its devices; execute_device is not supported")
        if len(argument_lists) != len(self._devices):
            raise Unimplemented(f"the program runs on {len(self._devices)} devices; got {len(argument_lists)} "
                                "argument lists")
        shapes = self._info.arg_shapes
        if len(shapes) != len(argument_lists[0]):
            raise Unimplemented(f"the program has {len(shapes)} arguments; got {len(argument_lists[0])}")
        global_inputs = []
        for i, shape in enumerate(shapes):
            sharding = self._info.arg_shardings[i] if i < len(self._info.arg_shardings) else None
            global_inputs.append(_gather([row[i] for row in argument_lists], sharding, shape))
        first = self._devices[0]
        buffers = []
        for array in global_inputs:
            # The gathered arrays are this call's own and never change: the buffers alias them
            # (so done_with_host_buffer fires only when the buffer goes).
            buffers.append(self._client.buffer_from_host_buffer(array, device=first, semantics=_ALIAS).buffer)
        result = self._inner.execute([buffers], options)
        for event in result.device_complete_events:
            event.await_()
        for i, buffer in enumerate(buffers):
            if buffer.is_deleted():
                # Donated: so are the parts it was gathered from, as on a partitioning backend.
                for row in argument_lists:
                    row[i].delete()
        results = [_result_array(buffer) for buffer in result.outputs[0]]
        for buffer in buffers:
            buffer.destroy()
        outputs = []
        for p, device in enumerate(self._devices):
            row = []
            for j, array in enumerate(results):
                sharding = self._info.result_shardings[j] if j < len(self._info.result_shardings) else None
                local = array if sharding is None or sharding.replicated else \
                    array[sharding.slices(array.shape, p)]
                # Each device's part aliases the results' host copy, which nothing writes.
                transfer = self._client.buffer_from_host_buffer(host_array(local), device=device,
                                                                semantics=_ALIAS)
                row.append(transfer.buffer)
            outputs.append(row)
        return ExecuteResult(outputs, [READY for _ in self._devices])


def _op_shardings(shardings: list[Sharding | None], shapes: list[tuple[int, ...]]) -> list[bytes]:
    """Serialized ``xla.OpSharding`` per value (global shapes give the ranks): replicated where the
    program gives no sharding."""
    padded = list(shardings[:len(shapes)]) + [None] * max(0, len(shapes) - len(shardings))
    return [b"" if s is None else s.op_sharding(len(shape)) for s, shape in zip(padded, shapes)]


def _result_array(buffer: Any) -> np.ndarray:
    """A result of the global program as a host array: its storage itself where the buffer
    exports it (DLPack), else a copy. The buffer is destroyed; the array keeps the storage."""
    try:
        array = np.from_dlpack(buffer)
    except (BufferError, TypeError, AttributeError, RuntimeError, PjrtError):
        host = buffer.to_host_buffer()
        host.event.await_()
        array = host.array
    buffer.destroy()
    return array


def _gather(shards: Sequence[Any], sharding: Sharding | None, shape: tuple[int, ...]) -> np.ndarray:
    """The global array whose parts ``shards[p]`` are, partition by partition.

    Where the shards already lie next to each other in memory, in the places of a global array
    (the parts a previous global-view execution handed out, as views of its one result), that
    memory is the global array: no copy. Otherwise each part is copied into its place, once where
    that place is contiguous (a split of the leading dimensions)."""
    if sharding is None or sharding.replicated:
        host = shards[0].to_host_buffer()
        host.event.await_()
        return host_array(host.array)
    dtype = to_numpy_dtype(shards[0].element_type())
    out = np.empty(shape, dtype)  # not touched unless copied into: the system commits it lazily
    adjacent = _adjacent(shards, sharding, out)
    if adjacent is not None:
        return adjacent
    for p, shard in enumerate(shards):
        place = out[sharding.slices(shape, p)]
        if place.flags.c_contiguous:
            shard.to_host_buffer(place).event.await_()
        else:
            host = shard.to_host_buffer()
            host.event.await_()
            place[...] = host.array
    return out


def _adjacent(shards: Sequence[Any], sharding: Sharding, layout: np.ndarray) -> np.ndarray | None:
    """The memory the shards occupy as one global array shaped like ``layout``, when each shard's
    data starts where its place in ``layout`` would, relative to the first, and each place is
    contiguous; else None. The shards' buffers hold that memory (the caller keeps them alive while
    the array is used: the execution's arguments). The array is left writeable only because the
    compiled programs take writeable arrays without a copy: the one buffer made of it is an
    immutable alias, which no execution writes (donating it copies)."""
    start = layout.__array_interface__["data"][0]
    first = None
    for p, shard in enumerate(shards):
        place = layout[sharding.slices(layout.shape, p)]
        if not place.flags.c_contiguous or place.size == 0:
            return None
        try:
            pointer = int(shard.unsafe_pointer())
        except (PjrtError, AttributeError, TypeError):
            return None
        if first is None:
            if place.__array_interface__["data"][0] != start:
                return None
            first = pointer
        if not pointer or pointer - first != place.__array_interface__["data"][0] - start:
            return None
    assert first is not None
    memory = (ctypes.c_char * layout.nbytes).from_address(first)
    return np.frombuffer(memoryview(memory), dtype=layout.dtype).reshape(layout.shape)
