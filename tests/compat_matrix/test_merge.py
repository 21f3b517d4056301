"""plan -> every job -> merge gives what a local run of the same selection gives; merge refuses
broken, duplicate and foreign results and shows a job without a result as red "missing" cells."""

from __future__ import annotations

import json
import os
import stat
import sys
import textwrap
from pathlib import Path

import pytest

from pjrt_hub.cli import ExitCode, main
from pjrt_hub.compat_matrix import (CellReport, CellResult, CellStatus, EnvironmentInfo, MatrixPlan, MatrixReport,
                                    PluginInfo, make_plan, run_plan)

SELECTION = ["--no-tox", "--plugin", "toy_0_81", "--plugin", "toy_0_106", "--plugin", "reference",
             "--framework-version", "0.81", "--framework-version", "0.106", "--case", "client/platform_name"]


def _essence(report: MatrixReport) -> dict:
    """What a run found, without when, how long, from where (cache) or under which plan."""
    return {
        "frameworks": report.framework_versions, "suite": report.suite_version,
        "plugins": [(p.name, p.kind, p.environment, p.api_version, p.identity) for p in report.plugins],
        "cells": [c.model_dump(exclude={"duration_s", "cached", "key"}) for c in report.cells],
    }


def test_plan_then_every_job_then_merge_equals_a_local_run(tmp_path, capsys):
    local = tmp_path / "local"
    assert main(["matrix", *SELECTION, "--output", str(local), "--cache", str(tmp_path / "c1")]) == ExitCode.OK
    capsys.readouterr()

    plan_file = tmp_path / "plan.json"
    assert main(["matrix", "plan", *SELECTION, "--output", str(plan_file)]) == ExitCode.OK
    plan = MatrixPlan.model_validate_json(plan_file.read_text())
    assert [c.id for c in plan.cells] == ["local.fixtures", "local.reference"]
    capsys.readouterr()
    for job in plan.cells:
        assert main(["matrix", "cell", job.id, "--plan", str(plan_file), "--output", str(tmp_path / "results"),
                     "--cache", str(tmp_path / "c2")]) == ExitCode.OK
        assert f"job {job.id} (local):" in capsys.readouterr().out
        result = CellReport.model_validate_json((tmp_path / "results" / f"{job.id}.json").read_text())
        assert (result.plan_id, result.cell_id, result.environment.name) == (plan.plan_id, job.id, "local")
        assert result.environment.numba and result.environment.numpy and result.environment.pjrt_hub
        assert result.environment.platform and "pydantic" in result.environment.packages
    merged = tmp_path / "merged"
    assert main(["matrix", "merge", "--plan", str(plan_file), *map(str, (tmp_path / "results").glob("*.json")),
                 "--output", str(merged)]) == ExitCode.OK
    assert "job local.fixtures: ran" in capsys.readouterr().out

    here = MatrixReport.model_validate_json((local / "matrix.json").read_text())
    there = MatrixReport.model_validate_json((merged / "matrix.json").read_text())
    assert _essence(there) == _essence(here)
    statuses = {(c.plugin, c.framework_version): c.status for c in there.cells}
    assert statuses == {("toy_0_81", "0.81"): CellStatus.PASSED, ("toy_0_81", "0.106"): CellStatus.REFUSED,
                        ("toy_0_106", "0.81"): CellStatus.REFUSED, ("toy_0_106", "0.106"): CellStatus.PASSED,
                        ("reference", "0.81"): CellStatus.PASSED, ("reference", "0.106"): CellStatus.PASSED}
    # 0.81's successor 0.82 came out more than 6 weeks before 0.106; 0.106 declares no backward policy.
    assert (there.cell("toy_0_81", "0.106").rule, there.cell("toy_0_106", "0.81").rule) == ("window", "backward-policy")
    assert [j.id for j in there.jobs] == ["local.fixtures", "local.reference"]
    assert all(j.status == "ran" and j.duration_s > 0 for j in there.jobs)
    for name in ("matrix.md", "matrix.html"):
        assert (merged / name).exists()


# -- merge fed bad results ---------------------------------------------------------------------


@pytest.fixture
def plan(tmp_path) -> tuple[MatrixPlan, Path]:
    plan = make_plan(here="local", plugins=["toy_0_81", "reference"], frameworks=["0.81", "0.106"])
    path = tmp_path / "plan.json"
    path.write_text(plan.model_dump_json(indent=2))
    return plan, path


def _result(plan: MatrixPlan, cell_id: str, *, plan_id: str | None = None, environment: str = "local",
            status: CellStatus = CellStatus.PASSED) -> CellReport:
    job = plan.job(cell_id) if plan_id is None else plan.cells[0]
    return CellReport(
        plan_id=plan_id or plan.plan_id, cell_id=cell_id, suite_version=plan.suite_version,
        environment=EnvironmentInfo(name=environment, python="3.11.7", numba="0.68.1", status="ran"),
        started_at="2026-11-23T00:00:00+00:00", duration_s=1.5,
        plugins=[PluginInfo(name=p, kind="python", environment=environment, identity=p) for p in job.plugins],
        cells=[CellResult(plugin=p, environment=environment, framework_version=v, status=status,
                          accepted=True, rule="exact") for p in job.plugins for v in job.frameworks])


def _write(path: Path, report: CellReport) -> Path:
    path.write_text(report.model_dump_json())
    return path


def _merge(plan_path: Path, *results: Path, output: Path) -> int:
    return main(["matrix", "merge", "--plan", str(plan_path), *map(str, results), "--output", str(output)])


def test_a_job_without_a_result_is_red_missing_cells(plan, tmp_path, capsys):
    plan, path = plan
    ok = _write(tmp_path / "a.json", _result(plan, "local.fixtures"))
    assert _merge(path, ok, output=tmp_path / "out") == ExitCode.FAILURE
    text = capsys.readouterr().out
    assert "cells: 2 passed, 0 failed, 0 refused, 0 error, 2 missing" in text
    assert "RED reference at 0.81 (local): missing: no result: job local.reference did not report" in text
    report = MatrixReport.model_validate_json((tmp_path / "out" / "matrix.json").read_text())
    assert [j.status for j in report.jobs] == ["ran", "missing"]
    assert report.cell("reference", "0.106").status is CellStatus.MISSING
    html = (tmp_path / "out" / "matrix.html").read_text()
    assert html.count('<td class="cell missing"') == 2 and "why: no result" in html
    assert "❔ no result" in (tmp_path / "out" / "matrix.md").read_text()


def test_a_result_whose_environment_failed_makes_its_cells_errors(plan, tmp_path, capsys):
    plan, path = plan
    broken_env = _result(plan, "local.reference").model_copy(update={"cells": [], "error": "tox could not build it"})
    files = [_write(tmp_path / "a.json", _result(plan, "local.fixtures")), _write(tmp_path / "b.json", broken_env)]
    assert _merge(path, *files, output=tmp_path / "out") == ExitCode.FAILURE
    report = MatrixReport.model_validate_json((tmp_path / "out" / "matrix.json").read_text())
    assert report.cell("reference", "0.81").status is CellStatus.ERROR
    assert report.cell("reference", "0.81").error == "tox could not build it"
    capsys.readouterr()


def test_every_job_reported_and_green_is_exit_0_and_a_folder_is_its_json_files(plan, tmp_path, capsys):
    plan, path = plan
    results = tmp_path / "results"
    results.mkdir()
    for job in plan.cells:
        _write(results / f"renamed-{job.id}.json", _result(plan, job.id))  # the name is never trusted
    assert _merge(path, results, results / "renamed-local.fixtures.json", output=tmp_path / "out") == ExitCode.OK
    assert "cells: 4 passed" in capsys.readouterr().out


def _bad(name: str, text: str | bytes) -> tuple[str, str | bytes]:
    return name, text


BROKEN = [
    ("empty", b"", "is not a matrix cell result"),
    ("truncated", None, "is not a matrix cell result"),
    ("not JSON", b"{not json", "is not a matrix cell result"),
    ("a JSON list", b"[1, 2]", "is not a matrix cell result"),
    ("not UTF-8", b"\xff\xfe\x00garbage", "cannot read the result"),
    ("the plan itself", "PLAN", "is not a matrix cell result"),
]


@pytest.mark.parametrize("what, content, message", BROKEN, ids=[b[0] for b in BROKEN])
def test_a_broken_result_is_refused_with_one_line_and_nothing_written(plan, tmp_path, capsys, what, content,
                                                                       message):
    plan, path = plan
    good = _write(tmp_path / "good.json", _result(plan, "local.fixtures"))
    if content is None:
        content = good.read_bytes()[: len(good.read_bytes()) // 2]
    elif content == "PLAN":
        content = path.read_bytes()
    bad = tmp_path / "bad.json"
    bad.write_bytes(content)
    before = {p: p.read_bytes() for p in (good, bad, path)}
    assert _merge(path, good, bad, output=tmp_path / "out") == ExitCode.BAD_INPUT
    captured = capsys.readouterr()
    (line,) = captured.err.splitlines()
    assert str(bad) in line and message in line
    assert not (tmp_path / "out").exists()
    assert {p: p.read_bytes() for p in before} == before


def test_a_result_of_another_plan_is_refused(plan, tmp_path, capsys):
    plan, path = plan
    other = make_plan(here="local", plugins=["toy_0_81"], frameworks=["0.95"])
    foreign = _write(tmp_path / "foreign.json", _result(other, "local.fixtures"))
    assert _merge(path, foreign, output=tmp_path / "out") == ExitCode.BAD_INPUT
    (line,) = capsys.readouterr().err.splitlines()
    assert line == (f"pjrt-hub matrix: {foreign} is a result of another plan ({other.plan_id}; "
                    f"this plan is {plan.plan_id})")
    assert not (tmp_path / "out").exists()


def test_a_job_the_plan_does_not_have_or_of_another_environment_is_refused(plan, tmp_path, capsys):
    plan, path = plan
    stray = _result(plan, "local.fixtures").model_copy(update={"cell_id": "local.nosuch"})
    assert _merge(path, _write(tmp_path / "s.json", stray), output=tmp_path / "out") == ExitCode.BAD_INPUT
    assert "reports job 'local.nosuch', which plan" in capsys.readouterr().err
    elsewhere = _result(plan, "local.fixtures", environment="matrix-py312-numbalatest")
    assert _merge(path, _write(tmp_path / "e.json", elsewhere), output=tmp_path / "out") == ExitCode.BAD_INPUT
    assert "ran in environment 'matrix-py312-numbalatest'; job local.fixtures is planned for 'local'" in \
        capsys.readouterr().err


def test_a_job_reported_twice_is_an_error(plan, tmp_path, capsys):
    plan, path = plan
    one = _write(tmp_path / "one.json", _result(plan, "local.fixtures"))
    two = _write(tmp_path / "two.json", _result(plan, "local.fixtures", status=CellStatus.FAILED))
    assert _merge(path, one, two, output=tmp_path / "out") == ExitCode.BAD_INPUT
    (line,) = capsys.readouterr().err.splitlines()
    assert line == f"pjrt-hub matrix: job 'local.fixtures' has two results: {one} and {two}"


def test_a_bad_plan_is_refused(tmp_path, capsys):
    bad = tmp_path / "plan.json"
    bad.write_text('{"plan_id": 3}')
    assert main(["matrix", "merge", "--plan", str(bad), "--output", str(tmp_path / "o")]) == ExitCode.BAD_INPUT
    assert "is not a matrix plan" in capsys.readouterr().err
    assert main(["matrix", "cell", "x", "--plan", str(tmp_path / "none.json"), "--output", str(tmp_path)]) == \
        ExitCode.BAD_INPUT
    assert "cannot read the plan" in capsys.readouterr().err


def test_cell_refuses_a_job_the_plan_does_not_have(plan, tmp_path, capsys):
    plan, path = plan
    assert main(["matrix", "cell", "nosuch", "--plan", str(path), "--output", str(tmp_path / "r")]) == \
        ExitCode.USAGE
    assert "has no job 'nosuch' (its jobs: local.fixtures, local.reference)" in capsys.readouterr().err


# -- jobs through tox ----------------------------------------------------------------------------

FAKE_TOX = textwrap.dedent("""\
    #!{python}
    # Stands in for tox: runs tox.ini's matrix command in this environment for each -e environment;
    # an environment named *broken* fails as a tox environment that cannot be built does.
    import subprocess, sys
    args = sys.argv[1:]
    if args[:1] == ["-c"]:
        args = args[2:]
    envs = args[args.index("-e") + 1].split(",")
    posargs = args[args.index("--") + 1:]
    code = 0
    for env in envs:
        if "broken" in env:
            print(f"{{env}}: ERROR could not install deps", flush=True)
            code = 1
            continue
        done = subprocess.run([sys.executable, "-m", "pjrt_hub.cli", "matrix", "cell", "--no-tox", "--tox-env", env,
                               *posargs])
        code = code or done.returncode
    sys.exit(code)
""")


@pytest.fixture
def fake_tox(tmp_path, monkeypatch):
    script = tmp_path / "bin" / "tox"
    script.parent.mkdir()
    script.write_text(FAKE_TOX.format(python=sys.executable))
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", f"{script.parent}{os.pathsep}{os.environ['PATH']}")
    return script


def test_jobs_of_tox_environments_run_through_tox_and_a_broken_one_is_an_error(fake_tox, tmp_path, capsys):
    plan = make_plan(environments=["matrix-py311-numbalatest", "matrix-py311-broken"], plugins=["toy_0_81"],
                     frameworks=["0.81"], cases=["client/platform_name"], split="environment")
    plan_path = tmp_path / "plan.json"
    plan_path.write_text(plan.model_dump_json())
    # One job, as a CI runner runs it.
    assert main(["matrix", "cell", "py311-numbalatest", "--plan", str(plan_path), "--output",
                 str(tmp_path / "one"), "--cache", str(tmp_path / "cache")]) == ExitCode.OK
    one = CellReport.model_validate_json((tmp_path / "one" / "py311-numbalatest.json").read_text())
    assert one.environment.name == "matrix-py311-numbalatest" and one.cells[0].status is CellStatus.PASSED
    assert main(["matrix", "cell", "py311-broken", "--plan", str(plan_path), "--output",
                 str(tmp_path / "one")]) == ExitCode.FAILURE
    broken = CellReport.model_validate_json((tmp_path / "one" / "py311-broken.json").read_text())
    assert "tox environment matrix-py311-broken gave no result (exit 1)" in broken.error
    assert "could not install deps" in broken.error
    capsys.readouterr()
    # Every job at once, as the local `pjrt-hub matrix` runs them (tox run-parallel).
    reports = run_plan(plan, plan_path, tmp_path / "all", cache_dir=tmp_path / "cache")
    assert [r.cell_id for r in reports] == ["py311-numbalatest", "py311-broken"]
    assert reports[0].cells[0].status is CellStatus.PASSED and reports[0].cells[0].cached
    assert reports[1].error.startswith("tox environment matrix-py311-broken gave no result")
    assert json.loads((tmp_path / "all" / "py311-broken.json").read_text())["error"] == reports[1].error


def test_environments_left_out_of_the_plan_are_noted_not_red(tmp_path, capsys):
    plan = make_plan(environments=["matrix-py311-numbalatest", "matrix-py311-cplugins"], plugins=["toy_0_81"],
                     frameworks=["0.81"])
    assert [c.id for c in plan.cells] == ["py311-numbalatest.fixtures"]
    (left,) = plan.not_planned
    assert (left.name, left.note) == ("matrix-py311-cplugins", "none of the selected plugins is in it")
    path = tmp_path / "plan.json"
    path.write_text(plan.model_dump_json())
    result = _result(plan, "py311-numbalatest.fixtures", environment="matrix-py311-numbalatest")
    assert _merge(path, _write(tmp_path / "r.json", result), output=tmp_path / "out") == ExitCode.OK
    assert "environment matrix-py311-cplugins: missing (none of the selected plugins is in it)" in \
        capsys.readouterr().out
