"""A C plugin cannot be stopped: ``run --timeout`` still returns on time, in a real process.

XLA:CPU (xla-cpu-pjrt 0.0.1) runs a small program inside ``PJRT_LoadedExecutable_Execute``, so a
never-ending loop never returns from that call; a loop with more work in it runs on XLA's threads
and its completion event stays pending. Either way the command gives up after the limit (plus a
grace), says the work was left running, and the process ends at once with exit 4. Everything
that leaves a loop running happens in a child process.
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

from ...loop_programs import NEVER_ENDING, NEVER_ENDING_MATMUL
from .conftest import ADD_PROGRAM

pytestmark = pytest.mark.real_plugin

#: Seconds within which the command must have returned: "not hung", not a speed test.
GUARD = 60.0


@pytest.mark.parametrize("text, argument", [
    (NEVER_ENDING, np.array(0, np.int32)),                  # execute never returns
    (NEVER_ENDING_MATMUL, np.zeros((256, 256), np.float32)),  # execute returns, the event stays pending
], ids=["in-execute", "pending-event"])
def test_run_timeout_on_a_c_plugin_returns_and_the_process_ends(tmp_path, xla_cpu_path, text, argument):
    program = tmp_path / "forever.mlir"
    program.write_text(text)
    inputs = tmp_path / "in.npz"
    np.savez(inputs, in0=argument)
    env = {k: v for k, v in os.environ.items() if k not in ("PJRT_HUB_PLUGINS", "PJRT_HUB_DISABLE_PLUGINS")}
    start = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "pjrt_hub.cli", "run", str(program), "--inputs", str(inputs),
                           "--plugin", xla_cpu_path, "--timeout", "2",
                           # about its behaviour, not its version: act as the framework it was built for
                           "--framework-version", "0.81"],
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


#: In a child: await a pending event of a never-ending execution with a timeout, then leave.
_AWAIT_PENDING = """
import os, sys, time
import numpy as np
from pjrt_hub.abi import DeadlineExceeded, Program
from pjrt_hub.backends.c_api import load_api
client = load_api(sys.argv[1]).client_create()
executable = client.compile(Program(sys.argv[2]))
transfer = client.buffer_from_host_buffer(np.zeros((256, 256), np.float32))
transfer.done_with_host_buffer.await_()
event = executable.execute([[transfer.buffer]]).device_complete_events[0]
start = time.monotonic()
try:
    event.await_(0.2)
except DeadlineExceeded as exc:
    print(f"{time.monotonic() - start:.3f} {event.is_ready()} {exc}", flush=True)
os._exit(0)  # the loop cannot be stopped: leave without tearing the client down under it
"""


def test_await_with_a_timeout_on_a_pending_c_event_raises_deadline_exceeded(xla_cpu_path):
    done = subprocess.run([sys.executable, "-c", _AWAIT_PENDING, xla_cpu_path, NEVER_ENDING_MATMUL],
                          capture_output=True, text=True, timeout=GUARD)
    assert done.returncode == 0, done.stderr
    waited, ready, message = done.stdout.strip().split(" ", 2)
    assert float(waited) < GUARD and ready == "False"
    assert message == "DEADLINE_EXCEEDED: PJRT_Event_Await: the event was not ready after 0.2 s [plugin xla_cpu_pjrt]"
