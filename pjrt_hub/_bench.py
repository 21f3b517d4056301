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

``--corpus`` times the public corpus (real JAX programs, 10 us to 1 ms each) the same way,
checking outputs against the corpus's expected arrays and tolerances, and summarises the first
plugin against each other one as geometric means of the time ratios, with the worst program.
Runs per program follow a time budget there, so that a 20 us program is timed hundreds of times.
"""

from __future__ import annotations

import gc
import importlib.util
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import math
import threading
import time
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

import numpy as np

from pjrt_hub._run import host_array
from pjrt_hub.abi import PjrtError, Program

__all__ = ["TINY_ADD", "BenchProgram", "bench", "bench_programs", "corpus_programs", "perf_programs", "summarise"]

TINY_ADD = """func.func @main(%a: tensor<4xf32>, %b: tensor<4xf32>) -> tensor<4xf32> {
  %0 = stablehlo.add %a, %b : tensor<4xf32>
  return %0 : tensor<4xf32>
}
"""

#: Timed runs per program (softmax is short and noisy, so it gets more).
RUNS = {"perf_softmax": 60}
DEFAULT_RUNS = 30
TINY_RUNS = 3000
#: Timed runs are taken in this many rounds over all the programs (see _measure).
ROUNDS = 5
#: Without ``--runs``, short programs run more often: up to this much time per program...
RUN_BUDGET_S = 0.25
#: ...and at most this many runs.
MAX_RUNS = 2000
#: Right after a program's first result, before waiting for its fastest tier: this many timed
#: executes after FIRST_WARM untimed ones, within FIRST_CALLS_BUDGET_S (a user's first loop).
FIRST_CALLS = 30
FIRST_WARM = 3
FIRST_CALLS_BUDGET_S = 60.0


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
    """Whether every output passes the perf manifest's check (probe values and sum)."""
    from pjrt_hub.testing._programs import perf_mismatch

    return all(perf_mismatch(array, spec) is None for array, spec in zip(outputs, entry["outputs"]))


@dataclass(frozen=True)
class BenchProgram:
    """One program ``bench`` times: where its text is, how to make its inputs and how to check
    its outputs (the perf corpus has probes and sums, the public corpus full expected arrays)."""

    name: str
    suite: str  # "perf" | "corpus"
    path: Path
    #: XLA:CPU's execute time the corpus manifest records (through JAX), if any.
    xla_cpu_baseline_ms: float | None = None
    #: XLA:CPU's compile time the manifest records, if any.
    xla_cpu_compile_ms: float | None = None

    def text(self) -> str:
        return self.path.read_text()

    def inputs(self) -> list[np.ndarray]:
        if self.suite == "perf":
            return _regenerate(_perf_entry(self.name))
        return _corpus_program(self.name).arrays()[0]

    def outputs_match(self, outputs: Sequence[np.ndarray]) -> bool:
        if self.suite == "perf":
            return _matches(outputs, _perf_entry(self.name))
        program = _corpus_program(self.name)
        expected = program.arrays()[1]
        return len(outputs) == len(expected) and all(
            program.output_mismatch(i, got, want) is None for i, (got, want) in enumerate(zip(outputs, expected)))


def _perf_entry(name: str) -> dict[str, Any]:
    return next(e for e in perf_programs() if e["name"] == name)


def _corpus_program(name: str) -> Any:
    from pjrt_hub.testing._programs import load_corpus

    return next(p for p in load_corpus() if p.name == name)


def _baseline_ms(entry: dict[str, Any]) -> float | None:
    us = (entry.get("baseline") or {}).get("xla_cpu_execute_us")
    return None if us is None else us / 1e3


def _compile_baseline_ms(entry: dict[str, Any]) -> float | None:
    return (entry.get("baseline") or {}).get("xla_cpu_compile_ms")


def corpus_programs() -> list[BenchProgram]:
    """The public corpus (``pjrt_hub/data/corpus/public``), in manifest order."""
    root = Path(str(resources.files("pjrt_hub") / "data" / "corpus" / "public"))
    manifest = json.loads((root / "manifest.json").read_text())
    return [BenchProgram(e["name"], "corpus", root / e["file"], _baseline_ms(e), _compile_baseline_ms(e))
            for e in manifest["programs"]]


def bench_programs(suite: str = "perf") -> list[BenchProgram]:
    """The programs of one suite: ``perf`` (large, four) or ``corpus`` (the public corpus)."""
    if suite == "corpus":
        return corpus_programs()
    return [BenchProgram(e["name"], "perf", _perf_dir() / e["file"], _baseline_ms(e), _compile_baseline_ms(e))
            for e in perf_programs()]


def _program_named(name: str) -> BenchProgram:
    """Perf names start with ``perf_``, corpus names never do: one namespace for both suites."""
    for program in bench_programs("perf" if name.startswith("perf_") else "corpus"):
        if program.name == name:
            return program
    raise KeyError(name)


class _Loaded:
    """A program compiled on a client, with its inputs on the first device.

    ``first_result_ms`` is what a user waits for the first answer: compile, one execute and the
    copy of its outputs to the host (the inputs are uploaded before the clock starts);
    ``first_outputs`` are those outputs. Steady state is timed after :meth:`settle`.

    Python's cyclic garbage collector runs before the clock starts. The programs of a suite
    share their plugin's process, and what the earlier ones allocated (their runs, and numba's
    modules once compiled code is loaded: some 160,000 objects) made a full collection land in
    whichever compile came next, a different one from run to run (docs/measurements.md). A
    user's first compile in a process of its own does not inherit that debt."""

    def __init__(self, client: Any, text: str, arrays: Sequence[np.ndarray]) -> None:
        from pjrt_hub.testing._programs import framework_options

        device = client.addressable_devices()[0]
        self.buffers = []
        for array in arrays:
            transfer = client.buffer_from_host_buffer(host_array(array), device=device)
            transfer.done_with_host_buffer.await_()
            self.buffers.append(transfer.buffer)
        gc.collect()
        t0 = time.perf_counter()
        # JAX's compile options: the C plugins then keep NaN-propagating min/max, as the
        # corpus expects (the others ignore them).
        self.executable = client.compile(Program(text, "mlir"), framework_options())
        self.compile_ms = (time.perf_counter() - t0) * 1e3
        self.first_outputs = self.outputs()
        self.first_result_ms = (time.perf_counter() - t0) * 1e3

    def first_calls(self) -> float | None:
        """:func:`time_first_calls` of this program's executes, before :meth:`settle`."""
        return time_first_calls(self._run_timed)

    def settle(self) -> None:
        """Wait until the plugin runs the program at full speed (see ``wait_compiled``)."""
        from pjrt_hub.testing._context import wait_compiled

        wait_compiled(self.executable)

    def execute_once(self) -> float:
        """One timed run of the steady state (seconds)."""
        return self._run_timed()

    def _run_timed(self) -> float:
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


def time_first_calls(run: Callable[[], Any]) -> float | None:
    """The mean ms of the :data:`FIRST_CALLS` calls of ``run`` right after a program's first
    result (after :data:`FIRST_WARM` untimed ones), with no waiting for a faster tier: what a
    user's first loop costs per call, a wait for the compiled code included. ``run`` returns its
    own time in seconds, or None to be timed here. Stops early past :data:`FIRST_CALLS_BUDGET_S`
    (None if not one call was timed by then)."""
    deadline = time.perf_counter() + FIRST_CALLS_BUDGET_S
    times: list[float] = []
    for i in range(FIRST_WARM + FIRST_CALLS):
        t0 = time.perf_counter()
        own = run()
        elapsed = own if isinstance(own, float) else time.perf_counter() - t0
        if i >= FIRST_WARM:
            times.append(elapsed)
        if time.perf_counter() > deadline and times:
            break
    return sum(times) / len(times) * 1e3 if times else None


def _usage() -> tuple[float, int]:
    """This process's CPU seconds (every thread: the plugin's pools too) and minor page faults."""
    used = resource.getrusage(resource.RUSAGE_SELF)
    return used.ru_utime + used.ru_stime, used.ru_minflt


def _budgeted_runs(fn: Callable[[], float], least: int) -> int:
    """``least`` runs, or as many as fit in :data:`RUN_BUDGET_S` (up to :data:`MAX_RUNS`), judged
    by the fastest of three runs (which also warm the program up)."""
    estimate = min(fn() for _ in range(3))
    return max(least, min(MAX_RUNS, int(RUN_BUDGET_S / max(estimate, 1e-7))))


def _child_env(cache: str) -> dict[str, str]:
    """A measuring process's environment: the run's compile cache (``cache``, empty at the
    start), and numba_cpu's machine kernels where this process finds them. They are compiled
    once per machine, not per program, so a cold compile does not include them (see
    :mod:`pjrt_hub.backends.numba_cpu.machine_kernels`)."""
    from pjrt_hub.backends.numba_cpu.machine_kernels import directory

    return dict(os.environ, PJRT_HUB_CACHE=cache, PJRT_HUB_MACHINE_CACHE=str(directory()))


def _warm_first_result(plugin: str, program: str, cache: str,
                       library: Sequence[str]) -> dict[str, float] | None:
    """Compile the program named ``program`` and run it once in a fresh process that shares the
    run's compile cache (warm): ``{"compile_ms": ..., "first_result_ms": ...}``."""
    cmd = [sys.executable, "-m", "pjrt_hub._bench", "--warm-compile", plugin, program, *library]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, env=_child_env(cache), timeout=600)
    except subprocess.TimeoutExpired:
        return None
    if done.returncode != 0:
        return None
    return json.loads(done.stdout.strip().splitlines()[-1])


#: A line the measuring child writes to stderr as it starts a program (read by the parent).
_STARTING = "pjrt-hub-bench: starting "
#: What begins the progress message of a plugin's timed round (see :func:`bench`), and of each
#: program's turn in it.
_ROUND = "timed round "
_TIMING = "timing "
#: What begins the lines of the ``--measure-rounds`` protocol on the child's stdout; any other
#: line there (a plugin's own output) is not an answer.
_ANSWER = "pjrt-hub-bench: "

#: ``progress(done, total, what)``: programs benched so far, of how many, and what runs now.
Progress = Callable[[int, int, str], None]


def _measure(client: Any, name: str, programs: Sequence[BenchProgram], runs: int | None,
             say: Callable[[str], None]) -> dict[str, Any]:
    """Time one plugin on the programs (in this process): a :class:`_Session`, its rounds one
    after another."""
    session = _Session(client, name, programs, runs, say)
    for round_ in range(ROUNDS):
        session.run_round(round_)
    return session.result()


class _Session:
    """One plugin's measurement in this process.

    Made, it has compiled, checked and settled every program (timing the first results). The
    timed runs then go in :data:`ROUNDS` rounds over the tiny add and all the programs, a block
    of each one's runs in every round (:meth:`run_block`: an untimed run, then its share), and
    its median is taken over all of them (:meth:`result`). A burst of the host's own load then
    falls on a part of several programs' runs, which the median absorbs, instead of on all of
    one program's; and when several plugins are timed, their blocks of one program can follow
    one another (:func:`_measure_interleaved`), so that the host's speed of the moment falls on
    all of them alike. The cost: every program stays loaded until the end (the perf programs'
    inputs and outputs are about 100 MB per plugin, the corpus's a few), and a program's first
    result is timed with the earlier ones resident."""

    def __init__(self, client: Any, name: str, programs: Sequence[BenchProgram], runs: int | None,
                 say: Callable[[str], None]) -> None:
        self.name, self.say = name, say
        say(f"{_STARTING}tiny add")
        loaded = _Loaded(client, TINY_ADD, [np.arange(4, dtype=np.float32)] * 2)
        loaded.settle()
        self.tiny = _Timed({"name": "tiny add", "plugin": name}, loaded, runs or TINY_RUNS, warm=100)
        self.rows: list[dict[str, Any]] = []
        #: per block number: the tiny add, then each program (None: it failed before timing)
        self.blocks: list[_Timed | None] = [self.tiny]
        for program in programs:
            say(f"{_STARTING}{program.name}")
            row: dict[str, Any] = {"name": program.name, "plugin": name}
            timed = None
            try:
                loaded = _Loaded(client, program.text(), program.inputs())
                row["compile_ms_cold"] = loaded.compile_ms
                row["first_result_ms_cold"] = loaded.first_result_ms
                row["first_calls_ms_mean"] = loaded.first_calls()
                loaded.settle()
                row["outputs_match"] = program.outputs_match(loaded.first_outputs) and program.outputs_match(
                    loaded.outputs())
                count = runs or _budgeted_runs(loaded.execute_once, RUNS.get(program.name, DEFAULT_RUNS))
                timed = _Timed(row, loaded, count)
            except PjrtError as exc:
                row["error"] = str(exc)
            self.blocks.append(timed)
            row["xla_cpu_baseline_ms"] = program.xla_cpu_baseline_ms
            row["xla_cpu_compile_ms"] = program.xla_cpu_compile_ms
            self.rows.append(row)

    def run_round(self, round_: int) -> None:
        for block in range(len(self.blocks)):
            self.run_block(round_, block)

    def run_block(self, round_: int, block: int) -> None:
        """Round ``round_``'s runs of block ``block`` (0: the tiny add, then the programs in
        order); nothing for a program that failed."""
        entry = self.blocks[block]
        if entry is not None and "error" not in entry.row:
            # Names the block a crash would end in (the parent keeps the last stderr lines).
            self.say(f"timing {entry.row['name']}, round {round_ + 1} of {ROUNDS}")
            entry.run_block(round_)

    def result(self) -> dict[str, Any]:
        """The rows and the tiny add's time; the programs are unloaded."""
        for entry in filter(None, self.blocks):
            entry.finish()
        tiny = self.tiny.row
        tiny_us = None if "error" in tiny else tiny["execute_ms_median"] * 1e3
        self.say(f"{self.name}: tiny add " + (f"error: {tiny['error']}" if tiny_us is None
                                              else f"executes in {tiny_us:.2f} us"))
        return {"rows": self.rows, "tiny_us": tiny_us}


@dataclass
class _Timed:
    """One program's timed runs, taken in blocks (:func:`_measure`), and what explains them:
    ``cores_used`` is CPU time over wall time while the program ran (2.0: two threads kept
    busy, 1.0: one), ``minor_faults_per_run`` the page faults each execute took (fresh output
    memory the plugin touches for the first time)."""

    row: dict[str, Any]
    loaded: _Loaded
    count: int
    #: untimed runs before each block
    warm: int = 1
    times: list[float] = field(default_factory=list)
    seconds: float = 0.0
    cpu: float = 0.0
    faults: int = 0

    def run_block(self, round_: int) -> None:
        # This round's share of the runs: count * (round_ + 1) // ROUNDS of them done by its end.
        share = self.count * (round_ + 1) // ROUNDS - len(self.times)
        if share <= 0:
            return
        try:
            for _ in range(self.warm):  # untimed: the caches held another program a moment ago
                self.loaded.execute_once()
            before, wall = _usage(), time.perf_counter()
            self.times += [self.loaded.execute_once() for _ in range(share)]
            after = _usage()
        except PjrtError as exc:
            self.row["error"] = str(exc)
            return
        self.seconds += time.perf_counter() - wall
        self.cpu += after[0] - before[0]
        self.faults += after[1] - before[1]

    def finish(self) -> None:
        if "error" not in self.row and not self.times:
            self.row["error"] = "not timed: the measurement ended before its rounds"
        if "error" not in self.row:
            self.row["execute_ms_median"] = statistics.median(self.times) * 1e3
            self.row["runs"] = len(self.times)
            self.row["cores_used"] = self.cpu / self.seconds if self.seconds > 0 else 0.0
            self.row["cpu_ms_per_run"] = self.cpu / len(self.times) * 1e3
            self.row["minor_faults_per_run"] = self.faults / len(self.times)
        try:
            self.loaded.close()
        except PjrtError:
            pass


class _Child:
    """A measuring process (``python -m pjrt_hub._bench``) for one plugin: its stderr is read on
    a thread (the lines announcing a program go to ``starting``, the last others are kept for an
    error message), so that a child filling one pipe while the parent waits on the other cannot
    hang either."""

    def __init__(self, mode: str, name: str, programs: Sequence[str], runs: int | None,
                 library: Sequence[str], cache: str, starting: Callable[[str], None] | None) -> None:
        self.name, self.programs = name, list(programs)
        cmd = [sys.executable, "-m", "pjrt_hub._bench", mode, name, ",".join(programs), str(runs or 0), *library]
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     text=True, env=_child_env(cache))
        self.tail: list[str] = []
        self.reader = threading.Thread(target=self._read_stderr, args=(starting,), daemon=True)
        self.reader.start()

    def _read_stderr(self, starting: Callable[[str], None] | None) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            if line.startswith(_STARTING):
                if starting is not None:
                    starting(line[len(_STARTING):].strip())
            else:
                self._keep(line)

    def _keep(self, line: str) -> None:
        """Keep the last 20 lines of its own output, for an error message."""
        if line.strip():
            self.tail.append(line.rstrip())
            del self.tail[:-20]

    def ask(self, command: str) -> str | None:
        """Send one command line; the child's answer (its next line that begins with
        :data:`_ANSWER`, without it), or None if it has ended."""
        assert self.proc.stdin is not None and self.proc.stdout is not None
        try:
            self.proc.stdin.write(command + "\n")
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError):
            return None
        for line in self.proc.stdout:
            if line.startswith(_ANSWER):
                return line[len(_ANSWER):].strip()
            self._keep(line)  # a plugin's own output
        return None

    def kill(self) -> None:
        """End the child now, whatever it is doing, and reap it."""
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        self.reader.join(timeout=5)
        for pipe in (self.proc.stdin, self.proc.stdout):
            if pipe is not None:
                try:
                    pipe.close()
                except OSError:
                    pass

    def result(self) -> dict[str, Any]:
        """Close its stdin, read the rest of its output and wait for it: its measurement, or a
        row with the reason for each program if it failed."""
        assert self.proc.stdin is not None and self.proc.stdout is not None
        try:
            self.proc.stdin.close()
        except (BrokenPipeError, OSError):
            pass
        stdout = self.proc.stdout.read()
        returncode = self.proc.wait()
        self.reader.join()
        lines = stdout.strip().splitlines()
        if returncode != 0 or not lines:
            return self.failed(f"exited with status {returncode}" + (
                ": " + " | ".join(self.tail[-3:]) if self.tail else ""))
        return json.loads(lines[-1])

    def failed(self, reason: str) -> dict[str, Any]:
        """A measurement with no figures: each program's row says why (``reason``, of the process)."""
        return {"rows": [{"name": p, "plugin": self.name, "error": f"the benchmark process {reason}"}
                         for p in self.programs], "tiny_us": None}


def _measure_in_child(name: str, programs: Sequence[str], runs: int | None, library: Sequence[str],
                      cache: str, starting: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Each plugin is timed in a process of its own, as XLA:CPU was for the research notes: the
    thread pools of one plugin do not slow another's, and a crash stays that plugin's.

    ``starting(program)`` hears of each program as the child starts it."""
    return _Child("--measure", name, programs, runs, library, cache, starting).result()


def _measure_interleaved(plugins: Sequence[str], programs: Sequence[str], runs: int | None,
                         library: Sequence[str], cache: str,
                         starting: Callable[[str, str], None] | None = None, *,
                         labels: Sequence[str] | None = None,
                         before_turn: Callable[[str], None] | None = None) -> dict[str, dict[str, Any]]:
    """Time every plugin, each in a process of its own, with their timed blocks in turns.

    The processes are set up one after another (compiles and first results are timed with
    nothing else running), each waiting once it is ready. Then, round by round and program by
    program (the tiny add first), each process in turn runs its block of that program's runs
    while the others wait on their stdin, the turns in the opposite order every other round.
    A shared host's speed drifts within seconds, in numpy's BLAS as in every plugin's
    (docs/measurements.md, "The host's drift"). Blocks of one program that follow one another
    get the same stretch of it, where whole rounds of one plugin (seconds each) got different
    ones, and a ratio of two plugins' times moved with it from one bench to the next.

    The results are keyed by ``labels`` (default: the plugins' names), one per entry of
    ``plugins``, so that one plugin can be timed by two processes (quiet and loaded, in
    ``--under-load``); ``starting(program, label)`` hears what each one starts (and each of
    its rounds), and ``before_turn(label)`` runs before each of its blocks."""
    keys = list(plugins if labels is None else labels)
    if len(keys) != len(plugins) or len(set(keys)) != len(keys):
        raise ValueError(f"one distinct label per process: {keys} for {list(plugins)}")
    plugin_of = dict(zip(keys, plugins))
    children: dict[str, _Child] = {}
    results: dict[str, dict[str, Any]] = {}
    try:
        ready: list[str] = []
        for key in keys:
            def said(program: str, label: str = key) -> None:
                if starting is not None:
                    starting(program, label)

            child = children[key] = _Child("--measure-rounds", plugin_of[key], programs, runs, library, cache, said)
            if child.ask("ready") == "ready":
                ready.append(key)
        for round_ in range(ROUNDS):
            turns = ready if round_ % 2 == 0 else ready[::-1]
            for block in range(1 + len(programs)):  # the tiny add, then each program
                for name in list(turns):
                    if name not in ready:
                        continue
                    if before_turn is not None:
                        before_turn(name)
                    if starting is not None:  # a round counts as a step once, at its tiny add
                        starting(f"{_ROUND}{round_ + 1} of {ROUNDS}" if block == 0 else
                                 f"{_TIMING}{programs[block - 1]}, round {round_ + 1} of {ROUNDS}", name)
                    command = f"block {round_} {block}"
                    answer = children[name].ask(command)
                    if answer != f"done {round_} {block}":
                        ready.remove(name)
                        if answer is not None:  # alive, but not answering as it should: never a
                            children[name].kill()  # partial measurement passed off as a whole one
                            results[name] = children[name].failed(f"answered {answer!r} to {command!r}")
        for name, child in children.items():
            if name not in results:
                results[name] = child.result()
    finally:
        for name, child in children.items():
            if name not in results:
                child.kill()
    return {name: results[name] for name in children}


def bench(registry: Any, plugins: Sequence[str], programs: Iterable[str] | None = None, *,
          warm: bool = True, library: Sequence[str] = (), runs: int | None = None,
          progress: Progress | None = None, suite: str = "perf",
          fastest_of: Sequence[str] = (), spread: int = 0, under_load: int = 0,
          own_sessions: bool = False) -> dict[str, Any]:
    """Run a suite (``perf`` or ``corpus``) on ``plugins``; return the report as a JSON-able dict.

    ``spread=N`` (N >= 2) times the programs in N fresh processes per plugin and adds the
    report's ``spread``; ``under_load=K`` (K >= 1) times them quiet and with K busy neighbour
    processes (each in a session of its own with ``own_sessions``) and adds ``under_load``
    (:mod:`pjrt_hub._bench_stability`). Their ``programs`` rows
    are the first (quiet) process's, without the warm-cache compile.

    ``registry`` has judged the plugins already (the caller requires them loaded); each one is
    then measured in a fresh process that shares one compile cache, empty at the start (cold),
    and removed at the end. ``progress`` hears which program runs on which plugin. The summary
    compares the first plugin with each other one, and with the fastest of ``fastest_of``
    (the real XLA plugins) program by program.
    """
    entries = [p for p in bench_programs(suite) if programs is None or p.name in set(programs)]
    names = [e.name for e in entries]
    total = (len(entries) + ROUNDS) * len(plugins)  # each program set up, then each timed round
    done = 0
    rows: list[dict[str, Any]] = []
    tiny: dict[str, float] = {}
    extra: dict[str, Any] = {}
    machine = None
    if "numba_cpu" in plugins:
        from pjrt_hub.backends.numba_cpu.machine_kernels import ensure_built

        if progress is not None:
            progress(0, total, "numba_cpu's machine kernels (built once per machine)")
        machine = ensure_built()
    with tempfile.TemporaryDirectory(prefix="pjrt-hub-bench-") as cache:
        if spread or under_load:
            rows, extra = _stability(plugins, names, spread, under_load, runs, library, cache, progress,
                                     own_sessions, fastest_of)

        def starting(program: str, plugin: str) -> None:
            nonlocal done
            if progress is not None:
                progress(done, total, f"{program} on {plugin}")
            if program in names or program.startswith(_ROUND):
                done += 1

        measured_by = _measure_interleaved(plugins, names, runs, library, cache, starting) if not extra else {}
        done = total  # also when a child ended early
        for name, measured in measured_by.items():
            if measured["tiny_us"] is not None:
                tiny[name] = measured["tiny_us"]
            for row in measured["rows"]:
                if warm and "error" not in row:
                    if progress is not None:
                        progress(done, total, f"{row['name']} on {name}: warm-cache compile")
                    warm_run = _warm_first_result(name, row["name"], cache, library)
                    row["compile_ms_warm"] = None if warm_run is None else warm_run["compile_ms"]
                    row["first_result_ms_warm"] = None if warm_run is None else warm_run["first_result_ms"]
                rows.append(row)
    rows.sort(key=lambda r: (names.index(r["name"]), list(plugins).index(r["plugin"])))
    _add_ratios(rows)
    return {"programs": rows, "tiny_execute_us": tiny.get(plugins[0]) if plugins else None,
            "tiny_execute_us_by_plugin": tiny, "plugins": list(plugins), "suite": suite,
            "summary": summarise(rows, plugins, fastest_of),
            "machine_kernels": machine, **extra}


def _stability(plugins: Sequence[str], names: Sequence[str], spread: int, under_load: int,
               runs: int | None, library: Sequence[str], cache: str, progress: Progress | None,
               own_sessions: bool = False, fastest_of: Sequence[str] = ()) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """``--spread`` / ``--under-load``: the first process's rows and the report section(s)."""
    from pjrt_hub import _bench_stability as stability

    def say(done: int, total: int, message: str) -> None:
        if progress is not None:
            progress(done, total, message)

    if spread:
        rows, table, ratios = stability.spread(plugins, names, spread, runs=runs, library=library, cache=cache,
                                               say=say, fastest_of=fastest_of)
        return rows, {"spread": table, "spread_ratios": ratios}
    rows, table = stability.under_load(plugins, names, under_load, runs=runs, library=library, cache=cache,
                                       say=say, own_sessions=own_sessions)
    return rows, {"under_load": {"neighbours": under_load, "ceiling": stability.LOAD_CEILING, "rows": table,
                                 "own_sessions": own_sessions, "autogroup": stability.autogroup_enabled(),
                                 "cores": stability.usable_cores()}}


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


def _geomean(values: Sequence[float]) -> float:
    return math.exp(sum(math.log(v) for v in values) / len(values))


def _compare(pairs: Sequence[tuple[str, float, float]]) -> dict[str, Any] | None:
    """Geometric mean and worst program of ``mine / theirs`` over ``(program, mine, theirs)``."""
    ratios = [(name, mine / theirs) for name, mine, theirs in pairs if mine > 0 and theirs > 0]
    if not ratios:
        return None
    worst = max(ratios, key=lambda r: r[1])
    return {"geomean": _geomean([r for _, r in ratios]), "worst": {"name": worst[0], "ratio": worst[1]},
            "programs": len(ratios)}


def summarise(rows: Sequence[dict[str, Any]], plugins: Sequence[str],
              fastest_of: Sequence[str] = ()) -> dict[str, Any]:
    """The first plugin's execute time over each other plugin's, as the geometric mean over the
    programs both ran with matching outputs, and the worst program; ``vs_fastest`` compares with
    whichever of ``fastest_of`` was faster on each program, ``first_result_vs_fastest`` the
    first plugin's cold first result (compile, one execute, the copy out) with the faster one's
    own, measured alike in the same run, and ``first_calls_vs_fastest`` the executes right after
    it (:meth:`_Loaded.first_calls`) likewise."""
    if not plugins:
        return {"subject": None, "vs": {}, "vs_fastest": None, "first_result_vs_fastest": None,
                "first_calls_vs_fastest": None}
    subject = plugins[0]
    times: dict[str, dict[str, float]] = {}
    firsts: dict[str, dict[str, float]] = {}
    early: dict[str, dict[str, float]] = {}
    for row in rows:
        if row.get("execute_ms_median") and row.get("outputs_match"):
            times.setdefault(row["plugin"], {})[row["name"]] = row["execute_ms_median"]
            if row.get("first_result_ms_cold"):
                firsts.setdefault(row["plugin"], {})[row["name"]] = row["first_result_ms_cold"]
            if row.get("first_calls_ms_mean"):
                early.setdefault(row["plugin"], {})[row["name"]] = row["first_calls_ms_mean"]
    mine = times.get(subject, {})
    vs: dict[str, Any] = {}
    for other in plugins[1:]:
        theirs = times.get(other, {})
        compared = _compare([(n, ms, theirs[n]) for n, ms in mine.items() if n in theirs])
        if compared is not None:
            vs[other] = compared
    pool = [p for p in fastest_of if p in times and p != subject]
    return {"subject": subject, "vs": vs, "vs_fastest": _compare_fastest(times, subject, pool),
            "first_result_vs_fastest": _compare_fastest(firsts, subject, pool),
            "first_calls_vs_fastest": _compare_fastest(early, subject, pool)}


def _compare_fastest(values: dict[str, dict[str, float]], subject: str, pool: Sequence[str]) -> dict[str, Any] | None:
    """``subject``'s values over the smallest of ``pool``'s, program by program (see _compare)."""
    if not pool:
        return None
    pairs = []
    for n, ms in values.get(subject, {}).items():
        best = [values[p][n] for p in pool if n in values.get(p, {})]
        if best:
            pairs.append((n, ms, min(best)))
    compared = _compare(pairs)
    if compared is not None:
        compared["of"] = list(pool)
    return compared


def _time_text(ms: float) -> str:
    return f"{ms * 1e3:.1f} us" if ms < 1 else f"{ms:.2f} ms"


def format_summary(summary: dict[str, Any] | None) -> list[str]:
    """Lines for the end of the table: the geometric means of the time ratios."""
    if not summary or not summary.get("subject"):
        return []
    subject = summary["subject"]
    lines = []
    for other, c in summary["vs"].items():
        lines.append(f"{subject} / {other}: geometric mean {c['geomean']:.3f}x (so {other} / {subject} "
                     f"{1 / c['geomean']:.2f}x) over {c['programs']} programs; worst {c['worst']['name']} "
                     f"{c['worst']['ratio']:.2f}x")
    fastest = summary.get("vs_fastest")
    if fastest:
        lines.append(f"{subject} / fastest of {', '.join(fastest['of'])}: geometric mean {fastest['geomean']:.3f}x "
                     f"over {fastest['programs']} programs; worst {fastest['worst']['name']} "
                     f"{fastest['worst']['ratio']:.2f}x")
    first = summary.get("first_result_vs_fastest")
    if first:
        lines.append(f"{subject} first result (cold) / the faster of {', '.join(first['of'])}'s own: geometric mean "
                     f"{first['geomean']:.3f}x over {first['programs']} programs; worst {first['worst']['name']} "
                     f"{first['worst']['ratio']:.2f}x")
    early = summary.get("first_calls_vs_fastest")
    if early:
        lines.append(f"{subject} first {FIRST_CALLS} executes (no waiting for a faster tier) / the faster of "
                     f"{', '.join(early['of'])}'s: geometric mean {early['geomean']:.3f}x over {early['programs']} "
                     f"programs; worst {early['worst']['name']} {early['worst']['ratio']:.2f}x")
    return lines


def _format_row(row: dict[str, Any]) -> str:
    if "error" in row:
        return f"{row['name']} on {row['plugin']}: error: {row['error']}"
    warm = row.get("compile_ms_warm")
    return (f"{row['name']} on {row['plugin']}: execute {row['execute_ms_median']:.2f} ms (median of "
            f"{row['runs']}), compile cold {row['compile_ms_cold']:.0f} ms, warm "
            f"{'-' if warm is None else f'{warm:.1f}'} ms, first result cold "
            f"{_ms(row.get('first_result_ms_cold'))} ms, first calls {_ms(row.get('first_calls_ms_mean'), 2)} ms, outputs {'match' if row['outputs_match'] else 'DIFFER'}")


def _ms(value: float | None, digits: int = 0) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def format_report(report: dict[str, Any]) -> str:
    plugins = report["plugins"]
    head = ["program", *plugins]
    ratio_cols = [(a, b) for a in plugins[:1] for b in plugins[1:]]
    head += [f"{a} speedup vs {b}" for a, b in ratio_cols] + ["compile cold/warm ms (" + plugins[0] + ")",
                                                              "XLA:CPU (manifest)"]
    head += [f"first result cold/warm ms ({plugins[0]})", f"first calls ({plugins[0]})", "XLA:CPU compile ms"]
    table = [head]
    for name in dict.fromkeys(r["name"] for r in report["programs"]):
        rows = {r["plugin"]: r for r in report["programs"] if r["name"] == name}
        cells = [name]
        for p in plugins:
            r = rows.get(p, {})
            cells.append(_time_text(r["execute_ms_median"]) if "execute_ms_median" in r else "error")
        for a, b in ratio_cols:
            ratio = rows.get(a, {}).get(f"speedup_vs_{b}")
            cells.append("-" if ratio is None else f"{ratio:.2f}x")
        first = rows.get(plugins[0], {})
        cold, warm = first.get("compile_ms_cold"), first.get("compile_ms_warm")
        cells.append(f"{'-' if cold is None else f'{cold:.0f}'} / {'-' if warm is None else f'{warm:.1f}'}")
        base = first.get("xla_cpu_baseline_ms")
        cells.append("-" if base is None else _time_text(base))
        cells.append(f"{_ms(first.get('first_result_ms_cold'))} / {_ms(first.get('first_result_ms_warm'))}")
        early = first.get("first_calls_ms_mean")
        cells.append("-" if early is None else _time_text(early))
        cells.append(_ms(first.get("xla_cpu_compile_ms"), 1))
        table.append(cells)
    widths = [max(len(row[i]) for row in table) for i in range(len(head))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in table]
    bad = [f"{r['name']} on {r['plugin']}" for r in report["programs"]
           if "error" not in r and r.get("outputs_match") is False]
    if bad:
        lines.append(f"outputs DIFFER from the expected ones: {', '.join(bad)}")
    lines.append("")
    lines += [f"tiny add execute: {p} {us:.2f} us" for p, us in report["tiny_execute_us_by_plugin"].items()]
    if report.get("machine_kernels"):
        lines.append(f"numba_cpu machine kernels: {report['machine_kernels']}")
    lines += format_summary(report.get("summary"))
    return "\n".join(lines)


def _child_registry(library: Sequence[str]) -> Any:
    from pjrt_hub._registry import PluginRegistry

    return PluginRegistry.from_environment(paths=tuple(library))


def _measure_main(argv: Sequence[str], driven: bool = False) -> int:
    """Child of :func:`_measure_in_child`: time one plugin, print the result as JSON.

    ``driven`` (``--measure-rounds``, :func:`_measure_interleaved`): set up, then answer the
    lines of stdin: ``ready`` with ``ready``, ``block K B`` by running block B of round K
    (:meth:`_Session.run_block`) and answering ``done K B``; at the end of stdin, print the
    result."""
    plugin, programs, runs, *library = argv
    client = _child_registry(library).create_client(plugin)
    entries = [_program_named(n) for n in programs.split(",") if n]

    def say(message: str) -> None:
        print(message, file=sys.stderr, flush=True)

    if not driven:
        result = _measure(client, plugin, entries, int(runs) or None, say)
    else:
        session = _Session(client, plugin, entries, int(runs) or None, say)
        for line in sys.stdin:
            command = line.split()
            if command == ["ready"]:
                print(f"{_ANSWER}ready", flush=True)
            elif (len(command) == 3 and command[0] == "block" and command[1].isdigit() and command[2].isdigit()
                  and int(command[1]) < ROUNDS and int(command[2]) < len(session.blocks)):
                session.run_block(int(command[1]), int(command[2]))
                print(f"{_ANSWER}done {command[1]} {command[2]}", flush=True)
            else:
                raise SystemExit(f"pjrt_hub._bench: unknown command {line.strip()!r}")
        result = session.result()
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
    program = _program_named(name)
    loaded = _Loaded(client, program.text(), program.inputs())
    print(json.dumps({"compile_ms": loaded.compile_ms, "first_result_ms": loaded.first_result_ms}))
    loaded.close()
    return 0


if __name__ == "__main__":
    if sys.argv[1:2] == ["--warm-compile"]:
        sys.exit(_warm_compile_main(sys.argv[2:]))
    if sys.argv[1:2] == ["--measure"]:
        sys.exit(_measure_main(sys.argv[2:]))
    if sys.argv[1:2] == ["--measure-rounds"]:
        sys.exit(_measure_main(sys.argv[2:], driven=True))
    raise SystemExit("usage: python -m pjrt_hub._bench --measure|--measure-rounds PLUGIN PROGRAMS RUNS "
                     "[LIBRARY...] | "
                     "--warm-compile PLUGIN PROGRAM_NAME [LIBRARY...]")
