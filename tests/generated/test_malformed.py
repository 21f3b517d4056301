"""Programs that look valid but are not: the verifier refuses them naming the op, so that none
reaches a backend and fails there with INTERNAL (121 generated programs did).

Every elementwise op is applied to every element type; every op is given the wrong number of
operands and no regions. The outcome is a CompileError (or ParseError) naming the op, or a
program that runs; never an execution error, never a crash of a lowering rule.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from pjrt_hub.abi import CompileError, ExecutionError, ParseError, PjrtError
from pjrt_hub.backends.stablehlo import parse_module, verify

from .programs import ttype
from .spec import ELEMENTS

UNARY = ("negate", "abs", "sign", "not", "popcnt", "count_leading_zeros", "exponential", "exponential_minus_one",
         "log", "log_plus_one", "logistic", "sqrt", "rsqrt", "cbrt", "tanh", "tan", "sine", "cosine", "floor",
         "ceil", "round_nearest_even", "round_nearest_afz", "real", "imag", "is_finite")
BINARY = ("add", "subtract", "multiply", "divide", "remainder", "maximum", "minimum", "power", "atan2", "and", "or",
          "xor", "shift_left", "shift_right_logical", "shift_right_arithmetic", "complex")


def _result(op: str, e: str) -> str:
    if op == "is_finite":
        return "i1"
    if op in ("real", "imag", "abs") and e.startswith("complex"):
        return e[len("complex<"):-1]
    if op == "complex":
        return f"complex<{e}>"
    return e


def program(op: str, e: str) -> str:
    t, r = ttype((3,), e), ttype((3,), _result(op, e))
    if op in UNARY:
        return (f"func.func @main(%x: {t}) -> {r} {{\n  %0 = stablehlo.{op} %x : ({t}) -> {r}\n"
                f"  return %0 : {r}\n}}")
    return (f"func.func @main(%x: {t}, %y: {t}) -> {r} {{\n  %0 = \"stablehlo.{op}\"(%x, %y) : ({t}, {t}) -> {r}\n"
            f"  return %0 : {r}\n}}")


def _cases():
    return [(op, e) for op in UNARY + BINARY for e in ELEMENTS]


def test_every_op_on_every_element_type_is_refused_by_name_or_runs_on_reference():
    from pjrt_hub import PluginRegistry
    from pjrt_hub._run import run_program

    client = PluginRegistry().create_client("reference")
    refused, ran = 0, 0
    for op, e in _cases():
        text = program(op, e)
        args = [np.ones(3, ELEMENTS[e].dtype)] * (1 if op in UNARY else 2)
        try:
            run_program(client, text, args)
        except ParseError:
            continue  # a type the test spelled that cannot exist (complex<i1>)
        except CompileError as exc:
            assert f"stablehlo.{op}" in str(exc), (op, e, str(exc))
            refused += 1
        except ExecutionError as exc:
            pytest.fail(f"stablehlo.{op} on {e} passed the verifier and failed in reference: {exc}")
        else:
            ran += 1
    assert refused > 200 and ran > 300


def test_numba_cpu_lowers_or_refuses_naming_the_op_and_the_type():
    """The lowering (parse, verify, lower; numba not run) either produces a module or refuses
    with the op and the element type; no rule crashes with an internal error."""
    pytest.importorskip("numba")
    from pjrt_hub.backends.numba_cpu.compiler import NumbaCompiler

    compiler = NumbaCompiler(cache_dir="/nonexistent")
    lowered = 0
    for op, e in _cases():
        text = program(op, e)
        try:
            verify(parse_module(text))
        except (CompileError, ParseError):
            continue  # the verifier's refusal, checked above
        try:
            compiler._generate(text, compiler._lowering_options(None))
        except PjrtError as exc:
            message = str(exc)
            assert f"stablehlo.{op}" in message and (e in message or "operand" in message), (op, e, message)
        else:
            lowered += 1
    assert lowered > 300


_GENERIC_OPS = UNARY + BINARY + ("select", "clamp", "map", "reduce", "sort", "dot_general", "concatenate",
                                 "broadcast_in_dim", "transpose", "while", "case")


@given(op=st.sampled_from(_GENERIC_OPS), operands=st.integers(0, 4), e=st.sampled_from(("f32", "i32", "i1")))
def test_wrong_operand_counts_and_missing_regions_are_refused_naming_the_op(op, operands, e):
    t = ttype((3,), e)
    ins = ", ".join(["%x"] * operands)
    text = (f"func.func @main(%x: {t}) -> {t} {{\n  %0 = \"stablehlo.{op}\"({ins}) : ({', '.join([t] * operands)}) -> {t}\n"
            f"  return %0 : {t}\n}}")
    try:
        verify(parse_module(text))
    except (CompileError, ParseError) as exc:
        assert f"stablehlo.{op}" in str(exc) or "line 2" in str(exc), str(exc)
        return
    # Accepted: then it must be a well-formed op (right count, no region needed) that runs.
    from pjrt_hub import PluginRegistry
    from pjrt_hub._run import run_program

    run_program(PluginRegistry().create_client("reference"), text, [np.ones(3, ELEMENTS[e].dtype)])
