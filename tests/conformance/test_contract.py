"""The contract table (pjrt_hub.testing.contract): every behaviour names real cases or why none can
check it, the shipped docs are its rendering, and a failed case says which behaviours it breaks."""

from __future__ import annotations

import fnmatch
import json
from pathlib import Path

import pytest

from pjrt_hub.cli import ExitCode, main
from pjrt_hub.testing import CASES, ConformanceReport
from pjrt_hub.testing import contract
from pjrt_hub.testing.contract import BEHAVIOURS, Behaviour, coverage, render_coverage

from ..fixtures import install_plugin
from ..fixtures.broken import BROKEN

DOCS = Path(__file__).resolve().parents[2] / "docs" / "conformance-coverage.md"


def test_every_case_a_behaviour_names_exists():
    unknown = [(b.function, p) for b in BEHAVIOURS for p in b.cases if not fnmatch.filter(CASES, p)]
    assert unknown == []


def test_a_behaviour_has_cases_or_a_reason_and_never_both():
    with pytest.raises(ValueError, match="not neither"):
        Behaviour("PJRT_Buffer_Delete", "frees the memory")
    with pytest.raises(ValueError, match="not both"):
        Behaviour("PJRT_Buffer_Delete", "frees the memory", cases=("buffers/is_deleted",), untestable="internal")


def test_the_table_reads_the_whole_header():
    table = coverage(list(CASES))
    # Every function family of pjrt_c_api.h the binding exposes is in the table.
    prefixes = {"PJRT_Client_", "PJRT_Buffer_", "PJRT_Event_", "PJRT_Device_", "PJRT_DeviceDescription_",
                "PJRT_Memory_", "PJRT_Executable_", "PJRT_LoadedExecutable_", "PJRT_TopologyDescription_",
                "PJRT_Plugin_", "PJRT_Error_"}
    assert {p for p in prefixes if any(r.function.startswith(p) for r in table.rows)} == prefixes
    assert table.behaviours == len(BEHAVIOURS) and table.checked + table.untestable == table.behaviours
    assert table.checked > table.untestable


def test_the_shipped_docs_are_the_rendered_table():
    assert DOCS.read_text() == render_coverage(coverage(list(CASES))) + "\n", (
        "docs/conformance-coverage.md is stale: pjrt-hub conformance --coverage > docs/conformance-coverage.md")


def test_the_cli_prints_the_table_and_its_json(capsys):
    assert main(["conformance", "--coverage"]) == ExitCode.OK
    assert capsys.readouterr().out.startswith("# What the conformance suite checks of the PJRT C API")
    assert main(["conformance", "--coverage", "--json"]) == ExitCode.OK
    data = json.loads(capsys.readouterr().out)
    assert data["behaviours"] == len(BEHAVIOURS) and len(data["rows"]) == len(BEHAVIOURS)


def test_a_failed_case_names_the_behaviour_it_breaks(fake_dist, capsys, monkeypatch):
    said = Behaviour("PJRT_LoadedExecutable_Execute", "computes the program's results from its arguments",
                     cases=("execute/add_one_*",))
    monkeypatch.setattr(contract, "BEHAVIOURS", (said,))
    install_plugin(fake_dist, "offbyone", BROKEN["wrong_result"].source)
    args = ["conformance", "--plugin", "offbyone", "--case", "execute/add_one_program"]
    assert main([*args, "--json"]) == ExitCode.FAILURE
    (case,) = ConformanceReport.model_validate_json(capsys.readouterr().out).plugins[0].cases
    assert case.contract == ["PJRT_LoadedExecutable_Execute: computes the program's results from its arguments"]
    assert main(args) == ExitCode.FAILURE
    out = capsys.readouterr().out
    assert ("FAILED   execute/add_one_program" in out
            and "breaks PJRT_LoadedExecutable_Execute: computes the program's results from its arguments" in out)
