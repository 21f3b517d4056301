"""The suite as a pytest plugin: ``pytest --pjrt-plugin NAME`` in any project."""

from __future__ import annotations

import json

from pjrt_hub.testing import CASES, ConformanceReport

from ..fixtures import install_plugin, install_toy
from ..fixtures.broken import BROKEN


def test_pjrt_plugin_collects_the_cases_and_writes_the_report(fake_dist, inner):
    install_toy(fake_dist)
    inner.makefile("test_own.py", "def test_the_projects_own_test():\n    assert True\n")
    run = inner.run("-p", "pjrt_hub", "--pjrt-plugin", "toy", "--pjrt-report", "report.json",
                    "--pjrt-case", "client/*", "--pjrt-case", "execute/corpus_softmax", "-v")
    assert run.ret == 0, run.out
    assert "pjrt-conformance[toy]::client/lookup_device PASSED" in run.out
    assert "test_own.py::test_the_projects_own_test PASSED" in run.out
    assert "toy (python, PJRT API 0.117, framework 0.117, suite " in run.out
    clients = sum(1 for case_id in CASES if case_id.startswith("client/"))
    report = ConformanceReport.model_validate_json((inner.path / "report.json").read_text())
    (plugin,) = report.plugins
    # The toy skips the client cases it has nothing for (multi-process jobs, device counts).
    counts = plugin.counts
    assert plugin.ok and counts.passed + counts.skipped == clients and counts.xfailed == 1 and counts.failed == 0
    skipped = f", {counts.skipped} skipped" if counts.skipped else ""
    assert f"{counts.passed + 1} passed{skipped}, 1 xfailed" in run.outcomes()
    softmax = next(c for c in plugin.cases if c.id == "execute/corpus_softmax")
    assert softmax.outcome.value == "xfailed" and "toy compiler" in softmax.limitation
    assert "unsupported op" in softmax.message


def test_only_deselects_the_projects_tests_and_k_selects_cases(fake_dist, inner):
    install_toy(fake_dist)
    inner.makefile("test_own.py", "def test_the_projects_own_test():\n    assert True\n")
    run = inner.run("-p", "pjrt_hub", "--pjrt-plugin", "toy", "--pjrt-only", "-k",
                    "lookup_device_negative_id or platform_name")
    assert run.ret == 0, run.out
    total = len(CASES) + 1  # the project's own test joins the collection, then --pjrt-only drops it
    assert f"collected {total} items / {total - 2} deselected / 2 selected" in run.out
    assert run.outcomes().startswith(f"2 passed, {total - 2} deselected")


def test_a_failing_case_fails_the_run_with_its_message(fake_dist, inner):
    install_plugin(fake_dist, "leaky", BROKEN["survives_delete"].source)
    run = inner.run("-p", "pjrt_hub", "--pjrt-plugin", "leaky", "--pjrt-case", "buffers/is_deleted")
    assert run.ret == 1
    assert "PJRT_Buffer_IsDeleted is false after PJRT_Buffer_Delete" in run.out
    assert run.outcomes().startswith("1 failed")


def test_a_limitation_that_no_longer_holds_fails_as_a_strict_xpass(fake_dist, inner):
    source = ("from pjrt_hub.abi import Limitation\nfrom pjrt_hub.testing.toy import ToyPlugin\n"
              "plugin = ToyPlugin(limitations=[Limitation('no process index yet', ('client/process_index',))])\n")
    install_plugin(fake_dist, "fixed", source)
    run = inner.run("-p", "pjrt_hub", "--pjrt-plugin", "fixed", "--pjrt-case", "client/process_index",
                    "--pjrt-report", "r.json")
    assert run.ret == 1
    case = json.loads((inner.path / "r.json").read_text())["plugins"][0]["cases"][0]
    assert case["outcome"] == "failed" and case["message"].startswith("XPASS(strict)")
    assert "no process index yet" in case["message"]


def test_an_unknown_plugin_is_a_usage_error(fake_dist, inner):
    install_toy(fake_dist)
    run = inner.run("-p", "pjrt_hub", "--pjrt-plugin", "nope")
    assert run.ret == 4
    assert "--pjrt-plugin nope: no plugin named 'nope'; plugins found: " in run.err and "toy" in run.err


def test_without_the_option_the_plugin_changes_nothing(inner):
    # A subprocess, as a normal run is: the entry point loads the plugin module, which must not
    # import the suite, the registry or numpy, nor add a test.
    inner.makefile("test_light.py", """
        import sys

        def test_nothing_heavy_was_imported():
            assert "pjrt_hub.testing.pytest_plugin" in sys.modules
            heavy = [m for m in ("pjrt_hub.testing._session", "pjrt_hub.testing.cases", "pjrt_hub._registry",
                                 "pjrt_hub.abi", "numpy") if m in sys.modules]
            assert heavy == []
    """)
    run = inner.run_subprocess()
    assert run.ret == 0, run.out + run.err
    assert run.outcomes().startswith("1 passed")
    assert "PJRT conformance" not in run.out
