"""The built-in plugins' extensions pass the conformance suite's extension cases: every method of
the version declared, answering in the protocol's types on real clients, buffers and programs."""

from __future__ import annotations

from pjrt_hub.cli import ExitCode, main
from pjrt_hub.testing import ConformanceReport


def test_numba_cpu_and_reference_pass_the_extension_cases(capsys):
    code = main(["conformance", "--plugin", "numba_cpu", "--plugin", "reference", "--case", "extensions/*", "--json"])
    report = ConformanceReport.model_validate_json(capsys.readouterr().out)
    assert code == ExitCode.OK and report.ok
    for plugin in report.plugins:
        passed = {c.id for c in plugin.cases if c.outcome.value == "passed"}
        assert {"extensions/Layouts", "extensions/MemoryDescriptions", "extensions/declared_are_offered"} <= passed, \
            (plugin.plugin, passed)
