"""``pjrt-hub bench --via jax``: what a JAX user pays for a plugin served to JAX.

Three figures, each next to JAX on XLA's own CPU backend and, where it means something, next to
the plugin driven directly through pjrt-hub's binding (what ``pjrt-hub bench`` measures):

* **dispatch**: ``jax.jit`` of a tiny program (an add of two 4-element vectors) called over and over,
  per call: the cost of JAX plus the served ``PJRT_Api`` (some 14 C-to-Python callbacks a call)
  plus the plugin's own execute;
* **first call**: the first ``jax.jit(f)(x)`` of a program, tracing, lowering, compiling and running
  (the plugin's compile cache is empty, so numba compiles from scratch);
* **perf programs**: the median execute time of the perf corpus programs, written as the JAX
  functions they were exported from, through ``jax.jit``; their outputs are checked against the
  manifest, as ``pjrt-hub bench`` checks them.

Each plugin is measured in a fresh process with a fresh compile cache, so that one measurement
does not warm another's caches and JAX's backends are made with the plugin registered.
"""

from __future__ import annotations

import functools
import json
import re
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any, Callable, Sequence

import numpy as np

__all__ = ["bench_via_jax", "format_jax_report"]

#: Calls per dispatch measurement, and how many measurements the median is taken over.
DISPATCH_CALLS = 500
DISPATCH_REPEATS = 7
XLA = "cpu"
#: Seconds to wait for numba_cpu's background compiles before timing steady state.
SETTLE_S = 600.0


def _perf_function(entry: dict[str, Any]) -> tuple[Callable[..., Any], list[Any]]:
    """The JAX function of a perf program (its ``jax_source``) and its arguments, rebuilt from the
    flat inputs of ``@main`` and their pytree paths."""
    import jax
    import jax.numpy as jnp
    from jax import lax

    from pjrt_hub._bench import _regenerate

    namespace: dict[str, Any] = {"jax": jax, "jnp": jnp, "lax": lax, "np": np}
    exec(compile(entry["jax_source"], f"<{entry['name']} jax_source>", "exec"), namespace)  # noqa: S102
    fn = next(v for k, v in namespace.items() if k.endswith("_fn") and callable(v))
    flat = _regenerate(entry)
    args: list[Any] = []
    for spec, array in zip(entry["inputs"], flat):
        keys = [int(k) if k.isdigit() else k.strip("'\"")
                for k in re.findall(r"\[('[^']*'|\"[^\"]*\"|\d+)\]", spec["pytree_path"])]
        top = keys[0]
        while len(args) <= top:
            args.append(None)
        if len(keys) == 1:
            args[top] = array
        else:
            holder = args[top] if isinstance(args[top], dict) else {}
            holder[keys[1]] = array
            args[top] = holder
    return fn, args


def _median_us(call: Callable[[], Any], calls: int, repeats: int) -> float:
    samples = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(calls):
            result = call()
        result.block_until_ready()
        samples.append((time.perf_counter() - t0) / calls * 1e6)
    return statistics.median(samples)


def _call(f: Callable[..., Any], args: Sequence[Any]) -> Any:
    import jax

    return jax.block_until_ready(f(*args))


def _settle() -> None:
    """Wait for numba_cpu's background compiles, as ``pjrt-hub bench`` does before timing steady
    state (JAX holds the executables, so this waits for all of them)."""
    tiers = sys.modules.get("pjrt_hub.backends.numba_cpu.tiers")
    if tiers is not None:
        tiers.settle(SETTLE_S)


def _measure(platform: str, entries: Sequence[dict[str, Any]], runs: int | None) -> dict[str, Any]:
    """In the child: every figure for one JAX platform."""
    import jax
    import jax.numpy as jnp

    from pjrt_hub._bench import DEFAULT_RUNS, RUNS, _matches, time_first_calls

    device = jax.devices(platform)[0]
    x = jax.device_put(np.arange(4, dtype=np.float32), device)
    add = jax.jit(lambda a, b: a + b)
    t0 = time.perf_counter()
    add(x, x).block_until_ready()
    first_call_ms = (time.perf_counter() - t0) * 1e3
    for _ in range(200):
        add(x, x)
    _settle()
    dispatch_us = _median_us(lambda: add(x, x), runs or DISPATCH_CALLS, DISPATCH_REPEATS)
    round_trip_us = _median_us(lambda: add(x, x).block_until_ready(), max(1, (runs or DISPATCH_CALLS) // 5),
                               DISPATCH_REPEATS)
    rows = []
    for entry in entries:
        row: dict[str, Any] = {"name": entry["name"], "platform": platform}
        try:
            fn, args = _perf_function(entry)
            placed = jax.device_put(args, device)
            f = jax.jit(fn)
            t0 = time.perf_counter()
            out = f(*placed)
            jax.block_until_ready(out)
            row["first_call_ms"] = (time.perf_counter() - t0) * 1e3
            row["outputs_match"] = _matches([np.asarray(o) for o in jax.tree.leaves(out)], entry)
            row["first_calls_ms_mean"] = time_first_calls(functools.partial(_call, f, placed))
            _settle()
            count = runs or RUNS.get(entry["name"], DEFAULT_RUNS)
            samples = []
            for _ in range(count + 2):
                t0 = time.perf_counter()
                jax.block_until_ready(f(*placed))
                samples.append(time.perf_counter() - t0)
            row["execute_ms_median"] = statistics.median(samples[2:]) * 1e3
            row["runs"] = count
        except Exception as exc:  # noqa: BLE001 - a program that fails is reported, the others run
            row["error"] = f"{type(exc).__name__}: {exc}".splitlines()[0][:400]
        rows.append(row)
    del jnp
    return {"platform": platform, "dispatch_us": dispatch_us, "round_trip_us": round_trip_us,
            "tiny_first_call_ms": first_call_ms, "programs": rows}


def _child_main(argv: Sequence[str]) -> int:
    platform, programs, runs = argv[0], argv[1], int(argv[2])
    if platform != XLA:
        import pjrt_hub.jax as pj

        pj.register(platform)
    from pjrt_hub._bench import perf_programs

    entries = [e for e in perf_programs() if e["name"] in programs.split(",") and programs]
    print(json.dumps(_measure(platform, entries, runs or None)))
    return 0


def _in_child(platform: str, programs: Sequence[str], runs: int | None, cache: str) -> dict[str, Any]:
    from pjrt_hub._bench import _child_env

    # As pjrt-hub bench's own children: an empty compile cache, the machine's numba_cpu kernels.
    env = _child_env(cache)
    env.pop("PJRT_HUB_JAX_PLUGINS", None)
    cmd = [sys.executable, "-m", "pjrt_hub.jax._bench", platform, ",".join(programs), str(runs or 0)]
    done = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if done.returncode != 0:
        tail = " | ".join(done.stderr.strip().splitlines()[-3:])
        return {"platform": platform, "error": f"the benchmark process exited with status {done.returncode}: {tail}",
                "programs": []}
    return json.loads(done.stdout.strip().splitlines()[-1])


def bench_via_jax(plugins: Sequence[str], programs: Sequence[str] | None = None, *, runs: int | None = None,
                  direct: bool = True, progress: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Measure ``plugins`` and XLA:CPU through JAX, each in a fresh process with a cold cache;
    with ``direct``, also the perf programs through pjrt-hub's binding (``pjrt-hub bench``)."""
    from pjrt_hub._bench import _measure_in_child, perf_programs

    names = [e["name"] for e in perf_programs() if programs is None or e["name"] in set(programs)]
    say = progress or (lambda message: None)
    results = []
    for platform in [XLA, *plugins]:
        say(f"measuring {platform} through JAX ...")
        with tempfile.TemporaryDirectory(prefix="pjrt-hub-jax-bench-") as cache:
            results.append(_in_child(platform, names, runs, cache))
    direct_rows: dict[str, dict[str, Any]] = {}
    if direct:
        for plugin in plugins:
            say(f"measuring {plugin} directly through pjrt-hub ...")
            with tempfile.TemporaryDirectory(prefix="pjrt-hub-bench-") as cache:
                measured = _measure_in_child(plugin, names, runs, (), cache)
            direct_rows[plugin] = {"tiny_execute_us": measured.get("tiny_us"),
                                   "programs": {r["name"]: r for r in measured["rows"]}}
    return {"plugins": list(plugins), "programs": names, "through_jax": results, "direct": direct_rows,
            "note": "timings on a shared machine are noisy; compare within one run"}


def _cell(value: Any, fmt: str) -> str:
    return "-" if value is None else format(value, fmt)


def format_jax_report(report: dict[str, Any]) -> str:
    by_platform = {r["platform"]: r for r in report["through_jax"]}
    lines = ["jit dispatch, tiny add (median per call):"]
    head = ["", "jit async us", "jit+block us", "first call ms", "direct execute us"]
    rows = [head]
    for platform, r in by_platform.items():
        direct = report["direct"].get(platform, {}).get("tiny_execute_us")
        label = "XLA:CPU" if platform == XLA else platform
        if "error" in r:
            rows.append([label, "error: " + r["error"][:80], "", "", ""])
            continue
        rows.append([label, _cell(r.get("dispatch_us"), ".1f"), _cell(r.get("round_trip_us"), ".1f"),
                     _cell(r.get("tiny_first_call_ms"), ".0f"), _cell(direct, ".1f")])
    lines += _table(rows)
    lines += ["", "perf programs (median execute ms; first call ms includes trace, lower and a cold compile; "
                  "first calls: the mean of the calls right after it, no waiting for a faster tier):"]
    head = ["program"]
    for platform in by_platform:
        label = "XLA:CPU" if platform == XLA else platform
        head += [f"{label} via JAX", f"{label} first call", f"{label} first calls"]
    for plugin in report["direct"]:
        head.append(f"{plugin} direct")
    rows = [head]
    for name in report["programs"]:
        cells = [name]
        for r in by_platform.values():
            row: dict[str, Any] = next((p for p in r.get("programs", []) if p["name"] == name), {})
            if "error" in row:
                cells += ["error", row["error"][:40], ""]
                continue
            mark = "" if row.get("outputs_match", True) else " (DIFFER)"
            cells += [_cell(row.get("execute_ms_median"), ".2f") + mark, _cell(row.get("first_call_ms"), ".0f"),
                      _cell(row.get("first_calls_ms_mean"), ".2f")]
        for plugin in report["direct"]:
            row = report["direct"][plugin]["programs"].get(name, {})
            cells.append("error" if "error" in row else _cell(row.get("execute_ms_median"), ".2f"))
        rows.append(cells)
    lines += _table(rows)
    lines += ["", report["note"]]
    return "\n".join(lines)


def _table(rows: list[list[str]]) -> list[str]:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows]


def failures(report: dict[str, Any]) -> list[str]:
    """What went wrong: a platform that could not be measured, a program that failed or differs."""
    problems = []
    for r in report["through_jax"]:
        if "error" in r:
            problems.append(f"{r['platform']}: {r['error']}")
        for row in r.get("programs", []):
            if "error" in row:
                problems.append(f"{row['name']} on {r['platform']} through JAX: {row['error']}")
            elif not row.get("outputs_match", False):
                problems.append(f"{row['name']} on {r['platform']} through JAX: outputs differ from the manifest")
    return problems


if __name__ == "__main__":
    sys.exit(_child_main(sys.argv[1:]))
