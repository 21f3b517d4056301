"""``pjrt-hub conformance --via c_api``: the suite on a Python plugin served as a ``PJRT_Api``.

The toy plugin (a third-party-like Python plugin) is laid out as a C plugin by pjrt-hub's server
and run through the C bridge: the C-only cases (the ``abi`` group) then apply to it and pass.
"""

from __future__ import annotations

from pjrt_hub.cli import ExitCode, main
from pjrt_hub.testing import ConformanceReport

from ..fixtures import install_toy


def test_a_python_plugin_served_as_a_c_plugin_passes_as_one(fake_dist, capsys):
    install_toy(fake_dist)
    code = main(["conformance", "--via", "c_api", "--plugin", "toy", "--case", "client/*", "--case", "abi/*",
                 "--case", "execute/add_one_program", "--json"])
    report = ConformanceReport.model_validate_json(capsys.readouterr().out)
    assert code == ExitCode.OK, report.model_dump_json(indent=1)
    (plugin,) = report.plugins
    assert (plugin.plugin, plugin.kind, plugin.api_version) == ("toy@c_api", "c", "0.105")
    outcomes = {c.id: c.outcome.value for c in plugin.cases}
    assert outcomes["abi/api_struct_size"] == "passed" and outcomes["abi/no_null_functions"] == "passed"
    assert outcomes["execute/add_one_program"] == "passed"
    assert plugin.counts.failed == 0


def test_via_refuses_a_c_plugin_with_the_reason(fake_dist, capsys, tmp_path):
    library = tmp_path / "libfake_pjrt.so"
    library.write_bytes(b"\x7fELF not really")
    code = main(["conformance", "--via", "c_api", "--plugin", str(library)])
    assert code == ExitCode.USAGE
    assert "is a C plugin; --via serves pjrt-hub's Python plugins" in capsys.readouterr().err
