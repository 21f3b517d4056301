"""``pjrt-hub launch`` ends a failed job whole: a process that outlives the failure by the
store's timeout (one stuck where no Python runs, as inside MPI's start-up) is killed, and none
is left behind."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from pjrt_hub.distributed._launch import MIN_GRACE_SECONDS, mpiexec_path

from . import run_job

#: Rank 1 joins the job and dies without a word; rank 0 joins and then hears no interrupt.
STUCK = """
import os, signal, sys, time
from pjrt_hub.distributed import initialize
job = initialize()
if job.rank == 1:
    os._exit(3)
signal.signal(signal.SIGINT, signal.SIG_IGN)
signal.signal(signal.SIGQUIT, signal.SIG_IGN)
time.sleep(600)
"""


def _left_running(marker: str) -> list[str]:
    ps = subprocess.run(["ps", "-eo", "pid,args"], capture_output=True, text=True).stdout
    return [line for line in ps.splitlines() if marker in line and "ps -eo" not in line]


@pytest.mark.parametrize("mpi", [False, True], ids=["subprocesses", "mpiexec"])
def test_a_process_that_cannot_end_is_killed_with_the_failed_job(tmp_path, mpi):
    if mpi and mpiexec_path() is None:
        pytest.skip("needs the [distributed] extra (mpi4py and MPICH)")
    script = tmp_path / "stuck_rank.py"
    script.write_text(STUCK)
    cmd = [sys.executable, "-m", "pjrt_hub.cli", "launch", "-n", "2", "--kv-timeout", "1",
           *([] if mpi else ["--no-mpi"]), "--", sys.executable, str(script)]
    start = time.monotonic()
    done = run_job(cmd, 120)
    err = done.stderr
    took = time.monotonic() - start
    assert done.returncode != 0, err
    assert "were still running" in err and "rank 1" in err, err
    assert MIN_GRACE_SECONDS <= took < 60, took
    assert _left_running(str(script)) == []
