"""The suite on the real C plugins: xla-cpu-pjrt 0.0.1 (API 0.81) by default, through the bridge's
extension wrappers and the C-plugin limitations table; fastatomstruct-xla-cpu (0.106) and
lammps-jax-pjrt-cpu (0.115) whole, when asked (``-m real_plugin_extra``)."""

from __future__ import annotations

import pytest

from pjrt_hub.testing import run_conformance

from ..real_plugins import DEFAULT_PLUGIN, FASTATOMSTRUCT, LAMMPS, real_plugin


def outcomes(report) -> dict[str, tuple[str, str | None]]:
    (plugin,) = report.plugins
    return {c.id: (c.outcome.value, c.limitation if c.outcome.value == "xfailed" else c.message)
            for c in plugin.cases}


def test_extensions_deletion_and_topology_on_xla_cpu_0_81():
    path = real_plugin(DEFAULT_PLUGIN)
    report = run_conformance([path], cases=["extensions/Layouts", "extensions/FFI", "extensions/MemoryDescriptions",
                                            "compile/executable_delete", "compile/execute_deleted",
                                            "topology/serialize_round_trip"])
    found = outcomes(report)
    assert report.ok and report.plugins[0].api_version == "0.81"
    assert found["extensions/Layouts"] == ("passed", None)
    assert found["extensions/FFI"] == ("passed", None)
    # XLA's gaps, declared in the C-plugin limitations table: strict xfails.
    outcome, message = found["extensions/MemoryDescriptions"]
    assert outcome == "xfailed" and "device descriptions describe no memory" in message
    for case_id in ("compile/executable_delete", "compile/execute_deleted"):
        outcome, message = found[case_id]
        assert outcome == "xfailed" and "PjRtCpuExecutable::Delete, an empty function" in message
    # No topology compiler in this build: an optional feature, skipped with the plugin's answer.
    assert found["topology/serialize_round_trip"] == (
        "skipped", "plugin xla_cpu_pjrt does not deserialize topologies: NOT_FOUND: No compiler registered for platform")


@pytest.mark.real_plugin_extra
@pytest.mark.parametrize("requirement,api_version,xfailed", [
    (FASTATOMSTRUCT, "0.106", {"extensions/MemoryDescriptions", "compile/executable_delete", "compile/execute_deleted"}),
    (LAMMPS, "0.115", {"extensions/MemoryDescriptions", "compile/execute_deleted"}),
])
def test_the_whole_suite_on_the_newer_cpu_plugins(requirement, api_version, xfailed):
    report = run_conformance([real_plugin(requirement)])
    (plugin,) = report.plugins
    failed = {c.id: c.message for c in plugin.cases if c.outcome.value == "failed"}
    assert not failed
    assert plugin.api_version == api_version
    assert {c.id for c in plugin.cases if c.outcome.value == "xfailed"} == xfailed
    assert {c.id: c.outcome.value for c in plugin.cases if c.id.startswith("extensions/")
            and c.id.split("/")[1] in ("Layouts", "FFI")} == {"extensions/Layouts": "passed", "extensions/FFI": "passed"}


def test_host_arrays_of_every_shape_and_scalar_arguments_on_xla_cpu_0_81():
    """0-d, zero-size, strided, big-endian (the bridge refused '>f4') and unaligned arrays."""
    report = run_conformance([real_plugin(DEFAULT_PLUGIN)],
                             cases=["buffers/host_array_shapes", "execute/scalar_and_zero_size_arguments"])
    assert report.ok, outcomes(report)
    assert set(outcomes(report).values()) == {("passed", None)}
