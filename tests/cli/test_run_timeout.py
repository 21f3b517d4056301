"""``pjrt-hub run --timeout``: a never-ending loop ends the command on time, with exit 4 and one
line naming the program, the plugin and the limit. Each run is a real ``pjrt-hub`` process, so
that a hang is a failed guard, not a hung test session."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import numpy as np
import pytest

from pjrt_hub.cli import ExitCode, main

from ..loop_programs import COUNT_TO_TEN, NEVER_ENDING

#: Seconds within which the command must have returned: "not hung" (a cold numba compile, which
#: the limit does not count, takes seconds on a busy machine), not a speed test.
GUARD = 120.0


@pytest.fixture
def files(tmp_path):
    forever = tmp_path / "forever.mlir"
    forever.write_text(NEVER_ENDING)
    count = tmp_path / "count.mlir"
    count.write_text(COUNT_TO_TEN)
    inputs = tmp_path / "in.npz"
    np.savez(inputs, in0=np.array(0, np.int32))
    return forever, count, inputs


def pjrt_hub_run(tmp_path, *argv) -> tuple[int, str, str, float]:
    env = {k: v for k, v in os.environ.items()
           if k not in ("PJRT_HUB_DISABLE_PLUGINS", "PJRT_HUB_PLUGINS", "PJRT_NAMES_AND_LIBRARY_PATHS",
                        "PJRT_DEVICE")}
    env["PJRT_HUB_CACHE"] = str(tmp_path / "cache")
    start = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "pjrt_hub.cli", "run", *map(str, argv)],
                          capture_output=True, text=True, env=env, timeout=GUARD)
    return done.returncode, done.stdout, done.stderr, time.monotonic() - start


@pytest.mark.parametrize("plugin", ["reference", "numba_cpu"])
def test_a_never_ending_loop_is_stopped_by_the_timeout(tmp_path, files, plugin, monkeypatch, capsys):
    if plugin == "numba_cpu":
        pytest.importorskip("numba")
    forever, count, inputs = files
    code, out, err, _ = pjrt_hub_run(tmp_path, forever, "--inputs", inputs, "--plugin", plugin, "--timeout", "2")
    assert code == ExitCode.PLUGIN_ERROR, err
    assert out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0] == (f"pjrt-hub run: {forever} on {plugin}: DEADLINE_EXCEEDED: not finished within the 2 s "
                        f"limit (--timeout) while executing; the plugin stopped it")
    # A loop that ends is not cut short by a limit it keeps (in this process: nothing hangs here).
    monkeypatch.setenv("PJRT_HUB_CACHE", str(tmp_path / "cache"))
    code = main(["run", str(count), "--inputs", str(inputs), "--plugin", plugin, "--timeout", "60",
                 "--out", str(tmp_path / "out.npz")])
    assert code == ExitCode.OK, capsys.readouterr().err
    with np.load(tmp_path / "out.npz") as data:
        assert int(data["out0"]) == 10


@pytest.mark.parametrize("value", ["0", "-1", "nan", "soon"])
def test_a_timeout_that_is_not_positive_seconds_is_a_usage_error(files, value, capsys):
    forever, _, inputs = files
    with pytest.raises(SystemExit) as exit_info:
        main(["run", str(forever), "--inputs", str(inputs), "--plugin", "reference", "--timeout", value])
    assert exit_info.value.code == ExitCode.USAGE
    assert "--timeout" in capsys.readouterr().err


def test_no_limit_with_inf(tmp_path, files, capsys):
    _, count, inputs = files
    code = main(["run", str(count), "--inputs", str(inputs), "--plugin", "reference", "--timeout", "inf",
                 "--out", str(tmp_path / "out.npz")])
    assert code == ExitCode.OK, capsys.readouterr().err
