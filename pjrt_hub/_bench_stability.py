"""``pjrt-hub bench --spread N`` and ``--under-load K``: is a plugin's speed stable, and does it
survive a busy machine?

``bench`` times each plugin in one fresh process; a result that depends on the process (thread
pools sized at start-up, memory placement, a load figure sampled at the wrong moment) then looks
like noise. ``--spread N`` runs the same measurement in N rounds of fresh processes, one per
plugin, whose timed runs take turns as in ``bench``, and reports, per program and plugin, the
min / median / max of the N per-process medians and max/min: a bimodal program shows a ratio
near 2 where a stable one stays near 1, and each process's ``cores_used`` (CPU time over wall
time while timed) shows whether it ran on one thread or two. The host's speed drifts too, within
seconds on a shared machine, and moves every plugin's times alike; so it also reports the first
plugin's median over each other's round by round, which that drift moves far less.
``--under-load K`` times the programs quiet and while K CPU-bound neighbour processes spin (plain Python loops,
one per core they are meant to take), and reports loaded / quiet per program, flagging any ratio
above :data:`LOAD_CEILING` (issue 14's "no collapse under load"). Two processes per plugin take
their blocks of runs in turns, program by program, a quiet one with the neighbours stopped (SIGSTOP) and a loaded one with them
running, so that the host's own drift (on a shared machine, large within a minute) falls on quiet
and loaded alike instead of on one of them. The neighbours are children of
this process that also stop by themselves when it is gone, and are killed on the way out whatever
happens (an error, Ctrl-C), so a benchmark never leaves spinning processes behind.

What share of the cores a loaded program can get depends on how the kernel groups processes, and
a ratio means nothing without it. By default the neighbours run in the bench's own session, as
``stress --cpu K &`` typed in the same shell would: the scheduler then shares the cores among
threads, and a program with two threads on two cores next to two spinners gets one core, half its
quiet share, so about 2x is graceful. With ``own_sessions`` each neighbour starts a session of its
own, as a program from another terminal or a service would. Where the kernel groups by session
(autogroup: ``/proc/sys/kernel/sched_autogroup_enabled`` is 1, the default of most desktop and
many server kernels, and it applies to processes in the root cpu cgroup) it first shares the cores
among sessions: a neighbour takes at most one core, and the bench gets the larger of C/(K+1) and
C-K of C cores: 2/3 of a core with C = K = 2, where a program that kept both cores busy when
quiet cannot take less than 3x its quiet time however well it behaves. Each row also carries the
CPU time per run, loaded / quiet, which does not depend on the share: near 1 when the program
only got less of the machine, well above 1 when its threads burned what they got (spinning,
oversubscription): a collapse shows there whatever the grouping. Not every rise is the
program's: a machine may run the same code slower while a core is time-sliced
(``benchmarks/time_slicing.py`` measures it without pjrt-hub), as one that keeps a large working
set cached only while it is swept back to back: a memory-bound program's quiet time is then its
cached speed and its loaded time its uncached one. What the bench and that script measured on
this project's machine is in docs/measurements.md ("Under load").
"""

from __future__ import annotations

import os
import signal
import statistics
import subprocess
import sys
import time
from types import TracebackType
from typing import Any, Callable, Sequence

from pjrt_hub._bench import _measure_interleaved

__all__ = ["LOAD_CEILING", "Neighbours", "autogroup_enabled", "fair_share", "usable_cores", "format_spread", "format_under_load", "spread", "under_load"]

#: loaded / quiet above this is a collapse (issue 14: "no program slower than 3x its quiet time").
LOAD_CEILING = 3.0

#: Seconds the neighbours spin before a loaded measurement starts, so that they are running and
#: the plugins' own load sampling (numba_cpu's, every 0.2 s) has seen them.
_SETTLE_S = 0.3

#: A neighbour: spin in pure Python, checking now and then that the bench that started it is
#: still there (so even a bench killed with SIGKILL leaves no spinning process for long).
_SPIN = ("import os, sys\n"
         "parent = int(sys.argv[1])\n"
         "while os.getppid() == parent:\n"
         "    for _ in range(200000):\n"
         "        pass\n")

#: ``say(done, total, what)``: processes finished so far, of how many, and what runs now.
Say = Callable[[int, int, str], None]


def autogroup_enabled(root: str = "/") -> bool | None:
    """Whether the kernel shares the cores among this process's sessions before their threads
    (Linux's autogroup: on in its sysctl, and applied only to tasks in the root cpu cgroup);
    None where that cannot be read (not Linux, a kernel without it). ``root``: where ``/proc``
    and ``/sys`` are found (tests)."""
    try:
        with open(os.path.join(root, "proc/sys/kernel/sched_autogroup_enabled")) as f:
            if f.read().strip() != "1":
                return False
        with open(os.path.join(root, "proc/self/cgroup")) as f:
            entries = [line.rstrip("\n").split(":", 2) for line in f if line.count(":") >= 2]
    except OSError:
        return None
    for _, controllers, path in entries:
        if "cpu" in controllers.split(","):  # cgroup v1: the cpu hierarchy
            return path == "/"
    for hierarchy, controllers, path in entries:
        if hierarchy == "0" and not controllers:  # cgroup v2
            if path == "/":
                return True
            try:
                with open(os.path.join(root, "sys/fs/cgroup", path.lstrip("/"), "cgroup.controllers")) as f:
                    return "cpu" not in f.read().split()  # a cpu controller there: a group of its own
            except OSError:
                return None
    return True  # no cpu cgroup at all


class Neighbours:
    """``with Neighbours(k):`` K CPU-bound processes spin for the body's duration, in this
    process's session, or each in a session of its own with ``own_sessions`` (see the module's
    docstring for what that changes).

    The processes are killed and reaped on exit, including when the body raises (an error,
    KeyboardInterrupt); :attr:`pids` lists them while they run."""

    def __init__(self, count: int, *, own_sessions: bool = False, paused: bool = False) -> None:
        if count < 1:
            raise ValueError(f"neighbours must be at least 1, got {count}")
        self.count = count
        self.own_sessions = own_sessions
        #: Start stopped (:meth:`pause`), for :meth:`resume` to set going.
        self.paused = paused
        self.procs: list[subprocess.Popen[bytes]] = []

    @property
    def pids(self) -> list[int]:
        return [p.pid for p in self.procs]

    def __enter__(self) -> "Neighbours":
        try:
            for _ in range(self.count):
                self.procs.append(subprocess.Popen(
                    [sys.executable, "-c", _SPIN, str(os.getpid())],
                    stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                    start_new_session=self.own_sessions))
            if self.paused:
                self._signal(signal.SIGSTOP)
            else:
                # Let them get going (and the plugins' load sampling see them) before timing starts.
                time.sleep(_SETTLE_S)
        except BaseException:
            self.stop()
            raise
        return self

    def _signal(self, sig: signal.Signals) -> None:
        running = [proc for proc in self.procs if proc.poll() is None]
        for proc in running:
            os.kill(proc.pid, sig)
        if sig == signal.SIGSTOP:
            # A signal takes effect when the kernel next looks at the process: wait until each
            # one has stopped, so that a quiet measurement starts quiet.
            for proc in running:
                os.waitpid(proc.pid, os.WUNTRACED)

    def pause(self) -> None:
        """Stop every neighbour (SIGSTOP), and return once they are stopped: the machine is quiet
        until :meth:`resume`."""
        if not self.paused:
            self._signal(signal.SIGSTOP)
            self.paused = True

    def resume(self) -> None:
        """Set the neighbours spinning again (SIGCONT), and let them get going."""
        if self.paused:
            self._signal(signal.SIGCONT)
            self.paused = False
            time.sleep(_SETTLE_S)

    def stop(self) -> None:
        """Kill and reap every neighbour (idempotent)."""
        for proc in self.procs:
            if proc.poll() is None:
                proc.kill()  # SIGKILL ends a stopped process too
        for proc in self.procs:
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:  # pragma: no cover - a SIGKILL'd process always ends
                pass
        self.procs = []

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()


def _medians(measured: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {row["name"]: row for row in measured["rows"]}


def spread(plugins: Sequence[str], names: Sequence[str], processes: int, *, runs: int | None,
           library: Sequence[str], cache: str, say: Say | None = None,
           fastest_of: Sequence[str] = ()) -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[dict[str, Any]]]:
    """Time ``names`` on each plugin in ``processes`` fresh processes, in rounds of one process per
    plugin whose timed blocks take turns, as ``bench`` times them
    (:func:`pjrt_hub._bench._measure_interleaved`).

    Returns ``(first_rows, spread_rows, ratio_rows)``: the first round's full bench rows (cold
    compile, outputs checked); per program and plugin, the per-process medians with their min /
    median / max and max/min; and per program, the first plugin's median over each other
    plugin's in the same round (``against``: that plugin, or ``fastest``: the fastest of
    ``fastest_of``, or of all the others if that is empty, where there are two), round by round.
    A process that fails leaves ``None`` in its place and its error.

    On a shared machine the host's own speed drifts within seconds, for one thread pinned to a
    core with nothing of pjrt-hub loaded as well (docs/measurements.md, "The host's drift"), so
    much of a plugin's spread over processes is the host's; a ratio taken within one round, the
    plugins timed in turns, varies far less with it."""
    if processes < 2:
        raise ValueError(f"a spread needs at least 2 processes, got {processes}")
    first: list[dict[str, Any]] = []
    per: dict[tuple[str, str], list[float | None]] = {}
    errors: dict[tuple[str, str], list[str]] = {}
    usage: dict[tuple[str, str], list[tuple[float | None, float | None]]] = {}
    for index in range(processes):
        def starting(program: str, plugin: str, index: int = index) -> None:
            if say is not None:
                say(index, processes, f"round {index + 1} of {processes}: {program} on {plugin}")

        measured_by = _measure_interleaved(plugins, names, runs, library, cache, starting)
        for plugin in plugins:
            rows = _medians(measured_by[plugin])
            if index == 0:
                first += [rows[n] for n in names if n in rows]
            for name in names:
                got = rows.get(name, {})
                ms = got.get("execute_ms_median") if got.get("outputs_match") else None
                per.setdefault((name, plugin), []).append(ms)
                usage.setdefault((name, plugin), []).append((got.get("cores_used"), got.get("minor_faults_per_run")))
                if ms is None:
                    reason = got.get("error") or "outputs differ from the expected ones"
                    errors.setdefault((name, plugin), []).append(f"process {index + 1}: {reason}")
    table = []
    for name in names:
        for plugin in plugins:
            values = per.get((name, plugin), [])
            row: dict[str, Any] = {"name": name, "plugin": plugin, "processes": len(values),
                                   "per_process_ms": values, "errors": errors.get((name, plugin), []),
                                   "cores_used_per_process": [u[0] for u in usage.get((name, plugin), [])],
                                   "minor_faults_per_run_per_process": [u[1] for u in usage.get((name, plugin), [])]}
            row.update(_range(values, "ms"))
            table.append(row)
    return first, table, _round_ratios(plugins, names, per, fastest_of)


def _range(values: Sequence[float | None], unit: str) -> dict[str, float]:
    """min / median / max (``min_<unit>`` ...) and max/min of the values there are."""
    good = [v for v in values if v is not None]
    if not good:
        return {}
    return {f"min_{unit}": min(good), f"median_{unit}": statistics.median(good), f"max_{unit}": max(good),
            "max_over_min": max(good) / min(good)}


def _round_ratios(plugins: Sequence[str], names: Sequence[str], per: dict[tuple[str, str], list[float | None]],
                  fastest_of: Sequence[str]) -> list[dict[str, Any]]:
    """The first plugin's time over each other plugin's, round by round, and over the fastest
    of ``fastest_of`` (or of the others) in that round where there are two or more."""
    subject, others = plugins[0], list(plugins[1:])
    pool = [p for p in fastest_of if p in others] if fastest_of else others
    table = []
    for name in names:
        mine = per.get((name, subject), [])
        columns = {other: per.get((name, other), []) for other in others}
        if len(pool) > 1:
            columns["fastest"] = [min((v for v in vs if v is not None), default=None)
                                  for vs in zip(*(per.get((name, p), []) for p in pool))]
        for against, theirs in columns.items():
            ratios = [None if a is None or b is None else a / b for a, b in zip(mine, theirs)]
            table.append({"name": name, "plugin": subject, "against": against, "per_process": ratios,
                          **_range(ratios, "ratio")})
    return table


def under_load(plugins: Sequence[str], names: Sequence[str], neighbours: int, *, runs: int | None,
               library: Sequence[str], cache: str, say: Say | None = None,
               own_sessions: bool = False) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Time ``names`` on each plugin quiet and with ``neighbours`` spinning processes (in
    sessions of their own with ``own_sessions``): two processes per plugin, whose timed blocks
    take turns (:func:`pjrt_hub._bench._measure_interleaved`), the neighbours stopped for the
    quiet one's and running for the loaded one's. Both are set up (compiled, first results
    timed) with the neighbours stopped.

    Returns ``(quiet_rows, load_rows)``: the quiet processes' full bench rows and, per program and
    plugin, quiet and loaded medians, loaded / quiet and whether it passes :data:`LOAD_CEILING`."""
    if neighbours < 1:
        raise ValueError(f"--under-load needs at least 1 neighbour process, got {neighbours}")
    quiet_of = {plugin: f"{plugin} (quiet)" for plugin in plugins}
    loaded_of = {plugin: f"{plugin} (with {neighbours} busy)" for plugin in plugins}
    # The quiet processes take their turns together, then the loaded ones: the neighbours are
    # resumed (and given _SETTLE_S to get going) once per program, not once per plugin.
    labels = [quiet_of[plugin] for plugin in plugins] + [loaded_of[plugin] for plugin in plugins]
    loaded_labels = set(loaded_of.values())

    def starting(program: str, label: str) -> None:
        if say is not None:
            say(0, 1, f"{program} on {label}")

    with Neighbours(neighbours, own_sessions=own_sessions, paused=True) as spinning:
        def before_turn(label: str) -> None:
            if label in loaded_labels:
                spinning.resume()
            else:
                spinning.pause()

        measured = _measure_interleaved([*plugins, *plugins], names, runs, library, cache,
                                        starting, labels=labels, before_turn=before_turn)
    quiet_rows: list[dict[str, Any]] = []
    table = []
    for plugin in plugins:
        quiet, loaded = _medians(measured[quiet_of[plugin]]), _medians(measured[loaded_of[plugin]])
        quiet_rows += [quiet[n] for n in names if n in quiet]
        for name in names:
            q, lo = quiet.get(name, {}), loaded.get(name, {})
            row: dict[str, Any] = {"name": name, "plugin": plugin,
                                   "quiet_ms": q.get("execute_ms_median") if q.get("outputs_match") else None,
                                   "loaded_ms": lo.get("execute_ms_median") if lo.get("outputs_match") else None,
                                   "quiet_cores_used": q.get("cores_used"), "loaded_cores_used": lo.get("cores_used"),
                                   "quiet_cpu_ms_per_run": q.get("cpu_ms_per_run"),
                                   "loaded_cpu_ms_per_run": lo.get("cpu_ms_per_run")}
            problems = [f"{what}: {r.get('error') or 'outputs differ from the expected ones'}"
                        for what, r, ms in (("quiet", q, row["quiet_ms"]), ("loaded", lo, row["loaded_ms"]))
                        if ms is None]
            if problems:
                row["error"] = "; ".join(problems)
            else:
                row["ratio"] = row["loaded_ms"] / row["quiet_ms"]
                row["over_ceiling"] = row["ratio"] > LOAD_CEILING
                if row["quiet_cpu_ms_per_run"] and row["loaded_cpu_ms_per_run"] is not None:
                    row["cpu_per_run_ratio"] = row["loaded_cpu_ms_per_run"] / row["quiet_cpu_ms_per_run"]
            table.append(row)
    return quiet_rows, table


def _time(ms: float | None) -> str:
    if ms is None:
        return "-"
    return f"{ms * 1e3:.1f} us" if ms < 1 else f"{ms:.2f} ms"


def _columns(table: list[list[str]]) -> list[str]:
    widths = [max(len(row[i]) for row in table) for i in range(len(table[0]))]
    return ["  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in table]


def format_spread(rows: Sequence[dict[str, Any]], ratios: Sequence[dict[str, Any]] = ()) -> str:
    """The spread table, one line per program and plugin, then the first plugin's ratios to the
    others, round by round (:func:`spread`)."""
    table = [["program", "plugin", "processes", "min", "median", "max", "max/min", "per process (ms)",
              "cores used"]]
    for r in rows:
        per = " ".join("-" if v is None else f"{v:.3f}" if v < 1 else f"{v:.2f}" for v in r["per_process_ms"])
        cores = " ".join("-" if v is None else f"{v:.1f}" for v in r.get("cores_used_per_process", []))
        table.append([r["name"], r["plugin"], str(r["processes"]), _time(r.get("min_ms")),
                      _time(r.get("median_ms")), _time(r.get("max_ms")),
                      "-" if r.get("max_over_min") is None else f"{r['max_over_min']:.2f}x", per, cores])
    lines = _columns(table)
    lines += [f"{r['name']} on {r['plugin']}: {e}" for r in rows for e in r["errors"]]
    if ratios:
        table = [["program", "plugin", "over", "min", "median", "max", "per process"]]
        for r in ratios:
            per = " ".join("-" if v is None else f"{v:.2f}" for v in r["per_process"])
            against = "the fastest other" if r["against"] == "fastest" else r["against"]
            table.append([r["name"], r["plugin"], against,
                          *("-" if r.get(k) is None else f"{r[k]:.2f}x" for k in ("min_ratio", "median_ratio", "max_ratio")),
                          per])
        lines += ["", "time over the other plugins' in the same round (timed in turns, so that the host's drift "
                      "hits them alike):", *_columns(table)]
    lines.append("noisy on a shared machine: compare spreads from several runs")
    return "\n".join(lines)


def format_under_load(load: dict[str, Any]) -> str:
    """The under-load table, with the rows over the ceiling flagged."""
    table = [["program", "plugin", "quiet", f"with {load['neighbours']} busy", "loaded/quiet",
              "cores used quiet/loaded", "CPU per run loaded/quiet", ""]]
    for r in load["rows"]:
        ratio, cpu = r.get("ratio"), r.get("cpu_per_run_ratio")
        cores = "/".join("-" if r.get(k) is None else f"{r[k]:.1f}" for k in ("quiet_cores_used", "loaded_cores_used"))
        table.append([r["name"], r["plugin"], _time(r.get("quiet_ms")), _time(r.get("loaded_ms")),
                      "-" if ratio is None else f"{ratio:.2f}x", cores, "-" if cpu is None else f"{cpu:.2f}x",
                      f"OVER {load['ceiling']:g}x" if r.get("over_ceiling") else ""])
    lines = [_sessions_line(load), *_columns(table)]
    lines += [f"{r['name']} on {r['plugin']}: error: {r['error']}" for r in load["rows"] if r.get("error")]
    over = [f"{r['name']} on {r['plugin']}" for r in load["rows"] if r.get("over_ceiling")]
    lines.append(f"slower than {load['ceiling']:g}x quiet under load: {', '.join(over)}" if over
                 else f"no program slower than {load['ceiling']:g}x its quiet time")
    return "\n".join(lines)


def usable_cores() -> int:
    """The cores this process may run on (its affinity), which the bench's share is out of."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def fair_share(cores: int, neighbours: int, *, by_session: bool) -> float:
    """The cores a program with one thread per core gets next to ``neighbours`` one-thread
    spinners: shared among threads, or among sessions first (autogroup, each neighbour in a
    session of its own and taking at most one core)."""
    if by_session:
        return cores - neighbours * min(1.0, cores / (neighbours + 1))
    return cores * cores / (cores + neighbours)


def _sessions_line(load: dict[str, Any]) -> str:
    """How the neighbours shared the machine with the bench, which bounds the ratios."""
    k, cores = load["neighbours"], load.get("cores") or usable_cores()
    by_session = bool(load.get("own_sessions") and load.get("autogroup"))
    share = fair_share(cores, k, by_session=by_session)
    if not load.get("own_sessions"):
        how = "in the bench's session: the cores are shared among threads"
    elif by_session:
        how = "in sessions of their own, kernel autogroup on: the cores are shared among sessions first"
    else:
        how = "in sessions of their own, kernel autogroup off or not applied: the cores are shared among threads"
    return (f"{k} neighbour(s) {how}; a program with a thread per core gets {share:.2f} of {cores} cores, "
            f"so one that kept c cores busy quiet takes at least c/{share:.2f} times its quiet time")
