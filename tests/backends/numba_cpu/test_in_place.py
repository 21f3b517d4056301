"""An elementwise result written into the array of an operand nothing reads afterwards (the
matrix product under a bias and an activation), and into a fresh array wherever that operand is
read again, read at other indices, is the caller's, is returned, or holds another element type.

Every program runs on the compiled tier and the eager tier (numpy, op by op, which never writes
in place): the bits must be the same, so a value overwritten too early shows as a difference."""

from __future__ import annotations

import re

import numpy as np
import pytest

from .tier_helpers import assert_same_bits, eager_program


def _program(body: str, args: str, results: str) -> str:
    return f"func.func public @main({args}) -> ({results}) {{\n{body}\n}}\n"


_DOT = "  %u = stablehlo.dot_general %x, %w, contracting_dims = [1] x [0] : (tensor<48x32xf32>, tensor<32x40xf32>) -> tensor<48x40xf32>"
_ARGS = "%x: tensor<48x32xf32>, %w: tensor<32x40xf32>, %b: tensor<40xf32>"
_BIAS_RELU = """  %bb = stablehlo.broadcast_in_dim %b, dims = [1] : (tensor<40xf32>) -> tensor<48x40xf32>
  %s = stablehlo.add %u, %bb : tensor<48x40xf32>
  %z = stablehlo.constant dense<0.0> : tensor<48x40xf32>
  %v = stablehlo.maximum %s, %z : tensor<48x40xf32>"""

BIAS_RELU = _program(f"{_DOT}\n{_BIAS_RELU}\n  return %v : tensor<48x40xf32>", _ARGS, "tensor<48x40xf32>")

# %u is read again after %v: by a second elementwise op, and by being returned.
READ_AGAIN = _program(f"""{_DOT}
{_BIAS_RELU}
  %two = stablehlo.constant dense<2.0> : tensor<48x40xf32>
  %t = stablehlo.multiply %u, %two : tensor<48x40xf32>
  return %v, %t : tensor<48x40xf32>, tensor<48x40xf32>""", _ARGS, "tensor<48x40xf32>, tensor<48x40xf32>")
RETURNED = _program(f"{_DOT}\n{_BIAS_RELU}\n  return %v, %u : tensor<48x40xf32>, tensor<48x40xf32>", _ARGS,
                    "tensor<48x40xf32>, tensor<48x40xf32>")

# %u read at other indices than the result's (its one reader is a transpose): written in
# place, later elements would read the result's values.
TRANSPOSED = _program("""  %u = stablehlo.dot_general %x, %w, contracting_dims = [1] x [0] : (tensor<40x32xf32>, tensor<32x40xf32>) -> tensor<40x40xf32>
  %t = stablehlo.transpose %u, dims = [1, 0] : (tensor<40x40xf32>) -> tensor<40x40xf32>
  %s = stablehlo.add %t, %c : tensor<40x40xf32>
  %v = stablehlo.tanh %s : tensor<40x40xf32>
  return %v : tensor<40x40xf32>""", "%x: tensor<40x32xf32>, %w: tensor<32x40xf32>, %c: tensor<40x40xf32>",
                      "tensor<40x40xf32>")

# %u passes an optimization barrier, whose result is %u's array: the barrier's result has one
# reader, %u another after it.
BARRIER = _program(f"""{_DOT}
  %o = stablehlo.optimization_barrier %u : tensor<48x40xf32>
  %e = stablehlo.exponential %o : tensor<48x40xf32>
  %two = stablehlo.constant dense<2.0> : tensor<48x40xf32>
  %t = stablehlo.multiply %u, %two : tensor<48x40xf32>
  return %e, %t : tensor<48x40xf32>, tensor<48x40xf32>""", "%x: tensor<48x32xf32>, %w: tensor<32x40xf32>",
                   "tensor<48x40xf32>, tensor<48x40xf32>")

# The caller's array, and a result of another element type.
ARGUMENT = _program("""  %v = stablehlo.add %x, %y : tensor<48x40xf32>
  return %v : tensor<48x40xf32>""", "%x: tensor<48x40xf32>, %y: tensor<48x40xf32>", "tensor<48x40xf32>")
CONVERTED = _program(f"""{_DOT}
  %v = stablehlo.convert %u : (tensor<48x40xf32>) -> tensor<48x40xi32>
  return %v : tensor<48x40xi32>""", "%x: tensor<48x32xf32>, %w: tensor<32x40xf32>", "tensor<48x40xi32>")

# A recurrence: each step's product is overwritten by its activation, which the next step's
# product reads; the products must not share one array across steps.
RECURRENT = _program("""  %c0 = stablehlo.constant dense<0> : tensor<i32>
  %r:2 = stablehlo.while(%i = %c0, %h = %x) : tensor<i32>, tensor<40x40xf32>
    cond {
      %n = stablehlo.constant dense<5> : tensor<i32>
      %lt = stablehlo.compare LT, %i, %n, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
      stablehlo.return %lt : tensor<i1>
    } do {
      %p = stablehlo.dot_general %h, %w, contracting_dims = [1] x [0] : (tensor<40x40xf32>, tensor<40x40xf32>) -> tensor<40x40xf32>
      %a = stablehlo.tanh %p : tensor<40x40xf32>
      %one = stablehlo.constant dense<1> : tensor<i32>
      %j = stablehlo.add %i, %one : tensor<i32>
      stablehlo.return %j, %a : tensor<i32>, tensor<40x40xf32>
    }
  return %r#1 : tensor<40x40xf32>""", "%x: tensor<40x40xf32>, %w: tensor<40x40xf32>", "tensor<40x40xf32>")


def _inputs(text: str, rng: np.random.Generator) -> list[np.ndarray]:
    signature = text.split("@main(")[1].split(") ->")[0]
    shapes = [tuple(int(d) for d in m.group(1).split("x")) for m in re.finditer(r"tensor<((?:\d+x)*\d+)xf32>", signature)]
    return [(rng.standard_normal(s) * 0.3).astype(np.float32) for s in shapes]


def _arrays_made(source: str, shape: str) -> int:
    return source.count(f"np.empty({shape}, ")


# The arrays of the result's shape the generated source makes: one where the result is written
# into the product's (or, for the argument, is the only array); one more for each value that
# must keep its own.
@pytest.mark.parametrize("name, text, shape, arrays", [
    ("bias_relu", BIAS_RELU, "(48, 40)", 1),
    ("read_again", READ_AGAIN, "(48, 40)", 3),
    ("returned", RETURNED, "(48, 40)", 2),
    ("transposed", TRANSPOSED, "(40, 40)", 2),
    ("barrier", BARRIER, "(48, 40)", 3),
    ("argument", ARGUMENT, "(48, 40)", 1),
    ("converted", CONVERTED, "(48, 40)", 2),
    ("recurrent", RECURRENT, "(40, 40)", 1),
])
def test_written_in_place_only_where_nothing_reads_the_operand_again(compiler, name, text, shape, arrays):
    program = compiler.compile(text)
    assert _arrays_made(program.source, shape) == arrays, program.source
    inputs = _inputs(text, np.random.default_rng(5))
    kept = [a.copy() for a in inputs]
    compiled = program.run(inputs)
    for a, k in zip(inputs, kept):  # the caller's arrays are never written
        assert np.array_equal(a, k)
    with np.errstate(all="ignore"):
        eager = eager_program(text).run(inputs)
    assert_same_bits(eager, compiled, name)


# The same for dynamic_update_slice, which updates its operand in place when it is the
# operand's one reader: here the operand is the barrier's result, whose array %u still needs.
UPDATED_THROUGH_BARRIER = _program(f"""{_DOT}
  %o = stablehlo.optimization_barrier %u : tensor<48x40xf32>
  %p = stablehlo.constant dense<7.0> : tensor<4x4xf32>
  %i = stablehlo.constant dense<3> : tensor<i32>
  %d = stablehlo.dynamic_update_slice %o, %p, %i, %i : (tensor<48x40xf32>, tensor<4x4xf32>, tensor<i32>, tensor<i32>) -> tensor<48x40xf32>
  %two = stablehlo.constant dense<2.0> : tensor<48x40xf32>
  %t = stablehlo.multiply %u, %two : tensor<48x40xf32>
  return %d, %t : tensor<48x40xf32>, tensor<48x40xf32>""", "%x: tensor<48x32xf32>, %w: tensor<32x40xf32>",
                                   "tensor<48x40xf32>, tensor<48x40xf32>")


def test_an_update_in_place_never_reaches_an_array_another_value_holds(compiler):
    inputs = _inputs(UPDATED_THROUGH_BARRIER, np.random.default_rng(6))
    compiled = compiler.compile(UPDATED_THROUGH_BARRIER).run(inputs)
    assert_same_bits(eager_program(UPDATED_THROUGH_BARRIER).run(inputs), compiled, "dynamic_update_slice")
    assert np.all(compiled[0][3:7, 3:7] == 7.0) and not np.any(compiled[1][3:7, 3:7] == 14.0)


def _loop_with_condition(condition: str, extra_args: str = "") -> str:
    """A loop whose body updates the carried %h in place (one row a step) and whose condition
    reads %h through ``condition`` (defining %s, a sum) first."""
    return _program(f"""{_DOT}
  %c0 = stablehlo.constant dense<0> : tensor<i32>
  %r:2 = stablehlo.while(%i = %c0, %h = %u) : tensor<i32>, tensor<48x40xf32>
    cond {{
{condition}
      %lim = stablehlo.constant dense<1.0e9> : tensor<f32>
      %lt0 = stablehlo.compare LT, %s, %lim : (tensor<f32>, tensor<f32>) -> tensor<i1>
      %n = stablehlo.constant dense<3> : tensor<i32>
      %lt1 = stablehlo.compare LT, %i, %n, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
      %lt = stablehlo.and %lt0, %lt1 : tensor<i1>
      stablehlo.return %lt : tensor<i1>
    }} do {{
      %q = stablehlo.constant dense<1.0> : tensor<1x40xf32>
      %d = stablehlo.dynamic_update_slice %h, %q, %i, %c0 : (tensor<48x40xf32>, tensor<1x40xf32>, tensor<i32>, tensor<i32>) -> tensor<48x40xf32>
      %one = stablehlo.constant dense<1> : tensor<i32>
      %j = stablehlo.add %i, %one : tensor<i32>
      stablehlo.return %j, %d : tensor<i32>, tensor<48x40xf32>
    }}
  return %r#1 : tensor<48x40xf32>""", "%x: tensor<48x32xf32>, %w: tensor<32x40xf32>" + extra_args, "tensor<48x40xf32>")


# Found by a second reader: the condition's own plan makes it the only reader of the carried
# array, which the body updates in place (so it is the loop's, not shared).
CONDITION_UPDATES = _loop_with_condition("""      %p = stablehlo.constant dense<100.0> : tensor<4x4xf32>
      %z = stablehlo.constant dense<0> : tensor<i32>
      %m = stablehlo.dynamic_update_slice %h, %p, %z, %z : (tensor<48x40xf32>, tensor<4x4xf32>, tensor<i32>, tensor<i32>) -> tensor<48x40xf32>
      %zero = stablehlo.constant dense<0.0> : tensor<f32>
      %s = stablehlo.reduce(%m init: %zero) applies stablehlo.add across dimensions = [0, 1] : (tensor<48x40xf32>, tensor<f32>) -> tensor<f32>""")
CONDITION_MAPS = _loop_with_condition("""      %e = stablehlo.exponential %h : tensor<48x40xf32>
      %p = stablehlo.dot_general %e, %y, contracting_dims = [1] x [0] : (tensor<48x40xf32>, tensor<40x8xf32>) -> tensor<48x8xf32>
      %zero = stablehlo.constant dense<0.0> : tensor<f32>
      %s = stablehlo.reduce(%p init: %zero) applies stablehlo.add across dimensions = [0, 1] : (tensor<48x8xf32>, tensor<f32>) -> tensor<f32>""",
                                      ", %y: tensor<40x8xf32>")


@pytest.mark.parametrize("text", [CONDITION_UPDATES, CONDITION_MAPS], ids=["update_slice", "elementwise"])
def test_a_loop_condition_never_writes_into_the_carried_arrays(compiler, text):
    inputs = _inputs(text, np.random.default_rng(8))
    compiled = compiler.compile(text).run(inputs)
    with np.errstate(all="ignore"):
        assert_same_bits(eager_program(text).run(inputs), compiled, "condition")
