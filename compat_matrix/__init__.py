"""``pjrt_hub.compat_matrix``: plugins x framework API versions x environments.

``pjrt-hub matrix`` runs every cell (the version verdict, and the conformance suite where it
accepts), each in its own process, and writes ``matrix.json`` (:class:`MatrixReport`),
``matrix.md`` and ``matrix.html``. Cells are cached by what decides them.
"""

from __future__ import annotations

import os
from pathlib import Path

from ._axes import (
    DEFAULT_FRAMEWORKS,
    FIXTURE_PLUGINS,
    KNOWN_C_DISTRIBUTIONS,
    REAL_C_PLUGINS,
    FixturePlugin,
    RealCPlugin,
    environment_facts,
)
from ._cache import CellCache, cache_key
from ._cell import CellSpec, evaluate_cell, run_cell
from ._models import CaseBrief, CellResult, CellStatus, EnvironmentInfo, MatrixReport, PluginInfo
from ._render import render_html, render_markdown
from ._run import DEFAULT_TOX_ENVS, MatrixRun, merge, run_environment, run_tox

__all__ = [
    "CaseBrief", "CellCache", "CellResult", "CellSpec", "CellStatus", "DEFAULT_FRAMEWORKS", "DEFAULT_TOX_ENVS",
    "EnvironmentInfo", "FIXTURE_PLUGINS", "FixturePlugin", "KNOWN_C_DISTRIBUTIONS", "MatrixReport", "MatrixRun",
    "PluginInfo", "REAL_C_PLUGINS", "RealCPlugin", "cache_key", "environment_facts", "evaluate_cell", "merge",
    "render_html", "render_markdown", "run_cell", "run_environment", "run_tox", "write_outputs",
]


def write_outputs(report: MatrixReport, output: "str | os.PathLike[str]") -> dict[str, str]:
    """Write matrix.json, matrix.md and matrix.html into ``output``; return their paths."""
    out = Path(output)
    out.mkdir(parents=True, exist_ok=True)
    paths = {"json": out / "matrix.json", "md": out / "matrix.md", "html": out / "matrix.html"}
    paths["json"].write_text(report.model_dump_json(indent=2))
    paths["md"].write_text(render_markdown(report))
    paths["html"].write_text(render_html(report))
    return {k: str(v) for k, v in paths.items()}
