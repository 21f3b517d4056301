"""The in-memory form of a StableHLO program: what the parser builds and every backend reads.

A :class:`Module` holds :class:`Function` s by name; a function's body is a :class:`Block` of
:class:`Op` s; an op reads :class:`Value` s (its operands) and defines new ones (its results), and
may own regions (one :class:`Block` each: StableHLO regions never have more than one block).
Everything is a frozen dataclass, built once by the parser and then only read.

Reading the IR
--------------

* **Values** are compared by identity, never by name: the same spelling (``%cst_3``) may be
  defined in two sibling regions. Each value also has an ``id``, unique within its module, handy
  as a variable name for code generators (``v17``). ``value.type`` is a :class:`TensorType`
  (or a :class:`TupleType` / :class:`TokenType` for the few ops that use them).
* **Ops** are named with their dialect, always in the long form: ``"stablehlo.add"``,
  ``"chlo.erf"``, ``"func.call"``, ``"func.return"`` (the parser turns the ``call`` and ``return``
  spellings into these). ``op.attributes`` maps the attribute names of the StableHLO spec
  (``broadcast_dimensions``, ``dot_dimension_numbers``, ``comparison_direction``...) to Python
  values (see below), with the spec defaults filled in when the text left them out, so a backend
  never has to know which attributes JAX omits. Attributes the parser does not know are kept as
  they were written (:class:`OpaqueAttr`), never dropped.
* **Regions**: ``op.regions`` is a tuple of :class:`Block`; ``block.args`` are the region's
  arguments and ``block.ops[-1]`` is its terminator (``stablehlo.return`` inside StableHLO ops,
  ``func.return`` in functions). Regions of stablehlo ops may use values of enclosing blocks
  (case branches read the function's arguments directly).
* **Locations** are readable text (``"model.py:12:8 (dot_general)"``, ``"p['w1']"``) or ``None``.

Attribute values
----------------

=================================  ================================================================
MLIR attribute                     Python value
=================================  ================================================================
``dense<...> : tensor<...>``       ``numpy.ndarray`` of the tensor's shape and dtype (read-only)
``array<i64: 1, 2>``               ``tuple[int, ...]`` (``array<i1: ...>`` gives ``tuple[bool]``)
``1 : i64``, ``2.5 : f32``         ``int``, ``float``
``true`` / ``false``, unit attr    ``bool`` (a unit attribute is ``True``)
``"text"``                         ``str``
``@callee``                        :class:`SymbolRef`
``[a, b]``                         ``tuple``
``{k = v}``                        ``Mapping[str, value]``
a type (``function_type``)         :class:`TensorType`, :class:`FunctionType`...
``#stablehlo.dot<...>``            :class:`DotDimensionNumbers`
``#stablehlo.conv<...>``           :class:`ConvDimensionNumbers`
``#stablehlo.gather<...>``         :class:`GatherDimensionNumbers`
``#stablehlo.scatter<...>``        :class:`ScatterDimensionNumbers`
``#stablehlo<comparison_direction  :class:`ComparisonDirection` (a ``str`` enum: ``== "LT"`` works);
LT>`` and the other enums          likewise :class:`ComparisonType`, :class:`Precision`,
                                   :class:`RngAlgorithm`, :class:`RngDistribution`,
                                   :class:`FftType`, :class:`Transpose`
anything else                      :class:`OpaqueAttr` holding the text as written
=================================  ================================================================

The attributes each op carries (after defaults are filled in) are listed in :data:`OP_ATTRIBUTES`,
derived from the op definitions of :mod:`.ops`.
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass, field
from functools import lru_cache
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Iterator, Mapping, Union

import numpy as np

__all__ = [
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
    "OP_ATTRIBUTES",
    "OpaqueAttr",
    "Op",
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
    "as_tensor",
    "element_dtype",
    "frozen_mapping",
]


# -- types -----------------------------------------------------------------------------------

_FLOAT_TYPES = frozenset({
    "f16", "bf16", "f32", "f64", "f8E5M2", "f8E4M3FN", "f8E4M3", "f8E3M4", "f8E4M3FNUZ",
    "f8E5M2FNUZ", "f8E4M3B11FNUZ", "f8E8M0FNU", "f4E2M1FN",
})


@lru_cache(maxsize=None)
def element_dtype(element_type: str) -> np.dtype:
    """The numpy dtype of an MLIR element type (``"f32"``, ``"ui8"``, ``"bf16"``, ``"i1"``...).

    Uses the element-type table of :mod:`pjrt_hub.abi.types`, so bf16 and the 8-bit floats are
    the ml_dtypes types the runtime's buffers use. Raises ``KeyError`` for a type numpy cannot
    hold (the parser turns that into a ParseError).
    """
    from pjrt_hub.abi import InvalidArgument
    from pjrt_hub.abi.types import BufferType, mlir_element_type, to_numpy_dtype

    for kind in BufferType:
        try:
            if mlir_element_type(kind) == element_type:
                return to_numpy_dtype(kind)
        except InvalidArgument:  # kinds without an MLIR spelling or a numpy dtype
            continue
    # Spellings MLIR accepts besides the canonical ones.
    aliases = {"si8": "i8", "si16": "i16", "si32": "i32", "si64": "i64"}
    if element_type in aliases:
        return element_dtype(aliases[element_type])
    raise KeyError(element_type)


@dataclass(frozen=True, slots=True)
class TensorType:
    """``tensor<2x3xf32>``: a static shape and an element type in MLIR spelling."""

    shape: tuple[int, ...]
    #: ``"f32"``, ``"bf16"``, ``"i1"`` (bool), ``"i32"``, ``"ui32"``, ``"complex<f32>"``...
    element_type: str

    @property
    def dtype(self) -> np.dtype:
        return element_dtype(self.element_type)

    @property
    def rank(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        """Number of elements."""
        n = 1
        for d in self.shape:
            n *= d
        return n

    @property
    def is_float(self) -> bool:
        return self.element_type in _FLOAT_TYPES

    @property
    def is_complex(self) -> bool:
        return self.element_type.startswith("complex<")

    @property
    def is_bool(self) -> bool:
        return self.element_type == "i1"

    @property
    def is_integer(self) -> bool:
        """Signed or unsigned integer, bool excluded."""
        return self.is_signed or self.is_unsigned

    @property
    def is_signed(self) -> bool:
        e = self.element_type
        return (e.startswith("i") or e.startswith("si")) and e != "i1"

    @property
    def is_unsigned(self) -> bool:
        return self.element_type.startswith("ui")

    @property
    def bit_width(self) -> int:
        """The element's bits as the type names them: 4 for ``i4`` and ``f4E2M1FN``, whose
        numpy dtypes take a byte each."""
        if self.is_bool:
            return 1
        digits = re.match(r"(?:si|ui|i|bf|f)(\d+)", self.element_type)
        if digits and not self.is_complex:
            return int(digits.group(1))
        return self.dtype.itemsize * 8

    def with_shape(self, shape: tuple[int, ...]) -> "TensorType":
        return TensorType(tuple(shape), self.element_type)

    def with_element_type(self, element_type: str) -> "TensorType":
        return TensorType(self.shape, element_type)

    def __str__(self) -> str:
        dims = "".join(f"{d}x" for d in self.shape)
        return f"tensor<{dims}{self.element_type}>"


@dataclass(frozen=True, slots=True)
class TupleType:
    """``tuple<tensor<f32>, tensor<i32>>``."""

    types: tuple["Type", ...]

    def __str__(self) -> str:
        return "tuple<" + ", ".join(str(t) for t in self.types) + ">"


@dataclass(frozen=True, slots=True)
class TokenType:
    """``!stablehlo.token``: orders side effects; carries no data."""

    def __str__(self) -> str:
        return "!stablehlo.token"


Type = Union[TensorType, TupleType, TokenType]


def as_tensor(t: Type) -> TensorType:
    """``t`` where it must be a tensor type (see :attr:`Value.tensor_type`)."""
    if not isinstance(t, TensorType):
        raise TypeError(f"{t} is not a tensor type")
    return t


@dataclass(frozen=True, slots=True)
class FunctionType:
    """``(tensor<f32>, tensor<4xf32>) -> tensor<4xf32>`` as an attribute value."""

    inputs: tuple[Type, ...]
    results: tuple[Type, ...]

    def __str__(self) -> str:
        ins = ", ".join(str(t) for t in self.inputs)
        outs = ", ".join(str(t) for t in self.results)
        return f"({ins}) -> ({outs})"


# -- attribute values ------------------------------------------------------------------------


def frozen_mapping(items: Mapping[str, Any] | None = None) -> Mapping[str, Any]:
    """A read-only view of a fresh dict, the mapping type used throughout the IR."""
    return MappingProxyType(dict(items or {}))


_EMPTY: Mapping[str, Any] = frozen_mapping()


@dataclass(frozen=True, slots=True)
class SymbolRef:
    """``@name``: a reference to a function (``callee``) or another symbol."""

    name: str

    def __str__(self) -> str:
        return "@" + self.name


@dataclass(frozen=True, slots=True)
class OpaqueAttr:
    """An attribute the parser has no model for, kept as written (``#foo.bar<...>``)."""

    text: str

    def __str__(self) -> str:
        return self.text


class _StrEnum(str, enum.Enum):
    def __str__(self) -> str:
        return self.value


class ComparisonDirection(_StrEnum):
    EQ = "EQ"
    NE = "NE"
    GE = "GE"
    GT = "GT"
    LE = "LE"
    LT = "LT"


class ComparisonType(_StrEnum):
    """How ``compare`` orders its operands. ``NOTYPE`` is never stored: the parser replaces a
    missing type by the spec's default for the element type."""

    NOTYPE = "NOTYPE"
    FLOAT = "FLOAT"
    TOTALORDER = "TOTALORDER"
    SIGNED = "SIGNED"
    UNSIGNED = "UNSIGNED"


class Precision(_StrEnum):
    DEFAULT = "DEFAULT"
    HIGH = "HIGH"
    HIGHEST = "HIGHEST"


class RngAlgorithm(_StrEnum):
    DEFAULT = "DEFAULT"
    THREE_FRY = "THREE_FRY"
    PHILOX = "PHILOX"


class RngDistribution(_StrEnum):
    UNIFORM = "UNIFORM"
    NORMAL = "NORMAL"


class FftType(_StrEnum):
    FFT = "FFT"
    IFFT = "IFFT"
    RFFT = "RFFT"
    IRFFT = "IRFFT"


class Transpose(_StrEnum):
    NO_TRANSPOSE = "NO_TRANSPOSE"
    TRANSPOSE = "TRANSPOSE"
    ADJOINT = "ADJOINT"


@dataclass(frozen=True, slots=True)
class DotDimensionNumbers:
    """``#stablehlo.dot<...>``. The result of ``dot_general`` is laid out as batch dimensions,
    then the free dimensions of lhs, then the free dimensions of rhs."""

    lhs_batching_dimensions: tuple[int, ...] = ()
    rhs_batching_dimensions: tuple[int, ...] = ()
    lhs_contracting_dimensions: tuple[int, ...] = ()
    rhs_contracting_dimensions: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class ConvDimensionNumbers:
    """``#stablehlo.conv<[b, 0, 1, f]x[0, 1, i, o]->[b, 0, 1, f]>``: which dimension of input,
    kernel and output plays which role. Spatial dimension lists are in spatial order (0, 1...)."""

    input_batch_dimension: int
    input_feature_dimension: int
    input_spatial_dimensions: tuple[int, ...]
    kernel_input_feature_dimension: int
    kernel_output_feature_dimension: int
    kernel_spatial_dimensions: tuple[int, ...]
    output_batch_dimension: int
    output_feature_dimension: int
    output_spatial_dimensions: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class GatherDimensionNumbers:
    """``#stablehlo.gather<...>``, including the batching dimensions of newer StableHLO."""

    offset_dims: tuple[int, ...] = ()
    collapsed_slice_dims: tuple[int, ...] = ()
    operand_batching_dims: tuple[int, ...] = ()
    start_indices_batching_dims: tuple[int, ...] = ()
    start_index_map: tuple[int, ...] = ()
    index_vector_dim: int = 0


@dataclass(frozen=True, slots=True)
class ScatterDimensionNumbers:
    """``#stablehlo.scatter<...>``, including the batching dimensions of newer StableHLO."""

    update_window_dims: tuple[int, ...] = ()
    inserted_window_dims: tuple[int, ...] = ()
    input_batching_dims: tuple[int, ...] = ()
    scatter_indices_batching_dims: tuple[int, ...] = ()
    scatter_dims_to_operand_dims: tuple[int, ...] = ()
    index_vector_dim: int = 0


# -- the program -----------------------------------------------------------------------------


@dataclass(frozen=True, eq=False, slots=True)
class Value:
    """An SSA value: a function or block argument, or an op result. Compared by identity."""

    #: The name as written in the text (``%arg0``, ``%cst_2``, ``%1#0``); for messages only.
    name: str
    type: Type
    #: Unique within the module; stable across parses of the same text.
    id: int

    @property
    def tensor_type(self) -> TensorType:
        """``type`` where it must be a tensor: every operand and result except those of the tuple
        and token ops, as the verifier has checked, so a lowering that reads a shape or an element
        type asks for this instead of narrowing ``type`` at each use."""
        if not isinstance(self.type, TensorType):
            raise TypeError(f"{self.name} is a {self.type}, not a tensor")
        return self.type

    def __repr__(self) -> str:
        return f"Value({self.name}: {self.type})"


@dataclass(frozen=True, eq=False, slots=True)
class Block:
    """The single block of a region or function body. ``ops[-1]`` is the terminator."""

    args: tuple[Value, ...]
    ops: tuple["Op", ...]

    @property
    def terminator(self) -> "Op":
        return self.ops[-1]

    def walk(self) -> Iterator["Op"]:
        """Every op of this block and of the regions nested in it, outer op first."""
        for op in self.ops:
            yield from op.walk()


@dataclass(frozen=True, eq=False, slots=True)
class Op:
    """One operation."""

    #: Full name with dialect: ``"stablehlo.add"``, ``"chlo.top_k"``, ``"func.call"``.
    name: str
    operands: tuple[Value, ...]
    results: tuple[Value, ...]
    #: Spec attribute names -> values (see the module docstring); defaults filled in.
    attributes: Mapping[str, Any] = field(default_factory=frozen_mapping)
    #: One block per region: ``reduce`` has its body, ``while`` has (cond, body),
    #: ``case`` one per branch, ``sort`` its comparator, ``scatter`` its update computation.
    regions: tuple[Block, ...] = ()
    location: str | None = None
    #: Where the op sits in the text it was parsed from (``"line 7, column 10"``): what a user can
    #: act on when the program carries no debug locations.
    source: str | None = None

    @property
    def where(self) -> str | None:
        """The debug location if the program has one, else the place in the text."""
        return self.location or self.source

    @property
    def result(self) -> Value:
        """The only result (for single-result ops)."""
        if len(self.results) != 1:
            raise ValueError(f"{self.name} has {len(self.results)} results, not one")
        return self.results[0]

    @property
    def operand_types(self) -> tuple[Type, ...]:
        return tuple(v.type for v in self.operands)

    @property
    def result_types(self) -> tuple[Type, ...]:
        return tuple(v.type for v in self.results)

    @property
    def dialect(self) -> str:
        return self.name.split(".", 1)[0]

    def attr(self, name: str, default: Any = None) -> Any:
        return self.attributes.get(name, default)

    def walk(self) -> Iterator["Op"]:
        """This op, then every op nested in its regions."""
        yield self
        for region in self.regions:
            yield from region.walk()

    @property
    def call_target(self) -> str | None:
        """A custom call's target (``ApproxTopK``), else None: "unsupported op" messages name it."""
        target = self.attributes.get("call_target_name") if self.name == "stablehlo.custom_call" else None
        return str(target) if target else None

    def describe(self) -> str:
        """``stablehlo.add (%3) at model.py:4:2`` for error messages."""
        res = ", ".join(v.name for v in self.results)
        where = f" at {self.where}" if self.where else ""
        return f"{self.name}{f' ({res})' if res else ''}{where}"


@dataclass(frozen=True, eq=False, slots=True)
class Function:
    """A ``func.func``: ``@main`` or a private helper reached through ``func.call``."""

    name: str
    #: ``"public"`` or ``"private"`` (``"nested"`` is accepted as written).
    visibility: str
    #: The body's block arguments, i.e. the parameters; ``args[i].type`` is the i-th input type.
    args: tuple[Value, ...]
    #: Per argument: ``jax.buffer_donor``, ``tf.aliasing_output``, ``mhlo.sharding``...
    arg_attrs: tuple[Mapping[str, Any], ...]
    result_types: tuple[Type, ...]
    #: Per result: ``jax.result_info`` (the pytree path as text) and the like.
    result_attrs: tuple[Mapping[str, Any], ...]
    body: Block
    #: Other attributes of the function (unusual; kept for completeness).
    attributes: Mapping[str, Any] = field(default_factory=frozen_mapping)
    location: str | None = None
    #: Locations of the arguments (``"p['w1']"``, ``"x"``) when the text carried them.
    arg_locations: tuple[str | None, ...] = ()

    @property
    def arg_types(self) -> tuple[Type, ...]:
        return tuple(v.type for v in self.args)

    @property
    def type(self) -> FunctionType:
        return FunctionType(self.arg_types, self.result_types)

    def walk(self) -> Iterator[Op]:
        return self.body.walk()

    def values(self) -> Iterator[Value]:
        """Every value the function defines: its arguments, op results and region arguments
        (a pass that builds new values numbers them above these)."""
        yield from self.args
        for op in self.walk():
            yield from op.results
            for region in op.regions:
                yield from region.args


@dataclass(frozen=True, eq=False, slots=True)
class Module:
    """A ``module``: its functions by name (in text order) and its attributes."""

    #: ``jit_f`` for ``module @jit_f``; ``None`` for an anonymous module.
    name: str | None
    functions: Mapping[str, Function]
    #: ``mhlo.num_replicas``, ``mhlo.num_partitions``, ``jax.uses_shape_polymorphism``,
    #: ``mhlo.input_output_alias``... as written.
    attributes: Mapping[str, Any] = field(default_factory=frozen_mapping)
    location: str | None = None

    @property
    def num_replicas(self) -> int:
        return int(self.attributes.get("mhlo.num_replicas", 1))

    @property
    def num_partitions(self) -> int:
        return int(self.attributes.get("mhlo.num_partitions", 1))

    @property
    def main(self) -> Function:
        """The entry point, ``@main``. There is no fallback to another function: XLA compiles
        ``@main`` only, and running a different function than the one the user meant would be
        a silent wrong answer."""
        if "main" in self.functions:
            return self.functions["main"]
        from pjrt_hub.abi import CompileError

        raise CompileError(
            "module has no @main function, the entry point XLA and pjrt-hub run; functions: "
            f"{', '.join('@' + n for n in self.functions) or '(none)'}"
        )

    def walk(self) -> Iterator[Op]:
        for fn in self.functions.values():
            yield from fn.walk()


if TYPE_CHECKING:  # at run time __getattr__ below gives it
    from .ops import OP_ATTRIBUTES as OP_ATTRIBUTES


def __getattr__(name: str) -> Any:
    # OP_ATTRIBUTES is derived from the op definitions (.ops), which are built on this module:
    # read on first use, so that importing the IR does not import the definitions.
    if name == "OP_ATTRIBUTES":
        from .ops import OP_ATTRIBUTES

        return OP_ATTRIBUTES
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
