"""``list`` and ``check`` read declarations and probes without importing the heavy parts: numba,
numpy, scipy, the StableHLO parser, the runtime, the C bridge's API, packaging's parser.

Measured in a fresh interpreter, where ``sys.modules`` shows what the commands really imported.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

HEAVY = ("numba", "numpy", "scipy", "llvmlite", "pjrt_hub.backends.stablehlo", "pjrt_hub.backends.cpu_runtime._client",
         "pjrt_hub.backends.reference.interpreter", "pjrt_hub.backends.numba_cpu.compiler",
         "pjrt_hub.backends.c_api.api", "packaging.requirements")

SCRIPT = """
import contextlib, io, json, sys
import pjrt_hub.cli as cli
with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
    codes = [cli.main(argv) for argv in (["list"], ["check"], ["list", "--json"])]
print(json.dumps({"codes": codes, "heavy": [m for m in %r if m in sys.modules]}))
"""


def imported_by_list_and_check(env: dict[str, str]) -> dict:
    done = subprocess.run([sys.executable, "-c", SCRIPT % (HEAVY,)], env=env, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_list_and_check_import_nothing_heavy():
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PJRT_HUB_PLUGIN", "PJRT_NAMES"))}
    result = imported_by_list_and_check(env)
    assert result == {"codes": [0, 0, 0], "heavy": []}
