"""numba_cpu against the reference interpreter, op by op, on the corner cases.

Each program packs many ops (one compile each, numba being slow to compile); every output is
compared with the reference interpreter: exactly for integers and bools, to a few float32 ulps
for floats (numba_cpu uses its own vectorisable exp/log/tanh).
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from .numba_helpers import assert_matches
from .tier_helpers import assert_same_bits, eager_program
from pjrt_hub.backends.reference import Interpreter
from pjrt_hub.backends.stablehlo import parse_module, verify

I32_MIN, I32_MAX = int(np.iinfo(np.int32).min), int(np.iinfo(np.int32).max)
bf16 = ml_dtypes.bfloat16

_ELEMENT = {
    np.dtype(np.float32): "f32", np.dtype(np.float64): "f64", np.dtype(np.float16): "f16",
    np.dtype(bf16): "bf16", np.dtype(np.int8): "i8", np.dtype(np.int16): "i16",
    np.dtype(np.int32): "i32", np.dtype(np.int64): "i64", np.dtype(np.uint8): "ui8",
    np.dtype(np.uint16): "ui16", np.dtype(np.uint32): "ui32", np.dtype(np.uint64): "ui64",
    np.dtype(np.bool_): "i1", np.dtype(np.complex64): "complex<f32>",
}


def tt(shape, dtype) -> str:
    return "tensor<" + "".join(f"{d}x" for d in shape) + _ELEMENT[np.dtype(dtype)] + ">"


class Program:
    """A ``@main`` built line by line; ``out`` marks results."""

    def __init__(self, *args: np.ndarray) -> None:
        self.args = [np.asarray(a) for a in args]
        self.lines: list[str] = []
        self.results: list[tuple[str, str]] = []
        self._n = 0

    def __call__(self, line: str, type_: str | None = None, *, out: bool = True) -> str:
        name = f"%v{self._n}"
        self._n += 1
        self.lines.append(f"    {name} = {line}")
        if out:
            self.results.append((name, type_ or line.rsplit("-> ", 1)[-1].rsplit(": ", 1)[-1].strip()))
        return name

    def text(self) -> str:
        params = ", ".join(f"%a{i}: {tt(a.shape, a.dtype)}" for i, a in enumerate(self.args))
        rtypes = ", ".join(t for _, t in self.results)
        names = ", ".join(n for n, _ in self.results)
        body = "\n".join(self.lines)
        return (f"module @diff {{\n  func.func public @main({params}) -> ({rtypes}) {{\n{body}\n"
                f"    return {names} : {rtypes}\n  }}\n}}\n")


def check(compiler, prog: Program, *, rtol=1e-6, atol=0.0, rtols: dict[int, float] | None = None):
    text = prog.text()
    expected = Interpreter(verify(parse_module(text))).run(prog.args)
    got = compiler.compile(text).run(prog.args)
    assert len(got) == len(expected)
    for i, (g, e) in enumerate(zip(got, expected)):
        tol = (rtols or {}).get(i, rtol)
        name = prog.results[i][0]
        line = next((ln.strip() for ln in prog.lines if ln.strip().startswith(name.split("#")[0] + " ")), name)
        assert_matches(g, e, rtol=tol, atol=atol, what=f"output {i} ({line[:100]})")


SPECIAL_F32 = np.array(
    [0.0, -0.0, 1.0, -1.0, 0.5, -0.5, 1.5, -2.5, 2.5, 3.7, -3.7, 1e-7, -1e-7, 1e-40, -1e-40, 20.0, -20.0,
     88.0, -88.0, 100.0, -104.5, 1e30, -1e30, 3.4e38, np.inf, -np.inf, np.nan, 0.999, -0.999, 0.9999999,
     7.0, 1e-3], np.float32)


def test_float_unary_ops(compiler):
    x = np.concatenate([SPECIAL_F32, np.random.default_rng(0).normal(0, 3, 32).astype(np.float32)])
    t = tt(x.shape, np.float32)
    p = Program(x)
    for op in ["abs", "negate", "sign", "floor", "ceil", "round_nearest_even", "round_nearest_afz", "sqrt",
               "rsqrt", "cbrt", "exponential", "exponential_minus_one", "log", "log_plus_one", "tanh",
               "logistic", "sine", "cosine", "tan"]:
        p(f"stablehlo.{op} %a0 : {t}")
    for op in ["erf", "erfc", "erf_inv", "square", "sinh", "cosh", "tan", "asin", "acos", "atan", "asinh", "acosh",
               "atanh", "lgamma"]:
        p(f"chlo.{op} %a0 : {t} -> {t}")
    bt = tt(x.shape, np.bool_)
    p(f"stablehlo.is_finite %a0 : ({t}) -> {bt}", bt)
    for op in ["is_inf", "is_pos_inf", "is_neg_inf"]:
        p(f"chlo.{op} %a0 : {t} -> {bt}", bt)
    check(compiler, p, rtol=4e-7, atol=1e-44)


def test_float_binary_ops_and_comparisons(compiler):
    rng = np.random.default_rng(1)
    a = np.repeat(SPECIAL_F32, len(SPECIAL_F32))
    b = np.tile(SPECIAL_F32, len(SPECIAL_F32))
    a = np.concatenate([a, rng.uniform(0, 3, 64).astype(np.float32)])
    b = np.concatenate([b, rng.normal(0, 4, 64).astype(np.float32)])
    t, bt = tt(a.shape, np.float32), tt(a.shape, np.bool_)
    p = Program(a, b)
    for op in ["add", "subtract", "multiply", "divide", "remainder", "power", "maximum", "minimum", "atan2"]:
        p(f"stablehlo.{op} %a0, %a1 : {t}")
    for d in ["EQ", "NE", "LT", "LE", "GT", "GE"]:
        for ct in ["FLOAT", "TOTALORDER"]:
            p(f"stablehlo.compare {d}, %a0, %a1, {ct} : ({t}, {t}) -> {bt}", bt)
    cmp = p(f"stablehlo.compare LT, %a0, %a1, FLOAT : ({t}, {t}) -> {bt}", bt, out=False)
    p(f"stablehlo.select {cmp}, %a0, %a1 : {bt}, {t}", t)
    p(f"stablehlo.clamp %a1, %a0, %a1 : {t}")
    lo = p("stablehlo.constant dense<-1.0> : tensor<f32>", out=False)
    hi = p("stablehlo.constant dense<2.0> : tensor<f32>", out=False)
    p(f"stablehlo.clamp {lo}, %a0, {hi} : (tensor<f32>, {t}, tensor<f32>) -> {t}", t)
    check(compiler, p, rtol=4e-7, atol=1e-44)


def _int_program(a, b):
    t, bt = tt(a.shape, a.dtype), tt(a.shape, np.bool_)
    signed = a.dtype.kind == "i"
    p = Program(a, b)
    for op in ["add", "subtract", "multiply", "divide", "remainder", "maximum", "minimum", "and", "or", "xor",
               "shift_left", "shift_right_logical", "shift_right_arithmetic", "power"]:
        p(f"stablehlo.{op} %a0, %a1 : {t}")
    # abs and sign take signed integers only (the spec's verifier and XLA refuse them on unsigned).
    for op in ["not", "popcnt", "count_leading_zeros", "negate"] + (["abs", "sign"] if signed else []):
        p(f"stablehlo.{op} %a0 : {t}")
    for d in ["EQ", "NE", "LT", "LE", "GT", "GE"]:
        p(f"stablehlo.compare {d}, %a0, %a1, {'SIGNED' if signed else 'UNSIGNED'} : ({t}, {t}) -> {bt}", bt)
    p(f"stablehlo.clamp %a1, %a0, %a1 : {t}")
    return p


@pytest.mark.parametrize("dtype", [np.int32, np.uint32, np.int8, np.uint64])
def test_integer_ops_wrap_and_xla_corner_cases(compiler, dtype):
    info = np.iinfo(dtype)
    edge = [0, 1, -1, 2, -2, 7, -7, 31, 32, 33, 63, 64, 65, info.min, info.max, info.min + 1, 100, -100, 3, 5]
    vals = np.array([v % (1 << info.bits) if v < 0 and info.min == 0 else v for v in edge], dtype=object)
    vals = np.array([int(v) if info.min <= int(v) <= info.max else int(v) % (1 << info.bits) for v in vals],
                    dtype=np.uint64 if dtype == np.uint64 else np.int64)
    vals = vals.astype(dtype)
    a = np.repeat(vals, len(vals))
    b = np.tile(vals, len(vals))
    check(compiler, _int_program(a, b))


def test_bool_ops(compiler):
    a = np.array([False, False, True, True])
    b = np.array([False, True, False, True])
    t, bt = tt(a.shape, np.bool_), tt(a.shape, np.bool_)
    p = Program(a, b)
    for op in ["and", "or", "xor", "maximum", "minimum", "add", "multiply"]:
        p(f"stablehlo.{op} %a0, %a1 : {t}")
    p(f"stablehlo.not %a0 : {t}")
    for d in ["EQ", "NE", "LT", "GT"]:
        p(f"stablehlo.compare {d}, %a0, %a1, UNSIGNED : ({t}, {t}) -> {bt}", bt)
    p(f"stablehlo.select %a0, %a0, %a1 : {bt}, {t}", t)
    check(compiler, p)


def test_conversions_round_and_saturate(compiler):
    x = np.concatenate([SPECIAL_F32, np.array([2.5e9, -2.5e9, 300.0, -300.0, 255.5, 127.5, -128.5, 65519.0,
                                               65520.0, 1.00390625, 1.01171875, 3e-8], np.float32)])
    i = np.array([0, 1, -1, I32_MAX, I32_MIN, 16777217, -16777217, 255, 256, -129, 300, 65535, 7, 8],
                 np.int32)
    u = np.array([0, 1, 2**32 - 1, 2**31, 16777217, 255, 256, 300], np.uint32)
    f, it, ut = tt(x.shape, np.float32), tt(i.shape, np.int32), tt(u.shape, np.uint32)
    p = Program(x, i, u)
    for dst in [np.int32, np.uint8, np.int8, np.uint32, np.int64, np.uint64, np.bool_, bf16, np.float16, np.float64]:
        p(f"stablehlo.convert %a0 : ({f}) -> {tt(x.shape, dst)}", tt(x.shape, dst))
    for dst in [np.float32, np.uint8, np.int8, np.int16, np.uint32, np.bool_, bf16, np.float16, np.int64]:
        p(f"stablehlo.convert %a1 : ({it}) -> {tt(i.shape, dst)}", tt(i.shape, dst))
    for dst in [np.float32, np.int32, np.uint8, np.uint64, np.float64]:
        p(f"stablehlo.convert %a2 : ({ut}) -> {tt(u.shape, dst)}", tt(u.shape, dst))
    b16 = p(f"stablehlo.convert %a0 : ({f}) -> {tt(x.shape, bf16)}", out=False)
    p(f"stablehlo.convert {b16} : ({tt(x.shape, bf16)}) -> {f}", f)
    h16 = p(f"stablehlo.convert %a0 : ({f}) -> {tt(x.shape, np.float16)}", out=False)
    p(f"stablehlo.add {h16}, {h16} : {tt(x.shape, np.float16)}", tt(x.shape, np.float16))
    p(f"stablehlo.bitcast_convert %a0 : ({f}) -> {tt(x.shape, np.int32)}", tt(x.shape, np.int32))
    p(f"stablehlo.bitcast_convert %a1 : ({it}) -> {tt(i.shape, np.float32)}", tt(i.shape, np.float32))
    p(f"stablehlo.bitcast_convert {b16} : ({tt(x.shape, bf16)}) -> {tt(x.shape, np.int16)}", tt(x.shape, np.int16))
    for e, m in [(5, 10), (8, 7), (4, 3), (8, 23)]:
        p(f'"stablehlo.reduce_precision"(%a0) <{{exponent_bits = {e} : i32, mantissa_bits = {m} : i32}}> : ({f}) -> {f}', f)
    check(compiler, p, rtol=0.0)


def test_shape_and_index_ops(compiler):
    rng = np.random.default_rng(2)
    x = rng.normal(size=(3, 4, 5)).astype(np.float32)
    idx = np.array([[0, 1], [2, 3], [-1, 9], [1, 0]], np.int32)
    s = np.array(7, np.int32)
    xt, it = tt(x.shape, np.float32), tt(idx.shape, np.int32)
    p = Program(x, idx, s)
    p(f"stablehlo.transpose %a0, dims = [2, 0, 1] : ({xt}) -> tensor<5x3x4xf32>", "tensor<5x3x4xf32>")
    p(f"stablehlo.reshape %a0 : ({xt}) -> tensor<6x10xf32>", "tensor<6x10xf32>")
    p(f"stablehlo.reshape %a0 : ({xt}) -> tensor<3x1x20x1xf32>", "tensor<3x1x20x1xf32>")
    p(f"stablehlo.slice %a0 [0:3:2, 1:4, 0:5:3] : ({xt}) -> tensor<2x3x2xf32>", "tensor<2x3x2xf32>")
    p(f"stablehlo.reverse %a0, dims = [0, 2] : {xt}")
    zero = p("stablehlo.constant dense<-9.0> : tensor<f32>", out=False)
    p(f"stablehlo.pad %a0, {zero}, low = [1, -1, 0], high = [0, 2, -2], interior = [1, 0, 2] : ({xt}, tensor<f32>) -> tensor<6x5x11xf32>",
      "tensor<6x5x11xf32>")
    p(f"stablehlo.concatenate %a0, %a0, dim = 1 : ({xt}, {xt}) -> tensor<3x8x5xf32>", "tensor<3x8x5xf32>")
    p("stablehlo.iota dim = 1 : tensor<2x5xi32>", "tensor<2x5xi32>")
    p("stablehlo.iota dim = 0 : tensor<4x2xf32>", "tensor<4x2xf32>")
    p(f"stablehlo.broadcast_in_dim %a0, dims = [0, 2, 3] : ({xt}) -> tensor<3x2x4x5xf32>", "tensor<3x2x4x5xf32>")
    c0 = p("stablehlo.constant dense<1> : tensor<i32>", out=False)
    p(f"stablehlo.dynamic_slice %a0, {c0}, %a2, {c0}, sizes = [2, 2, 3] : ({xt}, tensor<i32>, tensor<i32>, tensor<i32>) -> tensor<2x2x3xf32>",
      "tensor<2x2x3xf32>")
    upd = p("stablehlo.constant dense<5.0> : tensor<2x2x2xf32>", out=False)
    p(f"stablehlo.dynamic_update_slice %a0, {upd}, %a2, {c0}, %a2 : ({xt}, tensor<2x2x2xf32>, tensor<i32>, tensor<i32>, tensor<i32>) -> {xt}",
      xt)
    p(f'"stablehlo.gather"(%a0, %a1) <{{dimension_numbers = #stablehlo.gather<offset_dims = [1], collapsed_slice_dims = [0, 1], start_index_map = [0, 1], index_vector_dim = 1>, indices_are_sorted = false, slice_sizes = array<i64: 1, 1, 4>}}> : ({xt}, {it}) -> tensor<4x4xf32>',
      "tensor<4x4xf32>")
    bidx = p("stablehlo.constant dense<[[[0], [3]], [[1], [1]], [[2], [0]]]> : tensor<3x2x1xi32>", out=False)
    p(f'"stablehlo.gather"(%a0, {bidx}) <{{dimension_numbers = #stablehlo.gather<offset_dims = [2], collapsed_slice_dims = [1], operand_batching_dims = [0], start_indices_batching_dims = [0], start_index_map = [1], index_vector_dim = 2>, indices_are_sorted = false, slice_sizes = array<i64: 1, 1, 5>}}> : ({xt}, tensor<3x2x1xi32>) -> tensor<3x2x5xf32>',
      "tensor<3x2x5xf32>")
    check(compiler, p, rtol=0.0)


def test_reductions(compiler):
    rng = np.random.default_rng(3)
    x = rng.normal(size=(4, 6, 5)).astype(np.float32)
    x[1, 2, 3] = np.nan
    n = rng.integers(-50, 50, size=(4, 6), dtype=np.int32)
    xt, nt = tt(x.shape, np.float32), tt(n.shape, np.int32)
    p = Program(x, n)
    zero = p("stablehlo.constant dense<0.0> : tensor<f32>", out=False)
    one = p("stablehlo.constant dense<1.0> : tensor<f32>", out=False)
    ninf = p("stablehlo.constant dense<0xFF800000> : tensor<f32>", out=False)
    p(f"stablehlo.reduce(%a0 init: {zero}) applies stablehlo.add across dimensions = [1] : ({xt}, tensor<f32>) -> tensor<4x5xf32>",
      "tensor<4x5xf32>")
    p(f"stablehlo.reduce(%a0 init: {ninf}) applies stablehlo.maximum across dimensions = [0, 2] : ({xt}, tensor<f32>) -> tensor<6xf32>",
      "tensor<6xf32>")
    p(f"stablehlo.reduce(%a0 init: {one}) applies stablehlo.multiply across dimensions = [2] : ({xt}, tensor<f32>) -> tensor<4x6xf32>",
      "tensor<4x6xf32>")
    p(f"stablehlo.reduce(%a0 init: {zero}) applies stablehlo.minimum across dimensions = [0, 1, 2] : ({xt}, tensor<f32>) -> tensor<f32>",
      "tensor<f32>")
    ci = p("stablehlo.constant dense<0> : tensor<i32>", out=False)
    p(f"stablehlo.reduce(%a1 init: {ci}) applies stablehlo.add across dimensions = [0] : ({nt}, tensor<i32>) -> tensor<6xi32>",
      "tensor<6xi32>")
    cmax = p("stablehlo.constant dense<-2147483648> : tensor<i32>", out=False)
    p(f"stablehlo.reduce(%a1 init: {cmax}) applies stablehlo.maximum across dimensions = [1] : ({nt}, tensor<i32>) -> tensor<4xi32>",
      "tensor<4xi32>")
    # argmax: a variadic reduce with a comparator body; ties go to the lower index.
    io = p(f"stablehlo.iota dim = 1 : {nt}", out=False)
    p.lines.append(f"""    %am:2 = stablehlo.reduce(%a1 init: {cmax}), ({io} init: {ci}) across dimensions = [1] : ({nt}, {nt}, tensor<i32>, tensor<i32>) -> (tensor<4xi32>, tensor<4xi32>)
     reducer(%p0: tensor<i32>, %q0: tensor<i32>) (%p1: tensor<i32>, %q1: tensor<i32>)  {{
      %g = stablehlo.compare GT, %p0, %q0, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
      %e = stablehlo.compare EQ, %p0, %q0, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
      %l = stablehlo.compare LT, %p1, %q1, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
      %el = stablehlo.and %e, %l : tensor<i1>
      %take = stablehlo.or %g, %el : tensor<i1>
      %v = stablehlo.select %take, %p0, %q0 : tensor<i1>, tensor<i32>
      %i = stablehlo.select %take, %p1, %q1 : tensor<i1>, tensor<i32>
      stablehlo.return %v, %i : tensor<i32>, tensor<i32>
    }}""")
    p.results += [("%am#0", "tensor<4xi32>"), ("%am#1", "tensor<4xi32>")]
    # A row reduction fused with its consumers (softmax shape).
    mx = p(f"stablehlo.reduce(%a0 init: {ninf}) applies stablehlo.maximum across dimensions = [2] : ({xt}, tensor<f32>) -> tensor<4x6xf32>",
           out=False)
    b = p(f"stablehlo.broadcast_in_dim {mx}, dims = [0, 1] : (tensor<4x6xf32>) -> {xt}", out=False)
    d = p(f"stablehlo.subtract %a0, {b} : {xt}", out=False)
    e = p(f"stablehlo.exponential {d} : {xt}", out=False)
    s = p(f"stablehlo.reduce({e} init: {zero}) applies stablehlo.add across dimensions = [2] : ({xt}, tensor<f32>) -> tensor<4x6xf32>",
          out=False)
    sb = p(f"stablehlo.broadcast_in_dim {s}, dims = [0, 1] : (tensor<4x6xf32>) -> {xt}", out=False)
    p(f"stablehlo.divide {e}, {sb} : {xt}")
    check(compiler, p, rtol=2e-6)


def test_sort_and_top_k(compiler):
    x = np.array([[3.0, np.nan, -0.0, 0.0, 1.0, -np.inf, 1.0, 2.0],
                  [5.0, 4.0, 4.0, 4.0, np.inf, -1.0, np.nan, 0.5]], np.float32)
    k = np.array([[2, 1, 2, 1, 0, 0, 2, 1], [1, 1, 1, 0, 0, 0, 1, 1]], np.int32)
    xt, kt = tt(x.shape, np.float32), tt(k.shape, np.int32)
    p = Program(x, k)
    # Sort by the integer key descending, stable, carrying the floats along.
    p.lines.append(f"""    %s:2 = "stablehlo.sort"(%a1, %a0) <{{dimension = 1 : i64, is_stable = true}}> ({{
    ^bb0(%l0: tensor<i32>, %r0: tensor<i32>, %l1: tensor<f32>, %r1: tensor<f32>):
      %c = stablehlo.compare GT, %l0, %r0, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
      stablehlo.return %c : tensor<i1>
    }}) : ({kt}, {xt}) -> ({kt}, {xt})""")
    p.results += [("%s#0", kt), ("%s#1", xt)]
    p.lines.append(f"""    %t = "stablehlo.sort"(%a0) <{{dimension = 0 : i64, is_stable = true}}> ({{
    ^bb0(%l: tensor<f32>, %r: tensor<f32>):
      %c = stablehlo.compare LT, %l, %r, TOTALORDER : (tensor<f32>, tensor<f32>) -> tensor<i1>
      stablehlo.return %c : tensor<i1>
    }}) : ({xt}) -> {xt}""")
    p.results.append(("%t", xt))
    p.lines.append(f"    %vals, %idx = chlo.top_k(%a0, k = 3) : {xt} -> (tensor<2x3xf32>, tensor<2x3xi32>)")
    p.results += [("%vals", "tensor<2x3xf32>"), ("%idx", "tensor<2x3xi32>")]
    check(compiler, p, rtol=0.0)


def test_scatter(compiler):
    x = np.arange(20, dtype=np.float32).reshape(5, 4)
    idx = np.array([[1], [3], [1], [7], [-1]], np.int32)
    upd = np.arange(20, dtype=np.float32).reshape(5, 4) * 10
    xt, it, ut = tt(x.shape, np.float32), tt(idx.shape, np.int32), tt(upd.shape, np.float32)
    p = Program(x, idx, upd)
    dn = ("#stablehlo.scatter<update_window_dims = [1], inserted_window_dims = [0], "
          "scatter_dims_to_operand_dims = [0], index_vector_dim = 1>")
    for body in ["%r = stablehlo.add %o, %u : tensor<f32>\n      stablehlo.return %r : tensor<f32>",
                 "stablehlo.return %u : tensor<f32>",
                 "%r = stablehlo.maximum %o, %u : tensor<f32>\n      stablehlo.return %r : tensor<f32>"]:
        p(f""""stablehlo.scatter"(%a0, %a1, %a2) <{{indices_are_sorted = false, scatter_dimension_numbers = {dn}, unique_indices = false}}> ({{
    ^bb0(%o: tensor<f32>, %u: tensor<f32>):
      {body}
    }}) : ({xt}, {it}, {ut}) -> {xt}""", xt)
    # Batched scatter (take_along_axis's transpose): row b of the operand gets its own indices.
    bidx = p("stablehlo.constant dense<[[[0], [3]], [[1], [1]], [[3], [9]], [[2], [0]], [[-1], [2]]]> : tensor<5x2x1xi32>",
             out=False)
    bupd = p("stablehlo.constant dense<[[1.0, 2.0], [3.0, 4.0], [5.0, 6.0], [7.0, 8.0], [9.0, 10.0]]> : tensor<5x2xf32>",
             out=False)
    bdn = ("#stablehlo.scatter<inserted_window_dims = [1], input_batching_dims = [0], "
           "scatter_indices_batching_dims = [0], scatter_dims_to_operand_dims = [1], index_vector_dim = 2>")
    p(f""""stablehlo.scatter"(%a0, {bidx}, {bupd}) <{{indices_are_sorted = false, scatter_dimension_numbers = {bdn}, unique_indices = false}}> ({{
    ^bb0(%o: tensor<f32>, %u: tensor<f32>):
      %r = stablehlo.add %o, %u : tensor<f32>
      stablehlo.return %r : tensor<f32>
    }}) : ({xt}, tensor<5x2x1xi32>, tensor<5x2xf32>) -> {xt}""", xt)
    check(compiler, p, rtol=0.0)


def test_windows_and_convolution(compiler):
    rng = np.random.default_rng(4)
    x = rng.normal(size=(2, 7, 6, 4)).astype(np.float32)
    w = rng.normal(size=(3, 2, 2, 6)).astype(np.float32)
    xt, wt = tt(x.shape, np.float32), tt(w.shape, np.float32)
    p = Program(x, w)
    ninf = p("stablehlo.constant dense<0xFF800000> : tensor<f32>", out=False)
    zero = p("stablehlo.constant dense<0.0> : tensor<f32>", out=False)
    p(f""""stablehlo.reduce_window"(%a0, {ninf}) <{{window_dimensions = array<i64: 1, 3, 2, 1>, window_strides = array<i64: 1, 2, 1, 1>, base_dilations = array<i64: 1, 1, 2, 1>, window_dilations = array<i64: 1, 2, 1, 1>, padding = dense<[[0, 0], [1, 2], [0, 1], [0, 0]]> : tensor<4x2xi64>}}> ({{
    ^bb0(%p: tensor<f32>, %q: tensor<f32>):
      %m = stablehlo.maximum %p, %q : tensor<f32>
      stablehlo.return %m : tensor<f32>
    }}) : ({xt}, tensor<f32>) -> tensor<2x3x11x4xf32>""", "tensor<2x3x11x4xf32>")
    p(f""""stablehlo.reduce_window"(%a0, {zero}) <{{window_dimensions = array<i64: 1, 7, 1, 1>, window_strides = array<i64: 1, 1, 1, 1>, padding = dense<[[0, 0], [6, 0], [0, 0], [0, 0]]> : tensor<4x2xi64>}}> ({{
    ^bb0(%p: tensor<f32>, %q: tensor<f32>):
      %m = stablehlo.add %p, %q : tensor<f32>
      stablehlo.return %m : tensor<f32>
    }}) : ({xt}, tensor<f32>) -> {xt}""", xt)
    # NHWC x HWIO, stride 2, padding, rhs dilation, 2 feature groups, reversed window.
    p(f"stablehlo.convolution(%a0, %a1) dim_numbers = [b, 0, 1, f]x[0, 1, i, o]->[b, 0, 1, f], "
      f"window = {{stride = [2, 1], pad = [[1, 1], [0, 2]], lhs_dilate = [1, 1], rhs_dilate = [2, 1], reverse = [true, false]}} "
      f"{{batch_group_count = 1 : i64, feature_group_count = 2 : i64}} : ({xt}, {wt}) -> tensor<2x3x7x6xf32>",
      "tensor<2x3x7x6xf32>")
    # lhs dilation (a transposed convolution).
    w1 = p(f"stablehlo.slice %a1 [0:2, 0:2, 0:2, 0:4] : ({wt}) -> tensor<2x2x2x4xf32>", out=False)
    p(f"stablehlo.convolution(%a0, {w1}) dim_numbers = [b, 0, 1, f]x[0, 1, i, o]->[b, 0, 1, f], "
      f"window = {{stride = [1, 1], pad = [[1, 1], [1, 1]], lhs_dilate = [2, 2], rhs_dilate = [1, 1]}} "
      f"{{batch_group_count = 1 : i64, feature_group_count = 2 : i64}} : ({xt}, tensor<2x2x2x4xf32>) -> tensor<2x14x12x4xf32>",
      "tensor<2x14x12x4xf32>")
    check(compiler, p, rtol=2e-5, atol=1e-5)


def _window(p, x, init, body, attrs, out_type):
    return p(f""""stablehlo.reduce_window"(%a{x}, {init}) <{{{attrs}}}> ({{
    ^bb0(%p: {body[1]}, %q: {body[1]}):
      %m = stablehlo.{body[0]} %p, %q : {body[1]}
      stablehlo.return %m : {body[1]}
    }}) : ({out_type[0]}, {body[1]}) -> {out_type[1]}""", out_type[1])


def test_window_lowerings(compiler):
    """Each lowering of reduce_window: running scans (cumulative sums, forwards), windows
    clipped to the operand (an init that is an identity), and the general form (an init that
    is not, which the padding must contribute)."""
    rng = np.random.default_rng(5)
    x = rng.normal(size=(3, 9, 5)).astype(np.float32)
    ints = rng.integers(-3, 4, size=(4, 6)).astype(np.int32)
    xt, it = tt(x.shape, np.float32), tt(ints.shape, np.int32)
    f32, i32 = "tensor<f32>", "tensor<i32>"
    p = Program(x, ints)
    ninf = p("stablehlo.constant dense<0xFF800000> : tensor<f32>", out=False)
    zero = p("stablehlo.constant dense<0.0> : tensor<f32>", out=False)
    half = p("stablehlo.constant dense<0.5> : tensor<f32>", out=False)
    one = p("stablehlo.constant dense<1> : tensor<i32>", out=False)
    izero = p("stablehlo.constant dense<0> : tensor<i32>", out=False)
    win = "window_dimensions = array<i64: {}>, window_strides = array<i64: {}>, padding = dense<{}> : tensor<3x2xi64>"
    # Cumulative sum along the last dim (a scalar running value) and the middle one (rows).
    _window(p, 0, zero, ("add", f32), win.format("1, 1, 5", "1, 1, 1", "[[0, 0], [0, 0], [4, 0]]"), (xt, xt))
    _window(p, 0, zero, ("add", f32), win.format("1, 9, 1", "1, 1, 1", "[[0, 0], [8, 0], [0, 0]]"), (xt, xt))
    # A window longer than the dim is still a prefix; reversed (padding high) is not a scan.
    _window(p, 0, ninf, ("maximum", f32), win.format("1, 12, 1", "1, 1, 1", "[[0, 0], [11, 0], [0, 0]]"), (xt, xt))
    _window(p, 0, zero, ("add", f32), win.format("1, 9, 1", "1, 1, 1", "[[0, 0], [0, 8], [0, 0]]"), (xt, xt))
    # Strided, padded both sides, window-dilated: clipped to the operand.
    _window(p, 0, ninf, ("maximum", f32),
            win.format("2, 3, 2", "1, 2, 2", "[[1, 0], [2, 3], [1, 1]]") + ", window_dilations = array<i64: 1, 2, 1>",
            (xt, "tensor<3x5x3xf32>"))
    # The init 0.5 is not an identity of maximum: padding takes part.
    _window(p, 0, half, ("maximum", f32), win.format("1, 3, 3", "1, 1, 1", "[[0, 0], [1, 1], [1, 1]]"), (xt, xt))
    # Integers: a running product over rows and a padded window sum.
    win2 = "window_dimensions = array<i64: {}>, window_strides = array<i64: {}>, padding = dense<{}> : tensor<2x2xi64>"
    _window(p, 1, one, ("multiply", i32), win2.format("4, 1", "1, 1", "[[3, 0], [0, 0]]"), (it, it))
    _window(p, 1, izero, ("add", i32), win2.format("2, 3", "2, 1", "[[1, 1], [2, 0]]"), (it, "tensor<3x6xi32>"))
    check(compiler, p, rtol=2e-6, atol=1e-6)


def test_dot_general_layouts_and_types(compiler):
    rng = np.random.default_rng(5)
    a = rng.normal(size=(3, 4, 2)).astype(np.float32)   # [k, b, m]
    b = rng.normal(size=(2, 5, 3)).astype(np.float32)   # [b?]: used as [n?]
    c = rng.integers(-100, 100, size=(4, 6), dtype=np.int32)
    d = rng.integers(-100, 100, size=(6, 3), dtype=np.int32)
    at, bt, ct, dt = (tt(v.shape, v.dtype) for v in (a, b, c, d))
    p = Program(a, b, c, d)
    # batch dim 1 of lhs with dim 0 of rhs, contracting lhs 0 with rhs 2: needs permuted copies.
    p(f"stablehlo.dot_general %a0, %a1, batching_dims = [2] x [0], contracting_dims = [0] x [2] : ({at}, {bt}) -> tensor<2x4x5xf32>",
      "tensor<2x4x5xf32>")
    # lhs contracting on its first dim (a transposed BLAS operand).
    p(f"stablehlo.dot_general %a2, %a2, contracting_dims = [0] x [0] : ({ct}, {ct}) -> tensor<6x6xi32>",
      "tensor<6x6xi32>")
    p(f"stablehlo.dot_general %a2, %a3, contracting_dims = [1] x [0] : ({ct}, {dt}) -> tensor<4x3xi32>", "tensor<4x3xi32>")
    cf = p(f"stablehlo.convert %a2 : ({ct}) -> tensor<4x6xf32>", out=False)
    p(f"stablehlo.dot_general {cf}, {cf}, contracting_dims = [0] x [0] : (tensor<4x6xf32>, tensor<4x6xf32>) -> tensor<6x6xf32>",
      "tensor<6x6xf32>")
    v = p(f"stablehlo.slice {cf} [0:4, 0:1] : (tensor<4x6xf32>) -> tensor<4x1xf32>", out=False)
    v1 = p(f"stablehlo.reshape {v} : (tensor<4x1xf32>) -> tensor<4xf32>", out=False)
    p(f"stablehlo.dot_general {v1}, {cf}, contracting_dims = [0] x [0] : (tensor<4xf32>, tensor<4x6xf32>) -> tensor<6xf32>",
      "tensor<6xf32>")
    p(f"stablehlo.dot_general {v1}, {v1}, contracting_dims = [0] x [0] : (tensor<4xf32>, tensor<4xf32>) -> tensor<f32>",
      "tensor<f32>")
    hb = p(f"stablehlo.convert {cf} : (tensor<4x6xf32>) -> tensor<4x6xbf16>", out=False)
    p(f"stablehlo.dot_general {hb}, {hb}, contracting_dims = [0] x [0] : (tensor<4x6xbf16>, tensor<4x6xbf16>) -> tensor<6x6xf32>",
      "tensor<6x6xf32>")
    check(compiler, p, rtol=1e-5, atol=1e-5)


def test_dot_general_of_scalars(compiler):
    """Rank-0 operands and no contracting dims (``lax.dot_general`` of two scalars, as JAX's own
    tests have it): a product in the result's type, on both tiers."""
    p = Program(np.float32(1.5), np.float32(-4.25), np.int32(-7), np.int32(123456), bf16(1.0078125), bf16(3.0))
    f32, i32, b16 = "tensor<f32>", "tensor<i32>", "tensor<bf16>"
    p(f"stablehlo.dot_general %a0, %a1, contracting_dims = [] x [] : ({f32}, {f32}) -> {f32}", f32)
    p(f"stablehlo.dot_general %a2, %a3, contracting_dims = [] x [] : ({i32}, {i32}) -> {i32}", i32)
    p(f"stablehlo.dot_general %a4, %a5, contracting_dims = [] x [] : ({b16}, {b16}) -> {f32}", f32)
    p(f"stablehlo.dot_general %a4, %a5, contracting_dims = [] x [] : ({b16}, {b16}) -> {b16}", b16)
    check(compiler, p, rtol=0.0)
    assert_same_bits(eager_program(p.text()).run(p.args), compiler.compile(p.text()).run(p.args), "scalar dot")


def test_while_and_case(compiler):
    x = np.arange(6, dtype=np.float32)
    n = np.array(5, np.int32)
    sel = np.array([0, 1, 2, 7, -1], np.int32)
    p = Program(x, n, sel)
    p.lines.append("""    %c0 = stablehlo.constant dense<0> : tensor<i32>
    %c1 = stablehlo.constant dense<1> : tensor<i32>
    %w:3 = stablehlo.while(%i = %c0, %acc = %a0, %cnt = %c0) : tensor<i32>, tensor<6xf32>, tensor<i32>
    cond {
      %lt = stablehlo.compare LT, %i, %a1, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
      stablehlo.return %lt : tensor<i1>
    } do {
      %i1 = stablehlo.add %i, %c1 : tensor<i32>
      %h = stablehlo.constant dense<0.5> : tensor<6xf32>
      %m = stablehlo.multiply %acc, %h : tensor<6xf32>
      %s = stablehlo.add %m, %a0 : tensor<6xf32>
      %inner:2 = stablehlo.while(%j = %c0, %k = %cnt) : tensor<i32>, tensor<i32>
      cond {
        %lt2 = stablehlo.compare LT, %j, %i1, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
        stablehlo.return %lt2 : tensor<i1>
      } do {
        %j1 = stablehlo.add %j, %c1 : tensor<i32>
        %k1 = stablehlo.add %k, %j : tensor<i32>
        stablehlo.return %j1, %k1 : tensor<i32>, tensor<i32>
      }
      stablehlo.return %i1, %s, %inner#1 : tensor<i32>, tensor<6xf32>, tensor<i32>
    }""")
    p.results += [("%w#0", "tensor<i32>"), ("%w#1", "tensor<6xf32>"), ("%w#2", "tensor<i32>")]
    for k in range(5):
        p.lines.append(f"""    %idx{k} = stablehlo.slice %a2 [{k}:{k + 1}] : (tensor<5xi32>) -> tensor<1xi32>
    %sc{k} = stablehlo.reshape %idx{k} : (tensor<1xi32>) -> tensor<i32>
    %case{k} = "stablehlo.case"(%sc{k}) ({{
      %r = stablehlo.negate %a0 : tensor<6xf32>
      stablehlo.return %r : tensor<6xf32>
    }}, {{
      %r = stablehlo.add %a0, %a0 : tensor<6xf32>
      stablehlo.return %r : tensor<6xf32>
    }}, {{
      stablehlo.return %a0 : tensor<6xf32>
    }}) : (tensor<i32>) -> tensor<6xf32>""")
        p.results.append((f"%case{k}", "tensor<6xf32>"))
    check(compiler, p, rtol=0.0)


def test_if_map_select_and_scatter_rng_and_composite(compiler):
    rng = np.random.default_rng(6)
    x = rng.normal(size=(2, 6, 5)).astype(np.float32)
    src = rng.normal(size=(2, 3, 2)).astype(np.float32)
    state = np.array([0x0123456789ABCDEF, 5], np.uint64)
    state3 = np.array([42, 2**64 - 2, 7], np.uint64)
    flag = np.array(True)
    xt, st = tt(x.shape, np.float32), tt(src.shape, np.float32)
    p = Program(x, src, state, state3, flag)
    p.lines.append(f"""    %if = "stablehlo.if"(%a4) ({{
      %n = stablehlo.negate %a0 : {xt}
      stablehlo.return %n : {xt}
    }}, {{
      stablehlo.return %a0 : {xt}
    }}) : (tensor<i1>) -> {xt}""")
    p.results.append(("%if", xt))
    p(f""""stablehlo.map"(%a0, %a0) <{{dimensions = array<i64: 0, 1, 2>}}> ({{
    ^bb0(%m0: tensor<f32>, %m1: tensor<f32>):
      %q = stablehlo.multiply %m0, %m1 : tensor<f32>
      %r = stablehlo.subtract %q, %m0 : tensor<f32>
      stablehlo.return %r : tensor<f32>
    }}) : ({xt}, {xt}) -> {xt}""", xt)
    zero = p("stablehlo.constant dense<0.0> : tensor<f32>", out=False)
    # max-pool gradient: 3x3 windows, stride 2x3, padded.
    p(f""""stablehlo.select_and_scatter"(%a0, %a1, {zero}) <{{window_dimensions = array<i64: 1, 3, 3>, window_strides = array<i64: 1, 2, 3>, padding = dense<[[0, 0], [1, 0], [1, 1]]> : tensor<3x2xi64>}}> ({{
    ^bb0(%s0: tensor<f32>, %s1: tensor<f32>):
      %ge = stablehlo.compare GE, %s0, %s1, FLOAT : (tensor<f32>, tensor<f32>) -> tensor<i1>
      stablehlo.return %ge : tensor<i1>
    }}, {{
    ^bb0(%t0: tensor<f32>, %t1: tensor<f32>):
      %sum = stablehlo.add %t0, %t1 : tensor<f32>
      stablehlo.return %sum : tensor<f32>
    }}) : ({xt}, {st}, tensor<f32>) -> {xt}""", xt)
    for alg, sarg, stype, out in [("THREE_FRY", "%a2", "tensor<2xui64>", "tensor<3x5xui32>"),
                                  ("THREE_FRY", "%a2", "tensor<2xui64>", "tensor<7xui64>"),
                                  ("PHILOX", "%a3", "tensor<3xui64>", "tensor<2x3xui32>"),
                                  ("DEFAULT", "%a3", "tensor<3xui64>", "tensor<9xui8>")]:
        n = len(p.lines)
        p.lines.append(f'    %rng{n}:2 = "stablehlo.rng_bit_generator"({sarg}) <{{rng_algorithm = #stablehlo<rng_algorithm {alg}>}}> : ({stype}) -> ({stype}, {out})')
        p.results += [(f"%rng{n}#0", stype), (f"%rng{n}#1", out)]
    p(f"stablehlo.get_dimension_size %a0, dim = 1 : ({xt}) -> tensor<i32>", "tensor<i32>")
    check(compiler, p, rtol=0.0)


@pytest.mark.parametrize("flag", [True, False])
def test_a_branch_never_updates_an_outer_value_in_place(compiler, flag):
    """An update in one branch (or a loop body) of a value the enclosing block still reads
    must copy it: the branch's own plan sees one reader, the enclosing block sees three."""
    x = np.arange(4, dtype=np.float32)
    p = Program(x, np.array(flag))
    p.lines.append("""    %x = stablehlo.add %a0, %a0 : tensor<4xf32>
    %u = stablehlo.constant dense<9.0> : tensor<1xf32>
    %i = stablehlo.constant dense<0> : tensor<i32>
    %if = "stablehlo.if"(%a1) ({
      %d = stablehlo.dynamic_update_slice %x, %u, %i : (tensor<4xf32>, tensor<1xf32>, tensor<i32>) -> tensor<4xf32>
      stablehlo.return %d : tensor<4xf32>
    }, {
      stablehlo.return %x : tensor<4xf32>
    }) : (tensor<i1>) -> tensor<4xf32>
    %c1 = stablehlo.constant dense<1> : tensor<i32>
    %w:2 = stablehlo.while(%k = %i, %acc = %x) : tensor<i32>, tensor<4xf32>
    cond {
      %lt = stablehlo.compare LT, %k, %c1, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
      stablehlo.return %lt : tensor<i1>
    } do {
      %d2 = stablehlo.dynamic_update_slice %x, %u, %c1 : (tensor<4xf32>, tensor<1xf32>, tensor<i32>) -> tensor<4xf32>
      %k1 = stablehlo.add %k, %c1 : tensor<i32>
      stablehlo.return %k1, %d2 : tensor<i32>, tensor<4xf32>
    }""")
    p.results += [("%if", "tensor<4xf32>"), ("%w#1", "tensor<4xf32>"), ("%x", "tensor<4xf32>")]
    check(compiler, p, rtol=0.0)


_DUS = "stablehlo.dynamic_update_slice {}, %u, %i : (tensor<4xf32>, tensor<1xf32>, tensor<i32>) -> tensor<4xf32>"
_LOOP_HEAD = """    %x = stablehlo.add %a0, %a0 : tensor<4xf32>
    %y = stablehlo.multiply %a0, %a0 : tensor<4xf32>
    %u = stablehlo.constant dense<9.0> : tensor<1xf32>
    %i = stablehlo.constant dense<0> : tensor<i32>
    %c1 = stablehlo.constant dense<1> : tensor<i32>
    %c3 = stablehlo.constant dense<3> : tensor<i32>
    %w:3 = stablehlo.while(%k = %i, %p = %x, %q = {q}) : tensor<i32>, tensor<4xf32>, tensor<4xf32>
    cond {{
      %lt = stablehlo.compare LT, %k, %c3, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
      stablehlo.return %lt : tensor<i1>
    }} do {{
      %k1 = stablehlo.add %k, %c1 : tensor<i32>
{body}
    }}"""


@pytest.mark.parametrize("case", ["init read after", "one init twice", "carries an outer value", "one value twice",
                                  "update after the loop"])
def test_loop_carried_arrays_are_updated_in_place_only_when_nothing_else_sees_them(compiler, case):
    """Control-flow results can share their arrays with other values (a body carries an outer
    value, or one value in two places); an update in place of one of them must not change the
    other. Each case returns both."""
    bodies = {
        "init read after": ("%x", f"      %d = {_DUS.format('%p')}\n      stablehlo.return %k1, %d, %q"),
        "one init twice": ("%x", f"      %d = {_DUS.format('%p')}\n      stablehlo.return %k1, %d, %q"),
        "carries an outer value": ("%y", f"      %d = {_DUS.format('%p')}\n      %s = stablehlo.add %d, %q : tensor<4xf32>\n"
                                         "      stablehlo.return %k1, %y, %s"),
        "one value twice": ("%y", "      %s = stablehlo.add %p, %q : tensor<4xf32>\n      stablehlo.return %k1, %s, %s"),
        "update after the loop": ("%y", "      %s = stablehlo.add %p, %q : tensor<4xf32>\n      stablehlo.return %k1, %s, %s"),
    }
    q, body = bodies[case]
    p = Program(np.arange(4, dtype=np.float32))
    p.lines.append(_LOOP_HEAD.format(q=q, body=body + " : tensor<i32>, tensor<4xf32>, tensor<4xf32>"))
    if case == "update after the loop":
        p.lines.append(f"    %after = {_DUS.format('%w#1')}")
        p.results += [("%after", "tensor<4xf32>"), ("%w#2", "tensor<4xf32>")]
    else:
        p.results += [("%w#1", "tensor<4xf32>"), ("%w#2", "tensor<4xf32>"), ("%x", "tensor<4xf32>"),
                      ("%y", "tensor<4xf32>")]
    check(compiler, p, rtol=0.0)


@pytest.mark.parametrize("flag", [True, False])
def test_a_branch_result_that_is_an_outer_value_or_another_result_is_copied_before_an_update(compiler, flag):
    x = np.arange(4, dtype=np.float32)
    p = Program(x, np.array(flag))
    p.lines.append("""    %x = stablehlo.add %a0, %a0 : tensor<4xf32>
    %y = stablehlo.multiply %a0, %a0 : tensor<4xf32>
    %u = stablehlo.constant dense<9.0> : tensor<1xf32>
    %i = stablehlo.constant dense<0> : tensor<i32>
    %if:3 = "stablehlo.if"(%a1) ({
      %s = stablehlo.add %x, %y : tensor<4xf32>
      stablehlo.return %x, %s, %s : tensor<4xf32>, tensor<4xf32>, tensor<4xf32>
    }, {
      stablehlo.return %y, %y, %y : tensor<4xf32>, tensor<4xf32>, tensor<4xf32>
    }) : (tensor<i1>) -> (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>)""")
    p.lines.append(f"    %d0 = {_DUS.format('%if#0')}")
    p.lines.append(f"    %d1 = {_DUS.format('%if#1')}")
    p.results += [("%d0", "tensor<4xf32>"), ("%d1", "tensor<4xf32>"), ("%if#2", "tensor<4xf32>"),
                  ("%x", "tensor<4xf32>"), ("%y", "tensor<4xf32>")]
    check(compiler, p, rtol=0.0)


def test_a_scan_updates_its_stacked_output_in_place(compiler):
    """The scan pattern (the body updates a carried array and carries the result back in its
    place) writes one slice per step, never copying the whole array, from an input or not."""
    for init in ("%a0", "%x"):
        p = Program(np.arange(64, dtype=np.float32).reshape(16, 4))
        p.lines.append(f"""    %x = stablehlo.add %a0, %a0 : tensor<16x4xf32>
    %u = stablehlo.constant dense<9.0> : tensor<1x4xf32>
    %z = stablehlo.constant dense<0> : tensor<i32>
    %c1 = stablehlo.constant dense<1> : tensor<i32>
    %c16 = stablehlo.constant dense<16> : tensor<i32>
    %w:2 = stablehlo.while(%k = %z, %s = {init}) : tensor<i32>, tensor<16x4xf32>
    cond {{
      %lt = stablehlo.compare LT, %k, %c16, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
      stablehlo.return %lt : tensor<i1>
    }} do {{
      %d = stablehlo.dynamic_update_slice %s, %u, %k, %z : (tensor<16x4xf32>, tensor<1x4xf32>, tensor<i32>, tensor<i32>) -> tensor<16x4xf32>
      %k1 = stablehlo.add %k, %c1 : tensor<i32>
      stablehlo.return %k1, %d : tensor<i32>, tensor<16x4xf32>
    }}""")
        p.results += [("%w#1", "tensor<16x4xf32>"), ("%x", "tensor<16x4xf32>")]
        check(compiler, p, rtol=0.0)
        source = compiler.compile(p.text()).source
        loop = source[source.index("while True:"):]
        loop = loop[:loop.index("\n    return")]
        assert "np.empty" not in loop and ".copy()" not in loop, loop


def _ordered_next_after(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """C's nextafter through the total order of the bit patterns: independent of the plugins'
    sign-magnitude stepping."""
    bits = 8 * x.dtype.itemsize
    u = np.dtype(f"u{x.dtype.itemsize}")
    mask = (1 << (bits - 1)) - 1
    # Sign-magnitude bits as an ordered integer; -0.0 and +0.0 both map to 0.
    kx = [-(b & mask) if b >> (bits - 1) else b for b in map(int, np.ravel(x.view(u)))]
    wide_x, wide_y = x.astype(np.float64), y.astype(np.float64)
    out = []
    for k, a, b, yb in zip(kx, wide_x, wide_y, np.ravel(y.view(u))):
        if a != a or b != b:
            out.append(None)
        elif a == b:
            out.append(int(yb))
        else:
            n = k + (1 if b > a else -1)
            if n == 0 and a != 0:  # stepping onto zero keeps x's sign
                n_bits = 0 if a > 0 else 1 << (bits - 1)
            else:
                n_bits = n if n >= 0 else (-n) | (1 << (bits - 1))
            out.append(n_bits)
    nan = np.array(np.nan, x.dtype)
    return np.array([nan if o is None else np.array(o, u).view(x.dtype) for o in out], x.dtype)


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16, bf16])
def test_next_after_steps_one_value_toward_the_other_in_every_width(compiler, dtype):
    vals = [0.0, -0.0, 1.0, -1.0, 1e-45, -1e-45, np.inf, -np.inf, np.nan, 3.0e38, -3.0e38, 2.5, 1e-40, 6e-8,
            65504.0]
    with np.errstate(over="ignore"):
        x = np.array([a for a in vals for _ in vals], dtype)
        y = np.array([b for _ in vals for b in vals], dtype)
    prog = Program(x, y, np.array(1.5, dtype))
    t, s = tt(x.shape, dtype), tt((), dtype)
    prog(f"chlo.next_after %a0, %a1 : {t}")
    prog(f"chlo.next_after %a2, %a2 : {s}")
    text = prog.text()
    expected = _ordered_next_after(x, y)
    got = compiler.compile(text).run(prog.args)
    ref = Interpreter(verify(parse_module(text))).run(prog.args)
    assert_same_bits(eager_program(text).run(prog.args), got, "eager tier against compiled")
    for name, out in (("numba_cpu", got), ("reference", ref)):
        nan = np.isnan(expected.astype(np.float64))
        assert np.isnan(out[0].astype(np.float64))[nan].all(), name
        np.testing.assert_array_equal(out[0][~nan].view(f"u{x.dtype.itemsize}"),
                                      expected[~nan].view(f"u{x.dtype.itemsize}"), err_msg=name)
        assert out[1] == np.array(1.5, dtype), name


ODD_AT_ZERO = ["stablehlo.exponential_minus_one", "stablehlo.log_plus_one", "stablehlo.tanh", "stablehlo.sine",
               "stablehlo.tan", "stablehlo.cbrt", "stablehlo.sqrt", "chlo.erf", "chlo.erf_inv", "chlo.sinh",
               "chlo.asin", "chlo.atan", "chlo.asinh", "chlo.atanh", "chlo.tan"]


@pytest.mark.parametrize("dtype", [np.float32, np.float64, bf16])
def test_functions_that_are_odd_at_zero_keep_its_sign(compiler, dtype):
    """f(-0) is -0 and f(+0) is +0 for these, in XLA as in C (jax.nn.elu of -0 is -0)."""
    x = np.array([-0.0, 0.0], dtype)
    prog = Program(x)
    t = tt(x.shape, dtype)
    for name in ODD_AT_ZERO:
        prog(f"{name} %a0 : {t}")
    text = prog.text()
    got = compiler.compile(text).run(prog.args)
    assert_same_bits(eager_program(text).run(prog.args), got, "eager tier against compiled")
    ref = Interpreter(verify(parse_module(text))).run(prog.args)
    for plugin, outs in (("numba_cpu", got), ("reference", ref)):
        for name, out in zip(ODD_AT_ZERO, outs):
            assert out.astype(np.float64).tolist() == [0.0, 0.0], (plugin, name)
            assert np.signbit(out.astype(np.float64)).tolist() == [True, False], (plugin, name)


@pytest.mark.parametrize("src, dst, shape", [
    (np.float32, np.uint8, (2, 3)), (np.float64, np.uint32, (5,)), (np.float32, np.int16, ()),
    (bf16, np.uint8, (4,)), (np.uint64, bf16, (0, 2)), (np.int64, np.float16, (3,)),
])
def test_bitcast_convert_to_another_width_both_ways(compiler, src, dst, shape):
    """f32[2,3] -> ui8[2,3,4] and back, as XLA lays the parts out (little-endian, the last
    dimension holding the parts), on both tiers and the reference."""
    rng = np.random.default_rng(5)
    raw = rng.integers(0, 256, size=(*shape, np.dtype(src).itemsize), dtype=np.uint8)
    x = raw.view(src).reshape(shape)
    k = np.dtype(src).itemsize // np.dtype(dst).itemsize
    parts = x.reshape(-1).view(dst).reshape(*shape, k)
    prog = Program(x, parts)
    prog(f"stablehlo.bitcast_convert %a0 : ({tt(shape, src)}) -> {tt((*shape, k), dst)}")
    prog(f"stablehlo.bitcast_convert %a1 : ({tt((*shape, k), dst)}) -> {tt(shape, src)}")
    text = prog.text()
    got = compiler.compile(text).run(prog.args)
    ref = Interpreter(verify(parse_module(text))).run(prog.args)
    assert_same_bits(eager_program(text).run(prog.args), got, "eager tier against compiled")
    for plugin, (narrow, wide) in (("numba_cpu", got), ("reference", ref)):
        assert narrow.shape == (*shape, k) and wide.shape == shape, plugin
        np.testing.assert_array_equal(narrow.reshape(-1).view(np.uint8), raw.reshape(-1), err_msg=plugin)
        np.testing.assert_array_equal(wide.reshape(-1).view(np.uint8), raw.reshape(-1), err_msg=plugin)


@pytest.mark.parametrize("dtype, rtol", [(np.float32, 2e-6), (np.float64, 1e-12), (bf16, 1e-2)])
def test_digamma_i1e_polygamma_zeta_as_scipy_computes_them(compiler, dtype, rtol):
    """numba_cpu's special functions (.special) against the reference (scipy), on both tiers,
    poles and infinities included."""
    x = np.array([0.1, 0.5, 1.0, 2.5, 9.5, 10.5, 150.0, -0.5, -2.25, 0.0, -0.0, -3.0, np.inf, -np.inf, np.nan,
                  1e-3, 19.5, 20.5, 80.0], dtype)
    n = np.array([0, 1, 2, 3, 1, 2, 1, 1, 2, 1, 1, 1, 1, 1, 1, 0, 4, 1, 2], dtype)
    s = np.array([2.0, 1.5, 3.0, 1.0, 0.5, 4.0, 2.0, 2.0, 3.0, 2.0, 2.0, 2.0, 2.0, 2.0, 2.0, 6.0, 1.1, 2.0, 9.0],
                 dtype)
    prog = Program(x, n, s)
    t = tt(x.shape, dtype)
    prog(f"chlo.digamma %a0 : {t} -> {t}")
    prog(f"chlo.bessel_i1e %a0 : {t} -> {t}")
    prog(f"chlo.polygamma %a1, %a0 : {t}, {t} -> {t}")
    prog(f"chlo.zeta %a2, %a0 : {t}, {t} -> {t}")
    text = prog.text()
    got = compiler.compile(text).run(prog.args)
    assert_same_bits(eager_program(text).run(prog.args), got, "eager tier against compiled")
    expected = Interpreter(verify(parse_module(text))).run(prog.args)
    for name, g, e in zip(("digamma", "i1e", "polygamma", "zeta"), got, expected):
        g64, e64 = g.astype(np.float64), e.astype(np.float64)
        np.testing.assert_array_equal(np.isnan(g64), np.isnan(e64), err_msg=name)
        np.testing.assert_allclose(g64[~np.isnan(e64)], e64[~np.isnan(e64)], rtol=rtol, atol=0, err_msg=name)
    assert np.signbit(got[1][10].astype(np.float64))  # i1e(-0) = -0


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_triangular_solve_and_cholesky_in_every_variant(compiler, dtype):
    """What jnp.linalg (inv, solve, cholesky) lowers to off XLA's cpu platform, on both tiers,
    against the reference and against the equations themselves; a zero pivot is inf/NaN."""
    rng = np.random.default_rng(11)
    a = (rng.normal(size=(2, 3, 4, 4)) + 4 * np.eye(4)).astype(dtype)
    b_left = rng.normal(size=(2, 3, 4, 5)).astype(dtype)
    b_right = rng.normal(size=(2, 3, 5, 4)).astype(dtype)
    spd = (a @ np.swapaxes(a, -1, -2)).astype(dtype)
    singular = np.zeros((1, 2, 2), dtype)
    prog = Program(a, b_left, b_right, spd, singular, np.ones((1, 2, 1), dtype))
    ta, tl, tr = tt(a.shape, dtype), tt(b_left.shape, dtype), tt(b_right.shape, dtype)
    variants = [(left, lower, unit, trans) for left in (True, False) for lower in (True, False)
                for unit, trans in ((False, "NO_TRANSPOSE"), (True, "TRANSPOSE"))]
    for left, lower, unit, trans in variants:
        b, t = ("%a1", tl) if left else ("%a2", tr)
        prog(f'"stablehlo.triangular_solve"(%a0, {b}) <{{left_side = {str(left).lower()}, lower = {str(lower).lower()}, '
             f'transpose_a = #stablehlo<transpose {trans}>, unit_diagonal = {str(unit).lower()}}}> : ({ta}, {t}) -> {t}')
    prog(f'"stablehlo.cholesky"(%a3) <{{lower = true}}> : ({ta}) -> {ta}')
    prog(f'"stablehlo.cholesky"(%a3) <{{lower = false}}> : ({ta}) -> {ta}')
    ts, tb = tt(singular.shape, dtype), tt((1, 2, 1), dtype)
    prog(f'"stablehlo.triangular_solve"(%a4, %a5) <{{left_side = true, lower = true, '
         f'transpose_a = #stablehlo<transpose NO_TRANSPOSE>, unit_diagonal = false}}> : ({ts}, {tb}) -> {tb}')
    text = prog.text()
    got = compiler.compile(text).run(prog.args)
    assert_same_bits(eager_program(text).run(prog.args), got, "eager tier against compiled")
    ref = Interpreter(verify(parse_module(text))).run(prog.args)
    tol = 1e-4 if dtype == np.float32 else 1e-10
    for (left, lower, unit, trans), x, r in zip(variants, got, ref):
        tri = np.tril(a) if lower else np.triu(a)
        if unit:
            tri = tri - np.diagonal(tri, axis1=-2, axis2=-1)[..., None] * np.eye(4, dtype=dtype) + np.eye(4, dtype=dtype)
        op_a = tri if trans == "NO_TRANSPOSE" else np.swapaxes(tri, -1, -2)
        residual = op_a @ x - b_left if left else x @ op_a - b_right
        assert np.abs(residual).max() < tol, (left, lower, unit, trans)
        np.testing.assert_allclose(x, r, rtol=tol, atol=tol, err_msg=str((left, lower, unit, trans)))
    low, up, zero_pivot = got[-3], got[-2], got[-1]
    np.testing.assert_allclose(low @ np.swapaxes(low, -1, -2), spd, rtol=tol, atol=tol * 100)
    np.testing.assert_array_equal(up, np.swapaxes(low, -1, -2))
    assert np.isinf(zero_pivot[0, 0, 0]) and np.isnan(zero_pivot[0, 1, 0])
    np.testing.assert_allclose(got[-3], ref[-3], rtol=tol, atol=tol)


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.complex64])
def test_a_cholesky_of_a_matrix_not_positive_definite_is_all_nan(compiler, dtype):
    """As JAX's CPU gives it (LAPACK's potrf fails and the factor is replaced by NaNs), on both
    tiers (the compiled one for complex) and the reference, matrix by matrix: a singular matrix, one with a negative pivot, one
    with a NaN, and a positive definite one beside them that keeps its factor."""
    a = np.array([[[1, 1], [1, 1]], [[1, 2], [2, 1]], [[np.nan, 0], [0, 1]], [[4, 2], [2, 5]]], dtype)
    prog = Program(a)
    for lower in ("true", "false"):
        prog(f'"stablehlo.cholesky"(%a0) <{{lower = {lower}}}> : ({tt(a.shape, dtype)}) -> {tt(a.shape, dtype)}')
    text = prog.text()
    got = compiler.compile(text).run(prog.args)
    if np.dtype(dtype).kind != "c":  # the eager tier holds no complex values
        assert_same_bits(eager_program(text).run(prog.args), got, "eager tier against compiled")
    ref = Interpreter(verify(parse_module(text))).run(prog.args)
    lower = np.linalg.cholesky(a[3].astype(np.complex128))
    for factor, expected in zip((*got, *ref), (lower, lower.conj().T) * 2):
        assert np.isnan(factor[:3]).all()
        np.testing.assert_allclose(factor[3], expected, rtol=1e-6)


def test_fft_of_every_type_against_numpy(compiler):
    """stablehlo.fft (jnp.fft) through numpy's FFT, called from the compiled code (objmode)."""
    rng = np.random.default_rng(3)
    x = rng.normal(size=(3, 8)).astype(np.float32)
    z = (rng.normal(size=(2, 4, 6)) + 1j * rng.normal(size=(2, 4, 6))).astype(np.complex64)
    prog = Program(x, z)
    spec = prog(f"stablehlo.fft %a0, type = RFFT, length = [8] : ({tt((3, 8), np.float32)}) -> tensor<3x5xcomplex<f32>>")
    prog(f"stablehlo.fft {spec}, type = IRFFT, length = [8] : (tensor<3x5xcomplex<f32>>) -> {tt((3, 8), np.float32)}")
    prog("stablehlo.fft %a1, type = FFT, length = [4, 6] : (tensor<2x4x6xcomplex<f32>>) -> tensor<2x4x6xcomplex<f32>>")
    prog("stablehlo.fft %a1, type = IFFT, length = [6] : (tensor<2x4x6xcomplex<f32>>) -> tensor<2x4x6xcomplex<f32>>")
    got = compiler.compile(prog.text()).run(prog.args)
    expected = [np.fft.rfft(x), x, np.fft.fftn(z, axes=(1, 2)), np.fft.ifft(z)]
    assert [g.dtype for g in got] == [np.complex64, np.float32, np.complex64, np.complex64]
    for g, e in zip(got, expected):
        np.testing.assert_allclose(g, e, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("dtype", [np.float16, bf16])
def test_a_narrow_cumulative_sum_rounds_each_step_as_xla(compiler, dtype):
    """jnp.cumsum of f16 (reduce_window add) rounds every partial sum to f16, in the
    running-scalar loop as in the loop over an inner dimension (a fuzz run found the first
    accumulating in float32, and bf16 windows failing to compile)."""
    x = (np.random.default_rng(1).standard_normal(15) * 10).astype(dtype)
    t, s = tt(x.shape, dtype), tt((), dtype)
    prog = Program(x, np.zeros((), dtype))
    prog(f'''"stablehlo.reduce_window"(%a0, %a1) ({{
      ^bb0(%p: {s}, %q: {s}):
        %r = stablehlo.add %p, %q : {s}
        stablehlo.return %r : {s}
      }}) {{window_dimensions = array<i64: 15>, padding = dense<[[14, 0]]> : tensor<1x2xi64>}} : ({t}, {s}) -> {t}''')
    (got,) = compiler.compile(prog.text()).run(prog.args)
    sequential, acc = [], np.float32(0)
    for v in x:
        acc = np.float32(np.array(acc + np.float32(v), np.float32).astype(dtype))
        sequential.append(acc)
    np.testing.assert_array_equal(got.astype(np.float32), sequential)
    check(compiler, prog, rtol=0)


@pytest.mark.parametrize("dtype", [np.complex64, bf16, np.float16])
def test_cumulative_sum_with_a_zero_init_of_every_float_kind(compiler, dtype):
    """jnp.cumsum as JAX writes it (init a constant zero): bf16 and complex64 failed to compile
    (their identity was looked up as an integer type's)."""
    x = np.arange(1, 9).astype(dtype)
    t, s = tt(x.shape, dtype), tt((), dtype)
    text = f'''func.func @main(%x: {t}) -> {t} {{
      %z = stablehlo.constant dense<{"(0.0, 0.0)" if dtype == np.complex64 else "0.0"}> : {s}
      %0 = "stablehlo.reduce_window"(%x, %z) ({{
      ^bb0(%p: {s}, %q: {s}):
        %r = stablehlo.add %p, %q : {s}
        stablehlo.return %r : {s}
      }}) {{window_dimensions = array<i64: 8>, padding = dense<[[7, 0]]> : tensor<1x2xi64>}} : ({t}, {s}) -> {t}
      return %0 : {t}
    }}'''
    (got,) = compiler.compile(text).run([x])
    np.testing.assert_array_equal(got.astype(np.complex128), np.cumsum(np.arange(1, 9)))
