"""The abi cases on C plugins, from what a library loader's probe reports (no real library needed)."""

from __future__ import annotations

from pjrt_hub import Policy, PluginRegistry, RegistrySettings
from pjrt_hub.abi import ApiVersion, history, hookimpl
from pjrt_hub.testing import CASES, CaseFailure, CaseSkipped, PluginUnderTest, run_case


class FakeLoader:
    def __init__(self, probe):
        self.probe = probe

    @hookimpl
    def pjrt_hub_probe_library(self, path, timeout):
        return dict(self.probe, outcome="ok", message="")


def outcomes(tmp_path, probe, cases):
    library = tmp_path / "libfake_pjrt.so"
    library.write_bytes(b"\x7fELF")
    registry = PluginRegistry(RegistrySettings(policy=Policy(framework=ApiVersion(0, 81)), autoload=False,
                                               paths=(str(library),)), environ={})
    registry.add_loader(FakeLoader(probe), "fake")
    ctx = PluginUnderTest(registry, "fake_pjrt")
    assert ctx.kind == "c" and ctx.loaded, ctx.record
    found = {}
    for case_id in cases:
        try:
            run_case(CASES[case_id], ctx)
        except CaseFailure as exc:
            found[case_id] = ("failed", str(exc))
        except CaseSkipped as exc:
            found[case_id] = ("skipped", str(exc))
        else:
            found[case_id] = ("passed", "")
    return found


ABI = ["abi/api_struct_size", "abi/api_version_struct_size", "abi/extension_struct_sizes", "abi/no_null_functions"]


def test_a_plugin_with_the_table_of_its_minor_passes(tmp_path):
    slots = history.slot_count(81)
    probe = {"api_version": "0.81", "api_struct_size": 40 + 8 * slots, "version_struct_size": 24,
             "extensions": [{"type": 4, "name": "Layouts", "struct_size": 72}], "null_functions": []}
    assert all(v[0] == "passed" for v in outcomes(tmp_path, probe, ABI).values())


def test_a_short_table_a_zero_version_size_and_a_null_slot_fail_by_name(tmp_path):
    slots = history.slot_count(81)
    probe = {"api_version": "0.81", "api_struct_size": 40 + 8 * (slots - 1), "version_struct_size": 0,
             "extensions": [{"type": 4, "name": "Layouts", "struct_size": 40}],
             "null_functions": ["PJRT_Client_Compile"]}
    found = outcomes(tmp_path, probe, ABI)
    assert found["abi/api_struct_size"] == ("failed", f"plugin fake_pjrt at PJRT API 0.81 has {slots - 1} function "
                                            f"slots (struct_size {40 + 8 * (slots - 1)}); the history gives {slots} "
                                            "for that minor")
    assert found["abi/api_version_struct_size"] == ("failed", "PJRT_Api_Version.struct_size is 0, expected 24")
    assert "extension Layouts has struct_size 40, smaller than version 1 of it (56 bytes)" in \
        found["abi/extension_struct_sizes"][1]
    assert found["abi/no_null_functions"] == (
        "failed", "plugin fake_pjrt leaves 1 slots of its PJRT_Api NULL: PJRT_Client_Compile")


def test_without_probe_data_the_abi_cases_skip_saying_so(tmp_path):
    found = outcomes(tmp_path, {"api_version": "0.81"}, ABI)
    assert found["abi/api_struct_size"] == ("skipped", "no probe data for fake_pjrt: the PJRT_Api table was not read")
