"""The row machine: float32 row segments run by one native call per thread give the bits of the
same segments on numpy (which the tier tests tie to the compiled code), decline what they do not
run, and are never used where an opcode or a formula disagrees."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from pjrt_hub.backends.cpu_runtime import helper_thread
from pjrt_hub.backends.numba_cpu import eager, machine_kernels as mk, row_programs as rp

from ...corpus import program_text, public_arrays, public_programs
from .tier_helpers import assert_same_bits, eager_program


def _segments(program: eager.EagerProgram) -> list[eager._RowSegment]:
    return [s for s in program._body.steps if isinstance(s, eager._RowSegment)]


def _both_ways(program: eager.EagerProgram, args: list[np.ndarray]) -> tuple[list, list, int]:
    """The outputs with the row machine and with numpy segments, and how many segments the
    machine ran."""
    runs: list[int] = []
    real = rp.RowProgram.run

    def counted(self, *a):
        ok = real(self, *a)
        runs.append(ok)
        return ok

    rp.RowProgram.run = counted  # type: ignore[method-assign]
    try:
        with_machine = program.run(args)
    finally:
        rp.RowProgram.run = real  # type: ignore[method-assign]
    for segment in _segments(program):
        segment.machine = False
    return with_machine, program.run(args), sum(runs)


def test_every_opcode_gives_numpys_bits(kernel_file):
    kernels = mk.Kernels(kernel_file, mk.machine_key())
    assert kernels.table == rp.table()
    rng = np.random.default_rng(11)
    bad = [opcode for opcode in range(rp.OPCODES) if not rp.check(kernels, opcode, rng, 1 << 14)]
    assert bad == []


LAYER = """
func.func @main(%x: tensor<{n}x{w}xf32>, %g: tensor<{w}xf32>, %b: tensor<{w}xf32>) -> (tensor<{n}x{w}xf32>, tensor<{n}x{w}xf32>, tensor<{n}xf32>) {{
  %zero = stablehlo.constant dense<0.0> : tensor<f32>
  %ninf = stablehlo.constant dense<0xFF800000> : tensor<f32>
  %width = stablehlo.constant dense<{w}.0> : tensor<{n}x1xf32>
  %eps = stablehlo.constant dense<1.0e-5> : tensor<f32>
  %m = stablehlo.reduce(%x init: %ninf) applies stablehlo.maximum across dimensions = [1] : (tensor<{n}x{w}xf32>, tensor<f32>) -> tensor<{n}xf32>
  %mb = stablehlo.broadcast_in_dim %m, dims = [0] : (tensor<{n}xf32>) -> tensor<{n}x{w}xf32>
  %d = stablehlo.subtract %x, %mb : tensor<{n}x{w}xf32>
  %e = stablehlo.exponential %d : tensor<{n}x{w}xf32>
  %s = stablehlo.reduce(%e init: %zero) applies stablehlo.add across dimensions = [1] : (tensor<{n}x{w}xf32>, tensor<f32>) -> tensor<{n}xf32>
  %sb = stablehlo.broadcast_in_dim %s, dims = [0] : (tensor<{n}xf32>) -> tensor<{n}x{w}xf32>
  %softmax = stablehlo.divide %e, %sb : tensor<{n}x{w}xf32>
  %mean = stablehlo.reduce(%x init: %zero) applies stablehlo.add across dimensions = [1] : (tensor<{n}x{w}xf32>, tensor<f32>) -> tensor<{n}xf32>
  %mean1 = stablehlo.broadcast_in_dim %mean, dims = [0] : (tensor<{n}xf32>) -> tensor<{n}x1xf32>
  %mu = stablehlo.divide %mean1, %width : tensor<{n}x1xf32>
  %mub = stablehlo.broadcast_in_dim %mu, dims = [0, 1] : (tensor<{n}x1xf32>) -> tensor<{n}x{w}xf32>
  %c = stablehlo.subtract %x, %mub : tensor<{n}x{w}xf32>
  %sq = stablehlo.multiply %c, %c : tensor<{n}x{w}xf32>
  %var = stablehlo.reduce(%sq init: %zero) applies stablehlo.add across dimensions = [1] : (tensor<{n}x{w}xf32>, tensor<f32>) -> tensor<{n}xf32>
  %var1 = stablehlo.broadcast_in_dim %var, dims = [0] : (tensor<{n}xf32>) -> tensor<{n}x1xf32>
  %v = stablehlo.divide %var1, %width : tensor<{n}x1xf32>
  %epsb = stablehlo.broadcast_in_dim %eps, dims = [] : (tensor<f32>) -> tensor<{n}x1xf32>
  %ve = stablehlo.add %v, %epsb : tensor<{n}x1xf32>
  %r = stablehlo.rsqrt %ve : tensor<{n}x1xf32>
  %rb = stablehlo.broadcast_in_dim %r, dims = [0, 1] : (tensor<{n}x1xf32>) -> tensor<{n}x{w}xf32>
  %nrm = stablehlo.multiply %c, %rb : tensor<{n}x{w}xf32>
  %gb = stablehlo.broadcast_in_dim %g, dims = [1] : (tensor<{w}xf32>) -> tensor<{n}x{w}xf32>
  %scaled = stablehlo.multiply %nrm, %gb : tensor<{n}x{w}xf32>
  %bb = stablehlo.broadcast_in_dim %b, dims = [1] : (tensor<{w}xf32>) -> tensor<{n}x{w}xf32>
  %y = stablehlo.add %scaled, %bb : tensor<{n}x{w}xf32>
  %t = stablehlo.tanh %y : tensor<{n}x{w}xf32>
  %l = stablehlo.logistic %t : tensor<{n}x{w}xf32>
  %out = stablehlo.clamp %zero, %l, %softmax : (tensor<f32>, tensor<{n}x{w}xf32>, tensor<{n}x{w}xf32>) -> tensor<{n}x{w}xf32>
  return %out, %softmax, %var : tensor<{n}x{w}xf32>, tensor<{n}x{w}xf32>, tensor<{n}xf32>
}}"""


def _hostile_rows(n: int, w: int, seed: int) -> list[np.ndarray]:
    """Normal rows, and rows of NaN, +-inf, signed zeros, huge and tiny values."""
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal((n, w)) * 10.0 ** rng.integers(-3, 3, (n, 1))).astype(np.float32)
    x[0, 5] = np.nan
    x[1, :] = np.inf
    x[2, 7] = -np.inf
    x[3, :] = -0.0
    x[4, :] = 0.0
    x[4, 1] = -0.0
    x[5, :] = 3e38
    x[6, :] = 1e-42
    g = rng.standard_normal(w).astype(np.float32)
    g[3] = -0.0
    return [x, g, rng.standard_normal(w).astype(np.float32)]


@pytest.mark.parametrize("block", [rp.BLOCK_BYTES, 1], ids=["blocks", "row-by-row"])
@pytest.mark.parametrize("cores", [1, 2])
def test_softmax_and_layernorm_rows_give_the_numpy_segments_bits(machine, monkeypatch, block, cores):
    monkeypatch.setattr(helper_thread, "CORES", cores)
    monkeypatch.setattr(rp, "BLOCK_BYTES", block)
    n, w = 1001, 300  # rows split unevenly between the threads and into blocks
    program = eager_program(LAYER.format(n=n, w=w))
    (segment,) = _segments(program)
    with_machine, with_numpy, runs = _both_ways(program, _hostile_rows(n, w, 3))
    assert runs == 1
    assert_same_bits(with_machine, with_numpy, "row machine")
    assert isinstance(segment.machine, bool)  # reset by _both_ways; it was planned:
    program = eager_program(LAYER.format(n=n, w=w))
    program.run(_hostile_rows(n, w, 4))
    (segment,) = _segments(program)
    assert isinstance(segment.machine, rp.RowProgram)
    # Every op of the segment is an instruction, and the values read after it are its outputs
    # written in place; the rest stay in the threads' buffers of one block.
    kinds = [s.kind for s in segment.machine.slots]
    assert kinds.count("out") == 3 and kinds.count("in") == 2  # x, and the (n, 1) constant
    assert {rp.GATHER, rp.REDUCE["add"], rp.REDUCE["max"]} <= set(segment.machine.opcodes)


def test_temporaries_share_buffers_and_a_block_fits_the_first_level_cache(machine):
    """Values that are never read at the same time share a thread's buffer, no instruction
    writes the buffer it reads (its loop would not be vectorised), and a block's rows of all
    the buffers fit in :data:`~.row_programs.BLOCK_BYTES`."""
    n, w = 1001, 300
    program = eager_program(LAYER.format(n=n, w=w))
    program.run(_hostile_rows(n, w, 4))
    program.run(_hostile_rows(n, w, 4))
    (segment,) = _segments(program)
    machine = segment.machine
    assert isinstance(machine, rp.RowProgram)
    code = machine.code.reshape(machine.ninstr, rp.WORDS)
    written = [int(d) for d in code[:, 1]]
    tmp = [i for i, s in enumerate(machine.slots) if s.kind == "tmp"]
    wide = [i for i in tmp if machine.slots[i].count == w]
    # 12 of the 21 instructions write a temporary row of w elements; 3 buffers hold them all.
    assert sum(machine.slots[d].kind == "tmp" and machine.slots[d].count == w for d in written) >= 10
    assert len(wide) <= 3
    for opcode, d, a, b, c, extra in code.tolist():
        assert d not in (a, b, c) and (opcode != rp.GATHER or d != extra)
    row_bytes = 4 * sum(s.count for s in machine.slots if s.kind != "map")
    assert machine.block == max(1, rp.BLOCK_BYTES // row_bytes)
    assert machine.block * row_bytes <= rp.BLOCK_BYTES


def test_every_corpus_program_gives_the_same_bits_with_the_row_machine(machine, monkeypatch):
    """With blocks of 8 rows and segments from 64 elements, most corpus programs form row
    segments; the machine runs those it can, with numpy's bits."""
    monkeypatch.setattr(eager, "ROW_BLOCK_ELEMENTS", 8)
    monkeypatch.setattr(eager, "ROW_SEGMENT_MIN", 64)
    monkeypatch.setattr(rp, "BLOCK_BYTES", 512)
    ran = 0
    for entry in public_programs():
        eager_tier = eager_program(program_text("public", entry))
        if not _segments(eager_tier):
            continue
        with_machine, with_numpy, runs = _both_ways(eager_tier, public_arrays(entry)[0])
        assert_same_bits(with_machine, with_numpy, entry["name"])
        ran += runs
    assert ran >= 3


@pytest.mark.parametrize("case, text", [
    ("f64 values", """func.func @main(%x: tensor<512x512xf64>) -> tensor<512x512xf64> {
  %e = stablehlo.exponential %x : tensor<512x512xf64>
  %a = stablehlo.abs %e : tensor<512x512xf64>
  return %a : tensor<512x512xf64>
}"""),
    ("an op it has no opcode for", """func.func @main(%x: tensor<512x512xf32>) -> tensor<512x512xf32> {
  %e = stablehlo.sine %x : tensor<512x512xf32>
  %a = stablehlo.abs %e : tensor<512x512xf32>
  return %a : tensor<512x512xf32>
}"""),
    ("sums of 20 lanes", """func.func @main(%x: tensor<16384x20xf32>) -> tensor<16384xf32> {
  %z = stablehlo.constant dense<0.0> : tensor<f32>
  %e = stablehlo.exponential %x : tensor<16384x20xf32>
  %s = stablehlo.reduce(%e init: %z) applies stablehlo.add across dimensions = [1] : (tensor<16384x20xf32>, tensor<f32>) -> tensor<16384xf32>
  return %s : tensor<16384xf32>
}"""),
    ("a reduction keeping a dimension", """func.func @main(%x: tensor<512x8x64xf32>) -> tensor<512x8xf32> {
  %z = stablehlo.constant dense<0.0> : tensor<f32>
  %e = stablehlo.exponential %x : tensor<512x8x64xf32>
  %s = stablehlo.reduce(%e init: %z) applies stablehlo.add across dimensions = [2] : (tensor<512x8x64xf32>, tensor<f32>) -> tensor<512x8xf32>
  return %s : tensor<512x8xf32>
}"""),
], ids=lambda v: v if " " in v and "\n" not in v else "")
def test_what_the_machine_leaves_to_numpy(machine, case, text):
    program = eager_program(text)
    (segment,) = _segments(program)
    rng = np.random.default_rng(5)
    args = [rng.standard_normal(a.tensor_type.shape).astype(a.tensor_type.element_type.replace("f", "float"))
            for a in program.fn.args]
    program.run(args)
    assert segment.machine is False, case


def test_a_middle_broadcast_and_a_whole_one(machine, monkeypatch):
    """Broadcasts that repeat elements within a row (an index map), and operands taken whole
    along the rows (one block made once)."""
    monkeypatch.setattr(rp, "BLOCK_BYTES", 2048)
    monkeypatch.setattr(eager, "ROW_BLOCK_ELEMENTS", 300)
    monkeypatch.setattr(eager, "ROW_SEGMENT_MIN", 64)
    text = """func.func @main(%x: tensor<777x6xf32>, %y: tensor<777x6x5xf32>, %c: tensor<6x5xf32>) -> tensor<777x6x5xf32> {
  %xb = stablehlo.broadcast_in_dim %x, dims = [0, 1] : (tensor<777x6xf32>) -> tensor<777x6x5xf32>
  %cb = stablehlo.broadcast_in_dim %c, dims = [1, 2] : (tensor<6x5xf32>) -> tensor<777x6x5xf32>
  %t = stablehlo.transpose %c, dims = [1, 0] : (tensor<6x5xf32>) -> tensor<5x6xf32>
  %tb = stablehlo.broadcast_in_dim %t, dims = [2, 1] : (tensor<5x6xf32>) -> tensor<777x6x5xf32>
  %s = stablehlo.multiply %xb, %y : tensor<777x6x5xf32>
  %u = stablehlo.add %s, %cb : tensor<777x6x5xf32>
  %v = stablehlo.subtract %u, %tb : tensor<777x6x5xf32>
  return %v : tensor<777x6x5xf32>
}"""
    program = eager_program(text)
    rng = np.random.default_rng(9)
    args = [rng.standard_normal(s).astype(np.float32) for s in ((777, 6), (777, 6, 5), (6, 5))]
    with_machine, with_numpy, runs = _both_ways(program, args)
    assert runs == 1
    assert_same_bits(with_machine, with_numpy, "broadcasts")
    np.testing.assert_array_equal(with_machine[0], args[0][:, :, None] * args[1] + args[2] - args[2])


def test_a_formula_that_is_not_the_machines_is_not_an_instruction(machine, monkeypatch):
    table = list(machine.kernels.table)
    table[[e[0] for e in rp.ELEMENTWISE].index("stablehlo.exponential")] = "another formula"
    monkeypatch.setattr(machine.kernels, "table", table)
    n, w = 1001, 300
    program = eager_program(LAYER.format(n=n, w=w))
    program.run(_hostile_rows(n, w, 1))
    (segment,) = _segments(program)
    assert segment.machine is False


def test_an_opcode_that_disagrees_with_numpy_is_never_used(machine, monkeypatch):
    monkeypatch.setattr(rp, "check", lambda kernels, opcode, *a, **k: opcode != rp.REDUCE["add"])
    n, w = 1001, 300
    program = eager_program(LAYER.format(n=n, w=w))
    args = _hostile_rows(n, w, 2)
    with pytest.warns(RuntimeWarning, match=f"opcode {rp.REDUCE['add']} disagrees"):
        got = program.run(args)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # said once
        program.run(args)
    for segment in _segments(program):
        segment.machine = False
    assert_same_bits(got, program.run(args), "numpy segments")


def test_a_file_whose_row_machine_has_no_table_is_not_loaded(kernel_file, tmp_path):
    data = kernel_file.read_bytes()
    head, _, code = data.partition(b"\n")
    import json

    header = json.loads(head)
    for e in header["entries"]:
        e.pop("table", None)
    path = tmp_path / kernel_file.name
    path.write_bytes(json.dumps(header).encode() + b"\n" + code)
    with pytest.raises(mk.MachineKernelError, match="no formula table"):
        mk.Kernels(path, mk.machine_key())


CHAIN = """
func.func @main(%x: tensor<{n}x{w}xf32>, %y: tensor<{n}x{w}xf32>, %p: tensor<{n}x{w}xi1>) -> (tensor<{n}x{w}xf32>, tensor<{n}x{w}xf32>) {{
  %q = stablehlo.constant dense<0.25> : tensor<f32>
  %k = stablehlo.constant dense<1.7> : tensor<f32>
  %qb = stablehlo.broadcast_in_dim %q, dims = [] : (tensor<f32>) -> tensor<{n}x{w}xf32>
  %kb = stablehlo.broadcast_in_dim %k, dims = [] : (tensor<f32>) -> tensor<{n}x{w}xf32>
  %a = stablehlo.abs %x : tensor<{n}x{w}xf32>
  %pw = stablehlo.power %a, %kb : tensor<{n}x{w}xf32>
  %l = stablehlo.log %a : tensor<{n}x{w}xf32>
  %c0 = stablehlo.compare EQ, %y, %qb, FLOAT : (tensor<{n}x{w}xf32>, tensor<{n}x{w}xf32>) -> tensor<{n}x{w}xi1>
  %c1 = stablehlo.compare NE, %y, %qb, FLOAT : (tensor<{n}x{w}xf32>, tensor<{n}x{w}xf32>) -> tensor<{n}x{w}xi1>
  %c2 = stablehlo.compare GE, %y, %qb, FLOAT : (tensor<{n}x{w}xf32>, tensor<{n}x{w}xf32>) -> tensor<{n}x{w}xi1>
  %c3 = stablehlo.compare GT, %y, %qb, FLOAT : (tensor<{n}x{w}xf32>, tensor<{n}x{w}xf32>) -> tensor<{n}x{w}xi1>
  %c4 = stablehlo.compare LE, %x, %y, FLOAT : (tensor<{n}x{w}xf32>, tensor<{n}x{w}xf32>) -> tensor<{n}x{w}xi1>
  %c5 = stablehlo.compare LT, %x, %y, FLOAT : (tensor<{n}x{w}xf32>, tensor<{n}x{w}xf32>) -> tensor<{n}x{w}xi1>
  %s0 = stablehlo.select %c0, %pw, %l : tensor<{n}x{w}xi1>, tensor<{n}x{w}xf32>
  %s1 = stablehlo.select %c1, %s0, %x : tensor<{n}x{w}xi1>, tensor<{n}x{w}xf32>
  %s2 = stablehlo.select %c2, %s1, %y : tensor<{n}x{w}xi1>, tensor<{n}x{w}xf32>
  %s3 = stablehlo.select %c3, %s2, %l : tensor<{n}x{w}xi1>, tensor<{n}x{w}xf32>
  %s4 = stablehlo.select %c4, %s3, %pw : tensor<{n}x{w}xi1>, tensor<{n}x{w}xf32>
  %s5 = stablehlo.select %c5, %s4, %a : tensor<{n}x{w}xi1>, tensor<{n}x{w}xf32>
  %s6 = stablehlo.select %p, %s5, %y : tensor<{n}x{w}xi1>, tensor<{n}x{w}xf32>
  %m = stablehlo.maximum %s6, %x : tensor<{n}x{w}xf32>
  %n2 = stablehlo.minimum %m, %y : tensor<{n}x{w}xf32>
  %neg = stablehlo.negate %n2 : tensor<{n}x{w}xf32>
  %sq = stablehlo.sqrt %a : tensor<{n}x{w}xf32>
  %t = stablehlo.multiply %neg, %sq : tensor<{n}x{w}xf32>
  return %t, %s6 : tensor<{n}x{w}xf32>, tensor<{n}x{w}xf32>
}}"""


@pytest.mark.parametrize("cores", [1, 2])
def test_compares_selects_and_powers_give_the_numpy_segments_bits(machine, cores, monkeypatch):
    """Booleans live in the machine as 0 and 1 between a compare and a select; a boolean operand
    comes in as one; every direction, with NaN, infinities, signed zeros and equal values."""
    monkeypatch.setattr(helper_thread, "CORES", cores)
    n, w = 700, 400
    rng = np.random.default_rng(12)
    x = (rng.standard_normal((n, w)) * 3).astype(np.float32)
    y = (rng.standard_normal((n, w)) * 3).astype(np.float32)
    specials = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 0.25, 1.0, -1.0, 1e-40, 3e38], np.float32)
    x[:, :10], y[:, 10:20] = specials, specials
    y[::3, :] = 0.25  # equal to the compared constant
    y[1::7] = x[1::7]  # equal values for LE and LT
    p = rng.random((n, w)) < 0.5
    program = eager_program(CHAIN.format(n=n, w=w))
    (segment,) = _segments(program)
    with_machine, with_numpy, runs = _both_ways(program, [x, y, p])
    assert runs == 1
    assert_same_bits(with_machine, with_numpy, "compares and selects")


def test_a_boolean_kept_after_the_segment_leaves_it_to_numpy(machine):
    n, w = 1001, 300
    text = f"""func.func @main(%x: tensor<{n}x{w}xf32>, %y: tensor<{n}x{w}xf32>) -> (tensor<{n}x{w}xi1>, tensor<{n}x{w}xf32>) {{
  %c = stablehlo.compare GT, %x, %y, FLOAT : (tensor<{n}x{w}xf32>, tensor<{n}x{w}xf32>) -> tensor<{n}x{w}xi1>
  %s = stablehlo.select %c, %x, %y : tensor<{n}x{w}xi1>, tensor<{n}x{w}xf32>
  return %c, %s : tensor<{n}x{w}xi1>, tensor<{n}x{w}xf32>
}}"""
    program = eager_program(text)
    (segment,) = _segments(program)
    rng = np.random.default_rng(2)
    x, y = rng.standard_normal((2, n, w)).astype(np.float32)
    c, s = program.run([x, y])
    assert segment.machine is False
    assert c.dtype == np.bool_ and np.array_equal(c, x > y) and np.array_equal(s, np.where(x > y, x, y))


def test_a_boolean_mask_broadcast_within_rows(machine, monkeypatch):
    """An attention-style mask, (n, s) booleans broadcast to (n, h, s), and a transposing
    broadcast: the index map is made from the broadcast's dimensions, not through the
    result's element type (a boolean index map was all ones)."""
    monkeypatch.setattr(eager, "ROW_BLOCK_ELEMENTS", 64)
    monkeypatch.setattr(eager, "ROW_SEGMENT_MIN", 64)
    monkeypatch.setattr(rp, "BLOCK_BYTES", 1024)
    n, h, s = 257, 4, 40
    text = f"""func.func @main(%sc: tensor<{n}x{h}x{s}xf32>, %mask: tensor<{n}x{s}xi1>, %x: tensor<{n}x{h}x{s}xf32>) -> tensor<{n}x{s}x{h}xf32> {{
  %ninf = stablehlo.constant dense<-1.0e9> : tensor<f32>
  %mb = stablehlo.broadcast_in_dim %mask, dims = [0, 2] : (tensor<{n}x{s}xi1>) -> tensor<{n}x{h}x{s}xi1>
  %nb = stablehlo.broadcast_in_dim %ninf, dims = [] : (tensor<f32>) -> tensor<{n}x{h}x{s}xf32>
  %w = stablehlo.select %mb, %sc, %nb : tensor<{n}x{h}x{s}xi1>, tensor<{n}x{h}x{s}xf32>
  %e = stablehlo.exponential %w : tensor<{n}x{h}x{s}xf32>
  %f = stablehlo.add %e, %x : tensor<{n}x{h}x{s}xf32>
  %t = stablehlo.broadcast_in_dim %f, dims = [0, 2, 1] : (tensor<{n}x{h}x{s}xf32>) -> tensor<{n}x{s}x{h}xf32>
  %u = stablehlo.multiply %t, %t : tensor<{n}x{s}x{h}xf32>
  return %u : tensor<{n}x{s}x{h}xf32>
}}"""
    rng = np.random.default_rng(13)
    sc = rng.standard_normal((n, h, s)).astype(np.float32)
    mask = rng.random((n, s)) < 0.7
    x = rng.standard_normal((n, h, s)).astype(np.float32)
    program = eager_program(text)
    with_machine, with_numpy, runs = _both_ways(program, [sc, mask, x])
    assert runs == 1
    assert_same_bits(with_machine, with_numpy, "mask")
    want = (np.exp(np.where(mask[:, None, :], sc, np.float32(-1e9))) + x).transpose(0, 2, 1)
    np.testing.assert_allclose(with_machine[0], want * want, rtol=1e-5, atol=1e-5)  # (vecmath's exp, not numpy's)


def test_a_reduction_over_no_dimensions_is_left_to_numpy(machine, monkeypatch):
    """reduce with dimensions = [] copies its operand: it has no rows to reduce (the machine
    read past each row's end with it)."""
    monkeypatch.setattr(eager, "ROW_BLOCK_ELEMENTS", 8)
    monkeypatch.setattr(eager, "ROW_SEGMENT_MIN", 64)
    n = 4096
    text = f"""func.func @main(%x: tensor<{n}xf32>) -> tensor<{n}xf32> {{
  %ninf = stablehlo.constant dense<0xFF800000> : tensor<f32>
  %a = stablehlo.abs %x : tensor<{n}xf32>
  %e = stablehlo.negate %a : tensor<{n}xf32>
  %m = stablehlo.reduce(%e init: %ninf) applies stablehlo.maximum across dimensions = [] : (tensor<{n}xf32>, tensor<f32>) -> tensor<{n}xf32>
  return %m : tensor<{n}xf32>
}}"""
    x = np.random.default_rng(14).standard_normal(n).astype(np.float32)
    program = eager_program(text)
    (segment,) = _segments(program)
    (got,) = program.run([x])
    assert segment.machine is False
    np.testing.assert_array_equal(got, -np.abs(x))


def test_a_segment_the_row_machine_runs_is_planned_for_it_and_gets_no_numpy_steps(machine, monkeypatch):
    """With the row machine loaded, a float32 segment is planned for it with the program, and
    none of its numpy steps are made; should numpy run it after all (here: told the machine
    does not), they are made at that run, with the same bits. Where the machine is not loaded
    yet, or never runs the segment (float64), the steps are made with the program, so that an
    op the eager tier cannot run declines the program at compile time; and a step that cannot
    be made at run time sends the run to the compiled code."""
    n, w = 1001, 300
    program = eager_program(LAYER.format(n=n, w=w))
    (segment,) = _segments(program)
    assert isinstance(segment.machine, rp.RowProgram) and segment._steps is None
    args = _hostile_rows(n, w, 5)
    with_machine, with_numpy, runs = _both_ways(program, args)  # the second run is numpy's
    assert runs == 1 and segment._steps is not None and len(segment._steps) == len(segment.ops)
    assert_same_bits(with_machine, with_numpy, "row machine")

    wide = eager_program(LAYER.format(n=n, w=w).replace("f32", "f64"))
    (segment,) = _segments(wide)
    assert segment.machine is None and segment._steps is not None

    with monkeypatch.context() as m:
        m.setattr(mk, "row_machine_table", lambda wait=False: None)  # still loading
        (segment,) = _segments(eager_program(LAYER.format(n=n, w=w)))
        assert segment.machine is None and segment._steps is not None

    program = eager_program(LAYER.format(n=n, w=w))
    (segment,) = _segments(program)
    segment.machine = False

    def unsupported(op):
        raise eager.EagerUnsupported(f"{op.name}: no step")

    monkeypatch.setattr(program, "_step", unsupported)
    with pytest.raises(eager.NeedsCompiled, match="no step"):
        program.run(args)
