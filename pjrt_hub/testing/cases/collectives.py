"""collectives: programs over several devices that meet at StableHLO's collective ops.

Each case runs on any plugin with at least two addressable devices (and skips, naming the count,
on one with fewer). Replicas get ``CompileOptions(num_replicas=N)`` and a device assignment on
the first N devices, as a framework's ``pmap`` does; expected values come from the StableHLO spec
(and, for the collectives corpus, from XLA:CPU), so a case that XLA's own CPU plugin fails is a
bug in the case.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from importlib import resources
from typing import Callable

import numpy as np

from pjrt_hub.abi import CompileOptions

from .._case import Case, add_case, check, fail
from .._context import PluginUnderTest
from .._programs import Tolerance
from .client import device_id

CORPUS_PACKAGE = "pjrt_hub.data.corpus.collectives"


@dataclass(frozen=True)
class MultiProgram:
    """A program over ``replicas`` devices with inputs and expected outputs per replica."""

    name: str
    text: str
    replicas: int
    inputs: list[list[np.ndarray]]
    expected: list[list[np.ndarray]]
    #: (rtol, atol) per output (a :class:`Tolerance` or its pair); (0, 0) is exact.
    tolerances: tuple[tuple[float, float], ...]


def _module(name: str, arg: str, results: list[str], body: str, replicas: int) -> str:
    return (f"module @{name} attributes {{mhlo.num_partitions = 1 : i32, mhlo.num_replicas = {replicas} : i32}} {{\n"
            f"  func.func public @main(%arg0: {arg}) -> ({', '.join(results)}) {{\n{body}  }}\n}}\n")


def _sum_region(elem: str) -> str:
    return (f"({{\n    ^bb0(%a: tensor<{elem}>, %b: tensor<{elem}>):\n      %r = stablehlo.add %a, %b : tensor<{elem}>\n"
            f"      stablehlo.return %r : tensor<{elem}>\n    }})")


def spec_programs() -> list[MultiProgram]:
    """Two-replica programs of every collective, with their spec outputs."""
    x = [np.array([[1, 2, 3, 4], [5, 6, 7, 8]], np.int32), np.array([[9, 10, 11, 12], [13, 14, 15, 16]], np.int32)]
    t = "tensor<2x4xi32>"
    out = []
    body = (f'    %0 = "stablehlo.all_reduce"(%arg0) <{{replica_groups = dense<[[0, 1]]> : tensor<1x2xi64>}}> '
            f"{_sum_region('i32')} : ({t}) -> {t}\n    return %0 : {t}\n")
    out.append(MultiProgram("all_reduce_sum", _module("all_reduce_sum", t, [t], body, 2), 2,
                            [[a] for a in x], [[x[0] + x[1]]] * 2, ((0, 0),)))
    g = "tensor<2x8xi32>"
    body = (f'    %0 = "stablehlo.all_gather"(%arg0) <{{all_gather_dim = 1 : i64, replica_groups = dense<[[0, 1]]> : '
            f"tensor<1x2xi64>}}> : ({t}) -> {g}\n    return %0 : {g}\n")
    out.append(MultiProgram("all_gather", _module("all_gather", t, [g], body, 2), 2, [[a] for a in x],
                            [[np.concatenate(x, axis=1)]] * 2, ((0, 0),)))
    s = "tensor<2x2xi32>"
    body = (f'    %0 = "stablehlo.reduce_scatter"(%arg0) <{{replica_groups = dense<[[0, 1]]> : tensor<1x2xi64>, '
            f"scatter_dimension = 1 : i64}}> {_sum_region('i32')} : ({t}) -> {s}\n    return %0 : {s}\n")
    total = x[0] + x[1]
    out.append(MultiProgram("reduce_scatter", _module("reduce_scatter", t, [s], body, 2), 2, [[a] for a in x],
                            [[total[:, :2]], [total[:, 2:]]], ((0, 0),)))
    a2a = "tensor<4x2xi32>"
    body = (f'    %0 = "stablehlo.all_to_all"(%arg0) <{{concat_dimension = 0 : i64, replica_groups = dense<[[0, 1]]> : '
            f"tensor<1x2xi64>, split_count = 2 : i64, split_dimension = 1 : i64}}> : ({t}) -> {a2a}\n"
            f"    return %0 : {a2a}\n")
    out.append(MultiProgram("all_to_all", _module("all_to_all", t, [a2a], body, 2), 2, [[a] for a in x],
                            [[np.concatenate([x[0][:, :2], x[1][:, :2]])], [np.concatenate([x[0][:, 2:], x[1][:, 2:]])]],
                            ((0, 0),)))
    body = (f'    %0 = "stablehlo.collective_permute"(%arg0) <{{source_target_pairs = dense<[[0, 1], [1, 0]]> : '
            f"tensor<2x2xi64>}}> : ({t}) -> {t}\n    return %0 : {t}\n")
    out.append(MultiProgram("collective_permute", _module("collective_permute", t, [t], body, 2), 2,
                            [[a] for a in x], [[x[1]], [x[0]]], ((0, 0),)))
    body = (f'    %0 = "stablehlo.collective_permute"(%arg0) <{{source_target_pairs = dense<[[0, 1]]> : '
            f"tensor<1x2xi64>}}> : ({t}) -> {t}\n    return %0 : {t}\n")
    out.append(MultiProgram("collective_permute_without_source", _module("permute_partial", t, [t], body, 2), 2,
                            [[a] for a in x], [[np.zeros_like(x[0])], [x[0]]], ((0, 0),)))
    body = ("    %0 = stablehlo.replica_id : tensor<ui32>\n    return %0 : tensor<ui32>\n")
    out.append(MultiProgram("replica_id", _module("replica_id", t, ["tensor<ui32>"], body, 2), 2,
                            [[a] for a in x], [[np.array(0, np.uint32)], [np.array(1, np.uint32)]], ((0, 0),)))
    return out


def corpus_programs(max_replicas: int = 1 << 30) -> list[MultiProgram]:
    """The replicated programs of the collectives corpus (JAX's pmap), with XLA:CPU's outputs."""
    root = resources.files(CORPUS_PACKAGE)
    try:
        manifest = json.loads(root.joinpath("manifest.json").read_text())["programs"]
    except (FileNotFoundError, ModuleNotFoundError):
        return []
    out = []
    for name, entry in sorted(manifest.items()):
        if entry["kind"] != "replica" or entry["mhlo.num_replicas"] > max_replicas:
            continue
        n = entry["mhlo.num_replicas"]
        with root.joinpath(f"{name}.npz").open("rb") as f, np.load(f) as z:
            inputs = [[z[f"r{r}_in{i}"] for i in range(len(entry["inputs_per_device"]))] for r in range(n)]
            expected = [[z[f"r{r}_out{j}"] for j in range(len(entry["outputs_per_device"]))] for r in range(n)]
        tolerances = tuple(Tolerance.of(t) for t in entry["tolerance"])
        out.append(MultiProgram(name, root.joinpath(f"{name}.mlir").read_text(), n, inputs, expected, tolerances))
    return out


def compare(program: MultiProgram, got: list[list[np.ndarray]], report: Callable[[str], None] = fail) -> None:
    for r, (row, want_row) in enumerate(zip(got, program.expected)):
        if len(row) != len(want_row):
            report(f"{program.name}: replica {r} returned {len(row)} outputs, expected {len(want_row)}")
        for j, (value, want) in enumerate(zip(row, want_row)):
            value, want = np.asarray(value), np.asarray(want)
            if value.shape != want.shape or value.dtype != want.dtype:
                report(f"{program.name}: replica {r} output {j} is {value.dtype}{list(value.shape)}, expected "
                       f"{want.dtype}{list(want.shape)}")
            elif Tolerance(*program.tolerances[j]).mismatch(value, want) is not None:
                report(f"{program.name}: replica {r} output {j} is {value.tolist()}, expected {want.tolist()}")


def run_case(ctx: PluginUnderTest, program: MultiProgram) -> None:
    devices = ctx.need_devices(program.replicas)
    assignment = tuple((device_id(d),) for d in devices)
    executable = ctx.compile(program.text, CompileOptions(num_replicas=program.replicas, device_assignment=assignment))
    args = [[ctx.put(np.asarray(a), device=d) for a in row] for d, row in zip(devices, program.inputs)]
    outputs = ctx.execute(executable, args)
    check(len(outputs) == program.replicas,
          f"{program.name}: {len(outputs)} output lists for {program.replicas} replicas")
    for r, (device, row) in enumerate(zip(devices, outputs)):
        for buffer in row:
            placed = device_id(buffer.device())
            check(placed == device_id(device), f"{program.name}: replica {r}'s output is on device {placed}, "
                                               f"expected {device_id(device)}")
    compare(program, [[ctx.fetch(b) for b in row] for row in outputs])


def _register() -> None:
    for program in spec_programs():
        add_case(Case("collectives", program.name,
                      f"{program.name} over 2 replicas gives the StableHLO spec's results on each replica",
                      functools.partial(run_case, program=program)))
    for program in corpus_programs():
        add_case(Case("collectives", f"corpus_{program.name}",
                      f"the collectives corpus's {program.name} ({program.replicas} replicas, from jax.pmap) "
                      "matches XLA:CPU's outputs", functools.partial(run_case, program=program)))


_register()

