"""Accuracy of the vectorisable float32 math kernels over the whole float32 range, and the
bit-level semantics of the integer intrinsics."""

from __future__ import annotations

import math

import numpy as np
import pytest

numba = pytest.importorskip("numba")

from pjrt_hub.backends.numba_cpu import intrinsics as intr  # noqa: E402
from pjrt_hub.backends.numba_cpu import vecmath as vm  # noqa: E402

SPECIALS = np.array(
    [0.0, -0.0, np.inf, -np.inf, np.nan, 1e-45, -1e-45, 1.17e-38, -1.17e-38, 3.4e38, -3.4e38,
     1.0, -1.0, 0.5, 88.72, 88.73, -87.3, -103.9, -104.0, 89.0, 1e-7, -1e-7],
    np.float32,
)


def sample_f32(n=1_000_000, seed=0):
    """Random bit patterns (every exponent, denormals, NaNs) plus dense grids near zero."""
    rng = np.random.default_rng(seed)
    bits = rng.integers(0, 2**32, n, dtype=np.uint64).astype(np.uint32)
    return np.concatenate([
        bits.view(np.float32),
        np.linspace(-120, 120, 400_001, dtype=np.float32),
        np.linspace(-3, 3, 400_001, dtype=np.float32),
        SPECIALS,
    ])


def ulp_error(got, ref64):
    """|got - ref| in float32 ulps of the reference; matching inf/NaN counts as 0."""
    with np.errstate(all="ignore"):
        ref32 = ref64.astype(np.float32)
        spacing = np.spacing(np.abs(ref32)).astype(np.float64)
        err = np.abs(got.astype(np.float64) - ref64) / spacing
    same = (np.isnan(got) & np.isnan(ref64)) | ((got == ref64) & np.isinf(ref64))
    err[same] = 0.0
    overflow = np.isfinite(ref64) & np.isinf(ref32)
    err[overflow] = np.where(np.isinf(got[overflow]) & (np.sign(got[overflow]) == np.sign(ref64[overflow])), 0, np.inf)
    err[np.isnan(err)] = np.inf
    return err


@numba.njit(error_model="numpy")
def _apply_all(x, out):
    for i in range(x.size):
        v = x[i]
        out[0, i] = vm.exp_f32(v)
        out[1, i] = vm.log_f32(v)
        out[2, i] = vm.tanh_f32(v)
        out[3, i] = vm.expm1_f32(v)
        out[4, i] = vm.log1p_f32(v)
        out[5, i] = vm.logistic_f32(v)


@pytest.fixture(scope="module")
def unary_results():
    x = sample_f32()
    out = np.empty((6, x.size), np.float32)
    _apply_all(x, out)
    return x, out


@pytest.mark.parametrize("row, name, ref, max_ulp", [
    (0, "exp", np.exp, 1.5),
    (1, "log", np.log, 1.0),
    (2, "tanh", np.tanh, 1.5),
    (3, "expm1", np.expm1, 2.5),
    (4, "log1p", np.log1p, 2.5),
    (5, "logistic", lambda x: 1.0 / (1.0 + np.exp(-x)), 3.0),
])
def test_unary_accuracy_over_float32_range(unary_results, row, name, ref, max_ulp):
    x, out = unary_results
    with np.errstate(all="ignore"):
        expected = ref(x.astype(np.float64))
    err = ulp_error(out[row], expected)
    worst = int(np.argmax(err))
    assert err[worst] <= max_ulp, f"{name}({x[worst]!r}) = {out[row][worst]!r}, expected {expected[worst]!r}"


def test_exp_edge_cases(unary_results):
    x, out = unary_results
    got = dict(zip(x[-len(SPECIALS):].tolist(), out[0][-len(SPECIALS):].tolist()))
    assert got[0.0] == 1.0 and got[np.inf] == np.inf and got[-np.inf] == 0.0
    assert math.isinf(got[float(np.float32(88.73))])
    # exp(-103.9) is a float32 denormal, not flushed to zero.
    assert 0.0 < got[float(np.float32(-103.9))] < 1.2e-38


def test_log_edge_cases(unary_results):
    x, out = unary_results
    got = out[1][-len(SPECIALS):]
    specials = x[-len(SPECIALS):]
    assert got[specials.tolist().index(0.0)] == -np.inf
    assert np.isnan(got[specials.tolist().index(-1.0)])
    assert got[specials.tolist().index(np.inf)] == np.inf
    # The smallest denormal still has a finite logarithm.
    assert got[specials.tolist().index(float(np.float32(1e-45)))] == pytest.approx(math.log(1.401298464324817e-45), rel=1e-6)


@numba.njit(error_model="numpy")
def _apply_pow(x, y, out):
    for i in range(x.size):
        out[i] = vm.pow_f32(x[i], y[i])


def test_pow_accuracy_and_ieee_special_cases():
    rng = np.random.default_rng(1)
    n = 500_000
    with np.errstate(over="ignore"):
        x = np.concatenate([rng.uniform(0, 3, n), rng.uniform(-3, 3, n), np.exp(rng.uniform(-100, 100, n))]).astype(np.float32)
    y = np.concatenate([rng.uniform(-30, 30, n), np.round(rng.uniform(-20, 20, n)), rng.uniform(-1.5, 1.5, n)]).astype(np.float32)
    special = np.array([0.0, -0.0, 1.0, -1.0, 0.5, -0.5, 2.0, -2.0, np.inf, -np.inf, np.nan, 3.0, -3.0, 1e-45, 1e38], np.float32)
    gx, gy = np.meshgrid(special, special)
    x = np.concatenate([x, gx.ravel()])
    y = np.concatenate([y, gy.ravel()])
    out = np.empty_like(x)
    _apply_pow(x, y, out)
    with np.errstate(all="ignore"):
        expected = np.power(x.astype(np.float64), y.astype(np.float64))
    err = ulp_error(out, expected)
    worst = int(np.argmax(err))
    assert err[worst] <= 1.0, f"pow({x[worst]!r}, {y[worst]!r}) = {out[worst]!r}, expected {expected[worst]!r}"
    # Signs of zero results follow IEEE pow: (-0)**3 = -0, (-0)**2 = +0.
    assert np.signbit(vm.pow_f32(np.float32(-0.0), np.float32(3.0)))
    assert not np.signbit(vm.pow_f32(np.float32(-0.0), np.float32(2.0)))


@numba.njit(error_model="numpy")
def _apply_erf(x, out):
    for i in range(x.size):
        out[0, i] = vm.erf_f32(x[i])
        out[1, i] = vm.erfc_f32(x[i])


def test_erf_and_erfc_accuracy_over_float32_range():
    special = pytest.importorskip("scipy.special")
    x = sample_f32(300_000)
    x = np.concatenate([x, np.linspace(-12, 12, 200_001, dtype=np.float32), np.float32([1.0, -1.0, 10.05, 10.06])])
    out = np.empty((2, x.size), np.float32)
    _apply_erf(x, out)
    with np.errstate(all="ignore"):
        for row, name, ref in ((0, "erf", special.erf), (1, "erfc", special.erfc)):
            expected = ref(x.astype(np.float64))
            err = ulp_error(out[row], expected)
            worst = int(np.argmax(err))
            assert err[worst] <= 1.0, f"{name}({x[worst]!r}) = {out[row][worst]!r}, expected {expected[worst]!r}"
    assert out[0][np.isinf(x) & (x > 0)].tolist() == [1.0] and out[0][np.isinf(x) & (x < 0)].tolist() == [-1.0]
    assert out[1][np.isinf(x) & (x > 0)].tolist() == [0.0] and out[1][np.isinf(x) & (x < 0)].tolist() == [2.0]
    assert np.isnan(out[:, np.isnan(x)]).all()
    # erfc's tail reaches the float32 denormals rather than stopping at the normal range.
    assert 0.0 < vm.erfc_f32(np.float32(10.0)) < 1.2e-38


def test_erf_erfc_loop_is_vectorised():
    """The point of the polynomial forms: a loop over them compiles to SIMD code, where libm's
    erf kept the whole fused loop scalar."""

    @numba.njit(error_model="numpy")
    def loop(x, out):
        for i in range(x.size):
            out[i] = vm.erfc_f32(x[i]) + vm.erf_f32(x[i])

    x = np.linspace(-3, 3, 64, dtype=np.float32)
    loop(x, np.empty_like(x))
    llvm = next(iter(loop.inspect_llvm().values()))
    assert "x double>" in llvm and "@erf" not in llvm


def test_erf_inv_inverts_erf():
    xs = np.linspace(-0.999999, 0.999999, 2001)
    for x in xs:
        assert math.erf(vm.erf_inv_f(x)) == pytest.approx(x, rel=1e-12, abs=1e-15)
    assert vm.erf_inv_f(1.0) == np.inf and vm.erf_inv_f(-1.0) == -np.inf
    assert math.isnan(vm.erf_inv_f(1.5)) and vm.erf_inv_f(0.0) == 0.0


# -- sin, cos, tan, cbrt, atan2, fmod: float32 without libm ------------------------------------


@numba.njit(error_model="numpy")
def _apply_trig(x, y, out):
    for i in range(x.size):
        out[0, i] = vm.sin_f32(x[i])
        out[1, i] = vm.cos_f32(x[i])
        out[2, i] = vm.tan_f32(x[i])
        out[3, i] = vm.cbrt_f32(x[i])
        out[4, i] = vm.atan2_f32(x[i], y[i])
        out[5, i] = vm.fmod_f32(x[i], y[i])
        out[6, i] = vm.asin_f32(x[i])
        out[7, i] = vm.acos_f32(x[i])
        out[8, i] = vm.atan_f32(x[i])
        out[9, i] = vm.sinh_f32(x[i])
        out[10, i] = vm.cosh_f32(x[i])
        out[11, i] = vm.asinh_f32(x[i])
        out[12, i] = vm.acosh_f32(x[i])
        out[13, i] = vm.atanh_f32(x[i])


_TRIG = (("sin", np.sin), ("cos", np.cos), ("tan", np.tan), ("cbrt", np.cbrt))
_NAMES = ["sin", "cos", "tan", "cbrt", "atan2", "fmod", "asin", "acos", "atan", "sinh", "cosh", "asinh", "acosh", "atanh"]


def _trig_results(x, y):
    out = np.empty((len(_NAMES), x.size), np.float32)
    _apply_trig(x, y, out)
    with np.errstate(all="ignore"):
        x64, y64 = x.astype(np.float64), y.astype(np.float64)
        expected = [ref(x64) for _, ref in _TRIG] + [np.arctan2(x64, y64), np.fmod(x64, y64), np.arcsin(x64),
                                                      np.arccos(x64), np.arctan(x64), np.sinh(x64), np.cosh(x64),
                                                      np.arcsinh(x64), np.arccosh(x64), np.arctanh(x64)]
    return out, expected


def test_trigonometry_cbrt_within_an_ulp_and_fmod_exact_over_float32_range():
    """Random bit patterns reach every exponent, so the range reduction of sin, cos and tan is
    tested up to 3.4e38, and fmod at every quotient size; the grids add the ordinary range."""
    rng = np.random.default_rng(7)
    x = np.concatenate([sample_f32(400_000), np.linspace(-1, 1, 200_001, dtype=np.float32),
                        np.linspace(0.99, 1.01, 100_001, dtype=np.float32), np.linspace(85, 95, 10_001, dtype=np.float32)])
    y = sample_f32(400_000, seed=8)
    y = np.concatenate([y, rng.uniform(-4, 4, x.size - y.size).astype(np.float32)])
    y = y[rng.permutation(y.size)]
    out, expected = _trig_results(x, y)
    for row, name in enumerate(_NAMES):
        if name == "fmod":
            continue
        err = ulp_error(out[row], expected[row])
        worst = int(np.argmax(err))
        assert err[worst] <= 1.0, f"{name}({x[worst]!r}, {y[worst]!r}) = {out[row][worst]!r}, expected {expected[row][worst]!r}"
    same = (out[5] == expected[5]) | (np.isnan(out[5]) & np.isnan(expected[5]))
    assert same.all(), f"fmod{(x[~same][0], y[~same][0])} = {out[5][~same][0]!r}, expected {expected[5][~same][0]!r}"


def test_signed_zeros_infinities_and_nans_as_ieee_and_libm():
    """Every pair of special values: the bits (sign of zero included) of the float64 libm result
    rounded to float32, NaN where it is NaN."""
    special = np.float32([0.0, -0.0, 1.0, -1.0, 3.0, -2.5, np.inf, -np.inf, np.nan, 1e-45, -1e-45, 3.4e38, -8.0,
                          np.pi / 2, -np.pi, 1.3, 7.0, 0.5, -0.5, 1.0000001, -0.99999994, 89.4, -89.5, 1e-30])
    gx, gy = np.meshgrid(special, special)
    x, y = gx.ravel().copy(), gy.ravel().copy()
    out, expected = _trig_results(x, y)
    for row, name in enumerate(_NAMES):
        with np.errstate(over="ignore"):
            want = expected[row].astype(np.float32)
        nan = np.isnan(want)
        assert (np.isnan(out[row]) == nan).all(), f"{name}: NaN where libm has none, or none where it has"
        bad = ~nan & (out[row].view(np.uint32) != want.view(np.uint32))
        assert not bad.any(), f"{name}{(x[bad][0], y[bad][0])} = {out[row][bad][0]!r}, expected {want[bad][0]!r}"


def test_trig_cbrt_atan2_fmod_loop_is_vectorised():
    """libm's sinf, cbrtf, atan2, asin, sinh, fmodf... kept a whole fused loop scalar; these forms do not."""

    @numba.njit(error_model="numpy")
    def loop(x, y, out):
        for i in range(x.size):
            out[i] = (vm.sin_f32(x[i]) + vm.cos_f32(y[i]) + vm.tan_f32(x[i]) + vm.cbrt_f32(x[i])
                      + vm.atan2_f32(x[i], y[i]) + vm.fmod_f32(x[i], y[i]) + vm.asin_f32(x[i]) + vm.acos_f32(y[i])
                      + vm.atan_f32(x[i]) + vm.sinh_f32(x[i]) + vm.cosh_f32(y[i]) + vm.asinh_f32(x[i])
                      + vm.acosh_f32(y[i]) + vm.atanh_f32(x[i]))

    x = np.linspace(-3, 3, 64, dtype=np.float32)
    loop(x, x[::-1].copy(), np.empty_like(x))
    llvm = next(iter(loop.inspect_llvm().values()))
    assert "x double>" in llvm
    for name in _NAMES:
        assert f"@{name}" not in llvm and f"@{name}f" not in llvm, f"the loop calls {name}"


# -- integer intrinsics: XLA's semantics at the operand's own width --------------------------


@numba.njit
def _int_ops32(a, b, out):
    for i in range(a.size):
        out[0, i] = intr.idiv(a[i], b[i])
        out[1, i] = intr.irem(a[i], b[i])
        out[2, i] = intr.shl(a[i], b[i])
        out[3, i] = intr.shr_arith(a[i], b[i])
        out[4, i] = intr.shr_logical(a[i], b[i])
        out[5, i] = intr.iadd(a[i], b[i])
        out[6, i] = intr.imul(a[i], b[i])


@numba.njit
def _uint_ops32(a, b, out):
    for i in range(a.size):
        out[0, i] = intr.idiv(a[i], b[i])
        out[1, i] = intr.irem(a[i], b[i])
        out[2, i] = intr.shr_logical(a[i], b[i])


def test_signed_division_shift_and_wraparound():
    mn = np.iinfo(np.int32).min
    a = np.array([7, -7, 7, -7, mn, mn, 5, -5, 1, -1, 2**30, 123], np.int32)
    b = np.array([2, 2, -2, 0, -1, 0, 31, 31, 32, 40, 2, -1], np.int32)
    out = np.empty((7, a.size), np.int32)
    _int_ops32(a, b, out)
    assert out[0].tolist() == [3, -3, -3, -1, mn, -1, 0, 0, 0, 0, 2**29, -123]
    assert out[1].tolist() == [1, -1, 1, -7, 0, mn, 5, -5, 1, -1, 0, 0]
    assert out[2][6] == -(2**31)  # 5 << 31 keeps the low bit only
    assert out[2][8] == 0 and out[2][9] == 0  # shift by >= 32 (and negative counts) -> 0
    assert out[3][7] == -1 and out[3][9] == -1 and out[3][8] == 0  # sign fill past the width
    assert out[4][7] == 1 and out[4][9] == 0
    assert out[5][4] == np.iinfo(np.int32).max  # MIN + (-1) wraps
    assert out[6][10] == -(2**31)  # 2**30 * 2 wraps


def test_unsigned_division_by_zero_and_logical_shift():
    a = np.array([7, 0xFFFFFFFF, 9, 0x80000000], np.uint32)
    b = np.array([0, 2, 4, 31], np.uint32)
    out = np.empty((3, a.size), np.uint32)
    _uint_ops32(a, b, out)
    assert out[0].tolist() == [0xFFFFFFFF, 0x7FFFFFFF, 2, 0x80000000 // 31]
    assert out[1].tolist() == [7, 1, 1, 0x80000000 % 31]
    assert out[2].tolist() == [7, 0x3FFFFFFF, 0, 1]


@numba.njit
def _f2i(x, out_i32, out_u8):
    for i in range(x.size):
        out_i32[i] = intr.f2i(x[i], numba.types.int32)
        out_u8[i] = intr.f2i(x[i], numba.types.uint8)


def test_float_to_int_truncates_and_saturates():
    x = np.array([1.9, -1.9, np.nan, 3e9, -3e9, np.inf, 300.0, -5.0], np.float32)
    i32 = np.empty(x.size, np.int32)
    u8 = np.empty(x.size, np.uint8)
    _f2i(x, i32, u8)
    assert i32.tolist() == [1, -1, 0, 2**31 - 1, -(2**31), 2**31 - 1, 300, -5]
    assert u8.tolist() == [1, 0, 0, 255, 0, 255, 255, 0]


@numba.njit
def _total_order_lt(a, b, out):
    for i in range(a.size):
        out[i] = intr.fcmp_total(a[i], b[i], "LT")


def test_total_order_comparison():
    nan = np.float32(np.nan)
    neg_nan = np.float32(-np.nan) if np.signbit(np.float32(-np.nan)) else -nan
    a = np.array([-0.0, neg_nan, 1.0, np.inf, nan], np.float32)
    b = np.array([0.0, -np.inf, nan, nan, nan], np.float32)
    out = np.empty(a.size, np.bool_)
    _total_order_lt(a, b, out)
    assert out.tolist() == [True, True, True, True, False]


# -- IEEE maximum / minimum (llvm.maximum, llvm.minimum) ----------------------------------------


def _maxmin_kernel():
    """The scalar and reduction forms of fmaximum and fminimum, in one kernel."""

    @numba.njit
    def kernel(a, b, out):
        for i in range(a.size):
            out[0, i] = intr.fmaximum(a[i], b[i])
            out[1, i] = intr.fminimum(a[i], b[i])
        acc_max, acc_min = a[0], a[0]
        for i in range(a.size):
            acc_max = intr.rmax(acc_max, b[i])
            acc_min = intr.rmin(acc_min, b[i])
        out[2, 0] = acc_max
        out[2, 1] = acc_min

    return kernel


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_ieee_maximum_and_minimum_propagate_nan_and_order_signed_zeros(dtype):
    a = np.array([1.0, -2.0, np.nan, 3.0, 0.0, -0.0, np.inf, -np.inf, 5.0], dtype)
    b = np.array([2.0, -3.0, 1.0, np.nan, -0.0, 0.0, 1.0, -1.0, 5.0], dtype)
    out = np.zeros((3, a.size), dtype)
    _maxmin_kernel()(a, b, out)
    expected_max = np.array([2.0, -2.0, np.nan, np.nan, 0.0, 0.0, np.inf, -1.0, 5.0], dtype)
    expected_min = np.array([1.0, -3.0, np.nan, np.nan, -0.0, -0.0, 1.0, -np.inf, 5.0], dtype)
    np.testing.assert_array_equal(out[0], expected_max)
    np.testing.assert_array_equal(out[1], expected_min)
    assert list(np.signbit(out[0, 4:6])) == [False, False] and list(np.signbit(out[1, 4:6])) == [True, True]
    assert np.isnan(out[2, 0]) and np.isnan(out[2, 1])  # a NaN in b reaches both reductions


# -- lanes of IEEE maximum / minimum (the compiled side of max/min suffix reductions) -----------


def _lanes_kernel(op: str, k: int):
    from pjrt_hub.backends.numba_cpu.lane_intrinsics import lanes_add, lanes_reset, lanes_row, lanes_total

    @numba.njit
    def kernel(x, lanes, out):
        for r in range(x.shape[0]):
            out[0, r] = lanes_row(x, r * x.shape[1], x.shape[1], op, k)
            lanes_reset(lanes, op, k)
            lanes_add(lanes, x, r * x.shape[1], x.shape[1], op, k)
            out[1, r] = lanes_total(lanes, op, k)

    return kernel


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("op", ["max", "min"])
def test_max_and_min_lanes_give_the_ieee_result_in_any_row(dtype, op):
    """Rows with a NaN anywhere (also in the tail past the last whole block), rows where only
    the zeros' signs decide, all-infinite rows, rows shorter than the lanes and an empty row."""
    k, width = (8, 21) if dtype == np.float32 else (4, 10)
    rng = np.random.default_rng(3)
    x = rng.standard_normal((8, width)).astype(dtype)
    x[1, 3] = np.nan
    x[2, -1] = np.nan  # in the tail
    x[3] = 0.0
    x[3, 5] = -0.0
    x[4] = -0.0
    x[4, -2] = 0.0
    x[5] = -np.inf if op == "max" else np.inf
    x[6, 7] = np.inf
    x[7, 0] = -np.inf
    out = np.zeros((2, x.shape[0]), dtype)
    _lanes_kernel(op, k)(x, np.empty(k, dtype), out)
    expected = [np.max(row) if op == "max" else np.min(row) for row in x]
    for r, want in enumerate(expected):
        if r in (1, 2):
            assert np.isnan(out[0, r]) and np.isnan(out[1, r]), (r, out[:, r])
            continue
        if r in (3, 4):
            want = dtype(0.0) if op == "max" else dtype(-0.0)  # -0 < +0
        for got in out[:, r]:
            assert got.tobytes() == np.asarray(want, dtype).tobytes(), (op, r, got, want)
    empty = np.zeros((1, 0), dtype)
    out = np.zeros((2, 1), dtype)
    _lanes_kernel(op, k)(empty, np.empty(k, dtype), out)
    identity = -np.inf if op == "max" else np.inf
    assert out.tolist() == [[identity], [identity]]
