"""Per-call overhead of the host runtime (``pjrt_hub.backends.cpu_runtime``), in microseconds.

The program is a 4-element float32 add whose ``run`` is one ``np.add``, so what is timed is the
runtime: argument checks, holds, output buffers and their accounting, events, and freeing the
outputs again. XLA's CPU plugin takes 2.3-3.2 us for the same execute through lean ctypes
(../shared/research/xla-cpu-timings.md); the target here is under 10 us.

Usage::

    python benchmarks/runtime_overhead.py [--runs 20000] [--repeats 7] [--json]
        [--compiler pjrt_hub.backends.reference.compiler:ReferenceCompiler]

``--compiler`` also times the same add, as StableHLO text, compiled by a real ProgramCompiler
(the reference interpreter, numba_cpu): that adds the compiler's own per-call cost.

Each figure is the median over ``--repeats`` rounds of the mean of ``--runs`` calls.
"""

from __future__ import annotations

import argparse
import importlib
import json
import statistics
import time
from typing import Callable

import numpy as np

from pjrt_hub.abi import HostBufferSemantics, Program
from pjrt_hub.backends.cpu_runtime import CpuApi, InlinePolicy, TensorSpec

F32_4 = TensorSpec((4,), np.dtype(np.float32))

TINY_ADD = """module @jit_add attributes {mhlo.num_partitions = 1 : i32, mhlo.num_replicas = 1 : i32} {
  func.func public @main(%arg0: tensor<4xf32>, %arg1: tensor<4xf32>) -> (tensor<4xf32>) {
    %0 = stablehlo.add %arg0, %arg1 : tensor<4xf32>
    return %0 : tensor<4xf32>
  }
}
"""


class AddProgram:
    """A CompiledProgram whose work is a single ``np.add``: the floor under any compiler."""

    name = "jit_add"
    inputs = (F32_4, F32_4)
    outputs = (F32_4,)
    aliases: dict[int, int] = {}
    fingerprint = "runtime-overhead-add"

    def run(self, args, out=None):
        return [np.add(args[0], args[1])]

    def cost_analysis(self):
        return {"flops": 4.0, "bytes accessed": 48.0}

    def serialize(self) -> bytes:
        return b""


class AddCompiler:
    name = "runtime-overhead"

    def compile(self, code, options):
        return AddProgram()

    def deserialize(self, data):
        return AddProgram()


def measure(fn: Callable[[], object], runs: int, repeats: int) -> float:
    for _ in range(min(runs, 2000)):
        fn()
    rounds = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(runs):
            fn()
        rounds.append((time.perf_counter() - start) / runs * 1e6)
    return statistics.median(rounds)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20000)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    parser.add_argument("--compiler", action="append", default=[], metavar="MODULE:CLASS",
                        help="also time the add compiled by this ProgramCompiler (repeatable)")
    options = parser.parse_args()
    runs, repeats = options.runs, options.repeats

    client = CpuApi(AddCompiler()).client_create()
    executable = client.compile(Program("add"))
    host = np.arange(4, dtype=np.float32)
    a = client.buffer_from_host_buffer(host).buffer
    b = client.buffer_from_host_buffer(host).buffer
    arguments = [[a, b]]
    dst = np.empty(4, np.float32)
    worker_client = CpuApi(AddCompiler(), inline_policy=InlinePolicy(max_flops=-1)).client_create()
    worker_executable = worker_client.compile(Program("add"))
    wa = worker_client.buffer_from_host_buffer(host).buffer
    worker_arguments = [[wa, wa]]
    add = AddProgram()
    arrays = [host, host]

    def execute_on_worker() -> None:
        worker_executable.execute(worker_arguments).device_complete_events[0].await_()

    figures = {
        "np.add alone (the program's work)": measure(lambda: add.run(arrays), runs, repeats),
        "execute, inline (outputs, event, free)": measure(lambda: executable.execute(arguments), runs, repeats),
        "execute + to_host_buffer into an array": measure(
            lambda: executable.execute(arguments).outputs[0][0].to_host_buffer(dst), runs, repeats),
        "buffer_from_host_buffer, copy": measure(lambda: client.buffer_from_host_buffer(host), runs, repeats),
        "buffer_from_host_buffer, zero copy": measure(
            lambda: client.buffer_from_host_buffer(host, semantics=HostBufferSemantics.IMMUTABLE_ZERO_COPY),
            runs, repeats),
        "execute on the device worker + await": measure(execute_on_worker, max(runs // 10, 100), repeats),
    }
    for spec in options.compiler:
        module_name, _, class_name = spec.partition(":")
        compiler = getattr(importlib.import_module(module_name), class_name)()
        real = CpuApi(compiler).client_create()
        real_executable = real.compile(Program(TINY_ADD))
        ra = real.buffer_from_host_buffer(host).buffer
        real_arguments = [[ra, ra]]

        def execute_real(executable=real_executable, arguments=real_arguments) -> None:
            executable.execute(arguments).device_complete_events[0].await_()

        figures[f"execute, {compiler.name} compiler"] = measure(execute_real, runs, repeats)
        real.destroy()
    client.destroy()
    worker_client.destroy()
    if options.json:
        print(json.dumps({"unit": "us", "figures": figures}, indent=1))
        return
    width = max(map(len, figures))
    print(f"{'what':<{width}}  us/call")
    for what, value in figures.items():
        print(f"{what:<{width}}  {value:7.2f}")


if __name__ == "__main__":
    main()
