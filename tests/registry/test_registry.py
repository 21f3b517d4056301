"""The registry against real fake distributions: every outcome and every failure mode."""

from __future__ import annotations

import json
import warnings

import pytest

from pjrt_hub import Outcome, Policy, PluginRegistry, RegistrySettings
from pjrt_hub.abi import (
    ApiVersion,
    NotFound,
    PluginLoadError,
    PluginValidationError,
    Unavailable,
    Unimplemented,
    VersionError,
)
from pjrt_hub.atlas import MinorDates
from pjrt_hub.extensions import ExtensionRequest, ExtensionWarning

from ..conftest import plugin_source

GROUP = "pjrt_hub.plugins"


def registry(**settings) -> PluginRegistry:
    return PluginRegistry(RegistrySettings(**settings), environ={})


def install(fake_dist, dist: str, name: str, source: str, *, version: str = "1.0", requires=None):
    module = f"{dist.replace('-', '_')}_mod"
    fake_dist(dist, version, entry_points={GROUP: {name: module}}, files={f"{module}.py": source},
              requires=requires)


def outcome(reg: PluginRegistry, name: str):
    return reg.record(name)


def test_a_good_plugin_loads_with_its_facts(fake_dist):
    install(fake_dist, "acme-pjrt", "acme", plugin_source("0.117", extra_decl=', extensions={"Layouts": 2}'),
            version="2.3.1")
    reg = registry()
    reg.load()
    rec = reg.record("acme")
    assert rec.outcome is Outcome.LOADED, rec.reason
    assert (rec.kind, rec.distribution, rec.distribution_version) == ("python", "acme-pjrt", "2.3.1")
    assert rec.api_version == "0.117" and rec.platform_name == "fake"
    assert rec.extensions == {"Layouts": 2}
    assert rec.entry_point == "pjrt_hub.plugins: acme = acme_pjrt_mod"
    assert reg.plugin_manager.has_plugin("acme")
    client = reg.create_client("acme")
    assert client.platform_name() == "fake"


BAD_PLUGINS = {
    "import_raises": ("raise RuntimeError('no device driver')", "importing", "no device driver"),
    "syntax_error": ("def broken(:\n    pass", "SyntaxError", "SyntaxError"),
    "system_exit": ("import sys\nsys.exit(3)", "SystemExit", "SystemExit"),
    "hook_raises": (
        "from pjrt_hub.abi import hookimpl\n@hookimpl\ndef pjrt_hub_declare():\n    raise ValueError('bad mood')",
        "pjrt_hub_declare raised ValueError", "bad mood"),
    "registers_nothing": ("def pjrt_hub_declare():\n    return None\nX = 1", "registers nothing", None),
    "declare_returns_none": (
        "from pjrt_hub.abi import hookimpl\n@hookimpl\ndef pjrt_hub_declare():\n    return None",
        "registers nothing", None),
    "non_numeric_version": (plugin_source("zero.five"), "declares garbage", "not a PJRT API version"),
    "negative_minor": (plugin_source("0.-3"), "declares garbage", "api_version"),
    "unknown_extension": (plugin_source("0.117", extra_decl=', extensions={"Warp": 1}'),
                          "declares garbage", "unknown extension 'Warp'"),
    "wrong_types": (
        "from pjrt_hub.abi import hookimpl\n@hookimpl\ndef pjrt_hub_declare():\n"
        "    return {'api_version': 105, 'platform_name': 5}",
        "declares garbage", "api_version"),
    "extension_version_not_int": (plugin_source("0.117", extra_decl=', extensions={"FFI": "two"}'),
                                  "declares garbage", "extensions.FFI"),
    "declaration_is_a_list": (
        "from pjrt_hub.abi import hookimpl\n@hookimpl\ndef pjrt_hub_declare():\n    return [1, 2]",
        "declares garbage", "expected a PluginDeclaration"),
    "unknown_hook": (plugin_source("0.117", body="@hookimpl\ndef pjrt_hub_frobnicate():\n    pass\n"),
                     "unknown hooks pjrt_hub_frobnicate", None),
    "extra_key": (
        "from pjrt_hub.abi import hookimpl\n@hookimpl\ndef pjrt_hub_declare():\n"
        "    return {'api_version': '0.117', 'colour': 'blue'}",
        "declares garbage", "colour"),
}


@pytest.mark.parametrize("case", sorted(BAD_PLUGINS))
def test_a_bad_plugin_fails_with_its_reason_and_the_others_still_load(fake_dist, case):
    source, reason_part, error_part = BAD_PLUGINS[case]
    install(fake_dist, "good-one", "good", plugin_source("0.117"))
    install(fake_dist, "bad-one", "bad", source)
    install(fake_dist, "good-two", "good2", plugin_source("0.117"))
    reg = registry()
    reg.load()
    bad = reg.record("bad")
    assert bad.outcome is Outcome.FAILED
    assert reason_part in bad.reason
    if error_part is not None:
        assert error_part in (bad.error or "") + bad.reason
    assert reg.record("good").outcome is Outcome.LOADED
    assert reg.record("good2").outcome is Outcome.LOADED
    assert not reg.plugin_manager.has_plugin("bad")
    with pytest.raises(PluginLoadError, match="bad"):
        reg.require(["bad"])


def test_a_file_no_loader_reads_says_why_it_cannot_be_a_library(tmp_path):
    files = {"empty": b"", "text": b"hello\n", "header": b"\x7fELF", "elf": FAKE_SO.ljust(64, b"\0")}
    for name, data in files.items():
        (tmp_path / f"{name}.so").write_bytes(data)
    env = {"PJRT_NAMES_AND_LIBRARY_PATHS": ",".join(f"{n}:{tmp_path / n}.so" for n in files)}
    reg = PluginRegistry(RegistrySettings(autoload=False, policy=Policy(framework=ApiVersion(0, 105))), environ=env)
    reg.add_loader(FakeLoader({name: None for name in files}), "fake")
    reg.load()
    reasons = {name: reg.record(name).reason for name in files}
    assert reasons["empty"].endswith("it is an empty file, not a shared library")
    assert reasons["text"].endswith("it is not a shared library (no ELF header)")
    assert reasons["header"].endswith("it is a truncated ELF file (shorter than an ELF header)")
    assert "no installed loader reads it (" in reasons["elf"]


def test_a_declaration_that_never_returns_fails_after_the_deadline(fake_dist):
    """A pjrt_hub_declare that waits for ever (on a device, a network) held list and check for
    ever; now the plugin fails once probe_timeout has passed, and the others load."""
    install(fake_dist, "good-one", "good", plugin_source("0.117"))
    install(fake_dist, "stuck-one", "stuck",
            "import threading\nfrom pjrt_hub.abi import hookimpl\n@hookimpl\ndef pjrt_hub_declare():\n"
            "    threading.Event().wait()\n")
    reg = registry(probe_timeout=0.5)
    reg.load()
    stuck = reg.record("stuck")
    assert stuck.outcome is Outcome.FAILED and "did not return within 0.5 s" in stuck.reason
    assert reg.record("good").outcome is Outcome.LOADED


def test_skewed_versions_are_incompatible_with_a_version_message(fake_dist):
    install(fake_dist, "too-old", "old", plugin_source("0.45"))
    install(fake_dist, "in-window", "recent", plugin_source("0.47"))
    install(fake_dist, "major", "major", plugin_source("1.50"))
    install(fake_dist, "newer", "newer", plugin_source("0.60"))
    install(fake_dist, "newer-ok", "newer_ok", plugin_source("0.60", extra_decl=', min_framework_version="0.48"'))
    install(fake_dist, "ancient", "ancient", plugin_source("0.20"))
    reg = registry(policy=Policy(framework=ApiVersion(0, 50)))
    reg.load()
    old = reg.record("old")
    assert old.outcome is Outcome.INCOMPATIBLE and old.verdict.rule == "window"
    assert "0.45" in old.reason and "0.50" in old.reason and "too-old" in old.reason
    assert reg.record("recent").outcome is Outcome.LOADED
    assert reg.record("major").verdict.rule == "major"
    assert reg.record("newer").outcome is Outcome.INCOMPATIBLE
    assert reg.record("newer_ok").outcome is Outcome.LOADED
    assert reg.record("ancient").verdict.rule == "floor"
    assert "older than the minimum supported version 0.29" in reg.record("ancient").reason
    # Refused before registration: pluggy never saw them.
    for name in ("old", "major", "newer"):
        assert not reg.plugin_manager.has_plugin(name)
    with pytest.raises(VersionError, match="forward-compatibility window"):
        reg.require(["old"])


def test_strict_mode_refuses_any_difference(fake_dist):
    install(fake_dist, "near", "near", plugin_source("0.104"))
    reg = registry(policy=Policy(framework=ApiVersion(0, 105), strict=True))
    reg.load()
    assert reg.record("near").verdict.rule == "strict"


def test_disable_and_allow_lists_block(fake_dist):
    for n in ("a", "b", "c"):
        install(fake_dist, f"dist-{n}", n, plugin_source("0.117"))
    reg = registry(disabled=frozenset({"b"}))
    reg.load()
    assert reg.record("b").outcome is Outcome.BLOCKED
    assert reg.record("a").outcome is Outcome.LOADED
    reg = registry(allowed=frozenset({"c"}))
    reg.load()
    assert [reg.record(n).outcome for n in "abc"] == [Outcome.BLOCKED, Outcome.BLOCKED, Outcome.LOADED]
    assert "allow-list" in reg.record("a").reason


def test_settings_from_the_environment(fake_dist):
    install(fake_dist, "dist-x", "x", plugin_source("0.117"))
    install(fake_dist, "dist-y", "y", plugin_source("0.117"))
    settings = RegistrySettings.from_environment({"PJRT_HUB_DISABLE_PLUGINS": "X, z"})
    assert settings.disabled == {"x", "z"}
    reg = PluginRegistry(settings, environ={})
    reg.load()
    assert reg.record("x").outcome is Outcome.BLOCKED
    settings = RegistrySettings.from_environment({"PJRT_HUB_PLUGIN_AUTOLOAD": "0"})
    reg = PluginRegistry(settings, environ={})
    assert reg.load() == []
    assert RegistrySettings.from_environment({"PJRT_HUB_PLUGINS": "y"}).allowed == {"y"}


def test_duplicate_names_are_reported_not_dropped(fake_dist):
    install(fake_dist, "first-dist", "twin", plugin_source("0.117"), version="1.0")
    install(fake_dist, "second-dist", "twin", plugin_source("0.117"), version="2.0")
    reg = registry()
    records = [r for r in reg.load() if r.name == "twin"]
    assert sorted(r.outcome for r in records) == sorted([Outcome.LOADED, Outcome.DUPLICATE])
    dup = next(r for r in records if r.outcome is Outcome.DUPLICATE)
    assert "first-dist" in dup.reason and "second-dist" in dup.reason


def test_framework_pins_are_checked_with_specifiers(fake_dist):
    install(fake_dist, "pinned-high", "pinned", plugin_source("0.117"), requires=["pjrt-hub>=99"])
    install(fake_dist, "pinned-ok", "pinned_ok", plugin_source("0.117"), requires=["pjrt-hub>=0.1"])
    install(fake_dist, "pinned-decl", "pinned_decl",
            plugin_source("0.117", extra_decl=', framework_requires=["pjrt-hub<0.0.1"]'))
    reg = registry()
    reg.load()
    rec = reg.record("pinned")
    assert rec.outcome is Outcome.INCOMPATIBLE
    assert "requires pjrt-hub>=99" in rec.reason and "is installed" in rec.reason
    assert reg.record("pinned_ok").outcome is Outcome.LOADED
    assert reg.record("pinned_decl").outcome is Outcome.INCOMPATIBLE


def test_extension_negotiation(fake_dist):
    install(fake_dist, "no-layouts", "plain", plugin_source("0.117"))
    install(fake_dist, "layouts", "layouts", plugin_source("0.117", extra_decl=', extensions={"Layouts": 3}'))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        reg = registry(extension_requests=(ExtensionRequest("Layouts", 2, required=False),),
                       allowed=frozenset({"plain", "layouts"}))
        reg.load()
    relevant = [w for w in caught if issubclass(w.category, ExtensionWarning)]
    assert len(relevant) == 1 and "plugin plain" in str(relevant[0].message)
    assert "Layouts" in str(relevant[0].message)
    assert reg.record("plain").outcome is Outcome.LOADED
    assert reg.record("plain").warnings == [str(relevant[0].message)]
    assert reg.record("layouts").negotiation.agreed == {"Layouts": 3}

    reg = registry(extension_requests=(ExtensionRequest("Layouts", 2, required=True),))
    reg.load()
    rec = reg.record("plain")
    assert rec.outcome is Outcome.INCOMPATIBLE and "required extension missing" in rec.reason
    assert reg.record("layouts").outcome is Outcome.LOADED


def test_calls_newer_than_an_older_plugin_are_unimplemented(fake_dist):
    install(fake_dist, "old-api", "oldapi", plugin_source("0.32"))
    reg = registry(policy=Policy(framework=ApiVersion(0, 50), window_weeks=52))
    reg.load()
    client = reg.create_client("oldapi")
    assert client.platform_name() == "fake"
    with pytest.raises(Unimplemented, match=r"PJRT_Client_CreateViewOfDeviceBuffer\) was added in PJRT API 0.33"):
        client.create_view_of_device_buffer(object())
    with pytest.raises(Unimplemented, match="not implemented by this plugin"):
        client.devices()  # in its minor, but the plugin left it out


def test_get_api_failures_are_named(fake_dist):
    raising = plugin_source("0.117").replace("return FakeApi()", "raise OSError('driver gone')")
    install(fake_dist, "raises-late", "late", raising)
    install(fake_dist, "liar", "liar", plugin_source("0.117", api_version="0.81"))
    install(fake_dist, "wrong-type", "wrongtype", plugin_source("0.117").replace("return FakeApi()", "return 42"))
    reg = registry()
    reg.load()
    with pytest.raises(PluginLoadError, match="driver gone"):
        reg.api("late")
    assert reg.record("late").outcome is Outcome.FAILED
    with pytest.raises(PluginValidationError, match="declared PJRT API 0.117 but its Api reports 0.81"):
        reg.api("liar")
    with pytest.raises(PluginValidationError, match="returned int"):
        reg.api("wrongtype")


def test_hardware_plugins_get_no_client_unless_allowed(fake_dist):
    install(fake_dist, "tpu-like", "tpulike", plugin_source("0.117", extra_decl=", needs_hardware=True"))
    reg = registry()
    reg.load()
    with pytest.raises(Unavailable, match="read its version only"):
        reg.create_client("tpulike")
    assert reg.create_client("tpulike", allow_hardware=True).platform_name() == "fake"


def test_unknown_name_lists_what_exists(fake_dist):
    install(fake_dist, "known", "known", plugin_source("0.117"))
    reg = registry()
    with pytest.raises(NotFound, match="no plugin named 'ghost'.*known"):
        reg.record("ghost")


def test_pjrt_device_chooses_the_default_plugin(fake_dist):
    install(fake_dist, "dev-a", "deva", plugin_source("0.117"))
    reg = PluginRegistry(RegistrySettings(), environ={"PJRT_DEVICE": "DEVA"})
    assert reg.create_client().platform_name() == "fake"


def test_register_by_hand_goes_through_the_same_checks(site):
    (site / "handmade.py").write_text(plugin_source("0.40"))
    import handmade

    # With no date known, the floor alone decides, as it does for a discovered plugin.
    undated = Policy(framework=ApiVersion(0, 105), dates=MinorDates({}))
    reg = registry(autoload=False, policy=undated)
    rec = reg.register(handmade, "handmade")
    assert rec.outcome is Outcome.LOADED and rec.verdict.rule == "window-floor"
    # With the shipped dates, 0.40 was superseded long before 0.105's window opened: refused.
    reg = registry(autoload=False, policy=Policy(framework=ApiVersion(0, 105)))
    rec = reg.register(handmade, "handmade")
    assert rec.outcome is Outcome.INCOMPATIBLE and rec.verdict.rule == "window"
    assert not reg.plugin_manager.has_plugin("handmade")


# -- C plugins: found from entry points, the namespace package and the environment -------------

FAKE_SO = b"\x7fELF not really a library"


def test_c_plugins_from_entry_points_are_found_with_their_library(fake_dist):
    fake_dist("xla-cpu-pjrt", "0.0.1", entry_points={"xla_plugins": {"xla_cpu_pjrt": "xla_plugins.xla_cpu_pjrt"}},
              files={"xla_plugins/xla_cpu_pjrt/__init__.py": "raise RuntimeError('must not be imported')",
                     "xla_plugins/xla_cpu_pjrt/xla_cpu_pjrt.so": FAKE_SO})
    fake_dist("jax-cuda12-pjrt", "0.4.23", entry_points={"jax_plugins": {"xla_cuda12": "jax_plugins.xla_cuda12"}},
              files={"jax_plugins/xla_cuda12/__init__.py": "raise RuntimeError('must not be imported')",
                     "jax_plugins/xla_cuda12/xla_cuda_plugin.so": FAKE_SO,
                     "jax_plugins/xla_cuda12/libhelper.so": b""})
    reg = registry()
    reg.load()
    cpu = reg.record("xla_cpu_pjrt")
    assert cpu.kind == "c" and cpu.outcome is Outcome.FOUND
    assert cpu.library_path.endswith("xla_plugins/xla_cpu_pjrt/xla_cpu_pjrt.so")
    assert cpu.distribution == "xla-cpu-pjrt" and cpu.source == "entry point xla_plugins"
    cuda = reg.record("xla_cuda12")
    assert cuda.library_path.endswith("xla_cuda_plugin.so")


def test_c_entry_point_without_a_library_fails(fake_dist):
    fake_dist("empty-pjrt", "1.0", entry_points={"jax_plugins": {"empty": "jax_plugins.empty"}},
              files={"jax_plugins/empty/__init__.py": ""})
    reg = registry()
    reg.load()
    rec = reg.record("empty")
    assert rec.outcome is Outcome.FAILED and "no shared library found" in rec.reason


def test_jax_plugins_namespace_modules_are_found(site):
    (site / "jax_plugins" / "my_accel").mkdir(parents=True)
    (site / "jax_plugins" / "my_accel" / "libmy_accel_pjrt.so").write_bytes(FAKE_SO)
    reg = registry()
    reg.load()
    rec = reg.record("my_accel")
    assert rec.kind == "c" and rec.source == "jax_plugins namespace package"


def test_environment_library_paths(tmp_path):
    lib = tmp_path / "libfoo.so"
    lib.write_bytes(FAKE_SO)
    config = tmp_path / "bar.json"
    config.write_text(json.dumps({"library_path": str(lib), "create_options": {"cpu_device_count": 2}}))
    bad_config = tmp_path / "baz.json"
    bad_config.write_text(json.dumps({"path": "x"}))
    env = {"PJRT_NAMES_AND_LIBRARY_PATHS": f"foo:{lib},bar:{config},oops,baz:{bad_config},gone:/nope.so"}
    reg = PluginRegistry(RegistrySettings(autoload=False), environ=env)
    reg.load()
    assert reg.record("foo").library_path == str(lib)
    assert reg.record("bar").library_path == str(lib)
    oops = reg.record("oops")
    assert oops.outcome is Outcome.FAILED and "invalid value 'oops' in env var PJRT_NAMES_AND_LIBRARY_PATHS" in oops.reason
    assert 'should contain "library_path" field' in reg.record("baz").reason
    assert "does not exist" in reg.record("gone").reason


class FakeLoader:
    """A loader of C libraries that answers from a table instead of reading the file."""

    def __init__(self, probes):
        self.probes = probes
        self.loaded = []

    from pjrt_hub.abi import hookimpl as _hookimpl

    @_hookimpl
    def pjrt_hub_probe_library(self, path, timeout):
        from pathlib import Path

        answer = self.probes[Path(path).stem]
        if isinstance(answer, Exception):
            raise answer
        return answer

    @_hookimpl
    def pjrt_hub_load_library(self, path, name):
        import handmade_c

        self.loaded.append(name)
        return handmade_c.FakeApi()


def test_c_plugins_are_probed_judged_and_loaded(tmp_path, site):
    (site / "handmade_c.py").write_text(plugin_source("0.81"))
    names = ["cpu81", "cpu115", "crashy", "major", "garbage", "tpu", "buggy"]
    for n in names:
        (tmp_path / f"{n}.so").write_bytes(FAKE_SO)
    ext = [{"type": 4, "name": "Layouts", "struct_size": 72}, {"type": 9, "name": "PhaseCompile", "struct_size": 64},
           {"type": 99, "name": "?", "struct_size": 8}]
    loader = FakeLoader({
        "cpu81": {"outcome": "ok", "message": "", "api_version": "0.81", "extensions": ext},
        "cpu115": {"outcome": "ok", "message": "", "api_version": "0.115", "extensions": []},
        "crashy": {"outcome": "crashed", "message": "killed by SIGSEGV"},
        "major": {"outcome": "ok", "message": "", "api_version": "1.3", "extensions": []},
        "garbage": {"outcome": "ok", "message": "", "api_version": "x.y"},
        "tpu": {"outcome": "ok", "message": "", "api_version": "0.117", "extensions": [],
                "client_creation_risk": "libtpu looks for a cloud metadata server and hangs"},
        "buggy": RuntimeError("loader bug"),
    })
    env = {"PJRT_NAMES_AND_LIBRARY_PATHS": ",".join(f"{n}:{tmp_path / n}.so" for n in names)}
    # A framework at 0.85, whose window still takes 0.81: cpu81 is an older plugin, accepted.
    reg = PluginRegistry(RegistrySettings(autoload=False, policy=Policy(framework=ApiVersion(0, 85))), environ=env)
    reg.add_loader(loader, "fake")
    reg.load()
    cpu = reg.record("cpu81")
    assert cpu.outcome is Outcome.LOADED and cpu.api_version == "0.81" and cpu.verdict.rule == "window"
    assert cpu.extensions == {"Layouts": 2, "PhaseCompile": 1}
    assert cpu.details["outcome"] == "ok"
    assert reg.record("cpu115").verdict.rule == "c-newer"
    crashy = reg.record("crashy")
    assert crashy.outcome is Outcome.FAILED and "crashed" in crashy.reason and "SIGSEGV" in crashy.reason
    assert reg.record("major").outcome is Outcome.INCOMPATIBLE
    assert "malformed API version" in reg.record("garbage").reason
    assert reg.record("buggy").outcome is Outcome.FAILED and "loader bug" in reg.record("buggy").error
    with pytest.raises(Unavailable, match="metadata server"):
        reg.create_client("tpu")
    client = reg.create_client("cpu81")
    assert client.platform_name() == "fake" and loader.loaded == ["cpu81"]
    assert reg.api("cpu81")._gate.call_limit == 81


def test_c_plugins_without_a_loader_are_found_not_probed(tmp_path):
    lib = tmp_path / "libx.so"
    lib.write_bytes(FAKE_SO)
    reg = PluginRegistry(RegistrySettings(autoload=False), environ={"PJRT_NAMES_AND_LIBRARY_PATHS": f"x:{lib}"})
    reg._loaders = __import__("pluggy").PluginManager("pjrt_hub")  # an empty set of loaders
    reg._loaders.add_hookspecs(__import__("pjrt_hub.abi.hookspecs", fromlist=["x"]))
    reg.load()
    assert reg.record("x").outcome is Outcome.FOUND
    assert "not probed" in reg.record("x").reason


def test_a_plugins_declaration_is_read_once_and_given_by_the_registry():
    from pjrt_hub.abi import Limitation, hookimpl
    from pjrt_hub.testing import PluginUnderTest
    from pjrt_hub.testing.toy import ToyPlugin

    class Counting(ToyPlugin):
        calls = 0

        @hookimpl
        def pjrt_hub_declare(self):
            type(self).calls += 1
            return super().pjrt_hub_declare()

    reg = registry(autoload=False)
    reg.register(Counting(limitations=[Limitation("no process index", ("client/process_index",))]), "counted")
    declaration = reg.declaration("counted")
    assert declaration.version == ApiVersion(0, 117) and declaration.limitations[0].description == "no process index"
    ctx = PluginUnderTest(reg, "counted")
    assert ctx.declaration is declaration and ctx.limitations[0].cases == ("client/process_index",)
    assert Counting.calls == 1, "the declaration hook was called again after the registry read it"
    assert reg.declaration("COUNTED") is declaration
    with pytest.raises(NotFound, match="no plugin named 'nobody'"):
        reg.declaration("nobody")


def test_a_loaders_answer_becomes_a_probe_report_and_garbage_a_failure(tmp_path):
    from pjrt_hub.abi.probe import ProbeReport

    names = ["mapped", "typed", "garbled", "nonsense"]
    for n in names:
        (tmp_path / f"{n}.so").write_bytes(FAKE_SO)
    loader = FakeLoader({
        # The mapping form: no path or name, the reason under its older name.
        "mapped": {"outcome": "ok", "message": "", "api_version": "0.81",
                   "extensions": [{"type": 4, "name": "Layouts", "struct_size": 72}], "vendor_note": "kept"},
        "typed": ProbeReport(path="/elsewhere/libtyped.so", name="typed", outcome="crashed", reason="SIGSEGV in init"),
        "garbled": {"outcome": "ok", "api_version": "0.81", "extensions": "all of them"},
        "nonsense": ["not", "a", "report"],
    })
    env = {"PJRT_NAMES_AND_LIBRARY_PATHS": ",".join(f"{n}:{tmp_path / n}.so" for n in names)}
    # The framework the 0.81 answers were built for: the test is of the answer's form, not the window.
    reg = PluginRegistry(RegistrySettings(autoload=False, policy=Policy(framework=ApiVersion(0, 81))), environ=env)
    reg.add_loader(loader, "fake")
    reg.load()
    mapped = reg.probe_report("mapped")
    assert isinstance(mapped, ProbeReport) and mapped.path == str(tmp_path / "mapped.so") and mapped.name == "mapped"
    assert mapped.extensions[0].struct_size == 72 and mapped.reason == "" and mapped.vendor_note == "kept"
    assert reg.record("mapped").outcome is Outcome.LOADED and reg.record("mapped").extensions == {"Layouts": 2}
    assert reg.record("mapped").details["vendor_note"] == "kept"  # other keys are reported as they are
    assert reg.probe_report("typed").reason == "SIGSEGV in init"
    assert reg.record("typed").reason.endswith("failed (crashed): SIGSEGV in init")
    for name in ("garbled", "nonsense"):
        record = reg.record(name)
        assert record.outcome is Outcome.FAILED and "loader's answer is malformed" in record.reason, record
        assert "\n" not in record.reason and reg.probe_report(name) is None
    assert "extensions" in reg.record("garbled").reason


def test_a_loader_that_raises_is_a_failure_that_says_what_it_raised(tmp_path):
    """A truncated ELF file made the c_api loader raise struct.error; the record said only that
    the loader raised."""
    import struct

    (tmp_path / "trunc.so").write_bytes(FAKE_SO)
    loader = FakeLoader({"trunc": struct.error("unpack_from requires a buffer of at least 64 bytes")})
    env = {"PJRT_NAMES_AND_LIBRARY_PATHS": f"trunc:{tmp_path / 'trunc.so'}"}
    reg = PluginRegistry(RegistrySettings(autoload=False, policy=Policy(framework=ApiVersion(0, 105))), environ=env)
    reg.add_loader(loader, "fake")
    reg.load()
    record = reg.record("trunc")
    assert record.outcome is Outcome.FAILED
    assert record.reason == ("the library loader raised while probing it "
                             "(error: unpack_from requires a buffer of at least 64 bytes)")


def test_a_plugin_the_gate_cannot_refuse_anything_runs_without_a_proxy():
    # The built-in CPU plugin implements the framework's own version: nothing is newer than its
    # limit, so the registry hands out its own client, and execute returns its own buffers.
    import numpy as np

    from pjrt_hub import Gated
    from pjrt_hub.abi import Program

    program = ("func.func @main(%a: tensor<f32>) -> tensor<f32> {\n"
               "  %0 = stablehlo.add %a, %a : tensor<f32>\n  return %0 : tensor<f32>\n}\n")
    reg = registry()
    reg.load()
    client = reg.create_client("reference")
    assert not isinstance(client, Gated) and client.unwrapped is client
    arg = client.buffer_from_host_buffer(np.asarray(np.float32(1.5)), device=client.devices()[0]).buffer
    out = client.compile(Program(program, "mlir")).execute([[arg]]).outputs[0][0]
    host = out.to_host_buffer()
    host.event.await_()
    assert not isinstance(out, Gated) and host.array == np.float32(3.0)
    # A framework pinned to an older minor limits the same plugin, and the gate is back.
    older = registry(policy=Policy(framework=ApiVersion(0, 91), window_weeks=520))
    older.load()
    assert older.record("reference").outcome is Outcome.LOADED, older.record("reference").reason
    gated = older.create_client("reference")
    assert isinstance(gated, Gated) and isinstance(gated.devices()[0], Gated)
    with pytest.raises(Unimplemented, match=r"PJRT_Device_GetAttributes\) was added in PJRT API 0.92"):
        gated.devices()[0].get_attributes()
