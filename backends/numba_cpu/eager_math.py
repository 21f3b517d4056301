"""numpy twins of the scalar helpers the generated kernels call, for the eager tier.

The lowering rules (:mod:`.rules`) emit the formula of each elementwise op as text in a small
vocabulary: operators, ``np.float32(...)`` conversions, conditional expressions and the helpers
of :mod:`.support`, :mod:`.intrinsics` and :mod:`.vecmath`. The eager tier (:mod:`.eager`)
evaluates that same text on whole arrays, with the conditional expressions turned into
``np.where`` and each helper name bound to its twin here. A twin computes exactly what the
compiled helper computes, element by element: the same operations in the same order and the
same type (float32 stays float32), so the two tiers agree bit for bit; the tests compare every
twin with its compiled helper on special values and on random bit patterns.

Three things need care beyond transcribing the formulas:

* numpy's float64 ``exp``, ``sin``, ``pow``... are SIMD implementations on AVX-512 machines, not
  the C library the compiled code calls, and Python's :mod:`math` computes some functions
  itself (lgamma, erf), so the libm-backed helpers call the C library's functions through
  ctypes, element by element.
* XLA's integer semantics (division by zero, shifts past the width, saturating float to int
  conversion) are spelled out with ``np.where``; numpy's own differ.
* NaN payloads are not reproduced: where either tier produces a NaN, the other produces a NaN at
  the same place, possibly with other payload bits (XLA makes no promise about them either).

Names missing here make the eager tier decline a program (it then waits for the compiled code),
so a helper added to the kernels without a twin costs speed, never correctness.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import math
from typing import Any

import numpy as np

from . import machine_kernels, mathconst
from .target import HAS_FMA

__all__ = ["NAMESPACE", "TYPES"]

_f32 = np.float32
_f64 = np.float64
_i32 = np.int32
_i64 = np.int64
_u32 = np.uint32

_UNSIGNED = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}
_SIGNED = {1: np.int8, 2: np.int16, 4: np.int32, 8: np.int64}


class _Types:
    """Stands in for ``numba.types`` in generated text: ``types.float32`` is a numpy type."""

    boolean = np.bool_
    bool_ = np.bool_
    float32 = np.float32
    float64 = np.float64
    int8, int16, int32, int64 = np.int8, np.int16, np.int32, np.int64
    uint8, uint16, uint32, uint64 = np.uint8, np.uint16, np.uint32, np.uint64


TYPES = _Types()


def _a(x: Any) -> np.ndarray:
    return np.asarray(x)


def _where(c, a, b):
    """``a if c else b``: numpy's ``where`` keeps the type numba unifies the branches to (both
    branches of generated conditionals have one type)."""
    return np.where(c, a, b)


def _unsigned(x: np.ndarray) -> np.ndarray:
    x = _a(x)
    return x.view(_UNSIGNED[x.dtype.itemsize]) if x.dtype.kind == "i" else x


def _signed(x: np.ndarray) -> np.ndarray:
    x = _a(x)
    return x.view(_SIGNED[x.dtype.itemsize]) if x.dtype.kind == "u" else x


def _same(x, dtype) -> np.ndarray:
    return _a(x).astype(dtype, copy=False)


# -- intrinsics ---------------------------------------------------------------------------------
# Each twin accepts the operand types its intrinsic's typer accepts and raises TypeError for
# the others, so that the eager tier declines what numba would refuse to compile.


def _same_type(a, b, kinds: str = "biuf") -> None:
    da, db = np.asarray(a).dtype, np.asarray(b).dtype
    if da != db or da.kind not in kinds:
        raise TypeError(f"operands of {da} and {db}")


def _kind_of(a, kinds: str) -> np.ndarray:
    a = np.asarray(a)
    if a.dtype.kind not in kinds:
        raise TypeError(f"operand of {a.dtype}")
    return a


def iadd(a, b):
    _same_type(a, b)
    return np.add(a, b)


def isub(a, b):
    _same_type(a, b)
    return np.subtract(a, b)


def imul(a, b):
    _same_type(a, b)
    return np.multiply(a, b)


def iand(a, b):
    _same_type(a, b, "biu")
    return np.bitwise_and(a, b)


def ior(a, b):
    _same_type(a, b, "biu")
    return np.bitwise_or(a, b)


def ixor(a, b):
    _same_type(a, b, "biu")
    return np.bitwise_xor(a, b)


def inot(a):
    return np.invert(a)


def _div_parts(x, y):
    x, y = np.broadcast_arrays(_a(x), _a(y))
    dt = x.dtype
    zero = y == 0
    if dt.kind == "i":
        minval = np.iinfo(dt).min
        overflow = (x == minval) & (y == -1)
    else:
        overflow = np.zeros(x.shape, bool)
    safe = np.where(zero | overflow, np.ones((), dt), y)
    return x, y, zero, overflow, safe


def idiv(x, y):
    """XLA: x / 0 is -1 (all bits set), MIN / -1 is MIN; otherwise truncating division."""
    _same_type(x, y, "iu")
    x, y, zero, overflow, safe = _div_parts(x, y)
    dt = x.dtype
    q = np.floor_divide(x, safe)
    if dt.kind == "i":
        # floor -> truncation: one up when the signs differ and the division is inexact.
        r = x - q * safe
        q = np.where((r != 0) & ((x < 0) != (safe < 0)), q + np.ones((), dt), q)
        q = np.where(overflow, np.asarray(np.iinfo(dt).min, dt), q)
    ones = np.asarray(-1, np.int64).astype(dt) if dt.kind == "i" else np.asarray(np.iinfo(dt).max, dt)
    return np.where(zero, ones, q).astype(dt)


def irem(x, y):
    """XLA: x % 0 is x, MIN % -1 is 0; otherwise the sign of the dividend (C's %)."""
    _same_type(x, y, "iu")
    x, y, zero, overflow, safe = _div_parts(x, y)
    r = np.fmod(x, safe)
    r = np.where(overflow, np.zeros((), x.dtype), r)
    return np.where(zero, x, r).astype(x.dtype)


def _shift(x, s, kind: str):
    _same_type(x, s, "iu")
    x, s = np.broadcast_arrays(_a(x), _a(s))
    dt = x.dtype
    width = dt.itemsize * 8
    count = _unsigned(s).astype(np.uint64)
    in_range = count < width
    safe = np.where(in_range, count, 0).astype(dt)
    if kind == "shl":
        return np.where(in_range, np.left_shift(x, safe), np.zeros((), dt)).astype(dt)
    if kind == "lshr":
        u = _unsigned(x)
        out = np.right_shift(u, safe.view(u.dtype))
        return np.where(in_range, out, np.zeros((), u.dtype)).astype(u.dtype).view(dt)
    sx = _signed(x)
    fill = np.right_shift(sx, np.asarray(width - 1).astype(sx.dtype))
    out = np.right_shift(sx, safe.view(sx.dtype))
    return np.where(in_range, out, fill).astype(sx.dtype).view(dt)


def shl(x, s):
    return _shift(x, s, "shl")


def shr_logical(x, s):
    return _shift(x, s, "lshr")


def shr_arith(x, s):
    return _shift(x, s, "ashr")


def shl_raw(x, s):
    return np.left_shift(x, s)


def ashr_raw(x, s):
    return np.right_shift(_signed(x), _signed(s)).view(_a(x).dtype)


_ICMP = {"EQ": np.equal, "NE": np.not_equal, "LT": np.less, "LE": np.less_equal, "GT": np.greater,
         "GE": np.greater_equal}


def icmp(a, b, direction):
    _same_type(a, b)
    return _ICMP[direction](a, b)


def bitcast(x, to):
    return _a(x).view(to)


def i2i(x, to):
    return _a(x).astype(to)


def i2f(x, to):
    return _a(x).astype(to)


def f2i(x, to):
    """Truncate toward zero, saturate at the target's range, NaN to 0; to bool: x != 0."""
    x = _a(x)
    if to is np.bool_:
        return x != 0
    info = np.iinfo(to)
    # The bounds as floats of x's type, compared before converting (the conversion of an
    # out-of-range float is undefined in C).
    hi = x.dtype.type(info.max)
    lo = x.dtype.type(info.min)
    t = np.trunc(np.where(np.isnan(x), 0, x))
    inside = (t > lo) & (t < hi)
    safe = np.where(inside, t, 0).astype(to)
    out = np.where(t >= hi, np.asarray(info.max, to), np.where(t <= lo, np.asarray(info.min, to), safe))
    # hi rounds up to 2**bits in float32/64: a value equal to it saturates, one just below
    # converts; lo (-2**(bits-1) or 0) is exact.
    return out.astype(to)


def _fresh(x) -> np.ndarray:
    """A ufunc's result as an array it may write to (0-d operands give a scalar)."""
    return x if isinstance(x, np.ndarray) else np.array(x)


def _both_orders(fn, a, b, maximum: bool):
    """``fn`` (numpy's maximum or minimum, which propagate NaN) with IEEE's order of signed
    zeros: max(-0, +0) is +0, min(-0, +0) is -0. numpy's answer for two zeros depends on the
    order of the operands (it returns one of them by position, which one depends on its loop), so
    the answers in both orders differ there, in the sign bit only; elsewhere they are equal, or
    both NaN. The result is the first answer with its sign bit ANDed (max: + if either is) or
    ORed (min: - if either is) with the second's: three passes and two bit operations, where
    masking the zeros took seven. Only the sign bit: two NaNs ANDed whole could leave no
    mantissa bit, an infinity."""
    bits = _UNSIGNED[a.dtype.itemsize]
    sign: Any = bits(1 << (8 * a.dtype.itemsize - 1))
    r, other = _fresh(fn(a, b)), _fresh(fn(b, a)).view(bits)
    if maximum:
        np.bitwise_or(other, ~sign, out=other)
        np.bitwise_and(r.view(bits), other, out=r.view(bits))
    else:
        np.bitwise_and(other, sign, out=other)
        np.bitwise_or(r.view(bits), other, out=r.view(bits))
    return r


def _zeros_by_mask(fn, a, b, maximum: bool):
    """What :func:`_both_orders` gives, the slow way (where numpy's loops would not allow it)."""
    r = np.asarray(fn(a, b))
    zeros = (a == 0) & (b == 0)
    if zeros.any():
        bits = _UNSIGNED[a.dtype.itemsize]
        ab, bb = a.view(bits), b.view(bits)
        fixed = (ab & bb if maximum else ab | bb).view(r.dtype)
        r = np.where(zeros, fixed, r)
    return r


def _orders_work() -> bool:
    for dtype in (np.float16, np.float32, np.float64):
        for n in (1, 64):  # numpy's scalar and vector loops
            z: Any = np.zeros(n, dtype)
            for fn, maximum in ((np.maximum, True), (np.minimum, False)):
                for a, b in ((-z, z), (z, -z), (-z, -z), (z, z)):
                    want = [bool(np.signbit(a[0]) and np.signbit(b[0]) if maximum
                                 else np.signbit(a[0]) or np.signbit(b[0]))] * n
                    if np.signbit(_both_orders(fn, a, b, maximum)).tolist() != want:
                        return False
    return True


_SIGNED_ZEROS = _both_orders if _orders_work() else _zeros_by_mask


def fmaximum(a, b):
    """IEEE 754-2019 maximum: NaN if either is NaN, and +0 > -0."""
    _same_type(a, b, "f")
    a, b = np.broadcast_arrays(_a(a), _a(b))
    return _SIGNED_ZEROS(np.maximum, a, b, True)


def fminimum(a, b):
    _same_type(a, b, "f")
    a, b = np.broadcast_arrays(_a(a), _a(b))
    return _SIGNED_ZEROS(np.minimum, a, b, False)


def rmax(a, b):
    a = _a(a)
    if a.dtype.kind == "f":
        return fmaximum(a, b)
    if a.dtype.kind == "b":
        return a | b
    return np.maximum(a, b)


def rmin(a, b):
    a = _a(a)
    if a.dtype.kind == "f":
        return fminimum(a, b)
    if a.dtype.kind == "b":
        return a & b
    return np.minimum(a, b)


def radd(a, b):
    return np.add(a, b)


def rmul(a, b):
    return np.multiply(a, b)


def ctpop(x):
    x = _kind_of(x, "iu")
    return np.bitwise_count(_unsigned(x)).astype(x.dtype)


def ctlz(x):
    x = _kind_of(x, "iu")
    width = x.dtype.itemsize * 8
    u = _unsigned(x).astype(np.uint64)
    length = np.zeros(u.shape, np.int64)
    for s in (32, 16, 8, 4, 2, 1):
        t = u >> np.uint64(s)
        m = t != 0
        length += np.where(m, s, 0)
        u = np.where(m, t, u)
    length += (u != 0)
    return (width - length).astype(x.dtype)


def fcmp_total(a, b, direction):
    _same_type(a, b, "f")

    def key(v):
        v = _a(v)
        bits = v.view(_SIGNED[v.dtype.itemsize])
        sign = bits >> (v.dtype.itemsize * 8 - 1)
        mask = (sign.view(_UNSIGNED[v.dtype.itemsize]) >> 1).view(bits.dtype)
        return bits ^ mask

    return _ICMP[direction](key(a), key(b))


def _float1(fn):
    def twin(x):
        return fn(_kind_of(x, "f"))

    twin.__name__ = fn.__name__
    return twin


fabs = _float1(np.abs)
fsqrt = _float1(np.sqrt)
ffloor = _float1(np.floor)
fceil = _float1(np.ceil)
ftrunc = _float1(np.trunc)
fround_even = _float1(np.rint)


def fcopysign(a, b):
    _same_type(a, b, "f")
    return np.copysign(a, b)


def fround_afz(x):
    """Round half away from zero (C ``round``): x - trunc(x) is exact."""
    x = _kind_of(x, "f")
    t = np.trunc(x)
    d = x - t
    return np.where(np.abs(d) >= x.dtype.type(0.5), t + np.copysign(x.dtype.type(1), x), t)


# -- 16-bit floats (stored as bits, computed in float32) ------------------------------------------


def bf16_value(bits):
    return (_a(bits).astype(np.uint32) << np.uint32(16)).view(np.float32)


def bf16_bits(x):
    u = _a(x).astype(np.float32).view(np.uint32)
    lsb = (u >> np.uint32(16)) & np.uint32(1)
    rounded = (u + (np.uint32(0x7FFF) + lsb)) >> np.uint32(16)
    nan = (u >> np.uint32(16)) | np.uint32(0x0040)
    return np.where(x != x, nan, rounded).astype(np.uint16)


def round_bf16(x):
    return bf16_value(bf16_bits(x))


def f16_value(bits):
    h = _a(bits).astype(np.uint32)
    sign = (h & np.uint32(0x8000)) << np.uint32(16)
    exp = (h >> np.uint32(10)) & np.uint32(0x1F)
    man = h & np.uint32(0x3FF)
    special = (sign | np.uint32(0x7F800000) | (man << np.uint32(13))).view(np.float32)
    mag = (man.astype(np.float32) * np.float32(5.960464477539063e-08)).astype(np.float32)
    denormal = np.where(sign != 0, -mag, mag)
    normal = (sign | ((exp + np.uint32(112)) << np.uint32(23)) | (man << np.uint32(13))).view(np.float32)
    return np.where(exp == 0x1F, special, np.where(exp == 0, denormal, normal))


def f16_bits(x):
    x = _a(x).astype(np.float32)
    u = x.view(np.uint32)
    sign = (u >> np.uint32(16)) & np.uint32(0x8000)
    a = np.abs(x)
    m = np.rint(a * np.float32(16777216.0))
    small = sign | f2i(m, np.uint32)
    au = a.view(np.uint32)
    lsb = (au >> np.uint32(13)) & np.uint32(1)
    r = ((au + (np.uint32(0xFFF) + lsb)) >> np.uint32(13)) - np.uint32(112 << 10)
    out = np.where(a < np.float32(6.103515625e-05), small, sign | r)
    out = np.where(a >= np.float32(65520.0), sign | np.uint32(0x7C00), out)
    out = np.where(x != x, sign | np.uint32(0x7E00), out)
    return out.astype(np.uint16)


def round_f16(x):
    return f16_value(f16_bits(x))


# -- small scalar semantics -----------------------------------------------------------------


def fsign(x, one):
    x = _a(x)
    return np.where(x < 0, -one, np.where(x > 0, one, x))


def isign(x, zero, one):
    _same_type(x, zero, "iu")
    neg = np.subtract(zero, one)
    return np.where(x < zero, neg, np.where(x > zero, one, zero))


def iabs(x, zero):
    _same_type(x, zero, "iu")
    return np.where(x < zero, np.subtract(zero, x), x)


def imax(a, b):
    _same_type(a, b, "biu")
    return np.where(a >= b, a, b)


def imin(a, b):
    _same_type(a, b, "biu")
    return np.where(a <= b, a, b)


def ipow(x, y, zero, one):
    x, y = np.broadcast_arrays(_a(x), _a(y))
    dt = x.dtype
    result = np.full(x.shape, one, dt)
    base = x.copy()
    e = np.where(y < zero, zero, y).astype(y.dtype)
    eu = _unsigned(e).copy()
    while np.any(eu != 0):
        odd = (eu & eu.dtype.type(1)) != 0
        result = np.where(odd, np.multiply(result, base), result)
        base = np.multiply(base, base)
        eu = eu >> eu.dtype.type(1)
    minus_one = np.subtract(zero, one)
    negative = np.where(x == one, one, np.where(x == minus_one, np.where((y & one) == zero, one, x), zero))
    return np.where(y < zero, negative, result).astype(dt)


def frem(x, y):
    return np.fmod(_a(x).astype(np.float64), _a(y).astype(np.float64))


def isfinite_f(x):
    return fabs(x) < np.inf


def next_after_bits(bx, by, x, y, one, sign, nan):
    bx, by, x, y = _a(bx), _a(by), _a(x), _a(y)
    out = np.where((x < y) == (x > 0), bx + one, bx - one)
    out = np.where(x == 0, (by & sign) | one, out)
    out = np.where(x == y, by, out)
    return np.where((x != x) | (y != y), nan, out).astype(bx.dtype)


def clamp_index(i, hi):
    v = _a(i).astype(np.int64)
    return np.minimum(np.maximum(v, 0), hi)


# -- libm, element by element ----------------------------------------------------------------


@functools.lru_cache(maxsize=1)
def _libm() -> ctypes.CDLL:
    """The C library's libm, which the compiled code calls (numba lowers ``math.exp``,
    ``math.lgamma``... to calls of the same symbols). Python's math module is not always it:
    CPython computes lgamma and erf itself."""
    return ctypes.CDLL(ctypes.util.find_library("m") or "libm.so.6")


@functools.lru_cache(maxsize=None)
def _libm_function(name: str, arity: int):
    fn = getattr(_libm(), name)
    fn.restype = ctypes.c_double
    fn.argtypes = [ctypes.c_double] * arity
    return fn


def _libm1(name: str):
    """libm's ``name`` on each element, in float64."""

    def apply(x):
        fn = _libm_function(name, 1)
        d = _a(x).astype(np.float64)
        if d.ndim == 0:
            return np.float64(fn(float(d)))
        return np.frompyfunc(fn, 1, 1)(d).astype(np.float64)

    apply.__name__ = name
    return apply


def _libm2(name: str):
    def apply(x, y):
        fn = _libm_function(name, 2)
        x, y = np.broadcast_arrays(_a(x).astype(np.float64), _a(y).astype(np.float64))
        if x.ndim == 0:
            return np.float64(fn(float(x), float(y)))
        return np.frompyfunc(fn, 2, 1)(x, y).astype(np.float64)

    apply.__name__ = name
    return apply


_exp = _libm1("exp")
_expm1 = _libm1("expm1")
_tanh = _libm1("tanh")
_sin = _libm1("sin")
_cos = _libm1("cos")
_tan = _libm1("tan")
_sinh = _libm1("sinh")
_cosh = _libm1("cosh")
_asin = _libm1("asin")
_acos = _libm1("acos")
_atan = _libm1("atan")
_asinh = _libm1("asinh")
_acosh = _libm1("acosh")
_atanh = _libm1("atanh")
_lgamma = _libm1("lgamma")
_log = _libm1("log")
_log1p = _libm1("log1p")
_erf = _libm1("erf")
_erfc = _libm1("erfc")
_cbrt = _libm1("cbrt")
_atan2 = _libm2("atan2")
_pow = _libm2("pow")


def exp_f64(x):
    return _exp(x)


def log_f64(x):
    x = _a(x)
    safe = np.where(x > 0.0, x, 1.0)
    return np.where(x > 0.0, _log(safe), np.where(x == 0.0, -np.inf, np.nan))


def logistic_f64(x):
    x = _a(x)
    e = _exp(-np.abs(x))
    r = 1.0 / (1.0 + e)
    return np.where(x >= 0.0, r, e * r)


def tanh_f64(x):
    return _tanh(x)


def expm1_f64(x):
    return _expm1(x)


def log1p_f64(x):
    x = _a(x)
    safe = np.where(x > -1.0, x, 0.0)
    return np.where(x > -1.0, _log1p(safe), np.where(x == -1.0, -np.inf, np.nan))


def sin_f(x):
    return _sin(x)


def cos_f(x):
    return _cos(x)


def tan_f(x):
    return _tan(x)


def sinh_f(x):
    return _sinh(x)


def cosh_f(x):
    return _cosh(x)


def asin_f(x):
    d = _a(x).astype(np.float64)
    ok = (d >= -1.0) & (d <= 1.0)
    return np.where(ok, _asin(np.where(ok, d, 0.0)), np.nan)


def acos_f(x):
    d = _a(x).astype(np.float64)
    ok = (d >= -1.0) & (d <= 1.0)
    return np.where(ok, _acos(np.where(ok, d, 0.0)), np.nan)


def atan_f(x):
    return _atan(x)


def asinh_f(x):
    return _asinh(x)


def acosh_f(x):
    d = _a(x).astype(np.float64)
    ok = d >= 1.0
    return np.where(ok, _acosh(np.where(ok, d, 1.0)), np.nan)


def atanh_f(x):
    d = _a(x).astype(np.float64)
    ok = (d > -1.0) & (d < 1.0)
    inner = np.where(ok, _atanh(np.where(ok, d, 0.0)), np.nan)
    return np.where(d == 1.0, np.inf, np.where(d == -1.0, -np.inf, inner))


def lgamma_f(x):
    d = _a(x).astype(np.float64)
    pole = (d <= 0.0) & (d == np.floor(d))
    return np.where(pole, np.inf, _lgamma(np.where(pole, 1.0, d)))


def atan2_f(y, x):
    return _atan2(y, x)


def fpow64(x, y):
    return _pow(x, y)


@functools.lru_cache(maxsize=None)
def _special(name: str):
    """``.special``'s compiled function (the kernels call the same; compiled on first use, or
    loaded from numba's cache), elementwise through numpy."""
    from . import special

    compiled = getattr(special, name)
    return np.frompyfunc(compiled, compiled.py_func.__code__.co_argcount, 1)


def _apply_special(name: str, *xs):
    args = np.broadcast_arrays(*(_a(x).astype(np.float64) for x in xs))
    out = _special(name)(*args)
    return np.float64(out) if args[0].ndim == 0 else np.asarray(out).astype(np.float64)


def digamma_f(x):
    return _apply_special("digamma64", x)


def polygamma_f(n, x):
    return _apply_special("polygamma64", n, x)


def zeta_f(x, q):
    return _apply_special("zeta64", x, q)


def i1e_f(x):
    return _apply_special("i1e64", x)


def erf_f(x):
    return _erf(x)


def erfc_f(x):
    return _erfc(x)


def cbrt_f(x):
    return _cbrt(x)


_TWO_OVER_SQRT_PI = 1.1283791670955126


def _erf_inv_one(d: float) -> float:
    if not (d > -1.0 and d < 1.0):
        if d == 1.0:
            return math.inf
        if d == -1.0:
            return -math.inf
        return math.nan
    if d == 0.0:
        return d
    a = 0.147
    log1p, erf, exp = _libm_function("log1p", 1), _libm_function("erf", 1), _libm_function("exp", 1)
    ln = log1p(-d * d)
    t = 2.0 / (math.pi * a) + 0.5 * ln
    y = math.sqrt(math.sqrt(t * t - ln / a) - t)
    y = y if d > 0.0 else -y
    for _ in range(4):
        err = erf(y) - d
        y = y - err / (_TWO_OVER_SQRT_PI * exp(-y * y))
    return y


_erf_inv_u = np.frompyfunc(_erf_inv_one, 1, 1)


def erf_inv_f(x):
    d = _a(x).astype(np.float64)
    if d.ndim == 0:
        return np.float64(_erf_inv_one(float(d)))
    return np.asarray(_erf_inv_u(d)).astype(np.float64)


# -- vecmath: float32 formulas, transcribed op for op ------------------------------------------

_LOG2E = _f32(1.4426950408889634)
_LN2_HI = _f32(0.693145751953125)
_LN2_LO = _f32(1.428606765330187e-06)
_ROUND = _f32(12582912.0)
_E3, _E4, _E5, _E6, _E7 = (_f32(1 / 6), _f32(1 / 24), _f32(1 / 120), _f32(1 / 720), _f32(1 / 5040))
_ONE = _f32(1.0)
_HALF = _f32(0.5)


_LOW29 = np.uint64((1 << 29) - 1)
_HALF_ULP32 = np.uint64(1 << 28)


def _fma32(a, b, c):
    """float32 ``a * b + c`` rounded once, as the compiled tier's ``llvm.fma``. The product of
    two float32 is exact in float64 and the float64 sum is rounded once; rounding that to float32
    is the fma's result except where the sum was rounded onto a float32 halfway point (or lies
    below float32's normal range): there the sum's exact error (TwoSum) turns it into the
    round-to-odd sum, which rounds to float32 correctly (Boldo and Melquiond, 2008). NaN
    payloads may differ from the instruction's (the tiers' contract treats NaNs as equal)."""
    p = np.multiply(a, b, dtype=np.float64)
    c64 = np.asarray(c, dtype=np.float64)
    s = np.asarray(p + c64)
    bits = s.view(np.uint64)
    suspect = ((bits & _LOW29) == _HALF_ULP32) | (np.abs(s) < 2.0 ** -125)
    if suspect.any():
        p, c64 = np.broadcast_to(p, s.shape)[suspect], np.broadcast_to(c64, s.shape)[suspect]
        t = s[suspect]
        v = t - p
        err = (p - (t - v)) + (c64 - v)
        even = (t.view(np.uint64) & np.uint64(1)) == 0
        away = (err > 0) == (t > 0)
        step = np.where(even & (err != 0), np.where(away, 1, -1), 0).astype(np.int64)
        s[suspect] = (t.view(np.int64) + step).view(np.float64)
    return s.astype(np.float32)


def _exp_core(x):
    if HAS_FMA:  # as .vecmath._exp_core_fused
        k = _fma32(x, _LOG2E, _ROUND) - _ROUND
        r = _fma32(-k, _LN2_HI, x)
        r = _fma32(-k, _LN2_LO, r)
        p = _fma32(r, _E7, _E6)
        for c in (_E5, _E4, _E3, _HALF, _ONE, _ONE):
            p = _fma32(p, r, c)
    else:
        k = (x * _LOG2E + _ROUND) - _ROUND
        r = (x - k * _LN2_HI) - k * _LN2_LO
        p = _ONE + r * (_ONE + r * (_HALF + r * (_E3 + r * (_E4 + r * (_E5 + r * (_E6 + r * _E7))))))
    # p * 2**n in two exact steps and one rounding: what vscalef gives in one
    n = _a(k).astype(np.int32)
    h = n >> _i32(1)
    s1 = ((h + _i32(127)) << _i32(23)).view(np.float32)
    s2 = (((n - h) + _i32(127)) << _i32(23)).view(np.float32)
    return p * s1 * s2


#: Elements of exp's argument taken at a time: the fma emulation's float64 temporaries then stay
#: in the core's cache, where a whole large array's would not.
_EXP_BLOCK = 1 << 14


def exp_f32(x):
    x = _a(x).astype(np.float32, copy=False)
    xc = np.minimum(np.maximum(np.nan_to_num(x, nan=0.0), _f32(-104.0)), _f32(89.0))
    if xc.size > _EXP_BLOCK:
        flat = xc.reshape(-1)
        y = np.empty_like(flat)
        for start in range(0, flat.size, _EXP_BLOCK):
            y[start:start + _EXP_BLOCK] = _exp_core(flat[start:start + _EXP_BLOCK])
        y = y.reshape(xc.shape)
    else:
        y = _exp_core(xc)
    return np.where(x == x, y, x)


_M = tuple(_f32(1 / math.factorial(k)) for k in range(2, 10))


def expm1_f32(x):
    x = _a(x).astype(np.float32, copy=False)
    p = _M[7]
    p = p * x + _M[6]
    p = p * x + _M[5]
    p = p * x + _M[4]
    p = p * x + _M[3]
    p = p * x + _M[2]
    p = p * x + _M[1]
    p = p * x + _M[0]
    small = np.copysign(x + x * x * p, x)
    return np.where(np.abs(x) < _HALF, small, exp_f32(x) - _ONE)


_SQRT_HALF_BITS = _i32(0x3F3504F3)
_MANT_MASK = _i32(0x007FFFFF)
_MIN_NORMAL = _f32(1.1754943508222875e-38)
_TWO23 = _f32(8388608.0)
_L1, _L2, _L3, _L4 = _f32(2 / 3), _f32(2 / 5), _f32(2 / 7), _f32(2 / 9)
_INF32 = _f32(np.inf)
_NAN32 = _f32(np.nan)


def log_f32(x):
    x = _a(x).astype(np.float32, copy=False)
    tiny = x < _MIN_NORMAL
    xs = np.where(tiny, x * _TWO23, x)
    ix = xs.view(np.int32) - _SQRT_HALF_BITS
    e = (ix >> _i32(23)) - np.where(tiny, _i32(23), _i32(0))
    m = ((ix & _MANT_MASK) + _SQRT_HALF_BITS).view(np.float32)
    f = m - _ONE
    s = f / (_f32(2.0) + f)
    z = s * s
    r = z * (_L1 + z * (_L2 + z * (_L3 + z * _L4)))
    hfsq = _HALF * f * f
    ef = e.astype(np.float32)
    y = ef * _LN2_HI + (f - (hfsq - (s * (hfsq + r) + ef * _LN2_LO)))
    y = np.where(x == _f32(0.0), -_INF32, y)
    y = np.where(x < _f32(0.0), _NAN32, y)
    y = np.where(x == _INF32, x, y)
    return np.where(x == x, y, x)


def log1p_f32(x):
    x = _a(x).astype(np.float32, copy=False)
    u = _ONE + x
    d = u - _ONE
    y = log_f32(u) * (x / d)
    y = np.where(d == _f32(0.0), x, y)
    return np.where(u == _INF32, u, y)


_T0, _T1, _T2, _T3, _T4, _T5 = (
    _f32(-0.3333333134651184), _f32(0.13333211839199066), _f32(-0.05394745245575905),
    _f32(0.021703997626900673), _f32(-0.008184656500816345), _f32(0.0021489786449819803),
)


def tanh_f32(x):
    x = _a(x).astype(np.float32, copy=False)
    a = np.abs(x)
    z = x * x
    small = np.copysign(x + x * z * (_T0 + z * (_T1 + z * (_T2 + z * (_T3 + z * (_T4 + z * _T5))))), x)
    e = exp_f32(np.minimum(_f32(2.0) * a, _f32(88.0)))
    big = _ONE - _f32(2.0) / (e + _ONE)
    big = np.where(x >= _f32(0.0), big, -big)
    return np.where(a < _f32(0.625), small, np.where(x == x, big, x))


def logistic_f32(x):
    x = _a(x).astype(np.float32, copy=False)
    e = exp_f32(-np.abs(x))
    r = _ONE / (_ONE + e)
    return np.where(x >= _f32(0.0), r, e * r)


_D_SQRT_HALF_BITS = np.int64(0x3FE6A09E667F3BCD)
_D_MANT_MASK = np.int64(0x000FFFFFFFFFFFFF)
_LOG2E_64 = 1.4426950408889634
_LN2_64 = 0.6931471805599453
_DL1, _DL2, _DL3, _DL4, _DL5, _DL6 = (2.0 / (2 * k + 1) for k in range(1, 7))


def _log2_f64(x):
    ix = _a(x).view(np.int64) - _D_SQRT_HALF_BITS
    e = ix >> np.int64(52)
    m = ((ix & _D_MANT_MASK) + _D_SQRT_HALF_BITS).view(np.float64)
    f = m - 1.0
    s = f / (2.0 + f)
    z = s * s
    r = _DL1 + z * (_DL2 + z * (_DL3 + z * (_DL4 + z * (_DL5 + z * _DL6))))
    hfsq = 0.5 * f * f
    return e.astype(np.float64) + (f - (hfsq - s * (hfsq + z * r))) * _LOG2E_64


def _exp2_f64(t):
    n = np.rint(t)
    u = (t - n) * _LN2_64
    p = 1.0 + u + u * u * mathconst.estrin9(u, mathconst.EXP_TAYLOR)
    return p * ((n.astype(np.int64) + np.int64(1023)) << np.int64(52)).view(np.float64)


_ERFC_CUT = 10.5


def _erfc_pos64(a):
    a = np.minimum(a, _ERFC_CUT)
    t = 1.0 / (1.0 + 0.5 * a)
    u = 2.0 * t - 1.0
    h = mathconst.estrin14(u, mathconst.ERFC_H)
    return t * _exp2_f64((h - a * a) * _LOG2E_64)


def erfc_f32(x):
    x = _a(x).astype(np.float32, copy=False)
    d = x.astype(np.float64)
    e = _erfc_pos64(np.abs(d))
    r = np.where(d < 0.0, 2.0 - e, e).astype(np.float32)
    return np.where(x == x, r, x)


def erf_f32(x):
    x = _a(x).astype(np.float32, copy=False)
    d = x.astype(np.float64)
    a = np.abs(d)
    u = 2.0 * d * d - 1.0
    g = mathconst.estrin9(u, mathconst.ERF_G)
    big = 1.0 - _erfc_pos64(a)
    big = np.where(d >= 0.0, big, -big)
    r = np.where(a <= 1.0, d * g, big).astype(np.float32)
    return np.where(x == x, r, x)


def pow_f32(x, y):
    x, y = np.broadcast_arrays(_a(x).astype(np.float32, copy=False), _a(y).astype(np.float32, copy=False))
    ax = np.abs(x)
    ay = np.abs(y)
    finite_pos = (ax > _f32(0.0)) & (ax < _INF32)
    l2 = _log2_f64(np.where(finite_pos, ax.astype(np.float64), 1.0))
    t = np.minimum(np.maximum(y.astype(np.float64) * l2, -300.0), 300.0)
    mag = _exp2_f64(t).astype(np.float32)
    edge = (ax == _INF32) == (y > _f32(0.0))
    mag = np.where(finite_pos, mag, np.where(edge, _INF32, _f32(0.0)))
    edge = (ax > _ONE) == (y > _f32(0.0))
    mag_inf_y = np.where(ax == _ONE, _ONE, np.where(edge, _INF32, _f32(0.0)))
    mag = np.where(ay == _INF32, mag_inf_y, mag)
    half = y * _HALF
    y_int = np.floor(y) == y
    y_odd = y_int & (np.floor(half) != half)
    negative = x.view(np.int32) < _i32(0)
    r = np.where(negative & y_odd, -mag, mag)
    nan = (negative & (x != _f32(0.0)) & ~y_int & (ax < _INF32)) | (x != x) | (y != y)
    r = np.where(nan, _NAN32, r)
    return np.where((y == _f32(0.0)) | (x == _ONE), _ONE, r)


# -- reduce_precision ----------------------------------------------------------------------------


def _reduce_precision(ubits, exp_mask, sign_mask, inf):
    def reduce_precision(x, drop, last, exp_hi, exp_lo, clamp_exp, keep_nan):
        x = _a(x)
        bits = x.view(ubits)
        one = ubits(1)
        if drop != 0:
            bias = ((last >> one) - one) + ((bits & last) >> drop)
            bits = (bits + bias) & ~(last - one)
        if clamp_exp:
            e = bits & exp_mask
            sign = bits & sign_mask
            bits = np.where(e > exp_hi, sign | exp_mask, bits)
            bits = np.where(e <= exp_lo, sign, bits)
        out = _a(bits).astype(ubits).view(x.dtype)
        return np.where(x != x, x if keep_nan else inf, out)

    return reduce_precision


reduce_precision32 = _reduce_precision(np.uint32, np.uint32(0x7F800000), np.uint32(0x80000000), np.float32(np.inf))
reduce_precision64 = _reduce_precision(np.uint64, np.uint64(0x7FF0000000000000), np.uint64(0x8000000000000000),
                                       np.float64(np.inf))


def _min(*args):
    out = args[0]
    for a in args[1:]:
        out = np.minimum(out, a)
    return out


def _max(*args):
    out = args[0]
    for a in args[1:]:
        out = np.maximum(out, a)
    return out


# -- sin, cos, tan, atan2, asin, acos, atan, hyperbolic, cbrt, fmod of float32: vecmath's forms ---
_RW_HI, _RW_MID, _RW_LO = mathconst.WINDOWS
_U32_23, _U64_32, _U64_62 = np.uint32(23), np.uint64(32), np.uint64(62)
_U64_0, _U64_1, _U64_2 = np.uint64(0), np.uint64(1), np.uint64(2)
_PIO2_2_62 = math.pi / 2 / 2.0**62
_PIO4_32 = _f32(math.pi / 4)


def _quarter_turns(ax):
    u = ax.view(np.uint32)
    e = u >> _U32_23
    m = (u & _u32(0x007FFFFF)) | _u32(0x00800000)
    m64 = m.astype(np.uint64)
    # The products wrap on purpose (as the compiled integer arithmetic does); numpy warns of that
    # for a 0-d operand, whose arithmetic it does on scalars.
    with np.errstate(over="ignore"):
        top = (((m * _RW_HI[e]).astype(np.uint64) << _U64_32) + m64 * _RW_MID[e].astype(np.uint64)
               + ((m64 * _RW_LO[e].astype(np.uint64)) >> _U64_32))
        g = top + np.uint64(1 << 61)
    f = (g & np.uint64((1 << 62) - 1)).view(np.int64) - _i64(1 << 61)
    small = ax <= _PIO4_32
    n = np.where(small, _U64_0, g >> _U64_62)
    a = np.where(small, ax.astype(np.float64), f.astype(np.float64) * _PIO2_2_62)
    return n, a


def _trig_f32(x, which):
    x = np.asarray(x, np.float32)
    ax = np.abs(x)
    n, a = _quarter_turns(ax)
    s, c = mathconst.sin_cos_taylor(a)
    odd = (n & _U64_1) != _U64_0
    if which == "sin":
        v = np.where(odd, c, s)
        v = np.where((n & _U64_2) != _U64_0, -v, v)
    elif which == "cos":
        v = np.where(odd, s, c)
        v = np.where(((n + _U64_1) & _U64_2) != _U64_0, -v, v)
    else:
        v = np.where(odd, -c / s, s / c)
    if which != "cos":
        v = np.where(np.signbit(x), -v, v)
    return np.where(ax < _INF32, v.astype(np.float32), x - x)


def sin_f32(x):
    return _trig_f32(x, "sin")


def cos_f32(x):
    return _trig_f32(x, "cos")


def tan_f32(x):
    return _trig_f32(x, "tan")


def _atan2_64(dy, dx):
    ax = np.abs(dx)
    ay = np.abs(dy)
    lo = np.minimum(ax, ay)
    hi = np.maximum(ax, ay)
    q = np.where(hi > 0.0, lo / hi, 0.0)
    q = np.where(lo == np.inf, 1.0, q)
    big = q > mathconst.TAN_PI_8
    t = np.where(big, (q - 1.0) / (q + 1.0), q)
    z = t * t
    p = mathconst.estrin13(z, mathconst.ATAN)
    r = t + t * z * p
    t = np.where(big, r + math.pi / 4, r)
    t = np.where(ay > ax, math.pi / 2 - t, t)
    t = np.where(np.signbit(dx), math.pi - t, t)
    return np.where((dx == dx) & (dy == dy), np.copysign(t, dy), dx + dy)


def atan2_f32(y, x):
    y, x = (np.asarray(v, np.float32) for v in np.broadcast_arrays(y, x))
    return _atan2_64(y.astype(np.float64), x.astype(np.float64)).astype(np.float32)


def atan_f32(x):
    return _atan2_64(np.asarray(x, np.float32).astype(np.float64), 1.0).astype(np.float32)


def asin_f32(x):
    d = np.asarray(x, np.float32).astype(np.float64)
    return _atan2_64(d, np.sqrt((1.0 - d) * (1.0 + d))).astype(np.float32)


def acos_f32(x):
    d = np.asarray(x, np.float32).astype(np.float64)
    return _atan2_64(np.sqrt((1.0 - d) * (1.0 + d)), d).astype(np.float32)


def _log1p_64(w):
    u = 1.0 + w
    d = u - 1.0
    return np.where(d == 0.0, w, _log2_f64(u) * _LN2_64 * (w / d))


def _exp_pos64(a):
    return _exp2_f64(np.minimum(a, 200.0) * _LOG2E_64)


def sinh_f32(x):
    x = np.asarray(x, np.float32)
    d = x.astype(np.float64)
    a = np.abs(d)
    z = d * d
    small = d + d * z * mathconst.estrin9(z, mathconst.SINH_TAYLOR)
    e = _exp_pos64(a)
    big = np.copysign(0.5 * (e - 1.0 / e), d)
    r = np.where(a < 1.0, small, big).astype(np.float32)
    return np.where(x == x, r, x)


def cosh_f32(x):
    x = np.asarray(x, np.float32)
    e = _exp_pos64(np.abs(x.astype(np.float64)))
    r = (0.5 * (e + 1.0 / e)).astype(np.float32)
    return np.where(x == x, r, x)


def asinh_f32(x):
    x = np.asarray(x, np.float32)
    d = x.astype(np.float64)
    a = np.abs(d)
    y = _log1p_64(a + a * a / (1.0 + np.sqrt(1.0 + a * a)))
    r = np.copysign(y, d).astype(np.float32)
    return np.where(a < np.inf, r, x)


def acosh_f32(x):
    x = np.asarray(x, np.float32)
    t = x.astype(np.float64) - 1.0
    r = _log1p_64(t + np.sqrt(2.0 * t + t * t)).astype(np.float32)
    r = np.where(t >= 0.0, r, _NAN32)
    return np.where(x < _INF32, r, x)


def atanh_f32(x):
    x = np.asarray(x, np.float32)
    d = x.astype(np.float64)
    a = np.abs(d)
    y = 0.5 * _log1p_64(2.0 * a / (1.0 - a))
    r = np.copysign(y, d).astype(np.float32)
    r = np.where(a < 1.0, r, np.where(a == 1.0, np.copysign(np.inf, d).astype(np.float32), _NAN32))
    return np.where(x == x, r, x)


def cbrt_f32(x):
    x = np.asarray(x, np.float32)
    d = x.astype(np.float64)
    ad = np.abs(d)
    bits = ad.view(np.int64)
    e = ((bits >> _i64(52)) - _i64(1023)).astype(np.float64)
    m = ((bits & _i64(0x000FFFFFFFFFFFFF)) + _i64(0x3FF0000000000000)).view(np.float64)
    q = np.floor((e + 0.5) * (1.0 / 3.0))
    rem = e - 3.0 * q
    t = m * (1.0 + rem + 0.5 * rem * (rem - 1.0))
    y = mathconst.cbrt_refine(t)
    scale = ((q.astype(np.int64) + _i64(1023)) << _i64(52)).view(np.float64)
    r = np.copysign(y * scale, d).astype(np.float32)
    return np.where((ad > 0.0) & (ad < np.inf), r, x + x)


def fmod_f32(x, y):
    """vecmath's is exact, and so is the C library's fmod in float64: the same bits."""
    x, y = (np.asarray(v, np.float32) for v in np.broadcast_arrays(x, y))
    return np.fmod(x.astype(np.float64), y.astype(np.float64)).astype(np.float32)


#: What generated elementwise text may name, for ``eval``.
NAMESPACE: dict[str, Any] = {
    name: obj for name, obj in globals().items()
    if callable(obj) and not name.startswith("_") and name not in ("Any", "Callable")
}
NAMESPACE.update({"np": np, "math": math, "types": TYPES, "_where": _where, "min": _min, "max": _max})
for _private in ("ctypes",):
    NAMESPACE.pop(_private, None)

#: The numpy functions that :mod:`.machine_kernels` stand in for on large float32 arrays (its
#: builder checks its kernels against these).
NUMPY_TWINS: dict[str, Any] = {name: NAMESPACE[name] for name in machine_kernels.FUNCTIONS}


def _machine_or_numpy(name: str, twin: Any) -> Any:
    def fn(*xs):
        out = machine_kernels.apply(name, xs, twin)
        return twin(*xs) if out is None else out

    fn.__name__ = fn.__qualname__ = name
    return fn


# Generated text and the twins' own calls (tanh's exp, the reductions' fmaximum) alike.
for _name, _twin in NUMPY_TWINS.items():
    NAMESPACE[_name] = globals()[_name] = _machine_or_numpy(_name, _twin)
