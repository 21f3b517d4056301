"""``pjrt-hub conformance``: exit status, JSON with a schema, JUnit, every case in the report."""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET

import pytest

from pjrt_hub.cli import ExitCode, main
from pjrt_hub.testing import CASES, ConformanceReport

from ..fixtures import install_plugin, install_toy
from ..fixtures.broken import BROKEN


def test_a_conforming_plugin_exits_zero_and_lists_every_case(fake_dist, capsys):
    install_toy(fake_dist)
    assert main(["conformance", "--plugin", "toy", "--case", "client/*", "--case", "abi/*", "-v"]) == ExitCode.OK
    out = capsys.readouterr().out
    abi = sum(1 for case_id in CASES if case_id.startswith("abi/"))
    clients = sum(1 for case_id in CASES if case_id.startswith("client/"))
    # The toy skips the client cases it has nothing for (multi-process jobs, device counts).
    (passed, skipped) = map(int, re.findall(r"toy \(python, pjrt-fixture-toy 1\.0, PJRT API 0\.117\): (\d+) passed, "
                                            r"0 failed, 0 xfailed, (\d+) skipped", out)[0])
    assert passed + skipped == clients + abi and passed >= clients - 3
    assert "  passed   client/lookup_device_negative_id" in out
    # The C-only checks share their reason: it is printed once, above their ids.
    assert f"  skipped  {abi} cases: a check for c plugins; toy is a python plugin\n           abi/" in out
    assert out.count("a check for c plugins") == 1
    assert all(case_id in out for case_id in CASES if case_id.startswith(("abi/", "client/")))
    assert out.rstrip().endswith("OK: no case failed.")


def test_a_pass_prints_a_summary_and_verbose_lists_every_case(fake_dist, capsys):
    install_toy(fake_dist)
    args = ["conformance", "--plugin", "toy", "--case", "client/*", "--case", "abi/*"]
    assert main(args) == ExitCode.OK
    out = capsys.readouterr().out
    (passed,) = re.findall(r"PJRT API 0\.117\): (\d+) passed, 0 failed", out)
    assert f"  passed   {passed} cases (-v lists them)" in out
    assert "client/lookup_device_negative_id" not in out and "abi/api_struct_size" not in out
    assert len(out.splitlines()) < 10, out
    assert main([*args, "--verbose"]) == ExitCode.OK
    out = capsys.readouterr().out
    assert all(case_id in out for case_id in CASES if case_id.startswith(("abi/", "client/")))


def test_a_failing_case_exits_one_with_json_and_junit(fake_dist, capsys, tmp_path):
    install_plugin(fake_dist, "offbyone", BROKEN["wrong_result"].source)
    junit = tmp_path / "junit.xml"
    code = main(["conformance", "--plugin", "offbyone", "--case", "execute/add_one_program", "--json",
                 "--junit", str(junit)])
    assert code == ExitCode.FAILURE
    report = ConformanceReport.model_validate_json(capsys.readouterr().out)
    assert not report.ok
    (case,) = report.plugins[0].cases
    assert case.outcome.value == "failed" and "gave [43.0, 44.0, 45.0, 46.0]" in case.message
    suite = ET.parse(junit).getroot()
    assert suite.find(".//testcase/failure") is not None


def test_an_unknown_plugin_exits_not_found(fake_dist, capsys):
    install_toy(fake_dist)
    assert main(["conformance", "--plugin", "nope"]) == ExitCode.NOT_FOUND
    err = capsys.readouterr().err
    assert "no plugin named nope (found: " in err and "toy" in err


def test_the_schema_is_published(capsys):
    assert main(["conformance", "--schema"]) == ExitCode.OK
    schema = json.loads(capsys.readouterr().out)
    assert schema["title"] == "ConformanceReport"
    assert {"suite_version", "plugins", "ok"} <= set(schema["properties"])
    assert "CaseResult" in schema["$defs"]


def test_the_framework_version_is_acted(fake_dist, capsys):
    install_toy(fake_dist, api_version="0.105", min_framework_version="0.81")
    # version/loaded runs at 0.81, so the run tests something (a run that skipped everything is not OK).
    assert main(["conformance", "--plugin", "toy", "--case", "devices/attributes", "--case", "version/loaded",
                 "--framework-version", "0.81", "--json"]) == ExitCode.OK
    report = json.loads(capsys.readouterr().out)
    assert report["framework_version"] == "0.81"
    (case,) = [c for c in report["plugins"][0]["cases"] if c["id"] == "devices/attributes"]
    assert case["outcome"] == "skipped" and "the framework acts as 0.81" in case["message"]
    assert main(["conformance", "--plugin", "toy", "--case", "devices/attributes", "--framework-version", "0.81",
                 "--json"]) == ExitCode.FAILURE
    report = json.loads(capsys.readouterr().out)
    assert report["ok"] is False and report["plugins"][0]["tested"] is False


def test_a_plugin_that_cannot_be_used_prints_its_cause_once_not_per_case(fake_dist, capsys):
    from .test_broken_plugins import _GET_API_RAISES

    install_plugin(fake_dist, "acme", _GET_API_RAISES)
    assert main(["conformance", "--plugin", "acme", "-v"]) == ExitCode.FAILURE
    out = capsys.readouterr().out
    assert "  FAILED   version/api_version: getting the plugin's Api failed" in out
    cause = "cannot be used (failed: hook pjrt_hub_get_api raised ImportError)"
    (line,) = [line for line in out.splitlines() if cause in line]
    assert line.startswith("  skipped  ") and " cases: plugin acme " in line, line
    assert all(case_id in out for case_id in CASES)  # every case is still named
    # Not a line per case: the skipped ones are listed under their shared reason, several ids a line.
    marks = [line for line in out.splitlines() if line.startswith(("  passed ", "  FAILED ", "  skipped ", "  xfailed"))]
    assert len(marks) < 20, marks


def test_the_json_report_says_the_plugin_failed_where_its_api_failed_in_the_worker(fake_dist, capsys):
    # The cases run in a worker process; the Api is asked for there, and the report takes the
    # plugin's outcome from there.
    from .test_broken_plugins import _GET_API_RAISES

    install_plugin(fake_dist, "acme", _GET_API_RAISES)
    assert main(["conformance", "--plugin", "acme", "--case", "version/*", "--case", "client/platform_name",
                 "--json"]) == ExitCode.FAILURE
    (plugin,) = json.loads(capsys.readouterr().out)["plugins"]
    assert plugin["load_outcome"] == "failed"
    assert plugin["load_reason"] == "hook pjrt_hub_get_api raised ImportError"


def test_the_worker_imports_the_plugin_itself_not_first_in_a_child_of_its_own(fake_dist, tmp_path):
    # The suite imports a Python plugin of another distribution in a child first; a conformance
    # worker is such a process already, and importing it once more there only costs time.
    log = tmp_path / "imports.log"
    source = ("import os, sys\n"
              f"with open({str(log)!r}, 'a') as f:\n"
              "    f.write(f'{os.getpid()} {os.getppid()} {sys.argv[0]}\\n')\n"
              "from pjrt_hub.testing.toy import ToyPlugin\n"
              "plugin = ToyPlugin()\n")
    install_plugin(fake_dist, "counted", source)
    assert main(["conformance", "--plugin", "counted", "--case", "client/platform_name"]) == ExitCode.OK
    lines = [line.split(" ", 2) for line in log.read_text().splitlines()]
    workers = {pid for pid, _, argv0 in lines if argv0.endswith("_worker.py")}
    assert workers, lines  # the cases ran in a worker, which imported the plugin
    assert not [line for line in lines if line[1] in workers], lines


def test_the_window_and_the_floor_are_acted(fake_dist, capsys):
    # A plugin at 0.28 is below the default floor (0.29): refused. --floor-minor lets it past the
    # floor, where the 6-week window refuses it in turn (0.29 superseded it years before 0.117
    # appeared), and the window its refusal names lets it in, as for `check`. Its first client is made
    # in a child (client preflight) and its cases run in a worker process, both under that policy.
    from ..conftest import plugin_source

    fake_dist("old-pjrt", entry_points={"pjrt_hub.plugins": {"old": "old_mod"}},
              files={"old_mod.py": plugin_source("0.28")})
    assert main(["conformance", "--plugin", "old", "--case", "version/loaded", "--json"]) == ExitCode.FAILURE
    (case,) = json.loads(capsys.readouterr().out)["plugins"][0]["cases"]
    assert case["outcome"] == "failed" and "older than the minimum supported version 0.29" in case["message"]
    assert main(["conformance", "--plugin", "old", "--case", "version/loaded", "--floor-minor", "20",
                 "--json"]) == ExitCode.FAILURE
    (case,) = json.loads(capsys.readouterr().out)["plugins"][0]["cases"]
    assert case["outcome"] == "failed" and "outside the 6-week forward-compatibility window" in case["message"]
    (weeks,) = re.findall(r"--window-weeks (\d+)", case["message"])
    assert main(["conformance", "--plugin", "old", "--case", "version/loaded", "--case", "client/platform_name",
                 "--floor-minor", "20", "--window-weeks", weeks, "--json"]) == ExitCode.OK
    report = json.loads(capsys.readouterr().out)
    assert [c["outcome"] for c in report["plugins"][0]["cases"]] == ["passed", "passed"]
    with pytest.raises(SystemExit) as stopped:
        main(["conformance", "--plugin", "old", "--window-weeks", "-1"])
    assert stopped.value.code == ExitCode.USAGE
    assert "--window-weeks: expected a number >= 0, got -1" in capsys.readouterr().err
