"""Generated StableHLO programs with their inputs and the results the rules (:mod:`.spec`) give.

Two families, shaped by numba's compile time (a second or more per distinct program):

* :func:`elementwise_program`: for one element type, one program holding every elementwise op the
  type has (unary, binary, compare, select, clamp, convert to every other type) over vectors of a
  fixed length. It is compiled once per type; hypothesis then draws the *values* (NaN, +-inf,
  +-0, subnormals, the integer extremes...), so thousands of examples cost executions, not
  compiles.
* :func:`structural_programs`: a hypothesis strategy drawing a chain of shape ops
  (broadcast_in_dim, reshape, transpose, slice, dynamic_slice, pad, concatenate, reduce,
  dot_general, iota, plus elementwise ops between them) over shapes that include 0-d, zero-size,
  size-1 and odd sizes. Every intermediate value is a result, so every op is checked.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable

import numpy as np
from hypothesis import strategies as st

from . import spec
from .spec import ELEMENTS, Element

#: Transcendental ops and complex arithmetic: compared within a tolerance, not bit for bit.
TOLERANT = {"rsqrt", "exponential", "log", "tanh", "logistic", "exponential_minus_one", "log_plus_one",
            "sine", "cosine", "power", "atan2", "cbrt"}


@dataclass
class Output:
    label: str
    expected: np.ndarray
    exact: bool = True


@dataclass
class Program:
    text: str
    args: list[np.ndarray]
    outputs: list[Output] = field(default_factory=list)


def ttype(shape, e: Element | str) -> str:
    return f"tensor<{''.join(f'{d}x' for d in shape)}{e}>"


class Builder:
    """Lines of one ``@main`` and what each result should be."""

    def __init__(self) -> None:
        self.params: list[tuple[str, str]] = []
        self.lines: list[str] = []
        self.results: list[tuple[str, str, Output]] = []
        self._n = 0

    def fresh(self) -> str:
        self._n += 1
        return f"%v{self._n}"

    def param(self, shape, e) -> str:
        name = f"%a{len(self.params)}"
        self.params.append((name, ttype(shape, e)))
        return name

    def op(self, text: str) -> str:
        name = self.fresh()
        self.lines.append(f"    {name} = {text}")
        return name

    def result(self, name: str, shape, e, output: Output) -> None:
        self.results.append((name, ttype(shape, e), output))

    def program(self, args: list[np.ndarray]) -> Program:
        sig = ", ".join(f"{n}: {t}" for n, t in self.params)
        outs = ", ".join(t for _, t, _ in self.results)
        body = "\n".join(self.lines)
        ret = ", ".join(n for n, _, _ in self.results)
        text = (f"func.func @main({sig}) -> ({outs}) {{\n{body}\n"
                f"    return {ret} : {outs}\n}}\n")
        return Program(text, args, [o for _, _, o in self.results])


def constant(b: Builder, value, e: Element, shape=()) -> str:
    """A splat constant in MLIR's spelling (hex bits for floats, so NaN and -0 survive)."""
    return b.op(f"stablehlo.constant dense<{_literal(value, e)}> : {ttype(shape, e)}")


def _literal(value, e: Element) -> str:
    if e.cls == "b":
        return "true" if value else "false"
    if e.cls in "iu":
        return str(int(value))
    if e.cls == "c":
        c = complex(value)
        return f"({c.real!r}, {c.imag!r})"
    if math.isfinite(value) and value != 0:
        return repr(float(value))
    # NaN, +-inf and +-0 as the type's own bits (a decimal literal cannot say NaN or -0).
    size = e.dtype.itemsize
    with np.errstate(all="ignore"):
        bits = np.array([value], np.float64).astype(e.dtype).view(f"u{size}")[0]
    return f"0x{int(bits):0{2 * size}X}"


# -- the elementwise family ---------------------------------------------------------------------------

INT_BINARY = ("add", "subtract", "multiply", "divide", "remainder", "maximum", "minimum", "power",
              "and", "or", "xor", "shift_left", "shift_right_logical", "shift_right_arithmetic")
BOOL_BINARY = ("add", "multiply", "maximum", "minimum", "and", "or", "xor")
FLOAT_BINARY = ("add", "subtract", "multiply", "divide", "remainder", "maximum", "minimum")
FLOAT_UNARY = ("negate", "abs", "sign", "floor", "ceil", "round_nearest_even", "round_nearest_afz", "sqrt",
               "rsqrt", "exponential", "log", "tanh")
COMPLEX_BINARY = ("add", "subtract", "multiply", "divide")
COMPLEX_UNARY = ("negate", "abs", "exponential", "log", "sqrt")
DIRECTIONS = ("EQ", "NE", "LT", "LE", "GT", "GE")
#: Types whose NaN is not a sign-and-magnitude code (0x80 in the FNUZ types, 0xFF in E8M0FNU) or
#: which have no NaN: where TOTALORDER puts them is not settled, so it is not generated for them.
NO_TOTAL_ORDER = {"f8E4M3FNUZ", "f8E5M2FNUZ", "f8E4M3B11FNUZ", "f8E8M0FNU", "f4E2M1FN"}


def _ops_of(e: Element) -> tuple[tuple[str, ...], tuple[str, ...]]:
    if e.cls == "b":
        return BOOL_BINARY, ("not",)
    if e.cls in "iu":
        unary = ("negate", "not", "popcnt", "count_leading_zeros") + (("abs", "sign") if e.cls == "i" else ())
        return INT_BINARY, unary
    if e.cls == "c":
        return COMPLEX_BINARY, COMPLEX_UNARY
    return FLOAT_BINARY, FLOAT_UNARY


@dataclass(frozen=True)
class EwOp:
    """One elementwise op of a generated program over the arguments (x, y, z of one type, p: i1)."""

    kind: str  # "binary" | "unary" | "compare" | "select" | "clamp" | "convert" | "complex"
    name: str = ""
    arg: str = ""  # compare: "LT/FLOAT"; convert: the destination type

    def __str__(self) -> str:
        return " ".join(x for x in (self.kind, self.name, self.arg) if x)


def ops_for(e: Element) -> list[EwOp]:
    """Every elementwise op generated for element type ``e``."""
    binary, unary = _ops_of(e)
    ops = [EwOp("binary", n) for n in binary] + [EwOp("unary", n) for n in unary]
    directions = ("EQ", "NE") if e.cls == "c" else DIRECTIONS
    kinds = {"f": ("FLOAT", "TOTALORDER"), "c": ("FLOAT",), "i": ("SIGNED",), "u": ("UNSIGNED",), "b": ("UNSIGNED",)}[e.cls]
    if e.mlir in NO_TOTAL_ORDER:
        kinds = ("FLOAT",)
    ops += [EwOp("compare", d, k) for d in directions for k in kinds]
    ops.append(EwOp("select"))
    if e.cls != "c":
        ops.append(EwOp("clamp"))
    else:
        ops.append(EwOp("complex"))
    ops += [EwOp("convert", arg=dst) for dst in ELEMENTS if dst != e.mlir]
    return ops


def elementwise_program(e: Element, ops: list[EwOp], shape: tuple[int, ...]) -> tuple[str, Callable[[list[np.ndarray]], list[Output]]]:
    """(program text, expected(args) -> outputs) for the arguments (x, y, z: e[shape], p: i1[shape])."""
    b = Builder()
    n = shape
    x, y, z, p = b.param(n, e), b.param(n, e), b.param(n, e), b.param(n, "i1")
    expected: list[Callable[[list[np.ndarray]], Output]] = []
    t = ttype(n, e)
    for o in ops:
        if o.kind == "binary":
            b.result(b.op(f"stablehlo.{o.name} {x}, {y} : {t}"), n, e, None)
            expected.append(lambda a, name=o.name: _binary(name, a[0], a[1], e))
        elif o.kind == "unary":
            re = ("f32" if e.bits == 64 else "f64") if (o.name == "abs" and e.cls == "c") else e
            b.result(b.op(f"stablehlo.{o.name} {x} : ({t}) -> {ttype(n, re)}"), n, re, None)
            expected.append(lambda a, name=o.name: _unary(name, a[0], e))
        elif o.kind == "compare":
            b.result(b.op(f"stablehlo.compare {o.name}, {x}, {y}, {o.arg} : ({t}, {t}) -> {ttype(n, 'i1')}"),
                     n, "i1", None)
            expected.append(lambda a, d=o.name, k=o.arg: Output(f"compare {d} {k}",
                                                                spec.compare(d, a[0], a[1], e, k == "TOTALORDER")))
        elif o.kind == "select":
            b.result(b.op(f"stablehlo.select {p}, {x}, {y} : {ttype(n, 'i1')}, {t}"), n, e, None)
            expected.append(lambda a: Output("select", spec.select(a[3], a[0], a[1])))
        elif o.kind == "clamp":
            b.result(b.op(f"stablehlo.clamp {y}, {x}, {z} : {t}"), n, e, None)
            expected.append(lambda a: Output("clamp", spec.clamp(a[1], a[0], a[2], e)))
        elif o.kind == "complex":
            part = "f32" if e.bits == 64 else "f64"
            pt = ttype(n, part)
            re_ = b.op(f"stablehlo.real {x} : ({t}) -> {pt}")
            im = b.op(f"stablehlo.imag {y} : ({t}) -> {pt}")
            b.result(re_, n, part, None)
            b.result(im, n, part, None)
            b.result(b.op(f"stablehlo.complex {re_}, {im} : {t}"), n, e, None)
            expected.append(lambda a: Output("real", np.real(a[0])))
            expected.append(lambda a: Output("imag", np.imag(a[1])))
            expected.append(lambda a: Output("complex", (np.real(a[0]) + 1j * np.imag(a[1])).astype(e.dtype)))
        else:
            dst = ELEMENTS[o.arg]
            b.result(b.op(f"stablehlo.convert {x} : ({t}) -> {ttype(n, dst)}"), n, dst, None)
            expected.append(lambda a, dst=dst: Output(f"convert to {dst}", spec.convert(a[0], e, dst)))
    text = b.program([]).text

    def outputs(args: list[np.ndarray]) -> list[Output]:
        return [f(args) for f in expected]

    return text, outputs


def _binary(name: str, x, y, e: Element) -> Output:
    if e.cls == "b":
        return Output(name, spec.bool_binary(name, x, y))
    if e.cls in "iu":
        return Output(name, spec.int_binary(name, x, y, e))
    exact = e.cls != "c" or name in ("add", "subtract")
    return Output(name, spec.float_binary(name, x, y, e), exact=exact and name not in TOLERANT)


def _unary(name: str, x, e: Element) -> Output:
    if e.cls == "b":
        return Output(name, ~x)
    if e.cls in "iu":
        return Output(name, spec.int_unary(name, x, e))
    exact = name not in TOLERANT and not (e.cls == "c" and name not in ("negate",))
    return Output(name, spec.float_unary(name, x, e), exact=exact)


# -- values ---------------------------------------------------------------------------------------


def float_specials(e: Element) -> list[float]:
    """NaN, +-inf, +-0, the smallest subnormal and normal, the largest finite value, and values
    where rounding ties: what a conversion or an op most often gets wrong."""
    if e.cls == "c":
        e = ELEMENTS["f32" if e.bits == 64 else "f64"]
    info = __import__("ml_dtypes").finfo(e.dtype)
    tiny = float(info.smallest_subnormal) if hasattr(info, "smallest_subnormal") else float(info.tiny)
    values = [math.nan, math.inf, -math.inf, 0.0, -0.0, 1.0, -1.0, 0.5, 1.5, 2.5, -2.5,
              float(info.max), -float(info.max), float(info.tiny), tiny, -tiny, 3.0, 7.0]
    return values


def values(e: Element, n: int, *, small: bool = False) -> st.SearchStrategy[np.ndarray]:
    """Arrays of ``n`` values of ``e``. ``small`` keeps floats to small integers and halves (and the
    specials), so that sums and products are exact and the rules fix every bit."""
    if e.cls == "b":
        return st.lists(st.booleans(), min_size=n, max_size=n).map(lambda v: np.array(v, bool))
    if e.cls in "iu":
        lo, hi = e.int_range
        edge = st.sampled_from(sorted({lo, hi, 0, 1, lo + 1, hi - 1, -1 if e.cls == "i" else 2,
                                       e.bits - 1, e.bits, e.bits + 1}))
        ints = st.integers(-4, 4).map(lambda v: max(lo, min(hi, v))) if small else st.integers(lo, hi)
        return st.lists(st.one_of(edge, ints), min_size=n, max_size=n).map(
            lambda v: np.array(v, np.int64 if e.cls == "i" else np.uint64).astype(e.dtype))
    specials = float_specials(e)
    if small:
        finite = st.sampled_from([-4.0, -3.0, -2.0, -1.0, -0.5, 0.0, -0.0, 0.5, 1.0, 2.0, 3.0, 4.0])
        scalar = st.one_of(finite, finite, finite, st.sampled_from([math.nan, math.inf, -math.inf]))
    elif e.narrow:
        # Every bit pattern of the type is a candidate: NaNs, subnormals and all.
        width = e.dtype.itemsize
        scalar = st.integers(0, (1 << (8 * width)) - 1).map(
            lambda u: float(np.array([u], f"u{width}").view(e.dtype)[0]))
        scalar = st.one_of(st.sampled_from(specials), scalar)
    else:
        width = e.bits
        scalar = st.one_of(st.sampled_from(specials), st.floats(width=width), st.floats(-100, 100, width=width))
    if e.cls == "c":
        if small:
            pair = st.tuples(finite, finite)
        else:
            part = st.floats(-1e3, 1e3, width=32 if e.bits == 64 else 64)
            pair = st.tuples(st.one_of(part, st.sampled_from([0.0, -0.0, 1.0])), st.one_of(part, st.sampled_from([0.0, -0.0])))
        return st.lists(pair, min_size=n, max_size=n).map(
            lambda v: np.array([complex(a, b) for a, b in v], e.dtype))
    return st.lists(scalar, min_size=n, max_size=n).map(lambda v: _as(v, e))


def _as(v: list[float], e: Element) -> np.ndarray:
    with np.errstate(all="ignore"):
        return np.array(v, np.float64).astype(e.dtype)


def array_of(e: Element, shape: tuple[int, ...], *, small: bool = False) -> st.SearchStrategy[np.ndarray]:
    n = math.prod(shape)
    return values(e, n, small=small).map(lambda a: a.reshape(shape))


#: Shapes of the elementwise programs: 0-d, zero-size, size-1 and odd sizes.
EW_SHAPES = ((), (0,), (1,), (7,), (2, 3), (1, 5, 1), (3, 0), (16,))


# -- the structural family ---------------------------------------------------------------------------

DIMS = (0, 1, 2, 3, 5)
MAX_SIZE = 48


@dataclass
class Val:
    """A value of the program under construction, with what the rules say it holds."""

    name: str
    e: Element
    array: np.ndarray

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.array.shape)

    @property
    def t(self) -> str:
        return ttype(self.shape, self.e)


def _shapes(draw, rank_max: int = 3) -> tuple[int, ...]:
    rank = draw(st.integers(0, rank_max))
    shape = tuple(draw(st.sampled_from(DIMS)) for _ in range(rank))
    while math.prod(shape) > MAX_SIZE:
        shape = shape[:-1]
    return shape


def _record(b: Builder, v: Val, label: str) -> Val:
    b.result(v.name, v.shape, v.e, Output(label, v.array))
    return v


def _index_const(b: Builder, value: int, e: Element) -> str:
    return constant(b, value, e)


def _op_broadcast(draw, b: Builder, v: Val) -> Val:
    extra = draw(st.lists(st.sampled_from((1, 2, 3)), max_size=2))
    rank = len(v.shape) + len(extra)
    dims = sorted(draw(st.permutations(range(rank)))[: len(v.shape)])
    out = [0] * rank
    it = iter(extra)
    for d in range(rank):
        out[d] = v.shape[dims.index(d)] if d in dims else next(it)
    # A size-1 operand dimension may stretch.
    for k, d in enumerate(dims):
        if v.shape[k] == 1 and draw(st.booleans()):
            out[d] = draw(st.sampled_from((1, 2, 3)))
    if math.prod(out) > 4 * MAX_SIZE:
        return v
    src = v.array.reshape([v.shape[dims.index(d)] if d in dims else 1 for d in range(rank)])
    array = np.broadcast_to(src, out).copy()
    name = b.op(f"stablehlo.broadcast_in_dim {v.name}, dims = {list(dims)} : ({v.t}) -> {ttype(out, v.e)}")
    return _record(b, Val(name, v.e, array), f"broadcast_in_dim {list(dims)} to {out}")


def _op_reshape(draw, b: Builder, v: Val) -> Val:
    size = math.prod(v.shape)
    if size == 0:
        shape = tuple(draw(st.lists(st.sampled_from((0, 1, 2)), min_size=1, max_size=3)))
        if 0 not in shape:
            shape = shape + (0,)
    else:
        factors, n = [], size
        for p in (2, 3, 5, 7, 11, 13, 17, 19, 23, 29, 31, 37, 41, 43, 47):
            while n % p == 0:
                factors.append(p)
                n //= p
        if n > 1:
            factors.append(n)
        factors = draw(st.permutations(factors)) if factors else []
        cut = sorted(draw(st.lists(st.integers(0, len(factors)), max_size=3)))
        shape, last = [], 0
        for c in cut + [len(factors)]:
            shape.append(math.prod(factors[last:c]))
            last = c
        shape = tuple(shape)
    name = b.op(f"stablehlo.reshape {v.name} : ({v.t}) -> {ttype(shape, v.e)}")
    return _record(b, Val(name, v.e, v.array.reshape(shape)), f"reshape to {list(shape)}")


def _op_transpose(draw, b: Builder, v: Val) -> Val:
    perm = list(draw(st.permutations(range(len(v.shape)))))
    array = np.transpose(v.array, perm)
    name = b.op(f"stablehlo.transpose {v.name}, dims = {perm} : ({v.t}) -> {ttype(array.shape, v.e)}")
    return _record(b, Val(name, v.e, array), f"transpose {perm}")


def _op_slice(draw, b: Builder, v: Val) -> Val:
    starts, limits, strides = [], [], []
    for n in v.shape:
        s = draw(st.integers(0, n))
        lim = draw(st.integers(s, n))
        starts.append(s)
        limits.append(lim)
        strides.append(draw(st.integers(1, 3)))
    array = v.array[tuple(slice(s, lim, k) for s, lim, k in zip(starts, limits, strides))]
    name = b.op(f"stablehlo.slice {v.name} [{', '.join(f'{s}:{lim}:{k}' for s, lim, k in zip(starts, limits, strides))}]"
                f" : ({v.t}) -> {ttype(array.shape, v.e)}")
    return _record(b, Val(name, v.e, array), f"slice {starts}:{limits}:{strides}")


def _op_dynamic_slice(draw, b: Builder, v: Val) -> Val:
    index_e = ELEMENTS[draw(st.sampled_from(("i32", "i64", "ui32", "i8")))]
    sizes = [draw(st.integers(0, n)) for n in v.shape]
    lo, hi = index_e.int_range
    starts = [draw(st.one_of(st.integers(max(lo, -3), n + 2), st.sampled_from((lo, hi)))) for n in v.shape]
    names = [_index_const(b, s, index_e) for s in starts]
    clamped = [min(max(s, 0), n - k) for s, n, k in zip(starts, v.shape, sizes)]
    array = v.array[tuple(slice(c, c + k) for c, k in zip(clamped, sizes))]
    operands = ", ".join([v.name, *names])
    types = ", ".join([v.t, *[ttype((), index_e)] * len(names)])
    sizes_attr = f"array<i64: {', '.join(map(str, sizes))}>" if sizes else "array<i64>"
    name = b.op(f'"stablehlo.dynamic_slice"({operands}) <{{slice_sizes = {sizes_attr}}}> '
                f": ({types}) -> {ttype(array.shape, v.e)}")
    return _record(b, Val(name, v.e, array), f"dynamic_slice at {starts} ({index_e}) size {sizes}")


def _op_pad(draw, b: Builder, v: Val) -> Val:
    lows = [draw(st.integers(-min(n, 2), 2)) for n in v.shape]
    interiors = [draw(st.integers(0, 2)) for n in v.shape]
    highs = []
    for n, lo, it in zip(v.shape, lows, interiors):
        base = n + max(n - 1, 0) * it
        highs.append(draw(st.integers(-min(base + lo, 2) if base + lo > 0 else 0, 2)))
    value = draw(values(v.e, 1, small=True))[0]
    pad_name = constant(b, value, v.e)
    array = _pad(v.array, lows, highs, interiors, np.asarray(value, v.e.dtype))
    if math.prod(array.shape) > 4 * MAX_SIZE:
        return v
    name = b.op(f"stablehlo.pad {v.name}, {pad_name}, low = {lows}, high = {highs}, interior = {interiors} "
                f": ({v.t}, {ttype((), v.e)}) -> {ttype(array.shape, v.e)}")
    return _record(b, Val(name, v.e, array), f"pad low {lows} high {highs} interior {interiors}")


def _pad(x: np.ndarray, lows, highs, interiors, value) -> np.ndarray:
    shape = [n + max(n - 1, 0) * it for n, it in zip(x.shape, interiors)]
    spread = np.full(shape, value, x.dtype)
    spread[tuple(slice(None, None, it + 1) for it in interiors)] = x
    full = np.full([s + max(lo, 0) + max(hi, 0) for s, lo, hi in zip(shape, lows, highs)], value, x.dtype)
    full[tuple(slice(max(lo, 0), max(lo, 0) + s) for s, lo in zip(shape, lows))] = spread
    return full[tuple(slice(-min(lo, 0), full.shape[d] + min(hi, 0)) for d, (lo, hi) in enumerate(zip(lows, highs)))]


def _op_concatenate(draw, b: Builder, v: Val) -> Val:
    if not v.shape:
        return v
    dim = draw(st.integers(0, len(v.shape) - 1))
    times = draw(st.integers(1, 3))
    array = np.concatenate([v.array] * times, axis=dim)
    operands = ", ".join([v.name] * times)
    name = b.op(f"stablehlo.concatenate {operands}, dim = {dim} : ({', '.join([v.t] * times)}) -> {ttype(array.shape, v.e)}")
    return _record(b, Val(name, v.e, array), f"concatenate x{times} along {dim}")


def _op_reduce(draw, b: Builder, v: Val) -> Val:
    kind = draw(st.sampled_from(spec.reducers_for(v.e)))
    rank = len(v.shape)
    dims = sorted(draw(st.sets(st.integers(0, rank - 1), max_size=rank))) if rank else []
    init = spec.identity(kind, v.e)
    init_name = constant(b, init, v.e)
    array = spec.reduce(v.array, dims, kind, init, v.e)
    name = b.op(f"stablehlo.reduce({v.name} init: {init_name}) applies stablehlo.{kind} across dimensions = {dims} "
                f": ({v.t}, {ttype((), v.e)}) -> {ttype(array.shape, v.e)}")
    return _record(b, Val(name, v.e, array), f"reduce {kind} over {dims}")


def _op_dot_general(draw, b: Builder, v: Val) -> Val:
    if v.e.cls == "b" or not v.shape:
        return v
    rank = len(v.shape)
    dims = list(draw(st.permutations(range(rank))))
    nb = draw(st.integers(0, rank))
    batch = sorted(dims[:nb])
    contract = sorted(dims[nb: nb + draw(st.integers(0, rank - nb))])
    free = [d for d in range(rank) if d not in batch + contract]
    out_shape = [v.shape[d] for d in batch] + [v.shape[d] for d in free] * 2
    if math.prod(out_shape) > 4 * MAX_SIZE or math.prod(v.shape[d] for d in contract) > 16:
        return v
    array = spec.dot_general(v.array, v.array, batch, batch, contract, contract, v.e)
    dn = (f"#stablehlo.dot<lhs_batching_dimensions = {batch}, rhs_batching_dimensions = {batch}, "
          f"lhs_contracting_dimensions = {contract}, rhs_contracting_dimensions = {contract}>")
    name = b.op(f'"stablehlo.dot_general"({v.name}, {v.name}) <{{dot_dimension_numbers = {dn}}}> '
                f": ({v.t}, {v.t}) -> {ttype(array.shape, v.e)}")
    return _record(b, Val(name, v.e, array), f"dot_general batch {batch} contract {contract}")


def _op_iota(draw, b: Builder, v: Val) -> Val:
    if v.e.cls == "b" or not v.shape:
        return v
    dim = draw(st.integers(0, len(v.shape) - 1))
    index = np.arange(v.shape[dim]).reshape([-1 if d == dim else 1 for d in range(len(v.shape))])
    ints = np.broadcast_to(index, v.shape)
    array = spec.convert(ints.astype(np.int64), ELEMENTS["i64"], v.e)
    name = b.op(f"stablehlo.iota dim = {dim} : {v.t}")
    _record(b, Val(name, v.e, array), f"iota {dim}")
    # ... and combined with the value, so iota's type and layout meet real arithmetic.
    combined = _elementwise_with(b, "add" if v.e.cls != "b" else "or", v, Val(name, v.e, array))
    return combined


def _elementwise_with(b: Builder, op: str, x: Val, y: Val) -> Val:
    if x.e.cls in "iu":
        array = spec.int_binary(op, x.array, y.array, x.e)
    elif x.e.cls == "b":
        array = spec.bool_binary(op, x.array, y.array)
    else:
        array = spec.float_binary(op, x.array, y.array, x.e)
    name = b.op(f"stablehlo.{op} {x.name}, {y.name} : {x.t}")
    return _record(b, Val(name, x.e, array), f"{op} of {x.name} and {y.name}")


def _op_elementwise(draw, b: Builder, v: Val) -> Val:
    ops = {"b": ("and", "or", "xor"), "i": ("add", "multiply", "maximum", "minimum"),
           "u": ("add", "multiply", "maximum", "minimum"), "f": ("add", "multiply", "maximum", "minimum", "subtract"),
           "c": ("add", "multiply", "subtract")}[v.e.cls]
    return _elementwise_with(b, draw(st.sampled_from(ops)), v, v)


def _op_scale(draw, b: Builder, v: Val) -> Val:
    """``v`` divided (or multiplied) by a broadcast scalar: a loop-invariant operand."""
    if v.e.cls not in "fc":
        return v
    value = draw(st.sampled_from((3.0, 0.3, -7.0, 1.1, 0.0)))
    scalar = constant(b, value, v.e)
    wide = b.op(f"stablehlo.broadcast_in_dim {scalar}, dims = [] : ({ttype((), v.e)}) -> {v.t}")
    op = draw(st.sampled_from(("divide", "multiply")))
    const = np.broadcast_to(np.asarray(value).astype(v.e.dtype), v.shape)
    array = spec.float_binary(op, v.array, const, v.e)
    name = b.op(f"stablehlo.{op} {v.name}, {wide} : {v.t}")
    return _record(b, Val(name, v.e, array), f"{op} by broadcast {value}")


def _op_convert(draw, b: Builder, v: Val, allowed: list[str] | None = None) -> Val:
    dst = ELEMENTS[draw(st.sampled_from(allowed or sorted(ELEMENTS)))]
    array = spec.convert(v.array, v.e, dst)
    name = b.op(f"stablehlo.convert {v.name} : ({v.t}) -> {ttype(v.shape, dst)}")
    return _record(b, Val(name, dst, array), f"convert to {dst}")


STRUCTURAL_OPS = {
    "broadcast_in_dim": _op_broadcast, "reshape": _op_reshape, "transpose": _op_transpose, "slice": _op_slice,
    "dynamic_slice": _op_dynamic_slice, "pad": _op_pad, "concatenate": _op_concatenate, "reduce": _op_reduce,
    "dot_general": _op_dot_general, "iota": _op_iota, "elementwise": _op_elementwise, "convert": _op_convert,
    "scale": _op_scale,
}


@st.composite
def structural_programs(draw, max_ops: int = 5, elements: list[str] | None = None) -> Program:
    """A chain of shape ops on one argument of a drawn type and shape; every step is a result.
    Values are small integers and halves (with NaN and +-inf), so sums and products are exact.
    ``elements`` limits the element types (those of the argument and of converts)."""
    allowed = sorted(elements or ELEMENTS)
    e = ELEMENTS[draw(st.sampled_from(allowed))]
    shape = _shapes(draw)
    b = Builder()
    arg = draw(array_of(e, shape, small=True))
    v = Val(b.param(shape, e), e, arg)
    for _ in range(draw(st.integers(1, max_ops))):
        op = draw(st.sampled_from(sorted(STRUCTURAL_OPS)))
        if op == "convert":
            v = _op_convert(draw, b, v, allowed)
        else:
            v = STRUCTURAL_OPS[op](draw, b, v)
    if not b.results:
        _record(b, v, "the argument")
    return b.program([arg])
