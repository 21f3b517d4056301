"""LLVM-level building blocks that plain numba code cannot express exactly.

numba widens small integers to 64 bits and turns mixed signed/unsigned arithmetic into floats,
has no scalar bit casts, no NaN-propagating min/max and no way to allow reassociation on a single
reduction. StableHLO needs all of these bit-exact, and the fused loops need them without
breaking vectorisation, so each one here is a numba ``@intrinsic`` that emits one or a few LLVM
instructions at the operand's own width. Generated kernels and :mod:`.vecmath` call them like
functions; after LLVM inlining nothing of the call remains.

Integer semantics follow XLA (what JAX programs are tested against): ``divide`` by zero gives -1
(all bits set), ``MIN / -1`` gives ``MIN``; ``remainder`` by zero gives the dividend and
``MIN % -1`` gives 0; shift counts are read as unsigned and a count past the width shifts
everything out (the arithmetic right shift fills with the sign); float to integer conversion
truncates toward zero and saturates, NaN becoming 0.
"""

from __future__ import annotations

from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.core.extending import intrinsic

__all__ = [
    "bitcast", "ctlz", "ctpop", "f2i", "fmaximum", "fminimum", "iadd", "iand", "idiv", "imul",
    "inot", "ior", "irem", "isub", "ixor", "icmp", "i2i", "i2f", "radd", "rmul", "rmax", "rmin",
    "shl", "shr_arith", "shr_logical", "fcmp_total", "ffma", "fldexp",
    "wide_vectors",
]


def _int_width(ty) -> int:
    return 1 if isinstance(ty, types.Boolean) else ty.bitwidth


def _is_signed(ty) -> bool:
    return isinstance(ty, types.Integer) and ty.signed


def _same_type_binop(build):
    """An intrinsic ``f(a, b) -> type(a)`` for two operands of one integer type."""

    def typer(typingctx, a, b):
        if a != b:
            return None

        def codegen(context, builder, sig, args):
            return build(builder, args[0], args[1], sig.args[0])

        return a(a, b), codegen

    return typer


iadd = intrinsic(_same_type_binop(lambda b, x, y, t: b.add(x, y)))
isub = intrinsic(_same_type_binop(lambda b, x, y, t: b.sub(x, y)))
imul = intrinsic(_same_type_binop(lambda b, x, y, t: b.mul(x, y)))
iand = intrinsic(_same_type_binop(lambda b, x, y, t: b.and_(x, y)))
ior = intrinsic(_same_type_binop(lambda b, x, y, t: b.or_(x, y)))
ixor = intrinsic(_same_type_binop(lambda b, x, y, t: b.xor(x, y)))


def _guarded_divisor(builder, x, y, ty):
    """The divisor made safe for LLVM, whose division is undefined for y == 0 and, signed,
    for MIN / -1; returns (safe divisor, y == 0, MIN / -1 (None if unsigned), MIN)."""
    lty = x.type
    is_zero = builder.icmp_unsigned("==", y, ir.Constant(lty, 0))
    if not _is_signed(ty):
        return builder.select(is_zero, ir.Constant(lty, 1), y), is_zero, None, None
    minval = ir.Constant(lty, -(1 << (lty.width - 1)))
    overflow = builder.and_(builder.icmp_signed("==", x, minval),
                            builder.icmp_signed("==", y, ir.Constant(lty, -1)))
    safe = builder.select(builder.or_(is_zero, overflow), ir.Constant(lty, 1), y)
    return safe, is_zero, overflow, minval


def _build_div(builder, x, y, ty):
    # XLA: x / 0 is -1 (all bits set), MIN / -1 is MIN.
    safe, is_zero, overflow, minval = _guarded_divisor(builder, x, y, ty)
    ones = ir.Constant(x.type, -1)
    if overflow is None:
        return builder.select(is_zero, ones, builder.udiv(x, safe))
    q = builder.select(overflow, minval, builder.sdiv(x, safe))
    return builder.select(is_zero, ones, q)


def _build_rem(builder, x, y, ty):
    # XLA: x % 0 is x, MIN % -1 is 0.
    safe, is_zero, overflow, _ = _guarded_divisor(builder, x, y, ty)
    if overflow is None:
        return builder.select(is_zero, x, builder.urem(x, safe))
    r = builder.select(overflow, ir.Constant(x.type, 0), builder.srem(x, safe))
    return builder.select(is_zero, x, r)


idiv = intrinsic(_same_type_binop(_build_div))
irem = intrinsic(_same_type_binop(_build_rem))


def _build_shift(kind):
    def build(builder, x, s, ty):
        lty = x.type
        width = ir.Constant(lty, lty.width)
        in_range = builder.icmp_unsigned("<", s, width)
        safe = builder.select(in_range, s, ir.Constant(lty, 0))
        if kind == "shl":
            return builder.select(in_range, builder.shl(x, safe), ir.Constant(lty, 0))
        if kind == "lshr":
            return builder.select(in_range, builder.lshr(x, safe), ir.Constant(lty, 0))
        fill = builder.ashr(x, ir.Constant(lty, lty.width - 1))
        return builder.select(in_range, builder.ashr(x, safe), fill)

    return build


shl = intrinsic(_same_type_binop(_build_shift("shl")))
shr_logical = intrinsic(_same_type_binop(_build_shift("lshr")))
shr_arith = intrinsic(_same_type_binop(_build_shift("ashr")))


@intrinsic
def inot(typingctx, a):
    """Bitwise not at the operand's width (``not`` of a bool is logical not)."""

    def codegen(context, builder, sig, args):
        return builder.not_(args[0])

    return a(a), codegen


_ICMP = {"EQ": "==", "NE": "!=", "LT": "<", "LE": "<=", "GT": ">", "GE": ">="}


@intrinsic
def icmp(typingctx, a, b, direction):
    """Integer comparison at the operands' width; ``direction`` is a literal ``"LT"``...

    Signedness comes from the operand type, so ui32 compares unsigned as StableHLO's
    ``UNSIGNED`` comparison type asks (JAX emits the type that matches the element type).
    """
    if a != b or not isinstance(direction, types.StringLiteral):
        return None
    op = _ICMP[direction.literal_value]

    def codegen(context, builder, sig, args):
        if _is_signed(sig.args[0]):
            return builder.icmp_signed(op, args[0], args[1])
        return builder.icmp_unsigned(op, args[0], args[1])

    return types.boolean(a, b, direction), codegen


@intrinsic
def bitcast(typingctx, x, to):
    """Reinterpret the bits of a scalar as another type of the same width."""
    target = to.instance_type

    def codegen(context, builder, sig, args):
        return builder.bitcast(args[0], context.get_value_type(target))

    return target(x, to), codegen


@intrinsic
def i2i(typingctx, x, to):
    """Integer (or bool) to integer: truncate, or extend by the *source* signedness."""
    target = to.instance_type

    def codegen(context, builder, sig, args):
        src = sig.args[0]
        lty = context.get_value_type(target)
        sw, dw = _int_width(src), _int_width(target)
        v = args[0]
        if isinstance(src, types.Boolean):
            v = builder.zext(v, ir.IntType(8)) if v.type.width == 1 else v
            v = builder.and_(v, ir.Constant(v.type, 1))
            sw = v.type.width
        if isinstance(target, types.Boolean):
            return builder.icmp_unsigned("!=", v, ir.Constant(v.type, 0))
        if sw == dw:
            return v
        if sw > dw:
            return builder.trunc(v, lty)
        return builder.sext(v, lty) if _is_signed(src) else builder.zext(v, lty)

    return target(x, to), codegen


@intrinsic
def i2f(typingctx, x, to):
    """Integer (or bool) to float, rounding to nearest even; signedness from the source."""
    target = to.instance_type

    def codegen(context, builder, sig, args):
        src = sig.args[0]
        lty = context.get_value_type(target)
        v = args[0]
        if isinstance(src, types.Boolean):
            return builder.uitofp(v, lty)
        return builder.sitofp(v, lty) if _is_signed(src) else builder.uitofp(v, lty)

    return target(x, to), codegen


@intrinsic
def f2i(typingctx, x, to):
    """Float to integer: truncate toward zero, saturate at the type's range, NaN to 0."""
    target = to.instance_type

    def codegen(context, builder, sig, args):
        lty = context.get_value_type(target)
        if isinstance(target, types.Boolean):
            return builder.fcmp_unordered("!=", args[0], ir.Constant(args[0].type, 0.0))
        name = "llvm.fptosi.sat" if _is_signed(target) else "llvm.fptoui.sat"
        fn = builder.module.declare_intrinsic(name, [lty, args[0].type],
                                              ir.FunctionType(lty, [args[0].type]))
        return builder.call(fn, [args[0]])

    return target(x, to), codegen


def build_fmaxmin(builder: ir.IRBuilder, kind: str, x: ir.Value, y: ir.Value) -> ir.Value:
    """IEEE 754-2019 maximum (``kind="max"``) or minimum of two floats, or of two vectors of
    floats lane by lane: NaN if either is NaN, and -0 < +0 (LLVM's ``llvm.maximum`` and
    ``llvm.minimum``, which x86 code generation has from LLVM 17 on: numba 0.63 brings 20)."""
    fty = x.type
    name = "llvm.maximum" if kind == "max" else "llvm.minimum"
    if isinstance(fty, ir.VectorType):
        # llvmlite names overloaded intrinsics from scalar types only: spell the vector one.
        bits = {ir.HalfType: 16, ir.FloatType: 32, ir.DoubleType: 64}[type(fty.element)]
        fn = cgutils.get_or_insert_function(
            builder.module, ir.FunctionType(fty, [fty, fty]), f"{name}.v{fty.count}f{bits}")
    else:
        fn = builder.module.declare_intrinsic(name, [fty], ir.FunctionType(fty, [fty, fty]))
    return builder.call(fn, [x, y])


def _float_intrinsic2(name):
    def typer(typingctx, a, b):
        if a != b or not isinstance(a, types.Float):
            return None

        def codegen(context, builder, sig, args):
            fty = args[0].type
            fn = builder.module.declare_intrinsic(name, [fty], ir.FunctionType(fty, [fty, fty]))
            return builder.call(fn, args)

        return a(a, b), codegen

    return typer


def _float_maxmin(kind):
    def typer(typingctx, a, b):
        if a != b or not isinstance(a, types.Float):
            return None

        def codegen(context, builder, sig, args):
            return build_fmaxmin(builder, kind, *args)

        return a(a, b), codegen

    return typer


#: IEEE 754-2019 maximum/minimum: NaN if either operand is NaN, and -0 < +0.
fmaximum = intrinsic(_float_maxmin("max"))
fminimum = intrinsic(_float_maxmin("min"))


def _reassoc_binop(kind):
    """A reduction step LLVM may reorder, so the loop vectoriser can split it into lanes.

    Only the accumulate instruction carries the flag: the rest of a fused loop body keeps
    strict IEEE semantics, which the float tricks in :mod:`.vecmath` rely on.
    """

    def typer(typingctx, a, b):
        if a != b:
            return None

        def codegen(context, builder, sig, args):
            x, y = args
            if isinstance(sig.args[0], types.Float):
                flags = ("reassoc", "nsz")
                if kind == "add":
                    return builder.fadd(x, y, flags=flags)
                if kind == "mul":
                    return builder.fmul(x, y, flags=flags)
                return build_fmaxmin(builder, kind, x, y)
            if kind == "add":
                return builder.add(x, y)
            if kind == "mul":
                return builder.mul(x, y)
            signed = _is_signed(sig.args[0])
            if isinstance(sig.args[0], types.Boolean):
                return builder.or_(x, y) if kind == "max" else builder.and_(x, y)
            op = ">" if kind == "max" else "<"
            cmp = builder.icmp_signed(op, x, y) if signed else builder.icmp_unsigned(op, x, y)
            return builder.select(cmp, x, y)

        return a(a, b), codegen

    return typer


radd = intrinsic(_reassoc_binop("add"))
rmul = intrinsic(_reassoc_binop("mul"))
rmax = intrinsic(_reassoc_binop("max"))
rmin = intrinsic(_reassoc_binop("min"))


def _int_intrinsic1(name):
    def typer(typingctx, a):
        if not isinstance(a, types.Integer):
            return None

        def codegen(context, builder, sig, args):
            lty = args[0].type
            if name == "llvm.ctlz":
                fn = builder.module.declare_intrinsic(name, [lty], ir.FunctionType(lty, [lty, ir.IntType(1)]))
                return builder.call(fn, [args[0], ir.Constant(ir.IntType(1), 0)])
            fn = builder.module.declare_intrinsic(name, [lty], ir.FunctionType(lty, [lty]))
            return builder.call(fn, [args[0]])

        return a(a), codegen

    return typer


ctlz = intrinsic(_int_intrinsic1("llvm.ctlz"))
ctpop = intrinsic(_int_intrinsic1("llvm.ctpop"))


@intrinsic
def fcmp_total(typingctx, a, b, direction):
    """Float comparison in StableHLO's ``TOTALORDER``: -NaN < -inf < ... < -0 < +0 < ... < +NaN.

    Maps the bits to a signed integer whose order is the total order (flip the magnitude bits
    of negatives), then compares integers.
    """
    if a != b or not isinstance(a, types.Float) or not isinstance(direction, types.StringLiteral):
        return None
    op = _ICMP[direction.literal_value]

    def codegen(context, builder, sig, args):
        ity = ir.IntType(sig.args[0].bitwidth)
        keys = []
        for v in args[:2]:
            bits = builder.bitcast(v, ity)
            sign = builder.ashr(bits, ir.Constant(ity, sig.args[0].bitwidth - 1))
            mask = builder.lshr(sign, ir.Constant(ity, 1))
            keys.append(builder.xor(bits, mask))
        return builder.icmp_signed(op, keys[0], keys[1])

    return types.boolean(a, b, direction), codegen


def _float_intrinsic1(name):
    def typer(typingctx, a):
        if not isinstance(a, types.Float):
            return None

        def codegen(context, builder, sig, args):
            fty = args[0].type
            fn = builder.module.declare_intrinsic(name, [fty], ir.FunctionType(fty, [fty]))
            return builder.call(fn, args)

        return a(a), codegen

    return typer


# Unary float operations as LLVM intrinsics, which the loop vectoriser widens (libm calls it
# would leave scalar, and a single scalar call keeps the whole fused loop scalar).
fsqrt = intrinsic(_float_intrinsic1("llvm.sqrt"))
fabs = intrinsic(_float_intrinsic1("llvm.fabs"))
ffloor = intrinsic(_float_intrinsic1("llvm.floor"))
fceil = intrinsic(_float_intrinsic1("llvm.ceil"))
ftrunc = intrinsic(_float_intrinsic1("llvm.trunc"))
#: Round half to even / half away from zero.
fround_even = intrinsic(_float_intrinsic1("llvm.roundeven"))
fround_afz = intrinsic(_float_intrinsic1("llvm.round"))
fcopysign = intrinsic(_float_intrinsic2("llvm.copysign"))

__all__ += ["fsqrt", "fabs", "ffloor", "fceil", "ftrunc", "fround_even", "fround_afz", "fcopysign"]


def _raw_shift(kind):
    def typer(typingctx, a, b):
        if a != b or not isinstance(a, types.Integer):
            return None

        def codegen(context, builder, sig, args):
            return getattr(builder, kind)(args[0], args[1])

        return a(a, b), codegen

    return typer


# Shifts by a count the caller knows is in range (no select): for bit tricks in vecmath.
shl_raw = intrinsic(_raw_shift("shl"))
ashr_raw = intrinsic(_raw_shift("ashr"))
lshr_raw = intrinsic(_raw_shift("lshr"))

__all__ += ["shl_raw", "ashr_raw", "lshr_raw"]


_HUGE = 1 << 21  # 2 MiB transparent huge pages
_MADV_HUGEPAGE = 14


def _itemsize(context, aty: types.Array) -> int:
    """Bytes per element of arrays of type ``aty``."""
    return context.get_abi_sizeof(context.get_data_type(aty.dtype))


@intrinsic
def advise_hugepages(typingctx, arr):
    """Ask the kernel to back a large array with transparent huge pages (``madvise``), as numpy
    does for its own large allocations: a fresh 32 MiB output then costs ~500 page faults
    instead of ~8000, which is several milliseconds per run. Only the 2 MiB-aligned interior of
    the array is advised; failure (no THP support) is ignored."""
    if not isinstance(arr, types.Array):
        return None

    def codegen(context, builder, sig, args):
        ary = context.make_array(sig.args[0])(context, builder, args[0])
        i64 = ir.IntType(64)
        data = builder.ptrtoint(ary.data, i64)
        itemsize = context.get_constant(types.intp, _itemsize(context, sig.args[0]))
        nbytes = builder.mul(ary.nitems, itemsize)
        mask = ir.Constant(i64, ~(_HUGE - 1))
        start = builder.and_(builder.add(data, ir.Constant(i64, _HUGE - 1)), mask)
        end = builder.and_(builder.add(data, nbytes), mask)
        fnty = ir.FunctionType(ir.IntType(32), [ir.IntType(8).as_pointer(), i64, ir.IntType(32)])
        fn = builder.module.globals.get("madvise") or ir.Function(builder.module, fnty, "madvise")
        with builder.if_then(builder.icmp_unsigned(">", end, start)):
            builder.call(fn, [builder.inttoptr(start, ir.IntType(8).as_pointer()), builder.sub(end, start),
                              ir.Constant(ir.IntType(32), _MADV_HUGEPAGE)])
        return context.get_dummy_value()

    return types.none(arr), codegen


__all__ += ["advise_hugepages"]

_STREAM_VECTOR = 32  # bytes per non-temporal store: an AVX register, the widest every x86-64 with AVX has


@intrinsic
def stream_row(typingctx, dst, offset, src):
    """Copy all of ``src`` (C-contiguous) into the flat elements of ``dst`` from ``offset`` on,
    with non-temporal stores: the data goes to memory without first reading the lines it
    replaces into the caches (a normal store reads each line before writing it, a third more
    memory traffic for an output written once) and without evicting what the caches hold.
    Normal stores up to the first 32-byte boundary of the destination and after the last one.
    The stores are weakly ordered: :func:`stream_fence` must follow before another thread reads
    the data (the generated code puts one at the end of each chunk of a parallel loop)."""
    if not (isinstance(dst, types.Array) and isinstance(src, types.Array) and isinstance(offset, types.Integer)
            and dst.dtype == src.dtype and src.layout == "C"):
        return None

    def codegen(context, builder, sig, args):
        from numba.core import cgutils

        dty, _, sty = sig.args
        dst_ary = context.make_array(dty)(context, builder, args[0])
        src_ary = context.make_array(sty)(context, builder, args[2])
        i8p = ir.IntType(8).as_pointer()
        i64 = ir.IntType(64)
        itemsize = ir.Constant(i64, _itemsize(context, dty))
        start = builder.mul(context.cast(builder, args[1], sig.args[1], types.int64), itemsize)
        dptr = builder.gep(builder.bitcast(dst_ary.data, i8p), [start])
        sptr = builder.bitcast(src_ary.data, i8p)
        nbytes = builder.mul(src_ary.nitems, itemsize)
        width = ir.Constant(i64, _STREAM_VECTOR)
        misaligned = builder.and_(builder.ptrtoint(dptr, i64), ir.Constant(i64, _STREAM_VECTOR - 1))
        head = builder.and_(builder.sub(width, misaligned), ir.Constant(i64, _STREAM_VECTOR - 1))
        head = builder.select(builder.icmp_unsigned("<", head, nbytes), head, nbytes)
        cgutils.raw_memcpy(builder, dptr, sptr, head, 1)
        body = builder.sub(nbytes, head)
        vectors = builder.udiv(body, width)
        vec = ir.VectorType(i64, _STREAM_VECTOR // 8)
        nontemporal = builder.module.add_metadata([ir.Constant(ir.IntType(32), 1)])
        with cgutils.for_range(builder, vectors) as loop:
            at = builder.add(head, builder.mul(loop.index, width))
            value = builder.load(builder.bitcast(builder.gep(sptr, [at]), vec.as_pointer()), align=1)
            store = builder.store(value, builder.bitcast(builder.gep(dptr, [at]), vec.as_pointer()),
                                  align=_STREAM_VECTOR)
            store.set_metadata("nontemporal", nontemporal)
        done = builder.add(head, builder.mul(vectors, width))
        cgutils.raw_memcpy(builder, builder.gep(dptr, [done]), builder.gep(sptr, [done]),
                           builder.sub(nbytes, done), 1)
        return context.get_dummy_value()

    return types.none(dst, offset, src), codegen


@intrinsic
def stream_fence(typingctx):
    """Order the :func:`stream_row` stores before the stores that follow (x86 ``sfence``; a
    release fence elsewhere), so that a thread that sees the loop done sees the data."""

    def codegen(context, builder, sig, args):
        from llvmlite import binding

        if binding.get_process_triple().startswith(("x86_64", "i386", "i686")):
            fn = builder.module.globals.get("llvm.x86.sse.sfence") or ir.Function(
                builder.module, ir.FunctionType(ir.VoidType(), []), "llvm.x86.sse.sfence")
            builder.call(fn, [])
        else:
            builder.fence("release")
        return context.get_dummy_value()

    return types.none(), codegen


__all__ += ["stream_fence", "stream_row"]


_LINE = 64  # bytes per cache line on every x86-64 and most other cores


@intrinsic
def prefetch_span(typingctx, arr, offset, count):
    """Ask for the cache lines of the flat elements ``[offset, offset + count)`` of ``arr`` (C
    contiguous; other layouts are left alone) to be brought in ahead of their reads
    (``prefetcht0``), clipped to the array. No effect on any value: a hint, which never faults."""
    if not (isinstance(arr, types.Array) and isinstance(offset, types.Integer) and isinstance(count, types.Integer)):
        return None

    def codegen(context, builder, sig, args):
        from numba.core import cgutils

        aty = sig.args[0]
        if aty.layout != "C":
            return context.get_dummy_value()
        ary = context.make_array(aty)(context, builder, args[0])
        i8p, i32, i64 = ir.IntType(8).as_pointer(), ir.IntType(32), ir.IntType(64)
        nitems = builder.sext(ary.nitems, i64) if ary.nitems.type.width < 64 else ary.nitems
        zero = ir.Constant(i64, 0)

        def clip(value, high):  # into [0, high], with no sum that could overflow
            value = builder.select(builder.icmp_signed("<", value, zero), zero, value)
            return builder.select(builder.icmp_signed(">", value, high), high, value)

        start = clip(context.cast(builder, args[1], sig.args[1], types.int64), nitems)
        count = clip(context.cast(builder, args[2], sig.args[2], types.int64), builder.sub(nitems, start))
        itemsize = ir.Constant(i64, _itemsize(context, aty))
        nbytes = builder.mul(count, itemsize)
        lines = builder.udiv(builder.add(nbytes, ir.Constant(i64, _LINE - 1)), ir.Constant(i64, _LINE))
        base = builder.gep(builder.bitcast(ary.data, i8p), [builder.mul(start, itemsize)])
        fn = cgutils.get_or_insert_function(
            builder.module, ir.FunctionType(ir.VoidType(), [i8p, i32, i32, i32]), "llvm.prefetch.p0")
        # read, keep in all cache levels, data cache
        flags = [ir.Constant(i32, 0), ir.Constant(i32, 3), ir.Constant(i32, 1)]
        with cgutils.for_range(builder, lines) as loop:
            builder.call(fn, [builder.gep(base, [builder.mul(loop.index, ir.Constant(i64, _LINE))])] + flags)
        return context.get_dummy_value()

    return types.none(arr, offset, count), codegen


__all__ += ["prefetch_span"]


def _item_pointer(context, builder, aryty, ary_val, idxty, idx_val):
    from numba.core import cgutils

    ary = context.make_array(aryty)(context, builder, ary_val)
    if isinstance(idxty, types.BaseTuple):
        inds = cgutils.unpack_tuple(builder, idx_val, len(idxty))
        tys = list(idxty.types)
    else:
        inds, tys = [idx_val], [idxty]
    inds = [context.cast(builder, i, t, types.intp) for i, t in zip(inds, tys)]
    return cgutils.get_item_pointer2(
        context, builder, data=ary.data, shape=cgutils.unpack_tuple(builder, ary.shape, aryty.ndim),
        strides=cgutils.unpack_tuple(builder, ary.strides, aryty.ndim), layout=aryty.layout, inds=inds,
        wraparound=False, boundscheck=False)


def _index_ok(arr, idx) -> bool:
    if not isinstance(arr, types.Array):
        return False
    n = len(idx) if isinstance(idx, types.BaseTuple) else 1
    items = idx.types if isinstance(idx, types.BaseTuple) else (idx,)
    return n == arr.ndim and all(isinstance(t, (types.Integer, types.Boolean)) for t in items)


@intrinsic
def ld(typingctx, arr, idx):
    """``arr[idx]`` for an index the lowering knows is in bounds and non-negative.

    numba's own indexing wraps negative indices around, a compare and select per access that
    LLVM only removes when it can prove the index non-negative; for computed indices (slices,
    reversals, chunked parallel loops) it cannot, and the loop stays scalar."""
    if not _index_ok(arr, idx):
        return None

    def codegen(context, builder, sig, args):
        ptr = _item_pointer(context, builder, sig.args[0], args[0], sig.args[1], args[1])
        return context.unpack_value(builder, sig.args[0].dtype, ptr)

    return arr.dtype(arr, idx), codegen


@intrinsic
def st(typingctx, arr, idx, value):
    """``arr[idx] = value`` without negative-index wrap-around (see :func:`ld`)."""
    if not _index_ok(arr, idx):
        return None

    def codegen(context, builder, sig, args):
        aryty = sig.args[0]
        ptr = _item_pointer(context, builder, aryty, args[0], sig.args[1], args[1])
        val = context.cast(builder, args[2], sig.args[2], aryty.dtype)
        context.pack_value(builder, aryty.dtype, val, ptr)
        return context.get_dummy_value()

    return types.none(arr, idx, value), codegen


__all__ += ["ld", "st"]


def _ffma(typingctx, a, b, c):
    """``a * b + c`` rounded once (``llvm.fma``), on floats of one type: one instruction where
    the target has FMA (.target), elsewhere a call to libm's ``fma``, as exact but scalar."""
    if not (a == b == c and isinstance(a, types.Float)):
        return None

    def codegen(context, builder, sig, args):
        fty = args[0].type
        fn = builder.module.declare_intrinsic("llvm.fma", [fty], ir.FunctionType(fty, [fty, fty, fty]))
        return builder.call(fn, args)

    return a(a, b, c), codegen


def _fldexp(typingctx, x, n):
    """``x * 2**n`` rounded once (``llvm.ldexp``: IEEE's ``scaleB``), so a result below the
    normal range comes out denormal and one past it infinite; ``n`` an int32. One instruction
    with AVX-512 (``vscalef``), elsewhere a call to libm's ``ldexp``, which keeps a loop scalar."""
    if not isinstance(x, types.Float) or n != types.int32:
        return None

    def codegen(context, builder, sig, args):
        fty = args[0].type
        bits = {ir.HalfType: 16, ir.FloatType: 32, ir.DoubleType: 64}[type(fty)]
        name = f"llvm.ldexp.f{bits}.i32"
        fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(fty, [fty, ir.IntType(32)]), name)
        return builder.call(fn, args)

    return x(x, n), codegen


ffma = intrinsic(_ffma)
fldexp = intrinsic(_fldexp)


@intrinsic
def wide_vectors(typingctx):
    """Ask LLVM to vectorise the function this is called in with 512-bit registers, where the
    target decided so (.target WIDE_VECTORS); elsewhere nothing. Called first in every generated
    function and in every ``prange`` body, which numba compiles as a function of its own.

    It sets LLVM's ``prefer-vector-width`` (what ``clang -mprefer-vector-width=512`` sets) and
    ``min-legal-vector-width`` on that function alone. llvmlite's attribute set admits only the
    attributes it knows, so these two string attributes are added past its check; LLVM reads
    them from the function's header like any other."""
    from .target import WIDE_VECTORS

    def codegen(context, builder, sig, args):
        if WIDE_VECTORS:
            for attribute in ('"prefer-vector-width"="512"', '"min-legal-vector-width"="512"'):
                set.add(builder.function.attributes, attribute)
        return context.get_dummy_value()

    return types.none(), codegen
