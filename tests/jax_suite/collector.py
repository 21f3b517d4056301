"""The pytest plugin the runner loads into each child pytest (``-p tests.jax_suite.collector``):
it keeps the tests the runner chose, tells JAX's test utilities what device they test, writes
one JSON line per test as it starts and ends, and ends the process when a test overruns.

Its options come from the environment, not the command line, so that a plain ``pytest`` run
started by hand with the same variables behaves the same: ``JAX_SUITE_IDS`` (a JSON list of node
ids to keep; the others are deselected), ``JAX_SUITE_LOG`` (the JSON-lines file, appended to),
``JAX_SUITE_TIMEOUT`` (seconds per test, setup and teardown included) and ``JAX_SUITE_DUT``
(the value of JAX's ``jax_test_dut`` flag: ``cpu`` makes ``jtu.device_under_test()`` and
``jtu.test_device_matches`` treat a served plugin as a CPU, as JAX's own CPU runs are treated).

A test that overruns is recorded as ``timeout`` and the process exits at once: a hung numba
compile or a deadlocked execute cannot be interrupted from Python, and the runner starts a new
process for the tests that are left. A process that dies inside a test (an abort in jaxlib)
leaves a ``start`` line without its ``end``, which the runner reads as a crash of that test. Where
a test hung goes to ``<log>.hang.txt`` (every thread's stack).
"""

from __future__ import annotations

import faulthandler
import json
import os
import threading
import time
from typing import Any, Iterator

import pytest

_LOCK = threading.Lock()


def _write(record: dict[str, Any]) -> None:
    path = os.environ.get("JAX_SUITE_LOG")
    if not path:
        return
    with _LOCK, open(path, "a", encoding="utf-8") as out:
        out.write(json.dumps(record) + "\n")
        out.flush()
        os.fsync(out.fileno())


def pytest_configure(config: pytest.Config) -> None:
    dut = os.environ.get("JAX_SUITE_DUT")
    if dut:
        # Before collection: JAX's test modules call supported_dtypes() (which asks for the device
        # under test) while they build their parameterisations at import.
        # The flag is defined by JAX's test utilities, not by jax itself.
        import jax
        from jax._src import test_util  # noqa: F401

        jax.config.update("jax_test_dut", dut)


def pytest_sessionstart(session: pytest.Session) -> None:
    # Which backend the tests will get by default: the runner checks that a numba_cpu run is one.
    if os.environ.get("JAX_SUITE_LOG"):
        import jax

        _write({"event": "session", "platform": jax.default_backend(),
                "device": str(jax.devices()[0].platform)})


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    path = os.environ.get("JAX_SUITE_IDS")
    if path:
        with open(path, encoding="utf-8") as f:
            wanted = set(json.load(f))
        kept = [item for item in items if item.nodeid in wanted]
        dropped = [item for item in items if item.nodeid not in wanted]
        if dropped:
            config.hook.pytest_deselected(items=dropped)
        items[:] = kept


@pytest.hookimpl(trylast=True)
def pytest_collection_finish(session: pytest.Session) -> None:
    # What this child will run (after -k and the runner's choice): a run of a whole file learns
    # its tests here, without a separate collection.
    _write({"event": "collected", "ids": [item.nodeid for item in session.items]})


class _Test:
    """The phases of the running test, folded into one outcome."""

    def __init__(self, nodeid: str) -> None:
        self.nodeid = nodeid
        self.outcome = "passed"
        self.message = ""
        self.started = time.monotonic()

    def add(self, report: pytest.TestReport) -> None:
        if report.failed:
            if self.outcome != "failed":
                self.outcome = "failed"
                self.message = _first_line(report)
        elif report.skipped and self.outcome == "passed":
            # A skip (or an xfail, which pytest reports as skipped) in any phase.
            self.outcome = "xfailed" if hasattr(report, "wasxfail") else "skipped"
            self.message = _first_line(report)


def _first_line(report: pytest.TestReport) -> str:
    longrepr = report.longrepr
    if isinstance(longrepr, tuple):  # a skip: (path, line, reason)
        text = str(longrepr[2])
    else:
        crash = getattr(longrepr, "reprcrash", None)
        text = crash.message if crash is not None else str(longrepr or "")
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[0][:400] if lines else ""


_CURRENT: dict[str, _Test] = {}


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    timeout = float(os.environ.get("JAX_SUITE_TIMEOUT", "0") or 0)
    _write({"event": "start", "nodeid": item.nodeid})
    _CURRENT[item.nodeid] = _Test(item.nodeid)
    timer = None
    if timeout > 0:
        timer = threading.Timer(timeout, _overrun, args=(item.nodeid, timeout))
        timer.daemon = True
        timer.start()
    try:
        yield
    finally:
        if timer is not None:
            timer.cancel()
    test = _CURRENT.pop(item.nodeid)
    _write({"event": "end", "nodeid": item.nodeid, "outcome": test.outcome, "message": test.message,
            "duration": round(time.monotonic() - test.started, 3)})


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    test = _CURRENT.get(report.nodeid)
    if test is not None:
        test.add(report)


def _overrun(nodeid: str, timeout: float) -> None:
    _write({"event": "end", "nodeid": nodeid, "outcome": "timeout",
            "message": f"did not finish within {timeout:g} s", "duration": timeout})
    # Where it hung, beside the log (pytest captures stderr inside a test, and exiting loses it).
    with open(os.environ.get("JAX_SUITE_LOG", "jax-suite") + ".hang.txt", "a", encoding="utf-8") as out:
        out.write(f"{nodeid}: did not finish within {timeout:g} s\n")
        out.flush()
        faulthandler.dump_traceback(file=out, all_threads=True)
    os._exit(3)
