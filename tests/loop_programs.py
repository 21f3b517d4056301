"""StableHLO loops for the tests: ones that never end and ones that do (time limits), and a
scan that stacks its steps (updates in place)."""

from __future__ import annotations

#: A ``while`` whose condition is always true: a counter that runs forever (0-d in and out).
NEVER_ENDING = """module @jit_forever {
  func.func public @main(%arg0: tensor<i32>) -> tensor<i32> {
    %0 = stablehlo.while(%i = %arg0) : tensor<i32>
    cond {
      %t = stablehlo.constant dense<true> : tensor<i1>
      stablehlo.return %t : tensor<i1>
    } do {
      %c1 = stablehlo.constant dense<1> : tensor<i32>
      %1 = stablehlo.add %i, %c1 : tensor<i32>
      stablehlo.return %1 : tensor<i32>
    }
    return %0 : tensor<i32>
  }
}
"""

#: The same forever loop over a 4-vector it may overwrite in place (the input is donated).
NEVER_ENDING_DONATING = """module @jit_forever_donating {
  func.func public @main(%arg0: tensor<4xf32> {tf.aliasing_output = 0 : i32}) -> tensor<4xf32> {
    %0 = stablehlo.while(%x = %arg0) : tensor<4xf32>
    cond {
      %t = stablehlo.constant dense<true> : tensor<i1>
      stablehlo.return %t : tensor<i1>
    } do {
      %c = stablehlo.constant dense<1.0> : tensor<4xf32>
      %1 = stablehlo.add %x, %c : tensor<4xf32>
      stablehlo.return %1 : tensor<4xf32>
    }
    return %0 : tensor<4xf32>
  }
}
"""

def count_to(bound: int) -> str:
    """Counts from %arg0 up to ``bound`` in a loop whose bound is data, not a counted loop:
    ``bound - %arg0`` iterations (0-d in and out)."""
    return f"""module @jit_count {{
  func.func public @main(%arg0: tensor<i32>) -> tensor<i32> {{
    %bound = stablehlo.constant dense<{bound}> : tensor<i32>
    %0:2 = stablehlo.while(%i = %arg0, %n = %bound) : tensor<i32>, tensor<i32>
    cond {{
      %p = stablehlo.compare LT, %i, %n, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
      stablehlo.return %p : tensor<i1>
    }} do {{
      %c1 = stablehlo.constant dense<1> : tensor<i32>
      %1 = stablehlo.add %i, %c1 : tensor<i32>
      stablehlo.return %1, %n : tensor<i32>, tensor<i32>
    }}
    return %0#0 : tensor<i32>
  }}
}}
"""


COUNT_TO_TEN = count_to(10)

#: A never-ending loop with real work in it (a 256x256 matmul per iteration): XLA:CPU runs it on
#: its own threads and returns from execute at once, where it runs the tiny loops inline.
NEVER_ENDING_MATMUL = """func.func @main(%a: tensor<256x256xf32>) -> tensor<256x256xf32> {
  %0 = stablehlo.while(%x = %a) : tensor<256x256xf32>
  cond {
    %t = stablehlo.constant dense<true> : tensor<i1>
    stablehlo.return %t : tensor<i1>
  } do {
    %1 = stablehlo.dot_general %x, %x, contracting_dims = [1] x [0] : (tensor<256x256xf32>, tensor<256x256xf32>) -> tensor<256x256xf32>
    stablehlo.return %1 : tensor<256x256xf32>
  }
  return %0 : tensor<256x256xf32>
}
"""


def stacking_scan(steps: int, width: int, *, from_input: bool = False, through_call: bool = False) -> str:
    """``@main(xs: steps x width f32)``: a scan that copies row ``k`` of ``xs`` into row ``k`` of
    a stacked output at step ``k`` (``dynamic_update_slice`` of the carried array), so it
    returns ``xs``. The stack starts from zeros, or from ``xs`` itself (``from_input``); the
    update is in the loop body, or in a function it calls (``through_call``), as JAX emits it."""
    t = f"tensor<{steps}x{width}xf32>"
    start = "%xs" if from_input else "%zeros"
    row = f"tensor<1x{width}xf32>"
    update = f"stablehlo.dynamic_update_slice %ys, %row, %k, %z : ({t}, {row}, tensor<i32>, tensor<i32>) -> {t}"
    callee = ""
    if through_call:
        update = f"func.call @update_row(%ys, %row, %k) : ({t}, {row}, tensor<i32>) -> {t}"
        callee = f"""
func.func private @update_row(%s: {t}, %r: {row}, %i: tensor<i32>) -> {t} {{
  %z = stablehlo.constant dense<0> : tensor<i32>
  %d = stablehlo.dynamic_update_slice %s, %r, %i, %z : ({t}, {row}, tensor<i32>, tensor<i32>) -> {t}
  return %d : {t}
}}"""
    return f"""func.func public @main(%xs: {t}) -> {t} {{
  %z = stablehlo.constant dense<0> : tensor<i32>
  %c1 = stablehlo.constant dense<1> : tensor<i32>
  %n = stablehlo.constant dense<{steps}> : tensor<i32>
  %zeros = stablehlo.constant dense<0.0> : {t}
  %w:2 = stablehlo.while(%k = %z, %ys = {start}) : tensor<i32>, {t}
  cond {{
    %lt = stablehlo.compare LT, %k, %n, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
    stablehlo.return %lt : tensor<i1>
  }} do {{
    %row = stablehlo.dynamic_slice %xs, %k, %z, sizes = [1, {width}] : ({t}, tensor<i32>, tensor<i32>) -> tensor<1x{width}xf32>
    %d = {update}
    %k1 = stablehlo.add %k, %c1 : tensor<i32>
    stablehlo.return %k1, %d : tensor<i32>, {t}
  }}
  return %w#1 : {t}
}}{callee}"""


def peak_bytes(run) -> int:
    """The most memory numpy (and Python) held at once while ``run()`` ran (tracemalloc)."""
    import tracemalloc

    tracemalloc.start()
    try:
        run()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
