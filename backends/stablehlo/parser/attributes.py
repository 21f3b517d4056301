"""Attributes: ``{key = value}`` dictionaries, ``<{...}>`` properties and every attribute value.

:class:`AttributeReader` turns MLIR attribute syntax into the Python values :mod:`..ir`
documents: numbers, strings, booleans, symbols, lists, dictionaries, ``array<...>``,
``dense<...>`` and ``dense_resource<...>`` (through :mod:`.literals`), the StableHLO enums
(``#stablehlo<comparison_direction LT>``) and structs (``#stablehlo.dot<...>``,
``#stablehlo.gather<...>``, ``#stablehlo.scatter<...>``, ``#stablehlo.conv<...>`` in both its
raw and its ``[b, 0, 1, f]x[...]->[...]`` form), and attribute aliases. An attribute it has no
model for is kept as written (:class:`~..ir.OpaqueAttr`), never dropped.
"""

from __future__ import annotations

import enum
import re
from typing import Any

import numpy as np

from ..ir import (
    ComparisonDirection,
    ComparisonType,
    ConvDimensionNumbers,
    DotDimensionNumbers,
    FftType,
    GatherDimensionNumbers,
    OpaqueAttr,
    Precision,
    RngAlgorithm,
    RngDistribution,
    ScatterDimensionNumbers,
    SymbolRef,
    TensorType,
    Transpose,
    frozen_mapping,
)
from .literals import dense_from_bytes, dense_from_hex, dense_from_literal, scalar_value
from .type_syntax import SCALAR_TYPE, TypeReader

__all__ = ["AttributeReader"]

#: The enums written ``#stablehlo<kind VALUE>``, by kind.
_ENUM_KINDS: dict[str, type[enum.Enum]] = {
    "comparison_direction": ComparisonDirection,
    "comparison_type": ComparisonType,
    "precision": Precision,
    "rng_algorithm": RngAlgorithm,
    "rng_distribution": RngDistribution,
    "fft_type": FftType,
    "transpose": Transpose,
}
#: One dimension in ``#stablehlo.conv<[b, 0, 1, f]x...>``: a spatial index or a role letter.
_DIM_ROLE = re.compile(r"[0-9]+|[a-z]")

_INDEX_TENSOR = re.compile(r"\s*tensor<((?:\d+x)*)index>")


class AttributeReader(TypeReader):
    """Reads attributes (see the module docstring)."""

    def parse_attribute_dict(self) -> dict[str, Any]:
        cur = self.cur
        cur.expect("{")
        attrs: dict[str, Any] = {}
        if cur.accept("}"):
            return attrs
        while True:
            key = cur.string()
            if key is None:
                key = cur.bare_id("an attribute name")
            if cur.accept("="):
                attrs[key] = self.parse_attribute()
            else:
                attrs[key] = True  # unit attribute
            if cur.accept("}"):
                return attrs
            cur.expect(",", "',' or '}' in the attribute dictionary")

    def parse_attribute(self, typed: bool = True) -> Any:
        """One attribute value. With ``typed=False`` a scalar takes no ``: type`` suffix (in
        custom forms the next ':' starts the op's type)."""
        cur = self.cur
        cur.skip()
        start = cur.pos
        c = cur.peek_char()
        if c == "[":
            cur.expect("[")
            items: list[Any] = []
            if not cur.accept("]"):
                while True:
                    items.append(self.parse_attribute())
                    if cur.accept("]"):
                        break
                    cur.expect(",", "',' or ']' in the list")
            return tuple(items)
        if c == "{":
            return frozen_mapping(self.parse_attribute_dict())
        if c == '"':
            text = cur.string()
            if typed and cur.peek(":") and not cur.peek("::"):
                cur.expect(":")
                self.parse_type()
            return text
        if c == "@":
            name = cur.symbol()
            if name is None:
                raise cur.expected("a symbol name after '@'")
            while cur.accept("::"):
                nested = cur.symbol()
                if nested is None:
                    raise cur.expected("a nested symbol after '::'")
                name = f"{name}::{nested}"
            return SymbolRef(name)
        if c == "#":
            return self._parse_hash_attribute()
        if c == "(" or c == "!":
            return self.parse_type()
        if c in "-+0123456789":
            text = cur.number()
            if text is None:
                raise cur.expected("a number")
            ty = None
            if typed and cur.peek(":") and not cur.peek("::"):
                cur.expect(":")
                ty = self.parse_type()
            return scalar_value(text, ty, cur, start)
        word_match = re.compile(r"[A-Za-z_][A-Za-z0-9_$.]*").match(self.text, cur.pos)
        if not word_match:
            raise cur.expected("an attribute value")
        word = word_match.group(0)
        if word in ("true", "false"):
            cur.pos = word_match.end()
            if typed and cur.peek(":") and not cur.peek("::"):
                cur.expect(":")
                self.parse_type()
            return word == "true"
        if word == "unit":
            cur.pos = word_match.end()
            return True
        if word == "dense":
            return self._parse_dense()[0]
        if word == "dense_resource":
            return self._parse_dense_resource()[0]
        if word == "array":
            return self._parse_array()
        if word in ("tensor", "tuple", "complex") or SCALAR_TYPE.match(word):
            return self.parse_type()
        if word in ("affine_map", "affine_set", "strided", "sparse", "opaque", "distinct"):
            cur.pos = word_match.end()
            opener = cur.peek_char()
            body = cur.balanced(opener, {"<": ">", "[": "]"}.get(opener, ">"))
            if word == "distinct" and cur.peek("<"):
                body += cur.balanced("<", ">")
            if cur.peek(":") and not cur.peek("::"):
                cur.expect(":")
                self.parse_type()
            return OpaqueAttr(word + body)
        raise cur.error(f"unknown attribute '{word}'", start)

    def _parse_hash_attribute(self) -> Any:
        cur = self.cur
        start = cur.pos
        name = cur.hash_id()
        if name is None:
            raise cur.expected("an attribute after '#'")
        if not self.text.startswith("<", cur.pos):
            return self._resolve_alias("#", name, start)
        if name in ("stablehlo", "chlo", "mhlo"):
            save = cur.pos
            cur.expect("<")
            kind = cur.optional_bare_id()
            if kind in _ENUM_KINDS:
                word = cur.bare_id("an enum value")
                cur.expect(">")
                try:
                    return _ENUM_KINDS[kind](word)
                except ValueError:
                    allowed = ", ".join(e.value for e in _ENUM_KINDS[kind])
                    raise cur.error(f"unknown {kind} '{word}' (expected one of {allowed})", start) from None
            cur.pos = save
        elif name == "stablehlo.dot":
            return DotDimensionNumbers(**self._parse_struct(name, {
                "lhs_batching_dimensions", "rhs_batching_dimensions",
                "lhs_contracting_dimensions", "rhs_contracting_dimensions"}))
        elif name == "stablehlo.gather":
            return GatherDimensionNumbers(**self._parse_struct(name, {
                "offset_dims", "collapsed_slice_dims", "operand_batching_dims",
                "start_indices_batching_dims", "start_index_map", "index_vector_dim"}))
        elif name == "stablehlo.scatter":
            return ScatterDimensionNumbers(**self._parse_struct(name, {
                "update_window_dims", "inserted_window_dims", "input_batching_dims",
                "scatter_indices_batching_dims", "scatter_dims_to_operand_dims",
                "index_vector_dim"}))
        elif name == "stablehlo.conv":
            cur.expect("<")
            if cur.accept_keyword("raw"):
                fields = self._parse_struct_fields(name, {
                    "input_batch_dimension", "input_feature_dimension", "input_spatial_dimensions",
                    "kernel_input_feature_dimension", "kernel_output_feature_dimension",
                    "kernel_spatial_dimensions", "output_batch_dimension",
                    "output_feature_dimension", "output_spatial_dimensions"})
                try:
                    return ConvDimensionNumbers(**fields)
                except TypeError:
                    raise cur.error("#stablehlo.conv<raw ...> is missing fields", start) from None
            dims = self._parse_conv_dimensions()
            cur.expect(">", "'>' to close #stablehlo.conv")
            return dims
        cur.pos = start
        cur.hash_id()
        body = cur.balanced("<", ">")
        return OpaqueAttr(f"#{name}{body}")

    def _parse_struct(self, name: str, keys: set[str]) -> dict[str, Any]:
        self.cur.expect("<", f"'<' after #{name}")
        return self._parse_struct_fields(name, keys)

    def _parse_struct_fields(self, name: str, keys: set[str]) -> dict[str, Any]:
        """``key = [1, 2], key = 3 >`` (the opening '<' already read)."""
        cur = self.cur
        fields: dict[str, Any] = {}
        if cur.accept(">"):
            return fields
        while True:
            pos = cur.pos
            key = cur.bare_id(f"a field of #{name}")
            if key not in keys:
                raise cur.error(f"unknown field '{key}' in #{name} (expected one of "
                                f"{', '.join(sorted(keys))})", pos)
            cur.expect("=")
            if cur.peek("["):
                fields[key] = self._parse_int_list()
            else:
                fields[key] = cur.expect_integer(f"an integer for '{key}'")
            if cur.accept(">"):
                return fields
            cur.expect(",", f"',' or '>' in #{name}")

    def _parse_int_list(self) -> tuple[int, ...]:
        cur = self.cur
        cur.expect("[", "'[' to open a list of integers")
        values: list[int] = []
        if cur.accept("]"):
            return ()
        while True:
            if cur.accept_keyword("true"):
                values.append(1)
            elif cur.accept_keyword("false"):
                values.append(0)
            else:
                values.append(cur.expect_integer())
            if cur.accept("]"):
                return tuple(values)
            cur.expect(",", "',' or ']' in the list")

    def _parse_conv_dimensions(self) -> ConvDimensionNumbers:
        """``[b, 0, 1, f]x[0, 1, i, o]->[b, 0, 1, f]``."""
        cur = self.cur
        start = cur.pos

        def roles(what: str, names: str) -> tuple[int, int, tuple[int, ...]]:
            cur.expect("[", f"'[' to open the {what} dimensions")
            items: list[str] = []
            while not cur.accept("]"):
                if items:
                    cur.expect(",", f"',' or ']' in the {what} dimensions")
                m = cur.match(_DIM_ROLE)
                if not m:
                    raise cur.expected(f"a {what} dimension ({names[0]}, {names[1]} or a spatial index)")
                items.append(m.group(0))
            spatial_idx = sorted(int(t) for t in items if t.isdigit())
            if spatial_idx != list(range(len(spatial_idx))) or \
                    items.count(names[0]) != 1 or items.count(names[1]) != 1 or \
                    len(items) != len(spatial_idx) + 2:
                raise cur.error(f"malformed {what} dimensions {items}", start)
            spatial = tuple(items.index(str(k)) for k in range(len(spatial_idx)))
            return items.index(names[0]), items.index(names[1]), spatial

        ib, if_, isp = roles("input", "bf")
        cur.expect_keyword("x")
        ki, ko, ksp = roles("kernel", "io")
        cur.expect("->", "'->' in the convolution dimensions")
        ob, of, osp = roles("output", "bf")
        if not (len(isp) == len(ksp) == len(osp)):
            raise cur.error("input, kernel and output have different numbers of spatial dimensions",
                            start)
        return ConvDimensionNumbers(ib, if_, isp, ki, ko, ksp, ob, of, osp)

    def _parse_array(self) -> tuple:
        cur = self.cur
        cur.expect_keyword("array")
        cur.expect("<")
        element = self.parse_type()
        values: list[Any] = []
        if cur.accept(":"):
            while True:
                if cur.accept_keyword("true"):
                    values.append(True)
                elif cur.accept_keyword("false"):
                    values.append(False)
                else:
                    pos = cur.pos
                    text = cur.number()
                    if text is None:
                        raise cur.expected("an array element")
                    values.append(scalar_value(text, element, cur, pos))
                if not cur.accept(","):
                    break
        cur.expect(">", "'>' to close the array")
        if element == "i1":
            return tuple(bool(v) for v in values)
        return tuple(values)

    def _parse_dense(self) -> tuple[np.ndarray, TensorType]:
        cur = self.cur
        start = cur.pos
        cur.expect_keyword("dense")
        cur.expect("<", "'<' after 'dense'")
        literal: Any
        if cur.peek(">"):
            literal = []
            kind = "list"
        elif cur.peek('"'):
            literal = cur.string()
            kind = "hex"
        else:
            literal = self._parse_dense_literal()
            kind = "list" if isinstance(literal, list) else "splat"
        cur.expect(">", "'>' to close the dense literal")
        cur.expect(":", "':' and the type of the dense literal")
        index = _INDEX_TENSOR.match(self.text, cur.pos)
        if index:
            # MLIR's index type, in attributes only (custom_call operand_layouts): 64-bit here.
            cur.pos = index.end()
            ty = TensorType(tuple(int(d) for d in index.group(1).split("x")[:-1]), "i64")
        else:
            ty = self.parse_type()
        if not isinstance(ty, TensorType):
            raise cur.error("a dense literal needs a tensor type", start)
        try:
            if kind == "hex":
                array = dense_from_hex(literal, ty)
            else:
                array = dense_from_literal(literal, ty, splat=kind == "splat")
        except (ValueError, OverflowError) as exc:
            raise cur.error(f"bad dense literal for {ty}: {exc}", start) from None
        array.flags.writeable = False
        return array, ty

    def _parse_dense_literal(self) -> Any:
        cur = self.cur
        if cur.accept("["):
            items: list[Any] = []
            if cur.accept("]"):
                return items
            while True:
                items.append(self._parse_dense_literal())
                if cur.accept("]"):
                    return items
                cur.expect(",", "',' or ']' in the dense literal")
        if cur.accept("("):
            re_ = self._parse_dense_literal()
            cur.expect(",")
            im = self._parse_dense_literal()
            cur.expect(")")
            return (re_, im)
        for word in ("true", "false", "inf", "nan"):
            if cur.accept_keyword(word):
                return word
        if cur.accept("-"):
            if cur.accept_keyword("inf"):
                return "-inf"
            text = cur.number()
            if text is None:
                raise cur.expected("a number")
            return "-" + text
        text = cur.number()
        if text is None:
            raise cur.expected("a dense element (number, true/false or a list)")
        return text

    def _parse_dense_resource(self) -> tuple[np.ndarray, TensorType]:
        cur = self.cur
        start = cur.pos
        cur.expect_keyword("dense_resource")
        cur.expect("<")
        key = cur.string()
        if key is None:
            key = cur.bare_id("a resource name")
        cur.expect(">")
        cur.expect(":")
        ty = self.parse_type()
        if not isinstance(ty, TensorType):
            raise cur.error("dense_resource needs a tensor type", start)
        blob = self._resources.get(key)
        if blob is None:
            raise cur.error(f"dense_resource<{key}> has no blob in the file's resource section", start)
        # Blobs start with their alignment as a 4-byte little-endian integer.
        try:
            array = dense_from_bytes(blob[4:], ty)
        except ValueError as exc:
            raise cur.error(f"bad dense_resource<{key}> for {ty}: {exc}", start) from None
        array.flags.writeable = False
        return array, ty

    def _parse_properties(self) -> dict[str, Any]:
        """``<{...}>`` (MLIR properties) or nothing."""
        cur = self.cur
        if cur.peek("<{"):
            cur.expect("<")
            props = self.parse_attribute_dict()
            cur.expect(">", "'>' to close the properties")
            return props
        return {}
