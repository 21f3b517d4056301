"""Constants the float32 math of the compiled kernels (:mod:`.vecmath`) and of their numpy
twins (:mod:`.eager_math`) share, so that the two cannot drift apart. No numba here: the eager
tier imports this module without it.

* The range reduction of sin, cos and tan (Payne and Hanek's, in integers): |x| = m * 2**(e-150),
  m the 24-bit significand and e the exponent field. x * 2/pi modulo 4 quarter turns needs only
  the 96 bits of 2/pi that start 2**(e-152) places after its binary point: earlier bits, times m,
  make multiples of 4, and later ones move the result by under 2**-70. ``WINDOWS[k][e]`` is word
  k (most significant first) of those 96 bits, cut from 2/pi computed exactly in integers.
* Taylor coefficients of sin, cos and atan, and the cubic that starts cbrt's Halley steps.
"""

from __future__ import annotations

import math

import numpy as np

__all__ = ["ATAN", "CBRT_START", "COS", "SIN", "TAN_PI_8", "WINDOWS", "two_over_pi_bits"]


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
    for e in range(56, 256):  # below 56 the window would start before the binary point (unused)
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
