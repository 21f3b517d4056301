"""Comparing what a plugin returned with what the rules say: bit for bit, or within a tolerance."""

from __future__ import annotations

import numpy as np

from .programs import Output


def _float_view(a: np.ndarray) -> np.ndarray:
    return np.asarray(a).astype(np.complex128 if a.dtype.kind == "c" else np.float64)


def bad_elements(got: np.ndarray, out: Output) -> np.ndarray:
    """A mask of the elements of ``got`` that differ from what ``out`` expects (all of them when
    the shape or dtype is wrong)."""
    want = np.asarray(out.expected)
    got = np.asarray(got)
    if got.shape != want.shape or got.dtype != want.dtype:
        return np.ones(want.shape, bool)
    return _bad(got, want, out)


def mismatch(got: np.ndarray, out: Output, where: np.ndarray | None = None) -> str | None:
    """None when ``got`` is what ``out`` expects (at the elements ``where`` selects, default all),
    else a one-line description of the first difference (index, got, expected)."""
    want = np.asarray(out.expected)
    got = np.asarray(got)
    if got.shape != want.shape or got.dtype != want.dtype:
        return f"{out.label}: got {got.dtype}{list(got.shape)}, expected {want.dtype}{list(want.shape)}"
    bad = _bad(got, want, out)
    if where is not None:
        bad &= where
    if not bad.any():
        return None
    i = tuple(int(k) for k in np.argwhere(bad)[0])
    return (f"{out.label}: {int(bad.sum())} of {bad.size} differ, first at {list(i)}: got {got[i]!r}, "
            f"expected {want[i]!r}")


def _bad(got: np.ndarray, want: np.ndarray, out: Output) -> np.ndarray:
    if want.dtype.kind in "biu":
        bad = got != want
    elif out.exact:
        g, w = _float_view(got), _float_view(want)
        with np.errstate(invalid="ignore"):
            same = (g == w) | (np.isnan(g) & np.isnan(w))
        if g.dtype.kind == "f":  # and -0 is not +0
            same &= (np.signbit(g) == np.signbit(w)) | np.isnan(w)
        bad = ~same
    else:
        bad = ~_close(got, want)
    return np.asarray(bad)


def _close(got: np.ndarray, want: np.ndarray) -> np.ndarray:
    from .spec import element_of

    import ml_dtypes

    e = element_of(want.dtype)
    if e.cls == "c":
        rtol = 2.0 ** (-18 if e.bits == 64 else -45)
    else:
        # One unit in the last place of a narrow type (computed in float32 and rounded, a result
        # near a tie may go either way); a few ulps of float32/float64 (vectorised approximations).
        nmant = ml_dtypes.finfo(e.dtype).nmant
        rtol = max(2.0 ** -nmant, 2.0 ** (-20 if e.bits == 32 else -45))
    g, w = _float_view(got), _float_view(want)
    with np.errstate(all="ignore"):
        if g.dtype.kind == "c":
            scale = np.maximum(np.abs(w), 1e-30)
            ok = np.abs(g - w) <= rtol * scale + 1e-30
            both_nan = np.isnan(g) & np.isnan(w)
            return ok | both_nan | (g == w)
        both_nan = np.isnan(g) & np.isnan(w)
        same = g == w
        big = float(ml_dtypes.finfo(e.dtype).max)
        # A result at the edge of the range may round to inf on one side and not the other.
        edge = (np.abs(np.where(np.isinf(g), w, g)) >= big * (1 - 4 * rtol)) & (np.sign(g) == np.sign(w))
        close = np.abs(g - w) <= rtol * np.abs(w) + rtol * 2.0 ** -126
        return both_nan | same | close | edge
