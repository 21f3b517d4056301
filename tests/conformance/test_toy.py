"""The toy plugin conforms; the suite's version gating and limitations work on it."""

from __future__ import annotations

from ..fixtures import install_toy


def test_the_toy_plugin_passes_every_case_that_applies(fake_dist, run_cases):
    install_toy(fake_dist)
    results = run_cases("toy")
    failed = {k: v for k, v in results.items() if v[0] in ("failed", "xpassed")}
    assert not failed
    outcomes = [v[0] for v in results.values()]
    assert outcomes.count("passed") > 100
    # Its declared limitation (a compiler of elementwise ops only) holds for every corpus program.
    corpus = {k: v for k, v in results.items() if k.startswith("execute/corpus_")}
    assert corpus and all(v[0] == "xfailed" for v in corpus.values())
    assert "unsupported op" in corpus["execute/corpus_softmax"][1]
    # C-only cases and extensions it does not offer are skipped, saying why.
    assert results["abi/api_struct_size"] == ("skipped", "a check for c plugins; toy is a python plugin")
    assert results["extensions/FFI"][0] == "skipped" and "offers Layouts, MemoryDescriptions" in results["extensions/FFI"][1]
    assert results["extensions/Layouts"][0] == "passed"


def test_cases_newer_than_the_plugin_or_the_framework_are_skipped_with_the_versions(fake_dist, run_cases):
    install_toy(fake_dist, "old_toy", api_version="0.81")
    results = run_cases("old_toy", ("version/*", "devices/attributes", "compile/*"), framework="0.81")
    assert results["version/implements_Device.get_attributes"] == (
        "skipped", "needs PJRT API 0.92; plugin old_toy implements 0.81")
    assert results["version/implements_LoadedExecutable.get_device_assignment"][0] == "passed"
    install_toy(fake_dist, "new_toy", api_version="0.105", min_framework_version="0.81")
    results = run_cases("new_toy", ("devices/attributes", "version/loaded"), framework="0.81")
    assert results["version/loaded"][0] == "passed"
    assert results["devices/attributes"] == (
        "skipped", "needs PJRT API 0.92; the framework acts as 0.81 (--framework-version)")


def test_a_refused_plugin_fails_version_loaded_and_skips_the_rest(fake_dist, run_cases):
    install_toy(fake_dist, "too_new", api_version="0.105")
    results = run_cases("too_new", ("version/loaded", "client/*"), framework="0.95")
    outcome, message = results["version/loaded"]
    assert outcome == "failed"
    assert "incompatible" in message and "no backward-compatibility policy" in message
    assert all(v[0] == "skipped" and "see version/loaded" in v[1] for k, v in results.items() if k.startswith("client/"))


def test_a_limitation_that_no_longer_holds_is_an_xpass(fake_dist, run_cases):
    from pjrt_hub.abi import Limitation

    install_toy(fake_dist, "humble", limitations=[Limitation("thinks it has no platform name", ("client/platform_*",))])
    results = run_cases("humble", ("client/platform_*",))
    assert results["client/platform_name"] == ("xpassed", "")
