"""Deep nesting: long call chains and control flow nested far deeper than JAX emits.

numba_cpu refused calls nested deeper than a fixed depth, and its generated source failed to
compile past Python's limits on nested blocks (200 nested ``case``: IndentationError; 30 nested
``while``: "too many statically nested blocks"); reference hit RecursionError on a 2,000-deep
call chain. Nesting is now limited by memory up to MAX_NESTING levels, and recursion is refused
with a message naming the cycle.
"""

from __future__ import annotations

import numpy as np
import pytest

from pjrt_hub import PluginRegistry
from pjrt_hub._run import run_program
from pjrt_hub.abi import CompileError
from pjrt_hub.backends.stablehlo.nesting import MAX_NESTING


def call_chain(n: int) -> str:
    """@main -> @f0 -> @f1 -> ... -> @f{n-1}, which negates."""
    fns = []
    for i in range(n):
        body = (f"    %0 = func.call @f{i + 1}(%x) : (tensor<f32>) -> tensor<f32>\n" if i + 1 < n
                else "    %0 = stablehlo.negate %x : tensor<f32>\n")
        fns.append(f"  func.func private @f{i}(%x: tensor<f32>) -> tensor<f32> {{\n{body}    return %0 : tensor<f32>\n  }}")
    main = ("  func.func public @main(%x: tensor<f32>) -> tensor<f32> {\n"
            "    %0 = func.call @f0(%x) : (tensor<f32>) -> tensor<f32>\n    return %0 : tensor<f32>\n  }")
    return "module {\n" + main + "\n" + "\n".join(fns) + "\n}"


def nested_case(n: int) -> str:
    """n cases, each taking branch 0 into the next; the innermost negates (iteratively built)."""
    body = "%r0 = stablehlo.negate %x : tensor<f32>\n"
    for k in range(1, n + 1):
        body = (f'%r{k} = "stablehlo.case"(%i) ({{\n{body}stablehlo.return %r{k - 1} : tensor<f32>\n'
                f"}}, {{\nstablehlo.return %x : tensor<f32>\n}}) : (tensor<i32>) -> tensor<f32>\n")
    return f"func.func @main(%x: tensor<f32>, %i: tensor<i32>) -> tensor<f32> {{\n{body}return %r{n} : tensor<f32>\n}}"


def nested_while(n: int) -> str:
    """n while loops inside one another, each running its body once; the innermost negates."""
    body = "%w0 = stablehlo.negate %x : tensor<f32>\n"
    result = "%w0"
    for k in range(1, n + 1):
        body = (f"%w{k}:2 = stablehlo.while(%c{k} = %zero, %v{k} = %x) : tensor<i32>, tensor<f32>\n"
                f"cond {{\n%t{k} = stablehlo.compare LT, %c{k}, %one : (tensor<i32>, tensor<i32>) -> tensor<i1>\n"
                f"stablehlo.return %t{k} : tensor<i1>\n}} do {{\n{body}"
                f"%n{k} = stablehlo.add %c{k}, %one : tensor<i32>\n"
                f"stablehlo.return %n{k}, {result} : tensor<i32>, tensor<f32>\n}}\n")
        result = f"%w{k}#1"
    return (f"func.func @main(%x: tensor<f32>) -> tensor<f32> {{\n%zero = stablehlo.constant dense<0> : tensor<i32>\n"
            f"%one = stablehlo.constant dense<1> : tensor<i32>\n{body}return {result} : tensor<f32>\n}}")


@pytest.fixture(scope="module")
def clients():
    registry = PluginRegistry()
    return {name: registry.create_client(name) for name in ("reference", "numba_cpu")}


@pytest.mark.parametrize("plugin", ["reference", "numba_cpu"])
def test_a_2000_deep_call_chain_runs(clients, plugin):
    out = run_program(clients[plugin], call_chain(2000), [np.float32(2.0)]).outputs[0]
    assert out.shape == () and out == -2.0


@pytest.mark.parametrize("plugin, depth", [("reference", 300), ("numba_cpu", 60)])
def test_case_nested_past_pythons_indentation_limit_runs(clients, plugin, depth):
    out = run_program(clients[plugin], nested_case(depth), [np.float32(2.0), np.int32(0)]).outputs[0]
    assert out == -2.0
    # The other branch of the outermost case returns the argument itself.
    assert run_program(clients[plugin], nested_case(depth), [np.float32(2.0), np.int32(1)]).outputs[0] == 2.0


@pytest.mark.parametrize("plugin", ["reference", "numba_cpu"])
def test_while_nested_past_pythons_block_limit_runs(clients, plugin):
    out = run_program(clients[plugin], nested_while(24), [np.float32(3.0)]).outputs[0]
    assert out == -3.0


@pytest.mark.parametrize("plugin", ["reference", "numba_cpu"])
def test_recursion_is_refused_naming_the_cycle(clients, plugin):
    text = """module {
  func.func public @main(%x: tensor<f32>) -> tensor<f32> {
    %0 = func.call @ping(%x) : (tensor<f32>) -> tensor<f32>
    return %0 : tensor<f32>
  }
  func.func private @ping(%x: tensor<f32>) -> tensor<f32> {
    %0 = func.call @pong(%x) : (tensor<f32>) -> tensor<f32>
    return %0 : tensor<f32>
  }
  func.func private @pong(%x: tensor<f32>) -> tensor<f32> {
    %0 = func.call @ping(%x) : (tensor<f32>) -> tensor<f32>
    return %0 : tensor<f32>
  }
}"""
    with pytest.raises(CompileError, match=r"recursive calls are not supported .*: @ping -> @pong -> @ping"):
        run_program(clients[plugin], text, [np.float32(1.0)])


def test_the_limit_is_documented_and_far_above_what_jax_emits():
    assert MAX_NESTING >= 10_000
