"""ReferenceCompiler behind the ProgramCompiler seam: specs, aliases, fingerprints,
serialization, output buffers, cost analysis and compile-time errors."""

import numpy as np
import pytest

from pjrt_hub.abi import CompileError, CompileOptions, InvalidArgument, ParseError, Unimplemented, UnsupportedOpError
from pjrt_hub.backends.cpu_runtime.compiler import CompiledProgram, ProgramCompiler, TensorSpec
from pjrt_hub.backends.reference import ReferenceCompiler, supported_ops

DONATING = """
module @jit_step attributes {mhlo.num_partitions = 1 : i32, mhlo.num_replicas = 1 : i32} {
  func.func public @main(%w: tensor<4x3xf32> {jax.buffer_donor = true}, %x: tensor<2x4xf32>, %s: tensor<i32> {tf.aliasing_output = 2 : i32}) -> (tensor<4x3xf32>, tensor<2x3xf32>, tensor<i32>) {
    %0 = stablehlo.dot_general %x, %w, contracting_dims = [1] x [0] : (tensor<2x4xf32>, tensor<4x3xf32>) -> tensor<2x3xf32>
    %1 = stablehlo.negate %w : tensor<4x3xf32>
    %c = stablehlo.constant dense<1> : tensor<i32>
    %2 = stablehlo.add %s, %c : tensor<i32>
    return %1, %0, %2 : tensor<4x3xf32>, tensor<2x3xf32>, tensor<i32>
  }
}
"""


@pytest.fixture(scope="module")
def program():
    return ReferenceCompiler().compile(DONATING, CompileOptions())


def test_implements_the_runtime_protocols(program):
    compiler = ReferenceCompiler()
    assert isinstance(compiler, ProgramCompiler) and compiler.name == "reference"
    assert isinstance(program, CompiledProgram)
    assert program.name == "jit_step"
    assert program.inputs == (TensorSpec((4, 3), np.dtype(np.float32)), TensorSpec((2, 4), np.dtype(np.float32)),
                              TensorSpec((), np.dtype(np.int32)))
    assert program.outputs[1] == TensorSpec((2, 3), np.dtype(np.float32))


def test_aliases_come_from_aliasing_output_and_buffer_donors(program):
    assert dict(program.aliases) == {2: 2, 0: 0}


def test_run_and_reuse_of_output_buffers(program):
    w = np.arange(12, dtype=np.float32).reshape(4, 3)
    x = np.ones((2, 4), np.float32)
    outs = program.run([w, x, np.int32(41)])
    np.testing.assert_array_equal(outs[0], -w)
    np.testing.assert_array_equal(outs[1], x @ w)
    assert outs[2] == 42
    buffer = np.empty((4, 3), np.float32)
    again = program.run([w, x, np.int32(0)], out=[buffer, None, None])
    assert again[0] is buffer and (buffer == -w).all()
    with pytest.raises(InvalidArgument, match="output buffer 0"):
        program.run([w, x, np.int32(0)], out=[np.empty((3, 4), np.float32), None, None])


def test_fingerprint_depends_on_text_and_options(program):
    compiler = ReferenceCompiler()
    same = compiler.compile(DONATING.encode(), CompileOptions())
    assert same.fingerprint == program.fingerprint and len(program.fingerprint) == 64
    other_options = compiler.compile(DONATING, CompileOptions(env_option_overrides={"xla_foo": True}))
    other_text = compiler.compile(DONATING.replace("%c = stablehlo.constant dense<1>", "%c = stablehlo.constant dense<2>"),
                                  CompileOptions())
    assert len({program.fingerprint, other_options.fingerprint, other_text.fingerprint}) == 3


def test_serialize_round_trip(program):
    restored = ReferenceCompiler().deserialize(program.serialize())
    assert restored.fingerprint == program.fingerprint
    assert restored.run([np.zeros((4, 3), np.float32), np.zeros((2, 4), np.float32), np.int32(1)])[2] == 2
    with pytest.raises(InvalidArgument, match="not a serialized"):
        ReferenceCompiler().deserialize(b"garbage")


def test_cost_analysis_counts_contraction_flops(program):
    cost = program.cost_analysis()
    # dot: 2 * (2*3 outputs) * 4 contracted; negate: 12; add: 1.
    assert cost["flops"] == 2 * 6 * 4 + 12 + 1
    assert cost["bytes accessed"] > 0 and cost["transcendentals"] == 0


def test_unsupported_ops_fail_at_compile_time_with_the_supported_list():
    text = """
    func.func @main(%a: tensor<3x3xf32>) -> tensor<3x3xf32> {
      %0 = stablehlo.custom_call @lapack_spotrf_ffi(%a) {api_version = 4 : i32} : (tensor<3x3xf32>) -> tensor<3x3xf32> loc("linalg.py":12:3)
      return %0 : tensor<3x3xf32>
    }
    """
    with pytest.raises(UnsupportedOpError) as info:
        ReferenceCompiler().compile(text, CompileOptions())
    error = info.value
    assert error.op == "stablehlo.custom_call" and error.location == "linalg.py:12:3"
    assert error.target == "lapack_spotrf_ffi" and "'stablehlo.custom_call @lapack_spotrf_ffi'" in str(error)
    assert "stablehlo.dot_general" in str(error) and "stablehlo.add" in str(error)
    assert set(error.supported) == set(supported_ops())
    generic = text.replace(
        "stablehlo.custom_call @lapack_spotrf_ffi(%a) {api_version = 4 : i32} : (tensor<3x3xf32>) -> tensor<3x3xf32>",
        '"stablehlo.frobnicate"(%a) {lower = true} : (tensor<3x3xf32>) -> tensor<3x3xf32>')
    with pytest.raises(UnsupportedOpError, match="unsupported op 'stablehlo.frobnicate' at linalg.py:12:3 by reference"):
        ReferenceCompiler().compile(generic, CompileOptions())


def test_parse_and_verify_errors_surface_from_compile():
    with pytest.raises(ParseError, match="line 1"):
        ReferenceCompiler().compile("module {", CompileOptions())
    bad = "func.func @main(%a: tensor<2xf32>) -> tensor<3xf32> {\n  return %a : tensor<2xf32>\n}"
    with pytest.raises(CompileError, match="declared to return"):
        ReferenceCompiler().compile(bad, CompileOptions())
    # A program partitioned by hand runs as it is on each partition; one whose arrays carry
    # shardings to propagate needs an SPMD partitioner, which is named as missing.
    assert ReferenceCompiler().compile(DONATING, CompileOptions(num_partitions=2)) is not None
    sharded = DONATING.replace("%x: tensor<2x4xf32>", '%x: tensor<2x4xf32> {mhlo.sharding = "{devices=[2,1]<=[2]}"}', 1)
    assert sharded != DONATING
    with pytest.raises(Unimplemented, match="sharding propagation"):
        ReferenceCompiler().compile(sharded, CompileOptions(num_partitions=2))
    # replicas are the runtime's business: each device runs the same program on its arguments
    assert ReferenceCompiler().compile(DONATING, CompileOptions(num_replicas=2)) is not None


def test_supported_ops_cover_the_corpus_census():
    census = {
        "stablehlo.broadcast_in_dim", "stablehlo.constant", "stablehlo.add", "func.return", "stablehlo.return",
        "stablehlo.multiply", "func.call", "stablehlo.compare", "stablehlo.subtract", "stablehlo.reshape",
        "stablehlo.reduce", "stablehlo.convert", "stablehlo.slice", "stablehlo.select", "stablehlo.divide",
        "stablehlo.xor", "stablehlo.maximum", "stablehlo.dot_general", "stablehlo.or",
        "stablehlo.shift_right_logical", "stablehlo.shift_left", "stablehlo.negate", "stablehlo.exponential",
        "stablehlo.iota", "stablehlo.and", "stablehlo.abs", "stablehlo.sqrt", "stablehlo.transpose",
        "stablehlo.remainder", "stablehlo.while", "stablehlo.log", "stablehlo.minimum", "stablehlo.reduce_window",
        "stablehlo.rsqrt", "stablehlo.tanh", "stablehlo.power", "chlo.square", "stablehlo.convolution",
        "stablehlo.clamp", "stablehlo.scatter", "stablehlo.bitcast_convert", "stablehlo.case", "stablehlo.gather",
        "stablehlo.sign", "stablehlo.sort", "stablehlo.concatenate", "stablehlo.dynamic_slice", "stablehlo.not",
        "stablehlo.reverse", "stablehlo.cosine", "stablehlo.dynamic_update_slice", "stablehlo.exponential_minus_one",
        "stablehlo.is_finite", "stablehlo.log_plus_one", "stablehlo.pad", "stablehlo.sine", "chlo.erf",
        "chlo.erf_inv", "chlo.erfc", "chlo.top_k", "stablehlo.atan2", "stablehlo.cbrt", "stablehlo.ceil",
        "stablehlo.count_leading_zeros", "stablehlo.floor", "stablehlo.popcnt", "stablehlo.round_nearest_afz",
        "stablehlo.round_nearest_even", "stablehlo.shift_right_arithmetic", "stablehlo.tan",
        # common JAX output beyond the corpus
        "stablehlo.dot", "stablehlo.logistic", "stablehlo.optimization_barrier", "stablehlo.rng_bit_generator",
        "stablehlo.reduce_precision", "stablehlo.real", "stablehlo.imag", "stablehlo.complex", "stablehlo.tuple",
        "stablehlo.get_tuple_element", "stablehlo.select_and_scatter", "stablehlo.batch_norm_inference",
        "stablehlo.batch_norm_training", "stablehlo.batch_norm_grad",
    }
    assert census <= set(supported_ops())


def test_module_level_input_output_alias_attribute():
    text = """
    module @m attributes {mhlo.input_output_alias = [{alias = {kind = "may_alias", parameter_index = array<i64>, parameter_number = 1 : i64}, output_index = array<i64: 0>}]} {
      func.func public @main(%a: tensor<2xf32>, %b: tensor<2xf32>) -> (tensor<2xf32>, tensor<2xf32>) {
        return %b, %a : tensor<2xf32>, tensor<2xf32>
      }
    }
    """
    assert dict(ReferenceCompiler().compile(text, CompileOptions()).aliases) == {0: 1}
