"""``bitcast_convert`` between element types of different widths, as ops numba_cpu already runs.

``f32[N] -> ui8[N, 4]`` (``jax.random`` with ``rbg`` keys, ``x.view(jnp.uint8)``) is not
elementwise: each source element becomes the last dimension's ``k`` elements, or ``k`` of them
one element. This pass, run after inlining, writes each one with the same bits, as XLA lays them
out (little-endian: part ``j`` holds bits ``j * w`` up of the wider element):

* narrowing, ``k`` parts: the bits as an unsigned integer, shifted right by ``j * w`` and
  converted (truncated) to the narrow unsigned type, each reshaped to ``[..., 1]``, then
  concatenated along the new last dimension;
* widening: each slice ``[..., j]`` converted to the wide unsigned type, shifted left by
  ``j * w`` and or-ed together;

with a same-width ``bitcast_convert`` at either end for float types. A 4-bit type (``i4``,
``f4E2M1FN``) takes part as a ``ui4``, which the generated code keeps as a byte holding the
pattern in its low bits, and which ``convert`` wraps to 4 bits: ``i8[2] -> i4[2, 2]`` is the low
nibble, then the high one, as XLA and numpy's ``view`` of the packed bytes order them. Both
tiers see the rewritten function, so they agree bit for bit, and the parts fuse like any
elementwise code.
"""

from __future__ import annotations

import dataclasses
import itertools
from typing import Iterator

import numpy as np

from pjrt_hub.abi import CompileError
from pjrt_hub.backends.stablehlo import Block, Function, Op, TensorType, Value
from pjrt_hub.backends.stablehlo.ir import frozen_mapping

from .source import element_kind

__all__ = ["expand_resizing_bitcasts"]


def _bits(ty: TensorType, op: Op) -> int:
    kind = element_kind(ty)
    if kind.cls in "cb":
        raise CompileError(f"{op.describe()}: bitcast_convert to another width needs integer or float "
                           f"elements, not {ty.element_type}")
    return kind.bits


class _Expander:
    def __init__(self, fn: Function) -> None:
        self._ids = itertools.count(max((v.id for v in fn.values()), default=0) + 1)

    def block(self, block: Block) -> Block:
        ops: list[Op] = []
        for op in block.ops:
            if op.regions:
                op = dataclasses.replace(op, regions=tuple(self.block(r) for r in op.regions))
            if op.name == "stablehlo.bitcast_convert" and self._resizes(op):
                ops.extend(self.expand(op))
            else:
                ops.append(op)
        return Block(block.args, tuple(ops))

    @staticmethod
    def _resizes(op: Op) -> bool:
        src, dst = op.operands[0].tensor_type, op.result.tensor_type
        return len(src.shape) != len(dst.shape)

    def expand(self, op: Op) -> Iterator[Op]:
        x, result = op.operands[0], op.result
        src, dst = x.tensor_type, result.tensor_type
        sb, db = _bits(src, op), _bits(dst, op)
        count = 0

        def emit(name: str, operands: tuple[Value, ...], ty: TensorType, **attrs: object) -> tuple[Op, Value]:
            nonlocal count
            count += 1
            value = Value(f"{result.name}.{count}", ty, next(self._ids))
            return Op(name, operands, (value,), frozen_mapping(attrs), location=op.location, source=op.source), value

        def shifted(v: Value, ty: TensorType, direction: str, by: int) -> tuple[list[Op], Value]:
            constant = np.array(by, dtype=f"uint{int(ty.element_type[2:])}")
            constant.flags.writeable = False
            c_op, c = emit("stablehlo.constant", (), TensorType((), ty.element_type), value=constant)
            b_op, b = emit("stablehlo.broadcast_in_dim", (c,), ty, broadcast_dimensions=())
            s_op, s = emit(f"stablehlo.shift_{direction}", (v, b), ty)
            return [c_op, b_op, s_op], s

        if sb > db:  # one element -> k parts along a new last dimension
            k, shape = sb // db, src.shape
            if dst.shape != (*shape, k):
                raise CompileError(f"{op.describe()}: {src} -> {dst} must add a last dimension of {k}")
            wide, narrow = TensorType(shape, f"ui{sb}"), TensorType((*shape, 1), f"ui{db}")
            bits_op, bits = emit("stablehlo.bitcast_convert", (x,), wide)
            yield bits_op
            parts = []
            for j in range(k):
                part = bits
                if j:
                    ops, part = shifted(bits, wide, "right_logical", j * db)
                    yield from ops
                cut_op, cut = emit("stablehlo.convert", (part,), TensorType(shape, f"ui{db}"))
                one_op, one = emit("stablehlo.reshape", (cut,), narrow)
                yield from (cut_op, one_op)
                parts.append(one)
            joined_op, joined = emit("stablehlo.concatenate", tuple(parts), TensorType(dst.shape, f"ui{db}"),
                                     dimension=len(shape))
            yield joined_op
            yield dataclasses.replace(op, operands=(joined,))
            return
        k, shape = db // sb, dst.shape  # k parts along the last dimension -> one element
        if src.shape != (*shape, k):
            raise CompileError(f"{op.describe()}: {src} -> {dst} must drop a last dimension of {k}")
        bits_op, bits = emit("stablehlo.bitcast_convert", (x,), TensorType(src.shape, f"ui{sb}"))
        yield bits_op
        wide = TensorType(shape, f"ui{db}")
        acc: Value | None = None
        for j in range(k):
            slice_op, piece = emit("stablehlo.slice", (bits,), TensorType((*shape, 1), f"ui{sb}"),
                                   start_indices=(0,) * len(shape) + (j,), limit_indices=(*shape, j + 1),
                                   strides=(1,) * (len(shape) + 1))
            flat_op, flat = emit("stablehlo.reshape", (piece,), TensorType(shape, f"ui{sb}"))
            widen_op, part = emit("stablehlo.convert", (flat,), wide)
            yield from (slice_op, flat_op, widen_op)
            if j:
                ops, part = shifted(part, wide, "left", j * sb)
                yield from ops
            if acc is not None:
                or_op, part = emit("stablehlo.or", (acc, part), wide)
                yield or_op
            acc = part
        assert acc is not None
        yield dataclasses.replace(op, operands=(acc,))


def expand_resizing_bitcasts(fn: Function) -> Function:
    """``fn`` with every ``bitcast_convert`` that changes the element width written as
    same-width ops (see the module docstring); ``fn`` itself if it has none."""
    if not any(op.name == "stablehlo.bitcast_convert" and _Expander._resizes(op) for op in fn.walk()):
        return fn
    return dataclasses.replace(fn, body=_Expander(fn).block(fn.body))
