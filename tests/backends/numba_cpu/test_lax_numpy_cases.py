"""Programs of JAX's lax_numpy_test.py that numba_cpu once failed, run on both of its tiers
(where the eager tier takes the program) and on the reference, against numpy: scatters of one
element (a rank-0 update, which the compiled tier once asked an array view of), scatters into a
transposed operand (the eager tier and the reference once wrote through a flat "view" of a copy
that kept the transposed strides, which numpy makes a copy, so the writes were lost), and a
complex one-dimensional correlation (``jnp.correlate`` of complex64)."""

from __future__ import annotations

import numpy as np
import pytest

from .test_lax_cases import _run_everywhere

_SET = """({
    ^bb0(%old: tensor<i32>, %new: tensor<i32>):
      stablehlo.return %new : tensor<i32>
    })"""

_ONE_ELEMENT = ("#stablehlo.scatter<inserted_window_dims = [0], scatter_dims_to_operand_dims = [0]>")

# -- a rank-0 update -------------------------------------------------------------------------------

# lax_numpy_test's testNonScalarRepeats1 (``x.at[i].set(v)``): the update is an argument.
SET_ONE = f"""func.func @main(%x: tensor<6xi32>, %i: tensor<1xi32>, %v: tensor<i32>) -> tensor<6xi32> {{
  %0 = "stablehlo.scatter"(%x, %i, %v) <{{indices_are_sorted = true, scatter_dimension_numbers = {_ONE_ELEMENT}, unique_indices = true}}> {_SET} : (tensor<6xi32>, tensor<1xi32>, tensor<i32>) -> tensor<6xi32>
  return %0 : tensor<6xi32>
}}
"""


@pytest.mark.parametrize("index", [0, 3, 5, 6, -1])
def test_scatter_of_a_rank_0_argument(compiler, index):
    """An index out of bounds skips the update."""
    x = np.arange(10, 16, dtype=np.int32)
    args = [x, np.array([index], np.int32), np.array(-7, np.int32)]
    expected = x.copy()
    if 0 <= index < 6:
        expected[index] = -7
    compiled, reference = _run_everywhere(compiler, SET_ONE, args, eager=True)
    for plugin, (out,) in (("numba_cpu", compiled), ("reference", reference)):
        np.testing.assert_array_equal(out, expected, err_msg=plugin)


# testPolyfit1: the permutation of an LU factorization's pivots (jnp.linalg.solve on numba_cpu),
# swapping two elements per step of a loop; each update is an element read from the carried
# array, so it is a computed rank-0 value, not an argument.
PIVOTS_TO_PERMUTATION = f"""func.func @main(%pivots: tensor<5xi32>) -> tensor<5xi32> {{
  %perm0 = stablehlo.iota dim = 0 : tensor<5xi32>
  %zero = stablehlo.constant dense<0> : tensor<i32>
  %r:2 = stablehlo.while(%i = %zero, %perm = %perm0) : tensor<i32>, tensor<5xi32>
  cond {{
    %n = stablehlo.constant dense<5> : tensor<i32>
    %c = stablehlo.compare LT, %i, %n, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
    stablehlo.return %c : tensor<i1>
  }} do {{
    %p1 = stablehlo.dynamic_slice %pivots, %i, sizes = [1] : (tensor<5xi32>, tensor<i32>) -> tensor<1xi32>
    %j = stablehlo.reshape %p1 : (tensor<1xi32>) -> tensor<i32>
    %a1 = stablehlo.dynamic_slice %perm, %i, sizes = [1] : (tensor<5xi32>, tensor<i32>) -> tensor<1xi32>
    %a = stablehlo.reshape %a1 : (tensor<1xi32>) -> tensor<i32>
    %b1 = stablehlo.dynamic_slice %perm, %j, sizes = [1] : (tensor<5xi32>, tensor<i32>) -> tensor<1xi32>
    %b = stablehlo.reshape %b1 : (tensor<1xi32>) -> tensor<i32>
    %at_i = stablehlo.broadcast_in_dim %i, dims = [] : (tensor<i32>) -> tensor<1xi32>
    %at_j = stablehlo.broadcast_in_dim %j, dims = [] : (tensor<i32>) -> tensor<1xi32>
    %s1 = "stablehlo.scatter"(%perm, %at_i, %b) <{{indices_are_sorted = true, scatter_dimension_numbers = {_ONE_ELEMENT}, unique_indices = true}}> {_SET} : (tensor<5xi32>, tensor<1xi32>, tensor<i32>) -> tensor<5xi32>
    %s2 = "stablehlo.scatter"(%s1, %at_j, %a) <{{indices_are_sorted = true, scatter_dimension_numbers = {_ONE_ELEMENT}, unique_indices = true}}> {_SET} : (tensor<5xi32>, tensor<1xi32>, tensor<i32>) -> tensor<5xi32>
    %one = stablehlo.constant dense<1> : tensor<i32>
    %next = stablehlo.add %i, %one : tensor<i32>
    stablehlo.return %next, %s2 : tensor<i32>, tensor<5xi32>
  }}
  return %r#1 : tensor<5xi32>
}}
"""


def test_scatter_of_computed_rank_0_values_in_a_loop(compiler):
    pivots = np.array([3, 1, 4, 4, 4], np.int32)
    expected = np.arange(5, dtype=np.int32)
    for i, j in enumerate(pivots):
        expected[i], expected[j] = expected[j], expected[i]
    compiled, reference = _run_everywhere(compiler, PIVOTS_TO_PERMUTATION, [pivots], eager=True)
    for plugin, (out,) in (("numba_cpu", compiled), ("reference", reference)):
        np.testing.assert_array_equal(out, expected, err_msg=plugin)


# -- a transposed operand --------------------------------------------------------------------------

# testPadFunction (jnp.pad with a function, which sets each axis's edges through a transpose):
# row 0 of x, column 0 of its transpose, becomes 10; then the last column, through a second
# scatter on the transposed array, becomes 20.
TRANSPOSED = f"""func.func @main(%x: tensor<3x4xi32>) -> tensor<3x4xi32> {{
  %t = stablehlo.transpose %x, dims = [1, 0] : (tensor<3x4xi32>) -> tensor<4x3xi32>
  %first = stablehlo.constant dense<0> : tensor<1xi32>
  %tens = stablehlo.constant dense<10> : tensor<4x1xi32>
  %0 = "stablehlo.scatter"(%t, %first, %tens) <{{indices_are_sorted = true, scatter_dimension_numbers = #stablehlo.scatter<update_window_dims = [0, 1], scatter_dims_to_operand_dims = [1]>, unique_indices = true}}> {_SET} : (tensor<4x3xi32>, tensor<1xi32>, tensor<4x1xi32>) -> tensor<4x3xi32>
  %1 = stablehlo.transpose %0, dims = [1, 0] : (tensor<4x3xi32>) -> tensor<3x4xi32>
  %2 = stablehlo.transpose %1, dims = [1, 0] : (tensor<3x4xi32>) -> tensor<4x3xi32>
  %last = stablehlo.constant dense<3> : tensor<1xi32>
  %twenties = stablehlo.constant dense<20> : tensor<1x3xi32>
  %3 = "stablehlo.scatter"(%2, %last, %twenties) <{{indices_are_sorted = true, scatter_dimension_numbers = #stablehlo.scatter<update_window_dims = [0, 1], scatter_dims_to_operand_dims = [0]>, unique_indices = true}}> {_SET} : (tensor<4x3xi32>, tensor<1xi32>, tensor<1x3xi32>) -> tensor<4x3xi32>
  %4 = stablehlo.transpose %3, dims = [1, 0] : (tensor<4x3xi32>) -> tensor<3x4xi32>
  return %4 : tensor<3x4xi32>
}}
"""


def test_scatter_into_a_transposed_operand(compiler):
    x = np.arange(12, dtype=np.int32).reshape(3, 4)
    expected = x.copy()
    expected[0, :] = 10
    expected[:, 3] = 20
    compiled, reference = _run_everywhere(compiler, TRANSPOSED, [x], eager=True)
    for plugin, (out,) in (("numba_cpu", compiled), ("reference", reference)):
        np.testing.assert_array_equal(out, expected, err_msg=plugin)


# -- a complex correlation -------------------------------------------------------------------------

# testConvolutions9 and testConvolutionsPreferredElementType9: jnp.correlate(x, y, "valid") of
# complex64, x of one element: one output feature, so the compiled tier's general loop (not the
# pixel-at-a-time one), whose multiply-adds once went through the integer intrinsics.
CORRELATE = """func.func @main(%x: tensor<1xcomplex<f32>>, %y: tensor<12xcomplex<f32>>) -> tensor<12xcomplex<f32>> {
  %0 = stablehlo.real %y : (tensor<12xcomplex<f32>>) -> tensor<12xf32>
  %1 = stablehlo.imag %y : (tensor<12xcomplex<f32>>) -> tensor<12xf32>
  %2 = stablehlo.negate %1 : tensor<12xf32>
  %3 = stablehlo.complex %0, %2 : tensor<12xcomplex<f32>>
  %4 = stablehlo.broadcast_in_dim %3, dims = [2] : (tensor<12xcomplex<f32>>) -> tensor<1x1x12xcomplex<f32>>
  %5 = stablehlo.broadcast_in_dim %x, dims = [2] : (tensor<1xcomplex<f32>>) -> tensor<1x1x1xcomplex<f32>>
  %6 = stablehlo.convolution(%4, %5) dim_numbers = [b, f, 0]x[o, i, 0]->[b, f, 0], window = {stride = [1], pad = [[0, 0]], lhs_dilate = [1], rhs_dilate = [1], reverse = [false]} {batch_group_count = 1 : i64, feature_group_count = 1 : i64} : (tensor<1x1x12xcomplex<f32>>, tensor<1x1x1xcomplex<f32>>) -> tensor<1x1x12xcomplex<f32>>
  %7 = stablehlo.reverse %6, dims = [2] : tensor<1x1x12xcomplex<f32>>
  %8 = stablehlo.reshape %7 : (tensor<1x1x12xcomplex<f32>>) -> tensor<12xcomplex<f32>>
  return %8 : tensor<12xcomplex<f32>>
}
"""


def test_complex_correlate(compiler):
    rng = np.random.default_rng(5)
    x = (rng.standard_normal(1) + 1j * rng.standard_normal(1)).astype(np.complex64)
    y = (rng.standard_normal(12) + 1j * rng.standard_normal(12)).astype(np.complex64)
    expected = np.correlate(x.astype(np.complex128), y.astype(np.complex128), "valid")
    # The eager tier takes no complex convolution.
    compiled, reference = _run_everywhere(compiler, CORRELATE, [x, y], eager=False)
    for plugin, (out,) in (("numba_cpu", compiled), ("reference", reference)):
        assert out.dtype == np.complex64 and out.shape == (12,), plugin
        np.testing.assert_allclose(out, expected, rtol=1e-6, atol=1e-6, err_msg=plugin)
