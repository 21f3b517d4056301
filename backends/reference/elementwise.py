"""Elementwise ops of the reference interpreter, with the corner cases the spec and XLA define.

Floating-point ops are computed in float64 and rounded to the result type once, which makes
``+ - * / sqrt`` exactly the correctly rounded float32 operations and the transcendental functions
accurate to the last bit or so (XLA's own approximations are within the corpus tolerances of
that). Two shortcuts give the same bits with less work (:func:`compute_float`): the correctly
rounded and exact operations run in float32 itself, and numpy's ufuncs run their float64 loop
writing float32 directly, without float64 copies of the operands. bf16/f16 (and the 8-bit floats) are rounded to float32 first and then to their own type,
as XLA:CPU computes them in float32. Integer ops keep their type and wrap around like two's
complement hardware.

Where the spec leaves behaviour open, XLA's is followed (and tested in
tests/backends/reference):

* integer ``divide``: ``x / 0 = -1`` (all bits set, so ``UINT_MAX`` for unsigned types),
  ``INT_MIN / -1 = INT_MIN``; ``remainder``: ``x % 0 = x``, ``INT_MIN % -1 = 0``; both truncate
  toward zero (C semantics), as the spec says.
* shifts by an amount >= the bit width (or negative, read as unsigned): ``shift_left`` and
  ``shift_right_logical`` give 0, ``shift_right_arithmetic`` fills with the sign bit.
* ``convert`` float -> integer truncates toward zero and saturates (NaN -> 0, +-inf and
  out-of-range values -> the type's max/min), as XLA's saturating conversion does;
  any -> bool is ``x != 0`` (NaN -> true); integer -> integer wraps.
* integer ``power`` with a negative exponent gives the truncated value of ``1 / x**-n``:
  1 for base 1, +-1 for base -1, 0 otherwise; overflow wraps.
* ``maximum``/``minimum`` propagate NaN and order -0.0 below +0.0 (IEEE-754 maximum/minimum).
* ``compare`` with TOTALORDER orders -NaN < -inf < ... < -0.0 < +0.0 < ... < inf < NaN.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import DTypeLike
import scipy.special as sp

from pjrt_hub.backends.stablehlo import ComparisonDirection, ComparisonType, Op

from .registry import register

__all__ = ["compute_float", "is_float_dtype", "total_order_key"]


def is_float_dtype(dt: np.dtype) -> bool:
    return dt.kind == "f" or (dt.kind == "V" and dt.name.startswith(("bfloat", "float")))


def _is_low_float(dt: np.dtype) -> bool:
    return is_float_dtype(dt) and dt.itemsize < 4


def _round_to(values: np.ndarray, dt: np.dtype) -> np.ndarray:
    """float64/complex128 results -> ``dt``, via float32 for the narrow floats (as XLA:CPU)."""
    if _is_low_float(dt):
        return np.asarray(values, dtype=np.float64).astype(np.float32).astype(dt)
    return np.asarray(values).astype(dt)


#: The types :func:`compute_float` may compute in directly.
_NATIVE = (np.dtype(np.float32), np.dtype(np.float64))
#: Elements per block of a float64 computation done a block at a time (256 KiB of float64).
_BLOCK = 1 << 15


def compute_float(fn, *xs: np.ndarray, dtype: DTypeLike | None = None, exact: bool = False,
                  out: np.ndarray | None = None) -> np.ndarray:
    """Apply ``fn`` in float64 (complex128 for complex inputs) and round to ``dtype`` (default:
    the first input's dtype).

    When every input already has the float32/float64 result type, two shortcuts give the same
    bits: an ``exact`` ``fn`` (IEEE's correctly rounded operations ``+ - * / sqrt``, and the
    exact ones: fmod, negation, abs, floor/ceil/rint, min/max, select) runs in that type, since
    rounding a float64 result of float32 operands once to float32 is what float32 arithmetic
    does (float64 has more than twice float32's precision); and a numpy ufunc runs its float64
    loop writing the result type directly, converting in small buffers, so a broadcast operand
    is never materialized in float64. A ufunc writes into ``out`` if given (an operand's storage
    the interpreter offers, of the result's shape and type)."""
    dt = np.dtype(dtype) if dtype is not None else xs[0].dtype
    if dt in _NATIVE and all(getattr(x, "dtype", None) == dt for x in xs):
        ufunc = isinstance(fn, np.ufunc) and fn.nin == len(xs) and fn.nout == 1
        if exact:
            return fn(*xs, out=out) if ufunc and out is not None else np.asarray(fn(*xs))
        if ufunc:
            if out is None:
                out = np.empty(np.broadcast_shapes(*(x.shape for x in xs)), dt)
            fn(*xs, out=out, dtype=np.float64)
            return out
    wide = np.complex128 if any(x.dtype.kind == "c" for x in xs) else np.float64
    return _round_to(fn(*[np.asarray(x).astype(wide) for x in xs]), dt)


def _unsigned(dt: np.dtype) -> np.dtype:
    return np.dtype(f"u{dt.itemsize}")


def _signed(dt: np.dtype) -> np.dtype:
    return np.dtype(f"i{dt.itemsize}")


def _float_op(fn, name: str, exact: bool = False, complex_fn=None):
    """An op defined on floats (and complex) only; ``complex_fn`` (default ``fn``) for complex."""
    def impl(ctx, op, x, *rest):
        if not (is_float_dtype(x.dtype) or x.dtype.kind == "c"):
            raise TypeError(f"{name} needs floating-point operands, got {x.dtype}")
        if complex_fn is not None and x.dtype.kind == "c":
            return compute_float(complex_fn, x, *rest)
        return compute_float(fn, x, *rest, exact=exact, out=_donor(ctx, op))
    return impl


def _donor(ctx, op: Op) -> np.ndarray | None:
    """Storage of an operand the op may write its result into (see ``Execution.donor``)."""
    ty = op.results[0].tensor_type
    return ctx.donor(ty.shape, ty.dtype) if ty.dtype in _NATIVE else None


# -- unary float functions --------------------------------------------------------------------

def _complex_logistic(x):
    return 1.0 / (1.0 + np.exp(-x))


def _complex_cbrt(x):
    return x ** (1.0 / 3.0)  # the principal cube root


#: Complex arguments of functions whose real version is a ufunc that takes none (the ufunc
#: stays the real one: :func:`compute_float` runs a ufunc without float64 copies).
_COMPLEX_FORMS = {"stablehlo.logistic": _complex_logistic, "stablehlo.cbrt": _complex_cbrt}


def _atan2(y, x):
    if np.iscomplexobj(y) or np.iscomplexobj(x):
        # atan2(y, x) = -i log((x + iy) / sqrt(x^2 + y^2)), continued to complex arguments.
        return -1j * np.log((x + 1j * y) / np.sqrt(x * x + y * y))
    return np.arctan2(y, x)


def _rsqrt(x):
    return 1.0 / np.sqrt(x)


def _round_afz(x):
    # From trunc(x) and the fraction x - trunc(x), which is exact: floor(|x| + 0.5) rounds the
    # sum first (the largest float below 0.5 gives 1, 2**52 + 1 gives 2**52 + 2). trunc keeps
    # the sign of -0 and of -0.4.
    t = np.trunc(x)
    with np.errstate(invalid="ignore"):  # inf - inf: inf stays t
        up = np.abs(x - t) >= 0.5
    return np.where(up, t + np.copysign(np.ones_like(t), x), t)


def _signed_zero_extreme(fn, largest: bool):
    """IEEE 754-2019 maximum/minimum, the spec's rule: NaN propagates (numpy's ``maximum``
    does that) and -0 < +0 (numpy returns either zero). Only a zero result can be a tie of two
    zeros, so only those places are looked at again (cheaper than testing every pair)."""
    def impl(a, b):
        pick = np.asarray(fn(a, b))
        if pick.all():  # no zero (a NaN is true): nothing to look at again
            return pick
        zero = pick == 0
        a, b = np.broadcast_arrays(a, b)
        za, zb = a[zero], b[zero]
        keep_a = ~np.signbit(za) if largest else np.signbit(za)
        if not pick.flags.writeable:
            pick = pick.copy()
        pick[zero] = np.where((za == 0) & (zb == 0), np.where(keep_a, za, zb), pick[zero])
        return pick
    return impl


ieee_maximum = _signed_zero_extreme(np.maximum, largest=True)
ieee_minimum = _signed_zero_extreme(np.minimum, largest=False)


def _keep_zero(fn):
    """An odd function whose scipy form loses the sign of a zero (erfinv(-0) is -0, as XLA's)."""
    return lambda x: np.where(x == 0, x, fn(x))


def _lgamma(x):
    return np.where(np.isneginf(x), np.inf, sp.gammaln(x))  # scipy gives -inf at -inf


def _digamma(x):
    return np.where(x == 0, np.nan, sp.digamma(x))  # a pole: NaN as XLA's (scipy: -inf, +inf at -0)


_FLOAT_UNARY = {
    "stablehlo.exponential": np.exp,
    "stablehlo.exponential_minus_one": np.expm1,
    "stablehlo.log": np.log,
    "stablehlo.log_plus_one": np.log1p,
    "stablehlo.logistic": sp.expit,
    "stablehlo.cbrt": np.cbrt,
    "stablehlo.tanh": np.tanh,
    "stablehlo.tan": np.tan,
    "stablehlo.sine": np.sin,
    "stablehlo.cosine": np.cos,
    "stablehlo.round_nearest_afz": _round_afz,
    "chlo.erf": sp.erf,
    "chlo.erfc": sp.erfc,
    "chlo.erf_inv": _keep_zero(sp.erfinv),
    "chlo.lgamma": _lgamma,
    "chlo.digamma": _digamma,
    "chlo.sinh": np.sinh,
    "chlo.cosh": np.cosh,
    "chlo.tan": np.tan,
    "chlo.asin": np.arcsin,
    "chlo.acos": np.arccos,
    "chlo.atan": np.arctan,
    "chlo.asinh": np.arcsinh,
    "chlo.acosh": np.arccosh,
    "chlo.atanh": np.arctanh,
    "chlo.bessel_i1e": _keep_zero(sp.i1e),
}

#: Correctly rounded (sqrt) or exact in any float type.
_FLOAT_UNARY_EXACT = {
    "stablehlo.sqrt": np.sqrt,
    "stablehlo.floor": np.floor,
    "stablehlo.ceil": np.ceil,
    "stablehlo.round_nearest_even": np.rint,
}

for _name, _fn in _FLOAT_UNARY.items():
    register(_name, elementwise=True)(_float_op(_fn, _name, complex_fn=_COMPLEX_FORMS.get(_name)))
for _name, _fn in _FLOAT_UNARY_EXACT.items():
    register(_name, elementwise=True)(_float_op(_fn, _name, exact=True))


@register("stablehlo.rsqrt", elementwise=True)
def _rsqrt_op(ctx, op, x):
    if not (is_float_dtype(x.dtype) or x.dtype.kind == "c"):
        raise TypeError(f"stablehlo.rsqrt needs floating-point operands, got {x.dtype}")
    if x.dtype in _NATIVE:
        # 1 / sqrt(x) in float64, rounded once; a block at a time, so that the float64 square
        # roots stay in cache rather than making a float64 copy of x.
        out = _donor(ctx, op)
        out = np.empty(x.shape, x.dtype) if out is None else out
        flat_x, flat_out = x.reshape(-1), out.reshape(-1)
        for start in range(0, flat_x.size, _BLOCK):
            block = slice(start, start + _BLOCK)
            np.divide(1.0, np.sqrt(flat_x[block], dtype=np.float64), out=flat_out[block])
        return out
    return compute_float(_rsqrt, x)


@register("stablehlo.negate", elementwise=True)
def _negate(ctx, op, x):
    if is_float_dtype(x.dtype) or x.dtype.kind == "c":
        return compute_float(np.negative, x, exact=True, out=_donor(ctx, op))
    return np.negative(x)  # integers wrap: -INT_MIN = INT_MIN


@register("stablehlo.abs", elementwise=True)
def _abs(ctx, op, x):
    if x.dtype.kind == "c":
        return compute_float(np.abs, x, dtype=np.float32 if x.dtype == np.complex64 else np.float64)
    if is_float_dtype(x.dtype):
        return compute_float(np.abs, x, exact=True, out=_donor(ctx, op))
    return np.abs(x)  # |INT_MIN| = INT_MIN


@register("stablehlo.sign", elementwise=True)
def _sign(ctx, op, x):
    if x.dtype.kind == "c":
        def complex_sign(z):
            mag = np.abs(z)
            return np.where(mag == 0, 0, z / np.where(mag == 0, 1, mag))
        return compute_float(complex_sign, x)
    if is_float_dtype(x.dtype):
        # sign(+-0.0) keeps the zero's sign; sign(NaN) is NaN.
        return compute_float(lambda v: np.where(v == 0, v, np.sign(v)), x, exact=True)
    return np.sign(x).astype(x.dtype)


@register("chlo.square", elementwise=True)
def _square(ctx, op, x):
    if is_float_dtype(x.dtype) or x.dtype.kind == "c":
        return compute_float(np.square, x, exact=True)
    return np.multiply(x, x)


def _wide(x: np.ndarray) -> np.ndarray:
    """``x`` as a float numpy tests natively: float32/float64 as they are, others as float64."""
    return x if x.dtype in _NATIVE else x.astype(np.float64)


@register("stablehlo.is_finite", elementwise=True)
def _is_finite(ctx, op, x):
    return np.isfinite(_wide(x))


@register("chlo.is_inf", elementwise=True)
def _is_inf(ctx, op, x):
    return np.isinf(_wide(x))


@register("chlo.is_pos_inf", elementwise=True)
def _is_pos_inf(ctx, op, x):
    return np.isposinf(_wide(x))


@register("chlo.is_neg_inf", elementwise=True)
def _is_neg_inf(ctx, op, x):
    return np.isneginf(_wide(x))


@register("stablehlo.not", elementwise=True)
def _not(ctx, op, x):
    return np.logical_not(x) if x.dtype == np.bool_ else np.invert(x)


@register("stablehlo.popcnt", elementwise=True)
def _popcnt(ctx, op, x):
    return _bit_count(np.asarray(x).view(_unsigned(x.dtype))).astype(x.dtype)


def _bit_count(u: np.ndarray) -> np.ndarray:
    """Set bits per element of an unsigned array. ``np.bitwise_count`` is numpy 2's; the bytes
    unpacked and summed give the same on numpy 1.26, the oldest numpy pjrt-hub supports."""
    if hasattr(np, "bitwise_count"):
        return np.bitwise_count(u)
    as_bytes = np.ascontiguousarray(u).reshape(u.shape + (1,)).view(np.uint8)
    return np.unpackbits(as_bytes, axis=-1).sum(axis=-1, dtype=np.int64)


@register("stablehlo.count_leading_zeros", elementwise=True)
def _clz(ctx, op, x):
    u = np.asarray(x).view(_unsigned(x.dtype))
    bits = x.dtype.itemsize * 8
    # Binary search for the bit length, one halving per step.
    length = np.zeros(u.shape, dtype=np.int64)
    rest = u.copy()
    step = bits // 2
    while step:
        high = (rest >> np.array(step, dtype=u.dtype)) != 0
        length = np.where(high, length + step, length)
        rest = np.where(high, rest >> np.array(step, dtype=u.dtype), rest)
        step //= 2
    length = np.where(rest != 0, length + 1, length)
    return (bits - length).astype(x.dtype)


@register("stablehlo.real", elementwise=True)
def _real(ctx, op, x):
    if x.dtype.kind != "c":
        return x
    return np.real(x).astype(np.float32 if x.dtype == np.complex64 else np.float64)


@register("stablehlo.imag", elementwise=True)
def _imag(ctx, op, x):
    if x.dtype.kind != "c":
        return np.zeros_like(x)
    return np.imag(x).astype(np.float32 if x.dtype == np.complex64 else np.float64)


@register("stablehlo.complex", elementwise=True)
def _complex(ctx, op, re, im):
    dt = np.complex64 if re.dtype == np.float32 else np.complex128
    return (re.astype(np.float64) + 1j * im.astype(np.float64)).astype(dt)


@register("chlo.conj", elementwise=True)
def _conj(ctx, op, x):
    return np.conj(x)


@register("stablehlo.reduce_precision", elementwise=True)
def _reduce_precision(ctx, op, x):
    return reduce_precision(x, op.attributes["exponent_bits"], op.attributes["mantissa_bits"])


def reduce_precision(x: np.ndarray, exponent_bits: int, mantissa_bits: int) -> np.ndarray:
    """Round ``x`` to ``mantissa_bits`` (nearest, ties to even) and clamp it to the exponent
    range of ``exponent_bits``: larger values become +-inf and values below the smallest normal
    number become +-0 (no denormals, as in XLA and the StableHLO reference interpreter). NaN
    stays NaN (or becomes inf when no mantissa bits are left). The type does not change."""
    dt = x.dtype
    wide = np.dtype(np.float32 if dt.itemsize <= 4 else np.float64)
    ubits = np.dtype(np.uint32 if wide == np.float32 else np.uint64)
    src_mant, src_exp = (23, 8) if wide == np.float32 else (52, 11)
    xw = np.asarray(x).astype(wide)
    bits = xw.view(ubits).copy()
    u = ubits.type
    if mantissa_bits < src_mant:
        drop = u(src_mant - mantissa_bits)
        last_bit = u(1) << drop
        bias = ((last_bit >> u(1)) - u(1)) + ((bits & last_bit) >> drop)
        bits = (bits + bias) & ~(last_bit - u(1))
    if exponent_bits < src_exp:
        exp_mask = u(((1 << src_exp) - 1) << src_mant)
        src_bias = (1 << (src_exp - 1)) - 1
        dst_bias = (1 << (exponent_bits - 1)) - 1
        exponent = bits & exp_mask
        sign = bits & u(1 << (src_exp + src_mant))
        bits = np.where(exponent > u((src_bias + dst_bias) << src_mant), sign | exp_mask, bits)
        bits = np.where(exponent <= u((src_bias - dst_bias) << src_mant), sign, bits)
    out = bits.view(wide)
    nan = np.isnan(xw)
    if nan.any():
        out = np.where(nan, xw if mantissa_bits > 0 else np.inf, out)
    return out.astype(dt)


# -- binary -----------------------------------------------------------------------------------

def _arith(fn_float, fn_int):
    def impl(ctx, op, a, b):
        if is_float_dtype(a.dtype) or a.dtype.kind == "c":
            return compute_float(fn_float, a, b, exact=True, out=_donor(ctx, op))
        return fn_int(a, b)
    return impl


register("stablehlo.add", elementwise=True)(_arith(np.add, lambda a, b: (a | b) if a.dtype == np.bool_ else np.add(a, b)))
register("stablehlo.subtract", elementwise=True)(_arith(np.subtract, np.subtract))
register("stablehlo.multiply", elementwise=True)(
    _arith(np.multiply, lambda a, b: (a & b) if a.dtype == np.bool_ else np.multiply(a, b)))
register("stablehlo.atan2", elementwise=True)(_float_op(_atan2, "atan2"))
register("chlo.polygamma", elementwise=True)(_float_op(lambda n, x: sp.polygamma(n.astype(np.int64), x), "polygamma"))
register("chlo.zeta", elementwise=True)(_float_op(sp.zeta, "zeta"))


@register("chlo.next_after", elementwise=True)
def _next_after(ctx, op, a, b):
    """One step from a toward b on the bit pattern (C's nextafter, for every width: numpy's
    float16 one returns a, not b, for a == b); b when they are equal, NaN if either is."""
    if a.dtype.itemsize not in (2, 4, 8):
        return compute_float(np.nextafter, a, b)
    b = b.astype(a.dtype)
    u = np.dtype(f"u{a.dtype.itemsize}")
    bx, by = np.asarray(a).view(u), np.asarray(b).view(u)
    x, y = a.astype(np.float64), b.astype(np.float64)
    one, sign = u.type(1), u.type(1 << (8 * u.itemsize - 1))
    step = np.where((x < y) == (x > 0), bx + one, bx - one).astype(u)
    step = np.where(x == 0, (by & sign) | one, step)
    out = np.where(x == y, by, step).astype(u).view(a.dtype)
    return np.where(np.isnan(x) | np.isnan(y), np.array(np.nan, a.dtype), out)


@register("stablehlo.maximum", elementwise=True)
def _maximum(ctx, op, a, b):
    if a.dtype.kind == "c":
        take_a = (a.real > b.real) | ((a.real == b.real) & (a.imag >= b.imag))
        return np.where(take_a, a, b)
    if is_float_dtype(a.dtype):
        return compute_float(ieee_maximum, a, b, exact=True)  # NaN propagates
    return np.maximum(a, b)


@register("stablehlo.minimum", elementwise=True)
def _minimum(ctx, op, a, b):
    if a.dtype.kind == "c":
        take_a = (a.real < b.real) | ((a.real == b.real) & (a.imag <= b.imag))
        return np.where(take_a, a, b)
    if is_float_dtype(a.dtype):
        return compute_float(ieee_minimum, a, b, exact=True)
    return np.minimum(a, b)


@register("stablehlo.divide", elementwise=True)
def _divide(ctx, op, a, b):
    if is_float_dtype(a.dtype) or a.dtype.kind == "c":
        return compute_float(np.divide, a, b, exact=True, out=_donor(ctx, op))
    if a.dtype == np.bool_:
        raise TypeError("divide is not defined on booleans")
    a, b = np.broadcast_arrays(a, b)
    zero = b == 0
    safe = np.where(zero, 1, b).astype(a.dtype)
    if a.dtype.kind == "i":
        overflow = (a == np.iinfo(a.dtype).min) & (b == -1)
        safe = np.where(overflow, 1, safe).astype(a.dtype)  # INT_MIN / 1 = INT_MIN
        q = np.floor_divide(a, safe)
        inexact = np.multiply(q, safe) != a
        q = np.where(inexact & ((a < 0) != (safe < 0)), q + 1, q).astype(a.dtype)
    else:
        q = np.floor_divide(a, safe)
    all_ones = np.array(-1).astype(a.dtype) if a.dtype.kind == "i" else np.array(np.iinfo(a.dtype).max, a.dtype)
    return np.where(zero, all_ones, q).astype(a.dtype)


@register("stablehlo.remainder", elementwise=True)
def _remainder(ctx, op, a, b):
    if is_float_dtype(a.dtype):
        return compute_float(np.fmod, a, b, exact=True)
    if a.dtype.kind == "c":
        # lhs - rhs * trunc(lhs / rhs), the quotient truncated part by part.
        def complex_fmod(x, y):
            q = x / y
            return x - y * (np.trunc(q.real) + 1j * np.trunc(q.imag))
        return compute_float(complex_fmod, a, b)
    if a.dtype == np.bool_:
        raise TypeError("remainder is not defined on booleans")
    a, b = np.broadcast_arrays(a, b)
    zero = b == 0
    safe = np.where(zero, 1, b).astype(a.dtype)
    if a.dtype.kind == "i":
        safe = np.where((a == np.iinfo(a.dtype).min) & (b == -1), 1, safe).astype(a.dtype)
    r = np.fmod(a, safe)
    return np.where(zero, a, r).astype(a.dtype)


@register("stablehlo.power", elementwise=True)
def _power(ctx, op, a, b):
    if is_float_dtype(a.dtype) or a.dtype.kind == "c":
        return compute_float(np.power, a, b, out=_donor(ctx, op))
    a, b = np.broadcast_arrays(a, b)
    dt = a.dtype
    result = np.ones(a.shape, dtype=dt)
    base = a.copy()
    exp = b.astype(np.int64) if dt.kind == "i" else b.astype(np.uint64)
    negative = exp < 0
    e = np.where(negative, 0, exp)
    while np.any(e > 0):
        odd = (e & 1) == 1
        result = np.where(odd, np.multiply(result, base), result).astype(dt)
        base = np.multiply(base, base).astype(dt)
        e = e >> 1
    if dt.kind == "i":
        neg_result = np.where(a == 1, 1, np.where(a == -1, np.where(exp % 2 == 0, 1, -1), 0)).astype(dt)
        result = np.where(negative, neg_result, result)
    return result.astype(dt)


def _bitwise(fn_bool, fn_int):
    def impl(ctx, op, a, b):
        return fn_bool(a, b) if a.dtype == np.bool_ else fn_int(a, b)
    return impl


register("stablehlo.and", elementwise=True)(_bitwise(np.logical_and, np.bitwise_and))
register("stablehlo.or", elementwise=True)(_bitwise(np.logical_or, np.bitwise_or))
register("stablehlo.xor", elementwise=True)(_bitwise(np.logical_xor, np.bitwise_xor))


def _shift_amount(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray, int]:
    bits = a.dtype.itemsize * 8
    amount = np.asarray(b).view(_unsigned(b.dtype)).astype(np.uint64)
    in_range = amount < bits
    return np.where(in_range, amount, 0).astype(_unsigned(a.dtype)), in_range, bits


@register("stablehlo.shift_left", elementwise=True)
def _shift_left(ctx, op, a, b):
    amount, in_range, _ = _shift_amount(a, b)
    u = np.asarray(a).view(_unsigned(a.dtype))
    shifted = np.left_shift(u, amount).astype(u.dtype).view(a.dtype)
    return np.where(in_range, shifted, np.zeros((), a.dtype)).astype(a.dtype)


@register("stablehlo.shift_right_logical", elementwise=True)
def _shift_right_logical(ctx, op, a, b):
    amount, in_range, _ = _shift_amount(a, b)
    u = np.asarray(a).view(_unsigned(a.dtype))
    shifted = np.right_shift(u, amount).astype(u.dtype).view(a.dtype)
    return np.where(in_range, shifted, np.zeros((), a.dtype)).astype(a.dtype)


@register("stablehlo.shift_right_arithmetic", elementwise=True)
def _shift_right_arithmetic(ctx, op, a, b):
    amount, in_range, bits = _shift_amount(a, b)
    s = np.asarray(a).view(_signed(a.dtype))
    amount = np.where(in_range, amount, bits - 1).astype(s.dtype)  # past the width: sign fill
    return np.right_shift(s, amount).astype(s.dtype).view(a.dtype)


# -- compare, select, clamp -------------------------------------------------------------------

def total_order_key(x: np.ndarray) -> np.ndarray:
    """Signed integers ordered like IEEE totalOrder on the floats ``x``."""
    dt = x.dtype
    s = np.asarray(x).view(_signed(dt))
    magnitude = np.array(np.iinfo(_signed(dt)).max, dtype=s.dtype)
    return np.where(s < 0, s ^ magnitude, s)


_COMPARE = {
    ComparisonDirection.EQ: np.equal,
    ComparisonDirection.NE: np.not_equal,
    ComparisonDirection.GE: np.greater_equal,
    ComparisonDirection.GT: np.greater,
    ComparisonDirection.LE: np.less_equal,
    ComparisonDirection.LT: np.less,
}


@register("stablehlo.compare", elementwise=True)
def _compare(ctx, op: Op, a, b):
    direction = op.attributes["comparison_direction"]
    kind = op.attributes.get("compare_type", ComparisonType.FLOAT)
    fn = _COMPARE[ComparisonDirection(direction)]
    if a.dtype.kind == "c":
        if direction in (ComparisonDirection.EQ, ComparisonDirection.NE):
            return fn(a, b)
        # Lexicographic on (real, imag).
        lt = (a.real < b.real) | ((a.real == b.real) & (a.imag < b.imag))
        gt = (a.real > b.real) | ((a.real == b.real) & (a.imag > b.imag))
        eq = (a.real == b.real) & (a.imag == b.imag)
        return {ComparisonDirection.LT: lt, ComparisonDirection.GT: gt,
                ComparisonDirection.LE: lt | eq, ComparisonDirection.GE: gt | eq}[direction]
    if is_float_dtype(a.dtype):
        if kind == ComparisonType.TOTALORDER:
            return fn(total_order_key(a), total_order_key(b))
        if a.dtype == b.dtype and a.dtype in _NATIVE:
            return fn(a, b)
        return fn(a.astype(np.float64), b.astype(np.float64))
    if kind == ComparisonType.UNSIGNED and a.dtype.kind == "i":
        return fn(a.view(_unsigned(a.dtype)), b.view(_unsigned(b.dtype)))
    if kind == ComparisonType.SIGNED and a.dtype.kind == "u":
        return fn(a.view(_signed(a.dtype)), b.view(_signed(b.dtype)))
    return fn(a, b)


@register("stablehlo.select", elementwise=True)
def _select(ctx, op, pred, on_true, on_false):
    dt = on_true.dtype
    if (pred.dtype == np.bool_ and pred.shape == on_true.shape == on_false.shape
            and on_false.dtype == dt and dt.itemsize in (1, 2, 4, 8)):
        # On the bits, without branching on the data (np.where's branches cost it three times
        # as long on a predicate without a pattern): out = other ^ ((t ^ f) * keep), where
        # keep is 1 where the result is the operand not named other, 0 elsewhere (a bool is
        # 0 or 1 once converted, whatever byte it holds). The same bits as np.where. The
        # result may go into either operand's storage: into the one it does not read last.
        bits = _unsigned(dt)
        t, f = on_true.view(bits), on_false.view(bits)
        out = ctx.donor(on_true.shape, dt)
        if out is pred:  # a bool select may be offered its predicate first
            out = ctx.donor(on_true.shape, dt)
        if out is None:
            out = np.empty(on_true.shape, dt)
        o = out.view(bits)
        if out is on_false:
            other, keep = t, np.logical_not(pred)
        else:
            other, keep = f, pred
        np.bitwise_xor(t, f, out=o)
        np.multiply(o, keep, out=o)
        np.bitwise_xor(o, other, out=o)
        return out
    return np.where(pred, on_true, on_false).astype(dt, copy=False)


@register("stablehlo.clamp", elementwise=True)
def _clamp(ctx, op, lo, x, hi):
    if x.dtype in _NATIVE and lo.dtype == x.dtype and hi.dtype == x.dtype:
        # numpy's clip is one vectorised pass (the composition below is four); it differs from
        # the spec's IEEE maximum/minimum only where the result is a zero (which zero) or a NaN
        # (which NaN), so those places take the composition (a relu6 has many zeros).
        clipped = np.asarray(np.clip(x, lo, hi))  # an array even for 0-d operands (a scalar otherwise)
        if clipped.all() and not np.isnan(np.max(clipped, initial=0)):  # NaN if any is
            return clipped
        special = (clipped == 0) | np.isnan(clipped)
        low, value, high = (a[special] for a in np.broadcast_arrays(lo, x, hi))
        clipped[special] = ieee_minimum(ieee_maximum(value, low), high)
        return clipped
    if is_float_dtype(x.dtype):
        return compute_float(lambda low, v, high: ieee_minimum(ieee_maximum(v, low), high), lo, x, hi, dtype=x.dtype,
                             exact=True)
    return np.minimum(np.maximum(x, lo), hi).astype(x.dtype)


# -- conversions ------------------------------------------------------------------------------

def convert(x: np.ndarray, dt: np.dtype) -> np.ndarray:
    """``stablehlo.convert`` to numpy dtype ``dt`` (see the module docstring for the rules)."""
    src = x.dtype
    if dt == src:
        return x
    if dt == np.bool_:
        return x != 0
    if _is_low_float(src):
        # float32 holds every narrower float exactly (and ml_dtypes cannot cast every pair of
        # 8-bit floats directly).
        x = x.astype(np.float32)
        src = x.dtype
        if dt == src:
            return x
    if src.kind == "c" and dt.kind != "c":
        x = np.real(x)
        src = x.dtype
    if dt.kind in "iu" and (is_float_dtype(src)):
        info = np.iinfo(dt)
        v = np.trunc(x.astype(np.float64))
        v = np.where(np.isnan(v), 0, v)
        # float64 cannot hold int64/uint64 bounds exactly; compare in float, then pin the ends.
        low, high = float(info.min), float(info.max)
        out = np.clip(v, low, high)
        result = np.empty(out.shape, dtype=dt)
        big = out >= high
        small = out <= low
        mid = ~(big | small)
        result[mid] = out[mid].astype(dt)
        result[big] = info.max
        result[small] = info.min
        return result
    if is_float_dtype(dt) and _is_low_float(dt) and src.kind in "iub":
        return x.astype(np.float64).astype(np.float32).astype(dt)
    if is_float_dtype(dt) and _is_low_float(dt) and is_float_dtype(src) and src.itemsize > 4:
        return x.astype(np.float32).astype(dt)
    if dt.kind in "iu" and src.kind in "iu":
        return x.astype(dt)  # wraps
    return x.astype(dt)


@register("stablehlo.convert")
def _convert(ctx, op, x):
    return convert(x, op.results[0].type.dtype)


@register("stablehlo.bitcast_convert")
def _bitcast_convert(ctx, op, x):
    out = op.results[0].type
    data = np.ascontiguousarray(x).reshape(x.shape)  # (ascontiguousarray makes 0-d arrays 1-d)
    src_bits, dst_bits = op.operands[0].tensor_type.bit_width, out.bit_width
    if min(src_bits, dst_bits) < 8:
        return _bitcast_sub_byte(data, src_bits, out.dtype, dst_bits)
    if x.dtype.itemsize == out.dtype.itemsize:
        return data.view(out.dtype)
    return data.reshape(-1).view(out.dtype).reshape(out.shape)


def _bitcast_sub_byte(x: np.ndarray, src_bits: int, dst: np.dtype, dst_bits: int) -> np.ndarray:
    """A bitcast where a side has elements narrower than a byte (``i4``, ``f4E2M1FN``), which
    numpy (ml_dtypes) keeps one to a byte, in its low bits: the elements' bit patterns as
    unsigned integers, split into (or joined from) ``dst_bits`` parts along the last dimension,
    the first part the lowest bits, as numpy's ``view`` orders the bytes of a wider element."""

    def unsigned(bits: int) -> np.dtype:
        return np.dtype(f"uint{max(bits, 8)}")

    patterns = x.view(unsigned(src_bits))
    if src_bits < 8:
        patterns = patterns & np.uint8((1 << src_bits) - 1)
    if src_bits > dst_bits:
        mask = (1 << dst_bits) - 1
        parts = [(patterns >> np.array(j * dst_bits, patterns.dtype)) & np.array(mask, patterns.dtype)
                 for j in range(src_bits // dst_bits)]
        patterns = np.stack(parts, axis=-1)
    elif src_bits < dst_bits:
        wide = unsigned(dst_bits)
        joined = np.zeros(patterns.shape[:-1], wide)
        for j in range(dst_bits // src_bits):
            joined |= patterns[..., j].astype(wide) << np.array(j * src_bits, wide)
        patterns = joined
    return np.ascontiguousarray(patterns.astype(unsigned(dst_bits))).view(dst)



# -- sub-byte integers --------------------------------------------------------------------------
# numpy has no arithmetic for ml_dtypes' int4/uint4/int2/uint2 (and no iinfo for them), so the
# elementwise ops see them as int8/uint8 values and their results are wrapped back to the width,
# as hardware of that width would wrap. Only what depends on the width itself is special: a
# logical shift, popcnt and count_leading_zeros look at the N-bit pattern, and a float converts
# saturating at the N-bit range.


def _sub_byte(dt: np.dtype) -> tuple[int, bool] | None:
    """(bits, signed) of a sub-byte integer dtype, else None."""
    import ml_dtypes

    for name, bits, signed in (("int4", 4, True), ("uint4", 4, False), ("int2", 2, True), ("uint2", 2, False)):
        if hasattr(ml_dtypes, name) and dt == np.dtype(getattr(ml_dtypes, name)):
            return bits, signed
    return None


def _widen(x: np.ndarray) -> np.ndarray:
    info = _sub_byte(x.dtype)
    if info is None:
        return x
    return np.asarray(x).astype(np.int8 if info[1] else np.uint8)


def _wrap(values: np.ndarray, dt: np.dtype) -> np.ndarray:
    info = _sub_byte(dt)
    assert info is not None, f"{dt} is not a sub-byte integer type"
    bits, signed = info
    u = np.asarray(values).astype(np.int64) & ((1 << bits) - 1)
    if signed:
        u = np.where(u >= 1 << (bits - 1), u - (1 << bits), u)
    return u.astype(dt)


def _pattern(x: np.ndarray, bits: int) -> np.ndarray:
    return (np.asarray(x).astype(np.int64) & ((1 << bits) - 1)).astype(np.uint8)


def involves_sub_byte(op: Op, args) -> bool:
    types = [getattr(a, "dtype", None) for a in args] + [getattr(r.type, "dtype", None) for r in op.results]
    return any(t is not None and t.kind == "V" and _sub_byte(t) is not None for t in types)


def sub_byte_call(fn, ctx, op: Op, args):
    """Run an elementwise op (or ``convert``) that reads or writes sub-byte integers."""
    dst = op.results[0].tensor_type.dtype  # elementwise ops and convert make one tensor
    name = op.name
    src_info = _sub_byte(args[0].dtype) if args else None
    dst_info = _sub_byte(dst)
    if name == "stablehlo.convert" and dst_info is not None:
        x = _widen(args[0])
        bits, signed = dst_info
        if is_float_dtype(x.dtype) or x.dtype.kind == "c":
            lo, hi = (-(1 << (bits - 1)), (1 << (bits - 1)) - 1) if signed else (0, (1 << bits) - 1)
            f = np.real(np.asarray(x)).astype(np.float64)
            return _wrap(np.trunc(np.clip(np.nan_to_num(f, nan=0.0), lo, hi)), dst)
        return _wrap(np.asarray(x).astype(np.int64), dst)
    if src_info is not None and name in ("stablehlo.shift_right_logical", "stablehlo.popcnt",
                                          "stablehlo.count_leading_zeros", "stablehlo.shift_right_arithmetic"):
        bits = src_info[0]
        a = _pattern(args[0], bits)
        if name == "stablehlo.shift_right_arithmetic":
            # Fill with the top bit of the N-bit pattern (unsigned types too).
            filled = a.astype(np.int64) - np.where(a >= 1 << (bits - 1), 1 << bits, 0)
            amount = _pattern(args[1], bits).astype(np.int64)
            return _wrap(filled >> np.minimum(amount, bits - 1), dst)
        if name == "stablehlo.popcnt":
            return _wrap(np.bitwise_count(a), dst)
        if name == "stablehlo.count_leading_zeros":
            return _wrap(bits - np.floor(np.log2(np.maximum(a, 1))).astype(np.int64) - (a != 0), dst)
        amount = _pattern(args[1], bits)
        return _wrap(np.where(amount < bits, a >> np.minimum(amount, bits - 1), 0), dst)
    out = fn(ctx, op, *[_widen(a) for a in args])
    if dst_info is not None:
        return _wrap(out, dst)
    return out
