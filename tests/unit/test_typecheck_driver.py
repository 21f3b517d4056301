"""The type check's module map (.ci/typecheck.py) is the map Python imports by.

mypy is handed each source file under the module name the driver derives from pyproject.toml's
``package-dir``; a wrong name would make mypy check a module nobody imports, or miss one. The
editable install resolves the same names through its own finder, so the two must agree file for
file. Needs no mypy: the driver imports it only to run it.
"""

from __future__ import annotations

import importlib.util
import runpy
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _package_modules() -> list[tuple[Path, str]]:
    driver = runpy.run_path(str(ROOT / ".ci" / "typecheck.py"))
    return driver["package_modules"](ROOT)


def test_every_module_mypy_checks_is_the_file_python_imports_under_that_name():
    modules = _package_modules()
    assert len(modules) > 100
    for path, name in modules:
        spec = importlib.util.find_spec(name)
        assert spec is not None and spec.origin is not None, name
        assert Path(spec.origin).resolve() == (ROOT / path).resolve(), (name, path, spec.origin)


def test_the_folders_the_design_card_keeps_at_the_root_are_checked_under_pjrt_hub():
    by_path = {path.as_posix(): name for path, name in _package_modules()}
    assert by_path["abi/errors.py"] == "pjrt_hub.abi.errors"
    assert by_path["extensions/__init__.py"] == "pjrt_hub.extensions"
    assert by_path["backends/numba_cpu/codegen.py"] == "pjrt_hub.backends.numba_cpu.codegen"
    assert by_path["compat_matrix/_plan.py"] == "pjrt_hub.compat_matrix._plan"
    assert by_path["pjrt_hub/cli.py"] == "pjrt_hub.cli"
