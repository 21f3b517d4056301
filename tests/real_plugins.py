"""Real PJRT plugin wheels for the tests: fetched once into the wheel cache, skipped where they
cannot be had. ``xla-cpu-pjrt`` 0.0.1 (API 0.81) is the default; tests of the others are marked
``real_plugin_extra`` and run only when asked (``-m real_plugin_extra`` or
``PJRT_HUB_EXTRA_PLUGINS=1``), since each is a 60-190 MB wheel."""

from __future__ import annotations

import os
import platform

import pytest

from pjrt_hub.backends.c_api.wheels import WheelUnavailable, plugin_library

#: The default real plugin: no Python dependencies, x86_64 and aarch64 wheels, API 0.81.
DEFAULT_PLUGIN = "xla-cpu-pjrt==0.0.1"
#: The newer CPU plugins (x86_64 only): API 0.106 and 0.115.
FASTATOMSTRUCT = "fastatomstruct-xla-cpu==2026.6.23"
LAMMPS = "lammps-jax-pjrt-cpu==0.11.2"


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


def skip_extra_unless_asked(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Skip the ``real_plugin_extra`` tests unless they were asked for (a conftest hook body)."""
    wanted = "real_plugin_extra" in (config.getoption("-m") or "") or os.environ.get("PJRT_HUB_EXTRA_PLUGINS")
    if wanted:
        return
    skip = pytest.mark.skip(reason="extra real plugin: opt in with -m real_plugin_extra or PJRT_HUB_EXTRA_PLUGINS=1")
    for item in items:
        if "real_plugin_extra" in item.keywords:
            item.add_marker(skip)
