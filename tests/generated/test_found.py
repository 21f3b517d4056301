"""What the generated tests found, each kept as a fixed example (cheap: one program per type).

Each case is a program of the ops that went wrong, on the values that showed it, run on
numba_cpu and reference and checked against the rules (:mod:`.spec`) like the generated ones.
"""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np
import pytest

from pjrt_hub.abi import CompileError, UnsupportedOpError

from .programs import EwOp, elementwise_program
from .runner import Compiled, check, describe
from .spec import ELEMENTS, reduce

nan, inf = math.nan, math.inf

CASES = {
    # reference: max/min of +-0 returned either zero (the spec's IEEE-754 maximum has -0 < +0),
    # round_nearest_afz(-0) lost its sign; float -> sub-byte integers wrapped instead of
    # saturating at the narrow range.
    "f32": ([EwOp("binary", "maximum"), EwOp("binary", "minimum"), EwOp("clamp"), EwOp("unary", "round_nearest_afz"),
             EwOp("convert", arg="i4"), EwOp("convert", arg="ui4"), EwOp("convert", arg="i2"), EwOp("convert", arg="ui2")],
            [[-0.0, 0.0, -0.4, 2.0 ** 23 + 1, -0.49999997, nan, 7.9, -8.5], [0.0, -0.0, 1.0, 1.0, nan, 1.0, -0.0, 0.0],
             [1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, -0.0]]),
    # reference: int4 divide raised (np.iinfo of int4); the logical and arithmetic shifts, popcnt
    # and count_leading_zeros of sub-byte integers look at their own bits.
    "i4": ([EwOp("binary", "divide"), EwOp("binary", "remainder"), EwOp("binary", "shift_right_logical"),
            EwOp("binary", "shift_right_arithmetic"), EwOp("unary", "popcnt"), EwOp("unary", "count_leading_zeros"),
            EwOp("binary", "multiply"), EwOp("unary", "abs")],
           [[-8, 7, -1, -8, 5, 0, 3, -7], [-1, 0, 1, 0, 2, 3, 4, 7], [0, 0, 0, 0, 0, 0, 0, 0]]),
    "ui4": ([EwOp("binary", "shift_right_arithmetic"), EwOp("binary", "shift_left"), EwOp("unary", "not"),
             EwOp("binary", "power")],
            [[15, 8, 7, 1, 0, 12, 9, 3], [1, 3, 1, 4, 15, 2, 0, 5], [0, 0, 0, 0, 0, 0, 0, 0]]),
    # reference: ml_dtypes cannot cast every pair of 8-bit floats directly (TypeError).
    "f8E4M3FN": ([EwOp("convert", arg="f8E8M0FNU"), EwOp("convert", arg="f8E5M2FNUZ"), EwOp("convert", arg="f4E2M1FN"),
                  EwOp("binary", "add")],
                 [[448.0, -448.0, 0.5, nan, 0.0, -0.0, 3.0, 0.015625], [1.0] * 8, [0.0] * 8]),
    # reference and the rules themselves: round_nearest_afz as floor(|x| + 0.5) rounds the sum
    # first, so the largest float below 0.5 became 1 and 2**52 + 1 became 2**52 + 2 (the
    # long-profile run found the second; the f32 case above has 2**23 + 1 and -0.49999997).
    "f64": ([EwOp("unary", "round_nearest_afz"), EwOp("binary", "add")],
            [[2.0 ** 52 + 1, 0.49999999999999994, -0.49999999999999994, 2.0 ** 52 - 0.5, 2.5, -2.5, inf, nan],
             [1.0] * 8, [0.0] * 8]),
    # reference: ui8 arithmetic shift right fills with the top bit, as XLA's does.
    "ui8": ([EwOp("binary", "shift_right_arithmetic"), EwOp("binary", "power")],
            [[255, 128, 127, 0, 200, 3, 2, 1], [1, 7, 8, 9, 0, 200, 7, 255], [0] * 8]),
}


@pytest.mark.parametrize("element", sorted(CASES))
def test_found_examples(clients, element):
    e = ELEMENTS[element]
    ops, values = CASES[element]
    shape = (len(values[0]),)
    text, expected = elementwise_program(e, ops, shape)
    args = [np.array(v, np.float64).astype(e.dtype) if e.cls == "f" else
            np.array(v, np.int64).astype(e.dtype) for v in values]
    args.append(np.array([True, False] * (shape[0] // 2)))
    compiled = Compiled(clients, text)
    try:
        problems = check(compiled, args, expected)
        assert not problems, describe(text, args, problems)
    finally:
        compiled.close()


def test_reduction_of_bf16_accumulates_in_f32(clients):
    """numba_cpu rounded a bf16 sum to bf16 at every step: 1000 ones summed to 256 (XLA:CPU and
    reference accumulate in f32 and round once)."""
    from pjrt_hub._run import run_program

    text = """func.func @main(%x: tensor<1000x3xbf16>) -> (tensor<bf16>, tensor<3xbf16>) {
  %c = stablehlo.constant dense<0.0> : tensor<bf16>
  %0 = stablehlo.reduce(%x init: %c) applies stablehlo.add across dimensions = [0, 1]
      : (tensor<1000x3xbf16>, tensor<bf16>) -> tensor<bf16>
  %1 = stablehlo.reduce(%x init: %c) applies stablehlo.add across dimensions = [0]
      : (tensor<1000x3xbf16>, tensor<bf16>) -> tensor<3xbf16>
  return %0, %1 : tensor<bf16>, tensor<3xbf16>
}"""
    for name, client in clients.items():
        total, columns = run_program(client, text, [np.ones((1000, 3), ml_dtypes.bfloat16)]).outputs
        # 3000 rounded once to bf16 is 3008 (ties to even); rounding at every step stops at 256.
        assert float(total) == float(np.float32(3000).astype(ml_dtypes.bfloat16)) == 3008.0, name
        assert columns.astype(np.float32).tolist() == [1000.0] * 3, name


@pytest.mark.parametrize("op", ["cbrt", "atan2", "remainder", "maximum"])
def test_numba_refuses_complex_ops_it_cannot_compute_naming_op_and_type(clients, op):
    """A type numba_cpu cannot compute is refused at compile time, naming the op and the type;
    reference computes them (complex cbrt, atan2 and remainder failed with INTERNAL there)."""
    t = "tensor<2xcomplex<f32>>"
    unary = op == "cbrt"
    text = (f"func.func @main(%x: {t}, %y: {t}) -> {t} {{\n"
            f"  %0 = stablehlo.{op} {'%x' if unary else '%x, %y'} : {t}\n  return %0 : {t}\n}}")
    from pjrt_hub.abi import Program

    with pytest.raises((UnsupportedOpError, CompileError), match=rf"stablehlo.{op} \(complex<f32> operand"):
        clients["numba_cpu"].compile(Program(text, "mlir"))
    from pjrt_hub._run import run_program

    x = np.array([1 + 2j, -3 + 0.5j], np.complex64)
    out = run_program(clients["reference"], text, [x, x[::-1].copy()]).outputs[0]
    assert out.dtype == np.complex64 and np.isfinite(out).all()


def test_division_by_a_broadcast_scalar_is_correctly_rounded(clients):
    """numba_cpu multiplied by the reciprocal of a loop-invariant divisor: 736 of 4096 float32
    quotients were one ulp off, where XLA:CPU and the spec give the correctly rounded quotient."""
    from pjrt_hub._run import run_program

    t = "tensor<4096xf32>"
    text = f"""func.func @main(%x: {t}, %y: tensor<f32>) -> {t} {{
  %b = stablehlo.broadcast_in_dim %y, dims = [] : (tensor<f32>) -> {t}
  %0 = stablehlo.divide %x, %b : {t}
  return %0 : {t}
}}"""
    x = (np.random.default_rng(1).standard_normal(4096) * 10).astype(np.float32)
    exact = (x.astype(np.float64) / np.float64(np.float32(3.3))).astype(np.float32)
    for name, client in clients.items():
        out = run_program(client, text, [x, np.float32(3.3)]).outputs[0]
        assert int((out != exact).sum()) == 0, name


def test_a_bf16_layernorm_is_as_close_to_exact_on_numba_cpu_as_on_reference(clients):
    """bf16 arithmetic as XLA:CPU does it (f32 rounded per op, reductions accumulated in f32):
    numba_cpu's bf16 layernorm was 4x further from the exact result than reference's."""
    from pathlib import Path

    from pjrt_hub._run import run_program

    corpus = Path(__file__).resolve().parents[2] / "pjrt_hub" / "data" / "corpus" / "public"
    text = (corpus / "layernorm.mlir").read_text().replace("xf32>", "xbf16>").replace("tensor<f32>", "tensor<bf16>")
    with np.load(corpus / "layernorm.npz") as data:
        args = [data[f"in{i}"].astype(ml_dtypes.bfloat16) for i in range(3)]
    x, g, b = (a.astype(np.float64) for a in args)
    mu = x.mean(1, keepdims=True)
    exact = (x - mu) / np.sqrt(((x - mu) ** 2).mean(1, keepdims=True) + 1e-5) * g + b
    errors = {name: float(np.abs(run_program(client, text, args).outputs[0].astype(np.float64) - exact).mean())
              for name, client in clients.items()}
    assert errors["numba_cpu"] <= 1.25 * errors["reference"], errors


def test_complex_corner_cases_found_against_xla(clients):
    """exp(89+0j) and exp(710+0j) were inf+nanj on numba_cpu (inf * sin(0));
    a complex division by zero raised ZeroDivisionError there; a dot_general contracting nothing
    into a 0-d complex result, and a reduce over no dimensions next to a broadcast, did not
    compile, nor did a reshape of a zero-size value (division by its zero dimension). XLA and the
    rules agree on each."""
    from pjrt_hub._run import run_program

    t = "tensor<2xcomplex<f32>>"
    text = f"""func.func @main(%x: {t}, %y: {t}, %z: tensor<0xcomplex<f32>>, %w: tensor<0x0x0xf32>)
    -> ({t}, {t}, tensor<complex<f32>>, tensor<0x0x1x0xf32>, tensor<0x5xf32>) {{
  %0 = stablehlo.exponential %x : {t}
  %1 = stablehlo.divide %x, %y : {t}
  %2 = "stablehlo.dot_general"(%z, %z) <{{dot_dimension_numbers = #stablehlo.dot<lhs_contracting_dimensions = [0],
       rhs_contracting_dimensions = [0]>}}> : (tensor<0xcomplex<f32>>, tensor<0xcomplex<f32>>) -> tensor<complex<f32>>
  %c = stablehlo.constant dense<1.0> : tensor<f32>
  %s = stablehlo.slice %w [0:0:2, 0:0:1, 0:0:3] : (tensor<0x0x0xf32>) -> tensor<0x0x0xf32>
  %r = stablehlo.reduce(%s init: %c) applies stablehlo.add across dimensions = []
      : (tensor<0x0x0xf32>, tensor<f32>) -> tensor<0x0x0xf32>
  %b = stablehlo.broadcast_in_dim %r, dims = [0, 1, 3] : (tensor<0x0x0xf32>) -> tensor<0x0x1x0xf32>
  %q = stablehlo.reshape %s : (tensor<0x0x0xf32>) -> tensor<0x5xf32>
  return %0, %1, %2, %b, %q : {t}, {t}, tensor<complex<f32>>, tensor<0x0x1x0xf32>, tensor<0x5xf32>
}}"""
    x = np.array([710 + 0j, 1 + 1j], np.complex64)
    y = np.array([0j, 2 + 0j], np.complex64)
    for name, client in clients.items():
        e, d, dot, b, q = run_program(client, text, [x, y, np.zeros(0, np.complex64), np.zeros((0, 0, 0), np.float32)]).outputs
        assert e[0].real == np.inf and e[0].imag == 0, (name, e)
        assert np.isinf(d[0].real) and d[1] == 0.5 + 0.5j, (name, d)
        assert dot.shape == () and dot == 0, name
        assert b.shape == (0, 0, 1, 0) and q.shape == (0, 5), name


def test_a_reduction_starts_from_its_init_as_the_element_type_holds_it():
    """The long-profile run: reduce add over no dimensions of f8E8M0FNU, whose init 0 is NaN in
    that type (it has no zero). Both plugins gave NaN, as body(init, x) is; the rules gave x."""
    e = ELEMENTS["f8E8M0FNU"]
    x = np.array([[[nan, nan], [nan, 0.5]]]).astype(e.dtype)
    assert np.isnan(reduce(x, [], "add", 0, e).astype(np.float64)).all()
    f = ELEMENTS["f32"]
    y = np.array([[1.5, -2.0], [0.25, 8.0]], np.float32)
    np.testing.assert_array_equal(reduce(y, [], "add", 0, f), y)
    np.testing.assert_array_equal(reduce(y, [1], "add", 0, f), np.array([-0.5, 8.25], np.float32))
