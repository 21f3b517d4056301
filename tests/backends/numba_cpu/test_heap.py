"""numba_cpu keeps freed memory in the heap, so that a run's outputs reuse the last run's pages."""

from __future__ import annotations

import os
import platform
import subprocess
import sys

import pytest

from pjrt_hub.backends.numba_cpu import heap

#: Frees a 16 MiB array, allocates and fills another, and prints the page faults that took
#: (after ``keep_freed_memory`` if argv[1] says so) and whether the thresholds were set.
_SCRIPT = """
import resource, sys
import numpy as np
from pjrt_hub.backends.numba_cpu import heap
kept = heap.keep_freed_memory() if sys.argv[1] == "keep" else None
faults = []
for _ in range(4):
    a = np.empty(4 << 20, np.float32)
    a.fill(1.0)
    del a
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    b = np.empty(4 << 20, np.float32)
    b.fill(2.0)
    faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
    del b
print(kept, min(faults))
"""


def _run(mode: str, **env: str) -> tuple[str, int]:
    environ = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_") and k != "GLIBC_TUNABLES"}
    done = subprocess.run([sys.executable, "-c", _SCRIPT, mode], capture_output=True, text=True,
                          env={**environ, **env}, timeout=120)
    assert done.returncode == 0, done.stderr
    kept, faults = done.stdout.split()
    return kept, int(faults)


GLIBC = sys.platform.startswith("linux") and platform.libc_ver()[0] == "glibc"


@pytest.mark.skipif(not GLIBC, reason="glibc's mallopt")
def test_a_freed_output_is_reused_without_page_faults():
    kept, faults = _run("keep")
    assert kept == "True" and faults < 16  # 16 MiB is 4096 pages; reused memory needs none
    # What glibc does left to itself with small thresholds: fresh pages, faulted in again.
    _, fresh = _run("leave", MALLOC_MMAP_THRESHOLD_="131072", MALLOC_TRIM_THRESHOLD_="131072")
    assert fresh > faults


def test_the_users_own_malloc_tuning_is_kept(monkeypatch):
    for env in ({"MALLOC_TRIM_THRESHOLD_": "0"}, {"MALLOC_MMAP_THRESHOLD_": "65536"},
                {"GLIBC_TUNABLES": "glibc.malloc.trim_threshold=0"}):
        monkeypatch.setattr(heap, "_done", None)
        assert heap.keep_freed_memory(env) is False
    monkeypatch.setattr(heap, "_done", None)
    first = heap.keep_freed_memory({"GLIBC_TUNABLES": "glibc.rtld.optional_static_tls=512"})
    assert first is GLIBC  # other tunables are no malloc tuning
    # Once per process: a later call reports the first one's outcome, whatever it is given.
    assert heap.keep_freed_memory({"MALLOC_TRIM_THRESHOLD_": "0"}) is first


#: Runs perf_layernorm (a 32 MiB output) on numba_cpu, dropping each run's output as a training
#: loop does, and prints the page faults per run; argv[1] "off" keeps glibc's own thresholds.
_PROGRAM_SCRIPT = """
import resource, sys
from pjrt_hub.backends.numba_cpu import heap
if sys.argv[1] == "off":
    heap._done = False
from pjrt_hub._bench import _Loaded, _child_registry, _program_named
program = _program_named("perf_layernorm")
loaded = _Loaded(_child_registry([]).create_client("numba_cpu"), program.text(), program.inputs())
loaded.settle()
for _ in range(3):
    loaded.execute_once()
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(5):
    loaded.execute_once()
print((resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before) / 5)
"""


@pytest.mark.skipif(not GLIBC, reason="glibc's mallopt")
def test_a_program_run_again_and_again_does_not_fault_its_output_in_again(tmp_path):
    environ = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_") and k != "GLIBC_TUNABLES"}
    faults = {}
    for mode in ("off", "keep"):  # the same compile cache: the second run loads the first's code
        done = subprocess.run([sys.executable, "-c", _PROGRAM_SCRIPT, mode], capture_output=True, text=True,
                              env={**environ, "PJRT_HUB_CACHE": str(tmp_path)}, timeout=300)
        assert done.returncode == 0, done.stderr[-2000:]
        faults[mode] = float(done.stdout.split()[-1])
    assert faults["keep"] < 16, faults
    assert faults["off"] > faults["keep"], faults


@pytest.mark.parametrize("text,chosen", [
    ("always defer defer+madvise [madvise] never\n", "madvise"),
    ("always defer [defer+madvise] madvise never\n", "defer+madvise"),
    ("[always] defer defer+madvise madvise never\n", "always"),
    ("always defer defer+madvise madvise never\n", None),
    ("", None),
])
def test_the_kernels_defrag_setting_is_read(tmp_path, text, chosen):
    path = tmp_path / "defrag"
    path.write_text(text)
    assert heap._thp_defrag(str(path)) == chosen
    assert heap._thp_defrag(str(tmp_path / "missing")) is None


#: Calls fault_without_compaction with the defrag file argv[1] and prints what it returned and
#: whether numpy still advises huge pages.
_ADVICE_SCRIPT = """
import sys
from pjrt_hub.backends.numba_cpu import heap
try:
    from numpy._core import multiarray
except ImportError:  # numpy 1.x
    from numpy.core import multiarray
print(heap.fault_without_compaction(defrag_path=sys.argv[1]), multiarray._get_madvise_hugepage())
"""


def _advice(defrag: str, tmp_path, **env: str) -> str:
    path = tmp_path / "defrag"
    path.write_text(defrag)
    environ = {k: v for k, v in os.environ.items() if k != "NUMPY_MADVISE_HUGEPAGE"}
    done = subprocess.run([sys.executable, "-c", _ADVICE_SCRIPT, str(path)], capture_output=True, text=True,
                          env={**environ, **env}, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout.strip()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux's transparent huge pages")
def test_numpys_huge_page_advice_is_off_only_where_faults_would_wait_for_compaction(tmp_path):
    assert _advice("always defer defer+madvise [madvise] never", tmp_path) == "True False"
    assert _advice("always defer [defer+madvise] madvise never", tmp_path) == "True False"
    # Where advised faults do not wait, numpy keeps advising: huge pages then cost nothing.
    assert _advice("always [defer] defer+madvise madvise never", tmp_path) == "False True"
    assert _advice("always defer defer+madvise madvise [never]", tmp_path) == "False True"
    # A user's own choice stands, either way.
    assert _advice("always defer defer+madvise [madvise] never", tmp_path, NUMPY_MADVISE_HUGEPAGE="1") == "False True"
    assert _advice("always defer defer+madvise [madvise] never", tmp_path, NUMPY_MADVISE_HUGEPAGE="0") == "False False"


def test_a_numba_compiler_turns_the_advice_off_where_it_stalls(monkeypatch, tmp_path):
    calls = []
    monkeypatch.setattr("pjrt_hub.backends.numba_cpu.compiler.fault_without_compaction", lambda: calls.append(1))
    from pjrt_hub.backends.numba_cpu import NumbaCompiler

    NumbaCompiler(tmp_path)
    assert calls == [1]
