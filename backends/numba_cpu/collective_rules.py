"""Lowering rules for the collective ops and the process ids.

The compiled function cannot meet the other processes itself: at a collective it leaves
nopython code for a moment (numba's ``objmode``, about 3 us) and calls the host runtime
(:mod:`pjrt_hub.backends.cpu_runtime`), which finds the running process from the thread and
does the meeting. Arrays cross that boundary flattened to 1-D (``np.empty(1)`` for a scalar)
and come back the same way, so that every type annotation is a simple ``dtype[::1]``; f16 and
bf16 travel as their uint16 bits and the runtime views them in their real dtype.

Sums, products, max, min and bitwise reductions are computed by the runtime, split among the
group's threads. Any other reduction region is folded here, in compiled code, over the group's
contributions (in group order), exactly as a ``reduce`` body is.
"""

from __future__ import annotations

import json
import math
from typing import Sequence

import numpy as np

from pjrt_hub.backends.stablehlo import Op, Value
from pjrt_hub.backends.stablehlo.collectives import COLLECTIVE_OPS, describe

from .codegen import ArrayBinding, Binding, KernelRule, Lowering, ScalarBinding, load_text, store_text
from .rules import kernel, reducer
from .source import ElementKind, Expr

__all__: list[str] = []


def _nb_type(kind: ElementKind) -> str:
    name = "boolean" if kind.storage == np.bool_ else kind.storage.name
    return f"{name}[::1]"


def _flat_operand(ctx: Lowering, v: Value) -> str:
    """A C-contiguous array holding ``v``: its own array, or a 1-element one for a scalar."""
    kind = ctx.kind(v)
    if v.tensor_type.rank:
        return ctx.array(v)
    name = ctx.fresh("c")
    ctx.scope.emit(f"{name} = np.empty(1, {kind.np_name})")
    ctx.scope.emit(f"{name}[0] = {kind.store(ctx.read(v, ()).text)}")
    return name


def _spec_global(ctx: Lowering, op: Op) -> str:
    counter = ctx.number_collective()
    spec = describe(op, counter)
    data = {
        "kind": spec.kind, "key": spec.key, "groups": [list(g) for g in spec.groups],
        "channel_id": spec.channel_id, "use_global_device_ids": spec.use_global_device_ids,
        "dimension": spec.dimension, "concat_dimension": spec.concat_dimension,
        "split_count": spec.split_count, "reduction": spec.reduction,
        "operand_dtypes": [str(d) for d in spec.operand_dtypes],
        "operand_shapes": [list(s) for s in spec.operand_shapes],
        "result_shapes": [list(s) for s in spec.result_shapes], "where": spec.where,
    }
    name = f"COLL{counter}"
    ctx.globals[name] = f"collective_spec({json.dumps(data)!r})"
    return name


def _unflatten(ctx: Lowering, v: Value, flat: str) -> ArrayBinding | ScalarBinding:
    kind = ctx.kind(v)
    if v.tensor_type.rank:
        name = ctx.fresh("a")
        ctx.scope.emit(f"{name} = {flat}.reshape({tuple(v.tensor_type.shape)!r})")
        return ArrayBinding(name, kind)
    return ScalarBinding(ctx.temp(kind.load(load_text(flat, ["0"])), []))


@kernel(*sorted(COLLECTIVE_OPS), lazy_operands=True)
def _collective(ctx: Lowering, op: Op) -> Sequence[Binding]:
    spec = _spec_global(ctx, op)
    n = len(op.results)
    operands = [_flat_operand(ctx, v) for v in op.operands[:n]]
    flats = [ctx.fresh("c") for _ in op.results]
    generic = op.name in ("stablehlo.all_reduce", "stablehlo.reduce_scatter") and \
        describe(op, 0).reduction is None
    fn = "collective_exchange" if generic else "collective_call"
    # The objmode block lives in a helper of its own: numba mis-compiles objmode blocks inside
    # loops and branches ("Instruction does not dominate all uses"), not calls to such helpers.
    helper = f"call_{spec.lower()}"
    params = [f"x{i}" for i in range(len(operands))]
    outs = [f"y{i}" for i in range(len(flats))]
    notes = ", ".join(f"{y}={_nb_type(ctx.kind(r))!r}" for y, r in zip(outs, op.results))
    ctx.helpers.append(
        f"def {helper}({', '.join(params)}):\n"
        f"    with objmode({notes}):\n"
        f"        {', '.join(outs)}{',' if len(outs) == 1 else ''} = {fn}({spec}, ({', '.join(params)},))\n"
        f"    return ({', '.join(outs)}{',' if len(outs) == 1 else ''})")
    ctx.scope.emit(f"{', '.join(flats)}{',' if len(flats) == 1 else ''} = {helper}({', '.join(operands)})")
    if not generic:
        return [_unflatten(ctx, r, f) for r, f in zip(op.results, flats)]
    # Fold the region over the group's contributions: flat[k * size + i] is member k's element i.
    combine = reducer(ctx, op)
    out = []
    for r, flat in zip(op.results, flats):
        kind = ctx.kind(r)
        size = math.prod(r.tensor_type.shape)
        result = ctx.fresh("a")
        ctx.scope.emit(f"{result} = np.empty({max(size, 1)}, {kind.np_name})")
        members = ctx.fresh("nk")
        ctx.scope.emit(f"{members} = {flat}.size // {max(size, 1)}")
        i, k, acc = ctx.fresh("i"), ctx.fresh("k"), ctx.fresh("acc")
        with ctx.block_scope(f"for {i} in range({size}):") as outer:
            first = ctx.temp(kind.load(load_text(flat, [i])), [Expr(i, outer)])
            ctx.scope.emit(f"{acc} = {first.text}")
            with ctx.block_scope(f"for {k} in range(1, {members}):") as inner:
                x = ctx.temp(kind.load(load_text(flat, [f"{k} * {size} + {i}"])),
                             [Expr(i, outer), Expr(k, inner)])
                (new,) = combine([Expr(acc, inner)], [x])
                ctx.scope.emit(f"{acc} = {new}")
            ctx.scope.emit(store_text(result, [i], kind.store(acc)))
        out.append(_unflatten(ctx, r, result))
    return out


def _process_id(fn: str) -> KernelRule:
    def rule(ctx: Lowering, op: Op) -> Sequence[Binding]:
        helper = f"current_{fn}"
        if not any(h.startswith(f"def {helper}(") for h in ctx.helpers):
            ctx.helpers.append(f"def {helper}():\n    with objmode(p='uint32'):\n"
                               f"        p = np.uint32({fn}())\n    return p")
        name = ctx.fresh("pid")
        ctx.scope.emit(f"{name} = {helper}()")
        return [ScalarBinding(Expr(name, ctx.scope))]

    return rule


kernel("stablehlo.replica_id")(_process_id("replica_id"))
kernel("stablehlo.partition_id")(_process_id("partition_id"))
