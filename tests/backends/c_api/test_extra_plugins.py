"""Further real plugins, opt-in (``-m real_plugin_extra`` or ``PJRT_HUB_EXTRA_PLUGINS=1``):
newer CPU plugins end to end, an old plugin with the pre-0.45 extension layout, GPU plugins on a
machine without a GPU, and libtpu and jax-tt-plugin, which hang or abort without their hardware:
none of them may take the test process down."""

from __future__ import annotations

import numpy as np
import pytest

from pjrt_hub.abi import CompileError, FailedPrecondition, Program, Unimplemented
from pjrt_hub.backends.c_api import client_creation_risk, load_api, probe, safe_client_check
from pjrt_hub.backends.c_api.abi_check import check_struct_sizes

from .conftest import ADD_PROGRAM, real_plugin

pytestmark = pytest.mark.real_plugin_extra

NEWER_CPU = {
    "fastatomstruct-xla-cpu==2026.6.23": ("0.106", 136, [1, 16, 1]),
    "lammps-jax-pjrt-cpu==0.11.2": ("0.115", 138, [1, 20, 0]),
}


@pytest.mark.parametrize("requirement", sorted(NEWER_CPU))
def test_newer_cpu_plugins_end_to_end(requirement):
    version, slots, stablehlo = NEWER_CPU[requirement]
    path = real_plugin(requirement)
    report = probe(path)
    assert (report.outcome, report.api_version, report.num_slots) == ("ok", version, slots)
    assert report.expected_slots == slots and report.null_functions == []
    assert report.attributes["stablehlo_current_version"] == stablehlo
    assert check_struct_sizes(path).too_small() == []
    api = load_api(path)
    client = api.client_create({"cpu_device_count": 2})
    try:
        assert [d.get_description().debug_string() for d in client.devices()] == ["cpu:0", "cpu:1"]
        exe = client.compile(Program(ADD_PROGRAM))
        a = client.buffer_from_host_buffer(np.array([1, 2, 3, 4], np.float32)).buffer
        result = exe.execute([[a, a]])
        result.device_complete_events[0].await_()
        fetched = result.outputs[0][0].to_host_buffer()
        fetched.event.await_()
        assert fetched.array.tolist() == [2, 4, 6, 8]
        # A function these minors have and 0.81 lacks.
        assert isinstance(client.devices()[0].get_attributes(), dict)
        with pytest.raises(CompileError):
            client.compile(Program("func.func @main() -> () { garbage }"))
    finally:
        client.destroy()


def test_the_0_115_plugin_refuses_unknown_create_options():
    api = load_api(real_plugin("lammps-jax-pjrt-cpu==0.11.2"))
    with pytest.raises(Exception, match="Unexpected option name passed to PJRT_Client_Create"):
        api.client_create({"intra_op_parallelism_threads": 1})


def test_an_old_plugin_with_the_pre_0_45_extension_layout():
    path = real_plugin("jax-cuda12-pjrt==0.4.23")
    report = probe(path)
    assert (report.outcome, report.api_version, report.num_slots) == ("ok", "0.40", 96)
    assert report.extension_layout == "type_next"
    assert [(e.type, e.name, e.struct_size) for e in report.extensions] == [(0, "Gpu_Custom_Call", None),
                                                                            (1, "Profiler", None)]
    assert any("stale PJRT_Api.struct_size" in w for w in report.warnings)
    api = load_api(path)  # safe: loading opens CUDA lazily
    assert [e.name for e in api.extensions().values()] == ["Gpu_Custom_Call", "Profiler"]
    # Slot 96 of the table is GetCompiledMemoryStats, but struct_size stops at 96 slots.
    with pytest.raises(Unimplemented, match="has 96 function slots and it is slot 96"):
        api.library.function("PJRT_Executable_GetCompiledMemoryStats")


def test_a_cuda_plugin_without_a_gpu_fails_cleanly():
    path = real_plugin("jax-cuda12-pjrt==0.4.23")
    assert "CUDA" in client_creation_risk(probe(path))
    check = safe_client_check(path, timeout=120)
    assert check.outcome == "error" and check.error_code == "FAILED_PRECONDITION"
    assert "No visible GPU devices" in check.reason
    with pytest.raises(FailedPrecondition, match="No visible GPU devices"):
        load_api(path).client_create()


def test_a_gpu_plugin_whose_dependencies_are_missing_is_load_failed():
    path = real_plugin("xla-cuda12-pjrt==0.0.1")
    report = probe(path)
    assert report.outcome == "load_failed"
    assert "cannot open shared object file" in report.reason
    assert "libcupti.so.12" in report.needed
    assert client_creation_risk(report) is not None


def test_libtpu_is_probed_but_never_started_here():
    path = real_plugin("libtpu==0.0.52")
    report = probe(path)
    assert (report.outcome, report.api_version, report.num_slots) == ("ok", "0.117", 138)
    assert len(report.extensions) == 18 and report.extension_names()[:2] == ["FFI", "XlaTransform"]
    assert report.attributes["stablehlo_current_version"] == [1, 24, 0]
    risk = client_creation_risk(report)
    if risk is None:
        pytest.skip("this machine has TPU device nodes")
    assert "metadata server" in risk


def test_a_plugin_that_aborts_without_its_hardware():
    path = real_plugin("jax-tt-plugin==0.1.3")
    report = probe(path)
    assert (report.outcome, report.api_version, report.version_struct_size) == ("ok", "0.114", 0)
    assert report.null_functions == ["PJRT_LoadedExecutable_AddressableDeviceLogicalIds"]
    assert "GetPjrtApiVersion" in report.exports
    if client_creation_risk(report) is None:
        pytest.skip("this machine has Tenstorrent device nodes")
    check = safe_client_check(path, timeout=120)
    assert (check.outcome, check.signal, check.stage) == ("aborted", "SIGABRT", "client_create")
    assert any("TT_FATAL" in line for line in check.stderr_highlights)
