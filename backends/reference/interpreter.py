"""The reference interpreter: runs a StableHLO module op by op with numpy.

It is the living definition of op semantics in pjrt-hub and the oracle of the tests, so it aims
at being obviously right rather than fast: each op is one entry of the table in
:mod:`.registry` (implementations in :mod:`.elementwise`, :mod:`.structural` and here for the
ops with regions), every result is checked against the type the program declares, and the
behaviour the spec leaves open follows XLA (documented in :mod:`.elementwise`).

Regions that combine elements (reduce bodies, sort comparators, scatter updates) are evaluated
generally, not pattern-matched. When a region uses only elementwise ops it runs on whole arrays
of element pairs at once (a reduction of n elements takes log2(n) region evaluations, a sort
compares all pairs of a row in one evaluation); otherwise it runs element by element.

A ``while`` loop may never end, so a run can be given a cancel flag (a one-element int32 array,
the runtime's, see ``ExecuteOptions.timeout``): every iteration reads it, and a set flag stops
the run with :class:`~pjrt_hub.abi.Cancelled`.
"""

from __future__ import annotations

import functools
import sys
from typing import Any, Callable, Sequence

import numpy as np

from pjrt_hub.abi import Cancelled, ExecutionError, InvalidArgument, PjrtError, UnsupportedOpError
from pjrt_hub.backends.stablehlo import Block, Function, Module, Op, TensorType, TupleType

from . import elementwise, linalg, rng, structural  # noqa: F401 - importing registers their ops
from .elementwise import involves_sub_byte, sub_byte_call
from .registry import OPS, register, supported_ops
from .structural import pad_array, scatter_destinations

__all__ = ["Execution", "Interpreter", "Results", "check_supported", "run_module", "supported_ops"]

_TERMINATORS = frozenset({"func.return", "stablehlo.return"})
#: Ops that are the identity on rank-0 values, so they may appear in vectorised regions.
_SCALAR_SAFE = frozenset({"stablehlo.broadcast_in_dim", "stablehlo.reshape", "stablehlo.convert",
                          "stablehlo.bitcast_convert", "stablehlo.transpose", "stablehlo.reverse",
                          "stablehlo.constant"})
#: Of those, the ones that are the identity on a rank-0 value.
_SCALAR_IDENTITY = frozenset({"stablehlo.broadcast_in_dim", "stablehlo.reshape",
                              "stablehlo.transpose", "stablehlo.reverse"})
#: Sorting compares all pairs of a row at once while batch * n * n stays below this.
_PAIRWISE_LIMIT = 1 << 24


def _unshared_refs() -> int:
    """What ``sys.getrefcount`` says, in :meth:`Execution._execute`, of an array only the
    environment and the operand list hold (measured the same way, on this Python: the loop
    variable and the call's argument count too)."""
    env = {0: np.empty(1)}
    args = [env[0]]
    for array in args:
        return sys.getrefcount(array)
    raise AssertionError("unreachable")


_UNSHARED_REFS = _unshared_refs()


def _output_refs() -> int:
    """``sys.getrefcount`` of an output only the outputs list holds (as in ``Interpreter.run``)."""
    outputs = [np.empty(1)]
    o = outputs[0]
    return sys.getrefcount(o)


_OUTPUT_REFS = _output_refs()


class Results(list):
    """What an op with a variable number of results returns (while, case, call...)."""


def check_supported(module: Module, backend: str = "reference") -> None:
    """Raise UnsupportedOpError for the first op the interpreter cannot run."""
    from pjrt_hub.backends.stablehlo.linalg_calls import HOST_CUSTOM_CALLS

    for op in module.walk():
        if (op.name not in OPS and op.name not in _TERMINATORS) or (
                op.name == "stablehlo.custom_call" and op.call_target not in HOST_CUSTOM_CALLS):
            raise UnsupportedOpError(op.name, target=op.call_target, location=op.where, supported=supported_ops(),
                                     backend=backend)


class Interpreter:
    """Runs the functions of a (verified) module on numpy arrays."""

    def __init__(self, module: Module) -> None:
        check_supported(module)
        self.module = module

    def run(self, args: Sequence[np.ndarray], function: str | None = None, *,
            cancel: np.ndarray | None = None) -> list[np.ndarray]:
        """Run ``function`` (``@main`` by default); a non-zero ``cancel[0]`` stops its loops."""
        fn = self.module.main if function is None else self.module.functions[function]
        if len(args) != len(fn.args):
            raise InvalidArgument(f"@{fn.name} takes {len(fn.args)} arguments, got {len(args)}")
        arrays = []
        for i, (arg, value) in enumerate(zip(fn.args, args)):
            array = np.asarray(value)
            ty = arg.type
            if isinstance(ty, TensorType) and (array.shape != ty.shape or array.dtype != ty.dtype):
                raise InvalidArgument(
                    f"argument {i} of @{fn.name} must be {ty} ({ty.dtype}{list(ty.shape)}), "
                    f"got {array.dtype}{list(array.shape)}")
            arrays.append(array)
        with np.errstate(all="ignore"):
            outputs = Execution(self.module, cancel).call(fn, arrays)
        del arrays
        # Fresh, contiguous, writable arrays: never views of the inputs or of constants. An
        # array an op made that nothing else holds is one already.
        for index in range(len(outputs)):
            o = outputs[index]
            if not (isinstance(o, np.ndarray) or np.isscalar(o)):
                continue
            if not (type(o) is np.ndarray and o.base is None and o.flags.writeable and o.flags.c_contiguous
                    and sys.getrefcount(o) <= _OUTPUT_REFS):
                outputs[index] = np.array(o, copy=True, order="C")
        return outputs


def run_module(module: Module, args: Sequence[np.ndarray], function: str | None = None) -> list[np.ndarray]:
    return Interpreter(module).run(args, function)


class Execution:
    """One run of a module: the values of the function being executed and the region machinery
    the op implementations use (``ctx`` in their signature)."""

    def __init__(self, module: Module, cancel: np.ndarray | None = None) -> None:
        self.module = module
        self.env: dict[int, Any] = {}
        self.depth = 0
        #: The runtime's cancel flag, read at every loop iteration (None: nothing stops the run).
        self.cancel = cancel
        #: Operands of the running op that nothing reads after it (see :meth:`donor`).
        self._donors: list[np.ndarray] = []

    def check_cancel(self) -> None:
        """Stop the run if the runtime asked for it (the runtime reports its own reason)."""
        if self.cancel is not None and self.cancel[0]:
            raise Cancelled("reference: the run was stopped at a loop iteration")

    # -- functions and regions ---------------------------------------------------------------

    def call(self, fn: Function | str, args: Sequence[Any], consume: bool = False) -> list[Any]:
        if isinstance(fn, str):
            fn = self.module.functions[fn]
        saved = self.env
        self.env = {}
        self.depth += 1
        try:
            return self.run_block(fn.body, args, consume=consume)
        finally:
            self.env = saved
            self.depth -= 1

    def region(self, block: Block, args: Sequence[Any], consume: bool = False) -> list[Any]:
        """Run a region once on values of its declared types (``consume``: see :meth:`run_block`)."""
        return self.run_block(block, args, consume=consume)

    def run_block(self, block: Block, args: Sequence[Any], batched: bool = False, consume: bool = False) -> list[Any]:
        """Run ``block`` on ``args``. Its own values leave ``env`` once read for the last time;
        with ``consume``, the list ``args`` is emptied once they are bound: a loop body then
        holds the only reference to a carried array, which an op may update in place (see
        :meth:`donor`), as a scan's update of its stacked outputs does."""
        env = self.env
        dead_after, read, local_results = _lifetimes(block)
        for v, a in zip(block.args, args):
            if v.id in read:
                env[v.id] = a
        if consume and type(args) is list:
            args.clear()
            a = None  # the loop variable too
        for op, dead in zip(block.ops[:-1], dead_after):
            self._execute(op, env, batched, dead)
            for vid in dead:
                env.pop(vid, None)  # a call may have taken it already (see _call_giving)
        results = [env[v.id] for v in block.ops[-1].operands]
        for vid in local_results:
            env.pop(vid, None)
        return results

    def donor(self, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray | None:
        """An operand of the running op that may receive its result (``out=``), or None.

        It must be read by nothing after this op, be of the result's shape and type, own its
        memory, and be referenced by nothing but the interpreter (no view of it, not an argument
        or a constant): numpy's own rule for reusing temporaries. An op writing into its operand
        saves a large array's allocation, page faults and cache misses."""
        for index, array in enumerate(self._donors):
            if array.shape == shape and array.dtype == dtype:
                del self._donors[index]
                return array
        return None

    def combiner(self, block: Block) -> Callable[..., list[np.ndarray]]:
        """A function applying the region ``block`` elementwise to arrays (of any common
        broadcast shape) standing for its scalar arguments."""
        result_types = [v.tensor_type for v in block.ops[-1].operands]
        if _vectorizable(block):
            def batched(*xs: np.ndarray) -> list[np.ndarray]:
                shape = np.broadcast_shapes(*(np.shape(x) for x in xs))
                outs = self.run_block(block, xs, batched=True)
                return [np.broadcast_to(np.asarray(o), shape).astype(t.dtype, copy=False)
                        for o, t in zip(outs, result_types)]
            return batched

        def one_by_one(*xs: np.ndarray) -> list[np.ndarray]:
            xs = np.broadcast_arrays(*xs)
            shape = xs[0].shape if xs else ()
            outs = [np.empty(shape, dtype=t.dtype) for t in result_types]
            for index in np.ndindex(*shape):
                values = self.run_block(block, [np.asarray(x[index]) for x in xs])
                for out, v in zip(outs, values):
                    out[index] = v
            return outs
        return one_by_one

    # -- one op ------------------------------------------------------------------------------

    def _call_giving(self, op: Op, env: dict[int, Any], args: list[Any], dead: tuple[int, ...]) -> Results:
        """``func.call`` handing the callee the operands only the caller held (the donors): the
        caller drops them first, so that in the callee they are unshared too. JAX's scans
        update their stacked outputs in a called function (``dynamic_update_index_in_dim``)."""
        given = {id(array) for array in self._donors}
        self._donors.clear()
        for v in op.operands:
            if v.id in dead and id(env.get(v.id)) in given:
                del env[v.id]
        return Results(self.call(op.attributes["callee"].name, args, consume=True))

    def _execute(self, op: Op, env: dict[int, Any], batched: bool, dead: tuple[int, ...] = ()) -> None:
        args = [env[v.id] for v in op.operands]
        donors = self._donors = []
        if dead:
            for index, v in enumerate(op.operands):
                array = args[index]
                # References: env, args, ``array``, getrefcount's own; any more is a view or a holder.
                if (v.id in dead and type(array) is np.ndarray and array.base is None
                        and array.flags.writeable and array.flags.c_contiguous
                        and sys.getrefcount(array) <= _UNSHARED_REFS):
                    donors.append(array)
            array = None  # the loop variable holds a reference too
        try:
            impl = OPS[op.name]
            if batched and op.name in _SCALAR_IDENTITY:
                out = args[0]
            elif (impl.elementwise or op.name == "stablehlo.convert") and involves_sub_byte(op, args):
                out = sub_byte_call(impl.fn, self, op, args)
            elif donors and op.name == "func.call":
                out = self._call_giving(op, env, args, dead)
            else:
                out = impl.fn(self, op, *args)
        except PjrtError:
            raise
        except Exception as exc:  # noqa: BLE001 - any failure becomes an error naming the op
            raise ExecutionError(f"{op.describe()}: {type(exc).__name__}: {exc}") from exc
        finally:
            donors.clear()
        if len(op.results) == 1 and not isinstance(out, Results):
            outs = [out]
        else:
            outs = list(out)
        if len(outs) != len(op.results):
            raise ExecutionError(f"{op.describe()}: produced {len(outs)} results, expected {len(op.results)}")
        for value, result in zip(op.results, outs):
            env[value.id] = _checked(op, value.type, result, batched)


def _checked(op: Op, ty, result: Any, batched: bool) -> Any:
    if isinstance(ty, TupleType):
        return result
    if not isinstance(ty, TensorType):
        return result
    array = np.asarray(result)
    if array.dtype != ty.dtype:
        raise ExecutionError(f"internal error: {op.describe()} produced {array.dtype}, "
                             f"expected {ty} ({ty.dtype})")
    if not batched and array.shape != ty.shape:
        raise ExecutionError(f"internal error: {op.describe()} produced shape {array.shape}, "
                             f"expected {ty}")
    return array


@functools.lru_cache(maxsize=4096)
def _lifetimes(block: Block) -> tuple[tuple[tuple[int, ...], ...], frozenset[int], tuple[int, ...]]:
    """How long the values of ``block`` live:

    * for each op (its terminator aside), the values of the block read for the last time by it
      or by its regions: they are dropped once it has run, so that a long chain of ops on large
      arrays keeps a few of them alive rather than all, and numpy's allocator reuses their
      memory instead of mapping (and faulting in) fresh pages for every op. Values the block's
      regions read from enclosing blocks are theirs to drop, not this block's;
    * the block's arguments that anything in it reads (the others are never bound);
    * the block's own values that it returns: nothing outside the block can read them once it
      has run, so they are dropped then too."""
    ops = block.ops[:-1]
    defined = {v.id for v in block.args} | {r.id for op in ops for r in op.results}
    kept = {v.id for v in block.ops[-1].operands}
    last: dict[int, int] = {}
    for index, op in enumerate(ops):
        for inner in op.walk():
            for v in inner.operands:
                if v.id in defined:
                    last[v.id] = index
    dead: list[list[int]] = [[] for _ in ops]
    for vid, index in last.items():
        if vid not in kept:
            dead[index].append(vid)
    read = frozenset(v.id for v in block.args if v.id in last or v.id in kept)
    returned = tuple(vid for vid in dict.fromkeys(v.id for v in block.ops[-1].operands) if vid in defined)
    return tuple(tuple(d) for d in dead), read, returned


@functools.lru_cache(maxsize=4096)
def _vectorizable(block: Block) -> bool:
    for op in block.ops[:-1]:
        if op.regions:
            return False
        impl = OPS.get(op.name)
        if impl is None:
            return False
        if impl.elementwise:
            continue
        if op.name in _SCALAR_SAFE and all(
                isinstance(v.type, TensorType) and v.type.rank == 0 for v in op.operands + op.results):
            continue
        return False
    return True


# -- ops with regions -------------------------------------------------------------------------

from . import collectives  # noqa: E402,F401 - importing registers the collective ops

@register("func.call")
def _call(ctx: Execution, op: Op, *args):
    return Results(ctx.call(op.attributes["callee"].name, args))


@register("stablehlo.composite")
def _composite(ctx: Execution, op: Op, *args):
    return Results(ctx.call(op.attributes["decomposition"].name, args))


@register("stablehlo.optimization_barrier", "sdy.sharding_constraint")
def _optimization_barrier(ctx: Execution, op: Op, *args):
    return Results(args)


@register("stablehlo.while")
def _while(ctx: Execution, op: Op, *args):
    cond, body = op.regions
    values = list(args)
    while True:
        ctx.check_cancel()
        if not bool(np.asarray(ctx.region(cond, values)[0])):
            break
        values = ctx.region(body, values, consume=True)
    return Results(values)


@register("stablehlo.case")
def _case(ctx: Execution, op: Op, index):
    i = int(np.asarray(index))
    if not 0 <= i < len(op.regions):
        i = len(op.regions) - 1  # out-of-range indices run the last branch (spec)
    return Results(ctx.region(op.regions[i], []))


@register("stablehlo.if")
def _if(ctx: Execution, op: Op, pred):
    return Results(ctx.region(op.regions[0 if bool(np.asarray(pred)) else 1], []))


@register("stablehlo.map")
def _map(ctx: Execution, op: Op, *args):
    return Results(ctx.combiner(op.regions[0])(*args))


def _tree_reduce(combine, xs: list[np.ndarray]) -> list[np.ndarray]:
    """Reduce the last axis of each array pairwise: log2(n) evaluations of ``combine``.

    Neighbours are paired, so each partial result covers a run of consecutive elements and is
    combined with the run after it, the earlier one first: a body that is associative but not
    commutative gives what a reduction in order gives (jnp.argmax's body keeps the first of two
    NaNs only when it sees them in order)."""
    n = xs[0].shape[-1]
    while n > 1:
        half = n // 2
        left = [x[..., 0:2 * half:2] for x in xs]
        right = [x[..., 1:2 * half:2] for x in xs]
        merged = combine(*left, *right)
        if n % 2:
            merged = [np.concatenate([m, x[..., 2 * half:]], axis=-1) for m, x in zip(merged, xs)]
        xs = merged
        n = half + n % 2
    return [x[..., 0] for x in xs]


#: Reduction bodies that are one op of the two block arguments, as numpy reductions, by the
#: element kind: float (float32/float64 only; narrow floats round at every step), integer, bool.
_UFUNC_REDUCERS = {
    "stablehlo.add": (np.add, np.add, np.logical_or),
    "stablehlo.multiply": (np.multiply, np.multiply, np.logical_and),
    "stablehlo.maximum": (np.maximum, np.maximum, np.logical_or),
    "stablehlo.minimum": (np.minimum, np.minimum, np.logical_and),
    "stablehlo.and": (None, np.bitwise_and, np.logical_and),
    "stablehlo.or": (None, np.bitwise_or, np.logical_or),
    "stablehlo.xor": (None, np.bitwise_xor, np.logical_xor),
}


def _ufunc_reducer(block: Block, dtype: np.dtype) -> np.ufunc | None:
    """The numpy reduction equal to the body ``return op(a, b)``, if the body is that."""
    if len(block.ops) != 2 or len(block.args) != 2:
        return None
    body, ret = block.ops
    if set(body.operands) != set(block.args) or tuple(ret.operands) != tuple(body.results):
        return None
    kinds = _UFUNC_REDUCERS.get(body.name)
    if kinds is None:
        return None
    if dtype.kind == "f":
        return kinds[0] if dtype in (np.dtype(np.float32), np.dtype(np.float64)) else None
    return kinds[2] if dtype == np.bool_ else kinds[1] if dtype.kind in "iu" else None


def _signed_zero_extreme_reduce(ufunc: np.ufunc, x: np.ndarray, dims: tuple[int, ...]) -> np.ndarray:
    """``ufunc.reduce`` for float maximum/minimum, with +0 > -0 as IEEE (and XLA) order them
    (numpy returns whichever zero it met)."""
    out = ufunc.reduce(x, axis=dims)
    zero = out == 0
    if zero.any():
        sign_wanted = ufunc is np.minimum  # min: -0 if there is one; max: +0 if there is one
        present = np.any((x == 0) & (np.signbit(x) == sign_wanted), axis=dims)
        signed = np.where(present == sign_wanted, np.copysign(np.zeros((), x.dtype), -1), np.zeros((), x.dtype))
        out = np.where(zero, signed, out)
    return out


@register("stablehlo.reduce")
def _reduce(ctx: Execution, op: Op, *args):
    n = len(args) // 2
    inputs, inits = args[:n], args[n:]
    dims = list(op.attributes["dimensions"])
    rank = inputs[0].ndim
    kept = [d for d in range(rank) if d not in dims]
    kept_shape = tuple(inputs[0].shape[d] for d in kept)
    count = int(np.prod([inputs[0].shape[d] for d in dims], dtype=np.int64))
    combine = ctx.combiner(op.regions[0])
    start = [np.broadcast_to(i, kept_shape) for i in inits]
    if count == 0:
        return Results([np.array(s) for s in start])
    ufunc = _ufunc_reducer(op.regions[0], inputs[0].dtype) if n == 1 else None
    if ufunc is not None:
        # One op of the two arguments: numpy's reduction of the elements (in its own order, a
        # pairwise one for sums, as the tree below), then the init, as the region would.
        (x,) = inputs
        if ufunc in (np.maximum, np.minimum) and x.dtype.kind == "f":
            partial = [_signed_zero_extreme_reduce(ufunc, x, tuple(dims))]
        else:
            partial = [np.asarray(ufunc.reduce(x, axis=tuple(dims), dtype=x.dtype))]
        return Results(combine(*start, *partial))
    xs = [np.transpose(x, kept + dims).reshape(kept_shape + (count,)) for x in inputs]
    partial = _tree_reduce(combine, xs)
    return Results(combine(*start, *partial))


@register("stablehlo.reduce_window")
def _reduce_window(ctx: Execution, op: Op, *args):
    n = len(args) // 2
    inputs, inits = args[:n], args[n:]
    a = op.attributes
    window, strides = a["window_dimensions"], a["window_strides"]
    base, wdil = a["base_dilations"], a["window_dilations"]
    pad = np.asarray(a["padding"]).reshape(-1, 2)
    out_shape = op.results[0].tensor_type.shape
    combine = ctx.combiner(op.regions[0])
    padded = [pad_array(x, init, [int(p) for p in pad[:, 0]], [int(p) for p in pad[:, 1]],
                        [b - 1 for b in base]) for x, init in zip(inputs, inits)]
    accs = [np.broadcast_to(init, out_shape) for init in inits]
    for offset in np.ndindex(*window):
        sl = tuple(slice(o * d, o * d + s * (m - 1) + 1, s) if m > 0 else slice(0, 0)
                   for o, d, s, m in zip(offset, wdil, strides, out_shape))
        accs = combine(*accs, *[p[sl] for p in padded])
    return Results([np.array(x) for x in accs])


def _apply_in_rounds(combine, targets: list[np.ndarray], dest: np.ndarray, updates: list[np.ndarray]) -> None:
    """``targets[dest[i]] = combine(targets[dest[i]], updates[i])`` in order of i, vectorised:
    each round applies, for every destination, the earliest update not yet applied."""
    flat = [t.reshape(-1) for t in targets]
    remaining = np.arange(dest.size)
    while remaining.size:
        _, first = np.unique(dest[remaining], return_index=True)
        take = remaining[first]
        where = dest[take]
        new = combine(*[f[where] for f in flat], *[u[take] for u in updates])
        for f, v in zip(flat, new):
            f[where] = v
        keep = np.ones(remaining.size, dtype=bool)
        keep[first] = False
        remaining = remaining[keep]


@register("stablehlo.scatter")
def _scatter(ctx: Execution, op: Op, *args):
    n = (len(args) - 1) // 2
    inputs, indices, updates = args[:n], args[n], args[n + 1:]
    dn = op.attributes["scatter_dimension_numbers"]
    dest, valid, perm = scatter_destinations(inputs[0].shape, indices, updates[0].shape, dn)
    ordered = [np.transpose(u, perm).reshape(-1) for u in updates]
    # C order: the rounds write through flat views (a copy of a transposed operand would keep
    # its strides, and the flat "view" would be a copy that drops every write).
    results = [np.array(x, copy=True, order="C") for x in inputs]
    _apply_in_rounds(ctx.combiner(op.regions[0]), results, dest[valid], [u[valid] for u in ordered])
    return Results(results)


@register("stablehlo.select_and_scatter")
def _select_and_scatter(ctx: Execution, op: Op, operand, source, init):
    a = op.attributes
    window, strides = a["window_dimensions"], a["window_strides"]
    pad = np.asarray(a["padding"]).reshape(-1, 2)
    select = ctx.combiner(op.regions[0])
    out_shape = source.shape
    lo = [int(p) for p in pad[:, 0]]
    hi = [int(p) for p in pad[:, 1]]
    # Positions are tracked in the padded frame; padding itself is never selected.
    positions = np.arange(operand.size, dtype=np.int64).reshape(operand.shape)
    padded_pos = pad_array(positions, -1, lo, hi, [0] * operand.ndim)
    padded_val = pad_array(operand, np.zeros((), operand.dtype), lo, hi, [0] * operand.ndim)
    best_val = best_pos = None
    for offset in np.ndindex(*window):
        sl = tuple(slice(o, o + s * (m - 1) + 1, s) if m > 0 else slice(0, 0)
                   for o, s, m in zip(offset, strides, out_shape))
        cand_val, cand_pos = padded_val[sl], padded_pos[sl]
        if best_val is None:
            best_val, best_pos = cand_val.copy(), cand_pos.copy()
            continue
        assert best_pos is not None  # set with best_val
        keep = select(best_val, cand_val)[0]
        take = (~keep & (cand_pos >= 0)) | (best_pos < 0)
        best_val = np.where(take, cand_val, best_val)
        best_pos = np.where(take, cand_pos, best_pos)
    result = np.array(np.broadcast_to(init, operand.shape), copy=True)
    if best_pos is not None:
        chosen = best_pos.reshape(-1)
        ok = chosen >= 0
        _apply_in_rounds(ctx.combiner(op.regions[1]), [result], chosen[ok], [source.reshape(-1)[ok]])
    return result


@register("stablehlo.sort")
def _sort(ctx: Execution, op: Op, *inputs):
    dim = op.attributes["dimension"]
    comparator = op.regions[0]
    moved = [np.moveaxis(x, dim, -1) for x in inputs]
    n = moved[0].shape[-1]
    batch_shape = moved[0].shape[:-1]
    batch = int(np.prod(batch_shape, dtype=np.int64))
    flat = [m.reshape(batch, n) for m in moved]
    order = np.empty((batch, n), dtype=np.int64)

    def compare(b, i, j):
        args = []
        for f in flat:
            args += [np.asarray(f[b, i]), np.asarray(f[b, j])]
        if bool(np.asarray(ctx.region(comparator, args)[0])):
            return -1
        args = []
        for f in flat:
            args += [np.asarray(f[b, j]), np.asarray(f[b, i])]
        return 1 if bool(np.asarray(ctx.region(comparator, args)[0])) else 0

    if n <= 1:
        order[:] = np.arange(n)
    elif n * n <= _PAIRWISE_LIMIT:
        less = ctx.combiner(comparator)
        rows = max(1, _PAIRWISE_LIMIT // (n * n))
        for start in range(0, batch, rows):
            chunk = [f[start:start + rows] for f in flat]
            args = []
            for c in chunk:
                args += [c[:, :, None], c[:, None, :]]
            lt = np.asarray(less(*args)[0], dtype=bool)  # lt[b, i, j] = comparator(x_i, x_j)
            # Stable rank of i: elements strictly before it, plus equal ones earlier in the row.
            before = lt.transpose(0, 2, 1)
            equal = ~lt & ~before
            earlier = np.tril(np.ones((n, n), dtype=bool), -1)  # j < i
            rank = before.sum(axis=2) + (equal & earlier[None]).sum(axis=2)
            rows_idx = np.arange(rank.shape[0])[:, None]
            # A comparator that orders nothing consistently (a bare float compare meeting NaNs)
            # gives colliding ranks, and one that holds for an element against itself ranks
            # past the row: those rows are sorted one comparison at a time below.
            order[start:start + rows][rows_idx, np.minimum(rank, n - 1)] = np.arange(n)[None, :]
            bad = np.flatnonzero((np.sort(rank, axis=1) != np.arange(n)[None, :]).any(axis=1))
            for b in (start + bad).tolist():
                order[b] = sorted(range(n), key=functools.cmp_to_key(functools.partial(compare, b)))
    else:
        for b in range(batch):
            order[b] = sorted(range(n), key=functools.cmp_to_key(functools.partial(compare, b)))
    results = []
    for f, m in zip(flat, moved):
        sorted_rows = np.take_along_axis(f, order, axis=1).reshape(m.shape)
        results.append(np.moveaxis(sorted_rows, -1, dim))
    return Results(results)

