"""``stablehlo.triangular_solve`` and ``stablehlo.cholesky`` (what ``jnp.linalg`` lowers to off
XLA's ``cpu`` platform), by substitution in float64 (complex128 for complex operands), rounded
once to the result type, every batch at once.

As the spec and XLA have it: only the ``lower`` (or upper) triangle of ``a`` is read, its
diagonal as ones when ``unit_diagonal``; a zero pivot gives inf or NaN rather than an error;
cholesky leaves zeros in the other triangle and NaNs from a pivot that is not positive on.
"""

from __future__ import annotations

import numpy as np

from .registry import register


def _wide(x: np.ndarray) -> np.ndarray:
    return x.astype(np.complex128 if x.dtype.kind == "c" else np.float64)


def _triangle(a: np.ndarray, lower: bool, unit: bool) -> np.ndarray:
    t = np.tril(a) if lower else np.triu(a)
    if unit:
        idx = np.arange(a.shape[-1])
        t[..., idx, idx] = 1
    return t


@register("stablehlo.triangular_solve")
def _triangular_solve(ctx, op, a, b):
    attrs = op.attributes
    transpose = str(attrs.get("transpose_a", "NO_TRANSPOSE"))
    t = _triangle(_wide(a), bool(attrs.get("lower")), bool(attrs.get("unit_diagonal")))
    if transpose != "NO_TRANSPOSE":
        t = np.swapaxes(t, -1, -2)
        if transpose == "ADJOINT":
            t = np.conj(t)
    x = _wide(b)
    if not attrs.get("left_side"):  # x op(a) = b  <=>  op(a)^T x^T = b^T
        t, x = np.swapaxes(t, -1, -2), np.swapaxes(x, -1, -2)
    x = x.copy()
    m = t.shape[-1]
    # t is lower triangular (solved top down) when exactly one of lower, transposed and
    # right side holds.
    forward = bool(attrs.get("lower")) ^ (transpose != "NO_TRANSPOSE") ^ (not attrs.get("left_side"))
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        for i in range(m) if forward else range(m - 1, -1, -1):
            done = slice(0, i) if forward else slice(i + 1, m)
            rest = x[..., i, :]
            if done.stop > done.start:  # numpy's einsum over an empty axis can return garbage, not 0
                rest = rest - np.einsum("...j,...jc->...c", t[..., i, done], x[..., done, :])
            x[..., i, :] = rest / t[..., i, i][..., None]
    if not attrs.get("left_side"):
        x = np.swapaxes(x, -1, -2)
    return x.astype(b.dtype)


@register("stablehlo.cholesky")
def _cholesky(ctx, op, a):
    lower = bool(op.attributes.get("lower"))
    w = _wide(a)
    h = w if lower else np.conj(np.swapaxes(w, -1, -2))  # the lower triangle holds the matrix
    m = a.shape[-1]
    out = np.zeros_like(h)
    # Not positive definite (a pivot that is not positive, NaN included): the whole factor is NaN,
    # as JAX's CPU gives it (LAPACK's potrf fails and JAX replaces the result).
    failed = np.zeros(h.shape[:-2], bool)
    with np.errstate(divide="ignore", invalid="ignore"):
        for j in range(m):
            d = h[..., j, j] - np.sum(out[..., j, :j] * np.conj(out[..., j, :j]), axis=-1)
            failed |= ~(np.real(d) > 0)
            pivot = np.sqrt(np.real(d))
            out[..., j, j] = pivot
            below = h[..., j + 1:, j]
            if j:  # numpy's einsum over an empty axis can return garbage, not 0
                below = below - np.einsum("...ip,...p->...i", out[..., j + 1:, :j], np.conj(out[..., j, :j]))
            out[..., j + 1:, j] = below / pivot[..., None]
    out[failed] = np.nan
    if not lower:
        out = np.conj(np.swapaxes(out, -1, -2))
    return out.astype(a.dtype)
