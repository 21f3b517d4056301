"""Tests of jobs of several processes (``pjrt-hub launch``)."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from typing import Any, Sequence

import pytest


def run_job(cmd: Sequence[str], timeout: float, **popen: Any) -> subprocess.CompletedProcess:
    """Run a ``pjrt-hub launch`` command, its output captured as text. Past ``timeout`` the test
    fails, and nothing of the job is left running: the launcher is interrupted twice (it passes
    the first on to its job's process groups and kills them at the second), then killed."""
    job = subprocess.Popen(list(cmd), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                           start_new_session=True, **popen)
    try:
        out, err = job.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        for _ in range(2):
            os.killpg(job.pid, signal.SIGINT)
            time.sleep(1)
        try:
            out, err = job.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(job.pid, signal.SIGKILL)
            out, err = job.communicate()
        pytest.fail(f"the job ran past {timeout} s and was stopped; its stderr:\n{err[-3000:]}")
    return subprocess.CompletedProcess(list(cmd), job.returncode, out, err)
