"""Rows skewed by one (``Lowering._emit_skewed``): where a group's last member divides each
element of a row by something the members before it reduced from that row (softmax), the
divisions of row i-1 share a loop with the arithmetic of row i, each reading its own row's
buffers.

Every program runs on the compiled tier and the eager tier (numpy, op by op, in row order): the
bits must be the same, so a row read from the wrong buffer shows as a difference. Rows of -inf
and NaN go through too, and row counts where a thread's chunk has one row or two."""

from __future__ import annotations

import re

import numpy as np
import pytest

from .tier_helpers import assert_same_bits, eager_program

SKEWED_LOOP = re.compile(r"for i\d+ in range\(\w+ \+ 1, \w+\):")


def _softmax(rows: int, cols: int, also_exp: bool = False, tail: str = "divide") -> str:
    t, r = f"tensor<{rows}x{cols}xf32>", f"tensor<{rows}xf32>"
    results = f"%out, %e : {t}, {t}" if also_exp else f"%out : {t}"
    types_ = f"{t}, {t}" if also_exp else t
    if tail == "divide":
        last = f"%out = stablehlo.divide %e, %sb : {t}"
    elif tail == "sqrt":
        last = f"%q = stablehlo.sqrt %e : {t}\n  %out = stablehlo.multiply %q, %sb : {t}"
    else:
        last = f"%out = stablehlo.multiply %e, %sb : {t}"
    return f"""func.func public @main(%x: {t}) -> ({types_}) {{
  %ninf = stablehlo.constant dense<0xFF800000> : tensor<f32>
  %m = stablehlo.reduce(%x init: %ninf) applies stablehlo.maximum across dimensions = [1] : ({t}, tensor<f32>) -> {r}
  %mb = stablehlo.broadcast_in_dim %m, dims = [0] : ({r}) -> {t}
  %d = stablehlo.subtract %x, %mb : {t}
  %e = stablehlo.exponential %d : {t}
  %zero = stablehlo.constant dense<0.0> : tensor<f32>
  %s = stablehlo.reduce(%e init: %zero) applies stablehlo.add across dimensions = [1] : ({t}, tensor<f32>) -> {r}
  %sb = stablehlo.broadcast_in_dim %s, dims = [0] : ({r}) -> {t}
  {last}
  return {results}
}}
"""


def _input(rows: int, cols: int, seed: int) -> np.ndarray:
    x = (np.random.default_rng(seed).standard_normal((rows, cols)) * 8).astype(np.float32)
    if rows >= 3:
        x[1] = -np.inf  # every exponential NaN: 0/0
        x[2, 0] = np.nan
    return x


@pytest.mark.parametrize("rows, cols, skewed", [
    (2, 64, True),      # one row before the loop, one after it, none in it
    (3, 7, True),
    (17, 300, True),
    (600, 1024, True),  # parallel: chunks of 37-38 rows, each skewed on its own
    (8, 70000, True),   # parallel: a chunk of one row
    (1, 64, False),     # one row: nothing to overlap
    (33, 1, True),      # one element per row
])
def test_skewed_rows_give_the_bits_of_row_order(compiler, rows, cols, skewed):
    text = _softmax(rows, cols)
    program = compiler.compile(text)
    assert bool(SKEWED_LOOP.search(program.source)) == skewed, program.source
    # The skewed loop asks for the input's next row before its long shared loop.
    next_row = re.compile(rf"prefetch_span\(arg0, \(i\d+ \+ 1\) \* {cols}, {cols}\)")
    assert bool(next_row.search(program.source)) == skewed, program.source
    x = _input(rows, cols, rows)
    compiled = program.run([x])
    with np.errstate(all="ignore"):
        eager = eager_program(text).run([x])
    assert_same_bits(eager, compiled, f"softmax {rows}x{cols}")
    assert np.isnan(compiled[0][1]).all() if rows >= 3 else True


def test_a_row_the_last_member_reads_from_an_output_array(compiler):
    """The exponentials are returned too: the divisions read row i-1 of their array while row i
    is written into it."""
    text = _softmax(40, 96, also_exp=True)
    program = compiler.compile(text)
    assert SKEWED_LOOP.search(program.source), program.source
    # Only the input's next row is asked for: the outputs are written, not read.
    assert re.findall(r"prefetch_span\((\w+),", program.source) == ["arg0"], program.source
    x = _input(40, 96, 7)
    with np.errstate(all="ignore"):
        assert_same_bits(eager_program(text).run([x]), program.run([x]), "softmax and exp")


@pytest.mark.parametrize("tail, skewed", [("sqrt", True), ("multiply", False)])
def test_only_a_last_member_using_the_divider_is_skewed(compiler, tail, skewed):
    text = _softmax(24, 80, tail=tail)
    program = compiler.compile(text)
    assert bool(SKEWED_LOOP.search(program.source)) == skewed, program.source
    x = _input(24, 80, 3)
    with np.errstate(all="ignore"):
        assert_same_bits(eager_program(text).run([x]), program.run([x]), tail)


def _plus_one_column(tail: str, rows: int, cols: int, col: int) -> str:
    """Softmax, plus the exponentials' column ``col`` broadcast along each row: a row buffer read
    at a constant column (found by a second reader: the load went above the row loop)."""
    t = f"tensor<{rows}x{cols}xf32>"
    body = _softmax(rows, cols, tail=tail).rsplit("  return", 1)[0]
    return body + f"""  %c = stablehlo.slice %e [0:{rows}, {col}:{col + 1}] : ({t}) -> tensor<{rows}x1xf32>
  %cb = stablehlo.broadcast_in_dim %c, dims = [0, 1] : (tensor<{rows}x1xf32>) -> {t}
  %out2 = stablehlo.add %out, %cb : {t}
  return %out2 : {t}
}}
"""


@pytest.mark.parametrize("tail, skewed", [("divide", True), ("multiply", False)])
@pytest.mark.parametrize("col", [0, 23])
def test_a_row_buffer_read_at_a_constant_column_is_read_in_each_row(compiler, tail, skewed, col):
    text = _plus_one_column(tail, 11, 24, col)
    program = compiler.compile(text)
    assert bool(SKEWED_LOOP.search(program.source)) == skewed, program.source
    x = _input(11, 24, 11)
    with np.errstate(all="ignore"):
        assert_same_bits(eager_program(text).run([x]), program.run([x]), f"{tail}, column {col}")


@pytest.mark.parametrize("index_map", ["transpose", "reverse"])
def test_no_row_ahead_of_an_array_read_through_an_index_map(compiler, index_map):
    """A transposed or reversed input is read in another order than the loop's rows: asking
    for its next row would fetch lines the loop does not read then."""
    t = "tensor<24x24xf32>"
    mapped = ("stablehlo.transpose %x, dims = [1, 0]" if index_map == "transpose"
              else "stablehlo.reverse %x, dims = [0]")
    text = _softmax(24, 24).replace(
        "%ninf = stablehlo.constant", f"%y = {mapped} : ({t}) -> {t}\n  %ninf = stablehlo.constant", 1)
    text = text.replace("(%x init:", "(%y init:").replace("subtract %x,", "subtract %y,")
    program = compiler.compile(text)
    assert SKEWED_LOOP.search(program.source), program.source
    assert "prefetch_span(" not in program.source, program.source
    x = _input(24, 24, 9)
    with np.errstate(all="ignore"):
        assert_same_bits(eager_program(text).run([x]), program.run([x]), index_map)


def test_a_layernorm_asks_for_no_row_ahead(compiler):
    """Rows that are not skewed run passes bound by their loads, which prefetches only slowed
    (a 8192x1024 layernorm: 5% more time)."""
    t, r = "tensor<16x256xf32>", "tensor<16xf32>"
    text = f"""func.func public @main(%x: {t}) -> {t} {{
  %zero = stablehlo.constant dense<0.0> : tensor<f32>
  %s = stablehlo.reduce(%x init: %zero) applies stablehlo.add across dimensions = [1] : ({t}, tensor<f32>) -> {r}
  %sb = stablehlo.broadcast_in_dim %s, dims = [0] : ({r}) -> {t}
  %out = stablehlo.subtract %x, %sb : {t}
  return %out : {t}
}}
"""
    program = compiler.compile(text)
    assert "prefetch_span(" not in program.source
    x = _input(16, 256, 5)
    with np.errstate(all="ignore"):
        assert_same_bits(eager_program(text).run([x]), program.run([x]), "centred rows")


def test_prefetch_span_is_clipped_to_the_array_and_changes_nothing():
    import numba

    from pjrt_hub.backends.numba_cpu.support import prefetch_span

    @numba.njit
    def ask(a, offset, count):
        prefetch_span(a, offset, count)
        return a.sum()

    for dtype in (np.float32, np.float64, np.int8):
        a = np.arange(1000).astype(dtype)
        before = a.copy()
        # Past the end, before the start, longer than the array, empty, and a zero-size array.
        for offset, count in [(0, 1000), (990, 1 << 40), (1000, 64), (1 << 40, 1 << 40), (-500, 600),
                              (-(1 << 40), 10), (10, 0), (10, -5), (1 << 62, 1 << 62), (5, (1 << 63) - 1),
                              ((1 << 63) - 1, (1 << 63) - 1), (-(1 << 63), (1 << 63) - 1)]:
            assert ask(a, offset, count) == before.sum()
        assert a.tobytes() == before.tobytes()
        assert ask(np.zeros(0, dtype), 0, 100) == 0
        assert ask(a[::3], 5, 100) == before[::3].sum()  # not contiguous: nothing asked
