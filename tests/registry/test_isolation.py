"""A Python plugin whose import, declaration or client creation ends the process fails alone.

The CLI and the conformance run import each Python plugin of another distribution in a child
process first (``isolate_python``), and the conformance run creates its first client there too:
a plugin that calls ``os._exit``, crashes or raises KeyboardInterrupt is recorded as failed with
what happened, and every other plugin, and the command, go on. The children get this process's
import path, so they see the fake distributions the tests install on it.
"""

from __future__ import annotations

import dataclasses
import json

import pytest

from pjrt_hub import PluginRegistry, RegistrySettings
from pjrt_hub.cli import ExitCode, main

from ..conftest import plugin_source

HOSTILE_IMPORTS = {
    "exits": ("import os\nos._exit(3)\n", "importing 'hostile_mod' ended the process: a child process doing "
                                          "it ended with exit status 3"),
    "crashes": ("import ctypes\nctypes.string_at(0)\n", "importing 'hostile_mod' ended the process: a child "
                                                        "process doing it was killed by SIGSEGV"),
    "interrupts": ("raise KeyboardInterrupt\n", "importing 'hostile_mod' raised KeyboardInterrupt"),
}


def _install(fake_dist, name: str, source: str) -> None:
    fake_dist(f"{name}-pjrt", entry_points={"pjrt_hub.plugins": {name: f"{name}_mod"}},
              files={f"{name}_mod.py": source})


@pytest.mark.parametrize("kind", sorted(HOSTILE_IMPORTS))
def test_a_plugin_whose_import_ends_the_process_fails_alone(fake_dist, kind):
    source, words = HOSTILE_IMPORTS[kind]
    _install(fake_dist, "hostile", source)
    _install(fake_dist, "good", plugin_source("0.117"))
    registry = PluginRegistry(RegistrySettings(isolate_python=True), environ={})
    records = {r.name: r for r in registry.load()}
    assert records["hostile"].outcome.value == "failed"
    assert words in records["hostile"].reason, records["hostile"].reason
    assert records["good"].outcome.value == "loaded"
    assert records["numba_cpu"].outcome.value == "loaded"  # pjrt-hub's own: imported here directly


def test_a_declaration_that_ends_the_process_is_named_as_such(fake_dist):
    source = plugin_source("0.105").replace("def pjrt_hub_declare():\n", "def pjrt_hub_declare():\n    import os; os._exit(5)\n")
    assert "os._exit(5)" in source
    _install(fake_dist, "quitter", source)
    record = PluginRegistry(RegistrySettings(isolate_python=True), environ={}).record("quitter")
    assert record.outcome.value == "failed"
    assert "its pjrt_hub_declare (after importing 'quitter_mod') ended the process" in record.reason
    assert "exit status 5" in record.reason


def test_a_plugin_that_merely_raises_is_recorded_as_before(fake_dist):
    # The child only reports an end of the process: what a plugin raises is recorded by the
    # registry's own import, with the same words as without isolation.
    _install(fake_dist, "raiser", "raise ImportError('libacme.so.1: cannot open shared object file')\n")
    isolated = PluginRegistry(RegistrySettings(isolate_python=True), environ={}).record("raiser")
    plain = PluginRegistry(RegistrySettings(), environ={}).record("raiser")
    assert isolated.outcome == plain.outcome and isolated.reason == plain.reason
    assert "raised ImportError" in isolated.reason


def test_check_reports_a_plugin_that_ends_the_process_and_goes_on(fake_dist, capsys):
    _install(fake_dist, "hostile", HOSTILE_IMPORTS["crashes"][0])
    _install(fake_dist, "good", plugin_source("0.117"))
    code = main(["check", "--json", "--only", "hostile", "--only", "good"])
    report = json.loads(capsys.readouterr().out)
    assert code == ExitCode.FAILURE
    outcomes = {p["name"]: p["outcome"] for p in report["plugins"]}
    assert (outcomes["good"], outcomes["hostile"]) == ("loaded", "failed")
    assert any("hostile: failed: importing 'hostile_mod' ended the process" in p for p in report["problems"])


_EXIT_AT_CREATION = """

def _exit_at_creation(self, options=None):
    import os
    os._exit(17)


FakeApi.client_create = _exit_at_creation
"""
_CLIENT_EXITS = plugin_source("0.117", body=_EXIT_AT_CREATION)


def test_conformance_of_a_plugin_whose_client_creation_ends_the_process_fails_version_loaded(
        fake_dist, capsys):
    _install(fake_dist, "exiting", _CLIENT_EXITS)
    code = main(["conformance", "--plugin", "exiting", "--json", "--case", "version/*", "--case", "client/*"])
    report = json.loads(capsys.readouterr().out)
    assert code == ExitCode.FAILURE
    (plugin,) = report["plugins"]
    assert plugin["load_outcome"] == "failed"
    assert "creating a client ended the process: a child process doing it ended with exit status 17" in \
        plugin["load_reason"]
    failed = {c["id"]: c["message"] for c in plugin["cases"] if c["outcome"] == "failed"}
    assert list(failed) == ["version/loaded"]
    # It loaded, but no client can be made: the case says it cannot be used, and why.
    assert failed["version/loaded"].startswith(
        "plugin exiting cannot be used: failed: creating a client ended the process"), failed


def test_conformance_of_a_plugin_whose_client_creation_hangs_fails_version_loaded_once(
        fake_dist, capsys):
    _install(fake_dist, "stuck", plugin_source("0.117", body="""

def _hang_at_creation(self, options=None):
    import threading
    threading.Event().wait()


FakeApi.client_create = _hang_at_creation
"""))
    code = main(["conformance", "--plugin", "stuck", "--json", "--case", "version/*", "--case", "client/*",
                 "--timeout-scale", "0.02"])
    report = json.loads(capsys.readouterr().out)
    assert code == ExitCode.FAILURE
    (plugin,) = report["plugins"]
    assert plugin["load_outcome"] == "failed"
    assert "creating a client did not return within 1.2 s (in a child process" in plugin["load_reason"]
    assert [c["id"] for c in plugin["cases"] if c["outcome"] == "failed"] == ["version/loaded"]


def test_a_plugin_that_prints_at_import_is_not_mistaken_for_one_that_died(fake_dist):
    # The child's answer is a line of its own on file descriptor 1, whatever the plugin wrote
    # there (no newline) or did to sys.stdout.
    _install(fake_dist, "chatty", "import sys\nsys.stdout.write('acme runtime 2.1 ready')\nsys.stdout = None\n"
             + plugin_source("0.117"))
    record = PluginRegistry(RegistrySettings(isolate_python=True), environ={}).record("chatty")
    assert record.outcome.value == "loaded", record.reason


def test_the_client_child_judges_versions_with_the_registrys_window_and_floor(fake_dist):
    # 0.28 is below the default floor (0.29): only --floor-minor lets it in. The child that
    # creates the first client must judge it the same way, or it refuses the plugin, reports
    # nothing, and the client is then created in the caller's process, unprotected.
    # A framework at 0.29 takes 0.28 within the default window, so there the floor alone
    # decides; at the newest framework, 0.28 was superseded years before: the window must be
    # widened too.
    from pjrt_hub import Policy
    from pjrt_hub.abi import ApiVersion

    _install(fake_dist, "oldexit", plugin_source("0.28", body=_EXIT_AT_CREATION))
    assert PluginRegistry(RegistrySettings(isolate_python=True), environ={}).record("oldexit").outcome.value == "incompatible"
    for policy in (Policy(framework=ApiVersion(0, 29), floor_minor=20), Policy(floor_minor=0, window_weeks=1000)):
        registry = PluginRegistry(RegistrySettings(isolate_python=True, policy=policy), environ={})
        assert registry.record("oldexit").outcome.value == "loaded", registry.record("oldexit").reason
        assert registry.record("oldexit").verdict.rule == "window"
        for narrower in (dataclasses.replace(policy, floor_minor=Policy().floor_minor),
                         Policy(floor_minor=policy.floor_minor)):
            # Each is needed: the floor alone, or the other settings alone, refuse the plugin.
            refused = PluginRegistry(RegistrySettings(policy=narrower), environ={})
            assert refused.record("oldexit").outcome.value == "incompatible", narrower
        reason = registry.preflight_client("oldexit", 60)
        assert reason is not None and "creating a client ended the process" in reason, reason
        assert "exit status 17" in reason
        assert registry.record("oldexit").outcome.value == "failed"


def test_the_client_child_judges_versions_with_the_registrys_dates(fake_dist):
    # Dates given to the registry (no dates at all: the floor decides) must reach the child too.
    from pjrt_hub import Policy
    from pjrt_hub.atlas import MinorDates

    _install(fake_dist, "oldexit", plugin_source("0.40", body=_EXIT_AT_CREATION))
    policy = Policy(dates=MinorDates({}))
    registry = PluginRegistry(RegistrySettings(isolate_python=True, policy=policy), environ={})
    assert registry.record("oldexit").verdict.rule == "window-floor"
    assert PluginRegistry(RegistrySettings(), environ={}).record("oldexit").outcome.value == "incompatible"
    reason = registry.preflight_client("oldexit", 60)
    assert reason is not None and "exit status 17" in reason, reason
