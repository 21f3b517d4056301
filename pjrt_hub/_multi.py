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
        signature = tuple((tuple(t.shape), t.dtype) for t in main.arg_types)
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
    np.savez(path, **{f"{prefix}{r}_out{j}": a for r, row in enumerate(outputs) for j, a in enumerate(row)})


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
