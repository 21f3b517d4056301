"""``stablehlo.triangular_solve`` and ``stablehlo.cholesky``: what ``jnp.linalg`` lowers to on a
platform that is not XLA's ``cpu`` (inv, solve, cholesky, det's LU, multivariate normals...).

Compiled once by numba and called by both tiers (the kernels in :mod:`.kernels`, the eager
tier in :mod:`.eager`), so their bits agree. Both take the operands as ``(batch, rows, cols)``
arrays and compute in the operands' type, as XLA does:

The flags are int64 (1 or 0, and 0-2 for the transpose) so that every program shares one
compiled function per element type, where numba would compile one per literal.

* triangular_solve reads only the ``lower`` (or upper) triangle of ``a``, and its diagonal
  as ones when ``unit_diagonal``; it solves ``op(a) x = b`` (``left_side``) or ``x op(a) = b``
  with op the identity, the transpose or the adjoint, by substitution. A zero on the diagonal
  gives inf or NaN, as XLA's does, rather than an error;
* cholesky reads the ``lower`` (or upper) triangle of a Hermitian matrix and returns L with
  ``a = L L^H`` (or U with ``a = U^H U``), zeros in the other triangle; a matrix that is not
  positive definite (a pivot that is not positive, NaN included) gives a matrix of NaNs, as
  JAX's CPU gives (LAPACK's potrf fails, and the whole factor is replaced).
"""

from __future__ import annotations

import numpy as np
from numba import njit

__all__ = ["cholesky", "triangular_solve"]

_jit = njit(cache=True, nogil=True, error_model="numpy")
_inline = njit(cache=True, nogil=True, error_model="numpy", inline="always")


@_inline
def _element(a, k, i, j, lower, unit, trans):
    """op(tri(a))[i, j] of batch ``k``: trans 0 none, 1 transpose, 2 adjoint."""
    if trans != 0:
        i, j = j, i
    zero = a[k, 0, 0] * 0
    if i == j:
        v = zero + 1 if unit else a[k, i, i]
    elif (i > j) == lower:
        v = a[k, i, j]
    else:
        v = zero
    return np.conj(v) if trans == 2 else v


@_jit
def triangular_solve(a, b, left_side, lower_side, unit_diagonal, trans):
    left, lower, unit = left_side != 0, lower_side != 0, unit_diagonal != 0
    out = b.copy()
    batch, m = a.shape[0], a.shape[1]
    cols = b.shape[2] if left else b.shape[1]
    # op(tri(a)) is lower triangular when exactly one of "lower" and "transposed" holds.
    op_lower = lower != (trans != 0)
    for k in range(batch):
        for step in range(m):
            i = step if op_lower == left else m - 1 - step
            pivot = _element(a, k, i, i, lower, unit, trans)
            # The rows (left) or columns (right) of x solved before this one.
            lo, hi = (0, i) if op_lower == left else (i + 1, m)
            for c in range(cols):
                if left:  # row i of x: b[i] - sum over the solved rows j of T[i, j] x[j]
                    acc = out[k, i, c]
                    for j in range(lo, hi):
                        acc -= _element(a, k, i, j, lower, unit, trans) * out[k, j, c]
                    out[k, i, c] = acc / pivot
                else:  # column i of x: b[:, i] - sum over the solved columns j of x[:, j] T[j, i]
                    acc = out[k, c, i]
                    for j in range(lo, hi):
                        acc -= out[k, c, j] * _element(a, k, j, i, lower, unit, trans)
                    out[k, c, i] = acc / pivot
    return out


@_jit
def cholesky(a, lower_side):
    lower = lower_side != 0
    batch, m = a.shape[0], a.shape[1]
    out = np.zeros_like(a)
    for k in range(batch):
        failed = False
        for j in range(m):
            # The Hermitian matrix's lower triangle: a's, or the adjoint of a's upper one.
            d = a[k, j, j]
            for p in range(j):
                d -= out[k, j, p] * np.conj(out[k, j, p])
            if not d.real > 0:
                failed = True
                break
            pivot = np.sqrt(d.real)
            out[k, j, j] = pivot
            for i in range(j + 1, m):
                s = a[k, i, j] if lower else np.conj(a[k, j, i])
                for p in range(j):
                    s -= out[k, i, p] * np.conj(out[k, j, p])
                out[k, i, j] = s / pivot
        if failed:
            out[k] = np.nan
        elif not lower:
            out[k] = np.conj(out[k].T).copy()
    return out
