"""Tokens (backends/stablehlo/tokens.py) on both built-in plugins: programs that take, make,
join and return ``!stablehlo.token`` run, with tokens held as empty boolean arrays (``pred[0]``,
the buffer JAX passes for a token)."""

from __future__ import annotations

import numpy as np
import pytest

from pjrt_hub.abi import CompileOptions
from pjrt_hub.backends.numba_cpu.compiler import NumbaCompiler
from pjrt_hub.backends.reference import ReferenceCompiler
from pjrt_hub.backends.stablehlo import parse_module
from pjrt_hub.backends.stablehlo.ir import TokenType
from pjrt_hub.backends.stablehlo.tokens import TOKEN_AS, legalize_tokens

# jax.jit(lambda a, t: (a + 1, jax.lax.after_all(t, t))).lower(f32[3], token), then a call of a
# helper that passes a token through, and a token carried through a while loop.
TOKENS = """module @jit__lambda {
  func.func private @keep(%t: !stablehlo.token) -> !stablehlo.token {
    return %t : !stablehlo.token
  }
  func.func public @main(%arg0: tensor<3xf32>, %arg1: !stablehlo.token) -> (tensor<3xf32>, !stablehlo.token, !stablehlo.token) {
    %cst = stablehlo.constant dense<1.000000e+00> : tensor<3xf32>
    %1 = stablehlo.add %arg0, %cst : tensor<3xf32>
    %2 = stablehlo.after_all %arg1, %arg1 : !stablehlo.token
    %3 = stablehlo.create_token : !stablehlo.token
    %4 = func.call @keep(%3) : (!stablehlo.token) -> !stablehlo.token
    %c0 = stablehlo.constant dense<0> : tensor<i32>
    %5:2 = stablehlo.while(%i = %c0, %t = %4) : tensor<i32>, !stablehlo.token
     cond {
      %c5 = stablehlo.constant dense<5> : tensor<i32>
      %lt = stablehlo.compare LT, %i, %c5 : (tensor<i32>, tensor<i32>) -> tensor<i1>
      stablehlo.return %lt : tensor<i1>
    } do {
      %c1 = stablehlo.constant dense<1> : tensor<i32>
      %n = stablehlo.add %i, %c1 : tensor<i32>
      %u = stablehlo.after_all %t : !stablehlo.token
      stablehlo.return %n, %u : tensor<i32>, !stablehlo.token
    }
    return %1, %2, %5#1 : tensor<3xf32>, !stablehlo.token, !stablehlo.token
  }
}
"""


def test_no_token_is_left_for_a_backend():
    module = legalize_tokens(parse_module(TOKENS))
    main = module.functions["main"]
    assert main.arg_types[1] == TOKEN_AS and main.result_types[1:] == (TOKEN_AS, TOKEN_AS)
    for op in module.walk():
        assert op.name not in ("stablehlo.create_token", "stablehlo.after_all")
        assert not any(isinstance(v.type, TokenType) for v in (*op.operands, *op.results))
    plain = parse_module("func.func @main(%a: tensor<2xf32>) -> tensor<2xf32> {\n  return %a : tensor<2xf32>\n}")
    assert legalize_tokens(plain) is plain


@pytest.mark.parametrize("backend", ["reference", "numba_cpu"])
def test_a_program_with_tokens_runs(backend, tmp_path):
    compiled = (ReferenceCompiler().compile(TOKENS, CompileOptions()) if backend == "reference"
                else NumbaCompiler(cache_dir=tmp_path).compile(TOKENS))
    token = np.zeros((0,), np.bool_)
    out = compiled.run([np.arange(3, dtype=np.float32), token])
    np.testing.assert_array_equal(out[0], [1, 2, 3])
    for t in out[1:]:
        assert t.dtype == np.bool_ and t.shape == (0,)
