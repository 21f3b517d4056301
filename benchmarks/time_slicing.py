#!/usr/bin/env python3
"""Does this machine run code slower while a core is time-sliced with another process?

``pjrt-hub bench --under-load`` reports, per program, the CPU time of a run loaded against quiet:
above 1 means either that the program's threads wasted what they got (spinning,
oversubscription) or that the machine ran the same instructions slower. This tells the two
apart without pjrt-hub: it pins itself to one core and times, per chunk of rows, the CPU time
of two plain numba kernels in four cases: alone; while a CPU-bound Python process shares that
core; alone again but idle for ``--gap-ms`` after each chunk (no other process at all); and,
for comparison, while the other process runs on another core. The cases are taken in turns,
``--rounds`` times over, so that a machine whose speed drifts drifts under all four.

* ``stream``: a layernorm over the rows of a ``--mib`` MiB array, half of it input and half
  output (memory-bound once the working set outgrows the caches);
* ``compute``: a chain of square roots on registers (no memory traffic).

On the 2-core VM pjrt-hub is measured on (a KVM guest on a Xeon whose 300 MiB L3 is the
host's), in six runs in one half hour: ``stream`` over 64 MiB alone took 0.34 ms a chunk in
one and 0.44-0.59 ms in the others; with the core shared, or with idle gaps of 0.5 ms, it took
0.51-0.60 ms in all six (1.51x and 1.54x in the run where it was fast alone, 1.02-1.22x in the
others), and with the other process on another core 1.0-1.16x. Over 16 MiB it took 0.27-0.34 ms
alone and 1.03-1.16x that shared or with gaps. ``compute``: 0.97-1.04x everywhere. So a working
set that the machine keeps cached while a kernel sweeps it back to back is served at its
uncached speed as soon as the sweeps are spaced out, whether by another process or by plain
idleness: a property of the machine's caches, not of any thread pool or program, and whether
the fast case happens at all changes from minute to minute. A memory-bound program's quiet
time is then its cached speed and its loaded time its uncached one. Run it a few times,
minutes apart.

Usage::

    python benchmarks/time_slicing.py [--mib 64] [--seconds 2] [--json]

Linux only (it pins with ``sched_setaffinity``); needs two cores for the other-core column.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import time

import numba
import numpy as np

_SPINNER = ("import os, sys\n"
            "parent = int(sys.argv[1])\n"
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


def _chunk_times(kernel, x: np.ndarray, out: np.ndarray, seconds: float, gap_s: float = 0.0) -> list[float]:
    """CPU seconds of each chunk of rows over ``seconds`` of chunks, sleeping ``gap_s`` after
    each chunk."""
    rows = x.shape[0]
    times = []
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        for lo in range(0, rows, _CHUNK_ROWS):
            start = time.thread_time()
            kernel(x, out, lo, min(rows, lo + _CHUNK_ROWS))
            times.append(time.thread_time() - start)
            if gap_s:
                time.sleep(gap_s)
    return times


class _Spinner:
    """One CPU-bound process, stopped (``SIGSTOP``) or running on a chosen core."""

    def __init__(self) -> None:
        self.proc = subprocess.Popen([sys.executable, "-c", _SPINNER, str(os.getpid())])
        self.park()

    def park(self) -> None:
        os.kill(self.proc.pid, signal.SIGSTOP)

    def run_on(self, cpu: int) -> None:
        os.sched_setaffinity(self.proc.pid, {cpu})
        os.kill(self.proc.pid, signal.SIGCONT)
        time.sleep(0.05)  # let it be running before the timing starts

    def close(self) -> None:
        self.proc.kill()
        self.proc.wait()


def measure(kernel, x: np.ndarray, out: np.ndarray, *, here: int, other: int | None, seconds: float,
            gap_s: float, rounds: int) -> dict[str, float]:
    """Median CPU ms per chunk in each case, the cases taken in turns, ``rounds`` times over, so
    that a machine whose speed drifts (a VM's does, over seconds) drifts under all of them."""
    cases = ["alone", "core_shared", "idle_gaps"] + (["other_core"] if other is not None else [])
    times: dict[str, list[float]] = {case: [] for case in cases}
    spinner = _Spinner()
    try:
        for _ in range(rounds):
            for case in cases:
                if case == "core_shared":
                    spinner.run_on(here)
                elif case == "other_core":
                    spinner.run_on(other)
                times[case] += _chunk_times(kernel, x, out, seconds / rounds,
                                            gap_s if case == "idle_gaps" else 0.0)
                spinner.park()
    finally:
        spinner.close()
    row = {f"{case}_ms": statistics.median(t) * 1e3 for case, t in times.items()}
    for case in cases[1:]:
        row[f"{case}_ratio"] = row[f"{case}_ms"] / row["alone_ms"]
    return row


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mib", type=int, default=64, help="working set of the stream kernel (default 64)")
    parser.add_argument("--seconds", type=float, default=2.0, help="timing per case (default 2)")
    parser.add_argument("--rounds", type=int, default=8, help="turns the cases are taken in (default 8)")
    parser.add_argument("--gap-ms", type=float, default=0.5,
                        help="idle time after each chunk in the idle-gaps case (default 0.5)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    if not hasattr(os, "sched_setaffinity"):
        print("time_slicing.py needs Linux (sched_setaffinity)", file=sys.stderr)
        return 2
    if args.mib < 1 or args.seconds <= 0 or args.rounds < 1 or args.gap_ms < 0:
        parser.error("--mib, --seconds and --rounds must be positive and --gap-ms not negative")
    cpus = sorted(os.sched_getaffinity(0))
    here, other = cpus[0], (cpus[1] if len(cpus) > 1 else None)
    os.sched_setaffinity(0, {here})
    rows = max(_CHUNK_ROWS, args.mib * (1 << 20) // 2 // (1024 * 4))
    x = np.random.default_rng(0).random((rows, 1024), dtype=np.float32)
    out = np.empty_like(x)
    report = {"mib": args.mib, "rows": rows, "gap_ms": args.gap_ms, "kernels": {}}
    for name, kernel in (("stream", _stream), ("compute", _compute)):
        kernel(x, out, 0, 1)  # compile
        report["kernels"][name] = measure(kernel, x, out, here=here, other=other, seconds=args.seconds,
                                          gap_s=args.gap_ms / 1e3, rounds=args.rounds)
    if args.json:
        print(json.dumps(report, indent=2))
        return 0
    print(f"CPU time per chunk of {_CHUNK_ROWS} rows, {args.mib} MiB working set, pinned to CPU {here}; "
          f"idle gaps of {args.gap_ms:g} ms")
    labels = {"core_shared": "core shared", "idle_gaps": "idle gaps", "other_core": "spinner on another core"}
    for name, row in report["kernels"].items():
        line = f"{name:8s} alone {row['alone_ms']:.3f} ms"
        for case, label in labels.items():
            if f"{case}_ms" in row:
                line += f"  {label} {row[f'{case}_ms']:.3f} ms ({row[f'{case}_ratio']:.2f}x)"
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
