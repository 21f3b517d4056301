"""Running one program on many devices: replicas and partitions of one execution.

The engine of ``pjrt-hub run`` for programs with ``mhlo.num_replicas`` or
``mhlo.num_partitions`` above 1, of the collectives conformance cases and of
``pjrt-hub bench --collectives``. A replicated program's inputs come per process: the ``.npz``
convention is ``r{R}_in{I}`` and ``r{R}_out{J}`` (``p{P}_...`` for a partitioned program with one
replica, as the collectives corpus writes them); R is the process index in device-assignment
order (replica-major, partition-minor), which is also the order of PJRT's argument lists.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from pjrt_hub.abi import CompileOptions, Program

__all__ = ["MultiRunResult", "ProgramShape", "load_process_inputs", "process_prefix", "program_shape",
           "run_on_devices", "save_process_outputs"]


@dataclass(frozen=True)
class ProgramShape:
    """How many processes a program runs on, and what @main takes."""

    num_replicas: int
    num_partitions: int
    signature: tuple[tuple[tuple[int, ...], np.dtype], ...]

    @property
    def num_processes(self) -> int:
        return self.num_replicas * self.num_partitions


def program_shape(text: str) -> ProgramShape | None:
    """Replica and partition counts and @main's signature, or None if the shared parser cannot
    read the text (the plugin stays the judge of the program)."""
    try:
        from pjrt_hub.backends.stablehlo import parse_module

        module = parse_module(text)
        main = module.main
        signature = tuple((tuple(v.tensor_type.shape), v.tensor_type.dtype) for v in main.args)
        return ProgramShape(module.num_replicas, module.num_partitions, signature)
    except Exception:  # noqa: BLE001 - any parser failure just means "no pre-check"
        return None


def process_prefix(num_replicas: int, num_partitions: int) -> str:
    """``r`` for replicated programs, ``p`` for programs with one replica and several partitions."""
    return "p" if num_replicas == 1 and num_partitions > 1 else "r"


def load_process_inputs(arrays: dict[str, np.ndarray], processes: int, prefix: str, where: str
                        ) -> list[list[np.ndarray]]:
    """``{prefix}{R}_in{I}`` of every process, in order; ValueError naming what is wrong."""
    pattern = re.compile(rf"{prefix}(\d+)_in(\d+)")
    found: dict[int, dict[int, np.ndarray]] = {}
    for key, array in arrays.items():
        m = pattern.fullmatch(key)
        if m is None:
            if re.fullmatch(r"[rp]\d+_out\d+|out\d+|in\d+", key) and not key.startswith("in"):
                continue
            raise ValueError(f"{where}: unexpected array {key!r}; a program with {processes} processes takes "
                             f"{prefix}0_in0 .. {prefix}{processes - 1}_inN")
        found.setdefault(int(m.group(1)), {})[int(m.group(2))] = array
    extra = sorted(r for r in found if r >= processes)
    if extra:
        raise ValueError(f"{where}: inputs for process {extra[0]} but the program runs on {processes} "
                         f"(processes 0..{processes - 1})")
    out = []
    for r in range(processes):
        mine = found.get(r, {})
        missing = [i for i in range(len(mine)) if i not in mine]
        if not mine and processes:
            raise ValueError(f"{where}: no inputs for process {r} ({prefix}{r}_in0 ...)")
        if missing:
            raise ValueError(f"{where}: missing {prefix}{r}_in{missing[0]}")
        out.append([mine[i] for i in range(len(mine))])
    return out


def save_process_outputs(path: str, outputs: Sequence[Sequence[np.ndarray]], prefix: str) -> None:
    # savez's one keyword of its own is allow_pickle, which no name "<prefix><r>_out<j>" is.
    members: dict[str, Any] = {f"{prefix}{r}_out{j}": a for r, row in enumerate(outputs) for j, a in enumerate(row)}
    np.savez(path, **members)


@dataclass(frozen=True)
class MultiRunResult:
    #: outputs[process][j]
    outputs: list[list[np.ndarray]]
    compile_seconds: float
    execute_seconds: float


def run_on_devices(client: Any, text: str, inputs: Sequence[Sequence[np.ndarray]], *,
                   options: CompileOptions | None = None, timeout: float | None = None,
                   devices: Sequence[Any] | None = None, executable: Any = None) -> MultiRunResult:
    """Compile ``text`` (unless ``executable`` is given) and run it with one argument list per
    process; ``inputs[k]`` goes to the k-th device of the executable's assignment."""
    t0 = time.perf_counter()
    own = executable is None
    if own:
        executable = client.compile(Program(text, "mlir"), options or CompileOptions())
    t1 = time.perf_counter()
    try:
        targets = list(devices) if devices is not None else list(executable.addressable_devices())
        if len(targets) != len(inputs):
            raise ValueError(f"the executable runs on {len(targets)} devices; {len(inputs)} argument lists given")
        argument_lists = []
        for device, arrays in zip(targets, inputs):
            row = []
            for array in arrays:
                transfer = client.buffer_from_host_buffer(np.asarray(array, order="C"), device=device)
                transfer.done_with_host_buffer.await_(timeout)
                row.append(transfer.buffer)
            argument_lists.append(row)
        t2 = time.perf_counter()
        result = executable.execute(argument_lists)
        for event in result.device_complete_events:
            event.await_(timeout)
        outputs = []
        for row in result.outputs:
            host_row = []
            for buffer in row:
                host = buffer.to_host_buffer()
                host.event.await_(timeout)
                host_row.append(host.array)
            outputs.append(host_row)
        t3 = time.perf_counter()
        for row in (*argument_lists, *result.outputs):
            for buffer in row:
                buffer.destroy()
    finally:
        if own:
            executable.destroy()
    return MultiRunResult(outputs, t1 - t0, t3 - t2)


# -- pjrt-hub run on programs over several devices ------------------------------------------------


@dataclass(frozen=True)
class ManyRun:
    """What ``pjrt-hub run`` did with a program over several devices."""

    #: Named inputs and outputs as they are read and written (``r0_in0``..., or ``in0``...).
    inputs: dict[str, np.ndarray]
    outputs: dict[str, np.ndarray]
    compile_seconds: float
    execute_seconds: float


def runs_on_many_devices(text: str) -> bool:
    """True for programs ``run`` hands to :func:`run_many`: replicated, partitioned or SPMD."""
    from ._spmd import is_spmd

    if is_spmd(text):
        return True
    shape = program_shape(text)
    return shape is not None and shape.num_processes > 1


def _bits_to_dtype(array: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """bf16 (and other 2-byte floats) may come as their uint16 bits: an .npz cannot name them."""
    if array.dtype != dtype and array.dtype == np.uint16 and dtype.itemsize == 2 and dtype.kind not in "iu":
        return array.view(dtype)
    return array


def _storable(array: np.ndarray) -> np.ndarray:
    """An array an .npz can hold: ml_dtypes types (bf16, fp8) as their unsigned-integer bits."""
    if array.dtype.kind == "V" or type(array.dtype).__module__.startswith("ml_dtypes"):
        return array.view(f"u{array.dtype.itemsize}")
    return array


def _check_arrays(name: str, arrays: Sequence[np.ndarray], signature, error) -> list[np.ndarray]:
    if len(arrays) != len(signature):
        raise error(f"{name}: @main takes {len(signature)} arguments but {len(arrays)} inputs were given")
    fixed = []
    for i, (array, (shape, dtype)) in enumerate(zip(arrays, signature)):
        array = _bits_to_dtype(np.asarray(array), np.dtype(dtype))
        if tuple(array.shape) != tuple(shape) or array.dtype != dtype:
            raise error(f"{name} input {i}: @main expects {dtype}{list(shape)}, got {array.dtype}{list(array.shape)}")
        fixed.append(array)
    return fixed


def run_many(client_for: Any, text: str, arrays: dict[str, np.ndarray], *, timeout: float | None,
             error: type[Exception] = ValueError) -> ManyRun:
    """Run a replicated, partitioned or SPMD program on the arrays of an ``.npz``.

    ``client_for(num_devices)`` gives a client with at least that many devices. Errors in the
    inputs are ``error(message)``; Unimplemented for programs that need sharding propagation.
    """
    from ._spmd import assemble, is_spmd, plan, split

    if is_spmd(text):
        spmd = plan(text)
        signature = [(shape, None) for shape in spmd.input_shapes]
        globals_ = [arrays[k] for k in sorted((k for k in arrays if re.fullmatch(r"in\d+", k)),
                                               key=lambda k: int(k[2:]))]
        unknown = [k for k in arrays if not re.fullmatch(r"in\d+|out\d+|p\d+_(in|out)\d+", k)]
        if unknown:
            raise error(f"unexpected array {unknown[0]!r}; an SPMD program takes its global inputs as in0, in1, ...")
        body_shape = program_shape(spmd.body)
        assert body_shape is not None
        if len(globals_) != len(signature):
            raise error(f"@main takes {len(signature)} arguments but {len(globals_)} inputs were given")
        local_dtypes = [dtype for _, dtype in body_shape.signature]
        checked = []
        for i, (array, local_shape, dtype) in enumerate(zip(globals_, spmd.input_shapes, local_dtypes)):
            array = _bits_to_dtype(np.asarray(array), np.dtype(dtype))
            if tuple(array.shape) != tuple(local_shape) or array.dtype != dtype:
                raise error(f"input in{i}: @main expects {dtype}{list(local_shape)}, got {array.dtype}{list(array.shape)}")
            checked.append(array)
        per_partition = [[split(a, s)[p] for a, s in zip(checked, spmd.input_slices)]
                         for p in range(spmd.num_partitions)]
        client = client_for(spmd.num_partitions)
        result = run_on_devices(client, spmd.body, per_partition, timeout=timeout)
        outputs = {f"out{j}": _storable(assemble([row[j] for row in result.outputs], s, shape))
                   for j, (s, shape) in enumerate(zip(spmd.output_slices, spmd.output_shapes))}
        inputs = {f"in{i}": a for i, a in enumerate(checked)}
        return ManyRun(inputs, outputs, result.compile_seconds, result.execute_seconds)
    shape = program_shape(text)
    if shape is None:
        raise error("the program could not be read to find its replicas and partitions")
    prefix = process_prefix(shape.num_replicas, shape.num_partitions)
    try:
        per_process = load_process_inputs(arrays, shape.num_processes, prefix, "inputs")
    except ValueError as exc:
        raise error(str(exc)) from None
    per_process = [_check_arrays(f"{prefix}{r}", row, shape.signature, error) for r, row in enumerate(per_process)]
    client = client_for(shape.num_processes)
    result = run_on_devices(client, text, per_process, timeout=timeout)
    inputs = {f"{prefix}{r}_in{i}": a for r, row in enumerate(per_process) for i, a in enumerate(row)}
    outputs = {f"{prefix}{r}_out{j}": _storable(a) for r, row in enumerate(result.outputs) for j, a in enumerate(row)}
    return ManyRun(inputs, outputs, result.compile_seconds, result.execute_seconds)
