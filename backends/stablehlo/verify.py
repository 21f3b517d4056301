"""Static checks of a parsed module: values defined before use, and types and shapes per op.

What the parser guarantees is syntax; this module checks meaning, so that a backend can trust
its input: every operand is defined before it is used (in its block or an enclosing one), every
op's result types follow from its operands and attributes as the StableHLO spec says, regions
take and return what their op requires, and every ``func.call`` reaches an existing function
with the signature it claims, and no tensor is larger than a 64-bit size can count
(:mod:`.limits`, first, so that no backend plans a tensor that cannot exist). Errors are
:class:`~pjrt_hub.abi.CompileError` naming the op and its location. Ops this module has no rule
for are left to the backend (which raises UnsupportedOpError for ops it cannot run).
"""

from __future__ import annotations

from types import MappingProxyType
from typing import Callable, Iterable, Mapping, NoReturn, Sequence

from pjrt_hub.abi import CompileError

from .ir import (
    Block,
    ConvDimensionNumbers,
    DotDimensionNumbers,
    Function,
    GatherDimensionNumbers,
    Module,
    Op,
    ScatterDimensionNumbers,
    TensorType,
    TupleType,
    Type,
    Value,
)
from .limits import check_sizes
from .ops import OPS

__all__ = ["VERIFIERS", "gather_result_shape", "verify", "verify_function"]


class _Invalid(Exception):
    """Raised by a checker; turned into a CompileError that names the op."""


def _fail(message: str) -> NoReturn:
    raise _Invalid(message)


def verify(module: Module) -> Module:
    """Check ``module``; return it unchanged so calls can be chained. Raises CompileError."""
    if not module.functions:
        raise CompileError("module has no functions")
    _ = module.main  # raises CompileError when there is no entry point
    check_sizes(module)
    # Computations a custom_call names (JAX's ApproxTopK comparator) end as regions do, with
    # stablehlo.return: what runs them is the custom call's implementation, if any.
    called = {getattr(ref, "name", str(ref)) for op in module.walk() if op.name == "stablehlo.custom_call"
              for ref in op.attr("called_computations") or ()}
    for fn in module.functions.values():
        region_like = fn.name in called and bool(fn.body.ops) and fn.body.ops[-1].name == "stablehlo.return"
        verify_function(fn, module, terminator="stablehlo.return" if region_like else "func.return")
    return module


def verify_function(fn: Function, module: Module, terminator: str = "func.return") -> None:
    if len(fn.arg_attrs) != len(fn.args) or len(fn.result_attrs) != len(fn.result_types):
        raise CompileError(f"function @{fn.name}: attribute lists do not match its signature")
    defined: set[int] = set()
    _verify_block(fn.body, defined, module, fn, terminator=terminator)
    ret = fn.body.ops[-1] if fn.body.ops else None
    if ret is None or ret.name != terminator:
        raise CompileError(f"function @{fn.name}: body must end with {terminator}")
    got = tuple(v.type for v in ret.operands)
    if got != fn.result_types:
        raise CompileError(
            f"{ret.describe()} in @{fn.name}: returns ({_types(got)}) but the function is "
            f"declared to return ({_types(fn.result_types)})")


def _types(types: Iterable[Type]) -> str:
    return ", ".join(str(t) for t in types)


def _verify_block(block: Block, defined: set[int], module: Module, fn: Function,
                  terminator: str) -> None:
    for arg in block.args:
        if arg.id in defined:
            raise CompileError(f"@{fn.name}: block argument {arg.name} is defined twice")
        defined.add(arg.id)
    if not block.ops:
        raise CompileError(f"@{fn.name}: empty block (a region must end with {terminator})")
    for index, op in enumerate(block.ops):
        for v in op.operands:
            if v.id not in defined:
                raise CompileError(f"{op.describe()} in @{fn.name}: operand {v.name} is used "
                                   "before it is defined (or is not visible here)")
        is_last = index == len(block.ops) - 1
        if op.name.endswith(".return") and not is_last:
            raise CompileError(f"{op.describe()} in @{fn.name}: return before the end of its block")
        if is_last and op.name != terminator and not (
                terminator == "stablehlo.return" and op.name in ("stablehlo.return", "chlo.return", "mhlo.return", "sdy.return")):
            raise CompileError(f"{op.describe()} in @{fn.name}: a block must end with {terminator}")
        for region in op.regions:
            # Regions see everything defined so far; their own values stay inside.
            _verify_block(region, set(defined), module, fn, terminator="stablehlo.return")
        try:
            regions = _REGIONS.get(op.name)
            if regions is not None and len(op.regions) != regions:
                _fail(f"expects {regions} region{'s' if regions > 1 else ''}, got {len(op.regions)}")
            checker = _CHECKS.get(op.name)
            if checker is not None:
                checker(op, module)
            _check_element_class(op)
        except _Invalid as exc:
            raise CompileError(f"{op.describe()} in @{fn.name}: {exc}") from None
        except (TypeError, IndexError, AttributeError, ValueError, ArithmeticError) as exc:
            raise CompileError(f"{op.describe()} in @{fn.name}: malformed op ({exc})") from None
        for r in op.results:
            defined.add(r.id)


# -- helpers ----------------------------------------------------------------------------------


def _tensor(value: Value | Type, what: str) -> TensorType:
    ty = value.type if isinstance(value, Value) else value
    if not isinstance(ty, TensorType):
        _fail(f"{what} must be a tensor, got {ty}")
    return ty


def _count(op: Op, operands: int | None = None, results: int | None = None) -> None:
    if operands is not None and len(op.operands) != operands:
        _fail(f"expects {operands} operands, got {len(op.operands)}")
    if results is not None and len(op.results) != results:
        _fail(f"expects {results} results, got {len(op.results)}")


def _dims_in_range(dims: Sequence[int], rank: int, what: str, unique: bool = True) -> None:
    for d in dims:
        if not 0 <= d < rank:
            _fail(f"{what} {list(dims)} out of range for rank {rank}")
    if unique and len(set(dims)) != len(dims):
        _fail(f"{what} {list(dims)} has repeated dimensions")


def _expect_type(got: Type, expected: Type, what: str) -> None:
    if got != expected:
        _fail(f"{what} has type {got}, expected {expected}")


def _region_signature(op: Op, index: int, args: Sequence[Type], results: Sequence[Type], what: str) -> None:
    if index >= len(op.regions):
        _fail(f"missing {what} region")
    block = op.regions[index]
    got_args = tuple(a.type for a in block.args)
    if got_args != tuple(args):
        _fail(f"{what} takes ({_types(got_args)}), expected ({_types(args)})")
    ret = block.ops[-1]
    got = tuple(v.type for v in ret.operands)
    if got != tuple(results):
        _fail(f"{what} returns ({_types(got)}), expected ({_types(results)})")


def _scalar(ty: TensorType) -> TensorType:
    return TensorType((), ty.element_type)


# -- per-op rules -----------------------------------------------------------------------------

def _check_unary(op: Op, module: Module) -> None:
    _count(op, 1, 1)
    x, r = _tensor(op.operands[0], "operand"), _tensor(op.results[0], "result")
    if x.shape != r.shape:
        _fail(f"result shape {r.shape} differs from operand shape {x.shape}")
    if x.element_type != r.element_type:
        _fail(f"result element type {r.element_type} differs from operand's {x.element_type}")


def _check_binary(op: Op, module: Module) -> None:
    _count(op, 2, 1)
    a, b = _tensor(op.operands[0], "lhs"), _tensor(op.operands[1], "rhs")
    r = _tensor(op.results[0], "result")
    if not (a.shape == b.shape == r.shape):
        _fail(f"shapes differ: lhs {a.shape}, rhs {b.shape}, result {r.shape} "
              "(StableHLO has no implicit broadcasting; use broadcast_in_dim)")
    if not (a.element_type == b.element_type == r.element_type):
        _fail(f"element types differ: lhs {a.element_type}, rhs {b.element_type}, "
              f"result {r.element_type}")


def _check_abs(op: Op, module: Module) -> None:
    _count(op, 1, 1)
    x, r = _tensor(op.operands[0], "operand"), _tensor(op.results[0], "result")
    if x.shape != r.shape:
        _fail(f"result shape {r.shape} differs from operand shape {x.shape}")
    if not x.is_complex and x.element_type != r.element_type:
        _fail(f"result element type {r.element_type} differs from operand's {x.element_type}")


def _check_to_bool(op: Op, module: Module) -> None:
    _count(op, 1, 1)
    x, r = _tensor(op.operands[0], "operand"), _tensor(op.results[0], "result")
    if x.shape != r.shape or not r.is_bool:
        _fail(f"result must be tensor of i1 with shape {x.shape}, got {r}")


def _check_convert(op: Op, module: Module) -> None:
    _count(op, 1, 1)
    x, r = _tensor(op.operands[0], "operand"), _tensor(op.results[0], "result")
    if x.shape != r.shape:
        _fail(f"result shape {r.shape} differs from operand shape {x.shape}")


def _check_bitcast_convert(op: Op, module: Module) -> None:
    _count(op, 1, 1)
    x, r = _tensor(op.operands[0], "operand"), _tensor(op.results[0], "result")
    wx, wr = x.bit_width, r.bit_width
    if wx == wr:
        ok = x.shape == r.shape
    elif wx > wr:
        ok = r.shape == x.shape + (wx // wr,) and wx % wr == 0
    else:
        ok = bool(x.shape) and x.shape[:-1] == r.shape and x.shape[-1] * wx == wr
    if not ok:
        _fail(f"cannot bitcast {x} to {r}")


def _check_compare(op: Op, module: Module) -> None:
    _count(op, 2, 1)
    a, b = _tensor(op.operands[0], "lhs"), _tensor(op.operands[1], "rhs")
    r = _tensor(op.results[0], "result")
    if a != b:
        _fail(f"operands have different types {a} and {b}")
    if r.shape != a.shape or not r.is_bool:
        _fail(f"result must be tensor<{''.join(f'{d}x' for d in a.shape)}i1>, got {r}")


def _check_select(op: Op, module: Module) -> None:
    _count(op, 3, 1)
    p = _tensor(op.operands[0], "pred")
    t, f = op.operands[1].type, op.operands[2].type
    r = op.results[0].type
    if not p.is_bool:
        _fail(f"pred must have element type i1, got {p.element_type}")
    if not (t == f == r):
        _fail(f"on_true {t}, on_false {f} and result {r} must have the same type")
    if isinstance(t, TensorType) and p.shape not in ((), t.shape):
        _fail(f"pred shape {p.shape} must be () or {t.shape}")


def _check_clamp(op: Op, module: Module) -> None:
    _count(op, 3, 1)
    lo, x, hi = (_tensor(v, n) for v, n in zip(op.operands, ("min", "operand", "max")))
    r = _tensor(op.results[0], "result")
    if r != x:
        _fail(f"result type {r} differs from operand type {x}")
    for bound, name in ((lo, "min"), (hi, "max")):
        if bound.element_type != x.element_type or bound.shape not in ((), x.shape):
            _fail(f"{name} must be a scalar or have the operand's type {x}, got {bound}")


def _check_constant(op: Op, module: Module) -> None:
    _count(op, 0, 1)
    r = _tensor(op.results[0], "result")
    value = op.attributes["value"]
    if tuple(value.shape) != r.shape or value.dtype != r.dtype:
        _fail(f"value has shape {tuple(value.shape)} and dtype {value.dtype}, result is {r}")


def _check_iota(op: Op, module: Module) -> None:
    _count(op, 0, 1)
    r = _tensor(op.results[0], "result")
    d = op.attributes["iota_dimension"]
    if not 0 <= d < r.rank:
        _fail(f"iota_dimension {d} out of range for {r}")


def _check_broadcast_in_dim(op: Op, module: Module) -> None:
    _count(op, 1, 1)
    x, r = _tensor(op.operands[0], "operand"), _tensor(op.results[0], "result")
    dims = op.attributes["broadcast_dimensions"]
    if len(dims) != x.rank:
        _fail(f"broadcast_dimensions {list(dims)} must have one entry per operand dimension ({x.rank})")
    _dims_in_range(dims, r.rank, "broadcast_dimensions")
    for i, d in enumerate(dims):
        if x.shape[i] not in (1, r.shape[d]):
            _fail(f"operand dimension {i} (size {x.shape[i]}) cannot broadcast to result "
                  f"dimension {d} (size {r.shape[d]})")
    if x.element_type != r.element_type:
        _fail(f"element types differ: {x.element_type} -> {r.element_type}")


def _check_reshape(op: Op, module: Module) -> None:
    _count(op, 1, 1)
    x, r = _tensor(op.operands[0], "operand"), _tensor(op.results[0], "result")
    if x.size != r.size:
        _fail(f"cannot reshape {x} ({x.size} elements) to {r} ({r.size} elements)")
    if x.element_type != r.element_type:
        _fail(f"element types differ: {x.element_type} -> {r.element_type}")


def _check_transpose(op: Op, module: Module) -> None:
    _count(op, 1, 1)
    x, r = _tensor(op.operands[0], "operand"), _tensor(op.results[0], "result")
    perm = op.attributes["permutation"]
    if sorted(perm) != list(range(x.rank)):
        _fail(f"permutation {list(perm)} is not a permutation of the {x.rank} dimensions")
    expected = tuple(x.shape[p] for p in perm)
    if r.shape != expected or r.element_type != x.element_type:
        _fail(f"result must be {x.with_shape(expected)}, got {r}")


def _check_reverse(op: Op, module: Module) -> None:
    _count(op, 1, 1)
    x = _tensor(op.operands[0], "operand")
    _expect_type(op.results[0].type, x, "result")
    _dims_in_range(op.attributes["dimensions"], x.rank, "dimensions")


def _check_slice(op: Op, module: Module) -> None:
    _count(op, 1, 1)
    x, r = _tensor(op.operands[0], "operand"), _tensor(op.results[0], "result")
    a = op.attributes
    start, limit, strides = a["start_indices"], a["limit_indices"], a["strides"]
    if not (len(start) == len(limit) == len(strides) == x.rank):
        _fail(f"start_indices/limit_indices/strides need {x.rank} entries each")
    shape = []
    for d in range(x.rank):
        if not (0 <= start[d] <= limit[d] <= x.shape[d]) or strides[d] <= 0:
            _fail(f"dimension {d}: slice {start[d]}:{limit[d]}:{strides[d]} is out of range "
                  f"for size {x.shape[d]}")
        shape.append(-(-(limit[d] - start[d]) // strides[d]))
    if r.shape != tuple(shape) or r.element_type != x.element_type:
        _fail(f"result must be {x.with_shape(tuple(shape))}, got {r}")


def _check_dynamic_slice(op: Op, module: Module) -> None:
    x, r = _tensor(op.operands[0], "operand"), _tensor(op.results[0], "result")
    sizes = op.attributes["slice_sizes"]
    if len(op.operands) != 1 + x.rank or len(sizes) != x.rank:
        _fail(f"needs one start index per dimension ({x.rank}) and {x.rank} slice_sizes")
    for v in op.operands[1:]:
        t = _tensor(v, "start index")
        if t.shape != () or not t.is_integer:
            _fail(f"start indices must be integer scalars, got {t}")
    for d in range(x.rank):
        if not 0 <= sizes[d] <= x.shape[d]:
            _fail(f"slice size {sizes[d]} out of range for dimension {d} (size {x.shape[d]})")
    if r.shape != tuple(sizes) or r.element_type != x.element_type:
        _fail(f"result must be {x.with_shape(tuple(sizes))}, got {r}")


def _check_dynamic_update_slice(op: Op, module: Module) -> None:
    x = _tensor(op.operands[0], "operand")
    u = _tensor(op.operands[1], "update")
    if len(op.operands) != 2 + x.rank:
        _fail(f"needs one start index per dimension ({x.rank})")
    if u.rank != x.rank or any(u.shape[d] > x.shape[d] for d in range(x.rank)):
        _fail(f"update {u} does not fit in operand {x}")
    for v in op.operands[2:]:
        t = _tensor(v, "start index")
        if t.shape != () or not t.is_integer:
            _fail(f"start indices must be integer scalars, got {t}")
    _expect_type(op.results[0].type, x, "result")


def _check_concatenate(op: Op, module: Module) -> None:
    if not op.operands:
        _fail("needs at least one operand")
    _count(op, None, 1)
    types = [_tensor(v, "input") for v in op.operands]
    r = _tensor(op.results[0], "result")
    dim = op.attributes["dimension"]
    first = types[0]
    if not 0 <= dim < first.rank:
        _fail(f"dimension {dim} out of range for rank {first.rank}")
    total = 0
    for t in types:
        if t.rank != first.rank or t.element_type != first.element_type or any(
                t.shape[d] != first.shape[d] for d in range(t.rank) if d != dim):
            _fail(f"inputs {_types(types)} differ outside dimension {dim}")
        total += t.shape[dim]
    expected = first.shape[:dim] + (total,) + first.shape[dim + 1:]
    if r.shape != expected or r.element_type != first.element_type:
        _fail(f"result must be {first.with_shape(expected)}, got {r}")


def _check_pad(op: Op, module: Module) -> None:
    _count(op, 2, 1)
    x, v = _tensor(op.operands[0], "operand"), _tensor(op.operands[1], "padding value")
    r = _tensor(op.results[0], "result")
    a = op.attributes
    lo, hi, interior = a["edge_padding_low"], a["edge_padding_high"], a["interior_padding"]
    if v.shape != () or v.element_type != x.element_type:
        _fail(f"padding value must be tensor<{x.element_type}>, got {v}")
    if not (len(lo) == len(hi) == len(interior) == x.rank):
        _fail(f"padding attributes need {x.rank} entries each")
    shape = []
    for d in range(x.rank):
        if interior[d] < 0:
            _fail(f"interior padding must be >= 0, got {interior[d]}")
        n = x.shape[d]
        size = lo[d] + hi[d] + n + max(n - 1, 0) * interior[d]
        if size < 0:
            _fail(f"dimension {d} would have negative size {size}")
        shape.append(size)
    if r.shape != tuple(shape) or r.element_type != x.element_type:
        _fail(f"result must be {x.with_shape(tuple(shape))}, got {r}")


def _check_dot_general(op: Op, module: Module) -> None:
    _count(op, 2, 1)
    a, b = _tensor(op.operands[0], "lhs"), _tensor(op.operands[1], "rhs")
    r = _tensor(op.results[0], "result")
    dn: DotDimensionNumbers = op.attributes["dot_dimension_numbers"]
    lb, rb = dn.lhs_batching_dimensions, dn.rhs_batching_dimensions
    lc, rc = dn.lhs_contracting_dimensions, dn.rhs_contracting_dimensions
    if len(lb) != len(rb) or len(lc) != len(rc):
        _fail("lhs and rhs must have as many batching and as many contracting dimensions")
    _dims_in_range(lb + lc, a.rank, "lhs batching+contracting dimensions")
    _dims_in_range(rb + rc, b.rank, "rhs batching+contracting dimensions")
    for x, y, kind in ((lb, rb, "batching"), (lc, rc, "contracting")):
        for i, j in zip(x, y):
            if a.shape[i] != b.shape[j]:
                _fail(f"{kind} dimensions lhs[{i}] = {a.shape[i]} and rhs[{j}] = {b.shape[j]} differ")
    expected = (tuple(a.shape[d] for d in lb)
                + tuple(a.shape[d] for d in range(a.rank) if d not in lb and d not in lc)
                + tuple(b.shape[d] for d in range(b.rank) if d not in rb and d not in rc))
    if r.shape != expected:
        _fail(f"result shape must be {expected} (batch, lhs free, rhs free), got {r.shape}")


def _check_dot(op: Op, module: Module) -> None:
    _count(op, 2, 1)
    a, b = _tensor(op.operands[0], "lhs"), _tensor(op.operands[1], "rhs")
    r = _tensor(op.results[0], "result")
    if a.rank not in (1, 2) or b.rank not in (1, 2) or a.shape[-1] != b.shape[0]:
        _fail(f"cannot multiply {a} by {b}")
    expected = a.shape[:-1] + b.shape[1:]
    if r.shape != expected:
        _fail(f"result shape must be {expected}, got {r.shape}")


def _check_reduce(op: Op, module: Module) -> None:
    n = len(op.operands) // 2
    if n == 0 or len(op.operands) != 2 * n or len(op.results) != n:
        _fail("expects N inputs, N init values and N results")
    inputs = [_tensor(v, "input") for v in op.operands[:n]]
    inits = [_tensor(v, "init value") for v in op.operands[n:]]
    dims = op.attributes["dimensions"]
    shape = inputs[0].shape
    if any(t.shape != shape for t in inputs):
        _fail(f"inputs have different shapes: {_types(inputs)}")
    if any(t.shape != () for t in inits):
        _fail(f"init values must be scalars: {_types(inits)}")
    _dims_in_range(dims, len(shape), "dimensions")
    kept = tuple(s for d, s in enumerate(shape) if d not in dims)
    for i, (r, _init) in enumerate(zip(op.results, inits)):
        rt = _tensor(r, "result")
        if rt.shape != kept:
            _fail(f"result {i} must have shape {kept}, got {rt.shape}")
    scalars = [_scalar(t) for t in inits]
    _region_signature(op, 0, scalars + scalars, [_scalar(_tensor(r, "result")) for r in op.results], "body")


def _window_output(size: int, window: int, stride: int, lo: int, hi: int,
                   base_dilation: int = 1, window_dilation: int = 1) -> int:
    padded = (size - 1) * base_dilation + 1 + lo + hi if size > 0 else lo + hi
    dilated = (window - 1) * window_dilation + 1
    if padded < dilated:
        return 0
    return (padded - dilated) // stride + 1


def _check_reduce_window(op: Op, module: Module) -> None:
    n = len(op.operands) // 2
    if n == 0 or len(op.operands) != 2 * n or len(op.results) != n:
        _fail("expects N inputs, N init values and N results")
    inputs = [_tensor(v, "input") for v in op.operands[:n]]
    inits = [_tensor(v, "init value") for v in op.operands[n:]]
    a = op.attributes
    rank = inputs[0].rank
    wd, ws = a["window_dimensions"], a["window_strides"]
    bd, wdl, pad = a["base_dilations"], a["window_dilations"], a["padding"]
    if not (len(wd) == len(ws) == len(bd) == len(wdl) == rank) or pad.shape != (rank, 2):
        _fail(f"window attributes need {rank} entries each")
    if min(list(wd) + list(ws) + list(bd) + list(wdl) + [1]) <= 0:
        _fail("window dimensions, strides and dilations must be positive")
    shape = tuple(_window_output(inputs[0].shape[d], wd[d], ws[d], int(pad[d][0]), int(pad[d][1]),
                                 bd[d], wdl[d]) for d in range(rank))
    for i, r in enumerate(op.results):
        if _tensor(r, "result").shape != shape:
            _fail(f"result {i} must have shape {shape}, got {r.type}")
    scalars = [_scalar(t) for t in inits]
    _region_signature(op, 0, scalars + scalars, [_scalar(_tensor(r, "result")) for r in op.results], "body")


def _check_convolution(op: Op, module: Module) -> None:
    _count(op, 2, 1)
    x, k = _tensor(op.operands[0], "lhs"), _tensor(op.operands[1], "rhs")
    r = _tensor(op.results[0], "result")
    a = op.attributes
    dn: ConvDimensionNumbers = a["dimension_numbers"]
    n = len(dn.input_spatial_dimensions)
    if x.rank != n + 2 or k.rank != n + 2 or r.rank != n + 2:
        _fail(f"input, kernel and output need rank {n + 2}")
    fgc, bgc = a["feature_group_count"], a["batch_group_count"]
    in_features = x.shape[dn.input_feature_dimension]
    k_in, k_out = k.shape[dn.kernel_input_feature_dimension], k.shape[dn.kernel_output_feature_dimension]
    if fgc < 1 or bgc < 1 or (fgc > 1 and bgc > 1):
        _fail(f"feature_group_count {fgc} and batch_group_count {bgc} must be >= 1, not both > 1")
    if in_features % fgc or in_features // fgc != k_in:
        _fail(f"input features {in_features} / feature_group_count {fgc} must equal kernel input "
              f"features {k_in}")
    if k_out % fgc or k_out % bgc:
        _fail(f"kernel output features {k_out} must be divisible by the group counts")
    if x.shape[dn.input_batch_dimension] % bgc:
        _fail(f"input batch {x.shape[dn.input_batch_dimension]} must be divisible by batch_group_count {bgc}")
    for name in ("window_strides", "lhs_dilation", "rhs_dilation"):
        if min(list(a[name]) + [1]) <= 0:
            _fail(f"{name} must be positive, got {list(a[name])}")
    pad = a["padding"]
    expected = [0] * (n + 2)
    expected[dn.output_batch_dimension] = x.shape[dn.input_batch_dimension] // bgc
    expected[dn.output_feature_dimension] = k_out
    for i in range(n):
        size = x.shape[dn.input_spatial_dimensions[i]]
        window = k.shape[dn.kernel_spatial_dimensions[i]]
        expected[dn.output_spatial_dimensions[i]] = _window_output(
            size, window, a["window_strides"][i], int(pad[i][0]), int(pad[i][1]),
            a["lhs_dilation"][i], a["rhs_dilation"][i])
    if r.shape != tuple(expected):
        _fail(f"result shape must be {tuple(expected)}, got {r.shape}")


def gather_result_shape(operand: tuple[int, ...], indices: tuple[int, ...],
                        dn: GatherDimensionNumbers, slice_sizes: Sequence[int]) -> tuple[int, ...]:
    """The result shape of ``gather`` (spec constraint C22)."""
    batch_sizes = [s for d, s in enumerate(indices) if d != dn.index_vector_dim]
    dropped = set(dn.collapsed_slice_dims) | set(dn.operand_batching_dims)
    offset_sizes = [s for d, s in enumerate(slice_sizes) if d not in dropped]
    rank = len(batch_sizes) + len(offset_sizes)
    shape = []
    bi = oi = 0
    for d in range(rank):
        if d in dn.offset_dims:
            shape.append(offset_sizes[oi])
            oi += 1
        else:
            shape.append(batch_sizes[bi])
            bi += 1
    return tuple(shape)


def _check_gather(op: Op, module: Module) -> None:
    _count(op, 2, 1)
    x, idx = _tensor(op.operands[0], "operand"), _tensor(op.operands[1], "start_indices")
    r = _tensor(op.results[0], "result")
    dn: GatherDimensionNumbers = op.attributes["dimension_numbers"]
    sizes = op.attributes["slice_sizes"]
    if not idx.is_integer:
        _fail(f"start_indices must be integers, got {idx}")
    if len(sizes) != x.rank:
        _fail(f"slice_sizes needs {x.rank} entries")
    if x.rank != len(dn.offset_dims) + len(dn.collapsed_slice_dims) + len(dn.operand_batching_dims):
        _fail("rank(operand) must equal offset_dims + collapsed_slice_dims + operand_batching_dims")
    if not 0 <= dn.index_vector_dim <= idx.rank:
        _fail(f"index_vector_dim {dn.index_vector_dim} out of range")
    n_index = idx.shape[dn.index_vector_dim] if dn.index_vector_dim < idx.rank else 1
    if len(dn.start_index_map) != n_index:
        _fail(f"start_index_map has {len(dn.start_index_map)} entries for index vectors of size {n_index}")
    _dims_in_range(dn.start_index_map, x.rank, "start_index_map")
    for d in range(x.rank):
        if not 0 <= sizes[d] <= x.shape[d]:
            _fail(f"slice size {sizes[d]} out of range for dimension {d} (size {x.shape[d]})")
    padded = idx.shape if dn.index_vector_dim < idx.rank else idx.shape + (1,)
    expected = gather_result_shape(x.shape, padded, dn, sizes)
    if r.shape != expected or r.element_type != x.element_type:
        _fail(f"result must be {x.with_shape(expected)}, got {r}")


def _check_scatter(op: Op, module: Module) -> None:
    n = (len(op.operands) - 1) // 2
    if n == 0 or len(op.operands) != 2 * n + 1 or len(op.results) != n:
        _fail("expects N inputs, scatter_indices, N updates and N results")
    inputs = [_tensor(v, "input") for v in op.operands[:n]]
    idx = _tensor(op.operands[n], "scatter_indices")
    updates = [_tensor(v, "update") for v in op.operands[n + 1:]]
    dn: ScatterDimensionNumbers = op.attributes["scatter_dimension_numbers"]
    if not idx.is_integer:
        _fail(f"scatter_indices must be integers, got {idx}")
    for i, (t, r) in enumerate(zip(inputs, op.results)):
        _expect_type(r.type, t, f"result {i}")
    rank = inputs[0].rank
    if rank != len(dn.update_window_dims) + len(dn.inserted_window_dims) + len(dn.input_batching_dims):
        _fail("rank(inputs) must equal update_window_dims + inserted_window_dims + input_batching_dims")
    _dims_in_range(dn.scatter_dims_to_operand_dims, rank, "scatter_dims_to_operand_dims")
    scalars = [_scalar(t) for t in inputs]
    _region_signature(op, 0, scalars + [_scalar(u) for u in updates], scalars, "update_computation")


def _check_sort(op: Op, module: Module) -> None:
    if not op.operands or len(op.operands) != len(op.results):
        _fail("expects as many results as operands (at least one)")
    types = [_tensor(v, "input") for v in op.operands]
    if any(t.shape != types[0].shape for t in types):
        _fail(f"inputs have different shapes: {_types(types)}")
    for i, (t, r) in enumerate(zip(types, op.results)):
        _expect_type(r.type, t, f"result {i}")
    dim = op.attributes["dimension"]
    if not 0 <= dim < max(types[0].rank, 1):
        _fail(f"dimension {dim} out of range for rank {types[0].rank}")
    args = []
    for t in types:
        args += [_scalar(t), _scalar(t)]
    _region_signature(op, 0, args, [TensorType((), "i1")], "comparator")


def _check_while(op: Op, module: Module) -> None:
    types = [v.type for v in op.operands]
    for i, (t, r) in enumerate(zip(types, op.results)):
        _expect_type(r.type, t, f"result {i}")
    if len(op.results) != len(types):
        _fail(f"{len(types)} operands but {len(op.results)} results")
    _region_signature(op, 0, types, [TensorType((), "i1")], "cond")
    _region_signature(op, 1, types, types, "body")


def _check_case(op: Op, module: Module) -> None:
    _count(op, 1)
    index = _tensor(op.operands[0], "index")
    if index.shape != () or index.element_type != "i32":
        _fail(f"index must be tensor<i32>, got {index}")
    if not op.regions:
        _fail("needs at least one branch")
    for i in range(len(op.regions)):
        _region_signature(op, i, [], [r.type for r in op.results], f"branch {i}")


def _check_if(op: Op, module: Module) -> None:
    _count(op, 1)
    pred = _tensor(op.operands[0], "pred")
    if pred.shape != () or not pred.is_bool:
        _fail(f"pred must be tensor<i1>, got {pred}")
    if len(op.regions) != 2:
        _fail("needs a true and a false branch")
    for i, name in enumerate(("true branch", "false branch")):
        _region_signature(op, i, [], [r.type for r in op.results], name)


def _check_call(op: Op, module: Module) -> None:
    callee = op.attributes["callee"].name
    fn = module.functions.get(callee)
    if fn is None:
        _fail(f"calls @{callee}, which is not defined (functions: "
              f"{', '.join('@' + n for n in module.functions)})")
    got_in = tuple(v.type for v in op.operands)
    got_out = tuple(v.type for v in op.results)
    if got_in != fn.arg_types:
        _fail(f"passes ({_types(got_in)}) to @{callee}, which takes ({_types(fn.arg_types)})")
    if got_out != fn.result_types:
        _fail(f"expects ({_types(got_out)}) from @{callee}, which returns ({_types(fn.result_types)})")


def _check_top_k(op: Op, module: Module) -> None:
    _count(op, 1, 2)
    x = _tensor(op.operands[0], "operand")
    k = op.attributes["k"]
    if x.rank < 1 or not 0 <= k <= x.shape[-1]:
        _fail(f"k = {k} out of range for {x}")
    shape = x.shape[:-1] + (k,)
    values, indices = _tensor(op.results[0], "values"), _tensor(op.results[1], "indices")
    if values != x.with_shape(shape) or indices.shape != shape or not indices.is_integer:
        _fail(f"results must be {x.with_shape(shape)} and an integer tensor of shape {shape}")


def _check_tuple(op: Op, module: Module) -> None:
    r = op.results[0].type
    if not isinstance(r, TupleType) or r.types != tuple(v.type for v in op.operands):
        _fail(f"result must be tuple<{_types(v.type for v in op.operands)}>, got {r}")


def _check_get_tuple_element(op: Op, module: Module) -> None:
    _count(op, 1, 1)
    t = op.operands[0].type
    i = op.attributes["index"]
    if not isinstance(t, TupleType) or not 0 <= i < len(t.types):
        _fail(f"index {i} out of range for {t}")
    _expect_type(op.results[0].type, t.types[i], "result")


def _check_optimization_barrier(op: Op, module: Module) -> None:
    if tuple(v.type for v in op.operands) != tuple(v.type for v in op.results):
        _fail("results must have the operands' types")


def _collective_check(check: Callable[[Op], None]) -> Callable[[Op, Module], None]:
    from . import collectives

    def run(op: Op, module: Module) -> None:
        try:
            check(op)
        except collectives._Invalid as exc:
            _fail(str(exc))

    return run


def _collective_checks() -> dict[str, Callable[[Op, Module], None]]:
    from .collectives import CHECKS

    return {rule: _collective_check(check) for rule, check in CHECKS.items()}


def _check_complex(op: Op, module: Module) -> None:
    _count(op, 2, 1)
    a, b = _tensor(op.operands[0], "lhs"), _tensor(op.operands[1], "rhs")
    r = _tensor(op.results[0], "result")
    if a != b or a.element_type not in ("f32", "f64"):
        _fail(f"operands must be two tensors of f32 or f64 of one type, got {a} and {b}")
    if r != a.with_element_type(f"complex<{a.element_type}>"):
        _fail(f"result must be {a.with_element_type(f'complex<{a.element_type}>')}, got {r}")


def _check_real_imag(op: Op, module: Module) -> None:
    _count(op, 1, 1)
    x, r = _tensor(op.operands[0], "operand"), _tensor(op.results[0], "result")
    part = x.element_type[len("complex<"):-1] if x.is_complex else x.element_type
    if r != x.with_element_type(part):
        _fail(f"result must be {x.with_element_type(part)}, got {r}")


def _check_map(op: Op, module: Module) -> None:
    if not op.operands:
        _fail("expects at least one operand")
    _count(op, None, 1)
    r = _tensor(op.results[0], "result")
    for i, v in enumerate(op.operands):
        if _tensor(v, f"operand {i}").shape != r.shape:
            _fail(f"operand {i} has shape {v.tensor_type.shape}, the result {r.shape}")
    scalars = [_scalar(_tensor(v, "operand")) for v in op.operands]
    _region_signature(op, 0, scalars, [_scalar(r)], "computation")


_CLASS_NAMES = {"f": "floating-point", "c": "complex", "s": "signed integer", "u": "unsigned integer",
                "b": "boolean"}


def _element_class(t: TensorType) -> str:
    if t.is_bool:
        return "b"
    if t.is_complex:
        return "c"
    if t.is_float:
        return "f"
    return "u" if t.is_unsigned else "s"


def _check_element_class(op: Op) -> None:
    allowed = _ELEMENT_CLASSES.get(op.name)
    if allowed is None or not op.operands or not isinstance(op.operands[0].type, TensorType):
        return
    t = op.operands[0].type
    if _element_class(t) not in allowed:
        names = [_CLASS_NAMES[c] for c in allowed]
        kinds = names[0] if len(names) == 1 else ", ".join(names[:-1]) + " or " + names[-1]
        _fail(f"takes {kinds} operands, not {t.element_type}")


#: The rules an op definition may name (:attr:`.ops.OpDef.verifier`), by name.
VERIFIERS: Mapping[str, Callable[[Op, Module], None]] = MappingProxyType({
    **_collective_checks(),
    "unary": _check_unary,
    "binary": _check_binary,
    "abs": _check_abs,
    "to_bool": _check_to_bool,
    "convert": _check_convert,
    "bitcast_convert": _check_bitcast_convert,
    "compare": _check_compare,
    "select": _check_select,
    "clamp": _check_clamp,
    "complex": _check_complex,
    "real_imag": _check_real_imag,
    "map": _check_map,
    "constant": _check_constant,
    "iota": _check_iota,
    "broadcast_in_dim": _check_broadcast_in_dim,
    "reshape": _check_reshape,
    "transpose": _check_transpose,
    "reverse": _check_reverse,
    "slice": _check_slice,
    "dynamic_slice": _check_dynamic_slice,
    "dynamic_update_slice": _check_dynamic_update_slice,
    "concatenate": _check_concatenate,
    "pad": _check_pad,
    "dot_general": _check_dot_general,
    "dot": _check_dot,
    "reduce": _check_reduce,
    "reduce_window": _check_reduce_window,
    "convolution": _check_convolution,
    "gather": _check_gather,
    "scatter": _check_scatter,
    "sort": _check_sort,
    "while": _check_while,
    "case": _check_case,
    "if": _check_if,
    "call": _check_call,
    "top_k": _check_top_k,
    "tuple": _check_tuple,
    "get_tuple_element": _check_get_tuple_element,
    "optimization_barrier": _check_optimization_barrier,
})

# Per op, derived from the op definitions: the rule, the number of regions, the element classes.
_CHECKS: dict[str, Callable[[Op, Module], None]] = {
    d.name: VERIFIERS[d.verifier] for d in OPS.values() if d.verifier is not None}
_REGIONS: dict[str, int] = {d.name: d.regions for d in OPS.values() if d.regions is not None}
_ELEMENT_CLASSES: dict[str, str] = {
    d.name: d.element_classes for d in OPS.values() if d.element_classes is not None}
