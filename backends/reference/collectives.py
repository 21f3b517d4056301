"""Collective ops and process ids in the reference interpreter.

The processes meet through the host runtime (:mod:`pjrt_hub.backends.cpu_runtime`), exactly
as numba_cpu's do; what the oracle keeps for itself is the arithmetic. Data movement
(``all_gather``, ``all_to_all``, ``collective_permute``, ``collective_broadcast``) is the
runtime's copy; a reduction (``all_reduce``, ``reduce_scatter``) gathers the group's
contributions and folds them with the op's own region, whatever it computes, in group order.
"""

from __future__ import annotations

import functools

import numpy as np

from pjrt_hub.backends.cpu_runtime._collectives import (
    exchange_for_reduction,
    partition_id,
    replica_id,
    run_collective,
)
from pjrt_hub.backends.stablehlo import Op
from pjrt_hub.backends.stablehlo.collectives import COLLECTIVE_OPS, Collective, describe

from .registry import register
from .interpreter import Results


@functools.lru_cache(maxsize=1024)
def _spec(op: Op) -> Collective:
    # The first result's id is unique in the module and the same in every process that parsed
    # the same text, so processes running one program meet at the same key.
    return describe(op, op.results[0].id)


@register("stablehlo.replica_id")
def _replica_id(ctx, op: Op):
    return np.array(replica_id(), np.uint32)


@register("stablehlo.partition_id")
def _partition_id(ctx, op: Op):
    return np.array(partition_id(), np.uint32)


@register(*sorted(COLLECTIVE_OPS))
def _collective(ctx, op: Op, *args):
    spec = _spec(op)
    n = len(op.results)
    operands = [np.asarray(a) for a in args[:n]]
    if spec.kind in ("all_reduce", "reduce_scatter"):
        stacked = exchange_for_reduction(spec, operands)
        combine = ctx.combiner(op.regions[0])
        results = []
        for parts, r in zip(stacked, op.results):
            acc = parts[0]
            for k in range(1, parts.shape[0]):
                (acc,) = combine(acc, parts[k])
            results.append(np.asarray(acc, dtype=r.tensor_type.dtype).reshape(r.tensor_type.shape))
        return Results(results)
    return Results(run_collective(spec, operands))
