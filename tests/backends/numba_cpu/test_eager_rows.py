"""The eager tier's row segments: runs of row ops computed block of rows after block of rows, on
two threads, with the bits of the same ops on whole arrays (which the tier tests compare with the
compiled code), and without ever holding their intermediate arrays whole."""

from __future__ import annotations

import numpy as np
import pytest

from pjrt_hub.backends.cpu_runtime import helper_thread
from pjrt_hub.backends.numba_cpu import eager
from pjrt_hub.backends.numba_cpu.eager_math import NAMESPACE
from pjrt_hub.backends.numba_cpu.lanes import float_extreme

from ...corpus import program_text, public_arrays, public_programs
from ...loop_programs import peak_bytes
from .tier_helpers import assert_same_bits, eager_program

PROGRAMS = {p["name"]: p for p in public_programs()}


def _segments(program: eager.EagerProgram) -> list[eager._RowSegment]:
    return [s for s in program._body.steps if isinstance(s, eager._RowSegment)]


@pytest.fixture
def small_blocks(monkeypatch: pytest.MonkeyPatch) -> None:
    """Segments on the corpus's small arrays: blocks of a few elements, no minimum size."""
    monkeypatch.setattr(eager, "ROW_BLOCK_ELEMENTS", 8)
    monkeypatch.setattr(eager, "ROW_SEGMENT_MIN", 0)


def _whole(program_text_: str, monkeypatch: pytest.MonkeyPatch) -> eager.EagerProgram:
    with monkeypatch.context() as m:
        m.setattr(eager, "_row_segments", lambda ops: [[op] for op in ops])
        return eager_program(program_text_)


@pytest.mark.parametrize("cores", [1, 2])
def test_every_corpus_program_gives_the_same_bits_in_row_blocks(small_blocks, monkeypatch, cores):
    monkeypatch.setattr(helper_thread, "CORES", cores)
    segmented = 0
    for name, entry in sorted(PROGRAMS.items()):
        text = program_text("public", entry)
        args = public_arrays(entry)[0]
        program = eager_program(text)
        segmented += bool(_segments(program))
        assert_same_bits(program.run(args), _whole(text, monkeypatch).run(args), name)
    assert segmented >= 10, f"only {segmented} corpus programs have a row segment"


def _rows_program(n: int, m: int) -> str:
    """softmax, then a layernorm of its result with a bias read as a (1, m) row, and a value
    that a later op (not a row op: a transpose) reads."""
    t, r = f"tensor<{n}x{m}xf32>", f"tensor<{n}xf32>"
    return f"""func.func @main(%x: {t}, %b: tensor<{m}xf32>) -> ({t}, tensor<{m}x{n}xf32>, {r}) {{
  %ninf = stablehlo.constant dense<0xFF800000> : tensor<f32>
  %zero = stablehlo.constant dense<0.0> : tensor<f32>
  %mx = stablehlo.reduce(%x init: %ninf) applies stablehlo.maximum across dimensions = [1] : ({t}, tensor<f32>) -> {r}
  %mxb = stablehlo.broadcast_in_dim %mx, dims = [0] : ({r}) -> {t}
  %d = stablehlo.subtract %x, %mxb : {t}
  %e = stablehlo.exponential %d : {t}
  %s = stablehlo.reduce(%e init: %zero) applies stablehlo.add across dimensions = [1] : ({t}, tensor<f32>) -> {r}
  %sb = stablehlo.broadcast_in_dim %s, dims = [0] : ({r}) -> {t}
  %p = stablehlo.divide %e, %sb : {t}
  %b1 = stablehlo.reshape %b : (tensor<{m}xf32>) -> tensor<1x{m}xf32>
  %bb = stablehlo.broadcast_in_dim %b1, dims = [0, 1] : (tensor<1x{m}xf32>) -> {t}
  %q = stablehlo.multiply %p, %bb : {t}
  %c = stablehlo.constant dense<0.5> : tensor<f32>
  %cb = stablehlo.broadcast_in_dim %c, dims = [] : (tensor<f32>) -> {t}
  %big = stablehlo.compare GT, %q, %cb : ({t}, {t}) -> tensor<{n}x{m}xi1>
  %y = stablehlo.select %big, %cb, %q : tensor<{n}x{m}xi1>, {t}
  %yt = stablehlo.transpose %p, dims = [1, 0] : ({t}) -> tensor<{m}x{n}xf32>
  return %y, %yt, %mx : {t}, tensor<{m}x{n}xf32>, {r}
}}"""


def _rows_inputs(n: int, m: int) -> list[np.ndarray]:
    rng = np.random.default_rng(3)
    x = (rng.standard_normal((n, m)) * 4).astype(np.float32)
    x[1] = 0.0
    x[2] = -0.0
    x[3, 5] = np.nan
    x[4, :] = -np.inf
    x[5, 7] = np.inf
    x[6] = np.where(np.arange(m) % 2, 0.0, -0.0)
    b = rng.standard_normal(m).astype(np.float32)
    return [x, b]


@pytest.mark.parametrize("cores", [1, 2])
def test_a_softmax_layernorm_program_in_row_blocks_gives_the_compiled_bits(compiler, small_blocks, monkeypatch, cores):
    monkeypatch.setattr(helper_thread, "CORES", cores)
    n, m = 37, 70  # blocks of one row; odd sizes
    text = _rows_program(n, m)
    program = eager_program(text)
    (segment,) = _segments(program)
    # The reshape of the bias, read by the segment, went before it; the transposed value and
    # the returned ones are kept, nothing else.
    names = {v.name for v in segment.outputs}
    assert names == {"%y", "%p", "%mx"}, names
    args = _rows_inputs(n, m)
    got = program.run(args)
    assert_same_bits(got, _whole(text, monkeypatch).run(args), "rows vs whole")
    assert_same_bits(got, compiler.compile(text).run(args), "rows vs compiled")


def test_row_blocks_of_a_real_size_on_two_threads(monkeypatch):
    monkeypatch.setattr(helper_thread, "CORES", 2)
    n, m = 1000, 300  # 1000 rows in blocks of 109: the last one shorter
    text = _rows_program(n, m)
    program = eager_program(text)
    (segment,) = _segments(program)
    assert segment.rows == eager.ROW_BLOCK_ELEMENTS // m and n % segment.rows
    args = _rows_inputs(n, m)
    assert_same_bits(program.run(args), _whole(text, monkeypatch).run(args), "1000x300")


def test_a_segment_holds_no_intermediate_array_whole(monkeypatch):
    """Eight ops on an 8 MiB array hold their result and a few blocks' worth of temporaries
    (the numpy twins' float64 ones included), on each thread, not eight arrays."""
    monkeypatch.setattr(helper_thread, "CORES", 2)
    monkeypatch.setattr(eager, "ROW_BLOCK_ELEMENTS", 1 << 14)  # the temporaries scale with it
    n = 1 << 21
    ops = ["negate", "exponential", "abs", "sqrt", "negate", "abs", "tanh", "abs"]
    chain = "\n".join(f"  %v{i + 1} = stablehlo.{op} %v{i} : tensor<{n}xf32>" for i, op in enumerate(ops))
    text = f"""func.func @main(%v0: tensor<{n}xf32>) -> tensor<{n}xf32> {{
{chain}
  return %v8 : tensor<{n}xf32>
}}"""
    program = eager_program(text)
    assert len(_segments(program)) == 1
    x = np.random.default_rng(2).standard_normal(n).astype(np.float32)
    program.run([x])
    peak = peak_bytes(lambda: program.run([x]))
    assert peak < 2 * x.nbytes, f"{peak / x.nbytes:.2f} arrays held at once"
    whole = _whole(text, monkeypatch)
    assert peak_bytes(lambda: whole.run([x])) > 2 * peak  # what the segment saves


def test_what_breaks_a_segment(small_blocks):
    """Ops that mix rows (a transpose, a reduction over the rows, a broadcast that moves the
    first dimension) end a run; a row op reading their results starts the next."""
    t = "tensor<16x16xf32>"
    text = f"""func.func @main(%x: {t}) -> ({t}, tensor<16xf32>) {{
  %zero = stablehlo.constant dense<0.0> : tensor<f32>
  %a = stablehlo.exponential %x : {t}
  %b = stablehlo.abs %a : {t}
  %t = stablehlo.transpose %b, dims = [1, 0] : ({t}) -> {t}
  %c = stablehlo.negate %t : {t}
  %d = stablehlo.add %c, %x : {t}
  %cols = stablehlo.reduce(%d init: %zero) applies stablehlo.add across dimensions = [0] : ({t}, tensor<f32>) -> tensor<16xf32>
  %cb = stablehlo.broadcast_in_dim %cols, dims = [1] : (tensor<16xf32>) -> {t}
  %e = stablehlo.multiply %cb, %d : {t}
  %f = stablehlo.sqrt %e : {t}
  return %f, %cols : {t}, tensor<16xf32>
}}"""
    program = eager_program(text)
    runs = [[s.name for s in seg.outputs] for seg in _segments(program)]
    assert runs == [["%b"], ["%d"], ["%f"]], runs
    x = np.random.default_rng(4).standard_normal((16, 16)).astype(np.float32)
    x[0, 0] = np.nan
    got = program.run([x])
    with np.errstate(invalid="ignore"):
        want = [np.sqrt(np.add.reduce(-np.abs(np.exp(x)).T + x, axis=0)[None, :] * (-np.abs(np.exp(x)).T + x))]
    np.testing.assert_allclose(got[0], want[0], rtol=1e-5, equal_nan=True)


@pytest.mark.parametrize("which", ["max", "min"])
def test_float_max_and_min_of_rows_order_signed_zeros_and_keep_nans(which):
    fold = NAMESPACE["fmaximum" if which == "max" else "fminimum"]
    rows = np.array([
        [0.0, -0.0, -1.0], [-0.0, -0.0, -2.0], [-0.0, 0.0, 1.0], [0.0, 0.0, 3.0], [np.nan, 1.0, 0.0],
        [-np.inf, -np.inf, -np.inf], [np.inf, -0.0, 0.0], [-0.0, -3.0, np.nan], [5.0, 0.0, -0.0],
    ], np.float32)
    got = float_extreme(rows, which)
    for row, value in zip(rows, got):
        want = row[0]
        for v in row[1:]:
            want = fold(np.float32(want), np.float32(v))
        assert np.isnan(value) == np.isnan(want) and (np.isnan(value) or (
            value == want and np.signbit(value) == np.signbit(want))), (row, value, want)
    empty = float_extreme(np.zeros((0, 4), np.float32), which)
    assert empty.shape == (0,)


@pytest.mark.parametrize("x, shape", [
    (np.arange(6, dtype=np.float32).reshape(6, 1), (6, 5)),
    (np.arange(5, dtype=np.float32).reshape(1, 5), (6, 5)),
    (np.arange(4, dtype=np.float64).reshape(2, 1, 2), (2, 3, 2)),
    (np.arange(12, dtype=np.float32).reshape(6, 2)[:, :1], (6, 4)),  # not C-contiguous
    (np.zeros((0, 1), np.float32), (0, 3)),
    (np.float32(2.0) * np.ones(()), (3, 2)),                        # another rank
], ids=["rows", "columns", "middle", "strided", "empty", "0-d"])
def test_broadcast_views_are_numpys(x, shape):
    got = eager._broadcast_view(np.asarray(x), shape)
    want = np.broadcast_to(x, shape)
    assert got.shape == want.shape and got.dtype == want.dtype and np.array_equal(got, want)
    assert not got.flags.writeable
    with pytest.raises(ValueError):
        eager._broadcast_view(np.ones((2, 3), np.float32), (4, 3))
