"""exp's fused multiply-adds (.vecmath) and the eager tier's emulation of them (.eager_math):
the emulation rounds as one fma, even where rounding through float64 would round twice; and on a
target without FMA the compiled code and the eager tier both take the separate steps."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

numba = pytest.importorskip("numba")

from pjrt_hub.backends.numba_cpu import eager_math as em  # noqa: E402
from pjrt_hub.backends.numba_cpu import intrinsics as intr  # noqa: E402
from pjrt_hub.backends.numba_cpu import target  # noqa: E402
from pjrt_hub.backends.numba_cpu import vecmath as vm  # noqa: E402

ULP = np.float32(2.0 ** -23)


@numba.njit(error_model="numpy")
def _fma_all(a, b, c, out):
    for i in range(a.size):
        out[i] = intr.ffma(a[i], b[i], c[i])


@numba.njit(error_model="numpy")
def _ldexp_all(x, n, out):
    for i in range(x.size):
        out[i] = intr.fldexp(x[i], n[i])


def _compiled_fma(a, b, c):
    out = np.empty_like(a)
    _fma_all(a, b, c, out)
    return out


def test_a_product_rounded_onto_a_halfway_point_is_rounded_once():
    """1 + 2**-23 plus (2**-24 - 2**-70): float64 rounds the sum up to the halfway point between
    1 + 2**-23 and 1 + 2**-22, which then rounds to even (the wrong way); one fma rounds down."""
    one = np.float32(1.0)
    a = np.array([one + ULP], np.float32)
    b = np.array([np.float32(2.0 ** -24) * (one - ULP)], np.float32)
    c = np.array([one + ULP], np.float32)
    twice = (a.astype(np.float64) * b + c).astype(np.float32)
    assert twice[0] == one + 2 * ULP  # what double rounding gives: the test's case is a real one
    assert em._fma32(a, b, c)[0] == one + ULP
    assert _compiled_fma(a, b, c)[0] == one + ULP
    # the mirror image, below zero
    assert em._fma32(-a, b, -c)[0] == -(one + ULP)


def test_a_sum_below_the_normal_range_is_rounded_once():
    """A product of about 2**-150 * (1 - 2**-46) plus the largest denormal: float64 rounds the sum
    onto the smallest normal's halfway point below it, which rounds up; one fma stays denormal."""
    bits = np.array([0x1A000001, 0x19FFFFFE, 0x007FFFFF], np.uint32).view(np.float32)
    a, b, c = (np.array([v], np.float32) for v in bits)
    twice = (a.astype(np.float64) * b + c).astype(np.float32)
    assert twice.view(np.uint32)[0] == 0x00800000
    assert em._fma32(a, b, c).view(np.uint32)[0] == 0x007FFFFF
    assert _compiled_fma(a, b, c).view(np.uint32)[0] == 0x007FFFFF


def test_the_emulation_matches_the_instruction_on_random_and_tiny_operands():
    rng = np.random.default_rng(7)
    n = 200_000
    a = rng.standard_normal(n).astype(np.float32)
    b = rng.standard_normal(n).astype(np.float32)
    c = rng.standard_normal(n).astype(np.float32)
    # products near -c, so that the sums cancel; and results in the denormal range
    c[: n // 4] = -(a[: n // 4] * b[: n // 4])
    a[n // 4: n // 2] *= np.float32(1e-20)
    b[n // 4: n // 2] *= np.float32(1e-20)
    c[n // 4: n // 2] *= np.float32(1e-38)
    got, want = em._fma32(a, b, c), _compiled_fma(a, b, c)
    np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))


def test_zero_rank_and_zero_size():
    assert em._fma32(np.float32(2.0), np.float32(3.0), np.float32(1.0)) == np.float32(7.0)
    assert em._fma32(np.zeros(0, np.float32), np.float32(3.0), np.float32(1.0)).shape == (0,)


def test_ldexp_rounds_once_into_the_denormal_range_and_overflows_to_inf():
    x = np.array([1.5, 1.9999999, 0.75, 1.0, 1.25, -1.5], np.float32)
    n = np.array([-149, -140, -127, 127, 128, -150], np.int32)
    out = np.empty_like(x)
    _ldexp_all(x, n, out)
    with np.errstate(over="ignore"):
        np.testing.assert_array_equal(out, np.ldexp(x, n))


_SCRIPT = """
import json, sys
import numpy as np
from pjrt_hub.backends.numba_cpu import eager_math, target, vecmath
from numba import njit
@njit(error_model="numpy")
def run(x, out):
    for i in range(x.size):
        out[i] = vecmath.exp_f32(x[i])
x = np.concatenate([np.linspace(-110, 95, 20001, dtype=np.float32), np.array([np.nan, -np.inf, np.inf, 0.0], np.float32)])
out = np.empty_like(x)
run(x, out)
eager = eager_math.exp_f32(x)
ref = np.exp(x.astype(np.float64))
finite = np.isfinite(ref) & (np.abs(ref) > 1e-37) & (ref < 3e38)
rel = float(np.max(np.abs(out[finite] - ref[finite]) / ref[finite]))
print(json.dumps({"fma": target.HAS_FMA, "scalef": target.HAS_SCALEF,
                  "same": bool(np.array_equal(out.view(np.uint32), eager.view(np.uint32))), "rel": rel}))
"""


_SSE_ONLY = dict(NUMBA_CPU_NAME="x86-64", NUMBA_CPU_FEATURES="+sse2,+sse3,+ssse3,+sse4.1,+sse4.2")


def _run_script(tmp_path, **env_changes):
    # Without this process's decision, unless the test passes one down itself.
    env = {k: v for k, v in os.environ.items() if k != target.DECISION_VARIABLE}
    env.update(NUMBA_CACHE_DIR=str(tmp_path), **env_changes)
    proc = subprocess.run([sys.executable, "-c", _SCRIPT], env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_a_target_without_fma_takes_the_separate_steps_on_both_tiers(tmp_path):
    report = _run_script(tmp_path, **_SSE_ONLY)
    assert report == {**report, "fma": False, "scalef": False, "same": True}
    assert report["rel"] < 3e-7


def test_a_decision_passed_down_is_kept_against_numba_settings_that_changed(tmp_path):
    """As the background compile process inherits it: numba compiles for SSE only, and exp still
    takes the fused path the parent's eager tier takes (as libm calls), with the same bits."""
    report = _run_script(tmp_path, **_SSE_ONLY, **{target.DECISION_VARIABLE: "fma,scalef"})
    assert report == {**report, "fma": True, "scalef": True, "same": True}
    assert report["rel"] < 3e-7


_DIGEST = "from pjrt_hub.backends.numba_cpu.compiler import backend_digest; print(backend_digest())"


def test_the_decision_is_part_of_every_cache_key():
    def digest(decision):
        env = dict(os.environ, **{target.DECISION_VARIABLE: decision})
        return subprocess.run([sys.executable, "-c", _DIGEST], env=env, capture_output=True, text=True,
                              check=True, timeout=120).stdout.strip()

    assert digest("fma,scalef") != digest("")


@pytest.mark.parametrize("env, fma, scalef", [
    ({"NUMBA_CPU_FEATURES": "+sse2,+fma,-fma"}, False, False),
    ({"NUMBA_CPU_FEATURES": " +avx512f"}, True, True),  # LLVM: avx512f implies fma
    ({"NUMBA_CPU_FEATURES": ""}, False, False),
    ({"NUMBA_CPU_NAME": "generic"}, False, False),
    ({"NUMBA_CPU_NAME": "Generic", "NUMBA_CPU_FEATURES": "+fma"}, True, False),
])
def test_numba_settings_read_as_numba_reads_them(monkeypatch, env, fma, scalef):
    for name in ("NUMBA_CPU_NAME", "NUMBA_CPU_FEATURES", "NUMBA_ENABLE_AVX"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    features = target.numba_features()
    assert ("fma" in features, "avx512f" in features) == (fma, scalef)


def test_the_flags_agree_with_what_numba_compiles_for():
    """Here, with no NUMBA_* settings: numba's own target features."""
    if any(os.environ.get(n) for n in ("NUMBA_CPU_NAME", "NUMBA_CPU_FEATURES", "NUMBA_ENABLE_AVX")):
        pytest.skip("numba settings in the environment")
    from numba.core import config
    from numba.core.registry import cpu_target

    features = set(cpu_target.target_context.codegen()._tm_features.split(","))
    assert ("+fma" in features) == target.HAS_FMA
    if config.ENABLE_AVX:  # numba turns AVX off by itself on some CPU names (see .target)
        assert ("+avx512f" in features) == target.HAS_SCALEF


@numba.njit(error_model="numpy")
def _exp_all(x, out):
    for i in range(x.size):
        out[i] = vm.exp_f32(x[i])


def test_a_large_argument_taken_in_blocks_gives_the_compiled_bits():
    """The eager exp takes more than a block's elements a block at a time (3-D, not a multiple
    of the block): the same bits as the compiled exp, NaN and the range's ends included."""
    rng = np.random.default_rng(3)
    x = rng.uniform(-110, 95, size=(3, 7, em._EXP_BLOCK // 5 + 1)).astype(np.float32)
    x.flat[[0, 5, -1]] = [np.nan, -np.inf, np.inf]
    with np.errstate(over="ignore", invalid="ignore"):  # as the eager tier runs it
        got = em.exp_f32(x)
    assert got.shape == x.shape and got.dtype == np.float32
    want = np.empty(x.size, np.float32)
    _exp_all(x.reshape(-1), want)
    np.testing.assert_array_equal(got.reshape(-1).view(np.uint32), want.view(np.uint32))
