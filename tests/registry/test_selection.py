"""The block-list, the allow-list and autoload: what each did, said even when it matched nothing.

Selectors are ``name`` or ``name@distribution`` / ``name@library-path``; the advice given for a
duplicate name must be one that, followed to the letter, lets the ignored plugin load.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np

from pjrt_hub import Outcome, PluginRegistry, RegistrySettings
from pjrt_hub._discovery import Candidate
from pjrt_hub._registry import selector, selector_matches
from pjrt_hub.cli import ExitCode, main

from ..conftest import plugin_source

GROUP = "pjrt_hub.plugins"


def install(fake_dist, dist: str, name: str) -> None:
    module = f"{dist.replace('-', '_')}_sel"
    fake_dist(dist, "1.0", entry_points={GROUP: {name: module}}, files={f"{module}.py": plugin_source("0.117")})


def followed(reason: str, environ: dict[str, str]) -> PluginRegistry:
    """A registry built with the PJRT_HUB_DISABLE_PLUGINS setting the reason advises."""
    match = re.search(r"PJRT_HUB_DISABLE_PLUGINS=(\S+?) \(or --disable \1\)", reason)
    assert match, reason
    env = dict(environ, PJRT_HUB_DISABLE_PLUGINS=match.group(1))
    return PluginRegistry(RegistrySettings.from_environment(env), environ=env)


def test_selectors_keep_the_qualifier_as_written_and_match_distributions_canonically():
    assert selector("  Acme ") == "acme"
    assert selector(" Acme @ Some_Dist ") == "acme@Some_Dist"
    c = Candidate("acme", "python", "entry point", distribution="some-dist")
    assert selector_matches("acme", c) and selector_matches("acme@Some.Dist", c)
    assert not selector_matches("acme@other-dist", c) and not selector_matches("other", c)


def test_the_duplicate_advice_for_two_distributions_can_be_followed(fake_dist):
    install(fake_dist, "first-dist", "twin")
    install(fake_dist, "second-dist", "twin")
    reg = PluginRegistry(RegistrySettings(), environ={})
    twins = [r for r in reg.load() if r.name == "twin"]
    loaded = next(r for r in twins if r.outcome is Outcome.LOADED)
    ignored = next(r for r in twins if r.outcome is Outcome.DUPLICATE)
    assert f"uninstall {loaded.distribution}" in ignored.reason
    # Blocking by name would block both; the advice blocks only the one that took the name.
    after = {r.distribution: r for r in followed(ignored.reason, {}).load() if r.name == "twin"}
    assert after[loaded.distribution].outcome is Outcome.BLOCKED
    assert after[ignored.distribution].outcome is Outcome.LOADED


def test_the_duplicate_advice_for_two_libraries_blocks_by_path(tmp_path: Path):
    first, second = tmp_path / "a" / "libtwin.so", tmp_path / "b" / "libtwin.so"
    for path in (first, second):
        path.parent.mkdir()
        path.write_bytes(b"not a library")
    env = {"PJRT_NAMES_AND_LIBRARY_PATHS": f"twin:{first},twin:{second}"}
    reg = PluginRegistry(RegistrySettings.from_environment(env), environ=env)
    records = [r for r in reg.load() if r.name == "twin"]
    assert records[1].outcome is Outcome.DUPLICATE
    reason = records[1].reason
    assert f"twin@{first}" in reason and "or remove it from PJRT_NAMES_AND_LIBRARY_PATHS" in reason
    after = [r for r in followed(reason, env).load() if r.name == "twin"]
    assert after[0].outcome is Outcome.BLOCKED
    assert after[1].outcome is not Outcome.DUPLICATE and after[1].library_path == str(second)


def test_entries_that_name_nothing_are_reported_with_their_setting(fake_dist):
    install(fake_dist, "dist-a", "a")
    reg = PluginRegistry(RegistrySettings(allowed=frozenset({"a", "nosuch", "a@other-dist"}),
                                          disabled=frozenset({"ghost", "a@dist-a"})), environ={})
    reg.load()
    assert reg.record("a").outcome is Outcome.BLOCKED  # blocked by a@dist-a, which therefore matched
    notes = {(n.setting, n.selector): n.message for n in reg.unmatched()}
    assert set(notes) == {("allowed", "nosuch"), ("allowed", "a@other-dist"), ("disabled", "ghost")}
    assert "no plugin of that name was found" in notes["allowed", "nosuch"]
    assert "from distribution or library 'other-dist'" in notes["allowed", "a@other-dist"]
    assert "blocked nothing" in notes["disabled", "ghost"]


def run(capsys, *argv):
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_list_only_a_plugin_that_does_not_exist_says_so_and_exits_5(fake_dist, capsys):
    install(fake_dist, "dist-a", "a")
    code, out, err = run(capsys, "list", "--only", "nosuch")
    assert code == ExitCode.NOT_FOUND
    assert err.count("\n") == 1 and "--only names nosuch, but no plugin of that name was found" in err
    code, out, err = run(capsys, "list", "--only", "a")
    assert code == ExitCode.OK and err == ""


def test_check_only_a_plugin_that_does_not_exist_is_not_ok(fake_dist, capsys, monkeypatch):
    install(fake_dist, "dist-a", "a")
    monkeypatch.setenv("PJRT_HUB_PLUGINS", "nosuch")
    code, out, err = run(capsys, "check")
    assert code == ExitCode.NOT_FOUND
    assert "NOT OK" in out and "PJRT_HUB_PLUGINS or --only names nosuch" in out


def test_disable_of_a_plugin_that_does_not_exist_is_a_note_not_an_error(fake_dist, capsys):
    install(fake_dist, "dist-a", "a")
    code, out, err = run(capsys, "list", "--disable", "nosuch", "--json")
    assert code == ExitCode.OK
    assert "names nosuch, but no plugin of that name was found, so it blocked nothing" in err
    assert '"notes": [' in out and "blocked nothing" in out


def test_no_autoload_with_nothing_found_says_autoload_is_off(capsys):
    code, out, err = run(capsys, "list", "--no-autoload")
    assert code == ExitCode.OK
    assert "autoload is off" in out and "install a package" not in out.lower()
    code, out, err = run(capsys, "list")
    assert "autoload is off" not in out


def test_other_commands_say_it_too_without_changing_their_exit_status(tmp_path, capsys):
    program = tmp_path / "neg.mlir"
    program.write_text("func.func @main(%a: tensor<2xf32>) -> tensor<2xf32> {\n"
                       "  %0 = stablehlo.negate %a : tensor<2xf32>\n  return %0 : tensor<2xf32>\n}\n")
    inputs = tmp_path / "in.npz"
    np.savez(inputs, in0=np.ones(2, np.float32))
    code, out, err = run(capsys, "run", str(program), "--plugin", "reference", "--inputs", str(inputs),
                         "--disable", "ghost")
    assert code == ExitCode.OK, err
    assert err.count("\n") == 1 and "--disable names ghost, but no plugin of that name was found" in err
