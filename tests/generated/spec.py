"""StableHLO's rules, written down independently of both backends: the oracle of the generated tests.

Every function takes numpy arrays of the operands' element types and returns the array the spec
(and, where the spec leaves a choice, XLA) says the op produces. Integers are computed with
Python integers and wrapped to their width; floats are computed exactly where that is cheap
(float64 is exact for +, -, *, / and sqrt of float32 operands) and rounded once to float32 and
once more to a narrow type, which is how XLA:CPU computes bf16/f16/f8: in float32, rounded per op.

``EXACT`` names the ops whose every bit the rules fix; the others (transcendental functions,
complex multiplication and division) are compared with a tolerance by the tests.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Sequence

import ml_dtypes
import numpy as np

# -- element types ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Element:
    """One StableHLO element type: its MLIR spelling, numpy dtype and class."""

    mlir: str
    dtype: np.dtype
    #: "b" bool, "i" signed, "u" unsigned, "f" float, "c" complex
    cls: str
    bits: int

    @property
    def narrow(self) -> bool:
        """Stored as ml_dtypes bits or float16: computed in float32 and rounded per op."""
        return self.cls == "f" and self.bits < 32

    @property
    def int_range(self) -> tuple[int, int]:
        if self.cls == "u":
            return 0, (1 << self.bits) - 1
        return -(1 << (self.bits - 1)), (1 << (self.bits - 1)) - 1

    def __str__(self) -> str:
        return self.mlir


def _element(mlir: str, dtype, cls: str, bits: int) -> Element:
    return Element(mlir, np.dtype(dtype), cls, bits)


ELEMENTS: dict[str, Element] = {e.mlir: e for e in [
    _element("i1", np.bool_, "b", 1),
    *(_element(f"i{w}", f"int{w}", "i", w) for w in (8, 16, 32, 64)),
    *(_element(f"ui{w}", f"uint{w}", "u", w) for w in (8, 16, 32, 64)),
    _element("i4", ml_dtypes.int4, "i", 4), _element("ui4", ml_dtypes.uint4, "u", 4),
    _element("i2", ml_dtypes.int2, "i", 2), _element("ui2", ml_dtypes.uint2, "u", 2),
    _element("f16", np.float16, "f", 16), _element("bf16", ml_dtypes.bfloat16, "f", 16),
    _element("f32", np.float32, "f", 32), _element("f64", np.float64, "f", 64),
    *(_element(m, getattr(ml_dtypes, n), "f", 8) for m, n in [
        ("f8E5M2", "float8_e5m2"), ("f8E4M3FN", "float8_e4m3fn"), ("f8E4M3", "float8_e4m3"),
        ("f8E3M4", "float8_e3m4"), ("f8E4M3FNUZ", "float8_e4m3fnuz"), ("f8E5M2FNUZ", "float8_e5m2fnuz"),
        ("f8E4M3B11FNUZ", "float8_e4m3b11fnuz"), ("f8E8M0FNU", "float8_e8m0fnu")]),
    _element("f4E2M1FN", ml_dtypes.float4_e2m1fn, "f", 4),
    _element("complex<f32>", np.complex64, "c", 64), _element("complex<f64>", np.complex128, "c", 128),
]}


def element_of(dtype: np.dtype) -> Element:
    for e in ELEMENTS.values():
        if e.dtype == dtype:
            return e
    raise KeyError(dtype)


# -- helpers ------------------------------------------------------------------------------------


def ints(a: np.ndarray) -> list[int]:
    return [int(v) for v in np.asarray(a).reshape(-1).astype(np.int64 if a.dtype != np.uint64 else np.uint64)]


def from_ints(values: Sequence[int], e: Element, shape) -> np.ndarray:
    """Python integers wrapped to ``e``'s width (two's complement)."""
    lo, hi = e.int_range
    span = 1 << e.bits
    wrapped = [((v - lo) % span) + lo for v in values]
    return np.array(wrapped, dtype=np.int64 if e.cls == "i" else np.uint64).astype(e.dtype).reshape(shape)


def wide(a: np.ndarray) -> np.ndarray:
    """Float operands as float64 (complex as complex128): exact."""
    return np.asarray(a).astype(np.complex128 if a.dtype.kind == "c" else np.float64)


def round_float(values: np.ndarray, e: Element) -> np.ndarray:
    """An exact-or-float64 result rounded as XLA:CPU rounds ``e``: to float32 first for the types
    narrower than float32 (they are computed in float32), then to ``e``."""
    with np.errstate(all="ignore"):
        v = np.asarray(values)
        if e.cls == "c":
            return v.astype(e.dtype)
        if e.bits <= 32:
            v = v.astype(np.float32)
        return v.astype(e.dtype)


def _per_element(fn: Callable[..., int], *arrays: np.ndarray, e: Element) -> np.ndarray:
    shape = np.shape(arrays[0])
    lists = [ints(a) for a in arrays]
    return from_ints([fn(*vals) for vals in zip(*lists)], e, shape)


def _trunc_div(x: int, y: int) -> int:
    q = abs(x) // abs(y)
    return q if (x < 0) == (y < 0) else -q


# -- integer ops (XLA's rules where the spec leaves them open) ----------------------------------------


def int_binary(name: str, x: np.ndarray, y: np.ndarray, e: Element) -> np.ndarray:
    lo, hi = e.int_range
    w = e.bits

    def unsigned(v: int) -> int:
        return v % (1 << w)

    def div(a, b):
        if b == 0:
            return -1  # all bits set: UINT_MAX for unsigned types
        if e.cls == "i" and a == lo and b == -1:
            return lo
        return _trunc_div(a, b)

    def rem(a, b):
        if b == 0:
            return a
        if e.cls == "i" and a == lo and b == -1:
            return 0
        return a - _trunc_div(a, b) * b

    def power(a, b):
        if b < 0:
            return 1 if a == 1 else (1 if b % 2 == 0 else -1) if a == -1 else 0
        return pow(a, b, 1 << w)

    def shl(a, b):
        return 0 if unsigned(b) >= w else a << unsigned(b)

    def shr_logical(a, b):
        return 0 if unsigned(b) >= w else unsigned(a) >> unsigned(b)

    def shr_arith(a, b):
        # On the bit pattern, filling with its top bit (unsigned types too: XLA's AShr).
        s = unsigned(b)
        signed = unsigned(a) - (1 << w) if unsigned(a) >= 1 << (w - 1) else unsigned(a)
        return (signed >> (w - 1)) if s >= w else signed >> s

    table = {
        "add": lambda a, b: a + b, "subtract": lambda a, b: a - b, "multiply": lambda a, b: a * b,
        "divide": div, "remainder": rem, "maximum": max, "minimum": min, "power": power,
        "and": lambda a, b: a & b, "or": lambda a, b: a | b, "xor": lambda a, b: a ^ b,
        "shift_left": shl, "shift_right_logical": shr_logical, "shift_right_arithmetic": shr_arith,
    }
    return _per_element(table[name], x, y, e=e)


def int_unary(name: str, x: np.ndarray, e: Element) -> np.ndarray:
    w = e.bits

    def popcnt(a):
        return bin(a % (1 << w)).count("1")

    def clz(a):
        return w - (a % (1 << w)).bit_length()

    table = {
        "negate": lambda a: -a, "abs": abs, "sign": lambda a: (a > 0) - (a < 0), "not": lambda a: ~a,
        "popcnt": popcnt, "count_leading_zeros": clz,
    }
    return _per_element(table[name], x, e=e)


def bool_binary(name: str, x: np.ndarray, y: np.ndarray) -> np.ndarray:
    table = {"add": np.logical_or, "multiply": np.logical_and, "maximum": np.logical_or,
             "minimum": np.logical_and, "and": np.logical_and, "or": np.logical_or, "xor": np.logical_xor}
    return table[name](x, y)


# -- float ops ------------------------------------------------------------------------------------


def _round_afz(v):
    """C's round: half away from zero, round(-0.4) is -0. The fraction v - trunc(v) is exact,
    where floor(|v| + 0.5) would round the sum first (2**52 + 1 to 2**52 + 2)."""
    t = np.trunc(v)
    with np.errstate(invalid="ignore"):
        return np.where(np.abs(v - t) >= 0.5, t + np.copysign(1.0, v), t)


def ieee_maximum(a, b):
    """IEEE 754-2019 maximum (the spec's rule for floats): NaN propagates, and -0 < +0."""
    both_zero = (a == 0) & (b == 0)
    return np.where(both_zero, np.where(np.signbit(a) & np.signbit(b), -0.0, 0.0), np.maximum(a, b))


def ieee_minimum(a, b):
    both_zero = (a == 0) & (b == 0)
    return np.where(both_zero, np.where(np.signbit(a) | np.signbit(b), -0.0, 0.0), np.minimum(a, b))


def _sign(v):
    return np.where(v == 0, v, np.sign(v))


def float_unary(name: str, x: np.ndarray, e: Element) -> np.ndarray:
    v = wide(x)
    fns = {
        "negate": np.negative, "abs": np.abs, "sign": _sign, "floor": np.floor, "ceil": np.ceil,
        "round_nearest_even": np.rint, "round_nearest_afz": _round_afz, "sqrt": np.sqrt,
        "rsqrt": lambda t: 1.0 / np.sqrt(t), "exponential": np.exp, "log": np.log, "tanh": np.tanh,
        "exponential_minus_one": np.expm1, "log_plus_one": np.log1p,
        "logistic": lambda t: 0.5 * (1.0 + np.tanh(0.5 * t)), "sine": np.sin, "cosine": np.cos,
        "cbrt": np.cbrt,
    }
    if e.cls == "c":
        fns["sign"] = lambda z: np.where(np.abs(z) == 0, 0, z / np.where(np.abs(z) == 0, 1, np.abs(z)))
        fns["logistic"] = lambda z: 1.0 / (1.0 + np.exp(-z))
    with np.errstate(all="ignore"):
        out = fns[name](v)
    if name == "abs" and e.cls == "c":
        return out.astype(np.float32 if e.bits == 64 else np.float64)
    return round_float(out, e)


def float_binary(name: str, x: np.ndarray, y: np.ndarray, e: Element) -> np.ndarray:
    a, b = wide(x), wide(y)
    fns = {
        "add": np.add, "subtract": np.subtract, "multiply": np.multiply, "divide": np.divide,
        "maximum": ieee_maximum, "minimum": ieee_minimum, "remainder": np.fmod, "power": np.power,
        "atan2": np.arctan2,
    }
    with np.errstate(all="ignore"):
        out = fns[name](a, b)
    return round_float(out, e)


def total_order_key(x: np.ndarray) -> np.ndarray:
    """Integers ordered as TOTALORDER orders floats: -NaN < -inf < ... < -0 < +0 < ... < +NaN."""
    f = wide(x)
    bits = f.view(np.int64)
    return np.where(bits < 0, np.int64(-(2 ** 63)) - bits - 1, bits).astype(object)


def compare(direction: str, x: np.ndarray, y: np.ndarray, e: Element, total: bool = False) -> np.ndarray:
    import operator

    op = {"EQ": operator.eq, "NE": operator.ne, "LT": operator.lt, "LE": operator.le,
          "GT": operator.gt, "GE": operator.ge}[direction]
    if e.cls in "iub":
        return np.array([op(a, b) for a, b in zip(ints(x), ints(y))], dtype=bool).reshape(np.shape(x))
    if total:
        kx, ky = total_order_key(x), total_order_key(y)
        return np.array([op(a, b) for a, b in zip(kx.reshape(-1), ky.reshape(-1))], bool).reshape(np.shape(x))
    with np.errstate(all="ignore"):
        return op(wide(x), wide(y))


def select(p: np.ndarray, x: np.ndarray, y: np.ndarray) -> np.ndarray:
    return np.where(p, x, y)


def clamp(lo: np.ndarray, x: np.ndarray, hi: np.ndarray, e: Element) -> np.ndarray:
    if e.cls == "b":
        return (x | lo) & hi
    if e.cls in "iu":
        return _per_element(lambda a, b, c: min(max(b, a), c), lo, x, hi, e=e)
    return float_binary("minimum", float_binary("maximum", x, lo, e), hi, e)


# -- convert --------------------------------------------------------------------------------------


def convert(x: np.ndarray, src: Element, dst: Element) -> np.ndarray:
    """StableHLO convert, with XLA's choices where the spec is open: float -> integer truncates
    toward zero and saturates (NaN -> 0); complex -> real takes the real part; anything -> bool is
    ``x != 0`` (NaN -> true); integer -> float and float -> float round to nearest even, once."""
    shape = np.shape(x)
    if src.cls == "c" and dst.cls != "c":
        if dst.cls == "b":
            return np.asarray(x) != 0
        part = ELEMENTS["f64" if src.bits == 128 else "f32"]
        return convert(np.real(x).astype(part.dtype), part, dst)
    if dst.cls == "b":
        if src.cls in "iub":
            return np.array([v != 0 for v in ints(x)], bool).reshape(shape)
        return wide(x) != 0
    if dst.cls == "c":
        if src.cls in "iub":
            return np.array(ints(x), dtype=object).astype(np.float64).reshape(shape).astype(dst.dtype)
        return wide(x).astype(dst.dtype)
    if src.cls in "iub":
        values = ints(x)
        if dst.cls in "iu":
            return from_ints(values, dst, shape)
        return _int_to_float(values, dst).reshape(shape)
    # from a float
    f = wide(x)
    if dst.cls in "iu":
        lo, hi = dst.int_range
        out = []
        for v in f.reshape(-1):
            if math.isnan(v):
                out.append(0)
            elif v >= hi:
                out.append(hi)
            elif v <= lo:
                out.append(lo)
            else:
                out.append(int(math.trunc(v)))
        return from_ints(out, dst, shape)
    return _float_to_float(np.asarray(x), dst)


def _int_to_float(values: list[int], dst: Element) -> np.ndarray:
    """Round integers to ``dst`` to nearest even: Python's int -> float64 is correctly rounded, and
    exact for every value below 2**53 (so one rounding to a narrower type follows)."""
    if dst.bits == 32:
        big = np.array(values, dtype=np.uint64 if any(v >= 2 ** 63 for v in values) else np.int64)
        return big.astype(np.float32)  # numpy's int64 -> float32 cast rounds once
    return np.array([float(v) for v in values], np.float64).astype(dst.dtype)


def _float_to_float(x: np.ndarray, dst: Element) -> np.ndarray:
    """One rounding to nearest even: float64 holds any narrower float exactly, and ml_dtypes and
    numpy round from float64 directly."""
    with np.errstate(all="ignore"):
        return wide(x).astype(dst.dtype)


# -- reductions -------------------------------------------------------------------------------------

REDUCERS = ("add", "multiply", "maximum", "minimum", "and", "or", "xor")


def reducers_for(e: Element) -> tuple[str, ...]:
    if e.cls == "b":
        return ("and", "or", "xor", "maximum", "minimum", "add", "multiply")
    if e.cls in "iu":
        return REDUCERS
    if e.cls == "c":
        return ("add", "multiply")
    return ("add", "multiply", "maximum", "minimum")


def identity(name: str, e: Element):
    """The init value a reduction starts from (JAX's choice)."""
    if name in ("add", "or", "xor"):
        return 0
    if name in ("multiply",):
        return 1
    if name == "and":  # all bits set
        return True if e.cls == "b" else (-1 if e.cls == "i" else e.int_range[1])
    if e.cls == "b":
        return name == "minimum"
    if e.cls in "iu":
        lo, hi = e.int_range
        return lo if name == "maximum" else hi
    with np.errstate(all="ignore"):
        has_inf = bool(np.isinf(np.array([math.inf]).astype(e.dtype).astype(np.float64))[0]) if e.cls == "f" else True
    if not has_inf:  # the 8-bit floats without infinities start from their extreme finite value
        big = float(ml_dtypes.finfo(e.dtype).max)
        return -big if name == "maximum" else big
    return -math.inf if name == "maximum" else math.inf


def reduce(x: np.ndarray, dims: Sequence[int], name: str, init, e: Element) -> np.ndarray:
    """Reduce over ``dims`` from ``init``. Floats accumulate exactly (float64; the tests draw values
    whose sums are exact) and are rounded once, as XLA accumulates bf16/f16 in float32."""
    keep = [d for d in range(x.ndim) if d not in dims]
    moved = np.transpose(np.asarray(x), keep + list(dims))
    out_shape = tuple(x.shape[d] for d in keep)
    flat = moved.reshape(out_shape + (math.prod(x.shape[d] for d in dims),))
    if e.cls in "iu":
        rows = flat.reshape(math.prod(out_shape), flat.shape[-1])
        out = []
        for row in rows:
            acc = init
            for v in ints(row):
                acc = _int_step(name, acc, v, e)
            out.append(acc)
        return from_ints(out, e, out_shape)
    if e.cls == "b":
        fn = {"and": np.logical_and, "minimum": np.logical_and, "multiply": np.logical_and,
              "or": np.logical_or, "maximum": np.logical_or, "add": np.logical_or, "xor": np.logical_xor}[name]
        return fn.reduce(np.concatenate([flat, np.full(out_shape + (1,), bool(init))], axis=-1), axis=-1)
    v = wide(flat)
    # The init as the program holds it, in the element type: an identity the type cannot hold
    # (0 in f8E8M0FNU, which has no zero) is what the program starts from, NaN there.
    with np.errstate(all="ignore"):
        init = wide(np.asarray(init, np.complex128 if e.cls == "c" else np.float64).astype(e.dtype))
    init_arr = np.full(out_shape + (1,), init, dtype=v.dtype)
    v = np.concatenate([init_arr, v], axis=-1)
    with np.errstate(all="ignore"):
        if name == "add":
            out = v.sum(axis=-1)
        elif name == "multiply":
            out = v.prod(axis=-1)
        elif name == "maximum":
            out = _fold(ieee_maximum, v)
        else:
            out = _fold(ieee_minimum, v)
    return round_float(out, e)


def _fold(fn, v: np.ndarray) -> np.ndarray:
    out = v[..., 0]
    for k in range(1, v.shape[-1]):
        out = fn(out, v[..., k])
    return out


def _int_step(name: str, acc: int, v: int, e: Element) -> int:
    lo, hi = e.int_range
    r = {"add": acc + v, "multiply": acc * v, "maximum": max(acc, v), "minimum": min(acc, v),
         "and": acc & v, "or": acc | v, "xor": acc ^ v}[name]
    return ((r - lo) % (1 << e.bits)) + lo


def dot_general(lhs: np.ndarray, rhs: np.ndarray, lb, rb, lc, rc, e: Element) -> np.ndarray:
    """Batch dims, then lhs free dims, then rhs free dims; integers wrap, floats are exact sums
    rounded once (the tests draw values whose dot products are exact)."""
    lf = [d for d in range(lhs.ndim) if d not in (*lb, *lc)]
    rf = [d for d in range(rhs.ndim) if d not in (*rb, *rc)]
    L = np.transpose(lhs, [*lb, *lf, *lc])
    R = np.transpose(rhs, [*rb, *rc, *rf])
    B = [lhs.shape[d] for d in lb]
    M = [lhs.shape[d] for d in lf]
    N = [rhs.shape[d] for d in rf]
    K = math.prod(lhs.shape[d] for d in lc)
    Lm = L.reshape(math.prod(B), math.prod(M), K)
    Rm = R.reshape(math.prod(B), K, math.prod(N))
    shape = (*B, *M, *N)
    if e.cls in "iu":
        Lo = np.array(ints(Lm), dtype=object).reshape(Lm.shape) if Lm.size else np.zeros(Lm.shape, object)
        Ro = np.array(ints(Rm), dtype=object).reshape(Rm.shape) if Rm.size else np.zeros(Rm.shape, object)
        out = np.zeros((Lm.shape[0], Lm.shape[1], Rm.shape[2]), dtype=object)
        for b in range(out.shape[0]):
            for i in range(out.shape[1]):
                for j in range(out.shape[2]):
                    out[b, i, j] = sum((Lo[b, i, k] * Ro[b, k, j] for k in range(K)), 0)
        return from_ints(list(out.reshape(-1)), e, shape)
    if e.cls == "b":
        out = np.einsum("bik,bkj->bij", Lm.astype(np.int64), Rm.astype(np.int64)) > 0
        return out.reshape(shape)
    with np.errstate(all="ignore"):
        out = np.einsum("bik,bkj->bij", wide(Lm), wide(Rm)) if K else np.zeros((Lm.shape[0], Lm.shape[1], Rm.shape[2]))
    return round_float(out.reshape(shape), e)
