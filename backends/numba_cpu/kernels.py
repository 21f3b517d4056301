"""Lowering rules for the ops that get loops of their own (see :mod:`.rules` for the rest).

``dot_general`` calls BLAS through numba's ``np.dot`` on 2-D float slices (batch dimensions as
a loop; a large product in row blocks that the threads claim, :func:`dot_row_blocks`); every
other kernel is explicit loops whose operand reads go through ``ctx.read``,
so a producer chain fuses into them where the rule allows it. ``while`` and ``case`` become
Python control flow inside the same compiled function.
"""

from __future__ import annotations

import functools
import math
from typing import Callable, Mapping, Sequence

import numpy as np

from pjrt_hub.backends.stablehlo import Op, Value
from pjrt_hub.backends.stablehlo.loops import updated_in_place

from .codegen import ArrayBinding, Binding, Lowering, ScalarBinding, index_expr, load_text, store_text
from .rules import convert_text, kernel, reducer, simple_reducer, unsupported_variant
from .source import ElementKind, Expr, Scope

__all__ = ["DOT_BLOCK_ALIGN", "DOT_BLOCK_MACS", "DOT_BLOCK_ROWS", "LARGE_DOT_MACS", "SMALL_DOT_MACS",
           "dot_block_start", "dot_row_blocks"]

#: Products with fewer multiply-adds (batch * M * N * K) run single-threaded.
SMALL_DOT_MACS = 1 << 23
#: Products with at least this many (~10 ms on one core) that OpenBLAS runs (see
#: :func:`dot_row_blocks`) use every thread even when other processes keep the cores busy: a
#: thread's share of the cores is worth more to them than the time slice OpenBLAS's fixed shares
#: may wait for a thread the scheduler is not running.
LARGE_DOT_MACS = 1 << 27
#: Output rows a row block of a product has at least (see :func:`dot_row_blocks`).
DOT_BLOCK_ROWS = 128
#: Multiply-adds a row block's BLAS call has at least, far above OpenBLAS's small-matrix
#: cut-offs (100**3 on SkylakeX; see :func:`dot_row_blocks`).
DOT_BLOCK_MACS = 1 << 22
#: Row blocks start at multiples of this many rows (:func:`dot_block_start`): of the widths (12,
#: 8, 4) in which OpenBLAS's AVX2 single-precision kernel takes a call's rows (BLAS's columns:
#: numba passes the row-major product transposed), and of those of its other x86 kernels, so
#: that a row falls in the same kind of tile in its block as in the whole product.
DOT_BLOCK_ALIGN = 48


def dot_row_blocks(m: int, n: int, k: int, batch: int, threads: int, lhs_transposed: bool) -> int:
    """Row blocks a BLAS product (``batch`` products of ``m`` x ``k`` by ``k`` x ``n``) is cut
    into, up to one per thread, each one single-threaded BLAS call per batch; 1: never cut. The
    blocks are the chunks of a parallel loop, which threads claim as they come (.pool), so that a
    busy machine costs a product only the cores it takes; they run in sequence where the BLAS's
    threads cannot be set per call (``dot_in_blocks``, :func:`.threads.apply`).

    A product has the same bits on a busy machine and an idle one, and on both tiers (the eager
    tier cuts its products alike; the tests check the bits), because its BLAS calls are the same
    and each runs on a fixed count of OpenBLAS's threads: one for a block, the program's for a
    product that is not cut. OpenBLAS gives a product other bits on several threads than on one:
    its threaded driver splits the contracted dimension otherwise (a remainder of k between Q and
    2Q in two halves, where the single-threaded one rounds the first half up to its kernel's
    unroll: k = 1000 with the AVX-512 kernels, whose Q is 384, sums in another order), and its
    AVX2 single-precision kernel keeps two partial sums in some tiles and one in others, so that
    an element's bits depend on where its thread's share of the rows starts. So a cut product
    never runs on OpenBLAS's threads, idle machine or not. Its blocks start at multiples of
    :data:`DOT_BLOCK_ALIGN` rows (:func:`dot_block_start`), where that kernel's tiles start in
    the whole product too, so that the blocks give the bits of one single-threaded call for any
    number of them. A block has :data:`DOT_BLOCK_ROWS` rows and :data:`DOT_BLOCK_MACS`
    multiply-adds per call at least, less that rounding: a smaller call may go to OpenBLAS's small-matrix kernel,
    which rounds differently, and fewer rows cost more in repeated packing of the right-hand side
    than the threads gain. Products below :data:`SMALL_DOT_MACS` run on one thread anyway, and the
    blocks need the left side's rows contiguous (not a transposed view) and more than one column
    (numba calls ``gemm`` for each block as for the whole)."""
    if batch * m * n * k < SMALL_DOT_MACS or threads < 2 or lhs_transposed or n < 2:
        return 1
    blocks = min(threads, m // DOT_BLOCK_ROWS, m * n * k // DOT_BLOCK_MACS)
    return blocks if blocks >= 2 else 1


def dot_block_start(c: int, m: int, blocks: int) -> int:
    """The first row of row block ``c`` of ``m`` rows cut into ``blocks`` (``m`` for
    ``c == blocks``): ``c / blocks`` of the rows, to the nearest multiple of
    :data:`DOT_BLOCK_ALIGN`. The generated code computes it with :func:`_block_start_text`."""
    if c >= blocks:
        return m
    return (c * m // blocks + DOT_BLOCK_ALIGN // 2) // DOT_BLOCK_ALIGN * DOT_BLOCK_ALIGN


def _block_start_text(c: str, m: int, blocks: int) -> str:
    """:func:`dot_block_start` as the text of an expression of ``c`` (an index below ``blocks``)."""
    return f"({c} * {m} // {blocks} + {DOT_BLOCK_ALIGN // 2}) // {DOT_BLOCK_ALIGN} * {DOT_BLOCK_ALIGN}"


def _row_blocks(ctx: Lowering, header: str, blocks: int, M: int, B: int, b: str, l3: str, o3: str,
                rt_of: Callable[[str], str]) -> None:
    """The product in ``blocks`` row blocks, the loop over them opened with ``header``, each
    block one single-threaded BLAS call per batch (scipy's OpenBLAS keeps one thread count for
    the process; a BLAS that keeps one per thread needs it set in each block too)."""
    outer = ctx.fresh("nb")
    ctx.scope.emit(f"{outer} = blas_threads(1)")
    block, lo, hi, prev = ctx.fresh("c"), ctx.fresh("lo"), ctx.fresh("hi"), ctx.fresh("nb")
    with ctx.block_scope(header.format(block=block)) as loop:
        loop.extract = "prange(" in header
        ctx.scope.emit(f"{lo} = {_block_start_text(block, M, blocks)}")
        after = _block_start_text(f"({block} + 1)", M, blocks)
        ctx.scope.emit(f"{hi} = {M} if {block} + 1 == {blocks} else {after}")
        ctx.scope.emit(f"{prev} = blas_threads(1)")
        with ctx.block_scope(f"for {b} in range({B}):"):
            ctx.scope.emit(f"np.dot({l3}[{b}][{lo}:{hi}], {rt_of(b)}, {o3}[{b}][{lo}:{hi}])")
        ctx.scope.emit(f"blas_threads({prev})")
    ctx.scope.emit(f"blas_threads({outer})")


def _one_call(ctx: Lowering, macs: int, B: int, b: str, l3: str, lt: bool, o3: str,
              rt_of: Callable[[str], str]) -> None:
    """A product as one BLAS call per batch. A small one runs on this thread alone, a large one
    on every thread the program was compiled for, busy machine or not; one in between uses the
    threads the runtime sets for the program (see .threads)."""
    pinned = 1 if macs < SMALL_DOT_MACS else ctx.options.num_threads if macs >= LARGE_DOT_MACS else 0
    prev = ctx.fresh("nb")
    if pinned:
        ctx.scope.emit(f"{prev} = blas_threads({pinned})")
    with ctx.block_scope(f"for {b} in range({B}):"):
        lt_text = f"{l3}[{b}].T" if lt else f"{l3}[{b}]"
        ctx.scope.emit(f"np.dot({lt_text}, {rt_of(b)}, {o3}[{b}])")
    if pinned:
        ctx.scope.emit(f"blas_threads({prev})")


def _new_array(ctx: Lowering, v: Value) -> tuple[str, ElementKind]:
    name = ctx.fresh("a")
    kind = ctx.kind(v)
    ctx.alloc(name, v.tensor_type.shape, kind)
    return name, kind


def _parts(idx: Sequence[Expr]) -> list[str]:
    return [x.text for x in idx]


def _carry(ctx: Lowering, b) -> str:
    """Text of a binding to assign to a loop-carried or branch result variable."""
    if isinstance(b, ArrayBinding):
        if b.is_global:
            name = ctx.fresh("a")
            ctx.scope.emit(f"{name} = {b.name}.copy()")
            return name
        return b.name
    return b.expr.text


# -- dot_general ------------------------------------------------------------------------------


@kernel("stablehlo.dot_general", "stablehlo.dot")
def _dot_general(ctx: Lowering, op: Op) -> Sequence[Binding]:
    lhs, rhs = op.operands
    lrank, rrank = len(lhs.tensor_type.shape), len(rhs.tensor_type.shape)
    # Dimensions of lhs (l) and rhs (r): batch (lb, rb), contracting (lc, rc) and free, the
    # others (lf, rf). The product is B batches of (M x K) @ (K x N).
    lb: tuple[int, ...]
    rb: tuple[int, ...]
    if op.name == "stablehlo.dot":
        lb, rb, lc, rc = (), (), (lrank - 1,), (0,)
    else:
        dn = op.attr("dot_dimension_numbers")
        lb, rb = tuple(dn.lhs_batching_dimensions), tuple(dn.rhs_batching_dimensions)
        lc, rc = tuple(dn.lhs_contracting_dimensions), tuple(dn.rhs_contracting_dimensions)
    lf = tuple(d for d in range(lrank) if d not in lb + lc)
    rf = tuple(d for d in range(rrank) if d not in rb + rc)
    res = op.result
    out, out_kind = _new_array(ctx, res)
    lhs_kind, rhs_kind = ctx.kind(lhs), ctx.kind(rhs)
    ls, rs = lhs.tensor_type.shape, rhs.tensor_type.shape
    B = math.prod(ls[d] for d in lb)
    M = math.prod(ls[d] for d in lf)
    K = math.prod(ls[d] for d in lc)
    N = math.prod(rs[d] for d in rf)
    blas = out_kind.cls in "fc" and not out_kind.narrow and lhs_kind == out_kind and rhs_kind == out_kind and lrank and rrank
    if blas and M * N and K:
        l3, lt = _arrange(ctx, lhs, lb, lf, lc, (B, M, K))
        r3, rt = _arrange(ctx, rhs, rb, rc, rf, (B, K, N))
        o3 = ctx.fresh("r")
        ctx.scope.emit(f"{o3} = {out}.reshape(({B}, {M}, {N}))")
        rt_of = (lambda b: f"{r3}[{b}].T") if rt else (lambda b: f"{r3}[{b}]")
        macs = B * M * N * K
        if macs >= SMALL_DOT_MACS:
            ctx.threaded = True
        blocks = dot_row_blocks(M, N, K, B, ctx.options.num_threads, bool(lt))
        b = ctx.fresh("b")
        if blocks > 1:
            # Row blocks as the chunks of a parallel loop, busy machine or idle: OpenBLAS's own
            # threads would give other bits (dot_row_blocks). An idle machine pays for it with
            # the packing of the right-hand side, which each block does again where OpenBLAS's
            # threads share it. In sequence where .threads.apply finds the BLAS's threads cannot
            # be set (they would nest in numba's).
            ctx.parallel = True
            with ctx.block_scope("if dot_in_blocks():"):
                _row_blocks(ctx, f"for {{block}} in prange({blocks}):", blocks, M, B, b, l3, o3, rt_of)
            with ctx.block_scope("else:"):
                _row_blocks(ctx, f"for {{block}} in range({blocks}):", blocks, M, B, b, l3, o3, rt_of)
            return [ArrayBinding(out, out_kind)]
        _one_call(ctx, macs, B, b, l3, lt, o3, rt_of)
        return [ArrayBinding(out, out_kind)]
    if blas and M * N:
        # Nothing to contract: zeros (numba's fill does not take a 0-d array).
        ctx.scope.emit(f"{out}.reshape(({M * N * B},)).fill(0)" if res.tensor_type.rank == 0 else f"{out}.fill(0)")
        return [ArrayBinding(out, out_kind)]
    # Integers, narrow floats, mixed types: loops, accumulating in the result's compute type.
    zero = ctx.const(0, out_kind)
    with ctx.loops(res.tensor_type.shape) as oidx:
        bvars = oidx[: len(lb)]
        lvars = oidx[len(lb): len(lb) + len(lf)]
        rvars = oidx[len(lb) + len(lf):]
        acc = ctx.fresh("acc")
        ctx.scope.emit(f"{acc} = {zero.text}")
        with ctx.loops([ls[d] for d in lc]) as cvars:
            li: list = [None] * lrank
            ri: list = [None] * rrank
            for d, x in zip(lb, bvars):
                li[d] = x
            for d, x in zip(rb, bvars):
                ri[d] = x
            for d, x in zip(lf, lvars):
                li[d] = x
            for d, x in zip(rf, rvars):
                ri[d] = x
            for d, x in zip(lc, cvars):
                li[d] = x
            for d, x in zip(rc, cvars):
                ri[d] = x
            a_read = ctx.read(lhs, li)
            c_read = ctx.read(rhs, ri)
            a = convert_text(a_read, lhs_kind, out_kind)
            c = convert_text(c_read, rhs_kind, out_kind)
            a = a.text if isinstance(a, Expr) else a
            c = c.text if isinstance(c, Expr) else c
            if out_kind.cls in "fc":
                step = f"{acc} + {a} * {c}"
            elif out_kind.cls == "b":
                step = f"{acc} | ({a} & {c})"
            else:
                step = f"iadd({acc}, imul({a}, {c}))"
            ctx.scope.emit(f"{acc} = {step}")
        ctx.scope.emit(store_text(out, _parts(oidx), out_kind.store(out_kind.rounded(acc))))
    return [ArrayBinding(out, out_kind)]


def _arrange(ctx: Lowering, v: Value, batch, first, second, shape3) -> tuple[str, bool]:
    """A (B, first, second) 3-D array for ``v``: a reshaped view when the dims are already in
    that order (or in (B, second, first) order, returned transposed), else a permuted copy."""
    name = ctx.array(v)
    rank = len(v.tensor_type.shape)
    b3, f3, s3 = shape3
    if tuple(batch + first + second) == tuple(range(rank)):
        view = ctx.fresh("r")
        ctx.scope.emit(f"{view} = {name}.reshape(({b3}, {f3}, {s3}))")
        return view, False
    if tuple(batch + second + first) == tuple(range(rank)):
        view = ctx.fresh("r")
        ctx.scope.emit(f"{view} = {name}.reshape(({b3}, {s3}, {f3}))")
        return view, True
    order = tuple(batch + first + second)
    kind = ctx.kind(v)
    perm_shape = tuple(v.tensor_type.shape[d] for d in order)
    copy = ctx.fresh("a")
    ctx.alloc(copy, perm_shape, kind)

    def at(idx):
        src: list = [None] * rank
        for d, x in zip(order, idx):
            src[d] = x
        return ctx.read(v, src)

    ctx.fill(copy, kind, perm_shape, at)
    view = ctx.fresh("r")
    ctx.scope.emit(f"{view} = {copy}.reshape(({b3}, {f3}, {s3}))")
    return view, False


# -- copies with offsets ------------------------------------------------------------------------


@kernel("stablehlo.concatenate", lazy_operands=True)
def _concatenate(ctx: Lowering, op: Op) -> Sequence[Binding]:
    dim = int(op.attr("dimension"))
    out, kind = _new_array(ctx, op.result)
    offset = 0
    rank = len(op.result.tensor_type.shape)
    for v in op.operands:
        if v.tensor_type.shape[dim] == 0:
            continue
        offsets = ["0"] * rank
        offsets[dim] = str(offset)
        ctx.fill(out, kind, v.tensor_type.shape, functools.partial(ctx.read, v), offsets)
        offset += v.tensor_type.shape[dim]
    return [ArrayBinding(out, kind)]


@kernel("stablehlo.dynamic_update_slice", lazy_operands=True)
def _dynamic_update_slice(ctx: Lowering, op: Op) -> Sequence[Binding]:
    operand, update, *starts = op.operands
    b = ctx.env.get(operand)
    if isinstance(b, ArrayBinding) and ctx.owns(b) and ctx.sole_user(operand, op):
        # Nothing else reads the operand: update it in place (scan's stacked outputs would
        # otherwise be copied whole at every step).
        out, kind = b.name, b.kind
    else:
        out, kind = _new_array(ctx, op.result)
        ctx.fill(out, kind, operand.tensor_type.shape, lambda idx: ctx.read(operand, idx))
    offs = []
    for s, n, u in zip(starts, operand.tensor_type.shape, update.tensor_type.shape):
        sv = ctx.read(s, ())
        offs.append(ctx.temp(f"clamp_index({sv.text}, {n - u})", [sv], prefix="d").text)
    ctx.fill(out, kind, update.tensor_type.shape, lambda idx: ctx.read(update, idx), offs)
    return [ArrayBinding(out, kind)]


# -- control flow -----------------------------------------------------------------------------------


@kernel("stablehlo.while", lazy_operands=True)
def _while(ctx: Lowering, op: Op) -> Sequence[Binding]:
    cond, body = op.regions
    exclusive = updated_in_place(op)
    names = []
    for k, v in enumerate(op.operands):
        name = ctx.fresh("w")
        if v.tensor_type.rank == 0:
            ctx.scope.emit(f"{name} = {ctx.read(v, ()).text}")
        else:
            ctx.array(v)
            b = ctx.env[v]
            assert isinstance(b, ArrayBinding)  # array() made it one
            text = _carry(ctx, b)  # a global constant is copied already
            if k in exclusive and not b.is_global and not (ctx.owns(b) and ctx.sole_user(v, op)):
                # The loop will update this one in place: it starts from its own copy.
                text = f"{text}.copy()"
            ctx.note_assignment([name], [text])
            ctx.scope.emit(f"{name} = {text}")
            if k not in exclusive:
                ctx.share([name])
        names.append(name)
    with ctx.block_scope("while True:") as loop:
        ctx.emit_cancel_check()
        _bind_carried(ctx, cond.args, names, loop)
        with ctx.sharing(names):  # the body may update them in place, the condition never
            (c,) = ctx.lower_block(cond)
        assert isinstance(c, ScalarBinding)  # the condition is a 0-d i1: a scalar binding
        ctx.scope.emit(f"if not {c.expr.text}: break")
        _bind_carried(ctx, body.args, names, loop)
        _assign_results(ctx, names, ctx.lower_block(body))
    return [_named(ctx, v, name, ctx.scope) for v, name in zip(op.results, names)]


def _bind_carried(ctx: Lowering, args: Sequence[Value], names: Sequence[str], scope: Scope) -> None:
    for a, name in zip(args, names):
        ctx.env[a] = _named(ctx, a, name, scope)


def _named(ctx: Lowering, value: Value, name: str, scope: Scope) -> ArrayBinding | ScalarBinding:
    """The variable ``name`` holding ``value``: an array, or a scalar of ``scope``."""
    return ArrayBinding(name, ctx.kind(value)) if value.tensor_type.rank else ScalarBinding(Expr(name, scope))


def _assign_results(ctx: Lowering, names: list[str], results: Sequence[Binding]) -> None:
    """Assign a region's results to the op's result variables (loop carries, branch outputs)."""
    texts = [_carry(ctx, b) for b in results]
    ctx.note_assignment(names, texts)
    if names:
        ctx.scope.emit(f"{', '.join(names)} = {', '.join(texts)}")


@kernel("stablehlo.case", lazy_operands=True)
def _case(ctx: Lowering, op: Op) -> Sequence[Binding]:
    index = ctx.read(op.operands[0], ())
    names = [ctx.fresh("w") for _ in op.results]
    n = len(op.regions)
    for k, region in enumerate(op.regions):
        if n == 1:
            header = "if True:"
        elif k == 0:
            header = f"if icmp({index.text}, {ctx.const(0, ctx.kind(op.operands[0])).text}, 'EQ'):"
        elif k < n - 1:
            header = f"elif icmp({index.text}, {ctx.const(k, ctx.kind(op.operands[0])).text}, 'EQ'):"
        else:
            header = "else:"
        with ctx.block_scope(header):
            _assign_results(ctx, names, ctx.lower_block(region))
    ctx.share(names)  # a branch may return an outer value, or one value twice
    return [_named(ctx, v, name, ctx.scope) for v, name in zip(op.results, names)]


@kernel("stablehlo.optimization_barrier", "sdy.sharding_constraint", lazy_operands=True)
def _optimization_barrier(ctx: Lowering, op: Op) -> Sequence[Binding]:
    out = []
    for v in op.operands:
        if v.tensor_type.rank:
            name = ctx.array(v)
            # The result is the operand's array: two values, one array, so neither is updated
            # in place (a reader of one would see the other's update).
            ctx.share([name])
            out.append(ctx.env[v])
        else:
            out.append(ScalarBinding(ctx.read(v, ())))
    return out


# -- sorting ----------------------------------------------------------------------------------------


def _emit_sort(ctx: Lowering, operands: Sequence[Value], dim: int,
               less: Callable[[list[Expr], list[Expr]], Expr], take: int | None = None,
               write: Callable | None = None) -> None:
    """Stable bottom-up merge sort of each slice along ``dim``, comparing with ``less``.

    ``write(oidx, k, p)`` stores the k-th element of the sorted slice, ``p`` being the index
    (in the original slice) of the element that goes there.
    """
    assert write is not None  # every caller passes one
    shape = operands[0].tensor_type.shape
    n = shape[dim]
    rank = len(shape)
    for v in operands:
        ctx.array(v)
    pa, pb = ctx.fresh("pa"), ctx.fresh("pb")
    ctx.scope.emit(f"{pa} = np.empty({max(n, 1)}, np.int64)")
    ctx.scope.emit(f"{pb} = np.empty({max(n, 1)}, np.int64)")
    other = [d for d in range(rank) if d != dim]
    with ctx.loops([shape[d] for d in other]) as oidx:
        def at(p: Expr) -> list[Expr]:
            idx: list = [None] * rank
            for d, x in zip(other, oidx):
                idx[d] = x
            idx[dim] = p
            return idx

        k, w, lo, mid, hi, a, b, ta = (ctx.fresh(x) for x in ("k", "w", "lo", "mid", "hi", "ia", "ib", "ta"))
        s = ctx.scope
        s.emit(f"for {k} in range({n}): {pa}[{k}] = {k}")
        s.emit(f"{w} = 1")
        with ctx.block_scope(f"while {w} < {n}:"):
            ctx.scope.emit(f"{lo} = 0")
            with ctx.block_scope(f"while {lo} < {n}:"):
                ctx.scope.emit(f"{mid} = min({lo} + {w}, {n})")
                ctx.scope.emit(f"{hi} = min({lo} + 2 * {w}, {n})")
                ctx.scope.emit(f"{a} = {lo}")
                ctx.scope.emit(f"{b} = {mid}")
                with ctx.block_scope(f"for {k} in range({lo}, {hi}):"):
                    ctx.scope.emit(f"{ta} = {a} < {mid}")
                    with ctx.block_scope(f"if {ta} and {b} < {hi}:") as cmp_scope:
                        right = at(Expr(f"{pa}[{b}]", cmp_scope))
                        left = at(Expr(f"{pa}[{a}]", cmp_scope))
                        lt = less([ctx.read(v, right) for v in operands], [ctx.read(v, left) for v in operands])
                        ctx.scope.emit(f"{ta} = not {lt.text}")
                    with ctx.block_scope(f"if {ta}:"):
                        ctx.scope.emit(f"{pb}[{k}] = {pa}[{a}]")
                        ctx.scope.emit(f"{a} += 1")
                    with ctx.block_scope("else:"):
                        ctx.scope.emit(f"{pb}[{k}] = {pa}[{b}]")
                        ctx.scope.emit(f"{b} += 1")
                ctx.scope.emit(f"{lo} += 2 * {w}")
            ctx.scope.emit(f"{pa}, {pb} = {pb}, {pa}")
            ctx.scope.emit(f"{w} *= 2")
        count = n if take is None else take
        with ctx.block_scope(f"for {k} in range({count}):") as ws:
            write(oidx, Expr(k, ws), Expr(f"{pa}[{k}]", ws), at)


@kernel("stablehlo.sort")
def _sort(ctx: Lowering, op: Op) -> Sequence[Binding]:
    dim = int(op.attr("dimension"))
    rank = len(op.operands[0].tensor_type.shape)
    if dim < 0:
        dim += rank
    region = op.regions[0]
    outs = [_new_array(ctx, r) for r in op.results]

    def less(lhs, rhs):
        args = []
        for x, y in zip(lhs, rhs):
            args += [x, y]
        (r,) = ctx.lower_scalar_region(region, args)
        return r

    def write(oidx, k, p, at):
        dst = at(k)
        src = at(p)
        for v, (name, kind) in zip(op.operands, outs):
            val = ctx.read(v, src)
            ctx.scope.emit(store_text(name, _parts(dst), kind.store(val.text)))

    if op.operands[0].tensor_type.shape[dim] > 0:
        _emit_sort(ctx, op.operands, dim, less, write=write)
    return [ArrayBinding(name, kind) for name, kind in outs]


@kernel("chlo.top_k")
def _top_k(ctx: Lowering, op: Op) -> Sequence[Binding]:
    (x,) = op.operands
    k = int(op.attr("k"))
    rank = len(x.tensor_type.shape)
    kind = ctx.kind(x)
    (vname, vkind), (iname, ikind) = (_new_array(ctx, r) for r in op.results)

    def less(lhs, rhs):
        # Descending; the total order puts NaN first, as XLA's TopK does.
        if kind.cls == "f":
            return ctx.temp(f"fcmp_total({lhs[0].text}, {rhs[0].text}, 'GT')", [lhs[0], rhs[0]])
        return ctx.temp(f"icmp({lhs[0].text}, {rhs[0].text}, 'GT')", [lhs[0], rhs[0]])

    def write(oidx, kk, p, at):
        dst = at(kk)
        val = ctx.read(x, at(p))
        ctx.scope.emit(store_text(vname, _parts(dst), vkind.store(val.text)))
        ctx.scope.emit(store_text(iname, _parts(dst), f"i2i({p.text}, {ikind.nb})"))

    if k > 0:
        _emit_sort(ctx, [x], rank - 1, less, take=k, write=write)
    return [ArrayBinding(vname, vkind), ArrayBinding(iname, ikind)]


# -- scatter ----------------------------------------------------------------------------------------


@kernel("stablehlo.scatter", lazy_operands=True)
def _scatter(ctx: Lowering, op: Op) -> Sequence[Binding]:
    n = len(op.results)
    inputs = op.operands[:n]
    indices = op.operands[n]
    updates = op.operands[n + 1:]
    dn = op.attr("scatter_dimension_numbers")
    outs = []
    for v, r in zip(inputs, op.results):
        name, kind = _new_array(ctx, r)
        ctx.fill(name, kind, v.tensor_type.shape, functools.partial(ctx.read, v))
        outs.append((name, kind))
    for u in updates:
        # A rank-0 update (one scatter index, no window) is read as a scalar; only arrays
        # are materialized before the loop.
        if u.tensor_type.rank:
            ctx.array(u)
    combine = reducer(ctx, op)
    ushape = updates[0].tensor_type.shape
    urank = len(ushape)
    shape = inputs[0].tensor_type.shape
    rank = len(shape)
    uwd = tuple(dn.update_window_dims)
    scatter_dims = [d for d in range(urank) if d not in uwd]
    ivd = dn.index_vector_dim
    ind_rank = len(indices.tensor_type.shape)
    with ctx.loops(ushape) as uidx:
        usi = [uidx[d] for d in scatter_dims]

        def index_at(k):
            pos = list(usi)
            if ivd < ind_rank:
                pos.insert(ivd, Expr(str(k)))
            return pos

        parts: list[list[str]] = [[] for _ in range(rank)]
        deps: list[Expr] = list(uidx)
        for k, d in enumerate(dn.scatter_dims_to_operand_dims):
            sv = ctx.read(indices, index_at(k))
            deps.append(sv)
            parts[d].append(f"np.int64({sv.text})")
        for ib, sb in zip(dn.input_batching_dims, dn.scatter_indices_batching_dims):
            pos = sb if sb < ivd else sb - 1
            parts[ib].append(usi[pos].text)
        window_dims = [d for d in range(rank) if d not in dn.inserted_window_dims and d not in dn.input_batching_dims]
        for d, ud in zip(window_dims, uwd):
            parts[d].append(uidx[ud].text)
        ridx = []
        for d in range(rank):
            text = " + ".join(parts[d]) or "0"
            ridx.append(ctx.temp(text, deps, prefix="s"))
        cond = " and ".join(f"0 <= {x.text} < {shape[d]}" for d, x in enumerate(ridx)) or "True"
        with ctx.block_scope(f"if {cond}:"):
            cur = [ctx.temp(kind.load(load_text(name, _parts(ridx))), ridx) for name, kind in outs]
            upd = [ctx.read(u, uidx) for u in updates]
            # The combiner reads the current value, so it must not be hoisted or memoised.
            cur = [Expr(c.text, ctx.scope) for c in cur]
            new = combine(cur, upd)
            for (name, kind), t in zip(outs, new):
                ctx.scope.emit(store_text(name, _parts(ridx), kind.store(t)))
    return [ArrayBinding(name, kind) for name, kind in outs]


# -- windows ------------------------------------------------------------------------------------------


def _padding(op: Op, rank: int) -> list[tuple[int, int]]:
    pad = op.attr("padding")
    if pad is None:
        return [(0, 0)] * rank
    arr = np.asarray(pad).reshape(-1, 2)
    return [(int(a), int(b)) for a, b in arr]


def scalar_constant(ctx: Lowering, v: Value) -> np.ndarray | None:
    """The value of a rank-0 ``v`` known at compile time (a constant, maybe broadcast or
    reshaped to rank 0), else None."""
    seen = 0
    while seen < 8:
        lazy = ctx.lazy_definitions.get(v)
        if lazy is None:
            return None
        op = lazy.op
        if op.name == "stablehlo.constant":
            value = np.asarray(op.attr("value"))
            return value.reshape(()) if value.size == 1 else None
        if op.name not in ("stablehlo.broadcast_in_dim", "stablehlo.reshape", "stablehlo.broadcast"):
            return None
        v = op.operands[0]
        seen += 1
    return None


def _identity_of(kind_name: str, dtype: np.dtype, is_float: bool) -> object:
    """The value ``e`` with ``a op e == a`` for every ``a``, bit for bit, for one reducer
    (``is_float`` for bf16 and the 8-bit floats too, whose numpy kind is 'V'); None if it has none."""
    if dtype.kind == "b":
        return {"add": False, "or": False, "xor": False, "max": False, "mul": True, "and": True, "min": True}[kind_name]
    if dtype.kind == "c":
        return {"add": 0.0, "mul": 1.0}.get(kind_name)
    if is_float:
        return {"add": 0.0, "mul": 1.0, "max": -np.inf, "min": np.inf}.get(kind_name)
    info = np.iinfo(dtype)
    return {"add": 0, "or": 0, "xor": 0, "mul": 1, "and": -1 if dtype.kind == "i" else info.max,
            "max": info.min, "min": info.max}[kind_name]


def _init_is_identity(ctx: Lowering, op: Op) -> bool:
    """True when the window's init value changes nothing it is combined with: then padding
    (which contributes init values) can be skipped instead of combined, exactly.

    float add with +0.0: the accumulator starts at +0.0 and a sum is -0.0 only when both
    operands are, so adding +0.0 never changes it either."""
    if len(op.results) != 1:
        return False
    kind_name = simple_reducer(op.regions[0], 1)
    value = scalar_constant(ctx, op.operands[1])
    if kind_name is None or value is None:
        return False
    is_float = ctx.kind(op.operands[1]).cls in "fc"
    identity = _identity_of(kind_name, value.dtype, is_float)
    if identity is None:
        return False
    if is_float:
        return bool(value == identity)  # +0.0 and -0.0 both
    return bool(value == np.asarray(identity).astype(value.dtype))


def _prefix_scan_dim(shape, wdims, strides, bdil, wdil, pads) -> int | None:
    """The dimension of a cumulative reduction (``jnp.cumsum`` and friends): one window
    dimension whose window ends at the output position and starts at or before 0, every other
    dimension a window of 1 without padding. Output ``i`` is then ``x[0] op ... op x[i]``."""
    dims = [d for d, w in enumerate(wdims) if w != 1 or pads[d] != (0, 0)]
    if len(dims) != 1 or any(s != 1 for s in strides) or any(b != 1 for b in bdil) or any(w != 1 for w in wdil):
        return None
    d = dims[0]
    n, w = shape[d], wdims[d]
    return d if pads[d] == (w - 1, 0) and w >= n >= 1 else None


def _emit_prefix_scan(ctx: Lowering, op: Op, d: int) -> list:
    """Each output from the previous one: ``out[i] = out[i-1] op x[i]``, n steps instead of
    n*w. The dims after ``d`` are inner loops (contiguous, vectorisable); with none, the
    running value stays in a scalar."""
    (x,) = op.operands[:1]
    shape = tuple(x.tensor_type.shape)
    name, kind = _new_array(ctx, op.result)
    combine = reducer(ctx, op)
    init = ctx.read(op.operands[1], ())
    pre, post = shape[:d], shape[d + 1:]
    with ctx.loops(pre) as pidx:
        if not post:
            acc = ctx.fresh("acc")
            ctx.scope.emit(f"{acc} = {init.text}")
            j = ctx.fresh("j")
            with ctx.block_scope(f"for {j} in range({shape[d]}):") as body:
                idx = pidx + (Expr(j, body, j),)
                (new,) = combine([Expr(acc, body)], [ctx.read(x, idx)])
                # Each output rounded to a narrow type before the next step uses it, as the
                # loop below reads it back from the array (and as XLA's reduce_window does).
                ctx.scope.emit(f"{acc} = {kind.rounded(new)}")
                ctx.scope.emit(store_text(name, _parts(idx), kind.store(acc)))
            return [ArrayBinding(name, kind)]
        zero = Expr("0")
        with ctx.loops(post) as qidx:
            idx = pidx + (zero,) + qidx
            (new,) = combine([init], [ctx.read(x, idx)])
            ctx.scope.emit(store_text(name, _parts(idx), kind.store(new)))
        j = ctx.fresh("j")
        with ctx.block_scope(f"for {j} in range(1, {shape[d]}):") as body:
            jx = Expr(j, body, j)
            prev_j = Expr(f"({j} - 1)", body)
            with ctx.loops(post) as qidx:
                idx = pidx + (jx,) + qidx
                prev = Expr(kind.load(load_text(name, _parts(pidx + (prev_j,) + qidx))), ctx.scope)
                (new,) = combine([prev], [ctx.read(x, idx)])
                ctx.scope.emit(store_text(name, _parts(idx), kind.store(new)))
    return [ArrayBinding(name, kind)]


def _emit_clipped_window(ctx: Lowering, op: Op, wdims, strides, wdil, pads) -> list:
    """Windows whose padding can be skipped (the init is an identity): each window loop runs
    over the positions inside the operand only, computed per output position, so the loop body
    has no bounds test and no clamped index (and a contiguous window loop vectorises)."""
    x = op.operands[0]
    shape = tuple(x.tensor_type.shape)
    name, kind = _new_array(ctx, op.result)
    combine = reducer(ctx, op)
    init = ctx.read(op.operands[1], ())
    with ctx.loops(op.result.tensor_type.shape) as oidx:
        acc = ctx.fresh("acc")
        ctx.scope.emit(f"{acc} = {init.text}")
        src: list = []  # an Expr per dim; None for a windowed dim until its loop opens
        ranges: list[tuple[Expr, str, str] | None] = []
        for dim, (o, w, s, wd, (lo_pad, _)) in enumerate(zip(oidx, wdims, strides, wdil, pads)):
            start = f"{o.text} * {s} - {lo_pad}" if lo_pad else f"{o.text} * {s}"
            if w == 1 and lo_pad == 0 and pads[dim][1] == 0:
                src.append(index_expr(f"({start})" if s != 1 else o.text, [o]))
                ranges.append(None)
                continue
            base = ctx.temp(start, [o], prefix="p")
            # First and last-plus-one window index whose position base + k*wd is in [0, n).
            if wd == 1:
                lo = ctx.temp(f"max(0, -{base.text})", [base], prefix="lo")
                hi = ctx.temp(f"min({w}, {shape[dim]} - {base.text})", [base], prefix="hi")
            else:
                lo = ctx.temp(f"max(0, ({wd - 1} - {base.text}) // {wd})", [base], prefix="lo")
                hi = ctx.temp(f"min({w}, ({shape[dim] - 1} - {base.text}) // {wd} + 1)", [base], prefix="hi")
            ranges.append((base, lo.text, hi.text))
            src.append(None)
        opened = []
        for dim, r in enumerate(ranges):
            if r is None:
                continue
            base, low, high = r
            k = ctx.fresh("k")
            scope = ctx.block_scope(f"for {k} in range({low}, {high}):")
            body = scope.__enter__()
            opened.append(scope)
            kx = Expr(k, body, k)
            wd = wdil[dim]
            src[dim] = index_expr(f"({base.text} + {k})" if wd == 1 else f"({base.text} + {k} * {wd})", [base, kx])
        (new,) = combine([Expr(acc, ctx.scope)], [ctx.read(x, src)])
        ctx.scope.emit(f"{acc} = {kind.rounded(new)}")  # a window rounds each step (see below)
        for scope in reversed(opened):
            scope.__exit__(None, None, None)
        ctx.scope.emit(store_text(name, _parts(oidx), kind.store(acc)))
    return [ArrayBinding(name, kind)]


@kernel("stablehlo.reduce_window", lazy_operands=True)
def _reduce_window(ctx: Lowering, op: Op) -> Sequence[Binding]:
    n = len(op.results)
    inputs, inits = op.operands[:n], op.operands[n:]
    rank = len(inputs[0].tensor_type.shape)
    wdims = tuple(op.attr("window_dimensions"))
    strides = tuple(op.attr("window_strides") or (1,) * rank)
    bdil = tuple(op.attr("base_dilations") or (1,) * rank)
    wdil = tuple(op.attr("window_dilations") or (1,) * rank)
    pads = _padding(op, rank)
    in_shape = inputs[0].tensor_type.shape
    if all(b == 1 for b in bdil) and op.results[0].tensor_type.size and _init_is_identity(ctx, op):
        d = _prefix_scan_dim(in_shape, wdims, strides, bdil, wdil, pads)
        if d is not None:
            return _emit_prefix_scan(ctx, op, d)
        return _emit_clipped_window(ctx, op, wdims, strides, wdil, pads)
    combine = reducer(ctx, op)
    outs = [_new_array(ctx, r) for r in op.results]
    init = [ctx.read(v, ()) for v in inits]
    with ctx.loops(op.results[0].tensor_type.shape) as oidx:
        accs = [ctx.fresh("acc") for _ in range(n)]
        ctx.scope.emit(f"{', '.join(accs)} = {', '.join(e.text for e in init)}")
        with ctx.loops(wdims) as widx:
            src = []
            conds = []
            for d in range(rank):
                c, q = _window_place(ctx, oidx[d], widx[d], strides[d], wdil[d], pads[d][0], in_shape[d], bdil[d])
                conds.append(c)
                src.append(q)
            valid = ctx.temp(" and ".join(conds) or "True", list(oidx) + list(widx), prefix="m")
            xs = []
            for v, e in zip(inputs, init):
                val = ctx.read(v, src)
                xs.append(ctx.temp(f"({val.text} if {valid.text} else {e.text})", [val, valid, e]))
            in_loop = [Expr(a, ctx.scope) for a in accs]
            new = combine(in_loop, xs)
            # Unlike reduce (float32 accumulators, .codegen.round_accumulators), XLA:CPU's
            # reduce_window rounds a narrow float accumulator at every step (jnp.cumsum of f16).
            rounded = [kind.rounded(t) for t, (_, kind) in zip(new, outs)]
            ctx.scope.emit(f"{', '.join(accs)} = {', '.join(rounded)}")
        for (name, kind), a in zip(outs, accs):
            ctx.scope.emit(store_text(name, _parts(oidx), kind.store(a)))
    return [ArrayBinding(name, kind) for name, kind in outs]


def _window_place(ctx: Lowering, out: Expr, w: Expr, stride: int, dilation: int, pad: int, size: int,
                  base_dilation: int) -> tuple[str, Expr]:
    """Where window element ``w`` of output index ``out`` falls along one dimension of an input
    of ``size`` elements, dilated by ``base_dilation`` and padded by ``pad`` in front: the
    condition that it is an element of the input (not padding, not a dilation hole), and its
    index in the input, clamped so that it is a valid index either way (reduce_window and
    convolution alike)."""
    p = ctx.temp(f"{out.text} * {stride} + {w.text} * {dilation} - {pad}", [out, w], prefix="p")
    extent = (size - 1) * base_dilation
    c = f"(0 <= {p.text} <= {extent})"
    if base_dilation > 1:
        c += f" and ({p.text} % {base_dilation} == 0)"
        q = f"min(max({p.text}, 0), {extent}) // {base_dilation}"
    else:
        q = f"min(max({p.text}, 0), {size - 1})"
    return c, index_expr(q, [p])


def _window_element(ctx: Lowering, op: Op, out_at: Mapping[int, Expr], widx: Sequence[Expr], batch: Expr,
                    in_feature: Expr, out_kind: ElementKind, zero: Expr) -> tuple[Expr, list]:
    """A convolution's input element at window position ``widx`` (spatial, then the kernel's
    input feature) for the output position ``out_at`` (output dimension -> index), converted to
    the result's type: a zero where the position falls in the padding or a dilation hole (the
    spec pads the input; 0 * inf is NaN, as on XLA:CPU). Also the kernel's index with every
    dimension but the output feature filled in."""
    lhs, rhs = op.operands
    dn = op.attr("dimension_numbers")
    nsp = len(dn.input_spatial_dimensions)
    strides = tuple(op.attr("window_strides") or (1,) * nsp)
    pads = _padding(op, nsp)
    ldil = tuple(op.attr("lhs_dilation") or (1,) * nsp)
    rdil = tuple(op.attr("rhs_dilation") or (1,) * nsp)
    rev = tuple(op.attr("window_reversal") or (False,) * nsp)
    ls, ks = lhs.tensor_type.shape, rhs.tensor_type.shape
    wsp, ci = widx[:nsp], widx[nsp]
    lidx: list = [None] * len(ls)
    kidx: list = [None] * len(ks)
    conds = []
    for s in range(nsp):
        c, lidx[dn.input_spatial_dimensions[s]] = _window_place(
            ctx, out_at[dn.output_spatial_dimensions[s]], wsp[s], strides[s], rdil[s], pads[s][0],
            ls[dn.input_spatial_dimensions[s]], ldil[s])
        conds.append(c)
        k = ks[dn.kernel_spatial_dimensions[s]]
        kidx[dn.kernel_spatial_dimensions[s]] = index_expr(f"({k - 1} - {wsp[s].text})", [wsp[s]]) if rev[s] else wsp[s]
    lidx[dn.input_batch_dimension] = batch
    lidx[dn.input_feature_dimension] = in_feature
    kidx[dn.kernel_input_feature_dimension] = ci
    deps = list(out_at.values()) + list(widx)
    valid = ctx.temp(" and ".join(conds) or "True", deps, prefix="m")
    a = convert_text(ctx.read(lhs, lidx), ctx.kind(lhs), out_kind)
    a_text = a.text if isinstance(a, Expr) else a
    return ctx.temp(f"({a_text} if {valid.text} else {zero.text})", deps, prefix="x"), kidx


def _multiply_add(kind: ElementKind, total: str, a: str, b: str) -> str:
    """``total + a * b`` in ``kind``'s arithmetic (integers wrap; the integer intrinsics take no
    complex operand)."""
    return f"{total} + {a} * {b}" if kind.cls in "fc" else f"iadd({total}, imul({a}, {b}))"


@kernel("stablehlo.convolution")
def _convolution(ctx: Lowering, op: Op) -> Sequence[Binding]:
    lhs, rhs = op.operands
    dn = op.attr("dimension_numbers")
    nsp = len(dn.input_spatial_dimensions)
    fgc = int(op.attr("feature_group_count") or 1)
    bgc = int(op.attr("batch_group_count") or 1)
    out, out_kind = _new_array(ctx, op.result)
    kernel_kind = ctx.kind(rhs)
    ls, ks = lhs.tensor_type.shape, rhs.tensor_type.shape
    out_shape = op.result.tensor_type.shape
    out_f = out_shape[dn.output_feature_dimension]
    kin = ks[dn.kernel_input_feature_dimension]
    in_batch = ls[dn.input_batch_dimension]
    zero = ctx.const(0, out_kind)
    if fgc == 1 and bgc == 1 and out_f > 1:
        _convolution_by_pixel(ctx, op, out, out_kind, zero)
        return [ArrayBinding(out, out_kind)]
    with ctx.loops(out_shape) as oidx:
        ob = oidx[dn.output_batch_dimension]
        of = oidx[dn.output_feature_dimension]
        fbase = ctx.temp(f"({of.text} // {out_f // fgc}) * {kin}", [of], prefix="g") if fgc > 1 else Expr("0")
        if bgc > 1:
            bsrc = ctx.temp(f"({of.text} // {out_f // bgc}) * {in_batch // bgc} + {ob.text}", [of, ob], prefix="g")
        else:
            bsrc = ob
        acc = ctx.fresh("acc")
        ctx.scope.emit(f"{acc} = {zero.text}")
        ksp = [ks[d] for d in dn.kernel_spatial_dimensions]
        with ctx.loops(ksp + [kin]) as widx:
            ci = widx[nsp]
            in_feature = index_expr(f"({fbase.text} + {ci.text})", [fbase, ci])
            a, kidx = _window_element(ctx, op, dict(enumerate(oidx)), widx, bsrc, in_feature, out_kind, zero)
            kidx[dn.kernel_output_feature_dimension] = of
            b = convert_text(ctx.read(rhs, kidx), kernel_kind, out_kind)
            ctx.scope.emit(f"{acc} = {_multiply_add(out_kind, acc, a.text, b.text if isinstance(b, Expr) else b)}")
        ctx.scope.emit(store_text(out, _parts(oidx), out_kind.store(out_kind.rounded(acc))))
    return [ArrayBinding(out, out_kind)]


#: Output features up to this many accumulate in local variables (registers); more, in an array.
CONV_REGISTER_FEATURES = 16


def _convolution_by_pixel(ctx: Lowering, op: Op, out: str, out_kind: ElementKind, zero: Expr) -> None:
    """A convolution without feature or batch groups, one output pixel at a time: its output
    features accumulate side by side (in local variables, up to
    :data:`CONV_REGISTER_FEATURES` of them, else in a small array), each window element read
    once for all of them. Each feature's sum takes the same terms in the same order as one
    accumulator per output element would (the window in order, a position in the padding or a
    dilation hole a zero of the input), so the bits are the same; but the features' sums no
    longer wait for one another."""
    rhs = op.operands[1]
    dn = op.attr("dimension_numbers")
    nsp = len(dn.input_spatial_dimensions)
    kernel_kind = ctx.kind(rhs)
    ks = rhs.tensor_type.shape
    out_shape = op.result.tensor_type.shape
    fdim = dn.output_feature_dimension
    out_f = out_shape[fdim]
    kin = ks[dn.kernel_input_feature_dimension]
    ksp = [ks[d] for d in dn.kernel_spatial_dimensions]
    in_registers = out_f <= CONV_REGISTER_FEATURES
    if in_registers:
        names = [ctx.fresh("facc") for _ in range(out_f)]
    else:
        accs = ctx.fresh("faccs")
        ctx.scope.emit(f"{accs} = np.full({out_f}, {zero.text})")  # the accumulators' type: zero's

    pixel_dims = [d for d in range(len(out_shape)) if d != fdim]
    with ctx.loops([out_shape[d] for d in pixel_dims]) as pidx:
        at = dict(zip(pixel_dims, pidx))
        if in_registers:
            ctx.scope.emit(f"{', '.join(names)} = {', '.join([zero.text] * out_f)}")
        else:
            with ctx.loops([out_f]) as (f,):
                ctx.scope.emit(store_text(accs, [f.text], zero.text))
        with ctx.loops(ksp + [kin]) as widx:
            a, kidx = _window_element(ctx, op, at, widx, at[dn.output_batch_dimension], widx[nsp], out_kind, zero)
            if in_registers:
                for k, name in enumerate(names):
                    kidx[dn.kernel_output_feature_dimension] = Expr(str(k))
                    b = convert_text(ctx.read(rhs, kidx), kernel_kind, out_kind)
                    b_text = b.text if isinstance(b, Expr) else b
                    ctx.scope.emit(f"{name} = {_multiply_add(out_kind, name, a.text, b_text)}")
            else:
                with ctx.loops([out_f]) as (f,):
                    kidx[dn.kernel_output_feature_dimension] = f
                    b = convert_text(ctx.read(rhs, kidx), kernel_kind, out_kind)
                    b_text = b.text if isinstance(b, Expr) else b
                    total = _multiply_add(out_kind, load_text(accs, [f.text]), a.text, b_text)
                    ctx.scope.emit(store_text(accs, [f.text], total))
        if in_registers:
            for k, name in enumerate(names):
                oidx = [Expr(str(k)) if d == fdim else at[d] for d in range(len(out_shape))]
                ctx.scope.emit(store_text(out, _parts(oidx), out_kind.store(out_kind.rounded(name))))
        else:
            with ctx.loops([out_f]) as (f,):
                oidx = [f if d == fdim else at[d] for d in range(len(out_shape))]
                total = load_text(accs, [f.text])
                ctx.scope.emit(store_text(out, _parts(oidx), out_kind.store(out_kind.rounded(total))))


@kernel("stablehlo.if", lazy_operands=True)
def _if(ctx: Lowering, op: Op) -> Sequence[Binding]:
    pred = ctx.read(op.operands[0], ())
    names = [ctx.fresh("w") for _ in op.results]
    for header, region in ((f"if {pred.text}:", op.regions[0]), ("else:", op.regions[1])):
        with ctx.block_scope(header):
            _assign_results(ctx, names, ctx.lower_block(region))
    ctx.share(names)  # a branch may return an outer value, or one value twice
    return [_named(ctx, v, name, ctx.scope) for v, name in zip(op.results, names)]


@kernel("stablehlo.select_and_scatter", lazy_operands=True)
def _select_and_scatter(ctx: Lowering, op: Op) -> Sequence[Binding]:
    operand, source, init = op.operands
    rank = len(operand.tensor_type.shape)
    wdims = tuple(op.attr("window_dimensions") or (1,) * rank)
    strides = tuple(op.attr("window_strides") or (1,) * rank)
    pads = _padding(op, rank)
    shape = operand.tensor_type.shape
    select_region, scatter_region = op.regions
    out, kind = _new_array(ctx, op.result)
    init_e = ctx.read(init, ())
    ctx.fill(out, kind, shape, lambda idx: init_e)
    ctx.array(operand)
    with ctx.loops(source.tensor_type.shape) as sidx:
        best, have = ctx.fresh("best"), ctx.fresh("have")
        pos = [ctx.fresh("bp") for _ in range(rank)]
        ctx.scope.emit(f"{have} = False")
        ctx.scope.emit(f"{best} = {init_e.text}")
        for p in pos:
            ctx.scope.emit(f"{p} = 0")
        with ctx.loops(wdims) as widx:
            cand_pos = []
            conds = []
            for d in range(rank):
                q = ctx.temp(f"{sidx[d].text} * {strides[d]} + {widx[d].text} - {pads[d][0]}", [sidx[d], widx[d]],
                             prefix="p")
                cand_pos.append(q)
                conds.append(f"(0 <= {q.text} < {shape[d]})")
            with ctx.block_scope(f"if {' and '.join(conds) or 'True'}:") as inside:
                cand = ctx.read(operand, cand_pos)
                take = ctx.fresh("take")
                ctx.scope.emit(f"{take} = not {have}")
                with ctx.block_scope(f"if {have}:"):
                    (keep,) = ctx.lower_scalar_region(select_region, [Expr(best, ctx.scope), cand])
                    ctx.scope.emit(f"{take} = not {keep.text}")
                with ctx.block_scope(f"if {take}:"):
                    ctx.scope.emit(f"{best} = {cand.text}")
                    ctx.scope.emit(f"{have} = True")
                    for p, q in zip(pos, cand_pos):
                        ctx.scope.emit(f"{p} = {q.text}")
                del inside
        with ctx.block_scope(f"if {have}:"):
            cur = ctx.temp(kind.load(load_text(out, pos)), [])
            src = ctx.read(source, sidx)
            (new,) = ctx.lower_scalar_region(scatter_region, [Expr(cur.text, ctx.scope), src])
            ctx.scope.emit(store_text(out, pos, kind.store(new.text)))
    return [ArrayBinding(out, kind)]


_TRANSPOSE = {"NO_TRANSPOSE": 0, "TRANSPOSE": 1, "ADJOINT": 2}


def linalg_variant(op: Op, kind: ElementKind) -> tuple[int, int]:
    """(batch, m) of a triangular_solve or cholesky whose ``a`` is [..., m, m], or
    UnsupportedOpError for element types .linalg does not compute in."""
    if kind.cls not in "fc" or kind.narrow:
        raise unsupported_variant(op, f"{kind.element} operands (float32, float64 and complex only)")
    shape = op.operands[0].tensor_type.shape
    return math.prod(shape[:-2]), shape[-1]


def linalg_flags(op: Op) -> tuple[int, ...]:
    """The flags .linalg takes after the arrays, as ints (0/1, and 0-2 for the transpose):
    triangular_solve's (left_side, lower, unit_diagonal, transpose), cholesky's (lower,)."""
    if op.name == "stablehlo.cholesky":
        return (int(bool(op.attr("lower"))),)
    return (int(bool(op.attr("left_side"))), int(bool(op.attr("lower"))), int(bool(op.attr("unit_diagonal"))),
            _TRANSPOSE[str(op.attr("transpose_a") or "NO_TRANSPOSE")])


@kernel("stablehlo.triangular_solve")
def _triangular_solve(ctx: Lowering, op: Op) -> Sequence[Binding]:
    a, b = op.operands
    kind = ctx.kind(op.result)
    batch, m = linalg_variant(op, kind)
    rows, cols = b.tensor_type.shape[-2:]
    an, bn, out = ctx.array(a), ctx.array(b), ctx.fresh("a")
    flags = ", ".join(f"np.int64({f})" for f in linalg_flags(op))  # not literals: one compile
    ctx.scope.emit(f"{out} = triangular_solve_nd(np.ascontiguousarray({an}).reshape(({batch}, {m}, {m})), "
                   f"np.ascontiguousarray({bn}).reshape(({batch}, {rows}, {cols})), {flags})"
                   f".reshape({tuple(op.result.tensor_type.shape)!r})")
    return [ArrayBinding(out, kind)]


@kernel("stablehlo.cholesky")
def _cholesky(ctx: Lowering, op: Op) -> Sequence[Binding]:
    (a,) = op.operands
    kind = ctx.kind(op.result)
    batch, m = linalg_variant(op, kind)
    an, out = ctx.array(a), ctx.fresh("a")
    (lower,) = linalg_flags(op)
    ctx.scope.emit(f"{out} = cholesky_nd(np.ascontiguousarray({an}).reshape(({batch}, {m}, {m})), "
                   f"np.int64({lower})).reshape({tuple(op.result.tensor_type.shape)!r})")
    return [ArrayBinding(out, kind)]


@kernel("stablehlo.fft")
def _fft(ctx: Lowering, op: Op) -> Sequence[Binding]:
    (x,) = op.operands
    kind, in_kind = ctx.kind(op.result), ctx.kind(x)
    if kind.narrow or in_kind.narrow or kind.cls not in "fc" or in_kind.cls not in "fc":
        raise unsupported_variant(op, f"{in_kind.element} -> {kind.element}")
    xn, out = ctx.array(x), ctx.fresh("a")
    dtype = np.dtype(kind.storage).name
    spec = ctx.global_value(f"types.Array(types.{dtype}, {len(op.result.tensor_type.shape)}, 'C')")
    lengths = tuple(int(n) for n in op.attr("fft_length"))
    with ctx.block_scope(f"with objmode({out}={spec}):"):  # numba has no FFT: numpy's (stablehlo.fft)
        ctx.scope.emit(f"{out} = fft_host({xn}, '{op.attr('fft_type')}', {lengths!r}, '{dtype}')")
    return [ArrayBinding(out, kind)]


@kernel("stablehlo.custom_call")
def _custom_call(ctx: Lowering, op: Op) -> Sequence[Binding]:
    """The linear-algebra custom calls (backends/stablehlo/linalg_calls.py), on the host through
    objmode, as the reference runs them: LAPACK, one matrix at a time."""
    from pjrt_hub.backends.stablehlo.linalg_calls import HOST_CUSTOM_CALLS

    from .codegen import unsupported_op

    if op.call_target not in HOST_CUSTOM_CALLS:
        raise unsupported_op(op)
    kinds = [ctx.kind(r) for r in op.results]
    for v in (*op.operands, *op.results):
        kind = ctx.kind(v)
        if kind.narrow or kind.cls not in "fc":
            raise unsupported_variant(op, kind.element)
    names = [ctx.array(v) for v in op.operands]
    outs = [ctx.fresh("a") for _ in op.results]
    specs = [ctx.global_value(f"types.Array(types.{np.dtype(k.storage).name}, {len(r.tensor_type.shape)}, 'C')")
             for k, r in zip(kinds, op.results)]
    config = op.attributes.get("backend_config")
    config = config if isinstance(config, str) else ""
    # The objmode block lives in a helper of its own, as the collectives' do: numba mis-compiles
    # objmode blocks inside loops and branches ("Instruction does not dominate all uses").
    helper = ctx.fresh("host_call")
    params = [f"x{i}" for i in range(len(names))]
    ys = [f"y{i}" for i in range(len(outs))]
    ctx.helpers.append(
        f"def {helper}({', '.join(params)}):\n"
        f"    with objmode({', '.join(f'{y}={t}' for y, t in zip(ys, specs))}):\n"
        f"        {', '.join(ys)}, = custom_call_host({str(op.call_target)!r}, ({', '.join(params)},), {config!r})\n"
        f"    return ({', '.join(ys)},)")
    ctx.scope.emit(f"{', '.join(outs)}, = {helper}({', '.join(f'np.ascontiguousarray({n})' for n in names)})")
    return [ArrayBinding(o, k) for o, k in zip(outs, kinds)]


@kernel("stablehlo.rng_bit_generator")
def _rng_bit_generator(ctx: Lowering, op: Op) -> Sequence[Binding]:
    from pjrt_hub.backends.stablehlo import RngAlgorithm

    (state,) = op.operands
    new_state, values = op.results
    skind, vkind = ctx.kind(state), ctx.kind(values)
    if skind.storage != np.uint64:
        raise unsupported_variant(op, f"{skind.element} state")
    algorithm = str(op.attr("rng_algorithm") or "DEFAULT")
    count = math.prod(values.tensor_type.shape)
    itemsize = vkind.storage.itemsize
    words = -(-count * itemsize // 4)
    name = ctx.array(state)
    st, w = ctx.fresh("st"), ctx.fresh("rw")
    if algorithm == str(RngAlgorithm.THREE_FRY):
        ctx.scope.emit(f"{st}, {w} = rng_threefry({name}, {-(-words // 2)})")
    else:
        ctx.scope.emit(f"{st}, {w} = rng_philox({name}, {-(-words // 4)})")
    out = ctx.fresh("a")
    ctx.scope.emit(f"{out} = {w}.view(np.uint8)[:{count * itemsize}].copy().view({vkind.np_name})"
                   f".reshape({tuple(values.tensor_type.shape)!r})")
    return [ArrayBinding(st, skind), ArrayBinding(out, vkind)]
