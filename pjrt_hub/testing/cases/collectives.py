"""collectives: programs over several devices that meet at StableHLO's collective ops.

Each case runs on any plugin with at least two addressable devices (four for two executions at
once; it skips, naming the count, on one with fewer). Replicas get ``CompileOptions(num_replicas=N)`` and a device assignment on
the first N devices, as a framework's ``pmap`` does; expected values come from the StableHLO spec
(and, for the collectives corpus, from XLA:CPU), so a case that XLA's own CPU plugin fails is a
bug in the case.
"""

from __future__ import annotations

import functools
import json
import sys
from dataclasses import dataclass
from importlib import resources
from typing import Callable

import numpy as np

from pjrt_hub.abi import CompileOptions, ExecuteOptions, InvalidArgument, PjrtError, Unimplemented

from .._case import Case, add_case, case, check, fail, skip
from .._context import CALL_TIMEOUT, PluginUnderTest, describe
from .._programs import Tolerance, failing_program
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


def _sum_of_two(name: str, t: str) -> str:
    """An all_reduce (sum) over the two replicas of a program."""
    body = (f'    %0 = "stablehlo.all_reduce"(%arg0) <{{replica_groups = dense<[[0, 1]]> : tensor<1x2xi64>}}> '
            f"{_sum_region('f32')} : ({t}) -> {t}\n    return %0 : {t}\n")
    return _module(name, t, [t], body, 2)


@case("collectives")
def partition_id(ctx: PluginUnderTest) -> None:
    """stablehlo.partition_id gives each partition of a replica its own index: a program of one
    replica and two partitions returns 0 on the first partition's device and 1 on the second's."""
    devices = ctx.need_devices(2)
    t = "tensor<2xf32>"
    text = (f"module @partition_id attributes {{mhlo.num_partitions = 2 : i32, mhlo.num_replicas = 1 : i32}} {{\n"
            f"  func.func public @main(%arg0: {t}) -> tensor<ui32> {{\n"
            f"    %0 = stablehlo.partition_id : tensor<ui32>\n    return %0 : tensor<ui32>\n  }}\n}}\n")
    try:
        executable = ctx.compile(text, CompileOptions(num_replicas=1, num_partitions=2,
                                                      device_assignment=(tuple(device_id(d) for d in devices),)))
    except (InvalidArgument, Unimplemented) as exc:
        # XLA compiles partitions only through its SPMD partitioner, which the binding's
        # CompileOptions cannot ask for: a documented refusal, not a wrong partition id.
        skip(f"plugin {ctx.name} does not compile a program of two partitions as they are: {describe(exc)}")
    args = [[ctx.put(np.zeros(2, np.float32), device=d)] for d in devices]
    outputs = ctx.execute(executable, args)
    got = [ctx.fetch(row[0]).tolist() for row in outputs]
    check(got == [0, 1], f"stablehlo.partition_id returned {got} on partitions 0 and 1 (devices "
                         f"{[device_id(d) for d in devices]}): each partition reads its own index, [0, 1]")


#: Rounds of the two executions at once: a plugin that lets them meet each other does so only when
#: their replicas reach the collective interleaved, which a few rounds (with threads switching
#: often) bring about.
_CONCURRENT_ROUNDS = 8
_SWITCH_INTERVAL = 1e-5


@case("collectives")
def concurrent_executions_meet_apart(ctx: PluginUnderTest) -> None:
    """Two executions of an all_reduce running at the same time, on disjoint pairs of devices,
    each reduce over their own replicas only: the replicas of one execution meet each other at a
    collective, never those of another execution that happens to be at the same op."""
    devices = ctx.need_devices(4)
    text = _sum_of_two("sum_of_two", "tensor<2xf32>")
    pairs = (devices[:2], devices[2:4])
    executables = [ctx.compile(text, CompileOptions(num_replicas=2, device_assignment=tuple(
        (device_id(d),) for d in pair))) for pair in pairs]
    values = ((1.0, 2.0), (10.0, 20.0))
    args = [[[ctx.put(np.full(2, v, np.float32), device=d)] for v, d in zip(vs, pair)]
            for vs, pair in zip(values, pairs)]
    interval = sys.getswitchinterval()
    sys.setswitchinterval(_SWITCH_INTERVAL)
    try:
        for round_ in range(_CONCURRENT_ROUNDS):
            # Both launched before either is awaited: they run at the same time.
            results = [ctx.call(executable.execute, lists, ExecuteOptions(), what="PJRT_LoadedExecutable_Execute "
                                f"of an all_reduce on devices {[device_id(d) for d in pair]}")
                       for executable, lists, pair in zip(executables, args, pairs)]
            for result, vs, pair in zip(results, values, pairs):
                on = [device_id(d) for d in pair]
                try:
                    got = [ctx.fetch(row[0]).tolist() for row in result.outputs]
                except PjrtError as exc:
                    fail(f"round {round_ + 1}: an all_reduce over devices {on}, run at the same time as another "
                         f"execution's on other devices, failed with {describe(exc)}: each execution's replicas "
                         "meet each other only")
                want = [[sum(vs)] * 2] * 2
                check(got == want, f"round {round_ + 1}: an all_reduce over devices {on} of {list(vs)} gave {got}, "
                                   f"expected {want}, while another execution of an all_reduce ran on other "
                                   "devices: the replicas of one execution meet each other, not another's")
    finally:
        sys.setswitchinterval(interval)


@case("collectives")
def failed_replica_stops_its_peers(ctx: PluginUnderTest) -> None:
    """A replica that fails before a collective does not leave the others waiting for it: when
    replica 1 of an all_reduce gets an input that carries an error, replica 0's completion event
    and output are ready with an error within seconds, and replica 1's carry the input's error
    (where the plugin fails an execution on the device rather than at the call)."""
    devices = ctx.need_devices(2)
    failing = ctx.compile(failing_program(), CompileOptions(device_assignment=((device_id(devices[1]),),)))
    try:
        broken = ctx.call(failing.execute, [[ctx.put(np.ones(4, np.float32), device=devices[1]),
                                            ctx.put(np.array(2.0, np.float32), device=devices[1])]],
                          ExecuteOptions(), what="PJRT_LoadedExecutable_Execute of a program that cannot "
                          "allocate its output", timeout=60.0).outputs[0][0]
    except PjrtError as exc:
        skip(f"plugin {ctx.name} refuses a failing execution at the call ({describe(exc)}): it makes no buffer "
             "that carries an error, to hand one replica")
    text = _sum_of_two("sum_with_a_failed_replica", "tensor<4xf32>")
    executable = ctx.compile(text, CompileOptions(num_replicas=2, device_assignment=tuple(
        (device_id(d),) for d in devices)))
    good = ctx.put(np.ones(4, np.float32), device=devices[0])
    try:
        result = ctx.call(executable.execute, [[good], [broken]], ExecuteOptions(),
                          what="PJRT_LoadedExecutable_Execute of an all_reduce whose replica 1 gets a failed input",
                          timeout=60.0)
    except PjrtError:
        return  # refused at the call: nothing runs, no replica waits
    limit = ctx.seconds(CALL_TIMEOUT)
    for replica, (row, event) in enumerate(zip(result.outputs, result.device_complete_events or [None, None])):
        for what, waited in (("completion event", event), ("output's ready event", row[0].ready_event())):
            if waited is None:
                continue
            error: PjrtError | None = None
            try:
                ctx.call(waited.await_, limit, what=f"PJRT_Event_Await of replica {replica}'s {what}",
                         timeout=CALL_TIMEOUT + 1.0)
            except PjrtError as exc:
                error = exc  # the await's own timeout included: readiness decides below
            check(waited.is_ready(), f"replica {replica}'s {what} was not ready {limit:g} s after "
                                     "PJRT_LoadedExecutable_Execute, though replica 1 had failed on its input: a "
                                     "replica whose peer failed before a collective stops with an error instead of "
                                     "waiting for it")
            check(error is not None, f"replica {replica}'s {what} is ready without an error, though replica 1's "
                                     "input carried one and the all_reduce needs replica 1's operand: the execution "
                                     "cannot have completed")


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

