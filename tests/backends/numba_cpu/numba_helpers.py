"""Helpers shared by the numba_cpu tests (a module of its own: conftest is not importable)."""

from __future__ import annotations

import numpy as np


def assert_matches(got, expected, *, rtol=1e-6, atol=0.0, what=""):
    """Exact for integers and bools, ``rtol`` for floats; NaNs must sit at the same places."""
    got, expected = np.asarray(got), np.asarray(expected)
    assert got.shape == expected.shape, f"{what}: shape {got.shape} != {expected.shape}"
    assert got.dtype == expected.dtype, f"{what}: dtype {got.dtype} != {expected.dtype}"
    if got.dtype.kind in "fcV":
        g = got.astype(np.float64)
        e = expected.astype(np.float64)
        with np.errstate(invalid="ignore"):
            bad = ~((g == e) | (np.isnan(g) & np.isnan(e)) | (np.abs(g - e) <= atol + rtol * np.abs(e)))
        if bad.any():
            i = np.argwhere(bad)[0]
            raise AssertionError(f"{what}: {bad.sum()} elements differ, first at {tuple(i)}: "
                                 f"got {g[tuple(i)]!r}, expected {e[tuple(i)]!r}")
    else:
        if not np.array_equal(got, expected):
            i = np.argwhere(got != expected)[0]
            raise AssertionError(f"{what}: first mismatch at {tuple(i)}: got {got[tuple(i)]!r}, "
                                 f"expected {expected[tuple(i)]!r}")
