"""Run mypy over the installed ``pjrt_hub`` namespace, reading its modules from their source folders.

The package is laid out by ``[tool.setuptools] package-dir``: ``abi/`` installs as
``pjrt_hub.abi``, ``backends/`` as ``pjrt_hub.backends`` and so on. mypy names a module by its
path, so ``mypy abi`` would check a package called ``abi`` and could not follow the code's own
``pjrt_hub.abi`` imports, and the editable install is an import hook that no static checker
follows (python/mypy#13392). This driver gives mypy each file with the module name setuptools
installs it under, taken from pyproject.toml (the one place that layout is written), so errors
name the real source files. Options come from ``[tool.mypy]`` as for a plain ``mypy`` run, and
any arguments are passed on to mypy (``--strict``, ``--show-error-codes`` ...).

Usage: ``.venv/bin/python .ci/typecheck.py [mypy options]``; exit status 0 when clean, 1 when
mypy reports an error, 2 when it could not run.
"""

from __future__ import annotations

import os
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def package_modules(root: Path = ROOT) -> list[tuple[Path, str]]:
    """``(file, module name)`` for each ``.py`` file of each package pyproject.toml installs,
    the file relative to ``root``.

    A package's folder is found as setuptools finds it: the longest ``package-dir`` prefix of
    its name, then one folder per remaining name part.
    """
    setuptools = tomllib.loads((root / "pyproject.toml").read_text())["tool"]["setuptools"]
    package_dir: dict[str, str] = setuptools.get("package-dir", {})
    modules = []
    for package in setuptools["packages"]:
        parts = package.split(".")
        for cut in range(len(parts), -1, -1):
            prefix = ".".join(parts[:cut])
            if prefix in package_dir or cut == 0:
                folder = root / package_dir.get(prefix, "") / Path(*parts[cut:])
                break
        for path in sorted(folder.glob("*.py")):
            module = package if path.stem == "__init__" else f"{package}.{path.stem}"
            modules.append((path.relative_to(root), module))
    return modules


def main(argv: list[str]) -> int:
    # mypy is imported here, not at the top, so that the tests can read package_modules without
    # the lint extra.
    from mypy.build import BuildSource, build
    from mypy.errors import CompileError
    from mypy.main import process_options

    os.chdir(ROOT)  # where mypy finds [tool.mypy], and what the reported paths are relative to
    _, options = process_options(argv, require_targets=False)
    sources = [BuildSource(str(path), module, None) for path, module in package_modules()]
    try:
        result = build(sources, options, stdout=sys.stdout, stderr=sys.stderr)
    except CompileError as error:
        print("\n".join(error.messages), file=sys.stderr)
        return 2
    for line in result.errors:
        print(line)
    found = sum(": error:" in line for line in result.errors)
    files = len({line.split(":", 1)[0] for line in result.errors if ": error:" in line})
    if found:
        print(f"Found {found} error{'s' * (found != 1)} in {files} file{'s' * (files != 1)}")
        return 1
    print(f"Success: no issues found in {len(sources)} source files")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
