"""The reference backend: a pure-numpy interpreter of the StableHLO IR.

The living definition of op semantics in pjrt-hub, the oracle of the tests and the numpy-eager
baseline of ``bench``. :class:`ReferenceCompiler` plugs it into the host CPU runtime through the
``ProgramCompiler`` seam; :class:`Interpreter` runs a parsed module directly.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

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


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    if module == ".registry":
        importlib.import_module(".interpreter", __name__)  # importing it fills the op table
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(__all__) | set(globals()))
