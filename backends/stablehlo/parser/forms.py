"""Op forms: the custom (pretty) assembly of each op, and what the syntax of one op gives.

Each op definition (:data:`..ops.OPS`) names the reader of its custom form
(:attr:`..ops.Form.reader`); :data:`READERS` holds the readers by those names and
:data:`PRETTY` the reader of each op, derived from the definitions. A ``stablehlo``, ``chlo`` or
``mhlo`` op without a custom form is read with the common ``operands [, key = value]*
attr-dict : types`` form (:meth:`OpFormReader._read_default`). A reader returns :class:`OpParts`:
the op's operands (as :class:`Use` s, resolved later), types, attributes and regions, which
the structure reader turns into an :class:`~..ir.Op`.
"""

from __future__ import annotations

import enum
import functools
import re
from abc import abstractmethod
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Callable, Mapping

import numpy as np

from ..ir import (
    Block,
    ComparisonDirection,
    ComparisonType,
    DotDimensionNumbers,
    FftType,
    FunctionType,
    Op,
    OpaqueAttr,
    Precision,
    SymbolRef,
    TensorType,
    TupleType,
    Type,
    Value,
    frozen_mapping,
)
from ..ops import OPS, Form
from .literals import readonly
from .locations import LocationReader
from .type_syntax import SCALAR_TYPE

__all__ = ["PRETTY", "READERS", "OpFormReader", "OpParts", "Use"]

#: The format of ``reduce_precision``: ``e5m10`` (exponent and mantissa bits).
_FORMAT = re.compile(r"e([0-9]+)m([0-9]+)")


@dataclass
class Use:
    """A use of an SSA value (``%x``, ``%r#1``) where the text made it, resolved later."""

    name: str
    index: int | None
    pos: int


@dataclass
class OpParts:
    """What the syntax of one op gave, before operands are resolved and results defined."""

    name: str
    operands: list[Use]
    operand_types: list[Type] | None
    result_types: list[Type]
    attributes: dict[str, Any] = field(default_factory=dict)
    regions: list[Block] = field(default_factory=list)
    location: str | None = None
    location_parsed: bool = False


class OpFormReader(LocationReader):
    """Reads the custom forms of ops (see the module docstring)."""

    # Defined by the structure reader.

    @abstractmethod
    def _new_value(self, name: str, ty: Type) -> Value: ...

    @abstractmethod
    def _parse_region(self, arg_specs: list[tuple[str, Type, int]] | None, *, isolated: bool = False,
                      arg_locations: list | None = None) -> Block: ...

    @abstractmethod
    def _parse_uses(self) -> tuple[list[Use], bool]: ...

    @abstractmethod
    def _expect_use(self) -> Use: ...

    # -- shared pieces -------------------------------------------------------------------------

    def _signature(self) -> tuple[str, list[Any], list[Type]]:
        """After ':': either a function type ``(A, B) -> R`` / ``A -> R`` (chlo) or a list of
        types ``A, B``. Returns ("fn", inputs, results) or ("list", types, [])."""
        cur = self.cur
        cur.skip()
        if cur.peek("("):
            fn = self.parse_type()
            return "fn", list(fn.inputs), list(fn.results)
        types = [self.parse_value_type()]
        while cur.accept(","):
            types.append(self.parse_value_type())
        if cur.accept("->"):
            return "fn", types, self._parse_result_types()
        return "list", types, []

    def _same_type_signature(self, name: str, n_operands: int) -> tuple[list[Type], list[Type]]:
        """``: T`` (every operand and the result have type T) or a function type."""
        kind, types, results = self._signature()
        if kind == "fn":
            return types, results
        if len(types) != 1:
            raise self.cur.error(f"{name}: expected one type or a function type after ':'")
        return types * n_operands, types

    def _opt_attr_dict(self) -> dict[str, Any]:
        return self.parse_attribute_dict() if self.cur.peek("{") else {}

    def _read_default(self, name: str, pos: int) -> OpParts:
        """``operands [, key = value]* [attr-dict] : types``: the shape most custom forms
        share, so that ops without a dedicated parser still parse (and fail later, clearly,
        if no backend supports them)."""
        cur = self.cur
        uses, trailing = self._parse_uses()
        attrs: dict[str, Any] = {}
        while trailing:
            key_pos = cur.pos
            key = cur.optional_bare_id()
            if key is None or not cur.accept("="):
                raise cur.error(f"expected an operand or 'name = value' after ',' in {name}", key_pos)
            attrs[key] = self._parse_keyword_value()
            trailing = cur.accept(",")
        attrs.update(self._opt_attr_dict())
        self.cur.expect(":", f"':' and the types of {name}")
        ins, outs = self._same_type_signature(name, len(uses))
        return OpParts(name, uses, ins, outs, attrs)

    def _parse_keyword_value(self) -> Any:
        """The value in ``key = value`` of a custom form: an attribute, or a bare word (an
        enum value such as ``DEFAULT``), kept as text."""
        cur = self.cur
        word = re.compile(r"[A-Za-z_][A-Za-z0-9_]*").match(self.text, cur.pos) if not cur.at_end() else None
        if word and word.group(0) not in ("true", "false", "dense", "array", "dense_resource", "unit") \
                and not SCALAR_TYPE.match(word.group(0)) and word.group(0) not in ("tensor", "tuple", "complex"):
            cur.pos = word.end()
            return word.group(0)
        return self.parse_attribute(typed=False)

    def _enum_word(self, enum_type: type[enum.Enum]) -> Any:
        cur = self.cur
        pos = cur.pos
        word = cur.bare_id(f"a {enum_type.__name__} value")
        try:
            return enum_type(word)
        except ValueError:
            allowed = ", ".join(e.value for e in enum_type)
            raise cur.error(f"unknown {enum_type.__name__} '{word}' (expected one of {allowed})", pos) from None

    def _parse_precision_list(self) -> tuple[Precision, ...]:
        cur = self.cur
        cur.expect("[")
        values: list[Precision] = []
        while not cur.accept("]"):
            if values:
                cur.expect(",")
            values.append(self._enum_word(Precision))
        return tuple(values)

    def _x_int_list(self) -> tuple[int, ...]:
        self.cur.expect_keyword("x")
        return self._parse_int_list()

    def _precision_and_algorithm(self, attrs: dict[str, Any]) -> None:
        cur = self.cur
        while cur.accept(","):
            if cur.accept_keyword("precision"):
                cur.expect("=")
                attrs["precision_config"] = self._parse_precision_list()
            elif cur.accept_keyword("algorithm"):
                cur.expect("=")
                attrs["algorithm"] = OpaqueAttr("#stablehlo.dot_algorithm" + cur.balanced("<", ">"))
            else:
                raise cur.expected("'precision = [...]' or 'algorithm = <...>'")

    # -- one reader per form ---------------------------------------------------------------------

    def _read_constant(self, name: str, pos: int) -> OpParts:
        cur = self.cur
        if cur.accept("("):
            cur.expect(")")
            attrs = self._parse_properties()
            attrs.update(self._opt_attr_dict())
            cur.expect(":")
            fn = self.parse_type()
            if not isinstance(fn, FunctionType) or fn.inputs or len(fn.results) != 1:
                raise cur.error("stablehlo.constant: expected '() -> tensor<...>'", pos)
            return OpParts(name, [], [], list(fn.results), attrs)
        attrs = self._opt_attr_dict()
        if cur.peek_keyword("dense"):
            value, ty = self._parse_dense()
        elif cur.peek_keyword("dense_resource"):
            value, ty = self._parse_dense_resource()
        else:
            raise cur.expected("a dense literal like 'dense<1.0> : tensor<f32>'")
        attrs["value"] = value
        return OpParts(name, [], [], [ty], attrs)

    def _read_iota(self, name: str, pos: int) -> OpParts:
        cur = self.cur
        cur.expect_keyword("dim")
        cur.expect("=")
        dim = cur.expect_integer("the iota dimension")
        attrs = self._opt_attr_dict()
        attrs["iota_dimension"] = dim
        cur.expect(":")
        return OpParts(name, [], [], [self.parse_value_type()], attrs)

    def _read_compare(self, name: str, pos: int) -> OpParts:
        cur = self.cur
        attrs: dict[str, Any] = {"comparison_direction": self._enum_word(ComparisonDirection)}
        cur.expect(",")
        lhs = self._expect_use()
        cur.expect(",")
        rhs = self._expect_use()
        if cur.accept(","):
            attrs["compare_type"] = self._enum_word(ComparisonType)
        attrs.update(self._opt_attr_dict())
        cur.expect(":")
        ins, outs = self._same_type_signature(name, 2)
        return OpParts(name, [lhs, rhs], ins, outs, attrs)

    def _read_select(self, name: str, pos: int) -> OpParts:
        uses, trailing = self._parse_uses()
        attrs = self._opt_attr_dict()
        self.cur.expect(":")
        kind, types, results = self._signature()
        if kind == "fn":
            return OpParts(name, uses, types, results, attrs)
        if len(types) != 2:
            raise self.cur.error("stablehlo.select: expected 'pred_type, value_type' or a function type")
        return OpParts(name, uses, [types[0], types[1], types[1]], [types[1]], attrs)

    def _read_dims(self, name: str, pos: int, *, attribute: str, keyword: str) -> OpParts:
        """``%x, keyword = [1, 0] : type``: an integer list after a keyword, into ``attribute``."""
        cur = self.cur
        operand = self._expect_use()
        cur.expect(",")
        cur.expect_keyword(keyword)
        cur.expect("=")
        values = self._parse_int_list()
        attrs = self._opt_attr_dict()
        attrs[attribute] = values
        cur.expect(":")
        ins, outs = self._same_type_signature(name, 1)
        return OpParts(name, [operand], ins, outs, attrs)

    def _read_concatenate(self, name: str, pos: int) -> OpParts:
        cur = self.cur
        uses, trailing = self._parse_uses()
        if not trailing:
            raise cur.expected("',' and 'dim = N' after the operands of stablehlo.concatenate")
        cur.expect_keyword("dim")
        cur.expect("=")
        dim = cur.expect_integer("the concatenation dimension")
        attrs = self._opt_attr_dict()
        attrs["dimension"] = dim
        cur.expect(":")
        ins, outs = self._same_type_signature(name, len(uses))
        return OpParts(name, uses, ins, outs, attrs)

    def _read_dynamic_slice(self, name: str, pos: int) -> OpParts:
        cur = self.cur
        uses, trailing = self._parse_uses()
        if not trailing:
            raise cur.expected("',' and 'sizes = [...]' after the operands of stablehlo.dynamic_slice")
        cur.expect_keyword("sizes")
        cur.expect("=")
        sizes = self._parse_int_list()
        attrs = self._opt_attr_dict()
        attrs["slice_sizes"] = sizes
        cur.expect(":")
        ins, outs = self._same_type_signature(name, len(uses))
        return OpParts(name, uses, ins, outs, attrs)

    def _read_pad(self, name: str, pos: int) -> OpParts:
        cur = self.cur
        operand = self._expect_use()
        cur.expect(",")
        value = self._expect_use()
        attrs: dict[str, Any] = {}
        for keyword, attr in (("low", "edge_padding_low"), ("high", "edge_padding_high"),
                              ("interior", "interior_padding")):
            cur.expect(",")
            cur.expect_keyword(keyword)
            cur.expect("=")
            attrs[attr] = self._parse_int_list()
        attrs.update(self._opt_attr_dict())
        cur.expect(":")
        ins, outs = self._same_type_signature(name, 2)
        return OpParts(name, [operand, value], ins, outs, attrs)

    def _read_slice(self, name: str, pos: int) -> OpParts:
        cur = self.cur
        operand = self._expect_use()
        attrs: dict[str, Any] = {}
        if cur.accept("["):
            start, limit, strides = [], [], []
            if not cur.accept("]"):
                while True:
                    start.append(cur.expect_integer("a slice start"))
                    cur.expect(":")
                    limit.append(cur.expect_integer("a slice limit"))
                    strides.append(cur.expect_integer("a slice stride") if cur.accept(":") else 1)
                    if cur.accept("]"):
                        break
                    cur.expect(",", "',' or ']' in the slice ranges")
            attrs.update(start_indices=tuple(start), limit_indices=tuple(limit), strides=tuple(strides))
        attrs.update(self._opt_attr_dict())
        cur.expect(":")
        ins, outs = self._same_type_signature(name, 1)
        return OpParts(name, [operand], ins, outs, attrs)

    def _read_dot_general(self, name: str, pos: int) -> OpParts:
        cur = self.cur
        lhs = self._expect_use()
        cur.expect(",")
        rhs = self._expect_use()
        cur.expect(",")
        batching: tuple[tuple[int, ...], tuple[int, ...]] = ((), ())
        if cur.accept_keyword("batching_dims"):
            cur.expect("=")
            batching = (self._parse_int_list(), self._x_int_list())
            cur.expect(",")
        cur.expect_keyword("contracting_dims")
        cur.expect("=")
        contracting = (self._parse_int_list(), self._x_int_list())
        attrs: dict[str, Any] = {"dot_dimension_numbers": DotDimensionNumbers(
            batching[0], batching[1], contracting[0], contracting[1])}
        self._precision_and_algorithm(attrs)
        attrs.update(self._opt_attr_dict())
        cur.expect(":")
        ins, outs = self._same_type_signature(name, 2)
        return OpParts(name, [lhs, rhs], ins, outs, attrs)

    def _read_dot(self, name: str, pos: int) -> OpParts:
        cur = self.cur
        lhs = self._expect_use()
        cur.expect(",")
        rhs = self._expect_use()
        attrs: dict[str, Any] = {}
        self._precision_and_algorithm(attrs)
        attrs.update(self._opt_attr_dict())
        cur.expect(":")
        ins, outs = self._same_type_signature(name, 2)
        return OpParts(name, [lhs, rhs], ins, outs, attrs)

    def _read_convolution(self, name: str, pos: int) -> OpParts:
        cur = self.cur
        cur.expect("(")
        uses, _ = self._parse_uses()
        cur.expect(")")
        cur.expect_keyword("dim_numbers")
        cur.expect("=")
        attrs: dict[str, Any] = {"dimension_numbers": self._parse_conv_dimensions()}
        cur.expect(",")
        cur.expect_keyword("window")
        cur.expect("=")
        cur.expect("{")
        names = {"stride": "window_strides", "pad": "padding", "lhs_dilate": "lhs_dilation",
                 "rhs_dilate": "rhs_dilation", "reverse": "window_reversal"}
        while not cur.accept("}"):
            key_pos = cur.pos
            key = cur.bare_id("a window attribute (stride, pad, lhs_dilate, rhs_dilate, reverse)")
            if key not in names:
                raise cur.error(f"unknown window attribute '{key}' (expected one of "
                                f"{', '.join(names)})", key_pos)
            cur.expect("=")
            if key == "pad":
                cur.expect("[")
                rows: list[tuple[int, ...]] = []
                while not cur.accept("]"):
                    if rows:
                        cur.expect(",")
                    row = self._parse_int_list()
                    if len(row) != 2:
                        raise cur.error(f"window pad entries are [low, high] pairs, got {list(row)}")
                    rows.append(row)
                attrs["padding"] = readonly(np.array(rows, dtype=np.int64).reshape(len(rows), 2))
            elif key == "reverse":
                attrs["window_reversal"] = tuple(bool(v) for v in self._parse_int_list())
            else:
                attrs[names[key]] = self._parse_int_list()
            if not cur.accept(","):
                cur.expect("}", "',' or '}' in the window attributes")
                break
        attrs.update(self._opt_attr_dict())
        cur.expect(":")
        ins, outs = self._same_type_signature(name, len(uses))
        return OpParts(name, uses, ins, outs, attrs)

    def _read_reduce(self, name: str, pos: int) -> OpParts:
        cur = self.cur
        inputs: list[Use] = []
        inits: list[Use] = []
        while True:
            cur.expect("(", "'(' before '%input init: %init'")
            inputs.append(self._expect_use())
            cur.expect_keyword("init")
            cur.expect(":")
            inits.append(self._expect_use())
            cur.expect(")")
            if not cur.accept(","):
                break
        inner_name = None
        if cur.accept_keyword("applies"):
            inner_name = cur.string() or cur.bare_id("the reduction op name")
        cur.expect_keyword("across")
        cur.expect_keyword("dimensions")
        cur.expect("=")
        dims = self._parse_int_list()
        attrs = self._opt_attr_dict()
        attrs["dimensions"] = dims
        cur.expect(":")
        fn = self.parse_type()
        if not isinstance(fn, FunctionType) or len(fn.inputs) != len(inputs) * 2:
            raise cur.error("stablehlo.reduce: expected a function type with the inputs and "
                            "the init values", pos)
        if inner_name is not None:
            location = self._optional_location()
            first = fn.inputs[0]
            if not isinstance(first, TensorType):
                raise cur.error("stablehlo.reduce: inputs must be tensors", pos)
            scalar = TensorType((), first.element_type)
            lhs = self._new_value("%lhs", scalar)
            rhs = self._new_value("%rhs", scalar)
            out = self._new_value("%0", scalar)
            inner = Op(inner_name, (lhs, rhs), (out,), frozen_mapping(), (), location)
            ret = Op(f"{inner_name.split('.', 1)[0]}.return", (out,), (), frozen_mapping(), (), location)
            body = Block((lhs, rhs), (inner, ret))
            return OpParts(name, inputs + inits, list(fn.inputs), list(fn.results), attrs,
                            [body], location, location_parsed=True)
        cur.expect_keyword("reducer")
        firsts: list[tuple[str, Type, int]] = []
        seconds: list[tuple[str, Type, int]] = []
        while cur.accept("("):
            for target in (firsts, seconds):
                arg_pos = cur.pos
                arg = cur.value_id()
                if arg is None:
                    raise cur.expected("a reducer argument like '%arg1: tensor<f32>'")
                cur.expect(":")
                target.append((arg, self.parse_value_type(), arg_pos))
                self._optional_location()
                if target is firsts:
                    cur.expect(",")
            cur.expect(")")
        body = self._parse_region(firsts + seconds)
        return OpParts(name, inputs + inits, list(fn.inputs), list(fn.results), attrs, [body])

    def _read_while(self, name: str, pos: int) -> OpParts:
        cur = self.cur
        cur.expect("(")
        iter_args: list[tuple[str, int]] = []
        uses: list[Use] = []
        if not cur.accept(")"):
            while True:
                arg_pos = cur.pos
                arg = cur.value_id()
                if arg is None:
                    raise cur.expected("'%iterArg = %value'")
                cur.expect("=")
                uses.append(self._expect_use())
                iter_args.append((arg, arg_pos))
                if cur.accept(")"):
                    break
                cur.expect(",", "',' or ')' in the while operands")
        types: list[Type] = []
        if uses:
            cur.expect(":", "':' and the types of the while operands")
            types.append(self.parse_value_type())
            while cur.accept(","):
                types.append(self.parse_value_type())
        if len(types) != len(uses):
            raise cur.error(f"stablehlo.while: {len(uses)} operands but {len(types)} types", pos)
        attrs = self.parse_attribute_dict() if cur.accept_keyword("attributes") else {}
        specs = [(a, t, p) for (a, p), t in zip(iter_args, types)]
        cur.expect_keyword("cond")
        cond = self._parse_region(specs)
        cur.expect_keyword("do")
        body = self._parse_region(specs)
        return OpParts(name, uses, types, list(types), attrs, [cond, body])

    def _read_return(self, name: str, pos: int) -> OpParts:
        cur = self.cur
        uses, trailing = self._parse_uses()
        if trailing:
            raise cur.expected("a value after ','")
        attrs = self._opt_attr_dict()
        types: list[Type] = []
        if cur.accept(":"):
            types.append(self.parse_value_type())
            while cur.accept(","):
                types.append(self.parse_value_type())
        elif uses:
            raise cur.expected(f"':' and the types of the values {name} returns")
        return OpParts(name, uses, types, [], attrs)

    def _read_manual_computation(self, name: str, pos: int) -> OpParts:
        """``sdy.manual_computation(%x) in_shardings=[...] out_shardings=[...] manual_axes={...}
        (%arg: type) { body } : (types) -> types``. The shardings are kept as written
        (attributes ``in_shardings``, ``out_shardings``, ``manual_axes``: str)."""
        cur = self.cur
        cur.expect("(", "'(' before the operands of sdy.manual_computation")
        uses, trailing = self._parse_uses()
        if trailing:
            raise cur.expected("an operand after ','")
        cur.expect(")")
        attrs: dict[str, Any] = {}
        for key in ("in_shardings", "out_shardings", "manual_axes"):
            cur.expect_keyword(key)
            cur.expect("=", f"'=' after {key}")
            attrs[key] = cur.balanced("{" if key == "manual_axes" else "[", "}" if key == "manual_axes" else "]")
        cur.expect("(", "'(' before the body's arguments")
        specs: list[tuple[str, Type, int]] = []
        if not cur.accept(")"):
            while True:
                apos = cur.pos
                arg = cur.value_id()
                if arg is None:
                    raise cur.expected("a body argument like '%arg1: tensor<2xf32>'")
                cur.expect(":")
                specs.append((arg, self.parse_value_type(), apos))
                if cur.accept(")"):
                    break
                cur.expect(",", "',' or ')' in the body's arguments")
        body = self._parse_region(specs)
        attrs.update(self._opt_attr_dict())
        cur.expect(":", "':' and the type of sdy.manual_computation")
        fn = self.parse_type()
        if not isinstance(fn, FunctionType):
            raise cur.error("sdy.manual_computation: expected a function type like '(A) -> (B)'")
        return OpParts(name, uses, list(fn.inputs), list(fn.results), attrs, [body])

    def _read_call(self, name: str, pos: int) -> OpParts:
        cur = self.cur
        callee = cur.symbol()
        if callee is None:
            raise cur.expected("the callee, like '@f'")
        cur.expect("(")
        uses, _ = self._parse_uses()
        cur.expect(")", "')' after the call arguments")
        attrs = self._opt_attr_dict()
        attrs["callee"] = SymbolRef(callee)
        cur.expect(":")
        fn = self.parse_type()
        if not isinstance(fn, FunctionType):
            raise cur.error("func.call: expected the callee's function type", pos)
        return OpParts(name, uses, list(fn.inputs), list(fn.results), attrs)

    def _read_optimization_barrier(self, name: str, pos: int) -> OpParts:
        cur = self.cur
        attrs = self._opt_attr_dict()
        if cur.accept("("):
            cur.expect(")")
            return OpParts(name, [], [], [], attrs)
        uses, _ = self._parse_uses()
        cur.expect(":")
        kind, types, results = self._signature()
        if kind == "fn":
            return OpParts(name, uses, types, results, attrs)
        return OpParts(name, uses, types, list(types), attrs)

    def _read_sharding_constraint(self, name: str, pos: int) -> OpParts:
        """``sdy.sharding_constraint %x <@mesh, [{"a"}, {}]> : T``; the sharding is kept as
        written (attribute ``sharding``: str)."""
        cur = self.cur
        operand = self._expect_use()
        if not cur.peek("<"):
            raise cur.expected("the sharding, like '<@mesh, [{\"x\"}, {}]>'")
        attrs: dict[str, Any] = {"sharding": cur.balanced("<", ">")}
        attrs.update(self._opt_attr_dict())
        cur.expect(":", "':' and the type of sdy.sharding_constraint")
        ins, outs = self._same_type_signature(name, 1)
        return OpParts(name, [operand], ins, outs, attrs)

    def _read_tuple(self, name: str, pos: int) -> OpParts:
        uses, _ = self._parse_uses()
        attrs = self._opt_attr_dict()
        self.cur.expect(":")
        ty = self.parse_value_type()
        if not isinstance(ty, TupleType):
            raise self.cur.error("stablehlo.tuple: expected a tuple type", pos)
        return OpParts(name, uses, list(ty.types), [ty], attrs)

    def _read_get_tuple_element(self, name: str, pos: int) -> OpParts:
        cur = self.cur
        operand = self._expect_use()
        cur.expect("[")
        index = cur.expect_integer("the tuple index")
        cur.expect("]")
        attrs = self._opt_attr_dict()
        attrs["index"] = index
        cur.expect(":")
        ins, outs = self._same_type_signature(name, 1)
        return OpParts(name, [operand], ins, outs, attrs)

    def _read_complex(self, name: str, pos: int) -> OpParts:
        uses, _ = self._parse_uses()
        attrs = self._opt_attr_dict()
        self.cur.expect(":")
        kind, types, results = self._signature()
        if kind == "fn":
            return OpParts(name, uses, types, results, attrs)
        ty = types[0]
        if not isinstance(ty, TensorType) or not ty.is_complex:
            raise self.cur.error("stablehlo.complex: expected a complex tensor type", pos)
        real = ty.with_element_type(ty.element_type[len("complex<"):-1])
        return OpParts(name, uses, [real, real], [ty], attrs)

    def _read_keyword_enum(self, name: str, pos: int, *, attribute: str, keyword: str, enum: type) -> OpParts:
        """``%a, %b, keyword = VALUE : types``: an enum value after a keyword, into ``attribute``."""
        cur = self.cur
        uses, trailing = self._parse_uses()
        if not trailing:
            raise cur.expected(f"',' and '{keyword} = ...'")
        cur.expect_keyword(keyword)
        cur.expect("=")
        attrs: dict[str, Any] = {attribute: self._enum_word(enum)}
        attrs.update(self._opt_attr_dict())
        cur.expect(":")
        ins, outs = self._same_type_signature(name, len(uses))
        return OpParts(name, uses, ins, outs, attrs)

    def _read_reduce_precision(self, name: str, pos: int) -> OpParts:
        cur = self.cur
        operand = self._expect_use()
        cur.expect(",")
        cur.expect_keyword("format")
        cur.expect("=")
        m = cur.match(_FORMAT)
        if not m:
            raise cur.expected("a format like 'e5m10'")
        attrs = self._opt_attr_dict()
        attrs.update(exponent_bits=int(m.group(1)), mantissa_bits=int(m.group(2)))
        cur.expect(":")
        ins, outs = self._same_type_signature(name, 1)
        return OpParts(name, [operand], ins, outs, attrs)

    def _read_fft(self, name: str, pos: int) -> OpParts:
        cur = self.cur
        operand = self._expect_use()
        cur.expect(",")
        cur.expect_keyword("type")
        cur.expect("=")
        attrs: dict[str, Any] = {"fft_type": self._enum_word(FftType)}
        cur.expect(",")
        cur.expect_keyword("length")
        cur.expect("=")
        attrs["fft_length"] = self._parse_int_list()
        attrs.update(self._opt_attr_dict())
        cur.expect(":")
        ins, outs = self._same_type_signature(name, 1)
        return OpParts(name, [operand], ins, outs, attrs)

    def _read_custom_call(self, name: str, pos: int) -> OpParts:
        cur = self.cur
        target = cur.symbol()
        if target is None:
            raise cur.expected("the custom call target, like '@my_target'")
        cur.expect("(")
        uses, _ = self._parse_uses()
        cur.expect(")")
        attrs = self._opt_attr_dict()
        attrs["call_target_name"] = target
        cur.expect(":")
        ins, outs = self._same_type_signature(name, len(uses))
        return OpParts(name, uses, ins, outs, attrs)

    def _read_composite(self, name: str, pos: int) -> OpParts:
        cur = self.cur
        composite = cur.expect_string("the composite name")
        uses, _ = self._parse_uses()
        attrs = self._opt_attr_dict()
        attrs["name"] = composite
        cur.expect(":")
        ins, outs = self._same_type_signature(name, len(uses))
        return OpParts(name, uses, ins, outs, attrs)

    def _read_get_dimension_size(self, name: str, pos: int) -> OpParts:
        cur = self.cur
        operand = self._expect_use()
        cur.expect(",")
        cur.expect_keyword("dim")
        cur.expect("=")
        attrs = {"dimension": cur.expect_integer()}
        attrs.update(self._opt_attr_dict())
        cur.expect(":")
        ins, outs = self._same_type_signature(name, 1)
        return OpParts(name, [operand], ins, outs, attrs)

    def _read_top_k(self, name: str, pos: int) -> OpParts:
        cur = self.cur
        cur.expect("(")
        operand = self._expect_use()
        cur.expect(",")
        cur.expect_keyword("k")
        cur.expect("=")
        attrs: dict[str, Any] = {"k": cur.expect_integer("k")}
        cur.expect(")")
        attrs.update(self._opt_attr_dict())
        cur.expect(":")
        kind, types, results = self._signature()
        if kind != "fn" or len(results) != 2:
            raise cur.error("chlo.top_k: expected 'operand-type -> (values-type, indices-type)'", pos)
        return OpParts(name, [operand], types, results, attrs)


# -- the custom forms, by op ----------------------------------------------------------------------

#: The readers of custom forms, by the name an op definition gives them (:attr:`..ops.Form.reader`).
READERS: Mapping[str, Callable[..., OpParts]] = MappingProxyType({
    "constant": OpFormReader._read_constant,
    "iota": OpFormReader._read_iota,
    "compare": OpFormReader._read_compare,
    "select": OpFormReader._read_select,
    "dims": OpFormReader._read_dims,
    "concatenate": OpFormReader._read_concatenate,
    "dynamic_slice": OpFormReader._read_dynamic_slice,
    "pad": OpFormReader._read_pad,
    "slice": OpFormReader._read_slice,
    "dot_general": OpFormReader._read_dot_general,
    "dot": OpFormReader._read_dot,
    "convolution": OpFormReader._read_convolution,
    "reduce": OpFormReader._read_reduce,
    "while": OpFormReader._read_while,
    "return": OpFormReader._read_return,
    "call": OpFormReader._read_call,
    "optimization_barrier": OpFormReader._read_optimization_barrier,
    "tuple": OpFormReader._read_tuple,
    "get_tuple_element": OpFormReader._read_get_tuple_element,
    "complex": OpFormReader._read_complex,
    "keyword_enum": OpFormReader._read_keyword_enum,
    "reduce_precision": OpFormReader._read_reduce_precision,
    "fft": OpFormReader._read_fft,
    "custom_call": OpFormReader._read_custom_call,
    "composite": OpFormReader._read_composite,
    "get_dimension_size": OpFormReader._read_get_dimension_size,
    "top_k": OpFormReader._read_top_k,
    "manual_computation": OpFormReader._read_manual_computation,
    "sharding_constraint": OpFormReader._read_sharding_constraint,
})


def _reader(form: Form) -> Callable[[OpFormReader, str, int], OpParts]:
    """The reader a form names, given the keyword, attribute and enum the form sets."""
    params = {key: value for key, value in (("keyword", form.keyword), ("attribute", form.attribute),
                                            ("enum", form.enum)) if value is not None}
    reader = READERS[form.reader]
    return functools.partial(reader, **params) if params else reader


#: ``reader(parser, op_name, position)`` of each op that has a custom form, from its definition.
PRETTY: Mapping[str, Callable[[OpFormReader, str, int], OpParts]] = MappingProxyType({
    d.name: _reader(d.form) for d in OPS.values() if d.form is not None})
