"""The axes of the matrix: framework versions, plugins, environments.

Framework versions are acted in one environment (the version policy's ``framework``), so they
cost nothing to add. Plugins are whatever the environment has installed (discovered without
importing them), plus the fixture plugins the matrix installs itself: the toy plugin of
:mod:`pjrt_hub.testing.toy` at skewed versions and with backward policies, which show every rule
of the policy, and, when asked, the real C plugins of :data:`REAL_C_PLUGINS` from the wheel cache. Environments (a Python, a numba, a plugin distribution) are tox environments.
"""

from __future__ import annotations

import importlib.metadata as md
import platform
from dataclasses import dataclass

from pjrt_hub.abi import ApiVersion, history

__all__ = ["DEFAULT_FRAMEWORKS", "FIXTURE_PLUGINS", "FixturePlugin", "KNOWN_C_DISTRIBUTIONS", "REAL_C_PLUGINS",
           "RealCPlugin", "environment_facts"]

#: 0.81, 0.106 and 0.115 are the real CPU plugins' versions; 0.95 sits between; the newest is ours.
DEFAULT_FRAMEWORKS: tuple[ApiVersion, ...] = tuple(sorted({
    ApiVersion(0, 81), ApiVersion(0, 95), ApiVersion(0, 106), ApiVersion(0, 115), history.NEWEST_KNOWN}))


@dataclass(frozen=True)
class FixturePlugin:
    """A toy plugin distribution the matrix installs: a version, and maybe a backward policy."""

    name: str
    api_version: str
    min_framework_version: str | None = None
    description: str = ""
    #: The module's source, to install something other than the toy (tests: a crashing plugin).
    #: It must define ``plugin``.
    source: str | None = None

    @property
    def distribution(self) -> str:
        return f"pjrt-matrix-{self.name.replace('_', '-')}"


FIXTURE_PLUGINS: tuple[FixturePlugin, ...] = (
    FixturePlugin("toy_0_81", "0.81", None, "a plugin at 0.81 (xla-cpu-pjrt's version), no backward policy"),
    FixturePlugin("toy_0_95_back_0_81", "0.95", "0.81", "a plugin at 0.95 that supports frameworks back to 0.81"),
    FixturePlugin("toy_0_106", "0.106", None, "a plugin at 0.106, no backward policy: refused by older frameworks"),
    FixturePlugin("toy_0_115_back_0_95", "0.115", "0.95", "a plugin at 0.115 that supports frameworks back to 0.95"),
    FixturePlugin(f"toy_0_{history.NEWEST_KNOWN.minor}", str(history.NEWEST_KNOWN), None,
                  "a plugin at the newest version of the history"),
)


#: C plugin distributions that ship a PJRT library but no entry point (they expose a path
#: instead): distribution -> the plugin name the matrix gives them. Found by their file lists.
KNOWN_C_DISTRIBUTIONS: dict[str, str] = {
    "fastatomstruct-xla-cpu": "fastatomstruct_xla_cpu",
    "lammps-jax-pjrt-cpu": "lammps_jax_pjrt_cpu",
}


@dataclass(frozen=True)
class RealCPlugin:
    """A real PJRT C plugin on PyPI the matrix can fetch into the wheel cache (``--c-plugins``)."""

    #: The plugin's name in the matrix: its entry point's, or the one KNOWN_C_DISTRIBUTIONS gives.
    name: str
    requirement: str
    api_version: str
    #: ``platform.machine()`` values it has wheels for.
    machines: tuple[str, ...]


#: The real CPU plugins: XLA's CPU client at three PJRT API versions (0.81, 0.106, 0.115).
REAL_C_PLUGINS: tuple[RealCPlugin, ...] = (
    RealCPlugin("xla_cpu_pjrt", "xla-cpu-pjrt==0.0.1", "0.81", ("x86_64", "aarch64")),
    RealCPlugin("fastatomstruct_xla_cpu", "fastatomstruct-xla-cpu==2026.6.23", "0.106", ("x86_64",)),
    RealCPlugin("lammps_jax_pjrt_cpu", "lammps-jax-pjrt-cpu==0.11.2", "0.115", ("x86_64",)),
)


def _version(dist: str) -> str | None:
    try:
        return md.version(dist)
    except md.PackageNotFoundError:
        return None


def environment_facts() -> dict[str, str | None]:
    """What distinguishes this environment: the Python and the numba it runs."""
    return {"python": platform.python_version(), "numba": _version("numba")}
