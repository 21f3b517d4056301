"""The list and check commands: output, JSON and exit codes."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from pjrt_hub.cli import ExitCode, main

from ..conftest import plugin_source


def install(fake_dist, dist, name, version):
    module = f"{dist.replace('-', '_')}_cli"
    fake_dist(dist, "1.0", entry_points={"pjrt_hub.plugins": {name: module}},
              files={f"{module}.py": plugin_source(version)})


@pytest.fixture
def plugins(fake_dist):
    install(fake_dist, "fresh-pjrt", "fresh", "0.116")  # a minor behind, inside the window
    install(fake_dist, "stale-pjrt", "stale", "0.45")
    fake_dist("broken-pjrt", "1.0", entry_points={"pjrt_hub.plugins": {"broken": "broken_cli"}},
              files={"broken_cli.py": "raise ImportError('libfoo.so.1: cannot open shared object file')"})


def run(capsys, *argv):
    code = main(list(argv))
    out = capsys.readouterr().out
    return code, out


def test_list_shows_every_plugin_with_outcome_and_reason(plugins, capsys):
    code, out = run(capsys, "list", "--only", "fresh", "--only", "stale", "--only", "broken",
                    "--framework-version", "0.50")
    assert code == ExitCode.OK
    assert "Framework PJRT API 0.50" in out
    lines = {line.split()[0]: line for line in out.splitlines() if line.split() and line.split()[0] in
             ("fresh", "stale", "broken")}
    assert "incompatible" in lines["stale"]
    assert "failed" in lines["broken"]
    assert "libfoo.so.1" in out
    assert "stale-pjrt 1.0" in lines["stale"]


def test_list_json_follows_the_published_schema(plugins, capsys):
    code, out = run(capsys, "list", "--json", "--only", "fresh", "--only", "broken")
    data = json.loads(out)
    assert code == 0 and data["schema_version"] == 1
    by_name = {p["name"]: p for p in data["plugins"]}
    assert by_name["fresh"]["outcome"] == "loaded"
    assert by_name["fresh"]["api_version"] == "0.116"
    assert by_name["broken"]["outcome"] == "failed"
    assert "ImportError" in by_name["broken"]["error"]
    code, out = run(capsys, "list", "--schema")
    schema = json.loads(out)
    assert set(schema["properties"]) >= {"schema_version", "framework_version", "plugins"}
    assert "Outcome" in schema["$defs"]


def test_check_exit_status_follows_the_plugins_asked_for(plugins, capsys):
    assert run(capsys, "check", "--plugin", "fresh")[0] == ExitCode.OK
    code, out = run(capsys, "check", "--plugin", "fresh", "--plugin", "stale", "--framework-version", "0.50")
    assert code == ExitCode.FAILURE
    assert "NOT OK" in out and "stale: incompatible" in out
    assert run(capsys, "check", "--plugin", "ghost")[0] == ExitCode.NOT_FOUND
    # default: all plugins found; the broken one makes it fail
    assert run(capsys, "check", "--only", "fresh", "--only", "broken")[0] == ExitCode.FAILURE
    assert run(capsys, "check", "--only", "fresh")[0] == ExitCode.OK


def test_check_json_gives_the_verdicts(plugins, capsys):
    code, out = run(capsys, "check", "--json", "--plugin", "stale", "--framework-version", "0.50",
                    "--window-weeks", "9")
    data = json.loads(out)
    assert code == ExitCode.OK and data["ok"] is True
    stale = next(p for p in data["plugins"] if p["name"] == "stale")
    assert stale["verdict"]["rule"] == "window" and stale["verdict"]["accepted"] is True
    assert data["window_weeks"] == 9 and data["strict"] is False


def test_strict_from_flag_and_environment(plugins, capsys, monkeypatch):
    assert run(capsys, "check", "--plugin", "fresh", "--strict", "--framework-version", "0.116")[0] == 0
    code, out = run(capsys, "check", "--plugin", "fresh", "--strict")  # framework defaults to newest
    assert code == ExitCode.FAILURE and "Strict mode (--strict)" in out
    monkeypatch.setenv("PJRT_HUB_STRICT", "1")
    code, out = run(capsys, "check", "--plugin", "fresh")
    assert code == ExitCode.FAILURE and "PJRT_HUB_STRICT=1" in out


def test_required_extension_from_the_command_line(plugins, capsys):
    code, out = run(capsys, "check", "--plugin", "fresh", "--require-ext", "Layouts>=2")
    assert code == ExitCode.FAILURE and "required extension missing" in out


@pytest.mark.parametrize("argv", [
    ["check", "--framework-version", "zero"],
    ["check", "--window-weeks", "-2"],
    ["check", "--require-ext", "Warp"],
    ["frobnicate"],
])
def test_usage_errors_exit_2(argv, capsys):
    with pytest.raises(SystemExit) as info:
        main(argv)
    assert info.value.code == ExitCode.USAGE
    assert "error" in capsys.readouterr().err


def test_the_console_script_runs(plugins, site):
    env = dict(os.environ, PYTHONPATH=str(site), PJRT_HUB_PLUGINS="fresh")
    script = os.path.join(os.path.dirname(sys.executable), "pjrt-hub")
    result = subprocess.run([script, "check", "--json"], capture_output=True, text=True, env=env, timeout=60)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["ok"] is True
