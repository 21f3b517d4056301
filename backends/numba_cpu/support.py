"""Scalar helpers the generated kernels call, besides :mod:`.intrinsics` and :mod:`.vecmath`.

A generated module does ``from pjrt_hub.backends.numba_cpu.support import *``, so every name in
``__all__`` is part of the vocabulary the lowering rules may emit. The helpers are inlined at
numba-IR level (``inline="always"``), which keeps fused loops free of calls LLVM might not inline.

16-bit floats: numba has no bfloat16 and no float16 arithmetic, so f16/bf16 tensors are stored as
their uint16 bit patterns and computed in float32, rounding to the narrow type after every op
(round to nearest even, as a conversion does); ``*_bits`` helpers convert at loads and stores.
"""

from __future__ import annotations

import cmath
import math

import numpy as np
from numba import njit, objmode, types

from pjrt_hub.backends.stablehlo.fft import fft_host
from pjrt_hub.backends.stablehlo.linalg_calls import custom_call_host

from . import boxing, linalg, special, vecmath
from .threads import blas_threads, dot_in_blocks
from .intrinsics import (
    advise_hugepages, ld, prefetch_span, st, stream_fence, stream_row,
    bitcast, ctlz, ctpop, f2i, fabs, fcmp_total, fceil, fcopysign, ffloor, fmaximum, fminimum,
    fround_afz, fround_even, fsqrt, ftrunc, i2f, i2i, iadd, iand, icmp, idiv, imul, inot, ior,
    irem, isub, ixor, radd, rmax, rmin, rmul, shl, shr_arith, shr_logical, wide_vectors,
)
from .lane_intrinsics import lanes_add, lanes_reset, lanes_row, lanes_total
from .vecmath import (
    acos_f32, acosh_f32, asin_f32, asinh_f32, atan_f32, atan2_f32, atanh_f32, cbrt_f, cbrt_f32, cos_f32, cosh_f32,
    erf_f, erf_f32, erf_inv_f, erfc_f, erfc_f32, exp_f32, expm1_f32, fmod_f32, log1p_f32, log_f32, logistic_f32,
    pow_f32, sin_f32, sinh_f32, tan_f32, tanh_f32,
)

# Before a generated module compiles its entry: the results come back without a Python call
# (.boxing).
boxing.install()

__all__ = [
    "advise_hugepages", "prefetch_span", "stream_fence", "stream_row", "blas_threads", "dot_in_blocks", "ld", "st", "lanes_add", "lanes_reset", "lanes_row", "lanes_total", "bitcast", "ctlz", "ctpop", "f2i", "fabs", "fcmp_total", "fceil", "fcopysign", "ffloor",
    "fmaximum", "fminimum", "fround_afz", "fround_even", "fsqrt", "ftrunc", "i2f", "i2i", "iadd",
    "iand", "icmp", "idiv", "imul", "inot", "ior", "irem", "isub", "ixor", "radd", "rmax", "rmin",
    "rmul", "shl", "shr_arith", "shr_logical", "wide_vectors",
    "acos_f32", "acosh_f32", "asin_f32", "asinh_f32", "atan_f32", "atan2_f32", "atanh_f32", "cbrt_f", "cbrt_f32",
    "cosh_f32", "sinh_f32", "cos_f32", "erf_f", "erf_f32", "erf_inv_f", "erfc_f", "erfc_f32", "exp_f32",
    "expm1_f32", "fmod_f32", "log1p_f32", "log_f32", "logistic_f32", "pow_f32", "sin_f32", "tan_f32", "tanh_f32",
    "bf16_bits", "bf16_value", "f16_bits", "f16_value", "round_bf16", "round_f16",
    "fsign", "isign", "iabs", "imax", "imin", "ipow", "fpow64", "frem", "isfinite_f",
    "exp_f64", "log_f64", "tanh_f64", "logistic_f64", "expm1_f64", "log1p_f64", "sin_f", "cos_f", "tan_f",
    "atan2_f", "sinh_f", "cosh_f", "asin_f", "acos_f", "atan_f", "asinh_f", "acosh_f", "atanh_f",
    "lgamma_f", "fft_host", "custom_call_host", "objmode", "triangular_solve_nd", "cholesky_nd", "digamma_f", "polygamma_f", "zeta_f", "i1e_f", "next_after_bits", "clamp_index", "sf_value", "sf_bits", "wrap_signed", "wrap_unsigned",
    "cdiv", "csign", "cexp", "clog", "csqrt", "crsqrt", "ctanh", "csin", "ccos", "ctan", "cexpm1", "clog1p",
    "clogistic", "cpow", "cmath", "rng_threefry", "rng_philox", "reduce_precision32", "reduce_precision64", "np", "math", "types", "vecmath",
]

_inline = njit(cache=True, nogil=True, error_model="numpy", inline="always")
_u16 = np.uint16
_u32 = np.uint32
_i32 = np.int32


# -- 16-bit floats ------------------------------------------------------------------------


@_inline
def bf16_value(bits):
    """uint16 bf16 bit pattern -> float32 (exact)."""
    return bitcast(shl(i2i(bits, types.uint32), _u32(16)), types.float32)


@_inline
def bf16_bits(x):
    """float32 -> bf16 bit pattern, rounding to nearest even; NaN stays a (quiet) NaN."""
    u = bitcast(x, types.uint32)
    lsb = iand(shr_logical(u, _u32(16)), _u32(1))
    rounded = shr_logical(iadd(u, iadd(_u32(0x7FFF), lsb)), _u32(16))
    nan = ior(shr_logical(u, _u32(16)), _u32(0x0040))
    return i2i(nan if x != x else rounded, types.uint16)


@_inline
def round_bf16(x):
    return bf16_value(bf16_bits(x))


@_inline
def f16_value(bits):
    """uint16 IEEE half bit pattern -> float32 (exact, denormals included)."""
    h = i2i(bits, types.uint32)
    sign = shl(iand(h, _u32(0x8000)), _u32(16))
    exp = iand(shr_logical(h, _u32(10)), _u32(0x1F))
    man = iand(h, _u32(0x3FF))
    if exp == _u32(0x1F):
        out = ior(sign, ior(_u32(0x7F800000), shl(man, _u32(13))))
        return bitcast(out, types.float32)
    if exp == _u32(0):
        # Denormal half: man * 2**-24, exact in float32.
        mag = np.float32(i2f(man, types.float32) * np.float32(5.960464477539063e-08))
        return -mag if sign != _u32(0) else mag
    out = ior(sign, ior(shl(iadd(exp, _u32(112)), _u32(23)), shl(man, _u32(13))))
    return bitcast(out, types.float32)


@_inline
def f16_bits(x):
    """float32 -> IEEE half bit pattern, round to nearest even, overflow to inf."""
    u = bitcast(x, types.uint32)
    sign = iand(shr_logical(u, _u32(16)), _u32(0x8000))
    a = fabs(x)
    if x != x:
        return i2i(ior(sign, _u32(0x7E00)), types.uint16)
    if a >= np.float32(65520.0):  # rounds to inf
        return i2i(ior(sign, _u32(0x7C00)), types.uint16)
    if a < np.float32(6.103515625e-05):
        # Denormal (or zero) half: round a / 2**-24 to an integer, ties to even.
        m = fround_even(a * np.float32(16777216.0))
        return i2i(ior(sign, f2i(m, types.uint32)), types.uint16)
    au = bitcast(a, types.uint32)
    lsb = iand(shr_logical(au, _u32(13)), _u32(1))
    r = shr_logical(iadd(au, iadd(_u32(0xFFF), lsb)), _u32(13))
    r = isub(r, _u32(112 << 10))
    return i2i(ior(sign, r), types.uint16)


@_inline
def round_f16(x):
    return f16_value(f16_bits(x))


# -- 8-bit (and 4-bit) floats -----------------------------------------------------------------
#
# The f8 variants (and f4E2M1FN) differ in bias, in whether they have infinities, negative zero
# and which codes are NaN, and in what an overflow becomes (inf, NaN or the largest finite
# value). Rather than a formula per format, each one gets tables built from ml_dtypes (the types
# the runtime's buffers use) when this module is imported: the value of every code, and for each
# sign the magnitudes at which float32 -> code conversion moves to the next code, found by
# bisection over float32 bit patterns. Converting is then a binary search, and the result is by
# construction ml_dtypes' round-to-nearest-even conversion, overflow and NaN rules included.

#: MLIR element type -> ml_dtypes name, for the small floats numba_cpu computes in float32.
SMALL_FLOATS = {
    "f8E5M2": "float8_e5m2", "f8E4M3FN": "float8_e4m3fn", "f8E4M3": "float8_e4m3", "f8E3M4": "float8_e3m4",
    "f8E4M3FNUZ": "float8_e4m3fnuz", "f8E5M2FNUZ": "float8_e5m2fnuz", "f8E4M3B11FNUZ": "float8_e4m3b11fnuz",
    "f8E8M0FNU": "float8_e8m0fnu", "f4E2M1FN": "float4_e2m1fn",
}


def _conversion_steps(dtype: np.dtype, sign: float) -> tuple[np.ndarray, np.ndarray]:
    """(bounds, codes): float32 magnitudes ``a`` with ``sign * a`` converting to ``codes[i]`` for
    ``bounds[i-1] <= a < bounds[i]``."""
    values = np.arange(256, dtype=np.uint8).view(dtype).astype(np.float32)
    mags = np.unique(np.abs(values[np.isfinite(values)]))
    mags = mags[mags > 0]
    # Step candidates: one between each pair of neighbouring magnitudes (0 and +inf included).
    ends = np.concatenate([[0], mags.view(np.uint32), [0x7F800000]]).astype(np.int64)
    lo, hi = ends[:-1], ends[1:]

    def code(patterns: np.ndarray) -> np.ndarray:
        x = (patterns.astype(np.uint32).view(np.float32) * np.float32(sign)).astype(np.float32)
        return x.astype(dtype).view(np.uint8)

    start = code(lo)
    moves = code(hi) != start
    lo, hi, start = lo[moves], hi[moves], start[moves]
    while np.any(hi - lo > 1):  # first pattern of each interval whose code differs from lo's
        mid = (lo + hi) // 2
        same = code(mid) == start
        lo = np.where(same, mid, lo)
        hi = np.where(same, hi, mid)
    bounds = hi.astype(np.uint32).view(np.float32)
    codes = np.concatenate([code(np.zeros(1, np.int64)), code(hi)])
    return bounds, codes


def _small_float_tables() -> dict[str, np.ndarray]:
    import ml_dtypes

    tables = {}
    for element, name in SMALL_FLOATS.items():
        if not hasattr(ml_dtypes, name):
            # An older ml_dtypes (0.4 has no float8_e4m3): no program can hold the type, which
            # element_dtype refuses by name, so its tables are never read.
            continue
        dtype = np.dtype(getattr(ml_dtypes, name))
        tables[f"SF_{element}_V"] = np.arange(256, dtype=np.uint8).view(dtype).astype(np.float32)
        for tag, sign in (("P", 1.0), ("N", -1.0)):
            bounds, codes = _conversion_steps(dtype, sign)
            tables[f"SF_{element}_B{tag}"] = bounds
            tables[f"SF_{element}_C{tag}"] = codes
        nan = np.array([np.nan, -np.nan], np.float32).astype(dtype).view(np.uint8)
        tables[f"SF_{element}_NAN"] = nan
    return tables


_SMALL_FLOAT_TABLES: dict[str, np.ndarray] | None = None


def __getattr__(name: str) -> np.ndarray:
    """The small-float tables, built on first use: building them imports ml_dtypes, about half
    a second that a process compiling or loading programs without such types does not pay.
    Generated code imports the ones it uses by name (see :func:`.module.render_module`)."""
    global _SMALL_FLOAT_TABLES
    if name.startswith("SF_"):
        if _SMALL_FLOAT_TABLES is None:
            _SMALL_FLOAT_TABLES = _small_float_tables()
        if name in _SMALL_FLOAT_TABLES:
            return _SMALL_FLOAT_TABLES[name]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


#: Called, not inlined: a binary search inlined at every convert made compiles several times slower.
_called = njit(cache=True, nogil=True, error_model="numpy")


@_inline
def sf_value(bits, table):
    """An 8-bit (or 4-bit) float code -> its float32 value (exact)."""
    return table[i2i(bits, types.intp)]


@_called
def _sf_search(bounds, codes, a):
    lo = 0
    hi = bounds.shape[0]
    while lo < hi:  # the first bound above a
        mid = (lo + hi) >> 1
        if bounds[mid] <= a:
            lo = mid + 1
        else:
            hi = mid
    return codes[lo]


@_called
def sf_bits(x, bounds_pos, codes_pos, bounds_neg, codes_neg, nans):
    """float32 -> an 8-bit (or 4-bit) float code, as ml_dtypes converts (see the tables)."""
    negative = iand(bitcast(x, types.uint32), _u32(0x80000000)) != _u32(0)
    if x != x:
        return nans[1] if negative else nans[0]
    if negative:
        return _sf_search(bounds_neg, codes_neg, -x)
    return _sf_search(bounds_pos, codes_pos, x)


# -- sub-byte integers (i4, ui4, i2, ui2) ------------------------------------------------------------
# Stored one per byte, in the low bits (as ml_dtypes keeps them); computed in int8/uint8 and
# wrapped back to their width after every op, as two's complement hardware of that width would.


@_inline
def wrap_signed(x, shift):
    """Keep the low ``8 - shift`` bits of an int8, sign-extended."""
    return shr_arith(shl(x, shift), shift)


@_inline
def wrap_unsigned(x, mask):
    return iand(x, mask)


# -- small scalar semantics ----------------------------------------------------------------


@_inline
def fsign(x, one):
    """sign of a float: -1, +1, NaN for NaN, and the zero itself for +-0."""
    r = one if x > 0 else x
    return -one if x < 0 else r


@_inline
def isign(x, zero, one):
    neg = isub(zero, one)
    r = one if icmp(x, zero, "GT") else zero
    return neg if icmp(x, zero, "LT") else r


@_inline
def iabs(x, zero):
    """|x| with wrap-around: abs(MIN) == MIN."""
    return isub(zero, x) if icmp(x, zero, "LT") else x


@_inline
def imax(a, b):
    return a if icmp(a, b, "GE") else b


@_inline
def imin(a, b):
    return a if icmp(a, b, "LE") else b


@_inline
def ipow(x, y, zero, one):
    """Integer power with wrap-around; a negative exponent gives 0 except for bases 1 and -1
    (XLA's semantics)."""
    if icmp(y, zero, "LT"):
        if x == one:
            return one
        if x == isub(zero, one):
            return one if iand(y, one) == zero else x
        return zero
    result = one
    base = x
    e = y
    while e != zero:
        if iand(e, one) != zero:
            result = imul(result, base)
        base = imul(base, base)
        e = shr_logical(e, one)
    return result


@_inline
def fpow64(x, y):
    return x ** y


@_inline
def frem(x, y):
    """Float remainder with the sign of the dividend (C fmod); exact in float64."""
    return np.fmod(np.float64(x), np.float64(y))


@_inline
def isfinite_f(x):
    return fabs(x) < np.inf


# jnp.linalg's two ops, on (batch, rows, cols) arrays, compiled once for both tiers (.linalg).
triangular_solve_nd = linalg.triangular_solve
cholesky_nd = linalg.cholesky

# float64 special functions, compiled once for both tiers (.special).
digamma_f = special.digamma64
polygamma_f = special.polygamma64
zeta_f = special.zeta64
i1e_f = special.i1e64


@_inline
def next_after_bits(bx, by, x, y, one, sign, nan):
    """``chlo.next_after`` on the bit patterns ``bx``, ``by`` of floats ``x``, ``y`` (one
    format, sign-magnitude): the next value after x toward y; y itself when they are equal, the
    smallest denormal with y's sign after a zero, the format's quiet NaN if either is NaN."""
    if x != x or y != y:
        return nan
    if x == y:
        return by
    if x == 0:
        return ior(iand(by, sign), one)
    if (x < y) == (x > 0):
        return iadd(bx, one)
    return isub(bx, one)


@_inline
def exp_f64(x):
    return math.exp(x)


@_inline
def log_f64(x):
    return math.log(x) if x > 0.0 else (-np.inf if x == 0.0 else np.nan)


@_inline
def logistic_f64(x):
    e = math.exp(-abs(x))
    r = 1.0 / (1.0 + e)
    return r if x >= 0.0 else e * r


@_inline
def tanh_f64(x):
    return math.tanh(x)


@_inline
def expm1_f64(x):
    return math.expm1(x)


@_inline
def log1p_f64(x):
    return math.log1p(x) if x > -1.0 else (-np.inf if x == -1.0 else np.nan)


@_inline
def sin_f(x):
    return math.sin(np.float64(x))


@_inline
def cos_f(x):
    return math.cos(np.float64(x))


@_inline
def tan_f(x):
    return math.tan(np.float64(x))


@_inline
def sinh_f(x):
    return math.sinh(np.float64(x))


@_inline
def cosh_f(x):
    return math.cosh(np.float64(x))


@_inline
def asin_f(x):
    d = np.float64(x)
    return math.asin(d) if -1.0 <= d <= 1.0 else np.nan


@_inline
def acos_f(x):
    d = np.float64(x)
    return math.acos(d) if -1.0 <= d <= 1.0 else np.nan


@_inline
def atan_f(x):
    return math.atan(np.float64(x))


@_inline
def asinh_f(x):
    return math.asinh(np.float64(x))


@_inline
def acosh_f(x):
    d = np.float64(x)
    return math.acosh(d) if d >= 1.0 else np.nan


@_inline
def atanh_f(x):
    d = np.float64(x)
    if d == 1.0:
        return np.inf
    if d == -1.0:
        return -np.inf
    return math.atanh(d) if -1.0 < d < 1.0 else np.nan


@_inline
def lgamma_f(x):
    d = np.float64(x)
    if d <= 0.0 and d == math.floor(d):
        return np.inf
    return math.lgamma(d)


@_inline
def atan2_f(y, x):
    return math.atan2(np.float64(y), np.float64(x))


@_inline
def clamp_index(i, hi):
    """Clamp a start index into [0, hi] as dynamic_slice, gather and friends require; works
    in int64 so that any index type compares correctly."""
    v = np.int64(i)
    return min(max(v, 0), hi)


def _make_reduce_precision(ubits, nb_float, exp_mask, sign_mask, inf):
    one = ubits(1)
    zero = ubits(0)

    @_inline
    def reduce_precision(x, drop, last, exp_hi, exp_lo, clamp_exp, keep_nan):
        """XLA's reduce_precision: round to fewer mantissa bits (nearest even), then clamp the
        exponent (overflow -> inf, below the smaller normal range -> signed 0)."""
        bits = bitcast(x, ubits_type)
        if drop != zero:
            bias = iadd(isub(shr_logical(last, one), one), shr_logical(iand(bits, last), drop))
            bits = iand(iadd(bits, bias), inot(isub(last, one)))
        if clamp_exp:
            e = iand(bits, exp_mask)
            sign = iand(bits, sign_mask)
            bits = ior(sign, exp_mask) if icmp(e, exp_hi, "GT") else bits
            bits = sign if icmp(e, exp_lo, "LE") else bits
        out = bitcast(bits, nb_float)
        if x != x:
            return x if keep_nan else inf
        return out

    ubits_type = types.uint32 if ubits == np.uint32 else types.uint64
    return reduce_precision


reduce_precision32 = _make_reduce_precision(np.uint32, types.float32, np.uint32(0x7F800000),
                                            np.uint32(0x80000000), np.float32(np.inf))
reduce_precision64 = _make_reduce_precision(np.uint64, types.float64, np.uint64(0x7FF0000000000000),
                                            np.uint64(0x8000000000000000), np.float64(np.inf))


# -- rng_bit_generator ------------------------------------------------------------------------
# The state layout follows XLA's RNG expander (and the reference interpreter): state[0] is the
# 64-bit key, the next words the counter. THREE_FRY draws Threefry-2x32 blocks at consecutive
# 64-bit counters; PHILOX draws Philox-4x32 blocks at a 128-bit counter (state[1], state[2]).

_jit = njit(cache=True, nogil=True, error_model="numpy")


@_inline
def _rotl32(x, r):
    return ior(shl(x, r), shr_logical(x, isub(_u32(32), r)))


@_jit
def rng_threefry(state, n_blocks):
    """(new state, 2 * n_blocks uint32 words)."""
    key = state[0]
    k0 = i2i(iand(key, np.uint64(0xFFFFFFFF)), types.uint32)
    k1 = i2i(shr_logical(key, np.uint64(32)), types.uint32)
    k2 = ixor(ixor(_u32(0x1BD11BDA), k0), k1)
    ks = (k0, k1, k2)
    rot = ((_u32(13), _u32(15), _u32(26), _u32(6)), (_u32(17), _u32(29), _u32(16), _u32(24)))
    words = np.empty(2 * n_blocks, np.uint32)
    for b in range(n_blocks):
        ctr = iadd(state[1], np.uint64(b))
        x0 = iadd(i2i(iand(ctr, np.uint64(0xFFFFFFFF)), types.uint32), ks[0])
        x1 = iadd(i2i(shr_logical(ctr, np.uint64(32)), types.uint32), ks[1])
        for block in range(5):
            rs = rot[block % 2]
            for j in range(4):
                x0 = iadd(x0, x1)
                x1 = ixor(_rotl32(x1, rs[j]), x0)
            x0 = iadd(x0, ks[(block + 1) % 3])
            x1 = iadd(iadd(x1, ks[(block + 2) % 3]), _u32(block + 1))
        words[2 * b] = x0
        words[2 * b + 1] = x1
    new = state.copy()
    new[1] = iadd(state[1], np.uint64(n_blocks))
    return new, words


@_jit
def rng_philox(state, n_blocks):
    """(new state, 4 * n_blocks uint32 words)."""
    key = state[0]
    words = np.empty(4 * n_blocks, np.uint32)
    hi_start = state[2] if state.size > 2 else np.uint64(0)
    m0, m1 = np.uint64(0xD2511F53), np.uint64(0xCD9E8D57)
    mask = np.uint64(0xFFFFFFFF)
    for b in range(n_blocks):
        low = iadd(state[1], np.uint64(b))
        high = iadd(hi_start, np.uint64(1) if icmp(low, state[1], "LT") else np.uint64(0))
        c0 = i2i(iand(low, mask), types.uint32)
        c1 = i2i(shr_logical(low, np.uint64(32)), types.uint32)
        c2 = i2i(iand(high, mask), types.uint32)
        c3 = i2i(shr_logical(high, np.uint64(32)), types.uint32)
        k0 = i2i(iand(key, mask), types.uint32)
        k1 = i2i(shr_logical(key, np.uint64(32)), types.uint32)
        for _ in range(10):
            p0 = imul(m0, i2i(c0, types.uint64))
            p1 = imul(m1, i2i(c2, types.uint64))
            hi0 = i2i(shr_logical(p0, np.uint64(32)), types.uint32)
            lo0 = i2i(iand(p0, mask), types.uint32)
            hi1 = i2i(shr_logical(p1, np.uint64(32)), types.uint32)
            lo1 = i2i(iand(p1, mask), types.uint32)
            c0, c1, c2, c3 = ixor(ixor(hi1, c1), k0), lo1, ixor(ixor(hi0, c3), k1), lo0
            k0 = iadd(k0, _u32(0x9E3779B9))
            k1 = iadd(k1, _u32(0xBB67AE85))
        words[4 * b] = c0
        words[4 * b + 1] = c1
        words[4 * b + 2] = c2
        words[4 * b + 3] = c3
    new = state.copy()
    end = iadd(state[1], np.uint64(n_blocks))
    new[1] = end
    if state.size > 2:
        new[2] = iadd(state[2], np.uint64(1) if icmp(end, state[1], "LT") else np.uint64(0))
    return new, words


# -- complex ------------------------------------------------------------------------------------
# numba computes complex64/complex128 arithmetic natively; these are the functions of a complex
# argument the elementwise rules call (cmath works in complex128, the result is narrowed back).


@_inline
def cdiv(a, b):
    """Complex division as numpy does it (Smith's algorithm), in the operands' precision; a zero
    divisor gives infinities and NaNs, not numba's ZeroDivisionError."""
    ar, ai, br, bi = a.real, a.imag, b.real, b.imag
    abs_br, abs_bi = abs(br), abs(bi)
    if abs_br >= abs_bi:
        if abs_br == 0 and abs_bi == 0:
            return complex(ar / abs_br, ai / abs_br)
        rat = bi / br
        scl = 1.0 / (br + bi * rat)
        return complex((ar + ai * rat) * scl, (ai - ar * rat) * scl)
    rat = br / bi
    scl = 1.0 / (bi + br * rat)
    return complex((ar * rat + ai) * scl, (ai * rat - ar) * scl)


@_inline
def csign(x):
    """x / |x|, and 0 for 0 (NaN stays NaN)."""
    a = abs(x)
    return x if a == 0 else x / a


@_inline
def cexp(x):
    z = np.complex128(x)
    if z.imag == 0:  # exp(710+0j) is inf+0j, not inf * (cos 0 + i sin 0) = inf+nanj
        return complex(math.exp(z.real), z.imag)
    return cmath.exp(z)


@_inline
def clog(x):
    return cmath.log(np.complex128(x))


@_inline
def csqrt(x):
    return cmath.sqrt(np.complex128(x))


@_inline
def crsqrt(x):
    return cdiv(np.complex128(1.0), cmath.sqrt(np.complex128(x)))


@_inline
def ctanh(x):
    return cmath.tanh(np.complex128(x))


@_inline
def csin(x):
    return cmath.sin(np.complex128(x))


@_inline
def ccos(x):
    return cmath.cos(np.complex128(x))


@_inline
def ctan(x):
    return cmath.tan(np.complex128(x))


@_inline
def cexpm1(x):
    return cmath.exp(np.complex128(x)) - 1.0


@_inline
def clog1p(x):
    return cmath.log(1.0 + np.complex128(x))


@_inline
def clogistic(x):
    return cdiv(np.complex128(1.0), 1.0 + cmath.exp(-np.complex128(x)))


@_inline
def cpow(x, y):
    return x ** y
