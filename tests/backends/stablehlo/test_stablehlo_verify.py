"""The verifier rejects ill-typed programs with a CompileError naming the op and location."""

import pytest

from pjrt_hub.abi import CompileError, ParseError
from pjrt_hub.backends.stablehlo import (
    Block,
    Function,
    Module,
    Op,
    TensorType,
    Value,
    frozen_mapping,
    parse_module,
    verify,
)


def program(body, args="%a: tensor<2x3xf32>, %b: tensor<3x2xf32>", result="tensor<2x3xf32>", ret="%a"):
    return (f"func.func @main({args}) -> {result} {{\n{body}  return {ret} : {result}\n}}\n"
            "func.func private @helper(%x: tensor<2x3xf32>) -> tensor<2x3xf32> {\n"
            "  return %x : tensor<2x3xf32>\n}\n")


def verify_error(text):
    module = parse_module(text)
    with pytest.raises(CompileError) as info:
        verify(module)
    assert not isinstance(info.value, ParseError)
    return str(info.value)


@pytest.mark.parametrize("body, fragment", [
    ('  %0 = "stablehlo.add"(%a, %b) : (tensor<2x3xf32>, tensor<3x2xf32>) -> tensor<2x3xf32> loc("m.py":3:1)\n',
     "stablehlo.add (%0) at m.py:3:1 in @main: shapes differ"),
    ('  %0 = stablehlo.add %a, %a : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3xi32>\n',
     "element types differ"),
    ("  %0 = stablehlo.broadcast_in_dim %a, dims = [0] : (tensor<2x3xf32>) -> tensor<2x3xf32>\n",
     "one entry per operand dimension"),
    ("  %0 = stablehlo.broadcast_in_dim %a, dims = [1, 0] : (tensor<2x3xf32>) -> tensor<2x3xf32>\n",
     "cannot broadcast"),
    ("  %0 = stablehlo.reshape %a : (tensor<2x3xf32>) -> tensor<7xf32>\n", "6 elements"),
    ("  %0 = stablehlo.transpose %a, dims = [0, 0] : (tensor<2x3xf32>) -> tensor<2x2xf32>\n",
     "not a permutation"),
    ("  %0 = stablehlo.transpose %a, dims = [1, 0] : (tensor<2x3xf32>) -> tensor<2x3xf32>\n",
     "result must be tensor<3x2xf32>"),
    ("  %0 = stablehlo.dot_general %a, %a, contracting_dims = [1] x [1] : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<3x3xf32>\n",
     "result shape must be (2, 2)"),
    ("  %0 = stablehlo.dot_general %a, %a, contracting_dims = [1] x [0] : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>\n",
     "contracting dimensions lhs[1] = 3 and rhs[0] = 2 differ"),
    ("  %c = stablehlo.constant dense<0.0> : tensor<f32>\n"
     "  %0 = stablehlo.reduce(%a init: %c) applies stablehlo.add across dimensions = [2] : (tensor<2x3xf32>, tensor<f32>) -> tensor<2xf32>\n",
     "dimensions [2] out of range"),
    ("  %c = stablehlo.constant dense<0.0> : tensor<f32>\n"
     "  %0 = stablehlo.reduce(%a init: %c) applies stablehlo.add across dimensions = [1] : (tensor<2x3xf32>, tensor<f32>) -> tensor<3xf32>\n",
     "result 0 must have shape (2,)"),
    ("  %0 = stablehlo.slice %a [0:3, 0:3] : (tensor<2x3xf32>) -> tensor<3x3xf32>\n", "out of range"),
    ("  %0 = stablehlo.slice %a [0:2, 0:3:2] : (tensor<2x3xf32>) -> tensor<2x1xf32>\n",
     "result must be tensor<2x2xf32>"),
    ("  %0 = stablehlo.concatenate %a, %b, dim = 0 : (tensor<2x3xf32>, tensor<3x2xf32>) -> tensor<5x3xf32>\n",
     "differ outside dimension 0"),
    ("  %0 = stablehlo.convert %a : (tensor<2x3xf32>) -> tensor<3x2xi32>\n", "result shape"),
    ("  %0 = stablehlo.compare LT, %a, %a : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>\n",
     "result must be tensor<2x3xi1>"),
    ("  %p = stablehlo.constant dense<true> : tensor<2xi1>\n"
     "  %0 = stablehlo.select %p, %a, %a : (tensor<2xi1>, tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>\n",
     "pred shape (2,) must be () or (2, 3)"),
    ("  %0 = call @missing(%a) : (tensor<2x3xf32>) -> tensor<2x3xf32>\n",
     "calls @missing, which is not defined"),
    ("  %0 = call @helper(%b) : (tensor<3x2xf32>) -> tensor<2x3xf32>\n",
     "passes (tensor<3x2xf32>) to @helper, which takes (tensor<2x3xf32>)"),
    ("  %0 = stablehlo.pad %a, %a, low = [0, 0], high = [0, 0], interior = [0, 0] : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>\n",
     "padding value must be tensor<f32>"),
    ('  %0 = "stablehlo.while"(%a) ({\n  ^bb0(%x: tensor<2x3xf32>):\n    stablehlo.return %x : tensor<2x3xf32>\n'
     '  }, {\n  ^bb0(%x: tensor<2x3xf32>):\n    stablehlo.return %x : tensor<2x3xf32>\n  }) : (tensor<2x3xf32>) -> tensor<2x3xf32>\n',
     "cond returns (tensor<2x3xf32>), expected (tensor<i1>)"),
    ("  %0 = stablehlo.iota dim = 2 : tensor<2x3xf32>\n", "iota_dimension 2 out of range"),
])
def test_ill_typed_ops_are_rejected(body, fragment):
    message = verify_error(program(body))
    assert fragment in message


@pytest.mark.parametrize("window", ["stride = [0]", "lhs_dilate = [0]", "rhs_dilate = [-1]"])
def test_a_convolution_window_must_be_positive(window):
    conv = ("  %0 = stablehlo.convolution(%x, %k) dim_numbers = [b, 0, f]x[0, i, o]->[b, 0, f], "
            f"window = {{{window}}} {{batch_group_count = 1 : i64, feature_group_count = 1 : i64}} : "
            "(tensor<1x4x1xf32>, tensor<2x1x1xf32>) -> tensor<1x3x1xf32>\n")
    text = (f"func.func @main(%x: tensor<1x4x1xf32>, %k: tensor<2x1x1xf32>) -> tensor<1x3x1xf32> {{\n{conv}"
            "  return %0 : tensor<1x3x1xf32>\n}\n")
    assert "must be positive" in verify_error(text)


def test_return_types_must_match_the_function_signature():
    message = verify_error(program("", ret="%b", result="tensor<2x3xf32>").replace(
        "return %b : tensor<2x3xf32>", "return %b : tensor<3x2xf32>"))
    assert "returns (tensor<3x2xf32>) but the function is declared to return (tensor<2x3xf32>)" in message


def test_use_before_definition_in_hand_built_ir():
    f32 = TensorType((), "f32")
    a = Value("%a", f32, 0)
    later = Value("%later", f32, 1)
    x = Value("%x", f32, 2)
    use = Op("stablehlo.add", (a, later), (x,), location="f.py:1:1")
    define = Op("stablehlo.negate", (a,), (later,))
    ret = Op("func.return", (x,), ())
    fn = Function("main", "public", (a,), (frozen_mapping(),), (f32,), (frozen_mapping(),),
                  Block((a,), (use, define, ret)))
    with pytest.raises(CompileError, match=r"stablehlo.add \(%x\) at f.py:1:1 in @main: operand %later is used before"):
        verify(Module("m", frozen_mapping({"main": fn})))


def test_values_of_a_region_are_not_visible_after_it():
    f32 = TensorType((), "f32")
    i32 = TensorType((), "i32")
    idx, inner, out = Value("%i", i32, 0), Value("%inner", f32, 1), Value("%out", f32, 2)
    branch = Block((), (Op("stablehlo.constant", (), (inner,), {"value": __import__("numpy").float32(1)}),
                        Op("stablehlo.return", (inner,), ())))
    case = Op("stablehlo.case", (idx,), (out,), regions=(branch,))
    leak = Op("func.return", (inner,), ())
    fn = Function("main", "public", (idx,), (frozen_mapping(),), (f32,), (frozen_mapping(),),
                  Block((idx,), (case, leak)))
    with pytest.raises(CompileError, match="%inner is used before it is defined"):
        verify(Module("m", frozen_mapping({"main": fn})))


def test_module_without_entry_point():
    text = "func.func private @f(%a: tensor<f32>) -> tensor<f32> {\n  return %a : tensor<f32>\n}\n"
    text += text.replace("@f", "@g")
    with pytest.raises(CompileError, match="no @main function"):
        verify(parse_module(text))


def test_valid_control_flow_and_gather_pass():
    text = """
    func.func @main(%x: tensor<10x12xf32>, %i: tensor<6x1xi32>, %c: tensor<i32>) -> tensor<6x12xf32> {
      %0 = "stablehlo.gather"(%x, %i) <{dimension_numbers = #stablehlo.gather<offset_dims = [1], collapsed_slice_dims = [0], start_index_map = [0], index_vector_dim = 1>, slice_sizes = array<i64: 1, 12>}> : (tensor<10x12xf32>, tensor<6x1xi32>) -> tensor<6x12xf32>
      %1 = "stablehlo.case"(%c) ({
        stablehlo.return %0 : tensor<6x12xf32>
      }, {
        %n = stablehlo.negate %0 : tensor<6x12xf32>
        stablehlo.return %n : tensor<6x12xf32>
      }) : (tensor<i32>) -> tensor<6x12xf32>
      return %1 : tensor<6x12xf32>
    }
    """
    module = parse_module(text)
    assert verify(module) is module
    bad_gather = """
    func.func @main(%x: tensor<10x12xf32>, %i: tensor<6x1xi32>) -> tensor<6x11xf32> {
      %0 = "stablehlo.gather"(%x, %i) <{dimension_numbers = #stablehlo.gather<offset_dims = [1], collapsed_slice_dims = [0], start_index_map = [0], index_vector_dim = 1>, slice_sizes = array<i64: 1, 12>}> : (tensor<10x12xf32>, tensor<6x1xi32>) -> tensor<6x11xf32>
      return %0 : tensor<6x11xf32>
    }
    """
    assert "result must be tensor<6x12xf32>" in verify_error(bad_gather)


APPROX_TOP_K = """module @jit_f {
  func.func @top_k_gt_f32_comparator(%arg0: tensor<f32>, %arg1: tensor<f32>, %arg2: tensor<i32>, %arg3: tensor<i32>) -> tensor<i1> {
    %0 = stablehlo.compare GT, %arg0, %arg1 : (tensor<f32>, tensor<f32>) -> tensor<i1>
    stablehlo.return %0 : tensor<i1>
  }
  func.func public @main(%arg0: tensor<2x4xf32>) -> (tensor<2x2xf32>, tensor<2x2xi32>) {
    %0 = stablehlo.iota dim = 1 : tensor<2x4xi32>
    %c = stablehlo.constant dense<-1> : tensor<i32>
    %cst = stablehlo.constant dense<0xFF800000> : tensor<f32>
    %1:2 = stablehlo.custom_call @ApproxTopK(%arg0, %0, %cst, %c) {called_computations = [@top_k_gt_f32_comparator], operand_layouts = [dense<[1, 0]> : tensor<2xindex>, dense<[1, 0]> : tensor<2xindex>, dense<> : tensor<0xindex>, dense<> : tensor<0xindex>]} : (tensor<2x4xf32>, tensor<2x4xi32>, tensor<f32>, tensor<i32>) -> (tensor<2x2xf32>, tensor<2x2xi32>)
    return %1#0, %1#1 : tensor<2x2xf32>, tensor<2x2xi32>
  }
}
"""


def test_a_computation_a_custom_call_names_ends_as_a_region_does():
    """jax.lax.approx_max_k's comparator ends with stablehlo.return; index-typed layouts are
    read as 64-bit integers. Only the custom call itself is then left for a backend to refuse."""
    module = verify(parse_module(APPROX_TOP_K))
    call = next(op for op in module.main.body.ops if op.name == "stablehlo.custom_call")
    assert call.call_target == "ApproxTopK"
    assert [a.tolist() for a in call.attr("operand_layouts")] == [[1, 0], [1, 0], [], []]
    # A function that is not a custom call's computation still needs func.return.
    plain = APPROX_TOP_K.replace("called_computations = [@top_k_gt_f32_comparator], ", "")
    with pytest.raises(CompileError, match="must end with func.return"):
        verify(parse_module(plain))
