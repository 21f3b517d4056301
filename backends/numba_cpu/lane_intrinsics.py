"""The compiled side of :mod:`.lanes`: lane reductions as explicit LLVM vector code.

Each intrinsic works on a lanes buffer (``K`` elements of the reduction's type, one per thread
of a kernel group) that holds the partial results between the rows of a multi-dimensional
reduction. Inside one call the lanes are a single ``<K x float>`` value: a block of ``K``
consecutive elements is one vector load and one vector add (or multiply, or IEEE maximum or
minimum), with no reassociation flag, so LLVM can neither reorder a lane's steps nor mix lanes.
The operation (``"add"``, ``"mul"``, ``"max"``, ``"min"``) and ``K`` are literal arguments, as
the vector type depends on them.
"""

from __future__ import annotations

from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.core.extending import intrinsic

from .intrinsics import build_fmaxmin
from .lanes import IDENTITY

__all__ = ["lanes_reset", "lanes_add", "lanes_total", "lanes_row"]


def _literals(op, k) -> bool:
    return (isinstance(op, types.StringLiteral) and op.literal_value in IDENTITY
            and isinstance(k, types.IntegerLiteral) and k.literal_value >= 1)


def _float_array(a) -> bool:
    """A C-contiguous float array, or a pointer to floats (the machine kernels' operands)."""
    if isinstance(a, types.CPointer):
        return isinstance(a.dtype, types.Float)
    return isinstance(a, types.Array) and isinstance(a.dtype, types.Float) and a.layout == "C"


def _data(context, builder, ty, value):
    """The element pointer of an array or pointer operand."""
    if isinstance(ty, types.CPointer):
        return value
    return context.make_array(ty)(context, builder, value).data


def _step(builder, op: str, a, b):
    if op == "add":
        return builder.fadd(a, b)
    if op == "mul":
        return builder.fmul(a, b)
    return build_fmaxmin(builder, op, a, b)


def _identity(fty, op: str, count: int):
    """The vector of ``count`` lanes at the identity of ``op``."""
    return ir.Constant(ir.VectorType(fty, count), [ir.Constant(fty, IDENTITY[op])] * count)


def _vector_ptr(builder, ptr, vty):
    return builder.bitcast(ptr, vty.as_pointer())


@intrinsic
def lanes_reset(typingctx, lanes, op, k):
    """Set the ``k`` lanes to the identity of ``op`` (see :data:`.lanes.IDENTITY`)."""
    if not (_float_array(lanes) and _literals(op, k)):
        return None
    name, count = op.literal_value, k.literal_value

    def codegen(context, builder, sig, args):
        data = _data(context, builder, sig.args[0], args[0])
        fty = context.get_value_type(sig.args[0].dtype)
        value = _identity(fty, name, count)
        builder.store(value, _vector_ptr(builder, data, value.type), align=sig.args[0].dtype.bitwidth // 8)
        return context.get_dummy_value()

    return types.none(lanes, op, k), codegen


@intrinsic
def lanes_add(typingctx, lanes, src, start, count, op, k):
    """Accumulate ``count`` elements of ``src`` (flat, from element ``start``) into the lanes:
    element ``i`` goes to lane ``i % k``. ``src`` is C-contiguous and of the lanes' type."""
    if not (_float_array(lanes) and _float_array(src) and src.dtype == lanes.dtype and _literals(op, k)
            and isinstance(start, types.Integer) and isinstance(count, types.Integer)):
        return None
    name, width = op.literal_value, k.literal_value

    def codegen(context, builder, sig, args):
        lanes_ty, src_ty = sig.args[0], sig.args[1]
        ldata = _data(context, builder, lanes_ty, args[0])
        sdata = _data(context, builder, src_ty, args[1])
        align = lanes_ty.dtype.bitwidth // 8
        fty = context.get_value_type(lanes_ty.dtype)
        vty = ir.VectorType(fty, width)
        intp = context.get_value_type(types.intp)
        first = context.cast(builder, args[2], sig.args[2], types.intp)
        n = context.cast(builder, args[3], sig.args[3], types.intp)
        base = builder.gep(sdata, [first])
        kc = ir.Constant(intp, width)
        blocks = builder.sdiv(n, kc)
        lp = _vector_ptr(builder, ldata, vty)
        acc = cgutils.alloca_once(builder, vty)
        builder.store(builder.load(lp, align=align), acc)
        with cgutils.for_range(builder, blocks) as loop:
            p = _vector_ptr(builder, builder.gep(base, [builder.mul(loop.index, kc)]), vty)
            builder.store(_step(builder, name, builder.load(acc), builder.load(p, align=align)), acc)
        builder.store(builder.load(acc), lp, align=align)
        # The tail: fewer than k elements, each into its own lane (the other lanes are as if
        # the identity had been added to them).
        done = builder.mul(blocks, kc)
        tail = builder.gep(base, [done])
        with cgutils.for_range(builder, builder.sub(n, done)) as loop:
            q = builder.gep(ldata, [loop.index])
            x = builder.load(builder.gep(tail, [loop.index]))
            builder.store(_step(builder, name, builder.load(q), x), q)
        return context.get_dummy_value()

    return types.none(lanes, src, start, count, op, k), codegen


@intrinsic
def lanes_total(typingctx, lanes, op, k):
    """The ``k`` lanes folded in halves (lane j with lane j + k/2, and so on) into one value."""
    if not (_float_array(lanes) and _literals(op, k)):
        return None
    name, width = op.literal_value, k.literal_value

    def codegen(context, builder, sig, args):
        data = _data(context, builder, sig.args[0], args[0])
        fty = context.get_value_type(sig.args[0].dtype)
        v = builder.load(_vector_ptr(builder, data, ir.VectorType(fty, width)),
                         align=sig.args[0].dtype.bitwidth // 8)
        return _fold(builder, name, v, width)

    return lanes.dtype(lanes, op, k), codegen


def _fold(builder, name: str, v, width: int):
    i32 = ir.IntType(32)
    half = width
    while half > 1:
        half //= 2
        lo = builder.shuffle_vector(v, v, ir.Constant(ir.VectorType(i32, half), list(range(half))))
        hi = builder.shuffle_vector(v, v, ir.Constant(ir.VectorType(i32, half), list(range(half, 2 * half))))
        v = _step(builder, name, lo, hi)
    return builder.extract_element(v, ir.Constant(i32, 0))


@intrinsic
def lanes_row(typingctx, src, start, count, op, k):
    """One row reduced by lanes in registers: the ``k`` lanes of ``count`` elements of ``src``
    (flat, from ``start``), folded; the same value as reset, add and total on a lanes buffer."""
    if not (_float_array(src) and _literals(op, k) and isinstance(start, types.Integer)
            and isinstance(count, types.Integer)):
        return None
    name, width = op.literal_value, k.literal_value

    def codegen(context, builder, sig, args):
        src_ty = sig.args[0]
        sdata = _data(context, builder, src_ty, args[0])
        align = src_ty.dtype.bitwidth // 8
        fty = context.get_value_type(src_ty.dtype)
        vty = ir.VectorType(fty, width)
        intp = context.get_value_type(types.intp)
        first = context.cast(builder, args[1], sig.args[1], types.intp)
        n = context.cast(builder, args[2], sig.args[2], types.intp)
        base = builder.gep(sdata, [first])
        kc = ir.Constant(intp, width)
        blocks = builder.sdiv(n, kc)
        ident = _identity(fty, name, width)
        acc = cgutils.alloca_once(builder, vty)
        builder.store(ident, acc)
        with cgutils.for_range(builder, blocks) as loop:
            p = _vector_ptr(builder, builder.gep(base, [builder.mul(loop.index, kc)]), vty)
            builder.store(_step(builder, name, builder.load(acc), builder.load(p, align=align)), acc)
        # The tail, padded with the identity to a whole block.
        done = builder.mul(blocks, kc)
        rest = builder.sub(n, done)
        with builder.if_then(builder.icmp_signed(">", rest, ir.Constant(intp, 0))):
            pad = cgutils.alloca_once(builder, vty)
            builder.store(ident, pad)
            padp = builder.bitcast(pad, fty.as_pointer())
            tail = builder.gep(base, [done])
            with cgutils.for_range(builder, rest) as loop:
                builder.store(builder.load(builder.gep(tail, [loop.index])), builder.gep(padp, [loop.index]))
            builder.store(_step(builder, name, builder.load(acc), builder.load(pad)), acc)
        return _fold(builder, name, builder.load(acc), width)

    return src.dtype(src, start, count, op, k), codegen
