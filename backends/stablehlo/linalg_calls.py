"""The linear-algebra custom calls JAX emits off XLA's platforms, computed on the host by LAPACK,
for both backends.

Off XLA's own platforms JAX lowers ``jnp.linalg.qr`` (and what is built on it, such as
``jax.random.orthogonal``) to two custom calls that XLA expands itself, and its TPU lowering of
``eigh`` (which ``pjrt_hub.jax`` registers for a served plugin's platform) to a third:

* ``@Qr(a[..., m, n]) -> (a', taus[..., min(m, n)])``: LAPACK's ``geqrf`` form, R on and above
  the diagonal of ``a'`` and the Householder vectors below it (their leading 1 implied), each
  reflector ``H_i = I - taus[i] v_i v_i^H``;
* ``@ProductOfElementaryHouseholderReflectors(a[..., m, n], taus[..., k]) -> q[..., m, n]``:
  LAPACK's ``orgqr``/``ungqr``, the first ``n`` columns of ``H_0 H_1 ... H_{k-1}``;
* ``@Eigh(a[..., n, n]) -> (v[..., n, n], w[..., n])`` with ``backend_config`` ``"lower,sort,..."``:
  the eigenvectors (columns) and real eigenvalues, ascending, of the Hermitian matrix held in
  ``a``'s lower (or upper) triangle: LAPACK's ``syevd``/``heevd`` (numpy's ``eigh``).

Here both are LAPACK itself (scipy's), matrix by matrix over the batch, in the operands' type
(16-bit floats in float32, rounded once). The reference interpreter calls them as its ops and
numba_cpu's compiled code through ``objmode``, so the two backends give the same bits.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

__all__ = ["HOST_CUSTOM_CALLS", "custom_call_host", "eigh_host", "geqrf_host", "householder_product_host"]

#: The custom call targets computed here.
HOST_CUSTOM_CALLS = ("Qr", "ProductOfElementaryHouseholderReflectors", "Eigh")


def _lapack_dtype(dtype: np.dtype) -> np.dtype:
    if dtype.kind == "c":
        return np.dtype(np.complex128 if dtype.itemsize > 8 else np.complex64)
    return np.dtype(np.float64 if dtype.itemsize > 4 else np.float32)


def _lapack(name: str, dtype: np.dtype):  # noqa: ANN202 - a scipy Fortran function
    from scipy.linalg import lapack

    return lapack.get_lapack_funcs(name, dtype=dtype)


def geqrf_host(a: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``@Qr``: the Householder QR of each matrix of ``a`` (see the module docstring)."""
    *batch, m, n = a.shape
    work = _lapack_dtype(a.dtype)
    out = np.array(a, dtype=work, order="C", copy=True)
    taus = np.zeros((*batch, min(m, n)), work)
    if out.size:
        geqrf = _lapack("geqrf", work)
        for index in np.ndindex(*batch):
            qr, tau, _, info = geqrf(out[index])
            if info < 0:
                raise ValueError(f"LAPACK geqrf: argument {-info} is invalid")
            out[index], taus[index] = qr, tau
    return np.ascontiguousarray(out.astype(a.dtype)), np.ascontiguousarray(taus.astype(a.dtype))


def householder_product_host(a: np.ndarray, taus: np.ndarray) -> np.ndarray:
    """``@ProductOfElementaryHouseholderReflectors``: ``Q`` from each ``geqrf`` form of ``a``."""
    *batch, m, n = a.shape
    k = taus.shape[-1]
    if k > n or n > m:
        raise ValueError(f"a product of {k} reflectors into a {m}x{n} matrix needs k <= n <= m")
    work = _lapack_dtype(a.dtype)
    out = np.array(a, dtype=work, order="C", copy=True)
    if out.size:
        orgqr = _lapack("ungqr" if work.kind == "c" else "orgqr", work)
        wide = np.asarray(taus, dtype=work)
        for index in np.ndindex(*batch):
            # LAPACK's orgqr takes k reflectors from the first k columns; tau's length says k.
            q, _, info = orgqr(out[index], wide[index])
            if info < 0:
                raise ValueError(f"LAPACK orgqr: argument {-info} is invalid")
            out[index] = q
    return np.ascontiguousarray(out.astype(a.dtype))


def eigh_host(a: np.ndarray, lower: bool) -> tuple[np.ndarray, np.ndarray]:
    """``@Eigh``: eigenvectors and ascending eigenvalues of each Hermitian matrix of ``a``."""
    work = _lapack_dtype(a.dtype)
    w, v = np.linalg.eigh(np.asarray(a, dtype=work), UPLO="L" if lower else "U")
    real = np.dtype(f"f{a.dtype.itemsize // 2}") if a.dtype.kind == "c" else a.dtype
    return np.ascontiguousarray(v.astype(a.dtype)), np.ascontiguousarray(w.astype(real))


def custom_call_host(target: str, operands: Sequence[np.ndarray], config: str = "") -> tuple[np.ndarray, ...]:
    """The results of custom call ``target`` (one of :data:`HOST_CUSTOM_CALLS`) on ``operands``;
    ``config`` is its ``backend_config`` string."""
    if target == "Qr" and len(operands) == 1:
        return geqrf_host(operands[0])
    if target == "ProductOfElementaryHouseholderReflectors" and len(operands) == 2:
        return (householder_product_host(operands[0], operands[1]),)
    if target == "Eigh" and len(operands) == 1:
        flags = config.split(",")
        return eigh_host(operands[0], lower=flags[0].strip() != "0")
    raise ValueError(f"custom call @{target} with {len(operands)} operands is not one of {HOST_CUSTOM_CALLS}")
