"""Custom calls JAX emits for every backend, written as the StableHLO ops that compute them.

``jax.lax.approx_max_k`` / ``approx_min_k`` lower to ``stablehlo.custom_call @ApproxTopK``
with a comparator function. Off TPU, XLA runs it as its fallback, an exact top-k: sort the
operands along ``reduction_dim`` with the comparator and keep the first entries (as many as
the results hold: ``top_k``, or more when ``aggregate_to_topk`` is false). Here the call
becomes that ``stablehlo.sort`` (a stable one, so ties keep the lower index, as XLA's) and a
``stablehlo.slice`` per result; the backends then run what they already run.
``jax.lax.dce_sink(x, prevent_mlir_dce=True)`` lowers to ``stablehlo.custom_call @dce_sink(x)``
with no results and ``has_side_effect``: it only marks ``x`` as used, so that no compiler pass
deletes the ops computing it (XLA:CPU keeps the call and runs nothing for it). The call has no
effect a program can observe (an op with effects of its own keeps them without it), so here it
goes away; the executable's program text, which the backends keep as written, still shows it.
Any other custom call is left for the backend to refuse by name.

JAX's comparators are a bare ``compare GT`` (max_k) or ``LT`` (min_k) of floats, which orders
no NaN, so what a sort makes of NaNs is up to its algorithm: XLA:CPU's top-k (jax 0.10) puts a
NaN first in max_k with +0 above -0 (the total order), and with k = n, or in min_k, returns
entries out of order around the NaNs. Here the two comparators sort NaNs as the largest values
(``GT, TOTALORDER``: -NaN the smallest; ``a < b or (b is NaN and a is not)``), which agrees
with XLA's max_k for k < n and gives min_k the k smallest numbers; any other comparator is
copied as written.
"""

from __future__ import annotations

import dataclasses
import itertools
from typing import Iterator

from pjrt_hub.abi import CompileError

from .ir import Block, ComparisonDirection, ComparisonType, Function, Module, Op, TensorType, Value, frozen_mapping

__all__ = ["lower_custom_calls"]


def _approx_top_k(op: Op) -> bool:
    return op.name == "stablehlo.custom_call" and op.call_target == "ApproxTopK"


def _dce_sink(op: Op) -> bool:
    return op.name == "stablehlo.custom_call" and op.call_target == "dce_sink" and not op.results


class _Lowering:
    def __init__(self, module: Module) -> None:
        self.module = module
        ids = [v.id for fn in module.functions.values() for v in fn.values()]
        self._ids = itertools.count(max(ids, default=0) + 1)

    def fresh(self, v: Value) -> Value:
        return Value(v.name, v.type, next(self._ids))

    def block(self, block: Block) -> Block:
        ops: list[Op] = []
        for op in block.ops:
            if op.regions:
                op = dataclasses.replace(op, regions=tuple(self.block(r) for r in op.regions))
            if not _dce_sink(op):
                ops.extend(self.top_k(op) if _approx_top_k(op) else (op,))
        return Block(block.args, tuple(ops))

    def copy(self, block: Block) -> Block:
        """``block`` with fresh values: a comparator used by two calls gets two copies."""
        vmap = {a: self.fresh(a) for a in block.args}

        def op_copy(op: Op) -> Op:
            regions = []
            for region in op.regions:
                vmap.update((a, self.fresh(a)) for a in region.args)
                regions.append(Block(tuple(vmap[a] for a in region.args), tuple(op_copy(o) for o in region.ops)))
            results = tuple(self.fresh(r) for r in op.results)
            vmap.update(zip(op.results, results))
            return dataclasses.replace(op, operands=tuple(vmap.get(v, v) for v in op.operands), results=results,
                                       regions=tuple(regions))

        return Block(tuple(vmap[a] for a in block.args), tuple(op_copy(o) for o in block.ops))

    def top_k(self, op: Op) -> Iterator[Op]:
        config = op.attributes.get("mhlo.backend_config") or {}
        calls: tuple[object, ...] = tuple(op.attr("called_computations") or ())
        n = len(op.results)
        if not hasattr(config, "get") or len(calls) != 1 or len(op.operands) != 2 * n:
            raise CompileError(f"{op.describe()}: ApproxTopK needs {2 * n} operands (the inputs, then their "
                               "init values), one comparator in called_computations and mhlo.backend_config")
        comparator = self.module.functions.get(getattr(calls[0], "name", str(calls[0])))
        if comparator is None:
            raise CompileError(f"{op.describe()}: ApproxTopK's comparator @{calls[0]} is not defined")
        inputs = op.operands[:n]
        shape = inputs[0].tensor_type.shape
        dim = int(config.get("reduction_dim", len(shape) - 1))
        dim = dim + len(shape) if dim < 0 else dim
        if not 0 <= dim < len(shape) or any(v.tensor_type.shape != shape for v in inputs):
            raise CompileError(f"{op.describe()}: ApproxTopK's inputs must have one shape, with reduction_dim "
                               f"{config.get('reduction_dim')} among its dimensions")
        for r in op.results:
            rs = r.tensor_type.shape
            if len(rs) != len(shape) or rs[dim] > shape[dim] or any(
                    a != b for i, (a, b) in enumerate(zip(rs, shape)) if i != dim):
                raise CompileError(f"{op.describe()}: result {r.name} {r.type} is not the inputs "
                                   f"{inputs[0].type} cut along dimension {dim}")
        region = self.nan_aware(comparator, op)
        if region is None:
            ops = comparator.body.ops
            if ops and ops[-1].name == "func.return":  # a region ends with stablehlo.return
                ops = (*ops[:-1], dataclasses.replace(ops[-1], name="stablehlo.return"))
            region = self.copy(Block(comparator.args, tuple(ops)))
        sorted_values = tuple(Value(f"{r.name}.sorted", v.type, next(self._ids)) for r, v in zip(op.results, inputs))
        yield Op("stablehlo.sort", tuple(inputs), sorted_values,
                 frozen_mapping({"dimension": dim, "is_stable": True}), (region,), op.location, op.source)
        for r, v in zip(op.results, sorted_values):
            rs = r.tensor_type.shape
            yield Op("stablehlo.slice", (v,), (r,),
                     frozen_mapping({"start_indices": (0,) * len(rs), "limit_indices": tuple(rs),
                                     "strides": (1,) * len(rs)}), (), op.location, op.source)

    def nan_aware(self, comparator: Function, call: Op) -> Block | None:
        """The sort region XLA's top-k amounts to, for JAX's float ``GT``/``LT`` comparators;
        None for any other."""
        ops = comparator.body.ops
        if len(ops) != 2 or ops[0].name != "stablehlo.compare" or len(comparator.args) < 2:
            return None
        compare, a, b = ops[0], comparator.args[0], comparator.args[1]
        direction = compare.attr("comparison_direction")
        if (compare.operands != (a, b) or tuple(ops[1].operands) != compare.results
                or compare.attr("compare_type") not in (None, ComparisonType.FLOAT)
                or direction not in (ComparisonDirection.GT, ComparisonDirection.LT)
                or not str(getattr(a.type, "element_type", "")).startswith(("f", "bf"))):
            return None
        args = tuple(self.fresh(v) for v in comparator.args)
        x, y = args[0], args[1]
        pred = TensorType((), "i1")
        body: list[Op] = []

        def emit(name: str, operands: tuple[Value, ...], **attrs: object) -> Value:
            result = Value(f"%{name.split('.')[-1]}", pred, next(self._ids))
            body.append(Op(name, operands, (result,), frozen_mapping(attrs), (), call.location, call.source))
            return result

        if direction == ComparisonDirection.GT:
            out = emit("stablehlo.compare", (x, y), comparison_direction=ComparisonDirection.GT,
                       compare_type=ComparisonType.TOTALORDER)
        else:
            less = emit("stablehlo.compare", (x, y), comparison_direction=ComparisonDirection.LT,
                        compare_type=ComparisonType.FLOAT)
            y_nan = emit("stablehlo.compare", (y, y), comparison_direction=ComparisonDirection.NE,
                         compare_type=ComparisonType.FLOAT)
            x_number = emit("stablehlo.compare", (x, x), comparison_direction=ComparisonDirection.EQ,
                            compare_type=ComparisonType.FLOAT)
            out = emit("stablehlo.or", (less, emit("stablehlo.and", (y_nan, x_number))))
        body.append(Op("stablehlo.return", (out,), (), frozen_mapping(), (), call.location, call.source))
        return Block(args, tuple(body))


def lower_custom_calls(module: Module) -> Module:
    """``module`` with the custom calls this module knows written as StableHLO ops; ``module``
    itself if it has none."""
    if not any(_approx_top_k(op) or _dce_sink(op) for op in module.walk()):
        return module
    lowering = _Lowering(module)
    functions = {name: dataclasses.replace(fn, body=lowering.block(fn.body))
                 for name, fn in module.functions.items()}
    return dataclasses.replace(module, functions=frozen_mapping(functions))

