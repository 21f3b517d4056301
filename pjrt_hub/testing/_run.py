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
from typing import Any, Callable, Sequence

from ._report import ConformanceReport

__all__ = ["ConformanceRunError", "run_conformance"]


class ConformanceRunError(RuntimeError):
    """pytest could not run the suite (a usage error); the message is pytest's output."""


#: ``progress(done, total, case)``: called as each case starts.
Progress = Callable[[int, int, str], None]


class _ProgressReporter:
    """A pytest plugin that tells ``progress``, as each case starts, how many cases ran, of how
    many, and which one runs now."""

    def __init__(self, progress: Progress) -> None:
        self.progress = progress
        self.total = 0
        self.done = 0

    def pytest_collection_finish(self, session: Any) -> None:
        self.total = len(session.items)

    def pytest_runtest_logstart(self, nodeid: str, location: Any) -> None:
        self.progress(self.done, self.total, _case_label(nodeid))

    def pytest_runtest_logfinish(self, nodeid: str, location: Any) -> None:
        self.done += 1


def _case_label(nodeid: str) -> str:
    """``pjrt-conformance[numba_cpu]::execute/add`` -> ``numba_cpu: execute/add``."""
    suite, _, case = nodeid.rpartition("::")
    plugin = suite[suite.find("[") + 1:suite.rfind("]")] if "[" in suite else suite
    return f"{plugin}: {case}" if plugin else case


def run_conformance(plugins: Sequence[str], *, framework: str | None = None, strict: bool = False,
                    window_weeks: int | None = None, floor_minor: int | None = None,
                    cases: Sequence[str] = (), timeout_scale: float = 1.0, junit: str | None = None,
                    show_output: bool = False, extra_args: Sequence[str] = (),
                    progress: Progress | None = None, via: str | None = None) -> ConformanceReport:
    """Run the conformance suite on ``plugins`` and return the report (``via``: through a
    transport, see :mod:`._via`).

    ``show_output`` lets pytest print to this process's stdout (otherwise its output is kept and
    only shown in the error of a run that could not start). ``progress`` hears of every case.
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
        if window_weeks is not None:
            args += ["--pjrt-window-weeks", str(window_weeks)]
        if floor_minor is not None:
            args += ["--pjrt-floor-minor", str(floor_minor)]
        if via:
            args += ["--pjrt-via", via]
        if junit:
            args += ["--junitxml", str(Path(junit).resolve())]
        args += list(extra_args)
        output = io.StringIO()
        sink = contextlib.nullcontext() if show_output else contextlib.redirect_stdout(output)
        reporters = [_ProgressReporter(progress)] if progress is not None else []
        with sink:
            code = pytest.main(args, plugins=reporters)
        if code == pytest.ExitCode.INTERRUPTED:
            raise KeyboardInterrupt  # pytest caught the user's Ctrl-C; it is theirs to see
        if code in (pytest.ExitCode.USAGE_ERROR, pytest.ExitCode.INTERNAL_ERROR) or not report_path.exists():
            # A report may exist even then (it is written at the end of every session), but it
            # describes a run that did not happen as asked.
            said = " ".join(output.getvalue().split())
            raise ConformanceRunError(f"pytest exited with status {int(code)} before the suite ran"
                                      + (f": {said[:2000]}" if said else ""))
        return ConformanceReport.model_validate_json(report_path.read_text())
