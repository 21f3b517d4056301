"""``pjrt-hub matrix``: the default environment without tox, the schema, the tox environments."""

from __future__ import annotations

import configparser
import json
from pathlib import Path

from pjrt_hub.cli import ExitCode, main
from pjrt_hub.compat_matrix import DEFAULT_TOX_ENVS, MatrixReport

ROOT = Path(__file__).resolve().parents[2]


def test_no_tox_runs_the_cells_here_and_writes_the_three_outputs(tmp_path, capsys):
    out = tmp_path / "m"
    args = ["matrix", "--no-tox", "--output", str(out), "--plugin", "toy_0_81", "--plugin", "toy_0_115_back_0_95",
            "--framework-version", "0.81", "--case", "client/platform_name"]
    assert main(args) == ExitCode.OK
    text = capsys.readouterr().out
    assert "cells: 1 passed, 0 failed, 1 refused, 0 error" in text
    assert "2 cells run, 0 from the cache" in text
    report = MatrixReport.model_validate_json((out / "matrix.json").read_text())
    assert report.cell("toy_0_115_back_0_95", "0.81").rule == "backward-policy"
    assert "framework 0.81" in (out / "matrix.md").read_text()
    assert (out / "matrix.html").read_text().startswith("<!DOCTYPE html>")
    assert main(args + ["--json"]) == ExitCode.OK
    assert all(c["cached"] for c in json.loads(capsys.readouterr().out)["cells"])


def test_the_schema_is_published(capsys):
    assert main(["matrix", "--schema"]) == ExitCode.OK
    schema = json.loads(capsys.readouterr().out)
    assert schema["title"] == "MatrixReport" and "CellResult" in schema["$defs"]


def test_tox_defines_the_matrix_environments_with_partial_reports():
    parser = configparser.ConfigParser(interpolation=None)
    parser.read(ROOT / "tox.ini")
    sections = " ".join(parser.sections())
    assert "testenv:matrix-py{311,312,313}-numba{min,latest}" in sections
    assert "testenv:matrix-py311-cplugins" in sections
    for name in parser.sections():
        if name.startswith("testenv:matrix"):
            assert "--partial" in parser[name]["commands"] and "--no-tox" in parser[name]["commands"]
    for env in DEFAULT_TOX_ENVS:
        assert env.startswith("matrix-py")
