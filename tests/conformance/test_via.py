"""``pjrt-hub conformance --via c_api``: the suite on a Python plugin served as a ``PJRT_Api``.

The toy plugin (a third-party-like Python plugin) is laid out as a C plugin by pjrt-hub's server
and run through the C bridge: the C-only cases (the ``abi`` group) then apply to it and pass.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

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
    assert (plugin.plugin, plugin.kind, plugin.api_version) == ("toy@c_api", "c", "0.117")
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


#: Cases whose verdict through the C ABI once differed from the verdict on the plugin itself: an
#: errored output copied to the host, sub-byte element types, views of host memory, DLPack export,
#: key-value callbacks, and a foreign byte order under kMutableZeroCopy.
PARITY_CASES = ("events/execution_error_reaches_every_event_and_output", "buffers/round_trip_s4",
                "buffers/uninitialized_f4e2m1fn", "transfers/view_aliases_and_calls_its_deleter_once",
                "transfers/dlpack_export_aliases", "client/create_takes_key_value_callbacks")


def _verdicts(capsys, *args: str) -> dict[str, str]:
    main(["conformance", *args, "--json"])
    (plugin,) = ConformanceReport.model_validate_json(capsys.readouterr().out).plugins
    return {c.id: c.outcome.value for c in plugin.cases}


@pytest.mark.parametrize("plugin", ["toy", "reference"])
def test_a_case_gives_the_same_verdict_through_the_c_abi_as_on_the_plugin(plugin, fake_dist, capsys):
    install_toy(fake_dist)
    cases = [arg for case in PARITY_CASES for arg in ("--case", case)]
    direct = _verdicts(capsys, "--plugin", plugin, *cases)
    served = _verdicts(capsys, "--via", "c_api", "--plugin", plugin, *cases)
    assert served == direct == {case: "passed" for case in PARITY_CASES}


def test_the_served_struct_is_asked_for_its_args_struct_sizes(fake_dist, capsys):
    install_toy(fake_dist)
    assert _verdicts(capsys, "--via", "c_api", "--plugin", "toy", "--case", "abi/args_struct_sizes") == \
        {"abi/args_struct_sizes": "passed"}  # not skipped: the check runs in process on a served struct


def test_through_jax_the_toy_and_the_reference_plugin_keep_their_verdicts(fake_dist, site):
    pytest.importorskip("jax")
    install_toy(fake_dist)
    cases = ["jax/devices", "jax/transfers", "jax/donation", *PARITY_CASES]
    done = subprocess.run([sys.executable, "-m", "pjrt_hub.cli", "conformance", "--via", "jax", "--plugin", "toy",
                           "--plugin", "reference", *[a for c in cases for a in ("--case", c)], "--json"],
                          capture_output=True, text=True, timeout=600,
                          env={**os.environ, "PYTHONPATH": os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")]),
                               "PJRT_HUB_JAX_PLUGINS": ""})
    assert done.returncode == 0, (done.stdout[-3000:], done.stderr[-3000:])
    report = ConformanceReport.model_validate_json(done.stdout)
    for plugin in report.plugins:
        assert {c.id: c.outcome.value for c in plugin.cases} == {case: "passed" for case in cases}, plugin.plugin
