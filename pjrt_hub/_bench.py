"""``pjrt-hub bench``: the perf corpus on several plugins in one run, through the same binding.

Every plugin is measured the same way, the way XLA:CPU was measured for the research notes:
inputs are uploaded once, then each timed run is execute + await of the completion events (the
outputs are destroyed outside the clock), and the median is reported. Compile is timed cold (a
fresh, empty compile cache for the run, so numba_cpu compiles from scratch) and warm (a fresh
process whose cache holds the program, after the plugin's one-time start-up, which a compile of
a tiny program absorbs). Outputs are checked against the manifest's probe values and sums, so a
fast wrong answer is visible. Each program also gets its time to first result (compile, one
execute and the copy of its outputs to the host) with the cache empty and, in a fresh process,
warm; steady state is timed once the plugin runs the program at full speed (numba_cpu answers
its first executions from an eager tier while it compiles in the background). The tiny program (an add of two 4-element vectors) measures the
fixed cost of one execute.
"""

from __future__ import annotations

import importlib.util
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from importlib import resources
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

import numpy as np

from pjrt_hub.abi import PjrtError, Program

__all__ = ["TINY_ADD", "bench", "perf_programs"]

TINY_ADD = """func.func @main(%a: tensor<4xf32>, %b: tensor<4xf32>) -> tensor<4xf32> {
  %0 = stablehlo.add %a, %b : tensor<4xf32>
  return %0 : tensor<4xf32>
}
"""

#: Timed runs per program (softmax is short and noisy, so it gets more).
RUNS = {"perf_softmax": 60}
DEFAULT_RUNS = 30
TINY_RUNS = 3000


def _perf_dir() -> Path:
    return Path(str(resources.files("pjrt_hub") / "data" / "corpus" / "perf"))


def perf_programs() -> list[dict[str, Any]]:
    """The perf corpus manifest entries."""
    return json.loads((_perf_dir() / "manifest.json").read_text())["programs"]


def _regenerate(entry: dict[str, Any]) -> list[np.ndarray]:
    spec = importlib.util.spec_from_file_location("_pjrt_hub_perf_inputs", _perf_dir() / "make_inputs.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.regenerate(entry)


def _matches(outputs: Sequence[np.ndarray], entry: dict[str, Any]) -> bool:
    for array, spec in zip(outputs, entry["outputs"]):
        flat = np.asarray(array, dtype=np.float64).ravel()
        probes = flat[np.asarray(spec["probe_flat_indices"])]
        expected = np.asarray(spec["probe_values"], dtype=np.float64)
        if not np.allclose(probes, expected, rtol=spec["rtol"], atol=spec["atol"]):
            return False
        if abs(flat.sum() - spec["sum"]) > 1e-4 * spec["abs_sum"]:
            return False
    return True


class _Loaded:
    """A program compiled on a client, with its inputs on the first device.

    ``first_result_ms`` is what a user waits for the first answer: compile, one execute and the
    copy of its outputs to the host (the inputs are uploaded before the clock starts);
    ``first_outputs`` are those outputs. Steady state is timed after :meth:`settle`."""

    def __init__(self, client: Any, text: str, arrays: Sequence[np.ndarray]) -> None:
        device = client.addressable_devices()[0]
        self.buffers = []
        for array in arrays:
            transfer = client.buffer_from_host_buffer(np.ascontiguousarray(array), device=device)
            transfer.done_with_host_buffer.await_()
            self.buffers.append(transfer.buffer)
        t0 = time.perf_counter()
        self.executable = client.compile(Program(text, "mlir"))
        self.compile_ms = (time.perf_counter() - t0) * 1e3
        self.first_outputs = self.outputs()
        self.first_result_ms = (time.perf_counter() - t0) * 1e3

    def settle(self) -> None:
        """Wait until the plugin runs the program at full speed: numba_cpu answers first from
        its eager tier and switches to compiled code compiled in the background (a program's
        ``wait_compiled``); other plugins have nothing to wait for."""
        try:
            program = self.executable.get_executable().program
        except (AttributeError, PjrtError):
            return
        wait = getattr(program, "wait_compiled", None)
        if wait is not None:
            wait()

    def execute_once(self) -> float:
        t0 = time.perf_counter()
        result = self.executable.execute([self.buffers])
        for event in result.device_complete_events:
            event.await_()
        elapsed = time.perf_counter() - t0
        for buffer in result.outputs[0]:
            buffer.destroy()
        return elapsed

    def outputs(self) -> list[np.ndarray]:
        result = self.executable.execute([self.buffers])
        arrays = []
        for buffer in result.outputs[0]:
            host = buffer.to_host_buffer()
            host.event.await_()
            arrays.append(host.array)
            buffer.destroy()
        return arrays

    def close(self) -> None:
        for buffer in self.buffers:
            buffer.destroy()
        self.executable.destroy()


def _median_ms(fn: Callable[[], float], runs: int, warm: int = 3) -> float:
    for _ in range(warm):
        fn()
    return statistics.median(fn() for _ in range(runs)) * 1e3


def _warm_first_result(plugin: str, entry: dict[str, Any], cache: str,
                       library: Sequence[str]) -> dict[str, float] | None:
    """Compile ``entry``'s program and run it once in a fresh process that shares the run's
    compile cache (warm): ``{"compile_ms": ..., "first_result_ms": ...}``."""
    env = dict(os.environ, PJRT_HUB_CACHE=cache)
    cmd = [sys.executable, "-m", "pjrt_hub._bench", "--warm-compile", plugin, entry["name"], *library]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600)
    except subprocess.TimeoutExpired:
        return None
    if done.returncode != 0:
        return None
    return json.loads(done.stdout.strip().splitlines()[-1])


#: A line the measuring child writes to stderr as it starts a program (read by the parent).
_STARTING = "pjrt-hub-bench: starting "

#: ``progress(done, total, what)``: programs benched so far, of how many, and what runs now.
Progress = Callable[[int, int, str], None]


def _measure(client: Any, name: str, entries: Sequence[dict[str, Any]], runs: int | None,
             say: Callable[[str], None]) -> dict[str, Any]:
    """Time one plugin on the programs (in this process)."""
    say(f"{_STARTING}tiny add")
    loaded = _Loaded(client, TINY_ADD, [np.arange(4, dtype=np.float32)] * 2)
    loaded.settle()
    tiny = _median_ms(loaded.execute_once, runs or TINY_RUNS, warm=200) * 1e3
    loaded.close()
    say(f"{name}: tiny add executes in {tiny:.2f} us")
    rows = []
    for entry in entries:
        say(f"{_STARTING}{entry['name']}")
        row: dict[str, Any] = {"name": entry["name"], "plugin": name}
        try:
            loaded = _Loaded(client, (_perf_dir() / entry["file"]).read_text(), _regenerate(entry))
            row["compile_ms_cold"] = loaded.compile_ms
            row["first_result_ms_cold"] = loaded.first_result_ms
            loaded.settle()
            row["outputs_match"] = _matches(loaded.first_outputs, entry) and _matches(loaded.outputs(), entry)
            count = runs or RUNS.get(entry["name"], DEFAULT_RUNS)
            row["execute_ms_median"] = _median_ms(loaded.execute_once, count, warm=min(3, count))
            row["runs"] = count
            loaded.close()
        except PjrtError as exc:
            row["error"] = str(exc)
        baseline_us = (entry.get("baseline") or {}).get("xla_cpu_execute_us")
        row["xla_cpu_baseline_ms"] = None if baseline_us is None else baseline_us / 1e3
        row["xla_cpu_compile_ms"] = (entry.get("baseline") or {}).get("xla_cpu_compile_ms")
        rows.append(row)
    return {"rows": rows, "tiny_us": tiny}


def _measure_in_child(name: str, programs: Sequence[str], runs: int | None, library: Sequence[str],
                      cache: str, starting: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Each plugin is timed in a process of its own, as XLA:CPU was for the research notes: the
    thread pools of one plugin do not slow another's, and a crash stays that plugin's.

    ``starting(program)`` hears of each program as the child starts it."""
    env = dict(os.environ, PJRT_HUB_CACHE=cache)
    cmd = [sys.executable, "-m", "pjrt_hub._bench", "--measure", name, ",".join(programs),
           str(runs or 0), *library]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    tail: list[str] = []

    def read_stderr() -> None:
        assert proc.stderr is not None
        for line in proc.stderr:
            if line.startswith(_STARTING):
                if starting is not None:
                    starting(line[len(_STARTING):].strip())
            elif line.strip():
                tail.append(line.rstrip())
                del tail[:-20]

    # stderr is read on a thread while stdout is read here: a child that fills one pipe while
    # the parent waits on the other would never finish.
    reader = threading.Thread(target=read_stderr, daemon=True)
    reader.start()
    assert proc.stdout is not None
    stdout = proc.stdout.read()
    returncode = proc.wait()
    reader.join()
    if returncode != 0:
        reason = f"the benchmark process exited with status {returncode}" + (
            ": " + " | ".join(tail[-3:]) if tail else "")
        return {"rows": [{"name": p, "plugin": name, "error": reason} for p in programs], "tiny_us": None}
    return json.loads(stdout.strip().splitlines()[-1])


def bench(registry: Any, plugins: Sequence[str], programs: Iterable[str] | None = None, *,
          warm: bool = True, library: Sequence[str] = (), runs: int | None = None,
          progress: Progress | None = None) -> dict[str, Any]:
    """Run the perf corpus on ``plugins``; return the report as a JSON-able dict.

    ``registry`` has judged the plugins already (the caller requires them loaded); each one is
    then measured in a fresh process that shares one compile cache, empty at the start (cold),
    and removed at the end. ``progress`` hears which program runs on which plugin.
    """
    entries = [e for e in perf_programs() if programs is None or e["name"] in set(programs)]
    names = [e["name"] for e in entries]
    total = len(entries) * len(plugins)
    done = 0
    rows: list[dict[str, Any]] = []
    tiny: dict[str, float] = {}
    with tempfile.TemporaryDirectory(prefix="pjrt-hub-bench-") as cache:
        for index, name in enumerate(plugins):
            def starting(program: str, plugin: str = name) -> None:
                nonlocal done
                if progress is not None:
                    progress(done, total, f"{program} on {plugin}")
                if program in names:
                    done += 1

            measured = _measure_in_child(name, names, runs, library, cache, starting)
            if measured["tiny_us"] is not None:
                tiny[name] = measured["tiny_us"]
            for row in measured["rows"]:
                if warm and "error" not in row:
                    entry = next(e for e in entries if e["name"] == row["name"])
                    if progress is not None:
                        progress(done, total, f"{row['name']} on {name}: warm-cache compile")
                    warm_run = _warm_first_result(name, entry, cache, library)
                    row["compile_ms_warm"] = None if warm_run is None else warm_run["compile_ms"]
                    row["first_result_ms_warm"] = None if warm_run is None else warm_run["first_result_ms"]
                rows.append(row)
            done = len(entries) * (index + 1)  # also when the child ended early
    rows.sort(key=lambda r: (names.index(r["name"]), list(plugins).index(r["plugin"])))
    _add_ratios(rows)
    return {"programs": rows, "tiny_execute_us": tiny.get(plugins[0]) if plugins else None,
            "tiny_execute_us_by_plugin": tiny, "plugins": list(plugins)}


def _add_ratios(rows: list[dict[str, Any]]) -> None:
    """Each row gets ``speedup_vs_<plugin>``: the other plugin's median over this one's."""
    by_program: dict[str, dict[str, float]] = {}
    for row in rows:
        if "execute_ms_median" in row:
            by_program.setdefault(row["name"], {})[row["plugin"]] = row["execute_ms_median"]
    for row in rows:
        mine = row.get("execute_ms_median")
        if not mine:
            continue
        for other, ms in by_program.get(row["name"], {}).items():
            if other != row["plugin"]:
                row[f"speedup_vs_{other}"] = ms / mine


def _format_row(row: dict[str, Any]) -> str:
    if "error" in row:
        return f"{row['name']} on {row['plugin']}: error: {row['error']}"
    warm = row.get("compile_ms_warm")
    return (f"{row['name']} on {row['plugin']}: execute {row['execute_ms_median']:.2f} ms (median of "
            f"{row['runs']}), compile cold {row['compile_ms_cold']:.0f} ms, warm "
            f"{'-' if warm is None else f'{warm:.1f}'} ms, first result cold "
            f"{row.get('first_result_ms_cold', 0):.0f} ms, outputs {'match' if row['outputs_match'] else 'DIFFER'}")


def _ms(value: float | None, digits: int = 0) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def format_report(report: dict[str, Any]) -> str:
    plugins = report["plugins"]
    head = ["program", *[f"{p} ms" for p in plugins]]
    ratio_cols = [(a, b) for a in plugins[:1] for b in plugins[1:]]
    head += [f"{a} speedup vs {b}" for a, b in ratio_cols] + ["compile cold/warm ms (" + plugins[0] + ")", "XLA:CPU ms"]
    head += [f"first result cold/warm ms ({plugins[0]})", "XLA:CPU compile ms"]
    table = [head]
    for name in dict.fromkeys(r["name"] for r in report["programs"]):
        rows = {r["plugin"]: r for r in report["programs"] if r["name"] == name}
        cells = [name]
        for p in plugins:
            r = rows.get(p, {})
            cells.append(f"{r['execute_ms_median']:.2f}" if "execute_ms_median" in r else "error")
        for a, b in ratio_cols:
            ratio = rows.get(a, {}).get(f"speedup_vs_{b}")
            cells.append("-" if ratio is None else f"{ratio:.2f}x")
        first = rows.get(plugins[0], {})
        cold, warm = first.get("compile_ms_cold"), first.get("compile_ms_warm")
        cells.append(f"{'-' if cold is None else f'{cold:.0f}'} / {'-' if warm is None else f'{warm:.1f}'}")
        base = first.get("xla_cpu_baseline_ms")
        cells.append("-" if base is None else f"{base:.1f}")
        cells.append(f"{_ms(first.get('first_result_ms_cold'))} / {_ms(first.get('first_result_ms_warm'))}")
        cells.append(_ms(first.get("xla_cpu_compile_ms"), 1))
        table.append(cells)
    widths = [max(len(row[i]) for row in table) for i in range(len(head))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in table]
    lines.append("")
    lines += [f"tiny add execute: {p} {us:.2f} us" for p, us in report["tiny_execute_us_by_plugin"].items()]
    return "\n".join(lines)


def _child_registry(library: Sequence[str]) -> Any:
    from pjrt_hub._registry import PluginRegistry, RegistrySettings

    return PluginRegistry(RegistrySettings.from_environment(paths=tuple(library)))


def _measure_main(argv: Sequence[str]) -> int:
    """Child of :func:`_measure_in_child`: time one plugin, print the result as JSON."""
    plugin, programs, runs, *library = argv
    client = _child_registry(library).create_client(plugin)
    entries = [e for e in perf_programs() if e["name"] in programs.split(",")]

    def say(message: str) -> None:
        print(message, file=sys.stderr, flush=True)

    result = _measure(client, plugin, entries, int(runs) or None, say)
    for row in result["rows"]:
        say(_format_row(row))
    print(json.dumps(result))
    return 0


def _warm_compile_main(argv: Sequence[str]) -> int:
    """Child of :func:`_warm_first_result`: start the plugin, then time one compile and the
    first result."""
    plugin, name, *library = argv
    client = _child_registry(library).create_client(plugin)
    # The plugin's one-time start-up, as XLA:CPU's compile times were taken after one.
    _Loaded(client, TINY_ADD, [np.arange(4, dtype=np.float32)] * 2).close()
    entry = next(e for e in perf_programs() if e["name"] == name)
    loaded = _Loaded(client, (_perf_dir() / entry["file"]).read_text(), _regenerate(entry))
    print(json.dumps({"compile_ms": loaded.compile_ms, "first_result_ms": loaded.first_result_ms}))
    loaded.close()
    return 0


if __name__ == "__main__":
    if sys.argv[1:2] == ["--warm-compile"]:
        sys.exit(_warm_compile_main(sys.argv[2:]))
    if sys.argv[1:2] == ["--measure"]:
        sys.exit(_measure_main(sys.argv[2:]))
    raise SystemExit("usage: python -m pjrt_hub._bench --measure PLUGIN PROGRAMS RUNS [LIBRARY...] | "
                     "--warm-compile PLUGIN PROGRAM [LIBRARY...]")
