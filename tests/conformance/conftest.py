from __future__ import annotations

import contextlib
import io
import os
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import pytest

from pjrt_hub import Policy, PluginRegistry, RegistrySettings
from pjrt_hub.abi import ApiVersion
from pjrt_hub.testing import PluginUnderTest
from pjrt_hub.testing._mutation import run_matching

from ..real_plugins import skip_extra_unless_asked


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    skip_extra_unless_asked(config, items)



def run_direct(name: str, patterns: tuple[str, ...] = ("*",), *, framework: str | None = None,
               timeout_scale: float = 1.0) -> dict[str, tuple[str, str]]:
    """Run cases on an installed plugin without pytest: case id -> (outcome, message).

    Outcomes: passed, failed, skipped, xfailed (failed under a declared limitation), xpassed.
    """
    policy = Policy(framework=ApiVersion.parse(framework)) if framework else Policy()
    registry = PluginRegistry(RegistrySettings(policy=policy), environ={})
    return run_matching(PluginUnderTest(registry, name, timeout_scale=timeout_scale), patterns)


@pytest.fixture
def run_cases() -> Callable[..., dict[str, tuple[str, str]]]:
    return run_direct


@dataclass
class PytestRun:
    ret: int
    out: str
    err: str
    path: Path

    def outcomes(self) -> str:
        """The last line of pytest's summary (``2 passed, 148 deselected in 0.02s``)."""
        return self.out.strip().splitlines()[-1].strip("= ")


class InnerPytest:
    """pytest run inside a test, in its own directory and with an empty ini file (pytester's job,
    without needing pytester registered at the top level)."""

    def __init__(self, root: Path) -> None:
        self.path = root
        (root / "pytest.ini").write_text("[pytest]\n")

    def makefile(self, name: str, source: str) -> None:
        (self.path / name).write_text(textwrap.dedent(source))

    def _args(self, args: tuple[str, ...]) -> list[str]:
        return [str(self.path), "-c", str(self.path / "pytest.ini"), "--rootdir", str(self.path),
                "-p", "no:cacheprovider", *args]

    def run(self, *args: str) -> PytestRun:
        out, err = io.StringIO(), io.StringIO()
        cwd, modules = os.getcwd(), set(sys.modules)
        os.chdir(self.path)
        try:
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                ret = pytest.main(self._args(args))
        finally:
            os.chdir(cwd)
            for name in set(sys.modules) - modules:  # the inner run's test modules, as pytester does
                if str(self.path) in str(getattr(sys.modules[name], "__file__", "") or ""):
                    del sys.modules[name]
        return PytestRun(int(ret), out.getvalue(), err.getvalue(), self.path)

    def run_subprocess(self, *args: str) -> PytestRun:
        done = subprocess.run([sys.executable, "-m", "pytest", *self._args(args)], cwd=self.path,
                              capture_output=True, text=True, timeout=120)
        return PytestRun(done.returncode, done.stdout, done.stderr, self.path)


@pytest.fixture
def inner(tmp_path: Path) -> InnerPytest:
    root = tmp_path / "project"
    root.mkdir()
    return InnerPytest(root)
