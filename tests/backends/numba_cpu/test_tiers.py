"""The eager tier and the compiled code give the same bits: on every public corpus program, on
every elementwise op and element type over special and random values, on reductions of every
kind of shape, and on generated programs; and tiered programs switch between them as designed.

Each compiled side is one numba compile, so the op matrix puts many ops in one program."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
import time
import warnings

import ml_dtypes
import numpy as np
import pytest

from pjrt_hub.abi import Cancelled, CompileError
from pjrt_hub.backends.numba_cpu import NumbaCompiler
from pjrt_hub.backends.numba_cpu import eager as eager_mod
from pjrt_hub.backends.numba_cpu import eager_math
from pjrt_hub.backends.numba_cpu import tiers
from pjrt_hub.backends.numba_cpu.compiler import _front_end
from pjrt_hub.backends.numba_cpu.eager import EagerUnsupported, NeedsCompiled
from pjrt_hub.backends.numba_cpu.lanes import lane_count, reduce_lanes
from pjrt_hub.backends.numba_cpu.tiers import TieredProgram
from ...corpus import program_text, public_arrays, public_programs
from ...loop_programs import COUNT_TO_TEN, count_to, peak_bytes, stacking_scan
from ...loop_programs import NEVER_ENDING
from .tier_helpers import assert_same_bits, eager_program

PROGRAMS = {p["name"]: p for p in public_programs()}


def _corpus_args(entry):
    return public_arrays(entry)[0]


def _text(entry):
    return program_text("public", entry)


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_corpus_program_same_bits_on_both_tiers(compiler, name):
    entry = PROGRAMS[name]
    text = _text(entry)
    args = _corpus_args(entry)
    assert_same_bits(eager_program(text).run(args), compiler.compile(text).run(args), name)


# -- every elementwise op, every element type ------------------------------------------------------

N = 512
FLOATS = ["f32", "f64", "bf16", "f16"]
INTS = ["i8", "i16", "i32", "i64", "ui8", "ui16", "ui32", "ui64"]
_NP = {"f32": np.float32, "f64": np.float64, "i8": np.int8, "i16": np.int16, "i32": np.int32, "i64": np.int64,
       "ui8": np.uint8, "ui16": np.uint16, "ui32": np.uint32, "ui64": np.uint64, "i1": np.bool_}
UNARY = ["abs", "negate", "sign", "exponential", "exponential_minus_one", "log", "log_plus_one", "tanh",
         "logistic", "sine", "cosine", "tan", "sqrt", "rsqrt", "cbrt", "floor", "ceil", "round_nearest_even",
         "round_nearest_afz", "not", "popcnt", "count_leading_zeros"]
CHLO_UNARY = ["erf", "erfc", "erf_inv", "sinh", "cosh", "asin", "acos", "atan", "asinh", "acosh", "atanh",
              "lgamma", "square"]
BINARY = ["add", "subtract", "multiply", "divide", "remainder", "maximum", "minimum", "power", "atan2", "and",
          "or", "xor", "shift_left", "shift_right_logical", "shift_right_arithmetic"]


def _dtype(t: str) -> np.dtype:
    if t in ("bf16", "f16"):
        import ml_dtypes

        return np.dtype(ml_dtypes.bfloat16 if t == "bf16" else np.float16)
    return np.dtype(_NP[t])


def _values(t: str, seed: int) -> np.ndarray:
    """Special values, then random bit patterns (every exponent), then ordinary numbers."""
    rng = np.random.default_rng(seed)
    dt = _dtype(t)
    if t == "i1":
        return rng.integers(0, 2, N).astype(bool)
    if t in INTS:
        info = np.iinfo(dt)
        special = [0, 1, info.max, info.min, info.max - 1, 2, 3, 7, 8, 31, 32, 33, 63, 64, 65]
        if info.min < 0:
            special += [-1, -2, -7, info.min + 1, -31]
        special = np.array([v for v in special if info.min <= v <= info.max], dtype=object).astype(dt)
        bits = rng.integers(0, 256, (N - special.size) * dt.itemsize, dtype=np.uint8).view(dt)
        return np.concatenate([special, bits])
    f = np.float64
    special = np.array([0.0, -0.0, 1.0, -1.0, 0.5, -0.5, 1.5, 2.5, -2.5, np.inf, -np.inf, np.nan, 1e-40, -1e-40,
                        1e-30, 3.4e38, -3.4e38, 88.0, 89.0, -104.0, 0.49999997, 0.625, 0.62499994, 1e-8, 2.0,
                        0.9999999, 1.0000001, 65504.0, 1e300, 5e-324, 100.0, -100.0], dtype=f)
    size = dt.itemsize
    bits = rng.integers(0, 256, (N // 2) * size, dtype=np.uint8).view({2: np.uint16, 4: np.uint32, 8: np.uint64}[size])
    with np.errstate(all="ignore"):
        randbits = bits.view(dt).astype(np.float64) if t in ("bf16", "f16") else bits.view(dt)
    normal = rng.standard_normal(N - special.size - randbits.size) * 3
    with np.errstate(all="ignore"):
        return np.concatenate([special, randbits.astype(f), normal]).astype(dt)


def _tensor(t: str) -> str:
    return f"tensor<{N}x{t}>"


def _accepted(lines: str, args: str, result: str) -> bool:
    """Whether the front end and the rules take this op (numba_cpu refuses some ops on some
    types, as the spec or XLA does)."""
    body = lines.format(r="%r", c="%c", lo="%lo")
    text = f"func.func @main({args}) -> ({result}) {{\n  {body}\n  return %r : {result}\n}}\n"
    try:
        eager_program(text)
    except Exception:  # noqa: BLE001 - any refusal (verifier, rule, eager tier) skips the op
        return False
    return True


#: 16-bit floats share the float32 formulas and differ only in the rounding after each op:
#: a few ops of each kind cover them (every op of them makes numba compile for minutes).
NARROW_OPS = {"add", "multiply", "divide", "maximum", "exponential", "log", "tanh", "sqrt", "power",
              "round_nearest_even", "negate", "erf", "square"}
#: float16's conversions are branchy and slow to compile: fewer still.
F16_OPS = {"add", "divide", "exponential", "sqrt"}


def _op_matrix(types: list[str]) -> tuple[str, list[np.ndarray]]:
    """One program: for each element type, every unary and binary op, compare in every
    direction and comparison type, select, clamp, converts to the other types, and for floats
    is_finite, reduce_precision and bitcast_convert. Ops the front end or the rules refuse on a
    type are left out."""
    params, lines, outs = [], [], []
    args: list[np.ndarray] = []
    for k, t in enumerate(types):
        a, b = f"%a{k}", f"%b{k}"
        ty, bool_ty = _tensor(t), _tensor("i1")
        params += [f"{a}: {ty}", f"{b}: {ty}"]
        args += [_values(t, 2 * k), _values(t, 2 * k + 1)[::-1].copy()]
        ops = F16_OPS if t == "f16" else NARROW_OPS if t == "bf16" else None
        keep = (lambda op: True) if ops is None else ops.__contains__  # noqa: E731
        candidates = [(f"{{r}} = stablehlo.{op} {a} : {ty}", ty) for op in UNARY if keep(op)]
        candidates += [(f"{{r}} = chlo.{op} {a} : {ty} -> {ty}", ty) for op in CHLO_UNARY if keep(op)]
        candidates += [(f"{{r}} = stablehlo.{op} {a}, {b} : {ty}", ty) for op in BINARY if keep(op)]
        if t in FLOATS:
            ctypes = ["FLOAT", "TOTALORDER"]
        else:
            ctypes = ["UNSIGNED"] if t.startswith("ui") or t == "i1" else ["SIGNED"]
        for ct in ctypes:
            narrow = t in ("bf16", "f16")
            for d in ("EQ", "NE", "LT", "LE", "GT", "GE") if ct != "TOTALORDER" and not narrow else ("LT", "EQ"):
                candidates.append((f"{{r}} = stablehlo.compare {d}, {a}, {b}, {ct} : ({ty}, {ty}) -> {bool_ty}", bool_ty))
        # Converts to a type of each kind and width class (the rules' cases).
        targets = ("f32", "i32", "i1") if t == "f16" else ("f32", "f64", "bf16", "f16", "i8", "i32", "ui64", "i1")
        for other in targets:
            if other != t and not (t == "bf16" and other in ("i8", "ui64")) and not (other == "f16" and t != "f32"):
                candidates.append((f"{{r}} = stablehlo.convert {a} : ({ty}) -> {_tensor(other)}", _tensor(other)))
        if t in FLOATS:
            candidates.append((f"{{r}} = stablehlo.is_finite {a} : ({ty}) -> {bool_ty}", bool_ty))
            for fmt in ("e5m10", "e8m7", "e4m3"):
                candidates.append((f"{{r}} = stablehlo.reduce_precision {a}, format = {fmt} : {ty}", ty))
            width = _tensor({"f32": "ui32", "f64": "ui64", "bf16": "ui16", "f16": "ui16"}[t])
            candidates.append((f"{{r}} = stablehlo.bitcast_convert {a} : ({ty}) -> {width}", width))
        candidates.append((f"{{c}} = stablehlo.compare LT, {a}, {b} : ({ty}, {ty}) -> {bool_ty}\n"
                           f"  {{r}} = stablehlo.select {{c}}, {a}, {b} : {bool_ty}, {ty}", ty))
        candidates.append((f"{{lo}} = stablehlo.minimum {a}, {b} : {ty}\n  {{r}} = stablehlo.clamp {{lo}}, {a}, {b} : {ty}", ty))
        sig = f"{a}: {ty}, {b}: {ty}"
        for template, result in candidates:
            if not _accepted(template, sig, result):
                continue
            n = len(outs)
            lines.append("  " + template.format(r=f"%r{n}", c=f"%c{n}", lo=f"%lo{n}"))
            outs.append((f"%r{n}", result))
    results = ", ".join(r for _, r in outs)
    text = (f"func.func @main({', '.join(params)}) -> ({results}) {{\n" + "\n".join(lines)
            + f"\n  return {', '.join(v for v, _ in outs)} : {results}\n}}\n")
    return text, args


@pytest.mark.parametrize("types", [["f32"], ["f64", "bf16"], ["f16"], ["i8", "i32", "i64"], ["ui8", "ui32", "ui64", "i1"]],
                         ids=["f32", "f64-bf16", "f16", "signed", "unsigned-bool"])
def test_every_elementwise_op_same_bits_on_both_tiers(compiler, types):
    text, args = _op_matrix(types)
    assert text.count(" = stablehlo.") + text.count(" = chlo.") > 10 * len(types), "the op matrix lost most of its ops"
    eager = eager_program(text).run(args)
    compiled = compiler.compile(text).run(args)
    assert_same_bits(eager, compiled, "+".join(types))


# -- reductions: lanes, sequential, exact ---------------------------------------------------------------

_REDUCE = """
func.func @main(%x: tensor<{shape}x{t}>) -> ({results}) {{
  %z = stablehlo.constant dense<{init}> : tensor<{t}>
{lines}
  return {values} : {results}
}}
"""


def _reduce_program(shape: tuple[int, ...], t: str, op: str, dims_list: list[list[int]]) -> str:
    lines, results, values = [], [], []
    for k, dims in enumerate(dims_list):
        kept = [n for d, n in enumerate(shape) if d not in dims]
        res = f"tensor<{'x'.join(map(str, kept))}{'x' if kept else ''}{t}>"
        # A fused body (exp of the operand) and the operand itself.
        lines.append(f"  %e{k} = stablehlo.exponential %x : tensor<{'x'.join(map(str, shape))}x{t}>")
        for src, tag in ((f"%e{k}", "f"), ("%x", "p")):
            lines.append(f"  %r{tag}{k} = stablehlo.reduce({src} init: %z) applies stablehlo.{op} across dimensions = "
                         f"[{', '.join(map(str, dims))}] : (tensor<{'x'.join(map(str, shape))}x{t}>, tensor<{t}>) -> {res}")
            results.append(res)
            values.append(f"%r{tag}{k}")
    return _REDUCE.format(shape="x".join(map(str, shape)), t=t, init="1.0" if op == "multiply" else "0.0",
                          lines="\n".join(lines), values=", ".join(values), results=", ".join(results))


@pytest.mark.parametrize("t,op,shape", [
    ("f32", "add", (3, 4, 70)), ("f32", "add", (2, 5000)), ("f64", "add", (4, 3, 33)), ("f32", "multiply", (3, 4, 65)),
    ("f32", "maximum", (3, 4, 20)), ("bf16", "add", (3, 4, 20)),
], ids=lambda v: "x".join(map(str, v)) if isinstance(v, tuple) else str(v))
def test_reductions_same_bits_on_both_tiers(compiler, t, op, shape):
    rank = len(shape)
    dims_list = [[rank - 1], list(range(1, rank)), [0], list(range(rank))]
    if rank > 2:
        dims_list.append([0, rank - 1])
    text = _reduce_program(shape, t, op, dims_list)
    rng = np.random.default_rng(7)
    x = (rng.standard_normal(shape) * (0.01 if op == "multiply" else 1.0) + (1.0 if op == "multiply" else 0.0))
    x.flat[::97] = -0.0
    x = x.astype(_dtype(t))
    assert_same_bits(eager_program(text).run([x]), compiler.compile(text).run([x]), f"{op} {t} {shape}")


@pytest.mark.parametrize("op", ["maximum", "minimum"])
def test_max_and_min_suffix_reductions_run_by_lanes_with_the_eager_tiers_bits(compiler, op):
    """Compiled max/min suffix reductions use vector lanes (for speed); NaNs, signed zeros and
    infinities give the eager tier's bits, in rows that fit the lanes and rows that do not."""
    shape = (6, 3, 70)
    text = _reduce_program(shape, "f32", op, [[2], [1, 2], [0, 1, 2]]).replace(
        "dense<0.0>", f"dense<{'0xFF800000' if op == 'maximum' else '0x7F800000'}>")
    x = np.random.default_rng(11).standard_normal(shape).astype(np.float32)
    x[0, 1, 33] = np.nan
    x[1] = 0.0
    x[1, 2, 69] = -0.0
    x[2] = -0.0
    x[2, 0, 0] = 0.0
    x[3, 2, 5] = np.inf
    x[4, 1, 68] = -np.inf
    program = compiler.compile(text)
    word = op[:3]
    assert "lanes_row(" in program.source and f"'{word}'" in program.source
    eager = eager_program(text).run([x])
    assert_same_bits(eager, program.run([x]), op)
    rows = eager[1]  # reduce(x) over the last dim, no exponential
    assert np.isnan(rows[0, 1]) and not np.isnan(rows[0, 0])
    # Rows of zeros: max is -0 only where every zero is -0, min is +0 only where every one is +0.
    signs = [[False, False, True], [True, True, True]] if op == "minimum" else [[False] * 3, [False, True, True]]
    assert np.signbit(rows[1:3]).tolist() == signs and not rows[1:3].any()


@pytest.mark.parametrize("through_call", [False, True], ids=["in the body", "in a called function"])
@pytest.mark.parametrize("from_input", [False, True], ids=["from zeros", "from the input"])
def test_the_eager_tier_updates_a_scans_stacked_output_in_place_and_never_its_input(compiler, from_input, through_call):
    """From its second step on, a scan writes one row into the array it carries, so a run
    allocates one stack (its first step's copy; the input and the zeros exist before it), where
    a copy at every step holds two at once (the copy and the array it copies)."""
    steps, width = 64, 4096
    xs = np.random.default_rng(0).standard_normal((steps, width)).astype(np.float32)
    before = xs.copy()
    text = stacking_scan(steps, width, from_input=from_input, through_call=through_call)
    program = eager_program(text)
    (out,) = program.run([xs])
    np.testing.assert_array_equal(out, xs)
    np.testing.assert_array_equal(xs, before)
    assert_same_bits([out], compiler.compile(text).run([xs]), "scan")
    peak = peak_bytes(lambda: program.run([xs]))
    assert peak < 1.5 * xs.nbytes, f"{peak / xs.nbytes:.2f} stacks held at once"


def test_lane_order_is_the_documented_one():
    """64 lanes for float32, element w to lane w % 64, folded in halves, init last."""
    x = np.arange(1, 131, dtype=np.float32) * np.float32(0.1)
    lanes = np.full(64, -0.0, np.float32)
    for w, v in enumerate(x):
        lanes[w % 64] = lanes[w % 64] + v
    while lanes.size > 1:
        half = lanes.size // 2
        lanes = lanes[:half] + lanes[half:]
    assert lane_count(130, 4) == 64 and lane_count(5, 4) == 8 and lane_count(100, 8) == 32
    assert reduce_lanes(x, 1, "add", np.float32(0.5)).tobytes() == (np.float32(0.5) + lanes[0]).tobytes()


@pytest.mark.parametrize("shape,ndims", [
    ((3, 64 * 300 + 5), 1),   # more steps than one call each: accumulated in blocks
    ((1, 64 * 1000), 1),
    ((40, 2, 64 * 3), 2),     # few steps, many rows
    ((0, 128), 1),            # no rows: the reshape once took -1 for a step count
    ((2, 0, 64), 1),          # rows of nothing
    ((0, 3, 128), 2),
], ids=str)
@pytest.mark.parametrize("op", ["add", "mul"])
def test_lane_reductions_of_long_many_and_empty_rows_keep_the_order(shape, ndims, op):
    fn = np.add if op == "add" else np.multiply
    x = np.random.default_rng(1).standard_normal(shape).astype(np.float32)
    if op == "mul":
        x = (1 + x * np.float32(1e-3)).astype(np.float32)
    kept = shape[:len(shape) - ndims]
    k = lane_count(shape[-1], 4)
    padded = np.concatenate([x, np.full(shape[:-1] + ((-shape[-1]) % k,), -0.0 if op == "add" else 1.0, np.float32)],
                            axis=-1)
    flat = padded.reshape(kept + (int(np.prod(padded.shape[len(kept):])),))
    lanes = np.full(kept + (k,), -0.0 if op == "add" else 1.0, np.float32)
    for j in range(flat.shape[-1] // k):  # the definition: each lane, step after step
        lanes = fn(lanes, flat[..., j * k:(j + 1) * k])
    while lanes.shape[-1] > 1:
        half = lanes.shape[-1] // 2
        lanes = fn(lanes[..., :half], lanes[..., half:])
    want = fn(np.float32(0.25), lanes[..., 0])
    got = reduce_lanes(x, ndims, op, np.float32(0.25))
    assert np.asarray(got).shape == kept and np.asarray(got).tobytes() == np.asarray(want).tobytes()


def test_a_reduction_of_no_rows_runs_on_both_tiers(compiler):
    text = _reduce_program((0, 128), "f32", "add", [[1]])
    x = np.zeros((0, 128), np.float32)
    eager = eager_program(text).run([x])
    assert [e.shape for e in eager] == [(0,), (0,)]
    assert_same_bits(eager, compiler.compile(text).run([x]), "0x128")


_SIGNED_ZERO_IMPLS = [eager_math._both_orders, eager_math._zeros_by_mask]


@pytest.mark.parametrize("impl", _SIGNED_ZERO_IMPLS, ids=lambda f: f.__name__)
@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64], ids=lambda d: np.dtype(d).name)
def test_fmaximum_and_fminimum_order_signed_zeros_and_keep_every_nan(monkeypatch, impl, dtype):
    """IEEE maximum/minimum: -0 < +0, NaN wins; every NaN stays a NaN, whatever its payload (the
    sign bit of two NaNs ANDed whole could leave an infinity), in numpy's scalar and vector loops,
    broadcast and 0-d."""
    monkeypatch.setattr(eager_math, "_SIGNED_ZEROS", impl)
    bits = {2: np.uint16, 4: np.uint32, 8: np.uint64}[np.dtype(dtype).itemsize]
    nans = {np.float16: [0x7C5F, 0x7E00, 0xFC01, 0x7C01], np.float32: [0x7F8BE000, 0x7FC00000, 0xFF800001, 0x7F800001],
            np.float64: [0x7FF0000000000001, 0x7FF8000000000000, 0xFFF0000000000010, 0x7FF4000000000000]}[dtype]
    values = np.concatenate([np.array([0.0, -0.0, 1.5, -2.0, np.inf, -np.inf], dtype),
                             np.array(nans, bits).view(dtype)])
    a, b = (v.ravel() for v in np.meshgrid(values, values))
    for reps in (1, 40):
        x, y = np.tile(a, reps), np.tile(b, reps)
        for fn, is_max in ((eager_math.fmaximum, True), (eager_math.fminimum, False)):
            got = fn(x, y)
            nan = np.isnan(x) | np.isnan(y)
            assert got.dtype == dtype and np.isnan(got[nan]).all()
            zeros = (x == 0) & (y == 0)
            want_neg = (np.signbit(x) & np.signbit(y)) if is_max else (np.signbit(x) | np.signbit(y))
            assert (got[zeros] == 0).all() and (np.signbit(got[zeros]) == want_neg[zeros]).all()
            rest = ~nan & ~zeros
            assert np.array_equal(got[rest], (np.maximum if is_max else np.minimum)(x[rest], y[rest]))
    scalar = eager_math.fmaximum(dtype(-0.0), dtype(0.0))
    assert np.asarray(scalar).shape == () and not np.signbit(scalar)
    column = eager_math.fminimum(np.zeros((3, 1), dtype), -np.zeros((1, 4), dtype))
    assert column.shape == (3, 4) and np.signbit(column).all()


def test_the_eager_tier_lets_go_of_each_value_after_its_last_use(compiler):
    """A chain of eight elementwise ops on a 4 MiB array holds a few arrays at once, not one per
    op; values read later, inside a loop, or returned stay until then."""
    n = 1 << 20
    chain = "\n".join(f"  %v{i + 1} = stablehlo.{op} %v{i}{', %v0' if op in ('add', 'multiply') else ''} : tensor<{n}xf32>"
                      for i, op in enumerate(["negate", "add", "abs", "multiply", "sqrt", "add", "negate", "abs"]))
    text = f"""func.func @main(%v0: tensor<{n}xf32>) -> tensor<{n}xf32> {{
{chain}
  return %v8 : tensor<{n}xf32>
}}"""
    x = np.random.default_rng(2).standard_normal(n).astype(np.float32)
    program = eager_program(text)
    (out,) = program.run([x])
    assert_same_bits([out], compiler.compile(text).run([x]), "chain")
    peak = peak_bytes(lambda: program.run([x]))
    assert peak < 4 * x.nbytes, f"{peak / x.nbytes:.1f} arrays held at once"
    looped = """func.func @main(%x: tensor<8xf32>) -> (tensor<8xf32>, tensor<8xf32>) {
  %early = stablehlo.exponential %x : tensor<8xf32>
  %twice = stablehlo.add %early, %early : tensor<8xf32>
  %zero = stablehlo.constant dense<0> : tensor<i32>
  %three = stablehlo.constant dense<3> : tensor<i32>
  %one = stablehlo.constant dense<1> : tensor<i32>
  %r:2 = stablehlo.while(%i = %zero, %acc = %x) : tensor<i32>, tensor<8xf32>
  cond {
    %p = stablehlo.compare LT, %i, %three, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
    stablehlo.return %p : tensor<i1>
  } do {
    %n = stablehlo.add %i, %one : tensor<i32>
    %s = stablehlo.add %acc, %early : tensor<8xf32>
    stablehlo.return %n, %s : tensor<i32>, tensor<8xf32>
  }
  %last = stablehlo.multiply %r#1, %twice : tensor<8xf32>
  return %last, %twice : tensor<8xf32>, tensor<8xf32>
}"""
    x = np.linspace(-1, 1, 8, dtype=np.float32)
    assert_same_bits(eager_program(looped).run([x]), compiler.compile(looped).run([x]), "loop")


# -- generated programs -------------------------------------------------------------------------------


hypothesis = pytest.importorskip("hypothesis")
st = hypothesis.strategies

_ELEMENTWISE = ["add", "subtract", "multiply", "divide", "maximum", "minimum", "power", "remainder"]
_UNARY_GEN = ["exponential", "log", "tanh", "logistic", "sqrt", "negate", "abs", "sine", "exponential_minus_one",
              "log_plus_one", "floor", "rsqrt"]


@st.composite
def _programs(draw):
    """A random chain over f32 matrices: elementwise ops, transposes, reversed and sliced views,
    broadcasts of row statistics, reductions of every kind, and a matmul."""
    rows = draw(st.integers(1, 9))
    cols = draw(st.sampled_from([1, 3, 16, 63, 64, 65, 130]))
    shape = (rows, cols)
    t = lambda s: f"tensor<{'x'.join(map(str, s))}{'x' if s else ''}f32>"  # noqa: E731
    values = [("%a", shape), ("%b", shape)]
    lines = []
    for i in range(draw(st.integers(2, 7))):
        kind = draw(st.sampled_from(["unary", "binary", "binary", "reduce", "transpose", "reverse", "dot", "slice"]))
        name, s = draw(st.sampled_from(values))
        out = f"%v{i}"
        if kind == "unary":
            op = draw(st.sampled_from(_UNARY_GEN))
            lines.append(f"{out} = stablehlo.{op} {name} : {t(s)}")
            values.append((out, s))
        elif kind == "binary":
            same = [v for v in values if v[1] == s]
            other, _ = draw(st.sampled_from(same))
            op = draw(st.sampled_from(_ELEMENTWISE))
            lines.append(f"{out} = stablehlo.{op} {name}, {other} : {t(s)}")
            values.append((out, s))
        elif kind == "reduce" and len(s) == 2:
            dims = draw(st.sampled_from([[1], [0], [0, 1]]))
            op = draw(st.sampled_from(["add", "add", "multiply", "maximum"]))
            kept = tuple(n for d, n in enumerate(s) if d not in dims)
            init = "1.0" if op == "multiply" else "0.0"
            lines.append(f"%z{i} = stablehlo.constant dense<{init}> : tensor<f32>")
            lines.append(f"{out} = stablehlo.reduce({name} init: %z{i}) applies stablehlo.{op} across dimensions = "
                         f"[{', '.join(map(str, dims))}] : ({t(s)}, tensor<f32>) -> {t(kept)}")
            if len(kept) == 1:
                # Broadcast the statistic back over the rows or columns it came from.
                bdim = 0 if dims == [1] else 1
                lines.append(f"{out}b = stablehlo.broadcast_in_dim {out}, dims = [{bdim}] : ({t(kept)}) -> {t(s)}")
                values.append((f"{out}b", s))
        elif kind == "transpose" and len(s) == 2:
            lines.append(f"{out} = stablehlo.transpose {name}, dims = [1, 0] : ({t(s)}) -> {t(s[::-1])}")
            values.append((out, s[::-1]))
        elif kind == "reverse" and len(s) == 2:
            lines.append(f"{out} = stablehlo.reverse {name}, dims = [1] : {t(s)}")
            values.append((out, s))
        elif kind == "slice" and len(s) == 2 and s[1] > 2:
            lines.append(f"{out} = stablehlo.slice {name} [0:{s[0]}, 1:{s[1]}:2] : ({t(s)}) -> {t((s[0], len(range(1, s[1], 2))))}")
            values.append((out, (s[0], len(range(1, s[1], 2)))))
        elif kind == "dot" and len(s) == 2:
            partners = [v for v in values if len(v[1]) == 2 and v[1][0] == s[1]]
            if partners:
                other, os_ = draw(st.sampled_from(partners))
                lines.append(f"{out} = stablehlo.dot_general {name}, {other}, contracting_dims = [1] x [0] : "
                             f"({t(s)}, {t(os_)}) -> {t((s[0], os_[1]))}")
                values.append((out, (s[0], os_[1])))
    results = values[2:] or values[:1]
    text = (f"func.func @main(%a: {t(shape)}, %b: {t(shape)}) -> ({', '.join(t(s) for _, s in results)}) {{\n  "
            + "\n  ".join(lines) + f"\n  return {', '.join(n for n, _ in results)} : {', '.join(t(s) for _, s in results)}\n}}\n")
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    args = [rng.standard_normal(shape).astype(np.float32) for _ in range(2)]
    args[0].flat[::5] = np.abs(args[0].flat[::5])
    return text, args


@hypothesis.settings(max_examples=int(os.environ.get("PJRT_HUB_TIER_EXAMPLES", "10")), deadline=None,
                     derandomize=True, suppress_health_check=list(hypothesis.HealthCheck))
@hypothesis.given(_programs())
def test_generated_programs_same_bits_on_both_tiers(compiler, program):
    text, args = program
    assert_same_bits(eager_program(text).run(args), compiler.compile(text).run(args), text)


# -- tiered programs --------------------------------------------------------------------------------------


@pytest.fixture
def tiered(tmp_path):
    compiler = NumbaCompiler(cache_dir=tmp_path / "cache", tiered=True)
    yield compiler
    tiers.shutdown()


def test_a_tiered_program_answers_eagerly_then_switches_with_the_same_bits(tiered):
    entry = PROGRAMS["softmax"]
    text = _text(entry)
    args = _corpus_args(entry)
    program = tiered.compile(text)
    assert isinstance(program, TieredProgram) and program.tier == "eager"
    first = program.run(args)
    assert program.runs == {"eager": 1, "compiled": 0}
    program.wait_compiled(timeout=600)
    assert program.tier == "compiled"
    assert_same_bits(first, program.run(args), "softmax")
    assert program.runs["compiled"] == 1
    # The compiled code came through the disk cache.
    assert tiered.cached(tiered.text_key(text, tiered._lowering_options(None)))


def test_a_program_run_once_is_not_compiled(tiered):
    program = tiered.compile(_text(PROGRAMS["cond"]))
    program.run(_corpus_args(PROGRAMS["cond"]))
    assert program._job.started is False and program.tier == "eager"


def test_an_input_the_eager_tier_cannot_reproduce_waits_for_the_compiled_code(tiered, monkeypatch):
    entry = PROGRAMS["sort_topk"]
    program = tiered.compile(_text(entry))

    def refuse(*args, **kwargs):
        raise NeedsCompiled("test")

    monkeypatch.setattr(eager_mod, "_sort_order", refuse)
    outputs = program.run(_corpus_args(entry))
    assert program.runs == {"eager": 0, "compiled": 1} and program.tier == "compiled"
    monkeypatch.undo()
    assert_same_bits(eager_program(_text(entry)).run(_corpus_args(entry)), outputs)


def test_a_failed_background_compile_warns_and_keeps_the_eager_tier(tiered, monkeypatch):
    def fail(self, job):
        raise CompileError("numba_cpu: the compile failed on purpose")

    monkeypatch.setattr(tiers._Background, "_compile", fail)
    entry = PROGRAMS["layernorm"]
    program = tiered.compile(_text(entry))
    with pytest.raises(CompileError, match="on purpose"):
        with pytest.warns(RuntimeWarning, match="keeps running on the eager tier"):
            program.wait_compiled(timeout=60)
    args = _corpus_args(entry)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        outputs = program.run(args)
    assert program.tier == "eager" and program.runs["eager"] == 1
    assert len(outputs) == len(entry["outputs"])


def test_a_failed_background_compile_is_one_line_with_a_command_that_reproduces_it(tiered, monkeypatch, tmp_path):
    def fail(self, job):
        raise CompileError("numba could not compile the generated code (TypingError: Failed in nopython\n"
                           "NameError: name 'd2353' is not defined\n)")

    monkeypatch.setattr(tiers._Background, "_compile", fail)
    entry = PROGRAMS["layernorm"]
    program = tiered.compile(_text(entry))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with pytest.raises(CompileError):
            program.wait_compiled(timeout=60)
        program.run(_corpus_args(entry))
    messages = [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)]
    assert len(messages) == 1 and "\n" not in messages[0], messages
    message = messages[0]
    assert program.name in message and "NameError: name 'd2353' is not defined" in message
    assert tiered.stats.background_failures == 1
    command = re.search(r"PJRT_HUB_NUMBA_TIERS=0 (pjrt-hub run .*?) \(the full error: (.*)\)$", message)
    assert command is not None, message
    assert "d2353" in open(command.group(2)).read()
    # The command is one a user can paste: it runs the saved program on the saved inputs (here
    # it compiles, the failure having been made up in this process).
    argv = command.group(1).split()
    out = tmp_path / "out.npz"
    run = subprocess.run([sys.executable, "-m", "pjrt_hub.cli", *argv[1:], "--out", str(out)],
                         env=dict(os.environ, PJRT_HUB_NUMBA_TIERS="0"),
                         capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr
    with np.load(out) as z:
        assert [z[f"out{i}"].shape for i in range(len(entry["outputs"]))] == [tuple(o["shape"]) for o in entry["outputs"]]


def test_a_loop_of_runs_without_a_pause_gets_the_compiled_code(tiered, monkeypatch):
    """A user's runs back to back (as JAX dispatches them, asynchronously) leave no moment
    without an eager run; the first load of compiled code waits for one only briefly."""
    from pjrt_hub.backends.numba_cpu import compiler as compiler_mod

    monkeypatch.setattr(compiler_mod, "numba_loaded", lambda: False)
    compiler = NumbaCompiler(cache_dir=tiered.cache_dir, tiered=True, compile_after=0)
    program = compiler.compile(_text(PROGRAMS["cumsum"]))
    with tiers._EAGER_RUNS:  # an eager run that is always in progress
        program.wait_compiled(timeout=120)
    assert program.tier == "compiled"


def _hold_compiles(monkeypatch, begun: bool = False) -> threading.Event:
    """Background compiles wait until the returned event is set (at most 60 s, which fails the
    compile): before the worker has claimed the job, or with ``begun`` after it has (as when
    the child is compiling it)."""
    release = threading.Event()
    real = tiers._Background._compile

    def held(self, job):
        if begun:
            self._take(job)
        assert release.wait(60)
        return real(self, job)

    monkeypatch.setattr(tiers._Background, "_compile", held)
    return release


def _loop_until_it_waits(program, args) -> list:
    """The first run, then the eager runs while the program compiles: the next run is a loop's."""
    for _ in range(1 + tiers.LOOP_RUNS):
        first = program.run(args)
    assert program.runs == {"eager": 1 + tiers.LOOP_RUNS, "compiled": 0} and program._job.started
    return first


def test_a_loop_compiles_its_program_in_the_foreground_if_the_worker_has_not_begun_it(tiered, monkeypatch):
    """The eager runs of a loop would share the cores with the compile it waits for, and in the
    child that compile comes after a start-up and a second import of numba: after LOOP_RUNS of
    them, the next run compiles the program itself, with no waiting for the worker."""
    release = _hold_compiles(monkeypatch)
    monkeypatch.setattr(tiers, "LOOP_EAGER_S", 0.0)
    monkeypatch.setattr(tiers, "LOOP_WAIT_S", 2.0)
    entry = PROGRAMS["cumsum"]
    args = _corpus_args(entry)
    program = tiered.compile(_text(entry))
    first = _loop_until_it_waits(program, args)
    assert_same_bits(first, program.run(args), "cumsum")
    assert program.runs == {"eager": 1 + tiers.LOOP_RUNS, "compiled": 1} and program.tier == "compiled"
    assert program._job.owner == "foreground"
    release.set()  # the worker finds the job taken and leaves it
    assert tiers.settle(timeout=60)
    assert program._job.error is None and program.tier == "compiled"


def test_a_loop_waits_for_the_compile_the_worker_has_begun(tiered, monkeypatch):
    release = _hold_compiles(monkeypatch, begun=True)
    monkeypatch.setattr(tiers, "LOOP_EAGER_S", 0.0)
    entry = PROGRAMS["cumsum"]
    args = _corpus_args(entry)
    program = tiered.compile(_text(entry))
    first = _loop_until_it_waits(program, args)
    threading.Timer(0.3, release.set).start()
    assert_same_bits(first, program.run(args), "cumsum")
    assert program.runs == {"eager": 1 + tiers.LOOP_RUNS, "compiled": 1} and program._job.owner == "worker"


def test_the_compile_process_is_paused_while_a_loop_compiles_in_the_foreground(tiered, monkeypatch):
    """The child's start-up (or another program's compile) must not take the cores from the
    compile a loop waits for; it goes on afterwards."""
    if not os.path.exists(f"/proc/{os.getpid()}/stat"):
        pytest.skip("needs /proc to read a process's state")
    background = tiers._background()
    child = background._ensure_child()
    if child is None:
        pytest.skip("no child process could be started")
    states = []
    real = NumbaCompiler.compile_to_cache

    def state() -> str:
        with open(f"/proc/{child.pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0]

    def observed(self, *args):
        deadline = time.monotonic() + 5  # a signal takes effect when the child is next scheduled
        while state() != "T" and time.monotonic() < deadline:
            time.sleep(0.01)
        states.append(state())
        return real(self, *args)

    monkeypatch.setattr(NumbaCompiler, "compile_to_cache", observed)
    job = tiers._Job(tiered, _text(PROGRAMS["cumsum"]), tiered._lowering_options(None),
                     tiered.text_key(_text(PROGRAMS["cumsum"]), tiered._lowering_options(None)), "cumsum")
    with background._lock:
        background._pending += 1  # as submit counts it
    assert background.compile_here(job) and job.program is not None
    assert states == ["T"]  # stopped while the foreground compiled
    assert state() != "T"
    assert not background.compile_here(job)  # done: nothing more to do


def test_a_loop_whose_compile_hangs_waits_once_and_goes_on_eagerly(tiered, monkeypatch):
    release = _hold_compiles(monkeypatch, begun=True)
    monkeypatch.setattr(tiers, "LOOP_WAIT_S", 0.2)
    monkeypatch.setattr(tiers, "LOOP_EAGER_S", 0.0)
    entry = PROGRAMS["cumsum"]
    program = tiered.compile(_text(entry))
    for _ in range(3 + tiers.LOOP_RUNS):
        program.run(_corpus_args(entry))
    assert program.runs == {"eager": 3 + tiers.LOOP_RUNS, "compiled": 0} and program._loop_waited
    release.set()


def test_a_loop_of_cheap_eager_runs_does_not_wait_for_its_compile(tiered, monkeypatch):
    """Ten fold_ins of a key cost milliseconds eagerly: stalling them for a compile of seconds
    would make the loop slower, not faster."""
    release = _hold_compiles(monkeypatch)
    monkeypatch.setattr(tiers, "LOOP_EAGER_S", 3600.0)
    entry = PROGRAMS["cumsum"]
    program = tiered.compile(_text(entry))
    for _ in range(3 + tiers.LOOP_RUNS):
        program.run(_corpus_args(entry))
    assert program.runs == {"eager": 3 + tiers.LOOP_RUNS, "compiled": 0} and not program._loop_waited
    release.set()


def test_a_loop_whose_compile_fails_goes_on_eagerly(tiered, monkeypatch):
    def fail(self, job):
        raise CompileError("numba_cpu: the compile failed on purpose")

    monkeypatch.setattr(tiers._Background, "_compile", fail)
    entry = PROGRAMS["cumsum"]
    program = tiered.compile(_text(entry))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for _ in range(3 + tiers.LOOP_RUNS):
            program.run(_corpus_args(entry))
    assert program.runs == {"eager": 3 + tiers.LOOP_RUNS, "compiled": 0}


def test_settle_waits_for_every_background_compile_of_the_process(tiered):
    entries = [PROGRAMS["cumsum"], PROGRAMS["softmax"]]
    programs = [tiered.compile(_text(entry)) for entry in entries]
    for program, entry in zip(programs, entries):
        for _ in range(2):  # run again: compiled in the background
            program.run(_corpus_args(entry))
    assert all(p._job.started for p in programs)
    assert tiers.settle(timeout=600)
    assert [p.tier for p in programs] == ["compiled", "compiled"]
    assert tiers.settle(timeout=0)  # nothing pending: at once


def test_the_compile_process_runs_at_this_processs_priority(tiered):
    program = tiered.compile(_text(PROGRAMS["pytree_io"]))
    program.wait_compiled(timeout=600)
    child = tiers._background()._child
    if child is None or child.poll() is not None:
        pytest.skip("the compile ran in this process (no child process could be started)")
    assert os.getpriority(os.PRIO_PROCESS, child.pid) == os.getpriority(os.PRIO_PROCESS, 0)


def test_a_large_program_compiles_after_its_first_run_and_a_cached_one_loads_after_its_second(tiered, monkeypatch):
    """A large program's background compile starts once its first eager run is over (the
    eager run has both cores to itself); one whose compiled code is in the disk cache is loaded
    (importing numba here) only when it runs again, so that a process that runs it once, as
    pjrt-hub run does, never waits for numba at exit."""
    monkeypatch.setattr(tiers, "EAGER_BUDGET", 0.0)
    monkeypatch.setattr(tiers, "LOAD_RATHER_THAN_EAGER", float("inf"))
    tiered = NumbaCompiler(cache_dir=tiered.cache_dir, tiered=True, compile_after=1)
    program = tiered.compile(COUNT_TO_TEN)
    assert isinstance(program, TieredProgram) and program.large and not program._job.started
    program.run([np.array(0, np.int32)])
    assert program._job.started  # not in the cache: the child compiles it
    program.wait_compiled(300)
    # In a process without numba (in this one, a cached program loads at once):
    script = (
        "import sys\n"
        "import numpy as np\n"
        "from pjrt_hub.backends.numba_cpu import NumbaCompiler, tiers\n"
        "tiers.EAGER_BUDGET, tiers.LOAD_RATHER_THAN_EAGER = 0.0, float('inf')\n"
        f"program = NumbaCompiler(cache_dir={str(tiered.cache_dir)!r}, tiered=True).compile({COUNT_TO_TEN!r})\n"
        "assert isinstance(program, tiers.TieredProgram) and program.large\n"
        "(out,) = program.run([np.array(3, np.int32)])\n"
        "assert int(out) == 10 and not program._job.started, 'loading after one run'\n"
        "program.run([np.array(4, np.int32)])\n"
        "assert program._job.started, 'not loading after a second run'\n"
        "print('ok', 'numba' in sys.modules)\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("PJRT_HUB_NUMBA_")}  # the defaults
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 0 and done.stdout.startswith("ok"), done.stderr


def test_programs_the_eager_tier_declines_are_compiled_at_once(tiered):
    # A collective: the eager tier does not exchange data between replicas.
    text = """module @m attributes {mhlo.num_replicas = 2 : i32} {
  func.func @main(%x: tensor<4xf32>) -> tensor<4xf32> {
    %0 = "stablehlo.all_reduce"(%x) ({
    ^bb0(%a: tensor<f32>, %b: tensor<f32>):
      %s = stablehlo.add %a, %b : tensor<f32>
      stablehlo.return %s : tensor<f32>
    }) {replica_groups = dense<[[0, 1]]> : tensor<1x2xi64>} : (tensor<4xf32>) -> tensor<4xf32>
    return %0 : tensor<4xf32>
  }
}"""
    program = tiered.compile(text)
    assert not isinstance(program, TieredProgram)
    assert tiered.stats.eager_programs == 0


def test_the_background_thread_ends_and_takes_its_process_with_it(tiered, monkeypatch):
    monkeypatch.setattr(tiers._Background, "IDLE", 0.2)
    program = tiered.compile(_text(PROGRAMS["pytree_io"]))
    program.wait_compiled(timeout=600)
    background = tiers._background()
    child = background._child
    thread = background._thread
    if thread is not None:
        thread.join(30)
    assert not any(t.name == "pjrt-hub-numba-compile" for t in threading.enumerate())
    assert child is None or child.poll() is not None


_EXIT_SCRIPT = """
import sys, json, numpy as np
from pjrt_hub.backends.numba_cpu import NumbaCompiler
from pjrt_hub.backends.numba_cpu import tiers
compiler = NumbaCompiler(cache_dir=sys.argv[1], tiered=True, compile_after=0)
program = compiler.compile(open(sys.argv[2]).read())
outputs = program.run([np.ones((8, 8), np.float32)])
child = None
for _ in range(200):
    child = tiers._background()._child
    if child is not None:
        break
    import time; time.sleep(0.05)
print(json.dumps({"numba_imported": "numba" in sys.modules, "tier": program.tier,
                  "child": None if child is None else child.pid}), flush=True)
"""


def test_exit_during_a_background_compile_stops_it_and_never_imported_numba(tmp_path):
    """A process that got its first result and exits at once: numba was never imported into
    it, the compile process is gone with it, and nothing hangs."""
    program = tmp_path / "p.mlir"
    program.write_text("""func.func @main(%x: tensor<8x8xf32>) -> tensor<8x8xf32> {
  %0 = stablehlo.exponential %x : tensor<8x8xf32>
  %1 = stablehlo.tanh %0 : tensor<8x8xf32>
  return %1 : tensor<8x8xf32>
}""")
    script = tmp_path / "s.py"
    script.write_text(_EXIT_SCRIPT)
    done = subprocess.run([sys.executable, str(script), str(tmp_path / "cache"), str(program)],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["numba_imported"] is False and report["tier"] == "eager"
    if report["child"] is not None:
        with pytest.raises(ProcessLookupError):
            for _ in range(100):
                os.kill(report["child"], 0)
                import time

                time.sleep(0.1)


@pytest.mark.parametrize("element", ["complex<f32>", "complex<f64>", "f8E4M3FN", "f8E5M2", "f4E2M1FN", "i4", "ui4",
                                     "i2"])
def test_element_types_the_eager_tier_does_not_cover_are_declined(element):
    """These run compiled only: the eager tier holds no value of them, not even converted."""
    direct = f"""func.func @main(%x: tensor<4x{element}>) -> tensor<4x{element}> {{
  %0 = stablehlo.add %x, %x : tensor<4x{element}>
  return %0 : tensor<4x{element}>
}}"""
    inside = f"""func.func @main(%x: tensor<4xf32>) -> tensor<4xf32> {{
  %0 = stablehlo.convert %x : (tensor<4xf32>) -> tensor<4x{element}>
  %1 = stablehlo.convert %0 : (tensor<4x{element}>) -> tensor<4xf32>
  return %1 : tensor<4xf32>
}}"""
    for text in (direct, inside):
        _, fn = _front_end(text)
        with pytest.raises(EagerUnsupported, match=re.escape(element)):
            eager_mod.EagerProgram(fn)


def test_16_bit_float_windows_and_scatters_are_declined_and_reductions_round_once():
    """A bf16 sum accumulates in float32 and rounds once on both tiers (a sequential bf16 sum of
    300 ones would stop at 256); windows of bf16 are compiled only."""
    text = """func.func @main(%x: tensor<300xbf16>) -> tensor<bf16> {
  %z = stablehlo.constant dense<0.0> : tensor<bf16>
  %0 = stablehlo.reduce(%x init: %z) applies stablehlo.add across dimensions = [0] : (tensor<300xbf16>, tensor<bf16>) -> tensor<bf16>
  return %0 : tensor<bf16>
}"""
    out = eager_program(text).run([np.ones(300, ml_dtypes.bfloat16)])
    assert float(np.asarray(out[0]).view(ml_dtypes.bfloat16)) == 300.0
    window = """func.func @main(%x: tensor<8xbf16>) -> tensor<8xbf16> {
  %z = stablehlo.constant dense<0.0> : tensor<bf16>
  %0 = "stablehlo.reduce_window"(%x, %z) ({
  ^bb0(%a: tensor<bf16>, %b: tensor<bf16>):
    %s = stablehlo.add %a, %b : tensor<bf16>
    stablehlo.return %s : tensor<bf16>
  }) {window_dimensions = array<i64: 8>, padding = dense<[[7, 0]]> : tensor<1x2xi64>} : (tensor<8xbf16>, tensor<bf16>) -> tensor<8xbf16>
  return %0 : tensor<8xbf16>
}"""
    _, fn = _front_end(window)
    with pytest.raises(EagerUnsupported, match="reduce_window with bf16"):
        eager_mod.EagerProgram(fn)


_RESULTS_OF_THEIR_OWN = """func.func @main(%a: tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>,
    tensor<f32>, tensor<f32>) {
  %c = stablehlo.constant dense<[1.0, 2.0, 3.0, 4.0]> : tensor<4xf32>
  %s = stablehlo.constant dense<7.0> : tensor<f32>
  %d = stablehlo.add %a, %a : tensor<4xf32>
  return %a, %c, %d, %d, %s, %s : tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<f32>, tensor<f32>
}"""


def test_eager_results_have_storage_of_their_own(tmp_path):
    # The runtime trusts a tiered program's results (fresh_results): an input, a constant or one
    # value returned twice must each come back as a new array, run after run.
    compiler = NumbaCompiler(cache_dir=tmp_path / "cache", tiered=True, compile_after=100)
    program = compiler.compile(_RESULTS_OF_THEIR_OWN)
    assert isinstance(program, TieredProgram) and program.fresh_results
    a = np.arange(4, dtype=np.float32)
    runs = [program.run([a]) for _ in range(2)]
    assert program.runs == {"eager": 2, "compiled": 0}
    arrays = [x for outs in runs for x in outs] + [a]
    for i, x in enumerate(arrays):
        for y in arrays[i + 1:]:
            assert not np.shares_memory(x, y)
    for outs in runs:
        assert [x.tolist() for x in outs] == [[0, 1, 2, 3], [1, 2, 3, 4], [0, 2, 4, 6], [0, 2, 4, 6], 7.0, 7.0]
        assert all(x.flags.writeable and x.flags.c_contiguous for x in outs)


def test_a_timeout_stops_a_never_ending_loop_on_the_eager_tier(tmp_path, monkeypatch):
    from pjrt_hub import PluginRegistry, RegistrySettings
    from pjrt_hub.abi import DeadlineExceeded, ExecuteOptions, Program

    monkeypatch.setenv("PJRT_HUB_CACHE", str(tmp_path / "cache"))
    registry = PluginRegistry(RegistrySettings(allowed=frozenset({"numba_cpu"})), environ={})
    registry.load()
    client = registry.create_client("numba_cpu")
    try:
        executable = client.compile(Program(NEVER_ENDING))
        program = executable.unwrapped.get_executable().program
        assert isinstance(program, TieredProgram) and program.cancellable
        x = client.buffer_from_host_buffer(np.asarray(np.int32(0))).buffer
        result = executable.execute([[x]], ExecuteOptions(timeout=0.3))
        with pytest.raises(DeadlineExceeded, match="0.3 s limit"):
            result.device_complete_events[0].await_(60)
        # Stopped on the eager tier: no compile was ever asked for.
        assert program.tier == "eager" and program._job.started is False
    finally:
        client.destroy()


#: Element types of the generated tests (main's ``tests/generated``): every one is either run by
#: the eager tier with the compiled code's bits, or declined (and then runs compiled only).
_GEN_EXAMPLES = int(os.environ.get("PJRT_HUB_TIER_EXAMPLES", "8"))
_EAGER_TYPES = ["i1", "i8", "i16", "i32", "i64", "ui8", "ui16", "ui32", "ui64", "f16", "bf16", "f32", "f64"]


def _declined_or_same_bits(compiler, text, arg_lists):
    try:
        eager = eager_program(text)
    except EagerUnsupported:
        return
    compiled = compiler.compile(text)
    for args in arg_lists:
        assert_same_bits(eager.run(args), compiled.run(args), text)


@hypothesis.settings(max_examples=_GEN_EXAMPLES, deadline=None, derandomize=True, database=None,
                     suppress_health_check=list(hypothesis.HealthCheck))
@hypothesis.given(data=st.data())
def test_generated_elementwise_programs_of_every_element_type_same_bits_or_declined(compiler, data):
    from tests.generated.programs import EW_SHAPES, array_of, elementwise_program, ops_for
    from tests.generated.spec import ELEMENTS

    # Half the draws from the types the eager tier runs, so that most programs compare bits.
    e = ELEMENTS[data.draw(st.sampled_from(_EAGER_TYPES) | st.sampled_from(sorted(ELEMENTS)))]
    ops = data.draw(st.lists(st.sampled_from(ops_for(e)), min_size=1, max_size=6, unique=True))
    shape = data.draw(st.sampled_from(EW_SHAPES))  # 0-d, zero-size, size-1 and odd shapes
    text, _ = elementwise_program(e, ops, shape)
    arg_lists = [[data.draw(array_of(e, shape)) for _ in range(3)] + [data.draw(array_of(ELEMENTS["i1"], shape))]
                 for _ in range(3)]
    _declined_or_same_bits(compiler, text, arg_lists)


@hypothesis.settings(max_examples=_GEN_EXAMPLES, deadline=None, derandomize=True, database=None,
                     suppress_health_check=list(hypothesis.HealthCheck))
@hypothesis.given(data=st.data())
def test_generated_shape_programs_of_every_element_type_same_bits_or_declined(compiler, data):
    from tests.generated.programs import structural_programs

    from tests.generated.spec import ELEMENTS

    program = data.draw(structural_programs(elements=data.draw(st.sampled_from([_EAGER_TYPES, sorted(ELEMENTS)]))))
    _declined_or_same_bits(compiler, program.text, [program.args])


@pytest.mark.parametrize("value,expected", [("", 1), ("0", 0), (" 3 ", 3), ("abc", None), ("-1", None), ("1.5", None)])
def test_compile_after_from_the_environment(monkeypatch, tmp_path, value, expected):
    from pjrt_hub.abi import InvalidArgument

    monkeypatch.setenv("PJRT_HUB_NUMBA_COMPILE_AFTER", value)
    if expected is None:
        with pytest.raises(InvalidArgument, match="PJRT_HUB_NUMBA_COMPILE_AFTER=.*whole number of runs"):
            NumbaCompiler(cache_dir=tmp_path, tiered=True)
    else:
        assert NumbaCompiler(cache_dir=tmp_path, tiered=True).compile_after == expected


@pytest.mark.parametrize("value,asked,expected", [("0", True, False), ("off", True, False), ("1", False, True),
                                                  ("", True, True), ("", False, False), ("maybe", True, None)])
def test_tiers_from_the_environment(monkeypatch, tmp_path, value, asked, expected):
    from pjrt_hub.abi import InvalidArgument

    monkeypatch.setenv("PJRT_HUB_NUMBA_TIERS", value)
    if expected is None:
        with pytest.raises(InvalidArgument, match="PJRT_HUB_NUMBA_TIERS='maybe': expected 0 or 1"):
            NumbaCompiler(cache_dir=tmp_path, tiered=asked)
        return
    compiler = NumbaCompiler(cache_dir=tmp_path, tiered=asked)
    assert compiler.tiered is expected
    program = compiler.compile("func.func @main(%a: tensor<2xf32>) -> tensor<2xf32> {\n"
                               "  %0 = stablehlo.negate %a : tensor<2xf32>\n  return %0 : tensor<2xf32>\n}\n")
    assert isinstance(program, TieredProgram) is expected


def test_loop_dots_of_edge_shapes_same_bits_on_both_tiers(compiler):
    """Dots the eager tier runs as loops (16-bit floats, integers): outer products, zero-size
    operands and a contraction, in one program (found by tests/generated: the eager tier's
    loop dot broadcast its (1, M, N) accumulator where it had to reshape it)."""
    dot = ('"stablehlo.dot_general"({a}, {b}) <{{dot_dimension_numbers = #stablehlo.dot<lhs_batching_dimensions = [], '
           'rhs_batching_dimensions = [], lhs_contracting_dimensions = [{lc}], rhs_contracting_dimensions = [{rc}]>}}> : '
           '({ta}, {tb}) -> {tr}')
    text = "\n".join([
        "func.func @main(%z: tensor<0xbf16>, %x: tensor<3xbf16>, %m: tensor<2x5xi32>, %n: tensor<5x3xi32>) -> "
        "(tensor<0x0xbf16>, tensor<3x3xbf16>, tensor<2x3xi32>) {",
        "  %0 = " + dot.format(a="%z", b="%z", lc="", rc="", ta="tensor<0xbf16>", tb="tensor<0xbf16>", tr="tensor<0x0xbf16>"),
        "  %1 = " + dot.format(a="%x", b="%x", lc="", rc="", ta="tensor<3xbf16>", tb="tensor<3xbf16>", tr="tensor<3x3xbf16>"),
        "  %2 = " + dot.format(a="%m", b="%n", lc="1", rc="0", ta="tensor<2x5xi32>", tb="tensor<5x3xi32>",
                               tr="tensor<2x3xi32>"),
        "  return %0, %1, %2 : tensor<0x0xbf16>, tensor<3x3xbf16>, tensor<2x3xi32>",
        "}",
    ])
    rng = np.random.default_rng(3)
    args = [np.zeros(0, ml_dtypes.bfloat16), rng.standard_normal(3).astype(ml_dtypes.bfloat16),
            rng.integers(-9, 9, (2, 5)).astype(np.int32), rng.integers(-9, 9, (5, 3)).astype(np.int32)]
    assert_same_bits(eager_program(text).run(args), compiler.compile(text).run(args), "loop dots")


def test_a_compiled_tier_takes_read_only_and_strided_inputs_and_counts_its_runs(tiered):
    # The compiled tier calls a plain entry directly; inputs numba's dispatcher will not take as
    # they are (read-only, not contiguous) still go through NumbaProgram.run, which copies them.
    text = ("func.func @main(%a: tensor<4xf32>, %b: tensor<4xf32>) -> tensor<4xf32> {\n"
            "  %0 = stablehlo.multiply %a, %b : tensor<4xf32>\n  return %0 : tensor<4xf32>\n}\n")
    program = tiered.compile(text)
    program.wait_compiled(timeout=600)
    a = np.arange(4, dtype=np.float32)
    read_only = a.copy()
    read_only.flags.writeable = False
    strided = np.arange(8, dtype=np.float32)[::2]
    for args in ([a, a], [read_only, a], [a, strided]):
        (result,) = program.run(args)
        np.testing.assert_array_equal(result, args[0] * args[1])
        assert result.dtype == np.float32 and result.flags.c_contiguous
    out = np.empty(4, np.float32)
    (result,) = program.run([a, a], [out])
    assert result is out and list(out) == [0, 1, 4, 9]
    assert program.runs == {"eager": 0, "compiled": 4}


_MANY_CARRIES = """func.func @main(%x: tensor<8xf32>, %y: tensor<3x2xf32>, %k: tensor<i64>) -> (tensor<i32>, tensor<8xf32>, tensor<3x2xf32>, tensor<i64>, tensor<8xf32>, tensor<f32>) {
  %c0 = stablehlo.constant dense<0> : tensor<i32>
  %z = stablehlo.constant dense<0.0> : tensor<f32>
  %0:6 = stablehlo.while(%i = %c0, %a = %x, %b = %y, %n = %k, %s = %x, %t = %z) : tensor<i32>, tensor<8xf32>, tensor<3x2xf32>, tensor<i64>, tensor<8xf32>, tensor<f32>
  cond {
    %lim = stablehlo.constant dense<7> : tensor<i32>
    %p = stablehlo.compare LT, %i, %lim, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
    stablehlo.return %p : tensor<i1>
  } do {
    %one = stablehlo.constant dense<1> : tensor<i32>
    %i2 = stablehlo.add %i, %one : tensor<i32>
    %half = stablehlo.constant dense<0.5> : tensor<8xf32>
    %a2 = stablehlo.multiply %a, %half : tensor<8xf32>
    %s2 = stablehlo.add %s, %a2 : tensor<8xf32>
    %b2 = stablehlo.add %b, %b : tensor<3x2xf32>
    %n1 = stablehlo.constant dense<3> : tensor<i64>
    %n2 = stablehlo.multiply %n, %n1 : tensor<i64>
    %r = stablehlo.reduce(%a2 init: %z) applies stablehlo.add across dimensions = [0] : (tensor<8xf32>, tensor<f32>) -> tensor<f32>
    %t2 = stablehlo.add %t, %r : tensor<f32>
    stablehlo.return %i2, %a2, %b2, %n2, %s2, %t2 : tensor<i32>, tensor<8xf32>, tensor<3x2xf32>, tensor<i64>, tensor<8xf32>, tensor<f32>
  }
  return %0#0, %0#1, %0#2, %0#3, %0#4, %0#5 : tensor<i32>, tensor<8xf32>, tensor<3x2xf32>, tensor<i64>, tensor<8xf32>, tensor<f32>
}
"""


def test_a_while_loop_with_many_carried_values_gives_the_same_result_on_every_path(tiered):
    # Six carried values of four types, arrays and scalars: the compiled tier's direct entry
    # (with the cancel flag a loop program takes), its general run (a cancel flag given), the
    # eager tier and numpy agree.
    x = np.arange(1, 9, dtype=np.float32)
    y = np.arange(6, dtype=np.float32).reshape(3, 2)
    k = np.array(2, np.int64)
    a, s, t = x.copy(), x.copy(), np.float32(0)
    for _ in range(7):
        a = a * np.float32(0.5)
        s = s + a
        t = np.float32(t + a.sum(dtype=np.float32))
    program = tiered.compile(_MANY_CARRIES)
    assert program.direct_entry() is None  # nothing compiled yet: the runtime calls run
    eager = program.run([x, y, k])
    compiled = program.wait_compiled(timeout=600)
    direct = program.run([x, y, k])
    flagged = compiled.run([x, y, k], cancel=np.zeros(1, np.int32))
    # What an executable calls once it has it: the entry with the flag nobody sets appended.
    entry = program.direct_entry()
    assert entry is not None
    by_entry = list(entry(x, y, k))
    assert program.runs == {"eager": 1, "compiled": 1}  # the entry's calls are not run's
    for got in (direct, flagged, by_entry):
        assert_same_bits(eager, got, "many carries")
    assert int(direct[0]) == 7 and int(direct[3]) == 2 * 3 ** 7
    np.testing.assert_array_equal(direct[1], a)
    np.testing.assert_array_equal(direct[2], y * 2 ** 7)
    np.testing.assert_array_equal(direct[4], s)
    np.testing.assert_allclose(direct[5], t, rtol=1e-6)


_COUNT_TO_1000 = count_to(1000)


def test_an_eager_run_stops_when_cancelled_or_overtaken():
    # The runtime's cancel flag is read at each turn of a while loop, overtaken() between steps
    # (here: from the 10th step on, deep inside the loop); without either the loop runs out.
    program = eager_program(_COUNT_TO_1000)
    x = np.asarray(np.int32(0))
    assert int(program.run([x], np.zeros(1, np.int32), lambda: False)[0]) == 1000
    with pytest.raises(Cancelled):
        program.run([x], np.ones(1, np.int32))
    asked = []

    def overtaken() -> bool:
        asked.append(None)
        return len(asked) >= 10

    with pytest.raises(eager_mod.Overtaken):
        program.run([x], None, overtaken)
    assert len(asked) == 10


_CONV = ("stablehlo.convolution(%x, %w) dim_numbers = {dims}, window = {{stride = {stride}, pad = {pad}, "
         "lhs_dilate = {ldil}, rhs_dilate = {rdil}, reverse = {rev}}} "
         "{{batch_group_count = 1 : i64, feature_group_count = 1 : i64}} : ({tx}, {tw}) -> {tr}")


@pytest.mark.parametrize("case", [
    # layout, x shape, w shape, result shape, stride, pad, lhs dilation, rhs dilation, reverse, type
    ("[b, 0, 1, f]x[0, 1, i, o]->[b, 0, 1, f]", (2, 7, 6, 3), (3, 3, 3, 8), (2, 7, 6, 8), "[1, 1]",
     "[[1, 1], [1, 1]]", "[1, 1]", "[1, 1]", "[false, false]", "f32"),
    ("[b, 0, 1, f]x[0, 1, i, o]->[b, 0, 1, f]", (1, 9, 8, 2), (2, 3, 2, 5), (1, 4, 4, 5), "[2, 2]",
     "[[1, 0], [0, 2]]", "[1, 1]", "[2, 1]", "[true, false]", "f32"),
    ("[b, f, 0, 1]x[o, i, 0, 1]->[b, f, 0, 1]", (2, 3, 5, 5), (4, 3, 2, 2), (2, 4, 10, 10), "[1, 1]",
     "[[1, 1], [1, 1]]", "[2, 2]", "[1, 1]", "[false, true]", "f32"),
    ("[b, 0, f]x[0, i, o]->[b, 0, f]", (3, 11, 4), (3, 4, 6), (3, 9, 6), "[1]", "[[0, 0]]", "[1]", "[1]", "[false]",
     "f64"),
    ("[b, 0, 1, f]x[0, 1, i, o]->[b, 0, 1, f]", (1, 6, 6, 2), (3, 3, 2, 4), (1, 6, 6, 4), "[1, 1]",
     "[[1, 1], [1, 1]]", "[1, 1]", "[1, 1]", "[false, false]", "bf16"),
    ("[b, 0, 1, f]x[0, 1, i, o]->[b, 0, 1, f]", (2, 5, 5, 3), (2, 2, 3, 3), (2, 6, 6, 3), "[1, 1]",
     "[[1, 1], [1, 1]]", "[1, 1]", "[1, 1]", "[false, false]", "i32"),
    ("[f, 0, 1, b]x[i, 0, 1, o]->[0, 1, f, b]", (3, 5, 4, 2), (3, 2, 2, 5), (4, 3, 5, 2), "[1, 1]",
     "[[0, 0], [0, 0]]", "[1, 1]", "[1, 1]", "[false, false]", "f16"),
    ("[b, 0, 1, f]x[0, 1, i, o]->[b, 0, 1, f]", (2, 6, 5, 3), (3, 2, 3, 24), (2, 4, 4, 24), "[1, 1]",
     "[[0, 0], [0, 0]]", "[1, 1]", "[1, 1]", "[false, false]", "f32"),
], ids=["nhwc-same", "strided-dilated-reversed", "nchw-transposed", "1d-f64", "bf16", "i32", "odd-layout-f16",
        "24-features-in-an-array"])
def test_convolutions_accumulate_features_side_by_side_with_the_eager_tiers_bits(compiler, case):
    """Convolutions without groups run one output pixel at a time, their features accumulating
    side by side; every feature's sum keeps its terms and their order, so the bits are the eager
    tier's. Where the window lies over the padding or a dilation hole, the input is a zero,
    multiplied like any other element: an infinity of the kernel there gives NaN, as the spec's
    padded input and XLA:CPU give (the reference interpreter pads explicitly)."""
    dims, xs, ws, rs, stride, pad, ldil, rdil, rev, t = case
    dtype = _dtype(t)
    tx, tw, tr = (f"tensor<{'x'.join(map(str, s))}x{t}>" for s in (xs, ws, rs))
    conv = _CONV.format(dims=dims, stride=stride, pad=pad, ldil=ldil, rdil=rdil, rev=rev, tx=tx, tw=tw, tr=tr)
    text = f"func.func @main(%x: {tx}, %w: {tw}) -> {tr} {{\n  %0 = {conv}\n  return %0 : {tr}\n}}\n"
    rng = np.random.default_rng(len(dims) + xs[1])
    if t == "i32":
        x, w = (rng.integers(-1 << 16, 1 << 16, s).astype(np.int32) for s in (xs, ws))
    else:
        x, w = (rng.standard_normal(s).astype(dtype) for s in (xs, ws))
        x.reshape(-1)[:3] = -0.0
        w.reshape(-1)[::7] = np.inf
        w.reshape(-1)[1] = np.nan
    compiled = compiler.compile(text)
    # The features side by side: in local variables, or (more than 16) in an array.
    assert ("faccs" in compiled.source) == (rs[dims.split("->")[1].strip("[]").split(", ").index("f")] > 16)
    assert "facc" in compiled.source
    (got,) = compiled.run([x, w])
    assert_same_bits(eager_program(text).run([x, w]), [got], dims)
    if t != "i32":
        from pjrt_hub.backends.reference import Interpreter
        from pjrt_hub.backends.stablehlo import parse_module, verify

        (want,) = Interpreter(verify(parse_module(text))).run([x, w])
        got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
        assert np.array_equal(np.isnan(got), np.isnan(want)) and np.array_equal(np.isinf(got), np.isinf(want))
        finite = np.isfinite(want)
        np.testing.assert_allclose(got[finite], want[finite], rtol=2e-2 if dtype.itemsize == 2 else 1e-5, atol=1e-2)
