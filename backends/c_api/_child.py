"""Run a ``python -m ...`` child that reports JSON snapshots, and classify how it ended.

The probe and the client check share this: the child prints one JSON object per line as it goes;
the parent keeps the last one, kills the whole process group on timeout, and turns a negative
return code into the signal's name (SIGABRT is an abort, anything else a crash).
"""

from __future__ import annotations

import json
import os
import re
import signal as _signal
import subprocess
import sys
import time
from dataclasses import dataclass
from typing import Any

__all__ = ["ChildResult", "run_child"]


@dataclass(frozen=True, slots=True)
class ChildResult:
    snapshot: dict[str, Any]
    returncode: int | None
    timed_out: bool
    elapsed_s: float
    stderr_tail: str | None
    stderr_highlights: list[str]

    @property
    def signal(self) -> str | None:
        if self.returncode is None or self.returncode >= 0:
            return None
        try:
            return _signal.Signals(-self.returncode).name
        except ValueError:
            return f"signal {-self.returncode}"

    def failure(self, timeout: float) -> tuple[str, str] | None:
        """``(outcome, reason)`` when the child did not finish normally, else None."""
        stage = self.snapshot.get("stage")
        where = f" during {stage}" if stage else ""
        if self.timed_out:
            return "timed_out", f"no answer within {timeout:g} s{where}; the child was killed"
        if self.signal is not None:
            outcome = "aborted" if self.returncode == -_signal.SIGABRT else "crashed"
            return outcome, f"the child process died of {self.signal}{where}"
        if self.returncode != 0:
            return "crashed", f"the child process exited with status {self.returncode}{where}"
        if not self.snapshot.get("finished"):
            return "crashed", f"the child process stopped{where} without a report"
        return None


def _last_snapshot(stdout: str) -> dict[str, Any]:
    for line in reversed(stdout.splitlines()):
        line = line.strip()
        if line.startswith("{"):
            try:
                return json.loads(line)
            except json.JSONDecodeError:
                continue
    return {}


#: Lines of a dying plugin's stderr worth showing even when a stack trace buries them.
_HIGHLIGHT = re.compile(r"FATAL|Fatal|Check failed|terminate called|what\(\)|[Ee]rror[: ]|abort|cannot open")


def _highlights(text: str, limit: int = 8) -> list[str]:
    found = []
    for line in text.splitlines():
        line = line.strip()
        if line and _HIGHLIGHT.search(line) and not line.startswith(("File ", "---")):
            found.append(line[:300])
            if len(found) == limit:
                break
    return found


def _tail(text: str, lines: int = 12) -> str | None:
    text = text.strip()
    if not text:
        return None
    return "\n".join(text.splitlines()[-lines:])[-4000:]


def run_child(module: str, args: list[str], *, timeout: float,
              env: dict[str, str] | None = None) -> ChildResult:
    cmd = [sys.executable, "-m", module, *args]
    child_env = dict(os.environ if env is None else env)
    child_env.setdefault("PYTHONFAULTHANDLER", "1")
    start = time.monotonic()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=child_env, start_new_session=True)
    timed_out = False
    try:
        stdout, stderr = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        timed_out = True
        try:
            os.killpg(proc.pid, _signal.SIGKILL)
        except ProcessLookupError:
            pass
        stdout, stderr = proc.communicate()
    return ChildResult(_last_snapshot(stdout), proc.returncode, timed_out,
                       round(time.monotonic() - start, 3), _tail(stderr), _highlights(stderr))


def emit(snapshot: dict[str, Any]) -> None:
    """Child side: write one snapshot line and flush it before the next risky step."""
    sys.stdout.write(json.dumps(snapshot, default=str) + "\n")
    sys.stdout.flush()
