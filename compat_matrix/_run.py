"""Running the cells of one environment: plugins x framework versions, each cell in its own process.

Inside one environment the framework versions are acted by the version policy and every cell runs
in its own process (:mod:`._cell`), several at a time, each reused from the cache where it holds.
A job of a plan (:mod:`._jobs`) is one call of :func:`run_environment`; environments that need
their own installation are tox environments, which :mod:`._jobs` drives.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import importlib.metadata as md
import os
import platform
import tempfile
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable, Sequence

from pjrt_hub.abi import ApiVersion

from ._axes import DEFAULT_FRAMEWORKS, FIXTURE_PLUGINS, KNOWN_C_DISTRIBUTIONS, FixturePlugin, RealCPlugin, environment_facts
from ._cache import CellCache, cache_key
from ._cell import DEFAULT_CELL_TIMEOUT, CellSpec, run_cell
from ._fixtures import fixture_identity, install_fixtures
from ._models import CellResult, CellStatus, EnvironmentInfo, MatrixReport, PluginInfo

__all__ = ["MatrixRun", "ProgressCallback", "merge", "plugins_here", "run_environment"]

ENV_LIBRARY_PATHS = "PJRT_NAMES_AND_LIBRARY_PATHS"


@dataclass
class MatrixRun:
    report: MatrixReport
    #: How many cells ran, and how many came from the cache.
    cells_run: int = 0
    cells_cached: int = 0


@dataclass(frozen=True)
class _Target:
    info: PluginInfo
    #: What the cell process is given: a registry name, or a library path.
    argument: str
    python_path: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict)


# -- plugin identities -------------------------------------------------------------------------


def _hash_files(paths: Iterable[Path]) -> str:
    digest = hashlib.sha256()
    for path in sorted(paths):
        try:
            digest.update(path.read_bytes())
        except OSError:
            continue
    return digest.hexdigest()[:12]


def _library_hash(path: str) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()[:16]


def _own_source_hash() -> str:
    """pjrt-hub's own code: its built-in plugins change with it, without a version bump."""
    import pjrt_hub
    import pjrt_hub.abi
    import pjrt_hub.backends
    import pjrt_hub.extensions

    files: list[Path] = []
    for package in (pjrt_hub, pjrt_hub.abi, pjrt_hub.backends, pjrt_hub.extensions):
        for root in getattr(package, "__path__", []):
            files.extend(Path(root).rglob("*.py"))
    return _hash_files(files)


def _python_identity(dist_name: str | None, version: str | None) -> str:
    if dist_name is None:
        return "unknown distribution"
    if dist_name.lower().replace("_", "-") == "pjrt-hub":
        return f"pjrt-hub {version} src:{_own_source_hash()}"
    try:
        files = [Path(str(md.distribution(dist_name).locate_file(f))) for f in md.distribution(dist_name).files or ()
                 if str(f).endswith(".py")]
    except md.PackageNotFoundError:
        files = []
    return f"{dist_name} {version} src:{_hash_files(files)}"


def _known_c_libraries() -> list[str]:
    """``name:path`` items for the C plugin distributions that have no entry point."""
    items = []
    for dist_name, plugin_name in KNOWN_C_DISTRIBUTIONS.items():
        try:
            dist = md.distribution(dist_name)
        except md.PackageNotFoundError:
            continue
        libraries = [Path(str(dist.locate_file(f))) for f in dist.files or () if f.name.endswith(".so")]
        libraries = [p for p in libraries if p.is_file()]
        if libraries:
            items.append(f"{plugin_name}:{max(libraries, key=lambda p: p.stat().st_size)}")
    return items


def _wheel_cache_libraries(plugins: Sequence[RealCPlugin]) -> tuple[list[str], list[str]]:
    """``name:path`` items for the real C plugins, fetched into the wheel cache on first use, and a
    note for each that cannot be had here (no wheel for this machine, no network)."""
    from pjrt_hub.backends.c_api.wheels import WheelUnavailable, plugin_library

    items, notes = [], []
    machine = platform.machine()
    for plugin in plugins:
        if machine not in plugin.machines:
            notes.append(f"{plugin.requirement} has no wheel for {machine}")
            continue
        try:
            items.append(f"{plugin.name}{os.path.pathsep}{plugin_library(plugin.requirement)}")
        except (WheelUnavailable, FileNotFoundError) as exc:
            notes.append(f"{plugin.requirement} is not available: {exc}")
    return items, notes


def _installed_targets(environment: str, libraries: Sequence[str], cached: Sequence[str] = (), *,
                       autoload: bool = True) -> tuple[list[_Target], dict[str, str]]:
    """Every plugin of this environment (with ``autoload``) and the wheel cache's ``cached`` C
    plugins, found without importing any of them. An installed plugin wins over a cached one of
    the same name."""
    from pjrt_hub._discovery import discover

    env = dict(os.environ) if autoload else {}
    extra = _known_c_libraries() if autoload else []
    taken = {item.split(os.path.pathsep, 1)[0].lower() for item in extra}
    if autoload:
        taken |= {c.name.lower() for c in discover(environ={})}
    extra += [item for item in cached if item.split(os.path.pathsep, 1)[0].lower() not in taken]
    if extra:
        env[ENV_LIBRARY_PATHS] = ",".join(filter(None, [env.get(ENV_LIBRARY_PATHS), *extra]))
    cell_env = {ENV_LIBRARY_PATHS: env[ENV_LIBRARY_PATHS]} if env.get(ENV_LIBRARY_PATHS) else {}
    targets = []
    seen: set[str] = set()
    for candidate in discover(autoload=autoload, environ=env, paths=libraries):
        if candidate.name.lower() in seen:
            continue  # the registry reports duplicates; the matrix tests the one it loads
        seen.add(candidate.name.lower())
        if candidate.kind == "c":
            path = candidate.library_path
            identity = f"library sha256:{_library_hash(path)}" if path and os.path.isfile(path) else \
                f"missing library {path}"
        else:
            identity = _python_identity(candidate.distribution, candidate.distribution_version)
        argument = candidate.library_path if candidate.source == "path" and candidate.library_path else candidate.name
        targets.append(_Target(PluginInfo(
            name=candidate.name, kind=candidate.kind, environment=environment,
            distribution=candidate.distribution, distribution_version=candidate.distribution_version,
            library_path=candidate.library_path, identity=identity), argument, env=cell_env))
    return targets, cell_env


def _fixture_targets(fixtures: Sequence[FixturePlugin], site: Path, environment: str) -> list[_Target]:
    install_fixtures(site, fixtures)
    return [_Target(PluginInfo(name=f.name, kind="python", environment=environment, distribution=f.distribution,
                               distribution_version="1.0", api_version=f.api_version, identity=fixture_identity(f),
                               description=f.description), f.name, python_path=(str(site),))
            for f in fixtures]


def plugins_here(*, include_installed: bool = True, libraries: Sequence[str] = (),
                 c_plugins: Sequence[RealCPlugin] = ()) -> tuple[list[str], list[str], list[str]]:
    """The plugins a run in this environment would find, by name, without importing or fetching
    any: the installed ones (with ``include_installed``), ``libraries``, and the ``c_plugins`` that
    have a wheel for this machine. Returns the names, the wheel plugins' requirements, and a note
    for each plugin that cannot be had here."""
    from pjrt_hub._discovery import candidate_for_path

    names: list[str] = []
    if include_installed:
        installed, _ = _installed_targets("plan", libraries)
        names += [t.info.name for t in installed]
    else:
        names += [candidate_for_path(path).name for path in libraries]
    wheels, notes = [], []
    taken = {n.lower() for n in names}
    for plugin in c_plugins:
        if platform.machine() not in plugin.machines:
            notes.append(f"{plugin.requirement} has no wheel for {platform.machine()}")
        elif plugin.name.lower() not in taken:
            names.append(plugin.name)
            wheels.append(plugin.requirement)
    return names, wheels, notes


# -- one environment ---------------------------------------------------------------------------

#: ``progress(done, total, current)``: called as cells finish; ``current`` names a cell still running.
ProgressCallback = Callable[[int, int, str], None]


def run_environment(output: Path, *, environment: str = "local", frameworks: Sequence[ApiVersion | str] = (),
                    plugins: Sequence[str] = (), fixtures: Sequence[FixturePlugin] | None = None,
                    include_installed: bool = True, libraries: Sequence[str] = (),
                    c_plugins: Sequence[RealCPlugin] = (), jobs: int | None = None,
                    cell_timeout: float = DEFAULT_CELL_TIMEOUT, cache: CellCache | None = None,
                    refresh: bool = False, cases: Sequence[str] = (), timeout_scale: float = 1.0,
                    progress: ProgressCallback | None = None, strict: bool | None = None) -> MatrixRun:
    """Every cell of this environment: plugins x framework versions, from the cache where it holds.

    ``c_plugins`` (e.g. :data:`REAL_C_PLUGINS`) are real C plugins taken from the wheel cache
    (downloaded on first use) when this environment has not installed them. ``plugins`` limits the
    rows to these names (or library paths); one that this environment does not have is a row of
    error cells, so that a plan's plugin never silently disappears. ``strict``: judge every cell in
    strict mode (None: as the environment says, PJRT_HUB_STRICT)."""
    from pjrt_hub import __version__
    from pjrt_hub._registry import RegistrySettings
    from pjrt_hub.testing import suite_version

    if strict is None:
        strict = RegistrySettings.from_environment().policy.strict

    output = Path(output).resolve()
    versions = [str(ApiVersion.parse(v)) for v in (frameworks or DEFAULT_FRAMEWORKS)]
    facts = environment_facts()
    with tempfile.TemporaryDirectory(prefix="pjrt-matrix-fixtures-") as site:
        # Each run installs its fixtures in a directory of its own: environments running at once
        # (tox run-parallel) must not rewrite each other's fixture plugins.
        targets = _fixture_targets(FIXTURE_PLUGINS if fixtures is None else fixtures, Path(site), environment)
        cached_libraries, notes = _wheel_cache_libraries(c_plugins) if c_plugins else ([], [])
        if include_installed or cached_libraries:
            installed, _ = _installed_targets(environment, libraries if include_installed else (),
                                              cached_libraries, autoload=include_installed)
            fixture_names = {t.info.name.lower() for t in targets}
            targets += [t for t in installed if t.info.name.lower() not in fixture_names]
        absent: list[str] = []
        if plugins:
            wanted = {p.lower() for p in plugins}
            found = {t.info.name.lower() for t in targets} | {t.argument for t in targets}
            absent = [p for p in plugins if p.lower() not in found and p not in found]
            targets = [t for t in targets if t.info.name.lower() in wanted or t.argument in plugins]
        suite = suite_version()
        cache = cache or CellCache.default(output)
        pending: list[CellSpec] = []
        results: dict[tuple[str, str], CellResult] = {}
        hits = 0
        for target in targets:
            for version in versions:
                key = cache_key(target.info.name, target.info.identity, version, suite, facts, cases, strict=strict)
                hit = None if refresh else cache.get(key)
                if hit is not None:
                    hits += 1
                    results[(target.info.name, version)] = hit.model_copy(update={
                        "cached": True, "environment": environment, "plugin": target.info.name})
                    continue
                pending.append(CellSpec(target.argument, version, environment, key, target.python_path,
                                        dict(target.env), tuple(cases), timeout_scale, strict))
        names = {t.argument: t.info.name for t in targets}
        total, done = len(pending), 0
        running: dict[int, str] = {}
        lock = threading.Lock()

        def run_one(spec: CellSpec) -> CellResult:
            nonlocal done
            label = f"{names[spec.plugin]} at {spec.framework}"
            with lock:
                running[id(spec)] = label
                if progress:
                    progress(done, total, label)
            try:
                return run_cell(spec, timeout=cell_timeout)
            finally:
                with lock:
                    done += 1
                    running.pop(id(spec), None)
                    if progress:
                        progress(done, total, next(iter(running.values()), ""))

        workers = max(1, jobs or os.cpu_count() or 1)
        with ThreadPoolExecutor(max_workers=workers) as pool:
            for spec, result in zip(pending, pool.map(run_one, pending)):
                result = result.model_copy(update={"plugin": names[spec.plugin], "environment": environment})
                cache.put(result)
                results[(names[spec.plugin], spec.framework)] = result
    cells = [results[(t.info.name, v)] for t in targets for v in versions]
    infos = [_with_api_version(t.info, cells) for t in targets]
    why = "; ".join(notes)
    for name in absent:
        error = f"no plugin named {name!r} in environment {environment}" + (f" ({why})" if why else "")
        cells += [CellResult(plugin=name, environment=environment, framework_version=v, status=CellStatus.ERROR,
                             error=error) for v in versions]
        infos.append(PluginInfo(name=name, kind="unknown", environment=environment, identity="not found"))
    report = MatrixReport(
        generated_at=dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"), suite_version=suite,
        pjrt_hub_version=__version__, framework_versions=versions,
        environments=[EnvironmentInfo(name=environment, status="ran", note=why or None, **facts)],
        plugins=infos, cells=cells)
    return MatrixRun(report, cells_run=len(pending), cells_cached=hits)


def _with_api_version(info: PluginInfo, cells: list[CellResult]) -> PluginInfo:
    """The plugin's API version as its cells read it (installed plugins are not imported here)."""
    if info.api_version:
        return info
    read = next((c.plugin_api_version for c in cells if c.plugin == info.name and c.plugin_api_version), None)
    return info.model_copy(update={"api_version": read})


# -- several environments ----------------------------------------------------------------------


def merge(partials: Sequence[MatrixReport], missing: Sequence[EnvironmentInfo] = ()) -> MatrixReport:
    """One report of several environments' partial reports (and the environments that gave none)."""
    from pjrt_hub import __version__
    from pjrt_hub.testing import suite_version

    versions = sorted({v for p in partials for v in p.framework_versions}, key=ApiVersion.parse)
    environments = [e for p in partials for e in p.environments]
    suites = {p.suite_version for p in partials}
    if len(suites) > 1:
        for e in environments:
            e.note = (e.note + "; " if e.note else "") + "ran another suite version than the others"
    return MatrixReport(
        generated_at=dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        suite_version=partials[0].suite_version if len(suites) == 1 else suite_version(),
        pjrt_hub_version=__version__, framework_versions=versions,
        environments=environments + list(missing),
        plugins=[pl for p in partials for pl in p.plugins], cells=[c for p in partials for c in p.cells])
