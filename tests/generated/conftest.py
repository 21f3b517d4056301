"""Clients for the generated tests: the two built-in plugins, and the real XLA CPU plugin where
it can be had (a 60 MB wheel, fetched once into the cache)."""

from __future__ import annotations

import pytest

from pjrt_hub import PluginRegistry


@pytest.fixture(scope="session")
def clients():
    """numba_cpu and reference, through the registry and the runtime as a user gets them."""
    pytest.importorskip("numba")
    registry = PluginRegistry()
    return {name: registry.create_client(name) for name in ("numba_cpu", "reference")}


@pytest.fixture(scope="session")
def xla_client():
    """The real XLA CPU plugin (xla-cpu-pjrt 0.0.1, PJRT C API 0.81) through the C bridge;
    skipped where its wheel cannot be had."""
    from pjrt_hub.backends.c_api import load_api

    from ..real_plugins import DEFAULT_PLUGIN, real_plugin

    client = load_api(real_plugin(DEFAULT_PLUGIN)).client_create()
    yield client
    client.destroy()
