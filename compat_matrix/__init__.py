"""``pjrt_hub.compat_matrix``: plugins x framework API versions x environments.

A matrix is planned (:func:`make_plan`: the jobs, as data a CI fans out), each job runs its cells
(the version verdict, and the conformance suite where it accepts, each cell in its own process)
and writes a self-describing result, and :func:`merge_results` joins them into ``matrix.json``
(:class:`MatrixReport`), ``matrix.md`` and ``matrix.html``. ``pjrt-hub matrix`` does the three on
one machine. Cells are cached by what decides them.
"""

from __future__ import annotations

import os
from pathlib import Path

from ._axes import (
    DEFAULT_ENVIRONMENTS,
    DEFAULT_FRAMEWORKS,
    FIXTURE_PLUGINS,
    KNOWN_C_DISTRIBUTIONS,
    REAL_C_PLUGINS,
    FixturePlugin,
    MatrixEnvironment,
    RealCPlugin,
    environment_facts,
    environment_info,
)
from ._cache import CellCache, cache_key, default_cache_dir
from ._cell import CellSpec, evaluate_cell, run_cell
from ._jobs import (MergeError, job_is_red, load_plan, load_results, matrix_project, merge_results, no_checkout,
                    run_job_here, run_job_tox, run_plan, tox_command, write_result)
from ._models import (RED, CaseBrief, CellReport, CellResult, CellStatus, EnvironmentInfo, JobInfo, MatrixPlan,
                      MatrixReport, PlanCell, PluginInfo)
from ._plan import PLAN_FORMATS, SPLITS, PlanError, PluginNotFound, make_plan, render_plan
from ._render import render_html, render_markdown
from ._run import MatrixRun, merge, run_environment

#: The tox environments ``pjrt-hub matrix`` runs by default (tox.ini defines them).
DEFAULT_TOX_ENVS = tuple(e.name for e in DEFAULT_ENVIRONMENTS)

__all__ = [
    "CaseBrief", "CellCache", "CellReport", "CellResult", "CellSpec", "CellStatus", "DEFAULT_ENVIRONMENTS",
    "DEFAULT_FRAMEWORKS", "DEFAULT_TOX_ENVS", "EnvironmentInfo", "FIXTURE_PLUGINS", "FixturePlugin", "JobInfo",
    "KNOWN_C_DISTRIBUTIONS", "MatrixEnvironment", "MatrixPlan", "MatrixReport", "MatrixRun", "MergeError",
    "PLAN_FORMATS", "PlanCell", "PlanError", "PluginInfo", "PluginNotFound", "RED", "REAL_C_PLUGINS", "RealCPlugin",
    "SPLITS", "cache_key", "default_cache_dir", "environment_facts", "environment_info", "evaluate_cell",
    "job_is_red", "load_plan", "load_results", "make_plan", "matrix_project", "merge", "merge_results",
    "no_checkout", "render_html", "render_markdown", "render_plan", "run_cell", "run_environment", "run_job_here",
    "run_job_tox", "run_plan", "tox_command", "write_outputs", "write_result",
]


def write_outputs(report: MatrixReport, output: "str | os.PathLike[str]") -> dict[str, str]:
    """Write matrix.json, matrix.md and matrix.html into ``output`` (each atomically); return
    their paths."""
    out = Path(output)
    out.mkdir(parents=True, exist_ok=True)
    texts = {"json": ("matrix.json", report.model_dump_json(indent=2)), "md": ("matrix.md", render_markdown(report)),
             "html": ("matrix.html", render_html(report))}
    paths = {}
    for kind, (name, text) in texts.items():
        target = out / name
        tmp = out / f".{name}.tmp"
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, target)
        paths[kind] = str(target)
    return paths
