"""Programs of JAX's lax_test.py that numba_cpu once failed, run on both of its tiers (where the
eager tier takes the program) and on the reference, against numpy: convolutions and windows of
an empty input (all padding), complex convolutions (whose multiply-adds once went through the
integer intrinsics, which LLVM refuses on complex values), and ``bitcast_convert`` between 4-bit
integers and wider types (XLA's layout: the parts of a wider element along a new last
dimension, the lowest bits first), and JAX's ``dce_sink`` custom call."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from pjrt_hub.abi import CompileError, CompileOptions
from pjrt_hub.backends.numba_cpu.eager import EagerUnsupported
from pjrt_hub.backends.reference import ReferenceCompiler
from pjrt_hub.backends.stablehlo import parse_module, verify
from ..test_custom_calls import DCE_SINK
from .tier_helpers import as_bits, assert_same_bits, eager_program


def _run_everywhere(compiler, text: str, args: list[np.ndarray], *, eager: bool) -> tuple[list, list]:
    """The compiled tier's outputs and the reference's; the eager tier must give the compiled
    tier's bits (``eager``) or refuse the program as a whole."""
    compiled = compiler.compile(text).run(args)
    if eager:
        assert_same_bits(eager_program(text).run(args), compiled, "eager tier against compiled")
    else:
        with pytest.raises(EagerUnsupported):
            eager_program(text)
    return compiled, ReferenceCompiler().compile(text, CompileOptions()).run(args)


def _tensor(shape: tuple[int, ...], element: str) -> str:
    return "tensor<" + "".join(f"{d}x" for d in shape) + element + ">"


# -- an empty input is all padding ---------------------------------------------------------------

_CONV = """func.func @main(%x: {lhs}, %w: {rhs}) -> {out} {{
  %0 = stablehlo.convolution(%x, %w) dim_numbers = {dims}, window = {{stride = [2, 1], pad = [[10, 8], [7, 13]], lhs_dilate = {ld}, rhs_dilate = {rd}}} {{batch_group_count = 1 : i64, feature_group_count = {groups} : i64}} : ({lhs}, {rhs}) -> {out}
  return %0 : {out}
}}
"""

# (lax_test's testConvGeneralDilated8, 9 and 2): one feature group (the compiled tier's
# pixel-at-a-time loop), two groups, and two groups in NHWC order, of an input with no columns.
EMPTY_CONVOLUTIONS = {
    "one_group": dict(lhs=(3, 3, 9, 0), rhs=(2, 3, 4, 5), out=(3, 2, 12, 12), element="f16", groups=1,
                      dims="[b, f, 0, 1]x[o, i, 0, 1]->[b, f, 0, 1]", ld="[1, 2]", rd="[1, 2]"),
    "two_groups": dict(lhs=(2, 6, 9, 0), rhs=(6, 3, 4, 5), out=(2, 6, 12, 4), element="f16", groups=2,
                       dims="[b, f, 0, 1]x[o, i, 0, 1]->[b, f, 0, 1]", ld="[1, 1]", rd="[1, 4]"),
    "nhwc": dict(lhs=(2, 9, 0, 4), rhs=(4, 5, 2, 4), out=(2, 12, 12, 4), element="bf16", groups=2,
                 dims="[b, 0, 1, f]x[0, 1, i, o]->[b, 0, 1, f]", ld="[1, 2]", rd="[1, 2]"),
}


@pytest.mark.parametrize("name", sorted(EMPTY_CONVOLUTIONS))
def test_convolution_of_an_empty_input_is_zeros(compiler, name):
    c = EMPTY_CONVOLUTIONS[name]
    text = _CONV.format(lhs=_tensor(c["lhs"], c["element"]), rhs=_tensor(c["rhs"], c["element"]),
                        out=_tensor(c["out"], c["element"]), dims=c["dims"], ld=c["ld"], rd=c["rd"],
                        groups=c["groups"])
    dtype = np.float16 if c["element"] == "f16" else ml_dtypes.bfloat16
    weights = np.random.default_rng(3).standard_normal(c["rhs"]).astype(dtype)
    compiled, reference = _run_everywhere(compiler, text, [np.zeros(c["lhs"], dtype), weights], eager=True)
    for plugin, (out,) in (("numba_cpu", compiled), ("reference", reference)):
        assert out.dtype == dtype and out.shape == c["out"], plugin
        assert not out.astype(np.float32).any(), plugin


def test_reduce_window_of_an_empty_input_reduces_its_padding(compiler):
    """Every window of a padded empty input holds only the padding value, the init value."""
    text = """func.func @main(%x: tensor<2x0xf32>) -> tensor<2x5xf32> {
      %init = stablehlo.constant dense<-1.0> : tensor<f32>
      %0 = "stablehlo.reduce_window"(%x, %init) ({
      ^bb0(%a: tensor<f32>, %b: tensor<f32>):
        %1 = stablehlo.add %a, %b : tensor<f32>
        stablehlo.return %1 : tensor<f32>
      }) {window_dimensions = array<i64: 1, 2>, base_dilations = array<i64: 1, 2>,
          padding = dense<[[0, 0], [3, 3]]> : tensor<2x2xi64>} : (tensor<2x0xf32>, tensor<f32>) -> tensor<2x5xf32>
      return %0 : tensor<2x5xf32>
    }"""
    compiled, reference = _run_everywhere(compiler, text, [np.zeros((2, 0), np.float32)], eager=True)
    for plugin, (out,) in (("numba_cpu", compiled), ("reference", reference)):
        np.testing.assert_array_equal(out, np.full((2, 5), -3.0, np.float32), err_msg=plugin)


# -- complex convolutions ------------------------------------------------------------------------

# lax_test's testConvGeneralDilated0D2: two batch groups, no spatial dimension.
BATCH_GROUPS = """func.func @main(%x: tensor<4x3xcomplex<f32>>, %w: tensor<4x3xcomplex<f32>>) -> tensor<2x4xcomplex<f32>> {
  %0 = stablehlo.convolution(%x, %w) dim_numbers = [b, f]x[o, i]->[b, f], window = {stride = [], pad = [], lhs_dilate = [], rhs_dilate = [], reverse = []} {batch_group_count = 2 : i64, feature_group_count = 1 : i64} : (tensor<4x3xcomplex<f32>>, tensor<4x3xcomplex<f32>>) -> tensor<2x4xcomplex<f32>>
  return %0 : tensor<2x4xcomplex<f32>>
}
"""
# No groups and three output features (the compiled tier's pixel-at-a-time loop), padded.
BY_PIXEL = """func.func @main(%x: tensor<1x2x5xcomplex<f32>>, %w: tensor<3x2x2xcomplex<f32>>) -> tensor<1x3x5xcomplex<f32>> {
  %0 = stablehlo.convolution(%x, %w) dim_numbers = [b, f, 0]x[o, i, 0]->[b, f, 0], window = {stride = [1], pad = [[1, 0]], lhs_dilate = [1], rhs_dilate = [1], reverse = [false]} {batch_group_count = 1 : i64, feature_group_count = 1 : i64} : (tensor<1x2x5xcomplex<f32>>, tensor<3x2x2xcomplex<f32>>) -> tensor<1x3x5xcomplex<f32>>
  return %0 : tensor<1x3x5xcomplex<f32>>
}
"""


def _complex(rng, shape) -> np.ndarray:
    return (rng.standard_normal(shape) + 1j * rng.standard_normal(shape)).astype(np.complex64)


@pytest.mark.parametrize("text", [BATCH_GROUPS, BY_PIXEL], ids=["batch_groups", "by_pixel"])
def test_complex_convolution(compiler, text):
    rng = np.random.default_rng(7)
    if text is BATCH_GROUPS:
        x, w = _complex(rng, (4, 3)), _complex(rng, (4, 3))
        # Output feature o reads batch group o // 2: input rows 2 * (o // 2) + b.
        expected = np.array([[np.dot(x[2 * (o // 2) + b].astype(np.complex128), w[o]) for o in range(4)]
                             for b in range(2)])
    else:
        x, w = _complex(rng, (1, 2, 5)), _complex(rng, (3, 2, 2))
        padded = np.concatenate([np.zeros((1, 2, 1), np.complex128), x.astype(np.complex128)], axis=2)
        expected = np.array([[[np.sum(padded[0, :, p:p + 2] * w[o]) for p in range(5)] for o in range(3)]])
    compiled, reference = _run_everywhere(compiler, text, [x, w], eager=False)
    for plugin, (out,) in (("numba_cpu", compiled), ("reference", reference)):
        assert out.dtype == np.complex64 and out.shape == expected.shape, plugin
        np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-5, err_msg=plugin)


# -- bitcasts of 4-bit integers ------------------------------------------------------------------

_DTYPES = {"i4": ml_dtypes.int4, "ui4": ml_dtypes.uint4, "i8": np.int8, "ui8": np.uint8, "f16": np.float16,
           "f32": np.float32}
_BITS = {"i4": 4, "ui4": 4, "i8": 8, "ui8": 8, "f16": 16, "f32": 32}

# lax_test's testBitcastConvertType2 and testBitcastConvertTypeAgainstNumpy1/4/5/9, and the
# same width between the two 4-bit types.
BITCASTS = [((2, 4, 2), "i4", "i8"), ((), "f32", "ui4"), ((2, 3, 4, 8), "i4", "f32"), ((4, 4), "ui4", "f16"),
            ((4, 2), "ui4", "i8"), ((3,), "i8", "i4"), ((2, 3), "f16", "i4"), ((5,), "i4", "ui4"),
            ((5,), "ui4", "i4")]


def _bit_patterns(x: np.ndarray, bits: int) -> list[int]:
    if bits < 8:
        return [int(v) & ((1 << bits) - 1) for v in x.astype(np.int64).reshape(-1)]
    return [int.from_bytes(e.tobytes(), "little") for e in x.reshape(-1)]


def _expected_bitcast(x: np.ndarray, src: str, dst: str, shape: tuple[int, ...]) -> np.ndarray:
    """The array as one little-endian string of bits, read again ``dst``'s width at a time."""
    sb, db = _BITS[src], _BITS[dst]
    stream = sum(p << (i * sb) for i, p in enumerate(_bit_patterns(x, sb)))
    parts = [(stream >> (i * db)) & ((1 << db) - 1) for i in range(x.size * sb // db)]
    if db < 8:
        signed = dst.startswith("i")
        values = [p - (1 << db) if signed and p >= 1 << (db - 1) else p for p in parts]
        return np.array(values, np.int8).astype(_DTYPES[dst]).reshape(shape)
    return np.frombuffer(b"".join(p.to_bytes(db // 8, "little") for p in parts), _DTYPES[dst]).reshape(shape)


@pytest.mark.parametrize("shape, src, dst", BITCASTS, ids=[f"{s}-{d}" for _, s, d in BITCASTS])
def test_bitcast_convert_of_4_bit_integers(compiler, shape, src, dst):
    sb, db = _BITS[src], _BITS[dst]
    out_shape = shape if sb == db else (*shape, sb // db) if sb > db else shape[:-1]
    rng = np.random.default_rng(11)
    if sb < 8:
        x = rng.integers(-8, 8, shape).astype(_DTYPES[src]) if src == "i4" else rng.integers(0, 16, shape).astype(
            _DTYPES[src])
    else:
        x = rng.integers(0, 256, (*shape, sb // 8), dtype=np.uint8).view(_DTYPES[src]).reshape(shape)
    text = (f"func.func @main(%x: {_tensor(shape, src)}) -> {_tensor(out_shape, dst)} {{\n"
            f"  %0 = stablehlo.bitcast_convert %x : ({_tensor(shape, src)}) -> {_tensor(out_shape, dst)}\n"
            f"  return %0 : {_tensor(out_shape, dst)}\n}}\n")
    expected = _expected_bitcast(x, src, dst, out_shape)
    # The eager tier takes no 4-bit integer; those programs run compiled only.
    compiled, reference = _run_everywhere(compiler, text, [x], eager=False)
    for plugin, (out,) in (("numba_cpu", compiled), ("reference", reference)):
        assert out.dtype == expected.dtype and out.shape == out_shape, plugin
        if db < 8:
            np.testing.assert_array_equal(out.astype(np.int8), expected.astype(np.int8), err_msg=plugin)
        else:  # every bit, but a NaN's payload (not part of the contract, see .tier_helpers)
            np.testing.assert_array_equal(as_bits(out), as_bits(expected), err_msg=plugin)


def test_a_bitcast_from_4_to_8_bits_must_drop_a_dimension():
    """i4 has 4 bits, though numpy keeps each in a byte: a same-shape bitcast to i8 is invalid."""
    text = """func.func @main(%x: tensor<2x4x{last}i4>) -> tensor<2x4xi8> {{
      %0 = stablehlo.bitcast_convert %x : (tensor<2x4x{last}i4>) -> tensor<2x4xi8>
      return %0 : tensor<2x4xi8>
    }}"""
    verify(parse_module(text.format(last="2x")))
    with pytest.raises(CompileError):
        verify(parse_module(text.format(last="")))


# -- custom calls ----------------------------------------------------------------------------------


def test_dce_sink_on_both_tiers(compiler):
    """lax_test's test_dce_sink_prevents_xla_dce: ``stablehlo.custom_call @dce_sink`` runs as
    nothing, in a loop's body too."""
    compiled, reference = _run_everywhere(compiler, DCE_SINK, [np.float32(2.5)], eager=True)
    assert compiled[0] == reference[0] == np.float32(8.0)
