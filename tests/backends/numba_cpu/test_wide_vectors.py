"""512-bit vectors for the generated functions where AVX-512 is used (.target WIDE_VECTORS): the
module asks for them in every function and ``prange`` body, LLVM gets the request on those
functions only, and nothing is asked where the decision is no."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

pytest.importorskip("numba")

from pjrt_hub.backends.numba_cpu import target  # noqa: E402
from pjrt_hub.backends.numba_cpu.compiler import NumbaCompiler  # noqa: E402

_PROGRAM = """
func.func public @main(%arg0: tensor<2048x1024xf32>, %arg1: tensor<2048xf32>) -> tensor<2048x1024xf32> {
  %0 = stablehlo.exponential %arg0 : tensor<2048x1024xf32>
  %1 = stablehlo.broadcast_in_dim %arg1, dims = [0] : (tensor<2048xf32>) -> tensor<2048x1024xf32>
  %2 = stablehlo.divide %0, %1 : tensor<2048x1024xf32>
  return %2 : tensor<2048x1024xf32>
}
"""


def _source(tmp_path, monkeypatch, wide):
    monkeypatch.setattr(target, "WIDE_VECTORS", wide)
    compiler = NumbaCompiler(str(tmp_path))
    return compiler._generate(_PROGRAM, compiler._lowering_options(None))


def test_every_function_and_prange_body_asks_for_wide_vectors(tmp_path, monkeypatch):
    lines = _source(tmp_path, monkeypatch, True).splitlines()
    heads = [i for i, ln in enumerate(lines)
             if ln.lstrip().startswith("def ") or (ln.lstrip().startswith("for ") and " in prange(" in ln)]
    assert any("prange(" in lines[i] for i in heads)  # the test's program has a parallel loop
    assert len([i for i in heads if lines[i].lstrip().startswith("def ")]) >= 2
    for i in heads:
        indent = len(lines[i]) - len(lines[i].lstrip())
        assert lines[i + 1] == " " * (indent + 4) + "wide_vectors()", lines[i]
    assert sum(ln.strip() == "wide_vectors()" for ln in lines) == len(heads)


def test_nothing_is_asked_where_the_decision_is_no(tmp_path, monkeypatch):
    assert "wide_vectors" not in _source(tmp_path, monkeypatch, False)


_SCRIPT = """
import json, re
import numpy as np
from numba import njit, prange
from pjrt_hub.backends.numba_cpu import target
from pjrt_hub.backends.numba_cpu.support import exp_f32, wide_vectors

@njit(parallel=True)
def chunks(x, out):
    for c in prange(2):
        wide_vectors()
        for i in range(c * (x.size // 2), (c + 1) * (x.size // 2)):
            out[i] = exp_f32(x[i])

@njit
def plain(x, out):
    for i in range(x.size):
        out[i] = exp_f32(x[i])

x = np.linspace(-20, 20, 1 << 12, dtype=np.float32)
a, b = np.empty_like(x), np.empty_like(x)
chunks(x, a)
plain(x, b)
def asked(f):
    return any('"prefer-vector-width"="512"' in ir for ir in f.inspect_llvm().values())
def zmm(f):  # exp's scaling, one instruction per vector of lanes: on 512-bit registers?
    return any(re.search(r"vscalefps\\s[^\\n]*%zmm", asm) is not None for asm in f.inspect_asm().values())
print(json.dumps({"wide": target.WIDE_VECTORS, "asked": asked(chunks), "plain_asked": asked(plain),
                  "zmm": zmm(chunks),
                  "same": bool(np.array_equal(a.view(np.uint32), b.view(np.uint32)))}))
"""


def _run(tmp_path, decision):
    env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path), **{target.DECISION_VARIABLE: decision})
    for name in ("NUMBA_CPU_NAME", "NUMBA_CPU_FEATURES", "NUMBA_ENABLE_AVX"):
        env.pop(name, None)
    proc = subprocess.run([sys.executable, "-c", _SCRIPT], env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_llvm_is_asked_for_wide_vectors_in_the_calling_function_only(tmp_path):
    report = _run(tmp_path, "fma,scalef")
    assert report == {**report, "wide": True, "asked": True, "plain_asked": False, "same": True}
    if "avx512f" in target.numba_features():
        assert report["zmm"]  # the prange body, numba's function of its own, got them


def test_no_request_and_the_same_bits_where_the_decision_is_no(tmp_path):
    report = _run(tmp_path, "fma")
    assert report == {**report, "wide": False, "asked": False, "plain_asked": False, "zmm": False, "same": True}

