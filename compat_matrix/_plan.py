"""The plan of a matrix: which jobs run where, as data a CI fans out (``pjrt-hub matrix plan``).

A job (:class:`PlanCell`) is an environment and the plugins it covers, at every framework version
of the plan. Environments are tox environments (:data:`DEFAULT_ENVIRONMENTS`), or, for a plan made
with ``here``, the environment the plan was made in. The plugins of a tox environment must be
known before it exists, so they are those the matrix can name: the fixture plugins, pjrt-hub's own
plugins, the C plugins the environment installs, and libraries given by path (or through
``PJRT_NAMES_AND_LIBRARY_PATHS``, which tox passes on). A plugin the plan names but the job does
not find becomes a red cell, never a silently shorter row.

Jobs are split per environment, or per plugin (the fixture plugins, which take seconds, share one
job). The plan's id is a hash of its content: every result carries it, and the merge refuses a
result of another plan. The renderers give a plan as GitHub Actions matrix data (for
``fromJSON``), a GitLab child pipeline, or plain JSON.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import re
import shlex
import shutil
from pathlib import Path
from typing import Any, Sequence

from pjrt_hub.abi import ApiVersion

from ._axes import (DEFAULT_ENVIRONMENTS, DEFAULT_FRAMEWORKS, FIXTURE_PLUGINS, REAL_C_PLUGINS, FixturePlugin,
                    MatrixEnvironment)
from ._cell import DEFAULT_CELL_TIMEOUT
from ._models import EnvironmentInfo, MatrixPlan, PlanCell

__all__ = ["PLAN_FORMATS", "PlanError", "PluginNotFound", "SPLITS", "installed_interpreters", "make_plan",
           "render_plan"]

PLAN_FORMATS = ("github", "gitlab", "json")
SPLITS = ("plugin", "environment")
#: What the plan's commands call the plan file and the results folder (relative to the job's cwd).
PLAN_FILE = "plan.json"
RESULTS_DIR = "results"
#: How a job installs pjrt-hub and tox (the test extra) before it runs its command.
_INSTALL = 'pip install -e ".[test]"'


class PlanError(Exception):
    """The selection gives no matrix (nothing to run, an option that does not apply)."""


class PluginNotFound(PlanError):
    """A plugin asked for by name is in no environment of the matrix."""


def _short(environment: str) -> str:
    return environment[len("matrix-"):] if environment.startswith("matrix-") else environment


def _safe(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", text)


def installed_interpreters() -> list[str]:
    """Pythons that pyenv installed: tox finds them through its shims only for the active
    versions, so they are handed to it (``--discover``)."""
    root = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv")) / "versions"
    found = []
    for path in sorted(root.glob("*/bin/python3.*")):
        if path.name.replace("python3.", "").isdigit() and os.access(path, os.X_OK):
            found.append(str(path))
    return found


def _has_interpreter(version: str) -> bool:
    if ".".join(platform.python_version_tuple()[:2]) == version or shutil.which(f"python{version}"):
        return True
    return any(Path(p).name == f"python{version}" for p in installed_interpreters())


def _builtin_plugins() -> list[str]:
    """pjrt-hub's own plugins, by their entry points (nothing is imported)."""
    from pjrt_hub._discovery import discover

    return [c.name for c in discover(environ={})
            if c.kind == "python" and (c.distribution or "").lower().replace("_", "-") == "pjrt-hub"]


def _env_var_plugins() -> list[str]:
    """C plugins named by ``PJRT_NAMES_AND_LIBRARY_PATHS``, which tox passes to every environment."""
    from pjrt_hub._discovery import discover

    return [c.name for c in discover(autoload=False)]


def _known_candidates(fixture_plugins: Sequence[FixturePlugin], libraries: Sequence[str]) -> dict[str, Any]:
    """Every plugin a plan may name, as the registry would see it (distribution, library), so that
    a block-list entry ``name@dist`` means in the plan what it means to ``pjrt-hub list``."""
    from pjrt_hub._discovery import Candidate, discover

    known: dict[str, Candidate] = {}
    for candidate in discover(paths=libraries):
        known.setdefault(candidate.name.lower(), candidate)
    for plugin in REAL_C_PLUGINS:
        known.setdefault(plugin.name.lower(), Candidate(plugin.name, "c", "the matrix's real C plugins",
                                                        distribution=plugin.requirement.partition("==")[0]))
    for fixture in fixture_plugins:
        known[fixture.name.lower()] = Candidate(fixture.name, "python", "a matrix fixture",
                                                distribution=fixture.distribution)
    return known


def _kept_out(rows: Sequence[str], settings: Any, known: dict[str, Any], explicit: set[str]) -> dict[str, str]:
    """The rows the environment's settings keep out of the plan, with why: the block-list and the
    allow-list (as the registry applies them), and, with autoload off, every plugin found through
    entry points (fixtures and installed plugins alike: a cell would not find them either)."""
    from pjrt_hub._discovery import Candidate
    from pjrt_hub._registry import ENV_AUTOLOAD

    out = {}
    for name in rows:
        if not settings.autoload and name not in explicit:
            out[name] = (f"autoload is off ({ENV_AUTOLOAD}=0): only PJRT_NAMES_AND_LIBRARY_PATHS, --library "
                         "and --c-plugins plugins are planned")
            continue
        reason = settings.refusal(known.get(name.lower()) or Candidate(name, "python", "the matrix"))
        if reason is not None:
            out[name] = reason
    return out


def _command(cell_id: str) -> str:
    return f"pjrt-hub matrix cell {shlex.quote(cell_id)} --plan {PLAN_FILE} --output {RESULTS_DIR}"


def _jobs(environment: str, tox_env: str | None, python: str, plugins: list[str], fixtures: set[str],
          libraries: dict[str, str], wheels: dict[str, str], frameworks: list[str], split: str) -> list[PlanCell]:
    """The jobs of one environment: all its plugins in one, or one per plugin (fixtures together)."""
    groups: Sequence[tuple[str | None, list[str]]]
    if split == "environment":
        groups = [(None, plugins)]
    else:
        fixture_group = [p for p in plugins if p in fixtures]
        groups = ([("fixtures", fixture_group)] if fixture_group else []) + \
            [(p, [p]) for p in plugins if p not in fixtures]
    cells = []
    for label, names in groups:
        cell_id = _short(environment) if label is None else f"{_short(environment)}.{_safe(label)}"
        cells.append(PlanCell(
            id=cell_id, environment=environment, tox_env=tox_env, python=python, plugins=names,
            fixtures=[n for n in names if n in fixtures], libraries=[libraries[n] for n in names if n in libraries],
            wheel_plugins=[wheels[n] for n in names if n in wheels], frameworks=frameworks, command=_command(cell_id)))
    return cells


def make_plan(*, frameworks: Sequence[ApiVersion | str] = (), plugins: Sequence[str] = (),
              libraries: Sequence[str] = (), fixtures: bool = True, c_plugins: bool = False,
              cases: Sequence[str] = (), environments: Sequence[str] = (), here: str | None = None,
              split: str = "plugin", cell_timeout: float = DEFAULT_CELL_TIMEOUT,
              available_only: bool = False, fixture_plugins: Sequence[FixturePlugin] = FIXTURE_PLUGINS
              ) -> MatrixPlan:
    """The jobs of a matrix selection.

    ``here``: plan this environment only, under that name (its jobs run where they are, no tox);
    else the tox ``environments`` (default :data:`DEFAULT_ENVIRONMENTS`). ``plugins`` limits the
    rows (:class:`PluginNotFound` for a name no environment has). ``available_only`` leaves out the
    tox environments whose Python is not installed here (a local run), with a note."""
    from pjrt_hub import __version__
    from pjrt_hub._discovery import candidate_for_path
    from pjrt_hub._registry import RegistrySettings
    from pjrt_hub.testing import suite_version

    from ._run import plugins_here

    if split not in SPLITS:
        raise PlanError(f"unknown split {split!r}: choose one of {', '.join(SPLITS)}")
    versions = sorted({str(ApiVersion.parse(str(v))) for v in (frameworks or DEFAULT_FRAMEWORKS)},
                      key=ApiVersion.parse)
    # The environment's registry settings apply to the plan as to every command: its rows leave
    # out what PJRT_HUB_DISABLE_PLUGINS, PJRT_HUB_PLUGINS and PJRT_HUB_PLUGIN_AUTOLOAD keep out, and
    # PJRT_HUB_STRICT travels in the plan to every cell, wherever the cell runs.
    settings = RegistrySettings.from_environment()
    fixture_names = [f.name for f in fixture_plugins] if fixtures else []
    library_names = {candidate_for_path(path).name: path for path in libraries}
    explicit = set(library_names)
    # (environment, tox env, python, plugins, wheel requirements by plugin)
    planned: list[tuple[str, str | None, str, list[str], dict[str, str]]] = []
    not_planned: list[EnvironmentInfo] = []
    if here is not None:
        if environments:
            raise PlanError("--env names tox environments; it does not go with --no-tox")
        names, wheels, notes = plugins_here(libraries=libraries, c_plugins=REAL_C_PLUGINS if c_plugins else ())
        requirement = {p.name: p.requirement for p in REAL_C_PLUGINS}
        explicit |= set(_env_var_plugins()) | {n for n in names if n in requirement and requirement[n] in wheels}
        python = ".".join(platform.python_version_tuple()[:2])
        rows = fixture_names + [n for n in names if n.lower() not in {f.lower() for f in fixture_names}]
        planned.append((here, None, python, rows, {n: requirement[n] for n in names if n in requirement
                                                   and requirement[n] in wheels}))
        not_planned += [EnvironmentInfo(name=here, status="missing", note=note) for note in notes]
    else:
        builtins, from_env = _builtin_plugins(), _env_var_plugins()
        explicit |= set(from_env)
        # The real C plugins' environment downloads their wheels and tests other vendors' code: it
        # runs when asked for (--c-plugins, or by name with --env), as with --no-tox.
        chosen = [MatrixEnvironment.from_name(n) for n in environments] if environments else \
            [e for e in DEFAULT_ENVIRONMENTS if c_plugins or not e.c_plugins]
        for env in chosen:
            if available_only and not _has_interpreter(env.python):
                not_planned.append(EnvironmentInfo(
                    name=env.name, python=env.python, status="missing",
                    note=f"not run here: no Python {env.python} installed (CI runs it)"))
                continue
            rows = (fixture_names if env.fixtures else []) + (builtins if env.builtins else []) \
                + [p.name for p in env.c_plugins] + from_env + list(library_names)
            unique = list(dict.fromkeys(rows))
            planned.append((env.name, env.name, env.python, unique, {}))
    candidates = _known_candidates(fixture_plugins, libraries)
    kept_out = {n.lower(): why for _, _, _, rows, _ in planned
                for n, why in _kept_out(rows, settings, candidates, explicit).items()}
    planned = [(e, t, py, [p for p in rows if p.lower() not in kept_out], w) for e, t, py, rows, w in planned]
    if plugins:
        known = {p.lower(): p for _, _, _, rows, _ in planned for p in rows}
        unknown = [p for p in plugins if p.lower() not in known]
        refused = [p for p in unknown if p.lower() in kept_out]
        if refused:
            raise PlanError(f"plugin {refused[0]!r} is left out of the matrix: {kept_out[refused[0].lower()]}")
        if unknown:
            listing = ", ".join(sorted(set(known.values()), key=str.lower)) or "none"
            raise PluginNotFound(f"no plugin named {unknown[0]!r} in the matrix (its plugins: {listing})")
        wanted = {p.lower() for p in plugins}
        planned = [(e, t, py, [p for p in rows if p.lower() in wanted], w) for e, t, py, rows, w in planned]
    cells: list[PlanCell] = []
    for environment, tox_env, python, rows, requirements in planned:
        if not rows:
            not_planned.append(EnvironmentInfo(name=environment, python=python, status="missing",
                                               note="none of the selected plugins is in it"))
            continue
        cells += _jobs(environment, tox_env, python, rows, set(fixture_names), library_names, requirements, versions,
                       split)
    if not cells:
        why = sorted(set(kept_out.values()))
        raise PlanError("the selection has no plugin to run" + (
            f"; {len(kept_out)} left out by the environment: {'; '.join(why)}" if kept_out else ""))
    body = dict(pjrt_hub_version=__version__, suite_version=suite_version(), frameworks=versions,
                cases=list(cases), cell_timeout=cell_timeout, cells=cells, not_planned=not_planned,
                strict=settings.policy.strict)
    draft = MatrixPlan(plan_id="", **body)
    digest = hashlib.sha256(draft.model_dump_json(exclude={"plan_id"}).encode()).hexdigest()[:16]
    return draft.model_copy(update={"plan_id": digest})


# -- renderers ---------------------------------------------------------------------------------


def _github(plan: MatrixPlan) -> str:
    include = [{"id": c.id, "environment": c.environment, "tox_env": c.tox_env or "", "python": c.python,
                "plugins": " ".join(c.plugins), "frameworks": " ".join(c.frameworks), "command": c.command}
               for c in plan.cells]
    return json.dumps({"include": include}, separators=(",", ":"))


def _yaml_string(text: str) -> str:
    # A JSON string is a YAML double-quoted scalar: no quoting rules of our own to get wrong.
    return json.dumps(text)


def _gitlab(plan: MatrixPlan) -> str:
    """A child pipeline: one job per cell, then a merge job. Its jobs take plan.json from the parent
    pipeline's job ``matrix-plan`` (``needs: pipeline``); each cell keeps its result as an artifact,
    which the merge job collects."""
    needs_plan = ["    - pipeline: $PARENT_PIPELINE_ID", "      job: matrix-plan"]
    lines = [f"# pjrt-hub matrix plan {plan.plan_id}: {len(plan.cells)} job{'s' if len(plan.cells) != 1 else ''} and a "
             "merge. Generated; do not edit.",
             "# The parent pipeline's job `matrix-plan` runs",
             "#   pjrt-hub matrix plan --format gitlab --output plan.json > matrix-cells.yml",
             "# (artifacts: plan.json, matrix-cells.yml); a trigger job runs this file as a child pipeline",
             "# (trigger: include: - artifact: matrix-cells.yml, job: matrix-plan) with the variable",
             "# PARENT_PIPELINE_ID: $CI_PIPELINE_ID, and strategy: depend to take its verdict.",
             "stages:", "  - matrix-cells", "  - matrix-merge", ""]
    for cell in plan.cells:
        lines += [
            f"{_yaml_string('matrix-cell ' + cell.id)}:",
            "  stage: matrix-cells",
            f"  image: {_yaml_string('python:' + cell.python)}",
            "  needs:", *needs_plan,
            "  script:",
            "    - " + _yaml_string(_INSTALL),
            f"    - {_yaml_string(cell.command)}",
            "  artifacts:",
            "    when: always",
            "    paths:",
            f"      - {_yaml_string(RESULTS_DIR + '/' + cell.id + '.json')}",
            ""]
    lines += [
        "matrix-merge:",
        "  stage: matrix-merge",
        f"  image: {_yaml_string('python:' + (plan.cells[0].python if plan.cells else '3.11'))}",
        "  when: always",
        "  needs:", *needs_plan,
        *[f"    - job: {_yaml_string('matrix-cell ' + c.id)}\n      artifacts: true" for c in plan.cells],
        "  script:",
        "    - " + _yaml_string("pip install -e ."),
        "    - " + _yaml_string(f"mkdir -p {RESULTS_DIR}"),
        "    - " + _yaml_string(f"pjrt-hub matrix merge --plan {PLAN_FILE} {RESULTS_DIR} --output matrix"),
        "  artifacts:",
        "    when: always",
        "    paths:",
        "      - matrix/",
        ""]
    return "\n".join(lines)


def render_plan(plan: MatrixPlan, fmt: str) -> str:
    """The plan as ``github`` (``{"include": [...]}``), ``gitlab`` (child pipeline YAML) or ``json``."""
    if fmt == "github":
        return _github(plan)
    if fmt == "gitlab":
        return _gitlab(plan)
    if fmt == "json":
        return plan.model_dump_json(indent=2)
    raise PlanError(f"unknown plan format {fmt!r}: choose one of {', '.join(PLAN_FORMATS)}")
