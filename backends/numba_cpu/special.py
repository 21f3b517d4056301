"""Special functions XLA has and numba does not: digamma, polygamma, Hurwitz zeta, bessel_i1e.

Scalar float64 functions compiled by numba once: the kernels call them (:mod:`.support`) and the
eager tier applies the same compiled functions to each element (:mod:`.eager_math`), so the
tiers agree bit for bit. Edge values follow XLA's CHLO
lowerings: NaN at digamma's poles (0 and the negative integers), zeta(x, q) infinite at x = 1
and at non-positive integer q, NaN for x < 1; i1e is odd (i1e(-0) is -0).

Methods (standard ones, not XLA's polynomial fits, so the last bits differ from XLA's):

* digamma: the reflection psi(x) = psi(1 - x) - pi / tan(pi x) below 0, the recurrence
  psi(x) = psi(x + 1) - 1 / x up to x >= 10, then the asymptotic series in 1 / x^2 to the
  B14 term (error below 1e-15 there);
* zeta: Euler-Maclaurin summation with the first terms summed directly until q + n >= 9 and
  seven Bernoulli corrections; polygamma(n, x) = (-1)^(n+1) n! zeta(n + 1, x) for n >= 1;
* i1e: the power series of I1 times exp(-|x|) up to |x| = 20, the asymptotic expansion of
  I1(x) exp(-x) sqrt(2 pi x) beyond (its terms fall below 1e-17 long before they grow).
"""

from __future__ import annotations

import math

from numba import njit

__all__ = ["digamma64", "i1e64", "polygamma64", "zeta64"]

# psi(x) ~ log(x) - 1/(2x) - sum B_2k / (2k x^2k): the coefficients -B_2k / 2k, k = 1..7.
_PSI_1, _PSI_2, _PSI_3, _PSI_4 = -1.0 / 12.0, 1.0 / 120.0, -1.0 / 252.0, 1.0 / 240.0
_PSI_5, _PSI_6, _PSI_7 = -1.0 / 132.0, 691.0 / 32760.0, -1.0 / 12.0
# Euler-Maclaurin for zeta: B_2j / (2j)!, j = 1..7.
_EM_1, _EM_2, _EM_3 = 1.0 / 12.0, -1.0 / 720.0, 1.0 / 30240.0
_EM_4, _EM_5, _EM_6, _EM_7 = -1.0 / 1209600.0, 1.0 / 47900160.0, -691.0 / 1307674368000.0, 1.0 / 74724249600.0
_INV_SQRT_2PI = 0.3989422804014327
#: Negative q further out than this would need that many direct terms: NaN instead.
_ZETA_MAX_TERMS = 1 << 20

_jit = njit(cache=True, nogil=True, error_model="numpy")


@_jit
def digamma64(x: float) -> float:
    if x != x or x == -math.inf:
        return math.nan
    if x == math.inf:
        return x
    if x <= 0.0 and x == math.floor(x):
        return math.nan
    result = 0.0
    if x < 0.0:
        result = -math.pi / math.tan(math.pi * x)
        x = 1.0 - x
    while x < 10.0:
        result -= 1.0 / x
        x += 1.0
    f = 1.0 / (x * x)
    series = f * (_PSI_1 + f * (_PSI_2 + f * (_PSI_3 + f * (_PSI_4 + f * (_PSI_5 + f * (_PSI_6 + f * _PSI_7))))))
    return result + math.log(x) - 0.5 / x + series


@_jit
def zeta64(x: float, q: float) -> float:
    """Hurwitz zeta: the sum over k >= 0 of (q + k) ** -x."""
    if x != x or q != q:
        return math.nan
    if x == 1.0:
        return math.inf
    if x < 1.0:
        return math.nan
    if q <= 0.0:
        if q == math.floor(q):
            return math.inf
        if x != math.floor(x) or -q > _ZETA_MAX_TERMS:
            return math.nan  # a negative base to a fractional power
    if x == math.inf:
        return math.inf if q < 1.0 else (1.0 if q == 1.0 else 0.0)
    n = 9 if q >= 9.0 else int(9.0 - math.floor(q))
    total = 0.0
    for k in range(n):
        total += math.pow(q + k, -x)
    a = q + n
    total += math.pow(a, 1.0 - x) / (x - 1.0) + 0.5 * math.pow(a, -x)
    t = x * math.pow(a, -x - 1.0)
    total += _EM_1 * t
    inv_a2 = 1.0 / (a * a)
    t *= (x + 1.0) * (x + 2.0) * inv_a2
    total += _EM_2 * t
    t *= (x + 3.0) * (x + 4.0) * inv_a2
    total += _EM_3 * t
    t *= (x + 5.0) * (x + 6.0) * inv_a2
    total += _EM_4 * t
    t *= (x + 7.0) * (x + 8.0) * inv_a2
    total += _EM_5 * t
    t *= (x + 9.0) * (x + 10.0) * inv_a2
    total += _EM_6 * t
    t *= (x + 11.0) * (x + 12.0) * inv_a2
    return total + _EM_7 * t


@_jit
def polygamma64(n: float, x: float) -> float:
    if n != n or x != x or n < 0.0 or n != math.floor(n):
        return math.nan
    if n == 0.0:
        return digamma64(x)
    factorial = 1.0
    k = 2.0
    while k <= n:
        factorial *= k
        k += 1.0
    z = zeta64(n + 1.0, x)
    return factorial * z if n % 2.0 == 1.0 else -(factorial * z)


@_jit
def i1e64(x: float) -> float:
    """I1(x) * exp(-|x|), the exponentially scaled modified Bessel function of order 1."""
    if x != x:
        return x
    a = abs(x)
    if a == math.inf:
        return math.copysign(0.0, x)
    if a <= 20.0:
        h = 0.5 * a
        h2 = h * h
        term = h
        total = h
        k = 1.0
        while term > total * 1e-17:
            term *= h2 / (k * (k + 1.0))
            total += term
            k += 1.0
        r = total * math.exp(-a)
    else:
        # I1(a) exp(-a) sqrt(2 pi a) ~ sum (-1)^k c_k / a^k, c_k = prod (4 - (2i-1)^2) / (k! 8^k).
        term = 1.0
        total = 1.0
        k = 1.0
        while abs(term) > 1e-17 and k < 60.0:
            term *= -(4.0 - (2.0 * k - 1.0) * (2.0 * k - 1.0)) / (8.0 * k * a)
            total += term
            k += 1.0
        r = total * _INV_SQRT_2PI / math.sqrt(a)
    return math.copysign(r, x)
