"""The pytest plugin: ``pytest --pjrt-plugin NAME`` runs the conformance suite on a plugin.

Registered through the ``pytest11`` entry point, so it is loaded in every pytest run of an
environment where pjrt-hub is installed. It therefore does nothing but add its options until one
of them is given: no pjrt-hub module is imported, no item is added, no hook runs.
"""

from __future__ import annotations

import pytest

__all__ = ["pytest_addoption", "pytest_configure"]


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("pjrt", "PJRT plugin conformance (pjrt-hub)")
    group.addoption("--pjrt-plugin", action="append", default=[], metavar="NAME",
                    help="run the PJRT conformance suite on this plugin: a registry name or the path of a "
                         "PJRT C plugin library (repeatable)")
    group.addoption("--pjrt-framework-version", default=None, metavar="MAJOR.MINOR",
                    help="act as a framework at this PJRT API version (default: the newest in the history)")
    group.addoption("--pjrt-strict", action="store_true", default=False,
                    help="require the exact framework version (the version policy's strict mode)")
    group.addoption("--pjrt-window-weeks", type=int, default=None, metavar="N",
                    help="forward-compatibility window for older plugins, in weeks (default 6)")
    group.addoption("--pjrt-floor-minor", type=int, default=None, metavar="MINOR",
                    help="oldest plugin minor accepted where the history has no dates (default: upstream's)")
    group.addoption("--pjrt-case", action="append", default=[], metavar="PATTERN",
                    help="only the cases whose id (group/name) matches this fnmatch pattern (repeatable)")
    group.addoption("--pjrt-timeout-scale", type=float, default=1.0, metavar="X",
                    help="multiply every case's time bound by X (slow machines, debuggers)")
    group.addoption("--pjrt-report", default=None, metavar="FILE",
                    help="write the conformance report as JSON (schema: pjrt-hub conformance --schema)")
    group.addoption("--pjrt-in-process", action="store_true", default=False,
                    help="run the cases of C plugins and of other distributions' Python plugins in this "
                         "process rather than in a worker process (a crash of the plugin then ends the run; "
                         "for debuggers)")
    group.addoption("--pjrt-via", default=None, choices=("c_api", "jax"),
                    help="run the suite on each named Python plugin served as a PJRT_Api struct and consumed "
                         "back through the C bridge (c_api), with the struct registered with JAX and the jax "
                         "cases added (jax); the plugin is reported as NAME@VIA")
    group.addoption("--pjrt-only", action="store_true", default=False,
                    help="run only the conformance cases; deselect the other collected tests")


def pytest_configure(config: pytest.Config) -> None:
    if config.getoption("pjrt_plugin", default=None):
        from ._session import ConformanceSession

        config.pluginmanager.register(ConformanceSession(config), "pjrt-conformance-session")
