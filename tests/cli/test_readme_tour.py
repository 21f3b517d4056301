"""Every ``pjrt-hub`` line of the README's short tour runs as shown and exits 0.

The lines are read from README.md, so the tour and this test cannot drift apart. They run in a
folder holding the files they name (``prog.mlir``, ``in.npz``); ``path/to/...so`` stands for a
real PJRT C plugin, the default real plugin of the tests (skipped where it cannot be had).
"""

from __future__ import annotations

import re
import shlex
import shutil
import warnings
from pathlib import Path

import numpy as np
import pytest

from pjrt_hub.cli import ExitCode, main
from pjrt_hub.extensions import ExtensionWarning

from ..real_plugins import DEFAULT_PLUGIN, real_plugin

ROOT = Path(__file__).resolve().parents[2]
CORPUS = ROOT / "pjrt_hub" / "data" / "corpus" / "public"


def tour_lines() -> list[str]:
    text = (ROOT / "README.md").read_text()
    section = text.split("## A short tour", 1)[1]
    block = re.search(r"```console\n(.*?)```", section, re.DOTALL)
    assert block, "the README's tour has no console block"
    return [line[2:] for line in block.group(1).splitlines() if line.startswith("$ pjrt-hub ")]


def test_the_tour_has_the_lines_this_test_knows():
    lines = tour_lines()
    assert len(lines) >= 8
    assert any("--require-ext 'Layouts>=2'" in line for line in lines)


@pytest.mark.parametrize("line", tour_lines())
def test_a_tour_line_runs_as_shown(line, tmp_path, monkeypatch, capsys):
    argv = shlex.split(line, comments=True)[1:]
    if any(arg.startswith("path/to/") for arg in argv):
        library = real_plugin(DEFAULT_PLUGIN)
        argv = [library if arg.startswith("path/to/") else arg for arg in argv]
    shutil.copy(CORPUS / "softmax.mlir", tmp_path / "prog.mlir")
    with np.load(CORPUS / "softmax.npz") as data:
        np.savez(tmp_path / "in.npz", in0=data["in0"])
    monkeypatch.chdir(tmp_path)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ExtensionWarning)  # --want-ext FFI: the built-ins offer no FFI
        code = main(argv)
    captured = capsys.readouterr()
    assert code == ExitCode.OK, f"{line!r} exited {code}:\n{captured.out[-2000:]}\n{captured.err[-2000:]}"
    if argv == ["list"]:  # the built-ins offer what XLA's CPU plugin offers and this runtime honours
        for name in ("numba_cpu", "reference"):
            assert re.search(rf"^{name} .*loaded +Layouts 3, MemoryDescriptions 1$", captured.out, re.M), captured.out
    if "--require-ext" in argv:
        assert "numba_cpu" in captured.out and "NOT OK" not in captured.out
    if "--out" in argv:
        with np.load(tmp_path / "out.npz") as out:
            assert out["out0"].shape == np.load(CORPUS / "softmax.npz")["out0"].shape
