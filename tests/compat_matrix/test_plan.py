"""``pjrt-hub matrix plan``: the jobs as GitHub, GitLab and JSON data; the shipped workflow and tox.ini
agree with it; an unknown plugin is exit 5."""

from __future__ import annotations

import configparser
import json
import re
import shlex
from pathlib import Path

import pytest
import yaml

from pjrt_hub.cli import ExitCode, main
from pjrt_hub.compat_matrix import (DEFAULT_ENVIRONMENTS, FIXTURE_PLUGINS, MatrixPlan, PluginNotFound, make_plan,
                                    render_plan)

ROOT = Path(__file__).resolve().parents[2]
WORKFLOW = ROOT / ".github" / "workflows" / "compat-matrix.yml"


def test_the_default_plan_has_a_job_per_plugin_group_of_every_environment():
    plan = make_plan()
    ids = [c.id for c in plan.cells]
    assert len(ids) == len(set(ids))
    # The real C plugins' environment (downloads, other vendors' code) runs when asked for.
    assert {c.environment for c in plan.cells} == {e.name for e in DEFAULT_ENVIRONMENTS if not e.c_plugins}
    assert not any(c.environment == "matrix-py311-cplugins" for c in plan.cells)
    plan = make_plan(c_plugins=True)
    assert {c.environment for c in plan.cells} == {e.name for e in DEFAULT_ENVIRONMENTS}
    fixtures = plan.job("py311-numbalatest.fixtures")
    assert fixtures.plugins == [f.name for f in FIXTURE_PLUGINS] == fixtures.fixtures
    assert plan.job("py311-numbamin.numba_cpu").plugins == ["numba_cpu"]
    assert plan.job("py313-numbalatest.reference").python == "3.13"
    assert [c.plugins for c in plan.cells if c.environment == "matrix-py311-cplugins"] == [
        ["xla_cpu_pjrt"], ["fastatomstruct_xla_cpu"], ["lammps_jax_pjrt_cpu"]]
    assert all(c.frameworks == ["0.81", "0.95", "0.106", "0.115", plan.frameworks[-1]] for c in plan.cells)
    # The id is the content's: the same selection plans the same, another one differs.
    assert make_plan(c_plugins=True).plan_id == plan.plan_id
    assert make_plan(c_plugins=True, frameworks=["0.81"]).plan_id != plan.plan_id
    assert make_plan().plan_id != plan.plan_id


def test_split_by_environment_gives_one_job_each():
    plan = make_plan(split="environment", c_plugins=True)
    assert [c.id for c in plan.cells] == [e.name.removeprefix("matrix-") for e in DEFAULT_ENVIRONMENTS]
    assert plan.job("py311-numbamin").plugins == [f.name for f in FIXTURE_PLUGINS] + ["numba_cpu", "reference"]


def test_github_format_is_matrix_include_data_with_the_command_of_each_job(tmp_path, capsys):
    assert main(["matrix", "plan", "--format", "github", "--output", str(tmp_path / "plan.json"),
                 "--plugin", "numba_cpu", "--framework-version", "0.106"]) == ExitCode.OK
    data = json.loads(capsys.readouterr().out)
    plan = MatrixPlan.model_validate_json((tmp_path / "plan.json").read_text())
    assert [row["id"] for row in data["include"]] == [c.id for c in plan.cells]
    assert len(data["include"]) == 4  # numba_cpu in the four numba environments
    for row in data["include"]:
        assert set(row) == {"id", "environment", "tox_env", "python", "plugins", "frameworks", "command"}
        assert row["plugins"] == "numba_cpu" and row["frameworks"] == "0.106"
        assert shlex.split(row["command"]) == ["pjrt-hub", "matrix", "cell", row["id"], "--plan", "plan.json",
                                               "--output", "results"]


def test_gitlab_format_is_a_child_pipeline_yaml(capsys):
    assert main(["matrix", "plan", "--format", "gitlab", "--plugin", "reference", "--env",
                 "matrix-py312-numbalatest"]) == ExitCode.OK
    pipeline = yaml.safe_load(capsys.readouterr().out)
    assert pipeline["stages"] == ["matrix-cells", "matrix-merge"]
    (name,) = [k for k in pipeline if k.startswith("matrix-cell ")]
    job = pipeline[name]
    assert name == "matrix-cell py312-numbalatest.reference"
    assert job["image"] == "python:3.12" and job["stage"] == "matrix-cells"
    assert job["needs"] == [{"pipeline": "$PARENT_PIPELINE_ID", "job": "matrix-plan"}]
    assert job["script"][-1] == "pjrt-hub matrix cell py312-numbalatest.reference --plan plan.json --output results"
    assert job["artifacts"]["paths"] == ["results/py312-numbalatest.reference.json"]
    merge = pipeline["matrix-merge"]
    assert merge["stage"] == "matrix-merge" and merge["when"] == "always"
    assert {"job": name, "artifacts": True} in merge["needs"]
    assert merge["script"][-1] == "pjrt-hub matrix merge --plan plan.json results --output matrix"


def test_json_format_is_the_plan(capsys):
    assert main(["matrix", "plan", "--no-tox", "--plugin", "toy_0_81"]) == ExitCode.OK
    plan = MatrixPlan.model_validate_json(capsys.readouterr().out)
    (job,) = plan.cells
    assert (job.id, job.environment, job.tox_env, job.plugins) == ("local.fixtures", "local", None, ["toy_0_81"])


@pytest.mark.parametrize("command", [["matrix", "plan"], ["matrix", "--no-tox"], ["matrix"]])
def test_an_unknown_plugin_is_exit_5_with_one_line(command, tmp_path, capsys):
    assert main([*command, "--plugin", "nosuch", *(["--output", str(tmp_path / "m")] if command[-1] != "plan"
                                                    else [])]) == ExitCode.NOT_FOUND
    captured = capsys.readouterr()
    assert captured.out == ""
    (line,) = captured.err.splitlines()
    assert line.startswith("pjrt-hub matrix: no plugin named 'nosuch' in the matrix (its plugins: ")
    assert "toy_0_81" in line
    assert not (tmp_path / "m").exists()  # nothing was run or written
    with pytest.raises(PluginNotFound):
        make_plan(plugins=["NUMBA_CPU", "nosuch"])


def test_options_that_do_not_apply_are_usage_errors(capsys):
    assert main(["matrix", "plan", "--no-tox", "--env", "matrix-py311-numbamin"]) == ExitCode.USAGE


def test_a_tox_environment_outside_the_defaults_gets_its_python_from_its_name():
    (job,) = make_plan(environments=["matrix-py312-numbamin"], plugins=["numba_cpu"]).cells
    assert (job.id, job.tox_env, job.python) == ("py312-numbamin.numba_cpu", "matrix-py312-numbamin", "3.12")


def test_the_workflow_is_valid_yaml_that_plans_fans_out_and_merges():
    workflow = yaml.safe_load(WORKFLOW.read_text())
    jobs = workflow["jobs"]
    assert list(jobs) == ["plan", "cell", "merge"]
    assert jobs["cell"]["needs"] == "plan" and jobs["merge"]["needs"] == ["plan", "cell"]
    assert jobs["cell"]["strategy"]["matrix"] == "${{ fromJSON(needs.plan.outputs.matrix) }}"
    assert jobs["cell"]["strategy"]["fail-fast"] is False
    assert "always()" in jobs["merge"]["if"]
    runs = [step["run"] for job in jobs.values() for step in job["steps"] if "run" in step]
    commands = [line.strip() for run in runs for line in run.splitlines() if "pjrt-hub" in line]
    # Only the commands of the matrix: plan, the planned cell command, merge.
    used = {re.search(r"pjrt-hub matrix (\w+)", c).group(1) for c in commands if "pjrt-hub matrix" in c}
    assert used == {"plan", "merge"}
    assert all("pjrt-hub matrix" in c for c in commands)
    assert "${{ matrix.command }}" in runs
    plan_line = next(c for c in commands if "matrix plan" in c)
    assert "--format github" in plan_line and "--output plan.json" in plan_line
    merge_line = next(c for c in commands if "matrix merge" in c)
    assert "--plan plan.json results --output matrix" in merge_line
    uploads = [s for s in jobs["merge"]["steps"] if s.get("uses", "").startswith("actions/upload-artifact")]
    assert uploads and uploads[0]["with"]["path"] == "matrix/"


def _tox_sections() -> dict[str, configparser.SectionProxy]:
    parser = configparser.ConfigParser(interpolation=None)
    parser.read(ROOT / "tox.ini")
    return {name: parser[name] for name in parser.sections()}


def _expand(section: str) -> list[str]:
    """tox's factor expansion of a section name: ``a-{b,c}`` -> ``a-b``, ``a-c``."""
    names = [section]
    while any("{" in n for n in names):
        out = []
        for n in names:
            m = re.search(r"\{([^}]*)\}", n)
            if not m:
                out.append(n)
                continue
            out += [n[:m.start()] + alt + n[m.end():] for alt in m.group(1).split(",")]
        names = out
    return names


def test_tox_defines_every_default_environment_to_run_plan_jobs():
    sections = _tox_sections()
    defined = {env: sec for name, sec in sections.items() if name.startswith("testenv:")
               for env in _expand(name.removeprefix("testenv:"))}
    for env in DEFAULT_ENVIRONMENTS:
        assert env.name in defined, env.name
        assert defined[env.name]["commands"].strip() == "pjrt-hub matrix cell --no-tox --tox-env {envname} {posargs}"
    cplugins = defined["matrix-py311-cplugins"]
    for plugin in next(e for e in DEFAULT_ENVIRONMENTS if e.name == "matrix-py311-cplugins").c_plugins:
        assert plugin.requirement in cplugins["deps"] + cplugins.get("commands_pre", "")


def test_the_minimum_environment_pins_every_minimum_pyproject_declares():
    import tomllib

    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    # "tbb>=2021.6; sys_platform == 'linux'": the version before the environment marker.
    minimum = {re.match(r"[\w-]+", d).group(0).replace("-", "_").lower(): d.split(";")[0].split(">=")[1].strip()
               for d in declared}
    deps = _tox_sections()["testenv:matrix-py{311,312,313}-numba{min,latest}"]["deps"]
    found = re.findall(r"numbamin: ([\w-]+)==([\d.]+)", deps)
    pins = {name.replace("-", "_").lower(): version for name, version in found}
    assert set(pins) == set(minimum)
    for name, version in minimum.items():
        # ">=1.26" is pinned as 1.26.0: the same release.
        assert pins[name].split(".") == (version.split(".") + ["0"] * 3)[: len(pins[name].split("."))], name


def test_render_plan_rejects_an_unknown_format():
    with pytest.raises(Exception, match="unknown plan format"):
        render_plan(make_plan(here="local", plugins=["toy_0_81"]), "circleci")
