"""numerics: what each element type computes, checked value by value against StableHLO's rules.

Every program here is a straight line of elementwise ops whose results are single ops on the
arguments (or, for the rounding chains, on earlier results), so a wrong value names the op, the
type and the operands. The expected values are computed exactly in Python (integers modulo
2**bits) or in float64 and rounded once to the type, which for ``+ - * /`` of f16, bf16 and f32
operands is the correctly rounded result (float64 has more than twice their precision plus two
bits, so rounding twice is harmless). The programs are compiled with the options a framework
sends (:data:`~.._programs.FRAMEWORK_OPTION_OVERRIDES`).

Where the spec leaves a value to the implementation (integer division by zero, ``MIN / -1``),
only the absence of an error is demanded; every other lane of the same result is checked.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import ml_dtypes
import numpy as np
from numpy.typing import DTypeLike

from pjrt_hub.abi import ErrorCode, PjrtError

from .._case import Case, add_case, case, check, fail, skip
from .._context import PluginUnderTest, describe
from .._programs import elementwise, framework_options, tensor

#: Seconds a numerics case may take: its programs hold dozens of (op, type) pairs, and a compiler
#: that builds a kernel for each (numba) needs a while on a cold cache and a busy machine.
NUMERICS_TIMEOUT = 300.0

#: (PJRT name, MLIR name, numpy type) of every integer width.
INTEGERS: tuple[tuple[str, str, type], ...] = (
    ("S8", "i8", np.int8), ("S16", "i16", np.int16), ("S32", "i32", np.int32), ("S64", "i64", np.int64),
    ("U8", "ui8", np.uint8), ("U16", "ui16", np.uint16), ("U32", "ui32", np.uint32), ("U64", "ui64", np.uint64),
)
#: (PJRT name, MLIR name, numpy type) of the floating-point types checked here.
FLOATS: tuple[tuple[str, str, type], ...] = (
    ("F16", "f16", np.float16), ("BF16", "bf16", ml_dtypes.bfloat16), ("F32", "f32", np.float32),
    ("F64", "f64", np.float64),
)
#: The types NaN and signed zeros are checked in: the narrow ones, computed through another type
#: by every CPU backend, and f32 for IEEE-754 itself (f64 follows the same code paths; its
#: division is checked in float_division).
IEEE_FLOATS = FLOATS[:3]


def run_program(ctx: PluginUnderTest, name: str, arrays: Sequence[np.ndarray], steps: Sequence[tuple[str, tuple[int, ...]]],
                mlir: Sequence[str], what: str) -> list[np.ndarray]:
    """Compile the elementwise program (skip if the plugin lacks one of its ops) and run it."""
    params = [tensor(a.shape, t) for a, t in zip(arrays, mlir)]
    text = elementwise(name, params, steps)
    try:
        executable = ctx.compile(text, framework_options(), timeout=NUMERICS_TIMEOUT - 30.0)
    except PjrtError as exc:
        if exc.code is ErrorCode.UNIMPLEMENTED:
            skip(f"plugin {ctx.name} does not compile {what}: {describe(exc)}")
        raise
    got = ctx.run(executable, *arrays)
    check(len(got) == len(steps), f"{what}: {len(got)} results for a program of {len(steps)}")
    return got


def _bits(x: np.ndarray) -> np.ndarray:
    return x.view(f"u{x.dtype.itemsize}")


def _show(x: object) -> str:
    value = np.asarray(x)
    if value.dtype.kind in "iub":
        return str(value.item())
    number = float(value.astype(np.float64))
    if number == 0:
        return "-0.0" if np.signbit(number) else "0.0"
    return repr(number)


def compare(what: str, got: np.ndarray, expected: np.ndarray, operands: Sequence[np.ndarray], op: str,
            promise: str, *, lanes: np.ndarray | None = None) -> None:
    """Fail on the first lanes where ``got`` and ``expected`` differ: bit for bit, except that any
    NaN matches any NaN. ``lanes`` limits the comparison (None: every lane)."""
    check(got.dtype == expected.dtype and got.shape == expected.shape,
          f"{what}: the result is {got.dtype}{list(got.shape)}, expected {expected.dtype}{list(expected.shape)}")
    if expected.dtype.kind in "iub":
        bad = got != expected
    else:
        nan_got = np.isnan(got.astype(np.float64))
        nan_expected = np.isnan(expected.astype(np.float64))
        bad = (_bits(got) != _bits(expected)) & ~(nan_got & nan_expected)
    if lanes is not None:
        bad &= lanes
    if not bad.any():
        return
    shown = []
    for index in np.flatnonzero(bad)[:3]:
        args = ", ".join(_show(o.reshape(-1)[index]) for o in operands)
        shown.append(f"{op}({args}) gave {_show(got.reshape(-1)[index])}, expected {_show(expected.reshape(-1)[index])}")
    fail(f"{what}: {int(bad.sum())} of {bad.size} lanes wrong: {'; '.join(shown)}. PJRT promises StableHLO's "
         f"semantics: {promise}")


# -- integers -----------------------------------------------------------------------------------


def _wrapped(values: Sequence[int], dtype: type) -> np.ndarray:
    """Python integers reduced modulo 2**bits into ``dtype`` (two's complement)."""
    bits = np.dtype(dtype).itemsize * 8
    unsigned = [v % (1 << bits) for v in values]
    return np.array(unsigned, dtype=f"u{bits // 8}").view(dtype)


def _integer_operands(dtype: type) -> tuple[np.ndarray, np.ndarray]:
    info = np.iinfo(dtype)
    lo, hi = int(info.min), int(info.max)
    mid = 1 << (np.dtype(dtype).itemsize * 4)  # 2**(bits/2): its square is 2**bits
    a = [hi, lo, hi, lo, hi - 1, mid + 1, 3, lo + 1]
    b = [1, 1, hi, hi, 2, mid - 1, 5, hi]
    return np.array(a, dtype), np.array(b, dtype)


def _wraparound_case(pjrt: str, mlir: str, dtype: type) -> Case:
    def run(ctx: PluginUnderTest) -> None:
        a, b = _integer_operands(dtype)
        steps = [("add", (0, 1)), ("subtract", (0, 1)), ("multiply", (0, 1)), ("negate", (0,))]
        got = run_program(ctx, f"jit_wraparound_{mlir}", [a, b], steps, [mlir, mlir],
                          f"{pjrt} add/subtract/multiply/negate")
        ia, ib = [int(x) for x in a], [int(x) for x in b]
        expected = [_wrapped([x + y for x, y in zip(ia, ib)], dtype), _wrapped([x - y for x, y in zip(ia, ib)], dtype),
                    _wrapped([x * y for x, y in zip(ia, ib)], dtype), _wrapped([-x for x in ia], dtype)]
        for (op, operands), g, e in zip(steps, got, expected):
            compare(f"{pjrt} {op}", g, e, [a, b][:len(operands)], op,
                    f"{pjrt} arithmetic wraps around modulo 2**{np.dtype(dtype).itemsize * 8} (two's complement); "
                    "it neither saturates nor traps")

    return Case("numerics", f"integer_wraparound_{pjrt.lower()}",
                f"{pjrt} add, subtract, multiply and negate wrap around on overflow (two's complement), "
                "as StableHLO defines integer arithmetic.", run, timeout=NUMERICS_TIMEOUT)


for _pjrt, _mlir, _dtype in INTEGERS:
    add_case(_wraparound_case(_pjrt, _mlir, _dtype))


def _truncated_division(a: int, b: int) -> tuple[int, int]:
    quotient = abs(a) // abs(b)
    if (a < 0) != (b < 0):
        quotient = -quotient
    return quotient, a - quotient * b


@case("numerics", timeout=NUMERICS_TIMEOUT)
def integer_division(ctx: PluginUnderTest) -> None:
    """Integer divide truncates toward zero and remainder takes the dividend's sign, for every
    width; dividing by zero and MIN / -1 (values the spec leaves to the implementation) do not
    fail the execution."""
    arrays: list[np.ndarray] = []
    mlirs, steps, lanes = [], [], []
    for pjrt, mlir, dtype in INTEGERS:
        info = np.iinfo(dtype)
        if info.min < 0:
            a = [-7, 7, -7, 7, int(info.min), int(info.max), 0, 5, int(info.min), 3]
            b = [2, -2, -2, 2, 3, -4, 5, 0, -1, 7]
            defined = [True] * 7 + [False, False, True]
        else:
            a = [7, 200, int(info.max), 9, 5, 0, 1, 2, 3, int(info.max)]
            b = [2, 7, 2, 9, 0, 3, 1, 5, 6, 16]
            defined = [True] * 4 + [False] + [True] * 5
        base = len(arrays)
        arrays += [np.array(a, dtype), np.array(b, dtype)]
        mlirs += [mlir, mlir]
        steps += [("divide", (base, base + 1)), ("remainder", (base, base + 1))]
        lanes.append((pjrt, dtype, np.array(defined)))
    got = run_program(ctx, "jit_integer_division", arrays, steps, mlirs, "integer divide/remainder")
    for index, (pjrt, dtype, mask) in enumerate(lanes):
        lhs, rhs = arrays[2 * index], arrays[2 * index + 1]
        pairs = [_truncated_division(int(x), int(y)) if ok else (0, 0) for x, y, ok in zip(lhs, rhs, mask)]
        for offset, op in enumerate(("divide", "remainder")):
            expected = _wrapped([p[offset] for p in pairs], dtype)
            compare(f"{pjrt} {op}", got[2 * index + offset], expected, [lhs, rhs], op,
                    "integer divide truncates toward zero and remainder has the sign of the dividend "
                    "(C semantics), not Python's floor division", lanes=mask)


def _shifted(op: str, value: int, count: int, bits: int) -> int:
    """``op`` of the ``bits``-wide pattern ``value`` by ``count``, both read as unsigned: a count
    of the width or more shifts every bit out (a logical shift gives 0, an arithmetic one the
    sign bit everywhere)."""
    mask = (1 << bits) - 1
    value, count = value & mask, count & mask
    if op == "shift_left":
        return (value << count) & mask if count < bits else 0
    if op == "shift_right_logical":
        return value >> count if count < bits else 0
    signed = value - (1 << bits) if value >> (bits - 1) else value
    return (signed >> min(count, bits - 1)) & mask


@case("numerics", timeout=NUMERICS_TIMEOUT)
def shift_counts(ctx: PluginUnderTest) -> None:
    """shift_left, shift_right_logical and shift_right_arithmetic by every count from 0 to past
    the bit width, for every integer width: a count of the width or more (a negative one read
    as unsigned) shifts every bit out, giving 0 (or, shifting right arithmetically, the sign bit
    everywhere), never the count modulo the width as a machine's shift instruction reads it."""
    arrays: list[np.ndarray] = []
    mlirs, steps, lanes = [], [], []
    for pjrt, mlir, dtype in INTEGERS:
        bits = np.dtype(dtype).itemsize * 8
        top = (1 << (bits - 1)) | 5  # the sign bit set, so arithmetic and logical shifts differ
        counts = [0, 1, bits - 1, bits - 1, bits, bits, bits + 1, bits + 1, 2 * bits + 1, bits + 3, -1, -1]
        values = [top, 3, 1, top, 1, top, 3, top, 1, top, 1, top]
        base = len(arrays)
        arrays += [_wrapped(values, dtype), _wrapped(counts, dtype)]
        mlirs += [mlir, mlir]
        for op in ("shift_left", "shift_right_logical", "shift_right_arithmetic"):
            steps.append((op, (base, base + 1)))
            lanes.append((pjrt, dtype, op, base))
    got = run_program(ctx, "jit_shift_counts", arrays, steps, mlirs, "integer shifts")
    for g, (pjrt, dtype, op, base) in zip(got, lanes):
        lhs, rhs = arrays[base], arrays[base + 1]
        bits = np.dtype(dtype).itemsize * 8
        expected = _wrapped([_shifted(op, int(v), int(c), bits) for v, c in zip(lhs, rhs)], dtype)
        compare(f"{pjrt} {op}", g, expected, [lhs, rhs], op,
                "a shift by a count of the bit width or more (read as unsigned) moves every bit out: "
                "shift_left and shift_right_logical give 0, shift_right_arithmetic the sign bit in every "
                "position (StableHLO's interpreter and XLA agree), not the count modulo the width")


def _float_cases(pjrt: str, dtype: type) -> tuple[np.ndarray, np.ndarray]:
    inf, nan = np.inf, np.nan
    a = [-7.5, 7.5, 1.0, -1.0, 0.0, 1.0, -0.0, 0.0, 5.0, -5.0, inf, 3.0, nan, 6.0]
    b = [2.0, -2.0, 0.0, 0.0, 0.0, -0.0, 1.0, -1.0, inf, inf, 2.0, nan, 1.0, 3.0]
    return np.array(a, dtype), np.array(b, dtype)


@case("numerics", timeout=NUMERICS_TIMEOUT)
def float_division(ctx: PluginUnderTest) -> None:
    """Float divide follows IEEE-754 (x/0 is a signed infinity, 0/0 NaN, signs of zero kept) and
    remainder is C's fmod (the dividend's sign; x rem inf = x), for f16, bf16, f32 and f64."""
    arrays, mlirs, steps = [], [], []
    for index, (pjrt, mlir, dtype) in enumerate(FLOATS):
        arrays += list(_float_cases(pjrt, dtype))
        mlirs += [mlir, mlir]
        steps += [("divide", (2 * index, 2 * index + 1)), ("remainder", (2 * index, 2 * index + 1))]
    got = run_program(ctx, "jit_float_division", arrays, steps, mlirs, "float divide/remainder")
    with np.errstate(all="ignore"):
        for index, (pjrt, _, dtype) in enumerate(FLOATS):
            a, b = arrays[2 * index], arrays[2 * index + 1]
            wa, wb = a.astype(np.float64), b.astype(np.float64)
            compare(f"{pjrt} divide", got[2 * index], (wa / wb).astype(dtype), [a, b], "divide",
                    "IEEE-754 division: x/±0 is ±inf with the sign of x*(1/±0), 0/0 and inf/inf are NaN")
            compare(f"{pjrt} remainder", got[2 * index + 1], np.fmod(wa, wb).astype(dtype), [a, b], "remainder",
                    "remainder(x, y) = x - trunc(x / y) * y, with the sign of x (C's fmod, not Python's %); "
                    "x rem ±inf = x and x rem 0 = NaN")


@case("numerics", timeout=NUMERICS_TIMEOUT)
def nan_propagation(ctx: PluginUnderTest) -> None:
    """NaN propagates through maximum, minimum, add and multiply in either operand position, and
    inf - inf and 0 * inf are NaN, for f16, bf16 and f32."""
    nan, inf = np.nan, np.inf
    arrays: list[np.ndarray] = []
    mlirs, steps, names = [], [], []
    for index, (pjrt, mlir, dtype) in enumerate(IEEE_FLOATS):
        arrays += [np.array([nan, 1.0, nan, -inf, inf, 0.0], dtype), np.array([1.0, nan, nan, nan, inf, inf], dtype)]
        mlirs += [mlir, mlir]
        for op in ("maximum", "minimum", "add", "subtract", "multiply"):
            steps.append((op, (2 * index, 2 * index + 1)))
            names.append((pjrt, op, index))
    got = run_program(ctx, "jit_nan_propagation", arrays, steps, mlirs, "NaN through maximum/minimum/add/multiply")
    with np.errstate(all="ignore"):
        for g, (pjrt, op, index) in zip(got, names):
            a, b = arrays[2 * index], arrays[2 * index + 1]
            wa, wb = a.astype(np.float64), b.astype(np.float64)
            expected = {"maximum": np.maximum, "minimum": np.minimum, "add": np.add, "subtract": np.subtract,
                        "multiply": np.multiply}[op](wa, wb).astype(a.dtype)
            compare(f"{pjrt} {op}", g, expected, [a, b], op,
                    "a NaN operand gives a NaN result in every operand position (maximum and minimum "
                    "are IEEE-754 maximum/minimum, not the NaN-dropping fmax/fmin); inf - inf and 0 * inf are NaN")


@case("numerics", timeout=NUMERICS_TIMEOUT)
def signed_zero(ctx: PluginUnderTest) -> None:
    """Signed zeros come out as IEEE-754 says: -(+0) = -0, |-0| = +0, -0 + -0 = -0, x - x = +0,
    -0 * 3 = -0, maximum(-0, +0) = +0 and minimum(-0, +0) = -0 in either order."""
    arrays: list[np.ndarray] = []
    mlirs, steps, names = [], [], []
    for index, (pjrt, mlir, dtype) in enumerate(IEEE_FLOATS):
        arrays += [np.array([0.0, -0.0, -0.0, 0.0, 1.5], dtype), np.array([-0.0, 0.0, -0.0, 0.0, 1.5], dtype)]
        mlirs += [mlir, mlir]
        for op, operands in (("negate", (0,)), ("abs", (0,)), ("add", (0, 1)), ("subtract", (0, 1)),
                             ("multiply", (0, 1)), ("maximum", (0, 1)), ("minimum", (0, 1))):
            steps.append((op, tuple(2 * index + o for o in operands)))
            names.append((pjrt, op, index, len(operands)))
    got = run_program(ctx, "jit_signed_zero", arrays, steps, mlirs, "signed zeros")

    def extreme(a: np.ndarray, b: np.ndarray, largest: bool) -> np.ndarray:
        pick = np.maximum(a, b) if largest else np.minimum(a, b)
        zeros = (a == 0) & (b == 0)
        keep_a = ~np.signbit(a) if largest else np.signbit(a)
        return np.where(zeros, np.where(keep_a, a, b), pick)

    expected_of: dict[str, Callable[[np.ndarray, np.ndarray], Any]] = {"negate": lambda a, b: -a, "abs": lambda a, b: np.abs(a), "add": np.add,
                   "subtract": np.subtract, "multiply": np.multiply,
                   "maximum": lambda a, b: extreme(a, b, True), "minimum": lambda a, b: extreme(a, b, False)}
    for g, (pjrt, op, index, arity) in zip(got, names):
        a, b = arrays[2 * index], arrays[2 * index + 1]
        expected = np.asarray(expected_of[op](a.astype(np.float64), b.astype(np.float64))).astype(a.dtype)
        compare(f"{pjrt} {op}", g, expected, [a, b][:arity], op,
                "zeros keep their sign: negate flips it, abs clears it, x - x is +0, and IEEE-754 "
                "maximum/minimum order -0 below +0")


# -- rounding of the narrow floats --------------------------------------------------------------


def _rounding_operands(dtype: DTypeLike) -> tuple[np.ndarray, np.ndarray]:
    """Operands whose exact results sit on or next to a rounding boundary of ``dtype``: ties
    (round half to even), values just past a tie, overflow to infinity, results that a narrower
    mantissa, a narrower exponent range or truncation would get wrong."""
    info = ml_dtypes.finfo(dtype)
    ulp1 = float(info.eps)  # the spacing of values in [1, 2)
    big = float(info.max)
    if np.dtype(dtype) == np.float16:
        a = [1.0, 1.0, 1.0 + ulp1, 2048.0, big, 1.0 / 3.0, 0.1, 6.1e-5, 3.0, 1000.0, 7.0, 1.0]
        b = [ulp1 / 2, 3 * ulp1 / 2, ulp1 / 2, 1.0, 16.0, 3.0, 0.2, -6.0e-5, 7.0, 1e-3, 3.0, ulp1 / 2 + ulp1 / 16]
    else:  # bfloat16: f32's exponent range, 8 significant bits
        a = [1.0, 1.0, 1.0 + ulp1, 256.0, big, 1.0 / 3.0, 0.1, 1e30, 3.0, 1e-30, 7.0, 1.0]
        b = [ulp1 / 2, 3 * ulp1 / 2, ulp1 / 2, 1.0, big / 256, 3.0, 0.2, 1e10, 7.0, 1e-20, 3.0, ulp1 / 2 + ulp1 / 16]
    return np.array(a, np.float64).astype(dtype), np.array(b, np.float64).astype(dtype)


def _rounding_case(pjrt: str, mlir: str, dtype: DTypeLike) -> Case:
    def run(ctx: PluginUnderTest) -> None:
        a, b = _rounding_operands(dtype)
        steps = [("add", (0, 1)), ("subtract", (0, 1)), ("multiply", (0, 1)), ("divide", (0, 1)),
                 ("subtract", (2, 0)), ("multiply", (5, 1))]
        got = run_program(ctx, f"jit_rounding_{mlir}", [a, b], steps, [mlir, mlir], f"{pjrt} arithmetic")
        wa, wb = a.astype(np.float64), b.astype(np.float64)
        with np.errstate(all="ignore"):
            total = (wa + wb).astype(dtype)
            quotient = (wa / wb).astype(dtype)
            expected = [total, (wa - wb).astype(dtype), (wa * wb).astype(dtype), quotient,
                        (total.astype(np.float64) - wa).astype(dtype),
                        (quotient.astype(np.float64) * wb).astype(dtype)]
        names = ["add", "subtract", "multiply", "divide", "subtract(add(a, b), a)", "multiply(divide(a, b), b)"]
        operands = [[a, b]] * 4 + [[a, b]] * 2
        for g, e, name, ops in zip(got, expected, names, operands):
            compare(f"{pjrt} {name}", g, e, ops, name,
                    f"every {pjrt} op rounds its exact result once to {pjrt} (to nearest, ties to even; "
                    f"past the largest {pjrt} to infinity), and a chain of ops rounds after each op, "
                    "not through a narrower or a wider type")

    return Case("numerics", f"rounding_{pjrt.lower()}",
                f"{pjrt} add, subtract, multiply and divide are rounded to {pjrt} itself, to nearest with ties "
                "to even, after every op (no narrower or wider type in between, no truncation, "
                "overflow to infinity).", run, timeout=NUMERICS_TIMEOUT)


for _pjrt, _mlir, _dtype in FLOATS[:2]:
    add_case(_rounding_case(_pjrt, _mlir, _dtype))
