"""Installing the fixture plugins: distributions written into a site directory of the output.

Each fixture is a real distribution as ``importlib.metadata`` sees it (``dist-info`` with an entry
point in ``pjrt_hub.plugins``), so the registry finds it by discovery like any plugin. The site
directory goes on ``PYTHONPATH`` of the cell processes only; nothing is installed into the
environment itself.
"""

from __future__ import annotations

import hashlib
import inspect
from pathlib import Path
from typing import Sequence

from ._axes import FixturePlugin

__all__ = ["fixture_identity", "install_fixtures"]

_VERSION = "1.0"


def _module_name(fixture: FixturePlugin) -> str:
    return f"pjrt_matrix_{fixture.name}"


def _source(fixture: FixturePlugin) -> str:
    if fixture.source is not None:
        return fixture.source
    return ("from pjrt_hub.testing.toy import ToyPlugin\n\n"
            f"plugin = ToyPlugin(api_version={fixture.api_version!r}, "
            f"min_framework_version={fixture.min_framework_version!r}, description={fixture.description!r})\n")


def fixture_identity(fixture: FixturePlugin) -> str:
    """The fixture's source and the toy plugin's code: a change to either re-runs its cells."""
    from pjrt_hub.testing import toy

    digest = hashlib.sha256(_source(fixture).encode())
    digest.update(inspect.getsource(toy).encode())
    return f"{fixture.distribution} {_VERSION} toy:{digest.hexdigest()[:12]}"


def install_fixtures(site: Path, fixtures: Sequence[FixturePlugin]) -> Path:
    """Write ``fixtures`` as distributions into ``site`` (created, and cleared of old fixtures)."""
    site.mkdir(parents=True, exist_ok=True)
    for old in site.glob("pjrt_matrix_*"):
        if old.is_dir():
            for f in old.iterdir():
                f.unlink()
            old.rmdir()
        else:
            old.unlink()
    for fixture in fixtures:
        module = _module_name(fixture)
        (site / f"{module}.py").write_text(_source(fixture))
        info = site / f"{module}-{_VERSION}.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {fixture.distribution}\nVersion: {_VERSION}\n"
                                       f"Summary: {fixture.description}\n")
        (info / "entry_points.txt").write_text(f"[pjrt_hub.plugins]\n{fixture.name} = {module}:plugin\n")
        (info / "RECORD").write_text(f"{module}.py,,\n{info.name}/METADATA,,\n")
    return site
