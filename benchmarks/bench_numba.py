#!/usr/bin/env python3
"""numba_cpu against the reference interpreter (and any CPU C plugin found) on the perf corpus.

The same as ``pjrt-hub bench``, from a checkout; arguments are passed through:

    python benchmarks/bench_numba.py                          # all perf programs, tiny add
    python benchmarks/bench_numba.py --program perf_softmax --json
    python benchmarks/bench_numba.py --library path/to/xla_cpu_pjrt.so   # with XLA:CPU in the run
"""

import sys

from pjrt_hub.cli import main

if __name__ == "__main__":
    sys.exit(main(["bench", *sys.argv[1:]]))
