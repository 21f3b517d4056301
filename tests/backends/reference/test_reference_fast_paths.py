"""The reference interpreter's shortcuts give the results of the plain rules, bit for bit.

Float32 ops computed in float32 itself (correctly rounded or exact ones) and ufuncs run through
their float64 loop must equal computing in float64 and rounding once; an op writing into an
operand nothing reads afterwards must never touch an input, a constant, a value still read
later, or an array a view shares; a reduction done by numpy must keep XLA's signed zeros, NaN
propagation and integer wrap-around.
"""

from __future__ import annotations

import numpy as np
import pytest

from pjrt_hub.backends.reference import elementwise as ew

from ref_run import run


def _bits(x: np.ndarray) -> np.ndarray:
    return np.asarray(x).view(np.uint32)


def _sample(n: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    bits = rng.integers(0, 2**32, n, dtype=np.uint64).astype(np.uint32).view(np.float32)
    specials = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1e-45, -1e-45, 1.0, -1.0, 3.4e38], np.float32)
    return np.concatenate([bits, rng.normal(size=n).astype(np.float32), specials])


@pytest.mark.parametrize("fn", [np.add, np.subtract, np.multiply, np.divide, np.fmod])
def test_exact_binary_ops_in_float32_equal_float64_rounded_once(fn):
    a, b = _sample(200_000, 1), _sample(200_000, 2)
    with np.errstate(all="ignore"):
        native = ew.compute_float(fn, a, b, exact=True)
        wide = fn(a.astype(np.float64), b.astype(np.float64)).astype(np.float32)
    same = (_bits(native) == _bits(wide)) | (np.isnan(native) & np.isnan(wide))
    assert same.all(), f"{fn.__name__}({a[~same][0]!r}, {b[~same][0]!r})"


@pytest.mark.parametrize("fn", [np.sqrt, np.exp, np.log, np.tanh, np.expm1])
def test_unary_ops_through_the_float64_loop_equal_float64_rounded_once(fn):
    x = _sample(200_000, 3)
    with np.errstate(all="ignore"):
        fast = ew.compute_float(fn, x, exact=fn is np.sqrt)
        wide = fn(x.astype(np.float64)).astype(np.float32)
    same = (_bits(fast) == _bits(wide)) | (np.isnan(fast) & np.isnan(wide))
    assert same.all()


CHAIN = """
func.func @main(%x: tensor<4x6xf32>, %y: tensor<4x6xf32>) -> (tensor<4x6xf32>, tensor<24xf32>, tensor<4x6xf32>, tensor<4x6xf32>) {
  %c = stablehlo.constant dense<2.0> : tensor<4x6xf32>
  %0 = stablehlo.multiply %x, %c : tensor<4x6xf32>
  %1 = stablehlo.exponential %0 : tensor<4x6xf32>
  %2 = stablehlo.reshape %1 : (tensor<4x6xf32>) -> tensor<24xf32>
  %3 = stablehlo.negate %1 : tensor<4x6xf32>
  %4 = stablehlo.add %3, %y : tensor<4x6xf32>
  %5 = stablehlo.abs %4 : tensor<4x6xf32>
  %6 = stablehlo.add %c, %c : tensor<4x6xf32>
  return %5, %2, %6, %c : tensor<4x6xf32>, tensor<24xf32>, tensor<4x6xf32>, tensor<4x6xf32>
}
"""


def test_results_written_into_operands_never_clobber_what_is_still_needed():
    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(4, 6)).astype(np.float32), rng.normal(size=(4, 6)).astype(np.float32)
    x0, y0 = x.copy(), y.copy()
    for _ in range(2):  # twice: the constant must come back unchanged
        out, flat, doubled, constant = run(CHAIN, x, y)
        e = np.exp(x0.astype(np.float64) * 2).astype(np.float32)
        # %1 is read by the reshape (a view, returned) and by negate: negate must not write in it.
        np.testing.assert_array_equal(flat, e.reshape(-1))
        np.testing.assert_array_equal(out, np.abs(-e + y0))
        np.testing.assert_array_equal(doubled, np.full((4, 6), 4.0, np.float32))
        np.testing.assert_array_equal(constant, np.full((4, 6), 2.0, np.float32))
    np.testing.assert_array_equal(x, x0)
    np.testing.assert_array_equal(y, y0)
    # Outputs are the caller's: writable, and no two share storage.
    assert all(o.flags.writeable for o in (out, flat, doubled, constant))
    assert not np.shares_memory(doubled, constant)


def test_an_argument_returned_as_it_is_comes_back_as_a_copy():
    text = """
    func.func @main(%x: tensor<3xf32>) -> (tensor<3xf32>, tensor<3xf32>) {
      %0 = stablehlo.negate %x : tensor<3xf32>
      return %x, %0 : tensor<3xf32>, tensor<3xf32>
    }
    """
    x = np.array([1, 2, 3], np.float32)
    same, negated = run(text, x)
    assert not np.shares_memory(same, x) and same.tolist() == [1, 2, 3] and negated.tolist() == [-1, -2, -3]


def _reduce(op: str, element: str, shape: str, dims: str, init: str, out: str) -> str:
    return f"""
    func.func @main(%x: tensor<{shape}x{element}>) -> tensor<{out}{element}> {{
      %init = stablehlo.constant dense<{init}> : tensor<{element}>
      %0 = stablehlo.reduce(%x init: %init) applies stablehlo.{op} across dimensions = [{dims}] : (tensor<{shape}x{element}>, tensor<{element}>) -> tensor<{out}{element}>
      return %0 : tensor<{out}{element}>
    }}
    """


def test_float_max_and_min_reductions_order_signed_zeros_and_propagate_nan():
    # numpy's reductions return whichever zero comes first: [-0, +0] and [+0, -0] catch it.
    x = np.array([[-0.0, 0.0, -1.0], [-0.0, -0.0, -3.0], [0.0, np.nan, 5.0], [0.0, -0.0, 1.0]], np.float32)
    mx = run(_reduce("maximum", "f32", "4x3", "1", "0xFF800000", "4x"), x)
    assert mx[0] == 0 and not np.signbit(mx[0]) and mx[1] == 0 and np.signbit(mx[1])
    assert np.isnan(mx[2]) and mx[3] == 1
    mn = run(_reduce("minimum", "f32", "4x3", "1", "0x7F800000", "4x"), -x)  # rows [+0 -0 1], [+0 +0 3]...
    assert mn[0] == 0 and np.signbit(mn[0]) and mn[1] == 0 and not np.signbit(mn[1])
    assert np.isnan(mn[2]) and mn[3] == -1
    zeros = np.array([[0.0, -0.0, 0.0], [0.0, 0.0, 0.0]], np.float32)
    mn = run(_reduce("minimum", "f32", "2x3", "1", "0x7F800000", "2x"), zeros)
    assert np.signbit(mn).tolist() == [True, False]


def test_integer_and_bool_reductions_wrap_and_combine_the_init():
    x = np.full((2, 3, 100), 100, np.int8)
    got = run(_reduce("add", "i8", "2x3x100", "0, 2", "7", "3x"), x)
    wrapped = int(np.array(200 * 100 + 7).astype(np.int8))
    assert got.dtype == np.int8 and got.tolist() == [wrapped] * 3
    flags = np.array([[True, False], [False, False]])
    assert run(_reduce("or", "i1", "2x2", "1", "false", "2x"), flags).tolist() == [True, False]
    assert run(_reduce("add", "i1", "2x2", "1", "false", "2x"), flags).tolist() == [True, False]
    assert run(_reduce("and", "i1", "2x2", "0", "true", "2x"), flags).tolist() == [False, False]
    u = np.array([[0xFFFFFFFF, 2], [3, 4]], np.uint32)
    assert run(_reduce("multiply", "ui32", "2x2", "0, 1", "1", ""), u).tolist() == (0xFFFFFFFF * 24) % 2**32


def test_float_sum_reduction_adds_the_init_after_the_elements():
    x = np.array([[1e8, 1.0, -1e8]], np.float32)
    got = run(_reduce("add", "f32", "1x3", "1", "0.5", "1x"), x)
    assert got.dtype == np.float32 and got.shape == (1,)
    assert got[0] in (np.float32(0.5), np.float32(1.5))  # pairwise order may drop the 1.0 against 1e8
