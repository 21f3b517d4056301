"""Structure: the module, its functions, their regions and blocks, SSA values and operations.

:class:`Parser` is the complete parser (it builds on the readers of the sibling modules) and
reads what holds a program together: ``module`` (pretty or ``"builtin.module"``) and its
attributes and ``sdy.mesh`` definitions, ``func.func`` in either form, regions with their block
arguments, SSA values in scopes (a value is visible in the regions nested below its
definition, not above, and not across ``func.func``), and each operation: its result names,
its generic form or its custom form (through :data:`.forms.PRETTY`), its types checked
against its operands, and its attributes completed by its definition (:data:`..ops.OPS`):
required attributes present, defaults filled in, integer lists normalised.
"""

from __future__ import annotations

import re
from typing import Any, Mapping, Sequence

import numpy as np

from ..ir import Block, Function, FunctionType, Module, Op, Type, Value, frozen_mapping
from ..ops import OPS, MissingAttributeError
from .forms import PRETTY, OpFormReader, OpParts, Use

__all__ = ["Parser"]

#: Attributes whose value is a list of integers, however the text spelled it (``array<i64:
#: ...>`` today, ``dense<...> : tensor<Nxi64>`` in older StableHLO): those the op definitions
#: declare ``tuple[int]``, normalised by name on every op (an op without a definition reads the
#: same as one with).
_INT_LIST_ATTRS = frozenset(a.name for d in OPS.values() for a in d.attributes if a.is_int_list)


class _Scope:
    """The SSA values one region defines; ``isolated`` (a function body) hides the outer ones."""

    def __init__(self, isolated: bool) -> None:
        self.isolated = isolated
        self.values: dict[str, Value] = {}


class Parser(OpFormReader):
    """StableHLO text -> :class:`~..ir.Module` (one parser per text: :meth:`parse` once)."""

    def __init__(self, text: str) -> None:
        super().__init__(text)
        self._next_id = 0
        self._scopes: list[_Scope] = []
        #: ``sdy.mesh`` definitions of the module: name -> ``<...>`` text.
        self._meshes: dict[str, str] = {}

    # -- whole-file structure ----------------------------------------------------------------

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
            elif cur.peek('"sdy.mesh"'):
                self._parse_generic_sdy_mesh()
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
        self._add_mesh(name, body, start)

    def _parse_generic_sdy_mesh(self) -> None:
        """``"sdy.mesh"() <{mesh = #sdy.mesh<[...]>, sym_name = "name"}> {attrs} : () -> ()``,
        kept as the pretty form is."""
        cur = self.cur
        start = cur.pos
        cur.expect('"sdy.mesh"')
        cur.expect("(", "'(' after \"sdy.mesh\"")
        cur.expect(")", "')': sdy.mesh has no operands")
        props = self._parse_properties()
        if cur.peek("{"):
            self.parse_attribute_dict()
        cur.expect(":")
        self._expect_empty_function_type()
        self._optional_location()
        name, mesh = props.get("sym_name"), str(props.get("mesh", ""))
        if not isinstance(name, str) or not mesh.startswith("#sdy.mesh<"):
            raise cur.error('"sdy.mesh" needs \'sym_name\' and \'mesh = #sdy.mesh<...>\' properties', start)
        self._add_mesh(name, mesh[len("#sdy.mesh"):], start)

    def _add_mesh(self, name: str, body: str, start: int) -> None:
        if name in self._meshes:
            raise self.cur.error(f"sdy.mesh @{name} is defined twice", start)
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
        # Checked just below: each a list of dictionaries.
        arg_attrs: Sequence[Mapping[str, Any]] = attrs.pop("arg_attrs", ())
        res_attrs: Sequence[Mapping[str, Any]] = attrs.pop("res_attrs", ())
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

    def _lookup(self, use: Use) -> Value:
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

    def _parse_use(self) -> Use | None:
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
        return Use(name, index, pos)

    def _expect_use(self) -> Use:
        use = self._parse_use()
        if use is None:
            raise self.cur.expected("an SSA value like '%0'")
        return use

    def _parse_uses(self) -> tuple[list[Use], bool]:
        """``%a, %b, ...`` (possibly none). Also reports whether a comma followed the last one
        (custom forms like ``%x, dims = [...]`` continue after it)."""
        uses: list[Use] = []
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
            handler = PRETTY.get(full)
            if handler is None:
                if full.split(".", 1)[0] in ("stablehlo", "chlo", "mhlo"):
                    handler = Parser._read_default
                else:
                    raise cur.error(
                        f"unknown operation '{name}': ops of other dialects must be written in "
                        "generic form (\"dialect.op\"(...) : (...) -> ...)", op_pos)
            parts = handler(self, full, op_pos)
        if not parts.location_parsed:
            parts.location = self._optional_location()
        line, column = cur.line_col(op_pos)
        return self._build_op(parts, groups, start, f"line {line}, column {column}")

    def _build_op(self, parts: OpParts, groups: list[tuple[str, int, int]], start: int, source: str) -> Op:
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
                  tuple(parts.regions), parts.location, source)

    def _parse_generic_op(self) -> OpParts:
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
        return OpParts(name, uses, list(fn_type.inputs), list(fn_type.results), attrs, regions)

    # -- defaults and canonical forms ----------------------------------------------------------

    def _finish_attributes(self, parts: OpParts, operands: list[Value], start: int) -> dict[str, Any]:
        attrs = dict(parts.attributes)
        for key in _INT_LIST_ATTRS.intersection(attrs):
            value = attrs[key]
            if isinstance(value, np.ndarray) and value.ndim <= 1:
                attrs[key] = tuple(int(v) for v in value.reshape(-1))
            elif isinstance(value, tuple) and all(isinstance(v, (int, np.integer)) for v in value):
                attrs[key] = tuple(int(v) for v in value)
        definition = OPS.get(parts.name)
        if definition is not None:
            try:
                definition.complete_attributes(attrs, operands)
            except MissingAttributeError as exc:
                raise self.cur.error(f"{parts.name}: missing attribute '{exc.args[0]}'", start) from None
        return attrs
