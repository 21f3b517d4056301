"""StableHLO text -> :mod:`.ir`: the parser of the MLIR JAX emits.

Both printed forms are read: the pretty form ``jax.jit(f).lower(...).as_text()`` gives (custom
assembly of the stablehlo, chlo and func ops, with region ops such as ``sort`` or ``scatter``
in generic form in the middle of it) and the generic form (``"stablehlo.add"(%a, %b) : (...) ->
...``). Debug locations are resolved, including ``#locN`` aliases defined after their use.
Attributes the text leaves out get the StableHLO spec's defaults (``jax.export`` omits every
default), so consumers see the same IR whichever way the program was printed.

The parser knows MLIR's general syntax and the custom assembly of the ops JAX emits. A
``stablehlo.*`` or ``chlo.*`` op it does not know is read with the common
``operands attr-dict : types`` form, so that an unsupported op fails later, with the list of
supported ops, rather than as a syntax error. Every syntax error is a
:class:`~pjrt_hub.abi.ParseError` with line, column and what was expected.
"""

from __future__ import annotations

import dataclasses
import os
import re
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

import numpy as np

from pjrt_hub.abi import CompileError, ParseError

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
from .lexer import Cursor
from .nesting import MAX_NESTING as MAX_PROGRAM_NESTING, run_deep

__all__ = ["parse_module"]


def parse_module(text: str | bytes) -> Module:
    """Parse StableHLO MLIR text (pretty or generic form) into a :class:`~.ir.Module`.

    Raises :class:`~pjrt_hub.abi.ParseError` (with line and column) for malformed text, and for
    nothing else raises anything: whatever the text, the caller gets a ParseError or a module.
    """
    if isinstance(text, (bytes, bytearray, memoryview)):
        raw = bytes(text)
        if raw.startswith(b"ML\xefR"):
            raise ParseError("this is MLIR bytecode, not text; pass the module as text", line=1, column=1)
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            line_start = raw.rfind(b"\n", 0, exc.start) + 1
            raise ParseError(
                f"program text is not UTF-8 (byte {exc.start} is 0x{raw[exc.start]:02x}); a serialized "
                "(bytecode) StableHLO module cannot be read, print it as text",
                line=raw.count(b"\n", 0, exc.start) + 1, column=exc.start - line_start + 1) from None
    if text.startswith("ML\xefR") or text.startswith("MLïR"):
        raise ParseError("this is MLIR bytecode, not text; pass the module as text", line=1, column=1)
    try:
        # Deeply nested text (regions in regions, thousands deep) is read again on a thread with
        # a deep stack when the recursive descent runs out of this one (see .nesting).
        return run_deep(_parse, text)
    except ParseError:
        raise
    except (CompileError, RecursionError):
        raise ParseError(f"the program nests too deeply to be read (pjrt-hub reads programs nested up to "
                         f"{MAX_PROGRAM_NESTING} levels)", line=1, column=1) from None


def _parse(text: str) -> Module:
    """The parse itself: a module, a ParseError, or RecursionError for :func:`run_deep` to see."""
    parser: _Parser | None = None
    try:
        parser = _Parser(text)
        return parser.parse()
    except (ParseError, RecursionError):
        raise
    except MemoryError:
        raise _error_at(parser, "reading the program needs more memory than there is") from None
    except Exception as exc:  # noqa: BLE001 - a parser bug must still honour the contract
        # The cause is kept (and names the bug); every deliberate ParseError has none.
        raise _error_at(parser, f"internal parser error ({type(exc).__name__}: {exc}); please "
                                "report it with the program text") from exc


def _error_at(parser: "_Parser | None", message: str) -> ParseError:
    if parser is None:
        return ParseError(message, line=1, column=1)
    return parser.cur.error(message)


#: Brackets may nest this deep: a few per level of program nesting (a region is a ``({`` pair,
#: types nest inside), for the :data:`~.nesting.MAX_NESTING` levels pjrt-hub compiles and runs.
#: JAX's programs nest about 10. Deeper text is refused where it crosses the limit, in one linear
#: scan before the recursive descent starts.
MAX_NESTING = 3 * MAX_PROGRAM_NESTING
#: An alias may refer to an alias, this many times in a row (JAX's ``#loc`` chains follow the
#: call stack of the traced function, a few dozen at most).
MAX_ALIAS_CHAIN = 100

_NESTING_TOKEN = re.compile(r'"[^"\\\n]*(?:\\.[^"\\\n]*)*"?|//[^\n]*|->|[(\[{<]|[)\]}>]')


def _check_nesting(cur: Cursor) -> None:
    """Refuse text whose brackets nest deeper than :data:`MAX_NESTING` (one linear scan)."""
    depth = 0
    for m in _NESTING_TOKEN.finditer(cur.text):
        token = m.group()
        if token in "([{<":
            depth += 1
            if depth > MAX_NESTING:
                raise cur.error(f"brackets nest deeper than {MAX_NESTING} levels; pjrt-hub reads "
                                f"programs nested up to {MAX_PROGRAM_NESTING} levels (JAX's nest about 10)",
                                m.start())
        elif token in ")]}>" and depth:
            depth -= 1


# -- enums written as #stablehlo<kind VALUE> or bare VALUE in the pretty form ------------------

_ENUM_KINDS: dict[str, type] = {
    "comparison_direction": ComparisonDirection,
    "comparison_type": ComparisonType,
    "precision": Precision,
    "rng_algorithm": RngAlgorithm,
    "rng_distribution": RngDistribution,
    "fft_type": FftType,
    "transpose": Transpose,
}

#: Attributes whose value is a list of integers, however the text spelled it (``array<i64:
#: ...>`` today, ``dense<...> : tensor<Nxi64>`` in older StableHLO).
_INT_LIST_ATTRS = frozenset({
    "broadcast_dimensions", "permutation", "dimensions", "slice_sizes", "edge_padding_low",
    "edge_padding_high", "interior_padding", "start_indices", "limit_indices", "strides",
    "window_dimensions", "window_strides", "base_dilations", "window_dilations", "lhs_dilation",
    "rhs_dilation", "fft_length", "broadcast_sizes",
})

_ALIAS_DEF = re.compile(r"^[ \t]*([#!])([A-Za-z_$.\-][A-Za-z0-9_$.\-]*)[ \t]*=", re.M)
_RESOURCE_SECTION = re.compile(r"\{-#(.*?)#-\}", re.S)
_RESOURCE_ENTRY = re.compile(r"([A-Za-z_$.\-][A-Za-z0-9_$.\-]*|\"(?:[^\"\\]|\\.)*\")\s*:\s*\"0x([0-9A-Fa-f]*)\"")
_DIMS = re.compile(r"(?:(?:[0-9]+|\?|\*)x)*")
_DIM_ROLE = re.compile(r"[0-9]+|[a-z]")
_FORMAT = re.compile(r"e([0-9]+)m([0-9]+)")

_SCALAR_TYPE = re.compile(r"(?:[su]?i[0-9]+|f[0-9]+[A-Za-z0-9]*|bf16|tf32|index|none)$")


# -- locations --------------------------------------------------------------------------------

@dataclass(frozen=True)
class _Loc:
    """A parsed location before rendering: ``kind`` is file/name/callsite/fused."""

    kind: str
    parts: tuple


def _loc_position(loc: _Loc | None) -> str | None:
    if loc is None:
        return None
    if loc.kind == "file":
        file, line, col = loc.parts
        return f"{file}:{line}:{col}"
    if loc.kind == "name":
        return _loc_position(loc.parts[1])
    if loc.kind == "callsite":
        return _loc_position(loc.parts[0]) or _loc_position(loc.parts[1])
    for child in loc.parts:
        pos = _loc_position(child)
        if pos:
            return pos
    return None


def _loc_name(loc: _Loc | None) -> str | None:
    if loc is None or loc.kind == "file":
        return None
    if loc.kind == "name":
        return loc.parts[0]
    if loc.kind == "callsite":
        return _loc_name(loc.parts[0])
    for child in loc.parts:
        name = _loc_name(child)
        if name:
            return name
    return None


def render_location(loc: _Loc | None) -> str | None:
    """``file:line:col (name)``, ``file:line:col``, ``name`` or None."""
    pos, name = _loc_position(loc), _loc_name(loc)
    if pos and name:
        return f"{pos} ({name})"
    return pos or name


# -- op parsing results -----------------------------------------------------------------------

@dataclass
class _Use:
    name: str
    index: int | None
    pos: int


@dataclass
class _OpParts:
    """What the syntax of one op gave, before operands are resolved and results defined."""

    name: str
    operands: list[_Use]
    operand_types: list[Type] | None
    result_types: list[Type]
    attributes: dict[str, Any] = field(default_factory=dict)
    regions: list[Block] = field(default_factory=list)
    location: str | None = None
    location_parsed: bool = False


class _Scope:
    def __init__(self, isolated: bool) -> None:
        self.isolated = isolated
        self.values: dict[str, Value] = {}


class _Parser:
    def __init__(self, text: str) -> None:
        self.cur = Cursor(text)
        self.text = text
        self._next_id = 0
        self._scopes: list[_Scope] = []
        self._alias_pos: dict[str, int] = {}
        self._type_alias_pos: dict[str, int] = {}
        self._alias_cache: dict[str, Any] = {}
        self._alias_busy: set[str] = set()
        self._resources: dict[str, bytes] = {}
        _check_nesting(self.cur)
        #: ``sdy.mesh`` definitions of the module: name -> ``<...>`` text.
        self._meshes: dict[str, str] = {}
        self._prescan()
        self._pretty: dict[str, Callable[[str, int], _OpParts]] = self._pretty_table()

    # -- whole-file structure ----------------------------------------------------------------

    def _prescan(self) -> None:
        """Find alias definitions and resource blobs first: uses may precede definitions."""
        for m in _ALIAS_DEF.finditer(self.text):
            table = self._alias_pos if m.group(1) == "#" else self._type_alias_pos
            table.setdefault(m.group(2), m.end())
        for section in _RESOURCE_SECTION.finditer(self.text):
            for m in _RESOURCE_ENTRY.finditer(section.group(1)):
                key = m.group(1).strip('"')
                if len(m.group(2)) % 2:
                    raise self.cur.error(f"resource blob {key!r} has an odd number of hex digits",
                                         section.start(1) + m.start(2))
                self._resources[key] = bytes.fromhex(m.group(2))

    def parse(self) -> Module:
        cur = self.cur
        module: Module | None = None
        loose: list[Function] = []
        while not cur.at_end():
            start = cur.pos
            if cur.peek("{-#"):
                end = self.text.find("#-}", cur.pos)
                if end < 0:
                    raise cur.error("unterminated '{-#' resource section")
                cur.pos = end + 3
            elif cur.peek("#") or cur.peek("!"):
                sigil = cur.peek_char()
                name = cur.hash_id() if sigil == "#" else cur.bang_id()
                if name is None or not cur.accept("="):
                    raise cur.error("expected an alias definition like '#loc1 = loc(...)'", start)
                self._skip_alias_value(sigil, name)
            elif cur.peek_keyword("module") or cur.peek('"builtin.module"'):
                if module is not None or loose:
                    raise cur.error("more than one module in the program text", start)
                module = self._parse_module()
            elif cur.peek_keyword("func.func") or cur.peek('"func.func"'):
                if module is not None:
                    raise cur.error("function outside the module", start)
                loose.append(self._parse_function_op())
            else:
                raise cur.expected("'module', 'func.func' or an alias definition")
        if module is None:
            if not loose:
                raise cur.error("no module in the program text")
            module = Module(None, frozen_mapping(self._functions_by_name(loose, 0)))
        return module

    def _skip_alias_value(self, sigil: str, name: str) -> None:
        # The value was (or will be) parsed on demand from the prescan; parse it here only to
        # move past it, and keep the first definition (a redefinition is an error in MLIR).
        if sigil == "#":
            self._alias_cache.setdefault(name, self._parse_alias_rhs())
        else:
            self._alias_cache.setdefault("!" + name, self.parse_type())

    def _parse_alias_rhs(self) -> Any:
        if self.cur.peek_keyword("loc"):
            return self._parse_loc_specifier()
        return self.parse_attribute()

    def _resolve_alias(self, sigil: str, name: str, at: int) -> Any:
        key = name if sigil == "#" else "!" + name
        if key in self._alias_cache:
            return self._alias_cache[key]
        table = self._alias_pos if sigil == "#" else self._type_alias_pos
        if name not in table:
            raise self.cur.error(f"undefined alias '{sigil}{name}'", at)
        if key in self._alias_busy:
            raise self.cur.error(f"alias '{sigil}{name}' refers to itself", at)
        if len(self._alias_busy) >= MAX_ALIAS_CHAIN:
            raise self.cur.error(f"alias '{sigil}{name}' ends a chain of more than {MAX_ALIAS_CHAIN} "
                                 "aliases that refer to aliases", at)
        self._alias_busy.add(key)
        saved = self.cur
        self.cur = saved.fork(table[name])
        try:
            value = self._parse_alias_rhs() if sigil == "#" else self.parse_type()
        finally:
            self.cur = saved
            self._alias_busy.discard(key)
        self._alias_cache[key] = value
        return value

    def _functions_by_name(self, functions: list[Function], at: int) -> dict[str, Function]:
        table: dict[str, Function] = {}
        for fn in functions:
            if fn.name in table:
                raise self.cur.error(f"function @{fn.name} is defined twice", at)
            table[fn.name] = fn
        return table

    def _parse_module(self) -> Module:
        cur = self.cur
        start = cur.pos
        if cur.accept('"builtin.module"'):
            cur.expect("(")
            cur.expect(")")
            props = self._parse_properties()
            cur.expect("(", "'(' before the module region")
            functions = self._parse_module_region()
            cur.expect(")")
            attrs = dict(props)
            if cur.peek("{"):
                attrs.update(self.parse_attribute_dict())
            cur.expect(":")
            self._expect_empty_function_type()
            name = attrs.pop("sym_name", None)
        else:
            cur.expect_keyword("module")
            name = cur.symbol()
            attrs = {}
            if cur.accept_keyword("attributes"):
                attrs = self.parse_attribute_dict()
            functions = self._parse_module_region()
        location = self._optional_location()
        if self._meshes:
            attrs["sdy.meshes"] = frozen_mapping(self._meshes)
        return Module(name, frozen_mapping(self._functions_by_name(functions, start)),
                      frozen_mapping(attrs), location)

    def _expect_empty_function_type(self) -> None:
        fn_type = self.parse_type()
        if not isinstance(fn_type, FunctionType) or fn_type.inputs or fn_type.results:
            raise self.cur.error("expected '() -> ()'")

    def _parse_module_region(self) -> list[Function]:
        cur = self.cur
        cur.expect("{", "'{' to open the module body")
        functions = []
        if cur.peek("^"):
            cur.caret_id()
            if cur.accept("("):
                cur.expect(")")
            cur.expect(":")
        while not cur.accept("}"):
            if cur.at_end():
                raise cur.expected("'}' to close the module body")
            if cur.peek_keyword("func.func") or cur.peek('"func.func"'):
                functions.append(self._parse_function_op())
            elif cur.peek_keyword("sdy.mesh"):
                self._parse_sdy_mesh()
            else:
                raise cur.expected("a function ('func.func') or an 'sdy.mesh' in the module body")
        return functions

    def _parse_sdy_mesh(self) -> None:
        """``sdy.mesh @name = <["x"=4, "y"=2], device_ids=[...]> {attrs}``: kept, as written, in
        the module attribute ``sdy.meshes`` (name -> text of the mesh), for the SPMD splitter."""
        cur = self.cur
        start = cur.pos
        cur.expect_keyword("sdy.mesh")
        name = cur.symbol()
        if name is None:
            raise cur.expected("a mesh name like '@mesh'")
        cur.expect("=", "'=' after the mesh name")
        body = cur.balanced("<", ">")
        if cur.peek("{"):
            self.parse_attribute_dict()
        self._optional_location()
        if name in self._meshes:
            raise cur.error(f"sdy.mesh @{name} is defined twice", start)
        self._meshes[name] = body

    # -- functions ---------------------------------------------------------------------------

    def _parse_function_op(self) -> Function:
        if self.cur.peek('"func.func"'):
            return self._parse_generic_function()
        return self._parse_pretty_function()

    def _parse_pretty_function(self) -> Function:
        cur = self.cur
        cur.expect_keyword("func.func")
        visibility = "public"
        for word in ("public", "private", "nested"):
            if cur.accept_keyword(word):
                visibility = word
        name = cur.symbol()
        if name is None:
            raise cur.expected("a function name like '@main'")
        cur.expect("(", "'(' to open the argument list")
        arg_specs: list[tuple[str, Type, int]] = []
        arg_attrs: list[dict] = []
        arg_locs: list[str | None] = []
        if not cur.accept(")"):
            while True:
                pos = cur.pos
                arg = cur.value_id()
                if arg is None:
                    raise cur.expected("an argument like '%arg0: tensor<f32>'")
                cur.expect(":")
                ty = self.parse_value_type()
                arg_specs.append((arg, ty, pos))
                arg_attrs.append(self.parse_attribute_dict() if cur.peek("{") else {})
                arg_locs.append(self._optional_location())
                if cur.accept(")"):
                    break
                cur.expect(",", "',' or ')' in the argument list")
        result_types: list[Type] = []
        result_attrs: list[dict] = []
        if cur.accept("->"):
            if cur.accept("("):
                if not cur.accept(")"):
                    while True:
                        result_types.append(self.parse_value_type())
                        result_attrs.append(self.parse_attribute_dict() if cur.peek("{") else {})
                        if cur.accept(")"):
                            break
                        cur.expect(",", "',' or ')' in the result list")
            else:
                result_types.append(self.parse_value_type())
                result_attrs.append({})
        attrs: dict = {}
        if cur.accept_keyword("attributes"):
            attrs = self.parse_attribute_dict()
        if not cur.peek("{"):
            raise cur.error(f"function @{name} has no body; external functions are not supported")
        body = self._parse_region(arg_specs, isolated=True)
        location = self._optional_location()
        return Function(
            name, visibility, body.args, tuple(frozen_mapping(a) for a in arg_attrs),
            tuple(result_types), tuple(frozen_mapping(a) for a in result_attrs), body,
            frozen_mapping(attrs), location, tuple(arg_locs))

    def _parse_generic_function(self) -> Function:
        cur = self.cur
        start = cur.pos
        cur.expect('"func.func"')
        cur.expect("(")
        cur.expect(")")
        attrs = self._parse_properties()
        if not cur.accept("("):
            raise cur.error("function has no body; external functions are not supported")
        arg_locs: list[str | None] = []
        body = self._parse_region(None, isolated=True, arg_locations=arg_locs)
        cur.expect(")")
        if cur.peek("{"):
            attrs.update(self.parse_attribute_dict())
        cur.expect(":")
        self._expect_empty_function_type()
        location = self._optional_location()
        name = attrs.pop("sym_name", None)
        fn_type = attrs.pop("function_type", None)
        if not isinstance(name, str) or not isinstance(fn_type, FunctionType):
            raise cur.error("func.func needs 'sym_name' and 'function_type' properties", start)
        visibility = attrs.pop("sym_visibility", "public")
        if tuple(a.type for a in body.args) != fn_type.inputs:
            raise cur.error(
                f"function @{name}: block arguments ({', '.join(str(a.type) for a in body.args)}) "
                f"do not match function_type {fn_type}", start)
        n_in, n_out = len(fn_type.inputs), len(fn_type.results)
        arg_attrs, res_attrs = attrs.pop("arg_attrs", ()), attrs.pop("res_attrs", ())
        for key, value in (("arg_attrs", arg_attrs), ("res_attrs", res_attrs)):
            if not isinstance(value, (list, tuple)) or not all(isinstance(a, Mapping) for a in value):
                raise cur.error(f"function @{name}: {key} must be a list of dictionaries like "
                                "[{}, {}]", start)
        arg_attrs = tuple(arg_attrs) or ({},) * n_in
        res_attrs = tuple(res_attrs) or ({},) * n_out
        if len(arg_attrs) != n_in or len(res_attrs) != n_out:
            raise cur.error(f"function @{name}: arg_attrs/res_attrs do not match its type", start)
        return Function(
            name, visibility, body.args, tuple(frozen_mapping(a) for a in arg_attrs),
            fn_type.results, tuple(frozen_mapping(a) for a in res_attrs), body,
            frozen_mapping(attrs), location, tuple(arg_locs))

    # -- regions, blocks, values ---------------------------------------------------------------

    def _new_value(self, name: str, ty: Type) -> Value:
        value = Value(name, ty, self._next_id)
        self._next_id += 1
        return value

    def _define(self, name: str, ty: Type, pos: int) -> Value:
        scope = self._scopes[-1]
        if name in scope.values:
            raise self.cur.error(f"redefinition of SSA value {name}", pos)
        value = self._new_value(name, ty)
        scope.values[name] = value
        return value

    def _lookup(self, use: _Use) -> Value:
        keys = [use.name] if use.index is None else [f"{use.name}#{use.index}"]
        if use.index == 0:
            keys.append(use.name)
        for scope in reversed(self._scopes):
            for key in keys:
                if key in scope.values:
                    return scope.values[key]
            if scope.isolated:
                break
        spelled = use.name if use.index is None else f"{use.name}#{use.index}"
        raise self.cur.error(f"use of undefined value {spelled}", use.pos)

    def _parse_region(self, arg_specs: list[tuple[str, Type, int]] | None, *, isolated: bool = False,
                      arg_locations: list | None = None) -> Block:
        """``{ [^bb0(args):] ops }``. ``arg_specs`` are arguments the op's syntax already
        named (function parameters, while iteration arguments, reducer arguments)."""
        cur = self.cur
        cur.expect("{", "'{' to open a region")
        self._scopes.append(_Scope(isolated))
        try:
            args: list[Value] = [self._define(n, t, p) for n, t, p in (arg_specs or [])]
            if cur.peek("^"):
                label_pos = cur.pos
                cur.caret_id()
                if cur.accept("("):
                    if arg_specs:
                        raise cur.error("block arguments given twice", label_pos)
                    if not cur.accept(")"):
                        while True:
                            pos = cur.pos
                            arg = cur.value_id()
                            if arg is None:
                                raise cur.expected("a block argument like '%arg0: tensor<f32>'")
                            cur.expect(":")
                            ty = self.parse_value_type()
                            loc = self._optional_location()
                            if arg_locations is not None:
                                arg_locations.append(loc)
                            args.append(self._define(arg, ty, pos))
                            if cur.accept(")"):
                                break
                            cur.expect(",", "',' or ')' in the block arguments")
                cur.expect(":", "':' after the block label")
            ops: list[Op] = []
            while not cur.accept("}"):
                if cur.at_end():
                    raise cur.expected("'}' to close the region")
                if cur.peek("^"):
                    raise cur.error("regions with more than one block are not supported "
                                    "(StableHLO regions have a single block)")
                ops.append(self._parse_operation())
        finally:
            self._scopes.pop()
        if arg_locations is not None and len(arg_locations) < len(args):
            arg_locations.extend([None] * (len(args) - len(arg_locations)))
        return Block(tuple(args), tuple(ops))

    def _parse_use(self) -> _Use | None:
        cur = self.cur
        cur.skip()
        pos = cur.pos
        name = cur.value_id()
        if name is None:
            return None
        index = None
        m = re.compile(r"#([0-9]+)").match(self.text, cur.pos)
        if m:
            index = int(m.group(1))
            cur.pos = m.end()
        return _Use(name, index, pos)

    def _expect_use(self) -> _Use:
        use = self._parse_use()
        if use is None:
            raise self.cur.expected("an SSA value like '%0'")
        return use

    def _parse_uses(self) -> tuple[list[_Use], bool]:
        """``%a, %b, ...`` (possibly none). Also reports whether a comma followed the last one
        (custom forms like ``%x, dims = [...]`` continue after it)."""
        uses: list[_Use] = []
        use = self._parse_use()
        if use is None:
            return uses, False
        uses.append(use)
        while self.cur.accept(","):
            use = self._parse_use()
            if use is None:
                return uses, True
            uses.append(use)
        return uses, False

    # -- operations --------------------------------------------------------------------------

    def _parse_operation(self) -> Op:
        cur = self.cur
        cur.skip()
        start = cur.pos
        groups: list[tuple[str, int, int]] = []
        if cur.peek("%"):
            while True:
                pos = cur.pos
                name = cur.value_id()
                if name is None:
                    raise cur.expected("a result name like '%0'")
                count = 1
                if cur.accept(":"):
                    count = cur.expect_integer("the number of results after ':'")
                groups.append((name, count, pos))
                if not cur.accept(","):
                    break
            cur.expect("=", "'=' after the result names")
        cur.skip()
        op_pos = cur.pos
        if cur.peek('"'):
            parts = self._parse_generic_op()
        else:
            name = cur.bare_id("an operation name")
            full = {"call": "func.call", "return": "func.return"}.get(name, name)
            handler = self._pretty.get(full)
            if handler is None:
                if full.split(".", 1)[0] in ("stablehlo", "chlo", "mhlo"):
                    handler = self._p_default
                else:
                    raise cur.error(
                        f"unknown operation '{name}': ops of other dialects must be written in "
                        "generic form (\"dialect.op\"(...) : (...) -> ...)", op_pos)
            parts = handler(full, op_pos)
        if not parts.location_parsed:
            parts.location = self._optional_location()
        op = self._build_op(parts, groups, start)
        line, column = cur.line_col(op_pos)
        return dataclasses.replace(op, source=f"line {line}, column {column}")

    def _build_op(self, parts: _OpParts, groups: list[tuple[str, int, int]], start: int) -> Op:
        cur = self.cur
        operands = [self._lookup(u) for u in parts.operands]
        if parts.operand_types is not None:
            if len(parts.operand_types) != len(operands):
                raise cur.error(
                    f"{parts.name}: {len(operands)} operands but its type lists "
                    f"{len(parts.operand_types)}", start)
            for use, value, ty in zip(parts.operands, operands, parts.operand_types):
                if value.type != ty:
                    raise cur.error(
                        f"{parts.name}: operand {value.name} has type {value.type}, "
                        f"but the op's type says {ty}", use.pos)
        n_declared = sum(count for _, count, _ in groups)
        if groups and n_declared != len(parts.result_types):
            raise cur.error(
                f"{parts.name}: {n_declared} result names for {len(parts.result_types)} results", start)
        if not groups and parts.result_types:
            # Results nobody names cannot be used; MLIR allows it, so do we.
            groups = [(f"%_unnamed{self._next_id}", len(parts.result_types), start)]
        results: list[Value] = []
        types = iter(parts.result_types)
        for name, count, pos in groups:
            if count == 1:
                results.append(self._define(name, next(types), pos))
            else:
                for i in range(count):
                    results.append(self._define(f"{name}#{i}", next(types), pos))
        attributes = self._finish_attributes(parts, operands, start)
        return Op(parts.name, tuple(operands), tuple(results), frozen_mapping(attributes),
                  tuple(parts.regions), parts.location)

    def _parse_generic_op(self) -> _OpParts:
        cur = self.cur
        name_pos = cur.pos
        name = cur.string()
        if name is None:
            raise cur.expected("a quoted operation name")
        if name in ("func.func", "builtin.module"):
            raise cur.error(f"'{name}' is only allowed at the top of the program", name_pos)
        cur.expect("(", "'(' before the operand list")
        uses, trailing = self._parse_uses()
        if trailing:
            raise cur.expected("an operand after ','")
        cur.expect(")", "')' after the operand list")
        if cur.peek("["):
            raise cur.error(f"{name}: successor blocks are not supported (StableHLO has none)")
        attrs = self._parse_properties()
        regions: list[Block] = []
        if cur.accept("("):
            while True:
                regions.append(self._parse_region(None))
                if cur.accept(")"):
                    break
                cur.expect(",", "',' or ')' after a region")
        if cur.peek("{"):
            attrs.update(self.parse_attribute_dict())
        cur.expect(":", "':' before the op's type")
        fn_type = self.parse_type()
        if not isinstance(fn_type, FunctionType):
            raise cur.error(f"{name}: expected a function type like '(tensor<f32>) -> tensor<f32>'")
        return _OpParts(name, uses, list(fn_type.inputs), list(fn_type.results), attrs, regions)

    def _parse_properties(self) -> dict[str, Any]:
        """``<{...}>`` (MLIR properties) or nothing."""
        cur = self.cur
        if cur.peek("<{"):
            cur.expect("<")
            props = self.parse_attribute_dict()
            cur.expect(">", "'>' to close the properties")
            return props
        return {}

    # -- locations ---------------------------------------------------------------------------

    def _optional_location(self) -> str | None:
        if self.cur.peek_keyword("loc"):
            return render_location(self._parse_loc_specifier())
        return None

    def _parse_loc_specifier(self) -> _Loc | None:
        cur = self.cur
        cur.expect_keyword("loc")
        cur.expect("(", "'(' after 'loc'")
        loc = self._parse_loc_body()
        cur.expect(")", "')' to close the location")
        return loc

    def _parse_loc_body(self) -> _Loc | None:
        cur = self.cur
        cur.skip()
        start = cur.pos
        if cur.accept_keyword("unknown"):
            return None
        if cur.peek("#"):
            name = cur.hash_id()
            value = self._resolve_alias("#", name, start)
            if value is not None and not isinstance(value, _Loc):
                raise cur.error(f"alias #{name} is not a location", start)
            return value
        if cur.accept_keyword("callsite"):
            cur.expect("(")
            callee = self._parse_loc_body()
            cur.expect_keyword("at")
            caller = self._parse_loc_body()
            cur.expect(")")
            return _Loc("callsite", (callee, caller))
        if cur.accept_keyword("fused"):
            if cur.peek("<"):
                cur.balanced("<", ">")
            cur.expect("[")
            children = []
            if not cur.accept("]"):
                while True:
                    children.append(self._parse_loc_body())
                    if cur.accept("]"):
                        break
                    cur.expect(",")
            return _Loc("fused", tuple(children))
        text = cur.string()
        if text is None:
            raise cur.expected("a location ('unknown', a string, 'callsite(...)', 'fused[...]')")
        if cur.accept(":"):
            line = cur.expect_integer("a line number")
            cur.expect(":")
            col = cur.expect_integer("a column number")
            if cur.accept_keyword("to"):
                # A source range: `to :col` or `to line:col`; the start is what we report.
                if not cur.accept(":"):
                    cur.expect_integer("a line number")
                    cur.expect(":")
                cur.expect_integer("a column number")
            return _Loc("file", (text, line, col))
        child = None
        if cur.accept("("):
            child = self._parse_loc_body()
            cur.expect(")")
        return _Loc("name", (text, child))

    # -- types -------------------------------------------------------------------------------

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
        if _SCALAR_TYPE.match(word):
            return word
        raise cur.error(f"unknown type '{word}'", start)

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

    # -- attributes --------------------------------------------------------------------------

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
            return _scalar_value(text, ty, cur, start)
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
        if word in ("tensor", "tuple", "complex") or _SCALAR_TYPE.match(word):
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
                    values.append(_scalar_value(text, element, cur, pos))
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
        ty = self.parse_type()
        if not isinstance(ty, TensorType):
            raise cur.error("a dense literal needs a tensor type", start)
        try:
            if kind == "hex":
                array = _dense_from_hex(literal, ty)
            else:
                array = _dense_from_literal(literal, ty, splat=kind == "splat")
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
            array = _dense_from_bytes(blob[4:], ty)
        except ValueError as exc:
            raise cur.error(f"bad dense_resource<{key}> for {ty}: {exc}", start) from None
        array.flags.writeable = False
        return array, ty

    # -- defaults and canonical forms ----------------------------------------------------------

    def _finish_attributes(self, parts: _OpParts, operands: list[Value], start: int) -> dict[str, Any]:
        attrs = dict(parts.attributes)
        for key in _INT_LIST_ATTRS.intersection(attrs):
            value = attrs[key]
            if isinstance(value, np.ndarray) and value.ndim <= 1:
                attrs[key] = tuple(int(v) for v in value.reshape(-1))
            elif isinstance(value, tuple) and all(isinstance(v, (int, np.integer)) for v in value):
                attrs[key] = tuple(int(v) for v in value)
        filler = _DEFAULTS.get(parts.name)
        if filler is not None:
            try:
                filler(attrs, operands, parts.result_types)
            except _MissingAttribute as exc:
                raise self.cur.error(f"{parts.name}: missing attribute '{exc.args[0]}'", start) from None
        return attrs

    # -- pretty (custom assembly) forms -------------------------------------------------------

    def _pretty_table(self) -> dict[str, Callable[[str, int], _OpParts]]:
        table: dict[str, Callable[[str, int], _OpParts]] = {
            "stablehlo.constant": self._p_constant,
            "stablehlo.iota": self._p_iota,
            "stablehlo.compare": self._p_compare,
            "stablehlo.select": self._p_select,
            "stablehlo.broadcast_in_dim": self._p_dims("broadcast_dimensions", "dims"),
            "stablehlo.transpose": self._p_dims("permutation", "dims"),
            "stablehlo.reverse": self._p_dims("dimensions", "dims"),
            "stablehlo.broadcast": self._p_dims("broadcast_sizes", "sizes"),
            "stablehlo.concatenate": self._p_concatenate,
            "stablehlo.dynamic_slice": self._p_dynamic_slice,
            "stablehlo.pad": self._p_pad,
            "stablehlo.slice": self._p_slice,
            "stablehlo.dot_general": self._p_dot_general,
            "stablehlo.dot": self._p_dot,
            "stablehlo.convolution": self._p_convolution,
            "stablehlo.reduce": self._p_reduce,
            "stablehlo.while": self._p_while,
            "stablehlo.return": self._p_return,
            "func.return": self._p_return,
            "func.call": self._p_call,
            "stablehlo.optimization_barrier": self._p_optimization_barrier,
            "stablehlo.tuple": self._p_tuple,
            "stablehlo.get_tuple_element": self._p_get_tuple_element,
            "stablehlo.complex": self._p_complex,
            "stablehlo.rng_bit_generator": self._p_keyword_attr("rng_algorithm", "algorithm", RngAlgorithm),
            "stablehlo.rng": self._p_keyword_attr("rng_distribution", "distribution", RngDistribution),
            "stablehlo.reduce_precision": self._p_reduce_precision,
            "stablehlo.fft": self._p_fft,
            "stablehlo.custom_call": self._p_custom_call,
            "stablehlo.composite": self._p_composite,
            "stablehlo.get_dimension_size": self._p_get_dimension_size,
            "chlo.top_k": self._p_top_k,
            "sdy.manual_computation": self._p_manual_computation,
            "sdy.return": self._p_return,
        }
        return table

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

    def _p_default(self, name: str, pos: int) -> _OpParts:
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
        return _OpParts(name, uses, ins, outs, attrs)

    def _parse_keyword_value(self) -> Any:
        """The value in ``key = value`` of a custom form: an attribute, or a bare word (an
        enum value such as ``DEFAULT``), kept as text."""
        cur = self.cur
        word = re.compile(r"[A-Za-z_][A-Za-z0-9_]*").match(self.text, cur.pos) if not cur.at_end() else None
        if word and word.group(0) not in ("true", "false", "dense", "array", "dense_resource", "unit") \
                and not _SCALAR_TYPE.match(word.group(0)) and word.group(0) not in ("tensor", "tuple", "complex"):
            cur.pos = word.end()
            return word.group(0)
        return self.parse_attribute(typed=False)

    def _p_constant(self, name: str, pos: int) -> _OpParts:
        cur = self.cur
        if cur.accept("("):
            cur.expect(")")
            attrs = self._parse_properties()
            attrs.update(self._opt_attr_dict())
            cur.expect(":")
            fn = self.parse_type()
            if not isinstance(fn, FunctionType) or fn.inputs or len(fn.results) != 1:
                raise cur.error("stablehlo.constant: expected '() -> tensor<...>'", pos)
            return _OpParts(name, [], [], list(fn.results), attrs)
        attrs = self._opt_attr_dict()
        if cur.peek_keyword("dense"):
            value, ty = self._parse_dense()
        elif cur.peek_keyword("dense_resource"):
            value, ty = self._parse_dense_resource()
        else:
            raise cur.expected("a dense literal like 'dense<1.0> : tensor<f32>'")
        attrs["value"] = value
        return _OpParts(name, [], [], [ty], attrs)

    def _p_iota(self, name: str, pos: int) -> _OpParts:
        cur = self.cur
        cur.expect_keyword("dim")
        cur.expect("=")
        dim = cur.expect_integer("the iota dimension")
        attrs = self._opt_attr_dict()
        attrs["iota_dimension"] = dim
        cur.expect(":")
        return _OpParts(name, [], [], [self.parse_value_type()], attrs)

    def _p_compare(self, name: str, pos: int) -> _OpParts:
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
        return _OpParts(name, [lhs, rhs], ins, outs, attrs)

    def _enum_word(self, enum_type: type) -> Any:
        cur = self.cur
        pos = cur.pos
        word = cur.bare_id(f"a {enum_type.__name__} value")
        try:
            return enum_type(word)
        except ValueError:
            allowed = ", ".join(e.value for e in enum_type)
            raise cur.error(f"unknown {enum_type.__name__} '{word}' (expected one of {allowed})", pos) from None

    def _p_select(self, name: str, pos: int) -> _OpParts:
        uses, trailing = self._parse_uses()
        attrs = self._opt_attr_dict()
        self.cur.expect(":")
        kind, types, results = self._signature()
        if kind == "fn":
            return _OpParts(name, uses, types, results, attrs)
        if len(types) != 2:
            raise self.cur.error("stablehlo.select: expected 'pred_type, value_type' or a function type")
        return _OpParts(name, uses, [types[0], types[1], types[1]], [types[1]], attrs)

    def _p_dims(self, attr: str, keyword: str) -> Callable[[str, int], _OpParts]:
        def parse(name: str, pos: int) -> _OpParts:
            cur = self.cur
            operand = self._expect_use()
            cur.expect(",")
            cur.expect_keyword(keyword)
            cur.expect("=")
            values = self._parse_int_list()
            attrs = self._opt_attr_dict()
            attrs[attr] = values
            cur.expect(":")
            ins, outs = self._same_type_signature(name, 1)
            return _OpParts(name, [operand], ins, outs, attrs)
        return parse

    def _p_concatenate(self, name: str, pos: int) -> _OpParts:
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
        return _OpParts(name, uses, ins, outs, attrs)

    def _p_dynamic_slice(self, name: str, pos: int) -> _OpParts:
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
        return _OpParts(name, uses, ins, outs, attrs)

    def _p_pad(self, name: str, pos: int) -> _OpParts:
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
        return _OpParts(name, [operand, value], ins, outs, attrs)

    def _p_slice(self, name: str, pos: int) -> _OpParts:
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
        return _OpParts(name, [operand], ins, outs, attrs)

    def _parse_precision_list(self) -> tuple[Precision, ...]:
        cur = self.cur
        cur.expect("[")
        values = []
        while not cur.accept("]"):
            if values:
                cur.expect(",")
            values.append(self._enum_word(Precision))
        return tuple(values)

    def _p_dot_general(self, name: str, pos: int) -> _OpParts:
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
        return _OpParts(name, [lhs, rhs], ins, outs, attrs)

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

    def _p_dot(self, name: str, pos: int) -> _OpParts:
        cur = self.cur
        lhs = self._expect_use()
        cur.expect(",")
        rhs = self._expect_use()
        attrs: dict[str, Any] = {}
        self._precision_and_algorithm(attrs)
        attrs.update(self._opt_attr_dict())
        cur.expect(":")
        ins, outs = self._same_type_signature(name, 2)
        return _OpParts(name, [lhs, rhs], ins, outs, attrs)

    def _p_convolution(self, name: str, pos: int) -> _OpParts:
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
                rows = []
                while not cur.accept("]"):
                    if rows:
                        cur.expect(",")
                    row = self._parse_int_list()
                    if len(row) != 2:
                        raise cur.error(f"window pad entries are [low, high] pairs, got {list(row)}")
                    rows.append(row)
                attrs["padding"] = _readonly(np.array(rows, dtype=np.int64).reshape(len(rows), 2))
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
        return _OpParts(name, uses, ins, outs, attrs)

    def _p_reduce(self, name: str, pos: int) -> _OpParts:
        cur = self.cur
        inputs: list[_Use] = []
        inits: list[_Use] = []
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
            return _OpParts(name, inputs + inits, list(fn.inputs), list(fn.results), attrs,
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
        return _OpParts(name, inputs + inits, list(fn.inputs), list(fn.results), attrs, [body])

    def _p_while(self, name: str, pos: int) -> _OpParts:
        cur = self.cur
        cur.expect("(")
        iter_args: list[tuple[str, int]] = []
        uses: list[_Use] = []
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
        return _OpParts(name, uses, types, list(types), attrs, [cond, body])

    def _p_return(self, name: str, pos: int) -> _OpParts:
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
        return _OpParts(name, uses, types, [], attrs)

    def _p_manual_computation(self, name: str, pos: int) -> _OpParts:
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
        return _OpParts(name, uses, list(fn.inputs), list(fn.results), attrs, [body])

    def _p_call(self, name: str, pos: int) -> _OpParts:
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
        return _OpParts(name, uses, list(fn.inputs), list(fn.results), attrs)

    def _p_optimization_barrier(self, name: str, pos: int) -> _OpParts:
        cur = self.cur
        attrs = self._opt_attr_dict()
        if cur.accept("("):
            cur.expect(")")
            return _OpParts(name, [], [], [], attrs)
        uses, _ = self._parse_uses()
        cur.expect(":")
        kind, types, results = self._signature()
        if kind == "fn":
            return _OpParts(name, uses, types, results, attrs)
        return _OpParts(name, uses, types, list(types), attrs)

    def _p_tuple(self, name: str, pos: int) -> _OpParts:
        uses, _ = self._parse_uses()
        attrs = self._opt_attr_dict()
        self.cur.expect(":")
        ty = self.parse_value_type()
        if not isinstance(ty, TupleType):
            raise self.cur.error("stablehlo.tuple: expected a tuple type", pos)
        return _OpParts(name, uses, list(ty.types), [ty], attrs)

    def _p_get_tuple_element(self, name: str, pos: int) -> _OpParts:
        cur = self.cur
        operand = self._expect_use()
        cur.expect("[")
        index = cur.expect_integer("the tuple index")
        cur.expect("]")
        attrs = self._opt_attr_dict()
        attrs["index"] = index
        cur.expect(":")
        ins, outs = self._same_type_signature(name, 1)
        return _OpParts(name, [operand], ins, outs, attrs)

    def _p_complex(self, name: str, pos: int) -> _OpParts:
        uses, _ = self._parse_uses()
        attrs = self._opt_attr_dict()
        self.cur.expect(":")
        kind, types, results = self._signature()
        if kind == "fn":
            return _OpParts(name, uses, types, results, attrs)
        ty = types[0]
        if not isinstance(ty, TensorType) or not ty.is_complex:
            raise self.cur.error("stablehlo.complex: expected a complex tensor type", pos)
        real = ty.with_element_type(ty.element_type[len("complex<"):-1])
        return _OpParts(name, uses, [real, real], [ty], attrs)

    def _p_keyword_attr(self, attr: str, keyword: str, enum_type: type) -> Callable[[str, int], _OpParts]:
        def parse(name: str, pos: int) -> _OpParts:
            cur = self.cur
            uses, trailing = self._parse_uses()
            if not trailing:
                raise cur.expected(f"',' and '{keyword} = ...'")
            cur.expect_keyword(keyword)
            cur.expect("=")
            attrs: dict[str, Any] = {attr: self._enum_word(enum_type)}
            attrs.update(self._opt_attr_dict())
            cur.expect(":")
            ins, outs = self._same_type_signature(name, len(uses))
            return _OpParts(name, uses, ins, outs, attrs)
        return parse

    def _p_reduce_precision(self, name: str, pos: int) -> _OpParts:
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
        return _OpParts(name, [operand], ins, outs, attrs)

    def _p_fft(self, name: str, pos: int) -> _OpParts:
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
        return _OpParts(name, [operand], ins, outs, attrs)

    def _p_custom_call(self, name: str, pos: int) -> _OpParts:
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
        return _OpParts(name, uses, ins, outs, attrs)

    def _p_composite(self, name: str, pos: int) -> _OpParts:
        cur = self.cur
        composite = cur.expect_string("the composite name")
        uses, _ = self._parse_uses()
        attrs = self._opt_attr_dict()
        attrs["name"] = composite
        cur.expect(":")
        ins, outs = self._same_type_signature(name, len(uses))
        return _OpParts(name, uses, ins, outs, attrs)

    def _p_get_dimension_size(self, name: str, pos: int) -> _OpParts:
        cur = self.cur
        operand = self._expect_use()
        cur.expect(",")
        cur.expect_keyword("dim")
        cur.expect("=")
        attrs = {"dimension": cur.expect_integer()}
        attrs.update(self._opt_attr_dict())
        cur.expect(":")
        ins, outs = self._same_type_signature(name, 1)
        return _OpParts(name, [operand], ins, outs, attrs)

    def _p_top_k(self, name: str, pos: int) -> _OpParts:
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
        return _OpParts(name, [operand], types, results, attrs)


# -- dense literals ---------------------------------------------------------------------------


def _readonly(array: np.ndarray) -> np.ndarray:
    array.flags.writeable = False
    return array


def _uint_for(dtype: np.dtype) -> np.dtype:
    return np.dtype(f"<u{dtype.itemsize}")


def _scalar_value(text: str, ty: Any, cur: Cursor, pos: int) -> Any:
    """A number attribute with an optional type: int, float or bool."""
    is_hex = "x" in text
    if isinstance(ty, str) and ty not in ("index", "none") and not ty.startswith(("i", "si", "ui")):
        dtype = element_dtype(ty)
        if is_hex:
            bits = int(text, 16)
            if not 0 <= bits < 1 << (8 * dtype.itemsize):
                raise cur.error(f"{text} is not a bit pattern of {ty} ({dtype.itemsize * 8} bits)", pos)
            return float(np.array(bits, dtype=_uint_for(dtype)).view(dtype))
        return float(text)
    if ty == "i1":
        return bool(int(text, 0) if is_hex else int(float(text)))
    if not is_hex and any(c in text for c in ".eE"):
        if ty is not None and ty != "none":
            raise cur.error(f"expected an integer for type {ty}, got {text}", pos)
        return float(text)
    value = int(text, 16) if is_hex else int(text)
    bits = _integer_bits(ty)
    # Signless integers hold either reading of their bits, as in MLIR.
    if bits is not None and not -(1 << (bits - 1)) * (ty[0] != "u") <= value < 1 << (bits - (ty[0] == "s")):
        raise cur.error(f"{text} does not fit in {ty}", pos)
    return value


def _integer_bits(ty: Any) -> int | None:
    """The width of an integer type spelled ``i32``, ``si8``, ``ui64`` or ``index``; else None."""
    if ty == "index":
        return 64
    if isinstance(ty, str):
        m = re.fullmatch(r"[su]?i([0-9]{1,4})", ty)
        if m and int(m.group(1)) > 0:
            return int(m.group(1))
    return None


def _element_from_token(token: Any, dtype: np.dtype, is_bool: bool) -> Any:
    if isinstance(token, tuple) and dtype.kind != "c":
        raise ValueError(f"a complex element ({token[0]}, {token[1]}) in a tensor of {dtype}")
    if is_bool:
        if token in ("true", "false"):
            return token == "true"
        return bool(int(token, 0))
    if isinstance(token, tuple):
        return complex(float(token[0]), float(token[1]))
    if dtype.kind in "iu":
        if token in ("true", "false"):
            return int(token == "true")
        return int(token, 16) if "x" in token else int(token)
    if token in ("true", "false"):
        return float(token == "true")
    return float(token)


def _flatten(literal: Any, shape: list[int], depth: int, out: list[Any]) -> None:
    if isinstance(literal, list):
        if len(shape) <= depth:
            shape.append(len(literal))
        elif shape[depth] != len(literal):
            raise ValueError("ragged nested list")
        for item in literal:
            _flatten(item, shape, depth + 1, out)
    else:
        if len(shape) != depth:
            raise ValueError("ragged nested list")
        out.append(literal)


def _physical_memory() -> int | None:
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (AttributeError, ValueError, OSError):
        return None


def _check_constant_size(ty: TensorType) -> None:
    """A splat can claim any shape in a few bytes of text: refuse one this machine cannot hold
    before numpy tries (a failed allocation of terabytes is an error, one of gigabytes too many
    is the OOM killer)."""
    nbytes = ty.size * ty.dtype.itemsize
    memory = _physical_memory()
    if memory is not None and nbytes > memory:
        raise ValueError(f"the constant would take {nbytes} bytes, more than this machine's "
                         f"memory ({memory} bytes)")


def _dense_from_literal(literal: Any, ty: TensorType, *, splat: bool) -> np.ndarray:
    _check_constant_size(ty)
    dtype = ty.dtype
    if splat:
        tokens = [literal]
        shape: list[int] = []
    else:
        tokens = []
        shape = []
        _flatten(literal, shape, 0, tokens)
        if not literal:
            shape = [0]
    array = np.empty(len(tokens), dtype=dtype)
    hexes = [i for i, t in enumerate(tokens) if isinstance(t, str) and "x" in t]
    if dtype.kind == "f" or dtype.kind == "V" or (dtype.kind not in "iubc"):
        # Floats (numpy's and ml_dtypes'): decimal text via float64, hex text as bit patterns.
        hex_set = set(hexes)
        decimal = [i for i in range(len(tokens)) if i not in hex_set]
        if decimal:
            values = np.array([_element_from_token(tokens[i], dtype, False) for i in decimal],
                              dtype=np.float64)
            array[decimal] = values.astype(dtype)
        if hexes:
            bits = array.view(_uint_for(dtype))
            for i in hexes:
                bits[i] = int(tokens[i].lstrip("+"), 16)
    elif dtype.kind == "c":
        array[:] = [_element_from_token(t, dtype, False) for t in tokens]
    else:
        values = [_element_from_token(t, dtype, ty.is_bool) for t in tokens]
        info = None if ty.is_bool else np.iinfo(dtype)
        for v in values:
            if info is not None and not (info.min <= v <= info.max):
                raise OverflowError(f"{v} does not fit in {ty.element_type}")
        array[:] = values
    if splat:
        return np.full(ty.shape, array[0], dtype=dtype)
    if tuple(shape) != ty.shape:
        if len(tokens) == 1:
            return np.full(ty.shape, array[0], dtype=dtype)
        raise ValueError(f"literal has shape {tuple(shape)}")
    return array.reshape(ty.shape)


def _dense_from_hex(literal: str, ty: TensorType) -> np.ndarray:
    if not literal.startswith("0x"):
        raise ValueError("a string dense literal must be hex ('0x...')")
    return _dense_from_bytes(bytes.fromhex(literal[2:]), ty)


def _dense_from_bytes(data: bytes, ty: TensorType) -> np.ndarray:
    _check_constant_size(ty)
    dtype = ty.dtype.newbyteorder("<") if ty.dtype.itemsize > 1 else ty.dtype
    n = ty.size
    if ty.is_bool:
        raw = np.frombuffer(data, dtype=np.uint8)
        if raw.size == n:
            return (raw != 0).reshape(ty.shape)
        if raw.size == 1:
            return np.full(ty.shape, raw[0] != 0)
        if raw.size == (n + 7) // 8:
            return np.unpackbits(raw, bitorder="little")[:n].astype(bool).reshape(ty.shape)
        raise ValueError(f"{raw.size} bytes for {n} booleans")
    item = dtype.itemsize
    if len(data) == item and n != 1:
        return np.full(ty.shape, np.frombuffer(data, dtype=dtype)[0], dtype=ty.dtype)
    if len(data) != n * item:
        raise ValueError(f"{len(data)} bytes of data, expected {n * item}")
    return np.frombuffer(data, dtype=dtype).astype(ty.dtype).reshape(ty.shape)


# -- spec defaults ----------------------------------------------------------------------------


class _MissingAttribute(Exception):
    pass


def _require(attrs: dict, *names: str) -> None:
    for name in names:
        if name not in attrs:
            raise _MissingAttribute(name)


def _rank(value: Value) -> int:
    return value.type.rank if isinstance(value.type, TensorType) else 0


def _fill_compare(attrs, operands, results):
    _require(attrs, "comparison_direction")
    if "compare_type" not in attrs or attrs["compare_type"] == ComparisonType.NOTYPE:
        ty = operands[0].type if operands else None
        if isinstance(ty, TensorType):
            if ty.is_float or ty.is_complex:
                attrs["compare_type"] = ComparisonType.FLOAT
            elif ty.is_signed:
                attrs["compare_type"] = ComparisonType.SIGNED
            else:
                attrs["compare_type"] = ComparisonType.UNSIGNED


def _fill_dot(attrs, operands, results):
    attrs.setdefault("precision_config", (Precision.DEFAULT, Precision.DEFAULT))


def _fill_dot_general(attrs, operands, results):
    _require(attrs, "dot_dimension_numbers")
    _fill_dot(attrs, operands, results)


def _fill_convolution(attrs, operands, results):
    _require(attrs, "dimension_numbers")
    n = len(attrs["dimension_numbers"].input_spatial_dimensions)
    attrs.setdefault("window_strides", (1,) * n)
    attrs.setdefault("padding", _readonly(np.zeros((n, 2), dtype=np.int64)))
    attrs.setdefault("lhs_dilation", (1,) * n)
    attrs.setdefault("rhs_dilation", (1,) * n)
    attrs.setdefault("window_reversal", (False,) * n)
    attrs.setdefault("feature_group_count", 1)
    attrs.setdefault("batch_group_count", 1)
    attrs.setdefault("precision_config", (Precision.DEFAULT, Precision.DEFAULT))
    if isinstance(attrs["padding"], np.ndarray):
        attrs["padding"] = _readonly(np.asarray(attrs["padding"], dtype=np.int64).reshape(n, 2))
    attrs["window_reversal"] = tuple(bool(v) for v in attrs["window_reversal"])


def _fill_window(attrs, operands, results, *, require_dims: bool = True):
    rank = _rank(operands[0]) if operands else 0
    if require_dims:
        _require(attrs, "window_dimensions")
    else:
        attrs.setdefault("window_dimensions", (1,) * rank)
    attrs.setdefault("window_strides", (1,) * rank)
    attrs.setdefault("padding", _readonly(np.zeros((rank, 2), dtype=np.int64)))
    if isinstance(attrs["padding"], np.ndarray):
        attrs["padding"] = _readonly(np.asarray(attrs["padding"], dtype=np.int64).reshape(rank, 2))


def _fill_reduce_window(attrs, operands, results):
    _fill_window(attrs, operands, results)
    rank = _rank(operands[0]) if operands else 0
    attrs.setdefault("base_dilations", (1,) * rank)
    attrs.setdefault("window_dilations", (1,) * rank)


def _fill_select_and_scatter(attrs, operands, results):
    _fill_window(attrs, operands, results, require_dims=False)


def _fill_slice(attrs, operands, results):
    _require(attrs, "start_indices", "limit_indices")
    attrs.setdefault("strides", (1,) * len(attrs["start_indices"]))


def _fill_sort(attrs, operands, results):
    rank = _rank(operands[0]) if operands else 0
    dim = int(attrs.get("dimension", -1))
    attrs["dimension"] = dim + rank if dim < 0 else dim
    attrs["is_stable"] = bool(attrs.get("is_stable", False))


def _fill_gather(attrs, operands, results):
    _require(attrs, "dimension_numbers", "slice_sizes")
    attrs["indices_are_sorted"] = bool(attrs.get("indices_are_sorted", False))


def _fill_scatter(attrs, operands, results):
    _require(attrs, "scatter_dimension_numbers")
    attrs["indices_are_sorted"] = bool(attrs.get("indices_are_sorted", False))
    attrs["unique_indices"] = bool(attrs.get("unique_indices", False))


def _fill_pad(attrs, operands, results):
    _require(attrs, "edge_padding_low", "edge_padding_high")
    attrs.setdefault("interior_padding", (0,) * len(attrs["edge_padding_low"]))


def _fill_rng_bit_generator(attrs, operands, results):
    attrs.setdefault("rng_algorithm", RngAlgorithm.DEFAULT)


def _requires(*names: str):
    def fill(attrs, operands, results):
        _require(attrs, *names)
    return fill


_DEFAULTS: dict[str, Callable[[dict, list, list], None]] = {
    "stablehlo.compare": _fill_compare,
    "stablehlo.dot": _fill_dot,
    "stablehlo.dot_general": _fill_dot_general,
    "stablehlo.convolution": _fill_convolution,
    "stablehlo.reduce_window": _fill_reduce_window,
    "stablehlo.select_and_scatter": _fill_select_and_scatter,
    "stablehlo.slice": _fill_slice,
    "stablehlo.sort": _fill_sort,
    "stablehlo.gather": _fill_gather,
    "stablehlo.scatter": _fill_scatter,
    "stablehlo.pad": _fill_pad,
    "stablehlo.rng_bit_generator": _fill_rng_bit_generator,
    "stablehlo.constant": _requires("value"),
    "stablehlo.iota": _requires("iota_dimension"),
    "stablehlo.broadcast_in_dim": _requires("broadcast_dimensions"),
    "stablehlo.transpose": _requires("permutation"),
    "stablehlo.reverse": _requires("dimensions"),
    "stablehlo.reduce": _requires("dimensions"),
    "stablehlo.concatenate": _requires("dimension"),
    "stablehlo.dynamic_slice": _requires("slice_sizes"),
    "stablehlo.get_tuple_element": _requires("index"),
    "chlo.top_k": _requires("k"),
    "func.call": _requires("callee"),
}
