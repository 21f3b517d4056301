"""``python -m tests.mutation``: the conformance suite measured by cosmic-ray's mutants.

cosmic-ray rewrites source files in place, one mutant at a time, and runs a test command on each:
here ``pjrt-hub conformance --plugin reference --plugin numba_cpu`` (a failed case on either
plugin, a crash or a hang past the time bound kills the mutant: the runtime is theirs alike, and
some of its paths only numba_cpu takes). It never touches the checkout it is started from, where
others edit and test: the package folders are copied into a private directory per worker, laid
out as they install (``abi/`` becomes ``pjrt_hub/abi/``, from pyproject.toml's ``package-dir``), with a
``dist-info`` of their own so that entry points, the reference plugin's among them, are read from
the copy; the test command finds the copy first on ``PYTHONPATH``. Then: ``cosmic-ray init`` lists
every mutant of the targets; mutants inside annotations that are never evaluated are marked
skipped (they cannot change behaviour); a seeded stratified sample (:mod:`.model`) keeps N of the
rest and marks the others skipped, the way cosmic-ray's own filters do; ``cosmic-ray exec`` sends
the sample to cosmic-ray HTTP workers, one per copy, listening on the loopback only; the report
(``mutation.json``, ``mutation.md``, with cosmic-ray's session database and config beside them)
scores the run per module and gives each survivor its diff and its reason from
``survivors.toml``. Exit status 0 only when at least 90% of the sample is killed and every
survivor has a reason that is not a known gap.

cosmic-ray rather than mutmut: cosmic-ray takes any test command and a time bound, keeps its work
in a session database that a filter may edit (the sample is such a filter), and spreads work over
workers that each own a copy of the code; mutmut drives pytest on the project's own tests in a
``mutants/`` folder beside the source.
"""

from __future__ import annotations

import argparse
import compileall
import json
import os
import shlex
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import tomllib
from collections import Counter
from contextlib import ExitStack
from importlib import metadata
from pathlib import Path
from typing import Any, Sequence

from .model import (
    THRESHOLD,
    Candidate,
    MutantResult,
    MutationRunReport,
    Outcome,
    annotation_spans,
    assign_ids,
    build_report,
    draw_sample,
    in_spans,
    load_reasons,
    render_markdown,
    scope_of,
    unified_diff,
)

REPO = Path(__file__).resolve().parents[2]
REASONS = Path(__file__).with_name("survivors.toml")

#: What is mutated, as paths of the repository: the runtime the reference and numba_cpu plugins
#: share, whole, and the reference backend's PJRT surface (the plugin's hooks, the compiler and
#: program behind the runtime's ProgramCompiler seam). The rest of backends/reference defines
#: what ops compute; the differential and generated tests measure that, not this suite.
TARGETS = ("backends/cpu_runtime", "backends/reference/plugin.py", "backends/reference/compiler.py")

#: The plugins the suite runs on per mutant. numba_cpu, with its compile cache warm (the default
#: cache folder, which the workers share: PJRT_* variables are dropped from their environment),
#: costs about what the reference plugin does, so both together cost about twice reference alone.
DEFAULT_PLUGINS = ("reference", "numba_cpu")

DEFAULT_SEED = 41
DEFAULT_SAMPLE = 400
DEFAULT_MIN_PER_MODULE = 5

#: Environment variables that change which plugins load, or how: the runs must not depend on
#: the shell they were started from.
_ENV_PREFIXES = ("PJRT_", "ENABLE_PJRT_")


class MutationRunError(RuntimeError):
    """The run could not measure anything (the unmutated copy fails, a worker did not start)."""


# -- the private copy --------------------------------------------------------------------------


def _package_dirs(source: Path) -> dict[str, str]:
    """pyproject.toml's ``package-dir``: namespace -> folder of the repository."""
    project = tomllib.loads((source / "pyproject.toml").read_text(encoding="utf-8"))
    return dict(project["tool"]["setuptools"]["package-dir"])


def copy_path(repo_path: str, package_dirs: dict[str, str]) -> str:
    """Where a repository path lands in the installed layout (``backends/x.py`` ->
    ``pjrt_hub/backends/x.py``)."""
    best = max((folder for folder in package_dirs.values()
                if repo_path == folder or repo_path.startswith(folder.rstrip("/") + "/")), key=len)
    namespace = next(ns for ns, folder in package_dirs.items() if folder == best)
    return namespace.replace(".", "/") + repo_path[len(best):]


def repo_path(path: str, package_dirs: dict[str, str]) -> str:
    """The inverse of :func:`copy_path`."""
    best = max((ns for ns in package_dirs if path == ns.replace(".", "/") or path.startswith(ns.replace(".", "/") + "/")),
               key=len)
    return package_dirs[best] + path[len(best.replace(".", "/")):]


def make_copy(source: Path, dest: Path, targets: Sequence[str]) -> None:
    """Lay the package folders of ``source`` out under ``dest`` as they install, with a
    dist-info read from pyproject.toml; compile every module to bytecode except the targets.

    The targets must have no bytecode: cosmic-ray writes a mutant, then the original back, and
    a ``.pyc`` stamped with the same second and size would be taken for either (the test runs
    forbid writing bytecode). The rest loads from its ``.pyc``, which saves each run compiling
    the whole package."""
    project = tomllib.loads((source / "pyproject.toml").read_text(encoding="utf-8"))
    package_dirs = project["tool"]["setuptools"]["package-dir"]
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "*.so")
    for namespace, folder in sorted(package_dirs.items(), key=lambda kv: kv[0].count(".")):
        target = dest / namespace.replace(".", "/")
        shutil.copytree(source / folder, target, ignore=ignore, dirs_exist_ok=True)
    meta = project["project"]
    info = dest / f"{meta['name'].replace('-', '_')}-{meta['version']}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {meta['name']}\nVersion: {meta['version']}\n")
    groups = dict(meta.get("entry-points", {}))
    if meta.get("scripts"):
        groups["console_scripts"] = meta["scripts"]
    (info / "entry_points.txt").write_text("".join(
        f"[{group}]\n" + "".join(f"{name} = {value}\n" for name, value in entries.items()) + "\n"
        for group, entries in groups.items()))
    compileall.compile_dir(str(dest), quiet=2)
    for target in targets:
        path = dest / copy_path(target, package_dirs)
        for py in ([path] if path.is_file() else sorted(path.rglob("*.py"))):
            for pyc in (py.parent / "__pycache__").glob(f"{py.stem}.*.pyc"):
                pyc.unlink()


def _source_state(source: Path, package_dirs: dict[str, str]) -> tuple[str | None, list[str]]:
    """The commit of ``source`` and the files of the copied folders that differ from it (read
    only: ``git rev-parse`` and ``git status``)."""
    try:
        commit = subprocess.run(["git", "-C", str(source), "rev-parse", "HEAD"], capture_output=True, text=True,
                                check=True).stdout.strip()
        status = subprocess.run(["git", "-C", str(source), "status", "--porcelain", "--", *package_dirs.values()],
                                capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return None, []
    return commit, [line[3:] for line in status.splitlines() if line.strip()]


# -- workers -----------------------------------------------------------------------------------

#: cosmic-ray's HTTP worker, bound to the loopback (its ``http-worker`` command listens on every
#: interface, and a worker runs whatever test command it is sent).
_WORKER = """\
import sys
from aiohttp import web
from cosmic_ray.distribution.http import handle_mutate_and_test
app = web.Application()
app.add_routes([web.post("/", handle_mutate_and_test)])
web.run_app(app, host="127.0.0.1", port=int(sys.argv[1]), print=None)
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _test_env(copy: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(_ENV_PREFIXES)}
    env["PYTHONPATH"] = str(copy)
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    return env


def _start_worker(copy: Path, port: int, log: Path) -> subprocess.Popen:
    with log.open("w") as out:
        proc = subprocess.Popen([sys.executable, "-c", _WORKER, str(port)], cwd=copy, env=_test_env(copy),
                                stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise MutationRunError(f"the cosmic-ray worker in {copy} exited: {log.read_text()[-2000:]}")
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return proc
        time.sleep(0.2)
    proc.kill()
    raise MutationRunError(f"the cosmic-ray worker in {copy} did not listen on port {port} within 60 s")


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _baseline(copies: Sequence[Path], command: str) -> float:
    """Run the test command on every unmutated copy at once (the load of the real run) and
    return the slowest time; refuse to go on if one fails, since every mutant would then count
    as killed."""
    start = time.monotonic()
    procs = [(c, subprocess.Popen(shlex.split(command), cwd=c, env=_test_env(c), stdout=subprocess.PIPE,
                                  stderr=subprocess.STDOUT, text=True)) for c in copies]
    slowest = 0.0
    for copy, proc in procs:
        out, _ = proc.communicate()
        slowest = max(slowest, time.monotonic() - start)
        if proc.returncode != 0:
            raise MutationRunError(f"the suite fails on the unmutated copy {copy} (exit {proc.returncode}): "
                                   f"{_failed_cases(out) or out[-3000:]}")
    return slowest


def _warm_up(copy: Path, command: str) -> None:
    """Run the test command once, untimed and whatever its outcome: numba_cpu compiles each
    program the first time it sees it and keeps the result in its disk cache, and a cold run is
    both slower and, against the suite's call bounds, less reliable than the warm runs every
    mutant gets."""
    subprocess.run(shlex.split(command), cwd=copy, env=_test_env(copy), stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL, check=False)


def _failed_cases(stdout: str | None) -> list[str]:
    """The failed case ids of a ``pjrt-hub conformance --json`` output; none if it is not one (a
    crash before the report)."""
    try:
        report = json.loads(stdout or "")
        return [c["id"] for p in report["plugins"] for c in p["cases"] if c["outcome"] == "failed"]
    except (ValueError, KeyError, TypeError):
        return []


# -- the cosmic-ray session --------------------------------------------------------------------


def _cosmic_ray(*args: str, cwd: Path) -> None:
    proc = subprocess.run([sys.executable, "-m", "cosmic_ray.cli", *args], cwd=cwd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise MutationRunError(f"cosmic-ray {' '.join(args)} failed ({proc.returncode}): {proc.stderr[-3000:]}")


def _candidates(session: Path, copy: Path, package_dirs: dict[str, str]) -> tuple[list[Candidate], dict[str, str]]:
    """The session's mutants, and the source of each module they are in (as copied)."""
    from cosmic_ray.work_db import WorkDB, use_db

    with use_db(str(session), WorkDB.Mode.open) as db:
        items = db.work_items
    specs = [(item.job_id, item.mutations[0]) for item in items]
    modules = {m.module_path.as_posix() for _, m in specs}
    sources = {repo_path(m, package_dirs): (copy / m).read_text(encoding="utf-8") for m in modules}
    scopes = {m: scope_of(s) for m, s in sources.items()}
    out = []
    for job_id, m in specs:
        module = repo_path(m.module_path.as_posix(), package_dirs)
        out.append(Candidate(job_id, module, m.operator_name, m.occurrence, tuple(m.start_pos), tuple(m.end_pos),
                             scopes[module](m.start_pos[0])))
    return out, sources


def _skip(session: Path, job_ids: Sequence[str], why: str) -> None:
    from cosmic_ray.work_db import WorkDB, use_db
    from cosmic_ray.work_item import WorkerOutcome, WorkResult

    if job_ids:
        with use_db(str(session), WorkDB.Mode.open) as db:
            db.set_multiple_results(list(job_ids), WorkResult(output=why, worker_outcome=WorkerOutcome.SKIPPED))


def _progress(session: Path, total: int, started: float) -> str:
    """A progress line while ``cosmic-ray exec`` runs, read from the session database."""
    import sqlite3

    with sqlite3.connect(f"file:{session}?mode=ro", uri=True) as db:
        rows = db.execute("SELECT test_outcome, COUNT(*) FROM work_results WHERE worker_outcome != 'SKIPPED' "
                          "GROUP BY test_outcome").fetchall()
    counts = {str(k).lower(): n for k, n in rows}
    done = sum(counts.values())
    elapsed = time.monotonic() - started
    eta = f", about {elapsed / done * (total - done) / 60:.0f} min left" if done else ""
    return (f"mutation: {done}/{total} tested ({counts.get('killed', 0)} killed, {counts.get('survived', 0)} "
           f"survived) in {elapsed / 60:.1f} min{eta}")


def _results(session: Path, sample: Sequence[Candidate], ids: dict[str, str], sources: dict[str, str],
             package_dirs: dict[str, str]) -> list[MutantResult]:
    import cosmic_ray.plugins
    from cosmic_ray.mutating import mutate_code
    from cosmic_ray.work_db import WorkDB, use_db
    from cosmic_ray.work_item import TestOutcome, WorkerOutcome

    with use_db(str(session), WorkDB.Mode.open) as db:
        done = {item.job_id: result for item, result in db.completed_work_items}
    results = []
    for c in sample:
        result = done.get(c.job_id)
        try:
            mutated = mutate_code(sources[c.module], cosmic_ray.plugins.get_operator(c.operator)(), c.occurrence)
        except Exception as exc:  # noqa: BLE001 - an operator that cannot rewrite this node (cosmic-ray's bug)
            mutated, why = None, f"cosmic-ray could not make this mutant: {type(exc).__name__}: {exc}"
        else:
            why = "cosmic-ray made no mutant here"
        diff = unified_diff(sources[c.module], mutated, c.module) if mutated is not None else ""
        failed: list[str] = []
        error = None
        if result is None or result.worker_outcome is not WorkerOutcome.NORMAL:
            outcome = Outcome.ERROR
            error = "not run" if result is None else f"{result.worker_outcome.value}: {result.output or ''}"[-2000:]
            if not diff:
                error = f"{why}; {error}"
        elif result.test_outcome is TestOutcome.SURVIVED:
            outcome = Outcome.SURVIVED
        elif result.test_outcome is TestOutcome.KILLED:
            # cosmic-ray's runner records a run past the bound as killed, with "timeout" for output.
            outcome = Outcome.TIMEOUT if result.output == "timeout" else Outcome.KILLED
            failed = _failed_cases(result.output)
        else:
            outcome = Outcome.ERROR
            error = f"incompetent: {result.output or ''}"[-2000:]
        results.append(MutantResult(id=ids[c.job_id], module=c.module, operator=c.operator, occurrence=c.occurrence,
                                    line=c.start[0], definition=c.definition, outcome=outcome, failed_cases=failed,
                                    diff=diff, error=error))
    return results


def write_report(report: MutationRunReport, output: Path) -> None:
    output.mkdir(parents=True, exist_ok=True)
    (output / "mutation.json").write_text(report.model_dump_json(indent=2) + "\n")
    (output / "mutation.md").write_text(render_markdown(report))


def run(args: argparse.Namespace) -> MutationRunReport:
    source = Path(args.source).resolve()
    package_dirs = _package_dirs(source)
    output = Path(args.output).resolve()
    output.mkdir(parents=True, exist_ok=True)
    plugins = " ".join(f"--plugin {shlex.quote(p)}" for p in args.plugin)
    command = f"{shlex.quote(sys.executable)} -m pjrt_hub.cli conformance {plugins} --json"
    shown_command = f"pjrt-hub conformance {plugins}"
    commit, changes = _source_state(source, package_dirs)
    with ExitStack() as stack:
        if args.resume:
            # cosmic-ray sessions resume by design: exec runs only the work without a result.
            work = Path(args.resume).resolve()
            copies = [p for p in sorted(work.glob("worker-*")) if p.is_dir()]
            state = json.loads((work / "run.json").read_text())
            baseline, timeout = state["baseline_s"], state["timeout_s"]
            print(f"mutation: resuming the session in {work}", file=sys.stderr)
        else:
            work = Path(tempfile.mkdtemp(prefix="pjrt-hub-mutation-"))
            copies = [work / f"worker-{k}" for k in range(args.workers)]
            for copy in copies:
                make_copy(source, copy, TARGETS)
            print(f"mutation: {args.workers} copies of {source} in {work}; baseline run of the suite", file=sys.stderr)
            if "numba_cpu" in args.plugin:
                _warm_up(copies[0], command)
            baseline = _baseline(copies, command)
            timeout = args.timeout or max(60.0, 6 * baseline)
            (work / "run.json").write_text(json.dumps({"baseline_s": baseline, "timeout_s": timeout}))
        if not args.keep_workdir and not args.resume:
            stack.callback(shutil.rmtree, work, ignore_errors=True)

        config = work / "cosmic-ray.toml"
        session = work / "session.sqlite"
        ports = [_free_port() for _ in copies]
        from cosmic_ray.config import ConfigDict, serialize_config

        config.write_text(serialize_config(ConfigDict({
            "module-path": [copy_path(t, package_dirs) for t in TARGETS],
            "excluded-modules": [],
            "timeout": timeout,
            "test-command": command,
            "distributor": {"name": "http", "http": {"worker-urls": [f"http://127.0.0.1:{p}" for p in ports]}},
        })))
        if not args.resume:
            _cosmic_ray("init", str(config), str(session), cwd=copies[0])
        candidates, sources = _candidates(session, copies[0], package_dirs)
        spans = {m: annotation_spans(s) for m, s in sources.items()}
        annotated = [c for c in candidates if in_spans(c.start, c.end, spans[c.module])]
        population = [c for c in candidates if not in_spans(c.start, c.end, spans[c.module])]
        sample = draw_sample(population, args.sample, args.seed, args.min_per_module)
        chosen = {c.job_id for c in sample}
        if not args.resume:
            _skip(session, [c.job_id for c in annotated], "in an annotation that is never evaluated")
            _skip(session, [c.job_id for c in population if c.job_id not in chosen],
                  f"not in the sample (seed {args.seed})")
        ids = assign_ids(population, sources)
        print(f"mutation: {len(candidates)} mutants, {len(annotated)} in annotations; testing {len(sample)} "
              f"(seed {args.seed}), time bound {timeout:.0f} s (baseline {baseline:.1f} s)", file=sys.stderr)

        workers = []
        for copy, port in zip(copies, ports):
            proc = _start_worker(copy, port, work / f"{copy.name}.log")
            workers.append(proc)
            stack.callback(_stop, proc)
        started = time.monotonic()
        exec_log = work / "exec.log"
        with exec_log.open("w") as log:
            exe = subprocess.Popen([sys.executable, "-m", "cosmic_ray.cli", "exec", str(config), str(session)],
                                   cwd=work, stdout=log, stderr=subprocess.STDOUT)
        stack.callback(_stop, exe)
        while exe.poll() is None:
            try:
                exe.wait(args.progress_every)
            except subprocess.TimeoutExpired:
                print(_progress(session, len(sample), started), file=sys.stderr)
        if exe.returncode != 0:
            raise MutationRunError(f"cosmic-ray exec failed ({exe.returncode}): {exec_log.read_text()[-3000:]}")
        results = _results(session, sample, ids, sources, package_dirs)
        shutil.copy(session, output / "session.sqlite")
        shutil.copy(config, output / "cosmic-ray.toml")

    made = Counter(c.module for c in population)
    drawn = Counter(c.module for c in sample)
    return build_report(
        results=results, per_module={m: (made[m], drawn[m]) for m in made}, reasons=load_reasons(args.reasons),
        tool="cosmic-ray", tool_version=metadata.version("cosmic-ray"), seed=args.seed, sample_size=args.sample,
        min_per_module=args.min_per_module, population=len(candidates), filtered_annotations=len(annotated),
        targets=list(TARGETS), test_command=shown_command, timeout_s=timeout, baseline_s=baseline,
        workers=args.workers, source=str(source), source_commit=commit, source_changes=changes,
        threshold=args.threshold)


def rereport(args: argparse.Namespace) -> MutationRunReport:
    """The report of an earlier run (its ``mutation.json``) with the reasons as they are now."""
    before = MutationRunReport.model_validate_json(Path(args.rereport).read_text())
    results = [m.model_copy(update={"explanation": None, "reason": None}) for m in before.mutants]
    fields: dict[str, Any] = before.model_dump(exclude={"modules", "mutants", "stale_reasons"})
    return build_report(results=results, per_module={m.module: (m.population, m.sampled) for m in before.modules},
                        reasons=load_reasons(args.reasons), **fields)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m tests.mutation", description=__doc__.split("\n\n")[0])
    p.add_argument("--sample", type=int, default=DEFAULT_SAMPLE, metavar="N",
                   help=f"how many mutants to test (default {DEFAULT_SAMPLE})")
    p.add_argument("--seed", type=int, default=DEFAULT_SEED, help=f"the sample's seed (default {DEFAULT_SEED})")
    p.add_argument("--min-per-module", type=int, default=DEFAULT_MIN_PER_MODULE, metavar="K",
                   help=f"at least K mutants of every module (default {DEFAULT_MIN_PER_MODULE})")
    p.add_argument("--workers", type=int, default=2, help="cosmic-ray workers, each with its own copy (default 2)")
    p.add_argument("--plugin", action="append", default=None, metavar="NAME",
                   help=f"the plugin the suite runs on (repeatable; default {' and '.join(DEFAULT_PLUGINS)})")
    p.add_argument("--timeout", type=float, default=None, metavar="SECONDS",
                   help="time bound of one run of the suite (default six times the baseline, at least 60 s)")
    p.add_argument("--threshold", type=float, default=THRESHOLD, help=f"kill rate required (default {THRESHOLD})")
    p.add_argument("--output", default="mutation-out", metavar="DIR", help="where the report goes")
    p.add_argument("--source", default=str(REPO), metavar="DIR", help="the checkout to copy (default this one)")
    p.add_argument("--reasons", type=Path, default=REASONS, help="the survivors' reasons (default %(default)s)")
    p.add_argument("--keep-workdir", action="store_true", help="keep the copies and the session")
    p.add_argument("--resume", default=None, metavar="WORKDIR",
                   help="go on with the session of a kept work directory (same --seed, --sample, --min-per-module): "
                        "cosmic-ray runs only the mutants without a result, then the report is written")
    p.add_argument("--progress-every", type=float, default=60.0, metavar="SECONDS", help=argparse.SUPPRESS)
    p.add_argument("--rereport", default=None, metavar="MUTATION_JSON",
                   help="instead of running, rebuild the report of an earlier run with the reasons as they are now")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    args.plugin = args.plugin or list(DEFAULT_PLUGINS)
    if args.workers < 1 or args.sample < 1:
        parser().error("--workers and --sample must be at least 1")
    try:
        report = rereport(args) if args.rereport else run(args)
    except (MutationRunError, ValueError) as exc:
        print(f"mutation: {exc}", file=sys.stderr)
        return 2
    write_report(report, Path(args.output))
    print(f"mutation: kill rate {report.killed}/{report.tested} = {report.kill_rate:.1%}; "
          + ("OK" if report.ok else "NOT OK: " + "; ".join(report.problems))
          + f"; report in {Path(args.output) / 'mutation.md'}", file=sys.stderr)
    return 0 if report.ok else 1
