"""numba_cpu's compiled tier on loop and branch bodies whose fused loop nests read values of the
body itself, against the reference interpreter and the eager tier.

The planner checks each loop nest it would fuse by generating it into a scratch block
(``Lowering.try_member``). A trial temporary one of whose operands belongs to the real code (a
loop-carried scalar, a dynamic_slice start, a scalar computed in a branch) once went into that
real code instead of the scratch, and the compiled function then read a name nothing defined
(numba: ``NameError: name 'd2353' is not defined``). These programs are reductions of what JAX
emits for ``jax.random`` (threefry's rounds in a while loop) and ``lax.dynamic_slice`` in a
``lax.scan``; the last is the whole program of a user's first training step.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from .numba_helpers import assert_matches
from .tier_helpers import assert_same_bits, eager_program
from pjrt_hub.backends.reference import Interpreter
from pjrt_hub.backends.stablehlo import parse_module, verify

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"

#: Threefry's round in a while body: the key (a carried scalar) is added to a vector the same
#: loop nest has just computed and stored.
CARRIED_SCALAR = """
func.func public @main(%x: tensor<2xui32>, %k: tensor<ui32>) -> (tensor<2xui32>, tensor<2xui32>) {
  %c0 = stablehlo.constant dense<0> : tensor<i32>
  %r:4 = stablehlo.while(%i = %c0, %a = %x, %s = %k, %e = %x) : tensor<i32>, tensor<2xui32>, tensor<ui32>, tensor<2xui32>
  cond {
    %c3 = stablehlo.constant dense<3> : tensor<i32>
    %p = stablehlo.compare LT, %i, %c3, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
    stablehlo.return %p : tensor<i1>
  } do {
    %b = stablehlo.add %a, %a : tensor<2xui32>
    %bs = stablehlo.broadcast_in_dim %s, dims = [] : (tensor<ui32>) -> tensor<2xui32>
    %d = stablehlo.add %bs, %b : tensor<2xui32>
    %c1 = stablehlo.constant dense<1> : tensor<i32>
    %n = stablehlo.add %i, %c1 : tensor<i32>
    stablehlo.return %n, %d, %s, %b : tensor<i32>, tensor<2xui32>, tensor<ui32>, tensor<2xui32>
  }
  return %r#1, %r#3 : tensor<2xui32>, tensor<2xui32>
}
"""

#: A scan step's ``lax.dynamic_slice`` at the loop counter, read by two fused loop nests.
DYNAMIC_SLICE = """
func.func public @main(%x: tensor<6xf32>) -> (tensor<2xf32>, tensor<2xf32>) {
  %c0 = stablehlo.constant dense<0> : tensor<i32>
  %z = stablehlo.constant dense<0.0> : tensor<2xf32>
  %r:3 = stablehlo.while(%i = %c0, %a = %z, %e = %z) : tensor<i32>, tensor<2xf32>, tensor<2xf32>
  cond {
    %c4 = stablehlo.constant dense<4> : tensor<i32>
    %p = stablehlo.compare LT, %i, %c4, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
    stablehlo.return %p : tensor<i1>
  } do {
    %ds = stablehlo.dynamic_slice %x, %i, sizes = [2] : (tensor<6xf32>, tensor<i32>) -> tensor<2xf32>
    %b = stablehlo.add %a, %ds : tensor<2xf32>
    %d = stablehlo.multiply %b, %ds : tensor<2xf32>
    %c1 = stablehlo.constant dense<1> : tensor<i32>
    %n = stablehlo.add %i, %c1 : tensor<i32>
    stablehlo.return %n, %b, %d : tensor<i32>, tensor<2xf32>, tensor<2xf32>
  }
  return %r#1, %r#2 : tensor<2xf32>, tensor<2xf32>
}
"""

#: A while in a while: the inner body slices at a start made of both counters and scales by a
#: scalar of the outer body.
NESTED_WHILE = """
func.func public @main(%x: tensor<8xf32>, %k: tensor<f32>) -> (tensor<2xf32>, tensor<2xf32>) {
  %c0 = stablehlo.constant dense<0> : tensor<i32>
  %z = stablehlo.constant dense<0.0> : tensor<2xf32>
  %r:4 = stablehlo.while(%j = %c0, %a = %z, %e = %z, %s = %k) : tensor<i32>, tensor<2xf32>, tensor<2xf32>, tensor<f32>
  cond {
    %c3 = stablehlo.constant dense<3> : tensor<i32>
    %p = stablehlo.compare LT, %j, %c3, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
    stablehlo.return %p : tensor<i1>
  } do {
    %t = stablehlo.multiply %s, %s : tensor<f32>
    %q:3 = stablehlo.while(%i = %c0, %b = %a, %f = %e) : tensor<i32>, tensor<2xf32>, tensor<2xf32>
    cond {
      %c2 = stablehlo.constant dense<2> : tensor<i32>
      %p2 = stablehlo.compare LT, %i, %c2, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
      stablehlo.return %p2 : tensor<i1>
    } do {
      %o = stablehlo.add %j, %i : tensor<i32>
      %ds = stablehlo.dynamic_slice %x, %o, sizes = [2] : (tensor<8xf32>, tensor<i32>) -> tensor<2xf32>
      %b2 = stablehlo.add %b, %ds : tensor<2xf32>
      %tb = stablehlo.broadcast_in_dim %t, dims = [] : (tensor<f32>) -> tensor<2xf32>
      %f1 = stablehlo.multiply %tb, %b2 : tensor<2xf32>
      %f2 = stablehlo.add %f1, %f : tensor<2xf32>
      %c1 = stablehlo.constant dense<1> : tensor<i32>
      %i2 = stablehlo.add %i, %c1 : tensor<i32>
      stablehlo.return %i2, %b2, %f2 : tensor<i32>, tensor<2xf32>, tensor<2xf32>
    }
    %c1 = stablehlo.constant dense<1> : tensor<i32>
    %j2 = stablehlo.add %j, %c1 : tensor<i32>
    %half = stablehlo.constant dense<0.5> : tensor<f32>
    %s2 = stablehlo.multiply %s, %half : tensor<f32>
    stablehlo.return %j2, %q#1, %q#2, %s2 : tensor<i32>, tensor<2xf32>, tensor<2xf32>, tensor<f32>
  }
  return %r#1, %r#2 : tensor<2xf32>, tensor<2xf32>
}
"""

#: A branch of a case: a scalar computed in the branch, broadcast into the second loop nest.
CASE_BRANCH = """
func.func public @main(%n: tensor<i32>, %x: tensor<3xi32>, %k: tensor<i32>) -> (tensor<3xi32>, tensor<3xi32>) {
  %r:2 = "stablehlo.case"(%n) ({
    %s = stablehlo.multiply %k, %k : tensor<i32>
    %b = stablehlo.add %x, %x : tensor<3xi32>
    %sb = stablehlo.broadcast_in_dim %s, dims = [] : (tensor<i32>) -> tensor<3xi32>
    %d = stablehlo.subtract %sb, %b : tensor<3xi32>
    stablehlo.return %b, %d : tensor<3xi32>, tensor<3xi32>
  }, {
    stablehlo.return %x, %x : tensor<3xi32>, tensor<3xi32>
  }) : (tensor<i32>) -> (tensor<3xi32>, tensor<3xi32>)
  return %r#0, %r#1 : tensor<3xi32>, tensor<3xi32>
}
"""

#: A reduction in a while body, accumulated in the loop nest of its operand, whose init value
#: is a scalar of the body.
REDUCE_INIT = """
func.func public @main(%x: tensor<2x3xf32>, %k: tensor<f32>) -> (tensor<2x3xf32>, tensor<2xf32>) {
  %c0 = stablehlo.constant dense<0> : tensor<i32>
  %z = stablehlo.constant dense<0.0> : tensor<2xf32>
  %r:4 = stablehlo.while(%i = %c0, %a = %x, %s = %k, %m = %z) : tensor<i32>, tensor<2x3xf32>, tensor<f32>, tensor<2xf32>
  cond {
    %c3 = stablehlo.constant dense<3> : tensor<i32>
    %p = stablehlo.compare LT, %i, %c3, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
    stablehlo.return %p : tensor<i1>
  } do {
    %t = stablehlo.add %s, %s : tensor<f32>
    %tb = stablehlo.broadcast_in_dim %t, dims = [] : (tensor<f32>) -> tensor<2x3xf32>
    %b = stablehlo.multiply %tb, %a : tensor<2x3xf32>
    %red = stablehlo.reduce(%b init: %t) applies stablehlo.maximum across dimensions = [1] : (tensor<2x3xf32>, tensor<f32>) -> tensor<2xf32>
    %c1 = stablehlo.constant dense<1> : tensor<i32>
    %n = stablehlo.add %i, %c1 : tensor<i32>
    %h = stablehlo.constant dense<0.5> : tensor<f32>
    %s2 = stablehlo.multiply %s, %h : tensor<f32>
    stablehlo.return %n, %b, %s2, %red : tensor<i32>, tensor<2x3xf32>, tensor<f32>, tensor<2xf32>
  }
  return %r#1, %r#3 : tensor<2x3xf32>, tensor<2xf32>
}
"""

PROGRAMS = {
    "carried_scalar": (CARRIED_SCALAR, [np.array([1, 0xFFFFFFF0], np.uint32), np.array(0x9E3779B9, np.uint32)]),
    "dynamic_slice": (DYNAMIC_SLICE, [np.arange(6, dtype=np.float32) - 2.5]),
    "nested_while": (NESTED_WHILE, [np.arange(8, dtype=np.float32) * 0.25, np.array(3.0, np.float32)]),
    "case_branch": (CASE_BRANCH, [np.array(0, np.int32), np.array([1, -2, 3], np.int32), np.array(5, np.int32)]),
    "reduce_init": (REDUCE_INIT, [np.array([[1, -2, 3], [-4, 5, -6]], np.float32), np.array(1.5, np.float32)]),
}


def _check(compiler, text: str, args: list[np.ndarray], what: str, rtol: float = 1e-6) -> list[np.ndarray]:
    expected = Interpreter(verify(parse_module(text))).run(args)
    got = compiler.compile(text).run(args)
    assert len(got) == len(expected)
    for i, (g, e) in enumerate(zip(got, expected)):
        assert_matches(g, e, rtol=rtol, what=f"{what} output {i}")
    assert_same_bits(eager_program(text).run(args), got, what)
    return got


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_fused_loop_nests_in_a_body(compiler, name):
    text, args = PROGRAMS[name]
    _check(compiler, text, args, name)


def test_a_first_jax_training_step(compiler):
    """The whole program JAX emits for the user's training step (threefry, normal, dynamic_slice,
    value_and_grad and a bfloat16 round trip in a scan); tanh is numba_cpu's own, to a few ulps."""
    text = (FIXTURES / "jax_train_step.mlir").read_text()
    w, losses = _check(compiler, text, [np.zeros((16, 1), np.float32), np.array([0, 0], np.uint32)],
                       "train step", rtol=1e-5)
    assert w.shape == (16, 1) and losses.shape == (8,) and np.isfinite(losses).all() and (losses > 0).all()
