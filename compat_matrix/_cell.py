"""One cell: a plugin at a framework version, judged and (where accepted) tested, in its own process.

The parent (:func:`run_cell`) starts ``python -m pjrt_hub.compat_matrix._cell_main`` with a time bound.
The child reads the verdict through the registry, as a framework at that version would, and runs
the conformance suite where the verdict accepts; it writes the :class:`CellResult` as JSON. A child
that crashes (a segfaulting library, an abort, ``sys.exit`` in a plugin) or hangs becomes a red cell
with the reason: the exit status or signal and the end of its stderr, or the time-out.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

from ._models import CaseBrief, CellResult, CellStatus

__all__ = ["CellSpec", "evaluate_cell", "run_cell"]

#: Seconds a cell may take before it is a red "timed out" cell (a full suite with compiles).
DEFAULT_CELL_TIMEOUT = 900.0


@dataclass(frozen=True)
class CellSpec:
    """What one cell process needs: which plugin (a name, or a library path), at which framework."""

    plugin: str
    framework: str
    environment: str
    key: str = ""
    #: Extra ``PYTHONPATH`` entries (the fixture site) and environment for the child.
    python_path: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict)
    cases: tuple[str, ...] = ()
    timeout_scale: float = 1.0


def _briefs(cases: list, outcome: str) -> list[CaseBrief]:
    return [CaseBrief(id=c.id, message=f"limitation: {c.limitation} ({c.message})" if c.limitation else c.message,
                      limitation=c.limitation) for c in cases if c.outcome.value == outcome]


def evaluate_cell(plugin: str, framework: str, environment: str, *, cases: Sequence[str] = (),
                  timeout_scale: float = 1.0) -> CellResult:
    """Judge and test one plugin in this process (the child's work)."""
    from pjrt_hub.testing._run import run_conformance
    from pjrt_hub.testing._session import make_registry

    started = time.monotonic()
    base = {"plugin": plugin, "environment": environment, "framework_version": framework}
    registry, (name,) = make_registry([plugin], framework=framework)
    try:
        record = registry.record(name)
    except Exception as exc:  # NotFound: the plugin is not in this environment
        return CellResult(**base, status=CellStatus.ERROR, error=str(exc))
    base["plugin"] = record.name
    base["plugin_api_version"] = record.api_version
    verdict = record.verdict
    if verdict is None:
        return CellResult(**base, status=CellStatus.ERROR, reasons=[record.reason or ""],
                          error=f"{record.outcome.value}: {record.reason}" + (f" ({record.error})" if record.error else ""),
                          duration_s=round(time.monotonic() - started, 3))
    judged = {"accepted": verdict.accepted, "rule": verdict.rule, "reasons": list(verdict.reasons)}
    if not verdict.accepted or record.outcome.value == "incompatible":
        return CellResult(**base, status=CellStatus.REFUSED, **{**judged, "accepted": False},
                          duration_s=round(time.monotonic() - started, 3))
    if record.outcome.value != "loaded":
        return CellResult(**base, status=CellStatus.ERROR, **judged,
                          error=f"{record.outcome.value}: {record.reason}", duration_s=round(time.monotonic() - started, 3))
    report = run_conformance([plugin], framework=framework, cases=cases, timeout_scale=timeout_scale)
    (result,) = report.plugins
    return CellResult(**base, **judged, status=CellStatus.PASSED if result.ok else CellStatus.FAILED,
                      counts=result.counts, failures=_briefs(result.cases, "failed"),
                      xfailed=_briefs(result.cases, "xfailed"), skipped=_briefs(result.cases, "skipped"),
                      duration_s=round(time.monotonic() - started, 3))


def _signal_name(code: int) -> str:
    try:
        return signal.Signals(-code).name
    except ValueError:
        return f"signal {-code}"


def run_cell(spec: CellSpec, *, timeout: float = DEFAULT_CELL_TIMEOUT) -> CellResult:
    """Run one cell in a child process; a crash or a hang is a red cell, never an exception."""
    base = {"plugin": spec.plugin, "environment": spec.environment, "framework_version": spec.framework,
            "key": spec.key}
    env = dict(os.environ, **spec.env)
    if spec.python_path:
        env["PYTHONPATH"] = os.pathsep.join([*spec.python_path, *filter(None, [env.get("PYTHONPATH")])])
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="pjrt-cell-") as tmp:
        out = Path(tmp) / "cell.json"
        command = [sys.executable, "-m", "pjrt_hub.compat_matrix._cell_main", "--plugin", spec.plugin,
                   "--framework-version", spec.framework, "--environment", spec.environment, "--out", str(out),
                   "--timeout-scale", str(spec.timeout_scale)]
        for pattern in spec.cases:
            command += ["--case", pattern]
        # Its own session, so that a time-out ends the cell's process group (a plugin's helper
        # processes too), all of which this call started.
        proc = subprocess.Popen(command, env=env, cwd=tmp, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True, start_new_session=True)
        try:
            _, stderr = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.communicate()
            return CellResult(**base, status=CellStatus.ERROR, duration_s=round(time.monotonic() - started, 3),
                              error=f"timed out after {timeout:g} s: the plugin hung (the cell's process was killed)")
        elapsed = round(time.monotonic() - started, 3)
        if out.exists():
            result = CellResult.model_validate_json(out.read_text())
            return result.model_copy(update={"key": spec.key, "duration_s": elapsed})
        code = proc.returncode
        how = _signal_name(code) if code < 0 else f"exit status {code}"
        # The end of its stderr, without a traceback's ^^^ markers, which say nothing on one line.
        lines = [line for line in (stderr or "").strip().splitlines() if line.strip(" ^~")]
        tail = " | ".join(line.strip() for line in lines[-6:])
        return CellResult(**base, status=CellStatus.ERROR, duration_s=elapsed,
                          error=f"the cell's process crashed ({how}) before it reported" + (f": {tail}" if tail else ""))
