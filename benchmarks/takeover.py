#!/usr/bin/env python3
"""How long a user's loop waits for numba_cpu's compiled tier, against a plain compile.

numba_cpu answers a program's first runs on its eager tier and compiles it meanwhile (see
``backends/numba_cpu/tiers.py``). A user who runs the program in a loop is waiting for that
compile: issue 42 asks that the compiled code take over no later than a plain compile
(``PJRT_HUB_NUMBA_TIERS=0``) would give it, at most 1.2x, quiet or on a busy machine.

For each program, in turns over ``--rounds`` rounds, two fresh processes with an empty compile
cache each time the program through the public API (registry, client, ``execute``):

* ``plain``: ``PJRT_HUB_NUMBA_TIERS=0``, seconds from ``compile()`` to its first result;
* ``tiered``: the default, seconds from ``compile()`` until a run of a back-to-back loop of
  executes is answered by the compiled code (told by the tier the program reports).

It prints the median of each and their ratio per program, and with ``--under-load K`` does the
same while K CPU-bound neighbour processes spin (``pjrt-hub bench --under-load``'s). numba's
own cache of pjrt-hub's helper module is kept: only the program's compile is measured.

Usage::

    python benchmarks/takeover.py [--program cumsum softmax ...] [--rounds 3] [--under-load K] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

from pjrt_hub._bench_stability import Neighbours

DEFAULT_PROGRAMS = ("cumsum", "softmax", "fori_loop", "scatter_ops", "scan_rnn", "mlp_train_step")

#: Run in a fresh process: prints the seconds from compile() to compiled code (or to the first
#: result with PJRT_HUB_NUMBA_TIERS=0).
_CHILD = r"""
import sys, time
from importlib.resources import files
import numpy as np
from pjrt_hub._registry import PluginRegistry, RegistrySettings
from pjrt_hub.abi import Program

name, limit = sys.argv[1], float(sys.argv[2])
corpus = files("pjrt_hub") / "data/corpus/public"
text = corpus.joinpath(f"{name}.mlir").read_text()
with corpus.joinpath(f"{name}.npz").open("rb") as f, np.load(f) as z:
    inputs = [z[k] for k in sorted(k for k in z.files if k.startswith("in"))]
client = PluginRegistry(RegistrySettings.from_environment()).create_client("numba_cpu")
device = client.addressable_devices()[0]
args = []
for a in inputs:
    t = client.buffer_from_host_buffer(np.ascontiguousarray(a), device=device)
    t.done_with_host_buffer.await_()
    args.append(t.buffer)
start = time.perf_counter()
exe = client.compile(Program(text))
program = exe._program
while True:
    results = exe.execute([args])
    for event in results.device_complete_events:
        event.await_()
    if getattr(program, "tier", "compiled") == "compiled":
        break
    if time.perf_counter() - start > limit:
        print("timeout")
        sys.exit(0)
print(time.perf_counter() - start)
"""


def _time(program: str, tiered: bool, limit: float) -> float | None:
    with tempfile.TemporaryDirectory(prefix="pjrt-hub-takeover-") as cache:
        env = dict(os.environ, PJRT_HUB_CACHE=cache)
        env.pop("PJRT_HUB_NUMBA_TIERS", None)
        if not tiered:
            env["PJRT_HUB_NUMBA_TIERS"] = "0"
        machine = os.path.join(os.path.expanduser("~"), ".cache", "pjrt-hub", "machine")
        env.setdefault("PJRT_HUB_MACHINE_CACHE", machine)
        run = subprocess.run([sys.executable, "-c", _CHILD, program, str(limit)], env=env, capture_output=True,
                             text=True, timeout=limit + 120)
    if run.returncode != 0:
        raise RuntimeError(f"{program}: the timing process failed:\n{run.stderr[-2000:]}")
    out = run.stdout.strip().splitlines()[-1]
    return None if out == "timeout" else float(out)


def measure(programs: list[str], rounds: int, limit: float) -> list[dict]:
    rows = []
    for program in programs:
        plain: list[float] = []
        tiered: list[float] = []
        for _ in range(rounds):
            for is_tiered, into in ((False, plain), (True, tiered)):
                seconds = _time(program, is_tiered, limit)
                into.append(float("inf") if seconds is None else seconds)
        p, t = statistics.median(plain), statistics.median(tiered)
        rows.append({"program": program, "plain_s": plain, "tiered_s": tiered, "plain_median_s": p,
                     "tiered_median_s": t, "ratio": t / p})
        print(f"  {program:<14} plain {p:6.2f} s   tiered {t:6.2f} s   {t / p:5.2f}x", file=sys.stderr)
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--program", nargs="+", default=list(DEFAULT_PROGRAMS),
                        help="public corpus programs (default: %(default)s)")
    parser.add_argument("--rounds", type=int, default=3, help="fresh process pairs per program (default 3)")
    parser.add_argument("--under-load", type=int, default=0, metavar="K",
                        help="also with K CPU-bound neighbour processes spinning")
    parser.add_argument("--limit", type=float, default=300.0, help="seconds before a loop counts as never taken over")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    from importlib.resources import files

    corpus = files("pjrt_hub") / "data/corpus/public"
    unknown = [p for p in args.program if not corpus.joinpath(f"{p}.mlir").is_file()]
    if unknown:
        known = sorted(p.name[:-5] for p in corpus.iterdir() if p.name.endswith(".mlir") and ".generic" not in p.name)
        parser.error(f"no public corpus program named {', '.join(unknown)} (there are: {', '.join(known)})")
    report: dict = {"quiet": None, "under_load": None}
    print("quiet:", file=sys.stderr)
    report["quiet"] = measure(args.program, args.rounds, args.limit)
    if args.under_load:
        print(f"with {args.under_load} busy neighbours:", file=sys.stderr)
        with Neighbours(args.under_load):
            report["under_load"] = {"neighbours": args.under_load,
                                    "rows": measure(args.program, args.rounds, args.limit)}
    worst = max(r["ratio"] for section in (report["quiet"], (report["under_load"] or {}).get("rows", []))
                for r in section)
    report["worst_ratio"] = worst
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        print(f"worst tiered / plain: {worst:.2f}x (goal: at most 1.2x)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
