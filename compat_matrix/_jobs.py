"""Running a plan's jobs and merging their results: ``pjrt-hub matrix cell`` and ``matrix merge``.

A job runs here (:func:`run_job_here`: its cells through :func:`.run_environment`) or, when it
names a tox environment, through tox (:func:`run_job_tox`: tox installs the environment and runs
``pjrt-hub matrix cell --no-tox`` inside it). Either way it leaves ``<id>.json``, a
:class:`CellReport` that carries the plan's id, the job's id and the versions of everything it ran
on; a job whose environment could not be built still leaves one, saying why.

:func:`merge_results` checks each result against the plan (a broken file, a result of another
plan, a job the plan does not have, a job reported twice are :class:`MergeError`) and builds the
:class:`MatrixReport`; a planned cell with no result is a red "missing" cell. A local run
(:func:`run_plan`) is the same three steps on one machine, with the environments in parallel
(``tox run-parallel``).
"""

from __future__ import annotations

import datetime as dt
import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Iterable, Sequence

from pydantic import ValidationError

from ._axes import FIXTURE_PLUGINS, REAL_C_PLUGINS, environment_info
from ._cache import CellCache
from ._models import (RED, CellReport, CellResult, CellStatus, EnvironmentInfo, JobInfo, MatrixPlan,
                      MatrixReport, PlanCell, PluginInfo)
from ._plan import installed_interpreters
from ._run import ProgressCallback, run_environment

__all__ = ["MergeError", "job_is_red", "load_plan", "load_results", "matrix_project", "merge_results", "no_checkout",
           "run_job_here", "run_job_tox", "run_plan", "tox_command", "write_result"]


class MergeError(Exception):
    """A result or a plan the merge cannot use: the message names the file and what is wrong."""


def _now() -> str:
    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")


def _first_error(exc: ValidationError) -> str:
    err = exc.errors()[0]
    where = ".".join(str(p) for p in err.get("loc", ())) or "the top level"
    return f"{err.get('msg', 'invalid')} at {where}"


def load_plan(path: str | os.PathLike[str]) -> MatrixPlan:
    """Read a plan file; :class:`MergeError` with a one-line reason if it is not one."""
    try:
        text = Path(path).read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise MergeError(f"cannot read the plan {path}: {getattr(exc, 'strerror', None) or exc}") from None
    try:
        return MatrixPlan.model_validate_json(text)
    except ValidationError as exc:
        raise MergeError(f"{path} is not a matrix plan (pjrt-hub matrix plan --format json): {_first_error(exc)}") \
            from None


def write_result(report: CellReport, output: Path) -> Path:
    """Write ``output/<id>.json`` atomically (a reader never sees half a result)."""
    output.mkdir(parents=True, exist_ok=True)
    target = output / f"{report.cell_id}.json"
    fd, tmp = tempfile.mkstemp(dir=output, prefix=f".{report.cell_id}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as handle:
            handle.write(report.model_dump_json(indent=2))
        os.chmod(tmp, 0o644)  # mkstemp's 0600 would keep a result from whoever merges it
        os.replace(tmp, target)
    except BaseException:
        os.unlink(tmp)
        raise
    return target


# -- one job -----------------------------------------------------------------------------------


def run_job_here(plan: MatrixPlan, cell: PlanCell, *, cache: CellCache, jobs: int | None = None,
                 refresh: bool = False, progress: ProgressCallback | None = None) -> CellReport:
    """Run ``cell`` in this environment and return its result."""
    fixtures = {f.name: f for f in FIXTURE_PLUGINS}
    unknown = [n for n in cell.fixtures if n not in fixtures]
    if unknown:
        raise MergeError(f"the plan's job {cell.id} names fixture plugins this pjrt-hub does not have: "
                         f"{', '.join(unknown)}")
    wheels = {p.requirement: p for p in REAL_C_PLUGINS if p.requirement in cell.wheel_plugins}
    from_wheels = {p.name for p in wheels.values()}
    # Installed plugins are looked for only when the job has rows that are neither fixtures nor
    # wheel-cache plugins: a fixtures-only job must not find (and run) what happens to be installed.
    installed = any(p not in cell.fixtures and p not in from_wheels for p in cell.plugins)
    started, clock = _now(), time.monotonic()
    run = run_environment(
        cache.root.parent, environment=cell.environment, frameworks=cell.frameworks, plugins=cell.plugins,
        fixtures=[fixtures[n] for n in cell.fixtures], include_installed=installed, libraries=cell.libraries,
        c_plugins=list(wheels.values()), jobs=jobs, cell_timeout=plan.cell_timeout, cache=cache, refresh=refresh,
        cases=plan.cases, progress=progress, strict=plan.strict)
    report = run.report
    note = report.environments[0].note if report.environments else None
    return CellReport(plan_id=plan.plan_id, cell_id=cell.id, environment=environment_info(cell.environment, note=note),
                      suite_version=report.suite_version, started_at=started,
                      duration_s=round(time.monotonic() - clock, 3), plugins=report.plugins, cells=report.cells)


def tox_command() -> list[str] | None:
    """How to call tox here: on PATH, or as a module of this Python."""
    tox = shutil.which("tox")
    if tox:
        return [tox]
    if importlib.util.find_spec("tox") is not None:
        return [sys.executable, "-m", "tox"]
    return None


#: Where an editable install of pjrt-hub has its checkout (this module is compat_matrix/_jobs.py
#: in it); in an install from a wheel, a folder of site-packages without a tox.ini.
_INSTALLED_FROM = Path(__file__).resolve().parent.parent


def matrix_project(start: Path | None = None) -> Path | None:
    """The pjrt-hub checkout whose tox.ini defines the matrix's environments: ``start`` (the
    current directory) or a directory above it, else the checkout this package is installed from
    (an editable install). None when there is none, as for an install from a wheel."""
    here = (start or Path.cwd()).resolve()
    for candidate in (here, *here.parents, _INSTALLED_FROM):
        ini = candidate / "tox.ini"
        try:
            if ini.is_file() and "[testenv:matrix-" in ini.read_text(errors="replace"):
                return candidate
        except OSError:
            continue
    return None


def no_checkout(where: Path) -> str:
    """Why tox jobs cannot run from ``where``, and what to do instead."""
    return (f"the matrix's tox environments are defined in pjrt-hub's tox.ini, and there is none in {where}, "
            "above it, or where pjrt-hub is installed from: run it in a clone of pjrt-hub (pip install -e '.[test]' "
            "there), or run this environment only with --no-tox")


def _checkout(project: Path | None) -> Path:
    """``project``, else the checkout :func:`matrix_project` finds; MergeError saying why if none."""
    found = project or matrix_project()
    if found is None:
        raise MergeError(no_checkout(Path.cwd()))
    return found


def _tox_base(project: Path) -> list[str]:
    tox = tox_command()
    if tox is None:
        raise MergeError("tox is not installed (pip install 'pjrt-hub[test]'), or run this environment only "
                         "with --no-tox")
    return [*tox, "-c", str(project / "tox.ini")]


def _discover_args() -> list[str]:
    interpreters = installed_interpreters()
    return ["--discover", *interpreters] if interpreters else []


def _tail(log: str, lines: int = 4) -> str:
    return " | ".join(line.strip() for line in log.strip().splitlines()[-lines:] if line.strip()) or "no output"


def _environment_failed(plan: MatrixPlan, cell: PlanCell, why: str, duration: float = 0.0) -> CellReport:
    """The result of a job whose environment gave no result: every cell of it is an error."""
    info = EnvironmentInfo(name=cell.environment, python=cell.python, status="failed", note=why)
    return CellReport(plan_id=plan.plan_id, cell_id=cell.id, environment=info, suite_version=plan.suite_version,
                      started_at=_now(), duration_s=round(duration, 3), error=why)


def run_job_tox(plan: MatrixPlan, plan_path: Path, cell: PlanCell, output: Path, *, project: Path | None = None,
                extra: Sequence[str] = (), log: Path | None = None) -> CellReport:
    """Run ``cell`` in its tox environment (tox builds it first); return the result it wrote, or
    one that says why there is none."""
    assert cell.tox_env is not None
    output = output.resolve()
    try:
        project = _checkout(project)
    except MergeError as exc:
        return _environment_failed(plan, cell, str(exc))
    command = [*_tox_base(project), "run", "-e", cell.tox_env, *_discover_args(), "--",
               cell.id, "--plan", str(plan_path.resolve()), "--output", str(output), *extra]
    # A result left by an earlier run of this job must not stand in for this run's.
    (output / f"{cell.id}.json").unlink(missing_ok=True)
    clock = time.monotonic()
    done = subprocess.run(command, cwd=project, capture_output=True, text=True)
    text = (done.stdout or "") + (done.stderr or "")
    if log is not None:
        log.write_text(text)
    path = output / f"{cell.id}.json"
    if path.exists():
        try:
            report = CellReport.model_validate_json(path.read_text())
        except ValidationError as exc:
            return _environment_failed(plan, cell, f"its result is broken: {_first_error(exc)}")
        if report.plan_id == plan.plan_id and report.cell_id == cell.id:
            return report
    return _environment_failed(plan, cell, f"tox environment {cell.tox_env} gave no result "
                                           f"(exit {done.returncode}): {_tail(text)}", time.monotonic() - clock)


# -- a whole plan on this machine ----------------------------------------------------------------


def run_plan(plan: MatrixPlan, plan_path: Path, output: Path, *, cache_dir: Path, jobs: int | None = None,
             refresh: bool = False, project: Path | None = None, progress: ProgressCallback | None = None,
             poll: float = 0.5) -> list[CellReport]:
    """Every job of ``plan`` here: the jobs without a tox environment in this process, the others
    through ``tox run-parallel`` (the environments at once, each running all its jobs). Results go
    to ``output``; each job has one when this returns."""
    output = output.resolve()
    output.mkdir(parents=True, exist_ok=True)
    for old in output.glob("*.json"):
        old.unlink()
    total_cells = sum(len(c.plugins) * len(c.frameworks) for c in plan.cells)
    finished = 0
    reports: dict[str, CellReport] = {}
    for cell in [c for c in plan.cells if c.tox_env is None]:
        base = finished

        def step(done: int, total: int, current: str, base: int = base, job: str = cell.id) -> None:
            if progress:
                progress(base + done, base + total + (total_cells - base - total), f"{job}: {current}".rstrip(": "))

        report = run_job_here(plan, cell, cache=CellCache(cache_dir), jobs=jobs, refresh=refresh, progress=step)
        write_result(report, output)
        reports[cell.id] = report
        finished += len(cell.plugins) * len(cell.frameworks)
    tox_cells = [c for c in plan.cells if c.tox_env is not None]
    if tox_cells:
        envs = list(dict.fromkeys(c.tox_env for c in tox_cells if c.tox_env))
        log_path = output.parent / "tox.log"
        try:
            project = _checkout(project)
            tox_base = _tox_base(project)
        except MergeError as exc:
            for cell in tox_cells:
                reports[cell.id] = _environment_failed(plan, cell, str(exc))
                write_result(reports[cell.id], output)
            return [reports[c.id] for c in plan.cells]
        command = [*tox_base, "run-parallel", "-p", "auto", "--parallel-no-spinner", "-e", ",".join(envs),
                   *_discover_args(), "--", "--plan", str(plan_path.resolve()), "--output", str(output)]
        command += ["--cache", str(cache_dir.resolve())]
        if refresh:
            command.append("--refresh")
        clock = time.monotonic()
        with open(log_path, "w") as log:
            proc = subprocess.Popen(command, cwd=project, stdout=log, stderr=subprocess.STDOUT)
            while True:
                try:
                    proc.wait(timeout=poll)
                    break
                except subprocess.TimeoutExpired:
                    pass
                if progress:
                    done = [c for c in tox_cells if (output / f"{c.id}.json").exists()]
                    running = [c.id for c in tox_cells if c not in done]
                    cells_done = finished + sum(len(c.plugins) * len(c.frameworks) for c in done)
                    progress(cells_done, total_cells, "running " + ", ".join(running[:3])
                             + (f" and {len(running) - 3} more" if len(running) > 3 else ""))
        text = log_path.read_text(errors="replace")
        for cell in tox_cells:
            path = output / f"{cell.id}.json"
            cell_report: CellReport | None = None
            if path.exists():
                try:
                    cell_report = CellReport.model_validate_json(path.read_text())
                except ValidationError:
                    cell_report = None
            if cell_report is None:
                env_lines = [line for line in text.splitlines() if cell.tox_env and cell.tox_env in line]
                cell_report = _environment_failed(
                    plan, cell, f"tox environment {cell.tox_env} gave no result (exit {proc.returncode}; "
                    f"log {log_path}): {_tail(chr(10).join(env_lines) or text)}", time.monotonic() - clock)
                write_result(cell_report, output)
            reports[cell.id] = cell_report
    return [reports[c.id] for c in plan.cells]


# -- merge -------------------------------------------------------------------------------------


def load_results(paths: Iterable[str | os.PathLike[str]]) -> list[tuple[Path, CellReport]]:
    """Read result files (a folder stands for its ``*.json``); :class:`MergeError` for one that is
    not a cell result."""
    files: list[Path] = []
    for item in paths:
        path = Path(item)
        if path.is_dir():
            files += sorted(p for p in path.glob("*.json") if p.is_file())
        else:
            files.append(path)
    seen: set[Path] = set()
    loaded = []
    for path in files:
        key = path.resolve()
        if key in seen:
            continue  # the same file named twice (a folder and a glob of it)
        seen.add(key)
        try:
            text = path.read_text()
        except (OSError, UnicodeDecodeError) as exc:
            raise MergeError(f"cannot read the result {path}: {getattr(exc, 'strerror', None) or exc}") from None
        try:
            loaded.append((path, CellReport.model_validate_json(text)))
        except ValidationError as exc:
            raise MergeError(f"{path} is not a matrix cell result (pjrt-hub matrix cell writes them): "
                             f"{_first_error(exc)}") from None
    return loaded


def merge_results(plan: MatrixPlan, results: Sequence[tuple[Path, CellReport]]) -> MatrixReport:
    """One report of the plan's jobs' results; see the module's docstring for what is refused."""
    from pjrt_hub import __version__

    by_id: dict[str, tuple[Path, CellReport]] = {}
    ids = {c.id for c in plan.cells}
    # Bound by both loops below; in the second, a job may have no result.
    path: Path | None
    result: CellReport | None
    for path, result in results:
        if result.plan_id != plan.plan_id:
            raise MergeError(f"{path} is a result of another plan ({result.plan_id}; this plan is {plan.plan_id})")
        if result.cell_id not in ids:
            raise MergeError(f"{path} reports job {result.cell_id!r}, which plan {plan.plan_id} does not have")
        if result.cell_id in by_id:
            raise MergeError(f"job {result.cell_id!r} has two results: {by_id[result.cell_id][0]} and {path}")
        job = plan.job(result.cell_id)
        if result.environment.name != job.environment:
            raise MergeError(f"{path} ran in environment {result.environment.name!r}; "
                             f"job {job.id} is planned for {job.environment!r}")
        by_id[result.cell_id] = (path, result)
    plugins: list[PluginInfo] = []
    cells: list[CellResult] = []
    jobs: list[JobInfo] = []
    environments: dict[str, EnvironmentInfo] = {}
    for job in plan.cells:
        path, result = by_id.get(job.id, (None, None))
        if result is None:
            why = f"no result: job {job.id} did not report"
            jobs.append(JobInfo(id=job.id, environment=job.environment, tox_env=job.tox_env, plugins=job.plugins,
                                status="missing", error=why))
            environments.setdefault(job.environment, EnvironmentInfo(
                name=job.environment, python=job.python, status="missing", note=why))
        else:
            status = "error" if result.error else "ran"
            jobs.append(JobInfo(id=job.id, environment=job.environment, tox_env=job.tox_env, plugins=job.plugins,
                                status=status, duration_s=result.duration_s, error=result.error,
                                facts=result.environment))
            facts = result.environment.model_copy(update={"status": "failed" if result.error else "ran"})
            if result.suite_version != plan.suite_version:
                facts.note = ((facts.note + "; ") if facts.note else "") + \
                    f"ran suite {result.suite_version}, the plan's is {plan.suite_version} (the cases can " \
                    "depend on the environment: the dtypes its ml_dtypes offers)"
            known = environments.get(job.environment)
            if known is None or (known.status != "ran" and facts.status == "ran"):
                environments[job.environment] = facts
        reported_plugins = {p.name.lower(): p for p in (result.plugins if result else [])}
        reported_cells = {(c.plugin.lower(), c.framework_version): c for c in (result.cells if result else [])}
        for name in job.plugins:
            info = reported_plugins.get(name.lower())
            plugins.append(info if info is not None else PluginInfo(
                name=name, kind="unknown", environment=job.environment, identity="no result"))
            row = info.name if info is not None else name
            for version in job.frameworks:
                cell = reported_cells.get((name.lower(), version))
                if cell is None and result is not None and result.error:
                    cell = CellResult(plugin=row, environment=job.environment, framework_version=version,
                                      status=CellStatus.ERROR, error=result.error)
                elif cell is None:
                    why = f"no result: job {job.id} did not report" if result is None else \
                        f"no result: job {job.id} reported no cell for it"
                    cell = CellResult(plugin=row, environment=job.environment, framework_version=version,
                                      status=CellStatus.MISSING, error=why)
                cells.append(cell)
    for skipped in plan.not_planned:
        ran = environments.get(skipped.name)
        if ran is None:
            environments[skipped.name] = skipped
        elif skipped.note:  # e.g. a wheel plugin with no wheel for this machine
            ran.note = f"{ran.note}; {skipped.note}" if ran.note else skipped.note
    environments_list = list(environments.values())
    return MatrixReport(
        generated_at=_now(), suite_version=plan.suite_version, pjrt_hub_version=__version__,
        framework_versions=plan.frameworks, environments=environments_list, plugins=plugins, cells=cells,
        plan_id=plan.plan_id, jobs=jobs)


def job_is_red(report: CellReport) -> bool:
    """A job whose environment failed, that ran nothing, or that has a red cell."""
    return bool(report.error) or not report.cells or any(c.status in RED for c in report.cells)
