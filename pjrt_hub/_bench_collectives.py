"""``pjrt-hub bench --collectives``: how long each collective takes, per size, in one process and
across processes.

Each op runs as a two-process program (two replicas) on f32 operands of 4 KiB, 4 MiB and 64 MiB:
first both replicas on the devices of one process (they meet in memory), then, with
``--processes 2``, one replica in each of two processes of a job started with ``pjrt-hub launch``
(they meet over MPI). The time is the whole execution (launch to both events ready), median and
minimum of several runs after a warm-up; bandwidth is the operand bytes over the median.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from typing import Any, Callable

import numpy as np

from pjrt_hub.abi import Program

__all__ = ["OPS", "SIZES", "bench_collectives", "format_table"]

#: Operand sizes in bytes.
SIZES = (4 << 10, 4 << 20, 64 << 20)
OPS = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "collective_permute", "collective_broadcast")


def _runs(size: int) -> int:
    return 200 if size <= 64 << 10 else 30 if size <= 8 << 20 else 6


def program(op: str, n: int) -> str:
    t = f"tensor<{n}xf32>"
    region = ("({\n    ^bb0(%a: tensor<f32>, %b: tensor<f32>):\n      %r = stablehlo.add %a, %b : tensor<f32>\n"
              "      stablehlo.return %r : tensor<f32>\n    })")
    groups = "replica_groups = dense<[[0, 1]]> : tensor<1x2xi64>"
    result = {"all_gather": f"tensor<{2 * n}xf32>", "reduce_scatter": f"tensor<{n // 2}xf32>"}.get(op, t)
    attrs = {
        "all_reduce": f"<{{{groups}}}> {region}",
        "all_gather": f"<{{all_gather_dim = 0 : i64, {groups}}}>",
        "reduce_scatter": f"<{{{groups}, scatter_dimension = 0 : i64}}> {region}",
        "all_to_all": f"<{{concat_dimension = 0 : i64, {groups}, split_count = 2 : i64, split_dimension = 0 : i64}}>",
        "collective_permute": "<{source_target_pairs = dense<[[0, 1], [1, 0]]> : tensor<2x2xi64>}>",
        "collective_broadcast": f"<{{{groups}}}>",
    }[op]
    return (f"module @bench_{op} attributes {{mhlo.num_partitions = 1 : i32, mhlo.num_replicas = 2 : i32}} {{\n"
            f"  func.func public @main(%arg0: {t}) -> {result} {{\n"
            f'    %0 = "stablehlo.{op}"(%arg0) {attrs} : ({t}) -> {result}\n'
            f"    return %0 : {result}\n  }}\n}}\n")


def _time(client: Any, op: str, size: int, runs: int) -> dict[str, float]:
    n = size // 4
    executable = client.compile(Program(program(op, n)))
    devices = executable.addressable_devices()
    args = []
    for k, device in enumerate(devices):
        transfer = client.buffer_from_host_buffer(np.full(n, k + 1, np.float32), device=device)
        transfer.done_with_host_buffer.await_()
        args.append([transfer.buffer])
    times = []
    for i in range(runs + 2):
        start = time.perf_counter()
        result = executable.execute(args)
        for event in result.device_complete_events:
            event.await_()
        if i >= 2:
            times.append(time.perf_counter() - start)
        for row in result.outputs:
            for buffer in row:
                buffer.destroy()
    times.sort()
    median = times[len(times) // 2]
    return {"median_ms": median * 1e3, "min_ms": times[0] * 1e3, "gb_per_s": size / median / 1e9, "runs": runs}


def bench_collectives(client: Any, ops=OPS, sizes=SIZES, progress: Callable[[str], None] | None = None) -> list[dict]:
    rows = []
    for op in ops:
        for size in sizes:
            stats = _time(client, op, size, _runs(size))
            row = {"op": op, "bytes": size, **stats}
            rows.append(row)
            if progress:
                progress(f"{op} {size >> 10} KiB: {stats['median_ms']:.3f} ms")
    return rows


def format_table(rows: list[dict], title: str) -> str:
    lines = [title, f"{'op':22} {'size':>8} {'median ms':>10} {'min ms':>9} {'GB/s':>7}"]
    for r in rows:
        size = f"{r['bytes'] >> 20} MiB" if r["bytes"] >= 1 << 20 else f"{r['bytes'] >> 10} KiB"
        lines.append(f"{r['op']:22} {size:>8} {r['median_ms']:10.3f} {r['min_ms']:9.3f} {r['gb_per_s']:7.2f}")
    return "\n".join(lines)


def across_processes(plugin: str, ops=OPS, sizes=SIZES, timeout: float = 1800) -> list[dict]:
    """Run the bench as a 2-process job (one device each) and return rank 0's rows."""
    out = os.path.join(os.environ.get("TMPDIR", "/tmp"), f"pjrt-hub-bench-{os.getpid()}.json")
    cmd = [sys.executable, "-m", "pjrt_hub.cli", "launch", "-n", "2", "--", sys.executable, "-m",
           "pjrt_hub._bench_collectives", plugin, out, ",".join(ops), ",".join(map(str, sizes))]
    try:
        subprocess.run(cmd, check=True, timeout=timeout, stdout=subprocess.DEVNULL)
        with open(out) as f:
            return json.load(f)
    finally:
        if os.path.exists(out):
            os.unlink(out)


def _worker(argv: list[str]) -> int:
    import pjrt_hub.distributed as dist

    plugin, out, ops, sizes = argv
    job = dist.initialize()
    client = job.create_client(plugin)
    rows = bench_collectives(client, ops.split(","), [int(s) for s in sizes.split(",")])
    if job.rank == 0:
        with open(out, "w") as f:
            json.dump(rows, f)
    job.close()
    return 0


if __name__ == "__main__":
    sys.exit(_worker(sys.argv[1:]))
