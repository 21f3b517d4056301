"""Transcendental functions the loop vectoriser can widen, for the fused elementwise loops.

This llvmlite has no SVML: numba lowers ``math.exp`` on a float32 to a scalar libm call, and one
such call keeps the whole fused loop scalar. The float32 functions here are written from
multiplies, adds, compares, selects and integer bit manipulation only (range reduction by the
exponent bits, a short polynomial on the reduced argument), so LLVM vectorises a loop that calls
them once they are inlined. Polynomials are truncated Taylor series or least-squares fits made for
this module; the accuracy (at most a few ulp, inf/NaN/zero/denormal handled as IEEE does) is
checked by tests over the whole float32 range.

Several float32 functions compute in float64 and round once: erf and erfc (GELU), sin, cos and
tan (after an exact integer range reduction), atan2, cbrt and fmod (exact). Their results are
within an ulp, and mostly the correctly rounded ones. ``pow_f32`` works in float64 too: a float32
``exp(y*log(x))`` would lose ``|y*log(x)|`` ulps. float64 operands, and the functions no hot
program has needed yet (lgamma, erf_inv), go through libm, which is accurate but keeps the fused
loop that calls it scalar.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit, types

from . import mathconst
from .intrinsics import (
    ashr_raw, bitcast, fabs, fcopysign, ffloor, ffma, fldexp, fround_even, fsqrt, ftrunc, iadd, iand, imul, ior, isub,
    lshr_raw, shl_raw,
)
from .target import HAS_FMA, HAS_SCALEF

__all__ = [
    "acos_f32", "acosh_f32", "asin_f32", "asinh_f32", "atan_f32", "atan2_f32", "atanh_f32", "cbrt_f", "cbrt_f32",
    "cos_f32", "cosh_f32", "erf_f", "erf_f32", "erfc_f", "erfc_f32", "erf_inv_f", "exp_f32", "expm1_f32", "fmod_f32",
    "log_f32", "log1p_f32", "logistic_f32", "pow_f32", "sin_f32", "sinh_f32", "tan_f32", "tanh_f32",
]

_f = np.float32
_i = np.int32
_jit = njit(cache=True, nogil=True, error_model="numpy", inline="always")
_estrin14 = _jit(mathconst.estrin14)
_estrin13 = _jit(mathconst.estrin13)
_estrin9 = _jit(mathconst.estrin9)

_LOG2E = _f(1.4426950408889634)
# ln 2 split so that k * _LN2_HI is exact for |k| < 2**8 (the high part has 16 bits).
_LN2_HI = _f(0.693145751953125)
_LN2_LO = _f(1.428606765330187e-06)
# Adding and subtracting 1.5 * 2**23 rounds a float32 of magnitude < 2**22 to an integer.
_ROUND = _f(12582912.0)
_I23 = _i(23)
_I127 = _i(127)

# Taylor coefficients of exp(r) from r**3 on; |r| <= ln(2)/2 leaves a remainder under 2**-28.
_E3, _E4, _E5, _E6, _E7 = (_f(1 / 6), _f(1 / 24), _f(1 / 120), _f(1 / 720), _f(1 / 5040))


def _exp_core_separate(x):
    """exp(x) for x already clamped to [-104, 89]: exp(r) * 2**k, k = round(x / ln 2)."""
    k = (x * _LOG2E + _ROUND) - _ROUND
    r = (x - k * _LN2_HI) - k * _LN2_LO
    p = _f(1.0) + r * (_f(1.0) + r * (_f(0.5) + r * (_E3 + r * (_E4 + r * (_E5 + r * (_E6 + r * _E7))))))
    return _scale(p, _i(k))


def _exp_core_fused(x):
    """The same steps as fused multiply-adds, each rounded once: half the instructions."""
    k = ffma(x, _LOG2E, _ROUND) - _ROUND
    r = ffma(-k, _LN2_HI, x)
    r = ffma(-k, _LN2_LO, r)
    p = ffma(r, _E7, _E6)
    p = ffma(p, r, _E5)
    p = ffma(p, r, _E4)
    p = ffma(p, r, _E3)
    p = ffma(p, r, _f(0.5))
    p = ffma(p, r, _f(1.0))
    p = ffma(p, r, _f(1.0))
    return _scale(p, _i(k))


def _scale_in_two_steps(p, n):
    """p * 2**n for p in [0.5, 2) and n in [-150, 129], rounded once, so that results below the
    normal range come out denormal instead of flushed: 2**n itself may be out of range, its two
    halves are not, and the first product is exact."""
    h = ashr_raw(n, _i(1))
    s1 = bitcast(shl_raw(iadd(h, _I127), _I23), types.float32)
    s2 = bitcast(shl_raw(iadd(isub(n, h), _I127), _I23), types.float32)
    return p * s1 * s2


def _scale_at_once(p, n):
    """The same rounding in one instruction (AVX-512's vscalef)."""
    return fldexp(p, n)


# Where the target has them, FMA and vscalef: the eager tier (.eager_math) computes the same
# roundings, so the tiers agree bit for bit on either path.
_scale = _jit(_scale_at_once if HAS_SCALEF else _scale_in_two_steps)
_exp_core = _jit(_exp_core_fused if HAS_FMA else _exp_core_separate)


@_jit
def exp_f32(x):
    xc = min(max(x, _f(-104.0)), _f(89.0))
    y = _exp_core(xc)
    return y if x == x else x


# Taylor coefficients of expm1 from x**2 to x**9, used for |x| < 0.5.
_M = tuple(_f(1 / math.factorial(k)) for k in range(2, 10))


@_jit
def expm1_f32(x):
    if fabs(x) < _f(0.5):
        p = _M[7]
        p = p * x + _M[6]
        p = p * x + _M[5]
        p = p * x + _M[4]
        p = p * x + _M[3]
        p = p * x + _M[2]
        p = p * x + _M[1]
        p = p * x + _M[0]
        return fcopysign(x + x * x * p, x)  # x's sign, -0 included
    return exp_f32(x) - _f(1.0)


_SQRT_HALF_BITS = _i(0x3F3504F3)
_MANT_MASK = _i(0x007FFFFF)
_MIN_NORMAL = _f(1.1754943508222875e-38)
_TWO23 = _f(8388608.0)
# 2/3, 2/5, 2/7, 2/9: the atanh series of log(1+f) = 2*atanh(f/(2+f)), |f/(2+f)| <= 0.172.
_L1, _L2, _L3, _L4 = _f(2 / 3), _f(2 / 5), _f(2 / 7), _f(2 / 9)
_INF32 = _f(np.inf)
_NAN32 = _f(np.nan)


@_jit
def log_f32(x):
    tiny = x < _MIN_NORMAL
    xs = x * _TWO23 if tiny else x
    ix = isub(bitcast(xs, types.int32), _SQRT_HALF_BITS)
    e = isub(ashr_raw(ix, _I23), _i(23) if tiny else _i(0))
    m = bitcast(iadd(iand(ix, _MANT_MASK), _SQRT_HALF_BITS), types.float32)
    f = m - _f(1.0)
    s = f / (_f(2.0) + f)
    z = s * s
    r = z * (_L1 + z * (_L2 + z * (_L3 + z * _L4)))
    hfsq = _f(0.5) * f * f
    ef = _f(e)
    y = ef * _LN2_HI + (f - (hfsq - (s * (hfsq + r) + ef * _LN2_LO)))
    if x == _f(0.0):
        y = -_INF32
    if x < _f(0.0):
        y = _NAN32
    if x == _INF32:
        y = x
    return y if x == x else x


@_jit
def log1p_f32(x):
    # log(u) * x / (u - 1) with u = 1 + x cancels the rounding error of forming u.
    u = _f(1.0) + x
    d = u - _f(1.0)
    y = log_f32(u) * (x / d)
    if d == _f(0.0):
        y = x
    if u == _INF32:
        y = u
    return y


# tanh(x) = x + x**3 * P(x**2) for |x| < 0.625: least-squares fit, under 1 ulp.
_T0, _T1, _T2, _T3, _T4, _T5 = (
    _f(-0.3333333134651184), _f(0.13333211839199066), _f(-0.05394745245575905),
    _f(0.021703997626900673), _f(-0.008184656500816345), _f(0.0021489786449819803),
)


@_jit
def tanh_f32(x):
    a = fabs(x)
    z = x * x
    small = fcopysign(x + x * z * (_T0 + z * (_T1 + z * (_T2 + z * (_T3 + z * (_T4 + z * _T5))))), x)
    e = exp_f32(min(_f(2.0) * a, _f(88.0)))
    big = _f(1.0) - _f(2.0) / (e + _f(1.0))
    big = big if x >= _f(0.0) else -big
    return small if a < _f(0.625) else (big if x == x else x)


@_jit
def logistic_f32(x):
    # exp of -|x| never overflows, so results far out on the negative side stay denormal.
    e = exp_f32(-fabs(x))
    r = _f(1.0) / (_f(1.0) + e)
    return r if x >= _f(0.0) else e * r


# --- pow ---------------------------------------------------------------------------------

_D_SQRT_HALF_BITS = np.int64(0x3FE6A09E667F3BCD)
_D_MANT_MASK = np.int64(0x000FFFFFFFFFFFFF)
_D52 = np.int64(52)
_D1023 = np.int64(1023)
_LOG2E_64 = 1.4426950408889634
_LN2_64 = 0.6931471805599453
# 2/(2k+1) for k = 1..6: the atanh series again, to ~1e-12 (z <= 0.0295); a float32 result
# needs t = y*log2(x) to ~1e-9 absolute over |t| <= 150.
_DL1, _DL2, _DL3, _DL4, _DL5, _DL6 = (2.0 / (2 * k + 1) for k in range(1, 7))


@_jit
def _log2_f64(x):
    """log2 of a positive, finite, normal float64 (every float32 widens to one)."""
    ix = isub(bitcast(x, types.int64), _D_SQRT_HALF_BITS)
    e = ashr_raw(ix, _D52)
    m = bitcast(iadd(iand(ix, _D_MANT_MASK), _D_SQRT_HALF_BITS), types.float64)
    f = m - 1.0
    s = f / (2.0 + f)
    z = s * s
    r = _DL1 + z * (_DL2 + z * (_DL3 + z * (_DL4 + z * (_DL5 + z * _DL6))))
    hfsq = 0.5 * f * f
    return np.float64(e) + (f - (hfsq - s * (hfsq + z * r))) * _LOG2E_64


@_jit
def _exp2_f64(t):
    """2**t for t in [-300, 300]."""
    n = fround_even(t)
    u = (t - n) * _LN2_64
    p = 1.0 + u + u * u * _estrin9(u, _EXP_TAYLOR)
    return p * bitcast(shl_raw(iadd(np.int64(n), _D1023), _D52), types.float64)


@_jit
def pow_f32(x, y):
    # Branch-free on purpose (``&``/``|`` on bools, conditional expressions): short-circuit
    # ``and``/``or`` make control flow that stops LLVM from vectorising the caller's loop.
    ax = fabs(x)
    ay = fabs(y)
    finite_pos = (ax > _f(0.0)) & (ax < _INF32)
    l2 = _log2_f64(np.float64(ax) if finite_pos else 1.0)
    t = min(max(np.float64(y) * l2, -300.0), 300.0)
    mag = np.float32(_exp2_f64(t))
    # Zero and infinite bases: |x|**y is 0 or inf by the sign of y.
    edge = (ax == _INF32) == (y > _f(0.0))
    mag = mag if finite_pos else (_INF32 if edge else _f(0.0))
    # Infinite exponents: |x| < 1 and |x| > 1 go opposite ways; |x| == 1 gives 1.
    edge = (ax > _f(1.0)) == (y > _f(0.0))
    mag_inf_y = _f(1.0) if ax == _f(1.0) else (_INF32 if edge else _f(0.0))
    mag = mag_inf_y if ay == _INF32 else mag
    half = y * _f(0.5)
    y_int = ffloor(y) == y
    y_odd = y_int & (ffloor(half) != half)
    negative = bitcast(x, types.int32) < _i(0)
    r = -mag if negative & y_odd else mag
    # A negative finite base needs an integer exponent; (-inf)**y is |inf|**y signed.
    nan = (negative & (x != _f(0.0)) & ~y_int & (ax < _INF32)) | (x != x) | (y != y)
    r = _NAN32 if nan else r
    return _f(1.0) if (y == _f(0.0)) | (x == _f(1.0)) else r


# --- erf, erfc -----------------------------------------------------------------------------
#
# In float64, rounded once (.mathconst has the fits and says how they were made).
_ERFC_H = mathconst.ERFC_H
_ERF_G = mathconst.ERF_G
_EXP_TAYLOR = mathconst.EXP_TAYLOR
# Beyond this erfc is below half the smallest float32 denormal (and exp2 stays in range).
_ERFC_CUT = 10.5


@_jit
def _erfc_pos64(a):
    """erfc of a float64 ``a >= 0`` (NaN passes through)."""
    a = min(a, _ERFC_CUT)
    t = 1.0 / (1.0 + 0.5 * a)
    u = 2.0 * t - 1.0
    h = _estrin14(u, _ERFC_H)
    return t * _exp2_f64((h - a * a) * _LOG2E_64)


@_jit
def erfc_f32(x):
    d = np.float64(x)
    e = _erfc_pos64(fabs(d))
    r = np.float32(2.0 - e if d < 0.0 else e)
    return r if x == x else x


@_jit
def erf_f32(x):
    d = np.float64(x)
    a = fabs(d)
    u = 2.0 * d * d - 1.0
    g = _estrin9(u, _ERF_G)
    # 1 - erfc loses nothing once erfc <= erfc(1) = 0.157.
    big = 1.0 - _erfc_pos64(a)
    big = big if d >= 0.0 else -big
    r = np.float32(d * g if a <= 1.0 else big)
    return r if x == x else x


# --- sin, cos, tan ------------------------------------------------------------------------
#
# The range reduction is exact in integers (.mathconst says how); the reduced angle, |a| <= pi/4,
# goes through Taylor polynomials in float64, so a float32 result is the float64 one rounded once.
_RW_HI, _RW_MID, _RW_LO = mathconst.WINDOWS
_U23, _U32, _U62 = np.uint32(23), np.uint64(32), np.uint64(62)
_SIGNIFICAND = np.uint32(0x007FFFFF)
_IMPLICIT = np.uint32(0x00800000)
_HALF_TURN_62 = np.uint64(1 << 61)
_FRACTION_62 = np.uint64((1 << 62) - 1)
_I2_61 = np.int64(1 << 61)
_U0, _U1, _U2 = np.uint64(0), np.uint64(1), np.uint64(2)
_PIO2_2_62 = math.pi / 2 / 2.0**62
_PIO4_32 = _f(math.pi / 4)
_sin_cos = _jit(mathconst.sin_cos_taylor)


@_jit
def _quarter_turns(ax):
    """A float32 ``ax >= 0`` as n quarter turns (n mod 4 counts) plus a float64 angle in
    [-pi/4, pi/4]. The products are 32 x 32 bits (m < 2**24), which SIMD units multiply."""
    u = bitcast(ax, types.uint32)
    e = lshr_raw(u, _U23)
    m = ior(iand(u, _SIGNIFICAND), _IMPLICIT)
    m64 = np.uint64(m)
    top = iadd(iadd(shl_raw(np.uint64(imul(m, _RW_HI[e])), _U32), imul(m64, np.uint64(_RW_MID[e]))),
               lshr_raw(imul(m64, np.uint64(_RW_LO[e])), _U32))
    g = iadd(top, _HALF_TURN_62)
    f = isub(bitcast(iand(g, _FRACTION_62), types.int64), _I2_61)
    small = ax <= _PIO4_32
    n = _U0 if small else lshr_raw(g, _U62)
    a = np.float64(ax) if small else np.float64(f) * _PIO2_2_62
    return n, a


@_jit
def sin_f32(x):
    ax = fabs(x)
    n, a = _quarter_turns(ax)
    s, c = _sin_cos(a)
    v = c if iand(n, _U1) != _U0 else s
    v = -v if iand(n, _U2) != _U0 else v
    v = -v if bitcast(x, types.int32) < _i(0) else v
    return np.float32(v) if ax < _INF32 else x - x


@_jit
def cos_f32(x):
    ax = fabs(x)
    n, a = _quarter_turns(ax)
    s, c = _sin_cos(a)
    v = s if iand(n, _U1) != _U0 else c
    v = -v if iand(iadd(n, _U1), _U2) != _U0 else v
    return np.float32(v) if ax < _INF32 else x - x


@_jit
def tan_f32(x):
    ax = fabs(x)
    n, a = _quarter_turns(ax)
    s, c = _sin_cos(a)
    v = -c / s if iand(n, _U1) != _U0 else s / c
    v = -v if bitcast(x, types.int32) < _i(0) else v
    return np.float32(v) if ax < _INF32 else x - x


# --- atan2 ----------------------------------------------------------------------------------
#
# In float64: q = min(|x|, |y|) / max(|x|, |y|) in [0, 1]; above tan(pi/8), atan(q) = pi/4 +
# atan((q - 1) / (q + 1)); then the Taylor series to t**27 (|t| <= 0.4143: truncation 3e-13).
# The octant and the signs come from compares, which is IEEE atan2's table of zeros and infinities.
_TAN_PI_8 = mathconst.TAN_PI_8
_ATAN = mathconst.ATAN
_PI64 = math.pi
_I64_0 = np.int64(0)


@_jit
def _atan_unit(q):
    """atan(q) for q in [0, 1]."""
    big = q > _TAN_PI_8
    t = (q - 1.0) / (q + 1.0) if big else q
    z = t * t
    p = _estrin13(z, _ATAN)
    r = t + t * z * p
    return r + _PI64 / 4 if big else r


@_jit
def _atan2_64(dy, dx):
    """atan2 of two float64 (float32 values), NaN for a NaN."""
    ax = fabs(dx)
    ay = fabs(dy)
    lo = min(ax, ay)
    hi = max(ax, ay)
    # 0/0 (both zero) is 0, inf/inf (both infinite) is 1: the octant decides the rest.
    q = lo / hi if hi > 0.0 else 0.0
    q = 1.0 if lo == np.inf else q
    t = _atan_unit(q)
    t = _PI64 / 2 - t if ay > ax else t
    t = _PI64 - t if bitcast(dx, types.int64) < _I64_0 else t
    r = fcopysign(t, dy)
    return r if (dx == dx) & (dy == dy) else dx + dy


@_jit
def atan2_f32(y, x):
    return np.float32(_atan2_64(np.float64(y), np.float64(x)))


@_jit
def atan_f32(x):
    return np.float32(_atan2_64(np.float64(x), 1.0))


# asin(x) = atan2(x, sqrt(1 - x*x)) and acos(x) = atan2(sqrt(1 - x*x), x). (1 - x)(1 + x) loses
# nothing where 1 - x*x would cancel (|x| near 1: both factors are exact in float64 for a float32
# x), and it is negative, so the root NaN, exactly when |x| > 1.
@_jit
def asin_f32(x):
    d = np.float64(x)
    return np.float32(_atan2_64(d, fsqrt((1.0 - d) * (1.0 + d))))


@_jit
def acos_f32(x):
    d = np.float64(x)
    return np.float32(_atan2_64(fsqrt((1.0 - d) * (1.0 + d)), d))


# --- sinh, cosh, asinh, acosh, atanh ------------------------------------------------------
#
# In float64 from the float64 exp2 and log2 above. sinh of |x| < 1 by its Taylor series (e**x - e**-x
# would cancel); the inverse functions as log1p of an argument formed without cancellation,
# log1p(w) = log(1 + w) * w / ((1 + w) - 1), which cancels the rounding of 1 + w.
_SINH_TAYLOR = mathconst.SINH_TAYLOR


@_jit
def _log1p_64(w):
    """log(1 + w) for a finite w > -1."""
    u = 1.0 + w
    d = u - 1.0
    return w if d == 0.0 else _log2_f64(u) * _LN2_64 * (w / d)


@_jit
def _exp_pos64(a):
    """e**a for 0 <= a (NaN passes through as garbage: callers select); past 200 it stays 2**288."""
    return _exp2_f64(min(a, 200.0) * _LOG2E_64)


@_jit
def sinh_f32(x):
    d = np.float64(x)
    a = fabs(d)
    z = d * d
    small = d + d * z * _estrin9(z, _SINH_TAYLOR)
    e = _exp_pos64(a)
    big = fcopysign(0.5 * (e - 1.0 / e), d)
    r = np.float32(small if a < 1.0 else big)
    return r if x == x else x


@_jit
def cosh_f32(x):
    e = _exp_pos64(fabs(np.float64(x)))
    r = np.float32(0.5 * (e + 1.0 / e))
    return r if x == x else x


@_jit
def asinh_f32(x):
    d = np.float64(x)
    a = fabs(d)
    y = _log1p_64(a + a * a / (1.0 + fsqrt(1.0 + a * a)))
    r = np.float32(fcopysign(y, d))
    return r if a < np.inf else x


@_jit
def acosh_f32(x):
    t = np.float64(x) - 1.0
    r = np.float32(_log1p_64(t + fsqrt(2.0 * t + t * t)))
    r = r if t >= 0.0 else _NAN32
    return r if x < _INF32 else x


@_jit
def atanh_f32(x):
    d = np.float64(x)
    a = fabs(d)
    y = 0.5 * _log1p_64(2.0 * a / (1.0 - a))
    r = np.float32(fcopysign(y, d))
    r = r if a < 1.0 else (np.float32(fcopysign(np.inf, d)) if a == 1.0 else _NAN32)
    return r if x == x else x


# --- cbrt -----------------------------------------------------------------------------------
#
# In float64, where every float32 is normal: |x| = t * 2**(3q) with t in [1, 8); a cubic
# (relative error 1.7e-2) starts two Halley steps (each cubes the error: 5e-6, then under
# 1e-16), and 2**q scales the root back.
_cbrt_refine = _jit(mathconst.cbrt_refine)
_D_ONE_BITS = np.int64(0x3FF0000000000000)
_THIRD = 1.0 / 3.0


@_jit
def cbrt_f32(x):
    d = np.float64(x)
    ad = fabs(d)
    bits = bitcast(ad, types.int64)
    e = np.float64(isub(ashr_raw(bits, _D52), _D1023))
    m = bitcast(iadd(iand(bits, _D_MANT_MASK), _D_ONE_BITS), types.float64)
    q = ffloor((e + 0.5) * _THIRD)
    rem = e - 3.0 * q
    t = m * (1.0 + rem + 0.5 * rem * (rem - 1.0))
    y = _cbrt_refine(t)
    scale = bitcast(shl_raw(iadd(np.int64(q), _D1023), _D52), types.float64)
    r = np.float32(fcopysign(y * scale, d))
    return r if (ad > 0.0) & (ad < np.inf) else x + x


# --- remainder (fmod) -------------------------------------------------------------------------
#
# Exact, in float64. Step k takes whole multiples of ys = |y| * 2**k off the running remainder r,
# for k = 252, 224, ..., 28, 0: r < ys * 2**28 on entry (the float32 range spans 277 binades), so
# the quotient q < 2**28 + 1, and q * ys (24 + 29 bits) and r - q * ys are exact. q is estimated
# by a multiply with 1/ys, which is at most one off; a compare and an add mend it.


@_jit
def _fmod_step(r, ys, inv):
    q = ftrunc(r * inv)
    r = r - q * ys
    r = r + ys if r < 0.0 else r
    return r - ys if r >= ys else r


@_jit
def fmod_f32(x, y):
    ax = fabs(np.float64(x))
    ay = fabs(np.float64(y))
    inv = 1.0 / ay
    r = _fmod_step(ax, ay * 2.0**252, inv * 2.0**-252)
    r = _fmod_step(r, ay * 2.0**224, inv * 2.0**-224)
    r = _fmod_step(r, ay * 2.0**196, inv * 2.0**-196)
    r = _fmod_step(r, ay * 2.0**168, inv * 2.0**-168)
    r = _fmod_step(r, ay * 2.0**140, inv * 2.0**-140)
    r = _fmod_step(r, ay * 2.0**112, inv * 2.0**-112)
    r = _fmod_step(r, ay * 2.0**84, inv * 2.0**-84)
    r = _fmod_step(r, ay * 2.0**56, inv * 2.0**-56)
    r = _fmod_step(r, ay * 2.0**28, inv * 2.0**-28)
    r = _fmod_step(r, ay, inv)
    r = np.float32(fcopysign(r, np.float64(x)))
    r = x if (ay == np.inf) & (ax < np.inf) else r
    return r if (ay > 0.0) & (ax < np.inf) & (y == y) else _NAN32


# --- libm-backed, float64 inside ---------------------------------------------------------


@_jit
def erf_f(x):
    return math.erf(np.float64(x))


@_jit
def erfc_f(x):
    return math.erfc(np.float64(x))


@_jit
def cbrt_f(x):
    d = np.float64(x)
    r = np.cbrt(d)
    return r


_TWO_OVER_SQRT_PI = 1.1283791670955126


@_jit
def erf_inv_f(x):
    """Inverse error function in float64: a closed-form first guess, then Newton on libm's erf."""
    d = np.float64(x)
    if not (d > -1.0 and d < 1.0):
        if d == 1.0:
            return np.inf
        if d == -1.0:
            return -np.inf
        return np.nan
    if d == 0.0:
        return d
    # Winitzki's approximation (a = 0.147), good to ~2e-3, as the starting point.
    a = 0.147
    ln = math.log1p(-d * d)
    t = 2.0 / (math.pi * a) + 0.5 * ln
    y = math.sqrt(math.sqrt(t * t - ln / a) - t)
    y = y if d > 0.0 else -y
    for _ in range(4):
        err = math.erf(y) - d
        y = y - err / (_TWO_OVER_SQRT_PI * math.exp(-y * y))
    return y
