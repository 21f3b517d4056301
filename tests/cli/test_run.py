"""``pjrt-hub run``: the contract (in0..inN in, out0..outM out) and its errors, on the reference plugin."""

from __future__ import annotations

import io
import json
import os
import stat
import threading

import numpy as np
import pytest

from pjrt_hub.cli import ExitCode, main

from ..corpus import CORPUS as CORPORA, assert_output, public_programs

CORPUS = CORPORA / "public"

ADD = """module @jit_add {
  func.func public @main(%arg0: tensor<4xf32>, %arg1: tensor<4xi32>) -> (tensor<4xf32>, tensor<4xi32>) {
    %0 = stablehlo.add %arg0, %arg0 : tensor<4xf32>
    %1 = stablehlo.multiply %arg1, %arg1 : tensor<4xi32>
    return %0, %1 : tensor<4xf32>, tensor<4xi32>
  }
}
"""


@pytest.fixture
def program(tmp_path):
    path = tmp_path / "add.mlir"
    path.write_text(ADD)
    return path


def inputs(tmp_path, **arrays):
    path = tmp_path / "in.npz"
    np.savez(path, **arrays)
    return path


def run(capsys, *argv):
    code = main(["run", *map(str, argv)])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_run_writes_every_result(tmp_path, program, capsys):
    src = inputs(tmp_path, in0=np.arange(4, dtype=np.float32), in1=np.array([1, -2, 3, 4], np.int32))
    out = tmp_path / "out.npz"
    code, stdout, stderr = run(capsys, program, "--plugin", "reference", "--inputs", src, "--out", out)
    assert code == ExitCode.OK, stderr
    with np.load(out) as data:
        assert sorted(data.files) == ["out0", "out1"]
        np.testing.assert_array_equal(data["out0"], [0, 2, 4, 6])
        np.testing.assert_array_equal(data["out1"], [1, 4, 9, 16])
        assert data["out1"].dtype == np.int32


def test_run_shows_the_values_it_computed_and_the_corners_of_large_ones(tmp_path, program, capsys):
    src = inputs(tmp_path, in0=np.arange(4, dtype=np.float32), in1=np.array([1, -2, 3, 4], np.int32))
    code, stdout, _ = run(capsys, program, "--plugin", "reference", "--inputs", src)
    assert code == ExitCode.OK
    assert "  out0: float32[4]\n    [0. 2. 4. 6.]\n  out1: int32[4]\n    [ 1  4  9 16]" in stdout
    big = tmp_path / "big.mlir"
    big.write_text(ADD.replace("tensor<4x", "tensor<1000x"))
    src = inputs(tmp_path, in0=np.arange(1000, dtype=np.float32), in1=np.arange(1000, dtype=np.int32))
    code, stdout, _ = run(capsys, big, "--plugin", "reference", "--inputs", src)
    assert code == ExitCode.OK
    assert "    [   0.    2.    4. ... 1994. 1996. 1998.]" in stdout and len(stdout.splitlines()) < 10


def test_run_json_report(tmp_path, program, capsys):
    src = inputs(tmp_path, in0=np.ones(4, np.float32), in1=np.ones(4, np.int32))
    code, stdout, _ = run(capsys, program, "--plugin", "reference", "--inputs", src, "--json")
    report = json.loads(stdout)
    assert code == 0 and report["plugin"] == "reference"
    assert [o["dtype"] for o in report["outputs"]] == ["float32", "int32"]
    assert report["inputs"][1] == {"name": "in1", "shape": [4], "dtype": "int32"}


def test_a_corpus_program_with_its_expected_outputs_in_the_same_file(tmp_path, capsys):
    out = tmp_path / "out.npz"
    code, _, err = run(capsys, CORPUS / "layernorm.mlir", "--plugin", "reference",
                       "--inputs", CORPUS / "layernorm.npz", "--out", out)
    assert code == 0, err
    (entry,) = [p for p in public_programs() if p["name"] == "layernorm"]
    with np.load(out) as got, np.load(CORPUS / "layernorm.npz") as want:
        assert_output(got["out0"], want["out0"], entry["outputs"][0], "layernorm out0")


@pytest.mark.parametrize("arrays, message", [
    ({"in0": np.ones(4, np.float32)}, "@main takes 2 arguments but 1 inputs were given"),
    ({"in0": np.ones(5, np.float32), "in1": np.ones(4, np.int32)}, "input in0: @main expects float32[4], got float32[5]"),
    ({"in0": np.ones(4, np.float32), "in1": np.ones(4, np.int64)}, "input in1: @main expects int32[4], got int64[4]"),
    ({"in0": np.ones(4, np.float32), "in2": np.ones(4, np.int32)}, "missing in1"),
    ({"in0": np.ones(4, np.float32), "x": np.ones(4, np.int32)}, "unexpected array 'x'"),
])
def test_wrong_inputs_exit_3_with_a_clear_message(tmp_path, program, capsys, arrays, message):
    code, _, err = run(capsys, program, "--plugin", "reference", "--inputs", inputs(tmp_path, **arrays))
    assert code == ExitCode.BAD_INPUT
    assert message in err


def test_malformed_program_exits_3_naming_the_place(tmp_path, capsys):
    bad = tmp_path / "bad.mlir"
    bad.write_text(ADD.replace("stablehlo.add %arg0, %arg0", "stablehlo.add %arg0 %arg0"))
    src = inputs(tmp_path, in0=np.ones(4, np.float32), in1=np.ones(4, np.int32))
    code, _, err = run(capsys, bad, "--plugin", "reference", "--inputs", src)
    assert code == ExitCode.BAD_INPUT
    assert "line 3" in err


@pytest.mark.parametrize("plugin", ["reference", "numba_cpu"])
def test_unsupported_op_exits_3_and_lists_the_supported_ones(tmp_path, capsys, plugin):
    bad = tmp_path / "frob.mlir"
    bad.write_text(ADD.replace("stablehlo.add", "stablehlo.frobnicate"))
    src = inputs(tmp_path, in0=np.ones(4, np.float32), in1=np.ones(4, np.int32))
    code, _, err = run(capsys, bad, "--plugin", plugin, "--inputs", src)
    assert code == ExitCode.BAD_INPUT
    assert "unsupported op 'stablehlo.frobnicate' at line 3, column" in err and "stablehlo.add" in err


def test_missing_files_and_plugins(tmp_path, program, capsys):
    src = inputs(tmp_path, in0=np.ones(4, np.float32), in1=np.ones(4, np.int32))
    assert run(capsys, tmp_path / "nope.mlir", "--plugin", "reference", "--inputs", src)[0] == ExitCode.BAD_INPUT
    assert run(capsys, program, "--plugin", "reference", "--inputs", tmp_path / "nope.npz")[0] == ExitCode.BAD_INPUT
    code, _, err = run(capsys, program, "--plugin", "ghost", "--inputs", src)
    assert code == ExitCode.NOT_FOUND and "no plugin named 'ghost'" in err


def test_pjrt_device_picks_the_default_plugin(tmp_path, program, capsys, monkeypatch):
    monkeypatch.setenv("PJRT_DEVICE", "REFERENCE")
    src = inputs(tmp_path, in0=np.ones(4, np.float32), in1=np.ones(4, np.int32))
    code, stdout, _ = run(capsys, program, "--inputs", src, "--json")
    assert code == 0 and json.loads(stdout)["plugin"] == "reference"


# -- every shape and the element types an .npz cannot name ----------------------------------------

EDGES = """func.func @main(%x: tensor<f32>, %y: tensor<3xf32>, %z: tensor<0x3xf32>, %b: tensor<2xbf16>,
                 %w: tensor<1x1x2xi8>) -> (tensor<3xf32>, tensor<0x3xf32>, tensor<2xbf16>, tensor<f32>, tensor<2x1xi8>) {
  %0 = stablehlo.broadcast_in_dim %x, dims = [] : (tensor<f32>) -> tensor<3xf32>
  %1 = stablehlo.multiply %0, %y : tensor<3xf32>
  %2 = stablehlo.add %z, %z : tensor<0x3xf32>
  %3 = stablehlo.multiply %b, %b : tensor<2xbf16>
  %4 = stablehlo.add %x, %x : tensor<f32>
  %5 = stablehlo.reshape %w : (tensor<1x1x2xi8>) -> tensor<2x1xi8>
  return %1, %2, %3, %4, %5 : tensor<3xf32>, tensor<0x3xf32>, tensor<2xbf16>, tensor<f32>, tensor<2x1xi8>
}
"""


@pytest.mark.parametrize("plugin", ["reference", "numba_cpu"])
@pytest.mark.parametrize("bf16_as", ["bits", "ml_dtypes"])
def test_scalar_zero_size_and_bf16_arguments(tmp_path, capsys, plugin, bf16_as):
    import ml_dtypes

    program = tmp_path / "edges.mlir"
    program.write_text(EDGES)
    bf16 = np.array([1.5, -3], ml_dtypes.bfloat16)
    out = tmp_path / "out.npz"
    if bf16_as == "bits":
        # An .npz cannot name bfloat16: its bits come as uint16; big-endian data is fine too.
        src = inputs(tmp_path, in0=np.float32(2.0), in1=np.array([1, 2, 3], ">f4"),
                     in2=np.zeros((0, 3), np.float32), in3=bf16.view(np.uint16), in4=np.array([[[7, -8]]], np.int8))
        code, stdout, err = run(capsys, program, "--plugin", plugin, "--inputs", src, "--out", out)
        assert code == ExitCode.OK, err
        assert "out2: bfloat16[2]" in stdout and "out3: float32[]" in stdout and "out1: float32[0,3]" in stdout
        assert "(out2 as uint16 bits)" in stdout
        with np.load(out) as data:
            got = {k: data[k] for k in data.files}
    else:
        from pjrt_hub import PluginRegistry
        from pjrt_hub._run import check_inputs, main_signature, run_program

        # In memory: ml_dtypes arrays, a numpy scalar, a negatively strided and a sliced view.
        arrays = [np.float32(2.0), np.array([3, 2, 1], np.float32)[::-1], np.zeros((0, 3), np.float32), bf16,
                  np.array([[[7, 0, -8]]], np.int8)[..., ::2]]
        arrays = check_inputs(main_signature(EDGES), arrays)
        result = run_program(PluginRegistry().create_client(plugin), EDGES, arrays)
        got = {f"out{i}": a for i, a in enumerate(result.outputs)}
        assert got["out2"].dtype == ml_dtypes.bfloat16
        got["out2"] = got["out2"].view(np.uint16)
    np.testing.assert_array_equal(got["out0"], np.array([2, 4, 6], np.float32))
    assert got["out1"].shape == (0, 3) and got["out1"].dtype == np.float32
    assert got["out2"].dtype == np.uint16
    np.testing.assert_array_equal(got["out2"].view(ml_dtypes.bfloat16), (bf16 * bf16).astype(ml_dtypes.bfloat16))
    assert got["out3"].shape == () and got["out3"] == 4.0
    np.testing.assert_array_equal(got["out4"], np.array([[7], [-8]], np.int8))


def test_an_output_file_feeds_back_as_an_input_file(tmp_path, capsys):
    import ml_dtypes

    program = tmp_path / "square.mlir"
    program.write_text("""func.func @main(%b: tensor<2xbf16>) -> tensor<2xbf16> {
  %0 = stablehlo.multiply %b, %b : tensor<2xbf16>
  return %0 : tensor<2xbf16>
}""")
    src = inputs(tmp_path, in0=np.array([1.5, 3], ml_dtypes.bfloat16).view(np.uint16))
    first, second = tmp_path / "first.npz", tmp_path / "second.npz"
    assert run(capsys, program, "--plugin", "reference", "--inputs", src, "--out", first)[0] == 0
    # As it is (out0 read as in0), and renamed.
    assert run(capsys, program, "--plugin", "reference", "--inputs", first, "--out", second)[0] == 0
    with np.load(second) as data:
        np.testing.assert_array_equal(data["out0"].view(ml_dtypes.bfloat16), np.array([5.0625, 81], ml_dtypes.bfloat16))
    with np.load(first) as data:
        np.savez(tmp_path / "again.npz", in0=data["out0"])
    assert run(capsys, program, "--plugin", "reference", "--inputs", tmp_path / "again.npz", "--out", second)[0] == 0
    with np.load(second) as data:
        np.testing.assert_array_equal(data["out0"].view(ml_dtypes.bfloat16), np.array([5.0625, 81], ml_dtypes.bfloat16))
    np.savez(tmp_path / "none.npz")
    code, _, err = run(capsys, program, "--plugin", "reference", "--inputs", tmp_path / "none.npz")
    assert code == ExitCode.BAD_INPUT and "takes 1 arguments but 0 inputs were given (none)" in err


def test_bf16_given_as_bits_of_the_wrong_width_is_refused(tmp_path, capsys):
    program = tmp_path / "edges.mlir"
    program.write_text(EDGES)
    src = inputs(tmp_path, in0=np.float32(2.0), in1=np.ones(3, np.float32), in2=np.zeros((0, 3), np.float32),
                 in3=np.ones(2, np.uint8), in4=np.ones((1, 1, 2), np.int8))
    code, _, err = run(capsys, program, "--plugin", "reference", "--inputs", src)
    assert code == ExitCode.BAD_INPUT
    assert "input in3: @main expects bfloat16[2], got uint8[2] (an .npz carries bfloat16 as its bits: give uint16)" in err


def test_a_scalar_is_not_a_one_element_vector(tmp_path, capsys):
    program = tmp_path / "edges.mlir"
    program.write_text(EDGES)
    src = inputs(tmp_path, in0=np.ones(1, np.float32), in1=np.ones(3, np.float32), in2=np.zeros((0, 3), np.float32),
                 in3=np.ones(2, np.uint16), in4=np.ones((1, 1, 2), np.int8))
    code, _, err = run(capsys, program, "--plugin", "reference", "--inputs", src)
    assert code == ExitCode.BAD_INPUT and "input in0: @main expects float32[], got float32[1]" in err


# jax.jit with shardings over a one-device mesh, as JAX prints it: an sdy.mesh in the module
# body, sdy.sharding attributes and a with_sharding_constraint, in both forms.
SHARDY_PRETTY = """module @jit_f attributes {mhlo.num_partitions = 1 : i32, mhlo.num_replicas = 1 : i32} {
  sdy.mesh @mesh = <["a"=1]> {stablehlo.mesh = {axes = [{name = "a", size = 1 : i64}]}}
  func.func public @main(%arg0: tensor<2x4xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"a"}, {}]>}) -> (tensor<2x4xf32> {jax.result_info = "result"}) {
    %cst = stablehlo.constant dense<2.000000e+00> : tensor<2x4xf32>
    %0 = stablehlo.multiply %arg0, %cst : tensor<2x4xf32>
    %1 = sdy.sharding_constraint %0 <@mesh, [{"a"}, {}]> : tensor<2x4xf32>
    %2 = stablehlo.add %1, %cst : tensor<2x4xf32>
    return %2 : tensor<2x4xf32>
  }
}
"""
SHARDY_GENERIC = """"builtin.module"() <{sym_name = "jit_f"}> ({
  "sdy.mesh"() <{mesh = #sdy.mesh<["a"=1]>, sym_name = "mesh"}> {stablehlo.mesh = {axes = [{name = "a", size = 1 : i64}]}} : () -> ()
  "func.func"() <{arg_attrs = [{sdy.sharding = #sdy.sharding<@mesh, [{"a"}, {}]>}], function_type = (tensor<2x4xf32>) -> tensor<2x4xf32>, res_attrs = [{jax.result_info = "result"}], sym_name = "main", sym_visibility = "public"}> ({
  ^bb0(%arg0: tensor<2x4xf32>):
    %0 = "stablehlo.constant"() <{value = dense<2.000000e+00> : tensor<2x4xf32>}> : () -> tensor<2x4xf32>
    %1 = "stablehlo.multiply"(%arg0, %0) : (tensor<2x4xf32>, tensor<2x4xf32>) -> tensor<2x4xf32>
    %2 = "sdy.sharding_constraint"(%1) <{sharding = #sdy.sharding<@mesh, [{"a"}, {}]>}> : (tensor<2x4xf32>) -> tensor<2x4xf32>
    %3 = "stablehlo.add"(%2, %0) : (tensor<2x4xf32>, tensor<2x4xf32>) -> tensor<2x4xf32>
    "func.return"(%3) : (tensor<2x4xf32>) -> ()
  }) : () -> ()
}) {mhlo.num_partitions = 1 : i32, mhlo.num_replicas = 1 : i32} : () -> ()
"""


@pytest.mark.parametrize("plugin", ["reference", "numba_cpu"])
@pytest.mark.parametrize("form", ["pretty", "generic"])
def test_a_program_sharded_over_one_device_runs_as_it_is(tmp_path, capsys, plugin, form):
    path = tmp_path / "f.mlir"
    path.write_text(SHARDY_PRETTY if form == "pretty" else SHARDY_GENERIC)
    x = np.arange(8, dtype=np.float32).reshape(2, 4)
    out = tmp_path / "out.npz"
    code, _, stderr = run(capsys, path, "--plugin", plugin, "--inputs", inputs(tmp_path, in0=x), "--out", out)
    assert code == ExitCode.OK, stderr
    with np.load(out) as data:
        np.testing.assert_array_equal(data["out0"], x * 2 + 2)


def test_a_sharding_constraint_without_its_sharding_is_refused_by_name(tmp_path, capsys):
    path = tmp_path / "f.mlir"
    path.write_text(SHARDY_PRETTY.replace(' <@mesh, [{"a"}, {}]> : tensor<2x4xf32>\n', " : tensor<2x4xf32>\n"))
    code, _, stderr = run(capsys, path, "--plugin", "reference", "--inputs",
                          inputs(tmp_path, in0=np.zeros((2, 4), np.float32)))
    assert code == ExitCode.BAD_INPUT
    assert "the sharding" in stderr and "line 6" in stderr


@pytest.mark.parametrize("plugin", ["reference", "numba_cpu"])
def test_an_unsupported_custom_call_is_named_by_its_target(tmp_path, capsys, plugin):
    from ..backends.stablehlo.test_stablehlo_verify import APPROX_TOP_K

    path = tmp_path / "vendor.mlir"
    path.write_text(APPROX_TOP_K.replace("@ApproxTopK", "@VendorTopK"))  # ApproxTopK itself runs
    code, _, err = run(capsys, path, "--plugin", plugin, "--inputs", inputs(tmp_path, in0=np.ones((2, 4), np.float32)))
    assert code == ExitCode.BAD_INPUT
    assert "unsupported op 'stablehlo.custom_call @VendorTopK' at line 10" in err


def test_with_json_a_failure_is_json_too(tmp_path, program, capsys):
    """CI reading stdout gets JSON whether the command got as far as a report or not."""
    src = inputs(tmp_path, in0=np.ones(3, np.float32), in1=np.ones(4, np.int32))
    code, stdout, stderr = run(capsys, program, "--plugin", "reference", "--inputs", src, "--json")
    assert code == ExitCode.BAD_INPUT
    report = json.loads(stdout)
    assert report == {"command": "run", "exit_code": 3, "error": report["error"]}
    assert "in0" in report["error"] and "float32[3]" in report["error"] and report["error"] in stderr
    with pytest.raises(SystemExit) as usage:
        run(capsys, program, "--plugin", "reference", "--json")  # no --inputs
    assert usage.value.code == ExitCode.USAGE
    assert json.loads(capsys.readouterr().out)["exit_code"] == ExitCode.USAGE
    ok = inputs(tmp_path, in0=np.ones(4, np.float32), in1=np.ones(4, np.int32))
    for bad in (["--timeout", "0"], ["--bogus-flag"]):  # argparse's own errors
        with pytest.raises(SystemExit):
            run(capsys, program, "--inputs", ok, "--json", *bad)
        assert json.loads(capsys.readouterr().out)["exit_code"] == ExitCode.USAGE
    code, stdout, _ = run(capsys, program, "--plugin", "no-such-plugin", "--inputs", ok, "--json")
    assert code == ExitCode.NOT_FOUND and json.loads(stdout)["exit_code"] == ExitCode.NOT_FOUND
    # A success prints its report alone.
    code, stdout, _ = run(capsys, program, "--plugin", "reference", "--inputs", ok, "--json")
    assert code == ExitCode.OK and "exit_code" not in json.loads(stdout)


def test_an_output_that_is_a_pipe_is_written_into_not_replaced(tmp_path, program, capsys):
    """--out /dev/null or a FIFO: renaming a temporary file over it (as for a regular file)
    would replace the device or pipe, as root even /dev/null."""
    fifo = tmp_path / "results.fifo"
    os.mkfifo(fifo)
    received: list[bytes] = []
    reader = threading.Thread(target=lambda: received.append(fifo.read_bytes()))
    reader.start()
    src = inputs(tmp_path, in0=np.arange(4, dtype=np.float32), in1=np.ones(4, np.int32))
    code, _, stderr = run(capsys, program, "--plugin", "reference", "--inputs", src, "--out", fifo)
    reader.join(timeout=30)
    assert code == ExitCode.OK, stderr
    assert stat.S_ISFIFO(os.stat(fifo).st_mode)
    with np.load(io.BytesIO(received[0])) as data:
        np.testing.assert_array_equal(data["out0"], [0, 2, 4, 6])
