"""Constants the float32 math of the compiled kernels (:mod:`.vecmath`) and of their numpy
twins (:mod:`.eager_math`) share, so that the two cannot drift apart. No numba here: the eager
tier imports this module without it.

* The range reduction of sin, cos and tan (Payne and Hanek's, in integers): |x| = m * 2**(e-150),
  m the 24-bit significand and e the exponent field. x * 2/pi modulo 4 quarter turns needs only
  the 96 bits of 2/pi that follow its first e-152 bits after the binary point (bits e-151 to
  e-56; for e < 152 the first ones are the zeros before it): earlier bits, times m, make
  multiples of 4, and later ones move the result by under 2**-70. ``WINDOWS[k][e]`` is word
  k (most significant first) of those 96 bits, cut from 2/pi computed exactly in integers.
* Taylor coefficients of sin, cos, atan and exp, the fits of erf and erfc, and the cubic that
  starts cbrt's Halley steps.
* Estrin's scheme for the long polynomials: it evaluates in a depth of about 2 log2(degree)
  dependent operations where Horner's takes 2 * degree, so that the SIMD units are not left
  waiting on one long chain of latencies per vector (LLVM does not interleave these loops).
* The branch-free arithmetic of the functions (those polynomials, sin and cos of the reduced
  angle, cbrt's Halley steps) is written once here: numba compiles it for the kernels and the
  eager tier calls it on arrays, the same operations in the same order, so the same bits.
"""

from __future__ import annotations

import math

import numpy as np

__all__ = ["ATAN", "CBRT_START", "COS", "ERFC_H", "ERF_G", "EXP_TAYLOR", "SIN", "SINH_TAYLOR", "TAN_PI_8", "WINDOWS",
           "cbrt_refine", "estrin9", "estrin13", "estrin14", "sin_cos_taylor", "two_over_pi_bits"]


def two_over_pi_bits(bits: int) -> int:
    """floor(2/pi * 2**bits), exact: pi from Machin's formula with 64 guard bits."""
    p = bits + 64

    def arctan_inverse(n: int) -> int:  # atan(1/n) * 2**p
        total, power, k = 0, (1 << p) // n, 0
        while power:
            term = power // (2 * k + 1)
            total += -term if k & 1 else term
            power //= n * n
            k += 1
        return total

    pi = 16 * arctan_inverse(5) - 4 * arctan_inverse(239)
    return (1 << (bits + 1 + p)) // pi


def _windows() -> np.ndarray:
    top = 103 + 96 + 8  # exponent field 255 needs the bits down to 2**-(103 + 96)
    frac = two_over_pi_bits(top)
    words = np.zeros((3, 256), np.uint32)
    for e in range(56, 256):  # below 56 the window would end before the binary point (unused)
        window = (frac >> (top - (e - 152 + 96))) & ((1 << 96) - 1)
        words[:, e] = [(window >> 64) & 0xFFFFFFFF, (window >> 32) & 0xFFFFFFFF, window & 0xFFFFFFFF]
    return words


WINDOWS = _windows()
#: (-1)**k / (2k+1)! for k = 1..6: sin(a) = a + a**3 * P(a**2), truncation under 2e-14 on |a| <= pi/4.
SIN = tuple((-1) ** k / math.factorial(2 * k + 1) for k in range(1, 7))
#: (-1)**k / (2k)! for k = 1..7: cos(a) = 1 + a**2 * Q(a**2), truncation under 1e-15.
COS = tuple((-1) ** k / math.factorial(2 * k) for k in range(1, 8))
#: (-1)**k / (2k+1) for k = 1..13: atan(t) = t + t**3 * R(t**2), truncation 3e-13 for |t| <= tan(pi/8).
ATAN = tuple((-1) ** k / (2 * k + 1) for k in range(1, 14))
TAN_PI_8 = 0.41421356237309503
#: cbrt(t) for t in [1, 8) to 1.7e-2: a least-squares cubic (Chebyshev fit made for this module).
CBRT_START = (0.7214930403681991, 0.328879112387226, -0.03472236531986745, 0.0017135355592252232)

# erf and erfc, computed in float64 and rounded once, so a float32 result is within an ulp. Both
# polynomials were fitted for this module with numpy: Chebyshev least squares at 4000 Chebyshev
# nodes against scipy.special (erfcx, erf), then converted to the monomial basis of the variable.
#
# erfc(x), x >= 0: t = 1 / (1 + x/2) maps [0, inf) onto (0, 1], and h(t) = log(erfc(x) * exp(x*x) / t)
# is smooth on it (the asymptotic series of erfc in 1/x**2 is a series in t there); h is a
# degree-13 polynomial in u = 2t - 1 (max error 1.2e-9, which is erfc's relative error), and
# erfc(x) = t * exp(h - x*x). x*x is exact in float64 for a float32 x.
ERFC_H = (
    -0.6717940851517209, 0.6726432205460094, 0.047343417521054185, -0.04689548216102342,
    -0.009874534918173397, 0.008823558177800443, 0.0017706661181974702, -0.0023392777244395572,
    -0.00018278214100042492, 0.0006579538482961236, -3.2113772849112136e-05, -0.0001546337912080308,
    1.3371503639590013e-05, 2.0723071069731153e-05,
)
# erf(x) / x for |x| <= 1 as a degree-8 polynomial in u = 2 x**2 - 1 (relative error 1e-12).
ERF_G = (
    0.9654687386698849, -0.1405360890155293, 0.019852496688085468, -0.00228548565695568,
    0.00021751716322972035, -1.753682468452801e-05, 1.2233626160774488e-06, -7.557492998669095e-08,
    4.138779263324253e-09,
)
#: 1/k! for k = 2..10: exp(u) = 1 + u + u**2 * P(u) for |u| <= ln(2)/2 to ~3e-11.
EXP_TAYLOR = tuple(1.0 / math.factorial(k) for k in range(2, 11))
#: 1/(2k+1)! for k = 1..9: sinh(x) = x + x**3 * P(x**2) for |x| < 1, truncation under 1e-19.
SINH_TAYLOR = tuple(1.0 / math.factorial(2 * k + 1) for k in range(1, 10))


def estrin14(u, c):
    """c[0] + c[1] u + ... + c[13] u**13."""
    u2 = u * u
    u4 = u2 * u2
    q0 = (c[0] + c[1] * u) + (c[2] + c[3] * u) * u2
    q1 = (c[4] + c[5] * u) + (c[6] + c[7] * u) * u2
    q2 = (c[8] + c[9] * u) + (c[10] + c[11] * u) * u2
    q3 = c[12] + c[13] * u
    return (q0 + q1 * u4) + (q2 + q3 * u4) * (u4 * u4)


def estrin13(u, c):
    """c[0] + c[1] u + ... + c[12] u**12."""
    u2 = u * u
    u4 = u2 * u2
    q0 = (c[0] + c[1] * u) + (c[2] + c[3] * u) * u2
    q1 = (c[4] + c[5] * u) + (c[6] + c[7] * u) * u2
    q2 = (c[8] + c[9] * u) + (c[10] + c[11] * u) * u2
    return (q0 + q1 * u4) + (q2 + c[12] * u4) * (u4 * u4)


def estrin9(u, c):
    """c[0] + c[1] u + ... + c[8] u**8."""
    u2 = u * u
    u4 = u2 * u2
    q0 = (c[0] + c[1] * u) + (c[2] + c[3] * u) * u2
    q1 = (c[4] + c[5] * u) + (c[6] + c[7] * u) * u2
    return (q0 + q1 * u4) + c[8] * (u4 * u4)


def sin_cos_taylor(a):
    """(sin a, cos a) for |a| <= pi/4, by Horner's rule on the SIN and COS series."""
    s1, s2, s3, s4, s5, s6 = SIN
    c1, c2, c3, c4, c5, c6, c7 = COS
    z = a * a
    s = a + a * z * (s1 + z * (s2 + z * (s3 + z * (s4 + z * (s5 + z * s6)))))
    c = 1.0 + z * (c1 + z * (c2 + z * (c3 + z * (c4 + z * (c5 + z * (c6 + z * c7))))))
    return s, c


def cbrt_refine(t):
    """cbrt(t) for t in [1, 8): the CBRT_START cubic, then two Halley steps."""
    c0, c1, c2, c3 = CBRT_START
    y = c0 + t * (c1 + t * (c2 + t * c3))
    y3 = y * y * y
    y = y * (y3 + 2.0 * t) / (2.0 * y3 + t)
    y3 = y * y * y
    return y * (y3 + 2.0 * t) / (2.0 * y3 + t)
