"""The pieces around the bridge: the struct-size oracle, the loader hooks the registry calls, the
client-creation safety checks, the probe's command line and the wheel cache."""

from __future__ import annotations

import json
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from pjrt_hub.backends.c_api import CApi, ProbeReport, client_creation_risk, safe_client_check
from pjrt_hub.backends.c_api.abi_check import check_struct_sizes
from pjrt_hub.backends.c_api.loader import pjrt_hub_load_library, pjrt_hub_probe_library
from pjrt_hub.backends.c_api.wheels import fetch_wheel

from .fakes import fake


@pytest.mark.real_plugin
def test_our_struct_sizes_are_never_below_what_the_plugin_checks(xla_cpu_path):
    report = check_struct_sizes(xla_cpu_path)
    assert report.outcome == "ok" and report.api_version == "0.81"
    sized = {c.function: c for c in report.checks if c.plugin_expects is not None}
    assert len(sized) >= 85  # every Args struct of the table that 0.81 has, but a few that check later
    assert report.too_small() == []
    # Where the plugin checks the header's size, ours is that size exactly.
    assert sized["PJRT_Client_Create"].ours == sized["PJRT_Client_Create"].plugin_expects == 88
    assert sized["PJRT_Client_BufferFromHostBuffer"].plugin_expects == 120
    # xla-cpu-pjrt 0.81 checks an older minimum for this one than its header says.
    stats = sized["PJRT_Executable_GetCompiledMemoryStats"]
    assert (stats.plugin_expects, stats.ours) == (56, 112)
    # The extensions' functions are asked too: the Layouts node of 0.81 covers six of seven.
    layouts = {n: (c.ours, c.plugin_expects) for n, c in sized.items() if n.startswith("PJRT_Layouts_")}
    assert len(layouts) == 6 and all(ours == expects for ours, expects in layouts.values()), layouts
    assert sized["PJRT_DeviceDescription_MemoryDescriptions"].plugin_expects == 48
    # Sent at 48 with a deleter field that this plugin's layout (40) ignores.
    assert (sized["PJRT_FFI_UserData_Add"].ours, sized["PJRT_FFI_UserData_Add"].plugin_expects) == (48, 40)


@pytest.mark.real_plugin
def test_loader_hooks_probe_and_load(xla_cpu_path, tmp_path: Path):
    report = pjrt_hub_probe_library(path=xla_cpu_path, timeout=60)
    assert isinstance(report, ProbeReport)  # the hook's answer is the model, not a mapping
    assert report.outcome == "ok" and report.reason is None and report.api_version == "0.81"
    assert report.extensions[0].model_dump() == {"type": 9, "name": "PhaseCompile", "struct_size": 64}
    assert report.client_creation_risk is None and report.probe_cache in ("hit", "stored", "not stored", "off")
    assert ProbeReport.model_validate_json(report.model_dump_json()) == report  # it leaves processes as JSON
    api = pjrt_hub_load_library(path=xla_cpu_path, name="xla_cpu")
    assert isinstance(api, CApi) and str(api.api_version()) == "0.81"
    text = tmp_path / "README.so"
    text.write_text("not a shared library")
    assert pjrt_hub_probe_library(path=str(text), timeout=5) is None


def _report(name: str, **fields) -> ProbeReport:
    fields.setdefault("path", f"/site-packages/{name}.so")
    return ProbeReport(name=name, outcome="ok", **fields)


def test_client_creation_risk_knows_the_hardware_plugins():
    nothing = lambda patterns: False  # noqa: E731 - no device nodes at all
    assert "metadata server" in client_creation_risk(_report("libtpu"), devices_present=nothing)
    assert "TT_FATAL" in client_creation_risk(_report("tt", path="/x/jax_plugins/libtt/libtt.so"),
                                              devices_present=nothing)
    cuda = client_creation_risk(_report("xla_cuda_plugin"), devices_present=nothing)
    assert cuda.startswith("CUDA plugin and no CUDA device here") and "/dev/nvidia" in cuda
    # Recognised by what it needs or reports, whatever its name.
    assert client_creation_risk(_report("gpu_x", needed=["libcudart.so.12"]), devices_present=nothing)
    assert client_creation_risk(_report("mystery", attributes={"cuda_version": 12090}), devices_present=nothing)
    assert client_creation_risk(_report("xla_cpu_pjrt"), devices_present=nothing) is None
    # With the device nodes present, the same plugin is fine.
    assert client_creation_risk(_report("libtpu"), devices_present=lambda patterns: True) is None


def test_safe_client_check_survives_a_hanging_client_create(build_so):
    path = fake(build_so, "hangs_on_create", "CREATE_HANGS")
    check = safe_client_check(path, timeout=3)
    assert check.outcome == "timed_out" and check.stage == "client_create"


def test_safe_client_check_survives_an_aborting_client_create(build_so):
    path = fake(build_so, "aborts_on_create")  # every unset slot is abort(), Client_Create too
    check = safe_client_check(path, timeout=30)
    assert check.outcome == "aborted" and check.signal == "SIGABRT" and check.stage == "client_create"


@pytest.mark.real_plugin
def test_safe_client_check_on_the_real_plugin(xla_cpu_path):
    check = safe_client_check(xla_cpu_path, {"cpu_device_count": 3})
    assert check.ok, check
    assert (check.platform_name, check.device_count, check.device_kinds) == ("cpu", 3, ["cpu"])


def test_probe_command_line_prints_one_json_report(build_so):
    path = fake(build_so, "cli")
    done = subprocess.run([sys.executable, "-m", "pjrt_hub.backends.c_api.probe", path, "--json"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0
    report = json.loads(done.stdout)
    assert report["outcome"] == "ok" and report["api_version"] == "0.81" and report["finished"]


def test_wheel_cache_unpacks_once_without_the_network(tmp_path: Path, monkeypatch):
    (tmp_path / "wheels").mkdir()
    wheel = tmp_path / "wheels" / "fake_pjrt_plugin-1.2.3-py3-none-manylinux_2_27_x86_64.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.writestr("fake_pjrt_plugin/__init__.py", "")
    monkeypatch.setenv("PJRT_HUB_CACHE", str(tmp_path))
    folder = fetch_wheel("fake-pjrt-plugin==1.2.3")
    assert folder == tmp_path / "wheels" / wheel.stem and (folder / "fake_pjrt_plugin" / "__init__.py").is_file()
    assert fetch_wheel("Fake_PJRT.plugin==1.2.3") == folder
    with pytest.raises(ValueError, match="expected NAME or NAME==VERSION"):
        fetch_wheel("fake-pjrt-plugin>=1")
