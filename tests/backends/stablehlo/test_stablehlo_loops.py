"""Counted loops: which ``while`` loops end by themselves, and after how many iterations."""

from __future__ import annotations

from pathlib import Path

import pytest

from pjrt_hub.backends.stablehlo import parse_module
from pjrt_hub.backends.stablehlo.loops import trip_count, unbounded_loops

CORPUS = Path(__file__).resolve().parents[3] / "pjrt_hub" / "data" / "corpus" / "public"


def loop(init: str, cond: str, step: str, ty: str = "i32") -> str:
    """A loop over counter %i with ``cond`` (using %i and %b) and ``step`` (defining %n)."""
    return f"""module @m {{
  func.func public @main(%x: tensor<f32>) -> tensor<f32> {{
    %init = stablehlo.constant dense<{init}> : tensor<{ty}>
    %0:2 = stablehlo.while(%i = %init, %y = %x) : tensor<{ty}>, tensor<f32>
    cond {{
      %b = stablehlo.constant dense<{cond[1]}> : tensor<{ty}>
      %p = stablehlo.compare {cond[0]}, {cond[2]}, SIGNED : (tensor<{ty}>, tensor<{ty}>) -> tensor<i1>
      stablehlo.return %p : tensor<i1>
    }} do {{
      %s = stablehlo.constant dense<{step[1]}> : tensor<{ty}>
      %n = stablehlo.{step[0]} : tensor<{ty}>
      stablehlo.return %n, %y : tensor<{ty}>, tensor<f32>
    }}
    return %0#1 : tensor<f32>
  }}
}}"""


def counts(text: str) -> list[int | None]:
    module = parse_module(text)
    ops = list(module.walk())
    defs = {r.id: op for op in ops for r in op.results}
    return [trip_count(op, defs) for op in ops if op.name == "stablehlo.while"]


@pytest.mark.parametrize("init, cond, step, expected", [
    (0, ("LT", 25, "%i, %b"), ("add", 1, "%i, %s"), 25),          # fori_loop(0, 25)
    (0, ("LT", 25, "%i, %b"), ("add", 1, "%s, %i"), 25),          # step on either side
    (3, ("LT", 10, "%i, %b"), ("add", 4, "%i, %s"), 2),           # 3, 7 -> 11 stops
    (0, ("LE", 10, "%i, %b"), ("add", 5, "%i, %s"), 3),           # 0, 5, 10
    (0, ("GT", 10, "%b, %i"), ("add", 1, "%i, %s"), 10),          # bound on the left: 10 > i
    (10, ("GT", 0, "%i, %b"), ("subtract", 1, "%i, %s"), 10),     # counting down
    (10, ("GE", 0, "%i, %b"), ("add", -2, "%i, %s"), 6),          # 10, 8, ..., 0
    (5, ("LT", 5, "%i, %b"), ("add", 1, "%i, %s"), 0),            # never entered
])
def test_counted_loops_have_a_trip_count(init, cond, step, expected):
    step = (f"{step[0]} {step[2]}", step[1])
    assert counts(loop(init, cond, step)) == [expected]


@pytest.mark.parametrize("init, cond, step", [
    (0, ("LT", 10, "%i, %b"), ("subtract", 1, "%i, %s")),   # moves away from the bound
    (0, ("LT", 10, "%i, %b"), ("add", 0, "%i, %s")),        # does not move
    (0, ("NE", 10, "%i, %b"), ("add", 3, "%i, %s")),        # != may step over the bound
    (0, ("LT", 10, "%i, %b"), ("multiply", 2, "%i, %s")),   # not a step
    (0, ("LT", 10, "%i, %b"), ("subtract", 1, "%s, %i")),   # 1 - i: not a step
    (0, ("LT", 2147483647, "%i, %b"), ("add", 2, "%i, %s")),  # would wrap around past the bound
])
def test_loops_that_may_not_end_have_none(init, cond, step):
    step = (f"{step[0]} {step[2]}", step[1])
    assert counts(loop(init, cond, step)) == [None]


#: A ``while true`` loop, and one whose bound is a loop-carried value (data, not a constant).
NEVER_ENDING = """func.func @main(%x: tensor<i32>) -> tensor<i32> {
  %0 = stablehlo.while(%i = %x) : tensor<i32>
  cond {
    %t = stablehlo.constant dense<true> : tensor<i1>
    stablehlo.return %t : tensor<i1>
  } do {
    stablehlo.return %i : tensor<i32>
  }
  return %0 : tensor<i32>
}"""
DATA_BOUND = """func.func @main(%x: tensor<i32>) -> tensor<i32> {
  %c0 = stablehlo.constant dense<0> : tensor<i32>
  %0:2 = stablehlo.while(%i = %c0, %n = %x) : tensor<i32>, tensor<i32>
  cond {
    %p = stablehlo.compare LT, %i, %n, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
    stablehlo.return %p : tensor<i1>
  } do {
    %c1 = stablehlo.constant dense<1> : tensor<i32>
    %1 = stablehlo.add %i, %c1 : tensor<i32>
    stablehlo.return %1, %n : tensor<i32>, tensor<i32>
  }
  return %0#0 : tensor<i32>
}"""


def test_a_loop_without_a_constant_bound_has_none():
    assert counts(NEVER_ENDING) == [None]
    assert counts(DATA_BOUND) == [None]
    assert counts(DATA_BOUND.replace("%i = %c0, %n = %x", "%i = %x, %n = %c0")) == [None]


def test_the_loops_jax_writes_for_fori_loop_and_scan_are_counted_in_both_forms():
    for name, expected in (("fori_loop", [25]), ("scan_rnn", [16]), ("random_normal", [5, 5, 5, 5])):
        for suffix in (".mlir", ".generic.mlir"):
            text = (CORPUS / f"{name}{suffix}").read_text()
            assert counts(text) == expected, name + suffix
            assert not unbounded_loops(parse_module(text))


def test_unbounded_loops_multiplies_trip_counts_against_the_limit():
    text = loop(0, ("LT", 100, "%i, %b"), ("add %i, %s", 1))
    module = parse_module(text)
    assert not unbounded_loops(module)
    assert unbounded_loops(module, limit=99)
    assert unbounded_loops(parse_module(NEVER_ENDING))
