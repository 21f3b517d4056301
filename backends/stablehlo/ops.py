"""One definition per op: every StableHLO, CHLO, func and sdy op pjrt-hub knows, in :data:`OPS`.

An :class:`OpDef` says what the spec says about an op and what pjrt-hub does with it: its
attributes (which ones the text must give, the defaults of the others), the reader of its custom
assembly form, the rule that verifies it, how many regions it carries and which element types
it takes. The other tables of op knowledge are derived from this one or checked against it:

* the parser reads an op's custom form with the reader :attr:`OpDef.form` names (one of
  :data:`.parser.forms.READERS`) and completes its attributes with
  :meth:`OpDef.complete_attributes`;
* the verifier runs the rule :attr:`OpDef.verifier` names (one of :data:`.verify.VERIFIERS`)
  and checks :attr:`OpDef.regions` and :attr:`OpDef.element_classes`;
* a backend's rule table may name only ops defined here (``tests/backends/stablehlo/test_ops.py``
  checks the reference interpreter's, numba_cpu's and the toy plugin's).

Adding an op is one :class:`OpDef` here, one rule in each backend that runs it, and one test.

What a duplicate is
-------------------
A table keyed by op name (this one, and each backend's rule table) binds a name once. Binding
the same name a second time raises :class:`DuplicateOpError` where it happens, even when the
second binding repeats the first: with two entries, which one is used depends on the order of
imports, and the other is dead code that no test exercises. One rule serving several ops (a
function registered for ``add`` and ``subtract``) is not a duplicate. Use :func:`add_rule` to
fill a rule table.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Iterable, Mapping, MutableMapping, Sequence, TypeVar

import numpy as np

from .ir import (
    ComparisonType,
    Precision,
    RngAlgorithm,
    RngDistribution,
    TensorType,
    Transpose,
    Value,
    frozen_mapping,
)

__all__ = [
    "OPS",
    "OP_ATTRIBUTES",
    "Attribute",
    "Default",
    "DuplicateOpError",
    "Form",
    "MissingAttributeError",
    "OpDef",
    "add_rule",
    "define",
    "undefined_ops",
]

#: ``value(attributes, operands)``: a default computed from the op (None: no default applies).
DefaultValue = Callable[[Mapping[str, Any], Sequence[Value]], Any]
#: ``normalize(value, attributes, operands)``: the canonical form of a value the text gave.
Normalize = Callable[[Any, Mapping[str, Any], Sequence[Value]], Any]

R = TypeVar("R")


class DuplicateOpError(ValueError):
    """An op name bound twice in one table (see the module docstring for what counts)."""


class MissingAttributeError(Exception):
    """An op lacks an attribute its definition requires (``args[0]`` names it); the parser
    turns it into a ParseError at the op."""


@dataclass(frozen=True, slots=True)
class Default:
    """The value an attribute takes when the text leaves it out (``jax.export`` omits every
    default)."""

    #: For people: ``"1s"``, ``"DEFAULT, DEFAULT"``, ``"from element type"``.
    describe: str
    value: DefaultValue


@dataclass(frozen=True, slots=True)
class Attribute:
    """One attribute of an op, as the IR holds it after parsing."""

    name: str
    #: The Python value the IR holds (see :mod:`.ir`): ``"int"``, ``"tuple[int]"``,
    #: ``"ComparisonDirection"``... A ``"tuple[int]"`` is read the same whether the text wrote
    #: ``array<i64: ...>`` or ``dense<...> : tensor<Nxi64>``.
    kind: str
    #: The parser refuses the op when the text leaves it out.
    required: bool = False
    default: Default | None = None
    #: Applied to the value (given or defaulted) to give its canonical form.
    normalize: Normalize | None = None
    #: Said after the default in :attr:`description` (``"normalised to rank-1"``).
    note: str = ""

    @property
    def description(self) -> str:
        """``"tuple[int] (default 1s)"``: the kind and the default, for people."""
        extra = [f"default {self.default.describe}"] if self.default is not None else []
        extra += [self.note] if self.note else []
        return f"{self.kind} ({', '.join(extra)})" if extra else self.kind

    @property
    def is_int_list(self) -> bool:
        return self.kind == "tuple[int]"


@dataclass(frozen=True, slots=True)
class Form:
    """An op's custom (pretty) assembly form: the parser's reader for it, by name (a key of
    :data:`.parser.forms.READERS`), and what a shared reader needs to know."""

    reader: str
    #: The word the text uses (``dims`` in ``stablehlo.transpose %x, dims = [1, 0]``).
    keyword: str | None = None
    #: The attribute the reader fills from what follows the keyword.
    attribute: str | None = None
    #: The enum the value after the keyword is read as.
    enum: type | None = None


@dataclass(frozen=True, slots=True)
class OpDef:
    """Everything pjrt-hub knows about one op, whatever reads it."""

    #: With its dialect: ``"stablehlo.add"``, ``"chlo.top_k"``, ``"func.call"``.
    name: str
    #: The rule the verifier runs (a key of :data:`.verify.VERIFIERS`); None: the backends
    #: judge the op alone.
    verifier: str | None = None
    attributes: tuple[Attribute, ...] = ()
    #: None: the generic form, or for a stablehlo/chlo op the common
    #: ``operands [, key = value]* attr-dict : types`` form.
    form: Form | None = None
    #: How many regions the op carries, when that number is fixed.
    regions: int | None = None
    #: The element types the first operand may have, by class: ``"f"`` float, ``"c"`` complex,
    #: ``"s"`` signed integer, ``"u"`` unsigned integer, ``"b"`` boolean; None: any.
    element_classes: str | None = None

    def attribute(self, name: str) -> Attribute | None:
        for attribute in self.attributes:
            if attribute.name == name:
                return attribute
        return None

    def complete_attributes(self, attrs: dict[str, Any], operands: Sequence[Value]) -> None:
        """Check that ``attrs`` has the required attributes, fill in the defaults, normalise.

        Raises :class:`MissingAttributeError` naming the first required attribute missing.
        Every default is computed (cheap) before any is stored, as ``dict.setdefault(k,
        compute())`` would, so that what a default needs is checked whether or not it is used.
        """
        for attribute in self.attributes:
            if attribute.required and attribute.name not in attrs:
                raise MissingAttributeError(attribute.name)
        for attribute in self.attributes:
            if attribute.default is not None:
                value = attribute.default.value(attrs, operands)
                if value is not None:
                    attrs.setdefault(attribute.name, value)
        for attribute in self.attributes:
            if attribute.normalize is not None and attribute.name in attrs:
                attrs[attribute.name] = attribute.normalize(attrs[attribute.name], attrs, operands)


def define(definitions: Iterable[OpDef]) -> Mapping[str, OpDef]:
    """The read-only table of ``definitions`` by name. Raises :class:`DuplicateOpError` for a
    name defined twice, ``ValueError`` for a definition that contradicts itself."""
    table: dict[str, OpDef] = {}
    for definition in definitions:
        names = [a.name for a in definition.attributes]
        if len(set(names)) != len(names):
            raise ValueError(f"{definition.name}: an attribute is listed twice in {names}")
        form = definition.form
        if form is not None and form.attribute is not None and form.attribute not in names:
            raise ValueError(f"{definition.name}: its form fills {form.attribute!r}, which is not "
                             f"one of its attributes {names}")
        add_rule(table, definition.name, definition, table="the op definitions")
    return frozen_mapping(table)


def add_rule(rules: MutableMapping[str, R], name: str, rule: R, *, table: str) -> None:
    """``rules[name] = rule``, refusing a name already bound (see the module docstring)."""
    if name in rules:
        raise DuplicateOpError(f"{table}: op {name} is registered twice; one op has one rule "
                               "(remove one of them)")
    rules[name] = rule


def undefined_ops(names: Iterable[str]) -> list[str]:
    """The names in ``names`` that :data:`OPS` does not define, sorted."""
    return sorted(set(names) - set(OPS))


# -- defaults -----------------------------------------------------------------------------------


def _readonly(array: np.ndarray) -> np.ndarray:
    array.flags.writeable = False
    return array


def _rank(operands: Sequence[Value]) -> int:
    """The rank of the first operand (0 when there is none or it is not a tensor)."""
    if operands and isinstance(operands[0].type, TensorType):
        return operands[0].type.rank
    return 0


def _spatial(attrs: Mapping[str, Any]) -> int:
    """The number of spatial dimensions of a convolution."""
    return len(attrs["dimension_numbers"].input_spatial_dimensions)


def _constant(value: Any, describe: str | None = None) -> Default:
    return Default(describe if describe is not None else str(value), lambda attrs, operands: value)


def _padding(rows: Callable[[Mapping[str, Any], Sequence[Value]], int]) -> Normalize:
    """A ``padding`` given as a dense literal, as an int64 [rows, 2] array."""
    def normalize(value: Any, attrs: Mapping[str, Any], operands: Sequence[Value]) -> Any:
        if isinstance(value, np.ndarray):
            return _readonly(np.asarray(value, dtype=np.int64).reshape(rows(attrs, operands), 2))
        return value
    return normalize


def _compare_type(attrs: Mapping[str, Any], operands: Sequence[Value]) -> ComparisonType | None:
    """The spec's comparison type for the operands' element type."""
    ty = operands[0].type if operands else None
    if not isinstance(ty, TensorType):
        return None
    if ty.is_float or ty.is_complex:
        return ComparisonType.FLOAT
    return ComparisonType.SIGNED if ty.is_signed else ComparisonType.UNSIGNED


def _no_notype(value: Any, attrs: Mapping[str, Any], operands: Sequence[Value]) -> Any:
    """``NOTYPE`` (what older exporters write) means the default."""
    if value == ComparisonType.NOTYPE:
        return _compare_type(attrs, operands) or value
    return value


def _boolean(value: Any, attrs: Mapping[str, Any], operands: Sequence[Value]) -> bool:
    return bool(value)


def _sort_dimension(value: Any, attrs: Mapping[str, Any], operands: Sequence[Value]) -> int:
    dim = int(value)
    return dim + _rank(operands) if dim < 0 else dim


def _window_reversal(value: Any, attrs: Mapping[str, Any], operands: Sequence[Value]) -> tuple[bool, ...]:
    return tuple(bool(v) for v in value)


_SPATIAL_ONES = Default("1s", lambda attrs, operands: (1,) * _spatial(attrs))
_RANK_ONES = Default("1s", lambda attrs, operands: (1,) * _rank(operands))
_PRECISION = _constant((Precision.DEFAULT, Precision.DEFAULT), "DEFAULT, DEFAULT")
_FALSE = _constant(False)


def _required(name: str, kind: str) -> Attribute:
    return Attribute(name, kind, required=True)


def _ints(name: str, *, required: bool = False, default: Default | None = None) -> Attribute:
    return Attribute(name, "tuple[int]", required=required, default=default)


def _flag(name: str) -> Attribute:
    return Attribute(name, "bool", default=_FALSE, normalize=_boolean)


def _window(*, dimensions_required: bool) -> tuple[Attribute, ...]:
    """The window attributes ``reduce_window`` and ``select_and_scatter`` share."""
    return (
        _ints("window_dimensions", required=dimensions_required,
              default=None if dimensions_required else _RANK_ONES),
        _ints("window_strides", default=_RANK_ONES),
    )


_WINDOW_PADDING = Attribute(
    "padding", "ndarray int64 [rank, 2]",
    default=Default("0s", lambda attrs, operands: _readonly(np.zeros((_rank(operands), 2), dtype=np.int64))),
    normalize=_padding(lambda attrs, operands: _rank(operands)))


# -- the table ----------------------------------------------------------------------------------


def _unary(name: str, element_classes: str | None = None) -> OpDef:
    """An elementwise op whose result has its operand's type."""
    return OpDef(name, verifier="unary", element_classes=element_classes)


def _binary(name: str, element_classes: str | None = None) -> OpDef:
    """An elementwise op of two operands of one type, with a result of that type."""
    return OpDef(name, verifier="binary", element_classes=element_classes)


def _dims(name: str, verifier: str | None, attribute: str, keyword: str, *, required: bool) -> OpDef:
    """``op %x, keyword = [...] : type``: one integer-list attribute after a keyword."""
    return OpDef(name, verifier=verifier, attributes=(_ints(attribute, required=required),),
                 form=Form("dims", keyword=keyword, attribute=attribute))


#: Every op pjrt-hub knows, by name.
OPS: Mapping[str, OpDef] = define([
    # -- elementwise, one operand ---------------------------------------------------------------
    _unary("stablehlo.negate", "sufc"),
    _unary("stablehlo.sign", "sfc"),
    OpDef("stablehlo.abs", verifier="abs", element_classes="sfc"),
    _unary("stablehlo.exponential", "fc"),
    _unary("stablehlo.exponential_minus_one", "fc"),
    _unary("stablehlo.log", "fc"),
    _unary("stablehlo.log_plus_one", "fc"),
    _unary("stablehlo.logistic", "fc"),
    _unary("stablehlo.sqrt", "fc"),
    _unary("stablehlo.rsqrt", "fc"),
    _unary("stablehlo.cbrt", "fc"),
    _unary("stablehlo.tanh", "fc"),
    _unary("stablehlo.tan", "fc"),
    _unary("stablehlo.sine", "fc"),
    _unary("stablehlo.cosine", "fc"),
    _unary("stablehlo.floor", "f"),
    _unary("stablehlo.ceil", "f"),
    _unary("stablehlo.round_nearest_afz", "f"),
    _unary("stablehlo.round_nearest_even", "f"),
    _unary("stablehlo.not", "sub"),
    _unary("stablehlo.popcnt", "su"),
    _unary("stablehlo.count_leading_zeros", "su"),
    OpDef("stablehlo.is_finite", verifier="to_bool", element_classes="f"),
    OpDef("stablehlo.real", verifier="real_imag", element_classes="fc"),
    OpDef("stablehlo.imag", verifier="real_imag", element_classes="fc"),
    OpDef("stablehlo.convert", verifier="convert"),
    OpDef("stablehlo.bitcast_convert", verifier="bitcast_convert"),
    OpDef("stablehlo.reduce_precision", verifier="unary", element_classes="f",
          attributes=(Attribute("exponent_bits", "int"), Attribute("mantissa_bits", "int")),
          form=Form("reduce_precision")),
    _unary("chlo.erf", "f"),
    _unary("chlo.erfc", "f"),
    _unary("chlo.erf_inv", "f"),
    _unary("chlo.lgamma", "f"),
    _unary("chlo.digamma", "f"),
    _unary("chlo.bessel_i1e", "f"),
    _unary("chlo.square", "sufc"),
    _unary("chlo.sinh", "fc"),
    _unary("chlo.cosh", "fc"),
    _unary("chlo.asin", "fc"),
    _unary("chlo.acos", "fc"),
    _unary("chlo.atan", "fc"),
    _unary("chlo.asinh", "fc"),
    _unary("chlo.acosh", "fc"),
    _unary("chlo.atanh", "fc"),
    _unary("chlo.conj", "fc"),
    OpDef("chlo.tan", element_classes="fc"),
    OpDef("chlo.is_inf", element_classes="f"),
    OpDef("chlo.is_pos_inf", element_classes="f"),
    OpDef("chlo.is_neg_inf", element_classes="f"),
    # -- elementwise, two or three operands -----------------------------------------------------
    _binary("stablehlo.add"),
    _binary("stablehlo.subtract", "sufc"),
    _binary("stablehlo.multiply"),
    _binary("stablehlo.divide", "sufc"),
    _binary("stablehlo.remainder", "sufc"),
    _binary("stablehlo.power", "sufc"),
    _binary("stablehlo.maximum"),
    _binary("stablehlo.minimum"),
    _binary("stablehlo.atan2", "fc"),
    _binary("stablehlo.and", "sub"),
    _binary("stablehlo.or", "sub"),
    _binary("stablehlo.xor", "sub"),
    _binary("stablehlo.shift_left", "su"),
    _binary("stablehlo.shift_right_arithmetic", "su"),
    _binary("stablehlo.shift_right_logical", "su"),
    _binary("chlo.next_after", "f"),
    _binary("chlo.polygamma", "f"),
    _binary("chlo.zeta", "f"),
    OpDef("stablehlo.complex", verifier="complex", form=Form("complex")),
    OpDef("stablehlo.compare", verifier="compare", form=Form("compare"), attributes=(
        _required("comparison_direction", "ComparisonDirection"),
        Attribute("compare_type", "ComparisonType", default=Default("from element type", _compare_type),
                  normalize=_no_notype),
    )),
    OpDef("stablehlo.select", verifier="select", form=Form("select")),
    OpDef("stablehlo.clamp", verifier="clamp"),
    OpDef("stablehlo.map", verifier="map", regions=1),
    # -- values and shapes ----------------------------------------------------------------------
    OpDef("stablehlo.constant", verifier="constant", form=Form("constant"),
          attributes=(_required("value", "ndarray"),)),
    OpDef("stablehlo.iota", verifier="iota", form=Form("iota"),
          attributes=(_required("iota_dimension", "int"),)),
    _dims("stablehlo.broadcast_in_dim", "broadcast_in_dim", "broadcast_dimensions", "dims", required=True),
    _dims("stablehlo.broadcast", None, "broadcast_sizes", "sizes", required=False),
    OpDef("stablehlo.reshape", verifier="reshape"),
    _dims("stablehlo.transpose", "transpose", "permutation", "dims", required=True),
    _dims("stablehlo.reverse", "reverse", "dimensions", "dims", required=True),
    OpDef("stablehlo.slice", verifier="slice", form=Form("slice"), attributes=(
        _ints("start_indices", required=True),
        _ints("limit_indices", required=True),
        _ints("strides", default=Default("all 1", lambda attrs, operands: (1,) * len(attrs["start_indices"]))),
    )),
    OpDef("stablehlo.dynamic_slice", verifier="dynamic_slice", form=Form("dynamic_slice"),
          attributes=(_ints("slice_sizes", required=True),)),
    OpDef("stablehlo.dynamic_update_slice", verifier="dynamic_update_slice"),
    OpDef("stablehlo.concatenate", verifier="concatenate", form=Form("concatenate"),
          attributes=(_required("dimension", "int"),)),
    OpDef("stablehlo.pad", verifier="pad", form=Form("pad"), attributes=(
        _ints("edge_padding_low", required=True),
        _ints("edge_padding_high", required=True),
        _ints("interior_padding",
              default=Default("0s", lambda attrs, operands: (0,) * len(attrs["edge_padding_low"]))),
    )),
    OpDef("stablehlo.get_dimension_size", form=Form("get_dimension_size")),
    OpDef("stablehlo.gather", verifier="gather", attributes=(
        _required("dimension_numbers", "GatherDimensionNumbers"),
        _ints("slice_sizes", required=True),
        _flag("indices_are_sorted"),
    )),
    OpDef("stablehlo.scatter", verifier="scatter", regions=1, attributes=(
        _required("scatter_dimension_numbers", "ScatterDimensionNumbers"),
        _flag("indices_are_sorted"),
        _flag("unique_indices"),
    )),
    # -- contractions and windows ---------------------------------------------------------------
    OpDef("stablehlo.dot_general", verifier="dot_general", form=Form("dot_general"), attributes=(
        _required("dot_dimension_numbers", "DotDimensionNumbers"),
        Attribute("precision_config", "tuple[Precision]", default=_PRECISION),
    )),
    OpDef("stablehlo.dot", verifier="dot", form=Form("dot"),
          attributes=(Attribute("precision_config", "tuple[Precision]", default=_PRECISION),)),
    OpDef("stablehlo.convolution", verifier="convolution", form=Form("convolution"), attributes=(
        _ints("window_strides", default=_SPATIAL_ONES),
        Attribute("padding", "ndarray int64 [spatial, 2]",
                  default=Default("0s", lambda attrs, operands: _readonly(
                      np.zeros((_spatial(attrs), 2), dtype=np.int64))),
                  normalize=_padding(lambda attrs, operands: _spatial(attrs))),
        _ints("lhs_dilation", default=_SPATIAL_ONES),
        _ints("rhs_dilation", default=_SPATIAL_ONES),
        Attribute("window_reversal", "tuple[bool]",
                  default=Default("False", lambda attrs, operands: (False,) * _spatial(attrs)),
                  normalize=_window_reversal),
        _required("dimension_numbers", "ConvDimensionNumbers"),
        Attribute("feature_group_count", "int", default=_constant(1)),
        Attribute("batch_group_count", "int", default=_constant(1)),
        Attribute("precision_config", "tuple[Precision]", default=_PRECISION),
    )),
    OpDef("stablehlo.reduce", verifier="reduce", regions=1, form=Form("reduce"),
          attributes=(_ints("dimensions", required=True),)),
    OpDef("stablehlo.reduce_window", verifier="reduce_window", regions=1, attributes=(
        *_window(dimensions_required=True),
        _ints("base_dilations", default=_RANK_ONES),
        _ints("window_dilations", default=_RANK_ONES),
        _WINDOW_PADDING,
    )),
    OpDef("stablehlo.select_and_scatter", regions=2,
          attributes=(*_window(dimensions_required=False), _WINDOW_PADDING)),
    OpDef("stablehlo.sort", verifier="sort", regions=1, attributes=(
        Attribute("dimension", "int", default=_constant(-1), normalize=_sort_dimension,
                  note="normalised to rank-1"),
        _flag("is_stable"),
    )),
    OpDef("stablehlo.fft", form=Form("fft"),
          attributes=(Attribute("fft_type", "FftType"), _ints("fft_length"))),
    OpDef("stablehlo.batch_norm_inference",
          attributes=(Attribute("epsilon", "float"), Attribute("feature_index", "int"))),
    OpDef("stablehlo.batch_norm_training",
          attributes=(Attribute("epsilon", "float"), Attribute("feature_index", "int"))),
    OpDef("stablehlo.batch_norm_grad",
          attributes=(Attribute("epsilon", "float"), Attribute("feature_index", "int"))),
    OpDef("chlo.top_k", verifier="top_k", form=Form("top_k"), attributes=(_required("k", "int"),)),
    # -- linear algebra (jnp.linalg off XLA's cpu platform) ---------------------------------------
    OpDef("stablehlo.cholesky", element_classes="fc", attributes=(_flag("lower"),)),
    OpDef("stablehlo.triangular_solve", element_classes="fc", attributes=(
        _flag("left_side"), _flag("lower"), _flag("unit_diagonal"),
        Attribute("transpose_a", "Transpose", default=_constant(Transpose.NO_TRANSPOSE)))),
    # -- random numbers -------------------------------------------------------------------------
    OpDef("stablehlo.rng_bit_generator", form=Form("keyword_enum", keyword="algorithm",
                                                   attribute="rng_algorithm", enum=RngAlgorithm),
          attributes=(Attribute("rng_algorithm", "RngAlgorithm", default=_constant(RngAlgorithm.DEFAULT)),)),
    OpDef("stablehlo.rng", form=Form("keyword_enum", keyword="distribution", attribute="rng_distribution",
                                     enum=RngDistribution),
          attributes=(Attribute("rng_distribution", "RngDistribution"),)),
    # -- control flow, calls, tuples --------------------------------------------------------------
    OpDef("stablehlo.while", verifier="while", regions=2, form=Form("while")),
    OpDef("stablehlo.if", verifier="if", regions=2),
    OpDef("stablehlo.case", verifier="case"),
    OpDef("stablehlo.return", form=Form("return")),
    OpDef("stablehlo.optimization_barrier", verifier="optimization_barrier", form=Form("optimization_barrier")),
    OpDef("stablehlo.tuple", verifier="tuple", form=Form("tuple")),
    OpDef("stablehlo.get_tuple_element", verifier="get_tuple_element", form=Form("get_tuple_element"),
          attributes=(_required("index", "int"),)),
    OpDef("stablehlo.custom_call", form=Form("custom_call"), attributes=(Attribute("call_target_name", "str"),)),
    OpDef("stablehlo.composite", form=Form("composite")),
    OpDef("func.call", verifier="call", form=Form("call"), attributes=(_required("callee", "SymbolRef"),)),
    OpDef("func.return", form=Form("return")),
    # -- collectives ----------------------------------------------------------------------------
    OpDef("stablehlo.all_reduce", verifier="all_reduce", regions=1),
    OpDef("stablehlo.reduce_scatter", verifier="reduce_scatter", regions=1),
    OpDef("stablehlo.all_gather", verifier="all_gather"),
    OpDef("stablehlo.all_to_all", verifier="all_to_all"),
    OpDef("stablehlo.collective_permute", verifier="collective_same_type"),
    OpDef("stablehlo.collective_broadcast", verifier="collective_same_type"),
    OpDef("stablehlo.replica_id", verifier="process_id"),
    OpDef("stablehlo.partition_id", verifier="process_id"),
    # -- Shardy ---------------------------------------------------------------------------------
    OpDef("sdy.manual_computation", form=Form("manual_computation")),
    OpDef("sdy.return", form=Form("return")),
    # Where a value is to be sharded: on one partition, the value itself.
    OpDef("sdy.sharding_constraint", verifier="optimization_barrier", form=Form("sharding_constraint")),
])

#: Attributes of each op after parsing, with the defaults the parser fills in when the text
#: omits them (no default: the attribute is required, or optional without one). Ops not listed
#: have no attributes pjrt-hub models. Derived from :data:`OPS`.
OP_ATTRIBUTES: Mapping[str, Mapping[str, str]] = frozen_mapping({
    definition.name: frozen_mapping({a.name: a.description for a in definition.attributes})
    for definition in OPS.values() if definition.attributes
})
