"""The parser on hand-written MLIR: literal forms, locations, custom assemblies, defaults, errors."""

import math

import ml_dtypes
import numpy as np
import pytest

from pjrt_hub.abi import ParseError
from pjrt_hub.backends.stablehlo import (
    ComparisonDirection,
    ComparisonType,
    ConvDimensionNumbers,
    DotDimensionNumbers,
    GatherDimensionNumbers,
    OpaqueAttr,
    Precision,
    ScatterDimensionNumbers,
    SymbolRef,
    TensorType,
    TupleType,
    parse_module,
)


def main_ops(text):
    return parse_module(text).main.body.ops


def constant(literal, ty):
    text = f"func.func @main() -> {ty} {{\n  %0 = stablehlo.constant {literal} : {ty}\n  return %0 : {ty}\n}}"
    return main_ops(text)[0].attributes["value"]


# -- dense literals ---------------------------------------------------------------------------

@pytest.mark.parametrize("literal, ty, expected", [
    ("dense<1.000000e-01>", "tensor<f32>", np.float32(0.1)),
    ("dense<9.99999974E-6>", "tensor<f32>", np.float32(1e-5)),
    ("dense<-2147483648>", "tensor<i32>", np.int32(-2**31)),
    ("dense<466688986>", "tensor<ui32>", np.uint32(466688986)),
    ("dense<18446744073709551615>", "tensor<ui64>", np.uint64(2**64 - 1)),
    ("dense<true>", "tensor<i1>", np.bool_(True)),
    ("dense<0x3F80>", "tensor<bf16>", ml_dtypes.bfloat16(1.0)),
    ("dense<0x7F>", "tensor<i8>", np.int8(127)),
])
def test_scalar_splats(literal, ty, expected):
    value = constant(literal, ty)
    assert value.shape == () and value.dtype == np.asarray(expected).dtype
    assert value == expected


def test_hex_bit_pattern_splats_are_float_bits_not_integers():
    assert constant("dense<0xFF800000>", "tensor<f32>") == -np.inf
    assert constant("dense<0x7F800000>", "tensor<4xf32>").tolist() == [np.inf] * 4
    nan = constant("dense<0x7FC00000>", "tensor<f32>")
    assert np.isnan(nan) and nan.view(np.uint32) == 0x7FC00000
    assert constant("dense<0xFF80>", "tensor<bf16>") == -np.inf


def test_lists_nested_lists_and_booleans():
    assert constant("dense<[13, 15, 26, 6]>", "tensor<4xi32>").tolist() == [13, 15, 26, 6]
    nested = constant("dense<[[31, 0], [0, 0]]>", "tensor<2x2xi64>")
    assert nested.dtype == np.int64 and nested.tolist() == [[31, 0], [0, 0]]
    assert constant("dense<[true, false, true]>", "tensor<3xi1>").tolist() == [True, False, True]
    floats = constant("dense<[1.5, -0.0, 0x7F800000]>", "tensor<3xf32>")
    assert floats[0] == 1.5 and math.copysign(1, floats[1]) == -1 and floats[2] == np.inf
    assert constant("dense<[(1.0, 2.0), (0.0, -1.0)]>", "tensor<2xcomplex<f32>>").tolist() == [1 + 2j, -1j]
    # Infinities and NaNs in a complex element are bit patterns of the part's type, as JAX's
    # reductions' initial values print (jnp.max of complex64: (-inf, 0)).
    assert constant("dense<(0xFF800000,0.000000e+00)>", "tensor<complex<f32>>") == complex(-np.inf, 0)
    nan = constant("dense<(0x7FF8000000000000,0x7FF0000000000000)>", "tensor<complex<f64>>")
    assert np.isnan(nan.real) and nan.imag == np.inf
    assert constant("dense<>", "tensor<0xf32>").shape == (0,)
    # MLIR prints any tensor without elements as dense<>, whatever its rank.
    assert constant("dense<>", "tensor<0x3xf32>").shape == (0, 3)
    assert constant("dense<>", "tensor<2x0x1xi32>").shape == (2, 0, 1)
    with pytest.raises(ParseError, match="literal has shape"):
        constant("dense<>", "tensor<2x3xf32>")


def test_hex_blobs_are_little_endian_raw_bytes():
    values = np.arange(6, dtype=np.float32).reshape(2, 3) - 2.5
    blob = "0x" + values.astype("<f4").tobytes().hex().upper()
    parsed = constant(f'dense<"{blob}">', "tensor<2x3xf32>")
    assert parsed.dtype == np.float32 and np.array_equal(parsed, values)
    assert constant('dense<"0x01000000">', "tensor<3xi32>").tolist() == [1, 1, 1]  # one element: splat


def test_constants_are_read_only():
    value = constant("dense<[1, 2]>", "tensor<2xi32>")
    with pytest.raises(ValueError):
        value[0] = 5


def test_dense_resource_blobs():
    text = """
    func.func @main() -> tensor<2xf32> {
      %0 = stablehlo.constant dense_resource<blob1> : tensor<2xf32>
      return %0 : tensor<2xf32>
    }
    {-#
      dialect_resources: { builtin: { blob1: "0x040000000000803F00000040" } }
    #-}
    """
    assert main_ops(text)[0].attributes["value"].tolist() == [1.0, 2.0]


# -- attributes -------------------------------------------------------------------------------

GENERIC_ATTRS = """
func.func @main(%arg0: tensor<2x3xf32>) -> tensor<2x3xf32> {
  %0 = "stablehlo.transpose"(%arg0) {permutation = dense<[0, 1]> : tensor<2xi64>, weird.attr = #foo.bar<[1, 2] -> "x">, some_list = [1 : i32, "s", @sym], flag} : (tensor<2x3xf32>) -> tensor<2x3xf32>
  %1 = "stablehlo.broadcast_in_dim"(%0) <{broadcast_dimensions = array<i64: 0, 1>}> {mhlo.frontend_attributes = {a = "b"}} : (tensor<2x3xf32>) -> tensor<2x3xf32>
  "func.return"(%1) : (tensor<2x3xf32>) -> ()
}
"""


def test_generic_attributes_are_typed_and_unknown_ones_kept():
    t, b, _ = main_ops(GENERIC_ATTRS)
    assert t.attributes["permutation"] == (0, 1)  # old dense<> spelling, canonical tuple
    assert t.attributes["weird.attr"] == OpaqueAttr('#foo.bar<[1, 2] -> "x">')
    assert t.attributes["some_list"] == (1, "s", SymbolRef("sym"))
    assert t.attributes["flag"] is True
    assert b.attributes["broadcast_dimensions"] == (0, 1)
    assert dict(b.attributes["mhlo.frontend_attributes"]) == {"a": "b"}


def test_array_attributes_of_booleans_and_empty_arrays():
    text = """
    func.func @main(%arg0: tensor<1x4x4x1xf32>, %arg1: tensor<2x2x1x1xf32>) -> tensor<1x3x3x1xf32> {
      %0 = "stablehlo.convolution"(%arg0, %arg1) <{dimension_numbers = #stablehlo.conv<[b, 0, 1, f]x[0, 1, i, o]->[b, 0, 1, f]>, window_reversal = array<i1: true, false>, lhs_dilation = array<i64>}> : (tensor<1x4x4x1xf32>, tensor<2x2x1x1xf32>) -> tensor<1x3x3x1xf32>
      return %0 : tensor<1x3x3x1xf32>
    }
    """
    attrs = main_ops(text)[0].attributes
    assert attrs["window_reversal"] == (True, False)
    assert attrs["lhs_dilation"] == ()


def test_enums_and_dimension_number_structs():
    text = """
    func.func @main(%a: tensor<2x3x4xf32>, %b: tensor<2x4x5xf32>) -> tensor<2x3x5xf32> {
      %0 = stablehlo.dot_general %a, %b, batching_dims = [0] x [0], contracting_dims = [2] x [1], precision = [HIGH, HIGHEST], algorithm = <lhs_precision_type = f32, rhs_precision_type = f32, accumulation_type = f32, lhs_component_count = 1, rhs_component_count = 1, num_primitive_operations = 1, allow_imprecise_accumulation = false> : (tensor<2x3x4xf32>, tensor<2x4x5xf32>) -> tensor<2x3x5xf32>
      %1 = "stablehlo.compare"(%0, %0) {comparison_direction = #stablehlo<comparison_direction LT>, compare_type = #stablehlo<comparison_type TOTALORDER>} : (tensor<2x3x5xf32>, tensor<2x3x5xf32>) -> tensor<2x3x5xi1>
      return %0 : tensor<2x3x5xf32>
    }
    """
    dot, cmp, _ = main_ops(text)
    assert dot.attributes["dot_dimension_numbers"] == DotDimensionNumbers((0,), (0,), (2,), (1,))
    assert dot.attributes["precision_config"] == (Precision.HIGH, Precision.HIGHEST)
    assert isinstance(dot.attributes["algorithm"], OpaqueAttr)
    assert cmp.attributes["comparison_direction"] is ComparisonDirection.LT
    assert cmp.attributes["compare_type"] == "TOTALORDER"


def test_gather_and_scatter_dimension_numbers_with_batching_dims():
    text = """
    func.func @main(%op: tensor<2x3x4x2xi32>, %idx: tensor<2x2x3x2xi64>, %upd: tensor<2x2x3x2x2xi32>) -> tensor<2x3x4x2xi32> {
      %0 = "stablehlo.gather"(%op, %idx) <{dimension_numbers = #stablehlo.gather<offset_dims = [3, 4], collapsed_slice_dims = [1], operand_batching_dims = [0], start_indices_batching_dims = [1], start_index_map = [2, 1], index_vector_dim = 3>, slice_sizes = array<i64: 1, 1, 2, 2>}> : (tensor<2x3x4x2xi32>, tensor<2x2x3x2xi64>) -> tensor<2x2x3x2x2xi32>
      %1 = "stablehlo.scatter"(%op, %idx, %upd) <{scatter_dimension_numbers = #stablehlo.scatter<update_window_dims = [3, 4], inserted_window_dims = [1], input_batching_dims = [0], scatter_indices_batching_dims = [1], scatter_dims_to_operand_dims = [2, 1], index_vector_dim = 3>}> ({
      ^bb0(%a: tensor<i32>, %b: tensor<i32>):
        %s = stablehlo.add %a, %b : tensor<i32>
        stablehlo.return %s : tensor<i32>
      }) : (tensor<2x3x4x2xi32>, tensor<2x2x3x2xi64>, tensor<2x2x3x2x2xi32>) -> tensor<2x3x4x2xi32>
      return %1 : tensor<2x3x4x2xi32>
    }
    """
    gather, scatter, _ = main_ops(text)
    assert gather.attributes["dimension_numbers"] == GatherDimensionNumbers(
        (3, 4), (1,), (0,), (1,), (2, 1), 3)
    assert gather.attributes["indices_are_sorted"] is False  # spec default filled in
    assert scatter.attributes["scatter_dimension_numbers"] == ScatterDimensionNumbers(
        (3, 4), (1,), (0,), (1,), (2, 1), 3)
    assert scatter.attributes["unique_indices"] is False
    assert len(scatter.regions) == 1 and len(scatter.regions[0].args) == 2


def test_gather_omitted_zero_index_vector_dim_defaults_to_zero():
    text = """
    func.func @main(%op: tensor<5xf32>, %idx: tensor<1xi32>) -> tensor<1xf32> {
      %0 = "stablehlo.gather"(%op, %idx) <{dimension_numbers = #stablehlo.gather<offset_dims = [0], start_index_map = [0]>, slice_sizes = array<i64: 1>}> : (tensor<5xf32>, tensor<1xi32>) -> tensor<1xf32>
      return %0 : tensor<1xf32>
    }
    """
    assert main_ops(text)[0].attributes["dimension_numbers"].index_vector_dim == 0


# -- custom assembly and defaults -------------------------------------------------------------

def test_convolution_pretty_form_with_omitted_defaults():
    text = """
    func.func @main(%x: tensor<2x12x12x1xf32>, %k: tensor<3x3x1x4xf32>) -> tensor<2x12x12x4xf32> {
      %0 = stablehlo.convolution(%x, %k) dim_numbers = [b, 0, 1, f]x[0, 1, i, o]->[b, 0, 1, f], window = {pad = [[1, 1], [1, 1]]} {batch_group_count = 1 : i64, feature_group_count = 1 : i64} : (tensor<2x12x12x1xf32>, tensor<3x3x1x4xf32>) -> tensor<2x12x12x4xf32>
      return %0 : tensor<2x12x12x4xf32>
    }
    """
    a = main_ops(text)[0].attributes
    assert a["dimension_numbers"] == ConvDimensionNumbers(0, 3, (1, 2), 2, 3, (0, 1), 0, 3, (1, 2))
    assert a["window_strides"] == (1, 1) and a["lhs_dilation"] == (1, 1) and a["rhs_dilation"] == (1, 1)
    assert a["window_reversal"] == (False, False)
    assert a["padding"].tolist() == [[1, 1], [1, 1]] and a["padding"].dtype == np.int64
    assert a["precision_config"] == (Precision.DEFAULT, Precision.DEFAULT)


def test_convolution_raw_dimension_numbers_and_full_window():
    text = """
    func.func @main(%x: tensor<1x2x5x5xf32>, %k: tensor<4x2x3x3xf32>) -> tensor<1x4x2x2xf32> {
      %0 = stablehlo.convolution(%x, %k) dim_numbers = [b, f, 0, 1]x[o, i, 0, 1]->[b, f, 0, 1], window = {stride = [2, 2], pad = [[0, 0], [0, 0]], lhs_dilate = [1, 1], rhs_dilate = [1, 1], reverse = [0, 1]} {batch_group_count = 1 : i64, feature_group_count = 1 : i64, precision_config = [#stablehlo<precision DEFAULT>, #stablehlo<precision DEFAULT>]} : (tensor<1x2x5x5xf32>, tensor<4x2x3x3xf32>) -> tensor<1x4x2x2xf32>
      %1 = "stablehlo.convolution"(%x, %k) <{dimension_numbers = #stablehlo.conv<raw input_batch_dimension = 0, input_feature_dimension = 1, input_spatial_dimensions = [2, 3], kernel_input_feature_dimension = 1, kernel_output_feature_dimension = 0, kernel_spatial_dimensions = [2, 3], output_batch_dimension = 0, output_feature_dimension = 1, output_spatial_dimensions = [2, 3]>, window_strides = array<i64: 2, 2>}> : (tensor<1x2x5x5xf32>, tensor<4x2x3x3xf32>) -> tensor<1x4x2x2xf32>
      return %0 : tensor<1x4x2x2xf32>
    }
    """
    pretty, raw, _ = main_ops(text)
    assert pretty.attributes["dimension_numbers"] == raw.attributes["dimension_numbers"]
    assert pretty.attributes["window_reversal"] == (False, True)
    assert pretty.attributes["window_strides"] == raw.attributes["window_strides"] == (2, 2)


def test_reduce_applies_short_form_builds_a_body():
    text = """
    func.func @main(%x: tensor<4x8xf32>) -> tensor<8xf32> {
      %cst = stablehlo.constant dense<0.0> : tensor<f32>
      %0 = stablehlo.reduce(%x init: %cst) applies stablehlo.add across dimensions = [0] : (tensor<4x8xf32>, tensor<f32>) -> tensor<8xf32>
      return %0 : tensor<8xf32>
    }
    """
    reduce = main_ops(text)[1]
    body = reduce.regions[0]
    assert reduce.attributes["dimensions"] == (0,)
    assert [a.type for a in body.args] == [TensorType((), "f32")] * 2
    assert [op.name for op in body.ops] == ["stablehlo.add", "stablehlo.return"]
    assert body.ops[0].operands == body.args


def test_variadic_reduce_interleaves_reducer_arguments():
    text = """
    func.func @main(%x: tensor<3x4xf32>, %i: tensor<3x4xi32>) -> tensor<3xi32> {
      %cst = stablehlo.constant dense<0xFF800000> : tensor<f32>
      %c = stablehlo.constant dense<0> : tensor<i32>
      %1:2 = stablehlo.reduce(%x init: %cst), (%i init: %c) across dimensions = [1] : (tensor<3x4xf32>, tensor<3x4xi32>, tensor<f32>, tensor<i32>) -> (tensor<3xf32>, tensor<3xi32>)
       reducer(%arg1: tensor<f32>, %arg3: tensor<f32>) (%arg2: tensor<i32>, %arg4: tensor<i32>)  {
        %2 = stablehlo.compare GT, %arg1, %arg3, FLOAT : (tensor<f32>, tensor<f32>) -> tensor<i1>
        %9 = stablehlo.select %2, %arg1, %arg3 : tensor<i1>, tensor<f32>
        %10 = stablehlo.select %2, %arg2, %arg4 : tensor<i1>, tensor<i32>
        stablehlo.return %9, %10 : tensor<f32>, tensor<i32>
      }
      return %1#1 : tensor<3xi32>
    }
    """
    ops = main_ops(text)
    reduce = ops[2]
    # Block arguments are (acc0, acc1, x0, x1): %arg1, %arg2, %arg3, %arg4.
    assert [a.name for a in reduce.regions[0].args] == ["%arg1", "%arg2", "%arg3", "%arg4"]
    assert [str(a.type) for a in reduce.regions[0].args] == ["tensor<f32>", "tensor<i32>"] * 2
    assert [r.name for r in reduce.results] == ["%1#0", "%1#1"]
    assert ops[-1].operands[0] is reduce.results[1]


def test_while_custom_form_names_iteration_arguments():
    text = """
    func.func @main(%n: tensor<i32>) -> tensor<i32> {
      %c = stablehlo.constant dense<0> : tensor<i32>
      %0:2 = stablehlo.while(%iterArg = %c, %iterArg_1 = %n) : tensor<i32>, tensor<i32>
      cond {
        %1 = stablehlo.compare LT, %iterArg, %iterArg_1, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
        stablehlo.return %1 : tensor<i1>
      } do {
        %c_1 = stablehlo.constant dense<1> : tensor<i32>
        %1 = stablehlo.add %iterArg, %c_1 : tensor<i32>
        stablehlo.return %1, %iterArg_1 : tensor<i32>, tensor<i32>
      }
      return %0#0 : tensor<i32>
    }
    """
    loop = main_ops(text)[1]
    cond, body = loop.regions
    assert [a.name for a in cond.args] == ["%iterArg", "%iterArg_1"]
    assert cond.args[0] is not body.args[0]  # each region has its own arguments
    assert loop.operands[1].name == "%n"


def test_pretty_slice_compare_select_and_call_spellings():
    text = """
    module @jit_f {
      func.func public @main(%x: tensor<8xf32>) -> (tensor<4xf32> {jax.result_info = "result"}) {
        %0 = stablehlo.slice %x [0:8:2] : (tensor<8xf32>) -> tensor<4xf32>
        %1 = stablehlo.compare GT, %0, %0 : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xi1>
        %2 = stablehlo.select %1, %0, %0 : tensor<4xi1>, tensor<4xf32>
        %3 = call @id(%2) : (tensor<4xf32>) -> tensor<4xf32>
        return %3 : tensor<4xf32>
      }
      func.func private @id(%a: tensor<4xf32>) -> tensor<4xf32> {
        func.return %a : tensor<4xf32>
      }
    }
    """
    module = parse_module(text)
    sl, cmp, sel, call, ret = module.main.body.ops
    assert sl.attributes["strides"] == (2,) and sl.attributes["limit_indices"] == (8,)
    assert cmp.attributes["compare_type"] == ComparisonType.FLOAT  # filled from the element type
    assert [v.type for v in sel.operands] == [TensorType((4,), "i1"), TensorType((4,), "f32"), TensorType((4,), "f32")]
    assert call.name == "func.call" and call.attributes["callee"] == SymbolRef("id")
    assert ret.name == "func.return"
    assert module.functions["id"].visibility == "private"
    assert module.main.result_attrs[0]["jax.result_info"] == "result"


def test_top_k_and_named_multiple_results():
    text = """
    func.func @main(%x: tensor<4x6xf32>) -> (tensor<4x2xf32>, tensor<4x2xi32>) {
      %values, %indices = chlo.top_k(%x, k = 2) : tensor<4x6xf32> -> (tensor<4x2xf32>, tensor<4x2xi32>)
      return %values, %indices : tensor<4x2xf32>, tensor<4x2xi32>
    }
    """
    top_k, ret = main_ops(text)
    assert top_k.attributes["k"] == 2
    assert [v.name for v in top_k.results] == ["%values", "%indices"]
    assert ret.operands == top_k.results


def test_tuples_and_tokens():
    text = """
    func.func @main(%a: tensor<f32>, %b: tensor<2xi32>) -> tensor<2xi32> {
      %t = stablehlo.tuple %a, %b : tuple<tensor<f32>, tensor<2xi32>>
      %e = stablehlo.get_tuple_element %t[1] : (tuple<tensor<f32>, tensor<2xi32>>) -> tensor<2xi32>
      %0:2 = stablehlo.optimization_barrier %a, %e : tensor<f32>, tensor<2xi32>
      return %0#1 : tensor<2xi32>
    }
    """
    tup, get, barrier, _ = main_ops(text)
    assert tup.results[0].type == TupleType((TensorType((), "f32"), TensorType((2,), "i32")))
    assert get.attributes["index"] == 1
    assert barrier.result_types == (TensorType((), "f32"), TensorType((2,), "i32"))


def test_argument_and_module_attributes():
    text = """
    module @jit_g attributes {mhlo.num_partitions = 1 : i32, mhlo.num_replicas = 2 : i32, jax.uses_shape_polymorphism = false} {
      func.func public @main(%arg0: tensor<4xf32> {jax.buffer_donor = true}, %arg1: tensor<4xf32> {tf.aliasing_output = 0 : i32}) -> (tensor<4xf32>) {
        return %arg1 : tensor<4xf32>
      }
    }
    """
    module = parse_module(text)
    assert module.name == "jit_g" and module.num_replicas == 2 and module.num_partitions == 1
    assert module.attributes["jax.uses_shape_polymorphism"] is False
    assert module.main.arg_attrs[0]["jax.buffer_donor"] is True
    assert module.main.arg_attrs[1]["tf.aliasing_output"] == 0


def test_comments_and_a_module_without_a_name_or_wrapper():
    text = "// leading comment\nfunc.func @main(%a: tensor<f32>) -> tensor<f32> { // trailing\n  return %a : tensor<f32>\n}\n"
    module = parse_module(text)
    assert module.name is None and list(module.functions) == ["main"]


# -- locations --------------------------------------------------------------------------------

LOCS = """
#loc1 = loc("x")
#loc3 = loc("model.py":10:4 to :20)
module @m {
  func.func public @main(%arg0: tensor<f32> loc("x"), %arg1: tensor<f32> loc(unknown)) -> tensor<f32> {
    %0 = stablehlo.add %arg0, %arg1 : tensor<f32> loc(#loc7)
    %1 = stablehlo.multiply %0, %0 : tensor<f32> loc(#loc5)
    %2 = stablehlo.negate %1 : tensor<f32> loc("lib.py":3:1 to 4:2)
    %3 = stablehlo.abs %2 : tensor<f32> loc(fused["a.py":1:1, "b"])
    %4 = stablehlo.sqrt %3 : tensor<f32> loc(unknown)
    return %4 : tensor<f32> loc(#loc1)
  } loc(#loc)
} loc(#loc)
#loc = loc(unknown)
#loc4 = loc("caller"(#loc3))
#loc5 = loc(callsite(#loc6 at #loc4))
#loc6 = loc("inner.py":7:2)
#loc7 = loc("add"(#loc5))
"""


def test_locations_resolve_aliases_defined_before_and_after():
    module = parse_module(LOCS)
    add, mul, neg, abs_, sqrt, ret = module.main.body.ops
    assert add.location == "inner.py:7:2 (add)"
    assert mul.location == "inner.py:7:2"
    assert neg.location == "lib.py:3:1"
    assert abs_.location == "a.py:1:1 (b)"
    assert sqrt.location is None
    assert ret.location == "x"
    assert module.main.arg_locations == ("x", None)
    assert module.location is None


# -- errors -----------------------------------------------------------------------------------

def _parse_error(text):
    with pytest.raises(ParseError) as info:
        parse_module(text)
    return info.value


@pytest.mark.parametrize("body, line, col, fragment", [
    ("  %0 = stablehlo.add %a, %a tensor<f32>\n", 2, 29, "expected ':'"),
    ("  %0 = stablehlo.add %a, %b : tensor<f32>\n", 2, 26, "undefined value %b"),
    ("  %0 = stablehlo.constant dense<[1, 2]> : tensor<3xi32>\n", 2, 8 + 19, "bad dense literal"),
    ("  %0 = stablehlo.constant dense<300> : tensor<i8>\n", 2, 27, "does not fit in i8"),
    ("  %0 = stablehlo.add %a, %a : tensor<?xf32>\n", 2, 31, "dynamic shapes"),
    ("  %0 = stablehlo.add %a, %a : tensor<f7>\n", 2, 38, "unsupported element type 'f7'"),
    ("  %0 = stablehlo.negate %a : tensor<f32>\n  %0 = stablehlo.negate %a : tensor<f32>\n", 3, 3, "redefinition"),
    ("  %0 = stablehlo.negate %a : tensor<i32>\n", 2, 25, "has type tensor<f32>"),
    ("  %0:2 = stablehlo.negate %a : tensor<f32>\n", 2, 3, "2 result names for 1 results"),
    ("  %0 = foo.bar %a : tensor<f32>\n", 2, 8, "unknown operation 'foo.bar'"),
    ("  %0 = stablehlo.add %a, %a : tensor<f32> loc(#nope)\n", 2, 47, "undefined alias '#nope'"),
    ("  %0 = stablehlo.add %a, %a : tensor<f32> loc(#)\n", 2, 47, "expected an alias name after '#'"),
    ('  %0 = "func.call"(%a) {callee = @} : (tensor<f32>) -> tensor<f32>\n', 2, 34,
     "expected a symbol name after '@'"),
    ('  %0 = "stablehlo.case"(%i) ({\n  ^bb0:\n    stablehlo.return %a : tensor<f32>\n  ^bb1:\n', 5, 3, "more than one block"),
])
def test_malformed_programs_give_line_and_column(body, line, col, fragment):
    text = ("func.func @main(%a: tensor<f32>, %i: tensor<i32>) -> tensor<f32> {\n" + body
            + "  return %a : tensor<f32>\n}\n")
    error = _parse_error(text)
    assert (error.line, error.column) == (line, col), str(error)
    assert fragment in str(error)
    assert f"line {line}, column {col}" in str(error)


def test_unterminated_program_reports_what_was_expected():
    error = _parse_error("module {\n  func.func @main(%a: tensor<f32>) -> tensor<f32> {\n    return %a : tensor<f32>\n")
    assert "'}'" in str(error) and "end of input" in str(error)


def test_undefined_function_body_and_non_text_inputs():
    assert "external functions" in str(_parse_error("func.func private @f(%a: tensor<f32>) -> tensor<f32>\n"))
    assert "UTF-8" in str(_parse_error(b"\xff\xfe\x00garbage"))
    assert "no module" in str(_parse_error("   // nothing here\n"))


def test_bf16_and_f16_types_map_to_runtime_dtypes():
    text = """
    func.func @main(%a: tensor<2xbf16>) -> tensor<2xf16> {
      %0 = stablehlo.convert %a : (tensor<2xbf16>) -> tensor<2xf16>
      return %0 : tensor<2xf16>
    }
    """
    module = parse_module(text)
    assert module.main.arg_types[0].dtype == np.dtype(ml_dtypes.bfloat16)
    assert module.main.result_types[0].dtype == np.float16


def test_unknown_stablehlo_ops_in_custom_form_still_parse():
    text = """
    func.func @main(%a: tensor<3x3xf32>, %s: tensor<2xui64>) -> tensor<3x3xf32> {
      %0 = stablehlo.cholesky %a, lower = true : tensor<3x3xf32>
      %1 = stablehlo.made_up %0, mode = FAST, scale = 2.5 {extra = 1 : i64} : (tensor<3x3xf32>) -> tensor<3x3xf32>
      %st, %bits = stablehlo.rng_bit_generator %s, algorithm = THREE_FRY : (tensor<2xui64>) -> (tensor<2xui64>, tensor<4xui32>)
      return %1 : tensor<3x3xf32>
    }
    """
    chol, made_up, rng, _ = main_ops(text)
    assert chol.name == "stablehlo.cholesky" and chol.attributes["lower"] is True
    assert dict(made_up.attributes) == {"mode": "FAST", "scale": 2.5, "extra": 1}
    assert rng.attributes["rng_algorithm"] == "THREE_FRY" and len(rng.results) == 2


def _types_of(module):
    """Every function's signature and every op's operand and result types, in text order."""
    seen = []
    for fn in module.functions.values():
        seen.append((fn.name, fn.arg_types, fn.result_types))
        for op in fn.walk():
            seen.append((op.name, tuple(v.type for v in op.operands), op.result_types,
                         tuple(tuple(a.type for a in r.args) for r in op.regions)))
    return seen


@pytest.mark.parametrize("form", ["file", "generic_file"])
def test_plainly_spelled_tensor_types_read_as_the_general_path_reads_them(monkeypatch, form):
    """JAX spells nearly every tensor type plainly (``tensor<8x128xf32>``); the parser reads
    each spelling once per module. Every corpus program gives the same types either way, and
    one spelling gives one object."""
    import re

    from pjrt_hub.backends.stablehlo.parser import type_syntax

    from ...corpus import perf_programs, program_text, public_programs

    texts = [program_text("public", e, form) for e in public_programs()]
    texts += [program_text("perf", e, form) for e in perf_programs()]
    fast = [parse_module(t) for t in texts]
    monkeypatch.setattr(type_syntax, "_PLAIN_TENSOR", re.compile(r"(?!)"))  # matches nothing
    general = [parse_module(t) for t in texts]
    for a, b in zip(fast, general):
        assert _types_of(a) == _types_of(b)
    identities = {}
    for fn in fast[0].functions.values():
        for op in fn.walk():
            for ty in op.result_types:
                identities.setdefault(str(ty), set()).add(id(ty))
    assert identities and all(len(ids) == 1 for ids in identities.values())


@pytest.mark.parametrize("ty, fragment", [
    ("tensor<4xf7>", "unsupported element type 'f7'"),
    ("tensor<4xfoo>", "unknown type 'foo'"),
    ("tensor<4x?xf32>", "dynamic shapes"),
    ("tensor<4xf32.x>", "unknown type 'f32.x'"),
])
def test_a_plain_spelling_of_a_type_pjrt_hub_cannot_hold_is_refused_as_before(ty, fragment):
    text = f"func.func @main(%a: {ty}) -> {ty} {{\n  return %a : {ty}\n}}\n"
    assert fragment in str(_parse_error(text))


def test_a_tensor_type_with_an_encoding_takes_the_general_path():
    text = """func.func @main(%a: tensor<4xf32, #stablehlo.bounds<?>>) -> tensor<4xf32> {
  return %a : tensor<4xf32>
}"""
    fn = parse_module(text).main
    assert fn.arg_types == (TensorType((4,), "f32"),) and fn.result_types == (TensorType((4,), "f32"),)
