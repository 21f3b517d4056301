"""numba_cpu: the built-in CPU backend, compiling StableHLO to numba.

``NumbaCompiler`` is the :class:`~pjrt_hub.backends.cpu_runtime.compiler.ProgramCompiler` the
host runtime plugs in: it parses the program, inlines calls, lowers the function to the source
of one numba function (elementwise chains fused into loops, BLAS for ``dot_general``, control
flow inside the compiled code), compiles it and caches the result on disk.
"""

from __future__ import annotations

from .compiler import CacheStats, NumbaCompiler, NumbaProgram, default_cache_dir

__all__ = ["CacheStats", "NumbaCompiler", "NumbaProgram", "default_cache_dir", "supported_ops"]


def supported_ops() -> list[str]:
    """Names of the ops this backend lowers."""
    from . import kernels, rules  # noqa: F401
    from .codegen import supported_ops as _ops

    return _ops()
