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

from pjrt_hub.abi import ExecuteOptions, Program, Unimplemented
from pjrt_hub.cli import ExitCode

from ...loop_programs import NEVER_ENDING
from .conftest import ADD_PROGRAM

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


def test_the_bridge_says_it_cannot_cancel_and_runs_with_a_timeout_it_cannot_enforce(client):
    executable = client.compile(Program(ADD_PROGRAM))
    with pytest.raises(Unimplemented, match="no way to stop an execution"):
        executable.cancel()
    args = []
    for value in (1.0, 2.0):
        transfer = client.buffer_from_host_buffer(np.full(4, value, np.float32))
        transfer.done_with_host_buffer.await_(GUARD)
        args.append(transfer.buffer)
    result = executable.execute([args], ExecuteOptions(timeout=30.0))
    host = result.outputs[0][0].to_host_buffer()
    host.event.await_(GUARD)
    np.testing.assert_array_equal(host.array, np.full(4, 3.0, np.float32))
