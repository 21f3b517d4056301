"""Real C plugins as rows of the matrix, from the wheel cache: xla-cpu-pjrt (0.81) by default, the
0.106 and 0.115 plugins when asked (``-m real_plugin_extra``)."""

from __future__ import annotations

import platform

import pytest

from pjrt_hub.compat_matrix import REAL_C_PLUGINS, CellStatus, RealCPlugin, render_markdown, run_environment

from ..real_plugins import DEFAULT_PLUGIN, real_plugin

# One case per extension (capital names), the two that compare what they say with the memory,
# and deletion: fixed ids, so that cases added to the groups later do not change the counts.
CASES = ("extensions/[A-Z]*", "extensions/layouts_describe_memory", "extensions/memory_descriptions_match_memories",
         "extensions/declared_are_offered", "compile/executable_delete", "compile/execute_deleted")


def test_xla_cpu_pjrt_is_a_row_with_its_verdicts_counts_and_limitations(tmp_path):
    real_plugin(DEFAULT_PLUGIN)  # in the wheel cache, or skip
    (xla_cpu,) = [p for p in REAL_C_PLUGINS if p.requirement == DEFAULT_PLUGIN]
    # 0.81 was superseded by 0.82 (2025-12-09): inside the 6-week window of 0.88 (2026-01-09), far
    # outside that of 0.115 (2026-09-15).
    run = run_environment(tmp_path / "out", frameworks=["0.81", "0.88", "0.115"], fixtures=[],
                          include_installed=False, c_plugins=[xla_cpu], cases=CASES, cell_timeout=300)
    report = run.report
    (row,) = report.plugins
    assert (row.name, row.kind, row.api_version) == ("xla_cpu_pjrt", "c", "0.81")
    assert row.identity.startswith("library sha256:")
    exact, older = report.cell("xla_cpu_pjrt", "0.81"), report.cell("xla_cpu_pjrt", "0.88")
    assert (exact.status, exact.rule) == (CellStatus.PASSED, "exact")
    assert (older.status, older.accepted, older.rule) == (CellStatus.PASSED, True, "window")
    outside = report.cell("xla_cpu_pjrt", "0.115")
    assert (outside.status, outside.accepted, outside.rule, outside.counts) == (CellStatus.REFUSED, False, "window",
                                                                                 None)
    assert "outside the 6-week forward-compatibility window of framework PJRT API version 0.115" in \
        outside.reasons[0]
    for cell in (exact, older):
        assert (cell.counts.passed, cell.counts.failed, cell.counts.xfailed) == (3, 0, 4)
        assert {x.id for x in cell.xfailed} == {"extensions/MemoryDescriptions", "compile/executable_delete",
                                                 "compile/execute_deleted",
                                                 "extensions/memory_descriptions_match_memories"}
    text = render_markdown(report)
    assert "| xla_cpu_pjrt | local | 0.81 | ✅ accepted (exact)<br>3/0/4/" in text
    (row_line,) = [line for line in text.splitlines() if line.startswith("| xla_cpu_pjrt |")]
    assert "| ✅ accepted (window)<br>3/0/4/" in row_line and row_line.endswith("| ⛔ refused (window) |")
    # The two cases of one declared limitation are listed under it once.
    assert "- xfailed XLA's CPU client does not delete executables: " in text
    assert ": compile/executable_delete, compile/execute_deleted\n" in text


def test_a_plugin_without_a_wheel_here_is_a_note_not_a_row(tmp_path):
    elsewhere = RealCPlugin("nowhere", "nowhere-pjrt==1.0", "0.81", ("sparc64",))
    run = run_environment(tmp_path / "out", frameworks=["0.81"], fixtures=[], include_installed=False,
                          c_plugins=[elsewhere])
    assert run.report.plugins == [] and run.report.cells == []
    assert run.report.environments[0].note == f"nowhere-pjrt==1.0 has no wheel for {platform.machine()}"


@pytest.mark.real_plugin_extra
def test_the_three_cpu_plugins_across_framework_versions(tmp_path):
    for plugin in REAL_C_PLUGINS:
        real_plugin(plugin.requirement)
    run = run_environment(tmp_path / "out", frameworks=["0.81", "0.106", "0.115"], fixtures=[],
                          include_installed=False, c_plugins=REAL_C_PLUGINS, cases=CASES, cell_timeout=300)
    report = run.report
    assert [p.name for p in report.plugins] == ["xla_cpu_pjrt", "fastatomstruct_xla_cpu", "lammps_jax_pjrt_cpu"]
    rules = {(c.plugin, c.framework_version): c.rule for c in report.cells}
    assert rules == {
        ("xla_cpu_pjrt", "0.81"): "exact", ("xla_cpu_pjrt", "0.106"): "window",
        ("xla_cpu_pjrt", "0.115"): "window",
        ("fastatomstruct_xla_cpu", "0.81"): "c-newer", ("fastatomstruct_xla_cpu", "0.106"): "exact",
        ("fastatomstruct_xla_cpu", "0.115"): "window",
        ("lammps_jax_pjrt_cpu", "0.81"): "c-newer", ("lammps_jax_pjrt_cpu", "0.106"): "c-newer",
        ("lammps_jax_pjrt_cpu", "0.115"): "exact",
    }
    # The older plugins' successors (0.82, 0.107) came out more than 6 weeks before these frameworks.
    refused = {("xla_cpu_pjrt", "0.106"), ("xla_cpu_pjrt", "0.115"), ("fastatomstruct_xla_cpu", "0.115")}
    assert {(c.plugin, c.framework_version) for c in report.cells if c.status is CellStatus.REFUSED} == refused
    assert all(c.status is CellStatus.PASSED for c in report.cells if (c.plugin, c.framework_version) not in refused), \
        [c.failures for c in report.cells]
    lammps = report.cell("lammps_jax_pjrt_cpu", "0.115")
    assert {x.id for x in lammps.xfailed} == {"extensions/MemoryDescriptions", "compile/execute_deleted",
                                              "extensions/memory_descriptions_match_memories"}
