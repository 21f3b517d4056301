"""The IR's value types: element types map to the runtime's numpy dtypes, enums compare as text."""

import ml_dtypes
import numpy as np
import pytest

from pjrt_hub.backends.stablehlo import ComparisonDirection, Op, TensorType, Value, element_dtype


@pytest.mark.parametrize(
    "element, dtype",
    [("f32", np.float32), ("bf16", ml_dtypes.bfloat16), ("f16", np.float16), ("i1", np.bool_),
     ("i32", np.int32), ("ui8", np.uint8), ("ui64", np.uint64), ("complex<f32>", np.complex64)],
)
def test_element_types_use_runtime_dtypes(element, dtype):
    assert element_dtype(element) == np.dtype(dtype)
    assert TensorType((2,), element).dtype == np.dtype(dtype)


def test_unknown_element_type_is_a_key_error():
    with pytest.raises(KeyError):
        element_dtype("f7")


def test_tensor_type_properties():
    t = TensorType((2, 3, 4), "ui32")
    assert (t.rank, t.size, t.bit_width, str(t)) == (3, 24, 32, "tensor<2x3x4xui32>")
    assert t.is_unsigned and t.is_integer and not t.is_signed and not t.is_float
    assert TensorType((), "i1").is_bool and not TensorType((), "i1").is_integer
    assert str(TensorType((), "f32")) == "tensor<f32>"


def test_values_compare_by_identity():
    t = TensorType((), "f32")
    a, b = Value("%0", t, 0), Value("%0", t, 1)
    assert a != b and len({a, b}) == 2


def test_op_result_and_enum_text():
    v = Value("%0", TensorType((), "i1"), 0)
    op = Op("stablehlo.compare", (), (v,), {"comparison_direction": ComparisonDirection.LT})
    assert op.result is v
    assert op.attr("comparison_direction") == "LT"
    with pytest.raises(ValueError):
        _ = Op("stablehlo.while", (), (v, v)).result


def test_parsed_ir_is_read_only():
    import dataclasses

    from pjrt_hub.backends.stablehlo import parse_module

    module = parse_module("func.func @main(%a: tensor<f32>) -> tensor<f32> {\n"
                          "  %0 = stablehlo.negate %a : tensor<f32>\n  return %0 : tensor<f32>\n}")
    op = module.main.body.ops[0]
    with pytest.raises(dataclasses.FrozenInstanceError):
        op.name = "stablehlo.abs"
    with pytest.raises(TypeError):
        module.functions["other"] = module.main
    with pytest.raises(TypeError):
        module.main.arg_attrs[0]["x"] = 1
    assert [o.name for o in module.walk()] == ["stablehlo.negate", "func.return"]
