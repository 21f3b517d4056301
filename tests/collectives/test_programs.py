"""Replicated and partitioned programs with every collective, on numba_cpu and reference,
checked against numpy models of the StableHLO spec (and, for the corpus, XLA:CPU's outputs)."""

from __future__ import annotations

import numpy as np
import pytest

from pjrt_hub._multi import run_on_devices

from ..corpus import CORPUS, assert_output, collective_arrays, collective_programs
from .programs import BF16, all_reduce, groups_attr, module, region

MANIFEST = collective_programs()
REPLICA_PROGRAMS = sorted(n for n, m in MANIFEST.items() if m["kind"] == "replica")


def _check(got, expected, rtol=0.0, atol=0.0):
    assert len(got) == len(expected)
    for r, (g_row, e_row) in enumerate(zip(got, expected)):
        for j, (g, e) in enumerate(zip(g_row, e_row)):
            e = np.asarray(e)
            assert g.dtype == e.dtype and g.shape == e.shape, (r, j, g.dtype, e.dtype, g.shape, e.shape)
            if rtol or atol:
                wide = np.complex128 if e.dtype.kind == "c" else np.float64
                np.testing.assert_allclose(g.astype(wide), e.astype(wide), rtol=rtol, atol=atol,
                                           err_msg=f"process {r} output {j}")
            else:
                np.testing.assert_array_equal(g, e, err_msg=f"process {r} output {j}")


@pytest.mark.parametrize("name", REPLICA_PROGRAMS)
def test_corpus_replicated_programs_match_xla(client, name):
    entry = MANIFEST[name]
    text = (CORPUS / "collectives" / f"{name}.mlir").read_text()
    data = collective_arrays(name)
    n = entry["mhlo.num_replicas"]
    inputs = [[data[f"r{r}_in{i}"] for i in range(len(entry["inputs_per_device"]))] for r in range(n)]
    got = run_on_devices(client, text, inputs, timeout=60).outputs
    for r in range(n):
        for j, tol in enumerate(entry["tolerance"]):
            assert_output(got[r][j], data[f"r{r}_out{j}"], tol, f"{name} replica {r} output {j}")


@pytest.mark.parametrize("elem,dtype,op,fold,groups,tol", [
    ("f32", np.float32, "stablehlo.add", np.add, [[0, 2], [1, 3]], 1e-6),
    ("f64", np.float64, "stablehlo.multiply", np.multiply, [[3, 2, 1, 0]], 1e-12),
    ("i32", np.int32, "stablehlo.maximum", np.maximum, [[0, 1], [2, 3]], 0),
    ("ui8", np.uint8, "stablehlo.minimum", np.minimum, [[0, 1, 2, 3]], 0),
    ("i16", np.int16, "stablehlo.xor", np.bitwise_xor, [[1, 0, 3, 2]], 0),
    ("i1", np.bool_, "stablehlo.or", np.logical_or, [[0, 3], [1, 2]], 0),
    ("i1", np.bool_, "stablehlo.and", np.logical_and, [[0, 1, 2, 3]], 0),
    ("f16", np.float16, "stablehlo.add", np.add, [[0, 1, 2, 3]], 1e-2),
    ("bf16", BF16, "stablehlo.add", lambda a, b: (a.astype(np.float32) + b.astype(np.float32)).astype(BF16),
     [[0, 1], [2, 3]], 2e-2),
])
def test_all_reduce_dtypes_and_groups(client, elem, dtype, op, fold, groups, tol):
    text, inputs, expected = all_reduce(elem, (3, 5), op, groups, dtype, fold)
    got = run_on_devices(client, text, inputs, timeout=60).outputs
    _check(got, expected, rtol=tol, atol=tol)


def test_all_reduce_complex(client):
    text, inputs, expected = all_reduce("complex<f32>", (4,), "stablehlo.add", [[0, 1, 2, 3]], np.complex64, np.add)
    got = run_on_devices(client, text, inputs, timeout=60).outputs
    _check(got, expected, rtol=1e-5, atol=1e-5)


def test_all_reduce_scalar_and_other_region(client):
    # Two operands (a scalar and a matrix); the region is max spelled as compare + select, which
    # no engine recognises, so the backend folds it itself.
    t0 = "tensor<f32>"
    body = (
        '    %0:2 = "stablehlo.all_reduce"(%arg0, %arg1) <{replica_groups = dense<[[0, 1, 2, 3]]> : tensor<1x4xi64>}> ({\n'
        "    ^bb0(%a: tensor<f32>, %b: tensor<f32>):\n"
        "      %c = stablehlo.compare GT, %a, %b : (tensor<f32>, tensor<f32>) -> tensor<i1>\n"
        "      %s = stablehlo.select %c, %a, %b : tensor<i1>, tensor<f32>\n"
        "      stablehlo.return %s : tensor<f32>\n"
        f"    }}) : ({t0}, {t0}) -> ({t0}, {t0})\n"
        f"    return %0#0, %0#1 : {t0}, {t0}\n")
    text = module("ar_two", [t0, t0], [t0, t0], body)
    inputs = [[np.float32(r * 1.5 - 2), np.float32(-r)] for r in range(4)]
    expected = [[np.float32(2.5), np.float32(0)] for _ in range(4)]
    got = run_on_devices(client, text, inputs, timeout=60).outputs
    _check(got, expected)


def test_all_gather_all_to_all_reduce_scatter_with_groups(client):
    t, g, a, s = "tensor<2x4xi32>", "tensor<2x8xi32>", "tensor<4x2xi32>", "tensor<2x2xi32>"
    body = (
        f'    %0 = "stablehlo.all_gather"(%arg0) <{{all_gather_dim = 1 : i64, replica_groups = {groups_attr([[1, 0], [3, 2]])}}}> : ({t}) -> {g}\n'
        f'    %1 = "stablehlo.all_to_all"(%arg0) <{{concat_dimension = 0 : i64, replica_groups = {groups_attr([[0, 2], [1, 3]])}, split_count = 2 : i64, split_dimension = 1 : i64}}> : ({t}) -> {a}\n'
        f'    %2 = "stablehlo.reduce_scatter"(%arg0) <{{replica_groups = {groups_attr([[2, 3], [0, 1]])}, scatter_dimension = 1 : i64}}> '
        f'{region("i32", "stablehlo.multiply")} : ({t}) -> {s}\n'
        f"    return %0, %1, %2 : {g}, {a}, {s}\n")
    text = module("moves", [t], [g, a, s], body)
    xs = [np.arange(8, dtype=np.int32).reshape(2, 4) + 10 * r for r in range(4)]
    expected = []
    for r in range(4):
        ag_group = [1, 0] if r in (0, 1) else [3, 2]
        gathered = np.concatenate([xs[m] for m in ag_group], axis=1)
        a2a_group = [0, 2] if r in (0, 2) else [1, 3]
        pos = a2a_group.index(r)
        a2a = np.concatenate([np.split(xs[m], 2, axis=1)[pos] for m in a2a_group], axis=0)
        rs_group = [2, 3] if r in (2, 3) else [0, 1]
        prod = xs[rs_group[0]] * xs[rs_group[1]]
        rs = np.split(prod, 2, axis=1)[rs_group.index(r)]
        expected.append([gathered, a2a, rs])
    got = run_on_devices(client, text, [[x] for x in xs], timeout=60).outputs
    _check(got, expected)


def test_permute_without_source_and_broadcast(client):
    t = "tensor<3xf32>"
    body = (
        f'    %0 = "stablehlo.collective_permute"(%arg0) <{{source_target_pairs = {groups_attr([[0, 2], [2, 0], [1, 3]])}}}> : ({t}) -> {t}\n'
        f'    %1 = "stablehlo.collective_broadcast"(%arg0) <{{replica_groups = {groups_attr([[2, 1]])}}}> : ({t}) -> {t}\n'
        f"    return %0, %1 : {t}, {t}\n")
    text = module("perm", [t], [t, t], body)
    xs = [np.full(3, r + 1, np.float32) for r in range(4)]
    zero = np.zeros(3, np.float32)
    expected = [[xs[2], zero], [zero, xs[2]], [xs[0], xs[2]], [xs[1], zero]]
    got = run_on_devices(client, text, [[x] for x in xs], timeout=60).outputs
    _check(got, expected)


def test_collectives_in_while_case_and_calls(client):
    # A sum of replica ids inside a while loop (3 iterations), inside a case branch, and in a
    # private function called twice.
    t = "tensor<2xf32>"
    ar = (f'"stablehlo.all_reduce"(%v) <{{replica_groups = {groups_attr([[0, 1, 2, 3]])}}}> '
          f'{region("f32", "stablehlo.add")} : ({t}) -> {t}')
    body = (
        "    %i0 = stablehlo.constant dense<0> : tensor<i32>\n"
        "    %w:2 = stablehlo.while(%it = %i0, %acc = %arg0) : tensor<i32>, tensor<2xf32>\n"
        "    cond {\n"
        "      %lim = stablehlo.constant dense<3> : tensor<i32>\n"
        "      %c = stablehlo.compare LT, %it, %lim : (tensor<i32>, tensor<i32>) -> tensor<i1>\n"
        "      stablehlo.return %c : tensor<i1>\n"
        "    } do {\n"
        "      %one = stablehlo.constant dense<1> : tensor<i32>\n"
        "      %n = stablehlo.add %it, %one : tensor<i32>\n"
        "      %rid = stablehlo.replica_id : tensor<ui32>\n"
        "      %f = stablehlo.convert %rid : (tensor<ui32>) -> tensor<f32>\n"
        f"      %b = stablehlo.broadcast_in_dim %f, dims = [] : (tensor<f32>) -> {t}\n"
        f"      %v = stablehlo.add %acc, %b : {t}\n"
        f"      %s = {ar}\n"
        f"      stablehlo.return %n, %s : tensor<i32>, {t}\n"
        "    }\n"
        "    %k = stablehlo.constant dense<1> : tensor<i32>\n"
        "    %cs = \"stablehlo.case\"(%k) ({\n"
        f"      stablehlo.return %w#1 : {t}\n"
        "    }, {\n"
        f"      %v = stablehlo.multiply %w#1, %w#1 : {t}\n"
        f"      %s = {ar}\n"
        f"      stablehlo.return %s : {t}\n"
        f"    }}) : (tensor<i32>) -> {t}\n"
        f"    %c1 = call @twice(%cs) : ({t}) -> {t}\n"
        f"    %c2 = call @twice(%c1) : ({t}) -> {t}\n"
        f"    return %c2 : {t}\n")
    extra = (f"  func.func private @twice(%v: {t}) -> {t} {{\n"
             f"    %s = {ar}\n    return %s : {t}\n  }}\n")
    text = module("loops", [t], [t], body, extra=extra)
    xs = [np.array([r, 1], np.float32) for r in range(4)]
    acc = [x.copy() for x in xs]
    for _ in range(3):
        total = sum(a + r for r, a in enumerate(acc))
        acc = [total.copy() for _ in range(4)]
    value = 4 * acc[0] * acc[0]
    value = 4 * value
    value = 4 * value
    got = run_on_devices(client, text, [[x] for x in xs], timeout=60).outputs
    _check(got, [[value.astype(np.float32)] for _ in range(4)], rtol=1e-6)


@pytest.mark.parametrize("channel,global_ids,groups,expected_groups", [
    # cross_replica_and_partition: replica group [0, 1] x both partitions = all four processes.
    (1, False, [[0, 1]], [[0, 1, 2, 3]]),
    # flattened ids: the groups name processes (replica * 2 + partition) directly.
    (1, True, [[0, 3], [1, 2]], [[0, 3], [1, 2]]),
    # cross_replica (no channel): per partition, replicas 0 and 1 (processes 0,2 and 1,3).
    (0, False, [[0, 1]], [[0, 2], [1, 3]]),
])
def test_partitions_and_channels(client, channel, global_ids, groups, expected_groups):
    t = "tensor<2xi32>"
    attrs = f"replica_groups = {groups_attr(groups)}"
    if channel:
        attrs += f", channel_handle = #stablehlo.channel_handle<handle = {channel}, type = 1>"
    if global_ids:
        attrs += ", use_global_device_ids"
    body = (
        f'    %0 = "stablehlo.all_reduce"(%arg0) <{{{attrs}}}> {region("i32", "stablehlo.add")} : ({t}) -> {t}\n'
        "    %p = stablehlo.partition_id : tensor<ui32>\n"
        "    %r = stablehlo.replica_id : tensor<ui32>\n"
        f"    return %0, %p, %r : {t}, tensor<ui32>, tensor<ui32>\n")
    text = module("parts", [t], [t, "tensor<ui32>", "tensor<ui32>"], body, replicas=2, partitions=2)
    xs = [np.array([1, 10], np.int32) * (k + 1) for k in range(4)]
    expected = []
    for k in range(4):
        group = next(g for g in expected_groups if k in g)
        expected.append([sum(xs[m] for m in group).astype(np.int32), np.uint32(k % 2), np.uint32(k // 2)])
    got = run_on_devices(client, text, [[x] for x in xs], timeout=60).outputs
    _check(got, [[np.asarray(e) for e in row] for row in expected])


def test_groups_that_leave_out_a_replica_fail_every_replica(client):
    text, inputs, _ = all_reduce("f32", (2,), "stablehlo.add", [[0, 1]], np.float32, np.add)
    exe = client.compile(__import__("pjrt_hub.abi", fromlist=["Program"]).Program(text))
    devices = client.devices()
    args = [[client.buffer_from_host_buffer(x[0], device=d).buffer] for x, d in zip(inputs, devices)]
    result = exe.execute(args)
    for event in result.device_complete_events:
        with pytest.raises(Exception, match=r"leave out \[2, 3\]"):
            event.await_(30)
