"""Shared fixtures: real fake distributions that importlib.metadata finds on sys.path."""

from __future__ import annotations

import importlib
import os
import shutil
import sys
import textwrap
from pathlib import Path
from typing import Callable, Iterator

import pytest

#: Environment variables that change what the registry does; cleared for every test.
_REGISTRY_ENV = (
    "PJRT_HUB_DISABLE_PLUGINS", "PJRT_HUB_PLUGINS", "PJRT_HUB_PLUGIN_AUTOLOAD", "PJRT_DEVICE",
    "PJRT_HUB_STRICT", "ENABLE_PJRT_COMPATIBILITY", "PJRT_NAMES_AND_LIBRARY_PATHS",
)


@pytest.fixture(autouse=True, scope="session")
def _private_probe_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Probe reports are cached on disk (``~/.cache/pjrt-hub/probe`` by default); the suite keeps
    its own cache, inherited by the processes it starts, so it never fills the user's."""
    before = os.environ.get("PJRT_HUB_PROBE_CACHE")
    os.environ["PJRT_HUB_PROBE_CACHE"] = str(tmp_path_factory.mktemp("probe-cache"))
    yield
    if before is None:
        os.environ.pop("PJRT_HUB_PROBE_CACHE", None)
    else:
        os.environ["PJRT_HUB_PROBE_CACHE"] = before


@pytest.fixture(autouse=True, scope="session")
def _no_machine_kernels(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """numba_cpu's machine kernels are built once per machine by a detached process (see
    .machine_kernels). The suite runs without them, so that no test starts a build nor depends
    on one having run (their bits are the numpy twins', which the eager tests check), and points
    their directory at a private one; test_machine_kernels.py turns them on where it builds them."""
    before = {k: os.environ.get(k) for k in ("PJRT_HUB_MACHINE_KERNELS", "PJRT_HUB_MACHINE_CACHE")}
    os.environ["PJRT_HUB_MACHINE_KERNELS"] = "0"
    os.environ["PJRT_HUB_MACHINE_CACHE"] = str(tmp_path_factory.mktemp("machine-kernels"))
    yield
    for name, value in before.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value


@pytest.fixture(autouse=True)
def _clean_registry_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in _REGISTRY_ENV:
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty site directory at the front of sys.path; modules imported from it are forgotten."""
    root = tmp_path / "site"
    root.mkdir()
    monkeypatch.syspath_prepend(str(root))
    before = set(sys.modules)
    yield root
    for name in set(sys.modules) - before:
        module = sys.modules.get(name)
        if getattr(module, "__file__", None) and str(root) in str(module.__file__):
            del sys.modules[name]
    importlib.invalidate_caches()


FakeDist = Callable[..., Path]


@pytest.fixture
def fake_dist(site: Path) -> FakeDist:
    """Install a distribution into ``site``: metadata, entry points and module files.

    ``fake_dist("acme-plugin", "1.0", entry_points={"pjrt_hub.plugins": {"acme": "acme_plugin"}},
    files={"acme_plugin.py": "..."}, requires=["pjrt-hub>=0.1"])``
    """

    def make(name: str, version: str = "1.0", *, entry_points: dict[str, dict[str, str]] | None = None,
             files: dict[str, str | bytes] | None = None, requires: list[str] | None = None) -> Path:
        dist_info = site / f"{name.replace('-', '_')}-{version}.dist-info"
        dist_info.mkdir()
        meta = ["Metadata-Version: 2.1", f"Name: {name}", f"Version: {version}"]
        meta += [f"Requires-Dist: {r}" for r in requires or ()]
        (dist_info / "METADATA").write_text("\n".join(meta) + "\n")
        if entry_points:
            text = "".join(f"[{group}]\n" + "".join(f"{k} = {v}\n" for k, v in eps.items()) + "\n"
                           for group, eps in entry_points.items())
            (dist_info / "entry_points.txt").write_text(text)
        record = []
        for rel, content in (files or {}).items():
            path = site / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            if isinstance(content, bytes):
                path.write_bytes(content)
            else:
                path.write_text(textwrap.dedent(content))
            record.append(f"{rel},,")
        record.append(f"{dist_info.name}/METADATA,,")
        (dist_info / "RECORD").write_text("\n".join(record) + "\n")
        importlib.invalidate_caches()
        return dist_info

    return make


def plugin_source(version: str = "0.117", *, extra_decl: str = "", body: str = "",
                  api_version: str | None = None) -> str:
    """The source of a small but complete Python plugin module declaring ``version``."""
    api_version = api_version or version
    return f'''
from pjrt_hub.abi import Api, ApiVersion, Client, PluginDeclaration, hookimpl


class FakeClient(Client):
    def platform_name(self):
        return "fake"

    def process_index(self):
        return 0


class FakeApi(Api):
    def api_version(self):
        return ApiVersion.parse({api_version!r})

    def client_create(self, options=None):
        return FakeClient()


@hookimpl
def pjrt_hub_declare():
    return PluginDeclaration(api_version={version!r}, platform_name="fake"{extra_decl})


@hookimpl
def pjrt_hub_get_api():
    return FakeApi()
{body}
'''


# -- hypothesis profiles ------------------------------------------------------------------------
# "ci" (the default) is bounded and derandomized, so the suite's time and verdict do not depend on
# luck; "long" (`pytest --hypothesis-profile=long tests/generated`) explores thousands of examples.
try:
    from hypothesis import HealthCheck, settings
except ImportError:  # the generated tests skip themselves without hypothesis
    pass
else:
    settings.register_profile("ci", max_examples=12, derandomize=True, deadline=None, print_blob=True,
                              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
    settings.register_profile("long", max_examples=1000, deadline=None, print_blob=True,
                              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
    settings.register_profile("explore", max_examples=60, deadline=None, print_blob=True,
                              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
    settings.load_profile("ci")


@pytest.fixture(scope="session")
def cc() -> str:
    """A C compiler, for the tests that build fake plugins; they skip without one."""
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        pytest.skip("no C compiler to build fake plugins")
    return compiler
