"""Types: ``tensor<2x3xf32>``, ``tuple<...>``, ``!stablehlo.token``, function types, element types.

:class:`TypeReader` reads the types MLIR text gives values, ops and functions into the types of
:mod:`..ir`: static-shaped tensors of the element types numpy (with ml_dtypes) can hold, tuples
and tokens, function types ``(A, B) -> R``, and type aliases (``!t``). Dynamic shapes and
element types pjrt-hub cannot hold are refused here, at the type, with a ParseError.
"""

from __future__ import annotations

import re
from typing import Any

from ..ir import FunctionType, TensorType, TokenType, TupleType, Type, element_dtype
from .reader import Reader

__all__ = ["SCALAR_TYPE", "TypeReader"]

#: The dimensions of a tensor type (``2x3x``); ``?`` and ``*`` are read to be refused.
_DIMS = re.compile(r"(?:(?:[0-9]+|\?|\*)x)*")
#: The spellings of scalar (element) types: ``f32``, ``i1``, ``ui8``, ``bf16``, ``f8E4M3FN``...
SCALAR_TYPE = re.compile(r"(?:[su]?i[0-9]+|f[0-9]+[A-Za-z0-9]*|bf16|tf32|index|none)$")
#: A tensor type as JAX prints nearly all of them: static dimensions, a scalar element type, no
#: encoding and no blanks (``tensor<8x128xf32>``, ``tensor<i1>``). A program repeats a few of
#: them hundreds of times, so each spelling is read once per module (see ``_plain_tensor``);
#: any other spelling, and any error, takes the general path.
_PLAIN_TENSOR = re.compile(r"tensor<((?:[0-9]+x)*)([A-Za-z_][A-Za-z0-9_]*)>")


class TypeReader(Reader):
    """Reads types (see the module docstring)."""

    def parse_value_type(self) -> Type:
        """A type a value can have: tensor, tuple or token."""
        pos = self.cur.pos
        ty = self.parse_type()
        if isinstance(ty, (TensorType, TupleType, TokenType)):
            return ty
        raise self.cur.error(f"expected a tensor type, got '{ty}'", pos)

    def parse_type(self) -> Any:
        """Any type: tensor/tuple/token, a function type, or a scalar element type (as text)."""
        cur = self.cur
        cur.skip()
        start = cur.pos
        if self.text.startswith("tensor<", start):
            plain = self._plain_tensor(start)
            if plain is not None:
                return plain
        if cur.accept("("):
            inputs: list[Type] = []
            if not cur.accept(")"):
                while True:
                    inputs.append(self.parse_value_type())
                    if cur.accept(")"):
                        break
                    cur.expect(",", "',' or ')' in the type list")
            cur.expect("->", "'->' in the function type")
            return FunctionType(tuple(inputs), tuple(self._parse_result_types()))
        if cur.peek("!"):
            name = cur.bang_id()
            if name == "stablehlo.token":
                return TokenType()
            if name in self._type_alias_pos:
                return self._resolve_alias("!", name, start)
            raise cur.error(f"unsupported type '!{name}'", start)
        word = cur.bare_id("a type")
        if word == "tensor":
            return self._parse_tensor_body(start)
        if word == "tuple":
            cur.expect("<")
            members: list[Type] = []
            if not cur.accept(">"):
                while True:
                    members.append(self.parse_value_type())
                    if cur.accept(">"):
                        break
                    cur.expect(",", "',' or '>' in the tuple type")
            return TupleType(tuple(members))
        if word == "complex":
            cur.expect("<")
            inner = cur.bare_id("an element type")
            cur.expect(">")
            return f"complex<{inner}>"
        if SCALAR_TYPE.match(word):
            return word
        raise cur.error(f"unknown type '{word}'", start)

    def _plain_tensor(self, start: int) -> TensorType | None:
        """The tensor type spelled plainly at ``start`` (see :data:`_PLAIN_TENSOR`), the cursor
        moved past it; None (the cursor unmoved) for any other spelling, or an element type
        that is not one pjrt-hub holds (the general path then says what is wrong)."""
        m = _PLAIN_TENSOR.match(self.text, start)
        if m is None:
            return None
        spelling = m.group(0)
        known = self._plain_tensors.get(spelling)
        if known is None:
            element = m.group(2)
            if not SCALAR_TYPE.match(element):
                return None
            try:
                element_dtype(element)
            except KeyError:
                return None
            known = self._plain_tensors[spelling] = TensorType(
                tuple(int(d) for d in m.group(1).split("x")[:-1]), element)
        self.cur.pos = m.end()
        return known

    def _parse_result_types(self) -> list[Type]:
        cur = self.cur
        if cur.accept("("):
            results: list[Type] = []
            if not cur.accept(")"):
                while True:
                    results.append(self.parse_value_type())
                    if cur.accept(")"):
                        break
                    cur.expect(",", "',' or ')' in the result types")
            return results
        return [self.parse_value_type()]

    def _parse_tensor_body(self, start: int) -> TensorType:
        cur = self.cur
        cur.expect("<", "'<' after 'tensor'")
        m = _DIMS.match(self.text, cur.pos)
        assert m is not None  # _DIMS matches the empty string too
        dims_text = m.group(0)
        cur.pos = m.end()
        if "?" in dims_text or "*" in dims_text:
            raise cur.error("dynamic shapes (tensor<?x...>) are not supported; export the "
                            "program with static shapes", start)
        shape = tuple(int(d) for d in dims_text.split("x")[:-1])
        elem_pos = cur.pos
        element = self.parse_type()
        if not isinstance(element, str):
            raise cur.error("expected an element type like 'f32'", elem_pos)
        try:
            element_dtype(element)
        except KeyError:
            raise cur.error(f"unsupported element type '{element}'", elem_pos) from None
        if cur.accept(","):
            self.parse_attribute()  # encoding (bounds, sparsity): irrelevant for static shapes
        cur.expect(">", "'>' to close the tensor type")
        return TensorType(shape, element)
