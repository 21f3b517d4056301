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
from typing import TYPE_CHECKING

from pjrt_hub.abi import ApiVersion, history

if TYPE_CHECKING:
    from ._models import EnvironmentInfo

__all__ = ["DEFAULT_ENVIRONMENTS", "DEFAULT_FRAMEWORKS", "FIXTURE_PLUGINS", "FixturePlugin", "KNOWN_C_DISTRIBUTIONS",
           "MatrixEnvironment", "REAL_C_PLUGINS", "RealCPlugin", "environment_facts", "environment_info"]

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


@dataclass(frozen=True)
class MatrixEnvironment:
    """A tox environment of the matrix (tox.ini installs it) and the plugins it covers.

    A plan can only name plugins it knows before the environment exists: the fixture plugins, the
    plugins pjrt-hub ships, and the C plugin distributions the environment installs."""

    name: str
    python: str
    description: str
    fixtures: bool = True
    #: pjrt-hub's own plugins (numba_cpu, reference).
    builtins: bool = True
    c_plugins: tuple[RealCPlugin, ...] = ()

    @classmethod
    def from_name(cls, name: str) -> "MatrixEnvironment":
        """An environment of tox.ini that is not a default one: its Python from the name's ``pyXY``
        factor (else this Python), with the fixtures and the built-in plugins."""
        for env in DEFAULT_ENVIRONMENTS:
            if env.name == name:
                return env
        python = ".".join(platform.python_version_tuple()[:2])
        for factor in name.split("-"):
            if factor.startswith("py3") and factor[2:].isdigit():
                python = f"3.{factor[3:]}"
        return cls(name, python, f"the tox environment {name}")


#: The tox environments ``pjrt-hub matrix`` runs by default (tox.ini defines them): the supported
#: Pythons with the newest numba, the oldest numba and numpy pyproject.toml declares, and the real
#: C plugins (whose rows need nothing of numba).
DEFAULT_ENVIRONMENTS: tuple[MatrixEnvironment, ...] = (
    MatrixEnvironment("matrix-py311-numbalatest", "3.11", "Python 3.11 with the newest numba and numpy"),
    MatrixEnvironment("matrix-py311-numbamin", "3.11", "Python 3.11 with the oldest numba and numpy supported"),
    MatrixEnvironment("matrix-py312-numbalatest", "3.12", "Python 3.12 with the newest numba and numpy"),
    MatrixEnvironment("matrix-py313-numbalatest", "3.13", "Python 3.13 with the newest numba and numpy"),
    MatrixEnvironment("matrix-py311-cplugins", "3.11", "the real PJRT CPU plugins, installed from their wheels",
                      fixtures=False, builtins=False, c_plugins=REAL_C_PLUGINS),
)


def _version(dist: str) -> str | None:
    try:
        return md.version(dist)
    except md.PackageNotFoundError:
        return None


def environment_facts() -> dict[str, str | None]:
    """What distinguishes this environment for a cell's result: the Python, numba and numpy."""
    return {"python": platform.python_version(), "numba": _version("numba"), "numpy": _version("numpy")}


#: Distributions whose versions a cell result records besides Python, numba and numpy.
_RECORDED = ("llvmlite", "scipy", "ml_dtypes", "pydantic", "pluggy", "packaging", "pytest")


def environment_info(name: str, status: str = "ran", note: str | None = None) -> "EnvironmentInfo":
    """This environment, described: the versions of everything the cells depend on, and the host."""
    from ._models import EnvironmentInfo

    facts = environment_facts()
    packages = {dist: version for dist in _RECORDED if (version := _version(dist))}
    host = f"{platform.system()} {platform.release()} {platform.machine()}, {platform.python_implementation()}"
    return EnvironmentInfo(name=name, python=facts["python"], numba=facts["numba"], numpy=facts["numpy"],
                           pjrt_hub=_version("pjrt-hub"), platform=host, packages=packages, status=status, note=note)
