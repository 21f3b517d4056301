"""Large outputs written row by row go to memory with non-temporal stores (``stream_row``).

Streaming changes how the bytes reach memory, never which bytes: every program here is compiled
twice, with streaming forced on for small outputs (``stream_min_bytes=0``) and off, and the
results must be identical bit for bit, on the parallel path (rows in chunks, a fence at the end
of each chunk) and on the serial one. The shapes cover both kinds of row (a member's own inner
loop, as in layernorm; the innermost outer loop, as in a plain elementwise program), several
outer dimensions, rows that are not a multiple of the store width and start misaligned, and
16-bit and 1-byte elements. An output that another op also reads is not streamed.
"""

from __future__ import annotations

import numpy as np
import pytest

from pjrt_hub.backends.numba_cpu import NumbaCompiler

from ...corpus import assert_output, program_text, public_arrays, public_programs

ROW_AND_ELEMENTWISE = """
func.func public @main(%x: tensor<6x5x131xf32>, %y: tensor<6x5x131xf32>) -> (tensor<6x5x131xf32>, tensor<6x5x131xf32>) {
  %0 = stablehlo.multiply %x, %y : tensor<6x5x131xf32>
  %1 = stablehlo.add %0, %x : tensor<6x5x131xf32>
  %init = stablehlo.constant dense<0.0> : tensor<f32>
  %s = stablehlo.reduce(%1 init: %init) applies stablehlo.add across dimensions = [2] : (tensor<6x5x131xf32>, tensor<f32>) -> tensor<6x5xf32>
  %b = stablehlo.broadcast_in_dim %s, dims = [0, 1] : (tensor<6x5xf32>) -> tensor<6x5x131xf32>
  %2 = stablehlo.subtract %1, %b : tensor<6x5x131xf32>
  %3 = stablehlo.exponential %y : tensor<6x5x131xf32>
  return %2, %3 : tensor<6x5x131xf32>, tensor<6x5x131xf32>
}
"""

# %0 is returned and read by %1: only %1 may be streamed (and it is returned twice).
READ_AGAIN = """
func.func public @main(%x: tensor<64x300xf32>) -> (tensor<64x300xf32>, tensor<64x300xf32>, tensor<64x300xf32>) {
  %0 = stablehlo.sine %x : tensor<64x300xf32>
  %1 = stablehlo.multiply %0, %0 : tensor<64x300xf32>
  return %0, %1, %1 : tensor<64x300xf32>, tensor<64x300xf32>, tensor<64x300xf32>
}
"""

NARROW = """
func.func public @main(%x: tensor<40x700xbf16>, %y: tensor<40x700xbf16>, %a: tensor<40x1031xi8>) -> (tensor<40x700xbf16>, tensor<40x1031xi1>) {
  %0 = stablehlo.add %x, %y : tensor<40x700xbf16>
  %z = stablehlo.constant dense<3> : tensor<40x1031xi8>
  %1 = stablehlo.compare GT, %a, %z, SIGNED : (tensor<40x1031xi8>, tensor<40x1031xi8>) -> tensor<40x1031xi1>
  return %0, %1 : tensor<40x700xbf16>, tensor<40x1031xi1>
}
"""


@pytest.fixture(scope="module")
def compilers(numba_cache_dir):
    """(streamed, not streamed), each (parallel, serial)."""
    def make(stream, parallel):
        return NumbaCompiler(cache_dir=numba_cache_dir, parallel_threshold=0 if parallel else 1 << 62,
                             stream_min_bytes=stream)
    return {(s, p): make(0 if s else 1 << 62, p) for s in (True, False) for p in (True, False)}


def _bits(arrays):
    return [np.ascontiguousarray(a).view(np.uint8).tobytes() for a in arrays]


def _inputs(text: str, rng: np.random.Generator) -> list[np.ndarray]:
    import ml_dtypes

    if "bf16" in text:
        return [rng.standard_normal((40, 700)).astype(ml_dtypes.bfloat16),
                rng.standard_normal((40, 700)).astype(ml_dtypes.bfloat16),
                rng.integers(-128, 128, (40, 1031), dtype=np.int8)]
    shape = (6, 5, 131) if "6x5x131" in text else (64, 300)
    count = text.split("@main(")[1].split(")")[0].count("%")
    return [rng.standard_normal(shape).astype(np.float32) for _ in range(count)]


@pytest.mark.parametrize("parallel", [True, False], ids=["parallel", "serial"])
@pytest.mark.parametrize("text", [ROW_AND_ELEMENTWISE, READ_AGAIN, NARROW], ids=["rows", "read_again", "narrow"])
def test_streamed_outputs_are_bit_identical(compilers, text, parallel):
    streamed = compilers[True, parallel].compile(text)
    plain = compilers[False, parallel].compile(text)
    assert "stream_row(" in streamed.source and "stream_fence()" in streamed.source
    assert "stream_row(" not in plain.source
    if parallel:
        assert "prange" in streamed.source
    args = _inputs(text, np.random.default_rng(7))
    got, expected = streamed.run(args), plain.run(args)
    assert [g.dtype for g in got] == [e.dtype for e in expected]
    assert _bits(got) == _bits(expected)
    if text is READ_AGAIN:
        # The output another op reads is written as before; the other one is streamed, and the
        # two copies of it returned are distinct arrays.
        assert streamed.source.count("stream_row(") == 1
        assert got[1] is not got[2] and np.array_equal(got[1], got[2])
        np.testing.assert_allclose(got[1], np.sin(args[0]) ** 2, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("name", ["layernorm", "softmax", "ew_chain"])
def test_streamed_corpus_programs_match_xla(compilers, name):
    entry = next(p for p in public_programs() if p["name"] == name)
    program = compilers[True, True].compile(program_text("public", entry))
    assert "stream_row(" in program.source
    inputs, expected = public_arrays(entry)
    outputs = program.run(inputs)
    for o, e, spec in zip(outputs, expected, entry["outputs"]):
        assert_output(o, e, spec, f"{name} {spec['name']}")
    assert _bits(outputs) == _bits(compilers[False, True].compile(program_text("public", entry)).run(inputs))


def test_small_outputs_are_not_streamed_by_default(compiler):
    program = compiler.compile(ROW_AND_ELEMENTWISE)
    assert "stream_row(" not in program.source


def test_stream_row_copies_every_length_offset_and_element_size():
    import numba

    from pjrt_hub.backends.numba_cpu.support import stream_fence, stream_row

    @numba.njit
    def copy(dst, offset, src):
        stream_row(dst, offset, src)
        stream_fence()

    rng = np.random.default_rng(3)
    for dtype in (np.float32, np.float64, np.uint8, np.int16, np.complex64):
        for n in (0, 1, 7, 8, 9, 31, 33, 100, 1031):
            for offset in (0, 1, 5, 13):
                dst = np.zeros(n + offset + 9, dtype)
                src = (rng.random(n) * 100).astype(dtype)
                copy(dst, offset, src)
                expected = np.zeros_like(dst)
                expected[offset:offset + n] = src
                assert np.array_equal(dst, expected), (dtype, n, offset)
    # A 2-D source into row 1 of a 2-D destination; the rows around it are untouched.
    dst = np.zeros((4, 37), np.float32)
    src = np.arange(2 * 37, dtype=np.float32).reshape(2, 37)
    copy(dst, 37, src)
    assert np.array_equal(dst[1:3], src) and not dst[0].any() and not dst[3].any()
