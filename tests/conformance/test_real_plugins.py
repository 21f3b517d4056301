"""The suite on the real C plugins: xla-cpu-pjrt 0.0.1 (API 0.81) by default, through the bridge's
extension wrappers and the C-plugin limitations table; the three XLA CPU plugins whole, when asked
(``-m real_plugin_extra``): fastatomstruct-xla-cpu (0.106), lammps-jax-pjrt-cpu (0.115) and
xla-cpu-pjrt (0.81) again.

What the real plugins do that PJRT's contract does not allow is not declared as a limitation: the
suite fails them there, and these tests pin those findings (:data:`FINDINGS`), with the evidence,
so that a release that fixes one turns its test red and the entry goes.

These tests are about the plugins' behaviour, not their versions: a plugin outside the 6-week
window of pjrt-hub's own minor (0.81, 0.106) is run acting as the framework it was built for.
"""

from __future__ import annotations

import pytest

from pjrt_hub.testing import run_conformance

from ..real_plugins import DEFAULT_PLUGIN, FASTATOMSTRUCT, LAMMPS, real_plugin

#: The framework xla-cpu-pjrt 0.0.1 was built for: its minor, 0.81, is outside the window of 0.117.
BUILT_FOR = "0.81"

#: Cases the real XLA CPU plugins fail, by API version, and why it is the plugin that is wrong.
FINDINGS: dict[str, dict[str, str]] = {
    "errors/uninitialized_negative_dimension": {
        version: "PJRT_Client_CreateUninitializedBuffer of dims [-1, 3] aborts the process (terminate: "
                 "BadStatusOrAccess 'Invalid dimension size -1') instead of returning INVALID_ARGUMENT"
        for version in ("0.81", "0.106", "0.115")},
    "errors/deserialize_garbage": {
        version: "PJRT_Executable_DeserializeAndLoad of garbage answers INTERNAL 'PjRtCpuClient::DeserializeExecutable "
                 "proto deserialization failed'; INTERNAL is a broken invariant of the plugin, the caller's bad bytes "
                 "are INVALID_ARGUMENT (as 0.115 answers)"
        for version in ("0.81", "0.106")},
    "transfers/create_uninitialized_with_another_devices_memory": {
        version: "PJRT_Client_CreateUninitializedBuffer with device 0 and memory 3 (device 1's) makes the buffer in "
                 "memory 0 on device 0: the device given wins and the memory is dropped without an error, where the "
                 "header has the memory decide (BufferFromHostBuffer, with the same two fields, does put it in "
                 "memory 3 on device 1)"
        for version in ("0.81", "0.106", "0.115")},
    "lifetime/client_destroyed_with_queued_work": {
        "0.106": "PJRT_Client_Destroy segfaults when a copy to host of a still-running execution's output is "
                 "pending (0.81 and 0.115 finish the work)"},
}


def findings(api_version: str) -> dict[str, str]:
    return {case: by_version[api_version] for case, by_version in FINDINGS.items() if api_version in by_version}


def outcomes(report) -> dict[str, tuple[str, str | None]]:
    (plugin,) = report.plugins
    return {c.id: (c.outcome.value, c.limitation if c.outcome.value == "xfailed" else c.message)
            for c in plugin.cases}


def test_extensions_deletion_and_topology_on_xla_cpu_0_81():
    path = real_plugin(DEFAULT_PLUGIN)
    report = run_conformance([path], cases=["extensions/Layouts", "extensions/FFI", "extensions/MemoryDescriptions",
                                            "compile/executable_delete", "compile/execute_deleted",
                                            "topology/serialize_round_trip"], framework=BUILT_FOR)
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


def test_behaviour_observed_on_xla_cpu_0_81():
    path = real_plugin(DEFAULT_PLUGIN)
    report = run_conformance([path], cases=["numerics/nan_propagation", "numerics/rounding_bf16",
                                            "events/pending_execution", "lifetime/external_reference_holds_off_*",
                                            "errors/execute_with_wrong_element_type", "errors/deserialize_garbage",
                                            "extensions/layouts_describe_memory", "execute/execute_device"],
                             framework=BUILT_FOR)
    found = outcomes(report)
    # With JAX's compile options (fast min/max off), XLA propagates NaN through maximum/minimum.
    for case_id in ("numerics/nan_propagation", "numerics/rounding_bf16", "events/pending_execution",
                    "lifetime/external_reference_holds_off_donation", "lifetime/external_reference_holds_off_deletion",
                    "extensions/layouts_describe_memory", "execute/execute_device"):
        assert found[case_id] == ("passed", None), (case_id, found[case_id])
    outcome, message = found["errors/execute_with_wrong_element_type"]
    assert outcome == "xfailed" and "by size (and memory space) only" in message
    outcome, message = found["errors/deserialize_garbage"]
    assert outcome == "failed" and "INTERNAL: PjRtCpuClient::DeserializeExecutable proto deserialization failed" in message
    assert not report.ok


@pytest.mark.real_plugin_extra
@pytest.mark.parametrize("requirement,api_version,framework,xfailed", [
    (DEFAULT_PLUGIN, "0.81", BUILT_FOR,
     {"extensions/MemoryDescriptions", "extensions/memory_descriptions_match_memories",
      "compile/executable_delete", "compile/execute_deleted", "errors/execute_with_wrong_element_type",
      "buffers/non_donatable_leaves_the_other_donations"}),
    (FASTATOMSTRUCT, "0.106", "0.106",  # outside the window of 0.117, as 0.81 is
     {"extensions/MemoryDescriptions", "extensions/memory_descriptions_match_memories",
      "compile/executable_delete", "compile/execute_deleted", "errors/execute_with_wrong_element_type"}),
    (LAMMPS, "0.115", None,  # inside the window of 0.117: pjrt-hub's own framework minor
     {"extensions/MemoryDescriptions", "extensions/memory_descriptions_match_memories",
      "compile/execute_deleted", "errors/execute_with_wrong_element_type"}),
])
def test_the_whole_suite_on_the_cpu_plugins(requirement, api_version, framework, xfailed):
    report = run_conformance([real_plugin(requirement)], framework=framework)
    (plugin,) = report.plugins
    failed = {c.id: c.message for c in plugin.cases if c.outcome.value == "failed"}
    assert set(failed) == set(findings(api_version)), failed
    assert "crashed the conformance worker" in failed["errors/uninitialized_negative_dimension"]
    assert plugin.api_version == api_version
    assert {c.id for c in plugin.cases if c.outcome.value == "xfailed"} == xfailed
    assert {c.id: c.outcome.value for c in plugin.cases if c.id.startswith("extensions/")
            and c.id.split("/")[1] in ("Layouts", "FFI")} == {"extensions/Layouts": "passed", "extensions/FFI": "passed"}
    # Every new group ran and passed everywhere else.
    for group in ("numerics", "events", "lifetime", "concurrency"):
        ran = [c for c in plugin.cases if c.group == group]
        assert ran and all(c.outcome.value in ("passed", "skipped") or c.id in failed for c in ran), group


def test_host_arrays_of_every_shape_and_scalar_arguments_on_xla_cpu_0_81():
    """0-d, zero-size, strided, big-endian (the bridge refused '>f4') and unaligned arrays."""
    report = run_conformance([real_plugin(DEFAULT_PLUGIN)],
                             cases=["transfers/strided_host_arrays", "execute/scalar_and_empty_arrays"],
                             framework=BUILT_FOR)
    assert report.ok, outcomes(report)
    assert set(outcomes(report).values()) == {("passed", None)}
