"""The disk cache survives what happens to caches: two processes compiling the same program at
the same moment, and files that are truncated, overwritten or left by a crash. A broken entry
is dropped with one warning and the program compiled again; nothing the user sees fails.

Each case runs its compiles in fresh processes, as users meet these situations (numba keeps
compiled functions in memory, which would hide a broken file in the same process)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

PROGRAM = """func.func @main(%a: tensor<4x33xf32>) -> (tensor<4x33xf32>, tensor<4xf32>) {
  %0 = stablehlo.exponential %a : tensor<4x33xf32>
  %z = stablehlo.constant dense<0.0> : tensor<f32>
  %1 = stablehlo.reduce(%0 init: %z) applies stablehlo.add across dimensions = [1] : (tensor<4x33xf32>, tensor<f32>) -> tensor<4xf32>
  return %0, %1 : tensor<4x33xf32>, tensor<4xf32>
}
"""

SCRIPT = """
import hashlib, json, sys, time, warnings
from pathlib import Path
import numpy as np
from pjrt_hub.backends.numba_cpu import NumbaCompiler
cache, program, go = sys.argv[1], sys.argv[2], sys.argv[3]
while go != "-" and not Path(go).exists():
    time.sleep(0.005)
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    compiler = NumbaCompiler(cache_dir=cache)
    prog = compiler.compile(Path(program).read_text())
    x = (np.arange(4 * 33, dtype=np.float32).reshape(4, 33) - 60) / 17
    out = prog.run([x])
digest = hashlib.sha256(b"".join(o.tobytes() for o in out)).hexdigest()
print(json.dumps({"digest": digest, "stats": vars(compiler.stats),
                  "warnings": [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)]}))
"""


def _runner(tmp_path: Path):
    program = tmp_path / "p.mlir"
    program.write_text(PROGRAM)
    script = tmp_path / "compile.py"
    script.write_text(SCRIPT)
    cache = tmp_path / "cache"

    def start(go: str = "-") -> subprocess.Popen:
        return subprocess.Popen([sys.executable, str(script), str(cache), str(program), go],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def finish(proc: subprocess.Popen) -> dict:
        out, err = proc.communicate(timeout=600)
        assert proc.returncode == 0, err[-3000:]
        return json.loads(out.strip().splitlines()[-1])

    def once() -> dict:
        return finish(start())

    once.start, once.finish, once.cache = start, finish, cache
    return once


@pytest.fixture(scope="module")
def good(tmp_path_factory):
    """A cache holding the program, compiled once for the module, and what it computed."""
    runner = _runner(tmp_path_factory.mktemp("good"))
    result = runner()
    assert result["stats"]["misses"] == 1 and not result["warnings"]
    return runner.cache, result


@pytest.fixture
def run(tmp_path):
    return _runner(tmp_path)


def test_two_processes_compiling_one_program_at_once(run, tmp_path):
    go = tmp_path / "go"
    procs = [run.start(str(go)) for _ in range(2)]
    time.sleep(1.0)  # both are waiting for the same moment
    go.write_text("")
    first, second = (run.finish(p) for p in procs)
    assert first["digest"] == second["digest"]
    assert not first["warnings"] and not second["warnings"]
    # Whatever order their writes landed in, the cache is whole: a third process loads it.
    third = run()
    assert third["digest"] == first["digest"]
    assert third["stats"]["index_hits"] == 1 and third["stats"]["misses"] == 0
    assert third["stats"]["corrupt_entries"] == 0 and not third["warnings"]
    assert not list(run.cache.glob("**/.tmp_*")), "a temporary file was left behind"


def _break(path: Path, how: str) -> None:
    data = path.read_bytes()
    if how == "truncate":
        path.write_bytes(data[: len(data) // 2])
    elif how == "garbage":
        path.write_bytes(b"\xff\xfe\x00garbage" + bytes(range(256)))
    else:
        path.write_bytes(b"")


@pytest.mark.parametrize("target,how", [
    ("index", "garbage"), ("index", "empty"), ("module", "truncate"), ("module", "garbage"),
    ("numba-index", "truncate"), ("numba-data", "truncate"), ("numba-data", "garbage"),
])
def test_a_broken_cache_file_is_recompiled_with_one_warning(run, good, target, how):
    shutil.copytree(good[0], run.cache)
    good = good[1]
    cache = run.cache
    files = {"index": sorted((cache / "index").iterdir()), "module": sorted(cache.glob("p_*.py")),
             "numba-index": sorted(cache.glob("__pycache__/*.nbi")), "numba-data": sorted(cache.glob("__pycache__/*.nbc"))}
    assert files[target], f"no {target} file in {sorted(p.name for p in cache.rglob('*'))}"
    for path in files[target]:
        _break(path, how)
    again = run()
    assert again["digest"] == good["digest"]
    assert len(again["warnings"]) == 1 and "is broken" in again["warnings"][0] and "compiled again" in again["warnings"][0]
    assert again["stats"]["corrupt_entries"] >= 1
    # Repaired: the next process loads it from the cache, silently.
    third = run()
    assert third["digest"] == good["digest"] and not third["warnings"]
    assert third["stats"]["index_hits"] == 1 and third["stats"]["corrupt_entries"] == 0


def test_a_missing_module_is_a_plain_miss(run, good):
    shutil.copytree(good[0], run.cache)
    for path in run.cache.glob("p_*.py"):
        path.unlink()
    again = run()
    assert again["stats"]["misses"] + again["stats"]["module_hits"] == 1 and not again["warnings"]


def test_a_program_that_numba_cannot_compile_is_not_called_a_broken_cache_the_next_time(tmp_path, monkeypatch):
    """A module numba could not compile stays on disk; compiling the program again fails the
    same way, and that is the program's failure, not a broken cache file."""
    import warnings

    from pjrt_hub.abi import CompileError
    from pjrt_hub.backends.numba_cpu import NumbaCompiler

    def fail(self, source, fingerprint, path):
        raise CompileError(f"numba could not compile the generated code (TypingError: made up); generated module: {path}")

    monkeypatch.setattr(NumbaCompiler, "_import", fail)
    for attempt in range(2):
        compiler = NumbaCompiler(cache_dir=tmp_path, tiered=False)
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            with pytest.raises(CompileError, match="made up"):
                compiler.compile(PROGRAM)
        assert compiler.stats.corrupt_entries == 0, attempt
