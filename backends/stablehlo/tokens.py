"""Tokens as the backends hold them: a ``tensor<0xi1>``, an empty boolean array.

``!stablehlo.token`` orders side effects and carries no data. JAX passes tokens through jitted
functions (``jax.lax.create_token``, ``after_all``, a token argument returned as it came) even
when nothing has a side effect, and pjrt-hub's backends run no op with one. So a module's
tokens become empty boolean arrays before a backend sees it: ``create_token`` and ``after_all``
become an empty constant and every token-typed value (arguments, results, values carried
through ``while``, ``case``, calls and barriers) a ``tensor<0xi1>``. That is the buffer JAX
itself makes for a token it passes (``pred[0]``), and what it gets back it hands to the next
call as it got it. Ops that would use a token for a real effect (infeed, outfeed, send, recv) stay
what they are and are refused by name by the backend.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from .ir import Block, Function, FunctionType, Module, Op, TensorType, TokenType, Type, Value, frozen_mapping

__all__ = ["TOKEN_AS", "legalize_tokens"]

#: What a token becomes.
TOKEN_AS = TensorType((0,), "i1")
_EMPTY = np.zeros((0,), np.bool_)
_EMPTY.flags.writeable = False


def _as_held(t: Any) -> Any:
    if isinstance(t, TokenType):
        return TOKEN_AS
    if isinstance(t, FunctionType):
        return FunctionType(tuple(_as_held(x) for x in t.inputs), tuple(_as_held(x) for x in t.results))
    return t


def _has_tokens(module: Module) -> bool:
    for fn in module.functions.values():
        if any(isinstance(t, TokenType) for t in (*fn.arg_types, *fn.result_types)):
            return True
    return any(isinstance(v.type, TokenType) for op in module.walk() for v in (*op.operands, *op.results))


class _Rewrite:
    def __init__(self) -> None:
        self.values: dict[int, Value] = {}

    def value(self, v: Value) -> Value:
        if not isinstance(v.type, TokenType):
            return v
        held = self.values.get(id(v))
        if held is None:
            held = self.values[id(v)] = Value(v.name, TOKEN_AS, v.id)
        return held

    def block(self, block: Block) -> Block:
        return Block(tuple(self.value(a) for a in block.args), tuple(self.op(op) for op in block.ops))

    def op(self, op: Op) -> Op:
        results = tuple(self.value(r) for r in op.results)
        if op.name in ("stablehlo.create_token", "stablehlo.after_all"):
            return Op("stablehlo.constant", (), results, frozen_mapping({"value": _EMPTY}), (), op.location,
                      op.source)
        attributes = op.attributes
        if any(isinstance(a, (TokenType, FunctionType)) for a in attributes.values()):
            attributes = frozen_mapping({k: _as_held(a) for k, a in attributes.items()})
        return dataclasses.replace(op, operands=tuple(self.value(v) for v in op.operands), results=results,
                                   regions=tuple(self.block(r) for r in op.regions), attributes=attributes)

    def function(self, fn: Function) -> Function:
        result_types: tuple[Type, ...] = tuple(_as_held(t) for t in fn.result_types)
        return dataclasses.replace(fn, args=tuple(self.value(a) for a in fn.args), result_types=result_types,
                                   body=self.block(fn.body))


def legalize_tokens(module: Module) -> Module:
    """``module`` with its tokens held as ``tensor<0xi1>`` (see the module docstring); ``module``
    itself if it has none."""
    if not _has_tokens(module):
        return module
    rewrite = _Rewrite()
    functions = {name: rewrite.function(fn) for name, fn in module.functions.items()}
    return dataclasses.replace(module, functions=frozen_mapping(functions))
