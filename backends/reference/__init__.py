"""The reference backend: a pure-numpy interpreter of the StableHLO IR.

The living definition of op semantics in pjrt-hub, the oracle of the tests and the numpy-eager
baseline of ``bench``. :class:`ReferenceCompiler` plugs it into the host CPU runtime through the
``ProgramCompiler`` seam; :class:`Interpreter` runs a parsed module directly.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pjrt_hub._lazy import lazy_exports

if TYPE_CHECKING:
    from .compiler import ReferenceCompiler, ReferenceProgram, cost_analysis, output_aliases
    from .interpreter import Execution, Interpreter, check_supported, run_module
    from .registry import OPS, register, supported_ops

# Imported on first use: the plugin module (``.plugin``) is imported by discovery on every
# ``pjrt-hub list``, and must not pull in the parser, the interpreter and scipy to declare itself.
_EXPORTS = {
    "ReferenceCompiler": ".compiler", "ReferenceProgram": ".compiler", "cost_analysis": ".compiler",
    "output_aliases": ".compiler",
    "Execution": ".interpreter", "Interpreter": ".interpreter", "check_supported": ".interpreter",
    "run_module": ".interpreter",
    "OPS": ".registry", "register": ".registry", "supported_ops": ".registry",
}

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

# Importing the interpreter fills the op table of ``.registry``.
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, import_first={".registry": ".interpreter"})
