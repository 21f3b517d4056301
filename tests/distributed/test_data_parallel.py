"""examples/data_parallel.py: 2 processes x 2 devices match 1 x 4, runs agree bit for bit, and a
killed rank stops the others with an error naming it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from pjrt_hub.distributed._launch import mpiexec_path

from . import run_job

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "data_parallel.py"

pytestmark = pytest.mark.skipif(mpiexec_path() is None,
                                reason="needs the [distributed] extra (mpi4py and MPICH)")


def _job(tmp_path, name, *extra, plugin="reference", timeout=120):
    losses = tmp_path / f"{name}.json"
    cmd = [sys.executable, "-m", "pjrt_hub.cli", "launch", "-n", "2", "--devices-per-process", "2",
           "--kv-timeout", "20", "--", sys.executable, str(EXAMPLE), "--plugin", plugin, "--losses", str(losses),
           *extra]
    done = run_job(cmd, timeout, cwd=ROOT)
    return done, (json.loads(losses.read_text()) if losses.exists() else None)


def test_two_processes_match_one_and_agree_bit_for_bit(tmp_path):
    single = tmp_path / "single.json"
    subprocess.run([sys.executable, str(EXAMPLE), "--plugin", "reference", "--losses", str(single)],
                   check=True, capture_output=True, timeout=120)
    one = json.loads(single.read_text())
    first, a = _job(tmp_path, "a")
    assert first.returncode == 0, first.stderr
    second, b = _job(tmp_path, "b")
    assert second.returncode == 0, second.stderr
    assert len(a) == 50 and a == b
    assert max(abs(x - y) for x, y in zip(a, one)) <= 1e-4 * max(1.0, max(map(abs, one)))
    assert a[-1] < a[0]


def test_a_killed_rank_is_named_by_the_others(tmp_path):
    done, _ = _job(tmp_path, "dead", "--die-at-step", "3", "--die-rank", "1")
    assert done.returncode != 0
    assert "rank 0: training stopped at step 3" in done.stderr
    assert "rank 1 left the job" in done.stderr.split("rank 0: training stopped", 1)[1].splitlines()[0]
    assert "pjrt-hub launch: rank 1 left the job" in done.stderr
