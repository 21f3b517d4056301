"""The cell runner on fixture plugins: accepted, refused, crashing and hanging plugins, and the cache."""

from __future__ import annotations

import textwrap

import pytest

from pjrt_hub.testing import CASES
from pjrt_hub.compat_matrix import CellCache, CellResult, CellStatus, FixturePlugin, cache_key, run_environment

TOY = FixturePlugin("toy_0_81", "0.81", None, "at 0.81")
NEWER = FixturePlugin("toy_0_106", "0.106", None, "at 0.106, no backward policy")
#: A toy at its default minor, the newest, as the crashing toys below declare: the control they run beside.
CURRENT = FixturePlugin("toy_0_117", "0.117", None, "at 0.117")

CRASHING = FixturePlugin("crashing", "0.117", source=textwrap.dedent("""
    import ctypes
    from pjrt_hub.testing.toy import ToyApi, ToyClient, ToyPlugin

    class CrashingClient(ToyClient):
        def platform_name(self):
            ctypes.string_at(0)  # reads address 0, as a C plugin with a bad pointer does

    class CrashingApi(ToyApi):
        client_class = CrashingClient

    class CrashingPlugin(ToyPlugin):
        api_class = CrashingApi

    plugin = CrashingPlugin()
"""))

#: Ends the cell's own process, and only that one, when it imports the plugin: what a harness
#: fault or the machine (the OOM killer) would do. Conformance contains the plugin's own crashes.
CRASHES_THE_CELL = FixturePlugin("crashes_the_cell", "0.117", source=textwrap.dedent("""
    import ctypes, sys
    from pjrt_hub.testing.toy import ToyPlugin

    if sys.argv[0].endswith("_cell_main.py"):
        ctypes.string_at(0)

    plugin = ToyPlugin()
"""))

#: Crashes as soon as a client is made: the conformance run finds that out in a child process.
CRASHING_AT_CREATION = FixturePlugin("crashing_early", "0.117", source=textwrap.dedent("""
    import ctypes
    from pjrt_hub.testing.toy import ToyApi, ToyPlugin

    class CrashingApi(ToyApi):
        def client_create(self, options=None):
            ctypes.string_at(0)

    class CrashingPlugin(ToyPlugin):
        api_class = CrashingApi

    plugin = CrashingPlugin()
"""))

HANGING = FixturePlugin("hanging", "0.105", source=textwrap.dedent("""
    import time
    from pjrt_hub.abi import hookimpl

    class Hanging:
        @hookimpl
        def pjrt_hub_declare(self):
            time.sleep(3600)  # like libtpu waiting for a metadata server

    plugin = Hanging()
"""))


def marked(fixture: FixturePlugin, marker) -> FixturePlugin:
    """The toy with a line appended to ``marker`` each time a cell process loads it."""
    source = (f"with open({str(marker)!r}, 'a') as f:\n    f.write('loaded\\n')\n"
              "from pjrt_hub.testing.toy import ToyPlugin\n"
              f"plugin = ToyPlugin(api_version={fixture.api_version!r})\n")
    return FixturePlugin(fixture.name, fixture.api_version, fixture.min_framework_version, source=source)


def test_accepted_and_refused_cells_then_the_cache_reuses_them(tmp_path):
    marker = tmp_path / "loads.txt"
    fixtures = [marked(TOY, marker), marked(NEWER, marker)]
    options = dict(frameworks=["0.81"], fixtures=fixtures, include_installed=False, cases=("client/*",),
                   cell_timeout=120)
    first = run_environment(tmp_path / "out", **options)
    assert (first.cells_run, first.cells_cached) == (2, 0)
    report = first.report
    accepted = report.cell("toy_0_81", "0.81")
    assert accepted.status is CellStatus.PASSED and accepted.accepted and accepted.rule == "exact"
    clients = sum(1 for c in CASES.values() if c.group == "client" and c.min_api_minor <= 81)
    # The toy skips the client cases it has nothing for (multi-process jobs, device counts).
    assert accepted.counts.passed + accepted.counts.skipped == clients and accepted.counts.failed == 0
    assert accepted.counts.passed >= clients - 3
    assert accepted.plugin_api_version == "0.81"
    refused = report.cell("toy_0_106", "0.81")
    assert refused.status is CellStatus.REFUSED and refused.accepted is False
    assert refused.rule == "backward-policy" and refused.counts is None
    assert "declares no backward-compatibility policy" in refused.reasons[0]
    loads = marker.read_text().count("loaded")
    assert loads >= 2

    again = run_environment(tmp_path / "out", **options)
    assert (again.cells_run, again.cells_cached) == (0, 2)
    assert all(c.cached for c in again.report.cells)
    assert marker.read_text().count("loaded") == loads  # no cell process loaded a plugin
    assert again.report.cell("toy_0_81", "0.81").counts == accepted.counts

    # Another framework version is another key: only its cells run. 0.81 was superseded by 0.82
    # (2025-12-09), more than 6 weeks before 0.95 (2026-02-21 at the earliest).
    more = run_environment(tmp_path / "out", **{**options, "frameworks": ["0.81", "0.95"]})
    assert (more.cells_run, more.cells_cached) == (2, 2)
    window = more.report.cell("toy_0_81", "0.95")
    assert (window.status, window.accepted, window.rule) == (CellStatus.REFUSED, False, "window")


def test_a_plugin_that_crashes_in_a_case_fails_that_case_in_its_cell(tmp_path):
    # Its cases run in a conformance worker: the crash is a finding about the plugin.
    run = run_environment(tmp_path / "out", frameworks=["0.117"], fixtures=[CRASHING, CURRENT],
                          include_installed=False, cases=("client/platform_name",), cell_timeout=120)
    cell = run.report.cell("crashing", "0.117")
    assert cell.status is CellStatus.FAILED and cell.error is None
    (failure,) = cell.failures
    assert failure.id == "client/platform_name"
    assert failure.message.startswith("the plugin crashed the conformance worker (SIGSEGV) during client/platform_name")
    assert run.report.cell("toy_0_117", "0.117").status is CellStatus.PASSED


def test_a_cell_whose_process_crashes_becomes_a_red_cell_and_the_run_goes_on(tmp_path):
    run = run_environment(tmp_path / "out", frameworks=["0.117"], fixtures=[CRASHES_THE_CELL, CURRENT],
                          include_installed=False, cases=("client/platform_name",), cell_timeout=120)
    crashed = run.report.cell("crashes_the_cell", "0.117")
    assert crashed.status is CellStatus.ERROR
    assert "crashed (SIGSEGV) before it reported" in crashed.error
    assert run.report.cell("toy_0_117", "0.117").status is CellStatus.PASSED
    # A red cell says nothing certain about the plugin (the harness or the machine may be at
    # fault): it is not cached, the next run tries it again, while the passed cell comes from the cache.
    again = run_environment(tmp_path / "out", frameworks=["0.117"], fixtures=[CRASHES_THE_CELL, CURRENT],
                            include_installed=False, cases=("client/platform_name",), cell_timeout=120)
    assert (again.cells_run, again.cells_cached) == (1, 1)
    assert again.report.cell("crashes_the_cell", "0.117").status is CellStatus.ERROR


def test_a_plugin_whose_client_creation_crashes_fails_its_cell_with_the_signal(tmp_path):
    # Conformance creates a Python plugin's first client in a child process: the crash is a
    # finding about the plugin (version/loaded fails naming the signal), not a red error cell.
    run = run_environment(tmp_path / "out", frameworks=["0.117"], fixtures=[CRASHING_AT_CREATION, CURRENT],
                          include_installed=False, cases=("version/loaded", "client/platform_name"),
                          cell_timeout=120)
    cell = run.report.cell("crashing_early", "0.117")
    assert cell.status is CellStatus.FAILED and cell.error is None
    (failure,) = cell.failures
    assert failure.id == "version/loaded"
    assert "creating a client ended the process" in failure.message and "SIGSEGV" in failure.message
    assert run.report.cell("toy_0_117", "0.117").status is CellStatus.PASSED


def test_a_plugin_asked_for_but_absent_is_a_row_of_error_cells(tmp_path):
    run = run_environment(tmp_path / "out", frameworks=["0.81", "0.95"], fixtures=[TOY], include_installed=False,
                          plugins=["toy_0_81", "nosuch"], cases=("client/platform_name",), cell_timeout=120)
    assert [p.name for p in run.report.plugins] == ["toy_0_81", "nosuch"]
    missing = run.report.cell("nosuch", "0.95")
    assert missing.status is CellStatus.ERROR and missing.error == "no plugin named 'nosuch' in environment local"


def test_a_hanging_plugin_becomes_a_red_cell_with_its_time_out(tmp_path):
    run = run_environment(tmp_path / "out", frameworks=["0.105"], fixtures=[HANGING], include_installed=False,
                          cell_timeout=3)
    hung = run.report.cell("hanging", "0.105")
    assert hung.status is CellStatus.ERROR
    assert hung.error == "timed out after 3 s: the plugin hung (the cell's process was killed)"


@pytest.mark.parametrize("status, kept", [(CellStatus.PASSED, True), (CellStatus.REFUSED, True),
                                          (CellStatus.FAILED, False), (CellStatus.ERROR, False)])
def test_only_green_cells_are_kept_and_served(tmp_path, status, kept):
    cache = CellCache(tmp_path)
    result = CellResult(plugin="p", environment="local", framework_version="0.81", status=status, key="k1")
    cache.put(result)
    assert (cache.get("k1") == result) is kept
    # A red cell written by an older pjrt-hub is not served either.
    (tmp_path / "cells").mkdir(exist_ok=True)
    (tmp_path / "cells" / "k2.json").write_text(result.model_copy(update={"key": "k2"}).model_dump_json())
    assert (cache.get("k2") is not None) is kept
    assert not list((tmp_path / "cells").glob("*.tmp"))


def test_plugins_of_one_distribution_have_their_own_keys():
    # numba_cpu and reference are both pjrt-hub's: one identity, two plugins, two verdicts.
    facts = {"python": "3.11.7", "numba": "0.68.1", "numpy": "2.4.6"}
    numba = cache_key("numba_cpu", "pjrt-hub 0.1.0 src:abc", "0.81", "suite", facts)
    assert numba != cache_key("reference", "pjrt-hub 0.1.0 src:abc", "0.81", "suite", facts)
    assert numba == cache_key("NUMBA_CPU", "pjrt-hub 0.1.0 src:abc", "0.81", "suite", facts)
    assert numba != cache_key("numba_cpu", "pjrt-hub 0.1.0 src:abd", "0.81", "suite", facts)
