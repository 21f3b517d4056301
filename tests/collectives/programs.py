"""Multi-process StableHLO programs of the tests, with numpy models of what each process gets.

Each builder returns (text, inputs[process], expected[process]); the models follow the
StableHLO spec directly (groups of flattened ids, group order), independently of the runtime.
"""

from __future__ import annotations

import numpy as np

import ml_dtypes


def module(name: str, args: list[str], results: list[str], body: str, replicas: int = 4,
           partitions: int = 1, extra: str = "") -> str:
    sig = ", ".join(f"%arg{i}: {t}" for i, t in enumerate(args))
    res = ", ".join(results)
    return (f"module @{name} attributes {{mhlo.num_partitions = {partitions} : i32, "
            f"mhlo.num_replicas = {replicas} : i32}} {{\n"
            f"  func.func public @main({sig}) -> ({res}) {{\n{body}  }}\n{extra}}}\n")


def groups_attr(groups) -> str:
    rows, cols = len(groups), len(groups[0]) if groups else 0
    return f"dense<{[list(g) for g in groups]}> : tensor<{rows}x{cols}xi64>".replace("[[", "[[")


def region(elem: str, op: str) -> str:
    return (f"({{\n    ^bb0(%a: tensor<{elem}>, %b: tensor<{elem}>):\n"
            f"      %r = {op} %a, %b : tensor<{elem}>\n      stablehlo.return %r : tensor<{elem}>\n    }})")


def all_reduce(elem: str, shape: tuple[int, ...], op: str, groups, np_dtype, fold, replicas: int = 4,
               seed: int = 0):
    t = f"tensor<{'x'.join(map(str, shape))}{'x' if shape else ''}{elem}>"
    body = (f'    %0 = "stablehlo.all_reduce"(%arg0) <{{replica_groups = {groups_attr(groups)}}}> '
            f"{region(elem, op)} : ({t}) -> {t}\n    return %0 : {t}\n")
    text = module("ar_" + "".join(c for c in elem if c.isalnum()), [t], [t], body, replicas)
    rng = np.random.default_rng(seed)
    inputs = [[_random(rng, shape, np_dtype)] for _ in range(replicas)]
    expected = []
    for r in range(replicas):
        group = next((g for g in groups if r in g), [r])
        acc = inputs[group[0]][0]
        for m in group[1:]:
            acc = fold(acc, inputs[m][0])
        expected.append([np.asarray(acc, np_dtype)])
    return text, inputs, expected


def _random(rng, shape, dtype):
    dtype = np.dtype(dtype)
    if dtype == np.bool_:
        return rng.integers(0, 2, shape).astype(bool)
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        return rng.integers(max(info.min, -50), min(info.max, 50), shape).astype(dtype)
    if dtype.kind == "c":
        return (rng.standard_normal(shape) + 1j * rng.standard_normal(shape)).astype(dtype)
    return rng.standard_normal(shape).astype(np.float32).astype(dtype)


BF16 = np.dtype(ml_dtypes.bfloat16)
