"""``stablehlo.fft`` computed on the host, for both backends: numpy's FFT (pocketfft) in double
precision, rounded once to the result type. The reference interpreter calls it as its op; numba
has no FFT, so numba_cpu's compiled code calls it through ``objmode`` (an FFT is long enough that
leaving compiled code once costs little; the eager tier has no complex numbers, so FFT programs
wait for the compiled code). One function, so the two backends give the same bits."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

__all__ = ["fft_host"]


def fft_host(x: np.ndarray, fft_type: str, lengths: tuple[int, ...], out_dtype: npt.DTypeLike) -> np.ndarray:
    """``fft_type`` is the op's ``FFT``, ``IFFT``, ``RFFT`` or ``IRFFT`` over the last
    ``len(lengths)`` dimensions of ``x``; a C-contiguous result of ``out_dtype``."""
    axes = tuple(range(x.ndim - len(lengths), x.ndim))
    result: np.ndarray
    if fft_type == "FFT":
        result = np.fft.fftn(x.astype(np.complex128), axes=axes)
    elif fft_type == "IFFT":
        result = np.fft.ifftn(x.astype(np.complex128), axes=axes)
    elif fft_type == "RFFT":
        result = np.fft.rfftn(x.astype(np.float64), s=lengths, axes=axes)
    else:
        result = np.fft.irfftn(x.astype(np.complex128), s=lengths, axes=axes)
    return np.ascontiguousarray(result.astype(out_dtype))
