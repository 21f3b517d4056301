#!/usr/bin/env python3
"""Does this machine run code slower while a core is time-sliced with another process?

``pjrt-hub bench --under-load`` reports, per program, the CPU time of a run loaded against quiet:
above 1 means either that the program's threads wasted what they got (spinning,
oversubscription) or that the machine ran the same instructions slower. This tells the two
apart without pjrt-hub: it pins itself to one core and times, per chunk of rows, the CPU time
of two plain numba kernels, alone and while a CPU-bound Python process shares that core (and,
for comparison, while that process runs on another core):

* ``stream``: a layernorm over the rows of a ``--mib`` MiB array, half of it input and half
  output (memory-bound once the working set outgrows the caches);
* ``compute``: a chain of square roots on registers (no memory traffic).

On the 2-core VM pjrt-hub is measured on, in one half hour ``stream`` over 64 MiB took 1.3-2x
its CPU time per chunk with the core shared (0.23-0.39 ms alone), over 16 MiB 0.95-1.05x, and
``compute`` 0.95-1.05x; in the next, the machine ran ``stream`` at half that speed even alone
(0.38-0.59 ms) and sharing the core cost 0.97-1.2x. Run it a few times, minutes apart.

Usage::

    python benchmarks/time_slicing.py [--mib 64] [--seconds 2] [--json]

Linux only (it pins with ``sched_setaffinity``); needs two cores for the other-core column.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import statistics
import subprocess
import sys
import time

import numba
import numpy as np

_SPINNER = ("import os, sys\n"
            "os.sched_setaffinity(0, {int(sys.argv[1])})\n"
            "parent = int(sys.argv[2])\n"
            "while os.getppid() == parent:\n"
            "    for _ in range(200000):\n"
            "        pass\n")
_CHUNK_ROWS = 512


@numba.njit(cache=True, fastmath=True, nogil=True)
def _stream(x, out, lo, hi):  # pragma: no cover - compiled
    n = x.shape[1]
    for i in range(lo, hi):
        s = np.float32(0)
        for j in range(n):
            s += x[i, j]
        mean = s / n
        v = np.float32(0)
        for j in range(n):
            d = x[i, j] - mean
            v += d * d
        r = np.float32(1) / np.sqrt(v / n + np.float32(1e-5))
        for j in range(n):
            out[i, j] = (x[i, j] - mean) * r


@numba.njit(cache=True, nogil=True)
def _compute(x, out, lo, hi):  # pragma: no cover - compiled
    a = np.float32(1)
    for _ in range(lo, hi):
        for j in range(64):
            a = np.sqrt(a + np.float32(j))
    out[0, 0] = a


def _chunk_cpu_ms(kernel, x: np.ndarray, out: np.ndarray, seconds: float) -> float:
    """Median CPU time of one chunk of rows, over ``seconds`` of chunks."""
    rows = x.shape[0]
    times = []
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        for lo in range(0, rows, _CHUNK_ROWS):
            start = time.thread_time()
            kernel(x, out, lo, min(rows, lo + _CHUNK_ROWS))
            times.append(time.thread_time() - start)
    return statistics.median(times) * 1e3


def _with_spinner(cpu: int | None, measure):
    proc = None
    if cpu is not None:
        proc = subprocess.Popen([sys.executable, "-c", _SPINNER, str(cpu), str(os.getpid())])
        time.sleep(0.3)
    try:
        return measure()
    finally:
        if proc is not None:
            proc.kill()
            proc.wait()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mib", type=int, default=64, help="working set of the stream kernel (default 64)")
    parser.add_argument("--seconds", type=float, default=2.0, help="timing per case (default 2)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    if not hasattr(os, "sched_setaffinity"):
        print("time_slicing.py needs Linux (sched_setaffinity)", file=sys.stderr)
        return 2
    cpus = sorted(os.sched_getaffinity(0))
    here, other = cpus[0], (cpus[1] if len(cpus) > 1 else None)
    os.sched_setaffinity(0, {here})
    rows = max(_CHUNK_ROWS, args.mib * (1 << 20) // 2 // (1024 * 4))
    x = np.random.default_rng(0).random((rows, 1024), dtype=np.float32)
    out = np.empty_like(x)
    report = {"mib": args.mib, "rows": rows, "kernels": {}}
    for name, kernel in (("stream", _stream), ("compute", _compute)):
        kernel(x, out, 0, 1)  # compile
        measure = functools.partial(_chunk_cpu_ms, kernel, x, out, args.seconds)
        alone = _with_spinner(None, measure)
        shared = _with_spinner(here, measure)
        row = {"alone_ms": alone, "core_shared_ms": shared, "core_shared_ratio": shared / alone}
        if other is not None:
            elsewhere = _with_spinner(other, measure)
            row.update(other_core_ms=elsewhere, other_core_ratio=elsewhere / alone)
        report["kernels"][name] = row
    if args.json:
        print(json.dumps(report, indent=2))
        return 0
    print(f"CPU time per chunk of {_CHUNK_ROWS} rows, {args.mib} MiB working set, pinned to CPU {here}")
    for name, row in report["kernels"].items():
        line = (f"{name:8s} alone {row['alone_ms']:.3f} ms  core shared {row['core_shared_ms']:.3f} ms "
                f"({row['core_shared_ratio']:.2f}x)")
        if "other_core_ms" in row:
            line += f"  spinner on another core {row['other_core_ms']:.3f} ms ({row['other_core_ratio']:.2f}x)"
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
