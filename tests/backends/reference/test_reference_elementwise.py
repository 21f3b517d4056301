"""Elementwise ops of the reference interpreter: spec semantics and XLA's choices where the spec
leaves them open (integer division by zero, shift overflow, saturating conversion...)."""

import math

import ml_dtypes
import numpy as np
import pytest

from .ref_run import ev, type_of

I32_MIN, I32_MAX = np.iinfo(np.int32).min, np.iinfo(np.int32).max
bf16 = ml_dtypes.bfloat16


def i32(*values):
    return np.array(values, dtype=np.int32)


def f32(*values):
    return np.array(values, dtype=np.float32)


# -- integers ---------------------------------------------------------------------------------

def test_integer_divide_truncates_and_follows_xla_at_zero_and_overflow():
    a = i32(7, -7, 7, -7, 5, I32_MIN, I32_MIN, 0)
    b = i32(2, 2, -2, -2, 0, -1, 0, 0)
    assert ev("stablehlo.divide %x0, %x1", a, b).tolist() == [3, -3, -3, 3, -1, I32_MIN, -1, -1]
    assert ev("stablehlo.remainder %x0, %x1", a, b).tolist() == [1, -1, 1, -1, 5, 0, I32_MIN, 0]


def test_unsigned_divide_by_zero_is_all_ones():
    a, b = np.array([7, 5], np.uint32), np.array([2, 0], np.uint32)
    assert ev("stablehlo.divide %x0, %x1", a, b).tolist() == [3, 2**32 - 1]
    assert ev("stablehlo.remainder %x0, %x1", a, b).tolist() == [1, 5]


def test_float_remainder_takes_the_dividends_sign():
    out = ev("stablehlo.remainder %x0, %x1", f32(5.5, -5.5, 1.0), f32(2.0, 2.0, 0.0))
    assert out[:2].tolist() == [1.5, -1.5] and np.isnan(out[2])


def test_shifts_past_the_bit_width():
    a = i32(1, 1, 1, -8, -8, -8, -8)
    n = i32(0, 31, 32, 1, 33, -1, 31)
    assert ev("stablehlo.shift_left %x0, %x1", a, n).tolist() == [1, I32_MIN, 0, -16, 0, 0, 0]
    assert ev("stablehlo.shift_right_logical %x0, %x1", a, n).tolist() == [1, 0, 0, 2**31 - 4, 0, 0, 1]
    assert ev("stablehlo.shift_right_arithmetic %x0, %x1", a, n).tolist() == [1, 0, 0, -4, -1, -1, -1]
    u = np.array([255, 128], np.uint8)
    assert ev("stablehlo.shift_right_logical %x0, %x1", u, np.array([9, 1], np.uint8)).tolist() == [0, 64]
    # Arithmetic shifts of unsigned types shift the bit pattern in with the top bit.
    assert ev("stablehlo.shift_right_arithmetic %x0, %x1", u, np.array([9, 1], np.uint8)).tolist() == [255, 192]


def test_twos_complement_wraparound():
    assert ev("stablehlo.add %x0, %x1", i32(I32_MAX), i32(1)).tolist() == [I32_MIN]
    assert ev("stablehlo.multiply %x0, %x1", i32(65536, 1103515245), i32(65536, 77777)).tolist() == [
        0, (1103515245 * 77777 + 2**31) % 2**32 - 2**31]
    assert ev("stablehlo.subtract %x0, %x1", np.array([0], np.uint32), np.array([1], np.uint32)).tolist() == [2**32 - 1]
    assert ev("stablehlo.negate %x0", i32(I32_MIN)).tolist() == [I32_MIN]
    assert ev("stablehlo.abs %x0", i32(I32_MIN, -3)).tolist() == [I32_MIN, 3]


def test_integer_power_by_squaring():
    base = i32(3, 2, 2, 1, -1, -1, 5, 0, 7)
    exp = i32(4, 31, 32, -3, -3, -2, -1, 0, 0)
    assert ev("stablehlo.power %x0, %x1", base, exp).tolist() == [81, I32_MIN, 0, 1, -1, 1, 0, 1, 1]
    assert ev("stablehlo.power %x0, %x1", f32(2.0, -8.0), f32(0.5, 1 / 3))[0] == np.float32(math.sqrt(2))


def test_popcnt_and_count_leading_zeros():
    x = i32(0, 1, -1, 0xF0, I32_MIN)
    assert ev("stablehlo.popcnt %x0", x).tolist() == [0, 1, 32, 4, 1]
    assert ev("stablehlo.count_leading_zeros %x0", x).tolist() == [32, 31, 0, 24, 0]
    assert ev("stablehlo.count_leading_zeros %x0", np.array([0, 1, 128], np.uint8)).tolist() == [8, 7, 0]
    assert ev("stablehlo.count_leading_zeros %x0", np.array([1, -1], np.int64)).tolist() == [63, 0]


@pytest.mark.parametrize("dtype", [np.int8, np.uint8, np.int16, np.uint16, np.int32, np.uint32, np.int64, np.uint64])
def test_popcnt_without_numpy_bitwise_count(monkeypatch, dtype):
    # numpy < 2 has no bitwise_count: the unpacked bytes give the same counts, 0-d and empty too.
    info = np.iinfo(dtype)
    x = np.array([0, 1, info.max, info.min, 0x55 & info.max], dtype)
    expected = [0, 1, info.bits - (1 if info.min < 0 else 0), 1 if info.min < 0 else 0, 4]
    monkeypatch.delattr(np, "bitwise_count", raising=False)
    assert ev("stablehlo.popcnt %x0", x).tolist() == expected
    assert ev("stablehlo.popcnt %x0", np.array(info.max, dtype)).tolist() == expected[2]
    assert ev("stablehlo.popcnt %x0", np.zeros((0, 3), dtype)).shape == (0, 3)


def test_bitwise_ops_on_bools_and_integers():
    p, q = np.array([True, True, False]), np.array([True, False, False])
    assert ev("stablehlo.and %x0, %x1", p, q).tolist() == [True, False, False]
    assert ev("stablehlo.or %x0, %x1", p, q).tolist() == [True, True, False]
    assert ev("stablehlo.xor %x0, %x1", p, q).tolist() == [False, True, False]
    assert ev("stablehlo.not %x0", p).tolist() == [False, False, True]
    assert ev("stablehlo.not %x0", i32(0, 5)).tolist() == [-1, -6]
    assert ev("stablehlo.xor %x0, %x1", i32(0b1100), i32(0b1010)).tolist() == [0b0110]


# -- conversions ------------------------------------------------------------------------------

def test_float_to_int_truncates_and_saturates():
    x = f32(1.9, -1.9, 3e9, -3e9, np.nan, np.inf, -np.inf, 2147483520.0)
    out = ev("stablehlo.convert %x0", x, sig=f"({type_of(x)}) -> tensor<8xi32>")
    assert out.dtype == np.int32
    assert out.tolist() == [1, -1, I32_MAX, I32_MIN, 0, I32_MAX, I32_MIN, 2147483520]
    u = ev("stablehlo.convert %x0", f32(-1.5, 300.0, 2.7), sig="(tensor<3xf32>) -> tensor<3xui8>")
    assert u.tolist() == [0, 255, 2]


def test_conversions_to_and_from_bool_and_between_integers():
    x = f32(0.0, -0.0, np.nan, 0.1)
    assert ev("stablehlo.convert %x0", x, sig="(tensor<4xf32>) -> tensor<4xi1>").tolist() == [False, False, True, True]
    b = np.array([True, False])
    assert ev("stablehlo.convert %x0", b, sig="(tensor<2xi1>) -> tensor<2xf32>").tolist() == [1.0, 0.0]
    assert ev("stablehlo.convert %x0", i32(263, -1), sig="(tensor<2xi32>) -> tensor<2xui8>").tolist() == [7, 255]
    big = np.array([4294967295], np.uint32)
    assert ev("stablehlo.convert %x0", big, sig="(tensor<1xui32>) -> tensor<1xf32>").tolist() == [4294967296.0]


def test_narrow_float_conversions_round_to_nearest_even():
    # 1 + 2^-8 lies halfway between bf16 1.0 and 1 + 2^-7: ties go to the even mantissa.
    x = f32(1.00390625, 1.01171875, -3.0)
    out = ev("stablehlo.convert %x0", x, sig="(tensor<3xf32>) -> tensor<3xbf16>")
    assert out.dtype == np.dtype(bf16) and out.astype(np.float32).tolist() == [1.0, 1.015625, -3.0]
    half = ev("stablehlo.convert %x0", f32(65520.0, 65504.0, 1e-8), sig="(tensor<3xf32>) -> tensor<3xf16>")
    assert half.tolist() == [np.inf, 65504.0, 0.0]


def test_bitcast_convert_reinterprets_bits():
    assert ev("stablehlo.bitcast_convert %x0", f32(1.0, -2.0), sig="(tensor<2xf32>) -> tensor<2xi32>").tolist() == [
        0x3F800000, np.int32(np.uint32(0xC0000000).view(np.int32))]
    words = np.array([0x04030201], np.uint32)
    assert ev("stablehlo.bitcast_convert %x0", words, sig="(tensor<1xui32>) -> tensor<1x4xui8>").tolist() == [[1, 2, 3, 4]]
    assert ev("stablehlo.bitcast_convert %x0", np.float32(1.0), sig="(tensor<f32>) -> tensor<i32>") == 0x3F800000
    assert ev("stablehlo.bitcast_convert %x0", np.array([[1, 0, 0, 0]], np.uint8),
              sig="(tensor<1x4xui8>) -> tensor<1xui32>").tolist() == [1]


# -- floats -----------------------------------------------------------------------------------

def test_maximum_and_minimum_propagate_nan():
    a, b = f32(np.nan, 1.0, 2.0), f32(1.0, np.nan, 3.0)
    mx = ev("stablehlo.maximum %x0, %x1", a, b)
    mn = ev("stablehlo.minimum %x0, %x1", a, b)
    assert np.isnan(mx[:2]).all() and mx[2] == 3.0
    assert np.isnan(mn[:2]).all() and mn[2] == 2.0



def test_maximum_and_minimum_order_signed_zeros():
    # IEEE-754 maximum/minimum (the spec's): +0 is larger than -0, whichever operand it is.
    a, b = f32(-0.0, 0.0, -0.0), f32(0.0, -0.0, -0.0)
    assert np.signbit(ev("stablehlo.maximum %x0, %x1", a, b)).tolist() == [False, False, True]
    assert np.signbit(ev("stablehlo.minimum %x0, %x1", a, b)).tolist() == [True, True, True]

@pytest.mark.parametrize("direction, kind, a, b, expected", [
    ("EQ", "FLOAT", [np.nan, 1.0], [np.nan, 1.0], [False, True]),
    ("NE", "FLOAT", [np.nan, 1.0], [np.nan, 1.0], [True, False]),
    ("LT", "FLOAT", [np.nan, -0.0], [1.0, 0.0], [False, False]),
    ("LT", "TOTALORDER", [-0.0, 1.0, -np.inf, np.inf], [0.0, np.nan, 1.0, np.nan], [True, True, True, True]),
    ("EQ", "TOTALORDER", [np.nan, -0.0], [np.nan, 0.0], [True, False]),
])
def test_float_comparisons(direction, kind, a, b, expected):
    out = ev(f"stablehlo.compare {direction}, %x0, %x1, {kind}", f32(*a), f32(*b),
             sig=f"({type_of(f32(*a))}, {type_of(f32(*b))}) -> tensor<{len(a)}xi1>")
    assert out.tolist() == expected


def test_totalorder_puts_negative_nan_first():
    neg_nan = np.array([0xFFC00000], np.uint32).view(np.float32)
    out = ev("stablehlo.compare LT, %x0, %x1, TOTALORDER", neg_nan, f32(-np.inf),
             sig="(tensor<1xf32>, tensor<1xf32>) -> tensor<1xi1>")
    assert out.tolist() == [True]


def test_signed_and_unsigned_comparisons():
    sig = "(tensor<2xi32>, tensor<2xi32>) -> tensor<2xi1>"
    assert ev("stablehlo.compare GT, %x0, %x1, SIGNED", i32(-1, 2), i32(1, 1), sig=sig).tolist() == [False, True]
    assert ev("stablehlo.compare GT, %x0, %x1, UNSIGNED", i32(-1, 2), i32(1, 1), sig=sig).tolist() == [True, True]
    bools = "(tensor<2xi1>, tensor<2xi1>) -> tensor<2xi1>"
    assert ev("stablehlo.compare LT, %x0, %x1, UNSIGNED", np.array([False, True]), np.array([True, True]),
              sig=bools).tolist() == [True, False]


def test_rounding_modes():
    x = f32(2.5, -2.5, 0.5, 1.4999999, 3.5)
    assert ev("stablehlo.round_nearest_afz %x0", x).tolist() == [3.0, -3.0, 1.0, 1.0, 4.0]
    assert ev("stablehlo.round_nearest_even %x0", x).tolist() == [2.0, -2.0, 0.0, 1.0, 4.0]
    assert ev("stablehlo.floor %x0", f32(-1.5)).tolist() == [-2.0]
    assert ev("stablehlo.ceil %x0", f32(-1.5)).tolist() == [-1.0]


def test_sign_keeps_signed_zeros_and_nan():
    out = ev("stablehlo.sign %x0", f32(-2.0, -0.0, 0.0, np.nan, 3.0))
    assert out[0] == -1 and out[4] == 1 and np.isnan(out[3])
    assert math.copysign(1, out[1]) == -1 and math.copysign(1, out[2]) == 1
    assert ev("stablehlo.sign %x0", i32(-5, 0, 7)).tolist() == [-1, 0, 1]


@pytest.mark.parametrize("op, reference", [
    ("stablehlo.exponential", np.exp), ("stablehlo.exponential_minus_one", np.expm1),
    ("stablehlo.log_plus_one", np.log1p), ("stablehlo.tanh", np.tanh), ("stablehlo.cbrt", np.cbrt),
    ("stablehlo.sine", np.sin), ("stablehlo.cosine", np.cos), ("stablehlo.tan", np.tan),
    ("stablehlo.logistic", lambda v: 1 / (1 + np.exp(-v))), ("stablehlo.rsqrt", lambda v: 1 / np.sqrt(v)),
])
def test_transcendentals_are_correctly_rounded_from_float64(op, reference):
    x = np.linspace(0.01, 3.0, 64, dtype=np.float32)
    out = ev(f"{op} %x0", x)
    assert out.dtype == np.float32
    np.testing.assert_array_equal(out, reference(x.astype(np.float64)).astype(np.float32))


def test_logistic_and_expm1_stay_finite_at_the_extremes():
    out = ev("stablehlo.logistic %x0", f32(-100.0, 100.0))
    assert out[0] > 0 and out[0] < 1e-40 and out[1] == 1.0
    assert ev("stablehlo.exponential_minus_one %x0", f32(1e-10))[0] == np.float32(1e-10)


def test_chlo_error_functions():
    from scipy import special
    x = f32(-0.9, 0.0, 0.5)
    sig = "tensor<3xf32> -> tensor<3xf32>"
    np.testing.assert_array_equal(ev("chlo.erf %x0", x, sig=sig), special.erf(x.astype(np.float64)).astype(np.float32))
    np.testing.assert_array_equal(ev("chlo.erf_inv %x0", x, sig=sig), special.erfinv(x.astype(np.float64)).astype(np.float32))
    assert ev("chlo.erf_inv %x0", f32(1.0, -1.0), sig="tensor<2xf32> -> tensor<2xf32>").tolist() == [np.inf, -np.inf]
    assert ev("chlo.square %x0", i32(-3, 65536), sig="tensor<2xi32> -> tensor<2xi32>").tolist() == [9, 0]


def test_atan2_is_finite_and_clamp_with_scalar_bounds():
    assert ev("stablehlo.atan2 %x0, %x1", f32(1.0, -0.0), f32(-1.0, -1.0)).tolist() == [
        np.float32(math.atan2(1, -1)), np.float32(-math.pi)]
    assert ev("stablehlo.is_finite %x0", f32(1.0, np.inf, np.nan), sig="(tensor<3xf32>) -> tensor<3xi1>").tolist() == [
        True, False, False]
    out = ev("stablehlo.clamp %x0, %x1, %x2", np.float32(-1), f32(-5, 0.5, 7), np.float32(2),
             sig="(tensor<f32>, tensor<3xf32>, tensor<f32>) -> tensor<3xf32>")
    assert out.tolist() == [-1.0, 0.5, 2.0]


def test_select_with_a_scalar_predicate():
    out = ev("stablehlo.select %x0, %x1, %x2", np.bool_(False), f32(1, 2), f32(3, 4),
             sig="(tensor<i1>, tensor<2xf32>, tensor<2xf32>) -> tensor<2xf32>")
    assert out.tolist() == [3.0, 4.0]


#: Values where IEEE maximum/minimum and numpy differ, or could: NaNs of both signs and a
#: payload, signed zeros, denormals, infinities and ordinary numbers.
_SPECIAL_F32 = np.array([0x7FC00000, 0xFFC00000, 0x7FC00123, 0x00000000, 0x80000000, 0x00000001,
                         0x80000001, 0x7F800000, 0xFF800000, 0x3F800000, 0xBF800000, 0x40000000,
                         0xC0400000, 0x7F7FFFFF], np.uint32).view(np.float32)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_clamp_gives_the_bits_of_ieee_maximum_then_minimum_for_every_special_bound(dtype):
    from pjrt_hub.backends.reference.elementwise import ieee_maximum, ieee_minimum

    x = _SPECIAL_F32.astype(dtype)
    sig = f"({type_of(x[0])}, {type_of(x)}, {type_of(x[0])}) -> {type_of(x)}"
    ints = np.dtype(f"u{x.itemsize}")
    for lo in x:
        for hi in x:
            out = ev("stablehlo.clamp %x0, %x1, %x2", lo, x, hi, sig=sig)
            expected = ieee_minimum(ieee_maximum(x, lo), hi)
            assert out.dtype == x.dtype
            assert out.view(ints).tolist() == expected.view(ints).tolist(), (lo, hi)
    # Bounds of the operand's shape, one pair per element.
    lo, hi = x[::-1].copy(), np.roll(x, 3)
    out = ev("stablehlo.clamp %x0, %x1, %x2", lo, x, hi)
    assert out.view(ints).tolist() == ieee_minimum(ieee_maximum(x, lo), hi).view(ints).tolist()


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_clamp_of_scalars_with_a_zero_or_nan_result(dtype):
    """0-d operands: np.clip gives a numpy scalar, and the zero and NaN results are fixed up
    in place (a scalar took no item assignment)."""
    ints = np.dtype(f"u{np.dtype(dtype).itemsize}")
    cases = [(0.0, -0.0, 1.0), (-0.0, 0.0, 1.0), (-1.0, -0.0, 0.0), (0.0, np.nan, 1.0), (-1.0, 5.0, 0.0),
             (np.nan, 0.5, 1.0), (-2.0, 0.5, 1.0)]
    for lo, x, hi in cases:
        lo, x, hi = (np.array(v, dtype) for v in (lo, x, hi))
        out = ev("stablehlo.clamp %x0, %x1, %x2", lo, x, hi)
        expected = ieee_minimum_of_maximum(x, lo, hi)
        assert out.shape == () and out.dtype == dtype
        assert out.view(ints) == expected.view(ints), (lo, x, hi, out, expected)


def ieee_minimum_of_maximum(x, lo, hi):
    from pjrt_hub.backends.reference.elementwise import ieee_maximum, ieee_minimum

    return np.asarray(ieee_minimum(ieee_maximum(x, lo), hi))


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16, bf16, np.int8, np.int64,
                                   np.uint16, np.complex64, np.bool_])
def test_select_gives_np_where_bits_for_every_element_type(dtype):
    rng = np.random.default_rng(7)
    bits = rng.integers(0, 256, (2, 3, 64 * np.dtype(dtype).itemsize), dtype=np.uint8)
    on_true, on_false = (b.view(dtype) if dtype is not np.bool_ else b % 2 == 1 for b in bits)
    pred = rng.random(on_true.shape) < 0.5
    out = ev("stablehlo.select %x0, %x1, %x2", pred, on_true, on_false,
             sig=f"({type_of(pred)}, {type_of(on_true)}, {type_of(on_false)}) -> {type_of(on_true)}")
    assert out.dtype == np.dtype(dtype)
    # The same bits as np.where (NaN payloads, signed zeros), compared as raw bytes.
    assert out.tobytes() == np.where(pred, on_true, on_false).tobytes()
    empty = np.zeros((0, 4), dtype)
    mask = np.zeros((0, 4), np.bool_)
    assert ev("stablehlo.select %x0, %x1, %x2", mask, empty, empty,
              sig=f"({type_of(mask)}, {type_of(empty)}, {type_of(empty)}) -> {type_of(empty)}").shape == (0, 4)


@pytest.mark.parametrize("dtype", [np.float32, bf16, np.bool_])
@pytest.mark.parametrize("temporaries", ["on_true", "on_false", "both", "all three"])
def test_select_into_the_storage_of_an_operand_nothing_reads_again(monkeypatch, dtype, temporaries):
    """An operand computed in the program and read by nothing else may take the result (the
    interpreter offers it): the bits stay np.where's whichever operand it is, and a bool select
    is never given its own predicate to write into."""
    from pjrt_hub.backends.reference.interpreter import Execution

    given = []
    offer = Execution.donor

    def donor(self, shape, dt):
        array = offer(self, shape, dt)
        given.append(array is not None)
        return array

    monkeypatch.setattr(Execution, "donor", donor)
    rng = np.random.default_rng(3)
    bits = rng.integers(0, 256, (2, 5, 40 * np.dtype(dtype).itemsize), dtype=np.uint8)
    a, b = (x.view(dtype) if dtype is not np.bool_ else x % 2 == 1 for x in bits)
    pred = rng.random(a.shape) < 0.5
    ty, pty = type_of(a), type_of(pred)
    # ``not`` on bools, a negation that keeps every bit pattern but the sign's on floats.
    flip = "stablehlo.not" if dtype is np.bool_ else "stablehlo.negate"
    t = f"{flip} %a : {ty}" if temporaries in ("on_true", "both", "all three") else None
    f = f"{flip} %b : {ty}" if temporaries in ("on_false", "both", "all three") else None
    p = f"stablehlo.not %p : {pty}" if temporaries == "all three" else None
    lines = [f"%{name} = {body}" for name, body in (("t", t), ("f", f), ("q", p)) if body]
    text = (f"func.func @main(%p: {pty}, %a: {ty}, %b: {ty}) -> {ty} {{\n  "
            + "\n  ".join(lines)
            + f"\n  %r = stablehlo.select %{'q' if p else 'p'}, %{'t' if t else 'a'}, %{'f' if f else 'b'}"
            f" : {pty}, {ty}\n  return %r : {ty}\n}}\n")
    from .ref_run import run

    out = run(text, pred, a, b)
    assert given[-1] is True  # select was offered an operand's storage
    on_true = ev(flip + " %x0", a) if t else a
    on_false = ev(flip + " %x0", b) if f else b
    assert out.tobytes() == np.where(~pred if p else pred, on_true, on_false).tobytes()


def test_bf16_arithmetic_is_computed_in_f32_and_rounded():
    a = np.array([1.0, 3.0, 100.0], dtype=bf16)
    b = np.array([2 ** -8, 2 ** -7, 0.7], dtype=bf16)
    out = ev("stablehlo.add %x0, %x1", a, b)
    assert out.dtype == np.dtype(bf16)
    expected = (a.astype(np.float32) + b.astype(np.float32)).astype(bf16)
    assert out.astype(np.float32).tolist() == expected.astype(np.float32).tolist()
    assert ev("stablehlo.exponential %x0", np.array([1.0], dtype=bf16)).astype(np.float32)[0] == 2.71875


def test_f16_results_stay_f16():
    out = ev("stablehlo.multiply %x0, %x1", np.array([300.0], np.float16), np.array([300.0], np.float16))
    assert out.dtype == np.float16 and out[0] == np.inf


def test_reduce_precision_rounds_like_a_narrower_float_without_denormals():
    x = f32(1.0009765625 + 2 ** -12, 1e5, 65519.0, -3.14159, np.nan, 6.2e-5)
    out = ev("stablehlo.reduce_precision %x0, format = e5m10", x)
    with np.errstate(over="ignore"):
        np.testing.assert_array_equal(out, x.astype(np.float16).astype(np.float32))
    # Below the smallest normal f16 (2^-14) values flush to a signed zero instead of f16 denormals.
    tiny = ev("stablehlo.reduce_precision %x0, format = e5m10", f32(1e-6, -6.1e-5))
    assert tiny.tolist() == [0.0, 0.0] and math.copysign(1, tiny[1]) == -1
    bf = ev("stablehlo.reduce_precision %x0, format = e8m7", f32(1.00390625, 1.01171875))
    assert bf.tolist() == [1.0, 1.015625]


def test_complex_parts():
    z = np.array([1 + 2j, -3j], np.complex64)
    assert ev("stablehlo.real %x0", z, sig="(tensor<2xcomplex<f32>>) -> tensor<2xf32>").tolist() == [1.0, 0.0]
    assert ev("stablehlo.imag %x0", z, sig="(tensor<2xcomplex<f32>>) -> tensor<2xf32>").tolist() == [2.0, -3.0]
    back = ev("stablehlo.complex %x0, %x1", f32(1, 0), f32(2, -3), sig="tensor<2xcomplex<f32>>")
    assert back.tolist() == [1 + 2j, -3j]
    assert ev("stablehlo.abs %x0", np.array([3 + 4j], np.complex64), sig="(tensor<1xcomplex<f32>>) -> tensor<1xf32>").tolist() == [5.0]


def test_special_functions_at_their_poles_and_infinities():
    x = np.array([-np.inf, np.inf, 0.0, -0.0, -2.0], np.float32)
    np.testing.assert_array_equal(ev("chlo.lgamma %x0", x), [np.inf, np.inf, np.inf, np.inf, np.inf])
    assert np.isnan(ev("chlo.digamma %x0", x)[2:]).all()  # poles at 0, -0 and negative integers
    zeros = np.array([-0.0, 0.0], np.float32)
    for op in ("chlo.erf_inv %x0", "chlo.bessel_i1e %x0"):
        assert np.signbit(ev(op, zeros)).tolist() == [True, False], op
