"""Fixtures for the C bridge: real plugin wheels (downloaded once), a client of the default
plugin (xla-cpu-pjrt 0.0.1, PJRT C API 0.81), and a C compiler for fake plugins.

Tests marked ``real_plugin_extra`` use further wheels (60-190 MB each) and run only when asked:
``pytest -m real_plugin_extra`` or ``PJRT_HUB_EXTRA_PLUGINS=1``.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Callable, Iterator

import pytest

from pjrt_hub.backends.c_api import CApi, CClient, load_api

from ...real_plugins import DEFAULT_PLUGIN, real_plugin, skip_extra_unless_asked

__all__ = ["ADD_PROGRAM", "DEFAULT_PLUGIN", "real_plugin"]

ADD_PROGRAM = """func.func @main(%a: tensor<4xf32>, %b: tensor<4xf32>) -> tensor<4xf32> {
  %0 = stablehlo.add %a, %b : tensor<4xf32>
  return %0 : tensor<4xf32>
}"""


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    skip_extra_unless_asked(config, items)


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
