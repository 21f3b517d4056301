"""A C plugin cannot be stopped: ``run --timeout`` still returns on time, in a real process.

XLA:CPU (xla-cpu-pjrt 0.0.1) runs a small program inside ``PJRT_LoadedExecutable_Execute``, so a
never-ending loop never returns from that call. The command gives up on it after the limit
(plus a grace), says the work was left running, and the process ends at once with exit 4.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

import numpy as np
import pytest

from pjrt_hub.cli import ExitCode

from ...loop_programs import NEVER_ENDING

pytestmark = pytest.mark.real_plugin

#: Seconds within which the command must have returned: "not hung", not a speed test.
GUARD = 60.0


def test_run_timeout_on_a_c_plugin_returns_and_the_process_ends(tmp_path, xla_cpu_path):
    program = tmp_path / "forever.mlir"
    program.write_text(NEVER_ENDING)
    inputs = tmp_path / "in.npz"
    np.savez(inputs, in0=np.array(0, np.int32))
    env = {k: v for k, v in os.environ.items() if k not in ("PJRT_HUB_PLUGINS", "PJRT_HUB_DISABLE_PLUGINS")}
    start = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "pjrt_hub.cli", "run", str(program), "--inputs", str(inputs),
                           "--plugin", xla_cpu_path, "--timeout", "2"],
                          capture_output=True, text=True, env=env, timeout=GUARD)
    assert time.monotonic() - start < GUARD
    assert done.returncode == ExitCode.PLUGIN_ERROR, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith(f"pjrt-hub run: {program} on xla_cpu_pjrt: DEADLINE_EXCEEDED: not finished "
                               f"within the 2 s limit (--timeout) while executing; ")
    assert lines[0].endswith("the plugin cannot stop it, so it is left running and the process ends now")
