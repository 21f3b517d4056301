"""Machine kernels: vecmath's float32 functions compiled once per machine, loaded without numba,
giving the numpy twins' bits; a bad file is never loaded, and the build happens once, in the
background, and only when a file of this machine's key is missing."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import pytest

from pjrt_hub.backends.numba_cpu import machine_kernels as mk
from pjrt_hub.backends.numba_cpu.eager_math import NUMPY_TWINS
from pjrt_hub.backends.numba_cpu.lanes import IDENTITY, reduce_lanes, row_twin

from .tier_helpers import MACHINE_NAMES, assert_same_bits, eager_program

NAMES = [n for n in MACHINE_NAMES if n in mk.FUNCTIONS or n in mk.REDUCTIONS]
ROWS = [n for n in NAMES if n in mk.REDUCTIONS]


def _random_floats(n: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 1 << 32, n, dtype=np.uint64).astype(np.uint32).view(np.float32)


def _same(a: np.ndarray, b: np.ndarray) -> bool:
    return bool(np.array_equal(mk._bits(a), mk._bits(b)))


def _same_any(a: np.ndarray, b: np.ndarray) -> bool:
    return a.dtype == b.dtype and a.shape == b.shape and _same(a, b)


@pytest.mark.parametrize("name", [n for n in NAMES if n not in ROWS])
def test_each_kernel_gives_its_numpy_twins_bits(kernel_file, name):
    kernels = mk.Kernels(kernel_file, mk.machine_key())
    arity = mk.FUNCTIONS[name]
    operands = mk._probe(arity, np.random.default_rng(5), 1 << 15)
    out = np.empty(operands[0].shape, np.float32)
    assert kernels.call(name, operands, out)
    with np.errstate(all="ignore"):
        assert _same(out, NUMPY_TWINS[name](*operands))


@pytest.mark.parametrize("name", ROWS)
def test_each_row_reduction_gives_the_lane_order_bits(kernel_file, name):
    """Rows of specials and random bit patterns, innermost rows of several widths (the build's
    own check), and long rows of finite values whose sums the order changes: the bits of
    :func:`.lanes.reduce_lanes` (and of any order, for max)."""
    kernels = mk.Kernels(kernel_file, mk.machine_key())
    op, element = mk.REDUCTIONS[name]
    twin = row_twin(op)
    assert mk._rows_agree(kernels, name, twin, np.random.default_rng(6), 1 << 12)
    dtype = np.float32 if element == "f32" else np.float64
    rng = np.random.default_rng(7)
    k = mk.rows_lanes(name)
    for rows, width, per in ((3, 1000, 1000), (5, 100, 700), (1, k, 64 * k), (40, 2 * k + 1, 2 * k + 1)):
        x = (rng.standard_normal((rows, per)) * (1 if op != "mul" else 0.01) + (op == "mul")).astype(dtype)
        x[0, :7] = [0.0, -0.0, 1e-30, -1e30, 3.0, -3.0, 0.5]
        got = mk._reduce(kernels, name, x, width, k)
        assert got is not None and _same_any(got, twin(x, width))
        if op in ("add", "mul"):  # the order is the lanes': a sequential sum differs somewhere
            want = reduce_lanes(x.reshape(rows, per // width, width), 2, op, dtype(IDENTITY[op]))
            assert _same_any(got, want)


def test_row_reductions_stay_with_numpy_where_the_kernel_does_not_fit(machine):
    x = np.ones((64, 1000), np.float32)
    twin = row_twin("add")
    assert mk.reduce_rows("lanes_add_f32", x, 1000, 64, twin) is not None
    assert mk.reduce_rows("lanes_add_f32", x[:, :40], 40, 64, twin) is None     # not C-contiguous
    assert mk.reduce_rows("lanes_add_f32", x[:, :40].copy(), 40, 64, twin) is None  # too few
    # Rows of 33 to 64 elements have 64 lanes too (the others at the identity); narrower ones
    # fewer, in another order.
    assert mk.reduce_rows("lanes_add_f32", x.reshape(-1, 50), 50, 64, twin) is not None
    assert mk.reduce_rows("lanes_add_f32", np.ones((1000, 20), np.float32), 20, 32, twin) is None
    assert mk.reduce_rows("lanes_add_f32", x.astype(np.float64), 1000, 64, twin) is None  # not its type


def test_the_eager_tier_reduces_rows_with_kernels_and_the_same_bits(machine, monkeypatch):
    text = """
func.func @main(%x: tensor<256x1000xf32>, %y: tensor<64x10x100xf32>, %z: tensor<300x20xf32>, %w: tensor<128x256xf64>)
    -> (tensor<256xf32>, tensor<64xf32>, tensor<256xf32>, tensor<300xf32>, tensor<128xf64>, tensor<256xf32>) {
  %c0 = stablehlo.constant dense<0.0> : tensor<f32>
  %c1 = stablehlo.constant dense<2.5> : tensor<f32>
  %ninf = stablehlo.constant dense<0xFF800000> : tensor<f32>
  %d0 = stablehlo.constant dense<0.0> : tensor<f64>
  %s = stablehlo.reduce(%x init: %c1) applies stablehlo.add across dimensions = [1] : (tensor<256x1000xf32>, tensor<f32>) -> tensor<256xf32>
  %t = stablehlo.reduce(%y init: %c0) applies stablehlo.add across dimensions = [1, 2] : (tensor<64x10x100xf32>, tensor<f32>) -> tensor<64xf32>
  %m = stablehlo.reduce(%x init: %ninf) applies stablehlo.maximum across dimensions = [1] : (tensor<256x1000xf32>, tensor<f32>) -> tensor<256xf32>
  %n = stablehlo.reduce(%z init: %c0) applies stablehlo.add across dimensions = [1] : (tensor<300x20xf32>, tensor<f32>) -> tensor<300xf32>
  %u = stablehlo.reduce(%w init: %d0) applies stablehlo.add across dimensions = [1] : (tensor<128x256xf64>, tensor<f64>) -> tensor<128xf64>
  %p = stablehlo.reduce(%x init: %c1) applies stablehlo.minimum across dimensions = [1] : (tensor<256x1000xf32>, tensor<f32>) -> tensor<256xf32>
  return %s, %t, %m, %n, %u, %p : tensor<256xf32>, tensor<64xf32>, tensor<256xf32>, tensor<300xf32>, tensor<128xf64>, tensor<256xf32>
}"""
    rng = np.random.default_rng(8)
    x = (rng.standard_normal((256, 1000)) * 10.0 ** rng.integers(-5, 5, (256, 1))).astype(np.float32)
    x[0, 3], x[1, 5], x[2, :] = np.nan, np.inf, -0.0
    x[3, :], x[3, 9] = -1.0, 0.0
    args = [x, rng.standard_normal((64, 10, 100)).astype(np.float32), rng.standard_normal((300, 20)).astype(np.float32),
            rng.standard_normal((128, 256))]
    program = eager_program(text)
    calls: list[tuple[str, tuple[int, ...]]] = []
    real = mk.Kernels.reduce
    monkeypatch.setattr(mk.Kernels, "reduce",
                        lambda self, name, x, *a: calls.append((name, x.shape)) or real(self, name, x, *a))
    with_kernels = program.run(args)
    # Not lanes_add_f64 (not in this file), not the 20-wide rows (fewer lanes), not min (likewise);
    # the others' first use checks them on special values.
    program_calls = {c for c in calls if c[1][0] in (64, 256)}
    assert program_calls == {("lanes_add_f32", (256, 1000)), ("lanes_add_f32", (64, 1000)),
                             ("lanes_max_f32", (256, 1000))}
    monkeypatch.setenv("PJRT_HUB_MACHINE_KERNELS", "0")
    monkeypatch.setattr(mk, "_STATE", mk._State())
    calls.clear()
    assert_same_bits(with_kernels, program.run(args), "row reductions")
    assert calls == []


def test_large_broadcast_and_strided_operands_through_apply(machine):
    twin = NUMPY_TWINS["pow_f32"]
    x = np.abs(_random_floats(2 * mk.SPLIT_ELEMENTS + 3, 1)).reshape(-1, 1)  # odd: halves differ
    y = np.float32(-1.5)
    got = mk.apply("pow_f32", [x, y], twin)
    assert got is not None and got.shape == x.shape
    with np.errstate(all="ignore"):
        assert _same(got, twin(x, y))
    strided = _random_floats(2 * mk.MIN_ELEMENTS, 2)[::2]
    got = mk.apply("exp_f32", [strided], NUMPY_TWINS["exp_f32"])
    with np.errstate(all="ignore"):
        assert got is not None and _same(got, NUMPY_TWINS["exp_f32"](strided))


@pytest.mark.parametrize("operands", [
    [np.ones(16, np.float32)],                    # too few elements to pay for a call
    [np.ones(1 << 14, np.float64)],               # not float32
    [np.ones(1 << 14, np.float32), 2.0],          # a Python float: numpy's types decide
    [np.ones((), np.float32)],                    # 0-d
], ids=["small", "float64", "python-float", "0-d"])
def test_what_the_numpy_twins_keep(machine, operands):
    name = "exp_f32" if len(operands) == 1 else "pow_f32"
    assert mk.apply(name, operands, NUMPY_TWINS[name]) is None


def test_the_eager_tier_gives_the_same_bits_with_and_without_kernels(machine, monkeypatch):
    n = mk.WAIT_ELEMENTS
    text = f"""
func.func @main(%x: tensor<{n}xf32>, %y: tensor<{n}xf32>) -> (tensor<{n}xf32>, tensor<{n}xf32>, tensor<{n}xf32>) {{
  %e = stablehlo.exponential %x : tensor<{n}xf32>
  %t = stablehlo.tanh %e : tensor<{n}xf32>
  %a = stablehlo.abs %y : tensor<{n}xf32>
  %p = stablehlo.power %a, %x : tensor<{n}xf32>
  %s = stablehlo.sine %y : tensor<{n}xf32>
  %r = stablehlo.remainder %x, %y : tensor<{n}xf32>
  %m = stablehlo.multiply %p, %s : tensor<{n}xf32>
  return %t, %m, %r : tensor<{n}xf32>, tensor<{n}xf32>, tensor<{n}xf32>
}}"""
    x = _random_floats(n, 3)
    x[:66] = mk._specials()
    y = (np.random.default_rng(4).standard_normal(n) * 50).astype(np.float32)
    program = eager_program(text)
    calls: list[str] = []
    real_call = mk.Kernels.call
    monkeypatch.setattr(mk.Kernels, "call", lambda self, name, ops, out: calls.append(name) or real_call(self, name, ops, out))
    with_kernels = program.run([x, y])
    assert sorted(set(calls)) == ["exp_f32", "fmod_f32", "pow_f32", "sin_f32", "tanh_f32"]
    monkeypatch.setenv("PJRT_HUB_MACHINE_KERNELS", "0")
    monkeypatch.setattr(mk, "_STATE", mk._State())  # read when a process starts
    calls.clear()
    assert_same_bits(with_kernels, program.run([x, y]), "machine kernels")
    assert calls == []


def test_loading_needs_neither_numba_nor_a_compile(kernel_file):
    script = (
        "import sys\n"
        "import numpy as np\n"
        "from pjrt_hub.backends.numba_cpu import machine_kernels as mk\n"
        "from pjrt_hub.backends.numba_cpu.eager_math import NUMPY_TWINS\n"
        "mk.preload()\n"
        "x = np.linspace(-90, 90, 1 << 19, dtype=np.float32)\n"
        "got = mk.apply('exp_f32', [x], NUMPY_TWINS['exp_f32'])\n"
        "assert got is not None, 'not loaded'\n"
        "assert np.array_equal(got, NUMPY_TWINS['exp_f32'](x))\n"
        "assert 'numba' not in sys.modules, 'numba was imported'\n"
        "print('ok')\n")
    env = dict(os.environ, PJRT_HUB_MACHINE_KERNELS="1", PJRT_HUB_MACHINE_CACHE=str(kernel_file.parent))
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr


def _flip_code_byte(data: bytes) -> bytes:
    at = len(data) - 100
    return data[:at] + bytes([data[at] ^ 0x40]) + data[at + 1:]


@pytest.mark.parametrize("damage", [
    _flip_code_byte,
    lambda data: data[: len(data) // 2],
    lambda data: b"\x00garbage\n" + data,
    lambda data: data.replace(b'"key": "', b'"key": "0', 1),
], ids=["flipped-byte", "truncated", "not-a-kernel-file", "other-key"])
def test_a_damaged_file_is_never_loaded_and_is_removed_for_a_rebuild(kernel_file, tmp_path, monkeypatch, damage):
    path = tmp_path / kernel_file.name
    path.write_bytes(damage(kernel_file.read_bytes()))
    monkeypatch.setenv("PJRT_HUB_MACHINE_KERNELS", "1")
    monkeypatch.setenv("PJRT_HUB_MACHINE_CACHE", str(tmp_path))
    state = mk._State()
    monkeypatch.setattr(mk, "_STATE", state)
    spawned: list[bool] = []
    monkeypatch.setattr(mk, "_spawn_builder", lambda: spawned.append(True))
    with pytest.warns(RuntimeWarning, match="ignoring the machine kernel file"):
        mk.preload()
        assert state.loaded.wait(30)
    assert state.kernels is None and not path.exists()
    x = np.linspace(-5, 5, mk.BUILD_ELEMENTS, dtype=np.float32)
    assert mk.apply("exp_f32", [x], NUMPY_TWINS["exp_f32"]) is None  # the twin answers...
    assert spawned == [True]  # ...and a builder makes a good file


def test_a_kernel_that_disagrees_with_its_twin_is_never_used(machine):
    x = np.linspace(-5, 5, mk.MIN_ELEMENTS, dtype=np.float32)

    def wrong(v):
        return NUMPY_TWINS["exp_f32"](v) * np.float32(1.0000001)

    with pytest.warns(RuntimeWarning, match="exp_f32 disagrees"):
        assert mk.apply("exp_f32", [x], wrong) is None
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # said once
        assert mk.apply("exp_f32", [x], wrong) is None


def test_the_build_refuses_a_kernel_that_calls_outside_code(monkeypatch):
    monkeypatch.setitem(mk.FUNCTIONS, "erf_inv_f", 1)  # Newton on libm's erf
    with pytest.raises(mk.MachineKernelError, match="erf_inv_f calls .*erf"):
        mk._compile("erf_inv_f")


def test_a_missing_file_starts_one_detached_builder_that_publishes_it(tmp_path, monkeypatch):
    monkeypatch.setenv("PJRT_HUB_MACHINE_KERNELS", "1")
    monkeypatch.setenv("PJRT_HUB_MACHINE_CACHE", str(tmp_path))
    state = mk._State()
    monkeypatch.setattr(mk, "_STATE", state)
    spawned: list[bool] = []
    real_spawn = mk._spawn_builder
    monkeypatch.setattr(mk, "_spawn_builder", lambda: spawned.append(True) or real_spawn())
    x = np.linspace(-5, 5, mk.BUILD_ELEMENTS, dtype=np.float32)
    assert mk.apply("exp_f32", [x], NUMPY_TWINS["exp_f32"]) is None
    assert mk.apply("tanh_f32", [x], NUMPY_TWINS["tanh_f32"]) is None
    assert spawned == [True]  # one builder per process
    path = mk.file_path()
    deadline = time.monotonic() + 300
    while not path.is_file() and time.monotonic() < deadline:
        assert not path.with_suffix(".failed").exists(), path.with_suffix(".failed").read_text()
        time.sleep(0.2)
    assert path.is_file(), "the builder did not publish the kernels"
    time.sleep(0.5)
    assert not path.with_suffix(".lock").exists() and not list(tmp_path.glob("*.tmp"))
    fresh = mk._State()
    monkeypatch.setattr(mk, "_STATE", fresh)
    mk.preload()
    assert fresh.loaded.wait(30)
    got = mk.apply("tanh_f32", [x], NUMPY_TWINS["tanh_f32"])
    assert got is not None and _same(got, NUMPY_TWINS["tanh_f32"](x))
    assert sorted(fresh.kernels.functions) == sorted([*mk.FUNCTIONS, *mk.REDUCTIONS, mk.ROW_MACHINE])


def test_no_builder_after_a_failed_build_or_while_another_runs(tmp_path, monkeypatch):
    monkeypatch.setenv("PJRT_HUB_MACHINE_KERNELS", "1")
    monkeypatch.setenv("PJRT_HUB_MACHINE_CACHE", str(tmp_path))
    spawned: list[bool] = []
    monkeypatch.setattr(mk, "_spawn_builder", lambda: spawned.append(True))
    path = mk.file_path()
    x = np.ones(mk.BUILD_ELEMENTS, np.float32)
    for marker in (".failed", ".lock"):
        path.with_suffix(marker).write_text("x")
        monkeypatch.setattr(mk, "_STATE", mk._State())
        assert mk.apply("exp_f32", [x], NUMPY_TWINS["exp_f32"]) is None
        path.with_suffix(marker).unlink()
    assert spawned == []
    old = time.time() - mk.STALE_LOCK_S - 60  # a builder that died long ago
    path.with_suffix(".lock").write_text("x")
    os.utime(path.with_suffix(".lock"), (old, old))
    monkeypatch.setattr(mk, "_STATE", mk._State())
    assert mk.apply("exp_f32", [x], NUMPY_TWINS["exp_f32"]) is None
    assert spawned == [True]


def test_the_builder_takes_the_lock_records_failures_and_respects_a_live_lock(tmp_path, monkeypatch):
    monkeypatch.setenv("PJRT_HUB_MACHINE_CACHE", str(tmp_path))
    monkeypatch.setattr(os, "nice", lambda n: 0)
    path = mk.file_path()
    built: list[Path] = []

    def fake_build(p: Path, names=None, *, check=True) -> None:
        assert path.with_suffix(".lock").is_file()
        built.append(p)
        raise mk.MachineKernelError("the check of the built kernels failed: exp_f32")

    monkeypatch.setattr(mk, "build", fake_build)
    path.with_suffix(".lock").write_text("123")  # a builder at work
    assert mk._build_here() == 0 and built == []
    old = time.time() - mk.STALE_LOCK_S - 60
    os.utime(path.with_suffix(".lock"), (old, old))
    assert mk._build_here() == 1 and built == [path]
    assert "exp_f32" in path.with_suffix(".failed").read_text()
    assert not path.with_suffix(".lock").exists()
    assert mk._build_here() == 0 and built == [path]  # failed once: not again


def test_a_failure_of_the_moment_is_not_recorded_and_a_folder_that_cannot_be_written_gets_no_builder(
        tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("PJRT_HUB_MACHINE_CACHE", str(tmp_path))
    monkeypatch.setattr(os, "nice", lambda n: 0)
    path = mk.file_path()

    def full_disk(p: Path, names=None, *, check=True) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(mk, "build", full_disk)
    assert mk._build_here() == 1
    assert "No space left" in capsys.readouterr().err
    assert not path.with_suffix(".failed").exists() and not path.with_suffix(".lock").exists()
    # A file where the folder should be: no builder can write there, so none is started.
    blocker = tmp_path / "file"
    blocker.write_text("x")
    monkeypatch.setenv("PJRT_HUB_MACHINE_CACHE", str(blocker / "machine"))
    monkeypatch.setenv("PJRT_HUB_MACHINE_KERNELS", "1")
    monkeypatch.setattr(mk, "_STATE", mk._State())
    spawned: list[bool] = []
    monkeypatch.setattr(mk, "_spawn_builder", lambda: spawned.append(True))
    assert mk.apply("exp_f32", [np.ones(mk.BUILD_ELEMENTS, np.float32)], NUMPY_TWINS["exp_f32"]) is None
    assert spawned == []
    assert mk._build_here() == 1 and "cannot build in" in capsys.readouterr().err


def test_a_builder_that_took_over_a_stale_lock_keeps_it(tmp_path, monkeypatch):
    """The lock is removed by the builder that holds it, never by one whose lock was taken
    over (it died, or seemed to)."""
    monkeypatch.setenv("PJRT_HUB_MACHINE_CACHE", str(tmp_path))
    lock = mk.file_path().with_suffix(".lock")
    assert mk._take_lock(lock) and lock.read_text() == str(os.getpid())
    assert not mk._take_lock(lock)  # held, and fresh
    lock.write_text("999999")  # another builder's now
    mk._release_lock(lock)
    assert lock.exists()


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_forked_child_gets_its_own_helper_threads_and_kernels(machine, monkeypatch):
    """A child forked after the kernels loaded and the helper threads started (the parent's
    threads are not in the child) still splits its work and finishes, with the same bits."""
    import signal

    from pjrt_hub.backends.cpu_runtime import helper_thread
    from pjrt_hub.backends.numba_cpu import eager

    monkeypatch.setattr(helper_thread, "CORES", 2)
    monkeypatch.setattr(eager, "ROW_BLOCK_ELEMENTS", 1 << 10)
    x = np.linspace(-80, 80, 2 * mk.SPLIT_ELEMENTS, dtype=np.float32).reshape(512, -1)
    twin = NUMPY_TWINS["exp_f32"]
    text = f"""func.func @main(%x: tensor<512x{x.shape[1]}xf32>) -> tensor<512x{x.shape[1]}xf32> {{
  %e = stablehlo.exponential %x : tensor<512x{x.shape[1]}xf32>
  %a = stablehlo.abs %e : tensor<512x{x.shape[1]}xf32>
  return %a : tensor<512x{x.shape[1]}xf32>
}}"""
    program = eager_program(text)
    assert isinstance(program._body.steps[0], eager._RowSegment)
    want_kernel, want_rows = mk.apply("exp_f32", [x], twin), program.run([x])[0]
    assert want_kernel is not None
    pid = os.fork()
    if pid == 0:  # the child: exits with 0 only if both finish with the parent's bits
        code = 2
        try:
            signal.alarm(60)
            got = mk.apply("exp_f32", [x], twin)
            rows = program.run([x])[0]
            code = 0 if got is not None and _same(got, want_kernel) and _same(rows, want_rows) else 1
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, status


def test_a_build_removes_old_files_of_other_keys_and_dead_temporaries(tmp_path, monkeypatch):
    monkeypatch.setenv("PJRT_HUB_MACHINE_CACHE", str(tmp_path))
    key = mk.machine_key()
    old = time.time() - mk.OTHER_KEYS_KEPT_S - 60
    stale = time.time() - mk.STALE_LOCK_S - 60
    files = {
        "vecmath-0123456789abcdef01234567.bin": (old, False),     # another key, old: removed
        "vecmath-0123456789abcdef01234567.failed": (old, False),
        "vecmath-fedcba9876543210fedcba98.bin": (time.time(), True),  # another key, recent: kept
        f"vecmath-{key}.bin.999.tmp": (stale, False),              # a dead builder's: removed
        f"vecmath-{key}.bin.998.tmp": (time.time(), True),         # a live builder's: kept
        f"vecmath-{key}.failed": (old, True),                      # this key's: kept
        "other.txt": (old, True),                                  # not ours: kept
    }
    for name, (mtime, _) in files.items():
        (tmp_path / name).write_text("x")
        os.utime(tmp_path / name, (mtime, mtime))
    mk._remove_stale_files(tmp_path, key)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(n for n, (_, kept) in files.items() if kept)
