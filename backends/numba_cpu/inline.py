"""Inline every ``func.call`` so the lowering sees one function.

JAX wraps each nested ``jit`` (``relu``, ``_where``, loop bodies...) in a private function.
Fusion must see through those calls (ew_chain's final ``select`` sits in ``@_where``), and a call
inside a ``while`` body must not leave the compiled loop, so the simplest sound plan is to inline
them all: JAX never emits recursion (the compiler refuses it, see
:func:`pjrt_hub.backends.stablehlo.nesting.call_depth`, before inlining starts). The IR is immutable, so inlining builds new ops; a callee
inlined twice gets fresh :class:`Value` objects each time (values are identities, not names).
"""

from __future__ import annotations

import dataclasses
import itertools
from typing import Iterator

from pjrt_hub.abi import CompileError
from pjrt_hub.backends.stablehlo import Block, Function, Module, Op, Value

__all__ = ["inline_calls"]

class _Inliner:
    def __init__(self, module: Module) -> None:
        self.module = module
        top = max((v.id for v in _all_values(module)), default=0)
        self._ids = itertools.count(top + 1)

    def fresh(self, v: Value) -> Value:
        return Value(v.name, v.type, next(self._ids))

    def block(self, block: Block, vmap: dict[Value, Value], depth: int) -> Block:
        """A copy of ``block`` with operands renamed by ``vmap`` and calls expanded; the block's
        own arguments must already be in ``vmap`` (or are kept as they are)."""
        ops: list[Op] = []
        for op in block.ops:
            ops.extend(self.op(op, vmap, depth))
        return Block(tuple(vmap.get(a, a) for a in block.args), tuple(ops))

    def op(self, op: Op, vmap: dict[Value, Value], depth: int) -> Iterator[Op]:
        operands = tuple(vmap.get(v, v) for v in op.operands)
        if op.name in ("func.call", "stablehlo.composite"):
            yield from self.call(op, operands, vmap, depth)
            return
        regions = []
        for region in op.regions:
            inner = dict(vmap)
            args = tuple(self.fresh(a) if depth else a for a in region.args)
            inner.update(zip(region.args, args))
            regions.append(self.block(region, inner, depth))
        if depth:
            results = tuple(self.fresh(r) for r in op.results)
            vmap.update(zip(op.results, results))
        else:
            results = op.results
        yield dataclasses.replace(op, operands=operands, results=results, regions=tuple(regions))

    def call(self, op: Op, operands: tuple[Value, ...], vmap: dict[Value, Value], depth: int) -> Iterator[Op]:
        callee_ref = op.attr("callee") if op.name == "func.call" else op.attr("decomposition")
        name = getattr(callee_ref, "name", str(callee_ref))
        callee = self.module.functions.get(name)
        if callee is None:
            raise CompileError(f"{op.describe()}: call to undefined function @{name}")
        inner: dict[Value, Value] = dict(zip(callee.args, operands))
        body = callee.body
        for inner_op in body.ops[:-1]:
            yield from self.op(inner_op, inner, depth + 1)
        returned = [inner.get(v, v) for v in body.terminator.operands]
        if len(returned) != len(op.results):
            raise CompileError(
                f"{op.describe()}: @{name} returns {len(returned)} values, the call expects {len(op.results)}")
        # The call's results become the callee's returned values; an identity op is not
        # needed because every later use goes through vmap.
        vmap.update(zip(op.results, returned))


def _all_values(module: Module) -> Iterator[Value]:
    for fn in module.functions.values():
        yield from fn.values()


def inline_calls(module: Module) -> Function:
    """``@main`` of ``module`` with every call (also inside regions) replaced by the callee."""
    main = module.main
    inliner = _Inliner(module)
    vmap: dict[Value, Value] = {}
    body = inliner.block(main.body, vmap, 0)
    return dataclasses.replace(main, body=body)
