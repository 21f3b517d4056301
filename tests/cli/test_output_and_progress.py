"""What the CLI leaves behind and shows while it works: ``--out`` written atomically under exactly
the name printed, progress only on a terminal, warnings on one line, no temporary files."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from pjrt_hub import _run
from pjrt_hub._progress import Progress
from pjrt_hub.cli import ExitCode, main

ADD = """func.func public @main(%arg0: tensor<4xf32>, %arg1: tensor<4xf32>) -> tensor<4xf32> {
  %0 = stablehlo.add %arg0, %arg1 : tensor<4xf32>
  return %0 : tensor<4xf32>
}
"""


@pytest.fixture
def program(tmp_path: Path) -> tuple[Path, Path]:
    (tmp_path / "add.mlir").write_text(ADD)
    np.savez(tmp_path / "in.npz", in0=np.arange(4, dtype=np.float32), in1=np.ones(4, np.float32))
    return tmp_path / "add.mlir", tmp_path / "in.npz"


def test_out_is_written_under_exactly_the_name_printed(program, tmp_path, capsys):
    prog, inputs = program
    out = tmp_path / "results"  # no .npz: np.savez(path) would have written results.npz
    code = main(["run", str(prog), "--plugin", "reference", "--inputs", str(inputs), "--out", str(out)])
    stdout = capsys.readouterr().out
    assert code == ExitCode.OK
    assert f"wrote {out}" in stdout.splitlines()
    assert out.is_file() and not (tmp_path / "results.npz").exists()
    with np.load(out) as data:
        np.testing.assert_array_equal(data["out0"], [1, 2, 3, 4])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["add.mlir", "in.npz", "results"]


def test_out_in_json_names_the_file_written(program, tmp_path, capsys):
    prog, inputs = program
    out = tmp_path / "o.npz"
    code = main(["run", str(prog), "--plugin", "reference", "--inputs", str(inputs), "--out", str(out), "--json"])
    assert code == ExitCode.OK and json.loads(capsys.readouterr().out)["out"] == str(out)


def test_atomic_write_replaces_whole_or_not_at_all(tmp_path, monkeypatch):
    out = tmp_path / "out.npz"
    out.write_bytes(b"the previous results")
    os.chmod(out, 0o640)

    def fail(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(np, "savez", fail)
    with pytest.raises(OSError, match="No space left"):
        _run.write_npz_atomically(out, {"out0": np.ones(3)})
    assert out.read_bytes() == b"the previous results"
    assert [p.name for p in tmp_path.iterdir()] == ["out.npz"]  # the temporary file is gone
    monkeypatch.undo()
    _run.write_npz_atomically(out, {"out0": np.ones(3)})
    with np.load(out) as data:
        assert data["out0"].tolist() == [1, 1, 1]
    assert (os.stat(out).st_mode & 0o777) == 0o640  # the file keeps its mode
    assert [p.name for p in tmp_path.iterdir()] == ["out.npz"]


def test_the_out_check_comes_before_any_work(program, tmp_path, capsys, monkeypatch):
    prog, inputs = program
    monkeypatch.setattr(_run, "load_inputs", lambda path: pytest.fail("inputs were read before --out was checked"))
    with pytest.raises(SystemExit) as info:
        main(["run", str(prog), "--plugin", "reference", "--inputs", str(inputs), "--out", str(tmp_path / "no" / "o.npz")])
    assert info.value.code == ExitCode.USAGE
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "does not exist" in err


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_only_on_a_terminal_and_never_in_json():
    terminal, pipe = _Terminal(), io.StringIO()
    shown = Progress(stream=terminal)
    shown.update(3, 10, "numba_cpu: execute/add")
    shown.clear()
    assert "[3/10] numba_cpu: execute/add" in terminal.getvalue()
    assert terminal.getvalue().endswith("\r\x1b[2K")  # the line is gone once the work is done
    quiet = Progress(stream=pipe)
    quiet.update(3, 10, "x")
    quiet.clear()
    json_mode = Progress.for_command("", json_output=True)
    json_mode.stream = _Terminal()
    json_mode.update(3, 10, "x")
    assert pipe.getvalue() == "" and not json_mode.enabled and json_mode.stream.getvalue() == ""


def test_conformance_reports_each_case_as_it_starts():
    from pjrt_hub.testing._run import run_conformance

    seen: list[tuple[int, int, str]] = []
    report = run_conformance(["reference"], cases=["version/*"], progress=lambda *a: seen.append(a))
    total = sum(p.counts.total for p in report.plugins)
    assert total > 1 and len(seen) == total
    assert [s[0] for s in seen] == list(range(total)) and {s[1] for s in seen} == {total}
    assert seen[0][2] == "reference: version/loaded"


def _cli(*argv: str, env: dict[str, str] | None = None, cwd: Path | None = None) -> subprocess.CompletedProcess:
    base = {k: v for k, v in os.environ.items() if not k.startswith("PJRT_")}
    return subprocess.run([sys.executable, "-m", "pjrt_hub.cli", *argv], capture_output=True, text=True,
                          env={**base, **(env or {})}, cwd=cwd, timeout=900)


def test_warnings_are_one_readable_line():
    done = _cli("check", "--want-ext", "FFI")
    assert done.returncode == ExitCode.OK, done.stderr
    lines = done.stderr.splitlines()
    assert lines and all(ln.startswith("pjrt-hub: warning: ") for ln in lines), done.stderr
    assert any("does not offer the FFI extension" in ln for ln in lines)
    assert "warnings.warn" not in done.stderr and ".py:" not in done.stderr


def test_nothing_is_left_in_the_temporary_directory(tmp_path):
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    env = {"TMPDIR": str(tmp), "PJRT_HUB_CACHE": str(tmp_path / "cache")}
    done = _cli("conformance", "--plugin", "reference", "--case", "execute/add_one_program", env=env)
    assert done.returncode == ExitCode.OK, done.stdout + done.stderr
    done = _cli("bench", "--plugin", "reference", "--program", "perf_softmax", "--runs", "1", "--no-warm",
                "--json", env=env)
    assert done.returncode == ExitCode.OK, done.stderr
    assert done.stderr == ""  # not a terminal: no progress
    assert list(tmp.iterdir()) == []


def test_a_pytest_run_that_skipped_every_case_fails(tmp_path, capsys):
    """The suite as a pytest plugin (``pytest --pjrt-plugin X``) keeps the same rule as the CLI."""
    import pytest as pytest_

    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    args = [str(tmp_path), "-c", str(tmp_path / "pytest.ini"), "--rootdir", str(tmp_path), "-p", "pjrt_hub",
            "-p", "no:cacheprovider", "-q", "--pjrt-only", "--pjrt-plugin", "reference"]
    assert pytest_.main([*args, "--pjrt-case", "abi/*"]) == pytest_.ExitCode.TESTS_FAILED
    assert "reference: nothing was tested: every selected case was skipped" in capsys.readouterr().out
    assert pytest_.main([*args, "--pjrt-case", "version/loaded"]) == pytest_.ExitCode.OK
