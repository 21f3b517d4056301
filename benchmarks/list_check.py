"""Wall time of ``pjrt-hub list`` and ``pjrt-hub check``: the built-ins alone, and with N C plugins,
their probes cold (an empty probe cache) and cached. The target is 300 ms with 10 C plugins cached.

Each command runs as a user runs it, a fresh process of the ``pjrt-hub`` script, and the C
plugins come in through ``PJRT_NAMES_AND_LIBRARY_PATHS``. They are N distinct files (each its own
cache entry and probe):

* ``--source fake`` (default): a fake PJRT plugin (tests/backends/c_api/fakes.py: a real
  ``GetPjrtApi``, function table, extension chain and attributes) built with the C compiler,
  copied N times;
* ``--source real``: XLA's CPU plugin (xla-cpu-pjrt 0.0.1, a 259 MB ``.so``) from the wheel cache
  (downloaded once by :mod:`pjrt_hub.backends.c_api.wheels`, 63 MB), hard-linked N times.

It also says which heavy modules ``list`` imported (``python -X importtime``): numpy, scipy,
numba, the StableHLO parser or the runtime must not be among them.

Usage::

    python benchmarks/list_check.py [--plugins 10] [--runs 5] [--source fake|real] [--json] [--as-is]

Python's bytecode cache is on in the timed processes (``PYTHONDONTWRITEBYTECODE`` is removed from
their environment, as on a user's machine; ``--as-is`` keeps the environment as it is). Figures
are the median and the best of ``--runs`` runs, in milliseconds; CPU is user + system time of the
process and its children. On a shared or loaded machine the wall times are noisy: read CPU too.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
TARGET_MS = 300.0
#: Modules that reading two declarations and N cached probes must not import.
HEAVY = ("numpy", "scipy", "numba", "llvmlite", "pjrt_hub.backends.stablehlo", "pjrt_hub.backends.stablehlo.parser",
         "pjrt_hub.backends.cpu_runtime._client", "pjrt_hub.backends.reference.interpreter",
         "pjrt_hub.backends.numba_cpu.compiler", "pjrt_hub.backends.c_api.api", "packaging.requirements")


def command() -> list[str]:
    script = Path(sys.executable).with_name("pjrt-hub")
    return [str(script)] if script.exists() else [sys.executable, "-m", "pjrt_hub.cli"]


def fake_library(folder: Path) -> Path:
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        sys.exit("list_check: no C compiler to build the fake plugin; use --source real")
    namespace: dict[str, Any] = {}
    exec((ROOT / "tests" / "backends" / "c_api" / "fakes.py").read_text(), namespace)
    source = folder / "fake.c"
    source.write_text(namespace["FAKE"])
    out = folder / "libfake.so"
    subprocess.run([compiler, "-shared", "-fPIC", "-O1", "-DMAJOR_VALUE=0", "-o", str(out), str(source)],
                   check=True, capture_output=True)
    return out


def real_library() -> Path:
    from pjrt_hub.backends.c_api.wheels import plugin_library

    return Path(plugin_library("xla-cpu-pjrt==0.0.1"))


def libraries(source: str, count: int, folder: Path) -> list[Path]:
    original = fake_library(folder) if source == "fake" else real_library()
    made = []
    for i in range(count):
        target = folder / f"plugin{i}" / original.name
        target.parent.mkdir()
        if source == "fake":
            shutil.copy(original, target)
        else:
            try:
                os.link(original, target)  # another file name for the same 259 MB, no copy
            except OSError:
                target.symlink_to(original)
        made.append(target)
    return made


def timed(argv: list[str], env: dict[str, str], expect: int = 0) -> tuple[float, float]:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    wall = (time.perf_counter() - start) * 1e3
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != expect:
        sys.exit(f"list_check: {' '.join(argv)} exited {done.returncode}: {done.stderr.strip()[-500:]}")
    cpu = (after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime) * 1e3
    return wall, cpu


def series(argv: list[str], env: dict[str, str], runs: int, *, before_each: Any = None) -> dict[str, float]:
    walls, cpus = [], []
    for _ in range(runs):
        if before_each is not None:
            before_each()
        wall, cpu = timed(argv, env)
        walls.append(wall)
        cpus.append(cpu)
    return {"median_ms": round(statistics.median(walls), 1), "best_ms": round(min(walls), 1),
            "cpu_median_ms": round(statistics.median(cpus), 1)}


def heavy_imports(env: dict[str, str]) -> list[str]:
    done = subprocess.run([sys.executable, "-X", "importtime", "-m", "pjrt_hub.cli", "list"], env=env,
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    imported = {line.rsplit("|", 1)[-1].strip() for line in done.stderr.splitlines() if line.startswith("import time:")}
    return sorted(m for m in HEAVY if m in imported)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--plugins", type=int, default=10, help="C plugins (default 10)")
    parser.add_argument("--runs", type=int, default=5, help="runs per figure (default 5)")
    parser.add_argument("--source", choices=("fake", "real"), default="fake")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--as-is", action="store_true", help="keep PYTHONDONTWRITEBYTECODE if it is set")
    args = parser.parse_args()

    base = dict(os.environ)
    if not args.as_is:
        base.pop("PYTHONDONTWRITEBYTECODE", None)
    for name in ("PJRT_NAMES_AND_LIBRARY_PATHS", "PJRT_HUB_PLUGINS", "PJRT_HUB_DISABLE_PLUGINS",
                 "PJRT_HUB_PLUGIN_AUTOLOAD", "PJRT_DEVICE"):
        base.pop(name, None)
    argv = command()
    results: dict[str, Any] = {"plugins": args.plugins, "source": args.source, "runs": args.runs,
                               "bytecode_cache": "PYTHONDONTWRITEBYTECODE" not in base,
                               "load_average": os.getloadavg()[0], "cpus": os.cpu_count()}
    with tempfile.TemporaryDirectory(prefix="pjrt-hub-list-bench-") as tmp:
        folder = Path(tmp)
        cache = folder / "probe-cache"
        builtins_env = dict(base, PJRT_HUB_PROBE_CACHE=str(cache))
        paths = libraries(args.source, args.plugins, folder)
        c_env = dict(builtins_env, PJRT_NAMES_AND_LIBRARY_PATHS=",".join(f"c{i}:{p}" for i, p in enumerate(paths)))

        def empty_cache() -> None:
            shutil.rmtree(cache, ignore_errors=True)

        for cmd in ("list", "check"):
            timed(argv + [cmd], builtins_env)  # warm the OS file cache and the bytecode
            results[f"{cmd} built-ins"] = series(argv + [cmd], builtins_env, args.runs)
            results[f"{cmd} +{args.plugins} C cold"] = series(argv + [cmd], c_env, args.runs, before_each=empty_cache)
            timed(argv + [cmd], c_env)  # fills the cache
            results[f"{cmd} +{args.plugins} C cached"] = series(argv + [cmd], c_env, args.runs)
        results["heavy modules imported by list"] = heavy_imports(c_env)
    if args.json:
        print(json.dumps(results, indent=2))
        return
    print(f"pjrt-hub list/check, {args.plugins} C plugins ({args.source}), {args.runs} runs each; load average "
          f"{results['load_average']:.2f} on {results['cpus']} CPUs; bytecode cache "
          f"{'on' if results['bytecode_cache'] else 'off'}")
    print(f"{'':32} {'median':>9} {'best':>9} {'cpu':>9}")
    for key, value in results.items():
        if isinstance(value, dict):
            print(f"{key:32} {value['median_ms']:7.0f}ms {value['best_ms']:7.0f}ms {value['cpu_median_ms']:7.0f}ms")
    cached = [v["median_ms"] for k, v in results.items() if isinstance(v, dict) and k.endswith("cached")]
    verdict = "within" if max(cached) <= TARGET_MS else "OVER"
    print(f"cached, slowest median {max(cached):.0f} ms: {verdict} the {TARGET_MS:.0f} ms target")
    heavy = results["heavy modules imported by list"]
    print("heavy modules imported by list: " + (", ".join(heavy) if heavy else "none"))


if __name__ == "__main__":
    main()
