"""C plugins, and Python plugins of other distributions, run their cases in a worker process, so
that a crash is a failed case, not a dead run.

A C plugin lives in the process that loads it: a segfault or an abort inside it ends that
process, with pytest and every result in it; so may a Python plugin, through the native code it
calls or an ``os._exit``. So the suite drives each such plugin from a worker
(``python -m pjrt_hub.testing._worker``) that loads it once and runs cases as asked, one JSON
line per case each way. When the worker dies, the case it was running fails with the signal and
the last lines the plugin wrote to stderr, a fresh worker takes the next case, and after
:data:`MAX_CONSECUTIVE_CRASHES` deaths in a row without a case finishing, the remaining cases fail
at once rather than each paying for a new worker. A worker that stops answering is killed after
the case's own time bound plus :data:`WORKER_GRACE` seconds, and counts as a crash.

The worker has its own registry, built from the same request, so it sees the plugin exactly as
the parent does; the parent keeps deciding what applies and what is a declared limitation.
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from typing import IO, Any, Callable, Mapping

from pjrt_hub._registry import child_environment

from ._case import CASES, Case, CaseFailure, CaseSkipped

__all__ = ["CaseWorker", "MAX_CONSECUTIVE_CRASHES", "WORKER_GRACE", "isolation_available"]

#: Seconds a worker may take beyond a case's time bound: starting, importing, probing the plugin.
WORKER_GRACE = 60.0
#: Worker deaths in a row (no case finished in between) after which the rest of the cases fail
#: without starting another worker.
MAX_CONSECUTIVE_CRASHES = 3
#: Lines of the worker's stderr kept for a crash report.
STDERR_TAIL = 12
#: Seconds a worker whose pipe closed is given to exit by itself, so that its exit status is known.
EXIT_WAIT = 2.0
#: How often a worker that has not answered yet is checked for being gone, in seconds.
POLL_S = 0.5


def isolation_available() -> bool:
    """Workers need POSIX pipes and process groups (every PJRT plugin wheel is Linux-only anyway)."""
    return os.name == "posix"


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    """SIGKILL the worker's process group (it leads a session of its own): the worker, if it
    is still there, and whatever the plugin started in it."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass  # nothing left in it
    except PermissionError:
        if proc.poll() is None:
            proc.kill()


def _signal_name(returncode: int | None) -> str:
    if returncode is None:
        return "no exit status"
    if returncode < 0:
        try:
            return signal.Signals(-returncode).name
        except ValueError:
            return f"signal {-returncode}"
    return f"exit status {returncode}"


class CaseWorker:
    """The parent's end: one worker process for one plugin, restarted after a crash."""

    def __init__(self, asked: str, *, timeout_scale: float, policy: Mapping[str, Any]) -> None:
        """``policy``: the run's version policy, as :func:`._session.make_registry` takes it."""
        self.config = {"asked": asked, "timeout_scale": timeout_scale, "policy": dict(policy)}
        self.timeout_scale = timeout_scale
        self._proc: subprocess.Popen[bytes] | None = None
        self._read_fd: int | None = None
        self._buffer = b""
        self._stderr: IO[bytes] | None = None
        self.crashes_in_a_row = 0
        self.last_crash: str | None = None
        #: The plugin's load outcome and reason as the worker last reported them, if it did.
        self.record: dict[str, Any] | None = None
        self.grace = WORKER_GRACE

    # -- the process -----------------------------------------------------------------------

    def command(self, protocol_fd: int) -> list[str]:
        """The worker's command line; it answers on ``protocol_fd``."""
        return [sys.executable, "-m", "pjrt_hub.testing._worker", str(protocol_fd)]

    def _start(self) -> None:
        read_fd, write_fd = os.pipe()
        self._stderr = tempfile.TemporaryFile(prefix="pjrt-conformance-worker-")
        try:
            # The suite's sys.path too: a plugin importable here (pytest's rootdir or ``pythonpath``,
            # a path added at run time) must be importable in the worker.
            self._proc = subprocess.Popen(
                self.command(write_fd),
                stdin=subprocess.PIPE, stdout=self._stderr, stderr=self._stderr, pass_fds=(write_fd,),
                start_new_session=True, env=child_environment())
        finally:
            os.close(write_fd)
        self._read_fd = read_fd
        self._buffer = b""
        assert self._proc.stdin is not None
        self._proc.stdin.write((json.dumps(self.config) + "\n").encode())
        self._proc.stdin.flush()

    def _stop(self, *, kill: bool) -> int | None:
        proc, self._proc = self._proc, None
        if self._read_fd is not None:
            os.close(self._read_fd)
            self._read_fd = None
        if proc is None:
            return None
        if kill:
            _kill_group(proc)
        try:
            if proc.stdin is not None:
                proc.stdin.close()
        except OSError:
            pass
        try:
            code = proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            _kill_group(proc)
            code = proc.wait()
        # What the plugin started in the worker's session (helper processes, forked children)
        # goes with it, even once the worker itself is gone.
        _kill_group(proc)
        return code

    def _stderr_tail(self) -> str:
        if self._stderr is None:
            return ""
        self._stderr.seek(0)
        lines = [ln for ln in self._stderr.read().decode("utf-8", errors="replace").splitlines() if ln.strip()]
        self._stderr.close()
        self._stderr = None
        return "\n".join(lines[-STDERR_TAIL:])

    def close(self) -> None:
        """End the worker (between runs, or at the end of the session)."""
        self._stop(kill=False)
        if self._stderr is not None:
            self._stderr.close()
            self._stderr = None

    # -- one case --------------------------------------------------------------------------

    def _read_line(self, deadline: float) -> bytes | None:
        """The next protocol line, or None when the worker died: its end of the pipe closed, or
        it is gone while a process it forked still holds that end open."""
        assert self._read_fd is not None and self._proc is not None
        while b"\n" not in self._buffer:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError
            ready, _, _ = select.select([self._read_fd], [], [], min(remaining, POLL_S))
            if not ready:
                if self._proc.poll() is not None and not select.select([self._read_fd], [], [], 0)[0]:
                    return None
                continue
            chunk = os.read(self._read_fd, 65536)
            if not chunk:
                return None
            self._buffer += chunk
        line, self._buffer = self._buffer.split(b"\n", 1)
        return line

    def _lost(self, what: "str | Callable[[int | None], str]") -> tuple[int | None, str]:
        """Stop a worker that failed its case (killing its group) and count it towards giving
        up; ``what`` (or ``what(exit status)``) is the failure the give-up message names. Returns
        the exit status and the last lines of its stderr."""
        code = self._stop(kill=True)
        tail = self._stderr_tail()
        self.crashes_in_a_row += 1
        self.last_crash = what if isinstance(what, str) else what(code)
        return code, tail

    def run(self, item: Case) -> None:
        """Run ``item`` in the worker: return if it passed, raise CaseSkipped or CaseFailure."""
        if self.crashes_in_a_row >= MAX_CONSECUTIVE_CRASHES:
            raise CaseFailure(f"not run: the plugin crashed the conformance worker {self.crashes_in_a_row} times "
                              f"in a row (last: {self.last_crash})")
        if self._proc is None:
            self._start()
        assert self._proc is not None and self._proc.stdin is not None
        limit = self.timeout_scale * item.timeout + self.grace
        try:
            self._proc.stdin.write((json.dumps({"case": item.id}) + "\n").encode())
            self._proc.stdin.flush()
            line = self._read_line(time.monotonic() + limit)
        except TimeoutError:
            _, tail = self._lost(f"no answer within {limit:g} s during {item.id}")
            raise CaseFailure(f"{item.id}: the conformance worker gave no answer within {limit:g} s and was "
                              f"killed" + (f"; its last lines:\n{tail}" if tail else "")) from None
        except BrokenPipeError:
            line = None
        if line is None:
            # Its end of the pipe closed: it is exiting (or dead). Its own exit status, if it comes
            # at once, says more than the SIGKILL that stops whatever is left of it.
            try:
                self._proc.wait(timeout=EXIT_WAIT)
            except subprocess.TimeoutExpired:
                pass
            code, tail = self._lost(lambda code: f"{_signal_name(code)} during {item.id}")
            raise CaseFailure(f"the plugin crashed the conformance worker ({_signal_name(code)}) during "
                              f"{item.id}" + (f"; its last lines:\n{tail}" if tail else ""))
        answer = json.loads(line)
        if "setup_error" in answer:  # the worker could not make what the suite made: no case ran
            self._lost(f"the worker could not load {self.config['asked']}")
            raise CaseFailure(f"{item.id}: the conformance worker could not load plugin {self.config['asked']!r}, "
                              f"which this process loaded: {answer['setup_error']}")
        self.crashes_in_a_row = 0
        if isinstance(answer.get("record"), dict):
            self.record = answer["record"]
        outcome, message = answer.get("outcome"), answer.get("message") or ""
        if outcome == "skipped":
            raise CaseSkipped(message)
        if outcome == "failed":
            raise CaseFailure(message)
        if outcome != "passed":
            raise CaseFailure(f"the conformance worker answered {answer!r} for {item.id}")


# -- the worker's end ------------------------------------------------------------------------


def _serve(protocol: IO[str]) -> None:
    from ._context import PluginUnderTest
    from ._runner import run_case
    from ._session import make_registry
    from . import cases as _cases  # noqa: F401 - registers the cases

    config = json.loads(sys.stdin.readline())
    try:
        # This process is the one at stake already: the plugin is imported here, not first in a
        # child.
        registry, names = make_registry([config["asked"]], **config["policy"], isolate_python=False)
        ctx = PluginUnderTest(registry, names[0], timeout_scale=config["timeout_scale"])
    except Exception as exc:  # noqa: BLE001 - the parent hears it instead of a bare exit status
        protocol.write(json.dumps({"setup_error": f"{type(exc).__name__}: {exc}"}) + "\n")
        return
    for line in sys.stdin:
        request = json.loads(line)
        case_id = request["case"]
        answer: dict[str, Any] = {"case": case_id}
        try:
            run_case(CASES[case_id], ctx)
        except CaseSkipped as exc:
            answer.update(outcome="skipped", message=str(exc))
        except CaseFailure as exc:
            answer.update(outcome="failed", message=str(exc))
        except BaseException as exc:  # noqa: BLE001 - reported, not raised: the worker goes on
            answer.update(outcome="failed", message=f"the conformance worker raised {type(exc).__name__}: {exc}\n"
                                                    + traceback.format_exc(limit=8))
        else:
            answer.update(outcome="passed")
        # The plugin as this process knows it now: a Python plugin whose Api could not be made is
        # recorded as failed here, where its Api was asked for, and the parent reports that.
        record = ctx.record
        answer["record"] = {"outcome": record.outcome.value, "reason": record.reason}
        protocol.write(json.dumps(answer) + "\n")
        protocol.flush()


def _main(argv: list[str]) -> int:
    protocol = os.fdopen(int(argv[0]), "w", buffering=1)
    try:
        _serve(protocol)
    finally:
        protocol.flush()
    sys.stdout.flush()
    sys.stderr.flush()
    # Cases leave daemon threads and a client behind; the plugin's static destructors are no
    # business of the suite's.
    os._exit(0)


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
