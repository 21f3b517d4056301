"""Tiered execution: a program's first results come from the eager numpy tier, and it switches
to its numba-compiled code once a background compile has produced it.

Why tiers. numba takes half a second to import and then seconds (tens on a loaded machine) to
compile a program, where XLA:CPU takes a small fraction of that; a first ``pjrt-hub run`` waited
for all of it. Most of that time is numba's type inference and LLVM, so no reorganisation of
the generated code brings it near XLA's. Instead, a program is first planned for
:mod:`.eager`, which runs it op by op with numpy and needs no compilation: its first result
comes in milliseconds. The compiled code is still what makes repeated executions fast, so:

* **When.** The background compile starts once a program has run ``compile_after`` times on
  the eager tier (one by default): a program run once, as by ``pjrt-hub run``, never pays for
  numba; one run again is compiled while it keeps running eagerly. ``wait_compiled()`` (what
  ``bench`` uses before timing steady state), ``serialize()`` and ``source`` start it at once.
* **Where.** numba compiles in a child process (``python -m ...numba_cpu._compile_worker``, at
  this process's priority: the user's loop is waiting for it), one per Python process, reused
  for every program, which writes the compiled module to the disk cache; this process then
  only loads it from there. Compiling in
  a thread of this process would hold the GIL through numba's type inference and slow the
  eager runs down by half on two cores; the child also keeps a numba crash out of the user's
  process and can simply be killed. If no child can be started, the compile runs in the worker
  thread instead.
* **A loop.** Once a program has run :data:`LOOP_RUNS` more times on the eager tier while its
  compile is under way, taking :data:`LOOP_EAGER_S` in all, it is run in a loop whose eager runs
  cost, and the user is waiting for the compiled code. The next run (not one that can be
  cancelled) compiles the program itself, in the user's thread, if the child has not begun it,
  with the child paused meanwhile: the child's start-up and a second import of numba would make
  the wait half as long again as a plain compile, more on a busy machine. If the child has begun
  it, the run waits for it (up to :data:`LOOP_WAIT_S`, once), and this process imports numba
  meanwhile. So that a loop finds its program not yet begun, the compile process is started
  :data:`SPAWN_DELAY_S` after the first job asks for it.
* **Switch.** When the compiled program is loaded, the next ``run`` uses it. Both tiers give
  the same bits (:mod:`.eager` says how), so the switch is invisible but for speed. If the
  compile fails, the program stays on the eager tier, with one warning.
* **Exit.** The worker thread is a daemon that ends when its queue is empty; at interpreter
  exit the child is killed and the thread joined (it finishes at most the load it is in, a
  fraction of a second), so nothing hangs and no thread or process outlives its owner.
"""

from __future__ import annotations

import atexit
import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
import warnings
from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence

import numpy as np

from pjrt_hub.abi import CompileError, InvalidArgument
from pjrt_hub.backends.cpu_runtime.compiler import TensorSpec

from .eager import EagerProgram, NeedsCompiled, Overtaken

if TYPE_CHECKING:
    from .compiler import NumbaCompiler, NumbaProgram

__all__ = ["EAGER_BUDGET", "TieredProgram", "settle", "shutdown"]

#: Element operations (see :func:`.eager.estimate_cost`) above which a program is compiled at
#: once rather than on its second run: some 50-100 ms of numpy on a laptop-class core.
EAGER_BUDGET = 3e7
#: Above this (about a second of numpy), a program whose compiled code is in the disk cache is
#: loaded at once even though that imports numba: the eager run would take longer.
LOAD_RATHER_THAN_EAGER = 4e8


#: Eager runs after the one that started the background compile; the next waits for the compile
#: in the foreground: the program is run in a loop, whose eager runs would share the cores with
#: the compile (on a busy machine, they slowed it two to three times).
LOOP_RUNS = 3
#: ...and once those runs have taken this many seconds: a program whose eager runs cost
#: milliseconds (a fold_in of a key) goes on eagerly rather than stall a short loop for a compile.
#: A loop's compiled code then comes at most this much later than a plain compile's.
LOOP_EAGER_S = 0.05
#: Seconds a job waits before it starts the compile process (when none is running): a loop
#: takes it in that time, and the child's start-up would only take the cores from it.
SPAWN_DELAY_S = 0.2
#: How long such a run waits for the compile: past it (a compile that hangs), the loop goes on
#: eagerly and does not wait again.
LOOP_WAIT_S = 300.0
#: Seconds the worker waits for a moment without eager runs before the first load imports numba
#: anyway: a user's loop of eager runs has no such moment, and it waits for the compiled code.
LOAD_WAIT_S = 0.5


class _EagerRuns:
    """How many eager runs are in progress in this process. The first load of compiled code
    imports numba, half a second of work that holds the GIL in long stretches: an eager run
    sharing it with that waits up to a switch interval for every numpy call, so the worker
    waits for a moment without eager runs before that import, for :data:`LOAD_WAIT_S` at most."""

    def __init__(self) -> None:
        self.count = 0
        self.idle = threading.Condition()

    def __enter__(self) -> None:
        with self.idle:
            self.count += 1

    def __exit__(self, *exc: object) -> None:
        with self.idle:
            self.count -= 1
            if self.count == 0:
                self.idle.notify_all()

    def wait_idle(self, stop: Callable[[], bool], limit: float) -> None:
        deadline = time.monotonic() + limit
        with self.idle:
            while self.count and not stop():
                left = deadline - time.monotonic()
                if left <= 0:
                    return
                self.idle.wait(min(left, 0.1))


_EAGER_RUNS = _EagerRuns()


def _dtype_from_name(name: str) -> np.dtype:
    from .compiler import dtype_from_name as convert

    return convert(name)


class _Job:
    """The background compile of one program; ``done`` is set when it has an outcome."""

    def __init__(self, compiler: "NumbaCompiler", text: str, lopts: Any, text_key: str, name: str,
                 inputs: Sequence[TensorSpec] = ()) -> None:
        self.compiler = compiler
        self.text = text
        self.lopts = lopts
        self.text_key = text_key
        self.name = name
        #: The program's parameters, for the inputs of the command that reproduces a failure.
        self.inputs = tuple(inputs)
        self.done = threading.Event()
        self.program: NumbaProgram | None = None
        self.error: Exception | None = None
        self.started = False
        #: Who compiles it, once decided: "worker" (the child, or the worker thread) or
        #: "foreground" (a loop's run that waits for it, see _Background.compile_here).
        self.owner: str | None = None
        #: Set when it has an owner.
        self.claimed = threading.Event()
        #: The background compiler it was submitted to.
        self.background: _Background | None = None
        #: Load as soon as compiled, even during eager runs (the eager run is the slower).
        self.eager_slower = False
        #: A caller is waiting for the compiled code (see TieredProgram._start).
        self.waited_for = False


class TieredProgram:
    """A program running on the eager tier until its compiled code is loaded: the
    ``CompiledProgram`` of :mod:`pjrt_hub.backends.cpu_runtime`, like :class:`.NumbaProgram`."""

    def __init__(self, compiler: "NumbaCompiler", meta: Mapping[str, Any], eager: EagerProgram, text: str,
                 lopts: Any, text_key: str) -> None:
        self.name: str = meta["name"]
        #: A hash of the program text and the lowering options (the compiled module's
        #: fingerprint hashes the generated code, which is not known yet).
        self.fingerprint = text_key[:32]
        self.inputs = tuple(TensorSpec(tuple(s), _dtype_from_name(d)) for s, d in meta["inputs"])
        self.outputs = tuple(TensorSpec(tuple(s), _dtype_from_name(d)) for s, d in meta["outputs"])
        self.aliases: Mapping[int, int] = {int(k): int(v) for k, v in meta["aliases"].items()}
        self.num_replicas = int(meta["num_replicas"])
        self.num_partitions = int(meta["num_partitions"])
        self.uses_collectives = bool(meta["uses_collectives"])
        self.cancellable = bool(meta["cancellable"])
        self.unbounded_loops = bool(meta["unbounded_loops"])
        #: Both tiers return new arrays of the declared types, never an input, a constant or one
        #: array twice (see ``fresh_results`` in the runtime's compiler protocol); programs with
        #: collectives never get here.
        self.fresh_results = True
        self._cost = dict(meta["cost"])
        self._eager = eager
        self._compile_after = compiler.compile_after
        self._job = _Job(compiler, text, lopts, text_key, self.name, self.inputs)
        self._compiled: NumbaProgram | None = None
        #: A run has waited for the compile as a loop's (see run); no run waits again.
        self._loop_waited = False
        #: Seconds of eager runs since the background compile started.
        self._eager_seconds = 0.0
        self._lock = threading.Lock()
        self._narrow_out = tuple(i for i, s in enumerate(self.outputs) if s.dtype.itemsize == 2 and s.dtype.kind in "fV")
        #: Calls of :meth:`run` answered by each tier (for tests).
        self.runs = {"eager": 0, "compiled": 0}
        #: A program the eager tier runs slowly (large arrays, many transcendentals) is compiled
        #: after its first run (see begin), and its eager runs give way to the compiled code as
        #: soon as it is loaded.
        self.large = eager.cost > EAGER_BUDGET
        #: Importing numba and loading the compiled code would answer sooner than the eager tier.
        self.slower_than_loading = eager.cost > LOAD_RATHER_THAN_EAGER
        self._job.eager_slower = self.slower_than_loading

    def begin(self) -> "TieredProgram":
        """Start the background compile now if this program's runs will not wait for it: one
        whose eager run would take longer than importing numba and loading compiled code
        (:data:`LOAD_RATHER_THAN_EAGER`), not in the disk cache, starts compiling at once. Other
        large programs start once their first eager run is over: the eager tier runs large
        arrays on both cores (row segments, machine kernels), which the child's import of numba
        and its compile would take from that run; the compiled code comes that much later, a
        fraction of a compile's seconds. A large program in the disk cache is loaded when it
        runs again (loading imports numba into this process)."""
        if self._compile_after == 0 or (self.slower_than_loading and not self._job.compiler.cached(self._job.text_key)):
            self._start()
        return self

    # -- tiers --

    @property
    def tier(self) -> str:
        """``"compiled"`` once the compiled code runs this program, else ``"eager"``."""
        return "compiled" if self._ready() is not None else "eager"

    def _ready(self) -> "NumbaProgram | None":
        compiled = self._compiled
        if compiled is None and self._job.program is not None:
            compiled = self._compiled = self._job.program
        return compiled

    def _start(self, waited_for: bool = False) -> None:
        """Submit the background compile; ``waited_for``: a caller waits for its result (a
        program run again, or wait_compiled), so numba is imported here while the child
        compiles, and the compiled code is loaded the moment it is ready."""
        with self._lock:
            self._job.waited_for = self._job.waited_for or waited_for
            if self._job.started:
                return
            self._job.started = True
        _background().submit(self._job)

    def wait_compiled(self, timeout: float | None = None) -> "NumbaProgram":
        """The compiled program, starting its compile if needed and waiting for it; raises
        CompileError if numba could not compile it, TimeoutError after ``timeout`` seconds."""
        self._start(waited_for=True)
        if not self._job.done.wait(timeout):
            raise TimeoutError(f"numba_cpu: {self.name} is still compiling after {timeout} s")
        if self._job.error is not None:
            raise self._job.error
        compiled = self._ready()
        assert compiled is not None
        return compiled

    def _overtaken(self) -> bool:
        job = self._job
        return job.done.is_set() and job.program is not None

    # -- running --

    def direct_entry(self) -> Callable[..., tuple[np.ndarray, ...]] | None:
        """The compiled program's direct entry once it is loaded, else None (see
        ``direct_entry`` in the runtime's compiler protocol). Its calls are not counted in
        :attr:`runs`."""
        compiled = self._ready()
        return None if compiled is None else compiled.direct_entry()

    def run(self, args: Sequence[np.ndarray], out: Sequence[np.ndarray | None] | None = None, *,
            cancel: np.ndarray | None = None) -> list[np.ndarray]:
        compiled = self._compiled
        if compiled is None:
            compiled = self._ready()
        if compiled is not None:
            self.runs["compiled"] += 1
            if compiled._plain and out is None and cancel is None:
                # NumbaProgram.run's own first step, without its frame: most of a tiny run.
                try:
                    return list(compiled._entry(*args, *compiled._plain_extra))
                except TypeError:
                    pass  # arguments the entry does not take as they are: run() coerces them
            if cancel is None:
                return compiled.run(args, out)
            return compiled.run(args, out, cancel=cancel)
        if len(args) != len(self.inputs):
            raise InvalidArgument(f"{self.name}: expected {len(self.inputs)} arguments, got {len(args)}")
        if self.runs["eager"] >= self._compile_after and not self._job.started:
            # Run again: worth compiling (in the background; this run stays eager).
            self._start(waited_for=True)
        elif (cancel is None and not self._loop_waited and self.runs["eager"] >= self._compile_after + LOOP_RUNS
              and self._eager_seconds >= LOOP_EAGER_S and self._job.started and not self._job.done.is_set()):
            # A loop: its eager runs would take the cores from the compile it waits for. It
            # compiles the program itself if the worker has not begun to.
            self._loop_waited = True
            if self._job.background is not None:
                self._job.background.compile_here(self._job)
            try:
                compiled = self.wait_compiled(LOOP_WAIT_S)
            except (CompileError, TimeoutError):
                pass  # a failure is reported once by the worker; the eager tier goes on
            else:
                self.runs["compiled"] += 1
                return compiled.run(args, out)
        started = time.perf_counter()
        try:
            with _EAGER_RUNS:
                results = self._eager.run(args, cancel, self._overtaken if self.large else None)
        except (NeedsCompiled, Overtaken):
            # This input needs the compiled code (see .eager), or it is ready: wait for it.
            self.runs["compiled"] += 1
            return self.wait_compiled().run(args, out, cancel=cancel)
        self.runs["eager"] += 1
        if self._job.started:
            self._eager_seconds += time.perf_counter() - started
        if self.large and not self._job.started and not self._job.compiler.cached(self._job.text_key):
            # Compiling is the child's work, and killed at exit; loading a cached program would
            # import numba here, which a process that ran it once (pjrt-hub run) would then
            # wait for at exit: that waits for a second run (compile_after).
            self._start()
        for i in self._narrow_out:
            results[i] = results[i].view(self.outputs[i].dtype)
        if out is None:
            return results
        for i, o in enumerate(out):
            if o is not None:
                np.copyto(o, results[i])
                results[i] = o
        return results

    # -- introspection --

    def cost_analysis(self) -> Mapping[str, float]:
        return dict(self._cost)

    @property
    def source(self) -> str:
        """The generated module (compiles it if it is not yet)."""
        return self.wait_compiled().source

    def serialize(self) -> bytes:
        return self.wait_compiled().serialize()

    def __repr__(self) -> str:
        return f"<TieredProgram {self.name} {self.fingerprint[:12]} ({self.tier})>"


# -- the background compiler --------------------------------------------------------------------


class _Taken(Exception):
    """The job was taken by a run that compiles it in the foreground (see compile_here)."""


class _Background:
    """One worker thread and one compile process for this Python process, started on demand."""

    #: Seconds the worker thread waits for more work before ending (and ending the child).
    IDLE = 5.0

    def __init__(self) -> None:
        self._queue: queue.Queue[_Job | None] = queue.Queue()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._child: subprocess.Popen | None = None
        #: The child has imported numba and said so (see _compile_worker).
        self._child_ready = False
        self._stopping = False
        self._warned = False
        #: Jobs submitted and not done yet (settle waits for none).
        self._pending = 0
        self._settled = threading.Condition(self._lock)

    def submit(self, job: _Job) -> None:
        with self._lock:
            if self._stopping:
                job.error = CompileError("numba_cpu: the process is exiting")
                job.done.set()
                return
            job.background = self
            self._queue.put(job)
            self._pending += 1
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._work, name="pjrt-hub-numba-compile", daemon=True)
                self._thread.start()

    # -- the worker thread --

    def _work(self) -> None:
        while True:
            try:
                job = self._queue.get(timeout=self.IDLE)
            except queue.Empty:
                with self._lock:
                    if self._queue.empty():
                        self._thread = None
                        self._end_child()
                        return
                continue
            if job is None:  # stop() wakes the thread up
                return
            if self._stopping:
                self._fail_unowned(job)
                continue
            try:
                job.program = self._compile(job)
            except _Taken:
                continue  # the run that took it completes it
            except Exception as exc:  # noqa: BLE001 - the program stays on the eager tier
                if not self._claim(job, "worker"):
                    continue  # taken while the child was starting, before this failure
                try:
                    self._failed(job, exc)
                finally:
                    self._complete(job)
                continue
            self._complete(job)

    def _claim(self, job: _Job, owner: str) -> bool:
        """Make ``owner`` the one that compiles ``job``, unless another already is."""
        with self._lock:
            if job.owner is None:
                job.owner = owner
                job.claimed.set()
            return job.owner == owner

    def _take(self, job: _Job) -> None:
        """The worker's claim on ``job``, before it begins the work; raises _Taken if a run has it."""
        if not self._claim(job, "worker"):
            raise _Taken

    def _complete(self, job: _Job) -> None:
        job.done.set()
        with self._lock:
            self._pending -= 1
            self._settled.notify_all()

    def _failed(self, job: _Job, exc: Exception) -> None:
        job.error = exc if isinstance(exc, CompileError) else CompileError(
            f"numba_cpu: compiling {job.name} failed: {type(exc).__name__}: {exc}")
        self._warn(job)

    def _fail_unowned(self, job: _Job) -> None:
        """Fail a job nobody has begun, as the process is exiting."""
        if self._claim(job, "stop"):
            job.error = CompileError("numba_cpu: the process is exiting")
            self._complete(job)

    def compile_here(self, job: _Job) -> bool:
        """Compile ``job`` in the calling thread, unless the worker has begun it: a run of a
        loop that waits for the compiled code. In the child, that code would come after the
        child's start-up and a second import of numba, here, which on a busy machine cost about
        as much again as the compile; and the user's thread has nothing else to do. The child
        is paused meanwhile, so that its start-up or another program's compile does not take
        the cores from this one. False (nothing done) when the worker has the job."""
        with self._lock:
            if self._stopping or job.owner is not None or job.done.is_set():
                return False
            job.owner = "foreground"
            job.claimed.set()
            child = self._child if self._child is not None and self._child.poll() is None else None
        paused = child if child is not None and _signal(child, "SIGSTOP") else None
        try:
            job.program = job.compiler.compile_to_cache(job.text, job.lopts, job.text_key)
        except Exception as exc:  # noqa: BLE001 - the program stays on the eager tier
            self._failed(job, exc)
        finally:
            if paused is not None:
                _signal(paused, "SIGCONT")
            self._complete(job)
        return True

    def settle(self, timeout: float | None) -> bool:
        """Wait until every submitted job has its outcome; False after ``timeout`` seconds."""
        with self._lock:
            return self._settled.wait_for(lambda: self._pending <= 0, timeout)

    def _load(self, job: _Job) -> "NumbaProgram | None":
        from .compiler import numba_loaded

        if not numba_loaded() and not job.eager_slower:
            _EAGER_RUNS.wait_idle(lambda: self._stopping, LOAD_WAIT_S)
        if self._stopping:
            raise CompileError("numba_cpu: the process is exiting")
        return job.compiler.load_cached(job.text_key)

    def _compile(self, job: _Job) -> "NumbaProgram":
        compiler = job.compiler
        if compiler.cached(job.text_key):
            self._take(job)
            program = self._load(job)
            if program is not None:
                return program
        if not self._compile_in_child(job):
            self._take(job)
            return compiler.compile_to_cache(job.text, job.lopts, job.text_key)
        program = self._load(job)
        if program is None:
            raise CompileError(f"numba_cpu: the compiled code of {job.name} is not in the cache after compiling it")
        return program

    def _compile_in_child(self, job: _Job) -> bool:
        """Compile in the child process; False when there is none to be had."""
        with self._lock:
            running = self._child is not None and self._child.poll() is None
        if not running and job.claimed.wait(SPAWN_DELAY_S) and job.owner != "worker":
            raise _Taken
        child = self._ensure_child()
        if child is None:
            return False
        from dataclasses import asdict

        request = {"cache_dir": str(job.compiler.cache_dir), "text": job.text, "options": asdict(job.lopts),
                   "text_key": job.text_key}
        try:
            assert child.stdin is not None and child.stdout is not None
            if not self._child_ready:
                self._child_ready = bool(child.stdout.readline())
                if not self._child_ready:
                    raise OSError("the compile process ended while starting")
            self._take(job)
            child.stdin.write(json.dumps(request) + "\n")
            child.stdin.flush()
            if job.waited_for and not self._stopping:
                _import_numba()
            line = child.stdout.readline()
        except (OSError, ValueError):
            line = ""
        if not line:
            with self._lock:
                self._end_child()
            if self._stopping:
                raise CompileError("numba_cpu: the process is exiting")
            raise CompileError(f"numba_cpu: the background compile process ended while compiling {job.name}")
        reply = json.loads(line)
        if "error" in reply:
            raise CompileError(reply["error"])
        return True

    def _ensure_child(self) -> subprocess.Popen | None:
        with self._lock:
            if self._stopping:
                return None
            if self._child is not None and self._child.poll() is None:
                return self._child
            self._child_ready = False
            try:
                self._child = subprocess.Popen(
                    [sys.executable, "-m", "pjrt_hub.backends.numba_cpu._compile_worker"],
                    stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                    env=dict(os.environ, PJRT_HUB_NUMBA_TIERS="0"))
            except OSError:
                self._child = None
            return self._child

    def _end_child(self) -> None:
        child, self._child = self._child, None
        if child is None:
            return
        try:
            if child.stdin is not None:
                child.stdin.close()
        except OSError:
            pass
        if child.poll() is None:
            child.kill()
        try:
            child.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass
        for stream in (child.stdout,):
            try:
                if stream is not None:
                    stream.close()
            except OSError:
                pass

    def _warn(self, job: _Job) -> None:
        """Report a failed compile once, as one line: what failed, and the command that
        reproduces it on the saved program (a bug to report, not a state to live with)."""
        if self._stopping:
            return
        job.compiler.stats.background_failures += 1
        reason = " ".join(str(job.error).split())
        if len(reason) > 300:
            reason = reason[:300] + " ..."
        try:
            saved = save_failed(job)
        except OSError as exc:
            how = f"the program could not be saved to reproduce it ({exc})"
        else:
            how = (f"it reproduces with: PJRT_HUB_NUMBA_TIERS=0 pjrt-hub run --plugin numba_cpu {saved[0]} "
                   f"--inputs {saved[1]} (the full error: {saved[2]})")
        warnings.warn(f"numba_cpu: the compiled tier could not compile {job.name}, which keeps running on "
                      f"the eager tier, slower; please report it. {reason}; {how}", RuntimeWarning, stacklevel=1)

    # -- exit --

    def stop(self, timeout: float = 10.0) -> None:
        """Kill the child, fail the queued jobs and wait (up to ``timeout``) for the worker."""
        with self._lock:
            self._stopping = True
            thread = self._thread
            child = self._child
        if child is not None and child.poll() is None:
            child.kill()
        while True:
            try:
                job = self._queue.get_nowait()
            except queue.Empty:
                break
            if job is not None:
                self._fail_unowned(job)
        self._queue.put(None)
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)
        with self._lock:
            self._end_child()
            self._thread = None


def _signal(child: subprocess.Popen, name: str) -> bool:
    """Send the signal ``name`` (SIGSTOP, SIGCONT) to ``child``; False where there is no such
    signal or no such process any more."""
    number = getattr(signal, name, None)
    if number is None:
        return False
    try:
        child.send_signal(number)
    except OSError:
        return False
    return True


def _import_numba() -> None:
    """Import numba and the helpers compiled code loads with (a second or more), so that the
    load after the child's compile takes milliseconds."""
    from . import support  # noqa: F401


def _npz_type(dtype: np.dtype) -> np.dtype:
    """The type an .npz holds an input of ``dtype`` as: its bits for the ml_dtypes types, which
    an .npz cannot name (what ``pjrt-hub run`` takes for them)."""
    return np.dtype(f"u{dtype.itemsize}") if dtype.kind == "V" else dtype


def save_failed(job: _Job) -> tuple[str, str, str]:
    """Write a program whose background compile failed into the cache's ``failed`` folder: its
    text, zero inputs of its parameters' types (a compile failure does not depend on values)
    and the full error. Returns the three paths."""
    folder = job.compiler.cache_dir / "failed"
    folder.mkdir(parents=True, exist_ok=True)
    stem = folder / f"{''.join(c if c.isalnum() or c in '-_' else '_' for c in job.name)}-{job.text_key[:12]}"
    program, inputs, error = stem.with_suffix(".mlir"), stem.with_suffix(".npz"), stem.with_suffix(".txt")
    program.write_text(job.text)
    zeros: dict[str, Any] = {f"in{i}": np.zeros(spec.shape, _npz_type(spec.dtype)) for i, spec in enumerate(job.inputs)}
    with open(inputs, "wb") as f:
        np.savez_compressed(f, **zeros)
    error.write_text(f"{job.error}\n")
    return str(program), str(inputs), str(error)


_BACKGROUND: _Background | None = None
_BACKGROUND_LOCK = threading.Lock()


def _background() -> _Background:
    global _BACKGROUND
    with _BACKGROUND_LOCK:
        if _BACKGROUND is None or _BACKGROUND._stopping:
            _BACKGROUND = _Background()
        return _BACKGROUND


def settle(timeout: float | None = None) -> bool:
    """Wait until this process's background compiles have their outcomes (the compiled code
    loaded, or the failure reported): what a benchmark of steady state waits for, where the
    programs are out of its reach (JAX holds them). False after ``timeout`` seconds."""
    with _BACKGROUND_LOCK:
        background = _BACKGROUND
    return True if background is None else background.settle(timeout)


def shutdown(timeout: float = 10.0) -> None:
    """Stop background compiles (at interpreter exit, and for tests): the child process is
    killed, waiting programs stay on the eager tier, and the worker thread is joined."""
    global _BACKGROUND
    with _BACKGROUND_LOCK:
        background, _BACKGROUND = _BACKGROUND, None
    if background is not None:
        background.stop(timeout)


atexit.register(shutdown)
