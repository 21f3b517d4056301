"""``stablehlo.fft`` on the host: numpy's FFT (pocketfft) in double precision, rounded once to
the result type, as the reference interpreter computes it. numba has no FFT, so the compiled
code calls this through ``objmode`` (:mod:`.kernels`): an FFT is long enough that leaving
compiled code once costs little. (The eager tier has no complex numbers, so FFT programs wait
for the compiled code.)"""

from __future__ import annotations

import numpy as np

__all__ = ["fft_host"]


def fft_host(x: np.ndarray, fft_type: str, lengths: tuple[int, ...], out_dtype: str) -> np.ndarray:
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
