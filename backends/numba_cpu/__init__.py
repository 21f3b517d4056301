"""numba_cpu: the built-in CPU backend, compiling StableHLO to numba.

``NumbaCompiler`` is the :class:`~pjrt_hub.backends.cpu_runtime.compiler.ProgramCompiler` the
host runtime plugs in: it parses the program, inlines calls, lowers the function to the source
of one numba function (elementwise chains fused into loops, BLAS for ``dot_general``, control
flow inside the compiled code), compiles it and caches the result on disk.
"""

from __future__ import annotations

import os as _os

# numba's OpenMP workers spin after each parallel loop; OpenBLAS (dot_general) then competes
# with spinning threads for the same cores and runs several times slower. Passive waiting costs
# a few microseconds per parallel loop instead. Must be set before the OpenMP runtime starts; a
# value the user chose is kept.
_os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
_os.environ.setdefault("KMP_BLOCKTIME", "0")
# OpenBLAS's idle workers spin for 2**28 cycles (~0.1 s) after each call, on the cores the
# program's next kernel needs; 2**4 puts them to sleep at once (a wake-up costs tens of
# microseconds, against milliseconds for a product that uses them). Read when scipy's BLAS loads.
_os.environ.setdefault("OPENBLAS_THREAD_TIMEOUT", "4")

from typing import TYPE_CHECKING

from pjrt_hub._lazy import lazy_exports

if TYPE_CHECKING:
    from .compiler import CacheStats, NumbaCompiler, NumbaProgram, default_cache_dir

__all__ = ["CacheStats", "NumbaCompiler", "NumbaProgram", "default_cache_dir", "supported_ops"]


def supported_ops() -> list[str]:
    """Names of the ops this backend lowers."""
    from . import kernels, rules  # noqa: F401
    from .codegen import supported_ops as _ops

    return _ops()


# Imported on first use: the plugin module (``.plugin``) is imported by discovery on every
# ``pjrt-hub list``, and must not pull in numba to declare itself.
__getattr__, __dir__ = lazy_exports(__name__, {
    "CacheStats": ".compiler", "NumbaCompiler": ".compiler", "NumbaProgram": ".compiler",
    "default_cache_dir": ".compiler",
})
