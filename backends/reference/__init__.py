"""The reference backend: a pure-numpy interpreter of the StableHLO IR.

The living definition of op semantics in pjrt-hub, the oracle of the tests and the numpy-eager
baseline of ``bench``. :class:`ReferenceCompiler` plugs it into the host CPU runtime through the
``ProgramCompiler`` seam; :class:`Interpreter` runs a parsed module directly.
"""

from __future__ import annotations

from .compiler import ReferenceCompiler, ReferenceProgram, cost_analysis, output_aliases
from .interpreter import Execution, Interpreter, check_supported, run_module
from .registry import OPS, register, supported_ops

__all__ = [
    "OPS",
    "Execution",
    "Interpreter",
    "ReferenceCompiler",
    "ReferenceProgram",
    "check_supported",
    "cost_analysis",
    "output_aliases",
    "register",
    "run_module",
    "supported_ops",
]
