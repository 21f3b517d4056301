"""Running the suite from Python (the CLI, the compatibility matrix): pytest, in this process
(the cases of C plugins in worker processes, see :mod:`._worker`).

The run is isolated from wherever it is started: pytest gets an empty directory as its only
path and an empty ini file, so no ``conftest.py``, test file or ``addopts`` of the current
project joins in, and its cache stays off. The report comes back as the pydantic model.
"""

from __future__ import annotations

import contextlib
import io
import tempfile
from pathlib import Path
from typing import Sequence

from ._report import ConformanceReport

__all__ = ["ConformanceRunError", "run_conformance"]


class ConformanceRunError(RuntimeError):
    """pytest could not run the suite (a usage error); the message is pytest's output."""


def run_conformance(plugins: Sequence[str], *, framework: str | None = None, strict: bool = False,
                    cases: Sequence[str] = (), timeout_scale: float = 1.0, junit: str | None = None,
                    show_output: bool = False, extra_args: Sequence[str] = (),
                    via: str | None = None) -> ConformanceReport:
    """Run the conformance suite on ``plugins`` and return the report (``via``: through a
    transport, see :mod:`._via`).

    ``show_output`` lets pytest print to this process's stdout (otherwise its output is kept and
    only shown in the error of a run that could not start).
    """
    import pytest

    with tempfile.TemporaryDirectory(prefix="pjrt-conformance-") as tmp:
        root = Path(tmp)
        (root / "pytest.ini").write_text("[pytest]\n")
        report_path = root / "report.json"
        args = [str(root), "-c", str(root / "pytest.ini"), "--rootdir", str(root), "-p", "pjrt_hub",
                "-p", "no:cacheprovider", "-q", "--pjrt-only", "--pjrt-report", str(report_path),
                "--pjrt-timeout-scale", str(timeout_scale)]
        for name in plugins:
            args += ["--pjrt-plugin", name]
        for pattern in cases:
            args += ["--pjrt-case", pattern]
        if framework:
            args += ["--pjrt-framework-version", str(framework)]
        if strict:
            args.append("--pjrt-strict")
        if via:
            args += ["--pjrt-via", via]
        if junit:
            args += ["--junitxml", str(Path(junit).resolve())]
        args += list(extra_args)
        output = io.StringIO()
        sink = contextlib.nullcontext() if show_output else contextlib.redirect_stdout(output)
        with sink:
            code = pytest.main(args)
        if not report_path.exists():
            raise ConformanceRunError(f"pytest exited with {int(code)} before the suite ran:\n{output.getvalue()}")
        return ConformanceReport.model_validate_json(report_path.read_text())
