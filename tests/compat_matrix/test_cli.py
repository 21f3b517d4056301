"""``pjrt-hub matrix``: the default environment without tox, a relative output, the schema, progress."""

from __future__ import annotations

import io
import json

from pjrt_hub._progress import Progress
from pjrt_hub.cli import ExitCode, main
from pjrt_hub.compat_matrix import CellStatus, MatrixReport


def test_no_tox_runs_the_cells_here_and_writes_the_three_outputs(tmp_path, capsys):
    out = tmp_path / "m"
    args = ["matrix", "--no-tox", "--output", str(out), "--plugin", "toy_0_81", "--plugin", "toy_0_115_back_0_95",
            "--framework-version", "0.81", "--case", "client/platform_name"]
    assert main(args) == ExitCode.OK
    text = capsys.readouterr().out
    assert "cells: 1 passed, 0 failed, 1 refused, 0 error" in text
    assert "1 job, 2 cells run, 0 from the cache" in text
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


def test_a_relative_output_works_and_nothing_red_is_served_from_the_cache(tmp_path, monkeypatch, capsys):
    # The README's line: the default output is ./matrix, relative; the cells run in other folders.
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("PJRT_HUB_CACHE", raising=False)
    args = ["matrix", "--no-tox", "--plugin", "toy_0_81", "--plugin", "toy_0_95_back_0_81",
            "--framework-version", "0.81", "--case", "client/platform_name"]
    assert main(args) == ExitCode.OK
    report = MatrixReport.model_validate_json((tmp_path / "matrix" / "matrix.json").read_text())
    assert [c.status for c in report.cells] == [CellStatus.PASSED, CellStatus.PASSED]
    assert (tmp_path / "matrix" / "plan.json").exists() and (tmp_path / "matrix" / "cells" / "local.json").exists()
    assert not list((tmp_path / "matrix").glob("fixture-site*"))  # fixtures live in a private temp folder
    assert capsys.readouterr().err == ""  # not a terminal: no progress line


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_shows_on_a_terminal_only():
    terminal = _Terminal()
    progress = Progress("cells", stream=terminal)
    progress.update(0, 3, "numba_cpu at 0.81")
    progress.update(2, 3, "reference at 0.106")
    progress.close()
    text = terminal.getvalue()
    assert "[0/3] cells numba_cpu at 0.81 (" in text and "[2/3] cells reference at 0.106 (" in text
    assert text.endswith("\r\x1b[2K")  # the line is cleared before the report is printed
    pipe = io.StringIO()
    Progress("cells", stream=pipe).update(1, 3, "x")
    assert pipe.getvalue() == ""
    assert not Progress.for_command("cells", json_output=True).enabled


def test_without_tox_the_tox_matrix_says_so_in_one_line(tmp_path, monkeypatch, capsys):
    import pjrt_hub.compat_matrix as cm

    monkeypatch.setattr(cm, "tox_command", lambda: None)
    assert main(["matrix", "--output", str(tmp_path / "m")]) == ExitCode.FAILURE
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith("pjrt-hub matrix: tox is not installed: pip install 'pjrt-hub[test]'")
    assert not (tmp_path / "m").exists()


def test_outside_a_checkout_the_tox_matrix_stops_at_once_and_says_why(tmp_path, monkeypatch, capsys):
    """Installed from a wheel and run in any folder, there is no tox.ini with the matrix's
    environments: one line, exit 1, nothing written, no tox run (it used to give every cell
    "gave no result (exit 254)" after minutes, the cause only in tox.log)."""
    import pjrt_hub.compat_matrix._jobs as jobs

    monkeypatch.setattr(jobs, "_INSTALLED_FROM", tmp_path / "site-packages" / "pjrt_hub")
    monkeypatch.chdir(tmp_path)
    (tmp_path / "tox.ini").write_text("[tox]\nenvlist = py311\n")  # someone else's project
    assert main(["matrix", "--output", str(tmp_path / "m")]) == ExitCode.FAILURE
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith("pjrt-hub matrix: the matrix's tox environments are defined in pjrt-hub's tox.ini")
    assert str(tmp_path) in line and "--no-tox" in line
    assert not (tmp_path / "m").exists()
    plan = tmp_path / "plan.json"
    assert main(["matrix", "plan", "--output", str(plan), "--plugin", "toy_0_81"]) == ExitCode.OK
    capsys.readouterr()
    job = json.loads(plan.read_text())["cells"][0]["id"]
    # A CI job (`matrix cell`) writes its result with the reason, so that the merge shows it.
    assert main(["matrix", "cell", job, "--plan", str(plan), "--output", str(tmp_path / "r")]) == ExitCode.FAILURE
    assert "error: the matrix's tox environments are defined in pjrt-hub's tox.ini" in capsys.readouterr().out
    result = json.loads((tmp_path / "r" / f"{job}.json").read_text())
    assert "there is none in" in result["error"] and "--no-tox" in result["error"]


def test_the_checkout_is_found_from_a_folder_inside_it_or_from_the_install(tmp_path, monkeypatch):
    import pjrt_hub.compat_matrix._jobs as jobs

    checkout = tmp_path / "clone"
    (checkout / "docs" / "deep").mkdir(parents=True)
    (checkout / "tox.ini").write_text("[tox]\n[testenv:matrix-py311-numbalatest]\ncommands = x\n")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.setattr(jobs, "_INSTALLED_FROM", tmp_path / "site-packages" / "pjrt_hub")
    assert jobs.matrix_project(checkout / "docs" / "deep") == checkout
    assert jobs.matrix_project(elsewhere) is None
    monkeypatch.setattr(jobs, "_INSTALLED_FROM", checkout)  # an editable install
    assert jobs.matrix_project(elsewhere) == checkout
