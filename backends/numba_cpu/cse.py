"""Common subexpressions: an op that computes exactly what an earlier op computed is dropped.

JAX traces each ``jnp`` call on its own, so a program often computes a thing twice: layernorm
broadcasts its mean twice and subtracts it from ``x`` twice, ``random_normal`` repeats 59 ops
(47 of them constants, many in its loop body). Every dropped op is a pass over memory fewer in
the eager tier and less code for numba to compile.

An op is dropped when an earlier op that dominates it (before it in its block, or before the
``while``, ``if`` or ``case`` whose region holds it) has the same name, the same operands, the
same attributes and the same result types, and the op is a pure function of its operands: no
regions (their ops are looked at one by one), no tokens, nothing random or external (``rng``,
``custom_call``, infeed and outfeed, send and recv) and no collective, whose every instance is a
rendezvous with the other devices. Such an op gives the same bits every time, so the program's
results do not change by a bit. The region of any other op (a reducer, a comparator, a scatter's
update) is a scalar formula of its own arguments: its ops are compared only with each other, so
that it never reads a value from outside (which the eager tier's formulas do not take). The IR is
immutable: ops whose operands change are rebuilt, the others kept as they are.
"""

from __future__ import annotations

import dataclasses
import enum
import hashlib
import math
import struct
from collections.abc import Mapping
from typing import Any, Hashable

import numpy as np

from pjrt_hub.backends.stablehlo import Block, Function, Op, TensorType, Value

__all__ = ["eliminate_common_subexpressions"]

#: Ops whose two instances are two events, not one value.
_NOT_PURE = frozenset(
    "stablehlo." + name
    for name in (
        "custom_call", "rng", "rng_bit_generator", "infeed", "outfeed", "send", "recv", "after_all",
        "create_token", "optimization_barrier", "all_reduce", "all_gather", "all_to_all",
        "reduce_scatter", "collective_permute", "collective_broadcast", "replica_id", "partition_id",
        "composite",
    )
)


class _Unkeyable(Exception):
    """An attribute of a kind :func:`_key_of` does not know: the op is kept."""


def eliminate_common_subexpressions(fn: Function) -> Function:
    """``fn`` without the ops that repeat an earlier one (the same object if there are none)."""
    renamed: dict[Value, Value] = {}
    body = _block(fn.body, renamed, {})
    return fn if body is fn.body else dataclasses.replace(fn, body=body)


#: Ops whose regions run as part of the program's control flow, where the ops before them are
#: computed already: their regions may read those.
_CONTROL_FLOW = frozenset({"stablehlo.while", "stablehlo.if", "stablehlo.case"})


def _block(block: Block, renamed: dict[Value, Value], seen: dict[Hashable, Op]) -> Block:
    """``block`` with repeated ops dropped and operands renamed. ``seen`` holds the ops that
    dominate it; the block's own are added to it and taken out again at its end."""
    ops: list[Op] = []
    added: list[Hashable] = []
    changed = False
    for op in block.ops:
        operands = tuple(renamed.get(v, v) for v in op.operands)
        inherit = op.name in _CONTROL_FLOW
        regions = tuple(_block(region, renamed, seen if inherit else {}) for region in op.regions)
        if operands != op.operands or any(new is not old for new, old in zip(regions, op.regions)):
            op = dataclasses.replace(op, operands=operands, regions=regions)
            changed = True
        key = _key(op)
        if key is not None:
            earlier = seen.get(key)
            if earlier is not None:
                renamed.update(zip(op.results, earlier.results))
                changed = True
                continue
            seen[key] = op
            added.append(key)
        ops.append(op)
    for key in added:
        del seen[key]
    return dataclasses.replace(block, ops=tuple(ops)) if changed else block


def _key(op: Op) -> Hashable | None:
    """What makes ``op``'s results what they are, if it is a pure op of its operands."""
    if not op.results or op.regions or op.name in _NOT_PURE or op.dialect not in ("stablehlo", "chlo"):
        return None
    if not all(isinstance(v.type, TensorType) for v in (*op.operands, *op.results)):
        return None  # tokens, tuples
    try:
        attributes = tuple(sorted((name, _key_of(value)) for name, value in op.attributes.items()))
    except _Unkeyable:
        return None
    return (op.name, tuple(v.id for v in op.operands), attributes, tuple(str(v.type) for v in op.results))


def _key_of(value: Any) -> Hashable:
    """An attribute value as a key that two values share only if they are the same: arrays and
    floats by their bits (``-0.0`` is not ``0.0``, and NaNs keep their payloads; an array by a
    SHA-256 of its bytes, so that the keys do not hold a second copy of a program's weights),
    element types by name (bfloat16 and the 8-bit floats share numpy's ``V2``/``V1``)."""
    if isinstance(value, np.ndarray):
        if value.dtype.hasobject:
            raise _Unkeyable("object array")
        digest = hashlib.sha256(np.ascontiguousarray(value).view(np.uint8).reshape(-1).data).digest()
        return ("array", str(value.dtype), value.dtype.str, value.shape, digest)
    if isinstance(value, np.generic):
        return ("scalar", str(value.dtype), value.dtype.str, value.tobytes())
    if isinstance(value, float):
        return ("float", struct.pack("<d", value)) if math.isnan(value) or value == 0 else ("float", value)
    if isinstance(value, enum.Enum):
        return (type(value).__name__, value.value)
    if value is None or isinstance(value, (str, int)):  # (bool is an int)
        return (type(value).__name__, value)
    if isinstance(value, (tuple, list)):
        return ("seq", tuple(_key_of(v) for v in value))
    if isinstance(value, Mapping):
        return ("map", tuple(sorted((str(k), _key_of(v)) for k, v in value.items())))
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return (type(value).__name__, tuple(_key_of(getattr(value, f.name)) for f in dataclasses.fields(value)))
    raise _Unkeyable(type(value).__name__)
