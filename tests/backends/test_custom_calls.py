"""Custom calls JAX emits for every backend (backends/stablehlo/custom_calls.py), on both
built-in plugins: ``jax.lax.approx_max_k`` / ``approx_min_k`` as XLA:CPU runs them, an exact
top-k."""

from __future__ import annotations

import numpy as np
import pytest

from pjrt_hub.backends.numba_cpu.compiler import NumbaCompiler
from pjrt_hub.backends.reference import ReferenceCompiler
from pjrt_hub.abi import CompileOptions, UnsupportedOpError

# jax.jit(lambda x: jax.lax.approx_min_k(x, 2, reduction_dimension=0)).lower(f32[6, 3]).as_text()
APPROX_MIN_K_DIM0 = """module @jit__lambda attributes {mhlo.num_partitions = 1 : i32, mhlo.num_replicas = 1 : i32} {
  func.func @top_k_lt_f32_comparator(%arg0: tensor<f32>, %arg1: tensor<f32>, %arg2: tensor<i32>, %arg3: tensor<i32>) -> tensor<i1> {
    %0 = stablehlo.compare LT, %arg0, %arg1 : (tensor<f32>, tensor<f32>) -> tensor<i1>
    stablehlo.return %0 : tensor<i1>
  }
  func.func public @main(%arg0: tensor<6x3xf32>) -> (tensor<2x3xf32> {jax.result_info = "result[0]"}, tensor<2x3xi32> {jax.result_info = "result[1]"}) {
    %0 = stablehlo.iota dim = 0 : tensor<6x3xi32>
    %c = stablehlo.constant dense<-1> : tensor<i32>
    %cst = stablehlo.constant dense<0x7F800000> : tensor<f32>
    %1:2 = stablehlo.custom_call @ApproxTopK(%arg0, %0, %cst, %c) {backend_config = "", called_computations = [@top_k_lt_f32_comparator], mhlo.backend_config = {aggregate_to_topk = true, is_fallback = true, recall_target = 0.949999988 : f32, reduction_dim = 0 : i64, reduction_input_size_override = -1 : i64, top_k = 2 : i64}} : (tensor<6x3xf32>, tensor<6x3xi32>, tensor<f32>, tensor<i32>) -> (tensor<2x3xf32>, tensor<2x3xi32>)
    return %1#0, %1#1 : tensor<2x3xf32>, tensor<2x3xi32>
  }
}
"""
# The same call as approx_max_k(x, 3) over the last dimension of f32[2, 8], called twice (the
# comparator is copied for each sort).
APPROX_MAX_K = """module @jit_f {
  func.func @top_k_gt_f32_comparator(%arg0: tensor<f32>, %arg1: tensor<f32>, %arg2: tensor<i32>, %arg3: tensor<i32>) -> tensor<i1> {
    %0 = stablehlo.compare GT, %arg0, %arg1 : (tensor<f32>, tensor<f32>) -> tensor<i1>
    stablehlo.return %0 : tensor<i1>
  }
  func.func public @main(%arg0: tensor<2x8xf32>) -> (tensor<2x3xf32>, tensor<2x3xi32>, tensor<2x3xf32>) {
    %0 = stablehlo.iota dim = 1 : tensor<2x8xi32>
    %c = stablehlo.constant dense<-1> : tensor<i32>
    %cst = stablehlo.constant dense<0xFF800000> : tensor<f32>
    %1:2 = stablehlo.custom_call @ApproxTopK(%arg0, %0, %cst, %c) {called_computations = [@top_k_gt_f32_comparator], mhlo.backend_config = {aggregate_to_topk = true, is_fallback = true, reduction_dim = 1 : i64, top_k = 3 : i64}} : (tensor<2x8xf32>, tensor<2x8xi32>, tensor<f32>, tensor<i32>) -> (tensor<2x3xf32>, tensor<2x3xi32>)
    %2 = stablehlo.negate %arg0 : tensor<2x8xf32>
    %3:2 = stablehlo.custom_call @ApproxTopK(%2, %0, %cst, %c) {called_computations = [@top_k_gt_f32_comparator], mhlo.backend_config = {aggregate_to_topk = true, is_fallback = true, reduction_dim = 1 : i64, top_k = 3 : i64}} : (tensor<2x8xf32>, tensor<2x8xi32>, tensor<f32>, tensor<i32>) -> (tensor<2x3xf32>, tensor<2x3xi32>)
    return %1#0, %1#1, %3#0 : tensor<2x3xf32>, tensor<2x3xi32>, tensor<2x3xf32>
  }
}
"""


@pytest.fixture(params=["reference", "numba_cpu"])
def compile_run(request, tmp_path):
    def run(text, *args):
        if request.param == "reference":
            return ReferenceCompiler().compile(text, CompileOptions()).run(list(args))
        return NumbaCompiler(cache_dir=tmp_path).compile(text).run(list(args))
    return run


def test_approx_min_k_along_the_first_dimension(compile_run):
    x = np.array([[5, 1, 0], [2, 2, 9], [7, -1, 3], [2, 8, 3], [-4, 1, 6], [0, 0, 0]], np.float32)
    values, indices = compile_run(APPROX_MIN_K_DIM0, x)
    np.testing.assert_array_equal(indices, [[4, 2, 0], [5, 5, 5]])  # ties keep the lower index
    np.testing.assert_array_equal(values, np.take_along_axis(x, indices, axis=0))


def test_approx_max_k_ranks_nan_first_and_ties_by_index(compile_run):
    x = np.array([[1, 3, 3, np.nan, 2, 3, 0, -1], [0.5, -0.0, 0.0, 4, 4, -2, 9, 1]], np.float32)
    values, indices, negated = compile_run(APPROX_MAX_K, x)
    np.testing.assert_array_equal(indices, [[3, 1, 2], [6, 3, 4]])
    assert np.isnan(values[0, 0]) and values[0, 1:].tolist() == [3, 3] and values[1].tolist() == [9, 4, 4]
    # -NaN ranks last, +0 above -0 (the total order).
    np.testing.assert_array_equal(negated, [[1, 0, -1], [2, 0, 0]])
    assert np.signbit(negated).tolist() == [[False, True, True], [False, False, True]]


def test_a_sort_whose_comparator_orders_no_nan_still_permutes(compile_run):
    """A bare GT meets NaNs: the order is the sort's business, but it stays a permutation."""
    text = """func.func @main(%x: tensor<9xf32>, %i: tensor<9xi32>) -> (tensor<9xf32>, tensor<9xi32>) {
      %0:2 = "stablehlo.sort"(%x, %i) ({
      ^bb0(%a: tensor<f32>, %b: tensor<f32>, %c: tensor<i32>, %d: tensor<i32>):
        %1 = stablehlo.compare GT, %a, %b : (tensor<f32>, tensor<f32>) -> tensor<i1>
        stablehlo.return %1 : tensor<i1>
      }) {dimension = 0 : i64, is_stable = true} : (tensor<9xf32>, tensor<9xi32>) -> (tensor<9xf32>, tensor<9xi32>)
      return %0#0, %0#1 : tensor<9xf32>, tensor<9xi32>
    }"""
    x = np.array([1, np.nan, 3, 2, np.nan, 0, 3, -1, 5], np.float32)
    values, indices = compile_run(text, x, np.arange(9, dtype=np.int32))
    assert sorted(indices.tolist()) == list(range(9))
    np.testing.assert_array_equal(values, x[indices])


# The custom calls of jnp.linalg.qr off XLA's platforms (and of eigh, as pjrt_hub.jax lowers it),
# as JAX 0.10 emits them, batched: LAPACK's answers on both backends.
LINALG = """func.func @main(%a: tensor<2x5x3xf32>, %w: tensor<3x5xf64>, %s: tensor<2x4x4xcomplex<f32>>)
    -> (tensor<2x5x3xf32>, tensor<2x3xf32>, tensor<2x5x3xf32>, tensor<3x5xf64>, tensor<3xf64>,
        tensor<2x4x4xcomplex<f32>>, tensor<2x4xf32>, tensor<2x4x4xcomplex<f32>>, tensor<2x4xf32>) {
  %0:2 = stablehlo.custom_call @Qr(%a) {api_version = 1 : i32} : (tensor<2x5x3xf32>) -> (tensor<2x5x3xf32>, tensor<2x3xf32>)
  %1 = stablehlo.custom_call @ProductOfElementaryHouseholderReflectors(%0#0, %0#1) {api_version = 1 : i32} : (tensor<2x5x3xf32>, tensor<2x3xf32>) -> tensor<2x5x3xf32>
  %2:2 = stablehlo.custom_call @Qr(%w) {api_version = 1 : i32} : (tensor<3x5xf64>) -> (tensor<3x5xf64>, tensor<3xf64>)
  %3:2 = stablehlo.custom_call @Eigh(%s) {backend_config = "1,1,100,1e-6"} : (tensor<2x4x4xcomplex<f32>>) -> (tensor<2x4x4xcomplex<f32>>, tensor<2x4xf32>)
  %4:2 = stablehlo.custom_call @Eigh(%s) {backend_config = "0,1,100,1e-6"} : (tensor<2x4x4xcomplex<f32>>) -> (tensor<2x4x4xcomplex<f32>>, tensor<2x4xf32>)
  return %0#0, %0#1, %1, %2#0, %2#1, %3#0, %3#1, %4#0, %4#1 : tensor<2x5x3xf32>, tensor<2x3xf32>, tensor<2x5x3xf32>, tensor<3x5xf64>, tensor<3xf64>, tensor<2x4x4xcomplex<f32>>, tensor<2x4xf32>, tensor<2x4x4xcomplex<f32>>, tensor<2x4xf32>
}
"""


def test_qr_and_eigh_custom_calls_give_lapacks_answers(compile_run):
    rng = np.random.default_rng(5)
    a = rng.standard_normal((2, 5, 3)).astype(np.float32)
    w = rng.standard_normal((3, 5))
    s = (rng.standard_normal((2, 4, 4)) + 1j * rng.standard_normal((2, 4, 4))).astype(np.complex64)
    packed, taus, q, wide, wide_taus, v_low, e_low, v_up, e_up = compile_run(LINALG, a, w, s)
    r = np.triu(packed)[:, :3, :]
    np.testing.assert_allclose(q @ r, a, atol=1e-5)
    np.testing.assert_allclose(np.swapaxes(q, -1, -2) @ q, np.broadcast_to(np.eye(3), (2, 3, 3)), atol=1e-5)
    assert taus.shape == (2, 3) and np.all(np.abs(np.diagonal(r, axis1=-2, axis2=-1)) > 0)
    lapack_r = np.linalg.qr(w, mode="r")
    np.testing.assert_allclose(np.abs(np.triu(wide)), np.abs(lapack_r), atol=1e-12)
    assert wide_taus.shape == (3,)
    for v, e, uplo in ((v_low, e_low, "L"), (v_up, e_up, "U")):
        expected = np.linalg.eigvalsh(s.astype(np.complex128), UPLO=uplo)
        np.testing.assert_allclose(e, expected, rtol=1e-5, atol=1e-5)
        half = np.tril(s, -1) if uplo == "L" else np.swapaxes(np.triu(s, 1), -1, -2).conj()
        diagonal = np.real(np.diagonal(s, axis1=-2, axis2=-1))[..., None] * np.eye(4)  # its imaginary part is not read
        hermitian = half + np.swapaxes(half, -1, -2).conj() + diagonal
        np.testing.assert_allclose(hermitian @ v, v * e[:, None, :], atol=1e-4)


def test_an_unknown_custom_call_is_refused_by_name(compile_run):
    text = """func.func @main(%a: tensor<3x3xf32>) -> tensor<3x3xf32> {
  %0 = stablehlo.custom_call @Schur(%a) : (tensor<3x3xf32>) -> tensor<3x3xf32>
  return %0 : tensor<3x3xf32>
}"""
    with pytest.raises(UnsupportedOpError, match="Schur"):
        compile_run(text, np.eye(3, dtype=np.float32))


# jax.jit(f).lower(f32[]) with f(x) = (lax.dce_sink(x + 1, prevent_mlir_dce=True), x)[1], and the
# same sink of a value made inside a loop's body.
DCE_SINK = """module @jit_f attributes {mhlo.num_partitions = 1 : i32, mhlo.num_replicas = 1 : i32} {
  func.func public @main(%arg0: tensor<f32>) -> (tensor<f32> {jax.result_info = "result"}) {
    %cst = stablehlo.constant dense<1.000000e+00> : tensor<f32>
    %0 = stablehlo.add %arg0, %cst : tensor<f32>
    stablehlo.custom_call @dce_sink(%0) {backend_config = "", has_side_effect = true, mhlo.backend_config = {}, operand_layouts = [dense<> : tensor<0xindex>], result_layouts = []} : (tensor<f32>) -> ()
    %c = stablehlo.constant dense<0> : tensor<i32>
    %c3 = stablehlo.constant dense<3> : tensor<i32>
    %1:2 = stablehlo.while(%i = %c, %acc = %arg0) : tensor<i32>, tensor<f32>
    cond {
      %2 = stablehlo.compare LT, %i, %c3 : (tensor<i32>, tensor<i32>) -> tensor<i1>
      stablehlo.return %2 : tensor<i1>
    } do {
      %3 = stablehlo.multiply %acc, %acc : tensor<f32>
      stablehlo.custom_call @dce_sink(%3) {has_side_effect = true} : (tensor<f32>) -> ()
      %one = stablehlo.constant dense<1> : tensor<i32>
      %4 = stablehlo.add %i, %one : tensor<i32>
      %5 = stablehlo.add %acc, %cst : tensor<f32>
      stablehlo.return %4, %5 : tensor<i32>, tensor<f32>
    }
    %6 = stablehlo.add %arg0, %1#1 : tensor<f32>
    return %6 : tensor<f32>
  }
}
"""


def test_dce_sink_only_keeps_values_alive(compile_run):
    """``jax.lax.dce_sink`` has no result and no effect a program can see: the program runs as
    if the call were not there."""
    (out,) = compile_run(DCE_SINK, np.float32(2.5))
    assert out.dtype == np.float32 and float(out) == 2.5 + 5.5


def test_dce_sink_leaves_the_other_ops():
    from pjrt_hub.backends.stablehlo import parse_module
    from pjrt_hub.backends.stablehlo.custom_calls import lower_custom_calls

    before = parse_module(DCE_SINK)
    after = lower_custom_calls(before)
    names = [op.name for op in before.walk()]
    assert names.count("stablehlo.custom_call") == 2
    assert [op.name for op in after.walk()] == [n for n in names if n != "stablehlo.custom_call"]
