"""``pjrt-hub run`` on programs over several devices: every program of the collectives corpus on
numba_cpu and reference, a GSPMD-form shard_map program, bf16 as uint16 bits, and bad inputs."""

from __future__ import annotations

import numpy as np
import pytest

import ml_dtypes

from pjrt_hub.cli import main

from ..corpus import CORPUS, assert_output, collective_arrays, collective_programs

MANIFEST = collective_programs()

GSPMD = """module @jit_f attributes {mhlo.num_partitions = 2 : i32, mhlo.num_replicas = 1 : i32} {
  func.func public @main(%arg0: tensor<4x2xbf16> {mhlo.sharding = "{devices=[2,1]<=[2]}"}) -> (tensor<4x2xbf16> {mhlo.sharding = "{devices=[2,1]<=[2]}"}, tensor<2xbf16> {mhlo.sharding = "{replicated}"}) {
    %0 = stablehlo.custom_call @Sharding(%arg0) {mhlo.sharding = "{devices=[2,1]<=[2]}"} : (tensor<4x2xbf16>) -> tensor<4x2xbf16>
    %1 = stablehlo.custom_call @SPMDFullToShardShape(%0) {mhlo.sharding = "{manual}"} : (tensor<4x2xbf16>) -> tensor<2x2xbf16>
    %2:2 = call @shmap_body(%1) : (tensor<2x2xbf16>) -> (tensor<2x2xbf16>, tensor<2xbf16>)
    %3 = stablehlo.custom_call @Sharding(%2#0) {mhlo.sharding = "{manual}"} : (tensor<2x2xbf16>) -> tensor<2x2xbf16>
    %4 = stablehlo.custom_call @SPMDShardToFullShape(%3) {mhlo.sharding = "{devices=[2,1]<=[2]}"} : (tensor<2x2xbf16>) -> tensor<4x2xbf16>
    %5 = stablehlo.custom_call @Sharding(%2#1) {mhlo.sharding = "{manual}"} : (tensor<2xbf16>) -> tensor<2xbf16>
    %6 = stablehlo.custom_call @SPMDShardToFullShape(%5) {mhlo.sharding = "{replicated}"} : (tensor<2xbf16>) -> tensor<2xbf16>
    return %4, %6 : tensor<4x2xbf16>, tensor<2xbf16>
  }
  func.func private @shmap_body(%arg0: tensor<2x2xbf16>) -> (tensor<2x2xbf16>, tensor<2xbf16>) {
    %0 = "stablehlo.collective_permute"(%arg0) <{channel_handle = #stablehlo.channel_handle<handle = 1, type = 1>, source_target_pairs = dense<[[0, 1], [1, 0]]> : tensor<2x2xi64>}> : (tensor<2x2xbf16>) -> tensor<2x2xbf16>
    %cst = stablehlo.constant dense<0.000000e+00> : tensor<bf16>
    %1 = stablehlo.reduce(%arg0 init: %cst) applies stablehlo.add across dimensions = [0] : (tensor<2x2xbf16>, tensor<bf16>) -> tensor<2xbf16>
    %2 = "stablehlo.all_reduce"(%1) <{channel_handle = #stablehlo.channel_handle<handle = 2, type = 1>, replica_groups = dense<[[0, 1]]> : tensor<1x2xi64>, use_global_device_ids}> ({
    ^bb0(%a: tensor<bf16>, %b: tensor<bf16>):
      %3 = stablehlo.add %a, %b : tensor<bf16>
      stablehlo.return %3 : tensor<bf16>
    }) : (tensor<2xbf16>) -> tensor<2xbf16>
    return %0, %2 : tensor<2x2xbf16>, tensor<2xbf16>
  }
}
"""


def _run(tmp_path, program: str, arrays: dict, plugin: str, capsys) -> tuple[int, dict, str]:
    src = tmp_path / "p.mlir"
    src.write_text(program)
    inputs = tmp_path / "in.npz"
    np.savez(inputs, **arrays)
    out = tmp_path / "out.npz"
    code = main(["run", str(src), "--inputs", str(inputs), "--out", str(out), "--plugin", plugin])
    err = capsys.readouterr().err
    result = {}
    if out.exists():
        with np.load(out) as z:
            result = {k: z[k] for k in z.files}
    return code, result, err


@pytest.mark.parametrize("name", sorted(MANIFEST))
def test_every_corpus_program_runs_and_matches(tmp_path, backend, capsys, name):
    entry = MANIFEST[name]
    data = collective_arrays(name)
    code, got, err = _run(tmp_path, (CORPUS / "collectives" / f"{name}.mlir").read_text(), data, backend, capsys)
    assert code == 0, err
    expected = {k: v for k, v in data.items() if "_out" in k} if entry["kind"] == "replica" else \
        {k: v for k, v in data.items() if k.startswith("out")}
    assert sorted(got) == sorted(expected)
    for key, want in expected.items():
        j = int(key.rsplit("out", 1)[1])
        assert_output(got[key], want, entry["tolerance"][j], f"{name} {key}")


def test_gspmd_shard_map_with_bf16_bits(tmp_path, backend, capsys):
    x = (np.arange(8, dtype=np.float32).reshape(4, 2) / 4).astype(ml_dtypes.bfloat16)
    code, got, err = _run(tmp_path, GSPMD, {"in0": x.view(np.uint16)}, backend, capsys)
    assert code == 0, err
    shards = np.split(x.astype(np.float32), 2)
    assert got["out0"].dtype == np.uint16  # bf16 comes back as its bits
    np.testing.assert_array_equal(got["out0"].view(ml_dtypes.bfloat16).astype(np.float32),
                                  np.concatenate([shards[1], shards[0]]))
    np.testing.assert_allclose(got["out1"].view(ml_dtypes.bfloat16).astype(np.float32), x.astype(np.float32).sum(0),
                               rtol=1e-2)


def test_bad_inputs_and_programs_that_need_propagation(tmp_path, capsys):
    text = (CORPUS / "collectives" / "psum_f32.mlir").read_text()
    data = {k: v for k, v in collective_arrays("psum_f32").items() if "_in" in k}
    missing = {k: v for k, v in data.items() if k != "r3_in0"}
    code, _, err = _run(tmp_path, text, missing, "reference", capsys)
    assert code == 3 and "no inputs for process 3" in err
    code, _, err = _run(tmp_path, text, {**data, "in0": data["r0_in0"]}, "reference", capsys)
    assert code == 3 and "unexpected array 'in0'" in err
    code, _, err = _run(tmp_path, text, {**data, "r1_in0": data["r1_in0"][:4]}, "reference", capsys)
    assert code == 3 and "r1 input 0" in err and "float32[8]" in err
    # A global program takes its global inputs, not one list per partition.
    code, _, err = _run(tmp_path, JIT_SHARDED, {"p0_in0": np.ones(4, np.float32), "p1_in0": np.ones(4, np.float32)},
                        "reference", capsys)
    assert code == 3 and "@main takes 2 arguments but 0 inputs were given" in err
    with_collective = JIT_SHARDED.replace("%6 = stablehlo.tanh %arg0 : tensor<8x4xf32>", '%6 = "stablehlo.all_gather"(%arg0) <{all_gather_dim = 0 : i64, replica_groups = dense<[[0, 1, 2, 3]]> : tensor<1x4xi64>}> : (tensor<8x4xf32>) -> tensor<8x4xf32>')
    code, _, err = _run(tmp_path, with_collective, _jit_sharded_inputs(), "reference", capsys)
    assert code == 1 and "stablehlo.all_gather" in err and "sharding propagation" in err


# What JAX 0.10.2 emitted for jax.jit(f) over an 8x4 array sharded P("x", None) and a replicated
# one on a 4-device mesh (f: a sharding constraint, elementwise ops, a product and a reduction).
JIT_SHARDED = """module @jit_f attributes {mhlo.num_partitions = 4 : i32, mhlo.num_replicas = 1 : i32} {
  sdy.mesh @mesh = <["x"=4]> {stablehlo.mesh = {axes = [{name = "x", size = 4 : i64}]}}
  func.func public @main(%arg0: tensor<8x4xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"x"}, {}]>}, %arg1: tensor<8x4xf32> {sdy.sharding = #sdy.sharding<@mesh, [{}, {}]>}) -> (tensor<8x4xf32> {jax.result_info = "result[0]"}, tensor<8xf32> {jax.result_info = "result[1]"}) {
    %cst = stablehlo.constant dense<2.000000e+00> : tensor<f32>
    %0 = stablehlo.broadcast_in_dim %cst, dims = [] : (tensor<f32>) -> tensor<8x4xf32>
    %1 = stablehlo.multiply %arg0, %0 : tensor<8x4xf32>
    %cst_0 = stablehlo.constant dense<1.000000e+00> : tensor<f32>
    %2 = stablehlo.broadcast_in_dim %cst_0, dims = [] : (tensor<f32>) -> tensor<8x4xf32>
    %3 = stablehlo.add %1, %2 : tensor<8x4xf32>
    %4 = sdy.sharding_constraint %3 <@mesh, [{}, {"x"}]> : tensor<8x4xf32>
    %5 = stablehlo.maximum %4, %arg1 : tensor<8x4xf32>
    %6 = stablehlo.tanh %arg0 : tensor<8x4xf32>
    %7 = stablehlo.subtract %5, %6 : tensor<8x4xf32>
    %8 = stablehlo.transpose %arg0, dims = [1, 0] : (tensor<8x4xf32>) -> tensor<4x8xf32>
    %9 = stablehlo.dot_general %arg0, %8, contracting_dims = [1] x [0], precision = [DEFAULT, DEFAULT] : (tensor<8x4xf32>, tensor<4x8xf32>) -> tensor<8x8xf32>
    %cst_1 = stablehlo.constant dense<0.000000e+00> : tensor<f32>
    %10 = stablehlo.reduce(%9 init: %cst_1) applies stablehlo.add across dimensions = [1] : (tensor<8x8xf32>, tensor<f32>) -> tensor<8xf32>
    return %7, %10 : tensor<8x4xf32>, tensor<8xf32>
  }
}
"""


def _jit_sharded_inputs():
    return {"in0": np.arange(32, dtype=np.float32).reshape(8, 4) - 10, "in1": np.full((8, 4), 0.5, np.float32)}


@pytest.mark.parametrize("backend", ["numba_cpu", "reference"])
def test_a_jit_over_sharded_arrays_runs_once_on_the_global_arrays(tmp_path, backend, capsys):
    inputs = _jit_sharded_inputs()
    code, out, err = _run(tmp_path, JIT_SHARDED, inputs, backend, capsys)
    assert code == 0, err
    a = inputs["in0"]
    np.testing.assert_allclose(out["out0"], np.maximum(a * 2 + 1, 0.5) - np.tanh(a), rtol=2e-6, atol=1e-6)
    np.testing.assert_allclose(out["out1"], (a @ a.T).sum(axis=1), rtol=1e-6)
    # GSPMD's spelling of the same kind of program (older JAX): the same global view.
    gspmd = ('module @jit_f attributes {mhlo.num_partitions = 2 : i32, mhlo.num_replicas = 1 : i32} {\n'
             '  func.func public @main(%arg0: tensor<4xf32> {mhlo.sharding = "{devices=[2]<=[2]}"}) -> tensor<4xf32> {\n'
             '    %0 = stablehlo.add %arg0, %arg0 : tensor<4xf32>\n    return %0 : tensor<4xf32>\n  }\n}\n')
    code, out, err = _run(tmp_path, gspmd, {"in0": np.arange(4, dtype=np.float32)}, backend, capsys)
    assert code == 0 and out["out0"].tolist() == [0, 2, 4, 6], err
