"""StableHLO text as JAX emits it -> a small typed IR, shared by the backends that compile
programs themselves (numba_cpu, the reference interpreter).

``parse_module(text)`` reads the pretty or the generic MLIR form, ``verify(module)`` checks
types and shapes; :mod:`.ir` documents the IR both produce, and :mod:`.ops` defines each op
(attributes and defaults, custom form, verifier) for the parser, the verifier and the backends.
"""

from __future__ import annotations

from .ir import (
    Block,
    ComparisonDirection,
    ComparisonType,
    ConvDimensionNumbers,
    DotDimensionNumbers,
    FftType,
    Function,
    FunctionType,
    GatherDimensionNumbers,
    Module,
    Op,
    OpaqueAttr,
    Precision,
    RngAlgorithm,
    RngDistribution,
    ScatterDimensionNumbers,
    SymbolRef,
    TensorType,
    TokenType,
    Transpose,
    TupleType,
    Type,
    Value,
    element_dtype,
    frozen_mapping,
)
from .ops import OP_ATTRIBUTES

__all__ = [
    "OP_ATTRIBUTES",
    "Block",
    "ComparisonDirection",
    "ComparisonType",
    "ConvDimensionNumbers",
    "DotDimensionNumbers",
    "FftType",
    "Function",
    "FunctionType",
    "GatherDimensionNumbers",
    "Module",
    "Op",
    "OpaqueAttr",
    "Precision",
    "RngAlgorithm",
    "RngDistribution",
    "ScatterDimensionNumbers",
    "SymbolRef",
    "TensorType",
    "TokenType",
    "Transpose",
    "TupleType",
    "Type",
    "Value",
    "element_dtype",
    "frozen_mapping",
]

from .parser import parse_module  # noqa: E402
from .printer import format_module  # noqa: E402

__all__ += ["format_module", "parse_module"]

from .verify import verify  # noqa: E402
from .aliases import output_aliases  # noqa: E402

__all__ += ["output_aliases", "verify"]
