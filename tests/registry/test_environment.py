"""Every documented environment variable means the same to every entry point.

A variable of the README's environment table that shapes the registry is set, and each entry point
that builds a registry is asked about the same plugin: ``pjrt-hub list`` and ``check``, the
conformance suite through pytest (``pytest --pjrt-plugin``) and through ``pjrt-hub conformance``,
``pjrt-hub bench`` and ``pjrt-hub matrix plan``. Each must show the variable's effect. The
plugin is the toy at PJRT API 0.116, which the newest framework accepts (a minor behind, inside the
forward-compatibility window) until strict mode asks for an exact match.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from pjrt_hub import RegistrySettings
from pjrt_hub.abi import history
from pjrt_hub.cli import ExitCode, main

from ..conformance.conftest import InnerPytest
from ..fixtures import install_toy

README = Path(__file__).resolve().parents[2] / "README.md"

#: The registry's variables, each with a value that changes what happens to the toy plugin.
REGISTRY_VARIABLES = {
    "PJRT_HUB_STRICT": "1",
    "ENABLE_PJRT_COMPATIBILITY": "false",
    "PJRT_HUB_DISABLE_PLUGINS": "toy",
    "PJRT_HUB_PLUGINS": "numba_cpu",
    "PJRT_HUB_PLUGIN_AUTOLOAD": "0",
    "PJRT_DEVICE": "toy",
    "PJRT_NAMES_AND_LIBRARY_PATHS": "cfake:{missing}",
}
#: Documented variables that are not the registry's, and who reads them instead.
OTHER_VARIABLES = {
    "PJRT_HUB_CACHE": "the caches (numba, probe, wheels, matrix)",
    "PJRT_HUB_PROBE_CACHE": "the C bridge's probe cache",
    "PJRT_HUB_TRACEBACK": "the CLI's error handler",
    "PJRT_HUB_JAX_PLUGINS": "pjrt_hub.jax's jax_plugins entry point",
    "PJRT_HUB_NUMBA_TIERS": "numba_cpu's tiers (tests/backends/numba_cpu/test_tiers.py)",
    "PJRT_HUB_NUMBA_POOL": "numba_cpu's pool (tests/backends/numba_cpu/test_threads.py)",
    "PJRT_HUB_NUMBA_COMPILE_AFTER": "numba_cpu's tiers (tests/backends/numba_cpu/test_tiers.py)",
    "PJRT_HUB_NUMBA_VECMATH": "numba_cpu's exp path (tests/backends/numba_cpu/test_fused_exp.py)",
    "PJRT_HUB_MACHINE_KERNELS": "numba_cpu's machine kernels (tests/backends/numba_cpu/test_machine_kernels.py)",
    "PJRT_HUB_MACHINE_CACHE": "numba_cpu's machine kernels (tests/backends/numba_cpu/test_machine_kernels.py)",
    "NUMBA_THREADING_LAYER": "numba; numba_cpu keeps the user's choice (tests/backends/numba_cpu/test_threads.py)",
    "MALLOC_TRIM_THRESHOLD_": "glibc; numba_cpu keeps the user's tuning (tests/backends/numba_cpu/test_heap.py)",
    "NUMPY_MADVISE_HUGEPAGE": "numpy; numba_cpu keeps the user's choice (tests/backends/numba_cpu/test_heap.py)",
}
#: The newest PJRT API the framework acts as by default, and the toy's, a minor behind it.
NEWEST = str(history.NEWEST_KNOWN)
TOY_VERSION = "0.116"


def test_the_readme_documents_exactly_these_variables():
    text = README.read_text()
    table = text[text.index("### Environment"):]
    table = table[:table.index("\n### ")]
    documented = set(re.findall(r"^\| `([A-Z_]+)=", table, flags=re.M))
    # ENABLE_PJRT_COMPATIBILITY is documented with the version policy, as strict mode's upstream name.
    assert documented | {"ENABLE_PJRT_COMPATIBILITY"} == set(REGISTRY_VARIABLES) | set(OTHER_VARIABLES)


@pytest.mark.parametrize("name", sorted(REGISTRY_VARIABLES))
def test_the_settings_read_each_registry_variable(name, tmp_path):
    value = REGISTRY_VARIABLES[name].format(missing=tmp_path / "missing.so")
    default, changed = RegistrySettings.from_environment({}), RegistrySettings.from_environment({name: value})
    assert changed != default, f"RegistrySettings.from_environment ignores {name}={value}"


# -- the entry points ----------------------------------------------------------------------------


def cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def listed(capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    code, out, _ = cli(capsys, "list", "--json")
    assert code == ExitCode.OK, out
    return {p["name"]: p for p in json.loads(out)["plugins"]}


def through_pytest(inner: InnerPytest, plugin: str) -> tuple[int, dict[str, Any] | None, str]:
    """``pytest --pjrt-plugin PLUGIN`` on the case every plugin has: the exit status, the
    plugin's part of the report, and what pytest said."""
    run = inner.run("-p", "pjrt_hub", "--pjrt-plugin", plugin, "--pjrt-case", "version/loaded", "--pjrt-in-process",
                    "--pjrt-report", "report.json")
    path = inner.path / "report.json"
    report = json.loads(path.read_text())["plugins"][0] if path.exists() else None
    path.unlink(missing_ok=True)
    return run.ret, report, run.out + run.err


def through_conformance(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, dict[str, Any]]:
    code, out, err = cli(capsys, "conformance", "--case", "version/loaded", "--json", *argv)
    assert out, err
    return code, json.loads(out)["plugins"][0]


def benched(capsys: pytest.CaptureFixture[str], plugin: str) -> tuple[int, str]:
    """``bench`` stops before it measures anything when the plugin is not loaded: only such runs here."""
    code, _, err = cli(capsys, "bench", "--plugin", plugin, "--program", "perf_softmax", "--no-warm")
    return code, err


def planned(capsys: pytest.CaptureFixture[str]) -> tuple[int, dict[str, Any] | None, str]:
    code, out, err = cli(capsys, "matrix", "plan", "--no-tox", "--no-fixtures", "--format", "json")
    if code != ExitCode.OK:
        return code, None, err
    plan = json.loads(out)
    return code, plan, err


def rows(plan: dict[str, Any]) -> set[str]:
    return {p for cell in plan["cells"] for p in cell["plugins"]}


@pytest.fixture
def toy(fake_dist) -> str:
    return install_toy(fake_dist, api_version=TOY_VERSION)


@pytest.fixture
def inner(tmp_path: Path) -> InnerPytest:
    root = tmp_path / "project"
    root.mkdir()
    return InnerPytest(root)


def test_without_the_variables_every_entry_point_takes_the_toy(toy, capsys, inner):
    # The control: what each variable below changes.
    assert listed(capsys)["toy"]["outcome"] == "loaded"
    assert cli(capsys, "check", "--plugin", "toy")[0] == ExitCode.OK
    ret, report, said = through_pytest(inner, "toy")
    assert ret == 0 and report["load_outcome"] == "loaded", said
    assert through_conformance(capsys, "--plugin", "toy")[1]["load_outcome"] == "loaded"
    code, plan, err = planned(capsys)
    assert code == ExitCode.OK and "toy" in rows(plan) and plan["strict"] is False, err


@pytest.mark.parametrize("variable", ["PJRT_HUB_STRICT", "ENABLE_PJRT_COMPATIBILITY"])
def test_strict_mode_refuses_the_toy_everywhere(variable, toy, capsys, inner, monkeypatch):
    value = REGISTRY_VARIABLES[variable]
    monkeypatch.setenv(variable, value)
    said = f"{variable}={value}"
    record = listed(capsys)["toy"]
    assert record["outcome"] == "incompatible" and record["verdict"]["rule"] == "strict"
    code, out, _ = cli(capsys, "check", "--plugin", "toy")
    assert code == ExitCode.FAILURE and said in out
    ret, report, output = through_pytest(inner, "toy")
    assert ret == 1 and report["load_outcome"] == "incompatible" and report["verdict_rule"] == "strict", output
    code, report = through_conformance(capsys, "--plugin", "toy")
    assert code == ExitCode.FAILURE and report["load_outcome"] == "incompatible" and report["verdict_rule"] == "strict"
    code, err = benched(capsys, "toy")
    assert code == ExitCode.FAILURE and said in err and "incompatible" in err
    code, plan, err = planned(capsys)
    assert code == ExitCode.OK and plan["strict"] is True, err


def test_the_block_list_keeps_the_toy_out_everywhere(toy, capsys, inner, monkeypatch):
    monkeypatch.setenv("PJRT_HUB_DISABLE_PLUGINS", "toy")
    assert listed(capsys)["toy"]["outcome"] == "blocked"
    assert cli(capsys, "check", "--plugin", "toy")[0] == ExitCode.FAILURE
    ret, report, said = through_pytest(inner, "toy")
    assert ret == 1 and report["load_outcome"] == "blocked" and "PJRT_HUB_DISABLE_PLUGINS" in report["load_reason"]
    assert through_conformance(capsys, "--plugin", "toy")[1]["load_outcome"] == "blocked"
    code, err = benched(capsys, "toy")
    assert code == ExitCode.FAILURE and "blocked by PJRT_HUB_DISABLE_PLUGINS" in err
    code, plan, err = planned(capsys)
    assert code == ExitCode.OK and "toy" not in rows(plan) and "numba_cpu" in rows(plan), err


def test_the_allow_list_keeps_the_toy_out_everywhere(toy, capsys, inner, monkeypatch):
    monkeypatch.setenv("PJRT_HUB_PLUGINS", "numba_cpu")
    record = listed(capsys)["toy"]
    assert record["outcome"] == "blocked" and "allow-list" in record["reason"]
    assert cli(capsys, "check", "--plugin", "toy")[0] == ExitCode.FAILURE
    # Naming a plugin to the suite does not lift the user's allow-list.
    ret, report, said = through_pytest(inner, "toy")
    assert ret == 1 and report["load_outcome"] == "blocked" and "allow-list" in report["load_reason"], said
    assert through_conformance(capsys, "--plugin", "toy")[1]["load_outcome"] == "blocked"
    code, err = benched(capsys, "toy")
    assert code == ExitCode.FAILURE and "allow-list" in err
    code, plan, err = planned(capsys)
    assert code == ExitCode.OK and rows(plan) == {"numba_cpu"}, err


def test_autoload_off_finds_no_installed_plugin_anywhere(toy, capsys, inner, monkeypatch):
    monkeypatch.setenv("PJRT_HUB_PLUGIN_AUTOLOAD", "0")
    assert listed(capsys) == {}
    assert cli(capsys, "check", "--plugin", "toy")[0] == ExitCode.NOT_FOUND
    ret, report, said = through_pytest(inner, "toy")
    assert ret == pytest.ExitCode.USAGE_ERROR and "no plugin named 'toy'" in said
    code, _, err = cli(capsys, "conformance", "--plugin", "toy", "--case", "version/loaded")
    assert code == ExitCode.NOT_FOUND and "no plugin named toy" in err
    code, err = benched(capsys, "toy")
    assert code == ExitCode.NOT_FOUND and "no plugin named 'toy'" in err
    code, plan, err = planned(capsys)
    assert code == ExitCode.USAGE and "PJRT_HUB_PLUGIN_AUTOLOAD=0" in err


def test_libraries_named_in_the_environment_are_candidates_everywhere(toy, capsys, inner, monkeypatch, tmp_path):
    missing = tmp_path / "missing.so"
    monkeypatch.setenv("PJRT_NAMES_AND_LIBRARY_PATHS", REGISTRY_VARIABLES["PJRT_NAMES_AND_LIBRARY_PATHS"]
                       .format(missing=missing))
    record = listed(capsys)["cfake"]
    assert record["outcome"] == "failed" and "does not exist" in record["reason"]
    assert cli(capsys, "check", "--plugin", "cfake")[0] == ExitCode.FAILURE
    ret, report, said = through_pytest(inner, "cfake")
    assert ret == 1 and report["kind"] == "c" and report["load_outcome"] == "failed", said
    assert through_conformance(capsys, "--plugin", "cfake")[1]["load_outcome"] == "failed"
    code, err = benched(capsys, "cfake")
    assert code == ExitCode.FAILURE and "does not exist" in err
    code, plan, err = planned(capsys)
    assert code == ExitCode.OK and "cfake" in rows(plan), err


def test_the_default_device_is_the_plugin_commands_run_on(toy, capsys, monkeypatch):
    # Only commands that run on one plugin when none is named have a default: list, check and the
    # matrix cover every plugin, pytest --pjrt-plugin and bench --plugin need names (bench without
    # one compares numba_cpu with reference, by design).
    monkeypatch.setenv("PJRT_DEVICE", "toy")
    code, report = through_conformance(capsys)
    assert code == ExitCode.OK and report["plugin"] == "toy"


def test_a_matrix_cell_is_strict_because_its_plan_is(toy, capsys, monkeypatch, tmp_path, site):
    # The plan carries strict mode to its cells, wherever they run: here the variable is gone
    # by the time the job runs, as on a CI runner other than the planner.
    from pjrt_hub.compat_matrix import CellCache, make_plan, run_job_here

    monkeypatch.setenv("PJRT_HUB_STRICT", "1")
    options = dict(here="local", frameworks=[NEWEST], plugins=["toy"], fixtures=False, cases=["version/loaded"])
    plan = make_plan(**options)
    assert plan.strict
    monkeypatch.delenv("PJRT_HUB_STRICT")
    monkeypatch.setenv("PYTHONPATH", str(site))  # the cell's process finds the toy there
    cache = CellCache(tmp_path / "cache")
    (cell,) = run_job_here(plan, plan.cells[0], cache=cache).cells
    assert cell.status.value == "refused" and cell.rule == "strict", cell
    # A lenient plan's cell is judged (and cached) apart from the strict one.
    lenient = make_plan(**options)
    assert not lenient.strict
    (cell,) = run_job_here(lenient, lenient.cells[0], cache=cache).cells
    assert cell.status.value == "passed" and not cell.cached and cell.rule != "strict", cell
