"""Fixtures for the C bridge: real plugin wheels (downloaded once), a client of the default
plugin (xla-cpu-pjrt 0.0.1, PJRT C API 0.81), and a C compiler for fake plugins.

Tests marked ``real_plugin_extra`` use further wheels (60-190 MB each) and run only when asked:
``pytest -m real_plugin_extra`` or ``PJRT_HUB_EXTRA_PLUGINS=1``.
"""

from __future__ import annotations

import os
import platform
import shutil
import subprocess
from pathlib import Path
from typing import Callable, Iterator

import pytest

from pjrt_hub.backends.c_api import CApi, CClient, load_api
from pjrt_hub.backends.c_api.wheels import WheelUnavailable, plugin_library

#: The default real plugin: no Python dependencies, x86_64 and aarch64 wheels, API 0.81.
DEFAULT_PLUGIN = "xla-cpu-pjrt==0.0.1"

ADD_PROGRAM = """func.func @main(%a: tensor<4xf32>, %b: tensor<4xf32>) -> tensor<4xf32> {
  %0 = stablehlo.add %a, %b : tensor<4xf32>
  return %0 : tensor<4xf32>
}"""


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    wanted = "real_plugin_extra" in (config.getoption("-m") or "") or os.environ.get("PJRT_HUB_EXTRA_PLUGINS")
    if wanted:
        return
    skip = pytest.mark.skip(reason="extra real plugin: opt in with -m real_plugin_extra or PJRT_HUB_EXTRA_PLUGINS=1")
    for item in items:
        if "real_plugin_extra" in item.keywords:
            item.add_marker(skip)


def real_plugin(requirement: str) -> str:
    """The plugin library of a wheel, fetched once into the cache; skip when it cannot be had."""
    if platform.system() != "Linux":
        pytest.skip(f"{requirement}: PJRT plugin wheels on PyPI are Linux-only")
    try:
        return plugin_library(requirement)
    except WheelUnavailable as exc:
        pytest.skip(f"{requirement} is not available here: {exc}")
    except FileNotFoundError as exc:
        pytest.skip(f"{requirement}: {exc}")


@pytest.fixture(scope="session")
def xla_cpu_path() -> str:
    return real_plugin(DEFAULT_PLUGIN)


@pytest.fixture(scope="session")
def api(xla_cpu_path: str) -> CApi:
    return load_api(xla_cpu_path)


@pytest.fixture(scope="session")
def client(api: CApi) -> Iterator[CClient]:
    client = api.client_create()
    yield client
    client.destroy()


@pytest.fixture(scope="session")
def cc() -> str:
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        pytest.skip("no C compiler to build fake plugins")
    return compiler


@pytest.fixture
def build_so(cc: str, tmp_path: Path) -> Callable[..., str]:
    """Compile C source into a shared library in tmp_path; return its path."""

    def build(name: str, source: str, *extra: str) -> str:
        src = tmp_path / f"{name}.c"
        src.write_text(source)
        out = tmp_path / f"lib{name}.so"
        subprocess.run([cc, "-shared", "-fPIC", "-O1", "-o", str(out), str(src), *extra], check=True,
                       capture_output=True, text=True)
        return str(out)

    return build
