"""NumbaCompiler as a ProgramCompiler: loops stay in compiled code, errors name what is wrong,
compiled programs are cached on disk and survive serialization into a fresh process."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import numpy as np
import pytest

from pjrt_hub.abi import CompileOptions, InvalidArgument, ParseError, UnsupportedOpError
from pjrt_hub.backends.cpu_runtime.compiler import CompiledProgram, ProgramCompiler
from pjrt_hub.backends.numba_cpu import NumbaCompiler, supported_ops

FORI_LOOP = """
module @jit_count {
  func.func public @main(%n: tensor<i32>, %x: tensor<4xf32>) -> (tensor<i32>, tensor<4xf32>) {
    %c0 = stablehlo.constant dense<0> : tensor<i32>
    %c1 = stablehlo.constant dense<1> : tensor<i32>
    %r:3 = stablehlo.while(%i = %c0, %acc = %x, %k = %c0) : tensor<i32>, tensor<4xf32>, tensor<i32>
    cond {
      %lt = stablehlo.compare LT, %i, %n, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
      stablehlo.return %lt : tensor<i1>
    } do {
      %i1 = stablehlo.add %i, %c1 : tensor<i32>
      %s = func.call @step(%acc) : (tensor<4xf32>) -> tensor<4xf32>
      %k1 = stablehlo.add %k, %c1 : tensor<i32>
      stablehlo.return %i1, %s, %k1 : tensor<i32>, tensor<4xf32>, tensor<i32>
    }
    return %r#2, %r#1 : tensor<i32>, tensor<4xf32>
  }
  func.func private @step(%a: tensor<4xf32>) -> tensor<4xf32> {
    %h = stablehlo.constant dense<0.5> : tensor<4xf32>
    %m = stablehlo.multiply %a, %h : tensor<4xf32>
    %one = stablehlo.constant dense<1.0> : tensor<4xf32>
    %s = stablehlo.add %m, %one : tensor<4xf32>
    return %s : tensor<4xf32>
  }
}
"""

ADD = """
func.func @main(%a: tensor<4xf32>, %b: tensor<4xf32>) -> tensor<4xf32> {
  %0 = stablehlo.add %a, %b : tensor<4xf32>
  return %0 : tensor<4xf32>
}
"""


def test_is_a_program_compiler(compiler):
    assert isinstance(compiler, ProgramCompiler)
    program = compiler.compile(ADD, CompileOptions())
    assert isinstance(program, CompiledProgram)
    assert program.inputs[0].shape == (4,) and program.outputs[0].dtype == np.float32
    cost = program.cost_analysis()
    assert cost["flops"] == 4 and cost["bytes accessed"] > 0


def test_while_loop_runs_inside_compiled_code(compiler):
    program = compiler.compile(FORI_LOOP)
    program.run([np.array(1, np.int32), np.zeros(4, np.float32)])  # first-call setup in numba
    n = 100_000
    calls = 0

    def count(frame, event, arg):
        nonlocal calls
        if event == "call":
            calls += 1

    sys.setprofile(count)
    try:
        k, acc = program.run([np.array(n, np.int32), np.zeros(4, np.float32)])
    finally:
        sys.setprofile(None)
    assert int(k) == n
    np.testing.assert_allclose(acc, 2.0, rtol=1e-6)
    # run(), the compiled entry and numba boxing the two results; nothing per iteration (a
    # loop returning to Python would make at least 10**5 calls).
    assert calls <= 5


def test_unsupported_op_names_op_location_and_supported_ops(compiler):
    text = """
    func.func @main(%a: tensor<4x4xf32>) -> tensor<4x4xf32> {
      %0 = stablehlo.custom_call @lapack_sgetrf_ffi(%a) : (tensor<4x4xf32>) -> tensor<4x4xf32> loc("model.py":3:7)
      return %0 : tensor<4x4xf32>
    }
    """
    with pytest.raises(UnsupportedOpError) as info:
        compiler.compile(text)
    err = info.value
    assert err.op == "stablehlo.custom_call" and err.target == "lapack_sgetrf_ffi"
    assert "model.py" in (err.location or "")
    assert "stablehlo.dot_general" in err.supported and "stablehlo.while" in err.supported
    assert "'stablehlo.custom_call @lapack_sgetrf_ffi'" in str(err)


def test_supported_ops_cover_the_corpus_census():
    ops = set(supported_ops())
    for name in ["stablehlo.scatter", "stablehlo.sort", "chlo.top_k", "chlo.erf_inv", "stablehlo.case",
                 "stablehlo.reduce_window", "stablehlo.convolution", "stablehlo.bitcast_convert"]:
        assert name in ops


def test_parse_errors_and_bad_arguments(compiler):
    with pytest.raises(ParseError):
        compiler.compile("func.func @main(%a: tensor<4xf32>) -> tensor<4xf32> { %0 = stablehlo.add %a, ")
    program = compiler.compile(ADD)
    with pytest.raises(InvalidArgument, match="argument 1 is float64"):
        program.run([np.ones(4, np.float32), np.ones(4, np.float64)])
    with pytest.raises(InvalidArgument, match="expected 2 arguments"):
        program.run([np.ones(4, np.float32)])
    # Read-only and non-contiguous inputs are accepted (copied), outputs can go to `out`.
    a = np.arange(8, dtype=np.float32)[::2]
    b = np.ones(4, np.float32)
    b.setflags(write=False)
    out = np.empty(4, np.float32)
    (res,) = program.run([a, b], out=[out])
    assert res is out and out.tolist() == [1.0, 3.0, 5.0, 7.0]


def test_second_compile_hits_the_disk_cache(tmp_path):
    first = NumbaCompiler(cache_dir=tmp_path)
    held = first.compile(ADD)
    assert first.stats.misses == 1
    # The memory cache serves a program while something holds it (it is weak, see
    # test_a_dropped_program_unregisters_its_generated_module).
    assert first.compile(ADD) is held and first.compile(ADD) is held and first.stats.memory_hits == 2
    # A new compiler (as in a new process) finds the program text in the index and the
    # machine code in numba's cache: no parse, no lowering, no numba compilation.
    second = NumbaCompiler(cache_dir=tmp_path)
    program = second.compile(ADD)
    assert second.stats.index_hits == 1 and second.stats.misses == 0
    assert program.run([np.ones(4, np.float32), np.ones(4, np.float32)])[0].tolist() == [2.0] * 4


def test_serialized_program_loads_in_a_fresh_process(tmp_path, compiler):
    blob = compiler.compile(FORI_LOOP).serialize()
    (tmp_path / "prog.bin").write_bytes(blob)
    script = textwrap.dedent(f"""
        import numpy as np
        from pjrt_hub.backends.numba_cpu import NumbaCompiler
        c = NumbaCompiler(cache_dir={str(tmp_path / 'fresh-cache')!r})
        p = c.deserialize(open({str(tmp_path / 'prog.bin')!r}, 'rb').read())
        k, acc = p.run([np.array(7, np.int32), np.zeros(4, np.float32)])
        print(int(k), acc.tolist())
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    k, acc = done.stdout.split(" ", 1)
    assert int(k) == 7 and acc.strip().startswith("[1.984375")


def test_deserialize_rejects_foreign_bytes(compiler):
    with pytest.raises(InvalidArgument, match="not a serialized numba_cpu executable"):
        compiler.deserialize(b"\x00\x01not json")


def test_composite_is_inlined_from_its_decomposition(compiler):
    text = """
    module @m {
      func.func public @main(%a: tensor<4xf32>) -> tensor<4xf32> {
        %0 = "stablehlo.composite"(%a) <{name = "my.softplus", decomposition = @softplus}> : (tensor<4xf32>) -> tensor<4xf32>
        return %0 : tensor<4xf32>
      }
      func.func private @softplus(%x: tensor<4xf32>) -> tensor<4xf32> {
        %e = stablehlo.exponential %x : tensor<4xf32>
        %l = stablehlo.log_plus_one %e : tensor<4xf32>
        return %l : tensor<4xf32>
      }
    }
    """
    x = np.array([-3.0, 0.0, 1.0, 20.0], np.float32)
    (got,) = compiler.compile(text).run([x])
    np.testing.assert_allclose(got, np.log1p(np.exp(x.astype(np.float64))), rtol=1e-6)


def test_long_elementwise_chains_are_cut(compiler):
    n = 500
    lines = ["func.func @main(%a: tensor<8xf32>) -> tensor<8xf32> {",
             "  %c = stablehlo.constant dense<1.001> : tensor<8xf32>"]
    prev = "%a"
    for i in range(n):
        lines.append(f"  %v{i} = stablehlo.multiply {prev}, %c : tensor<8xf32>")
        prev = f"%v{i}"
    lines += [f"  return {prev} : tensor<8xf32>", "}"]
    (got,) = compiler.compile("\n".join(lines)).run([np.ones(8, np.float32)])
    np.testing.assert_allclose(got, np.float32(1.001) ** n, rtol=1e-4)


@pytest.fixture(scope="module")
def parallel_compiler(numba_cache_dir):
    return NumbaCompiler(cache_dir=numba_cache_dir, parallel_threshold=0)


@pytest.mark.parametrize("name", ["softmax", "layernorm", "reductions", "attention"])
def test_parallel_kernels_match_the_corpus(parallel_compiler, name):
    """The corpus is small, so its loops run serially; force the prange kernels on."""
    from ...corpus import assert_output, program_text, public_arrays, public_programs

    entry = next(p for p in public_programs() if p["name"] == name)
    program = parallel_compiler.compile(program_text("public", entry))
    assert "prange" in program.source
    inputs, expected = public_arrays(entry)
    outputs = program.run(inputs)
    for i, spec in enumerate(entry["outputs"]):
        assert_output(outputs[i], expected[i], spec, f"{name} {i}")



def test_aliases_from_donors_and_aliasing_attributes(compiler):
    text = """
    func.func @main(%a: tensor<4xf32> {jax.buffer_donor = true}, %b: tensor<4xf32> {tf.aliasing_output = 0 : i32},
                    %c: tensor<2xi32> {jax.buffer_donor = true}) -> (tensor<4xf32>, tensor<4xf32>, tensor<2xi32>) {
      %0 = stablehlo.add %a, %b : tensor<4xf32>
      %1 = stablehlo.multiply %a, %b : tensor<4xf32>
      %2 = stablehlo.add %c, %c : tensor<2xi32>
      return %0, %1, %2 : tensor<4xf32>, tensor<4xf32>, tensor<2xi32>
    }
    """
    program = compiler.compile(text)
    assert dict(program.aliases) == {0: 1, 1: 0, 2: 2}
    a, b, c = np.ones(4, np.float32), np.full(4, 2.0, np.float32), np.array([3, 4], np.int32)
    out = program.run([a, b, c], out=[b, None, c])
    assert out[0] is b and b.tolist() == [3.0] * 4 and out[1].tolist() == [2.0] * 4
    assert out[2] is c and c.tolist() == [6, 8]


def test_results_never_alias_inputs(compiler):
    # A while loop that runs zero times hands back its initial value: an input array.
    text = """
    func.func @main(%x: tensor<3xf32>, %n: tensor<i32>) -> (tensor<3xf32>, tensor<3xf32>, tensor<3xf32>) {
      %c0 = stablehlo.constant dense<0> : tensor<i32>
      %r:2 = stablehlo.while(%i = %c0, %v = %x) : tensor<i32>, tensor<3xf32>
      cond {
        %lt = stablehlo.compare LT, %i, %n, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
        stablehlo.return %lt : tensor<i1>
      } do {
        %d = stablehlo.add %v, %v : tensor<3xf32>
        %c1 = stablehlo.constant dense<1> : tensor<i32>
        %i1 = stablehlo.add %i, %c1 : tensor<i32>
        stablehlo.return %i1, %d : tensor<i32>, tensor<3xf32>
      }
      return %r#1, %x, %x : tensor<3xf32>, tensor<3xf32>, tensor<3xf32>
    }
    """
    program = compiler.compile(text)
    x = np.array([1.0, 2.0, 3.0], np.float32)
    outs = program.run([x, np.array(0, np.int32)])
    for o in outs:
        assert not np.shares_memory(o, x) and o.tolist() == [1.0, 2.0, 3.0]
    assert not np.shares_memory(outs[1], outs[2])
    assert program.run([x, np.array(2, np.int32)])[0].tolist() == [4.0, 8.0, 12.0]


def test_a_bool_constant_array_names_a_type_numpy_1_has(compiler):
    # dtype("bool").name is "bool", which numpy < 2 has no attribute for: the generated module
    # must say np.bool_ (the oldest stack, numba 0.63.1, runs with numpy 1.26).
    program = compiler.compile("""
    func.func public @main(%a: tensor<4xi1>) -> tensor<4xi1> {
      %c = stablehlo.constant dense<[true, false, true, true]> : tensor<4xi1>
      %0 = stablehlo.and %a, %c : tensor<4xi1>
      return %0 : tensor<4xi1>
    }""")
    assert "np.bool_)" in program.source and "np.bool)" not in program.source
    (out,) = program.run([np.array([True, True, False, True])])
    assert out.tolist() == [True, False, False, True]


def test_a_dropped_program_unregisters_its_generated_module(compiler):
    """Compiling distinct programs and dropping them frees them: the compiler's memory cache is
    weak, and the generated module leaves sys.modules with its program (it stayed there for
    good, 1.4 MB per distinct program)."""
    import gc
    import weakref

    from pjrt_hub import PluginRegistry
    from pjrt_hub._run import run_program

    def negate(n: int) -> str:
        return (f"func.func @main(%x: tensor<{n}xf32>) -> tensor<{n}xf32> {{\n"
                f"  %0 = stablehlo.negate %x : tensor<{n}xf32>\n  return %0 : tensor<{n}xf32>\n}}")

    names, refs = [], []
    for n in (3, 5):
        program = compiler.compile(negate(n))
        names.append(f"pjrt_hub_numba_cache.p_{program.fingerprint}")
        assert names[-1] in sys.modules
        np.testing.assert_array_equal(program.run([np.ones(n, np.float32)])[0], -np.ones(n, np.float32))
        refs.append(weakref.ref(program))
        del program
    # Through the plugin: compile, execute, delete, drop.
    client = PluginRegistry().create_client("numba_cpu")
    result = run_program(client, negate(7), [np.ones(7, np.float32)])
    np.testing.assert_array_equal(result.outputs[0], -np.ones(7, np.float32))
    gc.collect()
    assert [r() for r in refs] == [None, None]
    assert not [n for n in names if n in sys.modules]
    assert not [m for m in sys.modules if m.startswith("pjrt_hub_numba_cache.")
                and getattr(sys.modules[m], "META", {}).get("inputs") == [((7,), "float32")]]
