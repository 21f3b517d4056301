"""The reference interpreter against plain numpy, eager, on the perf programs.

The reference interpreter is pjrt-hub's oracle and the baseline ``bench`` compares numba_cpu
with; it should cost little more than writing the program in numpy by hand (the goal: at most
1.5x). Each program here is also written as the numpy a user would write (float32 throughout);
both are timed in this process, alternately, so that a busy machine slows both alike. Outputs
are compared, so that a fast wrong answer shows.

    python benchmarks/reference_vs_numpy.py [--rounds 7] [PROGRAM ...]
"""

from __future__ import annotations

import argparse
import functools
import os
import statistics
import sys
import time
from typing import Callable

import numpy as np

from pjrt_hub._bench import _program_named
from pjrt_hub.backends.reference import Interpreter
from pjrt_hub.backends.stablehlo import parse_module

F = np.float32


def ew_chain(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    one = F(1)
    a = np.exp(-np.abs(y)) * x
    b = np.tanh(y) + np.log(x)
    c = np.sqrt(x) - one / np.sqrt(x)
    d = (one / (one + np.exp(-y))) / (one + x)
    e = np.maximum(a, b) - np.minimum(c, d)
    p = np.power(x, F(1.7)) + y * y * y
    s = np.where(y > F(0.25), p, -e)
    return np.clip(s, F(-2), F(2))


def softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def layernorm(x: np.ndarray, g: np.ndarray, b: np.ndarray) -> np.ndarray:
    mu = x.mean(axis=-1, keepdims=True)
    var = ((x - mu) ** 2).mean(axis=-1, keepdims=True)
    return (x - mu) / np.sqrt(var + F(1e-5)) * g + b


NUMPY: dict[str, Callable[..., np.ndarray]] = {
    "perf_ew_chain": ew_chain,
    "perf_softmax": softmax,
    "perf_layernorm": layernorm,
}


def _timed(fn: Callable[[], object]) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("programs", nargs="*", metavar="PROGRAM", help=f"of {', '.join(NUMPY)} (default: all)")
    parser.add_argument("--rounds", type=int, default=7, help="alternate runs of each (default 7)")
    args = parser.parse_args(argv)
    unknown = [p for p in args.programs if p not in NUMPY]
    if unknown:
        parser.error(f"unknown program(s) {', '.join(unknown)}; known: {', '.join(NUMPY)}")
    args.programs = args.programs or list(NUMPY)
    print(f"load average {os.getloadavg()[0]:.1f}; medians of {args.rounds} alternate runs")
    worst = 0.0
    for name in args.programs:
        program = _program_named(name)
        inputs = program.inputs()
        interpreter = Interpreter(parse_module(program.text()))
        eager = NUMPY[name]
        (ref_out,) = interpreter.run(inputs)
        np_out = eager(*inputs)
        max_err = float(np.max(np.abs(ref_out.astype(np.float64) - np_out.astype(np.float64))))
        ref_t, np_t = [], []
        for _ in range(args.rounds):
            ref_t.append(_timed(functools.partial(interpreter.run, inputs)))
            np_t.append(_timed(functools.partial(eager, *inputs)))
        r, n = statistics.median(ref_t) * 1e3, statistics.median(np_t) * 1e3
        worst = max(worst, r / n)
        print(f"{name:16s} reference {r:8.1f} ms   numpy {n:8.1f} ms   ratio {r / n:5.2f}x   "
              f"max |reference - numpy| {max_err:.2g}")
    print(f"worst ratio {worst:.2f}x (goal: <= 1.5x)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
