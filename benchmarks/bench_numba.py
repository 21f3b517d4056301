#!/usr/bin/env python3
"""numba_cpu vs the reference interpreter on the perf corpus (see pjrt_hub.backends.numba_cpu.bench).

    python benchmarks/bench_numba.py                 # all perf programs + tiny_add
    python benchmarks/bench_numba.py perf_softmax --plugins numba_cpu --json
"""

from pjrt_hub.backends.numba_cpu.bench import main

if __name__ == "__main__":
    raise SystemExit(main())
