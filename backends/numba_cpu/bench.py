"""Benchmark of numba_cpu on the perf corpus, against the reference interpreter (numpy eager).

``run_bench()`` returns one row per (program, plugin): median/min execute time, cold compile (an
empty cache: numba compiles from scratch) and warm compile (a fresh process whose cache already
holds the program, after the backend's one-time start-up), whether the outputs match the
manifest's probe values and sum, and the XLA:CPU baseline the manifest records. A ``tiny_add``
row measures the fixed cost of one ``run()``. ``python -m pjrt_hub.backends.numba_cpu.bench``
prints the table; ``benchmarks/bench_numba.py`` is the same from a checkout.
"""

from __future__ import annotations

import importlib.util
import json
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from importlib import resources
from pathlib import Path
from typing import Callable, Iterable, Sequence

import numpy as np

__all__ = ["run_bench", "format_table", "TINY_ADD"]

TINY_ADD = """func.func @main(%a: tensor<4xf32>, %b: tensor<4xf32>) -> tensor<4xf32> {
  %0 = stablehlo.add %a, %b : tensor<4xf32>
  return %0 : tensor<4xf32>
}
"""

_RUNS = {"perf_ew_chain": 30, "perf_softmax": 60, "perf_layernorm": 30, "perf_mlp_forward": 30}


def _perf_dir() -> Path:
    return Path(str(resources.files("pjrt_hub") / "data" / "corpus" / "perf"))


def _make_inputs(entry: dict) -> list[np.ndarray]:
    spec = importlib.util.spec_from_file_location("_pjrt_hub_perf_inputs", _perf_dir() / "make_inputs.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.regenerate(entry)


def _compilers(plugins: Sequence[str], cache_dir: Path) -> dict[str, Callable[[], object]]:
    out: dict[str, Callable[[], object]] = {}
    for name in plugins:
        if name == "numba_cpu":
            from .compiler import NumbaCompiler

            out[name] = lambda d=cache_dir: NumbaCompiler(cache_dir=d)
        elif name == "reference":
            from pjrt_hub.backends.reference import ReferenceCompiler

            out[name] = ReferenceCompiler
        else:
            raise ValueError(f"unknown plugin {name!r} for the numba_cpu benchmark (numba_cpu, reference)")
    return out


def _time(fn, runs: int, warm: int = 2) -> list[float]:
    for _ in range(warm):
        fn()
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1e3)
    return times


def _check(outputs, entry) -> bool:
    spec = entry["outputs"][0]
    flat = np.asarray(outputs[0]).reshape(-1).astype(np.float64)
    probes = flat[spec["probe_flat_indices"]]
    expected = np.asarray(spec["probe_values"])
    ok = bool(np.all(np.abs(probes - expected) <= spec["atol"] + spec["rtol"] * np.abs(expected)))
    return ok and abs(flat.sum() - spec["sum"]) <= 1e-4 * spec["abs_sum"]


_WARM_SCRIPT = textwrap.dedent("""
    import sys, time, json
    from pjrt_hub.backends.numba_cpu import NumbaCompiler
    c = NumbaCompiler(cache_dir=sys.argv[1])
    c.warm_up()
    text = open(sys.argv[2]).read()
    t0 = time.perf_counter()
    c.compile(text)
    ms = (time.perf_counter() - t0) * 1e3
    print(json.dumps({"ms": ms, "index_hits": c.stats.index_hits}))
""")


def _warm_compile_ms(cache_dir: Path, mlir: Path) -> float | None:
    done = subprocess.run([sys.executable, "-c", _WARM_SCRIPT, str(cache_dir), str(mlir)],
                          capture_output=True, text=True, timeout=600)
    if done.returncode != 0:
        return None
    return float(json.loads(done.stdout.strip().splitlines()[-1])["ms"])


def run_bench(programs: Iterable[str] | None = None, plugins: Sequence[str] = ("numba_cpu", "reference"),
              *, cache_dir: str | Path | None = None, warm_in_subprocess: bool = True,
              runs: int | None = None) -> list[dict]:
    """Benchmark the perf corpus (all of it unless ``programs`` names some; ``tiny_add`` is a
    pseudo-program) on each plugin. ``cache_dir`` defaults to a fresh temporary directory, so the
    cold compile really is cold."""
    manifest = json.loads((_perf_dir() / "manifest.json").read_text())
    entries = {e["name"]: e for e in manifest["programs"]}
    wanted = list(programs) if programs else [*entries, "tiny_add"]
    tmp = tempfile.TemporaryDirectory(prefix="pjrt-hub-bench-") if cache_dir is None else None
    root = Path(cache_dir) if cache_dir is not None else Path(tmp.name)
    try:
        makers = _compilers(plugins, root)
        rows: list[dict] = []
        for name in wanted:
            if name == "tiny_add":
                text, args, entry = TINY_ADD, [np.arange(4, dtype=np.float32)] * 2, None
            else:
                if name not in entries:
                    raise ValueError(f"no perf program {name!r}; known: {', '.join(entries)}, tiny_add")
                entry = entries[name]
                text = (_perf_dir() / entry["file"]).read_text()
                args = _make_inputs(entry)
            for plugin, make in makers.items():
                compiler = make()
                t0 = time.perf_counter()
                program = compiler.compile(text)
                cold = (time.perf_counter() - t0) * 1e3
                outputs = program.run(args)
                if entry is None:
                    ok = bool(np.array_equal(outputs[0], args[0] + args[1]))
                    times = _time(lambda: program.run(args), runs or 20000, warm=200)
                    times = [t * 1e3 for t in times]  # microseconds for the tiny program
                else:
                    ok = _check(outputs, entry)
                    times = _time(lambda: program.run(args), runs or _RUNS.get(name, 20))
                row = {
                    "name": name, "plugin": plugin, "correct": ok,
                    "execute_median": statistics.median(times), "execute_min": min(times),
                    "unit": "us" if entry is None else "ms",
                    "compile_ms_cold": cold,
                }
                if entry is not None:
                    row["execute_ms_median"] = row["execute_median"]
                    row["xla_cpu_execute_ms"] = entry["baseline"]["xla_cpu_execute_us"] / 1e3
                    row["xla_cpu_compile_ms"] = entry["baseline"]["xla_cpu_compile_ms"]
                if plugin == "numba_cpu" and warm_in_subprocess:
                    path = root / f"{name}.mlir"
                    path.write_text(text)
                    row["compile_ms_warm"] = _warm_compile_ms(root, path)
                rows.append(row)
        ref = {r["name"]: r["execute_median"] for r in rows if r["plugin"] == "reference"}
        for r in rows:
            if r["plugin"] != "reference" and r["name"] in ref:
                r["reference_execute_median"] = ref[r["name"]]
                r["speedup_vs_reference"] = ref[r["name"]] / r["execute_median"]
        return rows
    finally:
        if tmp is not None:
            tmp.cleanup()


def format_table(rows: list[dict]) -> str:
    head = (f"{'program':18s} {'plugin':10s} {'exec median':>12s} {'exec min':>10s} {'vs ref':>7s} "
            f"{'XLA':>8s} {'cold compile':>13s} {'warm compile':>13s} ok")
    lines = [head, "-" * len(head)]
    for r in rows:
        unit = r["unit"]
        ratio = f"{r['speedup_vs_reference']:.1f}x" if "speedup_vs_reference" in r else ""
        xla = f"{r['xla_cpu_execute_ms']:.1f}ms" if "xla_cpu_execute_ms" in r else ""
        warm = r.get("compile_ms_warm")
        warm_s = f"{warm:.1f}ms" if warm is not None else ""
        lines.append(f"{r['name']:18s} {r['plugin']:10s} {r['execute_median']:10.2f}{unit} {r['execute_min']:8.2f}{unit} "
                     f"{ratio:>7s} {xla:>8s} {r['compile_ms_cold']:11.0f}ms {warm_s:>13s} {'yes' if r['correct'] else 'NO'}")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("programs", nargs="*", help="perf programs (default: all, plus tiny_add)")
    parser.add_argument("--plugins", default="numba_cpu,reference")
    parser.add_argument("--json", action="store_true", help="print the rows as JSON")
    parser.add_argument("--no-warm", action="store_true", help="skip the warm-compile subprocess")
    args = parser.parse_args(argv)
    rows = run_bench(args.programs or None, tuple(args.plugins.split(",")), warm_in_subprocess=not args.no_warm)
    print(json.dumps(rows, indent=1) if args.json else format_table(rows))
    return 0 if all(r["correct"] for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
