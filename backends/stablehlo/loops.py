"""Which ``while`` loops end by themselves, and after how many iterations.

A ``while`` loop may run forever, so the CPU runtime never runs a program with one inline on
the caller's thread (``execute`` would not return, and nobody could wait with a timeout). That
would cost every small ``fori_loop`` or ``scan`` a thread hand-off, though JAX lowers both, when
their bounds are static, to a *counted loop* whose trip count is plain in the program::

    %r:2 = stablehlo.while(%i = %c0, %x = %arg0) ...
      cond { %p = stablehlo.compare LT, %i, %c25 ...; stablehlo.return %p }
      do   { ...; %n = stablehlo.add %i, %c1; stablehlo.return %n, ... }

:func:`trip_count` recognises that form: a scalar integer counter that starts at a constant,
is compared (LT, LE, GT, GE) with a constant in the condition and only steps by a constant in
the body (add or subtract). :func:`unbounded_loops` says whether a program has a loop that is
not such a loop, or whose trip counts multiply past :data:`SHORT_LOOPS`: the backends mark such
programs for the runtime (the ``unbounded_loops`` attribute of a compiled program).

:func:`updated_in_place` finds the carried arrays a loop may update in place: a scan's stacked
outputs, which would otherwise be copied whole at every step.
"""

from __future__ import annotations

import math
from collections import Counter
from typing import Iterable, Mapping

import numpy as np

from .ir import Block, Function, Module, Op, TensorType, Value

__all__ = ["SHORT_LOOPS", "trip_count", "unbounded_loops", "updated_in_place"]

#: Iterations (the product of the trip counts of all counted loops of a program) up to which
#: its loops count as short; past it the program is treated like one with an unbounded loop.
SHORT_LOOPS = 10_000


def _definitions(ops: Iterable[Op]) -> dict[int, Op]:
    return {result.id: op for op in ops for result in op.results}


def _int_constant(value: Value, defs: Mapping[int, Op]) -> int | None:
    op = defs.get(value.id)
    if op is None or op.name != "stablehlo.constant":
        return None
    array = np.asarray(op.attr("value"))
    if array.size != 1 or array.dtype.kind not in "iu":
        return None
    return int(array.reshape(()))


def _counter_type_range(value: Value) -> tuple[int, int] | None:
    ty = value.type
    if not isinstance(ty, TensorType) or ty.rank != 0:
        return None
    try:
        dtype = ty.dtype
    except (KeyError, TypeError, ValueError):
        return None
    if dtype.kind not in "iu":
        return None
    info = np.iinfo(dtype)
    return int(info.min), int(info.max)


_FLIP = {"LT": "GT", "LE": "GE", "GT": "LT", "GE": "LE"}


def trip_count(op: Op, defs: Mapping[int, Op]) -> int | None:
    """The number of iterations of a counted ``while`` (see the module docstring), else None.

    ``defs`` maps value ids to the ops that define them, for the whole module (the counter's
    initial value and the bounds may be defined outside the loop).
    """
    if op.name != "stablehlo.while" or len(op.regions) != 2:
        return None
    cond, body = op.regions
    local = {**defs, **_definitions(cond.ops), **_definitions(body.ops)}
    predicate = cond.terminator.operands
    if len(predicate) != 1:
        return None
    compare = local.get(predicate[0].id)
    if compare is None or compare.name != "stablehlo.compare" or len(compare.operands) != 2:
        return None
    direction = str(compare.attr("comparison_direction"))
    if direction not in _FLIP:
        return None
    lhs, rhs = compare.operands
    args = list(cond.args)
    if lhs in args:
        index, bound = args.index(lhs), _int_constant(rhs, local)
    elif rhs in args:
        index, bound, direction = args.index(rhs), _int_constant(lhs, local), _FLIP[direction]
    else:
        return None
    if bound is None or index >= len(op.operands) or index >= len(body.args):
        return None
    limits = _counter_type_range(body.args[index])
    start = _int_constant(op.operands[index], defs)
    step = _step(body, index, local)
    if limits is None or start is None or step is None or step == 0:
        return None
    if direction in ("LE", "GE"):
        # i <= b is i < b + 1 (and i >= b is i > b - 1) for integers.
        bound += 1 if direction == "LE" else -1
        direction = "LT" if direction == "LE" else "GT"
    if direction == "LT":
        if start >= bound:
            return 0
        if step < 0:
            return None
        count = math.ceil((bound - start) / step)
    else:
        if start <= bound:
            return 0
        if step > 0:
            return None
        count = math.ceil((start - bound) / -step)
    last = start + count * step  # the value that ends the loop: it must not wrap around
    if not limits[0] <= last <= limits[1]:
        return None
    return count


def _step(body: Block, index: int, local: Mapping[int, Op]) -> int | None:
    """The constant the body adds to counter ``index`` (negative for a subtract), else None."""
    results = body.terminator.operands
    if index >= len(results):
        return None
    update = local.get(results[index].id)
    counter = body.args[index]
    if update is None or len(update.operands) != 2:
        return None
    a, b = update.operands
    if update.name == "stablehlo.add":
        if a is counter:
            return _int_constant(b, local)
        if b is counter:
            return _int_constant(a, local)
    elif update.name == "stablehlo.subtract" and a is counter:
        step = _int_constant(b, local)
        return None if step is None else -step
    return None


def unbounded_loops(program: Module | Function, limit: int = SHORT_LOOPS) -> bool:
    """True if a ``while`` of ``program`` is not a counted loop, or if the trip counts of its
    counted loops multiply past ``limit`` (a conservative bound on nested iterations)."""
    ops = list(program.walk())
    defs = _definitions(ops)
    total = 1
    for op in ops:
        if op.name != "stablehlo.while":
            continue
        count = trip_count(op, defs)
        if count is None:
            return True
        total *= max(count, 1)
        if total > limit:
            return True
    return False


def updated_in_place(op: Op) -> dict[int, Op]:
    """The carried arrays of a ``while`` that its body may update in place, by position, each
    with the ``dynamic_update_slice`` that updates it: the body passes the array to that op and
    nowhere else, and carries its result back in the same place and nowhere else (a scan's
    stacked outputs). Given an array of its own to start from, such a value keeps it to the end
    and no other variable can see it. Any other carried array may share its array with another
    value (the body can carry an outer value, or one value in two places)."""
    body = op.regions[1]
    reads = Counter(v for inner in body.walk() for v in inner.operands)
    producers = _definitions(body.ops[:-1])
    out = {}
    for k, (arg, result) in enumerate(zip(body.args, body.terminator.operands)):
        update = producers.get(result.id)
        if (isinstance(arg.type, TensorType) and arg.type.shape and update is not None
                and update.name == "stablehlo.dynamic_update_slice" and update.operands[0] is arg
                and reads.get(arg) == 1 and reads.get(result) == 1):
            out[k] = update
    return out
