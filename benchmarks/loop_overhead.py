#!/usr/bin/env python3
"""Execute time of the loop-heavy corpus programs: what the cancel checks of ``while`` cost.

A ``while`` loop may never end, so numba_cpu reads a cancel flag once per iteration and the
reference interpreter checks one in its loop (see ``ExecuteOptions.timeout``), and programs with
a ``while`` run on the device's worker rather than inline, so that ``execute`` returns at once.
This times execute + await of ``fori_loop`` (25 iterations of a 32x32 matvec) and ``scan_rnn``
(16 steps of a small RNN), with and without an execution timeout, so the price of both can be
compared against a checkout without them.

Usage::

    python benchmarks/loop_overhead.py [--plugin numba_cpu] [--runs 2000] [--repeats 5] [--json]

Each figure is the median over ``--repeats`` rounds of the median of ``--runs`` calls, in
microseconds. The machine's load moves these numbers by more than the checks do: compare runs
made back to back.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import numpy as np

from pjrt_hub import PluginRegistry, RegistrySettings
from pjrt_hub.abi import ExecuteOptions, Program

CORPUS = Path(__file__).resolve().parents[1] / "pjrt_hub" / "data" / "corpus" / "public"
PROGRAMS = ("fori_loop", "scan_rnn")


def _inputs(name: str) -> list[np.ndarray]:
    with np.load(CORPUS / f"{name}.npz", allow_pickle=False) as data:
        keys = sorted((k for k in data.files if k.startswith("in")), key=lambda k: int(k[2:]))
        return [data[k] for k in keys]


def _time(executable, buffers, options, runs: int) -> float:
    samples = []
    for _ in range(runs):
        t0 = time.perf_counter()
        result = executable.execute([buffers], options)
        for event in result.device_complete_events:
            event.await_()
        samples.append(time.perf_counter() - t0)
        for buffer in result.outputs[0]:
            buffer.destroy()
    return statistics.median(samples) * 1e6


def measure(plugin: str, runs: int, repeats: int) -> list[dict]:
    client = PluginRegistry(RegistrySettings.from_environment()).create_client(plugin)
    rows = []
    for name in PROGRAMS:
        executable = client.compile(Program((CORPUS / f"{name}.mlir").read_text()))
        device = client.addressable_devices()[0]
        buffers = []
        for array in _inputs(name):
            transfer = client.buffer_from_host_buffer(np.require(array, requirements="C"), device=device)
            transfer.done_with_host_buffer.await_()
            buffers.append(transfer.buffer)
        row = {"program": name, "plugin": plugin}
        for label, options in (("no_timeout_us", None), ("timeout_us", _with_timeout())):
            if options is False:
                continue
            _time(executable, buffers, options, max(runs // 10, 3))  # warm up
            row[label] = statistics.median(_time(executable, buffers, options, runs) for _ in range(repeats))
        rows.append(row)
    return rows


def _with_timeout():
    """ExecuteOptions with a timeout where this checkout has the field; False where it has not."""
    try:
        return ExecuteOptions(timeout=600.0)
    except TypeError:
        return False


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--plugin", action="append", default=[])
    parser.add_argument("--runs", type=int, default=2000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    rows = [row for plugin in (args.plugin or ["numba_cpu"]) for row in measure(plugin, args.runs, args.repeats)]
    if args.json:
        print(json.dumps(rows, indent=2))
    else:
        for row in rows:
            extra = f", with a timeout {row['timeout_us']:.1f} us" if "timeout_us" in row else ""
            print(f"{row['program']} on {row['plugin']}: {row['no_timeout_us']:.1f} us{extra}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
